"""The Kubernetes half of the orchestration phase (probe `k8s_pods`, probes/orchestration/k8s_pods.py): grading and
the report blocks. The node records times by its own clock and by the API's (label `clock`), per cycle, batch and
pod, and the facts behind them (per-cycle outcomes, pending reasons, GPU counts, stuck deletes, leftovers, the
network pattern, DRA objects); everything judged is judged here.

Check kinds (rubric.d/orchestration.yml), cluster kinds listed by reports/phases/orchestration/grade.py:
  k8s_churn          GPU pod churn: every measured cycle Ready; the container saw the GPUs it asked for (and the
                     API recorded them); the start time p90 (probe clock) within the check's thresholds
  k8s_sandbox        one row per batch: share of the batch Ready within the probe's timeout (fail_below /
                     warn_below) and its ready time p90; the Pending reasons in the row
  k8s_pvc            every measured PVC cycle wrote and fsynced its file; the cycle time p90 within thresholds
  k8s_stuck_deletes  no delete still unfinished after the probe's delete timeout, and nothing of the run left
  k8s_network_pattern  the NetworkOperator pattern(s) in use (information: pass with what was found)
  k8s_dra            the DRA / ComputeDomain objects present (information)
A skipped k8s_pods artifact makes every check a skip with the probe's reason (preconditions.ungradable).

Percentiles: linear interpolation between the sorted values (numpy's default), on the measured cycles only (the
warm-up cycle has its own metric).
"""

from reports.grading.one_host import on_runners
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, status_above, status_below, summary_line, worst_status
from reports.grading.rubric import graded_checks
from reports.grading.select import find_artifact
from reports.phases.orchestration.common import distribution
from reports.render.blocks import Bullets, Heading, Paragraph, Table, code, strong
from reports.render.markdown import fmt

PROBE = "k8s_pods"
CHECK_PREFIX = "orchestration.k8s_"
STATS = ("p50", "p90", "max")


def values(run, host, metric, clock="probe", **labels):
    """Values of one metric of the host's k8s_pods results whose labels include `labels` (and `clock`, where the
    metric has one)."""
    out = []
    for r in run.records(PROBE):
        if r["host"] != host or r["metric"] != metric:
            continue
        lab = r["labels"]
        if "clock" in lab and lab["clock"] != clock:
            continue
        if all(str(lab.get(k)) == str(v) for k, v in labels.items()):
            out.append(r["value"])
    return out


def facts_of(run, host):
    return ((run.artifact(host, PROBE) or {}).get("facts")) or {}


def _measured(cycles):
    return [c for c in cycles or [] if not c.get("warmup")]


def _pre(check, run, host):
    """(rows, None) when the check cannot be graded here (skip with the probe's reason), else (None, facts)."""
    pre = ungradable(check, run, host, error_is_final=False)
    if pre:
        return [pre], None
    doc = find_artifact(run, host, check["probe"])
    return None, (doc.get("facts") or {}) if doc else {}


def _no_facts(check, host, run, what):
    doc = find_artifact(run, host, check["probe"]) or {}
    status = "error" if doc.get("status") == "error" else "skip"
    return [make_row(check, host, status, reason=doc.get("reason") or "no %s recorded" % what)]


def _latency(check, dist, name):
    """(status, observed, expected) of a p90 against the check's warn_above_s / fail_above_s."""
    warn, fail = float(check["warn_above_s"]), float(check["fail_above_s"])
    # the p90 judged, and the p50 and max beside it, on their side of each line (reports/shown.py: 6.004 s is not
    # "6" beside "p90 <= 6 s")
    observed = "%s p50 %s s, p90 %s s, max %s s (n=%d)" % ((name,) + tuple(
        fmt(dist[k], thresholds=(warn, fail)) for k in STATS) + (dist["n"],))
    return status_above(dist["p90"], warn, fail), observed, "%s p90 <= %g s (fail above %g s)" % (name, warn, fail)


def _reasons_text(pending):
    reasons = (pending or {}).get("reasons") or {}
    return ", ".join("%s (%d pod%s)" % (r, n, "s" if n != 1 else "") for r, n in
                     sorted(reasons.items(), key=lambda kv: -kv[1])) if reasons else ""


# ---------------------------------------------------------------------------------------------------------------
# kinds


def grade_churn(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    cycles = _measured(facts.get("churn"))
    if not cycles:
        return _no_facts(check, host, run, "measured churn cycle")
    findings, statuses = [], []
    not_ready = [c for c in cycles if c.get("outcome") != "ready"]
    if not_ready:
        statuses.append("fail")
        findings.append("%d of %d pods never Ready: %s" % (len(not_ready), len(cycles), "; ".join(
            "cycle %s %s%s" % (c["cycle"], c.get("outcome"), " (%s)" % _reasons_text(c.get("pending"))
                               if c.get("pending") else "") for c in not_ready)))
    for c in cycles:
        g = c.get("gpus") or {}
        if c.get("outcome") != "ready" or not g:
            continue
        if g.get("visible") is not None and g["visible"] != g.get("requested"):
            statuses.append("fail")
            findings.append("cycle %s: the container saw %s GPU(s), asked %s%s" % (
                c["cycle"], g["visible"], g.get("requested"),
                " (%s)" % g["listing_error"] if g.get("listing_error") else ""))
        elif g.get("visible") is None:
            statuses.append("warn")
            findings.append("cycle %s: GPUs seen in the container unknown (%s)" % (
                c["cycle"], g.get("logs_error") or g.get("listing_error") or "no nvidia-smi -L output"))
        if g.get("api") != g.get("requested"):
            statuses.append("warn")
            findings.append("cycle %s: the API records %s GPU(s) for the pod, %s asked" % (c["cycle"], g.get("api"),
                                                                                           g.get("requested")))
    dist = distribution(values(run, host, "start_s", test="churn"))
    observed = ["%d of %d cycles Ready" % (len(cycles) - len(not_ready), len(cycles))]
    expected = "every cycle Ready with the GPUs asked"
    if dist["n"]:
        status, text, exp = _latency(check, dist, "start")
        statuses.append(status)
        observed.append(text)
        sched = distribution(values(run, host, "schedule_s", test="churn"))
        if sched["n"]:
            observed.append("schedule p90 %s s" % fmt(sched["p90"]))
        expected += "; " + exp
    return [make_row(check, host, worst_status(statuses), "; ".join(observed), expected,
                     reason="; ".join(findings) or None)]


def grade_sandbox(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    batches = facts.get("sandbox") or []
    if not batches:
        return _no_facts(check, host, run, "sandbox batch")
    warn_below, fail_below = float(check["warn_below"]), float(check["fail_below"])
    out = []
    for b in batches:
        subject = "batch %s" % b.get("batch")
        if "ready" not in b:
            out.append(make_row(check, host, "error", subject=subject, reason=b.get("outcome")))
            continue
        frac = b["ready"] / b["batch"] if b.get("batch") else 0.0
        statuses = [status_below(frac, warn_below, fail_below)]
        observed = ["%d of %d Ready" % (b["ready"], b["batch"])]
        expected = ">= %g %% Ready (warn below %g %%)" % (100 * fail_below, 100 * warn_below)
        dist = distribution(b.get("ready_s") or [])
        if dist["n"]:
            status, text, exp = _latency(check, dist, "ready")
            statuses.append(status)
            observed.append(text)
            expected += "; " + exp
        reason = None
        if b.get("pending"):
            reason = "Pending: %s" % (_reasons_text(b.get("pending_reasons")) or "no reason recorded")
        out.append(make_row(check, host, worst_status(statuses), "; ".join(observed), expected, reason=reason,
                            subject=subject))
    return out


def grade_pvc(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    cycles = _measured(facts.get("pvc"))
    if not cycles:
        return _no_facts(check, host, run, "measured PVC cycle")
    failed = [c for c in cycles if c.get("outcome") != "written and fsynced"]
    statuses, findings = [], []
    if failed:
        statuses.append("fail")
        findings.append("; ".join("cycle %s: %s%s" % (c["cycle"], c.get("outcome"), " (%s)" % _reasons_text(
            c.get("pending")) if c.get("pending") else "") for c in failed))
    not_torn = [c for c in cycles if c.get("teardown_s") is None and "pod" in c]
    if not_torn:
        statuses.append("fail")
        findings.append("teardown unfinished in cycle(s) %s" % ", ".join(str(c["cycle"]) for c in not_torn))
    observed = ["%d of %d cycles wrote and fsynced" % (len(cycles) - len(failed), len(cycles))]
    expected = "every cycle writes, fsyncs and tears down"
    dist = distribution(values(run, host, "pvc_cycle_s"))
    if dist["n"]:
        status, text, exp = _latency(check, dist, "cycle")
        statuses.append(status)
        observed.append(text)
        expected += "; " + exp
    return [make_row(check, host, worst_status(statuses), "; ".join(observed), expected,
                     reason="; ".join(findings) or None)]


def grade_stuck_deletes(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    if "stuck_deletes" not in facts:
        return _no_facts(check, host, run, "delete")
    stuck = facts.get("stuck_deletes") or []
    left = facts.get("left")
    findings = ["%s %s (%s test) still there after %s s: deletionTimestamp %s%s" % (
        s.get("kind"), s.get("name") or s.get("asked"), s.get("test"), fmt(s.get("waited_s")),
        s.get("deletion_timestamp") or "not set",
        ", finalizers %s" % ", ".join(s["finalizers"]) if s.get("finalizers") else "") for s in stuck]
    status = "fail" if stuck else "pass"
    if isinstance(left, list) and left:
        status = worst_status([status, "warn"])
        findings.append("left after cleanup: %s" % ", ".join("%s %s%s" % (o["kind"], o["name"], " (terminating)"
                                                                           if o.get("terminating") else "")
                                                             for o in left))
    elif not isinstance(left, list):
        status = worst_status([status, "warn"])
        findings.append("what was left is not known (%s)" % left)
    observed = "%d stuck delete(s); %s left" % (len(stuck), len(left) if isinstance(left, list) else "?")
    return [make_row(check, host, status, observed, "0 stuck, nothing left", reason="; ".join(findings) or None)]


def grade_network_pattern(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    net = facts.get("network")
    if net is None:
        return [make_row(check, host, "skip", reason="the cluster was not inspected (inspect_cluster off)")]
    errors = net.get("read_errors") or {}
    if "pods" in errors and not net.get("patterns"):
        return [make_row(check, host, "skip", reason="pods not readable cluster-wide: %s" % errors["pods"])]
    patterns = net.get("patterns") or []
    return [make_row(check, host, "pass", ", ".join(patterns) or "none recognised",
                     "the pattern in use, recognised", reason="; ".join(
                         "%s: %s" % (p, ", ".join(net["evidence"][p][:3])) for p in patterns) or None)]


def grade_dra(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    dra = facts.get("dra")
    if dra is None:
        return [make_row(check, host, "skip", reason="the cluster was not inspected (inspect_cluster off)")]
    return [make_row(check, host, "pass", dra_text(dra), "what exists, reported")]


def dra_text(dra):
    parts = []
    cds = dra.get("compute_domains")
    parts.append("ComputeDomain API not served" if cds is None else "%d ComputeDomain(s)%s" % (len(cds), (
        ": " + ", ".join("%s/%s (%s nodes, %s)" % (c["namespace"], c["name"], c.get("num_nodes"), c["status"])
                         for c in cds)) if cds else ""))
    claims = dra.get("claims")
    parts.append("ResourceClaims not served" if claims is None else "%d ResourceClaim(s)%s" % (
        dra.get("claims_total") or 0, (" (devices by driver: %s)" % ", ".join(
            "%s %d" % kv for kv in sorted(claims.items(), key=lambda kv: str(kv[0])))) if claims else ""))
    slices = dra.get("slices")
    parts.append("ResourceSlices not served" if slices is None else "ResourceSlices by driver: %s" % (
        ", ".join("%s %d" % kv for kv in sorted(slices.items(), key=lambda kv: str(kv[0]))) or "none"))
    return "; ".join(parts)


# kind -> fn(check, run, hosts) -> rows on the host that ran the probe (reports/grading/one_host.py).
CLUSTER = {"k8s_churn": on_runners(grade_churn), "k8s_sandbox": on_runners(grade_sandbox),
           "k8s_pvc": on_runners(grade_pvc), "k8s_stuck_deletes": on_runners(grade_stuck_deletes),
           "k8s_network_pattern": on_runners(grade_network_pattern), "k8s_dra": on_runners(grade_dra)}


# ---------------------------------------------------------------------------------------------------------------
# report blocks


def _docs(run):
    return [d for d in run.artifacts if d["probe"] == PROBE]


def status_table(run):
    rows, notes = [], {}
    for doc in sorted(_docs(run), key=lambda d: d["host"]):
        f = doc.get("facts") or {}
        if doc["status"] == "ok":
            cell = "ok (API %s, namespace %s)" % (f.get("server_version", "?"), f.get("namespace", "?"))
        else:
            text = doc.get("reason") or doc["status"]
            notes.setdefault(text, len(notes) + 1)
            cell = "%s [%d]" % (doc["status"], notes[text])
        rows.append([doc["host"], cell, len(f.get("created") or []), f.get("kubectl_calls")])
    out = [Table(["host", "k8s_pods", "objects created", "kubectl calls"], rows)]
    if notes:
        out.append(Bullets(sorted(notes, key=notes.get), numbered=True))
    return out


# The p90s a check judges (_latency): (test, metric) of the latency table -> the check's kind.
JUDGED_P90 = {("churn", "start_s"): "k8s_churn", ("sandbox", "ready_s"): "k8s_sandbox",
              ("pvc", "pvc_cycle_s"): "k8s_pvc"}


def p90_lines(run):
    """{kind: (warn_above_s, fail_above_s) of every check of that kind} of the kinds of JUDGED_P90, as the run was
    graded: a p90 the tables show beside the check's verdict is on the side of them its row shows it."""
    return {kind: tuple(float(c[k]) for c in graded_checks(run, lambda c, kind=kind: c.get("kind") == kind)
                        for k in ("warn_above_s", "fail_above_s") if k in c) for kind in JUDGED_P90.values()}


def latency_table(run, host):
    """p50 / p90 / max per test and step, by the probe's clock, with the API clock's p50 beside it."""
    lines = p90_lines(run)
    rows = []
    for test, metric, labels in (("churn", "schedule_s", {}), ("churn", "start_s", {}), ("churn", "ready_s", {}),
                                 ("churn", "delete_s", {}), ("sandbox", "ready_s", {}),
                                 ("sandbox", "teardown_s", {}), ("pvc", "pvc_write_s", None),
                                 ("pvc", "pvc_teardown_s", None), ("pvc", "pvc_cycle_s", None)):
        sel = {"test": test} if labels is not None else {}
        d = distribution(values(run, host, metric, **sel))
        if not d["n"]:
            continue
        api = distribution(values(run, host, metric, clock="api", **sel))
        api_p50 = fmt(api["p50"]) if api["n"] and metric in ("schedule_s", "start_s", "ready_s") else None
        # a check judges the p90 of this test's whole run (not the sandbox's: judged per batch, sandbox_table), with
        # the p50 and max beside it
        judged = lines.get(JUDGED_P90.get((test, metric)), ()) if test != "sandbox" else ()
        rows.append([test, metric[:-2].replace("pvc_", ""), d["n"]] + [fmt(d[s], thresholds=judged) for s in STATS]
                    + [api_p50])
    return Table(["test", "step", "n", "p50 s", "p90 s", "max s", "API clock p50 s"], rows) if rows else None


def sandbox_table(facts, lines=()):
    """One row per batch; lines: the sandbox check's (p90_lines), that each batch's ready p90 was judged against."""
    rows = []
    for b in facts.get("sandbox") or []:
        if "ready" not in b:
            rows.append([b.get("batch"), None, None, None, None, None, b.get("outcome")])
            continue
        d = distribution(b.get("ready_s") or [])
        rows.append([b["batch"], b["ready"], b["pending"], fmt(d["p50"], thresholds=lines),
                     fmt(d["p90"], thresholds=lines), fmt(b.get("teardown_s")),
                     _reasons_text(b.get("pending_reasons")) or None])
    return Table(["batch", "Ready", "Pending", "ready p50 s", "ready p90 s", "teardown s", "Pending reasons"],
                 rows) if rows else None


def churn_table(facts):
    rows = []
    for c in facts.get("churn") or []:
        g = c.get("gpus") or {}
        probe = c.get("probe") or {}
        rows.append(["%s%s" % (c["cycle"], " (warm-up)" if c.get("warmup") else ""), c.get("pod"), c.get("node"),
                     c.get("outcome"), fmt(probe.get("scheduled")), fmt(probe.get("ready")),
                     fmt(c.get("delete_s")) if c.get("delete_s") is not None else "stuck" if c.get("pod") else None,
                     g.get("requested"), g.get("api"), g.get("visible"), g.get("node_allocatable")])
    return Table(["cycle", "pod", "node", "outcome", "scheduled s", "Ready s", "deleted s", "GPUs asked",
                  "GPUs (API)", "GPUs seen", "node allocatable"], rows) if rows else None


def pvc_table(facts):
    rows = [["%s%s" % (c["cycle"], " (warm-up)" if c.get("warmup") else ""), c.get("claim"), c.get("claim_phase"),
             c.get("outcome"), fmt(c.get("write_s")), fmt(c.get("teardown_s")), fmt(c.get("cycle_s"))]
            for c in facts.get("pvc") or []]
    return Table(["cycle", "claim", "claim phase", "outcome", "written s", "teardown s", "cycle s"], rows) \
        if rows else None


def stuck_list(facts):
    items = []
    for s in facts.get("stuck_deletes") or []:
        items.append([strong("%s %s" % (s.get("kind"), s.get("name") or s.get("asked"))),
                      " (%s test, asked to delete %s): still there after %s s; deletionTimestamp %s, grace %s s%s%s"
                      % (s.get("test"), s.get("asked"), fmt(s.get("waited_s")), s.get("deletion_timestamp"),
                         s.get("grace_s"), ", finalizers " + ", ".join(s["finalizers"]) if s.get("finalizers")
                         else "", ", node %s" % s["node"] if s.get("node") else "")])
    left = facts.get("left")
    if isinstance(left, list) and left:
        items.append(["left after cleanup: ", code(", ".join("%s/%s" % (o["kind"], o["name"]) for o in left))])
    elif left is not None and not isinstance(left, list):
        items.append(["left after cleanup: %s" % left])
    return items


def network_blocks(facts):
    net = facts.get("network")
    if net is None:
        return []
    out = [Heading(4, "Network pattern (NetworkOperator)")]
    patterns = net.get("patterns") or []
    out.append(Paragraph("Recognised: %s." % (", ".join(patterns) if patterns else "none")))
    if patterns:
        out.append(Bullets([[strong(p), ": " + "; ".join(net["evidence"].get(p) or [])] for p in patterns]))
    if net.get("read_errors"):
        out.append(Paragraph("Not readable: %s." % "; ".join("%s (%s)" % kv for kv in net["read_errors"].items())))
    return out


def dra_blocks(facts):
    dra = facts.get("dra")
    if dra is None:
        return []
    out = [Heading(4, "DRA and ComputeDomain (multi-node NVLink)"), Paragraph(dra_text(dra) + ".")]
    cds = dra.get("compute_domains") or []
    if cds:
        out.append(Table(["namespace", "ComputeDomain", "numNodes", "status", "nodes (clique)"], [
            [c.get("namespace"), c.get("name"), c.get("num_nodes"), c.get("status"),
             ", ".join("%s (%s)" % (n.get("name"), n.get("clique")) for n in c.get("nodes") or []) or None]
            for c in cds]))
    if dra.get("device_classes"):
        out.append(Paragraph(["DeviceClasses: ", code(", ".join(dra["device_classes"]))]))
    return out


def blocks(run, rows, report_dir):
    """The Kubernetes part of the orchestration section: what ran where, then per host that ran it the latency
    distributions (p50 / p90 / max per test), the churn cycles with GPUs asked / recorded / seen, the sandbox
    batches (Ready against batch size, with the Pending reasons), the PVC cycles, stuck deletes and leftovers, the
    network pattern and DRA. report_dir is unused (no plot)."""
    docs = _docs(run)
    if not docs:
        return []
    out = [Heading(3, "Kubernetes")] + status_table(run)
    for doc in sorted(docs, key=lambda d: d["host"]):
        if doc["status"] == "skipped":
            continue
        host, facts = doc["host"], doc.get("facts") or {}
        if len(docs) > 1:
            out.append(Heading(4, "From %s" % host))
        if facts.get("run_label"):
            out.append(Paragraph(["Objects labelled ", code(facts["run_label"]), "; GPUs per churn pod: %s of %s." % (
                facts.get("gpus_per_pod"), facts.get("gpu_resource"))]))
        for title, block in (("Latency (probe clock; API clock p50 beside it)", latency_table(run, host)),
                             ("GPU pod churn", churn_table(facts)),
                             ("Sandbox pods: Ready against batch size",
                              sandbox_table(facts, p90_lines(run)["k8s_sandbox"])),
                             ("PVC lifecycle", pvc_table(facts))):
            if block is not None:
                out += [Heading(4, title), block]
        stuck = stuck_list(facts)
        out += [Heading(4, "Stuck deletes and leftovers"), Bullets(stuck) if stuck else
                Paragraph("No delete stuck; nothing of the run left.")]
        out += network_blocks(facts) + dra_blocks(facts)
        if facts.get("errors"):
            out += [Heading(4, "Errors"), Bullets(list(facts["errors"]))]
    mine = [r for r in rows if r["check_id"].startswith(CHECK_PREFIX)]
    if mine:
        out.append(Paragraph("Kubernetes checks: " + summary_line(mine)))
    return out
