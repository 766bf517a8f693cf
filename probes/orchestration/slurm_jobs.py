"""slurm_jobs: what Slurm does for a user's jobs, measured through the user's own account from one node (seed,
"Orchestration" and "Testing Methodology": accounting with priorities enforced, partitions, job arrays rather than
loops, topology-aware scheduling, GPUs allocated correctly).

Every test submits real jobs with the cluster's own commands (sbatch, srun, salloc, scancel) and records what it saw;
the controller judges (reports/phases/orchestration/). The tests, each recorded in facts.tests[name] as ok, error
(with the reason) or skipped (with the reason), so one that fails never hides the others. An error where Slurm ran
nothing for the test (it refused the allocation: srun's and salloc's "Unable to allocate resources: ...", sbatch's
"Batch job submission failed: ..."; or the job stayed pending past job_timeout_s, with squeue's reason) carries
"ran": false: nothing was measured, apart from a job that ran and failed:

- launch: `launch_samples` batch jobs one after the other: submit -> RUNNING (this probe's clock, polling squeue),
  submit -> the batch script's first line, RUNNING -> first line (the prolog and the launch), the script's last
  line -> the job left COMPLETING (the epilog and the cleanup). A state is seen by the poll that found it: the change
  lies between the start of the last poll without it and the end of that poll; `running_seen_within_s` is that bound
  for RUNNING (the submit-to-RUNNING time, taken at the end of the poll, is long by at most that much). The script
  writes its two timestamps, by the compute node's clock, and the node's name into `shared_dir`, which must be
  visible from the node it runs on and from this one (a home or shared file system); where it is not, the script's
  times are skipped with that reason and the RUNNING times stay. The node's clock is then read against this host's
  (node_clock: `srun date` steps inside a salloc on that node, each bracketed by this host's clock, read as the
  monitoring probe reads hosts' clocks, host_clocks; facts.node_clocks) and the script's times put on this host's
  clock: each such time (submit_to_script_s, prolog_launch_s, epilog_s, labelled with the sample and the node) has
  its <metric less _s>_uncertainty_s: the clock reading's uncertainty plus the poll's (RUNNING and the end are timed
  from the start of the poll that saw them). A node whose clock could not be read has its jobs' script times left
  out, with the reason in the test's note.
- salloc: salloc -> the command it runs (here, on this node), then `srun_steps` one-task steps inside that
  allocation, each timed (the step overhead).
- array_vs_loop: `jobs` trivial jobs as one array and as `jobs` separate sbatch calls: seconds to submit, seconds
  until every job has left the queue, and the controller's RPCs (sdiag's per-message counts and times) for each.
- gres: `--gres=gpu:k` (k = 1 and every GPU of a node) and `--gpus=1`: CUDA_VISIBLE_DEVICES, SLURM_JOB_GPUS and the
  GPUs nvidia-smi lists inside the step. Skipped when no node of the partition has GPU GRES.
- exclusive: an `--exclusive` job holds a node: its CPUs against the node's, and whether a second one-task job on
  that node is refused while it runs.
- topology: the switches `scontrol show topology` lists, and the nodes of `placements` two-node jobs with the nodes
  that were idle when each was placed (the controller decides whether one leaf switch could have held the job).
  Skipped when no topology plugin is configured.
- accounting: the configuration (storage, enforcement, priority), every job this probe submitted as sacct shows it
  (with its TRES), the user's associations, the QoS and the user's fairshare.
- refused_account: a job charged to an account that does not exist (`refused_account`, default one named after
  the run) must be refused; a probe cannot become another user, so this is how "a user outside the allowed account
  is refused" is tested.

Every job carries the job name `cmxa-<run id>-<test>`; at the end (even after a failure or the probe's time limit)
every job this probe submitted is cancelled, and facts.left_in_queue names any that squeue still lists after that.
"""

import json
import os
import re
import shutil
import sys
import time

from probes.common import slurm as slurm_mod
from probes.common.clocks import host_clocks  # a host's clock against this one's, from bracketed readings
from probes.common.command import run_cmd
from probes.common.device import SMI_GPU_LINE, SMI_MIG_LINE
from probes.params import Param, Params

PARAMS = Params(
    partition=Param(str, "", "partition to submit to (default: the cluster's default partition)"),
    account=Param(str, "", "account to charge (default: the user's default account)"),
    qos=Param(str, "", "QoS to ask for (default: the association's default)"),
    shared_dir=Param(str, "", "a directory the nodes and this node share, for the jobs' timestamps (default: "
                              "~/.clustermax-assess/<run id>); removed at the end"),
    launch_samples=Param(int, 3, "batch jobs timed one after the other"),
    hold_s=Param(float, 0.5, "seconds each timed batch job runs (long enough to be seen RUNNING)"),
    srun_steps=Param(int, 5, "one-task steps timed inside one salloc allocation"),
    jobs=Param(int, 8, "jobs of the array, and sbatch calls of the loop it is compared with"),
    placements=Param(int, 2, "two-node jobs whose placement is checked against the topology"),
    gpu_requests=Param(bool, True, "run the GPU allocation test where the partition has GPU GRES"),
    refused_account=Param(str, "", "an account the user may not charge (default: clustermax-none-<run id>)"),
    time_limit_min=Param(int, 5, "--time of every job (minutes)"),
    job_timeout_s=Param(float, 120, "seconds any one job may take to start and finish"),
    poll_s=Param(float, 0.1, "seconds between two squeue polls"),
    clock_tries=Param(int, 3, "srun steps reading a launch node's clock against this host's (the quickest counts)"),
)
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE", "SPECIAL_EXIT", "REVOKED"}
CONFIG_KEYS = ("AccountingStorageType", "AccountingStorageEnforce", "AccountingStorageTRES", "PriorityType",
               "TopologyPlugin", "MaxArraySize", "Prolog", "Epilog", "PrologFlags", "SchedulerType", "SelectType",
               "GresTypes", "ClusterName", "SLURM_VERSION")
# sdiag's reading RPCs (squeue, scontrol show, sinfo, sdiag itself): this probe's own polling, not the jobs' load.
# What srun says when the node it asked for is taken (the exclusive test's second job): with --immediate, a request
# that was not granted in time, or that the controller answered ESLURM_NODES_BUSY, is reported with that error's
# text (src/srun/allocate.c _retry, 17.11 to 25.x). Any other reason of "Unable to allocate resources" is no answer
# to the question (an account, a QoS limit, a partition): nothing was tested.
BUSY = re.compile(r"Unable to allocate resources: Requested nodes are busy")
# What srun, salloc and sbatch print when the controller did not allocate at all (the job never ran), with Slurm's
# reason: srun's and salloc's "Unable to allocate resources: %s" (with --immediate, or a request refused outright),
# salloc's "Job submit/allocate failed: %m", sbatch's "Batch job submission failed: %m".
REFUSED = re.compile(r"\b(?:srun|salloc): error: (?:Unable to allocate resources|Job submit/allocate failed): (.+)"
                     r"|\bsbatch: error: Batch job submission failed: (.+)")
# Refusals that are the finding, not a test Slurm could not run: the GPU request or the array itself is what the
# test asks about (a GRES the cluster does not define, a node configuration no node has, arrays switched off with
# MaxArraySize=0): the test fails with Slurm's words.
FEATURE_REFUSED = re.compile(r"Invalid generic resource|Invalid Trackable RESource|Requested node configuration is "
                             r"not available|Invalid job array specification|Invalid feature specification", re.I)
READ_RPC = re.compile(r"(INFO|_PING|STATS)")
# One row of sdiag's RPC statistics by message type (parse_sdiag_rpcs): name, (id), count:, ave_time:, total_time:
SDIAG_RPC_ROW = re.compile(r"([^\s(]+)\s*\(\s*(\d+)\)\s+count:(\d+)\s+ave_time:\d+\s+total_time:(\d+)(?:\s|$)")
# The record keys `scontrol show topology` starts a line with (parse_topology): topology/tree, topology/block
TOPO_RECORD = re.compile(r"^(SwitchName|BlockName|AggregatedBlock)=")
# The salloc'd command: prints when it started, then times `steps` one-task srun steps inside the allocation.
STEPS_SCRIPT = """import json, subprocess, sys, time
start = time.time()
steps = []
for _ in range(int(sys.argv[1])):
    t0 = time.perf_counter()
    rc = subprocess.run(["srun", "--ntasks=1", "--nodes=1", "true"], stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE, text=True)
    steps.append({"s": time.perf_counter() - t0, "rc": rc.returncode, "err": rc.stderr[-300:]})
print("CMXA " + json.dumps({"start": start, "steps": steps}))
"""
# The salloc'd command of node_clock: `tries` one-task steps printing the node's clock as CLOCK_LINE, each with this
# host's clock just before and after it (salloc runs the command here).
CLOCK_SCRIPT = """import json, subprocess, sys, time
reads = []
for _ in range(int(sys.argv[1])):
    before = time.time()
    rc = subprocess.run(["srun", "--ntasks=1", "--nodes=1", "date", "+clustermax-assess-clock: %s.%N"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    after = time.time()
    reads.append({"before": before, "after": after, "out": rc.stdout[-300:], "rc": rc.returncode,
                  "err": rc.stderr[-300:]})
print("CMXA " + json.dumps({"reads": reads}))
"""
HERE = "(this host)"  # this host's key among the clock readings (host_clocks): a name no node has
GPU_STEP = ('echo "JOB=${SLURM_JOB_ID-unset}"; echo "CVD=${CUDA_VISIBLE_DEVICES-unset}"; '
            'echo "JOB_GPUS=${SLURM_JOB_GPUS-unset}"; '
            'echo "STEP_GPUS=${SLURM_STEP_GPUS-unset}"; echo "NODE=$SLURMD_NODENAME"; '
            'if command -v nvidia-smi >/dev/null 2>&1; then '
            'nvidia-smi -L 2>/dev/null | sed "s/^/NVSMI_L=/"; echo "NVSMI=listed"; else echo "NVSMI=none"; fi')


class Failed(Exception):
    """One test could not measure what it measures; the others still run."""


class NotRun(Failed):
    """Slurm did not run the test's job (refused its allocation, or it stayed pending past job_timeout_s): nothing
    was measured. Recorded as an error with "ran": false and Slurm's reason, which the controller reports unscored,
    apart from a job that ran and showed something wrong."""


class Skipped(Exception):
    pass


def refused_reason(text):
    """Slurm's reason in a command's stderr when it allocated nothing for a reason other than the tested feature
    (REFUSED, less FEATURE_REFUSED: an account, a QoS, a busy or drained node), else None."""
    found = REFUSED.search(text or "")
    reason = (found.group(1) or found.group(2)).strip() if found else None
    return None if reason is None or FEATURE_REFUSED.search(reason) else reason


def refusal(res):
    """Slurm's reason when the command's job was never allocated and nothing was tested (refused_reason), else
    None."""
    return None if res.rc == 0 else refused_reason(res.stderr)


def _last_line(res):
    lines = (res.stderr or res.stdout or "").strip().splitlines()
    if res.missing:
        return "%s not found" % res.argv[0]
    if res.timed_out:
        return "timed out"
    return lines[-1] if lines else "rc=%s" % res.rc


def parse_sdiag_rpcs(text):
    """sdiag's "Remote Procedure Call statistics by message type" -> {message: (count, total_time_us)}.

    Read from the sdiag captures in tests/fixtures/slurm_jobs (2020 to 26.05) and src/sdiag/sdiag.c: a row is
    `\\t%-40s(%5u) count:%-6u ave_time:%-6u total_time:%u`, so a name of 40 characters or more touches its
    "(", an id of 5 digits fills its parentheses, an ave_time of 7 digits or more leaves one space before
    total_time, and with the RPC queue enabled queued:/cycle_last:/cycle_max:/dropped: follow.
    The section ends at the next heading ("... statistics by user", "Pending RPC statistics").
    "No RPCs recorded yet." is an empty section. Raises Failed when the section is missing or one of its
    rows cannot be read, rather than leave out counts that the caller would take as zero."""
    out = {}
    section = None
    for line in (text or "").splitlines():
        s = line.strip()
        if s.startswith("Remote Procedure Call statistics by message type"):
            section = True
            continue
        if not section:
            continue
        if s.startswith("Remote Procedure Call statistics by") or s.startswith("Pending RPC"):
            break
        if not s or s.startswith("No RPCs recorded"):
            continue
        m = SDIAG_RPC_ROW.match(s)
        if not m:
            raise Failed("sdiag: cannot read the RPC statistics line %r" % s[:200])
        out[m.group(1)] = (int(m.group(3)), int(m.group(4)))
    if section is None:
        raise Failed("sdiag printed no \"Remote Procedure Call statistics by message type\" section")
    return out


def rpc_delta(before, after):
    """The RPCs between two sdiag readings, this probe's own reading RPCs left out ->
    (submit RPCs, their microseconds, all RPCs, their microseconds), or None when the counters were reset between
    them. The counters are the controller's, for every user: other users' RPCs in that time are counted too."""
    if any(count < before.get(name, (0, 0))[0] for name, (count, _) in after.items()):
        return None  # the counters were reset between the readings (sdiag resets at midnight, or by sdiag -r)
    sub = [0, 0]
    every = [0, 0]
    for name, (count, total) in after.items():
        c0, t0 = before.get(name, (0, 0))
        dc, dt = count - c0, total - t0
        if dc <= 0 or READ_RPC.search(name):
            continue
        every[0] += dc
        every[1] += dt
        if name == "REQUEST_SUBMIT_BATCH_JOB":
            sub = [dc, dt]
    return sub[0], sub[1], every[0], every[1]


def parse_topology(text):
    """`scontrol show topology` -> [{"name", "level", "nodes" (hostlist expression), "switches", "kind"}].

    topology/tree: `SwitchName=s Level=n LinkSpeed=n [Nodes=hostlist] [Switches=hostlist]` (before 23.11 with a
    trailing space, and "Nodes=" may be empty), kind "switch". topology/block (23.11+): `BlockName=b BlockIndex=i
    Nodes=hostlist BlockSize=n` is a base block, read as a leaf (level 0) so that a job inside one leaf is a job
    inside one block; `AggregatedBlock=b[0-1] BlockIndex=i Nodes=... BlockSize=n` (24.11+) spans several base
    blocks (its name is the hostlist of those blocks, given as "switches") and gets level 1, 2, ... by its
    BlockSize among the aggregated blocks; both kind "block". Raises Failed on a line that is not such a record,
    a Level that is not a number, or a hostlist cut short (unbalanced brackets: before 23.11 scontrol cut each
    field at 511 characters), rather than judge placements against switches that were not all read."""
    out = []
    aggregated = []
    for line in (text or "").splitlines():
        s = line.strip()
        if not s:
            continue
        m = TOPO_RECORD.match(s)
        if not m:
            raise Failed("scontrol show topology: cannot read the line %r" % s[:200])
        fields = dict(f.split("=", 1) for f in s.split() if "=" in f)
        for key in ("Nodes", "Switches"):
            v = fields.get(key) or ""
            if v.count("[") != v.count("]"):
                raise Failed("scontrol show topology: %s of %s cut short (%r)" % (key, fields[m.group(1)], v[-60:]))
        name, nodes = fields[m.group(1)], fields.get("Nodes") or ""
        if m.group(1) == "SwitchName":
            level = fields.get("Level") or "0"
            if not level.isdigit():
                raise Failed("scontrol show topology: switch %s has Level=%s" % (name, level))
            rec = {"name": name, "level": int(level), "nodes": nodes, "switches": fields.get("Switches") or "",
                   "kind": "switch"}
        elif m.group(1) == "BlockName":
            rec = {"name": name, "level": 0, "nodes": nodes, "switches": "", "kind": "block"}
        else:
            rec = {"name": name, "level": None, "nodes": nodes, "switches": name, "kind": "block"}
            size = fields.get("BlockSize") or ""
            aggregated.append((int(size) if size.isdigit() else 0, rec))
        out.append(rec)
    sizes = sorted({size for size, _ in aggregated})
    for size, rec in aggregated:
        rec["level"] = sizes.index(size) + 1
    return out


def parse_gpu_step(text):
    """The GPU step's KEY=value lines -> {cuda_visible_devices, job_gpus, step_gpus, node, nvidia_smi_gpus,
    nvidia_smi_mig}."""
    kv = dict(line.split("=", 1) for line in (text or "").splitlines() if "=" in line)

    def unset(v):
        return None if v in (None, "unset") else v

    # what nvidia-smi lists in the step: GPUs, and the MIG devices under a GPU in MIG mode. A job given MIG devices
    # (gres gpu:a100_3g.40gb:2) sees them under their parent GPU; a job given a whole GPU that is in MIG mode sees
    # that GPU and all its devices: the controller takes either count as the request's
    listed = [line[len("NVSMI_L="):] for line in (text or "").splitlines() if line.startswith("NVSMI_L=")]
    ran = kv.get("NVSMI") == "listed"
    return {"job": unset(kv.get("JOB")), "cuda_visible_devices": unset(kv.get("CVD")),
            "job_gpus": unset(kv.get("JOB_GPUS")),
            "step_gpus": unset(kv.get("STEP_GPUS")), "node": kv.get("NODE"),
            "nvidia_smi_gpus": sum(1 for x in listed if SMI_GPU_LINE.match(x)) if ran else None,
            "nvidia_smi_mig": sum(1 for x in listed if SMI_MIG_LINE.match(x)) if ran else None}


def gres_gpus(gres):
    """sinfo's %G (or GresUsed) of one node -> its GPUs: 'gpu:h100:8(S:0-1),gpu:a100:2' -> 10; 'gpu:8' -> 8;
    'gpu:a:2(IDX:0,3)' -> 2; shard:/mps:/other GRES beside them are not GPUs; '(null)' or no gpu -> 0.

    An item is name[:type][:no_consume]:count[K|M|G][(S:sockets) or (IDX:indexes)]; the type may be "(null)"
    (GresUsed of an untyped GPU) and the parentheses may hold commas, so items are split on the commas outside
    parentheses."""
    items, depth, cur = [], 0, ""
    for ch in (gres or "").strip():
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    total = 0
    for item in items:
        parts = re.sub(r"\((?:[^()]|\([^()]*\))*\)$", "", item.strip()).split(":")
        m = re.fullmatch(r"(\d+)([KMG]?)", parts[-1])
        if parts[0] == "gpu" and len(parts) > 1 and m:
            total += int(m.group(1)) * 1024 ** "_KMG".index(m.group(2) or "_")
    return total


class Session:
    """The user's Slurm as this probe uses it: options every job gets, and every job id it submitted."""

    def __init__(self, art, p, name_prefix):
        self.art, self.p = art, p
        self.prefix = name_prefix
        self.submitted = []  # {"id", "test", "name"}
        self.names = set()

    def common(self, test):
        name = "%s-%s" % (self.prefix, test)
        self.names.add(name)
        argv = ["--job-name=%s" % name, "--time=%d" % self.p["time_limit_min"]]
        for key, flag in (("partition", "--partition"), ("account", "--account"), ("qos", "--qos")):
            if self.p[key]:
                argv.append("%s=%s" % (flag, self.p[key]))
        return argv

    def sbatch(self, test, args, timeout=60.0):
        res = run_cmd(["sbatch", "--parsable"] + self.common(test) + list(args), timeout=timeout)
        if res.rc != 0:
            raise Failed("sbatch: %s" % _last_line(res))
        job_id = res.stdout.strip().split(";")[0].strip()
        self.submitted.append({"id": job_id, "test": test, "name": "%s-%s" % (self.prefix, test)})
        return job_id

    def never_started(self, job_id):
        """A job this probe cancelled before Slurm started it (held, or given up pending): it has no allocation for
        sacct to show, and the accounting check does not count that against the cluster."""
        for x in self.submitted:
            if x["id"] == job_id:
                x["never_started"] = True

    def ran(self, job_id, test):
        """A job srun or salloc started (their job ids come from inside the job)."""
        if job_id:
            self.submitted.append({"id": job_id, "test": test, "name": "%s-%s" % (self.prefix, test)})

    def state(self, job_id):
        """The job's state; None once Slurm no longer lists it (it finished long enough ago)."""
        res = run_cmd(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], timeout=20)
        text = res.stdout.strip()
        if res.rc != 0 and "Invalid job id" in (res.stderr or ""):
            return None
        if res.rc != 0:
            raise Failed("squeue: %s" % _last_line(res))
        return text.splitlines()[0].strip() if text else None

    def wait_state(self, job_id, done, timeout):
        """Polls until done(state) -> (state, seen, before, started): wall-clock times bracketing the change, `seen`
        the end of the poll that saw it, `before` the start of the last poll that did not (None when the first one
        did), `started` the start of the poll that saw it. The change happened between before and seen."""
        t0, before = time.monotonic(), None
        while True:
            started = time.time()
            st = self.state(job_id)
            if done(st):
                return st, time.time(), before, started
            before = started
            if time.monotonic() - t0 > timeout:
                raise Failed("job %s still %s after %.0f s" % (job_id, st, timeout))
            time.sleep(self.p["poll_s"])

    def pending_reason(self, job_id):
        """Slurm's reason a job is pending (squeue %r: Resources, Priority, ReqNodeNotAvail ...), or None."""
        res = run_cmd(["squeue", "-h", "-j", job_id, "-o", "%r"], timeout=20)
        text = res.stdout.strip() if res.rc == 0 else ""
        return text.splitlines()[0].strip() if text else None

    def name_states(self, name):
        """Every job (and array task) of a job name -> {job id: state}."""
        res = run_cmd(["squeue", "-h", "-r", "-t", "all", "--name=%s" % name, "-o", "%A|%T"], timeout=20)
        if res.rc != 0:
            raise Failed("squeue: %s" % _last_line(res))
        return dict(line.split("|", 1) for line in res.stdout.strip().splitlines() if "|" in line)

    def cancel_all(self):
        ids = [s["id"] for s in self.submitted]
        if ids:
            run_cmd(["scancel"] + ids, timeout=30)
        for name in sorted(self.names):
            run_cmd(["scancel", "--name=%s" % name], timeout=30)

    def left_in_queue(self):
        left = []
        for name in sorted(self.names):
            res = run_cmd(["squeue", "-h", "-r", "--name=%s" % name, "-o", "%A|%T"], timeout=20)
            left += [line for line in res.stdout.strip().splitlines() if line.strip()]
        return left


def _read_stamp(path, timeout):
    """The launch script's stamp file -> (the compute node's time, the node's name), or None until it is there."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with open(path) as fh:
                lines = fh.read().split()
            if len(lines) >= 2:
                return float(lines[0]), lines[1]
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def clock_readings(me, node, reads):
    """The salloc'd CLOCK_SCRIPT's reads ([{before, after, out, rc, err}]) -> the node's clock against this host's
    ({offset_s, uncertainty_s}, or {error}): host_clocks (the monitoring probe's reading of other hosts' clocks) on
    this host's clock before and after each `srun date` step around the node's reading; the quickest read counts."""
    best, errors = None, []
    for r in reads:
        if r.get("rc") != 0:
            errors.append("srun: %s" % ((r.get("err") or "").strip().splitlines() or ["rc=%s" % r.get("rc")])[-1])
            continue
        got = host_clocks([[me, "clustermax-assess-clock: %.6f" % r["before"]], [node, r.get("out")],
                           [me, "clustermax-assess-clock: %.6f" % r["after"]]])[node]
        if "error" in got:
            errors.append(got["error"])
        elif best is None or got["uncertainty_s"] < best["uncertainty_s"]:
            best = got
    return best or {"error": "; ".join(errors[:2]) or "no read"}


def node_clock(s, p, node):
    """A compute node's clock against this host's ({offset_s, uncertainty_s}: the node's time minus this host's, or
    {error}): `clock_tries` one-task steps printing the node's clock (CLOCK_LINE), each timed by this host's clock
    from inside a salloc on that node (salloc runs CLOCK_SCRIPT here; a step takes tens of milliseconds)."""
    argv = ["salloc", "--nodes=1", "--ntasks=1", "--nodelist=%s" % node,
            "--immediate=%d" % max(1, int(p["job_timeout_s"]))] + s.common("clock")
    argv += [sys.executable, "-c", CLOCK_SCRIPT, str(max(1, p["clock_tries"]))]
    res = run_cmd(argv, timeout=p["job_timeout_s"] + 30 * max(1, p["clock_tries"]))
    line = next((x for x in res.stdout.splitlines() if x.startswith("CMXA ")), None)
    if line is None:
        return {"error": "salloc: %s" % _last_line(res)}
    m = re.search(r"salloc: Granted job allocation (\d+)", res.stderr or "")
    s.ran(m.group(1) if m else None, "clock")
    return clock_readings(HERE, node, json.loads(line[5:])["reads"])


def _bracket_error(started, before, seen):
    """How far a change seen by the poll that started at `started` and ended at `seen` (the last poll without it
    started at `before`) may lie from `started`: it happened between before and seen."""
    return max(seen - started, started - before)


def launch_test(s, art, p, shared):
    hidden = None
    samples = []
    for i in range(p["launch_samples"]):
        start, end = os.path.join(shared, "launch-%d.start" % i), os.path.join(shared, "launch-%d.end" % i)
        # The timestamps are best effort: a directory the node does not share must not fail the job (the times are
        # then skipped with that reason), so the script always exits 0. Each is the node's clock and its name.
        script = ('date +%%s.%%N > %s.tmp && echo "$SLURMD_NODENAME" >> %s.tmp && mv %s.tmp %s\nsleep %g\n'
                  'date +%%s.%%N > %s.tmp && echo "$SLURMD_NODENAME" >> %s.tmp && mv %s.tmp %s\nexit 0\n'
                  % (start, start, start, start, p["hold_s"], end, end, end, end))
        t_submit = time.time()
        job = s.sbatch("launch", ["--nodes=1", "--ntasks=1", "--chdir=/", "--output=/dev/null",
                                  "--wrap=%s" % script])
        st, t_running, before, started = s.wait_state(job, lambda x: x not in ("PENDING", "CONFIGURING", None),
                                                      p["job_timeout_s"])
        labels = {"sample": i}
        seen_running = st == "RUNNING"
        running = (started, _bracket_error(started, before or t_submit, t_running)) if seen_running else None
        if seen_running:
            art.add("submit_to_running_s", round(t_running - t_submit, 3), "s", **labels)
            # How late RUNNING may have been seen (one poll).
            art.add("running_seen_within_s", round(t_running - (before or t_submit), 3), "s", **labels)
        else:  # the job ran and ended between two polls: no RUNNING time, only its bound
            art.facts["tests"]["launch"].setdefault("missed_running", []).append(
                {"sample": i, "first_seen": st, "within_s": round(t_running - t_submit, 3)})
        t_waited = time.time()
        st, t_done, before, started = s.wait_state(job, lambda x: x is None or x in TERMINAL, p["job_timeout_s"])
        if st not in (None, "COMPLETED"):
            raise Failed("job %s ended %s" % (job, st))
        done = (started, _bracket_error(started, before or t_waited, t_done))
        if hidden:
            continue
        t_start, t_end = _read_stamp(start, 5.0), _read_stamp(end, 5.0)
        if t_start is None or t_end is None:
            hidden = ("the job's timestamps in %s are not visible from this node: it is not a directory the nodes "
                      "share (set shared_dir)" % shared)
            continue
        samples.append({"labels": labels, "submit": t_submit, "running": running, "done": done,
                        "start": t_start[0], "end": t_end[0], "node": t_start[1]})
    # The script's times are the compute node's clock, the others this host's: each node's clock is read against
    # this host's, and the script's times put on this host's clock, with that reading's uncertainty added to the
    # polls' (a time between a poll's start and the script's is off by at most the poll's bracket).
    clocks = {node: node_clock(s, p, node) for node in sorted({x["node"] for x in samples})}
    if clocks:
        art.facts["node_clocks"] = clocks
    unread = sorted(node for node, c in clocks.items() if "error" in c)
    for x in samples:
        clock = clocks[x["node"]]
        if "error" in clock:
            continue
        off, unc = clock["offset_s"], clock["uncertainty_s"]
        labels = dict(x["labels"], node=x["node"])
        t_start, t_end = x["start"] - off, x["end"] - off
        art.add("submit_to_script_s", round(t_start - x["submit"], 3), "s", **labels)
        art.add("submit_to_script_uncertainty_s", round(unc, 3), "s", **labels)
        if x["running"]:
            art.add("prolog_launch_s", round(t_start - x["running"][0], 3), "s", **labels)
            art.add("prolog_launch_uncertainty_s", round(unc + x["running"][1], 3), "s", **labels)
        art.add("epilog_s", round(x["done"][0] - t_end, 3), "s", **labels)
        art.add("epilog_uncertainty_s", round(unc + x["done"][1], 3), "s", **labels)
    notes = [hidden] if hidden else []
    notes += ["%s's clock could not be read against this host's (%s): its jobs' script times are left out" % (
        node, clocks[node]["error"]) for node in unread]
    if notes:
        art.facts["tests"]["launch"]["note"] = "; ".join(notes)


def salloc_test(s, art, p):
    argv = ["salloc", "--nodes=1", "--ntasks=1", "--immediate=%d" % max(1, int(p["job_timeout_s"]))]
    argv += s.common("salloc")
    argv += [sys.executable, "-c", STEPS_SCRIPT, str(p["srun_steps"])]
    t0 = time.time()
    res = run_cmd(argv, timeout=p["job_timeout_s"] + 30 * p["srun_steps"])
    line = next((x for x in res.stdout.splitlines() if x.startswith("CMXA ")), None)
    if line is None and refusal(res):
        raise NotRun("salloc was not allocated: %s" % refusal(res))
    if line is None:
        raise Failed("salloc: %s" % _last_line(res))
    m = re.search(r"salloc: Granted job allocation (\d+)", res.stderr or "")
    s.ran(m.group(1) if m else None, "salloc")
    doc = json.loads(line[5:])
    art.add("salloc_to_shell_s", round(doc["start"] - t0, 3), "s")
    failed = [x for x in doc["steps"] if x["rc"] != 0]
    for i, step in enumerate(doc["steps"]):
        if step["rc"] == 0:
            art.add("srun_step_s", round(step["s"], 4), "s", step=i)
    if failed:
        raise Failed("%d of %d srun steps failed: %s" % (len(failed), len(doc["steps"]),
                                                            failed[0]["err"].strip() or "rc=%s" % failed[0]["rc"]))


def _sdiag():
    """({message: (count, total_us)} or None, why not): an sdiag that cannot be read costs the RPC counts only,
    not the array-versus-loop times."""
    res = run_cmd(["sdiag"], timeout=20)
    if res.rc != 0:
        return None, _last_line(res)
    try:
        return parse_sdiag_rpcs(res.stdout), None
    except Failed as exc:
        return None, str(exc)


def _wait_name_done(s, name, count, timeout, poll_s):
    """Polls until no job of the name is active (a finished one may already have left squeue: MinJobAge) ->
    the states other than COMPLETED that were seen."""
    t0, ended = time.monotonic(), {}
    while True:
        states = s.name_states(name)
        ended.update({j: st for j, st in states.items() if st in TERMINAL})
        active = [j for j, st in states.items() if st not in TERMINAL]
        if not active:
            return sorted({st for st in ended.values() if st != "COMPLETED"})
        if time.monotonic() - t0 > timeout:
            raise Failed("%d of %d %s jobs still active after %.0f s" % (len(active), count, name, timeout))
        time.sleep(poll_s)


def array_vs_loop_test(s, art, p):
    n = p["jobs"]
    base = ["--nodes=1", "--ntasks=1", "--output=/dev/null", "--chdir=/", "--wrap=true"]
    sdiag_note = None
    for mode in ("array", "loop"):
        before, why = _sdiag()
        t0 = time.monotonic()
        if mode == "array":
            s.sbatch("array", ["--array=0-%d" % (n - 1)] + base)
        else:
            for _ in range(n):
                s.sbatch("loop", base)
        submit_s = time.monotonic() - t0
        bad = _wait_name_done(s, "%s-%s" % (s.prefix, mode), n, p["job_timeout_s"] + n * 5, p["poll_s"])
        done_s = time.monotonic() - t0
        after, why_after = _sdiag()
        art.add("submit_s", round(submit_s, 3), "s", mode=mode, jobs=n)
        art.add("done_s", round(done_s, 3), "s", mode=mode, jobs=n)
        delta = rpc_delta(before, after) if before is not None and after is not None else None
        if delta is not None:
            subs, sub_us, every, every_us = delta
            art.add("submit_rpcs", subs, "count", mode=mode, jobs=n)
            art.add("submit_rpc_ms", round(sub_us / 1000.0, 3), "ms", mode=mode, jobs=n)
            art.add("job_rpcs", every, "count", mode=mode, jobs=n)
            art.add("job_rpc_ms", round(every_us / 1000.0, 3), "ms", mode=mode, jobs=n)
        else:
            sdiag_note = "sdiag: %s" % (why if before is None else why_after if after is None else
                                        "its counters were reset between the two readings")
        if bad:
            raise Failed("%s jobs ended %s" % (mode, ", ".join(bad)))
    if sdiag_note:
        art.facts["tests"]["array_vs_loop"]["note"] = "no controller RPC counts (%s)" % sdiag_note


def default_partition():
    """The partition a job without --partition goes to (sinfo marks it with '*'), or None."""
    res = run_cmd(["sinfo", "-h", "-o", "%P"], timeout=20)
    marked = [x.strip()[:-1] for x in res.stdout.splitlines() if x.strip().endswith("*")]
    return marked[0] if marked else None


def _partition_nodes(p):
    """The nodes of the partition the jobs go to (sinfo -N lists every partition's otherwise)."""
    argv = ["sinfo", "-h", "-N", "-o", "%N|%G|%t|%c"]
    if p["partition"]:
        argv.append("--partition=%s" % p["partition"])
    res = run_cmd(argv, timeout=20)
    if res.rc != 0:
        raise Failed("sinfo: %s" % _last_line(res))
    nodes = {}
    for line in res.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            nodes[parts[0]] = {"gpus": gres_gpus(parts[1]), "state": parts[2], "cpus": parts[3]}
    return nodes


def gres_test(s, art, p, nodes):
    per_node = max([n["gpus"] for n in nodes.values()] or [0])
    if not p["gpu_requests"]:
        raise Skipped("gpu_requests is off")
    if per_node == 0:
        raise Skipped("no node of the partition has GPU GRES (sinfo %G lists no gpu)")
    requests = [("--gres=gpu:%d" % k, k) for k in sorted({1, per_node})] + [("--gpus=1", 1)]
    out = []
    for flag, k in requests:
        argv = ["srun", "--nodes=1", "--ntasks=1", flag, "--immediate=%d" % max(1, int(p["job_timeout_s"]))]
        res = run_cmd(argv + s.common("gres") + ["sh", "-c", GPU_STEP], timeout=p["job_timeout_s"] + 30)
        row = {"flag": flag, "requested": k, "rc": res.rc}
        if res.rc == 0:
            row.update(parse_gpu_step(res.stdout))
            s.ran(row["job"], "gres")
            visible = row["cuda_visible_devices"]
            art.add("gpus_visible", len([x for x in (visible or "").split(",") if x.strip()]), "count",
                    flag=flag, requested=k)
        else:
            row["error"] = _last_line(res)
            if refusal(res) and "JOB=" not in (res.stdout or ""):  # never allocated: nothing to check
                row["refused"] = refusal(res)
        out.append(row)
    art.facts["gres"] = {"gpus_per_node": per_node, "requests": out}
    failed = [r for r in out if r["rc"] != 0]
    ran = [r for r in failed if not r.get("refused")]
    if ran:
        raise Failed("%s: %s" % (ran[0]["flag"], ran[0]["error"]))
    if failed and len(failed) == len(out):
        raise NotRun("%s was not allocated: %s" % (failed[0]["flag"], failed[0]["refused"]))


def exclusive_test(s, art, p):
    try:
        job = s.sbatch("exclusive", ["--nodes=1", "--exclusive", "--output=/dev/null", "--chdir=/",
                                     "--wrap=sleep %d" % int(p["job_timeout_s"])])
    except Failed as exc:
        raise NotRun("the exclusive job was refused: %s" % exc) from None
    try:
        st, _, _, _ = s.wait_state(job, lambda x: x not in ("PENDING", "CONFIGURING", None), p["job_timeout_s"])
    except Failed as exc:  # still pending (a busy or drained partition): it never ran
        why = s.pending_reason(job)
        run_cmd(["scancel", job], timeout=30)  # not left queued behind the tests that follow
        s.never_started(job)
        raise NotRun("%s%s" % (exc, " (Slurm's reason: %s)" % why if why else "")) from None
    if st != "RUNNING":
        raise Failed("the exclusive job %s is %s" % (job, st))
    res = run_cmd(["scontrol", "show", "job", "-o", job], timeout=20)
    fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", res.stdout))
    node = fields.get("NodeList")
    node_fields = slurm_mod.parse_show_node(run_cmd(["scontrol", "show", "node", "-o", node], timeout=20).stdout)
    second = run_cmd(["srun", "--nodes=1", "--ntasks=1", "--nodelist=%s" % node, "--immediate=3"]
                     + s.common("exclusive") + ["true"], timeout=60)
    run_cmd(["scancel", job], timeout=30)
    if refusal(second) and not BUSY.search(second.stderr or ""):  # refused for another reason: nothing tested
        raise NotRun("the second job on %s was refused for another reason than a busy node: %s" % (
            node, refusal(second)))
    # CPUs an exclusive job can have: CPUEfctv (22.05+: CPUTot less CoreSpecCount / CpuSpecList), else CPUTot.
    cpus = (node_fields.get(node) or {}).get("CPUEfctv") or (node_fields.get(node) or {}).get("CPUTot")
    art.facts["exclusive"] = {
        "job": job, "node": node, "job_cpus": int(fields["NumCPUs"]) if fields.get("NumCPUs", "").isdigit() else None,
        "node_cpus": int(cpus) if cpus and cpus.isdigit() else None, "oversubscribe": fields.get("OverSubscribe"),
        "second_job_refused": second.rc != 0 and bool(BUSY.search(second.stderr or "")),
        "second_job_said": _last_line(second)[-300:]}
    if second.rc != 0 and not BUSY.search(second.stderr or ""):
        raise Failed("the second job on %s failed for another reason than a busy node: %s" % (node,
                                                                                               _last_line(second)))


def topology_test(s, art, p, nodes):
    res = run_cmd(["scontrol", "show", "topology"], timeout=20)
    switches = parse_topology(res.stdout)
    if not switches:
        raise Skipped("no topology: %s" % (_last_line(res) if res.rc != 0 or res.stdout.strip() else
                                               "scontrol show topology lists no switch"))
    for sw in switches:
        hl = run_cmd(["scontrol", "show", "hostnames", sw["nodes"]], timeout=20) if sw["nodes"] else None
        sw["node_names"] = hl.stdout.split() if hl is not None and hl.rc == 0 else []
    placements = []
    for i in range(p["placements"]):
        idle = sorted(n for n, f in _partition_nodes(p).items() if f["state"] == "idle")
        argv = ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1",
                "--immediate=%d" % max(1, int(p["job_timeout_s"]))] + s.common("topology")
        res = run_cmd(argv + ["sh", "-c", 'echo "$SLURM_JOB_ID $SLURMD_NODENAME"'], timeout=p["job_timeout_s"] + 30)
        if refusal(res):
            raise NotRun("two-node job %d was not allocated: %s" % (i, refusal(res)))
        if res.rc != 0:
            raise Failed("two-node job %d: %s" % (i, _last_line(res)))
        lines = [line.split() for line in res.stdout.splitlines() if len(line.split()) == 2]
        s.ran(lines[0][0] if lines else None, "topology")
        placements.append({"nodes": sorted({x[1] for x in lines}), "idle_before": idle})
    art.facts["topology"] = {"switches": switches, "placements": placements}


def accounting_test(s, art, p, config):
    acct = {"storage_type": config.get("AccountingStorageType"), "enforce": config.get("AccountingStorageEnforce"),
            "priority_type": config.get("PriorityType"), "tres": config.get("AccountingStorageTRES")}
    art.facts["accounting"] = acct
    ids = sorted({x["id"] for x in s.submitted}, key=lambda x: int(x) if x.isdigit() else 0)
    fmt = "JobIDRaw,JobID,JobName,Account,User,QOS,State,AllocTRES"
    never = {x["id"] for x in s.submitted if x.get("never_started")}
    seen, res = {}, None
    deadline = time.monotonic() + 20  # jobs reach slurmdbd a few seconds after they end
    while ids:
        res = run_cmd(["sacct", "-X", "-P", "-n", "--duplicates", "-S", "now-1days", "-j", ",".join(ids),
                       "--format=%s" % fmt], timeout=30)
        if res.rc != 0:
            break
        seen = {}
        for line in res.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == len(fmt.split(",")):
                seen.setdefault(parts[0], dict(zip(fmt.split(","), parts)))
        # A job that just ended may be listed before its allocation is written: wait for both. A job this probe
        # cancelled before it started (the refused account's when accepted, the exclusive one given up pending)
        # never has one; any other job without one is waited for (slurmdbd may lag its start record).
        started = [row for i, row in seen.items() if i not in never]
        if (set(ids) <= set(seen) and all(row["AllocTRES"] for row in started)) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    acct["sacct_error"] = _last_line(res) if res is not None and res.rc != 0 else None
    acct["jobs"] = [dict(seen.get(i) or {}, JobIDRaw=i, test=next(x["test"] for x in s.submitted if x["id"] == i),
                         in_sacct=i in seen, never_started=i in never) for i in ids]
    user = os.environ.get("USER") or run_cmd(["id", "-un"], timeout=5).stdout.strip()
    assoc = run_cmd(["sacctmgr", "-n", "-P", "show", "assoc", "where", "user=%s" % user,
                     "format=Cluster,Account,User,Partition,QOS,DefaultQOS,Fairshare"], timeout=30)
    acct["associations"] = [line.split("|") for line in assoc.stdout.splitlines() if line.strip()]
    acct["associations_error"] = None if assoc.rc == 0 else _last_line(assoc)
    qos = run_cmd(["sacctmgr", "-n", "-P", "show", "qos", "format=Name,Priority"], timeout=30)
    acct["qos"] = [line.split("|") for line in qos.stdout.splitlines() if line.strip()]
    acct["qos_error"] = None if qos.rc == 0 else _last_line(qos)
    share = run_cmd(["sshare", "-P", "-U"], timeout=30)
    acct["fairshare"] = [line.split("|") for line in share.stdout.splitlines()[1:] if line.strip()]
    acct["fairshare_error"] = None if share.rc == 0 else _last_line(share)


def refused_account_test(s, art, p, run_id):
    account = p["refused_account"] or "clustermax-none-%s" % re.sub(r"[^A-Za-z0-9]", "", run_id)[-12:].lower()
    argv = ["sbatch", "--parsable", "--hold", "--account=%s" % account, "--output=/dev/null", "--chdir=/",
            "--job-name=%s-refused" % s.prefix, "--time=1", "--wrap=true"]
    if p["partition"]:
        argv.append("--partition=%s" % p["partition"])
    s.names.add("%s-refused" % s.prefix)
    res = run_cmd(argv, timeout=60)
    refused = res.rc != 0
    if refused and not re.search(r"account|association", res.stderr or "", re.I):
        raise Failed("sbatch refused the job for another reason than its account: %s" % _last_line(res))
    if not refused:  # accepted: never let it run, and record it so it is cancelled and named
        job = res.stdout.strip().split(";")[0]
        s.submitted.append({"id": job, "test": "refused_account", "name": "%s-refused" % s.prefix})
        run_cmd(["scancel", job], timeout=30)
        s.never_started(job)
    art.facts["refused_account"] = {"account": account, "refused": refused,
                                    "said": _last_line(res)[-300:] if refused else "accepted as job %s" % job}


def run(art, p, out_dir):
    bad = [k for k in ("launch_samples", "srun_steps", "jobs", "placements") if p[k] < 1]
    if bad:
        art.error("%s must be at least 1" % ", ".join(bad))
        return
    why = slurm_mod.available()
    if why:
        art.skip("Slurm cannot be used from this node (%s)" % why)
        return
    config = slurm_mod.parse_scontrol_config(run_cmd(["scontrol", "show", "config"], timeout=20).stdout)
    art.facts["config"] = {k: config.get(k) for k in CONFIG_KEYS if k in config}
    # the tool this artifact measured, named as such (as prometheus does): the report refuses a probes.* artifact
    # whose version is not the probes' the run staged (reports/load.py)
    art.tool.update(name="slurm", version=config.get("SLURM_VERSION"))
    prefix = "cmxa-%s" % re.sub(r"[^A-Za-z0-9-]", "", art.run_id)[-24:]
    shared = p["shared_dir"] or os.path.join(os.path.expanduser("~"), ".clustermax-assess", art.run_id)
    shared = os.path.join(shared, "orchestration-%s" % art.host)
    s = Session(art, p, prefix)
    art.facts["tests"] = {}
    art.facts["job_name_prefix"] = prefix

    def run_test(name, fn, *args):
        art.facts["tests"][name] = {"status": "ok", "reason": None}
        try:
            fn(*args)
        except Skipped as exc:
            art.facts["tests"][name].update(status="skipped", reason=str(exc))
        except NotRun as exc:
            art.facts["tests"][name].update(status="error", reason=str(exc), ran=False)
        except Failed as exc:
            # it ran (or Slurm refused the very thing it tests): the grader fails it
            art.facts["tests"][name].update(status="error", reason=str(exc), ran=True)
        except BaseException as exc:  # the probe's time limit, an interrupt: the jobs are still cancelled below
            art.facts["tests"][name].update(status="error", reason="stopped: %s" % (str(exc) or type(exc).__name__))
            raise

    if not p["partition"]:
        p = dict(p, partition=default_partition() or "")
    try:
        os.makedirs(shared, exist_ok=True)
        try:
            nodes = _partition_nodes(p)
        except Failed as exc:
            art.error(str(exc))
            return
        art.facts["nodes"] = nodes
        art.facts["partition"] = p["partition"]
        run_test("launch", launch_test, s, art, p, shared)
        run_test("salloc", salloc_test, s, art, p)
        run_test("array_vs_loop", array_vs_loop_test, s, art, p)
        run_test("gres", gres_test, s, art, p, nodes)
        run_test("exclusive", exclusive_test, s, art, p)
        run_test("topology", topology_test, s, art, p, nodes)
        run_test("refused_account", refused_account_test, s, art, p, art.run_id)
        run_test("accounting", accounting_test, s, art, p, config)
    finally:
        s.cancel_all()
        left = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            left = s.left_in_queue()
            if not left:
                break
            time.sleep(0.5)
        art.facts["submitted"] = s.submitted
        art.facts["left_in_queue"] = left
        shutil.rmtree(shared, ignore_errors=True)
        parent = os.path.dirname(shared)
        for d in (parent, os.path.dirname(parent)) if not p["shared_dir"] else (parent,):
            try:
                os.rmdir(d)  # only when empty: another host's or run's files stay
            except OSError:
                pass
