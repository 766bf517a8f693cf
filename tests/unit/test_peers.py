"""Peer store and percentile math: same GPU model and backend only, the run itself excluded, too few peers -> no
percentile; the CLI's peers add/list and a build that ranks against the store."""

import json
from pathlib import Path

import numpy as np
import pytest
from rating_runs import ANALYST_GOOD, RUBRIC, make_run, ratings

from reports import peers
from reports.build import build
from reports.cli import main as cli_main


@pytest.mark.parametrize("values,value,better,expected", [
    ([1, 2, 3, 4], 5, "higher", 100.0),
    ([1, 2, 3, 4], 0, "higher", 0.0),
    ([1, 2, 3, 4], 3, "higher", 62.5),  # 2 below + half of 1 tie, of 4
    ([1, 2, 3, 4], 3, "lower", 37.5),  # lower is better: 1 above + half a tie
    ([10, 10, 10], 10, "higher", 50.0),  # all ties: the middle
    ([1, float("nan"), 3], 2, "higher", 50.0),  # NaN is no peer
])
def test_percentile(values, value, better, expected):
    assert peers.percentile(values, value, better) == pytest.approx(expected)


def test_percentile_without_peers_or_value():
    assert peers.percentile([], 3) is None
    assert peers.percentile([1, 2], None) is None


def record(provider, run_id, score, model="H100-SXM", backend="cuda", gemm=None):
    head = [{"id": "score", "title": "Overall score", "unit": "/100", "better": "higher", "value": score}]
    if gemm is not None:
        head.append({"id": "gemm_bf16_tflops", "title": "GEMM", "unit": "TFLOP/s", "better": "higher", "value": gemm})
    return {"run": {"provider": provider, "run_id": run_id, "gpu_model": "NVIDIA H100 80GB HBM3",
                    "gpu_model_key": model, "backend": backend, "hosts": 4, "finished_at": None},
            "tier": {"name": "Gold", "rated": True}, "score": score, "coverage": 0.9,
            "categories": [{"id": "security", "score": 90.0}], "headline": head}


def head_for(score, gemm=None, model="H100-SXM"):
    metrics = [{"id": "score", "title": "Overall score", "unit": "/100", "better": "higher", "value": score}]
    metrics.append({"id": "gemm_bf16_tflops", "title": "GEMM", "unit": "TFLOP/s", "better": "higher", "value": gemm})
    return {"gpu_model_key": model, "backend": "cuda", "metrics": metrics}


def test_store_round_trip_and_rank_among_same_model_only(tmp_path):
    store = str(tmp_path / "peers")
    for i, score in enumerate([50, 60, 70, 80, 90, 95]):
        peers.add(store, record("p%d" % i, "r", score, gemm=700 + i))
    peers.add(store, record("b200cloud", "r", 10, model="B200"))  # another model: never a peer
    peers.add(store, record("cpu", "r", 10, model=None, backend="cpu"))
    peers.add(store, record("me", "r1", 1))  # the run itself, stored earlier
    (tmp_path / "peers" / "junk.json").write_text("{not json")
    (tmp_path / "peers" / "other.json").write_text(json.dumps({"schema": "something/else"}))
    table, problems = peers.load_store(store)
    assert len(table) == 9 and len(problems) == 2
    head = peers.rank(head_for(75, gemm=702.5), {"provider": "me", "run_id": "r1"}, table, min_peers=5)
    score, gemm = head["metrics"]
    assert score["peers"]["n"] == 6 and score["peers"]["percentile"] == pytest.approx(50.0)
    assert score["peers"]["median"] == pytest.approx(75.0)
    assert gemm["peers"]["n"] == 6 and gemm["peers"]["percentile"] == pytest.approx(50.0)
    head = peers.rank(head_for(75, gemm=None), {"provider": "me", "run_id": "r1"}, table, min_peers=7)
    score, gemm = head["metrics"]
    assert score["peers"]["percentile"] is None and score["peers"]["reason"].startswith("6 peer(s)")
    assert gemm["peers"]["reason"] == "not measured in this run"


def test_a_screening_is_no_peer(tmp_path):
    """Five quick runs of the same GPU (screenings: page-cache fio, one-minute soaks) in the store ranked an honest
    standard run at the 0th percentile of them; a screening is never a peer, a rated or unrated run is."""
    store = str(tmp_path / "peers")
    for i in range(5):
        quick = record("q%d" % i, "r", 99, gemm=900)
        peers.add(store, dict(quick, tier={"name": "Screening", "rated": False}))
    table, _ = peers.load_store(store)
    head = peers.rank(head_for(80, gemm=700), {"provider": "me", "run_id": "x"}, table)
    assert [m["peers"]["n"] for m in head["metrics"]] == [0, 0]
    for i in range(5):
        peers.add(store, record("p%d" % i, "r", 70 + i, gemm=690 + i))
    peers.add(store, dict(record("u", "r", 60, gemm=650), tier={"name": "Not rated", "rated": False}))
    table, _ = peers.load_store(store)
    head = peers.rank(head_for(80, gemm=700), {"provider": "me", "run_id": "x"}, table)
    assert [(m["peers"]["n"], m["peers"]["percentile"]) for m in head["metrics"]] == [(6, 100.0), (6, 100.0)]


def test_rank_without_store():
    head = peers.rank(head_for(75), {"provider": "me", "run_id": "r1"}, None)
    assert all(m["peers"]["percentile"] is None for m in head["metrics"])


def test_add_replaces_the_same_run(tmp_path):
    store = str(tmp_path / "peers")
    first = peers.add(store, record("acme", "r1", 50))
    second = peers.add(store, record("acme", "r1", 60))
    assert first == second
    table, _ = peers.load_store(store)
    assert list(table.score) == [60]


def test_build_ranks_against_the_store_and_cli_lists_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(peers.ENV_STORE, raising=False)
    runs = []
    for i in range(6):
        quality = "excellent" if i % 2 else "poor"
        run_dir = make_run(tmp_path, quality, run_id="peer%d" % i, hosts=3)
        build(run_dir, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
        assert cli_main(["peers", "add", str(run_dir)]) == 0
        runs.append(run_dir)
    store = runs[0].parents[1] / "_peers"  # default: <runs root>/_peers
    assert len(list(store.glob("*.json"))) == 6
    capsys.readouterr()
    assert cli_main(["peers", "list", "--store", str(store), "--gpu", "h100-sxm"]) == 0
    out = capsys.readouterr().out
    assert "6 run(s)" in out and out.count("golden") == 6 and "Platinum" in out and "Underperforming" in out

    me = make_run(tmp_path, "excellent", run_id="me", hosts=3)
    _, _, report_dir = build(me, rubric=RUBRIC, analyst=ANALYST_GOOD, progress=False)
    doc = ratings(report_dir)
    assert doc["inputs"]["peers"]["records"] == 6
    score = next(m for m in doc["headline"] if m["id"] == "score")
    # three poor peers below, three excellent ones tied at 100: (3 + 1.5) / 6
    assert score["value"] == 100.0 and score["peers"]["n"] == 6
    assert score["peers"]["percentile"] == pytest.approx(75.0)
    assert "| Overall score | 100 /100 | 6 | 75 |" in (Path(report_dir) / "report.md").read_text()
    assert (Path(report_dir) / "report.html").read_text().count('id="headline"') == 1


def test_headline_metric_from_results_respects_labels_and_backends(tmp_path):
    from probes.artifact import Artifact
    from reports.load import run_of_artifacts

    docs = []
    for host, backend in (("n1", "cuda"), ("n2", "cuda"), ("n3", "cpu")):
        art = Artifact("gemm", "r", host)
        art.device.update(backend=backend)
        for gpu, value in enumerate((700.0, 710.0)):
            art.add("tflops", value + (0 if host != "n2" else 20), "TFLOP/s", gpu=gpu, dtype="bf16")
            art.add("tflops", 1400.0, "TFLOP/s", gpu=gpu, dtype="fp8")
        docs.append(art.to_dict())
    run = run_of_artifacts(docs)
    spec = {"id": "g", "probe": "gemm", "metric": "tflops", "labels": {"dtype": "bf16"}, "backends": ["cuda"],
            "agg": "median", "better": "higher"}
    value, n, why = peers.metric_value(run, spec)
    assert (value, n, why) == (float(np.median([700, 710, 720, 730])), 4, None)
    assert peers.metric_value(run, dict(spec, agg="max", scale=1e-3))[0] == pytest.approx(0.73)  # PFLOP/s
    value, n, why = peers.metric_value(run, dict(spec, backends=["rocm"]), backend="cuda")
    assert value is None and why == "backend=cuda: ranked only for rocm"


def _run_of_model(base, model, run_id, gemm, monkeypatch, provider="golden"):
    """A golden run whose GPUs report `model` (node_info and the GEMM artifact) and measure `gemm` TFLOP/s BF16 on
    every GPU: the shape of a run on a GPU gpus.yml may not list."""
    import rating_runs

    monkeypatch.setattr(rating_runs, "MODEL", model)
    run_dir = make_run(base, "excellent", run_id=run_id, provider=provider,
                       host_overrides={h: {"gemm": gemm} for h in ("gn1", "gn2", "gn3", "gn4")})
    for path in run_dir.glob("artifacts/*/golden_gemm.json"):  # the probe peers.yml ranks (gemm)
        doc = json.loads(path.read_text())
        doc.update(probe="gemm")
        doc["device"]["model"] = model
        (path.parent / "gemm.json").write_text(json.dumps(doc))
        path.unlink()
    return run_dir


def _gemm_peers(report_dir):
    doc = ratings(report_dir)
    return doc["run"], next(m for m in doc["headline"] if m["id"] == "gemm_bf16_tflops")


def test_a_gpu_gpus_yml_does_not_list_is_ranked_only_among_runs_that_reported_the_same_name(tmp_path, monkeypatch):
    store = str(tmp_path / "peers")
    h800 = _run_of_model(tmp_path, "NVIDIA H800 80GB HBM3", "h800", 700, monkeypatch, provider="px")
    _, _, report_dir = build(h800, rubric=RUBRIC, peer_store=store, progress=False)
    doc = ratings(report_dir)
    assert doc["run"]["gpu_model_key"] is None  # neither H800 nor L40S is in gpus.yml
    for i in range(5):  # five H800 runs stored, ~700 TFLOP/s
        peers.add(store, dict(doc, run=dict(doc["run"], run_id="h800-%d" % i)))
    l40s = _run_of_model(tmp_path, "NVIDIA L40S", "l40s", 180, monkeypatch, provider="py")
    _, _, report_dir = build(l40s, rubric=RUBRIC, peer_store=store, progress=False)
    run, gemm = _gemm_peers(report_dir)
    assert (run["gpu_model"], run["gpu_model_key"], gemm["value"]) == ("NVIDIA L40S", None, 179.0)
    # before: n 5, percentile 0.0 against a "peer median" of 701 (the H800s were its peers, all under "none")
    assert gemm["peers"]["n"] == 0 and gemm["peers"]["percentile"] is None and "median" not in gemm["peers"]
    assert gemm["peers"]["model"] == "NVIDIA L40S"
    # five runs that reported the same name are its peers
    doc = ratings(report_dir)
    for i, value in enumerate((170.0, 175.0, 185.0, 190.0, 195.0)):
        head = [dict(m, value=value) if m["id"] == "gemm_bf16_tflops" else m for m in doc["headline"]]
        peers.add(store, dict(doc, run=dict(doc["run"], provider="pz", run_id="l40s-%d" % i), headline=head))
    _, _, report_dir = build(l40s, rubric=RUBRIC, peer_store=store, progress=False)
    _, gemm = _gemm_peers(report_dir)
    assert gemm["peers"]["n"] == 5 and gemm["peers"]["median"] == 185.0 and gemm["peers"]["percentile"] == 40.0


def test_a_gpu_run_without_a_reported_model_has_no_peers_and_says_why(tmp_path, monkeypatch):
    store = str(tmp_path / "peers")
    h800 = _run_of_model(tmp_path, "NVIDIA H800 80GB HBM3", "h800", 700, monkeypatch, provider="px")
    _, _, report_dir = build(h800, rubric=RUBRIC, peer_store=store, progress=False)
    doc = ratings(report_dir)
    for i in range(5):
        peers.add(store, dict(doc, run=dict(doc["run"], run_id="h800-%d" % i)))
    # an L40S run whose node inventory did not come back: no GPU model reported, the GEMM still measured on cuda
    l40s = _run_of_model(tmp_path, "NVIDIA L40S", "l40s", 180, monkeypatch, provider="py")
    for path in l40s.glob("artifacts/*/node_info.json"):
        path.unlink()
    _, _, report_dir = build(l40s, rubric=RUBRIC, peer_store=store, progress=False)
    run, gemm = _gemm_peers(report_dir)
    assert (run["gpu_model"], run["gpu_model_key"], run["backend"]) == (None, None, "cuda")
    # before: the H800 runs were its peers ("none" == "none"): percentile 0.0, peer median 701
    assert gemm["peers"] == {"n": 0, "model": None, "backend": "cuda", "percentile": None,
                             "reason": "GPU model not in gpus.yml"}
    assert ("| BF16 GEMM per GPU (median over GPUs and shapes) | 179 TFLOP/s | 0 | – | – | GPU model not in gpus.yml |"
            in (Path(report_dir) / "report.md").read_text())
    assert "GPU model not in gpus.yml" in (Path(report_dir) / "report.html").read_text()


def test_peers_list_names_and_filters_a_gpu_gpus_yml_does_not_list_as_ranking_matches_it(tmp_path, monkeypatch,
                                                                                           capsys):
    store = str(tmp_path / "peers")
    for model, run_id in (("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA L40S", "l40s")):
        run_dir = _run_of_model(tmp_path, model, run_id, 700, monkeypatch, provider="p-" + run_id)
        build(run_dir, rubric=RUBRIC, progress=False)
        assert cli_main(["peers", "add", str(run_dir), "--store", store]) == 0
        doc = ratings(run_dir / "report")
        peers.add(store, dict(doc, run=dict(doc["run"], provider="q-" + run_id)))
    cpu = record("cpu", "r", 10)
    peers.add(store, dict(cpu, run=dict(cpu["run"], gpu_model=None, gpu_model_key=None, backend="cpu")))
    table, _ = peers.load_store(store)
    # the two L40S runs are each other's peers: ranked under the name their hosts reported
    l40s = dict(head_for(75, model=None), gpu_model="NVIDIA L40S")
    assert peers.rank(l40s, {"provider": "me", "run_id": "x"}, table)["metrics"][0]["peers"]["n"] == 2
    capsys.readouterr()
    cli_main(["peers", "list", "--store", store])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    # before: the L40S rows' GPU column was "nan" (a key column mixing None with keys), never their model
    assert [r[:2] + [" ".join(r[2:-3])] for r in rows] == [
        ["p-h100", "h100", "H100-SXM"], ["q-h100", "h100", "H100-SXM"],
        ["p-l40s", "l40s", "NVIDIA L40S"], ["q-l40s", "l40s", "NVIDIA L40S"], ["cpu", "r", "none"]]
    # before: "0 run(s) with GPU model NVIDIA L40S", and --gpu none listed the L40S runs as having no GPU
    assert cli_main(["peers", "list", "--store", store, "--gpu", "nvidia l40s"]) == 0
    out = capsys.readouterr().out
    assert "2 run(s) with GPU model nvidia l40s" in out and "p-l40s" in out and "q-l40s" in out
    cli_main(["peers", "list", "--store", store, "--gpu", "none"])
    out = capsys.readouterr().out
    assert "1 run(s) with GPU model none" in out and "cpu " in out and "l40s" not in out
