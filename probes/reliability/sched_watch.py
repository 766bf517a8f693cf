"""sched_watch: record what the scheduler says about some nodes while something destructive happens to them.

Runs on an observer node (one that is not being rebooted or injected), in two calls with the same ``tag``:

* ``mode: start`` reads the nodes once (the baseline), then leaves a detached watcher process behind that reads
  them every ``interval`` seconds and appends every change to ``<tag>.jsonl`` beside the artifacts;
* ``mode: stop`` waits up to ``wait_s`` for the watcher to finish by itself (``stop_when: resolved``: every node
  was detected and came back for ``settle_s``, or stayed out ``remediation_timeout`` after detection, or was not
  detected within ``detect_timeout``), then stops it, by a stop file and, failing that, by its PID. The artifact
  carries the changes as a raw file; the per-node timelines are computed from it on the controller
  (reports/phases/reliability/timeline.py).

Between the two, ``mode: seen`` waits up to ``wait_s`` until the running watcher has seen given nodes out of
service (the fault-injection role's fallback to its next method).

The watcher never runs past ``max_s`` whatever happens to the play, and ``stop`` is safe to call again (clean-up):
it only collects what is there.

With ``others`` (the default; Slurm and Kubernetes) a reading every ``others_interval`` seconds is of every node the
scheduler lists, so that a hot spare coming into service in place of a faulted node is on record (seed, HGX: a
failed node is replaced by a hot spare); the readings between are of the watched nodes only, since listing every
node of a large cluster every second loads its controller (slurmctld) for nothing. A spare's time is therefore
known to within ``others_interval``. The other nodes are kept short (``Recorder``): each one's first sample, then
only a change of phase or pool, marked ``"other": true``. Under ``stop_when: resolved`` the watch ends once every
node is resolved or out of service with a spare of its own that has been available for ``settle_s``
(samples.watch_ended), so that the fresh job on the spare comes while it still tells how fast the provider replaced
the node, and never while another node of the batch is still to be detected.
"""

import json
import os
import signal
import time

from probes.common import procs, sched
from probes.params import Param, Params
from probes.reliability import detached
from probes.reliability import samples as watch_samples
from probes.reliability.samples import read_samples

STOP_GRACE_S = 15.0
PARAMS = Params(
    tag=Param(str, "", "names the watcher, the same in both calls (required)"),
    mode=Param(str, "start", "start the watcher, stop it and collect what it saw, or wait until it saw nodes go out",
               choices=("start", "stop", "seen")),
    scheduler=Param(str, "none", "start: slurm, kubernetes or none"),
    options=Param(dict, {}, "start: the scheduler's options (probes/common/sched.py)"),
    nodes=Param(list, [], "start: the nodes to watch, by their names in the scheduler; seen: the nodes to look for"),
    interval=Param(float, 1.0, "start: seconds between two reads of the scheduler"),
    max_s=Param(float, 3600, "start: the watcher never runs longer"),
    stop_when=Param(str, "stop", "start: resolved: the watcher ends once every node is detected and back; stop: "
                                 "only when told to"),
    detect_timeout=Param(float, 600, "start: seconds until the scheduler must notice"),
    remediation_timeout=Param(float, 3600, "start: seconds until the node must be back"),
    settle_s=Param(float, 5, "start: seconds a state must last to count"),
    wait_s=Param(float, 0, "stop: seconds to wait for the watcher to end by itself; seen: for the nodes to go out"),
    others=Param(bool, True, "start: also record the scheduler's other nodes (their phase changes only), so that a "
                             "hot spare joining is seen; no effect without a scheduler"),
    others_interval=Param(float, 10.0, "start: seconds between two reads of the other nodes (the watched ones are "
                                       "read every interval)"),
)


def _paths(out_dir, tag):
    base = os.path.join(out_dir, tag)
    return {k: base + ext for k, ext in (("jsonl", ".jsonl"), ("pid", ".pid"), ("stop", ".stop"),
                                         ("done", ".done"), ("log", ".log"))}


def _append(path, samples):
    with open(path, "a") as fh:
        for s in samples:
            fh.write(json.dumps(s, sort_keys=True) + "\n")


class Recorder:
    """What the watcher keeps of its readings: of the watched nodes every change (samples.Compactor), of the other
    nodes only their first sample and each change of phase, with the fields of samples.OTHER_KEYS. An other node
    that a readable reading no longer lists gets a ``missing`` sample (a spare can leave again). ``history`` and
    ``others`` hold what was kept, for the stop rules."""

    def __init__(self, nodes):
        self.nodes = list(nodes)
        self.named = watch_samples.Compactor()
        self.other = watch_samples.Compactor(watch_samples.OTHER_CHANGE_KEYS)
        self.history = {n: [] for n in self.nodes}
        self.others = []

    def add(self, samples, others=True):
        """The samples of one reading -> those worth keeping, in the form they are written. others: the reading was
        meant to list the other nodes (one of the watched nodes only lists none, and loses none)."""
        kept = []
        listed = set()
        for s in samples:
            if s.get("other"):
                s = {k: s.get(k) for k in watch_samples.OTHER_KEYS}
                listed.add(s["node"])
                if self.other.add(s):
                    self.others.append(s)
                    kept.append(s)
            elif self.named.add(s):
                self.history.setdefault(s["node"], []).append(s)
                kept.append(s)
        # Only a reading the scheduler answered tells that a node is gone (a failed one lists no other node, and
        # its watched nodes are unknown); the baseline read back by the detached watcher has no others to lose.
        if others and samples and self.other.last and (listed or any(s["phase"] != "unknown" for s in samples)):
            t = max(s["t"] for s in samples)
            for node in sorted(set(self.other.last) - listed):
                gone = {"t": t, "node": node, "phase": "missing", "state": None, "reason": None, "pool": None,
                        "other": True}
                if self.other.add(gone):
                    self.others.append(gone)
                    kept.append(gone)
        return kept

    def final(self):
        """The last reading of every watched node, so the timelines know until when the node was watched (the
        other nodes' last change is on record already)."""
        return [dict(s, final=True) for s in self.named.last.values()]


def loop_main(cfg):
    """The detached watcher (not a probe run): polls until stopped, resolved or past its deadline."""
    paths = _paths(cfg["out_dir"], cfg["tag"])
    stop = {"by": None}

    def on_term(signum, frame):
        stop["by"] = "signal"

    signal.signal(signal.SIGTERM, on_term)
    scheduler = sched.Scheduler(cfg["scheduler"], cfg.get("options"))
    nodes = list(cfg["nodes"])
    others = bool(cfg.get("others"))
    recorder = Recorder(nodes)
    recorder.add(read_samples(paths["jsonl"]))  # the baseline written by start
    t_start = float(cfg["t_start"])
    deadline = t_start + float(cfg["max_s"])
    polls = errors = 0
    interval = float(cfg.get("interval", 1.0))
    others_interval = float(cfg.get("others_interval", 10.0))
    settle_s = float(cfg.get("settle_s", 5))
    next_others = t_start + others_interval  # start's reading was the first of every node
    with_others = False
    while stop["by"] is None:
        now = time.time()
        with_others = others and now >= next_others
        samples = scheduler.read(nodes, now, others=with_others)
        # A reading is what the scheduler said by the time its answer came back: stamped then, not when it was
        # asked, so a change that lands while a read is under way is never dated before it happened (an injected
        # fault would otherwise be "detected" before its injection).
        answered = time.time()
        for s in samples:
            s["t"] = answered
        polls += 1
        errors += sum(1 for s in samples if s["phase"] == "unknown")
        if with_others and any(s["phase"] != "unknown" for s in samples):
            next_others = now + others_interval  # an unreadable scheduler is asked again at the next poll
        kept = recorder.add(samples, others=with_others)
        if kept:
            _append(paths["jsonl"], kept)
        if os.path.exists(paths["stop"]):
            stop["by"] = "stop"
        elif now >= deadline:
            stop["by"] = "deadline"
        elif cfg.get("stop_when") == "resolved" and watch_samples.watch_ended(
                recorder.history, recorder.others, nodes, t_start, now, float(cfg["detect_timeout"]),
                float(cfg["remediation_timeout"]), settle_s):
            stop["by"] = "resolved"
        if stop["by"] is None:
            time.sleep(max(0.0, interval - (time.time() - now)))
    if others and not with_others and stop["by"] != "signal":
        # The other nodes as they are at the end as well (they are read every others_interval only): a spare that
        # came into service within the last interval is on record for its fresh job and for the controller.
        samples = scheduler.read(nodes, time.time(), others=True)
        answered = time.time()
        for s in samples:
            s["t"] = answered
        kept = recorder.add(samples, others=True)
        if kept:
            _append(paths["jsonl"], kept)
    _append(paths["jsonl"], recorder.final())
    _write_done(paths["done"], {"ended_by": stop["by"], "polls": polls, "unreadable_polls": errors,
                                "t_start": t_start, "t_end": time.time()})


def _write_done(path, doc):
    """The watcher's last word, whole or not at all (written aside, then renamed): a stop that saw the file appear
    while it was still being written read it empty and reported the watcher's end as "unknown" (a clean-clone
    failure under load, 2026-12-05)."""
    temp = path + ".tmp"
    with open(temp, "w") as fh:
        json.dump(doc, fh)
    os.replace(temp, path)


def _read_done(path):
    """The watcher's last word, or None while there is none that reads (not there yet, or an older watcher's half
    written one)."""
    try:
        with open(path) as fh:
            done = json.load(fh)
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) else None


def _start(art, params, out_dir, paths):
    nodes = params["nodes"]
    if not nodes:
        art.skip("no nodes to watch")
        return
    options = params["options"]
    scheduler = sched.Scheduler(params["scheduler"], options)
    others = bool(params["others"]) and scheduler.name != "none"
    now = time.time()
    reading = scheduler.read(nodes, now, others=others)
    baseline = [s for s in reading if not s.get("other")]
    if all(s["phase"] == "unknown" for s in baseline):
        art.error("cannot read the scheduler (%s): %s" % (scheduler.name, baseline[0].get("reason")))
        return
    if scheduler.name == "kubernetes":
        options["baseline_taints"] = {s["node"]: s.get("taints") or [] for s in baseline}
    for path in (paths["jsonl"], paths["stop"], paths["done"], paths["done"] + ".tmp"):
        if os.path.exists(path):
            os.unlink(path)
    _append(paths["jsonl"], Recorder(nodes).add(reading))
    cfg = {"out_dir": out_dir, "tag": params["tag"], "scheduler": scheduler.name, "options": options,
           "nodes": nodes, "t_start": now, "interval": params["interval"], "max_s": params["max_s"],
           "stop_when": params["stop_when"], "detect_timeout": params["detect_timeout"],
           "remediation_timeout": params["remediation_timeout"], "settle_s": params["settle_s"], "others": others,
           "others_interval": params["others_interval"]}
    proc = detached.start("probes.reliability.sched_watch", "loop_main", cfg,
                          "clustermax-assess-watch=" + params["tag"], log_path=paths["log"], cwd=out_dir)
    with open(paths["pid"], "w") as fh:
        fh.write("%d\n" % proc.pid)
    art.facts.update(scheduler=scheduler.name, tag=params["tag"], watcher_pid=str(proc.pid))
    for s in baseline:
        art.add("available", 1 if s["phase"] == "available" else 0, "bool", node=s["node"], phase=s["phase"],
                state=s.get("state"), reason=s.get("reason"))
    if others:
        art.add("other_nodes", len(reading) - len(baseline), "count")


def _ours(pid, tag):
    return ("clustermax-assess-watch=" + tag).encode() in procs.cmdline(pid)


def _stop(art, params, out_dir, paths):
    tag = params["tag"]
    deadline = time.time() + params["wait_s"]
    while _read_done(paths["done"]) is None and time.time() < deadline and os.path.exists(paths["pid"]):
        time.sleep(0.2)
    ended_by = None
    if os.path.exists(paths["pid"]) and _read_done(paths["done"]) is None:
        open(paths["stop"], "w").close()
        grace = time.time() + STOP_GRACE_S
        while _read_done(paths["done"]) is None and time.time() < grace:
            time.sleep(0.1)
        if _read_done(paths["done"]) is None:
            with open(paths["pid"]) as fh:
                pid = int(fh.read().strip() or 0)
            for sig in (signal.SIGTERM, signal.SIGKILL):
                if pid and _ours(pid, tag):
                    os.kill(pid, sig)
                    time.sleep(2.0)
            ended_by = "killed"
    done = _read_done(paths["done"]) or {}
    for path in (paths["pid"], paths["stop"]):
        if os.path.exists(path):
            os.unlink(path)
    samples = read_samples(paths["jsonl"])
    if not samples:
        art.skip("no watcher ran under tag %s" % tag)
        return
    art.raw.append(os.path.basename(paths["jsonl"]))
    art.facts.update(tag=tag, ended_by=ended_by or done.get("ended_by") or "unknown")
    art.add("polls", done.get("polls", 0), "count")
    art.add("unreadable_polls", done.get("unreadable_polls", 0), "count")
    if done.get("t_end") and done.get("t_start"):
        art.add("watched_s", round(done["t_end"] - done["t_start"], 3), "s")
    for node in sorted({s["node"] for s in samples if not s.get("other")}):
        art.add("changes", sum(1 for s in samples if s["node"] == node and not s.get("final")), "count", node=node)
    # The other nodes in one number: a row per node of a large cluster would say nothing the raw file does not.
    if any(s.get("other") for s in samples):
        art.add("other_samples", sum(1 for s in samples if s.get("other")), "count")


def _seen(art, params, paths):
    """Wait (up to wait_s, or until the watcher ends) until the running watcher has seen the fault on each of ``nodes``
    (flagged unhealthy or out of service: sched.NOTICED); one `seen` row per node. The fault-injection role injects only
    into nodes in service when the watch began and falls back to its next method where a fault was not seen: a control
    decision of the run, made from what was recorded (the judgement of the detection stays the controller's, from the
    same samples). Any stretch noticed after the watch's first reading counts, so that the nodes' clocks never enter
    into it."""
    nodes = [str(n) for n in params["nodes"]]
    if not nodes:
        art.skip("no injected node to look for")
        return
    deadline = time.time() + params["wait_s"]
    while True:
        out = {s["node"] for s in watch_samples.known(read_samples(paths["jsonl"]))
               if s["node"] in nodes and not s.get("other") and s["phase"] in sched.NOTICED}
        if len(out) == len(nodes) or time.time() >= deadline or os.path.exists(paths["done"]):
            break
        time.sleep(0.5)
    art.facts["tag"] = params["tag"]
    for node in sorted(nodes):
        art.add("seen", 1 if node in out else 0, "bool", node=node)


def run(art, params, out_dir):
    if not params["tag"]:
        raise ValueError("params.tag is required")
    paths = _paths(out_dir, params["tag"])
    if params["mode"] == "start":
        _start(art, params, out_dir, paths)
    elif params["mode"] == "seen":
        _seen(art, params, paths)
    else:
        _stop(art, params, out_dir, paths)
