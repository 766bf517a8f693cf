"""The monitoring phase's Prometheus half over real SSH on the test cluster, against real Debian prometheus (2.42) and
prometheus-node-exporter (1.5): a node exporter in every host, Prometheus in the first scraping them every second,
and DCGM-shaped series for two fake GPUs per host fed through the node exporters' textfile collector by the harness
(tests/cluster/monitoring.py: labelled "not DCGM, not a GPU").

One playbook run (--tags monitoring) with every case at once: node 1 all present and fresh; node 2's GPU 1 never had
a power series (missing); node 3's exporter stopped after Prometheus had scraped it (every series stale); node 4's
GPU 0 shows XID 79, written at a recorded time (seen, and when); the exporters answer /metrics without a credential
(open ports); a token file is given and never appears in the run. No Grafana runs here: its half is skipped with the
reason (tests/unit/test_monitoring_grafana.py replays recorded Grafana responses)."""

import csv
import json
import time

import pytest
from cluster.monitoring import Monitoring
from cluster.monitoring import preflight as monitoring_preflight
from helpers import run_dirs, run_playbook

from probes.artifact import Artifact
from reports.grading.kinds import CLUSTER_KINDS, register_phase_kinds
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts

pytestmark = pytest.mark.cluster

POWER = "DCGM_FI_DEV_POWER_USAGE"
SECRET = "cmxa-secret-token-7f3e9a1c"


@pytest.fixture(scope="module")
def monitoring(test_cluster, tmp_path_factory):
    reason = monitoring_preflight()
    if reason:
        pytest.skip(reason)
    tmp = tmp_path_factory.mktemp("monitoring")
    names = [h["name"] for h in test_cluster.hosts]
    mon = Monitoring(test_cluster, scrape_interval_s=1)
    token = tmp / "token"
    token.write_text(SECRET + "\n")
    try:
        mon.up(missing={names[1]: {(1, POWER)}})
        time.sleep(3)  # a few scrapes of every series, so that the stopped exporter's series existed
        mon.stop_exporter(names[2])
        injected = time.time()
        mon.write_gpus(names[3], gpus=2, xid={0: 79})
        time.sleep(3)
        inv = test_cluster.write_inventory(str(tmp / "cluster.ini"))
        out = tmp / "runs"
        # The token file is read on the first host; the hosts share /work but not /tmp: put it under the state dir.
        shared_token = mon.dir / "token"
        shared_token.write_text(token.read_text())
        started = time.monotonic()
        res = run_playbook(inv, "--tags", "monitoring", "-e", "assess_output_dir=%s" % out, "-e",
                           "monitoring_prometheus_token_file=%s" % shared_token, timeout=600)
        seconds = time.monotonic() - started
    finally:
        mon.down()
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    doc = json.loads((run_dir / "artifacts" / names[0] / "prometheus.json").read_text())
    with open(run_dir / "report" / "checks.csv") as fh:
        checks = [r for r in csv.DictReader(fh) if r["check_id"].startswith("monitoring.")
                  or r["check_id"] in ("monitoring.exporters_exposed", "monitoring.prometheus_write_endpoints")]
    print("monitoring playbook: %.1f s, probe %.1f s" % (seconds, doc["duration_s"]))
    return {"doc": doc, "checks": checks, "names": names, "run_dir": run_dir, "injected": injected,
            "report": (run_dir / "report" / "report.md").read_text()}


def _rows(run, check_id):
    return {r["subject"]: r for r in run["checks"] if r["check_id"] == check_id}


def test_every_case_is_graded(monitoring):
    n1, n2, n3, n4 = monitoring["names"]
    assert monitoring["doc"]["status"] == "ok", monitoring["doc"]["reason"]
    gpus = _rows(monitoring, "monitoring.gpu_telemetry")
    assert gpus[n1]["status"] == "pass" and gpus[n1]["observed"] == "14 of 14 series"
    assert gpus[n2]["status"] == "fail" and gpus[n2]["reason"] == "missing: GPU 1 %s" % POWER
    fresh = _rows(monitoring, "monitoring.fresh")
    assert fresh[n1]["status"] == "pass" and fresh[n4]["status"] == "pass"
    assert fresh[n3]["status"] == "fail" and fresh[n3]["observed"].startswith("0 of ")
    assert "DCGM_FI_DEV_GPU_TEMP{gpu=0} (not served)" in fresh[n3]["reason"]
    nodes = _rows(monitoring, "monitoring.node_telemetry")
    assert {n: r["status"] for n, r in nodes.items()} == {n: "pass" for n in (n1, n2, n3, n4)}
    # The scheduler's state is not exported on the test cluster: a finding, named.
    [sched] = _rows(monitoring, "monitoring.scheduler_telemetry").values()
    assert sched["status"] == "fail" and "no scheduler series" in sched["reason"]
    exposed = _rows(monitoring, "monitoring.exporters_exposed")
    assert {n: r["status"] for n, r in exposed.items()} == {n1: "warn", n2: "warn", n3: "pass", n4: "warn"}
    assert exposed[n1]["observed"] == "node_exporter (open 200)"
    [write] = _rows(monitoring, "monitoring.prometheus_write_endpoints").values()
    assert write["status"] == "pass"
    assert {r["host"] for r in monitoring["checks"] if r["check_id"].startswith("monitoring.")
            and r["check_id"] != "monitoring.dashboard"} <= {n1}


def test_the_injected_xid_is_seen_and_its_time_measured(monitoring):
    n4 = monitoring["names"][3]
    doc = monitoring["doc"]
    series = {w["labels"]["gpu"]: w["points"] for w in doc["facts"]["watch"]["DCGM_FI_DEV_XID_ERRORS"]
              if w["labels"]["node"] == n4}
    # GPU 0 held 0, then changed to 79 within a few scrapes of the write (the range query's step is the scrape
    # interval, 1 s); GPU 1 never changed.
    (t0, v0), (t1, v1) = series["0"]
    assert (v0, v1) == (0, 79) and t0 < monitoring["injected"]
    assert -1.0 <= t1 - monitoring["injected"] <= 10.0, t1 - monitoring["injected"]
    assert [v for _, v in series["1"]] == [0]
    # Graded against the injection the reliability phase records (its fault_inject result: injected_at by the node's
    # clock, the start by the batch's observer's, and the fault_injection artifact naming the observer), here the
    # harness's, by this machine's clock: every test host's, the first host's included (the observer named, where the
    # probe ran). The probe read the Prometheus server's clock against that host's.
    assert set(doc["facts"]["server_clock"]) == {"offset_s", "uncertainty_s", "at"}
    assert abs(doc["facts"]["server_clock"]["offset_s"]) <= doc["facts"]["server_clock"]["uncertainty_s"] + 0.01
    art = Artifact("fault_inject", doc["run_id"], n4)
    art.add("injected_at", round(monitoring["injected"], 3), "s_epoch", method="harness", xid=79)
    art.add("event_at", round(monitoring["injected"], 3), "s_epoch", event="inject_started_observer")
    batch = Artifact("fault_injection", doc["run_id"], n4)
    batch.facts.update(node=n4, scheduler="none", batch="1", observer=doc["host"], stage="fault-b1", xid="79")
    run = run_of_artifacts([doc, art.to_dict(), batch.to_dict()])
    register_phase_kinds()
    [check] = [c for c in load_rubric()["checks"] if c["id"] == "monitoring.fault_visible"]
    [row] = CLUSTER_KINDS[check["kind"]](check, run, run.hosts)
    assert (row["subject"], row["status"]) == (n4, "pass"), row
    assert row["observed"].startswith("visible after ") and row["observed"].endswith("scheduler detection none")
    # Without an injection in the run the check says so.
    [row] = CLUSTER_KINDS[check["kind"]](check, run_of_artifacts([doc]), [doc["host"]])
    assert row["status"] == "skip" and "no fault was injected" in row["reason"]


def test_the_credential_never_appears_in_the_run(monitoring):
    for path in monitoring["run_dir"].rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_the_checks_count_in_coverage(monitoring):
    ratings = json.loads((monitoring["run_dir"] / "report" / "ratings.json").read_text())
    cats = {c["id"]: c for c in ratings["categories"]}
    assert cats["monitoring"]["coverage"] > 0 and cats["monitoring"]["counts"]["fail"] >= 3, cats["monitoring"]
    assert cats["security"]["counts"]["warn"] >= 3  # the exporters open without a credential


def test_report_and_grafana_skip(monitoring):
    report = monitoring["report"]
    assert "## Monitoring" in report
    section = report[report.index("## Monitoring"):]
    for text in ("### Metrics", "DCGM_FI_DEV_POWER_USAGE", "not served"):
        assert text in section, text
    grafana = [r for r in monitoring["checks"] if r["check_id"].startswith("monitoring.grafana")]
    assert grafana and all(r["status"] == "skip" for r in grafana), grafana
