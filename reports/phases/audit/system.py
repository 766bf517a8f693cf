"""Audit areas `health`, `hw`, `cpu` and `kernel`: node health and monitoring agents, memory and PCIe errors,
kernel-log events of the last days, CPU frequency governor and NUMA balancing."""

import re
from datetime import datetime

from reports.phases.audit.common import Error, R, Skip, host_rule, name_list, sysctl_rule
from reports.phases.audit.gpu import COHERENT
from reports.phases.audit.scheduler import HEALTHCHECK_ONCE, healthcheck_interval


@host_rule
def governor(v, c):
    govs = v.sec("system").get("cpu_governors") or {}
    if not govs:
        raise Skip("not applicable: no cpufreq governor exposed (VM or firmware-managed frequency)")
    want = c.get("expect", "performance")
    other = {g: n for g, n in govs.items() if g != want}
    return R("warn" if other else "pass", name_list("%s on %d CPUs" % kv for kv in sorted(govs.items())),
             "%s on every CPU" % want)



numa_balancing = sysctl_rule("kernel.numa_balancing", lambda x: x == "0", "kernel.numa_balancing = 0")



@host_rule
def memory_ecc(v, c):
    edac = v.sec("system").get("edac") or {}
    if not edac.get("controllers"):
        raise Skip("not applicable: no EDAC memory controller driver loaded (no memory error counters)")
    if edac.get("ue"):
        return R("fail", "%d uncorrectable, %d correctable" % (edac["ue"], edac.get("ce", 0)), "0 uncorrectable")
    warn_ce = int(c.get("warn_correctable_above", 100))
    return R("warn" if edac.get("ce", 0) > warn_ce else "pass", "0 uncorrectable, %d correctable" % edac.get("ce", 0),
             "0 uncorrectable, <= %d correctable" % warn_ce)


def _log_times(v, c, kind):
    """(times of the kernel log's `kind` events within the check's window before the run, window, partial).
    The probe counts every event and keeps the times of the newest 50 of each kind (`events_newest`): when it
    dropped some and even its oldest kept one is in the window, the window may hold more (partial "newest"). A
    probe before that kept the first 50 (partial "first": the window holds these and maybe later ones); when it
    dropped some and kept none of the window, the window cannot be judged from it (Skip, never "none")."""
    v.need("kernel_log")
    kl = v.sec("kernel_log")
    window = int(c.get("window_days", 7))
    end = v.started_at()
    kept = (kl.get("events") or {}).get(kind) or []
    dropped = ((kl.get("counts") or {}).get(kind) or 0) > len(kept)
    times = []
    for t in kept:
        try:
            when = datetime.fromisoformat(str(t).replace("Z", "+00:00"))
        except ValueError:
            continue
        if (end - when).total_seconds() <= window * 86400:
            times.append(t)
    if dropped and not kl.get("events_newest"):
        if not times:
            raise Skip("not read: the kernel log (%s) has %d such events and this run's probe kept the times of only "
                       "the first %d (it predates keeping the newest): the %d days before the run cannot be told; "
                       "re-run the audit" % (kl.get("source") or "?", kl["counts"][kind], len(kept), window))
        return times, window, "first"
    return times, window, "newest" if dropped and len(times) == len(kept) else None


def _count_text(times, partial):
    """'3' or, when the probe kept the times of only some events, 'at least 50'."""
    return "%s%d" % ("at least " if partial else "", len(times))


def _last_text(times, partial):
    """'last 2026-11-19T22:11:00Z' (after the count); a probe that kept the first 50 did not keep the last one."""
    return "later ones not kept by this run's probe" if partial == "first" else "last %s" % times[-1]


def _log_count(kind, what):
    @host_rule
    def fn(v, c):
        times, window, partial = _log_times(v, c, kind)
        status = c.get("status", "warn") if times else "pass"
        return R(status, "%s %s in %d days%s" % (_count_text(times, partial), what, window,
                                                 " (%s)" % _last_text(times, partial) if times else ""),
                 "none in %d days" % window)
    return fn


machine_checks = _log_count("mce", "machine-check events")
oom = _log_count("oom", "out-of-memory kills")
hung_tasks = _log_count("hung_task", "hung-task reports")


@host_rule
def pcie_aer_log(v, c):
    """Uncorrected AER lines of the window warn (the check's `status`); one that says Fatal fails."""
    times, window, partial = _log_times(v, c, "aer")
    fatal, _, partial_fatal = _log_times(v, c, "aer_fatal")
    status = "fail" if fatal else c.get("status", "warn") if times else "pass"
    return R(status, "%s uncorrected PCIe errors in %d days%s%s" % (
        _count_text(times, partial), window,
        " (%s fatal, %s)" % (_count_text(fatal, partial_fatal), _last_text(fatal, partial_fatal)) if fatal else "",
        " (%s)" % _last_text(times, partial) if times else ""), "none in %d days" % window)


@host_rule
def pcie_aer(v, c):
    devs = {b: d for b, d in v.pci.items() if d.get("kind") in ("gpu", "nic", "nvswitch", "nvme")}
    reported = {b: d for b, d in devs.items() if d.get("aer_fatal") is not None or d.get("aer_nonfatal") is not None}
    if not reported:
        raise Skip("not reported: no AER counters in sysfs for the GPUs and NICs")
    fatal = {b: d["aer_fatal"] for b, d in reported.items() if d.get("aer_fatal")}
    nonfatal = {b: d["aer_nonfatal"] for b, d in reported.items() if d.get("aer_nonfatal")}
    if fatal:
        return R("fail", "fatal AER on %s" % name_list("%s:%d" % kv for kv in sorted(fatal.items())),
                 "0 fatal, 0 non-fatal")
    if nonfatal:
        return R("warn", "non-fatal AER on %s" % name_list("%s:%d" % kv for kv in sorted(nonfatal.items())),
                 "0 fatal, 0 non-fatal")
    return R("pass", "0 on %d devices" % len(reported), "0 fatal, 0 non-fatal")



@host_rule
def dcgm(v, c):
    running = "nv-hostengine" in v.daemons()
    local = v.listeners(port=5555)
    if running or local:
        return R("pass", "nv-hostengine running", "DCGM host engine running")
    return R("fail", "nv-hostengine not running" + (" (dcgmi installed)" if v.sec("health").get("dcgmi") else
                                                   " (DCGM not installed)"), "DCGM host engine running")


def _exporter(port, names):
    @host_rule
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


dcgm_exporter = _exporter(9400, ["dcgm-exporter"])
node_exporter = _exporter(9100, ["node_exporter", "node-exporter"])


@host_rule
def agent(v, c):
    h = v.sec("health")
    found = []
    if h.get("nhc"):
        found.append("NHC (%s%s)" % (h["nhc"], ", " + h["nhc_conf"] if h.get("nhc_conf") else ", no config"))
    for d in ("nvsentinel", "gpud"):
        if d in v.daemons():
            found.append(d)
    if h.get("nvsentinel_config"):
        found.append("NVSentinel config")
    cfg = v.slurm().get("config") or {}
    hc = cfg.get("HealthCheckProgram")
    expected = "a node health-check agent (NHC, NVSentinel, ...)"
    if hc and healthcheck_interval(cfg) == 0:
        if not found:
            return R("warn", "Slurm HealthCheckProgram %s" % hc, expected,
                     "it %s: no periodic health check" % HEALTHCHECK_ONCE)
        found.append("Slurm HealthCheckProgram %s (%s)" % (hc, HEALTHCHECK_ONCE))
    elif hc:
        found.append("Slurm HealthCheckProgram %s" % hc)
    return R("pass" if found else "fail", name_list(found) or "none", expected)


# a failure's messages -> what to do about it (dcgmi's own advice, "Reset GPU. Restart DCGM.", misses these)
_DCGM_CAUSES = ((re.compile(r"\bcuInit\b|Unable to initiali[sz]e CUDA library", re.I),
                 "CUDA cannot initialise (cuInit): on NVSwitch systems nvidia-fabricmanager must be running "
                 "(NVIDIA/nccl-tests#264), else check the driver"),
                (re.compile(r"[Pp]ersistence mode .* is (?:currently )?disabled"),
                 "persistence mode is off: nvidia-smi -pm 1, or run nvidia-persistenced"))


def _dcgm_finding(result, status):
    """'GPU Memory on all GPUs: GPU 0 Error using CUDA API cuInit …' for one test in `status`."""
    gpus = (result.get("gpus") or {}).get(status)
    where = " on all GPUs" if gpus == "all" else " on GPU %s" % ", ".join(str(g) for g in gpus) if gpus else ""
    msgs = result.get("messages") or []
    text = msgs[0] if msgs else ""
    if len(text) > 160:
        text = text[:157] + "..."
    more = " (+%d more)" % (len(msgs) - 1) if len(msgs) > 1 else ""
    return "%s%s%s" % (result["test"], where, ": %s%s" % (text, more) if text else "")


@host_rule
def dcgm_diag(v, c):
    v.need("dcgm_diag")
    diag = v.sec("health").get("dcgm_diag") or {}
    expected = "every test of dcgmi diag -r 1 passes"
    if diag.get("error"):
        raise Error(diag["error"])
    if "results" not in diag:  # an artifact from before per-test results: test names only
        if diag.get("failed"):
            return R("fail", "failed: %s" % name_list(diag["failed"]), expected)
        if diag.get("warned"):
            return R("warn", "warnings: %s" % name_list(diag["warned"]), expected)
        return R("pass", "%d tests passed" % sum(1 for x in (diag.get("tests") or {}).values() if x == "pass"),
                 expected)
    results = diag["results"]
    failed = [r for r in results if r.get("status") == "fail"]
    if failed:
        messages = " ".join(m for r in failed for m in r.get("messages") or [])
        cause = next((why for pattern, why in _DCGM_CAUSES if pattern.search(messages)), None)
        return R("fail", "; ".join(_dcgm_finding(r, "fail") for r in failed), expected, cause)
    if not diag.get("complete", True):
        raise Error("dcgmi diag's table ends after %s: the diagnostic did not finish" % (
            results[-1]["test"] if results else "its header"))
    warned = [r for r in results if r.get("status") == "warn"]
    # a test that passed on some GPUs and was skipped (or not run) on others did not test those: not a pass of theirs
    untested = ["%s %s on GPU %s" % (r["test"], how, ", ".join(str(g) for g in gpus))
                for r in results if r.get("status") == "pass"
                for how, gpus in (("skipped", (r.get("gpus") or {}).get("skip")),
                                  ("not run", (r.get("gpus") or {}).get("not run"))) if gpus and gpus != "all"]
    other = ["%s: %s" % (r["test"], r.get("status")) for r in results
             if r.get("status") not in ("pass", "skip", "not run", "fail", "warn")]
    if warned or untested or other:
        return R("warn", "; ".join([_dcgm_finding(r, "warn") for r in warned] + untested + other), expected)
    counts = {s: sum(1 for r in results if r.get("status") == s) for s in ("pass", "skip", "not run")}
    told = ", ".join(["%d tests passed" % counts["pass"]] + ["%d %s" % (counts[s], w) for s, w in (
        ("skip", "skipped"), ("not run", "not run")) if counts[s]]) + (
        " (DCGM %s)" % diag["version"] if diag.get("version") else "")
    if not counts["pass"]:  # every test skipped or not run: nothing was checked
        return R("warn", "no test passed: " + told.split(", ", 1)[-1], expected)
    return R("pass", told, expected)


@host_rule
def time_sync(v, c):
    clock = v.sec("system").get("clock")
    if not clock:
        raise Skip("not reported: adjtimex not readable")
    return R("fail" if clock.get("unsynchronised") else "pass",
             "clock %s (max error %s us)" % ("unsynchronised" if clock.get("unsynchronised") else "synchronised",
                                             clock.get("maxerror_us")), "clock synchronised (NTP/PTP)")


@host_rule
def time_daemon(v, c):
    found = sorted({"chronyd", "ntpd", "systemd-timesyncd"} & v.daemons())
    return R("pass" if found else "warn", name_list(found) or "none", "a time daemon running")


@host_rule
def failed_units(v, c):
    v.need("systemctl_failed")
    units = v.sec("system").get("failed_units") or []
    return R("warn" if units else "pass", name_list(units) or "none", "no failed systemd unit")


@host_rule
def journal(v, c):
    persistent = v.sec("system").get("journal_persistent")
    return R("pass" if persistent else "warn", "persistent" if persistent else "volatile (lost at reboot)",
             "persistent journal (XID history survives reboots)")


@host_rule
def load(v, c):
    s = v.sec("system")
    load, cpus = s.get("loadavg_1m"), s.get("cpu_count") or 1
    if load is None:
        raise Skip("not reported: no load average")
    limit = float(c.get("max_per_cpu", 1.0)) * cpus
    return R("warn" if load > limit else "pass", "load %.2f on %d CPUs" % (load, cpus),
             "<= %g (node idle before load tests)" % limit)


# Names that identify a Grace platform: its coherent CPU-GPU products (audit.gpu.hbm_exposure's list) and the SoC
GRACE_MARKERS = tuple(m.lower() for m in COHERENT) + ("grace", "tegra241")


@host_rule
def arm_smmu_cmdqv(v, c):
    """In a Grace VM, SMMUv3 command-queue virtualization (CMDQV/VCMDQ, the host's tegra241-cmdqv driver) gives the
    guest its own command queue; without it every IOMMU invalidation of every guest goes through one queue the host
    emulates, which slows DMA mapping (RDMA registration, GPU memory) under load."""
    arch = v.collected("system", "arch")
    if arch != "aarch64":
        raise Skip("not applicable: %s host; SMMU command-queue virtualization is an Arm (Grace) feature" % arch)
    virt = v.collected("system", "virtualization") or {}
    if not virt.get("vm"):
        raise Skip("not applicable: bare metal; guest invalidations do not trap to a host command queue")
    smmu = v.collected("system", "arm_smmu") or {}
    units = [u for u in smmu.get("iommu_units") or [] if u.startswith("smmu3")]
    # Grace is named by the GPUs passed through (GH200, GB200, GB300), or by DMI or the devicetree
    names = " ".join([str(x or "") for x in (smmu.get("dmi") or {}).values()] +
                     list(smmu.get("devicetree_nvidia") or []) + list(v.gpu_names())).lower()
    # ACPI _STA 0 is "not present"; no status file (older kernels) counts as present
    acpi = sorted(d for d, sta in (smmu.get("acpi_cmdqv") or {}).items() if str(sta or "15").strip() != "0")
    cmdqv = bool(acpi) or bool(smmu.get("cmdqv_bound")) or \
        any("cmdqv" in x for x in smmu.get("devicetree_nvidia") or [])
    seen = "VM (%s); SMMUv3 units %s; CMDQV %s" % (
        virt["vm"], name_list(units) or "none",
        name_list(acpi + list(smmu.get("cmdqv_bound") or [])) or "none (no NVDA200C ACPI device, no tegra241-cmdqv)")
    expected = "CMDQV/VCMDQ exposed to the guest"
    if cmdqv:
        return R("pass", seen, expected)
    if not units:
        raise Skip("not read: no SMMUv3 unit is visible in this guest")
    if not any(m in names for m in GRACE_MARKERS):
        raise Skip("not applicable: the guest uses SMMUv3, but nothing names a Grace platform (no GH200/GB200/GB300 "
                   "GPU, no Grace in DMI or the devicetree; CMDQV exists only on Grace)")
    return R(c.get("status_bad", "warn"), seen, expected,
             "the guest's IOMMU invalidations serialise through one emulated command queue")
