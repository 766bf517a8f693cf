"""`nvidia-smi -q` text, the fallback where `nvidia-smi -q -x` fails: turned into the element tree of the XML
layout, so probes.audit.nvidia reads both with one set of field paths.

The text is a tree by indentation (4 spaces a level): "Label : value" is a leaf, a label alone opens a section.
A line indented under a leaf belongs to the leaf's section, as the XML has it: the reasons nested under "HW
Slowdown" are clocks_event_reasons' own, a process's Type and Name follow its Process ID.
Labels become the XML tag of the same field (TAGS, per enclosing section where one label means different fields,
"Current" under MIG Mode or ECC Mode); other labels become their lower-case slug, kept but not read. Real captures
(tests/fixtures/nvidia-smi: H100 driver 565, RTX 4090 driver 535, GTX 1650 driver 575) drive the tests.
"""

import re
import xml.etree.ElementTree as ET

TOOL = "nvidia-smi -q"
_KEY_VALUE = re.compile(r"^(\s*)(\S.*?)\s+:(?: (.*))?$")
_GPU = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
_MIG_DEVICE = re.compile(r"^MIG (\d+)$")
_BANNER = "==============NVSMI LOG=============="

# (enclosing tag, label) -> tag path, where the XML's tag is not the label's slug ("Bus Id" -> pci_bus_id);
# (None, label) applies in any section. A path with "/" makes the XML's nesting where the text is flatter
# (Retired Pages counts, a process's PID). Labels left out become their slug, which is the XML's tag for most
# ("Persistence Mode" -> persistence_mode, "MIG Mode" -> mig_mode, "Module Id" under Platform Info -> module_id).
TAGS = {
    (None, "Serial Number"): "serial", (None, "GPU UUID"): "uuid",
    ("mig_mode", "Current"): "current_mig", ("mig_mode", "Pending"): "pending_mig",
    ("ecc_mode", "Current"): "current_ecc", ("ecc_mode", "Pending"): "pending_ecc",
    # driver 535 prints "Module ID" at the GPU's level (XML gpu_module_id); 565 moved it under Platform Info
    ("gpu", "Module ID"): "gpu_module_id",
    ("pci", "Bus Id"): "pci_bus_id", ("pci", "Device Id"): "pci_device_id",
    ("pci", "Replays Since Reset"): "replay_counter", ("pci", "GPU Link Info"): "pci_gpu_link_info",
    ("pci_gpu_link_info", "PCIe Generation"): "pcie_gen", ("pci_gpu_link_info", "Link Width"): "link_widths",
    ("pcie_gen", "Max"): "max_link_gen", ("pcie_gen", "Current"): "current_link_gen",
    ("pcie_gen", "Device Max"): "max_device_link_gen", ("pcie_gen", "Host Max"): "max_host_link_gen",
    ("link_widths", "Max"): "max_link_width", ("link_widths", "Current"): "current_link_width",
    ("utilization", "Gpu"): "gpu_util", ("utilization", "GPU"): "gpu_util",  # "GPU" from driver 575
    # driver 575 prints no "Power Draw" but these two (XML instant_power_draw, average_power_draw)
    (None, "Instantaneous Power Draw"): "instant_power_draw",
    ("retired_pages", "Single Bit ECC"): "multiple_single_bit_retirement/retired_count",
    ("retired_pages", "Double Bit ECC"): "double_bit_retirement/retired_count",
    ("retired_pages", "Pending Page Blacklist"): "pending_blacklist",
    ("remapped_rows", "Correctable Error"): "remapped_row_corr",
    ("remapped_rows", "Uncorrectable Error"): "remapped_row_unc", ("remapped_rows", "Pending"): "remapped_row_pending",
    ("remapped_rows", "Remapping Failure Occurred"): "remapped_row_failure",
    ("temperature", "GPU Current Temp"): "gpu_temp", ("temperature", "GPU Slowdown Temp"): "gpu_temp_slow_threshold",
    ("temperature", "Memory Current Temp"): "memory_temp",
    ("fabric", "CliqueId"): "cliqueId", ("fabric", "ClusterUUID"): "clusterUuid",
    ("processes", "Process ID"): "process_info/pid",
}
for _section in ("clocks", "max_clocks", "applications_clocks", "default_applications_clocks"):
    TAGS.update({(_section, "Graphics"): "graphics_clock", (_section, "SM"): "sm_clock",
                 (_section, "Memory"): "mem_clock", (_section, "Video"): "video_clock"})
_REASON_SECTIONS = ("clocks_event_reasons", "clocks_throttle_reasons")
_REASONS = {"Idle": "gpu_idle", "Display Clock Setting": "display_clocks_setting"}


def _slug_of(label):
    return re.sub(r"[^a-z0-9]+", "_", label.lower()).strip("_") or "_"


def _element(parent, label):
    """The element for `label` under parent (a new one per call: repeated labels stay repeated)."""
    if parent.tag in _REASON_SECTIONS:
        # a reason's tag is the section's name without its plural s, then the reason: clocks_event_reason_sync_boost
        path = "%s_%s" % (parent.tag[:-1], _REASONS.get(label) or _slug_of(label))
    else:
        path = TAGS.get((parent.tag, label)) or TAGS.get((None, label)) or _slug_of(label)
    for tag in path.split("/"):
        parent = ET.SubElement(parent, tag)
    return parent


def to_tree(text):
    """`nvidia-smi -q` -> the <nvidia_smi_log> element of the XML layout; ValueError naming the tool and the first
    line that could not be read when the text is not that report."""
    root = ET.Element("nvidia_smi_log")
    stack = [(-1, root)]  # (indent of the section's own line, element); only sections open a level
    gpus = 0
    for number, raw in enumerate((text or "").splitlines(), 1):
        line = raw.rstrip()
        if not line.strip() or line.strip() == _BANNER:
            continue
        gpu = _GPU.match(line)
        if gpu:
            gpus += 1
            stack = [(-1, root), (0, ET.SubElement(root, "gpu", id=gpu.group(1)))]
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        if indent and len(stack) == 1:  # indented, but no GPU section has begun
            raise ValueError("%s: cannot read line %d: %r" % (TOOL, number, line.strip()[:200]))
        parent = stack[-1][1]
        m = _KEY_VALUE.match(line)
        if m:
            node = _element(parent, m.group(2))
            node.text = (m.group(3) or "").strip()
            continue
        label = line.strip()
        mig = _MIG_DEVICE.match(label)
        if mig and parent.tag == "mig_devices":
            node = ET.SubElement(parent, "mig_device")
            ET.SubElement(node, "index").text = mig.group(1)
        elif indent == 0 or ":" in label:
            raise ValueError("%s: cannot read line %d: %r" % (TOOL, number, label[:200]))
        else:
            node = _element(parent, label)
        stack.append((indent, node))
    if not gpus:
        first = next((line.strip() for line in (text or "").splitlines() if line.strip()), "")
        raise ValueError("%s: no GPU section (GPU <bus id>) in the output; first line: %r" % (TOOL, first[:200]))
    return root
