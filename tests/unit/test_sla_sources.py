"""The SLA source adapters on recorded outputs: health-probe samples, Slurm, assessment artifacts, CSV/JSON."""

import json
import re
from pathlib import Path

import pytest
from run_dirs import unpack_recorded_run

from reports.sla.events import EventError
from reports.sla.sources import assessment, imports, slurm
from reports.sla.sources.healthprobe import blinded, events_from_samples
from reports.sla.store import parse_node_output, sample_from_result
from reports.sla.timeutil import US, TimeError, iso_utc, parse_time

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SLURM = FIX / "slurm" / "sla"
OBSERVED = parse_time("2026-11-30T05:36:03Z")  # when the slurm fixtures were recorded
T0 = parse_time("2026-11-10T10:00:00Z")


def sample(i, host, t_s, state, **kw):
    return {"id": i, "host": host, "sampled_at_us": T0 + int(t_s * US), "state": state, "reason": kw.pop("reason", ""),
            "interval_s": kw.pop("interval_s", 300), "boot_id": kw.pop("boot_id", "b1"), **kw}


# ---------------------------------------------------------------------------------------------- health probe

def test_probe_output_parsing():
    up = parse_node_output((FIX / "healthprobe" / "h100_8gpus.txt").read_text())
    assert up == {"boot_id": "5f1c2a7e-3b0d-4d8e-9a51-2c7e0f6b9d13", "uptime_s": 1234567.89, "gpus_found": 8,
                  "gpu_rc": 0}
    assert parse_node_output((FIX / "healthprobe" / "h100_7gpus.txt").read_text())["gpus_found"] == 7
    broken = parse_node_output((FIX / "healthprobe" / "driver_not_loaded.txt").read_text())
    assert broken["gpus_found"] == 0 and broken["gpu_rc"] == 9
    cpu = parse_node_output((FIX / "healthprobe" / "cpu_only.txt").read_text())
    assert cpu["gpus_found"] is None and cpu["gpu_rc"] is None and cpu["uptime_s"] == 1234567.89


def test_unreachable_and_failed_hosts_are_down_with_their_reason():
    msg = "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.2 port 22: Connection refused"
    s = sample_from_result({"host": "n2", "unreachable": True, "msg": msg, "changed": False})
    assert s["state"] == "down" and s["reason"] == "unreachable: " + msg
    s = sample_from_result({"host": "n3", "rc": 1, "stdout": "", "stderr": "cat: /proc/uptime: Input/output error"})
    assert s["state"] == "down" and "Input/output error" in s["reason"] and "rc 1" in s["reason"]
    s = sample_from_result({"host": "n1", "rc": 0, "stdout": (FIX / "healthprobe" / "cpu_only.txt").read_text()})
    assert s["state"] == "up" and s["reason"] == ""
    # what the role's rescue records for a node that did not answer within sla_probe_timeout
    s = sample_from_result({"host": "n4", "failed": True,
                            "msg": "no answer within 30 s: Task failed: Timed out after 30 second(s)."})
    assert s["state"] == "down" and s["reason"].startswith("probe failed: no answer within 30 s")
    s = sample_from_result({"host": "n5", "rc": 0, "stdout": "", "failed": True, "attempts": 2})
    assert s["state"] == "down" and s["reason"] == "unexpected answer: (empty)"


def test_samples_to_down_intervals_hold_until_the_next_sample():
    rows = [sample(1, "a", 0, "up"), sample(2, "a", 300, "up"),
            sample(3, "a", 600, "down", reason="unreachable: refused"), sample(4, "a", 900, "down",
                                                                                reason="unreachable: refused"),
            sample(5, "a", 1200, "up"), sample(6, "b", 0, "up"), sample(7, "b", 600, "up"), sample(8, "b", 900, "up")]
    events, monitored, reboots, outages = events_from_samples(rows)
    [e] = events
    assert (e.target, e.start, e.end) == ("a", T0 + 600 * US, T0 + 1200 * US)
    assert e.evidence["samples"] == [3, 4] and e.evidence["up_sample"] == 5 and not e.evidence["open"]
    assert e.reason == "unreachable: refused" and e.id == "healthprobe:a:3-4"
    # the last sample of each host holds for two intervals (600 s)
    assert monitored["a"][-1] == (T0 + 1200 * US, T0 + 1800 * US)
    assert monitored["b"] == [(T0, T0 + 600 * US), (T0 + 600 * US, T0 + 900 * US), (T0 + 900 * US, T0 + 1500 * US)]
    assert reboots == [] and outages == {}  # b answered while a did not: the controller could reach the nodes


def test_a_gap_in_the_samples_is_unmonitored_not_downtime():
    rows = [sample(1, "a", 0, "down"), sample(2, "a", 3000, "up")]  # 50 min without a sample (interval 5 min)
    [e], monitored, _, _ = events_from_samples(rows)
    assert e.end == T0 + 600 * US and e.evidence["open"] is True  # held for 2 intervals, then unknown
    assert monitored["a"] == [(T0, T0 + 600 * US), (T0 + 3000 * US, T0 + 3600 * US)]
    # down on both sides of the gap: two outages, the gap between them is not counted
    rows[1] = sample(2, "a", 3000, "down")
    first, second = events_from_samples(rows)[0]
    assert (first.start, first.end, second.start, second.end) == (T0, T0 + 600 * US, T0 + 3000 * US, T0 + 3600 * US)


def stored(i, t_s, result):
    """A sample as the store makes it from one host's registered Ansible result."""
    s = sample_from_result(result)
    return sample(i, s.pop("host"), t_s, s.pop("state"), **s)


def unreachable(i, host, t_s):
    return stored(i, t_s, {"host": host, "unreachable": True, "msg": "ssh: connect to host: Connection timed out"})


def test_a_sample_in_an_honoured_exclusion_stands_for_the_node_only_until_it_ends():
    # caught down at 10:05 by the 5-minute probe, inside a 10:04:50-10:05:10 reboot test; up again at 10:10
    rows = [sample(1, "a", 0, "up"), unreachable(2, "a", 300), sample(3, "a", 600, "up"), sample(4, "b", 300, "up")]
    test = [(T0 + 290 * US, T0 + 310 * US)]
    [e], monitored, _, _ = events_from_samples(rows, excluded={"a": test})
    assert (e.start, e.end) == (T0 + 300 * US, T0 + 310 * US)  # not to 10:10: after the test the state is unknown
    assert e.evidence["open"] is True and e.evidence["held_until"] == iso_utc(T0 + 310 * US)
    assert monitored["a"] == [(T0, T0 + 300 * US), (T0 + 300 * US, T0 + 310 * US), (T0 + 600 * US, T0 + 1200 * US)]
    # without the exclusion the sample holds until the next one
    [e], _, _, _ = events_from_samples(rows)
    assert (e.start, e.end) == (T0 + 300 * US, T0 + 600 * US)


def test_a_round_in_which_no_node_answered_is_a_monitoring_outage():
    # what the role's rescue records for a node that did not answer within sla_probe_timeout
    no_result = stored(4, 300, {"host": "b", "failed": True,
                                "msg": "no answer within 30 s: Task failed: Timed out after 30 second(s)."})
    rows = [sample(1, "a", 0, "up"), sample(2, "b", 0, "up"), unreachable(3, "a", 300), no_result,
            sample(5, "a", 600, "up"), sample(6, "b", 600, "up")]
    events, monitored, _, outages = events_from_samples(rows)
    assert events == [] and outages == {T0 + 300 * US: ["a", "b"]}
    assert monitored["a"] == monitored["b"] == [(T0, T0 + 300 * US), (T0 + 600 * US, T0 + 1200 * US)]
    # a node that answered, even to say it is broken, shows the controller could reach the nodes: downtime
    rows[3] = stored(4, 300, {"host": "b", "rc": 1, "stdout": "", "stderr": "cat: /proc/uptime: I/O error"})
    events, _, _, outages = events_from_samples(rows)
    assert outages == {} and sorted((e.target, e.start, e.end) for e in events) == [
        ("a", T0 + 300 * US, T0 + 600 * US), ("b", T0 + 300 * US, T0 + 600 * US)]


def test_what_the_monitoring_outages_blinded():
    """blinded: the time the samples of the rounds in which no host answered would have stood for."""
    rows = [sample(1, "a", 0, "up"), sample(2, "b", 0, "up"), unreachable(3, "a", 300), unreachable(4, "b", 300),
            unreachable(5, "a", 600), sample(6, "b", 600, "up"), sample(7, "a", 900, "up")]
    assert blinded(rows) == {"a": [(T0 + 300 * US, T0 + 600 * US)], "b": [(T0 + 300 * US, T0 + 600 * US)]}
    # 10:10 is no outage (b answered): a's sample there is downtime, not blind
    events, _, _, outages = events_from_samples(rows)
    assert list(outages) == [T0 + 300 * US] and [(e.start, e.end) for e in events] == [(T0 + 600 * US,
                                                                                       T0 + 900 * US)]


def test_missing_gpus_and_reboots():
    rows = [sample(1, "a", 0, "up", gpus_found=8, boot_id="b1"), sample(2, "a", 300, "up", gpus_found=7, boot_id="b1"),
            sample(3, "a", 600, "up", gpus_found=7, boot_id="b1", uptime_s=100.0),
            sample(4, "a", 900, "up", gpus_found=8, boot_id="b2", uptime_s=250.0)]
    events, _, reboots, _ = events_from_samples(rows, expected_gpus={"a": 8})
    [g] = events
    assert (g.scope, g.gpus, g.start, g.end) == ("gpu", 1, T0 + 300 * US, T0 + 900 * US)
    assert g.reason == "nvidia-smi lists 7 of 8 GPUs"
    [rb] = reboots
    assert rb["booted_at"] == iso_utc(T0 + 650 * US) and rb["samples"] == [3, 4]


# ---------------------------------------------------------------------------------------------- Slurm

def test_scontrol_show_node_recorded_output():
    multi = slurm.parse_scontrol_show_node((SLURM / "scontrol_show_node.txt").read_text())
    one = slurm.parse_scontrol_show_node((SLURM / "scontrol_oneliner.txt").read_text())
    assert [d["NodeName"] for d in multi] == [d["NodeName"] for d in one] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    by = {d["NodeName"]: d for d in multi}
    assert by["gpu002"]["State"] == "UNKNOWN+DRAIN+NOT_RESPONDING"
    assert by["gpu002"]["Reason"] == "xid 79: GPU has fallen off the bus [root@2026-11-30T05:35:45]"
    assert by["gpu003"]["State"] == "DOWN+NOT_RESPONDING" and "Reason" not in by["gpu001"]
    assert {d["NodeName"]: d.get("Reason") for d in one} == {d["NodeName"]: d.get("Reason") for d in multi}
    assert slurm.parse_reason(by["gpu003"]["Reason"], "UTC") == ("nvlink errors, RMA", "root",
                                                                 parse_time("2026-11-30T05:35:45Z"))


@pytest.mark.parametrize("state, down", [
    ("IDLE", False), ("MIXED", False), ("ALLOCATED", False), ("IDLE+POWERED_DOWN", False), ("IDLE+MAINT", False),
    ("IDLE+DRAIN", True), ("ALLOCATED+DRAIN", True), ("DOWN+DRAIN", True), ("DOWN", True),
    ("IDLE+NOT_RESPONDING", True), ("down*", True), ("drained", True), ("draining", True), ("idle~", False),
    ("FAIL", True), ("mixed", False),
    # power saving is not downtime; no state at all is not either; an unknown state or a bad registration is
    ("idle#", False), ("IDLE+POWERING_UP", False), ("IDLE+POWERING_DOWN", False), ("", False), ("UNKNOWN", True),
    ("IDLE+INVALID_REG", True),
])
def test_which_slurm_states_are_down(state, down):
    assert slurm.is_down(state) is down


def test_snapshot_series_closes_at_the_first_snapshot_no_longer_down():
    text = (SLURM / "scontrol_oneliner.txt").read_text()
    # The same record later with the node back (the recorded line with State set to IDLE and no reason).
    lines = [line for line in text.splitlines() if line.startswith("NodeName=gpu003 ")]
    back = lines[0].replace("State=DOWN+NOT_RESPONDING", "State=IDLE").split(" Reason=")[0]
    snaps = [{"id": "s1", "observed_at_us": OBSERVED, "format": "scontrol", "text": lines[0]},
             {"id": "s2", "observed_at_us": OBSERVED + 300 * US, "format": "scontrol", "text": lines[0]},
             {"id": "s3", "observed_at_us": OBSERVED + 600 * US, "format": "scontrol", "text": back}]
    [e] = slurm.events_from_snapshots(snaps, "UTC")
    assert e.start == parse_time("2026-11-30T05:35:45Z")  # the reason's time, before the first snapshot
    assert e.end == OBSERVED + 600 * US and e.evidence["open"] is False and e.evidence["snapshots"] == ["s1", "s2"]
    # Slurm prints local times: the same line from a slurmctld in Tokyo started 9 hours earlier in UTC.
    [tokyo] = slurm.events_from_snapshots(snaps, "Asia/Tokyo")
    assert tokyo.start == parse_time("2026-11-29T20:35:45Z") and tokyo.end == e.end
    assert slurm.events_from_snapshots(snaps, "UTC", ignore_users=["root"]) == []


def test_a_snapshot_taken_in_an_honoured_exclusion_stands_only_until_it_ends():
    text = (SLURM / "scontrol_oneliner.txt").read_text()
    [line] = [x for x in text.splitlines() if x.startswith("NodeName=gpu002 ")]  # drained, reason at 05:35:45
    back = re.sub(r"State=\S+", "State=IDLE", line).split(" Reason=")[0]  # the same line, back in service
    snaps = [{"id": "s1", "observed_at_us": OBSERVED, "format": "scontrol", "text": line},
             {"id": "s2", "observed_at_us": OBSERVED + 300 * US, "format": "scontrol", "text": back}]
    test = (parse_time("2026-11-30T05:35:00Z"), parse_time("2026-11-30T05:37:00Z"))
    [e] = slurm.events_from_snapshots(snaps, "UTC", excluded={"gpu002": [test]})
    assert (e.start, e.end) == (parse_time("2026-11-30T05:35:45Z"), test[1])  # not to the next snapshot
    assert e.evidence["exclusion_ended_at"] == "2026-11-30T05:37:00Z"
    [e] = slurm.events_from_snapshots(snaps, "UTC")
    assert e.end == OBSERVED + 300 * US and e.evidence["exclusion_ended_at"] is None


def test_what_snapshots_observed_down_or_in_service():
    """coverage_from_snapshots: the time each sighting stands for (the review's time no source observed): until the
    next sighting, at most hold_intervals of its round's interval, and only until an honoured exclusion ends."""
    text = (SLURM / "scontrol_oneliner.txt").read_text()
    [line] = [x for x in text.splitlines() if x.startswith("NodeName=gpu002 ")]  # drained
    back = re.sub(r"State=\S+", "State=IDLE", line).split(" Reason=")[0]
    snaps = [{"id": "s1", "observed_at_us": OBSERVED, "format": "scontrol", "text": line, "interval_s": 300},
             {"id": "s2", "observed_at_us": OBSERVED + 300 * US, "format": "scontrol", "text": back,
              "interval_s": 300},
             {"id": "s3", "observed_at_us": OBSERVED + 3600 * US, "format": "scontrol", "text": back,
              "interval_s": 300}]
    seen = slurm.coverage_from_snapshots(snaps, "UTC", hold_intervals=2)
    # s2 stands for 10 min (2 x 300 s), not the 55 min to s3; the last one for its 10 min
    assert seen == {"gpu002": [(OBSERVED, OBSERVED + 900 * US), (OBSERVED + 3600 * US, OBSERVED + 4200 * US)]}
    test = [(OBSERVED - 60 * US, OBSERVED + 60 * US)]
    assert slurm.coverage_from_snapshots(snaps, "UTC", hold_intervals=2, excluded={"gpu002": test})["gpu002"][0] \
        == (OBSERVED, OBSERVED + 60 * US)
    # no hold at all: a sighting vouches up to the next one, never for ever
    assert slurm.coverage_from_snapshots([dict(x, interval_s=None) for x in snaps], "UTC") == {
        "gpu002": [(OBSERVED, OBSERVED + 3600 * US)]}


def test_single_snapshot_down_since_the_reason():
    snaps = [{"id": "rec", "observed_at_us": OBSERVED, "format": "scontrol",
              "text": (SLURM / "scontrol_show_node.txt").read_text()}]
    events = {e.target: e for e in slurm.events_from_snapshots(snaps, "UTC")}
    # gpu001 is not responding but has no reason time: nothing before the snapshot is known about it
    assert sorted(events) == ["gpu002", "gpu003", "gpu004"]
    assert all(e.start == parse_time("2026-11-30T05:35:45Z") and e.end == OBSERVED and e.evidence["open"]
               for e in events.values())


def test_sinfo_outputs():
    n = slurm.parse_sinfo((SLURM / "sinfo_N.txt").read_text())
    assert [(r["node"], r["state"], r["reason"]) for r in n] == [
        ("gpu001", "unknown*", ""), ("gpu002", "drained*", "xid 79: GPU has fallen off the bus"),
        ("gpu003", "down*", "nvlink errors, RMA"), ("gpu004", "drained*", "kernel upgrade")]
    r = slurm.parse_sinfo((SLURM / "sinfo_R.txt").read_text())
    assert [(x["node"], x["reason"], x["time"]) for x in r] == [
        ("gpu002", "xid 79: GPU has fall", "2026-11-30T05:35:45"), ("gpu004", "kernel upgrade", "2026-11-30T05:35:45"),
        ("gpu003", "nvlink errors, RMA", "2026-11-30T05:35:45")]
    snaps = [{"id": "n", "observed_at_us": OBSERVED, "format": "sinfo", "text": (SLURM / "sinfo_N.txt").read_text()}]
    assert sorted(e.target for e in slurm.events_from_snapshots(snaps, "UTC")) == ["gpu002", "gpu003", "gpu004"]


def test_hostlists():
    assert slurm.expand_hostlist("gpu[001-003,007],login1") == ["gpu001", "gpu002", "gpu003", "gpu007", "login1"]
    assert slurm.expand_hostlist("r[1-2]-t[1-2]") == ["r1-t1", "r1-t2", "r2-t1", "r2-t2"]
    assert slurm.expand_hostlist("node9") == ["node9"]


@pytest.mark.parametrize("name", ["sacctmgr_event.txt", "sacctmgr_event_P.txt"])
def test_sacctmgr_events(name):
    rows = slurm.parse_sacctmgr_events((SLURM / name).read_text())
    assert len(rows) == 5 and rows[0]["NodeName"] == "" and rows[0]["Reason"] == "Cluster Registered TRES"
    events = slurm.events_from_sacctmgr(rows, "UTC", OBSERVED, ignore_users=["alice"])
    assert [(e.target, iso_utc(e.start), iso_utc(e.end), e.evidence["open"]) for e in events] == [
        ("gpu002", "2026-11-03T14:02:11Z", "2026-11-03T16:47:30Z", False),
        ("gpu003", "2026-11-12T22:15:00Z", "2026-11-13T01:15:00Z", False),
        ("gpu001", "2026-11-29T23:30:00Z", "2026-11-30T05:36:03Z", True),  # still open: closed at the horizon
    ]
    assert len(slurm.events_from_sacctmgr(rows, "UTC", OBSERVED)) == 4  # alice's drain counts when not ignored
    # the User column is alice(1001) (-P) or alice(100+ (cut to the table's column): was not matched, so the
    # buyer's own drain was billed to the provider (4 events)
    assert [e.evidence["user"] for e in events] == ["root(0)", "slurm(64030)" if "_P" in name else "slurm(640+",
                                                    "root(0)"]


def test_sacctmgr_user_of_a_real_capture_is_name_and_uid():
    """tests/fixtures/slurm/captures/sacctmgr_event_p_oci_h100.txt: `sacctmgr -p show event` of an OCI H100 cluster
    (every field, User printed as name(uid)); root(0) drained h100-pool0-0364 for 19:51."""
    rows = slurm.parse_sacctmgr_events((FIX / "slurm" / "captures" / "sacctmgr_event_p_oci_h100.txt").read_text())
    assert [(r["NodeName"], r["User"]) for r in rows] == [
        ("h100-pool0-0290", "slurm(450)"), ("h100-pool0-0417", "slurm(450)"), ("h100-pool0-0364", "root(0)")]
    horizon = parse_time("2025-12-12T12:00:00Z")
    every = slurm.events_from_sacctmgr(rows, "UTC", horizon)
    assert [(e.target, (e.end - e.start) // US) for e in every] == [
        ("h100-pool0-0290", 8921), ("h100-pool0-0417", 1627), ("h100-pool0-0364", 1191)]
    # root's drain is not the provider's when root is the buyer's admin: was still counted (1,191 s)
    kept = slurm.events_from_sacctmgr(rows, "UTC", horizon, ignore_users=["root"])
    assert [e.target for e in kept] == ["h100-pool0-0290", "h100-pool0-0417"]
    assert [e.target for e in slurm.events_from_sacctmgr(rows, "UTC", horizon, ignore_users=["slurm"])] == [
        "h100-pool0-0364"]
    assert [slurm.event_user(u) for u in ("root(0)", "alice(100+", "slurm", "")] == ["root", "alice", "slurm", ""]


def test_sacctmgr_parsable_with_trailing_pipe():
    text = "Cluster|NodeName|TimeStart|TimeEnd|State|Reason|User|\ncmxl|gpu9|2026-11-01T00:00:00|" \
           "2026-11-01T01:00:00|DOWN|x||\n"
    [row] = slurm.parse_sacctmgr_events(text)
    assert row["User"] == "" and row["Reason"] == "x"


# ---------------------------------------------------------------------------------------------- imports

def test_csv_import_with_offsets_and_zone(tmp_path):
    path = tmp_path / "provider.csv"
    path.write_text("# exported by the provider's NOC\n"
                    "start,end,target,scope,kind,reason,announced_at\n"
                    "2026-11-03T10:00:00+01:00,2026-11-03T11:00:00+01:00,n1,node,down,PSU swap,\n"
                    "2026-11-04T02:00:00Z,2026-11-04T04:00:00Z,r1,rack,physical_maintenance,coolant,"
                    "2026-10-30T00:00:00Z\n")
    a, b = imports.load(str(path))
    assert (a.start, a.end, a.target, a.kind) == (parse_time("2026-11-03T09:00:00Z"),
                                                  parse_time("2026-11-03T10:00:00Z"), "n1", "down")
    assert b.scope == "rack" and b.kind == "physical_maintenance"
    assert b.announced_at == parse_time("2026-10-30T00:00:00Z")
    naive = tmp_path / "naive.csv"
    naive.write_text("start,end,target\n2026-11-03 10:00:00,2026-11-03 11:00:00,n1\n")
    with pytest.raises(EventError, match="naive.csv#1.*no time zone"):
        imports.load(str(naive))
    [e] = imports.load(str(naive), timezone="Asia/Tokyo")
    assert e.start == parse_time("2026-11-03T01:00:00Z")


def test_json_import_and_refusals(tmp_path):
    path = tmp_path / "log.json"
    path.write_text(json.dumps({"timezone": "UTC", "events": [
        {"start": "2026-11-05T00:00:00", "end": "2026-11-05T00:30:00", "target": "n2", "scope": "gpu", "gpu": 3,
         "reason": "XID 79"}]}))
    [e] = imports.load(str(path))
    assert e.scope == "gpu" and e.gpu == "3" and e.end - e.start == 1800 * US
    path.write_text(json.dumps([{"start": "2026-11-05T00:00:00Z", "end": "", "target": "n2"}]))
    with pytest.raises(EventError, match="no end"):
        imports.load(str(path))
    path.write_text(json.dumps([{"start": "2026-11-05T00:00:00Z", "end": "2026-11-05T01:00:00Z", "target": "n2",
                                 "kind": "outage"}]))
    with pytest.raises(EventError, match="kind 'outage'"):
        imports.load(str(path))
    with pytest.raises(TimeError):
        parse_time("yesterday")


# ---------------------------------------------------------------------------------------------- assessment

def test_the_assessments_test_windows_from_the_recorded_run(tmp_path):
    """The recorded run's reliability artifacts as the probes wrote them: each test's window runs from its first
    recorded action on the node to the batch's record of that node, written after the batch put the node back."""
    run = unpack_recorded_run(tmp_path)
    december = (parse_time("2026-12-01T00:00:00Z"), parse_time("2027-01-01T00:00:00Z"))
    assert assessment.find_runs(str(tmp_path), *december) == [str(run)]
    assert assessment.find_runs(str(tmp_path), parse_time("2026-11-01T00:00:00Z"), december[0]) == []
    files = assessment.reliability_files(str(run))
    assert "artifacts/cmxbl-node1/sched_watch-reboot-b1.jsonl" in files and "artifacts/cmxbl-node4/fault_inject.json" \
        in files and not [f for f in files if "gemm" in f or "burnin" in f]
    notes = []
    events = {e.target: e for e in assessment.events_from_run(str(run), notes)}
    assert notes == [] and sorted(events) == ["cmxbl-node2", "cmxbl-node3", "cmxbl-node4"]  # node1 watched only

    def artifact(host, name):
        return json.loads((run / "artifacts" / host / name).read_text())

    def value(doc, metric, **labels):
        return next(r["value"] for r in doc["results"]
                    if r["metric"] == metric and r["labels"].items() >= labels.items())

    drain = artifact("cmxbl-node1", "sched_action-reboot-b1-drain.json")
    for host in ("cmxbl-node2", "cmxbl-node3"):
        e = events[host]
        assert e.kind == "assessment" and e.scope == "node" and e.announced_at is None
        assert e.start == round(value(drain, "drain_issued_at", node=host) * US)  # the observer drained it first
        assert e.end == parse_time(artifact(host, "reboot.json")["started_at"])
        assert e.evidence["from"] == "drain_issued"
        # the whole test lies inside: the fresh job after the reboot and the batch's restore
        job_ok = value(artifact("cmxbl-node1", "sched_action-reboot-b1-return.json"), "job_ok_at", node=host)
        assert e.start < job_ok * US < e.end
        assert parse_time(artifact("cmxbl-node1", "sched_action-reboot-b1-restore.json")["finished_at"]) <= e.end
    fault = events["cmxbl-node4"]
    assert fault.start == round(value(artifact("cmxbl-node4", "fault_inject.json"), "injected_at") * US)
    assert fault.end == parse_time(artifact("cmxbl-node4", "fault_injection.json")["started_at"])
    # the provider's health check drained the node; the batch resumed it (restore) before the record
    assert parse_time(artifact("cmxbl-node1", "sched_action-fault-b1-restore.json")["finished_at"]) <= fault.end
    assert fault.reason == "fault injection test of the assessment (run 20261201T203421Z-00d68c, batch 1)"


def test_a_test_that_cannot_be_timed_excludes_nothing_and_says_so(tmp_path):
    run = unpack_recorded_run(tmp_path)
    # the record of node2 as the probe action writes it when the probe fails (status error, the reason)
    path = run / "artifacts" / "cmxbl-node2" / "reboot.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "error", "reason": "probe timed out"}))
    notes = []
    assert sorted(e.target for e in assessment.events_from_run(str(run), notes)) == ["cmxbl-node3", "cmxbl-node4"]
    assert notes == ["assessment run 20261201T203421Z-00d68c, reboot of cmxbl-node2: an error record (probe timed "
                     "out): the test is not timed, nothing is excluded"]


CAP = FIX / "slurm" / "captures"


def test_sinfo_default_format_after_a_prompt():
    # USC CARC: default table after "$ sinfo", trimmed with "..."; the default partition's "*" is not its name
    recs = slurm.parse_sinfo((CAP / "sinfo_default_usc_carc.txt").read_text())
    by = {r["node"]: r for r in recs}
    assert len(recs) == 1 + 5 + 1 + 1 + 30 + 5 and recs[0]["unparsed_lines"] == ["..."]
    assert [(n, by[n]["state"], by[n]["partition"]) for n in ("a02-26", "e05-80", "e22-13", "b22-21", "b22-32",
                                                              "d17-44")] == [
        ("a02-26", "mix", "debug"), ("e05-80", "idle", "debug"), ("e22-13", "idle", "debug"),
        ("b22-21", "drng", "epyc-64"), ("b22-32", "alloc", "epyc-64"), ("d17-44", "drain*", "main")]
    assert "b22-21" in by and "b22-31" in by and "b22-21" not in [r["node"] for r in recs if r["state"] == "alloc"]
    assert sorted(r["node"] for r in recs if slurm.is_down(r["state"])) == ["b22-21"] + [
        "d17-%d" % i for i in range(40, 45)]
    gentoo = slurm.parse_sinfo((CAP / "sinfo_default_gentoo.txt").read_text())
    assert [(r["node"], r["state"], r["partition"]) for r in gentoo] == [
        ("cu%d" % i, "drain", "regular") for i in range(201, 205)]


def test_sinfo_N_l_with_its_date_line():
    recs = slurm.parse_sinfo((CAP / "sinfo_lNp_usc_carc.txt").read_text())
    assert [(r["node"], r["state"], r["reason"], r["partition"]) for r in recs] == [
        ("a02-26", "mixed", "", "debug"), ("e05-42", "idle", "", "debug"), ("e05-76", "idle", "", "debug"),
        ("e05-78", "idle", "", "debug"), ("e05-80", "idle", "", "debug"), ("e22-13", "idle", "", "debug")]


def test_sinfo_R_takes_no_invented_state():
    recs = slurm.parse_sinfo((CAP / "sinfo_R_unige_baobab.txt").read_text())
    by = {r["node"]: r for r in recs}
    assert len(recs) == 3 + 2 + 6 + 1 + 1 + 5 + 6 + 11 + 4 + 3 + 3 + 3 + 1
    assert (by["gpu004"]["reason"], by["gpu004"]["user"], by["gpu004"]["time"]) == (
        "gres/gpu GRES core s", "slurm", "2025-04-03T15:48:07")
    assert (by["cpu319"]["reason"], by["cpu319"]["user"]) == ("issue-6543", "root")
    assert all(r["state"] == "" and r["listed"] for r in recs)  # plain -R prints no state
    gentoo = slurm.parse_sinfo((CAP / "sinfo_R_gentoo.txt").read_text())
    assert [(r["node"], r["reason"], r["time"]) for r in gentoo][-1] == ("cu204", "Low RealMemory",
                                                                        "2022-05-18T17:22:54")
    # listed by -R: out of service for the SLA review, since the reason's time
    snaps = [{"id": "r", "observed_at_us": parse_time("2022-05-19T00:00:00Z"), "format": "sinfo",
              "text": (CAP / "sinfo_R_gentoo.txt").read_text()}]
    events = slurm.events_from_snapshots(snaps, "UTC")
    assert [(e.target, iso_utc(e.start)) for e in events][0] == ("cu201", "2022-05-18T17:20:20Z")
    assert len(events) == 4


def test_sinfo_unreadable_names_the_line():
    with pytest.raises(slurm.SlurmParseError, match="cannot read 'slurm_load_partitions: Unable to contact"):
        slurm.parse_sinfo("slurm_load_partitions: Unable to contact slurm controller (connect failure)\n")


def test_hostlist_of_a_real_sinfo_line():
    assert slurm.expand_hostlist("gpu[013-017,021-026,034-044,046-049]")[:6] == [
        "gpu013", "gpu014", "gpu015", "gpu016", "gpu017", "gpu021"]
    assert len(slurm.expand_hostlist("b22-[01-20,22-30,32]")) == 30
    assert slurm.expand_hostlist("e05-[42,76,78,80],e22-13") == ["e05-42", "e05-76", "e05-78", "e05-80", "e22-13"]


# ---------------------------------------------------------------------------------------------- Slurm: series

def test_sinfo_R_leaves_out_nodes_in_service_so_two_drains_are_two_outages():
    """sinfo -R every 5 minutes, as recorded (tests/fixtures/slurm/sla/sinfo_R.txt): gpu002 drained 10:00-10:30
    and again 20:00-20:30; between the two, -R does not list it (it was in service)."""
    lines = (SLURM / "sinfo_R.txt").read_text().splitlines()
    header, others = lines[0], [x for x in lines[1:] if not x.endswith("gpu002")]
    [drained] = [x for x in lines[1:] if x.endswith("gpu002")]
    t0 = parse_time("2026-11-30T09:55:00Z")
    snaps = []
    for k in range(0, 128):  # 09:55 .. 20:30
        t = t0 + k * 300 * US
        clock = iso_utc(t)[11:16]
        since = "10:00" if "10:00" <= clock < "10:30" else "20:00" if "20:00" <= clock < "20:30" else None
        rows = ([drained.replace("2026-11-30T05:35:45", "2026-11-30T%s:00" % since)] if since else []) + others
        snaps.append({"id": "r%d" % k, "observed_at_us": t, "format": "sinfo", "text": "\n".join([header] + rows)})
    events = [e for e in slurm.events_from_snapshots(snaps, "UTC", max_gap_us=600 * US) if e.target == "gpu002"]
    # was one event 10:00-20:25 (37,500 s, 10.4 h): the snapshots without gpu002 did not count as "up"
    assert [(iso_utc(e.start), iso_utc(e.end)) for e in events] == [
        ("2026-11-30T10:00:00Z", "2026-11-30T10:30:00Z"), ("2026-11-30T20:00:00Z", "2026-11-30T20:30:00Z")]
    assert sum(e.end - e.start for e in events) == 3600 * US


def oneliner(state, reason, since):
    """The recorded `scontrol -o show node` line of gpu002 with another state and reason."""
    [line] = [x for x in (SLURM / "scontrol_oneliner.txt").read_text().splitlines() if x.startswith("NodeName=gpu002 ")]
    line = re.sub(r"State=\S+", "State=" + state, line).split(" Reason=")[0]
    return line + (" Reason=%s [root@%s]" % (reason, since) if reason else "")


def test_a_hole_in_the_snapshots_or_a_new_drain_splits_the_outage():
    def snap(hhmm, state="IDLE+DRAIN", reason="", since=""):
        return {"id": hhmm, "observed_at_us": parse_time("2026-11-30T%s:00Z" % hhmm), "format": "scontrol",
                "text": oneliner(state, reason, "2026-11-30T%s:00" % since)}

    # 10:10-10:55 the snapshots failed (review.compute skips rc != 0): 45 min not monitored, then a new drain
    snaps = [snap("10:00", reason="xid 79", since="09:58"), snap("10:05", reason="xid 79", since="09:58"),
             snap("11:00", reason="xid 48", since="10:40"), snap("11:05", state="IDLE")]
    events = slurm.events_from_snapshots(snaps, "UTC", max_gap_us=600 * US)
    # was one event 09:58-11:05 (4,020 s)
    assert [(iso_utc(e.start)[11:19], iso_utc(e.end)[11:19], e.reason, e.evidence["open"]) for e in events] == [
        ("09:58:00", "10:05:00", "xid 79", True), ("10:40:00", "11:05:00", "xid 48", False)]
    # not responding, with no reason time: only the snapshots say when, and the hole is not counted (was 65 min)
    snaps = [snap("10:00", state="IDLE+NOT_RESPONDING"), snap("10:05", state="IDLE+NOT_RESPONDING"),
             snap("11:00", state="IDLE+NOT_RESPONDING"), snap("11:05", state="IDLE")]
    events = slurm.events_from_snapshots(snaps, "UTC", max_gap_us=600 * US)
    assert [(iso_utc(e.start)[11:19], iso_utc(e.end)[11:19]) for e in events] == [
        ("10:00:00", "10:05:00"), ("11:00:00", "11:05:00")]
    # the same drain on both sides (its reason time before the hole): Slurm's own record says it never ended
    snaps = [snap("10:00", reason="xid 79", since="09:58"), snap("10:05", reason="xid 79", since="09:58"),
             snap("11:00", reason="xid 79", since="09:58"), snap("11:05", state="IDLE")]
    events = slurm.events_from_snapshots(snaps, "UTC", max_gap_us=600 * US)
    assert [(iso_utc(e.start)[11:19], iso_utc(e.end)[11:19]) for e in events] == [
        ("09:58:00", "10:05:00"), ("09:58:00", "11:05:00")]
    # no hole, but the node was drained again between two snapshots: two outages, each with its own reason
    snaps = [snap("10:00", reason="xid 79", since="09:58"), snap("10:05", reason="xid 48", since="10:03"),
             snap("10:10", state="IDLE")]
    events = slurm.events_from_snapshots(snaps, "UTC", max_gap_us=600 * US)
    assert [(iso_utc(e.start)[11:19], iso_utc(e.end)[11:19], e.reason) for e in events] == [
        ("09:58:00", "10:03:00", "xid 79"), ("10:03:00", "10:10:00", "xid 48")]


def test_fields_after_the_reason_on_one_line():
    """tests/fixtures/slurm/captures/scontrol_oneliner_reservation_25.11.2.txt (`scontrol show nodes -o`, Slurm
    25.11.2): c1 and c4 drained at 23:31:17 by root, `... [root@2026-07-22T23:31:17] ReservationName=maintenance-2026`.
    The reason was read to the end of the line, so its stamp was not found: no reason time (the outage began at the
    first snapshot, 00:00 here: 1,723 s lost) and no user (ignore_users never matched)."""
    text = (FIX / "slurm" / "captures" / "scontrol_oneliner_reservation_25.11.2.txt").read_text()
    docs = {d["NodeName"]: d for d in slurm.parse_scontrol_show_node(text)}
    assert docs["c4"]["Reason"] == "planned_maintenance [root@2026-07-22T23:31:17]"
    assert docs["c4"]["ReservationName"] == "maintenance-2026" and "Reason" not in docs["c2"]
    snaps = [{"id": "s1", "observed_at_us": parse_time("2026-07-23T00:00:00Z"), "format": "scontrol", "text": text}]
    events = slurm.events_from_snapshots(snaps, "UTC")
    assert [(e.target, iso_utc(e.start), e.reason, e.evidence["reason_user"]) for e in events] == [
        ("c1", "2026-07-22T23:31:17Z", "planned_maintenance", "root"),
        ("c4", "2026-07-22T23:31:17Z", "planned_maintenance", "root")]
    assert slurm.events_from_snapshots(snaps, "UTC", ignore_users=["root"]) == []


def test_each_snapshot_holds_for_its_own_rounds_interval():
    """A 15-minute probe (sla_probe_interval_s 900, sample_max_hold_intervals 2): each snapshot stands for 30 min,
    as the round it was taken in records; the 600 s of the default 5-minute interval cut every gap."""
    def snap(hhmm, state, reason=""):
        return {"id": hhmm, "observed_at_us": parse_time("2026-11-03T%s:00Z" % hhmm), "format": "scontrol",
                "interval_s": 900.0, "text": oneliner(state, reason, "2026-11-03T10:07:00")}

    drained = ([snap("10:00", "IDLE")] + [snap(t, "IDLE+DRAIN", "xid 79") for t in ("10:15", "10:30", "10:45", "11:00")]
               + [snap("11:15", "IDLE")])
    [e] = slurm.events_from_snapshots(drained, "UTC", max_gap_us=600 * US, hold_intervals=2)
    # drained 10:07 (its reason's time) until seen in service at 11:15: 68 min; was 53 min in 4 overlapping pieces
    assert (iso_utc(e.start), iso_utc(e.end), e.evidence["open"]) == (
        "2026-11-03T10:07:00Z", "2026-11-03T11:15:00Z", False)
    old = slurm.events_from_snapshots(drained, "UTC", max_gap_us=600 * US)  # no recorded interval: the default
    assert len(old) == 4 and max(x.end for x in old) - min(x.start for x in old) == 53 * 60 * US
    # not responding, no reason time: only the snapshots say when; was no event at all (each one cut off alone)
    silent = [snap(t, "IDLE+NOT_RESPONDING") for t in ("10:00", "10:15", "10:30", "10:45")] + [snap("11:00", "IDLE")]
    [e] = slurm.events_from_snapshots(silent, "UTC", max_gap_us=600 * US, hold_intervals=2)
    assert (iso_utc(e.start), iso_utc(e.end)) == ("2026-11-03T10:00:00Z", "2026-11-03T11:00:00Z")
    assert slurm.events_from_snapshots(silent, "UTC", max_gap_us=600 * US) == []
    # the snapshots of 10:30-11:00 missed (an hour between two, more than 2 x 900 s): not monitored, two pieces
    holed = [snap(t, "IDLE+NOT_RESPONDING") for t in ("10:00", "10:15", "11:15")] + [snap("11:30", "IDLE")]
    assert [(iso_utc(e.start)[11:16], iso_utc(e.end)[11:16]) for e in slurm.events_from_snapshots(
        holed, "UTC", max_gap_us=600 * US, hold_intervals=2)] == [("10:00", "10:15"), ("11:15", "11:30")]


def test_sacctmgr_end_in_the_repeated_autumn_hour_and_a_reversed_line():
    """Chicago: summer time ends on 2026-11-01 at 02:00 CDT, the clock shows 01:00-02:00 twice."""
    text = ((SLURM / "sacctmgr_event_P.txt").read_text().splitlines()[0] + "\n"
            "cmxl|gpu002|2026-11-01T01:40:00|2026-11-01T01:10:00|DOWN*|Not responding|slurm\n"
            "cmxl|gpu003|2026-11-12T22:15:00|2026-11-12T21:15:00|DOWN*|Not responding|slurm\n")
    notes = []
    events = slurm.events_from_sacctmgr(slurm.parse_sacctmgr_events(text), "America/Chicago", OBSERVED,
                                        notes=notes)
    # 01:40 CDT (06:40Z) to 01:10 CST (07:10Z): 30 min; was dropped without a word
    assert [(e.target, iso_utc(e.start), iso_utc(e.end)) for e in events] == [
        ("gpu002", "2026-11-01T06:40:00Z", "2026-11-01T07:10:00Z")]
    assert notes == ["sacctmgr row 2 after the header: gpu003 2026-11-12T22:15:00 to 2026-11-12T21:15:00 "
                     "(America/Chicago time) does not end after it starts: not counted"]


def test_a_drain_reason_in_the_repeated_autumn_hour_after_the_node_was_seen_in_service():
    """Chicago, 2026-11-01: the clock shows 01:00-02:00 twice (06:00Z-07:00Z CDT, then 07:00Z-08:00Z CST)."""
    def snap(utc, state, reason="", since=""):
        return {"id": utc, "observed_at_us": parse_time("2026-11-01T%s:00Z" % utc), "format": "scontrol",
                "text": oneliner(state, reason, since)}

    # in service at 06:50Z (01:50 CDT); the snapshots failed until 07:45Z, which shows a drain set at 01:40 CST
    snaps = [snap("06:50", "IDLE"), snap("07:45", "IDLE+DRAIN", "xid 79", "2026-11-01T01:40:00"),
             snap("07:50", "IDLE")]
    [e] = slurm.events_from_snapshots(snaps, "America/Chicago", max_gap_us=600 * US)
    # was 06:50Z-07:50Z (3,600 s): 01:40 read as CDT (06:40Z), before the node was seen in service
    assert (iso_utc(e.start), iso_utc(e.end)) == ("2026-11-01T07:40:00Z", "2026-11-01T07:50:00Z")
    assert e.evidence["reason_since"] == "2026-11-01T07:40:00Z"
    # nothing seen before the drain: both passes fit, and the first one is read, as for any zone-less time
    [e] = slurm.events_from_snapshots(snaps[1:], "America/Chicago", max_gap_us=600 * US)
    assert iso_utc(e.start) == "2026-11-01T06:40:00Z"


def test_an_import_in_local_time_across_the_repeated_autumn_hour(tmp_path):
    """A provider's log in New York time: 2026-11-01 01:00-02:00 happens twice (05:00Z-06:00Z EDT, 06:00Z-07:00Z
    EST)."""
    path = tmp_path / "noc.csv"
    path.write_text("start,end,target,kind,reason,announced_at\n"
                    "2026-11-01 01:40:00,2026-11-01 01:10:00,n1,down,PSU,\n"
                    "2026-10-31 23:00:00,2026-11-01 01:30:00,n2,physical_maintenance,coolant,2026-10-20 09:00:00\n")
    # was refused whole ("noc.csv#1: ends before it starts"), and with it the review
    down, maintenance = imports.load(str(path), timezone="America/New_York")
    assert (iso_utc(down.start), iso_utc(down.end)) == ("2026-11-01T05:40:00Z", "2026-11-01T06:10:00Z")
    assert (iso_utc(maintenance.start), iso_utc(maintenance.end)) == ("2026-11-01T03:00:00Z", "2026-11-01T05:30:00Z")
    path.write_text("start,end,target\n2026-11-01 01:40:00,2026-11-01 00:50:00,n1\n")  # no reading ends later
    with pytest.raises(EventError, match="noc.csv#1: ends before it starts"):
        imports.load(str(path), timezone="America/New_York")
