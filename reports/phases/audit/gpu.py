"""Audit area `gpu` (audit.gpu.*): GPUs seen on the bus and by the driver, their memory, ECC, row remapping, clocks,
power, PCIe link, NVLink and fabric, XID history, GPUDirect paths, and one GPU model across the cluster."""

from collections import Counter
from datetime import datetime

from reports.grading import make_row
from reports.phases.audit.common import (
    Error,
    R,
    Skip,
    cluster_rule,
    data,
    graded_views,
    host_rule,
    is_nvl72,
    name_list,
    vkey,
)


def _gpu_list(v, key, pred):
    """Indexes of the GPUs whose reading `key` matches pred; readings that are absent are ignored."""
    return [g["index"] for g in v.gpus() if g.get(key) is not None and pred(g.get(key))]


def _require_readings(v, key, what):
    gpus = v.gpus()
    if all(g.get(key) is None for g in gpus):
        raise Skip("not reported: %s gives no %s for %s" % ("nvidia-smi" if v.vendor == "nvidia" else "amd-smi",
                                                          what, ", ".join(v.gpu_names()) or "these GPUs"))
    return gpus


@host_rule
def inventory(v, c):
    on_bus = len(v.pci_gpus(v.vendor))
    seen = len(v.gpus())
    obs = "%d on the PCI bus, %d seen by %s" % (on_bus, seen, "nvidia-smi" if v.vendor == "nvidia" else "amd-smi")
    if on_bus and seen < on_bus:
        return R("fail", obs, "every GPU on the bus is usable", "%d GPU(s) invisible to the driver" % (on_bus - seen))
    return R("pass", obs, "every GPU on the bus is usable")


@host_rule
def count(v, c):
    n = len(v.gpus())
    expected = v.param_int("expected_gpu_count")
    how = "audit_expected_gpu_count"
    if not expected:
        key = v.model_key()
        expected = (c.get("per_model") or {}).get(key)
        how = "%s per node" % key
    if not expected:
        raise Skip("no expected GPU count for %s: set audit_expected_gpu_count"
                   % (name_list(v.gpu_names()) or "this model"))
    status = "pass" if n == int(expected) else "fail"
    return R(status, "%d GPUs" % n, "%d (%s)" % (int(expected), how))


@host_rule
def model_node(v, c):
    names = v.gpu_names()
    return R("pass" if len(names) == 1 else "fail", name_list(names) or "none", "one GPU model on the node")


@host_rule
def driver_loaded(v, c):
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
    return R("pass", "amdgpu %s" % name_list(sorted({g.get("driver") for g in v.amd_gpus if g.get("driver")})),
             "amdgpu loaded, amd-smi works")


@host_rule
def memory(v, c):
    gpus = _require_readings(v, "memory_total_mib", "memory size")
    spec = v.model_spec()
    if not spec or "hbm_gb" not in spec:
        raise Skip("gpus.yml has no hbm_gb for %s" % (name_list(v.gpu_names()) or "this GPU"))
    fraction = float(c.get("fraction", 0.95))
    need_gb = fraction * float(spec["hbm_gb"])
    sizes = {g["index"]: g["memory_total_mib"] * 1048576 / 1e9 for g in gpus if g.get("memory_total_mib")}
    low = sorted(i for i, gb in sizes.items() if gb < need_gb)
    obs = "min %.1f GB per GPU" % min(sizes.values())
    exp = ">= %.1f GB (%g x %s GB)" % (need_gb, fraction, spec["hbm_gb"])
    return R("fail" if low else "pass", obs + (" (low: GPU %s)" % name_list(low) if low else ""), exp)


@host_rule
def vbios_uniform(v, c):
    gpus = _require_readings(v, "vbios", "VBIOS version")
    values = Counter(g.get("vbios") for g in gpus if g.get("vbios"))
    if len(values) == 1:
        return R("pass", next(iter(values)), "one VBIOS version on the node")
    return R("warn", name_list("%s on %d" % kv for kv in values.most_common()), "one VBIOS version on the node")


@host_rule
def persistence_mode(v, c):
    if v.vendor != "nvidia":
        raise Skip("not applicable: persistence mode is an NVIDIA driver setting")
    off = _gpu_list(v, "persistence_mode", lambda s: s != "Enabled")
    running = "nvidia-persistenced" in v.daemons()
    obs = "enabled on %d/%d GPUs%s" % (len(v.gpus()) - len(off), len(v.gpus()),
                                       ", nvidia-persistenced running" if running else "")
    return R("fail" if off else "pass", obs + (" (off: GPU %s)" % name_list(off) if off else ""),
             "enabled on every GPU")


@host_rule
def ecc_mode(v, c):
    gpus = _require_readings(v, "ecc_mode", "ECC mode")
    off = [g["index"] for g in gpus if g.get("ecc_mode") and g["ecc_mode"] != "Enabled"]
    pending = [g["index"] for g in gpus if g.get("ecc_mode_pending") and g["ecc_mode_pending"] != g.get("ecc_mode")]
    if off:
        return R("fail", "ECC disabled on GPU %s" % name_list(off), "ECC enabled on every GPU")
    if pending:
        return R("warn", "ECC change pending on GPU %s" % name_list(pending), "ECC enabled on every GPU",
                 "a pending ECC mode takes effect at the next reset")
    return R("pass", "enabled on %d GPUs" % len(gpus), "ECC enabled on every GPU")


def _count_rule(key, what):
    """fail (or the check's status_above) when a GPU's counter `key` is above the check's max (0 unless set)."""
    @host_rule
    def fn(v, c):
        gpus = _require_readings(v, key, what)
        limit = float(c.get("max", 0))
        bad = {g["index"]: g[key] for g in gpus if g.get(key) is not None and g[key] > limit}
        total = sum(g.get(key) or 0 for g in gpus)
        if bad:
            return R("warn" if c.get("status_above") == "warn" else "fail",
                     "%d on GPU %s" % (int(total), name_list("%s:%s" % (i, int(n)) for i, n in sorted(bad.items()))),
                     "<= %g per GPU" % limit)
        return R("pass", "%s in total" % int(total), "<= %g per GPU" % limit)
    return fn


ecc_volatile = _count_rule("ecc_uncorrectable_volatile", "uncorrectable ECC counts")
ecc_aggregate = _count_rule("ecc_uncorrectable_aggregate", "aggregate uncorrectable ECC counts")
pcie_replays = _count_rule("pcie_replay_counter", "PCIe replay counters")


def _fail_on_flagged(gpus, flagged, observed_bad, observed_none, expected):
    """fail naming the GPUs for which flagged(gpu) holds (observed_bad % their indexes), else pass."""
    bad = [g["index"] for g in gpus if flagged(g)]
    return R("fail" if bad else "pass", (observed_bad % name_list(bad)) if bad else observed_none, expected)


def _model_in(v, models):
    """Whether the node's GPU model names contain one of `models` (rubric lists such as open_required_for)."""
    names = " ".join(v.gpu_names()).upper()
    return any(m.upper() in names for m in models or [])


def _remapping_gpus(v, c):
    """(the GPUs whose remapped-row counters were read, a note on the others); Skip when none was read.

    nvidia-smi prints remapped rows as N/A both on a GPU without row remapping and on an A100 or later with MIG
    enabled, whose counters it does not read then (tests/fixtures/nvidia-smi, the MIG A100 capture). The MIG mode
    and the model (the check's remap_models) tell the two apart: a MIG A100 is "not read", never "no remapping"."""
    gpus = v.gpus()
    # artifacts written before remap_reported named the same reading remap_supported
    read = [g for g in gpus if g.get("remap_reported", g.get("remap_supported"))]
    unread = [g for g in gpus if g not in read]
    mig = [g["index"] for g in unread if g.get("mig_mode") == "Enabled"]
    capable = _model_in(v, c.get("remap_models"))
    notes = []
    if mig:
        notes.append("not read on GPU %s: nvidia-smi gives remapped rows as N/A while MIG is enabled (read them with "
                     "MIG disabled)" % name_list(mig))
    others = [g["index"] for g in unread if g["index"] not in mig]
    if others and capable:
        notes.append("not reported by nvidia-smi on GPU %s" % name_list(others))
    if not read:
        if notes:
            raise Skip("not reported: %s%s" % ("%s has row remapping, but " % name_list(v.gpu_names()) if capable
                                               else "", "; ".join(notes)))
        raise Skip("not applicable: %s have no row remapping" % (name_list(v.gpu_names()) or "these GPUs"))
    return read, "; ".join(notes) or None


@host_rule
def sram_threshold(v, c):
    gpus = _require_readings(v, "sram_threshold_exceeded", "SRAM error threshold")
    return _fail_on_flagged(gpus, lambda g: g.get("sram_threshold_exceeded"), "exceeded on GPU %s", "not exceeded",
                            "SRAM uncorrectable threshold not exceeded")


@host_rule
def retired_pages(v, c):
    gpus = v.gpus()
    if all(g.get("retired_pages_dbe") is None and g.get("retired_pages_pending") is None for g in gpus):
        raise Skip("not applicable: %s use row remapping, not page retirement"
                   % (name_list(v.gpu_names()) or "these GPUs"))
    pending = [g["index"] for g in gpus if g.get("retired_pages_pending")]
    dbe = sum(g.get("retired_pages_dbe") or 0 for g in gpus)
    limit = int(c.get("max_dbe_pages", 0))
    if pending:
        return R("fail", "retirement pending on GPU %s" % name_list(pending), "no pending retirement",
                 "reset the GPU to retire the pages")
    return R("warn" if dbe > limit else "pass", "%d pages retired for DBE" % dbe, "<= %d" % limit)


@host_rule
def remapped_rows(v, c):
    gpus, note = _remapping_gpus(v, c)
    failed = [g["index"] for g in gpus if g.get("remap_failure")]
    unc = {g["index"]: g.get("remapped_rows_uncorrectable") or 0 for g in gpus}
    limit = int(c.get("max_uncorrectable", 0))
    if failed:
        return R("fail", "remapping failed on GPU %s" % name_list(failed), "no remap failure",
                 "; ".join(x for x in ("a remap failure means the GPU is out of spare rows", note) if x))
    high = sorted(i for i, n in unc.items() if n > limit)
    return R("warn" if high else "pass", "%d uncorrectable remaps on %d GPUs%s" % (
        sum(unc.values()), len(gpus), " (GPU %s)" % name_list(high) if high else ""),
        "<= %d per GPU, no failure" % limit, note)


@host_rule
def remap_pending(v, c):
    gpus, note = _remapping_gpus(v, c)
    status, observed, expected, _ = _fail_on_flagged(gpus, lambda g: g.get("remap_pending"), "pending on GPU %s",
                                                     "none pending on %d GPUs" % len(gpus),
                                                     "no remap waiting for a GPU reset")
    return R(status, observed, expected, note)


@host_rule
def reset_required(v, c):
    """GPU Reset Status (Reset Required, Drain and Reset Recommended) and GPU Recovery Action. Driver 575 prints the
    first two as "Requested functionality has been deprecated" (read as not reported) and says what the GPU needs in
    the recovery action alone: None, or Reset, Reboot, Drain P2P, Drain and Reset (NVIDIA's GPU memory error
    management guide, "Error Recovery and Response Flags"). Any action but None fails, so one NVIDIA adds later
    does too."""
    gpus = v.gpus()
    if all(g.get("reset_required") is None and g.get("recovery_action") is None for g in gpus):
        raise Skip("not reported by this driver: nvidia-smi gives neither a GPU Reset Status nor a GPU Recovery "
                   "Action")
    flagged = []
    for g in gpus:
        why = [what for what, on in (("reset required", g.get("reset_required")),
                                     ("drain and reset recommended", g.get("drain_and_reset_recommended")),
                                     ("recovery action %s" % g.get("recovery_action"),
                                      g.get("recovery_action") not in (None, "None"))) if on]
        if why:
            flagged.append("GPU %s: %s" % (g["index"], " and ".join(why)))
    expected = "no GPU waiting for a reset or another recovery action"
    if flagged:
        return R("fail", name_list(flagged), expected)
    return R("pass", "none", expected)


@host_rule
def throttle(v, c):
    gpus = _require_readings(v, "active_clock_reasons", "clock event reasons")
    bad_names = set(c.get("fail_reasons", []))
    warn_names = set(c.get("warn_reasons", []))
    bad = {g["index"]: sorted(set(g["active_clock_reasons"]) & bad_names) for g in gpus
           if set(g.get("active_clock_reasons") or []) & bad_names}
    warn = {g["index"]: sorted(set(g["active_clock_reasons"]) & warn_names) for g in gpus
            if set(g.get("active_clock_reasons") or []) & warn_names}
    exp = "none of %s" % ", ".join(sorted(bad_names | warn_names))
    if bad:
        return R("fail", name_list("GPU %s: %s" % (i, "+".join(r)) for i, r in sorted(bad.items())), exp)
    if warn:
        return R("warn", name_list("GPU %s: %s" % (i, "+".join(r)) for i, r in sorted(warn.items())), exp)
    return R("pass", "no slowdown active", exp)


@host_rule
def app_clocks(v, c):
    gpus = _require_readings(v, "app_clock_graphics_mhz", "application clocks")
    low = [g["index"] for g in gpus if g.get("app_clock_graphics_default_mhz") and g.get("app_clock_graphics_mhz")
           and g["app_clock_graphics_mhz"] < g["app_clock_graphics_default_mhz"]]
    if low:
        g = next(x for x in gpus if x["index"] == low[0])
        return R("warn", "locked below default on GPU %s (%g < %g MHz)" % (name_list(low), g["app_clock_graphics_mhz"],
                                                                          g["app_clock_graphics_default_mhz"]),
                 "application clocks at their default")
    return R("pass", "at default", "application clocks at their default")


@host_rule
def power_limit(v, c):
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
        return R("fail", "capped on GPU %s" % name_list(low), ">= %g x default power limit" % fraction)
    return R("pass", "%s W" % name_list("%g" % x for x in limits), ">= %g x default power limit" % fraction)


@host_rule
def pcie_gen(v, c):
    key = v.model_key()
    want = (c.get("per_model") or {}).get(key)
    if v.vendor == "amd":
        gpus = _require_readings(v, "pcie_speed_max_gts", "PCIe speed")
        speeds = sorted({g.get("pcie_speed_max_gts") for g in gpus} - {None})
        gen = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}.get(speeds[0]) if speeds else None
        lows = [gen] if gen else []
    else:
        gpus = _require_readings(v, "pcie_gen_max", "PCIe generation")
        # max_link_gen is only what GPU and slot both support; copies run at the generation the link trained at
        # (current_link_gen): a Gen5 H100 behind a Gen4 retimer shows Max 5, Current 4. A GPU out of P0 lowers its
        # link speed to save power (the RTX 4090 capture at P8: Current 1 of Max 4), so there the current
        # generation tells nothing: such a GPU is judged on its max alone (a slot or BIOS cap still fails) and the
        # row's reason names it, so nobody takes the pass for a check of its trained link.
        trained = {g["index"]: g["pcie_gen_current"] for g in gpus
                   if g.get("performance_state") == "P0" and g.get("pcie_gen_current")}
        gens = {**{g["index"]: g["pcie_gen_max"] for g in gpus if g.get("pcie_gen_max")}, **trained}
        lows = sorted(set(gens.values()))
        idle = ["%s:%s" % (g["index"], g.get("performance_state") or "?") for g in gpus if g["index"] not in trained]
        note = ("trained link not judged on GPU %s (not in P0: an idle GPU lowers its PCIe link speed), only the "
                "generation GPU and slot support" % name_list(idle)) if idle else None
        host_limited = [g["index"] for g in gpus if g.get("pcie_gen_host_max") and g.get("pcie_gen_device_max")
                        and g["pcie_gen_host_max"] < g["pcie_gen_device_max"]]
        if not want:
            want = min(min(g.get("pcie_gen_device_max") or 99, g.get("pcie_gen_host_max") or 99) for g in gpus)
            if want == 99:
                raise Skip("no expected PCIe generation for %s" % key)
        below = sorted(i for i, gen in gens.items() if gen < want)
        if below:
            return R("fail", name_list("GPU %s %s Gen%d" % (i, "trained at" if i in trained else "max", gens[i])
                                       for i in below), ">= Gen%d" % want, note)
        if host_limited and lows:
            return R("pass", "Gen%d (host slots cap GPU %s below the GPU's Gen%d)" % (
                lows[0], name_list(host_limited), max(g.get("pcie_gen_device_max") or 0 for g in gpus)),
                ">= Gen%d" % want, note)
        if lows:
            return R("pass", "Gen%s (%s)" % ("/".join(str(x) for x in lows), "link trained" if trained else "maximum"),
                     ">= Gen%d" % want, note)
    if not want:
        raise Skip("no expected PCIe generation for %s" % key)
    if not lows:
        raise Skip("PCIe generation not reported")
    status = "pass" if lows[0] >= want else "fail"
    return R(status, "Gen%s" % "/".join(str(x) for x in lows), ">= Gen%d" % want)


@host_rule
def pcie_width(v, c):
    gpus = _require_readings(v, "pcie_width_current", "PCIe link width")
    narrow = ["%s:x%d" % (g["index"], g["pcie_width_current"]) for g in gpus
              if g.get("pcie_width_current") and g.get("pcie_width_max")
              and g["pcie_width_current"] < g["pcie_width_max"]]
    if v.vendor == "amd":
        narrow = ["%s:x%d" % (g["index"], g["pcie_width_current"]) for g in gpus
                  if g.get("pcie_width_current") and g["pcie_width_current"] < (g.get("pcie_width_max") or 16)]
    widths = sorted({int(g["pcie_width_current"]) for g in gpus if g.get("pcie_width_current")})
    if narrow:
        return R("fail", "narrow link on GPU %s" % name_list(narrow), "every GPU at its maximum width")
    return R("pass", "x%s" % "/x".join(str(w) for w in widths), "every GPU at its maximum width")


def _nvlink(v):
    if v.vendor != "nvidia":
        raise Skip("not applicable: NVLink counters are read with nvidia-smi")
    v.need("nvlink_status")
    return v.nv.get("nvlink") or {}


@host_rule
def nvlink_up(v, c):
    links = _nvlink(v)
    if not links or all(x.get("links", 0) == 0 for x in links.values()):
        raise Skip("not applicable: no NVLink on %s" % (name_list(v.gpu_names()) or "these GPUs"))
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
    return R("fail" if bad else "pass", name_list(bad) if bad else obs, exp)


@host_rule
def nvlink_errors(v, c):
    _nvlink(v)
    v.need("nvlink_errors")
    errs = v.nv.get("nvlink_errors") or {}
    if not errs:
        raise Skip("not applicable: no NVLink error counters reported")
    # only the error counters are judged: NVLink 5's FEC histogram, raw lane and traffic counters are not errors
    error_keys, fail_keys = set(c["error_counters"]), set(c.get("fail_counters", []))
    totals = Counter()
    bad_gpus = {}
    others = set()
    for idx, counters in errs.items():
        for key, n in counters.items():
            if key not in error_keys:
                others.add(key)
                continue
            totals[key] += n
            if n > int(c.get("max_per_gpu", 0)):
                bad_gpus.setdefault(idx, []).append("%s=%d" % (key, n))
    if not totals:
        raise Skip("no NVLink error counter this check knows among the %d reported (%s)"
                   % (len(others), name_list(sorted(others))))
    obs = ", ".join("%s %d" % kv for kv in sorted(totals.items()))
    if others:
        obs += "; %d other counters recorded, not errors (FEC histogram, raw lane, traffic)" % len(others)
    if not bad_gpus:
        return R("pass", obs, "no NVLink errors")
    worst = "fail" if any(k in fail_keys and totals[k] for k in totals) else "warn"
    return R(worst, name_list("GPU %s: %s" % (i, " ".join(x)) for i, x in sorted(bad_gpus.items())), "no NVLink errors")


@host_rule
def fabric_manager(v, c):
    running = "nv-fabricmanager" in v.daemons()
    fm = v.sec("nvidia_driver").get("fabricmanager_version")
    if running:
        return R("pass", "nv-fabricmanager running (%s)" % (fm or "version unknown"), "running on NVSwitch systems")
    return R("fail", "not running" + (" (installed: %s)" % fm if fm else " (not installed)"),
             "running on NVSwitch systems", "without Fabric Manager the GPUs cannot use NVLink through the NVSwitches")


@host_rule
def fabricmanager_version(v, c):
    fm = v.sec("nvidia_driver").get("fabricmanager_version")
    drv = v.driver_version()
    if not fm:
        raise Skip("tool missing: nv-fabricmanager not installed")
    return R("pass" if fm == drv else "fail", "Fabric Manager %s, driver %s" % (fm, drv),
             "Fabric Manager version = driver version")


@host_rule
def fabric_state(v, c):
    gpus = v.gpus()
    reported = [g for g in gpus if g.get("fabric_state")]
    if not reported:
        raise Skip("not applicable: fabric state not reported for %s" % (name_list(v.gpu_names()) or "these GPUs"))
    bad = [g["index"] for g in reported if g.get("fabric_state") != "Completed" or g.get("fabric_status") != "Success"]
    nvl = is_nvl72(v)
    if nvl:
        bad += [g["index"] for g in reported if (g.get("fabric_clique_id") in (None, "0")) or
                not (g.get("fabric_cluster_uuid") or "").strip("0-")]
    states = Counter("%s/%s" % (g.get("fabric_state"), g.get("fabric_status")) for g in reported)
    obs = name_list("%s on %d" % kv for kv in states.most_common())
    exp = "Completed/Success on every GPU" + (", clique and cluster UUID set" if nvl else "")
    return R("fail" if bad else "pass", obs + (" (bad: GPU %s)" % name_list(sorted(set(bad))) if bad else ""), exp)


@host_rule
def imex(v, c):
    drv = v.sec("nvidia_driver")
    parts = {"nvidia-imex running": "nvidia-imex" in v.daemons(), "nodes_config.cfg": drv.get("imex_config"),
             "IMEX channels": drv.get("imex_channels")}
    missing = [k for k, ok in parts.items() if not ok]
    return R("fail" if missing else "pass", "missing: %s" % ", ".join(missing) if missing else "IMEX ready",
             "IMEX service, node list and channels present")


@host_rule
def mig(v, c):
    gpus = v.gpus()
    if v.vendor != "nvidia":
        raise Skip("not applicable: MIG is an NVIDIA feature")
    if all(g.get("mig_mode") is None for g in gpus):
        raise Skip("not applicable: %s do not support MIG" % name_list(v.gpu_names()))
    expect = v.param_flag("expect_mig", c.get("expect_mig", False))
    on = [g["index"] for g in gpus if g.get("mig_mode") == "Enabled"]
    wrong = on if not expect else [g["index"] for g in gpus if g.get("mig_mode") != "Enabled"]
    exp = "MIG %s on every GPU" % ("enabled" if expect else "disabled")
    return R("fail" if wrong else "pass", ("MIG enabled on GPU %s" % name_list(on)) if on else "MIG disabled", exp)


@host_rule
def compute_mode(v, c):
    gpus = _require_readings(v, "compute_mode", "compute mode")
    other = ["%s:%s" % (g["index"], g["compute_mode"]) for g in gpus if g.get("compute_mode") not in (None, "Default")]
    return R("warn" if other else "pass", name_list(other) if other else "Default", "Default on every GPU")


def _idle(v, c):
    gpus = v.gpus()
    busy = [g["index"] for g in gpus if (g.get("utilization_gpu_pct") or 0) > float(c.get("busy_above_pct", 10))
            or (g.get("processes") or 0) > 0]
    if busy:
        raise Skip("GPUs busy (GPU %s): idle readings are not possible now" % name_list(busy))
    return gpus


def _idle_limit_rule(key, what, limit_name, unit):
    """warn when an idle GPU's reading `key` is above the check's limit for its model (per_model, else
    default_max)."""
    @host_rule
    def fn(v, c):
        readings = {g["index"]: g[key] for g in _idle(v, c) if g.get(key) is not None}
        if not readings:
            raise Skip("not reported: no GPU %s" % what)
        limit = (c.get("per_model") or {}).get(v.model_key(), c.get("default_max"))
        if limit is None:
            raise Skip("no idle %s limit for %s" % (limit_name, v.model_key()))
        high = sorted(i for i, x in readings.items() if x > limit)
        return R("warn" if high else "pass",
                 "max %g %s%s" % (max(readings.values()), unit, " (GPU %s)" % name_list(high) if high else ""),
                 "<= %g %s at idle" % (limit, unit))
    return fn


idle_temperature = _idle_limit_rule("temperature_c", "temperature", "temperature", "C")
idle_power = _idle_limit_rule("power_draw_w", "power draw", "power", "W")


def _in_window(v, records, window_days):
    """(record, age) of the records (each with an RFC 3339 `time`) whose time falls in the window before the run."""
    end = v.started_at()
    for x in records or []:
        try:
            when = datetime.fromisoformat(str(x.get("time")).replace("Z", "+00:00"))
        except ValueError:
            continue
        if (end - when).total_seconds() / 86400.0 <= window_days:
            yield x


def xid_events(v, window_days):
    """XIDs, NVSwitch SXIDs and GPU init / off-the-bus failures of the window, in log order, each with its action
    from xid.yml and a `label` for the observed column."""
    table = data("xid")
    kl = v.sec("kernel_log")
    out = []
    for x in _in_window(v, kl.get("xids"), window_days):
        action = table["xids"].get(int(x["xid"]), table["unknown"])
        out.append(dict(x, action=action, status=table["actions"][action]["status"],
                        label="XID %s %s" % (x["xid"], action), what=str(x["xid"])))
    for x in _in_window(v, kl.get("sxids"), window_days):
        severity = {True: "fatal", False: "nonfatal"}.get(x.get("fatal"), "unknown")
        action = table["sxid"][severity]
        out.append(dict(x, action=action, status=table["actions"][action]["status"],
                        label="SXID %s %s" % (x["sxid"], severity.replace("nonfatal", "non-fatal")),
                        what="SXID %s (%s, %s)" % (x["sxid"], x.get("device") or "NVSwitch", x.get("text"))))
    for x in _in_window(v, kl.get("gpu_errors"), window_days):
        action = table["gpu_errors"][x["kind"]]
        out.append(dict(x, action=action, status=table["actions"][action]["status"],
                        label={"gpu_init_failed": "GPU init failed"}.get(x["kind"], "GPU fell off the bus"),
                        what="%s" % x.get("text")))
    return sorted(out, key=lambda e: str(e.get("time")))


@host_rule
def xid_history(v, c):
    v.need("kernel_log")
    kl = v.sec("kernel_log")
    window = int(c.get("window_days", data("xid").get("window_days", 7)))
    events = xid_events(v, window)
    expected = "no XID, SXID or GPU init failure needing action (%d-day window)" % window
    order = {"pass": 0, "warn": 1, "fail": 2}
    worst = max(events, key=lambda e: order[e["status"]]) if events else None
    unparsed = list(_in_window(v, kl.get("unparsed"), window))
    if unparsed and (worst is None or worst["status"] != "fail"):
        raise Error("%s: a kernel-log line names an Xid or SXid but could not be read: %s"
                    % (kl.get("source") or "kernel log", unparsed[0].get("line")))
    if not events:
        return R("pass", "no XID or SXID in %d days (log from %s, %s)" % (window, kl.get("first") or "?",
                                                                          kl.get("source")), expected)
    by = Counter(e["label"] for e in events)
    obs = name_list("%s x%d" % (k, n) for k, n in by.most_common())
    actions = data("xid")["actions"]
    return R(worst["status"], obs, expected,
             "%s on %s: %s" % (worst["what"], worst.get("pci") or "?", actions[worst["action"]]["text"]))


def _kernel_ge(kernel, minimum):
    return vkey(kernel)[:len(vkey(minimum))] >= vkey(minimum)


@host_rule
def gpudirect_rdma(v, c):
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


@host_rule
def gdrcopy(v, c):
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


@host_rule
def pcie_acs(v, c):
    nic_pcis = {info.get("pci") for info in v.rdma().values() if info.get("pci")}
    shared, bad = acs_findings(v.pci, nic_pcis)
    if not shared:
        return R("pass", "no GPU shares a PCIe switch with an RDMA NIC", "ACS redirect off between GPUs and NICs")
    v.need("lspci")
    if not v.sec("pci").get("acs_read"):
        raise Skip("not permitted: ACS needs lspci as root")
    if bad:
        return R("fail", "redirect on %s" % name_list("%s (%s)" % kv for kv in sorted(bad.items())),
                 "ACS redirect off between GPUs and NICs",
                 "P2P between GPU and NIC goes up to the root complex instead of through the switch")
    return R("pass", "%d GPU-NIC pairs share a switch, no redirect" % shared, "ACS redirect off between GPUs and NICs")


@host_rule
def iommu(v, c):
    io = v.sec("system").get("iommu") or {}
    cmd = (v.sec("system").get("cmdline") or {})
    types = io.get("group_types") or {}
    if not io.get("groups"):
        return R("pass", "no IOMMU groups (IOMMU off)", "IOMMU off or passthrough")
    translated = sum(n for t, n in types.items() if t.upper().startswith("DMA"))
    obs = "%d groups: %s; iommu=%s" % (io["groups"], name_list("%s %d" % kv for kv in sorted(types.items())),
                                      cmd.get("iommu", "unset"))
    if translated:
        return R("warn", obs, "IOMMU off or passthrough (iommu=pt)",
                 "translated DMA slows GPUDirect RDMA and P2P on bare metal")
    return R("pass", obs, "IOMMU off or passthrough (iommu=pt)")



@host_rule
def open_module(v, c):
    ver = v.sec("nvidia_driver").get("proc_version") or {}
    if not ver:
        raise Error("/proc/driver/nvidia/version not readable: driver not loaded")
    open_mod = ver.get("open_kernel_module")
    needs_open = _model_in(v, c.get("open_required_for"))
    flavour = "open kernel module" if open_mod else "proprietary kernel module"
    if needs_open and not open_mod:
        return R("fail", flavour, "open kernel module (required by %s)" % name_list(v.gpu_names()))
    return R("pass", flavour, "open kernel module on %s" % name_list(c.get("open_required_for", [])))


@host_rule
def persistenced(v, c):
    running = "nvidia-persistenced" in v.daemons()
    return R("pass" if running else "warn", "running" if running else "not running", "nvidia-persistenced running",
             None if running else "persistence set by nvidia-smi -pm is lost at every driver reload")



@cluster_rule
def model_cluster(check, run, hosts):
    rows, views = graded_views(check, run, hosts)
    models = {h: ", ".join(v.gpu_names()) for h, v in views.items() if v.vendor}
    distinct = sorted(set(models.values()))
    for host in hosts:
        if host not in views:
            continue
        if host not in models:
            rows.append(make_row(check, host, "skip", reason="not applicable: no GPU on this host"))
        elif len(distinct) > 1:
            rows.append(make_row(check, host, "warn", models[host], "one GPU model across the cluster",
                                 "cluster mixes %s" % " / ".join(distinct)))
        else:
            rows.append(make_row(check, host, "pass", models[host] or "?", "one GPU model across the cluster"))
    return rows


@host_rule
def nvlink_boundary(v, c):
    """Whether another tenant can share this node's NVLink domain (NVBleed: timing across NVLink leaks between
    tenants). On bare metal the NVLink between a node's own GPUs is the tenant's, since it holds the node whole; an
    NVL72 rack's domain spans trays, and a VM may hold part of an NVSwitch tray: there only the provider can say."""
    topo = v.nv.get("topology") or {}
    nvlinks = sorted({cell for g in (topo.get("gpus") or {}).values() for cell in (g.get("links") or {}).values()
                      if str(cell).startswith("NV")})
    if not v.param_flag("nvlink_domain_exclusive") and topo.get("error"):
        return R("warn", "topology not read: %s" % topo["error"], "an NVLink domain of this tenant alone",
                 "cannot tell which GPUs share NVLink")
    if v.param_flag("nvlink_domain_exclusive"):
        return R("pass", "the provider attests the domain is exclusive (audit_nvlink_domain_exclusive)%s" % (
            "; NVLink %s" % "/".join(nvlinks) if nvlinks else ""), "an NVLink domain of this tenant alone")
    if not topo.get("gpus"):
        raise Skip("not read: nvidia-smi topo -m gave no GPU matrix")
    if not nvlinks and not is_nvl72(v):
        raise Skip("not applicable: no NVLink between this host's GPUs")
    vm = (v.collected("system", "virtualization") or {}).get("vm")
    seen = "NVLink %s between %d GPUs; %s" % ("/".join(nvlinks) or "(fabric)", len(topo["gpus"]),
                                             "VM guest (%s)" % vm if vm else "bare metal")
    if is_nvl72(v):
        return R(c.get("status_bad", "warn"), seen + "; multi-node NVLink domain (NVL72)",
                 "an NVLink domain of this tenant alone",
                 "the rack's NVLink domain spans trays: the provider must partition it per tenant and attest it "
                 "(audit_nvlink_domain_exclusive)")
    if vm:
        return R(c.get("status_bad", "warn"), seen, "an NVLink domain of this tenant alone",
                 "a VM may hold part of an NVSwitch tray shared with other tenants: the provider must attest it "
                 "(audit_nvlink_domain_exclusive)")
    return R("pass", seen + ": the node's own NVLink, held whole", "an NVLink domain of this tenant alone")


COHERENT = ("GH200", "GB200", "GB300", "GRACE HOPPER", "GRACE BLACKWELL")


@host_rule
def hbm_exposure(v, c):
    """On a coherent CPU-GPU platform (Grace Hopper, Grace Blackwell) the GPU's HBM can show up as memory-only NUMA
    nodes the kernel manages like DRAM: page cache and other processes land in HBM, and a job's GPU memory shrinks.
    The driver-managed mode (CDMM, CoherentGPUMemoryMode "driver") keeps it the driver's."""
    names = " ".join(v.gpu_names()).upper()
    if not any(m in names for m in COHERENT):
        raise Skip("not applicable: %s is not a coherent CPU-GPU platform" % (", ".join(v.gpu_names()) or "this GPU"))
    nodes = v.collected("system", "numa_nodes") or []
    min_gib = float(c.get("min_gib", 64))
    hbm = [n for n in nodes if not (n.get("cpus") or "").strip() and (n.get("mem_kb") or 0) >= min_gib * 2**20]
    mode = (v.collected("userland", "driver_params") or {}).get("CoherentGPUMemoryMode")
    mode = None if mode is None else str(mode).strip('"')
    seen = "%d memory-only NUMA node(s) of %g GiB or more%s; CoherentGPUMemoryMode %s" % (
        len(hbm), min_gib, " (%s)" % name_list("node %d: %.0f GiB" % (n["node"], n["mem_kb"] / 2**20) for n in hbm)
        if hbm else "", repr(mode) if mode is not None else "not read")
    expected = "HBM managed by the driver (CDMM), not exposed as system memory"
    if hbm:
        return R(c.get("status_bad", "warn"), seen, expected, "GPU HBM is exposed as ordinary OS-managed memory")
    if mode is not None and mode != "driver":
        return R(c.get("status_bad", "warn"), seen, expected, "the driver does not manage coherent GPU memory (CDMM)")
    return R("pass", seen, expected)
