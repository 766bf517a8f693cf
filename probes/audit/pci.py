"""PCI inventory for the audit, from /sys/bus/pci (no tool needed), plus `lspci -vvv -D` for what only the
configuration space shows: Access Control Services (ACS) on the bridges between GPUs and NICs.

Recorded per device of interest (GPUs, NVSwitches, NICs, NVMe, and every bridge above them): vendor, class,
driver, NUMA node, link speed/width (current and maximum), AER error totals and the chain of upstream bridges.
"""

import os
import re

from probes.audit.collect import listdir, read_strip, readlink_base, to_int

SYS_PCI = "/sys/bus/pci/devices"
_BDF = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


def classify(vendor, pci_class):
    """Kind of device from PCI vendor and class ids (0x10de, 0x030200)."""
    vendor = (vendor or "").lower()
    cls = (pci_class or "").lower()
    base = cls[:6]
    if vendor == "0x10de" and base in ("0x0302", "0x0300"):
        return "gpu"
    if vendor == "0x1002" and base in ("0x0380", "0x1200", "0x0302"):
        return "gpu"
    if vendor == "0x10de" and base == "0x0680":
        return "nvswitch"
    if base in ("0x0200", "0x0207"):
        return "nic"
    if cls.startswith("0x010802"):
        return "nvme"
    if base == "0x0604":
        return "bridge"
    return None


def parse_aer(text):
    """/sys/.../aer_dev_fatal: 'TOTAL_ERR_FATAL 0' (older kernels: one counter per line, summed)."""
    if not text:
        return None
    total = None
    values = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            if parts[0].startswith("TOTAL_"):
                total = int(parts[1])
            else:
                values.append(int(parts[1]))
    return total if total is not None else (sum(values) if values else None)


def _speed_gts(text):
    m = re.match(r"^\s*(\d+(?:\.\d+)?)\s*GT/s", text or "")
    return float(m.group(1)) if m else None


def scan_sysfs(root=SYS_PCI):
    """Devices of interest and the bridges above them: {bdf: {...}}."""
    devices = {}
    for bdf in listdir(root):
        path = os.path.join(root, bdf)
        vendor = read_strip(os.path.join(path, "vendor"))
        pci_class = read_strip(os.path.join(path, "class"))
        kind = classify(vendor, pci_class)
        if kind is None or kind == "bridge":
            continue
        devices[bdf] = _describe(path, bdf, vendor, pci_class, kind)
    # the bridges on the way up from every device of interest
    for bdf in list(devices):
        for parent in devices[bdf]["upstream"]:
            if parent not in devices:
                ppath = os.path.join(root, parent)
                devices[parent] = _describe(ppath, parent, read_strip(os.path.join(ppath, "vendor")),
                                            read_strip(os.path.join(ppath, "class")), "bridge")
    return devices


def _describe(path, bdf, vendor, pci_class, kind):
    real = os.path.realpath(path)
    chain = [p for p in real.split("/") if _BDF.match(p)]
    root = next((p for p in real.split("/") if p.startswith("pci")), None)
    return {
        "kind": kind,
        "vendor": vendor,
        "device": read_strip(os.path.join(path, "device")),
        "class": pci_class,
        "driver": readlink_base(os.path.join(path, "driver")),
        "numa_node": to_int(read_strip(os.path.join(path, "numa_node"))),
        "link_speed_gts": _speed_gts(read_strip(os.path.join(path, "current_link_speed"))),
        "link_speed_max_gts": _speed_gts(read_strip(os.path.join(path, "max_link_speed"))),
        "link_width": to_int(read_strip(os.path.join(path, "current_link_width"))),
        "link_width_max": to_int(read_strip(os.path.join(path, "max_link_width"))),
        "aer_fatal": parse_aer(read_strip(os.path.join(path, "aer_dev_fatal"))),
        "aer_nonfatal": parse_aer(read_strip(os.path.join(path, "aer_dev_nonfatal"))),
        "root": root,
        "upstream": chain[:-1] if chain and chain[-1].lower() == bdf.lower() else chain,
        "iommu_group": readlink_base(os.path.join(path, "iommu_group")),
    }


_HEADER = re.compile(r"^([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(.*)$")


def parse_lspci(text):
    """`lspci -vvv -D` -> ({bdf: {"title", "acs_ctl": {flag: bool} or None, "lnk_sta": ...}}, access_denied)."""
    devices = {}
    denied = False
    current = None
    for line in (text or "").splitlines():
        m = _HEADER.match(line)
        if m:
            current = {"title": m.group(2).strip(), "acs_ctl": None, "acs_cap": None, "lnk_cap": None,
                       "lnk_sta": None}
            devices[m.group(1).lower()] = current
            continue
        if current is None:
            continue
        stripped = line.strip()
        if "<access denied>" in stripped:
            denied = True
        for key, field in (("ACSCtl:", "acs_ctl"), ("ACSCap:", "acs_cap")):
            if stripped.startswith(key):
                flags = {}
                for token in stripped[len(key):].split():
                    if token[-1:] in "+-":
                        flags[token[:-1]] = token.endswith("+")
                current[field] = flags
        if stripped.startswith("LnkCap:"):
            current["lnk_cap"] = stripped[len("LnkCap:"):].strip()
        elif stripped.startswith("LnkSta:"):
            current["lnk_sta"] = stripped[len("LnkSta:"):].strip()
    return devices, denied


def collect(c):
    devices = scan_sysfs()
    c.mark("pci_sysfs", "ok" if os.path.isdir(SYS_PCI) else "missing",
           None if os.path.isdir(SYS_PCI) else "%s not present" % SYS_PCI)
    out = {"devices": devices, "acs_read": False}
    bridges = [b for b, d in devices.items() if d["kind"] == "bridge"]
    if not bridges:
        c.mark("lspci", "not_applicable", "no PCIe bridge above a GPU, NIC or NVMe device")
        return out
    res = c.cmd("lspci", ["lspci", "-vvv", "-D"], timeout=20)
    if res.rc == 0:
        c.save_raw("lspci-vvv.txt", res.stdout)
        parsed, denied = parse_lspci(res.stdout)
        if denied and not c.is_root:
            c.mark("lspci", "not_permitted", "lspci shows '<access denied>' for capabilities: run as root")
        else:
            out["acs_read"] = True
        for bdf, info in parsed.items():
            if bdf in devices:
                devices[bdf]["acs_ctl"] = info["acs_ctl"]
                devices[bdf]["title"] = info["title"][:120]
    return out
