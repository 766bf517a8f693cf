"""The network phase over real SSH on the 4-host test cluster: gloo collectives over real TCP at world sizes 1, 2 and 4,
the pairwise TCP matrix, GPU and RDMA parts skipped with their reasons, and nothing left running on any host —
also after a rank is killed on purpose."""

import csv
import json
import sys

import pytest
from helpers import boot_seconds, run_dirs, run_everywhere, run_playbook, stray_processes

from probes.network.busbw import busbw_factor

pytestmark = pytest.mark.cluster

# Smaller than the quick profile's sweep (8 B .. 4 MiB): the same code path in fewer seconds.
SWEEP = {"quick": {"min_bytes": 8, "max_bytes": 1048576, "factor": 8, "warmup": 1, "iters": 5,
                   "max_seconds_per_size": 0.2, "launch_timeout": 180, "stall_timeout": 60, "rdzv_timeout": 90}}


@pytest.fixture(scope="module")
def network_run(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("network")
    since = boot_seconds()
    inv = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    out = tmp / "runs"
    res = run_playbook(inv, "--tags", "network", "-e", "assess_output_dir=%s" % out,
                       "-e", json.dumps({"network_collectives_profiles": SWEEP}))
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    names = sorted(h["name"] for h in test_cluster.hosts)
    docs = {(n, p): json.loads((run_dir / "artifacts" / n / ("%s.json" % p)).read_text())
            for n in names for p in ("collectives", "tcp_pairs", "nccl_tests", "perftest", "collectives-ring",
                                     "collectives-nvlink_off")}
    with open(run_dir / "report" / "checks.csv") as fh:
        checks = {(r["check_id"], r["host"]): r for r in csv.DictReader(fh)}
    return {"run_dir": run_dir, "names": names, "docs": docs, "checks": checks,
            "report": (run_dir / "report" / "report.md").read_text(), "strays": stray_processes(test_cluster, since),
            "hosts": {h["name"]: h["ip"] for h in test_cluster.hosts}}


def test_collective_curves_at_1_2_and_4_nodes(network_run):
    names, docs = network_run["names"], network_run["docs"]
    for rank, name in enumerate(names):
        doc = docs[(name, "collectives")]
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert facts["torch_backend"] == "gloo" and facts["world_sizes"] == "1,2,4"
        # the first two hosts are in the 2-node world; the others idle then
        assert facts["world_sizes_run"] == ("1,2,4" if rank < 2 else "1,4")
        # GLOO_SOCKET_IFNAME: the interface that carries this host's inventory address
        assert facts["interface"] == "eth0" and facts["interface_address"] == network_run["hosts"][name]
        assert facts["master_addr"] == network_run["hosts"][names[0]] and facts["failures"] == []
        rows = doc["results"]
        nodes = {r["labels"]["nodes"] for r in rows}
        assert nodes == ({1, 2, 4} if rank < 2 else {1, 4})
        algbw = {json.dumps(r["labels"], sort_keys=True): r["value"] for r in rows if r["metric"] == "algbw_gbps"}
        for r in rows:
            if r["metric"] == "busbw_gbps":
                lab = r["labels"]
                assert lab["ranks"] == lab["nodes"] > 1
                assert r["value"] == pytest.approx(algbw[json.dumps(lab, sort_keys=True)]
                                                   * busbw_factor(lab["collective"], lab["ranks"]), rel=1e-4)
                assert 0 < r["value"] < 100  # GB/s over a veth bridge: real, and not a unit slip
        assert [r["value"] for r in rows if r["metric"] == "wrong"] and \
            max(r["value"] for r in rows if r["metric"] == "wrong") == 0
        curve = sorted(r["labels"]["size_bytes"] for r in rows if r["metric"] == "busbw_gbps"
                       and r["labels"]["nodes"] == 4 and r["labels"]["collective"] == "all_reduce")
        assert curve == [8, 64, 512, 4096, 32768, 262144]
    # every host of the 4-node world measured the same curve points
    point_sets = [{json.dumps(r["labels"], sort_keys=True) for r in docs[(n, "collectives")]["results"]
                   if r["labels"]["nodes"] == 4} for n in names]
    assert all(p == point_sets[0] for p in point_sets)
    report = network_run["report"]
    assert "| all_reduce | in-place | 4 | 4 |" in report and "| all_reduce | in-place | 2 | 2 |" in report
    for png in ("network_collectives_busbw.png", "network_collectives_time.png"):
        assert (network_run["run_dir"] / "report" / png).stat().st_size > 5000
    checks = network_run["checks"]
    assert all(checks[("network.collectives_failures", n)]["status"] == "pass" for n in names)
    assert all(checks[("network.collectives_wrong", n)]["status"] == "pass" for n in names)
    assert checks[("network.collectives_scaling", names[0])]["status"] in ("pass", "warn")


def test_pairwise_tcp_matrix(network_run):
    names, docs = network_run["names"], network_run["docs"]
    pairs = {}
    for name in names:
        doc = docs[(name, "tcp_pairs")]
        assert doc["status"] == "ok", doc["reason"]
        assert doc["facts"]["slots"] == 6 and doc["facts"]["address"] == network_run["hosts"][name]
        for r in doc["results"]:
            pairs.setdefault(r["metric"], {})[(r["labels"]["src"], r["labels"]["dst"])] = r["value"]
    directed = {(a, b) for a in names for b in names if a != b}
    assert set(pairs["bw_gbits"]) == set(pairs["rtt_us"]) == set(pairs["loss_pct"]) == directed
    assert all(v > 0.05 for v in pairs["bw_gbits"].values())
    assert all(0 < v < 1e5 for v in pairs["rtt_us"].values())
    assert all(v == 0 for v in pairs["loss_pct"].values())
    report = network_run["report"]
    assert "### TCP between every directed pair" in report
    assert (network_run["run_dir"] / "report" / "network_tcp_pairs.png").stat().st_size > 5000
    checks = network_run["checks"]
    assert all(checks[("network.tcp_loss", n)]["status"] == "pass" for n in names)


def test_gpu_and_rdma_parts_are_skipped_with_their_reasons(network_run):
    names, docs, checks = network_run["names"], network_run["docs"], network_run["checks"]
    for name in names:
        assert docs[(name, "nccl_tests")]["status"] == "skipped"
        assert "no GPU visible" in docs[(name, "nccl_tests")]["reason"]
        assert docs[(name, "perftest")]["status"] == "skipped"
        assert "no RDMA devices" in docs[(name, "perftest")]["reason"]
        for variant in ("collectives-ring", "collectives-nvlink_off"):
            assert docs[(name, variant)]["status"] == "skipped"
            assert "needs GPUs on every host; without a GPU: %s" % ", ".join(names) in docs[(name, variant)]["reason"]
        assert checks[("network.nccl_tests_ran", name)]["status"] == "skip"
        assert checks[("network.collectives_allreduce_1node", name)]["reason"] == \
            "backend=cpu: expectation is for cuda/rocm"
        assert "no RDMA devices" in checks[("network.perftest_rail_line_rate", name)]["reason"]


def test_no_process_of_the_phase_is_left_on_any_host(network_run):
    assert network_run["strays"] == {}


def test_a_killed_rank_is_reported_and_leaves_no_process(test_cluster):
    """Rank 2 of the 4-node world exits in the middle of the sweep; every node reports the failure with that rank,
    and no worker is left on any host. The probes are started on the hosts directly (as the play would)."""
    since = boot_seconds()
    names = [h["name"] for h in test_cluster.hosts]
    params = dict(SWEEP["quick"], max_bytes=65536, port=26000, world_sizes=[4],
                  fault={"rank": 2, "nodes": 4, "after_steps": 3, "mode": "exit"})
    docs = run_everywhere(test_cluster, "collectives", params, timeout=150)
    for name in names:
        doc = docs[name]
        assert doc["status"] == "error"
        [failure] = doc["facts"]["failures"]
        assert failure["kind"] == "crash" and failure["nodes"] == 4 and 2 in failure["stuck_ranks"]
        assert "rank 2 on %s exited with status 3 in " % names[2] in failure["message"]
        assert "(step 3)" in failure["message"]
        assert doc["reason"].startswith("1 of 1 world sizes failed; first: crash at 4 nodes")
        assert failure["log"] == "collectives.n4.log"
        # the steps before the crash were measured and kept
        assert {r["labels"]["size_bytes"] for r in doc["results"]} == {8, 64, 512}
    assert stray_processes(test_cluster, since) == {}
