"""Grading of the audit: every rubric.d/audit.yml check, for every host, from the audit artifact's raw facts.

Two check kinds, registered in reports/grading/engine.py:
  audit          one row per host: `rule` names a function of RULES below; `applies` lists conditions
                 (no GPU, no RDMA, no Slurm ...) that turn the check into a skip with that reason; a source the
                 rule needs that was missing / not permitted / failed on the node becomes skip or error with
                 the node's own reason.
  audit_cluster  rows for every host from all hosts at once (one GPU model across the cluster, and the
                 consistency view: facts compared across hosts, odd ones out named).

Every threshold, expected value and version minimum comes from the check entry or from reports/data
(minimum_versions.yml, xid.yml, gpus.yml); nothing here is specific to one cluster.
"""

import fnmatch
import json
import os
import re
from collections import Counter
from datetime import datetime, timezone

import yaml

from reports.grading import engine as G
from reports.grading import expectations

PROBE = "audit"
_DATA = {}
_VIEWS = {}


# ------------------------------------------------------------------------------------------------ data files


def data(name):
    """reports/data/<name>.yml, loaded once."""
    if name not in _DATA:
        with open(os.path.join(G.DATA_DIR, name + ".yml"), encoding="utf-8") as fh:
            _DATA[name] = yaml.safe_load(fh)
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


def vkey(version):
    """'1:570.133.20-0ubuntu1' -> (570, 133, 20, 0, 1): epoch dropped, every digit run a number."""
    text = str(version or "")
    if ":" in text.split(".")[0]:
        text = text.split(":", 1)[1]
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _short(value, limit=110):
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _names(items, limit=6):
    items = list(items)
    text = ", ".join(str(i) for i in items[:limit])
    return text + (" … (+%d)" % (len(items) - limit) if len(items) > limit else "")


# ------------------------------------------------------------------------------------------------ host view


class View:
    """Read access to one host's audit facts, with the conventions every rule shares."""

    def __init__(self, run, host, doc):
        self.run, self.host, self.doc = run, host, doc
        self.f = doc.get("facts") or {}
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

    def started_at(self):
        try:
            return datetime.fromisoformat(str(self.doc.get("started_at")).replace("Z", "+00:00"))
        except ValueError:
            return datetime.now(timezone.utc)


def _view(run, host, doc):
    key = (id(run), host, id(doc))
    view = _VIEWS.get(key)
    if view is None:
        if len(_VIEWS) > 4096:
            _VIEWS.clear()
        view = _VIEWS[key] = View(run, host, doc)
    return view


# ------------------------------------------------------------------------------------------------ conditions

def _is_nvl72(v):
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
    "nvswitch": lambda v: None if v.vendor == "nvidia" and _has_nvswitch(v) and not _is_nvl72(v)
    else "not applicable: no NVSwitch baseboard on this host",
    "nvl72": lambda v: None if v.vendor == "nvidia" and _is_nvl72(v)
    else "not applicable: not a multi-node NVLink (NVL72) node",
    "slurm": lambda v: None if v.slurm().get("slurm_conf") else "not applicable: no Slurm on this host (no slurm.conf)",
    "slurm_gpu": lambda v: None if v.slurm().get("slurm_conf") and v.vendor
    else "not applicable: needs Slurm and GPUs on the host",
    "systemd": lambda v: None if v.sec("system").get("pid1") == "systemd"
    else "not applicable: systemd is not PID 1 on this host",
}


# ------------------------------------------------------------------------------------------------ rules

RULES = {}
CLUSTER_RULES = {}


def rule(name):
    def deco(fn):
        RULES[name] = fn
        return fn
    return deco


def cluster_rule(name):
    def deco(fn):
        CLUSTER_RULES[name] = fn
        return fn
    return deco


def _gpu_list(v, key, pred):
    """Indexes of the GPUs whose reading `key` matches pred; readings that are absent are ignored."""
    return [g["index"] for g in v.gpus() if g.get(key) is not None and pred(g.get(key))]


def _require_readings(v, key, what):
    gpus = v.gpus()
    if all(g.get(key) is None for g in gpus):
        raise Skip("not reported: %s gives no %s for %s" % ("nvidia-smi" if v.vendor == "nvidia" else "amd-smi",
                                                          what, ", ".join(v.gpu_names()) or "these GPUs"))
    return gpus


# ---- GPU and hardware --------------------------------------------------------------------------------------

@rule("gpu_inventory")
def r_gpu_inventory(v, c):
    on_bus = len(v.pci_gpus(v.vendor))
    seen = len(v.gpus())
    obs = "%d on the PCI bus, %d seen by %s" % (on_bus, seen, "nvidia-smi" if v.vendor == "nvidia" else "amd-smi")
    if on_bus and seen < on_bus:
        return R("fail", obs, "every GPU on the bus is usable", "%d GPU(s) invisible to the driver" % (on_bus - seen))
    return R("pass", obs, "every GPU on the bus is usable")


@rule("gpu_count")
def r_gpu_count(v, c):
    n = len(v.gpus())
    expected = v.param_int("expected_gpu_count")
    how = "audit_expected_gpu_count"
    if not expected:
        key = v.model_key()
        expected = (c.get("per_model") or {}).get(key)
        how = "%s per node" % key
    if not expected:
        raise Skip("no expected GPU count for %s: set audit_expected_gpu_count"
                   % (_names(v.gpu_names()) or "this model"))
    status = "pass" if n == int(expected) else "fail"
    return R(status, "%d GPUs" % n, "%d (%s)" % (int(expected), how))


@rule("gpu_model_node")
def r_gpu_model_node(v, c):
    names = v.gpu_names()
    return R("pass" if len(names) == 1 else "fail", _names(names) or "none", "one GPU model on the node")


@rule("gpu_driver_loaded")
def r_driver_loaded(v, c):
    if v.vendor == "nvidia":
        drv = v.sec("nvidia_driver")
        nv = v.nv
        if nv.get("tool") is False:
            return R("fail", "nvidia-smi not installed; nvidia module %s" % ("loaded" if drv.get("module_loaded")
                                                                            else "not loaded"),
                     "driver loaded, nvidia-smi works")
        if nv.get("rc") not in (0, None) or not v.nv_gpus:
            return R("fail", "nvidia-smi exit %s: %s" % (nv.get("rc"), nv.get("error") or "no GPU"),
                     "driver loaded, nvidia-smi works",
                     "exit 9 means the driver is not loaded" if nv.get("rc") == 9 else None)
        return R("pass", "driver %s loaded (%s)" % (v.driver_version(),
                 "open kernel module" if (drv.get("proc_version") or {}).get("open_kernel_module") else
                 "proprietary kernel module"), "driver loaded, nvidia-smi works")
    amd = v.sec("gpu_amd")
    if not amd.get("amdgpu_loaded") and not v.amd_gpus:
        return R("fail", "amdgpu module not loaded", "amdgpu loaded, amd-smi works")
    if not v.amd_gpus:
        return R("fail", "amd-smi gave no GPU: %s" % amd.get("error"), "amdgpu loaded, amd-smi works")
    return R("pass", "amdgpu %s" % _names(sorted({g.get("driver") for g in v.amd_gpus if g.get("driver")})),
             "amdgpu loaded, amd-smi works")


@rule("gpu_memory")
def r_gpu_memory(v, c):
    gpus = _require_readings(v, "memory_total_mib", "memory size")
    spec = v.model_spec()
    if not spec or "hbm_gb" not in spec:
        raise Skip("gpus.yml has no hbm_gb for %s" % (_names(v.gpu_names()) or "this GPU"))
    fraction = float(c.get("fraction", 0.95))
    need_gb = fraction * float(spec["hbm_gb"])
    sizes = {g["index"]: g["memory_total_mib"] * 1048576 / 1e9 for g in gpus if g.get("memory_total_mib")}
    low = sorted(i for i, gb in sizes.items() if gb < need_gb)
    obs = "min %.1f GB per GPU" % min(sizes.values())
    exp = ">= %.1f GB (%g x %s GB)" % (need_gb, fraction, spec["hbm_gb"])
    return R("fail" if low else "pass", obs + (" (low: GPU %s)" % _names(low) if low else ""), exp)


@rule("gpu_vbios_uniform")
def r_vbios(v, c):
    gpus = _require_readings(v, "vbios", "VBIOS version")
    values = Counter(g.get("vbios") for g in gpus if g.get("vbios"))
    if len(values) == 1:
        return R("pass", next(iter(values)), "one VBIOS version on the node")
    return R("warn", _names("%s on %d" % kv for kv in values.most_common()), "one VBIOS version on the node")


@rule("gpu_persistence")
def r_persistence(v, c):
    if v.vendor != "nvidia":
        raise Skip("not applicable: persistence mode is an NVIDIA driver setting")
    off = _gpu_list(v, "persistence_mode", lambda s: s != "Enabled")
    running = "nvidia-persistenced" in v.daemons()
    obs = "enabled on %d/%d GPUs%s" % (len(v.gpus()) - len(off), len(v.gpus()),
                                       ", nvidia-persistenced running" if running else "")
    return R("fail" if off else "pass", obs + (" (off: GPU %s)" % _names(off) if off else ""),
             "enabled on every GPU")


@rule("gpu_ecc_mode")
def r_ecc_mode(v, c):
    gpus = _require_readings(v, "ecc_mode", "ECC mode")
    off = [g["index"] for g in gpus if g.get("ecc_mode") and g["ecc_mode"] != "Enabled"]
    pending = [g["index"] for g in gpus if g.get("ecc_mode_pending") and g["ecc_mode_pending"] != g.get("ecc_mode")]
    if off:
        return R("fail", "ECC disabled on GPU %s" % _names(off), "ECC enabled on every GPU")
    if pending:
        return R("warn", "ECC change pending on GPU %s" % _names(pending), "ECC enabled on every GPU",
                 "a pending ECC mode takes effect at the next reset")
    return R("pass", "enabled on %d GPUs" % len(gpus), "ECC enabled on every GPU")


def _count_rule(key, what, fail_above=0, warn_only=False):
    def fn(v, c):
        gpus = _require_readings(v, key, what)
        limit = float(c.get("max", fail_above))
        bad = {g["index"]: g[key] for g in gpus if g.get(key) is not None and g[key] > limit}
        total = sum(g.get(key) or 0 for g in gpus)
        if bad:
            return R("warn" if warn_only or c.get("status_above") == "warn" else "fail",
                     "%d on GPU %s" % (int(total), _names("%s:%s" % (i, int(n)) for i, n in sorted(bad.items()))),
                     "<= %g per GPU" % limit)
        return R("pass", "%s in total" % int(total), "<= %g per GPU" % limit)
    return fn


RULES["gpu_ecc_volatile"] = _count_rule("ecc_uncorrectable_volatile", "uncorrectable ECC counts")
RULES["gpu_ecc_aggregate"] = _count_rule("ecc_uncorrectable_aggregate", "aggregate uncorrectable ECC counts")
RULES["gpu_pcie_replays"] = _count_rule("pcie_replay_counter", "PCIe replay counters")


@rule("gpu_sram_threshold")
def r_sram(v, c):
    gpus = _require_readings(v, "sram_threshold_exceeded", "SRAM error threshold")
    bad = [g["index"] for g in gpus if g.get("sram_threshold_exceeded")]
    return R("fail" if bad else "pass", ("exceeded on GPU %s" % _names(bad)) if bad else "not exceeded",
             "SRAM uncorrectable threshold not exceeded")


@rule("gpu_retired_pages")
def r_retired(v, c):
    gpus = v.gpus()
    if all(g.get("retired_pages_dbe") is None and g.get("retired_pages_pending") is None for g in gpus):
        raise Skip("not applicable: %s use row remapping, not page retirement"
                   % (_names(v.gpu_names()) or "these GPUs"))
    pending = [g["index"] for g in gpus if g.get("retired_pages_pending")]
    dbe = sum(g.get("retired_pages_dbe") or 0 for g in gpus)
    limit = int(c.get("max_dbe_pages", 0))
    if pending:
        return R("fail", "retirement pending on GPU %s" % _names(pending), "no pending retirement",
                 "reset the GPU to retire the pages")
    return R("warn" if dbe > limit else "pass", "%d pages retired for DBE" % dbe, "<= %d" % limit)


@rule("gpu_remapped_rows")
def r_remapped(v, c):
    gpus = v.gpus()
    if not any(g.get("remap_supported") for g in gpus):
        raise Skip("not applicable: %s have no row remapping" % (_names(v.gpu_names()) or "these GPUs"))
    failed = [g["index"] for g in gpus if g.get("remap_failure")]
    unc = {g["index"]: g.get("remapped_rows_uncorrectable") or 0 for g in gpus}
    limit = int(c.get("max_uncorrectable", 0))
    if failed:
        return R("fail", "remapping failed on GPU %s" % _names(failed), "no remap failure",
                 "a remap failure means the GPU is out of spare rows")
    high = sorted(i for i, n in unc.items() if n > limit)
    return R("warn" if high else "pass", "%d uncorrectable remaps%s" % (sum(unc.values()),
             " (GPU %s)" % _names(high) if high else ""), "<= %d per GPU, no failure" % limit)


@rule("gpu_remap_pending")
def r_remap_pending(v, c):
    gpus = v.gpus()
    if not any(g.get("remap_supported") for g in gpus):
        raise Skip("not applicable: %s have no row remapping" % (_names(v.gpu_names()) or "these GPUs"))
    pending = [g["index"] for g in gpus if g.get("remap_pending")]
    return R("fail" if pending else "pass", ("pending on GPU %s" % _names(pending)) if pending else "none pending",
             "no remap waiting for a GPU reset")


@rule("gpu_reset_required")
def r_reset_required(v, c):
    gpus = v.gpus()
    if all(g.get("reset_required") is None for g in gpus):
        raise Skip("not reported by this driver (gpu_reset_status needs a 550+ driver)")
    need = [g["index"] for g in gpus if g.get("reset_required") or g.get("drain_and_reset_recommended")]
    return R("fail" if need else "pass", ("reset required on GPU %s" % _names(need)) if need else "none",
             "no GPU waiting for a reset")


@rule("gpu_throttle")
def r_throttle(v, c):
    gpus = _require_readings(v, "active_clock_reasons", "clock event reasons")
    bad_names = set(c.get("fail_reasons", []))
    warn_names = set(c.get("warn_reasons", []))
    bad = {g["index"]: sorted(set(g["active_clock_reasons"]) & bad_names) for g in gpus
           if set(g.get("active_clock_reasons") or []) & bad_names}
    warn = {g["index"]: sorted(set(g["active_clock_reasons"]) & warn_names) for g in gpus
            if set(g.get("active_clock_reasons") or []) & warn_names}
    exp = "none of %s" % ", ".join(sorted(bad_names | warn_names))
    if bad:
        return R("fail", _names("GPU %s: %s" % (i, "+".join(r)) for i, r in sorted(bad.items())), exp)
    if warn:
        return R("warn", _names("GPU %s: %s" % (i, "+".join(r)) for i, r in sorted(warn.items())), exp)
    return R("pass", "no slowdown active", exp)


@rule("gpu_app_clocks")
def r_app_clocks(v, c):
    gpus = _require_readings(v, "app_clock_graphics_mhz", "application clocks")
    low = [g["index"] for g in gpus if g.get("app_clock_graphics_default_mhz") and g.get("app_clock_graphics_mhz")
           and g["app_clock_graphics_mhz"] < g["app_clock_graphics_default_mhz"]]
    if low:
        g = next(x for x in gpus if x["index"] == low[0])
        return R("warn", "locked below default on GPU %s (%g < %g MHz)" % (_names(low), g["app_clock_graphics_mhz"],
                                                                          g["app_clock_graphics_default_mhz"]),
                 "application clocks at their default")
    return R("pass", "at default", "application clocks at their default")


@rule("gpu_power_limit")
def r_power_limit(v, c):
    gpus = _require_readings(v, "power_limit_w", "power limit")
    fraction = float(c.get("min_fraction_of_default", 1.0))
    low = []
    for g in gpus:
        default = g.get("power_limit_default_w") or g.get("power_limit_max_w")
        limit = g.get("power_limit_enforced_w") or g.get("power_limit_w")
        if default and limit and limit < fraction * default - 0.5:
            low.append("%s:%g<%g W" % (g["index"], limit, default))
    limits = sorted({g.get("power_limit_enforced_w") or g.get("power_limit_w") for g in gpus} - {None})
    if low:
        return R("fail", "capped on GPU %s" % _names(low), ">= %g x default power limit" % fraction)
    return R("pass", "%s W" % _names("%g" % x for x in limits), ">= %g x default power limit" % fraction)


@rule("gpu_pcie_gen")
def r_pcie_gen(v, c):
    key = v.model_key()
    want = (c.get("per_model") or {}).get(key)
    if v.vendor == "amd":
        gpus = _require_readings(v, "pcie_speed_max_gts", "PCIe speed")
        speeds = sorted({g.get("pcie_speed_max_gts") for g in gpus} - {None})
        gen = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(speeds[0]) if speeds else None
        lows = [gen] if gen else []
    else:
        gpus = _require_readings(v, "pcie_gen_max", "PCIe generation")
        lows = sorted({g["pcie_gen_max"] for g in gpus if g.get("pcie_gen_max")})
        host_limited = [g["index"] for g in gpus if g.get("pcie_gen_host_max") and g.get("pcie_gen_device_max")
                        and g["pcie_gen_host_max"] < g["pcie_gen_device_max"]]
        if not want:
            want = min(min(g.get("pcie_gen_device_max") or 99, g.get("pcie_gen_host_max") or 99) for g in gpus)
            if want == 99:
                raise Skip("no expected PCIe generation for %s" % key)
        if host_limited and lows and lows[0] >= want:
            return R("pass", "Gen%d (host slots cap GPU %s below the GPU's Gen%d)" % (
                lows[0], _names(host_limited), max(g.get("pcie_gen_device_max") or 0 for g in gpus)),
                ">= Gen%d" % want)
    if not want:
        raise Skip("no expected PCIe generation for %s" % key)
    if not lows:
        raise Skip("PCIe generation not reported")
    status = "pass" if lows[0] >= want else "fail"
    return R(status, "Gen%s" % "/".join(str(x) for x in lows), ">= Gen%d" % want)


@rule("gpu_pcie_width")
def r_pcie_width(v, c):
    gpus = _require_readings(v, "pcie_width_current", "PCIe link width")
    narrow = ["%s:x%d" % (g["index"], g["pcie_width_current"]) for g in gpus
              if g.get("pcie_width_current") and g.get("pcie_width_max")
              and g["pcie_width_current"] < g["pcie_width_max"]]
    if v.vendor == "amd":
        narrow = ["%s:x%d" % (g["index"], g["pcie_width_current"]) for g in gpus
                  if g.get("pcie_width_current") and g["pcie_width_current"] < (g.get("pcie_width_max") or 16)]
    widths = sorted({int(g["pcie_width_current"]) for g in gpus if g.get("pcie_width_current")})
    if narrow:
        return R("fail", "narrow link on GPU %s" % _names(narrow), "every GPU at its maximum width")
    return R("pass", "x%s" % "/x".join(str(w) for w in widths), "every GPU at its maximum width")


def _nvlink(v):
    if v.vendor != "nvidia":
        raise Skip("not applicable: NVLink counters are read with nvidia-smi")
    v.need("nvlink_status")
    return v.nv.get("nvlink") or {}


@rule("gpu_nvlink_up")
def r_nvlink_up(v, c):
    links = _nvlink(v)
    if not links or all(x.get("links", 0) == 0 for x in links.values()):
        raise Skip("not applicable: no NVLink on %s" % (_names(v.gpu_names()) or "these GPUs"))
    want = (c.get("per_model") or {}).get(v.model_key())
    bad = []
    for idx, x in sorted(links.items(), key=lambda kv: int(kv[0])):
        total = want or x.get("links", 0)
        if x.get("active", 0) < total:
            bad.append("GPU %s: %d/%d up" % (idx, x.get("active", 0), total))
    active = sum(x.get("active", 0) for x in links.values())
    speeds = sorted({s for x in links.values() for s in x.get("speeds_gbps", [])})
    obs = "%d links up on %d GPUs (%s GB/s)" % (active, len(links), "/".join("%g" % s for s in speeds))
    exp = "%s links per GPU up" % (want or "all")
    return R("fail" if bad else "pass", _names(bad) if bad else obs, exp)


@rule("gpu_nvlink_errors")
def r_nvlink_errors(v, c):
    _nvlink(v)
    v.need("nvlink_errors")
    errs = v.nv.get("nvlink_errors") or {}
    if not errs:
        raise Skip("not applicable: no NVLink error counters reported")
    fail_keys = set(c.get("fail_counters", []))
    totals = Counter()
    bad_gpus = {}
    for idx, counters in errs.items():
        for key, n in counters.items():
            totals[key] += n
            if n > int(c.get("max_per_gpu", 0)):
                bad_gpus.setdefault(idx, []).append("%s=%d" % (key, n))
    obs = ", ".join("%s %d" % kv for kv in sorted(totals.items())) or "no counters"
    if not bad_gpus:
        return R("pass", obs, "no NVLink errors")
    worst = "fail" if any(k in fail_keys and totals[k] for k in totals) else "warn"
    return R(worst, _names("GPU %s: %s" % (i, " ".join(x)) for i, x in sorted(bad_gpus.items())), "no NVLink errors")


@rule("gpu_fabric_manager")
def r_fabric_manager(v, c):
    running = "nv-fabricmanager" in v.daemons()
    fm = v.sec("nvidia_driver").get("fabricmanager_version")
    if running:
        return R("pass", "nv-fabricmanager running (%s)" % (fm or "version unknown"), "running on NVSwitch systems")
    return R("fail", "not running" + (" (installed: %s)" % fm if fm else " (not installed)"),
             "running on NVSwitch systems", "without Fabric Manager the GPUs cannot use NVLink through the NVSwitches")


@rule("gpu_fabricmanager_version")
def r_fm_version(v, c):
    fm = v.sec("nvidia_driver").get("fabricmanager_version")
    drv = v.driver_version()
    if not fm:
        raise Skip("tool missing: nv-fabricmanager not installed")
    return R("pass" if fm == drv else "fail", "Fabric Manager %s, driver %s" % (fm, drv),
             "Fabric Manager version = driver version")


@rule("gpu_fabric_state")
def r_fabric_state(v, c):
    gpus = v.gpus()
    reported = [g for g in gpus if g.get("fabric_state")]
    if not reported:
        raise Skip("not applicable: fabric state not reported for %s" % (_names(v.gpu_names()) or "these GPUs"))
    bad = [g["index"] for g in reported if g.get("fabric_state") != "Completed" or g.get("fabric_status") != "Success"]
    nvl = _is_nvl72(v)
    if nvl:
        bad += [g["index"] for g in reported if (g.get("fabric_clique_id") in (None, "0")) or
                not (g.get("fabric_cluster_uuid") or "").strip("0-")]
    states = Counter("%s/%s" % (g.get("fabric_state"), g.get("fabric_status")) for g in reported)
    obs = _names("%s on %d" % kv for kv in states.most_common())
    exp = "Completed/Success on every GPU" + (", clique and cluster UUID set" if nvl else "")
    return R("fail" if bad else "pass", obs + (" (bad: GPU %s)" % _names(sorted(set(bad))) if bad else ""), exp)


@rule("gpu_imex")
def r_imex(v, c):
    drv = v.sec("nvidia_driver")
    parts = {"nvidia-imex running": "nvidia-imex" in v.daemons(), "nodes_config.cfg": drv.get("imex_config"),
             "IMEX channels": drv.get("imex_channels")}
    missing = [k for k, ok in parts.items() if not ok]
    return R("fail" if missing else "pass", "missing: %s" % ", ".join(missing) if missing else "IMEX ready",
             "IMEX service, node list and channels present")


@rule("gpu_mig")
def r_mig(v, c):
    gpus = v.gpus()
    if v.vendor != "nvidia":
        raise Skip("not applicable: MIG is an NVIDIA feature")
    if all(g.get("mig_mode") is None for g in gpus):
        raise Skip("not applicable: %s do not support MIG" % _names(v.gpu_names()))
    expect = v.param_flag("expect_mig", c.get("expect_mig", False))
    on = [g["index"] for g in gpus if g.get("mig_mode") == "Enabled"]
    wrong = on if not expect else [g["index"] for g in gpus if g.get("mig_mode") != "Enabled"]
    exp = "MIG %s on every GPU" % ("enabled" if expect else "disabled")
    return R("fail" if wrong else "pass", ("MIG enabled on GPU %s" % _names(on)) if on else "MIG disabled", exp)


@rule("gpu_compute_mode")
def r_compute_mode(v, c):
    gpus = _require_readings(v, "compute_mode", "compute mode")
    other = ["%s:%s" % (g["index"], g["compute_mode"]) for g in gpus if g.get("compute_mode") not in (None, "Default")]
    return R("warn" if other else "pass", _names(other) if other else "Default", "Default on every GPU")


def _idle(v, c):
    gpus = v.gpus()
    busy = [g["index"] for g in gpus if (g.get("utilization_gpu_pct") or 0) > float(c.get("busy_above_pct", 10))
            or (g.get("processes") or 0) > 0]
    if busy:
        raise Skip("GPUs busy (GPU %s): idle readings are not possible now" % _names(busy))
    return gpus


@rule("gpu_idle_temperature")
def r_idle_temp(v, c):
    gpus = _idle(v, c)
    temps = {g["index"]: g["temperature_c"] for g in gpus if g.get("temperature_c") is not None}
    if not temps:
        raise Skip("not reported: no GPU temperature")
    limit = (c.get("per_model") or {}).get(v.model_key(), c.get("default_max_c"))
    if limit is None:
        raise Skip("no idle temperature limit for %s" % v.model_key())
    hot = sorted(i for i, t in temps.items() if t > limit)
    return R("warn" if hot else "pass", "max %g C%s" % (max(temps.values()), " (GPU %s)" % _names(hot) if hot else ""),
             "<= %g C at idle" % limit)


@rule("gpu_idle_power")
def r_idle_power(v, c):
    gpus = _idle(v, c)
    draws = {g["index"]: g["power_draw_w"] for g in gpus if g.get("power_draw_w") is not None}
    if not draws:
        raise Skip("not reported: no GPU power draw")
    limit = (c.get("per_model") or {}).get(v.model_key())
    if limit is None:
        raise Skip("no idle power limit for %s" % v.model_key())
    high = sorted(i for i, w in draws.items() if w > limit)
    return R("warn" if high else "pass",
             "max %g W%s" % (max(draws.values()), " (GPU %s)" % _names(high) if high else ""),
             "<= %g W at idle" % limit)


def xid_events(v, window_days):
    """XIDs of the window, newest last, each with its action from xid.yml."""
    table = data("xid")
    end = v.started_at()
    out = []
    for x in v.sec("kernel_log").get("xids") or []:
        try:
            when = datetime.fromisoformat(str(x.get("time")).replace("Z", "+00:00"))
        except ValueError:
            continue
        age = (end - when).total_seconds() / 86400.0
        if age > window_days:
            continue
        action = table["xids"].get(int(x["xid"]), table["unknown"])
        out.append(dict(x, action=action, status=table["actions"][action]["status"]))
    return out


@rule("gpu_xid_history")
def r_xid(v, c):
    v.need("kernel_log")
    window = int(c.get("window_days", data("xid").get("window_days", 7)))
    events = xid_events(v, window)
    if not events:
        return R("pass", "no XID in %d days (log from %s, %s)" % (window, v.sec("kernel_log").get("first") or "?",
                                                                 v.sec("kernel_log").get("source")),
                 "no XID needing action")
    order = {"pass": 0, "warn": 1, "fail": 2}
    worst = max(events, key=lambda e: order[e["status"]])
    by = Counter("%s %s" % (e["xid"], e["action"]) for e in events)
    obs = _names("XID %s x%d" % (k, n) for k, n in by.most_common())
    actions = data("xid")["actions"]
    return R(worst["status"], obs, "no XID needing action (%d-day window)" % window,
             "%s on %s: %s" % (worst["xid"], worst["pci"], actions[worst["action"]]["text"]))


def _kernel_ge(kernel, minimum):
    return vkey(kernel)[:len(vkey(minimum))] >= vkey(minimum)


@rule("gpu_gpudirect_rdma")
def r_gdr(v, c):
    drv = v.sec("nvidia_driver")
    if v.vendor != "nvidia":
        raise Skip("not applicable: checks NVIDIA GPUDirect RDMA")
    kernel = v.sec("system").get("kernel") or ""
    open_mod = (drv.get("proc_version") or {}).get("open_kernel_module")
    dmabuf = bool(open_mod) and _kernel_ge(kernel, c.get("dmabuf_min_kernel", "5.12"))
    paths = [n for n, ok in (("dma-buf (open module, kernel %s)" % kernel, dmabuf),
                             ("nvidia_peermem", drv.get("peermem_loaded"))) if ok]
    return R("pass" if paths else "fail", ", ".join(paths) if paths else "neither dma-buf nor nvidia_peermem",
             "dma-buf (open kernel module, kernel >= %s) or nvidia_peermem" % c.get("dmabuf_min_kernel", "5.12"))


@rule("gpu_gdrcopy")
def r_gdrcopy(v, c):
    drv = v.sec("nvidia_driver")
    if drv.get("gdrdrv_loaded") or drv.get("gdrdrv_device"):
        lib = v.sec("libraries").get("gdrapi_lib")
        return R("pass", "gdrdrv loaded" + (", libgdrapi %s" % lib if lib else ""), "gdrdrv loaded")
    return R("warn", "gdrdrv not loaded", "gdrdrv loaded",
             "without GDRCopy, NCCL and UCX fall back to slower small-message copies")


def acs_findings(devices, nic_pcis):
    """Bridges with request/completion redirection on the path between a GPU and a NIC that share a switch."""
    gpus = {b: d for b, d in devices.items() if d.get("kind") == "gpu"}
    nics = {b: d for b, d in devices.items() if b in nic_pcis}
    shared, bad = 0, {}
    for gd in gpus.values():
        for nd in nics.values():
            if gd.get("root") != nd.get("root"):
                continue
            gu, nu = gd.get("upstream") or [], nd.get("upstream") or []
            common = 0
            while common < min(len(gu), len(nu)) and gu[common] == nu[common]:
                common += 1
            if common == 0:
                continue
            shared += 1
            for bridge in gu[common:] + nu[common:]:
                ctl = (devices.get(bridge) or {}).get("acs_ctl") or {}
                if ctl.get("ReqRedir") or ctl.get("CmpltRedir"):
                    bad[bridge] = "+".join(k for k in ("ReqRedir", "CmpltRedir", "SrcValid") if ctl.get(k))
    return shared, bad


@rule("gpu_pcie_acs")
def r_acs(v, c):
    nic_pcis = {info.get("pci") for info in v.rdma().values() if info.get("pci")}
    shared, bad = acs_findings(v.pci, nic_pcis)
    if not shared:
        return R("pass", "no GPU shares a PCIe switch with an RDMA NIC", "ACS redirect off between GPUs and NICs")
    v.need("lspci")
    if not v.sec("pci").get("acs_read"):
        raise Skip("not permitted: ACS needs lspci as root")
    if bad:
        return R("fail", "redirect on %s" % _names("%s (%s)" % kv for kv in sorted(bad.items())),
                 "ACS redirect off between GPUs and NICs",
                 "P2P between GPU and NIC goes up to the root complex instead of through the switch")
    return R("pass", "%d GPU-NIC pairs share a switch, no redirect" % shared, "ACS redirect off between GPUs and NICs")


@rule("iommu_mode")
def r_iommu(v, c):
    io = v.sec("system").get("iommu") or {}
    cmd = (v.sec("system").get("cmdline") or {})
    types = io.get("group_types") or {}
    if not io.get("groups"):
        return R("pass", "no IOMMU groups (IOMMU off)", "IOMMU off or passthrough")
    translated = sum(n for t, n in types.items() if t.upper().startswith("DMA"))
    obs = "%d groups: %s; iommu=%s" % (io["groups"], _names("%s %d" % kv for kv in sorted(types.items())),
                                      cmd.get("iommu", "unset"))
    if translated:
        return R("warn", obs, "IOMMU off or passthrough (iommu=pt)",
                 "translated DMA slows GPUDirect RDMA and P2P on bare metal")
    return R("pass", obs, "IOMMU off or passthrough (iommu=pt)")


@rule("cpu_governor")
def r_governor(v, c):
    govs = v.sec("system").get("cpu_governors") or {}
    if not govs:
        raise Skip("not applicable: no cpufreq governor exposed (VM or firmware-managed frequency)")
    want = c.get("expect", "performance")
    other = {g: n for g, n in govs.items() if g != want}
    return R("warn" if other else "pass", _names("%s on %d CPUs" % kv for kv in sorted(govs.items())),
             "%s on every CPU" % want)


def _sysctl_rule(key, ok, expected_text, status_bad="warn", missing="skip"):
    def fn(v, c):
        value = v.sysctl(key)
        if value is None:
            raise Skip("not applicable: %s not present in this kernel" % key)
        good = ok(value)
        return R("pass" if good else c.get("status_bad", status_bad), "%s = %s" % (key, value), expected_text)
    return fn


RULES["numa_balancing"] = _sysctl_rule("kernel.numa_balancing", lambda x: x == "0", "kernel.numa_balancing = 0")


@rule("gpu_open_module")
def r_open_module(v, c):
    ver = v.sec("nvidia_driver").get("proc_version") or {}
    if not ver:
        raise Error("/proc/driver/nvidia/version not readable: driver not loaded")
    open_mod = ver.get("open_kernel_module")
    names = " ".join(v.gpu_names()).upper()
    needs_open = any(m.upper() in names for m in c.get("open_required_for", []))
    flavour = "open kernel module" if open_mod else "proprietary kernel module"
    if needs_open and not open_mod:
        return R("fail", flavour, "open kernel module (required by %s)" % _names(v.gpu_names()))
    return R("pass", flavour, "open kernel module on %s" % _names(c.get("open_required_for", [])))


@rule("gpu_persistenced")
def r_persistenced(v, c):
    running = "nvidia-persistenced" in v.daemons()
    return R("pass" if running else "warn", "running" if running else "not running", "nvidia-persistenced running",
             None if running else "persistence set by nvidia-smi -pm is lost at every driver reload")


@rule("memory_ecc")
def r_memory_ecc(v, c):
    edac = v.sec("system").get("edac") or {}
    if not edac.get("controllers"):
        raise Skip("not applicable: no EDAC memory controller driver loaded (no memory error counters)")
    if edac.get("ue"):
        return R("fail", "%d uncorrectable, %d correctable" % (edac["ue"], edac.get("ce", 0)), "0 uncorrectable")
    warn_ce = int(c.get("warn_correctable_above", 100))
    return R("warn" if edac.get("ce", 0) > warn_ce else "pass", "0 uncorrectable, %d correctable" % edac.get("ce", 0),
             "0 uncorrectable, <= %d correctable" % warn_ce)


def _log_count(kind, what):
    def fn(v, c):
        v.need("kernel_log")
        kl = v.sec("kernel_log")
        window = int(c.get("window_days", 7))
        end = v.started_at()
        times = []
        for t in (kl.get("events") or {}).get(kind) or []:
            try:
                when = datetime.fromisoformat(str(t).replace("Z", "+00:00"))
            except ValueError:
                continue
            if (end - when).total_seconds() <= window * 86400:
                times.append(t)
        status = c.get("status", "warn") if times else "pass"
        return R(status, "%d %s in %d days%s" % (len(times), what, window, " (last %s)" % times[-1] if times else ""),
                 "none in %d days" % window)
    return fn


RULES["machine_checks"] = _log_count("mce", "machine-check events")
RULES["oom_kills"] = _log_count("oom", "out-of-memory kills")
RULES["hung_tasks"] = _log_count("hung_task", "hung-task reports")
RULES["aer_log"] = _log_count("aer", "uncorrected PCIe errors")


@rule("pcie_aer_counters")
def r_aer(v, c):
    devs = {b: d for b, d in v.pci.items() if d.get("kind") in ("gpu", "nic", "nvswitch", "nvme")}
    reported = {b: d for b, d in devs.items() if d.get("aer_fatal") is not None or d.get("aer_nonfatal") is not None}
    if not reported:
        raise Skip("not reported: no AER counters in sysfs for the GPUs and NICs")
    fatal = {b: d["aer_fatal"] for b, d in reported.items() if d.get("aer_fatal")}
    nonfatal = {b: d["aer_nonfatal"] for b, d in reported.items() if d.get("aer_nonfatal")}
    if fatal:
        return R("fail", "fatal AER on %s" % _names("%s:%d" % kv for kv in sorted(fatal.items())),
                 "0 fatal, 0 non-fatal")
    if nonfatal:
        return R("warn", "non-fatal AER on %s" % _names("%s:%d" % kv for kv in sorted(nonfatal.items())),
                 "0 fatal, 0 non-fatal")
    return R("pass", "0 on %d devices" % len(reported), "0 fatal, 0 non-fatal")


# ---- software and lifecycle ------------------------------------------------------------------------------

def minimums():
    return data("minimum_versions")


def table_age(v):
    table_date = datetime.fromisoformat(str(minimums()["table_date"])).date()
    return table_date, (v.started_at().date() - table_date).days


def _table_note(v):
    d, age = table_age(v)
    if age < 0:
        return "table %s, newer than this run" % d.isoformat()
    return "table %s, %d days old" % (d.isoformat(), age)


def judge_version(spec, version):
    """(status, expected text, reason) of a version against one minimum_versions.yml entry."""
    kind = spec.get("kind", "minimum")
    title = spec.get("title", "")
    if kind == "minimum":
        ok = vkey(version) >= vkey(spec["minimum"])
        return ("pass" if ok else "fail"), ">= %s" % spec["minimum"], None
    mins = {str(k): v for k, v in spec["minimums"].items()}
    if kind == "train":
        parts = str(version).split(".")
        if len(parts) < 3:
            return "error", "known firmware format", "cannot read the train of %s" % version
        branch, patch = str(int(parts[1])), int(re.sub(r"\D.*$", "", parts[2]) or 0)
        newest = max(mins, key=lambda k: int(k))
        if branch in mins:
            ok = patch >= int(mins[branch])
            return ("pass" if ok else "fail"), "train %s >= xx.%s.%04d" % (branch, branch, int(mins[branch])), None
        if int(branch) > int(newest):
            return "pass", "train newer than the table (newest %s)" % newest, None
        return "fail", "a supported train (%s)" % ", ".join(sorted(mins, key=int)), \
            "train %s is not in the table: end of life" % branch
    parts = vkey(version)
    branch = ".".join(str(p) for p in parts[:2]) if kind == "branch2" else str(parts[0]) if parts else ""
    newest = max(mins, key=vkey)
    if branch in mins:
        ok = parts >= vkey(mins[branch])
        return ("pass" if ok else "fail"), ">= %s on the %s branch" % (mins[branch], branch), None
    if vkey(branch) > vkey(newest):
        return "pass", "branch newer than the table (newest %s)" % newest, None
    return "fail", "a supported branch (%s)" % ", ".join(sorted(mins, key=vkey)), \
        "%s branch %s is not in the table: end of life" % (title, branch)


def _version_rule(entry, getter, what):
    def fn(v, c):
        version = getter(v)
        if not version:
            raise Skip("not installed: %s not found on the node" % what)
        status, expected, reason = judge_version(minimums()[entry], version)
        return R(status, version, "%s (%s)" % (expected, _table_note(v)), reason)
    return fn


def _tool_version(name):
    return lambda v: (v.tool(name) or {}).get("version")


RULES["sw_driver_security"] = _version_rule("nvidia_driver", lambda v: v.driver_version(), "NVIDIA driver")
RULES["sw_dcgm"] = _version_rule("dcgm", lambda v: _tool_version("dcgmi")(v) or _pkg(v, r"^datacenter-gpu-manager"),
                                 "DCGM (dcgmi)")
RULES["sw_dcgm_exporter"] = _version_rule("dcgm_exporter", _tool_version("dcgm_exporter"),
                                          "the dcgm-exporter binary (a containerized exporter is checked by its port)")
RULES["sw_container_toolkit"] = _version_rule(
    "container_toolkit", lambda v: _tool_version("nvidia_ctk")(v) or _tool_version("nvidia_container_cli")(v),
    "NVIDIA Container Toolkit (nvidia-ctk)")
RULES["sw_docker"] = _version_rule("docker_engine", _tool_version("dockerd"), "Docker Engine (dockerd)")
RULES["sw_runc"] = _version_rule("runc", _tool_version("runc"), "runc")


def _pkg(v, pattern):
    for name, ver in sorted((v.sec("packages").get("selected") or {}).items()):
        if re.match(pattern, name):
            return ver
    return None


@rule("sw_cuda_toolkit")
def r_cuda_toolkit(v, c):
    lib = v.sec("libraries")
    version = lib.get("cuda_toolkit") or _tool_version("nvcc")(v)
    if not version:
        raise Skip("not installed: no CUDA toolkit on the node (containers bring their own)")
    status, expected, reason = judge_version(minimums()["cuda_toolkit"], version)
    return R(status, version, "%s (%s)" % (expected, _table_note(v)), reason)


@rule("sw_cuda_driver_compat")
def r_cuda_compat(v, c):
    driver_cuda = v.nv.get("cuda_version")
    toolkit = v.sec("libraries").get("cuda_toolkit") or _tool_version("nvcc")(v)
    if not toolkit:
        raise Skip("not installed: no CUDA toolkit on the node")
    if not driver_cuda:
        raise Error("nvidia-smi reported no CUDA version")
    ok = vkey(toolkit)[:2] <= vkey(driver_cuda)[:2]
    return R("pass" if ok else "fail", "toolkit %s, driver supports %s" % (toolkit, driver_cuda),
             "toolkit <= the driver's CUDA version", None if ok else "needs the CUDA forward-compatibility package")


def _lib_rule(lib_key, header_key, pkg_pattern, what):
    def fn(v, c):
        lib = v.sec("libraries")
        found = {"library": lib.get(lib_key), "header": lib.get(header_key), "package": _pkg(v, pkg_pattern)}
        found = {k: x for k, x in found.items() if x}
        if not found:
            raise Skip("not installed: no system-wide %s (containers bring their own)" % what)
        versions = {".".join(str(p) for p in vkey(x)[:3]) for x in found.values()}
        obs = _names("%s %s" % kv for kv in sorted(found.items()))
        if len(versions) > 1:
            return R("warn", obs, "one %s version on the node" % what, "library, header and package disagree")
        return R("pass", obs, "one %s version on the node" % what)
    return fn


RULES["sw_nccl"] = _lib_rule("nccl_lib", "nccl_header", r"^libnccl2?$", "NCCL")
RULES["sw_cudnn"] = _lib_rule("cudnn_lib", "cudnn_header", r"^(libcudnn\d+(-cuda-\d+)?|cudnn\d*)$", "cuDNN")


@rule("sw_container_runtime")
def r_container_runtime(v, c):
    found = [n for n in ("dockerd", "enroot", "apptainer", "singularity", "containerd") if v.tool(n)]
    if found:
        return R("pass", _names("%s %s" % (n, (v.tool(n) or {}).get("version") or "?") for n in found),
                 "a container runtime for GPU jobs")
    return R("warn", "none", "a container runtime for GPU jobs (Docker, enroot, Apptainer, containerd)")


@rule("sw_nvidia_runtime")
def r_nvidia_runtime(v, c):
    lib = v.sec("libraries")
    if not (v.tool("dockerd") or v.tool("containerd")):
        raise Skip("not applicable: no Docker or containerd on the node")
    has = lib.get("nvidia_container_runtime_config") or v.tool("nvidia_ctk") or v.tool("nvidia_container_cli")
    return R("pass" if has else "fail", "NVIDIA container runtime %s" % ("configured" if has else "missing"),
             "GPUs reachable from containers (nvidia-container-toolkit)")


@rule("sw_enroot")
def r_enroot(v, c):
    t = v.tool("enroot")
    if t:
        return R("pass", "enroot %s" % (t.get("version") or "?"), "enroot installed on Slurm GPU nodes")
    return R("warn", "not installed", "enroot installed on Slurm GPU nodes", "pyxis runs containers through enroot")


@rule("sw_ofed")
def r_ofed(v, c):
    t = v.tool("ofed_info")
    if t and t.get("version"):
        return R("pass", "%s %s" % (t.get("flavour") or "OFED", t["version"]), "MLNX_OFED or DOCA-OFED")
    pkg = _pkg(v, r"^(doca-ofed|mlnx-ofed)")
    if pkg:
        return R("pass", "package %s" % pkg, "MLNX_OFED or DOCA-OFED")
    return R("warn", "inbox rdma-core only" + (" (%s)" % _pkg(v, r"^rdma-core$") if _pkg(v, r"^rdma-core$") else ""),
             "MLNX_OFED or DOCA-OFED", "vendor OFED brings nvidia_peermem support, firmware tools and tuned drivers")


@rule("sw_hpcx")
def r_hpcx(v, c):
    found = v.sec("libraries").get("hpcx") or []
    return R("pass" if found else "warn", ("HPC-X %s" % _names(found)) if found else "not found",
             "HPC-X (UCX, UCC, SHARP plugin) installed")


def _connectx(v):
    out = {}
    for dev, info in v.rdma().items():
        if info.get("fw_ver") and (info.get("hca_type") or "").startswith("MT") or dev.startswith("mlx5"):
            if info.get("fw_ver"):
                out[dev] = info["fw_ver"]
    if not out:
        for dev, info in (v.sec("ib_tools").get("ibstat") or {}).items():
            if info.get("firmware"):
                out[dev] = info["firmware"]
    return out


@rule("sw_connectx_firmware")
def r_cx_fw(v, c):
    fws = _connectx(v)
    if not fws:
        raise Skip("not applicable: no Mellanox/NVIDIA ConnectX adapter")
    worst, rows = "pass", []
    order = {"pass": 0, "error": 1, "fail": 2}
    reason = None
    for version in sorted(set(fws.values())):
        status, expected, why = judge_version(minimums()["connectx_firmware"], version)
        if order[status] > order[worst]:
            worst, reason = status, why or "%s below %s" % (version, expected)
        rows.append("%s on %d" % (version, sum(1 for x in fws.values() if x == version)))
    return R(worst, _names(rows), "per-train minimum (%s)" % _table_note(v), reason)


@rule("sw_connectx_uniform")
def r_cx_uniform(v, c):
    fws = _connectx(v)
    if not fws:
        raise Skip("not applicable: no Mellanox/NVIDIA ConnectX adapter")
    values = Counter(fws.values())
    return R("pass" if len(values) == 1 else "warn", _names("%s on %d" % kv for kv in values.most_common()),
             "one firmware on every adapter")


@rule("sw_kernel_latest")
def r_kernel_latest(v, c):
    sysd = v.sec("system")
    running = sysd.get("kernel")
    installed = sysd.get("kernels_installed") or []
    if not installed:
        raise Skip("not reported: no kernel found in /boot or /lib/modules")
    flavour = re.sub(r"^[\d.\-]+", "", running or "")
    same = [k for k in installed if re.sub(r"^[\d.\-]+", "", k) == flavour] or installed
    newest = max(same, key=vkey)
    if vkey(newest) > vkey(running):
        return R("warn", "running %s, installed %s" % (running, newest), "the newest installed kernel is booted",
                 "a newer kernel is installed but not booted: reboot to apply its fixes")
    return R("pass", "running %s (newest of %d installed)" % (running, len(installed)),
             "the newest installed kernel is booted")


@rule("sw_kernel_security")
def r_kernel_security(v, c):
    sysd = v.sec("system")
    osid, osver, kernel = sysd.get("os_id"), sysd.get("os_version"), sysd.get("kernel") or ""
    table = (minimums().get("kernel") or {}).get(osid or "", {}).get(osver or "")
    if not table:
        raise Skip("not applicable: the table has no kernel minimum for %s %s" % (osid, osver))
    line = ".".join(kernel.split("-")[0].split(".")[:3])
    if line not in table:
        newest = max(table, key=vkey)
        if vkey(line) > vkey(newest):
            return R("pass", kernel, "kernel line newer than the table (%s)" % _table_note(v))
        raise Skip("not applicable: no minimum for the %s kernel line on %s %s" % (line, osid, osver))
    ok = vkey(kernel)[:4] >= vkey(table[line])[:4]
    return R("pass" if ok else "fail", kernel, ">= %s (%s)" % (table[line], _table_note(v)))


@rule("sw_os_support")
def r_os_support(v, c):
    sysd = v.sec("system")
    osid, osver = sysd.get("os_id"), sysd.get("os_version")
    ends = (minimums().get("os_support_end") or {}).get(osid or "")
    if not ends:
        raise Skip("not applicable: no support dates for %s in minimum_versions.yml" % osid)
    key = osver if osver in ends else (osver or "").split(".")[0]
    if key not in ends:
        newest = max(ends, key=vkey)
        if vkey(osver) > vkey(newest):
            return R("pass", "%s %s" % (osid, osver), "a supported release (newer than the table)")
        return R("fail", "%s %s" % (osid, osver), "a supported release (%s)" % ", ".join(sorted(ends, key=vkey)),
                 "release not in the table: end of life")
    end = datetime.fromisoformat(str(ends[key])).date()
    ok = v.started_at().date() <= end
    return R("pass" if ok else "fail", "%s %s" % (osid, osver), "security updates until %s" % end.isoformat(),
             None if ok else "standard security support ended %s" % end.isoformat())


@rule("sw_minimums_age")
def r_minimums_age(v, c):
    d, age = table_age(v)
    limit = int(minimums().get("max_age_days", 180))
    if age < 0:
        return R("pass", "table dated %s: newer than this run (re-graded)" % d.isoformat(), "<= %d days old" % limit)
    return R("warn" if age > limit else "pass", "table dated %s: %d days old at this run" % (d.isoformat(), age),
             "<= %d days old" % limit, None if age <= limit else "update reports/data/minimum_versions.yml")


# ---- networking -------------------------------------------------------------------------------------------

def classify_nics(v, c):
    """[{name, role, link, rate_gbps, rdma, netdevs}] with role compute / storage / frontend / other."""
    net = v.sec("net")
    ifaces = net.get("interfaces") or {}
    default = set(net.get("default_route") or [])
    roce_min = float(c.get("compute_roce_min_gbps", 400))
    out, used = [], set()
    for dev, info in sorted(v.rdma().items()):
        ports = info.get("ports") or {}
        p = ports.get("1") or (next(iter(ports.values())) if ports else {})
        netdevs = info.get("netdevs") or []
        used.update(netdevs)
        link = p.get("link_layer") or "?"
        rate = p.get("rate_gbps")
        if default & set(netdevs):
            role = "frontend"
        elif link == "InfiniBand" or (rate or 0) >= roce_min:
            role = "compute"
        else:
            role = "storage"
        out.append({"name": dev, "role": role, "link": "IB" if link == "InfiniBand" else "RoCE", "rate_gbps": rate,
                    "state": p.get("state"), "netdevs": netdevs, "rdma": True})
    for name, i in sorted(ifaces.items()):
        if name in used or name == "lo" or i.get("type") == 772:
            continue
        if i.get("virtual") and name not in default:
            continue
        speed = (i.get("speed_mbps") or 0) / 1000.0 if (i.get("speed_mbps") or 0) > 0 else None
        role = "frontend" if name in default else ("storage" if (speed or 0) >= float(c.get("storage_min_gbps", 25))
                                                   else "other")
        out.append({"name": name, "role": role, "link": "Ethernet", "rate_gbps": speed, "state": i.get("operstate"),
                    "netdevs": [name], "rdma": False})
    return out


@rule("net_nic_inventory")
def r_nic_inventory(v, c):
    nics = classify_nics(v, c)
    roles = {}
    for n in nics:
        roles.setdefault(n["role"], []).append("%s%s" % (n["name"], " %gG" % n["rate_gbps"] if n["rate_gbps"] else ""))
    obs = "; ".join("%s: %s" % (r, _names(x, 4)) for r, x in sorted(roles.items())) or "no NIC"
    if v.vendor and not roles.get("compute"):
        return R("warn", obs, "a compute fabric (RDMA) on GPU nodes",
                 "without a compute fabric, multi-node jobs run over TCP")
    if not roles.get("frontend"):
        return R("warn", obs, "a frontend NIC carrying the default route")
    return R("pass", obs, "compute fabric on GPU nodes, frontend present")


@rule("net_compute_nic_ratio")
def r_nic_ratio(v, c):
    nics = [n for n in classify_nics(v, c) if n["role"] == "compute"]
    gpus = len(v.gpus())
    want = float(c.get("nics_per_gpu", 1.0))
    ok = len(nics) >= want * gpus
    return R("pass" if ok else "warn", "%d compute NICs for %d GPUs" % (len(nics), gpus),
             ">= %g compute NIC per GPU (rail-optimized)" % want)


@rule("net_rdma_link_state")
def r_rdma_state(v, c):
    ports = v.rdma_ports()
    down = ["%s/%s %s" % (d, p, x.get("state")) for d, p, x in ports if (x.get("state") or "").upper() != "ACTIVE"]
    compute = {n["name"] for n in classify_nics(v, c) if n["role"] == "compute"}
    down_compute = [x for x in down if x.split("/")[0] in compute]
    obs = "%d/%d ports active" % (len(ports) - len(down), len(ports))
    if down_compute:
        return R("fail", obs + " (down: %s)" % _names(down_compute), "every RDMA port active")
    if down:
        return R("warn", obs + " (down: %s)" % _names(down), "every RDMA port active")
    return R("pass", obs, "every RDMA port active")


@rule("net_rdma_rate")
def r_rdma_rate(v, c):
    nics = [n for n in classify_nics(v, c) if n["role"] == "compute" and (n["state"] or "").upper() == "ACTIVE"]
    if not nics:
        raise Skip("not applicable: no active compute fabric port")
    rates = Counter(n["rate_gbps"] for n in nics)
    top = max(r for r in rates if r)
    want = float(v.param_int("fabric_rate_gbps") or c.get("min_gbps", 0) or top)
    slow = ["%s %gG" % (n["name"], n["rate_gbps"] or 0) for n in nics if (n["rate_gbps"] or 0) < max(top, want)]
    obs = _names("%gG x%d" % (r or 0, k) for r, k in sorted(rates.items(), key=lambda kv: -(kv[0] or 0)))
    return R("fail" if slow else "pass", obs + (" (slow: %s)" % _names(slow) if slow else ""),
             "every compute port at %gG" % max(top, want))


@rule("net_ib_sm")
def r_ib_sm(v, c):
    ports = [(d, p, x) for d, p, x in v.rdma_ports() if x.get("link_layer") == "InfiniBand"
             and (x.get("state") or "").upper() == "ACTIVE"]
    if not ports:
        raise Skip("not applicable: no active InfiniBand port")
    bad = ["%s/%s" % (d, p) for d, p, x in ports if int(str(x.get("sm_lid") or "0"), 0) == 0
           or int(str(x.get("lid") or "0"), 0) == 0]
    return R("fail" if bad else "pass", ("no SM/LID on %s" % _names(bad)) if bad else
             "%d ports with a LID and a subnet manager" % len(ports), "subnet manager reachable, LID assigned")


@rule("net_ib_mtu")
def r_ib_mtu(v, c):
    v.need("ibv_devinfo")
    info = v.sec("ib_tools").get("ibv_devinfo") or {}
    want = int(c.get("min_mtu", 4096))
    mtus = {}
    for hca, h in info.items():
        for port, p in (h.get("ports") or {}).items():
            if p.get("link_layer") == "InfiniBand" and "ACTIVE" in (p.get("state") or ""):
                mtus["%s/%s" % (hca, port)] = p.get("active_mtu")
    if not mtus:
        raise Skip("not applicable: no active InfiniBand port in ibv_devinfo")
    low = sorted(k for k, m in mtus.items() if (m or 0) < want)
    return R("warn" if low else "pass", _names("%s on %d" % kv for kv in Counter(mtus.values()).items()) +
             (" (low: %s)" % _names(low) if low else ""), "active MTU >= %d" % want)


@rule("net_roce_mtu")
def r_roce_mtu(v, c):
    ifaces = v.sec("net").get("interfaces") or {}
    want = int(c.get("min_mtu", 4200))
    mtus = {}
    for d, _, x in v.rdma_ports():
        if x.get("link_layer") != "Ethernet":
            continue
        for nd in v.rdma()[d].get("netdevs") or []:
            mtus[nd] = (ifaces.get(nd) or {}).get("mtu")
    if not mtus:
        raise Skip("not applicable: RoCE ports have no network interface")
    low = sorted(k for k, m in mtus.items() if (m or 0) < want)
    return R("warn" if low else "pass", _names("%s=%s" % kv for kv in sorted(mtus.items())), "MTU >= %d (jumbo)" % want)


def nccl_settings(v):
    """Effective NCCL_* settings: /etc/nccl.conf, then ~/.nccl.conf, then NCCL_CONF_FILE, then exported variables."""
    n = v.sec("nccl")
    merged = {}
    for path in n.get("searched") or []:
        merged.update((n.get("files") or {}).get(path) or {})
    for _, values in sorted((n.get("profile") or {}).items()):
        merged.update(values)
    merged.update(n.get("environment") or {})
    return merged


@rule("net_hca_naming")
def r_hca_naming(v, c):
    devs = sorted(v.rdma())
    schemes = Counter(re.sub(r"\d+$", "N", re.sub(r"\d+(?=[a-z])", "N", d)) for d in devs)
    settings = nccl_settings(v)
    hca = settings.get("NCCL_IB_HCA")
    bad = []
    if hca:
        spec = hca.lstrip("^=")
        for item in spec.split(","):
            name = item.split(":")[0].strip()
            if not name:
                continue
            exact = hca.startswith("=") or hca.startswith("^=")
            if not any((d == name) if exact else d.startswith(name) for d in devs):
                bad.append(name)
    obs = "%s%s" % (_names("%s x%d" % kv for kv in schemes.most_common()),
                    "; NCCL_IB_HCA=%s" % hca if hca else "")
    if bad:
        return R("fail", obs, "NCCL_IB_HCA names existing devices", "no device matches %s" % ", ".join(bad))
    if len(schemes) > 1:
        return R("warn", obs, "one naming scheme for RDMA devices", "mixed names make NCCL_IB_HCA patterns fragile")
    return R("pass", obs, "one naming scheme; NCCL_IB_HCA (if set) matches")


@rule("net_nccl_conf")
def r_nccl_conf(v, c):
    v.need("nccl_config")
    settings = nccl_settings(v)
    risky = c.get("risky") or {}
    found = []
    for key, value in sorted(settings.items()):
        bad_values = risky.get(key)
        if bad_values is None:
            continue
        if bad_values == "any" or str(value) in [str(x) for x in bad_values]:
            found.append("%s=%s" % (key, value))
    files = [p for p in (v.sec("nccl").get("files") or {})]
    obs = ("%d settings from %s" % (len(settings), _names(files))) if files or settings else "no NCCL overrides"
    if found:
        return R("warn", "%s: %s" % (obs, _names(found)), "no setting that disables a transport or forces a path",
                 "these overrides change NCCL's transport choice for every job on the node")
    return R("pass", obs, "no setting that disables a transport or forces a path")


@rule("net_roce_gid")
def r_roce_gid(v, c):
    settings = nccl_settings(v)
    idx = settings.get("NCCL_IB_GID_INDEX")
    ports = [(d, p, x) for d, p, x in v.rdma_ports() if x.get("link_layer") == "Ethernet"
             and (x.get("state") or "").upper() == "ACTIVE"]
    if not ports:
        raise Skip("not applicable: no active RoCE port")
    v2 = {}
    for d, p, x in ports:
        v2["%s/%s" % (d, p)] = sorted((k for k, g in (x.get("gids") or {}).items()
                                      if "v2" in (g.get("type") or "").lower() and g.get("ipv4")), key=int)
    if idx is None:
        return R("warn", "NCCL_IB_GID_INDEX unset; RoCE v2 IPv4 GIDs at %s" % _names(
            "%s:%s" % (k, "/".join(x) or "none") for k, x in sorted(v2.items())),
                 "NCCL_IB_GID_INDEX set to a RoCE v2 GID",
                 "NCCL picks a GID itself; a wrong one gives a jagged busbw curve")
    wrong = [k for k, x in v2.items() if str(idx) not in x]
    return R("fail" if wrong else "pass", "NCCL_IB_GID_INDEX=%s" % idx + (" (not RoCE v2 on %s)" % _names(wrong)
                                                                         if wrong else ""),
             "NCCL_IB_GID_INDEX points at a RoCE v2 IPv4 GID on every port")


@rule("net_ib_qps")
def r_ib_qps(v, c):
    tiers = v.param_int("fabric_tiers")
    if not tiers:
        raise Skip("not applicable: fabric tier count unknown (set audit_fabric_tiers)")
    if tiers < 2:
        raise Skip("not applicable: single-tier fabric (audit_fabric_tiers=%s)" % tiers)
    want = int(c.get("min_qps", 2))
    qps = nccl_settings(v).get("NCCL_IB_QPS_PER_CONNECTION")
    ok = qps is not None and int(qps) >= want
    return R("pass" if ok else "warn", "NCCL_IB_QPS_PER_CONNECTION=%s" % (qps or "unset (1)"),
             ">= %d on a %s-tier fabric" % (want, tiers), None if ok else "one QP per connection limits ECMP spread")


@rule("net_pkeys")
def r_pkeys(v, c):
    ports = [(d, p, x) for d, p, x in v.rdma_ports() if x.get("link_layer") == "InfiniBand"]
    if not ports:
        raise Skip("not applicable: no InfiniBand port")
    sets = Counter(",".join(x.get("pkeys") or []) or "none" for _, _, x in ports)
    limited = [("%s/%s" % (d, p)) for d, p, x in ports if x.get("pkeys") and
               not any(k.endswith("ffff") for k in x["pkeys"])]
    if limited:
        return R("warn", _names("%s x%d" % kv for kv in sets.items()), "full-membership default PKey 0xffff",
                 "limited-membership PKeys only on %s" % _names(limited))
    return R("warn" if len(sets) > 1 else "pass", _names("%s x%d" % kv for kv in sets.items()),
             "one PKey set on every port, default 0xffff included")


@rule("net_ib_counters")
def r_ib_counters(v, c):
    ports = v.rdma_ports()
    if not any(x.get("counters") for _, _, x in ports):
        raise Skip("not reported: no port counters in sysfs")
    limits = c.get("max") or {}
    bad = []
    for d, p, x in ports:
        for key, limit in limits.items():
            n = (x.get("counters") or {}).get(key)
            if n is not None and n > limit:
                bad.append("%s/%s %s=%d" % (d, p, key, n))
    return R("warn" if bad else "pass", _names(bad) if bad else "below limits on %d ports" % len(ports),
             _names("%s<=%s" % kv for kv in sorted(limits.items())))


@rule("net_rp_filter")
def r_rp_filter(v, c):
    ifaces = v.sec("net").get("interfaces") or {}
    netdevs = [nd for d, _, x in v.rdma_ports() if x.get("link_layer") == "Ethernet"
               for nd in v.rdma()[d].get("netdevs") or []]
    if len(netdevs) < 2:
        raise Skip("not applicable: fewer than two RoCE interfaces")
    allv = v.sec("net").get("rp_filter_all") or 0
    strict = [nd for nd in netdevs if max((ifaces.get(nd) or {}).get("rp_filter") or 0, allv) == 1]
    return R("warn" if strict else "pass", ("strict rp_filter on %s" % _names(strict)) if strict else "loose or off",
             "rp_filter 0 or 2 on multi-rail RoCE interfaces")


@rule("net_frontend")
def r_frontend(v, c):
    net = v.sec("net")
    default = net.get("default_route") or []
    if not default:
        return R("warn", "no default route", "a default route on an interface that is up")
    ifaces = net.get("interfaces") or {}
    down = [i for i in default if (ifaces.get(i) or {}).get("operstate") not in ("up", "unknown")]
    return R("fail" if down else "pass", _names("%s %s" % (i, (ifaces.get(i) or {}).get("operstate")) for i in default),
             "a default route on an interface that is up")


@rule("net_nccl_socket_ifname")
def r_socket_ifname(v, c):
    value = nccl_settings(v).get("NCCL_SOCKET_IFNAME")
    if not value:
        return R("pass", "unset (NCCL picks an interface)", "unset, or matching an existing interface")
    ifaces = sorted(v.sec("net").get("interfaces") or {})
    exclude = value.startswith("^")
    spec = value.lstrip("^")
    exact = spec.startswith("=")
    names = [x for x in spec.lstrip("=").split(",") if x]
    matches = [i for i in ifaces if any((i == n) if exact else i.startswith(n) for n in names)]
    usable = [i for i in ifaces if i not in matches and i != "lo"] if exclude else matches
    return R("pass" if usable else "fail", "NCCL_SOCKET_IFNAME=%s -> %s" % (value, _names(usable) or "nothing"),
             "matches an existing interface")


@rule("net_nic_pcie")
def r_nic_pcie(v, c):
    pcis = {info.get("pci"): dev for dev, info in v.rdma().items() if info.get("pci")}
    rows = []
    narrow = []
    for bdf, dev in sorted(pcis.items()):
        d = v.pci.get(bdf) or {}
        if d.get("link_width") and d.get("link_width_max"):
            rows.append(dev)
            if d["link_width"] < d["link_width_max"]:
                narrow.append("%s x%d<x%d" % (dev, d["link_width"], d["link_width_max"]))
    if not rows:
        raise Skip("not reported: no PCIe link width for the RDMA NICs")
    return R("fail" if narrow else "pass", _names(narrow) if narrow else "%d NICs at full width" % len(rows),
             "every RDMA NIC at its maximum PCIe width")


# ---- storage ------------------------------------------------------------------------------------------------

SHARED_FS = ("nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "ceph", "virtiofs", "fuse.juicefs", "fuse.s3fs",
             "fuse.gcsfuse", "cifs", "smb3", "glusterfs", "fuse.glusterfs", "9p", "panfs", "fuse.weka")
PARALLEL_FS = ("lustre", "gpfs", "wekafs", "beegfs", "panfs", "fuse.weka")


def tier_of(m):
    fs, src = m.get("fstype") or "", m.get("source") or ""
    if fs in PARALLEL_FS:
        return {"lustre": "Lustre", "gpfs": "GPFS", "wekafs": "Weka", "fuse.weka": "Weka", "beegfs": "BeeGFS",
                "panfs": "PanFS"}[fs]
    if fs.startswith("nfs"):
        return "NFS"
    if fs == "virtiofs":
        return "virtiofs"
    if fs in SHARED_FS:
        return fs
    if fs == "tmpfs":
        return "tmpfs"
    if "nvme" in src or re.match(r"^/dev/md\d", src):
        return "local NVMe/RAID"
    return "local %s" % fs


def _mounts(v):
    v.need("mounts")
    return v.sec("storage").get("mounts") or []


@rule("storage_shared")
def r_shared(v, c):
    mounts = [m for m in _mounts(v)
              if (m.get("fstype") or "") in SHARED_FS or (m.get("fstype") or "").startswith("nfs")]
    if not mounts:
        return R("warn", "none", "a shared filesystem mounted on every node")
    return R("pass", _names("%s %s" % (m["target"], tier_of(m)) for m in mounts), "a shared filesystem mounted")


@rule("storage_parallel")
def r_parallel(v, c):
    mounts = _mounts(v)
    par = [m for m in mounts if (m.get("fstype") or "") in PARALLEL_FS]
    if par:
        return R("pass", _names("%s %s" % (m["target"], tier_of(m)) for m in par), "a parallel filesystem for data")
    nfs = [m for m in mounts if (m.get("fstype") or "").startswith("nfs")]
    return R("warn", ("NFS only: %s" % _names(m["target"] for m in nfs)) if nfs else "none",
             "a parallel filesystem (Lustre, GPFS, Weka, BeeGFS) or a scale-out NFS for data")


@rule("storage_home_shared")
def r_home(v, c):
    st = v.sec("storage")
    v.need("mounts")
    fs = st.get("home_fstype") or ""
    shared = fs in SHARED_FS or fs.startswith("nfs")
    return R("pass" if shared else "warn", "/home on %s (%s)" % (st.get("home_mount"), fs or "?"),
             "/home on shared storage", None if shared else "users see a different home directory on every node")


@rule("storage_local_nvme")
def r_local_nvme(v, c):
    st = v.sec("storage")
    mounts = _mounts(v)
    local = [m for m in mounts if tier_of(m) == "local NVMe/RAID" and m.get("target") != "/"]
    devices = st.get("nvme") or {}
    if local:
        return R("pass", _names("%s (%s, %.1f TB)" % (m["target"], m.get("source"), (m.get("size") or 0) / 1e12)
                               for m in local), "local NVMe scratch mounted")
    if devices:
        return R("warn", "%d NVMe devices, none mounted as scratch" % len(devices), "local NVMe scratch mounted")
    return R("warn", "no NVMe device", "local NVMe scratch mounted")


def _free_rule(target_pick, what):
    def fn(v, c):
        mounts = _mounts(v)
        pct_warn = float(c.get("warn_below_pct", 10))
        pct_fail = float(c.get("fail_below_pct", 5))
        chosen = target_pick(mounts)
        if not chosen:
            raise Skip("not applicable: no %s mount" % what)
        rows, status = [], "pass"
        for m in chosen:
            if m.get("error"):
                rows.append("%s: %s" % (m["target"], m["error"]))
                status = "fail" if "timed out" in m["error"] else status
                continue
            if not m.get("size"):
                continue
            pct = 100.0 * (m.get("avail") or 0) / m["size"]
            if pct < pct_fail:
                status = "fail"
            elif pct < pct_warn and status == "pass":
                status = "warn"
            if pct < pct_warn or len(chosen) == 1:
                rows.append("%s %.0f%% free (%.1f GiB)" % (m["target"], pct, (m.get("avail") or 0) / 2**30))
        obs = _names(rows) if rows else "%d mounts above %g%% free" % (len(chosen), pct_warn)
        return R(status, obs, ">= %g%% free (fail below %g%%)" % (pct_warn, pct_fail))
    return fn


RULES["storage_root_free"] = _free_rule(lambda ms: [m for m in ms if m["target"] == "/"], "root")
RULES["storage_mounts_free"] = _free_rule(
    lambda ms: [m for m in ms if m["target"] != "/" and "ro" not in (m.get("options") or "").split(",")
                and m.get("fstype") not in ("tmpfs",)], "writable")


@rule("storage_inodes")
def r_inodes(v, c):
    mounts = [m for m in _mounts(v) if m.get("inodes")]
    limit = float(c.get("max_used_pct", 90))
    high = ["%s %.0f%%" % (m["target"], 100.0 * (1 - m["inodes_free"] / m["inodes"])) for m in mounts
            if m["inodes"] and 100.0 * (1 - m["inodes_free"] / m["inodes"]) > limit]
    return R("warn" if high else "pass",
             _names(high) if high else "%d mounts below %g%% inodes used" % (len(mounts), limit),
             "<= %g%% inodes used" % limit)


def _size_rule(target, min_gib, what):
    def fn(v, c):
        mounts = _mounts(v)
        m = next((x for x in mounts if x["target"] == target), None)
        want = float(c.get("min_gib", min_gib))
        if not m or not m.get("size"):
            raise Skip("not applicable: %s is not a separate mount" % target)
        size = (m.get("avail") if c.get("measure") == "avail" else m.get("size")) / 2**30
        return R("pass" if size >= want else "warn", "%s %.1f GiB %s" % (target, size, c.get("measure", "size")),
                 ">= %g GiB (%s)" % (want, what))
    return fn


RULES["storage_tmp"] = _size_rule("/tmp", 1, "scratch for jobs")
RULES["storage_dev_shm"] = _size_rule("/dev/shm", 1, "NCCL's shared-memory transport")


@rule("storage_fstab")
def r_fstab(v, c):
    st = v.sec("storage")
    entries = [e for e in st.get("fstab") or [] if e.get("fstype") not in ("swap", "none", "proc", "sysfs")
               and "noauto" not in (e.get("options") or "") and e.get("target", "").startswith("/")]
    if not entries:
        raise Skip("not applicable: no mount in /etc/fstab")
    mounted = set(st.get("mount_targets") or [])
    missing = [e["target"] for e in entries if e["target"] not in mounted]
    return R("warn" if missing else "pass", ("not mounted: %s" % _names(missing)) if missing else
             "%d entries mounted" % len(entries), "every /etc/fstab entry mounted")


@rule("storage_nfs_options")
def r_nfs(v, c):
    nfs = [m for m in _mounts(v) if (m.get("fstype") or "").startswith("nfs")]
    if not nfs:
        raise Skip("not applicable: no NFS mount")
    min_rw = int(c.get("min_rwsize", 1048576))
    bad = []
    for m in nfs:
        opts = dict(o.split("=", 1) if "=" in o else (o, True) for o in (m.get("options") or "").split(","))
        ro = "ro" in opts
        if "soft" in opts and not ro:
            bad.append("%s soft" % m["target"])
        for key in ("rsize", "wsize"):
            if key in opts and int(opts[key]) < min_rw and not (ro and key == "wsize"):
                bad.append("%s %s=%s" % (m["target"], key, opts[key]))
    return R("warn" if bad else "pass", _names(bad) if bad else "%d NFS mounts hard, large blocks" % len(nfs),
             "hard mounts (rw), rsize/wsize >= %d" % min_rw)


@rule("storage_hung")
def r_hung(v, c):
    hung = [m["target"] for m in _mounts(v) if "timed out" in (m.get("error") or "")]
    return R("fail" if hung else "pass", ("hung: %s" % _names(hung)) if hung else "every mount answered statvfs",
             "no hung mount")


@rule("storage_root_rw")
def r_root_rw(v, c):
    root = next((m for m in _mounts(v) if m["target"] == "/"), None)
    if not root:
        raise Error("no root mount recorded")
    ro = root.get("readonly") or "ro" in (root.get("options") or "").split(",")
    return R("fail" if ro else "pass", "/ %s (%s)" % ("read-only" if ro else "read-write", root.get("fstype")),
             "root filesystem read-write")


# ---- scheduler --------------------------------------------------------------------------------------------

def _slurm_cfg(v):
    v.need("slurm")
    return v.slurm().get("config") or {}


@rule("slurm_controller")
def r_slurm_controller(v, c):
    s = v.slurm()
    _slurm_cfg(v)
    live = s.get("source") == "scontrol"
    ver = (s.get("config") or {}).get("SLURM_VERSION") or (v.tool("slurm") or {}).get("version")
    return R("pass" if live else "warn", "%s%s" % ("slurmctld answers" if live else "slurm.conf only (slurmctld did "
                                                  "not answer)", ", Slurm %s" % ver if ver else ""),
             "slurmctld answers scontrol")


@rule("slurm_topology")
def r_slurm_topology(v, c):
    cfg = _slurm_cfg(v)
    plugin = cfg.get("TopologyPlugin") or ""
    param = cfg.get("TopologyParam") or ""
    flat = plugin in ("", "topology/flat", "topology/none", "topology/default") and "SwitchAsNodeRank" not in param
    return R("fail" if flat else "pass", "TopologyPlugin=%s" % (plugin or "unset"),
             "topology/tree or topology/block (not flat)",
             "without topology, jobs are placed without regard to the network" if flat else None)


@rule("slurm_healthcheck")
def r_slurm_hc(v, c):
    cfg = _slurm_cfg(v)
    prog = cfg.get("HealthCheckProgram")
    if not prog:
        return R("fail", "HealthCheckProgram unset", "a health check program on every node")
    exists = v.slurm().get("healthcheck_exists")
    obs = "%s every %s (%s)" % (prog, cfg.get("HealthCheckInterval", "?"), cfg.get("HealthCheckNodeState", "?"))
    if exists is False:
        return R("fail", obs + "; not found on this node", "a health check program on every node")
    return R("pass", obs, "a health check program on every node")


@rule("slurm_prolog_epilog")
def r_slurm_prolog(v, c):
    cfg = _slurm_cfg(v)
    have = {k: cfg.get(k) for k in ("Prolog", "Epilog") if cfg.get(k)}
    return R("pass" if len(have) == 2 else "warn", _names("%s=%s" % kv for kv in have.items()) or "none",
             "Prolog and Epilog set (node checks and cleanup around jobs)")


@rule("slurm_gres")
def r_slurm_gres(v, c):
    cfg = _slurm_cfg(v)
    s = v.slurm()
    types = cfg.get("GresTypes") or ""
    node_gres = s.get("node_gres") or ""
    conf = s.get("gres_conf") or []
    ok = "gpu" in types and ("gpu" in node_gres or any("gpu" in x.lower() for x in conf))
    return R("pass" if ok else "fail", "GresTypes=%s; node Gres=%s; gres.conf %s" % (
        types or "unset", node_gres or "?", "%d lines" % len(conf) if s.get("gres_conf") is not None else "absent"),
        "GPUs scheduled as GRES on GPU nodes")


@rule("slurm_accounting")
def r_slurm_acct(v, c):
    cfg = _slurm_cfg(v)
    value = cfg.get("AccountingStorageType") or "unset"
    return R("pass" if value.endswith("slurmdbd") else "warn", "AccountingStorageType=%s" % value,
             "accounting_storage/slurmdbd")


@rule("slurm_pyxis")
def r_slurm_pyxis(v, c):
    _slurm_cfg(v)
    s = v.slurm()
    lines = [x for x in s.get("plugstack") or [] if "pyxis" in x]
    plugin = v.sec("libraries").get("pyxis_plugin") or []
    enroot = v.tool("enroot")
    ok = bool(lines) and bool(enroot)
    return R("pass" if ok else "warn", "plugstack %s, spank_pyxis.so %s, enroot %s" % (
        "has pyxis" if lines else "without pyxis", "found" if plugin else "not found",
        (enroot or {}).get("version") or "missing"), "pyxis in plugstack.conf with enroot installed")


@rule("slurm_pmix")
def r_slurm_pmix(v, c):
    cfg = _slurm_cfg(v)
    s = v.slurm()
    mpi = s.get("mpi_plugins") or []
    plugin = v.sec("libraries").get("pmix_plugin") or []
    ok = any(m.startswith("pmix") for m in mpi) or bool(plugin)
    return R("pass" if ok else "warn", "MpiDefault=%s; srun --mpi=list: %s; plugins: %s" % (
        cfg.get("MpiDefault", "unset"), _names(mpi) or "?", _names(plugin) or "none"), "PMIx available to srun")


@rule("slurm_slurmd")
def r_slurmd(v, c):
    _slurm_cfg(v)
    running = "slurmd" in v.daemons()
    return R("pass" if running else "fail", "slurmd %s" % ("running" if running else "not running"),
             "slurmd running on compute nodes")


@rule("slurm_node_state")
def r_slurm_state(v, c):
    _slurm_cfg(v)
    state = v.slurm().get("node_state")
    if state is None:
        raise Skip("not reported: scontrol show node gave no state for this host (not a Slurm node, or slurmctld "
                   "did not answer)")
    bad = any(x in state.upper() for x in ("DOWN", "DRAIN", "FAIL", "NOT_RESPONDING"))
    return R("fail" if bad else "pass", state, "not down, drained or failing")


@rule("slurm_cgroup_devices")
def r_slurm_cgroup(v, c):
    _slurm_cfg(v)
    cg = v.slurm().get("cgroup_conf")
    if cg is None:
        return R("fail", "no cgroup.conf", "ConstrainDevices=yes (jobs see only their GPUs)")
    value = {k.lower(): x for k, x in cg.items()}.get("constraindevices", "no")
    return R("pass" if value.lower() == "yes" else "fail", "ConstrainDevices=%s" % value,
             "ConstrainDevices=yes (jobs see only their GPUs)")


@rule("slurm_select")
def r_slurm_select(v, c):
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
    def fn(v, c):
        found = _k8s_pods(v, c.get("pattern", pattern))
        return R("pass" if found else "fail", _names(found) if found else "not found", "%s running" % what)
    return fn


RULES["k8s_gpu_operator"] = _k8s_component(r"gpu-operator", "NVIDIA GPU operator")
RULES["k8s_network_operator"] = _k8s_component(r"network-operator", "NVIDIA network operator")
RULES["k8s_device_plugin"] = _k8s_component(r"device-plugin", "GPU device plugin")


@rule("k8s_default_storageclass")
def r_k8s_default_sc(v, c):
    scs = kubernetes(v)["storageclasses"]
    default = [s["metadata"]["name"] for s in scs if ((s.get("metadata") or {}).get("annotations") or {}).get(
        "storageclass.kubernetes.io/is-default-class") == "true"]
    return R("pass" if len(default) == 1 else "fail", _names(default) or "none", "exactly one default StorageClass")


@rule("k8s_rwx_storageclass")
def r_k8s_rwx(v, c):
    scs = kubernetes(v)["storageclasses"]
    rwx_provisioners = c.get("rwx_provisioners", [])
    found = [s["metadata"]["name"] for s in scs if any(p in (s.get("provisioner") or "") for p in rwx_provisioners)]
    return R("pass" if found else "warn", _names(found) or "none", "a ReadWriteMany-capable StorageClass")


# ---- health and monitoring ----------------------------------------------------------------------------------

@rule("health_dcgm")
def r_dcgm(v, c):
    running = "nv-hostengine" in v.daemons()
    local = v.listeners(port=5555)
    if running or local:
        return R("pass", "nv-hostengine running", "DCGM host engine running")
    return R("fail", "nv-hostengine not running" + (" (dcgmi installed)" if v.sec("health").get("dcgmi") else
                                                   " (DCGM not installed)"), "DCGM host engine running")


def _exporter(port, names):
    def fn(v, c):
        p = int(c.get("port", port))
        socks = v.listeners(port=p)
        exposed = [s for s in socks if not s.get("loopback")]
        proc = sorted(set(names) & v.daemons())
        if exposed:
            return R("pass", "listening on %s:%d" % (exposed[0]["address"], p),
                     "scrapable on port %d of every node" % p)
        if socks:
            return R("warn", "listening on loopback only", "scrapable on port %d of every node" % p)
        if proc:
            return R("warn", "%s running, port %d not listening here" % (proc[0], p),
                     "scrapable on port %d of every node" % p)
        return R("fail", "not running", "scrapable on port %d of every node" % p)
    return fn


RULES["health_dcgm_exporter"] = _exporter(9400, ["dcgm-exporter"])
RULES["health_node_exporter"] = _exporter(9100, ["node_exporter", "node-exporter"])


@rule("health_agent")
def r_health_agent(v, c):
    h = v.sec("health")
    found = []
    if h.get("nhc"):
        found.append("NHC (%s%s)" % (h["nhc"], ", " + h["nhc_conf"] if h.get("nhc_conf") else ", no config"))
    for d in ("nvsentinel", "gpud"):
        if d in v.daemons():
            found.append(d)
    if h.get("nvsentinel_config"):
        found.append("NVSentinel config")
    hc = (v.slurm().get("config") or {}).get("HealthCheckProgram")
    if hc:
        found.append("Slurm HealthCheckProgram %s" % hc)
    return R("pass" if found else "fail", _names(found) or "none", "a node health-check agent (NHC, NVSentinel, ...)")


@rule("health_dcgm_diag")
def r_dcgm_diag(v, c):
    v.need("dcgm_diag")
    diag = v.sec("health").get("dcgm_diag") or {}
    tests = diag.get("tests") or {}
    if diag.get("failed"):
        return R("fail", "failed: %s" % _names(diag["failed"]), "every test of dcgmi diag -r 1 passes")
    if diag.get("warned"):
        return R("warn", "warnings: %s" % _names(diag["warned"]), "every test of dcgmi diag -r 1 passes")
    return R("pass", "%d tests passed" % sum(1 for x in tests.values() if x == "pass"),
             "every test of dcgmi diag -r 1 passes")


@rule("health_time_sync")
def r_time_sync(v, c):
    clock = v.sec("system").get("clock")
    if not clock:
        raise Skip("not reported: adjtimex not readable")
    return R("fail" if clock.get("unsynchronised") else "pass",
             "clock %s (max error %s us)" % ("unsynchronised" if clock.get("unsynchronised") else "synchronised",
                                             clock.get("maxerror_us")), "clock synchronised (NTP/PTP)")


@rule("health_time_daemon")
def r_time_daemon(v, c):
    found = sorted({"chronyd", "ntpd", "systemd-timesyncd"} & v.daemons())
    return R("pass" if found else "warn", _names(found) or "none", "a time daemon running")


@rule("health_failed_units")
def r_failed_units(v, c):
    v.need("systemctl_failed")
    units = v.sec("system").get("failed_units") or []
    return R("warn" if units else "pass", _names(units) or "none", "no failed systemd unit")


@rule("health_journal")
def r_journal(v, c):
    persistent = v.sec("system").get("journal_persistent")
    return R("pass" if persistent else "warn", "persistent" if persistent else "volatile (lost at reboot)",
             "persistent journal (XID history survives reboots)")


@rule("health_load")
def r_load(v, c):
    s = v.sec("system")
    load, cpus = s.get("loadavg_1m"), s.get("cpu_count") or 1
    if load is None:
        raise Skip("not reported: no load average")
    limit = float(c.get("max_per_cpu", 1.0)) * cpus
    return R("warn" if load > limit else "pass", "load %.2f on %d CPUs" % (load, cpus),
             "<= %g (node idle before load tests)" % limit)


# ---- security -------------------------------------------------------------------------------------------------

def _sshd(v, key):
    v.need("sshd_t")
    value = (v.sec("security").get("sshd") or {}).get(key)
    if value is None:
        raise Skip("not reported: sshd -T has no %s (older OpenSSH)" % key)
    return value


def _sshd_rule(key, good, warn=(), expected=None):
    def fn(v, c):
        value = _sshd(v, key)
        status = "pass" if value in good else "warn" if value in warn else c.get("status_bad", "fail")
        return R(status, "%s %s" % (key, value), expected or "%s %s" % (key, " or ".join(good)))
    return fn


RULES["ssh_password_auth"] = _sshd_rule("passwordauthentication", ("no",))
RULES["ssh_root_login"] = _sshd_rule("permitrootlogin", ("no",), warn=("prohibit-password", "without-password",
                                                                        "forced-commands-only"))
RULES["ssh_kbd_interactive"] = _sshd_rule("kbdinteractiveauthentication", ("no",))
RULES["ssh_empty_passwords"] = _sshd_rule("permitemptypasswords", ("no",))
RULES["ssh_x11"] = _sshd_rule("x11forwarding", ("no",))


@rule("ssh_max_auth_tries")
def r_max_auth(v, c):
    value = _sshd(v, "maxauthtries")
    limit = int(c.get("max", 4))
    return R("pass" if int(value) <= limit else "warn", "maxauthtries %s" % value, "<= %d" % limit)


def _exposed_port(port, what):
    def fn(v, c):
        v.need("listeners")
        p = int(c.get("port", port))
        exposed = v.listeners(port=p, exposed=True)
        if exposed:
            return R(c.get("status_exposed", "fail"), "%s listening on %s" % (
                what, _names("%s:%d" % (s["address"], p) for s in exposed)), "not reachable beyond loopback")
        local = v.listeners(port=p)
        return R("pass", "loopback only" if local else "not listening", "not reachable beyond loopback")
    return fn


RULES["listen_dcgm"] = _exposed_port(5555, "DCGM host engine")
RULES["listen_docker_api"] = _exposed_port(2375, "Docker API (plain TCP)")


@rule("listen_kubelet")
def r_kubelet(v, c):
    v.need("listeners")
    exposed = v.listeners(port=10250, exposed=True)
    if not exposed:
        return R("pass", "not listening beyond loopback", "kubelet API not open to the tenant network")
    anon = v.sec("kubernetes").get("anonymous_auth")
    if anon is False:
        return R("pass", "kubelet on %s:10250, anonymous auth off" % exposed[0]["address"],
                 "kubelet API authenticated")
    return R("warn", "kubelet on %s:10250, anonymous auth %s" % (exposed[0]["address"],
                                                                 "ON" if anon else "unknown"),
             "kubelet API not open to the tenant network, or anonymous auth off")


@rule("listen_exporters")
def r_listen_exporters(v, c):
    v.need("listeners")
    ports = set(c.get("ports", []))
    wide = [s for s in v.listeners(exposed=True) if s["port"] in ports and s["address"] in ("0.0.0.0", "::")]
    if wide:
        return R("warn", "bound to all addresses: %s" % _names(sorted({"%d (%s)" % (s["port"], s.get("process") or "?")
                                                                       for s in wide})),
                 "metrics bound to the management address only")
    return R("pass", "none bound to all addresses", "metrics bound to the management address only")


@rule("listen_other")
def r_listen_other(v, c):
    v.need("listeners")
    allowed = set(c.get("allowed_ports", []))
    other = sorted({(s["port"], s.get("process") or "?") for s in v.listeners(exposed=True)
                    if s["port"] not in allowed})
    if other:
        return R("warn", "open: %s" % _names("%d (%s)" % x for x in other), "only expected services beyond loopback",
                 "each listening service is reachable from every tenant on the network")
    return R("pass", "%d expected services" % len(v.listeners(exposed=True)), "only expected services beyond loopback")


@rule("metadata_endpoint")
def r_metadata(v, c):
    v.need("metadata")
    md = v.sec("security").get("metadata") or {}
    if md.get("reachable"):
        return R("fail", "answers (HTTP %s)" % md.get("status"), "not reachable from the tenant",
                 "instance credentials and user data may be readable from jobs")
    return R("pass", "unreachable (%s)" % md.get("error", "no answer"), "not reachable from the tenant")


@rule("bmc_access")
def r_bmc(v, c):
    ipmi = v.sec("security").get("ipmi") or {}
    nodes = ipmi.get("device_nodes") or []
    if nodes:
        return R("warn", "%s present%s" % (_names(nodes), ", ipmitool installed" if ipmi.get("ipmitool") else ""),
                 "no in-band BMC access from the tenant", "root on the node can reconfigure the BMC")
    return R("pass", "no IPMI device node" + (" (modules %s)" % _names(ipmi["modules"]) if ipmi.get("modules") else ""),
             "no in-band BMC access from the tenant")


@rule("docker_socket")
def r_docker_socket(v, c):
    sock = v.sec("security").get("docker_socket")
    if not sock:
        raise Skip("not applicable: no Docker socket")
    if sock.get("world_writable"):
        return R("fail", "%s mode %s" % (sock["path"], sock["mode"]), "not world-writable")
    if sock.get("group_members"):
        return R("warn", "group %s: %s" % (sock.get("group"), _names(sock["group_members"])),
                 "docker group empty (membership is root)")
    return R("pass", "%s mode %s, group %s empty" % (sock["path"], sock["mode"], sock.get("group")),
             "not world-writable, docker group empty")


@rule("path_world_writable")
def r_path(v, c):
    dirs = v.sec("security").get("path") or []
    bad = [d["path"] for d in dirs if d.get("world_writable")]
    return R("fail" if bad else "pass", ("world-writable: %s" % _names(bad)) if bad else "%d directories" % len(dirs),
             "no world-writable directory in PATH")


@rule("sudo_nopasswd")
def r_sudo(v, c):
    v.need("sudoers")
    rules = (v.sec("security").get("sudo") or {}).get("nopasswd") or []
    return R("warn" if rules else "pass", _names(r["rule"] for r in rules) if rules else "none",
             "no NOPASSWD sudo rule")


@rule("kernel_mitigations")
def r_mitigations(v, c):
    s = v.sec("system")
    vulns = s.get("vulnerabilities") or {}
    off = (s.get("cmdline") or {}).get("mitigations")
    vulnerable = sorted(k for k, x in vulns.items() if (x or "").startswith("Vulnerable"))
    if off == "off":
        return R("fail", "mitigations=off on the kernel command line", "CPU mitigations on")
    if not vulns:
        raise Skip("not reported: /sys/devices/system/cpu/vulnerabilities absent")
    return R("fail" if vulnerable else "pass", ("vulnerable: %s" % _names(vulnerable)) if vulnerable else
             "%d checked, none vulnerable" % len(vulns), "no CPU vulnerability left unmitigated")


@rule("mac_enforced")
def r_mac(v, c):
    mac = v.sec("security").get("mac") or {}
    if mac.get("selinux") == "enforcing":
        return R("pass", "SELinux enforcing", "SELinux enforcing or AppArmor enforcing profiles")
    if mac.get("apparmor_enabled") and (mac.get("apparmor_profiles_enforced") or 0) > 0:
        return R("pass", "AppArmor, %d profiles enforced" % mac["apparmor_profiles_enforced"],
                 "SELinux enforcing or AppArmor enforcing profiles")
    return R("warn", "SELinux %s, AppArmor %s" % (mac.get("selinux"), "enabled" if mac.get("apparmor_enabled")
                                                  else "off"), "SELinux enforcing or AppArmor enforcing profiles")


RULES["dmesg_restrict"] = _sysctl_rule("kernel.dmesg_restrict", lambda x: x == "1", "kernel.dmesg_restrict = 1")
RULES["kptr_restrict"] = _sysctl_rule("kernel.kptr_restrict", lambda x: x in ("1", "2"), "kernel.kptr_restrict >= 1")
RULES["ptrace_scope"] = _sysctl_rule("kernel.yama.ptrace_scope", lambda x: x in ("1", "2", "3"),
                                     "kernel.yama.ptrace_scope >= 1")
RULES["aslr"] = _sysctl_rule("kernel.randomize_va_space", lambda x: x == "2", "kernel.randomize_va_space = 2",
                             status_bad="fail")
RULES["suid_dumpable"] = _sysctl_rule("fs.suid_dumpable", lambda x: x == "0", "fs.suid_dumpable = 0")
RULES["unprivileged_bpf"] = _sysctl_rule("kernel.unprivileged_bpf_disabled", lambda x: x in ("1", "2"),
                                         "kernel.unprivileged_bpf_disabled >= 1")
RULES["protected_links"] = _sysctl_rule("fs.protected_symlinks", lambda x: x == "1", "fs.protected_symlinks = 1")


@rule("uid0_accounts")
def r_uid0(v, c):
    uid0 = (v.sec("security").get("accounts") or {}).get("uid0") or []
    extra = [u for u in uid0 if u != "root"]
    return R("fail" if extra else "pass", _names(uid0), "only root has UID 0")


@rule("empty_passwords")
def r_empty_pw(v, c):
    acc = v.sec("security").get("accounts") or {}
    if not acc.get("shadow_readable"):
        raise Skip("not permitted: /etc/shadow is readable by root only")
    empty = acc.get("empty_password") or []
    return R("fail" if empty else "pass", _names(empty) or "none", "no account with an empty password")


@rule("shadow_perms")
def r_shadow(v, c):
    mode = (v.sec("security").get("accounts") or {}).get("shadow_mode")
    if mode is None:
        raise Skip("not applicable: no /etc/shadow")
    ok = not (int(mode, 8) & 0o007)
    return R("pass" if ok else "fail", "/etc/shadow %s" % mode, "no access for others")


# ------------------------------------------------------------------------------------------------ consistency

def _get(facts, path):
    value = facts
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _nic_layout(v):
    out = {}
    for name, i in (v.sec("net").get("interfaces") or {}).items():
        if i.get("virtual") and name != "lo":
            continue
        out[name] = {"mtu": i.get("mtu"), "speed_mbps": i.get("speed_mbps"), "operstate": i.get("operstate"),
                     "driver": i.get("driver")}
    for dev, info in v.rdma().items():
        out[dev] = {p: {"state": x.get("state"), "rate": x.get("rate"), "link_layer": x.get("link_layer")}
                    for p, x in (info.get("ports") or {}).items()}
    return out


def _gpu_settings(v):
    keys = ("name", "vbios", "persistence_mode", "ecc_mode", "mig_mode", "compute_mode", "power_limit_enforced_w",
            "app_clock_graphics_mhz", "pcie_gen_max", "pcie_width_current", "memory_total_mib")
    try:
        return {str(g["index"]): {k: g.get(k) for k in keys if g.get(k) is not None} for g in v.gpus()}
    except (Skip, Error):
        return None


EXTRACTORS = {
    "nccl": nccl_settings,
    "nic_layout": _nic_layout,
    "gpu_settings": _gpu_settings,
    "listen_ports": lambda v: sorted({"%d/%s" % (s["port"], s.get("process") or "?")
                                      for s in v.listeners(exposed=True)}),
    "mounts": lambda v: sorted("%s %s" % (m["target"], m.get("fstype")) for m in v.sec("storage").get("mounts") or []),
    "daemons": lambda v: sorted(v.daemons()),
    "hca_firmware": lambda v: _connectx(v) or None,
    "tool_versions": lambda v: {k: (x or {}).get("version") for k, x in sorted(v.sec("tools").items())},
    "driver": lambda v: v.driver_version(),
    # the listen address is each host's own IP: not drift
    "sshd": lambda v: {k: x for k, x in (v.sec("security").get("sshd") or {}).items() if k != "listenaddress"} or None,
}


def flatten(value, prefix="", out=None):
    """Nested facts -> {dotted key: canonical text}. Lists of records are keyed by a natural key (target, path,
    index, port, name) when they have one, so one extra entry does not shift every key after it."""
    out = {} if out is None else out
    if isinstance(value, dict):
        if not value:
            out[prefix] = "{}"
        for k, x in value.items():
            flatten(x, "%s.%s" % (prefix, k) if prefix else str(k), out)
    elif isinstance(value, list):
        if value and all(isinstance(x, dict) for x in value):
            for i, x in enumerate(value):
                key = next((str(x[k]) for k in ("target", "path", "index", "port", "name", "file") if k in x), str(i))
                flatten(x, "%s[%s]" % (prefix, key), out)
        else:
            out[prefix] = json.dumps(value, sort_keys=True, default=str)
    else:
        out[prefix] = json.dumps(value, default=str)
    return out


# The consistency view's rule (most common value, no winner on a tie) is the core grader's, not a copy.
_majority = G.majority_value


def _cluster_precondition(check, run, hosts):
    rows, views = [], {}
    for host in hosts:
        if host in run.unreachable:
            rows.append(G.make_row(check, host, "skip", reason="host unreachable"))
            continue
        doc = run.artifact(host, PROBE)
        if doc is None:
            rows.append(G.make_row(check, host, "skip", reason="the audit did not run on this host"))
        elif doc["status"] == "skipped":
            rows.append(G.make_row(check, host, "skip", reason=doc.get("reason")))
        elif not doc.get("facts"):
            rows.append(G.make_row(check, host, "error", reason=doc.get("reason") or "no facts"))
        else:
            views[host] = _view(run, host, doc)
    return rows, views


@cluster_rule("consistency")
def c_consistency(check, run, hosts):
    """One fact (a path into the facts, or a named extractor) compared across hosts; the odd ones are named."""
    rows, views = _cluster_precondition(check, run, hosts)
    values, raw = {}, {}
    for host, v in views.items():
        if check.get("extract"):
            value = EXTRACTORS[check["extract"]](v)
        else:
            value = _get(v.f, check["fact"])
        if value is None and not check.get("include_missing"):
            continue
        raw[host] = value
        values[host] = json.dumps(value, sort_keys=True, default=str)
    reference, counts = _majority(values)
    for host in hosts:
        if host not in views:
            continue
        if host not in values:
            rows.append(G.make_row(check, host, "skip", reason="not reported by this host"))
            continue
        if len(values) < 2:
            rows.append(G.make_row(check, host, "skip", _short(raw[host]), reason="only one host reported it: nothing "
                                                                             "to compare"))
            continue
        if reference is None:
            rows.append(G.make_row(check, host, "warn", _short(raw[host]), "one value on all hosts",
                               "no majority: %d different values" % len(counts)))
            continue
        if values[host] == reference:
            rows.append(G.make_row(check, host, "pass", _short(raw[host]), "same on %d/%d hosts" % (counts[reference],
                                                                                                len(values))))
            continue
        ref_host = next(h for h in values if values[h] == reference)
        diff = _diff_keys(raw[host], raw[ref_host])
        rows.append(G.make_row(check, host, "warn", _short(raw[host]), _short(raw[ref_host]),
                           "differs from %d of %d hosts%s" % (counts[reference], len(values),
                                                             ": " + _names(diff, 4) if diff else "")))
    return rows


def _diff_keys(a, b):
    fa, fb = flatten(a), flatten(b)
    return sorted(k or "(value)" for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))


@cluster_rule("consistency_all")
def c_consistency_all(check, run, hosts):
    """Every fact of every host compared with the majority (per-host identities and live readings excluded)."""
    rows, views = _cluster_precondition(check, run, hosts)
    exclude = check.get("exclude", [])
    pattern = re.compile("|".join("(?:%s)" % fnmatch.translate(p) for p in exclude)) if exclude else None
    verdict = {}  # key -> excluded? (keys repeat on every host: match each once)
    flat = {}
    for host, v in views.items():
        kept = {}
        for k, x in flatten(v.f).items():
            if k not in verdict:
                verdict[k] = bool(pattern and pattern.match(k))
            if not verdict[k]:
                kept[k] = x
        flat[host] = kept
    keys = sorted(set().union(*flat.values())) if flat else []
    odd = {h: [] for h in flat}
    for key in keys:
        per = {h: f.get(key, "<absent>") for h, f in flat.items()}
        ref, counts = _majority(per)
        for h, x in per.items():
            if ref is None or x != ref:
                odd[h].append(key)
    for host in hosts:
        if host not in views:
            continue
        if len(flat) < 2:
            rows.append(G.make_row(check, host, "skip", "%d facts" % len(flat[host]),
                               reason="only one host reported it: nothing to compare"))
        elif odd[host]:
            rows.append(G.make_row(check, host, "warn", "%d of %d facts differ: %s" % (len(odd[host]), len(keys),
                                                                                  _names(odd[host], 5)),
                               "the value most hosts have", "differs from the majority"))
        else:
            rows.append(G.make_row(check, host, "pass", "%d facts match" % len(keys), "the value most hosts have"))
    return rows


@cluster_rule("gpu_model_cluster")
def c_gpu_model_cluster(check, run, hosts):
    rows, views = _cluster_precondition(check, run, hosts)
    models = {h: ", ".join(v.gpu_names()) for h, v in views.items() if v.vendor}
    distinct = sorted(set(models.values()))
    for host in hosts:
        if host not in views:
            continue
        if host not in models:
            rows.append(G.make_row(check, host, "skip", reason="not applicable: no GPU on this host"))
        elif len(distinct) > 1:
            rows.append(G.make_row(check, host, "warn", models[host], "one GPU model across the cluster",
                               "cluster mixes %s" % " / ".join(distinct)))
        else:
            rows.append(G.make_row(check, host, "pass", models[host] or "?", "one GPU model across the cluster"))
    return rows


# ------------------------------------------------------------------------------------------------ entry points

def grade_host(check, run, host):
    """Kind `audit`: one row for this host."""
    if host in run.unreachable:
        return [G.make_row(check, host, "skip", reason="host unreachable")]
    doc = run.artifact(host, PROBE)
    if doc is None:
        return [G.make_row(check, host, "skip", reason="the audit did not run on this host")]
    if doc["status"] == "skipped":
        return [G.make_row(check, host, "skip", reason=doc.get("reason"))]
    if not doc.get("facts"):
        return [G.make_row(check, host, "error", reason="audit failed: %s" % doc.get("reason"))]
    v = _view(run, host, doc)
    try:
        for cond in check.get("applies", []):
            why = CONDITIONS[cond](v)
            if why:
                return [G.make_row(check, host, "skip", reason=why)]
        if check.get("needs"):
            v.need(*check["needs"])
        status, observed, expected, reason = RULES[check["rule"]](v, check)
    except Skip as exc:
        return [G.make_row(check, host, "skip", reason=str(exc))]
    except Error as exc:
        return [G.make_row(check, host, "error", reason=str(exc))]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as exc:
        # A fact in a shape the rule did not expect: shown as an error of this check, never a lost report.
        return [G.make_row(check, host, "error", reason="cannot grade: %s: %s" % (type(exc).__name__, exc))]
    return [G.make_row(check, host, status, observed, expected, reason)]


def grade_cluster(check, run, hosts):
    """Kind `audit_cluster`: rows for every host from all hosts' facts."""
    return CLUSTER_RULES[check["rule"]](check, run, hosts)


def validate_rubric(checks):
    """Problems with audit rubric entries (tests and `reports` call it): unknown rules, conditions, categories."""
    categories = {"security", "lifecycle", "orchestration", "storage", "networking", "reliability", "monitoring",
                  "compute", "consistency"}
    problems = []
    for c in checks:
        if c.get("kind") not in ("audit", "audit_cluster"):
            continue
        for field in ("id", "category", "title", "kind", "severity", "remediation", "source"):
            if not c.get(field):
                problems.append("%s: no %s" % (c.get("id"), field))
        if c.get("category") not in categories:
            problems.append("%s: category %r" % (c.get("id"), c.get("category")))
        if c.get("severity") not in ("critical", "major", "minor", "info"):
            problems.append("%s: severity %r" % (c.get("id"), c.get("severity")))
        table = RULES if c["kind"] == "audit" else CLUSTER_RULES
        if c.get("rule") not in table:
            problems.append("%s: unknown rule %r" % (c.get("id"), c.get("rule")))
        for cond in c.get("applies", []):
            if cond not in CONDITIONS:
                problems.append("%s: unknown condition %r" % (c.get("id"), cond))
    return problems


# Registered by reports.grading.engine.load_phase_graders: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {"audit": grade_host}
CLUSTER = {"audit_cluster": grade_cluster}
