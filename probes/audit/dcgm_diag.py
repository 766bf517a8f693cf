"""Reader of `dcgmi diag` output, JSON (`-j`) and the box-drawn text table, every DCGM layout seen in real captures
(tests/fixtures/dcgmi/README.md):

- JSON 2.x/3.x: {"DCGM GPU Diagnostic": {"test_categories": [{"category", "tests": [{"name", "results": [{"gpu_ids":
  "0" | "0,1,…" | 0, "status": "Pass"|"PASS"|…, "warnings": "text" | [{"warning": "text", "error_id": …}], "info"}]}]}],
  "version"}}. Entries may be null, and dcgmi may print a line before the document. dcgmi 3.3 writes "gpu_id", a
  Deployment test's messages as [{"warnings": "text", "error_id": …}] and "version" / "Driver Version Detected" beside
  "DCGM GPU Diagnostic" (dcgmi/Diag.cpp).
- JSON 4.x: {"DCGM Diagnostic": {"test_categories": […results [{"entity_group": "GPU", "entity_id": 0, …}],
  "test_summary": {"status"}]}, "metadata": {"version", "Driver Version Detected"}}.
- A run dcgmi could not complete: {"DCGM GPU Diagnostic": {"runtime_error": "…"}}.
- Text: a 27/48-column table. A test row's result is "Pass", "Fail", "Pass - All", "Fail - All", "Skip - All",
  "Warn - GPUs: 0, 1" (3.x: one row per status, continuation rows without a name) or "Pass" followed by "GPU0: Pass"
  rows (4.x). "Error", "Warning" and "Info" rows hold a message that dcgmi cut into 45-character slices.

Every reader returns {"format", "version", "driver", "tests": {name: pass|fail|warn|skip|not run}, "results": [{"test",
"category", "status", "gpus": {status: [GPU ids] | "all"}, "messages", "info"}], "failed", "warned", "complete",
"error"}. An output that cannot be read is an `error` naming dcgmi and the first line that could not be read, never an
empty result; a host engine dcgmi cannot reach is an error saying so.
"""

import json
import re

STATUSES = ("fail", "warn", "pass", "skip", "not run")  # worst first: a test's status is its worst GPU's
# dcgmi's own lines when nv-hostengine is not there (dcgmi/Command.cpp, "Host engine connection invalid")
_HOSTENGINE = re.compile(r"unable to establish a connection to the specified host|Unable to connect to host engine|"
                         r"Host engine connection invalid", re.I)
_ROW = re.compile(r"^\s*\|(.{27})\|(.*?)\|?\s*$")
_SECTION = re.compile(r"^\s*[|+]-----\s+(\w[\w ]*?)\s+-+\+")
_RESULT = re.compile(r"^(Pass|Fail|Warn|Skip|Not Run)\b(?:\s*-\s*(?:(All)|GPUs?:\s*([\d,\s]+)))?\s*$", re.I)
_GPU_RESULT = re.compile(r"^GPU\s*(\d+):\s*(Pass|Fail|Warn|Skip|Not Run)\b", re.I)
_GPU_NAMED = re.compile(r"\bGPU (\d+)\b")
_METADATA = {"DCGM Version": "version", "Driver Version Detected": "driver", "GPU Device IDs Detected": "device_ids"}
TOOL = "dcgmi diag"


def _empty(fmt):
    return {"format": fmt, "version": None, "driver": None, "tests": {}, "results": [], "failed": [], "warned": [],
            "complete": True, "error": None}


def _status(text):
    low = str(text or "").strip().lower()
    for s in STATUSES:
        if low.startswith(s):
            return s
    return low or None


def worst(statuses):
    present = [s for s in statuses if s]
    for s in STATUSES:
        if s in present:
            return s
    return present[0] if present else None


def _cannot_read(text, lineno=None):
    lines = (text or "").splitlines()
    if lineno is not None and 0 < lineno <= len(lines):
        line = lines[lineno - 1].strip()
    else:
        line = next((x.strip() for x in lines if x.strip()), "")
    return "%s: cannot read %r" % (TOOL, line[:200]) if line else "%s: no output" % TOOL


def hostengine_error(text):
    """The error to report when dcgmi says it cannot reach nv-hostengine, else None."""
    lines = [x.strip() for x in (text or "").splitlines() if _HOSTENGINE.search(x)]
    return "%s could not reach nv-hostengine: %s" % (TOOL, lines[0]) if lines else None


def _finish(out):
    for r in out["results"]:
        out["tests"][r["test"]] = worst([out["tests"].get(r["test"]), r["status"]])
    out["failed"] = sorted(k for k, v in out["tests"].items() if v == "fail")
    out["warned"] = sorted(k for k, v in out["tests"].items() if v == "warn")
    return out


def parse(text):
    """JSON when the output holds a JSON document, else the text table."""
    text = text or ""
    start = text.find("{")
    as_json = start >= 0 and (not text[:start].strip() or "DCGM" in text[start:start + 200])
    try:
        return parse_json(text) if as_json else parse_text(text)
    except (TypeError, AttributeError, ValueError) as exc:  # a layout not seen before: an error, not a traceback
        out = _empty("json" if as_json else "text")
        out["error"] = "%s: unexpected layout (%s: %s)" % (TOOL, type(exc).__name__, exc)
        return out


# ---- JSON ------------------------------------------------------------------------------------------------------


def _gpu_ids(result):
    if result.get("entity_group") not in (None, "GPU"):
        return []
    ids = result.get("entity_id", result.get("gpu_ids", result.get("gpu_id")))
    if ids is None:
        return []
    # -1: an error of no one GPU (DCGM 3.3's Deployment errors of the host: a library, an environment variable)
    if isinstance(ids, (list, tuple)):
        return [int(i) for i in ids if int(i) >= 0]
    return [int(i) for i in re.findall(r"-?\d+", str(ids)) if int(i) >= 0]


def _messages(value):
    """warnings/info: a string, a list of strings, or a list of {"warning": text, …} objects."""
    if value is None:
        return []
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, dict):
            # DCGM 3.3 names a Deployment test's message "warnings" inside its entry, a per-GPU one "warning"
            item = item.get("warning") or item.get("warnings") or item.get("message") or item.get("info")
        if item:
            out.append(str(item).strip())
    return out


def parse_json(text):
    out = _empty("json")
    start = text.find("{")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        lineno = text.count("\n", 0, start) + getattr(exc, "lineno", 1)
        out["error"] = hostengine_error(text) or _cannot_read(text, lineno)
        return out
    root = doc.get("DCGM Diagnostic") or doc.get("DCGM GPU Diagnostic") if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        out["error"] = _cannot_read(text)
        return out
    meta = doc.get("metadata") or {}
    # DCGM 4: in metadata; dcgmi 3.3 writes both beside "DCGM GPU Diagnostic", older ones inside it
    out["version"] = meta.get("version") or doc.get("version") or root.get("version")
    out["driver"] = (meta.get("Driver Version Detected") or doc.get("Driver Version Detected")
                     or root.get("Driver Version Detected"))
    if root.get("runtime_error"):
        out["error"] = "%s: %s" % (TOOL, str(root["runtime_error"]).strip())
        return out
    for category in root.get("test_categories") or []:
        for test in (category or {}).get("tests") or []:
            if not isinstance(test, dict) or not test.get("name"):
                continue  # DCGM 3.1 writes null between tests (NVIDIA/DCGM JsonResultTests.cpp "real output")
            gpus, messages, info = {}, [], []
            for res in test.get("results") or []:
                if not isinstance(res, dict):
                    continue
                st = _status(res.get("status"))
                ids = _gpu_ids(res)
                said = _messages(res.get("warnings"))
                if category.get("category") == "Deployment" and "gpu_id" in res:
                    # dcgmi 3.3 writes one result per Deployment test, its gpu_id the GPU of the test's *last*
                    # error (Diag.cpp HelperJsonAddBasicTests): the GPUs are the ones its messages name, else that
                    # gpu_id (a message naming no GPU: "processes with graphics contexts open")
                    ids = sorted({int(g) for m in said for g in _GPU_NAMED.findall(m)}) or ids
                if ids:
                    gpus.setdefault(st, []).extend(ids)
                messages += said
                info += _messages(res.get("info"))
            summary = _status((test.get("test_summary") or {}).get("status"))
            info += _messages((test.get("test_summary") or {}).get("info"))
            status = worst([summary] + list(gpus)) or worst(
                [_status(r.get("status")) for r in test.get("results") or [] if isinstance(r, dict)])
            out["results"].append({"test": str(test["name"]), "category": category.get("category"),
                                   "status": status, "gpus": {k: sorted(set(v)) for k, v in gpus.items()},
                                   "messages": messages, "info": info})
    if not out["results"]:
        out["error"] = _cannot_read(text)
    return _finish(out)


# ---- text ------------------------------------------------------------------------------------------------------


def parse_text(text):
    out = _empty("text")
    category, current, message, seen_table, unread = None, None, None, False, []
    footer = False
    for raw in (text or "").splitlines():
        line = raw.rstrip()
        sec = _SECTION.match(line)
        if sec:
            category, current, message = sec.group(1).strip(), None, None
            continue
        if re.match(r"^\s*\+[-=+]+\+\s*$", line):
            # the table's frame; the last plain one closes the table
            footer = seen_table and set(line.strip()) <= {"+", "-"}
            continue
        row = _ROW.match(line)
        if not row:
            if line.strip() and not line.strip().startswith("Successfully ran diagnostic"):
                unread.append(line.strip())
            continue
        seen_table, footer = True, False
        name, cell = row.group(1).strip(), row.group(2)
        body = cell[1:46] if cell.startswith(" ") else cell[:45]  # dcgmi cuts messages into 45-character slices
        value = cell.strip()
        if name in ("Diagnostic",) and value == "Result":
            continue
        if name in _METADATA:  # 3.3.8 builds print them without a Metadata heading
            out[_METADATA[name]] = value
            continue
        if name in ("Error", "Warning", "Info") and current is not None:
            message = [name, body]
            (current["info"] if name == "Info" else current["messages"]).append(message)
            continue
        if not name and message is not None and not _RESULT.match(value) and not _GPU_RESULT.match(value):
            message[1] += body
            continue
        result = _RESULT.match(value)
        per_gpu = _GPU_RESULT.match(value)
        if name and result:
            current = {"test": name, "category": category, "status": None, "gpus": {}, "messages": [], "info": []}
            out["results"].append(current)
            message = None
        if current is None or not (result or per_gpu):
            unread.append(line.strip())
            continue
        if per_gpu:
            st = _status(per_gpu.group(2))
            current["gpus"].setdefault(st, []).append(int(per_gpu.group(1)))
        else:
            st = _status(result.group(1))
            if result.group(2):
                current["gpus"][st] = "all"
            elif result.group(3):
                current["gpus"].setdefault(st, []).extend(int(x) for x in re.findall(r"\d+", result.group(3)))
        current["status"] = worst([current["status"], st])
    for r in out["results"]:
        r["messages"] = [m[1].strip() for m in r["messages"]]
        r["info"] = [m[1].strip() for m in r["info"]]
    if not out["results"]:
        out["error"] = hostengine_error(text) or ("%s: cannot read %r" % (TOOL, unread[0][:200]) if unread
                                                   else "%s: no output" % TOOL)
        return out
    out["complete"] = footer
    return _finish(out)
