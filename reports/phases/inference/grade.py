"""Grading of the inference phase (probe `inference`): pure functions of a run.

The node records one row per number of each point of the sweep, labelled {nodes, scenario, concurrency}, and every
request's TTFT / TPOT in facts.requests[point key] (probes/inference/points.py, the contract). The node judges
nothing: goodput against the rubric's SLOs, the comparison across node counts and the regime of each point are
worked out here.

Check kinds (rubric.d/inference.yml), registered by reports.grading.kinds.register_phase_kinds:
  infer_errors      per host: every request of every point the host drove succeeded; a failed request fails the
                    check, naming its points
  infer_goodput     per host and scenario: the fraction of requests within the SLOs at the scenario's lowest
                    concurrency on one node (fail below fail_below, warn below warn_below)
  infer_throughput  per host: the highest output tokens/s per GPU of a scenario's one-node points against the GPU
                    model's published figure (gpus.yml), for the model the figure is for; a skip with its reason
                    wherever no figure exists
  infer_scaling     cluster: goodput per GPU at the largest node count against one node at the same concurrency per
                    engine, the highest where one node has a good request, per scenario (the worst scenario sets the
                    status; the CPU backend warns at most)
The probe's failures are judged by the network phase's net_failures, the ready time by the generic metric kind.

Regimes (regime_of_points): each point is compute-bound, memory-bound or comms-bound, from the curve, the one-node
comparison and the telemetry; see curve_regimes, comms_regime and telemetry_regime for the rules.
"""

import math
import re
import statistics

from reports.grading import expectations
from reports.grading.preconditions import ungradable
from reports.grading.rows import SEVERITY_OF_STATUS, make_row, no_result_row, status_below
from reports.grading.rubric import graded_checks, shipped_checks
from reports.grading.select import find_artifact, gpu_model
from reports.shown import shown

PROBE = "inference"
GOODPUT_CHECK = "inference.goodput"
LATENCIES = ("ttft", "tpot", "itl", "e2el")
PERCENTILES = ("p50", "p90", "p99")

# Regime thresholds (see curve_regimes, comms_regime, telemetry_regime).
DECODE_SCALING_MIN = 0.5  # throughput grows at least as concurrency ** 0.5 from the previous point
TPOT_FLAT_MAX = 1.25  # while TPOT p50 grows by at most 25 %
COMMS_RATIO_BELOW = 0.9  # per-GPU output tokens/s across nodes below 0.9 × one node's
TELEMETRY_MEMORY_PCT = 60.0  # NVML memory utilization: share of time device memory was read or written
TELEMETRY_COMPUTE_PCT = 90.0  # NVML GPU utilization: share of time a kernel ran


def point_key(nodes, scenario, concurrency):
    """The key of a point in facts.requests and facts.telemetry: the node side's format (probes/inference/points.py,
    point_key), repeated here because the controller reads it and does not import the probe."""
    return "n%d/%s/c%d" % (nodes, scenario, concurrency)


def point_name(nodes, scenario, concurrency):
    """"chat, c4, 1 node": a point as rows and tables name it."""
    return "%s, c%d, %d node%s" % (scenario, concurrency, nodes, "s" if nodes > 1 else "")


# ---------------------------------------------------------------------------------------------------------------
# tables


def points(run, host=None):
    """{(host, nodes, scenario, concurrency): {metric: value}} of every point the hosts drove (a world's first node
    records its points; in a one-node world every node is its own first node)."""
    out = {}
    for r in run.records(PROBE):
        lab = r["labels"]
        if "scenario" not in lab or (host is not None and r["host"] != host):
            continue
        key = (r["host"], int(lab["nodes"]), lab["scenario"], int(lab["concurrency"]))
        out.setdefault(key, {})[r["metric"]] = r["value"]
    return out


def ready_times(run):
    """{(host, nodes): seconds} from starting the engine(s) to the first answer."""
    return {(r["host"], int(r["labels"]["nodes"])): r["value"] for r in run.records(PROBE)
            if r["metric"] == "ready_s"}


def facts_of(run, host):
    doc = run.artifact(host, PROBE)
    return (doc or {}).get("facts") or {}


def requests_of(run, host, nodes, scenario, concurrency):
    """The per-request lists of one point (ttft_ms, tpot_ms, e2el_ms, input_len, output_len, ok), or None."""
    return (facts_of(run, host).get("requests") or {}).get(point_key(nodes, scenario, concurrency))


def errored_points(run, host, nodes=None):
    """The points of the host's sweep the load generator failed at (facts points_not_measured, kind error: `vllm
    bench serve` raised, e.g. its first request refused, or left no result file), optionally of one node count."""
    return [p for p in facts_of(run, host).get("points_not_measured") or []
            if p.get("kind") == "error" and (nodes is None or p.get("nodes") == nodes)]


def errored_text(found):
    """"chat, c4, 1 node (why)" for each errored point, joined."""
    return "; ".join("%s (%s)" % (point_name(int(p.get("nodes") or 1), p.get("scenario"),
                                             int(p.get("concurrency") or 0)), p.get("why") or "no reason given")
                     for p in found)


def telemetry_of(run, host, nodes, scenario, concurrency):
    return (facts_of(run, host).get("telemetry") or {}).get(point_key(nodes, scenario, concurrency))


def gpus_in_world(point, nodes):
    """GPUs the point's world served with: output tokens/s / output tokens/s per GPU (the node's own division:
    nodes × GPUs per engine; one per node on the CPU backend), else one per node."""
    total, per_gpu = point.get("output_tokens_per_s"), point.get("output_tokens_per_s_per_gpu")
    if total and per_gpu:
        return max(1, round(total / per_gpu))
    return nodes


# ---------------------------------------------------------------------------------------------------------------
# goodput


def shipped_slos():
    """{scenario: {ttft_ms, tpot_ms}} of the shipped rubric's goodput check."""
    return dict((shipped_checks().get(GOODPUT_CHECK) or {}).get("slo") or {})


def graded_slos(run):
    """The goodput SLOs the run's rows were graded with (reports.grading.grade: run.graded_with), so that the report
    section counts as the check did; the shipped ones for a run not graded here."""
    check = next(iter(graded_checks(run, lambda c: c.get("id") == GOODPUT_CHECK)), None)
    return dict(check["slo"]) if check and check.get("slo") else shipped_slos()


def is_good(ok, ttft_ms, tpot_ms, slo):
    """A request is good when it succeeded, its TTFT is within slo["ttft_ms"] and its TPOT (None for a one-token
    answer: judged on its TTFT alone) within slo["tpot_ms"]."""
    if not ok or ttft_ms is None or ttft_ms > slo["ttft_ms"]:
        return False
    return tpot_ms is None or tpot_ms <= slo["tpot_ms"]


def goodput(requests, duration_s, slo):
    """{good, total, fraction, per_s} of one point: good requests (is_good), all requests, good / all, and good
    requests per second of the point's duration (None without a duration)."""
    n = len(requests.get("ok") or [])
    good = sum(1 for ok, ttft, tpot in zip(requests["ok"], requests["ttft_ms"], requests["tpot_ms"])
               if is_good(ok, ttft, tpot, slo))
    return {"good": good, "total": n, "fraction": good / n if n else None,
            "per_s": good / duration_s if duration_s else None}


def point_goodput(run, key, point, slos):
    """goodput() of a point from its host's facts.requests and its duration_s, or None (no SLO for the scenario,
    no per-request lists)."""
    host, nodes, scenario, concurrency = key
    slo, reqs = slos.get(scenario), requests_of(run, host, nodes, scenario, concurrency)
    if not slo or not reqs:
        return None
    return goodput(reqs, point.get("duration_s"), slo)


def slo_text(slo):
    return "TTFT <= %g ms, TPOT <= %g ms" % (slo["ttft_ms"], slo["tpot_ms"])


# ---------------------------------------------------------------------------------------------------------------
# regimes


def curve_regimes(curve):
    """{concurrency: (regime, why)} of one curve (one host, node count and scenario): [(concurrency, output tokens/s,
    TPOT p50 ms)] in any order. From each point to the next higher concurrency:
    - throughput grows at least as (concurrency ratio) ** DECODE_SCALING_MIN (0.5) while TPOT p50 grows by at most
      TPOT_FLAT_MAX (1.25 ×): more users ride the same weight reads, decode is batch-limited: memory-bound;
    - otherwise throughput is flat (or falls) while latency grows: the GPU is saturated: compute-bound.
    A step is attributed to its higher point; the lowest point takes the regime of the step out of it (a point
    from which more users still add throughput was batch-limited too). A curve of one point has no regime here."""
    pts = sorted((c, t, tpot) for c, t, tpot in curve if c and t and tpot)
    out = {}
    for (c0, t0, l0), (c1, t1, l1) in zip(pts, pts[1:]):
        scaling = math.log(t1 / t0) / math.log(c1 / c0) if c1 > c0 else 0.0
        growth = l1 / l0
        # each ratio as shown on its side of the line it was judged against (reports/shown.py)
        gain = shown(t1 / t0, ((c1 / c0) ** DECODE_SCALING_MIN,) if c1 > c0 else (), decimals=2)
        tpot = shown(growth, (TPOT_FLAT_MAX,), decimals=2)
        if scaling >= DECODE_SCALING_MIN and growth <= TPOT_FLAT_MAX:
            regime = "memory-bound"
            why = "c%d→c%d: throughput × %s, TPOT × %s (batch-limited decode)" % (c0, c1, gain, tpot)
        else:
            regime = "compute-bound"
            why = "c%d→c%d: throughput × %s, TPOT × %s (saturated)" % (c0, c1, gain, tpot)
        out[c1] = (regime, why)
        if c0 == pts[0][0]:
            out[c0] = (regime, why)
    return out


def comms_regime(per_gpu, baseline_per_gpu):
    """(comms-bound, why) when a multi-node point's output tokens/s per GPU is below COMMS_RATIO_BELOW (0.9) × the
    one-node point's at the same concurrency per engine, else None."""
    if not per_gpu or not baseline_per_gpu:
        return None
    ratio = per_gpu / baseline_per_gpu
    if ratio < COMMS_RATIO_BELOW:
        return ("comms-bound", "output tokens/s per GPU %s × one node's at the same concurrency per engine"
                % shown(ratio, (COMMS_RATIO_BELOW,), decimals=2))
    return None


def telemetry_regime(telemetry):
    """From the GPUs' means over a point (NVML, nvidia-smi): memory utilization (share of time device memory was read
    or written) >= TELEMETRY_MEMORY_PCT (60 %) → memory-bound; else GPU utilization (share of time a kernel ran) >=
    TELEMETRY_COMPUTE_PCT (90 %) → compute-bound; else None (the GPUs wait: neither)."""
    if not telemetry:
        return None
    mem, sm = telemetry.get("mem_util_pct"), telemetry.get("gpu_util_pct")
    if mem is not None and mem >= TELEMETRY_MEMORY_PCT:
        return "memory-bound", "memory utilization %s %%" % shown(mem, (TELEMETRY_MEMORY_PCT,), decimals=0)
    if sm is not None and sm >= TELEMETRY_COMPUTE_PCT:
        return "compute-bound", "GPU utilization %s %%, memory %s %%" % (
            shown(sm, (TELEMETRY_COMPUTE_PCT,), decimals=0), shown(mem or 0, (TELEMETRY_MEMORY_PCT,), decimals=0))
    return None


def baselines(run, pts, metric):
    """{scenario: {concurrency per engine: median over hosts of `metric` at one node}} (a one-node curve per
    scenario, for baseline_at). A point's concurrency label is per engine already: the probe runs one engine per
    node and keeps nodes x concurrency requests in flight (its facts' concurrency_is)."""
    values = {}
    for (_host, nodes, scenario, conc), p in pts.items():
        if nodes == 1 and p.get(metric) is not None:
            values.setdefault(scenario, {}).setdefault(conc, []).append(p[metric])
    return {s: {c: statistics.median(v) for c, v in curve.items()} for s, curve in values.items()}


def baseline_at(curve, per_engine):
    """(value, interpolated) of a one-node curve {concurrency per engine: value} at `per_engine`: the point itself,
    else log-log interpolation between the two one-node points around it (throughput and goodput grow as a power
    of concurrency between points); (None, False) outside the curve (never extrapolated) or for a zero value."""
    if per_engine in curve:
        return curve[per_engine], False
    below = [c for c in curve if c < per_engine]
    above = [c for c in curve if c > per_engine]
    if not below or not above:
        return None, False
    c0, c1 = max(below), min(above)
    v0, v1 = curve[c0], curve[c1]
    if v0 <= 0 or v1 <= 0:
        return None, False
    w = math.log(per_engine / c0) / math.log(c1 / c0)
    return math.exp(math.log(v0) + w * math.log(v1 / v0)), True


def regime_of_points(run):
    """{point key (host, nodes, scenario, concurrency): (regime or None, why)}. In this order: a multi-node point
    that loses per-GPU throughput against one node is comms-bound (comms_regime); else the curve decides
    (curve_regimes); where the curve cannot (one point), the telemetry (telemetry_regime); else None."""
    pts = points(run)
    base = baselines(run, pts, "output_tokens_per_s_per_gpu")
    curves = {}
    for (host, nodes, scenario, conc), p in pts.items():
        curves.setdefault((host, nodes, scenario), []).append(
            (conc, p.get("output_tokens_per_s"), p.get("tpot_p50_ms")))
    by_curve = {k: curve_regimes(v) for k, v in curves.items()}
    out = {}
    for key, p in pts.items():
        host, nodes, scenario, conc = key
        found = None
        if nodes > 1:  # against one node at the same concurrency per engine (the label)
            found = comms_regime(p.get("output_tokens_per_s_per_gpu"), baseline_at(base.get(scenario) or {}, conc)[0])
        found = found or by_curve[(host, nodes, scenario)].get(conc)
        tel = telemetry_regime(telemetry_of(run, host, nodes, scenario, conc))
        if found and tel and tel[0] != found[0] and found[0] != "comms-bound":
            found = (found[0], "%s; telemetry says %s (%s)" % (found[1], tel[0], tel[1]))
        elif not found and tel:
            found = (tel[0], "telemetry: " + tel[1])
        out[key] = found or (None, "one concurrency and no GPU telemetry: no curve to read a regime from")
    return out


# ---------------------------------------------------------------------------------------------------------------
# per host


def _no_points(check, host, doc):
    return [no_result_row(check, host, doc, "no point of the sweep recorded on this host")]


def grade_errors(check, run, host):
    """Every request of every point the host drove succeeded: the larger of the tool's failed count and the
    per-request lists' failures, per point; any failure fails the check and names its points. A point the load
    generator itself failed at (no result) fails it too, named with the tool's reason."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"])
    pts = points(run, host)
    errored = errored_points(run, host)
    if not pts and not errored:
        return _no_points(check, host, doc)
    failed, total = {}, 0
    for key, p in sorted(pts.items()):
        _, nodes, scenario, conc = key
        reqs = requests_of(run, host, nodes, scenario, conc) or {}
        listed = sum(1 for ok in reqs.get("ok") or [] if not ok)
        n_failed = max(int(p.get("requests_failed") or 0), listed)
        total += max(int(p.get("requests_completed") or 0) + int(p.get("requests_failed") or 0),
                     len(reqs.get("ok") or []))
        if n_failed:
            failed[point_key(nodes, scenario, conc)] = n_failed
    observed = "%d of %d requests failed at %d points" % (sum(failed.values()), total, len(pts))
    if errored:
        observed += "; %d point%s not measured: the load generator failed" % (len(errored),
                                                                            "s" if len(errored) > 1 else "")
    if failed or errored:
        why = ["failed requests at " + ", ".join("%s (%d)" % kv for kv in failed.items())] if failed else []
        why += ["not measured: " + errored_text(errored)] if errored else []
        return [make_row(check, host, "fail", observed, "0 failed, every point measured", "; ".join(why))]
    return [make_row(check, host, "pass", observed, "0 failed, every point measured")]


def grade_goodput(check, run, host):
    """Per scenario: the fraction of requests within the scenario's SLOs at its lowest concurrency on `nodes` (1)
    nodes; fail below fail_below, warn below warn_below. A scenario without an SLO in the check is a skip."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"])
    nodes = int(check.get("nodes", 1))
    pts = {k: p for k, p in points(run, host).items() if k[1] == nodes}
    errored = errored_points(run, host, nodes)
    if not pts and not errored:
        if doc["status"] == "error" or not points(run, host):
            return _no_points(check, host, doc)
        return [make_row(check, host, "skip", reason="no %d-node point recorded on this host" % nodes)]
    lowest = {}
    for key in pts:
        if key[2] not in lowest or key[3] < lowest[key[2]][3]:
            lowest[key[2]] = key
    slos = check.get("slo") or {}
    warn_below, fail_below = float(check["warn_below"]), float(check["fail_below"])
    rows = []
    # a scenario with no point measured at all: an error row naming what the load generator said, never no row
    for scenario in sorted({p.get("scenario") for p in errored} - set(lowest)):
        found = [p for p in errored if p.get("scenario") == scenario]
        subject = "%s, %d node%s" % (scenario, nodes, "s" if nodes > 1 else "")
        rows.append(make_row(check, host, "error", subject=subject,
                             reason="no point of this scenario measured: " + errored_text(found)))
    for scenario, key in sorted(lowest.items()):
        subject = point_name(nodes, scenario, key[3])
        if scenario not in slos:
            rows.append(make_row(check, host, "skip", subject=subject,
                                 reason="no SLO for scenario %s in the rubric" % scenario))
            continue
        g = point_goodput(run, key, pts[key], slos)
        if g is None or not g["total"]:
            rows.append(make_row(check, host, "skip", subject=subject,
                                 reason="no per-request results recorded for this point"))
            continue
        observed = "%s %% (%d of %d requests within %s)" % (
            shown(g["fraction"], (fail_below, warn_below), scale=100), g["good"], g["total"], slo_text(slos[scenario]))
        if g["per_s"] is not None:
            observed += "; goodput %.3g requests/s" % g["per_s"]
        status, why = status_below(g["fraction"], warn_below, fail_below), None
        if status == "fail" and g["total"] < 1 / (1 - warn_below) and (g["good"] + 1) / g["total"] >= fail_below:
            # too few requests to tell the lines apart (the quick profile's 8: one slow request is 87.5 %): a fail
            # that one request decides is a warning saying so
            status, why = "warn", ("one request from the fail line, with %d requests (%d needed to tell %g %% apart):"
                                   " run more prompts (the standard profile) to judge" % (
                                       g["total"], round(1 / (1 - warn_below)), 100 * warn_below))
        rows.append(make_row(check, host, status, observed,
                             ">= %g %% within the SLOs (warn below %g %%)" % (100 * fail_below, 100 * warn_below),
                             reason=why, subject=subject))
    return rows


def model_id(name):
    """(org or None, name) of a model's name, normalised: lower case, '-', '_', ' ' and '.' alike ("Llama 3.3 70B
    Instruct FP8", "Llama-3.3-70B-Instruct-FP8" and "llama_3.3_70b_instruct_fp8" are one). "org/name" is a Hugging
    Face repository id; a path (config.json's "_name_or_path" may be one) is its last part, with no org."""
    text = (name or "").strip().rstrip("/")
    org = None
    if text.startswith(("/", ".", "~")) or text.count("/") > 1:
        text = text.rsplit("/", 1)[-1]
    elif "/" in text:
        org, text = text.split("/", 1)

    def norm(part):
        return re.sub(r"[-_ .]+", "-", part.lower()).strip("-")

    return (norm(org) or None) if org is not None else None, norm(text)


def same_model(wanted, served):
    """Whether the model an expectation is for (`wanted`) is the one served: the same normalised name (model_id), and
    the same org where both name one (the org is optional)."""
    if not wanted or not served:
        return False
    (w_org, w_name), (s_org, s_name) = model_id(wanted), model_id(served)
    return bool(w_name) and w_name == s_name and (w_org is None or s_org is None or w_org == s_org)


def grade_throughput(check, run, host):
    """The highest output tokens/s per GPU among the host's one-node points of the check's scenario, against the GPU
    model's published figure (`expect`: fail below; `warn`: warn below). A skip with its reason where gpus.yml has
    no figure for the GPU model, or where the run served another model than the one the figure is for."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"])
    nodes, scenario = int(check.get("nodes", 1)), check.get("scenario")
    pts = {k: p for k, p in points(run, host).items()
           if k[1] == nodes and (scenario is None or k[2] == scenario)
           and p.get("output_tokens_per_s_per_gpu") is not None}
    if not pts:
        return _no_points(check, host, doc)
    key = max(pts, key=lambda k: pts[k]["output_tokens_per_s_per_gpu"])
    value, subject = pts[key]["output_tokens_per_s_per_gpu"], point_name(*key[1:])
    _, spec, name = gpu_model(run, host, doc)
    # the value and its lines each shown on their side of the other (reports/shown.py; expectations.resolve)
    lines = [expectations.resolve(e, spec)[0] for e in (check["expect"], check.get("warn")) if e]
    observed = "%s output tokens/s per GPU" % shown(value, lines, decimals=0)
    field = check["expect"]["of"]
    threshold, text, _ = expectations.resolve(check["expect"], spec, value)
    if threshold is None:
        why = ("it is not in gpus.yml" if spec is None else expectations.missing(spec, field))
        return [make_row(check, host, "skip", observed, subject=subject,
                         reason="no expectation for %s: %s" % (name, why))]
    facts = doc.get("facts") or {}
    served = facts.get("model_name")
    if check.get("model_name") and not any(
            same_model(check["model_name"], facts.get(k)) for k in ("model_name", "model_config_name")):
        return [make_row(check, host, "skip", observed, subject=subject, reason=(
            "the expectation is for %s; this run served %s" % (check["model_name"], served or "another model")))]
    status, expected = "pass", text
    if not expectations.meets(value, check["expect"], threshold):
        status = "fail"
    elif check.get("warn"):
        w_threshold, w_text, _ = expectations.resolve(check["warn"], spec, value)
        if not expectations.meets(value, check["warn"], w_threshold):
            status, expected = "warn", "%s (warn below %s)" % (text, w_text)
    return [make_row(check, host, status, observed, expected, subject=subject)]


# ---------------------------------------------------------------------------------------------------------------
# cluster


def scaling_pairs(run, slos):
    """[(scenario, ratio, larger point key, one-node value, larger value, interpolated, why)]: per scenario, at the
    largest node count that ran it, the point of the highest concurrency per engine that the one-node curve covers
    with a one-node goodput above 0, its goodput per GPU (good requests/s within `slos` / GPUs of the world) against
    the one-node figure at the same concurrency per engine (the median over hosts; baseline_at interpolates between
    one-node points). A sweep runs to saturation, so its top points often have no good request on one node: they are
    passed over, and `why` names them (None when none was). Where no matched concurrency has a one-node goodput above
    0 the scenario is unjudged: ratio None, the point of the highest matched concurrency, and `why` says so."""
    pts = points(run)
    values = {}
    for key, p in pts.items():
        g = point_goodput(run, key, p, slos)
        if g and g["per_s"] is not None:
            values[key] = g["per_s"] / gpus_in_world(p, key[1])
    curves = {}
    for key, v in values.items():
        _host, nodes, scenario, conc = key
        if nodes == 1:  # the concurrency label is per engine (baselines)
            curves.setdefault(scenario, {}).setdefault(conc, []).append(v)
    curves = {s: {c: statistics.median(v) for c, v in curve.items()} for s, curve in curves.items()}
    largest = {}
    for key in values:
        if key[1] > 1:
            largest[key[2]] = max(largest.get(key[2], 0), key[1])
    out = []
    for scenario, nodes in sorted(largest.items()):
        curve = curves.get(scenario) or {}
        matched = []
        for key, v in values.items():
            _host, n, s, per_engine = key
            if (n, s) != (nodes, scenario):
                continue
            if per_engine in curve:
                matched.append((per_engine, key, v, curve[per_engine], False))
            elif curve and min(curve) < per_engine < max(curve):
                one, _ = baseline_at(curve, per_engine)
                matched.append((per_engine, key, v, one, True))
        if not matched:
            continue
        matched.sort(key=lambda m: -m[0])  # highest concurrency per engine first (stable: ties keep their order)
        passed = []
        for per_engine, key, v, one, interpolated in matched:
            if one is not None and one > 0:
                why = "; ".join("c%d not compared: %s" % p for p in passed) or None
                out.append((scenario, v / one, key, one, v, interpolated, why))
                break
            if per_engine not in (c for c, _ in passed):
                passed.append((per_engine, _no_baseline(curve, per_engine)))
        else:
            per_engine, key, v, one, interpolated = matched[0]
            why = "no concurrency per engine the %d-node world ran has a good request on one node (%s)" % (
                nodes, "; ".join("c%d: %s" % p for p in passed))
            out.append((scenario, None, key, one, v, interpolated, why))
    return out


def _no_baseline(curve, per_engine):
    """Why a one-node curve gives no goodput above 0 at `per_engine` (a concurrency it has, or one between two of
    its points): no good request at the point itself, else the neighbour(s) baseline_at will not interpolate
    through."""
    if per_engine in curve:
        return "no good request on one node"
    c0, c1 = max(c for c in curve if c < per_engine), min(c for c in curve if c > per_engine)
    zero = [c for c in (c0, c1) if curve[c] <= 0]
    return "no one-node figure to interpolate: the one-node point%s at %s ha%s no good request" % (
        "s" if len(zero) > 1 else "", " and ".join("c%d" % c for c in zero), "ve" if len(zero) > 1 else "s")


def grade_scaling(check, run, hosts):
    """Goodput per GPU at the largest node count against one node, per scenario (scaling_pairs): fail below
    fail_below, warn below warn_below, the worst scenario setting the status; on the CPU backend at most a
    warning (test hosts share CPUs). Each scenario is judged at the highest concurrency per engine both node counts
    ran where one node has a good request (the row names it, and the higher ones passed over); a scenario with no
    such concurrency has nothing to compare with."""
    slos = check.get("slo") or {}
    judged, unjudged = [], []
    for scenario, ratio, key, one, many, interpolated, why in scaling_pairs(run, slos):
        if ratio is None:
            unjudged.append("%s: %s" % (scenario, why))
            continue
        judged.append((status_below(ratio, float(check["warn_below"]), float(check["fail_below"])), ratio, key,
                       one, many, interpolated, why))
    lines = (float(check["fail_below"]), float(check["warn_below"]))
    expected = "goodput per GPU at the most nodes >= %g × one node's (warn below %g)" % (
        float(check["fail_below"]), float(check["warn_below"]))
    status, observed = None, ""
    if judged:
        judged.sort(key=lambda j: (-SEVERITY_OF_STATUS[j[0]], j[1]))
        status = judged[0][0]
        observed = "; ".join("%s %s (%s vs 1 node%s: %.3g vs %.3g good requests/s per GPU%s)" % (
            key[2], shown(ratio, lines, decimals=2), point_name(*key[1:]), " interpolated" if interp else "", many, one,
            "; " + why if why else "") for _, ratio, key, one, many, interp, why in judged)
    docs = [find_artifact(run, h, check["probe"]) for h in hosts]
    backends = {d["device"]["backend"] for d in docs if d and d["status"] != "skipped"}
    if backends and not (backends & {"cuda", "rocm"}) and status == "fail":
        status, expected = "warn", expected + "; cpu backend: warn only (test hosts share CPUs)"
    rows = []
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
        elif status is None:
            ran = sorted({k[1] for k in points(run)})
            why = "; ".join(unjudged) if unjudged else (
                "no multi-node point with a one-node point at the same concurrency per engine (nodes: %s)"
                % (", ".join(str(n) for n in ran) or "none"))
            rows.append(make_row(check, host, "skip", reason=why))
        else:
            rows.append(make_row(check, host, status, observed, expected,
                                 reason="; ".join(unjudged) if unjudged else None))
    return rows


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {"infer_errors": grade_errors, "infer_goodput": grade_goodput, "infer_throughput": grade_throughput}
CLUSTER = {"infer_scaling": grade_scaling}
