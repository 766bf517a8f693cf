"""Audit areas `slurm` and `k8s`: Slurm as each node sees it (slurm.conf, scontrol, plugins), and the Kubernetes
objects the controller read with audit_kubeconfig (kept in the run directory as kubernetes/<kind>.txt)."""

import json
import os
import re

from probes.common import slurm
from reports.phases.audit.common import Error, R, Skip, host_rule, name_list


def _scontrol_only(s):
    """No slurm.conf was read on the node (configless, or not readable by the audit's user): the configuration came
    from `scontrol show config`, and the files beside slurm.conf (gres.conf, cgroup.conf) were not read."""
    return bool(s.get("configless") or s.get("slurm_conf_readable") is False)


def _slurm_cfg(v):
    v.need("slurm")
    return v.slurm().get("config") or {}


@host_rule
def controller(v, c):
    s = v.slurm()
    _slurm_cfg(v)
    live = s.get("source") == "scontrol"
    ver = (s.get("config") or {}).get("SLURM_VERSION") or (v.tool("slurm") or {}).get("version")
    how = "slurmctld answers" if live else "slurm.conf only (slurmctld did not answer)"
    if s.get("configless"):
        how += " (no slurm.conf on the node: configless, read from scontrol show config)"
    elif _scontrol_only(s):
        how += " (%s not readable: read from scontrol show config)" % s.get("slurm_conf")
    return R("pass" if live else "warn", "%s%s" % (how, ", Slurm %s" % ver if ver else ""),
             "slurmctld answers scontrol")


@host_rule
def topology(v, c):
    cfg = _slurm_cfg(v)
    plugin = cfg.get("TopologyPlugin") or ""
    param = cfg.get("TopologyParam") or ""
    flat = plugin in ("", "topology/flat", "topology/none", "topology/default") and "SwitchAsNodeRank" not in param
    return R("fail" if flat else "pass", "TopologyPlugin=%s" % (plugin or "unset"),
             "topology/tree or topology/block (not flat)",
             "without topology, jobs are placed without regard to the network" if flat else None)


def healthcheck_interval(cfg):
    """HealthCheckInterval in seconds ('300 sec' from scontrol, '300' from slurm.conf; unset is slurm.conf(5)'s default
    0, which disables the periodic runs: the program then runs only when slurmd starts). None when unreadable."""
    value = cfg.get("HealthCheckInterval")
    if value in (None, ""):
        return 0
    m = re.match(r"^\s*(\d+)", str(value))
    return int(m.group(1)) if m else None


HEALTHCHECK_ONCE = "runs only when slurmd starts: HealthCheckInterval 0"


@host_rule
def healthcheck(v, c):
    cfg = _slurm_cfg(v)
    prog = cfg.get("HealthCheckProgram")
    expected = "a health check program on every node, run every HealthCheckInterval (> 0)"
    if not prog:
        return R("fail", "HealthCheckProgram unset", expected)
    exists = v.slurm().get("healthcheck_exists")
    obs = "%s every %s (%s)" % (prog, cfg.get("HealthCheckInterval", "0 (unset)"), cfg.get("HealthCheckNodeState", "?"))
    if exists is False:
        return R("fail", obs + "; not found on this node", expected)
    if healthcheck_interval(cfg) == 0:
        return R("warn", obs, expected, "%s (slurm.conf(5): 0 disables the periodic runs), so a node that breaks "
                                        "later is not drained" % HEALTHCHECK_ONCE)
    return R("pass", obs, expected)


@host_rule
def prolog_epilog(v, c):
    cfg = _slurm_cfg(v)
    have = {k: cfg.get(k) for k in ("Prolog", "Epilog") if cfg.get(k)}
    return R("pass" if len(have) == 2 else "warn", name_list("%s=%s" % kv for kv in have.items()) or "none",
             "Prolog and Epilog set (node checks and cleanup around jobs)")


@host_rule
def gres(v, c):
    cfg = _slurm_cfg(v)
    s = v.slurm()
    types = cfg.get("GresTypes") or ""
    node_gres = s.get("node_gres") or ""
    conf = s.get("gres_conf") or []
    ok = "gpu" in types and ("gpu" in node_gres or any("gpu" in x.lower() for x in conf))
    read_here = "%d lines" % len(conf) if s.get("gres_conf") is not None else "absent"
    if "gres_conf" not in s and _scontrol_only(s):
        read_here = "not read (no slurm.conf read on the node)"
    return R("pass" if ok else "fail", "GresTypes=%s; node Gres=%s; gres.conf %s" % (
        types or "unset", node_gres or "?", read_here), "GPUs scheduled as GRES on GPU nodes")


@host_rule
def accounting(v, c):
    cfg = _slurm_cfg(v)
    value = cfg.get("AccountingStorageType") or "unset"
    return R("pass" if value.endswith("slurmdbd") else "warn", "AccountingStorageType=%s" % value,
             "accounting_storage/slurmdbd")


@host_rule
def pyxis(v, c):
    _slurm_cfg(v)
    s = v.slurm()
    lines = [x for x in s.get("plugstack") or [] if "pyxis" in x]
    plugin = v.sec("libraries").get("pyxis_plugin") or []
    enroot = v.tool("enroot")
    ok = bool(lines) and bool(enroot)
    unread = s.get("plugstack") is None and _scontrol_only(s)
    return R("pass" if ok else "warn", "plugstack %s, spank_pyxis.so %s, enroot %s" % (
        "not read (no PlugStackConfig file on the node)" if unread else "has pyxis" if lines else "without pyxis",
        "found" if plugin else "not found",
        (enroot or {}).get("version") or "missing"), "pyxis in plugstack.conf with enroot installed")


@host_rule
def pmix(v, c):
    cfg = _slurm_cfg(v)
    s = v.slurm()
    mpi = s.get("mpi_plugins") or []
    plugin = v.sec("libraries").get("pmix_plugin") or []
    ok = any(m.startswith("pmix") for m in mpi) or bool(plugin)
    return R("pass" if ok else "warn", "MpiDefault=%s; srun --mpi=list: %s; plugins: %s" % (
        cfg.get("MpiDefault", "unset"), name_list(mpi) or "?", name_list(plugin) or "none"), "PMIx available to srun")


@host_rule
def slurmd(v, c):
    _slurm_cfg(v)
    running = "slurmd" in v.daemons()
    return R("pass" if running else "fail", "slurmd %s" % ("running" if running else "not running"),
             "slurmd running on compute nodes")


@host_rule
def node_state(v, c):
    _slurm_cfg(v)
    state = v.slurm().get("node_state")
    if state is None:
        raise Skip("not reported: scontrol show node gave no state for this host (not a Slurm node, or slurmctld "
                   "did not answer)")
    # The state's base and flags (probes/common/slurm.split_state), not words inside it: IDLE+POWERED_DOWN is not
    # down, and MIXED+DRAIN is draining.
    node_phase = slurm.phase({"State": state})
    if node_phase == "available":
        return R("pass", state, "not down, drained or failing")
    return R("fail", state, "not down, drained or failing", "%s: Slurm places no new job on this node" % node_phase)


def gres_gpu_count(gres):
    """The GPUs a node's Gres field offers: 'gpu:8', 'gpu:h100:8', 'gpu:h100:8(S:0-1)', 'gpu:a100:4,gpu:a10:2',
    'gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600' -> 8, 8, 8, 6, 6; None when it names no gpu ('(null)', '')."""
    counts = [int(m.group(1)) for item in re.split(r",(?![^(]*\))", gres or "")
              for m in [re.match(r"^gpu(?::[^:(]+)?:(\d+)", item.strip())] if m]
    return sum(counts) if counts else None


@host_rule
def gres_gpus(v, c):
    _slurm_cfg(v)
    s = v.slurm()
    if s.get("node_state") is None:
        raise Skip("not a Slurm node: scontrol show node gave nothing for this host (or slurmctld did not answer)")
    gpus = v.gpus()
    if any((g.get("mig_mode") or "").lower() == "enabled" for g in gpus):
        raise Skip("not applicable: MIG is enabled, and Slurm then counts MIG devices, which this check does not "
                   "inventory")
    gres = s.get("node_gres")
    count = gres_gpu_count(gres)
    observed = "Gres=%s: %s GPU(s) for Slurm, %d on the node" % (gres or "?", count or 0, len(gpus))
    expected = "the GPUs Slurm schedules = the GPUs on the node"
    if count == len(gpus):
        return R("pass", observed, expected)
    return R("fail", observed, expected, "Slurm would place jobs on %d GPU(s) of a node that has %d" % (
        count or 0, len(gpus)))


@host_rule
def cgroup_devices(v, c):
    """cgroup.conf ConstrainDevices=yes, applied by the task/cgroup plugin (slurm.conf TaskPlugin): without it the
    limit is never set up and jobs see every GPU of the node."""
    cfg = _slurm_cfg(v)
    cg = v.slurm().get("cgroup_conf")
    expected = "ConstrainDevices=yes with TaskPlugin task/cgroup (jobs see only their GPUs)"
    if cg is None and _scontrol_only(v.slurm()):
        raise Skip("not read: no slurm.conf read on this node (configless, or not readable), and scontrol show config "
                   "printed no Cgroup Support Configuration")
    if cg is None:
        return R("fail", "no cgroup.conf", expected)
    value = {k.lower(): x for k, x in cg.items()}.get("constraindevices", "no")
    if value.lower() != "yes":
        return R("fail", "ConstrainDevices=%s" % value, expected)
    task = cfg.get("TaskPlugin")
    if not task:
        return R("warn", "ConstrainDevices=yes; TaskPlugin not read", expected,
                 "the device limit is applied only by task/cgroup, and this node's TaskPlugin was not read")
    if "task/cgroup" not in [p.strip() for p in str(task).split(",")]:
        return R("fail", "ConstrainDevices=yes, TaskPlugin=%s" % task, expected,
                 "without task/cgroup in TaskPlugin the device limit is not applied: jobs see every GPU")
    return R("pass", "ConstrainDevices=yes, TaskPlugin=%s" % task, expected)


@host_rule
def select(v, c):
    cfg = _slurm_cfg(v)
    value = cfg.get("SelectType") or "unset"
    return R("pass" if value == "select/cons_tres" else "warn", "SelectType=%s" % value, "select/cons_tres")


def kubernetes(v):
    """Controller-side cluster objects (role task with audit_kubeconfig) from <run>/kubernetes/."""
    base = os.path.join(v.run.run_dir, "kubernetes")
    if not os.path.isdir(base):
        raise Skip("not applicable: no kubeconfig given (set audit_kubeconfig to read Kubernetes from the controller)")
    out = {}
    for name in ("pods", "storageclasses", "daemonsets"):
        path = os.path.join(base, name + ".txt")
        try:
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as exc:
            raise Error("kubernetes/%s.txt unreadable: %s" % (name, exc)) from exc
        if "error" in doc:
            raise Error("kubectl get %s failed: %s" % (name, doc["error"]))
        out[name] = doc.get("items", [])
    return out


def _k8s_pods(v, pattern):
    k = kubernetes(v)
    names = []
    for p in k["pods"] + k.get("daemonsets", []):
        meta = p.get("metadata") or {}
        text = "%s/%s" % (meta.get("namespace"), meta.get("name"))
        if re.search(pattern, text):
            names.append(text)
    return names


def _k8s_component(pattern, what):
    @host_rule
    def fn(v, c):
        found = _k8s_pods(v, c.get("pattern", pattern))
        return R("pass" if found else "fail", name_list(found) if found else "not found", "%s running" % what)
    return fn


gpu_operator = _k8s_component(r"gpu-operator", "NVIDIA GPU operator")
network_operator = _k8s_component(r"network-operator", "NVIDIA network operator")
device_plugin = _k8s_component(r"device-plugin", "GPU device plugin")


@host_rule
def default_storageclass(v, c):
    scs = kubernetes(v)["storageclasses"]
    default = [s["metadata"]["name"] for s in scs if ((s.get("metadata") or {}).get("annotations") or {}).get(
        "storageclass.kubernetes.io/is-default-class") == "true"]
    return R("pass" if len(default) == 1 else "fail", name_list(default) or "none", "exactly one default StorageClass")


@host_rule
def rwx_storageclass(v, c):
    scs = kubernetes(v)["storageclasses"]
    rwx_provisioners = c.get("rwx_provisioners", [])
    found = [s["metadata"]["name"] for s in scs if any(p in (s.get("provisioner") or "") for p in rwx_provisioners)]
    return R("pass" if found else "warn", name_list(found) or "none", "a ReadWriteMany-capable StorageClass")


@host_rule
def kubelet_cpu_manager(v, c):
    """The kubelet on a GPU node pins a Guaranteed pod's CPUs (policy static): without it, data loaders and NCCL's
    proxy threads share cores with every other pod."""
    v.need("kubernetes_node")
    cm = v.collected("kubernetes", "cpu_manager") or {}
    if not cm.get("state_file") and not cm.get("config_policy") and cm.get("kubelet_dir_unreadable"):
        raise Skip("not permitted: /var/lib/kubelet is not readable by the audit's user")
    if not cm.get("state_file") and not cm.get("config_policy"):
        raise Skip("not applicable: no kubelet on this host (no cpu_manager_state, no cpuManagerPolicy)")
    if cm.get("state_error"):
        return R("warn", cm["state_error"], "CPU manager policy static")
    policy = cm.get("policy") or cm.get("config_policy")
    where = "cpu_manager_state" if cm.get("policy") else "config.yaml cpuManagerPolicy"
    if policy == "static":
        return R("pass", "static (%s)" % where, "CPU manager policy static")
    return R(c.get("status_bad", "warn"), "%s (%s)" % (policy or "none", where), "CPU manager policy static",
             "Guaranteed GPU pods get no exclusive CPUs")


@host_rule
def job_gpu_binding(v, c):
    """A one-GPU job step is told which GPU it holds: Slurm sets CUDA_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES on AMD)
    from gres.conf's device files. Unset, the job sees every GPU of the node and may run on another job's."""
    job = v.tried("job_gpu_env")
    env = job.get("env") or {}
    expected = "srun --gres=gpu:1 sees exactly one GPU in CUDA_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES on AMD)"
    if job.get("rc") != 0:
        err = next((x.strip() for x in (job.get("stderr") or "").splitlines() if x.strip()), "no message")
        if job.get("timed_out"):
            err = "timed out"
        return R(c.get("status_bad", "fail"), "srun --gres=gpu:1 on %s: exit %s: %s" % (
            job.get("node"), job.get("rc"), err[:300]), expected, "a one-GPU job step could not run")
    var = "ROCR_VISIBLE_DEVICES" if v.vendor == "amd" else "CUDA_VISIBLE_DEVICES"
    shown = ", ".join("%s=%s" % kv for kv in sorted(env.items())) or "none of %s set" % var
    value = env.get(var)
    if value is None or value.strip().lower() in ("", "nodevfiles", "void", "none", "-1"):
        return R(c.get("status_bad", "fail"), shown, expected,
                 "the job was given no GPU binding: gres.conf lacks File= (or AutoDetect), so jobs share GPUs")
    devices = [d for d in value.split(",") if d.strip()]
    if len(devices) != 1:
        return R(c.get("status_bad", "fail"), shown, expected, "a one-GPU job sees %d GPUs" % len(devices))
    return R("pass", shown, expected)
