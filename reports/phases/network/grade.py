"""Grading of the network phase (probes collectives, nccl_tests, perftest, tcp_pairs): pure functions of a run.

Check kinds (rubric.d/network.yml), registered by reports.grading.kinds.register_phase_kinds:
  net_failures    per host: hangs, crashes, failed rendezvous and failed runs the probe recorded (facts.failures),
                  as failures with their message and log file
  net_peak_busbw  per host: the peak busbw of a collective at 1 node or at the largest multi-node world, against the
                  GPU model (gpus.yml) or the declared fabric × rails (gpus.yml fabrics)
  net_curve_shape per host: a healthy busbw curve rises with message size; drops between consecutive sizes beyond a
                  tolerance are flagged (only above a minimum size; on the CPU backend at most a warning)
  net_scaling     cluster: peak busbw at each multi-node world size against the smallest multi-node world size
  net_pairs       cluster: per host, TCP bandwidth and RTT of its pairs against the cluster's median pair
  net_rail_bw     per host and rail: perftest bandwidth against the fabric's line rate
"""

import json
import os
import statistics

import pandas as pd
import yaml

from probes.network.plan import human_bytes
from reports import DATA_DIR
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, status_above, status_below, worst_status
from reports.grading.select import find_artifact, host_model_spec, labels_match, load_models

LABELS = ("collective", "size_bytes", "placement", "nodes", "ranks")


def load_fabrics(path=None):
    with open(path or os.path.join(DATA_DIR, "gpus.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh).get("fabrics") or {}


# ---------------------------------------------------------------------------------------------------------------
# tables


def frame(run, probe, metric, variant=None):
    """Results of one probe/variant/metric with the collective labels as columns (cached per run)."""
    cache = run.__dict__.setdefault("_net_frames", {})
    key = (id(run.results), len(run.results), probe, variant, metric)
    if key not in cache:
        res = run.results
        sel = res[(res.probe == probe) & (res.metric == metric)]
        sel = sel[sel.variant.isna()] if variant is None else sel[sel.variant == variant]
        rows = []
        for host, value, backend, labels in zip(sel.host, sel.value, sel.backend, sel.labels):
            lab = json.loads(labels)
            rows.append(dict({k: lab.get(k) for k in LABELS}, host=host, value=float(value), backend=backend,
                             labels=lab))
        cache[key] = pd.DataFrame(rows, columns=["host", "value", "backend", "labels", *LABELS])
    return cache[key]


def curves(df):
    """{(nodes, ranks, collective, placement): [(size, value), ...] by size} from a frame's rows. Several hosts
    measure the same multi-node curve: the lowest value per point is kept (the slowest host sets the pace)."""
    points = {}
    for nodes, ranks, coll, place, size, value in zip(df.nodes, df.ranks, df.collective, df.placement, df.size_bytes,
                                                      df.value):
        key = (int(nodes), int(ranks), coll, place)
        slot = points.setdefault(key, {})
        slot[int(size)] = min(value, slot.get(int(size), value))
    return {k: sorted(v.items()) for k, v in points.items()}


def placement_scope(step):
    """Where one world size ran, from the probe's placement record ({nodes, hosts, racks, nvlink_domains}): inside
    one NVLink domain or rack, or across them. The inventory names racks and domains (assess_rack,
    assess_nvlink_domain); without them the scope is not known, and says so."""
    if int(step.get("nodes") or 0) <= 1:
        return "one node"
    parts = []
    for key, what in (("nvlink_domains", "NVLink domain"), ("racks", "rack")):
        values = step.get(key)
        if not values:
            continue
        named = sorted({v for v in values if v})
        if len(named) < len(set(values)) or not named:
            parts.append("%s not known for every host" % what)
        elif len(named) == 1:
            parts.append("within %s %s" % (what, named[0]))
        else:
            parts.append("across %ss %s" % (what, ", ".join(named)))
    return "; ".join(parts) or "not declared (assess_rack, assess_nvlink_domain)"


def scaling(points_by_world):
    """[(nodes, ranks, size, busbw, efficiency %)] for one collective and placement: busbw at the largest size
    every world measured, and each world against the next smaller one (busbw is per rank: ideal scaling keeps it
    level, 100 %)."""
    worlds = sorted(points_by_world)
    common = set.intersection(*[{s for s, _ in points_by_world[w]} for w in worlds]) if worlds else set()
    if not common:
        return []
    size = max(common)
    out, prev = [], None
    for nodes, ranks in worlds:
        value = dict(points_by_world[(nodes, ranks)])[size]
        out.append((nodes, ranks, size, value, 100.0 * value / prev if prev else None))
        prev = value
    return out


def find_drops(points, min_size, drop_pct):
    """Drops between consecutive sizes (both at least min_size) of more than drop_pct percent:
    [(size before, size after, percent)]."""
    drops = []
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 < min_size or v0 <= 0:
            continue
        pct = 100.0 * (v0 - v1) / v0
        if pct > drop_pct:
            drops.append((s0, s1, pct))
    return drops


def _curve_name(key):
    nodes, ranks, coll, place = key
    return "%s %s at %d node%s (%d ranks)" % (coll, place.replace("_", "-"), nodes, "s" if nodes > 1 else "", ranks)


# ---------------------------------------------------------------------------------------------------------------
# per host


def grade_failures(check, run, host):
    """Hangs, crashes and failed runs the probe recorded on this host: each one is a failure with its log."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    failures = (doc.get("facts") or {}).get("failures") or []
    if isinstance(failures, str):
        failures = [{"kind": "error", "message": failures}]
    if failures:
        kinds = {}
        for f in failures:
            kinds[f.get("kind", "error")] = kinds.get(f.get("kind", "error"), 0) + 1
        observed = ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items()))
        reason = "; ".join("%s%s" % (f.get("message", "?"), " (log: artifacts/%s/%s)" % (host, f["log"])
                                     if f.get("log") else "") for f in failures)
        return [make_row(check, host, "fail", observed, "no hang, crash or error", reason)]
    if doc["status"] == "error":
        return [make_row(check, host, "error", "probe error", "no hang, crash or error", doc.get("reason"))]
    run_sizes = (doc.get("facts") or {}).get("world_sizes_run")
    observed = "none" + (" (world sizes %s)" % run_sizes if run_sizes else "")
    return [make_row(check, host, "pass", observed, "no hang, crash or error")]


def _select_nodes(df, nodes):
    if df.empty:
        return df
    if nodes in (1, "1", "single"):
        return df[df.nodes == 1]
    multi = df[df.nodes > 1]
    if multi.empty:
        return multi
    return multi[multi.nodes == multi.nodes.max()]


def _expected_busbw(check, run, host, doc, ranks, nodes):
    """(threshold, text) or (None, reason) for a peak busbw check."""
    fraction = float(check["expect"].get("fraction", 1.0))
    if nodes == 1:
        field = check["expect"]["of"]
        _, spec = host_model_spec(run, host, load_models(run))
        if spec is None:
            return None, "no expectation for this GPU model in gpus.yml"
        if field not in spec:
            return None, "gpus.yml has no %s for this GPU model" % field
        want = int(check.get("ranks_per_node", 8))
        if ranks != want:
            return None, "the expectation is for %d GPUs in one node; this node ran %s ranks" % (want, ranks)
        base = float(spec[field])
        return fraction * base, ">= %.4g (%g × %s %g)" % (fraction * base, fraction, field, base)
    params = doc.get("params") or {}
    fabric, rails = params.get("fabric") or "", int(params.get("rails") or 0)
    fabrics = load_fabrics()
    if fabric and fabric in fabrics and rails > 0 and fabrics[fabric].get("busbw_per_nic_gbps"):
        per_nic = float(fabrics[fabric]["busbw_per_nic_gbps"])
        return fraction * per_nic * rails, ">= %.4g (%g × %d rails × %g GB/s per %s NIC)" % (
            fraction * per_nic * rails, fraction, rails, per_nic, fabric)
    field = check.get("model_field")
    if field:
        _, spec = host_model_spec(run, host, load_models(run))
        if spec and field in spec:
            return fraction * float(spec[field]), ">= %.4g (%g × %s %g)" % (
                fraction * float(spec[field]), fraction, field, float(spec[field]))
    if fabric and fabric not in fabrics:
        return None, "fabric %r is not in gpus.yml fabrics (%s)" % (fabric, ", ".join(sorted(fabrics)))
    return None, "no fabric declared: set network_fabric and network_rails in the inventory"


def grade_peak_busbw(check, run, host):
    """Peak busbw of one collective on this host at 1 node or at the largest multi-node world size."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    df = frame(run, check["probe"], "busbw_gbps", check.get("variant"))
    df = df[(df.host == host) & (df.collective == check.get("collective", "all_reduce"))]
    if check.get("placement"):
        df = df[df.placement == check["placement"]]
    df = _select_nodes(df, check.get("nodes", 1))
    if df.empty:
        status = "error" if doc["status"] == "error" else "skip"
        return [make_row(check, host, status, reason=doc.get("reason") or "no %s busbw at %s nodes in this run" % (
            check.get("collective", "all_reduce"), check.get("nodes", 1)))]
    best = df.loc[df.value.idxmax()]
    nodes, ranks = int(best.nodes), int(best.ranks)
    observed = "%.4g GB/s (%s, %d node%s, %d ranks)" % (best.value, human_bytes(best.size_bytes), nodes,
                                                         "s" if nodes > 1 else "", ranks)
    threshold, text = _expected_busbw(check, run, host, doc, ranks, nodes)
    if threshold is None:
        return [make_row(check, host, "skip", observed, reason=text)]
    status = "pass" if best.value >= threshold else "fail"
    if status == "pass" and check.get("warn"):
        warn_at = threshold / float(check["expect"].get("fraction", 1.0)) * float(check["warn"]["fraction"])
        if best.value < warn_at:
            status, text = "warn", "%s (warn below %.4g)" % (text, warn_at)
    return [make_row(check, host, status, observed, text)]


def _shape_settings(check, backend):
    cpu = backend not in ("cuda", "rocm")
    spec = dict(check.get("gpu") or {}) if not cpu else dict(check.get("cpu") or {})
    return (int(spec.get("min_size_bytes", 1 << 20)), spec.get("fail_drop_pct"), float(spec.get("warn_drop_pct", 20)),
            cpu)


def grade_curve_shape(check, run, host):
    """Drops of busbw between consecutive message sizes in the curves this host measured."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    df = frame(run, check["probe"], check.get("metric", "busbw_gbps"), check.get("variant"))
    df = df[df.host == host]
    if df.empty:
        status = "error" if doc["status"] == "error" else "skip"
        return [make_row(check, host, status, reason=doc.get("reason") or "no busbw curve measured on this host")]
    min_size, fail_pct, warn_pct, cpu = _shape_settings(check, doc["device"]["backend"])
    found = []
    for key, points in sorted(curves(df).items()):
        for s0, s1, pct in find_drops(points, min_size, warn_pct):
            status = "fail" if fail_pct is not None and pct > float(fail_pct) and not cpu else "warn"
            found.append((pct, "%s: %s -> %s -%.0f%%" % (_curve_name(key), human_bytes(s0), human_bytes(s1), pct),
                          status))
    worst = worst_status(status for _, _, status in found)
    expected = "busbw does not drop by more than %g%% from one size to the next (sizes >= %s)%s" % (
        float(fail_pct) if fail_pct is not None and not cpu else warn_pct, human_bytes(min_size),
        "; cpu backend: warn only" if cpu else "")
    if not found:
        return [make_row(check, host, "pass", "no drop in %d curves" % len(curves(df)), expected)]
    found.sort(reverse=True)
    observed = "%d drop%s; largest: %s" % (len(found), "s" if len(found) > 1 else "", found[0][1])
    reason = "; ".join(text for _, text, _ in found[:8]) + (" …" if len(found) > 8 else "")
    return [make_row(check, host, worst, observed, expected, reason)]


def grade_rail_bw(check, run, host):
    """Per RDMA rail: perftest bandwidth against the fabric's expectation (fraction × line rate, or its pass line)."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    res = run.results
    sel = res[(res.host == host) & (res.probe == check["probe"]) & (res.metric == check.get("metric", "bw_avg_gbits"))]
    rows = []
    fabric = (doc.get("params") or {}).get("fabric") or ""
    spec = load_fabrics().get(fabric)
    for value, labels_json in zip(sel.value, sel.labels):
        labels = json.loads(labels_json)
        if not labels_match(labels, check.get("labels")):
            continue
        subject = "hca=%s %s %s" % (labels.get("hca"), labels.get("test"), labels.get("mem"))
        observed = "%.4g Gbit/s" % value
        if not spec:
            why = ("fabric %r is not in gpus.yml fabrics" % fabric) if fabric else \
                "no fabric declared: set network_fabric in the inventory"
            rows.append(make_row(check, host, "skip", observed, reason=why, subject=subject))
            continue
        if spec.get("perftest_gbits_min") and check.get("use_pass_line", True):
            threshold, text = float(spec["perftest_gbits_min"]), ">= %g Gbit/s (%s pass line)" % (
                spec["perftest_gbits_min"], fabric)
        else:
            frac = float(check.get("fraction_of_line_rate", 0.9))
            threshold, text = frac * float(spec["nic_gbits"]), ">= %.4g Gbit/s (%g × %s line rate %g)" % (
                frac * float(spec["nic_gbits"]), frac, fabric, spec["nic_gbits"])
        rows.append(make_row(check, host, "pass" if value >= threshold else "fail", observed, text, subject=subject))
    if not rows:
        status = "error" if doc["status"] == "error" else "skip"
        rows.append(make_row(check, host, status, reason=doc.get("reason") or "no perftest result on this host"))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# cluster


def grade_scaling(check, run, hosts):
    """busbw as world size grows: the peak at every multi-node world size against the smallest multi-node one.
    busbw is normalised for the rank count, so a well-scaling fabric keeps it flat."""
    df = frame(run, check["probe"], "busbw_gbps", check.get("variant"))
    docs = [find_artifact(run, h, check["probe"], check.get("variant")) for h in hosts]
    backends = {d["device"]["backend"] for d in docs if d and d["status"] != "skipped"}
    multi = df[df.nodes > 1]
    if check.get("placement"):
        multi = multi[multi.placement == check["placement"]]
    ratios = []
    if not multi.empty:
        for (coll, place), part in multi.groupby(["collective", "placement"]):
            sizes = set.intersection(*[set(p.size_bytes) for _, p in part.groupby("nodes")])
            if not sizes:
                continue
            size = max(sizes)
            at = part[part.size_bytes == size].groupby("nodes").value.min()  # slowest host sets the pace
            if len(at) < 2:
                continue
            base_nodes = int(at.index.min())
            for nodes, value in at.items():
                if int(nodes) != base_nodes and at[base_nodes] > 0:
                    ratios.append((value / at[base_nodes], coll, place, int(nodes), base_nodes, size))
    rows = []
    cpu = bool(backends) and not (backends & {"cuda", "rocm"})
    fail_below, warn_below = float(check.get("fail_below", 0.7)), float(check.get("warn_below", 0.85))
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
            continue
        if not ratios:
            plan = sorted({int(n) for n in multi.nodes}) if not multi.empty else []
            rows.append(make_row(check, host, "skip", reason="fewer than two multi-node world sizes measured (%s): "
                                 "nothing to scale against" % (", ".join(map(str, plan)) or "none")))
            continue
        worst = min(ratios)
        ratio, coll, place, nodes, base, size = worst
        status = status_below(ratio, warn_below, fail_below)
        expected = "peak busbw at every world size >= %g × the %d-node value (warn below %g)" % (
            fail_below, base, warn_below)
        if cpu and status == "fail":
            status = "warn"
            expected += "; cpu backend: warn only (test hosts share CPUs)"
        observed = "worst %.2f: %s %s at %d nodes vs %d (%s)" % (ratio, coll, place.replace("_", "-"), nodes, base,
                                                                 human_bytes(size))
        rows.append(make_row(check, host, status, observed, expected))
    return rows


def grade_pairs(check, run, hosts):
    """Per host: the median TCP bandwidth of its pairs (sent and received) and their RTT against the cluster's
    median pair. A slow NIC, cable or switch port shows on every pair of its host."""
    res = run.results
    sel = res[res.probe == "tcp_pairs"]
    pairs = {}
    for metric, value, labels_json in zip(sel.metric, sel.value, sel.labels):
        if metric in ("bw_gbits", "rtt_us"):
            lab = json.loads(labels_json)
            pairs.setdefault(metric, {})[(lab.get("src"), lab.get("dst"))] = value
    bw, rtt = pairs.get("bw_gbits", {}), pairs.get("rtt_us", {})
    bw_fail, bw_warn = float(check.get("bw_fail_below_median_pct", 50)), float(check.get("bw_warn_below_median_pct",
                                                                                           25))
    rtt_warn = float(check.get("rtt_warn_above_median_pct", 100))
    rows = []
    bw_median = statistics.median(bw.values()) if bw else None
    rtt_median = statistics.median(rtt.values()) if rtt else None
    for host in hosts:
        pre = ungradable(check, run, host, probe="tcp_pairs", variant=None)
        if pre:
            rows.append(pre)
            continue
        mine = [v for (s, d), v in bw.items() if host in (s, d)]
        if len(bw) < 3 or not mine:
            rows.append(make_row(check, host, "skip", reason="fewer than 3 measured pairs to compare with"))
            continue
        value = statistics.median(mine)
        below = 100.0 * (bw_median - value) / bw_median if bw_median else 0.0
        status = status_above(below, bw_warn, bw_fail)
        text = "bw %.3g Gbit/s (%.0f%% below the median pair %.3g)" % (value, max(below, 0), bw_median)
        my_rtt = [v for (s, d), v in rtt.items() if host in (s, d)]
        if my_rtt and rtt_median:
            above = 100.0 * (statistics.median(my_rtt) - rtt_median) / rtt_median
            text += "; rtt %.3g us (%+.0f%%)" % (statistics.median(my_rtt), above)
            if above > rtt_warn and status == "pass":
                status = "warn"
        rows.append(make_row(check, host, status, text, "bw within %g%% of the median pair (warn %g%%), rtt within "
                             "+%g%%" % (bw_fail, bw_warn, rtt_warn)))
    return rows


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {
    "net_failures": grade_failures,
    "net_peak_busbw": grade_peak_busbw,
    "net_curve_shape": grade_curve_shape,
    "net_rail_bw": grade_rail_bw,
}
CLUSTER = {"net_scaling": grade_scaling, "net_pairs": grade_pairs}
