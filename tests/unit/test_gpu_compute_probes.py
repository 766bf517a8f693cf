"""The compute probes on the CPU backend, in-process and as one subprocess per device: what they record, how
unsupported dtypes and faults show, and that a timeout keeps what was measured."""

import contextlib
import json
import os
import stat
import sys
import textwrap
from pathlib import Path

import pytest

from probes.artifact import validate
from probes.cli import run_probe
from probes.gpu_compute import backend as compute_backend
from probes.gpu_compute import launch as compute_launch
from probes.gpu_compute.shapes import gemm_flops

FIX = Path(__file__).resolve().parents[1] / "fixtures"
TINY = {"profile": "quick", "iters": 2, "warmup": 1, "flush_bytes": 1 << 20}


def results(doc, metric):
    return [r for r in doc["results"] if r["metric"] == metric]


def test_gemm_measures_what_the_cpu_can_and_skips_the_rest_with_reasons(tmp_path):
    params = dict(TINY, shapes=[["s64", 64, 96, 128]])
    path, doc = run_probe("gemm", str(tmp_path), "r", "h", params=params)
    assert validate(doc) == [] and doc["status"] == "ok", doc["reason"]
    assert doc["device"]["backend"] == "cpu" and doc["facts"]["backend"] == "cpu"
    tf = {r["labels"]["dtype"]: r for r in results(doc, "tflops")}
    assert set(tf) == {"bf16", "fp16", "fp32", "fp8_e4m3"}
    assert tf["fp8_e4m3"]["labels"]["impl"] == "torch._scaled_mm" and tf["bf16"]["labels"]["impl"] == "torch.mm"
    for dtype in ("tf32", "mxfp8", "nvfp4"):
        assert doc["facts"]["dtype.%s" % dtype] == "skipped" and doc["facts"]["dtype_reason.%s" % dtype]
    raw = [json.loads(line) for line in (tmp_path / "gemm.times.jsonl").read_text().splitlines()]
    assert doc["raw"] == ["gemm.times.jsonl"] and len(raw) == 4
    for rec in raw:
        assert rec["flops"] == gemm_flops(64, 96, 128) and len(rec["times_s"]) == 2
        mean = sum(rec["times_s"]) / 2
        assert tf[rec["dtype"]]["value"] == pytest.approx(rec["flops"] / mean / 1e12, rel=1e-6)
        [mx] = [r for r in results(doc, "tflops_max") if r["labels"]["dtype"] == rec["dtype"]]
        assert mx["value"] == pytest.approx(rec["flops"] / min(rec["times_s"]) / 1e12, rel=1e-6)


def test_unknown_dtype_is_an_error_that_keeps_the_others(tmp_path):
    _, doc = run_probe("gemm", str(tmp_path), "r", "h",
                       params=dict(TINY, shapes=[["s", 32, 32, 32]], dtypes=["bf16", "int3"]))
    assert doc["status"] == "error" and doc["reason"] == "int3: unknown dtype"
    assert [r["labels"]["dtype"] for r in results(doc, "tflops")] == ["bf16"]


def test_gemv_mamf_grouped_and_copy(tmp_path):
    _, gemv = run_probe("gemv", str(tmp_path / "v"), "r", "h", params=dict(TINY, shapes=[["v", 512, 256]]))
    [gb] = results(gemv, "gbps")
    assert gemv["status"] == "ok" and gb["labels"]["m"] == 512 and gb["value"] > 0
    raw = json.loads((tmp_path / "v" / "gemv.times.jsonl").read_text().splitlines()[0])
    assert raw["bytes"] == (512 * 256 + 256 + 512) * 2
    _, mamf = run_probe("mamf", str(tmp_path / "m"), "r", "h",
                        params=dict(TINY, sweep={"m": [32, 96, 32], "n": 64, "k": 64}))
    curve = results(mamf, "tflops")
    [best] = results(mamf, "mamf_tflops")
    assert [r["labels"]["m"] for r in curve] == [32, 64, 96]
    assert best["value"] == max(r["value"] for r in curve)
    assert best["labels"]["m"] == max(curve, key=lambda r: r["value"])["labels"]["m"]
    assert mamf["facts"]["sweep"] == "m=[32, 96, 32] n=64 k=64 (3 shapes)"
    _, grouped = run_probe("grouped_gemm", str(tmp_path / "g"), "r", "h",
                           params=dict(TINY, models=["gpt-oss-120b"], ep=128, tokens=[64]))
    rows = {r["labels"]["proj"]: r["labels"] for r in results(grouped, "tflops")}
    assert grouped["status"] == "ok" and set(rows) == {"gate_up", "down"}
    assert rows["gate_up"]["rows"] == 2 and rows["gate_up"]["experts_local"] == 1  # 64 x 4 / 128 experts
    raw = json.loads((tmp_path / "g" / "grouped_gemm.times.jsonl").read_text().splitlines()[0])
    assert raw["flops"] == 2 * 2 * 5760 * 2880
    _, grouped_bad = run_probe("grouped_gemm", str(tmp_path / "g2"), "r", "h",
                               params=dict(TINY, models=["gpt-oss-120b"], ep=3, tokens=[64]))
    assert grouped_bad["status"] == "error" and "divisible" in grouped_bad["reason"]
    _, copy = run_probe("copy_bw", str(tmp_path / "c"), "r", "h",
                        params={"profile": "quick", "iters": 2, "warmup": 1, "bytes": 1 << 20})
    assert copy["status"] == "ok" and {r["labels"]["direction"] for r in copy["results"]} == {"host_local"}
    assert [r["labels"]["bytes"] for r in results(copy, "gbps")] == [1 << 20]


def test_grouped_loop_and_grouped_mm_compute_the_same(tmp_path):
    import torch

    rows = [3, 0, 5]
    op_g, impl_g, keep_g = compute_backend.make_grouped(torch, "fp32", rows, 16, 32, "cpu", "torch._grouped_mm")
    op_l, impl_l, keep_l = compute_backend.make_grouped(torch, "fp32", rows, 16, 32, "cpu", "per_expert_loop")
    assert (impl_g, impl_l) == ("torch._grouped_mm", "per_expert_loop")
    x, w = keep_l[0], keep_l[1]
    op_l()
    expected = torch.cat([x[0:3] @ w[0].t(), x[3:8] @ w[2].t()])
    assert torch.allclose(keep_l[2], expected, atol=1e-4)
    out = torch._grouped_mm(keep_g[0], keep_g[1].transpose(-2, -1), offs=keep_g[2])
    assert torch.allclose(out, torch.cat([keep_g[0][0:3] @ keep_g[1][0].t(), keep_g[0][3:8] @ keep_g[1][2].t()]),
                          atol=1e-4)


def test_no_torch_is_a_skip_and_an_unusable_gpu_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(compute_backend, "import_torch", lambda: (None, "torch is not importable by x: boom"))
    _, doc = run_probe("gemm", str(tmp_path / "a"), "r", "h", params=TINY)
    assert doc["status"] == "skipped" and doc["reason"] == "torch is not importable by x: boom"
    monkeypatch.undo()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat %s\n" % (FIX / "nvidia-smi" / "h100_8x_query.csv"))
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    _, doc = run_probe("gemm", str(tmp_path / "b"), "r", "h", params=TINY)
    # a GPU node whose torch has no CUDA: never measure its CPU in place of its GPUs
    assert doc["status"] == "error" and "lists 8 GPU(s) but torch" in doc["reason"] and not doc["results"]
    _, forced = run_probe("gemm", str(tmp_path / "c"), "r", "h",
                          params=dict(TINY, backend="cpu", dtypes=["bf16"], shapes=[["s", 32, 32, 32]]))
    assert forced["status"] == "ok" and forced["device"]["backend"] == "cpu" and forced["device"]["model"]


def test_timeout_keeps_what_was_measured(tmp_path):
    # the small shape takes milliseconds; 200 iterations of 2048^3 take seconds on any CPU: the alarm rings there
    params = dict(TINY, dtypes=["bf16"], iters=200, shapes=[["small", 32, 32, 32], ["huge", 2048, 2048, 2048]])
    _, doc = run_probe("gemm", str(tmp_path), "r", "h", params=params, timeout=2.0)
    assert doc["status"] == "error" and doc["reason"] == "timed out after 2 s"
    assert [r["labels"]["shape"] for r in results(doc, "tflops")] == ["small"]


def run_stub_workers(tmp_path, monkeypatch, name, body):
    """(artifact, collector) of compute_launch.run_workers on the CPU with cpu_workers=2 (one subprocess per
    "GPU", as on CUDA), running the worker of module `name` (body: its source, with os and launch imported)."""
    from probes.artifact import Artifact

    mod = tmp_path / "mods" / ("%s.py" % name)
    mod.parent.mkdir()
    mod.write_text("import os\nfrom probes.gpu_compute import launch\n" + textwrap.dedent(body))
    monkeypatch.setenv("PYTHONPATH", str(mod.parent))
    sys.path.insert(0, str(mod.parent))
    try:
        import torch

        art = Artifact("gemm", "r", "h")
        ctx = compute_backend.Context(torch, "cpu", [0], 1, None, ["cpu"])
        out = tmp_path / name
        out.mkdir()
        col = compute_launch.run_workers(art, str(out), ctx, "%s:worker" % name, {"cpu_workers": 2}, "x.jsonl")
    finally:
        sys.path.remove(str(mod.parent))
    return art, col


def test_one_subprocess_per_device_and_a_dying_worker(tmp_path, monkeypatch):
    """The multi-process path (one worker per GPU on CUDA) on the CPU: cpu_workers=2. Then a worker that dies
    half-way: its results so far and its partner's are kept, and its death is an error with its exit code."""
    _, doc = run_probe("gemm", str(tmp_path / "ok"), "r", "h",
                       params=dict(TINY, cpu_workers=2, dtypes=["bf16", "nvfp4"], shapes=[["s", 32, 32, 32]]))
    assert doc["status"] == "ok" and doc["facts"]["processes"] == "2 subprocesses"
    assert sorted(r["labels"]["gpu"] for r in results(doc, "tflops")) == [0, 1]
    assert doc["facts"]["dtype.nvfp4"] == "skipped"
    assert not list((tmp_path / "ok").glob(".*stderr"))  # worker logs are removed

    art, col = run_stub_workers(tmp_path, monkeypatch, "dying_worker", """
        def worker(torch, dev, spec, emit):
            launch.result(emit, "tflops", 1.0 + dev.gpu, "TFLOP/s", dtype="bf16")
            if dev.gpu == 1:
                os._exit(7)
            launch.dtype_outcome(emit, "bf16", "ok")
    """)
    assert sorted(r["value"] for r in art.results) == [1.0, 2.0]
    assert col.failures == {1: "worker exited with rc 7: no message"}
    merged = compute_launch.merge_outcomes(col.per_gpu, col.labels, ["bf16"], col.failures)
    assert merged["bf16"][0] == "error" and "gpu 1 error: worker failed" in merged["bf16"][1]


def test_a_gpu_whose_worker_died_before_any_result_is_an_error_row_of_the_per_gpu_table(tmp_path, monkeypatch):
    """Worker 1 dies before its first result (a GPU that crashes under the load): the per-GPU checks show it as an
    error row beside the measured GPU. Before, the table had only GPU 0's row, and that check's coverage was full."""
    from reports.grading import load_rubric
    from reports.grading.kinds import grade_metric
    from reports.load import run_of_artifacts

    art, col = run_stub_workers(tmp_path, monkeypatch, "early_death", """
        def worker(torch, dev, spec, emit):
            if dev.gpu == 1:
                os._exit(9)
            launch.result(emit, "tflops", 700.0, "TFLOP/s", dtype="bf16", gpu=dev.gpu, shape="s")
            launch.dtype_outcome(emit, "bf16", "ok")
    """)
    compute_launch.apply_outcomes(art, compute_launch.merge_outcomes(col.per_gpu, col.labels, ["bf16"], col.failures))
    assert art.status == "error" and art.facts["gpus"] == "0,1"
    # graded as on a GPU node: the check's backend gate lifted, since this CPU run stands in for the GPUs
    check = dict(next(c for c in load_rubric()["checks"] if c["id"] == "compute.gemm_bf16_vs_mamf"), backends=None)
    rows = grade_metric(check, run_of_artifacts([art.to_dict()]), "h")
    assert [(r["subject"], r["status"]) for r in rows] == [("gpu=0", "skip"), ("gpu=1", "error")]
    assert "gpu 1 error: worker failed before measuring it: worker exited with rc 9" in rows[1]["reason"]


def test_merge_outcomes():
    ok, sk = ("ok", None), ("skipped", "needs Blackwell")
    merged = compute_launch.merge_outcomes({"bf16": {0: ok, 1: ok}, "mxfp8": {0: sk, 1: sk},
                                            "fp8_e4m3": {0: ok, 1: ("skipped", "odd")}}, [0, 1],
                                           ["bf16", "mxfp8", "fp8_e4m3", "fp16"], {})
    assert merged["bf16"] == ("ok", None)
    assert merged["mxfp8"] == ("skipped", "needs Blackwell")
    assert merged["fp8_e4m3"] == ("error", "gpu 1 skipped: odd")  # a GPU unlike its siblings is a finding
    assert merged["fp16"] == ("error", "gpu 0 error: not measured; gpu 1 error: not measured")


def test_visible_devices_keep_the_physical_gpu_numbers():
    assert compute_backend.visible_ids(None, 3) == (["0", "1", "2"], [0, 1, 2])
    assert compute_backend.visible_ids("2,3", 2) == (["2", "3"], [2, 3])
    assert compute_backend.visible_ids("GPU-aaa,GPU-bbb", 2) == (["GPU-aaa", "GPU-bbb"], [0, 1])


def test_flush_sizes():
    import torch

    from probes.gpu_compute.launch import flush_size, read_llc_bytes

    assert flush_size(torch, "cpu", llc=32 << 20) == 64 << 20  # twice the last-level cache
    assert flush_size(torch, "cpu", llc=1 << 20) == 8 << 20
    assert flush_size(torch, "cpu", {"flush_bytes": 5}) == 5
    llc = read_llc_bytes()
    assert llc is None or llc >= 1 << 16


def test_grouped_falls_back_to_the_loop_per_configuration_and_says_so(tmp_path, monkeypatch):
    from probes.gpu_compute import grouped_gemm

    real = grouped_gemm.make_grouped

    def refusing(torch, dtype, rows, n, k, device, impl, weights=None, backend=None):
        if impl == compute_backend.GROUPED_IMPL:
            raise RuntimeError("grouped_mm: offsets must be multiples of 16")
        return real(torch, dtype, rows, n, k, device, impl, weights, backend)

    monkeypatch.setattr(grouped_gemm, "make_grouped", refusing)
    _, doc = run_probe("grouped_gemm", str(tmp_path), "r", "h",
                       params=dict(TINY, models=["gpt-oss-120b"], ep=128, tokens=[64]))
    assert doc["status"] == "ok"
    assert {r["labels"]["impl"] for r in results(doc, "tflops")} == {"per_expert_loop"}
    assert "multiples of 16" in doc["facts"]["impl_fallback.bf16"]


def test_grouped_gemm_on_the_cpu_and_the_report_shows_every_combination(tmp_path):
    """On the CPU: bf16, fp32 and fp8 (a loop of torch._scaled_mm: the CPU has no _scaled_grouped_mm, and the
    artifact says why) are measured; tf32, MXFP8 and NVFP4 cannot run here at all, so they are "skipped" (not
    supported) with torch's reason. (A GPU that runs them: test_block_scaled_gemm.py.)"""
    from reports.load import run_of_artifacts
    from reports.phases.gpu_compute import section
    from reports.render import markdown

    _, doc = run_probe("grouped_gemm", str(tmp_path), "r", "h", params=dict(
        TINY, models=["gpt-oss-120b"], ep=128, tokens=[64], dtypes=["bf16", "tf32", "fp32", "fp8_e4m3", "mxfp8",
                                                                     "nvfp4"]))
    facts = doc["facts"]
    assert doc["status"] == "ok" and (facts["dtype.bf16"], facts["dtype.fp32"], facts["dtype.fp8_e4m3"]) == (
        "ok", "ok", "ok")
    assert {r["labels"]["impl"] for r in results(doc, "tflops") if r["labels"]["dtype"] == "fp8_e4m3"} == {
        "per_expert_loop"}
    assert facts["impl_reason.fp8_e4m3"].startswith("torch._scaled_grouped_mm: not supported by torch")
    assert (facts["dtype.tf32"], facts["dtype.mxfp8"], facts["dtype.nvfp4"]) == ("skipped",) * 3
    assert "not supported by torch" in facts["dtype_reason.mxfp8"]
    assert facts["dtype_reason.tf32"] == "tf32 is a tensor-core math mode of NVIDIA GPUs; the CPU backend has none"
    run = run_of_artifacts([doc])
    text = markdown.render(section.grouped_coverage(run, [doc]))
    row = next(line for line in text.splitlines() if line.startswith("| gpt-oss-120b | gate_up |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2].endswith("(64 tokens)") and cells[5].endswith("(64 tokens)")  # bf16, fp32 measured
    # the columns: bf16, fp16, tf32, fp32, fp8_e4m3, mxfp8, nvfp4
    assert cells[6].endswith("(64 tokens)") and cells[4].startswith("not supported [")  # fp8 measured, tf32 not
    assert cells[7].startswith("not supported [") and cells[8].startswith("not supported [")  # mxfp8, nvfp4
    assert cells[3] == "not in the profile"  # fp16 was not asked for
    other = next(line for line in text.splitlines() if line.startswith("| deepseek-v3 | down |"))
    assert "not in the profile" in other  # a model the run did not measure


def test_grouped_gemm_through_deepgemm_is_skipped_without_an_nvidia_gpu_or_without_the_package(tmp_path,
                                                                                               monkeypatch):
    from probes.gpu_compute import grouped_gemm

    _, doc = run_probe("grouped_gemm", str(tmp_path), "r", "h", params=dict(TINY, library="deep_gemm"))
    assert doc["status"] == "skipped" and doc["reason"].startswith(
        "DeepGEMM runs on NVIDIA GPUs (SM90 / SM100) only; this node has none (")
    # an NVIDIA node (as nvidia-smi lists it) without the package: that is the reason
    monkeypatch.setattr(grouped_gemm.device, "describe", lambda: (
        {"backend": "cuda", "model": "NVIDIA H200", "count": 8, "driver": "580.95.05", "torch": None}, [], {}))
    _, doc = run_probe("grouped_gemm", str(tmp_path / "h200"), "r", "h", params=dict(TINY, library="deep_gemm"))
    assert doc["status"] == "skipped" and doc["reason"] == (
        "deep_gemm is not installed (DeepGEMM, github.com/deepseek-ai/DeepGEMM; needs CUDA 12.3+ and SM90/SM100); "
        "the tools step does not build it")


def test_fp8_grouped_loop_computes_what_the_bf16_loop_does():
    import torch

    rows = [3, 0, 5]
    op8, impl8, keep8 = compute_backend.make_grouped(torch, "fp8_e4m3", rows, 16, 32, "cpu", "per_expert_loop",
                                                     backend="cpu")
    assert impl8 == "per_expert_loop" and keep8[0].dtype == torch.float8_e4m3fn and keep8[2].dtype == torch.bfloat16
    op8()
    x, w = keep8[0].float(), keep8[1].float()
    expected = torch.cat([x[0:3] @ w[0].t(), x[3:8] @ w[2].t()])
    assert torch.allclose(keep8[2].float(), expected, rtol=0.02, atol=0.1)


ECC = "CUDA error: uncorrectable ECC error encountered\nCUDA kernel errors might be asynchronously reported"


def test_a_cuda_error_in_the_trial_gemm_is_an_error_of_that_gpu_not_a_skip(monkeypatch):
    """Only the static checks (Unsupported: no such dtype or kernel on this GPU or torch) make a dtype "skipped". A
    CUDA error while the small trial GEMM of bf16 (which every GPU has) runs is an error of that GPU and dtype, and
    when every GPU of the node fails alike the artifact is an error, so compute.gemm_ran shows error, not skip."""
    import torch

    from reports.grading import load_rubric
    from reports.grading.kinds import grade_artifact, grade_metric
    from reports.load import run_of_artifacts

    def broken(torch, dtype, m, n, k, device, backend):
        if dtype == "mxfp8":
            raise compute_backend.Unsupported("NVIDIA H100 (compute capability 9.0) has no block-scaled mxfp8 tensor "
                                              "cores (needs 10.0 or newer, Blackwell)")
        raise RuntimeError(ECC)

    monkeypatch.setattr(compute_backend, "make_gemm", broken)
    monkeypatch.setattr(compute_backend, "matmul_mode", lambda *a: contextlib.nullcontext())  # no CUDA flags here
    assert compute_backend.trial(torch, "cuda", "cpu", lambda: broken(torch, "bf16", 1, 1, 1, None, "cuda")) == (
        "error", "failed on a cuda GPU that supports it (torch %s): RuntimeError: CUDA error: uncorrectable ECC error "
                 "encountered" % torch.__version__)
    per_gpu = {}
    for gpu in range(4):
        out = []
        for dtype in ("bf16", "mxfp8"):
            assert compute_launch.dtype_runs(out.append, torch, dtype, compute_launch.Device("cuda", gpu, "cpu")) \
                is False
        per_gpu.setdefault("bf16", {})[gpu] = (out[0]["status"], out[0]["reason"])
        per_gpu.setdefault("mxfp8", {})[gpu] = (out[1]["status"], out[1]["reason"])
    assert per_gpu["bf16"][0] == ("error", "bf16: failed on a cuda GPU that supports it (torch %s): RuntimeError: CUDA "
                                           "error: uncorrectable ECC error encountered" % torch.__version__)
    assert per_gpu["mxfp8"][0][0] == "skipped" and "no block-scaled mxfp8" in per_gpu["mxfp8"][0][1]
    from probes.artifact import Artifact

    art = Artifact("gemm", "r", "h")
    art.device.update(backend="cuda", model="NVIDIA H100 80GB HBM3", count=4)
    art.facts.update({"dtypes": "bf16,mxfp8", "gpus": "0,1,2,3"})
    compute_launch.apply_outcomes(art, compute_launch.merge_outcomes(per_gpu, [0, 1, 2, 3], ["bf16", "mxfp8"], {}))
    assert art.status == "error" and "uncorrectable ECC error" in art.reason
    assert (art.facts["dtype.bf16"], art.facts["dtype.mxfp8"]) == ("error", "skipped")
    checks = {c["id"]: c for c in load_rubric()["checks"]}
    run = run_of_artifacts([art.to_dict()])
    [ran] = grade_artifact(checks["compute.gemm_ran"], run, "h")
    assert ran["status"] == "error" and "uncorrectable ECC error" in ran["reason"]
    rows = grade_metric(checks["compute.gemm_bf16_vs_mamf"], run, "h")
    assert [(r["subject"], r["status"]) for r in rows] == [("", "error")] and "ECC" in rows[0]["reason"]


def test_gemv_reports_a_failing_trial_as_an_error_and_a_refused_one_as_a_skip(monkeypatch):
    import torch

    from probes.gpu_compute import gemv

    outcomes = {"bf16": ("error", "failed on a cuda GPU that supports it (torch x): RuntimeError: " + ECC),
                "fp16": ("skipped", "no fp16 here")}
    monkeypatch.setattr(gemv, "trial", lambda torch, backend, device, build: outcomes[build.__defaults__[0]])
    out = []
    spec = {"dtypes": ["bf16", "fp16"], "shapes": [], "flush_bytes": 1 << 20, "warmup": 1, "iters": 1, "warmup_s": 0}
    gemv.worker(torch, compute_launch.Device("cpu", 0, torch.device("cpu")), spec, out.append)
    got = {r["dtype"]: (r["status"], r["reason"]) for r in out if r["kind"] == "dtype"}
    assert got["bf16"][0] == "error" and got["bf16"][1].startswith("bf16: failed on a cuda GPU")
    assert got["fp16"] == ("skipped", "fp16: no fp16 here")


def h100_node(mig_on=3):
    """describe()'s GPU list of an 8 x H100 node (a real nvidia-smi capture), GPU mig_on left in MIG mode."""
    from probes.common import device as vendor

    gpus = vendor.parse_nvidia_query((FIX / "nvidia-smi" / "h100_8x_query.csv").read_text())
    gpus[mig_on]["mig_mode"] = "Enabled"
    return gpus


def fake_cuda_torch(node_gpus, hidden, pci=True):
    """A torch whose CUDA sees the node's GPUs but `hidden` (as CUDA skips a GPU in MIG mode), numbered in PCI bus
    order, with the pci_*_id device properties of torch >= 2.5 (pci=False: an older torch without them)."""
    from types import SimpleNamespace

    seen = [g for g in node_gpus if g["index"] not in hidden]

    def props(i):
        domain, bus, device = compute_backend.pci_key(seen[i]["pci_bus_id"])
        return SimpleNamespace(pci_domain_id=domain, pci_bus_id=bus, pci_device_id=device) if pci else \
            SimpleNamespace(name="NVIDIA H100 80GB HBM3")

    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: len(seen), get_device_properties=props,
                           get_device_name=lambda i=0: "NVIDIA H100 80GB HBM3")
    return SimpleNamespace(__version__="2.9.0+cu128", version=SimpleNamespace(cuda="12.8", hip=None), cuda=cuda)


def test_pci_addresses_as_the_vendor_tools_print_them():
    assert compute_backend.pci_key("00000000:5D:00.0") == (0, 0x5D, 0)  # nvidia-smi
    assert compute_backend.pci_key("0000:0c:00.0") == (0, 0x0C, 0)  # amd-smi
    assert compute_backend.pci_key("0001:c1:02.0") == (1, 0xC1, 2)
    assert compute_backend.pci_key(None) is None and compute_backend.pci_key("N/A") is None


def test_torch_devices_are_labelled_by_the_node_index_and_a_gpu_torch_cannot_see_is_named():
    """8 GPUs on the node, GPU 3 in MIG mode: CUDA numbers the other seven 0..6, so torch's ordinal 3 is nvidia-smi's
    GPU 4. Matched by PCI address, each device keeps the node's index, and GPU 3 is named with its address."""
    node = h100_node()
    torch = fake_cuda_torch(node, hidden={3})
    labels, unseen = compute_backend.match_node_gpus(compute_backend.torch_pci_keys(torch, 7), node)
    assert labels == [0, 1, 2, 4, 5, 6, 7] and [g["index"] for g in unseen] == [3]
    labels, why, line = compute_backend.node_gpu_labels(torch, "cuda", 7, node, "nvidia-smi", None)
    assert labels == [0, 1, 2, 4, 5, 6, 7] and line is None
    assert why == {3: "nvidia-smi lists GPU 3 (PCI 00000000:5D:00.0, MIG mode Enabled) but torch (cuda) does not see "
                      "it, only 7 of the node's GPUs (a GPU in MIG mode, or one the driver cannot bring up)"}
    # a job restricted by CUDA_VISIBLE_DEVICES sees a subset on purpose: labelled, not compared
    assert compute_backend.node_gpu_labels(torch, "cuda", 7, node, "nvidia-smi", "0,1,2,4,5,6,7") == (
        [0, 1, 2, 4, 5, 6, 7], {}, None)
    # a torch without PCI addresses: its numbering stays, and the shortfall is one line
    old = fake_cuda_torch(node, hidden={3}, pci=False)
    labels, why, line = compute_backend.node_gpu_labels(old, "cuda", 7, node, "nvidia-smi", None)
    assert (labels, why) == (None, {}) and line.startswith("nvidia-smi lists 8 GPUs but torch (cuda) sees 7")
    # every GPU seen: the identity, nothing missing
    full = fake_cuda_torch(node, hidden=set())
    assert compute_backend.node_gpu_labels(full, "cuda", 8, node, "nvidia-smi", None) == (list(range(8)), {}, None)


def test_prepare_labels_by_the_node_index_and_records_the_unseen_gpu(monkeypatch):
    from probes.artifact import Artifact

    node = h100_node()
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(compute_backend.vendor, "describe", lambda: (
        {"backend": "cuda", "model": "NVIDIA H100 80GB HBM3", "count": 8, "driver": "550.54.15", "torch": None},
        node, {"gpu_tool": "nvidia-smi", "gpu_error": None}))
    monkeypatch.setattr(compute_backend, "import_torch", lambda: (fake_cuda_torch(node, hidden={3}), None))
    art = Artifact("gemm", "r", "h")
    params = {"backend": "auto", "cpu_threads": 1, "gpus": None}
    ctx = compute_backend.prepare(art, params)
    assert ctx.devices == [0, 1, 2, 4, 5, 6, 7] and ctx.visible_ids == ["0", "1", "2", "3", "4", "5", "6"]
    assert list(ctx.unseen) == [3] and "PCI 00000000:5D:00.0" in ctx.unseen[3]
    assert art.facts["gpus_unseen"] == "3" and art.facts["devices"] == "0,1,2,4,5,6,7"
    # the gpus param counts as nvidia-smi does: GPU 4 is torch's 3, pinned so; the unseen GPU 3 asked for is named
    ctx = compute_backend.prepare(Artifact("gemm", "r", "h"), dict(params, gpus=[3, 4]))
    assert (ctx.devices, ctx.visible_ids, list(ctx.unseen)) == ([4], ["3"], [3])
    assert list(compute_backend.prepare(Artifact("gemm", "r", "h"), dict(params, gpus=[4])).unseen) == []


def test_a_gpu_torch_cannot_see_is_an_error_row_of_the_per_gpu_table(tmp_path, monkeypatch):
    """Two workers measure GPUs 0 and 1; the node's GPU 2 is one torch does not see: the artifact is an error naming
    it, and the per-GPU checks show it as an error row beside the measured GPUs."""
    from reports.grading import load_rubric
    from reports.grading.kinds import grade_metric
    from reports.load import run_of_artifacts

    why = ("nvidia-smi lists GPU 2 (PCI 00000000:3A:00.0, MIG mode Enabled) but torch (cuda) does not see it, only 2 "
           "of the node's GPUs (a GPU in MIG mode, or one the driver cannot bring up)")
    real_context = compute_backend.Context  # prepare's Context on that node: GPU 2 unseen
    monkeypatch.setattr(compute_backend, "Context", lambda *a, **k: real_context(*a, **dict(k, unseen={2: why})))
    art, col = run_stub_workers(tmp_path, monkeypatch, "unseen_gpu", """
        def worker(torch, dev, spec, emit):
            launch.result(emit, "tflops", 700.0, "TFLOP/s", dtype="bf16", gpu=dev.gpu, shape="s")
            launch.dtype_outcome(emit, "bf16", "ok")
    """)
    assert col.labels == [0, 1, 2] and art.facts["gpus"] == "0,1,2" and col.unseen == {2: why}
    merged = compute_launch.merge_outcomes(col.per_gpu, col.labels, ["bf16"], col.failures, col.unseen)
    assert merged["bf16"] == ("error", "gpu 2 error: not measured: " + why)
    compute_launch.apply_outcomes(art, merged)
    compute_launch.unseen_errors(art, real_context(None, "cpu", [0], 1, None, ["cpu"], unseen={2: why}))
    assert art.status == "error" and art.reason == "bf16: gpu 2 error: not measured: " + why
    check = dict(next(c for c in load_rubric()["checks"] if c["id"] == "compute.gemm_bf16_vs_mamf"), backends=None)
    rows = grade_metric(check, run_of_artifacts([art.to_dict()]), "h")
    assert [(r["subject"], r["status"]) for r in rows] == [("gpu=0", "skip"), ("gpu=1", "skip"), ("gpu=2", "error")]
    assert "GPU 2 (PCI 00000000:3A:00.0, MIG mode Enabled)" in rows[2]["reason"]


def test_an_unseen_gpu_makes_an_artifact_that_measured_everything_else_an_error():
    from probes.artifact import Artifact

    ctx = compute_backend.Context(None, "cuda", [0, 1], None, "CUDA_VISIBLE_DEVICES", ["0", "1"],
                                  unseen={2: "nvidia-smi lists GPU 2 but torch (cuda) does not see it"})
    art = Artifact("copy_bw", "r", "h")
    compute_launch.unseen_errors(art, ctx)
    assert art.status == "error" and art.reason == "gpu 2: nvidia-smi lists GPU 2 but torch (cuda) does not see it"
    art.error("p2p 0->1: RuntimeError: boom")
    compute_launch.unseen_errors(art, compute_backend.Context(None, "cuda", [0, 1], None, None, ["0", "1"],
                                                              unseen_error="nvidia-smi lists 8 GPUs but torch sees 7"))
    assert art.reason == "nvidia-smi lists 8 GPUs but torch sees 7; p2p 0->1: RuntimeError: boom"
