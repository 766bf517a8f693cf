"""Rating: check rows -> per-check scores -> category scores with coverage -> gates -> medallion tier, with the
rationale spelled out. Pure functions of the rows and reports/data/tiers.yml (judgement as data).

- A graded row scores status_scores[status] (pass 1, warn 0.5, fail 0); a skipped or error row is not graded: "no
  data" lowers coverage, never the score (an error caps the tier through the gate measurement_errors instead). A
  category whose judged checks all errored is "void": no score, but 0 for every tier's min_category_score.
- A check's score is the mean over its graded rows (every host, GPU, ... counts the same); its coverage is the share
  of its rows that were graded, host by host, averaged over hosts (a host that could not be measured has one skip row
  where the others have one row per GPU). Its weight is severity_weights[severity] x its rubric `weight`.
- A category's score (0-100) is the weighted mean of its graded checks; its coverage the weighted mean of its
  checks' coverage. A category is measured only when a check with an expectation was graded in it: an `artifact`
  check (`*_ran`: the probe ran) never scores a category on its own. Otherwise it is "not measured": score None,
  coverage 0, never a made-up number. A test not built yet (kind not_implemented) is a check never graded: it lowers
  its category's coverage.
- Analyst rows (an analyst file) rate only what no test can see: refused in a measured category; beside a mixed
  category's measured checks they add no coverage and count for at most the weight of the checks judged there.
- The overall score is the category-weighted mean over the measured categories; the overall coverage is the
  category-weighted mean of all rated categories' coverage (unmeasured ones count 0).
- The score tier is the first tier of tiers.yml whose requirements hold; triggered gates cap it; below
  min_coverage_to_rate the run is "Not rated", and below the profile a rating needs (reports/profiles.py) it is a
  "Screening": that tier is then only shown as provisional, never as a medallion.

ratings.json (schema clustermax.assess/ratings/v1) is assembled by `ratings_document`; docs/ratings.md documents
every field.
"""

import fnmatch
import os
from collections import Counter

from reports import DATA_DIR, yamlio
from reports.profiles import SCREENING, ran_text, rating_text, validate_profiles
from reports.shown import at_least, shown

RATINGS_SCHEMA = "clustermax.assess/ratings/v1"
ANALYST_SCHEMA = "clustermax.assess/analyst/v1"
NOT_RATED = "Not rated"
NOT_SHOWN = "not_shown"  # a gate's `missing` value: not showing it leaves the run unrated for the gate, uncapped
SCREENING_TIER = "Screening"
# Kinds the rating treats apart: an artifact check (one_host_artifact: of a probe run once for the cluster) only
# says that its probe ran (it judges nothing measured); a not_implemented check is a test of the seed's methodology
# this version does not run (data/not_implemented.yml).
RAN_ONLY_KINDS = ("artifact", "one_host_artifact")
NOT_IMPLEMENTED_KIND = "not_implemented"
STATUSES = ("pass", "warn", "fail", "error", "skip")
# Worst first: the status that stands for a check with mixed rows.
WORST_ORDER = ("fail", "error", "warn", "pass", "skip")
EVIDENCE = ("measured", "analyst", "mixed")
# An analyst item's `weight` when tiers.yml has no `analyst: {max_weight}` (a tiers file older than the key): a rubric
# check's default weight, so that an item weighs no more than a check of the same severity.
ANALYST_MAX_WEIGHT = 1.0


# ------------------------------------------------------------------------------------------------ inputs

def load_tiers(path=None):
    """tiers.yml, checked: a bad rating config must stop the build (exit 2), not give a quietly wrong tier."""
    path = path or os.path.join(DATA_DIR, "tiers.yml")
    with open(path, encoding="utf-8") as fh:
        tiers = yamlio.safe_load(fh) or {}
    problems = validate_tiers(tiers)
    if problems:
        raise ValueError("%s: %s" % (path, "; ".join(problems)))
    return tiers


def validate_tiers(tiers):
    problems = []
    names = [t.get("name") for t in tiers.get("tiers") or []]
    if not names or len(set(names)) != len(names):
        problems.append("tiers: need a list of uniquely named tiers")
    for reserved in (NOT_RATED, SCREENING_TIER):
        if reserved in names:
            problems.append("tiers: %r is reserved" % reserved)
    for key in ("status_scores", "severity_weights"):
        if not isinstance(tiers.get(key), dict):
            problems.append("%s: missing" % key)
    scores = tiers.get("status_scores") or {}
    if "skip" in scores:
        problems.append("status_scores: skip is never graded (it lowers coverage)")
    for status in scores:
        if status not in STATUSES:
            problems.append("status_scores: unknown status %r" % status)
    ids = [c.get("id") for c in tiers.get("categories") or []]
    if not ids or len(set(ids)) != len(ids):
        problems.append("categories: need a list of unique ids")
    for cat in tiers.get("categories") or []:
        if cat.get("evidence") not in EVIDENCE:
            problems.append("category %s: evidence must be one of %s" % (cat.get("id"), "/".join(EVIDENCE)))
        if not float(cat.get("weight", 0)) > 0:
            problems.append("category %s: weight must be > 0" % cat.get("id"))
    for t in tiers.get("tiers") or []:
        if "max_unmeasured" in t and not (isinstance(t["max_unmeasured"], int) and t["max_unmeasured"] >= 0):
            problems.append("tier %s: max_unmeasured must be a whole number >= 0" % t.get("name"))
    for gate in tiers.get("gates") or []:
        if gate.get("cap") not in names:
            problems.append("gate %s: cap %r is not a tier" % (gate.get("id"), gate.get("cap")))
        if not gate.get("select"):
            problems.append("gate %s: select is empty" % gate.get("id"))
        if gate.get("missing") not in (None, True, False, NOT_SHOWN):
            problems.append("gate %s: missing must be true, false or %s" % (gate.get("id"), NOT_SHOWN))
    if tiers.get("profiles"):
        problems.extend(validate_profiles(tiers["profiles"]))
    if "analyst" in tiers:
        max_weight = (tiers["analyst"] or {}).get("max_weight") if isinstance(tiers["analyst"], dict) else None
        if not _number(max_weight) or not max_weight >= 0:
            problems.append("analyst.max_weight: must be a number >= 0")
    return problems


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def analyst_max_weight(tiers):
    return float((tiers.get("analyst") or {}).get("max_weight", ANALYST_MAX_WEIGHT))


def load_analyst(path, tiers):
    """An analyst file (reports/data/analyst.example.yml shows the format), checked against tiers.yml.

    An analyst rates what no test on a cluster can see (pricing, partnerships, availability, the support experience):
    an item in a category whose evidence is `measured` is refused, not scored, and so is a weight outside
    0..tiers.yml's `analyst.max_weight` (a file in the run directory is read without being asked for: it must not be
    able to lift a run's tier over what was measured). Refused items go to doc["refused"] ({id, category, why}),
    which the rationale lists; the rest still rate, so an older file with one such item does not stop the build or a
    regrade. A file that is not an analyst file at all (schema, ids, statuses, unknown categories) is an error.
    In a mixed category category_scores bounds what the items count for."""
    with open(path, encoding="utf-8") as fh:
        doc = yamlio.safe_load(fh) or {}
    categories = {c["id"]: c["evidence"] for c in tiers["categories"]}
    max_weight = analyst_max_weight(tiers)
    problems, kept, refused = [], [], []
    if doc.get("schema") != ANALYST_SCHEMA:
        problems.append("schema must be %s" % ANALYST_SCHEMA)
    seen = set()
    for i, item in enumerate(doc.get("items") or []):
        where = "item %d (%s)" % (i + 1, item.get("id"))
        why = []
        if not item.get("id") or not item.get("title"):
            problems.append("%s: id and title are required" % where)
        if item.get("id") in seen:
            problems.append("%s: id given twice" % where)
        seen.add(item.get("id"))
        if item.get("category") not in categories:
            problems.append("%s: category %r is not a rated category" % (where, item.get("category")))
        elif categories[item["category"]] == "measured":
            why.append("category %s is measured on the cluster (tiers.yml evidence: measured); analyst input only "
                       "rates what cannot be measured" % item["category"])
        weight = item.get("weight", 1.0)
        if not _number(weight) or not 0 <= weight <= max_weight:
            why.append("weight %r must be a number from 0 to %g (tiers.yml analyst.max_weight)" % (weight, max_weight))
        if why:
            refused.append({"id": item.get("id"), "category": item.get("category"), "why": "; ".join(why)})
        else:
            kept.append(item)
        if item.get("status") not in ("pass", "warn", "fail", "skip"):
            problems.append("%s: status must be pass, warn, fail or skip" % where)
        if item.get("severity", "minor") not in tiers["severity_weights"]:
            problems.append("%s: unknown severity %r" % (where, item.get("severity")))
    if problems:
        raise ValueError("analyst file %s: %s" % (path, "; ".join(problems)))
    doc.update(path=os.path.abspath(path), items=kept, refused=refused)
    return doc


def analyst_rows(doc):
    """One check row per analyst item: host empty, evidence 'analyst', the analyst's source in the reason."""
    rows = []
    for item in (doc or {}).get("items") or []:
        note = "; ".join(str(x) for x in (item.get("note"), item.get("source")) if x)
        rows.append({
            "check_id": "analyst.%s" % item["id"], "category": item["category"],
            "title": "%s (analyst)" % item["title"], "host": "", "subject": "", "status": item["status"],
            "observed": str(item.get("observed", "")), "expected": str(item.get("expected", "")),
            "reason": "analyst input%s" % (": " + note if note else ""),
            "severity": item.get("severity", "minor"), "remediation": item.get("remediation", ""),
            "weight": float(item.get("weight", 1.0)), "evidence": "analyst",
        })
    return rows


# ------------------------------------------------------------------------------------------------ scoring

def check_summaries(rows, tiers):
    """One entry per check id, in first-seen order: counts per status, score (0-1 or None), coverage, weight."""
    status_scores = tiers["status_scores"]
    severity_weights = tiers["severity_weights"]
    by_id = {}
    for r in rows:
        s = by_id.get(r["check_id"])
        if s is None:
            weight = float(r.get("weight", 1.0) or 0.0)
            s = by_id[r["check_id"]] = {
                "check_id": r["check_id"], "category": r["category"], "title": r["title"],
                "severity": r["severity"], "evidence": r.get("evidence", "measured"), "kind": r.get("kind"),
                "weight": severity_weights.get(r["severity"], 1) * weight, "counts": Counter(), "_sum": 0.0,
                "_hosts": {}}
        status = r["status"]
        s["counts"][status] += 1
        per_host = s["_hosts"].setdefault(r["host"], [0, 0])
        per_host[0] += 1
        if status in status_scores:
            s["_sum"] += status_scores[status]
            per_host[1] += 1
    out = []
    for s in by_id.values():
        counts = s.pop("counts")
        total = sum(counts.values())
        graded = sum(n for st, n in counts.items() if st in status_scores)
        total_sum = s.pop("_sum")
        hosts = s.pop("_hosts")
        s["rows"] = total
        s["graded"] = graded
        s["counts"] = {st: counts.get(st, 0) for st in STATUSES}
        s["score"] = total_sum / graded if graded else None
        # Per host first: an unreachable host has one skip row where the others have one row per GPU.
        s["coverage"] = sum(g / n for n, g in hosts.values()) / len(hosts) if hosts else 0.0
        s["worst"] = next(st for st in WORST_ORDER if counts.get(st))
        out.append(s)
    return out


def _category_reason(cat, checks, analyst_given):
    added = _analyst_added(cat, checks)
    reason = _unmeasured_reason(cat, [s for s in checks if s["check_id"] not in added], analyst_given)
    graded = sum(1 for s in checks if s["graded"] and s["check_id"] in added)
    if graded:
        reason += "; the analyst's %d item(s) add to a measurement here, never stand in for one" % graded
    return reason


def _unmeasured_reason(cat, checks, analyst_given):
    if not checks:
        if cat["evidence"] == "analyst":
            return "analyst input absent" if not analyst_given else "no analyst item for this category"
        return "no check for this category in the rubric yet"
    ran_only = [s for s in checks if s["graded"]]
    if ran_only:
        return ("only 'probe ran' checks were graded (%d): nothing measured had an expectation that could be judged "
                "here" % len(ran_only))
    if all(s["kind"] == NOT_IMPLEMENTED_KIND for s in checks):
        return "not implemented in this version"
    return "every check was skipped (see their reasons)"


def _judged(summary):
    """A graded check with an expectation: what can make a category measured."""
    return summary["graded"] and summary["kind"] not in RAN_ONLY_KINDS


def _analyst_added(cat, checks):
    """Check ids of the analyst items that stand beside a category's measured checks: in a mixed category whose rubric
    has measured checks (in a measured one too, should rows reach rate() without load_analyst). They are shown and
    scored beside those checks, never in their place. In an analyst category, or a mixed one whose rubric has no
    measured check, the analyst's items are all the evidence there is and decide it."""
    analyst = {s["check_id"] for s in checks if s["evidence"] == "analyst"}
    if cat["evidence"] == "analyst" or (cat["evidence"] == "mixed" and len(analyst) == len(checks)):
        return set()
    return analyst


def analyst_weight(cat, checks):
    """(weight the analyst's graded items were given, weight they count for) in a category. Beside measured checks
    they count for at most the weight of the checks judged there: an analyst's word never outweighs what was measured
    (11 critical items of weight 400 made a run with 43 % coverage Platinum)."""
    added = _analyst_added(cat, checks)
    given = sum(s["weight"] for s in checks if s["graded"] and s["check_id"] in added)
    judged = sum(s["weight"] for s in checks if _judged(s) and s["check_id"] not in added)
    return given, min(given, judged)


def _category_checks(summaries, cat):
    return [s for s in summaries if s["category"] == cat["id"] and s["weight"] > 0]


def category_scores(summaries, tiers, analyst_given=False):
    """Every rated category of tiers.yml, in its order: score 0-100 or None ('not measured'), coverage 0-1."""
    out = []
    for cat in tiers["categories"]:
        checks = _category_checks(summaries, cat)
        added = _analyst_added(cat, checks)
        given, counted = analyst_weight(cat, checks)
        scale = counted / given if given else 1.0
        weight = {s["check_id"]: s["weight"] * (scale if s["check_id"] in added else 1.0) for s in checks}
        # Coverage is the measured part's: an analyst item beside measured checks covers nothing a test missed.
        covering = [s for s in checks if s["check_id"] not in added]
        total_w = sum(s["weight"] for s in covering)
        graded = [s for s in checks if s["graded"]]
        graded_w = sum(weight[s["check_id"]] for s in graded)
        counts = Counter()
        for s in checks:
            counts.update(s["counts"])
        # Measured only when a check with an expectation was graded; then every graded check counts.
        measured = any(_judged(s) for s in covering)
        # Void: nothing judged, but measurements were tried and errored. No made-up score, but no free pass either:
        # it counts as 0 for every tier's min_category_score (every judged row in error: a broken fabric whose
        # collectives all time out must not rate on the other categories alone).
        void = not measured and any(s["counts"]["error"] and s["kind"] not in RAN_ONLY_KINDS for s in checks)
        score = 100.0 * sum(weight[s["check_id"]] * s["score"] for s in graded) / graded_w if measured else None
        coverage = sum(s["weight"] * s["coverage"] for s in covering) / total_w if measured else 0.0
        entry = {
            "id": cat["id"], "title": cat.get("title", cat["id"]), "evidence": cat["evidence"],
            "weight": float(cat["weight"]),
            "score": score,
            "coverage": coverage,
            "status": "rated" if score is not None else "not measured",
            "checks": len(checks), "graded_checks": len(graded),
            "judged_checks": sum(1 for s in checks if _judged(s)),
            "ran_only_checks": sum(1 for s in graded if s["kind"] in RAN_ONLY_KINDS),
            "not_run_checks": sum(1 for s in checks if not s["graded"] and s["kind"] != NOT_IMPLEMENTED_KIND),
            "not_implemented": sum(1 for s in checks if s["kind"] == NOT_IMPLEMENTED_KIND),
            "counts": {st: counts.get(st, 0) for st in STATUSES},
            "evidence_used": sorted({s["evidence"] for s in graded}) if measured else [],
            "reason": None if score is not None else (
                "void: every measurement errored (%d error rows), nothing judged" % counts.get("error", 0) if void
                else _category_reason(cat, checks, analyst_given)),
            "void": void,
        }
        out.append(entry)
    return out


def _match(value, wanted):
    if wanted is None:
        return True
    wanted = wanted if isinstance(wanted, list) else [wanted]
    return any(fnmatch.fnmatchcase(str(value), str(w)) for w in wanted)


def _selected(row, select):
    return (_match(row["check_id"], select.get("check")) and _match(row["category"], select.get("category"))
            and _match(row["severity"], select.get("severity"))
            and _match(row.get("evidence", "measured"), select.get("evidence"))
            and _match(row.get("observed"), select.get("observed")))


def evaluate_gates(rows, tiers, max_evidence=10):
    """Each gate of tiers.yml: triggered or not, why, how many selected rows were graded, and its evidence (at most
    max_evidence rows): the rows that triggered it, or for a clear gate that needs a result shown (`missing`) the
    graded rows that showed it."""
    def evidence(selected):
        return [{k: r[k] for k in ("check_id", "host", "subject", "status", "observed", "expected")}
                for r in selected[:max_evidence]]

    # A gate selects by check, category, severity and evidence, which rows share by the thousand (a check on every
    # host): matched once per distinct combination, in row order (the evidence is the first rows), not per row
    # (fnmatch per row and gate was 5 s of a 1,000-node build).
    keys = {}
    row_key = [keys.setdefault((r["check_id"], r["category"], r["severity"], r.get("evidence", "measured")),
                               len(keys)) for r in rows]
    out = []
    for gate in tiers.get("gates") or []:
        select = gate["select"]
        statuses = set(gate.get("statuses") or [])
        hits, graded = [], []
        wanted = [False] * len(keys)
        for (check, category, severity, evidence_of), k in keys.items():
            wanted[k] = _selected({"check_id": check, "category": category, "severity": severity,
                                   "evidence": evidence_of, "observed": None}, dict(select, observed=None))
        for r, k in zip(rows, row_key):
            if not wanted[k] or ("observed" in select and not _match(r.get("observed"), select["observed"])):
                continue
            if r["status"] != "skip":
                graded.append(r)
            if r["status"] in statuses:
                hits.append(r)
        entry = {"id": gate["id"], "title": gate.get("title", gate["id"]), "cap": gate["cap"],
                 "why": gate.get("why", ""), "triggered": False, "reason": None, "graded": len(graded),
                 "shown": True, "evidence": evidence(graded) if gate.get("missing") else []}
        if hits:
            entry["triggered"] = True
            checks = sorted({r["check_id"] for r in hits})
            hosts = sorted({r["host"] for r in hits if r["host"]})
            entry["reason"] = "%s %s%s" % (", ".join(checks), "/".join(sorted({r["status"] for r in hits})),
                                           " on " + _names(hosts) if hosts else "")
            entry["evidence"] = evidence(hits)
        elif gate.get("missing") and not graded:
            # missing: true - not showing it caps like failing it; missing: not_shown - the gate is "not shown" and
            # the run is unrated for it: no cap, said in the tier line and the rationale.
            entry["reason"] = "not shown in this run: no graded result for %s" % _describe(select)
            if gate["missing"] == NOT_SHOWN:
                entry["shown"] = False
            else:
                entry["triggered"] = True
        out.append(entry)
    return out


def _names(items, limit=5):
    items = list(items)
    return ", ".join(items[:limit]) + (" and %d more" % (len(items) - limit) if len(items) > limit else "")


def _describe(select):
    parts = []
    for key in ("check", "category", "severity", "evidence", "observed"):
        if select.get(key) is not None:
            value = select[key]
            parts.append("%s %s" % (key, "/".join(value) if isinstance(value, list) else value))
    return ", ".join(parts)


def _percents(value, limit):
    """value and limit as percentages, with as many decimals as it takes to tell them apart (0.8458 against 0.85 read
    "coverage 85% < 85%")."""
    for digits in range(7):
        shown = ["%.*f%%" % (digits, 100 * x) for x in (value, limit)]
        if shown[0] != shown[1]:
            break
    return tuple(shown)


def untested(categories):
    """Ids of the rated categories a run left unmeasured although the rubric has tests for them there (their checks
    all skipped or errored, or only 'probe ran' checks graded): GPU nodes assessed on the CPU backend leave compute
    so, a phase left out its category. An analyst category, or one with no test built yet, is not counted."""
    return [c["id"] for c in categories if c["score"] is None and c["evidence"] != "analyst"
            and c["checks"] > c["not_implemented"]]


def _score_tier(score, lowest, coverage, tiers, unmeasured=(), coverage_text=None):
    """(tier entry, [(tier name, [unmet requirements])] for every better tier). unmeasured: untested()'s ids;
    coverage_text: the coverage as shown beside every coverage line (rate's shown["coverage"])."""
    not_reached = []
    for tier in tiers["tiers"]:
        unmet = []
        if tier.get("max_unmeasured") is not None and len(unmeasured) > tier["max_unmeasured"]:
            # a top tier needs every category with tests shown: coverage alone let GPU nodes assessed on the CPU
            # backend (compute never measured) rate Platinum at 98.7 %
            unmet.append("%d categor%s not measured (%s) > %d" % (len(unmeasured), "y" if len(unmeasured) == 1
                                                                   else "ies", ", ".join(unmeasured),
                                                                   tier["max_unmeasured"]))
        if tier.get("min_score") is not None and not at_least(score, tier["min_score"]):
            unmet.append("score %s < %g" % (shown(score, [tier["min_score"]]), tier["min_score"]))
        if tier.get("min_category_score") is not None and not at_least(lowest[1], tier["min_category_score"]):
            unmet.append("%s %s < %g" % (lowest[0], shown(lowest[1], [tier["min_category_score"]]),
                                         tier["min_category_score"]))
        if tier.get("min_coverage") is not None and not at_least(coverage, tier["min_coverage"]):
            value, limit = _percents(coverage, tier["min_coverage"])
            unmet.append("coverage %s < %s" % (coverage_text or value, limit))
        if not unmet:
            return tier, not_reached
        not_reached.append((tier["name"], unmet))
    return None, not_reached


def _requirements(tier):
    req = []
    if tier.get("min_score") is not None:
        req.append("score >= %g" % tier["min_score"])
    if tier.get("min_category_score") is not None:
        req.append("every measured category >= %g" % tier["min_category_score"])
    if tier.get("min_coverage") is not None:
        req.append("coverage >= %.0f%%" % (100 * tier["min_coverage"]))
    if tier.get("max_unmeasured") is not None:
        req.append("at most %d categor%s with tests not measured" % (tier["max_unmeasured"],
                                                                     "y" if tier["max_unmeasured"] == 1 else "ies"))
    return ", ".join(req) or "no requirement"


def rate(rows, tiers=None, analyst=None, profile=None):
    """The rating of a run from its check rows (analyst rows included) and, when given, the judgement of what it
    ran against the profile a rating needs (reports.profiles.assess; None: that rule is not applied). Returns a
    plain dict (JSON-ready)."""
    tiers = tiers or load_tiers()
    summaries = check_summaries(rows, tiers)
    analyst_given = bool(analyst and analyst.get("items"))
    categories = category_scores(summaries, tiers, analyst_given)
    rated_ids = {c["id"] for c in tiers["categories"]}
    supporting = {c["id"]: c for c in tiers.get("supporting_categories") or []}
    gates = evaluate_gates(rows, tiers)
    order = [t["name"] for t in tiers["tiers"]]

    measured = [c for c in categories if c["score"] is not None]
    total_w = sum(c["weight"] for c in categories)
    coverage = sum(c["weight"] * c["coverage"] for c in categories) / total_w if total_w else 0.0
    score = (sum(c["weight"] * c["score"] for c in measured) / sum(c["weight"] for c in measured)
             if measured else None)
    # how the numbers the tiers judge are shown: never on the other side of a tier's line than the exact number
    lines = {key: [t[key] for t in tiers["tiers"] if t.get(key) is not None]
             for key in ("min_score", "min_category_score", "min_coverage")}
    lines["min_coverage"].append(float(tiers.get("min_coverage_to_rate", 0)))
    for c in categories:
        c["score_shown"] = None if c["score"] is None else shown(c["score"], lines["min_category_score"])
    shown_numbers = {"score": None if score is None else shown(score, lines["min_score"]),
                     "coverage": shown(coverage, lines["min_coverage"], decimals=0, scale=100) + "%"}
    rationale = []
    tier = {"name": NOT_RATED, "rated": False, "medallion": False, "score_tier": None, "provisional": None,
            "capped_by": []}
    screening = profile is not None and profile["rating"] == SCREENING
    if profile is not None:
        rationale.append("Profile: %s declared; ran %s: %s." % (profile["declared"] or "none", ran_text(profile),
                                                                rating_text(profile)))
    if score is None:
        rationale.append("No rated category has a graded check: nothing to rate.")
    else:
        # a void category (every measurement errored) is the lowest, at 0, for min_category_score
        lowest = min([(c["id"], c["score"]) for c in measured] + [(c["id"], 0.0) for c in categories if c["void"]],
                     key=lambda x: x[1])
        rationale.append("Overall score %s/100 from %d of %d categories (weighted by tiers.yml); coverage %s "
                         "of the rubric's weight; lowest category: %s %s."
                         % (shown_numbers["score"], len(measured), len(categories), shown_numbers["coverage"],
                            lowest[0], shown(lowest[1], lines["min_category_score"])))
        score_tier, not_reached = _score_tier(score, lowest, coverage, tiers, untested(categories),
                                              shown_numbers["coverage"])
        for name, unmet in not_reached:
            rationale.append("Not %s: %s." % (name, "; ".join(unmet)))
        if score_tier is None:  # tiers.yml whose last tier still has requirements
            score_tier = tiers["tiers"][-1]
            rationale.append("No tier's requirements hold: the lowest tier, %s, applies." % score_tier["name"])
        else:
            rationale.append("Score tier: %s (%s)." % (score_tier["name"], _requirements(score_tier)))
        final = score_tier["name"]
        for gate in gates:
            if gate["triggered"]:
                rationale.append("Gate %s (%s): %s; caps the tier at %s." % (gate["id"], gate["title"],
                                                                              gate["reason"], gate["cap"]))
                if order.index(gate["cap"]) > order.index(final):
                    final = gate["cap"]
                    tier["capped_by"] = [gate["id"]]
                elif order.index(gate["cap"]) == order.index(final) and final != score_tier["name"]:
                    tier["capped_by"].append(gate["id"])
        for gate in gates:
            if not gate["shown"]:
                rationale.append("Gate %s (%s): %s; the run is unrated for this gate (no cap: a test not run is not "
                                 "a failure, and the tier says nothing about it)." % (gate["id"], gate["title"],
                                                                                       gate["reason"]))
        if any(not g["shown"] for g in gates):
            tier["not_shown"] = [g["id"] for g in gates if not g["shown"]]
        clear = [g["id"] for g in gates if not g["triggered"] and g["shown"]]
        if clear:
            rationale.append("Gates clear: %s." % ", ".join(clear))
        tier["score_tier"] = score_tier["name"]
        too_little = not at_least(coverage, float(tiers.get("min_coverage_to_rate", 0)))
        if too_little:
            rationale.append("%s: coverage %s is below the %s needed to rate; the measured part alone would give "
                             "%s." % ((NOT_RATED,) + _percents(coverage, tiers["min_coverage_to_rate"]) + (final,)))
        if screening:
            rationale.append("%s, not a rating: %s (a rating needs the %s profile). A screening is never a medallion; "
                             "the measured part alone would give %s." % (SCREENING_TIER, "; ".join(profile["lacks"]),
                                                                         profile["needed"], final))
        if too_little or screening:
            tier["provisional"] = final
        else:
            tier.update(name=final, rated=True,
                        medallion=bool(next(t for t in tiers["tiers"] if t["name"] == final).get("medallion")))
            rationale.append("Tier: %s%s%s." % (final, " (capped by %s)" % ", ".join(tier["capped_by"])
                                                if tier["capped_by"] else "",
                                                ", " + rating_text(profile) if profile else ""))
            if profile is not None and profile["next"]:
                rationale.append("Not a %s rating: %s." % (profile["next"]["profile"],
                                                          "; ".join(profile["next"]["lacks"])))
    if screening:
        tier["name"] = SCREENING_TIER
    unmeasured = [c for c in categories if c["score"] is None]
    if unmeasured:
        rationale.append("Not measured: %s." % "; ".join("%s (%s)" % (c["id"], c["reason"]) for c in unmeasured))
    if analyst_given:
        cats = sorted({i["category"] for i in analyst["items"]})
        rationale.append("Analyst input (%s, as of %s) decided %d item(s) in: %s." % (
            analyst.get("analyst", "analyst not named"), analyst.get("as_of", "date not given"),
            len(analyst["items"]), ", ".join(cats)))
        capped = []
        for cat in tiers["categories"]:
            given, counted = analyst_weight(cat, _category_checks(summaries, cat))
            if counted < given:
                capped.append("%s %g of %g" % (cat["id"], counted, given))
        if capped:
            rationale.append("Beside measured checks, analyst input counts for at most the weight of the checks "
                             "judged in its category, and adds no coverage: weight counted of given: %s."
                             % "; ".join(capped))
    if (analyst or {}).get("refused"):
        rationale.append("Analyst items refused, not scored (%s): %s." % (analyst.get("path"), "; ".join(
            "%s (%s): %s" % (r["id"], r["category"], r["why"]) for r in analyst["refused"])))
    unknown = sorted({s["category"] for s in summaries} - rated_ids - set(supporting))
    if unknown:
        rationale.append("Shown but not rated (category not in tiers.yml): %s." % ", ".join(unknown))
    return {
        "tier": tier,
        "profile": profile,
        "score": score,
        "coverage": coverage,
        "shown": shown_numbers,
        "categories": categories,
        "supporting": [{"id": cid, "title": spec.get("title", cid), "why": spec.get("why", ""),
                        "counts": _counts(summaries, cid)} for cid, spec in supporting.items()],
        "unrated_categories": unknown,
        "gates": gates,
        "rationale": rationale,
        "checks": summaries,
    }


def _counts(summaries, category):
    counts = Counter()
    for s in summaries:
        if s["category"] == category:
            counts.update(s["counts"])
    return {st: counts.get(st, 0) for st in STATUSES}


# ------------------------------------------------------------------------------------------------ outputs

def ratings_document(run, rows, rating, headline=None, inputs=None, analyst=None, generated_at=None):
    """ratings.json: the run, the inputs that judged it, the rating and the headline metrics (docs/ratings.md)."""
    from reports import __version__

    counts = Counter(r["status"] for r in rows)
    meta = run.meta
    return {
        "schema": RATINGS_SCHEMA,
        "generated_at": generated_at,
        "tool": {"name": "clustermax.assess", "version": __version__},
        "run": {
            "run_id": meta.get("run_id"), "provider": meta.get("provider"), "profile": meta.get("profile"),
            "started_at": meta.get("started_at"), "finished_at": meta.get("finished_at"),
            "interrupted": bool(meta.get("interrupted")), "hosts": len(run.hosts),
            "reachable": len(run.hosts) - len(run.unreachable), "unreachable": sorted(run.unreachable),
            "gpu_model": (headline or {}).get("gpu_model"), "gpu_model_key": (headline or {}).get("gpu_model_key"),
            "backend": (headline or {}).get("backend"),
        },
        "inputs": inputs or {},
        "analyst": {
            "provided": bool(analyst and analyst.get("items")),
            "file": (analyst or {}).get("path"), "analyst": (analyst or {}).get("analyst"),
            "as_of": (analyst or {}).get("as_of"), "provider": (analyst or {}).get("provider"),
            "items": len((analyst or {}).get("items") or []),
            "refused": list((analyst or {}).get("refused") or []),
        },
        "tier": rating["tier"],
        "profile": rating["profile"],
        "score": rating["score"],
        "coverage": rating["coverage"],
        "shown": rating["shown"],
        "categories": rating["categories"],
        "supporting": rating["supporting"],
        "unrated_categories": rating["unrated_categories"],
        "gates": rating["gates"],
        "rationale": rating["rationale"],
        "counts": {st: counts.get(st, 0) for st in STATUSES},
        "checks": rating["checks"],
        "headline": (headline or {}).get("metrics", []),
    }


def fmt_score(value):
    return "–" if value is None else "%.1f" % value


def category_score_text(c):
    """A category's score as the tiers judged it (rate's score_shown; a document of before it: plain)."""
    return c.get("score_shown") or fmt_score(c["score"])


def tier_line(doc):
    tier = doc["tier"]
    # the score and coverage as the tiers judged them (rate's "shown"; a document of before it: plain)
    numbers = doc.get("shown") or {"score": fmt_score(doc["score"]), "coverage": "%.0f%%" % (100 * doc["coverage"])}
    score, coverage = numbers["score"] or "–", numbers["coverage"]
    if tier["rated"]:
        text = "%s, score %s, coverage %s" % (tier["name"], score, coverage)
        if tier["capped_by"]:
            text += " (capped by %s; scores alone: %s)" % (", ".join(tier["capped_by"]), tier["score_tier"])
        if tier.get("not_shown"):
            text += " (unrated for: %s, not shown)" % ", ".join(tier["not_shown"])
        return text
    if tier["name"] == SCREENING_TIER:
        return "%s, not a rating (%s; provisional %s, score %s, coverage %s)" % (
            SCREENING_TIER, "; ".join(doc["profile"]["lacks"]), tier["provisional"] or "none", score, coverage)
    if tier["provisional"]:
        return "%s (coverage %s; provisional %s, score %s)" % (NOT_RATED, coverage, tier["provisional"], score)
    return "%s (nothing graded)" % NOT_RATED


def rating_table(doc, indent="  "):
    """Plain-text rating table for terminals (the callback prints it at the end of ansible-playbook)."""
    lines = ["%stier: %s" % (indent, tier_line(doc))]
    if doc.get("profile"):
        lines.append("%sprofile: %s declared; ran %s" % (indent, doc["profile"]["declared"] or "none",
                                                         ran_text(doc["profile"])))
    header = ("category", "evidence", "score", "coverage", "pass", "warn", "fail", "error", "skip")
    body = []
    for c in doc["categories"]:
        n = c["counts"]
        body.append((c["id"], c["evidence"], category_score_text(c) if c["score"] is not None else "not measured",
                     "%.0f%%" % (100 * c["coverage"]), n["pass"], n["warn"], n["fail"], n["error"], n["skip"]))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    for row in [header] + body:
        lines.append(indent + "  ".join(str(x).ljust(w) if i < 2 else str(x).rjust(w)
                                        for i, (x, w) in enumerate(zip(row, widths))).rstrip())
    for gate in doc["gates"]:
        if gate["triggered"]:
            lines.append("%sgate %s -> cap %s: %s" % (indent, gate["id"], gate["cap"], gate["reason"]))
        elif not gate.get("shown", True):
            lines.append("%sgate %s not shown (unrated for it): %s" % (indent, gate["id"], gate["reason"]))
    if doc.get("analyst", {}).get("provided"):
        lines.append("%sanalyst input: %s (%s items) - marked 'analyst' in every output" % (
            indent, doc["analyst"].get("file"), doc["analyst"].get("items")))
    return "\n".join(lines)
