"""Worlds of torch ranks across the nodes, world size doubling until every node is used: the mechanics the
multi-node torch probes share (the collectives sweep, the training jobs). What a rank does is the world's job
(settings `entry`, run by probes/common/rank.py); what a world leaves on this node is recorded by the probe's own
function (`drive(..., record)`).

Every node runs the probe at the same time (the play starts it on all hosts at once) with the same host list and
its own index as `rank`. For each world size of the plan (1 node, 2, 4, … all nodes):

- 1 node: every node runs its own single-node world at once (nothing crosses the network, so they do not disturb
  each other, and each node gets its own measurement);
- w > 1 nodes: the first w hosts of the order form the world; the others wait. A separate rendezvous per world
  size: MASTER_ADDR is the first host's address, the port is `port + 1 + index of the world size in the plan`.

Worlds start through the cluster's launcher (srun, mpirun, torchrun: probes/common/launch.py, `LaunchedWorld`) or
through the probe's own worker pool (`direct`: one worker process per GPU, one per node on CPU, which imports torch
once for every world size: `Pool`, `World`). gloo on CPU, nccl on GPUs. GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME are
set to the interface that carries the host's inventory address unless the params' env sets them.

Every launch has a timeout and a stall timeout (no progress at all); workers also die with the probe
(probes/common/procs.py). A hang is reported as a hang with the ranks that were stuck and where; a crashed rank is
named with its exit status and host. Nodes agree on when to start the next world size, and keep each other's
progress, through a small store the first node serves (probes/common/rendezvous.py). Facts: `failures` (one entry
per failed world size, with its kind, message and log file), the launcher and why each other one was not taken.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from probes.artifact import artifact_filename
from probes.common import launch
from probes.common.netif import interface_for
from probes.common.ports import BLOCK, port_param
from probes.common.procs import Children, kill_marked, package_root, tail
from probes.common.readers import read_text
from probes.common.rendezvous import Mesh, StoreError
from probes.params import Param

# The params of every probe that runs worlds (with peers=True): where they meet, which node counts, how long a world
# may take, how many ranks per node, their environment, and a test fault. A probe adds its own job's params.
WORLD_PARAMS = {
    "port": Param(int, 0, "first port of the run's block on the first host (0: derived from the run id and variant)"),
    "token": Param(str, "", "shared secret of the rendezvous (default: the run id)"),
    "world_sizes": Param(list, None, "node counts to run (default: 1, then doubling up to all hosts)"),
    "launch_timeout": Param(float, 300, "seconds for one world size's processes to start and finish"),
    "stall_timeout": Param(float, 90, "seconds without progress (no step) before the world counts as hung"),
    "rdzv_timeout": Param(float, 90, "seconds to wait for every host at the rendezvous"),
    "procs_per_node": Param(int, 0, "processes per node (0: one per GPU, cpu_procs_per_node on the CPU backend)"),
    "cpu_procs_per_node": Param(int, 1, "processes per node on the CPU backend"),
    "fault": Param(dict, None, "a fault to inject, for tests of the fault handling"),
    "env": Param(dict, {}, "environment of the ranks (NCCL_*, GLOO_*)"),
}


def world_size_plan(n_hosts, requested=None):
    """Node counts to run, ascending. requested: an explicit list (values outside 1..n_hosts are dropped)."""
    n_hosts = int(n_hosts)
    if n_hosts < 1:
        return []
    if requested:
        return sorted({int(w) for w in requested if 1 <= int(w) <= n_hosts})
    plan = []
    size = 1
    while size < n_hosts:
        plan.append(size)
        size *= 2
    plan.append(n_hosts)
    return plan


def placement_order(n_hosts, racks=(), domains=()):
    """Host indices in the order worlds take them: the hosts of one NVLink domain, then of one rack, together
    (in the order each domain and rack first appears in the inventory), so that doubling the world fills a
    scale-up domain and a rack before it crosses to the next. Unknown ('') keeps inventory order."""
    racks, domains = list(racks or []), list(domains or [])

    def first_seen(values):
        seen = {}
        for i in range(n_hosts):
            value = values[i] if i < len(values) else ""
            seen.setdefault(value or ("", i), len(seen))
        return lambda i: seen[(values[i] if i < len(values) else "") or ("", i)]

    if not any(racks) and not any(domains):
        return list(range(n_hosts))
    dom, rack = first_seen(domains), first_seen(racks)
    return sorted(range(n_hosts), key=lambda i: (dom(i) if any(domains) else 0, rack(i), i))


def placement(hosts, members, racks=(), domains=()):
    """Which hosts one world uses (members: host indices), with their racks and NVLink domains as the inventory
    names them (None when it names none): what the artifact records, and the report judges the scope of."""
    racks, domains = list(racks or []), list(domains or [])
    return {"nodes": len(members), "hosts": [hosts[m] for m in members],
            "racks": [racks[m] if m < len(racks) else "" for m in members] if any(racks) else None,
            "nvlink_domains": [domains[m] if m < len(domains) else "" for m in members] if any(domains) else None}


def world_settings(params, entry, backend, ppn):
    """The settings every world needs (its job's entry, communicator, ranks per node, timeouts, test fault); a probe
    adds its job's own."""
    return {"entry": entry, "backend": backend, "ppn": ppn, "launch_timeout": params["launch_timeout"],
            "stall_timeout": params["stall_timeout"], "rdzv_timeout": params["rdzv_timeout"],
            "op_timeout": params["stall_timeout"], "fault": params["fault"] or None}


BOOT = ("import sys; sys.path.insert(0, %r); from probes.common.rank import exit_now, main; "
        "exit_now(main(sys.argv[1]))")
# A rank started by a launcher: the same command line on every node; argv[1] is the run's marker, by which each
# node's probe finds what is left of a world on its own host.
LAUNCHED = ("import sys; sys.path.insert(0, %r); from probes.common.rank import exit_now, launched_main; "
            "exit_now(launched_main())")


def mem_available_bytes():
    for line in (read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


class Node:
    """This node's view of the run: who it is, the store, and where files go."""

    def __init__(self, art, params, out_dir):
        self.art, self.params = art, params
        self.hosts = list(params["hosts"] or [art.host])
        self.addresses = [str(a) for a in (params["addresses"] or self.hosts)]
        if len(self.addresses) != len(self.hosts):
            raise ValueError("params: %d hosts but %d addresses" % (len(self.hosts), len(self.addresses)))
        self.rank = params["rank"]
        if not 0 <= self.rank < len(self.hosts):
            raise ValueError("params: rank %d is outside 0..%d" % (self.rank, len(self.hosts) - 1))
        self.n = len(self.hosts)
        # the store on port, world size i of the plan on port + 1 + i (a block holds 31 world sizes)
        self.port = port_param(params, "port", art.run_id, "%s/%s" % (art.probe, art.variant or ""), span=BLOCK)
        self.token = "%s:%s:%d" % (params["token"] or art.run_id, art.variant or "", self.port)
        base = os.path.splitext(artifact_filename(art.probe, art.variant))[0]
        self.base = base
        self.out_dir = out_dir
        self.work = os.path.join(out_dir, ".%s-work" % base)
        self.mesh = None
        self.store = None

    def store_address(self):
        if self.store is None:
            return None
        return {"host": self.store_host, "port": self.port, "token": self.token}

    def open_store(self, connect_timeout, always=False):
        """The run's store on the first host (also for one host alone when a launcher needs it: on loopback)."""
        if self.n > 1 or always:
            self.store_host = self.addresses[0] if self.n > 1 else "127.0.0.1"
            self.mesh = Mesh(self.hosts, [self.store_host] + self.addresses[1:], self.rank, self.port, self.token,
                             connect_timeout=connect_timeout)
            self.store = self.mesh.store

    def barrier(self, name, timeout):
        if self.store is None:
            return []
        try:
            return self.store.barrier(name, self.rank, self.n, timeout)
        except StoreError as exc:
            self.art.facts.setdefault("store_errors", []).append(str(exc))
            self.store = None
            return [r for r in range(self.n) if r != self.rank]

    def close(self):
        if self.mesh is not None:
            self.mesh.close()
        self.store = None


def free_local_port(first=None, count=BLOCK):
    """A free TCP port on loopback for a single-node world (each node picks its own): any free one, or with `first`
    the first free one of the run's own ports [first, first + count). A launched world needs the latter: its rank
    binds the port only once srun or mpirun has started it, and meanwhile the launcher binds ephemeral ports of its
    own (srun's and slurmstepd's I/O sockets), one of which took a port picked from the ephemeral range (EADDRINUSE
    in a clean-clone run); the run's ports lie below that range (probes/common/ports.py)."""
    for port in [0] if first is None else range(first, first + count):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return sock.getsockname()[1]
    raise OSError("no free loopback port among %d..%d" % (first, first + count - 1))


def _positions(records, ranks):
    """rank -> progress record, for the ranks of one world."""
    out = {}
    for key, value in (records or {}).items():
        try:
            out[int(key.rsplit("/", 1)[1])] = value
        except (ValueError, IndexError):
            continue
    return {r: out.get(r) for r in ranks}


def _died_by_itself(report):
    """A rank the launcher reports as ended by a signal that neither the launcher nor this probe sends when it stops
    a world (they send SIGTERM), and not as ended by the launcher: it died of its own (SIGKILL from outside, SIGSEGV,
    SIGABRT, ...)."""
    rc = report.get("rc")
    return not report.get("stopped") and isinstance(rc, int) and rc < 0 and rc != -signal.SIGTERM


def _ranks_text(ranks):
    return ",".join(str(r) for r in sorted(ranks))


def describe_failure(nodes, ranks, exits, positions, stall_s, launcher="direct"):
    """One sentence for a failed world: which ranks stopped where, on which host, and how (crash, hang, error).

    exits: rank -> {"status": ok|crash|hang|error|rendezvous|timeout|stopped, "rc", "error", "host"}; positions:
    rank -> last progress record or None. Hangs name the stuck ranks and the step they waited in; ranks the
    launcher ended because another one failed are named as such."""
    parts = []

    def status(r):
        return (exits.get(r) or {}).get("status")

    crashed = sorted(r for r in ranks if status(r) == "crash")
    hung = sorted(r for r in ranks if status(r) in ("hang", "timeout"))
    errored = sorted(r for r in ranks if status(r) in ("error", "rendezvous"))
    stopped = sorted(r for r in ranks if status(r) == "stopped")
    unknown = sorted(r for r in ranks if exits.get(r) is None)

    def who(r):
        host = (exits.get(r) or {}).get("host")
        return "rank %d%s" % (r, " on %s" % host if host else "")

    def where(r):
        pos = positions.get(r)
        if not pos:
            return "before the rendezvous"
        if pos.get("phase") == "rendezvous":
            return "in the rendezvous"
        return "in %s (step %s)" % (pos.get("label"), pos.get("step"))

    for r in crashed:
        rc = exits[r].get("rc")
        how = ("was killed by signal %d" % -rc if isinstance(rc, int) and rc < 0
               else "exited with status %s" % rc if rc is not None else "died")
        parts.append("%s %s %s" % (who(r), how, where(r)))
    if hung:
        groups = {}
        for r in hung:
            groups.setdefault(where(r), []).append(r)
        for place, members in sorted(groups.items(), key=lambda kv: kv[1]):
            hosts = sorted({(exits.get(r) or {}).get("host") for r in members} - {None})
            silent = [r for r in members if (exits.get(r) or {}).get("silent")]
            parts.append(("ranks %s%s stuck %s (no progress for %g s)" % (
                _ranks_text(members), " on %s" % ", ".join(hosts) if hosts else "", place, stall_s)
                if len(members) > 1 else "%s stuck %s (no progress for %g s)" % (who(members[0]), place, stall_s))
                + ("; %s never returned" % ", ".join(who(r) for r in silent)
                   if silent and len(silent) < len(members) else ""))
    if errored:
        # up to 800 characters: a job's error may quote the last lines of its log (the inference engine's)
        msgs = {}
        for r in errored:
            msgs.setdefault((exits[r].get("error") or "error")[:800], []).append(r)
        for msg, members in sorted(msgs.items(), key=lambda kv: kv[1]):
            parts.append("ranks %s: %s" % (_ranks_text(members), msg) if len(members) > 1
                         else "%s: %s" % (who(members[0]), msg))
    if stopped:
        parts.append("ranks %s were ended by %s after that" % (_ranks_text(stopped), launcher)
                     if len(stopped) > 1 else "rank %d was ended by %s after that" % (stopped[0], launcher))
    if unknown:
        parts.append("ranks %s did not report (their node's probe is gone)" % _ranks_text(unknown)
                     if len(unknown) > 1 else "rank %d did not report (its node's probe is gone)" % unknown[0])
    kind = "hang" if hung and not crashed else "crash" if crashed else "error"
    if errored and all((exits[r] or {}).get("status") == "rendezvous" for r in errored) and not (crashed or hung):
        kind = "rendezvous"
    return kind, "%s at %d node%s: %s" % (kind, nodes, "s" if nodes > 1 else "", "; ".join(parts) or "no detail")


class Pool:
    """This node's worker processes, one per local rank. A worker imports torch once and runs the worlds it is
    sent one after another; after a failed world the workers are ended and the next world starts fresh ones."""

    def __init__(self, node, ppn, settings, env, children):
        self.node, self.ppn, self.settings, self.env, self.children = node, ppn, settings, env, children
        self.procs = []

    def ensure(self):
        if self.procs and all(p.poll() is None for p in self.procs):
            return self.procs
        self.stop()
        base = os.path.join(self.node.work, "worker.json")
        with open(base, "w") as fh:
            json.dump(self.settings, fh)
        log = os.path.join(self.node.out_dir, "%s.workers.log" % self.node.base)
        argv = [sys.executable, "-c", BOOT % package_root(), base]
        self.procs = [self.children.start(argv, env=self.env, log_path=log, stdin=subprocess.PIPE)
                      for _ in range(self.ppn)]
        return self.procs

    def send(self, commands):
        for proc, cmd in zip(self.procs, commands):
            try:
                proc.stdin.write((json.dumps(cmd) + "\n").encode("utf-8"))
                proc.stdin.flush()
            except OSError:
                pass  # it died: watch() sees the exit

    def stop(self):
        for proc in self.procs:
            self.children.stop(proc)
        self.procs = []

    def close(self, timeout=15.0):
        """End of the run: close the workers' stdin so they exit on their own, then stop what is left."""
        for proc in self.procs:
            try:
                proc.stdin.close()
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.stop()


class World:
    """One world size on this node: give the local ranks their part, watch them, collect what they measured."""

    def __init__(self, node, index, members, ppn, settings):
        self.node, self.index, self.nodes, self.ppn = node, index, len(members), ppn
        self.settings = settings
        self.key = "w%d" % index
        self.log_name = "%s.n%d.log" % (node.base, self.nodes)
        if self.nodes == 1:
            self.master, self.node_index = "127.0.0.1", 0
        else:
            # a node outside this world keeps no ranks of it (it only waits at the barrier)
            self.master = node.addresses[members[0]]
            self.node_index = members.index(node.rank) if node.rank in members else 0
        nodes = self.nodes
        # A single-node world never leaves the node: a free loopback port of its own, so nodes sharing a machine
        # (or a port range) never meet in the wrong world.
        self.port = free_local_port() if nodes == 1 else node.port + 1 + index
        self.world = nodes * ppn
        self.ranks = list(range(self.node_index * ppn, (self.node_index + 1) * ppn))
        self.files = {}

    def commands(self):
        s = self.settings
        out = []
        for local in range(self.ppn):
            rank = self.node_index * self.ppn + local
            files = {k: os.path.join(self.node.work, "%s.r%d.%s" % (self.key, rank, k)) for k in ("results",
                                                                                                 "progress")}
            for path in files.values():
                if os.path.exists(path):
                    os.unlink(path)
            self.files[rank] = files
            out.append({"rank": rank, "world": self.world, "local_rank": local, "nodes": self.nodes,
                        "master_addr": self.master, "master_port": self.port, "results": files["results"],
                        "progress": files["progress"], "key": self.key,
                        "log": os.path.join(self.node.out_dir, self.log_name),
                        "device": ("cuda:%d" % local) if s["backend"] == "nccl" else "cpu",
                        "store": self.node.store_address() if self.nodes > 1 else None})
        return out

    def _progress(self):
        """(size of the progress files together, every local rank past its rendezvous, every one finished,
        some failed)."""
        mark, running, done, failed = 0, True, True, False
        for files in self.files.values():
            try:
                with open(files["progress"], "rb") as fh:
                    fh.seek(0, os.SEEK_END)
                    size = fh.tell()
                    fh.seek(max(0, size - 512))
                    last = fh.read().decode("utf-8", "replace").strip().splitlines()[-1:]
            except OSError:
                size, last = 0, []
            mark += size
            try:
                phase = json.loads(last[0]).get("phase") if last else "start"
            except ValueError:
                phase = "start"
            running = running and phase not in ("start", "rendezvous")
            done = done and phase in ("done", "failed")
            failed = failed or phase == "failed"
        return mark, running, done, failed

    def run(self, pool):
        """Run this world on the pool's workers. Returns rank -> exit record {"status", "rc", "error"}.

        Until every local rank is past its rendezvous the limit is the rendezvous timeout (plus a minute to import
        torch); after that, no progress for stall_timeout seconds is a hang; the whole launch has launch_timeout."""
        s = self.settings
        procs = pool.ensure()
        pool.send(self.commands())
        start = time.monotonic()
        deadline = start + float(s["launch_timeout"])
        stall = float(s["stall_timeout"])
        startup = float(s["rdzv_timeout"]) + 60
        mark, changed = 0, start
        first_exit = None
        why = None
        while True:
            new, running, done, failed = self._progress()
            if done:
                break
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if new != mark:
                mark, changed = new, now
            if any(c is not None for c in codes):
                first_exit = first_exit or now
                if all(c is not None for c in codes) or now - first_exit > 10:
                    # a local rank died; the others had a moment to fail on their own
                    why = "error"
                    break
            if now > deadline:
                why = "timeout"
                break
            if (running and now - changed > stall) or (not running and now - start > startup):
                why = "hang"
                break
            time.sleep(0.1)
        _, _, _, failed = self._progress()
        if why or failed:
            pool.stop()  # a process group that failed is never reused
        exits = {}
        host = self.node.hosts[self.node.rank]
        for rank, proc in zip(self.ranks, procs):
            errors = [r for r in self.records(rank) if r.get("type") == "error"]
            last = _last_progress(self, rank) or {}
            rc = proc.returncode
            if last.get("phase") == "done":
                exits[rank] = {"status": "ok", "rc": 0}
            elif errors:
                err = errors[-1]
                exits[rank] = {"status": err.get("kind", "error"), "rc": rc, "error": err.get("error")}
            elif why in ("hang", "timeout") and (rc is None or rc < 0):
                exits[rank] = {"status": why, "rc": rc}
            else:
                exits[rank] = {"status": "crash", "rc": rc}
            exits[rank]["host"] = host  # a failure names the host as well as the rank
        return exits

    def records(self, rank):
        out = []
        path = self.files.get(rank, {}).get("results")
        for line in (read_text(path) or "").splitlines() if path else []:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out


PHASES = {"start": 0, "rendezvous": 1, "run": 2, "done": 3, "failed": 3}


class LaunchedWorld:
    """One world size started by srun, mpirun or torchrun (probes/common/launch.py) instead of our own pool.

    Every member node publishes its settings (work directory, log, socket interface) in the run's store under
    its host name; the launching node (the world's first host for srun and mpirun, every member for torchrun's
    agents) starts the launcher and watches every rank's progress in the store: no progress for stall_timeout is
    a hang, the launch has launch_timeout, and a failed rank ends the launcher. What each rank measured lands in
    its own node's work directory, where that node's probe records it."""

    def __init__(self, node, index, members, ppn, settings, ctx):
        self.node, self.index, self.members, self.ppn = node, index, members, ppn
        self.nodes = len(members)
        self.settings, self.ctx = settings, ctx
        self.launcher = ctx["launcher"]
        # one-node worlds run on every node at once: each needs keys of its own in the shared store
        self.key = "w%d" % index if self.nodes > 1 else "w%d.%d" % (index, node.rank)
        self.log_name = "%s.n%d.log" % (node.base, self.nodes)
        self.launcher_log = "%s.n%d.%s.log" % (node.base, self.nodes, self.launcher)
        self.world = self.nodes * ppn
        self.mark = "clustermax-assess-launch=%s/%s/%s" % (node.token.split(":")[0], node.base, self.key)
        self.files = {}
        self.ranks = []
        self.report = None
        self.slurm_jobs = []

    @property
    def launches(self):
        return self.launcher == "torchrun" or self.nodes == 1 or self.node.rank == self.members[0]

    def publish(self):
        n = self.node
        settings = {"work": n.work, "log": os.path.join(n.out_dir, self.log_name), "env": self.ctx["node_env"],
                    "address": "127.0.0.1" if self.nodes == 1 else n.addresses[n.rank]}
        n.store.set("%s/node/%s" % (self.key, self.ctx["hostname"]), settings)

    def command(self):
        return [sys.executable, "-c", LAUNCHED % package_root(), self.mark]

    def argv(self, port, env):
        n, ctx = self.node, self.ctx
        if self.launcher == "srun":
            names = [ctx["facts"][m]["hostname"] for m in self.members]
            return launch.srun_argv(names, self.ppn, self.command(), self.job_name, mpi="none",
                                    gpus_per_task=1 if self.settings["backend"] == "nccl" else 0,
                                    jobid=launch.slurm_job_id(), time_min=float(self.settings["launch_timeout"]) / 60
                                    + 2, extra=ctx["srun_args"])
        if self.launcher == "mpirun":
            addresses = ["localhost"] if self.nodes == 1 else [n.addresses[m] for m in self.members]
            hostfile = launch.write_hostfile(os.path.join(n.work, "%s.hostfile" % self.key), addresses, self.ppn)
            return launch.mpirun_argv(ctx["facts"][n.rank]["mpirun"], self.world, self.ppn, hostfile,
                                      self.command(), launch.forwarded_env(env), as_root=os.geteuid() == 0,
                                      extra=ctx["mpirun_args"])
        endpoint = ("127.0.0.1:%d" % free_local_port() if self.nodes == 1
                    else "%s:%d" % (n.addresses[self.members[0]], n.port + 16 + self.index))
        return launch.torchrun_argv(sys.executable, self.nodes, self.ppn, self.members.index(n.rank)
                                    if self.nodes > 1 else 0, endpoint, "%s-%s" % (self.job_name, self.key),
                                    self.nodes == 1 or n.rank == self.members[0], self.command())

    @property
    def job_name(self):
        return "cmxa-%s-%s" % (self.node.token.split(":")[0][-12:], self.key)

    def _state(self):
        store = self.node.store
        return store.keys("%s/p/" % self.key), store.keys("%s/x/" % self.key)

    def run(self):
        """Start and watch the launcher (when this node launches); publishes this node's launcher report."""
        if not self.launches:
            return
        s, n = self.settings, self.node
        port = free_local_port(n.port + 1 + self.index, BLOCK - 1 - self.index) if self.nodes == 1 else \
            n.port + 1 + self.index
        env = dict(self.ctx["env"])
        env["CMXA_LAUNCH"] = json.dumps({"key": self.key, "store": n.store_address(), "settings": s,
                                         "nodes": self.nodes, "world_port": port,
                                         "rdzv_timeout": s["rdzv_timeout"]})
        argv = self.argv(port, env)
        log = os.path.join(n.out_dir, self.launcher_log)
        with open(log, "a") as fh:
            fh.write("# %s\n" % " ".join(argv))
        started = launch.Launch(self.launcher, argv, env, log, job_name=self.job_name)
        try:
            why = self._watch(started)
            deadline = time.monotonic() + 15
            while not why and started.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)  # every rank reported: the launcher ends by itself
        except BaseException:
            # the probe's time limit (ProbeTimeout) or Ctrl-C while watching: the launcher has Children of its own,
            # which drive()'s finally never stops, and die-with-parent would end only the launcher, leaving its
            # process group (ranks, orted) behind: stop the world, then let the probe record what it has
            started.stop()
            raise
        if why or started.poll() is None:
            started.stop()
        rc = started.poll()
        text = read_text(log) or ""
        self.report = {"launcher": self.launcher, "node": n.rank, "rc": rc, "why": why, "log": self.launcher_log,
                       "argv": argv, "failed": {str(k): v for k, v in launch.failed_ranks(self.launcher,
                                                                                         text).items()},
                       "slurm_jobs_cancelled": started.cancelled, "slurm_jobs_left": started.jobs_left()}
        n.store.set("%s/l/%d" % (self.key, n.rank), self.report)

    def _watch(self, started):
        s = self.settings
        start = time.monotonic()
        deadline = start + float(s["launch_timeout"])
        stall, startup = float(s["stall_timeout"]), float(s["rdzv_timeout"]) + 60
        mark, changed, exited, failed_at = None, start, None, None
        while True:
            now = time.monotonic()
            try:
                progress, exits = self._state()
            except StoreError:
                return "error"
            if len(exits) >= self.world:
                return None
            if started.poll() is not None:
                exited = exited or now
                if now - exited > 3:  # the others' last words had a moment to arrive
                    return None
            if any((rec or {}).get("status") != "ok" for rec in exits.values()):
                failed_at = failed_at or now
                if now - failed_at > 10:
                    return "error"  # a rank failed and the launcher did not end the others
            state = tuple(sorted((k, (v or {}).get("step"), (v or {}).get("phase")) for k, v in progress.items()))
            if state != mark:
                mark, changed = state, now
            running = len(progress) >= self.world and all(
                PHASES.get((v or {}).get("phase"), 0) >= 2 for v in progress.values())
            if now > deadline:
                return "timeout"
            if (running and now - changed > stall) or (not running and now - start > startup):
                return "hang"
            time.sleep(0.25)

    def collect(self):
        """After the world: this node's ranks (whatever landed in its work directory) and every rank's exit."""
        prefix = "%s.r" % self.key
        for name in sorted(os.listdir(self.node.work)):
            if name.startswith(prefix) and name.endswith(".results"):
                rank = int(name[len(prefix):-len(".results")])
                self.files[rank] = {"results": os.path.join(self.node.work, name),
                                    "progress": os.path.join(self.node.work, name[:-8] + ".progress")}
        self.ranks = sorted(self.files)
        store = self.node.store
        try:
            xs = {int(k.rsplit("/", 1)[1]): v for k, v in store.keys("%s/x/" % self.key).items()}
            where = {int(k.rsplit("/", 1)[1]): v for k, v in store.keys("%s/where/" % self.key).items()}
            reports = list(store.keys("%s/l/" % self.key).values())
        except StoreError:
            xs, where, reports = {}, {}, []
        self.slurm_jobs = sorted({"%s.%s" % (w["job"], w.get("step")) if w.get("step") else w["job"]
                                  for w in where.values() if (w or {}).get("job")})
        failed, why = {}, None
        for rep in reports:
            why = why or rep.get("why")
            failed.update({int(k): v for k, v in (rep.get("failed") or {}).items()})
        exits = {}
        someone_failed = bool(failed) or any(v.get("status") != "ok" for v in xs.values())
        # a rank whose collective timed out waited for one that never returned: that one hung too
        timed_out = any(v.get("status") == "hang" for v in xs.values())
        for r in range(self.world):
            host = (where.get(r) or {}).get("host") or (failed.get(r) or {}).get("host")
            if r in xs:
                exits[r] = dict(xs[r], host=host)
            elif r in failed and _died_by_itself(failed[r]):
                # killed by a signal nobody here sends first (SIGKILL, SIGSEGV, ...), as the launcher saw it: the
                # cause, even when the others' stall was noticed before the launcher's report arrived (a loaded node)
                exits[r] = {"status": "crash", "rc": failed[r].get("rc"), "host": host}
            elif why in ("hang", "timeout"):
                # the launcher was stopped by us: what it says about the ranks then is our doing
                exits[r] = {"status": why, "rc": None, "host": host, "silent": True}
            elif r in failed and not failed[r].get("stopped"):
                exits[r] = {"status": "crash", "rc": failed[r].get("rc"), "host": host}
            elif timed_out:
                # the others timed out waiting for this rank, which never returned (the launcher then ended it)
                exits[r] = {"status": "hang", "rc": None, "host": host, "silent": True}
            elif someone_failed:
                exits[r] = {"status": "stopped", "rc": None, "host": host}
            else:
                exits[r] = None
        return exits, reports

    def records(self, rank):
        return World.records(self, rank)


def launched_context(node, params, env, node_env, launcher, facts):
    return {"launcher": launcher, "env": env, "node_env": node_env, "facts": facts,
            "hostname": facts[node.rank]["hostname"], "mpirun_args": params["mpirun_args"],
            "srun_args": params["srun_args"]}


class LaunchError(Exception):
    """The launcher asked for cannot start worlds on these nodes (the reason names the host)."""


def _last_progress(world, rank):
    path = world.files.get(rank, {}).get("progress")
    lines = (read_text(path) or "").splitlines() if path else []
    for line in reversed(lines):
        try:
            return json.loads(line)
        except ValueError:
            continue
    return None


def environments(node, params, ppn):
    """(env of the ranks on this node, env a launcher forwards to every node, this node's own settings, facts).
    The socket interface is this node's own (names may differ per node): a launched rank takes it from the store."""
    peers = [a for i, a in enumerate(node.addresses) if i != node.rank]
    ifname, local_ip, how = interface_for(node.addresses[node.rank], peers)
    env = dict(os.environ)
    env.update({str(k): str(v) for k, v in params["env"].items()})
    node_env = {k: ifname for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if ifname and k not in env}
    if ppn > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    launch_env = dict(env)
    env.update(node_env)
    facts = {"interface": ifname, "interface_address": local_ip, "interface_how": how}
    return env, launch_env, node_env, facts


def drive(art, node, params, settings, plan, order, env, launch_env, node_env, record, agree_settings=None):
    """Run every world size of the plan on this node, through the launcher the nodes agree on. `record(art, world,
    nodes)` records what this node's ranks of a world measured (world.ranks, world.records(rank)). Failures go to
    facts.failures and the artifact's error; returns the node counts this node took part in.
    `agree_settings(node)`, when given, runs once the nodes have met (node.mesh, None for one node alone) and may
    change `settings` in place, the same way on every node (the training job's engine)."""
    ppn = settings["ppn"]
    failures, ran, missing_nodes = [], [], set()
    os.makedirs(node.work, exist_ok=True)
    barrier_timeout = settings["launch_timeout"] + 60
    children = Children()
    pool = Pool(node, ppn, settings, env, children)
    ctx = None
    world = None
    launcher = "direct"
    try:
        node.open_store(connect_timeout=settings["rdzv_timeout"], always=params["launcher"] != "direct")
        if agree_settings is not None:
            agree_settings(node)
        if params["launcher"] != "direct":
            launcher, why_not, facts = launch.agree(node.mesh, params["launcher"], node.work, params["mpirun_args"],
                                                    settings["rdzv_timeout"])
            art.facts["launcher_why_not"] = why_not or None
            if launcher in why_not:
                raise LaunchError("launcher %s cannot be used: %s" % (launcher, why_not[launcher]))
            if launcher != "direct":
                ctx = launched_context(node, params, launch_env, node_env, launcher, facts)
        art.facts["launcher"] = launcher
        art.facts["launcher_asked"] = params["launcher"]
        for index, nodes in enumerate(plan):
            members = order[:nodes] if nodes > 1 else [node.rank]  # one-node worlds: every node on its own
            lost = sorted(r for r in missing_nodes if r in members) if nodes > 1 else []
            participates = nodes == 1 or node.rank in members
            if lost and participates:
                failures.append({"nodes": nodes, "kind": "skipped", "log": None,
                                 "message": "not run at %d nodes: %s did not reach the previous step"
                                            % (nodes, ", ".join(node.hosts[r] for r in lost))})
                participates = False
            world = (LaunchedWorld(node, index, members, ppn, settings, ctx) if ctx
                     else World(node, index, members, ppn, settings))
            exits, reports = {}, []
            started = time.monotonic()
            if ctx:
                if participates:
                    world.publish()
                missing_nodes.update(node.barrier("before-%d" % index, barrier_timeout))
                if participates:
                    world.run()
            elif participates:
                exits = world.run(pool)
                if node.store is not None and nodes > 1:
                    try:
                        for rank, rec in exits.items():
                            node.store.set("%s/x/%d" % (world.key, rank), rec)
                    except StoreError:
                        pass
            missing = node.barrier("after-%d" % index, barrier_timeout)
            missing_nodes.update(missing)
            if ctx and participates:
                exits, reports = world.collect()
                kill_marked(world.mark)
            if participates:
                if world.ranks:
                    record(art, world, nodes)
                ran.append(nodes)
                art.facts["seconds_n%d" % nodes] = round(time.monotonic() - started, 2)
                if ctx:
                    _launch_facts(art, node, world, nodes, reports)
            if participates and any((rec or {}).get("status") != "ok" for rec in exits.values()):
                failures.append(_failure(node, world, nodes, exits, settings, launcher, ctx))
            if os.path.exists(os.path.join(node.out_dir, world.log_name)) and world.log_name not in art.raw:
                art.raw.append(world.log_name)
        node.barrier("end", barrier_timeout)
        pool.close()
    except LaunchError as exc:
        art.error(str(exc))
        return ran
    finally:
        children.stop_all()
        if isinstance(world, LaunchedWorld):
            # whatever of the last world still runs on this host whoever started it (another node's launcher, a
            # world left by an exception or the probe's time limit): its ranks carry the marker
            kill_marked(world.mark)
        node.close()
        shutil.rmtree(node.work, ignore_errors=True)
    workers_log = "%s.workers.log" % node.base
    if os.path.exists(os.path.join(node.out_dir, workers_log)) and os.path.getsize(os.path.join(node.out_dir,
                                                                                              workers_log)):
        art.raw.append(workers_log)
    art.facts["world_sizes_run"] = ",".join(str(w) for w in ran)
    art.facts["failures"] = failures
    real = [f for f in failures if f["kind"] != "skipped"]
    if failures:
        first = (real or failures)[0]
        art.error("%d of %d world sizes failed; first: %s (log: %s)" % (
            len(failures), len(plan), first["message"], first.get("log") or "-"))
    return ran


def _launch_facts(art, node, world, nodes, reports):
    """What the launcher did for this world: its command line, exit, the Slurm jobs it ran and any it left."""
    if world.slurm_jobs:
        art.facts.setdefault("slurm_jobs", []).extend("%s (%d nodes)" % (job, nodes) for job in world.slurm_jobs)
    for rep in reports:
        if rep.get("slurm_jobs_left"):
            art.facts.setdefault("slurm_jobs_left", []).extend(rep["slurm_jobs_left"])
        if rep.get("node") == node.rank:
            art.facts.setdefault("launches", []).append(
                {"nodes": nodes, "argv": " ".join(rep["argv"]), "rc": rep["rc"], "why": rep["why"],
                 "log": rep["log"], "slurm_jobs_cancelled": rep["slurm_jobs_cancelled"] or None})
            if rep["log"] not in art.raw:
                art.raw.append(rep["log"])


def _failure(node, world, nodes, exits, settings, launcher, ctx):
    """The failures entry of a world in which some rank did not finish: who, where, how, and the log's tail."""
    all_ranks = list(range(world.world)) if nodes > 1 or ctx else world.ranks
    positions, all_exits = {}, dict(exits)
    if (nodes > 1 or ctx) and node.store is not None:
        try:
            positions = _positions(node.store.keys("%s/p/" % world.key), all_ranks)
            if not ctx:
                for key, rec in node.store.keys("%s/x/" % world.key).items():
                    all_exits[int(key.rsplit("/", 1)[1])] = rec
        except StoreError:
            pass
    else:
        positions = {r: _last_progress(world, r) for r in world.ranks}
    kind, message = describe_failure(nodes, all_ranks, all_exits, positions, settings["stall_timeout"],
                                     launcher=launcher)
    stuck = sorted(r for r, rec in all_exits.items() if rec and rec.get("status") not in ("ok", "stopped"))
    log_tail = tail(os.path.join(node.out_dir, world.log_name), 5)
    return {"nodes": nodes, "kind": kind, "message": message, "stuck_ranks": stuck, "log": world.log_name,
            "log_tail": log_tail}


def world_shape(params, dev, gpus):
    """(GPUs?, communicator, processes per node): nccl and one rank per visible GPU on GPUs (rccl answers to
    nccl in torch), gloo and params' cpu_procs_per_node on the CPU; params' procs_per_node overrides both."""
    gpu = dev["backend"] in ("cuda", "rocm")
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    gpu_count = min(len(gpus), len(visible)) if visible and gpu else len(gpus)
    ppn = params["procs_per_node"] or (gpu_count if gpu else params["cpu_procs_per_node"])
    return gpu, "nccl" if gpu else "gloo", ppn
