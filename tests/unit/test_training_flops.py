"""FLOPs per token and MFU of the training jobs (reports/phases/training/flops.py) against hand-computed values and
torchtitan's own published figures."""

import pytest

from reports.phases.training.flops import flops_per_token, mfu

LLAMA_8B = {"layers": 32, "dim": 4096, "n_heads": 32, "n_kv_heads": 8, "ffn_dim": 14336, "vocab": 128256}


def llama_params(m, experts=None):
    """Parameters of a Llama-shaped model by hand: (total, embedding, active per token). experts: (n_experts, top_k,
    moe_ffn_dim, n_shared) replaces each layer's FFN by a router, routed and shared SwiGLU experts."""
    dim, heads, kv = m["dim"], m["n_heads"], m["n_kv_heads"]
    head = dim // heads
    attention = dim * heads * head * 2 + dim * kv * head * 2  # wq, wo; wk, wv
    norms = 2 * dim
    embedding = m["vocab"] * dim
    if experts is None:
        ffn = ffn_active = 3 * dim * m["ffn_dim"]
    else:
        n, top_k, moe_ffn, shared = experts
        one = 3 * dim * moe_ffn
        ffn = dim * n + n * one + shared * one
        ffn_active = dim * n + top_k * one + shared * one
    rest = 2 * embedding + dim  # embedding, output projection, final norm
    total = m["layers"] * (attention + ffn + norms) + rest
    active = m["layers"] * (attention + ffn_active + norms) + rest
    return total, embedding, active


def test_llama_3_1_8b_flops_per_token_by_hand_and_torchtitans_published_mfu():
    total, embedding, active = llama_params(LLAMA_8B)
    assert total == active == 8_030_261_248  # Llama 3.1 8B's published parameter count
    assert embedding == 525_336_576
    facts = {"model": LLAMA_8B, "params": total, "active_params": active, "embedding_params": embedding,
             "seq_len": 8192}
    flops, why = flops_per_token(facts)
    # 6 x 7,504,924,672 non-embedding parameters + 12 x 32 layers x 32 heads x 128 head_dim x 8192
    assert why is None and flops == 6 * 7_504_924_672 + 12 * 32 * 32 * 128 * 8192 == 57_914_449_920
    # torchtitan docs/performance.md: 5,762 and 6,667 tokens/s per H100 (989 TFLOPS), "33% to 39% MFU"
    assert mfu(5762, flops, 989) == pytest.approx(0.3374, abs=1e-4)
    assert mfu(6667, flops, 989) == pytest.approx(0.3904, abs=1e-4)
    # without active_params (older artifacts) the dense job's params are its active ones
    assert flops_per_token({k: v for k, v in facts.items() if k != "active_params"})[0] == flops


def test_moe_counts_only_the_parameters_a_token_passes_through():
    model = {"layers": 4, "dim": 512, "n_heads": 8, "n_kv_heads": 2, "ffn_dim": 0, "vocab": 32000, "n_experts": 16,
             "top_k": 2, "moe_ffn_dim": 256, "n_shared_experts": 1}
    total, embedding, active = llama_params(model, experts=(16, 2, 256, 1))
    assert active < total
    facts = {"model": model, "params": total, "active_params": active, "embedding_params": embedding, "seq_len": 2048}
    flops, _ = flops_per_token(facts)
    per_layer_active = (512 * 8 * 64 * 2 + 512 * 2 * 64 * 2) + (512 * 16 + 3 * 3 * 512 * 256) + 2 * 512
    non_embedding_active = 4 * per_layer_active + 32000 * 512 + 512
    assert flops == 6 * non_embedding_active + 12 * 4 * 8 * 64 * 2048
    # the 14 experts a token skips cost nothing
    assert flops == flops_per_token(dict(facts, params=total * 10))[0]


# GPT-OSS 20B (openai/gpt-oss-20b config.json): 24 layers, hidden 2880, 64 query heads and 8 KV heads of head_dim 64
# (so 64 x 64 = 4096 is not the hidden size), 32 experts of intermediate 2880, top 4, vocab 201088.
GPT_OSS_20B = {"layers": 24, "dim": 2880, "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "ffn_dim": 2880,
               "vocab": 201088, "n_experts": 32, "top_k": 4, "moe_ffn_dim": 2880, "n_shared_experts": 0}


def test_gpt_oss_20b_counts_its_published_parameters_and_its_own_head_dim():
    from probes.training import models

    counts = models.param_counts(models.resolve("moe", GPT_OSS_20B), 1)
    # OpenAI's model card: 20.91 B parameters, 3.61 B active per token (embedding not counted); ours has no biases
    # and no attention sinks (about 0.01 % of the parameters)
    assert counts["params"] == 20_907_927_360
    assert counts["active_params"] - counts["embedding"] == 3_607_283_520
    facts = {"model": GPT_OSS_20B, "params": counts["params"], "active_params": counts["active_params"],
             "embedding_params": counts["embedding"], "seq_len": 8192}
    flops, why = flops_per_token(facts)
    # the attention term counts 64 heads of 64, not dim / heads = 45
    assert why is None and flops == 6 * 3_607_283_520 + 12 * 24 * 64 * 64 * 8192


def test_a_shape_whose_rotary_half_is_not_whole_is_refused_before_any_rank_starts():
    from probes.training import models

    shape = {k: v for k, v in GPT_OSS_20B.items() if k != "head_dim"}  # dim / heads = 45, odd
    with pytest.raises(ValueError, match="head_dim 45 is odd: the rotary embedding needs an even one"):
        models.resolve("moe", shape)
    with pytest.raises(ValueError, match="dim 2880 does not divide by n_heads 100: give head_dim"):
        models.resolve("moe", dict(shape, n_heads=100, n_kv_heads=4))
    assert models.resolve("moe", GPT_OSS_20B)["head_dim"] == 64
    assert models.resolve("dense", {"layers": 1, "dim": 64, "n_heads": 4, "ffn_dim": 8, "vocab": 8})["head_dim"] == 16


def test_missing_facts_say_which():
    flops, why = flops_per_token({"model": {"layers": 2, "dim": 64}, "params": 10})
    assert flops is None
    assert why == "the artifact lacks n_heads, embedding_params, seq_len: FLOPs per token cannot be computed"
