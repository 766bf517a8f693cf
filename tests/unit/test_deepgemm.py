"""The DeepGEMM grouped-GEMM backend on the CPU: DeepGEMM itself needs an SM90/SM100 GPU, so what is checked here
is our side of it: the import reason, the contiguous layout, the FP8 quantization DeepGEMM's tests use, the
version table, and the arguments handed to fake DeepGEMM modules built like v1 and v2."""

import types

import pytest
import torch

from probes.gpu_compute import deepgemm
from probes.gpu_compute.backend import Unsupported

V1 = "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"
V2_FP8 = "m_grouped_fp8_gemm_nt_contiguous"
V2_BF16 = "m_grouped_bf16_gemm_nt_contiguous"
E4M3_STEP = 2.0 ** -4  # e4m3 keeps 3 mantissa bits: rounding moves a value by at most 1/16 of its binade


def test_import_gives_a_reason_naming_deep_gemm_when_it_is_absent():
    module, why = deepgemm.import_deep_gemm()
    assert module is None and "deep_gemm" in why and "github.com/deepseek-ai/DeepGEMM" in why


def test_contiguous_layout_pads_every_expert_to_the_alignment():
    padded, m_indices, total = deepgemm.contiguous_layout(torch, [0, 5, 128, 130], 128)
    assert padded == [0, 128, 128, 256] and total == 512
    assert m_indices.dtype == torch.int32 and m_indices.shape == (512,)
    assert (m_indices[:5] == 1).all() and (m_indices[5:128] == -1).all()
    assert (m_indices[128:256] == 2).all()
    assert (m_indices[256:386] == 3).all() and (m_indices[386:] == -1).all()


def _dequant_error_ok(data, sf_full, x, amax_full):
    # every element is within e4m3's rounding of its group's amax (plus e4m3's smallest subnormal step)
    err = (data.float() * sf_full - x.float()).abs()
    return bool((err <= amax_full * E4M3_STEP + sf_full * 2.0 ** -9).all())


def test_per_token_cast_pads_k_and_round_trips():
    x = torch.randn(6, 200) * torch.logspace(-3, 3, 6).unsqueeze(1)
    x[5] = 0  # an all-zero row gets the clamped scale, not a division by zero
    data, sf = deepgemm.per_token_cast_to_fp8(torch, x)
    assert data.dtype == torch.float8_e4m3fn and data.shape == (6, 200) and data.is_contiguous()
    assert sf.dtype == torch.float32 and sf.shape == (6, 2)  # (m, ceil(k / 128)): K padded with zeros
    amax = torch.stack([x[:, :128].abs().amax(1), x[:, 128:].abs().amax(1)], 1).clamp(1e-4)
    assert torch.allclose(sf, amax / 448.0)
    cols = torch.arange(200) // 128
    assert _dequant_error_ok(data, sf[:, cols], x, amax[:, cols])


def test_per_block_cast_pads_both_dims_and_round_trips():
    w = torch.randn(200, 300, dtype=torch.bfloat16)
    data, sf = deepgemm.per_block_cast_to_fp8(torch, w)
    assert data.dtype == torch.float8_e4m3fn and data.shape == (200, 300) and data.is_contiguous()
    assert sf.shape == (2, 3)  # (ceil(n / 128), ceil(k / 128))
    assert torch.allclose(sf[1, 2], w[128:, 256:].float().abs().amax() / 448.0)
    rows, cols = torch.arange(200) // 128, torch.arange(300) // 128
    sf_full = sf[rows][:, cols]
    assert _dequant_error_ok(data, sf_full, w, sf_full * 448.0)


def test_ue8m0_scales_are_powers_of_two_no_smaller_than_amax():
    x = torch.randn(4, 256) * 3.7
    data, sf = deepgemm.per_token_cast_to_fp8(torch, x, use_ue8m0=True)
    exact = x.view(4, 2, 128).abs().amax(2) / 448.0
    assert (torch.log2(sf) == torch.log2(sf).round()).all() and (sf >= exact).all() and (sf < 2 * exact).all()
    assert torch.isfinite(data.float()).all()


def test_casts_reject_what_is_not_a_matrix():
    with pytest.raises(ValueError, match="2-D"):
        deepgemm.per_token_cast_to_fp8(torch, torch.zeros(2, 3, 128))
    with pytest.raises(ValueError, match="2-D"):
        deepgemm.per_block_cast_to_fp8(torch, torch.zeros(128))


def _fake(names, calls, alignment_name="get_mk_alignment_for_contiguous_layout"):
    def kernel(name):
        def run(*args, **kwargs):
            calls.append((name, args, kwargs))
        return run

    attrs = {name: kernel(name) for name in names}
    attrs[alignment_name] = lambda: 128
    return types.SimpleNamespace(__version__="test", **attrs)


def test_api_picks_each_versions_function_per_dtype():
    v1 = _fake([V1], [], "get_m_alignment_for_contiguous_layout")
    v1.get_col_major_tma_aligned_tensor = lambda t: t
    assert deepgemm.api(v1) == {"fp8_e4m3": (V1, "v1")}
    v2 = _fake([V2_FP8, V2_BF16, "m_grouped_fp8_gemm_nt_masked"], [])
    assert deepgemm.api(v2) == {"fp8_e4m3": (V2_FP8, "v2"), "bf16": (V2_BF16, "v2")}
    assert deepgemm.api(types.SimpleNamespace(m_grouped_fp8_gemm_nt_contiguous=None)) == {}


def test_missing_module_or_kernel_is_unsupported_with_the_reason():
    with pytest.raises(Unsupported, match="deep_gemm is not installed"):
        deepgemm.make_grouped_deepgemm(torch, None, "fp8_e4m3", [8], 128, 128, "cpu")
    v2 = _fake([V2_FP8, V2_BF16], [])
    with pytest.raises(Unsupported, match="mxfp8 is not implemented"):
        deepgemm.make_grouped_deepgemm(torch, v2, "mxfp8", [8], 128, 128, "cpu")
    with pytest.raises(Unsupported, match="has no grouped bf16 kernel"):
        deepgemm.make_grouped_deepgemm(torch, _fake([V1], []), "bf16", [8], 128, 128, "cpu")
    with pytest.raises(Unsupported, match="NVIDIA SM90/SM100 GPUs only"):
        deepgemm.make_grouped_deepgemm(torch, v2, "bf16", [8], 128, 128, "cpu")


@pytest.mark.parametrize("major", [9, 10])
def test_v2_fp8_gets_deepgemms_operands_and_reuses_the_weights(monkeypatch, major):
    monkeypatch.setattr(deepgemm, "arch_major", lambda torch, device: major)
    calls = []
    rows, n, k = [3, 0, 130], 256, 200
    op, impl, keep = deepgemm.make_grouped_deepgemm(torch, _fake([V2_FP8], calls), "fp8_e4m3", rows, n, k, "cpu")
    assert impl == "deep_gemm." + V2_FP8 and calls == []
    op()
    (name, args, kwargs), = calls
    (a, sfa), (b, sfb), d, m_indices = args
    assert kwargs == {"disable_ue8m0_cast": major == 9}  # SM100 packs power-of-two scales into UE8M0
    assert a.dtype == b.dtype == torch.float8_e4m3fn and a.shape == (384, k) and b.shape == (3, n, k)
    assert sfa.shape == (384, 2) and sfb.shape == (3, 2, 2) and sfa.dtype == sfb.dtype == torch.float32
    assert d.dtype == torch.bfloat16 and d.shape == (384, n) and m_indices.tolist().count(-1) == 384 - sum(rows)
    assert (a[m_indices < 0].float() == 0).all()
    if major == 10:
        assert (torch.log2(sfb) == torch.log2(sfb).round()).all()
    op2, _, keep2 = deepgemm.make_grouped_deepgemm(torch, _fake([V2_FP8], calls), "fp8_e4m3", [1, 2, 3], n, k, "cpu",
                                                    keep[1])
    op2()
    assert keep2[1] is keep[1] and calls[-1][1][1][0] is keep[1][0]


def test_v1_fp8_and_v2_bf16_calls(monkeypatch):
    monkeypatch.setattr(deepgemm, "arch_major", lambda torch, device: 9)
    calls = []
    v1 = _fake([V1], calls, "get_m_alignment_for_contiguous_layout")
    v1.get_col_major_tma_aligned_tensor = lambda t: t.t().contiguous().t()
    op, impl, _ = deepgemm.make_grouped_deepgemm(torch, v1, "fp8_e4m3", [130], 128, 256, "cpu")
    op()
    assert impl == "deep_gemm." + V1 and calls[-1][2] == {} and len(calls[-1][1]) == 4
    assert calls[-1][1][0][1].stride() == (1, 256)  # the activation scales handed over column-major
    op, impl, keep = deepgemm.make_grouped_deepgemm(torch, _fake([V2_BF16], calls), "bf16", [5, 7], 128, 128, "cpu")
    op()
    x, w, d, m_indices = calls[-1][1]
    assert impl == "deep_gemm." + V2_BF16 and x.dtype == w.dtype == torch.bfloat16 and w is keep[1]
    assert x.shape == (256, 128) and w.shape == (2, 128, 128) and m_indices.shape == (256,)
    with pytest.raises(ValueError, match="do not fit 3 experts"):
        deepgemm.make_grouped_deepgemm(torch, _fake([V2_BF16], calls), "bf16", [5, 7, 1], 128, 128, "cpu", keep[1])
    monkeypatch.setattr(deepgemm, "arch_major", lambda torch, device: 10)
    with pytest.raises(Unsupported, match="SM90 only"):
        deepgemm.make_grouped_deepgemm(torch, v1, "fp8_e4m3", [130], 128, 256, "cpu")
