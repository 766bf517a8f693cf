"""gemm: dense matmul throughput per dtype (bf16, fp16, tf32, fp32, fp8 e4m3, mxfp8, nvfp4), every GPU at once.

Square and transformer (Llama-3.1-70B) shapes from probes/gpu_compute/shapes.py, by profile. Per shape and GPU:
`tflops` (2*m*n*k / mean time, as mamf-finder reports), `tflops_median` and `tflops_max` (fastest iteration);
every iteration's time is kept in gemm.times.jsonl. A dtype this GPU or torch cannot run is skipped with the
reason (facts dtype.<d>, dtype_reason.<d>); the others are still measured.
"""

from probes.gpu_compute import launch
from probes.gpu_compute.backend import make_gemm, matmul_mode
from probes.gpu_compute.shapes import DTYPES, GEMM, gemm_flops, gemm_shapes, rate_stats, tflops

PARAMS = launch.compute_params(GEMM)


def worker(torch, dev, spec, emit):
    sweep = launch.Sweep(torch, dev, spec, emit)
    for dtype in spec["dtypes"]:
        with matmul_mode(torch, dtype, dev.backend):
            if not launch.dtype_runs(emit, torch, dtype, dev):
                continue
            errors = []
            for name, m, n, k in spec["shapes"]:
                try:
                    impl, times = sweep.measure(make_gemm, torch, dtype, m, n, k, dev.device, dev.backend)[:2]
                except Exception as exc:  # noqa: BLE001 - one failing shape is reported, the others still run
                    errors.append(launch.failure("%s %dx%dx%d" % (name, m, n, k), exc))
                    continue
                flops = gemm_flops(m, n, k)
                stats = rate_stats(flops, times, tflops)
                labels = {"dtype": dtype, "shape": name, "m": m, "n": n, "k": k, "impl": impl}
                launch.result(emit, "tflops", stats["mean"], "TFLOP/s", **labels)
                launch.result(emit, "tflops_median", stats["median"], "TFLOP/s", **labels)
                launch.result(emit, "tflops_max", stats["max"], "TFLOP/s", **labels)
                launch.raw(emit, flops=flops, times_s=[round(t, 12) for t in times], **labels)
            launch.dtype_outcome(emit, dtype, "error" if errors else "ok", "; ".join(errors) or None)


def run(art, params, out_dir):
    def spec(config, dtypes):
        return {"shapes": gemm_shapes(config)}

    launch.run_compute_probe(art, params, out_dir, "gemm", GEMM, list(DTYPES), spec)
