"""One face for the schedulers the destructive phase works through: Slurm, Kubernetes, or none (standalone nodes,
optionally watched through a user-given command).

Every reader returns samples ``{"t", "node", "phase", "state", "reason", ...}`` with phase one of PHASES:

    available  the scheduler would place work on the node
    draining   taken out of service, work still running (Slurm DRAIN with jobs)
    drained    taken out of service, empty   (Slurm DRAIN idle; Kubernetes cordoned, or a new NoSchedule taint)
    down       not usable (DOWN, NOT_RESPONDING, NotReady)
    unhealthy  a health signal says no, the node is still schedulable as far as the scheduler goes
    missing    the scheduler no longer lists the node (replaced?)
    unknown    the state could not be read this time

Read with ``others``, Slurm and Kubernetes also give a sample of every other node they list, marked
``"other": true`` (how the fault-injection watcher sees a hot spare join; probes/reliability/samples.py). Their
samples carry the node's ``pool``, what a hot spare must share with the node it replaces: Slurm, the node's
partitions (sorted, comma-joined); Kubernetes, its GPU product label, else its allocatable GPU resource and count,
else "no-gpu" (probes/common/k8s.py pool). None where it cannot be told (no scheduler, a node not listed): then
any pool goes.
"""

from probes.common import k8s as sched_k8s
from probes.common import slurm as sched_slurm
from probes.common.command import run_cmd

PHASES = ("available", "draining", "drained", "down", "unhealthy", "missing", "unknown")
# Work is kept off the node (the scheduler took it out, or lost it). A node only flagged unhealthy (a Kubernetes
# node condition) is still schedulable: its fault was noticed, but nothing keeps work off it.
OUT_OF_SERVICE = frozenset(("draining", "drained", "down", "missing"))
# The fault was noticed: a health signal says no, or the node is out of service. Without a scheduler, the detect
# command's "unhealthy" is all there is, and stands for out of service too (held_out).
NOTICED = OUT_OF_SERVICE | {"unhealthy"}
DRAINED = frozenset(("draining", "drained"))
SCHEDULERS = ("slurm", "kubernetes", "none")


def held_out(scheduler):
    """The phases in which work is kept off a node under this scheduler (see NOTICED)."""
    return NOTICED if scheduler == "none" else OUT_OF_SERVICE


class Scheduler:
    """options: kubectl (argv prefix), detect_command (argv, "{node}" replaced), image (Kubernetes job image),
    gpus (GPUs the fresh job asks for), gpu_resource (their resource name: nvidia.com/gpu or amd.com/gpu),
    baseline_taints ({node: [taint keys]}, Kubernetes)."""

    def __init__(self, name, options=None):
        if name not in SCHEDULERS:
            raise ValueError("scheduler %r: want one of %s" % (name, ", ".join(SCHEDULERS)))
        self.name = name
        self.options = dict(options or {})
        self.kubectl = list(self.options.get("kubectl") or ["kubectl"])

    def read(self, names, t, others=False):
        """One sample per named node; with others (Slurm, Kubernetes) also one per other node the scheduler lists,
        marked "other" (a hot spare joining is one of them). Without a scheduler there are no others to list."""
        if self.name == "slurm":
            return sched_slurm.read(names, t, others=others)
        if self.name == "kubernetes":
            return sched_k8s.read(names, t, kubectl=self.kubectl, baseline_taints=self.options.get("baseline_taints"),
                                  others=others)
        return [self._read_command(n, t) for n in names]

    def _read_command(self, name, t):
        command = self.options.get("detect_command")
        if not command:
            return {"t": t, "node": name, "phase": "unknown", "state": None,
                    "reason": "no scheduler and no detect command"}
        res = run_cmd([str(a).replace("{node}", name) for a in command], timeout=30)
        if res.rc is None:
            return {"t": t, "node": name, "phase": "unknown", "state": None,
                    "reason": "detect command: %s" % ("timed out" if res.timed_out else res.stderr.strip())}
        text = (res.stdout + res.stderr).strip().splitlines()
        if res.rc == 0:
            return {"t": t, "node": name, "phase": "available", "state": "healthy", "reason": None}
        return {"t": t, "node": name, "phase": "unhealthy", "state": "unhealthy (rc %d)" % res.rc,
                "reason": text[-1] if text else None}

    def drain(self, name, reason, timeout_s=600):
        if self.name == "slurm":
            return sched_slurm.drain(name, reason)
        if self.name == "kubernetes":
            return sched_k8s.drain(name, reason, kubectl=self.kubectl, timeout_s=timeout_s)
        return None

    def resume(self, name):
        if self.name == "slurm":
            return sched_slurm.resume(name)
        if self.name == "kubernetes":
            return sched_k8s.resume(name, kubectl=self.kubectl)
        return None

    def job(self, name, command, wait_s=60):
        if self.name == "slurm":
            return sched_slurm.job(name, command, wait_s=wait_s, timeout=wait_s + 60)
        if self.name == "kubernetes":
            return sched_k8s.job(name, command, self.options.get("image") or "busybox",
                                 gpus=self.options.get("gpus", 0), kubectl=self.kubectl, wait_s=wait_s,
                                 gpu_resource=self.options.get("gpu_resource") or "nvidia.com/gpu")
        return None


def detect(options=None):
    """(scheduler name, {tried: why not}) — Slurm when scontrol answers here, else Kubernetes when kubectl does,
    else none."""
    options = options or {}
    why = {}
    reason = sched_slurm.available()
    if reason is None:
        return "slurm", why
    why["slurm"] = reason
    reason = sched_k8s.available(kubectl=options.get("kubectl") or ["kubectl"])
    if reason is None:
        return "kubernetes", why
    why["kubernetes"] = reason
    return "none", why
