"""sched_action: one scheduler action of the destructive phase, on some nodes, timed on the node that does it.

Runs on the observer node (a Slurm client, or a host with kubectl). Actions (``params.action``):

* ``state``   read the nodes once; with ``scheduler: auto`` also find out which scheduler there is;
* ``drain``   drain each node (Kubernetes: cordon and drain) and wait until it is drained, up to ``timeout``;
* ``return``  after a reboot: wait until the scheduler hears from a new boot of the node (samples.registered: a
              changed SlurmdStartTime / BootTime, Kubernetes bootID, against the first reading of the watcher
              ``booted_from``, and the node answering), resume it (only the nodes in ``resume``; a node Slurm put
              DOWN+DRAIN for rebooting unexpectedly, ReturnToService 0 or 1, as well as a drained one), wait until
              it is available, then run a fresh job on it (``job_command``). Slurm's ReturnToService is recorded
              as it is (fact ``return_to_service``);
* ``job``     a fresh job on each node that is available (after a fault injection, once the node is back); with
              ``joined_from`` (a sched_watch tag) also on the hot spare that watcher saw come into service in place
              of each faulted node kept out (samples.spares, the rule the controller judges by; the results
              labelled with the spare's name);
* ``restore`` put nodes back as they were: every node in ``resume`` that is not available now is resumed, and
              waited for (up to ``timeout``) until it is available again.

Every time is recorded as a result in seconds since the epoch (unit ``s_epoch``) with the node as label, so the
controller and the reboot / fault_injection probes can put the stages of each node in order.
"""

import os
import time

from probes.common import sched
from probes.common import slurm as sched_slurm
from probes.common.sched import OUT_OF_SERVICE
from probes.params import Param, Params
from probes.reliability import samples as watch_samples

ACTIONS = ("state", "drain", "return", "job", "restore")
PARAMS = Params(
    action=Param(str, None, "what to do (required)", choices=ACTIONS),
    scheduler=Param(str, "auto", "slurm, kubernetes, none, or auto (detected on this node)"),
    options=Param(dict, {}, "the scheduler's options (probes/common/sched.py: detect_command, image, ...)"),
    nodes=Param(list, [], "the nodes, by their names in the scheduler"),
    resume=Param(list, [], "return, restore: the nodes to resume (those the test took out of service)"),
    interval=Param(float, 1.0, "seconds between two reads of the scheduler"),
    timeout=Param(float, None, "seconds to wait for the scheduler (default: drain 600, return 900, restore 30)"),
    reason=Param(str, "", "drain: the reason given to the scheduler (default: clustermax.assess)"),
    job=Param(bool, True, "return: run a fresh job on every node back in service"),
    job_command=Param(list, ["hostname"], "return, job: the job's command"),
    job_wait=Param(float, 60, "return, job: seconds the job may take"),
    drained_between=Param(list, [], "restore: [t0, t1] epoch s; a node drained outside them (by Slurm's stamp on its "
                                    "reason) is someone else's and is not resumed"),
    joined_from=Param(str, "", "job: the tag of a sched_watch run on this node (its <tag>.jsonl beside the "
                               "artifacts): also a job on the hot spare it saw join in place of each node it "
                               "watched that is kept out (samples.spares), earliest first"),
    booted_from=Param(str, "", "return: the tag of a sched_watch run on this node (its <tag>.jsonl beside the "
                               "artifacts), started before the reboot: a node is back once the scheduler shows a "
                               "boot of it other than in the watcher's first reading of it (samples.registered)"),
)


def _timeout(params, default):
    return default if params["timeout"] is None else params["timeout"]


def _stamp(art, metric, node, value=None):
    art.add(metric, round(time.time() if value is None else value, 3), "s_epoch", node=node)


def _cmd_text(res):
    if res is None:
        return None
    text = (res.stderr or res.stdout or "").strip().splitlines()
    return text[-1] if text else "rc=%s" % res.rc


def _scheduler(params, art):
    name = params["scheduler"]
    options = params["options"]
    if name == "auto":
        name, why = sched.detect(options)
        for tried, reason in sorted(why.items()):
            art.facts["not_%s" % tried] = reason
    art.facts["scheduler"] = name
    return sched.Scheduler(name, options)


def _wait(scheduler, nodes, predicate, timeout, interval):
    """{node: first sample meeting predicate} for the nodes that met it within timeout, and the last samples."""
    met, last = {}, {}
    deadline = time.time() + timeout
    while True:
        pending = [n for n in nodes if n not in met]
        if not pending:
            break
        for s in scheduler.read(pending, time.time()):
            last[s["node"]] = s
            if predicate(s):
                met[s["node"]] = s
        if time.time() >= deadline or len(met) == len(nodes):
            break
        time.sleep(interval)
    return met, last


def _state(art, scheduler, nodes):
    for s in scheduler.read(nodes, time.time()):
        art.add("available", 1 if s["phase"] == "available" else 0, "bool", node=s["node"], phase=s["phase"],
                state=s.get("state"), reason=s.get("reason"))


def _drain(art, scheduler, nodes, params, interval):
    reason = params["reason"] or "clustermax.assess"
    timeout = _timeout(params, 600.0)
    for node in nodes:
        _stamp(art, "drain_issued_at", node)
        res = scheduler.drain(node, reason, timeout_s=timeout)
        if res is not None and res.rc != 0:
            art.facts["drain_error_%s" % node] = _cmd_text(res)
    met, last = _wait(scheduler, nodes, lambda s: s["phase"] == "drained", timeout, interval)
    for node in nodes:
        art.add("drained", 1 if node in met else 0, "bool", node=node,
                phase=(met.get(node) or last.get(node) or {}).get("phase"))
        if node in met:
            _stamp(art, "drained_at", node, met[node]["t"])


def _job(art, scheduler, node, params):
    command = params["job_command"] or ["hostname"]
    _stamp(art, "job_started_at", node)
    res = scheduler.job(node, command, wait_s=params["job_wait"])
    if res is None:
        return
    art.add("job_rc", -1 if res.rc is None else res.rc, "rc", node=node)
    if res.rc == 0:
        _stamp(art, "job_ok_at", node)
    else:
        art.facts["job_error_%s" % node] = _cmd_text(res)


def spares(out_dir, tag, nodes):
    """The hot spares the watcher <tag> saw come into service in place of its nodes kept out, earliest first: the
    very ones the controller judges (samples.spares over the same record, the watcher being stopped by now), so that
    each gets the job, however many other nodes came back elsewhere in the cluster within the watch."""
    found = watch_samples.spares(watch_samples.read_samples(os.path.join(out_dir, tag + ".jsonl")))
    return [spare for spare, _ in sorted(found.values(), key=lambda x: (x[1], x[0])) if spare not in set(nodes)]


def _job_joined(art, scheduler, nodes, params, out_dir):
    chosen = spares(out_dir, params["joined_from"], nodes)
    art.facts["joined"] = ",".join(chosen)
    for s in scheduler.read(chosen, time.time()) if chosen else []:
        if s["phase"] == "available":
            _job(art, scheduler, s["node"], params)
        else:
            art.facts["job_skipped_%s" % s["node"]] = "node is %s" % s["phase"]


def booted_before(out_dir, tag, nodes):
    """{node: boot_marks} of each node's first reading by the watcher <tag> that tells its boot (before the reboot:
    the watch starts before the drain); {} without a watcher."""
    out = {}
    if not tag or not out_dir:
        return out
    for s in watch_samples.read_samples(os.path.join(out_dir, tag + ".jsonl")):
        node = s.get("node")
        if s.get("other") or node not in nodes or node in out:
            continue
        marks = watch_samples.boot_marks(s)
        if marks:
            out[node] = marks
    return out


def _return_to_service(art, scheduler):
    """Slurm's ReturnToService as `scontrol show config` prints it: it decides how a node rebooted without `scontrol
    reboot` registers (0 or 1: DOWN, "Node unexpectedly rebooted"; 2: back as it was)."""
    if scheduler.name != "slurm":
        return
    value, why = sched_slurm.config_value("ReturnToService")
    art.facts["return_to_service"] = value if value is not None else "unknown (%s)" % why


def _return(art, scheduler, nodes, params, interval, out_dir=None):
    timeout = _timeout(params, 900.0)
    resume = set(params["resume"])
    _return_to_service(art, scheduler)
    before = booted_before(out_dir, params.get("booted_from"), nodes)

    def back(s):
        # A new boot the scheduler heard from; without a boot of before on record, the node answering at all.
        mine = before.get(s["node"])
        return watch_samples.registered(mine, s) if mine else watch_samples.answering(s)

    # The scheduler hears from the node's new boot (Slurm: slurmd registered; Kubernetes: the kubelet posted).
    registered, last = _wait(scheduler, nodes, back, timeout, interval)
    for node in nodes:
        if node in registered:
            _stamp(art, "registered_at", node, registered[node]["t"])
            mine = before.get(node)
            art.facts["registered_by_%s" % node] = (
                "new boot (%s changed)" % watch_samples.new_boot(mine, registered[node]) if mine else
                "answering (no boot from before the reboot on record)")
        else:
            s = last.get(node) or {}
            art.facts["not_registered_%s" % node] = "%s (%s%s)" % (
                s.get("phase"), s.get("reason"),
                "; no new boot seen" if before.get(node) and watch_samples.answering(s) else "")
    for node in nodes:
        if node in resume and node in registered:
            _stamp(art, "resume_issued_at", node)
            res = scheduler.resume(node)
            if res is not None and res.rc != 0:
                art.facts["resume_error_%s" % node] = _cmd_text(res)
    # Exactly available: right after a resume Slurm shows IDLE+NOT_RESPONDING for a moment.
    available, last = _wait(scheduler, [n for n in nodes if n in registered], lambda s: s["phase"] == "available",
                            timeout, interval)
    for node in nodes:
        art.add("available", 1 if node in available else 0, "bool", node=node,
                phase=(available.get(node) or last.get(node) or {}).get("phase"))
        if node in available:
            _stamp(art, "available_at", node, available[node]["t"])
            if params["job"]:
                _job(art, scheduler, node, params)


def _not_ours(s, between):
    """Why a node out of service is not the test's to resume (drained outside `between`, by the reason's stamp),
    or None. Only Slurm stamps its reasons (reason_at); elsewhere every node of `resume` is resumed."""
    if not between or "reason_at" not in s:
        return None
    t0, t1 = float(between[0]), float(between[1])
    at = s.get("reason_at")
    if at is None:
        return "its reason carries no time (%s): not known to be the test's" % (s.get("reason") or "no reason")
    # a second of slack for the stamp's whole seconds
    if not t0 - 1 <= at <= t1 + 1:
        return "drained at %s, outside the batch (%s to %s): %s" % (
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at)),
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t0)),
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t1)), s.get("reason") or "no reason")
    return None


def _restore(art, scheduler, nodes, params, interval):
    resume = [n for n in nodes if n in set(params["resume"])]
    resumed = []
    for s in scheduler.read(resume, time.time()):
        node = s["node"]
        why = _not_ours(s, params["drained_between"]) if s["phase"] in OUT_OF_SERVICE else None
        if why:
            art.add("resumed", 0, "bool", node=node, was=s["phase"], reason=s.get("reason"))
            art.facts["kept_%s" % node] = why
        elif s["phase"] in OUT_OF_SERVICE and s["phase"] != "missing":
            res = scheduler.resume(node)
            ok = res is None or res.rc == 0
            art.add("resumed", 1 if ok else 0, "bool", node=node, was=s["phase"], reason=s.get("reason"))
            if ok:
                resumed.append(node)
            else:
                art.facts["resume_error_%s" % node] = _cmd_text(res)
        else:
            art.add("resumed", 0, "bool", node=node, was=s["phase"], reason=s.get("reason"))
    # Back as it was means available again (a node that does not come back is left to the report, not retried).
    available, last = _wait(scheduler, resumed, lambda s: s["phase"] == "available",
                            _timeout(params, 30.0), interval)
    for node in resumed:
        art.add("available_after_restore", 1 if node in available else 0, "bool", node=node,
                phase=(available.get(node) or last.get(node) or {}).get("phase"))


def run(art, params, out_dir):
    action = params["action"]
    if action is None:
        raise ValueError("params.action is required: %s" % ", ".join(ACTIONS))
    nodes = params["nodes"]
    interval = params["interval"]
    scheduler = _scheduler(params, art)
    if action == "state":
        if scheduler.name != "none" or params["options"].get("detect_command"):
            _state(art, scheduler, nodes)
        return
    if not nodes:
        art.skip("no nodes for %s" % action)
        return
    if scheduler.name == "none":
        art.skip("no scheduler: nothing to %s" % action)
        return
    if action == "drain":
        _drain(art, scheduler, nodes, params, interval)
    elif action == "return":
        _return(art, scheduler, nodes, params, interval, out_dir)
    elif action == "job":
        for s in scheduler.read(nodes, time.time()):
            if s["phase"] == "available":
                _job(art, scheduler, s["node"], params)
            else:
                art.facts["job_skipped_%s" % s["node"]] = "node is %s" % s["phase"]
        if params["joined_from"]:
            _job_joined(art, scheduler, nodes, params, out_dir)
    else:
        _restore(art, scheduler, nodes, params, interval)
