"""What one point of the sweep and one engine start put into the artifact: the contract between the node's
inference probe and the controller (reports/phases/inference).

Rows (Artifact.add), all on the node that drives the world's sweep (the world's first node; in a one-node world
every node drives its own):
- ready_s {nodes}: from starting the engine(s) to the first 200 answer on GET /v1/models (every rank's engine up);
- per point {nodes, scenario, concurrency}: every number of SUMMARY that the tool's file holds, under the names of
  bench_result (requests_completed, requests_failed, duration_s, requests_per_s, output_tokens_per_s,
  total_tokens_per_s, input_tokens, output_tokens, peak_output_tokens_per_s, {ttft,tpot,itl,e2el}_{mean,p50,p90,
  p99}_ms) and peak_concurrent_requests (requests in flight at one instant, counted from the file's start times,
  absent where it has none; never the tool's version-dependent max_concurrent_requests), plus
  - output_tokens_per_s_per_gpu: output_tokens_per_s / the world's GPUs (nodes x GPUs per engine; on the CPU
    backend one engine process per node counts as one);
  X
Facts: requests[point key] = the per-request lists of bench_result (ttft_ms, tpot_ms, e2el_ms, input_len,
output_len, ok), for goodput against the rubric's SLOs on the controller; the point key is "n<nodes>/<scenario>/c
<concurrency>" (point_key). telemetry[point key] = GPU means over the point (GPU nodes only).
"""


def point_key(nodes, scenario, concurrency):
    return "n%d/%s/c%d" % (nodes, scenario, concurrency)


def world_gpus(nodes, tensor_parallel):
    """GPUs a world of `nodes` serves with: one engine per node on tensor_parallel GPUs (1 on the CPU backend),
    what output tokens/s per GPU divides by."""
    return nodes * max(1, tensor_parallel or 0)


def _sig(value):
    return float("%.6g" % value) if isinstance(value, float) else value


UNITS = {"requests_completed": "requests", "requests_failed": "requests", "duration_s": "s",
         "requests_per_s": "requests/s", "output_tokens_per_s": "tokens/s", "total_tokens_per_s": "tokens/s",
         "input_tokens": "tokens", "output_tokens": "tokens", "peak_output_tokens_per_s": "tokens/s",
         "peak_concurrent_requests": "requests", "max_concurrency": "requests"}


def record_point(art, nodes, scenario, concurrency, summary, requests, gpus_in_world):
    """One point's rows and per-request facts."""
    labels = {"nodes": nodes, "scenario": scenario, "concurrency": concurrency}
    for name, value in summary.items():
        if name == "max_concurrency":
            continue
        art.add(name, _sig(value), UNITS.get(name, "ms" if name.endswith("_ms") else ""), **labels)
    if summary.get("output_tokens_per_s") is not None and gpus_in_world:
        art.add("output_tokens_per_s_per_gpu", _sig(summary["output_tokens_per_s"] / gpus_in_world), "tokens/s",
                **labels)
    # InferenceX's interactivity: 1000 / TPOT, its charts' default the median's (utils/process_result.py
    # median_intvty); the mean where a file has no median
    tpot = summary.get("tpot_p50_ms") or summary.get("tpot_mean_ms")
    if tpot:
        art.add("interactivity_tokens_per_s_per_user", _sig(1000.0 / tpot), "tokens/s", **labels)
    if requests:
        art.facts.setdefault("requests", {})[point_key(nodes, scenario, concurrency)] = requests


def record_ready(art, nodes, seconds):
    art.add("ready_s", round(seconds, 3), "s", nodes=nodes)
