"""compare RUN_A RUN_B: what got worse and what got better, check by check (A is the baseline, B the new run).

A side is a run directory (its report/ratings.json and report/checks.csv; graded on the fly when it has no
report yet), a report directory, or a ratings.json beside its checks.csv.

- Per check id: the worst status and the score (mean over graded rows, pass 1 / warn 0.5 / fail 0, from
  ratings.json; error rows are not graded). A check regresses when its worst status or its score gets worse,
  improves when either gets better and neither gets worse. A worst status that became or stopped being error
  (pass or warn to error and back) is classed by the status first, even where a side has no score (every row an
  error); otherwise a check graded on one side only is "newly measured" / "no longer measured".
- Per row, for the same (check, host, subject) on both sides (the same cluster measured twice): status changes.
- Tier, overall score and category scores, and headline metrics (in their better direction).
"""

import json
import os

STATUS_RANK = {"pass": 0, "warn": 1, "fail": 2, "error": 2}
EPS = 1e-9


def load_side(path):
    """(ratings document, check rows, label) of one side."""
    from reports.build import evaluate, read_checks_csv

    path = os.path.abspath(path)
    if os.path.isfile(path) and path.endswith(".json"):
        report_dir = os.path.dirname(path)
    elif os.path.isfile(os.path.join(path, "ratings.json")):
        report_dir = path
    elif os.path.isfile(os.path.join(path, "report", "ratings.json")):
        report_dir = os.path.join(path, "report")
    elif os.path.isdir(os.path.join(path, "artifacts")):
        _, rows, doc = evaluate(path)
        return doc, rows, _label(doc)
    else:
        raise FileNotFoundError("%s is neither a run directory nor a report with ratings.json" % path)
    with open(os.path.join(report_dir, "ratings.json"), encoding="utf-8") as fh:
        doc = json.load(fh)
    if doc.get("schema") != "clustermax.assess/ratings/v1":
        raise ValueError("%s: not a clustermax.assess/ratings/v1 document" % report_dir)
    csv_path = os.path.join(report_dir, "checks.csv")
    rows = read_checks_csv(csv_path) if os.path.exists(csv_path) else []
    return doc, rows, _label(doc)


def _label(doc):
    run = doc.get("run", {})
    return "%s/%s" % (run.get("provider"), run.get("run_id"))


def _worse(a, b):
    """-1 improved, 0 same, 1 regressed (status ranks; skip is not graded)."""
    return (STATUS_RANK[b] > STATUS_RANK[a]) - (STATUS_RANK[b] < STATUS_RANK[a])


def _error_changed(a, b):
    """1 or -1 when the worst status changed to or from error between two graded statuses (pass, warn, fail),
    by the worse of the two; 0 otherwise (fail and error rank the same; skip is not measured)."""
    if a == b or "error" not in (a, b) or a not in STATUS_RANK or b not in STATUS_RANK:
        return 0
    return _worse(a, b)


def compare_checks(checks_a, checks_b):
    a = {c["check_id"]: c for c in checks_a}
    b = {c["check_id"]: c for c in checks_b}
    out = {"regressions": [], "improvements": [], "newly_measured": [], "no_longer_measured": [], "new": [],
           "gone": [], "unchanged": 0}
    for cid in list(a) + [c for c in b if c not in a]:
        ca, cb = a.get(cid), b.get(cid)
        if ca is None or cb is None:
            c = ca or cb
            out["new" if ca is None else "gone"].append({"check_id": cid, "category": c["category"],
                                                         "title": c["title"], "worst": c["worst"]})
            continue
        graded_a, graded_b = ca["score"] is not None, cb["score"] is not None
        entry = {"check_id": cid, "category": cb["category"], "title": cb["title"], "severity": cb["severity"],
                 "a": {"worst": ca["worst"], "score": ca["score"], "counts": ca["counts"]},
                 "b": {"worst": cb["worst"], "score": cb["score"], "counts": cb["counts"]}}
        entry["delta"] = None if not (graded_a and graded_b) else round(100 * (cb["score"] - ca["score"]), 2)
        by_error = _error_changed(ca["worst"], cb["worst"])
        if by_error:
            # error is not graded: a check whose rows all became errors has no score, and is still worse
            out["regressions" if by_error > 0 else "improvements"].append(entry)
        elif not graded_a and not graded_b:
            out["unchanged"] += 1
        elif not graded_a:
            out["newly_measured"].append(entry)
        elif not graded_b:
            out["no_longer_measured"].append(entry)
        else:
            status = _worse(ca["worst"], cb["worst"])
            score = (cb["score"] < ca["score"] - EPS) - (cb["score"] > ca["score"] + EPS)
            if status > 0 or score > 0:
                out["regressions"].append(entry)
            elif status < 0 or score < 0:
                out["improvements"].append(entry)
            else:
                out["unchanged"] += 1
    severity = {"critical": 0, "major": 1, "minor": 2, "info": 3}
    for key in ("regressions", "improvements"):
        # no delta (a side with every row an error): first of its severity, nothing of it could be graded
        out[key].sort(key=lambda e: (severity.get(e["severity"], 9), e["delta"] is not None, -abs(e["delta"] or 0),
                                     e["check_id"]))
    return out


def compare_rows(rows_a, rows_b):
    """Status changes of the same (check, host, subject) on both sides."""
    a = {(r["check_id"], r["host"], r["subject"]): r for r in rows_a}
    changes = []
    for r in rows_b:
        ra = a.get((r["check_id"], r["host"], r["subject"]))
        if ra is None or ra["status"] == r["status"]:
            continue
        if ra["status"] == "skip" or r["status"] == "skip":
            kind = "newly measured" if ra["status"] == "skip" else "no longer measured"
        else:
            kind = {1: "regression", -1: "improvement", 0: "changed"}[_worse(ra["status"], r["status"])]
        changes.append({"check_id": r["check_id"], "host": r["host"], "subject": r["subject"], "kind": kind,
                        "a": {"status": ra["status"], "observed": ra["observed"]},
                        "b": {"status": r["status"], "observed": r["observed"]}})
    return changes


def compare_headline(ha, hb):
    a = {m["id"]: m for m in ha}
    out = []
    for mb in hb:
        ma = a.get(mb["id"])
        if not ma or ma.get("value") is None or mb.get("value") is None:
            continue
        delta = mb["value"] - ma["value"]
        pct = 100.0 * delta / abs(ma["value"]) if ma["value"] else None
        sign = 1 if mb["better"] == "higher" else -1
        direction = "better" if sign * delta > EPS else "worse" if sign * delta < -EPS else "same"
        out.append({"id": mb["id"], "title": mb["title"], "unit": mb["unit"], "a": ma["value"], "b": mb["value"],
                    "delta": delta, "delta_pct": pct, "direction": direction})
    return out


def compare(side_a, side_b):
    (doc_a, rows_a, label_a), (doc_b, rows_b, label_b) = side_a, side_b
    cats_a = {c["id"]: c for c in doc_a["categories"]}
    categories = []
    for cb in doc_b["categories"]:
        ca = cats_a.get(cb["id"], {})
        sa, sb = ca.get("score"), cb["score"]
        categories.append({"id": cb["id"], "a": sa, "b": sb, "coverage_a": ca.get("coverage"),
                           "coverage_b": cb["coverage"],
                           "delta": None if sa is None or sb is None else round(sb - sa, 2)})
    checks = compare_checks(doc_a["checks"], doc_b["checks"])
    from reports.rate import load_tiers

    order = [t["name"] for t in load_tiers()["tiers"]]
    ta, tb = doc_a["tier"]["name"], doc_b["tier"]["name"]
    change = ("not comparable" if ta not in order or tb not in order else
              "worse" if order.index(tb) > order.index(ta) else "better" if order.index(tb) < order.index(ta)
              else "same")
    return {
        "schema": "clustermax.assess/compare/v1",
        "a": label_a, "b": label_b,
        "tier": {"a": ta, "b": tb, "change": change},
        "score": {"a": doc_a["score"], "b": doc_b["score"]},
        "coverage": {"a": doc_a["coverage"], "b": doc_b["coverage"]},
        "categories": categories,
        "checks": checks,
        "rows": compare_rows(rows_a, rows_b),
        "headline": compare_headline(doc_a.get("headline", []), doc_b.get("headline", [])),
    }


def _score(value):
    return "–" if value is None else "%.1f" % value


def _counts(counts):
    return ", ".join("%d %s" % (n, s) for s, n in counts.items() if n) or "none"


def text(result, limit=50):
    """Human-readable comparison (markdown-ish, fine in a terminal)."""
    t = result
    lines = ["compare %s (A) -> %s (B)" % (t["a"], t["b"]),
             "  tier: %s -> %s; score %s -> %s; coverage %.0f%% -> %.0f%%" % (
                 t["tier"]["a"], t["tier"]["b"], _score(t["score"]["a"]), _score(t["score"]["b"]),
                 100 * (t["coverage"]["a"] or 0), 100 * (t["coverage"]["b"] or 0))]
    moved = [c for c in t["categories"] if c["a"] != c["b"]]
    for c in moved:
        lines.append("  category %-14s %s -> %s" % (c["id"], _score(c["a"]), _score(c["b"])))
    ch = t["checks"]
    lines.append("  checks: %d regressed, %d improved, %d newly measured, %d no longer measured, %d new, %d gone, "
                 "%d unchanged" % (len(ch["regressions"]), len(ch["improvements"]), len(ch["newly_measured"]),
                                   len(ch["no_longer_measured"]), len(ch["new"]), len(ch["gone"]), ch["unchanged"]))
    for title, key in (("Regressions", "regressions"), ("Improvements", "improvements")):
        if ch[key]:
            lines.append("%s:" % title)
            for e in ch[key][:limit]:
                lines.append("  %s %-40s %s -> %s  (A: %s; B: %s)" % (
                    "-" if key == "regressions" else "+", e["check_id"], e["a"]["worst"], e["b"]["worst"],
                    _counts(e["a"]["counts"]), _counts(e["b"]["counts"])))
            if len(ch[key]) > limit:
                lines.append("  ... and %d more" % (len(ch[key]) - limit))
    for title, key in (("Newly measured", "newly_measured"), ("No longer measured", "no_longer_measured"),
                       ("New checks", "new"), ("Checks gone", "gone")):
        if ch[key]:
            lines.append("%s: %s" % (title, ", ".join(e["check_id"] for e in ch[key][:limit])
                                     + (" ..." if len(ch[key]) > limit else "")))
    changed = [r for r in t["rows"] if r["kind"] in ("regression", "improvement")]
    if changed:
        lines.append("Row changes (same host and subject in both runs):")
        for r in changed[:limit]:
            lines.append("  %s %s %s%s: %s (%s) -> %s (%s)" % (
                "-" if r["kind"] == "regression" else "+", r["check_id"], r["host"],
                " [%s]" % r["subject"] if r["subject"] else "", r["a"]["status"], r["a"]["observed"] or "–",
                r["b"]["status"], r["b"]["observed"] or "–"))
        if len(changed) > limit:
            lines.append("  ... and %d more" % (len(changed) - limit))
    worse = [h for h in t["headline"] if h["direction"] != "same"]
    if worse:
        lines.append("Headline metrics:")
        for h in worse:
            lines.append("  %-36s %.4g -> %.4g %s (%s%s)" % (
                h["title"], h["a"], h["b"], h["unit"], h["direction"],
                ", %+.1f%%" % h["delta_pct"] if h["delta_pct"] is not None else ""))
    return "\n".join(lines)


def has_regressions(result):
    return result["tier"]["change"] == "worse" or bool(result["checks"]["regressions"]) or any(
        r["kind"] == "regression" for r in result["rows"])
