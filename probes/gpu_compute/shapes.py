"""What the GPU compute probes measure in each profile: shapes, sweeps, token batches, copy sizes, iterations.

Two size classes per profile: `gpu` (CUDA/ROCm: the real shapes) and `cpu` (the CPU backend: small shapes that
exercise the same code in seconds, so the quick profile finishes on a 2-core CI machine running four test hosts).
A probe's `params` may override any entry (e.g. `{"shapes": [["s", 1024, 1024, 1024]], "iters": 5}`); what was
measured is always in the result labels and the artifact facts.

And what a shape costs: its FLOP and byte counts, and the rates and statistics of its timed iterations (pure
functions, no torch; units TFLOP/s = 1e12 FLOP/s, GB/s = 1e9 B/s, as mamf-finder, nvbandwidth and the datasheets).
"""

import itertools
import math

from probes.params import SIZE, Param

PROFILES = ("quick", "standard", "full")
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "mxfp8", "nvfp4")
MAMF_ORDER = ("bf16", "fp8_e4m3", "mxfp8", "nvfp4", "fp16", "tf32", "fp32")

# Llama-3.1-70B projections at 8192 tokens (hidden 8192; 64 query heads and 8 KV heads of 128; SwiGLU MLP 28672,
# gate and up fused). Source: https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
# (hidden_size, num_attention_heads, num_key_value_heads, intermediate_size).
LLAMA70B_SHAPES = [
    ("llama70b_qkv", 8192, 10240, 8192),
    ("llama70b_attn_out", 8192, 8192, 8192),
    ("llama70b_mlp_up", 8192, 57344, 8192),
    ("llama70b_mlp_down", 8192, 8192, 28672),
]


def _square(*sizes):
    return [("square_%d" % s, s, s, s) for s in sizes]


GEMM = {
    "cpu": {
        "quick": {"shapes": _square(256) + [("mlp_128x512x256", 128, 512, 256)], "warmup": 1, "iters": 3,
                  "warmup_s": 0},
        "standard": {"shapes": _square(512, 1024) + [("mlp_512x2048x1024", 512, 2048, 1024)], "warmup": 2,
                     "iters": 10, "warmup_s": 0},
        "full": {"shapes": _square(512, 1024, 2048) + [("mlp_512x2048x1024", 512, 2048, 1024)], "warmup": 3,
                 "iters": 20, "warmup_s": 1},
    },
    "gpu": {
        "quick": {"shapes": _square(4096, 8192) + LLAMA70B_SHAPES[2:3], "warmup": 5, "iters": 20, "warmup_s": 2},
        "standard": {"shapes": _square(4096, 8192, 16384) + LLAMA70B_SHAPES, "warmup": 20, "iters": 50,
                     "warmup_s": 10},
        # mamf-finder's own counts: 50 warm-ups, 100 timed iterations, one 30 s warm-up of the GPU
        "full": {"shapes": _square(2048, 4096, 8192, 16384) + LLAMA70B_SHAPES, "warmup": 50, "iters": 100,
                 "warmup_s": 30},
    },
}

# mamf-finder-style sweeps. A range is [start, stop, step] with stop included and 0 left out; a number is fixed.
# The gpu quick/standard sweeps are mamf-finder's "quick run" (m 0..20480 step 256, n = k = 4096: 80-90 % of the
# max in under a minute); full is its exhaustive grid, which takes hours per dtype.
MAMF = {
    "cpu": {
        "quick": {"sweep": {"m": [128, 512, 128], "n": 256, "k": 256}, "dtypes": ["bf16"], "warmup": 1, "iters": 3,
                  "warmup_s": 0},
        "standard": {"sweep": {"m": [256, 2048, 256], "n": 512, "k": 512}, "dtypes": ["bf16", "fp8_e4m3"],
                     "warmup": 2, "iters": 10, "warmup_s": 0},
        "full": {"sweep": {"m": [256, 4096, 256], "n": 1024, "k": 1024}, "dtypes": ["bf16", "fp16", "fp8_e4m3"],
                 "warmup": 3, "iters": 20, "warmup_s": 1},
    },
    "gpu": {
        "quick": {"sweep": {"m": [1024, 20480, 1024], "n": 4096, "k": 4096}, "dtypes": ["bf16"], "warmup": 10,
                  "iters": 30, "warmup_s": 2},
        # the seed: "runs a sweep for a while on each GPU, per precision": every dtype of the list, each one this
        # GPU cannot run skipped with its reason; the low precisions first, so that a sweep cut by its time limit
        # loses fp32 (the slowest, and the one least used in training) rather than them
        "standard": {"sweep": {"m": [256, 20480, 256], "n": 4096, "k": 4096}, "dtypes": list(MAMF_ORDER),
                     "warmup": 50, "iters": 100, "warmup_s": 10},
        "full": {"sweep": {"m": [1024, 16384, 1024], "n": [1024, 16384, 1024], "k": [1024, 16384, 1024]},
                 "dtypes": list(MAMF_ORDER), "warmup": 50, "iters": 100, "warmup_s": 30},
    },
}

# Decode-like GEMV: a weight matrix far larger than any L2, times one activation vector.
GEMV = {
    "cpu": {
        "quick": {"shapes": [("gemv_2048x2048", 2048, 2048)], "dtypes": ["bf16"], "warmup": 1, "iters": 3,
                  "warmup_s": 0},
        "standard": {"shapes": [("gemv_4096x4096", 4096, 4096), ("gemv_8192x2048", 8192, 2048)],
                     "dtypes": ["bf16"], "warmup": 2, "iters": 10, "warmup_s": 0},
        "full": {"shapes": [("gemv_8192x8192", 8192, 8192)], "dtypes": ["bf16", "fp32"], "warmup": 3, "iters": 20,
                 "warmup_s": 0},
    },
    "gpu": {
        "quick": {"shapes": [("llama70b_mlp_up_row", 28672, 8192), ("llama70b_attn_out", 8192, 8192)],
                  "dtypes": ["bf16"], "warmup": 5, "iters": 20, "warmup_s": 1},
        "standard": {"shapes": [("llama70b_mlp_up_row", 28672, 8192), ("llama70b_mlp_down", 8192, 28672),
                                ("llama70b_attn_out", 8192, 8192), ("square_16384", 16384, 16384)],
                     "dtypes": ["bf16"], "warmup": 20, "iters": 50, "warmup_s": 5},
        "full": {"shapes": [("llama70b_mlp_up_row", 28672, 8192), ("llama70b_mlp_down", 8192, 28672),
                            ("llama70b_attn_out", 8192, 8192), ("square_16384", 16384, 16384)],
                 "dtypes": ["bf16", "fp16", "fp32"], "warmup": 50, "iters": 100, "warmup_s": 10},
    },
}

# MoE expert shapes. gate_up is the fused gate and up projection of a SwiGLU expert (n = 2 x intermediate,
# k = hidden); down maps intermediate back to hidden (n = hidden, k = intermediate). `shared`: shared experts of
# the same intermediate size that every token goes through (DeepSeek's n_shared_experts); None where no source
# states it (not counted). `hidden` is the width the routed experts work on: Kimi K3's latent MoE projects 7168
# down to 3584 before its experts (routed_expert_hidden_size). Where no model's own config.json was readable, the
# source says which copy or quote of it each number comes from (the search index holds none of these files).
MOE_MODELS = {
    "deepseek-v3": {
        "hidden": 7168, "intermediate": 2048, "experts": 256, "top_k": 8, "shared": 1,
        "source": "https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json "
                  "(hidden_size, moe_intermediate_size, n_routed_experts, num_experts_per_tok, n_shared_experts); "
                  "the same numbers in DeepSeek's inference/configs/config_671B.json at 4c2fdb8f",
    },
    "kimi-k2": {
        "hidden": 7168, "intermediate": 2048, "experts": 384, "top_k": 8, "shared": 1,
        "source": "https://huggingface.co/moonshotai/Kimi-K2-Instruct/blob/main/config.json "
                  "(hidden_size, moe_intermediate_size, n_routed_experts, num_experts_per_tok); one shared expert of "
                  "2048 (moe_shared_expert_intermediate_size in NVIDIA Megatron-Bridge's KimiK2Provider)",
    },
    "kimi-k2.5": {
        "hidden": 7168, "intermediate": 2048, "experts": 384, "top_k": 8, "shared": 1,
        "source": "moonshotai/Kimi-K2.5 config.json text_config (hidden_size, moe_intermediate_size, "
                  "n_routed_experts, num_experts_per_tok, n_shared_experts), read from two copies of it in public "
                  "test fixtures (search index copies 55329353243 and 4289690615); the model card of a 2-layer slice "
                  "(huggingface.co/eatang/Kimi-K2.5-2layer) agrees on 384 routed + 1 shared",
    },
    "kimi-k3": {
        "hidden": 3584, "intermediate": 3072, "experts": 896, "top_k": 16, "shared": None,
        "source": "moonshotai/Kimi-K3 config.json as FlashInfer's Kimi K3 MoE documentation gives 'the published "
                  "Kimi K3 config' (docs.flashinfer.ai/api/moe_ep_kimi_k3.html: num_experts 896, "
                  "routed_expert_hidden_size 3584, moe_intermediate_size 3072, num_experts_per_token 16); the config "
                  "itself was not readable, and no source states its shared experts",
    },
    "deepseek-v4-pro": {
        "hidden": 7168, "intermediate": 3072, "experts": 384, "top_k": 6, "shared": 1,
        "source": "deepseek-ai/DeepSeek-V4-Pro config.json as quoted from a local copy (hidden_size 7168, "
                  "n_routed_experts 384, num_experts_per_tok 6; search index copy 68345554684), with the expert "
                  "size 3072 and 1 shared expert from NVIDIA NeMo AutoModel's model page and apxml.com's model page; "
                  "the config itself was not readable",
    },
    "gpt-oss-120b": {
        "hidden": 2880, "intermediate": 2880, "experts": 128, "top_k": 4, "shared": 0,
        "source": "https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json "
                  "(hidden_size, intermediate_size, num_local_experts, num_experts_per_tok; no shared experts)",
    },
}
PROJECTIONS = ("gate_up", "down")

# `ep`: expert-parallel degree. Each GPU holds experts / ep experts and receives its share of tokens x top_k routed
# rows; the per-expert shapes are the real ones, only the number of local experts changes with ep.
GROUPED_GEMM = {
    "cpu": {
        "quick": {"models": ["gpt-oss-120b"], "ep": 32, "tokens": [128, 256], "dtypes": ["bf16"], "warmup": 1,
                  "iters": 2, "warmup_s": 0},
        "standard": {"models": ["deepseek-v3", "kimi-k2", "gpt-oss-120b"], "ep": 64, "tokens": [128, 512],
                     "dtypes": ["bf16"], "warmup": 1, "iters": 5, "warmup_s": 0},
        "full": {"models": ["deepseek-v3", "kimi-k2", "gpt-oss-120b"], "ep": 32, "tokens": [128, 512, 2048],
                 "dtypes": ["bf16"], "warmup": 2, "iters": 10, "warmup_s": 0},
    },
    "gpu": {
        "quick": {"models": ["deepseek-v3", "kimi-k2", "gpt-oss-120b"], "ep": 8, "tokens": [128, 1024, 4096, 16384],
                  "dtypes": ["bf16"], "warmup": 5, "iters": 20, "warmup_s": 1},
        # every dtype of the seed's list: each is measured, "skipped" (this GPU cannot) or "not implemented"
        "standard": {"models": list(MOE_MODELS), "ep": 8,
                     "tokens": [128, 256, 512, 1024, 2048, 4096, 8192, 16384], "dtypes": list(DTYPES), "warmup": 10,
                     "iters": 50, "warmup_s": 5},
        "full": {"models": list(MOE_MODELS), "ep": 8,
                 "tokens": [128, 256, 512, 1024, 2048, 4096, 8192, 16384], "dtypes": list(DTYPES), "warmup": 20,
                 "iters": 100, "warmup_s": 10},
    },
}

MIB = 2 ** 20
# Copy sizes in bytes; p2p samples repeat the copy `copies_per_sample` times between two host synchronisations.
COPY = {
    "cpu": {
        "quick": {"bytes": 64 * MIB, "warmup": 1, "iters": 3, "copies_per_sample": 1},
        "standard": {"bytes": 256 * MIB, "warmup": 2, "iters": 10, "copies_per_sample": 1},
        "full": {"bytes": 512 * MIB, "warmup": 3, "iters": 20, "copies_per_sample": 1},
    },
    "gpu": {
        "quick": {"bytes": 256 * MIB, "warmup": 3, "iters": 10, "copies_per_sample": 4},
        "standard": {"bytes": 512 * MIB, "warmup": 5, "iters": 20, "copies_per_sample": 4},
        "full": {"bytes": 1024 * MIB, "warmup": 10, "iters": 50, "copies_per_sample": 4},
    },
}

# nvbandwidth testcases per profile (None: all of them).
NVBANDWIDTH_TESTS = {
    # device_to_device_memcpy_read_ce: the test Azure's azhpc-nhc holds to its device-to-device line (gpus.yml
    # d2d_gbps_min), so that the quick profile grades the test the line was drawn for
    "quick": ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce",
              "device_local_copy"],
    "standard": ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "host_to_device_bidirectional_memcpy_ce",
                 "device_to_host_bidirectional_memcpy_ce", "device_to_device_memcpy_read_ce",
                 "device_to_device_memcpy_write_ce", "all_to_host_memcpy_ce", "host_to_all_memcpy_ce",
                 "device_local_copy"],
    "full": None,
}


# What a param of the same name as a profile entry is (resolve: a given one replaces the profile's value).
OVERRIDES = {
    "shapes": (list, "[[name, m, n, k], ...] ([name, m, k] for gemv)"),
    "sweep": (dict, "{m, n, k}: each a size or [start, stop, step]"),
    "dtypes": (list, "dtypes to measure"),
    "models": (list, "MoE models (deepseek-v3, kimi-k2, gpt-oss-120b)"),
    "ep": (int, "expert-parallel degree"),
    "tokens": (list, "token batch sizes"),
    "bytes": (SIZE, "bytes per copy"),
    "copies_per_sample": (int, "peer-to-peer copies between two host synchronisations"),
    "warmup": (int, "warm-up iterations"),
    "iters": (int, "timed iterations"),
    "warmup_s": (float, "seconds of warm-up before the first shape"),
}


def profile_params(table):
    """The params of a probe measuring by `table`: the profile, and each of its entries (None: the profile's)."""
    entries = sorted({key for sizes in table.values() for config in sizes.values() for key in config})
    declared = {"profile": Param(str, "quick", "which sizes to measure", choices=PROFILES)}
    for key in entries:
        kind, what = OVERRIDES[key]
        declared[key] = Param(kind, None, "%s (default: the profile's)" % what)
    return declared


def size_class(backend):
    return "cpu" if backend == "cpu" else "gpu"


def resolve(table, params, backend):
    """The effective configuration: the profile's entry for this backend, overridden by params of the same name."""
    profile = params.get("profile") or "quick"
    if profile not in PROFILES:
        raise ValueError("profile %r is not one of %s" % (profile, ", ".join(PROFILES)))
    config = dict(table[size_class(backend)][profile])
    for key in list(config):
        value = params.get(key)
        if value not in (None, [], ""):
            config[key] = value
    config["profile"] = profile
    return config


def gemm_shapes(config):
    """[(name, m, n, k)] with positive integer sizes."""
    out = []
    for entry in config["shapes"]:
        name, m, n, k = entry
        m, n, k = int(m), int(n), int(k)
        if min(m, n, k) <= 0:
            raise ValueError("shape %s has a size <= 0: %r" % (name, entry))
        out.append((str(name), m, n, k))
    return out


def _axis(spec):
    if isinstance(spec, (list, tuple)):
        start, stop, step = (int(v) for v in spec)
        if step <= 0:
            raise ValueError("sweep step must be positive, got %r" % (spec,))
        return [v for v in range(start, stop + 1, step) if v > 0]
    return [int(spec)]


def mamf_shapes(sweep):
    """Every (m, n, k) of a sweep, m varying fastest as mamf-finder walks it."""
    ms, ns, ks = _axis(sweep["m"]), _axis(sweep["n"]), _axis(sweep["k"])
    return [(m, n, k) for k, n, m in itertools.product(ks, ns, ms)]


def moe_projection(model, proj):
    """(n, k) of one expert's projection."""
    spec = MOE_MODELS[model]
    if proj == "gate_up":
        return 2 * spec["intermediate"], spec["hidden"]
    if proj == "down":
        return spec["hidden"], spec["intermediate"]
    raise ValueError("projection %r is not one of %s" % (proj, ", ".join(PROJECTIONS)))


def expert_rows(tokens, experts, top_k):
    """Rows each expert receives when `tokens` tokens each pick `top_k` experts with perfectly balanced routing:
    the tokens x top_k assignments split as evenly as integers allow, the first experts taking the remainder."""
    total = int(tokens) * int(top_k)
    base, extra = divmod(total, int(experts))
    return [base + (1 if e < extra else 0) for e in range(int(experts))]


def local_groups(model, tokens, ep):
    """Row counts of the experts one GPU holds under expert parallelism `ep`: the first experts / ep routed experts
    with their share of the tokens x top_k assignments, then each shared expert (every GPU has them) with the GPU's
    own tokens, tokens / ep (DeepSeek-style serving: attention data-parallel, experts spread over the ep GPUs)."""
    spec = MOE_MODELS[model]
    if spec["experts"] % int(ep):
        raise ValueError("%s has %d experts: not divisible by ep=%d" % (model, spec["experts"], ep))
    local = spec["experts"] // int(ep)
    shared = [int(tokens) // int(ep)] * int(spec.get("shared") or 0)
    return expert_rows(tokens, spec["experts"], spec["top_k"])[:local] + shared


# --- FLOP and byte counts of these shapes, and the rates and statistics of timed iterations ---
# FLOP and byte accounting, and the statistics of timed iterations, for the GPU compute probes.
#
# Pure functions, no torch: the unit tests check every formula exactly. Units: TFLOP/s = 1e12 FLOP/s and
# GB/s = 1e9 B/s (the units of mamf-finder, nvbandwidth and the vendors' datasheets).

# Bytes per element of each dtype the probes know. tf32 is fp32 storage (the tensor cores round the mantissa);
# nvfp4 packs two e2m1 values into a byte. Block scales (mxfp8, nvfp4) are not counted: they are 1/32 or 1/16 of
# the data and the FLOP count does not depend on them.
ELEMENT_BYTES = {
    "bf16": 2,
    "fp16": 2,
    "tf32": 4,
    "fp32": 4,
    "fp8_e4m3": 1,
    "mxfp8": 1,
    "nvfp4": 0.5,
}


def gemm_flops(m, n, k):
    """C[m,n] = A[m,k] @ B[k,n]: m*n dot products of length k, each k multiplies and k adds."""
    return 2 * int(m) * int(n) * int(k)


def grouped_gemm_flops(group_rows, n, k):
    """Sum of one GEMM per expert: group i multiplies group_rows[i] rows of k by a k x n weight."""
    return sum(gemm_flops(rows, n, k) for rows in group_rows)


def gemv_flops(m, k):
    return 2 * int(m) * int(k)


def gemv_bytes(m, k, dtype):
    """Bytes a GEMV y[m] = W[m,k] @ x[k] must move at least once: read W and x, write y."""
    return int((int(m) * int(k) + int(k) + int(m)) * ELEMENT_BYTES[dtype])


def tflops(flops, seconds):
    return flops / seconds / 1e12


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9


def time_stats(times_s):
    """Mean, median, min and max of per-iteration times in seconds (the raw times are kept elsewhere)."""
    if not times_s:
        raise ValueError("no timed iterations")
    ordered = sorted(float(t) for t in times_s)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
    if ordered[0] <= 0:
        raise ValueError("an iteration took %r s: the timer is broken" % ordered[0])
    return {"mean": sum(ordered) / n, "median": median, "min": ordered[0], "max": ordered[-1], "n": n}


def rate_stats(work, times_s, per_second):
    """Throughput of `work` (FLOPs or bytes) per iteration, from the times: mean (work / mean time, as mamf-finder
    reports it), median (work / median time) and max (work / fastest iteration). `per_second` is tflops or gbps."""
    stats = time_stats(times_s)
    return {
        "mean": per_second(work, stats["mean"]),
        "median": per_second(work, stats["median"]),
        "max": per_second(work, stats["min"]),
        "time_mean_s": stats["mean"],
        "n": stats["n"],
    }


def geomean(values):
    """Geometric mean of positive numbers (mamf-finder's summary over a sweep, less sensitive to one lucky shape)."""
    values = [float(v) for v in values]
    if not values or any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values, got %r" % (values,))
    return math.exp(sum(math.log(v) for v in values) / len(values))
