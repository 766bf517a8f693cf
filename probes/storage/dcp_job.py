"""The rank side of the checkpoint probe's DCP worlds: `save_load(cfg, torch, dist, emit, progress)` runs in every
rank once the process group is up (probes/common/rank.py: gloo on CPU, nccl on GPUs, one rank per GPU), the way a
training job checkpoints its shards.

Every rank holds its own shard on its device (distinct tensor names per rank, as with a sharded model: DCP writes each
once, by its rank) and all ranks of the world save into one checkpoint directory with torch.distributed.checkpoint;
DCP's writer fsyncs every file. The page cache of the checkpoint's files is dropped on every node before the load,
which reads into fresh tensors on the device. Emits one record per rank:

  {"type": "dcp", "rank", "local_rank", "device", "bytes" (this rank's state dict), "files" (in the checkpoint, as
   the node's first rank sees it; None on the others),
   "own_save_s" / "own_load_s" (this rank's dcp.save / dcp.load call), "all_save_s" / "all_load_s" (barrier to
   barrier: the slowest rank's time, the same on every rank), "matches" (what was loaded equals what was saved)}

or, when its dcp.load raised, one {"type": "dcp_load_failed", "rank", "local_rank", "bytes", "on_data" (the load
raised on the checkpoint's files: see load_failure), "error"} before the rank fails (its error names the load's).

The checkpoint directory is the settings' `dcp_dirs[<nodes of the world>]`: a node's own directory for one-node worlds,
one directory of the shared tier for a world across nodes. Rank 0 removes it once every rank has loaded.
"""

import os
import time

from probes.common import tiers as storage_tier


def make_state_dict(torch, rank, size_bytes, tensors, dtype, device="cpu"):
    """`tensors` tensors totalling about size_bytes, named per rank (a shard of a model), on `device`."""
    dt = getattr(torch, dtype)
    elem = torch.tensor([], dtype=dt).element_size()
    per = max(1, size_bytes // (tensors * elem))
    gen = torch.Generator().manual_seed(1234 + rank)
    return {"rank%d.layer%d.weight" % (rank, i): torch.randn(per, generator=gen).to(dt).to(device)
            for i in range(tensors)}


def nbytes(sd):
    return sum(t.numel() * t.element_size() for t in sd.values())


def same(torch, a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def _one_line(exc):
    text = str(exc).strip()
    return "%s: %s" % (type(exc).__name__, text.splitlines()[0][:300]) if text else type(exc).__name__


def load_failure(exc):
    """(what failed, on_data) of a dcp.load that raised. DCP runs its steps on the checkpoint (reading the metadata,
    planning against it, reading the shards) in every rank and gathers their failures into one CheckpointException,
    raised in every rank of the world, with the step and each failed rank's own exception: a shard that lost its tail
    raises EOFError there. That is a load that raised on the checkpoint's data (on_data): what was saved did not come
    back. Any other exception comes from the world, not from the files (a peer gone: gloo or nccl's error in one of
    DCP's collectives, raised as it is), and says nothing about the data; nor does running out of memory."""
    failures = getattr(exc, "failures", None)
    if not isinstance(failures, dict):
        return _one_line(exc), False
    step = exc.args[0] if exc.args and isinstance(exc.args[0], str) else "?"
    inner = {r: (f[0] if isinstance(f, tuple) else f) for r, f in failures.items()}
    text = "DCP's %s step failed on rank%s %s" % (step, "s" if len(inner) > 1 else "", "; ".join(
        "%s: %s" % (r, _one_line(e)) for r, e in sorted(inner.items())))
    return text, not all(isinstance(e, MemoryError) or "OutOfMemoryError" in type(e).__name__
                         for e in inner.values())


def _truncate_fault(cfg, path):
    """Fault injection for tests: {"rank", "nodes", "mode": "truncate_shard"} cuts the files that hold this rank's
    tensors to half their size between the save and the load, the way a filesystem that loses data leaves them."""
    fault = cfg.get("fault") or {}
    if (fault.get("mode") != "truncate_shard" or int(fault.get("rank", -1)) != cfg["rank"]
            or int(fault.get("nodes", -1)) != cfg["nodes"]):
        return
    from torch.distributed.checkpoint import FileSystemReader  # noqa: PLC0415 - in the rank, where torch is

    mine = "rank%d." % cfg["rank"]
    for name in sorted({v.relative_path for k, v in FileSystemReader(path).read_metadata().storage_data.items()
                        if k.fqn.startswith(mine)}):
        shard = os.path.join(path, name)
        os.truncate(shard, os.path.getsize(shard) // 2)


def save_load(cfg, torch, dist, emit, progress):
    import torch.distributed.checkpoint as dcp  # noqa: PLC0415 - in the rank, where torch is
    from torch.distributed.checkpoint.api import CheckpointException  # noqa: PLC0415

    device = torch.device(cfg["device"])
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    rank = cfg["rank"]
    path = cfg["dcp_dirs"][str(cfg["nodes"])]
    progress(0, "state dict", "run")
    sd = make_state_dict(torch, rank, cfg["size_bytes"], cfg["tensors"], cfg["dtype"], device)
    sync()
    if rank == 0:
        os.makedirs(path, exist_ok=True)
    dist.barrier()
    progress(1, "save", "run")
    t0 = time.perf_counter()
    dcp.save(sd, checkpoint_id=path)
    own_save = time.perf_counter() - t0
    dist.barrier()
    all_save = time.perf_counter() - t0
    _truncate_fault(cfg, path)
    if cfg["local_rank"] == 0:  # the page cache is a node's: one rank of each node drops it
        storage_tier.drop_cache(path)
    target = {k: torch.zeros_like(v) for k, v in sd.items()}
    dist.barrier()
    progress(2, "load", "run")
    t0 = time.perf_counter()
    try:
        dcp.load(target, checkpoint_id=path)
        sync()
    except (Exception, CheckpointException) as exc:  # CheckpointException is a BaseException
        # the load's verdict is a record too: without it the load would leave no trace of having been checked
        error, on_data = load_failure(exc)
        emit({"type": "dcp_load_failed", "rank": rank, "local_rank": cfg["local_rank"], "bytes": nbytes(sd),
              "on_data": on_data, "error": error})
        raise RuntimeError("dcp.load failed: %s" % error) from None
    own_load = time.perf_counter() - t0
    dist.barrier()
    all_load = time.perf_counter() - t0
    files = sum(len(names) for _, _, names in os.walk(path)) if cfg["local_rank"] == 0 else None
    emit({"type": "dcp", "rank": rank, "local_rank": cfg["local_rank"], "device": str(device), "bytes": nbytes(sd),
          "files": files, "own_save_s": own_save, "all_save_s": all_save, "own_load_s": own_load,
          "all_load_s": all_load, "matches": same(torch, sd, target)})
    dist.barrier()  # every rank has loaded before rank 0 removes the checkpoint
    if rank == 0:
        storage_tier.remove_tree(path)
