"""The nccl-tests stand-in (tests/integration/nccl_tests_standin.c): built with mpicc, run by mpirun with 2 ranks on
this machine, its stdout read by the parser of real nccl-tests output (probes/network/nccl_output.py) the way the
nccl_tests probe reads it; a rank that dies after the first size gives a failed mpirun and an incomplete table."""

import os
import shutil
import subprocess

import pytest
from integration.nccl_tests_standin import PROGRAMS, build_standin

from probes.network.busbw import busbw_factor
from probes.network.nccl_output import nranks, parse_text
from probes.network.nccl_tests import supports_json

pytestmark = pytest.mark.skipif(not (shutil.which("mpicc") and shutil.which("mpirun")),
                                reason="mpicc/mpirun not installed (apt-get install openmpi-bin libopenmpi-dev)")

ARGS = ["-b", "8", "-e", "64K", "-f", "4", "-g", "1", "-w", "1", "-n", "3"]
REQUESTED = [8 << (2 * k) for k in range(7)]  # 8 B, 32 B, ... 32 KiB: the next step (128 KiB) is past -e 64K
BANNER = "# nccl-tests stand-in (MPI collectives on CPU, launch mechanics only): not a GPU measurement"


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    return build_standin(tmp_path_factory.mktemp("standin"))


def mpirun(binary, *args, env=None, np=2):
    argv = ["mpirun", "--allow-run-as-root", "-np", str(np), "--oversubscribe", str(binary), *args]
    full = dict(os.environ, OMPI_MCA_btl_vader_single_copy_mechanism="none", **(env or {}))  # no CMA in containers
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=full)


def printed_size(collective, size, ranks):
    """The size nccl-tests prints for a requested size: per-rank chunks of all_gather, reduce_scatter and alltoall
    are rounded down to 16 bytes (4 floats)."""
    if collective in ("all_reduce", "broadcast"):
        return size
    return ((size // 4 // ranks) & ~3) * ranks * 4


def check_table(parsed, program, ranks=2):
    collective = program[: -len("_perf")]
    assert parsed["program"] == program and parsed["collective"] == collective
    assert parsed["complete"] and parsed["errors"] == []
    assert parsed["version"] is None and parsed["nccl_version"] is None  # a stand-in claims no nccl-tests version
    assert parsed["params"] == {"nthreads": 1, "ngpus": 1, "min_bytes": 8, "max_bytes": 65536, "step_factor": 4,
                                "warmup_iters": 1, "iters": 3, "validation": 1}
    assert nranks(parsed) == ranks
    assert [(d["rank"], d["device"], d["pci"], d["name"]) for d in parsed["devices"]] == [
        (r, r, "0x00", "CPU stand-in") for r in range(ranks)]
    sizes = [printed_size(collective, s, ranks) for s in REQUESTED]
    assert [(r["size"], r["placement"]) for r in parsed["rows"]] == [
        (s, p) for s in sizes for p in ("out_of_place", "in_place")]
    assert parsed["last_size"] == sizes[-1]
    factor = busbw_factor(collective, ranks)
    for row in parsed["rows"]:
        assert row["type"] == "float" and row["time_us"] > 0
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * factor, abs=0.011)  # both printed %.2f
    assert parsed["out_of_bounds"] == 0 and parsed["out_of_bounds_ok"] is True
    assert parsed["avg_busbw"] is not None


def test_all_reduce_reads_as_nccl_tests_output(standin):
    res = mpirun(standin / "all_reduce_perf", *ARGS)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == BANNER
    parsed = parse_text(res.stdout, program="all_reduce_perf")
    check_table(parsed, "all_reduce_perf")
    assert {(r["redop"], r["root"]) for r in parsed["rows"]} == {("sum", -1)}
    assert all(r["wrong"] == 0 for r in parsed["rows"])


def test_alltoall_reads_as_nccl_tests_output(standin):
    res = mpirun(standin / "alltoall_perf", *ARGS)
    assert res.returncode == 0, res.stderr
    parsed = parse_text(res.stdout, program="alltoall_perf")
    check_table(parsed, "alltoall_perf")
    assert parsed["rows"][0]["size"] == 0  # 8 B over 2 ranks is under one 16-byte chunk, as in nccl-tests
    assert {(r["redop"], r["root"]) for r in parsed["rows"]} == {("none", -1)}
    # nccl-tests checks out-of-place alltoall only: in-place #wrong is N/A
    assert all(r["wrong"] == (0 if r["placement"] == "out_of_place" else None) for r in parsed["rows"])


def test_a_rank_exiting_after_the_first_size_fails_the_run(standin):
    res = mpirun(standin / "all_reduce_perf", *ARGS, env={"STANDIN_FAIL_RANK": "1", "STANDIN_FAIL_MODE": "exit"})
    assert res.returncode != 0
    parsed = parse_text(res.stdout, program="all_reduce_perf")
    assert not parsed["complete"] and parsed["avg_busbw"] is None and parsed["out_of_bounds"] is None
    assert [(r["size"], r["placement"]) for r in parsed["rows"]] == [(8, "out_of_place"), (8, "in_place")]
    assert parsed["last_size"] == 8 and nranks(parsed) == 2


def test_names_help_and_refusals(standin):
    assert sorted(p.name for p in standin.iterdir()) == sorted(PROGRAMS)
    binary = str(standin / "all_reduce_perf")
    assert supports_json(binary) is False  # -h lists no -J: the probe will not ask for a JSON file
    res = subprocess.run([binary, "-h"], capture_output=True, text=True, timeout=20)
    assert res.returncode == 0 and res.stdout.startswith(BANNER) and "[-g,--ngpus" in res.stdout
    res = subprocess.run([binary, "-g", "2"], capture_output=True, text=True, timeout=20)
    assert res.returncode == 2 and "one CPU stand-in device per MPI rank" in res.stderr
