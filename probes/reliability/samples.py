"""Scheduler state samples of the destructive phase, as the watcher keeps them (node side, mechanics only).

Samples are what probes/common/sched.py readers return (t in seconds since the epoch, phase, state, reason, ...).
A watcher keeps only the samples where something changed (``Compactor``), plus the last one, so a long watch is a
short list. Samples whose phase is ``unknown`` (the scheduler could not be read that time) say nothing about the
node: they neither start nor end a stage.

The scheduler's other nodes (marked ``"other": true``) are kept shorter still: their first sample (the baseline)
and then only a change of phase or pool, with the fields of OTHER_KEYS, since all they are read for is a hot spare
coming into service and a cluster has many of them. ``spares`` is the one rule of which joined node is whose spare,
for the watcher's stop rule, the fresh job on the spares (sched_action) and the controller's judgement alike.

Every sample carries the node's ``pool`` where the scheduler tells it (Slurm: its partitions; Kubernetes: its GPU
product label, else its allocatable GPUs; probes/common/sched.py): a spare must come from the faulted node's pool.

``watch_resolved`` is the watcher's stop rule (is there anything more to see?), not a judgement: the timelines and
what the provider did are computed on the controller from the recorded samples
(reports/phases/reliability/timeline.py, which reads them with ``known`` and ``intervals`` too).
"""

import json

from probes.common.sched import NOTICED, OUT_OF_SERVICE
from probes.common.slurm import split_state

CHANGE_KEYS = ("phase", "state", "reason", "slurmd_start", "boot_time", "boot_id")
# What tells that the scheduler heard from a new boot of the node: Slurm's SlurmdStartTime and BootTime (slurmd
# sends both when it registers), Kubernetes' nodeInfo.bootID (the kubelet posts it). scontrol prints "None" for a
# time it does not have (BootTime of a node not responding): no value, never a change.
BOOT_KEYS = ("slurmd_start", "boot_time", "boot_id")
_NO_VALUE = (None, "", "None", "none", "Unknown", "(null)", "N/A", "n/a")
# What is kept of the other nodes' samples, and what a change of theirs is. A pool change is one: a new GPU node
# becomes Ready before its GPU labels and resources appear, and its pool must be on record once they do.
OTHER_KEYS = ("t", "node", "phase", "state", "reason", "pool", "other")
OTHER_CHANGE_KEYS = ("phase", "pool")


class Compactor:
    """Keeps the samples where a node's state changed; ``last`` holds the latest sample of every node."""

    def __init__(self, keys=CHANGE_KEYS):
        self.change_keys = tuple(keys)
        self.keys = {}
        self.last = {}

    def add(self, sample):
        """True when the sample is a change worth keeping."""
        node = sample["node"]
        key = tuple(sample.get(k) for k in self.change_keys)
        self.last[node] = sample
        if self.keys.get(node) == key:
            return False
        self.keys[node] = key
        return True


def known(samples):
    return sorted((s for s in samples if s.get("phase") not in (None, "unknown")), key=lambda s: s["t"])


def boot_marks(sample):
    """{key: value} of the BOOT_KEYS the sample (or a dict of such marks) knows."""
    return {k: (sample or {}).get(k) for k in BOOT_KEYS if (sample or {}).get(k) not in _NO_VALUE}


def new_boot(before, sample):
    """The first of BOOT_KEYS that both `before` (a sample, or its boot_marks, from before the reboot) and `sample`
    know and that differs between them, or None: evidence that the node booted (or its slurmd started) again since."""
    old, now = boot_marks(before), boot_marks(sample)
    return next((k for k in BOOT_KEYS if k in old and k in now and old[k] != now[k]), None)


def answering(sample):
    """The scheduler hears from the node now. Slurm: listed, without NOT_RESPONDING, whatever else its state says: a
    node that rebooted without `scontrol reboot` registers as DOWN+DRAIN under ReturnToService 0 or 1 (slurmctld
    node_mgr.c validate_node_specs, "Node unexpectedly rebooted", keeping DRAIN and its reason) and answers all the
    same. Kubernetes and the rest: listed and not down (NotReady)."""
    if sample.get("phase") in (None, "unknown", "missing"):
        return False
    if "slurmd_start" in sample or "boot_time" in sample:  # a Slurm sample (probes/common/slurm.py sample)
        return "NOT_RESPONDING" not in split_state(sample.get("state"))[1]
    return sample["phase"] != "down"


def registered(before, sample):
    """The node is back in the scheduler after a reboot: it answers (``answering``) with a new boot (``new_boot``
    against `before`). A phase alone cannot tell: the drained node's state from before the reboot may still be shown
    when the node is already back up (slurmctld pings every SlurmdTimeout/3; a cordoned Kubernetes node stays
    Ready,SchedulingDisabled for node-monitor-grace-period after its kubelet stopped)."""
    return new_boot(before, sample) is not None and answering(sample)


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


def watch_resolved(samples, t_start, now, detect_timeout, remediation_timeout, settle_s):
    """Is there nothing more to see for this node? Not detected (sched.NOTICED) within detect_timeout; or back in
    service for settle_s; or remediation_timeout since detection (whatever was done about it by then). A node that
    was not available when the watch began is resolved at once (nothing of ours to watch there)."""
    samples = known(samples)
    if not samples:
        return now - t_start >= detect_timeout
    if samples[0]["phase"] != "available":
        return True
    ivs = intervals(samples, end=now)
    outs = [iv for iv in ivs if iv[0] in NOTICED]
    if not outs:
        return now - t_start >= detect_timeout
    last = ivs[-1]
    if last[0] == "available" and last[1] > outs[0][1] and now - last[1] >= settle_s:
        return True
    return now - outs[0][1] >= remediation_timeout


def joined(samples, t_from):
    """[(t, node)] in time order: the nodes of samples (the other nodes') that were not available just before t_from
    (out of service, or not listed yet) and are available at their last known sample; t is when that last available
    stretch began, at or after t_from. A node available before t_from was in service already: whatever it did later
    (idle to allocated, say) brought no capacity back. One first listed, or back, in the very reading at t_from
    counts: that reading cannot tell which came first. Only the watcher's samples can say "not listed yet": its
    first reading lists every node (sched.Scheduler.read with others), so a node first seen later joined later."""
    by_node = {}
    for s in known(samples):
        by_node.setdefault(s["node"], []).append(s)
    out = []
    for node, mine in by_node.items():
        before = [s for s in mine if s["t"] < t_from]
        if before and before[-1]["phase"] == "available":
            continue
        last = intervals(mine)[-1]
        if last[0] == "available" and last[1] >= t_from:
            out.append((last[1], node))
    return sorted(out)


def pool(samples, last=False):
    """The pool of a node's samples (its first one that tells, or with last its latest), or None when none does."""
    told = [s.get("pool") for s in known(samples) if s.get("pool") is not None]
    return (told[-1] if last else told[0]) if told else None


def kept_out(samples):
    """[(t first out of service, node)] in that order: the watched nodes of samples (not "other") that were
    available at their first known sample (the others are not ours) and are out of service at their last."""
    mine = {}
    for s in known(s for s in samples if not s.get("other")):
        mine.setdefault(s["node"], []).append(s)
    out = []
    for node, ss in mine.items():
        if ss[0]["phase"] == "available" and ss[-1]["phase"] in OUT_OF_SERVICE:
            out.append((next(s["t"] for s in ss if s["phase"] in OUT_OF_SERVICE), node))
    return sorted(out)


def spares(samples):
    """{node: (spare, t available)}: the hot spare that came into service in the place of each watched node kept out
    (``kept_out``), from everything one watcher recorded so far. The candidates are computed once, from one origin
    (the first of those nodes to go out): other nodes that ``joined`` since. Then the nodes, in the order they went
    out, each take the earliest candidate not taken yet that came into service at or after their own first sample
    out of service (a node that joined before the fault replaced nothing) and that is of their pool when both pools
    are known (a node resumed in another partition, or a CPU node becoming Ready, is no spare). The watcher's stop
    rule, the fresh job on the spares (sched_action joined_from) and the controller (timeline.spare_for) all read
    this, so the spare judged is the one the watch waited for and the job ran on."""
    out_nodes = kept_out(samples)
    if not out_nodes:
        return {}
    ours = {node for _, node in out_nodes}
    others = [s for s in samples if s.get("other") and s["node"] not in ours]
    candidates = joined(others, out_nodes[0][0])
    by_node = {}
    for s in others:
        by_node.setdefault(s["node"], []).append(s)
    taken, out = set(), {}
    for t_out, node in out_nodes:
        mine = pool([s for s in samples if s["node"] == node and not s.get("other")])
        for t, spare in candidates:
            theirs = pool(by_node[spare], last=True)
            if spare in taken or t < t_out or (mine is not None and theirs is not None and theirs != mine):
                continue
            taken.add(spare)
            out[node] = (spare, t)
            break
    return out


def watch_replaced(history, others, nodes, now, settle_s):
    """The nodes of ours that are out of service now with a spare of their own (``spares``) that has stayed
    available for settle_s."""
    recorded = [s for n in nodes for s in history.get(n, [])] + list(others)
    return {node for node, (_, t) in spares(recorded).items() if node in nodes and now - t >= settle_s}


def watch_ended(history, others, nodes, t_start, now, detect_timeout, remediation_timeout, settle_s):
    """The watcher's stop rule under stop_when resolved: every node is resolved (``watch_resolved``) or out of
    service with a settled spare of its own (``watch_replaced``). Node by node: one node replaced says nothing about
    another of the batch not detected yet, whose fallback injection waits on this watch (sched_watch mode seen)."""
    replaced = watch_replaced(history, others, nodes, now, settle_s)
    return all(n in replaced or watch_resolved(history.get(n, []), t_start, now, detect_timeout,
                                               remediation_timeout, settle_s) for n in nodes)


def read_samples(path):
    """The samples of a watcher's .jsonl ([] when it is not there); a line torn by a kill is skipped, the rest
    still counts."""
    samples = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if line:
                    try:
                        samples.append(json.loads(line))
                    except ValueError:
                        continue
    except OSError:
        pass
    return samples
