"""HPL-MxP (probes/gpu_compute/hpl_mxp.py): its output read from real captures (tests/fixtures/hpl-mxp/README.md),
the process grid and matrix size, and the probe running a stand-in mpirun that prints a real output."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from free_ports import free_port

from probes.cli import run_probe
from probes.gpu_compute import hpl_mxp

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "hpl-mxp"


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
    assert doc["facts"]["across_nodes"] == "not run: the run has one host"


def test_a_nan_or_unreadable_residual_is_a_failed_check():
    whole = text("hpl-mxp_25.4.0_h100x1.txt")
    good = "=    9.331928E-04 ...... PASSED"
    for bad, residual in (("=            -nan ...... FAILED", "nan"), ("=             inf ...... FAILED", "inf")):
        (r,) = hpl_mxp.parse(whole.replace(good, bad))["results"]
        assert r["passed"] is False and str(r["residual"]) == residual
    (r,) = hpl_mxp.parse(whole.replace(good, "=    (garbled) ...... ?"))["results"]
    assert r["passed"] is False and r["residual"] is None


def _node(tmp_path, monkeypatch, gpus, outputs, caps=""):
    """A node with these GPUs (device.describe as nvidia-smi reports them), a stand-in xhpl_mxp, an Open MPI
    mpirun stand-in that records its command line and prints outputs[<sloppy type>] (real captures), and an
    nvidia-smi that answers the compute-capability query."""
    monkeypatch.setattr(hpl_mxp.device, "describe", lambda: (
        {"backend": "cuda", "model": gpus[0]["model"], "count": len(gpus), "driver": "570.133.20", "torch": None},
        gpus, {"gpu_tool": "nvidia-smi", "gpu_error": None}))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xhpl_mxp").write_text("#!/bin/sh\nexit 3\n")
    cases = "".join('  *"--sloppy-type %s") cat "%s";;\n' % (k, FIX / v) for k, v in outputs.items())
    (bin_dir / "mpirun").write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "mpirun (Open MPI) 4.1.6"; exit 0; }\necho "$@" >> %s\n'
        'case "$*" in\n%s  *) echo "xhpl_mxp: bad argument"; exit 1;;\nesac\n' % (tmp_path / "argv", cases))
    (bin_dir / "nvidia-smi").write_text('#!/bin/sh\nprintf "%s"\n' % caps)
    for name in ("xhpl_mxp", "mpirun", "nvidia-smi"):
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    return bin_dir


H100 = {"index": 0, "model": "NVIDIA H100 80GB HBM3", "memory_total_bytes": 85520809984, "driver": "570.133.20"}


def test_the_probe_runs_one_solve_per_format_through_mpirun(tmp_path, monkeypatch):
    bin_dir = _node(tmp_path, monkeypatch, [H100], {2: "hpl-mxp_25.4.0_h100x1.txt", 1: "hpl-mxp_25.4.0_h100x1.txt"},
                    "0, 9.0\n")
    _, doc = run_probe("hpl_mxp", str(tmp_path / "out"), "r", "h", params={"formats": ["FP8", "FP16"]})
    calls = (tmp_path / "argv").read_text().splitlines()
    assert len(calls) == 2 and calls[0].endswith("--sloppy-type 1") and calls[1].endswith("--sloppy-type 2")
    n = doc["facts"]["n"]
    assert calls[1] == ("-np 1 --bind-to none%s %s --n %d --nb 1024 --nprow 1 --npcol 1 --sloppy-type 2" % (
        " --allow-run-as-root" if os.geteuid() == 0 else "", bin_dir / "xhpl_mxp", n))
    assert n % 1024 == 0 and n <= 72704  # a quarter of 80 GB in 4-byte words, or less where the host has less
    # the stand-in answers FP8 with the FP16 output: a solve in another format than asked is an error, and the FP8
    # check fails; FP16 is measured and passes
    assert doc["status"] == "error" and "FP8 asked for, xhpl_mxp solved in FP16" in doc["reason"]
    per_gpu = [r for r in doc["results"] if r["metric"] == "gflops_per_gpu"]
    assert [(r["labels"]["format"], r["value"]) for r in per_gpu] == [("FP16", 61566.51)]
    assert {r["labels"]["format"]: r["value"] for r in doc["results"] if r["metric"] == "passed"} == {
        "FP8": 0, "FP16": 1}
    assert doc["raw"] == ["hpl_mxp.fp8.txt", "hpl_mxp.fp16.txt"]
    # the report's table and the residual check graded from the artifact: a format not shown correct fails it
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts
    from reports.phases.gpu_compute import section
    from reports.render import markdown

    run = run_of_artifacts([doc])
    table = markdown.render([section.hpl_mxp_table(run)])
    assert "| h | FP16 | 92160 | 1x1 | 61567.0 | 61566.5 | 237855.4 | 9.332e-04 | PASSED |" in table  # 6.1567e+04
    [row] = [r for r in grade(run, load_rubric()) if r["check_id"] == "compute.hpl_mxp"]
    assert row["status"] == "fail"


def test_a_nan_residual_fails_the_check_and_leaves_no_nan_in_the_artifact(tmp_path, monkeypatch):
    nan_out = tmp_path / "nan.txt"
    nan_out.write_text(text("hpl-mxp_25.4.0_h100x1.txt").replace("=    9.331928E-04 ...... PASSED",
                                                                   "=            -nan ...... FAILED"))
    _node(tmp_path, monkeypatch, [H100], {2: str(nan_out)}, "0, 9.0\n")
    path, doc = run_probe("hpl_mxp", str(tmp_path / "out"), "r", "h", params={"formats": ["FP16"]})
    assert "NaN" not in open(path).read() and doc["facts"]["residual.FP16"] == "nan"
    assert [r["value"] for r in doc["results"] if r["metric"] == "passed"] == [0]


def test_fp8_is_skipped_below_hopper_and_an_unsized_gpu_is_not_guessed(tmp_path, monkeypatch):
    a100 = dict(H100, model="NVIDIA A100-SXM4-80GB")
    _node(tmp_path, monkeypatch, [a100], {2: "hpl-mxp_25.4.0_h100x1.txt"}, "0, 8.0\n")
    _, doc = run_probe("hpl_mxp", str(tmp_path / "out"), "r", "h", params={"formats": ["FP8", "FP16"]})
    assert [c.split()[-1] for c in (tmp_path / "argv").read_text().splitlines()] == ["2"]  # FP16 only
    assert doc["status"] == "ok" and doc["facts"]["format.FP8"].startswith(
        "skipped: compute capability 8.0 has no FP8 tensor cores")
    monkeypatch.setattr(hpl_mxp.device, "describe", lambda: (
        {"backend": "cuda", "model": a100["model"], "count": 1, "driver": None, "torch": None},
        [dict(a100, memory_total_bytes=None)], {"gpu_tool": "nvidia-smi", "gpu_error": None}))
    _, unsized = run_probe("hpl_mxp", str(tmp_path / "u"), "r", "h", params={})
    assert unsized["status"] == "skipped" and "no memory size" in unsized["reason"]


def _two_nodes(tmp_path, params, per_host=None):
    """Two "nodes" as probe processes on loopback (as the play starts them, at once), with an Open MPI mpirun
    stand-in on PATH: it records its command line and prints the real 26.2.0 three-node output when started with a
    hostfile (across nodes), the real one-H100 output otherwise. Returns both artifacts and the mpirun calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "xhpl_mxp").write_text("#!/bin/sh\nexit 3\n")
    (bin_dir / "mpirun").write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "mpirun (Open MPI) 4.1.6"; exit 0; }\necho "$@" >> %s\n'
        'case "$*" in\n  *--hostfile*) cat "%s";;\n  *) cat "%s";;\nesac\n'
        % (tmp_path / "argv", FIX / "hpl-mxp_26.2.0_12gpu_3node_head_tail.txt", FIX / "hpl-mxp_25.4.0_h100x1.txt"))
    for name in ("xhpl_mxp", "mpirun"):
        (bin_dir / name).chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ["PATH"]))
    hosts, procs, port = ["a", "b"], [], free_port()
    for rank, host in enumerate(hosts):
        p = dict(params, path=str(bin_dir / "xhpl_mxp"), hosts=hosts, addresses=["127.0.0.1"] * 2, rank=rank,
                 launcher="mpirun", port=port)
        p.update((per_host or {}).get(host, {}))
        procs.append(subprocess.Popen([sys.executable, "-m", "probes", "hpl_mxp", "--out", str(tmp_path / host),
                                       "--host", host, "--run-id", "r-hpl", "--params", json.dumps(p)],
                                      cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    calls = (tmp_path / "argv").read_text().splitlines() if (tmp_path / "argv").exists() else []
    return {h: json.loads((tmp_path / h / "hpl_mxp.json").read_text()) for h in hosts}, calls


ACROSS = {"formats": ["FP16"], "n": 4096, "nb": 256, "ranks_per_node": 1, "rdzv_timeout": 30}


def test_after_each_node_alone_one_solve_across_all_nodes_through_mpirun(tmp_path):
    docs, calls = _two_nodes(tmp_path, ACROSS)
    # each node solved alone (mpirun -np 1), then the first host started one world of 2 ranks with a hostfile
    local = [c for c in calls if "--hostfile" not in c]
    [world] = [c for c in calls if "--hostfile" in c]
    assert len(local) == 2 and all(c.startswith("-np 1 ") for c in local)
    assert world.startswith("-np 2 --hostfile ") and "--map-by ppr:1:node --bind-to none" in world
    assert world.endswith("%s --n 4096 --nb 256 --nprow 1 --npcol 2 --sloppy-type 2" % (tmp_path / "bin/xhpl_mxp"))
    first, other = docs["a"], docs["b"]
    assert first["facts"]["across_hostfile"] == "127.0.0.1 slots=1\n127.0.0.1 slots=1\n"
    assert first["facts"]["across_nodes"] == "run: 2 nodes, 2 ranks through mpirun"
    across = [r for r in first["results"] if r["labels"]["nodes"] == 2]
    # the labels are the world's; the numbers are what xhpl_mxp printed (here the 3-node capture's)
    assert {(r["metric"], r["value"]) for r in across} >= {("gflops_per_gpu", 3340.96), ("passed", 1)}
    assert {r["labels"]["ranks"] for r in across} == {2}
    assert "hpl_mxp.fp16.n2.txt" in first["raw"] and (tmp_path / "a" / "hpl_mxp.fp16.n2.txt").read_text().startswith(
        "# %s -np 2 --hostfile" % (tmp_path / "bin" / "mpirun"))
    assert not [r for r in other["results"] if r["labels"]["nodes"] == 2]
    assert first["status"] == other["status"] == "ok"
    assert not [p for p in os.listdir(tmp_path / "a") if p.startswith(".")]  # the hostfile's work dir is gone
    # graded on the first host: the check across nodes passes there and is not repeated on the other host
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts

    rows = [r for r in grade(run_of_artifacts(list(docs.values())), load_rubric())
            if r["check_id"] == "compute.hpl_mxp_multinode"]
    assert [(r["host"], r["status"]) for r in rows] == [("a", "pass")]
    from reports.phases.gpu_compute import section
    from reports.render import markdown

    table = markdown.render([section.hpl_mxp_table(run_of_artifacts(list(docs.values())))])
    assert "| 2 nodes (from a) | FP16 | 480000 | 3x4 | 40092.0 | 3341.0 | 3759.7 | 3.403e-04 | PASSED |" in table, table


def test_a_slice_of_a_sliced_run_solves_each_node_alone_and_says_why_not_across(tmp_path):
    """A slice's hosts are part of the cluster (AWX job slicing): a world of them is not the cluster's."""
    docs, calls = _two_nodes(tmp_path, dict(ACROSS, slice="s2"))
    assert len(calls) == 2 and all(c.startswith("-np 1 ") for c in calls)
    for doc in docs.values():
        assert doc["status"] == "ok" and not [r for r in doc["results"] if r["labels"]["nodes"] == 2]
        assert doc["facts"]["across_nodes"] == ("not run: this is slice s2 of a sliced run, and the solve across "
                                                "nodes needs every node in one run (an unsliced assessment runs it)")


def test_a_host_that_cannot_solve_is_named_and_nothing_runs_across_nodes(tmp_path):
    docs, calls = _two_nodes(tmp_path, ACROSS, per_host={"b": {"path": str(tmp_path / "nowhere" / "xhpl_mxp")}})
    assert not [c for c in calls if "--hostfile" in c]
    assert docs["b"]["status"] == "skipped" and docs["b"]["reason"].startswith("xhpl_mxp not found at")
    assert docs["a"]["facts"]["across_nodes"] == "not run: every host must solve; b: xhpl_mxp not found at %s" % (
        tmp_path / "nowhere" / "xhpl_mxp")
    assert docs["a"]["status"] == "ok"  # its own solve is kept


def test_the_nodes_must_agree_on_one_command_line():
    node = {"why_not": None, "gpus": 8, "ranks": 8, "program": ["/opt/hpc-benchmarks/hpl-mxp.sh", "--gpu-affinity",
                                                                 "0:1:2:3:4:5:6:7"]}
    assert hpl_mxp.world_problem([node, node], "mpirun", {}, ["a", "b"]) is None
    assert hpl_mxp.world_problem([node, node], "torchrun", {"srun": "scontrol not found"}, ["a", "b"]) == (
        "xhpl_mxp starts across nodes only through MPI (srun or mpirun); the launcher is torchrun "
        "(srun: scontrol not found)")
    assert hpl_mxp.world_problem([node, dict(node, gpus=4, ranks=4)], "srun", {}, ["a", "b"]) == (
        "the nodes differ in ranks per node (one per GPU) (a 8, b 4): one command line starts every rank")


def test_across_nodes_is_an_error_only_when_the_step_itself_failed():
    """One host whose own solve failed: the check across nodes is a skip (there was nothing to solve across), not
    an error; hosts that did not meet, or one that never finished alone, are an error."""
    from probes.artifact import Artifact
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts

    def doc(**facts):
        art = Artifact("hpl_mxp", "r", "a")
        art.facts.update(facts)
        art.add("passed", 0, "bool", format="FP16", n=1024, nb=256, grid="1x1", nodes=1, ranks=1)
        art.error("FP16: exit 1")
        return art.to_dict()

    def row(d):
        [r] = [r for r in grade(run_of_artifacts([d]), load_rubric()) if r["check_id"] == "compute.hpl_mxp_multinode"]
        return r["status"], r["reason"]

    assert row(doc(across_nodes="not run: the run has one host")) == ("skip", "not run: the run has one host")
    said = "not run: b did not finish solving alone"
    assert row(doc(across_nodes=said, across_error="b did not finish solving alone")) == ("error", said)


def test_the_wrapper_under_srun_gets_every_gpu_of_the_node():
    from probes.common import launch

    argv = launch.srun_argv(["n1", "n2"], 8, [], "cmxa-x-hpl", mpi="pmix", gpus_per_node=8)
    assert "--gpus-per-node=8" in argv and not [a for a in argv if a.startswith("--gpus-per-task")]
    assert "--gpus-per-task=1" in launch.srun_argv(["n1"], 8, [], "j", gpus_per_task=1, gpus_per_node=8)


def test_when_no_host_could_solve_each_host_shows_its_own_reason():
    from probes.artifact import Artifact
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts

    docs = []
    for host in ("a", "b"):
        art = Artifact("hpl_mxp", "r", host)
        art.facts["across_nodes"] = "not run: every host must solve; a: no NVIDIA GPU; b: no NVIDIA GPU"
        art.skip("no NVIDIA GPU on this node (backend cpu)")
        docs.append(art.to_dict())
    rows = [r for r in grade(run_of_artifacts(docs), load_rubric()) if r["check_id"] == "compute.hpl_mxp_multinode"]
    why = "no NVIDIA GPU on this node (backend cpu)"
    assert [(r["host"], r["status"], r["reason"]) for r in rows] == [("a", "skip", why), ("b", "skip", why)]


def test_a_world_without_a_result_names_the_rank_the_launcher_saw_fail(tmp_path):
    """An xhpl_mxp world across nodes that printed no result: the reason names the rank and host srun reported
    failing first (a clean-clone run's reason quoted only srun's last line, 'srun: Force Terminated')."""
    from probes.artifact import Artifact
    from probes.common.command import CmdResult

    said = (ROOT / "tests" / "fixtures" / "launchers" / "fault-exit3-srun-kill-on-bad-exit.txt").read_text()
    res = CmdResult(["srun", "xhpl_mxp"], 143, said, "", False, False)
    why = hpl_mxp._solve(Artifact("hpl_mxp", "r", "a"), "FP16", res, 60, {}, "srun")
    assert why == ("FP16: exit 143: xhpl_mxp: no HPL-MxP result; last line 'srun: Force Terminated StepId=4.0'; "
                   "srun: rank 1 on cmxl-node2 exited with status 3; rank 0 ended by srun after that")
    # a node's own solve (no launcher across nodes) says what it said before
    assert hpl_mxp._solve(Artifact("hpl_mxp", "r", "a"), "FP16", res, 60, {}).endswith("StepId=4.0'")
