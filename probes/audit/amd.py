"""AMD Instinct GPUs for the audit: `amd-smi static --json` and `amd-smi metric --json` (ROCm 6 prints a list,
ROCm 7 wraps it in {"gpu_data": [...]}), with `rocm-smi --showproductname --json` as the fallback for the
inventory. Values of the form {"value": 32, "unit": "GT/s"} and "N/A" are both read."""

import json

from probes.audit.collect import listdir


def _gpu_list(data):
    if isinstance(data, dict):
        data = data.get("gpu_data") or data.get("gpus") or []
    return [g for g in data if isinstance(g, dict)]


def _val(value):
    """{"value": 750, "unit": "W"} -> 750.0; "N/A" -> None; "32 GT/s" -> 32.0."""
    if isinstance(value, dict):
        value = value.get("value")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip().split()
    if not text or text[0] in ("N/A", "NA"):
        return None
    try:
        return float(text[0])
    except ValueError:
        return None


def _str(value):
    if value is None:
        return None
    value = str(value).strip()
    return None if value in ("", "N/A") else value


def _mib(size):
    """vram size {"value": 196592, "unit": "MB"} -> MiB (amd-smi's MB are MiB); bytes when unit is B."""
    if not isinstance(size, dict):
        return _val(size)
    value = _val(size)
    if value is None:
        return None
    unit = str(size.get("unit", "MB")).upper()
    return value / (1024 * 1024) if unit == "B" else value / 1024 if unit == "KB" else value


def parse_static(text):
    """`amd-smi static --json` -> one dict per GPU (model, bus id, driver, vbios, memory, PCIe maximum)."""
    gpus = []
    for entry in _gpu_list(json.loads(text)):
        asic = entry.get("asic") or {}
        bus = entry.get("bus") or {}
        driver = entry.get("driver") or {}
        vbios = entry.get("vbios") or entry.get("ifwi") or {}
        vram = entry.get("vram") or {}
        limit = entry.get("limit") or {}
        gpus.append({
            "index": int(entry.get("gpu", len(gpus))),
            "name": _str(asic.get("market_name")),
            "device_id": _str(asic.get("device_id")),
            "serial": _str(asic.get("asic_serial")),
            "pci_bus_id": _str(bus.get("bdf")),
            "pcie_width_max": _val(bus.get("max_pcie_width")),
            "pcie_speed_max_gts": _val(bus.get("max_pcie_speed")),
            "pcie_interface": _str(bus.get("pcie_interface_version")),
            "driver": _str(driver.get("version")),
            "driver_name": _str(driver.get("name")),
            "vbios": _str(vbios.get("version") or vbios.get("part_number")),
            "memory_total_mib": _mib(vram.get("size")),
            "power_limit_w": _val(limit.get("socket_power") or limit.get("power_cap") or limit.get("max_power")),
        })
    return gpus


def parse_metric(text):
    """`amd-smi metric --json` -> {gpu index: readings} (power, temperatures, PCIe link, ECC totals)."""
    out = {}
    for entry in _gpu_list(json.loads(text)):
        power = entry.get("power") or {}
        temp = entry.get("temperature") or {}
        pcie = entry.get("pcie") or {}
        ecc = entry.get("ecc") or {}
        out[int(entry.get("gpu", len(out)))] = {
            "power_draw_w": _val(power.get("socket_power")) if power.get("socket_power") not in (None, "N/A")
            else _val(power.get("average_socket_power")),
            "temperature_c": _val(temp.get("hotspot")) if _val(temp.get("hotspot")) is not None
            else _val(temp.get("edge")),
            "memory_temperature_c": _val(temp.get("mem")),
            "pcie_width_current": _val(pcie.get("width")),
            "pcie_speed_current_gts": _val(pcie.get("speed")),
            "pcie_replay_counter": _val(pcie.get("replay_count")),
            "ecc_uncorrectable_aggregate": _val(ecc.get("total_uncorrectable_count")),
            "ecc_correctable_aggregate": _val(ecc.get("total_correctable_count")),
            "ecc_deferred": _val(ecc.get("total_deferred_count")),
        }
    return out


def parse_rocm_smi_product(text):
    """`rocm-smi --showproductname --json` -> one dict per card (the fallback inventory)."""
    data = json.loads(text)
    gpus = []
    for key in sorted((k for k in data if k.startswith("card")), key=lambda k: int(k[4:] or 0)):
        card = data[key]
        gpus.append({"index": int(key[4:] or 0), "name": _str(card.get("Card Series") or card.get("Card series")),
                     "device_id": _str(card.get("Card Model") or card.get("Card model")),
                     "pci_bus_id": None, "driver": None})
    return gpus


def collect(c):
    res = c.cmd("amd_smi", ["amd-smi", "static", "--json"], timeout=30)
    out = {"tool": None, "gpus": [], "amdgpu_loaded": "amdgpu" in listdir("/sys/module")}
    if not res.missing:
        out["tool"] = "amd-smi"
        if res.rc == 0:
            c.save_raw("amd-smi-static.txt", res.stdout)
            try:
                out["gpus"] = parse_static(res.stdout)
            except ValueError as exc:
                c.mark("amd_smi", "error", "unreadable JSON: %s" % exc)
            met = c.cmd("amd_smi_metric", ["amd-smi", "metric", "--json"], timeout=30)
            if met.rc == 0:
                c.save_raw("amd-smi-metric.txt", met.stdout)
                try:
                    readings = parse_metric(met.stdout)
                except ValueError:
                    readings = {}
                for gpu in out["gpus"]:
                    gpu.update({k: v for k, v in readings.get(gpu["index"], {}).items() if v is not None})
        else:
            out["error"] = (res.stderr or res.stdout).strip()[:300]
        return out
    res = c.cmd("rocm_smi", ["rocm-smi", "--showproductname", "--json"], timeout=30)
    if not res.missing:
        out["tool"] = "rocm-smi"
        c.mark("amd_smi", "missing", "amd-smi not found (rocm-smi used for the inventory)")
        if res.rc == 0:
            try:
                out["gpus"] = parse_rocm_smi_product(res.stdout)
            except ValueError as exc:
                c.mark("rocm_smi", "error", "unreadable JSON: %s" % exc)
    else:
        c.mark("amd_smi", "missing", "amd-smi and rocm-smi not found")
    return out
