"""The assessment's own reboot and fault-injection tests -> exclusion events of kind `assessment`.

The reliability phase (roles reboot and fault_injection, probes/reliability) records raw observations batch by
batch, and reports/phases/reliability/timeline.py puts them in order. A test's window on one node is:

    start  the first thing the test did to the node, as recorded: for a reboot, the drain the observer issued
           (sched_action <stage>-drain: drain_issued_at), else the reboot the controller issued (the reboot
           artifact's reboot_started event), which is the earliest event of the timeline's reboot record; for a
           fault injection, the injection (fault_inject: injected_at).
    end    when the batch wrote the node's record: the reboot or fault_injection artifact's started_at. The roles
           write it last in the batch's `always`, after the batch put the node back in service (sched_action
           <stage>-restore), so the window holds the whole test plus a few seconds of Ansible's own time.

That window is an exclusion of kind `assessment` for the node (sla_tiers.yml: it needs no announcement). A node that
was not back in service when its batch ended is the provider's from then on. A skipped record (nothing was done to
the node) is ignored; a record that cannot be timed (an error record, no recorded start, a record not after the
start: the hosts' clocks disagree) excludes nothing and is named in the review's notes.

The review stages, for each run with a record near the month, the artifacts and raw files of every probe of the
reliability phase (probes.reliability.PROBES) as inputs/assessment/<run>/artifacts/<host>/<file>, and computes the
windows from those copies alone (reports.load.load_run, as the assessment's own report does).
"""

from __future__ import annotations

import glob
import os

from probes.reliability import PROBES
from reports.load import load_run, read_json_or_problem
from reports.phases.reliability import timeline
from reports.sla.events import Event
from reports.sla.timeutil import US, TimeError, iso_utc, parse_time

SOURCE = "assessment"
RECORDS = ("reboot", "fault_injection")  # the per-node record each batch writes last


def _started(run, doc) -> tuple[float, str] | None:
    """(epoch seconds, what) of the first thing the test did to the node; None when none is recorded."""
    if doc["probe"] == "fault_injection":
        inject = run.artifact(doc["host"], "fault_inject") or {}
        times = {r["metric"]: r["value"] for r in inject.get("results") or [] if r["metric"] == "injected_at"}
    else:
        times = timeline.outcome(run, doc)["events"]
    return min(((t, name) for name, t in times.items()), default=None)


def events_from_run(run_dir: str, notes: list) -> list[Event]:
    """The exclusion windows of one (staged) run's reboot and fault-injection tests; what cannot be timed goes to
    notes."""
    run = load_run(run_dir)
    name = os.path.basename(run_dir)
    notes += ["assessment run %s: %s not read (%s)" % (name, e["path"], e["error"]) for e in run.load_errors]
    out = []
    for doc in sorted(run.artifacts, key=lambda d: (d["host"], d["probe"])):
        if doc["probe"] not in RECORDS or doc.get("variant") is not None or doc["status"] == "skipped":
            continue
        what = "assessment run %s, %s of %s" % (doc["run_id"], doc["probe"], doc["host"])
        if doc["status"] != "ok":
            notes.append("%s: an error record (%s): the test is not timed, nothing is excluded" % (
                what, doc.get("reason")))
            continue
        first = _started(run, doc)
        if first is None:
            notes.append("%s: no recorded start of the test: nothing is excluded" % what)
            continue
        start, end = int(round(first[0] * US)), parse_time(doc["started_at"])
        if end <= start:
            notes.append("%s: recorded at %s, not after the test began (%s at %s): the hosts' clocks disagree, "
                         "nothing is excluded" % (what, doc["started_at"], first[1], iso_utc(start)))
            continue
        out.append(Event(
            id="%s:%s:%s:%s" % (SOURCE, doc["run_id"], doc["host"], doc["probe"]), source=SOURCE, scope="node",
            target=doc["host"], kind="assessment", start=start, end=end,
            reason="%s test of the assessment (run %s, batch %s)" % (
                doc["probe"].replace("_", " "), doc["run_id"], (doc.get("facts") or {}).get("batch")),
            evidence={"run": doc["run_id"], "record": "artifacts/%s/%s.json" % (doc["host"], doc["probe"]),
                      "from": first[1], "until": "the batch's record of the node (started_at)"}))
    return out


def _recorded_in(path: str, start_us: int, end_us: int) -> bool:
    """Whether a record was written in [start, end); an unreadable one is kept (the review reports it)."""
    doc, problem = read_json_or_problem(path)
    try:
        return problem is not None or start_us <= parse_time(doc["started_at"]) < end_us
    except (KeyError, TypeError, TimeError):
        return True


def find_runs(provider_dir: str, start_us: int, end_us: int) -> list[str]:
    """The runs of one provider (runs/<provider>/<run>/) with a reboot or fault-injection record in [start, end)."""
    runs = set()
    for probe in RECORDS:
        for path in glob.glob(os.path.join(provider_dir, "*", "artifacts", "*", probe + ".json")):
            if _recorded_in(path, start_us, end_us):
                runs.add(os.path.dirname(os.path.dirname(os.path.dirname(path))))
    return sorted(runs)


def reliability_files(run_dir: str) -> list[str]:
    """artifacts/<host>/<file> of every artifact and raw file of the reliability phase's probes in a run."""
    return sorted(os.path.relpath(p, run_dir) for p in glob.glob(os.path.join(run_dir, "artifacts", "*", "*"))
                  if os.path.basename(p).startswith(PROBES) and os.path.isfile(p))
