"""Real block-scaled operands for the MXFP8 and NVFP4 GEMM probes: quantized data, block scales, and the swizzled
scale layout that cuBLASLt (and torch._scaled_mm, which calls it) reads.

Why: all-ones scales and random bytes time the kernel on meaningless numbers and cannot tell a wrong scale layout from
a right one. With real operands and real scales in the layout cuBLASLt reads, the measured kernel works on real data,
and on a GPU the product can be checked against dequantize_*(A) @ dequantize_*(B)^T: scales in a wrong layout give a
wrong product. Everything is plain torch (reshapes, elementwise ops), so it runs on the CPU in the unit tests and on
the GPU when handed GPU tensors. torch is the first argument of every function, as in backend.py: the probes import it
lazily (its absence is a skip, not an import error).

Formats (blocks run along K, the contraction dimension, one scale per row and block):
  MXFP8  OCP Microscaling (MX) v1.0: 32 float8_e4m3fn elements share one float8_e8m0fnu scale (a power of two).
         https://www.opencompute.org/documents/ocp-microscaling-formats-mx-v1-0-spec-final-pdf
  NVFP4  16 FP4 E2M1 elements (packed two a byte, torch.float4_e2m1fn_x2) share one float8_e4m3fn scale, and the
         whole tensor one FP32 scale: value = e2m1 * block_scale * global_scale.

Scale layout (to_blocked): cuBLAS "1D Block Scaling Factors Layout", the one cuBLASLt reads for the scale modes
CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 and VEC16_UE4M3:
  https://docs.nvidia.com/cuda/cublas/index.html#d-block-scaling-factors-layout
  (explained at https://nvidia.github.io/cudnn-frontend/mxfp8-scale-factor-128x4-layout/)
It is what torchao's to_blocked / from_blocked produce and undo
  (https://github.com/pytorch/ao/blob/main/torchao/prototype/mx_formats/utils.py),
and torchao's Triton kernel triton_scale_swizzle spells the offset out: dest = (r % 32) * 16 + (r // 32) * 4 + c
  (https://github.com/pytorch/ao/blob/main/torchao/prototype/mx_formats/kernels.py).
"""

MX_BLOCK = 32  # elements per E8M0 scale (OCP MX v1.0)
NVFP4_BLOCK = 16  # elements per E4M3 scale
E4M3_MAX = 448.0  # largest finite float8_e4m3fn
E4M3_TINY = 2.0 ** -6  # smallest normal float8_e4m3fn: the floor of an NVFP4 block scale, as torchao clamps it
E2M1_MAX = 6.0  # largest FP4 E2M1
E8M0_BIAS = 127
TILE_ROWS, TILE_COLS = 128, 4  # one swizzled scale tile: 128 rows x 4 K-blocks, 512 entries
# E2M1 magnitudes by their 3-bit code (sign is bit 3): 0b000 0, 0b001 0.5, 0b010 1, ... 0b111 6
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Midpoints between neighbouring E2M1 magnitudes; a value on a midpoint goes to the even code (round half to even,
# as torchao's _f32_to_floatx_unpacked and the hardware cvt.rn do): these three midpoints round up, the others down.
_E2M1_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)
_E2M1_TIES_UP = (0.75, 1.75, 3.5)


def _round_up(n, multiple):
    return -(-n // multiple) * multiple


def blocked_numel(rows, kblocks):
    """Entries of the swizzled scale tensor for a (rows, kblocks) scale matrix: both sides padded to whole tiles."""
    return _round_up(rows, TILE_ROWS) * _round_up(kblocks, TILE_COLS)


def _blocks(torch, x, block):
    """x as float32 (rows, K // block, block); ValueError unless x is 2-D with K a multiple of the block."""
    if x.dim() != 2:
        raise ValueError("expected a 2-D (rows, K) tensor, got shape %s" % (tuple(x.shape),))
    rows, k = x.shape
    if k % block:
        raise ValueError("K=%d is not a multiple of the block size %d" % (k, block))
    return x.to(torch.float32).reshape(rows, k // block, block)


def _ceil_log2(torch, v):
    """ceil(log2(v)) for v > 0, exact: frexp splits v = m * 2^e with m in [0.5, 1), and only m == 0.5 (v a power of
    two) makes ceil(log2(v)) = e - 1. torch.log2 may round a value just above a power of two down onto it."""
    mant, exp = torch.frexp(v)
    return exp - (mant == 0.5).to(exp.dtype)


def quantize_mxfp8(torch, x):
    """(data float8_e4m3fn (rows, K), scales float8_e8m0fnu (rows, K // 32)) with x ~= data * scale per block.

    The scale is the smallest power of two that keeps the block's amax within e4m3's 448: 2^ceil(log2(amax / 448)),
    the round-up ("RCEIL") recipe of torchao's ScaleCalculationMode.RCEIL (_to_mx_rceil in
    torchao/prototype/mx_formats/mx_tensor.py, which cites https://docs.nvidia.com/cuda/cublas/#d-block-quantization
    for it; on Blackwell torchao computes it with the round-up cvt.rp.ue8m0x2.f32 instruction). The OCP
    spec's floor(log2(amax)) - 8 maps amax into [256, 512) and must saturate what lands above 448; rounding up never
    overflows, at the price of one binade of headroom for some blocks. x must be finite.
    """
    blocks = _blocks(torch, x, MX_BLOCK)
    amax = blocks.abs().amax(dim=-1)
    exp = _ceil_log2(torch, amax / E4M3_MAX)
    # an all-zero block has no amax to fit: any scale dequantizes its zeros to zero, 2^0 is the plainest
    exp = torch.where(amax > 0, exp, torch.zeros_like(exp)).clamp(-E8M0_BIAS, E8M0_BIAS)
    # multiplying by 2^-exp is exact in float32; the clamp only catches amax / 448 rounding just below a power of two
    scaled = (blocks * torch.exp2(-exp.to(torch.float32)).unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX)
    data = scaled.reshape(x.shape).to(torch.float8_e4m3fn)
    # E8M0 is the biased exponent byte itself (0 -> 2^-127, 127 -> 1.0, 255 -> NaN)
    scales = (exp + E8M0_BIAS).to(torch.uint8).view(torch.float8_e8m0fnu)
    return data, scales


def dequantize_mxfp8(torch, data, scales):
    """float32 (rows, K): every element times its block's power-of-two scale."""
    rows, k = data.shape
    if scales.shape != (rows, k // MX_BLOCK) or k % MX_BLOCK:
        raise ValueError("scales of shape %s do not fit data of shape %s in blocks of %d"
                         % (tuple(scales.shape), tuple(data.shape), MX_BLOCK))
    values = data.to(torch.float32).reshape(rows, k // MX_BLOCK, MX_BLOCK)
    return (values * scales.to(torch.float32).unsqueeze(-1)).reshape(rows, k)


def _e2m1_codes(torch, y):
    """4-bit E2M1 codes (uint8, sign in bit 3) of y, already within [-6, 6], rounded to nearest, half to even.
    torch has no cast to fp4, so the rounding is done here: the code of |y| is the number of midpoints below it."""
    mag = y.abs()
    midpoints = torch.tensor(_E2M1_MIDPOINTS, dtype=torch.float32, device=y.device)
    code = torch.bucketize(mag, midpoints, out_int32=True)  # counts midpoints strictly below: ties go down
    code = code + torch.isin(mag, torch.tensor(_E2M1_TIES_UP, dtype=torch.float32, device=y.device)).to(code.dtype)
    code = code + (y < 0).to(code.dtype) * 8
    return code.to(torch.uint8)


def _pack_e2m1(torch, codes):
    """(rows, K) 4-bit codes -> (rows, K // 2) float4_e2m1fn_x2: element 2j in the low nibble, 2j + 1 in the high one.
    That is the order torch's own nvfp4 _scaled_mm tests pack in (pack_uint4 in test/test_matmul_cuda.py:
    `uint8_data[1::2] << 4 | uint8_data[::2]`) and torchao's pack_uint4 (mx_formats/kernels.py) does."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).view(torch.float4_e2m1fn_x2)


def quantize_nvfp4(torch, x):
    """(packed float4_e2m1fn_x2 (rows, K // 2), scales float8_e4m3fn (rows, K // 16), global_scale float32 scalar)
    with x ~= e2m1 * scale * global_scale per block.

    torchao's two-level recipe (nvfp4_quantize and per_tensor_amax_to_scale in
    torchao/prototype/mx_formats/nvfp4_tensor.py): global_scale = amax(|x|) / (448 * 6), so the block holding the
    tensor's amax gets the block scale 448; each block's scale is amax_block / 6 / global_scale rounded to e4m3
    (clamped to [2^-6, 448]); elements are x / (scale * global_scale), clamped to +-6 (the e4m3 rounding of the scale
    can push the block amax a little past 6) and rounded to E2M1. x must be finite.
    """
    blocks = _blocks(torch, x, NVFP4_BLOCK)
    global_scale = blocks.abs().amax() / (E4M3_MAX * E2M1_MAX)
    # an all-zero tensor: any positive global scale gives zeros back, and 1.0 avoids dividing by zero
    global_scale = torch.where(global_scale > 0, global_scale, torch.ones_like(global_scale))
    block_amax = blocks.abs().amax(dim=-1)
    scales = (block_amax / E2M1_MAX / global_scale).clamp(E4M3_TINY, E4M3_MAX).to(torch.float8_e4m3fn)
    # divide by exactly the product dequantize_nvfp4 multiplies by, so the round trip error is only E2M1's
    effective = scales.to(torch.float32) * global_scale
    y = (blocks / effective.unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX)
    codes = _e2m1_codes(torch, y).reshape(x.shape)
    return _pack_e2m1(torch, codes), scales, global_scale


def dequantize_nvfp4(torch, packed, scales, global_scale):
    """float32 (rows, K): every E2M1 element times its block's e4m3 scale times the global scale."""
    raw = packed.view(torch.uint8)
    rows, k = raw.shape[0], raw.shape[1] * 2
    if scales.shape != (rows, k // NVFP4_BLOCK) or k % NVFP4_BLOCK:
        raise ValueError("scales of shape %s do not fit %d x %d packed fp4 data in blocks of %d"
                         % (tuple(scales.shape), rows, k, NVFP4_BLOCK))
    codes = torch.stack([raw & 0xF, raw >> 4], dim=-1).reshape(rows, k)  # low nibble first (see _pack_e2m1)
    magnitudes = torch.tensor(E2M1_VALUES, dtype=torch.float32, device=raw.device)
    lut = torch.cat([magnitudes, -magnitudes])
    values = lut[codes.to(torch.int64)].reshape(rows, k // NVFP4_BLOCK, NVFP4_BLOCK)
    effective = scales.to(torch.float32) * global_scale.to(torch.float32)
    return (values * effective.unsqueeze(-1)).reshape(rows, k)


def _as_bytes(torch, t):
    """One-byte dtypes (e8m0, e4m3) are moved as uint8: padding and copies then need no kernels for the fp8 dtype
    itself, and the zero byte is the pad torchao writes (torch.zeros of the dtype): 0.0 in e4m3, 2^-127 in e8m0, which
    has no zero. Wider dtypes (the tests use int32 and float32) are moved as they are."""
    if t.element_size() == 1 and t.dtype != torch.uint8:
        return t.view(torch.uint8), t.dtype
    return t, None


def to_blocked(torch, scales):
    """The (rows, kblocks) scale matrix in cuBLAS's 1D block scaling factor layout, flat (blocked_numel entries),
    same dtype. Padded with zero bytes to rows % 128 == 0 and kblocks % 4 == 0, cut into 128 x 4 tiles stored one
    after another in row-major order of tiles, and inside a tile the entry (r, c) lands at (r % 32) * 16 + (r // 32)
    * 4 + c: the 32 x 16 arrangement the tensor cores read. Reshapes and one copy, no Python loop over entries."""
    if scales.dim() != 2:
        raise ValueError("expected a 2-D (rows, kblocks) scale matrix, got shape %s" % (tuple(scales.shape),))
    src, dtype = _as_bytes(torch, scales)
    rows, kblocks = src.shape
    padded_rows, padded_cols = _round_up(rows, TILE_ROWS), _round_up(kblocks, TILE_COLS)
    padded = torch.zeros((padded_rows, padded_cols), dtype=src.dtype, device=src.device)
    padded[:rows, :kblocks] = src
    row_tiles, col_tiles = padded_rows // TILE_ROWS, padded_cols // TILE_COLS
    # axes: row tile, r // 32, r % 32, column tile, c  ->  row tile, column tile, r % 32, r // 32, c
    tiles = padded.reshape(row_tiles, 4, 32, col_tiles, TILE_COLS).permute(0, 3, 2, 1, 4)
    flat = tiles.reshape(-1)
    return flat.view(dtype) if dtype is not None else flat


def from_blocked(torch, flat, rows, kblocks):
    """The inverse of to_blocked: the (rows, kblocks) scale matrix, padding dropped."""
    if flat.numel() != blocked_numel(rows, kblocks):
        raise ValueError("%d swizzled scales do not fit a %d x %d scale matrix (%d expected)"
                         % (flat.numel(), rows, kblocks, blocked_numel(rows, kblocks)))
    src, dtype = _as_bytes(torch, flat)
    row_tiles, col_tiles = _round_up(rows, TILE_ROWS) // TILE_ROWS, _round_up(kblocks, TILE_COLS) // TILE_COLS
    # axes: row tile, column tile, r % 32, r // 32, c  ->  row tile, r // 32, r % 32, column tile, c
    tiles = src.reshape(row_tiles, col_tiles, 32, 4, TILE_COLS).permute(0, 3, 2, 1, 4)
    matrix = tiles.reshape(row_tiles * TILE_ROWS, col_tiles * TILE_COLS)[:rows, :kblocks].contiguous()
    return matrix.view(dtype) if dtype is not None else matrix
