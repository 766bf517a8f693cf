"""The assessment's own reboot and fault-injection timings -> exclusion events of kind `assessment`.

The reliability phases (roles reboot and fault_injection) did not exist when this adapter was written; it reads
what they are expected to write, and anything else is skipped with a note. Expected artifacts (schema v1, see
docs/design.md): runs/<provider>/<run_id>/artifacts/<host>/reboot*.json and fault_injection*.json with

    status: ok | error | skipped          (skipped artifacts are ignored)
    host: the node
    started_at / finished_at: RFC 3339 UTC (always present in schema v1)
    facts:
      reboot:           issued_at   (when the reboot command was sent)
                        ready_at    (when the node ran a basic command again: nvidia-smi, or ssh on CPU hosts)
                        optional: ssh_down_at, ssh_up_at, boot_id_before, boot_id_after
      fault_injection:  injected_at (the fault went in)
                        recovered_at (the node was back in service: resumed in Slurm / a basic command ran)
                        optional: detected_at, drained_at, method (dcgm | kmsg | pcie_reset), xid

The interval [issued_at, ready_at] (reboot) or [injected_at, recovered_at] (fault injection) becomes an
exclusion of kind `assessment` for that node: the health probe sees it as downtime, the review cuts it out and
names the artifact as the reason. When the facts are missing the artifact's [started_at, finished_at] is used and
the evidence says so (the probe's own runtime brackets the disruption it caused).
"""

from __future__ import annotations

import glob
import json
import os

from reports.load import read_json_or_problem
from reports.sla.events import Event
from reports.sla.timeutil import TimeError, parse_time

SOURCE = "assessment"
FIELDS = {"reboot": ("issued_at", "ready_at"), "fault_injection": ("injected_at", "recovered_at")}


def _kind_of(name: str) -> str | None:
    base = os.path.basename(name)
    for kind in FIELDS:
        if base.startswith(kind):
            return kind
    return None


def events_from_artifacts(paths, notes: list | None = None) -> list[Event]:
    notes = notes if notes is not None else []
    out = []
    for path in sorted(paths):
        kind = _kind_of(path)
        if kind is None:
            continue
        doc, problem = read_json_or_problem(path)
        if problem:
            notes.append("%s: unreadable (%s)" % (path, problem))
            continue
        if doc.get("status") == "skipped":
            continue
        host = doc.get("host") or os.path.basename(os.path.dirname(path))
        facts = doc.get("facts") or {}
        first, last = FIELDS[kind]
        try:
            if facts.get(first) and facts.get(last):
                start, end, basis = parse_time(facts[first]), parse_time(facts[last]), "%s..%s" % (first, last)
            else:
                start, end = parse_time(doc["started_at"]), parse_time(doc["finished_at"])
                basis = "started_at..finished_at (no %s/%s facts)" % (first, last)
        except (KeyError, TimeError) as exc:
            notes.append("%s: no usable times (%s)" % (path, exc))
            continue
        if end <= start:
            notes.append("%s: ends before it starts" % path)
            continue
        run_id = doc.get("run_id") or os.path.basename(os.path.dirname(os.path.dirname(os.path.dirname(path))))
        out.append(Event(id="%s:%s:%s:%s" % (SOURCE, run_id, host, os.path.basename(path)), source=SOURCE,
                         scope="node", target=host, kind="assessment", start=start, end=end,
                         reason="%s test of the assessment (run %s)" % (kind.replace("_", " "), run_id),
                         evidence={"artifact": path, "basis": basis, "status": doc.get("status")}))
    return out


def overlaps(path: str, start_us: int, end_us: int) -> bool:
    """Whether an artifact's [started_at, finished_at] touches [start, end) (unreadable ones are kept: the review
    reports them)."""
    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        return parse_time(doc["started_at"]) < end_us and parse_time(doc["finished_at"]) > start_us
    except (OSError, ValueError, KeyError, TimeError):
        return True


def find_artifacts(provider_dir: str) -> list[str]:
    """reboot*/fault_injection* artifacts of every run of one provider (runs/<provider>/*/artifacts/*/)."""
    found = []
    for pattern in ("reboot*.json", "fault_injection*.json"):
        found += glob.glob(os.path.join(provider_dir, "*", "artifacts", "*", pattern))
    return sorted(found)
