"""Grading of the lifecycle phase (roles/lifecycle): install, import, pull, download and serve timings.

Tiers are discovered on each node or come from the inventory, so their names are only known from the results:
the graders give one row per group of labels they find (subject ``tier=home tool=uv`` …).

kinds (registered by reports.grading.kinds.register_phase_kinds):
  lifecycle_metric      per host: threshold on a metric (lower- or higher-is-better, `expect`/`warn`), one row per
                        combination of the labels named in `per`; a result labelled bound=at_most/at_least (a
                        transfer or start that reached its timeout) is judged as a bound (judge_bound); every step
                        the probe tried and got no number from (facts.unmeasured) is an error row of its own; with
                        no result, the skip reason the probe gave for that tool/hub/engine (facts.skipped_*,
                        facts.failures) or its artifact's reason
  lifecycle_failures    per host: steps the probe tried and that failed (facts.failures) fail the check
  lifecycle_tier_spread per host: for the same install or import (labels in `group`), the slowest tier against the
                        median of the other tiers; a ratio above `warn_ratio`/`fail_ratio` names the tier
  lifecycle_peers       cluster: each host against the median of all hosts for the same tier and tool
"""

import statistics

from reports.grading import expectations
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, no_result_row, status_above, text_of, worst_status
from reports.grading.select import AGGREGATES, find_artifact, labels_match, slowest
from reports.shown import same_side, shown


def records(run, probe, metric, host=None, labels=None):
    """Result rows of probe/metric with parsed labels (optionally one host, and a label filter)."""
    return [r for r in run.records(probe) if r["metric"] == metric and (host is None or r["host"] == host)
            and labels_match(r["labels"], labels)]


def _subject(labels, keys):
    return " ".join("%s=%s" % (k, labels.get(k)) for k in keys if labels.get(k) is not None)


def group_values(recs, keys):
    """{subject: [values]} grouped by the label keys, in a stable order."""
    groups = {}
    for r in recs:
        groups.setdefault(_subject(r["labels"], keys), []).append(r["value"])
    return dict(sorted(groups.items()))


def lines(check):
    """The fixed lines (expect and warn `value`s) of a lifecycle_metric check."""
    return [float(e["value"]) for e in (check.get("expect"), check.get("warn")) if e and "value" in e]


def _fmt(value, unit, lines=()):
    """value with 3 decimals at most, 6 significant digits; more where that would show it on the other side of one
    of `lines` (the check's), or on it: an import of 20.0004 s past a 20 s limit is "20.0004 s", not "20 s"."""
    text = text_of(round(value, 3))
    if not same_side(float(text), value, lines):
        text = shown(value, lines, decimals=3)
        text = text.rstrip("0").rstrip(".") if "." in text else text
    return ("%s %s" % (text, unit or "")).strip()


def _signed(text):
    """A shown number with its sign, as "%+" shows it."""
    return text if text.startswith("-") else "+" + text


def _gradable_doc(check, run, host):
    """(None, the probe's artifact) when the check can be graded on this host, else (the rows to return, None)."""
    pre = ungradable(check, run, host, variant=None)
    return ([pre], None) if pre else (None, find_artifact(run, host, check["probe"]))


def _why_missing(check, doc):
    """Why a probe that ran has no result for this check: the tool/engine/hub it skipped or that failed."""
    facts = doc.get("facts") or {}
    wanted = check.get("labels") or {}
    reasons = []
    for key in ("skipped_tools", "skipped_engines", "skipped", "failures"):
        for name, why in sorted((facts.get(key) or {}).items()):
            if not wanted or any(str(v) in str(name).split("/") or str(v) == str(name) for v in wanted.values()):
                reasons.append("%s: %s" % (name, why))
    if reasons:
        return "; ".join(reasons[:4])
    if doc["status"] == "error":
        return doc.get("reason")
    return "no %s result%s on this host" % (check["metric"], " for %s" % _subject(wanted, sorted(wanted))
                                            if wanted else "")


def group_records(recs, keys):
    """{subject: [records]} grouped by the label keys, in a stable order."""
    groups = {}
    for r in recs:
        groups.setdefault(_subject(r["labels"], keys), []).append(r)
    return dict(sorted(groups.items()))


# A bound's far end: "at most X Mbit/s" leaves every value down to nothing open, "at least X s" every one above.
BOUND_FAR = {"at_most": -1e300, "at_least": 1e300}


def judge_bound(value, bound, check):
    """(status, expected text) of a bound (labels bound=at_most/at_least: a transfer or a start that reached its
    timeout). When every value the bound leaves open gets the same status (at most 40 Mbit/s against a 100 Mbit/s
    floor: fail), that is the status. Otherwise the true value is unknown on the bad side of the bound, so the row
    cannot pass as if the bound were measured, nor fail without knowing: warn (it timed out, worth a look)."""
    near, expected = expectations.judge(value, check["expect"], check.get("warn"))
    far, _ = expectations.judge(BOUND_FAR[bound], check["expect"], check.get("warn"))
    return (near if near == far else "warn"), expected


def _bound_text(r, unit, lines=()):
    lab = r["labels"]
    text = "%s %s" % (lab["bound"].replace("_", " "), _fmt(r["value"], unit, lines))
    return "%s: %s" % (text, lab["note"]) if lab.get("note") else text


def _unmeasured_rows(check, host, doc, taken):
    """Error rows for what the probe tried and got no number from (facts.unmeasured: the metrics the step would
    have given, its labels, why): a failed pull or download is a row of its own, never hidden behind one of the
    same check that worked. taken: the subjects that have a row already (a check without `per` names the step by
    all its labels then)."""
    keys = check.get("per", [])
    rows = []
    for entry in (doc.get("facts") or {}).get("unmeasured") or []:
        labels = entry.get("labels") or {}
        if check["metric"] not in (entry.get("metrics") or []) or not labels_match(labels, check.get("labels")):
            continue
        subject = _subject(labels, keys)
        if subject in taken or not subject:
            subject = _subject(labels, list(keys) + sorted(k for k in labels if k not in keys))
        taken.add(subject)
        rows.append(make_row(check, host, "error", "not measured", reason=entry.get("why"), subject=subject))
    return rows


def grade_metric(check, run, host):
    rows, doc = _gradable_doc(check, run, host)
    if rows:
        return rows
    recs = records(run, check["probe"], check["metric"], host, check.get("labels"))
    groups = group_records(recs, check.get("per", []))
    failed = _unmeasured_rows(check, host, doc, set(groups))
    if not groups and not failed:
        return [no_result_row(check, host, doc, reason=_why_missing(check, doc))]
    agg = AGGREGATES[check.get("agg", "median")]
    unit = check.get("unit") or (recs[0]["unit"] if recs else "")
    out = []
    for subject, group in groups.items():
        measured = [r["value"] for r in group if not r["labels"].get("bound")]
        statuses, observed, expected = [], [], None
        if measured:
            value = float(agg(measured))
            status, expected = expectations.judge(value, check["expect"], check.get("warn"))
            statuses.append(status)
            observed.append(_fmt(value, unit, lines(check)))
        # a timed-out try beside finished ones is judged too: the row is the worse of them
        for r in group:
            if r["labels"].get("bound") in BOUND_FAR:
                status, expected = judge_bound(r["value"], r["labels"]["bound"], check)
                statuses.append(status)
                observed.append(_bound_text(r, unit, lines(check)))
        out.append(make_row(check, host, worst_status(statuses), "; ".join(observed), expected, subject=subject))
    return out + failed


def grade_failures(check, run, host):
    rows, doc = _gradable_doc(check, run, host)
    if rows:
        return rows
    failures = (doc.get("facts") or {}).get("failures") or {}
    if doc["status"] == "error" and not failures:
        return [make_row(check, host, "error", "probe error", "no failed step", doc.get("reason"))]
    if failures:
        return [make_row(check, host, "fail", "%d failed: %s" % (len(failures), "; ".join(
            "%s: %s" % kv for kv in sorted(failures.items())[:4])), "no failed step")]
    return [make_row(check, host, "pass", "0 failed", "no failed step")]


def tier_spread(values):
    """values: {tier: seconds}. (slowest tier, its value, median of the others, ratio) or None with < 2 tiers."""
    return slowest(values)


def grade_tier_spread(check, run, host):
    rows, doc = _gradable_doc(check, run, host)
    if rows:
        return rows
    recs = records(run, check["probe"], check["metric"], host, check.get("labels"))
    keys = check.get("group", [])
    by_group = {}
    for r in recs:
        tier = r["labels"].get("tier")
        by_group.setdefault(_subject(r["labels"], keys), {}).setdefault(tier, []).append(r["value"])
    if not by_group:
        return [no_result_row(check, host, doc, reason=_why_missing(check, doc))]
    warn, fail = float(check["warn_ratio"]), float(check["fail_ratio"])
    floor = float(check.get("min_s", 0))
    out = []
    for subject, tiers in sorted(by_group.items()):
        values = {t: statistics.median(v) for t, v in tiers.items()}
        spread = tier_spread(values)
        if spread is None:
            out.append(make_row(check, host, "skip", subject=subject,
                                reason="only one tier (%s): nothing to compare" % next(iter(values))))
            continue
        slow, value, others, ratio = spread
        observed = "tier %s %s× the other tiers' median (%s vs %s)" % (
            slow, shown(ratio, (warn, fail)), _fmt(value, "s"), _fmt(others, "s"))
        expected = "slowest tier ≤ %g× the others (warn above %g×; times under %g s not compared)" % (fail, warn, floor)
        if value < floor:
            status = "pass"
            observed += ", under the %g s floor" % floor
        else:
            status = status_above(ratio, warn, fail)
        out.append(make_row(check, host, status, observed, expected, subject=subject))
    return out


def grade_peers(check, run, hosts):
    """Each host's value per subject against the median of every host's (≥ 3 hosts); lower is better."""
    keys = check.get("per", ["tier", "tool"])
    per_host = {}
    rows = []
    for host in hosts:
        pre, doc = _gradable_doc(check, run, host)
        if pre:
            rows.extend(pre)
            continue
        groups = group_values(records(run, check["probe"], check["metric"], host, check.get("labels")), keys)
        if not groups:
            rows.append(make_row(check, host, "error" if doc["status"] == "error" else "skip",
                                 reason=_why_missing(check, doc)))
        for subject, values in groups.items():
            per_host[(host, subject)] = statistics.median(values)
    warn, fail = float(check["warn_above_median_pct"]), float(check["fail_above_median_pct"])
    floor = float(check.get("min_s", 0))
    subjects = {}
    for (_host, subject), v in per_host.items():
        subjects.setdefault(subject, []).append(v)
    for (host, subject), value in sorted(per_host.items()):
        peers = subjects[subject]
        if len(peers) < 3:
            rows.append(make_row(check, host, "skip", _fmt(value, "s"), reason="fewer than 3 hosts to compare with",
                                 subject=subject))
            continue
        median = statistics.median(peers)
        above = 100.0 * (value - median) / median if median > 0 else 0.0
        status = "pass" if value < floor else status_above(above, warn, fail)
        rows.append(make_row(check, host, status, "%s (%s%% against the median)" % (
            _fmt(value, "s"), _signed(shown(above, (warn, fail), decimals=0))),
                             "within %g%% of the hosts' median %s" % (fail, _fmt(median, "s")), subject=subject))
    return rows


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {
    "lifecycle_metric": grade_metric,
    "lifecycle_failures": grade_failures,
    "lifecycle_tier_spread": grade_tier_spread,
}
CLUSTER = {"lifecycle_peers": grade_peers}
