"""The rank side of the inference phase: `serve(cfg, torch, dist, emit, progress)` runs in one rank per node (the
world machinery of probes/common/worlds.py starts, watches and names them, through our worker pool or the
cluster's launcher). Each rank starts one vLLM engine on its node holding the node's GPUs (tensor parallel); a
world of several nodes is one data-parallel deployment: the first rank's engine is the head (API server on
127.0.0.1), the others are headless engines that join it (vLLM's own multi-node data parallelism).

The first rank then waits for GET /v1/models and runs the sweep with vLLM's own load generator (loadgen.py in the
engine's Python), point by point, and emits:
- {"type": "ready", "seconds"}: engine start to the first answer (every engine of the world joined);
- {"type": "point", "name", "scenario", "concurrency", "summary", "requests", "file", "telemetry"} per point measured
  (bench_result's reading of the tool's result file; telemetry: this node's GPU means over the point, GPU only);
- {"type": "point_error", "name", "scenario", "concurrency", "error"} / {"type": "point_skip", ..., "reason"}.
A point already measured is emitted before the next starts, so an engine that dies mid-sweep loses nothing measured:
the rank raises naming the point it died in and the engine log's last lines.

The other ranks keep their engine up until the first says the sweep is over (a key in the world's store), their
engine dies (raised, with its log's last lines) or launch_timeout passes. Every engine is stopped with its whole
process group before the rank returns.
"""

import json
import os
import pkgutil
import signal
import time

from probes.common.procs import Children
from probes.common.serving import models_answer
from probes.inference import bench_result, engine
from probes.inference.inference import TINY, sweep_points

HEARTBEAT_S = 5.0


class Telemetry:
    """nvidia-smi sampling this node's GPUs every 500 ms into a file, for the points' means (GPU nodes only)."""

    FIELDS = ("utilization.gpu", "utilization.memory", "power.draw")

    def __init__(self, children, path):
        self.path, self.proc = path, None
        try:
            self.proc = children.start(["nvidia-smi", "--query-gpu=timestamp," + ",".join(self.FIELDS),
                                        "--format=csv,noheader,nounits", "-lms", "500"], log_path=path)
        except OSError:
            self.proc = None

    def between(self, t0, t1):
        if self.proc is None:
            return None
        sums, n = [0.0, 0.0, 0.0], 0
        try:
            with open(self.path, errors="replace") as fh:
                lines = fh.read().splitlines()
        except OSError:
            return None
        for line in lines:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 4:
                continue
            try:
                # nvidia-smi prints local time: "2026/12/02 20:01:02.123"
                stamp, frac = parts[0].split(".") if "." in parts[0] else (parts[0], "0")
                t = time.mktime(time.strptime(stamp, "%Y/%m/%d %H:%M:%S")) + float("0." + frac)
                values = [float(p) for p in parts[1:]]
            except ValueError:
                continue
            if t0 <= t <= t1:
                sums = [a + b for a, b in zip(sums, values)]
                n += 1
        if not n:
            return None
        return {"gpu_util_pct": round(sums[0] / n, 2), "mem_util_pct": round(sums[1] / n, 2),
                "power_w": round(sums[2] / n, 2), "samples": n}


def _engine_env(cfg):
    # vLLM's caches (torch.compile's among them) in the work directory, removed with it: nothing left in ~/.cache,
    # and every run starts as cold as a freshly handed-over node
    env = dict(os.environ, HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
               VLLM_CACHE_ROOT=os.path.join(cfg["work_dir"], "vllm-cache"))
    env.update({k: str(v) for k, v in (cfg.get("engine_env") or {}).items()})
    return env


def _stop(children, proc, grace):
    if proc is not None:
        children.stop(proc, grace=grace)


def work_dir(cfg):
    """This node's work directory (the probe's Node.work: beside this node's logs)."""
    return os.path.join(os.path.dirname(cfg["log"]), ".%s-work" % cfg["base"])


def model_dir(cfg):
    return os.path.join(work_dir(cfg), TINY) if cfg["model"] == TINY else cfg["model"]


def serve(cfg, torch, dist, emit, progress):
    nodes, rank = cfg["nodes"], cfg["rank"]
    out_dir = os.path.dirname(cfg["log"])
    cfg = dict(cfg, model=model_dir(cfg), work_dir=work_dir(cfg),
               points=sweep_points(nodes=nodes, **cfg["sweep"]))
    log = os.path.join(out_dir, "%s.n%d.r%d.engine.log" % (cfg["base"], nodes, rank))
    store = dist.distributed_c10d._get_default_store() if nodes > 1 else None
    done_key = "inference/sweep-done"
    children = Children()
    proc = None
    try:
        progress(0, "engine start", "run")
        port = _free_port()
        argv = engine.argv(cfg["engine_python"], cfg["model"], port=port, nodes=nodes, rank=rank,
                           address=cfg["master_addr"], rpc_port=cfg["master_port"] + cfg["rpc_port_offset"],
                           tensor_parallel=cfg["tensor_parallel"], max_model_len=cfg["max_model_len"],
                           extra=cfg["engine_args"])
        with open(log, "a") as fh:
            fh.write("# %s\n" % " ".join(a if "\n" not in a else "'<vllm cli>'" for a in argv))
        started = time.monotonic()
        proc = children.start(argv, env=_engine_env(cfg), log_path=log)
        if rank == 0:
            _wait_ready(cfg, proc, port, started, log, progress)
            emit({"type": "ready", "seconds": time.monotonic() - started, "log": os.path.basename(log)})
            try:
                _sweep(cfg, proc, port, log, emit, progress, children)
            finally:
                if store is not None:
                    store.set(done_key, "1")
        else:
            _wait_done(cfg, proc, store, done_key, log, progress)
    finally:
        _stop(children, proc, grace=float(cfg.get("stop_grace", 30)))
        children.stop_all()


def _free_port():
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_ready(cfg, proc, port, started, log, progress):
    beat = time.monotonic()
    while not models_answer(port):
        if proc.poll() is not None:
            raise RuntimeError("the engine exited (rc=%s) before it answered on /v1/models: %s"
                               % (proc.returncode, engine.last_lines(log)))
        elapsed = time.monotonic() - started
        if elapsed > float(cfg["ready_timeout"]):
            raise RuntimeError("the engine did not answer on /v1/models within %g s: %s"
                               % (float(cfg["ready_timeout"]), engine.last_lines(log)))
        if time.monotonic() - beat > HEARTBEAT_S:
            progress(0, "engine start", "run")  # the watcher's stall clock: still starting, not hung
            beat = time.monotonic()
        time.sleep(0.5)


def _sweep(cfg, proc, port, log, emit, progress, children):
    work = cfg["work_dir"]
    results = os.path.join(work, "n%d-results" % cfg["nodes"])
    os.makedirs(results, exist_ok=True)
    script = os.path.join(work, "loadgen.py")
    with open(script, "wb") as fh:
        fh.write(pkgutil.get_data("probes.inference", "loadgen.py"))
    events = os.path.join(work, "n%d-events.jsonl" % cfg["nodes"])
    if os.path.exists(events):
        os.unlink(events)
    points = {p["name"]: p for p in cfg["points"]}
    plan = {"base_url": "http://127.0.0.1:%d" % port, "model": cfg["model"], "result_dir": results,
            "events": events, "points": cfg["points"], "saturation_gain": cfg["saturation_gain"]}
    plan_path = os.path.join(work, "n%d-plan.json" % cfg["nodes"])
    with open(plan_path, "w") as fh:
        json.dump(plan, fh)
    gen_log = os.path.join(os.path.dirname(cfg["log"]), "%s.n%d.loadgen.log" % (cfg["base"], cfg["nodes"]))
    telemetry = Telemetry(children, os.path.join(work, "n%d-gpu.csv" % cfg["nodes"])) if cfg["gpu"] else None
    gen = children.start([cfg["engine_python"], script, plan_path], env=_engine_env(cfg), log_path=gen_log)
    seen, current, index, measured, beat, point_started = 0, None, 0, 0, time.monotonic(), None

    def engine_died(where):
        children.stop(gen, grace=3)
        raise RuntimeError("the engine exited (rc=%s) %s, with %d of %d points measured: %s"
                           % (proc.returncode, where, measured, len(points), engine.last_lines(log)))

    def during(name):
        return "during %s at concurrency %s" % (points[name]["scenario"], points[name]["concurrency"])

    while True:
        lines, seen = _new_lines(events, seen)
        for ev in lines:
            if proc.poll() is not None:
                # an engine that died makes the points after it fail fast: name the point it died in
                engine_died(during(current) if current else "between points")
            point = points.get(ev.get("name"), {})
            label = {"name": ev.get("name"), "scenario": point.get("scenario"),
                     "concurrency": point.get("concurrency")}
            if ev["event"] == "start":
                if proc.poll() is not None:
                    engine_died("between points")
                index += 1
                current, point_started = ev["name"], time.monotonic()
                progress(index, "%s at concurrency %s" % (point.get("scenario"), point.get("concurrency")), "run")
                points[ev["name"]]["t0"] = ev["t"]
                _engine_fault(cfg, index, proc)
            elif ev["event"] == "done":
                current = None
                try:
                    with open(ev["file"], errors="replace") as fh:
                        summary, requests = bench_result.read(fh.read(), os.path.basename(ev["file"]))
                except (OSError, bench_result.BenchResultError) as exc:
                    emit(dict(label, type="point_error", error=str(exc)))
                    continue
                if summary.get("requests_failed"):
                    # failed requests: give the engine's exit a moment to be seen before counting the point
                    for _ in range(20):
                        if proc.poll() is not None:
                            engine_died(during(ev["name"]) if ev["name"] in points else "between points")
                        time.sleep(0.1)
                tele = telemetry.between(point.get("t0", ev["t"]), ev["t"]) if telemetry else None
                emit(dict(label, type="point", summary=summary, requests=requests,
                          file=os.path.basename(ev["file"]), telemetry=tele))
                measured += 1
            elif ev["event"] == "error":
                current = None
                # a point that failed because the engine died names the point: give the engine's exit a moment
                # to be seen (the load generator's refused connection can come first)
                for _ in range(20):
                    if proc.poll() is not None:
                        engine_died(during(ev["name"]) if ev["name"] in points else "between points")
                    time.sleep(0.1)
                emit(dict(label, type="point_error", error=ev.get("error")))
            elif ev["event"] == "skip":
                emit(dict(label, type="point_skip", reason=ev.get("reason")))
        if proc.poll() is not None:
            engine_died(during(current) if current else "between points")
        if gen.poll() is not None:
            lines, seen = _new_lines(events, seen)
            if lines:
                continue  # read what it wrote last before leaving
            if gen.returncode != 0:
                raise RuntimeError("the load generator exited (rc=%s): %s" % (gen.returncode,
                                                                             engine.last_lines(gen_log)))
            return
        if current and time.monotonic() - point_started > float(cfg["point_timeout"]):
            children.stop(gen, grace=3)
            raise RuntimeError("%s ran past point_timeout (%g s)" % (during(current)[len("during "):],
                                                                     float(cfg["point_timeout"])))
        if time.monotonic() - beat > HEARTBEAT_S:
            progress(index, "%s" % (current or "between points"), "run")
            beat = time.monotonic()
        time.sleep(0.2)


def _engine_fault(cfg, index, proc):
    """Fault injection for tests: {"rank", "nodes", "after_steps": K, "mode": "kill_engine"} kills this rank's engine
    (SIGKILL to its process group) as point K starts, the way an engine dies of a GPU fault or the OOM killer."""
    fault = cfg.get("fault") or {}
    if (fault.get("mode") == "kill_engine" and int(fault.get("rank", -1)) == cfg["rank"]
            and int(fault.get("nodes", -1)) == cfg["nodes"] and int(fault.get("after_steps", 0)) == index):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _new_lines(path, seen):
    try:
        with open(path, errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return [], seen
    out = []
    for line in lines[seen:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            return out, seen + len(out)  # a line still being written: read it next time
    return out, len(lines)


def _wait_done(cfg, proc, store, done_key, log, progress):
    deadline = time.monotonic() + float(cfg["launch_timeout"])
    beat = time.monotonic()
    while True:
        if store.check([done_key]):
            return
        if proc.poll() is not None:
            raise RuntimeError("the headless engine exited (rc=%s): %s" % (proc.returncode, engine.last_lines(log)))
        if time.monotonic() > deadline:
            raise RuntimeError("the first node never said the sweep was over (launch_timeout %g s)"
                               % float(cfg["launch_timeout"]))
        if time.monotonic() - beat > HEARTBEAT_S:
            progress(0, "headless engine serving", "run")
            beat = time.monotonic()
        time.sleep(0.5)

