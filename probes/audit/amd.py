"""AMD Instinct GPUs for the audit: `amd-smi static` and `amd-smi metric` (ROCm 6 prints a list, ROCm 7 wraps it in
{"gpu_data": [...]}), with `rocm-smi` as the fallback where amd-smi is not installed. Each tool is asked for JSON
first; where that is refused or unreadable, its text is read into the same structure (amd-smi's indented tree by
probes/common/device.py amd_smi_tree; rocm-smi's `GPU[0] : VBIOS version: …` lines by rocm_smi_cards below) and the
same fields are taken from it. Real captures: tests/fixtures/amd-smi/, tests/fixtures/rocm-smi/. Values of the form
{"value": 32, "unit": "GT/s"}, "32 GT/s" and "N/A" are all read."""

import json
import re

from probes.audit.collect import listdir
from probes.common.device import amd_smi_tree

# what the rocm-smi fallback asks for: the fields the audit grades (product, ids, firmware, driver, bus, serial,
# temperatures, power and its cap, VRAM, PCIe replays)
ROCM_SMI_ARGS = ["--showproductname", "--showid", "--showvbios", "--showdriverversion", "--showbus", "--showserial",
                 "--showtemp", "--showpower", "--showmaxpower", "--showmeminfo", "vram", "--showreplaycount"]


def _gpu_list(data):
    if isinstance(data, dict):
        data = data.get("gpu_data") or data.get("gpus") or []
    return [g for g in data if isinstance(g, dict)]


def _json_or_text(text, tool):
    """amd-smi output, JSON or text -> the list of per-GPU dicts; ValueError names the line that could not be read."""
    body = (text or "").lstrip()
    if body[:1] in ("[", "{"):
        try:
            return _gpu_list(json.loads(body))
        except ValueError as exc:
            lines = body.splitlines()
            line = lines[exc.lineno - 1].strip() if 0 < getattr(exc, "lineno", 0) <= len(lines) else body[:80]
            raise ValueError("%s: cannot read %r (%s)" % (tool, line[:200], exc.msg)) from None
    return amd_smi_tree(text, tool)


def _sec(entry, key):
    """A section of one GPU's entry; "N/A" (a section the tool could not read) is an empty one."""
    value = entry.get(key)
    return value if isinstance(value, dict) else {}


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


def _power_limit(limit):
    """The enforced socket power cap: LIMIT.SOCKET_POWER (amd-smi 6.x), LIMIT.PPT0.SOCKET_POWER_LIMIT (7.x, where an
    APU without a separate cap reports 0 W), else the maximum."""
    ppt0 = _sec(limit, "ppt0")
    for value in (limit.get("socket_power"), limit.get("power_cap"), ppt0.get("socket_power_limit")):
        if _val(value):
            return _val(value)
    return _val(limit.get("max_power") or ppt0.get("max_power_limit"))


def parse_static(text):
    """`amd-smi static` (JSON or text) -> one dict per GPU (model, bus id, driver, vbios, memory, PCIe maximum)."""
    gpus = []
    for entry in _json_or_text(text, "amd-smi static"):
        asic, bus, driver, vram = _sec(entry, "asic"), _sec(entry, "bus"), _sec(entry, "driver"), _sec(entry, "vram")
        vbios = _sec(entry, "vbios") or _sec(entry, "ifwi")
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
            "power_limit_w": _power_limit(_sec(entry, "limit")),
        })
    return gpus


def parse_metric(text):
    """`amd-smi metric` (JSON or text) -> {gpu index: readings} (power, temperatures, PCIe link, ECC totals, VRAM)."""
    out = {}
    for entry in _json_or_text(text, "amd-smi metric"):
        power, temp = _sec(entry, "power"), _sec(entry, "temperature")
        pcie, ecc = _sec(entry, "pcie"), _sec(entry, "ecc")
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
            "memory_used_mib": _mib(_sec(entry, "mem_usage").get("used_vram")),
        }
    return out


_ROCM_GPU = re.compile(r"^GPU\[(\d+)\]\s*:\s*(.*)$")
_ROCM_SYSTEM = re.compile(r"^([A-Za-z][\w .()/-]*?)\s*:\s*(\S.*)$")


def rocm_smi_cards(text):
    """`rocm-smi --show…` text -> {"card0": {field: value}, …, "system": {field: value}}, like `rocm-smi --json`."""
    out, unread = {}, []
    system = {}
    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line or set(line) <= {"=", "-"} or re.match(r"^=+ .* =+$", line):
            continue  # banners and rules
        m = _ROCM_GPU.match(line)
        if m:
            key, _, value = m.group(2).partition(":")
            if value.strip():
                out.setdefault("card%s" % m.group(1), {})[key.strip()] = value.strip()
            continue
        m = _ROCM_SYSTEM.match(line)
        if m and not line.startswith("PID"):
            system[m.group(1)] = m.group(2).strip()
            continue
        unread.append(line)
    if not out:
        first = unread[0] if unread else ""
        raise ValueError("rocm-smi: cannot read %r" % first[:200] if first else "rocm-smi: no output")
    out["system"] = system
    return out


_RAS_GPU = re.compile(r"^GPU\[(\d+)\]\s*:\s*RAS INFO\s*$")
_RAS_ROW = re.compile(r"^([A-Z][A-Z0-9_]*)\s+([A-Z_]+)(?:\s+(\d+)\s+(\d+))?$")


def parse_rocm_smi_ras(text):
    """`rocm-smi --showrasinfo` (a table per GPU: Block, Status, Correctable Error, Uncorrectable Error; a block
    whose RAS is not enabled has no counts) -> {gpu index: {"blocks": {block: {status, correctable, uncorrectable}},
    "ecc_correctable_aggregate", "ecc_uncorrectable_aggregate"}}, the totals over the enabled blocks, None where no
    block counts. rocm-smi has no JSON for it ("No JSON data to report"). Lines it cannot read are kept in
    "unparsed" of the GPU they follow; an output with no GPU table is a ValueError naming its first line."""
    out, gpu, unread = {}, None, []
    for raw in (text or "").splitlines():
        line = raw.strip()
        if (not line or set(line) <= {"=", "-", "_"} or re.match(r"^=+ .* =+$", line) or line.startswith("$ ")
                or line.split()[:2] == ["Block", "Status"]):
            continue  # blank, banners, rules, a shell prompt, the column header
        m = _RAS_GPU.match(line)
        if m:
            gpu = out.setdefault(int(m.group(1)), {"blocks": {}, "ecc_correctable_aggregate": None,
                                                   "ecc_uncorrectable_aggregate": None, "unparsed": []})
            continue
        m = _RAS_ROW.match(line)
        if m and gpu is not None:
            correctable = int(m.group(3)) if m.group(3) is not None else None
            uncorrectable = int(m.group(4)) if m.group(4) is not None else None
            gpu["blocks"][m.group(1)] = {"status": m.group(2), "correctable": correctable,
                                         "uncorrectable": uncorrectable}
            if correctable is not None:
                gpu["ecc_correctable_aggregate"] = (gpu["ecc_correctable_aggregate"] or 0) + correctable
                gpu["ecc_uncorrectable_aggregate"] = (gpu["ecc_uncorrectable_aggregate"] or 0) + uncorrectable
            continue
        (gpu["unparsed"] if gpu is not None else unread).append(line[:200])
    if not out:
        raise ValueError("rocm-smi --showrasinfo: cannot read %r" % unread[0] if unread else
                         "rocm-smi --showrasinfo: no output")
    return out


def _field(card, *names):
    """A rocm-smi field by any of its spellings ("Card series" / "Card Series"); None for N/A."""
    lower = {k.lower(): v for k, v in card.items()}
    for name in names:
        value = _str(lower.get(name.lower()))
        if value:
            return value
    return None


def parse_rocm_smi(text):
    """`rocm-smi <ROCM_SMI_ARGS> [--json]` -> one dict per card, the fields amd-smi gives where rocm-smi has them."""
    text = text or ""
    start = text.find("{")
    cards = None
    if start >= 0 and "GPU[" not in text[:start]:  # warnings may come before the JSON line
        try:
            cards = json.JSONDecoder().raw_decode(text[start:])[0]
        except ValueError:
            cards = None  # then it is read as text, and an unreadable one is named by its first line
    if not isinstance(cards, dict):
        cards = rocm_smi_cards(text)
    driver = _field(cards.get("system") or {}, "Driver version")
    gpus = []
    for key in sorted((k for k in cards if k.startswith("card")), key=lambda k: int(k[4:] or 0)):
        card = cards[key]
        model = _field(card, "Card model")
        vram = _val(_field(card, "VRAM Total Memory (B)"))
        used = _val(_field(card, "VRAM Total Used Memory (B)"))
        gpus.append({
            "index": int(key[4:] or 0), "name": _field(card, "Card series"),
            "device_id": _field(card, "Device ID", "GPU ID") or (model if model and model.startswith("0x") else None),
            "serial": _field(card, "Serial Number"), "pci_bus_id": _field(card, "PCI Bus"), "driver": driver,
            "vbios": _field(card, "VBIOS version"),
            "temperature_c": _val(_field(card, "Temperature (Sensor junction) (C)", "Temperature (Sensor edge) (C)")),
            "memory_temperature_c": _val(_field(card, "Temperature (Sensor memory) (C)")),
            "power_draw_w": _val(_field(card, "Current Socket Graphics Package Power (W)",
                                        "Average Graphics Package Power (W)")),
            "power_limit_w": _val(_field(card, "Max Graphics Package Power (W)")),
            "memory_total_mib": vram / 1048576 if vram is not None else None,
            "memory_used_mib": used / 1048576 if used is not None else None,
            "pcie_replay_counter": _val(_field(card, "PCIe Replay Count")),
        })
    return gpus


def _read(c, source, argv, parser, raw):
    """argv with --json, then as text where that is refused or unreadable -> (parsed, why not). Every exit code is
    read: rocm-smi exits non-zero when one of the fields it was asked for is not supported on the GPU."""
    why = None
    for args, fmt in ((argv + ["--json"], "json"), (argv, "text")):
        res = c.cmd(source, args, timeout=30, ok_rcs=range(256))
        if res.rc is None:  # missing, timed out, could not start: c.cmd recorded which
            return None, (c.sources.get(source) or {}).get("reason")
        try:
            parsed = parser(res.stdout)
        except ValueError as exc:
            why = "%s (exit %s)" % (exc, res.rc) if res.rc else str(exc)
            continue
        except (TypeError, AttributeError, KeyError) as exc:  # JSON of a layout not seen before
            why = "%s: unexpected layout (%s: %s)" % (" ".join(argv[:2]), type(exc).__name__, exc)
            continue
        c.save_raw(raw, res.stdout)
        c.mark(source, "ok", None, format=fmt, rc=res.rc)
        return parsed, None
    c.mark(source, "error", why)
    return None, why


def _read_text(c, source, argv, parser, raw):
    """A text-only read (rocm-smi --showrasinfo has no JSON) -> (parsed, why not)."""
    res = c.cmd(source, argv, timeout=30, ok_rcs=range(256))
    if res.rc is None:
        return None, (c.sources.get(source) or {}).get("reason")
    try:
        parsed = parser(res.stdout)
    except ValueError as exc:
        c.mark(source, "error", "%s (exit %s)" % (exc, res.rc) if res.rc else str(exc))
        return None, str(exc)
    c.save_raw(raw, res.stdout)
    c.mark(source, "ok", None, format="text", rc=res.rc)
    return parsed, None


def collect(c):
    out = {"tool": None, "gpus": [], "amdgpu_loaded": "amdgpu" in listdir("/sys/module")}
    gpus, why = _read(c, "amd_smi", ["amd-smi", "static"], parse_static, "amd-smi-static.txt")
    if c.status("amd_smi") != "missing":
        out["tool"] = "amd-smi"
        if gpus is None:
            out["error"] = why
            return out
        out["gpus"] = gpus
        readings, _ = _read(c, "amd_smi_metric", ["amd-smi", "metric"], parse_metric, "amd-smi-metric.txt")
        for gpu in out["gpus"]:
            gpu.update({k: v for k, v in (readings or {}).get(gpu["index"], {}).items() if v is not None})
        return out
    gpus, why = _read(c, "rocm_smi", ["rocm-smi"] + ROCM_SMI_ARGS, parse_rocm_smi, "rocm-smi.txt")
    if c.status("rocm_smi") != "missing":
        out["tool"] = "rocm-smi"
        c.mark("amd_smi", "missing", "amd-smi not found (rocm-smi used for the inventory)")
        out["gpus"] = gpus or []
        if gpus is None:
            out["error"] = why
        else:
            ras, why = _read_text(c, "rocm_smi_ras", ["rocm-smi", "--showrasinfo"], parse_rocm_smi_ras,
                                  "rocm-smi-ras.txt")
            for gpu in out["gpus"]:
                counts = (ras or {}).get(gpu["index"]) or {}
                gpu.update({k: counts[k] for k in ("ecc_correctable_aggregate", "ecc_uncorrectable_aggregate")
                            if counts.get(k) is not None})
    else:
        c.mark("amd_smi", "missing", "amd-smi and rocm-smi not found")
    return out
