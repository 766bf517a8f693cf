"""The training probe's torchtitan engine (probes/training/titan.py) end to end on this machine: two "nodes" are
probe processes on loopback, each running its one-node world and then the two-node world, every rank running
`torchtitan.train.main()` inside the world's process group. torchtitan itself cannot run on the CPU, so the ranks
import a stand-in package (tests/fixtures/torchtitan/standin) that logs a real H200 capture's lines through the root
logger the way torchtitan does, with a real all_reduce per step. The engine choice is tested against the real
facts of this machine (torchtitan is not installed in the probe venv)."""

from pathlib import Path

import pytest
from free_ports import free_port
from test_network_probes_local import leftovers, run_nodes

from probes.artifact import Artifact
from probes.training import titan, torchtitan_log
from probes.training.training import agree_engine, choose_engine
from reports.phases.training import section

STANDIN = Path(__file__).resolve().parent.parent / "fixtures" / "torchtitan" / "standin"
CAPTURE = STANDIN.parent / "h200_llama3_debugmodel_rank0_2025-11.log"


def _capture_steps():
    return torchtitan_log.parse(CAPTURE.read_text())["steps"]


@pytest.fixture(scope="module")
def titan_two_nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp("titan")
    mp = pytest.MonkeyPatch()
    mp.setenv("PYTHONPATH", str(STANDIN))
    try:
        params = {"job": "dense", "engine": "torchtitan", "port": free_port(), "steps": 4, "warmup_steps": 1,
                  "torchtitan": {"tokenizer": "/models/llama3-tokenizer", "dataset": "c4", "compile": False}}
        docs = run_nodes("training", out, params, ["a", "b"], timeout=240)
    finally:
        mp.undo()
    return out, docs


def _by(doc, metric):
    return {r["labels"]["nodes"]: r["value"] for r in doc["results"] if r["metric"] == metric}


def test_torchtitan_runs_in_every_rank_of_each_world_and_its_own_step_lines_are_the_measurements(titan_two_nodes):
    out, docs = titan_two_nodes
    steps = _capture_steps()  # the stand-in logs the capture's step lines 1..5 for steps 1..5
    for host, doc in docs.items():
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert facts["engine"] == "torchtitan" and facts["torchtitan"] is None
        assert facts["world_sizes_run"] == "1,2" and facts["failures"] == []
        # the trainer's argv, as torchtitan_cmd builds it: the job's config, 1 warm-up + 4 timed steps, FSDP over
        # every rank, a step line per step, no profiler, the given tokenizer and dataset
        argv = facts["torchtitan_argv"]
        assert argv.startswith("-m torchtitan.train --module llama3 --config llama3_8b --training.steps 5 ")
        for part in ("--lr_scheduler.warmup_steps 1", "--dataloader.dataset c4",
                     "--parallelism.data_parallel_shard_degree=-1", "--compile.no-enable",
                     "--profiler.no-enable-profiling", "--metrics.log_freq 1", "--debug.no-enable-structured-logging",
                     "--hf_assets_path /models/llama3-tokenizer"):
            assert part in argv, part
        # what torchtitan said of itself, read from its log as it was written
        said = facts["torchtitan_log"]
        assert said["version"] == "standin" and said["peak_flops"] == 9.89e14 and said["gpu_name"] == "NVIDIA H200"
        assert facts["torchtitan_unread_step_lines"] is None
        # the loss curve is torchtitan's: steps 0..4 are its steps 1..5
        for nodes in (1, 2):
            curve = sorted((r["labels"]["step"], r["value"]) for r in doc["results"]
                           if r["metric"] == "loss" and r["labels"]["nodes"] == nodes)
            assert curve == [(i, steps[i]["loss"]) for i in range(5)], (host, nodes)
        assert _by(doc, "loss_first") == {1: 8.0277, 2: 8.0277} and _by(doc, "loss_last") == {1: 5.1762, 2: 5.1762}
        # tokens/s per GPU: the timed steps' (2..5) tokens over their seconds, from torchtitan's tps: every step has
        # the same tokens, so the harmonic mean of its tps
        tps = 4 / sum(1 / s["tps"] for s in steps[1:5])
        assert _by(doc, "tokens_per_s_per_gpu") == {1: pytest.approx(tps, rel=1e-5), 2: pytest.approx(tps, rel=1e-5)}
        mfu = sum(s["mfu_pct"] for s in steps[1:5]) / 4
        assert _by(doc, "torchtitan_mfu_pct") == {1: pytest.approx(mfu, rel=1e-5), 2: pytest.approx(mfu, rel=1e-5)}
        # memory as the torch job measures it (on the CPU the rank's peak RSS: torch and its tensors, over 50 MiB)
        assert all(v > 50 << 20 for v in _by(doc, "peak_memory_bytes").values())
        # step times are this rank's wall clock between step lines: the stand-in's all_reduce and 50 ms sleep
        for r in doc["results"]:
            if r["metric"] == "step_seconds":
                assert 0.04 < r["value"] < 30, r
        assert all(v > 0 for v in _by(doc, "time_to_first_step_s").values())
        # the report says which engine ran, and how
        text = "".join(p if isinstance(p, str) else p.text for p in section.describe(doc))
        assert "Engine torchtitan," in text and text.endswith(
            " torchtitan standin ran as `python %s`." % argv), text
        log = (out / host / "training.n2.log").read_text()
        assert "Process group destroyed" in log and "step:  5" in log
    assert not leftovers(str(out))
    # the dump folders torchtitan was given were in the run's work directory, removed with it
    assert not list(out.glob("**/*.titan"))


def test_the_moe_under_torchtitan_gives_each_world_its_expert_parallel_degree(tmp_path, monkeypatch):
    """The MoE job's worlds of 1 and 2 nodes: torchtitan is started with expert parallelism over every rank of the
    world (1, then 2) and without CUDA graphs, which 0.3.0 refuses with its all-to-all dispatcher."""
    monkeypatch.setenv("PYTHONPATH", str(STANDIN))
    params = {"job": "moe", "engine": "torchtitan", "port": free_port(), "steps": 2, "warmup_steps": 1,
              "torchtitan": {"tokenizer": "/models/t", "dataset": "c4"}}
    docs = run_nodes("training", tmp_path, params, ["a", "b"], timeout=200)
    for doc in docs.values():
        assert doc["status"] == "ok", doc["reason"]
        assert doc["facts"]["world_sizes_run"] == "1,2" and doc["facts"]["experts_per_rank"] == 4
        # the facts keep the last world's command line: 2 ranks, 2 expert-parallel ranks
        argv = doc["facts"]["torchtitan_argv"]
        assert "--module gpt_oss --config gpt_oss_20b " in argv and "--parallelism.expert_parallel_degree 2" in argv
        assert "--training.disable_cuda_graphs" in argv
        assert sorted(_by(doc, "loss_last")) == [1, 2]
    assert not leftovers(str(tmp_path))


def test_a_rank_killed_mid_training_under_torchtitan_is_named_with_its_host_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(STANDIN))
    params = {"job": "dense", "engine": "torchtitan", "port": free_port(), "steps": 6, "warmup_steps": 1,
              "world_sizes": [2], "stall_timeout": 20, "launch_timeout": 120,
              "torchtitan": {"tokenizer": "/models/t"}, "fault": {"nodes": 2, "rank": 1, "after_steps": 3,
                                                                   "mode": "kill"}}
    docs = run_nodes("training", tmp_path, params, ["a", "b"], timeout=200)
    for doc in docs.values():
        assert doc["status"] == "error"
        failure = doc["facts"]["failures"][0]
        # the killed rank is named first, with its host, signal and step; rank 0 then lost its peer (gloo's error)
        assert failure["kind"] == "crash" and failure["nodes"] == 2 and 1 in failure["stuck_ranks"]
        assert failure["message"].startswith("crash at 2 nodes: rank 1 on b was killed by signal 9 in step 3"), \
            failure["message"]
    # the steps torchtitan logged before the kill are kept
    steps = [r["labels"]["step"] for r in docs["a"]["results"] if r["metric"] == "loss"]
    assert steps[:3] == [0, 1, 2]
    # ... but they are no loss curve, pace or MFU of the job: the world did not finish (before, its loss and a
    # step-time cv of three steps passed training.dense_loss and training.dense_step_variance)
    for doc in docs.values():
        assert doc["facts"]["unfinished_worlds"] == [2]
        assert not [r for r in doc["results"] if r["metric"] in (
            "loss_first", "loss_last", "step_time_mean_s", "step_time_cv", "tokens_per_s_per_gpu",
            "torchtitan_mfu_pct")]
    assert not leftovers(str(tmp_path))


def test_the_engine_is_chosen_from_what_the_node_has():
    on_gpu = {"engine": "auto", "torchtitan": {"tokenizer": "/"}}
    # this machine's probe venv has no torchtitan: the torch job runs, and says why
    engine, why = choose_engine(on_gpu, gpu=True)
    assert engine == "torch-fsdp2" and why.startswith("not importable by ")
    assert choose_engine(dict(on_gpu, engine="torch"), gpu=True) == ("torch-fsdp2", "not asked for (engine torch)")


def test_the_engine_is_chosen_from_what_the_node_has_where_torchtitan_is_importable(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(STANDIN))
    assert choose_engine({"engine": "auto", "torchtitan": {"tokenizer": str(tmp_path)}}, gpu=True) == (
        "torchtitan", None)
    assert choose_engine({"engine": "auto", "torchtitan": {"tokenizer": str(tmp_path)}}, gpu=False) == (
        "torch-fsdp2", "cannot run on the CPU backend (it sets a CUDA device unconditionally)")
    assert choose_engine({"engine": "auto", "torchtitan": {}}, gpu=True) == (
        "torch-fsdp2", "no tokenizer given (training_torchtitan_tokenizer_path: its hf_assets_path)")
    assert choose_engine({"engine": "auto", "torchtitan": {"tokenizer": str(tmp_path / "no")}}, gpu=True) == (
        "torch-fsdp2", "tokenizer directory %s is not on this node" % (tmp_path / "no"))
    assert choose_engine({"engine": "torchtitan", "torchtitan": {}}, gpu=False) == ("torchtitan", None)


def test_the_moe_world_gives_every_rank_an_expert_parallel_rank():
    cfg = {"job": "moe", "world": 4, "warmup_steps": 2, "steps": 10, "local_batch": 1, "seq_len": 8192,
           "dump_folder": "/w/d", "torchtitan": {"tokenizer": "/t", "dataset_path": "/data/c4"}}
    args = titan.trainer_args(cfg)
    assert args[:4] == ["--module", "gpt_oss", "--config", "gpt_oss_20b"]
    joined = " ".join(args)
    assert "--training.steps 12 " in joined and "--parallelism.expert_parallel_degree 4" in joined
    # 0.3.0's config refuses CUDA graphs with expert parallelism's all-to-all dispatcher (found by its own parser)
    assert "--training.disable_cuda_graphs" in args
    assert "--dataloader.dataset c4 --dataloader.dataset_path /data/c4" in joined


class _Met:
    """What drive() hands agree_engine once the nodes have met: the hosts and a mesh whose allgather returns every
    node's choose_engine answer in rank order."""

    def __init__(self, answers):
        self.hosts = ["a", "b"]
        self.mesh = type("Mesh", (), {"allgather": lambda _, value, timeout: answers})()


def test_a_world_runs_one_engine_torchtitan_only_where_every_node_chose_it():
    settings = {"entry": "probes.training.titan:train", "rdzv_timeout": 30}
    art = Artifact("training", "r", "a", variant="dense")
    art.facts.update(engine="torchtitan", torchtitan=None)
    why = "tokenizer directory /models/t is not on this node"
    agree_engine(art, _Met([{"engine": "torchtitan", "why": None}, {"engine": "torch-fsdp2", "why": why}]),
                 settings, "torchtitan", None)
    assert settings["entry"] == "probes.training.job:train" and art.facts["engine"] == "torch-fsdp2"
    assert art.facts["torchtitan"] == "not on every node: b: " + why
    both = {"entry": "probes.training.titan:train", "rdzv_timeout": 30}
    agree_engine(art, _Met([{"engine": "torchtitan", "why": None}] * 2), both, "torchtitan", None)
    assert both["entry"] == "probes.training.titan:train"


def test_an_engine_asked_for_that_cannot_run_is_an_error_before_any_rank_starts(tmp_path):
    from probes.cli import run_probe  # noqa: PLC0415

    _, doc = run_probe("training", str(tmp_path), "r1", "a", params={"job": "dense", "engine": "torchtitan"})
    assert doc["status"] == "error"
    assert doc["reason"].startswith("engine torchtitan asked for, but torchtitan is not importable by ")
