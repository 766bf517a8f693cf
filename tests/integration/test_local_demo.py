"""The embedded default: assess.yml against this machine through inventories/local.ini (no SSH, no root).

Every test that assesses this machine lives here: this machine has one run lock (/tmp/clustermax-assess.lock), so a
second local run beside one of them is refused, as it should be. One module is one unit of work under `make test`
(tests/conftest.py), so its tests never run beside each other.
"""

import csv
import json
import os
import socket
import sys
from pathlib import Path

from helpers import ROOT, ansible_env, read_journal, run_dirs, run_playbook

from reports.grading import load_rubric

AUDIT_IDS = {c["id"] for c in load_rubric()["checks"] if c["id"].startswith("audit.")}


def test_local_assessment_writes_the_inventory_of_this_machine(tmp_path):
    out = tmp_path / "runs"
    # every phase runs; the burn-in's quick durations (about 2 min) are cut to seconds: test_burnin.py covers it
    short_burnin = {"burnin_duration_s": 6, "burnin_fabric_duration_s": 3, "burnin_storage_phase_s": 2,
                    "burnin_storage_size_mib": 16, "burnin_interval_s": 2, "burnin_poll_s": 2}
    # The first python3 on PATH has no torch, as a system's beside `make venv`'s (`make demo` leaves PATH as it is):
    # the probes still run under the venv's Python (local.ini's assess_python). Before, they ran under this one, and
    # GEMM, collectives, training and the burn-in loads skipped or failed for want of torch.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python3").write_text('#!/bin/sh\nexec %s -S "$@"\n' % os.path.realpath(sys.executable))
    (bare / "python3").chmod(0o755)
    env = ansible_env()
    env["PATH"] = "%s:%s" % (bare, env["PATH"])
    res = run_playbook(ROOT / "inventories" / "local.ini", "-e", "assess_profile=quick",
                       "-e", "assess_output_dir=%s" % out, "-e", json.dumps(short_burnin), env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    [run_dir] = run_dirs(out)
    assert run_dir.parent.name == "local"
    # the callback printed the summary and the report's path
    assert "report: %s" % (run_dir / "report" / "report.md") in res.stdout
    doc = json.loads((run_dir / "artifacts" / "localhost" / "node_info.json").read_text())
    assert doc["status"] == "ok" and doc["facts"]["hostname"] == socket.gethostname()
    assert Path(doc["facts"]["python_executable"]).parent == Path(sys.executable).parent  # the venv's bin
    for probe in ("gemm", "burnin"):
        loaded = json.loads((run_dir / "artifacts" / "localhost" / ("%s.json" % probe)).read_text())
        assert loaded["status"] == "ok" and loaded["device"]["backend"] == "cpu", (probe, loaded.get("reason"))
        assert "worker_exits" not in loaded["facts"], loaded["facts"]
    md = (run_dir / "report" / "report.md").read_text()
    assert "| localhost | %s |" % socket.gethostname() in md
    with open(run_dir / "report" / "checks.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["host"] for r in rows} == {"localhost"}
    assert [r["status"] for r in rows if r["check_id"] == "preflight.node_info"] == ["pass"]
    journal = read_journal(run_dir)
    assert any(line.get("task", "").endswith("node inventory") and line.get("status") == "ok" for line in journal)
    run = json.loads((run_dir / "run.json").read_text())
    assert run["stats"]["localhost"]["failures"] == 0
    # nothing of the run is left on the node
    assert not Path("/tmp/clustermax-assess-%s" % run_dir.name).exists()


def test_local_audit_under_check_mode(tmp_path):
    """The embedded default under --check: the audit is read-only, so it still runs."""
    out = tmp_path / "runs"
    res = run_playbook(ROOT / "inventories" / "local.ini", "--check", "--tags", "audit",
                       "-e", "assess_output_dir=%s" % out)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    [run_dir] = run_dirs(out)
    doc = json.loads((run_dir / "artifacts" / "localhost" / "audit.json").read_text())
    assert doc["status"] == "ok"
    assert doc["facts"]["system"]["kernel"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    with open(run_dir / "report" / "checks.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["check_id"].startswith("audit.")]
    assert {r["host"] for r in rows} == {"localhost"}
    assert {r["check_id"] for r in rows} == AUDIT_IDS and len(rows) == len(AUDIT_IDS)
    graded = [r for r in rows if r["status"] in ("pass", "warn", "fail")]
    assert len(graded) >= 20  # real verdicts on this machine, not only skips
    assert not list(Path("/tmp").glob("clustermax-assess-%s" % run_dir.name))
