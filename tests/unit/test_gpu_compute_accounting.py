"""FLOP and byte accounting, timing statistics and the shape tables of the GPU compute probes."""

import math

import pytest

from probes.gpu_compute import shapes as cf
from probes.gpu_compute import shapes as cs


def test_gemm_flops_is_two_m_n_k():
    assert cf.gemm_flops(8192, 8192, 8192) == 2 * 8192 ** 3 == 1_099_511_627_776
    assert cf.gemm_flops(1, 1, 1) == 2
    assert cf.gemm_flops(128, 57344, 8192) == 2 * 128 * 57344 * 8192


def test_grouped_flops_sum_one_gemm_per_expert():
    assert cf.grouped_gemm_flops([4, 0, 5], 4096, 7168) == 2 * 9 * 4096 * 7168
    assert cf.grouped_gemm_flops([], 10, 10) == 0


def test_gemv_bytes_read_matrix_and_vector_write_vector():
    # bf16 28672 x 8192: (m*k + k + m) * 2 bytes
    assert cf.gemv_bytes(28672, 8192, "bf16") == (28672 * 8192 + 8192 + 28672) * 2 == 469_835_776
    assert cf.gemv_bytes(4, 3, "fp32") == (12 + 3 + 4) * 4
    assert cf.gemv_bytes(4, 4, "nvfp4") == 12  # two values per byte
    assert cf.gemv_flops(28672, 8192) == 2 * 28672 * 8192


def test_units_are_decimal():
    assert cf.tflops(1e12, 1.0) == 1.0
    assert cf.gbps(5e9, 2.0) == 2.5


def test_time_stats_and_rates():
    times = [0.004, 0.002, 0.003, 0.005]
    st = cf.time_stats(times)
    assert st == {"mean": pytest.approx(0.0035), "median": pytest.approx(0.0035), "min": 0.002, "max": 0.005,
                  "n": 4}
    assert cf.time_stats([3.0, 1.0, 2.0])["median"] == 2.0
    rates = cf.rate_stats(2e9, times, cf.gbps)
    assert rates["mean"] == pytest.approx(2e9 / 0.0035 / 1e9)  # bytes over the mean time, as mamf-finder does
    assert rates["median"] == pytest.approx(2e9 / 0.0035 / 1e9)
    assert rates["max"] == pytest.approx(1000.0)  # the fastest iteration
    with pytest.raises(ValueError):
        cf.time_stats([])
    with pytest.raises(ValueError, match="timer"):
        cf.time_stats([0.0, 1.0])


def test_geomean():
    assert cf.geomean([1, 100]) == pytest.approx(10)
    assert cf.geomean([700.0]) == pytest.approx(700.0)
    assert cf.geomean([2, 8, 4]) == pytest.approx(4)
    with pytest.raises(ValueError):
        cf.geomean([1, 0])


def test_moe_models_match_their_configs_and_cite_them():
    ds, kimi, oss = (cs.MOE_MODELS[m] for m in ("deepseek-v3", "kimi-k2", "gpt-oss-120b"))
    assert (ds["hidden"], ds["intermediate"], ds["experts"], ds["top_k"]) == (7168, 2048, 256, 8)
    assert (kimi["hidden"], kimi["intermediate"], kimi["experts"], kimi["top_k"]) == (7168, 2048, 384, 8)
    assert (oss["hidden"], oss["intermediate"], oss["experts"], oss["top_k"]) == (2880, 2880, 128, 4)
    for spec in cs.MOE_MODELS.values():
        assert "config.json" in spec["source"]
    # the seed's newer models, each from what a source quotes of its config (the source says which)
    k25, k3, v4 = (cs.MOE_MODELS[m] for m in ("kimi-k2.5", "kimi-k3", "deepseek-v4-pro"))
    assert (k25["hidden"], k25["intermediate"], k25["experts"], k25["top_k"], k25["shared"]) == (7168, 2048, 384, 8, 1)
    # Kimi K3's experts work on a 3584-wide latent (routed_expert_hidden_size), not on hidden_size 7168
    assert (k3["hidden"], k3["intermediate"], k3["experts"], k3["top_k"], k3["shared"]) == (3584, 3072, 896, 16, None)
    assert "no source states its shared experts" in k3["source"]
    assert (v4["hidden"], v4["intermediate"], v4["experts"], v4["top_k"], v4["shared"]) == (7168, 3072, 384, 6, 1)
    assert cs.moe_projection("kimi-k3", "gate_up") == (6144, 3584) and cs.moe_projection("kimi-k3", "down") == (
        3584, 3072)


def test_moe_projections():
    assert cs.moe_projection("deepseek-v3", "gate_up") == (4096, 7168)  # gate and up fused: n = 2 x 2048
    assert cs.moe_projection("deepseek-v3", "down") == (7168, 2048)
    assert cs.moe_projection("gpt-oss-120b", "gate_up") == (5760, 2880)
    with pytest.raises(ValueError):
        cs.moe_projection("deepseek-v3", "up")


def test_balanced_routing_is_exact():
    rows = cs.expert_rows(128, 256, 8)  # 1024 assignments over 256 experts
    assert rows == [4] * 256
    rows = cs.expert_rows(100, 384, 8)  # 800 over 384: 32 experts get 3, the rest 2
    assert sum(rows) == 800 and rows.count(3) == 32 and rows.count(2) == 352
    assert max(rows) - min(rows) <= 1
    # one GPU of an EP group of 8 holds 32 of DeepSeek-V3's 256 experts: a 16384-token batch gives it 16384 routed
    # rows, and its shared expert takes the GPU's own 16384 / 8 tokens
    assert cs.local_groups("deepseek-v3", 16384, 8) == [512] * 32 + [2048]
    assert len(cs.local_groups("kimi-k2", 128, 8)) == 48 + 1
    assert cs.local_groups("gpt-oss-120b", 128, 32) == [4] * 4  # no shared expert
    # Kimi K3: 896 experts, top-16, shared experts unknown and not counted
    assert cs.local_groups("kimi-k3", 1024, 8) == cs.expert_rows(1024, 896, 16)[:112]
    assert sum(cs.grouped_gemm_flops(cs.local_groups("deepseek-v3", 16384, 8), 4096, 7168) for _ in [0]) == (
        2 * (16384 + 2048) * 4096 * 7168)
    with pytest.raises(ValueError, match="divisible"):
        cs.local_groups("gpt-oss-120b", 128, 3)


def test_token_batches_span_128_to_16384():
    for profile in ("standard", "full"):
        tokens = cs.GROUPED_GEMM["gpu"][profile]["tokens"]
        assert tokens[0] == 128 and tokens[-1] == 16384
        assert set(cs.GROUPED_GEMM["gpu"][profile]["models"]) == set(cs.MOE_MODELS)


def test_mamf_sweeps():
    quick = cs.mamf_shapes({"m": [0, 20480, 256], "n": 4096, "k": 4096})
    assert len(quick) == 80 and quick[0] == (256, 4096, 4096) and quick[-1] == (20480, 4096, 4096)
    full = cs.mamf_shapes(cs.MAMF["gpu"]["full"]["sweep"])
    assert len(full) == 16 ** 3 and full[1] == (2048, 1024, 1024)  # m varies fastest
    assert cs.mamf_shapes(cs.MAMF["cpu"]["quick"]["sweep"]) == [(128, 256, 256), (256, 256, 256), (384, 256, 256),
                                                                (512, 256, 256)]
    with pytest.raises(ValueError):
        cs.mamf_shapes({"m": [1, 10, 0], "n": 1, "k": 1})


def test_profiles_cover_both_size_classes_and_params_override():
    for table in (cs.GEMM, cs.MAMF, cs.GEMV, cs.GROUPED_GEMM, cs.COPY):
        for size_class in ("cpu", "gpu"):
            assert set(table[size_class]) == set(cs.PROFILES)
            for config in table[size_class].values():
                assert config["iters"] >= 2 and config["warmup"] >= 1
    config = cs.resolve(cs.GEMM, {"profile": "standard", "iters": 7, "dtypes": []}, "cuda")
    assert config["iters"] == 7 and config["warmup"] == 20 and config["profile"] == "standard"
    assert cs.resolve(cs.GEMM, {}, "cpu")["profile"] == "quick"
    with pytest.raises(ValueError, match="turbo"):
        cs.resolve(cs.GEMM, {"profile": "turbo"}, "cpu")
    # the GPU shapes are the real ones: 8192^3 and Llama-3.1-70B's MLP up projection
    shapes = {s[0]: s[1:] for s in cs.gemm_shapes(cs.GEMM["gpu"]["standard"])}
    assert shapes["square_8192"] == (8192, 8192, 8192) and shapes["llama70b_mlp_up"] == (8192, 57344, 8192)
    with pytest.raises(ValueError):
        cs.gemm_shapes({"shapes": [["bad", 0, 1, 1]]})


def test_cpu_quick_sizes_stay_small():
    """The quick profile runs on a 2-core machine with four test hosts at once: keep its CPU work tiny."""
    assert max(cf.gemm_flops(*s[1:]) for s in cs.gemm_shapes(cs.GEMM["cpu"]["quick"])) <= 2 * 256 ** 3
    assert max(m for m, _, _ in cs.mamf_shapes(cs.MAMF["cpu"]["quick"]["sweep"])) <= 512
    assert math.prod(cs.GEMV["cpu"]["quick"]["shapes"][0][1:]) <= 2048 * 2048


def test_gpu_standard_and_full_profiles_cover_every_dtype_of_the_seed():
    # MAMF "per precision" and grouped GEMM "across many precision types": each dtype is measured, skipped with the
    # GPU's reason, or (grouped) not implemented: never silently absent
    from probes.gpu_compute.shapes import DTYPES, GROUPED_GEMM, MAMF

    for table in (MAMF, GROUPED_GEMM):
        for profile in ("standard", "full"):
            assert sorted(table["gpu"][profile]["dtypes"]) == sorted(DTYPES)
    assert MAMF["gpu"]["full"]["dtypes"][:2] == ["bf16", "fp8_e4m3"] and MAMF["gpu"]["full"]["dtypes"][-1] == "fp32"
    assert DTYPES == ("bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "mxfp8", "nvfp4")
