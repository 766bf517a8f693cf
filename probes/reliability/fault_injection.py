"""fault_injection: what the provider's tooling did about a fault injected on this node, and how fast.

Written on the injected node after the watch. The role (roles/fault_injection) injected a fault with the
fault_inject probe while an observer node recorded the scheduler's view (sched_watch); this probe gets the
injection artifact, the scheduler samples and the observer's actions as parameters, reads the node's boot id now,
and records (probes/reliability/timeline.py):

* detect_s: injection -> the node first taken out of service (drained, down, unhealthy, removed);
* drain_s: injection -> first drained; time_drained_s: the time it spent drained (still drained at the end of
  the watch: drain_open=1 and the time is a lower bound);
* return_s: injection -> back in service for good; job_s: once back, a basic command (a fresh job on the node)
  from its submission to its success, and job_ok_at when it succeeded;
* flaps: the times it came back only to leave again;
* the remediation observed (fact observed_action): none (never taken out: still schedulable), drained (kept off,
  nothing more within the watch), reboot (boot id changed), returned (back in service without a reboot: a GPU
  reset or a resume), removed (the scheduler lost the node: replaced).

The controller compares the observed action with the one recommended for the XID (reports/phases/reliability/grade.py).
"""

from probes.common.readers import read_text
from probes.reliability import timeline
from probes.reliability.boot_id import BOOT_ID_PATH


def observed_action(tl, rebooted):
    if not tl.get("observed") or not tl.get("measurable", True):
        return "unknown"
    if not tl.get("detected"):
        return "none"
    if tl.get("removed"):
        return "removed"
    if rebooted:
        return "reboot"
    if tl.get("returned"):
        return "returned"
    return "drained" if tl.get("drained") else "out_of_service"


def _value(results, metric, node=None):
    for r in results or []:
        if r.get("metric") == metric and (node is None or (r.get("labels") or {}).get("node") == node):
            return float(r["value"])
    return None


def run(art, params, out_dir):
    if params.get("skip"):
        art.skip(params["skip"])
        return
    node = params.get("node") or art.host
    inject = params.get("inject") or {}
    art.facts.update(node=node, scheduler=params.get("scheduler"), batch=str(params.get("batch")),
                     xid=str(params.get("xid")), method=(inject.get("facts") or {}).get("method"),
                     ended_by=params.get("ended_by"))
    if inject.get("status") != "ok":
        art.skip("the fault was not injected: %s" % (inject.get("reason") or "no injection artifact"))
        return
    t_inject = _value(inject.get("results"), "injected_at")
    before = params.get("boot_id_before")
    now = (read_text(BOOT_ID_PATH) or "").strip() or None
    rebooted = bool(before and now and before != now)
    art.facts.update(boot_id_before=before, boot_id_after=now)
    samples = [s for s in params.get("samples") or [] if s.get("node") == node]
    tl = timeline.fault_timeline(samples, t_inject)
    if not tl.get("observed"):
        art.error("cannot tell what happened: %s" % tl.get("why"))
        return
    if not tl.get("measurable"):
        art.skip(tl.get("why"))
        return
    action = observed_action(tl, rebooted)
    art.facts.update(observed_action=action, detect_phase=tl.get("detect_phase"),
                     detect_reason=tl.get("detect_reason"), final_phase=tl.get("final_phase"))
    art.add("injected_at", t_inject, "s_epoch")
    art.add("watched_s", tl["watched_s"], "s")
    art.add("detected", 1 if tl["detected"] else 0, "bool")
    art.add("rebooted", 1 if rebooted else 0, "bool")
    art.add("returned", 1 if tl.get("returned") else 0, "bool")
    art.add("flaps", tl.get("flaps", 0), "count")
    art.add("drain_open", 1 if tl.get("drain_open") else 0, "bool")
    for name in ("detect_s", "drain_s", "time_drained_s", "out_of_service_s", "return_s"):
        if tl.get(name) is not None:
            art.add(name, tl[name], "s")
    job_ok = _value(params.get("job"), "job_ok_at", node)
    job_started = _value(params.get("job"), "job_started_at", node)
    if tl.get("returned") and job_ok is not None:
        art.add("job_s", round(job_ok - job_started, 3), "s")
        art.add("job_ok_at", job_ok, "s_epoch")
    restored = _value(params.get("restore"), "resumed", node)
    if restored is not None:
        art.add("resumed_by_assessment", restored, "bool")
