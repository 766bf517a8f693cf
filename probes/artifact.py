"""The one artifact schema every probe writes, its writer and its validator.

An artifact is one JSON document per probe invocation (design.md, "Artifacts"). `validate` is the node's check (the
probe CLI runs it before writing; standard library only, as everything under probes/). The controller validates
fetched artifacts against reports/data/schemas/artifact.schema.json instead; tests/unit/test_artifact.py keeps the
two in agreement.
"""

import json
import math
import os
import platform
import re
import tempfile
import time
from datetime import datetime, timezone

SCHEMA = "clustermax.assess/artifact/v1"
STATUSES = ("ok", "error", "skipped")
_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_VARIANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def utc_now():
    """RFC 3339 UTC timestamp with millisecond precision."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def artifact_filename(probe, variant=None):
    """`<probe>[-<variant>].json`, the name used on the node and under runs/…/artifacts/<host>/."""
    return "%s-%s.json" % (probe, variant) if variant else "%s.json" % probe


class Artifact:
    """Collects what one probe invocation measured; `to_dict()` gives the schema v1 document."""

    def __init__(self, probe, run_id, host, variant=None, params=None, tool_version=None):
        self.probe = probe
        self.variant = variant
        self.run_id = run_id
        self.host = host
        self.params = dict(params or {})
        self.status = "ok"
        self.reason = None
        self.device = {"backend": "cpu", "model": None, "count": 0, "driver": None, "torch": None}
        self.results = []
        self.facts = {}
        self.raw = []
        self.tool = {"name": "probes.%s" % probe, "version": tool_version}
        self.started_at = utc_now()
        self._t0 = time.monotonic()
        self.finished_at = None
        self.duration_s = None

    def add(self, metric, value, unit, **labels):
        """Record one measured number. Labels say what it was measured on (gpu, dtype, size …)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError("metric %r: value must be a number, got %r" % (metric, value))
        if not math.isfinite(value):
            # JSON has no NaN or inf: the writer would refuse the whole artifact, and everything measured with it
            raise ValueError("metric %r: value %r is not finite (JSON has no NaN or inf); say it in a fact instead"
                             % (metric, value))
        self.results.append({"metric": metric, "value": value, "unit": unit, "labels": labels})

    def skip(self, reason):
        self.status, self.reason = "skipped", reason

    def error(self, reason):
        self.status, self.reason = "error", reason

    def finish(self):
        self.finished_at = utc_now()
        self.duration_s = round(time.monotonic() - self._t0, 3)

    def to_dict(self):
        if self.finished_at is None:
            self.finish()
        doc = {
            "schema": SCHEMA,
            "run_id": self.run_id,
            "host": self.host,
            "probe": self.probe,
            "variant": self.variant,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_s": self.duration_s,
            "status": self.status,
            "reason": self.reason,
            "device": self.device,
            "params": self.params,
            "results": self.results,
            "facts": self.facts,
            "raw": self.raw,
            "tool": self.tool,
            "node": {"python": platform.python_version()},
        }
        return doc


def write_json_atomic(path, doc):
    """Write JSON through a temporary file and a rename, so a reader never sees half a document."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True, allow_nan=False)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def json_safe(value, where=""):
    """(value, [where]): a copy in which every NaN or inf float, and every object JSON cannot hold, is its text
    instead, and where each was (a dotted path). The writer refuses both; a probe that let one into its facts or
    labels still gets its artifact written, with the rest of what it measured."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value), [where]
    if isinstance(value, dict):
        items = [(k, json_safe(v, "%s.%s" % (where, k) if where else str(k))) for k, v in value.items()]
        return {k: v for k, (v, _) in items}, [w for _, (_, bad) in items for w in bad]
    if isinstance(value, (list, tuple)):
        items = [json_safe(v, "%s[%d]" % (where, i)) for i, v in enumerate(value)]
        return [v for v, _ in items], [w for _, bad in items for w in bad]
    if value is None or isinstance(value, (str, int, float)):
        return value, []
    return repr(value), [where]


def _is_rfc3339(value):
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True


def validate(doc):
    """Return a list of problems (empty when the document is a valid schema v1 artifact)."""
    errors = []
    if not isinstance(doc, dict):
        return ["artifact is not a JSON object"]
    if doc.get("schema") != SCHEMA:
        errors.append("schema is %r, expected %r" % (doc.get("schema"), SCHEMA))
    for key in ("run_id", "host", "probe"):
        if not isinstance(doc.get(key), str) or not doc.get(key):
            errors.append("%s must be a non-empty string" % key)
    if isinstance(doc.get("probe"), str) and not _NAME_RE.match(doc["probe"]):
        errors.append("probe %r is not a lower-case identifier" % doc["probe"])
    variant = doc.get("variant")
    if variant is not None and (not isinstance(variant, str) or not _VARIANT_RE.match(variant)):
        errors.append("variant %r is not a plain name" % (variant,))
    for key in ("started_at", "finished_at"):
        if not _is_rfc3339(doc.get(key)):
            errors.append("%s is not an RFC 3339 timestamp: %r" % (key, doc.get(key)))
    duration = doc.get("duration_s")
    if isinstance(duration, bool) or not isinstance(duration, (int, float)) or duration < 0:
        errors.append("duration_s must be a non-negative number")
    status = doc.get("status")
    if status not in STATUSES:
        errors.append("status %r is not one of %s" % (status, ", ".join(STATUSES)))
    elif status != "ok" and not doc.get("reason"):
        errors.append("status %s needs a reason" % status)
    device = doc.get("device")
    if not isinstance(device, dict) or device.get("backend") not in ("cuda", "rocm", "cpu"):
        errors.append("device.backend must be cuda, rocm or cpu")
    if not isinstance(doc.get("params"), dict):
        errors.append("params must be an object")
    if not isinstance(doc.get("facts", {}), dict):
        errors.append("facts must be an object")
    results = doc.get("results")
    if not isinstance(results, list):
        errors.append("results must be a list")
        results = []
    for i, row in enumerate(results):
        if not isinstance(row, dict):
            errors.append("results[%d] is not an object" % i)
            continue
        if not isinstance(row.get("metric"), str) or not row.get("metric"):
            errors.append("results[%d].metric must be a non-empty string" % i)
        value = row.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append("results[%d].value must be a number" % i)
        elif not math.isfinite(value):
            errors.append("results[%d].value %r is not finite" % (i, value))
        if not isinstance(row.get("unit"), str):
            errors.append("results[%d].unit must be a string" % i)
        if not isinstance(row.get("labels", {}), dict):
            errors.append("results[%d].labels must be an object" % i)
    raw = doc.get("raw")
    if not isinstance(raw, list) or not all(isinstance(r, str) and "/" not in r and r not in ("", ".", "..")
                                            for r in raw):
        errors.append("raw must be a list of plain file names beside the artifact")
    tool = doc.get("tool")
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        errors.append("tool.name must be a string")
    return errors
