import csv
import json
from pathlib import Path

import pytest
from rating_runs import RUBRIC
from rating_runs import make_run as make_golden_run
from run_dirs import interrupt_run, unpack_recorded_run

from probes.artifact import Artifact, write_json_atomic
from reports.build import EXIT_CANNOT_RUN, EXIT_FINDINGS, EXIT_OK, OUTPUTS, build
from reports.cli import main as cli_main
from reports.grading import CHECK_COLUMNS


def node_info(host, kernel="6.8.0-124-generic", gpus=8, driver="570.211.01", mem=2 * 2**40):
    art = Artifact("node_info", "r1", host)
    art.facts.update(hostname=host, kernel=kernel, os="Ubuntu 24.04.2 LTS", arch="x86_64",
                     cpu_model="Intel(R) Xeon(R) Platinum 8480+", gpu_model="NVIDIA H100 80GB HBM3",
                     gpu_driver=driver, gpu_tool="nvidia-smi", python="3.12.3", torch="2.7.0")
    art.device.update(backend="cuda", model="NVIDIA H100 80GB HBM3", count=gpus, driver=driver)
    art.add("gpu_count", gpus, "count")
    art.add("cpu_logical_count", 224, "count")
    art.add("cpu_sockets", 2, "count")
    art.add("numa_nodes", 2, "count")
    art.add("memory_total_bytes", mem, "B")
    for i in range(gpus):
        art.add("gpu_memory_total_bytes", 81559 * 2**20, "B", gpu=i)
    return art.to_dict()


def make_run(tmp_path, hosts, docs, journal=(), finished=True):
    run_dir = tmp_path / "runs" / "acme" / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps(
        {"id": "r1", "dir": str(run_dir), "provider": "acme", "profile": "quick", "hosts": hosts,
         "started_at": "2026-11-30T10:00:00Z"}))
    for doc in docs:
        write_json_atomic(str(run_dir / "artifacts" / doc["host"] / "node_info.json"), doc)
    with open(run_dir / "journal.jsonl", "w") as fh:
        for line in journal:
            fh.write(json.dumps(line) + "\n")
    if finished:
        (run_dir / "run.json").write_text(json.dumps({"run_id": "r1", "provider": "acme", "profile": "quick",
                                                      "finished_at": "2026-11-30T10:01:00Z"}))
    return run_dir


def rows_of(run_dir):
    with open(run_dir / "report" / "checks.csv") as fh:
        return list(csv.DictReader(fh))


def test_healthy_four_node_run(tmp_path):
    hosts = ["n1", "n2", "n3", "n4"]
    run_dir = make_run(tmp_path, hosts, [node_info(h) for h in hosts])
    text, code, report_dir = build(run_dir)
    assert code == EXIT_OK
    rows = rows_of(run_dir)
    assert set(rows[0]) >= set(CHECK_COLUMNS) >= {"check_id", "category", "host", "status", "observed", "expected",
                                                   "reason"}
    assert {r["host"] for r in rows} == set(hosts)
    # every check for every host
    per_check = {}
    for r in rows:
        per_check.setdefault(r["check_id"], set()).add(r["host"])
    assert all(v == set(hosts) for v in per_check.values())
    # the node-inventory checks (the audit adds consistency checks of its own, skipped here: it did not run)
    assert {r["status"] for r in rows if r["check_id"].split(".")[0] in ("preflight", "consistency")} == {"pass"}
    # the phases' checks did not run here: skipped with their reason, never failed or missing
    assert {r["status"] for r in rows} <= {"pass", "skip"}
    assert all(r["reason"] for r in rows if r["status"] == "skip")
    md = (Path(report_dir) / "report.md").read_text()
    assert "4 in the inventory, 4 reachable, 0 unreachable" in md
    assert md.count("| n") >= 4 + 4 * len(per_check)
    assert "hosts: 4 (4 reachable)" in text and "report.md" in text
    assert (Path(report_dir) / "results.parquet").exists()


def test_odd_host_is_named_by_the_consistency_view(tmp_path):
    hosts = ["n1", "n2", "n3", "n4"]
    docs = [node_info(h) for h in hosts[:3]] + [node_info("n4", kernel="6.8.0-90-generic", gpus=7)]
    run_dir = make_run(tmp_path, hosts, docs)
    _, code, report_dir = build(run_dir)
    rows = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}
    kernel = rows[("consistency.kernel", "n4")]
    assert kernel["status"] == "warn" and kernel["observed"] == "6.8.0-90-generic"
    assert kernel["expected"] == "6.8.0-124-generic" and kernel["reason"] == "differs from 3 of 4 hosts"
    assert rows[("consistency.gpu_count", "n4")]["observed"] == "7"
    assert rows[("consistency.kernel", "n1")]["status"] == "pass"
    md = (Path(report_dir) / "report.md").read_text()
    assert "**differs**: n4 = 6.8.0-90-generic" in md
    assert code == EXIT_OK  # drift is a warning, not a failure


def test_memory_within_tolerance_is_consistent(tmp_path):
    hosts = ["n1", "n2", "n3"]
    docs = [node_info("n1"), node_info("n2"), node_info("n3", mem=int(2 * 2**40 * 0.995))]
    run_dir = make_run(tmp_path, hosts, docs)
    build(run_dir)
    rows = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}
    assert rows[("consistency.memory_total_bytes", "n3")]["status"] == "pass"


def test_unreachable_host_is_listed_and_fails(tmp_path):
    hosts = ["n1", "n2", "n3", "n4"]
    journal = [{"host": "n3", "task": "Preflight | find Python, take the run lock, stage the probes, node inventory",
                "status": "unreachable", "msg": "ssh: connect to host 10.0.0.3 port 22: Connection refused"},
               {"host": "localhost", "task": "Preflight | make the run directory", "status": "changed"}]
    run_dir = make_run(tmp_path, hosts, [node_info(h) for h in ("n1", "n2", "n4")], journal)
    text, code, report_dir = build(run_dir)
    assert code == EXIT_FINDINGS
    rows = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}
    assert rows[("preflight.reachable", "n3")]["status"] == "fail"
    assert "Connection refused" in rows[("preflight.reachable", "n3")]["reason"]
    assert rows[("preflight.node_info", "n3")]["status"] == "skip"
    assert rows[("consistency.kernel", "n3")]["reason"] == "host unreachable"
    assert "localhost" not in {h for (_, h) in rows}  # controller events are not hosts
    md = (Path(report_dir) / "report.md").read_text()
    assert "4 in the inventory, 3 reachable, 1 unreachable" in md
    assert "## Unreachable hosts" in md and "**n3**" in md
    assert "unreachable: n3" in text


def test_corrupt_artifact_is_shown_not_fatal(tmp_path):
    hosts = ["n1", "n2"]
    run_dir = make_run(tmp_path, hosts, [node_info("n1")])
    bad = run_dir / "artifacts" / "n2"
    bad.mkdir(parents=True)
    (bad / "node_info.json").write_text('{"schema": "clustermax.assess/artifact/v1", "run_id": ')
    _, code, report_dir = build(run_dir)
    assert code == EXIT_FINDINGS
    rows = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}
    assert rows[("preflight.node_info", "n2")]["status"] == "error"
    assert rows[("preflight.node_info", "n2")]["reason"].startswith("n2/node_info.json: unreadable JSON")
    assert "Artifacts that could not be read" in (Path(report_dir) / "report.md").read_text()


PREPARE_TASK = "Preflight | find Python, take the run lock, stage the probes, node inventory"


def test_failed_task_fails_the_host(tmp_path):
    journal = [{"host": "n2", "task": PREPARE_TASK, "status": "failed", "msg": "No space left"}]
    run_dir = make_run(tmp_path, ["n1", "n2"], [node_info("n1")], journal)
    _, code, _ = build(run_dir)
    rows = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}
    assert rows[("preflight.tasks", "n2")]["status"] == "fail"
    assert PREPARE_TASK in rows[("preflight.tasks", "n2")]["observed"]
    assert rows[("preflight.node_info", "n2")]["status"] == "skip"
    assert "dropped out after the failed task '%s'" % PREPARE_TASK in rows[("preflight.node_info", "n2")]["reason"]
    assert code == EXIT_FINDINGS


def test_interrupted_run_still_reports(tmp_path):
    run_dir = make_run(tmp_path, ["n1", "n2"], [node_info("n1")], finished=False)
    with open(run_dir / "journal.jsonl", "a") as fh:
        fh.write('{"host": "n2", "task": "half a li')  # torn last line
    text, _, report_dir = build(run_dir)
    assert "interrupted" in text
    assert "interrupted: partial results" in (Path(report_dir) / "report.md").read_text()


def test_cli_exit_codes(tmp_path, capsys):
    assert cli_main(["build", str(tmp_path / "missing")]) == EXIT_CANNOT_RUN
    assert "does not exist" in capsys.readouterr().err
    run_dir = make_run(tmp_path, ["n1"], [node_info("n1")])
    assert cli_main(["build", str(run_dir)]) == EXIT_OK


# ------------------------------------------------------------------------------------------------ cannot be judged
# A run with nothing measured exits 2 with the reason in its summary (reports.build.unjudgeable), never 0 ("all
# good") or 1 ("findings"); its report is written all the same.

def assert_reported(report_dir):
    assert all((Path(report_dir) / name).exists() for name in OUTPUTS)


def test_an_empty_run_directory_cannot_be_judged(tmp_path, capsys):
    run_dir = tmp_path / "runs" / "acme" / "r1"
    run_dir.mkdir(parents=True)
    assert cli_main(["build", str(run_dir), "--no-progress"]) == EXIT_CANNOT_RUN
    out, err = capsys.readouterr()
    why = "cannot be judged: the run directory names no hosts (no hosts in assess_run.json, no artifacts)"
    assert "  %s\n" % why in out
    assert "assess-report: %s" % why in err  # a caller that shows only stderr on exit 2 learns why
    assert_reported(run_dir / "report")


@pytest.mark.parametrize("inventory", [True, False], ids=["hosts-named", "no-assess_run.json"])
def test_a_run_whose_only_artifact_is_garbage_cannot_be_judged(tmp_path, inventory):
    run_dir = make_run(tmp_path, ["n1"], [])
    if not inventory:
        (run_dir / "assess_run.json").unlink()
    (run_dir / "artifacts" / "n1").mkdir(parents=True)
    (run_dir / "artifacts" / "n1" / "gemm.json").write_bytes(b"\x00\x17garbage{")
    text, code, report_dir = build(run_dir)
    assert code == EXIT_CANNOT_RUN
    assert "  cannot be judged: no readable artifact: 1 unreadable (n1/gemm.json)\n" in text
    assert_reported(report_dir)
    assert "n1/gemm.json" in (Path(report_dir) / "report.md").read_text()  # shown, not lost


def test_a_run_interrupted_before_any_phase_measured_cannot_be_judged(tmp_path, capsys):
    run_dir = interrupt_run(unpack_recorded_run(tmp_path), before_play="Audit")
    assert {p.name for p in (run_dir / "artifacts").glob("*/*")} == {"node_info.json"}
    assert cli_main(["build", str(run_dir), "--no-progress"]) == EXIT_CANNOT_RUN
    out = capsys.readouterr().out
    assert "- interrupted, partial" in out and "hosts: 4 (4 reachable)" in out
    assert ("  cannot be judged: interrupted before any phase measured anything (no run.json; only preflight's "
            "node_info artifacts)\n") in out
    assert_reported(run_dir / "report")
    rows = rows_of(run_dir)
    assert {r["status"] for r in rows if r["check_id"] == "preflight.node_info"} == {"pass"}  # still graded


def test_a_finished_run_of_preflight_alone_is_judged(tmp_path):
    """Only node_info, but the run reached its end (every phase left out with --tags): judged on what it has."""
    run_dir = make_run(tmp_path, ["n1", "n2"], [node_info("n1"), node_info("n2")])
    text, code, _ = build(run_dir)
    assert code == EXIT_OK and "cannot be judged" not in text


def test_a_run_interrupted_after_a_phase_keeps_its_exit_code(tmp_path):
    run_dir = interrupt_run(unpack_recorded_run(tmp_path), before_play="Network")
    assert {p.name for p in (run_dir / "artifacts" / "cmxbl-node1").glob("*.json")} >= {"node_info.json",
                                                                                       "audit.json", "gemm.json"}
    text, code, _ = build(run_dir)
    assert "- interrupted, partial" in text and "cannot be judged" not in text
    assert code == EXIT_FINDINGS  # the audit's failures, as in the finished run
    assert {r["status"] for r in rows_of(run_dir) if r["check_id"] == "compute.gemm_ran"} == {"pass"}


@pytest.mark.parametrize("quality,expected", [("excellent", EXIT_OK), ("poor", EXIT_FINDINGS)])
def test_an_interrupted_run_that_measured_keeps_0_or_1(tmp_path, quality, expected):
    run_dir = make_golden_run(tmp_path, quality)
    (run_dir / "run.json").unlink()
    text, code, _ = build(run_dir, rubric=RUBRIC, progress=False)
    assert "- interrupted, partial" in text and "cannot be judged" not in text
    assert code == expected


def test_lost_and_truncated_artifacts_are_error_rows_naming_them(tmp_path):
    """The journal says gemm ran on node2 but its artifact is gone; mamf's on node3 is cut in half."""
    run_dir = unpack_recorded_run(tmp_path)
    (run_dir / "artifacts" / "cmxbl-node2" / "gemm.json").unlink()
    mamf = run_dir / "artifacts" / "cmxbl-node3" / "mamf.json"
    mamf.write_bytes(mamf.read_bytes()[: mamf.stat().st_size // 2])
    text, code, _ = build(run_dir)
    assert code == EXIT_FINDINGS and "cannot be judged" not in text
    rows = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}
    lost = rows[("compute.gemm_ran", "cmxbl-node2")]
    assert (lost["status"], lost["observed"], lost["reason"]) == ("error", "no artifact", "probe gemm left no artifact")
    cut = rows[("compute.mamf_ran", "cmxbl-node3")]
    assert cut["status"] == "error" and cut["observed"] == "invalid artifact"
    assert cut["reason"].startswith("cmxbl-node3/mamf.json: unreadable JSON")
    assert rows[("compute.gemm_ran", "cmxbl-node1")]["status"] == "pass"


def test_a_lost_artifact_alone_turns_a_clean_run_into_findings(tmp_path):
    """node_info is missing on n2 although the journal shows the task that runs it there: exit 1, not 0."""
    journal = [{"host": "n2", "task": PREPARE_TASK, "probe": "node_info", "status": "ok"}]
    run_dir = make_run(tmp_path, ["n1", "n2"], [node_info("n1")], journal)
    _, code, _ = build(run_dir)
    row = {(r["check_id"], r["host"]): r for r in rows_of(run_dir)}[("preflight.node_info", "n2")]
    assert (row["status"], row["reason"]) == ("error", "probe node_info left no artifact")
    assert code == EXIT_FINDINGS


@pytest.mark.parametrize("status,expected", [("skipped", "skip"), ("error", "error")])
def test_probe_status_maps_to_check_status(tmp_path, status, expected):
    doc = node_info("n1")
    doc.update(status=status, reason="nvidia-smi exit 9: driver not loaded")
    run_dir = make_run(tmp_path, ["n1"], [doc])
    build(run_dir)
    row = {r["check_id"]: r for r in rows_of(run_dir)}["preflight.node_info"]
    assert row["status"] == expected and "driver not loaded" in row["reason"]
