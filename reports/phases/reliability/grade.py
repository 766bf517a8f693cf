"""Grading of the reliability phase (roles/reboot, roles/fault_injection): reboot timings and what the provider's
health checks did about an injected fault.

Every host has a `reboot` and a `fault_injection` artifact (skipped with the reason when nothing was done to it),
so every check below gives one row per host. The nodes record raw observations only; the timings and the
remediation observed are computed from them in timeline.py, and judged here.

kinds (registered by reports.grading.kinds):
  reliability_reboot    per host: the node came back from the reboot (new boot id, back in service, a fresh job ran)
  reliability_peers     cluster: a duration of each rebooted node against the median of the other rebooted nodes
  reliability_detect    per host: injection -> the node taken out of service; within `pass_s` pass, within `fail_s`
                        warn, slower or never fail. Only for an XID whose action is a drain (xid.yml `drain`);
                        a contained XID (94) is a skip here, graded by reliability_contained instead
  reliability_contained per host, for an injected XID whose action is not a drain (xid.yml `drain: false`, 94): the
                        node kept in service and a basic command still runs on it
  reliability_action    per host: the remediation observed against the one reports/data/xid.yml recommends for the XID;
                        for an XID whose action is not a drain (RESTART_APP, IGNORE_UNTIL_RESET) a node kept out of
                        service (drained) warns, as reliability_contained does
  reliability_return    per host: back in service within `within_s` of the injection and the basic command the
                        observer ran on it then succeeded (sched_action -job: job_rc 0); on HGX also a node kept
                        out and replaced by a hot spare whose basic command succeeded within `within_s` of the
                        injection (seed: a hot spare "in under an hour end to end"). An NVL72-style tray
                        (system_kind: node_info GPU model GB200/GB300) passes instead when drained within
                        `nvl72_drain_s` and kept out of service from then to the end of the watch (drained, or
                        down/not responding for its repair: timeline's out-of-service phases)
"""

import os
import statistics

from reports import DATA_DIR, yamlio
from reports.grading import make_row, ungradable
from reports.phases.reliability import timeline
from reports.shown import shown

# What the observed actions mean for the buckets of xid.yml.
HARMLESS = ("RESTART_APP", "IGNORE_UNTIL_RESET")


def _precondition(check, run, host, probe):
    """(row, None) when there is nothing to grade on this host, else (None, what happened there: the record
    timeline.outcome computes from the raw observations). A host that became unreachable is still graded on what
    it recorded (a node that did not come back from a reboot is a finding)."""
    row = ungradable(check, run, host, probe=probe, variant=None, grade_unreachable=True)
    if row:
        return row, None
    done = timeline.outcome(run, run.artifact(host, probe))
    if done["status"] in ("skipped", "error"):
        status = "skip" if done["status"] == "skipped" else "error"
        return make_row(check, host, status, reason=done["reason"]), None
    return None, done


def _s(value, limits=()):
    """Seconds with one decimal, or more where one would show a time judged against `limits` on the other side of
    one, or on it (a detection of 120.04 s past a 120 s limit is "120.04 s", not "120.0 s")."""
    return "%s s" % shown(value, limits)


def detect_limits(check):
    """(pass_s, fail_s) of reliability_detect: within pass_s passes, within fail_s warns."""
    return float(check.get("pass_s", 120)), float(check.get("fail_s", 600))


def return_limit(check):
    """within_s of reliability_return (HGX): back in service, or replaced, within it."""
    return float(check.get("within_s", 3600))


def grade_reboot(check, run, host):
    row, done = _precondition(check, run, host, "reboot")
    if row:
        return [row]
    m = done["metrics"]
    facts = done["facts"]
    expected = "new boot id, back in service, a fresh job ran"
    if m.get("returned") == 1:
        back = m.get("return_to_service_s")
        return [make_row(check, host, "pass", "back after %s" % _s(back) if back is not None else "back", expected)]
    why = facts.get("reboot_error") or ("the boot id did not change" if not m.get("boot_id_changed")
                                        else "no fresh job ran after the reboot")
    return [make_row(check, host, "fail", "not back", expected, why)]


def peer_limits(check, median):
    """The lines a reliability_peers value is judged against, beside the other nodes' `median`: fail_factor and
    warn_factor times it, and min_excess_s above it (slower than a factor by no more than that passes)."""
    fail_f, warn_f = float(check.get("fail_factor", 2.0)), float(check.get("warn_factor", 1.5))
    return fail_f * median, warn_f * median, median + float(check.get("min_excess_s", 30))


def grade_peers(check, run, hosts):
    """Each host's value of `metric` (probe `probe`) against the median of the others: slower than `fail_factor`
    times that median (and by more than `min_excess_s`) fails, slower than `warn_factor` times warns."""
    values, rows = {}, []
    for host in hosts:
        row, done = _precondition(check, run, host, check["probe"])
        if row:
            rows.append(row)
            continue
        value = done["metrics"].get(check["metric"])
        if value is None:
            rows.append(make_row(check, host, "skip", reason="no %s (the node did not come back)" % check["metric"]))
            continue
        values[host] = value
    fail_f, warn_f = float(check.get("fail_factor", 2.0)), float(check.get("warn_factor", 1.5))
    min_excess = float(check.get("min_excess_s", 30))
    for host, value in sorted(values.items()):
        others = [v for h, v in values.items() if h != host]
        if len(others) < int(check.get("min_peers", 1)):
            rows.append(make_row(check, host, "skip", _s(value), reason="no other node to compare with"))
            continue
        median = statistics.median(others)
        expected = "at most %gx the median of the other %d node(s), %s" % (fail_f, len(others), _s(median))
        excess = value - median
        if excess > min_excess and value > fail_f * median:
            status = "fail"
        elif excess > min_excess and value > warn_f * median:
            status = "warn"
        else:
            status = "pass"
        rows.append(make_row(check, host, status, _s(value, peer_limits(check, median)), expected))
    return rows


def _injected_xid(done):
    return int(done["facts"].get("xid") or 0)


def grade_detect(check, run, host, data=None):
    row, done = _precondition(check, run, host, "fault_injection")
    if row:
        return [row]
    data = data if data is not None else load_xid_actions()
    xid = _injected_xid(done)
    if not drains(xid, data):
        bucket, text = recommended(xid, data)
        return [make_row(check, host, "skip", reason="XID %d is contained (%s: %s), not a drain: detection is shown "
                         "by injecting an XID whose action is a drain (79, 48, ...); reliability.contained_xid "
                         "grades this one" % (xid, bucket, text))]
    m = done["metrics"]
    pass_s, fail_s = detect_limits(check)
    expected = "noticed (flagged unhealthy or taken out of service) within %s (over %s fails)" % (
        _s(pass_s), _s(fail_s))
    if not m.get("detected"):
        watched = m.get("watched_s", 0.0)
        note = "" if watched >= fail_s else (" (the watch was shorter than %s: raise fault_injection_detect_timeout "
                                            "to tell slow from never)" % _s(fail_s))
        return [make_row(check, host, "fail", "not detected", expected,
                     "nothing flagged the node or took it out of service for the whole %s watch%s"
                     % (_s(watched), note))]
    detect = m["detect_s"]
    status = "pass" if detect <= pass_s else "warn" if detect <= fail_s else "fail"
    facts = done["facts"]
    how = facts.get("detect_reason") or facts.get("detect_phase")
    observed = "%s (%s)" % (_s(detect, (pass_s, fail_s)), how)
    if facts.get("first_method"):
        observed += ", by %s after the %s injection went unseen for %s" % (
            facts.get("method"), facts["first_method"], _s(float(facts.get("first_unseen_s") or 0)))
    return [make_row(check, host, status, observed, expected)]


def load_xid_actions(path=None):
    with open(path or os.path.join(DATA_DIR, "xid.yml"), encoding="utf-8") as fh:
        return yamlio.safe_load(fh)


def recommended(xid, data):
    bucket = (data.get("xids") or {}).get(int(xid)) or data.get("unknown", "CONTACT_SUPPORT")
    text = ((data.get("actions") or {}).get(bucket) or {}).get("text", bucket)
    return bucket, text


def drains(xid, data):
    """Whether xid.yml's action for the XID takes the node out of service (`drain`, default true)."""
    bucket, _ = recommended(xid, data)
    return bool(((data.get("actions") or {}).get(bucket) or {}).get("drain", True))


def judge_action(observed, bucket, watched_s):
    """(status, why) for an observed remediation against the recommended bucket."""
    window = "within the %s watch" % _s(watched_s)
    if bucket in HARMLESS:
        # xid.yml drain: false. RESTART_APP (94, 13, ...): an application fault; kept in service (none) is what
        # it calls for, and taking the node out of service for it loses capacity, for a while (returned) or to the
        # end of the watch, as reliability.contained_xid says of the same observation. IGNORE_UNTIL_RESET (63: a
        # row remap that takes effect at the next GPU reset): kept in service, or drained for the reset and back
        # (returned), is right; kept out to the end of the watch loses capacity. A reboot, removal or replacement
        # more than either needs.
        app = bucket == "RESTART_APP"
        needs = "an application restart" if app else "a GPU reset at some point"
        if observed in ("reboot", "removed", "replaced"):
            return "warn", "the node was %s for an XID that needs only %s" % (
                "rebooted" if observed == "reboot" else "replaced", needs)
        if observed in ("drained", "out_of_service"):
            return "warn", ("the node was taken out of service (%s) for an XID that needs only %s, and kept out to "
                            "the end of the %s watch: capacity lost%s" % (
                                observed.replace("_", " "), needs, _s(watched_s),
                                " for an application fault" if app else ""))
        if observed == "returned" and app:
            return "warn", ("the node was taken out of service for an XID that needs only %s, then returned: "
                            "capacity lost for an application fault" % needs)
        return "pass", None
    if observed == "none":
        return "fail", "the node was left schedulable after an uncontained error"
    if observed in ("drained", "out_of_service"):
        if bucket in ("REBOOT", "RESET_GPU"):
            return "warn", "kept off the node, but no %s was observed %s" % (
                "reboot" if bucket == "REBOOT" else "GPU reset or reboot", window)
        return "pass", None
    if observed == "returned" and bucket == "REBOOT":
        return "warn", "back in service without the reboot this XID calls for"
    # replaced (kept out, a hot spare in its place), removed, reboot: the faulted node takes no more work, whatever
    # the bucket (a drain, a GPU reset, a reboot or support): the seed's HGX remediation.
    return "pass", None


def grade_action(check, run, host, data=None):
    row, done = _precondition(check, run, host, "fault_injection")
    if row:
        return [row]
    facts = done["facts"]
    data = data if data is not None else load_xid_actions(check.get("xid_file") and os.path.join(
        DATA_DIR, check["xid_file"]))
    xid = int(facts.get("xid") or 0)
    bucket, text = recommended(xid, data)
    observed = facts.get("observed_action") or "unknown"
    if observed == "unknown":
        return [make_row(check, host, "error", observed, text, "the scheduler's view could not be read")]
    status, why = judge_action(observed, bucket, done["metrics"].get("watched_s", 0.0))
    return [make_row(check, host, status, "%s (XID %d)" % (observed, xid), "%s: %s" % (bucket, text), why)]


def grade_contained(check, run, host, data=None):
    """An injected XID whose action is not a drain (94: contained, restart the application): the node kept in
    service (never drained) and the basic command the observer ran at the end of the watch succeeded."""
    row, done = _precondition(check, run, host, "fault_injection")
    if row:
        return [row]
    data = data if data is not None else load_xid_actions()
    xid = _injected_xid(done)
    bucket, text = recommended(xid, data)
    if drains(xid, data):
        return [make_row(check, host, "skip", reason="XID %d calls for a drain (%s): graded by "
                         "reliability.failure_detection and reliability.remediation" % (xid, bucket))]
    m, facts = done["metrics"], done["facts"]
    expected = "XID %d %s: %s; the node stays in service (no drain) and a job still runs" % (xid, bucket, text)
    observed = facts.get("observed_action") or "unknown"
    if observed == "unknown":
        return [make_row(check, host, "error", observed, expected, "the scheduler's view could not be read")]
    # IGNORE_UNTIL_RESET (63): drained for the GPU reset the XID waits for and back is that reset done (as
    # reliability.remediation judges it); an application fault (RESTART_APP) needed no drain at all
    reset_done = bucket == "IGNORE_UNTIL_RESET" and observed == "returned"
    if observed != "none" and not reset_done:
        return [make_row(check, host, "warn", "%s (XID %d)" % (observed, xid), expected,
                         "the node was taken out of service (%s) for %s: capacity lost%s" % (
                             facts.get("detect_reason") or facts.get("detect_phase"),
                             "an error contained to the application" if bucket == "RESTART_APP" else
                             "an error whose fix waits for the next GPU reset, and kept out",
                             " for nothing" if bucket == "RESTART_APP" else ""))]
    kept = "drained for a GPU reset and back" if reset_done else "kept in service"
    if m.get("job_ok"):
        return [make_row(check, host, "pass", "%s, a job ran (%s)" % (kept, _s(m.get("job_s", 0.0))), expected)]
    if m.get("job_rc") is not None:
        return [make_row(check, host, "fail", "%s, the job failed (rc %d)" % (kept, int(m["job_rc"])),
                         expected, facts.get("job_error") or "the job failed")]
    return [make_row(check, host, "warn", "%s, no job ran" % kept, expected,
                     "not shown that jobs continue: %s" % (facts.get("job_skipped") or "no job result recorded "
                                                           "(sched_action -job)"))]


# GPU models (node_info gpu_model, as nvidia-smi names them) built as NVL72-style trays: a faulted tray is kept
# drained until the rack's repair (seed: NVL72 is not hot-swapped like an HGX node), not replaced by a spare.
NVL72_MODELS = ("GB200", "GB300")


def system_kind(run, host):
    """(kind, where it came from): nvl72 when the host's node_info GPU model is a Grace-Blackwell tray, else hgx
    (an 8-way baseboard; the default, also for a host whose GPU model is not known)."""
    model = (((run.artifact(host, "node_info") or {}).get("facts") or {}).get("gpu_model")) or ""
    if any(tag in model.upper() for tag in NVL72_MODELS):
        return "nvl72", "node_info gpu_model %s" % model
    return "hgx", ("node_info gpu_model %s" % model) if model else "GPU model not known: HGX assumed"


def _grade_return_nvl72(check, host, done, how):
    """NVL72-style tray: drained within `nvl72_drain_s` and kept out of service from then to the end of the watch
    passes, whatever phase kept it out after the drain (timeline: the scheduler's out-of-service phases; a drained
    tray powered off or not responding for its repair is Slurm DOWN+DRAIN, Kubernetes NotReady: phase down). Back in
    service after the drain (available, or schedulable while flagged unhealthy) fails, unless a fresh job ran on it
    at the end (returned and job_ok)."""
    m, facts = done["metrics"], done["facts"]
    drain_within = float(check.get("nvl72_drain_s", 120))
    expected = "NVL72 tray (%s): drained within %s and kept out until the rack is repaired" % (how, _s(drain_within))
    if m.get("drain_s") is None:
        return [make_row(check, host, "fail", "not drained", expected, "the tray was never drained")]
    drained = "drained after %s" % _s(m["drain_s"], (drain_within,))
    if m["drain_s"] > drain_within:
        return [make_row(check, host, "fail", drained, expected)]
    after = (facts.get("after_drain") or "").split(" -> ")
    if facts.get("kept_out_after_drain") and not m.get("flaps"):
        watch = "%s watch" % _s(m.get("watched_s", 0.0))
        if all(phase in timeline.DRAINED for phase in after):
            return [make_row(check, host, "pass", "%s, kept out for the %s" % (drained, watch), expected)]
        return [make_row(check, host, "pass", "%s, then %s (out of service to the end of the %s)" % (
            drained, " -> ".join(after[1:]), watch), expected)]
    if m.get("returned") and m.get("job_ok"):
        return [make_row(check, host, "pass", "%s, back with a job run after %s" % (drained, _s(m["return_s"])),
                         expected)]
    back = facts.get("back_after_drain")
    if back is None:  # out of service from the drain on, but back in service between the first sign and the drain
        observed = "%s, out of service since, but back in service before the drain (%d flap(s))" % (
            drained, int(m.get("flaps", 0)))
    else:
        observed = "%s, then back in service (%s, %d flap(s))" % (drained, back, int(m.get("flaps", 0)))
    return [make_row(check, host, "fail", observed, expected,
                     "an NVL72 tray must stay out of service until it is repaired")]


def _grade_replaced(check, host, done, within, expected):
    """HGX, the faulted node kept out and a hot spare in service in its place (timeline.spare_for): the spare counts
    once the basic command ran on it (sched_action -job with joined_from), within `within_s` of the fault."""
    m, facts = done["metrics"], done["facts"]
    spare = facts["spare"]
    observed = "replaced by %s after %s" % (spare, _s(m["spare_s"], (within,)))
    if m["spare_s"] > within:
        return make_row(check, host, "fail", observed, expected, "the spare came into service later than %s" %
                        _s(within))
    if m.get("spare_job_ok"):
        ran = m.get("spare_job_ok_s")
        if ran is not None and ran > within:
            return make_row(check, host, "fail", observed + ", a fresh job ran on it after %s" % _s(ran, (within,)),
                            expected,
                            "the spare took work later than %s after the fault" % _s(within))
        return make_row(check, host, "pass", observed + ", a fresh job ran on it", expected)
    if m.get("spare_job_rc") is not None:
        return make_row(check, host, "fail", observed + ", the basic command on it failed (rc %d)" % int(
            m["spare_job_rc"]), expected, facts.get("spare_job_error") or "the basic command failed on the spare")
    return make_row(check, host, "fail", observed + ", no basic command ran on it", expected,
                    "a spare joined, but it was not shown to take work (%s)" % (
                        facts.get("spare_job_skipped") or "no sched_action -job result for %s: the job task needs "
                        "joined_from" % spare))


def grade_return(check, run, host):
    row, done = _precondition(check, run, host, "fault_injection")
    if row:
        return [row]
    m, facts = done["metrics"], done["facts"]
    kind, how = system_kind(run, host)
    if kind == "nvl72":
        return _grade_return_nvl72(check, host, done, how)
    within = return_limit(check)
    expected = ("back in service, or kept out and replaced by a hot spare, and a basic command runs within %s of "
                "the fault" % _s(within))
    if m.get("returned"):
        back = m["return_s"]
        observed = "back after %s" % _s(m["return_s"], (within,))
        if m.get("job_ok"):
            observed += ", a fresh job took %s" % _s(m["job_s"])
            return [make_row(check, host, "pass" if back <= within else "fail", observed, expected)]
        if m.get("job_rc") is not None:
            return [make_row(check, host, "fail", observed + ", the basic command failed (rc %d)" % int(m["job_rc"]),
                             expected, facts.get("job_error") or "the basic command failed")]
        return [make_row(check, host, "fail", observed + ", no basic command ran", expected,
                         "back in the scheduler, but no basic command was run on it (%s)" % (
                             facts.get("job_skipped") or "no sched_action -job result for the node"))]
    if facts.get("spare"):
        return [_grade_replaced(check, host, done, within, expected)]
    watched = m.get("watched_s", 0.0)
    if watched >= within:
        return [make_row(check, host, "fail", "not back", expected,
                         "still out of service after %s, and no spare came into service" % _s(watched))]
    return [make_row(check, host, "skip", "not back within the %s watch" % _s(watched), expected,
                 "the watch (fault_injection_remediation_timeout) was shorter than %s" % _s(within))]


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {
    "reliability_reboot": grade_reboot,
    "reliability_detect": grade_detect,
    "reliability_action": grade_action,
    "reliability_return": grade_return,
    "reliability_contained": grade_contained,
}
CLUSTER = {"reliability_peers": grade_peers}
