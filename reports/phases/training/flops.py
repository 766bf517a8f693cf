"""FLOPs per token and MFU of the training probe's jobs, from the model facts the probe records.

torchtitan's formula (pytorch/torchtitan, torchtitan/models/utils.py, get_dense_model_nparams_and_flops and
get_moe_model_nparams_and_flops; before them torchtitan/utils.py, get_num_flop_per_token):

    flops per token = 6 × (N − N_embedding) + 12 × layers × heads × head_dim × seq_len

- 6 × N: a forward and a backward pass cost 2 + 4 FLOPs per parameter and token. N_embedding is the token
  embedding table (nn.Embedding): a lookup, no matmul. The output projection is a matmul and stays in N.
- 12 × l × h × q × t: the attention scores and the value aggregation, 2 matmuls forward and 4 backward, 2 FLOPs per
  multiply-add; flash attention's recomputation in the backward is not counted, and neither is the causal mask's
  sparsity (torchtitan's comments). torchtitan now writes it 6 × l × h × (qk + v head dims) × t, the same for Llama.
- MoE: N is the parameters a token passes through: the dense ones, the router, the shared experts and top_k of the
  n_experts routed ones (torchtitan: nparams_experts × top_k / num_experts). The probe records that count as
  `active_params` (for the dense job active_params = params).

Check: Llama 3.1 8B (32 layers, dim 4096, 32 heads, vocab 128256, seq_len 8192; 8,030,261,248 parameters, 525,336,576
of them the embedding) gives 6 × 7,504,924,672 + 12 × 32 × 32 × 128 × 8192 = 57,914,449,920 FLOPs per token; at
torchtitan's published 5,762 and 6,667 tokens/s per H100 (docs/performance.md, Table 1) that is 33.7 % and 39.0 % of
989 TFLOPS, the "33% to 39% MFU" the same page states.

MFU = tokens/s per GPU × FLOPs per token / (the GPU model's dense BF16 peak, gpus.yml bf16_peak_tflops, × 1e12), as
torchtitan computes it (its peak table is the dense BF16 datasheet figure too).
"""

# The facts flops_per_token needs: the model's shape (from the artifact's `model`) and the run's.
SHAPE_KEYS = ("layers", "n_heads", "dim")


def flops_per_token(facts):
    """(FLOPs per token, None), or (None, why not) where the facts lack a number the formula needs."""
    model = facts.get("model") or {}
    lacking = [k for k in SHAPE_KEYS if not model.get(k)]
    lacking += [k for k in ("params", "embedding_params", "seq_len") if facts.get(k) in (None, "")]
    if lacking:
        return None, "the artifact lacks %s: FLOPs per token cannot be computed" % ", ".join(lacking)
    layers, heads, dim = int(model["layers"]), int(model["n_heads"]), int(model["dim"])
    active = int(facts.get("active_params") or facts["params"])
    head_dim = int(model.get("head_dim") or dim // heads)  # its own number in GPT-OSS (64 with dim 2880, 64 heads)
    attention = 12 * layers * heads * head_dim * int(facts["seq_len"])
    return 6 * (active - int(facts["embedding_params"])) + attention, None


def mfu(tokens_per_s_per_gpu, flops, peak_tflops):
    """Model FLOPs utilisation, a fraction: achieved model FLOP/s per GPU over the GPU's dense BF16 peak."""
    return tokens_per_s_per_gpu * flops / (peak_tflops * 1e12)
