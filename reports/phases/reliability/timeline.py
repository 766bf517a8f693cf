"""What happened to each node of the destructive phase, computed on the controller from the raw observations.

The nodes only record (probes/reliability): the scheduler states an observer sampled (sched_watch-<stage>.jsonl),
the times of the observer's scheduler actions (sched_action-<stage>-drain, -return, -job, -restore), the node's
boot id before and after (boot_id-reboot-before/-after, boot_id-fault-before/-after), the injection (fault_inject:
when, by the node's clock, and its start by the observer's) and, for a reboot, when the controller issued it and
saw it back (reboot). Here those become:

* for a reboot, every stage's timing (``reboot_timeline``): drain, reboot, the scheduler seeing the node gone and
  back, resume, a fresh job, and whether the node came back at all;
* for a fault injection, the timeline from the injection (``fault_timeline``): when the node was first taken out
  of service (detection), how long it spent drained, whether and when it came back for good, flaps, whether the
  scheduler lost it, the hot spare that came into service in its place (``spare_for``: the observer's watcher
  also records the scheduler's other nodes) and the remediation observed (``observed_action``).

``outcome(run, doc)`` gives, for one host's reboot or fault_injection artifact, a record shaped like an artifact
(host, probe, status, reason, facts, metrics {name: value}, events {name: epoch s}); grade.py and section.py read
only that. It is computed once per run and artifact.

Artifacts written before this move (the recorded run in tests/fixtures/assessment_run) carry the same raw pieces,
so they are computed the same way; they did not name the batch's observer and stage, which are then found from the
batch number: the host that holds the batch's sched_watch artifact.
"""

import os

from probes.common.sched import DRAINED, NOTICED, OUT_OF_SERVICE, held_out
from probes.reliability.samples import boot_marks, intervals, known, read_samples, registered, spares
from reports import DATA_DIR, yamlio
from reports.sla.timeutil import US, TimeError
from reports.sla.timeutil import parse_time as parse_us

# sched_action result metrics -> reboot_timeline event names
ACTION_EVENTS = {"drain_issued_at": "drain_issued", "drained_at": "drained", "registered_at": "registered",
                 "resume_issued_at": "resume_issued", "available_at": "available", "job_started_at": "job_started",
                 "job_ok_at": "job_ok"}
REBOOT_TIMINGS = ("drain_s", "reboot_s", "seen_down_s", "registered_s", "resume_s", "job_s", "return_to_service_s",
                  "total_s", "node_return_s")
# The events the reboot artifact itself holds: what only the controller saw, by its clock, and the reboot's start by
# the observer's clock (the scheduler's times are the observer's: the controller's clock may be seconds or minutes
# off the cluster's, so a duration never subtracts one clock from the other).
CONTROLLER_EVENTS = ("reboot_started", "reboot_returned", "reboot_started_observer")
# Who stops a batch's watcher: the wait (variant <stage>), or, when the wait failed or timed out, the cleanup
# (<stage>-cleanup); the samples come back with whichever did.
WATCH_STOPS = ("", "-cleanup")
# The first part of the variant of a batch's observer artifacts, per probe (roles/*/vars: <prefix>-b<batch>).
STAGE_PREFIX = {"reboot": "reboot", "fault_injection": "fault"}


def _r(value):
    return None if value is None else round(float(value), 3)


def _dur(a, b):
    return None if a is None or b is None else _r(b - a)


def state_at(samples, t):
    """The last known sample at or before t, or None."""
    before = [s for s in known(samples) if s["t"] <= t]
    return before[-1] if before else None


def _first(samples, t_from, predicate):
    for s in known(samples):
        if s["t"] >= t_from and predicate(s):
            return s
    return None


def spare_for(samples, node, t_inject):
    """(spare, t available) of the hot spare that came into service in node's place, or None.

    samples: everything one batch's watcher recorded. The pairing is samples.spares, over the whole batch at once:
    the rule the watcher stopped by and the fresh job on the spares (sched_action joined_from) chose by, so the spare
    judged is one that got the job. A spare is an other node, of the node's pool, that came into service after the
    node's first sample out of service (not merely after the injection: a node that joined before the fault replaced
    nothing) and stayed so to the end of the record; it replaces a node available at the watch's start and out of
    service at its end, the nodes taken out first getting the spares that joined first. t_inject only guards: the
    pairing does not depend on it, so a later fallback injection on one node of the batch leaves the others' as is."""
    found = spares(samples).get(node)
    if found is None or found[1] < t_inject:
        return None
    return found


def fault_timeline(samples, t_inject, t_end=None, spare=None, out_phases=OUT_OF_SERVICE):
    """What the provider's tooling did about a fault injected at t_inject, as seen through the scheduler.

    Detection is the fault noticed (sched.NOTICED: a health signal says no, or the node is out of service); what was
    done about it is the node held out of service (out_phases, sched.held_out of the scheduler). A node flagged
    unhealthy but left schedulable was detected, and nothing kept work off it (``held_out`` false).
    spare: (node, t available) of the spare that came into service in this node's place (spare_for); it counts
    only when the node was taken out and stayed out to the end of the watch (``spare``, ``spare_s``).
    A node drained (sched.DRAINED) at some point also gets ``after_drain`` (its phases from that first drain to the
    end of the watch), ``kept_out_after_drain`` (every one of them in out_phases: drained, then down, is still
    out of service) and, when not, ``back_after_drain`` (the first phase that let work back on the node)."""
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
    noticed = [iv for iv in ivs if iv[0] in NOTICED]
    outs = [iv for iv in ivs if iv[0] in out_phases]
    out["detected"] = bool(noticed)
    out["held_out"] = bool(outs)
    out["final_phase"] = ivs[-1][0]
    out["removed"] = any(iv[0] == "missing" for iv in ivs)
    if noticed:
        out["detect_s"] = _r(noticed[0][1] - t_inject)
        out["detect_phase"] = noticed[0][0]
        out["detect_reason"] = noticed[0][3].get("reason")
    if not outs:
        out.update(returned=False, flaps=0, drained=False, time_drained_s=0.0, drain_open=False)
        return out
    first = outs[0]
    drains = [iv for iv in ivs if iv[0] in DRAINED]
    out["drained"] = bool(drains)
    if drains:
        out["drain_s"] = _r(drains[0][1] - t_inject)
    out["time_drained_s"] = _r(sum(iv[2] - iv[1] for iv in drains))
    out["drain_open"] = ivs[-1][0] in DRAINED
    if drains:
        # From the first drain to the end of the watch: the phases in order, and whether every one of them kept work
        # off the node (out_phases: drained, then down or lost is still out of service; available, or only flagged
        # unhealthy while schedulable, is not). An NVL72 tray must stay out until its repair (grade.py).
        since = [iv for iv in ivs if iv[1] >= drains[0][1]]
        out["after_drain"] = [iv[0] for iv in since]
        back = [iv[0] for iv in since if iv[0] not in out_phases]
        out["kept_out_after_drain"] = not back
        if back:
            out["back_after_drain"] = back[0]
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
        if spare is not None:
            out["spare"] = spare[0]
            out["spare_s"] = _r(spare[1] - t_inject)
    return out


def observed_action(tl, rebooted):
    """The remediation seen: none (never taken out: still schedulable, flagged unhealthy or not), replaced (kept out to
    the end of the watch and a hot spare came into service in its place), removed (the scheduler lost the node, no spare
    seen), reboot (boot id changed), returned (back in service without a reboot: a GPU reset or a resume), drained (kept
    off, nothing more within the watch), out_of_service (taken out otherwise, e.g. down)."""
    if not tl.get("observed") or not tl.get("measurable", True):
        return "unknown"
    if not tl.get("detected") or not tl.get("held_out"):
        return "none"
    if tl.get("spare"):
        return "replaced"
    if tl.get("removed"):
        return "removed"
    if rebooted:
        return "reboot"
    if tl.get("returned"):
        return "returned"
    return "drained" if tl.get("drained") else "out_of_service"


def _seen(ev, samples, phase, since):
    """When the node reached phase: as the action saw it (the event of that name), else the first sample in that
    phase from the event `since` on; None when neither saw it."""
    if ev.get(phase) is not None or ev.get(since) is None:
        return ev.get(phase)
    s = _first(samples, ev[since], lambda s: s["phase"] == phase)
    return s["t"] if s else None


def reboot_timeline(samples, events, t_end=None):
    """Stage timings of one planned reboot.

    events (seconds since the epoch, any may be missing): drain_issued, drained (the drain action saw it drained),
    reboot_started, reboot_returned (boot id changed and a command ran, by the controller's clock: the start + the
    reboot module's own elapsed on this node), registered (the scheduler heard from the node's new boot),
    resume_issued, available, job_started, job_ok.
    The scheduler samples fill in what an action did not see and add what only a watcher sees (the node seen down,
    slurmd restarted).

    Two clocks: the reboot itself (reboot_s) is the controller's; everything the scheduler saw is the observer's, and
    is timed from the reboot's start by the observer's clock (reboot_started_observer; artifacts from before it was
    recorded, from the controller's). Without a scheduler the node is back in service when a plain command runs on it
    again: the reboot module's own test, reboot_returned.
    """
    ev = {k: (float(v) if v is not None else None) for k, v in (events or {}).items()}
    samples = known(samples)
    start = ev.get("drain_issued") or ev.get("reboot_started")
    out = {"events": dict(ev)}  # the events the timings rest on, with what the samples filled in
    base = state_at(samples, start) if start is not None else None
    if base is not None:
        out["baseline_phase"] = base["phase"]
    drained = _seen(ev, samples, "drained", "drain_issued")
    out["drain_s"] = _dur(ev.get("drain_issued"), drained)
    if drained is not None:
        out["events"]["drained"] = drained
    rs = ev.get("reboot_started")
    out["reboot_s"] = _dur(rs, ev.get("reboot_returned"))
    rs = ev["reboot_started_observer"] if ev.get("reboot_started_observer") is not None else rs
    if rs is not None:
        # Seen down: between the reboot and our resume (right after a resume Slurm shows NOT_RESPONDING briefly).
        until = ev.get("resume_issued") or float("inf")
        down = _first(samples, rs, lambda s: s["phase"] in ("down", "missing") and s["t"] < until)
        out["seen_down_s"] = _dur(rs, down["t"]) if down else None
        # Registered again: the scheduler shows a new boot of the node, answering (samples.registered: Slurm's
        # SlurmdStartTime or BootTime, Kubernetes' bootID, changed since the baseline), as the watcher saw it. Not
        # the earlier of that and a phase: a drained node's state from before the reboot (IDLE+DRAIN, or a cordoned
        # node still Ready) may be read when the node is already gone. The return action's time counts only where
        # the watcher's baseline tells no boot (older samples) or the watcher saw none.
        seen = None
        booted = base if base is not None else state_at(samples, rs)  # the boot before: the watch began before
        if boot_marks(booted):
            s = _first(samples, rs, lambda s: registered(booted, s))
            seen = s["t"] if s else None
        if seen is None:
            seen = ev.get("registered")
        out["registered_s"] = _dur(rs, seen)
        if seen is not None:
            out["events"]["registered"] = seen
        if down:
            out["events"]["seen_down"] = down["t"]
    available = _seen(ev, samples, "available", "resume_issued")
    out["resume_s"] = _dur(ev.get("resume_issued"), available)
    if available is not None:
        out["events"]["available"] = available
    out["job_s"] = _dur(ev.get("job_started"), ev.get("job_ok"))
    back = ev.get("job_ok") or available
    if back is None and ev.get("drain_issued") is None:  # no scheduler: one clock, the controller's
        rs, back = ev.get("reboot_started"), ev.get("reboot_returned")
    out["return_to_service_s"] = _dur(rs, back)
    out["total_s"] = _dur(start, back)
    # The node's own return, what reliability.reboot_duration compares between the rebooted nodes: to the scheduler
    # hearing from its new boot. The resume, the fresh job (return_to_service_s) and the controller's "back" come
    # only once the reboot task is over on every node of the batch (Ansible's linear strategy), so they are the
    # batch's slowest node's, not this one's. Without a scheduler: the reboot module's own wait for this node.
    out["node_return_s"] = out["reboot_s"] if ev.get("drain_issued") is None else out.get("registered_s")
    # Flapping after the node came back: it left service again before the end of the watch.
    if available is not None:
        ivs = intervals(samples, start=available, end=t_end)
        out["flaps_after_return"] = sum(1 for iv in ivs[1:] if iv[0] in OUT_OF_SERVICE)
    return out


class _Batch:
    """The observations of one node's batch: its own artifacts and those of the batch's observer."""

    def __init__(self, run, doc):
        self.run, self.doc, self.host = run, doc, doc["host"]
        facts = doc.get("facts") or {}
        self.node = facts.get("node") or self.host
        self.stage = facts.get("stage") or "%s-b%s" % (STAGE_PREFIX[doc["probe"]], facts.get("batch"))
        self.observer = facts.get("observer")
        if self.observer is None:  # an artifact from before the move: the host that watched this batch
            self.observer = next((d["host"] for d in run.artifacts if d["probe"] == "sched_watch"
                                  and d.get("variant") in (self.stage + s for s in WATCH_STOPS)), "")

    def own(self, probe, variant=None):
        return self.run.artifact(self.host, probe, variant)

    def observer_doc(self, probe, suffix=""):
        return self.run.artifact(self.observer, probe, self.stage + suffix) if self.observer else None

    def boot_id(self, when):
        doc = self.own("boot_id", "%s-%s" % (STAGE_PREFIX[self.doc["probe"]], when))
        return ((doc or {}).get("facts") or {}).get("boot_id") or None

    def watch_doc(self):
        """The artifact of the stop of this batch's watcher: the wait's, or the cleanup's."""
        return next((d for d in (self.observer_doc("sched_watch", s) for s in WATCH_STOPS) if d is not None), None)

    def watch_samples(self):
        """Everything the observer's watcher kept: the batch's nodes and the scheduler's other nodes."""
        name = "sched_watch-%s.jsonl" % self.stage
        watch = self.watch_doc()
        if watch is None or name not in (watch.get("raw") or []):
            return []
        return read_samples(os.path.join(self.run.run_dir, "artifacts", self.observer, name))

    def samples(self):
        """This node's scheduler samples, as the observer's watcher kept them."""
        return [s for s in self.watch_samples() if s.get("node") == self.node and not s.get("other")]

    def action_values(self, *suffixes):
        """{metric: first value} of the observer's sched_action results about this node, in the order given."""
        out = {}
        for suffix in suffixes:
            for r in (self.observer_doc("sched_action", suffix) or {}).get("results") or []:
                if (r.get("labels") or {}).get("node") == self.node:
                    out.setdefault(r["metric"], float(r["value"]))
        return out


def _unlabelled(doc, metric):
    for r in (doc or {}).get("results") or []:
        if r["metric"] == metric and not r.get("labels"):
            return float(r["value"])
    return None


def _record(doc, status="ok", reason=None, facts=None, metrics=None, events=None):
    return {"host": doc["host"], "probe": doc["probe"], "status": status, "reason": reason,
            "facts": dict(doc.get("facts") or {}, **(facts or {})), "metrics": metrics or {}, "events": events or {}}


def reboot_outcome(run, doc):
    b = _Batch(run, doc)
    facts = doc.get("facts") or {}
    before, after = b.boot_id("before"), b.boot_id("after")
    changed = bool(before and after and before != after)
    error = facts.get("reboot_error")
    events = {ACTION_EVENTS[m]: v for m, v in b.action_values("-drain", "-return").items() if m in ACTION_EVENTS}
    for r in doc.get("results") or []:
        event = (r.get("labels") or {}).get("event")
        if r["metric"] == "event_at" and event in CONTROLLER_EVENTS:
            events[event] = float(r["value"])
    elapsed = _unlabelled(doc, "reboot_module_elapsed_s")
    if elapsed is not None and events.get("reboot_started") is not None and events.get("reboot_returned") is not None:
        # The node's own reboot: the module's own wait on it. The time the controller went on (the task after it)
        # is the batch's slowest node's (Ansible's linear strategy); artifacts written before roles/reboot recorded
        # the start + the elapsed carry that one.
        events["reboot_returned"] = events["reboot_started"] + elapsed
    samples = b.samples()
    t_end = max([s["t"] for s in samples] or [0]) or None
    stages = reboot_timeline(samples, events, t_end)
    metrics = {"boot_id_changed": 1 if changed else 0}
    metrics.update((name, stages[name]) for name in REBOOT_TIMINGS if stages.get(name) is not None)
    if elapsed is not None:
        metrics["reboot_module_elapsed_s"] = elapsed
    if stages.get("flaps_after_return") is not None:
        metrics["flaps_after_return"] = stages["flaps_after_return"]
    back = changed and not error and (facts.get("scheduler") == "none" or "job_ok" in events)
    metrics["returned"] = 1 if back else 0
    if not changed and not error:
        error = "the boot id did not change: the node did not reboot"
    computed = {"boot_id_before": before, "boot_id_after": after, "reboot_error": error, "observer": b.observer}
    return _record(doc, facts={k: v for k, v in computed.items() if v is not None}, metrics=metrics,
                   events={k: _r(v) for k, v in stages["events"].items() if v is not None})


def _job_record(b, node):
    """({job_rc, job_ok, job_s, job_ok_at}, {job_error, job_skipped}) of the observer's fresh job on node (the
    batch's sched_action -job), each only as far as it was recorded."""
    job = {}
    for r in (b.observer_doc("sched_action", "-job") or {}).get("results") or []:
        if (r.get("labels") or {}).get("node") == node:
            job.setdefault(r["metric"], float(r["value"]))
    job_facts = (b.observer_doc("sched_action", "-job") or {}).get("facts") or {}
    metrics, facts = {}, {}
    if job.get("job_rc") is not None:
        metrics["job_rc"] = job["job_rc"]
        metrics["job_ok"] = 1 if job["job_rc"] == 0 and job.get("job_ok_at") is not None else 0
    for key in ("job_error", "job_skipped"):
        if job_facts.get("%s_%s" % (key, node)):
            facts[key] = job_facts["%s_%s" % (key, node)]
    if job.get("job_ok_at") is not None and job.get("job_started_at") is not None:
        metrics["job_s"] = round(job["job_ok_at"] - job["job_started_at"], 3)
        metrics["job_ok_at"] = job["job_ok_at"]
    return metrics, facts


def amd_fault(inject):
    """An AMD node has no XIDs: the amdgpu RAS error injected there is judged as the XID of the same fault
    (reports/data/xid.yml `amd_ras`), and named as what it was. {} for an injection of an NVIDIA XID."""
    facts = (inject or {}).get("facts") or {}
    if facts.get("method") != "amdgpu_ras":
        return {}
    key = "%s_%s" % (facts.get("ras_block"), facts.get("ras_type"))
    with open(os.path.join(DATA_DIR, "xid.yml"), encoding="utf-8") as fh:
        xid = (yamlio.safe_load(fh).get("amd_ras") or {}).get(key)
    fault = "amdgpu RAS %s %s error" % (facts.get("ras_block"), facts.get("ras_type"))
    if xid is None:
        return {"fault": fault + " (no XID of the same fault in xid.yml amd_ras: judged as unknown)", "xid": "0"}
    return {"fault": "%s (judged as XID %d, the same fault)" % (fault, xid), "xid": str(xid)}


def injection_time(inject):
    """When a fault_inject artifact's fault went in, on the observer's clock, or None when it records no injection.

    The scheduler's times (samples, actions) are the observer's; injected_at is the node's own clock, which may be
    seconds or minutes off it, so a detection time must not subtract the two. The artifact carries the observer's
    clock read just before the injection task (inject_started_observer), as the reboot's start is
    (reboot_started_observer): timed from it, detection is at most that task's few seconds long, never off by the
    clocks' skew. An artifact without it (recorded before it existed, or no observer answered) gives injected_at."""
    results = (inject or {}).get("results") or []
    node_clock = next((float(r["value"]) for r in results if r["metric"] == "injected_at"), None)
    if node_clock is None:
        return None
    return next((float(r["value"]) for r in results if r["metric"] == "event_at"
                 and (r.get("labels") or {}).get("event") == "inject_started_observer"), node_clock)


def injection_clock(inject):
    """Whose clock injection_time(inject) is on: "observer" (the batch's observer's, inject_started_observer),
    "node" (the injected node's own, injected_at: an artifact without the observer's reading), or None."""
    results = (inject or {}).get("results") or []
    if not any(r["metric"] == "injected_at" for r in results):
        return None
    return "observer" if any(r["metric"] == "event_at" and (r.get("labels") or {}).get("event") ==
                             "inject_started_observer" for r in results) else "node"


def inject_lag(inject):
    """Seconds from the fault_inject probe's start to its fault going in (injected_at - started_at, both the node's
    clock): the part of detect_s, timed from the observer's reading before the probe's task, that passed before
    the fault was there (the device described, the methods tried first). None when it cannot be told."""
    results = (inject or {}).get("results") or []
    at = next((float(r["value"]) for r in results if r["metric"] == "injected_at"), None)
    try:
        started = parse_us((inject or {}).get("started_at") or "") / US
    except (TimeError, TypeError, ValueError):
        return None
    return _r(at - started) if at is not None and at >= started else None


def watch_interval(b):
    """The seconds between two readings of the batch's watcher (its start's params), or None: a stage seen by it is
    known to within that."""
    start = b.observer_doc("sched_watch", "-start") or {}
    value = (start.get("params") or {}).get("interval")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def fault_outcome(run, doc):
    b = _Batch(run, doc)
    inject = b.own("fault_inject")
    watch = b.watch_doc()
    facts = {"method": ((inject or {}).get("facts") or {}).get("method"),
             "ended_by": ((watch or {}).get("facts") or {}).get("ended_by"), "observer": b.observer}
    if (inject or {}).get("status") != "ok":
        return _record(doc, "skipped", "the fault was not injected: %s" % (
            (inject or {}).get("reason") or "no injection artifact"), facts)
    t_inject = injection_time(inject)
    if t_inject is None:
        return _record(doc, "error", "the injection artifact has no injected_at time", facts)
    # The fault went unseen for fault_injection_fallback_after and the next method was injected: detection is timed
    # from that injection (the first one told nothing about the health checks, only about the method).
    fallback = b.own("fault_inject", "fallback")
    t_fallback = injection_time(fallback)
    # A fault noticed between the seen step's deadline and the fallback (a few tasks later) was seen after all:
    # timed from the first injection, the fallback moot.
    out_before = (t_fallback is not None and
                  any(t_inject < x["t"] < t_fallback and x["phase"] in NOTICED for x in known(b.samples())))
    if out_before:
        facts["fallback"] = "moot: the fault was noticed before the fallback injection"
    elif (fallback or {}).get("status") == "ok" and t_fallback is not None:
        facts.update(first_method=facts["method"], method=(fallback.get("facts") or {}).get("method"),
                     first_unseen_s=_r(t_fallback - t_inject))
        inject, t_inject = fallback, t_fallback
    elif fallback is not None:
        facts["fallback"] = "no other method could inject: %s" % (fallback.get("reason") or fallback["status"])
    before, after = b.boot_id("before"), b.boot_id("after")
    rebooted = bool(before and after and before != after)
    facts.update(boot_id_before=before, boot_id_after=after)
    facts.update(amd_fault(inject))
    watched = b.watch_samples()
    mine = [s for s in watched if s.get("node") == b.node and not s.get("other")]
    tl = fault_timeline(mine, t_inject, spare=spare_for(watched, b.node, t_inject),
                        out_phases=held_out((doc.get("facts") or {}).get("scheduler")))
    if not tl.get("observed"):
        return _record(doc, "error", "cannot tell what happened: %s" % tl.get("why"), facts)
    if not tl.get("measurable"):
        return _record(doc, "skipped", tl.get("why"), facts)
    facts.update(observed_action=observed_action(tl, rebooted), detect_phase=tl.get("detect_phase"),
                 detect_reason=tl.get("detect_reason"), final_phase=tl.get("final_phase"))
    if tl.get("after_drain"):
        # the phases from the first drain to the end of the watch ("drained -> down"), and whether all kept work off
        facts.update(after_drain=" -> ".join(tl["after_drain"]), kept_out_after_drain=tl["kept_out_after_drain"])
        if tl.get("back_after_drain"):
            facts["back_after_drain"] = tl["back_after_drain"]  # the first phase after it that let work back on
    # injected_at: the injection on the observer's clock (injection_time), the zero of every *_s and of job_ok_at
    metrics = {"injected_at": t_inject, "watched_s": tl["watched_s"], "detected": 1 if tl["detected"] else 0,
               "rebooted": 1 if rebooted else 0, "returned": 1 if tl.get("returned") else 0,
               "flaps": tl.get("flaps", 0), "drain_open": 1 if tl.get("drain_open") else 0}
    metrics.update((name, tl[name]) for name in ("detect_s", "drain_s", "time_drained_s", "out_of_service_s",
                                                 "return_s") if tl.get(name) is not None)
    # What bounds detect_s: it counts from the observer's clock read before the injection task, so it holds the
    # probe's own lag to the fault going in (inject_lag_s); a change is seen to within the watcher's interval.
    lag, interval = inject_lag(inject), watch_interval(b)
    if lag is not None:
        metrics["inject_lag_s"] = lag
    if interval is not None:
        metrics["watch_interval_s"] = interval
    # The basic command the observer ran on the node at the end of the watch (sched_action -job: job_started_at,
    # job_rc, job_ok_at when rc 0, else the fact job_error_<node>; job_skipped_<node> when the node was not
    # available): what tells "back in service" (or "kept in service", for a contained XID) from "takes work".
    job_metrics, job_facts = _job_record(b, b.node)
    metrics.update(job_metrics)
    facts.update(job_facts)
    if tl.get("spare"):
        # The hot spare in the node's place, and the same basic command on it (sched_action -job with joined_from:
        # its results are labelled with the spare's name): a spare counts once it takes work.
        facts["spare"] = tl["spare"]
        metrics["spare_s"] = tl["spare_s"]
        spare_metrics, spare_facts = _job_record(b, tl["spare"])
        metrics.update(("spare_" + k, v) for k, v in spare_metrics.items())
        facts.update(("spare_" + k, v) for k, v in spare_facts.items())
        if spare_metrics.get("job_ok_at") is not None:
            metrics["spare_job_ok_s"] = _r(spare_metrics["job_ok_at"] - t_inject)
    restored = b.action_values("-restore").get("resumed")
    if restored is not None:
        metrics["resumed_by_assessment"] = restored
    return _record(doc, facts=facts, metrics=metrics)


OUTCOMES = {"reboot": reboot_outcome, "fault_injection": fault_outcome}


def outcome(run, doc):
    """The computed record of one reboot or fault_injection artifact; a skipped or failed artifact stays as it is."""
    if doc["status"] != "ok":
        return _record(doc, doc["status"], doc.get("reason"))
    cache = run.__dict__.setdefault("_reliability_outcomes", {})
    key = (doc["host"], doc["probe"], id(doc))
    if key not in cache:
        cache[key] = OUTCOMES[doc["probe"]](run, doc)
    return cache[key]


def outcomes(run, probe):
    """The computed records of every artifact of one probe, by host."""
    return [outcome(run, d) for d in sorted((d for d in run.artifacts if d["probe"] == probe and
                                             d.get("variant") is None), key=lambda d: d["host"])]
