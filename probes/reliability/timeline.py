"""The timing state machine of the destructive phase: scheduler state samples of one node in, stage timings out.

Samples are what probes/common/sched.py readers return (t in seconds since the epoch, phase, state, reason, ...).
A watcher keeps only the samples where something changed (``Compactor``), plus the last one, so a long watch is a
short list. Samples whose phase is ``unknown`` (the scheduler could not be read that time) say nothing about the
node: they neither start nor end a stage.

Two readings of a node's samples:

* ``fault_timeline``: from the injection time, when the node was first taken out of service (detection), how long
  it spent drained, whether and when it came back for good, how often it came back only to leave again (flapping),
  whether the scheduler lost it (replaced);
* ``reboot_timeline``: from the controller's and the scheduler's events of a planned reboot, every stage: drain,
  reboot, the scheduler seeing it gone and back, resume, a fresh job.

Pure functions, no I/O: the unit tests drive them with recorded scheduler sequences.
"""

from probes.common.sched import DRAINED, OUT_OF_SERVICE

CHANGE_KEYS = ("phase", "state", "reason", "slurmd_start", "boot_id")


class Compactor:
    """Keeps the samples where a node's state changed; ``last`` holds the latest sample of every node."""

    def __init__(self):
        self.keys = {}
        self.last = {}

    def add(self, sample):
        """True when the sample is a change worth keeping."""
        node = sample["node"]
        key = tuple(sample.get(k) for k in CHANGE_KEYS)
        self.last[node] = sample
        if self.keys.get(node) == key:
            return False
        self.keys[node] = key
        return True


def known(samples):
    return sorted((s for s in samples if s.get("phase") not in (None, "unknown")), key=lambda s: s["t"])


def intervals(samples, start=None, end=None):
    """[(phase, t_from, t_to, first sample)] with consecutive samples of one phase merged; the last one ends at end
    (or at its own sample time)."""
    samples = known(samples)
    out = []
    for s in samples:
        if start is not None and s["t"] < start:
            continue
        if out and out[-1][0] == s["phase"]:
            continue
        if out:
            out[-1][2] = s["t"]
        out.append([s["phase"], s["t"], None, s])
    if out:
        out[-1][2] = max(end if end is not None else out[-1][1], out[-1][1])
    return [tuple(x) for x in out]


def _r(value):
    return None if value is None else round(float(value), 3)


def state_at(samples, t):
    """The last known sample at or before t, or None."""
    before = [s for s in known(samples) if s["t"] <= t]
    return before[-1] if before else None


def fault_timeline(samples, t_inject, t_end=None):
    """What the provider's tooling did about a fault injected at t_inject, as seen through the scheduler."""
    samples = known(samples)
    if not samples:
        return {"observed": False, "why": "no scheduler state could be read"}
    t_end = max(t_end or 0, samples[-1]["t"])
    baseline = state_at(samples, t_inject)
    if baseline is None:
        return {"observed": False, "why": "no scheduler state from before the injection"}
    out = {"observed": True, "baseline_phase": baseline["phase"], "watched_s": _r(t_end - t_inject)}
    if baseline["phase"] != "available":
        out.update(measurable=False, why="node was %s (%s) before the injection" % (
            baseline["phase"], baseline.get("reason") or baseline.get("state")))
        return out
    out["measurable"] = True
    after = [dict(baseline, t=t_inject)] + [s for s in samples if s["t"] > t_inject]
    ivs = intervals(after, end=t_end)
    outs = [iv for iv in ivs if iv[0] in OUT_OF_SERVICE]
    out["detected"] = bool(outs)
    out["final_phase"] = ivs[-1][0]
    out["removed"] = any(iv[0] == "missing" for iv in ivs)
    if not outs:
        out.update(returned=False, flaps=0, drained=False, time_drained_s=0.0, drain_open=False)
        return out
    first = outs[0]
    out["detect_s"] = _r(first[1] - t_inject)
    out["detect_phase"] = first[0]
    out["detect_reason"] = first[3].get("reason")
    drains = [iv for iv in ivs if iv[0] in DRAINED]
    out["drained"] = bool(drains)
    if drains:
        out["drain_s"] = _r(drains[0][1] - t_inject)
    out["time_drained_s"] = _r(sum(iv[2] - iv[1] for iv in drains))
    out["drain_open"] = ivs[-1][0] in DRAINED
    # Returns: an available stretch after being out. The last one counts as the return to service only when the
    # node is still available at the end; every earlier one was a flap (back, then out again).
    returns = [iv for iv in ivs if iv[0] == "available" and iv[1] > first[1]]
    final_back = returns[-1] if returns and ivs[-1][0] == "available" else None
    out["flaps"] = len(returns) - (1 if final_back else 0)
    out["returned"] = final_back is not None
    if final_back:
        out["return_s"] = _r(final_back[1] - t_inject)
        out["out_of_service_s"] = _r(final_back[1] - first[1])
    else:
        out["out_of_service_s"] = _r(t_end - first[1])
    return out


def _first(samples, t_from, predicate):
    for s in known(samples):
        if s["t"] >= t_from and predicate(s):
            return s
    return None


def _dur(a, b):
    return None if a is None or b is None else _r(b - a)


def reboot_timeline(samples, events, t_end=None):
    """Stage timings of one planned reboot.

    events (seconds since the epoch, any may be missing): drain_issued, drained (the drain action saw it drained),
    reboot_started, reboot_returned (boot id changed and a command ran, by the controller's clock), registered
    (the scheduler saw the node answer again), resume_issued, available, job_started, job_ok.
    The scheduler samples fill in what an action did not see and add what only a watcher sees (the node seen down,
    slurmd restarted).
    """
    ev = {k: (float(v) if v is not None else None) for k, v in (events or {}).items()}
    samples = known(samples)
    start = ev.get("drain_issued") or ev.get("reboot_started")
    out = {"events": dict(ev)}  # the events the timings rest on, with what the samples filled in
    base = state_at(samples, start) if start is not None else None
    if base is not None:
        out["baseline_phase"] = base["phase"]
    drained = ev.get("drained")
    if drained is None and ev.get("drain_issued") is not None:
        s = _first(samples, ev["drain_issued"], lambda s: s["phase"] == "drained")
        drained = s["t"] if s else None
    out["drain_s"] = _dur(ev.get("drain_issued"), drained)
    if drained is not None:
        out["events"]["drained"] = drained
    rs = ev.get("reboot_started")
    out["reboot_s"] = _dur(rs, ev.get("reboot_returned"))
    if rs is not None:
        # Seen down: between the reboot and our resume (right after a resume Slurm shows NOT_RESPONDING briefly).
        until = ev.get("resume_issued") or float("inf")
        down = _first(samples, rs, lambda s: s["phase"] in ("down", "missing") and s["t"] < until)
        out["seen_down_s"] = _dur(rs, down["t"]) if down else None
        # Registered again: the watcher sees slurmd's start time change (Slurm), else the return action saw the
        # node answer; the earlier of the two, since the action only starts looking once the reboot task is done.
        seen = []
        if ev.get("registered") is not None:
            seen.append(ev["registered"])
        if base is not None and base.get("slurmd_start"):
            s = _first(samples, rs, lambda s: s.get("slurmd_start") not in (None, base.get("slurmd_start")))
            if s:
                seen.append(s["t"])
        out["registered_s"] = _dur(rs, min(seen)) if seen else None
        if seen:
            out["events"]["registered"] = min(seen)
        if down:
            out["events"]["seen_down"] = down["t"]
    available = ev.get("available")
    if available is None and ev.get("resume_issued") is not None:
        s = _first(samples, ev["resume_issued"], lambda s: s["phase"] == "available")
        available = s["t"] if s else None
    out["resume_s"] = _dur(ev.get("resume_issued"), available)
    if available is not None:
        out["events"]["available"] = available
    out["job_s"] = _dur(ev.get("job_started"), ev.get("job_ok"))
    back = ev.get("job_ok") or available or ev.get("reboot_returned")
    out["return_to_service_s"] = _dur(rs, back)
    out["total_s"] = _dur(start, back)
    # Flapping after the node came back: it left service again before the end of the watch.
    if available is not None:
        ivs = intervals(samples, start=available, end=t_end)
        out["flaps_after_return"] = sum(1 for iv in ivs[1:] if iv[0] in OUT_OF_SERVICE)
    return out


def watch_resolved(samples, t_start, now, detect_timeout, remediation_timeout, settle_s):
    """Is there nothing more to see for this node? Not detected within detect_timeout; or back in service for
    settle_s; or out of service for remediation_timeout since detection. A node that was not available when the
    watch began is resolved at once (nothing of ours to watch there)."""
    samples = known(samples)
    if not samples:
        return now - t_start >= detect_timeout
    if samples[0]["phase"] != "available":
        return True
    ivs = intervals(samples, end=now)
    outs = [iv for iv in ivs if iv[0] in OUT_OF_SERVICE]
    if not outs:
        return now - t_start >= detect_timeout
    last = ivs[-1]
    if last[0] == "available" and last[1] > outs[0][1] and now - last[1] >= settle_s:
        return True
    return now - outs[0][1] >= remediation_timeout
