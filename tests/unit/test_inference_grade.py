"""Inference grading (reports/phases/inference/grade.py, rubric.d/inference.yml) on artifacts the node's own code
builds from real `vllm bench serve` result files (inference_runs: the CPU build of vLLM 0.32.0 serving a tiny random
model, and one public GPU file of vLLM's benchmark_serving)."""

import json
from pathlib import Path

import pytest
import yaml
from inference_runs import DP2, FIXTURES, H200, OVERLONG, SINGLE, inference_doc, per_engine_files, point_files, read

from probes.artifact import Artifact
from probes.inference import bench_result, points
from reports import DATA_DIR
from reports import grading as grade
from reports.grading import select
from reports.load import run_of_artifacts as make_run
from reports.phases.inference import grade as gi
from reports.phases.inference import section
from reports.phases.inference.grade import graded_slos
from reports.rate import rate

RUBRIC = grade.load_rubric()
DOUBLE = {(2, "chat", 1): 2.0, (2, "chat", 4): 2.0}
L40S_FILE = FIXTURES / "l40s-vllm-0.9-benchmark_serving-llmd" / "base.inf.json"


def check(cid):
    return next(c for c in RUBRIC["checks"] if c["id"] == cid)


def by_id(rows):
    out = {}
    for r in rows:
        out.setdefault(r["check_id"], []).append(r)
    return out


def test_the_seed_tests_moved_out_of_the_placeholders_with_their_ids_and_categories():
    single, multi = check("inference.inferencex_single_node"), check("inference.inferencex_multi_node")
    assert (single["category"], single["kind"]) == ("compute", "infer_throughput")
    assert (multi["category"], multi["kind"]) == ("networking", "infer_scaling")
    placeholders = yaml.safe_load((Path(DATA_DIR) / "not_implemented.yml").read_text())["checks"]
    assert not [c for c in placeholders if c["id"].startswith("inference.")]
    assert not [c for c in RUBRIC["checks"] if c["id"].startswith("inference.") and c["kind"] == "not_implemented"]
    assert all(c.get("source") for c in RUBRIC["checks"] if c["id"].startswith("inference.") and
               c["kind"] not in ("artifact", "net_failures"))


def test_goodput_is_counted_from_the_per_request_lists_against_the_slo():
    """chat at concurrency 4: count by hand the requests within a chosen SLO, compare with the grader's count."""
    summary, requests = read(SINGLE / "chat.c4.json")
    slo = {"ttft_ms": 30.0, "tpot_ms": 5.6}
    by_hand = 0
    for ok, ttft, tpot in zip(requests["ok"], requests["ttft_ms"], requests["tpot_ms"]):
        if ok and ttft <= 30.0 and (tpot is None or tpot <= 5.6):
            by_hand += 1
    assert 0 < by_hand < len(requests["ok"]) == 16  # the SLO cuts through this point's requests
    g = gi.goodput(requests, summary["duration_s"], slo)
    assert (g["good"], g["total"]) == (by_hand, 16)
    assert g["fraction"] == pytest.approx(by_hand / 16)
    assert g["per_s"] == pytest.approx(by_hand / 0.8146069660001558)
    # the rubric's chat SLO (450 ms, 40 ms): the tiny model answers every request well inside it
    assert gi.goodput(requests, summary["duration_s"], check("inference.goodput")["slo"]["chat"])["good"] == 16


def test_the_point_key_is_the_nodes_format():
    """The controller repeats the node's point key format (it does not import the probe): the two must agree."""
    from probes.inference import points

    assert gi.point_key(2, "agentic", 16) == points.point_key(2, "agentic", 16) == "n2/agentic/c16"


def test_telemetry_that_disagrees_with_the_curve_is_noted_and_the_curve_decides():
    doc = inference_doc("h1", telemetry={(1, "chat", 4): {"gpu_util_pct": 99, "mem_util_pct": 10, "samples": 3}})
    regime, why = gi.regime_of_points(make_run([doc]))[("h1", 1, "chat", 4)]
    assert regime == "memory-bound" and why.endswith("; telemetry says compute-bound (GPU utilization 99 %, memory "
                                                     "10 %)")


def test_a_request_of_one_token_is_judged_on_its_ttft_and_a_failed_one_is_never_good():
    slo = {"ttft_ms": 100, "tpot_ms": 10}
    assert gi.is_good(True, 50, None, slo) and not gi.is_good(True, 150, None, slo)
    assert not gi.is_good(False, 1, 1, slo) and not gi.is_good(True, 50, 11, slo) and gi.is_good(True, 100, 10, slo)


def test_goodput_is_graded_at_each_scenarios_lowest_concurrency_on_one_node():
    c = check("inference.goodput")
    run = make_run([inference_doc("h1")])
    rows = gi.grade_goodput(c, run, "h1")
    assert [(r["subject"], r["status"]) for r in rows] == [
        ("agentic, c4, 1 node", "pass"), ("chat, c1, 1 node", "pass"), ("prefill, c4, 1 node", "pass")]
    assert rows[1]["observed"] == ("100.0 % (8 of 8 requests within TTFT <= 450 ms, TPOT <= 40 ms); goodput 5.35 "
                                   "requests/s")
    assert rows[1]["expected"] == ">= 90 % within the SLOs (warn below 99 %)"
    # a tighter SLO than the fixture's chat c1 TTFTs (p50 17.5 ms): most requests miss it, the check fails
    tight = dict(c, slo={"chat": {"ttft_ms": 17.0, "tpot_ms": 40}})
    [row] = gi.grade_goodput(tight, run, "h1")[1:2]
    _, requests = read(SINGLE / "chat.c1.json")
    good = sum(1 for t in requests["ttft_ms"] if t <= 17.0)
    assert row["status"] == "fail" and row["observed"].startswith("%.1f %% (%d of 8" % (100 * good / 8, good))
    assert gi.grade_goodput(tight, run, "h1")[0]["reason"] == "no SLO for scenario agentic in the rubric"


def test_one_slow_request_of_eight_is_a_warning_two_a_fail(tmp_path):
    """The quick profile's 8 requests at c1: with request 0's first token 600 ms late (the capture's chat.c1.json),
    7 of 8 (87.5 %) are within the chat SLO. One request decides that against the 90 % line, which 8 requests
    cannot resolve: a warning saying so (it failed the node). Two slow requests (75 %) are a fail."""
    data = json.loads((SINGLE / "chat.c1.json").read_text())
    for slow in (1, 2):
        late = json.loads(json.dumps(data))
        for i in range(slow):
            late["ttfts"][i] += 0.6
            late["latencies"][i] += 0.6
        path = tmp_path / ("chat.c1.slow%d.json" % slow)
        path.write_text(json.dumps(late))
        run = make_run([inference_doc("h1", worlds={1: {**point_files(), ("chat", 1): path}})])
        [row] = [r for r in gi.grade_goodput(check("inference.goodput"), run, "h1")
                 if r["subject"] == "chat, c1, 1 node"]
        if slow == 1:
            assert (row["status"], row["observed"].split(";")[0]) == (
                "warn", "87.5 % (7 of 8 requests within TTFT <= 450 ms, TPOT <= 40 ms)"), row
            assert row["reason"] == ("one request from the fail line, with 8 requests (100 needed to tell 99 % apart):"
                                     " run more prompts (the standard profile) to judge")
        else:
            assert (row["status"], row["reason"]) == ("fail", ""), row


def test_a_failed_request_fails_the_errors_check_naming_the_point():
    """overlong.c4.json: the server refused 5 of 16 prompts longer than its context (HTTP 400)."""
    c = check("inference.request_errors")
    files = point_files()
    run = make_run([inference_doc("h1"), inference_doc("h2", worlds={1: {**files, ("chat", 4): OVERLONG}})])
    [ok] = gi.grade_errors(c, run, "h1")
    assert ok["status"] == "pass" and ok["observed"] == "0 of 48 requests failed at 4 points"
    [bad] = gi.grade_errors(c, run, "h2")
    assert bad["status"] == "fail" and bad["observed"] == "5 of 48 requests failed at 4 points"
    assert bad["reason"] == "failed requests at n1/chat/c4 (5)"
    # a failed request is never good: the point's goodput is at most the 11 that were answered
    _, requests = read(OVERLONG)
    slo = check("inference.goodput")["slo"]["chat"]
    assert slo == {"ttft_ms": 450, "tpot_ms": 40}
    g = gi.goodput(requests, 0.2955460210000638, slo)
    assert (g["good"], g["total"]) == (11, 16) and requests["ttft_ms"].count(None) == 5
    # the lowest chat concurrency (c1) is what the goodput check grades: it still passes there
    assert gi.grade_goodput(check("inference.goodput"), run, "h2")[1]["status"] == "pass"


def test_a_failed_request_without_a_reason_phrase_is_never_good():
    """overlong.c4.json with its 5 "Bad Request" reasons blanked: vLLM writes output.error = response.reason or ""
    for a refusal without a reason phrase. The 5 are still failed (no first token): goodput counts 11 of 16, as for
    the capture, never 16 with a ttft of 0 ms."""
    data = json.loads(OVERLONG.read_text())
    data["errors"] = ["" for _ in data["errors"]]
    summary, requests = bench_result.read(json.dumps(data), "blank.json")
    assert summary["requests_failed"] == 5
    slo = check("inference.goodput")["slo"]["chat"]
    g = gi.goodput(requests, summary["duration_s"], slo)
    assert (g["good"], g["total"]) == (11, 16)
    assert [requests["ok"][i] for i in (3, 6, 7, 10, 13)] == [False] * 5
    assert not gi.is_good(requests["ok"][3], requests["ttft_ms"][3], requests["tpot_ms"][3], slo)


def test_regimes_on_the_real_curve_and_from_telemetry():
    # chat c1 -> c4 on the CPU engine: throughput x 3.67 while TPOT p50 stays at 5.4-5.5 ms: batch-limited decode
    s1, _ = read(SINGLE / "chat.c1.json")
    s4, _ = read(SINGLE / "chat.c4.json")
    curve = [(1, s1["output_tokens_per_s"], s1["tpot_p50_ms"]), (4, s4["output_tokens_per_s"], s4["tpot_p50_ms"])]
    regimes = gi.curve_regimes(curve)
    assert regimes[1][0] == regimes[4][0] == "memory-bound"
    assert regimes[4][1] == "c1→c4: throughput × 3.67, TPOT × 1.02 (batch-limited decode)"
    # the same engine with a saturated step: throughput flat while TPOT doubles
    flat = gi.curve_regimes(curve + [(16, s4["output_tokens_per_s"] * 1.1, s4["tpot_p50_ms"] * 2)])
    assert flat[16][0] == "compute-bound" and flat[4][0] == "memory-bound"
    assert gi.curve_regimes(curve[:1]) == {}
    assert gi.telemetry_regime({"gpu_util_pct": 99, "mem_util_pct": 75})[0] == "memory-bound"
    assert gi.telemetry_regime({"gpu_util_pct": 98, "mem_util_pct": 30})[0] == "compute-bound"
    assert gi.telemetry_regime({"gpu_util_pct": 40, "mem_util_pct": 10}) is None
    assert gi.comms_regime(80.0, 100.0)[0] == "comms-bound" and gi.comms_regime(95.0, 100.0) is None


def test_regime_per_point_comms_bound_across_nodes_and_telemetry_where_the_curve_cannot_tell():
    files = point_files()
    # two nodes at the same concurrency per engine (the probe's label; 2 x c in flight): two engines each serving
    # what one did is throughput x 2; chat c4 at 0.7 x that
    two = {("chat", 1): files[("chat", 1)], ("chat", 4): files[("chat", 4)], ("prefill", 4): files[("prefill", 4)]}
    doc = inference_doc("h1", worlds={1: files, 2: two}, scale={(2, "chat", 4): 1.4, (2, "chat", 1): 2.0},
                        telemetry={(1, "prefill", 4): {"gpu_util_pct": 97, "mem_util_pct": 20, "samples": 4}})
    regimes = gi.regime_of_points(make_run([doc]))
    assert regimes[("h1", 2, "chat", 4)][0] == "comms-bound"
    assert regimes[("h1", 2, "chat", 4)][1].startswith("output tokens/s per GPU 0.70 × one node's")
    assert regimes[("h1", 2, "chat", 1)][0] == "memory-bound"  # same per-GPU throughput as one node at c1
    assert regimes[("h1", 1, "prefill", 4)] == ("compute-bound", "telemetry: GPU utilization 97 %, memory 20 %")
    assert regimes[("h1", 1, "agentic", 4)][0] is None


def test_multi_node_goodput_per_gpu_against_one_node():
    c = check("inference.inferencex_multi_node")  # warn below 0.9, fail below 0.75
    files = point_files()
    two = {("chat", 1): files[("chat", 1)], ("chat", 4): files[("chat", 4)]}
    hosts = ["h1", "h2"]
    # two engines each serving what one did: the point's throughput twice the one-node point's
    level = make_run([inference_doc("h1", worlds={1: files, 2: two}, scale=DOUBLE), inference_doc("h2")])
    rows = gi.grade_scaling(c, level, hosts)
    assert [r["status"] for r in rows] == ["pass", "pass"]
    # chat c4 per engine on 2 nodes (8 in flight): 2 x 19.6 good requests/s over 2 GPUs against 19.6 over 1
    assert rows[0]["observed"] == "chat 1.00 (chat, c4, 2 nodes vs 1 node: 19.6 vs 19.6 good requests/s per GPU)"
    assert rows[0]["expected"] == "goodput per GPU at the most nodes >= 0.75 × one node's (warn below 0.9)"
    slow = make_run([inference_doc("h1", worlds={1: files, 2: two}, scale={(2, "chat", 4): 1.2}),
                     inference_doc("h2")])
    row = gi.grade_scaling(c, slow, hosts)[0]
    assert row["status"] == "warn" and row["observed"].startswith("chat 0.60")  # a fail, warn only on the CPU
    assert row["expected"].endswith("cpu backend: warn only (test hosts share CPUs)")
    gpu_slow = make_run([inference_doc(h, worlds={1: files, 2: two} if h == "h1" else None, backend="cuda", gpu=H200,
                                       gpus_per_node=8, scale={(2, "chat", 4): 1.2}) for h in hosts])
    assert gi.grade_scaling(c, gpu_slow, hosts)[0]["status"] == "fail"
    alone = gi.grade_scaling(c, make_run([inference_doc("h1")]), ["h1"])[0]
    assert alone["status"] == "skip" and alone["reason"] == (
        "no multi-node point with a one-node point at the same concurrency per engine (nodes: 1)")


def test_the_real_data_parallel_capture_against_one_engine():
    """dp2: 2 data-parallel engines on one host (they share its cores). Its chat.c4 kept 4 requests in flight over
    the 2 engines: c2 per engine, as the probe labels it (its c1 file, half a request per engine, is no point of the
    probe's plan). 12.39 good requests/s over 2 engines against the one-engine curve interpolated at c2 (c1 5.35,
    c4 19.6: sqrt(5.35 x 19.6) = 10.2): 0.60, a fail that the CPU backend makes a warning; the point is comms-bound."""
    c = check("inference.inferencex_multi_node")
    two = per_engine_files(DP2, 2)
    assert sorted(two) == [("agentic", 2), ("chat", 2), ("prefill", 2)]
    run = make_run([inference_doc("h1", worlds={1: point_files(), 2: two})])
    [row] = gi.grade_scaling(c, run, ["h1"])
    assert row["status"] == "warn"
    assert row["observed"] == ("chat 0.60 (chat, c2, 2 nodes vs 1 node interpolated: 6.2 vs 10.2 good requests/s "
                               "per GPU)")
    regimes = gi.regime_of_points(run)
    assert regimes[("h1", 2, "chat", 2)][0] == "comms-bound"


def test_a_world_of_two_nodes_is_set_against_one_node_at_the_same_concurrency_per_engine():
    """The probe labels a point with its concurrency per engine and keeps nodes x that in flight (facts
    concurrency_is): a two-node world at c4 is set against one node at c4, not at c2. Two nodes that each serve
    only 0.6 of what one node serves are a fail, named at c4."""
    c = check("inference.inferencex_multi_node")
    files = point_files()
    hosts = ["h1", "h2"]
    two = {("chat", 1): files[("chat", 1)], ("chat", 4): files[("chat", 4)]}
    run = make_run([inference_doc(h, worlds={1: files, 2: two} if h == "h1" else None, backend="cuda", gpu=H200,
                                  gpus_per_node=8, scale={(2, "chat", 1): 1.2, (2, "chat", 4): 1.2})
                    for h in hosts])
    row = gi.grade_scaling(c, run, hosts)[0]
    assert row["status"] == "fail" and row["observed"].startswith("chat 0.60 (chat, c4, 2 nodes vs 1 node: ")
    assert gi.regime_of_points(run)[("h1", 2, "chat", 4)][0] == "comms-bound"


def saturated_doc(host, worlds):
    """One host's artifact written by the probe's own writer (points.record_point) from the real chat c1 summary,
    with a 10 s duration and hand-set per-request lists: worlds {nodes: {concurrency: (good, total)}}, the good
    requests at TPOT 10 ms, the others at 90 ms (outside the chat SLO's 40 ms); one GPU per node (cuda)."""
    summary, _ = read(SINGLE / "chat.c1.json")
    art = Artifact("inference", "r", host)
    art.device.update(backend="cuda", model=H200, count=1)
    art.facts.update(engine="vllm", model_name="tiny-random", gpus_per_node=1, tensor_parallel=1,
                     world_sizes_run=",".join(str(n) for n in sorted(worlds)))
    for nodes, concs in sorted(worlds.items()):
        for conc, (good, total) in sorted(concs.items()):
            requests = {"ok": [True] * total, "ttft_ms": [100.0] * total,
                        "tpot_ms": [10.0] * good + [90.0] * (total - good)}
            points.record_point(art, nodes, "chat", conc, dict(summary, duration_s=10.0), requests,
                                points.world_gpus(nodes, 1))
    return art.to_dict()


def test_a_saturated_top_point_is_passed_over_for_the_highest_concurrency_one_node_meets_its_slos_at():
    """The sweep runs to saturation: at c4 no request of either world is within the chat SLO (TPOT 90 ms > 40 ms).
    One node at c1: 10 of 10 good in 10 s on 1 GPU, 1.0 good requests/s per GPU; two nodes at c1: 4 of 20 good in
    10 s on 2 GPUs, 0.2: a fail at c1 (ratio 0.20 < 0.75), never a skip for the top point's lack of good requests."""
    c = check("inference.inferencex_multi_node")
    run = make_run([saturated_doc("h1", {1: {1: (10, 10), 4: (0, 10)}, 2: {1: (4, 20), 4: (0, 20)}})])
    [row] = gi.grade_scaling(c, run, ["h1"])
    assert row["status"] == "fail"
    assert row["observed"] == ("chat 0.20 (chat, c1, 2 nodes vs 1 node: 0.2 vs 1 good requests/s per GPU; c4 not "
                               "compared: no good request on one node)")
    # two nodes level with one at c1: a pass, still judged at c1
    level = make_run([saturated_doc("h1", {1: {1: (10, 10), 4: (0, 10)}, 2: {1: (20, 20), 4: (0, 20)}})])
    assert gi.grade_scaling(c, level, ["h1"])[0]["status"] == "pass"
    # no concurrency both worlds ran with a good request on one node: unjudged, and the reason says so
    none = make_run([saturated_doc("h1", {1: {1: (0, 10), 4: (0, 10)}, 2: {1: (4, 20), 4: (0, 20)}})])
    [row] = gi.grade_scaling(c, none, ["h1"])
    assert row["status"] == "skip" and row["reason"] == (
        "chat: no concurrency per engine the 2-node world ran has a good request on one node (c4: no good request "
        "on one node; c1: no good request on one node)")
    # a two-node point between one-node points of which one has no good request: not interpolated through zero
    between = make_run([saturated_doc("h1", {1: {1: (10, 10), 4: (0, 10)}, 2: {2: (4, 20)}})])
    [row] = gi.grade_scaling(c, between, ["h1"])
    assert row["status"] == "skip" and row["reason"] == (
        "chat: no concurrency per engine the 2-node world ran has a good request on one node (c2: no one-node "
        "figure to interpolate: the one-node point at c4 has no good request)")


def test_the_one_node_figure_is_interpolated_between_its_points_never_extrapolated():
    curve = {1: 5.0, 4: 20.0}
    assert gi.baseline_at(curve, 4) == (20.0, False)
    value, interpolated = gi.baseline_at(curve, 2)
    assert interpolated and value == pytest.approx(10.0)  # log-log: halfway between 1 and 4 is 2
    assert gi.baseline_at(curve, 8) == (None, False)


def test_single_node_throughput_skips_without_a_published_figure_and_on_the_cpu():
    c = check("inference.inferencex_single_node")
    summary, requests = read(L40S_FILE)
    assert summary["output_tokens_per_s"] > 1000 and requests == {}  # a GPU file saved without per-request lists
    gpu = inference_doc("g1", worlds={1: {("chat", 900): L40S_FILE}}, backend="cuda", gpu="NVIDIA L40S",
                        gpus_per_node=4, model_name="Llama-3.2-3B-Instruct")
    h200 = inference_doc("g2", backend="cuda", gpu=H200, gpus_per_node=8)
    run = make_run([gpu, h200, inference_doc("c1")])
    [row] = gi.grade_throughput(c, run, "g1")
    assert row["status"] == "skip" and row["subject"] == "chat, c900, 1 node"
    assert row["observed"] == "%.0f output tokens/s per GPU" % (summary["output_tokens_per_s"] / 4)
    assert row["reason"] == "no expectation for NVIDIA L40S: it is not in gpus.yml"
    assert gi.grade_throughput(c, run, "g2")[0]["reason"] == (
        "no expectation for H200-SXM: gpus.yml has no inference_output_tps_per_gpu for this GPU model")
    assert gi.grade_throughput(c, run, "c1")[0]["reason"] == "backend=cpu: expectation is for cuda/rocm"


def test_single_node_throughput_against_a_figure_and_for_its_model_only(monkeypatch):
    models = select.load_models(make_run([]))
    monkeypatch.setitem(models["H200-SXM"], "inference_output_tps_per_gpu", 700.0)
    monkeypatch.setattr(select, "load_models", lambda run: models)  # gpu_model reads it there
    c = check("inference.inferencex_single_node")
    served = c["model_name"]
    run = make_run([inference_doc("g1", backend="cuda", gpu=H200, gpus_per_node=1, model_name=served),
                    inference_doc("g2", backend="cuda", gpu=H200, gpus_per_node=1)])
    [row] = gi.grade_throughput(c, run, "g1")  # chat c4: 629 tokens/s per GPU, 0.898 of 700: warn below 0.85 x
    assert row["status"] == "pass" and row["subject"] == "chat, c4, 1 node"
    assert row["expected"] == ">= 490 (0.7 × inference_output_tps_per_gpu 700)"
    monkeypatch.setitem(models["H200-SXM"], "inference_output_tps_per_gpu", 800.0)
    assert gi.grade_throughput(c, run, "g1")[0]["status"] == "warn"
    assert gi.grade_throughput(c, run, "g2")[0]["reason"] == (
        "the expectation is for %s; this run served tiny-random" % served)


def _hf_snapshot(hub, repo_id, config):
    """A model as huggingface_hub's cache lays it out: models--org--name/{blobs/<sha256>, refs/main,
    snapshots/<commit>/config.json -> ../../blobs/<sha256>}."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    commit = "3c8f1a2b9d0e4f5a6b7c8d9e0f1a2b3c4d5e6f7a"
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    blob = repo / "blobs" / "5f0c9a1e2d3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5"
    blob.write_text(json.dumps(config))
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(Path("..") / ".." / "blobs" / blob.name)
    return snap


LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "model_type": "llama",
                "num_hidden_layers": 80, "torch_dtype": "bfloat16", "transformers_version": "4.47.0"}


def test_the_served_model_is_named_from_the_hf_cache_layout_and_its_config(tmp_path):
    """A snapshot directory's own name is a commit hash: the name is the repository id of the cache's
    models--org--name; config.json's "_name_or_path" is recorded as it is (here the model it was quantized from)."""
    from probes.inference import inference

    snap = _hf_snapshot(tmp_path / "hub", "nvidia/Llama-3.3-70B-Instruct-FP8",
                        dict(LLAMA_CONFIG, _name_or_path="meta-llama/Llama-3.3-70B-Instruct"))
    assert inference.model_names(str(snap) + "/") == {
        "model_name": "nvidia/Llama-3.3-70B-Instruct-FP8", "model_config_name": "meta-llama/Llama-3.3-70B-Instruct"}
    plain = tmp_path / "models" / "Llama-3.3-70B-Instruct-FP8"
    plain.mkdir(parents=True)
    assert inference.model_names(str(plain)) == {"model_name": "Llama-3.3-70B-Instruct-FP8",
                                                 "model_config_name": None}
    (plain / "config.json").write_text(json.dumps(dict(LLAMA_CONFIG, _name_or_path="/tmp/quantize/out")))
    assert inference.model_names(str(plain))["model_config_name"] == "/tmp/quantize/out"


@pytest.mark.parametrize("served, config_name, status", [
    ("Llama-3.3-70B-Instruct-FP8", None, "pass"),  # a directory named as the Hub names the model
    ("nvidia/Llama-3.3-70B-Instruct-FP8", None, "pass"),  # a Hugging Face cache snapshot (model_names)
    ("llama_3.3_70b_instruct_fp8", None, "pass"),
    ("3c8f1a2b9d", "nvidia/Llama-3.3-70B-Instruct-FP8", "pass"),  # named only by its config.json
    ("my-model", "/scratch/Llama-3.3-70B-Instruct-FP8", "pass"),  # a path in config.json: its last part
    ("meta-llama/Llama-3.3-70B-Instruct", None, "skip"),  # not the FP8 model the figure is for
    ("Llama-3.3-70B-Instruct-FP8-Dynamic", "meta-llama/Llama-3.3-70B-Instruct", "skip"),
])
def test_the_expectations_model_is_matched_by_normalised_name(monkeypatch, served, config_name, status):
    """rubric's "Llama 3.3 70B Instruct FP8" against the names a real model directory gives: before, compared as
    strings, no directory name nor cache path ever matched and every row was a skip."""
    models = select.load_models(make_run([]))
    monkeypatch.setitem(models["H200-SXM"], "inference_output_tps_per_gpu", 700.0)
    monkeypatch.setattr(select, "load_models", lambda run: models)
    c = check("inference.inferencex_single_node")
    doc = inference_doc("g1", backend="cuda", gpu=H200, gpus_per_node=1, model_name=served)
    doc["facts"]["model_config_name"] = config_name
    [row] = gi.grade_throughput(c, make_run([doc]), "g1")
    assert row["status"] == status
    if status == "skip":
        assert row["reason"] == "the expectation is for Llama 3.3 70B Instruct FP8; this run served %s" % served


def test_model_names_compare_with_the_org_optional():
    assert gi.same_model("meta-llama/Llama-3.3-70B-Instruct", "Llama 3.3 70B Instruct")
    assert gi.same_model("Llama 3.3 70B Instruct", "meta-llama/Llama-3.3-70B-Instruct")
    assert not gi.same_model("meta-llama/Llama-3.3-70B-Instruct", "someone/Llama-3.3-70B-Instruct")
    assert not gi.same_model("Llama 3.3 70B Instruct FP8", None)
    assert gi.model_id("/shared/models/Llama-3.3-70B-Instruct-FP8/") == (None, "llama-3-3-70b-instruct-fp8")


def test_throughput_and_its_line_are_each_shown_on_their_side_of_the_other(monkeypatch):
    """chat c4 serves 628.524 output tokens/s per GPU; a figure of 897.9 puts the fail line at 0.7 × 897.9 = 628.53.
    Before: "629 output tokens/s per GPU" failed beside ">= 628.5" (both texts on the wrong side)."""
    models = select.load_models(make_run([]))
    monkeypatch.setitem(models["H200-SXM"], "inference_output_tps_per_gpu", 897.9)
    monkeypatch.setattr(select, "load_models", lambda run: models)
    c = check("inference.inferencex_single_node")
    run = make_run([inference_doc("g1", backend="cuda", gpu=H200, gpus_per_node=1, model_name=c["model_name"])])
    [row] = gi.grade_throughput(c, run, "g1")
    assert row["status"] == "fail"
    assert row["observed"] == "628.5 output tokens/s per GPU"
    assert row["expected"] == ">= 628.53 (0.7 × inference_output_tps_per_gpu 897.9)"
    monkeypatch.setitem(models["H200-SXM"], "inference_output_tps_per_gpu", 700.0)  # nothing near a line: as before
    [row] = gi.grade_throughput(c, run, "g1")
    assert (row["observed"], row["expected"]) == ("629 output tokens/s per GPU",
                                                  ">= 490 (0.7 × inference_output_tps_per_gpu 700)")


def test_a_scaling_ratio_just_under_the_line_is_not_shown_on_it():
    """goodput per GPU at 2 nodes 0.7496 × one node's, below fail_below 0.75: "%.2f" showed "0.75" beside the fail."""
    files = point_files()
    two = {("chat", 1): files[("chat", 1)], ("chat", 4): files[("chat", 4)]}
    run = make_run([inference_doc(h, worlds={1: files, 2: two} if h == "h1" else None, backend="cuda", gpu=H200,
                                  gpus_per_node=8, scale={(2, "chat", 1): 1.4992, (2, "chat", 4): 1.4992})
                    for h in ("h1", "h2")])
    c = check("inference.inferencex_multi_node")
    assert float(c["fail_below"]) == 0.75
    row = gi.grade_scaling(c, run, ["h1", "h2"])[0]
    assert row["status"] == "fail" and row["observed"].startswith("chat 0.7496 (chat, c4, 2 nodes vs 1 node: ")
    # and the section's scaling table, on the same side of the line (its plain fmt showed "0.75")
    [table_row] = section.scaling_table(run, graded_slos(run)).rows
    assert table_row[0] == "chat" and table_row[-1] == "0.7496", table_row


def test_a_cpu_run_skips_the_gpu_checks_with_backend_cpu_and_judges_the_rest():
    files = point_files()
    docs = [inference_doc("c1", worlds={1: files, 2: {("chat", 4): files[("chat", 4)]}}, ready={1: 9.5, 2: 14.0},
                          scale=DOUBLE),
            inference_doc("c2", ready={1: 8.0})]
    rows = by_id(r for r in grade.grade(make_run(docs)) if r["check_id"].startswith("inference."))
    gated = {c["id"] for c in RUBRIC["checks"] if c["id"].startswith("inference.") and c.get("backends")}
    assert gated == {"inference.inferencex_single_node", "inference.ready_time"}
    for cid in gated:
        assert {(r["status"], r["reason"]) for r in rows[cid]} == {
            ("skip", "backend=cpu: expectation is for cuda/rocm")}
    for cid in ("inference.ran", "inference.failures", "inference.request_errors", "inference.goodput",
                "inference.inferencex_multi_node"):
        assert {r["status"] for r in rows[cid]} == {"pass"}, cid


def test_ready_time_on_a_gpu_backend():
    c = check("inference.ready_time")  # warn above 60 s, fail above 120 s
    files = point_files()
    run = make_run([inference_doc("g1", worlds={1: files, 2: {("chat", 4): files[("chat", 4)]}}, backend="cuda",
                                  gpu=H200, gpus_per_node=8, ready={1: 35.0, 2: 75.0})])
    rows = grade.PER_HOST_KINDS["metric"](c, run, "g1")
    assert [(r["subject"], r["status"], r["observed"]) for r in rows] == [
        ("nodes=1", "pass", "35 s"), ("nodes=2", "warn", "75 s")]


def test_failures_and_skips_name_their_reasons():
    crash = {"nodes": 2, "kind": "crash", "log": "inference.n2.log",
             "message": "the engine on h2 exited before it answered: CUDA out of memory"}
    run = make_run([inference_doc("h1", failures=[crash], status="error"), inference_doc("h2", status="skipped")])
    [row] = gi.PER_HOST["infer_errors"](check("inference.request_errors"), run, "h2")
    assert row["status"] == "skip" and row["reason"] == "vllm is not installed on this node"
    from reports.phases.network.grade import grade_failures

    [fail] = grade_failures(check("inference.failures"), run, "h1")
    assert fail["status"] == "fail" and "(log: artifacts/h1/inference.n2.log)" in fail["reason"]


def test_the_phases_checks_count_in_coverage():
    """A CPU run of the phase alone: its judged checks give compute and networking coverage; the GPU-only ones
    (the single-node expectation, the ready time) stay skipped and so lower it, never the score."""
    files = point_files()
    docs = [inference_doc("c1", worlds={1: files, 2: {("chat", 4): files[("chat", 4)]}}, scale=DOUBLE),
            inference_doc("c2")]
    rows = grade.grade(make_run(docs))
    doc = rate([r for r in rows if r["check_id"].startswith("inference.")])
    cats = {c["id"]: c for c in doc["categories"]}
    assert cats["compute"]["coverage"] > 0 and cats["compute"]["score"] == 100
    assert cats["networking"]["coverage"] > 0 and cats["networking"]["score"] == 100
    checks = {c["check_id"]: c for c in doc["checks"]}
    assert checks["inference.goodput"]["graded"] == 6 and checks["inference.inferencex_multi_node"]["graded"] == 2
    assert checks["inference.inferencex_single_node"]["graded"] == 0
    assert checks["inference.inferencex_single_node"]["kind"] == "infer_throughput"


def test_the_fixture_files_are_the_tools_own():
    data = json.loads((SINGLE / "chat.c1.json").read_text())
    assert data["backend"] == "vllm" and len(data["ttfts"]) == data["num_prompts"] == 8


class _World:
    """What probes/inference/inference.py's record() reads of a finished world: its ranks and each rank's records
    (probes/inference/job.py writes them; here one point, a real result file as the node reads it)."""

    def __init__(self, recs):
        self.ranks = [0]
        self._recs = recs

    def records(self, rank):
        return self._recs


def test_the_node_divides_by_the_gpus_its_engines_hold_not_every_gpu_of_the_node():
    """One engine per node on tensor_parallel GPUs: 8-GPU nodes serving with tensor parallel 4 use 4 GPUs each, so
    output tokens/s per GPU is the world's tokens/s over nodes x 4 (InferenceX divides by the GPUs serving)."""
    from probes.artifact import Artifact
    from probes.inference import inference

    summary, requests = read(point_files()[("chat", 4)])
    art = Artifact("inference", "r", "g1")
    art.facts.update(gpus_per_node=8, tensor_parallel=4)
    inference.record(art, _World([{"type": "point", "scenario": "chat", "concurrency": 4, "summary": summary,
                                   "requests": requests}]), 2)
    rows = {r["metric"]: r["value"] for r in art.to_dict()["results"]}
    assert rows["output_tokens_per_s_per_gpu"] == pytest.approx(rows["output_tokens_per_s"] / 8, rel=1e-3)
    art.facts.update(tensor_parallel=8)  # the default: every GPU of the node
    art.results.clear()
    inference.record(art, _World([{"type": "point", "scenario": "chat", "concurrency": 4, "summary": summary,
                                   "requests": requests}]), 2)
    rows = {r["metric"]: r["value"] for r in art.to_dict()["results"]}
    assert rows["output_tokens_per_s_per_gpu"] == pytest.approx(rows["output_tokens_per_s"] / 16, rel=1e-3)


# what probes/inference/loadgen.py says when `vllm bench serve` raises: its exception's last line (vLLM's serve.py
# raises this when the first request of a point is refused, e.g. a prompt longer than the engine's max_model_len)
INITIAL_RUN_FAILED = ("ValueError: Initial test run failed - Please make sure benchmark arguments are correctly "
                      "specified. Error: Bad Request")


def test_a_point_the_load_generator_failed_at_fails_the_errors_check_and_is_an_error_row_of_goodput():
    """chat and agentic measured, prefill failed at both concurrencies (job.py's point_error records, through the
    probe's own record()): request_errors fails naming both points and the tool's reason, and goodput has an error
    row for prefill instead of no row."""
    from probes.artifact import Artifact
    from probes.inference import inference

    files = {k: v for k, v in point_files().items() if k[0] != "prefill"}
    doc = inference_doc("h1", worlds={1: files})
    art = Artifact("inference", "r", "h1")
    inference.record(art, _World([{"type": "point_error", "name": "prefill.c%d" % c, "scenario": "prefill",
                                   "concurrency": c, "error": INITIAL_RUN_FAILED} for c in (1, 4)]), 1)
    doc["facts"]["points_not_measured"] = art.facts["points_not_measured"]
    run = make_run([doc])
    [row] = gi.grade_errors(check("inference.request_errors"), run, "h1")
    assert row["status"] == "fail"
    assert row["observed"].endswith("at 3 points; 2 points not measured: the load generator failed")
    assert row["reason"] == "not measured: prefill, c1, 1 node (%s); prefill, c4, 1 node (%s)" % (
        INITIAL_RUN_FAILED, INITIAL_RUN_FAILED)
    rows = {r["subject"]: r for r in gi.grade_goodput(check("inference.goodput"), run, "h1")}
    assert rows["prefill, 1 node"]["status"] == "error"
    assert rows["prefill, 1 node"]["reason"].startswith("no point of this scenario measured: prefill, c1, 1 node (")
    assert {rows[s]["status"] for s in ("chat, c1, 1 node", "agentic, c4, 1 node")} <= {"pass", "warn", "fail"}
    # a clean sweep still passes, and says every point was measured
    [clean] = gi.grade_errors(check("inference.request_errors"), make_run([inference_doc("h1")]), "h1")
    assert clean["status"] == "pass" and clean["expected"] == "0 failed, every point measured"


def test_every_point_of_the_sweep_draws_prompts_of_its_own():
    """vLLM's random datasets build prompt i from the seed and i alone, and one engine serves the whole sweep with
    prefix caching on: with one seed, prefill.c4's first 8 prompts were prefill.c1's, still cached (TTFT and
    tokens/s better than a cold run by hand). Each point now has its own seed, in 1-node and 2-node worlds alike."""
    from probes.inference.inference import SCENARIOS, sweep_points

    for nodes in (1, 2):
        plan = sweep_points(SCENARIOS, [16, 1, 4], nodes, 4, 8, 1)
        seeds = [p["args"][p["args"].index("--seed") + 1] for p in plan]
        assert len(plan) == 3 * len(SCENARIOS) and len(set(seeds)) == len(plan), seeds
        assert [p["concurrency"] for p in plan[:3]] == [1, 4, 16]
        prefill = {p["concurrency"]: p["args"] for p in plan if p["scenario"] == "prefill"}
        assert prefill[4][prefill[4].index("--num-prompts") + 1] == str(16 * nodes)
    assert sweep_points(SCENARIOS, [1], 1, 4, 8, 2) != sweep_points(SCENARIOS, [1], 1, 4, 8, 1)  # the param counts


def _longer_chat_c1(tmp_path, good, repeats=250):
    """The fixture's chat c1 result file (8 requests) as one of repeats x 8 requests, the 8 made again one after the
    other (start times and duration moved on), every request after the first `good` answered with a first token
    after 1 s (over the chat SLO's 450 ms)."""
    data = json.loads((SINGLE / "chat.c1.json").read_text())
    n, duration = data["num_prompts"], data["duration"]
    for key in ("input_lens", "output_lens", "ttfts", "itls", "latencies", "generated_texts", "errors",
                "queue_times"):
        data[key] = data[key] * repeats
    data["start_times"] = [t + k * duration for k in range(repeats) for t in data["start_times"]]
    data["ttfts"] = [t if i < good else 1.0 for i, t in enumerate(data["ttfts"])]
    data["num_prompts"] = data["completed"] = n * repeats
    data["duration"] = duration * repeats
    path = tmp_path / ("good%d" % good) / "chat.c1.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("good, status, shown", [
    (1799, "fail", "89.95"),   # under the 90 % floor: "%.1f" showed 90.0 beside ">= 90 %"
    (1979, "warn", "98.95"),   # under the 99 % warn line: it showed 99.0
    (1960, "warn", "98.0"),    # far from both: one decimal, as before
])
def test_a_goodput_just_under_a_line_is_shown_under_it(tmp_path, good, status, shown):
    worlds = {1: {**point_files(), ("chat", 1): _longer_chat_c1(tmp_path, good)}}
    run = make_run([inference_doc("h1", worlds=worlds)])
    row = next(r for r in gi.grade_goodput(check("inference.goodput"), run, "h1") if r["subject"] == "chat, c1, 1 node")
    assert row["status"] == status
    assert row["observed"].startswith("%s %% (%d of 2000 requests within TTFT <= 450 ms, TPOT <= 40 ms)" % (
        shown, good)), row
    assert row["expected"] == ">= 90 % within the SLOs (warn below 99 %)"
