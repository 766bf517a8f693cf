"""Kernel log during a burn-in: read /dev/kmsg from the start of the run, and find the lines that matter.

/dev/kmsg gives one record per read(): ``<prio>,<seq>,<usec since boot>,<flags>;<message>`` followed by optional
continuation lines (`` SUBSYSTEM=pci``). Opening it and seeking to the end gives only the records logged from then
on, which is exactly "new kernel-log lines from the start of the run". The record time is the kernel's monotonic
clock; it is turned into wall-clock time with the offset between time.time() and CLOCK_MONOTONIC at read time.

Classified lines (real formats):

* NVIDIA GPU errors: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.``
* NVSwitch errors: ``nvidia-nvswitch2: SXid (PCI:0000:07:00.0): 12028, Non-fatal, Link 44 egress non-posted PRIV
  error (First)``
* PCIe Advanced Error Reporting: ``pcieport 0000:00:03.1: AER: Corrected error received: 0000:03:00.0``,
  ``nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester
  ID)``, ``pcieport 0000:00:1c.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0``.

Pure parsing plus one small reader class; dmesg-style lines (``[12345.678901] NVRM: …``) parse too.
"""

import errno
import os
import re
import time

XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
SXID_RE = re.compile(r"(?:(nvidia-nvswitch\d+): )?SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
AER_RE = re.compile(r"(?:(\S+) )?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?(.*"
                    r"(?:error received|PCIe Bus Error|AER: ).*)$")
DMESG_TS_RE = re.compile(r"^\[\s*(\d+\.\d+)\]\s*(.*)$")


def aer_severity(text):
    low = text.lower()
    if "non-fatal" in low or "nonfatal" in low:
        return "uncorrected_nonfatal"
    if "fatal" in low:
        return "uncorrected_fatal"
    if "uncorrected" in low:
        return "uncorrected_nonfatal"
    if "corrected" in low:
        return "corrected"
    return "unknown"


def classify(message):
    """A kernel message -> {"kind": xid|sxid|aer, ...} or None for anything else."""
    m = XID_RE.search(message)
    if m:
        return {"kind": "xid", "code": int(m.group(2)), "pci": m.group(1).lower(), "detail": m.group(3).strip()}
    m = SXID_RE.search(message)
    if m:
        detail = m.group(4).strip()
        return {"kind": "sxid", "code": int(m.group(3)), "pci": m.group(2).lower(), "device": m.group(1),
                "fatal": detail.lower().startswith("fatal"), "detail": detail}
    if "AER" in message or "PCIe Bus Error" in message:
        m = AER_RE.search(message)
        if m:
            return {"kind": "aer", "pci": m.group(2).lower(), "device": m.group(1),
                    "severity": aer_severity(m.group(3)), "detail": m.group(3).strip()}
    return None


def parse_record(record):
    """One /dev/kmsg record -> {"prio", "facility", "seq", "usec", "message"} or None when it is not one."""
    head, sep, rest = record.partition(";")
    if not sep:
        return None
    fields = head.split(",")
    if len(fields) < 3:
        return None
    try:
        level, seq, usec = int(fields[0]), int(fields[1]), int(fields[2])
    except ValueError:
        return None
    message = rest.split("\n", 1)[0]  # continuation lines (" SUBSYSTEM=…") follow the first newline
    return {"prio": level & 7, "facility": level >> 3, "seq": seq, "usec": usec, "message": message}


def parse_dmesg_line(line):
    """``[  123.456789] message`` -> (seconds since boot or None, message)."""
    m = DMESG_TS_RE.match(line.rstrip("\n"))
    if m:
        return float(m.group(1)), m.group(2)
    return None, line.rstrip("\n")


def event(message, t, prio=None, seq=None):
    """The timeline entry for a kernel message: classified, with its wall time; None for unclassified ones."""
    found = classify(message)
    if found is None:
        return None
    found.update(t=round(t, 3), line=message, prio=prio, seq=seq)
    return found


def merge_events(events, window_s=2.0):
    """One event per fault: the driver logs one XID or SXID over several lines (the SXID's "Severity" and "Data"
    lines, XID 13's "Graphics Exception" line). Lines of the same kind, code and device within window_s of the
    first are folded into it (``lines`` counts them). Unclassified lines are dropped."""
    out = []
    for ev in sorted((e for e in events if e.get("kind") in ("xid", "sxid", "aer")), key=lambda e: e["t"]):
        key = (ev["kind"], ev.get("code"), ev.get("pci"), ev.get("severity"))
        prev = next((o for o in reversed(out) if o["_key"] == key and ev["t"] - o["t"] <= window_s), None)
        if prev is not None:
            prev["lines"] += 1
            continue
        out.append(dict(ev, lines=1, _key=key))
    for o in out:
        del o["_key"]
    return out


class KmsgReader:
    """New records of /dev/kmsg since open(). read_new() never blocks; records overwritten before we read them
    (EPIPE: the ring buffer wrapped) are counted as lost, not fatal."""

    def __init__(self, path="/dev/kmsg"):
        self.path = path
        self.fd = None
        self.error = None
        self.lost = 0
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError as exc:
            self.error = "cannot read %s: %s" % (path, exc.strerror)
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None

    def read_new(self, limit=10000):
        """[(wall time, parsed record)] of the records logged since the last call."""
        out = []
        if self.fd is None:
            return out
        offset = time.time() - time.clock_gettime(time.CLOCK_MONOTONIC)
        for _ in range(limit):
            try:
                data = os.read(self.fd, 8192)
            except OSError as exc:
                if exc.errno == errno.EAGAIN:
                    break
                if exc.errno == errno.EPIPE:
                    self.lost += 1
                    continue
                self.error = "reading %s: %s" % (self.path, exc.strerror)
                break
            if not data:
                break
            rec = parse_record(data.decode("utf-8", "replace"))
            if rec is not None:
                out.append((offset + rec["usec"] / 1e6, rec))
        return out

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
