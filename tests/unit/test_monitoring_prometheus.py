"""The Prometheus half of the monitoring phase on the controller, on an artifact the probe wrote against a real
Prometheus 2.42 and node exporters on the test cluster (tests/fixtures/prometheus_artifacts/README.md: one node all
fresh, one GPU missing a metric, one node's exporter stopped, an XID written at a recorded time). Cases a run does
not show (write endpoints open, a node with GPUs but no DCGM series at all) are that artifact with the one fact
changed that the case is about."""

import importlib
import json
import socket
from pathlib import Path

import pytest

from probes.artifact import Artifact, validate
from probes.monitoring import prometheus as probe
from reports.grading.kinds import CLUSTER_KINDS, register_phase_kinds
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts
from reports.phases.monitoring import prometheus as prom
from reports.phases.monitoring import section
from reports.render import markdown

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus_artifacts" / "testcluster_prometheus_2.42.json"
INJECTED = 1796263059.428
N1, N2, N3, N4 = ("cmxz-node%d" % i for i in range(1, 5))


def doc():
    return json.loads(FIX.read_text())


@pytest.fixture(scope="module")
def checks():
    return {c["id"]: c for c in load_rubric()["checks"] if c.get("probe") == "prometheus"}


def grade(checks, check_id, docs):
    register_phase_kinds()
    run = run_of_artifacts(docs)
    check = checks[check_id]
    return {r["subject"]: r for r in CLUSTER_KINDS[check["kind"]](check, run, run.hosts)}


def node_info(host, gpus):
    art = Artifact("node_info", "r", host)
    art.device.update(backend="cuda" if gpus else "cpu", count=gpus)
    return art.to_dict()


def test_the_fixture_is_a_valid_artifact_without_a_credential():
    d = doc()
    assert validate(d) == [] and d["status"] == "ok"
    assert d["facts"]["flags"]["web.enable-admin-api"] == "false"


def test_every_gpu_has_every_dcgm_metric_but_the_one_never_exported(checks):
    rows = grade(checks, "monitoring.gpu_telemetry", [doc()])
    assert {n: r["status"] for n, r in rows.items()} == {N1: "pass", N2: "fail", N3: "pass", N4: "pass"}
    assert rows[N2]["reason"] == "missing: GPU 1 DCGM_FI_DEV_POWER_USAGE"
    assert rows[N2]["observed"] == "13 of 14 series" and rows[N2]["expected"] == "7 metrics for each of 2 GPUs"


def test_node_info_counts_gpus_no_series_names(checks):
    d = doc()
    d["facts"]["series"] = {m: [s for s in v if s["labels"].get("node") != N1] for m, v in d["facts"]["series"].items()}
    rows = grade(checks, "monitoring.gpu_telemetry", [d, node_info(N1, 8), node_info(N2, 0)])
    assert rows[N1]["status"] == "fail" and rows[N1]["observed"] == "0 of 56 series"
    assert rows[N1]["reason"].startswith("missing: GPU 0 DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    # A CPU node with no DCGM series is not a finding.
    d["facts"]["series"] = {m: [s for s in v if s["labels"].get("node") != N2] for m, v in d["facts"]["series"].items()}
    rows = grade(checks, "monitoring.gpu_telemetry", [d, node_info(N2, 0)])
    assert rows[N2]["status"] == "skip" and rows[N2]["reason"].startswith("no GPU on this node")


def test_the_stopped_exporter_makes_every_series_of_its_node_stale(checks):
    rows = grade(checks, "monitoring.fresh", [doc()])
    assert {n: r["status"] for n, r in rows.items()} == {N1: "pass", N2: "pass", N3: "fail", N4: "pass"}
    assert rows[N3]["observed"] == "0 of 19 series fresh"
    assert rows[N3]["reason"].startswith("stale: DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu=0} (not served), ")
    assert "DCGM_FI_DEV_GPU_TEMP{gpu=0} (not served)" in rows[N3]["reason"]
    assert rows[N1]["observed"] == "19 of 19 series fresh"


def test_a_sample_older_than_two_scrape_intervals_is_stale(checks):
    d = doc()
    [s] = [s for s in d["facts"]["series"]["node_load1"] if s["labels"]["node"] == N1]
    s["ts"] = d["facts"]["evaluated_at"]["node_load1"] - 2.5  # scrape interval 1 s
    rows = grade(checks, "monitoring.fresh", [d])
    assert rows[N1]["status"] == "fail" and rows[N1]["reason"] == "stale: node_load1 (2 s old)"


def test_node_and_scheduler_families(checks):
    rows = grade(checks, "monitoring.node_telemetry", [doc()])
    assert {n: r["status"] for n, r in rows.items()} == {N1: "pass", N2: "pass", N3: "pass", N4: "pass"}
    [row] = grade(checks, "monitoring.scheduler_telemetry", [doc()]).values()
    assert row["status"] == "fail" and row["reason"].startswith("no scheduler series in the API")


def test_exporters_answering_without_a_credential_are_a_security_finding(checks):
    rows = grade(checks, "monitoring.exporters_exposed", [doc()])
    assert {n: r["status"] for n, r in rows.items()} == {N1: "warn", N2: "warn", N3: "pass", N4: "warn"}
    assert rows[N1]["category"] == "security" and rows[N1]["observed"] == "node_exporter (open 200)"


def test_write_endpoints_open_without_a_credential_fail(checks):
    [row] = grade(checks, "monitoring.prometheus_write_endpoints", [doc()]).values()
    assert row["status"] == "pass"
    d = doc()
    d["facts"]["flags"]["web.enable-admin-api"] = "true"
    [row] = grade(checks, "monitoring.prometheus_write_endpoints", [d]).values()
    assert row["status"] == "fail" and row["reason"] == '["web.enable-admin-api"]'
    d["facts"]["flags"]["web.config.file"] = "/etc/prometheus/web.yml"  # TLS only: the API still answered
    [row] = grade(checks, "monitoring.prometheus_write_endpoints", [d]).values()
    assert row["status"] == "fail"
    d["facts"]["unauthenticated_api"] = False  # it refused the probe without its credential: not a finding
    [row] = grade(checks, "monitoring.prometheus_write_endpoints", [d]).values()
    assert row["status"] == "pass"


def test_the_injected_xid_is_visible_within_seconds_of_its_injection(checks):
    art = Artifact("fault_inject", "r", N4)
    art.add("injected_at", INJECTED, "s_epoch", method="harness", xid=79)
    rows = grade(checks, "monitoring.fault_visible", [doc(), art.to_dict()])
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == "visible after 1.1 s; scheduler detection none"
    art = Artifact("fault_inject", "r", N3)
    art.add("injected_at", INJECTED, "s_epoch", method="harness", xid=79)
    rows = grade(checks, "monitoring.fault_visible", [doc(), art.to_dict()])
    assert rows[N3]["status"] == "fail" and rows[N3]["observed"] == "not visible; scheduler detection none"


def test_an_xid_held_from_before_the_injection_is_not_taken_for_it(checks):
    # XID errors hold the last XID seen: a value already there before the injection is not the injection's.
    d = doc()
    for w in d["facts"]["watch"]["DCGM_FI_DEV_XID_ERRORS"]:
        if w["labels"]["node"] == N4 and w["labels"]["gpu"] == "0":
            w["points"] = [[w["points"][0][0], 43.0]]  # 43 all along, no change after the injection
    art = Artifact("fault_inject", "r", N4)
    art.add("injected_at", INJECTED, "s_epoch", method="harness", xid=79)
    rows = grade(checks, "monitoring.fault_visible", [d, art.to_dict()])
    assert rows[N4]["status"] == "fail" and rows[N4]["observed"].startswith("not visible")


def test_a_metric_that_could_not_be_read_is_an_error_not_missing(checks):
    d = doc()
    d["facts"]["series"]["DCGM_FI_DEV_SM_CLOCK"] = []
    d["facts"]["errors"] = ["DCGM_FI_DEV_SM_CLOCK: timed out on /api/v1/series"]
    rows = grade(checks, "monitoring.gpu_telemetry", [d])
    assert rows[N1]["status"] == "error" and "DCGM_FI_DEV_SM_CLOCK (timed out on /api/v1/series)" in rows[N1]["reason"]
    assert rows[N2]["status"] == "fail"  # its missing power series is still a finding


def test_no_prometheus_is_a_skip_for_every_check(checks, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = "http://127.0.0.1:%d" % s.getsockname()[1]
    art = Artifact("prometheus", "r", "h1")
    probe.run(art, probe.PARAMS.resolve("prometheus", {"url": url, "timeout_s": 1}), str(tmp_path))
    assert art.status == "skipped" and art.reason.startswith("no Prometheus API answered: %s: " % url)
    for check_id in checks:
        rows = grade(checks, check_id, [art.to_dict()])
        assert [r["status"] for r in rows.values()] == ["skip"], check_id


def test_a_bad_since_is_an_error_before_any_request(tmp_path):
    art = Artifact("prometheus", "r", "h1")
    probe.run(art, probe.PARAMS.resolve("prometheus", {"since": "yesterday"}), str(tmp_path))
    assert art.status == "error" and "since='yesterday' is not an RFC 3339 UTC time" in art.reason


@pytest.mark.parametrize("labels,node", [
    ({"node": N2, "instance": "10.237.201.11:9100"}, N2), ({"Hostname": N3 + ".cluster.local"}, N3),
    ({"instance": "10.237.201.14:9400"}, N4), ({"instance": "[::1]:9100"}, None), ({"gpu": "0"}, None)])
def test_node_of_a_series(labels, node):
    nodes = doc()["facts"]["nodes"]
    assert prom.node_of(labels, nodes) == node


def test_durations():
    assert probe._seconds("1h") == 3600 and probe._seconds("500ms") == 0.5 and probe._seconds("30s") == 30
    assert prom.scrape_seconds("1s") == 1 and prom.scrape_seconds("15s") == 15 and prom.scrape_seconds("1m") == 60
    assert prom.scrape_seconds("500ms") == 0.5 and prom.scrape_seconds("") is None


def test_the_section_shows_every_node_and_gpu():
    text = markdown.render(section.blocks(run_of_artifacts([doc()]), [], None))
    for expected in ("## Monitoring", "### Metrics", "4 scrape targets, 1 not up", "| cmxz-node2 | 1 | 6 | 6 |",
                     "| cmxz-node3 | 0 | 7 | 0 | DCGM_FI_DEV_GPU_TEMP,", "Fault metrics other than 0",
                     "| DCGM_FI_DEV_XID_ERRORS | cmxz-node4 | 0 | 79 |", "node_exporter open 200"):
        assert expected in text, expected


@pytest.mark.parametrize("name", ["prometheus", "grafana"])
def test_a_url_holding_a_credential_is_refused_and_left_out_of_the_artifact(name, tmp_path):
    module = importlib.import_module("probes.monitoring.%s" % name)
    art = Artifact(name, "r", "h1", params={"url": "http://admin:hunter2@head:9090"})
    module.run(art, module.PARAMS.resolve(name, {"url": "http://admin:hunter2@head:9090"}), str(tmp_path))
    assert (art.status, art.reason) == ("error", "url must not hold a credential: put it in token_file or "
                                                 "basic_auth_file")
    assert "hunter2" not in json.dumps(art.to_dict())
