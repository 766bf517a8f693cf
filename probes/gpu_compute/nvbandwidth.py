"""nvbandwidth: NVIDIA's copy bandwidth tool (H2D, D2H, D2D over the copy engines, device-local copies), run with
`-j` and parsed; a build without -j (before v0.5) is run again without it and its text read
(probes/gpu_compute/nvbandwidth_text.py) into the same testcases.

The binary is looked for at params.path, then on PATH, then in a few usual places; without it (or without an
NVIDIA GPU) the artifact is skipped with the reason. Each matrix cell becomes a `gbps` result labelled with the
testcase, its row and column, and the GPU it measures (`gpu`: the column of 1-row tests (CPU<->GPU, all-to-one),
the row GPU of GPU x GPU tests, whose column is `peer`; the layout is told by the matrix's shape, see cells). `gpu`
and `peer` are nvidia-smi's index, as in every other probe: nvbandwidth numbers GPUs as CUDA does, fastest first by
default, so it runs with CUDA_DEVICE_ORDER=PCI_BUS_ID (nvidia-smi's order), and where it prints each device's PCI
address (v0.7+) each number is matched to the nvidia-smi GPU of that address (numbering; the fact gpu_numbering says
which was done). Per
testcase: `gbps_sum`, `gbps_min`, `gbps_max`, `gbps_mean` over the cells with a number. Testcases nvbandwidth waived
or failed are facts (testcase.<name>). The output nvbandwidth printed is kept as nvbandwidth.out.json (JSON) or
nvbandwidth.out.txt (text).
"""

import json
import math
import os
import re
import shutil

from probes.common import device as vendor
from probes.common.command import run_cmd
from probes.common.tools import not_installed
from probes.gpu_compute.nvbandwidth_text import parse_text
from probes.gpu_compute.shapes import NVBANDWIDTH_TESTS, PROFILES
from probes.params import Param, Params

PARAMS = Params(
    profile=Param(str, "quick", "which testcases run (NVBANDWIDTH_TESTS in shapes.py)", choices=PROFILES),
    tests=Param(list, None, "nvbandwidth testcases to run (default: the profile's; empty: all of them)"),
    path=Param(str, "", "the nvbandwidth binary (default: on PATH, then in the usual places)"),
    tool_timeout=Param(float, 1800, "seconds nvbandwidth may run"),
)
RAW = "nvbandwidth.out.json"
# a testcase whose description ends in ns measures latency ("memory latency SM CPU(row) <-> GPU(column) (ns)")
LATENCY = re.compile(r"\(ns\)\s*$")
RAW_TEXT = "nvbandwidth.out.txt"
# a device's PCI address as nvbandwidth prints it: "0: NVIDIA H200 (00000000:18:00): (gpu-node-07)" in -j's
# "GPU Device list", "Device 0: NVIDIA A100-SXM4-80GB (00000000:34:00)" in text (v0.7+; older builds print none)
_ADDRESS = re.compile(r"\(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\)")
CANDIDATES = ("/usr/local/bin/nvbandwidth", "/usr/local/cuda/bin/nvbandwidth", "/opt/nvbandwidth/nvbandwidth")


def _number(cell):
    try:
        value = float(cell)
    except (TypeError, ValueError):
        return None  # "N/A": the pair was not measured (a GPU with itself, no peer access)
    return value if math.isfinite(value) else None


def parse(text):
    """nvbandwidth output, -j JSON (anything before the first '{' is ignored) or text, into a plain dict:
    {version, git_version, cuda_version, driver, devices, error, warning, testcases: [{name, status, description,
    matrix (rows of float or None), sum, error}]}."""
    start = text.find("{")
    if start < 0:
        return parse_text(text)
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:  # a document cut short: name its line
        lines = text[start:].splitlines()
        line = lines[exc.lineno - 1].strip() if 0 < exc.lineno <= len(lines) else ""
        raise ValueError("nvbandwidth: cannot read %r (%s)" % (line[:200], exc.msg)) from None
    root = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        raise ValueError("nvbandwidth output has no 'nvbandwidth' object")
    cases = []
    for case in root.get("testcases") or []:
        matrix = [[_number(c) for c in row] for row in case.get("bandwidth_matrix") or []]
        cases.append({
            "name": case.get("name"),
            "status": case.get("status"),
            "description": case.get("bandwidth_description"),
            "matrix": matrix,
            "sum": case.get("sum"),
            "error": case.get("error"),
        })
    return {
        "version": root.get("version"),
        "git_version": root.get("git_version"),
        "cuda_version": root.get("CUDA Runtime Version"),
        "driver": root.get("Driver Version"),
        "devices": root.get("GPU Device list") or [],
        "error": root.get("error"),
        "warning": root.get("warning"),
        "testcases": cases,
    }


def numbering(devices, gpus, visible=None):
    """nvbandwidth's device numbers -> nvidia-smi's index of the same GPU, and how that was found (the fact
    gpu_numbering). Matched by PCI address where nvbandwidth printed one for every device and each is a GPU
    nvidia-smi lists; else nvbandwidth's own numbers, which are nvidia-smi's when the run's CUDA_DEVICE_ORDER is
    PCI_BUS_ID and no GPU is hidden from it: a GPU CUDA lost, or CUDA_VISIBLE_DEVICES (`visible`), shifts every
    number after it, and the fact says so."""
    smi = {vendor.sysfs_bdf(g.get("pci_bus_id")): g["index"] for g in gpus if g.get("pci_bus_id")}
    addresses = []
    for entry in devices:
        m = _ADDRESS.search(str(entry))
        addresses.append(vendor.sysfs_bdf(m.group(1)) if m else None)
    own = "nvbandwidth's own (CUDA, in PCI bus order)"
    if not addresses or None in addresses:
        hidden = []
        if visible is not None:
            hidden.append("CUDA_VISIBLE_DEVICES=%s" % visible)
        if gpus and len(devices) < len(gpus):
            hidden.append("it lists %d of nvidia-smi's %d GPUs" % (len(devices), len(gpus)))
        return None, own + ": it printed no PCI address to match" + (
            "; %s: a number past a GPU it does not see is not nvidia-smi's" % " and ".join(hidden) if hidden else "")
    if len(set(addresses)) < len(addresses):  # a multinode run lists every process's GPU, of other hosts too
        return None, own + ": one PCI address listed twice (GPUs of several hosts)"
    unknown = [a for a in addresses if a not in smi]
    if unknown:
        return None, own + ": %s not among nvidia-smi's GPUs" % ", ".join(unknown)
    index = {n: smi[a] for n, a in enumerate(addresses)}
    moved = {n: i for n, i in index.items() if n != i}
    return index, "nvidia-smi index, matched by PCI address%s" % (
        "" if not moved else " (nvbandwidth's %s)" % ", ".join("%d is GPU %d" % kv for kv in sorted(moved.items())))


def cells(case, index=None):
    """(labels, value) of every measured cell of a testcase, with the GPU each cell is about (nvidia-smi's index
    through `index`, from numbering, where given)."""
    index = index or {}
    matrix = case["matrix"]
    if not matrix:
        return []
    # The layout is read from the matrix's shape, not from its description: v0.6 to v0.7 describe the bidirectional
    # device-to-device testcases as "memcpy CE CPU(row) <-> GPU(column) Read1 …" although they are GPU x GPU
    # (testcases_ce.cpp, multinode_testcases.cpp). Every host testcase has one row (PeerValueMatrix(1, deviceCount)),
    # a GPU x GPU one has as many rows as columns, and a bidirectional one stacks its Read1/Read2/Total (or
    # Write1/Write2/Total) matrices: three times as many rows.
    rows = len(matrix)
    cols = max(len(r) for r in matrix)
    out = []
    for r, row in enumerate(matrix):
        for c, value in enumerate(row):
            if value is None:
                continue
            labels = {"test": case["name"], "row": r, "col": c}
            if rows == 1:
                labels["gpu"] = c  # host <-> GPU, all-to-one, one-to-all: one cell per GPU column
            elif rows == cols:
                labels.update(gpu=r, peer=c)
            elif cols > 1 and rows % cols == 0:
                # several matrices of one testcase stacked (bidirectional tests): part 0, 1, 2 …
                labels.update(part=r // cols, gpu=r % cols, peer=c)
            else:
                labels["gpu"] = r  # one column per row (multinode bisect: process r -> its peer)
            for key in ("gpu", "peer"):
                if key in labels:
                    labels[key] = index.get(labels[key], labels[key])
            out.append((labels, value))
    return out


def find_binary(params):
    explicit = params["path"]
    if explicit:
        return (explicit, None) if os.access(explicit, os.X_OK) else (None, "nvbandwidth not found at %s" % explicit)
    found = shutil.which("nvbandwidth")
    if found:
        return found, None
    for path in CANDIDATES:
        if os.access(path, os.X_OK):
            return path, None
    return None, not_installed(params, "nvbandwidth", "nvbandwidth is not installed (not on PATH, nor in %s; "
                               "gpu_compute_nvbandwidth_path)" % ", ".join(CANDIDATES))


def record(art, parsed, gpus=(), visible=None):
    """Results and facts from a parsed nvbandwidth document, the GPUs labelled with nvidia-smi's index (gpus: the
    node's, from probes.common.device.describe; visible: the run's CUDA_VISIBLE_DEVICES); returns the testcases in
    error."""
    index, art.facts["gpu_numbering"] = numbering(parsed["devices"], gpus, visible)
    art.facts.update({"nvbandwidth_version": parsed["version"], "nvbandwidth_git": parsed["git_version"],
                      "cuda_driver_api": parsed["cuda_version"], "driver": parsed["driver"],
                      "devices_listed": len(parsed["devices"])})
    if parsed["warning"]:
        art.facts["warning"] = parsed["warning"]
    failed = []
    for case in parsed["testcases"]:
        if case["status"] != "Passed":
            art.facts["testcase.%s" % case["name"]] = case["status"] + (": %s" % case["error"] if case["error"] else "")
            if case["status"] not in ("Waived",):
                failed.append("%s: %s%s" % (case["name"], case["status"],
                                            " (%s)" % case["error"] if case["error"] else ""))
            continue
        values = []
        if LATENCY.search(case.get("description") or ""):
            # a latency testcase (host_device_latency_sm, v0.8+): its matrix is in ns, in the same JSON field and
            # the same text layout as the bandwidths; a sum of latencies means nothing
            for labels, value in cells(case, index):
                art.add("latency_ns", value, "ns", **labels)
                values.append(value)
            if values:
                art.add("latency_ns_mean", sum(values) / len(values), "ns", test=case["name"])
                art.add("latency_ns_max", max(values), "ns", test=case["name"])
            art.facts["testcase.%s" % case["name"]] = "Passed"
            continue
        measured = cells(case, index)
        for labels, value in measured:
            art.add("gbps", value, "GB/s", **labels)
        # A bidirectional testcase stacks its matrices (each direction, then their total: part 0, 1, 2): its sum,
        # min, mean and max are those of the total, as nvbandwidth's own SUM line is; one direction's cells beside
        # the two directions' total would double the sum and mix two kinds of number.
        last = max((labels.get("part", 0) for labels, _ in measured), default=0)
        values = [value for labels, value in measured if labels.get("part", 0) == last]
        if values:
            art.add("gbps_sum", sum(values), "GB/s", test=case["name"])
            art.add("gbps_min", min(values), "GB/s", test=case["name"])
            art.add("gbps_max", max(values), "GB/s", test=case["name"])
            art.add("gbps_mean", sum(values) / len(values), "GB/s", test=case["name"])
        art.facts["testcase.%s" % case["name"]] = "Passed"
    return failed


def run(art, params, out_dir):
    dev, gpus, tool_facts = vendor.describe()
    art.device = dev
    art.facts.update(tool_facts)
    if dev["backend"] != "cuda":
        art.skip("no NVIDIA GPU on this node (%s): nvbandwidth measures NVIDIA GPUs only"
                 % (tool_facts.get("gpu_error") or "gpu tool: %s" % tool_facts.get("gpu_tool")))
        return
    binary, why = find_binary(params)
    if binary is None:
        art.skip(why)
        return
    art.facts["binary"] = binary
    tests = params["tests"]
    if tests is None:
        tests = NVBANDWIDTH_TESTS[params["profile"]]
    selected = ["-t"] + list(tests) if tests else []
    argv = [binary, "-j"] + selected
    # nvidia-smi's order, not CUDA's default fastest-first (usually the same on a node of one GPU model, not on others)
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    res = run_cmd(argv, timeout=params["tool_timeout"], env=env)
    raw = RAW
    if not res.timed_out and "{" not in res.stdout:
        # -j came with v0.5: an older build refuses it ("unrecognised option '-j'"), and a build that broke before
        # its JSON printed nothing; run as text, which also names the testcase that broke
        refused = (res.stderr or res.stdout).strip().splitlines()
        art.facts["json_unavailable"] = refused[0][:200] if refused else "exit %s, no output" % res.rc
        argv = [binary] + selected
        res = run_cmd(argv, timeout=params["tool_timeout"], env=env)
        raw = RAW_TEXT
    with open(os.path.join(out_dir, raw), "w") as fh:
        fh.write(res.stdout)
    art.raw.append(raw)
    if res.timed_out:
        art.error("nvbandwidth timed out: %s" % " ".join(argv))
        return
    try:
        parsed = parse(res.stdout)
    except (ValueError, TypeError, AttributeError) as exc:  # unreadable, or JSON of a layout not seen before
        tail = (res.stderr or res.stdout).strip().splitlines()
        art.error("nvbandwidth exit %s, output not readable (%s): %s" % (res.rc, exc, tail[-1] if tail else ""))
        return
    failed = record(art, parsed, gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if parsed["error"]:
        failed.insert(0, str(parsed["error"]).strip().splitlines()[0])
    if failed:
        art.error("; ".join(failed))
    elif not any(c["status"] == "Passed" for c in parsed["testcases"]):
        art.skip("nvbandwidth ran no testcase (all waived): %s" % ", ".join(c["name"] for c in parsed["testcases"]))
