"""Operating system and kernel facts for the audit, read from /proc and /sys: OS release, kernels installed and
booted, kernel command line, IOMMU, CPU frequency governor, selected sysctls, CPU vulnerability mitigations,
loaded modules, memory ECC (EDAC), clock synchronisation, journald persistence, failed systemd units, and what a guest
sees of virtualization (VM or not, vmx/svm, /dev/kvm, nested KVM)."""

import ctypes
import glob
import os
import platform
import re
import shutil

from probes.audit.collect import listdir, read, read_key_values, read_strip, to_int

# Kernel settings the rubric reads (performance, isolation, hardening). Read from /proc/sys, never written.
SYSCTLS = (
    "kernel.numa_balancing", "kernel.dmesg_restrict", "kernel.kptr_restrict", "kernel.yama.ptrace_scope",
    "kernel.randomize_va_space", "fs.suid_dumpable", "kernel.unprivileged_bpf_disabled",
    "kernel.unprivileged_userns_clone", "user.max_user_namespaces", "net.ipv4.ip_forward", "vm.swappiness",
    "vm.overcommit_memory", "vm.zone_reclaim_mode", "kernel.perf_event_paranoid", "net.core.rmem_max",
    "net.core.wmem_max", "kernel.sysrq", "fs.protected_symlinks", "fs.protected_hardlinks",
)
_STA_UNSYNC = 0x0040
_TIME_ERROR = 5


def read_sysctls(keys=SYSCTLS, root="/proc/sys"):
    out = {}
    for key in keys:
        value = read_strip(os.path.join(root, *key.split(".")))
        out[key] = None if value is None else re.sub(r"\s+", " ", value)
    return out


def parse_cmdline(text):
    """Kernel command line -> {"raw", "params": {key: value or True}}."""
    params = {}
    for token in (text or "").split():
        key, sep, value = token.partition("=")
        params[key] = value if sep else True
    return params


def kernel_versions(boot_dir="/boot", modules_dir="/lib/modules"):
    """Kernels installed: vmlinuz images in /boot and module trees in /lib/modules (either counts)."""
    found = set()
    for path in glob.glob(os.path.join(boot_dir, "vmlinuz-*")):
        found.add(os.path.basename(path)[len("vmlinuz-"):])
    for name in listdir(modules_dir):
        if os.path.isdir(os.path.join(modules_dir, name, "kernel")):
            found.add(name)
    return sorted(found)


def clock_state():
    """adjtimex(2) with modes=0 (read only): {"state", "unsynchronised", "maxerror_us"} or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(512)  # struct timex, zeroed: modes = 0 changes nothing
        state = libc.adjtimex(buf)
    except (OSError, AttributeError):
        return None
    if state < 0:
        return None
    out = {"state": state, "unsynchronised": state == _TIME_ERROR}
    if ctypes.sizeof(ctypes.c_long) == 8:
        longs = ctypes.cast(buf, ctypes.POINTER(ctypes.c_long))
        ints = ctypes.cast(buf, ctypes.POINTER(ctypes.c_int))
        out["maxerror_us"] = longs[3]
        out["unsynchronised"] = bool(ints[10] & _STA_UNSYNC) or state == _TIME_ERROR
    return out


def cpu_governors(root="/sys/devices/system/cpu"):
    counts = {}
    for path in glob.glob(os.path.join(root, "cpu[0-9]*", "cpufreq", "scaling_governor")):
        gov = read_strip(path)
        if gov:
            counts[gov] = counts.get(gov, 0) + 1
    return counts


def edac_counts(root="/sys/devices/system/edac/mc"):
    ce = ue = 0
    controllers = 0
    for mc in listdir(root):
        if not mc.startswith("mc"):
            continue
        controllers += 1
        ce += to_int(read_strip(os.path.join(root, mc, "ce_count")), 0)
        ue += to_int(read_strip(os.path.join(root, mc, "ue_count")), 0)
    return {"controllers": controllers, "ce": ce, "ue": ue}


def iommu_state():
    groups = listdir("/sys/kernel/iommu_groups")
    types = {}
    for g in groups:
        kind = read_strip("/sys/kernel/iommu_groups/%s/type" % g)
        if kind:
            types[kind] = types.get(kind, 0) + 1
    return {"units": listdir("/sys/class/iommu"), "groups": len(groups), "group_types": types}


# Arm SMMUv3 command-queue virtualization (CMDQV/VCMDQ), a Grace extension: it hands a guest its own SMMU command
# queue, so a VM's IOMMU invalidations do not serialise through the host's one queue. Grace boots ACPI, where CMDQV is
# the SMMU's companion ACPI device NVDA200C (dmesg: "arm-smmu-v3 arm-smmu-v3.10.auto: found companion CMDQV device:
# NVDA200C:00", tests/fixtures/audit/arm_smmu/README.md) handled inside arm-smmu-v3; on devicetree kernels it is the
# tegra241-cmdqv platform driver (the module is spelt with an underscore, the devicetree with a dash).
CMDQV_DRIVERS = ("/sys/bus/platform/drivers/tegra241_cmdqv", "/sys/bus/platform/drivers/tegra241-cmdqv")
CMDQV_MODULES = ("tegra241_cmdqv", "arm_smmu_v3")
CMDQV_ACPI_HID = "NVDA200C"
DMI_FIELDS = ("sys_vendor", "product_name", "board_name")


def arm_smmu(arch, sys_root="/sys", proc_root="/proc"):
    """What an Arm node shows of its SMMUv3 units and of CMDQV (None on other architectures): the SMMUv3 units under
    /sys/class/iommu (smmu3.0x...), the CMDQV ACPI devices (NVDA200C:nn, with their _STA status), the devices bound to
    the tegra241-cmdqv driver, the CMDQV modules loaded, whether the devicetree names a tegra241-cmdqv node, and the
    DMI/devicetree names that identify a Grace platform."""
    if arch != "aarch64":
        return None
    bound = []
    for path in CMDQV_DRIVERS:
        path = sys_root + path[len("/sys"):]
        bound += [e for e in listdir(path) if os.path.islink(os.path.join(path, e))
                  and not e.startswith(("bind", "unbind", "uevent", "module", "new_id", "remove_id"))]
    compatible = []
    for path in glob.glob(os.path.join(proc_root, "device-tree", "**", "compatible"), recursive=True)[:4096]:
        text = (read(path, "") or "").replace("\x00", "\n")
        compatible += [x for x in text.split("\n") if x.startswith("nvidia,")]
    acpi = os.path.join(sys_root, "bus", "acpi", "devices")
    return {
        "iommu_units": listdir(os.path.join(sys_root, "class", "iommu")),
        "acpi_cmdqv": {d: read_strip(os.path.join(acpi, d, "status")) for d in listdir(acpi)
                       if d.startswith(CMDQV_ACPI_HID)},
        "cmdqv_bound": sorted(bound),
        "cmdqv_driver": any(os.path.isdir(sys_root + p[len("/sys"):]) for p in CMDQV_DRIVERS),
        "modules": [m for m in CMDQV_MODULES if os.path.isdir(os.path.join(sys_root, "module", m))],
        "devicetree_nvidia": sorted(set(compatible)),
        "dmi": {f: read_strip(os.path.join(sys_root, "class", "dmi", "id", f)) for f in DMI_FIELDS},
    }


def cpu_flags(cpuinfo):
    """The first `flags` line of /proc/cpuinfo (x86) -> set of flags."""
    m = re.search(r"^flags\s*:\s*(.*)$", cpuinfo or "", re.M)
    return set(m.group(1).split()) if m else set()


def numa_nodes(root="/sys/devices/system/node"):
    """Each NUMA node: its CPUs (cpulist; empty on a memory-only node, such as a Grace Hopper's HBM in NUMA mode)
    and its memory (MemTotal in kB)."""
    out = []
    for name in listdir(root):
        m = re.match(r"^node(\d+)$", name)
        if not m:
            continue
        meminfo = read(os.path.join(root, name, "meminfo"), "") or ""
        mem = re.search(r"MemTotal:\s+(\d+)\s*kB", meminfo)
        out.append({"node": int(m.group(1)), "cpus": read_strip(os.path.join(root, name, "cpulist"), ""),
                    "mem_kb": int(mem.group(1)) if mem else None})
    return sorted(out, key=lambda n: n["node"])


def virtualization(c):
    """What a guest can see of virtualization (the Januscape exposure, CVE-2026-53359): whether it runs in a VM,
    whether the CPU's own virtualization (vmx/svm) is handed to it, /dev/kvm, and nested KVM."""
    flags = cpu_flags(read("/proc/cpuinfo", ""))
    kind = None
    if shutil.which("systemd-detect-virt"):
        res = c.cmd("detect_virt", ["systemd-detect-virt", "--vm"], timeout=5, ok_rcs=(0, 1))
        kind = (res.stdout or "").strip() or None
    else:
        c.mark("detect_virt", "missing", "systemd-detect-virt not found; the cpuinfo hypervisor flag is used")
    nested = next((read_strip(p) for p in ("/sys/module/kvm_intel/parameters/nested",
                                           "/sys/module/kvm_amd/parameters/nested") if os.path.exists(p)), None)
    kind = None if kind == "none" else kind
    return {"vm": kind if kind else ("hypervisor flag" if "hypervisor" in flags else None),
            "hypervisor_flag": "hypervisor" in flags, "cpu_virt_flag": sorted(flags & {"vmx", "svm"}),
            "dev_kvm": os.path.exists("/dev/kvm"), "nested": nested}


def collect(c):
    uname = platform.uname()
    osr = read_key_values(read("/etc/os-release", ""))
    vulns = {}
    for name in listdir("/sys/devices/system/cpu/vulnerabilities"):
        vulns[name] = read_strip("/sys/devices/system/cpu/vulnerabilities/" + name)
    cmdline = read_strip("/proc/cmdline", "")
    loadavg = (read_strip("/proc/loadavg", "") or "").split()
    journald_conf = read_key_values(read("/etc/systemd/journald.conf", ""))
    out = {
        "os_id": osr.get("ID"),
        "os_version": osr.get("VERSION_ID"),
        "os_name": osr.get("PRETTY_NAME"),
        "kernel": uname.release,
        "arch": uname.machine,
        "kernels_installed": kernel_versions(),
        "cmdline": parse_cmdline(cmdline),
        "iommu": iommu_state(),
        "arm_smmu": arm_smmu(uname.machine),
        "virtualization": virtualization(c),
        "numa_nodes": numa_nodes(),
        "cpu_governors": cpu_governors(),
        "cpu_count": os.cpu_count(),
        "sysctl": read_sysctls(),
        "vulnerabilities": vulns,
        "modules": sorted(line.split()[0] for line in (read("/proc/modules", "") or "").splitlines() if line),
        "edac": edac_counts(),
        "thp": read_strip("/sys/kernel/mm/transparent_hugepage/enabled"),
        "clock": clock_state(),
        "loadavg_1m": float(loadavg[0]) if loadavg else None,
        "uptime_s": float((read_strip("/proc/uptime", "0") or "0").split()[0]),
        "journal_persistent": os.path.isdir("/var/log/journal") or
        journald_conf.get("Storage", "").lower() == "persistent",
        "pid1": read_strip("/proc/1/comm"),
    }
    c.mark("proc_sys", "ok")
    if out["pid1"] == "systemd":
        res = c.cmd("systemctl_failed", ["systemctl", "list-units", "--state=failed", "--plain", "--no-legend",
                                         "--no-pager"], timeout=10)
        if res.rc == 0:
            out["failed_units"] = sorted(line.split()[0] for line in res.stdout.splitlines() if line.strip())
    else:
        c.mark("systemctl_failed", "not_applicable", "systemd is not PID 1 here (PID 1 is %s)" % out["pid1"])
    return out
