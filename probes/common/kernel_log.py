"""Kernel log during a burn-in: read /dev/kmsg from the start of the run, and find the lines that matter.

/dev/kmsg gives one record per read(): ``<prio>,<seq>,<usec since boot>,<flags>;<message>`` followed by optional
continuation lines (`` SUBSYSTEM=pci``). Opening it and seeking to the end gives only the records logged from then
on, which is exactly "new kernel-log lines from the start of the run". The record time is the kernel's monotonic
clock; it is turned into wall-clock time with the offset between time.time() and CLOCK_MONOTONIC at read time.
A message printed with newlines inside (the NVIDIA driver's "fallen off the bus" notice) is one record whose
newlines /dev/kmsg escapes as ``\\x0a``; dmesg and journalctl print its later lines indented, without a timestamp.

Classified messages (real formats; tests/fixtures/kmsg/README.md names where each was seen):

* NVIDIA GPU errors: ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.``
* NVSwitch errors, one record over up to three lines of the same SXid, device and code:
  ``nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM Fault Up`` (the headline, Fatal or
  Non-fatal), ``…: 20034, Severity 1 Engine instance 30 Sub-engine instance 00`` (severity 1 is fatal, 0 non-fatal:
  NVSWITCH_ERROR_SEVERITY_* of the NVSwitch driver), ``…: 20034, Data {0x50610002, …}``.
* A GPU that failed to initialise: ``NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)``,
  ``NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0``; older drivers without the address:
  ``NVRM: RmInitAdapter failed! (0x27:0x38:1193)``, ``NVRM: rm_init_adapter(0) failed``.
* A GPU lost from the bus without an Xid: ``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``NVRM: (PCI ID: 10de:26b5)
  installed in this system has`` / ``NVRM: fallen off the bus and is not responding to commands.`` (one message),
  and the line that follows Xid 79: ``NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.``
* PCIe Advanced Error Reporting: ``pcieport 0000:00:03.1: AER: Corrected error received: 0000:03:00.0``,
  ``nvidia 0000:3b:00.0: AER: PCIe Bus Error: severity=Uncorrected (Non-Fatal), type=Transaction Layer, (Requester
  ID)``, ``pcieport 0000:00:1c.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0``; kernels from 6.x print
  "Correctable" / "Uncorrectable": ``pcieport 0000:00:1b.2: AER: Uncorrectable (Fatal) error message received from
  0000:03:04.0``, ``PCIe Bus Error: severity=Uncorrectable (Fatal), type=Transaction Layer, (Receiver ID)``.
* A message that names an Xid or SXid but does not read as one is kind ``unparsed`` (the controller shows it as an
  error with the line), never dropped: a format change must not hide a fault. Any other kernel line is no record.

Pure parsing plus one small reader class; dmesg-style lines (``[12345.678901] NVRM: …``) parse too.
"""

import errno
import os
import re
import time

XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
SXID_RE = re.compile(r"(?:(nvidia-nvswitch\d*): )?SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),\s*(.*)$")
SXID_HEAD_RE = re.compile(r"(Fatal|Non-fatal),\s*(.*)$", re.I)
SXID_SEVERITY_RE = re.compile(r"Severity (\d+)\b")
INIT_RE = re.compile(r"NVRM: (?:GPU ([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])(?: / [0-9A-Fa-f:.]+)?: )?"
                     r"(RmInitAdapter failed!.*|rm_init_adapter(?:\(\d+\))? failed.*)$")
BDF_RE = re.compile(r"\b([0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\b")
# The error lines only: "AER: enabled with IRQ 26" at boot and "AER: device recovery failed" after a fatal error are
# no records of their own.
AER_RE = re.compile(r"(?:(\S+) )?([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]): (?:AER: )?(.*"
                    r"(?:error received|error message received|PCIe Bus Error).*)$")
DMESG_TS_RE = re.compile(r"^\[\s*(\d+\.\d+)\]\s*(.*)$")
KMSG_ESCAPE_RE = re.compile(r"\\x([0-9a-fA-F]{2})")
# The kinds merge_events keeps (the fault records), in the order a report lists them.
KINDS = ("xid", "sxid", "gpu_init_failed", "fallen_off_bus", "aer", "unparsed")


def aer_severity(text):
    """'Uncorrected (Fatal)' / 'Uncorrectable (Fatal)' -> uncorrected_fatal; Non-Fatal -> uncorrected_nonfatal;
    'Corrected' / 'Correctable' -> corrected."""
    low = text.lower()
    if "non-fatal" in low or "nonfatal" in low:
        return "uncorrected_nonfatal"
    if "fatal" in low:
        return "uncorrected_fatal"
    if "uncorrect" in low:
        return "uncorrected_nonfatal"
    if "corrected" in low or "correctable" in low:
        return "corrected"
    return "unknown"


def flatten(message):
    """A message printed over several lines (``NVRM: The NVIDIA GPU …`` / ``NVRM: (PCI ID: …`` / ``NVRM: fallen
    off …``) -> one line, the repeated ``NVRM:`` of the later lines dropped, as newer drivers print it on one."""
    lines = [ln.strip() for ln in str(message).split("\n") if ln.strip()]
    if not lines:
        return ""
    rest = [ln[len("NVRM:"):].strip() if ln.startswith("NVRM:") else ln for ln in lines[1:]]
    return " ".join([lines[0]] + rest)


def _sxid(m):
    detail = m.group(4).strip()
    head = SXID_HEAD_RE.match(detail)
    sev = SXID_SEVERITY_RE.match(detail)
    if head:
        part, fatal = "headline", head.group(1).lower() == "fatal"
    elif sev:
        part, fatal = "severity", int(sev.group(1)) != 0
    elif detail.startswith("Data"):
        part, fatal = "data", None
    else:
        part, fatal = "other", None
    return {"kind": "sxid", "code": int(m.group(3)), "pci": m.group(2).lower(), "device": m.group(1),
            "fatal": fatal, "part": part, "detail": detail}


def classify(message):
    """A kernel message (one line, or one record over several) -> {"kind": xid | sxid | gpu_init_failed |
    fallen_off_bus | aer | unparsed, ...} or None for anything else."""
    text = flatten(message)
    m = XID_RE.search(text)
    if m:
        return {"kind": "xid", "code": int(m.group(2)), "pci": m.group(1).lower(), "detail": m.group(3).strip()}
    m = SXID_RE.search(text)
    if m:
        return _sxid(m)
    if "NVRM: Xid" in text or "SXid" in text:
        return {"kind": "unparsed", "detail": text}
    m = INIT_RE.search(text)
    if m:
        return {"kind": "gpu_init_failed", "pci": (m.group(1) or "").lower() or None, "detail": m.group(2).strip()}
    if "NVRM:" in text and "fallen off the bus" in text:
        bdf = BDF_RE.search(text)
        return {"kind": "fallen_off_bus", "pci": bdf.group(1).lower() if bdf else None, "detail": text}
    if "AER" in text or "PCIe Bus Error" in text:
        m = AER_RE.search(text)
        if m:
            return {"kind": "aer", "pci": m.group(2).lower(), "device": m.group(1),
                    "severity": aer_severity(m.group(3)), "detail": m.group(3).strip()}
    return None


def _unescape(text):
    """/dev/kmsg's escapes (``\\x0a`` for a newline inside a message, ``\\x5c`` for a backslash) decoded."""
    return KMSG_ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 16)), text)


def parse_record(record):
    """One /dev/kmsg record -> {"prio", "facility", "seq", "usec", "message"} or None when it is not one. A message
    printed with newlines inside keeps them (decoded from /dev/kmsg's ``\\x0a``)."""
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
    message = _unescape(rest.split("\n", 1)[0])  # continuation lines (" SUBSYSTEM=…") follow the first newline
    return {"prio": level & 7, "facility": level >> 3, "seq": seq, "usec": usec, "message": message}


def parse_dmesg_line(line):
    """``[  123.456789] message`` -> (seconds since boot or None, message)."""
    m = DMESG_TS_RE.match(line.rstrip("\n"))
    if m:
        return float(m.group(1)), m.group(2)
    return None, line.rstrip("\n")


def dmesg_messages(text):
    """dmesg text -> [(seconds since boot or None, message)]: the indented lines without a timestamp that dmesg
    prints for a message with newlines inside are joined to their message."""
    out = []
    for line in (text or "").splitlines():
        t, message = parse_dmesg_line(line)
        if t is None and out and line[:1].isspace() and line.strip():
            out[-1] = (out[-1][0], out[-1][1] + "\n" + line.strip())
        elif line.strip():
            out.append((t, message))
    return out


def event(message, t, prio=None, seq=None):
    """The timeline entry for a kernel message: classified, with its wall time; None for unclassified ones."""
    found = classify(message)
    if found is None:
        return None
    found.update(t=round(t, 3), line=flatten(message), prio=prio, seq=seq)
    return found


def _gpu(pci):
    """'0000:AB:00.0' and '0000:ab:00' (an Xid's address) -> '0000:ab:00': one GPU under both spellings."""
    return (pci or "").lower().split(".")[0] or None


def informative(ev):
    """How much a line says about its record: an SXid's headline (Fatal/Non-fatal and what failed) over its
    Severity line over its Data line; RmInitAdapter's line with its error code over rm_init_adapter's."""
    if ev.get("kind") == "sxid":
        return {"headline": 3, "severity": 2, "other": 1, "data": 0}.get(ev.get("part"), 1)
    if ev.get("kind") == "gpu_init_failed":
        return 2 if "RmInitAdapter failed!" in (ev.get("detail") or "") else 1
    return 1


def fold(record, ev):
    """Adds one more line of the same fault to record: the fatal flag from the whole record (any line saying fatal
    makes it fatal; non-fatal only when no line says fatal), the text from its most informative line."""
    record["lines"] = record.get("lines", 1) + 1
    if ev.get("fatal") is True or (ev.get("fatal") is False and record.get("fatal") is None):
        record["fatal"] = ev["fatal"]
    if informative(ev) > informative(record):
        for key in ("line", "detail", "part", "text"):
            if key in ev:
                record[key] = ev[key]
    return record


def _key(ev):
    if ev["kind"] in ("xid", "fallen_off_bus", "gpu_init_failed"):
        return (ev["kind"], ev.get("code"), _gpu(ev.get("pci")))
    return (ev["kind"], ev.get("code"), ev.get("pci"), ev.get("severity"))


def merge_events(events, window_s=2.0):
    """One event per fault: the driver logs one XID or SXID over several lines (the SXID's "Severity" and "Data"
    lines, XID 13's "Graphics Exception" line), RmInitAdapter's failure over two, and "GPU has fallen off the bus"
    after XID 79. Lines of the same kind, code and device within window_s of the record's first line are folded
    into it (``lines`` counts them), with the fatal flag of the whole record and the text of its most informative
    line. An SXid headline (Fatal / Non-fatal) always starts a new record: one switch logs one headline per link.
    A fallen-off-the-bus line on a GPU whose XID 79 is in the window belongs to that XID. Unclassified lines are
    dropped."""
    out = []
    for ev in sorted((e for e in events if e.get("kind") in KINDS), key=lambda e: e["t"]):
        key = _key(ev)
        prev = None
        if not (ev["kind"] == "sxid" and ev.get("part") == "headline") and ev["kind"] != "unparsed":
            prev = next((o for o in reversed(out) if o["_key"] == key and ev["t"] - o["t"] <= window_s), None)
        if prev is None and ev["kind"] == "fallen_off_bus":
            prev = next((o for o in reversed(out) if o["kind"] == "xid" and o.get("code") == 79
                         and _gpu(o.get("pci")) == _gpu(ev.get("pci")) and ev["t"] - o["t"] <= window_s), None)
            if prev is not None:
                prev["lines"] += 1
                continue
        if prev is not None:
            fold(prev, ev)
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
