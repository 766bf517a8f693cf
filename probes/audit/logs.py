"""Kernel log events for the audit: NVIDIA XIDs, NVSwitch SXIDs, GPUs that failed to initialise or fell off the bus,
machine checks, PCIe AER, out-of-memory kills, hung tasks.

Read from `journalctl -k` (survives reboots, covers the window) and `dmesg --time-format iso` (the ring buffer)
when the journal has no kernel lines. Every event keeps its timestamp; the controller picks the window (7 days)
and classifies XIDs with reports/data/xid.yml. Only the matching lines are kept, as a raw file.

A message the kernel printed with newlines inside (the NVIDIA driver's "The NVIDIA GPU … / (PCI ID: …) installed in
this system has / fallen off the bus …") comes as its first line with the timestamp and the later lines indented,
without one: they are read as one message. SXIDs, GPU init failures and fallen-off-the-bus notices are read by the
shared classifier (probes/common/kernel_log.py), so both phases read the kernel log the same way, and a record
over several lines (an SXID's headline, Severity and Data lines) is one record with the fatal flag of all its lines.
"""

import re
from collections import deque
from datetime import datetime, timezone

from probes.common import kernel_log as klog

# "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)(?:, (.*))?")
PATTERNS = {
    "mce": re.compile(r"mce: \[Hardware Error\]|Machine check events logged|Machine Check Exception", re.I),
    # "Uncorrected" up to 6.x kernels, "Uncorrectable" after (tests/fixtures/kmsg/README.md)
    "aer": re.compile(r"AER: (?:Uncorrect|Multiple Uncorrect)|PCIe Bus Error: severity=(?:Uncorrect|Fatal)", re.I),
    # one line per kill in every kernel (mm/oom_kill.c): "[Memory cgroup ]Out of memory: Killed process N" since
    # 5.0, "Killed process N" after 4.x's "Out of memory: Kill process N ... or sacrifice child"; the summary line
    # (oom-kill:constraint=...) and 4.x's "Kill process" line belong to the same kill
    "oom": re.compile(r"Killed process \d+", re.I),
    "hung_task": re.compile(r"blocked for more than \d+ seconds", re.I),
    "gpu_fallen_off": re.compile(r"fallen off the bus", re.I),
    "amdgpu_ras": re.compile(r"amdgpu.*(?:uncorrectable|RAS|GPU reset begin)", re.I),
    "edac_ue": re.compile(r"EDAC .*\bUE\b|EDAC .*Uncorrected", re.I),
}
# Counted besides PATTERNS: the uncorrected AER lines that say Fatal (also counted as "aer").
EXTRA_KINDS = ("aer_fatal",)
_ISO = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:[,.](\d+))?([+-]\d{2}:?\d{2}|Z)?\s+(.*)$")
_JOURNAL_PREFIX = re.compile(r"^\S+ kernel: ")  # journalctl's "<host> kernel: " before the message
UNPARSED_LIMIT = 20
# Times kept per event kind: the newest, as the controller judges a window that ends at the run (dmesg's ring
# buffer goes back to boot, weeks before it). `counts` counts them all.
EVENTS_KEPT = 50


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


def _epoch(when):
    try:
        return datetime.fromisoformat(str(when).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def messages(text):
    """[(time, message, [raw lines])]: lines with an ISO timestamp first (journalctl -o short-iso, dmesg
    --time-format iso), each with the indented lines without a timestamp that follow it (the rest of a message
    printed over several lines). Other lines (journalctl's "-- Boot … --") are no message."""
    out = []
    for line in (text or "").splitlines():
        m = _ISO.match(line)
        if m:
            out.append([parse_time(line.split()[0]), _JOURNAL_PREFIX.sub("", m.group(4)), [line]])
        elif out and line[:1].isspace() and line.strip():
            out[-1][1] += "\n" + line.strip()
            out[-1][2].append(line)
    return [tuple(x) for x in out]


def _records(events):
    """The SXID and GPU-failure records of the classified messages, each over all its lines (merge_events); a
    fallen-off-the-bus notice that follows its GPU's XID 79 belongs to that XID and is no record of its own."""
    sxids, gpu_errors = [], []
    for e in klog.merge_events(events):
        if e["kind"] == "sxid":
            sxids.append({"time": e["time"], "pci": e["pci"], "device": e.get("device"), "sxid": e["code"],
                          "fatal": e.get("fatal"), "text": e["line"][:240], "lines": e["lines"]})
        elif e["kind"] in ("gpu_init_failed", "fallen_off_bus"):
            gpu_errors.append({"time": e["time"], "pci": e.get("pci"), "kind": e["kind"], "text": e["line"][:240],
                               "lines": e["lines"]})
    return sxids, gpu_errors


def parse_kernel_log(text, limit=2000):
    """Lines with an ISO timestamp first (journalctl -o short-iso, dmesg --time-format iso) -> {"lines": n, "first":
    time, "xids": [...], "sxids": [...], "gpu_errors": [...], "unparsed": [...], "counts": {kind: n}, "events":
    {kind: [time, ...]}, "events_newest": 50, "matched": [...]}. `unparsed`: lines that name an Xid or SXid but could
    not be read. `events` keeps the newest EVENTS_KEPT times of each kind, oldest first (`events_newest` says so: a
    probe before it kept the first ones)."""
    # the raw evidence (kernel-events.txt): the newest `limit` lines, like the events the controller judges
    xids, unparsed, events_nv, matched = [], [], [], deque(maxlen=limit)
    kinds = list(PATTERNS) + list(EXTRA_KINDS)
    counts = {k: 0 for k in kinds}
    events = {k: deque(maxlen=EVENTS_KEPT) for k in kinds}
    first = None
    msgs = messages(text)
    for when, message, raw in msgs:
        if first is None:
            first = when
        x = XID.search(message)
        found = klog.classify(message)
        if x:
            xids.append({"time": when, "pci": x.group(1).lower(), "xid": int(x.group(2)),
                         "text": (x.group(3) or "").strip()[:160]})
            if found and found["kind"] == "xid":
                events_nv.append(dict(found, time=when, t=_epoch(when), line=klog.flatten(message)))
            matched.extend(raw)
            continue
        if found and found["kind"] in ("sxid", "gpu_init_failed", "fallen_off_bus", "unparsed"):
            matched.extend(raw)
            if found["kind"] == "unparsed":
                if len(unparsed) < UNPARSED_LIMIT:
                    unparsed.append({"time": when, "line": found["detail"][:300]})
            else:
                events_nv.append(dict(found, time=when, t=_epoch(when), line=klog.flatten(message)))
        flat = klog.flatten(message)
        for kind, pattern in PATTERNS.items():
            if pattern.search(flat):
                counts[kind] += 1
                events[kind].append(when)
                if kind == "aer" and found and found.get("severity") == "uncorrected_fatal":
                    counts["aer_fatal"] += 1
                    events["aer_fatal"].append(when)
                if not (found and found["kind"] in ("sxid", "gpu_init_failed", "fallen_off_bus")):
                    matched.extend(raw)
                break
    sxids, gpu_errors = _records(events_nv)
    return {"lines": len(msgs), "first": first, "xids": xids, "sxids": sxids, "gpu_errors": gpu_errors,
            "unparsed": unparsed, "counts": counts, "events": {k: list(v) for k, v in events.items()},
            "events_newest": EVENTS_KEPT, "matched": list(matched)}


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
