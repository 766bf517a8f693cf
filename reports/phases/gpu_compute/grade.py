"""The GPU compute phase's own kind: HPL-MxP solved across every node of the run.

probes/gpu_compute/hpl_mxp.py solves on each node alone (judged per host by the generic metric check
compute.hpl_mxp), then once per format across all nodes, started from the first host: those results are in the first
host's artifact only, labelled with the node count, and the fact `across_nodes` there says whether the solve ran
and, if not, why. The check's rows go to that host alone (one solve, one verdict), not a skip on every other host.

Kind `gpu_pairs` (compute.nvbandwidth_d2d, compute.copy_p2p): a copy between two GPUs is as fast as the slower of the
two, so one GPU with a degraded NVLink slows every cell of its row and its column of the matrix. Each GPU is judged on
the median of its pairs (its row and its column): only the GPU common to the slow cells fails; one node-level row for
the slowest pair names both GPUs and fails the node whatever the cause (grade_pairs)."""

import statistics

from reports.grading import expectations
from reports.grading.kinds import AGGREGATES, missing_gpus
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, no_result_row
from reports.grading.select import find_artifact, gpu_model, labels_match
from reports.shown import shown


def _leader(run, hosts):
    """The host that started (or declined) the solve across nodes: the one whose artifact says so."""
    for host in hosts:
        doc = find_artifact(run, host, "hpl_mxp")
        if doc is not None and (doc.get("facts") or {}).get("across_nodes"):
            return host
    return next(h for h in hosts if find_artifact(run, h, "hpl_mxp") is not None)


def grade_across(check, run, hosts):
    """Kind `hpl_mxp_across`: per format, the residual check of the solve across all nodes (pass: PASSED)."""
    docs = [find_artifact(run, h, check["probe"]) for h in hosts]
    if not any(d is not None and d["status"] != "skipped" for d in docs):
        # no host solved (no GPU, no xhpl_mxp, or the probe did not run): each host's own reason, as every check
        # whose probe did not run shows it
        return [ungradable(check, run, h) for h in hosts]
    host = _leader(run, hosts)
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"])
    facts = doc.get("facts") or {}
    by_format = {}
    for rec in doc.get("results") or []:
        labels = rec.get("labels") or {}
        if int(labels.get("nodes") or 1) > 1:
            by_format.setdefault(labels.get("format"), {}).setdefault(rec["metric"], []).append(rec["value"])
    if not by_format:
        # a fault of the step across nodes (the hosts did not meet, one never finished alone) is an error; a
        # step that was not run for a reason (one host, a launcher that cannot start MPI) is a skip
        said = facts.get("across_nodes") or "no result across nodes"
        if facts.get("across_error"):
            return [make_row(check, host, "error", reason=said)]
        return [make_row(check, host, "skip", reason=said)]
    rows = []
    for fmt, metrics in sorted(by_format.items(), key=lambda kv: str(kv[0])):
        passed = metrics.get("passed") or []
        ok = bool(passed) and min(passed) >= 1
        per_gpu = metrics.get("gflops_per_gpu")
        observed = "%s, %s" % ("PASSED" if ok else "FAILED" if passed else "no residual check", facts.get(
            "across_nodes", "").replace("run: ", ""))
        if per_gpu:
            observed += ", %.1f GFLOP/s per GPU" % max(per_gpu)
        rows.append(make_row(check, host, "pass" if ok else "fail", observed, "PASSED on every node together",
                             None if ok else doc.get("reason"), subject=fmt))
    return rows


def _variant(value):
    return None if value is None or value != value or value == "" else value


def pair_cells(check, run, host):
    """{(gpu, peer): value} of the check's results on one host that are about two different GPUs (labels gpu and
    peer: nvbandwidth's device-to-device matrices, copy_bw's p2p), several results of one pair by the check's agg."""
    values = {}
    for rec in run.records(check["probe"]):
        if (rec["host"] != host or rec["metric"] != check["metric"]
                or _variant(rec["variant"]) != _variant(check.get("variant"))
                or not labels_match(rec["labels"], check.get("labels"))):
            continue
        gpu, peer = rec["labels"].get("gpu"), rec["labels"].get("peer")
        if gpu is None or peer is None or str(gpu) == str(peer):
            continue
        values.setdefault((str(gpu), str(peer)), []).append(rec["value"])
    agg = AGGREGATES[check.get("agg", "min")]
    return {pair: float(agg(v)) for pair, v in values.items()}


def _gpu_order(gpu):
    return (0, int(gpu), gpu) if str(gpu).isdigit() else (1, 0, str(gpu))


def grade_pairs(check, run, host, models=None):
    """Kind `gpu_pairs`: per GPU, the median of its pairs (row and column of the matrix: the copies it sends and
    receives) against the expectation, so that one GPU's bad link fails that GPU and not every GPU it was paired
    with; then one row for the node's slowest pair, naming both GPUs, against the same line."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    _, spec, _ = gpu_model(run, host, doc, models)
    cells = pair_cells(check, run, host)
    if not cells:
        return [no_result_row(check, host, doc, "no %s result of a GPU pair" % check["metric"])]
    threshold, text, why = expectations.resolve(check["expect"], spec)
    unit = check.get("unit") or "GB/s"
    error_note = doc.get("reason") if doc["status"] == "error" else None
    gpus = sorted({g for pair in cells for g in pair}, key=_gpu_order)
    lines = (threshold,) if threshold is not None else ()
    rows, failed = [], []
    for gpu in gpus:
        mine = {pair: v for pair, v in cells.items() if gpu in pair}
        median = statistics.median(mine.values())
        slowest = min(mine, key=mine.get)
        other = slowest[1] if slowest[0] == gpu else slowest[0]
        observed = "%s %s median of its %d pairs (slowest %s, with GPU %s)" % (
            shown(median, lines, significant=4), unit, len(mine), shown(mine[slowest], lines, significant=4), other)
        if threshold is None:
            rows.append(make_row(check, host, "skip", observed, reason=why, subject="gpu=%s" % gpu))
            continue
        ok = expectations.meets(median, check["expect"], threshold)
        if not ok:
            failed.append(gpu)
        rows.append(make_row(check, host, "pass" if ok else "fail", observed, "median %s" % text, error_note,
                             subject="gpu=%s" % gpu))
    # a GPU a worker was started for that left no result in a faulted artifact: an error row, as grade_metric's
    missing = missing_gpus(check, doc, [("gpu=%s" % g, None) for g in gpus])
    if missing:
        rows = sorted(rows + missing, key=lambda r: _gpu_order(r["subject"].split("=")[1]))
    (gpu, peer), value = min(cells.items(), key=lambda kv: kv[1])
    observed = "%s %s: GPU %s and GPU %s (gpu=%s, peer=%s)" % (shown(value, lines, significant=4), unit, gpu, peer,
                                                              gpu, peer)
    if threshold is None:
        rows.append(make_row(check, host, "skip", observed, reason=why, subject="slowest pair"))
        return rows
    ok = expectations.meets(value, check["expect"], threshold)
    reason = None
    if not ok:
        common = [g for g in failed if g in (gpu, peer)]
        reason = ("GPU %s is the common factor: the median of its pairs is slow too" % ", ".join(common) if common
                  else "the GPUs' other pairs are not slow: the link between these two")
    rows.append(make_row(check, host, "pass" if ok else "fail", observed, text,
                         "; ".join(filter(None, [reason, error_note])), subject="slowest pair"))
    return rows


PER_HOST = {"gpu_pairs": grade_pairs}
CLUSTER = {"hpl_mxp_across": grade_across}
