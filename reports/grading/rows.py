"""Check rows: the one shape every grader returns, and the status rules that graders share.

Every check appears for every host: pass, warn, fail, skip (with its reason) or error, always with the observed value
and the expectation, so nothing measured or missing disappears from the report.
"""

from collections import Counter

CHECK_COLUMNS = ["check_id", "category", "title", "host", "subject", "status", "observed", "expected", "reason",
                 "severity", "remediation", "weight", "evidence"]
STATUS_ORDER = ("pass", "warn", "fail", "error", "skip")
# How bad a status is when several findings make one row (skip is not a finding).
SEVERITY_OF_STATUS = {"pass": 0, "skip": 0, "warn": 1, "fail": 2, "error": 3}
# An artifact's status as a check status.
ARTIFACT_STATUS = {"ok": "pass", "error": "error", "skipped": "skip"}


def text_of(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else "%.6g" % value
    return str(value)


def make_row(check, host, status, observed=None, expected=None, reason=None, subject=""):
    return {
        "check_id": check["id"], "category": check["category"], "title": check["title"], "host": host,
        "subject": subject,
        "status": status, "observed": text_of(observed), "expected": text_of(expected), "reason": reason or "",
        "severity": check.get("severity", "minor"), "remediation": check.get("remediation", ""),
        # Rating inputs (reports/rate.py): the check's weight within its category, what the row rests on
        # ("measured" by a probe on the cluster, or "analyst" input from an analyst file), and the check's kind
        # (an `artifact` check only says that a probe ran; a `not_implemented` one is a test not built yet).
        "weight": float(check.get("weight", 1.0)), "evidence": check.get("evidence", "measured"),
        "kind": check.get("kind"),
    }


def no_result_row(check, host, doc, missing=None, reason=None):
    """The row of a check that found nothing to judge in its probe's artifact: an error when the artifact is one,
    else a skip; its reason is `reason` when given, else the artifact's own, else `missing` (what was not found)."""
    status = "error" if doc["status"] == "error" else "skip"
    return make_row(check, host, status, reason=reason or doc.get("reason") or missing)


def status_above(value, warn, fail):
    """fail above `fail`, warn above `warn`, else pass: for values where more is worse (a drop, a degradation)."""
    return "fail" if value > fail else "warn" if value > warn else "pass"


def status_below(value, warn, fail):
    """fail below `fail`, warn below `warn`, else pass: for values where less is worse (a ratio to a baseline)."""
    return "fail" if value < fail else "warn" if value < warn else "pass"


def worst_status(statuses, start="pass"):
    worst = start
    for status in statuses:
        if SEVERITY_OF_STATUS[status] > SEVERITY_OF_STATUS[worst]:
            worst = status
    return worst


def summarize(rows):
    counts = Counter(r["status"] for r in rows)
    return {status: counts.get(status, 0) for status in STATUS_ORDER}


def summary_line(rows):
    """"3 pass, 1 warn": the statuses the rows have, in STATUS_ORDER (a section's line under its tables)."""
    return ", ".join("%d %s" % (n, s) for s, n in summarize(rows).items() if n)
