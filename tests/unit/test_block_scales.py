"""probes/gpu_compute/block_scales.py on the CPU: the cuBLAS scale swizzle against its index formula written out
element by element, and the MXFP8 / NVFP4 quantizers against error bounds derived from the element formats (the GPU
check multiplies these operands, so a quantizer that is off by a binade or packs nibbles the wrong way round must
fail here first)."""

import pytest

from probes.gpu_compute import block_scales as bs

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(
    not (hasattr(torch, "float8_e8m0fnu") and hasattr(torch, "float4_e2m1fn_x2")),
    reason="torch %s lacks float8_e8m0fnu or float4_e2m1fn_x2" % torch.__version__)


def swizzle_by_formula(matrix, rows, kblocks):
    """The cuBLAS 1D block scaling factor layout, one entry at a time: 128 x 4 tiles of 512 entries, stored in
    row-major order of tiles, entry (r, c) of a tile at (r % 32) * 16 + (r // 32) * 4 + c; padding stays 0."""
    col_tiles = -(-kblocks // 4)
    out = [0] * (-(-rows // 128) * 128 * col_tiles * 4)
    for r in range(rows):
        for c in range(kblocks):
            tile = (r // 128) * col_tiles + c // 4
            rr, cc = r % 128, c % 4
            out[tile * 512 + (rr % 32) * 16 + (rr // 32) * 4 + cc] = matrix[r][c]
    return out


@pytest.mark.parametrize("dtype", ["int32", "float32"])
def test_to_blocked_puts_every_scale_where_the_cublas_formula_says(dtype):
    rows, kblocks = 130, 5  # neither a multiple of the tile: two row tiles and two column tiles, mostly padding
    scales = (torch.arange(rows * kblocks) + 1).to(getattr(torch, dtype)).reshape(rows, kblocks)  # distinct, non-zero
    flat = bs.to_blocked(torch, scales)
    assert flat.dtype == scales.dtype and flat.dim() == 1
    assert flat.numel() == bs.blocked_numel(rows, kblocks) == 256 * 8
    assert flat.tolist() == swizzle_by_formula(scales.tolist(), rows, kblocks)


def test_to_blocked_keeps_fp8_scale_dtypes_and_pads_with_the_zero_byte():
    rows, kblocks = 37, 6  # 222 distinct byte values, none of them 0 (the pad) or 255 (e8m0's NaN)
    raw = (torch.arange(rows * kblocks) + 1).to(torch.uint8).reshape(rows, kblocks)
    for dtype in (torch.float8_e8m0fnu, torch.float8_e4m3fn):
        flat = bs.to_blocked(torch, raw.view(dtype))
        assert flat.dtype == dtype and flat.numel() == bs.blocked_numel(rows, kblocks) == 128 * 8
        # byte 0 is what torchao pads with (torch.zeros of the dtype): 0.0 in e4m3, 2^-127 in e8m0 (it has no zero)
        assert flat.view(torch.uint8).tolist() == swizzle_by_formula(raw.tolist(), rows, kblocks)


@pytest.mark.parametrize("rows,kblocks", [(1, 1), (128, 4), (130, 5), (257, 9), (300, 64)])
def test_from_blocked_undoes_to_blocked(rows, kblocks):
    scales = torch.arange(rows * kblocks, dtype=torch.int32).reshape(rows, kblocks)
    assert torch.equal(bs.from_blocked(torch, bs.to_blocked(torch, scales), rows, kblocks), scales)
    e8m0 = (scales % 254 + 1).to(torch.uint8).view(torch.float8_e8m0fnu)
    back = bs.from_blocked(torch, bs.to_blocked(torch, e8m0), rows, kblocks)
    assert back.dtype == torch.float8_e8m0fnu and torch.equal(back.view(torch.uint8), e8m0.view(torch.uint8))


def test_blocked_numel_rounds_rows_to_128_and_kblocks_to_4():
    assert bs.blocked_numel(1, 1) == 512
    assert bs.blocked_numel(128, 4) == 512
    assert bs.blocked_numel(129, 4) == 1024
    assert bs.blocked_numel(130, 5) == 2048
    assert bs.blocked_numel(4096, 4096 // 32) == 4096 * 128


def test_swizzle_shape_errors_are_clear():
    with pytest.raises(ValueError, match="2-D"):
        bs.to_blocked(torch, torch.zeros(8))
    with pytest.raises(ValueError, match="do not fit a 130 x 5"):
        bs.from_blocked(torch, torch.zeros(512), 130, 5)


def block_view(t, block):
    return t.reshape(t.shape[0], -1, block)


def test_mxfp8_round_trip_stays_within_e4m3_rounding_error():
    torch.manual_seed(0)
    rows, k = 8, 256
    magnitudes = torch.logspace(-3, 3, rows).unsqueeze(1)  # 1e-3 .. 1e3 per row: the scales must follow
    x = torch.randn(rows, k) * magnitudes
    data, scales = bs.quantize_mxfp8(torch, x)
    assert data.dtype == torch.float8_e4m3fn and data.shape == (rows, k)
    assert scales.dtype == torch.float8_e8m0fnu and scales.shape == (rows, k // 32)
    assert not data.to(torch.float32).isnan().any() and (scales.view(torch.uint8) != 255).all()
    s = scales.to(torch.float32)
    # an e8m0 byte is a biased exponent: the scale is exactly 2^(byte - 127)
    assert torch.equal(s, torch.exp2(scales.view(torch.uint8).to(torch.float32) - 127))
    # round-up scale: the smallest power of two that brings the block amax to at most 448, so amax/scale in (224, 448]
    ratio = block_view(x, 32).abs().amax(dim=-1) / s
    assert (ratio <= 448).all() and (ratio > 224).all()
    # Bound: y = x / s is exact (s a power of two). e4m3 keeps 3 mantissa bits: for a normal |y| >= 2^-6 the spacing
    # is 2^(floor(log2|y|) - 3) <= 2^-3 |y|, so round-to-nearest errs by at most 2^-4 |y|; below 2^-6 the subnormal
    # spacing is 2^-9, an error of at most 2^-10. Back in x: |err| <= 2^-4 |x| + 2^-10 s, and s < 2 amax / 448.
    err = (bs.dequantize_mxfp8(torch, data, scales) - x).abs()
    bound = 2.0 ** -4 * x.abs() + 2.0 ** -10 * s.repeat_interleave(32, dim=1)
    assert (err <= bound).all(), (err - bound).max()
    # and the bound is not vacuous: the error does reach half of it somewhere (rounding happens)
    assert (err > bound / 2).any()


def test_mxfp8_zero_blocks_exact_edges_and_extremes():
    x = torch.zeros(5, 64)
    edges = torch.tensor([-448.0, 448.0, 1.0, -2.0] * 8)  # all exact in e4m3
    x[1, :32] = edges  # amax exactly 448: scale 1, nothing to round
    x[2, :32] = edges / 8  # amax 56 = 448 / 8: scale 2^-3, stored as +-448 again
    x[2, 32:] = 449.0  # just past 448: scale 2, 224.5 stored as 224 (nearest e4m3), nothing saturates
    x[3, :32] = 3.0e38  # near float32's max
    x[3, 32:] = 1.0e-40  # float32 subnormals
    # x[0] and x[4] stay all zero
    data, scales = bs.quantize_mxfp8(torch, x)
    values, s = data.to(torch.float32), scales.to(torch.float32)
    assert not values.isnan().any() and not s.isnan().any() and not s.isinf().any()
    assert s[0].tolist() == [1.0, 1.0] and (values[0] == 0).all()  # zero blocks: a valid scale, zero data
    assert s[1, 0].item() == 1.0 and torch.equal(values[1, :32], edges)
    assert s[2, 0].item() == 2.0 ** -3 and torch.equal(values[2, :32], edges)
    assert s[2, 1].item() == 2.0 and (values[2, 32:] == 224.0).all()
    back = bs.dequantize_mxfp8(torch, data, scales)
    assert torch.equal(back[:3], x[:3].where(x[:3] != 449.0, torch.tensor(448.0)))
    assert ((back[3] - x[3]).abs() <= 2.0 ** -4 * x[3].abs()).all()


@pytest.mark.parametrize("quantize,block", [(bs.quantize_mxfp8, 32), (bs.quantize_nvfp4, 16)])
def test_k_not_a_multiple_of_the_block_is_refused_by_name(quantize, block):
    k = block + block // 2
    with pytest.raises(ValueError, match="K=%d is not a multiple of the block size %d" % (k, block)):
        quantize(torch, torch.ones(4, k))


def nvfp4_effective_scales(scales, global_scale):
    return (scales.to(torch.float32) * global_scale).repeat_interleave(16, dim=1)


def test_nvfp4_round_trip_stays_within_e2m1_rounding_error():
    torch.manual_seed(1)
    rows, k = 8, 256
    x = torch.randn(rows, k) * torch.logspace(-1, 2, rows).unsqueeze(1)
    packed, scales, global_scale = bs.quantize_nvfp4(torch, x)
    assert packed.dtype == torch.float4_e2m1fn_x2 and packed.shape == (rows, k // 2)
    assert scales.dtype == torch.float8_e4m3fn and scales.shape == (rows, k // 16)
    assert global_scale.dtype == torch.float32 and global_scale.dim() == 0
    assert global_scale.item() == pytest.approx(x.abs().max().item() / (448 * 6), rel=1e-6)
    s = scales.to(torch.float32)
    assert not s.isnan().any() and s.max().item() == 448.0  # the block holding the tensor's amax uses e4m3's top
    block_amax = block_view(x, 16).abs().amax(dim=-1)
    assert (s > 2.0 ** -6).all()  # no block scale hit the floor with this data, so the e4m3 rounding bound applies
    # e4m3 rounds the ideal block scale amax_b / 6 / global to within 2^-4 of it (relative, normal range)
    effective = s * global_scale
    assert ((effective - block_amax / 6).abs() <= 2.0 ** -4 * block_amax / 6 * (1 + 1e-6)).all()
    # Bound: y = x / effective lies within +-6 / (1 - 2^-4) ~ 6.4; E2M1 spacing is 0.5 up to 2, 1 up to 4, 2 up to 6,
    # so rounding errs by at most 0.25, 0.5, 1 there, and the clamp of (6, 6.4] to 6 by at most 0.4. In x units:
    # |err| <= half_gap(|y|) * effective <= effective <= (1 + 2^-4) * amax_b / 6.
    eff = nvfp4_effective_scales(scales, global_scale)
    y = (x / eff).abs()
    half_gap = torch.where(y <= 2, 0.25, torch.where(y <= 4, 0.5, 1.0))
    err = (bs.dequantize_nvfp4(torch, packed, scales, global_scale) - x).abs()
    assert (err <= half_gap * eff * (1 + 1e-6)).all(), (err - half_gap * eff).max()
    assert (err <= (1 + 2.0 ** -4) * block_amax.repeat_interleave(16, dim=1) / 6).all()
    assert (err > half_gap * eff / 2).any()  # rounding does happen: the bound is not vacuous


def nvfp4_exact_row(values):
    """A 2-row tensor whose second row is quantized with an effective scale of exactly 1: the first row holds the
    tensor amax 2688 = 448 * 6 (global scale 1.0), and the second row's amax is 6 (block scale 1.0)."""
    x = torch.zeros(2, len(values))
    x[0, 0] = 448.0 * 6
    x[1] = torch.tensor(values)
    packed, scales, global_scale = bs.quantize_nvfp4(torch, x)
    assert global_scale.item() == 1.0 and scales[1].to(torch.float32).tolist() == [1.0] * (len(values) // 16)
    return packed[1].view(torch.uint8).tolist(), bs.dequantize_nvfp4(torch, packed, scales, global_scale)[1]


def test_nvfp4_packs_the_even_element_in_the_low_nibble():
    values = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0, 0.0]
    packed, back = nvfp4_exact_row(values)
    # E2M1 codes: 0 000, 0.5 001, 1 010, 1.5 011, 2 100, 3 101, 4 110, 6 111, sign 1000; byte = even | odd << 4
    assert packed == [
        0b0010_0001,  # 0.5, 1.0
        0b0100_0011,  # 1.5, 2.0
        0b0110_0101,  # 3.0, 4.0
        0b0000_0111,  # 6.0, 0.0
        0b1010_1001,  # -0.5, -1.0
        0b1100_1011,  # -1.5, -2.0
        0b1110_1101,  # -3.0, -4.0
        0b0000_1111,  # -6.0, 0.0
    ]
    assert back.tolist() == values


def test_nvfp4_rounds_to_nearest_with_ties_to_the_even_code():
    values = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.26, 0.74, 1.3, 2.6, 3.4, 5.1, 4.9, 6.0]
    _, back = nvfp4_exact_row(values)
    # midpoints go to the code with mantissa bit 0; anything off a midpoint goes to the nearer value
    assert back.tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 0.5, 0.5, 1.5, 3.0, 3.0, 6.0, 4.0, 6.0]


def test_nvfp4_all_zero_tensor_gives_zeros_not_nan():
    packed, scales, global_scale = bs.quantize_nvfp4(torch, torch.zeros(3, 32))
    back = bs.dequantize_nvfp4(torch, packed, scales, global_scale)
    assert torch.isfinite(global_scale) and torch.equal(back, torch.zeros(3, 32))
    assert (packed.view(torch.uint8) == 0).all()
