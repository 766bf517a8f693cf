"""reboot: what the controller did to one node in a planned reboot, as it saw it (raw observations only).

The role (roles/reboot, with the batch steps shared with fault_injection in roles/reliability) drains the node
through the scheduler, reboots it with ansible.builtin.reboot, resumes it and runs a fresh job on it; an observer
node records the scheduler's view all along (sched_watch, sched_action) and the node its boot id before and after
(boot_id). This probe adds the one thing only the controller saw, the reboot itself: when it was issued, when the
module saw the node back with a new boot id (by the controller's clock; the start also by the observer's, whose
clock the scheduler's times are on), the module's own elapsed time and its error, plus where the batch's other
observations lie (the observer host and the batch's artifact variant).

The stage timings (drain, reboot, seen down, registered, resume, fresh job) and whether the node came back are
computed on the controller from all of these artifacts (reports/phases/reliability/timeline.py).

A `skip` reason means nothing was done to this node.
"""

from probes.common.clocks import CLOCK_LINE  # the observer's clock reading (roles/reboot/tasks/batch.yml)
from probes.params import Param, Params

# Which node, batch and observer a per-node artifact of the destructive phase belongs to (reboot, fault_injection).
BATCH_PARAMS = {
    "node": Param(str, "", "the node's name in the scheduler (default: the inventory host)"),
    "scheduler": Param(str, None, "the scheduler that took the node out and back"),
    "batch": Param(str, None, "the batch's number"),
    "observer": Param(str, "", "the inventory host that drained and watched (empty without a scheduler)"),
    "stage": Param(str, "", "the variant of the batch's observer artifacts, e.g. reboot-b1"),
}
PARAMS = Params(reboot=Param(dict, {}, "what the controller saw: {started, returned, elapsed, error}, and "
                                       "started_observer: the output holding the start by the observer's clock"),
                **BATCH_PARAMS)


def record_batch(art, params):
    """The facts every per-node artifact of the destructive phase carries: which node, batch and observer."""
    art.facts.update(node=params["node"] or art.host, scheduler=params["scheduler"], batch=str(params["batch"]),
                     observer=params["observer"], stage=params["stage"])


def run(art, params, out_dir):
    record_batch(art, params)
    reboot = params["reboot"]
    if reboot.get("error"):
        art.facts["reboot_error"] = str(reboot["error"])
    if reboot.get("started") is not None:
        art.add("event_at", round(float(reboot["started"]), 3), "s_epoch", event="reboot_started")
    observer = CLOCK_LINE.search(str(reboot.get("started_observer") or ""))
    if observer:
        art.add("event_at", round(float(observer.group(1)), 3), "s_epoch", event="reboot_started_observer")
    # Returned is when the module stopped waiting; it means "back with a new boot id" only when it did not fail.
    if reboot.get("returned") is not None and not reboot.get("error"):
        art.add("event_at", round(float(reboot["returned"]), 3), "s_epoch", event="reboot_returned")
    if reboot.get("elapsed") is not None:
        art.add("reboot_module_elapsed_s", float(reboot["elapsed"]), "s")
