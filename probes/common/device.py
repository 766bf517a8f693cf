"""What accelerators a node has, read through the vendor tools (nvidia-smi, amd-smi).

"nvidia-smi missing" or "driver not loaded" is data, not a failure: the caller records it as a fact.
Parsers are pure functions so recorded outputs of real nodes drive the unit tests.

amd-smi's text output (where --json is refused or unreadable) is an indented tree, `GPU: 0` then `    ASIC:` then
`        MARKET_NAME: …`; `amd_smi_tree` turns it into the list its --json prints, keys in lower case
(`MAX_PCIE_SPEED: 32 GT/s` -> "max_pcie_speed": "32 GT/s"). Other devices (`CPU: 0`, `NIC: 0`) and the elisions
of trimmed outputs (`...`, `---- snipped ----`) are passed over; a text without a GPU raises ValueError naming the
tool and the first line that could not be read. Real captures: tests/fixtures/amd-smi/README.md.
"""

import json
import re

from probes.common.command import run_cmd

NVIDIA_QUERY_FIELDS = (
    "index", "name", "uuid", "pci.bus_id", "serial", "memory.total", "driver_version", "vbios_version",
    "persistence_mode", "mig.mode.current", "power.limit",
)


def _na(value):
    """nvidia-smi prints [N/A], [Not Supported] or N/A where a field does not apply."""
    value = value.strip()
    return None if value in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]") else value


def _number(value):
    value = _na(value)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def parse_nvidia_query(text):
    """`nvidia-smi --query-gpu=<NVIDIA_QUERY_FIELDS> --format=csv,noheader,nounits` into one dict per GPU."""
    gpus = []
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(NVIDIA_QUERY_FIELDS):
            raise ValueError("nvidia-smi line has %d fields, expected %d: %r"
                             % (len(cells), len(NVIDIA_QUERY_FIELDS), line))
        row = dict(zip(NVIDIA_QUERY_FIELDS, cells))
        memory_mib = _number(row["memory.total"])
        power = _number(row["power.limit"])
        gpus.append({
            "index": int(row["index"]),
            "model": row["name"],
            "uuid": _na(row["uuid"]),
            "pci_bus_id": _na(row["pci.bus_id"]),
            "serial": _na(row["serial"]),
            "memory_total_bytes": int(memory_mib * 1024 * 1024) if memory_mib is not None else None,
            "driver": _na(row["driver_version"]),
            "vbios": _na(row["vbios_version"]),
            "persistence_mode": _na(row["persistence_mode"]),
            "mig_mode": _na(row["mig.mode.current"]),
            "power_limit_w": power,
        })
    return gpus


_TREE_LINE = re.compile(r"^(\s*)([^:]+?):[ \t]*(.*?)\s*$")
_TREE_DEVICE = re.compile(r"^(GPU|CPU|CORE|NIC|SWITCH|BRCM_NIC|BRCM_SWITCH):\s*(\d+)\s*$", re.I)


def amd_smi_tree(text, tool="amd-smi"):
    """amd-smi text (`static`, `metric`, `list`) -> [{"gpu": 0, "asic": {...}, ...}], like its --json lists."""
    gpus, stack, unread = [], [], []
    for raw in (text or "").splitlines():
        if not raw.strip():
            continue
        device = _TREE_DEVICE.match(raw.strip())
        if device:
            # a device heading: only GPUs are kept; a CPU's tree is passed over until the next heading
            indent = len(raw) - len(raw.lstrip())
            stack = [(indent, {"gpu": int(device.group(2))})] if device.group(1).upper() == "GPU" else []
            if stack:
                gpus.append(stack[0][1])
            continue
        m = _TREE_LINE.match(raw.expandtabs())
        if not m or not stack:
            unread.append(raw.strip())
            continue
        indent, key, value = len(m.group(1)), m.group(2).strip().lower(), m.group(3)
        while len(stack) > 1 and indent <= stack[-1][0]:
            stack.pop()
        if indent <= stack[0][0]:
            unread.append(raw.strip())
            continue
        parent = stack[-1][1]
        if value:
            parent[key] = value
        else:
            parent[key] = {}
            stack.append((indent, parent[key]))
    if not gpus:
        first = unread[0] if unread else ""
        raise ValueError("%s: cannot read %r" % (tool, first[:200]) if first else "%s: no output" % tool)
    return gpus


def parse_amd_smi_list(text):
    """`amd-smi list` (--json or text): one object per GPU (gpu index, bdf, uuid)."""
    body = (text or "").lstrip()
    if body[:1] in ("[", "{"):
        data = json.loads(body)
    else:
        data = amd_smi_tree(text, "amd-smi list")
    if isinstance(data, dict):  # some releases wrap the list
        data = data.get("gpu_list") or data.get("gpus") or []
    gpus = []
    for entry in data:
        gpus.append({
            "index": int(entry.get("gpu", len(gpus))),
            "model": None,
            "uuid": entry.get("uuid"),
            "pci_bus_id": entry.get("bdf"),
            "memory_total_bytes": None,
            "driver": None,
        })
    return gpus


def nvidia_smi_error(result):
    """One line saying why nvidia-smi gave no GPU list, or None when it worked."""
    if result.missing:
        return None
    if result.timed_out:
        return "nvidia-smi timed out"
    if result.rc != 0:
        # Exit 9: "couldn't communicate with the NVIDIA driver" (driver not loaded); 6: no GPU found.
        text = (result.stdout + result.stderr).strip().splitlines()
        return "nvidia-smi exit %s: %s" % (result.rc, text[0] if text else "no output")
    return None


def _amd_smi_list(timeout):
    """(GPUs, why none, amd-smi missing): `amd-smi list --json`, then its text where --json is refused or unreadable."""
    why = None
    for argv in (["amd-smi", "list", "--json"], ["amd-smi", "list"]):
        res = run_cmd(argv, timeout=timeout)
        if res.missing:
            return [], None, True
        if res.timed_out:
            return [], "%s timed out" % " ".join(argv), False
        if res.rc != 0:
            why = "amd-smi exit %s: %s" % (res.rc, (res.stderr or res.stdout).strip()[:200])
            continue
        try:
            return parse_amd_smi_list(res.stdout), None, False
        except (ValueError, AttributeError, TypeError) as exc:
            why = "amd-smi list: %s" % exc if not str(exc).startswith("amd-smi") else str(exc)
    return [], why, False


def describe(timeout=15.0):
    """Returns (device block for the artifact, list of GPUs, facts about the tools)."""
    facts = {"gpu_tool": "none", "gpu_error": None}
    gpus = []
    backend = "cpu"
    res = run_cmd(["nvidia-smi", "--query-gpu=" + ",".join(NVIDIA_QUERY_FIELDS), "--format=csv,noheader,nounits"],
                  timeout=timeout)
    if not res.missing:
        facts["gpu_tool"] = "nvidia-smi"
        facts["gpu_error"] = nvidia_smi_error(res)
        if facts["gpu_error"] is None:
            gpus = parse_nvidia_query(res.stdout)
            backend = "cuda" if gpus else "cpu"
    else:
        gpus, facts["gpu_error"], missing = _amd_smi_list(timeout)
        if not missing:
            facts["gpu_tool"] = "amd-smi"
            backend = "rocm" if gpus else "cpu"
    models = sorted({g["model"] for g in gpus if g.get("model")})
    drivers = sorted({g["driver"] for g in gpus if g.get("driver")})
    device = {
        "backend": backend,
        "model": models[0] if len(models) == 1 else (", ".join(models) or None),
        "count": len(gpus),
        "driver": drivers[0] if len(drivers) == 1 else (", ".join(drivers) or None),
        "torch": None,
    }
    return device, gpus, facts


# `nvidia-smi -L`: "GPU 0: NVIDIA A100 ... (UUID: GPU-...)", and under a GPU in MIG mode its devices
# ("  MIG 1g.5gb     Device  0: (UUID: MIG-...)")
SMI_GPU_LINE = re.compile(r"^\s*GPU \d+: ")
SMI_MIG_LINE = re.compile(r"^\s*MIG \S+\s+Device\s+\d+: ")


def count_smi_listed(lines):
    """Devices in `nvidia-smi -L` lines: a GPU line ("GPU 0: NVIDIA A100 ... (UUID: GPU-...)") is one device, unless
    MIG device lines follow it ("  MIG 1g.5gb     Device  0: (UUID: MIG-...)"): in a container given MIG devices
    nvidia-smi lists their parent GPU and then each MIG device the container was given, and those are its devices."""
    total, migs, gpu_open = 0, 0, False
    for line in lines:
        if SMI_GPU_LINE.match(line):
            total += migs or (1 if gpu_open else 0)
            migs, gpu_open = 0, True
        elif SMI_MIG_LINE.match(line):
            migs += 1
    return total + (migs or (1 if gpu_open else 0))


def sysfs_bdf(bus_id):
    """A GPU's PCI address as nvidia-smi ('00000000:3B:00.0') or amd-smi ('0000:3b:00.0') print it -> the name under
    /sys/bus/pci/devices ('0000:3b:00.0'), or None: the one reading of a PCI address (fault injection's sysfs paths
    and kernel-log addresses, the compute probes' matching of torch devices to the node's GPUs)."""
    m = re.match(r"^(?:([0-9A-Fa-f]+):)?([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.?([0-7])?$", (bus_id or "").strip())
    if not m:
        return None
    return ("%s:%s:%s.%s" % ((m.group(1) or "0")[-4:].rjust(4, "0"), m.group(2), m.group(3),
                             m.group(4) or "0")).lower()
