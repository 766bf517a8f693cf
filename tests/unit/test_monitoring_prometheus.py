"""The Prometheus half of the monitoring phase on the controller, on an artifact the probe wrote against a real
Prometheus 2.42 and node exporters on the test cluster (tests/fixtures/prometheus_artifacts/README.md: one node all
fresh, one GPU missing a metric, one node's exporter stopped, an XID written at a recorded time). Cases a run does
not show (write endpoints open, a node with GPUs but no DCGM series at all) are that artifact with the one fact
changed that the case is about."""

import importlib
import importlib.util
import json
import socket
import time
from pathlib import Path

import pytest

from probes.artifact import Artifact, validate
from probes.common.clocks import host_clocks
from probes.monitoring import prometheus as probe
from probes.monitoring.common import prom_duration_s
from reports.grading.kinds import CLUSTER_KINDS, register_phase_kinds
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts
from reports.phases.monitoring import prometheus as prom
from reports.phases.monitoring import section
from reports.render import markdown

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "prometheus_artifacts" / "testcluster_prometheus_2.42.json"
# GET /api/v1/query?query=time() and /api/v1/status/buildinfo recorded from Debian's prometheus 2.42 (the README)
TIME_ANSWER = FIX.parent / "api_v1_query_time.json"
# The same answer as VictoriaMetrics writes it: a vector of one sample (composed from its template, the README)
VM_TIME_ANSWER = FIX.parent / "vm_api_v1_query_time.json"
BUILDINFO = FIX.parent / "api_v1_status_buildinfo.json"
RECORDED_TIME = 1796622419.684  # the server's time in TIME_ANSWER
_spec = importlib.util.spec_from_file_location("http_replay", FIX.parents[2] / "monitoring" / "http_replay.py")
http_replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(http_replay)
INJECTED = 1796263059.428
N1, N2, N3, N4 = ("cmxz-node%d" % i for i in range(1, 5))


def doc():
    return json.loads(FIX.read_text())


@pytest.fixture(scope="module")
def checks():
    return {c["id"]: c for c in load_rubric()["checks"] if c.get("probe") == "prometheus"}


def grade(checks, check_id, docs, run_dir=None):
    register_phase_kinds()
    run = run_of_artifacts(docs)
    if run_dir is not None:  # where raw files are read (the reliability timeline's scheduler samples)
        run.run_dir = str(run_dir)
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


def flags_answer(**changed):
    """GET /api/v1/status/flags as Prometheus writes it: every command-line flag by its name, every value a string
    (the flag's value as kingpin prints it; --enable-feature given twice is joined with ","). Composed, not recorded:
    the flag names are those of cmd/prometheus/main.go -- Prometheus 3.x opens the OTLP write endpoint (POST
    /api/v1/otlp/v1/metrics) with --web.enable-otlp-receiver, 2.47 to 2.55 with --enable-feature=otlp-write-receiver,
    and 2.x reads the deprecated --enable-feature=remote-write-receiver as --web.enable-remote-write-receiver."""
    data = {"config.file": "/etc/prometheus/prometheus.yml", "enable-feature": "", "storage.tsdb.path": "data/",
            "web.config.file": "", "web.enable-admin-api": "false", "web.enable-lifecycle": "false",
            "web.enable-remote-write-receiver": "false", "web.listen-address": "0.0.0.0:9090"}
    data.update(changed)
    return {"status": "success", "data": data}


@pytest.mark.parametrize("flags,opened", [
    ({"web.enable-otlp-receiver": "true"}, ["web.enable-otlp-receiver"]),
    ({"enable-feature": "otlp-write-receiver,exemplar-storage"}, ["enable-feature=otlp-write-receiver"]),
    ({"enable-feature": "exemplar-storage,remote-write-receiver"}, ["enable-feature=remote-write-receiver"]),
    ({"enable-feature": "exemplar-storage,native-histograms", "web.enable-otlp-receiver": "false"}, [])])
def test_an_otlp_or_feature_flag_write_receiver_is_a_write_endpoint(checks, tmp_path, flags, opened):
    (tmp_path / "flags.json").write_text(json.dumps(flags_answer(**flags)))
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps([{"method": "GET", "path": "/api/v1/status/buildinfo", "file": str(BUILDINFO)},
                                  {"method": "GET", "path": "/api/v1/status/flags", "file": "flags.json"}]))
    with http_replay.Replay(str(routes)) as r:
        art = Artifact("prometheus", "r", N1)
        probe.run(art, probe.PARAMS.resolve("prometheus", {"url": r.url, "timeout_s": 5, "watch": []}), str(tmp_path))
    d = doc()
    d["facts"]["flags"] = art.to_dict()["facts"]["flags"]  # what this probe keeps of the server's flags
    [row] = grade(checks, "monitoring.prometheus_write_endpoints", [d]).values()
    assert (row["status"], row["reason"] or None) == (("fail", json.dumps(opened)) if opened else ("pass", None))


def test_an_artifact_of_the_earlier_probe_says_the_otlp_endpoints_were_not_checked(checks):
    # the recorded artifact kept four flags (written before web.enable-otlp-receiver and enable-feature were kept)
    [row] = grade(checks, "monitoring.prometheus_write_endpoints", [doc()]).values()
    assert row["status"] == "pass" and row["observed"] == (
        "no admin, lifecycle, remote-write or OTLP write endpoint; API answers without a credential; "
        "web.enable-otlp-receiver, enable-feature not recorded (an artifact of an earlier probe version): the OTLP "
        "receiver and feature-flag write endpoints are not checked")


def clocked(offset_s=0.0, uncertainty_s=0.002, host_clocks=None):
    """The fixture with the clock readings the probe now records: the server's clock against the probe's host's
    (server_clock, as server_clock() writes it from a time() answer) and other hosts' (host_clocks). The recorded run
    had one clock (the test cluster's hosts are namespaces of one machine, Prometheus in cmxz-node1, where the probe
    ran): offset 0. A server offset_s ahead stamps every sample offset_s later: the watched points move with it."""
    d = doc()
    d["facts"]["server_clock"] = {"offset_s": offset_s, "uncertainty_s": uncertainty_s,
                                  "at": d["facts"]["evaluated_at"]["DCGM_FI_DEV_XID_ERRORS"] - offset_s}
    d["facts"]["host_clocks"] = host_clocks or {}
    for series in d["facts"]["watch"].values():
        for w in series:
            w["points"] = [[ts + offset_s, v] for ts, v in w["points"]]
    return d


def injected(node, at, observer=N1, node_clock=None, variant=None):
    """The reliability phase's artifacts of one injection (probes/reliability/fault_inject.py, fault_injection.py):
    injected_at by the node's own clock (node_clock, default the same as the observer's), the start by the batch's
    observer's clock (event_at inject_started_observer, read just before the inject task) and the artifact naming the
    observer. observer None: an older fault_inject without the observer's reading, alone. variant "fallback": the
    fallback's fault_inject alone (roles/fault_injection/tasks/batch.yml injects it after the first went unseen)."""
    art = Artifact("fault_inject", "r", node, variant=variant)
    art.facts["method"] = "kmsg" if variant == "fallback" else "dcgm"
    art.add("injected_at", at if node_clock is None else node_clock, "s_epoch", method=art.facts["method"], xid=79)
    if observer is None:
        return [art.to_dict()]
    art.add("event_at", at, "s_epoch", event="inject_started_observer")
    if variant == "fallback":
        return [art.to_dict()]
    batch = Artifact("fault_injection", "r", node)
    batch.facts.update(node=node, scheduler="slurm", batch="1", observer=observer, stage="fault-b1", xid="79")
    return [art.to_dict(), batch.to_dict()]


def test_the_injected_xid_is_visible_within_seconds_of_its_injection(checks):
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "pass"
    # The XID's point 1796263060.5, on the range query's 1 s grid: the change lies in the second before it.
    assert rows[N4]["observed"] == "visible after 1.1 s (0.1 to 1.1 s: the range query's 1 s step); scheduler " \
                                   "detection none"
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N3, INJECTED))
    assert rows[N3]["status"] == "fail" and rows[N3]["observed"] == "not visible; scheduler detection none"


def test_a_fault_visible_just_after_the_minute_is_shown_after_it(checks):
    """Injected 60.04 s before the XID's change: a warn (pass within 60 s), shown as "60.0 s" before
    (reports/shown.py)."""
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N4, INJECTED - 58.968))
    assert rows[N4]["status"] == "warn"
    assert rows[N4]["observed"] == "visible after 60.04 s (59.0 to 60.0 s: the range query's 1 s step); scheduler " \
                                   "detection none"


def test_a_prometheus_clock_ahead_of_the_observers_is_taken_off(checks):
    # The server 5 s ahead: its points say 1796263065.5, the observer's clock said 1796263059.428 at the injection,
    # and the probe read the server 5 s ahead of its host, the observer. The node's own clock 30 s ahead of both.
    rows = grade(checks, "monitoring.fault_visible",
                 [clocked(offset_s=5.0)] + injected(N4, INJECTED, node_clock=INJECTED + 30))
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible after 1.1 s (0.1 to 1.1 s: the range query's 1 s step); scheduler "
                                    "detection none; Prometheus' clock 5.0 s ahead of the observer cmxz-node1's "
                                    "(±2 ms), corrected")


def test_an_observer_other_than_the_probes_host_is_related_through_its_clock(checks):
    # The batch's observer cmxz-node2 read 3.0 s behind the probe's host (±0.4 s): the injection at INJECTED by the
    # probe's host's clock is INJECTED - 3.0 by the observer's, the clock the reliability timeline records it on.
    rel = {N2: {"offset_s": -3.0, "uncertainty_s": 0.4}}
    rows = grade(checks, "monitoring.fault_visible",
                 [clocked(host_clocks=rel)] + injected(N4, INJECTED - 3.0, observer=N2, node_clock=INJECTED + 20))
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible after 1.1 s (-0.3 to 1.5 s: the range query's 1 s step, the clocks' "
                                    "±0.4 s); scheduler detection none; Prometheus' clock 3.0 s ahead of the "
                                    "observer cmxz-node2's (±0.4 s), corrected")
    # Not read (the role could not reach it), or never read: no delay across clocks.
    rows = grade(checks, "monitoring.fault_visible", [clocked(host_clocks={N2: {"error": "no clock read: no output"}})]
                 + injected(N4, INJECTED - 3.0, observer=N2))
    assert rows[N4]["status"] == "error" and rows[N4]["observed"] == ""
    assert rows[N4]["reason"] == "cmxz-node2's clock was not read against cmxz-node1's: no clock read: no output"
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N4, INJECTED - 3.0, observer=N2))
    assert rows[N4]["status"] == "skip" and rows[N4]["reason"].startswith("cmxz-node2's clock was not read against")


def test_an_injection_by_the_nodes_own_clock_needs_that_clock(checks):
    # An older fault_inject (no observer's reading): injected_at is the node's own clock.
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N4, INJECTED, observer=None))
    assert rows[N4]["status"] == "skip" and rows[N4]["reason"].startswith("cmxz-node4's clock was not read against")
    rel = {N4: {"offset_s": 0.0, "uncertainty_s": 0.3}}
    rows = grade(checks, "monitoring.fault_visible", [clocked(host_clocks=rel)] + injected(N4, INJECTED, observer=None))
    assert rows[N4]["status"] == "pass" and rows[N4]["observed"] == (
        "visible after 1.1 s (-0.2 to 1.4 s: the range query's 1 s step, the clocks' ±0.3 s); scheduler detection none")


def test_an_artifact_without_the_servers_clock_is_a_skip_not_a_mixed_clock_delay(checks):
    rows = grade(checks, "monitoring.fault_visible", [doc()] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "skip" and rows[N4]["observed"] == ""
    assert rows[N4]["reason"].startswith("clock offset not recorded: the artifact holds no reading of the Prometheus "
                                         "server's clock against cmxz-node1's")
    d = doc()
    d["facts"]["server_clock_error"] = "HTTP 503 on /api/v1/query"
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "error" and rows[N4]["reason"] == (
        "the Prometheus server's clock could not be read against cmxz-node1's: HTTP 503 on /api/v1/query")


def test_a_change_before_the_injection_is_reported_not_clamped_to_0(checks):
    # The XID's point (1796263060.5) 0.6 s before the injection by the observer's clock, the clocks known to 2 ms:
    # a clock off by more than measured, or an error from before the injection, never "visible after 0.0 s".
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N4, 1796263061.1))
    assert rows[N4]["status"] == "error"
    assert rows[N4]["observed"] == "non-zero 0.6 s before the injection; scheduler detection none"
    assert "more than the ±2 ms the clocks are known to" in rows[N4]["reason"]
    # Within what the clocks are known to (±0.8 s): the fault at once, its measured sign shown.
    rows = grade(checks, "monitoring.fault_visible", [clocked(uncertainty_s=0.8)] + injected(N4, 1796263061.1))
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible after -0.6 s (-2.4 to 0.2 s: the range query's 1 s step, the clocks' "
                                    "±0.8 s; before it by less than the clocks' ±0.8 s); scheduler detection none; "
                                    "Prometheus' clock level with the observer cmxz-node1's (±0.8 s)")
    # Long before (more than fail_s): an error from before the injection, history; nothing after it: not visible.
    rows = grade(checks, "monitoring.fault_visible", [clocked()] + injected(N4, 1796263060.5 + 301))
    assert rows[N4]["status"] == "fail" and rows[N4]["observed"].startswith("not visible")


def watched_by(observer, node, samples, tmp_path):
    """The batch's observer's scheduler watch (probes/reliability/sched_watch.py: the artifact and its .jsonl of
    samples) under tmp_path/artifacts, where the reliability timeline reads it (reports/phases/reliability/timeline.py
    _Batch.watch_samples): [(t, phase, reason)] of node."""
    art = Artifact("sched_watch", "r", observer, variant="fault-b1")
    art.raw.append("sched_watch-fault-b1.jsonl")
    (tmp_path / "artifacts" / observer).mkdir(parents=True)
    (tmp_path / "artifacts" / observer / art.raw[0]).write_text("".join(json.dumps(
        {"t": t, "node": node, "phase": phase, "state": "IDLE+DRAIN" if phase == "drained" else "IDLE",
         "reason": reason}) + "\n" for t, phase, reason in samples))
    return art.to_dict()


def test_a_fault_the_metrics_showed_before_the_fallback_is_timed_from_the_first_injection(checks, tmp_path):
    # DCGM showed the first injection's XID (its point 1.1 s after it); the scheduler noticed nothing for 600 s, the
    # fallback went in and gave the same XID 79: the series never changed after the fallback. Timed from the
    # fallback (as the reliability timeline times detection) it read "not visible"; it was visible after the first.
    docs = [clocked()] + injected(N4, INJECTED) + injected(N4, INJECTED + 600.0, variant="fallback")
    rows = grade(checks, "monitoring.fault_visible", docs)
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible 1.1 s after the first injection (0.1 to 1.1 s: the range query's 1 s "
                                    "step); scheduler detection none")
    # The fallback within fail_s of the first: the change is not "before the injection" (a clock blamed), either.
    rows = grade(checks, "monitoring.fault_visible",
                 [clocked()] + injected(N4, INJECTED) + injected(N4, INJECTED + 200.0, variant="fallback"))
    assert rows[N4]["status"] == "pass" and rows[N4]["observed"].startswith("visible 1.1 s after the first injection")
    # With the reliability timeline (the observer's watch: in service, drained 30 s after the fallback), which times
    # detection from the fallback: the row says the scheduler saw it only then.
    watch = watched_by(N1, N4, [(INJECTED - 1, "available", None),
                                (INJECTED + 630.0, "drained", "XID 79 in kernel log (health check)"),
                                (INJECTED + 700.0, "drained", "XID 79 in kernel log (health check)")], tmp_path)
    rows = grade(checks, "monitoring.fault_visible", docs + [watch], run_dir=tmp_path)
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible 1.1 s after the first injection (0.1 to 1.1 s: the range query's 1 s "
                                    "step); the scheduler's detection came only after the fallback (30.0 s after "
                                    "it, 630.0 s after the first)")


def test_a_change_after_the_fallback_only_is_timed_from_the_fallback(checks):
    # The first injection (600 s before the point) showed nothing; the fallback's XID did, 1.1 s after it.
    docs = [clocked()] + injected(N4, INJECTED - 600.0) + injected(N4, INJECTED, variant="fallback")
    rows = grade(checks, "monitoring.fault_visible", docs)
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible 1.1 s after the fallback injection (0.1 to 1.1 s: the range query's 1 s "
                                    "step); scheduler detection none")


def test_the_range_querys_step_is_in_the_delays_range(checks):
    # A 24 h window is queried at window / 10000 = 8.64 s (probes/monitoring/prometheus.py changes): the point at T
    # holds the latest sample at or before T, so the XID went in within the 8.64 s before its point.
    d = clocked(uncertainty_s=0.3)
    for w in d["facts"]["watch"]["DCGM_FI_DEV_XID_ERRORS"]:
        w["step"] = 8.64
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"] == ("visible after 1.1 s (-7.9 to 1.4 s: the range query's 8.64 s step, the clocks' "
                                    "±0.3 s); scheduler detection none")
    # An artifact written before the step was recorded: no range claimed.
    for w in d["facts"]["watch"]["DCGM_FI_DEV_XID_ERRORS"]:
        del w["step"]
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["observed"] == "visible after 1.1 s; scheduler detection none"


def test_clocks_read_hours_after_the_injection_name_their_drift(checks):
    d = clocked()
    d["facts"]["server_clock"]["at"] = INJECTED + 2 * 3600.0
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "pass"
    assert rows[N4]["observed"].endswith("; scheduler detection none; clocks read 2.0 h after the injection, their "
                                         "drift since not included")
    d["facts"]["server_clock"]["at"] = INJECTED + 3000.0  # within the hour: nothing said
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["observed"].endswith("; scheduler detection none")


def test_samples_another_clock_may_have_stamped_are_a_skip(checks):
    # No targets API (Mimir, vmselect): the probe's error on /api/v1/targets, as run() records it.
    d = clocked()
    d["facts"]["targets"], d["facts"]["errors"] = [], ["targets: HTTP 404 on /api/v1/targets"]
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "skip" and rows[N4]["reason"].startswith(
        "the Prometheus server has no scrape targets API (HTTP 404 on /api/v1/targets), so its samples were stamped "
        "by whatever scraped them")
    # A targets API that lists none (a remote-write receiver, an agent's destination).
    d["facts"]["errors"] = []
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "skip" and "scrapes no target itself" in rows[N4]["reason"]
    # Targets, but not the one the node's series came from.
    d = clocked()
    d["facts"]["targets"] = [t for t in d["facts"]["targets"] if t["labels"]["node"] != N4]
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "skip" and rows[N4]["reason"].startswith(
        "cmxz-node4's DCGM_FI_DEV_XID_ERRORS series (instance 10.237.201.14:9100) are not among the Prometheus "
        "server's scrape targets")
    # Samples older than the server's scrapes allow (1 s interval, the freshest 10 s old): a scraper's clock behind.
    d = clocked()
    at = d["facts"]["evaluated_at"]["DCGM_FI_DEV_XID_ERRORS"]
    for s in d["facts"]["series"]["DCGM_FI_DEV_XID_ERRORS"]:
        s["ts"] = at - 10.0 if s["ts"] is not None else None
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
    assert rows[N4]["status"] == "skip" and rows[N4]["reason"].startswith(
        "the freshest DCGM_FI_DEV_XID_ERRORS sample was 10.0 s older than the query that served it, more than two "
        "scrape intervals (1 s) and 5 s")


def test_an_xid_held_from_before_the_injection_is_not_taken_for_it(checks):
    # XID errors hold the last XID seen: a value already there before the injection is not the injection's.
    d = clocked()
    for w in d["facts"]["watch"]["DCGM_FI_DEV_XID_ERRORS"]:
        if w["labels"]["node"] == N4 and w["labels"]["gpu"] == "0":
            w["points"] = [[w["points"][0][0], 43.0]]  # 43 all along, no change after the injection
    rows = grade(checks, "monitoring.fault_visible", [d] + injected(N4, INJECTED))
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


def replayed_clock(tmp_path, answer=TIME_ANSWER):
    """A replay of the recorded time() and buildinfo answers, nothing else (every other request answers 404): time()
    only as the probe must ask it, with nocache=1 (a request without it is not answered)."""
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps([
        {"method": "GET", "path": "/api/v1/query", "query": {"query": "time()", "nocache": "1"}, "file": str(answer)},
        {"method": "GET", "path": "/api/v1/status/buildinfo", "file": str(BUILDINFO)}]))
    return http_replay.Replay(str(routes))


def test_the_servers_clock_is_read_against_this_hosts_by_time(tmp_path):
    # The replay answers the recorded time(): a server whose clock stands at RECORDED_TIME, behind this machine's.
    with replayed_clock(tmp_path) as r:
        before = time.time()
        clock = probe.server_clock(probe.Api(r.url, probe.PARAMS.resolve("prometheus", {"timeout_s": 5})))
        after = time.time()
        asked = [e for e in r.log if e["path"] == "/api/v1/query"]
    # nocache=1 with each (VictoriaMetrics' latency offset otherwise; Prometheus ignores it), and no `time`: given
    # one, time() answers it, not the server's clock.
    assert [e["query"] for e in asked] == [{"query": "time()", "nocache": "1"}] * probe.CLOCK_TRIES
    assert set(clock) == {"offset_s", "uncertainty_s", "at"}
    assert before - 0.001 <= clock["at"] <= after + 0.001
    assert 0.001 <= clock["uncertainty_s"] <= (after - before) / 2 + 0.002
    assert abs(clock["offset_s"] - (RECORDED_TIME - clock["at"])) <= 0.001


def test_a_victoriametrics_vector_answer_is_the_same_clock_reading(tmp_path):
    # VictoriaMetrics answers time() as a vector of one unlabelled sample (the README); read as a scalar it was an
    # error on every fault row.
    assert json.loads(VM_TIME_ANSWER.read_text())["data"]["resultType"] == "vector"
    with replayed_clock(tmp_path, VM_TIME_ANSWER) as r:
        clock = probe.server_clock(probe.Api(r.url, probe.PARAMS.resolve("prometheus", {"timeout_s": 5})))
        asked = [e["query"] for e in r.log if e["path"] == "/api/v1/query"]
    assert asked == [{"query": "time()", "nocache": "1"}] * probe.CLOCK_TRIES
    assert abs(clock["offset_s"] - (RECORDED_TIME - clock["at"])) <= 0.001


def test_an_answer_evaluated_at_another_time_is_not_a_clock_reading(tmp_path):
    # VictoriaMetrics without nocache (the README): time() evaluated 30 s back, the answer stamped now. Taken as the
    # server's clock, a phantom "30 s behind, corrected".
    lagged = json.loads(VM_TIME_ANSWER.read_text())
    lagged["data"]["result"][0]["value"][1] = "%.3f" % (RECORDED_TIME - 30)
    (tmp_path / "lagged.json").write_text(json.dumps(lagged))
    with replayed_clock(tmp_path, tmp_path / "lagged.json") as r:
        with pytest.raises(probe.ApiError, match=r"time\(\) answered 1796622389.684 stamped 1796622419.684: evaluated "
                                                 r"30.000 s from the time it gives"):
            probe.server_clock(probe.Api(r.url, probe.PARAMS.resolve("prometheus", {"timeout_s": 5})))
    two = json.loads(VM_TIME_ANSWER.read_text())["data"]
    two["result"] *= 2
    with pytest.raises(probe.ApiError, match="did not answer a scalar or a one-sample vector"):
        probe.instant_time(two)


def test_every_query_is_sent_with_nocache():
    # The series' newest samples and the watched changes too: VictoriaMetrics' latency offset would age every
    # sample by 30 s (stale at two 15 s intervals) and hide the window's last 30 s.
    asked = []

    class Api:
        def data(self, path, params=None):
            asked.append((path, params))
            return [] if path == "/api/v1/series" else {"resultType": "vector", "result": []}

    probe.series_of(Api(), "DCGM_FI_DEV_XID_ERRORS", "1h")
    probe.changes(Api(), "DCGM_FI_DEV_XID_ERRORS", "1h", [])
    queries = [params for path, params in asked if path.startswith("/api/v1/query")]
    assert len(queries) == 2 and all(q["nocache"] == "1" for q in queries)


def test_other_hosts_clocks_are_read_between_two_of_this_hosts():
    line = "clustermax-assess-clock: %.3f"
    readings = [[N1, line % 100.0 + "\n"], [N2, line % 97.5 + "\r\n"], [N1, line % 100.4 + "\n"],
                [N3, "sh: 1: /opt/venv/bin/python3: not found\r\n"], [N1, line % 101.0 + "\n"], [N4, ""]]
    clocks = host_clocks(readings)
    assert clocks[N2] == {"offset_s": -2.7, "uncertainty_s": 0.201}
    assert clocks[N3] == {"error": "no clock read: sh: 1: /opt/venv/bin/python3: not found"}
    assert clocks[N4] == {"error": "no clock read: no output"}
    assert host_clocks([]) == {} and host_clocks([[N1, line % 100.0]]) == {}


def test_the_probe_records_the_clocks_with_its_artifact(tmp_path):
    line = "clustermax-assess-clock: %.3f\n"
    with replayed_clock(tmp_path) as r:
        art = Artifact("prometheus", "r", N1)
        params = {"url": r.url, "timeout_s": 5, "series": {"gpu": ["DCGM_FI_DEV_XID_ERRORS"]},
                  "clocks": [[N1, line % 100.0], [N2, line % 103.0], [N1, line % 100.5]]}
        probe.run(art, probe.PARAMS.resolve("prometheus", params), str(tmp_path))
    d = art.to_dict()
    assert validate(d) == [] and d["status"] == "ok"
    assert abs(d["facts"]["server_clock"]["offset_s"] - (RECORDED_TIME - d["facts"]["server_clock"]["at"])) <= 0.001
    assert d["facts"]["host_clocks"] == {N2: {"offset_s": 2.75, "uncertainty_s": 0.251}}
    # The rest of the API answered nothing (not recorded): each read is an error, not an empty answer.
    assert "DCGM_FI_DEV_XID_ERRORS: HTTP 404 on /api/v1/series" in d["facts"]["errors"]


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
    # as Prometheus writes them (model.Duration): 90 s is "1m30s", a target's interval in /api/v1/targets
    assert probe._seconds("1m30s") == 90 and probe._seconds("1h2m3s") == 3723 and probe._seconds("1w") == 604800
    assert prom_duration_s("1s") == 1 and prom_duration_s("15s") == 15 and prom_duration_s("1m") == 60
    assert prom_duration_s("500ms") == 0.5 and prom_duration_s("2m0s500ms") == 120.5 and prom_duration_s("0") == 0
    assert prom_duration_s("") is None and prom_duration_s("1.5h") is None and prom_duration_s("30s1m") is None


def test_a_target_scraped_every_1m30s_is_judged_on_its_own_interval():
    """dcgm-exporter scraped every 90 s ("1m30s" in the targets API) beside node-exporter every 15 s: its series
    40 s old is fresh (within 2 of its own intervals), not stale against the 15 s of another target."""
    facts = {"targets": [{"labels": {"instance": "10.0.0.2:9400"}, "scrape_interval": "1m30s"},
                         {"labels": {"instance": "10.0.0.2:9100"}, "scrape_interval": "15s"}]}
    assert prom.intervals(facts) == ({"10.0.0.2:9400": 90.0, "10.0.0.2:9100": 15.0}, 15.0)


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
