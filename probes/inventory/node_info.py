"""node_info: the inventory of one node (host, CPU, memory, OS, kernel, Python, torch, GPUs).

Facts are strings compared across hosts by the controller's consistency view; counts and sizes are results.
"""

import os
import platform
import re
import socket

from probes.common import device
from probes.common.readers import parse_key_values, read_text
from probes.params import Param, Params

PARAMS = Params(torch=Param(bool, True, "import torch to record its version and the devices it sees"))


def parse_cpuinfo(text):
    """Model name, logical CPUs, physical cores and sockets from /proc/cpuinfo (x86 and Arm forms)."""
    logical = 0
    model = None
    sockets = set()
    cores = set()
    physical_id = "0"
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        key, value = (part.strip() for part in line.split(":", 1))
        if key == "processor":
            logical += 1
        elif key in ("model name", "Model", "cpu model") and model is None:
            model = value
        elif key == "physical id":
            physical_id = value
            sockets.add(value)
        elif key == "core id":
            cores.add((physical_id, value))
    return {
        "model": model,
        "logical": logical,
        "physical_cores": len(cores) or logical,
        "sockets": len(sockets) or 1,
    }


def parse_meminfo(text):
    """Bytes of each /proc/meminfo field (values are kB there)."""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"^(\w+(?:\(\w+\))?):\s+(\d+)(?:\s+kB)?$", line.strip())
        if m:
            factor = 1024 if line.strip().endswith("kB") else 1
            out[m.group(1)] = int(m.group(2)) * factor
    return out


def numa_nodes(sys_root="/sys"):
    path = os.path.join(sys_root, "devices/system/node")
    try:
        return len([d for d in os.listdir(path) if re.match(r"^node\d+$", d)])
    except OSError:
        return None


def torch_facts():
    """Torch version and what it sees, without failing when torch is absent."""
    try:
        import torch  # noqa: PLC0415 - optional on nodes
    except Exception as exc:  # noqa: BLE001 - a broken install is a fact too
        return {"torch": None, "torch_error": "%s: %s" % (type(exc).__name__, exc)}
    facts = {"torch": torch.__version__, "torch_cuda": getattr(torch.version, "cuda", None),
             "torch_hip": getattr(torch.version, "hip", None)}
    try:
        facts["torch_devices"] = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception as exc:  # noqa: BLE001
        facts["torch_devices"] = 0
        facts["torch_error"] = str(exc)
    return facts


def run(art, params, out_dir):
    cpu = parse_cpuinfo(read_text("/proc/cpuinfo"))
    mem = parse_meminfo(read_text("/proc/meminfo"))
    osr = parse_key_values(read_text("/etc/os-release", ""))
    dev, gpus, gpu_facts = device.describe()
    tfacts = torch_facts() if params["torch"] else {"torch": None}
    dev["torch"] = tfacts.get("torch")
    art.device = dev
    uname = platform.uname()
    art.facts.update({
        "hostname": socket.gethostname(),
        "fqdn": socket.getfqdn(),
        "kernel": uname.release,
        "arch": uname.machine,
        "os": osr.get("PRETTY_NAME"),
        "os_id": osr.get("ID"),
        "os_version": osr.get("VERSION_ID"),
        "cpu_model": cpu["model"],
        "boot_id": (read_text("/proc/sys/kernel/random/boot_id") or "").strip() or None,
        "python": platform.python_version(),
        "python_executable": os.sys.executable,
        "gpu_model": dev["model"],
        "gpu_driver": dev["driver"],
        **gpu_facts,
        **tfacts,
    })
    art.add("cpu_logical_count", cpu["logical"], "count")
    art.add("cpu_physical_cores", cpu["physical_cores"], "count")
    art.add("cpu_sockets", cpu["sockets"], "count")
    if "MemTotal" in mem:
        art.add("memory_total_bytes", mem["MemTotal"], "B")
    nodes = numa_nodes()
    if nodes is not None:
        art.add("numa_nodes", nodes, "count")
    uptime = (read_text("/proc/uptime") or "").split()
    if uptime:
        art.add("uptime_s", float(uptime[0]), "s")
    art.add("gpu_count", len(gpus), "count")
    for gpu in gpus:
        if gpu.get("memory_total_bytes") is not None:
            art.add("gpu_memory_total_bytes", gpu["memory_total_bytes"], "B",
                    gpu=gpu["index"], model=gpu.get("model"), pci_bus_id=gpu.get("pci_bus_id"), uuid=gpu.get("uuid"))
        if gpu.get("power_limit_w") is not None:
            art.add("gpu_power_limit_w", gpu["power_limit_w"], "W", gpu=gpu["index"])
