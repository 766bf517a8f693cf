"""gemv: skinny matrix-vector products, the memory-bound decode proxy, in GB/s against the HBM peak.

y[m] = W[m,k] @ x[k] with torch.mv on every GPU at once. Bytes per call: (m*k + k + m) * element size (read W and
x, write y, each once); W is far larger than L2 and the cache is flushed before every timed iteration, so the
number is HBM bandwidth. Metrics per shape and GPU: `gbps` (bytes / mean time), `gbps_median`, `gbps_max`, and
`tflops` for reference; raw times in gemv.times.jsonl.
"""

from probes.gpu_compute import launch
from probes.gpu_compute.backend import make_gemv, trial
from probes.gpu_compute.shapes import GEMV, gbps, gemv_bytes, gemv_flops, rate_stats, tflops

PARAMS = launch.compute_params(GEMV)


def worker(torch, dev, spec, emit):
    sweep = launch.Sweep(torch, dev, spec, emit)
    for dtype in spec["dtypes"]:
        refused = trial(torch, dev.backend, dev.device, lambda d=dtype: make_gemv(torch, d, 256, 256, dev.device))
        if refused:  # skipped (no such dtype here) or error (a GPU that has it failed)
            launch.dtype_refused(emit, dtype, refused)
            continue
        errors = []
        for name, m, k in spec["shapes"]:
            m, k = int(m), int(k)
            try:
                impl, times = sweep.measure(make_gemv, torch, dtype, m, k, dev.device)[:2]
            except Exception as exc:  # noqa: BLE001 - one failing shape is reported, the others still run
                errors.append(launch.failure("%s %dx%d" % (name, m, k), exc))
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
