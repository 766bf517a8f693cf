"""What an analyst file may decide (review finding: 11 items of weight 400, one per category, in RUN_DIR/analyst.yml
made a run of 43 % coverage Platinum): nothing in a category measured on the cluster, a weight within tiers.yml's
analyst.max_weight, and beside measured checks (a mixed category) no coverage and no more weight than the checks
judged there. And the rationale's percentages tell a coverage just under a threshold from the threshold."""

import copy
import shutil
from pathlib import Path

import pytest
import yaml
from rating_runs import ANALYST_GOOD, ANALYST_POOR, RUBRIC, make_run

from reports import DATA_DIR
from reports.build import evaluate
from reports.rate import analyst_rows, load_analyst, load_tiers, rate, validate_tiers

SHIPPED = load_tiers()
EVIDENCE = {c["id"]: c["evidence"] for c in SHIPPED["categories"]}
MEASURED = sorted(cid for cid, evidence in EVIDENCE.items() if evidence == "measured")
MIXED = sorted(cid for cid, evidence in EVIDENCE.items() if evidence == "mixed")
MAX_WEIGHT = SHIPPED["analyst"]["max_weight"]


def write_analyst(path, items):
    path.write_text(yaml.safe_dump({"schema": "clustermax.assess/analyst/v1", "analyst": "T. Analyst",
                                    "as_of": "2026-12-01", "items": items}))
    return str(path)


def item(category, status="pass", severity="critical", **kw):
    return dict({"id": "%s.review" % category, "category": category, "title": "%s reviewed" % category,
                 "status": status, "severity": severity}, **kw)


def row(check_id, status, host="n1", severity="minor"):
    return {"check_id": check_id, "category": check_id.split(".")[0], "title": check_id, "host": host,
            "subject": "", "status": status, "observed": "", "expected": "", "reason": "", "severity": severity,
            "remediation": "", "weight": 1.0, "evidence": "measured", "kind": "metric"}


def category(result, cid):
    return next(c for c in result["categories"] if c["id"] == cid)


# ------------------------------------------------------------------------------------------------ the file

def test_shipped_and_fixture_analyst_files_follow_the_rule():
    for path in (str(Path(DATA_DIR) / "analyst.example.yml"), ANALYST_GOOD, ANALYST_POOR):
        doc = load_analyst(path, SHIPPED)
        assert all(EVIDENCE[i["category"]] != "measured" for i in doc["items"]), path


def test_an_analyst_item_in_a_measured_category_is_refused(tmp_path):
    path = write_analyst(tmp_path / "analyst.yml", [item("pricing", weight=MAX_WEIGHT), item(MEASURED[0])])
    doc = load_analyst(path, SHIPPED)
    assert [i["id"] for i in doc["items"]] == ["pricing.review"]  # the analyst category's item is fine
    assert doc["refused"] == [{"id": "%s.review" % MEASURED[0], "category": MEASURED[0], "why": (
        "category %s is measured on the cluster (tiers.yml evidence: measured); analyst input only rates what "
        "cannot be measured" % MEASURED[0])}]


@pytest.mark.parametrize("weight", [MAX_WEIGHT + 1, 400, -1, "heavy", True])
def test_an_analyst_weight_outside_0_to_max_weight_is_refused(tmp_path, weight):
    path = write_analyst(tmp_path / "analyst.yml", [item("pricing", weight=weight)])
    doc = load_analyst(path, SHIPPED)
    assert doc["items"] == [] and len(doc["refused"]) == 1
    assert doc["refused"][0]["why"] == "weight %r must be a number from 0 to %g (tiers.yml analyst.max_weight)" % (
        weight, MAX_WEIGHT)


def test_a_file_that_is_no_analyst_file_is_an_error(tmp_path):
    path = write_analyst(tmp_path / "analyst.yml", [item("pricing", status="great")])
    with pytest.raises(ValueError, match=r"item 1 \(pricing.review\): status must be pass, warn, fail or skip"):
        load_analyst(path, SHIPPED)


def test_analyst_max_weight_is_data(tmp_path):
    path = write_analyst(tmp_path / "analyst.yml", [item("pricing", weight=MAX_WEIGHT + 1)])
    looser = copy.deepcopy(SHIPPED)
    looser["analyst"]["max_weight"] = MAX_WEIGHT + 1
    assert validate_tiers(looser) == []
    assert load_analyst(path, looser)["items"][0]["weight"] == MAX_WEIGHT + 1
    looser["analyst"]["max_weight"] = -1
    assert validate_tiers(looser) == ["analyst.max_weight: must be a number >= 0"]


def test_the_reviewed_run_dir_analyst_file_is_refused_by_the_build(tmp_path):
    """The review's file, picked up from the run directory without --analyst (11 items of weight 400, one per
    category): every item is refused and the rationale names each; the run rates on what was measured, as without
    the file. Before, it made a run of 43 % coverage Platinum; refusing the whole file instead stopped the build and
    every regrade of a stored run holding one such item."""
    run_dir = make_run(tmp_path, "poor")
    _, _, plain = evaluate(str(run_dir), rubric=RUBRIC)
    write_analyst(run_dir / "analyst.yml", [item(cid, weight=400) for cid in EVIDENCE])
    _, _, doc = evaluate(str(run_dir), rubric=RUBRIC)
    assert doc["analyst"]["items"] == 0 and len(doc["analyst"]["refused"]) == len(EVIDENCE)
    assert (doc["tier"], doc["score"], doc["coverage"]) == (plain["tier"], plain["score"], plain["coverage"])
    [line] = [r for r in doc["rationale"] if r.startswith("Analyst items refused, not scored")]
    for cid in MEASURED:
        assert "%s.review (%s): category %s is measured on the cluster" % (cid, cid, cid) in line
    assert line.count("weight 400 must be a number from 0 to") == len(EVIDENCE)


# ------------------------------------------------------------------------------------------------ mixed categories

def analyst_doc(tmp_path, *items):
    return load_analyst(write_analyst(tmp_path / "analyst.yml", list(items)), SHIPPED)


def test_analyst_items_in_a_mixed_category_add_no_coverage_and_never_outweigh_the_measurement(tmp_path):
    cid = MIXED[0]
    measured = [row("%s.x" % cid, "pass", host="n1"), row("%s.x" % cid, "skip", host="n2")]  # minor, half covered
    doc = analyst_doc(tmp_path, item(cid, status="fail", severity="critical", weight=MAX_WEIGHT))
    alone = category(rate(measured, SHIPPED), cid)
    result = rate(measured + analyst_rows(doc), SHIPPED, doc)
    cat = category(result, cid)
    assert cat["coverage"] == alone["coverage"] < 1  # the analyst's graded item covers nothing a test missed
    # a critical item outweighs the minor check five to one; it counts as much as the check: the mean of 1 and 0
    assert cat["score"] == pytest.approx(50.0)
    assert cat["evidence_used"] == ["analyst", "measured"]
    assert any(line.startswith("Beside measured checks, analyst input counts for at most the weight")
               and "%s 1 of 5" % cid in line for line in result["rationale"])


def test_an_analyst_item_never_stands_in_for_a_mixed_category_that_was_not_measured(tmp_path):
    cid = MIXED[0]
    doc = analyst_doc(tmp_path, item(cid, weight=MAX_WEIGHT))
    result = rate([row("%s.x" % cid, "skip")] + analyst_rows(doc), SHIPPED, doc)
    cat = category(result, cid)
    assert cat["score"] is None and cat["coverage"] == 0.0 and cat["status"] == "not measured"
    assert cat["reason"] == ("every check was skipped (see their reasons); the analyst's 1 item(s) add to a "
                             "measurement here, never stand in for one")


def test_a_mixed_category_whose_rubric_has_no_measured_check_is_the_analysts(tmp_path):
    """No measured part to outweigh or cover (a rubric that leaves the category's checks out): the items decide it, as
    in an analyst category."""
    cid = MIXED[0]
    doc = analyst_doc(tmp_path, item(cid, status="warn", weight=MAX_WEIGHT))
    cat = category(rate(analyst_rows(doc), SHIPPED, doc), cid)
    assert cat["score"] == pytest.approx(100 * SHIPPED["status_scores"]["warn"]) and cat["coverage"] == 1.0
    assert cat["evidence_used"] == ["analyst"]


def test_in_an_analyst_category_the_items_still_decide(tmp_path):
    cid = next(c for c, evidence in EVIDENCE.items() if evidence == "analyst")
    doc = analyst_doc(tmp_path, item(cid, status="warn", weight=MAX_WEIGHT))
    cat = category(rate(analyst_rows(doc), SHIPPED, doc), cid)
    assert cat["score"] == pytest.approx(100 * SHIPPED["status_scores"]["warn"]) and cat["coverage"] == 1.0


# ------------------------------------------------------------------------------------------------ rationale

def test_a_coverage_just_under_a_threshold_reads_under_it():
    """11 of 13 hosts graded is 84.6 %: at whole percents it read "coverage 85% < 85%"."""
    tiers = {"status_scores": SHIPPED["status_scores"], "severity_weights": SHIPPED["severity_weights"],
             "min_coverage_to_rate": 0.85,
             "tiers": [{"name": "Top", "min_coverage": 0.85}, {"name": "Low"}],
             "categories": [{"id": "a", "evidence": "measured", "weight": 1}]}
    rows = [row("a.x", "pass" if i < 11 else "skip", host="n%d" % i) for i in range(13)]
    result = rate(rows, tiers)
    assert result["coverage"] == pytest.approx(11 / 13, abs=1e-4)
    assert "Not Top: coverage 84.6% < 85.0%." in result["rationale"]
    assert any(line.startswith("Not rated: coverage 84.6% is below the 85.0% needed to rate")
               for line in result["rationale"])


def test_a_clear_difference_keeps_whole_percents():
    tiers = {"status_scores": SHIPPED["status_scores"], "severity_weights": SHIPPED["severity_weights"],
             "tiers": [{"name": "Top", "min_coverage": 0.85}, {"name": "Low"}],
             "categories": [{"id": "a", "evidence": "measured", "weight": 1}]}
    rows = [row("a.x", "pass" if i < 3 else "skip", host="n%d" % i) for i in range(4)]
    assert "Not Top: coverage 75% < 85%." in rate(rows, tiers)["rationale"]


def test_the_fixture_run_dir_analyst_file_still_builds(tmp_path):
    """The golden fixture handed in as RUN_DIR/analyst.yml (as test_merge does) is read and marked."""
    run_dir = make_run(tmp_path, "excellent")
    shutil.copy(ANALYST_GOOD, run_dir / "analyst.yml")
    _, rows, doc = evaluate(str(run_dir), rubric=RUBRIC)
    assert doc["analyst"]["provided"] and doc["analyst"]["items"] == len(load_analyst(ANALYST_GOOD, SHIPPED)["items"])
    assert {r["check_id"] for r in rows if r["evidence"] == "analyst"}
