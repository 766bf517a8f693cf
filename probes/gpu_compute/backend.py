"""Backend selection and operands for the GPU compute probes: torch on CUDA, ROCm, or the CPU.

What each dtype means here (and why one is skipped):
  bf16, fp16, fp32  torch.mm on tensors of that dtype (fp32 with TF32 off)
  tf32              torch.mm on fp32 tensors with torch.backends.cuda.matmul.allow_tf32 on (CUDA only)
  fp8_e4m3          torch._scaled_mm, per-tensor scales, bf16 output (e4m3fnuz on MI300-class ROCm GPUs)
  mxfp8             torch._scaled_mm with float8_e8m0fnu scales per 32 elements along K (OCP MX)
  nvfp4             torch._scaled_mm on float4_e2m1fn_x2 data with float8_e4m3fn scales per 16 elements
The block-scaled dtypes (mxfp8, nvfp4) run on real quantized operands with their block scales in the layout
cuBLASLt reads (probes/gpu_compute/block_scales.py), and before they are measured their product is checked against
the product of the dequantized operands (block_scaled_error): a kernel that runs but computes wrong is an error.
A dtype the GPU or the torch build cannot run is skipped with the reason (static_support: what the hardware or torch
does not have), never silently replaced by another dtype. One small trial operation then runs it: on a GPU whose
static checks pass, an exception there (a CUDA error, an ECC fault) is an error of that GPU and dtype, not a skip; on
the CPU backend torch's refusal is the skip's reason (its CPU kernels vary by build, and only trying tells).
"""

import os
import re
import sys
from contextlib import contextmanager

from probes.common import device as vendor
from probes.gpu_compute import block_scales
from probes.gpu_compute.shapes import DTYPES
from probes.params import Param

MIB = 2 ** 20
# What prepare reads: the params of every torch compute probe.
DEVICE_PARAMS = {
    "backend": Param(str, "auto", "what to measure on (auto: the GPUs torch sees, else the CPU)",
                     choices=("auto", "cpu", "cuda", "rocm")),
    "cpu_threads": Param(int, 1, "torch threads on the CPU backend"),
    "gpus": Param(list, None, "GPU indices to measure, as nvidia-smi / amd-smi count them (default: all)"),
}
TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "tf32": "float32", "fp32": "float32"}


class Unsupported(Exception):
    """This dtype or operation cannot run on this device with this torch: a skip, with the message as reason."""


class Context:
    """What a probe learned before measuring: torch, the backend, and the devices to run on."""

    def __init__(self, torch, backend, devices, cpu_threads, visible_env, visible_ids, torch_indices=None,
                 unseen=None, unseen_error=None):
        self.torch = torch
        self.backend = backend
        self.devices = devices  # labels of the devices (GPU indices as nvidia-smi / amd-smi count them)
        self.cpu_threads = cpu_threads
        self.visible_env = visible_env  # CUDA_VISIBLE_DEVICES or HIP_VISIBLE_DEVICES
        self.visible_ids = visible_ids  # the value that pins worker i to its GPU
        # torch's index in this (unpinned) process of each device, for probes that use all GPUs in one process
        self.torch_indices = list(range(len(devices))) if torch_indices is None else torch_indices
        # the node's GPUs torch does not see: {node index: why} where known (each one an error row), else one line
        self.unseen = dict(unseen or {})
        self.unseen_error = unseen_error


def import_torch():
    """(torch, None) or (None, why it cannot be imported)."""
    try:
        import torch  # noqa: PLC0415 - torch is optional on a node; its absence is a skip, not a crash
    except Exception as exc:  # noqa: BLE001 - a broken install is a reason too
        return None, "torch is not importable by %s: %s: %s" % (sys.executable, type(exc).__name__, exc)
    return torch, None


def torch_backend(torch):
    """(backend, device count) as torch sees it, without creating a CUDA context in this process."""
    try:
        if torch.cuda.is_available():
            return ("rocm" if getattr(torch.version, "hip", None) else "cuda"), torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - a broken driver reads as "no GPU for torch"; the caller says so
        pass
    return "cpu", 0


def visible_ids(env_value, count):
    """The device ids to pin workers to, and their labels: the entries of an existing *_VISIBLE_DEVICES list
    (so a job restricted to GPUs 2,3 reports gpu 2 and 3), else 0..count-1."""
    if env_value:
        entries = [e.strip() for e in env_value.split(",") if e.strip()]
        if len(entries) >= count:
            entries = entries[:count]
            labels = [int(e) if e.isdigit() else i for i, e in enumerate(entries)]
            return entries, labels
    return [str(i) for i in range(count)], list(range(count))


def pci_key(address):
    """(domain, bus, device) of a PCI address as nvidia-smi ("00000000:18:00.0") or amd-smi ("0000:18:00.0") print
    it (vendor.sysfs_bdf), or None."""
    bdf = vendor.sysfs_bdf(address)
    return tuple(int(part, 16) for part in re.split(r"[:.]", bdf)[:3]) if bdf else None


def torch_pci_keys(torch, count):
    """Per torch device (its ordinal in this process): (domain, bus, device) of its PCI address, or None where torch
    does not say (a torch without the pci_*_id device properties)."""
    keys = []
    for i in range(count):
        try:
            props = torch.cuda.get_device_properties(i)
            keys.append((int(props.pci_domain_id), int(props.pci_bus_id), int(props.pci_device_id)))
        except Exception:  # noqa: BLE001 - no address: the caller keeps torch's numbering and compares counts
            keys.append(None)
    return keys


def match_node_gpus(torch_keys, node_gpus):
    """torch's devices against the node's own GPU list (nvidia-smi / amd-smi: describe()'s GPUs, with index and
    pci_bus_id), by PCI address. Returns (labels, unseen): per torch device the node's index of the same GPU, and the
    node's GPUs that no torch device is (their entries of node_gpus); (None, None) when some torch device has no address
    or none the node lists (torch's numbering is all there is then).
    torch skips what it cannot use (a GPU left in MIG mode, one that fails to initialise), so its ordinals shift
    past such a GPU: without this, the GPU nvidia-smi calls 4 would be labelled 3, and the one torch missed would
    not be named at all."""
    by_key = {}
    for gpu in node_gpus:
        key = pci_key(gpu.get("pci_bus_id"))
        if key is not None:
            by_key.setdefault(key, gpu)
    if not torch_keys or any(k not in by_key for k in torch_keys) or len(set(torch_keys)) != len(torch_keys):
        return None, None
    seen = set(torch_keys)
    labels = [by_key[k]["index"] for k in torch_keys]
    unseen = [g for g in node_gpus if pci_key(g.get("pci_bus_id")) not in seen and g["index"] not in labels]
    return labels, unseen


def unseen_reasons(unseen, tool, backend, seen_count):
    """{node index: why} for the node's GPUs torch does not see (an error row each), with the PCI address and the
    MIG mode where the tool gave them."""
    reasons = {}
    for gpu in unseen:
        known = ["PCI %s" % gpu["pci_bus_id"]] if gpu.get("pci_bus_id") else []
        if gpu.get("mig_mode"):
            known.append("MIG mode %s" % gpu["mig_mode"])
        reasons[gpu["index"]] = ("%s lists GPU %s%s but torch (%s) does not see it, only %d of the node's GPUs (a GPU "
                                 "in MIG mode, or one the driver cannot bring up)" % (
                                     tool, gpu["index"], " (%s)" % ", ".join(known) if known else "", backend,
                                     seen_count))
    return reasons


# The environment variables that hide GPUs from torch on purpose (a job given a subset), per backend.
DEVICE_MASKS = {"cuda": ("CUDA_VISIBLE_DEVICES",),
                "rocm": ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")}


def node_gpu_labels(torch, backend, count, node_gpus, tool, env_value):
    """(labels, unseen, unseen_error): the node's index of each torch device (None: keep torch's numbering), the node's
    GPUs torch does not see as {index: why}, and, when they cannot be named (no PCI addresses), one line saying how
    many are missing. With a *_VISIBLE_DEVICES mask in the environment the job sees a subset on purpose: not
    compared."""
    labels, unseen = match_node_gpus(torch_pci_keys(torch, count), node_gpus)
    if env_value:
        return labels, {}, None
    if labels is not None:
        return labels, unseen_reasons(unseen, tool, backend, count), None
    if len(node_gpus) > count:
        return None, {}, ("%s lists %d GPUs but torch (%s) sees %d, and torch gives no PCI address to tell which are "
                          "missing: the results are labelled by torch's numbering, which skips them"
                          % (tool, len(node_gpus), backend, count))
    return None, {}, None


def prepare(art, params):
    """Fill the artifact's device block and facts; return a Context, or None when the probe cannot run (the
    artifact then says why: skipped when torch is missing, error when GPUs exist that torch cannot use)."""
    # torch must number GPUs as nvidia-smi does (PCI bus order), before anything initialises CUDA in this process
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    dev, gpus, tool_facts = vendor.describe()
    art.device = dev
    art.facts.update({"gpu_tool": tool_facts.get("gpu_tool"), "gpu_error": tool_facts.get("gpu_error")})
    torch, why = import_torch()
    if torch is None:
        art.skip(why)
        return None
    art.device["torch"] = torch.__version__
    art.facts.update({"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None),
                      "torch_hip": getattr(torch.version, "hip", None)})
    requested = params["backend"]
    backend, count = torch_backend(torch)
    if requested == "cpu":
        backend, count = "cpu", 0
    elif requested != "auto" and requested != backend:
        art.error("backend %s was asked for but torch %s sees %s" % (requested, torch.__version__, backend))
        return None
    if backend == "cpu" and dev["count"] and requested != "cpu":
        # Measuring the CPU of a GPU node would hide the GPUs from every GPU check: say what is wrong instead.
        art.device["backend"] = "cpu"
        art.error("%s lists %d GPU(s) but torch %s (cuda=%s, hip=%s) cannot use them: install a GPU build of torch "
                  "for %s" % (tool_facts.get("gpu_tool"), dev["count"], torch.__version__,
                              getattr(torch.version, "cuda", None), getattr(torch.version, "hip", None),
                              sys.executable))
        return None
    art.device["backend"] = backend
    threads = None
    if backend == "cpu":
        threads = max(1, params["cpu_threads"])
        torch.set_num_threads(threads)
        art.device["count"] = 0
        art.facts["cpu_threads"] = threads
        ids, labels, env_name, indices = ["cpu"], [0], None, [0]
        unseen, unseen_error = {}, None
    else:
        env_name = "HIP_VISIBLE_DEVICES" if backend == "rocm" else "CUDA_VISIBLE_DEVICES"
        ids, labels = visible_ids(os.environ.get(env_name), count)
        # label each device by the node's own index (matched by PCI address), and name the GPUs torch cannot see
        mask = next((os.environ[v] for v in DEVICE_MASKS[backend] if os.environ.get(v)), None)
        node_labels, unseen, unseen_error = node_gpu_labels(torch, backend, count, gpus, tool_facts.get("gpu_tool"),
                                                            mask)
        if node_labels is not None:
            labels = node_labels
        indices = list(range(len(labels)))
        wanted = params["gpus"]
        if wanted:
            wanted = [int(g) for g in wanted]
            indices = [i for i, label in enumerate(labels) if label in wanted]
            ids, labels = [ids[i] for i in indices], [labels[i] for i in indices]
            unseen = {g: why for g, why in unseen.items() if g in wanted}
        if unseen:
            art.facts["gpus_unseen"] = ",".join(str(g) for g in sorted(unseen))
        if not dev["count"]:
            art.device["count"] = count
        if not art.device.get("model"):
            try:
                art.device["model"] = torch.cuda.get_device_name(0)
            except Exception:  # noqa: BLE001 - the name is a nicety; the measurement does not need it
                pass
        art.facts["gpu_labels"] = "%s index by PCI address" % tool_facts.get("gpu_tool") if node_labels is not None \
            else "torch's numbering"
    art.facts["backend"] = backend
    art.facts["devices"] = ",".join(str(d) for d in labels)
    return Context(torch, backend, labels, threads, env_name, ids, indices, unseen, unseen_error)


def requested_dtypes(params, default):
    """The dtypes asked for, in the canonical order, plus the unknown names (reported as errors)."""
    asked = params["dtypes"] or default
    known = [d for d in DTYPES if d in asked]
    unknown = [d for d in asked if d not in DTYPES]
    return known, unknown


@contextmanager
def matmul_mode(torch, dtype, backend):
    """TF32 on for tf32, off for everything else (so fp32 is real fp32); restored afterwards."""
    if backend == "cpu":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _first_line(exc):
    text = str(exc).strip().splitlines()
    return "%s: %s" % (type(exc).__name__, text[0] if text else "")


def static_support(torch, dtype, backend, device=None):
    """Why this dtype cannot run here, from what is known without running anything (None: try it)."""
    version = torch.__version__
    if dtype == "tf32":
        if backend == "cpu":
            return "tf32 is a tensor-core math mode of NVIDIA GPUs; the CPU backend has none"
        if backend == "rocm":
            return ("tf32 is not measured on ROCm: torch's allow_tf32 flag cannot tell whether hipBLASLt used xf32, "
                    "so the number could be plain fp32")
    if dtype in ("fp8_e4m3", "mxfp8", "nvfp4") and not hasattr(torch, "_scaled_mm"):
        return "torch %s has no torch._scaled_mm" % version
    if dtype in ("fp8_e4m3", "mxfp8") and not hasattr(torch, "float8_e4m3fn"):
        return "torch %s has no float8_e4m3fn dtype" % version
    if dtype == "mxfp8" and not hasattr(torch, "float8_e8m0fnu"):
        return "torch %s has no float8_e8m0fnu (the MX block-scale dtype, torch >= 2.7)" % version
    if dtype == "nvfp4" and not hasattr(torch, "float4_e2m1fn_x2"):
        return "torch %s has no float4_e2m1fn_x2 (packed fp4, torch >= 2.8)" % version
    if backend == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        name = torch.cuda.get_device_name(device)
        if dtype == "fp8_e4m3" and (major, minor) < (8, 9):
            return "%s (compute capability %d.%d) has no fp8 tensor cores (needs 8.9 or newer)" % (name, major, minor)
        if dtype in ("mxfp8", "nvfp4") and major < 10:
            return ("%s (compute capability %d.%d) has no block-scaled %s tensor cores (needs 10.0 or newer, "
                    "Blackwell)" % (name, major, minor, dtype))
    if backend == "rocm":
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "") or ""
        if dtype == "fp8_e4m3" and not ("gfx94" in arch or "gfx95" in arch):
            return "%s has no fp8 matrix cores (gfx94x or gfx95x needed)" % arch
        if dtype in ("mxfp8", "nvfp4") and "gfx95" not in arch:
            return "%s has no block-scaled %s matrix cores (gfx950 needed)" % (arch, dtype)
    return None


def _fp8_dtype(torch, backend, device):
    if backend == "rocm":
        arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "") or ""
        if "gfx94" in arch:
            return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


# quantize, dequantize per block-scaled dtype (block_scales.py)
BLOCK_SCALED = {"mxfp8": (block_scales.quantize_mxfp8, block_scales.dequantize_mxfp8),
                "nvfp4": (block_scales.quantize_nvfp4, block_scales.dequantize_nvfp4)}


def block_operand(torch, dtype, x):
    """(data, scales in cuBLASLt's swizzled layout, global scale (nvfp4) or None) of x (rows, K), quantized."""
    quantized = BLOCK_SCALED[dtype][0](torch, x)
    return quantized[0], block_scales.to_blocked(torch, quantized[1]), (quantized[2] if len(quantized) > 2 else None)


def make_gemm(torch, dtype, m, n, k, device, backend):
    """(op, impl, keep): op() computes C = A @ B once into a preallocated C; keep holds the tensors.
    A is row-major m x k, B is n x k stored row-major and used transposed (column-major k x n), like nn.Linear
    weights and like mamf-finder. Raises Unsupported with the reason."""
    why = static_support(torch, dtype, backend, device)
    if why:
        raise Unsupported(why)
    if dtype in TORCH_DTYPES:
        tdt = getattr(torch, TORCH_DTYPES[dtype])
        a = torch.randn(m, k, dtype=tdt, device=device)
        b = torch.randn(n, k, dtype=tdt, device=device).t()
        c = torch.empty(m, n, dtype=tdt, device=device)

        def op():
            torch.mm(a, b, out=c)

        return op, "torch.mm", (a, b, c)
    out_dtype = torch.bfloat16
    c = torch.empty(m, n, dtype=out_dtype, device=device)
    if dtype == "fp8_e4m3":
        f8 = _fp8_dtype(torch, backend, device)
        a = torch.randn(m, k, device=device).to(f8)
        b = torch.randn(n, k, device=device).to(f8).t()
        scale_a = torch.tensor(1.0, device=device)
        scale_b = torch.tensor(1.0, device=device)
    elif dtype in BLOCK_SCALED:
        if dtype == "nvfp4" and k % 32:
            raise Unsupported("nvfp4 needs K to be a multiple of 32, got %d" % k)
        a, scale_a, _ = block_operand(torch, dtype, torch.randn(m, k, device=device))
        b, scale_b, _ = block_operand(torch, dtype, torch.randn(n, k, device=device))
        b = b.t()
    else:
        raise Unsupported("unknown dtype %r" % dtype)

    def op():
        torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype, out=c)

    return op, "torch._scaled_mm", (a, b, c, scale_a, scale_b)


def trial(torch, backend, device, build):
    """Build and run one small instance: None when it ran, else (status, reason). "skipped" when a static check
    refused it (Unsupported: this hardware or torch has no such dtype or kernel), or on the CPU backend when torch
    refuses it. "error" when it raised on a GPU that passed the static checks: bf16 on any GPU, fp8 on Hopper. A
    CUDA or ECC error there says the GPU is faulty, never that it lacks the dtype, and must not read as a skip."""
    try:
        op = build()[0]
        op()
        if backend != "cpu":
            torch.cuda.synchronize()
    except Unsupported as exc:
        return "skipped", str(exc)
    except Exception as exc:  # noqa: BLE001 - a runtime failure is the outcome; its message the reason
        if backend == "cpu":
            return "skipped", "not supported by torch %s on the cpu backend: %s" % (torch.__version__,
                                                                                    _first_line(exc))
        return "error", "failed on a %s GPU that supports it (torch %s): %s" % (backend, torch.__version__,
                                                                                _first_line(exc))
    return None


# The size of the one small GEMM that tells whether a dtype runs here at all (gemm_support).
TRIAL_SIZE = 128


def gemm_support(torch, dtype, backend, device):
    """None when a small plain GEMM of this dtype runs here, else (status, reason) as trial() gives them: what every
    compute probe asks before it measures a dtype, so that "skipped" always means "this GPU or torch cannot" and a
    GPU that fails a dtype it has is an error."""
    with matmul_mode(torch, dtype, backend):
        return trial(torch, backend, device, lambda: make_gemm(torch, dtype, TRIAL_SIZE, TRIAL_SIZE, TRIAL_SIZE,
                                                               device, backend))


# The block-scaled product check: a small GEMM whose blocks span 2^-8 .. 2^8 (so that a scale read from the wrong
# block changes the product), against the product of the dequantized operands in fp32. bf16 output rounding and
# the accumulation order stay far below the tolerance; one misplaced scale is off by a power of two.
CHECK_M, CHECK_N, CHECK_K, CHECK_RTOL = 256, 256, 512, 0.02


def block_scaled_error(torch, dtype, backend, device, kernel=None):
    """None when a block-scaled product (mxfp8, nvfp4) matches the product of the dequantized operands, else what
    differs: torch._scaled_mm (kernel, for the tests: the same signature) reads the scales in another layout, or
    computes wrong. Other dtypes: None."""
    if dtype not in BLOCK_SCALED:
        return None
    kernel = kernel or torch._scaled_mm
    gen = torch.Generator(device="cpu").manual_seed(26)

    def operand(rows):
        spread = torch.randint(-8, 9, (rows, CHECK_K // 32), generator=gen).to(torch.float32)
        x = torch.randn(rows, CHECK_K, generator=gen) * torch.exp2(spread).repeat_interleave(32, dim=1)
        return x.to(device)

    try:
        return _block_scaled_check(torch, dtype, device, kernel, operand)
    except Exception as exc:  # noqa: BLE001 - the trial GEMM ran: a check that cannot run is not a pass
        return "%s: the product check could not run: %s" % (dtype, _first_line(exc))


def _block_scaled_check(torch, dtype, device, kernel, operand):
    (qa, sa, ga), (qb, sb, gb) = (block_operand(torch, dtype, operand(r)) for r in (CHECK_M, CHECK_N))
    dequantize = BLOCK_SCALED[dtype][1]
    unblock = block_scales.from_blocked
    kb = CHECK_K // (32 if dtype == "mxfp8" else 16)
    deq = [dequantize(torch, q, unblock(torch, s_, r, kb), *([g] if g is not None else []))
           for q, s_, g, r in ((qa, sa, ga, CHECK_M), (qb, sb, gb, CHECK_N))]
    expected = deq[0] @ deq[1].t()
    got = kernel(qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16).to(torch.float32)
    if ga is not None:  # torch._scaled_mm takes no per-tensor scale next to NVFP4's block scales: applied after
        got = got * (ga * gb)
    err = float((got - expected).abs().max() / expected.abs().max())
    if not err <= CHECK_RTOL:
        return ("%s product off its dequantized reference by %.3g of its largest value (tolerance %g): the block "
                "scales are read in another layout than cuBLASLt's, or the kernel computes wrong" % (
                    dtype, err, CHECK_RTOL))
    return None


GEMV_DTYPES = ("bf16", "fp16", "fp32")


def make_gemv(torch, dtype, m, k, device):
    """(op, impl, keep): y[m] = W[m,k] @ x[k] with torch.mv."""
    if dtype not in GEMV_DTYPES:
        raise Unsupported("gemv measures %s (memory-bound: the math mode does not matter); %s has no torch.mv "
                          "kernel of its own" % (", ".join(GEMV_DTYPES), dtype))
    tdt = getattr(torch, TORCH_DTYPES[dtype])
    w = torch.randn(m, k, dtype=tdt, device=device)
    x = torch.randn(k, dtype=tdt, device=device)
    y = torch.empty(m, dtype=tdt, device=device)

    def op():
        torch.mv(w, x, out=y)

    return op, "torch.mv", (w, x, y)


GROUPED_DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "mxfp8", "nvfp4")
GROUPED_IMPL = "torch._grouped_mm"
LOOP_IMPL = "per_expert_loop"
# Measured by the per-expert loop only, and why (grouped_impl says so in the artifact).
LOOP_ONLY = {
    "tf32": "tf32 is fp32 with TF32 tensor-core math, which torch.mm honours (allow_tf32) and torch._grouped_mm does "
            "not document",
    "mxfp8": "torch's grouped kernel with MX block scales wants per-group padded scale layouts this version does not "
             "build: one block-scaled torch._scaled_mm per expert",
    "nvfp4": "torch's grouped kernel with NVFP4 block scales wants per-group padded scale layouts this version does "
             "not build: one block-scaled torch._scaled_mm per expert",
}


def make_grouped(torch, dtype, rows, n, k, device, impl, weights=None, backend=None):
    """(op, impl, keep): one MoE projection over the local experts. x holds the routed rows sorted by expert
    (rows[e] of them for expert e), W the expert weights (experts, n, k) like nn.Linear (`weights`, when given,
    is reused: the same experts serve every token batch). impl is torch's grouped matmul (one kernel for all
    experts) or a loop of one torch.mm per expert. fp8 (e4m3, bf16 out) goes through torch._scaled_grouped_mm with
    row-wise scales (one per row of x, one per expert and output column of W), or a loop of torch._scaled_mm."""
    if dtype not in GROUPED_DTYPES:
        raise Unsupported("grouped_gemm measures %s" % ", ".join(GROUPED_DTYPES))
    if dtype in BLOCK_SCALED:
        return _block_scaled_grouped(torch, dtype, rows, n, k, device, impl, weights)
    fp8 = dtype == "fp8_e4m3"
    tdt = _fp8_dtype(torch, backend, device) if fp8 else getattr(torch, TORCH_DTYPES[dtype])
    total = sum(rows)
    x = torch.randn(total, k, device=device).to(tdt) if fp8 else torch.randn(total, k, dtype=tdt, device=device)
    if weights is None:
        weights = (torch.randn(len(rows), n, k, device=device).to(tdt) if fp8
                   else torch.randn(len(rows), n, k, dtype=tdt, device=device))
    w = weights
    if tuple(w.shape) != (len(rows), n, k) or w.dtype != tdt:
        raise ValueError("weights of shape %s %s do not fit %d experts of %dx%d %s"
                         % (tuple(w.shape), w.dtype, len(rows), n, k, dtype))
    out_dtype = torch.bfloat16 if fp8 else tdt
    if impl == GROUPED_IMPL:
        ends, acc = [], 0
        for r in rows:
            acc += r
            ends.append(acc)
        offs = torch.tensor(ends, dtype=torch.int32, device=device)
        wt = w.transpose(-2, -1)
        if fp8:
            scale_a = torch.ones(total, dtype=torch.float32, device=device)
            scale_b = torch.ones(len(rows), n, dtype=torch.float32, device=device)

            def op():
                torch._scaled_grouped_mm(x, wt, scale_a, scale_b, offs=offs, out_dtype=out_dtype)

            return op, "torch._scaled_grouped_mm", (x, w, offs, scale_a, scale_b)

        def op():
            torch._grouped_mm(x, wt, offs=offs)

        return op, GROUPED_IMPL, (x, w, offs)
    y = torch.empty(total, n, dtype=out_dtype, device=device)
    slices, start = [], 0
    for e, r in enumerate(rows):
        if r:
            slices.append((x[start:start + r], w[e].t(), y[start:start + r]))
        start += r
    if fp8:
        one = torch.tensor(1.0, device=device)

        def op():
            for xs, ws, ys in slices:
                torch._scaled_mm(xs, ws, scale_a=one, scale_b=one, out_dtype=out_dtype, out=ys)

        return op, LOOP_IMPL, (x, w, y, slices, one)

    def op():
        for xs, ws, ys in slices:
            torch.mm(xs, ws, out=ys)

    return op, LOOP_IMPL, (x, w, y, slices)


def _block_scaled_grouped(torch, dtype, rows, n, k, device, impl, weights):
    """One block-scaled torch._scaled_mm per expert: the routed rows quantized once, each expert's slice with its
    own swizzled scales (the layout pads each operand's rows to 128); weights, when given, are the experts'
    [(data, swizzled scales)] of an earlier batch."""
    if impl != LOOP_IMPL:
        raise Unsupported(LOOP_ONLY[dtype])
    if dtype == "nvfp4" and k % 32:
        raise Unsupported("nvfp4 needs K to be a multiple of 32, got %d" % k)
    if weights is None:
        weights = [block_operand(torch, dtype, torch.randn(n, k, device=device))[:2] for _ in rows]
    if len(weights) != len(rows):
        raise ValueError("%d experts' weights for %d experts" % (len(weights), len(rows)))
    quantize = BLOCK_SCALED[dtype][0]
    data, scales = quantize(torch, torch.randn(sum(rows), k, device=device))[:2]
    y = torch.empty(sum(rows), n, dtype=torch.bfloat16, device=device)
    slices, start = [], 0
    for (w, w_scales), r in zip(weights, rows):
        if r:
            slices.append((data[start:start + r], block_scales.to_blocked(torch, scales[start:start + r]), w.t(),
                           w_scales, y[start:start + r]))
        start += r

    def op():
        for xs, xs_scales, ws, ws_scales, ys in slices:
            torch._scaled_mm(xs, ws, scale_a=xs_scales, scale_b=ws_scales, out_dtype=torch.bfloat16, out=ys)

    return op, LOOP_IMPL, (data, weights, y, slices)


def grouped_impl(torch, dtype, device, backend):
    """(impl, reason): torch's grouped matmul when it runs here, else the per-expert loop and why."""
    if dtype in LOOP_ONLY:
        return LOOP_IMPL, LOOP_ONLY[dtype]
    name = "_scaled_grouped_mm" if dtype == "fp8_e4m3" else "_grouped_mm"
    if not hasattr(torch, name):
        return LOOP_IMPL, "torch %s has no torch.%s" % (torch.__version__, name)
    failed = trial(torch, backend, device, lambda: make_grouped(torch, dtype, [16, 0, 32], 32, 64, device,
                                                                GROUPED_IMPL, backend=backend))
    if failed:  # refused or failed: the loop of plain GEMMs is measured instead (and fails too on a faulty GPU)
        return LOOP_IMPL, "torch.%s: %s" % (name, failed[1])
    return GROUPED_IMPL, None
