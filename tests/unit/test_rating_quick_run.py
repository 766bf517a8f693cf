"""The rating of one real quick run (tests/fixtures/assessment_run: 4 CPU hosts, every phase, real Slurm): the profile
it declared and the durations it actually ran make it a screening, never a medallion; the same artifacts with only
their recorded durations moved to the standard profile's (at_standard_durations, below) get their medallion; tests
not built yet and tests of a phase not selected count in coverage; a category is measured only by a check with an
expectation; the report's rating section shows the profile, the coverage and the gates with their evidence."""

import json
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml
from rating_runs import ANALYST_GOOD

from probes.burnin import runner as soak_runner
from reports import DATA_DIR, profiles
from reports.build import build, evaluate
from reports.grading import RubricError, load_rubric
from reports.load import load_run
from reports.rate import load_tiers

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "assessment_run" / "run.tar.xz"
SPEC = load_tiers()["profiles"]
STANDARD = SPEC["minimums"]["standard"]
STORAGE_PROBES = ("fio_sweep", "checkpoint", "metadata", "object_store", "import_time")  # probes/storage PROBES


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """The recorded run directory, extracted once (tests copy it before changing anything)."""
    tmp = tmp_path_factory.mktemp("quick_run")
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(tmp, filter="data")
    return tmp / "run"


@pytest.fixture(scope="module")
def shipped(quick_run, tmp_path_factory):
    """The run built with the shipped rubric and tiers: (ratings.json, report.md, report.html)."""
    copy = tmp_path_factory.mktemp("shipped") / "run"
    shutil.copytree(quick_run, copy)
    _, _, report_dir = build(str(copy))
    report = Path(report_dir)
    return (json.loads((report / "ratings.json").read_text()), (report / "report.md").read_text(),
            (report / "report.html").read_text())


def copy_of(quick_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(quick_run, run_dir)
    return run_dir


def _rewrite_json(path, change):
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))


def declare(run_dir, profile):
    """The run as if it had been started with `-e assess_profile=<profile>` (run.json and assess_run.json)."""
    for name in ("run.json", "assess_run.json"):
        _rewrite_json(run_dir / name, lambda doc: doc.update(profile=profile))


def at_standard_durations(run_dir):
    """The same run as if every test had lasted the standard profile's minimums, changing only what records a
    duration or size (every measured number - bandwidths, rates, counts, errors - stays as recorded):
    - the declared profile becomes standard;
    - burnin.json and fabric_soak.json: planned_s becomes the standard minimum and elapsed_s moves up by the same
      amount (the soak overran its new plan by as much as it overran the old one);
    - storage_soak.fio.jsonl: each (client count, phase)'s interval times are stretched about its first start so the
      phase spans the standard minimum;
    - storage_soak.json and its fio timeline: the standard profile's client counts (roles/burnin
      burnin_profiles.standard.storage_clients), each with the results and intervals of the one client count the
      quick run recorded (the quick profile runs 1 client);
    - fio_sweep-*.json: the facts runtime_s and size_mib become the standard minimums;
    - checkpoint-*.json: the param size_mib becomes the standard minimum."""
    declare(run_dir, "standard")
    for host_dir in sorted((run_dir / "artifacts").iterdir()):
        for probe, key in (("burnin", "burnin_s"), ("fabric_soak", "fabric_soak_s")):
            def longer(doc, minimum=STANDARD[key]):
                plain = {r["metric"]: r for r in doc["results"] if not r.get("labels")}
                shift = minimum - plain["planned_s"]["value"]
                plain["planned_s"]["value"] += shift
                plain["elapsed_s"]["value"] = round(plain["elapsed_s"]["value"] + shift, 1)
            _rewrite_json(host_dir / ("%s.json" % probe), longer)
        timeline = host_dir / "storage_soak.fio.jsonl"
        samples = [json.loads(line) for line in timeline.read_text().splitlines() if line.strip()]
        spans = {}
        for s in samples:
            if s["type"] == "fio":
                lo, hi = spans.get((s["clients"], s["phase"]), (s["t_start"], s["t"]))
                spans[(s["clients"], s["phase"])] = (min(lo, s["t_start"]), max(hi, s["t"]))
        for s in samples:
            if s["type"] == "fio":
                lo, hi = spans[(s["clients"], s["phase"])]
                k = STANDARD["storage_soak_phase_s"] / (hi - lo)
                s["t_start"], s["t"] = lo + (s["t_start"] - lo) * k, lo + (s["t"] - lo) * k
        one = [s for s in samples if s.get("clients") == 1]  # the fio intervals and phase ends of the 1 client
        samples = [dict(s, clients=n) for n in STANDARD["storage_soak_clients"] for s in one] + [
            s for s in samples if "clients" not in s]
        timeline.write_text("".join(json.dumps(s) + "\n" for s in samples))

        def at_each_count(doc, counts=STANDARD["storage_soak_clients"]):
            one = [r for r in doc["results"] if (r.get("labels") or {}).get("clients") == 1]
            doc["results"] = [dict(r, labels=dict(r["labels"], clients=n)) for n in counts for r in one] + [
                r for r in doc["results"] if "clients" not in (r.get("labels") or {})]
        _rewrite_json(host_dir / "storage_soak.json", at_each_count)
        for sweep in host_dir.glob("fio_sweep-*.json"):
            _rewrite_json(sweep, lambda doc: doc["facts"].update(runtime_s=float(STANDARD["fio_runtime_s"]),
                                                                 size_mib=STANDARD["fio_size_mib"]))
        for checkpoint in host_dir.glob("checkpoint-*.json"):
            _rewrite_json(checkpoint, lambda doc: doc["params"].update(size_mib=STANDARD["checkpoint_size_mib"]))


def excellent_rubric(shipped_ratings, path):
    """The run's excellent part: every shipped check (placeholders aside) that this run graded with nothing but
    passes, and the shipped consistency block. With the analyst's good marks this scores Platinum on its own."""
    clean = {c["check_id"] for c in shipped_ratings["checks"]
             if c["graded"] and c["counts"]["pass"] == c["graded"]}
    rubric = load_rubric()
    doc = {"schema": rubric["schema"], "consistency": rubric["consistency"],
           "checks": [c for c in rubric["checks"] if c["id"] in clean]}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def measure(doc, mid):
    return next(m for m in doc["profile"]["measures"] if m["id"] == mid)


# ------------------------------------------------------------------------------------------------ profile

def test_the_quick_run_is_a_screening_with_the_durations_it_ran(shipped):
    doc, md, _ = shipped
    assert doc["tier"]["name"] == "Screening" and not doc["tier"]["rated"] and not doc["tier"]["medallion"]
    profile = doc["profile"]
    assert profile["declared"] == "quick" and profile["rating"] == "screening" and profile["needed"] == "standard"
    # what ran, from the artifacts: the shortest host of each
    assert (measure(doc, "burnin_s")["value"], measure(doc, "burnin_s")["host"]) == (60.2, "cmxbl-node2")
    assert measure(doc, "burnin_s")["hosts"] == {"cmxbl-node1": 60.7, "cmxbl-node2": 60.2, "cmxbl-node3": 60.3,
                                                 "cmxbl-node4": 60.2}
    assert (measure(doc, "fabric_soak_s")["value"], measure(doc, "fabric_soak_s")["host"]) == (20.4, "cmxbl-node2")
    assert (measure(doc, "storage_soak_phase_s")["value"], measure(doc, "storage_soak_phase_s")["host"]) == (
        10.0, "cmxbl-node1")  # rand_mixed at 1 client: 1796157528.077 .. 1796157538.081
    assert measure(doc, "fio_runtime_s")["value"] == 1.0 and measure(doc, "fio_size_mib")["value"] == 32.0
    # the sizes the soaks recorded: the quick profile's 1 client; GEMM and message sizes are the CPU's in every
    # profile (roles/burnin: 0 = 512 and 1 MiB on the CPU), which this CPU run meets
    assert measure(doc, "storage_soak_clients")["value"] == [1]
    assert (measure(doc, "burnin_gemm_size")["value"], measure(doc, "burnin_message_bytes")["value"],
            measure(doc, "fabric_soak_message_bytes")["value"]) == (512, 1 << 20, 1 << 20)
    assert measure(doc, "burnin_gemm_size")["minimums"] == {"standard": 512, "full": 512}
    assert {m["id"]: m["state"] for m in profile["measures"]} == dict(
        {mid: "below" for mid in ("burnin_s", "fabric_soak_s", "storage_soak_phase_s", "fio_runtime_s",
                                  "fio_size_mib", "checkpoint_size_mib", "storage_soak_clients")},
        burnin_gemm_size="met", burnin_message_bytes="met", fabric_soak_message_bytes="met")
    assert profile["lacks"] == [
        "declared profile quick is below standard (its sizes are smaller)",
        "burn-in 60.2 s on cmxbl-node2 < 1 h", "fabric soak 20.4 s on cmxbl-node2 < 15 min",
        "storage endurance phase 10 s on cmxbl-node1 < 7.5 min", "fio sweep point 1 s on cmxbl-node1 < 30 s",
        "fio sweep file 32 MiB on cmxbl-node1 < 4096 MiB",
        "checkpoint state per rank 64 MiB on cmxbl-node1 < 4096 MiB",
        "storage soak client counts 1 on cmxbl-node1 (standard needs 1, 8, 32)"]
    # these artifacts predate facts.load_from_s: the soaks' durations are read from their start, and the verdict says so
    assert profile["notes"] == [
        "%s counted from its start on cmxbl-node1, cmxbl-node2, cmxbl-node3, cmxbl-node4: the artifact records no load "
        "start (load_from_s: older probes, or collectives that never began), so start-up time is in it" % title
        for title in ("burn-in", "fabric soak")]
    # the report's headline states the profile and what actually ran
    assert ("- profile: quick declared; ran burn-in 60.2 s, fabric soak 20.4 s, storage endurance phase 10 s, "
            "fio sweep point 1 s, fio sweep file 32 MiB, checkpoint state per rank 64 MiB, storage soak client counts "
            "1, burn-in GEMM size 512, burn-in all-to-all message 1 MiB, fabric soak message 1 MiB: "
            "**screening**") in md
    assert "**Tier: Screening, not a rating (declared profile quick is below standard" in md


def test_excellent_numbers_on_the_quick_profile_are_a_screening_and_at_standard_durations_gold_on_the_cpu(
        quick_run, shipped, tmp_path):
    """The run's excellent part scores 100 everywhere it measured, but it ran on CPU hosts: GPU compute has tests in
    the rubric and none could be judged (only 'probe ran' checks), so the top tier is out of reach (max_unmeasured:
    before, such a run rated Platinum)."""
    rubric = excellent_rubric(shipped[0], tmp_path / "excellent.yml")
    _, _, quick = evaluate(str(quick_run), rubric=rubric, analyst=ANALYST_GOOD)
    assert quick["score"] == 100.0 and quick["tier"]["score_tier"] == "Gold"
    assert quick["tier"] == {"name": "Screening", "rated": False, "medallion": False, "score_tier": "Gold",
                             "provisional": "Gold", "capped_by": []}
    assert any(line.startswith("Screening, not a rating: declared profile quick is below standard")
               and line.endswith("the measured part alone would give Gold.") for line in quick["rationale"])
    assert "Not Platinum: 1 category not measured (compute) > 0." in quick["rationale"]

    standard_dir = copy_of(quick_run, tmp_path)
    at_standard_durations(standard_dir)
    _, _, standard = evaluate(str(standard_dir), rubric=rubric, analyst=ANALYST_GOOD)
    assert standard["tier"] == {"name": "Gold", "rated": True, "medallion": True, "score_tier": "Gold",
                                "provisional": None, "capped_by": []}
    assert standard["profile"]["rating"] == "standard" and standard["profile"]["lacks"] == []
    assert [m["value"] for m in standard["profile"]["measures"]] == [3600.2, 900.4, 450.0, 30.0, 4096.0, 4096.0,
                                                                    [1, 8, 32], 512, 1 << 20, 1 << 20]
    # the same scores: only the durations moved
    assert standard["score"] == quick["score"] and standard["coverage"] == quick["coverage"]
    assert standard["profile"]["next"] == {"profile": "full", "lacks": [
        "declared profile standard is below full (its sizes are smaller)", "burn-in 1 h on cmxbl-node2 < 8 h"]}
    assert "Not a full rating: declared profile standard is below full (its sizes are smaller); burn-in 1 h on " \
           "cmxbl-node2 < 8 h." in standard["rationale"]


def test_a_standard_declaration_does_not_hide_quick_durations(quick_run, tmp_path):
    run_dir = copy_of(quick_run, tmp_path)
    declare(run_dir, "standard")
    spec = load_tiers()["profiles"]
    judged = profiles.assess(load_run(str(run_dir)), {"profiles": spec})
    assert judged["rating"] == "screening"
    assert judged["lacks"][0] == "burn-in 60.2 s on cmxbl-node2 < 1 h" and len(judged["lacks"]) == 7
    assert judged["lacks"][-1] == "storage soak client counts 1 on cmxbl-node1 (standard needs 1, 8, 32)"


@pytest.fixture(scope="module")
def real_measures(quick_run):
    return profiles.measured(load_run(str(quick_run)), SPEC["measures"])


def met_values():
    """The standard minimums as measured values: durations and sizes as numbers, the client counts as their list.
    The minimums by backend ({gpu, cpu}: GEMM and message sizes) are left as measured: the recorded CPU run ran
    the CPU's sizes, which meet them."""
    return {mid: v if isinstance(v, list) else float(v) for mid, v in STANDARD.items() if not isinstance(v, dict)}


def with_values(measures, **values):
    """The real measures with some values replaced (host kept): a run that ran longer, or did not run a test."""
    return [dict(m, value=values[m["id"]]) if m["id"] in values else m for m in measures]


def test_a_test_that_did_not_run_keeps_the_run_from_every_level_that_needs_it(real_measures):
    """Leaving a test out must not rate better than running it short: a burn-in not run was a standard rating while
    a 58-minute one was a screening (a review reproduced it: Platinum without the burn-in)."""
    met = met_values()
    skipped = profiles.judge("full", with_values(real_measures, **dict(met, burnin_s=None)), SPEC)
    assert skipped["rating"] == "screening" and skipped["lacks"] == ["burn-in not run (standard needs 1 h)"]
    assert measure({"profile": skipped}, "burnin_s")["state"] == "not run"
    short = profiles.judge("full", with_values(real_measures, **dict(met, burnin_s=58 * 60.0)), SPEC)
    assert short["rating"] == "screening" and short["lacks"][0].startswith("burn-in 58 min on ")
    for mid in STANDARD:  # every measure, not only the burn-in
        assert profiles.judge("standard", with_values(real_measures, **dict(met, **{mid: None})), SPEC)[
            "rating"] == "screening", mid
    standard = profiles.judge("full", with_values(real_measures, **met), SPEC)
    assert standard["rating"] == "standard" and standard["lacks"] == []
    assert standard["next"]["profile"] == "full" and standard["next"]["lacks"][0].startswith("burn-in 1 h on ")
    full = profiles.judge("full", with_values(real_measures, **dict(met, burnin_s=28800.4)), SPEC)
    assert full["rating"] == "full" and full["next"] is None


@pytest.mark.parametrize("burnin_s,rating", [(3600.0, "standard"), (3564.0, "standard"), (3563.9, "screening")])
def test_a_duration_within_the_tolerance_of_its_minimum_meets_it(real_measures, burnin_s, rating):
    met = met_values()
    assert SPEC["tolerance_pct"] == 1  # 3600 x 0.99 = 3564: clocks read around the start and the end
    assert profiles.judge("standard", with_values(real_measures, **dict(met, burnin_s=burnin_s)), SPEC)["rating"] \
        == rating


def test_a_run_without_a_known_profile_is_a_screening(real_measures):
    met = met_values()
    judged = profiles.judge(None, with_values(real_measures, **met), SPEC)
    assert judged["rating"] == "screening" and judged["lacks"] == ["the run recorded no known profile (none)"]


def test_the_shipped_profiles_run_at_least_what_their_rating_needs():
    """The minimums are judgement (tiers.yml); the profiles' durations are the roles' defaults. Running the standard
    profile must meet the standard minimums, the full profile the full ones; quick stays below (a screening)."""
    root = Path(DATA_DIR).parents[1]
    defaults = yaml.safe_load((root / "roles" / "burnin" / "defaults" / "main.yml").read_text())
    burnin = defaults["burnin_profiles"]
    storage = yaml.safe_load((root / "roles" / "storage" / "defaults" / "main.yml").read_text())[
        "storage_profile_sizes"]
    # the GEMM and message sizes: the role gives 0 in every profile, which the runner makes its default per backend
    assert defaults["burnin_gemm_size"] == defaults["burnin_coll_size_bytes"] == defaults[
        "burnin_fabric_size_bytes"] == 0 and defaults["burnin_storage_clients"] == []
    sizes = {}
    for kind, backend, gpus in (("gpu", "cuda", [0]), ("cpu", "cpu", [])):
        params = {"gemm_size": defaults["burnin_gemm_size"], "coll_size_bytes": defaults["burnin_coll_size_bytes"],
                  "gemm_dtype": "", "threads": 1, "round_s": 1, "check_every": 1}
        cfg = {"backend": backend, "gpus": gpus, "params": params, "gemm": True, "collectives": [], "interval": 1,
               "deadline_latest": 0, "hard_deadline": 0, "hosts": ["h"], "rdzv_timeout": 1, "op_timeout": 1,
               "paths": {"halt": "h", "deadline": "d", "coll": "c", "gemm": "g"}}
        sizes[kind] = {"gemm": soak_runner._worker_cfgs(cfg)[0]["size"],
                       "message": soak_runner.coll_template(cfg)["size_bytes"]}
    for name in ("standard", "full"):
        runs = {"burnin_s": burnin[name]["burnin_s"], "fabric_soak_s": burnin[name]["fabric_s"],
                "storage_soak_phase_s": burnin[name]["storage_phase_s"],
                "fio_runtime_s": storage[name]["fio_runtime_s"], "fio_size_mib": storage[name]["fio_size_mib"],
                "checkpoint_size_mib": storage[name]["checkpoint_size_mib"],
                "storage_soak_clients": burnin[name]["storage_clients"],
                "burnin_gemm_size": {k: s["gemm"] for k, s in sizes.items()},
                "burnin_message_bytes": {k: s["message"] for k, s in sizes.items()},
                "fabric_soak_message_bytes": {k: s["message"] for k, s in sizes.items()}}
        assert set(runs) == set(SPEC["minimums"][name])
        for mid, minimum in SPEC["minimums"][name].items():
            if isinstance(minimum, list):  # a set: every client count the profile names
                assert runs[mid] == minimum, (name, mid)
            elif isinstance(minimum, dict):  # by backend: the role's own sizes, not new numbers
                assert runs[mid] == minimum, (name, mid)
            else:
                assert runs[mid] >= minimum, (name, mid)
    assert set(burnin["quick"]["storage_clients"]) < set(STANDARD["storage_soak_clients"])
    assert burnin["quick"]["burnin_s"] < STANDARD["burnin_s"]
    assert SPEC["minimums"]["full"]["burnin_s"] == 8 * 3600  # the seed's 8-hour burn-in


# ------------------------------------------------------------------------------------------------ coverage

def test_probe_ran_checks_alone_do_not_measure_compute_on_a_cpu_run(shipped):
    doc = shipped[0]
    compute = next(c for c in doc["categories"] if c["id"] == "compute")
    # before issue 18 this scored 100 from compute.*_ran alone, labelled measured
    assert compute["score"] is None and compute["status"] == "not measured" and compute["coverage"] == 0.0
    assert compute["ran_only_checks"] == 5 and compute["judged_checks"] == 0 and compute["evidence_used"] == []
    assert compute["reason"] == ("only 'probe ran' checks were graded (5): nothing measured had an expectation "
                                 "that could be judged here")
    storage = next(c for c in doc["categories"] if c["id"] == "storage")
    assert storage["score"] is not None and storage["ran_only_checks"] == 4  # *_ran count beside judged checks


# Built tests whose placeholders were the last in not_implemented.yml: ior, elbencho and the suite against S3.
BUILT_STORAGE = ("storage.ior_write", "storage.ior_read", "storage.mdtest_file_create", "storage.elbencho_write",
                 "storage.ior_write_world", "storage.elbencho_write_world", "storage.obj_fio_throughput")


def test_every_test_of_the_seed_has_a_built_check_and_none_is_listed_as_missing(shipped):
    doc, md, html = shipped
    assert yaml.safe_load((Path(DATA_DIR) / "not_implemented.yml").read_text())["checks"] == []
    summaries = {c["check_id"]: c for c in doc["checks"]}
    assert not [c for c in summaries.values() if c["kind"] == "not_implemented"]
    assert sum(c["not_implemented"] for c in doc["categories"]) == 0
    assert "Not measured: not implemented in this version" not in md and "storage.object_store_suite" not in md
    assert "not measured: not implemented in this version |" not in md  # no such row on any host
    # the placeholders' tests, built: rows with real kinds (the recorded run's storage phase, or its skips)
    for cid in BUILT_STORAGE:
        assert summaries[cid]["kind"] != "not_implemented" and summaries[cid]["category"] == "storage", cid
    # built by their phases (rubric.d/<phase>.yml): same ids, real kinds, no longer placeholders
    assert summaries["training.torchtitan_dense"]["kind"] == "train_throughput"
    assert summaries["compute.hpl_mxp"]["kind"] == "metric"  # the HPL-MxP probe's residual check
    assert summaries["compute.hpl_mxp_multinode"]["kind"] == "hpl_mxp_across"  # its solve across the nodes
    for cid in ("inference.inferencex_single_node", "orchestration.slurm_job_churn", "monitoring.dashboard",
                "storage.datagen"):
        assert summaries[cid]["kind"] != "not_implemented", cid


def test_a_test_not_implemented_is_a_row_counted_in_coverage(quick_run, tmp_path):
    """A placeholder (not_implemented.yml, kind not_implemented) is a skip on every host, never graded, counted in its
    category's coverage and listed in the report; it loads after every phase's checks. The shipped file holds none
    now, so the recorded run is built with the shipped rubric plus one."""
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR, data)
    (data / "not_implemented.yml").write_text(yaml.safe_dump({"schema": "clustermax.assess/rubric/v1", "checks": [
        {"id": "storage.suite_in_a_future_version", "category": "storage", "kind": "not_implemented",
         "severity": "minor", "title": "A storage test of the seed this version does not run",
         "source": "seed, Phase 2 \"Storage\""}]}))
    rubric = load_rubric(str(data / "rubric.yml"))
    placeholders = [c for c in rubric["checks"] if c["kind"] == "not_implemented"]
    assert [c["id"] for c in placeholders] == ["storage.suite_in_a_future_version"]
    assert rubric["checks"][-1:] == placeholders  # listed last, after every phase's checks
    assert "storage" in {c["id"] for c in load_tiers()["categories"]}
    run_dir = copy_of(quick_run, tmp_path)
    _, _, report_dir = build(str(run_dir), rubric=str(data / "rubric.yml"))
    report = Path(report_dir)
    doc, md = json.loads((report / "ratings.json").read_text()), (report / "report.md").read_text()
    summary = next(c for c in doc["checks"] if c["check_id"] == "storage.suite_in_a_future_version")
    assert summary["kind"] == "not_implemented" and summary["counts"]["skip"] == 4
    assert summary["coverage"] == 0.0 and summary["score"] is None
    cats = {c["id"]: c for c in doc["categories"]}
    assert cats["storage"]["not_implemented"] == 1 and sum(c["not_implemented"] for c in doc["categories"]) == 1
    assert "Not measured: not implemented in this version (1 tests of the seed's methodology):" in md
    assert "- `storage.suite_in_a_future_version` (storage): " in md
    assert ("| storage.suite_in_a_future_version | cmxbl-node1 | – | skip | – | – | not measured: not implemented in "
            "this version |") in md
    assert "not implemented in this version" in (report / "report.html").read_text()


def test_a_phase_left_out_is_not_run_phase_not_selected(quick_run, tmp_path):
    """The run as `--skip-tags storage` would have left it: the storage phase's artifacts and journal lines gone."""
    run_dir = copy_of(quick_run, tmp_path)
    for path in (run_dir / "artifacts").glob("*/*.json"):
        if json.loads(path.read_text())["probe"] in STORAGE_PROBES:
            path.unlink()
    journal = run_dir / "journal.jsonl"
    journal.write_text("".join(line + "\n" for line in journal.read_text().splitlines()
                               if json.loads(line).get("probe") not in STORAGE_PROBES))
    run, rows, doc = evaluate(str(run_dir))
    fio = [r for r in rows if r["check_id"] == "storage.fio_ran"]
    assert [r["status"] for r in fio] == ["skip"] * 4
    assert {r["reason"] for r in fio} == {"not run: phase not selected (no task of the storage phase ran in this run)"}
    seq = {r["reason"] for r in rows if r["check_id"] == "storage.fio_seq_bw"}
    assert seq == {"not run: phase not selected (no task of the storage phase ran in this run)"}
    # the storage soak (burn-in phase) still ran: the burn-in's checks keep their rows
    assert {r["status"] for r in rows if r["check_id"] == "burnin.storage_degradation"} != {"skip"}
    # and the run shows no fio sweep: it cannot reach a level that needs one
    assert measure(doc, "fio_runtime_s")["state"] == "not run"
    assert "fio sweep point not run (standard needs 30 s)" in doc["profile"]["lacks"]


def test_a_placeholder_a_phase_has_built_is_refused(tmp_path):
    (tmp_path / "rubric.d").mkdir()
    (tmp_path / "rubric.yml").write_text("checks: []\n")
    (tmp_path / "rubric.d" / "storage.yml").write_text(
        "checks:\n  - {id: storage.ior, kind: artifact, probe: ior, category: storage, title: ior ran}\n")
    (tmp_path / "not_implemented.yml").write_text(
        "checks:\n  - {id: storage.ior, kind: not_implemented, category: storage, title: ior}\n")
    with pytest.raises(RubricError, match="storage.ior is built now: remove its placeholder from not_implemented.yml"):
        load_rubric(str(tmp_path / "rubric.yml"))
    (tmp_path / "rubric.d" / "storage.yml").unlink()
    (tmp_path / "not_implemented.yml").write_text(
        "checks:\n  - {id: storage.ior, kind: artifact, probe: ior, category: storage, title: ior}\n")
    with pytest.raises(RubricError, match="holds only placeholders"):
        load_rubric(str(tmp_path / "rubric.yml"))


# ------------------------------------------------------------------------------------------------ report section

def test_the_rating_section_shows_profile_coverage_and_gates_with_evidence(shipped):
    doc, md, html = shipped
    rating = md.split("## Rating")[1].split("## Node inventory")[0]
    for heading in ("### Profile and durations", "### Coverage", "### Gates"):
        assert heading in rating
    assert "| burn-in | 60.2 s | cmxbl-node2 | 1 h | 8 h | below |" in rating
    assert "| storage endurance phase | 10 s | cmxbl-node1 | 7.5 min | 7.5 min | below |" in rating
    assert "| storage soak client counts | 1 | cmxbl-node1 | 1, 8, 32 | 1, 8, 32 | below |" in rating
    assert "| burn-in all-to-all message | 1 MiB | cmxbl-node1 | 1 MiB | 1 MiB | met |" in rating
    gate = next(g for g in doc["gates"] if g["id"] == "failure_detection")
    # a clear gate that needs a result shown carries the rows that showed it: the XID written on node 4
    assert not gate["triggered"] and gate["graded"] == 1
    assert [(e["check_id"], e["host"], e["status"]) for e in gate["evidence"]] == [
        ("reliability.failure_detection", "cmxbl-node4", "pass")]
    assert "reliability.failure_detection on cmxbl-node4: pass %s" % gate["evidence"][0]["observed"] in rating
    for anchor in ('id="profile-and-durations"', 'id="coverage"', 'id="gates"'):
        assert anchor in html
    assert "cmxbl-node4: pass" in html
