"""HPL-MxP (probes/gpu_compute/hpl_mxp.py): its output read from real captures (tests/fixtures/hpl-mxp/README.md),
the process grid and matrix size, and the probe running a stand-in mpirun that prints a real output."""

import os
from pathlib import Path

import pytest

from probes.cli import run_probe
from probes.gpu_compute import hpl_mxp

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "hpl-mxp"


def text(name):
    return (FIX / name).read_text()


def test_one_h100_whole_output():
    parsed = hpl_mxp.parse(text("hpl-mxp_25.4.0_h100x1.txt"))
    assert parsed["version"] == "25.4.0"
    # the GEMM component test's "GEMM GFLOPS: AVG = ..." and the progress lines are not results
    assert parsed["results"] == [{
        "residual": 9.331928e-04, "passed": True, "threshold": 16.0, "n": 92160, "nb": 1024, "nprow": 1, "npcol": 1,
        "format": "FP16", "gflops": 6.1567e+04, "gflops_per_gpu": 61566.51, "lu_gflops": 2.3786e+05,
        "lu_gflops_per_gpu": 237855.39}]


def test_named_format_of_26_2_on_three_nodes():
    (r,) = hpl_mxp.parse(text("hpl-mxp_26.2.0_12gpu_3node_head_tail.txt"))["results"]
    assert (r["format"], r["n"], r["nprow"], r["npcol"], r["passed"]) == ("FP16", 480000, 3, 4, True)
    assert (r["gflops_per_gpu"], r["lu_gflops_per_gpu"], r["residual"]) == (3340.96, 3759.73, 3.402630e-04)


def test_result_lines_without_suffix_or_check_and_behind_a_comment_sign():
    (r,) = hpl_mxp.parse(text("hpl-mxp_24.03_8gpu_result_block.txt"))["results"]
    assert (r["format"], r["nprow"], r["npcol"], r["gflops_per_gpu"], r["passed"]) == ("FP16", 4, 2, 109846.77, True)
    fp8 = hpl_mxp.parse(text("hpl-mxp_25.04_8gpu_fp8_result_lines.txt"))["results"]
    assert [(x["format"], x["n"], x["gflops_per_gpu"]) for x in fp8] == [
        ("FP8", 120000, 23669.68), ("FP8", 120000, 24923.21), ("FP8", 240000, 53799.84)]
    assert {x["passed"] for x in fp8} == {None}  # no check line was published with them


@pytest.mark.parametrize("output, error", [
    ("", "xhpl_mxp: no output"),
    # the H100 run cut before its result: the last line says where it stopped
    ("\n".join(text("hpl-mxp_25.4.0_h100x1.txt").splitlines()[:59]),
     "xhpl_mxp: no HPL-MxP result; last line 'Per process device memory consumption MAX = 34.291 GB"),
])
def test_an_output_without_a_result_names_its_last_line(output, error):
    with pytest.raises(ValueError) as exc:
        hpl_mxp.parse(output)
    assert str(exc.value).startswith(error)


def test_grid_and_matrix_order():
    assert [hpl_mxp.process_grid(r) for r in (1, 2, 4, 8, 12)] == [(1, 1), (1, 2), (2, 2), (2, 4), (3, 4)]
    # one 80 GB GPU: a quarter of its memory in 4-byte words, a multiple of nb
    n = hpl_mxp.matrix_order(80 * 10 ** 9, 1, 1024, 0.25)
    assert n == 70656 and n % 1024 == 0
    assert hpl_mxp.matrix_order(141 * 10 ** 9, 8, 1024, 0.25) % (1024 * 4) == 0


def test_the_cpu_test_host_skips_with_the_reason(tmp_path):
    _, doc = run_probe("hpl_mxp", str(tmp_path), "r", "h", params={})
    assert doc["status"] == "skipped" and doc["reason"].startswith("no NVIDIA GPU on this node")
    assert "rocHPL-MxP is not implemented" in doc["reason"]
    assert doc["facts"]["across_nodes"].startswith("across nodes not implemented in this version")


def test_the_probe_runs_one_solve_per_format_through_mpirun(tmp_path, monkeypatch):
    """A node with one H100 (device.describe as nvidia-smi reports it), a stand-in xhpl_mxp, and a stand-in mpirun
    that records its command line and prints the real H100 output."""
    gpu = {"index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984, "driver": "570.133.20"}
    monkeypatch.setattr(hpl_mxp.device, "describe", lambda: (
        {"backend": "cuda", "model": gpu["model"], "count": 1, "driver": gpu["driver"], "torch": None}, [gpu],
        {"gpu_tool": "nvidia-smi", "gpu_error": None}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xhpl_mxp").write_text("#!/bin/sh\nexit 3\n")
    (bin_dir / "mpirun").write_text('#!/bin/sh\necho "$@" >> %s\ncat "%s"\n' % (
        tmp_path / "argv", FIX / "hpl-mxp_25.4.0_h100x1.txt"))
    for name in ("xhpl_mxp", "mpirun"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    _, doc = run_probe("hpl_mxp", str(tmp_path / "out"), "r", "h", params={"formats": ["FP8", "FP16"]})
    calls = (tmp_path / "argv").read_text().splitlines()
    assert len(calls) == 2 and calls[0].split()[-2:] == ["--sloppy-type", "1"] and calls[1].endswith(
        "--sloppy-type 2")
    assert "-np 1 --bind-to none %s --n 72704 --nb 1024 --nprow 1 --npcol 1" % (bin_dir / "xhpl_mxp") in calls[0]
    assert doc["status"] == "ok" and doc["facts"]["version"] == "25.4.0" and doc["facts"]["grid"] == "1x1"
    per_gpu = [r for r in doc["results"] if r["metric"] == "gflops_per_gpu"]
    # the stand-in prints the same FP16 output for both: the format is the one the output names
    assert [(r["labels"]["format"], r["value"]) for r in per_gpu] == [("FP16", 61566.51), ("FP16", 61566.51)]
    assert {r["value"] for r in doc["results"] if r["metric"] == "passed"} == {1}
    assert doc["raw"] == ["hpl_mxp.fp8.txt", "hpl_mxp.fp16.txt"]
    # the report's table and the residual check graded from the artifact
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts
    from reports.phases.gpu_compute import section
    from reports.render import markdown

    run = run_of_artifacts([doc])
    table = markdown.render([section.hpl_mxp_table(run)])
    assert "| h | FP16 | 92160 | 1x1 | 61567.0 | 61566.5 | 237855.4 | 9.332e-04 | PASSED |" in table  # 6.1567e+04
    [row] = [r for r in grade(run, load_rubric()) if r["check_id"] == "compute.hpl_mxp"]
    assert row["status"] == "pass"
