"""io_tools_run: IOR, mdtest and elbencho on one storage tier, on each node, where the node has them.

The seed runs "fio, ior, elbencho" on every tier; fio is the fio_sweep probe. This one runs the others the way
their users start them, each in a directory of its own host under the tier's test directory, one after the other:

- IOR: file per process, write then read back with reordered tasks (-C, so a rank does not read its own page cache)
  and fsync (-e), `ranks` MPI ranks on this node (mpirun -np, or a singleton when ranks is 1);
- mdtest: `files_per_rank` files and directories per rank, created, stat'ed, read and removed (-u: a directory per
  rank), the same ranks;
- elbencho: `ranks` threads, each making a directory and writing, reading and deleting one file of `size_mib`.

Each output is read by probes/storage/io_tools.py; an output that cannot be read is an error naming the tool and the
line, with the output kept beside the artifact. A tool not installed on the node is not run, and the fact for it says
so; with none of them, the artifact is skipped with that reason. The tools step does not build them yet (none of
their sources is on PyPI or Debian): they run where the site installed them (`PATH`, or the tools step's prefix).

Not implemented yet: one IOR and one mdtest world across every node of a shared tier (through srun or mpirun, as
HPL-MxP starts its world), and elbencho's multi-host service mode. fio_sweep measures the tier's clients across
nodes; this probe's numbers are one node's, labelled scope=node.
"""

import os
import shutil

from probes.artifact import artifact_filename
from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.params import Param, Params
from probes.storage.io_tools import ToolOutputError, parse_elbencho, parse_ior, parse_mdtest

TOOLS = ("ior", "mdtest", "elbencho")
ACROSS_NODES = ("not implemented: one IOR and mdtest world across every node of the shared tier (srun or mpirun) "
                "and elbencho's multi-host mode are not built yet; fio_sweep measures this tier across nodes")

PARAMS = Params(
    tier=Param(dict, None, "the storage tier {name, path, shared}"),
    tools=Param(list, list(TOOLS), "which of ior, mdtest and elbencho to run where installed"),
    ranks=Param(int, 2, "MPI ranks of IOR and mdtest, threads of elbencho, on this node"),
    size_mib=Param(int, 64, "MiB each rank writes (IOR's block, elbencho's file)"),
    transfer_kib=Param(int, 1024, "KiB per I/O (IOR's transfer size, elbencho's block size)"),
    files_per_rank=Param(int, 200, "mdtest: files and directories each rank creates, stats, reads and removes"),
    timeout_s=Param(float, 600, "seconds each tool may run"),
    mpirun=Param(str, "mpirun", "the MPI launcher of IOR and mdtest on this node (a singleton when ranks is 1)"),
)


def _mpi_prefix(params):
    """mpirun -np <ranks> (as root it must be told so), or nothing for one rank or when there is no mpirun."""
    ranks = params["ranks"]
    if ranks <= 1 or not shutil.which(params["mpirun"]):
        return []
    argv = [params["mpirun"], "-np", str(ranks), "--oversubscribe"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        argv.append("--allow-run-as-root")
    return argv


def command(tool, exe, params, work):
    """The argv of one tool (exe: its path), its data under work/<tool>/."""
    size, xfer = "%dm" % params["size_mib"], "%dk" % params["transfer_kib"]
    if tool == "ior":
        return _mpi_prefix(params) + [exe, "-a", "POSIX", "-F", "-w", "-r", "-C", "-e", "-i", "1", "-t", xfer,
                                      "-b", size, "-o", os.path.join(work, "ior", "testfile")]
    if tool == "mdtest":
        return _mpi_prefix(params) + [exe, "-n", str(params["files_per_rank"]), "-i", "1", "-u",
                                      "-d", os.path.join(work, "mdtest")]
    # one directory per thread with one file each: made, written, read, deleted
    return [exe, "--mkdirs", "--write", "--read", "--delfiles", "--deldirs", "--threads", str(params["ranks"]),
            "--dirs", "1", "--files", "1", "--size", size, "--block", xfer, "--nolive", os.path.join(work, "elbencho")]


def record(art, tool, parsed):
    """The parsed output as results (scope=node) and facts."""
    if parsed.get("version"):
        art.facts["%s_version" % tool] = parsed["version"]
    if tool == "ior":
        for row in parsed["rows"]:
            labels = dict(tool="ior", operation=row["operation"], tasks=row["tasks"], api=row["api"], scope="node")
            art.add("ior_bw_mib_s", row["bw_max_mib"], "MiB/s", **labels)
            if row.get("ops_max") is not None:
                art.add("ior_ops_per_s", row["ops_max"], "ops/s", **labels)
    elif tool == "mdtest":
        for row in parsed["rows"]:
            if row["table"] == "rate" and row["mean"] is not None:
                art.add("mdtest_ops_per_s", row["mean"], "ops/s", tool="mdtest", operation=row["operation"],
                        tasks=parsed.get("tasks") or 0, scope="node")
    else:
        units = {"Throughput MiB/s": ("elbencho_bw_mib_s", "MiB/s"), "IOPS": ("elbencho_iops", "IOPS"),
                 "Files/s": ("elbencho_files_per_s", "files/s"), "Dirs/s": ("elbencho_dirs_per_s", "dirs/s")}
        for row in parsed["rows"]:
            if row["result"] in units and row.get("last") is not None:
                metric, unit = units[row["result"]]
                art.add(metric, row["last"], unit, tool="elbencho", operation=row["phase"].lower(), scope="node")
    for _, line in parsed["warnings"][:5]:
        art.facts.setdefault("%s_warnings" % tool, []).append(line[:300])


def run(art, params, out_dir):
    tier = storage_tier.check_tier(params["tier"])
    wanted = [t for t in params["tools"] if t in TOOLS]
    exe = {t: shutil.which(t) for t in wanted}
    for tool in wanted:
        if not exe[tool]:
            art.facts[tool] = "not run: %s is not installed on this node (not on PATH nor in the tools step's prefix)" \
                % tool
    present = [t for t in wanted if exe[t]]
    art.facts.update(tier=tier["name"], tier_path=tier["path"], across_nodes=ACROSS_NODES)
    if not present:
        art.skip("none of %s is installed on this node: install them (the tools step does not build them yet)"
                 % ", ".join(wanted))
        return
    need = params["ranks"] * params["size_mib"] * 2**20
    short = storage_tier.check_space(tier["path"], need)
    if short:
        art.skip(short)
        return
    work = os.path.join(storage_tier.run_dir(tier["path"], art.run_id), "io_tools", art.host)
    failures = []
    base = os.path.splitext(artifact_filename(art.probe, art.variant))[0]
    try:
        for tool in present:
            argv = command(tool, exe[tool], params, work)
            os.makedirs(os.path.join(work, tool), exist_ok=True)
            res = run_cmd(argv, timeout=params["timeout_s"], cwd=work)
            raw = "%s.%s.txt" % (base, tool)
            with open(os.path.join(out_dir, raw), "w") as fh:
                fh.write("# %s\n%s%s" % (" ".join(str(a) for a in argv), res.stdout, res.stderr))
            art.raw.append(raw)
            if res.timed_out:
                failures.append("%s timed out after %g s" % (tool, params["timeout_s"]))
                art.facts[tool] = "error: timed out"
                continue
            try:
                parsed = {"ior": parse_ior, "mdtest": parse_mdtest, "elbencho": parse_elbencho}[tool](res.stdout)
            except ToolOutputError as exc:
                failures.append("%s (exit %s; output in %s)" % (exc, res.rc, raw))
                art.facts[tool] = "error: %s" % exc
                continue
            record(art, tool, parsed)
            art.facts[tool] = "ran: %s" % " ".join(str(a) for a in argv)
            if res.rc not in (0, None) or parsed["errors"]:
                why = parsed["errors"][0][1] if parsed["errors"] else "exit %s" % res.rc
                failures.append("%s: %s" % (tool, why[:300]))
    finally:
        storage_tier.remove_tree(work)
    if failures:
        art.error("; ".join(failures))
