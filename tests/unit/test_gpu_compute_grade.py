"""Grading of the GPU compute phase against gpus.yml (the shipped rubric.d/gpu_compute.yml), stragglers on
synthetic data, and the report section on a synthetic 8-GPU run."""

import pytest

from probes.artifact import Artifact
from reports import grading as grade
from reports.grading.expectations import load_gpus
from reports.grading.kinds import grade_metric
from reports.load import run_of_artifacts as run_of
from reports.phases.gpu_compute import section

MODELS = load_gpus()
H100 = "NVIDIA H100 80GB HBM3"


def compute_checks():
    return {"checks": [c for c in grade.load_rubric()["checks"] if c["category"] == "compute"]}


def info(host, model=H100):
    art = Artifact("node_info", "r", host)
    art.facts["gpu_model"] = model
    return art.to_dict()


def gemm(host, bf16, fp8=None, backend="cuda", model=H100):
    """bf16 / fp8: TFLOP/s per GPU (two shapes each: the best is 5 % above the other)."""
    art = Artifact("gemm", "r", host)
    art.device.update(backend=backend, model=model, count=len(bf16))
    art.facts.update({"dtypes": "bf16,tf32,fp8_e4m3,mxfp8", "dtype.bf16": "ok", "dtype.tf32": "error",
                      "dtype_reason.tf32": "gpu 0 error: square_8192: RuntimeError: CUBLAS_STATUS_EXECUTION_FAILED",
                      "dtype.mxfp8": "skipped",
                      "dtype_reason.mxfp8": "%s (compute capability 9.0) has no block-scaled mxfp8 tensor cores"
                      % H100})
    for dtype, values in (("bf16", bf16), ("fp8_e4m3", fp8)):
        if values is None:
            continue
        art.facts["dtype.%s" % dtype] = "ok"
        for gpu, value in enumerate(values):
            for shape, v in (("square_8192", value), ("square_4096", value / 1.05)):
                art.add("tflops", v, "TFLOP/s", gpu=gpu, dtype=dtype, shape=shape, m=8192, n=8192, k=8192)
    return art.to_dict()


def gemv(host, gbps, model=H100):
    art = Artifact("gemv", "r", host)
    art.device.update(backend="cuda", model=model)
    art.facts.update({"dtype.bf16": "ok", "dtypes": "bf16"})
    for gpu, value in enumerate(gbps):
        art.add("gbps", value, "GB/s", gpu=gpu, dtype="bf16", m=28672, k=8192, shape="llama70b_mlp_up_row")
    return art.to_dict()


def mamf(host, best, dtype="bf16", model=H100):
    """best: mamf_tflops per GPU (the best shape of the sweep), as probes/gpu_compute/mamf.py records it."""
    art = Artifact("mamf", "r", host)
    art.device.update(backend="cuda", model=model, count=len(best))
    art.facts.update({"dtypes": dtype, "dtype.%s" % dtype: "ok", "gpus": ",".join(str(g) for g in range(len(best)))})
    for gpu, value in enumerate(best):
        art.add("mamf_tflops", value, "TFLOP/s", gpu=gpu, dtype=dtype, m=12288, n=4096, k=4096)
    return art.to_dict()


def copy_bw(host, h2d, d2h, p2p):
    art = Artifact("copy_bw", "r", host)
    art.device.update(backend="cuda", model=H100)
    for gpu in range(len(h2d)):
        art.add("gbps", h2d[gpu], "GB/s", gpu=gpu, direction="h2d", bytes=1 << 29)
        art.add("gbps", d2h[gpu], "GB/s", gpu=gpu, direction="d2h", bytes=1 << 29)
        for peer in range(len(h2d)):
            if peer != gpu:
                art.add("gbps", p2p(gpu, peer), "GB/s", gpu=gpu, peer=peer, direction="p2p", bytes=1 << 29)
    return art.to_dict()



@pytest.fixture(scope="module")
def graded():
    healthy = [720.0, 722.0, 718.0, 725.0, 721.0, 719.0, 723.0, 720.0]
    slow = list(healthy)
    slow[5] = 540.0  # below 0.7 x MAMF and 25 % below its node's median
    docs = [info("n1"), info("n2"),
            gemm("n1", healthy, fp8=[1300.0] * 8), gemm("n2", slow),
            gemv("n1", [2900.0] * 8), gemv("n2", [2900.0] * 7 + [2400.0]),
            copy_bw("n1", [55.0] * 8, [55.0] * 8, lambda g, p: 390.0),
            copy_bw("n2", [55.0] * 8, [40.0] * 8, lambda g, p: 300.0 if (g, p) == (1, 6) else 392.0)]
    run = run_of(docs)
    rows = grade.grade(run, compute_checks())
    return run, {(r["check_id"], r["host"], r["subject"]): r for r in rows}, rows


def test_bf16_against_mamf_per_gpu(graded):
    _, by, _ = graded
    # MAMF H100 bf16 794.5: fail below 556.15, warn below 715.05; the best shape counts (agg max)
    assert by[("compute.gemm_bf16_vs_mamf", "n1", "gpu=0")]["status"] == "pass"
    assert by[("compute.gemm_bf16_vs_mamf", "n1", "gpu=0")]["observed"] == "720 TFLOP/s"
    row = by[("compute.gemm_bf16_vs_mamf", "n2", "gpu=5")]
    assert row["status"] == "fail" and row["expected"] == ">= 556.1 (0.7 × mamf_bf16_tflops 794.5)"
    # 720 of 989 peak = 0.73: above 0.65 -> pass
    assert by[("compute.gemm_bf16_vs_peak", "n1", "gpu=3")]["status"] == "pass"


def test_dtype_records_decide_skip_error_and_not_measured(graded):
    _, by, _ = graded
    mx = by[("compute.gemm_mxfp8_vs_peak", "n1", "")]
    assert mx["status"] == "skip" and "compute capability 9.0" in mx["reason"]
    tf = by[("compute.gemm_tf32_vs_peak", "n1", "")]
    assert tf["status"] == "error" and "CUBLAS_STATUS_EXECUTION_FAILED" in tf["reason"]
    fp16 = by[("compute.gemm_fp16_vs_peak", "n1", "")]
    assert fp16["status"] == "skip" and "fp16 was not measured in this run" in fp16["reason"]
    assert by[("compute.gemm_fp8_vs_mamf", "n1", "gpu=0")]["status"] == "pass"  # 1300 >= 0.9 x 1402.6
    assert by[("compute.gemm_fp8_vs_mamf", "n2", "")]["status"] == "skip"  # n2 did not measure fp8


def test_stragglers_against_node_and_cluster_medians(graded):
    _, by, _ = graded
    node = by[("compute.gemm_bf16_straggler_node", "n2", "gpu=5")]
    assert node["status"] == "fail" and "25.1% below node median" in node["observed"]
    assert by[("compute.gemm_bf16_straggler_node", "n2", "gpu=4")]["status"] == "pass"
    assert by[("compute.gemm_bf16_straggler_cluster", "n2", "gpu=5")]["status"] == "fail"
    gemv_row = by[("compute.gemv_straggler_cluster", "n2", "gpu=7")]
    assert gemv_row["status"] == "fail" and "17.2% below cluster median" in gemv_row["observed"]


def test_hbm_and_pcie_against_expected(graded):
    _, by, _ = graded
    assert by[("compute.gemv_hbm", "n1", "gpu=0")]["status"] == "pass"  # 2900 >= 0.75 x 3350
    assert by[("compute.gemv_hbm", "n2", "gpu=7")]["status"] == "warn"  # 2400: between 0.6 and 0.75 of it
    assert by[("compute.copy_h2d", "n1", "gpu=0")]["status"] == "pass"
    d2h = by[("compute.copy_d2h", "n2", "gpu=0")]
    assert d2h["status"] == "fail" and d2h["expected"] == ">= 48 (1 × d2h_gbps_min 48)"
    # one slow pair (1 -> 6): neither GPU is the common factor of slow copies (the median of each one's pairs is
    # 392), so no GPU fails; the node fails on its slowest pair, naming both GPUs (before: GPU 1 failed on its
    # slowest peer alone, and GPU 6, as slow, passed: the min over one GPU's peers blamed whichever GPU's row it was)
    p2p = by[("compute.copy_p2p", "n2", "gpu=1")]
    assert p2p["status"] == "pass" and p2p["observed"] == "392 GB/s median of its 14 pairs (slowest 300, with GPU 6)"
    assert by[("compute.copy_p2p", "n2", "gpu=2")]["status"] == "pass"
    pair = by[("compute.copy_p2p", "n2", "slowest pair")]
    assert (pair["status"], pair["observed"]) == ("fail", "300 GB/s: GPU 1 and GPU 6 (gpu=1, peer=6)")
    assert pair["reason"] == "the GPUs' other pairs are not slow: the link between these two"
    assert by[("compute.copy_p2p", "n1", "slowest pair")]["status"] == "pass"


def test_every_check_has_a_row_for_every_host(graded):
    run, _, rows = graded
    for check in compute_checks()["checks"]:
        assert {r["host"] for r in rows if r["check_id"] == check["id"]} == set(run.hosts), check["id"]
    nvb = [r for r in rows if r["check_id"] == "compute.nvbandwidth_h2d"]
    assert {r["status"] for r in nvb} == {"skip"} and "did not run" in nvb[0]["reason"]


def test_cpu_backend_and_unreachable_hosts_skip():
    docs = [info("c1", model=None), gemm("c1", [0.2], backend="cpu", model=None)]
    run = run_of(docs, unreachable=["c2"])
    check = next(c for c in compute_checks()["checks"] if c["id"] == "compute.gemm_bf16_vs_mamf")
    [row] = grade_metric(check, run, "c1", MODELS)
    assert row["status"] == "skip" and row["reason"] == "backend=cpu: expectation is for cuda/rocm"
    [row] = grade_metric(check, run, "c2", MODELS)
    assert row["status"] == "skip" and row["reason"] == "host unreachable"
    mx = next(c for c in compute_checks()["checks"] if c["id"] == "compute.gemm_mxfp8_vs_peak")
    assert "compute capability" in grade_metric(mx, run, "c1", MODELS)[0]["reason"]


def test_report_section_tables_and_plots(graded, tmp_path):
    run, _, rows = graded
    md = section.render(run, rows, str(tmp_path))
    assert md.startswith("## GPU compute")
    assert "| n2 gpu5 | 540.0 |" in md  # best shape per GPU and dtype
    assert "| n1 gpu0 | 720.0 | 1300.0 |" in md
    assert "skipped [" in md and "compute capability 9.0" in md  # the skipped dtype and its reason
    # what compute.copy_p2p judges: the median of each GPU's pairs (sent and received) and its slowest pair, which
    # the bad link 1 -> 6 is on both GPUs' rows while their medians pass (the check's rows say the same)
    assert "p2p median of its pairs GB/s | p2p slowest pair GB/s" in md
    assert "| n2 gpu1 | 55 | 40 | 392.0 | 300.0 (GPU 6) |" in md
    assert "| n2 gpu6 | 55 | 40 | 392.0 | 300.0 (GPU 1) |" in md
    assert "| n2 gpu2 | 55 | 40 | 392.0 | 392.0 (GPU 0) |" in md
    for name in ("gpu_compute_gemm_tflops.png", "gpu_compute_copy_bw.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    assert section.render(run_of([info("x")]), [], str(tmp_path)) == ""  # phase not run: no section
    assert section.fmt(781.94) == "781.9" and section.fmt(0.0123456) == "0.0123"


def test_a_run_without_the_phase_skips_every_compute_check():
    run = run_of([info("n1"), info("n2")])
    rows = grade.grade(run, compute_checks())
    assert rows and {r["status"] for r in rows} == {"skip"} and all(r["reason"] for r in rows)
    assert not [r for r in rows if "error" in r["status"]]


def test_gb300_mamf_is_skipped_with_the_reason_there_is_none():
    # no public MAMF for GB300 (gpus.yml absent): the GEMM is still judged against the datasheet peak
    run = run_of([info("n1", "NVIDIA GB300"), gemm("n1", [1800.0] * 4, fp8=[3600.0] * 4, model="NVIDIA GB300")])
    rows = {(r["check_id"], r["subject"]): r for r in grade.grade(run, compute_checks())}
    bf16 = rows[("compute.gemm_bf16_vs_mamf", "gpu=0")]
    assert bf16["status"] == "skip" and bf16["reason"].startswith("no public MAMF for GB300: stas00/ml-engineering")
    assert rows[("compute.gemm_fp8_vs_mamf", "gpu=3")]["reason"].startswith("no public FP8 MAMF for GB300")
    assert rows[("compute.gemm_bf16_vs_peak", "gpu=0")]["status"] == "pass"  # 1800 of 2500: 0.72


# The copy lines are read by compute.copy_* and compute.nvbandwidth_*; the one-node all-reduce line by the network
# phase, per GPUs in one node (8 on HGX boards and AMD platforms, 4 on a GB200/GB300 tray).
@pytest.mark.parametrize("model, gpus", [("B200", 8), ("B300", 8), ("GB200", 4), ("GB300", 4), ("MI300X", 8),
                                         ("MI325X", 8), ("MI355X", 8)])
def test_every_current_gpu_has_copy_and_all_reduce_lines(model, gpus):
    spec = MODELS[model]
    read = {c["expect"]["of"].format(gpus=gpus) for c in grade.load_rubric()["checks"]
            if "of" in (c.get("expect") or {})}
    for field in ("h2d_gbps_min", "d2h_gbps_min", "d2d_gbps_min", "allreduce_busbw_%dgpu_gbps_min" % gpus):
        assert field in read and spec[field] > 0, field


def test_the_torch_grouped_gemm_check_never_reads_the_deepgemm_variant():
    """compute.grouped_gemm_bf16 judges torch's grouped kernels (variant null); DeepGEMM's bf16 numbers, measured
    in the deepgemm variant of the same probe, must not raise (or lower) its aggregate."""
    from probes.artifact import Artifact
    from reports.grading import load_rubric
    from reports.grading.select import selection
    from reports.load import run_of_artifacts

    docs = []
    for variant, value in ((None, 100.0), ("deepgemm", 900.0)):
        art = Artifact("grouped_gemm", "r", "h", variant=variant)
        art.add("tflops", value, "TFLOP/s", dtype="bf16", model="deepseek-v3", proj="down", tokens=16384, gpu=0)
        docs.append(art.to_dict())
    run = run_of_artifacts(docs)
    check = next(c for c in load_rubric()["checks"] if c["id"] == "compute.grouped_gemm_bf16")
    assert list(selection(run, dict(check, labels={"dtype": "bf16"}), "h").values) == [100.0]
    deep = next(c for c in load_rubric()["checks"] if c["id"] == "compute.deepgemm_grouped")
    assert list(selection(run, dict(deep, labels={"dtype": "bf16"}), "h").values) == [900.0]


AMD_MI300X = "AMD Instinct MI300X"


def test_amd_nodes_are_judged_by_the_model_torch_names_in_the_artifact():
    """node_info has no GPU model on AMD (amd-smi list names none): the checks against gpus.yml take the artifact's
    device.model, as the training and inference graders do. Before, every one was a skip."""
    docs = [info("a1", None), gemm("a1", [100.0] * 8, backend="rocm", model=AMD_MI300X),
            info("a2", None), gemm("a2", [650.0] * 8, backend="rocm", model=AMD_MI300X)]
    rows = {(r["check_id"], r["host"], r["subject"]): r for r in grade.grade(run_of(docs), compute_checks())}
    slow = rows[("compute.gemm_bf16_vs_mamf", "a1", "gpu=0")]
    assert slow["status"] == "fail" and slow["expected"] == ">= 467.9 (0.7 × mamf_bf16_tflops 668.4)"
    peak = rows[("compute.gemm_bf16_vs_peak", "a1", "gpu=7")]
    assert peak["status"] == "fail" and peak["expected"] == ">= 653.5 (0.5 × bf16_peak_tflops 1307)"
    # 650 of MAMF 668.4: above 0.9 of it
    assert rows[("compute.gemm_bf16_vs_mamf", "a2", "gpu=3")]["status"] == "pass"
    # a model node_info names still wins over the artifact's
    run = run_of([info("n1"), gemm("n1", [100.0], model=AMD_MI300X)])
    [row] = grade_metric(next(c for c in compute_checks()["checks"] if c["id"] == "compute.gemm_bf16_vs_mamf"),
                         run, "n1", MODELS)
    assert row["expected"] == ">= 556.1 (0.7 × mamf_bf16_tflops 794.5)"


def test_mamf_sweep_floors_allow_the_quick_sweep_on_all_gpus_at_once():
    """A healthy GPU reaches 80-90 % of the published MAMF on a quick sweep (anchors.md), and the quick profile's
    m step of 1024 with every GPU loaded lands lower still: warn below 0.8, fail below 0.7 (H100 MAMF 794.5:
    635.6 and 556.15)."""
    run = run_of([info("n1"), mamf("n1", [700.0, 600.0, 540.0])])
    rows = {r["subject"]: r for r in grade.grade(run, compute_checks()) if r["check_id"] == "compute.mamf_bf16"}
    assert (rows["gpu=0"]["status"], rows["gpu=1"]["status"], rows["gpu=2"]["status"]) == ("pass", "warn", "fail")
    assert rows["gpu=2"]["expected"] == ">= 556.1 (0.7 × mamf_bf16_tflops 794.5)"
    assert rows["gpu=1"]["expected"] == (">= 556.1 (0.7 × mamf_bf16_tflops 794.5) (warn below >= 635.6 (0.8 × "
                                         "mamf_bf16_tflops 794.5))")
    fp8 = next(c for c in compute_checks()["checks"] if c["id"] == "compute.mamf_fp8")
    assert (fp8["expect"]["fraction"], fp8["warn"]["fraction"]) == (0.7, 0.8)


def test_gh200_144gb_hbm3e_is_judged_by_its_own_memory_bandwidth():
    """GH200 comes with 96 GB HBM3 at 4.0 TB/s or 144 GB HBM3e at 4.9 TB/s (NVIDIA's datasheet): the 144 GB part
    is its own gpus.yml entry. 3400 GB/s is healthy for the 96 GB part (0.75 x 4000 = 3000) and a warning for the
    144 GB one (0.75 x 4900 = 3675)."""
    gh144, gh96 = "NVIDIA GH200 144G HBM3e", "NVIDIA GH200 480GB"
    run = run_of([info("g1", gh144), gemv("g1", [3400.0], model=gh144),
                  info("g2", gh96), gemv("g2", [3400.0], model=gh96)])
    rows = {r["host"]: r for r in grade.grade(run, compute_checks())
            if r["check_id"] == "compute.gemv_hbm" and r["subject"] == "gpu=0"}
    assert rows["g1"]["status"] == "warn" and rows["g1"]["expected"].startswith(">= 2940 (0.6 × hbm_gbps 4900)")
    assert rows["g2"]["status"] == "pass" and rows["g2"]["expected"] == ">= 2400 (0.6 × hbm_gbps 4000)"
    big, small = MODELS["GH200-144GB"], MODELS["GH200"]
    assert (big["hbm_gb"], big["hbm_tbps"]) == (144, 4.9)
    assert {k: v for k, v in big.items() if k not in ("match", "hbm_gb", "hbm_tbps", "hbm_gbps")} == {
        k: v for k, v in small.items() if k not in ("match", "hbm_gb", "hbm_tbps", "hbm_gbps")}


def test_section_tables_show_judged_numbers_on_their_side_of_the_checks_lines():
    """GPU 0's pinned device-to-host copy at 47.996 GB/s fails H100's 48 GB/s line and its GEMV at 2512.46 GB/s warns
    under 0.75 × 3350 = 2512.5: the tables showed "48" and "2512.5", on the lines. Each keeps its side now; GPU 1,
    far from the lines, as before (reports/shown.py)."""
    docs = [info("n1"), gemv("n1", [2512.46, 2900.0]),
            copy_bw("n1", [55.0, 55.0], [47.996, 55.0], lambda g, p: 390.0)]
    run = run_of(docs)
    rows = grade.grade(run, compute_checks())
    by = {(r["check_id"], r["subject"]): r["status"] for r in rows if r["host"] == "n1"}
    assert by[("compute.copy_d2h", "gpu=0")] == "fail" and by[("compute.gemv_hbm", "gpu=0")] == "warn"
    md = section.render(run, rows, None)
    assert "| n1 gpu0 | 55 | 47.996 | 390.0 | 390.0 (GPU 1) |" in md, md
    assert "| n1 gpu1 | 55 | 55 | 390.0 | 390.0 (GPU 0) |" in md
    # the p2p columns are compute.copy_p2p's numbers (a gpu_pairs check), shown on their side of its line too
    run = run_of([info("n1"), copy_bw("n1", [55.0, 55.0], [55.0, 55.0], lambda g, p: 334.996)])
    shown_md = section.render(run, grade.grade(run, compute_checks()), None)
    assert "| n1 gpu0 | 55 | 55 | 334.996 | 334.996 (GPU 1) |" in shown_md
    assert "| n1 gpu0 | bf16 | 2512.46 | llama70b_mlp_up_row |" in md
    assert "| n1 gpu1 | bf16 | 2900.0 | llama70b_mlp_up_row |" in md
