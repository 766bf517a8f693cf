"""Load one run directory into tidy tables: what every host measured, and what the run itself recorded.

A corrupt or invalid artifact never stops the load: it becomes a load error shown in the report. Artifacts are
validated against reports/data/schemas/artifact.schema.json (the node checks the same rules with the standard library
only: probes.artifact.validate). An artifact of another run, or one that another version of the probes wrote than the
run staged, is a load error too: it is not this run's measurement.

A host of the inventory that the run left out (--limit, or a slice without the others) is a host of the run that was
not assessed: it is counted with the unreachable ones, with the reason, so that no part of a cluster is rated as all
of it.
"""

import functools
import json
import os
from dataclasses import dataclass, field

import jsonschema
import pandas as pd
import pyarrow as pa

from reports import DATA_DIR

RESULT_COLUMNS = ["host", "probe", "variant", "status", "backend", "metric", "value", "unit", "labels"]
FACT_COLUMNS = ["host", "probe", "variant", "fact", "value"]


@dataclass
class Run:
    run_dir: str
    meta: dict
    hosts: list
    unreachable: dict  # host -> message; hosts the run left out too (left_out)
    artifacts: list  # valid artifact documents
    load_errors: list  # {"path", "error"}
    results: pd.DataFrame
    facts: pd.DataFrame
    journal: list = field(default_factory=list)
    left_out: dict = field(default_factory=dict)  # host of the inventory not in this run -> why (--limit, a slice)
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


@functools.cache
def schema_validator(name):
    """The validator of reports/data/schemas/<name>.schema.json."""
    schema = _read_json(os.path.join(DATA_DIR, "schemas", "%s.schema.json" % name))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def key_path(path):
    """jsonschema's path of a key as it is written: checks[3].expect (or "(top level)")."""
    text = ""
    for part in path:
        text += "[%d]" % part if isinstance(part, int) else ("." if text else "") + str(part)
    return text or "(top level)"


def _result_row_valid(row):
    """What artifact.schema.json asks of one results row (metric a non-empty string, value a number and not a bool,
    unit a string, labels an object when there), in plain Python: never looser than the schema, so a row it refuses
    is judged by jsonschema itself."""
    return (type(row) is dict and type(row.get("metric")) is str and row["metric"] != "" and "value" in row
            and type(row["value"]) in (int, float) and type(row.get("unit")) is str
            and ("labels" not in row or type(row["labels"]) is dict))


def schema_problems(doc, name):
    """["<key path>: <what is wrong>"] of a document against a schema of reports/data/schemas, in document order.

    An artifact's results rows are checked in plain Python when every one of them is valid, and jsonschema checks
    the rest of the document: jsonschema walks ~75 µs per row, and a 1,000-node run has over a million rows (60 %
    of its build). Any row refused sends the whole document through jsonschema, so the messages are its own."""
    if (name == "artifact" and isinstance(doc, dict) and isinstance(doc.get("results"), list)
            and all(_result_row_valid(r) for r in doc["results"])):
        doc = dict(doc, results=[])
    errors = sorted(schema_validator(name).iter_errors(doc),
                    key=lambda e: [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in e.absolute_path])
    return ["%s: %s" % (key_path(e.absolute_path), e.message) for e in errors]


def read_json_or_problem(path):
    """(document, None), or (None, why it cannot be read) for a missing, unreadable or torn JSON file."""
    try:
        return _read_json(path), None
    except (OSError, ValueError) as exc:
        return None, str(exc)


def _read_optional_json(run_dir, name, load_errors):
    """A run-level JSON file of run_dir, {} when it is absent; unreadable, it is a load error and {}."""
    path = os.path.join(run_dir, name)
    if not os.path.exists(path):
        return {}
    doc, problem = read_json_or_problem(path)
    if problem:
        load_errors.append({"host": None, "path": name, "error": "unreadable: %s" % problem})
    return doc or {}


def _not_this_runs(doc, run_ids, versions):
    """Why an artifact is not a measurement of this run (None when it is): it names another run, or another version
    of the probes than the run staged. run_ids/versions: what this run's records accept (empty: not recorded, not
    checked). The controller's own record of a probe that did not run (plugins/action/probe.py, status error) names no
    version: it is the run's, and it grades as the error it is. Only the probes' own tool (`probes.<probe>`) names
    the probes' version: a probe that reports the tool it measured (slurm_jobs: Slurm's version, prometheus:
    Prometheus's) is checked by its run id alone."""
    if run_ids and doc["run_id"] not in run_ids:
        return "artifact of run %r, not of this run %s" % (doc["run_id"], " or ".join(repr(i) for i in sorted(run_ids)))
    version = doc["tool"].get("version")
    ours = str(doc["tool"].get("name") or "").startswith("probes.")
    if versions and ours and version not in versions and not (version is None and doc["status"] == "error"):
        return "artifact written by probes %s, not by the probes %s that run %s staged" % (
            version, " or ".join(sorted(versions)), doc["run_id"])
    return None


def load_artifacts(artifacts_dir, run_ids=(), versions=()):
    """The valid artifacts of a run's artifacts directory, and a load error for each file that is not one. run_ids
    and versions: the run ids and probes versions the run's records accept (reports them as this run's), when
    known."""
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
            doc, problem = read_json_or_problem(path)
            problems = ["unreadable JSON: %s" % problem] if problem else schema_problems(doc, "artifact")
            if not problems and doc["host"] != host:
                problems = ["artifact says host %r but lies in %s/" % (doc["host"], host)]
            if not problems:
                problems = [p for p in [_not_this_runs(doc, run_ids, versions)] if p]
            if problems:
                errors.append({"host": host, "path": os.path.relpath(path, artifacts_dir),
                               "error": "; ".join(problems)})
                continue
            docs.append(doc)
    return docs, errors


@functools.lru_cache(maxsize=1 << 16)
def _labels_text(items):
    return json.dumps(dict(items), sort_keys=True)


def labels_text(labels):
    """The labels column's text of a results row's labels (sorted JSON). Labels repeat from host to host (a GEMM
    sweep's gpu, dtype and shape), so the text of each distinct set is made once."""
    if not labels:
        return "{}"
    try:
        return _labels_text(tuple(labels.items()))
    except TypeError:  # a list or an object among the values: not hashable, made every time
        return json.dumps(labels, sort_keys=True)


@functools.lru_cache(maxsize=1 << 16)
def labels_of(text):
    """The labels of a labels column's text, parsed once per distinct text. Shared: copy before changing it."""
    return json.loads(text)


def tidy(docs):
    """The results and facts tables. Built a column at a time (a dict per row was 7 s at a million rows)."""
    res = {c: [] for c in RESULT_COLUMNS}
    facts = []
    for doc in docs:
        results = doc["results"]
        n = len(results)
        for column, value in (("host", doc["host"]), ("probe", doc["probe"]), ("variant", doc.get("variant")),
                              ("status", doc["status"]), ("backend", doc["device"]["backend"])):
            res[column].extend([value] * n)
        res["metric"].extend(r["metric"] for r in results)
        res["value"].extend(float(r["value"]) for r in results)
        res["unit"].extend(r["unit"] for r in results)
        res["labels"].extend(labels_text(r.get("labels")) for r in results)
        base = {"host": doc["host"], "probe": doc["probe"], "variant": doc.get("variant")}
        for key, value in (doc.get("facts") or {}).items():
            facts.append(dict(base, fact=key, value=None if value is None else str(value)))
    # The results through pyarrow: its conversion of the lists is C, pandas' own inference per column was 40 % slower
    # at a million rows, with the same dtypes. object dtype keeps a missing fact as None (pandas' string dtype would
    # turn it into NaN).
    return (pa.table({c: res[c] for c in RESULT_COLUMNS}).to_pandas(),
            pd.DataFrame(facts, columns=FACT_COLUMNS, dtype=object))


def _slice_requests(run_dir, request):
    """The requests of a merged run's slices (reports/merge.py: the run's own request is its first slice's, with
    every slice's hosts): each slice recorded its own inventory and probes. [] for a run that is not a merge."""
    requests = []
    for name in request.get("slices") or []:
        doc, _ = read_json_or_problem(os.path.join(run_dir, "slices", str(name), "assess_run.json"))
        if isinstance(doc, dict):
            requests.append(doc)
    return requests


def _left_out_why(request):
    """Why a host of the inventory is not in this run, from its request."""
    if request.get("slices"):
        return "not in this run: in none of its slices (%s)" % ", ".join(map(str, request["slices"]))
    why = "not in this run: --limit %s" % request["limit"] if request.get("limit") else "not in this run"
    if request.get("slice"):
        why += " (slice %s of run %s: the merged run has every slice's hosts)" % (request["slice"], request.get("id"))
    return why


def left_out_hosts(request, hosts, slice_requests=()):
    """host -> why, for each host of the inventory the run targeted (request's inventory; a merged run's slices'
    together) that is not a host of this run."""
    inventory = []
    for doc in (request, *slice_requests):
        inventory += [h for h in doc.get("inventory") or [] if h not in inventory]
    why = _left_out_why(request)
    return {h: why for h in inventory if h not in hosts}


def load_run(run_dir):
    run_dir = os.path.abspath(run_dir)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError("run directory %s does not exist" % run_dir)
    load_errors = []
    meta = _read_optional_json(run_dir, "run.json", load_errors)
    journal = read_journal(os.path.join(run_dir, "journal.jsonl"))
    # The request, written by preflight before any node is touched (plugins/action/make_run.py).
    request = _read_optional_json(run_dir, "assess_run.json", load_errors)
    slice_requests = _slice_requests(run_dir, request)
    # Which run and probes the artifacts must be of: the run's id (a slice's and a merged run's are the run's), and
    # the probes version each request recorded (a request older than that record: any version).
    run_ids = {i for i in (request.get("id"), meta.get("run_id")) if i}
    versions = {d["probes_version"] for d in (request, *slice_requests) if d.get("probes_version")}
    docs, errors = load_artifacts(os.path.join(run_dir, "artifacts"), run_ids, versions)
    load_errors.extend(errors)

    # The hosts of the run: those it was asked to assess, whether or not they answered, and those of the inventory
    # it left out (--limit), which were not assessed. Controller-only events (implicit localhost) are not hosts.
    hosts = set(request.get("hosts") or [])
    hosts.update(doc["host"] for doc in docs)
    left_out = left_out_hosts(request, hosts, slice_requests)
    hosts.update(left_out)
    unreachable = {}
    for line in journal:
        # an unreachable result under ignore_unreachable (ignored) left the host in the play: it was not lost
        if line.get("status") == "unreachable" and not line.get("ignored") and line.get("host") in hosts:
            unreachable.setdefault(line["host"], line.get("msg") or "unreachable")
    for host in meta.get("unreachable_hosts") or []:
        if host in hosts:
            unreachable.setdefault(host, "unreachable")
    # Left out, a host is graded as one that was not reached (preflight.reachable fails: the gate unassessed_nodes),
    # and the reason says it was not in the run.
    unreachable.update(left_out)
    meta = dict(request, **meta)
    meta["hosts"] = sorted(hosts)
    if "finished_at" not in meta:
        # No run.json: the play was interrupted before its end; everything measured so far is still shown.
        meta.setdefault("interrupted", True)
    meta.setdefault("run_id", meta.get("id") or os.path.basename(run_dir))
    meta.setdefault("provider", os.path.basename(os.path.dirname(run_dir)))
    results, facts = tidy(docs)
    return Run(run_dir=run_dir, meta=meta, hosts=sorted(hosts), unreachable=unreachable, artifacts=docs,
               load_errors=load_errors, results=results, facts=facts, journal=journal, left_out=left_out)


def run_of_artifacts(docs, unreachable=()):
    """A Run of artifact documents held in memory (no run directory): its hosts are the artifacts' and the
    unreachable ones, as a grader sees them."""
    results, facts = tidy(docs)
    hosts = sorted({d["host"] for d in docs} | set(unreachable))
    return Run(run_dir="/x", meta={}, hosts=hosts, unreachable={h: "down" for h in unreachable}, artifacts=docs,
               load_errors=[], results=results, facts=facts)
