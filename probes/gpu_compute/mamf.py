"""mamf: Maximum Achievable Matmul FLOPS, a mamf-finder-style shape sweep on every GPU at once, per dtype.

For each (m, n, k) of the profile's sweep (probes/gpu_compute/shapes.py: MAMF): torch.mm (or torch._scaled_mm for
fp8 and the block-scaled formats), warm-ups, L2 flushed before every timed iteration, CUDA events; TFLOP/s =
2*m*n*k / mean time, as mamf-finder computes it. Results per GPU and dtype: `tflops` for every shape (the sweep
curve), `mamf_tflops` (the best shape: the MAMF, labelled with that shape) and `mamf_geomean_tflops` (geometric
mean over the sweep). Raw times in mamf.times.jsonl.
"""

from probes.gpu_compute import launch
from probes.gpu_compute.backend import make_gemm, matmul_mode
from probes.gpu_compute.shapes import MAMF, gemm_flops, geomean, mamf_shapes, rate_stats, tflops

PARAMS = launch.compute_params(MAMF)


def worker(torch, dev, spec, emit):
    sweep = launch.Sweep(torch, dev, spec, emit)
    shapes = [tuple(s) for s in spec["shapes"]]
    for dtype in spec["dtypes"]:
        with matmul_mode(torch, dtype, dev.backend):
            if not launch.dtype_runs(emit, torch, dtype, dev):
                continue
            curve, errors = [], []
            for m, n, k in shapes:
                try:
                    impl, times = sweep.measure(make_gemm, torch, dtype, m, n, k, dev.device, dev.backend)[:2]
                except Exception as exc:  # noqa: BLE001 - a shape that fails is reported; the sweep goes on
                    errors.append(launch.failure("%dx%dx%d" % (m, n, k), exc))
                    continue
                stats = rate_stats(gemm_flops(m, n, k), times, tflops)
                labels = {"dtype": dtype, "m": m, "n": n, "k": k}
                launch.result(emit, "tflops", stats["mean"], "TFLOP/s", **labels)
                launch.raw(emit, flops=gemm_flops(m, n, k), impl=impl, times_s=[round(t, 12) for t in times],
                           **labels)
                curve.append((stats["mean"], m, n, k))
            if curve:
                best = max(curve)
                launch.result(emit, "mamf_tflops", best[0], "TFLOP/s", dtype=dtype, m=best[1], n=best[2], k=best[3])
                launch.result(emit, "mamf_geomean_tflops", geomean([c[0] for c in curve]), "TFLOP/s", dtype=dtype,
                              shapes=len(curve))
            status = "error" if errors or not curve else "ok"
            launch.dtype_outcome(emit, dtype, status, "; ".join(errors) or (None if curve else "no shape measured"))


def run(art, params, out_dir):
    def spec(config, dtypes):
        shapes = mamf_shapes(config["sweep"])
        art.facts["sweep"] = "m=%s n=%s k=%s (%d shapes)" % (config["sweep"]["m"], config["sweep"]["n"],
                                                           config["sweep"]["k"], len(shapes))
        return {"shapes": [list(s) for s in shapes]}

    launch.run_compute_probe(art, params, out_dir, "mamf", MAMF, ["bf16"], spec)
