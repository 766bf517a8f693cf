"""grouped_gemm: MoE expert GEMMs (gate_up and down projections) of DeepSeek-V3 and V4 Pro, Kimi K2, K2.5 and K3,
and GPT-OSS-120B, with their shared experts.

Shapes from probes/gpu_compute/shapes.py (MOE_MODELS, with the config.json each number comes from). A token batch
of T tokens routes T x top_k rows; with expert parallelism ep each GPU holds experts / ep experts and gets its
experts' share, split as evenly as integers allow (balanced routing). One projection over the local experts is
torch._grouped_mm (one kernel; fp8 e4m3: torch._scaled_grouped_mm with row-wise scales) where it runs here, else
one torch.mm (torch._scaled_mm) per expert, and the `impl` label says which. MXFP8, NVFP4 and tf32 grouped GEMMs
are "not implemented" where the GPU could run them, "skipped" with the reason where it cannot.
FLOPs: sum over experts of 2 * rows_e * n * k. Metrics per (model, proj, tokens) and GPU: `tflops`,
`tflops_median`, `tflops_max`; raw times in grouped_gemm.times.jsonl.
"""

from probes.gpu_compute import launch
from probes.gpu_compute.backend import (
    GROUPED_DTYPES,
    LOOP_IMPL,
    gemm_support,
    grouped_impl,
    make_grouped,
)
from probes.gpu_compute.shapes import (
    GROUPED_GEMM,
    MOE_MODELS,
    PROJECTIONS,
    grouped_gemm_flops,
    local_groups,
    moe_projection,
    rate_stats,
    tflops,
)

PARAMS = launch.compute_params(GROUPED_GEMM)
# The grouped GEMMs of the seed's dtype list that this version does not measure, and what measuring them needs.
NOT_IMPLEMENTED = {
    "tf32": "grouped GEMM in tf32 math mode is not implemented in this version (fp32 inputs with tf32 tensor-core "
            "math through torch._grouped_mm is not measured)",
    "mxfp8": "MXFP8 grouped GEMM with its per-32 e8m0 block scales (cuBLASLt grouped, DeepGEMM) is not implemented in "
             "this version",
    "nvfp4": "NVFP4 grouped GEMM with its per-16 e4m3 block scales (cuBLASLt grouped) is not implemented in this "
             "version",
}


def worker(torch, dev, spec, emit):
    sweep = launch.Sweep(torch, dev, spec, emit)
    ep = int(spec["ep"])
    fell_back = set()
    for dtype in spec["dtypes"]:
        # what the GPU cannot do is "skipped" with its reason; what it can do but this probe does not measure is
        # "not implemented"
        why = gemm_support(torch, dtype, dev.backend, dev.device)
        if why:
            launch.dtype_skipped(emit, dtype, why)
            continue
        if dtype not in GROUPED_DTYPES:
            launch.dtype_not_implemented(emit, dtype, NOT_IMPLEMENTED[dtype])
            continue
        impl, why = grouped_impl(torch, dtype, dev.device, dev.backend)
        if why:
            launch.fact(emit, "impl_reason.%s" % dtype, why)
        errors = []
        for model in spec["models"]:
            for proj in PROJECTIONS:
                n, k = moe_projection(model, proj)
                weights = None  # this projection's local experts, made once for all token batches
                for tokens in spec["tokens"]:
                    rows = local_groups(model, tokens, ep)
                    times, failure = None, None
                    # torch's grouped kernel first; if it refuses this configuration (e.g. group sizes it cannot
                    # take), the per-expert loop measures it instead and the impl label says so
                    for attempt in ([impl, LOOP_IMPL] if impl != LOOP_IMPL else [LOOP_IMPL]):
                        try:
                            used, times, keep = sweep.measure(make_grouped, torch, dtype, rows, n, k, dev.device,
                                                              attempt, weights, dev.backend)
                            weights = keep[1]
                            del keep  # this batch's activations; the weights serve the next batch
                            break
                        except Exception as exc:  # noqa: BLE001 - one failing configuration is reported
                            failure = launch.failure("%s %s tokens=%d (%s)" % (model, proj, tokens, attempt), exc)
                            if attempt != LOOP_IMPL and dtype not in fell_back:
                                fell_back.add(dtype)  # the first refusal says why; the labels say where
                                launch.fact(emit, "impl_fallback.%s" % dtype, failure)
                    if times is None:
                        errors.append(failure)
                        continue
                    flops = grouped_gemm_flops(rows, n, k)
                    stats = rate_stats(flops, times, tflops)
                    labels = {"dtype": dtype, "model": model, "proj": proj, "tokens": int(tokens), "ep": ep,
                              "experts_local": len(rows), "rows": sum(rows), "n": n, "k": k, "impl": used}
                    launch.result(emit, "tflops", stats["mean"], "TFLOP/s", **labels)
                    launch.result(emit, "tflops_median", stats["median"], "TFLOP/s", **labels)
                    launch.result(emit, "tflops_max", stats["max"], "TFLOP/s", **labels)
                    launch.raw(emit, flops=flops, group_rows=rows, times_s=[round(t, 12) for t in times], **labels)
        launch.dtype_outcome(emit, dtype, "error" if errors else "ok", "; ".join(errors) or None)


def run(art, params, out_dir):
    def spec(config, dtypes):
        models = list(config["models"])
        unknown = [m for m in models if m not in MOE_MODELS]
        if unknown:
            raise ValueError("unknown MoE model(s) %s; known: %s" % (", ".join(unknown), ", ".join(MOE_MODELS)))
        for model in models:
            local_groups(model, 1, config["ep"])  # experts divisible by ep, checked before any worker starts
        art.facts["models"] = ",".join(models)
        art.facts["ep"] = int(config["ep"])
        return {"models": models, "tokens": [int(t) for t in config["tokens"]], "ep": int(config["ep"])}

    launch.run_compute_probe(art, params, out_dir, "grouped_gemm", GROUPED_GEMM, ["bf16"], spec)
