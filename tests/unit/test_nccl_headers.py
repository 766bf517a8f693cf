"""The version and library lines of nccl-tests and rccl-tests, read from real captures (tests/fixtures/nccl-tests/
README.md) and recorded as facts of the nccl_tests artifact: tests version, library and version, RCCL's HIP/ROCm
versions and library path, ranks printed without a Group, a run cut short, and nccl-tests' own CUDA failure line."""

from pathlib import Path

from probes.artifact import Artifact
from probes.common.command import CmdResult
from probes.network.nccl_output import nranks, parse_text
from probes.network.nccl_tests import run_one

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"


def parsed(name):
    return parse_text((FIX / name).read_text(), program="all_reduce_perf")


def test_rccl_tests_two_nodes_with_the_rccl_version_block():
    p = parsed("rccl-tests_develop_mi300x_2node_rccl_version.txt")
    assert (p["tests"], p["version"]) == ("rccl-tests", "develop:448c4c7")
    assert (p["library"], p["library_version"]) == ("RCCL", "2.22.3-HEAD:7d8d67c")
    assert (p["hip_version"], p["rocm_version"]) == ("6.4.43484-123eb5128", "6.4.2.0-120-e7d83f5")
    assert p["library_path"] == "/shared/apps/ubuntu/opt/rocm-6.4.2/lib/librccl.so.1"
    # ranks printed without "Group": every rank and host is still read
    assert nranks(p) == 16 and {d["host"] for d in p["devices"]} == {"gpu-53", "gpu-56"}
    assert p["devices"][8] == {"rank": 8, "group": 0, "pid": 366643, "host": "gpu-56", "device": 0,
                               "pci": "0000:05:00.0", "name": "AMD Instinct MI300X"}
    assert p["complete"] and p["avg_busbw"] == 92.3318 and p["rows"][-1]["busbw_gbps"] == 357.41


def test_rccl_tests_one_node_without_library_lines():
    p = parsed("rccl-tests_develop_mi300x_1node.txt")
    assert (p["tests"], p["version"], p["library"], p["library_path"]) == ("rccl-tests", "develop:a7809b3", None, None)
    assert nranks(p) == 8 and len(p["rows"]) == 62 and p["avg_busbw"] == 110.464


def test_nccl_tests_version_line_and_a_run_cut_short():
    p = parsed("nccl-tests_2.17.9_gh200x16_corrupt_trimmed.txt")
    assert (p["tests"], p["version"], p["nccl_headers"], p["nccl_version"]) == ("nccl-tests", "2.17.9", 22902, 22902)
    assert p["complete"] is False and p["last_size"] == 134217728  # the capture ends without its footer
    wrong = {r["size"]: r["wrong"] for r in p["rows"] if r["placement"] == "out_of_place"}
    assert wrong[2097152] == 18134 and wrong[134217728] == 0


def test_old_nccl_tests_header_and_the_libraries_own_version_line():
    p = parsed("nccl-tests_noversion_h200x8_nccl_version_line.txt")
    assert p["version"] is None and p["tests"] is None  # nccl-tests of that build printed no version line
    assert (p["library"], p["library_version"]) == ("NCCL", "2.19.3+cuda12.2")
    assert p["devices"][0]["pci"] == "0x00" and p["complete"] and p["avg_busbw"] == 476.967


def test_nccl_info_and_hash_variants_of_the_version_lines():
    p = parse_text("# nccl-tests version 2.20.0 (b4d5bee) nccl-headers=23007 nccl-library=23007\n"
                   "node [0] NCCL INFO RCCL version : 2.27.7-HEAD:29e1567\n"
                   "Librccl path : /usr/local/lib/librccl.so.1\n")
    assert (p["version"], p["nccl_headers"], p["nccl_version"]) == ("2.20.0", 23007, 23007)
    assert (p["library"], p["library_version"], p["library_path"]) == ("RCCL", "2.27.7-HEAD:29e1567",
                                                                      "/usr/local/lib/librccl.so.1")


def test_the_cuda_failure_line_is_kept_first():
    p = parsed("nccl-tests_cuda_failure_h100x8.txt")
    assert p["errors"] == ["test: Test CUDA failure common.cu:941 'system not yet initialized'",
                           ".. test pid 54340: Test failure common.cu:891"]
    assert p["rows"] == [] and p["complete"] is False and p["params"]["ngpus"] == 8


def test_run_one_records_the_header_facts(tmp_path):
    art = Artifact("nccl_tests", "r", "h")
    out = (FIX / "rccl-tests_develop_mi300x_2node_rccl_version.txt").read_text()

    def runner(argv, timeout):
        return CmdResult(argv, 0, out, "", False, False)

    failure = run_one(art, "all_reduce", "/opt/rccl-tests/build/all_reduce_perf", runner, ["-b", "8"], 60,
                      "nccl_tests", str(tmp_path), False, 2)
    assert failure is None
    assert {k: art.facts[k] for k in ("nccl_tests_version", "tests_suite", "library", "library_version",
                                      "library_path", "hip_version", "rocm_version")} == {
        "nccl_tests_version": "develop:448c4c7", "tests_suite": "rccl-tests", "library": "RCCL",
        "library_version": "2.22.3-HEAD:7d8d67c", "library_path": "/shared/apps/ubuntu/opt/rocm-6.4.2/lib/librccl.so.1",
        "hip_version": "6.4.43484-123eb5128", "rocm_version": "6.4.2.0-120-e7d83f5"}
    assert "nccl_version_code" not in art.facts  # rccl-tests prints no library code


def test_run_one_names_the_cuda_failure(tmp_path):
    art = Artifact("nccl_tests", "r", "h")
    out = (FIX / "nccl-tests_cuda_failure_h100x8.txt").read_text()
    failure = run_one(art, "all_reduce", "/opt/nccl-tests/build/all_reduce_perf",
                      lambda argv, timeout: CmdResult(argv, 3, out, "", False, False), [], 60, "nccl_tests",
                      str(tmp_path), False, 1)
    assert failure["kind"] == "error" and failure["message"] == (
        "all_reduce_perf exited 3 after nothing: test: Test CUDA failure common.cu:941 'system not yet initialized'")
