"""assess.yml over real SSH against the network-namespace test cluster.

These tests exercise the foundation (preflight, artifacts, journal, report) and run only the preflight plays
(`--tags preflight`: the phases have their own integration tests), so each run takes seconds.
"""

import csv
import json
import os
import shutil
import sys
import uuid

import pytest
from helpers import ROOT, read_journal, run_dirs, run_playbook

pytestmark = pytest.mark.cluster
PREFLIGHT = ("--tags", "preflight")


def rows_by(run_dir):
    with open(run_dir / "report" / "checks.csv") as fh:
        return {(r["check_id"], r["host"]): r for r in csv.DictReader(fh)}


@pytest.fixture
def inventory(test_cluster, tmp_path):
    return test_cluster.write_inventory(str(tmp_path / "cluster.ini"), python=sys.executable)


def test_four_hosts_over_ssh(test_cluster, inventory, tmp_path):
    out = tmp_path / "runs"
    res = run_playbook(inventory, *PREFLIGHT, "-e", "assess_output_dir=%s" % out)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    names = sorted(h["name"] for h in test_cluster.hosts)
    assert len(names) == 4
    assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == names
    for name in names:
        doc = json.loads((run_dir / "artifacts" / name / "node_info.json").read_text())
        # each artifact was measured inside its own host: the UTS hostname proves it
        assert doc["status"] == "ok" and doc["facts"]["hostname"] == name
    md = (run_dir / "report" / "report.md").read_text()
    assert "4 in the inventory, 4 reachable, 0 unreachable" in md
    for name in names:
        assert "| %s | %s |" % (name, name) in md
    rows = rows_by(run_dir)
    assert {h for (_, h) in rows} == set(names)
    assert all(rows[("preflight.reachable", n)]["status"] == "pass" for n in names)
    # shared image: the consistency view finds no drift
    assert rows[("consistency.kernel", names[0])]["status"] == "pass"
    journal = read_journal(run_dir)
    assert {line["host"] for line in journal if line.get("task", "").endswith("node inventory")} == set(names)
    run = json.loads((run_dir / "run.json").read_text())
    assert all(run["stats"][n]["failures"] == 0 and run["stats"][n]["unreachable"] == 0 for n in names)
    # nothing left on the hosts: the run's working directory is gone from every host's private /tmp
    for name in names:
        res = test_cluster.exec(name, ["ls", "/tmp"])
        assert "clustermax-assess-" not in res.stdout


def test_unreachable_host_is_reported_and_the_others_finish(test_cluster, inventory, tmp_path):
    names = sorted(h["name"] for h in test_cluster.hosts)
    down = names[2]
    out = tmp_path / "runs"
    test_cluster.stop_sshd(down)
    try:
        res = run_playbook(inventory, *PREFLIGHT, "-e", "assess_output_dir=%s" % out)
    finally:
        test_cluster.start_sshd(down)
    assert res.returncode != 0  # ansible-playbook exits 4 when a host is unreachable
    [run_dir] = run_dirs(out)
    assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == sorted(set(names) - {down})
    md = (run_dir / "report" / "report.md").read_text()
    assert "4 in the inventory, 3 reachable, 1 unreachable" in md
    assert "**%s**" % down in md
    rows = rows_by(run_dir)
    assert rows[("preflight.reachable", down)]["status"] == "fail"
    assert rows[("preflight.node_info", down)]["status"] == "skip"
    assert all(rows[("preflight.node_info", n)]["status"] == "pass" for n in names if n != down)
    assert "unreachable: %s" % down in res.stdout


def test_second_run_never_touches_the_first(test_cluster, inventory, tmp_path):
    out = tmp_path / "runs"
    one = ("--limit", test_cluster.hosts[0]["name"])
    first = run_playbook(inventory, *PREFLIGHT, *one, "-e", "assess_output_dir=%s" % out)
    assert first.returncode == 0, first.stdout[-3000:]
    [run1] = run_dirs(out)
    before = {p: p.stat().st_mtime_ns for p in run1.rglob("*") if p.is_file()}
    second = run_playbook(inventory, *PREFLIGHT, *one, "-e", "assess_output_dir=%s" % out)
    assert second.returncode == 0
    runs = run_dirs(out)
    assert len(runs) == 2 and run1 in runs
    assert {p: p.stat().st_mtime_ns for p in run1.rglob("*") if p.is_file()} == before
    # an explicit run id that exists is refused, and the existing run is left as it was
    third = run_playbook(inventory, *PREFLIGHT, "-e", "assess_output_dir=%s" % out, "-e",
                         "assess_run_id=%s" % run1.name)
    assert third.returncode != 0
    assert "File exists" in third.stdout + third.stderr
    assert {p: p.stat().st_mtime_ns for p in run1.rglob("*") if p.is_file()} == before


def test_bad_profile_names_host_and_value_before_any_work(test_cluster, tmp_path):
    inv = test_cluster.write_inventory(str(tmp_path / "bad.ini"), python=sys.executable,
                                       extra_host_vars={test_cluster.hosts[1]["name"]: {"assess_profile": "turbo"}})
    out = tmp_path / "runs"
    res = run_playbook(inv, *PREFLIGHT, "-e", "assess_output_dir=%s" % out)
    assert res.returncode != 0
    text = res.stdout + res.stderr
    # the one validation (check_inputs, on the controller) names the host, the variable, the choices and the value
    assert 'assess_profile="turbo" (set for %s)' % test_cluster.hosts[1]["name"] in text
    assert "assess_profile must be one of: quick, standard, full, got: turbo" in text
    assert not out.exists()  # nothing was made, no node was touched


def test_node_without_python_is_named_and_the_run_refused_leaving_nothing(test_cluster, tmp_path):
    """Preflight is one task per node (find Python, lock, probes, node inventory): the nodes that have a Python took
    their inventory by the time the run is refused, and the refused run removes what it made on them."""
    bad = test_cluster.hosts[3]["name"]
    inv = test_cluster.write_inventory(str(tmp_path / "nopy.ini"), python=sys.executable,
                                       extra_host_vars={bad: {"assess_python": "/nonexistent/bin/python3"}})
    out = tmp_path / "runs"
    res = run_playbook(inv, *PREFLIGHT, "-e", "assess_output_dir=%s" % out)
    assert res.returncode != 0
    text = res.stdout + res.stderr
    assert "no usable Python >= 3.8 on %s (tried /nonexistent/bin/python3; set assess_python" % bad in text
    [run_dir] = run_dirs(out)
    assert not (run_dir / "artifacts" / bad).exists()
    assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == sorted(
        h["name"] for h in test_cluster.hosts if h["name"] != bad)
    for h in test_cluster.hosts:
        listing = test_cluster.exec(h["name"], ["ls", "-a", "/tmp"]).stdout
        assert "clustermax-assess" not in listing, (h["name"], listing)  # no working directory, no run lock


def test_a_node_whose_login_prints_noise_still_gets_its_python(test_cluster, tmp_path):
    """Python discovery runs over a terminal, where whatever the node prints (a shell init's warning, a banner) comes
    in the same output: only the marked line is the path, so the probes still start there."""
    noisy = test_cluster.hosts[1]["name"]
    wrapper_dir = ROOT / ".cache" / ("noisy-python-%s" % uuid.uuid4().hex[:8])  # the hosts see the checkout
    wrapper_dir.mkdir(parents=True)
    wrapper = wrapper_dir / "python3"
    # on the terminal, as a login script's warning is (the check's own stderr goes to /dev/null)
    noise = "bash: warning: setlocale: LC_ALL: cannot change locale"
    wrapper.write_text('#!/bin/sh\n(echo "%s" >/dev/tty) 2>/dev/null\nexec %s "$@"\n' % (noise, sys.executable))
    wrapper.chmod(0o755)
    try:
        inv = test_cluster.write_inventory(str(tmp_path / "noisy.ini"), python=sys.executable,
                                           extra_host_vars={noisy: {"assess_python": str(wrapper)}})
        out = tmp_path / "runs"
        res = run_playbook(inv, *PREFLIGHT, "-e", "assess_output_dir=%s" % out)
    finally:
        shutil.rmtree(wrapper_dir)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    doc = json.loads((run_dir / "artifacts" / noisy / "node_info.json").read_text())
    assert doc["status"] == "ok" and doc["facts"]["hostname"] == noisy
    assert rows_by(run_dir)[("preflight.node_info", noisy)]["status"] == "pass"


def test_empty_inventory_is_refused(tmp_path):
    inv = tmp_path / "empty.ini"
    inv.write_text("[nodes]\n")
    out = tmp_path / "runs"
    res = run_playbook(inv, *PREFLIGHT, "-e", "assess_output_dir=%s" % out)
    assert res.returncode != 0
    assert "has no hosts" in res.stdout + res.stderr
    assert not out.exists()


def test_check_mode_runs_read_only_probes(test_cluster, inventory, tmp_path):
    out = tmp_path / "runs"
    res = run_playbook(inventory, *PREFLIGHT, "--check", "-e", "assess_output_dir=%s" % out)
    assert res.returncode == 0, res.stdout[-3000:]
    [run_dir] = run_dirs(out)
    assert len(list((run_dir / "artifacts").glob("*/node_info.json"))) == 4
    assert os.path.exists(run_dir / "report" / "report.md")
