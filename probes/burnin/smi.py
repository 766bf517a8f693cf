"""GPU telemetry during a burn-in from one long-running ``nvidia-smi --query-gpu=… --format=csv,noheader,nounits
-lms <ms>`` stream: parse its lines, and reduce the rows of one sampling interval to one sample per GPU.

A stream line (one per GPU per tick) in the order of QUERY_FIELDS:
``2026/11/30 09:20:01.123, 0, 00000000:18:00.0, 64, 689.52, 700.00, 1980, 2619, 1980, 0x0000000000000004, 100, 0, 0``
``[N/A]`` / ``[Not Supported]`` become None. Throttle reasons are the bit mask nvidia-smi prints
(``clocks_throttle_reasons.active``, called clocks_event_reasons on newer drivers, same bits).
"""

import time

# The power limit is enforced.power.limit (nvidia-smi -q's "Current Power Limit"), the ceiling the power management
# holds the board under: the minimum of every limiter. power.limit is only the one software asked for ("Requested
# Power Limit"); a BMC or out-of-band cap below it leaves that one unchanged (500 W enforced under 700 W requested).
QUERY_FIELDS = ("timestamp", "index", "pci.bus_id", "temperature.gpu", "power.draw", "enforced.power.limit",
                "clocks.sm", "clocks.mem", "clocks.max.sm", "clocks_throttle_reasons.active", "utilization.gpu",
                "ecc.errors.uncorrected.volatile.total", "ecc.errors.corrected.volatile.total")
# Drivers from R535 call the throttle reasons "clocks_event_reasons" (the old name stays an alias, but not everywhere).
QUERY_FIELDS_NEW = tuple("clocks_event_reasons.active" if f == "clocks_throttle_reasons.active" else f
                         for f in QUERY_FIELDS)
KEYS = ("timestamp", "gpu", "pci", "temp_c", "power_w", "power_limit_w", "sm_mhz", "mem_mhz", "sm_max_mhz",
        "throttle", "util_pct", "ecc_uncorrected", "ecc_corrected")

# nvmlClocksThrottleReasons bits.
THROTTLE_BITS = {0x1: "gpu_idle", 0x2: "applications_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
                 0x10: "sync_boost", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake",
                 0x100: "display_clocks"}
# The reasons that mean the GPU was slowed by heat or by the hardware protecting itself: throttling episodes.
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80
POWER_CAP_MASK = 0x4


def _value(text):
    text = text.strip()
    if not text or text.startswith("[") or text in ("N/A", "Not Supported"):
        return None
    return text


def _num(text):
    text = _value(text)
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def parse_timestamp(text):
    """nvidia-smi's local time ``2026/11/30 09:20:01.123`` -> seconds since the epoch (None when unreadable)."""
    text = (text or "").strip()
    try:
        base, _, frac = text.partition(".")
        t = time.mktime(time.strptime(base, "%Y/%m/%d %H:%M:%S"))
        return t + (float("0." + frac) if frac.isdigit() else 0.0)
    except ValueError:
        return None


def parse_line(line):
    """One stream line -> a row dict (KEYS), or None for anything that is not a data line."""
    parts = [p.strip() for p in line.strip().split(",")]
    if len(parts) != len(QUERY_FIELDS):
        return None
    index = _num(parts[1])
    if index is None:
        return None
    throttle = _value(parts[9])
    try:
        mask = int(throttle, 16) if throttle else None
    except ValueError:
        mask = None
    row = {"timestamp": parse_timestamp(parts[0]), "gpu": int(index), "pci": _value(parts[2]), "throttle": mask}
    for key, text in zip(KEYS[3:], parts[3:]):
        if key != "throttle":
            row[key] = _num(text)
    return row


def reasons(mask):
    return [name for bit, name in sorted(THROTTLE_BITS.items()) if mask and mask & bit]


def _mean(values):
    values = [v for v in values if v is not None]
    return round(sum(values) / len(values), 3) if values else None


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _min(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def window_sample(rows, t):
    """The rows of one interval (any GPUs) -> one sample per GPU, time t (the end of the interval)."""
    by_gpu = {}
    for row in rows:
        by_gpu.setdefault(row["gpu"], []).append(row)
    out = []
    for gpu, rs in sorted(by_gpu.items()):
        mask = 0
        slowed = capped = 0
        for r in rs:
            m = r.get("throttle") or 0
            mask |= m
            slowed += 1 if m & SLOWDOWN_MASK else 0
            capped += 1 if m & POWER_CAP_MASK else 0
        out.append({
            "t": round(t, 3), "gpu": gpu, "pci": rs[-1].get("pci"), "rows": len(rs),
            "temp_c": _max(r.get("temp_c") for r in rs), "temp_mean_c": _mean(r.get("temp_c") for r in rs),
            "power_w": _mean(r.get("power_w") for r in rs), "power_max_w": _max(r.get("power_w") for r in rs),
            "power_limit_w": _max(r.get("power_limit_w") for r in rs),
            "sm_mhz": _mean(r.get("sm_mhz") for r in rs), "sm_min_mhz": _min(r.get("sm_mhz") for r in rs),
            "sm_max_mhz": _max(r.get("sm_max_mhz") for r in rs), "mem_mhz": _mean(r.get("mem_mhz") for r in rs),
            "util_pct": _mean(r.get("util_pct") for r in rs),
            "throttle_mask": "0x%x" % mask, "throttle_reasons": reasons(mask),
            "slowdown_share": round(slowed / len(rs), 3), "power_cap_share": round(capped / len(rs), 3),
            "ecc_uncorrected": _max(r.get("ecc_uncorrected") for r in rs),
            # the counter as the window began (it only counts up): the run's first window's is its baseline
            "ecc_uncorrected_min": _min(r.get("ecc_uncorrected") for r in rs),
            "ecc_corrected": _max(r.get("ecc_corrected") for r in rs),
        })
    return out


def sample_stream(lines, interval_s):
    """A recorded stream -> per-interval samples (windows of interval_s seconds from the first timestamp),
    the same reduction the live monitor makes every interval."""
    rows = [r for r in (parse_line(line) for line in lines) if r is not None and r["timestamp"] is not None]
    if not rows:
        return []
    t0 = rows[0]["timestamp"]
    windows = {}
    for r in rows:
        windows.setdefault(int((r["timestamp"] - t0) // interval_s), []).append(r)
    out = []
    for k in sorted(windows):
        out.extend(window_sample(windows[k], t0 + (k + 1) * interval_s))
    return out
