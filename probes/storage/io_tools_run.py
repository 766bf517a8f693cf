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
so, with the tools step's reason where it has one (tools_build builds IOR with mdtest, and elbencho: tools_ior,
tools_elbencho, assess_sources); with none of them, the artifact is skipped with that reason. They run from `PATH`,
which holds the tools step's builds, or where the site installed them.

Then, on a shared tier of a run with several hosts, one IOR and one mdtest world across every node (the seed's
parallel filesystem under many clients): the nodes meet in the run's store when each has run alone, agree on the
launcher (probes/common/launch.py), and the first host starts IOR, then mdtest, through srun or mpirun, `ranks` per
node, in one directory of the tier that every node sees. Their results are in the first host's artifact, labelled
scope=cluster and with the node count; the launcher's output is kept (<artifact>.ior.n<nodes>.txt). torchrun and
direct cannot start an MPI program, a tool missing on a node (or at another path) leaves the world out, and a
node-local tier has nothing to share: the fact `across_nodes` says which.

elbencho runs across the nodes its own way (`elbencho --help-dist`): every node starts `elbencho --service
--foreground --port P` (in the foreground, so the probe owns it and no daemon outlives the run), the nodes tell each
other whether their service listens, and the first host runs the master, `elbencho --hosts addr:P,... <the same
options> DIR` (threads, dirs and files per service), in one directory of the tier, then `elbencho --hosts ...
--quit`. Each node then stops its service if it is still there. Its rows are scope=cluster with the node count, on
the first host; the fact `elbencho_across_nodes` says where it ran, or why not (a node without elbencho, a service
that did not start), and `elbencho_across` the master's command line or its error. The ports: in the block of the run's
store (its first port, `port` when fixed), the services on the next ones, one a node (its rank), so that nodes
sharing an address (containers, tests) do not collide. The service dies with the probe (procs.Children), and is
stopped after the master's --quit, or at once where no master ran. elbencho's --hosts has no form for an IPv6
address: such a run says so.
"""

import os
import shutil
import subprocess

from probes.artifact import artifact_filename
from probes.common import launch, procs
from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.common.netif import wait_listening
from probes.common.ports import BLOCK
from probes.common.rendezvous import StoreError
from probes.common.tools import not_installed
from probes.params import Param, Params
from probes.storage.io_tools import ToolOutputError, parse_elbencho, parse_ior, parse_mdtest

TOOLS = ("ior", "mdtest", "elbencho")
# The tools that start as one MPI world across the nodes (elbencho has its own service mode).
WORLD_TOOLS = ("ior", "mdtest")
# The tools step's build that brings each (probes/tools/tools_build.py): mdtest comes with IOR.
BUILD = {"ior": "ior", "mdtest": "ior", "elbencho": "elbencho"}

PARAMS = Params(
    peers=True,
    tier=Param(dict, None, "the storage tier {name, path, shared}"),
    tools=Param(list, list(TOOLS), "which of ior, mdtest and elbencho to run where installed"),
    ranks=Param(int, 2, "MPI ranks of IOR and mdtest, threads of elbencho, on this node"),
    size_mib=Param(int, 64, "MiB each rank writes (IOR's block, elbencho's file)"),
    transfer_kib=Param(int, 1024, "KiB per I/O (IOR's transfer size, elbencho's block size)"),
    files_per_rank=Param(int, 200, "mdtest: files and directories each rank creates, stats, reads and removes"),
    timeout_s=Param(float, 600, "seconds each tool may run"),
    mpirun=Param(str, "mpirun", "the MPI launcher of IOR and mdtest on this node (a singleton when ranks is 1)"),
    across_nodes=Param(bool, True, "on a shared tier, after each node alone, one IOR and one mdtest world across "
                                   "every host of the run"),
    rdzv_timeout=Param(float, 120, "seconds to wait for every host in the run's store (plus the tools' time)"),
    port=Param(int, 0, "port of the run's store on the first host (0: derived from the run id and variant)"),
    service_start_s=Param(float, 30, "seconds an elbencho service may take to listen"),
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


def command(tool, exe, params, work, mpi=None, direct=False):
    """The argv of one tool (exe: its path), its data under work/<tool>/; mpi: the launcher's argv that starts IOR
    and mdtest across the nodes (default: this node's mpirun -np ranks, the node alone).

    direct (where O_DIRECT works on the tier): IOR on one node and elbencho read what they wrote with O_DIRECT (IOR
    -B, elbencho --direct). Alone on one node, IOR's -C shifts the reading ranks by a node's worth of ranks, that is
    by none, and elbencho reads back its own file: buffered, both reads would come from this node's page cache.
    Across nodes, -C makes each rank read a file another node wrote, and mdtest's -N a node's worth of ranks makes
    each rank stat and read another node's files (mdtest's default stride, 0, is its own: the client's cache)."""
    size, xfer = "%dm" % params["size_mib"], "%dk" % params["transfer_kib"]
    alone = mpi is None
    mpi = _mpi_prefix(params) if mpi is None else list(mpi)
    if tool == "ior":
        return mpi + [exe, "-a", "POSIX", "-F", "-w", "-r", "-C", "-e", "-i", "1", "-t", xfer, "-b", size] + (
            ["-B"] if direct and alone else []) + ["-o", os.path.join(work, "ior", "testfile")]
    if tool == "mdtest":
        return mpi + [exe, "-n", str(params["files_per_rank"]), "-i", "1", "-u"] + (
            [] if alone else ["-N", str(params["ranks"])]) + ["-d", os.path.join(work, "mdtest")]
    # one directory per thread with one file each: made, written, read, deleted
    return [exe, "--mkdirs", "--write", "--read", "--delfiles", "--deldirs", "--threads", str(params["ranks"]),
            "--dirs", "1", "--files", "1", "--size", size, "--block", xfer, "--nolive"] + (
        ["--direct"] if direct else []) + [os.path.join(work, "elbencho")]


def io_mode(art, directory):
    """Whether the tools read with O_DIRECT in directory (tiers.direct_io_supported), said in the fact io_mode."""
    direct, why = storage_tier.direct_io_supported(directory)
    art.facts["io_mode"] = "O_DIRECT (IOR -B on one node, elbencho --direct)" if direct else (
        "buffered: %s; IOR's read on one node and elbencho's writes and reads measure the page cache (shown, not "
        "judged)" % why)
    return direct


def record(art, tool, parsed, scope=None, tasks=None):
    """The parsed output as results and facts; scope: the labels of where it ran (default one node, scope=node);
    tasks: elbencho's threads in all (its output does not say; IOR's and mdtest's do)."""
    scope = scope or {"scope": "node"}
    if parsed.get("version"):
        art.facts["%s_version" % tool] = parsed["version"]
    if tool == "ior":
        for row in parsed["rows"]:
            labels = dict(tool="ior", operation=row["operation"], tasks=row["tasks"], api=row["api"], **scope)
            art.add("ior_bw_mib_s", row["bw_max_mib"], "MiB/s", **labels)
            if row.get("ops_max") is not None:
                art.add("ior_ops_per_s", row["ops_max"], "ops/s", **labels)
    elif tool == "mdtest":
        for row in parsed["rows"]:
            if row["table"] == "rate" and row["mean"] is not None:
                art.add("mdtest_ops_per_s", row["mean"], "ops/s", tool="mdtest", operation=row["operation"],
                        tasks=parsed.get("tasks") or 0, **scope)
    else:
        units = {"Throughput MiB/s": ("elbencho_bw_mib_s", "MiB/s"), "IOPS": ("elbencho_iops", "IOPS"),
                 "Files/s": ("elbencho_files_per_s", "files/s"), "Dirs/s": ("elbencho_dirs_per_s", "dirs/s")}
        for row in parsed["rows"]:
            if row["result"] in units and row.get("last") is not None:
                metric, unit = units[row["result"]]
                art.add(metric, row["last"], unit, tool="elbencho", operation=row["phase"].lower(),
                        **dict(scope, **({"tasks": tasks} if tasks else {})))
    for _, line in parsed["warnings"][:5]:
        art.facts.setdefault("%s_warnings" % tool, []).append(line[:300])


def run_tool(art, tool, argv, res, out_dir, raw, scope=None, tasks=None, launcher=None):
    """One tool's run (res: its CmdResult) kept as raw and read into results; returns the failure, or None. A world
    across nodes (scope given) was launched through launch.run_launched (launcher: srun or mpirun), whose output
    starts with its command line; its failure names the rank and host the launcher saw fail first."""
    with open(os.path.join(out_dir, raw), "w") as fh:
        head = "" if scope is not None else "# %s\n" % " ".join(str(a) for a in argv)
        fh.write(head + res.stdout + res.stderr)
    art.raw.append(raw)
    key = tool if scope is None else "%s_across" % tool
    if res.timed_out:
        art.facts[key] = "error: timed out"
        return "%s timed out" % tool
    try:
        parsed = {"ior": parse_ior, "mdtest": parse_mdtest, "elbencho": parse_elbencho}[tool](res.stdout)
    except ToolOutputError as exc:
        art.facts[key] = "error: %s" % exc
        # a world that srun ended prints "srun: Force Terminated" where the summary was: the launcher says who failed
        who = launch.failure_text(launcher, res.stdout + res.stderr) if launcher else ""
        return "%s (exit %s%s; output in %s)" % (exc, res.rc, "; %s" % who if who else "", raw)
    record(art, tool, parsed, scope, tasks)
    art.facts[key] = "ran: %s" % " ".join(str(a) for a in argv)
    if res.rc not in (0, None) or parsed["errors"]:
        return "%s: %s" % (tool, (parsed["errors"][0][1] if parsed["errors"] else "exit %s" % res.rc)[:300])
    return None


def run(art, params, out_dir):
    tier = storage_tier.check_tier(params["tier"])
    wanted = [t for t in params["tools"] if t in TOOLS]
    exe = {t: shutil.which(t) for t in wanted}
    for tool in wanted:
        if not exe[tool]:
            art.facts[tool] = not_installed(params, BUILD[tool], "not run: %s is not installed on this node (not on "
                                                                 "PATH nor in the tools step's prefix)" % tool)
    present = [t for t in wanted if exe[t]]
    hosts = list(params["hosts"] or [art.host])
    art.facts.update(tier=tier["name"], tier_path=tier["path"])
    base = os.path.splitext(artifact_filename(art.probe, art.variant))[0]
    # the launcher's hostfile and logs: this node's own (the world's data goes on the shared tier)
    work = os.path.join(out_dir, ".%s-work" % base)
    failures, mesh, short = [], None, None
    why_not = _why_no_world(params, tier, hosts, wanted)
    if why_not:
        art.facts["across_nodes"] = "not run: %s" % why_not
        if "elbencho" in wanted:
            art.facts["elbencho_across_nodes"] = "not run: %s" % why_not
    else:
        # every host meets the others, one without the tools too: the first host then says who had none
        try:
            # no world without a tool on every node: then auto's mpirun smoke test across them is not run either
            mesh, agreed = launch.meet_for_mpi_world(
                art, params, "io_tools_run", work,
                {"io_tools": {t: exe[t] for t in WORLD_TOOLS if t in exe}},
                world_needed=lambda facts: bool(world_tools(params, facts, hosts)[0]))
        except StoreError as exc:
            why = "the hosts did not meet in the run's store: %s" % exc
            art.facts["across_nodes"] = "not run: %s" % why
            if "elbencho" in wanted:
                art.facts["elbencho_across_nodes"] = "not run: %s" % why
            failures.append("across nodes: %s" % why)
    try:
        if present:
            short = storage_tier.check_space(tier["path"], params["ranks"] * params["size_mib"] * 2**20)
            if not short:
                try:
                    failures += _alone(art, params, out_dir, tier, exe, present, base, mesh is None)
                except Exception as exc:  # noqa: BLE001 - a host that met the others must still reach the barriers
                    failures.append("alone: %s: %s" % (type(exc).__name__, exc))
        if mesh is not None:
            failures += _across_nodes(art, params, out_dir, work, tier, base, mesh, *agreed)
            if "elbencho" in wanted:
                failures += _elbencho_across(art, params, out_dir, work, tier, base, mesh, exe.get("elbencho"))
            _remove_empty_parents(tier, art.run_id)
    finally:
        if mesh is not None:
            mesh.close()
        shutil.rmtree(work, ignore_errors=True)
    if not present:
        builds = sorted({BUILD[t] for t in wanted})
        art.skip("none of %s is installed on this node: install them, or let the tools step build them (%s, "
                 "assess_sources)%s" % (", ".join(wanted), ", ".join("tools_%s" % b for b in builds),
                                        _build_reasons(params, builds)))
    elif short:
        art.skip(short)
    elif failures:
        art.error("; ".join(failures))


def _build_reasons(params, builds):
    """The tools step's reason for each build that did not give the tools, as "; the tools step: ior: ..."."""
    why = ((params.get("tools_step") or {}).get("missing") or {})
    told = ["%s: %s" % (b, why[b]) for b in builds if why.get(b)]
    return "; the tools step: %s" % "; ".join(told) if told else ""


def _alone(art, params, out_dir, tier, exe, present, base, parents):
    """Each installed tool on this node, in a directory of its own host on the tier; returns the failures.
    parents: remove the emptied parents too (the nodes did not meet; those that met remove them once every node is
    done, so that one node's cleanup never takes away a directory another is making its own in)."""
    top = storage_tier.run_dir(tier["path"], art.run_id)
    work = os.path.join(top, "io_tools", art.host)
    failures = []
    try:
        os.makedirs(work, exist_ok=True)
        direct = io_mode(art, work)
        for tool in present:
            argv = command(tool, exe[tool], params, work, direct=direct)
            os.makedirs(os.path.join(work, tool), exist_ok=True)
            res = run_cmd(argv, timeout=params["timeout_s"], cwd=work)
            why = run_tool(art, tool, argv, res, out_dir, "%s.%s.txt" % (base, tool),
                           tasks=params["ranks"] if tool == "elbencho" else None)
            if why:
                failures.append(why if not res.timed_out else "%s after %g s" % (why, params["timeout_s"]))
    finally:
        storage_tier.remove_tree(work, stop_at=top if parents else None)
    return failures


def _remove_empty_parents(tier, run_id):
    """The run's io_tools directory and its directory on the tier, where empty (another host's part stays)."""
    top = storage_tier.run_dir(tier["path"], run_id)
    for path in (os.path.join(top, "io_tools"), top):
        try:
            os.rmdir(path)
        except OSError:
            break


def _why_no_world(params, tier, hosts, wanted):
    """Why no IOR and mdtest world starts across the nodes on this tier, or None."""
    if not params["across_nodes"]:
        return "across_nodes is off"
    if len(hosts) < 2:
        return "the run has one host"
    if not tier.get("shared"):
        return ("tier %s is not shared (each node has its own): the per-node runs measure it, fio_sweep its "
                "clients across nodes" % tier["name"])
    if not wanted:
        return "none of %s is among the tools asked for" % ", ".join(TOOLS)
    return None


def _across_nodes(art, params, out_dir, work, tier, base, mesh, launcher, why_launch, facts):
    """When every node has run alone (the tier is quiet again), the first host starts the world; the others wait
    until it is done. Returns the failures (the first host's)."""
    tools_s = params["timeout_s"] * len(WORLD_TOOLS)
    try:
        missing = mesh.barrier("io-tools-alone", params["rdzv_timeout"] + params["timeout_s"] * len(TOOLS) + 60,
                               abort_on_lost=True)
        failures = []
        if mesh.rank == 0:
            art.facts.update(launcher=launcher, launcher_asked=params["launcher"], launcher_why_not=why_launch or None)
            if missing:
                why = "%s did not finish alone" % ", ".join(missing)
                art.facts["across_nodes"] = "not run: %s" % why
                failures = ["across nodes: %s" % why]
            else:
                failures = _world(art, params, out_dir, work, tier, base, facts, launcher, why_launch,
                                  mesh.hosts, mesh.addresses)
        missing = mesh.barrier("io-tools-done", params["rdzv_timeout"] + tools_s + 120, abort_on_lost=True)
        if missing:
            art.facts["store_errors"] = "%s did not arrive after the world across nodes" % ", ".join(missing)
        return failures
    except StoreError as exc:
        art.facts["store_errors"] = "the run's store failed during the world across nodes: %s" % exc
        return ["across nodes: the run's store failed: %s" % exc]


def world_tools(params, facts, hosts):
    """({tool: its path on every node} that can start as one world, {tool: why not})."""
    ok, why = {}, {}
    for tool in (t for t in WORLD_TOOLS if t in params["tools"]):
        paths = {h: f["io_tools"].get(tool) for h, f in zip(hosts, facts)}
        lacking = [h for h, path in paths.items() if not path]
        if lacking:
            why[tool] = "%s is not installed on %s" % (tool, ", ".join(lacking))
        elif len(set(paths.values())) > 1:
            why[tool] = "%s is at different paths (%s): one command line starts every rank" % (
                tool, ", ".join("%s %s" % kv for kv in paths.items()))
        else:
            ok[tool] = next(iter(paths.values()))
    return ok, why


def _world(art, params, out_dir, work, tier, base, facts, launcher, why_launch, hosts, addresses):
    """On the first host: IOR, then mdtest, across every node through srun or mpirun, or why not (the facts)."""
    nodes = len(facts)
    if not any(t in params["tools"] for t in WORLD_TOOLS):
        art.facts["across_nodes"] = "not run: neither ior nor mdtest is among the tools asked for"
        return []
    ok, why_not = world_tools(params, facts, hosts)
    for tool, why in why_not.items():
        art.facts["%s_across" % tool] = "not run: %s" % why
    if not ok:
        art.facts["across_nodes"] = "not run: %s" % "; ".join(why_not.values())
        return []
    if launcher not in ("srun", "mpirun"):
        art.facts["across_nodes"] = "not run: IOR and mdtest start across nodes only through MPI (srun or mpirun); " \
            "the launcher is %s%s" % (launcher, " (%s)" % "; ".join("%s: %s" % kv for kv in sorted(why_launch.items()))
                                      if why_launch else "")
        return []
    if launcher in why_launch:
        art.facts["across_nodes"] = "not run: launcher %s cannot be used: %s" % (launcher, why_launch[launcher])
        return []
    short = storage_tier.check_space(tier["path"], nodes * params["ranks"] * params["size_mib"] * 2**20)
    if short:
        art.facts["across_nodes"] = "not run: %s" % short
        return []
    world = [{"slurm": f["slurm"], "address": addresses[i]} for i, f in enumerate(facts)]
    job = "cmxa-%s-io" % art.run_id[-12:]
    mpi, hostfile = launch.mpi_world_prefix(
        launcher, world, params["ranks"], dict(os.environ),
        params["srun_args"] if launcher == "srun" else params["mpirun_args"], work, job, facts[0]["mpirun"],
        params["timeout_s"], bind="none")
    art.facts.update(across_nodes="run: %d nodes, %d ranks through %s" % (nodes, nodes * params["ranks"], launcher),
                     across_launch=" ".join(mpi), across_hostfile=hostfile)
    top = storage_tier.run_dir(tier["path"], art.run_id)
    data = os.path.join(top, "io_tools", "world")
    failures = []
    try:
        for tool, path in ok.items():
            os.makedirs(os.path.join(data, tool), exist_ok=True)
            argv = command(tool, path, params, data, mpi=mpi)
            # the job name is the one srun was given: a timeout cancels exactly this step
            res = launch.run_launched(launcher, argv, dict(os.environ), os.path.join(work, "launch.%s.log" % tool),
                                      job, params["timeout_s"])
            why = run_tool(art, tool, argv, res, out_dir, "%s.%s.n%d.txt" % (base, tool, nodes),
                           scope={"scope": "cluster", "nodes": nodes}, launcher=launcher)
            if why:
                failures.append("across %d nodes: %s" % (nodes, why))
    finally:
        storage_tier.remove_tree(data, stop_at=top)
    return failures


def _elbencho_across(art, params, out_dir, work, tier, base, mesh, exe):
    """elbencho's service mode across every node (module docstring): every node calls it after the IOR world, with
    one allgather before the master and one after it, whatever fails on the way. Returns the failures (the first
    host's)."""
    # inside the block of the run's store (ports.py): the store at its first port, the services after it
    port = mesh.store.port + 1 + mesh.rank % (BLOCK - 1)
    log = os.path.join(work, "elbencho-service.log")
    state, failures, service, quit_sent = {"port": port}, [], None, False
    with procs.Children() as children:  # the service dies with the probe, however the probe ends
        try:
            if not exe:
                state["why"] = "elbencho is not installed"
            else:
                try:
                    os.makedirs(work, exist_ok=True)
                    service = children.start([exe, "--service", "--foreground", "--port", str(port)],
                                             log_path=log)
                    up = wait_listening("127.0.0.1", port, service, params["service_start_s"])
                    if not up or service.poll() is not None:
                        state["fault"] = True
                        state["why"] = "its service did not listen on port %d within %g s (%s): %s" % (
                            port, params["service_start_s"], "exit %s" % service.poll()
                            if service.poll() is not None else "still running",
                            " | ".join(procs.tail(log, lines=5).splitlines()) or "no output")
                except OSError as exc:
                    state.update(fault=True, why="its service could not start: %s" % exc)
            states = mesh.allgather(state, params["rdzv_timeout"] + params["service_start_s"])
            if mesh.rank == 0:
                try:
                    failures, quit_sent = _elbencho_master(art, params, out_dir, work, tier, base, exe, mesh, states)
                except Exception as exc:  # noqa: BLE001 - the others wait at the next allgather
                    art.facts["elbencho_across_nodes"] = "error: %s: %s" % (type(exc).__name__, exc)
                    failures = ["elbencho across nodes: %s: %s" % (type(exc).__name__, exc)]
            told = mesh.allgather({"quit_sent": quit_sent},
                                  params["rdzv_timeout"] + params["timeout_s"] + 120)
            quit_sent = bool(told[0].get("quit_sent"))
        except StoreError as exc:
            art.facts["store_errors"] = "the run's store failed during elbencho across nodes: %s" % exc
            art.facts.setdefault("elbencho_across_nodes", "not run: the run's store failed: %s" % exc)
            failures.append("elbencho across nodes: the run's store failed: %s" % exc)
        if service is not None:
            if quit_sent:
                try:
                    service.wait(timeout=10)  # the master's --quit ends it
                except subprocess.TimeoutExpired:
                    art.facts["elbencho_service"] = "still running 10 s after the master's --quit: stopped"
            else:
                art.facts["elbencho_service"] = "stopped: no master ran across the services"
    return failures


def _elbencho_hosts(mesh, states):
    """elbencho's --hosts list (host:port,...), or why it cannot be written: its parser reads brackets as host
    ranges (node[1-4]) and the first colon as the port's, so an IPv6 literal has no form there."""
    six = [a for a in mesh.addresses if ":" in a]
    if six:
        return None, "elbencho's --hosts takes no IPv6 address (%s): give the nodes names or IPv4 addresses" % (
            ", ".join(six))
    return ",".join("%s:%d" % (a, s["port"]) for a, s in zip(mesh.addresses, states)), None


def _elbencho_master(art, params, out_dir, work, tier, base, exe, mesh, states):
    """On the first host: the master across every node's service, then --quit; or why not. Returns (failures,
    whether --quit was sent)."""
    nodes = len(states)
    why = ["%s: %s" % (h, s["why"]) for h, s in zip(mesh.hosts, states) if s.get("why")]
    # a service that did not start on a node that has elbencho is a fault, not a test left out
    faults = ["%s: %s" % (h, s["why"]) for h, s in zip(mesh.hosts, states) if s.get("fault")]
    services, no_list = _elbencho_hosts(mesh, states)
    if why or no_list:
        art.facts["elbencho_across_nodes"] = "not run: %s" % ("; ".join(why) or no_list)
        return (["elbencho across nodes: %s" % "; ".join(faults)] if faults else []), False
    short = storage_tier.check_space(tier["path"], nodes * params["ranks"] * params["size_mib"] * 2**20)
    if short:
        art.facts["elbencho_across_nodes"] = "not run: %s" % short
        return [], False
    top = storage_tier.run_dir(tier["path"], art.run_id)
    data = os.path.join(top, "io_tools", "elbencho-world")
    art.facts["elbencho_across_nodes"] = "run: %d nodes through elbencho's services (%s)" % (nodes, services)
    try:
        os.makedirs(os.path.join(data, "elbencho"), exist_ok=True)
        cmd = command("elbencho", exe, params, data, direct=storage_tier.direct_io_supported(data)[0])
        argv = [cmd[0], "--hosts", services] + cmd[1:]
        res = run_cmd(argv, timeout=params["timeout_s"], cwd=work)
        # elbencho_across: what ran, or the error (as ior_across, mdtest_across)
        why = run_tool(art, "elbencho", argv, res, out_dir, "%s.elbencho.n%d.txt" % (base, nodes),
                       scope={"scope": "cluster", "nodes": nodes}, tasks=nodes * params["ranks"])
        return (["elbencho across %d nodes: %s" % (nodes, why)] if why else []), True
    finally:
        quit_res = run_cmd([exe, "--hosts", services, "--quit"], timeout=60, cwd=work)
        if quit_res.rc != 0:
            art.facts["elbencho_quit"] = "exit %s: %s" % (quit_res.rc, (quit_res.stdout + quit_res.stderr)[-300:])
        storage_tier.remove_tree(data, stop_at=top)
