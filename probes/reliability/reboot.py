"""reboot: the timings of one node's planned reboot, written on that node once it is back.

The role (roles/reboot) drains the node through the scheduler, reboots it with ansible.builtin.reboot, resumes it
and runs a fresh job on it; an observer node records the scheduler's view all along (sched_watch, sched_action).
This probe gets all of that as parameters, reads the node's boot id now (the proof that it really rebooted) and
turns events and scheduler samples into stage timings (probes/reliability/timeline.py). Every timing is a result; the
events themselves are kept as results too (unit s_epoch), for the report's timeline.

params: skip (a reason: nothing was done to this node), on_behalf (this runs on the observer for a node that did
not come back), node (its name in the scheduler), scheduler, batch,
boot_id_before, reboot {started, returned, elapsed, error}, actions (result lists of the observer's sched_action
artifacts), samples (the observer's sched_watch samples, any nodes), command_ran_at (a plain command ran on the node
after the reboot).
"""

from probes.common.readers import read_text
from probes.reliability import timeline
from probes.reliability.boot_id import BOOT_ID_PATH

# sched_action result metrics -> reboot_timeline event names
ACTION_EVENTS = {"drain_issued_at": "drain_issued", "drained_at": "drained", "registered_at": "registered",
                 "resume_issued_at": "resume_issued", "available_at": "available", "job_started_at": "job_started",
                 "job_ok_at": "job_ok"}
TIMINGS = ("drain_s", "reboot_s", "seen_down_s", "registered_s", "resume_s", "job_s", "return_to_service_s",
           "total_s")


def events_for(node, actions):
    """The first value of every known event for this node, from sched_action result lists."""
    events = {}
    for results in actions or []:
        for r in results or []:
            name = ACTION_EVENTS.get(r.get("metric"))
            if name and (r.get("labels") or {}).get("node") == node and name not in events:
                events[name] = float(r["value"])
    return events


def run(art, params, out_dir):
    if params.get("skip"):
        art.skip(params["skip"])
        return
    node = params.get("node") or art.host
    art.facts.update(node=node, scheduler=params.get("scheduler"), batch=str(params.get("batch")))
    before = params.get("boot_id_before")
    # Written from another node for a node that did not come back: its boot id cannot be read.
    now = None if params.get("on_behalf") else ((read_text(BOOT_ID_PATH) or "").strip() or None)
    art.facts.update(boot_id_before=before, boot_id_after=now)
    changed = bool(before and now and before != now)
    art.add("boot_id_changed", 1 if changed else 0, "bool")
    reboot = params.get("reboot") or {}
    if reboot.get("error"):
        art.facts["reboot_error"] = str(reboot["error"])
    events = events_for(node, params.get("actions"))
    if reboot.get("started") is not None:
        events["reboot_started"] = float(reboot["started"])
    if reboot.get("returned") is not None and not reboot.get("error"):
        events["reboot_returned"] = float(reboot["returned"])
    if params.get("command_ran_at") is not None and params.get("scheduler") == "none" and changed:
        # No scheduler: the node is back in service when a plain command runs on it again.
        events.setdefault("job_started", float(params["command_ran_at"]))
        events.setdefault("job_ok", float(params["command_ran_at"]))
    samples = [s for s in params.get("samples") or [] if s.get("node") == node]
    t_end = max([s["t"] for s in samples] or [0]) or None
    stages = timeline.reboot_timeline(samples, events, t_end)
    for name in TIMINGS:
        if stages.get(name) is not None:
            art.add(name, stages[name], "s")
    if reboot.get("elapsed") is not None:
        art.add("reboot_module_elapsed_s", float(reboot["elapsed"]), "s")
    if stages.get("flaps_after_return") is not None:
        art.add("flaps_after_return", stages["flaps_after_return"], "count")
    for name, value in sorted(stages["events"].items()):
        if value is not None:
            art.add("event_at", round(value, 3), "s_epoch", event=name)
    back = changed and not reboot.get("error") and (params.get("scheduler") == "none" or "job_ok" in events)
    art.add("returned", 1 if back else 0, "bool")
    if not changed and not reboot.get("error"):
        art.facts["reboot_error"] = "the boot id did not change: the node did not reboot"
