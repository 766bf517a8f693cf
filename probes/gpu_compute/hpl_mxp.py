"""hpl_mxp: NVIDIA's HPL-MxP (xhpl_mxp of the NVIDIA HPC-Benchmarks) on every GPU of this node, one MPI rank each.

The seed: "we test HPL-MxP, which exercises compute, HBM, MPI broadcasts over the scale-out network, NVLink, and
numerical correctness in a single workload ... We report FLOPs across a range of number formats". One solve per
low-precision format (`--sloppy-type`: FP8 = 1, FP16 = 2, as the package's scripts and guides use them), on a
process grid of the node's GPUs and a matrix sized from their memory. Per format: `gflops` and `gflops_per_gpu` (the
line HPL-MxP marks "The HPL-MxP performance to report"), `lu_gflops_per_gpu` (the factorisation alone), `residual`
(the scaled residual) and `passed` (1 when HPL-MxP printed PASSED for it). The output is kept (hpl_mxp.<fmt>.txt).

Across nodes (the seed's MPI broadcasts over the scale-out network) is not implemented in this version: each node
solves its own system, and the artifact says so. AMD's rocHPL-MxP is not implemented either: an AMD node is skipped
with that reason. Where xhpl_mxp is not installed the probe is skipped with the reason.
"""

import math
import os
import re
import shutil

from probes.common import device
from probes.common.command import run_cmd
from probes.common.tools import not_installed
from probes.params import Param, Params

SLOPPY_TYPES = {"FP8": 1, "FP16": 2}
FP8_MIN_CAPABILITY = (9, 0)
CANDIDATES = ("/usr/local/bin/xhpl_mxp", "/opt/hpc-benchmarks/hpl-mxp-linux-x86_64/xhpl_mxp",
              "/workspace/hpl-mxp-linux-x86_64/xhpl_mxp", "/opt/hpc-benchmarks/hpl-mxp-linux-aarch64-gpu/xhpl_mxp",
              "/workspace/hpl-mxp-linux-aarch64-gpu/xhpl_mxp")
PARAMS = Params(
    path=Param(str, "", "the xhpl_mxp binary (default: on PATH, then in the NVIDIA HPC-Benchmarks' usual places)"),
    formats=Param(list, list(SLOPPY_TYPES), "low-precision formats, one solve each (FP8, FP16)"),
    n=Param(int, 0, "matrix order (0: from the GPUs' memory, see matrix_order)"),
    nb=Param(int, 1024, "block size"),
    mem_fraction=Param(float, 0.25, "share of the GPUs' memory the matrix takes in 4-byte words when n is 0"),
    mpirun=Param(str, "mpirun", "the MPI launcher that starts one rank per GPU on this node"),
    tool_timeout=Param(float, 1800, "seconds one solve may run"),
)
NOT_IMPLEMENTED_ACROSS_NODES = ("across nodes not implemented in this version: each node solves its own system "
                                "(no MPI broadcast over the scale-out network is measured)")

# the scaled residual's line; a GPU that computes wrong prints nan or inf there ("-nan ...... FAILED")
_RESIDUAL_LINE = re.compile(r"\|\|Ax-b\|\|_oo\s*/\s*\(")
_RESIDUAL = re.compile(r"\|\|Ax-b\|\|_oo\s*/\s*\(.*\)\s*=\s*([-+]?(?:nan|inf|[\d.]+(?:[eE][-+]?\d+)?))\s*\.*\s*"
                       r"(PASSED|FAILED)", re.I)
_GRID = re.compile(r"^N\s*=\s*(\d+),\s*NB\s*=\s*(\d+),\s*NPROW\s*=\s*(\d+),\s*NPCOL\s*=\s*(\d+)"
                   r"(?:,\s*SLOPPY-TYPE\s*=\s*(\S+))?")
_GFLOPS = re.compile(r"^(LU )?GFLOPS\s*=\s*([-+\d.eE]+),\s*per GPU\s*=\s*([-+\d.eE]+)")
_THRESHOLD = re.compile(r"^Threshold\s*[. ]*=\s*([-+\d.eE]+)")
_VERSION = re.compile(r"HPL-MxP-NVIDIA\s+(\S+)")


def sloppy_name(value):
    """'2' (25.x) or 'FP16' (26.x) -> 'FP16'."""
    names = {str(v): k for k, v in SLOPPY_TYPES.items()}
    return names.get(str(value), str(value).upper())


def parse(text):
    """xhpl_mxp's output -> {"version", "results": [{n, nb, nprow, npcol, format, gflops, gflops_per_gpu,
    lu_gflops, lu_gflops_per_gpu, residual, threshold, passed}]}: one result per "HPL MxP Result" block (the
    residual check comes before its N = ... line, the GFLOPS lines after). Lines may carry a script's '#'. An output
    with no result is a ValueError naming its last line (where the run stopped)."""
    out = {"version": None, "results": []}
    pending = {}
    threshold = None
    lines = [raw.strip().lstrip("#").strip() for raw in (text or "").splitlines()]
    for line in lines:
        m = _VERSION.search(line)
        if m and out["version"] is None:
            out["version"] = m.group(1)
        m = _THRESHOLD.match(line)
        if m:
            threshold = float(m.group(1))
            continue
        m = _RESIDUAL.search(line)
        if m:
            pending = {"residual": float(m.group(1)), "passed": m.group(2).upper() == "PASSED",
                       "threshold": threshold}
            continue
        if _RESIDUAL_LINE.search(line):  # the check line, unreadable: never taken for a pass
            pending = {"residual": None, "passed": False, "threshold": threshold, "unreadable": line[:200]}
            continue
        m = _GRID.match(line)
        if m:
            n, nb, nprow, npcol, sloppy = m.groups()
            pending.update(n=int(n), nb=int(nb), nprow=int(nprow), npcol=int(npcol),
                           format=sloppy_name(sloppy) if sloppy else None)
            continue
        m = _GFLOPS.match(line)
        if m and "n" in pending:
            prefix = "lu_" if m.group(1) else ""
            pending[prefix + "gflops"] = float(m.group(2))
            pending[prefix + "gflops_per_gpu"] = float(m.group(3))
            if m.group(1):  # the LU line ends a result
                out["results"].append(dict({"residual": None, "passed": None, "threshold": None}, **pending))
                pending = {}
    if pending.get("gflops") is not None:  # a result without its LU line
        out["results"].append(dict({"residual": None, "passed": None, "threshold": None, "lu_gflops": None,
                                    "lu_gflops_per_gpu": None}, **pending))
    if not out["results"]:
        last = next((x for x in reversed(lines) if x), "")
        raise ValueError("xhpl_mxp: no HPL-MxP result; last line %r" % last[:200] if last else "xhpl_mxp: no output")
    return out


def process_grid(ranks):
    """(nprow, npcol) with nprow x npcol = ranks, as square as possible, nprow <= npcol (HPL's advice)."""
    nprow = int(math.isqrt(ranks))
    while ranks % nprow:
        nprow -= 1
    return nprow, ranks // nprow


def matrix_order(memory_bytes, ranks, nb, fraction, host_bytes=None):
    """n for `fraction` of the GPUs' memory in 4-byte words, rounded down to a multiple of nb x the grid's larger
    side (whole blocks on every rank), and no larger than the host can hold: the FP64 matrix also lives in host
    memory, 8 n^2 bytes in all (the H100 run of tests/fixtures/hpl-mxp, n = 92160: 34 GB on the GPU, 63 GB on the
    host), kept under 60 % of MemAvailable."""
    words = memory_bytes * ranks * fraction / 4
    if host_bytes:
        words = min(words, 0.6 * host_bytes / 8)
    step = nb * max(process_grid(ranks))
    return max(step, int(math.sqrt(words)) // step * step)


def _mem_available():
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _compute_caps():
    """{gpu index: (major, minor)} from nvidia-smi (drivers without the compute_cap field: {})."""
    res = run_cmd(["nvidia-smi", "--query-gpu=index,compute_cap", "--format=csv,noheader"], timeout=20)
    caps = {}
    for line in (res.stdout or "").splitlines() if res.rc == 0 else []:
        m = re.match(r"^\s*(\d+)\s*,\s*(\d+)\.(\d+)\s*$", line)
        if m:
            caps[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return caps


def _launcher(params, binary, ranks):
    """mpirun and what it starts: NVIDIA's hpl-mxp.sh wrapper when it sits where the package puts it (it gives each
    rank its own GPU: --gpu-affinity 0:1:...), else xhpl_mxp itself; Open MPI's root flag only for Open MPI."""
    mpirun = [params["mpirun"], "-np", str(ranks)]
    version = run_cmd([params["mpirun"], "--version"], timeout=20)
    if "Open MPI" in (version.stdout or "") or "OpenRTE" in (version.stdout or ""):
        mpirun += ["--bind-to", "none"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    wrapper = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(binary))), "hpl-mxp.sh")
    if os.access(wrapper, os.X_OK):
        return mpirun + [wrapper, "--gpu-affinity", ":".join(str(i) for i in range(ranks))], wrapper
    return mpirun + [binary], None


def find_binary(params):
    if params["path"]:
        return (params["path"], None) if os.access(params["path"], os.X_OK) else (
            None, "xhpl_mxp not found at %s" % params["path"])
    found = shutil.which("xhpl_mxp") or next((p for p in CANDIDATES if os.access(p, os.X_OK)), None)
    if found:
        return found, None
    return None, not_installed(params, "hpl_mxp", "xhpl_mxp is not installed (not on PATH, nor in %s; "
                               "gpu_compute_hpl_mxp_path; it ships in the NVIDIA HPC-Benchmarks)"
                               % ", ".join(CANDIDATES))


def run(art, params, out_dir):
    dev, gpus, facts = device.describe()
    art.device = dev
    art.facts["across_nodes"] = NOT_IMPLEMENTED_ACROSS_NODES
    if dev["backend"] != "cuda" or not gpus:
        art.skip("no NVIDIA GPU on this node (%s): xhpl_mxp runs on NVIDIA GPUs; AMD's rocHPL-MxP is not "
                 "implemented in this version" % (facts.get("gpu_error") or "backend %s" % dev["backend"]))
        return
    binary, why = find_binary(params)
    if binary is None:
        art.skip(why)
        return
    unknown = [f for f in params["formats"] if f.upper() not in SLOPPY_TYPES]
    if unknown:
        art.error("unknown HPL-MxP format(s) %s (known: %s)" % (", ".join(unknown), ", ".join(SLOPPY_TYPES)))
        return
    ranks = len(gpus)
    nprow, npcol = process_grid(ranks)
    memories = [g.get("memory_total_bytes") for g in gpus]
    if not params["n"] and not all(memories):
        art.skip("nvidia-smi reports no memory size for every GPU: the matrix cannot be sized (give n)")
        return
    n = params["n"] or matrix_order(min(memories), ranks, params["nb"], params["mem_fraction"], _mem_available())
    prefix, wrapper = _launcher(params, binary, ranks)
    art.facts.update({"binary": binary, "wrapper": wrapper, "ranks": ranks, "grid": "%dx%d" % (nprow, npcol), "n": n,
                      "nb": params["nb"]})
    caps = _compute_caps()
    failures = []
    for fmt in (f.upper() for f in params["formats"]):
        old = sorted({"%d.%d" % cap for cap in caps.values() if cap < FP8_MIN_CAPABILITY}) if fmt == "FP8" else []
        if old:
            # HPL-MxP's FP8 runs on Hopper and newer (the FP8 tensor cores of compute capability 9.0)
            art.facts["format.%s" % fmt] = "skipped: compute capability %s has no FP8 tensor cores for HPL-MxP" % (
                ", ".join(old))
            continue
        argv = prefix + ["--n", str(n), "--nb", str(params["nb"]), "--nprow", str(nprow), "--npcol", str(npcol),
                         "--sloppy-type", str(SLOPPY_TYPES[fmt])]
        res = run_cmd(argv, timeout=params["tool_timeout"])
        name = "hpl_mxp.%s.txt" % fmt.lower()
        with open(os.path.join(out_dir, name), "w") as fh:
            fh.write("# %s\n%s%s" % (" ".join(argv), res.stdout, "\n# --- stderr ---\n" + res.stderr
                                     if res.stderr else ""))
        art.raw.append(name)
        labels = {"format": fmt, "n": n, "nb": params["nb"], "grid": "%dx%d" % (nprow, npcol)}
        why = _solve(art, fmt, res, params["tool_timeout"], labels)
        if why:
            failures.append(why)
            # a format asked for and not shown correct is not correct: the residual check fails it
            art.add("passed", 0, "bool", **dict(labels, reason=why[:300]))
        art.facts["format.%s" % fmt] = "ok" if not why else "error: %s" % why[:300]
    if failures:
        art.error("; ".join(failures))


def _solve(art, fmt, res, timeout, labels):
    """Records one solve's results; returns why it did not give a verdict on its own format, else None."""
    if res.timed_out:
        return "%s: timed out after %g s" % (fmt, timeout)
    try:
        parsed = parse(res.stdout)
    except ValueError as exc:
        return "%s: exit %s: %s" % (fmt, res.rc, exc)
    art.facts["version"] = parsed["version"]
    verdict = None
    for r in parsed["results"]:
        if r["format"] and r["format"] != fmt:
            return "%s asked for, xhpl_mxp solved in %s (--sloppy-type not taken?)" % (fmt, r["format"])
        at = dict(labels, n=r["n"], nb=r["nb"], grid="%dx%d" % (r["nprow"], r["npcol"]))
        art.add("gflops", r["gflops"], "GFLOP/s", **at)
        art.add("gflops_per_gpu", r["gflops_per_gpu"], "GFLOP/s", **at)
        if r["lu_gflops_per_gpu"] is not None:
            art.add("lu_gflops_per_gpu", r["lu_gflops_per_gpu"], "GFLOP/s", **at)
        if r["passed"] is not None:
            if r["residual"] is not None and math.isfinite(r["residual"]):
                art.add("residual", r["residual"], "1", threshold=r["threshold"], **at)
            elif r["residual"] is not None:  # nan or inf: no number for the artifact (JSON has none), said here
                art.facts["residual.%s" % fmt] = str(r["residual"])
            art.add("passed", 1 if r["passed"] else 0, "bool", **at)
            verdict = r["passed"] if verdict is None else verdict and r["passed"]
    if verdict is None:
        return "%s: no residual check printed" % fmt
    if res.rc != 0:
        return "%s: exit %s after its result" % (fmt, res.rc)
    return None
