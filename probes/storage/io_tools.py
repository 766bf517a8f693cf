"""What IOR, mdtest and elbencho print, read into rows: the parallel-filesystem benchmarks the seed names beside fio.

Each reader takes the tool's whole stdout and returns {"version", "rows", "warnings", "errors"} (plus the tool's own
facts), or raises ToolOutputError naming the tool and the line where what it expected was missing: an output that
cannot be read is an error, never zero rows. Lines the tools mix into their tables (IOR's "Commencing ..." and
stonewall warnings, ROMIO hints, elbencho's service messages) are skipped or kept as warnings; a data line that does
not fit its table is an error.

The formats, from real captures (tests/fixtures/io_tools/, each source in its README):
- IOR 3.0.1 to 4.0.0: the "Summary of all tests:" table, a header line of column names and one whitespace-separated
  row per operation. 3.2 and later add the OPs and Stonewall columns and write aggs(MiB) instead of aggsize
  (bytes); a verification failure is reported in lines that say so ("FAILED comparison", "Incorrect data").
- mdtest 1.9.3 to 4.0.0: "SUMMARY: (of N iterations)" (1.9) or "SUMMARY rate: (of N iterations)" (3.x, 4.x),
  then one row per operation with Max, Min, Mean and Std Dev; the label ends in ':' except in 4.0.0. mdtest 3.x
  adds a "SUMMARY time:" table (seconds) after it.
- elbencho 1.x to 3.x: result blocks, one per phase ("WRITE", "MKDIRS" ...), each line "<result type> :
  <first done> <last done>", a block ending with "---". 3.x writes the elapsed time with units (2m3.241s, 32ms) and
  latencies as "[ min=... avg=... max=... ]".
"""

import re
import textwrap


class ToolOutputError(ValueError):
    """An output that cannot be read: names the tool, the line number (1-based) and the line."""

    def __init__(self, tool, line_no, line, why):
        self.tool, self.line_no, self.line = tool, line_no, line
        super().__init__("%s output, line %s: %s%s" % (tool, line_no, why, (": %r" % line[:200]) if line else ""))


_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|-?nan|NA"


def _lines(text):
    """The output's lines, less an indentation every line shares (an output quoted in a document keeps the
    document's indentation; the tools themselves print from the first column)."""
    return textwrap.dedent(text).splitlines()


def _last_line(lines):
    """(number, text) of the last line that is not blank: where a missing table is reported."""
    return next(((i + 1, ln) for i, ln in reversed(list(enumerate(lines))) if ln.strip()), (len(lines), ""))


def _number(text):
    """A float, or None for NA / nan (mdtest prints -nan% and nan rates when nothing ran)."""
    if text in ("NA", "nan", "-nan"):
        return None
    return float(text)


# ------------------------------------------------------------------------------------------------------- IOR

IOR_VERSION = re.compile(r"^IOR-([\w.+-]+): MPI Coordinated Test of Parallel I/O")
# Lines that say the data read back is not what was written, or that the run failed, in IOR's own words and case
# (hpc/ior src/ior.c, iordef.h, aiori-debug.h, utilities.c): "FAILED comparison", "WARNING: incorrect data on read"
# (older) or "Incorrect data" (newer); "ior ERROR: <msg>, errno N, ... (file:line)" (up to 3.3), "ERROR: <msg>,
# (file:line)" (later; at the start of the line or after a launcher's rank tag "...<stdout>:" / "0: "), "Process N:
# FAILED in <function>" (FAIL); then the MPI library's abort ("MPI_ABORT was invoked", Open MPI; "application called
# MPI_Abort(...)", "Abort(1) on node 0", MPICH). Not any "error" in any case: Open MPI 4.x prints a "WARNING: There
# was an error initializing an OpenFabrics device." help block on mlx5 nodes where UCX then runs the job, and the
# launcher's log mixes it into IOR's output of a run that succeeded; nor other libraries' "PMIX ERROR: " notes.
IOR_FAILURE = re.compile(r"FAILED comparison|[Ii]ncorrect data|\bior ERROR\b|(?:^\s*|[:>] ?)ERROR: |"
                         r"Process \d+: FAILED in |MPI_ABORT|MPI_Abort\(|\bAbort\(")


def parse_ior(text):
    """IOR's summary: one row per operation (write, read) with bandwidth max/min/mean/stddev in MiB/s, OPs, mean
    time, tasks, tasks per node, repetitions, file per process, block and transfer size, aggregate size, API."""
    lines = _lines(text)
    version = next((m.group(1) for m in map(IOR_VERSION.match, lines) if m), None)
    warnings = [(i + 1, ln.strip()) for i, ln in enumerate(lines) if ln.lstrip().startswith("WARNING")]
    errors = [(i + 1, ln.strip()) for i, ln in enumerate(lines) if IOR_FAILURE.search(ln)]
    start = next((i for i, ln in enumerate(lines) if ln.strip() == "Summary of all tests:"), None)
    if start is None:
        last = _last_line(lines)
        why = "no 'Summary of all tests:' table"
        if errors:
            why += " (the run failed: %s)" % errors[0][1][:200]
        raise ToolOutputError("ior", last[0], last[1], why)
    if start + 1 >= len(lines) or not lines[start + 1].startswith("Operation"):
        raise ToolOutputError("ior", start + 2, lines[start + 1] if start + 1 < len(lines) else "",
                              "the summary has no header line of column names")
    header = []
    for name in lines[start + 1].split():
        # 3.2 and later have a StdDev column for MiB and one for OPs: the second is named apart
        header.append(name + "(OPs)" if name in header else name)
    rows = []
    for i in range(start + 2, len(lines)):
        line = lines[i]
        if not line.strip() or line.startswith("Finished"):
            break
        cells = line.split()
        if len(cells) != len(header):
            raise ToolOutputError("ior", i + 1, line, "%d cells under %d column names" % (len(cells), len(header)))
        cell = dict(zip(header, cells))
        try:
            row = {"operation": cell["Operation"], "bw_max_mib": _number(cell["Max(MiB)"]),
                   "bw_min_mib": _number(cell["Min(MiB)"]), "bw_mean_mib": _number(cell["Mean(MiB)"]),
                   "bw_stddev_mib": _number(cell["StdDev"]), "mean_s": _number(cell["Mean(s)"]),
                   "tasks": int(cell["#Tasks"]), "tasks_per_node": int(cell["tPN"]), "reps": int(cell["reps"]),
                   "file_per_process": cell["fPP"] == "1", "block_bytes": int(cell["blksiz"]),
                   "transfer_bytes": int(cell["xsize"]), "api": cell["API"]}
            if "Max(OPs)" in cell:
                row.update(ops_max=_number(cell["Max(OPs)"]), ops_mean=_number(cell["Mean(OPs)"]),
                           ops_stddev=_number(cell["StdDev(OPs)"]))
            if "aggs(MiB)" in cell:
                row["aggregate_mib"] = _number(cell["aggs(MiB)"])
            elif "aggsize" in cell:
                row["aggregate_mib"] = int(cell["aggsize"]) / 2**20
        except (KeyError, ValueError) as exc:
            raise ToolOutputError("ior", i + 1, line, "not a summary row (%s)" % exc) from None
        rows.append(row)
    if not rows:
        raise ToolOutputError("ior", start + 3, lines[start + 2] if start + 2 < len(lines) else "",
                              "the summary table has no rows")
    return {"version": version, "rows": rows, "warnings": warnings, "errors": errors}


# ---------------------------------------------------------------------------------------------------- mdtest

MDTEST_VERSION = re.compile(r"^mdtest-([\w.+-]+) was launched with (\d+) total task\(s\) on (\d+) node")
# mdtest 4.1 labels the units: "SUMMARY rate (in ops/sec): (of 1 iterations)", "SUMMARY time (in ms/op): …"
MDTEST_SUMMARY = re.compile(r"^SUMMARY(?: (rate|time|tree))?(?: \(in ([^)]*)\))?: \(of (\d+) iterations?\)")
MDTEST_ROW = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:?\s+(%s)\s+(%s)\s+(%s)\s+(%s)\s*$" % ((_NUMBER,) * 4))


def parse_mdtest(text):
    """mdtest's SUMMARY tables: per table (rate: operations per second; time: seconds) one row per operation with
    max, min, mean and std dev over the iterations. mdtest 4.1 labels its time table "(in ms/op)" but still prints
    each phase's time in seconds (summarize_results_rank0 prints `time[i]`, t_end - t_start): read as seconds."""
    lines = _lines(text)
    launched = next((m for m in map(MDTEST_VERSION.match, lines) if m), None)
    tables = [(i, m) for i, m in enumerate(map(MDTEST_SUMMARY.match, lines)) if m]
    if not tables:
        last = _last_line(lines)
        raise ToolOutputError("mdtest", last[0], last[1], "no 'SUMMARY' table")
    rows = []
    for start, m in tables:
        table = m.group(1) or "rate"  # mdtest 1.9 has only the rates, under "SUMMARY:"
        i = start + 1
        if i < len(lines) and lines[i].strip().startswith("Operation"):
            i += 1
        if i < len(lines) and lines[i].strip().startswith("---"):
            i += 1
        first = i
        for i in range(first, len(lines)):
            line = lines[i]
            if not line.strip() or line.startswith("--") or MDTEST_SUMMARY.match(line) or line.startswith("V-"):
                break
            row = MDTEST_ROW.match(line)
            if not row:
                raise ToolOutputError("mdtest", i + 1, line, "not a row of the SUMMARY %s table" % table)
            rows.append({"table": table, "operation": row.group(1).strip().lower().replace(" ", "_"),
                         "iterations": int(m.group(3)), "max": _number(row.group(2)), "min": _number(row.group(3)),
                         "mean": _number(row.group(4)), "stddev": _number(row.group(5))})
    if not rows:
        raise ToolOutputError("mdtest", tables[0][0] + 1, lines[tables[0][0]], "the SUMMARY table has no rows")
    return {"version": launched.group(1) if launched else None,
            "tasks": int(launched.group(2)) if launched else None,
            "nodes": int(launched.group(3)) if launched else None,
            "rows": rows, "warnings": [(i + 1, ln.strip()) for i, ln in enumerate(lines)
                                       if re.match(r"\s*(WARNING|Warning)", ln)],
            "errors": [(i + 1, ln.strip()) for i, ln in enumerate(lines) if re.search(r"\bERROR\b|MPI_ABORT", ln)]}


# -------------------------------------------------------------------------------------------------- elbencho

ELBENCHO_HEADER = re.compile(r"^OPERATION\s+RESULT TYPE\s+FIRST DONE\s+LAST DONE")
ELBENCHO_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)?\s+([A-Za-z][A-Za-z/ ]*?)\s*:\s*(.*?)\s*$")
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:([\d.]+)s)?(?:([\d.]+)ms)?(?:([\d.]+)us)?$")
_LATENCY = re.compile(r"(min|avg|max)=([\d.]+)(us|ms|s)\b")


def _seconds(text, unit_hint=None):
    """elbencho's elapsed time: '45247' under 'Elapsed ms', else '2m3.241s', '32ms', '1h2m3s', '850us'."""
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text) / (1000.0 if unit_hint == "ms" else 1.0)
    m = _DURATION.match(text)
    if not m or not any(m.groups()):
        raise ValueError("not a duration: %r" % text)
    h, mins, s, ms, us = m.groups()
    return (int(h or 0) * 3600 + int(mins or 0) * 60 + float(s or 0) + float(ms or 0) / 1e3 + float(us or 0) / 1e6)


def _latency_us(text):
    scale = {"us": 1.0, "ms": 1e3, "s": 1e6}
    return {k: float(v) * scale[u] for k, v, u in _LATENCY.findall(text)}


def parse_elbencho(text):
    """elbencho's result blocks: one row per phase and result type, with the first and the last worker's value
    (elbencho's FIRST DONE and LAST DONE): elapsed seconds, rates (IOPS, files/s, dirs/s, objects/s, MiB/s), totals,
    and latencies in microseconds (min, avg, max)."""
    lines = _lines(text)
    version = next((m.group(1) for m in (re.search(r"elbencho(?:\s+version)?\s+v?(\d+\.\d+(?:[-.]\d+)*)", ln)
                                         for ln in lines) if m), None)
    headers = [i for i, ln in enumerate(lines) if ELBENCHO_HEADER.match(ln)]
    if not headers:
        last = _last_line(lines)
        raise ToolOutputError("elbencho", last[0], last[1], "no result table (OPERATION RESULT TYPE ...)")
    rows, phase = [], None
    for i in range(headers[0] + 1, len(lines)):
        line = lines[i]
        stripped = line.strip()
        if ELBENCHO_HEADER.match(line) or stripped.startswith("=") or not stripped:
            continue
        if stripped == "---":
            phase = None
            continue
        m = ELBENCHO_LINE.match(line)
        if not m:
            if phase is None:
                continue  # between blocks: service and progress messages of a distributed run
            raise ToolOutputError("elbencho", i + 1, line, "not a result line of phase %s" % phase)
        if m.group(1):
            phase = m.group(1)
        elif phase is None:
            continue
        kind, value = m.group(2).strip(), m.group(3)
        row = {"phase": phase, "result": kind}
        try:
            if value.startswith("["):
                row["latency_us"] = _latency_us(value)
            else:
                cells = value.split()
                if len(cells) != 2:
                    raise ValueError("%d values, not first and last" % len(cells))
                if kind.startswith("Elapsed"):
                    hint = "ms" if kind.endswith("ms") else None
                    row["first"], row["last"] = _seconds(cells[0], hint), _seconds(cells[1], hint)
                    row["unit"] = "s"
                else:
                    row["first"], row["last"] = float(cells[0]), float(cells[1])
        except ValueError as exc:
            raise ToolOutputError("elbencho", i + 1, line, str(exc)) from None
        rows.append(row)
    if not rows:
        raise ToolOutputError("elbencho", headers[0] + 1, lines[headers[0]], "the result table has no rows")
    return {"version": version, "rows": rows,
            "warnings": [(i + 1, ln.strip()) for i, ln in enumerate(lines) if "WARNING" in ln],
            "errors": [(i + 1, ln.strip()) for i, ln in enumerate(lines) if re.search(r"\bERROR\b", ln)]}
