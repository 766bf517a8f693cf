"""Parsers for nccl-tests output: the text table every version prints, and the JSON file of `-J <file>`.

Text (nccl-tests src/util.cu): header lines starting with '#' (`# nccl-tests version …`, `# Collective test
starting: <prog>`, `# nThread 1 nGpus 8 minBytes … maxBytes … step: 2(factor) warmup iters: 5 iters: 20 …`, one
`#  Rank  0 Group  0 Pid … on <host> device  0 [<pci>] <name>` per rank; rccl-tests prints no Group), the library's
own version lines (`NCCL version 2.19.3+cuda12.2`; RCCL's `RCCL version : 2.22.3-HEAD:7d8d67c`, `HIP version  : …`,
`ROCm version : …`, `Librccl path : …`; rccl-tests' `rccl-tests: Version develop:a7809b3`), a column header
(`size count type redop root | time algbw busbw #wrong` out-of-place then in-place; older releases say `error`
and print fewer lead columns, see _data_row), one line per size, then the footer `# Out of bounds values : N
OK|FAILED` and `# Avg bus bandwidth : X`. A run that hung and was killed has no footer: `complete` is False and
`last_size` says how far it got. `mpirun --tag-output` prefixes ([1,0]<stdout>:) are removed.

JSON (-J, format version 2): {version, args, env, nccl_version, config{…, devices[]}, results[{size, count, type,
redop, root, out_of_place{time|cpu_time, alg_bw, bus_bw, nwrong}, in_place{…}, actual_iterations}],
out_of_bounds{count, okay}, average_bus_bandwidth{bandwidth, okay}, errors[]}. A file cut short by a hang is
salvaged record by record.
"""

import json
import re

from probes.network.busbw import collective_from_program

# what launchers put before each line: mpirun --tag-output "[1,0]<stdout>:", srun --label " 0: ", torchrun --tee
# "[default0]:", and Ray/SkyPilot's "(head, rank=0, pid=3808) " before any of them
_TAG = re.compile(r"^(?:\([^)]*\)\s)?(?:\[[\d,]+\](?:<stdout>|<stderr>)?:?\s?|\s*\d+:\s|\[default\d+\]:)?")
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                   r"\[([^\]]*)\]\s*(.*)$")
_NUM = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
# the library's and the tests' version lines, with or without '#' and an NCCL_DEBUG prefix ("node [0] NCCL INFO ")
_LIBRARY = (("library_version", re.compile(r"\b(?:NCCL|RCCL) version\s*:?\s*(\d[\w.+:-]*)")),
            ("hip_version", re.compile(r"^HIP version\s*:\s*(\S+)")),
            ("rocm_version", re.compile(r"^ROCm version\s*:\s*(\S+)")),
            ("library_path", re.compile(r"^Lib[nr]ccl path\s*:\s*(\S+)")))
_RCCL_TESTS = re.compile(r"^rccl-tests: Version (\S+)")
# nccl-tests' own failure lines: "Test NCCL failure …", "test: Test CUDA failure common.cu:941 'system not yet
# initialized'" (NVIDIA/nccl-tests#264), " .. test pid 54340: Test failure common.cu:891"
_FAILURE = re.compile(r"Test (?:NCCL |CUDA )?failure|Cuda failure|NCCL failure", re.I)


def _number(token):
    if token in ("N/A", "-nan", "nan", "inf", "-inf"):
        return None
    if _NUM.match(token):
        value = float(token)
        return int(value) if value.is_integer() and "." not in token and "e" not in token.lower() else value
    return None


def _header_params(line, out):
    """`# nThread 1 nGpus 8 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20 …`."""
    for key, pattern in (("nthreads", r"nThread (\d+)"), ("ngpus", r"nGpus (\d+)"), ("min_bytes", r"minBytes (\d+)"),
                         ("max_bytes", r"maxBytes (\d+)"), ("warmup_iters", r"warmup iters: (\d+)"),
                         ("iters", r"(?<!warmup )(?<!agg )\biters: (\d+)"), ("validation", r"validation: (\d+)")):
        m = re.search(pattern, line)
        if m:
            out[key] = int(m.group(1))
    m = re.search(r"step: (\d+)\((factor|bytes)\)", line)
    if m:
        out["step_" + m.group(2)] = int(m.group(1))


def parse_text(text, program=None):
    """nccl-tests stdout -> {"program", "collective", "version", "nccl_version", "params", "devices", "rows",
    "avg_busbw", "out_of_bounds", "complete", "last_size", "errors"}.

    rows: one per size and placement: {"size", "count", "type", "redop", "root", "placement", "time_us",
    "algbw_gbps", "busbw_gbps", "wrong"} (wrong is None when validation was off: N/A). unread: the lines that look
    like result rows but could not be read. tables, footers: how many headers (`# nThread …`) and footers
    (`# Avg bus bandwidth`) were printed: one each for one run of one world (not_one_world)."""
    out = {"program": program, "version": None, "nccl_version": None, "params": {}, "devices": [], "rows": [],
           "avg_busbw": None, "out_of_bounds": None, "out_of_bounds_ok": None, "complete": False, "last_size": None,
           "errors": [], "tests": None, "nccl_headers": None, "library": None, "library_version": None,
           "hip_version": None, "rocm_version": None, "library_path": None, "unread": [], "tables": 0, "footers": 0}
    columns = None
    for raw_line in (text or "").splitlines():
        line = _TAG.sub("", raw_line.rstrip())
        stripped = line.strip()
        if not stripped:
            continue
        if _library_line(stripped, out):
            continue
        if stripped.startswith("#"):
            body = stripped[1:].strip()
            m = re.match(r"nccl-tests version (\S+).*?(?:nccl-headers=(\d+) )?nccl-library=(\d+)", body)
            if m:
                out["tests"], out["version"], out["nccl_version"] = "nccl-tests", m.group(1), int(m.group(3))
                out["nccl_headers"] = int(m.group(2)) if m.group(2) else None
            m = re.match(r"Collective test starting: (\S+)", body)
            if m:
                out["program"] = m.group(1)
            if body.startswith("nThread"):
                _header_params(body, out["params"])
                out["tables"] += 1  # each process of the run prints its own header
            m = _RANK.match(stripped)
            if m:
                out["devices"].append({"rank": int(m.group(1)), "group": int(m.group(2) or 0), "pid": int(m.group(3)),
                                       "host": m.group(4), "device": int(m.group(5)), "pci": m.group(6),
                                       "name": m.group(7).strip()})
            tokens = body.split()
            if tokens[:2] == ["size", "count"]:
                columns = tokens
            m = re.match(r"Out of bounds values\s*:\s*(\d+)\s*(\w+)?", body)
            if m:
                out["out_of_bounds"] = int(m.group(1))
                out["out_of_bounds_ok"] = (m.group(2) or "OK") == "OK"
            m = re.match(r"Avg bus bandwidth\s*:\s*([\d.eE+-]+)", body)
            if m:
                out["avg_busbw"] = float(m.group(1))
                out["complete"] = True
                out["footers"] += 1
            if body.startswith("error:"):
                out["errors"].append(body[len("error:"):].strip())
            continue
        if "NCCL WARN" in stripped or _FAILURE.search(stripped):
            out["errors"].append(stripped[:300])
            continue
        row, unreadable = _data_row(stripped.split(), columns)
        if unreadable:
            out["unread"].append(stripped[:200])
        if row:
            out["rows"].extend(row)
            out["last_size"] = row[0]["size"]
    if out["program"] is None and program:
        out["program"] = program
    out["collective"] = collective_from_program(out["program"]) if out["program"] else None
    return out


def _library_line(line, out):
    """The library's and the tests' own version lines; True when `line` was one (nothing else to read in it)."""
    m = _RCCL_TESTS.match(line)
    if m:
        out["tests"], out["version"] = "rccl-tests", m.group(1)
        return True
    body = line.lstrip("#").strip()
    for key, rx in _LIBRARY:
        m = rx.search(body) if key == "library_version" else rx.match(body)
        if m and out[key] is None:
            out[key] = m.group(1)
            if key == "library_version":
                out["library"] = "RCCL" if "RCCL version" in body else "NCCL"
            return True
    return False


def _is_int(token):
    return re.match(r"^-?\d+$", token) is not None


def _data_row(tokens, columns):
    """A table line -> (records, unreadable): the two records (out-of-place, in-place) and False; ([], False) for
    a line that is no table row; ([], True) for one that looks like a row (size and count first, after a column
    header or as long as a row) but cannot be read: never a guess at its numbers.

    The lead columns differ by release and collective: `size count type` (all_gather, hypercube and alltoall of
    older nccl-tests, rccl-tests; alltoall printed an empty redop), `size count type root` (broadcast, gather,
    scatter of older releases, NVIDIA/nccl-tests#82), `size count type redop` (older all_reduce, reduce_scatter),
    `size count type redop root` (every collective since 2.13). Where the numbers start is read from the header
    (its first `time`), root and redop by their header names; a row with fewer lead cells than its header printed
    blanks there (an empty redop), and the cells it has are told apart by kind (a root is an integer, a redop a
    word). The placements' cells are counted from the end of the line, unless the header names columns after them
(#iters of a derived util.cu): a row with all of the header's columns is then read by them from the left."""
    if len(tokens) < 3 or not tokens[0].isdigit() or not tokens[1].isdigit() or (columns is None and len(tokens) < 8):
        return [], False
    per_place = 8 if columns is not None and "i_min" in columns else 4  # -I: i_min i_max i_p99 i_cv% as well
    header_lead = columns[3:columns.index("time")] if columns is not None and "time" in columns else None
    named_tail = len(columns) - 3 - len(header_lead) - 2 * per_place if header_lead is not None else 0
    if named_tail > 0 and len(tokens) >= len(columns):
        # a derived util.cu prints columns past the in-place ones, named in its header ("#wrong #iters", then an
        # unnamed experiment name): a row with every column the header names is read by the header, from the left
        tokens = tokens[:len(columns) - named_tail]
    # every release prints both placements: the lead cells after size, count and type are what is left once they
    # are taken from the end of the line (a line cut short leaves too few, and is not read)
    extra = len(tokens) - 3 - 2 * per_place
    lead = tokens[3:3 + extra]
    if extra < 0 or extra > (2 if header_lead is None else len(header_lead)) or _number(tokens[2]) is not None:
        return [], True
    if header_lead is not None and len(lead) == len(header_lead):
        named = dict(zip(header_lead, lead))
    else:
        named = {("root" if _is_int(t) else "redop"): t for t in lead}
    root, redop = named.get("root"), named.get("redop")
    if (root is not None and not _is_int(root)) or (redop is not None and _number(redop) is not None):
        return [], True
    base = {"size": int(tokens[0]), "count": int(tokens[1]), "type": tokens[2], "redop": redop,
            "root": int(root) if root is not None else None}
    # older nccl-tests print "error" there, the largest deviation seen (0e+00, 2e-03, 1e+00): not a count of wrong
    # elements; they count those only in the footer's "Out of bounds values". "#wrong" is a count, printed with %g
    # when large (1.9307e+06). Without a header only a plain integer is taken for a count.
    counts = columns is not None and "#wrong" in columns
    deviation = columns is not None and "error" in columns and not counts
    records = []
    cells = tokens[3 + extra:]
    for i, placement in enumerate(("out_of_place", "in_place")):
        time_us, algbw, busbw, wrong = cells[i * per_place:i * per_place + 4]
        values = [_number(v) for v in (time_us, algbw, busbw)]
        if None in values:
            return [], True
        count = _number(wrong) if counts or (not deviation and _is_int(wrong)) else None  # N/A: validation off
        records.append(dict(base, placement=placement, time_us=float(values[0]), algbw_gbps=float(values[1]),
                            busbw_gbps=float(values[2]), wrong=int(count) if count is not None else None))
    return records, False


def _placement(record, key):
    body = record.get(key)
    if not isinstance(body, dict):
        return None
    time_us = body.get("time", body.get("cpu_time"))

    def num(v):
        return None if v in (None, "nan") else float(v)

    return {"time_us": num(time_us), "algbw_gbps": num(body.get("alg_bw")), "busbw_gbps": num(body.get("bus_bw")),
            "wrong": None if body.get("nwrong") in (None, "nan") else int(float(body["nwrong"]))}


def _salvage(text):
    """The complete result records of a JSON file that was cut short (the run hung and was killed)."""
    start = text.find('"results"')
    if start < 0:
        return None, []
    head = {}
    decoder = json.JSONDecoder()
    m = re.search(r'"nccl_version"\s*:\s*(\d+)', text[:start])
    if m:
        head["nccl_version"] = int(m.group(1))
    m = re.search(r'"args"\s*:\s*(\[[^\]]*\])', text[:start])
    if m:
        try:
            head["args"] = json.loads(m.group(1))
        except ValueError:
            pass
    pos = text.find("[", start) + 1
    records = []
    while pos < len(text):
        while pos < len(text) and text[pos] in " \n\r\t,":
            pos += 1
        if pos >= len(text) or text[pos] != "{":
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except ValueError:
            break
        records.append(obj)
    return head, records


def parse_json(text, program=None):
    """The -J file -> the same shape as parse_text (complete False when the file was cut short)."""
    out = {"program": program, "version": None, "nccl_version": None, "params": {}, "devices": [], "rows": [],
           "avg_busbw": None, "out_of_bounds": None, "out_of_bounds_ok": None, "complete": False, "last_size": None,
           "errors": []}
    try:
        doc = json.loads(text)
        records = doc.get("results") or []
    except ValueError:
        doc, records = _salvage(text or "")
        doc = doc or {}
    out["json_version"] = doc.get("version")
    out["nccl_version"] = doc.get("nccl_version")
    args = doc.get("args") or []
    if args and not program:
        out["program"] = args[0]
    config = doc.get("config") or {}
    for src, dst in (("ngpus", "ngpus"), ("nthreads", "nthreads"), ("minimum_bytes", "min_bytes"),
                     ("maximum_bytes", "max_bytes"), ("step_factor", "step_factor"), ("step_bytes", "step_bytes"),
                     ("warmup_iters", "warmup_iters"), ("iterations", "iters"), ("validation", "validation")):
        if src in config:
            out["params"][dst] = config[src]
    for dev in config.get("devices") or []:
        out["devices"].append({"rank": dev.get("rank"), "group": dev.get("group"), "pid": dev.get("pid"),
                               "host": dev.get("hostname"), "device": dev.get("device"), "pci": dev.get("device_hex"),
                               "name": dev.get("device_info")})
    for rec in records:
        try:
            root = int(str(rec.get("root", "")).strip())
        except ValueError:
            root = None
        base = {"size": int(rec["size"]), "count": int(rec["count"]), "type": rec.get("type"),
                "redop": rec.get("redop"), "root": root}
        for key in ("out_of_place", "in_place"):
            body = _placement(rec, key)
            if body and body["time_us"] is not None:
                out["rows"].append(dict(base, placement=key, **body))
        out["last_size"] = base["size"]
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict):
        out["out_of_bounds"] = oob.get("count")
        out["out_of_bounds_ok"] = str(oob.get("okay")).lower() == "true"
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict) and avg.get("bandwidth") is not None:
        out["avg_busbw"] = float(avg["bandwidth"])
        out["complete"] = True
    out["errors"] = [e for e in (doc.get("errors") or []) if e]
    out["collective"] = collective_from_program(out["program"]) if out["program"] else None
    return out


# Where nccl-tests' output names the process that broke: NCCL's own prefix "host:pid:tid [cudaDev] NCCL WARN ..." (its
# debug lines), nccl-tests' "host: Test NCCL failure ..." and " .. host pid 54340: Test failure ...", and the MPI
# rank of the line from mpirun --tag-output ("[1,12]<stdout>:") or srun --label ("12: ").
_WARN_AT = re.compile(r"^(?P<host>[^\s:\[]+):(?P<pid>\d+):\d+ \[(?P<device>\d+)\].*\bNCCL WARN\b")
_TEST_FAIL_AT = re.compile(r"^(?:\.\.\s+)?(?P<host>[^\s:\[]+)(?: pid (?P<pid>\d+))?: Test (?:NCCL |CUDA )?failure\b")
_TAG_RANK = re.compile(r"^(?:\([^)]*\)\s)?(?:\[\d+,(?P<mpi>\d+)\]|\s*(?P<srun>\d+):\s)")


def failing_processes(text):
    """The processes an nccl-tests output names in its NCCL WARN and Test failure lines, as printed: [{"host", "pid",
    "device", "rank", "line"}] in order of appearance, one per (host, pid, device), rank from the launcher's tag or
    else from the rank line of the same host and pid (None where neither says). Raw observations: which host broke
    is the grader's to say."""
    devices = parse_text(text)["devices"]
    out, seen = [], set()
    for raw_line in (text or "").splitlines():
        tag = _TAG_RANK.match(raw_line)
        line = _TAG.sub("", raw_line.rstrip()).strip()
        m = _WARN_AT.match(line) or _TEST_FAIL_AT.match(line)
        if not m:
            continue
        host, pid = m.group("host"), int(m.group("pid")) if m.group("pid") else None
        device = int(m.group("device")) if "device" in m.groupdict() and m.group("device") is not None else None
        rank = None
        if tag and (tag.group("mpi") or tag.group("srun")):
            rank = int(tag.group("mpi") or tag.group("srun"))
        else:
            mine = [d for d in devices if d["host"] == host and pid is not None and d["pid"] == pid
                    and (device is None or d["device"] == device)]
            rank = mine[0]["rank"] if len(mine) == 1 else None
        key = (host, pid, device)
        if key in seen:
            continue
        seen.add(key)
        out.append({"host": host, "pid": pid, "device": device, "rank": rank, "line": line[:300]})
    return out


def nranks(parsed):
    """Ranks in the run: one device line per rank id (MPI runs list all ranks), or threads × GPUs of one process
    (a single-process JSON file lists only the first device). None when neither is known. Rank ids are counted
    once: processes that were each a world of their own all print rank 0 (not_one_world)."""
    params = parsed["params"]
    per_process = int(params["ngpus"]) * int(params.get("nthreads") or 1) if params.get("ngpus") else 0
    return max(len({d["rank"] for d in parsed["devices"]}), per_process) or None


def not_one_world(parsed, ranks=None):
    """Why an nccl-tests text output is not one run of one world of `ranks` ranks, or None when it is.

    nccl-tests built without MPI=1 and started by srun or mpirun runs every process as a world of its own: each
    prints its own header, its own rank 0 and its own table and footer, and measures only its own node
    (NVIDIA/nccl-tests#107, #182, #306). Those numbers are no multi-node measurement, whatever the host names say."""
    ids = [d["rank"] for d in parsed["devices"]]
    repeated = sorted({r for r in ids if ids.count(r) > 1})
    if repeated:
        hosts = sorted({d["host"] for d in parsed["devices"] if d["rank"] == repeated[0]})
        return "rank %d printed %d times (on %s): each process ran its own world" % (
            repeated[0], ids.count(repeated[0]), ", ".join(hosts))
    blocks = max(parsed.get("tables") or 0, parsed.get("footers") or 0)
    if blocks > 1:
        return "%d result tables in one output: each process ran its own world" % blocks
    if ranks and ids and len(ids) != ranks:
        return "%d ranks printed where the world has %d" % (len(ids), ranks)
    return None
