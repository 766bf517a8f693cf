"""collectives: torch.distributed collectives across the nodes, world size doubling until every node is used.

The worlds (1 node on every node at once, then the first 2, 4, … all nodes), their launch through srun, mpirun,
torchrun or our own worker pool, rendezvous, timeouts and the reports of hangs and crashes are the shared
mechanics of probes/common/worlds.py; every rank runs the sweep of probes/network/worker.py.

Results per (collective, size, placement, nodes): time_us (mean per iteration, max over ranks), algbw_gbps,
busbw_gbps (not for a one-rank world: nothing crosses a bus there), wrong (elements of this node's ranks whose
result was wrong on one checked call). Facts: backend, interface, plan, and `failures` (one entry per failed world
size, with its kind, message and log file).
"""

import importlib.util
import sys

from probes.common import device
from probes.common.worlds import (
    WORLD_PARAMS,
    Node,
    drive,
    environments,
    mem_available_bytes,
    placement,
    placement_order,
    world_settings,
    world_shape,
    world_size_plan,
)
from probes.network.plan import RECORDED_PARAMS, human_bytes, message_sizes
from probes.params import SIZE, Param, Params

DEFAULT_COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast"]
PARAMS = Params(
    peers=True,
    **WORLD_PARAMS,
    collectives=Param(list, DEFAULT_COLLECTIVES, "collectives to measure"),
    min_bytes=Param(SIZE, 8, "smallest message"),
    max_bytes=Param(SIZE, 4 << 20, "largest message"),
    factor=Param(int, 2, "each message size is the previous one times this"),
    cpu_max_bytes=Param(SIZE, None, "largest message on the CPU backend (gloo), when smaller than max_bytes"),
    dtype=Param(str, "float32", "torch dtype of the buffers"),
    warmup=Param(int, 2, "warm-up iterations per size"),
    iters=Param(int, 10, "timed iterations per size"),
    min_iters=Param(int, 3, "timed iterations per size at least, also past max_seconds_per_size"),
    max_seconds_per_size=Param(float, 1.0, "fewer iterations of a size that takes longer than this"),
    check=Param(bool, True, "check every result against the expected values"),
    **RECORDED_PARAMS,
)


def settings_from(params, backend, ppn, sizes, host_mem_limit):
    return dict(world_settings(params, "probes.network.worker:sweep", backend, ppn),
                collectives=params["collectives"] or DEFAULT_COLLECTIVES, sizes=sizes, dtype=params["dtype"],
                warmup=params["warmup"], iters=params["iters"], min_iters=params["min_iters"],
                max_seconds_per_size=params["max_seconds_per_size"], check=params["check"],
                host_mem_limit_bytes=host_mem_limit)


def _sig(value):
    """Seven significant digits: enough for any timer, and tiny CPU-backend bandwidths keep their precision."""
    return float("%.7g" % value)


def record_results(art, world, node_ranks):
    """The metrics of one world on this node: timing from the node's first rank, wrong summed over its ranks."""
    per_rank = {r: [x for x in world.records(r) if x.get("type") == "result"] for r in node_ranks}
    first = per_rank[node_ranks[0]]
    wrong_by_step = {}
    for rows in per_rank.values():
        for row in rows:
            if row.get("wrong") is not None:
                wrong_by_step[row["step"]] = wrong_by_step.get(row["step"], 0) + int(row["wrong"])
    env = next((x for x in world.records(node_ranks[0]) if x.get("type") == "env"), {})
    for row in first:
        labels = {"collective": row["collective"], "size_bytes": row["size_bytes"], "placement": row["placement"],
                  "nodes": row["nodes"], "ranks": row["ranks"], "dtype": row["dtype"]}
        art.add("time_us", _sig(row["time_us"]), "us", **labels)
        art.add("algbw_gbps", _sig(row["algbw_gbps"]), "GB/s", **labels)
        if row.get("busbw_gbps") is not None:
            art.add("busbw_gbps", _sig(row["busbw_gbps"]), "GB/s", **labels)
        if row["step"] in wrong_by_step:
            art.add("wrong", wrong_by_step[row["step"]], "count", **labels)
    skipped = [x for r in node_ranks for x in world.records(r) if x.get("type") == "skip"]
    return env, len(first), skipped


def record(art, world, nodes):
    """What this node's ranks of one world measured: the curves, torch's and NCCL's versions, skipped sizes."""
    env_info, _, skipped = record_results(art, world, world.ranks)
    if env_info:
        art.device["torch"] = env_info.get("torch")
        if env_info.get("nccl"):
            art.facts["nccl_version"] = env_info["nccl"]
    for item in skipped:
        art.facts.setdefault("skipped_sizes", []).append(
            "%s %s at %d nodes: %s" % (item["collective"], human_bytes(item["size_bytes"]), nodes, item["reason"]))


def run(art, params, out_dir):
    dev, gpus, gpu_facts = device.describe()
    art.device = dev
    art.facts.update({"gpu_error": gpu_facts.get("gpu_error")})
    if importlib.util.find_spec("torch") is None:
        art.skip("torch is not importable by %s: the collectives need torch (gloo on CPU, nccl on GPU)"
                 % sys.executable)
        return
    node = Node(art, params, out_dir)
    gpu, backend, ppn = world_shape(params, dev, gpus)
    max_bytes = params["max_bytes"]
    if not gpu and params["cpu_max_bytes"]:
        cap = params["cpu_max_bytes"]
        if cap < max_bytes:
            art.facts["max_bytes_capped"] = "%s on the cpu backend (asked %s)" % (human_bytes(cap),
                                                                                human_bytes(max_bytes))
            max_bytes = cap
    sizes = message_sizes(params["min_bytes"], max_bytes, params["factor"])
    plan = world_size_plan(node.n, params["world_sizes"])
    order = placement_order(node.n, params["racks"], params["nvlink_domains"])
    env, launch_env, node_env, if_facts = environments(node, params, ppn)
    mem = mem_available_bytes()
    settings = settings_from(params, backend, ppn, sizes, (mem // (2 * ppn)) if (mem and not gpu) else None)
    art.device["torch"] = None
    art.facts.update(if_facts)
    art.facts.update({
        "torch_backend": backend, "procs_per_node": ppn, "master_addr": node.addresses[order[0]], "port": node.port,
        "socket_ifname": env.get("GLOO_SOCKET_IFNAME") if backend == "gloo" else env.get("NCCL_SOCKET_IFNAME"),
        "world_sizes": ",".join(str(w) for w in plan), "node_rank": node.rank, "hosts": node.n,
        "sizes": "%s .. %s, factor %d" % (human_bytes(sizes[0]), human_bytes(sizes[-1]), params["factor"]),
        "collectives": ",".join(settings["collectives"]),
        "env": " ".join("%s=%s" % kv for kv in sorted(params["env"].items())) or None,
        "placement": [placement(node.hosts, order[:w] if w > 1 else [node.rank], params["racks"],
                                params["nvlink_domains"]) for w in plan],
    })
    drive(art, node, params, settings, plan, order, env, launch_env, node_env, record)
