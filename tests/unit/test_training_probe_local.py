"""The training probe end to end on this machine, without the SSH test cluster: two "nodes" are probe processes
on loopback, each running its one-node world and then the two-node world, through the worlds of
probes/common/worlds.py and the job of probes/training/job.py."""

import pytest
from free_ports import free_port
from test_network_probes_local import leftovers, run_nodes

from probes.cli import run_probe


@pytest.fixture(scope="module")
def moe_two_nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp("training")
    params = {"job": "moe", "port": free_port(), "steps": 4, "warmup_steps": 1}
    return out, run_nodes("training", out, params, ["a", "b"], timeout=240)


def _by(doc, metric):
    return {r["labels"]["nodes"]: r["value"] for r in doc["results"] if r["metric"] == metric}


def test_the_moe_trains_at_one_and_two_nodes_and_its_loss_falls(moe_two_nodes):
    out, docs = moe_two_nodes
    for doc in docs.values():
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert facts["world_sizes_run"] == "1,2" and facts["failures"] == [] and facts["launcher"] == "direct"
        assert facts["engine"] == "torch-fsdp2" and facts["torch_backend"] == "gloo" and facts["dtype"] == "float32"
        # the facts of the model are those of the last world: 8 experts over its 2 ranks
        assert facts["data"].startswith("synthetic:") and facts["experts_per_rank"] == 4
        # 8 experts, top 2: a token touches a quarter of the expert weights
        assert facts["embedding_params"] == 512 * 64 and facts["params"] > facts["active_params"] > 0
        first, last = _by(doc, "loss_first"), _by(doc, "loss_last")
        assert set(first) == {1, 2} and all(last[n] < first[n] for n in (1, 2)), (first, last)
        steps = sorted(r["labels"]["step"] for r in doc["results"] if r["metric"] == "loss"
                       and r["labels"]["nodes"] == 2)
        assert steps == [0, 1, 2, 3, 4]
        share = _by(doc, "alltoall_share")
        assert share[1] == 0 and 0 < share[2] < 1  # one rank keeps its experts; two send tokens to each other
        assert all(v > 0 for v in _by(doc, "tokens_per_s_per_gpu").values())
        assert all(v > 0 for v in _by(doc, "time_to_first_step_s").values())
        assert all(v > 0 for v in _by(doc, "peak_memory_bytes").values())
    # the two-node world's loss is the global mean: the same on both nodes, step by step
    curves = [[r["value"] for r in doc["results"] if r["metric"] == "loss" and r["labels"]["nodes"] == 2]
              for doc in docs.values()]
    assert curves[0] == curves[1]
    assert not leftovers(str(out))


def test_experts_that_cannot_be_split_over_the_ranks_are_refused_before_any_rank_starts(tmp_path):
    _, doc = run_probe("training", str(tmp_path), "r1", "a", params={"job": "moe", "cpu_procs_per_node": 3})
    assert doc["status"] == "error"
    assert doc["reason"] == ("params: 1 node (3 ranks): 8 experts cannot be split over 3 ranks (n_experts must be "
                             "a multiple of a world's rank count)")


def test_a_world_whose_ranks_cannot_split_the_experts_is_not_run_and_says_why(tmp_path):
    """Three nodes, two experts: the 2-node world splits them, the 1-node world keeps both, the 3-node world
    cannot; it is left out with the reason and the others run."""
    model = {"layers": 1, "dim": 32, "n_heads": 2, "n_kv_heads": 1, "ffn_dim": 64, "vocab": 128, "n_experts": 2,
             "top_k": 1, "moe_ffn_dim": 32}
    docs = run_nodes("training", tmp_path, {"job": "moe", "port": free_port(), "steps": 1, "warmup_steps": 0,
                                            "model": model, "world_sizes": [2, 3]}, ["a", "b", "c"], timeout=240)
    for doc in docs.values():
        assert doc["facts"]["world_sizes_not_run"] == ["3 nodes (3 ranks): 2 experts cannot be split over 3 ranks"]
        assert doc["facts"]["world_sizes"] == "2,3"
    assert docs["a"]["status"] == "ok" and docs["a"]["facts"]["world_sizes_run"] == "2"
    assert docs["c"]["facts"]["world_sizes_run"] == ""
