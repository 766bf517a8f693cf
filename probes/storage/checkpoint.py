"""checkpoint: save and load a model-sized state dict on a storage tier, with torch.save/torch.load and with
torch.distributed.checkpoint (DCP), the way training jobs checkpoint.

Each host is one rank holding its own shard (distinct tensor names per rank, as with a sharded model).
  * torch.save / torch.load: every rank writes its shard to its own file; the save time includes flush and
    fsync; before the load the file's page cache is dropped (fadvise), so the load reads the filesystem.
  * DCP across hosts (tier shared, more than one host): all ranks save into one checkpoint directory
    through a gloo process group (rank 0's address is the rendezvous, rank = host index), DCP's writer fsyncs
    every file; aggregate GB/s = all ranks' bytes / the slowest rank's time between two barriers.
  * DCP per node (tier not shared, or one host): each host saves a DCP checkpoint of its own shard alone.
Every load is checked against what was saved (a fact: load_matches). GB/s = 1e9 bytes/s.
"""

import datetime
import os
import time
import warnings

from probes.common import tiers as storage_tier
from probes.common.netif import interface_for
from probes.common.ports import port_for
from probes.common.rendezvous import Mesh
from probes.params import Param, Params

PARAMS = Params(
    peers=True,
    tier=Param(dict, None, "the storage tier {name, path, shared} to checkpoint on"),
    size_mib=Param(int, 64, "MiB of state dict per rank"),
    tensors=Param(int, 8, "tensors in each rank's state dict"),
    dtype=Param(str, "bfloat16", "torch dtype of the tensors"),
    master_port=Param(int, 0, "the gloo process group's port on the first host (0: derived from the run id)"),
    sync_port=Param(int, 0, "the rendezvous port on the first host (0: derived from the run id)"),
    dcp=Param(bool, True, "also save and load with torch.distributed.checkpoint"),
    space_factor=Param(float, 1.2, "free space needed on the tier, as a multiple of what is written"),
    connect_timeout=Param(float, 120, "seconds to wait for every host at the rendezvous"),
)


def make_state_dict(torch, rank, size_bytes, tensors, dtype):
    """`tensors` tensors totalling about size_bytes, named per rank (a shard of a model)."""
    dt = getattr(torch, dtype)
    elem = torch.tensor([], dtype=dt).element_size()
    per = max(1, size_bytes // (tensors * elem))
    gen = torch.Generator().manual_seed(1234 + rank)
    return {"rank%d.layer%d.weight" % (rank, i): torch.randn(per, generator=gen).to(dt) for i in range(tensors)}


def nbytes(sd):
    return sum(t.numel() * t.element_size() for t in sd.values())


def same(torch, a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def torch_save_load(torch, sd, path):
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        torch.save(sd, fh)
        fh.flush()
        os.fsync(fh.fileno())
    storage_tier.fsync_path(os.path.dirname(path))
    save_s = time.perf_counter() - t0
    size = os.path.getsize(path)
    storage_tier.drop_cache(path)
    t0 = time.perf_counter()
    loaded = torch.load(path, map_location="cpu", weights_only=True)
    load_s = time.perf_counter() - t0
    return size, save_s, load_s, same(torch, sd, loaded)


def run(art, p, out_dir):
    tier = storage_tier.check_tier(p["tier"])
    block = port_for(art.run_id, "checkpoint/%s" % tier["name"], span=2)
    p["sync_port"], p["master_port"] = p["sync_port"] or block, p["master_port"] or block + 1
    hosts = p["hosts"] or [{"name": art.host, "addr": "127.0.0.1"}]
    rank = p["rank"]
    world = len(hosts)
    me = hosts[rank]
    art.facts.update({"tier": tier["name"], "tier_path": tier["path"], "tier_shared": tier["shared"]})
    art.facts.update({"tier_" + k: v for k, v in storage_tier.describe(tier["path"]).items()})
    base = storage_tier.run_dir(tier["path"], art.run_id)
    ck_dir = os.path.join(base, "ckpt-%s" % tier["name"])
    my_dir = os.path.join(ck_dir, me["name"])
    size = p["size_mib"] * 2**20
    across = p["dcp"] and tier["shared"] and world > 1

    ready, why = True, None
    try:
        import torch  # noqa: PLC0415 - torch is optional on nodes
        art.device["torch"] = torch.__version__
    except Exception as exc:  # noqa: BLE001
        torch = None
        ready, why = False, "torch is not importable: %s: %s" % (type(exc).__name__, exc)
    if ready and not os.path.isdir(tier["path"]):
        ready, why = False, "tier %s: %s does not exist on %s" % (tier["name"], tier["path"], me["name"])
    if ready:
        need = size * (2 + (world - 1) * 2 if across else 2)  # own torch.save + DCP (all ranks' on a shared tier)
        why = storage_tier.check_space(tier["path"], need, p["space_factor"])
        ready = why is None

    mesh = None
    try:
        if across:
            # Agree first: gloo would wait for a missing rank until its timeout.
            token = "%s/checkpoint/%s" % (art.run_id, tier["name"])
            mesh = Mesh([h["name"] for h in hosts], [h["addr"] for h in hosts], rank, p["sync_port"], token,
                        connect_timeout=p["connect_timeout"])
            states = mesh.allgather({"host": me["name"], "ready": ready, "why": why},
                                    timeout=p["connect_timeout"] + 30)
            not_ready = ["%s (%s)" % (s["host"], s["why"]) for s in states if not s["ready"]]
        else:
            not_ready = [] if ready else ["%s (%s)" % (me["name"], why)]
        if not ready:
            art.skip(why)
            return
        os.makedirs(my_dir, exist_ok=True)
        sd = make_state_dict(torch, rank, size, p["tensors"], p["dtype"])
        labels = {"tier": tier["name"]}
        written, save_s, load_s, ok = torch_save_load(torch, sd, os.path.join(my_dir, "state_dict.pt"))
        art.facts["torch_save_load_matches"] = ok
        art.add("ckpt_load_mismatch", 0 if ok else 1, "count", method="torch_save", scope="rank", **labels)
        art.add("ckpt_bytes", written, "B", method="torch_save", scope="rank", **labels)
        art.add("ckpt_save_gbps", round(written / save_s / 1e9, 4), "GB/s", method="torch_save", scope="rank",
                **labels)
        art.add("ckpt_load_gbps", round(written / load_s / 1e9, 4), "GB/s", method="torch_save", scope="rank",
                **labels)
        art.add("ckpt_save_s", round(save_s, 4), "s", method="torch_save", scope="rank", **labels)
        art.add("ckpt_load_s", round(load_s, 4), "s", method="torch_save", scope="rank", **labels)
        os.unlink(os.path.join(my_dir, "state_dict.pt"))
        if not p["dcp"]:
            return
        if across and not_ready:
            art.facts["dcp_mode"] = "per node: not every host is ready (%s)" % "; ".join(not_ready)
            across = False
        dcp_dir = os.path.join(ck_dir, "dcp") if across else os.path.join(my_dir, "dcp")
        art.facts.setdefault("dcp_mode", "across %d hosts over gloo" % world if across else
                             "per node (%s)" % ("tier not shared" if not tier["shared"] else "one host"))
        _dcp(art, torch, sd, dcp_dir, across, rank, world, hosts, p, labels)
    finally:
        if mesh is not None:
            mesh.close()
        errors = storage_tier.remove_tree(my_dir, stop_at=base)
        if errors:
            art.facts["cleanup_errors"] = errors[:5]


def _dcp(art, torch, sd, dcp_dir, across, rank, world, hosts, p, labels):
    import torch.distributed as dist  # noqa: PLC0415
    import torch.distributed.checkpoint as dcp  # noqa: PLC0415

    # DCP warns that it saves in a single process when there is no process group: that is the per-node mode.
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    if across:
        iface, _, _ = interface_for(hosts[rank]["addr"], [h["addr"] for h in hosts])
        if iface:
            os.environ["GLOO_SOCKET_IFNAME"] = iface
        dist.init_process_group("gloo", init_method="tcp://%s:%d" % (hosts[0]["addr"], p["master_port"]),
                                rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=p["connect_timeout"]))
    try:
        if rank == 0 or not across:
            os.makedirs(dcp_dir, exist_ok=True)
        barrier = dist.barrier if across else (lambda: None)
        barrier()
        t0 = time.perf_counter()
        dcp.save(sd, checkpoint_id=dcp_dir)
        own_save = time.perf_counter() - t0
        barrier()
        all_save = time.perf_counter() - t0
        storage_tier.drop_cache(dcp_dir)
        target = {k: torch.zeros_like(v) for k, v in sd.items()}
        barrier()
        t0 = time.perf_counter()
        dcp.load(target, checkpoint_id=dcp_dir)
        own_load = time.perf_counter() - t0
        barrier()
        all_load = time.perf_counter() - t0
        matches = same(torch, sd, target)
        art.facts["dcp_load_matches"] = matches
        size = nbytes(sd)
        scope = "rank" if across else "node"
        extra = dict(labels, method="dcp", ranks=world if across else 1)
        art.add("ckpt_load_mismatch", 0 if matches else 1, "count", scope=scope, **extra)
        art.add("ckpt_bytes", size, "B", scope=scope, **extra)
        art.add("ckpt_save_gbps", round(size / own_save / 1e9, 4), "GB/s", scope=scope, **extra)
        art.add("ckpt_load_gbps", round(size / own_load / 1e9, 4), "GB/s", scope=scope, **extra)
        if across:
            total = torch.tensor([float(size)], dtype=torch.float64)
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            slowest = torch.tensor([all_save, all_load], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            if rank == 0:
                art.add("ckpt_save_gbps", round(float(total[0]) / float(slowest[0]) / 1e9, 4), "GB/s",
                        scope="aggregate", **extra)
                art.add("ckpt_load_gbps", round(float(total[0]) / float(slowest[1]) / 1e9, 4), "GB/s",
                        scope="aggregate", **extra)
                art.add("ckpt_bytes", float(total[0]), "B", scope="aggregate", **extra)
            barrier()  # every rank has loaded before rank 0 removes the shared checkpoint
        if rank == 0 or not across:
            storage_tier.remove_tree(dcp_dir)
    finally:
        if across and dist.is_initialized():
            dist.destroy_process_group()
