"""training: a training job across the nodes, world size doubling until every node is used (seed, "Training").

Two jobs, one artifact each (variant = the job):
- `dense`: a Llama-3-shaped decoder sharded with FSDP2 (FLOPs-bound: it shows the GPUs);
- `moe`: a GPT-OSS-style mixture of experts with expert parallelism, tokens sent to their expert's rank with
  all-to-all (collective-bound unless the world sits in one NVLink domain: it shows the network).

The worlds (1 node on every node at once, then the first 2, 4, … all nodes) start through the cluster's launcher or
our own worker pool, with the rendezvous, timeouts and the naming of a crashed or hung rank of
probes/common/worlds.py; every rank runs the job's engine (`engine`; facts.engine says which ran, facts.torchtitan
why torchtitan did not):
- torchtitan (probes/training/titan.py: its own trainer and configs, llama3_8b under FSDP and gpt_oss_20b with
  expert parallelism, in every rank's process, its step lines read as they are logged) on GPU nodes where it is
  importable and has a tokenizer (`torchtitan.tokenizer`, its hf_assets_path). torchtitan sets a CUDA device
  unconditionally and cannot run on the CPU backend (the test cluster, CI); `engine: torchtitan` starts it anyway;
- torch's own FSDP2 (probes/training/job.py, `fully_shard`) everywhere else: the same metrics, the same records.

Data: a synthetic token stream with learnable structure unless `data` names a file of token ids (a pre-tokenised
C4 shard, see job.py); nothing is fetched at run time. torchtitan reads its own dataset (c4 through its loader: a local
copy at `torchtitan.dataset_path`, else streamed by the nodes from the Hugging Face hub).

Per world size (labels nodes, ranks), for this node's ranks: tokens_per_s_per_gpu (mean over its ranks, timed
steps), step_time_mean_s / _p50_s / _p99_s / _cv (the node's first rank, timed steps), loss_first / loss_last (the
global mean loss; neither where a step's loss was not finite: facts.nonfinite_loss then gives the world's first such
step and its loss as text), loss (finite ones) and step_seconds per step (label step: the curve and the distribution),
peak_memory_bytes (max over its ranks), time_to_first_step_s (rendezvous, build, shard, data: the slowest of its
ranks), and for the MoE alltoall_share (all-to-all seconds / step seconds, timed steps). MFU, expectations and
scaling are judged on the controller (reports/phases/training) from these and the model facts.
"""

import importlib.util
import math
import os
import statistics
import sys

from probes.common import device
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
from probes.training import models

JOBS = ("dense", "moe")
ENGINES = ("auto", "torch", "torchtitan")
# The smallest shapes that still have every part of the real model (grouped-query attention, SwiGLU, experts with
# top-k routing): the default of a bare probe run; the role passes the profile's shapes.
TINY = {
    "dense": {"layers": 2, "dim": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 176, "vocab": 512},
    "moe": {"layers": 2, "dim": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 176, "vocab": 512, "n_experts": 8,
            "top_k": 2, "moe_ffn_dim": 64, "n_shared_experts": 0},
}
PARAMS = Params(
    peers=True,
    **dict(WORLD_PARAMS, stall_timeout=Param(float, 120, "seconds without progress (no step) before the job counts "
                                                           "as hung")),
    job=Param(str, "dense", "dense (Llama-shaped, FSDP2) or moe (experts across the ranks, all-to-all)",
              choices=JOBS),
    model=Param(dict, None, "model shape (layers, dim, n_heads, n_kv_heads, ffn_dim, vocab; moe: n_experts, top_k, "
                            "moe_ffn_dim, n_shared_experts); default: the tiny shape of the job"),
    seq_len=Param(int, 64, "tokens per sequence"),
    local_batch=Param(int, 2, "sequences per rank and step"),
    steps=Param(int, 8, "timed steps"),
    warmup_steps=Param(int, 2, "steps before the timed ones (their loss is kept, their time is not)"),
    lr=Param(float, 1e-2, "AdamW learning rate (the default suits the tiny CPU shapes; the role gives real shapes "
                          "torchtitan's 3e-4)"),
    seed=Param(int, 1234, "seed of the weights and the synthetic data"),
    dtype=Param(str, "auto", "auto (bfloat16 on GPUs, float32 on CPU), bfloat16 or float32",
                choices=("auto", "bfloat16", "float32")),
    data=Param(str, "synthetic", "synthetic, or the path of a token-id file on every node (training_dataset_path)"),
    engine=Param(str, "auto", "auto (torchtitan on GPU nodes where it can run, else torch's FSDP2 job), torch or "
                              "torchtitan", choices=ENGINES),
    torchtitan=Param(dict, {}, "torchtitan's inputs: tokenizer (its hf_assets_path, on every node), dataset (c4, "
                               "c4_validation), dataset_path (a local copy; else streamed), config and module (default "
                               "llama3_8b / gpt_oss_20b), compile (true/false; default the config's)"),
)


def choose_engine(params, gpu):
    """("torchtitan" or "torch-fsdp2", why torchtitan does not run or None)."""
    asked, titan = params["engine"], params["torchtitan"] or {}
    if asked == "torch":
        return "torch-fsdp2", "not asked for (engine torch)"
    if asked == "auto" and not gpu:
        return "torch-fsdp2", "cannot run on the CPU backend (it sets a CUDA device unconditionally)"
    if importlib.util.find_spec("torchtitan") is None:
        return "torch-fsdp2", "not importable by %s (the tools step installs it on GPU nodes)" % sys.executable
    if asked == "torchtitan":
        return "torchtitan", None
    if not titan.get("tokenizer"):
        return "torch-fsdp2", "no tokenizer given (training_torchtitan_tokenizer_path: its hf_assets_path)"
    if not os.path.isdir(titan["tokenizer"]):
        return "torch-fsdp2", "tokenizer directory %s is not on this node" % titan["tokenizer"]
    return "torchtitan", None


def settings_from(params, backend, ppn, engine="torch-fsdp2"):
    job = params["job"]
    entry = "probes.training.titan:train" if engine == "torchtitan" else "probes.training.job:train"
    return dict(world_settings(params, entry, backend, ppn), job=job, torchtitan=params["torchtitan"] or {},
                # resolved here, before any rank starts: a shape no rank can build (an odd head_dim) is this node's
                # error at once, not every world's failure after its launch
                model=models.resolve(job, params["model"] or TINY[job]), seq_len=params["seq_len"],
                local_batch=params["local_batch"], steps=params["steps"], warmup_steps=params["warmup_steps"],
                lr=params["lr"], seed=params["seed"], data=params["data"],
                dtype=params["dtype"] if params["dtype"] != "auto" else "bfloat16" if backend == "nccl" else "float32")


def _sig(value):
    return float("%.6g" % value)


def _percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def record(art, world, nodes):
    """What this node's ranks of one world measured."""
    labels = {"nodes": nodes, "ranks": world.world}
    by_rank = {r: world.records(r) for r in world.ranks}
    first = by_rank[world.ranks[0]]
    env = next((x for x in first if x.get("type") == "env"), {})
    if env:
        art.device["torch"] = env.get("torch")
    setups = {r: next((x for x in recs if x.get("type") == "setup"), None) for r, recs in by_rank.items()}
    setup = setups[world.ranks[0]]
    if setup:
        for key in ("params", "active_params", "embedding_params", "model", "data", "dtype", "experts_per_rank"):
            if setup.get(key) is not None:
                art.facts[key] = setup[key]
        if setup.get("argv"):
            art.facts["torchtitan_argv"] = " ".join(setup["argv"])
    titan = next((x for x in first if x.get("type") == "titan"), None)
    if titan:
        # what torchtitan said of itself (version, the peak FLOPS its own MFU used, GPU, parallel dims)
        art.facts["torchtitan_log"] = titan.get("facts") or {}
        art.facts["torchtitan_unread_step_lines"] = titan.get("unread_step_lines") or None
    steps = [x for x in first if x.get("type") == "step"]
    # A diverged job's loss is NaN or inf (torchtitan prints "loss:      nan"). JSON has neither: the curve keeps its
    # finite points, and facts.nonfinite_loss names the world's first step without one, which fails the loss check.
    diverged = next((s for s in steps if not math.isfinite(s["loss"])), None)
    if diverged:
        art.facts.setdefault("nonfinite_loss", []).append(
            {"nodes": nodes, "ranks": world.world, "step": diverged["step"], "loss": str(diverged["loss"])})
    for s in steps:
        if math.isfinite(s["loss"]):
            art.add("loss", _sig(s["loss"]), "nats", step=s["step"], **labels)
        art.add("step_seconds", _sig(s["seconds"]), "s", step=s["step"], **labels)
    # A world whose ranks did not all finish (an OOM, a crash: the world's failure says which) keeps its steps, but
    # has no loss, step-time or rate summary: a few steps before a crash are not the job's loss curve or its pace.
    finished = all(any(x.get("type") == "summary" for x in recs) for recs in by_rank.values())
    if not finished:
        art.facts["unfinished_worlds"] = sorted(set(art.facts.get("unfinished_worlds") or []) | {nodes})
    if steps and finished and not diverged:
        art.add("loss_first", _sig(steps[0]["loss"]), "nats", **labels)
        art.add("loss_last", _sig(steps[-1]["loss"]), "nats", **labels)
    timed = [s for s in steps if not s.get("warmup")]
    if timed and finished:
        secs = [s["seconds"] for s in timed]
        mean = statistics.fmean(secs)
        art.add("step_time_mean_s", _sig(mean), "s", **labels)
        art.add("step_time_p50_s", _sig(statistics.median(secs)), "s", **labels)
        art.add("step_time_p99_s", _sig(_percentile(secs, 0.99)), "s", **labels)
        art.add("step_time_cv", _sig(statistics.pstdev(secs) / mean if mean > 0 else 0.0), "ratio", **labels)
        own_mfu = [s["mfu_pct"] for s in timed if s.get("mfu_pct") is not None]
        if own_mfu:
            # torchtitan's own MFU (its FLOPs count and peak), beside the one the controller computes from tokens/s
            art.add("torchtitan_mfu_pct", _sig(statistics.fmean(own_mfu)), "%", **labels)
        if any(s.get("alltoall_seconds") is not None for s in timed):
            art.add("alltoall_share", _sig(sum(s.get("alltoall_seconds") or 0.0 for s in timed) / sum(secs)),
                    "ratio", **labels)
    rates = [x["tokens_per_s"] for recs in by_rank.values() for x in recs
             if x.get("type") == "summary" and x.get("tokens_per_s")]
    if rates and finished:
        art.add("tokens_per_s_per_gpu", _sig(statistics.fmean(rates)), "tokens/s", **labels)
    peaks = [x["peak_memory_bytes"] for recs in by_rank.values() for x in recs
             if x.get("type") == "step" and x.get("peak_memory_bytes") is not None]
    if peaks:
        art.add("peak_memory_bytes", max(peaks), "bytes", **labels)
    ttfs = [_time_to_first_step(recs) for recs in by_rank.values()]
    ttfs = [t for t in ttfs if t is not None]
    if ttfs:
        art.add("time_to_first_step_s", _sig(max(ttfs)), "s", **labels)


def _time_to_first_step(records):
    """From the rank's start in this world (its env record) to its first step's start: rendezvous, build, shard,
    data (and on GPUs the first kernels' compilation, which lands in step 0)."""
    env = next((x for x in records if x.get("type") == "env"), None)
    step = next((x for x in records if x.get("type") == "step"), None)
    if not env or not step or env.get("t") is None or step.get("t") is None:
        return None
    return max(0.0, step["t"] - env["t"])


def run(art, params, out_dir):
    dev, gpus, gpu_facts = device.describe()
    art.device = dev
    art.facts.update({"gpu_error": gpu_facts.get("gpu_error"), "job": params["job"]})
    if importlib.util.find_spec("torch") is None:
        art.skip("torch is not importable by %s: the training jobs need torch" % sys.executable)
        return
    node = Node(art, params, out_dir)
    gpu, backend, ppn = world_shape(params, dev, gpus)
    plan = world_size_plan(node.n, params["world_sizes"])
    order = placement_order(node.n, params["racks"], params["nvlink_domains"])
    env, launch_env, node_env, if_facts = environments(node, params, ppn)
    if not gpu:
        # one thread per rank: torch's default (a thread per core) oversubscribes a node whose cores are shared
        # (ranks of several worlds, other tenants) and then spends its steps in OpenMP barriers (8x slower here)
        for e in (env, launch_env):
            e.setdefault("OMP_NUM_THREADS", "1")
    engine, titan_why_not = choose_engine(params, gpu)
    if params["engine"] == "torchtitan" and engine != "torchtitan":
        art.error("engine torchtitan asked for, but torchtitan is %s" % titan_why_not)
        return
    settings = settings_from(params, backend, ppn, engine)
    art.device["torch"] = None
    art.facts.update(if_facts)
    art.facts.update({
        "engine": engine, "torchtitan": titan_why_not,
        "torch_backend": backend, "procs_per_node": ppn, "world_sizes": ",".join(str(w) for w in plan),
        "node_rank": node.rank, "hosts": node.n, "model": settings["model"], "seq_len": settings["seq_len"],
        "local_batch": settings["local_batch"], "steps": settings["steps"],
        "warmup_steps": settings["warmup_steps"], "dtype": settings["dtype"], "data": settings["data"],
    })
    if params["job"] == "moe":
        # every rank holds n_experts / ranks experts: a world whose rank count does not divide the experts is not
        # run (said in facts.world_sizes_not_run); the others are
        experts = int(settings["model"].get("n_experts", 0))
        split = [w for w in plan if experts and experts % (w * ppn) == 0]
        not_run = ["%d node%s (%d ranks): %d experts cannot be split over %d ranks" % (
            w, "s" if w > 1 else "", w * ppn, experts, w * ppn) for w in plan if w not in split]
        if not split:
            art.error("params: %s (n_experts must be a multiple of a world's rank count)" % "; ".join(not_run))
            return
        art.facts["world_sizes_not_run"] = not_run or None
        plan = split
    drive(art, node, params, settings, plan, order, env, launch_env, node_env, record,
          agree_settings=lambda met: agree_engine(art, met, settings, engine, titan_why_not))


def agree_engine(art, node, settings, engine, why_not):
    """One engine on every node: a world's ranks run one job. torchtitan only where every node chose it; else the
    torch job everywhere, naming the node that could not (its tokenizer directory missing, its torchtitan install
    failed). Changes settings (the ranks' entry) and facts in place."""
    if node.mesh is None:
        return
    chosen = node.mesh.allgather({"engine": engine, "why": why_not}, settings["rdzv_timeout"])
    if engine != "torchtitan" or all(c["engine"] == "torchtitan" for c in chosen):
        return
    first = next(r for r, c in enumerate(chosen) if c["engine"] != "torchtitan")
    settings["entry"] = "probes.training.job:train"
    art.facts["engine"] = "torch-fsdp2"
    art.facts["torchtitan"] = "not on every node: %s: %s" % (node.hosts[first], chosen[first]["why"])
