"""The rating layer over a real run: assess.yml (quick profile, audit phase) over the 4-host SSH test cluster
produces every output (report.html, report.md, checks.csv, results.parquet, ratings.json, junit.xml), the callback
prints the rating table, and regrade, compare and the peer store work on the stored run without touching the
cluster again.

One playbook run, shared by every assertion (module-scoped fixture)."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import BIN, ROOT, run_dirs, run_playbook

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from test_junit import validate_junit  # noqa: E402

from reports.cli import main as cli_main  # noqa: E402

pytestmark = pytest.mark.cluster
OUTPUTS = ("report.html", "report.md", "checks.csv", "results.parquet", "ratings.json", "junit.xml")
CATEGORIES = ("security", "lifecycle", "orchestration", "storage", "networking", "reliability", "monitoring", "compute",
              "pricing", "partnerships", "availability")


def assess_report(*args, env=None):
    """The console script's code path (`python -m reports`), as the callback runs it."""
    return subprocess.run([str(BIN / "python"), "-m", "reports", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.fixture(scope="module")
def run(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rating")
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    out = tmp / "runs"
    # Preflight, the audit phase, cleanup and the report: every phase at once takes ~6 minutes on a 2-core
    # controller, and each phase's own integration test runs it; the rating layer needs a real run, not all of them.
    res = run_playbook(inventory, "-e", "assess_output_dir=%s" % out, "-e", "assess_profile=quick",
                       "--tags", "audit")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    with open(run_dir / "report" / "checks.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    ratings = json.loads((run_dir / "report" / "ratings.json").read_text())
    return {"run_dir": run_dir, "stdout": res.stdout, "rows": rows, "ratings": ratings, "tmp": tmp,
            "hosts": sorted(h["name"] for h in test_cluster.hosts)}


def test_every_output_is_written(run):
    report = run["run_dir"] / "report"
    for name in OUTPUTS:
        assert (report / name).stat().st_size > 0, name
    results = pd.read_parquet(report / "results.parquet")
    assert set(results.host) == set(run["hosts"]) and len(results) > 0
    assert validate_junit((report / "junit.xml").read_bytes()) == []
    page = (report / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and 'id="tier"' in page and 'id="check-rows"' in page
    md = (report / "report.md").read_text()
    assert md.index("## Rating") < md.index("## Node inventory") < md.index("## Checks")


def test_ratings_agree_with_the_checks(run):
    doc, rows = run["ratings"], run["rows"]
    assert doc["schema"] == "clustermax.assess/ratings/v1"
    assert doc["run"]["hosts"] == 4 and doc["run"]["reachable"] == 4 and doc["run"]["backend"] == "cpu"
    assert [c["id"] for c in doc["categories"]] == list(CATEGORIES)
    assert sum(doc["counts"].values()) == len(rows)
    for cat in doc["categories"]:
        mine = [r for r in rows if r["category"] == cat["id"]]
        graded = [r for r in mine if r["status"] != "skip" and float(r["weight"]) > 0]
        assert cat["counts"]["skip"] <= len(mine)
        # a category with nothing graded says "not measured", never a score
        assert (cat["score"] is None) == (not graded or all(
            r["severity"] == "info" for r in graded)), cat["id"]
        if cat["score"] is None:
            assert cat["status"] == "not measured" and cat["coverage"] == 0
    # no analyst file: what no test can see is not measured
    for cid in ("pricing", "partnerships", "availability"):
        assert next(c for c in doc["categories"] if c["id"] == cid)["reason"] == "analyst input absent"
    # CPU-only hosts, the quick profile, no fault injection: a screening (never a medallion) that could not be rated
    # on its coverage either, and says both; detection was not tested, so its gate is not shown (no cap)
    assert doc["tier"]["name"] == "Screening" and not doc["tier"]["rated"] and doc["coverage"] < 0.6
    assert doc["profile"]["declared"] == "quick"
    assert any(line.startswith("Not rated: coverage") for line in doc["rationale"])
    assert any(line.startswith("Screening, not a rating: ") for line in doc["rationale"])
    gate = next(g for g in doc["gates"] if g["id"] == "failure_detection")
    assert not gate["triggered"] and not gate["shown"] and doc["tier"]["not_shown"] == ["failure_detection"]


def test_callback_prints_the_rating_table(run):
    out = run["stdout"]
    assert "tier: Screening, not a rating (" in out and "profile: quick declared; ran " in out
    assert "category" in out and "coverage" in out
    for cid in CATEGORIES:
        assert "\n  %s " % cid in out, cid
    assert "gate failure_detection not shown (unrated for it)" in out


def test_regrade_compare_and_peers_on_the_stored_run(run, capsys, monkeypatch):
    """In process (cli.main): the console script's `python -m reports` path already ran under the callback."""
    run_dir, tmp = run["run_dir"], run["tmp"]
    # a stricter rubric: the shipped one plus a check nobody's test host passes (16 TiB of memory)
    rubric_dir = tmp / "strict"
    (rubric_dir / "rubric.d").mkdir(parents=True)
    shipped = yaml.safe_load((ROOT / "reports" / "data" / "rubric.yml").read_text())
    shipped["checks"].append({"id": "lifecycle.big_memory", "category": "lifecycle", "title": "16 TiB of memory",
                              "kind": "metric", "probe": "node_info", "metric": "memory_total_bytes", "agg": "max",
                              "severity": "major", "expect": {"op": ">=", "value": 16 * 2**40}})
    (rubric_dir / "strict.yml").write_text(yaml.safe_dump(shipped))
    for part in (ROOT / "reports" / "data" / "rubric.d").glob("*.yml"):
        (rubric_dir / "rubric.d" / part.name).write_text(part.read_text())
    artifacts_before = sorted((p, p.stat().st_mtime_ns) for p in (run_dir / "artifacts").rglob("*"))
    assert cli_main(["regrade", str(run_dir), "--rubric", str(rubric_dir / "strict.yml")]) == 1  # new check fails
    assert "New checks: lifecycle.big_memory" in capsys.readouterr().out
    regraded = run_dir / "regrade" / "strict"
    assert all((regraded / name).exists() for name in OUTPUTS)
    with open(regraded / "checks.csv", newline="") as fh:
        new_rows = [r for r in csv.DictReader(fh) if r["check_id"] == "lifecycle.big_memory"]
    assert sorted(r["host"] for r in new_rows) == run["hosts"] and {r["status"] for r in new_rows} == {"fail"}
    assert sorted((p, p.stat().st_mtime_ns) for p in (run_dir / "artifacts").rglob("*")) == artifacts_before

    cli_main(["compare", str(run_dir), str(regraded)])
    assert "1 new" in capsys.readouterr().out
    assert cli_main(["compare", str(run_dir), str(run_dir)]) == 0
    assert "0 regressed, 0 improved" in capsys.readouterr().out

    monkeypatch.setenv("CLUSTERMAX_ASSESS_PEERS", str(tmp / "peers"))
    assert cli_main(["peers", "add", str(run_dir)]) == 0
    assert cli_main(["peers", "list"]) == 0
    listed = capsys.readouterr().out
    assert "1 run(s)" in listed and run_dir.name in listed


def test_build_again_is_repeatable(run):
    res = assess_report("build", str(run["run_dir"]))
    assert res.returncode in (0, 1), res.stderr
    doc = json.loads((run["run_dir"] / "report" / "ratings.json").read_text())
    for key in ("tier", "score", "coverage", "categories", "gates", "rationale", "counts"):
        assert doc[key] == run["ratings"][key], key
