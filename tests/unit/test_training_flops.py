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


def test_missing_facts_say_which():
    flops, why = flops_per_token({"model": {"layers": 2, "dim": 64}, "params": 10})
    assert flops is None
    assert why == "the artifact lacks n_heads, embedding_params, seq_len: FLOPs per token cannot be computed"
