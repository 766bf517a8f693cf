"""NVIDIA GPUs for the audit: `nvidia-smi -q -x` (`nvidia-smi -q` text where the XML fails), `nvidia-smi nvlink
-s / -e`, `nvidia-smi topo -m`, the kernel module, Fabric Manager and IMEX. Parsers are pure functions (recorded
outputs of H100, H200, B200, GB200 and MIG A100 nodes drive their tests).

Both XML layouts are read: the current one (clocks_event_reasons, gpu_power_readings, sram_/dram_ ECC counters)
and the older one (clocks_throttle_reasons, power_readings, single_bit/double_bit ECC counters). The text report is
turned into the same element tree (probes/audit/nvidia_text.py), so one set of field paths reads both.
"""

import os
import re
import xml.etree.ElementTree as ET

from probes.audit import nvidia_text
from probes.audit.collect import listdir, read, read_strip, version_in
from probes.common import gpu_topo

# Driver 575 prints "Requested functionality has been deprecated" for fields it no longer reads (reset_required,
# drain_and_reset_recommended, display_mode, graphics_volt: tests/fixtures/nvidia-smi, the r575 captures): not
# reported, like N/A, never a "No".
DEPRECATED = "Requested functionality has been deprecated"
NA = ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown Error", "[Unknown Error]", "None", DEPRECATED)
# for fields where "None" is a reading (no virtualization, no recovery action needed), not a missing value
NA_BUT_NONE = tuple(x for x in NA if x != "None")


def _text(node, path, na=NA):
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    value = found.text.strip()
    return None if value in na else value


def _num(value):
    """'81559 MiB' -> 81559.0, '700.00 W' -> 700.0, '16x' -> 16.0; None when absent or N/A."""
    if value is None:
        return None
    m = re.match(r"^\s*(-?\d+(?:\.\d+)?)", value)
    return float(m.group(1)) if m else None


def _int(value):
    n = _num(value)
    return int(n) if n is not None else None


def _yes(value):
    if value is None:
        return None
    return value.strip().lower() in ("yes", "enabled", "active", "true")


def _sum_uncorrectable(block):
    """Uncorrectable ECC count of a volatile/aggregate block, both XML layouts; None when not reported."""
    if block is None:
        return None
    values = []
    for child in block:
        tag = child.tag
        if tag in ("single_bit", "sram_correctable", "dram_correctable"):
            continue
        if tag == "double_bit":
            v = _int(_text(child, "total"))
            if v is not None:
                values.append(v)
        elif "uncorrect" in tag:
            v = _int(child.text.strip() if child.text else None)
            if v is not None:
                values.append(v)
    return sum(values) if values else None


def _sum_correctable(block):
    if block is None:
        return None
    values = []
    for child in block:
        if child.tag == "single_bit":
            v = _int(_text(child, "total"))
        elif child.tag in ("sram_correctable", "dram_correctable"):
            v = _int(child.text.strip() if child.text else None)
        else:
            continue
        if v is not None:
            values.append(v)
    return sum(values) if values else None


def _active_reasons(gpu):
    block = gpu.find("clocks_event_reasons")
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
    if block is None:
        return None
    active = []
    for child in block:
        if child.text and child.text.strip() == "Active":
            name = re.sub(r"^clocks_(event|throttle)_reasons?_", "", child.tag)
            name = re.sub(r"^clocks_(event|throttle)_reason_", "", name)
            active.append(name)
    return sorted(active)


def _mig_devices(gpu):
    """The MIG devices of a GPU (one per compute instance): their GPU instance, SMs and memory."""
    out = []
    for dev in gpu.findall("mig_devices/mig_device"):
        out.append({"index": _int(_text(dev, "index")), "gpu_instance_id": _int(_text(dev, "gpu_instance_id")),
                    "compute_instance_id": _int(_text(dev, "compute_instance_id")),
                    "sm_count": _int(_text(dev, "device_attributes/shared/multiprocessor_count")),
                    "memory_total_mib": _num(_text(dev, "fb_memory_usage/total")),
                    "sram_uncorrectable_volatile":
                        _int(_text(dev, "ecc_error_count/volatile_count/sram_uncorrectable"))})
    return out


def _power_draw(block):
    """Watts drawn, from a power readings block: power_draw up to driver 570; from 575 there is no power_draw but
    instant_power_draw and average_power_draw (text "Instantaneous Power Draw", "Average Power Draw"; either may be
    N/A, as the r575 GTX 1650 capture's average is). The instant reading is the nearest to the old one."""
    return _num(_text(block, "power_draw") or _text(block, "instant_power_draw") or _text(block, "average_power_draw"))


def _remap_reported(gpu):
    """True when the GPU printed its remapped-row counters; False for <remapped_rows>N/A</remapped_rows>, which a
    GPU without row remapping prints and so does an A100 with MIG enabled (the counters are not read then:
    tests/fixtures/nvidia-smi, the MIG A100 capture); None when the element is absent."""
    remap = gpu.find("remapped_rows")
    if remap is None:
        return None
    return len(remap) > 0


def parse_smi_xml(text):
    """`nvidia-smi -q -x` -> {driver_version, cuda_version, gpus: [...]} (one dict of raw readings per GPU)."""
    return parse_smi_tree(ET.fromstring(text))


def parse_smi_text(text):
    """`nvidia-smi -q` text -> the same as parse_smi_xml; ValueError naming the line it could not read."""
    return parse_smi_tree(nvidia_text.to_tree(text))


def parse_smi_tree(root):
    """The <nvidia_smi_log> element (from XML or from text) -> {driver_version, cuda_version, gpus: [...]}."""
    out = {"driver_version": _text(root, "driver_version"), "cuda_version": _text(root, "cuda_version"),
           "attached_gpus": _int(_text(root, "attached_gpus")), "gpus": []}
    for index, gpu in enumerate(root.findall("gpu")):
        power = gpu.find("gpu_power_readings")
        if power is None:
            power = gpu.find("power_readings")
        link = gpu.find("pci/pci_gpu_link_info")
        ecc = gpu.find("ecc_errors")
        fabric = gpu.find("fabric")
        mig_devices = _mig_devices(gpu)
        entry = {
            "index": index,
            "minor_number": _int(_text(gpu, "minor_number")),
            "name": _text(gpu, "product_name"),
            "architecture": _text(gpu, "product_architecture"),
            "pci_bus_id": gpu.get("id") or _text(gpu, "pci/pci_bus_id"),
            "pci_device_id": _text(gpu, "pci/pci_device_id"),
            "serial": _text(gpu, "serial"),
            "uuid": _text(gpu, "uuid"),
            "vbios": _text(gpu, "vbios_version"),
            "persistence_mode": _text(gpu, "persistence_mode"),
            "compute_mode": _text(gpu, "compute_mode"),
            "mig_mode": _text(gpu, "mig_mode/current_mig"),
            "mig_mode_pending": _text(gpu, "mig_mode/pending_mig"),
            "mig_devices": mig_devices,
            "mig_gpu_instances": len({d["gpu_instance_id"] for d in mig_devices}),
            # "None" is a reading here (bare metal), not a missing value: VGPU / Pass-Through name a guest
            "virtualization_mode": _text(gpu, "gpu_virtualization_mode/virtualization_mode", na=NA_BUT_NONE),
            # the module's slot on an HGX baseboard or GB200 tray: gpu_module_id up to driver 560 (XML and text
            # "Module ID"), under Platform Info from 565 (text "Module Id"; XML <platformInfo>, the r575 capture)
            "module_id": _int(_text(gpu, "gpu_module_id") or _text(gpu, "platform_info/module_id")
                              or _text(gpu, "platformInfo/module_id")),
            "ecc_mode": _text(gpu, "ecc_mode/current_ecc"),
            "ecc_mode_pending": _text(gpu, "ecc_mode/pending_ecc"),
            "ecc_uncorrectable_volatile": _sum_uncorrectable(ecc.find("volatile")) if ecc is not None else None,
            "ecc_uncorrectable_aggregate": _sum_uncorrectable(ecc.find("aggregate")) if ecc is not None else None,
            "ecc_correctable_volatile": _sum_correctable(ecc.find("volatile")) if ecc is not None else None,
            "sram_threshold_exceeded": _yes(_text(gpu, "ecc_errors/aggregate/sram_threshold_exceeded")),
            "retired_pages_dbe": _int(_text(gpu, "retired_pages/double_bit_retirement/retired_count")),
            "retired_pages_sbe": _int(_text(gpu, "retired_pages/multiple_single_bit_retirement/retired_count")),
            # the text report prints only "Pending Page Blacklist", the XML both (one NVML reading)
            "retired_pages_pending": _yes(_text(gpu, "retired_pages/pending_retirement")
                                          or _text(gpu, "retired_pages/pending_blacklist")),
            "remap_reported": _remap_reported(gpu),
            "remapped_rows_correctable": _int(_text(gpu, "remapped_rows/remapped_row_corr")),
            "remapped_rows_uncorrectable": _int(_text(gpu, "remapped_rows/remapped_row_unc")),
            "remap_pending": _yes(_text(gpu, "remapped_rows/remapped_row_pending")),
            "remap_failure": _yes(_text(gpu, "remapped_rows/remapped_row_failure")),
            "reset_required": _yes(_text(gpu, "gpu_reset_status/reset_required")),
            "drain_and_reset_recommended": _yes(_text(gpu, "gpu_reset_status/drain_and_reset_recommended")),
            # what the driver asks for after an error (NVML's nvmlDeviceGetGpuRecoveryAction): "None" when the GPU
            # needs nothing; Reset, Reboot, Drain P2P, Drain and Reset; None when nvidia-smi does not print it
            "recovery_action": _text(gpu, "gpu_recovery_action", na=NA_BUT_NONE),
            "pcie_gen_max": _int(_text(link, "pcie_gen/max_link_gen")),
            "pcie_gen_current": _int(_text(link, "pcie_gen/current_link_gen")),
            "pcie_gen_device_max": _int(_text(link, "pcie_gen/max_device_link_gen")),
            "pcie_gen_host_max": _int(_text(link, "pcie_gen/max_host_link_gen")),
            "pcie_width_max": _int(_text(link, "link_widths/max_link_width")),
            "pcie_width_current": _int(_text(link, "link_widths/current_link_width")),
            "pcie_replay_counter": _int(_text(gpu, "pci/replay_counter")),
            "active_clock_reasons": _active_reasons(gpu),
            "performance_state": _text(gpu, "performance_state"),
            "memory_total_mib": _num(_text(gpu, "fb_memory_usage/total")),
            "memory_used_mib": _num(_text(gpu, "fb_memory_usage/used")),
            "utilization_gpu_pct": _num(_text(gpu, "utilization/gpu_util")),
            "temperature_c": _num(_text(gpu, "temperature/gpu_temp")),
            "memory_temperature_c": _num(_text(gpu, "temperature/memory_temp")),
            "slowdown_temperature_c": _num(_text(gpu, "temperature/gpu_temp_slow_threshold")),
            "power_draw_w": _power_draw(power),
            "power_limit_w": _num(_text(power, "current_power_limit") or _text(power, "power_limit")),
            "power_limit_enforced_w": _num(_text(power, "enforced_power_limit") or
                                           _text(power, "current_power_limit")),
            "power_limit_default_w": _num(_text(power, "default_power_limit")),
            "power_limit_max_w": _num(_text(power, "max_power_limit")),
            "module_power_draw_w": _power_draw(gpu.find("module_power_readings")),
            "sm_clock_mhz": _num(_text(gpu, "clocks/sm_clock")),
            "sm_clock_max_mhz": _num(_text(gpu, "max_clocks/sm_clock")),
            "app_clock_graphics_mhz": _num(_text(gpu, "applications_clocks/graphics_clock")),
            "app_clock_graphics_default_mhz": _num(_text(gpu, "default_applications_clocks/graphics_clock")),
            "app_clock_memory_mhz": _num(_text(gpu, "applications_clocks/mem_clock")),
            "app_clock_memory_default_mhz": _num(_text(gpu, "default_applications_clocks/mem_clock")),
            "fabric_state": _text(fabric, "state"),
            "fabric_status": _text(fabric, "status"),
            "fabric_clique_id": _text(fabric, "cliqueId"),
            "fabric_cluster_uuid": _text(fabric, "clusterUuid"),
            "processes": len(gpu.findall("processes/process_info")),
        }
        out["gpus"].append(entry)
    return out


_GPU_HEADER = re.compile(r"^GPU (\d+): (.*?)(?: \(UUID: ([^)]*)\))?\s*$")
_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def parse_nvlink_status(text):
    """`nvidia-smi nvlink -s` -> {gpu index: {"links": n, "active": m, "speeds_gbps": [...]}}.

    A GPU header followed by no Link lines (or by an NVML "all links are inActive" note) has zero active links;
    a board without NVLink prints no Link lines at all."""
    gpus = {}
    current = None
    for line in (text or "").splitlines():
        m = _GPU_HEADER.match(line.strip())
        if m:
            current = int(m.group(1))
            gpus[current] = {"links": 0, "active": 0, "speeds_gbps": [], "note": None}
            continue
        if current is None:
            continue
        m = _LINK.match(line)
        if m:
            value = m.group(2).strip()
            gpus[current]["links"] += 1
            speed = re.match(r"^(\d+(?:\.\d+)?) GB/s", value)
            if speed:
                gpus[current]["active"] += 1
                gpus[current]["speeds_gbps"].append(float(speed.group(1)))
        elif line.strip().startswith("NVML:") or "not supported" in line.lower():
            gpus[current]["note"] = line.strip()
    for g in gpus.values():
        g["speeds_gbps"] = sorted(set(g["speeds_gbps"]))
    return gpus


def parse_nvlink_errors(text):
    """`nvidia-smi nvlink -e` -> {gpu index: {"replay": n, "recovery": n, "crc": n, ...}} summed over links."""
    gpus = {}
    current = None
    for line in (text or "").splitlines():
        m = _GPU_HEADER.match(line.strip())
        if m:
            current = int(m.group(1))
            gpus[current] = {}
            continue
        if current is None:
            continue
        m = re.match(r"^\s*Link \d+: (.+?): (\d+)\s*$", line)
        if m:
            key = re.sub(r"[^a-z0-9]+", "_", m.group(1).lower()).strip("_")
            key = key.replace("_errors", "").replace("_error", "")
            gpus[current][key] = gpus[current].get(key, 0) + int(m.group(2))
    return gpus


def parse_driver_version_file(text):
    """/proc/driver/nvidia/version -> {"version", "open_kernel_module"}."""
    if not text:
        return None
    first = text.splitlines()[0]
    return {"version": version_in(first, r"\s(\d+\.\d+(?:\.\d+)?)\s"),
            "open_kernel_module": "Open Kernel Module" in first, "line": first.strip()[:200]}


def parse_fabricmanager_version(text):
    """`nv-fabricmanager --version`: 'Fabric Manager version is : 610.57.04'."""
    m = re.search(r"version is\s*:\s*(\S+)", text or "")
    return m.group(1) if m else version_in(text)


def _first_line(res):
    text = (res.stdout + res.stderr).strip()
    return text.splitlines()[0][:300] if text else ("timed out" if res.timed_out else "no output")


def _text_report(c, xml_out):
    """`nvidia-smi -q`, read where the XML was not: the same NVML readings in another form, so a host whose XML
    does not parse is still graded. Returns the readings (format "text", the XML's error kept as xml_error), or
    xml_out with the text's own error added."""
    res = c.cmd("nvidia_smi_text", ["nvidia-smi", "-q"], timeout=30)
    if res.rc != 0 or res.timed_out:
        return dict(xml_out, error="%s; nvidia-smi -q: %s" % (xml_out["error"], _first_line(res)))
    c.save_raw("nvidia-smi-q.txt", res.stdout)
    try:
        parsed = parse_smi_text(res.stdout)
    except ValueError as exc:
        c.mark("nvidia_smi_text", "error", str(exc))
        return dict(xml_out, error="%s; %s" % (xml_out["error"], exc))
    return dict(parsed, tool=True, rc=0, format="text", xml_rc=xml_out["rc"], xml_error=xml_out["error"])


def collect_topology(c):
    """`nvidia-smi topo -m` as audit facts (probes/common/gpu_topo.py); {"error": …} when it failed or could not
    be read."""
    res = c.cmd("nvidia_topo", gpu_topo.ARGV, timeout=20)
    if res.rc != 0 or res.timed_out:
        return {"error": "%s: %s" % (gpu_topo.TOOL, _first_line(res))}
    c.save_raw("nvidia-smi-topo-m.txt", res.stdout)
    topo = gpu_topo.parse(res.stdout)
    if topo["error"]:
        c.mark("nvidia_topo", "error", topo["error"])
    return gpu_topo.facts(topo)


def collect_smi(c):
    """nvidia-smi -q -x (its text report where the XML fails), then, when it found GPUs, nvlink status and errors
    and the topology matrix."""
    res = c.cmd("nvidia_smi", ["nvidia-smi", "-q", "-x"], timeout=30)
    if res.missing:
        return {"tool": False}
    out = {"tool": True, "rc": res.rc, "format": "xml"}
    if res.rc != 0 or res.timed_out:
        out["error"] = _first_line(res)
    else:
        c.save_raw("nvidia-smi-q.xml", res.stdout)
        try:
            out.update(parse_smi_xml(res.stdout))
        except ET.ParseError as exc:
            out["error"] = "nvidia-smi -q -x: unreadable XML: %s" % exc
            c.mark("nvidia_smi", "error", out["error"])
    if out.get("error") and not res.timed_out:  # a hung nvidia-smi would hang again
        out = _text_report(c, out)
    if out.get("gpus"):
        st = c.cmd("nvlink_status", ["nvidia-smi", "nvlink", "-s"], timeout=20)
        if st.rc == 0:
            out["nvlink"] = {str(k): v for k, v in parse_nvlink_status(st.stdout).items()}
        er = c.cmd("nvlink_errors", ["nvidia-smi", "nvlink", "-e"], timeout=20)
        if er.rc == 0:
            out["nvlink_errors"] = {str(k): v for k, v in parse_nvlink_errors(er.stdout).items()}
        out["topology"] = collect_topology(c)
    return out


def collect_driver(c):
    """Kernel module, its version and flavour, GPUDirect helpers, Fabric Manager and IMEX (files and versions)."""
    modules = set(listdir("/sys/module"))
    version = parse_driver_version_file(read("/proc/driver/nvidia/version"))
    out = {
        "module_loaded": "nvidia" in modules,
        "modules": sorted(m for m in modules if m.startswith(("nvidia", "gdrdrv", "nv_peer_mem"))),
        "proc_version": version,
        "peermem_loaded": "nvidia_peermem" in modules or "nv_peer_mem" in modules,
        "gdrdrv_loaded": "gdrdrv" in modules,
        "gdrdrv_device": os.path.exists("/dev/gdrdrv"),
        "nvswitch_devices": len([d for d in listdir("/dev") if re.match(r"^nvidia-nvswitch\d+$", d)]),
        "imex_config": os.path.exists("/etc/nvidia-imex/nodes_config.cfg"),
        "imex_channels": os.path.isdir("/dev/nvidia-caps-imex-channels"),
        "persistenced_socket": os.path.exists("/var/run/nvidia-persistenced/socket"),
    }
    c.mark("nvidia_driver", "ok")
    fm = c.cmd("fabricmanager_version", ["nv-fabricmanager", "--version"], timeout=5)
    out["fabricmanager_version"] = parse_fabricmanager_version(fm.stdout) if fm.rc == 0 else None
    imex = c.cmd("imex_version", ["nvidia-imex", "--version"], timeout=5)
    out["imex_version"] = version_in(imex.stdout) if imex.rc == 0 else None
    out["fabricmanager_config"] = read_strip("/usr/share/nvidia/nvswitch/fabricmanager.cfg") is not None
    return out
