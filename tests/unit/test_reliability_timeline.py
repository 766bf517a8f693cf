"""The timelines the controller computes (reports/phases/reliability/timeline.py) and the watcher's stop rule and
compaction (probes/reliability/samples.py), over scheduler state sequences recorded on the test cluster's Slurm
(tests/fixtures/slurm/watch_*.jsonl; tests/fixtures/slurm/sequences.json says what happened in each); and, from the
whole recorded run (tests/fixtures/assessment_run), the proof of the move: computed from the raw observations alone,
every timing, event and fact is what the old node-side probes computed into their artifacts."""

import json
import tarfile
from pathlib import Path

import pytest

from probes.reliability import samples as watch
from reports.load import load_run
from reports.phases.reliability import timeline

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
        assert done["metrics"] == {r["metric"]: r["value"] for r in doc["results"] if not r["labels"]}
        assert done["events"] == {r["labels"]["event"]: r["value"] for r in doc["results"]
                                  if r["metric"] == "event_at"}
        assert {k: done["facts"].get(k) for k in doc["facts"]} == doc["facts"]
        compared.append((doc["host"], doc["probe"]))
    assert compared == [("cmxbl-node2", "reboot"), ("cmxbl-node3", "reboot"), ("cmxbl-node4", "fault_injection")]
    reboot = timeline.outcome(recorded_run, recorded_run.artifact("cmxbl-node2", "reboot"))
    assert reboot["facts"]["observer"] == "cmxbl-node1"  # found from the batch: old artifacts did not name it
    assert reboot["metrics"]["return_to_service_s"] == pytest.approx(9.175)


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
