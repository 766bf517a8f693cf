"""The generic check kinds, which any phase's rubric can use: reachable, tasks, artifact, one_host_artifact (a probe
run once, from one host: reports/grading/one_host.py), metric, straggler and the
rubric's consistency block; and not_implemented, the placeholders of reports/data/not_implemented.yml. Each phase's
own kinds live in reports/phases/<phase>/grade.py (PER_HOST, CLUSTER)."""

import json
import statistics
from collections import Counter

from reports.grading import expectations, one_host
from reports.grading.preconditions import ANY_VARIANT, not_run_reason, refused_artifact, ungradable
from reports.grading.rows import ARTIFACT_STATUS, make_row, no_result_row, status_above, text_of
from reports.grading.select import (
    AGGREGATES,
    artifacts_of,
    find_artifact,
    gpu_model,
    groups_of,
    host_failed_tasks,
    selection,
)
from reports.shown import shown


def grade_reachable(check, run, host):
    if host in run.unreachable:
        return [make_row(check, host, "fail", "unreachable", "reachable", run.unreachable[host])]
    return [make_row(check, host, "pass", "reachable", "reachable")]


# Every preflight task's name starts so (roles/preflight, playbooks/preflight.yml); the journal may prefix the role.
PREFLIGHT_TASK = "Preflight |"


def grade_prepared(check, run, host):
    """Preflight made the host ready (its Python found, its run lock taken, the probes staged, its inventory taken).
    A reachable host whose preflight task failed dropped out before any phase: it was not assessed, like an
    unreachable one (the gate unassessed_nodes), whatever the other hosts' results say."""
    if host in run.unreachable:
        return [make_row(check, host, "skip", reason="host unreachable (preflight.reachable)")]
    failed = [t for t in host_failed_tasks(run, host) if PREFLIGHT_TASK in (t or "")]
    if failed:
        return [make_row(check, host, "fail", "not assessed: %s failed" % failed[0].split(" : ")[-1], "prepared",
                         "the host dropped out of the run at preflight: no phase ran on it")]
    return [make_row(check, host, "pass", "prepared", "prepared")]


def grade_tasks(check, run, host):
    if host in run.unreachable:
        return [make_row(check, host, "skip", reason="host unreachable")]
    failed = host_failed_tasks(run, host)
    if failed:
        return [make_row(check, host, "fail", "%d failed: %s" % (len(failed), "; ".join(failed)), "0 failed")]
    return [make_row(check, host, "pass", "0 failed", "0 failed")]


def grade_artifact(check, run, host):
    """The probe's artifact exists and is ok. With `each_variant: <label>`, one row per variant of the probe (one
    storage tier each, subject <label>=<variant>); otherwise the check's `variant`, or none."""
    if check.get("each_variant"):
        pre = ungradable(check, run, host, variant=ANY_VARIANT)
        if pre:
            return [pre]
        docs = sorted(artifacts_of(run, host, check["probe"]), key=lambda d: d.get("variant") or "")
        return [make_row(check, host, ARTIFACT_STATUS[d["status"]], d["status"], "ok", d.get("reason"),
                         subject="%s=%s" % (check["each_variant"], d["variant"]) if d.get("variant") else "")
                for d in docs]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    if doc is not None:
        return [make_row(check, host, ARTIFACT_STATUS[doc["status"]], doc["status"], "ok", doc.get("reason"))]
    if host in run.unreachable:
        return [make_row(check, host, "skip", reason="host unreachable: probe did not run")]
    bad = refused_artifact(run, host, check["probe"])
    if bad:
        return [make_row(check, host, "error", "invalid artifact", "ok", "%s: %s" % (bad["path"], bad["error"]))]
    if not run.attempted(host, check["probe"]):
        # The phase was not selected (--tags), or the host dropped out after a failed task (preflight.tasks).
        why = not_run_reason(run, host, check["probe"])
        return [make_row(check, host, "skip", reason=why or "probe %s was not run on this host in this run"
                         % check["probe"])]
    return [make_row(check, host, "error", "no artifact", "ok", "probe %s left no artifact" % check["probe"])]


def majority_value(values):
    """The most common value; None when there is no strict majority winner among ties."""
    counts = Counter(values.values())
    if not counts:
        return None, counts
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return None, counts
    return top, counts


def consistency_rows(check, run, hosts, values, tolerance=0.0):
    """values: host -> observed value for the hosts that reported one."""
    rows = []
    reference, counts = majority_value(values)
    for host in hosts:
        if host not in values:
            reason = "host unreachable" if host in run.unreachable else "not reported by this host"
            rows.append(make_row(check, host, "skip", reason=reason))
            continue
        value = values[host]
        if len(values) < 2:
            rows.append(make_row(check, host, "skip", value, reason="only one host reported it: nothing to compare"))
            continue
        if reference is None:
            spread = ", ".join("%s on %d" % (v, n) for v, n in counts.most_common())
            rows.append(make_row(check, host, "warn", value, "one value on all hosts", "no majority: " + spread))
            continue
        same = value == reference
        if not same and tolerance and isinstance(value, float) and isinstance(reference, float) and reference:
            same = abs(value - reference) / abs(reference) <= tolerance
        if same:
            rows.append(make_row(check, host, "pass", value, reference))
        else:
            others = sum(n for v, n in counts.items() if v == reference)
            rows.append(make_row(check, host, "warn", value, reference,
                                 "differs from %d of %d hosts" % (others, len(values))))
    return rows


def grade_consistency(spec, run, hosts):
    """The rubric's consistency block: each fact or label-less result the hosts should share."""
    rows = []
    base = {"category": spec.get("category", "consistency"), "severity": spec.get("severity", "minor"),
            "remediation": spec.get("remediation", "")}
    facts = run.facts
    for item in spec.get("facts", []):
        check = dict(base, id="consistency.%s" % item["name"], title=item["title"])
        sel = facts[(facts.probe == item["source"]) & (facts.fact == item["name"])]
        values = {r.host: ("none" if r.value is None else r.value) for r in sel.itertuples()}
        rows.extend(consistency_rows(check, run, hosts, values))
    res = run.results
    for item in spec.get("results", []):
        check = dict(base, id="consistency.%s" % item["metric"], title=item["title"])
        sel = res[(res.probe == item["source"]) & (res.metric == item["metric"]) & (res.labels == json.dumps({}))]
        values = {r.host: float(r.value) for r in sel.itertuples()}
        rows.extend(consistency_rows(check, run, hosts, values, item.get("tolerance", 0.0)))
    return rows


def part_outcome(check, run, host):
    """For a check on one part of a multi-part artifact (`part: {dtype: bf16}`: the results labelled so), a row
    when the probe recorded that the part did not run, or None. Probes that measure several parts in one artifact
    (the compute probes: one per dtype) record each part's outcome as facts `<label>.<value>` (ok | skipped | error)
    and `<label>_reason.<value>`: "no mxfp8 tensor cores" says more than an anonymous "no result", and comes
    before the backend gate for the same reason."""
    if ungradable(dict(check, backends=None), run, host) is not None:
        return None
    [(label, value)] = check["part"].items()
    facts = find_artifact(run, host, check["probe"], check.get("variant")).get("facts") or {}
    status, reason = facts.get("%s.%s" % (label, value)), facts.get("%s_reason.%s" % (label, value))
    if status == "skipped":
        return make_row(check, host, "skip", reason=reason or "%s skipped by the probe" % value)
    if status is None:
        return make_row(check, host, "skip", reason="%s was not measured in this run (%ss: %s)"
                        % (value, label, facts.get("%ss" % label) or "none"))
    if status == "error" and not len(selection(run, check, host)):
        return make_row(check, host, "error", "no result", reason=reason)
    return None


def missing_gpus(check, doc, groups):
    """Per GPU, an error row for each GPU a worker was started for (the compute probes' fact `gpus`) that left no
    result in a faulted artifact: a GPU that crashed under the load is a row of the table, not a gap in it."""
    if check.get("per") != "gpu" or doc["status"] != "error":
        return []
    seen = {subject for subject, _ in groups}
    facts = doc.get("facts") or {}
    why = facts.get("dtype_reason.%s" % (check.get("part") or {}).get("dtype")) or doc.get("reason")
    return [make_row(check, doc["host"], "error", "no result", reason=why, subject="gpu=%s" % gpu)
            for gpu in str(facts.get("gpus") or "").split(",") if gpu and "gpu=%s" % gpu not in seen]


def grade_metric(check, run, host, models=None):
    """Threshold check on an aggregate of results, per host or per label value (e.g. per GPU); with `part`, on
    the results of that part only (see part_outcome)."""
    if check.get("part"):
        check = dict(check, labels=dict(check.get("labels") or {}, **check["part"]))
        pre = part_outcome(check, run, host)
        if pre:
            return [pre]
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    # node_info's model, else the artifact's own (AMD: node_info has none), as the training and inference graders do
    _, spec, _ = gpu_model(run, host, doc, models)
    sel = selection(run, check, host)
    groups = groups_of(check, sel)
    if not groups:
        return [no_result_row(check, host, doc, "no %s result" % check["metric"])]
    agg = AGGREGATES[check.get("agg", "median")]
    rows = []
    for subject, values in groups:
        value = float(agg(values))
        threshold, text, why = expectations.resolve(check["expect"], spec, value)
        if threshold is None:
            rows.append(make_row(check, host, "skip", value, reason=why, subject=subject))
            continue
        status = "pass" if expectations.meets(value, check["expect"], threshold) else "fail"
        expected = text
        if status == "pass" and check.get("warn"):
            w_threshold, w_text, _ = expectations.resolve(check["warn"], spec, value)
            if w_threshold is not None and not expectations.meets(value, check["warn"], w_threshold):
                status, expected = "warn", "%s (warn below %s)" % (text, w_text)
        unit = check.get("unit") or sel.unit
        rows.append(make_row(check, host, status, "%s %s" % (text_of(value), unit), expected,
                             doc.get("reason") if doc["status"] == "error" else None, subject=subject))
    missing = missing_gpus(check, doc, groups)
    if missing:  # in GPU order with the measured ones
        rows = sorted(rows + missing, key=lambda r: int(r["subject"].split("=")[1]))
    return rows


def grade_straggler(check, run, hosts, judge=None):
    """Per GPU (or per host): how far below the median of its node (scope: node) or of the cluster (scope: cluster).
    Robust: the median is not pulled down by the straggler it is looking for.

    judge: for a phase's kind built on this one, fn(host, subject) -> (judged, reason). A subject not judged is
    shown with its value and the reason, as a skip, and is no peer in any median (a storage NIC among the rails); a
    judged one's row carries the reason."""
    agg = AGGREGATES[check.get("agg", "median")]
    values = {}
    rows = []
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
            continue
        groups = groups_of(check, selection(run, check, host))
        if not groups:
            rows.append(make_row(check, host, "skip", reason="no %s result" % check["metric"]))
        for subject, vals in groups:
            values[(host, subject)] = float(agg(vals))
    fail_pct = float(check["max_below_median_pct"])
    warn_pct = float(check.get("warn_below_median_pct", fail_pct))
    scope = check.get("scope", "cluster")
    verdicts = {k: judge(*k) if judge else (True, None) for k in values}
    # The peers of a value: every judged value (scope cluster) or its host's (scope node); median computed once.
    by_scope = {}
    for key, v in values.items():
        if verdicts[key][0]:
            by_scope.setdefault(None if scope == "cluster" else key[0], []).append(v)
    medians = {k: statistics.median(v) for k, v in by_scope.items() if len(v) >= 3}
    for (host, subject), value in sorted(values.items()):
        judged, why = verdicts[(host, subject)]
        key = None if scope == "cluster" else host
        if not judged:
            rows.append(make_row(check, host, "skip", value, reason=why, subject=subject))
            continue
        if key not in medians:
            rows.append(make_row(check, host, "skip", value, subject=subject, reason="; ".join(
                filter(None, ["fewer than 3 peers to compare with", why]))))
            continue
        median = medians[key]
        below = 100.0 * (median - value) / median if median else 0.0
        observed = "%s (%s%% below %s median)" % (text_of(value), shown(max(below, 0), (warn_pct, fail_pct)), scope)
        rows.append(make_row(check, host, status_above(below, warn_pct, fail_pct), observed,
                             "within %g%% of the %s median %s" % (fail_pct, scope, text_of(median)), why,
                             subject=subject))
    return rows


NOT_IMPLEMENTED_REASON = "not measured: not implemented in this version"


def grade_not_implemented(check, run, host):
    """A test of the seed's methodology that this version cannot run yet (reports/data/not_implemented.yml): a skip
    row on every host, as any check has, so the report lists it and the rating counts it as not covered."""
    return [make_row(check, host, "skip", reason=NOT_IMPLEMENTED_REASON)]


# Per host: fn(check, run, host) -> rows; cluster: fn(check, run, hosts) -> rows. The phases' kinds join these the
# first time grade() runs (register_phase_kinds), never while this module is imported: phase graders import it.
PER_HOST_KINDS = {"reachable": grade_reachable, "prepared": grade_prepared, "tasks": grade_tasks,
                  "artifact": grade_artifact,
                  "metric": grade_metric, "not_implemented": grade_not_implemented}
CLUSTER_KINDS = {"straggler": grade_straggler, "one_host_artifact": one_host.grade_ran}
def register_phase_kinds():
    """Registers every phase's kinds into PER_HOST_KINDS and CLUSTER_KINDS (idempotent)."""
    from reports import phases

    for module in phases.modules("grade"):
        PER_HOST_KINDS.update(module.PER_HOST)
        CLUSTER_KINDS.update(module.CLUSTER)


def kind_names():
    register_phase_kinds()
    return set(PER_HOST_KINDS) | set(CLUSTER_KINDS)
