"""nvbandwidth's plain-text output, read into the same dict as its `-j` JSON (probes/gpu_compute/nvbandwidth.py parse).
Versions before v0.5 have no -j; real captures of v0.2 to v0.10 are in tests/fixtures/nvbandwidth/README.md.

    nvbandwidth Version: v0.5                       banner: version, git version, CUDA runtime/driver, driver,
    Built from Git version: v0.5-1-g4da7d7e         one "Device N: <name> [(<pci>)]" line per GPU
    NOTE: This tool reports current measured …      notes (v0.10 also prints one after a testcase)
    Running host_to_device_memcpy_ce.               a testcase starts
    memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)      its description
               0                                    column indices
     0     25.17                                    one row per row index, "N/A" for pairs not measured
    SUM host_to_device_memcpy_ce 25.17              the testcase's sum (absent in the first releases)
    COEFFICIENT_OF_VARIATION host_to_device_memcpy_ce 0.00    (v0.10)

A testcase nvbandwidth skips says "Waiving <name>." (v0.2) or "Waived: <why>" after its Running line; one that
breaks prints its own error lines ("Invalid value when checking the pattern …", "ASSERT in expression …", "Aborted")
instead of a matrix: it is an Error with the first of them. Text that holds no testcase raises ValueError naming the
first line that could not be read.
"""

import math
import re

_BANNER = (("version", re.compile(r"^nvbandwidth Version:\s*(\S+)")),
           ("git_version", re.compile(r"^Built from Git version:\s*(.*)$")),
           ("cuda_version", re.compile(r"^CUDA Runtime Version:\s*(.+)$")),
           ("cuda_driver", re.compile(r"^CUDA Driver Version(?: \(API\))?:\s*(.+)$")),
           ("driver", re.compile(r"^Driver Version:\s*(.+)$")),
           ("mpi_version", re.compile(r"^MPI version:\s*(.+)$")))
# one GPU, and in multinode builds (MPI) the process and host that drive it
_DEVICE = re.compile(r"^(?:Device \d+|Process \d+ \((?P<host>.*)\): device \d+):\s*(?P<name>.+)$")
_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_WAIVING = re.compile(r"^Waiving (\S+?)\.?$")
_WAIVED = re.compile(r"^(?:Waived|WAIVED)\b[.:]?\s*(.*)$")
_SUM = re.compile(r"^SUM (\S+) ([-\d.eE+]+|nan|inf)$")
_CV = re.compile(r"^COEFFICIENT_OF_VARIATION (\S+) ([-\d.eE+]+|nan|inf)$")
_DESCRIPTION = re.compile(r"\((?:GB/s|ns|us)\)\s*$")
# the tool's notes (a NOTE: line and its continuation) and shell prompts pasted with a capture
_NOTES = re.compile(r"^(NOTE:|Additional system-specific|Performance can vary)")
_PROMPT = re.compile(r"^(\$ |> |\S+@\S+[:#$ ])")


def _banner(line):
    for key, rx in _BANNER:
        m = rx.match(line)
        if m:
            return key, m.group(1).strip()
    return None


def _number(cell):
    try:
        value = float(cell)
    except ValueError:
        return None  # "N/A": the pair was not measured
    return value if math.isfinite(value) else None


def _version_code(text):
    """'12040' -> 12040; '13.3 (13030)' (v0.10) -> 13030; anything else as printed."""
    m = re.search(r"\((\d+)\)", text) or re.match(r"^(\d+)$", text.strip())
    return int(m.group(1)) if m else text.strip()


def parse_text(text):
    out = {"version": None, "git_version": None, "cuda_version": None, "driver": None, "devices": [], "error": None,
           "warning": None, "testcases": [], "notes": [], "hosts": []}
    case, unread = None, []

    def start(name, status=None):
        c = {"name": name, "status": status, "description": None, "matrix": [], "columns": None, "sum": None,
             "error": None, "cv": None}
        out["testcases"].append(c)
        return c

    for raw in (text or "").splitlines():
        line = raw.strip()
        if not line:
            continue
        banner = _banner(line)
        if banner:
            key, value = banner
            out[key] = _version_code(value) if key in ("cuda_version", "cuda_driver") else value
            continue
        m = _DEVICE.match(line)
        if m and case is None:
            out["devices"].append(m.group("name").strip())
            if m.group("host") and m.group("host") not in out["hosts"]:
                out["hosts"].append(m.group("host"))
            continue
        m = _RUNNING.match(line)
        if m:
            case = start(m.group(1))
            continue
        m = _WAIVING.match(line)
        if m:
            case = start(m.group(1), "Waived")
            continue
        m = _WAIVED.match(line)
        if m and case is not None and not case["matrix"]:
            case["status"], case["error"] = "Waived", m.group(1).strip() or None
            continue
        if m:
            continue  # a waiver without its testcase's name: nothing to attach it to
        m = _SUM.match(line) or _CV.match(line)
        if m and case is not None and case["name"] is None:
            case["name"] = m.group(1)  # a matrix whose Running line was cut: named by its SUM line
        # a bidirectional testcase (v0.8+) sums each of its matrices (<name>_read1, _read2, _total): the last, the
        # total, is the testcase's, as its -j JSON keeps it
        if m and case is not None and (m.group(1) == case["name"] or m.group(1).startswith(case["name"] + "_")):
            case["sum" if line.startswith("SUM") else "cv"] = _number(m.group(2))
            continue
        if _NOTES.match(line):
            out["notes"].append(line)
            continue
        if _PROMPT.match(line):
            continue
        if case is None and _DESCRIPTION.search(line):
            case = start(None)  # a published output cut before the matrix (its Running line gone)
        if case is None:
            unread.append(line)
            continue
        tokens = line.split()
        if _DESCRIPTION.search(line) and (case["description"] is None or case["columns"] is not None):
            # the first matrix of the testcase, or the next one of a bidirectional testcase (Read1, Read2, Total):
            # its rows are stacked below the others, as nvbandwidth's -j JSON stacks them (nvbandwidth.cells: part)
            case["description"], case["columns"] = line, None
        elif case["description"] and case["columns"] is None and all(t.isdigit() for t in tokens):
            case["columns"] = [int(t) for t in tokens]
        elif case["columns"] is not None and tokens[0].isdigit() and len(tokens) > 1:
            case["matrix"].append([_number(t) for t in tokens[1:]])
        elif case["status"] is None and case["error"] is None:
            case["error"] = line  # the tool's own error line; the testcase printed no result
    for c in out["testcases"]:
        if c["status"] is None:
            measured = any(v is not None for row in c["matrix"] for v in row)
            c["status"] = "Passed" if measured and not c["error"] else "Error"
            if c["status"] == "Error" and not c["error"]:
                c["error"] = "no result: the output ends after its Running line"
    # lines before any testcase that are none of the above: launcher noise, a host name, an author's "..."
    out["unparsed"] = [u[:200] for u in unread[:20]]
    if not out["testcases"]:
        first = unread[0] if unread else next((x.strip() for x in (text or "").splitlines() if x.strip()), "")
        raise ValueError("nvbandwidth: cannot read %r" % first[:200] if first else "nvbandwidth: no output")
    return out
