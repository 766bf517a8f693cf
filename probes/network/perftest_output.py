"""Parser for perftest's bandwidth tools (ib_write_bw, ib_read_bw, ib_send_bw): the client's text report.

The report is a banner (`RDMA_Write BW Test`, `Device : mlx5_0`, `Link type : IB|Ethernet`, `GID index : 3`, …),
then `#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]` and one line per message size.
With --report_gbits the unit is Gbit/s (1e9 bit/s); without it perftest prints MB/sec (2^20 bytes), converted here.
"""

import re

_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def parse_bw(text):
    """-> {"test", "device", "link_type", "gid_index", "use_cuda", "unit", "rows": [{bytes, iterations,
    bw_peak_gbits, bw_avg_gbits, msg_rate_mpps}], "error"}"""
    out = {"test": None, "device": None, "link_type": None, "gid_index": None, "use_cuda": False, "unit": None,
           "rows": [], "error": None}
    for line in (text or "").splitlines():
        m = re.match(r"^\s+(\S.*? BW Test)\s*$", line)
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
        m = re.search(r"BW average\[(Gb/sec|MB/sec)\]", line)
        if m:
            out["unit"] = m.group(1)
        m = _ROW.match(line)
        if m and out["unit"]:
            scale = 1.0 if out["unit"] == "Gb/sec" else 8 * 2 ** 20 / 1e9
            out["rows"].append({"bytes": int(m.group(1)), "iterations": int(m.group(2)),
                                "bw_peak_gbits": float(m.group(3)) * scale, "bw_avg_gbits": float(m.group(4)) * scale,
                                "msg_rate_mpps": float(m.group(5))})
        if out["error"] is None and re.search(r"Couldn't|Unable to|Failed to|failed|error", line) \
                and "Data ex. method" not in line:
            out["error"] = line.strip()
    return out
