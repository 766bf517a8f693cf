"""The orchestration phase's Slurm half over real SSH on the test cluster, against a real Slurm (Debian's slurm-wlm
22.05) with what a provider's production Slurm has: slurmdbd accounting on MariaDB with enforced associations, a
QoS and fairshare; fake GPUs as GRES (character devices the harness makes: not GPUs, they let Slurm's gres/gpu
plugin allocate and set CUDA_VISIBLE_DEVICES as on a GPU node); a topology of two leaf switches; a prolog and an
epilog of 0.5 s each (tests/cluster/slurm.py, Site).

One playbook run (--tags orchestration, quick profile) measures everything and reports it. The probe itself, started
as the play starts it, is stopped at its time limit while a job runs (what was measured is kept and no job is left
behind), and runs on the bare Slurm (no accounting, GPUs or topology): accounting absent is a finding, the rest
skips with reasons. The Kubernetes half has no API server here: it is skipped with its reason
(tests/unit/test_orchestration_k8s.py replays recorded API responses)."""

import csv
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

import pytest
from cluster.slurm import Site, Slurm
from cluster.slurm import preflight as slurm_preflight
from helpers import ROOT, run_dirs, run_playbook

from reports.grading.kinds import CLUSTER_KINDS, register_phase_kinds
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts

pytestmark = pytest.mark.cluster

SITE = Site(accounting=True, gpus_per_node=2, switches=2, prolog_epilog_s=0.5, cpus_per_node=2)


def _play(cluster, tmp, *extra):
    inv = cluster.write_inventory(str(tmp / "cluster.ini"))
    out = tmp / "runs"
    started = time.monotonic()
    res = run_playbook(inv, "--tags", "orchestration", "-e", "assess_output_dir=%s" % out, "-e",
                       "assess_profile=quick", *extra, timeout=600)
    seconds = time.monotonic() - started
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    first = cluster.hosts[0]["name"]
    doc = json.loads((run_dir / "artifacts" / first / "slurm_jobs.json").read_text())
    with open(run_dir / "report" / "checks.csv") as fh:
        checks = [r for r in csv.DictReader(fh) if r["check_id"].startswith("orchestration.")]
    return {"doc": doc, "checks": checks, "seconds": seconds, "run_dir": run_dir,
            "report": (run_dir / "report" / "report.md").read_text(),
            "queue": cluster.exec(first, ["squeue", "-h", "-o", "%i %j %T"], timeout=30).stdout.split("\n"),
            "shared": Path.home() / ".clustermax-assess" / doc["run_id"]}


def _probe(cluster, run_id, params, timeout):
    """The probe itself on the first host, as the play starts it (--timeout), without the playbook around it. Its
    output goes under the checkout's .cache: the hosts share /work, not /tmp."""
    out = ROOT / ".cache" / ("test-orchestration-%s" % uuid.uuid4().hex[:8])
    first = cluster.hosts[0]["name"]
    argv = [sys.executable, "-m", "probes", "slurm_jobs", "--out", str(out), "--host", first, "--run-id", run_id,
            "--params", json.dumps(params), "--timeout", str(timeout)]
    try:
        cp = cluster.exec(first, argv, timeout=timeout + 120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert cp.returncode == 0, cp.stderr[-2000:]
        doc = json.loads((out / "slurm_jobs.json").read_text())
    finally:
        shutil.rmtree(out, ignore_errors=True)
    rubric = {c["id"]: c for c in load_rubric()["checks"] if c["id"].startswith("orchestration.slurm")}
    run = run_of_artifacts([doc])
    register_phase_kinds()
    checks = [r for c in rubric.values() for r in CLUSTER_KINDS[c["kind"]](c, run, run.hosts)]
    return {"doc": doc, "checks": checks,
            "queue": cluster.exec(first, ["squeue", "-h", "-o", "%i %j %T"], timeout=30).stdout.split("\n"),
            "shared": Path.home() / ".clustermax-assess" / doc["run_id"]}


@pytest.fixture(scope="module")
def orchestration(test_cluster, tmp_path_factory):
    reason = slurm_preflight(accounting=True)
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("orchestration")
    runs = {}
    slurm = Slurm(test_cluster, slurmd_timeout=10, health_check_interval=60, site=SITE)
    try:
        slurm.up()
        runs["site"] = _play(test_cluster, tmp / "site")
        # Stopped at its time limit of 12 s while the first of three launch jobs of 60 s runs: that job was seen
        # RUNNING (a sample), then cancelled.
        runs["timeout"] = _probe(test_cluster, "20261203T000000Z-limit1",
                                 {"launch_samples": 3, "hold_s": 60, "job_timeout_s": 60}, timeout=12)
        slurm.site = Site()
        slurm.up()
        runs["bare"] = _probe(test_cluster, "20261203T000000Z-bare01", {}, timeout=300)
    finally:
        slurm.down()
    return runs


def _values(doc, metric):
    return [r["value"] for r in doc["results"] if r["metric"] == metric]


def _status(checks, check_id):
    return {(r["host"], r["subject"]): r for r in checks if r["check_id"] == check_id}


def test_slurm_half_measures_everything_and_leaves_nothing(orchestration, test_cluster):
    run = orchestration["site"]
    doc = run["doc"]
    assert doc["status"] == "ok", doc["reason"]
    assert {t: v["status"] for t, v in doc["facts"]["tests"].items()} == {
        t: "ok" for t in ("launch", "salloc", "array_vs_loop", "gres", "exclusive", "topology", "refused_account",
                          "accounting")}
    # Three timed batch jobs; the harness's prolog and epilog each sleep 0.5 s, which the probe must see.
    assert len(_values(doc, "submit_to_running_s")) == 3
    assert all(0 < v < 30 for v in _values(doc, "submit_to_running_s"))
    # RUNNING is seen up to one poll late (running_seen_within_s): the prolog's 0.5 s lies within that bracket.
    prolog = list(zip(_values(doc, "prolog_launch_s"), _values(doc, "running_seen_within_s")))
    assert len(prolog) == 3 and all(low < 5 and low + late >= 0.5 for low, late in prolog), prolog
    assert all(v >= 0.5 for v in _values(doc, "epilog_s")), _values(doc, "epilog_s")
    # the launch node's clock was read against the probe's (srun date inside a salloc), and each script time carries
    # that reading's uncertainty plus the poll's
    clocks = doc["facts"]["node_clocks"]
    assert clocks and all(c["uncertainty_s"] < 1 and abs(c["offset_s"]) < 1 for c in clocks.values()), clocks
    assert len(_values(doc, "prolog_launch_uncertainty_s")) == len(_values(doc, "epilog_uncertainty_s")) == 3
    for start, running in zip(_values(doc, "submit_to_script_s"), _values(doc, "submit_to_running_s")):
        assert start > running
    assert len(_values(doc, "srun_step_s")) == 5 and len(_values(doc, "salloc_to_shell_s")) == 1
    # The array is one submit RPC for 8 jobs, the loop 8.
    rpcs = {r["labels"]["mode"]: r["value"] for r in doc["results"] if r["metric"] == "submit_rpcs"}
    assert rpcs == {"array": 1, "loop": 8}
    # Fake GPUs as GRES: each request sees exactly what it asked for.
    requests = {r["flag"]: r for r in doc["facts"]["gres"]["requests"]}
    assert {f: len(r["cuda_visible_devices"].split(",")) for f, r in requests.items()} == {
        "--gres=gpu:1": 1, "--gres=gpu:2": 2, "--gpus=1": 1}
    ex = doc["facts"]["exclusive"]
    assert ex["job_cpus"] == ex["node_cpus"] == 2 and ex["second_job_refused"]
    leaves = {"leaf1": set(h["name"] for h in test_cluster.hosts[:2]), "leaf2": set(h["name"] for h in
                                                                                    test_cluster.hosts[2:])}
    for placement in doc["facts"]["topology"]["placements"]:
        assert any(set(placement["nodes"]) <= nodes for nodes in leaves.values()), placement
    acct = doc["facts"]["accounting"]
    assert acct["jobs"] and all(j["in_sacct"] and "cpu=" in j["AllocTRES"] for j in acct["jobs"]), acct["jobs"]
    assert all("gres/gpu=" in j["AllocTRES"] for j in acct["jobs"] if j["test"] == "gres")
    assert {"cmxa-research", "root"} <= {a[1] for a in acct["associations"]}
    assert "cmxa-high" in {q[0] for q in acct["qos"]}
    assert doc["facts"]["refused_account"]["refused"]
    # Nothing left: no job in the queue, no file in the shared directory.
    assert doc["facts"]["left_in_queue"] == [] and [q for q in run["queue"] if q.strip()] == []
    assert not run["shared"].exists()
    # The "under 2 minutes" is measured and printed, not asserted (no timed assertion on a shared machine).
    print("orchestration quick playbook: %.1f s, probe %.1f s" % (run["seconds"], doc["duration_s"]))


def test_checks_pass_on_a_production_slurm_and_count_in_coverage(orchestration):
    run = orchestration["site"]
    slurm_rows = [r for r in run["checks"] if r["check_id"].startswith("orchestration.slurm")]
    first = run["doc"]["host"]
    assert {r["host"] for r in slurm_rows} == {first}
    assert {r["check_id"]: r["status"] for r in slurm_rows} == {
        c: "pass" for c in ("orchestration.slurm.ran", "orchestration.slurm_job_churn", "orchestration.slurm_salloc",
                            "orchestration.slurm_srun_step", "orchestration.slurm_prolog",
                            "orchestration.slurm_epilog", "orchestration.slurm_job_arrays",
                            "orchestration.slurm_gpu_allocation", "orchestration.slurm_exclusive",
                            "orchestration.slurm_topology_placement", "orchestration.slurm_accounting",
                            "orchestration.slurm_account_enforced", "orchestration.slurm_cleanup")}
    assert len(_status(run["checks"], "orchestration.slurm_gpu_allocation")) == 3
    # The Kubernetes half: no kubectl on the test hosts, a skip with that reason.
    k8s = [r for r in run["checks"] if r["check_id"].startswith("orchestration.k8s")]
    assert k8s and all(r["status"] == "skip" and "kubectl" in r["reason"] for r in k8s), k8s
    ratings = json.loads((run["run_dir"] / "report" / "ratings.json").read_text())
    orch = next(c for c in ratings["categories"] if c["id"] == "orchestration")
    assert orch["counts"]["pass"] >= 15 and orch["coverage"] > 0, orch


def test_report_shows_the_slurm_half(orchestration):
    report = orchestration["site"]["report"]
    section = report[report.index("## Orchestration"):]
    for text in ("### Slurm", "sbatch to RUNNING", "A job array against a loop of sbatch calls",
                 "GPU allocation (2 GPUs per node)", "`--gres=gpu:2`", "leaf1", "of 2 CPUs",
                 "submitted jobs in sacct", "refused", "0 left in the queue"):
        assert text in section, text


def test_bare_slurm_accounting_absent_is_a_finding_and_the_rest_skips(orchestration):
    run = orchestration["bare"]
    doc = run["doc"]
    tests = doc["facts"]["tests"]
    assert tests["gres"]["status"] == "skipped" and "GRES" in tests["gres"]["reason"]
    assert tests["topology"]["status"] == "skipped"
    rows = {r["check_id"]: r for r in run["checks"] if r["host"] == doc["host"]}
    assert rows["orchestration.slurm_accounting"]["status"] == "fail"
    assert "no slurmdbd accounting" in rows["orchestration.slurm_accounting"]["reason"]
    # Without enforcement a job charged to any account is accepted: a finding, and the job is cancelled.
    assert rows["orchestration.slurm_account_enforced"]["status"] == "fail"
    assert rows["orchestration.slurm_gpu_allocation"]["status"] == "skip"
    assert rows["orchestration.slurm_topology_placement"]["status"] == "skip"
    for check in ("orchestration.slurm_job_churn", "orchestration.slurm_job_arrays", "orchestration.slurm_exclusive",
                  "orchestration.slurm_cleanup"):
        assert rows[check]["status"] == "pass", rows[check]
    assert [q for q in run["queue"] if q.strip()] == []


def test_probe_stopped_at_its_time_limit_keeps_what_it_measured_and_leaves_no_job(orchestration):
    run = orchestration["timeout"]
    doc = run["doc"]
    assert doc["status"] == "error" and "timed out" in doc["reason"], doc["reason"]
    # The first launch job reached RUNNING before the limit: that sample is kept.
    assert len(_values(doc, "submit_to_running_s")) == 1
    assert doc["facts"]["submitted"] and doc["facts"]["left_in_queue"] == []
    assert [q for q in run["queue"] if q.strip()] == []
    assert not run["shared"].exists()
