"""The block-scaled (MXFP8, NVFP4) GEMM and grouped-GEMM paths of the compute probes, on the CPU.

torch has no CPU kernel for block-scaled torch._scaled_mm, and no Blackwell GPU is lent to this project. These tests
put in its place an emulation of what cuBLASLt computes by its documentation: the scales read from the swizzled
1D block scaling factor layout (block_scales.from_blocked, tested against the documented index formula in
test_block_scales.py), every element times its block's scale, then the product. So the probes' own code (the
operands they quantize, the per-expert slices and their scales, the product check) runs end to end here, and the
check is shown to catch a kernel that reads the scales in another layout. On a GPU the real kernel takes its place
(tests/gpu/run_gpu_checks.py)."""

import pytest
import torch

from probes.cli import run_probe
from probes.gpu_compute import backend, block_scales

TINY = {"profile": "quick", "iters": 2, "warmup": 1, "flush_bytes": 1 << 20}


def emulated_scaled_mm(layout="blocked"):
    """torch._scaled_mm for block-scaled operands as cuBLASLt computes it (layout "blocked"), or as a kernel that
    reads the same scales row-major, unswizzled (layout "plain"); other operands go to torch's own."""
    real = torch._scaled_mm

    def scaled_mm(a, b, scale_a, scale_b, out_dtype=None, out=None, **kwargs):
        if a.dtype == torch.float8_e4m3fn and scale_a.dtype == torch.float8_e8m0fnu:
            k, block, deq = a.shape[1], block_scales.MX_BLOCK, block_scales.dequantize_mxfp8
        elif a.dtype == torch.float4_e2m1fn_x2:
            k, block = a.shape[1] * 2, block_scales.NVFP4_BLOCK

            def deq(torch_, data, scales):
                return block_scales.dequantize_nvfp4(torch_, data, scales, torch.tensor(1.0))
        else:
            return real(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, out=out, **kwargs)
        m, n, kb = a.shape[0], b.shape[1], k // block

        def scales(flat, rows):
            if layout == "blocked":
                return block_scales.from_blocked(torch, flat, rows, kb)
            return flat.view(torch.uint8)[:rows * kb].reshape(rows, kb).view(flat.dtype)

        product = (deq(torch, a, scales(scale_a, m)) @ deq(torch, b.t(), scales(scale_b, n)).t()).to(out_dtype)
        if out is not None:
            out.copy_(product)
            return out
        return product

    return scaled_mm


@pytest.mark.parametrize("dtype", ["mxfp8", "nvfp4"])
def test_the_product_check_passes_the_documented_layout_and_catches_another(dtype):
    assert backend.block_scaled_error(torch, dtype, "cpu", "cpu", kernel=emulated_scaled_mm()) is None
    wrong = backend.block_scaled_error(torch, dtype, "cpu", "cpu", kernel=emulated_scaled_mm("plain"))
    assert wrong.startswith("%s product off its dequantized reference by " % dtype)
    assert float(wrong.split(" by ")[1].split()[0]) > 0.1  # a misplaced scale is far off, not a rounding
    # torch's CPU build has no block-scaled kernel: the check says it could not run, never that it passed
    assert "the product check could not run" in backend.block_scaled_error(torch, dtype, "cpu", "cpu")


@pytest.mark.parametrize("dtype", ["mxfp8", "nvfp4"])
def test_each_experts_slice_is_its_own_block_scaled_product(monkeypatch, dtype):
    monkeypatch.setattr(torch, "_scaled_mm", emulated_scaled_mm())
    rows = [3, 0, 130]  # one expert past a 128-row scale tile, one with no rows
    op, impl, keep = backend.make_grouped(torch, dtype, rows, 64, 64, "cpu", backend.LOOP_IMPL, backend="cpu")
    assert impl == backend.LOOP_IMPL and len(keep[3]) == 2
    op()
    data, weights, y, slices = keep
    kb = 64 // (32 if dtype == "mxfp8" else 16)
    deq = backend.BLOCK_SCALED[dtype][1]
    extra = [torch.tensor(1.0)] if dtype == "nvfp4" else []
    for (xs, xs_scales, ws, ws_scales, ys), expert in zip(slices, (0, 2)):
        assert xs_scales.numel() == block_scales.blocked_numel(xs.shape[0], kb)  # each slice padded on its own
        x = deq(torch, xs, block_scales.from_blocked(torch, xs_scales, xs.shape[0], kb), *extra)
        assert ws_scales is weights[expert][1]  # the expert's own weights, not a neighbour's
        w = deq(torch, ws.t(), block_scales.from_blocked(torch, ws_scales, 64, kb), *extra)
        assert torch.allclose(ys.float(), (x @ w.t()).to(torch.bfloat16).float())
        assert ys.abs().sum() > 0
    # the same experts serve the next token batch
    again = backend.make_grouped(torch, dtype, rows, 64, 64, "cpu", backend.LOOP_IMPL, weights=weights,
                                 backend="cpu")[2]
    assert again[1] is weights


def test_grouped_gemm_measures_every_dtype_a_blackwell_kernel_runs_and_errs_on_a_wrong_product(monkeypatch,
                                                                                               tmp_path):
    """With the emulated kernel the CPU runs what a Blackwell GPU runs: MXFP8 and NVFP4 grouped GEMMs are measured
    (per-expert loop, and the artifact says why); a kernel that reads the scales in another layout is an error for
    that dtype, not a number."""
    monkeypatch.setattr(torch, "_scaled_mm", emulated_scaled_mm())
    params = dict(TINY, models=["gpt-oss-120b"], ep=128, tokens=[64], dtypes=["bf16", "mxfp8", "nvfp4"])
    _, doc = run_probe("grouped_gemm", str(tmp_path / "ok"), "r", "h", params=params)
    facts = doc["facts"]
    assert doc["status"] == "ok" and (facts["dtype.mxfp8"], facts["dtype.nvfp4"]) == ("ok", "ok")
    measured = {(r["labels"]["dtype"], r["labels"]["impl"]) for r in doc["results"] if r["metric"] == "tflops"}
    assert {("mxfp8", "per_expert_loop"), ("nvfp4", "per_expert_loop")} <= measured
    assert facts["impl_reason.mxfp8"].startswith("torch's grouped kernel with MX block scales")
    monkeypatch.setattr(torch, "_scaled_mm", emulated_scaled_mm("plain"))
    _, bad = run_probe("grouped_gemm", str(tmp_path / "bad"), "r", "h", params=params)
    assert bad["facts"]["dtype.bf16"] == "ok" and bad["facts"]["dtype.mxfp8"] == "error"
    assert "off its dequantized reference" in bad["facts"]["dtype_reason.mxfp8"]
    assert not [r for r in bad["results"] if r["labels"].get("dtype") == "mxfp8"]  # no number from a wrong product
    assert bad["status"] == "error"


def test_block_scaled_dtypes_on_rocm_are_not_implemented_not_measured_on_a_wrong_layout(monkeypatch):
    """hipBLASLt reads MX scales unswizzled: this version builds cuBLASLt's layout, so on ROCm MXFP8 and NVFP4 are
    "not implemented" with that reason, never measured (and never called wrong by the product check)."""
    from probes.gpu_compute import launch

    monkeypatch.setattr(backend, "gemm_support", lambda *a: None)
    monkeypatch.setattr(backend, "static_support", lambda *a: None)
    out = []
    dev = type("Dev", (), {"backend": "rocm", "device": "cuda:0"})()
    assert launch.dtype_runs(out.append, torch, "mxfp8", dev) is False
    assert out == [{"kind": "dtype", "dtype": "mxfp8", "status": "not_implemented",
                    "reason": launch.BLOCK_SCALED_ROCM["mxfp8"]}]
    assert "hipBLASLt reads the block scales unswizzled" in out[0]["reason"]


def test_on_rocm_the_block_scaled_gate_comes_before_the_trial_gemm(monkeypatch):
    """torch's ROCm _scaled_mm raises for NVFP4 ("NVFP4 scaling not supported on ROCM"): the trial GEMM of a GPU
    that has the dtype (MI355X) would make it an error of that GPU and the artifact an error. The gate that says
    "not implemented" comes first; a GPU or torch without the dtype at all is still a skip."""
    from probes.gpu_compute import launch

    monkeypatch.setattr(backend, "static_support", lambda *a: None)
    monkeypatch.setattr(backend, "gemm_support", lambda *a: (
        "error", "failed on a rocm GPU that supports it: NotImplementedError: NVFP4 scaling not supported on ROCM"))
    dev = type("Dev", (), {"backend": "rocm", "device": "cuda:0"})()
    out = []
    assert launch.dtype_runs(out.append, torch, "nvfp4", dev) is False
    assert [(o["dtype"], o["status"]) for o in out] == [("nvfp4", "not_implemented")]
    monkeypatch.setattr(backend, "static_support", lambda *a: "this GPU has no FP4 (gfx942)")
    monkeypatch.setattr(backend, "gemm_support", lambda *a: ("skipped", "this GPU has no FP4 (gfx942)"))
    out = []
    assert launch.dtype_runs(out.append, torch, "nvfp4", dev) is False
    assert [(o["dtype"], o["status"]) for o in out] == [("nvfp4", "skipped")]
