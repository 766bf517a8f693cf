"""Load one run directory into tidy tables: what every host measured, and what the run itself recorded.

A corrupt or invalid artifact never stops the load: it becomes a load error shown in the report.
"""

import json
import os
from dataclasses import dataclass, field

import pandas as pd

from probes.artifact import validate

RESULT_COLUMNS = ["host", "probe", "variant", "status", "backend", "metric", "value", "unit", "labels"]
FACT_COLUMNS = ["host", "probe", "variant", "fact", "value"]


@dataclass
class Run:
    run_dir: str
    meta: dict
    hosts: list
    unreachable: dict  # host -> message
    artifacts: list  # valid artifact documents
    load_errors: list  # {"path", "error"}
    results: pd.DataFrame
    facts: pd.DataFrame
    journal: list = field(default_factory=list)
    _by_key: dict = field(default=None, repr=False, compare=False)
    _attempted: set = field(default=None, repr=False, compare=False)
    _records: dict = field(default_factory=dict, repr=False, compare=False)

    def artifact(self, host, probe, variant=None):
        """The artifact of one probe invocation on one host, or None (a dict lookup: graders ask often)."""
        if self._by_key is None:
            self._by_key = {(d["host"], d["probe"], d.get("variant")): d for d in self.artifacts}
        return self._by_key.get((host, probe, variant))

    def records(self, probe):
        """Result rows of one probe as dicts (host, variant, backend, metric, value, unit, labels parsed), in
        artifact order; made once per probe, since graders and sections ask for them many times."""
        if probe not in self._records:
            sel = self.results[self.results.probe == probe]
            self._records[probe] = [{"host": r.host, "variant": r.variant, "backend": r.backend, "metric": r.metric,
                                     "value": float(r.value), "unit": r.unit, "labels": json.loads(r.labels)}
                                    for r in sel.itertuples()]
        return self._records[probe]

    def attempted(self, host, probe):
        """Whether the journal shows a task that ran, or tried to run, this probe on this host."""
        if self._attempted is None:
            self._attempted = {(line.get("host"), line.get("probe")) for line in self.journal if line.get("probe")}
        return (host, probe) in self._attempted


def read_journal(path):
    """journal.jsonl lines; a torn last line (interrupted run) is skipped, not fatal."""
    lines = []
    if not os.path.exists(path):
        return lines
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                lines.append(json.loads(line))
            except ValueError:
                continue
    return lines


def _read_json(path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_artifacts(artifacts_dir):
    docs, errors = [], []
    if not os.path.isdir(artifacts_dir):
        return docs, errors
    for host in sorted(os.listdir(artifacts_dir)):
        host_dir = os.path.join(artifacts_dir, host)
        if not os.path.isdir(host_dir):
            continue
        for name in sorted(os.listdir(host_dir)):
            if not name.endswith(".json") or name.startswith("."):
                continue
            path = os.path.join(host_dir, name)
            try:
                doc = _read_json(path)
            except (OSError, ValueError) as exc:
                errors.append({"host": host, "path": os.path.relpath(path, artifacts_dir),
                               "error": "unreadable JSON: %s" % exc})
                continue
            problems = validate(doc)
            if not problems and doc["host"] != host:
                problems = ["artifact says host %r but lies in %s/" % (doc["host"], host)]
            if problems:
                errors.append({"host": host, "path": os.path.relpath(path, artifacts_dir),
                               "error": "; ".join(problems)})
                continue
            docs.append(doc)
    return docs, errors


def tidy(docs):
    rows, facts = [], []
    for doc in docs:
        base = {"host": doc["host"], "probe": doc["probe"], "variant": doc.get("variant")}
        for r in doc["results"]:
            rows.append(dict(base, status=doc["status"], backend=doc["device"]["backend"], metric=r["metric"],
                             value=float(r["value"]), unit=r["unit"],
                             labels=json.dumps(r.get("labels") or {}, sort_keys=True)))
        for key, value in (doc.get("facts") or {}).items():
            facts.append(dict(base, fact=key, value=None if value is None else str(value)))
    # object dtype keeps a missing fact as None (pandas' string dtype would turn it into NaN).
    return (pd.DataFrame(rows, columns=RESULT_COLUMNS), pd.DataFrame(facts, columns=FACT_COLUMNS, dtype=object))


def load_run(run_dir):
    run_dir = os.path.abspath(run_dir)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError("run directory %s does not exist" % run_dir)
    meta = {}
    load_errors = []
    run_json = os.path.join(run_dir, "run.json")
    if os.path.exists(run_json):
        try:
            meta = _read_json(run_json)
        except (OSError, ValueError) as exc:
            load_errors.append({"host": None, "path": "run.json", "error": "unreadable: %s" % exc})
    journal = read_journal(os.path.join(run_dir, "journal.jsonl"))
    docs, errors = load_artifacts(os.path.join(run_dir, "artifacts"))
    load_errors.extend(errors)

    # The inventory of the run, written by preflight before any node is touched: the hosts that should
    # appear in the report, whether or not they answered. Controller-only events (implicit localhost) are not hosts.
    request = {}
    request_path = os.path.join(run_dir, "assess_run.json")
    if os.path.exists(request_path):
        try:
            request = _read_json(request_path)
        except (OSError, ValueError) as exc:
            load_errors.append({"host": None, "path": "assess_run.json", "error": "unreadable: %s" % exc})
    hosts = set(request.get("hosts") or [])
    hosts.update(doc["host"] for doc in docs)
    unreachable = {}
    for line in journal:
        if line.get("status") == "unreachable" and line.get("host") in hosts:
            unreachable.setdefault(line["host"], line.get("msg") or "unreachable")
    for host in meta.get("unreachable_hosts") or []:
        if host in hosts:
            unreachable.setdefault(host, "unreachable")
    meta = dict(request, **meta)
    meta["hosts"] = sorted(hosts)
    if "finished_at" not in meta:
        # No run.json: the play was interrupted before its end; everything measured so far is still shown.
        meta.setdefault("interrupted", True)
    meta.setdefault("run_id", meta.get("id") or os.path.basename(run_dir))
    meta.setdefault("provider", os.path.basename(os.path.dirname(run_dir)))
    results, facts = tidy(docs)
    return Run(run_dir=run_dir, meta=meta, hosts=sorted(hosts), unreachable=unreachable, artifacts=docs,
               load_errors=load_errors, results=results, facts=facts, journal=journal)
