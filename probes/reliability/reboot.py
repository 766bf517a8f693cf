"""reboot: what the controller did to one node in a planned reboot, as it saw it (raw observations only).

The role (roles/reboot, with the batch steps shared with fault_injection in roles/reliability) drains the node
through the scheduler, reboots it with ansible.builtin.reboot, resumes it and runs a fresh job on it; an observer
node records the scheduler's view all along (sched_watch, sched_action) and the node its boot id before and after
(boot_id). This probe adds the one thing only the controller saw, the reboot itself: when it was issued, when the
module saw the node back with a new boot id (by the controller's clock), the module's own elapsed time and its
error, plus where the batch's other observations lie (the observer host and the batch's artifact variant).

The stage timings (drain, reboot, seen down, registered, resume, fresh job) and whether the node came back are
computed on the controller from all of these artifacts (reports/phases/reliability/timeline.py).

params: skip (a reason: nothing was done to this node), node (its name in the scheduler), scheduler, batch,
observer (the inventory host that drained and watched; empty without a scheduler), stage (the variant of the
batch's observer artifacts, e.g. reboot-b1), reboot {started, returned, elapsed, error}.
"""


def record_batch(art, params):
    """The facts every per-node artifact of the destructive phase carries: which node, batch and observer."""
    art.facts.update(node=params.get("node") or art.host, scheduler=params.get("scheduler"),
                     batch=str(params.get("batch")), observer=params.get("observer") or "",
                     stage=params.get("stage") or "")


def run(art, params, out_dir):
    if params.get("skip"):
        art.skip(params["skip"])
        return
    record_batch(art, params)
    reboot = params.get("reboot") or {}
    if reboot.get("error"):
        art.facts["reboot_error"] = str(reboot["error"])
    if reboot.get("started") is not None:
        art.add("event_at", round(float(reboot["started"]), 3), "s_epoch", event="reboot_started")
    # Returned is when the module stopped waiting; it means "back with a new boot id" only when it did not fail.
    if reboot.get("returned") is not None and not reboot.get("error"):
        art.add("event_at", round(float(reboot["returned"]), 3), "s_epoch", event="reboot_returned")
    if reboot.get("elapsed") is not None:
        art.add("reboot_module_elapsed_s", float(reboot["elapsed"]), "s")
