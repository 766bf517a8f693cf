"""fault_inject: make a GPU fault that the provider's health checks should see, by the seed's methods in order.

1. ``dcgm``: DCGM injection (``dcgmi test --inject --gpuid N -f 230 -v <xid>``, field 230 = DCGM_FI_DEV_XID_ERRORS).
   Injected values expire, so a detached helper injects again every second until ``mode: clear`` (or ``hold_s``)
   and then sets the field back to 0.
2. ``kmsg``: a synthetic XID line written to the kernel log through /dev/kmsg, in the driver's own form
   ``NVRM: Xid (PCI:0000:3b:00): 79, pid=…, name=clustermax-assess, GPU has fallen off the bus.``, followed by a
   marker naming the run and the node (so the line can be told from a real one, and found again).
3. ``pcie_bridge_reset``: a secondary bus reset of the GPU's upstream PCIe bridge (``setpci BRIDGE_CONTROL``), which
   gives a genuine XID 79. Only on an NVIDIA GPU node and only when ``allow_pcie_reset`` is true: the GPU is gone
   until the node reboots.
4. ``amdgpu_ras``: an uncorrectable (``ue``) error injected into the memory controller (``umc``) of an AMD GPU
   through the amdgpu driver's RAS debugfs interface, ``echo inject umc ue 0x0 0x0 0x0 >
   /sys/kernel/debug/dri/<minor>/ras/ras_ctrl`` (the kernel's Documentation/gpu/amdgpu/ras.rst, from
   drivers/gpu/drm/amd/amdgpu/amdgpu_ras.c). The DRI minor is the one whose debugfs ``name`` file names the GPU's
   PCI address (``amdgpu dev=0000:c1:00.0 unique=0000:c1:00.0``, drivers/gpu/drm/drm_debugfs.c); UMC must be among
   the GPU's RAS features (bit 0 of ``feature mask: 0x…`` in /sys/bus/pci/devices/<bdf>/ras/features, the file
   the kernel documents as /sys/class/drm/cardN/device/ras/features). amd-smi has no injection command (its ``ras``
   command reads CPER records and AFIDs only), so the debugfs file is the interface. Needs root.

The node's backend decides which methods apply: on an AMD node (``rocm``) the NVIDIA methods are never used (an
NVIDIA XID on an AMD node is no fault its health checks know), on an NVIDIA node (``cuda``) amdgpu_ras is not. The
first method that works is used; each one in the list is recorded with why it did not work or was not tried. No
method working is a skipped artifact with all the reasons.

The injection's time (``injected_at``) is this node's clock. The role reads the batch's observer's clock just
before the inject task and passes what it printed (``observer_clock``); the probe records it with the injection
(``event_at`` inject_started_observer), so that the controller times detection on the observer's clock alone, the
one the scheduler's times are on (reports/phases/reliability/timeline.py), as it times a reboot.

``mode: verify`` (after the watch, before the node is put back): when the injection used pcie_bridge_reset, whether
the GPU answers again (``nvidia-smi -i N --query-gpu=pci.bus_id`` gives its bus id): ``gpu_answers`` 1 or 0 and
the reason. A node whose GPU does not answer is kept out of service (roles/fault_injection/tasks/batch.yml).
"""

import os
import re
import signal
import time

from probes.common import device, procs
from probes.common.clocks import CLOCK_LINE
from probes.common.command import run_cmd
from probes.common.device import sysfs_bdf
from probes.params import Param, Params
from probes.reliability import detached

METHODS = ("dcgm", "kmsg", "pcie_bridge_reset", "amdgpu_ras")
NVIDIA_METHODS = ("dcgm", "kmsg", "pcie_bridge_reset")
AMD_METHODS = ("amdgpu_ras",)
PCIE_METHOD = "pcie_bridge_reset"
# The injection written to ras_ctrl: op, block, error type, sub-block, address, value (ras.rst's own example). Address
# 0 is inside every GPU's VRAM, which the kernel checks before it passes the injection to the RAS firmware.
RAS_BLOCK, RAS_TYPE = "umc", "ue"
RAS_COMMAND = "inject %s %s 0x0 0x0 0x0" % (RAS_BLOCK, RAS_TYPE)
RAS_UMC_BIT = 0  # AMDGPU_RAS_BLOCK__UMC: the UMC's bit in the RAS feature mask
DCGM_XID_FIELD = 230  # DCGM_FI_DEV_XID_ERRORS
KMSG = "/dev/kmsg"
PARAMS = Params(
    mode=Param(str, "inject", "inject a fault, clear a held DCGM injection, or verify the GPU answers after it",
               choices=("inject", "clear", "verify")),
    xid=Param(int, None, "inject: the XID to inject (required)"),
    methods=Param(list, list(METHODS), "inject: methods to try in order, the first that works is used"),
    message=Param(str, "", "inject: the text of the kernel log line (default: injected by clustermax.assess)"),
    gpu_index=Param(int, 0, "the GPU to inject into, as nvidia-smi counts them"),
    hold_s=Param(float, 600, "inject: seconds a DCGM injection is held"),
    dcgm_field=Param(int, DCGM_XID_FIELD, "the DCGM field injected (DCGM_FI_DEV_XID_ERRORS)"),
    kmsg_path=Param(str, KMSG, "inject: the kernel log written to"),
    allow_pcie_reset=Param(bool, False, "inject: allow the PCIe bridge reset (the GPU is lost until a reboot)"),
    sys_root=Param(str, "/sys", "inject: where sysfs is"),
    debugfs_root=Param(str, "/sys/kernel/debug", "inject: where debugfs is (amdgpu_ras)"),
    method=Param(str, "", "verify: the method the injection used (from its artifact)"),
    bus_id=Param(str, "", "verify: the injected GPU's PCI bus id (from the injection's artifact)"),
    observer_clock=Param(str, "", "inject: the output holding the observer's clock read just before this task "
                                  "(roles/fault_injection/tasks/batch.yml)"),
)


def xid_pci(bus_id):
    """nvidia-smi's '00000000:3B:00.0' -> the kernel log's '0000:3b:00' (the device's address without its function)."""
    return (sysfs_bdf(bus_id) or "0000:00:00.0")[:-2]


def upstream_bridge(bdf, sys_root="/sys"):
    """The PCI device right above bdf (its upstream port / bridge), from the sysfs device tree; None at a root."""
    path = os.path.realpath(os.path.join(sys_root, "bus/pci/devices", bdf))
    parent = os.path.basename(os.path.dirname(path))
    return parent if re.match(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", parent) else None


def xid_line(xid, pci, message, marker, pid=None):
    return "NVRM: Xid (PCI:%s): %d, pid=%d, name=clustermax-assess, %s %s" % (
        pci, int(xid), pid if pid is not None else os.getpid(), message.strip(), marker)


def _gpu(gpus, params):
    index = params["gpu_index"]
    return next((g for g in gpus if int(g.get("index", -1)) == index), gpus[0] if gpus else None)


def _hold_paths(out_dir):
    return os.path.join(out_dir, "fault_inject-dcgm.pid"), os.path.join(out_dir, "fault_inject-dcgm.stop")


def dcgm_argv(gpu_index, field, value):
    return ["dcgmi", "test", "--inject", "--gpuid", str(gpu_index), "-f", str(field), "-v", str(value)]


def hold_main(cfg):
    """Detached: inject again every second until the stop file, the deadline or SIGTERM; then clear the field."""
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    deadline = time.time() + float(cfg["hold_s"])
    while not stop["now"] and time.time() < deadline and not os.path.exists(cfg["stop"]):
        run_cmd(dcgm_argv(cfg["gpu"], cfg["field"], cfg["value"]), timeout=10)
        time.sleep(1.0)
    run_cmd(dcgm_argv(cfg["gpu"], cfg["field"], 0), timeout=10)


def _dcgm(art, params, gpus, out_dir):
    if run_cmd(["dcgmi", "--version"], timeout=10).missing:
        return None, "dcgmi not found"
    gpu = _gpu(gpus, params)
    if gpu is None:
        return None, "no GPU to inject into"
    field = params["dcgm_field"]
    xid = params["xid"]
    res = run_cmd(dcgm_argv(gpu["index"], field, xid), timeout=30)
    t = time.time()
    if res.rc != 0:
        text = (res.stderr or res.stdout).strip().splitlines()
        return None, "dcgmi test --inject: %s" % (text[-1] if text else "rc=%s" % res.rc)
    pid_path, stop_path = _hold_paths(out_dir)
    cfg = {"gpu": gpu["index"], "field": field, "value": xid, "hold_s": params["hold_s"],
           "stop": stop_path}
    proc = detached.start("probes.reliability.fault_inject", "hold_main", cfg, "clustermax-assess-dcgm-hold")
    with open(pid_path, "w") as fh:
        fh.write("%d\n" % proc.pid)
    art.facts.update(dcgm_gpu=str(gpu["index"]), dcgm_field=str(field))
    return t, None


def _kmsg(art, params, gpus, out_dir):
    gpu = _gpu(gpus, params)
    pci = xid_pci(gpu.get("pci_bus_id")) if gpu else "0000:00:00"
    marker = "clustermax.assess injection run=%s node=%s" % (art.run_id, art.host)
    line = xid_line(params["xid"], pci, params["message"] or "injected by clustermax.assess", marker)
    try:
        fd = os.open(params["kmsg_path"], os.O_WRONLY)
    except OSError as exc:
        return None, "cannot open %s: %s" % (params["kmsg_path"], exc.strerror)
    # Stamped before the write, as the dcgm and pcie methods are: a watcher reading the kernel log cannot see the
    # fault before this time, so a detection is never timed before its injection.
    t = time.time()
    try:
        # "<3>": kernel log level err, as the driver logs XIDs.
        os.write(fd, ("<3>%s\n" % line).encode())
    except OSError as exc:
        return None, "cannot write %s: %s" % (params["kmsg_path"], exc.strerror)
    finally:
        os.close(fd)
    art.facts.update(kmsg_line=line, pci=pci)
    return t, None


def _pcie(art, params, gpus, out_dir):
    if art.device.get("backend") != "cuda" or not gpus:
        return None, "no NVIDIA GPU on this node (a PCIe bridge reset needs one)"
    if not params["allow_pcie_reset"]:
        return None, "not allowed (set fault_injection_allow_pcie_reset: the GPU is lost until the node reboots)"
    gpu = _gpu(gpus, params)
    bdf = sysfs_bdf(gpu.get("pci_bus_id"))
    bridge = upstream_bridge(bdf, params["sys_root"]) if bdf else None
    if not bridge:
        return None, "no upstream PCIe bridge found for GPU %s (%s)" % (gpu.get("index"), gpu.get("pci_bus_id"))
    res = run_cmd(["setpci", "-s", bridge, "BRIDGE_CONTROL"], timeout=10)
    if res.rc != 0:
        return None, "setpci: %s" % ((res.stderr or "not found").strip() or "rc=%s" % res.rc)
    value = int(res.stdout.strip() or "0", 16)
    t = time.time()
    # Secondary bus reset: set bit 6 of the bridge control register, hold it, clear it again.
    run_cmd(["setpci", "-s", bridge, "BRIDGE_CONTROL=%04x" % (value | 0x40)], timeout=10)
    time.sleep(0.2)
    run_cmd(["setpci", "-s", bridge, "BRIDGE_CONTROL=%04x" % value], timeout=10)
    art.facts.update(pcie_bridge=bridge, gpu_bdf=bdf)
    return t, None


def _is_root():
    return os.geteuid() == 0


def dri_name_bdf(text):
    """A DRM debugfs ``name`` file ('amdgpu dev=0000:c1:00.0 unique=0000:c1:00.0') -> '0000:c1:00.0', or None."""
    m = re.search(r"\b(?:dev|unique)=(\S+)", text or "")
    return sysfs_bdf(m.group(1)) if m else None


def dri_minor(bdf, debugfs_root="/sys/kernel/debug"):
    """The debugfs DRI directory of the GPU at bdf that holds ras/ras_ctrl: (minor, path), or (None, why)."""
    root = os.path.join(debugfs_root, "dri")
    try:
        entries = os.listdir(root)
    except OSError as exc:
        return None, "cannot read %s: %s" % (root, exc.strerror)
    found = []
    # Numeric minors in order; the render minors (128 and up) carry the same name but no ras directory.
    for entry in sorted(entries, key=lambda e: (not e.isdigit(), int(e) if e.isdigit() else 0, e)):
        try:
            with open(os.path.join(root, entry, "name")) as fh:
                named = dri_name_bdf(fh.read())
        except OSError:
            named = None
        # Newer kernels also name a per-device directory by its PCI address.
        if named != bdf and entry.lower() != bdf:
            continue
        found.append(entry)
        ctrl = os.path.join(root, entry, "ras", "ras_ctrl")
        if os.path.exists(ctrl):
            return entry, ctrl
    if not found:
        return None, "no DRI minor under %s names the GPU's PCI address %s" % (root, bdf)
    return None, ("no ras/ras_ctrl under %s/{%s} (RAS is off on this GPU, or the kernel has no RAS debugfs)"
                  % (root, ",".join(found)))


def ras_feature_mask(bdf, sys_root="/sys"):
    """The GPU's RAS feature mask (``feature mask: 0x…``): (mask, path), or (None, why)."""
    path = os.path.join(sys_root, "bus/pci/devices", bdf, "ras", "features")
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as exc:
        return None, "cannot read %s: %s (RAS is off on this GPU: amdgpu.ras_enable)" % (path, exc.strerror)
    m = re.search(r"feature mask:\s*0x([0-9A-Fa-f]+)", text)
    if not m:
        return None, "%s: cannot read %r" % (path, text.strip()[:80])
    return int(m.group(1), 16), path


def _amdgpu_ras(art, params, gpus, out_dir):
    if art.device.get("backend") != "rocm" or not gpus:
        return None, "no AMD GPU on this node (an amdgpu RAS injection needs one)"
    gpu = _gpu(gpus, params)
    bdf = sysfs_bdf(gpu.get("pci_bus_id"))
    if not bdf:
        return None, "GPU %s has no PCI address (%r)" % (gpu.get("index"), gpu.get("pci_bus_id"))
    mask, where = ras_feature_mask(bdf, params["sys_root"])
    if mask is None:
        return None, where
    if not mask & (1 << RAS_UMC_BIT):
        return None, "UMC is not among the RAS features of GPU %s (%s: feature mask 0x%x)" % (bdf, where, mask)
    if not _is_root():
        return None, "not root: the amdgpu RAS debugfs interface (ras_ctrl) is root-only"
    if not os.path.isdir(os.path.join(params["debugfs_root"], "dri")):
        return None, "no debugfs at %s (mount -t debugfs none %s)" % (params["debugfs_root"], params["debugfs_root"])
    minor, ctrl = dri_minor(bdf, params["debugfs_root"])
    if minor is None:
        return None, ctrl
    try:
        fd = os.open(ctrl, os.O_WRONLY)
    except OSError as exc:
        return None, "cannot open %s: %s" % (ctrl, exc.strerror)
    # Stamped before the write, as the other methods are: the fault cannot be seen before this time.
    t = time.time()
    try:
        # One write, as the shell's echo does: the driver reads the command from the start of each write.
        os.write(fd, (RAS_COMMAND + "\n").encode())
    except OSError as exc:
        # EINVAL: the driver refused the block, the type or the address (amdgpu_ras_debugfs_ctrl_write).
        return None, "writing %r to %s: %s" % (RAS_COMMAND, ctrl, exc.strerror)
    finally:
        os.close(fd)
    art.facts.update(ras_block=RAS_BLOCK, ras_type=RAS_TYPE, ras_command=RAS_COMMAND, ras_ctrl=ctrl, dri_minor=minor,
                     gpu_bdf=bdf, ras_features="0x%x" % mask)
    return t, None


def _verify(art, params):
    """After a PCIe bridge reset: does the GPU answer again (nvidia-smi gives its bus id)? Data either way."""
    method = params["method"]
    if method != PCIE_METHOD:
        art.skip("nothing to verify: the injection used %s, which leaves the GPU in place" % (method or "no method"))
        return
    index = params["gpu_index"]
    expected = sysfs_bdf(params["bus_id"])
    res = run_cmd(["nvidia-smi", "-i", str(index), "--query-gpu=pci.bus_id", "--format=csv,noheader"], timeout=30)
    lines = [x.strip() for x in (res.stdout or "").splitlines() if x.strip()]
    got = sysfs_bdf(lines[0]) if lines else None
    if res.missing:
        why = "nvidia-smi not found"
    elif res.timed_out:
        why = "nvidia-smi -i %d timed out" % index
    elif res.rc != 0 or not got:
        text = (res.stdout + res.stderr).strip().splitlines()
        why = "nvidia-smi -i %d exit %s: %s" % (index, res.rc, text[-1] if text else "no output")
    elif expected and got != expected:
        why = "GPU %d is %s now, not the reset GPU %s" % (index, got, expected)
    else:
        why = None
    art.facts.update(method=method, gpu_bdf=expected or "",
                     gpu_reason=why or "GPU %d answered at %s after the PCIe bridge reset" % (index, got))
    art.add("gpu_answers", 0 if why else 1, "bool")


def _clear(art, params, out_dir):
    """Stop the DCGM hold helper (it sets the field back to 0 as it goes); nothing to undo for the other methods."""
    pid_path, stop_path = _hold_paths(out_dir)
    if not os.path.exists(pid_path):
        art.skip("nothing to clear: no DCGM injection is held on this node")
        return
    open(stop_path, "w").close()
    with open(pid_path) as fh:
        pid = int(fh.read().strip() or 0)
    deadline = time.time() + 15
    while time.time() < deadline and procs.alive(pid):
        time.sleep(0.2)
    if procs.alive(pid) and _ours(pid):
        os.kill(pid, signal.SIGKILL)
        run_cmd(dcgm_argv(params["gpu_index"], params["dcgm_field"], 0), timeout=10)
    for path in (pid_path, stop_path):
        if os.path.exists(path):
            os.unlink(path)
    art.add("cleared", 1, "bool", method="dcgm")


def _ours(pid):
    return b"clustermax-assess-dcgm-hold" in procs.cmdline(pid)


def _not_for(backend, method):
    """Why the method is not tried on a node of this backend, or None when it is."""
    if backend == "rocm" and method in NVIDIA_METHODS:
        return "not tried: an NVIDIA XID on an AMD node (its health checks watch the amdgpu driver's RAS errors)"
    if backend == "cuda" and method in AMD_METHODS:
        return "not tried: an amdgpu RAS injection on an NVIDIA node"
    return None


def run(art, params, out_dir):
    if params["mode"] == "clear":
        _clear(art, params, out_dir)
        return
    if params["mode"] == "verify":
        _verify(art, params)
        return
    if params["xid"] is None:
        raise ValueError("params.xid is required")
    dev, gpus, _ = device.describe()
    art.device = dev
    methods = params["methods"] or list(METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise ValueError("unknown method(s) %s: want %s" % (", ".join(unknown), ", ".join(METHODS)))
    art.facts["xid"] = str(params["xid"])
    fns = {"dcgm": _dcgm, "kmsg": _kmsg, "pcie_bridge_reset": _pcie, "amdgpu_ras": _amdgpu_ras}
    seen, tried = [], 0
    for method in methods:
        seen.append(method)
        why = _not_for(dev.get("backend"), method)
        t = None
        if why is None:
            tried += 1
            t, why = fns[method](art, params, gpus, out_dir)
        art.facts["method_%s" % method] = "ok" if t is not None else why
        if t is not None:
            art.facts["method"] = method
            art.add("injected_at", round(t, 3), "s_epoch", method=method, xid=params["xid"])
            # The injection's start by the observer's clock, which the scheduler's times are on: detection is timed
            # from it (reports/phases/reliability/timeline.py), never this node's clock minus the observer's.
            observer = CLOCK_LINE.search(params["observer_clock"] or "")
            if observer:
                art.add("event_at", round(float(observer.group(1)), 3), "s_epoch", event="inject_started_observer")
            art.add("methods_tried", tried, "count")
            return
    art.add("methods_tried", tried, "count")
    art.skip("no injection method worked: " + "; ".join("%s: %s" % (m, art.facts["method_%s" % m]) for m in seen))
