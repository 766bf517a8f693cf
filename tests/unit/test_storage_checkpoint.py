"""The checkpoint probe for real on this machine: torch.save in the probe, DCP in worlds of torch ranks
(probes/common/worlds.py, gloo on the CPU backend), on one node with two ranks and on two "nodes" (probe processes on
loopback) sharing one tier; a node that cannot run, and a rank that dies in the middle of the load."""

from pathlib import Path

import pytest
from free_ports import free_port
from test_network_probes_local import leftovers, run_nodes

from probes.cli import run_probe
from reports.grading import grade, load_rubric
from reports.load import run_of_artifacts
from reports.phases.storage.grade import _fmt
from reports.phases.storage.section import checkpoint_part
from reports.render import markdown

pytest.importorskip("torch")
MIB = 2**20


def shared_tier(tmp_path):
    path = tmp_path / "tier"
    path.mkdir(exist_ok=True)
    return {"name": "shared", "path": str(path), "shared": True}


def rows(doc, metric, **labels):
    return [r for r in doc["results"] if r["metric"] == metric
            and all(r["labels"].get(k) == v for k, v in labels.items())]


def files_left(tier):
    return sorted(str(p.relative_to(tier["path"])) for p in Path(tier["path"]).rglob("*"))


def test_one_node_with_two_ranks_saves_and_loads_one_dcp_checkpoint(tmp_path):
    tier = dict(shared_tier(tmp_path), shared=False)
    params = {"tier": tier, "size_mib": 4, "tensors": 4, "cpu_procs_per_node": 2, "launch_timeout": 120}
    _, doc = run_probe("checkpoint", str(tmp_path / "out"), "r1", "h1", variant="t", params=params, timeout=300)
    assert doc["status"] == "ok", doc["reason"]
    facts = doc["facts"]
    assert facts["dcp_mode"] == "per node (tier not shared); 2 ranks per node (CPU)"
    assert facts["torch_backend"] == "gloo" and facts["world_sizes"] == "1" and facts["world_sizes_run"] == "1"
    assert facts["dcp_load_matches"] is True and facts["torch_save_load_matches"] is True
    assert facts["dcp_files_n1"] == 3  # a .distcp file per rank and the .metadata
    per_rank = rows(doc, "ckpt_bytes", method="dcp", scope="rank")
    assert sorted(r["labels"]["rank"] for r in per_rank) == [0, 1]
    assert {r["value"] for r in per_rank} == {4 * MIB}
    assert all(r["labels"]["nodes"] == 1 and r["labels"]["ranks"] == 2 for r in per_rank)
    [node] = rows(doc, "ckpt_bytes", method="dcp", scope="node")
    assert node["value"] == 2 * 4 * MIB
    assert rows(doc, "ckpt_bytes", method="dcp", scope="aggregate") == []  # one node: its own row says it all
    assert len(rows(doc, "ckpt_save_gbps", method="dcp", scope="rank")) == 2
    assert all(r["value"] > 0 for r in rows(doc, "ckpt_load_gbps", method="dcp"))
    assert [r["value"] for r in rows(doc, "ckpt_load_mismatch")] == [0, 0, 0]  # torch.save, then both ranks
    [saved] = rows(doc, "ckpt_bytes", method="torch_save")
    assert saved["value"] >= 4 * MIB
    assert "checkpoint-t.n1.log" in doc["raw"]
    assert files_left(tier) == []
    assert leftovers(str(tmp_path / "out")) == []


def test_two_nodes_on_a_shared_tier_save_alone_then_together(tmp_path):
    tier = shared_tier(tmp_path)
    params = {"tier": tier, "size_mib": 2, "tensors": 2, "port": free_port(), "sync_port": free_port(),
              "launch_timeout": 120, "connect_timeout": 60}
    docs = run_nodes("checkpoint", tmp_path / "out", params, ["a", "b"], timeout=300)
    for host, doc in docs.items():
        assert doc["status"] == "ok", doc["reason"]
        assert doc["facts"]["dcp_mode"] == "worlds of 1, 2 nodes; 1 rank per node (CPU)"
        assert doc["facts"]["world_sizes_run"] == "1,2" and doc["facts"]["dcp_load_matches"] is True
        alone = rows(doc, "ckpt_bytes", method="dcp", nodes=1)
        assert {(r["labels"]["scope"], r["labels"].get("rank"), r["value"]) for r in alone} == {
            ("rank", 0, 2 * MIB), ("node", None, 2 * MIB)}
        together = rows(doc, "ckpt_save_gbps", method="dcp", nodes=2, scope="rank")
        assert [r["labels"]["rank"] for r in together] == [0 if host == "a" else 1]
        assert doc["facts"]["dcp_files_n2"] == 3  # one .distcp per rank of both nodes, one .metadata
    [total] = rows(docs["a"], "ckpt_bytes", method="dcp", scope="aggregate")
    assert total["value"] == 2 * 2 * MIB and total["labels"]["ranks"] == 2
    assert rows(docs["b"], "ckpt_bytes", scope="aggregate") == []  # the world's row is on the node of rank 0
    assert files_left(tier) == []
    assert leftovers(str(tmp_path / "out")) == []

    # graded and shown on the controller
    run = run_of_artifacts(list(docs.values()))
    rubric = load_rubric()
    ids = {"storage.ckpt_save", "storage.ckpt_load", "storage.dcp_save", "storage.ckpt_integrity"}
    graded = [r for r in grade(run, dict(rubric, checks=[c for c in rubric["checks"] if c["id"] in ids]))
              if r["check_id"] in ids]
    assert sorted((r["check_id"], r["host"]) for r in graded) == sorted((i, h) for i in ids for h in ("a", "b"))
    assert all(r["status"] in ("pass", "warn", "fail") and r["observed"] for r in graded), graded
    assert {r["observed"] for r in graded if r["check_id"] == "storage.ckpt_integrity"} == {"0 mismatches"}
    # DCP's save is judged on each rank's own rate in the largest world: here the host's one rank of the two-node
    # world (before, a median with its node's rows and its world alone)
    dcp = {r["host"]: r["observed"] for r in graded if r["check_id"] == "storage.dcp_save"}
    for host, doc in docs.items():
        [own] = rows(doc, "ckpt_save_gbps", method="dcp", nodes=2, scope="rank")
        assert dcp[host] == _fmt(own["value"], {"unit": "GB/s"}), (dcp, own)
    table = markdown.render(checkpoint_part(run))
    lines = [line for line in table.splitlines() if line.startswith("| a | shared | dcp")]
    assert [line.split(" | ")[3:5] for line in lines] == [["1 node, 1 rank", "node"],
                                                          ["2 nodes, 2 ranks", "aggregate"],
                                                          ["2 nodes, 2 ranks", "node"]], table
    assert "| a | shared | torch_save | – | rank |" in table
    assert "DCP mode per tier: shared: worlds of 1, 2 nodes; 1 rank per node (CPU)" in table


def test_a_node_that_cannot_run_is_named_and_the_other_runs_alone(tmp_path):
    tier = shared_tier(tmp_path)
    base = {"tier": tier, "size_mib": 2, "tensors": 2, "port": free_port(), "sync_port": free_port(),
            "launch_timeout": 120, "connect_timeout": 60}
    # b asks for far more room than any disk has
    docs = run_nodes("checkpoint", tmp_path, base, ["a", "b"], timeout=300, per_host={"b": {"space_factor": 1e9}})
    a, b = docs["a"], docs["b"]
    assert b["status"] == "skipped" and b["reason"].startswith("not enough free space")
    assert a["status"] == "ok", a["reason"]
    assert a["facts"]["dcp_mode"].startswith("per node: not every host can run (b (not enough free space")
    assert a["facts"]["world_sizes_run"] == "1"
    assert {r["labels"]["nodes"] for r in rows(a, "ckpt_bytes", method="dcp")} == {1}
    assert files_left(tier) == []


@pytest.mark.parametrize("cannot", ["a", "b"])
def test_on_a_tier_the_nodes_do_not_share_each_node_runs_alone_whoever_cannot(tmp_path, cannot):
    """Not shared: every node's DCP is its own, with no store and no barrier between the nodes, so a node that
    cannot run (the first or another) holds nobody up. Before, the others waited for it at the store until their
    rendezvous timed out, and lost their DCP."""
    tier = dict(shared_tier(tmp_path), shared=False)
    base = {"tier": tier, "size_mib": 2, "tensors": 2, "port": free_port(), "sync_port": free_port(),
            "launch_timeout": 60, "rdzv_timeout": 10, "connect_timeout": 10}
    docs = run_nodes("checkpoint", tmp_path, base, ["a", "b"], timeout=200,
                     per_host={cannot: {"space_factor": 1e9}})
    can = "b" if cannot == "a" else "a"
    assert docs[cannot]["status"] == "skipped" and docs[cannot]["reason"].startswith("not enough free space")
    assert docs[can]["status"] == "ok", docs[can]["reason"]
    facts = docs[can]["facts"]
    assert facts["dcp_mode"] == "per node (tier not shared); 1 rank per node (CPU)" and facts["world_sizes_run"] == "1"
    assert "store_errors" not in facts and facts["dcp_load_matches"] is True
    assert files_left(tier) == []


def test_a_rank_that_dies_in_the_load_is_named_and_nothing_is_left(tmp_path):
    tier = shared_tier(tmp_path)
    params = {"tier": tier, "size_mib": 2, "tensors": 2, "port": free_port(), "sync_port": free_port(),
              "launch_timeout": 120, "stall_timeout": 60, "connect_timeout": 60,
              "fault": {"rank": 1, "nodes": 2, "after_steps": 2, "mode": "kill"}}
    out = tmp_path / "out"
    docs = run_nodes("checkpoint", out, params, ["a", "b"], timeout=300)
    for doc in docs.values():
        assert doc["status"] == "error"
        [failure] = doc["facts"]["failures"]
        assert failure["nodes"] == 2
        # what was measured before stays: torch.save, and each node's world alone
        assert rows(doc, "ckpt_save_gbps", method="torch_save")[0]["value"] > 0
        assert {r["labels"]["nodes"] for r in rows(doc, "ckpt_bytes", method="dcp")} == {1}
    for doc in docs.values():  # each node names the rank that died, its host and where
        assert "crash at 2 nodes: rank 1 on b was killed by signal 9 in load (step 2)" in doc["facts"]["failures"][0][
            "message"]
    assert files_left(tier) == []  # the world's half-loaded checkpoint went with the first node's cleanup
    assert leftovers(str(out)) == []
