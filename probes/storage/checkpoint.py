"""checkpoint: save and load a model-sized state dict on a storage tier, with torch.save/torch.load and with
torch.distributed.checkpoint (DCP), the way training jobs checkpoint.

  * torch.save / torch.load, in the probe on each host: the host writes its shard to its own file; the save time
    includes flush and fsync; before the load the file's page cache is dropped (fadvise), so the load reads the
    filesystem.
  * DCP in worlds of torch ranks (probes/common/worlds.py), one rank per GPU (nccl, the shards on the GPUs) or
    cpu_procs_per_node ranks on the CPU backend (gloo), started through the cluster's launcher (srun, mpirun,
    torchrun) or the probe's own workers, with the worlds' timeouts and the naming of a crashed or hung rank.
    The rank's part is probes/storage/dcp_job.py. The worlds: every node on its own (each into its own directory),
    then, on a tier every node shares, one world of all nodes saving into one checkpoint directory (world_sizes
    changes the node counts). The nodes first agree that each can run (torch importable, the tier there, room for
    what is written); a node that cannot is named, and the others run their own worlds alone.
Per world (labels method=dcp, nodes, ranks): per rank (scope rank, label rank) its GB/s of save and load and its
bytes; this node's ranks together (scope node: their bytes over the world's barrier-to-barrier time); the world
(scope aggregate, on the node of rank 0: every rank's bytes over that time). Every load is checked against what was
saved (ckpt_load_mismatch, and the facts torch_save_load_matches and dcp_load_matches); a DCP load that raised on the
checkpoint's data (a shard cut short raises EOFError: probes/storage/dcp_job.py load_failure) is a mismatch of each
rank whose load raised, and every load that raised is in the fact dcp_load_errors (nodes, rank, on_data, error). A
world that failed before its loads were checked has no ckpt_load_mismatch: the controller names it from
facts.failures. GB/s = 1e9 bytes/s.
"""

import os
import time

from probes.common import device
from probes.common import tiers as storage_tier
from probes.common.ports import port_param
from probes.common.rendezvous import Mesh
from probes.common.worlds import (
    WORLD_PARAMS,
    Node,
    drive,
    environments,
    placement_order,
    world_settings,
    world_shape,
    world_size_plan,
)
from probes.params import Param, Params
from probes.storage.dcp_job import make_state_dict, same

PARAMS = Params(
    peers=True,
    **dict(WORLD_PARAMS,
           launch_timeout=Param(float, 600, "seconds for one world's processes to start, save, load and finish"),
           stall_timeout=Param(float, 300, "seconds without progress (a save or a load that does not end) before "
                                           "the world counts as hung"),
           rdzv_timeout=Param(float, 600, "seconds to wait for every host at the worlds' rendezvous: the nodes "
                                          "come from their torch.save, which ends at different times on a busy "
                                          "tier")),
    tier=Param(dict, None, "the storage tier {name, path, shared} to checkpoint on"),
    size_mib=Param(int, 64, "MiB of state dict per rank"),
    tensors=Param(int, 8, "tensors in each rank's state dict"),
    dtype=Param(str, "bfloat16", "torch dtype of the tensors"),
    sync_port=Param(int, 0, "the port on the first host where the nodes agree that each can run (0: derived from "
                            "the run id)"),
    dcp=Param(bool, True, "also save and load with torch.distributed.checkpoint"),
    space_factor=Param(float, 1.2, "free space needed on the tier, as a multiple of what is written"),
    connect_timeout=Param(float, 120, "seconds to wait for every host at the rendezvous"),
)


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
    # the play's hosts and addresses (the action's peers); alone, this host on loopback
    hosts = list(p["hosts"] or [art.host])
    addresses = [str(a) for a in (p["addresses"] or (hosts if p["hosts"] else ["127.0.0.1"]))]
    rank = p["rank"]
    me = hosts[rank]
    dev, gpus, gpu_facts = device.describe()
    art.device = dict(dev, torch=None)
    art.facts.update({"tier": tier["name"], "tier_path": tier["path"], "tier_shared": tier["shared"],
                      "gpu_error": gpu_facts.get("gpu_error")})
    art.facts.update({"tier_" + k: v for k, v in storage_tier.describe(tier["path"]).items()})
    base = storage_tier.run_dir(tier["path"], art.run_id)
    ck_dir = os.path.join(base, "ckpt-%s" % tier["name"])
    my_dir = os.path.join(ck_dir, me)
    size = p["size_mib"] * 2**20
    gpu, backend, ppn = world_shape(p, dev, gpus)
    across = p["dcp"] and tier["shared"] and len(hosts) > 1
    plan = world_size_plan(len(hosts), p["world_sizes"] or [1, len(hosts)]) if across else [1]
    if not plan:
        art.error("params: world_sizes %s: none is a node count of 1..%d" % (p["world_sizes"], len(hosts)))
        return

    ready, why = True, None
    try:
        import torch  # noqa: PLC0415 - torch is optional on nodes
        art.device["torch"] = torch.__version__
    except Exception as exc:  # noqa: BLE001
        torch = None
        ready, why = False, "torch is not importable: %s: %s" % (type(exc).__name__, exc)
    if ready and not os.path.isdir(tier["path"]):
        ready, why = False, "tier %s: %s does not exist on %s" % (tier["name"], tier["path"], me)
    if ready:
        # this node's torch.save file and its ranks' checkpoint; a shared tier holds every node's at once (the
        # nodes do not wait for each other between torch.save and their one-node worlds)
        need = (size + (size * ppn if p["dcp"] else 0)) * (len(hosts) if tier["shared"] else 1)
        why = storage_tier.check_space(tier["path"], need, p["space_factor"])
        ready = why is None

    not_ready = [] if ready else ["%s (%s)" % (me, why)]
    if across:
        # Agree first: a world would wait for a missing rank until its timeout.
        mesh = Mesh(hosts, addresses, rank,
                    port_param(p, "sync_port", art.run_id, "checkpoint/%s/ready" % tier["name"]),
                    "%s/checkpoint/%s" % (art.run_id, tier["name"]), connect_timeout=p["connect_timeout"])
        try:
            states = mesh.allgather({"host": me, "ready": ready, "why": why},
                                    timeout=p["connect_timeout"] + 30)
        finally:
            mesh.close()
        not_ready = ["%s (%s)" % (s["host"], s["why"]) for s in states if not s["ready"]]
    if not ready:
        art.skip(why)
        return
    try:
        os.makedirs(my_dir, exist_ok=True)
        labels = {"tier": tier["name"]}
        sd = make_state_dict(torch, rank, size, p["tensors"], p["dtype"])
        written, save_s, load_s, ok = torch_save_load(torch, sd, os.path.join(my_dir, "state_dict.pt"))
        del sd
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
        if p["dcp"]:
            _dcp_worlds(art, dict(p, hosts=hosts, addresses=addresses), out_dir, not_ready, plan,
                        (gpu, backend, ppn), size, {"1": os.path.join(my_dir, "dcp-n1"),
                         **{str(w): os.path.join(ck_dir, "dcp-n%d" % w) for w in plan if w > 1}}, labels)
    finally:
        errors = storage_tier.remove_tree(my_dir, stop_at=base)
        if rank == 0:  # what a failed world across the nodes left in the shared directory
            for w in plan:
                if w > 1:
                    errors += storage_tier.remove_tree(os.path.join(ck_dir, "dcp-n%d" % w), stop_at=base)
        if errors:
            art.facts["cleanup_errors"] = errors[:5]


def _dcp_worlds(art, params, out_dir, not_ready, plan, shape, size, dirs, labels):
    """DCP in worlds of ranks: across the nodes when every one can run, else this node's own world alone."""
    gpu, backend, ppn = shape
    if not_ready:
        mode = "per node: not every host can run (%s)" % "; ".join(not_ready)
    elif plan == [1]:
        mode = "per node (%s)" % ("tier not shared" if not params["tier"]["shared"] else "one host"
                                  if len(params["hosts"]) == 1 else "world_sizes: 1")
    else:
        mode = "worlds of %s nodes" % ", ".join(str(w) for w in plan)
    if not_ready or plan == [1]:
        # this node alone: no store, no barrier with nodes that have nothing to run with it (or cannot run at all)
        rank, plan = params["rank"], [1]
        params = dict(params, hosts=[params["hosts"][rank]], addresses=[params["addresses"][rank]], rank=0)
    art.facts["dcp_mode"] = "%s; %d rank%s per node (%s)" % (mode, ppn, "s" if ppn > 1 else "",
                                                              "one per GPU" if gpu else "CPU")
    node = Node(art, params, out_dir)
    env, launch_env, node_env, if_facts = environments(node, params, ppn)
    if not gpu:
        for e in (env, launch_env):
            e.setdefault("OMP_NUM_THREADS", "1")
    art.facts.update(if_facts)
    art.facts.update({"torch_backend": backend, "procs_per_node": ppn, "world_sizes": ",".join(map(str, plan))})
    settings = dict(world_settings(params, "probes.storage.dcp_job:save_load", backend, ppn), size_bytes=size,
                    tensors=params["tensors"], dtype=params["dtype"], dcp_dirs=dirs)
    matches, verified = [], set()  # every load's verdict; the worlds whose ranks here all checked theirs

    def record(art, world, nodes):
        recs = [x for r in world.ranks for x in world.records(r) if x.get("type") == "dcp"]
        extra = dict(labels, method="dcp", nodes=nodes, ranks=world.world)
        for x in (x for r in world.ranks for x in world.records(r) if x.get("type") == "dcp_load_failed"):
            # the rank's load raised: on the checkpoint's data (a shard that cannot be read back is data lost, a
            # mismatch of this rank's load), or for the world's sake (a peer gone: no verdict on the data; the
            # world's failure says what happened, and the controller names the world as not verified)
            art.facts.setdefault("dcp_load_errors", []).append(
                {"nodes": nodes, "rank": x["rank"], "on_data": bool(x.get("on_data")), "error": x.get("error")})
            if x.get("on_data"):
                matches.append(False)
                art.add("ckpt_load_mismatch", 1, "count", scope="rank", rank=x["rank"], **extra)
        for x in recs:
            matches.append(x["matches"])
            art.add("ckpt_load_mismatch", 0 if x["matches"] else 1, "count", scope="rank", rank=x["rank"], **extra)
            art.add("ckpt_bytes", x["bytes"], "B", scope="rank", rank=x["rank"], **extra)
            art.add("ckpt_save_gbps", round(x["bytes"] / x["own_save_s"] / 1e9, 4), "GB/s", scope="rank",
                    rank=x["rank"], **extra)
            art.add("ckpt_load_gbps", round(x["bytes"] / x["own_load_s"] / 1e9, 4), "GB/s", scope="rank",
                    rank=x["rank"], **extra)
        if len(recs) != len(world.ranks):
            return  # a rank failed (the world's failure says which): its node's and world's totals would be short
        verified.add(nodes)
        save_s, load_s = max(x["all_save_s"] for x in recs), max(x["all_load_s"] for x in recs)
        mine = sum(x["bytes"] for x in recs)
        scopes = [("node", mine)]
        if nodes > 1 and any(x["rank"] == 0 for x in recs):
            # every rank holds the same size: the world's bytes; the barrier-to-barrier time is the slowest rank's
            scopes.append(("aggregate", recs[0]["bytes"] * world.world))
        for scope, total in scopes:
            art.add("ckpt_bytes", total, "B", scope=scope, **extra)
            art.add("ckpt_save_gbps", round(total / save_s / 1e9, 4), "GB/s", scope=scope, **extra)
            art.add("ckpt_load_gbps", round(total / load_s / 1e9, 4), "GB/s", scope=scope, **extra)
        art.facts["dcp_files_n%d" % nodes] = recs[0]["files"]

    drive(art, node, params, settings, plan, placement_order(node.n, params["racks"], params["nvlink_domains"]),
          env, launch_env, node_env, record)
    # True only where every world of this node checked its loads: a failed world's may never have been
    unchecked = [f for f in art.facts.get("failures") or () if f.get("nodes") not in verified]
    art.facts["dcp_load_matches"] = False if not all(matches) else None if unchecked or not matches else True
