"""BlueField DPUs seen from the host, for the audit: which PCI functions are BlueField, whether the host can reach the
DPU's Arm side (an RShim device node /dev/rshim*, the tmfifo_net0 interface), and the DPU's own settings as
`mlxconfig -d <pci> q` (or mstconfig, its open-source twin) reports them: INTERNAL_CPU_MODEL (DPU or NIC mode) and
INTERNAL_CPU_RSHIM (whether the host may open RShim). A query only: nothing is set.

Judged on the controller (reports/phases/audit/network.py, audit.net.dpu_host_isolation): in a zero-trust
deployment the tenant on the host must not reach the DPU that enforces its isolation.
"""

import glob
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

from probes.audit.collect import listdir, read_strip

SYS_PCI = "/sys/bus/pci/devices"
# Mellanox/NVIDIA vendor 0x15b3: BlueField (0xa2d2), BlueField-2 (0xa2d6), BlueField-3 (0xa2dc) network functions.
BLUEFIELD_DEVICES = {"0xa2d2": "BlueField", "0xa2d6": "BlueField-2", "0xa2dc": "BlueField-3"}
# What is read: the DPU or NIC mode (INTERNAL_CPU_OFFLOAD_ENGINE DISABLED(1) is a BlueField-3's NIC mode), and the
# host's access to the Arm side (RShim, tracer, counters, port owner). mlxconfig's query prints the configuration of
# the next boot: a setting changed but not yet power-cycled shows there.
QUERIED = ("INTERNAL_CPU_MODEL", "INTERNAL_CPU_OFFLOAD_ENGINE", "INTERNAL_CPU_RSHIM", "PORT_OWNER", "TRACER_ENABLE",
           "ALLOW_RD_COUNTERS")
_SETTING = re.compile(r"^\s+([A-Z][A-Z0-9_]+(?:\[\d+\])?)\s+(\S.*?)\s*$")


def bluefield_functions(root=SYS_PCI):
    """{bdf: model} of the BlueField PCI functions on this host (the first function of each device)."""
    out = {}
    for bdf in listdir(root):
        path = os.path.join(root, bdf)
        if (read_strip(os.path.join(path, "vendor")) or "").lower() != "0x15b3":
            continue
        model = BLUEFIELD_DEVICES.get((read_strip(os.path.join(path, "device")) or "").lower())
        if model and bdf.endswith(".0"):
            out[bdf] = model
    return out


def parse_mlxconfig_q(text):
    """`mlxconfig -d <dev> q` / `mstconfig -d <dev> q` -> {"device_type", "name", "settings": {KEY: value}}. The value
    is kept as printed (ENABLED(0), EMBEDDED_CPU(1), True(1), 0, Array[0..7]); the last column, when mlxconfig prints
    default/current/next-boot columns, is the next boot's."""
    out = {"device_type": None, "name": None, "settings": {}}
    in_settings = False
    for line in (text or "").splitlines():
        stripped = line.strip()
        m = re.match(r"^Device type:\s*(\S+)", stripped)
        if m:
            out["device_type"] = m.group(1)
        m = re.match(r"^Name:\s*(\S+)", stripped)
        if m:
            out["name"] = m.group(1)
        if stripped.startswith("Configurations:"):
            in_settings = True
            continue
        m = _SETTING.match(line) if in_settings else None
        if m and not m.group(1).startswith("_"):
            out["settings"][m.group(1)] = m.group(2).split()[-1]
    return out


def collect(c):
    functions = bluefield_functions()
    out = {"bluefield": functions, "rshim_devices": sorted(glob.glob("/dev/rshim*")),
           "tmfifo_net0": os.path.exists("/sys/class/net/tmfifo_net0"), "queries": {}}
    if not functions:
        c.mark("mlxconfig", "not_applicable", "no BlueField PCI function on this host")
        return out
    tool = shutil.which("mlxconfig") or shutil.which("mstconfig")
    if not tool:
        c.mark("mlxconfig", "missing", "neither mlxconfig (MFT) nor mstconfig (mstflint) is installed")
        _virtnet(c, out)
        return out
    c.mark("mlxconfig", "ok", None)
    _virtnet(c, out)

    def query(bdf):
        # only the settings judged: a full query of a BlueField-3 prints some 300 lines and takes seconds
        res = c.cmd("mlxconfig:%s" % bdf, [tool, "-d", bdf, "q"] + list(QUERIED), timeout=20)
        if res.rc == 0:
            c.save_raw("mlxconfig-q-%s.txt" % bdf, res.stdout)
            parsed = parse_mlxconfig_q(res.stdout)
            out["queries"][bdf] = {"device_type": parsed["device_type"], "name": parsed["name"],
                                   "settings": {k: v for k, v in parsed["settings"].items() if k in QUERIED}}

    # one thread per device: a node with eight BlueField-3 SuperNICs must not run past the audit's deadline
    with ThreadPoolExecutor(max_workers=max(1, len(functions))) as pool:
        list(pool.map(query, sorted(functions)))
    return out


def _virtnet(c, out):
    """The BlueField virtio-net controller's running version, where its CLI is on this node: `virtnet version` prints
    the original (running) and destination (staged) controller versions. NVIDIA installs `virtnet` on the DPU's Arm
    side, so a host normally has none, and the controller judges from the DPU's mode alone."""
    if not shutil.which("virtnet"):
        c.mark("virtnet", "missing", "virtnet (the virtio-net controller's CLI, on the DPU's Arm side) is not on this "
                                     "node")
        return
    res = c.cmd("virtnet", ["virtnet", "version"], timeout=10)
    if res.rc == 0:
        out["virtnet_version"] = res.stdout[-4000:]
