"""The models the training job runs where torchtitan cannot (the CPU path), sized by a model dict:

- `llama(cfg)`: a Llama-3-shaped decoder (token embedding; blocks of RMSNorm, grouped-query attention with rotary
  embeddings, RMSNorm, SwiGLU MLP; final RMSNorm; untied output projection): the FLOPs-bound job;
- `moe(cfg, ...)`: the same with a GPT-OSS-style mixture of experts as every block's MLP (router, top-k experts,
  optional always-on shared experts), the experts split across the ranks (expert parallelism): the collective-bound
  job. Tokens travel to the rank that owns their expert and back with all_to_all, timed by a `CollectiveClock`.

`shard` applies FSDP2 (`fully_shard`) per block and on the root to everything but the experts. torch is imported
inside functions only: probes/ modules import on nodes that have no torch.
"""

import functools
import time
from types import SimpleNamespace

MOE_KEYS = ("n_experts", "top_k", "moe_ffn_dim", "n_shared_experts")
# Llama 3.1's rotary base.
ROPE_THETA = 500000.0


def resolve(job, model):
    """The model dict the job runs, defaults filled in; a dense job drops the MoE keys so that param_counts (which
    tells the two apart by n_experts) counts what is built."""
    resolved = dict(model)
    resolved.setdefault("n_kv_heads", resolved["n_heads"])
    resolved.setdefault("rope_theta", ROPE_THETA)
    if job == "moe":
        resolved.setdefault("n_shared_experts", 0)
        missing = [k for k in MOE_KEYS if k not in resolved]
        if missing:
            raise ValueError("moe job: model lacks %s" % ", ".join(missing))
    elif job == "dense":
        for key in MOE_KEYS:
            resolved.pop(key, None)
    else:
        raise ValueError("job must be dense or moe, not %r" % (job,))
    if resolved["n_heads"] % resolved["n_kv_heads"]:
        raise ValueError("n_heads %d must divide by n_kv_heads %d" % (resolved["n_heads"], resolved["n_kv_heads"]))
    # head_dim is its own number where the model says so (GPT-OSS: dim 2880, 64 heads of 64), else dim / n_heads
    if "head_dim" not in resolved:
        if resolved["dim"] % resolved["n_heads"]:
            raise ValueError("dim %d does not divide by n_heads %d: give head_dim" % (resolved["dim"],
                                                                                     resolved["n_heads"]))
        resolved["head_dim"] = resolved["dim"] // resolved["n_heads"]
    if resolved["head_dim"] % 2:
        # the rotary embedding pairs dimension i with i + head_dim/2 (GPT-OSS's 2880 / 64 = 45 failed on a GPU)
        raise ValueError("head_dim %d is odd: the rotary embedding needs an even one (give head_dim)"
                         % resolved["head_dim"])
    return resolved


def param_counts(model_cfg, world):
    """Parameter counts by formula (no biases anywhere). active_params: what one token goes through, embedding
    included (one row of it, but counted whole as the usual 6·N·tokens FLOPs estimate does): for the MoE everything
    but the experts, plus top_k routed experts and the shared ones in every block."""
    dim, vocab, layers = model_cfg["dim"], model_cfg["vocab"], model_cfg["layers"]
    head_dim = model_cfg.get("head_dim") or dim // model_cfg["n_heads"]
    attention = 2 * dim * model_cfg["n_heads"] * head_dim + 2 * dim * model_cfg["n_kv_heads"] * head_dim
    block = attention + 2 * dim  # + the two RMSNorm weights
    embedding = vocab * dim
    outer = 2 * embedding + dim  # embedding, output projection, final norm
    if "n_experts" not in model_cfg:
        total = outer + layers * (block + 3 * dim * model_cfg["ffn_dim"])
        return {"params": total, "embedding": embedding, "active_params": total}
    experts, top_k = model_cfg["n_experts"], model_cfg["top_k"]
    expert = 3 * dim * model_cfg["moe_ffn_dim"]
    dense_part = outer + layers * (block + dim * experts + model_cfg["n_shared_experts"] * expert)
    return {"params": dense_part + layers * experts * expert, "embedding": embedding,
            "active_params": dense_part + layers * top_k * expert, "expert_params": layers * experts * expert,
            "experts_per_rank": experts // world}


class CollectiveClock:
    """Wall time summed over the timed collectives since the last reset. `sync` (torch.cuda.synchronize on a GPU)
    brackets every call, so that the time is the collective's own and not that of the kernels queued before it."""

    def __init__(self, sync=None):
        self.sync = sync or (lambda: None)
        self.seconds = 0.0

    def timed(self, fn, *args, **kwargs):
        self.sync()
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        self.sync()
        self.seconds += time.perf_counter() - t0
        return out


def llama(cfg):
    """The dense model, built on torch's current default device from the global RNG."""
    nn = _nn()
    return nn.Transformer(cfg, lambda: nn.SwiGLU(cfg["dim"], cfg["ffn_dim"]))


def moe(cfg, rank=0, world=1, dist=None, clock=None, seed=0):
    """The MoE model with this rank's n_experts/world experts. Non-expert weights come from the global RNG (the
    same on every rank after the same manual_seed); expert e is drawn from a generator seeded by (seed, e), so the
    model is the same whatever the world size. dist (torch.distributed) is needed when world > 1."""
    if cfg["n_experts"] % world:
        raise ValueError("n_experts %d does not divide by world size %d" % (cfg["n_experts"], world))
    nn = _nn()
    exchange = Exchange(dist, clock or CollectiveClock())
    return nn.Transformer(cfg, lambda: nn.MoE(cfg, rank, world, exchange, seed))


def expert_parameters(model):
    return [p for module in model.modules() if isinstance(module, _nn().Experts) for p in module.parameters()]


def shard(model, param_dtype=None):
    """FSDP2 per block, then on the root (embedding, final norm, output). The experts are left out (ignored_params):
    each rank holds different experts, so sharding them would split one rank's experts across all and averaging
    their gradients across ranks would mix unrelated experts. Their gradients are complete on the owning rank
    already, the all_to_all backward having brought back every rank's contribution. param_dtype (bf16 on GPUs)
    computes in that dtype over float32 weights, gradients reduced in float32, as torchtitan does."""
    import torch  # noqa: PLC0415

    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: PLC0415
    except ImportError:  # torch < 2.6 has FSDP2 under _composable only
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: PLC0415
    options = {"mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)}
    experts = set(expert_parameters(model))
    if experts:
        options["ignored_params"] = experts  # a TypeError on a torch without it: the MoE job needs it
    for block in model.layers:
        fully_shard(block, **options)
    fully_shard(model, **options)
    return model


class Exchange:
    """The MoE's all_to_all_single calls on the default process group, each one timed by the clock."""

    def __init__(self, dist, clock):
        self.dist, self.clock = dist, clock

    def counts(self, counts):
        """Equal splits: every rank sends each rank the row counts for that rank's experts."""
        out = counts.new_empty(counts.shape)
        self.clock.timed(self.dist.all_to_all_single, out, counts)
        return out

    def rows(self, x, out_splits, in_splits):
        """Uneven splits along dim 0: in_splits[r] rows of x go to rank r, out_splits[r] come from it."""
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        self.clock.timed(self.dist.all_to_all_single, out, x.contiguous(), out_splits, in_splits)
        return out


@functools.lru_cache(maxsize=None)  # noqa: UP033 (functools.cache is Python 3.9+; probes run on 3.8)
def _nn():
    """The module classes, defined on first use so that importing this file needs no torch."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            # normalised in float32 (bf16 would lose the small mean of squares), as Llama's reference does
            y = x.float()
            y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
            return y.type_as(x) * self.weight

    class SwiGLU(nn.Module):
        def __init__(self, dim, hidden):
            super().__init__()
            self.w1 = nn.Linear(dim, hidden, bias=False)
            self.w3 = nn.Linear(dim, hidden, bias=False)
            self.w2 = nn.Linear(hidden, dim, bias=False)

        def forward(self, x):
            return self.w2(F.silu(self.w1(x)) * self.w3(x))

    class Attention(nn.Module):
        def __init__(self, dim, n_heads, n_kv_heads, head_dim):
            super().__init__()
            self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
            self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
            self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
            self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
            self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

        def forward(self, x, rope):
            batch, seq, _ = x.shape
            q = self.wq(x).view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)
            k = self.wk(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
            v = self.wv(x).view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
            q, k = _rotate(q, rope), _rotate(k, rope)
            # grouped-query: each kv head serves n_heads/n_kv_heads query heads (SDPA's enable_gqa needs torch 2.5)
            repeat = self.n_heads // self.n_kv_heads
            k, v = k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))

    def _rotate(x, rope):
        """Rotary embedding, the half-split pairing (dimension i with i + head_dim/2)."""
        cos, sin = rope
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos + rotated * sin

    class Experts(nn.Module):
        """This rank's experts as stacked SwiGLU weights [expert, out, in]; kept out of FSDP (see shard)."""

        def __init__(self, first, count, dim, hidden, seed):
            super().__init__()
            self.w1 = nn.Parameter(torch.empty(count, hidden, dim))
            self.w3 = nn.Parameter(torch.empty(count, hidden, dim))
            self.w2 = nn.Parameter(torch.empty(count, dim, hidden))
            generator = torch.Generator(device=self.w1.device)
            for local in range(count):
                generator.manual_seed(seed * 100003 + first + local)
                # nn.Linear's default spread (uniform ±1/sqrt(in): std 1/sqrt(3·in)), drawn normal
                for weight, fan_in in ((self.w1, dim), (self.w3, dim), (self.w2, hidden)):
                    nn.init.normal_(weight.data[local], std=(3 * fan_in) ** -0.5, generator=generator)

        def forward(self, x, counts):
            """x: rows grouped by local expert, counts[e] rows for expert e."""
            outs = []
            for e, rows in enumerate(x.split(counts)):
                # the experts stay float32 outside FSDP's mixed precision: compute in the activations' dtype
                w1, w3, w2 = (w[e].to(x.dtype) for w in (self.w1, self.w3, self.w2))
                outs.append(F.linear(F.silu(F.linear(rows, w1)) * F.linear(rows, w3), w2))
            return torch.cat(outs)

    class AllToAll(torch.autograd.Function):
        """all_to_all whose backward is the reverse all_to_all (our own rather than torch.distributed.nn's so the
        backward exchange is timed by the same clock)."""

        @staticmethod
        def forward(ctx, x, out_splits, in_splits, exchange):
            ctx.splits, ctx.exchange = (out_splits, in_splits), exchange
            return exchange.rows(x, out_splits, in_splits)

        @staticmethod
        def backward(ctx, grad):
            out_splits, in_splits = ctx.splits
            return ctx.exchange.rows(grad, in_splits, out_splits), None, None, None

    class MoE(nn.Module):
        def __init__(self, cfg, rank, world, exchange, seed):
            super().__init__()
            dim, self.n_experts, self.top_k = cfg["dim"], cfg["n_experts"], cfg["top_k"]
            self.world, self.n_local, self.exchange = world, cfg["n_experts"] // world, exchange
            self.router = nn.Linear(dim, self.n_experts, bias=False)
            self.experts = Experts(rank * self.n_local, self.n_local, dim, cfg["moe_ffn_dim"], seed)
            shared = cfg["n_shared_experts"]
            # shared experts always run on every token: one SwiGLU as wide as all of them is the same function
            self.shared = SwiGLU(dim, shared * cfg["moe_ffn_dim"]) if shared else None

        def forward(self, x):
            batch, seq, dim = x.shape
            flat = x.reshape(-1, dim)
            # GPT-OSS routing: top-k of the router logits, softmax over the k chosen
            logits, chosen = torch.topk(self.router(flat), self.top_k, dim=-1)
            weights = torch.softmax(logits.float(), -1).type_as(flat)
            experts = chosen.flatten()  # one row per (token, slot): token = row // top_k
            order = torch.argsort(experts, stable=True)
            counts = torch.bincount(experts, minlength=self.n_experts)
            out = self._dispatch(flat[order // self.top_k], counts)
            out = out[torch.argsort(order)].view(-1, self.top_k, dim)
            y = (out * weights.unsqueeze(-1)).sum(1)
            if self.shared is not None:
                y = y + self.shared(flat)
            return y.view(batch, seq, dim)

        def _dispatch(self, routed, counts):
            """routed: rows sorted by global expert, counts[e] of them for expert e; returns their outputs in the
            same order, computed on the rank that owns each expert."""
            if self.world == 1:
                return self.experts(routed, counts.tolist())
            # each rank first learns how many rows it will get from every rank for each of its experts
            received_counts = self.exchange.counts(counts)
            send = counts.view(self.world, self.n_local).sum(1).tolist()
            receive = received_counts.view(self.world, self.n_local).sum(1).tolist()
            received = AllToAll.apply(routed, receive, send, self.exchange)
            # rows arrive grouped by source rank, then by local expert: regroup by local expert for the experts
            local_ids = torch.arange(self.n_local, device=counts.device).repeat(self.world)
            regroup = torch.argsort(local_ids.repeat_interleave(received_counts), stable=True)
            per_expert = received_counts.view(self.world, self.n_local).sum(0).tolist()
            out = self.experts(received[regroup], per_expert)[torch.argsort(regroup)]
            return AllToAll.apply(out, send, receive, self.exchange)

    class Block(nn.Module):
        def __init__(self, cfg, mlp):
            super().__init__()
            self.attention_norm = RMSNorm(cfg["dim"])
            self.attention = Attention(cfg["dim"], cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"])
            self.mlp_norm = RMSNorm(cfg["dim"])
            self.mlp = mlp

        def forward(self, x, rope):
            x = x + self.attention(self.attention_norm(x), rope)
            return x + self.mlp(self.mlp_norm(x))

    class Transformer(nn.Module):
        def __init__(self, cfg, make_mlp):
            super().__init__()
            self.head_dim, self.rope_theta = cfg["head_dim"], cfg["rope_theta"]
            self.tok_embeddings = nn.Embedding(cfg["vocab"], cfg["dim"])
            self.layers = nn.ModuleList(Block(cfg, make_mlp()) for _ in range(cfg["layers"]))
            self.norm = RMSNorm(cfg["dim"])
            self.output = nn.Linear(cfg["dim"], cfg["vocab"], bias=False)

        def forward(self, tokens):
            x = self.tok_embeddings(tokens)
            rope = self._rope(tokens.shape[1], x)
            for layer in self.layers:
                x = layer(x, rope)
            return self.output(self.norm(x))

        def _rope(self, seq, like):
            # recomputed per forward: small next to the model, and no buffer for FSDP to place
            half = self.head_dim // 2
            inv_freq = self.rope_theta ** -(torch.arange(half, device=like.device, dtype=torch.float32) / half)
            angles = torch.outer(torch.arange(seq, device=like.device, dtype=torch.float32), inv_freq)
            angles = torch.cat((angles, angles), -1)
            return angles.cos().to(like.dtype), angles.sin().to(like.dtype)

    return SimpleNamespace(Transformer=Transformer, SwiGLU=SwiGLU, MoE=MoE, Experts=Experts)
