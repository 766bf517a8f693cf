"""The GPU compute phase over real SSH on the 4-host test cluster (CPU backend: no GPU here).

One `assess.yml --tags gpu_compute` run (preflight, the phase, cleanup, report), shared by every assertion.
"""

import csv
import json
import statistics
import sys
from datetime import datetime

import pytest
from helpers import read_journal, run_dirs, run_playbook

from probes.artifact import validate

pytestmark = pytest.mark.cluster

PROBES = ("gemm", "grouped_gemm", "gemv", "mamf", "copy_bw", "nvbandwidth", "hpl_mxp")
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "mxfp8", "nvfp4")
CPU_DTYPES = ("bf16", "fp16", "fp32", "fp8_e4m3")  # what torch runs on this CPU; the others need a GPU


@pytest.fixture(scope="module")
def phase(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_compute")
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    out = tmp / "runs"
    res = run_playbook(inventory, "--tags", "gpu_compute", "-e", "assess_output_dir=%s" % out)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    hosts = sorted(h["name"] for h in test_cluster.hosts)
    return {"run_dir": run_dir, "hosts": hosts, "cluster": test_cluster}


def artifact(phase, host, probe):
    return json.loads((phase["run_dir"] / "artifacts" / host / ("%s.json" % probe)).read_text())


def test_every_probe_left_a_valid_artifact_on_every_host(phase):
    for host in phase["hosts"]:
        for probe in PROBES:
            doc = artifact(phase, host, probe)
            assert validate(doc) == [], (host, probe)
            assert doc["host"] == host and doc["device"]["backend"] == "cpu"
            expected = "skipped" if probe in ("nvbandwidth", "hpl_mxp") else "ok"
            assert doc["status"] == expected, (host, probe, doc.get("reason"))
        for probe in ("nvbandwidth", "hpl_mxp"):
            assert "no NVIDIA GPU" in artifact(phase, host, probe)["reason"]


def test_every_dtype_is_measured_or_skipped_with_its_reason(phase):
    for host in phase["hosts"]:
        gemm = artifact(phase, host, "gemm")
        facts = gemm["facts"]
        assert facts["dtypes"] == ",".join(DTYPES)
        measured = {r["labels"]["dtype"] for r in gemm["results"] if r["metric"] == "tflops"}
        assert measured == set(CPU_DTYPES)
        for dtype in DTYPES:
            if dtype in CPU_DTYPES:
                assert facts["dtype.%s" % dtype] == "ok"
            else:
                assert facts["dtype.%s" % dtype] == "skipped"
                assert dtype in facts["dtype_reason.%s" % dtype]
        assert "tensor-core" in facts["dtype_reason.tf32"]
        # one worker on the CPU, threads pinned to 1 so that four hosts share two cores
        assert facts["cpu_threads"] == 1 and facts["processes"] == "in-process"
        for r in gemm["results"]:
            assert 1e-5 < r["value"] < 50, r  # TFLOP/s of one CPU thread


def test_tflops_follow_from_the_raw_times(phase):
    """Every gemm result is 2*m*n*k over the mean of the iteration times kept in the raw file."""
    for host in phase["hosts"]:
        gemm = artifact(phase, host, "gemm")
        raw = [json.loads(line) for line in
               (phase["run_dir"] / "artifacts" / host / "gemm.times.jsonl").read_text().splitlines()]
        assert len(raw) == 2 * len(CPU_DTYPES)  # two quick shapes per measured dtype
        by_key = {(r["dtype"], r["shape"]): r for r in raw}
        for res in gemm["results"]:
            lab = res["labels"]
            rec = by_key[(lab["dtype"], lab["shape"])]
            assert rec["flops"] == 2 * lab["m"] * lab["n"] * lab["k"]
            times = rec["times_s"]
            assert len(times) == gemm["facts"]["timed_iters"]
            expected = {"tflops": rec["flops"] / statistics.fmean(times) / 1e12,
                        "tflops_median": rec["flops"] / statistics.median(times) / 1e12,
                        "tflops_max": rec["flops"] / min(times) / 1e12}[res["metric"]]
            assert res["value"] == pytest.approx(expected, rel=1e-6)


def test_mamf_grouped_gemv_and_copies(phase):
    for host in phase["hosts"]:
        mamf = artifact(phase, host, "mamf")
        curve = [r["value"] for r in mamf["results"] if r["metric"] == "tflops"]
        [best] = [r for r in mamf["results"] if r["metric"] == "mamf_tflops"]
        [geo] = [r for r in mamf["results"] if r["metric"] == "mamf_geomean_tflops"]
        assert len(curve) == 4 and best["value"] == max(curve)
        assert min(curve) <= geo["value"] <= best["value"]
        grouped = artifact(phase, host, "grouped_gemm")
        rows = {(r["labels"]["proj"], r["labels"]["tokens"]): r["labels"] for r in grouped["results"]
                if r["metric"] == "tflops"}
        # gpt-oss-120b, ep 32: 4 experts per GPU; tokens x top-4 / 32 rows per GPU
        assert rows[("gate_up", 128)]["rows"] == 16 and rows[("down", 256)]["rows"] == 32
        assert rows[("gate_up", 128)]["n"] == 5760 and rows[("down", 128)]["k"] == 2880
        assert {lab["impl"] for lab in rows.values()} <= {"torch._grouped_mm", "per_expert_loop"}
        gemv = artifact(phase, host, "gemv")
        assert [r["value"] > 0.01 for r in gemv["results"] if r["metric"] == "gbps"] == [True]
        copy = artifact(phase, host, "copy_bw")
        assert {r["labels"]["direction"] for r in copy["results"]} == {"host_local"}
        assert "h2d" in copy["facts"]["not_measured"]


def test_report_section_tables_and_plots(phase):
    report = phase["run_dir"] / "report"
    md = (report / "report.md").read_text()
    assert "## GPU compute" in md and "### MAMF sweep" in md and "### Copy bandwidth" in md
    for host in phase["hosts"]:
        assert "| %s cpu |" % host in md  # a row of the per-GPU GEMM table for every host
    assert "tf32 is a tensor-core math mode" in md  # skipped dtypes are shown with their reason
    for name in ("gpu_compute_gemm_tflops.png", "gpu_compute_mamf_sweep.png", "gpu_compute_copy_bw.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "](%s)" % name in md


def test_every_compute_check_is_graded_for_every_host(phase):
    with open(phase["run_dir"] / "report" / "checks.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["category"] == "compute"]
    ids = {r["check_id"] for r in rows}
    assert {"compute.gemm_bf16_vs_mamf", "compute.gemm_nvfp4_vs_peak", "compute.gemv_hbm", "compute.copy_h2d",
            "compute.gemm_bf16_straggler_node"} <= ids
    for check_id in ids:
        assert {r["host"] for r in rows if r["check_id"] == check_id} == set(phase["hosts"]), check_id
    by = {(r["check_id"], r["host"]): r for r in rows}
    host = phase["hosts"][0]
    assert by[("compute.gemm_ran", host)]["status"] == "pass"
    assert by[("compute.gemm_bf16_vs_mamf", host)]["status"] == "skip"
    assert "backend=cpu" in by[("compute.gemm_bf16_vs_mamf", host)]["reason"]
    assert "mxfp8" in by[("compute.gemm_mxfp8_vs_peak", host)]["reason"]
    assert not [r for r in rows if r["status"] in ("fail", "error")]


def test_phase_time_and_nothing_left_on_the_hosts(phase, record_property):
    journal = read_journal(phase["run_dir"])
    lines = [line for line in journal if line.get("play") == "GPU compute" and line.get("host")]
    assert {line["host"] for line in lines if line.get("probe") == "mamf"} == set(phase["hosts"])
    ends = [datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).timestamp() for line in lines]
    starts = [end - float(line.get("duration_s") or 0) for end, line in zip(ends, lines)]
    seconds = max(ends) - min(starts)
    record_property("gpu_compute_phase_seconds", seconds)  # shown, never asserted (a shared 2-core machine)
    print("gpu_compute phase on %d hosts: %.1f s" % (len(phase["hosts"]), seconds))
    for host in phase["hosts"]:
        res = phase["cluster"].exec(host, ["ls", "/tmp"])
        assert "clustermax-assess-" not in res.stdout
        procs = phase["cluster"].exec(host, ["ps", "-eo", "args"])
        assert "probes.gpu_compute.launch" not in procs.stdout
