"""One rank of a torch.distributed collectives sweep (started by probes/network/collectives.py, one process per rank).

    python -c 'import sys; sys.path.insert(0, ROOT); from probes.network.worker import main; main(CONFIG)'

A worker imports torch once and then runs the worlds its parent sends on stdin, one after the other (one line of
JSON each: rank, world size, master address and port, its files), so torch is not imported again for every world
size. The rendezvous is our own, with torch's TCPStore on the first node (MASTER_ADDR = the first host's address,
a port chosen per run): every rank writes `up/<rank>` and waits for all of them, so a rank that never arrives is
named. Then init_process_group(store=…) with gloo on CPU or nccl on GPUs, and for each collective, message size
and placement (in-place / out-of-place where torch has both):

- warm-up iterations, then the iteration count every rank agrees on (max over ranks of the warm-up time decides);
- the mean time of the timed iterations on each rank, and the max over ranks (the collective is done when its
  slowest rank is): algbw = bytes / time, busbw = algbw × the collective's factor (probes/network/busbw.py);
- one more call on patterned data whose correct result is known, counting the elements that are wrong (#wrong).

Every result is one JSON line appended to the results file as soon as it is measured, so a crash keeps what came
before. Progress (step index, what it is, phase) goes to the probe's control store when there is one, which is
how a hang is reported with the step each rank was in.
"""

import json
import os
import signal
import sys
import time
from datetime import timedelta

from probes.common.rendezvous import StoreClient, StoreError
from probes.network.busbw import algbw_gbps, busbw_factor
from probes.network.plan import human_bytes

DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
# Collectives and the placements torch can express: all_reduce and broadcast work in place only, alltoall only
# out of place; all_gather and reduce_scatter both (in place = the rank's chunk is a view of the full buffer).
PLACEMENTS = {"all_reduce": ("in_place",), "broadcast": ("in_place",), "alltoall": ("out_of_place",),
              "all_gather": ("out_of_place", "in_place"), "reduce_scatter": ("out_of_place", "in_place"),
              "reduce": ("in_place",)}
# Per-rank chunk collectives: the buffer is split into `ranks` equal chunks.
CHUNKED = ("all_gather", "reduce_scatter", "alltoall")


def plan_steps(collectives, sizes, ranks, elem):
    """Every rank derives the same list: (collective, placement, elements per buffer or per chunk, bytes)."""
    steps = []
    for coll in collectives:
        for size in sizes:
            if coll in CHUNKED:
                chunk = size // (elem * ranks)
                if chunk < 1:
                    continue
                count, nbytes = chunk, chunk * ranks * elem
            else:
                count = size // elem
                if count < 1:
                    continue
                nbytes = count * elem
            for placement in PLACEMENTS.get(coll, ("in_place",)):
                steps.append((coll, placement, count, nbytes))
    return steps


def step_label(step):
    coll, placement, _, nbytes = step
    return "%s %s (%s)" % (coll, human_bytes(nbytes), placement.replace("_", "-"))


class Progress:
    """Where this rank is: a local file the parent watches, and the control store for the other nodes."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.path = cfg["progress"]
        self.store = None
        store = cfg.get("store")
        if store:
            try:
                self.store = StoreClient(store["host"], store["port"], store["token"], connect_timeout=10,
                                         op_timeout=10)
            except StoreError:
                self.store = None

    def __call__(self, index, label, phase):
        record = {"rank": self.cfg["rank"], "step": index, "label": label, "phase": phase, "t": time.time()}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.store is not None:
            try:
                self.store.set("%s/p/%d" % (self.cfg["key"], self.cfg["rank"]), record)
            except StoreError:
                self.store = None


class Sweep:
    def __init__(self, cfg, torch, dist):
        self.cfg, self.torch, self.dist = cfg, torch, dist
        self.rank, self.ranks = cfg["rank"], cfg["world"]
        self.device = torch.device(cfg["device"])
        self.dtype = getattr(torch, cfg.get("dtype", "float32"))
        self.exact = cfg.get("dtype", "float32") in ("float32", "float64")
        self.gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self.scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    def sync(self):
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def reduce_scalar(self, value, op):
        t = self.torch.tensor([float(value)], dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(t, op=op)
        return float(t.item())

    def fits(self, nbytes):
        """Whether every rank has room for the buffers (input, output, expected): decided together, or one rank
        would skip a step the others wait in."""
        need = 3 * nbytes
        if self.device.type == "cuda":
            free, _ = self.torch.cuda.mem_get_info(self.device)
            ok = need <= 0.8 * free
        else:
            ok = need <= int(self.cfg.get("host_mem_limit_bytes") or 1 << 62)
        return self.reduce_scalar(1.0 if ok else 0.0, self.dist.ReduceOp.MIN) > 0

    def buffers(self, coll, placement, count):
        torch, n, r = self.torch, self.ranks, self.rank
        empty = lambda k: torch.empty(k, dtype=self.dtype, device=self.device)  # noqa: E731
        if coll in ("all_reduce", "broadcast", "reduce"):
            buf = empty(count)
            return buf, buf
        if coll == "all_gather":
            out = empty(count * n)
            inp = out.narrow(0, r * count, count) if placement == "in_place" else empty(count)
            return inp, out
        if coll == "reduce_scatter":
            inp = empty(count * n)
            out = inp.narrow(0, r * count, count) if placement == "in_place" else empty(count)
            return inp, out
        if coll == "alltoall":
            return empty(count * n), empty(count * n)
        raise ValueError("collective %r is not supported by this probe" % coll)

    def call(self, coll, inp, out):
        dist = self.dist
        if coll == "all_reduce":
            dist.all_reduce(out)
        elif coll == "broadcast":
            dist.broadcast(out, src=0)
        elif coll == "reduce":
            dist.reduce(out, dst=0)
        elif coll == "all_gather":
            self.gather(out, inp)
        elif coll == "reduce_scatter":
            self.scatter(out, inp)
        elif coll == "alltoall":
            dist.all_to_all_single(out, inp)

    def fill_for_timing(self, coll, inp, out):
        # Sums of n copies of 1/n stay near 1: repeated in-place reductions never overflow.
        value = 1.0 / self.ranks if coll in ("all_reduce", "reduce_scatter", "reduce") else 1.0
        inp.fill_(value)
        if out is not inp:
            out.fill_(value)

    def check(self, coll, placement, count, inp, out, index):
        """One call on patterned data; returns how many elements of this rank's result are wrong."""
        torch, n, r = self.torch, self.ranks, self.rank
        ar = lambda values: torch.tensor(values, dtype=self.dtype, device=self.device)  # noqa: E731
        if coll == "all_reduce":
            out.fill_(r + 1)
            expected = ar([n * (n + 1) / 2.0]).expand(out.numel())
        elif coll == "broadcast":
            root_value = float(index % 97 + 2)
            out.fill_(root_value if r == 0 else -1.0)
            expected = ar([root_value]).expand(out.numel())
        elif coll == "reduce":
            out.fill_(r + 1)
            expected = ar([n * (n + 1) / 2.0 if r == 0 else r + 1]).expand(out.numel())
        elif coll == "all_gather":
            out.fill_(-1.0)
            inp.fill_(r + 1)
            expected = ar([k + 1.0 for k in range(n)]).repeat_interleave(count)
        elif coll == "reduce_scatter":
            inp.copy_(ar([(r + 1.0) * (k + 1) for k in range(n)]).repeat_interleave(count))
            if placement == "out_of_place":
                out.fill_(-1.0)
            expected = ar([(r + 1.0) * n * (n + 1) / 2.0]).expand(count)
        elif coll == "alltoall":
            inp.copy_(ar([r * n + k + 1.0 for k in range(n)]).repeat_interleave(count))
            out.fill_(-1.0)
            expected = ar([s * n + r + 1.0 for s in range(n)]).repeat_interleave(count)
        else:
            return 0
        self.sync()
        self.call(coll, inp, out)
        self.sync()
        if self.exact:
            wrong = (out != expected).sum()
        else:
            wrong = (~torch.isclose(out.float(), expected.float(), rtol=1e-2, atol=1e-2)).sum()
        return int(wrong.item())

    def run_step(self, index, step):
        coll, placement, count, nbytes = step
        cfg, dist = self.cfg, self.dist
        inp, out = self.buffers(coll, placement, count)
        self.fill_for_timing(coll, inp, out)
        for _ in range(int(cfg.get("warmup", 2))):
            self.call(coll, inp, out)
        self.sync()
        t0 = time.perf_counter()
        self.call(coll, inp, out)
        self.sync()
        one = self.reduce_scalar(time.perf_counter() - t0, dist.ReduceOp.MAX)
        budget = float(cfg.get("max_seconds_per_size", 1.0))
        iters = max(int(cfg.get("min_iters", 3)), min(int(cfg.get("iters", 20)), int(budget / max(one, 1e-9))))
        dist.barrier()
        self.sync()
        t0 = time.perf_counter()
        for _ in range(iters):
            self.call(coll, inp, out)
        self.sync()
        mine = (time.perf_counter() - t0) / iters
        slowest = self.reduce_scalar(mine, dist.ReduceOp.MAX)
        wrong = self.check(coll, placement, count, inp, out, index) if cfg.get("check", True) else None
        result = {"type": "result", "step": index, "collective": coll, "placement": placement,
                  "size_bytes": nbytes, "count": count, "ranks": self.ranks, "nodes": cfg["nodes"],
                  "dtype": cfg.get("dtype", "float32"), "iters": iters, "time_us": slowest * 1e6,
                  "rank_time_us": mine * 1e6, "algbw_gbps": algbw_gbps(nbytes, slowest), "wrong": wrong}
        factor = busbw_factor(coll, self.ranks)
        # One rank moves nothing over any bus: nccl-tests prints 0 there, we leave busbw out.
        if factor is not None and self.ranks > 1:
            result["busbw_gbps"] = result["algbw_gbps"] * factor
        del inp, out
        return result


def _fault(cfg, index):
    """Fault injection for tests: one rank exits (a crash) or stops (a hang) at a given step."""
    fault = cfg.get("fault") or {}
    if not fault or int(fault.get("rank", -1)) != cfg["rank"] or int(fault.get("nodes", -1)) != cfg["nodes"]:
        return
    if index != int(fault.get("after_steps", 0)):
        return
    if fault.get("mode", "exit") == "hang":
        time.sleep(10 ** 6)
    if fault.get("mode") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(int(fault.get("exit_code", 3)))


def _redirect_output(path):
    """Send this process's stdout and stderr (C level too: gloo, NCCL) to the log of the current world."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def run_world(cfg, torch, dist):
    """One world: rendezvous, the sweep, destroy. Returns 0 when every step ran, else the failure's exit code."""
    results = open(cfg["results"], "a", buffering=1)

    def emit(record):
        results.write(json.dumps(record) + "\n")
        results.flush()

    progress = Progress(cfg)
    env = {"type": "env", "rank": cfg["rank"], "torch": torch.__version__, "backend": cfg["backend"],
           "device": cfg["device"]}
    if cfg["device"].startswith("cuda"):
        torch.cuda.set_device(torch.device(cfg["device"]))
        env["device_name"] = torch.cuda.get_device_name(torch.device(cfg["device"]))
        try:
            env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001
            env["nccl"] = None
    emit(env)

    rank, world = cfg["rank"], cfg["world"]
    progress(-1, "rendezvous at %s:%s" % (cfg["master_addr"], cfg["master_port"]), "rendezvous")
    try:
        store = dist.TCPStore(cfg["master_addr"], int(cfg["master_port"]), world, rank == 0,
                              timeout=timedelta(seconds=float(cfg["rdzv_timeout"])), wait_for_workers=False)
        store.set("up/%d" % rank, "1")
        try:
            store.wait(["up/%d" % r for r in range(world)], timedelta(seconds=float(cfg["rdzv_timeout"])))
        except Exception as exc:  # noqa: BLE001 - DistStoreError / RuntimeError by torch version
            missing = [r for r in range(world) if not store.check(["up/%d" % r])]
            emit({"type": "error", "kind": "rendezvous", "step": -1, "missing_ranks": missing,
                  "error": "rendezvous timed out after %s s: ranks %s never arrived (%s)"
                           % (cfg["rdzv_timeout"], ",".join(map(str, missing)), str(exc).splitlines()[0])})
            progress(-1, "rendezvous", "failed")
            return 4
        dist.init_process_group(cfg["backend"], store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=float(cfg["op_timeout"])))
    except Exception as exc:  # noqa: BLE001
        emit({"type": "error", "kind": "rendezvous", "step": -1,
              "error": "rendezvous at %s:%s failed: %s" % (cfg["master_addr"], cfg["master_port"],
                                                             str(exc).strip().splitlines()[0] if str(exc) else exc)})
        progress(-1, "rendezvous", "failed")
        return 4

    sweep = Sweep(cfg, torch, dist)
    elem = DTYPES[cfg.get("dtype", "float32")]
    steps = plan_steps(cfg["collectives"], cfg["sizes"], world, elem)
    index = -1
    try:
        for index, step in enumerate(steps):
            progress(index, step_label(step), "run")
            _fault(cfg, index)
            if not sweep.fits(step[3]):
                emit({"type": "skip", "step": index, "collective": step[0], "placement": step[1],
                      "size_bytes": step[3], "reason": "buffers do not fit in memory on every rank"})
                continue
            emit(sweep.run_step(index, step))
        dist.destroy_process_group()
        progress(len(steps), "done", "done")
    except Exception as exc:  # noqa: BLE001 - the failure is data for the parent
        text = str(exc).strip()
        kind = "hang" if "timed out" in text.lower() or "timeout" in text.lower() else "error"
        emit({"type": "error", "kind": kind, "step": index,
              "label": step_label(steps[index]) if 0 <= index < len(steps) else None,
              "error": "%s: %s" % (type(exc).__name__, text.splitlines()[0] if text else "")})
        progress(index, step_label(steps[index]) if 0 <= index < len(steps) else "?", "failed")
        return 1
    finally:
        results.close()
        if progress.store is not None:
            progress.store.close()
    return 0


def main(config_path):
    """Import torch once, then run the worlds the parent sends on stdin (one JSON object per line) until EOF.
    After a failed world the process exits: a broken process group is not reused."""
    with open(config_path) as fh:
        base = json.load(fh)
    try:
        import torch  # noqa: PLC0415 - the parent runs without torch
        import torch.distributed as dist  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write("cannot import torch: %s\n" % exc)
        return 2
    for line in sys.stdin:
        if not line.strip():
            continue
        cfg = dict(base, **json.loads(line))
        _redirect_output(cfg["log"])
        rc = run_world(cfg, torch, dist)
        if rc:
            return rc
    return 0


def launched_main():
    """One rank started by srun, mpirun or torchrun (probes/common/launch.py) for one world: the rank from the
    launcher, the world's settings from CMXA_LAUNCH, this node's work directory, log and interface from the run's
    store (launch.LaunchedRank), so one command line serves every node."""
    from probes.common.launch import LaunchedRank, LaunchedRankError  # noqa: PLC0415

    try:
        me = LaunchedRank()
    except LaunchedRankError as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    launch, node, key, rank = me.launch, me.node, me.key, me.rank
    files = {k: os.path.join(node["work"], "%s.r%d.%s" % (key, rank, k)) for k in ("results", "progress")}
    _redirect_output(node["log"])
    master = me.master(float(launch["rdzv_timeout"]))
    if master is None:
        me.fail("rendezvous", 4, "rank 0 never published its address")
        return 4
    cfg = dict(launch["settings"], rank=rank, world=me.world, local_rank=me.local_rank, nodes=launch["nodes"],
               master_addr=master, master_port=launch["world_port"], results=files["results"],
               progress=files["progress"], key=key, log=node["log"], store=launch["store"],
               device=("cuda:%d" % me.local_rank) if launch["settings"]["backend"] == "nccl" else "cpu")
    try:
        import torch  # noqa: PLC0415
        import torch.distributed as dist  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        me.fail("error", 2, "cannot import torch: %s" % exc)
        return 2
    rc = run_world(cfg, torch, dist)
    record = {"status": "ok", "rc": 0}
    if rc:
        errors = []
        with open(files["results"]) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("type") == "error":
                    errors.append(rec)
        err = errors[-1] if errors else {}
        record = {"status": err.get("kind", "error"), "rc": rc, "error": err.get("error")}
    me.done(record)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
