"""The network probes end to end on this machine, without the SSH test cluster: two or three "nodes" are probe
processes on loopback addresses; tools that need hardware (nvidia-smi, nccl-tests, perftest) are small fakes that
print the recorded outputs of tests/fixtures."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from free_ports import free_port

from probes.cli import run_probe
from probes.common import worlds
from probes.network.busbw import busbw_factor

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"


def run_nodes(probe, out, params, hosts, timeout=120, addresses=None, per_host=None):
    """Start one probe process per node at once (as the play does) and return their artifacts. per_host: {host:
    params of that host alone} (one node unlike the others)."""
    procs = []
    for rank, host in enumerate(hosts):
        p = dict(params, hosts=hosts, addresses=addresses or ["127.0.0.1"] * len(hosts), rank=rank,
                 **(per_host or {}).get(host, {}))
        procs.append(subprocess.Popen([sys.executable, "-m", "probes", probe, "--out", str(out / host), "--host", host,
                                       "--params", json.dumps(p), "--timeout", str(timeout)], cwd=ROOT,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    try:
        for proc in procs:
            assert proc.wait(timeout=timeout + 30) == 0, proc.stderr.read()
    except subprocess.TimeoutExpired:
        # a probe still going 30 s past its own --timeout is stuck: what it printed, with the stacks of its threads
        # that probes/cli.py dumps 15 s past the limit, says where; no process is left behind
        for proc in procs:
            proc.kill()
        pytest.fail("a %s probe ran past its --timeout %s:\n%s" % (probe, timeout, "\n".join(
            "--- %s rc=%s\n%s" % (host, proc.wait(), proc.stderr.read().decode(errors="replace")[-6000:])
            for host, proc in zip(hosts, procs))))
    return {h: json.loads((out / h / ("%s.json" % probe)).read_text()) for h in hosts}


def leftovers(marker):
    """Processes whose command line mentions marker (the probe's output directory)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path("/proc/%s/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmd and "pytest" not in cmd:
                found.append((pid, cmd))
    return found


SWEEP = {"min_bytes": 8, "max_bytes": "4K", "factor": 8, "iters": 3, "warmup": 1, "max_seconds_per_size": 0.05,
         "launch_timeout": 60, "stall_timeout": 30, "rdzv_timeout": 30}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    out = tmp_path_factory.mktemp("coll")
    return out, run_nodes("collectives", out, dict(SWEEP, port=free_port()), ["a", "b"])


def test_collectives_two_nodes_on_loopback(two_nodes):
    out, docs = two_nodes
    for doc in docs.values():
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert facts["torch_backend"] == "gloo" and facts["interface"] == "lo" and facts["world_sizes_run"] == "1,2"
        assert doc["device"]["torch"]  # the workers' torch version
        rows = doc["results"]
        assert {(r["labels"]["nodes"], r["labels"]["collective"]) for r in rows} >= {
            (1, "all_reduce"), (2, "all_reduce"), (2, "alltoall"), (2, "broadcast"), (2, "all_gather"),
            (2, "reduce_scatter")}
        assert all(r["value"] == 0 for r in rows if r["metric"] == "wrong")
        assert not [r for r in rows if r["metric"] == "busbw_gbps" and r["labels"]["ranks"] == 1]
        algbw = {json.dumps(r["labels"], sort_keys=True): r["value"] for r in rows if r["metric"] == "algbw_gbps"}
        for r in rows:
            if r["metric"] == "busbw_gbps":
                factor = busbw_factor(r["labels"]["collective"], r["labels"]["ranks"])
                assert r["value"] == pytest.approx(algbw[json.dumps(r["labels"], sort_keys=True)] * factor, rel=1e-4)
        # sizes as nccl-tests counts them: 8 B .. 4 KiB (factor 8); all_gather of 8 B over 2 ranks is 1 float each
        sizes = sorted({r["labels"]["size_bytes"] for r in rows if r["labels"]["collective"] == "all_gather"})
        assert sizes == [8, 64, 512, 4096]
    # both nodes measured the same 2-node world; each measured its own 1-node world
    two = [{json.dumps(r["labels"], sort_keys=True) for r in d["results"] if r["labels"]["nodes"] == 2}
           for d in docs.values()]
    assert two[0] == two[1]
    assert not leftovers(str(out))


def test_a_rank_that_stops_is_reported_as_a_hang_with_the_stuck_ranks(tmp_path):
    params = dict(SWEEP, port=free_port(), world_sizes=[2], stall_timeout=3,
                  fault={"rank": 1, "nodes": 2, "after_steps": 2, "mode": "hang"})
    docs = run_nodes("collectives", tmp_path, params, ["a", "b"])
    for doc in docs.values():
        assert doc["status"] == "error"
        [failure] = doc["facts"]["failures"]
        assert failure["kind"] == "hang" and failure["nodes"] == 2 and failure["stuck_ranks"] == [0, 1]
        # steps 0, 1, 2 are all_reduce of 8, 64, 512 bytes: rank 1 stopped at step 2, rank 0 waits there for it
        assert "ranks 0,1 on a, b stuck in all_reduce 512 B (in-place) (step 2)" in failure["message"]
        assert failure["log"] == "collectives.n2.log" and "collectives.n2.log" in doc["raw"]
        # what was measured before the hang is kept
        assert {r["labels"]["size_bytes"] for r in doc["results"]} == {8, 64}
    assert not leftovers(str(tmp_path))


def test_describe_failure_names_who_did_what():
    exits = {0: {"status": "error", "rc": 1, "error": "RuntimeError: Connection closed by peer"},
             1: {"status": "crash", "rc": 3}, 2: {"status": "error", "rc": 1,
                                                 "error": "RuntimeError: Connection closed by peer"}}
    positions = {0: {"step": 5, "label": "all_reduce 1 KiB (in-place)", "phase": "run"},
                 1: {"step": 5, "label": "all_reduce 1 KiB (in-place)", "phase": "run"}, 2: None}
    kind, msg = worlds.describe_failure(4, [0, 1, 2, 3], exits, positions, 60)
    assert kind == "crash"
    assert msg == ("crash at 4 nodes: rank 1 exited with status 3 in all_reduce 1 KiB (in-place) (step 5); "
                   "ranks 0,2: RuntimeError: Connection closed by peer; rank 3 did not report (its node's probe "
                   "is gone)")
    kind, msg = worlds.describe_failure(2, [0, 1], {0: {"status": "rendezvous", "error": "ranks 1 never "
                                                             "arrived"}, 1: None}, {}, 60)
    assert kind == "rendezvous" and "rank 0: ranks 1 never arrived; rank 1 did not report" in msg
    kind, _ = worlds.describe_failure(2, [0, 1], {0: {"status": "rendezvous", "error": "x"},
                                                       1: {"status": "rendezvous", "error": "x"}}, {}, 60)
    assert kind == "rendezvous"


def test_tcp_pairs_every_directed_pair_with_the_socket_test(tmp_path):
    hosts = ["a", "b", "c"]
    params = {"port": free_port(), "tool": "socket", "duration_s": 0.3, "ping_count": 1, "rtt_count": 5}
    docs = run_nodes("tcp_pairs", tmp_path, params, hosts, addresses=["127.0.0.1", "127.0.0.2", "127.0.0.3"])
    pairs = set()
    for host, doc in docs.items():
        assert doc["status"] == "ok", doc["reason"]
        assert doc["facts"]["bandwidth_tool"] == "socket" and doc["facts"]["slots"] == 6
        for r in doc["results"]:
            assert r["labels"]["src"] == host and r["labels"]["dst"] != host
            if r["metric"] == "bw_gbits":
                assert r["value"] > 0.01 and r["labels"]["tool"] == "socket"
                pairs.add((r["labels"]["src"], r["labels"]["dst"]))
            if r["metric"] == "rtt_us":
                assert 0 < r["value"] < 1e6
    assert len(pairs) == 6
    assert not leftovers(str(tmp_path))


# ---- hardware tools as fakes that print recorded outputs ----------------------------------------------------


def fake_bin(tmp_path, name, body):
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture
def h100_node(tmp_path, monkeypatch):
    fake_bin(tmp_path, "nvidia-smi", "cat %s\n" % (FIX / "nvidia-smi" / "h100_8x_query.csv"))
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    return tmp_path


def fake_nccl_test(tmp_path, name, fixture, hang=False):
    """`<name> … -J FILE`: prints the fixture's text, writes its JSON to FILE; `-h` lists -J."""
    text, js = FIX / "nccl-tests" / (fixture + ".txt"), FIX / "nccl-tests" / (fixture + ".json")
    fake_bin(tmp_path, name,
             'case "$1" in -h) echo "  -J,--output_file <file>"; exit 0;; esac\n'
             'while [ $# -gt 0 ]; do [ "$1" = -J ] && cp %s "$2"; shift; done\n'
             "cat %s\n%s" % (js, text, "exec sleep 60\n" if hang else ""))


def test_nccl_tests_parses_json_and_text_of_each_binary(h100_node):
    fake_nccl_test(h100_node, "all_reduce_perf", "h100x8_all_reduce")
    fake_nccl_test(h100_node, "all_gather_perf", "wrong_results_all_reduce")
    fake_nccl_test(h100_node, "alltoall_perf", "hang_2node_all_reduce", hang=True)
    out = h100_node / "out"
    params = {"bin_dir": str(h100_node / "bin"), "collectives": ["all_reduce", "all_gather", "alltoall", "broadcast"],
              "timeout_per_collective": 3}
    _, doc = run_probe("nccl_tests", str(out), "r", "n1", params=params)
    assert doc["device"]["backend"] == "cuda" and doc["device"]["count"] == 8
    assert doc["status"] == "error"
    failures = {f["collective"]: f for f in doc["facts"]["failures"]}
    assert failures["alltoall"]["kind"] == "hang"
    # the JSON file was cut after 64 KiB, the text after 128 KiB: the JSON's rows (full precision), then the text's
    assert failures["alltoall"]["message"] == ("hang: alltoall_perf printed results up to 128 KiB and was stopped "
                                               "after 3 s")
    hung = sorted({r["labels"]["size_bytes"] for r in doc["results"]
                   if r["metric"] == "busbw_gbps" and r["labels"]["collective"] == "alltoall"})
    assert hung[-2:] == [64 << 10, 128 << 10]
    assert "all_gather" not in failures  # wrong results are results (#wrong), not a failed run
    assert doc["facts"]["missing_binaries"] == "broadcast_perf"
    busbw = {(r["labels"]["collective"], r["labels"]["size_bytes"], r["labels"]["placement"]): r["value"]
             for r in doc["results"] if r["metric"] == "busbw_gbps"}
    assert busbw[("all_reduce", 16 << 30, "out_of_place")] == pytest.approx(482.862822)  # full precision (JSON)
    labels = next(r["labels"] for r in doc["results"] if r["metric"] == "busbw_gbps")
    assert labels["nodes"] == 1 and labels["ranks"] == 8
    wrong = [r for r in doc["results"] if r["metric"] == "wrong" and r["labels"]["collective"] == "all_gather"
             and r["value"] > 0]
    assert len(wrong) == 24
    assert {"nccl_tests.all_reduce.txt", "nccl_tests.all_reduce.json", "nccl_tests.alltoall.txt"} <= set(doc["raw"])
    assert not leftovers(str(h100_node / "bin"))


def test_nccl_tests_skips_without_binaries_quoting_the_tools_step(tmp_path, h100_node):
    _, doc = run_probe("nccl_tests", str(tmp_path / "o1"), "r", "n1", params={})
    assert doc["status"] == "skipped" and "nccl-tests not found (all_reduce_perf in" in doc["reason"]
    assert "the tools step" not in doc["reason"]
    # the tools role's reason (command, last lines, variable) is what the skip ends with
    why = "the build failed (rc 2): `make -C /opt/x/src` (tools_nccl_tests / assess_sources.nccl_tests)"
    _, doc = run_probe("nccl_tests", str(tmp_path / "o2"), "r", "n1",
                       params={"tools_step": {"missing": {"nccl_tests": why}, "path": [str(tmp_path / "nobin")]}})
    assert doc["status"] == "skipped" and doc["reason"].endswith("; the tools step: " + why)


def test_nccl_tests_runs_the_tools_steps_build_on_path_before_a_preinstalled_copy(h100_node, monkeypatch):
    """A stale copy in a preinstalled place (SEARCH_DIRS: /opt/nccl-tests/build, …; here a directory standing in
    for it) and the tools step's MPI=1 build, which probes/cli.py use_tools puts at the front of PATH: the tools
    step's build runs. Before, the preinstalled places were searched first and the stale copy ran."""
    from probes.network import nccl_tests

    stale, tools = h100_node / "opt-nccl-tests-build", h100_node / "tools-prefix" / "bin"
    for d in (stale, tools):
        d.mkdir(parents=True)
        (d / "all_reduce_perf").write_text("#!/bin/sh\ncat %s\n" % (FIX / "nccl-tests" / "h100x8_all_reduce.txt"))
        (d / "all_reduce_perf").chmod(0o755)
    monkeypatch.setattr(nccl_tests, "SEARCH_DIRS", [str(stale)])
    monkeypatch.delenv("NCCL_TESTS_DIR", raising=False)
    monkeypatch.setenv("PATH", os.environ["PATH"])  # use_tools changes PATH: put back after the test
    _, doc = run_probe("nccl_tests", str(h100_node / "out"), "r", "n1",
                       params={"collectives": ["all_reduce"], "tools_step": {"path": [str(tools)]}})
    assert doc["status"] == "ok" and doc["facts"]["binaries"] == str(tools / "all_reduce_perf")
    # the order: bin_dir (asked for by name), PATH, $NCCL_TESTS_DIR, the preinstalled places
    assert nccl_tests.search_dirs("/b", {"PATH": "/p1:/p2", "NCCL_TESTS_DIR": "/n"}) == ["/b", "/p1", "/p2", "/n",
                                                                                          str(stale)]


def test_perftest_per_rail_with_fake_tools(h100_node, monkeypatch):
    from probes.network import perftest

    sysfs = h100_node / "infiniband"
    for hca in ("mlx5_0", "mlx5_1"):
        (sysfs / hca).mkdir(parents=True)
    monkeypatch.setattr(perftest, "SYSFS", str(sysfs))
    for tool, fixture in (("ib_write_bw", "ndr_write_bw_host.txt"), ("ib_read_bw", "ndr_read_bw_host.txt")):
        # server: no address argument, exits after one test; client: the last argument is the server's address
        fake_bin(h100_node, tool, 'case "$1" in --help) echo "usage"; exit 0;; esac\n'
                 'for a; do last="$a"; done\ncase "$last" in 127.*) cat %s;; *) sleep 0.2;; esac\n' % (
                     FIX / "perftest" / fixture))
    _, doc = run_probe("perftest", str(h100_node / "out"), "r", "n1",
                       params={"hosts": ["n1"], "addresses": ["127.0.0.1"], "port": free_port(), "timeout_per_test": 20,
                               "fabric": "ib_ndr400"})
    assert doc["status"] == "ok", doc["reason"]
    assert doc["facts"]["memories"] == "host"  # this perftest build has no --use_cuda
    bw = {(r["labels"]["hca"], r["labels"]["test"]): r["value"] for r in doc["results"]
          if r["metric"] == "bw_avg_gbits"}
    assert bw == {("mlx5_0", "write"): 391.87, ("mlx5_1", "write"): 391.87, ("mlx5_0", "read"): 384.77,
                  ("mlx5_1", "read"): 384.77}
    monkeypatch.setattr(perftest, "SYSFS", str(h100_node / "none"))
    _, doc = run_probe("perftest", str(h100_node / "out2"), "r", "n1", params={})
    assert doc["status"] == "skipped" and doc["reason"].startswith("no RDMA devices")
