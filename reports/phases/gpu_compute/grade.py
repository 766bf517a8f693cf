"""The GPU compute phase's own kind: HPL-MxP solved across every node of the run.

probes/gpu_compute/hpl_mxp.py solves on each node alone (judged per host by the generic metric check
compute.hpl_mxp), then once per format across all nodes, started from the first host: those results are in the first
host's artifact only, labelled with the node count, and the fact `across_nodes` there says whether the solve ran
and, if not, why. The check's rows go to that host alone (one solve, one verdict), not a skip on every other host."""

from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row
from reports.grading.select import find_artifact


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


PER_HOST = {}
CLUSTER = {"hpl_mxp_across": grade_across}
