"""Long runs on the nodes (burn-in, fabric soak, storage soak) that outlive the SSH session that started them.

A soak probe is called in three modes with the same name and variant:

* ``start``: writes the run's configuration and leaves a detached runner process behind (its own session, so a
  dropped SSH connection does not touch it), then returns at once;
* ``poll``: touches the heartbeat file, waits up to ``wait_s`` for the run to end, and writes the artifact with
  everything measured so far (state ``running`` until the runner is done). The controller polls in a loop, so the
  controller always holds the timeline up to its last poll: an interrupted play still has a partial timeline;
* ``stop``: asks the runner to stop (stop file), waits up to ``grace_s``, kills whatever is left by the run's
  marker, and writes the final artifact. Safe to call again, and after the runner ended by itself.

The runner starts the monitor (probes/burnin/sampler.py) and the components the probe asked for together: GEMM workers,
collective workers (probes/burnin/workers.py), fio phases. It stops them at the deadline, on the stop file, on SIGTERM,
or when no poll touched the heartbeat for ``heartbeat_timeout`` seconds (the controller is gone: Ctrl-C, a crash),
and never runs past ``hard_deadline``. Every process carries the marker ``clustermax-assess-soak=<run>/<name>`` in
its command line, which is how ``stop`` (or anyone) finds and ends a run's processes.
"""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from probes.artifact import artifact_filename
from probes.burnin import summary as soak_summary
from probes.burnin.sampler import Monitor, append_jsonl
from probes.common import device
from probes.common.netif import interface_for
from probes.common.ports import port_param
from probes.common.procs import Children, kill_marked, marked_pids, package_root
from probes.common.rendezvous import StoreError
from probes.params import Param, Params

BOOT = "import sys; sys.path.insert(0, %r); from probes.burnin.workers import main; main()"
RUNNER = ("import sys; sys.path.insert(0, %r); from probes.burnin.runner import runner_main; "
          "runner_main(sys.argv[1])")
STREAMS = ("monitor", "kernel", "gemm", "coll", "fio")
# The params every soak probe takes: the mode, the run's timing and the monitor's.
RUNNER_PARAMS = {
    "mode": Param(str, "start", "start a detached run, poll it, or stop it", choices=("start", "poll", "stop")),
    "duration_s": Param(float, 60, "start: seconds the load runs"),
    "planned_s": Param(float, None, "start: seconds the load is planned to run (default: duration_s)"),
    "interval_s": Param(float, 5, "start: seconds between two monitor samples"),
    "port": Param(int, 0, "start: the collectives' rendezvous port on the first host (0: derived from the run id)"),
    "rdzv_timeout": Param(float, 120, "start: seconds to wait for every host at the rendezvous"),
    "op_timeout": Param(float, 120, "start: seconds one collective may take before it counts as hung"),
    "stall_s": Param(float, 0, "start: seconds without progress that make a worker stalled (0: 6 intervals, at "
                               "least 60)"),
    "heartbeat_timeout": Param(float, 600, "start: the run stops when no poll came for this many seconds"),
    "smi_interval_ms": Param(int, 1000, "start: nvidia-smi / amd-smi sampling interval"),
    "kmsg_path": Param(str, "/dev/kmsg", "start: the kernel log read for XID / SXID / AER lines"),
    "threads": Param(int, 1, "start: CPU threads per worker (OMP_NUM_THREADS)"),
    "env": Param(dict, {}, "start: environment of the workers"),
    "grace_s": Param(float, None, "seconds the workers get to finish after the end or the stop (start: default 30; "
                                  "stop: default the start's)"),
    "wait_s": Param(float, None, "poll: seconds to wait for the end (default 5); stop: seconds a run near its end "
                                 "is let finish (default 0)"),
}
# The params of the collective load (burnin, fabric_soak).
COLL_PARAMS = {
    "coll_size_bytes": Param(int, 0, "start: bytes per collective (0: 256 MiB on GPUs, 1 MiB on the CPU)"),
    "round_s": Param(float, 0.5, "start: seconds of one round of collectives"),
    "check_every": Param(int, 5, "start: check the results every this many rounds"),
}


def soak_params(**declared):
    """The params of a soak probe: the runner's and its own."""
    return Params(peers=True, **RUNNER_PARAMS, **declared)


def _given(value, default):
    """A param whose default depends on the mode (declared None)."""
    return default if value is None else value


def paths(out_dir, probe, variant):
    base = os.path.splitext(artifact_filename(probe, variant))[0]
    p = {"base": base, "dir": out_dir}
    for key in ("cfg", "done", "stop", "halt", "heartbeat", "log", "state", "launch", "deadline", "skipped"):
        p[key] = os.path.join(out_dir, ".%s.%s" % (base, key))
    for stream in STREAMS:
        p[stream] = os.path.join(out_dir, "%s.%s.jsonl" % (base, stream))
    p["work"] = os.path.join(out_dir, ".%s-work" % base)
    return p


def marker(run_id, host, base):
    # The host is part of it: nodes that share a process table (containers, test namespaces) keep apart.
    return "clustermax-assess-soak=%s/%s/%s" % (run_id, host, base)


# ------------------------------------------------------------------------------------------------------------
# the probe side: start, poll, stop


def start(art, params, out_dir, components):
    """Leave a runner behind. components: {"gemm": bool, "coll": [collectives] or [], "fio": {…} or None}."""
    p = paths(out_dir, art.probe, art.variant)
    dev, gpus, tool_facts = device.describe()
    art.device.update(dev)
    for key in ("cfg", "skipped"):  # a start replaces whatever an earlier start of this name left
        if os.path.exists(p[key]):
            os.unlink(p[key])
    loads = [what for what, on in (("GEMM", components.get("gemm")), ("collective", components.get("coll"))) if on]
    if loads and importlib.util.find_spec("torch") is None:
        # As the GEMM and collectives probes do: a skip naming the Python. Started anyway, the workers died at their
        # import, and the rows read as a GPU that stopped (or gave wrong products) under load.
        _skip_start(art, p, "torch is not importable by %s: %s needs torch for its %s load%s" % (
            sys.executable, p["base"], " and ".join(loads), "s" if len(loads) > 1 else ""))
        return
    duration = params["duration_s"]
    interval = params["interval_s"]
    hosts = list(params["hosts"] or [art.host])
    addresses = [str(a) for a in (params["addresses"] or hosts)]
    rank = params["rank"]
    mark = marker(art.run_id, art.host, p["base"])
    if marked_pids(mark):
        kill_marked(mark)  # a runner of the same run and name is still there: a restart replaces it
    for key in ("done", "stop", "halt", "deadline") + STREAMS:
        if os.path.exists(p[key]):
            os.unlink(p[key])
    os.makedirs(p["work"], exist_ok=True)
    grace = _given(params["grace_s"], 30.0)
    now = time.time()
    cfg = {
        "probe": art.probe, "variant": art.variant, "run_id": art.run_id, "host": art.host, "marker": mark,
        "paths": p, "t_start": now, "duration_s": duration, "deadline": now + duration, "grace_s": grace,
        "planned_s": _given(params["planned_s"], duration),
        "hard_deadline": now + duration + 2 * grace + params["rdzv_timeout"] + 60,
        # the latest the load can end: its clock starts once every load runs (_start_the_load_clock), and a
        # collective world forms within the rendezvous timeout or fails
        "deadline_latest": now + duration + (params["rdzv_timeout"] if components.get("coll") else 0),
        "interval": interval, "heartbeat_timeout": params["heartbeat_timeout"],
        "backend": dev["backend"], "device": dev, "gpus": [g.get("index") for g in gpus],
        "gpu_tool": tool_facts.get("gpu_tool"),
        "smi_interval_ms": params["smi_interval_ms"], "kmsg_path": params["kmsg_path"],
        "hosts": hosts, "addresses": addresses, "rank": rank, "port": port_param(params, "port", art.run_id, art.probe),
        "rdzv_timeout": params["rdzv_timeout"], "op_timeout": params["op_timeout"],
        "stall_s": params["stall_s"] or max(60.0, 6 * interval),
        "gemm": bool(components.get("gemm")), "collectives": list(components.get("coll") or []),
        "fio": components.get("fio"), "params": params, "env": params["env"],
    }
    with open(p["cfg"], "w") as fh:
        json.dump(cfg, fh)
    with open(p["heartbeat"], "w") as fh:
        fh.write("%f\n" % now)
    with open(p["log"], "ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", RUNNER % package_root(), p["cfg"], mark],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=out_dir,
                                start_new_session=True, close_fds=True)
    art.facts.update(state="running", runner_pid=str(proc.pid), marker=mark, t_start=str(round(now, 3)),
                     duration_s=str(cfg["planned_s"]), interval_s=str(interval))
    art.add("planned_s", cfg["planned_s"], "s")


def _skip_start(art, p, reason):
    """A start that leaves no runner: the skip, and its reason for the poll and stop steps that follow."""
    with open(p["skipped"], "w") as fh:
        fh.write(reason)
    art.skip(reason)


def _not_started(art, p):
    """The skip of a poll or stop without a run: the start's reason when it skipped, else that none was started."""
    try:
        with open(p["skipped"]) as fh:
            art.skip(fh.read())
    except OSError:
        art.skip("no %s run was started on this node" % p["base"])


def _wait_done(p, wait_s):
    deadline = time.time() + max(0.0, float(wait_s))
    while not os.path.exists(p["done"]) and time.time() < deadline:
        time.sleep(0.25)
    return os.path.exists(p["done"])


def _load_cfg(p):
    try:
        with open(p["cfg"]) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def poll(art, params, out_dir):
    p = paths(out_dir, art.probe, art.variant)
    cfg = _load_cfg(p)
    if cfg is None:
        _not_started(art, p)
        return
    now = time.time()
    wait = _given(params["wait_s"], 5.0)
    if cfg["deadline"] - now <= wait:
        # The last poll waits for the end (the workers' grace included), so the play needs no extra polls.
        wait = max(0.0, cfg["deadline"] - now) + cfg["grace_s"] + 15
    end = now + wait

    def beat():
        # The heartbeat (refreshed while this poll waits), and how long this poll may still run: the runner waits
        # that long before it removes anything (see _remove_run_dir).
        try:
            with open(p["heartbeat"], "w") as fh:
                fh.write("%f %f\n" % (time.time(), max(0.0, end - time.time()) + 10))
        except OSError:
            pass

    beat()
    while not os.path.exists(p["done"]) and time.time() < end:
        time.sleep(min(1.0, max(0.0, end - time.time())))
        beat()
    if not os.path.exists(p["done"]) and not _runner_alive(p, cfg):
        with open(p["done"], "w") as fh:
            json.dump({"ended_by": "runner gone (killed)", "t_end": time.time(), "exits": {}}, fh)
    soak_summary.summarize(art, cfg, p)


def _runner_alive(p, cfg):
    try:
        with open(p["state"]) as fh:
            pid = int(json.load(fh)["pid"])
    except (OSError, ValueError, KeyError):
        return time.time() - cfg["t_start"] < 30  # not started yet
    return pid in marked_pids(cfg["marker"])


def stop(art, params, out_dir):
    p = paths(out_dir, art.probe, art.variant)
    cfg = _load_cfg(p)
    if cfg is None:
        _not_started(art, p)
        return
    # A run near its end is let finish (the play's poll slots can run out a little early after unreachable polls).
    if not _wait_done(p, min(_given(params["wait_s"], 0.0), max(0.0, cfg["deadline"] - time.time()) + cfg["grace_s"])):
        open(p["stop"], "w").close()
        _wait_done(p, _given(params["grace_s"], cfg["grace_s"]) + 15)
    killed = 0
    if marked_pids(cfg["marker"]):
        killed = len(marked_pids(cfg["marker"]))
        kill_marked(cfg["marker"])
    if not os.path.exists(p["done"]):
        with open(p["done"], "w") as fh:
            json.dump({"ended_by": "killed by the stop step", "t_end": time.time(), "exits": {}}, fh)
    art.facts["left_processes_killed"] = str(killed)
    soak_summary.summarize(art, cfg, p)
    shutil.rmtree(p["work"], ignore_errors=True)


def run_modes(art, params, out_dir, components):
    if params["mode"] == "start":
        start(art, params, out_dir, components)
    elif params["mode"] == "poll":
        poll(art, params, out_dir)
    else:
        stop(art, params, out_dir)


# ------------------------------------------------------------------------------------------------------------
# the runner (detached)


def _worker_env(cfg):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in cfg.get("env", {}).items()})
    if cfg["collectives"] and len(cfg["hosts"]) > 1:
        iface, _, _ = interface_for(cfg["addresses"][cfg["rank"]],
                                    [a for i, a in enumerate(cfg["addresses"]) if i != cfg["rank"]])
        if iface:
            env.setdefault("GLOO_SOCKET_IFNAME", iface)
            env.setdefault("NCCL_SOCKET_IFNAME", iface)
    env.setdefault("OMP_NUM_THREADS", str(cfg["params"]["threads"]))
    return env


def coll_template(cfg):
    """What every rank of the collective loop gets, whoever starts it (its rank, device and master come on top)."""
    gpu = cfg["backend"] in ("cuda", "rocm") and bool(cfg["gpus"])
    params = cfg["params"]
    return {"interval": cfg["interval"], "deadline": cfg["deadline_latest"], "stop": cfg["paths"]["halt"],
            "deadline_file": cfg["paths"]["deadline"],
            "hard_deadline": cfg["hard_deadline"], "backend": "nccl" if gpu else "gloo", "role": "coll",
            "nodes": len(cfg["hosts"]), "out": cfg["paths"]["coll"], "rdzv_timeout": cfg["rdzv_timeout"],
            "op_timeout": cfg["op_timeout"], "collectives": cfg["collectives"],
            "size_bytes": params["coll_size_bytes"] or (256 << 20 if gpu else 1 << 20), "dtype": "float32",
            "round_s": params["round_s"], "check_every": params["check_every"],
            "ppn": len(cfg["gpus"]) if gpu else 1}


def _first_sample_t(path):
    try:
        with open(path) as fh:
            return float(json.loads(fh.readline())["t"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _start_the_load_clock(cfg, p):
    """The duration is time under the whole load: it counts from when the collective loop began (its first record:
    the world formed, or failed), not from the start, so a world that forms late (torch imports and the rendezvous
    on a loaded node) still runs its whole duration beside the GEMMs. Until then the workers hold on to the latest
    possible end (deadline_latest: the world forms within the rendezvous timeout or fails). The deadline is set
    once; the workers read it from the deadline file, later polls from the config."""
    if not cfg["collectives"]:
        return
    first = _first_sample_t(p["coll"])
    if first is None:
        return
    cfg["t_load"] = max(cfg["t_start"], first)
    cfg["deadline"] = min(max(cfg["deadline"], cfg["t_load"] + cfg["duration_s"]), cfg["deadline_latest"])
    _write_atomically(p["deadline"], "%.3f\n" % cfg["deadline"])
    _write_atomically(p["cfg"], json.dumps(cfg))


def _write_atomically(path, text):
    tmp = "%s.tmp" % path
    with open(tmp, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def _worker_cfgs(cfg, coll=True):
    p = cfg["paths"]
    params = cfg["params"]
    gpu = cfg["backend"] in ("cuda", "rocm") and cfg["gpus"]
    common = {"interval": cfg["interval"], "deadline": cfg["deadline_latest"], "stop": p["halt"],
              "deadline_file": p["deadline"], "hard_deadline": cfg["hard_deadline"], "backend": cfg["backend"]}
    out = []
    if cfg["gemm"]:
        for i, g, dev in soak_summary.gemm_workers(cfg):
            out.append(dict(common, role="gemm", worker=i, gpu=g, device=dev, out=p["gemm"],
                            size=params["gemm_size"] or (8192 if gpu else 512),
                            dtype=params["gemm_dtype"] or ("bf16" if gpu else "fp32"),
                            threads=params["threads"]))
    if cfg["collectives"] and coll:
        ppn = len(cfg["gpus"]) if gpu else 1
        nodes = len(cfg["hosts"])
        for local in range(ppn):
            out.append(dict(coll_template(cfg), rank=cfg["rank"] * ppn + local, world=nodes * ppn,
                            device="cuda:%d" % local if gpu else "cpu", master_addr=cfg["addresses"][0],
                            master_port=cfg["port"]))
    return out


class FioPhases:
    """The storage soak: for each client count, sequential mixed then random mixed I/O for phase_s seconds each,
    fio printing its cumulative status every interval; the deltas give the per-interval bandwidth."""

    def __init__(self, cfg, children):
        self.cfg, self.children = cfg, children
        self.spec = cfg["fio"]
        self.proc = None
        self.stopped = False

    def run(self, stop_event):
        from probes.burnin import fio as soak_fio  # noqa: PLC0415

        p = self.cfg["paths"]
        spec = self.spec
        directory = spec.get("directory") or os.path.join(p["work"], "fio")
        os.makedirs(directory, exist_ok=True)
        for clients in spec["clients"]:
            for phase in spec["phases"]:
                if stop_event.is_set():
                    return
                job = os.path.join(p["work"], "%s-c%d.fio" % (phase, clients))
                with open(job, "w") as fh:
                    fh.write(soak_fio.job_text(phase, directory, clients, spec))
                argv = ["fio", "--output-format=json", "--status-interval=%d" % max(1, int(self.cfg["interval"])),
                        job]
                self.proc = self.children.start(argv, stdout=subprocess.PIPE, log_path=p["log"])
                parser = soak_fio.StatusStream(phase, clients, self.cfg["interval"])
                for raw in self.proc.stdout:
                    for rec in parser.feed(raw.decode("utf-8", "replace")):
                        append_jsonl(p["fio"], [rec])
                self.proc.wait()
                for rec in parser.finish(self.proc.returncode):
                    append_jsonl(p["fio"], [rec])


def runner_main(cfg_path):
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    p = cfg["paths"]
    stop_event = threading.Event()
    ended = {"by": None}

    def on_term(signum, frame):
        ended["by"] = ended["by"] or "signal %d" % signum

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped SSH session is no reason to stop
    children = Children()
    exits = {}
    exit_t = {}  # when each worker's exit was seen: the time of death of one that wrote nothing (summary._gemm)
    threads = []
    monitor = Monitor(cfg, p["monitor"], p["kernel"])
    with open(p["state"], "w") as fh:
        json.dump({"monitor": monitor.facts, "pid": os.getpid()}, fh)
    threads.append(threading.Thread(target=monitor.run, args=(stop_event,), daemon=True))
    env = _worker_env(cfg)
    workers = []
    launched = _launched_coll(cfg, env, children, p)
    for i, wcfg in enumerate(_worker_cfgs(cfg, coll=launched is None)):
        path = os.path.join(p["work"], "worker-%d.json" % i)
        with open(path, "w") as fh:
            json.dump(wcfg, fh)
        argv = [sys.executable, "-c", BOOT % package_root(), path, cfg["marker"]]
        name = "%s-%d" % (wcfg["role"], wcfg.get("worker", wcfg.get("rank")))
        workers.append((name, wcfg, children.start(argv, env=env, log_path=p["log"])))
    if getattr(launched, "entry", None):
        workers.append(launched.entry)
    fio = fio_thread = None
    if cfg.get("fio"):
        fio = FioPhases(cfg, children)
        fio_thread = threading.Thread(target=fio.run, args=(stop_event,), daemon=True)
        threads.append(fio_thread)
    for t in threads:
        t.start()
    coll_seen = time.time()
    coll_size = 0
    while ended["by"] is None:
        time.sleep(0.5)
        now = time.time()
        if "t_load" not in cfg:
            _start_the_load_clock(cfg, p)
        if os.path.exists(p["stop"]):
            ended["by"] = "stop requested"
        elif now >= (cfg["deadline"] if "t_load" in cfg or not cfg["collectives"] else cfg["deadline_latest"]):
            ended["by"] = "completed"
        elif now >= cfg["hard_deadline"]:
            ended["by"] = "hard deadline"
        else:
            try:
                beat = os.path.getmtime(p["heartbeat"])
            except OSError:
                beat = cfg["t_start"]
            if now - beat > cfg["heartbeat_timeout"]:
                ended["by"] = "controller lost: no poll for %.0f s" % (now - beat)
        for name, _wcfg, proc in workers:
            if name not in exits and proc.poll() is not None:
                exits[name] = proc.returncode
                exit_t[name] = round(now, 3)
        if ended["by"] is None and workers and len(exits) == len(workers) and any(exits.values()) and (
                fio_thread is None or not fio_thread.is_alive()):
            # One dead worker leaves the others their load to the end; once every one has ended, and one failed, the
            # rest of the run would be the monitor of an idle node (a world that never formed kept it to
            # deadline_latest, three times a 60 s plan).
            ended["by"] = "every worker ended, %d failed" % sum(1 for v in exits.values() if v)
        if fio is not None and not [t for t in threads if t.is_alive() and t is not threads[0]]:
            if ended["by"] is None and not workers:
                ended["by"] = "completed"  # every fio phase ran
        # A collective loop that stopped writing samples while its processes live: a hang.
        size = os.path.getsize(p["coll"]) if os.path.exists(p["coll"]) else 0
        if size != coll_size:
            coll_size, coll_seen = size, now
        live = [w for w in workers if w[1]["role"] in ("coll", "coll-launcher") and w[2].poll() is None]
        if live and now - coll_seen > cfg["stall_s"] + (cfg["rdzv_timeout"] if coll_size == 0 else 0):
            append_jsonl(p["coll"], [{"type": "error", "kind": "hang", "t": round(now, 3), "rank": w[1]["rank"],
                                      "error": "no collective progress for %.0f s: stopped" % (now - coll_seen)}
                                     for w in live])
            for w in live:
                if w[1]["role"] == "coll-launcher":
                    launched.started.stop()  # the launcher's way: srun's job cancelled, mpirun's ranks ended
                else:
                    children.stop(w[2], grace=2.0)
            coll_seen = now
    # Stop: the workers finish their round and write their last sample; then everything that is left goes.
    open(p["halt"], "w").close()
    stop_event.set()
    deadline = time.time() + cfg["grace_s"]
    while time.time() < deadline and any(w[2].poll() is None for w in workers):
        time.sleep(0.2)
    if fio is not None and fio.proc is not None and fio.proc.poll() is None:
        children.stop(fio.proc, grace=2.0)
    if launched is not None:
        launcher_end = _end_launched(launched, workers, exits, p)
    for name, _wcfg, proc in workers:
        if proc.poll() is None:
            children.stop(proc, grace=2.0)
            exits[name] = "killed after the grace period"
        elif name not in exits:
            exits[name] = proc.returncode
        exit_t.setdefault(name, round(time.time(), 3))
    children.stop_all()
    for t in threads:
        t.join(timeout=15)
    monitor.close()
    with open(p["done"], "w") as fh:
        json.dump({"ended_by": ended["by"], "t_start": cfg["t_start"], "t_end": time.time(), "exits": exits,
                   "exit_t": exit_t,
                   **(launcher_end if launched is not None else {})}, fh)
    if ended["by"].startswith("controller lost"):
        _remove_run_dir(cfg)


def _launched_coll(cfg, env, children, p):
    """The collective loop through srun, mpirun or torchrun (probes/burnin/coll_launch.py), or None: the runner's
    own coll workers (direct, one host, no collectives, or auto found no launcher)."""
    if not cfg["collectives"] or len(cfg["hosts"]) < 2 or (cfg["params"].get("launcher") or "direct") == "direct":
        return None
    from probes.burnin.coll_launch import LaunchedColl  # noqa: PLC0415

    node_env = {k: env[k] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if k in env}
    launched = LaunchedColl(cfg, coll_template(cfg), node_env, children)
    try:
        chosen = launched.open()
        proc = None if launched.error or chosen == "direct" else launched.start(env, p["log"])
    except StoreError as exc:
        launched.error = "the runners did not meet in the run's store: %s" % exc
        chosen = proc = None
    with open(p["launch"], "w") as fh:
        json.dump({"launcher": launched.launcher, "launcher_asked": launched.asked,
                   "launcher_why_not": launched.why_not, "launcher_error": launched.error}, fh)
    if launched.error:
        append_jsonl(p["coll"], [{"type": "error", "kind": "launcher", "t": round(time.time(), 3),
                                  "rank": cfg["rank"], "error": launched.error}])
    if chosen == "direct" and not launched.error:
        launched.close()
        return None
    if proc is not None:
        # watched like a worker: its exit is recorded, and a stalled loop stops it (the launcher's way)
        launched.entry = ("coll-%s" % chosen, {"role": "coll-launcher", "rank": cfg["rank"]}, proc)
    return launched


def _end_launched(launched, workers, exits, p):
    """The launched loop's end: its launcher stopped the launcher's way, what is left here ended, and what the
    launcher reported about failed ranks kept for the summary."""
    entry = getattr(launched, "entry", None)
    if entry is not None:
        deadline = time.time() + 30
        while entry[2].poll() is None and time.time() < deadline:
            time.sleep(0.2)  # the ranks stop at the deadline or the stop file by themselves
    left = launched.close()
    if entry is not None:
        exits[entry[0]] = entry[2].returncode
    failed = launched.failed(p["log"]) if entry is not None else {}
    return {"launcher": launched.launcher, "launcher_failed": {str(k): v for k, v in failed.items()},
            "slurm_jobs_left": left}


def _remove_run_dir(cfg):
    """The controller is gone (the play was interrupted or crashed): nobody will collect or clean up this run, and
    what was measured up to the last poll is on the controller. Leave nothing behind: the run's working directory
    on the node goes, but only when it is the one preflight made for this run (clustermax-assess-<run id>), and only
    once the last poll that reached the node has ended (it writes its artifact there when it does)."""
    run_dir = os.path.dirname(os.path.abspath(cfg["paths"]["dir"]))
    if os.path.basename(run_dir) != "clustermax-assess-%s" % cfg["run_id"]:
        return
    give_up = time.time() + 900
    while time.time() < give_up:
        try:
            with open(cfg["paths"]["heartbeat"]) as fh:
                beat, poll_s = (float(x) for x in fh.read().split()[:2])
        except (OSError, ValueError):
            beat, poll_s = 0.0, 0.0
        left = beat + poll_s + 2 - time.time()
        if left <= 0:
            break
        time.sleep(min(left, 5.0))  # read again: a poll that started late may have written a new one
    shutil.rmtree(run_dir, ignore_errors=True)
