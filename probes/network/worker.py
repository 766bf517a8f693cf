"""The collectives sweep: the job of every rank of a collectives world (probes/network/collectives.py starts the
worlds through probes/common/worlds.py; probes/common/rank.py runs this job in each rank once its process group is
up, gloo on CPU or nccl on GPUs). For each collective, message size and placement (in-place / out-of-place where
torch has both):

- warm-up iterations, then the iteration count every rank agrees on (max over ranks of the warm-up time decides);
- the mean time of the timed iterations on each rank, and the max over ranks (the collective is done when its
  slowest rank is): algbw = bytes / time, busbw = algbw × the collective's factor (probes/network/busbw.py);
- one more call on patterned data whose correct result is known, counting the elements that are wrong (#wrong).

Every result is one record of the rank's results as soon as it is measured, so a crash keeps what came before.
"""

import time

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


def sweep(cfg, torch, dist, emit, progress):
    """The collectives sweep as a world's job (probes/common/rank.py): every step of the plan, in order."""
    sweeper = Sweep(cfg, torch, dist)
    steps = plan_steps(cfg["collectives"], cfg["sizes"], cfg["world"], DTYPES[cfg.get("dtype", "float32")])
    for index, step in enumerate(steps):
        progress(index, step_label(step), "run")
        if not sweeper.fits(step[3]):
            emit({"type": "skip", "step": index, "collective": step[0], "placement": step[1],
                  "size_bytes": step[3], "reason": "buffers do not fit in memory on every rank"})
            continue
        emit(sweeper.run_step(index, step))
