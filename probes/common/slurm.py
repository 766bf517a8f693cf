"""Slurm as the destructive phase sees it: node state from `scontrol show node -o`, and the few actions it takes
(drain, resume, a fresh job on one node). Everything runs as argv lists with timeouts (probes.common.command.run_cmd).

A node's state is reduced to a phase that every scheduler shares (probes/common/sched.py), the one meaning of
"down" in this project (the SLA review's "out of service" is every phase but available):
- available: Slurm would place work on the node, including a node powered off, powering up or powering down by
  power saving (Slurm powers it up for the job) and one in a maintenance reservation;
- draining (DRAIN with jobs still running), drained (DRAIN, idle);
- down: base state DOWN, FAIL, FUTURE or UNKNOWN, or a flag that keeps work off the node (NOT_RESPONDING, FAIL,
  REBOOT_ISSUED, an invalid registration);
- missing (the scheduler no longer knows the node), unknown (the state could not be read).
"""

import re
import time

from probes.common.command import run_cmd

SCONTROL = "scontrol"
SRUN = "srun"
# Flags that take a node out of service whatever its base state.
# Power saving (POWERED_DOWN, POWERING_UP, POWERING_DOWN, POWER_DOWN) is not among them: Slurm powers such a node
# up for the next job, as the provider configured it, so it is neither out of service nor the provider's downtime.
DOWN_FLAGS = {"NOT_RESPONDING", "FAIL", "FAILING", "REBOOT_ISSUED", "INVALID_REG", "INVALID", "ERROR"}
DRAIN_FLAGS = {"DRAIN", "DRAINING", "DRAINED"}
BUSY_BASES = {"ALLOCATED", "MIXED", "COMPLETING"}
# sinfo's short state names (%t, the default table) -> (base, flags) in scontrol's words
SHORT_STATES = {"ALLOC": ("ALLOCATED", set()), "MIX": ("MIXED", set()), "COMP": ("ALLOCATED", {"COMPLETING"}),
                "COMPLETING": ("ALLOCATED", {"COMPLETING"}), "DRNG": ("ALLOCATED", {"DRAIN"}),
                "FAILG": ("ALLOCATED", {"FAILING"}), "FAILING": ("ALLOCATED", {"FAILING"}),
                "FUTR": ("FUTURE", set()), "UNK": ("UNKNOWN", set()), "INVAL": ("UNKNOWN", {"INVALID"}),
                "RESV": ("IDLE", {"RESERVED"}), "RESERVED": ("IDLE", {"RESERVED"}), "MAINT": ("IDLE", {"MAINT"}),
                "PLND": ("IDLE", {"PLANNED"}), "PLANNED": ("IDLE", {"PLANNED"}), "NPC": ("ALLOCATED", {"PERFCTRS"}),
                "POW_DN": ("IDLE", {"POWERED_DOWN"}), "POW_UP": ("IDLE", {"POWERING_UP"}),
                "BOOT": ("IDLE", {"REBOOT_ISSUED"}), "BLOCK": ("IDLE", {"BLOCKED"})}
_KEY_RE = re.compile(r"(?:^|\s)([A-Z][A-Za-z_]*)=")
# The fields scontrol prints after Reason= (SchedMD src/api/node_info.c, slurm_sprint_node_table: Comment, Extra,
# InstanceId / InstanceType, ReservationName, each only when set; 20.11 printed Comment=(null) always). The reason is
# free text, so it ends where the first of these begins; on one line (-o) they follow it: "Reason=planned_maintenance
# [root@2026-07-22T23:31:17] ReservationName=maintenance-2026" (Slurm 25.11.2).
AFTER_REASON = ("Comment", "Extra", "InstanceId", "InstanceType", "ReservationName")
_AFTER_REASON_RE = re.compile(r" (?:%s)=" % "|".join(AFTER_REASON))
# Slurm's stamp on a reason, " [user@time]" (node_info.c: the user name, slurm_make_time_str's time). Not anchored at
# the end: fields may follow (above), and a reason of several lines carries it after its first line.
_STAMP_RE = re.compile(r"\s*\[(?P<user>[^@\]]+)@(?P<time>[0-9T:\-]+)\]")


def _records(text):
    """One line per node: `scontrol show node -o` lines as they are, the multi-line form's records joined in order
    (scontrol prints the same fields in the same order either way, one space where the multi-line form breaks)."""
    records, cur = [], None
    for line in (text or "").replace("\r", "").splitlines():
        if line.lstrip().startswith("NodeName="):
            line = line.lstrip()
            if cur:
                records.append(cur)
            cur = [line.rstrip()]
        elif line.strip() and cur:
            cur.append(line.strip())
        elif cur:
            records.append(cur)
            cur = None
    if cur:
        records.append(cur)
    return [" ".join(parts) for parts in records]


def parse_show_node(text):
    """`scontrol show node -o` (one line a node) or `scontrol show node` (multi-line records) output ->
    {node name: {field: value}}.

    Values may hold spaces (OS=Linux 6.8 #1 SMP ...); Reason keeps the rest of its line up to the first of the
    fields printed after it (AFTER_REASON), which are read as fields. Lines such as "Node x not found" are ignored.
    """
    nodes = {}
    for line in _records(text):
        reason = None
        idx = line.find(" Reason=")
        if idx >= 0:
            rest = line[idx + len(" Reason="):]
            after = _AFTER_REASON_RE.search(rest)
            reason = rest[:after.start()] if after else rest
            line = line[:idx] + (rest[after.start():] if after else "")
        matches = list(_KEY_RE.finditer(line))
        fields = {}
        for i, m in enumerate(matches):
            end = matches[i + 1].start() if i + 1 < len(matches) else len(line)
            fields[m.group(1)] = line[m.end():end].strip()
        if reason is not None:
            fields["Reason"] = reason
        nodes[fields["NodeName"]] = fields
    return nodes


def parse_scontrol_config(text):
    """`scontrol show config`: 'Key                     = Value' lines -> {key: value}."""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(\S+)\s+= (.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def config_value(key, timeout=20.0):
    """(value, None) of one parameter as `scontrol show config` prints it ("1" for ReturnToService 1), or
    (None, why) when it cannot be read."""
    res = run_cmd([SCONTROL, "show", "config"], timeout=timeout)
    config = parse_scontrol_config(res.stdout)
    if key in config:
        return config[key], None
    if res.rc != 0 or not config:
        why = (res.stderr or res.stdout or "").strip().splitlines()
        return None, "scontrol show config: %s" % (why[-1] if why else "rc=%s" % res.rc)
    return None, "scontrol show config prints no %s" % key


def split_state(state):
    """'IDLE+DRAIN+NOT_RESPONDING' -> ('IDLE', {'DRAIN', 'NOT_RESPONDING'}); sinfo-style '*' and '~' suffixes and
    its names for drained and draining nodes ('drained' -> ('IDLE', {'DRAIN'})) too."""
    state = (state or "").strip().upper()
    flags = set()
    while state and state[-1] in "*~#!%$@^-":
        flags.add({"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP", "!": "POWERING_DOWN",
                   "%": "POWERING_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED", "^": "REBOOT_ISSUED",
                   "-": "PLANNED"}[state[-1]])
        state = state[:-1]
    parts = [p for p in state.split("+") if p]
    base = parts[0] if parts else "UNKNOWN"
    flags.update(parts[1:])
    base, extra = SHORT_STATES.get(base, (base, set()))
    flags.update(extra)
    if base in ("DRAINED", "DRAINING", "DRAIN", "DRNG"):
        flags.add("DRAIN")
        base = "ALLOCATED" if base in ("DRAINING", "DRNG") else "IDLE"
    return base, flags


def phase(fields):
    """The shared phase of one node from its scontrol fields; unknown when they carry no state at all."""
    if not (fields.get("State") or "").strip():
        return "unknown"
    base, flags = split_state(fields.get("State"))
    if base in ("DOWN", "FAIL", "FUTURE", "UNKNOWN") or flags & DOWN_FLAGS:
        return "down"
    if flags & DRAIN_FLAGS:
        busy = base in BUSY_BASES or "COMPLETING" in flags
        return "draining" if busy else "drained"
    return "available"


def split_reason(reason):
    """'Not responding [slurm@2021-10-19T12:56:19]' -> ('Not responding', 'slurm', '2021-10-19T12:56:19'): the
    reason without Slurm's stamp, the stamp's user and time as printed (None, None without a stamp). The last stamp
    is Slurm's: it comes after the reason's text, which may itself quote an older one."""
    reason = (reason or "").strip()
    stamps = list(_STAMP_RE.finditer(reason))
    if not stamps:
        return reason, None, None
    stamp = stamps[-1]
    text = (reason[:stamp.start()] + reason[stamp.end():]).strip()
    return text, stamp.group("user"), stamp.group("time")


def reason_text(fields):
    """The Reason without Slurm's ' [user@time]' stamp."""
    return split_reason(fields.get("Reason"))[0]


def pool(fields):
    """The node's partitions as a sorted comma string (what a hot spare must share with the node it replaces: a node
    resumed in another partition brings this pool nothing), or None where scontrol names none."""
    parts = sorted(p for p in (fields.get("Partitions") or "").split(",") if p and p != "(null)")
    return ",".join(parts) or None


def reason_time(fields):
    """When the Reason was set, from Slurm's ' [user@time]' stamp (slurmctld's local time, this node's zone: a
    cluster's nodes share one), in seconds since the epoch; None without a stamp."""
    stamp = split_reason(fields.get("Reason"))[2]
    if not stamp:
        return None
    try:
        return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))
    except (ValueError, OverflowError):
        return None


def sample(name, fields, t):
    if fields is None:
        return {"t": t, "node": name, "phase": "missing", "state": None, "reason": None, "pool": None}
    return {"t": t, "node": name, "phase": phase(fields), "state": fields.get("State"),
            "reason": reason_text(fields) or None, "reason_at": reason_time(fields), "pool": pool(fields),
            "boot_time": fields.get("BootTime"), "slurmd_start": fields.get("SlurmdStartTime")}


def samples(names, nodes, t, others=False):
    """The samples of one reading ({node: fields}): one per named node (missing when not listed), then with others
    one per other node listed, marked "other"."""
    out = [sample(n, nodes.get(n), t) for n in names]
    if others:
        out += [dict(sample(n, nodes[n], t), other=True) for n in sorted(set(nodes) - set(names))]
    return out


def read(names, t, timeout=20.0, others=False):
    """One sample per node. A failed scontrol gives phase unknown for every named node, with the error as reason
    (and nothing about the others: a failed reading says nothing about them).

    others: read every node the scheduler lists (`scontrol show node -o` without names: one command however many
    nodes), the named ones as without, the others after them marked "other"."""
    argv = [SCONTROL, "show", "node", "-o"]
    if names and not others:
        argv.append(",".join(names))
    res = run_cmd(argv, timeout=timeout)
    nodes = parse_show_node(res.stdout)
    if not nodes and res.rc != 0:
        why = (res.stderr or res.stdout).strip().splitlines()
        why = why[-1] if why else "rc=%s" % res.rc
        if (not others and not res.missing and not res.timed_out and len(names) == 1
                and re.search(r"^Node \S+ not found", why)):
            return [sample(names[0], None, t)]
        return [{"t": t, "node": n, "phase": "unknown", "state": None, "reason": "scontrol: %s" % why}
                for n in names]
    return samples(names, nodes, t, others)


def available():
    """Why Slurm cannot be used from here, or None."""
    res = run_cmd([SCONTROL, "ping"], timeout=15)
    if res.missing:
        return "scontrol not found"
    if res.rc != 0 or "UP" not in res.stdout:
        return "scontrol ping: %s" % ((res.stdout + res.stderr).strip().splitlines() or ["no answer"])[-1]
    return None


def drain(name, reason):
    return run_cmd([SCONTROL, "update", "NodeName=%s" % name, "State=DRAIN", "Reason=%s" % reason], timeout=30)


def resume(name):
    return run_cmd([SCONTROL, "update", "NodeName=%s" % name, "State=RESUME"], timeout=30)


def job_argv(name, command, wait_s, job_name="clustermax-assess"):
    """A fresh one-task job on exactly this node; --immediate so a node that cannot run it fails fast."""
    return [SRUN, "--nodelist=%s" % name, "--nodes=1", "--ntasks=1", "--immediate=%d" % max(1, int(wait_s)),
            "--time=5", "--job-name=%s" % job_name] + list(command)


def job(name, command, wait_s=30, timeout=120.0):
    return run_cmd(job_argv(name, command, wait_s), timeout=timeout)
