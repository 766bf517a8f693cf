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


def graded_rows(docs, ids):
    """The rows of the rubric checks ids on these artifacts, as the controller grades them."""
    rubric = load_rubric()
    return [r for r in grade(run_of_artifacts(list(docs)), dict(rubric, checks=[c for c in rubric["checks"]
                                                                              if c["id"] in ids]))
            if r["check_id"] in ids]


def test_a_load_killed_before_it_was_verified_is_an_error_of_the_integrity_check_not_a_pass(tmp_path):
    """Rank 1 of the node's world killed as its dcp.load starts (the probe's fault injection): nothing of that world's
    load was checked against what was saved. Before, storage.ckpt_integrity (critical) graded the torch.save match
    alone and passed "0 mismatches"; the world is an error row naming it and its failure."""
    tier = dict(shared_tier(tmp_path), shared=False)
    params = {"tier": tier, "size_mib": 2, "tensors": 2, "cpu_procs_per_node": 2, "launch_timeout": 120,
              "stall_timeout": 60, "fault": {"rank": 1, "nodes": 1, "after_steps": 2, "mode": "kill"}}
    _, doc = run_probe("checkpoint", str(tmp_path / "out"), "r1", "h1", variant="shared", params=params, timeout=300)
    assert doc["status"] == "error"
    assert [r["value"] for r in rows(doc, "ckpt_load_mismatch")] == [0]  # torch.save's: DCP's load never ended
    assert doc["facts"]["dcp_load_matches"] is None
    graded = graded_rows([doc], {"storage.ckpt_integrity", "storage.dcp_save"})
    [integrity] = [r for r in graded if r["check_id"] == "storage.ckpt_integrity"]
    assert integrity["status"] == "error", integrity
    assert integrity["subject"] == "tier=shared" and "DCP load not verified at 1 node" in integrity["observed"]
    assert "rank 1 on h1 was killed by signal 9 in load (step 2)" in integrity["reason"]
    assert [r["status"] for r in graded if r["check_id"] == "storage.dcp_save"] == ["error"]
    assert files_left(tier) == []


def test_a_shard_that_lost_its_tail_fails_the_integrity_check_with_the_loads_error(tmp_path):
    """Rank 1's shard file truncated to half between save and load (the DCP job's fault truncate_shard: what a
    filesystem losing data gives). dcp.load raises (EOFError reading the shard, in every rank: DCP gathers the
    read's failures) rather than loading wrong numbers, so no comparison was ever made. Before, nothing was recorded
    for that load and storage.ckpt_integrity passed on torch.save's match; a load that raised on the checkpoint's
    data is a mismatch of each rank whose load it was, and the row names the world and the error."""
    tier = dict(shared_tier(tmp_path), shared=False)
    params = {"tier": tier, "size_mib": 2, "tensors": 2, "cpu_procs_per_node": 2, "launch_timeout": 120,
              "stall_timeout": 60, "fault": {"rank": 1, "nodes": 1, "mode": "truncate_shard"}}
    _, doc = run_probe("checkpoint", str(tmp_path / "out"), "r1", "h1", variant="shared", params=params, timeout=300)
    assert doc["status"] == "error"
    assert doc["facts"]["dcp_load_matches"] is False
    dcp = rows(doc, "ckpt_load_mismatch", method="dcp")
    assert sorted((r["labels"]["rank"], r["value"]) for r in dcp) == [(0, 1), (1, 1)]
    assert rows(doc, "ckpt_save_gbps", method="dcp") == []  # a rank's rates are recorded with its verified load
    [lost] = [e for e in doc["facts"]["dcp_load_errors"] if e["rank"] == 1]
    assert lost["nodes"] == 1 and lost["on_data"] is True and "EOFError" in lost["error"], lost
    [integrity] = graded_rows([doc], {"storage.ckpt_integrity"})
    assert (integrity["status"], integrity["observed"]) == ("fail", "2 mismatches"), integrity
    assert "1 node" in integrity["reason"] and "EOFError" in integrity["reason"], integrity
    assert files_left(tier) == []


def test_a_world_of_one_node_that_failed_is_named_beside_the_largest_world(tmp_path):
    """Two nodes on a shared tier, the one rank of each node's own world killed in its load, the world of both nodes
    fine. Before, storage.dcp_save graded the largest world alone and storage.ckpt_integrity the loads that were
    verified: both passed, the failed worlds dropped without a word. Now each is an error row naming the world."""
    tier = shared_tier(tmp_path)
    params = {"tier": tier, "size_mib": 2, "tensors": 2, "port": free_port(), "sync_port": free_port(),
              "launch_timeout": 120, "stall_timeout": 60, "connect_timeout": 60,
              "fault": {"rank": 0, "nodes": 1, "after_steps": 2, "mode": "kill"}}
    docs = run_nodes("checkpoint", tmp_path / "out", params, ["a", "b"], timeout=300)
    for doc in docs.values():
        assert doc["status"] == "error" and doc["facts"]["world_sizes_run"] == "1,2"
        assert [f["nodes"] for f in doc["facts"]["failures"]] == [1]
        assert {r["labels"]["nodes"] for r in rows(doc, "ckpt_bytes", method="dcp")} == {2}
    graded = graded_rows(docs.values(), {"storage.dcp_save", "storage.ckpt_integrity"})
    for host in ("a", "b"):
        save = {r["subject"]: r for r in graded if r["check_id"] == "storage.dcp_save" and r["host"] == host}
        assert set(save) == {"tier=shared nodes=1", "tier=shared nodes=2"}, save
        # the largest world graded on its rate (a loaded machine may save below the floor)
        graded_world = save["tier=shared nodes=2"]
        assert graded_world["status"] in ("pass", "warn", "fail") and graded_world["observed"].endswith("GB/s")
        assert save["tier=shared nodes=1"]["status"] == "error"
        assert "rank 0 on %s was killed by signal 9 in load (step 2)" % host in save["tier=shared nodes=1"]["reason"]
        [integrity] = [r for r in graded if r["check_id"] == "storage.ckpt_integrity" and r["host"] == host]
        assert integrity["status"] == "error" and "not verified at 1 node" in integrity["observed"], integrity
    assert files_left(tier) == []
