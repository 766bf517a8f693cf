"""probes/training/job.py for real, small: tiny dense and MoE models trained on gloo by 2 spawned ranks (and the MoE
by 1), the records each rank emits checked for their keys, a falling loss and timed all_to_all calls."""

import json
import math
import socket
import struct

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from probes.common.rank import exit_now
from probes.training import job, models

TINY = {"layers": 2, "dim": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 128, "vocab": 256,
        "n_experts": 4, "top_k": 2, "moe_ffn_dim": 64}
STEPS, WARMUP = 6, 2
STEP_KEYS = {"type", "rank", "step", "t", "warmup", "seconds", "loss", "tokens", "peak_memory_bytes", "grad_norm"}
SETUP_KEYS = {"type", "rank", "seconds", "params", "active_params", "embedding_params", "model", "data", "dtype"}


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cfg(job_name, rank, world):
    return {"rank": rank, "world": world, "local_rank": rank, "nodes": 1, "device": "cpu", "backend": "gloo",
            "job": job_name, "model": TINY, "seq_len": 32, "local_batch": 2, "steps": STEPS, "warmup_steps": WARMUP,
            "lr": 1e-2, "seed": 7, "dtype": "float32", "data": "synthetic"}


def _expert_parallel_vs_local(rank, world):
    """The FSDP-sharded MoE with experts split over the ranks against the whole MoE in this rank, same weights, same
    tokens on every rank: (max output difference, max difference of this rank's expert gradients, whether FSDP
    sharded exactly the non-expert parameters). Every rank sends its tokens to the same experts, so an expert's
    gradient is the local one summed over the ranks: world times it."""
    cfg = models.resolve("moe", TINY)
    tokens = torch.randint(TINY["vocab"], (2, 16), generator=torch.Generator().manual_seed(3))
    torch.manual_seed(5)
    split = models.shard(models.moe(cfg, rank, world, dist, seed=5))
    torch.manual_seed(5)
    whole = models.moe(cfg, seed=5)
    outs = []
    for model in (split, whole):
        outs.append(model(tokens))
        outs[-1].square().mean().backward()
    n_local = TINY["n_experts"] // world
    mine = slice(rank * n_local, (rank + 1) * n_local)
    split_experts, whole_experts = models.expert_parameters(split), models.expert_parameters(whole)
    grads = [(s.grad - world * w.grad[mine]).abs().max().item() for s, w in zip(split_experts, whole_experts)]
    expert_ids = {id(p) for p in split_experts}
    sharded = [hasattr(p, "to_local") != (id(p) in expert_ids) for p in split.parameters()]  # DTensors have to_local
    return (outs[0] - outs[1]).abs().max().item(), max(grads), all(sharded)


def _rank(rank, world, port, jobs, out_dir):
    """One rank: every job in turn on one gloo group, its records as JSON lines in out_dir/<job>.<rank>."""
    torch.set_num_threads(1)  # two ranks share the machine's cores with whatever else runs
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    try:
        if world > 1:
            with open("%s/equivalence.%d" % (out_dir, rank), "w") as f:
                f.write(json.dumps(_expert_parallel_vs_local(rank, world)))
        for name in jobs:
            with open("%s/%s.%d" % (out_dir, name, rank), "w") as f:
                job.train(_cfg(name, rank, world), torch, dist, lambda r, f=f: f.write(json.dumps(r) + "\n"),
                          lambda *_: None)
    finally:
        dist.destroy_process_group()
    exit_now(0)  # as the probe's ranks end: the interpreter's teardown can abort with Gloo (probes/common/rank.py)


def _records(out_dir, name, world):
    return {r: [json.loads(line) for line in open("%s/%s.%d" % (out_dir, name, r))] for r in range(world)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{(job, world): {rank: records}}: dense and moe on 2 spawned ranks, moe on 1 spawned rank. Never in this
    process: once the suite has imported ansible, its patched sys.intern breaks torch's FSDP import (torch._dynamo's
    substitute_in_graph refuses the patch), as it would in any process that imports both."""
    pair, single = str(tmp_path_factory.mktemp("w2")), str(tmp_path_factory.mktemp("w1"))
    mp.spawn(_rank, args=(2, _free_port(), ("dense", "moe"), pair), nprocs=2)
    mp.spawn(_rank, args=(1, _free_port(), ("moe",), single), nprocs=1)
    found = {(name, 2): _records(pair, name, 2) for name in ("dense", "moe")}
    found[("moe", 1)] = _records(single, "moe", 1)
    found["equivalence"] = [json.load(open("%s/equivalence.%d" % (pair, r))) for r in range(2)]
    return found


@pytest.mark.parametrize("key", [("dense", 2), ("moe", 2), ("moe", 1)], ids=lambda k: "%s-%d" % k)
def test_every_rank_emits_setup_steps_and_summary(runs, key):
    name, world = key
    for rank, records in runs[key].items():
        setup, steps, summary = records[0], records[1:-1], records[-1]
        extra = {"experts_per_rank"} if name == "moe" else set()
        assert set(setup) == SETUP_KEYS | extra and setup["rank"] == rank and setup["seconds"] > 0
        assert setup["data"].startswith("synthetic: ") and setup["model"]["n_kv_heads"] == 2
        extra = {"alltoall_seconds"} if name == "moe" else set()
        assert [set(s) for s in steps] == [STEP_KEYS | extra] * (WARMUP + STEPS)
        assert [(s["step"], s["warmup"]) for s in steps] == [(i, i < WARMUP) for i in range(WARMUP + STEPS)]
        assert all(s["seconds"] > 0 and s["tokens"] == 64 and s["peak_memory_bytes"] > 0 for s in steps)
        assert summary == {"type": "summary", "rank": rank, "steps": STEPS,
                           "tokens_per_s": pytest.approx(64 * STEPS / sum(s["seconds"] for s in steps[WARMUP:]))}


@pytest.mark.parametrize("key", [("dense", 2), ("moe", 2), ("moe", 1)], ids=lambda k: "%s-%d" % k)
def test_the_loss_falls_and_is_the_same_on_every_rank(runs, key):
    losses = [[s["loss"] for s in records[1:-1]] for records in runs[key].values()]
    assert all(rank == pytest.approx(losses[0]) for rank in losses)  # the mean over ranks, everywhere
    assert losses[0][0] == pytest.approx(math.log(256), rel=0.1)  # untrained: about uniform over the vocab
    assert losses[0][-1] < losses[0][0] - 0.5


def test_moe_all_to_all_is_timed_across_ranks_and_absent_alone(runs):
    assert all(s["alltoall_seconds"] > 0 for records in runs[("moe", 2)].values() for s in records[1:-1])
    assert all(s["alltoall_seconds"] == 0 for s in runs[("moe", 1)][0][1:-1])
    per_rank = [records[0]["experts_per_rank"] for key in (("moe", 2), ("moe", 1)) for records in runs[key].values()]
    assert per_rank == [2, 2, 4]


def test_expert_parallel_moe_computes_what_the_whole_moe_does(runs):
    assert all(out < 1e-5 and grad < 1e-5 and sharded for out, grad, sharded in runs["equivalence"])


@pytest.mark.parametrize("shared,head_dim", [(0, None), (1, None), (0, 24)])
def test_param_counts_match_the_built_models(shared, head_dim):
    # head_dim 24 over dim 64 and 4 heads: its own number, as GPT-OSS's 64 heads of 64 over dim 2880
    extra = {"head_dim": head_dim} if head_dim else {}
    for name in ("dense", "moe"):
        cfg = models.resolve(name, dict(TINY, n_shared_experts=shared, **extra))
        if head_dim:
            model = models.llama(cfg) if name == "dense" else models.moe(cfg)
            assert model.layers[0].attention.wq.weight.shape == (4 * 24, 64)
            assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, TINY["vocab"])
        model = models.llama(cfg) if name == "dense" else models.moe(cfg)
        counts = models.param_counts(cfg, 1)
        assert counts["params"] == sum(p.numel() for p in model.parameters())
        assert counts["embedding"] == model.tok_embeddings.weight.numel()
        if name == "moe":
            expert = sum(p.numel() for p in models.expert_parameters(model))
            assert counts["expert_params"] == expert
            assert counts["active_params"] == counts["params"] - expert + expert * TINY["top_k"] // TINY["n_experts"]


def test_setup_record_counts_come_from_the_formula(runs):
    setup = runs[("moe", 2)][0][0]
    counts = models.param_counts(setup["model"], 2)
    assert (setup["params"], setup["active_params"], setup["embedding_params"]) == \
        (counts["params"], counts["active_params"], 256 * 64)


def test_file_data_is_read_in_rank_windows(tmp_path):
    path = tmp_path / "tokens.bin"
    path.write_bytes(struct.pack("<1000H", *range(1000)))
    cfg = dict(_cfg("dense", 1, 2), data=str(path), seq_len=9, local_batch=2)
    batches, text = job._data(cfg, torch, 256)
    first, second = next(batches), next(batches)
    assert text == str(path) and first.dtype == torch.int64 and first.shape == (2, 10)
    assert first.flatten().tolist() == list(range(20, 40))  # window 1 of 20 tokens: rank 1's first
    assert second[0, 0].item() == 60  # window 3: every other window
