"""gemv: skinny matrix-vector products, the memory-bound decode proxy, in GB/s against the HBM peak.

y[m] = W[m,k] @ x[k] with torch.mv on every GPU at once. Bytes per call: (m*k + k + m) * element size (read W and
x, write y, each once); W is far larger than L2 and the cache is flushed before every timed iteration, so the
number is HBM bandwidth. Metrics per shape and GPU: `gbps` (bytes / mean time), `gbps_median`, `gbps_max`, and
`tflops` for reference; raw times in gemv.times.jsonl.
"""

from probes.lib import compute_launch as launch
from probes.lib.compute_backend import make_gemv, trial
from probes.lib.compute_flops import gbps, gemv_bytes, gemv_flops, rate_stats, tflops
from probes.lib.compute_shapes import GEMV
from probes.lib.compute_timing import Timer, flush_size


def worker(torch, dev, spec, emit):
    flush_bytes = flush_size(torch, dev.backend, spec)
    timer = Timer(torch, dev.backend, dev.device, flush_bytes)
    launch.fact(emit, "flush_bytes", flush_bytes)
    warmed = False
    for dtype in spec["dtypes"]:
        why = trial(torch, dev.backend, dev.device, lambda d=dtype: make_gemv(torch, d, 256, 256, dev.device))
        if why:
            launch.dtype_outcome(emit, dtype, "skipped", why if why.startswith(dtype) else "%s: %s" % (dtype, why))
            continue
        errors = []
        for name, m, k in spec["shapes"]:
            m, k = int(m), int(k)
            try:
                op, impl, keep = make_gemv(torch, dtype, m, k, dev.device)
                if not warmed:
                    timer.warm(op, spec["warmup_s"])
                    warmed = True
                times = timer.time(op, spec["warmup"], spec["iters"])
                del op, keep
            except Exception as exc:  # noqa: BLE001 - one failing shape is reported, the others still run
                if launch.fatal(exc):
                    raise
                errors.append("%s %dx%d: %s: %s" % (name, m, k, type(exc).__name__, str(exc).strip()[:200]))
                continue
            nbytes = gemv_bytes(m, k, dtype)
            stats = rate_stats(nbytes, times, gbps)
            labels = {"dtype": dtype, "shape": name, "m": m, "k": k, "impl": impl}
            launch.result(emit, "gbps", stats["mean"], "GB/s", **labels)
            launch.result(emit, "gbps_median", stats["median"], "GB/s", **labels)
            launch.result(emit, "gbps_max", stats["max"], "GB/s", **labels)
            launch.result(emit, "tflops", tflops(gemv_flops(m, k), stats["time_mean_s"]), "TFLOP/s", **labels)
            launch.raw(emit, bytes=nbytes, times_s=[round(t, 12) for t in times], **labels)
        launch.dtype_outcome(emit, dtype, "error" if errors else "ok", "; ".join(errors) or None)


def run(art, params, out_dir):
    def spec(config, dtypes):
        return {"shapes": [[str(name), int(m), int(k)] for name, m, k in config["shapes"]]}

    launch.run_compute_probe(art, params, out_dir, "gemv", GEMV, ["bf16"], spec)
