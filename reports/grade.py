"""Grading: pure functions from a loaded run and the rubric to check rows.

Every check appears for every host: pass, warn, fail, skip (with its reason) or error, always with the
observed value and the expectation, so nothing measured or missing disappears from the report.
"""

import json
import os
from collections import Counter

import yaml

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
CHECK_COLUMNS = ["check_id", "category", "title", "host", "status", "observed", "expected", "reason", "severity",
                 "remediation"]
STATUS_ORDER = ("pass", "warn", "fail", "error", "skip")


def load_rubric(path=None):
    with open(path or os.path.join(DATA_DIR, "rubric.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _text(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else "%.6g" % value
    return str(value)


def _row(check, host, status, observed=None, expected=None, reason=None):
    return {
        "check_id": check["id"], "category": check["category"], "title": check["title"], "host": host,
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


GRADERS = {"reachable": grade_reachable, "tasks": grade_tasks, "artifact": grade_artifact}


def grade(run, rubric=None):
    rubric = rubric or load_rubric()
    rows = []
    for check in rubric.get("checks", []):
        grader = GRADERS[check["kind"]]
        rows.extend(grader(check, run, host) for host in run.hosts)
    if rubric.get("consistency"):
        rows.extend(grade_consistency(rubric["consistency"], run, run.hosts))
    return rows


def summarize(rows):
    counts = Counter(r["status"] for r in rows)
    return {status: counts.get(status, 0) for status in STATUS_ORDER}
