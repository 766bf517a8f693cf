"""Provider-supplied downtime and maintenance logs (CSV or JSON) -> events.

Columns / keys (one record per line or per object):
    start, end        ISO 8601 with Z or an offset (a time without one needs the file's `timezone`)
    target            node name, rack name, or the cluster name ('*' = every node)
    scope             node | rack | cluster | gpu     (default node)
    kind              down | software_upgrade | security_patch | physical_maintenance | assessment  (default down)
    reason            free text
    gpu / gpus        gpu scope: which GPU, or how many GPUs
    announced_at      maintenance: when it was announced (the notice period is checked against sla_tiers.yml;
                      maintenance without one is downtime unless its kind needs no announcement)
    id                optional; default <file>#<record number>
JSON: a list of such objects, or {"timezone": "...", "events": [...]}. A record with an open end (empty end) is
refused: a provider log must say when an outage ended, or say it is ongoing by giving the time of the export.
"""

from __future__ import annotations

import csv
import json
import os

from reports.sla.events import Event, EventError
from reports.sla.timeutil import TimeError, parse_time

SOURCE = "import"


def _event(rec: dict, ident: str, tz) -> Event:
    try:
        start = parse_time(rec.get("start"), default_tz=tz)
        if rec.get("end") in (None, ""):
            raise EventError("%s: no end time" % ident)
        end = parse_time(rec.get("end"), default_tz=tz)
        if end <= start:
            # A wall-clock end in the hour the autumn change repeats reads as its first pass (fold 0). When that is
            # not after the start, the second pass is the one meant (01:40 EDT to 01:10 EST), as for sacctmgr
            # (reports/sla/sources/slurm.py); a record that still ends before it starts is refused below.
            end = max(end, parse_time(rec.get("end"), default_tz=tz, fold=1))
        announced = rec.get("announced_at")
        gpus = rec.get("gpus")
        return Event(id=str(rec.get("id") or ident), source=SOURCE, scope=str(rec.get("scope") or "node").lower(),
                     target=str(rec.get("target") or ""), kind=str(rec.get("kind") or "down").lower(),
                     start=start, end=end, reason=str(rec.get("reason") or ""),
                     gpu=str(rec["gpu"]) if rec.get("gpu") not in (None, "") else None,
                     gpus=int(gpus) if gpus not in (None, "") else 1,
                     announced_at=parse_time(announced, default_tz=tz) if announced not in (None, "") else None,
                     evidence={"record": ident})
    except TimeError as exc:
        raise EventError("%s: %s" % (ident, exc)) from exc
    except (TypeError, ValueError) as exc:
        if isinstance(exc, EventError):
            raise
        raise EventError("%s: %s" % (ident, exc)) from exc


def load(path: str, timezone: str | None = None) -> list[Event]:
    """Events of one file; any bad record fails the whole file with the record named (never half an import)."""
    name = os.path.basename(path)
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        if isinstance(doc, dict):
            timezone = doc.get("timezone") or timezone
            records = doc.get("events") or []
        else:
            records = doc
        return [_event(rec, "%s#%d" % (name, i + 1), timezone) for i, rec in enumerate(records)]
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return [_event({k.strip(): (v or "").strip() for k, v in row.items() if k}, "%s#%d" % (name, i + 1), timezone)
            for i, row in enumerate(rows)]
