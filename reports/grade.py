"""Grading: pure functions from a loaded run and the rubric to check rows.

Every check appears for every host: pass, warn, fail, skip (with its reason) or error, always with the
observed value and the expectation, so nothing measured or missing disappears from the report.
"""

import glob
import json
import os
import statistics
from collections import Counter

import yaml

from reports import expectations

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CHECK_COLUMNS = ["check_id", "category", "title", "host", "subject", "status", "observed", "expected", "reason",
                 "severity", "remediation"]
AGGREGATES = {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median, "sum": sum,
              "count": len}
STATUS_ORDER = ("pass", "warn", "fail", "error", "skip")


def load_rubric(path=None):
    """rubric.yml plus every rubric.d/*.yml beside it (one file per phase), checks in file order.
    A check id defined twice is an error: two judgements of one thing would contradict each other."""
    path = path or os.path.join(DATA_DIR, "rubric.yml")
    with open(path, encoding="utf-8") as fh:
        rubric = yaml.safe_load(fh)
    rubric.setdefault("checks", [])
    for extra in sorted(glob.glob(os.path.join(os.path.dirname(path), "rubric.d", "*.yml"))):
        with open(extra, encoding="utf-8") as fh:
            part = yaml.safe_load(fh) or {}
        rubric["checks"].extend(part.get("checks", []))
    seen = Counter(c["id"] for c in rubric["checks"])
    dupes = sorted(i for i, n in seen.items() if n > 1)
    if dupes:
        raise ValueError("rubric defines these check ids more than once: %s" % ", ".join(dupes))
    return rubric


def _text(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else "%.6g" % value
    return str(value)


def _row(check, host, status, observed=None, expected=None, reason=None, subject=""):
    return {
        "check_id": check["id"], "category": check["category"], "title": check["title"], "host": host,
        "subject": subject,
        "status": status, "observed": _text(observed), "expected": _text(expected), "reason": reason or "",
        "severity": check.get("severity", "minor"), "remediation": check.get("remediation", ""),
    }


def _failed_tasks(run, host):
    return [line.get("task") for line in run.journal if line.get("host") == host and line.get("status") == "failed"
            and not line.get("ignored") and not line.get("rescued")]


def grade_reachable(check, run, host):
    if host in run.unreachable:
        return _row(check, host, "fail", "unreachable", "reachable", run.unreachable[host])
    return _row(check, host, "pass", "reachable", "reachable")


def grade_tasks(check, run, host):
    if host in run.unreachable:
        return _row(check, host, "skip", reason="host unreachable")
    failed = _failed_tasks(run, host)
    if failed:
        return _row(check, host, "fail", "%d failed: %s" % (len(failed), "; ".join(failed)), "0 failed")
    return _row(check, host, "pass", "0 failed", "0 failed")


def grade_artifact(check, run, host):
    doc = run.artifact(host, check["probe"], check.get("variant"))
    if doc is None:
        if host in run.unreachable:
            return _row(check, host, "skip", reason="host unreachable: probe did not run")
        bad = [e for e in run.load_errors if e.get("host") == host and
               os.path.basename(e["path"]).startswith(check["probe"])]
        if bad:
            return _row(check, host, "error", "invalid artifact", "ok", bad[0]["error"])
        return _row(check, host, "error", "no artifact", "ok", "probe %s left no artifact" % check["probe"])
    status = {"ok": "pass", "error": "error", "skipped": "skip"}[doc["status"]]
    return _row(check, host, status, doc["status"], "ok", doc.get("reason"))


def _majority(values):
    """The most common value; None when there is no strict majority winner among ties."""
    counts = Counter(values.values())
    if not counts:
        return None, counts
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return None, counts
    return top, counts


def _consistency_rows(check, run, hosts, values, tolerance=0.0):
    """values: host -> observed value for the hosts that reported one."""
    rows = []
    reference, counts = _majority(values)
    for host in hosts:
        if host not in values:
            reason = "host unreachable" if host in run.unreachable else "not reported by this host"
            rows.append(_row(check, host, "skip", reason=reason))
            continue
        value = values[host]
        if len(values) < 2:
            rows.append(_row(check, host, "skip", value, reason="only one host reported it: nothing to compare"))
            continue
        if reference is None:
            spread = ", ".join("%s on %d" % (v, n) for v, n in counts.most_common())
            rows.append(_row(check, host, "warn", value, "one value on all hosts", "no majority: " + spread))
            continue
        same = value == reference
        if not same and tolerance and isinstance(value, float) and isinstance(reference, float) and reference:
            same = abs(value - reference) / abs(reference) <= tolerance
        if same:
            rows.append(_row(check, host, "pass", value, reference))
        else:
            others = sum(n for v, n in counts.items() if v == reference)
            rows.append(_row(check, host, "warn", value, reference,
                             "differs from %d of %d hosts" % (others, len(values))))
    return rows


def grade_consistency(spec, run, hosts):
    rows = []
    base = {"category": spec.get("category", "consistency"), "severity": spec.get("severity", "minor"),
            "remediation": spec.get("remediation", "")}
    facts = run.facts
    for item in spec.get("facts", []):
        check = dict(base, id="consistency.%s" % item["name"], title=item["title"])
        sel = facts[(facts.probe == item["source"]) & (facts.fact == item["name"])]
        values = {r.host: ("none" if r.value is None else r.value) for r in sel.itertuples()}
        rows.extend(_consistency_rows(check, run, hosts, values))
    res = run.results
    for item in spec.get("results", []):
        check = dict(base, id="consistency.%s" % item["metric"], title=item["title"])
        sel = res[(res.probe == item["source"]) & (res.metric == item["metric"]) & (res.labels == json.dumps({}))]
        values = {r.host: float(r.value) for r in sel.itertuples()}
        rows.extend(_consistency_rows(check, run, hosts, values, item.get("tolerance", 0.0)))
    return rows


def _labels_match(labels_json, wanted):
    labels = json.loads(labels_json)
    return all(str(labels.get(k)) == str(v) for k, v in wanted.items())


def _select(run, check, host=None):
    """Result rows of a check: probe, metric, optional variant and label filter; per host when given."""
    res = run.results
    sel = res[(res.probe == check["probe"]) & (res.metric == check["metric"])]
    if "variant" in check:
        sel = sel[sel.variant == check["variant"]]
    if host is not None:
        sel = sel[sel.host == host]
    if check.get("labels"):
        sel = sel[[_labels_match(lj, check["labels"]) for lj in sel.labels]]
    return sel


def _groups(check, sel):
    """(subject, values) per group: the whole host, or one group per value of the label named by `per`."""
    per = check.get("per", "host")
    if per == "host":
        return [("", list(sel.value))] if len(sel) else []
    groups = {}
    for value, labels_json in zip(sel.value, sel.labels):
        key = json.loads(labels_json).get(per)
        groups.setdefault(key, []).append(value)
    return [("%s=%s" % (per, k), groups[k]) for k in sorted(groups, key=lambda k: (str(type(k)), k))]


def _precondition(check, run, host):
    """A row when the check cannot be graded on this host (unreachable, probe skipped or failed, wrong backend)."""
    if host in run.unreachable:
        return _row(check, host, "skip", reason="host unreachable")
    doc = run.artifact(host, check["probe"], check.get("variant"))
    if doc is None:
        return _row(check, host, "skip", reason="probe %s did not run on this host" % check["probe"])
    if doc["status"] == "skipped":
        return _row(check, host, "skip", reason=doc.get("reason"))
    backends = check.get("backends")
    if backends and doc["device"]["backend"] not in backends:
        return _row(check, host, "skip", reason="backend=%s: expectation is for %s" % (
            doc["device"]["backend"], "/".join(backends)))
    return None


def _host_model_spec(run, host, models):
    facts = run.facts
    sel = facts[(facts.host == host) & (facts.probe == "node_info") & (facts.fact == "gpu_model")]
    name = sel.value.iloc[0] if len(sel) else None
    key = expectations.gpu_model_key(name, models)
    return key, (models.get(key) if key else None)


def grade_metric(check, run, host, models=None):
    """Threshold check on an aggregate of results, per host or per label value (e.g. per GPU)."""
    pre = _precondition(check, run, host)
    if pre:
        return [pre]
    models = models if models is not None else expectations.load_gpus()
    _, spec = _host_model_spec(run, host, models)
    doc = run.artifact(host, check["probe"], check.get("variant"))
    groups = _groups(check, _select(run, check, host))
    if not groups:
        status = "error" if doc["status"] == "error" else "skip"
        return [_row(check, host, status, reason=doc.get("reason") or "no %s result" % check["metric"])]
    agg = AGGREGATES[check.get("agg", "median")]
    rows = []
    for subject, values in groups:
        value = float(agg(values))
        threshold, text, why = expectations.resolve(check["expect"], spec)
        if threshold is None:
            rows.append(_row(check, host, "skip", value, reason=why, subject=subject))
            continue
        status = "pass" if expectations.meets(value, check["expect"], threshold) else "fail"
        expected = text
        if status == "pass" and check.get("warn"):
            w_threshold, w_text, _ = expectations.resolve(check["warn"], spec)
            if w_threshold is not None and not expectations.meets(value, check["warn"], w_threshold):
                status, expected = "warn", "%s (warn below %s)" % (text, w_text)
        unit = check.get("unit") or (_select(run, check, host).unit.iloc[0])
        rows.append(_row(check, host, status, "%s %s" % (_text(value), unit), expected,
                         doc.get("reason") if doc["status"] == "error" else None, subject=subject))
    return rows


def grade_straggler(check, run, hosts):
    """Per GPU (or per host): how far below the median of its node (scope: node) or of the cluster (scope: cluster).
    Robust: the median is not pulled down by the straggler it is looking for."""
    agg = AGGREGATES[check.get("agg", "median")]
    values = {}
    rows = []
    for host in hosts:
        pre = _precondition(check, run, host)
        if pre:
            rows.append(pre)
            continue
        groups = _groups(check, _select(run, check, host))
        if not groups:
            rows.append(_row(check, host, "skip", reason="no %s result" % check["metric"]))
        for subject, vals in groups:
            values[(host, subject)] = float(agg(vals))
    fail_pct = float(check["max_below_median_pct"])
    warn_pct = float(check.get("warn_below_median_pct", fail_pct))
    scope = check.get("scope", "cluster")
    for (host, subject), value in sorted(values.items()):
        peers = [v for (h, _), v in values.items() if scope == "cluster" or h == host]
        if len(peers) < 3:
            rows.append(_row(check, host, "skip", value, reason="fewer than 3 peers to compare with",
                             subject=subject))
            continue
        median = statistics.median(peers)
        below = 100.0 * (median - value) / median if median else 0.0
        status = "fail" if below > fail_pct else "warn" if below > warn_pct else "pass"
        rows.append(_row(check, host, status, "%s (%.1f%% below %s median)" % (_text(value), max(below, 0), scope),
                         "within %g%% of the %s median %s" % (fail_pct, scope, _text(median)), subject=subject))
    return rows


GRADERS = {"reachable": grade_reachable, "tasks": grade_tasks, "artifact": grade_artifact}
PER_HOST_GRADERS = {"metric": grade_metric}
CLUSTER_GRADERS = {"straggler": grade_straggler}


def grade(run, rubric=None):
    rubric = rubric or load_rubric()
    rows = []
    for check in rubric.get("checks", []):
        kind = check["kind"]
        if kind in GRADERS:
            rows.extend(GRADERS[kind](check, run, host) for host in run.hosts)
        elif kind in PER_HOST_GRADERS:
            for host in run.hosts:
                rows.extend(PER_HOST_GRADERS[kind](check, run, host))
        elif kind in CLUSTER_GRADERS:
            rows.extend(CLUSTER_GRADERS[kind](check, run, run.hosts))
        else:
            raise ValueError("check %s has unknown kind %r" % (check["id"], kind))
    if rubric.get("consistency"):
        rows.extend(grade_consistency(rubric["consistency"], run, run.hosts))
    return rows


def summarize(rows):
    counts = Counter(r["status"] for r in rows)
    return {status: counts.get(status, 0) for status in STATUS_ORDER}
