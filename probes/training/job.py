"""The rank side of a training job: `train(cfg, torch, dist, emit, progress)` runs in every rank once the process
group is up (gloo on CPU, nccl on GPU). It builds the dense (Llama-shaped, FLOPs-bound) or MoE (expert-parallel,
collective-bound) model of probes/training/models.py, shards it with FSDP2, trains it with AdamW (gradients clipped
to cfg["max_grad_norm"], 1.0 unless set; 0 or None: not clipped) and emits:

- {"type": "setup", "rank", "seconds" (train() start to the first step), "params", "active_params",
  "embedding_params", "model" (the resolved dict), "data", "dtype", "experts_per_rank" (moe only)};
- per step, warm-up steps included: {"type": "step", "rank", "step", "t" (wall-clock start), "warmup", "seconds"
  (forward, backward, optimizer; synchronised on a GPU), "loss" (mean over ranks), "tokens" (this rank's),
  "peak_memory_bytes" (GPU: the step's max_memory_allocated; CPU: the process's peak RSS so far), "grad_norm"
  (before clipping),
  "alltoall_seconds" (moe only: the step's all_to_all wall time, count exchanges included, forward and backward)};
- {"type": "summary", "rank", "steps" (timed), "tokens_per_s" (this rank's timed tokens / their seconds)}.

Data: cfg["data"] == "synthetic" is a token stream with structure to learn (fixed phrases in a random order, the
phrases shared by all ranks, the order drawn per rank so each data-parallel rank sees different tokens). Anything
else is the path of a flat file of token ids with no header, in the machine's byte order (little-endian on x86 and
Arm), uint16 (nanoGPT's .bin) unless the name ends in .i32 or .int32; rank r reads windows r, r + world, … of
local_batch × (seq_len + 1) tokens, wrapping at the end, ids taken modulo the model's vocab so a small CPU model can
read a real tokenised shard.
"""

import os
import resource
import time

from probes.training import models

PHRASES = 64
PHRASE_LEN = 8


def train(cfg, torch, dist, emit, progress):
    start = time.perf_counter()
    progress(-1, "setup", "run")
    device = torch.device(cfg["device"])
    on_gpu = device.type == "cuda"
    if on_gpu:
        torch.cuda.set_device(device)
    sync = (lambda: torch.cuda.synchronize(device)) if on_gpu else None
    model_cfg = models.resolve(cfg["job"], cfg["model"])
    counts = models.param_counts(model_cfg, cfg["world"])
    clock = models.CollectiveClock(sync)
    model, experts = _build(cfg, torch, dist, model_cfg, clock)
    expert_ids = {id(p) for p in experts}
    others = [p for p in model.parameters() if id(p) not in expert_ids]
    # two groups: the foreach AdamW kernels take FSDP's DTensors or the experts' plain tensors, not both at once
    optimizer = torch.optim.AdamW([{"params": others}, {"params": experts}], lr=cfg["lr"])
    batches, data = _data(cfg, torch, model_cfg["vocab"])
    setup = {"type": "setup", "rank": cfg["rank"], "params": counts["params"],
             "active_params": counts["active_params"], "embedding_params": counts["embedding"], "model": model_cfg,
             "data": data, "dtype": cfg["dtype"]}
    if cfg["job"] == "moe":
        setup["experts_per_rank"] = counts["experts_per_rank"]
    emit(dict(setup, seconds=time.perf_counter() - start))
    warmup, timed_tokens, timed_seconds = cfg["warmup_steps"], 0, 0.0
    for i in range(warmup + cfg["steps"]):
        progress(i, "step %d" % i, "run")
        began = time.time()  # wall clock: the probe measures the time to the first step from the rank's start
        batch = next(batches).to(device)
        record = _step(cfg, torch, dist, model, optimizer, experts, batch, clock)
        record.update(step=i, warmup=i < warmup, peak_memory_bytes=peak_memory(torch, device), t=began)
        emit(record)
        if i >= warmup:
            timed_tokens += record["tokens"]
            timed_seconds += record["seconds"]
    emit({"type": "summary", "rank": cfg["rank"], "steps": cfg["steps"],
          "tokens_per_s": timed_tokens / timed_seconds if timed_seconds else None})


def _build(cfg, torch, dist, model_cfg, clock):
    """The sharded model and its expert parameters (empty for the dense job). Every rank seeds alike, so the
    non-expert weights are the same everywhere before FSDP keeps each rank's shard of them."""
    torch.manual_seed(cfg["seed"])
    with torch.device(cfg["device"]):
        if cfg["job"] == "moe":
            model = models.moe(model_cfg, cfg["rank"], cfg["world"], dist, clock, cfg["seed"])
        else:
            model = models.llama(model_cfg)
    if cfg["dtype"] not in ("float32", "bfloat16"):
        raise ValueError("dtype must be float32 or bfloat16, not %r" % (cfg["dtype"],))
    param_dtype = torch.bfloat16 if cfg["dtype"] == "bfloat16" else None
    return models.shard(model, param_dtype), models.expert_parameters(model)


def _step(cfg, torch, dist, model, optimizer, experts, batch, clock):
    """One training step on batch [local_batch, seq_len + 1]: the record without its place in the run."""
    device = batch.device
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    clock.seconds = 0.0
    clock.sync()
    t0 = time.perf_counter()
    logits = model(batch[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
    loss.backward()
    # FSDP averages the other gradients over ranks; an expert's gradient arrives summed over every rank's tokens
    # through the all_to_all backward, so it is averaged the same way here.
    for p in experts:
        if p.grad is not None:
            p.grad.div_(cfg["world"])
    grad_norm = _clip(torch, dist, model.parameters(), cfg.get("max_grad_norm", 1.0))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    clock.sync()
    seconds = time.perf_counter() - t0
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)
    record = {"type": "step", "rank": cfg["rank"], "seconds": seconds, "loss": mean_loss.item() / cfg["world"],
              "tokens": batch.shape[0] * (batch.shape[1] - 1), "grad_norm": grad_norm}
    if cfg["job"] == "moe":
        record["alltoall_seconds"] = clock.seconds
    return record


def _clip(torch, dist, params, max_norm):
    """The global gradient norm, gradients scaled down to max_norm when above it (no clipping when max_norm is
    falsy). torch's clip_grad_norm_ cannot mix FSDP's DTensors with the experts' plain tensors; every element lives
    on exactly one rank either way (a DTensor's local shard, or an expert this rank owns), so the sum of squares
    over local pieces, summed over ranks, is the whole norm squared."""
    grads = [p.grad for p in params if p.grad is not None]
    local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    squares = torch.stack([g.float().pow(2).sum() for g in local]).sum()
    dist.all_reduce(squares)
    norm = squares.sqrt().item()
    if max_norm and norm > max_norm:
        for g in grads:
            g.mul_(max_norm / (norm + 1e-6))
    return norm


def peak_memory(torch, device):
    """The step's peak: GPU max_memory_allocated (reset before each step), CPU the process's peak RSS so far."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _data(cfg, torch, vocab):
    """(iterator of [local_batch, seq_len + 1] int64 token batches on the CPU, description for the setup record)."""
    if cfg["data"] == "synthetic":
        text = "synthetic: %d fixed phrases of %d random tokens (seed %d), concatenated in a random order per rank" % (
            PHRASES, PHRASE_LEN, cfg["seed"])
        return _synthetic(cfg, torch, vocab), text
    return _from_file(cfg, torch, vocab), cfg["data"]


def _synthetic(cfg, torch, vocab):
    # After a phrase's first token the next 7 follow for sure: a tiny model's loss falls within a few steps, from
    # ln(vocab) towards ln(PHRASES)/PHRASE_LEN.
    phrases = torch.randint(vocab, (PHRASES, PHRASE_LEN), generator=torch.Generator().manual_seed(cfg["seed"]))
    order = torch.Generator().manual_seed(cfg["seed"] * 100003 + 1 + cfg["rank"])
    batch, length = cfg["local_batch"], cfg["seq_len"] + 1
    picks = -(-length // PHRASE_LEN)
    while True:
        chosen = torch.randint(PHRASES, (batch, picks), generator=order)
        yield phrases[chosen].view(batch, -1)[:, :length]


def _from_file(cfg, torch, vocab):
    path = cfg["data"]
    dtype, itemsize = (torch.int32, 4) if path.endswith((".i32", ".int32")) else (torch.uint16, 2)
    window = cfg["local_batch"] * (cfg["seq_len"] + 1)
    windows = os.path.getsize(path) // itemsize // window
    if not windows:
        raise ValueError("%s holds fewer than local_batch × (seq_len + 1) = %d tokens" % (path, window))
    with open(path, "rb") as f:
        i = 0
        while True:
            f.seek((i * cfg["world"] + cfg["rank"]) % windows * window * itemsize)
            tokens = torch.frombuffer(bytearray(f.read(window * itemsize)), dtype=dtype)
            yield tokens.to(torch.int64).remainder(vocab).view(cfg["local_batch"], -1)
            i += 1
