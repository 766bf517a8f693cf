"""What accelerators a node has, read through the vendor tools (nvidia-smi, amd-smi).

"nvidia-smi missing" or "driver not loaded" is data, not a failure: the caller records it as a fact.
Parsers are pure functions so recorded outputs of real nodes drive the unit tests.
"""

import json

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


def parse_amd_smi_list(text):
    """`amd-smi list --json`: one object per GPU (gpu index, bdf, uuid)."""
    data = json.loads(text)
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
        res = run_cmd(["amd-smi", "list", "--json"], timeout=timeout)
        if not res.missing:
            facts["gpu_tool"] = "amd-smi"
            if res.rc == 0:
                gpus = parse_amd_smi_list(res.stdout)
                backend = "rocm" if gpus else "cpu"
            else:
                facts["gpu_error"] = "amd-smi exit %s: %s" % (res.rc, (res.stderr or res.stdout).strip()[:200])
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
