"""The timelines the controller computes (reports/phases/reliability/timeline.py) and the watcher's stop rule and
compaction (probes/reliability/samples.py), over scheduler state sequences recorded on the test cluster's Slurm
(tests/fixtures/slurm/watch_*.jsonl; tests/fixtures/slurm/sequences.json says what happened in each); and, from the
whole recorded run (tests/fixtures/assessment_run), the proof of the move: computed from the raw observations alone,
every timing, event and fact is what the old node-side probes computed into their artifacts."""

import copy
import json
import tarfile
from pathlib import Path

import pytest

from probes.common import k8s as sched_k8s
from probes.common import sched
from probes.common import slurm as sched_slurm
from probes.reliability import samples as watch
from probes.reliability import sched_watch
from reports.load import load_run
from reports.phases.reliability import section, timeline

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
META = json.loads((FIX / "sequences.json").read_text())


def seq(name):
    node = META[name]["node"]
    samples = [json.loads(line) for line in (FIX / name).read_text().splitlines() if line.strip()]
    return [s for s in samples if s["node"] == node], META[name]


def test_health_check_drain_is_detected_and_stays_open():
    samples, meta = seq("watch_xid_drained.jsonl")
    tl = timeline.fault_timeline(samples, meta["t_inject"])
    assert tl["measurable"] and tl["detected"] and tl["drained"]
    # first drained sample minus the injection time
    first_drained = next(s["t"] for s in samples if s["phase"] == "drained")
    assert tl["detect_s"] == pytest.approx(first_drained - meta["t_inject"], abs=1e-3)
    assert 0 < tl["detect_s"] < 5
    assert tl["detect_reason"] == "XID 79 in kernel log (health check)"
    assert tl["returned"] is False and tl["drain_open"] is True and tl["flaps"] == 0
    assert tl["time_drained_s"] == pytest.approx(samples[-1]["t"] - first_drained, abs=1e-3)
    assert tl["out_of_service_s"] == tl["time_drained_s"]


def test_never_detected_node():
    samples, meta = seq("watch_never_detected.jsonl")
    tl = timeline.fault_timeline(samples, meta["t_inject"])
    assert tl["measurable"] and tl["detected"] is False
    assert "detect_s" not in tl and tl["returned"] is False and tl["final_phase"] == "available"
    assert tl["watched_s"] == pytest.approx(samples[-1]["t"] - meta["t_inject"], abs=1e-3)


def test_flapping_node_counts_flaps_and_returns_only_for_good():
    samples, meta = seq("watch_flapping.jsonl")
    tl = timeline.fault_timeline(samples, meta["t_inject"])
    assert tl["detected"] and tl["flaps"] == 1
    # back for good at the last IDLE, not at the first one
    last_idle = [s["t"] for s in samples if s["state"] == "IDLE"][-2]  # the final reading repeats it
    assert tl["returned"] and tl["return_s"] == pytest.approx(last_idle - meta["t_inject"], abs=1e-3)
    # two drained stretches; Slurm's NOT_RESPONDING blip after a resume is out of service but not drained
    drained = [(a["t"], b["t"]) for a, b in zip(samples, samples[1:]) if a["phase"] == "drained"]
    assert len(drained) == 2
    assert tl["time_drained_s"] == pytest.approx(sum(b - a for a, b in drained), abs=1e-3)
    assert tl["out_of_service_s"] > tl["time_drained_s"]
    assert tl["drain_open"] is False


def test_node_that_stops_answering_is_detected_as_down_then_returns():
    samples, meta = seq("watch_not_responding.jsonl")
    tl = timeline.fault_timeline(samples, meta["t_inject"])
    assert tl["detect_phase"] == "down" and tl["drained"] is False
    # SlurmdTimeout=10 in the recording: Slurm noticed after about that long
    assert 8 <= tl["detect_s"] <= 14
    assert tl["returned"] and tl["flaps"] == 0


def test_a_node_already_out_of_service_is_not_measurable():
    samples, meta = seq("watch_xid_drained.jsonl")
    later = next(s["t"] for s in samples if s["phase"] == "drained") + 0.1
    tl = timeline.fault_timeline(samples, later)
    assert tl["measurable"] is False and "drained" in tl["why"]


def test_no_samples_or_none_before_injection():
    assert timeline.fault_timeline([], 10.0)["observed"] is False
    samples, meta = seq("watch_never_detected.jsonl")
    assert timeline.fault_timeline(samples, samples[0]["t"] - 5)["observed"] is False


def test_unknown_readings_neither_start_nor_end_a_stage():
    samples, meta = seq("watch_xid_drained.jsonl")
    # a failed reading between the injection and the detection
    noisy = samples + [{"t": meta["t_inject"] + 0.2, "node": samples[0]["node"], "phase": "unknown",
                        "state": None, "reason": "scontrol: Socket timed out"}]
    assert timeline.fault_timeline(noisy, meta["t_inject"]) == timeline.fault_timeline(samples, meta["t_inject"])


def test_removed_node_is_flagged():
    samples, meta = seq("watch_xid_drained.jsonl")
    gone = samples[:2] + [dict(samples[1], t=samples[1]["t"] + 30, phase="missing", state=None, reason=None)]
    tl = timeline.fault_timeline(gone, meta["t_inject"])
    assert tl["removed"] and tl["final_phase"] == "missing"


def test_a_node_flagged_unhealthy_but_left_schedulable_is_detected_and_not_remediated():
    """Kubernetes: a health agent's node condition (node-problem-detector's KernelDeadlock, as it sets it) says the
    node is bad 30 s after the fault, and nobody cordons it. The fault was noticed, but work is not kept off the node:
    detected, and the remediation seen is none. Before, the flagged node counted as out of service."""
    nodes = sched_k8s.parse_nodes((FIX.parent / "k8s" / "nodes.json").read_text())
    name, node = sorted(nodes.items())[0]
    t0 = 1_800_000_000.0
    flagged = copy.deepcopy(node)
    flagged["status"]["conditions"].append({
        "type": "KernelDeadlock", "status": "True", "reason": "DockerHung",
        "message": "kernel: INFO: task docker:20744 blocked for more than 120 seconds.",
        "lastHeartbeatTime": "2027-01-15T08:00:30Z", "lastTransitionTime": "2027-01-15T08:00:30Z"})
    samples = [sched_k8s.sample(name, node, t0 - 1), sched_k8s.sample(name, flagged, t0 + 30),
               sched_k8s.sample(name, flagged, t0 + 600)]
    assert [s["phase"] for s in samples] == ["available", "unhealthy", "unhealthy"]
    tl = timeline.fault_timeline(samples, t0)
    assert tl["detected"] and tl["detect_s"] == 30.0 and tl["detect_phase"] == "unhealthy"
    assert tl["detect_reason"] == "KernelDeadlock=True"
    assert not tl["held_out"] and not tl["returned"] and tl["time_drained_s"] == 0.0
    assert timeline.observed_action(tl, rebooted=False) == "none"
    # cordoned a minute later: held out from then on
    cordoned = copy.deepcopy(flagged)
    cordoned["spec"]["unschedulable"] = True
    later = samples[:2] + [sched_k8s.sample(name, cordoned, t0 + 90), sched_k8s.sample(name, cordoned, t0 + 600)]
    tl = timeline.fault_timeline(later, t0)
    assert (tl["detect_s"], tl["drain_s"], tl["out_of_service_s"]) == (30.0, 90.0, 510.0)
    assert timeline.observed_action(tl, rebooted=False) == "drained"
    # without a scheduler the detect command's "unhealthy" is all there is to say the node is out
    tl = timeline.fault_timeline(samples, t0, out_phases=sched.held_out("none"))
    assert tl["held_out"] and timeline.observed_action(tl, rebooted=False) == "out_of_service"


def test_reboot_stages_from_the_recorded_reboot():
    samples, meta = seq("watch_reboot.jsonl")
    ev = meta["events"]
    st = timeline.reboot_timeline(samples, ev)
    assert st["baseline_phase"] == "available"
    assert st["drain_s"] == pytest.approx(ev["drained"] - ev["drain_issued"], abs=1e-3)
    assert st["reboot_s"] == pytest.approx(ev["reboot_returned"] - ev["reboot_started"], abs=1e-3)
    # slurmd's start time changed in the watcher's samples before the return action looked
    restart = next(s["t"] for s in samples if s["slurmd_start"] != samples[0]["slurmd_start"])
    assert restart < ev["registered"]
    assert st["registered_s"] == pytest.approx(restart - ev["reboot_started"], abs=1e-3)
    assert st["resume_s"] == pytest.approx(ev["available"] - ev["resume_issued"], abs=1e-3)
    assert st["job_s"] == pytest.approx(ev["job_ok"] - ev["job_started"], abs=1e-3)
    assert st["return_to_service_s"] == pytest.approx(ev["job_ok"] - ev["reboot_started"], abs=1e-3)
    assert st["total_s"] == pytest.approx(ev["job_ok"] - ev["drain_issued"], abs=1e-3)
    # the NOT_RESPONDING blip right after the resume is not "seen down during the reboot"
    assert st["seen_down_s"] is None
    assert st["flaps_after_return"] == 0


@pytest.mark.parametrize("skew", [-40.0, 5.0])
def test_reboot_stages_are_each_timed_on_one_clock_whatever_the_controllers_is(skew):
    """The controller stamps the reboot's start and return by its own clock, the observer everything the scheduler
    saw by its: the observer's reading of the reboot's start times the scheduler's stages, so a controller `skew`
    seconds off the cluster changes none of them (before, return_to_service_s moved by the skew: 49.2 s where
    9.2 were measured, longer than the whole drain -> fresh job)."""
    samples, meta = seq("watch_reboot.jsonl")
    ev = dict(meta["events"], reboot_started_observer=meta["events"]["reboot_started"])
    right = timeline.reboot_timeline(samples, ev)
    skewed = dict(ev, reboot_started=ev["reboot_started"] + skew, reboot_returned=ev["reboot_returned"] + skew)
    st = timeline.reboot_timeline(samples, skewed)
    for name in timeline.REBOOT_TIMINGS:
        assert st[name] == right[name], name
    assert st["return_to_service_s"] == pytest.approx(ev["job_ok"] - ev["reboot_started"], abs=1e-3)
    assert st["return_to_service_s"] < st["total_s"]


def test_reboot_stages_fall_back_to_the_watcher_when_an_action_saw_nothing():
    samples, meta = seq("watch_reboot.jsonl")
    ev = {k: v for k, v in meta["events"].items() if k not in ("drained", "available", "registered")}
    st = timeline.reboot_timeline(samples, ev)
    first_drained = next(s["t"] for s in samples if s["phase"] == "drained")
    assert st["drain_s"] == pytest.approx(first_drained - ev["drain_issued"], abs=1e-3)
    assert st["resume_s"] is not None and st["resume_s"] >= 0


def test_reboot_seen_down_when_slurm_notices_the_node_gone():
    samples, meta = seq("watch_not_responding.jsonl")
    st = timeline.reboot_timeline(samples, {"reboot_started": meta["t_inject"]})
    assert 8 <= st["seen_down_s"] <= 14
    assert st["registered_s"] > st["seen_down_s"]


def test_watch_resolution():
    drained, meta = seq("watch_xid_drained.jsonl")
    t0 = drained[0]["t"]
    # detected, still drained: resolved only once the remediation window has passed
    detected_at = next(s["t"] for s in drained if s["phase"] == "drained")
    assert not watch.watch_resolved(drained, t0, detected_at + 1, 60, 3, 2)
    assert watch.watch_resolved(drained, t0, detected_at + 3.1, 60, 3, 2)
    quiet, _ = seq("watch_never_detected.jsonl")
    assert not watch.watch_resolved(quiet, quiet[0]["t"], quiet[0]["t"] + 30, 60, 3, 2)
    assert watch.watch_resolved(quiet, quiet[0]["t"], quiet[0]["t"] + 60, 60, 3, 2)
    flap, _ = seq("watch_flapping.jsonl")
    back = [s["t"] for s in flap if s["state"] == "IDLE"]
    # back the first time: not settled yet when it leaves again; back for good and settled: resolved
    assert not watch.watch_resolved([s for s in flap if s["t"] <= back[1] + 1], flap[0]["t"], back[1] + 1,
                                       60, 600, 2)
    assert watch.watch_resolved(flap, flap[0]["t"], back[2] + 2.5, 60, 600, 2)
    # a node already out of service when the watch began: nothing to watch
    assert watch.watch_resolved(drained[1:], t0, t0, 60, 600, 2)


def test_compactor_keeps_only_changes():
    c = watch.Compactor()
    a = {"t": 1, "node": "n", "phase": "available", "state": "IDLE", "reason": None}
    assert c.add(a) and not c.add(dict(a, t=2)) and c.add(dict(a, t=3, phase="drained", state="IDLE+DRAIN"))
    assert c.last["n"]["t"] == 3


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("recorded")
    with tarfile.open(Path(__file__).resolve().parents[1] / "fixtures" / "assessment_run" / "run.tar.xz") as tar:
        tar.extractall(tmp, filter="data")
    return load_run(str(tmp / "run"))


def test_the_controller_computes_from_raw_observations_what_the_old_probes_computed(recorded_run):
    """The recorded run's reboot and fault_injection artifacts were written by the node-side computation; their
    computed results are compared here, never read by the controller."""
    compared = []
    for doc in recorded_run.artifacts:
        if doc["probe"] not in ("reboot", "fault_injection") or doc["status"] != "ok":
            continue
        done = timeline.outcome(recorded_run, doc)
        assert done["status"] == "ok"
        metrics = {r["metric"]: r["value"] for r in doc["results"] if not r["labels"]}
        events = {r["labels"]["event"]: r["value"] for r in doc["results"] if r["metric"] == "event_at"}
        if doc["probe"] == "reboot":
            # Since then: the node's own reboot is the start + the reboot module's own wait on it (the old probes
            # took the controller's time after the task, the batch's slowest node's), and node_return_s (what
            # reliability.reboot_duration compares) is its own re-registration, registered_s.
            assert done["metrics"]["reboot_s"] == metrics["reboot_module_elapsed_s"] == 4.0
            assert done["events"]["reboot_returned"] == pytest.approx(events["reboot_started"] + 4.0, abs=1e-3)
            assert done["metrics"]["node_return_s"] == metrics["registered_s"]
            metrics.update(reboot_s=4.0, node_return_s=metrics["registered_s"])
            events["reboot_returned"] = done["events"]["reboot_returned"]
        else:
            # Since then, what bounds detect_s: the probe's lag to the fault going in (injected_at - started_at,
            # the node's clock) and the watcher's interval between two readings.
            inject = recorded_run.artifact(doc["host"], "fault_inject")
            lag = metrics["injected_at"] - timeline.parse_us(inject["started_at"]) / timeline.US
            assert done["metrics"]["inject_lag_s"] == pytest.approx(lag, abs=1e-3) and 0 < lag < 5
            assert done["metrics"]["watch_interval_s"] == 0.5
            metrics.update(inject_lag_s=done["metrics"]["inject_lag_s"], watch_interval_s=0.5)
        assert done["metrics"] == metrics
        assert done["events"] == events
        assert {k: done["facts"].get(k) for k in doc["facts"]} == doc["facts"]
        compared.append((doc["host"], doc["probe"]))
    assert compared == [("cmxbl-node2", "reboot"), ("cmxbl-node3", "reboot"), ("cmxbl-node4", "fault_injection")]
    reboot = timeline.outcome(recorded_run, recorded_run.artifact("cmxbl-node2", "reboot"))
    assert reboot["facts"]["observer"] == "cmxbl-node1"  # found from the batch: old artifacts did not name it
    assert reboot["metrics"]["return_to_service_s"] == pytest.approx(9.175)


def test_the_detection_time_is_shown_with_what_bounds_it(recorded_run):
    """The recorded run's XID on cmxbl-node4: detect_s counts from the observer's clock read before the injection
    task, so the fault_inject probe's own lag is in it, and the watcher saw the change within its 0.5 s: the
    report's cell says both beside the time it judged."""
    done = timeline.outcome(recorded_run, recorded_run.artifact("cmxbl-node4", "fault_injection"))
    m = done["metrics"]
    cell = section.detect_cell(m)
    assert cell == "%s (%s s of it before the fault was in; seen within 0.5 s)" % (
        section._s(m["detect_s"]), section._s(m["inject_lag_s"]))
    assert 0 < m["inject_lag_s"] < m["detect_s"]
    assert "| %s |" % cell in section.render(recorded_run, [], None)
    # an old artifact without them shows the time alone; an undetected fault says never
    assert section.detect_cell({"detected": 1, "detect_s": 7.31}) == "7.3"
    assert section.detect_cell({"detected": 0}) == section.strong("never")
    # a lag longer than the time it is part of (two clocks far apart) bounds nothing: left out
    assert section.detect_cell({"detected": 1, "detect_s": 5.0, "inject_lag_s": 3.3e6, "watch_interval_s": 0.5}) \
        == "5.0 (seen within 0.5 s)"


def test_samples_brought_back_by_the_cleanup_stop_are_used(recorded_run):
    """When the wait failed or timed out, the cleanup stops the watcher (variant <stage>-cleanup): its samples
    count as if the wait had stopped it."""
    doc = recorded_run.artifact("cmxbl-node4", "fault_injection")
    before = timeline.outcome(recorded_run, doc)
    [watch] = [d for d in recorded_run.artifacts if d["probe"] == "sched_watch" and d["variant"] == "fault-b1"]
    watch["variant"] = "fault-b1-cleanup"
    try:
        recorded_run.__dict__.pop("_reliability_outcomes", None)  # computed once per run: compute it again
        after = timeline.outcome(recorded_run, doc)
    finally:
        watch["variant"] = "fault-b1"
        recorded_run.__dict__.pop("_reliability_outcomes", None)
    assert after["status"] == "ok" and after["metrics"] == before["metrics"]


# --- Hot spares (issue 18). The samples are what the observer's watcher writes: every reading in the Slurm
# reader's form with every node listed (sched_slurm.samples, others), through the watcher's own Recorder (the
# watched node in full, the other nodes' first sample and changes of phase), then its final samples.
T0 = 1_800_000_000.0
XID79 = "XID 79 in kernel log (health check)"


def watched(readings, nodes=("node4",), partitions=None):
    """[(seconds from T0, {node: State or (State, Reason)})] -> the watcher's .jsonl lines, as written and read.
    partitions: {node: scontrol's Partitions field} (none by default: every pool unknown)."""
    rec = sched_watch.Recorder(list(nodes))
    lines = []
    for t, states in readings:
        fields = {n: dict(zip(("State", "Reason"), v if isinstance(v, tuple) else (v,))) for n, v in states.items()}
        for n, parts in (partitions or {}).items():
            if n in fields:
                fields[n]["Partitions"] = parts
        lines += rec.add(sched_slurm.samples(list(nodes), fields, T0 + t, others=True))
    return [json.loads(json.dumps(s, sort_keys=True)) for s in lines + rec.final()]


def swap(spare_at=40.0, back_at=None, end=100.0, out=(("node4", 2.0),), extra=None, partitions=None):
    """A readout every 5 s from T0 - 10 to T0 + end. node4 (and any node in out) drained by the health check at the
    time given, back at back_at if any; node1 busy from T0 + 10 (IDLE -> ALLOCATED); node2 and node3 idle all along;
    node6 listed from T0 - 5 (joined before the injection); node5, the spare, listed IDLE from spare_at; extra:
    {node: time listed IDLE}."""
    readings = []
    for t in [x * 5.0 - 10 for x in range(int((end + 10) / 5) + 1)]:
        states = {"node1": "IDLE" if t < 10 else "ALLOCATED", "node2": "IDLE", "node3": "IDLE", "node4": "IDLE"}
        for node, at in out:
            if t >= at and not (back_at is not None and t >= back_at):
                states[node] = ("IDLE+DRAIN", XID79)
        if t >= -5:
            states["node6"] = "IDLE"
        for node, at in dict({"node5": spare_at}, **(extra or {})).items():
            if at is not None and t >= at:
                states[node] = "IDLE"
        readings.append((t, states))
    return watched(readings, nodes=[n for n, _ in out], partitions=partitions)


def node_samples(samples, node):
    return [s for s in samples if s["node"] == node and not s.get("other")]


def test_hot_spare_swap_is_replaced_by_the_spare():
    """node4 drained 5 s after the fault (the first reading after it) and kept out to the end of the watch; node5
    joined available 40 s after the fault: replaced, spare_s 40."""
    samples = swap()
    assert timeline.spare_for(samples, "node4", T0) == ("node5", T0 + 40.0)
    tl = timeline.fault_timeline(node_samples(samples, "node4"), T0, spare=("node5", T0 + 40.0))
    assert tl["detected"] and tl["returned"] is False and tl["drain_open"]
    assert tl["spare"] == "node5" and tl["spare_s"] == 40.0
    assert timeline.observed_action(tl, rebooted=False) == "replaced"


def test_only_a_node_that_came_into_service_after_the_fault_is_a_spare():
    """node1 went from IDLE to ALLOCATED after the fault (busy, in service all along: compacted away, nothing kept
    but its baseline); node6 joined before the fault; node2 and node3 were in service all along: none is a spare."""
    samples = swap()
    others = [s for s in samples if s.get("other")]
    assert [(s["node"], s["phase"]) for s in others if s["node"] == "node1"] == [("node1", "available")]
    assert min(s["t"] for s in others if s["node"] == "node6") == T0 - 5
    assert watch.joined(others, T0) == [(T0 + 40.0, "node5")]
    # seen from before node6 joined (between two readings), node6 is a join too
    assert watch.joined(others, T0 - 7) == [(T0 - 5, "node6"), (T0 + 40.0, "node5")]


def test_a_spare_in_service_before_the_fault_is_no_replacement():
    samples = swap(spare_at=-5.0)
    assert timeline.spare_for(samples, "node4", T0) is None
    tl = timeline.fault_timeline(node_samples(samples, "node4"), T0)
    assert "spare" not in tl and timeline.observed_action(tl, rebooted=False) == "drained"


def test_no_spare_and_node_kept_out_is_drained_as_before():
    samples = swap(spare_at=None)
    assert timeline.spare_for(samples, "node4", T0) is None
    tl = timeline.fault_timeline(node_samples(samples, "node4"), T0, spare=None)
    assert timeline.observed_action(tl, rebooted=False) == "drained" and tl["drain_open"]


def test_a_node_back_in_service_was_not_replaced_whatever_joined():
    samples = swap(back_at=60.0)
    assert timeline.spare_for(samples, "node4", T0) is None  # not kept out: nothing to replace
    tl = timeline.fault_timeline(node_samples(samples, "node4"), T0, spare=("node5", T0 + 40.0))
    assert tl["returned"] and "spare" not in tl and timeline.observed_action(tl, rebooted=False) == "returned"


def test_nodes_kept_out_share_the_spares_one_each_in_order():
    """node4 out at T0 + 2 (first reading at +5), node3 at T0 + 12 (first reading at +15); one spare: node4's."""
    samples = swap(out=(("node4", 2.0), ("node3", 12.0)))
    assert timeline.spare_for(samples, "node4", T0) == ("node5", T0 + 40.0)
    assert timeline.spare_for(samples, "node3", T0) is None
    samples = swap(out=(("node4", 2.0), ("node3", 12.0)), extra={"node7": 60.0})
    assert timeline.spare_for(samples, "node3", T0) == ("node7", T0 + 60.0)


def test_the_watch_ends_once_every_node_kept_out_has_a_settled_spare():
    """The watcher's stop rule (stop_when resolved), over what its Recorder kept: not before the spare has been
    available for settle_s, never for a node that is in service, and never for a node that joined before the
    fault (node6, listed from T0 - 5, though after the watch began: it replaced nothing)."""
    samples = swap()
    mine = {"node4": node_samples(samples, "node4")}
    others = [s for s in samples if s.get("other")]
    assert not watch.watch_replaced(mine, others, ["node4"], T0 + 39, 5)
    assert not watch.watch_replaced(mine, others, ["node4"], T0 + 41, 5)
    assert watch.watch_replaced(mine, others, ["node4"], T0 + 45, 5) == {"node4"}
    only_node6 = [s for s in others if s["node"] != "node5"]
    assert not watch.watch_replaced(mine, only_node6, ["node4"], T0 + 90, 5)
    in_service = {"node4": [s for s in mine["node4"] if s["phase"] == "available"]}
    assert not watch.watch_replaced(in_service, others, ["node4"], T0 + 90, 5)


def test_one_node_replaced_does_not_end_the_watch_of_another_not_detected_yet():
    """A 2-node batch: node4 out and replaced by node5 (settled); node3 still in service, its fault not seen yet: the
    watch goes on (node3 waits on it for its fallback injection); it ends once node3 is resolved too."""
    samples = swap()
    history = {"node4": node_samples(samples, "node4"),
               "node3": [s for s in samples if s["node"] == "node3" and s["t"] <= T0 - 10]}
    others = [s for s in samples if s.get("other") and s["node"] != "node3"]
    assert watch.watch_replaced(history, others, ["node4", "node3"], T0 + 60, 5) == {"node4"}
    assert not watch.watch_ended(history, others, ["node4", "node3"], T0 - 10, T0 + 60, 600, 3600, 5)
    # node3 not detected within detect_timeout: resolved, and the batch with it
    assert watch.watch_ended(history, others, ["node4", "node3"], T0 - 10, T0 + 600, 600, 3600, 5)


def test_a_node_that_joined_after_the_injection_but_before_the_node_went_out_is_no_spare():
    """node4 taken out at T0 + 12 (first reading out at + 15); node5 listed at T0 + 5: after the injection, before
    node4 left service, so it replaced nothing."""
    assert timeline.spare_for(swap(spare_at=5.0, out=(("node4", 12.0),)), "node4", T0) is None
    assert timeline.spare_for(swap(spare_at=15.0, out=(("node4", 12.0),)), "node4", T0) == ("node5", T0 + 15.0)


def test_a_spare_must_come_from_the_faulted_nodes_pool():
    """node5 joins in another partition (an admin resumed a CPU node there): no spare; in node4's partition, or where
    either pool is unknown (a record from before pools), it is."""
    other = swap(partitions={"node4": "gpu", "node5": "cpu"})
    assert timeline.spare_for(other, "node4", T0) is None
    tl = timeline.fault_timeline(node_samples(other, "node4"), T0, spare=timeline.spare_for(other, "node4", T0))
    assert timeline.observed_action(tl, rebooted=False) == "drained"
    assert timeline.spare_for(swap(partitions={"node4": "gpu", "node5": "gpu"}), "node4", T0) == ("node5", T0 + 40)
    assert timeline.spare_for(swap(partitions={"node4": "gpu"}), "node4", T0) == ("node5", T0 + 40)
    # a cpu node joins first, the gpu one later: the gpu one is the spare
    both = swap(partitions={"node4": "gpu", "node5": "gpu", "node7": "cpu"}, extra={"node7": 20.0})
    assert timeline.spare_for(both, "node4", T0) == ("node5", T0 + 40)


def test_spares_are_paired_once_per_batch_whatever_each_nodes_injection_time():
    """node4 injected at T0, out at + 5; node3's fault went unseen and the fallback went in at T0 + 50, out at + 55.
    node5 joined at + 40 (node4's), node7 at + 60 (node3's): each node gets its own, whichever injection time the
    controller times it from."""
    samples = swap(out=(("node4", 2.0), ("node3", 52.0)), extra={"node7": 60.0})
    assert timeline.spare_for(samples, "node4", T0) == ("node5", T0 + 40.0)
    assert timeline.spare_for(samples, "node3", T0 + 50) == ("node7", T0 + 60.0)


# --- Registered again after a reboot: a new boot the scheduler heard from (samples.registered), as the watcher saw
# it; never the earlier of that and the return action's reading of a phase.
DRAINED_LINE = (FIX / "show_node_drained.txt").read_text().splitlines()[1]  # cmxd-node2: IDLE+DRAIN, our reason


def slurm_at(t, state, slurmd_start):
    fields = sched_slurm.parse_show_node(DRAINED_LINE)["cmxd-node2"]
    line = DRAINED_LINE.replace("State=IDLE+DRAIN", "State=" + state).replace(
        "SlurmdStartTime=" + fields["SlurmdStartTime"], "SlurmdStartTime=" + slurmd_start)
    return sched_slurm.sample("cmxd-node2", sched_slurm.parse_show_node(line)["cmxd-node2"], t)


def test_a_stale_drained_state_read_after_the_reboot_is_not_registered():
    """A 45 s reboot slurmctld's ping never caught: the return action read IDLE+DRAIN from before the reboot at +46
    and took it as back; slurmd of the new boot registered only at +75 (a new SlurmdStartTime). Before, registered_s
    was the earlier, 46 s."""
    t, s0, s1 = T0, "2026-12-01T09:00:00", "2026-12-01T10:05:20"
    samples = [slurm_at(t - 20, "IDLE", s0), slurm_at(t - 9, "IDLE+DRAIN", s0), slurm_at(t + 75, "IDLE+DRAIN", s1),
               slurm_at(t + 77, "IDLE", s1)]
    ev = {"drain_issued": t - 10, "drained": t - 9, "reboot_started": t - 1, "reboot_started_observer": t,
          "reboot_returned": t + 45, "registered": t + 46, "resume_issued": t + 76, "available": t + 77,
          "job_started": t + 77.1, "job_ok": t + 78}
    st = timeline.reboot_timeline(samples, ev, t + 90)
    assert st["registered_s"] == st["node_return_s"] == 75.0 and st["events"]["registered"] == t + 75
    # slurmctld's DOWN+DRAIN of the new boot (ReturnToService 1): registered all the same; not while NOT_RESPONDING
    down = [slurm_at(t - 9, "IDLE+DRAIN", s0), slurm_at(t + 95, "DOWN+DRAIN+NOT_RESPONDING", s0),
            slurm_at(t + 325, "DOWN+DRAIN", s1), slurm_at(t + 400, "IDLE", s1)]
    st = timeline.reboot_timeline(down, dict(ev, registered=t + 325.5, resume_issued=t + 326), t + 500)
    assert st["registered_s"] == 325.0 and st["seen_down_s"] == 95.0
    # samples without a boot to compare (recorded before slurmd_start was): the return action's reading
    bare = [{k: v for k, v in s.items() if k not in watch.BOOT_KEYS} for s in samples]
    assert timeline.reboot_timeline(bare, ev, t + 90)["registered_s"] == 46.0


def test_a_cordoned_kubernetes_node_still_ready_is_not_registered_until_its_new_boot_id():
    """The kubelet stopped at +2; the node stays Ready,SchedulingDisabled (node-monitor-grace-period) and the return
    action read it so at +36. The watcher saw the new boot's bootID at +70: that is when it was back."""
    node = sched_k8s.parse_nodes((FIX.parent / "kubectl" / "get_nodes.json").read_text())["gpu-node-1"]
    taints = sched_k8s.taint_keys(node)

    def at(t, boot_id, cordoned):
        doc = copy.deepcopy(node)
        doc["spec"]["unschedulable"] = cordoned
        doc["status"]["nodeInfo"]["bootID"] = boot_id
        return sched_k8s.sample("gpu-node-1", doc, t, taints)

    old, new = node["status"]["nodeInfo"]["bootID"], "0b6b2a4e-7d7a-4c59-9d0e-5f1d3f4c2a10"
    samples = [at(T0 - 20, old, False), at(T0 - 9, old, True), at(T0 + 70, new, True), at(T0 + 72, new, False)]
    ev = {"drain_issued": T0 - 10, "drained": T0 - 9, "reboot_started": T0 - 1, "reboot_started_observer": T0,
          "reboot_returned": T0 + 35, "registered": T0 + 36, "resume_issued": T0 + 36.5, "available": T0 + 37,
          "job_started": T0 + 37.1, "job_ok": T0 + 75}
    st = timeline.reboot_timeline(samples, ev, T0 + 80)
    assert st["registered_s"] == st["node_return_s"] == 70.0
