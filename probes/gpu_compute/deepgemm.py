"""deepgemm: MoE expert grouped GEMMs through DeepGEMM (github.com/deepseek-ai/DeepGEMM), where a node has it.

What: one projection over the local experts, as in backend.make_grouped (x of shape (sum(rows), k) sorted by
expert, W of shape (experts, n, k) like nn.Linear), computed by DeepGEMM's m-grouped "contiguous" kernel and
labelled impl "deep_gemm.<function>". Why: the seed spec measures grouped GEMMs on cuBLASLt *and* DeepGEMM, the
kernels DeepSeek's stack runs its FP8 experts on (1x128 activation and 128x128 weight scales), so a GPU's rate
through them is what such a model sees; torch._scaled_grouped_mm (row-wise scales) is a different kernel.

DeepGEMM's API by version is the GROUPED_API table below (sources: deepseek-ai/DeepGEMM at the commits named). Its
contiguous layout: each expert's rows padded to get_mk_alignment_for_contiguous_layout() (v1: get_m_..., always
128); m_indices (int32, one per row) holds the row's expert, -1 on padding rows (tests/test_core.py @1169f83c,
tests/generators.py @0274ad7b). A dtype, DeepGEMM version or GPU it cannot do raises backend.Unsupported.
"""

from probes.gpu_compute.backend import Unsupported

IMPL_PREFIX = "deep_gemm."
GRAN = 128  # DeepGEMM's FP8 recipe (1, 128, 128): 1x128 activation scales, 128x128 weight scales
FP8_MAX = 448.0  # largest finite float8_e4m3fn
INSTALL_HINT = "DeepGEMM, github.com/deepseek-ai/DeepGEMM; needs CUDA 12.3+ and SM90/SM100"
# The m-grouped contiguous kernel per dtype, newest first: (function, API style); a DeepGEMM rename is one line here.
GROUPED_API = {
    # v2 (2025-07 on, SM90 + SM100, C++): (a, b, d, m_indices, recipe=None, compiled_dims="nk",
    # disable_ue8m0_cast=False), a and b (data, fp32 scales) pairs (csrc/python_api.cpp @6439a3d7); later an alias of
    # m_grouped_fp8_fp4_gemm_nt_contiguous whose 4th argument is named grouped_layout, so it is passed by position
    # (csrc/apis/gemm.hpp @0274ad7b). v1 (2025, SM90 only, Python JIT): (lhs, rhs, out, m_indices), same pairs
    # (deep_gemm/jit_kernels/m_grouped_gemm.py @0b5d353d).
    "fp8_e4m3": (("m_grouped_fp8_gemm_nt_contiguous", "v2"), ("m_grouped_gemm_fp8_fp8_bf16_nt_contiguous", "v1")),
    # v2 only (SM90 in 2.0, SM90 + SM100 later); v1 has no BF16 kernels
    "bf16": (("m_grouped_bf16_gemm_nt_contiguous", "v2"),),
}
# v2 names the alignment "mk" (deep_gemm/utils/layout.py keeps the "m" name as an alias); v1 has only "m"
ALIGNMENT_FUNCS = ("get_mk_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout")


def import_deep_gemm():
    """(deep_gemm, None), or (None, why it cannot be imported here)."""
    try:
        import deep_gemm  # noqa: PLC0415 - optional on a node; its absence is a skip, not a crash
    except ModuleNotFoundError as exc:
        if exc.name != "deep_gemm":  # installed, but something it imports is missing
            return None, "deep_gemm is installed but does not import: %s" % exc
        return None, "deep_gemm is not installed (%s)" % INSTALL_HINT
    except Exception as exc:  # noqa: BLE001 - v2 initialises its JIT (CUDA home, NVCC) at import: a reason too
        return None, "deep_gemm does not import: %s: %s" % (type(exc).__name__, exc)
    return deep_gemm, None


def api(deep_gemm):
    """{dtype: (function name, "v1" or "v2")} for the grouped kernels this installed DeepGEMM has."""
    found = {}
    for dtype, candidates in GROUPED_API.items():
        for name, style in candidates:
            if callable(getattr(deep_gemm, name, None)):
                found[dtype] = (name, style)
                break
    return found


def alignment(deep_gemm):
    """The row alignment of each expert's block in the contiguous layout."""
    for name in ALIGNMENT_FUNCS:
        fn = getattr(deep_gemm, name, None)
        if callable(fn):
            return int(fn())
    return GRAN  # v1's documented constant (deep_gemm/jit_kernels/utils.py)


def contiguous_layout(torch, rows, align, device="cpu"):
    """(padded rows per expert, m_indices, total rows): expert e's rows[e] rows padded to a multiple of `align`;
    m_indices (int32) is e on its real rows, -1 on its padding rows (each align-row block is one expert's)."""
    padded = [-(-r // align) * align for r in rows]
    ids, counts = [], []
    for e, (r, p) in enumerate(zip(rows, padded)):
        ids += [e, -1]
        counts += [r, p - r]
    # built on the host and copied once: one small kernel per expert would be slow for hundreds of experts
    m_indices = torch.repeat_interleave(torch.tensor(ids, dtype=torch.int32), torch.tensor(counts, dtype=torch.long))
    return padded, m_indices.to(device), sum(padded)


def ceil_to_ue8m0(torch, sf):
    """Scales rounded up to powers of two: SM100 kernels keep only the exponent (UE8M0) of each scale
    (deep_gemm/utils/math.py ceil_to_ue8m0); rounding up keeps every value within the FP8 range."""
    bits = sf.abs().float().view(torch.int32)
    exp = ((bits >> 23) & 0xFF) + (bits & 0x7FFFFF).bool().int()
    return (exp.clamp(1, 254) << 23).view(torch.float32)


def per_token_cast_to_fp8(torch, x, use_ue8m0=False):
    """(float8_e4m3fn data of x's shape, fp32 scales (m, ceil(k/128))): one scale per row and 128 columns,
    amax/448 clamped to 1e-4/448; K not a multiple of 128 is zero-padded for the scales, as DeepGEMM does
    (deep_gemm/utils/math.py; tests/test_core.py @1169f83c)."""
    if x.dim() != 2:
        raise ValueError("activations must be 2-D (m, k), got shape %s" % (tuple(x.shape),))
    m, k = x.shape
    padded_k = -(-k // GRAN) * GRAN
    x_padded = torch.zeros((m, padded_k), dtype=x.dtype, device=x.device)
    x_padded[:, :k] = x
    view = x_padded.view(m, padded_k // GRAN, GRAN)
    sf = view.abs().float().amax(dim=2).clamp(1e-4) / FP8_MAX
    sf = ceil_to_ue8m0(torch, sf) if use_ue8m0 else sf
    data = (view * (1.0 / sf.unsqueeze(2))).to(torch.float8_e4m3fn).view(m, padded_k)[:, :k].contiguous()
    return data, sf


def per_block_cast_to_fp8(torch, w, use_ue8m0=False):
    """(float8_e4m3fn data of w's shape, fp32 scales (ceil(n/128), ceil(k/128))): one scale per 128x128 block,
    zero-padded at the edges, as DeepGEMM does (deep_gemm/utils/math.py per_block_cast_to_fp8)."""
    if w.dim() != 2:
        raise ValueError("weights must be 2-D (n, k), one expert at a time, got shape %s" % (tuple(w.shape),))
    n, k = w.shape
    pn, pk = -(-n // GRAN) * GRAN, -(-k // GRAN) * GRAN
    w_padded = torch.zeros((pn, pk), dtype=w.dtype, device=w.device)
    w_padded[:n, :k] = w
    view = w_padded.view(pn // GRAN, GRAN, pk // GRAN, GRAN)
    sf = view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4) / FP8_MAX
    sf = ceil_to_ue8m0(torch, sf) if use_ue8m0 else sf
    data = (view * (1.0 / sf)).to(torch.float8_e4m3fn).view(pn, pk)[:n, :k].contiguous()
    return data, sf.view(pn // GRAN, pk // GRAN)


def arch_major(torch, device):
    """The GPU's compute capability major (9 Hopper, 10 Blackwell); Unsupported where DeepGEMM cannot run."""
    if torch.device(device).type != "cuda" or getattr(torch.version, "hip", None):
        raise Unsupported("DeepGEMM runs on NVIDIA SM90/SM100 GPUs only, not on %s" % device)
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        raise Unsupported("DeepGEMM needs SM90 or newer; this GPU is sm_%d%d" % (major, minor))
    return major


def _fp8_weights(torch, groups, n, k, device, use_ue8m0):
    w = torch.empty(groups, n, k, dtype=torch.float8_e4m3fn, device=device)
    sf = torch.empty(groups, -(-n // GRAN), -(-k // GRAN), dtype=torch.float32, device=device)
    for g in range(groups):  # one expert at a time, so the bf16/fp32 temporaries stay one expert's size
        w[g], sf[g] = per_block_cast_to_fp8(torch, torch.randn(n, k, dtype=torch.bfloat16, device=device), use_ue8m0)
    return w, sf


def make_grouped_deepgemm(torch, deep_gemm, dtype, rows, n, k, device, weights=None):
    """(op, impl, keep): op() runs DeepGEMM's grouped kernel once over the rows in the contiguous layout; keep[1] is
    the weights (bf16 tensor, or fp8 (data, fp32 scales)) to pass back as `weights` for the next token batch.
    FLOPs: the caller counts the unpadded rows (grouped_gemm_flops(rows, n, k)); the padding rows DeepGEMM also
    computes are a cost of its layout, not work the model asked for."""
    if deep_gemm is None:
        raise Unsupported(import_deep_gemm()[1] or "deep_gemm is not available")
    version = getattr(deep_gemm, "__version__", "?")
    if dtype not in GROUPED_API:
        raise Unsupported("the DeepGEMM grouped GEMM here measures %s; %s is not implemented"
                          % (", ".join(GROUPED_API), dtype))
    found = api(deep_gemm)
    if dtype not in found:
        raise Unsupported("deep_gemm %s has no grouped %s kernel (it has: %s)"
                          % (version, dtype, ", ".join(sorted(found)) or "none"))
    name, style = found[dtype]
    major = arch_major(torch, device)
    if style == "v1" and major != 9:
        raise Unsupported("deep_gemm %s (%s) runs on SM90 only; this GPU is SM%d0" % (version, name, major))
    groups, fn = len(rows), getattr(deep_gemm, name)
    _, m_indices, total = contiguous_layout(torch, rows, alignment(deep_gemm), device)
    x = torch.randn(total, k, dtype=torch.bfloat16, device=device)
    x[m_indices < 0] = 0  # padding rows hold zeros, as in DeepGEMM's tests, so their scales are regular
    d = torch.empty(total, n, dtype=torch.bfloat16, device=device)
    # SM100 kernels take UE8M0 scales: quantize with power-of-two scales and let DeepGEMM pack them, as its
    # tests do (tests/generators.py get_ue8m0_usage: False on SM90, True for the SM100 1D1D kernels)
    ue8m0 = style == "v2" and major >= 10
    if weights is None:
        weights = (torch.randn(groups, n, k, dtype=torch.bfloat16, device=device) if dtype == "bf16"
                   else _fp8_weights(torch, groups, n, k, device, ue8m0))
    w, w_sf = (weights, None) if dtype == "bf16" else weights
    if tuple(w.shape) != (groups, n, k) or w.dtype != (torch.bfloat16 if dtype == "bf16" else torch.float8_e4m3fn):
        raise ValueError("weights %s %s do not fit %d experts of %dx%d %s" % (list(w.shape), w.dtype, groups, n, k,
                                                                              dtype))
    if dtype == "bf16":

        def op():
            fn(x, w, d, m_indices)

        return op, IMPL_PREFIX + name, (x, w, d, m_indices)
    a, a_sf = per_token_cast_to_fp8(torch, x, ue8m0)
    b_sf = w_sf
    # Scales brought into the layout the kernel reads once here, so that op() times the GEMM, not a layout kernel
    # (DeepGEMM would otherwise transpose / pack them on every call).
    transform = getattr(deep_gemm, "transform_sf_into_required_layout", None)
    if style == "v2" and callable(transform):
        recipe = (1, GRAN, GRAN)
        a_sf = transform(a_sf, total, k, recipe, num_groups=None, is_sfa=True, disable_ue8m0_cast=not ue8m0)
        b_sf = transform(w_sf, n, k, recipe, num_groups=groups, is_sfa=False, disable_ue8m0_cast=not ue8m0)
    elif style == "v1" and callable(getattr(deep_gemm, "get_col_major_tma_aligned_tensor", None)):
        a_sf = deep_gemm.get_col_major_tma_aligned_tensor(a_sf)
    lhs, rhs = (a, a_sf), (w, b_sf)
    # v1 has no disable_ue8m0_cast; v2 gets it as DeepGEMM's tests pass it (tests/test_fp8.py)
    kwargs = {} if style == "v1" else {"disable_ue8m0_cast": not ue8m0}

    def op():
        fn(lhs, rhs, d, m_indices, **kwargs)

    return op, IMPL_PREFIX + name, (a, weights, d, m_indices, a_sf, b_sf)
