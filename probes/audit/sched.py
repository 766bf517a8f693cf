"""Scheduler facts for the audit: Slurm's configuration (live `scontrol show config` when the controller answers,
else slurm.conf; with no slurm.conf readable, the raw `scontrol show config` for the controller to read), plugstack
(pyxis), gres.conf, cgroup.conf, `srun --mpi=list` (PMIx), this node's state; and whether this node is a Kubernetes
node (kubelet). Kubernetes cluster objects are read on the controller."""

import glob
import json
import os
import re
import socket

from probes.audit.collect import read, read_key_values
from probes.common import slurm
from probes.common.slurm import parse_scontrol_config  # noqa: F401 - the plain parser, for callers of this module

# Where slurm.conf is looked for ($SLURM_CONF first). /run/slurm/conf/slurm.conf is slurmd's cached copy on a
# configless compute node (slurmd --conf-server, Slurm >= 20.02; linked there since 22.05), where scontrol finds it;
# the cache itself is <SlurmdSpoolDir>/conf-cache (/var/spool/slurmd by default). A node with none of these readable
# (configless without the cache, slurmctld found by DNS SRV) is read from `scontrol show config` (configless()).
SLURM_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf", "/usr/local/etc/slurm.conf",
               "/etc/slurm/slurm.conf.d/slurm.conf", "/run/slurm/conf/slurm.conf",
               "/var/spool/slurmd/conf-cache/slurm.conf")
SLURM_KEYS = ("ClusterName", "SlurmctldHost", "ControlMachine", "TopologyPlugin", "TopologyParam",
              "HealthCheckProgram", "HealthCheckInterval", "HealthCheckNodeState", "Prolog", "Epilog",
              "PrologSlurmctld", "PrologFlags", "TaskPlugin", "TaskPluginParam", "ProctrackType", "SelectType",
              "SelectTypeParameters", "GresTypes", "AccountingStorageType", "JobAcctGatherType", "MpiDefault",
              "PlugStackConfig", "SwitchType", "ReturnToService", "SlurmdTimeout", "JobCompType", "SLURM_VERSION")


def parse_slurm_conf(text):
    """Top-level `Key=Value` parameters of slurm.conf (NodeName/PartitionName lines are counted, not parsed)."""
    params = {}
    nodes = partitions = 0
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.strip()
        if key.lower() == "nodename":
            nodes += 1
            continue
        if key.lower() == "partitionname":
            partitions += 1
            continue
        if " " not in key:
            params[key] = value.strip()
    return params, nodes, partitions


def _select(params):
    lower = {k.lower(): v for k, v in params.items()}
    out = {}
    for key in SLURM_KEYS:
        value = lower.get(key.lower())
        if value not in (None, "", "(null)"):
            out[key] = value
    return out


_SECTION = re.compile(r"^([A-Za-z][\w /]*) Configuration:$")


def scontrol_sections(text):
    """`scontrol show config` -> {section: {key: value}}: "" for the slurm.conf parameters (after the
    "Configuration data as of ..." line), then the sections it prints below them ("Cgroup Support", "MPI Plugins",
    "Account Gather", ...: src/api/config_info.c). Values as printed ("300 sec", "(null)")."""
    out, section = {"": {}}, ""
    for line in (text or "").splitlines():
        head = _SECTION.match(line.strip())
        if head:
            section = head.group(1)
            out.setdefault(section, {})
            continue
        m = re.match(r"^(\S+)\s+= ?(.*)$", line)
        if m:
            out.setdefault(section, {})[m.group(1)] = m.group(2).strip()
    return out


def scontrol_params(params):
    """scontrol's names -> slurm.conf's: the indexed lists (SlurmctldHost[0], SlurmctldHost[1]; Prolog[0] and
    Epilog[0] in recent Slurm) become one comma-joined value under the plain name, as slurm.conf writes them."""
    out, lists = {}, {}
    for key, value in params.items():
        m = re.match(r"^(\w+)\[(\d+)\]$", key)
        if m:
            lists.setdefault(m.group(1), []).append((int(m.group(2)), value))
        else:
            out[key] = value
    for key, items in lists.items():
        out.setdefault(key, ",".join(v for _, v in sorted(items)))
    return out


def config_from_scontrol(text):
    """The selected slurm.conf parameters (SLURM_KEYS) of an `scontrol show config` output, named as in slurm.conf."""
    return _select(scontrol_params(scontrol_sections(text)[""]))


def plugstack_lines(path):
    """Non-comment lines of plugstack.conf and the files it includes (pyxis registers itself there)."""
    lines = []
    if not path:
        return lines
    for p in [path] + sorted(glob.glob(os.path.join(os.path.dirname(path), "plugstack.conf.d", "*"))):
        for line in (read(p) or "").splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                lines.append(line[:200])
    return lines


def configless(c, out, conf_path):
    """No slurm.conf readable on this node (configless Slurm without slurmd's cached copy, slurmctld found by DNS
    SRV, or a file the audit's user may not read): `scontrol show config` as it printed it, with its exit status, for
    the controller to read (reports/phases/audit/common.py). Returns False when there is no Slurm to read."""
    live = c.cmd("scontrol_config", ["scontrol", "show", "config"], timeout=6, record=False)
    if live.missing:
        if conf_path:
            c.mark("slurm", "not_permitted", "%s is not readable (and no scontrol)" % conf_path)
        else:
            c.mark("slurm", "not_applicable", "no Slurm on this node (no slurm.conf, no scontrol)")
        return False
    said = next((x.strip() for x in (live.stderr or live.stdout or "").splitlines() if x.strip()), "no output")
    out["scontrol_config"] = {"rc": live.rc, "stdout": (live.stdout or "")[:131072],
                              "stderr": (live.stderr or "")[:2000], "timed_out": bool(live.timed_out)}
    if live.rc != 0 or not scontrol_sections(live.stdout)[""]:
        why = "timed out" if live.timed_out else "exit %s: %s" % (live.rc, said[:200])
        if conf_path:
            c.mark("slurm", "not_permitted", "%s is not readable; scontrol show config %s" % (conf_path, why))
        else:
            c.mark("slurm", "not_applicable", "no Slurm on this node (no slurm.conf; scontrol show config %s)" % why)
        return False
    c.mark("scontrol_config", "ok")
    c.mark("slurm", "ok", "%s: read from scontrol show config" % (
        "%s is not readable" % conf_path if conf_path else "no slurm.conf on this node"))
    out.update(source="scontrol", configless=not conf_path, slurm_conf_readable=False)
    return True


def collect(c):
    conf_path = os.environ.get("SLURM_CONF") or next((p for p in SLURM_CONFS if os.path.exists(p)), None)
    out = {"slurm_conf": conf_path}
    text = read(conf_path) if conf_path else None
    if text is None:
        if not configless(c, out, conf_path):
            return out
        # the node-local files the configuration names: read here, the configuration itself on the controller
        cfg = config_from_scontrol(out["scontrol_config"]["stdout"])
        plug = cfg.get("PlugStackConfig")
        out["plugstack"] = plugstack_lines(plug) if plug and os.path.exists(plug) else None
        _node_facts(c, out, cfg)
        return out
    params, nodes, partitions = parse_slurm_conf(text)
    out.update(nodes_defined=nodes, partitions_defined=partitions, source="slurm.conf")
    live = c.cmd("scontrol_config", ["scontrol", "show", "config"], timeout=6)
    if live.rc == 0:
        params = scontrol_params(scontrol_sections(live.stdout)[""])
        out["source"] = "scontrol"
    out["config"] = _select(params)
    c.mark("slurm", "ok")
    conf_dir = os.path.dirname(conf_path)
    plug = out["config"].get("PlugStackConfig") or os.path.join(conf_dir, "plugstack.conf")
    out["plugstack"] = plugstack_lines(plug if os.path.exists(plug) else None)
    gres = read(os.path.join(conf_dir, "gres.conf"))
    out["gres_conf"] = [line.split("#", 1)[0].strip() for line in (gres or "").splitlines()
                        if line.split("#", 1)[0].strip()][:50] if gres is not None else None
    cgroup = read(os.path.join(conf_dir, "cgroup.conf"))
    out["cgroup_conf"] = read_key_values(cgroup) if cgroup is not None else None
    out["topology_conf"] = os.path.exists(os.path.join(conf_dir, "topology.conf"))
    _node_facts(c, out, out["config"])
    return out


def _node_facts(c, out, cfg):
    """What srun and scontrol say of this node, and whether the health check program is on it."""
    mpi = c.cmd("srun_mpi_list", ["srun", "--mpi=list"], timeout=6)
    if mpi.rc == 0:
        out["mpi_plugins"] = sorted(set(re.findall(r"\b(pmix\S*|pmi2|cray_shasta|none)\b", mpi.stdout + mpi.stderr)))
    node = c.cmd("slurm_node", ["scontrol", "show", "node", socket.gethostname().split(".")[0], "-o"], timeout=6)
    if node.rc == 0:
        fields = next(iter(slurm.parse_show_node(node.stdout).values()), None)
        out["node_state"] = fields.get("State") if fields else None
        out["node_phase"] = slurm.phase(fields) if fields else None  # the shared meaning of the state
        out["node_gres"] = fields.get("Gres") if fields else None
    hc = cfg.get("HealthCheckProgram")
    if hc:
        out["healthcheck_exists"] = os.path.exists(hc.split()[0])


def kubelet_anonymous_auth(text):
    """authentication.anonymous.enabled of a KubeletConfiguration (YAML read without a YAML library)."""
    m = re.search(r"^authentication:\s*\n(?:[ \t]+.*\n)*?[ \t]+anonymous:\s*\n[ \t]+enabled:\s*(true|false)",
                  text or "", re.M)
    return None if not m else m.group(1) == "true"


def collect_kubernetes(c):
    kubelet_conf = next((p for p in ("/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/config.yaml")
                         if os.path.exists(p)), None)
    config = read("/var/lib/kubelet/config.yaml")
    c.mark("kubernetes_node", "ok")
    return {"kubelet_config": kubelet_conf, "anonymous_auth": kubelet_anonymous_auth(config) if config else None,
            "cpu_manager": dict(cpu_manager(read(CPU_MANAGER_STATE), config),
                                kubelet_dir_unreadable=os.path.isdir("/var/lib/kubelet")
                                and not os.access("/var/lib/kubelet", os.R_OK | os.X_OK))}


CPU_MANAGER_STATE = "/var/lib/kubelet/cpu_manager_state"


def cpu_manager(state_text, config_text):
    """The kubelet's CPU manager policy: what it runs with (cpu_manager_state's policyName, JSON) and what its config
    asks for (cpuManagerPolicy in config.yaml). A state file that is not JSON is recorded as such."""
    out = {"state_file": state_text is not None, "policy": None, "state_error": None,
           "config_policy": None}
    if state_text is not None:
        try:
            out["policy"] = json.loads(state_text).get("policyName")
        except (ValueError, AttributeError) as exc:
            out["state_error"] = "%s: %s" % (CPU_MANAGER_STATE, exc)
    m = re.search(r"^cpuManagerPolicy:\s*[\"']?([A-Za-z]+)", config_text or "", re.M)
    out["config_policy"] = m.group(1) if m else None
    return out
