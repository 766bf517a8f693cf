"""Fidelity of the GPU compute probes (run by hand, not collected by pytest):

    .venv/bin/python tests/benchmarks/bench_compute_fidelity.py [--rounds 3] [--threads 1]

In one process, on the backend this machine has (CUDA when torch sees a GPU, else the CPU):
1. gemm: our probe (probes/gpu_compute/gemm.py: workers, L2 flush before each iteration, per-iteration timing,
   TFLOP/s from the mean time) against a bare ten-line torch.mm timing loop on the same shape and dtype;
2. copy_bw: our probe (pinned host-to-device on CUDA, host-to-host on the CPU) against a bare tensor-copy loop.
Each round runs the probe and the bare loop back to back (alternating which goes first); the ratio is the median
of the per-round ratios, so that other load on the machine hits both sides alike. Prints the ratios (probe / bare,
target >= 0.97: the probe's machinery must not cost what users will see as a lower number than their own loop).
Exits 1 when a ratio is below the target.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from probes.cli import run_probe  # noqa: E402

TARGET = 0.97


def bare_mm(m, n, k, dtype, device, warmup, iters):
    """The ten-line loop a user writes: allocate, warm up, time `iters` matmuls. Returns (TFLOP/s over the whole
    loop, TFLOP/s of the fastest iteration)."""
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(n, k, dtype=dtype, device=device).t()
    c = torch.empty(m, n, dtype=dtype, device=device)
    return _bare_loop(lambda: torch.mm(a, b, out=c), 2 * m * n * k / 1e12, device, warmup, iters)


def _bare_loop(op, work, device, warmup, iters):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        op()
    sync()
    times = []
    t_all = time.perf_counter()
    for _ in range(iters):
        t0 = time.perf_counter()
        op()
        if device != "cuda":
            times.append(time.perf_counter() - t0)
    sync()
    total = time.perf_counter() - t_all
    if device == "cuda":  # the fastest iteration needs events on a GPU (host timers see only the launch)
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(iters)]
        for start, end in ev:
            start.record()
            op()
            end.record()
        sync()
        times = [s.elapsed_time(e) / 1000 for s, e in ev]
    return work * iters / total, work / min(times)


def bare_copy(nbytes, device, warmup, iters):
    """The same for a copy: pinned host to device on CUDA, host to host on the CPU; (GB/s, GB/s of the fastest)."""
    if device == "cuda":
        src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
        dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    else:
        src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
        dst = torch.empty(nbytes, dtype=torch.uint8)
    return _bare_loop(lambda: dst.copy_(src, non_blocking=True), nbytes / 1e9, device, warmup, iters)


def probe_values(name, params, metrics, **labels):
    """(headline, fastest iteration) of a probe run: e.g. tflops (mean time) and tflops_max."""
    with tempfile.TemporaryDirectory() as out:
        _, doc = run_probe(name, out, "bench", "bench", params=params)
    if doc["status"] != "ok":
        raise SystemExit("%s probe: %s %s" % (name, doc["status"], doc.get("reason")))
    out = []
    for metric in metrics:
        out.append(max(r["value"] for r in doc["results"] if r["metric"] == metric
                       and all(r["labels"].get(k) == v for k, v in labels.items())))
    return tuple(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU backend (both sides)")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    if gpu:
        m = n = k = 8192
        warmup, iters, nbytes, copy_iters = 20, 50, 512 << 20, 20
    else:
        # large enough that re-reading the operands after each cache flush (the probe's methodology, not the bare
        # loop's) costs well under 1 % of an iteration
        m = n = k = 3072
        warmup, iters, nbytes, copy_iters = 1, 6, 256 << 20, 10
    torch.set_num_threads(args.threads)
    print("backend %s, torch %s%s" % (device, torch.__version__,
                                      ", %s" % torch.cuda.get_device_name(0) if gpu else
                                      ", %d thread(s)" % args.threads))
    gemm_params = {"profile": "quick", "dtypes": ["bf16"], "shapes": [["fidelity", m, n, k]], "warmup": warmup,
                   "iters": iters, "cpu_threads": args.threads, "gpus": [0] if gpu else None}
    copy_params = {"profile": "quick", "bytes": nbytes, "warmup": 3, "iters": copy_iters,
                   "cpu_threads": args.threads, "gpus": [0] if gpu else None}
    direction = "h2d" if gpu else "host_local"
    probe_mm, bare_mm_v, probe_cp, bare_cp = [], [], [], []
    for i in range(args.rounds):
        # alternate which side goes first, so that a drift of the machine's load does not favour one side
        steps = [lambda: probe_mm.append(probe_values("gemm", gemm_params, ("tflops", "tflops_max"), dtype="bf16")),
                 lambda: bare_mm_v.append(bare_mm(m, n, k, torch.bfloat16, device, warmup, iters))]
        steps += [lambda: probe_cp.append(probe_values("copy_bw", copy_params, ("gbps", "gbps_max"),
                                                       direction=direction)),
                  lambda: bare_cp.append(bare_copy(nbytes, device, 3, copy_iters))]
        order = [0, 1, 2, 3] if i % 2 == 0 else [1, 0, 3, 2]
        for step in order:
            torch.set_num_threads(args.threads)
            steps[step]()
    rows = [("gemm bf16 %dx%dx%d" % (m, n, k), "TFLOP/s", probe_mm, bare_mm_v),
            ("copy_bw %s %d MiB" % (direction, nbytes >> 20), "GB/s", probe_cp, bare_cp)]
    failed = False
    for what, unit, probe, bare in rows:
        for which, idx in (("mean time (the headline)", 0), ("fastest iteration", 1)):
            p = [v[idx] for v in probe]
            b = [v[idx] for v in bare]
            # each round's probe and bare loop ran back to back under the same load: compare them pairwise
            ratio = statistics.median(x / y for x, y in zip(p, b))
            if idx == 0:
                failed |= ratio < TARGET
            print("%-30s %-25s probe %8.4g  bare loop %8.4g %s (medians)  ratio %.3f%s" % (
                what, which, statistics.median(p), statistics.median(b), unit, ratio,
                "" if ratio >= TARGET else "  (below %.2f)" % TARGET))
            print("%-30s %-25s rounds: probe %s | bare %s" % ("", "", " ".join("%.4g" % v for v in p),
                                                              " ".join("%.4g" % v for v in b)))
    print("ratio = median over rounds of probe / bare (each round runs both back to back); target >= %.2f on the "
          "mean-time headline" % TARGET)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
