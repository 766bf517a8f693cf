"""The one launcher layer of the multi-node probes: how a world of N nodes × P processes is started the way the
cluster's own jobs start (srun, mpirun, torchrun), or by the probes themselves (direct).

Every node's probe runs at the same time (the play starts them together) and they meet in the run's store
(probes/common/rendezvous.py). What this module gives them:

- `node_facts()`: what each node can launch with (published in the store, so the choice is made on the same facts
  by every node): its short host name (the Slurm node name), the python and package root a task would run, whether
  Slurm knows the node, Open MPI's mpirun and flavour, torch's launcher;
- `choose(requested, facts)`: the launcher, and why each other one was not taken. `auto` takes srun when every host
  is a node of a Slurm cluster, else mpirun where Open MPI is on every host, else torchrun, else direct;
- argv builders (`srun_argv`, `mpirun_argv`, `torchrun_argv`) that are pure functions of the plan, so the command
  lines are tested against each tool's documented usage;
- `rank_env()`: the rank, world size and local rank a task got from its launcher's environment (the launchers are
  only launchers: a task's rank comes from them, its communicator is NCCL or gloo);
- `Launch`: one launcher process, supervised: its own process group, dying with the probe, and on a hang or a
  timeout stopped the launcher's way (srun: the job step is cancelled with scancel; mpirun: SIGTERM, which ends
  the ranks on every host; torchrun: the agent's process group), then `failed_ranks()` reads the launcher's own
  report of which rank failed on which host and how;
- `MARK`: every task carries the run's marker in its argv, so each node's probe ends what is left of a world on its
  own host (`procs.kill_marked`) whatever the launcher did.
"""

import json
import os
import re
import shutil
import signal
import socket
import sys
import time

from probes.common.command import CmdResult, run_cmd
from probes.common.ports import port_param
from probes.common.procs import Children, package_root
from probes.common.rendezvous import Mesh, StoreError
from probes.params import LAUNCHERS

# What a task needs from the probe's environment, forwarded explicitly by mpirun (-x) and kept by srun
# (--export=ALL): the communicator's settings, and the paths the tools step set.
FORWARD_PREFIXES = ("NCCL_", "GLOO_", "UCX_", "CUDA_", "HIP_", "ROCR_", "RCCL_", "OMP_", "TORCH_", "CMXA_")
FORWARD_NAMES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE")


def short_hostname():
    return socket.gethostname().split(".")[0]


def _first_line(res):
    lines = (res.stderr or res.stdout or "").strip().splitlines()
    return lines[-1].strip() if lines else "rc=%s" % res.rc


def mpi_flavour(version_text):
    """'openmpi' for Open MPI / HPC-X (`mpirun (Open MPI) 4.1.4`), 'mpich' for Hydra, else None."""
    if re.search(r"\(Open MPI\)|Open MPI|OpenRTE", version_text or ""):
        return "openmpi"
    if re.search(r"HYDRA|MPICH|Intel\(R\) MPI", version_text or "", re.I):
        return "mpich"
    return None


def parse_mpi_list(text):
    """Plugin names from `srun --mpi=list` (22.05: 'srun: MPI types are...' then 'srun: none' lines; 23.x+:
    'MPI plugin types are...' then bare names; specific pmix versions as 'pmix_v4')."""
    names = []
    for line in (text or "").splitlines():
        line = re.sub(r"^srun:\s*", "", line.strip())
        if not line or " " in line or line.endswith(":"):
            continue
        names.append(line)
    return names


def pick_srun_mpi(plugins, want_mpi):
    """--mpi for srun: pmix (any version) then pmi2 for a task that is an MPI program, else none."""
    if want_mpi:
        for prefix in ("pmix", "pmi2"):
            for name in plugins:
                if name == prefix or name.startswith(prefix + "_"):
                    return name
    return "none"


def node_facts(torch_needed=True):
    """What this node can launch with. Cheap: a few `--version` calls with short timeouts."""
    facts = {"hostname": short_hostname(), "python": sys.executable, "root": package_root(), "slurm": None,
             "mpirun": None, "mpi_flavour": None, "torchrun": None, "why": {}}
    scontrol = shutil.which("scontrol")
    if not scontrol:
        facts["why"]["srun"] = "scontrol not found"
    else:
        res = run_cmd([scontrol, "show", "node", "-o", facts["hostname"]], timeout=15)
        if res.rc == 0 and "NodeName=%s " % facts["hostname"] in res.stdout + " ":
            facts["slurm"] = facts["hostname"]
        else:
            facts["why"]["srun"] = "%s is not a Slurm node (scontrol show node: %s)" % (facts["hostname"],
                                                                                     _first_line(res))
    mpirun = shutil.which("mpirun")
    if not mpirun:
        facts["why"]["mpirun"] = "mpirun not found"
    else:
        res = run_cmd([mpirun, "--version"], timeout=15)
        facts["mpi_flavour"] = mpi_flavour(res.stdout + res.stderr)
        if facts["mpi_flavour"] == "openmpi":
            facts["mpirun"] = mpirun
        else:
            facts["why"]["mpirun"] = "%s is not Open MPI or HPC-X (%s)" % (mpirun, _first_line(res))
    if torch_needed:
        import importlib.util  # noqa: PLC0415

        if importlib.util.find_spec("torch") is not None:
            facts["torchrun"] = "%s -m torch.distributed.run" % sys.executable
        else:
            facts["why"]["torchrun"] = "torch is not importable by %s" % sys.executable
    return facts


def choose(requested, facts, needs_torch=True, known=None):
    """(launcher, why) from the facts of every node of the run. why: launcher -> the reason it cannot be used
    (for the artifact); a requested launcher that cannot be used comes back with its reason in why. known: reasons
    found beforehand (a failed mpirun smoke test)."""
    why = dict(known or {})
    hosts = [f["hostname"] for f in facts]
    for name in ("srun", "mpirun", "torchrun"):
        lacking = [(f["hostname"], f["why"].get(name)) for f in facts if f["why"].get(name)]
        if name == "torchrun" and not needs_torch:
            lacking = []
        if lacking:
            why[name] = "; ".join("%s: %s" % hw for hw in lacking[:4]) + (" (and %d more)" % (len(lacking) - 4)
                                                                          if len(lacking) > 4 else "")
    # The probes' own tasks (needs_torch) run this package and find their node's settings by host name; an MPI
    # program the launcher starts (nccl-tests, xhpl_mxp: needs_torch False) does neither.
    for key in ("python", "root") if needs_torch else ():
        # mpirun and srun start one command line on every node: the same python and probes package everywhere
        if len({f[key] for f in facts}) > 1:
            differs = "the task's %s differs between nodes (%s)" % (
                key, ", ".join("%s=%s" % (f["hostname"], f[key]) for f in facts))
            why.setdefault("srun", differs)
            why.setdefault("mpirun", differs)
    if needs_torch and len(set(hosts)) < len(hosts):
        dup = sorted({h for h in hosts if hosts.count(h) > 1})
        for name in ("srun", "mpirun", "torchrun"):
            why.setdefault(name, "host names are not unique (%s): a task finds its node by name" % ", ".join(dup))
    if requested != "auto":
        return requested, why
    for name in ("srun", "mpirun", "torchrun"):
        if name not in why:
            return name, why
    return "direct", why


def forwarded_env(env):
    return sorted(k for k in env if k.startswith(FORWARD_PREFIXES) or k in FORWARD_NAMES)


def srun_argv(nodes, ntasks_per_node, command, job_name, mpi="none", gpus_per_task=0, jobid=None,
              immediate_s=60, time_min=None, extra=(), gpus_per_node=0):
    """One job step over exactly these Slurm nodes, P tasks each, in block order (ranks 0..P-1 on the first
    node of the step). Inside an allocation (jobid) it is a step of that job; otherwise srun makes the allocation
    itself (--immediate: fail fast when the nodes are busy or drained instead of waiting in the queue)."""
    argv = ["srun", "--nodes=%d" % len(nodes), "--nodelist=%s" % ",".join(nodes),
            "--ntasks=%d" % (len(nodes) * ntasks_per_node), "--ntasks-per-node=%d" % ntasks_per_node,
            "--distribution=block", "--kill-on-bad-exit=1", "--export=ALL", "--mpi=%s" % mpi,
            "--job-name=%s" % job_name, "--unbuffered"]
    if gpus_per_task:
        argv.append("--gpus-per-task=%d" % gpus_per_task)
    elif gpus_per_node:  # the ranks share the node's GPUs and bind themselves (HPL-MxP's hpl-mxp.sh)
        argv.append("--gpus-per-node=%d" % gpus_per_node)
    if jobid:
        argv += ["--jobid=%s" % jobid, "--overlap"]
    else:
        argv.append("--immediate=%d" % max(1, int(immediate_s)))
    if time_min:
        argv.append("--time=%d" % max(1, int(time_min)))
    return argv + list(extra) + list(command)


def hostfile_text(addresses, slots):
    return "".join("%s slots=%d\n" % (a, slots) for a in addresses)


def mpirun_argv(mpirun, nprocs, ppn, hostfile, command, env_names, as_root=False, ucx=False, extra=(), bind="numa"):
    """Open MPI / HPC-X: a hostfile of the world's addresses (slots = processes per node), ppn ranks per node by
    slot (ranks 0..ppn-1 on the first host), each bound to its NUMA domain (bind: "none" for a program that sets
    its own affinity, as NVIDIA's HPC-Benchmarks wrappers do), the environment forwarded by name."""
    argv = [mpirun, "-np", str(nprocs), "--hostfile", hostfile, "--map-by", "ppr:%d:node" % ppn,
            "--bind-to", bind]
    if ucx:
        argv += ["--mca", "pml", "ucx"]
    if as_root:
        argv.append("--allow-run-as-root")
    for name in env_names:
        argv += ["-x", name]
    return argv + list(extra) + list(command)


def mpi_world_prefix(launcher, world, ppn, env, extra, workdir, job_name, mpirun, timeout, gpus_per_task=0,
                     ucx=False, bind="numa", gpus_per_node=0):
    """(argv prefix, hostfile text) that starts an MPI program as ppn ranks on each node of world ([{slurm,
    address}], its first node first): one srun job step (--mpi from `srun --mpi=list`), or mpirun with a hostfile
    of the world's addresses written into workdir (hostfile text None under srun). nccl-tests and HPL-MxP start
    their worlds through this."""
    if launcher == "srun":
        return srun_argv([w["slurm"] for w in world], ppn, [], job_name, mpi=pick_srun_mpi(srun_mpi_plugins(), True),
                         gpus_per_task=gpus_per_task, jobid=slurm_job_id(), time_min=timeout / 60 + 2,
                         extra=extra, gpus_per_node=gpus_per_node), None
    if launcher != "mpirun":
        raise ValueError("an MPI program starts through srun or mpirun, not %s" % launcher)
    hostfile = write_hostfile(os.path.join(workdir, "hostfile"), [w["address"] for w in world], ppn)
    argv = mpirun_argv(mpirun, ppn * len(world), ppn, hostfile, [], forwarded_env(env), as_root=os.geteuid() == 0,
                       ucx=ucx, extra=extra, bind=bind)
    return argv, hostfile_text([w["address"] for w in world], ppn)


def run_launched(launcher, argv, env, log, job_name, timeout):
    """Runs one launched world to its end or its timeout (stopped the launcher's way), its output in log (after a
    first line with the command). Returns a CmdResult: stdout is everything the launcher printed, rc None on a
    timeout, stderr the Slurm jobs still there after the cancel, if any."""
    with open(log, "w") as fh:
        fh.write("# %s\n" % " ".join(argv))
    started = Launch(launcher, argv, env, log, job_name=job_name)
    try:
        rc, timed_out = started.wait(timeout)
    except BaseException:
        # the probe's own time limit (ProbeTimeout from SIGALRM) or Ctrl-C while waiting: nothing else stops this
        # launcher, and when the probe exits die-with-parent ends only the launcher itself, not what it started
        # in its process group (ranks, orted): stop the world here, then let the probe record what it has
        started.stop()
        raise
    try:
        with open(log, errors="replace") as fh:
            text = fh.read()
    except OSError:
        text = ""
    left = started.jobs_left(5) if timed_out else []
    err = "slurm jobs still there after the cancel: %s" % ",".join(left) if left else ""
    return CmdResult(argv, None if timed_out else rc, text, err, False, timed_out)


def torchrun_argv(python, nnodes, nproc, node_rank, endpoint, rdzv_id, is_host, command):
    """torch's elastic agent on one node: c10d rendezvous on the world's first host (which hosts the store), no
    restarts (a failed rank is a result, not something to retry), the task started as given (--no-python)."""
    return [python, "-m", "torch.distributed.run", "--nnodes=%d" % nnodes, "--nproc-per-node=%d" % nproc,
            "--node-rank=%d" % node_rank, "--rdzv-backend=c10d", "--rdzv-endpoint=%s" % endpoint,
            "--rdzv-id=%s" % rdzv_id, "--rdzv-conf=is_host=%s" % ("1" if is_host else "0"), "--max-restarts=0",
            "--monitor-interval=1", "--no-python"] + list(command)


def rank_env(env=None):
    """{rank, world, local_rank, local_world, source} from the launcher's environment, or None outside one.
    torchrun's variables first (it may run under srun or mpirun itself), then Open MPI / HPC-X, PMIx, MPICH's
    PMI, then Slurm's."""
    env = os.environ if env is None else env
    schemes = (("torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"),
               ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE"),
               ("pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
               ("srun", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"))
    for source, rank, world, local, local_world in schemes:
        if env.get(rank, "").isdigit() and env.get(world, "").isdigit():
            lw = env.get(local_world, "").split("(")[0]
            return {"rank": int(env[rank]), "world": int(env[world]),
                    "local_rank": int(env[local]) if env.get(local, "").isdigit() else 0,
                    "local_world": int(lw) if lw.isdigit() else None, "source": source}
    return None


# The launchers' own words for a failed rank (real captures: tests/fixtures/launchers/).
_MPIRUN_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node (\S+) exited on signal (\d+)")
_MPIRUN_EXIT = re.compile(r"Process name:\s*\[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s*(-?\d+)")
_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? ([\d,\-]+): (Exited with exit code (\d+)|Killed|"
                        r"Terminated|.+)")
_TORCHRUN_RANK = re.compile(r"host\s*:\s*(\S+)\s*\n\s*rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*"
                            r"(-?\d+)")


def _expand_tasks(text):
    out = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-", 1)
            out.extend(range(int(a), int(b) + 1))
        elif part.isdigit():
            out.append(int(part))
    return out


# srun's own lines once it ends the step itself: a task that fails after one of these was ended because of
# another's failure (or a cancel), not a cause. --kill-on-bad-exit ends the others with SIGTERM ("Terminating
# StepId", then "task 0: Terminated"; SIGKILL only after KillWait, for a task that outlived SIGTERM); a cancel, or a
# signal to srun itself, sends SIGKILL ("forcing job termination", then "Killed": tests/fixtures/launchers/).
_SRUN_ENDING_TERM = re.compile(r"Terminating StepId")
_SRUN_ENDING_KILL = re.compile(r"forcing job termination|CANCELLED AT|Job step aborted|Force Terminated")


def failed_ranks(launcher, text):
    """rank -> {"host", "rc", "stopped"} as the launcher reported it: rc < 0 is the signal that killed the rank;
    stopped: the launcher itself ended it after another rank failed (or it was cancelled)."""
    out = {}
    if launcher == "mpirun":
        for rank, host, sig in _MPIRUN_SIGNAL.findall(text):
            out[int(rank)] = {"host": host, "rc": -int(sig), "stopped": False}
        for rank, rc in _MPIRUN_EXIT.findall(text):
            out.setdefault(int(rank), {"host": None, "rc": int(rc), "stopped": False})
    elif launcher == "srun":
        term = kill = False
        for line in text.splitlines():
            term = term or bool(_SRUN_ENDING_TERM.search(line))
            kill = kill or bool(_SRUN_ENDING_KILL.search(line))
            m = _SRUN_TASK.search(line)
            if not m:
                continue
            host, tasks, what, code = m.groups()
            rc = int(code) if code else -signal.SIGKILL if what == "Killed" else -signal.SIGTERM \
                if what == "Terminated" else None
            # after srun's SIGTERM a task killed by SIGKILL was killed by something else: its report only arrived
            # after the other ranks' failure that made srun end the step (a loaded node: a clean-clone run blamed
            # the rank that lost its peer instead of the one killed)
            stopped = kill or term and what != "Killed"
            for rank in _expand_tasks(tasks):
                out.setdefault(rank, {"host": host, "rc": rc, "stopped": stopped})
    elif launcher == "torchrun":
        for host, rank, rc in _TORCHRUN_RANK.findall(text):
            out[int(rank)] = {"host": host, "rc": int(rc), "stopped": False}
    return out


def failure_text(launcher, text):
    """The launcher's own account of a failed world in words, e.g. "srun: rank 1 on n2 exited with status 3; rank 0
    ended by srun after that", or "" when it names no rank: for a program whose output says only that it had no
    result (xhpl_mxp under srun ends on "srun: Force Terminated"), which rank and host failed first."""
    failed = failed_ranks(launcher, text)

    def how(rc):
        return "failed" if rc is None else "was killed by signal %d" % -rc if rc < 0 else "exited with status %d" % rc
    parts = ["rank %d%s %s" % (r, " on %s" % v["host"] if v["host"] else "", how(v["rc"]))
             for r, v in sorted(failed.items()) if not v["stopped"]]
    ended = sorted(r for r, v in failed.items() if v["stopped"])
    if ended:
        parts.append("rank%s %s ended by %s after that" % ("s" if len(ended) > 1 else "", ",".join(map(str, ended)),
                                                          launcher))
    return "%s: %s" % (launcher, "; ".join(parts)) if parts else ""


class Launch:
    """One launcher process of one world, supervised. stop() ends it the launcher's way and leaves no step."""

    def __init__(self, launcher, argv, env, log_path, children=None, job_name=None):
        self.launcher, self.argv, self.log_path, self.job_name = launcher, list(argv), log_path, job_name
        self.children = children or Children()
        self.proc = self.children.start(self.argv, env=env, log_path=log_path)
        self.started = time.monotonic()
        self.cancelled = []

    def poll(self):
        return self.proc.poll()

    def _slurm_jobs(self):
        """Job ids of this world's Slurm job (srun made it) by its unique name."""
        res = run_cmd(["squeue", "--noheader", "--name=%s" % self.job_name, "--format=%i"], timeout=20)
        return [j.strip() for j in res.stdout.split() if j.strip()]

    def stop(self, grace=5.0):
        """End the world: srun's job cancelled (scancel, then srun's group), mpirun told to end its ranks on
        every host (SIGTERM, then its group), torchrun's agent ended with its workers. Returns the rc."""
        if self.launcher == "srun" and self.job_name:
            jobs = self._slurm_jobs()
            for job in jobs:
                run_cmd(["scancel", "--signal=KILL", "--full", job], timeout=20)
                run_cmd(["scancel", job], timeout=20)
            self.cancelled = jobs
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except OSError:
                pass
            deadline = time.monotonic() + grace
            while self.proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        return self.children.stop(self.proc, grace=1.0)

    def wait(self, timeout):
        """(rc, timed_out): the launcher's exit, or stopped the launcher's way after timeout seconds."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                self.stop()
                return self.proc.returncode, True
            time.sleep(0.1)
        self.children.stop(self.proc, grace=0)  # whatever it left in its group
        return self.proc.returncode, False

    def jobs_left(self, wait_s=15.0):
        """srun: job ids of this world still known to squeue after wait_s (empty: none left)."""
        if self.launcher != "srun" or not self.job_name:
            return []
        deadline = time.monotonic() + wait_s
        while True:
            jobs = self._slurm_jobs()
            if not jobs or time.monotonic() > deadline:
                return jobs
            time.sleep(0.5)


def mpirun_smoke(mpirun, addresses, workdir, extra=(), timeout=60):
    """None when mpirun starts a process on every host (one `true` per host), else why not: for auto, which must
    not pick an mpirun that cannot reach the nodes (no SSH between them, orted missing on a node)."""
    hostfile = write_hostfile(os.path.join(workdir, "smoke.hostfile"), addresses, 1)
    argv = mpirun_argv(mpirun, len(addresses), 1, hostfile, ["true"], [], as_root=os.geteuid() == 0, extra=extra)
    res = run_cmd(argv, timeout=timeout)
    if res.rc == 0:
        return None
    text = (res.stderr + res.stdout).strip().splitlines()
    detail = next((ln.strip() for ln in text if ln.strip() and not set(ln.strip()) <= set("-*")), "")
    return "mpirun across the %d hosts failed (%s): %s" % (
        len(addresses), "timed out after %d s" % timeout if res.timed_out else "rc=%s" % res.rc, detail[:300])


def _wait_key(store, key, timeout):
    deadline = time.monotonic() + timeout
    while True:
        value = store.get(key)
        if value is not None or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


class LaunchedRank:
    """The task side of a launched world (a rank started by srun, mpirun or torchrun with the same command line on
    every node): its rank from the launcher's environment, the world's settings from CMXA_LAUNCH, its node's own
    settings from the run's store under its host name (published there by that node's probe), and the address of
    rank 0's node for the communicator's store (rank 0 publishes it). Failures are set in the store as the rank's
    exit record, so the launching node can name them."""

    def __init__(self, settings_timeout=30.0):
        from probes.common.rendezvous import StoreClient  # noqa: PLC0415 - a task imports what it needs

        self.launch = json.loads(os.environ["CMXA_LAUNCH"])
        self.key = self.launch["key"]
        self.ids = rank_env()
        self.host = short_hostname()
        self.store = None
        self.node = None
        if self.ids is None:
            raise LaunchedRankError("no rank in the environment (not started by srun, mpirun or torchrun)")
        st = self.launch["store"]
        self.store = StoreClient(st["host"], st["port"], st["token"], connect_timeout=30, op_timeout=30)
        self.node = _wait_key(self.store, "%s/node/%s" % (self.key, self.host), settings_timeout)
        if self.node is None:
            self.fail("error", 2, "the run's store has no settings for host %s (is it one of the inventory hosts?)"
                      % self.host)
            raise LaunchedRankError("rank %d on %s: no settings for this host" % (self.rank, self.host))
        os.environ.update(self.node.get("env") or {})
        self.store.set("%s/where/%d" % (self.key, self.rank), {
            "host": self.host, "local_rank": self.local_rank, "source": self.ids["source"],
            "job": os.environ.get("SLURM_JOB_ID"), "step": os.environ.get("SLURM_STEP_ID")})

    rank = property(lambda self: self.ids["rank"])
    world = property(lambda self: self.ids["world"])
    local_rank = property(lambda self: self.ids["local_rank"])

    def master(self, timeout):
        """The address of rank 0's node (None when rank 0 never said)."""
        if self.rank == 0:
            self.store.set("%s/master" % self.key, self.node["address"])
        return _wait_key(self.store, "%s/master" % self.key, timeout)

    def fail(self, status, rc, error):
        self.store.set("%s/x/%d" % (self.key, self.rank), {"status": status, "rc": rc, "error": error})

    def done(self, record):
        try:
            self.store.set("%s/x/%d" % (self.key, self.rank), record)
        finally:
            self.store.close()


class LaunchedRankError(Exception):
    """A launched task cannot take part in its world (the reason is also in the store)."""


def agree(mesh, requested, workdir, mpirun_args=(), timeout=90.0, needs_torch=True, extra_facts=None,
          world_needed=None):
    """(launcher, why, facts): every node's facts gathered through the run's mesh, the same choice on every node.
    auto takes mpirun only when it reaches every node: the first host runs the smoke test, everyone hears.
    world_needed(facts): whether a world will start at all (every node decides the same from the same facts); when
    not, the smoke test across every node is not run (an mpirun over the whole cluster for nothing)."""
    facts = mesh.allgather(dict(node_facts(torch_needed=needs_torch), **(extra_facts or {})), timeout)
    launcher, why = choose(requested, facts, needs_torch=needs_torch)
    if launcher == "mpirun" and requested == "auto" and mesh.n > 1 and (world_needed is None or world_needed(facts)):
        if mesh.rank == 0:
            mesh.store.set("launch/mpirun_smoke", mpirun_smoke(facts[0]["mpirun"], mesh.addresses, workdir,
                                                               mpirun_args) or "")
        mesh.barrier("mpirun-smoke", timeout + 90)
        smoke = mesh.store.get("launch/mpirun_smoke")
        if smoke:
            launcher, why = choose("auto", facts, needs_torch=needs_torch, known={"mpirun": smoke})
    return launcher, why, facts


def meet_for_mpi_world(art, params, purpose, workdir, own, world_needed=None):
    """(mesh, (launcher, why, facts)) for a probe whose first host starts an MPI program across the nodes (HPL-MxP,
    IOR and mdtest): the run's store on the first of params' hosts (its port from the run id and purpose), every
    node's facts with `own` added, and the launcher they agree on (world_needed: see agree). The mesh is closed
    again when they cannot agree."""
    os.makedirs(workdir, exist_ok=True)
    hosts = list(params["hosts"])
    port = port_param(params, "port", art.run_id, "%s/%s" % (purpose, art.variant or ""))
    mesh = Mesh(hosts, [str(a) for a in (params["addresses"] or hosts)], params["rank"], port,
                "%s:%s:%d" % (art.run_id, art.variant or "", port), connect_timeout=params["rdzv_timeout"])
    try:
        return mesh, agree(mesh, params["launcher"], workdir, params["mpirun_args"], params["rdzv_timeout"],
                           needs_torch=False, extra_facts=own, world_needed=world_needed)
    except StoreError:
        mesh.close()
        raise


def write_hostfile(path, addresses, slots):
    with open(path, "w") as fh:
        fh.write(hostfile_text(addresses, slots))
    return path


def ucx_wanted(launcher, mpirun):
    """Whether mpirun should be told to use UCX: an MPI program (nccl-tests, HPL-MxP) on a node with RDMA devices
    and an Open MPI that has the UCX PML (HPC-X, InfiniBand builds), so that a broken UCX fails loudly instead of
    falling back to TCP."""
    try:
        rdma = os.listdir("/sys/class/infiniband")
    except OSError:
        rdma = []
    return launcher == "mpirun" and bool(rdma) and ucx_pml(mpirun)


def ucx_pml(mpirun):
    """Whether this Open MPI has the UCX PML (HPC-X and most InfiniBand builds do)."""
    info = os.path.join(os.path.dirname(mpirun), "ompi_info")
    if not os.access(info, os.X_OK):
        return False
    res = run_cmd([info, "--parsable"], timeout=30)
    return "mca:pml:ucx:" in res.stdout


def srun_mpi_plugins():
    res = run_cmd(["srun", "--mpi=list"], timeout=20)
    return parse_mpi_list(res.stdout + "\n" + res.stderr)


def slurm_job_id(env=None):
    """The allocation the probe itself runs in (salloc / sbatch), if any: srun then starts steps of it."""
    env = os.environ if env is None else env
    return env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or None


__all__ = ["LAUNCHERS", "Launch", "choose", "failed_ranks", "forwarded_env", "mpirun_argv", "node_facts",
           "rank_env", "srun_argv", "torchrun_argv", "write_hostfile"]
