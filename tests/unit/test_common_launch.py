"""The launcher layer's pure parts (probes/common/launch.py), against real captures of srun, mpirun and torchrun on
the SSH test cluster (tests/fixtures/launchers/SOURCES.md) and the launchers' documented usage: the rank a task
reads from each launcher's environment, the failed rank and host each launcher reports, `srun --mpi=list`, the
choice `auto` makes, and the command lines planned for 1 … N nodes (nccl-tests' -g/-b/-e/-f too). And one launched
world for real: the probe's time limit while it runs leaves none of the launcher's processes behind."""

import os
import re
import signal
import uuid
from pathlib import Path

import pytest
from test_common_command import alive, gone

from probes.common import launch
from probes.common.time_limit import time_limit
from probes.common.worlds import placement_order, world_size_plan
from reports.phases.network.grade import placement_scope, scaling

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "launchers"


def envs(name):
    """The per-task environments of one capture: [{var: value}] in the order the tasks printed them."""
    out = []
    for line in (FIXTURES / name).read_text().splitlines():
        if line.startswith("### "):
            out.append({})
        elif "=" in line and out:
            key, value = line.split("=", 1)
            out[-1][key] = value
    return out


@pytest.mark.parametrize("name, source", [("env-srun.txt", "srun"), ("env-mpirun.txt", "openmpi")])
def test_the_rank_comes_from_the_launchers_environment(name, source):
    tasks = envs(name)
    assert len(tasks) == 2
    got = sorted((launch.rank_env(t)["rank"], launch.rank_env(t)["world"], launch.rank_env(t)["local_rank"],
                  launch.rank_env(t)["source"]) for t in tasks)
    assert got == [(0, 2, 0, source), (1, 2, 0, source)]


def test_torchrun_wins_over_the_launcher_it_runs_under():
    [node2] = envs("env-torchrun.cmxl-node2.txt")
    assert launch.rank_env(node2) == {"rank": 1, "world": 2, "local_rank": 0, "local_world": 1, "source": "torchrun"}
    both = dict(node2, SLURM_PROCID="0", SLURM_NTASKS="2")
    assert launch.rank_env(both)["source"] == "torchrun"
    assert launch.rank_env({"PATH": "/usr/bin"}) is None


@pytest.mark.parametrize("launcher, name, expected", [
    ("mpirun", "fault-kill9-mpirun.txt", {1: {"host": "10.237.71.12", "rc": -9, "stopped": False}}),
    ("mpirun", "fault-exit3-mpirun.txt", {1: {"host": None, "rc": 3, "stopped": False}}),
    ("srun", "fault-kill9-srun.txt", {1: {"host": "cmxl-node2", "rc": -9, "stopped": False}}),
    ("srun", "fault-exit3-srun.txt", {1: {"host": "cmxl-node2", "rc": 3, "stopped": False}}),
    # --kill-on-bad-exit: rank 0 is ended by srun after rank 1 failed; that is not a cause
    ("srun", "fault-kill9-srun-kill-on-bad-exit.txt", {1: {"host": "cmxl-node2", "rc": -9, "stopped": False},
                                                        0: {"host": "cmxl-node1", "rc": -15, "stopped": True}}),
    ("srun", "fault-exit3-srun-kill-on-bad-exit.txt", {1: {"host": "cmxl-node2", "rc": 3, "stopped": False},
                                                        0: {"host": "cmxl-node1", "rc": -15, "stopped": True}}),
    # rank 0 failed first (it lost its peer), srun ended the step with SIGTERM, and only then came rank 1's SIGKILL
    # report: SIGKILL is not what srun sent, so rank 1 is a cause, not a rank srun ended
    ("srun", "fault-kill9-reported-late-srun-kill-on-bad-exit.txt", {
        0: {"host": "cmxl-node1", "rc": 1, "stopped": False}, 1: {"host": "cmxl-node2", "rc": -9, "stopped": False}}),
    ("torchrun", "fault-kill9-torchrun.cmxl-node2.txt", {1: {"host": "cmxl-node2", "rc": -9, "stopped": False}}),
])
def test_the_failed_rank_and_host_as_each_launcher_reports_them(launcher, name, expected):
    assert launch.failed_ranks(launcher, (FIXTURES / name).read_text()) == expected


def test_a_cancelled_srun_step_marks_every_task_stopped():
    found = launch.failed_ranks("srun", (FIXTURES / "fault-hang-sigterm-srun-v.txt").read_text())
    assert set(found) == {0, 1} and all(v["stopped"] for v in found.values())


def test_srun_mpi_list_and_the_plugin_an_mpi_program_gets():
    plugins = launch.parse_mpi_list((FIXTURES / "srun-mpi-list.txt").read_text())
    assert plugins == ["pmix", "none", "cray_shasta", "pmi2"]
    assert launch.pick_srun_mpi(plugins, want_mpi=True) == "pmix"
    assert launch.pick_srun_mpi(["none", "pmi2"], want_mpi=True) == "pmi2"
    assert launch.pick_srun_mpi(plugins, want_mpi=False) == "none"
    # 22.05 prefixes every line with "srun: "
    assert launch.parse_mpi_list("srun: MPI types are...\nsrun: none\nsrun: pmi2\n") == ["none", "pmi2"]


def test_the_mpi_flavour_from_mpirun_version():
    assert launch.mpi_flavour((FIXTURES / "version-mpirun.txt").read_text()) == "openmpi"
    assert launch.mpi_flavour("HYDRA build details:\n    Version: 4.0.2") == "mpich"


def _facts(name, slurm=True, mpirun=True, torch=True, python="/usr/bin/python3"):
    why = {}
    if not slurm:
        why["srun"] = "%s is not a Slurm node" % name
    if not mpirun:
        why["mpirun"] = "mpirun not found"
    if not torch:
        why["torchrun"] = "torch is not importable"
    return {"hostname": name, "python": python, "root": "/tmp/x/probes.pyz", "slurm": name if slurm else None,
            "mpirun": "/usr/bin/mpirun" if mpirun else None, "why": why}


def test_auto_takes_srun_then_mpirun_then_torchrun_and_says_why():
    both = [_facts("a"), _facts("b")]
    assert launch.choose("auto", both) == ("srun", {})
    no_slurm = [_facts("a", slurm=False), _facts("b")]
    launcher, why = launch.choose("auto", no_slurm)
    assert launcher == "mpirun" and why == {"srun": "a: a is not a Slurm node"}
    launcher, why = launch.choose("auto", no_slurm, known={"mpirun": "mpirun across the 2 hosts failed"})
    assert launcher == "torchrun" and set(why) == {"srun", "mpirun"}
    launcher, why = launch.choose("auto", [_facts("a", slurm=False, mpirun=False, torch=False), _facts("b")])
    assert launcher == "direct" and set(why) == {"srun", "mpirun", "torchrun"}
    # one command line on every node needs the same python everywhere
    launcher, why = launch.choose("auto", [_facts("a"), _facts("b", python="/opt/py/bin/python3")])
    assert launcher == "torchrun" and "python differs" in why["srun"] and "b=/opt/py/bin/python3" in why["mpirun"]
    # asked for explicitly: kept, with the reason it cannot work (the probe refuses it, naming the host)
    assert launch.choose("srun", no_slurm) == ("srun", {"srun": "a: a is not a Slurm node"})
    launcher, why = launch.choose("auto", [_facts("a"), _facts("a")])
    assert launcher == "direct" and "not unique (a)" in why["torchrun"]


def test_srun_command_lines_for_1_to_n_nodes():
    names = ["gpu-%02d" % i for i in range(1, 9)]
    for w in world_size_plan(8):
        argv = launch.srun_argv(names[:w], 8, ["all_reduce_perf", "-g", "1"], "cmxa-x-n%d" % w, mpi="pmix",
                                gpus_per_task=1, time_min=12)
        opts = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
        assert argv[0] == "srun" and argv[-3:] == ["all_reduce_perf", "-g", "1"]
        assert opts["--nodes"] == str(w) and opts["--ntasks"] == str(8 * w) and opts["--ntasks-per-node"] == "8"
        assert opts["--nodelist"] == ",".join(names[:w]) and opts["--gpus-per-task"] == "1"
        assert opts["--mpi"] == "pmix" and opts["--distribution"] == "block" and opts["--immediate"] == "60"
        assert opts["--export"] == "ALL" and "--kill-on-bad-exit=1" in argv and opts["--time"] == "12"
    # inside the user's allocation: a step of that job, no new allocation
    argv = launch.srun_argv(names[:2], 8, ["x"], "n", jobid="4711")
    assert "--jobid=4711" in argv and "--overlap" in argv and not any(a.startswith("--immediate") for a in argv)


def test_mpirun_command_lines_and_hostfile(tmp_path):
    addresses = ["10.0.0.%d" % i for i in range(1, 5)]
    hostfile = launch.write_hostfile(str(tmp_path / "hosts"), addresses[:2], 8)
    assert (tmp_path / "hosts").read_text() == "10.0.0.1 slots=8\n10.0.0.2 slots=8\n"
    env = {"NCCL_IB_HCA": "mlx5", "LD_LIBRARY_PATH": "/x", "HOME": "/root", "UCX_NET_DEVICES": "mlx5_0:1",
           "SECRET_TOKEN": "no"}
    names = launch.forwarded_env(env)
    assert names == ["LD_LIBRARY_PATH", "NCCL_IB_HCA", "UCX_NET_DEVICES"]
    argv = launch.mpirun_argv("/opt/hpcx/ompi/bin/mpirun", 16, 8, hostfile, ["all_reduce_perf", "-b", "8", "-e",
                                                                             "16G", "-f", "2", "-g", "1"], names,
                              as_root=True, ucx=True, extra=["--mca", "btl_tcp_if_include", "eth0"])
    text = " ".join(argv)
    assert text.startswith("/opt/hpcx/ompi/bin/mpirun -np 16 --hostfile %s --map-by ppr:8:node --bind-to numa"
                           % hostfile)
    assert "--mca pml ucx" in text and "--allow-run-as-root" in text and "-x NCCL_IB_HCA" in text
    assert "SECRET_TOKEN" not in text and "-x HOME" not in text
    # nccl-tests' own usage: one GPU per rank under MPI, sizes with -b/-e/-f
    assert re.search(r"all_reduce_perf -b 8 -e 16G -f 2 -g 1$", text)


def test_torchrun_command_lines():
    argv = launch.torchrun_argv("/usr/bin/python3", 4, 8, 2, "10.0.0.1:29400", "run-w2", False, ["python3", "w.py"])
    assert argv[:3] == ["/usr/bin/python3", "-m", "torch.distributed.run"]
    assert "--nnodes=4" in argv and "--nproc-per-node=8" in argv and "--rdzv-backend=c10d" in argv
    assert "--rdzv-endpoint=10.0.0.1:29400" in argv and "--rdzv-conf=is_host=0" in argv
    assert "--max-restarts=0" in argv and argv[-3:] == ["--no-python", "python3", "w.py"]


def test_worlds_fill_an_nvlink_domain_and_a_rack_first():
    assert placement_order(4) == [0, 1, 2, 3]
    assert placement_order(4, ["r1", "r2", "r1", "r2"]) == [0, 2, 1, 3]
    # NVL72-style domains first (in inventory order), racks inside them (in the order racks first appear)
    assert placement_order(6, ["a", "b", "a", "b", "a", "b"], ["d2", "d1", "d2", "d1", "d1", "d2"]) == [0, 2, 5,
                                                                                                      4, 1, 3]


def test_placement_scope_and_scaling():
    assert placement_scope({"nodes": 1, "hosts": ["a"]}) == "one node"
    assert placement_scope({"nodes": 2, "racks": ["r1", "r1"]}) == "within rack r1"
    assert placement_scope({"nodes": 4, "racks": ["r1", "r1", "r2", "r2"]}) == "across racks r1, r2"
    assert placement_scope({"nodes": 2, "racks": ["r1", ""]}) == "rack not known for every host"
    assert placement_scope({"nodes": 2, "racks": None, "nvlink_domains": None}).startswith("not declared")
    assert placement_scope({"nodes": 2, "nvlink_domains": ["nvl-1", "nvl-1"], "racks": ["r1", "r1"]}) == (
        "within NVLink domain nvl-1; within rack r1")
    # multi-node worlds only (one node's NVLink is no reference for the NICs), each pair at its largest common size:
    # (larger nodes, ranks, smaller nodes, bytes, larger's busbw, ratio)
    rows = scaling({(2, 16): [(8, 1.0), (1024, 300.0), (4096, 310.0)], (4, 32): [(8, 1.0), (1024, 240.0)],
                    (1, 8): [(1024, 400.0)]}, "all_gather")
    assert rows == [(4, 32, 2, 1024, 240.0, 0.8)]


class LimitReached(Exception):
    """probes.cli's ProbeTimeout as it was (an Exception)."""


class LimitReachedBase(BaseException):
    """... and as it becomes (a BaseException, which `except Exception` in a probe does not swallow)."""


@pytest.mark.parametrize("limit", [LimitReached, LimitReachedBase])
def test_the_probes_time_limit_while_a_launched_world_runs_leaves_none_of_its_processes(tmp_path, limit):
    """run_launched (nccl_tests, hpl_mxp, io_tools_run) when the probe's SIGALRM fires while it waits: the launcher
    and what it started in its process group (here a shell, a child and a grandchild) are stopped before the
    exception goes on. Before, the launcher was left to die with the probe, and die-with-parent kills only the
    launcher itself: its ranks were left running with ppid 1."""
    marker = "0.%012d" % (uuid.uuid4().int % 10**12)  # an extra duration for sleep: its argv names the tree
    argv = ["sh", "-c", "sleep 300 %s & sh -c 'sleep 300 %s & wait' & wait" % (marker, marker)]

    def on_alarm(signum, frame):
        if len(alive(marker)) < 4:  # both shells and both sleeps: the world is up
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            return
        raise limit()

    try:
        with pytest.raises(limit), time_limit(0.2, on_alarm):
            launch.run_launched("mpirun", argv, dict(os.environ), str(tmp_path / "launch.log"), None, 600)
        assert gone(marker) == []
    finally:
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_the_launchers_account_of_a_failed_world_in_words():
    """What an MPI program's failure reason quotes when its own output has no result (HPL-MxP under srun ends on
    "srun: Force Terminated"): the rank that failed first and its host, then the ranks the launcher ended."""
    def said(launcher, name):
        return launch.failure_text(launcher, (FIXTURES / name).read_text())

    assert said("srun", "fault-exit3-srun-kill-on-bad-exit.txt") == (
        "srun: rank 1 on cmxl-node2 exited with status 3; rank 0 ended by srun after that")
    assert said("srun", "fault-kill9-reported-late-srun-kill-on-bad-exit.txt") == (
        "srun: rank 0 on cmxl-node1 exited with status 1; rank 1 on cmxl-node2 was killed by signal 9")
    assert said("mpirun", "fault-kill9-mpirun.txt") == "mpirun: rank 1 on 10.237.71.12 was killed by signal 9"
    assert said("srun", "fault-hang-sigterm-srun-v.txt") == "srun: ranks 0,1 ended by srun after that"
    assert said("srun", "env-srun.txt") == ""
