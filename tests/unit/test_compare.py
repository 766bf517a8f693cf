"""compare RUN_A RUN_B (check by check, row by row, tier, headline) and regrade RUN --rubric FILE."""

import json
import shutil
from pathlib import Path

import yaml
from rating_runs import ANALYST_GOOD, RUBRIC, make_run
from run_dirs import unpack_recorded_run

from reports.build import build
from reports.cli import main as cli_main
from reports.compare import compare, compare_checks, compare_headline, compare_rows, has_regressions, load_side, text


def summary(check_id, worst, score, severity="major", counts=None):
    return {"check_id": check_id, "category": check_id.split(".")[0], "title": check_id, "severity": severity,
            "worst": worst, "score": score, "counts": counts or {worst: 1}}


def test_compare_checks_classifies_every_kind():
    a = [summary("x.same", "pass", 1.0), summary("x.worse", "pass", 1.0), summary("x.better", "fail", 0.0),
         summary("x.lower_score", "warn", 0.75), summary("x.now", "skip", None), summary("x.lost", "pass", 1.0),
         summary("x.gone", "pass", 1.0), summary("x.never", "skip", None)]
    b = [summary("x.same", "pass", 1.0), summary("x.worse", "warn", 0.5), summary("x.better", "pass", 1.0),
         summary("x.lower_score", "warn", 0.6), summary("x.now", "fail", 0.0), summary("x.lost", "skip", None),
         summary("x.new", "pass", 1.0), summary("x.never", "skip", None)]
    out = compare_checks(a, b)
    assert [e["check_id"] for e in out["regressions"]] == ["x.worse", "x.lower_score"]  # largest drop first
    assert out["regressions"][0]["delta"] == -50.0
    assert [e["check_id"] for e in out["improvements"]] == ["x.better"]
    assert [e["check_id"] for e in out["newly_measured"]] == ["x.now"]
    assert [e["check_id"] for e in out["no_longer_measured"]] == ["x.lost"]
    assert [e["check_id"] for e in out["new"]] == ["x.new"] and [e["check_id"] for e in out["gone"]] == ["x.gone"]
    assert out["unchanged"] == 2


def test_compare_rows_same_host_and_subject():
    def r(status, host="n1", subject="gpu=0", observed=""):
        return {"check_id": "c.x", "host": host, "subject": subject, "status": status, "observed": observed}

    changes = compare_rows([r("pass", observed="700"), r("pass", "n2"), r("skip", "n3")],
                           [r("fail", observed="400"), r("pass", "n2"), r("warn", "n3"), r("fail", "n9")])
    assert [(c["host"], c["kind"]) for c in changes] == [("n1", "regression"), ("n3", "newly measured")]
    assert changes[0]["a"] == {"status": "pass", "observed": "700"}


def test_compare_headline_direction():
    a = [{"id": "bw", "title": "bw", "unit": "GB/s", "better": "higher", "value": 100.0},
         {"id": "t", "title": "t", "unit": "s", "better": "lower", "value": 10.0}]
    b = [dict(a[0], value=90.0), dict(a[1], value=8.0)]
    out = {h["id"]: h for h in compare_headline(a, b)}
    assert out["bw"]["direction"] == "worse" and out["bw"]["delta_pct"] == -10.0
    assert out["t"]["direction"] == "better"


def test_compare_two_runs_of_one_cluster(tmp_path, capsys):
    good = make_run(tmp_path, "excellent", run_id="before")
    bad = make_run(tmp_path, "excellent", run_id="after", host_overrides={"gn2": {"ssh_password_auth": 1},
                                                                         "gn3": {"read_bw_gbps": 2.0}})
    for run_dir in (good, bad):
        build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    result = compare(load_side(good), load_side(bad))
    assert result["tier"] == {"a": "Platinum", "b": "Participation Ribbon", "change": "worse"}
    assert [e["check_id"] for e in result["checks"]["regressions"]] == ["security.ssh_password_auth",
                                                                       "storage.read_bw"]
    assert not result["checks"]["improvements"]
    rows = {(c["check_id"], c["host"]): c for c in result["rows"]}
    assert rows[("security.ssh_password_auth", "gn2")]["b"] == {"status": "fail", "observed": "1 bool"}
    assert rows[("storage.read_bw", "gn3")]["kind"] == "regression"
    assert has_regressions(result)
    cats = {c["id"]: c for c in result["categories"]}
    assert cats["storage"]["delta"] < 0 and cats["compute"]["delta"] == 0

    # the CLI: exit 1 with regressions, 0 the other way round (only improvements), text names the checks
    assert cli_main(["compare", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert "tier: Platinum -> Participation Ribbon" in out
    assert "- security.ssh_password_auth" in out and "gn2: pass (0 bool) -> fail (1 bool)" in out
    assert cli_main(["compare", str(bad), str(good), "--json"]) == 0
    back = json.loads(capsys.readouterr().out)
    assert back["tier"]["change"] == "better" and len(back["checks"]["improvements"]) == 2


def test_compare_grades_a_run_without_report_and_refuses_nonsense(tmp_path, capsys):
    run_dir = make_run(tmp_path, "excellent")
    doc, rows, label = load_side(run_dir)  # no report/ yet: graded on the fly with the shipped rubric
    assert label == "golden/r1" and rows and doc["schema"] == "clustermax.assess/ratings/v1"
    assert not (Path(run_dir) / "report").exists()
    assert cli_main(["compare", str(run_dir), str(tmp_path / "nope")]) == 2
    assert "neither a run directory" in capsys.readouterr().err


def test_regrade_with_a_stricter_rubric(tmp_path, capsys):
    run_dir = make_run(tmp_path, "excellent")
    build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    stored = (Path(run_dir) / "report" / "ratings.json").read_text()
    rubric = yaml.safe_load(Path(RUBRIC).read_text())
    for check in rubric["checks"]:
        if check["id"] == "storage.read_bw":
            check["expect"]["value"] = 20  # 9.5 GB/s no longer passes
    strict = tmp_path / "strict.yml"
    strict.write_text(yaml.safe_dump(rubric))
    code = cli_main(["regrade", str(run_dir), "--rubric", str(strict), "--analyst", ANALYST_GOOD])
    out = capsys.readouterr().out
    assert code == 1  # the regraded run has failures
    assert "- storage.read_bw" in out and "tier: Platinum -> " in out
    regraded = json.loads((Path(run_dir) / "regrade" / "strict" / "ratings.json").read_text())
    assert regraded["tier"]["name"] != "Platinum"
    assert regraded["inputs"]["rubric"]["path"] == str(strict)
    assert (Path(run_dir) / "report" / "ratings.json").read_text() == stored  # the stored report is untouched
    assert {p.name for p in (Path(run_dir) / "regrade" / "strict").iterdir()} >= {
        "report.html", "report.md", "checks.csv", "results.parquet", "ratings.json", "junit.xml"}
    assert cli_main(["regrade", str(tmp_path / "missing"), "--rubric", str(strict)]) == 2


def test_a_check_whose_rows_all_became_errors_is_a_regression_not_no_longer_measured(tmp_path, capsys):
    """The recorded run, then the same run with its scratch fio sweep ended in an I/O error on every host."""
    before = unpack_recorded_run(tmp_path / "a")
    after = tmp_path / "b" / "runB"
    shutil.copytree(before, after, ignore=shutil.ignore_patterns("report"))
    for path in after.glob("artifacts/*/*.json"):  # runB's artifacts name runB, as its probes would have written them
        doc = dict(json.loads(path.read_text()), run_id="runB")
        if path.name == "fio_sweep-scratch.json":
            doc.update(status="error", reason="fio: io_u error on file /scratch/x: Input/output error", results=[])
        path.write_text(json.dumps(doc))
    for name, key in (("assess_run.json", "id"), ("run.json", "run_id")):
        (after / name).write_text(json.dumps(dict(json.loads((after / name).read_text()), **{key: "runB"})))
    result = compare(load_side(before), load_side(after))
    checks = result["checks"]
    worst = {e["check_id"]: (e["a"]["worst"], e["b"]["worst"], e["b"]["score"], e.get("delta"))
             for key in ("regressions", "no_longer_measured") for e in checks[key]}
    # before: no regression, all seven "no longer measured"
    assert sorted(e["check_id"] for e in checks["regressions"]) == [
        "storage.fio_client_peers", "storage.fio_p99_latency", "storage.fio_ran", "storage.fio_rand_iops",
        "storage.fio_seq_bw"]
    assert worst["storage.fio_ran"] == ("pass", "error", None, None)
    assert worst["storage.fio_client_peers"] == ("warn", "error", None, None)
    assert all(e["b"]["counts"]["error"] == 4 for e in checks["regressions"])
    # what no longer ran at all (its input is gone: skip) is still no longer measured
    assert [e["check_id"] for e in checks["no_longer_measured"]] == ["storage.fio_scaling", "storage.fio_degradation"]
    assert worst["storage.fio_scaling"][1] == "skip"
    assert "5 regressed, 0 improved, 0 newly measured, 2 no longer measured" in text(result)
    assert cli_main(["compare", str(before), str(after), "--json"]) == 1
    assert len(json.loads(capsys.readouterr().out)["checks"]["regressions"]) == 5
    # the other way round: the sweep runs again, an improvement
    back = compare(load_side(after), load_side(before))["checks"]
    assert sorted(e["check_id"] for e in back["improvements"]) == sorted(e["check_id"] for e in checks["regressions"])
    assert [e["check_id"] for e in back["newly_measured"]] == ["storage.fio_scaling", "storage.fio_degradation"]
