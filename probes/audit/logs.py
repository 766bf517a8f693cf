"""Kernel log events for the audit: NVIDIA XIDs, machine checks, PCIe AER, out-of-memory kills, hung tasks.

Read from `journalctl -k` (survives reboots, covers the window) and `dmesg --time-format iso` (the ring buffer)
when the journal has no kernel lines. Every event keeps its timestamp; the controller picks the window (7 days)
and classifies XIDs with reports/data/xid.yml. Only the matching lines are kept, as a raw file.
"""

import re
from datetime import datetime, timezone

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, (.*))?")
PATTERNS = {
    "mce": re.compile(r"mce: \[Hardware Error\]|Machine check events logged|Machine Check Exception", re.I),
    "aer": re.compile(r"AER: (?:Uncorrected|Multiple Uncorrected)|PCIe Bus Error: severity=(?:Uncorrected|Fatal)",
                      re.I),
    "oom": re.compile(r"Out of memory: Kill|oom-kill:|Killed process \d+", re.I),
    "hung_task": re.compile(r"blocked for more than \d+ seconds", re.I),
    "gpu_fallen_off": re.compile(r"fallen off the bus", re.I),
    "amdgpu_ras": re.compile(r"amdgpu.*(?:uncorrectable|RAS|GPU reset begin)", re.I),
    "edac_ue": re.compile(r"EDAC .*\bUE\b|EDAC .*Uncorrected", re.I),
}
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2}|Z)?\s+(.*)$")


def parse_time(text):
    """'2026-11-30T05:15:20,613139+00:00' or '2026-11-30T05:15:20+0000' -> RFC 3339 UTC string, or None."""
    m = _ISO.match(text.strip() + " x")
    if not m:
        return None
    zone = m.group(3) or "+00:00"
    if zone == "Z":
        zone = "+00:00"
    elif ":" not in zone:
        zone = zone[:3] + ":" + zone[3:]
    try:
        when = datetime.fromisoformat(m.group(1) + zone)
    except ValueError:
        return None
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_kernel_log(text, limit=2000):
    """Lines with an ISO timestamp first (journalctl -o short-iso, dmesg --time-format iso) ->
    {"lines": n, "first": time, "xids": [...], "counts": {kind: n}, "events": {kind: [time, ...]}, "matched": [...]}"""
    xids, matched = [], []
    counts = {k: 0 for k in PATTERNS}
    events = {k: [] for k in PATTERNS}
    first = None
    lines = 0
    for line in (text or "").splitlines():
        m = _ISO.match(line)
        if not m:
            continue
        lines += 1
        when = parse_time(line.split()[0])
        if first is None:
            first = when
        message = m.group(4)
        x = XID.search(message)
        if x:
            xids.append({"time": when, "pci": x.group(1).lower(), "xid": int(x.group(2)),
                         "text": (x.group(3) or "").strip()[:160]})
            if len(matched) < limit:
                matched.append(line)
            continue
        for kind, pattern in PATTERNS.items():
            if pattern.search(message):
                counts[kind] += 1
                if len(events[kind]) < 50:
                    events[kind].append(when)
                if len(matched) < limit:
                    matched.append(line)
                break
    return {"lines": lines, "first": first, "xids": xids, "counts": counts, "events": events, "matched": matched}


def collect(c, window_days=7):
    out = {"source": None}
    text = None
    res = c.cmd("journal_kernel", ["journalctl", "-k", "-o", "short-iso", "--no-pager", "-q",
                                   "--since", "-%dd" % int(window_days)], timeout=20)
    if res.rc == 0 and res.stdout.strip():
        parsed = parse_kernel_log(res.stdout)
        if parsed["lines"]:
            text, out["source"] = res.stdout, "journalctl"
    if text is None:
        res = c.cmd("dmesg", ["dmesg", "--time-format", "iso"], timeout=20)
        if res.rc == 0:
            text, out["source"] = res.stdout, "dmesg"
            c.mark("kernel_log", "ok")
        else:
            status = c.status("dmesg")
            c.mark("kernel_log", status or "error", (c.sources.get("dmesg") or {}).get("reason"))
            return out
    else:
        c.mark("kernel_log", "ok")
    parsed = parse_kernel_log(text)
    if parsed["matched"]:
        c.save_raw("kernel-events.txt", "\n".join(parsed["matched"]) + "\n")
    del parsed["matched"]
    out.update(parsed)
    return out
