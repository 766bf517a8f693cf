"""Parser for perftest's client reports: the bandwidth tools (ib_write_bw, ib_read_bw, ib_send_bw) and the latency
tools (ib_write_lat, ib_read_lat, ib_send_lat).

The report is a banner (`RDMA_Write BW Test`, `Device : mlx5_0`, `Link type : IB|Ethernet`, `GID index : 3`, …),
then a table header and one line per message size. Launcher or tool noise may come anywhere (a shell prompt, CUDA
init lines, "Conflicting CPU frequency values detected: …" between the header and its row).

Bandwidth: `#bytes #iterations BW peak[UNIT] BW average[UNIT] MsgRate[Mpps]`, UNIT in
- Gb/sec (--report_gbits): 1e9 bit/s, kept as is;
- MB/sec (older builds' default) and MiB/sec (newer builds' default, the same number relabelled): perftest divides
  bytes/s by 0x100000, so both are 2^20 bytes/s, converted here to Gbit/s (× 8 × 2^20 / 1e9).
Every bandwidth comes out in Gbit/s (bw_peak_gbits, bw_avg_gbits), the unit of the probe's results.

Latency: `#bytes #iterations t_min[usec] t_max[usec] t_typical[usec] t_avg[usec] t_stdev[usec] 99% percentile[usec]
99.9% percentile[usec]` (t_typical is the median); a duration run (-D) prints only `#bytes #iterations t_avg[usec]`
(and perhaps `tps average`): the columns are read by the header's names, microseconds throughout.

A report with a table header but no row it can read, or with no header at all, gives an `error` naming the tool and
the first line that could not be read, never just zero rows.
"""

import re

_BW_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")
_NUM_ROW = re.compile(r"^\s*\d+\s+\d+(?:\s+-?[\d.]+)+\s*$")
# bytes/s divisor of each unit perftest prints, over 1e9 bit/s
_UNITS = {"Gb/sec": 1.0, "MB/sec": 8 * 2 ** 20 / 1e9, "MiB/sec": 8 * 2 ** 20 / 1e9}
_FAIL = re.compile(r"Couldn't|Unable to|Failed to|failed|error|Error", re.I)
# Lines a report has besides its table: the banner, dashes, prompts and known noise
_BANNER = re.compile(r"^\s*(?:-{5,}|\*+|[A-Za-z][\w*. /()-]*\s*:\s|local address|remote address|GID:|"
                     r"\S+ (?:BW|Latency) Test|Conflicting CPU frequency|WARNING|Disabling|initializing CUDA|"
                     r"Listing all|CUDA device|Picking device|\[pid|creating CUDA|making it|allocated GPU|"
                     r"cuMemAlloc|deallocating|destroying|Perftest|Using|Connected|Completed|Total run time|"
                     r"Requested|Current TX|\s*$)")
# the latency header's column names -> result keys
_LAT_COLS = [("t_min", "t_min_us"), ("t_max", "t_max_us"), ("t_typical", "t_typical_us"), ("t_avg", "t_avg_us"),
             ("t_stdev", "t_stdev_us"), ("99.9% percentile", "p99_9_us"), ("99% percentile", "p99_us")]


def _tool(test, kind):
    """'RDMA_Write BW Test' -> 'ib_write_bw' (what an error names)."""
    name = (test or "").lower()
    op = "write" if "write" in name else "read" if "read" in name else "atomic" if "atomic" in name else "send"
    return "ib_%s_%s" % (op, kind) if test else "perftest"


def _banner(out, line):
    m = re.match(r"^\s+(\S.*? (?:BW|Latency) Test)\s*$", line)
    if m and out["test"] is None:
        out["test"] = m.group(1)
    m = re.search(r"Device\s+:\s+(\S+)", line)
    if m:
        out["device"] = m.group(1)
    m = re.search(r"Link type\s+:\s+(\S+)", line)
    if m:
        out["link_type"] = m.group(1)
    m = re.search(r"GID index\s+:\s+(\d+)", line)
    if m:
        out["gid_index"] = int(m.group(1))
    if "cuMemAlloc()" in line or "initializing CUDA" in line:
        out["use_cuda"] = True
    if out["error"] is None and _FAIL.search(line) and "Data ex. method" not in line \
            and "Conflicting CPU frequency" not in line:
        out["error"] = line.strip()


def _finish(out, kind, unread, text):
    if not out["rows"] and out["error"] is None:
        tool = _tool(out["test"], kind)
        other = [line.strip() for line in (text or "").splitlines() if not _BANNER.match(line)]
        if unread or other:
            out["error"] = "%s: cannot read %r" % (tool, (unread or other)[0][:200])
        else:
            out["error"] = "%s: no result table in the output" % tool
    return out


def parse_bw(text):
    """-> {"test", "device", "link_type", "gid_index", "use_cuda", "unit", "rows": [{bytes, iterations,
    bw_peak_gbits, bw_avg_gbits, msg_rate_mpps}], "error", "unread": [lines]}"""
    out = {"test": None, "device": None, "link_type": None, "gid_index": None, "use_cuda": False, "unit": None,
           "rows": [], "error": None, "unread": []}
    # a run with a duration (-D) measures no peak and prints 0.00 in its column: not measured, not 0 Gbit/s
    no_peak = "BW peak won't be measured" in (text or "")
    for line in (text or "").splitlines():
        _banner(out, line)
        m = re.search(r"BW average\[([^\]]+)\]", line)
        if m:
            out["unit"] = m.group(1)
            if m.group(1) not in _UNITS:
                out["unread"].append(line.strip())
            continue
        m = _BW_ROW.match(line)
        if m and out["unit"] in _UNITS:
            scale = _UNITS[out["unit"]]
            out["rows"].append({"bytes": int(m.group(1)), "iterations": int(m.group(2)),
                                "bw_peak_gbits": None if no_peak else round(float(m.group(3)) * scale, 6),
                                "bw_avg_gbits": round(float(m.group(4)) * scale, 6),
                                "msg_rate_mpps": float(m.group(5))})
        elif out["unit"] and not _BANNER.match(line) and line.strip():
            out["unread"].append(line.strip())
    return _finish(out, "bw", out["unread"], text)


def parse_lat(text):
    """ib_*_lat client report -> {"test", "device", "link_type", "gid_index", "use_cuda", "rows": [{bytes,
    iterations, t_min_us, t_max_us, t_typical_us, t_avg_us, t_stdev_us, p99_us, p99_9_us}], "error", "unread"}.
    Columns a run did not print (a -D run prints only t_avg) are None."""
    out = {"test": None, "device": None, "link_type": None, "gid_index": None, "use_cuda": False, "rows": [],
           "error": None, "unread": []}
    cols = None
    for line in (text or "").splitlines():
        _banner(out, line)
        if "#bytes" in line and "usec" in line:
            header = line
            found = []
            for name, key in _LAT_COLS:
                at = header.find(name + "[")
                if at >= 0:
                    found.append((at, key))
                    header = header[:at] + " " * len(name) + header[at + len(name):]  # 99% inside 99.9%
            cols = [key for _, key in sorted(found)]
            continue
        if cols is not None and _NUM_ROW.match(line):
            nums = line.split()
            vals = [float(x) for x in nums[2:]]
            row = {"bytes": int(nums[0]), "iterations": int(nums[1])}
            row.update({key: None for _, key in _LAT_COLS})
            row.update(dict(zip(cols, vals)))
            out["rows"].append(row)
        elif cols is not None and not _BANNER.match(line) and line.strip():
            out["unread"].append(line.strip())
    return _finish(out, "lat", out["unread"], text)
