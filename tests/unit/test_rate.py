"""Rating: per-check and category scores with coverage, tier thresholds and their boundaries, gates, analyst input,
and the golden synthetic runs (excellent -> Platinum, poor -> Underperforming, one critical flip -> capped)."""

import copy
import json

import pytest
from rating_runs import ANALYST_GOOD, ANALYST_POOR, RUBRIC, make_run, ratings

from reports.build import EXIT_FINDINGS, EXIT_OK, build
from reports.rate import (
    NOT_RATED,
    analyst_rows,
    category_scores,
    check_summaries,
    evaluate_gates,
    load_analyst,
    load_tiers,
    rate,
    validate_tiers,
)

SHIPPED = load_tiers()


def row(check_id, status, category=None, severity="major", host="n1", subject="", weight=1.0, evidence="measured",
        observed="", kind="metric"):
    return {"check_id": check_id, "category": category or check_id.split(".")[0], "title": check_id, "host": host,
            "subject": subject, "status": status, "observed": observed, "expected": "", "reason": "",
            "severity": severity, "remediation": "", "weight": weight, "evidence": evidence, "kind": kind}


def small_tiers(**over):
    """Two categories, weights 1 and 3; three tiers; one gate of each kind."""
    tiers = {
        "status_scores": {"pass": 1.0, "warn": 0.5, "fail": 0.0},  # as shipped: an error is not graded
        "severity_weights": {"critical": 5, "major": 3, "minor": 1, "info": 0},
        "min_coverage_to_rate": 0.5,
        "tiers": [{"name": "Top", "medallion": True, "min_score": 90, "min_category_score": 80, "min_coverage": 0.9},
                  {"name": "Mid", "medallion": True, "min_score": 60},
                  {"name": "Low", "medallion": False}],
        "categories": [{"id": "a", "title": "A", "evidence": "measured", "weight": 1},
                       {"id": "b", "title": "B", "evidence": "measured", "weight": 3}],
        "gates": [{"id": "crit", "select": {"category": "a", "severity": "critical"}, "statuses": ["fail"],
                   "cap": "Mid"},
                  {"id": "need", "select": {"check": "b.detect*"}, "statuses": ["fail", "error"], "missing": True,
                   "cap": "Low"}],
    }
    tiers.update(over)
    return tiers


# ------------------------------------------------------------------------------------------------ scores

def test_coverage_is_per_host_first():
    rows = [row("a.gpu", "pass", host="n1", subject="gpu=%d" % g) for g in range(8)] + [row("a.gpu", "skip", host="n2")]
    [s] = check_summaries(rows, small_tiers())
    assert s["coverage"] == 0.5 and s["score"] == 1.0


def test_check_summary_mean_over_graded_rows_and_coverage():
    rows = [row("a.x", "pass", host="n1"), row("a.x", "warn", host="n2"), row("a.x", "fail", host="n3"),
            row("a.x", "skip", host="n4")]
    [s] = check_summaries(rows, small_tiers())
    assert s["score"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert s["coverage"] == pytest.approx(0.75)
    assert s["counts"] == {"pass": 1, "warn": 1, "fail": 1, "error": 0, "skip": 1}
    assert s["worst"] == "fail" and s["weight"] == 3  # major x 1


def test_category_score_weights_checks_by_severity_and_weight():
    rows = [row("a.crit", "pass", severity="critical"),  # weight 5
            row("a.minor", "fail", severity="minor", weight=2.0),  # weight 1 x 2
            row("a.info", "fail", severity="info")]  # weight 0: shown, never scored
    cats = {c["id"]: c for c in category_scores(check_summaries(rows, small_tiers()), small_tiers())}
    assert cats["a"]["score"] == pytest.approx(100 * 5 / 7, abs=0.01)
    assert cats["a"]["coverage"] == 1.0 and cats["a"]["checks"] == 2
    assert cats["b"]["score"] is None and cats["b"]["status"] == "not measured" and cats["b"]["coverage"] == 0
    assert cats["b"]["reason"] == "no check for this category in the rubric yet"


def test_all_skipped_category_is_not_measured_never_a_score():
    rows = [row("b.detect", "skip"), row("b.other", "skip")]
    cats = {c["id"]: c for c in category_scores(check_summaries(rows, small_tiers()), small_tiers())}
    assert cats["b"]["score"] is None and cats["b"]["coverage"] == 0.0
    assert cats["b"]["reason"] == "every check was skipped (see their reasons)"


def test_partial_coverage_is_weighted_by_check():
    rows = [row("b.x", "pass", host="n1"), row("b.x", "skip", host="n2"),  # weight 3, coverage 0.5
            row("b.y", "pass", severity="minor")]  # weight 1, coverage 1
    cats = {c["id"]: c for c in category_scores(check_summaries(rows, small_tiers()), small_tiers())}
    assert cats["b"]["coverage"] == pytest.approx((3 * 0.5 + 1) / 4)
    assert cats["b"]["score"] == 100.0


@pytest.mark.parametrize("kind", ["artifact", "one_host_artifact"])
def test_a_probe_ran_check_never_measures_a_category_on_its_own(kind):
    """one_host_artifact is the probe-ran check of a probe run once for the cluster (monitoring.prometheus.ran,
    orchestration.slurm.ran): before, it was judged, and one API answering scored monitoring 100."""
    ran = [row("a.x_ran", "pass", kind=kind, host=h) for h in ("n1", "n2")]
    [a, _] = category_scores(check_summaries(ran, small_tiers()), small_tiers())
    assert a["score"] is None and a["status"] == "not measured" and a["coverage"] == 0.0
    assert a["reason"] == ("only 'probe ran' checks were graded (1): nothing measured had an expectation that could "
                           "be judged here")
    # with a judged check beside it, the category is measured and the ran check counts like any other
    [a, _] = category_scores(check_summaries(ran + [row("a.y", "fail")], small_tiers()), small_tiers())
    assert a["score"] == 50.0 and a["coverage"] == 1.0 and (a["judged_checks"], a["ran_only_checks"]) == (1, 1)


def test_a_test_not_implemented_lowers_coverage_never_the_score():
    rows = [row("a.x", "pass"), row("a.future", "skip", kind="not_implemented", severity="critical")]
    [a, b] = category_scores(check_summaries(rows, small_tiers()), small_tiers())
    assert a["score"] == 100.0 and a["coverage"] == pytest.approx(3 / 8) and a["not_implemented"] == 1
    future = [row("b.future", "skip", kind="not_implemented")]
    [_, b] = category_scores(check_summaries(future, small_tiers()), small_tiers())
    assert b["score"] is None and b["reason"] == "not implemented in this version"


# ------------------------------------------------------------------------------------------------ tiers

def rows_for(score_a, score_b, detect="pass"):
    """Category a scores score_a (passes and fails of one check over 100 hosts); b likewise, plus b.detect."""
    rows = []
    for i in range(100):
        rows.append(row("a.x", "pass" if i < score_a else "fail", host="h%d" % i))
        rows.append(row("b.x", "pass" if i < score_b else "fail", host="h%d" % i))
    rows.append(row("b.detect", detect, severity="info"))  # info: read by the gate, not scored
    return rows


@pytest.mark.parametrize("a,b,tier", [
    (90, 90, "Top"),  # exactly at every boundary: >= holds
    (80, 94, "Top"),  # overall 90.5, lowest category exactly 80
    (79, 94, "Mid"),  # lowest category 79 < 80
    (100, 86, "Mid"),  # overall 89.5 < 90
    (60, 60, "Mid"),  # exactly 60
    (59, 60, "Low"),  # 59.75 < 60
])
def test_tier_boundaries(a, b, tier):
    result = rate(rows_for(a, b), small_tiers())
    assert result["tier"]["name"] == tier and result["tier"]["rated"]
    assert result["tier"]["score_tier"] == tier and result["tier"]["capped_by"] == []


def test_tier_needs_coverage_and_rationale_names_what_was_missing():
    rows = rows_for(100, 100) + [row("a.y", "skip", severity="critical")]  # a: 3/8 of its weight graded
    result = rate(rows, small_tiers())
    assert result["coverage"] == pytest.approx((1 * 3 / 8 + 3 * 1) / 4, abs=1e-4)
    assert result["tier"]["name"] == "Mid"
    assert "Not Top: coverage 84% < 90%." in result["rationale"]
    assert "Score tier: Mid (score >= 60)." in result["rationale"]


def test_below_min_coverage_is_not_rated_with_a_provisional_tier():
    rows = [row("b.x", "pass"), row("b.detect", "pass", severity="info"), row("b.y", "skip", severity="critical")]
    result = rate(rows, small_tiers())  # coverage 3/(3+5) of b, a not measured: 0.28
    assert result["tier"]["name"] == NOT_RATED and not result["tier"]["rated"]
    assert result["tier"]["provisional"] == "Mid"  # score 100, coverage too low for Top
    assert result["score"] == 100.0
    assert any(line.startswith("Not rated: coverage 28%") for line in result["rationale"])
    assert any("a (no check for this category in the rubric yet)" in line for line in result["rationale"])


def test_nothing_graded_is_not_rated_without_provisional():
    result = rate([row("a.x", "skip")], small_tiers())
    assert result["tier"]["name"] == NOT_RATED and result["tier"]["provisional"] is None
    assert result["score"] is None and result["coverage"] == 0


def screening(lacks=("burn-in 60.2 s on n1 < 1 h",)):
    """A profile judgement as reports.profiles.judge gives it (measures left out: rate() reads rating and lacks)."""
    return {"declared": "quick", "needed": "standard", "rating": "screening", "lacks": list(lacks), "next": None,
            "measures": []}


def test_a_screening_is_never_a_medallion_whatever_the_scores():
    result = rate(rows_for(100, 100), small_tiers(), profile=screening())
    assert result["tier"] == {"name": "Screening", "rated": False, "medallion": False, "score_tier": "Top",
                              "provisional": "Top", "capped_by": []}
    assert ("Screening, not a rating: burn-in 60.2 s on n1 < 1 h (a rating needs the standard profile). A screening "
            "is never a medallion; the measured part alone would give Top.") in result["rationale"]
    rated = rate(rows_for(100, 100), small_tiers(), profile=dict(screening(()), rating="standard"))
    assert rated["tier"]["name"] == "Top" and rated["tier"]["medallion"]
    assert "Tier: Top, standard rating." in rated["rationale"]


def test_a_screening_with_too_little_coverage_says_both():
    rows = [row("b.x", "pass"), row("b.detect", "pass", severity="info"), row("b.y", "skip", severity="critical")]
    result = rate(rows, small_tiers(), profile=screening())
    assert result["tier"]["name"] == "Screening" and result["tier"]["provisional"] == "Mid"
    assert any(line.startswith("Not rated: coverage 28%") for line in result["rationale"])
    assert any(line.startswith("Screening, not a rating") for line in result["rationale"])


# ------------------------------------------------------------------------------------------------ gates

def test_gate_on_status_caps_and_is_explained():
    rows = rows_for(100, 100) + [row("a.crit", "pass", severity="critical", host="h%d" % i) for i in range(99)]
    rows.append(row("a.crit", "fail", severity="critical", host="h7", observed="1"))
    result = rate(rows, small_tiers())
    assert result["tier"]["score_tier"] == "Top"  # a = (3 x 1 + 5 x 0.99) / 8: one failing host barely moves it
    assert result["tier"]["name"] == "Mid" and result["tier"]["capped_by"] == ["crit"]
    crit = next(g for g in result["gates"] if g["id"] == "crit")
    assert crit["triggered"] and crit["reason"] == "a.crit fail on h7"
    assert crit["evidence"] == [{"check_id": "a.crit", "host": "h7", "subject": "", "status": "fail",
                                 "observed": "1", "expected": ""}]
    assert any(line.startswith("Gate crit") and "caps the tier at Mid" in line for line in result["rationale"])


def test_gate_when_missing_counts_skips_as_missing_and_the_worst_cap_wins():
    rows = rows_for(100, 100, detect="skip") + [row("a.crit", "fail", severity="critical")]
    result = rate(rows, small_tiers())
    need = next(g for g in result["gates"] if g["id"] == "need")
    assert need["triggered"] and need["reason"].startswith("not shown in this run")
    assert result["tier"]["name"] == "Low" and result["tier"]["capped_by"] == ["need"]


def test_gate_error_triggers_and_glob_selects():
    gates = evaluate_gates([row("b.detect_xid", "error")], small_tiers())
    assert {g["id"]: g["triggered"] for g in gates} == {"crit": False, "need": True}


def test_gate_never_raises_a_tier():
    tiers = small_tiers(gates=[{"id": "soft", "select": {"category": "a"}, "statuses": ["fail"], "cap": "Top"}])
    result = rate(rows_for(59, 60), tiers)
    assert result["tier"]["name"] == "Low" and result["tier"]["capped_by"] == []


# ------------------------------------------------------------------------------------------------ config, analyst

def test_shipped_tiers_are_valid_and_follow_the_seed():
    assert validate_tiers(SHIPPED) == []
    assert [t["name"] for t in SHIPPED["tiers"]] == ["Platinum", "Gold", "Silver", "Bronze", "Participation Ribbon",
                                                     "Underperforming"]
    assert {c["id"] for c in SHIPPED["categories"]} == {
        "security", "lifecycle", "orchestration", "storage", "networking", "reliability", "monitoring", "pricing",
        "partnerships", "availability", "compute"}
    assert {c["id"] for c in SHIPPED["categories"] if c["evidence"] == "analyst"} == {"pricing", "partnerships",
                                                                                     "availability"}
    gates = {g["id"]: g for g in SHIPPED["gates"]}
    assert gates["critical_security"]["cap"] == "Participation Ribbon"
    assert gates["failure_detection"]["missing"] == "not_shown" and gates["failure_detection"]["cap"] == "Silver"
    assert gates["no_health_check"]["cap"] == "Participation Ribbon"
    assert not next(t for t in SHIPPED["tiers"] if t["name"] == "Participation Ribbon")["medallion"]


def test_bad_tiers_are_refused(tmp_path):
    bad = copy.deepcopy(SHIPPED)
    bad["gates"][0]["cap"] = "Diamond"
    bad["categories"][0]["evidence"] = "rumour"
    bad["status_scores"]["skip"] = 0
    bad["profiles"]["needed"] = "deluxe"
    bad["profiles"]["minimums"]["standard"]["soak_hours"] = 1
    problems = validate_tiers(bad)
    assert any("profiles.needed: 'deluxe' is not in profiles.order" in p for p in problems)
    assert any("profiles.minimums.standard: 'soak_hours' is not a measure" in p for p in problems)
    assert any("cap 'Diamond' is not a tier" in p for p in problems)
    assert any("evidence must be" in p for p in problems)
    assert any("skip is never graded" in p for p in problems)
    path = tmp_path / "tiers.yml"
    path.write_text(json.dumps(bad))
    with pytest.raises(ValueError, match="Diamond"):
        load_tiers(str(path))


def test_analyst_file_becomes_marked_rows(tmp_path):
    doc = load_analyst(ANALYST_GOOD, SHIPPED)
    rows = analyst_rows(doc)
    assert {r["check_id"] for r in rows} == {"analyst.pricing.rate", "analyst.partnerships.oem",
                                             "analyst.availability.delivery", "analyst.lifecycle.support"}
    assert all(r["evidence"] == "analyst" and r["host"] == "" and r["title"].endswith("(analyst)") for r in rows)
    assert next(r for r in rows if r["check_id"] == "analyst.pricing.rate")["reason"] == "analyst input: price sheet"
    bad = tmp_path / "analyst.yml"
    bad.write_text("schema: clustermax.assess/analyst/v1\nitems:\n  - {id: x, title: X, category: vibes, "
                   "status: great}\n")
    with pytest.raises(ValueError, match="'vibes' is not a rated category.*status must be"):
        load_analyst(str(bad), SHIPPED)


def test_shipped_analyst_example_is_valid():
    from reports.rate import DATA_DIR

    doc = load_analyst(DATA_DIR + "/analyst.example.yml", SHIPPED)
    assert {i["category"] for i in doc["items"]} >= {"pricing", "partnerships", "availability", "lifecycle"}


# ------------------------------------------------------------------------------------------------ golden runs

def build_golden(tmp_path, quality="excellent", analyst=ANALYST_GOOD, **kw):
    run_dir = make_run(tmp_path, quality, **kw)
    text, code, report_dir = build(run_dir, rubric=RUBRIC, analyst=analyst, progress=False)
    return ratings(report_dir), code, text


def test_golden_excellent_cluster_is_platinum(tmp_path):
    doc, code, text = build_golden(tmp_path)
    assert doc["tier"] == {"name": "Platinum", "rated": True, "medallion": True, "score_tier": "Platinum",
                           "provisional": None, "capped_by": []}
    assert doc["score"] == 100.0 and doc["coverage"] == 1.0 and code == EXIT_OK
    assert all(c["status"] == "rated" for c in doc["categories"])
    assert "tier: Platinum, score 100.0, coverage 100%" in text


def test_golden_poor_cluster_is_underperforming(tmp_path):
    doc, code, _ = build_golden(tmp_path, "poor", ANALYST_POOR)
    assert doc["tier"]["name"] == "Underperforming" and doc["tier"]["score_tier"] == "Underperforming"
    assert doc["score"] < 45 and code == EXIT_FINDINGS
    triggered = {g["id"] for g in doc["gates"] if g["triggered"]}
    assert triggered == {"critical_security", "failure_detection"}


def test_one_critical_security_failure_caps_an_excellent_cluster(tmp_path):
    doc, code, _ = build_golden(tmp_path, host_overrides={"gn2": {"ssh_password_auth": 1}})
    assert doc["tier"]["score_tier"] == "Platinum"  # the scores alone would still say Platinum
    assert doc["tier"]["name"] == "Participation Ribbon" and doc["tier"]["capped_by"] == ["critical_security"]
    gate = next(g for g in doc["gates"] if g["id"] == "critical_security")
    assert gate["reason"] == "security.ssh_password_auth fail on gn2"
    assert code == EXIT_FINDINGS


@pytest.mark.parametrize("kw,reason", [
    ({"host_overrides": {"gn3": {"detect_seconds": 150}}}, "reliability.failure_detection warn on gn3"),
    ({"host_overrides": {"gn3": {"detect_seconds": 700}}}, "reliability.failure_detection fail on gn3"),
])
def test_slow_failure_detection_caps_at_silver(tmp_path, kw, reason):
    doc, _, _ = build_golden(tmp_path, **kw)
    assert doc["tier"]["name"] == "Silver" and doc["tier"]["capped_by"] == ["failure_detection"]
    assert next(g for g in doc["gates"] if g["id"] == "failure_detection")["reason"] == reason


def test_failure_detection_not_tested_is_not_shown_and_uncapped(tmp_path):
    doc, _, text = build_golden(tmp_path, drop=("detect_seconds",))
    gate = next(g for g in doc["gates"] if g["id"] == "failure_detection")
    assert not gate["triggered"] and not gate["shown"]
    assert gate["reason"] == "not shown in this run: no graded result for check reliability.failure_detection"
    # no cap from the gate; but reliability has no other test in this rubric, so it was not measured at all, and
    # the top tier needs every category with tests measured (tiers.yml max_unmeasured)
    assert doc["tier"]["name"] == "Gold" and doc["tier"]["capped_by"] == []
    assert "Not Platinum: 1 category not measured (reliability) > 0." in doc["rationale"]
    assert doc["tier"]["not_shown"] == ["failure_detection"]
    assert "(unrated for: failure_detection, not shown)" in text
    assert any(line.startswith("Gate failure_detection") and "unrated for this gate" in line
               for line in doc["rationale"])


def test_gpu_nodes_assessed_on_the_cpu_backend_are_not_platinum(tmp_path):
    """The golden excellent cluster with its GEMM artifacts on the CPU backend (gpu_compute_backend=cpu on H100
    nodes): the compute rows skip ("backend=cpu"), so compute is not measured. Before, only coverage dropped and the
    run stayed Platinum; now the top tier needs every category with tests measured, and one may be missing at Gold."""
    doc, _, _ = build_golden(tmp_path)
    assert doc["tier"]["name"] == "Platinum"
    doc = build_golden(tmp_path / "cpu", cpu_compute=True)[0]
    cats = {c["id"]: c for c in doc["categories"]}
    assert cats["compute"]["score"] is None and cats["compute"]["checks"] > 0
    assert doc["tier"]["score_tier"] == "Gold" and doc["tier"]["name"] == "Gold"
    assert "Not Platinum: 1 category not measured (compute) > 0." in doc["rationale"]
    bad = copy.deepcopy(SHIPPED)
    bad["tiers"][0]["max_unmeasured"] = -1
    assert validate_tiers(bad) == ["tier Platinum: max_unmeasured must be a whole number >= 0"]


def test_gate_missing_must_be_known(tmp_path):
    bad = copy.deepcopy(SHIPPED)
    next(g for g in bad["gates"] if g["id"] == "failure_detection")["missing"] = "maybe"
    assert validate_tiers(bad) == ["gate failure_detection: missing must be true, false or not_shown"]


def test_unreachable_node_lowers_coverage_and_caps_at_gold(tmp_path):
    doc, code, _ = build_golden(tmp_path, hosts=8, unreachable=("gn8",))
    # every measured check covers 7 of 8 hosts; the analyst's support item adds no coverage beside lifecycle's checks
    assert doc["coverage"] == pytest.approx((17 * 7 / 8 + 4) / 21, abs=1e-4)
    assert doc["tier"]["score_tier"] == "Platinum"
    assert doc["tier"]["name"] == "Gold" and doc["tier"]["capped_by"] == ["unassessed_nodes"]
    assert code == EXIT_FINDINGS


def test_without_analyst_input_those_categories_are_not_measured(tmp_path):
    doc, _, _ = build_golden(tmp_path, analyst=None)
    cats = {c["id"]: c for c in doc["categories"]}
    for cid in ("pricing", "partnerships", "availability"):
        assert cats[cid]["score"] is None and cats[cid]["reason"] == "analyst input absent"
    assert cats["lifecycle"]["evidence_used"] == ["measured"]
    assert doc["coverage"] == pytest.approx(17 / 21, abs=1e-4)  # 4 of 21 category weight is analyst-only
    assert doc["tier"]["name"] == "Gold"  # Platinum needs 85 % coverage
    assert "Not Platinum: coverage 81% < 85%." in doc["rationale"]
    assert doc["analyst"]["provided"] is False


def test_regrade_with_another_tiers_file_changes_only_the_rating(tmp_path):
    run_dir = make_run(tmp_path, "excellent")
    strict = copy.deepcopy(SHIPPED)
    strict["tiers"][0]["min_coverage"] = 1.01  # Platinum out of reach
    path = tmp_path / "strict.yml"
    path.write_text(json.dumps(strict))
    _, _, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, tiers=str(path), progress=False)
    doc = ratings(report_dir)
    assert doc["tier"]["name"] == "Gold" and doc["score"] == 100.0
    assert doc["inputs"]["tiers"]["path"] == str(path)


def _fault_probe(run_dir, host, probe, reason):
    """The error artifact the probe action writes when a probe faulted on the node (plugins/action/probe.py)."""
    from probes.artifact import Artifact, write_json_atomic

    art = Artifact(probe, run_dir.name, host)
    art.error(reason)
    write_json_atomic(str(run_dir / "artifacts" / host / ("%s.json" % probe)), art.to_dict())


def test_an_error_is_no_data_not_a_measured_zero_it_lowers_coverage_and_caps_at_gold(tmp_path):
    """Issue 25: one probe faulting on one host (a full /tmp) used to score its rows 0 and sink the category it
    feeds; an error now scores nothing, lowers coverage and caps the tier at Gold (gate measurement_errors)."""
    run_dir = make_run(tmp_path, "excellent")
    _fault_probe(run_dir, "gn2", "golden_gemm",
                 "probe golden_gemm did not run on gn2: rc=1 [Errno 28] No space left on device")
    text, code, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    doc = ratings(report_dir)
    compute = next(c for c in doc["categories"] if c["id"] == "compute")
    # GEMM and straggler rows of gn2 are errors; the three hosts measured still score 100 (the errors used to be
    # skipped as "backend=cpu"); the fourth host is not covered
    assert compute["counts"]["error"] == 2 and compute["score"] == 100.0 and compute["coverage"] == 0.75
    assert doc["score"] == 100.0 and doc["coverage"] < 1.0
    assert doc["tier"]["score_tier"] == "Platinum"
    assert doc["tier"]["name"] == "Gold" and doc["tier"]["capped_by"] == ["measurement_errors"]
    gate = next(g for g in doc["gates"] if g["id"] == "measurement_errors")
    assert gate["reason"].endswith("error on gn2")
    assert code == EXIT_FINDINGS


def test_a_category_whose_only_judged_rows_are_errors_is_void_never_a_measured_0():
    rows = [row("a.x", "error", category="a"), row("a.x", "error", category="a", host="n2")]
    [cat] = [c for c in category_scores(check_summaries(rows, SHIPPED), small_tiers()) if c["id"] == "a"]
    assert cat["score"] is None and cat["status"] == "not measured" and cat["coverage"] == 0.0
    assert cat["void"] and cat["reason"] == "void: every measurement errored (2 error rows), nothing judged"


def test_a_void_category_keeps_an_otherwise_perfect_run_below_the_medallions():
    """Review finding: with every networking row in error (a fabric whose collectives all time out) the run rated
    Gold on the other categories alone; a void category now counts 0 for min_category_score."""
    tiers = small_tiers(
        tiers=[{"name": "Top", "medallion": True, "min_score": 90, "min_category_score": 80},
               {"name": "Mid", "medallion": True, "min_score": 60, "min_category_score": 30},
               {"name": "Low", "medallion": False}],
        categories=[{"id": "a", "title": "A", "evidence": "measured", "weight": 3},
                    {"id": "b", "title": "B", "evidence": "measured", "weight": 1}],
        gates=[])
    measured = [row("a.x", "pass", category="a"), row("b.y", "pass", category="b")]
    assert rate(measured, tiers)["tier"]["name"] == "Top"
    void_b = [row("a.x", "pass", category="a"), row("b.y", "error", category="b"),
              row("b.y", "error", category="b", host="n2")]
    doc = rate(void_b, tiers)
    assert doc["score"] == 100.0 and doc["coverage"] == 0.75  # the errors are no measured 0, only lost coverage
    assert doc["tier"]["name"] == "Low"  # but b counts 0 for min_category_score: no medallion
    assert "Not Mid: b 0.0 < 30." in doc["rationale"], doc["rationale"]


def test_a_node_that_dropped_out_at_preflight_is_unassessed_and_caps_at_gold(tmp_path):
    """Issue 25: a reachable node whose preflight failed (here its node inventory: the Python it was given is not
    there) left the run before any phase; it was 'reachable', so the unassessed-nodes gate never triggered."""
    run_dir = make_run(tmp_path, "excellent")
    for probe in ("golden", "golden_gemm", "node_info"):
        (run_dir / "artifacts" / "gn3" / ("%s.json" % probe)).unlink()
    with open(run_dir / "journal.jsonl", "a") as fh:
        fh.write(json.dumps({"host": "gn3", "status": "failed", "probe": "node_info",
                             "task": "clustermax.assess.preflight : Preflight | find Python, take the run lock, "
                                     "stage the probes, node inventory",
                             "msg": "probe node_info did not run on gn3: rc=127 sh: 1: python3: not found"}) + "\n")
    text, code, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    doc = ratings(report_dir)
    gate = next(g for g in doc["gates"] if g["id"] == "unassessed_nodes")
    assert gate["triggered"] and gate["reason"] == "preflight.prepared, preflight.tasks fail on gn3"
    # a quarter of the hosts unmeasured already keeps the scores below Platinum's coverage; the gate holds it at Gold
    assert doc["tier"]["name"] == "Gold" and doc["coverage"] < 0.85
    assert code == EXIT_FINDINGS


def test_a_node_that_dropped_out_after_preflight_is_unassessed_and_caps_at_gold(tmp_path):
    """A node whose tools step failed left the play there: every later check on it is a 'not run' skip, which only
    lowers coverage (16 hosts: still above Platinum's). Before, no gate saw it and the run rated Platinum."""
    run_dir = make_run(tmp_path, "excellent", hosts=16)
    for probe in ("golden", "golden_gemm"):  # its preflight went through (node_info is there)
        (run_dir / "artifacts" / "gn16" / ("%s.json" % probe)).unlink()
    with open(run_dir / "journal.jsonl", "a") as fh:
        fh.write(json.dumps({"host": "gn16", "status": "failed",
                             "task": "clustermax.assess.tools : Tools | make the probe venv (torch matched to the "
                                     "node)",
                             "msg": "non-zero return code"}) + "\n")
    text, code, report_dir = build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    doc = ratings(report_dir)
    gate = next(g for g in doc["gates"] if g["id"] == "unassessed_nodes")
    assert gate["triggered"] and gate["reason"] == "preflight.tasks fail on gn16"
    assert doc["coverage"] >= 0.85 and doc["tier"]["score_tier"] == "Platinum"
    assert doc["tier"]["name"] == "Gold" and doc["tier"]["capped_by"] == ["unassessed_nodes"]
    assert code == EXIT_FINDINGS


def test_a_category_just_under_its_floor_is_judged_exact_and_shown_so():
    """Category a: a major check on 19 hosts (17 pass, 2 fail) and a minor one on 32 (16 pass, 1 warn, 15 fail):
    exactly 79.9959, under Top's category floor of 80. The score was rounded to 80.0 before the comparison, and the
    run rated Top."""
    rows = [row("a.x", "pass" if i < 17 else "fail", host="h%d" % i) for i in range(19)]
    rows += [row("a.y", "pass" if i < 16 else "warn" if i == 16 else "fail", severity="minor", host="h%d" % i)
             for i in range(32)]
    rows += [row("b.x", "pass", host="h%d" % i) for i in range(32)] + [row("b.detect", "pass", severity="info")]
    result = rate(rows, small_tiers())
    [a] = [c for c in result["categories"] if c["id"] == "a"]
    assert a["score"] == pytest.approx(100 * 3891 / 4864) and a["score"] < 80
    assert result["tier"]["name"] == "Mid"
    assert "Not Top: a 79.996 < 80." in result["rationale"]
    assert a["score_shown"] == "79.996"


def test_a_coverage_just_under_the_line_to_rate_is_not_shown_on_it():
    """Coverage 49.925 % against min_coverage_to_rate 50 %: every place it is shown says 49.9 %, never 50 %."""
    rows = [row("a.x", "pass", host="h%d" % i) for i in range(1000)]
    rows += [row("b.x", "pass" if i < 997 else "skip", host="h%d" % i) for i in range(1000)]
    rows += [row("b.y", "skip", severity="critical", host="h%d" % i) for i in range(1000)]
    rows += [row("b.z", "skip", severity="minor", host="h%d" % i) for i in range(1000)]
    rows.append(row("b.detect", "pass", severity="info"))
    result = rate(rows, small_tiers())
    assert result["coverage"] == pytest.approx(0.49925) and result["tier"]["name"] == NOT_RATED
    assert result["shown"]["coverage"] == "49.9%"
    from reports.rate import tier_line
    assert "coverage 49.9%" in tier_line(result)
    assert any("coverage 49.9% of the rubric's weight" in line for line in result["rationale"])


@pytest.mark.parametrize("value, lines, kwargs, text", [
    (89.99905, [90, 80], {}, "89.999"),        # overall score under Platinum's 90
    (74.995, [75], {}, "74.995"),
    (120.04, [120], {}, "120.04"),             # a detection past the 120 s limit
    (0.5952, [0.6], {"decimals": 0, "scale": 100}, "59.5"),
    (60.0, [60], {}, "60.0"),                  # on the line: shown on it
    (59.99999999999997, [60], {}, "60.0"),     # a weighted mean's float noise is on the line
    (97.61904761904762, [90, 80], {}, "97.6"),  # far from every line: the decimals asked for
])
def test_a_shown_number_is_on_the_side_of_each_line_the_exact_one_is(value, lines, kwargs, text):
    from reports.shown import shown
    assert shown(value, lines, **kwargs) == text


@pytest.mark.parametrize("value, lines, significant, text", [
    (99.96, [100, 500], 3, "99.96"),           # IOR write under its 100 MiB/s floor: not "100"
    (0.04996, [0.05, 0.5], 3, "0.04996"),      # a checkpoint save under its 0.05 GB/s floor: not "0.05"
    (69.96, [70, 85], 3, "69.96"),             # a scaling efficiency under its 70 % line
    (0.5, [0.05, 0.5], 3, "0.5"),              # on the line: shown on it, as %g shows it
    (99.96, [], 3, "100"),                     # no line: the significant digits asked for
    (12.34, [100, 500], 3, "12.3"),            # far from every line: the same
])
def test_a_number_shown_with_significant_digits_keeps_its_side_of_each_line(value, lines, significant, text):
    """The tables' format (reports/render/markdown.fmt: 3 significant digits under 100) by the same rule as the
    decimals: more digits only where fewer would cross a line or land on it."""
    from reports.shown import shown
    assert shown(value, lines, significant=significant) == text
