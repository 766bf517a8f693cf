"""leftovers: stop what an earlier run of the destructive phase left running on this node (playbooks/recover.yml).

A batch of the reboot or fault-injection role leaves detached processes behind on purpose while it watches (the
scheduler watcher on the observer, the DCGM injection hold on an injected node: probes/reliability/detached.py);
the batch's last steps stop them. When the controller died before those steps, they run on until their own
deadline: the watcher up to its max_s, and the DCGM hold re-injects its XID every second for up to the detection
and remediation windows together (70 minutes by default), so a node resumed meanwhile is drained again by the
provider's health check.

Both carry a marker on their command line and their run's working directory (``clustermax-assess-<run id>``) in
their settings, so this probe stops only the processes of the run it is given: SIGTERM first (the hold sets the
DCGM field back to 0 as it leaves, the watcher writes its end), SIGKILL after a grace period.
"""

import os
import signal
import time

from probes.common import procs
from probes.params import Param, Params

# The markers detached.start puts on the command lines of the phase's helpers, by kind.
MARKERS = {"watcher": b"clustermax-assess-watch=", "dcgm_hold": b"clustermax-assess-dcgm-hold"}
GRACE_S = 15.0
PARAMS = Params(
    run_id=Param(str, "", "the run whose processes are stopped (required)"),
    grace_s=Param(float, GRACE_S, "seconds between SIGTERM and SIGKILL"),
)


def find(run_id):
    """[(pid, kind)] of the detached helpers of run_id on this node (never this process).

    A helper's own fork that has not yet exec'd its program (the watcher runs sinfo/scontrol every poll) shows the
    helper's command line for a moment: it is left out by its parent, since a helper's parent is never a helper (each
    starts in a session of its own, from a probe run)."""
    workdir = ("clustermax-assess-%s" % run_id).encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        cmd = procs.cmdline(int(name))
        if workdir not in cmd:
            continue
        kind = next((k for k, marker in MARKERS.items() if marker in cmd), None)
        if kind:
            found[int(name)] = kind
    return sorted((pid, kind) for pid, kind in found.items() if procs.parent(pid) not in found)


def _signal(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def run(art, params, out_dir):
    run_id = params["run_id"].strip()
    if not run_id:
        raise ValueError("params.run_id is required")
    found = find(run_id)
    art.facts["run_id"] = run_id
    for pid, _kind in found:
        _signal(pid, signal.SIGTERM)
    deadline = time.time() + params["grace_s"]
    while time.time() < deadline and any(procs.alive(pid) for pid, _ in found):
        time.sleep(0.2)
    killed = [pid for pid, _ in found if procs.alive(pid)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    for kind in MARKERS:
        pids = [pid for pid, k in found if k == kind]
        art.add("stopped", len(pids), "count", kind=kind)
        if pids:
            art.facts["%s_pids" % kind] = " ".join(str(p) for p in pids)
    art.add("killed", len(killed), "count")
