"""Scheduler state samples of the destructive phase, as the watcher keeps them (node side, mechanics only).

Samples are what probes/common/sched.py readers return (t in seconds since the epoch, phase, state, reason, ...).
A watcher keeps only the samples where something changed (``Compactor``), plus the last one, so a long watch is a
short list. Samples whose phase is ``unknown`` (the scheduler could not be read that time) say nothing about the
node: they neither start nor end a stage.

The scheduler's other nodes (marked ``"other": true``) are kept shorter still: their first sample (the baseline)
and then only a change of phase, with the fields of OTHER_KEYS, since all they are read for is a hot spare coming
into service (``joined``) and a cluster has many of them.

``watch_resolved`` is the watcher's stop rule (is there anything more to see?), not a judgement: the timelines and
what the provider did are computed on the controller from the recorded samples
(reports/phases/reliability/timeline.py, which reads them with ``known`` and ``intervals`` too).
"""

import json

from probes.common.sched import OUT_OF_SERVICE

CHANGE_KEYS = ("phase", "state", "reason", "slurmd_start", "boot_id")
# What is kept of the other nodes' samples, and what a change of theirs is.
OTHER_KEYS = ("t", "node", "phase", "state", "reason", "other")
OTHER_CHANGE_KEYS = ("phase",)


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
    """Is there nothing more to see for this node? Not detected within detect_timeout; or back in service for
    settle_s; or out of service for remediation_timeout since detection. A node that was not available when the
    watch began is resolved at once (nothing of ours to watch there)."""
    samples = known(samples)
    if not samples:
        return now - t_start >= detect_timeout
    if samples[0]["phase"] != "available":
        return True
    ivs = intervals(samples, end=now)
    outs = [iv for iv in ivs if iv[0] in OUT_OF_SERVICE]
    if not outs:
        return now - t_start >= detect_timeout
    last = ivs[-1]
    if last[0] == "available" and last[1] > outs[0][1] and now - last[1] >= settle_s:
        return True
    return now - outs[0][1] >= remediation_timeout


def joined(samples, t_from):
    """[(t, node)] in time order: the nodes of samples (the other nodes') that were not available at t_from (out of
    service, or not listed yet) and are available at their last known sample; t is when that last available stretch
    began, after t_from. A node available at t_from was in service already: whatever it did later (idle to
    allocated, say) brought no capacity back. Only the watcher's samples can say "not listed yet": its first reading
    lists every node (sched.Scheduler.read with others), so a node first seen later joined the scheduler later."""
    by_node = {}
    for s in known(samples):
        by_node.setdefault(s["node"], []).append(s)
    out = []
    for node, mine in by_node.items():
        before = [s for s in mine if s["t"] <= t_from]
        if before and before[-1]["phase"] == "available":
            continue
        last = intervals(mine)[-1]
        if last[0] == "available" and last[1] > t_from:
            out.append((last[1], node))
    return sorted(out)


def watch_replaced(history, others, nodes, t_start, now, settle_s):
    """Has every one of our nodes that is out of service now a spare in its place? One other node each that joined
    since the watch began (``joined``) and has stayed available for settle_s. Only nodes that were available when the
    watch began count (the others are not ours to watch); with none out of service there is nothing replaced."""
    out = 0
    for node in nodes:
        mine = known(history.get(node, []))
        if mine and mine[0]["phase"] == "available" and mine[-1]["phase"] in OUT_OF_SERVICE:
            out += 1
    if not out:
        return False
    settled = [n for t, n in joined(others, t_start) if now - t >= settle_s]
    return len(settled) >= out


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
