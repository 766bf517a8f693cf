"""What every area of the audit grader shares: reports/data files, the two outcomes a rule raises (Skip, Error),
the host view over one audit artifact, the `applies` conditions, and the marks that make a function a rule.

A rule is a function of an area module (gpu.py, network.py, ... ; grade.py says which area grades which ids),
named as the rubric's `rule`, marked @host_rule (kind audit: fn(view, check) -> R(...)) or @cluster_rule
(kind audit_cluster: fn(check, run, hosts) -> rows).
"""

import json
import os
import re
from datetime import datetime, timezone

from probes.audit.sched import config_from_scontrol, scontrol_sections
from reports import DATA_DIR, yamlio
from reports.grading import expectations, find_artifact, make_row, ungradable

PROBE = "audit"
_DATA = {}
_VIEWS = {}




def data(name):
    """reports/data/<name>.yml, loaded once."""
    if name not in _DATA:
        with open(os.path.join(DATA_DIR, name + ".yml"), encoding="utf-8") as fh:
            _DATA[name] = yamlio.safe_load(fh)
    return _DATA[name]


def gpu_models():
    if "gpus" not in _DATA:
        _DATA["gpus"] = expectations.load_gpus()
    return _DATA["gpus"]


# ------------------------------------------------------------------------------------------------ outcomes


class Skip(Exception):
    """The check does not apply here or its data could not be had for a reason that is not a fault."""


class Error(Exception):
    """The check should apply but its data is broken or missing because of a fault."""


def R(status, observed=None, expected=None, reason=None):
    return status, observed, expected, reason


# A pre-release word after the version (1.4.3-rc.1, 29.7.0~rc.1, 1.0.0-rc93, 2.0.0-beta.2, 1.5.0rc1): below its
# release, as semver's "-" and dpkg's "~" order it. Only these words, after a digit or a separator: a distro revision
# (-0ubuntu3, ~ubuntu.24.04) or a commit hash is no pre-release.
_PART = re.compile(r"(\d+)|(?:(?<=\d)|(?<=[-~.]))(dev|alpha|beta|pre|rc)(?=\d|[-.~+]|$)", re.I)
_PRE_RANK = {"dev": -5, "alpha": -4, "beta": -3, "pre": -2, "rc": -1}


class VKey(tuple):
    """A version key that compares as if the shorter key were padded with zeros, so that a pre-release's negative rank
    (1.4.3-rc.1 -> 1, 4, 3, -1, 1) sorts below its release (1, 4, 3). Slices are plain tuples."""

    def _pad(self, other):
        n = max(len(self), len(other))
        return tuple(self) + (0,) * (n - len(self)), tuple(other) + (0,) * (n - len(other))

    def __lt__(self, other):
        a, b = self._pad(other)
        return a < b

    def __le__(self, other):
        a, b = self._pad(other)
        return a <= b

    def __gt__(self, other):
        a, b = self._pad(other)
        return a > b

    def __ge__(self, other):
        a, b = self._pad(other)
        return a >= b


def vkey(version):
    """'1:570.133.20-0ubuntu1' -> (570, 133, 20, 0, 1): epoch dropped, every digit run a number; a pre-release word
    ('1.4.3-rc.1', '29.7.0~rc.1') a negative number, so it sorts below its release."""
    text = str(version or "")
    if ":" in text.split(".")[0]:
        text = text.split(":", 1)[1]
    parts = [int(number) if number else _PRE_RANK[word.lower()] for number, word in _PART.findall(text)]
    return VKey(parts)


def short_text(value, limit=110):
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def name_list(items, limit=6):
    items = list(items)
    text = ", ".join(str(i) for i in items[:limit])
    return text + (" … (+%d)" % (len(items) - limit) if len(items) > limit else "")


# ------------------------------------------------------------------------------------------------ host view


def with_scontrol_config(facts):
    """A node with no slurm.conf readable (configless Slurm without slurmd's cached copy, slurmctld found by DNS SRV)
    records `scontrol show config` as printed (slurm.scontrol_config: rc, stdout). Its "Key = Value" lines are read
    here into what a slurm.conf gives the rules: slurm.config (the same keys, named as in slurm.conf: SlurmctldHost
    for SlurmctldHost[0], values as scontrol prints them, "300 sec") and, from its "Cgroup Support Configuration"
    section, slurm.cgroup_conf. The facts are not changed; a copy is."""
    s = facts.get("slurm")
    raw = s.get("scontrol_config") if isinstance(s, dict) else None
    if not isinstance(raw, dict) or "config" in s or raw.get("rc") != 0:
        return facts
    text = raw.get("stdout") or ""
    s = dict(s, config=config_from_scontrol(text))
    cgroup = scontrol_sections(text).get("Cgroup Support")
    if "cgroup_conf" not in s and cgroup:
        s["cgroup_conf"] = cgroup
    return dict(facts, slurm=s)


class View:
    """Read access to one host's audit facts, with the conventions every rule shares."""

    def __init__(self, run, host, doc):
        self.run, self.host, self.doc = run, host, doc
        self.f = with_scontrol_config(doc.get("facts") or {})
        self.params = doc.get("params") or {}
        self.sources = self.f.get("sources") or {}

    def param_int(self, name):
        """An inventory expectation recorded in the artifact's params (0 or absent: not given)."""
        try:
            return int(float(self.params.get(name) or 0))
        except (TypeError, ValueError):
            return 0

    def param_flag(self, name, default=False):
        value = self.params.get(name, default)
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)

    def sec(self, name):
        value = self.f.get(name)
        return value if isinstance(value, dict) else {}

    # ---- sources: why a fact is missing
    def need(self, *names):
        """Raise Skip/Error when a source the rule relies on did not give data."""
        for name in names:
            src = self.sources.get(name)
            if src is None:
                if self.doc.get("status") == "error":
                    raise Error("the audit probe failed before reading %s: %s" % (name, self.doc.get("reason")))
                raise Error("the node's audit did not record the source %s" % name)
            status, reason = src.get("status"), src.get("reason") or ""
            if status in ("ok",):
                continue
            if status == "missing":
                raise Skip("tool missing: %s" % reason)
            if status == "not_permitted":
                raise Skip("not permitted: %s" % reason)
            if status == "not_applicable":
                raise Skip("not applicable: %s" % reason)
            raise Error("%s %s: %s" % (name, status, reason))

    def src_status(self, name):
        return (self.sources.get(name) or {}).get("status")

    # ---- GPUs
    @property
    def pci(self):
        return self.sec("pci").get("devices") or {}

    def pci_gpus(self, vendor=None):
        ids = {"nvidia": "0x10de", "amd": "0x1002"}
        return [b for b, d in self.pci.items() if d.get("kind") == "gpu" and
                (vendor is None or (d.get("vendor") or "").lower() == ids[vendor])]

    @property
    def nv(self):
        return self.sec("gpu_nvidia")

    @property
    def nv_gpus(self):
        return self.nv.get("gpus") or []

    @property
    def amd_gpus(self):
        return self.sec("gpu_amd").get("gpus") or []

    @property
    def vendor(self):
        # The PCI bus says whether GPUs are there; nvidia-smi failing on a CPU node built from a GPU image is not
        # a GPU node with a broken driver.
        if self.nv_gpus or self.pci_gpus("nvidia"):
            return "nvidia"
        if self.amd_gpus or self.pci_gpus("amd"):
            return "amd"
        return None

    def gpus(self):
        """GPU readings from the vendor tool; Error when GPUs are on the bus but the tool gave nothing."""
        vendor = self.vendor
        if vendor == "nvidia":
            if self.nv_gpus:
                return self.nv_gpus
            if self.nv.get("tool") is False:
                raise Error("nvidia-smi not found although %d NVIDIA GPU(s) are on the PCI bus"
                            % len(self.pci_gpus("nvidia")))
            raise Error("nvidia-smi gave no GPU: %s" % (self.nv.get("error") or
                                                       (self.sources.get("nvidia_smi") or {}).get("reason")))
        if vendor == "amd":
            if self.amd_gpus:
                return self.amd_gpus
            raise Error("amd-smi gave no GPU although %d AMD GPU(s) are on the PCI bus: %s"
                        % (len(self.pci_gpus("amd")), (self.sources.get("amd_smi") or {}).get("reason")))
        raise Skip("not applicable: no GPU on this host")

    def gpu_names(self):
        try:
            return sorted({g.get("name") for g in self.gpus() if g.get("name")})
        except (Skip, Error):
            return []

    def model_key(self):
        names = self.gpu_names()
        return expectations.gpu_model_key(names[0], gpu_models()) if names else None

    def model_spec(self):
        key = self.model_key()
        return gpu_models().get(key) if key else None

    def driver_version(self):
        if self.vendor == "nvidia":
            return self.nv.get("driver_version") or (self.sec("nvidia_driver").get("proc_version") or {}).get("version")
        return None

    # ---- network
    def rdma(self):
        return self.sec("net").get("rdma") or {}

    def rdma_ports(self):
        """[(device, port, info)] for every RDMA port."""
        out = []
        for dev, info in sorted(self.rdma().items()):
            for port, p in sorted((info.get("ports") or {}).items()):
                out.append((dev, port, p))
        return out

    # ---- processes, listeners
    def daemons(self):
        return set(self.sec("procs").get("daemons") or [])

    def listeners(self, port=None, exposed=None):
        out = []
        for s in self.sec("procs").get("listeners") or []:
            if port is not None and s.get("port") != port:
                continue
            if exposed is not None and bool(not s.get("loopback")) != exposed:
                continue
            out.append(s)
        return out

    def tool(self, name):
        return (self.sec("tools").get(name) or None)

    def slurm(self):
        return self.sec("slurm")

    def sysctl(self, key):
        return (self.sec("system").get("sysctl") or {}).get(key)

    def collected(self, section, key=None):
        """A section (or one key of it) of facts that later versions of the audit added. A run whose audit predates
        them skips the check (regrading an old run must not turn into errors); a section whose collection failed on
        the node is an error with the node's reason."""
        failed = self.sources.get("section:%s" % section)
        if failed:
            raise Error("the audit's %s section failed on the node: %s" % (section, failed.get("reason")))
        facts = self.f.get(section)
        if not isinstance(facts, dict) or (key is not None and key not in facts):
            raise Skip("not collected: this run's audit predates the check (no %s facts)" % (
                section if key is None else "%s.%s" % (section, key)))
        return facts if key is None else facts[key]

    def tried(self, section):
        """The facts of a "does it work" source that later audits added (ssh_peer, job_gpu_env, enroot_import): a
        run that predates it skips; a source not applicable on the node skips with the node's reason; otherwise
        the section (empty when the node gave none)."""
        if section not in self.sources and section not in self.f:
            raise Skip("not collected: this run's audit predates the check (no %s facts)" % section)
        self.need(section)
        return self.sec(section)

    def userland(self, key):
        """What users work with (probes/audit/userland.py), one key of it."""
        self.collected("userland")
        self.need("login_files")
        return self.sec("userland").get(key) or {}

    def started_at(self):
        try:
            return datetime.fromisoformat(str(self.doc.get("started_at")).replace("Z", "+00:00"))
        except ValueError:
            return datetime.now(timezone.utc)


def host_view(run, host, doc):
    key = (id(run), host, id(doc))
    view = _VIEWS.get(key)
    if view is None:
        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        view = _VIEWS[key] = View(run, host, doc)
    return view


# ------------------------------------------------------------------------------------------------ conditions

def is_slurm_node(v):
    """A slurm.conf found, or none readable but `scontrol show config` answered (configless Slurm)."""
    s = v.slurm()
    return bool(s.get("slurm_conf") or s.get("config"))


def is_nvl72(v):
    names = " ".join(v.gpu_names()).upper()
    return any(m in names for m in ("GB200", "GB300")) or any(
        (g.get("fabric_cluster_uuid") or "0").strip("0-") for g in v.nv_gpus)


def _has_nvswitch(v):
    return bool([d for d in v.pci.values() if d.get("kind") == "nvswitch"]) or \
        (v.sec("nvidia_driver").get("nvswitch_devices") or 0) > 0


CONDITIONS = {
    "gpu": lambda v: None if v.vendor else "not applicable: no GPU on this host (none on the PCI bus, none reported "
                                           "by nvidia-smi/amd-smi)",
    "nvidia": lambda v: None if v.vendor == "nvidia" else "not applicable: no NVIDIA GPU on this host",
    "amd": lambda v: None if v.vendor == "amd" else "not applicable: no AMD GPU on this host",
    "rdma": lambda v: None if v.rdma() else "not applicable: no RDMA device on this host",
    "gpu_rdma": lambda v: None if v.vendor and v.rdma() else "not applicable: needs GPUs and RDMA NICs on the host",
    "ib": lambda v: None if any(p.get("link_layer") == "InfiniBand" for _, _, p in v.rdma_ports())
    else "not applicable: no InfiniBand port on this host",
    "roce": lambda v: None if any(p.get("link_layer") == "Ethernet" for _, _, p in v.rdma_ports())
    else "not applicable: no RoCE (RDMA over Ethernet) port on this host",
    "nvswitch": lambda v: None if v.vendor == "nvidia" and _has_nvswitch(v) and not is_nvl72(v)
    else "not applicable: no NVSwitch baseboard on this host",
    "nvl72": lambda v: None if v.vendor == "nvidia" and is_nvl72(v)
    else "not applicable: not a multi-node NVLink (NVL72) node",
    "slurm": lambda v: None if is_slurm_node(v) else "not applicable: no Slurm on this host (no slurm.conf)",
    "slurm_gpu": lambda v: None if is_slurm_node(v) and v.vendor
    else "not applicable: needs Slurm and GPUs on the host",
    "systemd": lambda v: None if v.sec("system").get("pid1") == "systemd"
    else "not applicable: systemd is not PID 1 on this host",
}


def host_rule(fn):
    """Marks fn(view, check) -> R(...) as a rule of kind `audit` (one row per host)."""
    fn.audit_kind = "audit"
    return fn


def cluster_rule(fn):
    """Marks fn(check, run, hosts) -> rows as a rule of kind `audit_cluster` (rows for every host at once)."""
    fn.audit_kind = "audit_cluster"
    return fn


def sysctl_rule(key, ok, expected_text, status_bad="warn"):
    """A rule for one sysctl: pass when ok(value), else status_bad (or the check's own status_bad)."""
    @host_rule
    def fn(v, c):
        value = v.sysctl(key)
        if value is None:
            raise Skip("not applicable: %s not present in this kernel" % key)
        good = ok(value)
        return R("pass" if good else c.get("status_bad", status_bad), "%s = %s" % (key, value), expected_text)
    return fn


def graded_view(check, run, host):
    """(view, None) when the host's audit facts can be graded, else (None, the row that says why not)."""
    row = ungradable(check, run, host, probe=PROBE)
    if row:
        return None, row
    doc = find_artifact(run, host, PROBE)
    if not doc.get("facts"):
        return None, make_row(check, host, "error", reason="audit failed: %s" % doc.get("reason"))
    return host_view(run, host, doc), None


def graded_views(check, run, hosts):
    """For cluster rules: the rows of the hosts that cannot be graded, and the views of those that can."""
    rows, views = [], {}
    for host in hosts:
        view, row = graded_view(check, run, host)
        if row:
            rows.append(row)
        else:
            views[host] = view
    return rows, views


def rubric_check(check_id):
    """The rubric.d/audit.yml entry with this id: for what a report section shows beside the rows."""
    return next(c for c in data("rubric.d/audit")["checks"] if c["id"] == check_id)
