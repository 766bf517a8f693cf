"""grouped_gemm: MoE expert GEMMs (gate_up and down projections) of DeepSeek-V3 and V4 Pro, Kimi K2, K2.5 and K3,
and GPT-OSS-120B, with their shared experts.

Shapes from probes/gpu_compute/shapes.py (MOE_MODELS, with the config.json each number comes from). A token batch
of T tokens routes T x top_k rows; with expert parallelism ep each GPU holds experts / ep experts and gets its
experts' share, split as evenly as integers allow (balanced routing). One projection over the local experts is
torch._grouped_mm (one kernel; fp8 e4m3: torch._scaled_grouped_mm with row-wise scales) where it runs here, else
one torch.mm (torch._scaled_mm) per expert, and the `impl` label says which. tf32 (fp32 with TF32 math) and the
block-scaled MXFP8 and NVFP4 (real quantized operands, scales in cuBLASLt's layout, the product checked against
the dequantized operands first: backend.block_scaled_error) go through the per-expert loop. A dtype the GPU cannot
run is "skipped" with the reason.
With library=deep_gemm (the role's `deepgemm` variant) the same shapes go through DeepGEMM's m-grouped contiguous
kernels (probes/gpu_compute/deepgemm.py; impl deep_gemm.<function>), bf16 and fp8 e4m3 with DeepSeek's 1x128 and
128x128 scales, where deep_gemm is installed; skipped with the reason elsewhere.
FLOPs: sum over experts of 2 * rows_e * n * k. Metrics per (model, proj, tokens) and GPU: `tflops`,
`tflops_median`, `tflops_max`; raw times in grouped_gemm.times.jsonl.
"""

import importlib.util

from probes.common import device
from probes.gpu_compute import launch
from probes.gpu_compute.backend import LOOP_IMPL, Unsupported, grouped_impl, make_grouped, matmul_mode
from probes.gpu_compute.deepgemm import GROUPED_API as DEEPGEMM_API
from probes.gpu_compute.deepgemm import import_deep_gemm, make_grouped_deepgemm
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
from probes.params import Param

LIBRARIES = ("torch", "deep_gemm")

PARAMS = launch.compute_params(GROUPED_GEMM, library=Param(
    str, "torch", "whose kernels: torch (torch._grouped_mm, torch._scaled_grouped_mm, else one torch.mm / "
                  "torch._scaled_mm per expert) or deep_gemm (DeepGEMM's grouped kernels: bf16, fp8_e4m3)",
    choices=LIBRARIES))


def _attempts(torch, dtype, dev, library, deep_gemm, emit):
    """The ways to measure one projection, in order of preference: [(label, make(rows, n, k, weights))]. torch's
    grouped kernel first and, if it refuses a configuration, the per-expert loop (the impl label says which);
    DeepGEMM's kernel alone (a refusal is its result)."""
    if library == "deep_gemm":
        return [("deep_gemm", lambda rows, n, k, w: make_grouped_deepgemm(torch, deep_gemm, dtype, rows, n, k,
                                                                           dev.device, w))]
    impl, why = grouped_impl(torch, dtype, dev.device, dev.backend)
    if why:
        launch.fact(emit, "impl_reason.%s" % dtype, why)
    return [(attempt, lambda rows, n, k, w, attempt=attempt: make_grouped(torch, dtype, rows, n, k, dev.device,
                                                                          attempt, w, dev.backend))
            for attempt in ([impl, LOOP_IMPL] if impl != LOOP_IMPL else [LOOP_IMPL])]


def _library_gate(torch, dtype, dev, library, deep_gemm):
    """Why this library cannot measure dtype here (a skip), or None."""
    if library != "deep_gemm":
        return None
    if deep_gemm is None:
        return import_deep_gemm()[1]
    if dtype not in DEEPGEMM_API:
        return "DeepGEMM has no grouped %s kernel (its grouped kernels: %s)" % (dtype, ", ".join(DEEPGEMM_API))
    try:
        make_grouped_deepgemm(torch, deep_gemm, dtype, [0], 128, 128, dev.device)  # its static checks only
    except Unsupported as exc:
        return str(exc)
    except Exception:  # noqa: BLE001 - a configuration it cannot take is found by measuring, with its reason
        return None
    return None


def worker(torch, dev, spec, emit):
    sweep = launch.Sweep(torch, dev, spec, emit)
    ep = int(spec["ep"])
    library = spec["library"]
    deep_gemm = import_deep_gemm()[0] if library == "deep_gemm" else None
    fell_back = set()
    for dtype in spec["dtypes"]:
        with matmul_mode(torch, dtype, dev.backend):
            # what the GPU cannot do is "skipped" with its reason; a block-scaled product that runs but is wrong is
            # an error
            if not launch.dtype_runs(emit, torch, dtype, dev):
                continue
            why = _library_gate(torch, dtype, dev, library, deep_gemm)
            if why:
                launch.dtype_skipped(emit, dtype, why)
                continue
            attempts = _attempts(torch, dtype, dev, library, deep_gemm, emit)
            errors = []
            for model in spec["models"]:
                for proj in PROJECTIONS:
                    n, k = moe_projection(model, proj)
                    weights = None  # this projection's local experts, made once for all token batches
                    for tokens in spec["tokens"]:
                        rows = local_groups(model, tokens, ep)
                        times, failure = None, None
                        for label, make in attempts:
                            try:
                                used, times, keep = sweep.measure(make, rows, n, k, weights)
                                weights = keep[1]
                                del keep  # this batch's activations; the weights serve the next batch
                                break
                            except Exception as exc:  # noqa: BLE001 - one failing configuration is reported
                                failure = launch.failure("%s %s tokens=%d (%s)" % (model, proj, tokens, label), exc)
                                if label != attempts[-1][0] and dtype not in fell_back:
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
                        launch.raw(emit, flops=flops, group_rows=rows, times_s=[round(t, 12) for t in times],
                                   **labels)
            launch.dtype_outcome(emit, dtype, "error" if errors else "ok", "; ".join(errors) or None)


def run(art, params, out_dir):
    if params["library"] == "deep_gemm":
        # before any worker starts: DeepGEMM's kernels are NVIDIA's SM90/SM100 only, and the package must be there
        dev, _, facts = device.describe()
        if dev["backend"] != "cuda":
            art.device = dev
            art.skip("DeepGEMM runs on NVIDIA GPUs (SM90 / SM100) only; this node has none (%s)" % (
                facts.get("gpu_error") or "backend %s" % dev["backend"]))
            return
        if importlib.util.find_spec("deep_gemm") is None:
            art.device = dev
            art.skip(import_deep_gemm()[1] + "; the tools step does not build it")
            return

    def spec(config, dtypes):
        models = list(config["models"])
        unknown = [m for m in models if m not in MOE_MODELS]
        if unknown:
            raise ValueError("unknown MoE model(s) %s; known: %s" % (", ".join(unknown), ", ".join(MOE_MODELS)))
        for model in models:
            local_groups(model, 1, config["ep"])  # experts divisible by ep, checked before any worker starts
        art.facts["models"] = ",".join(models)
        art.facts["ep"] = int(config["ep"])
        art.facts["library"] = params["library"]
        return {"models": models, "tokens": [int(t) for t in config["tokens"]], "ep": int(config["ep"]),
                "library": params["library"]}

    launch.run_compute_probe(art, params, out_dir, "grouped_gemm", GROUPED_GEMM, ["bf16"], spec)
