"""`nvidia-smi topo -m`: how each GPU reaches the other GPUs and the NICs, and the CPUs and NUMA nodes it is
closest to. The audit records and shows it; perftest takes the GPU closest to a rail's NIC for GPUDirect tests.

Layouts read (real captures in tests/fixtures/nvidia-smi, README.md there names each source):
- columns GPU0..GPUn, then NIC0..NICm with a "NIC Legend:" block naming each NIC (current drivers), or the RDMA
  devices named in the header itself (mlx5_0 …, older drivers, no NIC legend);
- tab separated as printed, or with the tabs turned into spaces by a copy; with or without the CPU Affinity,
  NUMA Affinity and GPU NUMA ID columns; prompt or banner lines before the header, notes after the legends;
- SOC, the name older drivers gave to SYS.

A matrix line that cannot be read, or a matrix cut before every GPU has its row, is an error naming the tool and
that line: a half-read matrix would pick the wrong GPU for a NIC without saying so.
"""

import re

from probes.common.command import run_cmd

ARGV = ["nvidia-smi", "topo", "-m"]
TOOL = "nvidia-smi topo -m"
# PCIe distances from nvidia-smi's legend, closest first: PIX one bridge, PXB several bridges, PHB through the CPU's
# host bridge, NODE across host bridges of one NUMA node, SYS across the inter-socket link.
PCIE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
_RENAMED = {"SOC": "SYS"}
_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_TRAILING = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID")
_TRAILING_KEYS = {"CPU Affinity": "cpu_affinity", "NUMA Affinity": "numa_affinity", "GPU NUMA ID": "gpu_numa_id"}
# nvidia-smi underlines the header with escape codes when it writes to a terminal (a pasted capture keeps them)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NIC = re.compile(r"^NIC\d+$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
_LEGEND = re.compile(r"^\s*(X|NV#|[A-Z]+)\s*=\s*(.+?)\s*$")


def _failed(why):
    return {"gpus": {}, "nics": [], "legend": {}, "warnings": [], "error": "%s: %s" % (TOOL, why)}


def _header_at(lines):
    """Index of the header line: its first word is GPU0 and its second is a column name, not a cell."""
    for i, line in enumerate(lines):
        words = line.split()
        if len(words) >= 2 and words[0] == "GPU0" and not _CELL.match(words[1]):
            return i
    return None


def _legends(lines):
    """The connection legend ({code: meaning}) and the NIC legend ({NIC0: mlx5_0}) after the matrix."""
    legend, nics, block = {}, {}, None
    for line in lines:
        text = line.strip()
        if text in ("Legend:", "NIC Legend:"):
            block = text
            continue
        if not text:
            continue
        m = _NIC_LEGEND.match(line) if block == "NIC Legend:" else _LEGEND.match(line) if block else None
        if m:
            (nics if block == "NIC Legend:" else legend)[m.group(1)] = m.group(2)
        else:
            block = None  # a note after the legend (a shell prompt, a code fence) ends it
    return legend, nics


def parse(text):
    """`nvidia-smi topo -m` -> {"gpus": {index: {"links": {column: cell}, "cpu_affinity", "numa_affinity",
    "gpu_numa_id"}}, "nics": [names in column order], "legend", "warnings", "error"}. Cells are X, NV<n> or a PCIe
    distance of PCIE_ORDER; a NIC column is named by the NIC legend where there is one. On error nothing else is
    filled in."""
    lines = [_ANSI.sub("", line).rstrip() for line in (text or "").splitlines()]
    if not any(line.strip() for line in lines):
        return _failed("no output")
    h = _header_at(lines)
    if h is None:
        first = next(line for line in lines if line.strip())
        return _failed("no matrix header (GPU0 …); first line: %r" % first.strip()[:200])
    head = lines[h]
    cut = _TRAILING.search(head)
    columns = (head[:cut.start()] if cut else head).split()
    trailing = [_TRAILING_KEYS[name] for name in _TRAILING.findall(head)]
    rows, end = {}, len(lines)
    for i in range(h + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.strip() == "Legend:":
            end = i
            break
        words = line.split()
        cells = words[1:1 + len(columns)]
        extra = words[1 + len(columns):]
        if words[0] not in columns or len(cells) < len(columns) or not all(_CELL.match(c) for c in cells) \
                or len(extra) > (len(trailing) if _GPU.match(words[0]) else 0):
            return _failed("cannot read line %d: %r" % (i + 1, line.strip()[:200]))
        rows[words[0]] = (cells, extra)
    missing = [c for c in columns if _GPU.match(c) and c not in rows]
    if missing:
        last = "line %d (%r)" % (end, lines[end - 1].strip()[:120]) if end > h + 1 else "its header"
        return _failed("the matrix ends after %s with no row for %s" % (last, ", ".join(missing)))
    legend, nic_names = _legends(lines[end:])
    warnings = []
    unnamed = [c for c in columns if _NIC.match(c) and c not in nic_names]
    if unnamed:
        warnings.append("no NIC Legend entry for %s: the RDMA device behind %s is unknown"
                        % (", ".join(unnamed), "them" if len(unnamed) > 1 else "it"))
    names = [nic_names.get(c, c) for c in columns]
    gpus = {}
    for col in columns:
        m = _GPU.match(col)
        if not m:
            continue
        cells, extra = rows[col]
        entry = {"links": {name: _RENAMED.get(cell, cell) for name, cell in zip(names, cells) if cell != "X"}}
        for key, value in zip(trailing, extra):
            entry[key] = None if value in ("N/A", "[N/A]") else value
        gpus[int(m.group(1))] = entry
    return {"gpus": gpus, "nics": [n for c, n in zip(columns, names) if not _GPU.match(c)], "legend": legend,
            "warnings": warnings, "error": None}


def _pcie_rank(cell):
    return PCIE_ORDER.index(cell) if cell in PCIE_ORDER else None


def nearest_nics(topo):
    """{gpu index: {"nics": [the NICs at its closest PCIe distance], "link": that distance}}; {} without NICs."""
    out = {}
    for index, gpu in (topo.get("gpus") or {}).items():
        ranks = {nic: _pcie_rank(gpu["links"].get(nic)) for nic in topo.get("nics") or []}
        ranks = {nic: r for nic, r in ranks.items() if r is not None}
        if ranks:
            best = min(ranks.values())
            out[index] = {"nics": [n for n, r in ranks.items() if r == best], "link": PCIE_ORDER[best]}
    return out


def pick_gpus(topo, nics):
    """The GPU for each NIC of `nics` (rails, in order): one at the NIC's closest PCIe distance. Where several are
    equally close (storage NICs, a GB200 tray whose NICs are SYS from every GPU) the k-th rail takes the
    (k mod n)-th of them, so rails are spread over the GPUs instead of piling onto GPU 0.
    Returns ({nic: {"gpu", "link"}}, None), or (None, why) when a NIC is not in the matrix."""
    gpus = topo.get("gpus") or {}
    picked = {}
    for k, nic in enumerate(nics):
        ranks = {i: _pcie_rank(g["links"].get(nic)) for i, g in gpus.items()}
        ranks = {i: r for i, r in ranks.items() if r is not None}
        if not ranks:
            return None, "%s has no column for %s (columns: %s)" % (TOOL, nic, ", ".join(topo.get("nics") or [])
                                                                   or "GPUs only")
        best = min(ranks.values())
        ties = sorted(i for i, r in ranks.items() if r == best)
        picked[nic] = {"gpu": ties[k % len(ties)], "link": PCIE_ORDER[best]}
    return picked, None


def read(timeout=20.0):
    """Run `nvidia-smi topo -m` here: (parsed, raw text); a command that failed is an error of the parse's form."""
    res = run_cmd(ARGV, timeout=timeout)
    if res.missing:
        return _failed("nvidia-smi not found"), ""
    if res.timed_out:
        return _failed("timed out after %gs" % timeout), res.stdout
    if res.rc != 0:
        text = (res.stderr.strip() or res.stdout.strip())
        first = text.splitlines()[0][:200] if text else "no output"
        return _failed("exit %s: %s" % (res.rc, first)), res.stdout
    return parse(res.stdout), res.stdout


def facts(topo):
    """The parse as audit facts: GPU indexes as strings (JSON keys), each GPU with its nearest NICs."""
    if topo.get("error"):
        return {"error": topo["error"]}
    near = nearest_nics(topo)
    gpus = {str(i): dict(g, nearest_nics=near.get(i, {}).get("nics", []), nearest_link=near.get(i, {}).get("link"))
            for i, g in sorted(topo["gpus"].items())}
    return {"gpus": gpus, "nics": topo["nics"], "warnings": topo["warnings"], "error": None}
