"""hpl_mxp: NVIDIA's HPL-MxP (xhpl_mxp of the NVIDIA HPC-Benchmarks) on every GPU of this node, one MPI rank each.

The seed: "we test HPL-MxP, which exercises compute, HBM, MPI broadcasts over the scale-out network, NVLink, and
numerical correctness in a single workload ... We report FLOPs across a range of number formats". One solve per
low-precision format (`--sloppy-type`: FP8 = 1, FP16 = 2, as the package's scripts and guides use them), on a
process grid of the node's GPUs and a matrix sized from their memory. Per format: `gflops` and `gflops_per_gpu` (the
line HPL-MxP marks "The HPL-MxP performance to report"), `lu_gflops_per_gpu` (the factorisation alone), `residual`
(the scaled residual) and `passed` (1 when HPL-MxP printed PASSED for it). The output is kept (hpl_mxp.<fmt>.txt).

Two steps, as nccl-tests runs (probes/network/nccl_tests.py):
- every node solves on its own GPUs at the same time (labels nodes=1): per-node outliers and wrong arithmetic;
- then, when the run has several hosts, one solve per format across all of them (the seed's "MPI broadcasts over
  the scale-out network"): the nodes meet in the run's store, agree on the launcher (probes/common/launch.py), and
  the first host starts xhpl_mxp through srun or mpirun, one rank per GPU on every node, on a process grid of all
  ranks and a matrix sized from the smallest GPU and host memory of the world. Its results are in the first host's
  artifact, labelled with the node count (hpl_mxp.<fmt>.n<nodes>.txt holds the launcher's output). torchrun and
  direct cannot start an MPI program: the step is then not run, with the reason in the facts (`across_nodes`).
AMD's rocHPL-MxP is not implemented: an AMD node is skipped with that reason. Where xhpl_mxp is not installed the
probe is skipped with the reason (and a host that skips tells the others, so the solve across nodes says which
host could not take part).
"""

import math
import os
import re
import shutil

from probes.artifact import artifact_filename
from probes.common import device, launch
from probes.common.command import run_cmd
from probes.common.rendezvous import StoreError
from probes.common.tools import not_installed
from probes.params import Param, Params

SLOPPY_TYPES = {"FP8": 1, "FP16": 2}
FP8_MIN_CAPABILITY = (9, 0)
CANDIDATES = ("/usr/local/bin/xhpl_mxp", "/opt/hpc-benchmarks/hpl-mxp-linux-x86_64/xhpl_mxp",
              "/workspace/hpl-mxp-linux-x86_64/xhpl_mxp", "/opt/hpc-benchmarks/hpl-mxp-linux-aarch64-gpu/xhpl_mxp",
              "/workspace/hpl-mxp-linux-aarch64-gpu/xhpl_mxp")
PARAMS = Params(
    peers=True,
    path=Param(str, "", "the xhpl_mxp binary (default: on PATH, then in the NVIDIA HPC-Benchmarks' usual places)"),
    formats=Param(list, list(SLOPPY_TYPES), "low-precision formats, one solve each (FP8, FP16)"),
    n=Param(int, 0, "matrix order (0: from the GPUs' memory, see matrix_order)"),
    nb=Param(int, 1024, "block size"),
    mem_fraction=Param(float, 0.25, "share of the GPUs' memory the matrix takes in 4-byte words when n is 0"),
    mpirun=Param(str, "mpirun", "the MPI launcher that starts one rank per GPU on this node"),
    tool_timeout=Param(float, 1800, "seconds one solve may run"),
    across_nodes=Param(bool, True, "after each node alone, one solve per format across all hosts of the run"),
    slice=Param(str, "", "the run's slice when it is one slice of a sliced run: no solve across nodes, which needs "
                         "every node of the cluster in one run"),
    ranks_per_node=Param(int, 0, "ranks per node (0: one per GPU); on a node without GPUs the probe runs only when "
                                 "this is set (a stand-in binary, for tests of the launch)"),
    rdzv_timeout=Param(float, 120, "seconds to wait for every host in the run's store (plus the solves' time)"),
    port=Param(int, 0, "port of the run's store on the first host (0: derived from the run id and variant)"),
)

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


def wrapper_of(binary):
    """NVIDIA's hpl-mxp.sh beside the package's binary directory, when it is there: it gives each rank its own GPU
    (--gpu-affinity 0:1:..., by the launcher's local rank) and is how the package's guides start xhpl_mxp."""
    wrapper = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(binary))), "hpl-mxp.sh")
    return wrapper if os.access(wrapper, os.X_OK) else None


def program(binary, ppn):
    """What a launcher starts on every rank: the wrapper with the node's GPUs, else xhpl_mxp itself."""
    wrapper = wrapper_of(binary)
    if wrapper:
        return [wrapper, "--gpu-affinity", ":".join(str(i) for i in range(ppn))]
    return [binary]


def _local_mpirun(params, ranks):
    """mpirun -np <ranks> on this node; Open MPI's flags (no binding: the wrapper sets affinity) only for Open MPI."""
    mpirun = [params["mpirun"], "-np", str(ranks)]
    version = run_cmd([params["mpirun"], "--version"], timeout=20)
    if launch.mpi_flavour((version.stdout or "") + (version.stderr or "")) == "openmpi":
        mpirun += ["--bind-to", "none"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
    return mpirun


def solve_args(n, nb, nprow, npcol, fmt):
    return ["--n", str(n), "--nb", str(nb), "--nprow", str(nprow), "--npcol", str(npcol),
            "--sloppy-type", str(SLOPPY_TYPES[fmt])]


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


def _why_not_here(dev, gpus, facts, params):
    """(binary, None) when this node can solve, else (None, why): no NVIDIA GPU (unless ranks_per_node runs a
    stand-in), or no xhpl_mxp."""
    if (dev["backend"] != "cuda" or not gpus) and not params["ranks_per_node"]:
        return None, ("no NVIDIA GPU on this node (%s): xhpl_mxp runs on NVIDIA GPUs; AMD's rocHPL-MxP is not "
                      "implemented in this version" % (facts.get("gpu_error") or "backend %s" % dev["backend"]))
    if gpus and not params["n"] and not all(g.get("memory_total_bytes") for g in gpus):
        return None, "nvidia-smi reports no memory size for every GPU: the matrix cannot be sized (give n)"
    return find_binary(params)


def run(art, params, out_dir):
    dev, gpus, facts = device.describe()
    art.device = dev
    unknown = [f for f in params["formats"] if f.upper() not in SLOPPY_TYPES]
    if unknown:
        art.error("unknown HPL-MxP format(s) %s (known: %s)" % (", ".join(unknown), ", ".join(SLOPPY_TYPES)))
        return
    hosts = list(params["hosts"] or [art.host])
    binary, why_not = _why_not_here(dev, gpus, facts, params)
    gpu = dev["backend"] == "cuda" and bool(gpus)
    ppn = params["ranks_per_node"] or len(gpus)
    memories = [g.get("memory_total_bytes") for g in gpus] if gpu else []
    caps = _compute_caps() if gpu else {}
    base = os.path.splitext(artifact_filename(art.probe, art.variant))[0]
    work = os.path.join(out_dir, ".%s-work" % base)
    failures, mesh = [], None
    try:
        if params["across_nodes"] and len(hosts) > 1 and not params["slice"]:
            # every host meets the others first, one that cannot solve too: the first host then says who could not
            own = {"gpus": len(gpus) if gpu else 0, "ranks": ppn, "binary": binary, "why_not": why_not,
                   "program": program(binary, ppn) if binary else None,
                   "gpu_memory": min(memories) if memories and all(memories) else None,
                   "mem_available": _mem_available(), "caps": ["%d.%d" % c for c in caps.values()]}
            try:
                mesh, agreed = launch.meet_for_mpi_world(art, params, "hpl_mxp", work, own)
            except StoreError as exc:
                why = "the hosts did not meet in the run's store: %s" % exc
                art.facts.update(across_nodes="not run: %s" % why, across_error=why)
                failures.append("across nodes: %s" % why)
        else:
            art.facts["across_nodes"] = (
                "not run: the run has one host" if len(hosts) == 1 else
                "not run: across_nodes is off" if not params["across_nodes"] else
                "not run: this is slice %s of a sliced run, and the solve across nodes needs every node in one run "
                "(an unsliced assessment runs it)" % params["slice"])
        if binary is not None:
            failures += _one_node(art, params, out_dir, binary, ppn, memories, caps)
        if mesh is not None:
            failures += _across_nodes(art, params, out_dir, work, mesh, *agreed)
    finally:
        if mesh is not None:
            mesh.close()
        shutil.rmtree(work, ignore_errors=True)
    if binary is None:
        art.skip(why_not)
    elif failures:
        art.error("; ".join(failures))


def _one_node(art, params, out_dir, binary, ppn, memories, caps):
    """Every format on this node's GPUs (labels nodes=1); returns the failures."""
    nprow, npcol = process_grid(ppn)
    n = params["n"] or matrix_order(min(memories), ppn, params["nb"], params["mem_fraction"], _mem_available())
    prefix = _local_mpirun(params, ppn) + program(binary, ppn)
    art.facts.update({"binary": binary, "wrapper": wrapper_of(binary), "ranks": ppn, "grid": "%dx%d" % (nprow, npcol),
                      "n": n, "nb": params["nb"]})

    def runner(argv, timeout):
        return run_cmd(argv, timeout=timeout)
    return _formats(art, params, out_dir, runner, prefix, n, ppn, 1, caps, "")


def _formats(art, params, out_dir, runner, prefix, n, ranks, nodes, caps, suffix, launcher=None):
    """One solve per format through runner(argv, timeout) -> CmdResult, recorded with the world's labels; returns
    the failures. FP8 is skipped where any GPU of the world is older than Hopper. launcher: the one that started a
    world across nodes, whose account of a failed rank goes into the reason."""
    nprow, npcol = process_grid(ranks)
    failures = []
    for fmt in (f.upper() for f in params["formats"]):
        key = "format.%s%s" % (fmt, suffix)
        old = sorted({"%d.%d" % tuple(cap) for cap in caps.values() if tuple(cap) < FP8_MIN_CAPABILITY}) \
            if fmt == "FP8" else []
        if old:
            # HPL-MxP's FP8 runs on Hopper and newer (the FP8 tensor cores of compute capability 9.0)
            art.facts[key] = "skipped: compute capability %s has no FP8 tensor cores for HPL-MxP" % ", ".join(old)
            continue
        argv = prefix + solve_args(n, params["nb"], nprow, npcol, fmt)
        res = runner(argv, params["tool_timeout"])
        name = "hpl_mxp.%s%s.txt" % (fmt.lower(), suffix)
        with open(os.path.join(out_dir, name), "w") as fh:
            text = res.stdout if res.stdout.startswith("# ") else "# %s\n%s" % (" ".join(argv), res.stdout)
            fh.write(text + ("\n# --- stderr ---\n" + res.stderr if res.stderr else ""))
        art.raw.append(name)
        labels = {"format": fmt, "n": n, "nb": params["nb"], "grid": "%dx%d" % (nprow, npcol), "nodes": nodes,
                  "ranks": ranks}
        why = _solve(art, fmt, res, params["tool_timeout"], labels, launcher)
        if why:
            why = why if nodes == 1 else "across %d nodes: %s" % (nodes, why)
            failures.append(why)
            # a format asked for and not shown correct is not correct: the residual check fails it
            art.add("passed", 0, "bool", **dict(labels, reason=why[:300]))
        art.facts[key] = "ok" if not why else "error: %s" % why[:300]
    return failures


def _across_nodes(art, params, out_dir, work, mesh, launcher, why_launch, facts):
    """When every node has solved alone (their GPUs are free again), the first host starts one solve per format
    across all of them; the others wait until it is done. Returns the failures."""
    solves_s = params["tool_timeout"] * len(params["formats"])
    try:
        missing = mesh.barrier("hpl-mxp-alone", params["rdzv_timeout"] + solves_s + 60, abort_on_lost=True)
        failures = []
        if mesh.rank == 0:
            art.facts.update({"launcher": launcher, "launcher_asked": params["launcher"],
                              "launcher_why_not": why_launch or None})
            if missing:
                # a node still solving (or gone) holds its GPUs: the world cannot start, and that is a fault
                why = "%s did not finish solving alone" % ", ".join(missing)
                art.facts.update(across_nodes="not run: %s" % why, across_error=why)
                failures = ["across nodes: %s" % why]
            else:
                failures = _solve_across(art, params, out_dir, work, facts, launcher, why_launch, mesh.addresses)
        missing = mesh.barrier("hpl-mxp-done", params["rdzv_timeout"] + solves_s + 120, abort_on_lost=True)
        if missing:
            art.facts["store_errors"] = "%s did not arrive after the solve across nodes" % ", ".join(missing)
        return failures
    except StoreError as exc:
        art.facts.update(store_errors="the run's store failed during the solve across nodes: %s" % exc,
                         across_error="the run's store failed: %s" % exc)
        return ["across nodes: the run's store failed: %s" % exc]


def _solve_across(art, params, out_dir, work, facts, launcher, why_launch, addresses):
    """On the first host: the solves across every node, or why they are not run (facts["across_nodes"])."""
    nodes = len(facts)
    why = world_problem(facts, launcher, why_launch, params["hosts"])
    if why:
        art.facts["across_nodes"] = "not run: %s" % why
        return []
    ppn = facts[0]["ranks"]
    ranks = ppn * nodes
    memories = [f["gpu_memory"] for f in facts]
    if params["n"]:
        n = params["n"]
    elif all(memories):
        # the FP64 matrix is spread over every node's host memory: the smallest node's share times the nodes
        host = min(f["mem_available"] or 0 for f in facts) * nodes or None
        n = matrix_order(min(memories), ranks, params["nb"], params["mem_fraction"], host)
    else:
        art.facts["across_nodes"] = "not run: no memory size for every GPU of every node: the matrix cannot be sized"
        return []
    world = [{"slurm": f["slurm"], "address": addresses[i]} for i, f in enumerate(facts)]
    job = "cmxa-%s-hpl" % art.run_id[-12:]
    # the wrapper gives each rank its GPU by local rank, so the step needs all of the node's GPUs; without it srun
    # gives each task one GPU
    wrapper = facts[0]["program"][0] != facts[0]["binary"]
    gpus = facts[0]["gpus"]
    prefix, hostfile = launch.mpi_world_prefix(
        launcher, world, ppn, dict(os.environ), params["srun_args"] if launcher == "srun" else params["mpirun_args"],
        work, job, facts[0]["mpirun"], params["tool_timeout"], gpus_per_task=0 if wrapper or not gpus else 1,
        gpus_per_node=gpus if wrapper else 0, ucx=launch.ucx_wanted(launcher, facts[0]["mpirun"]), bind="none")
    prefix = prefix + facts[0]["program"]
    art.facts.update({"across_nodes": "run: %d nodes, %d ranks through %s" % (nodes, ranks, launcher),
                      "across_launch": " ".join(prefix), "across_hostfile": hostfile, "across_n": n})
    caps = {i: tuple(int(x) for x in c.split(".")) for i, c in enumerate(c for f in facts for c in f["caps"])}
    suffix = ".n%d" % nodes

    def runner(argv, timeout):
        # the job name is the one srun was given: a timeout cancels exactly this step
        return launch.run_launched(launcher, argv, dict(os.environ), os.path.join(work, "launch.%s.log" % argv[-1]),
                                   job, timeout)
    return _formats(art, params, out_dir, runner, prefix, n, ranks, nodes, caps, suffix, launcher)


def world_problem(facts, launcher, why_launch, hosts):
    """Why the solve across these nodes (hosts: their names in the run, in rank order) cannot start, or None: a
    host that cannot solve, a launcher that cannot start an MPI program, nodes with different GPU counts or a
    different xhpl_mxp path (the launcher starts one command line everywhere)."""
    cannot = ["%s: %s" % (h, f["why_not"]) for h, f in zip(hosts, facts) if f["why_not"]]
    if cannot:
        return "every host must solve; " + "; ".join(cannot)
    if launcher not in ("srun", "mpirun"):
        return "xhpl_mxp starts across nodes only through MPI (srun or mpirun); the launcher is %s%s" % (
            launcher, " (%s)" % "; ".join("%s: %s" % kv for kv in sorted(why_launch.items())) if why_launch else "")
    if launcher in why_launch:
        return "launcher %s cannot be used: %s" % (launcher, why_launch[launcher])
    for key, what in (("ranks", "ranks per node (one per GPU)"), ("program", "xhpl_mxp paths")):
        values = {h: f[key] for h, f in zip(hosts, facts)}
        if len({str(v) for v in values.values()}) > 1:
            return "the nodes differ in %s (%s): one command line starts every rank" % (
                what, ", ".join("%s %s" % (h, v if key == "ranks" else " ".join(v)) for h, v in values.items()))
    return None


def _solve(art, fmt, res, timeout, labels, launcher=None):
    """Records one solve's results; returns why it did not give a verdict on its own format, else None."""
    if res.timed_out:
        return "%s: timed out after %g s" % (fmt, timeout)
    try:
        parsed = parse(res.stdout)
    except ValueError as exc:
        who = launch.failure_text(launcher, res.stdout) if launcher else ""
        return "%s: exit %s: %s%s" % (fmt, res.rc, exc, "; %s" % who if who else "")
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
