"""Grading: pure functions from a loaded run and the rubric to check rows.

Every check appears for every host: pass, warn, fail, skip (with its reason) or error, always with the
observed value and the expectation, so nothing measured or missing disappears from the report.
"""

import glob
import json
import os
import statistics
from collections import Counter

import numpy as np
import pandas as pd
import yaml

from reports import DATA_DIR
from reports.grading import expectations

CHECK_COLUMNS = ["check_id", "category", "title", "host", "subject", "status", "observed", "expected", "reason",
                 "severity", "remediation", "weight", "evidence"]
AGGREGATES = {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median, "sum": sum,
              "count": len}
STATUS_ORDER = ("pass", "warn", "fail", "error", "skip")


def load_rubric(path=None):
    """rubric.yml plus every rubric.d/*.yml beside it (one file per phase), checks in file order.
    A check id defined twice is an error: two judgements of one thing would contradict each other."""
    path = path or os.path.join(DATA_DIR, "rubric.yml")
    with open(path, encoding="utf-8") as fh:
        rubric = yaml.safe_load(fh)
    rubric.setdefault("checks", [])
    for extra in sorted(glob.glob(os.path.join(os.path.dirname(path), "rubric.d", "*.yml"))):
        with open(extra, encoding="utf-8") as fh:
            part = yaml.safe_load(fh) or {}
        rubric["checks"].extend(part.get("checks", []))
    seen = Counter(c["id"] for c in rubric["checks"])
    dupes = sorted(i for i, n in seen.items() if n > 1)
    if dupes:
        raise ValueError("rubric defines these check ids more than once: %s" % ", ".join(dupes))
    return rubric


def text_of(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() else "%.6g" % value
    return str(value)


def make_row(check, host, status, observed=None, expected=None, reason=None, subject=""):
    return {
        "check_id": check["id"], "category": check["category"], "title": check["title"], "host": host,
        "subject": subject,
        "status": status, "observed": text_of(observed), "expected": text_of(expected), "reason": reason or "",
        "severity": check.get("severity", "minor"), "remediation": check.get("remediation", ""),
        # Rating inputs (reports/rate.py): the check's weight within its category, and what the row rests on
        # ("measured" by a probe on the cluster, or "analyst" input from an analyst file).
        "weight": float(check.get("weight", 1.0)), "evidence": check.get("evidence", "measured"),
    }


def host_failed_tasks(run, host):
    return list(run_index(run).failed_tasks.get(host, []))


def grade_reachable(check, run, host):
    if host in run.unreachable:
        return make_row(check, host, "fail", "unreachable", "reachable", run.unreachable[host])
    return make_row(check, host, "pass", "reachable", "reachable")


def grade_tasks(check, run, host):
    if host in run.unreachable:
        return make_row(check, host, "skip", reason="host unreachable")
    failed = host_failed_tasks(run, host)
    if failed:
        return make_row(check, host, "fail", "%d failed: %s" % (len(failed), "; ".join(failed)), "0 failed")
    return make_row(check, host, "pass", "0 failed", "0 failed")


def grade_artifact(check, run, host):
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    if doc is None:
        if host in run.unreachable:
            return make_row(check, host, "skip", reason="host unreachable: probe did not run")
        bad = [e for e in run.load_errors if e.get("host") == host and
               os.path.basename(e["path"]).startswith(check["probe"])]
        if bad:
            return make_row(check, host, "error", "invalid artifact", "ok", bad[0]["error"])
        if not run.attempted(host, check["probe"]):
            # The phase was not selected (--tags), or the host dropped out after a failed task (preflight.tasks).
            failed = host_failed_tasks(run, host)
            why = ("not run: the host dropped out after the failed task %r" % failed[0] if failed
                   else "probe %s was not run on this host in this run" % check["probe"])
            return make_row(check, host, "skip", reason=why)
        return make_row(check, host, "error", "no artifact", "ok", "probe %s left no artifact" % check["probe"])
    status = {"ok": "pass", "error": "error", "skipped": "skip"}[doc["status"]]
    return make_row(check, host, status, doc["status"], "ok", doc.get("reason"))


def majority_value(values):
    """The most common value; None when there is no strict majority winner among ties."""
    counts = Counter(values.values())
    if not counts:
        return None, counts
    (top, n), *rest = counts.most_common()
    if rest and rest[0][1] == n:
        return None, counts
    return top, counts


def consistency_rows(check, run, hosts, values, tolerance=0.0):
    """values: host -> observed value for the hosts that reported one."""
    rows = []
    reference, counts = majority_value(values)
    for host in hosts:
        if host not in values:
            reason = "host unreachable" if host in run.unreachable else "not reported by this host"
            rows.append(make_row(check, host, "skip", reason=reason))
            continue
        value = values[host]
        if len(values) < 2:
            rows.append(make_row(check, host, "skip", value, reason="only one host reported it: nothing to compare"))
            continue
        if reference is None:
            spread = ", ".join("%s on %d" % (v, n) for v, n in counts.most_common())
            rows.append(make_row(check, host, "warn", value, "one value on all hosts", "no majority: " + spread))
            continue
        same = value == reference
        if not same and tolerance and isinstance(value, float) and isinstance(reference, float) and reference:
            same = abs(value - reference) / abs(reference) <= tolerance
        if same:
            rows.append(make_row(check, host, "pass", value, reference))
        else:
            others = sum(n for v, n in counts.items() if v == reference)
            rows.append(make_row(check, host, "warn", value, reference,
                             "differs from %d of %d hosts" % (others, len(values))))
    return rows


def grade_consistency(spec, run, hosts):
    rows = []
    base = {"category": spec.get("category", "consistency"), "severity": spec.get("severity", "minor"),
            "remediation": spec.get("remediation", "")}
    facts = run.facts
    for item in spec.get("facts", []):
        check = dict(base, id="consistency.%s" % item["name"], title=item["title"])
        sel = facts[(facts.probe == item["source"]) & (facts.fact == item["name"])]
        values = {r.host: ("none" if r.value is None else r.value) for r in sel.itertuples()}
        rows.extend(consistency_rows(check, run, hosts, values))
    res = run.results
    for item in spec.get("results", []):
        check = dict(base, id="consistency.%s" % item["metric"], title=item["title"])
        sel = res[(res.probe == item["source"]) & (res.metric == item["metric"]) & (res.labels == json.dumps({}))]
        values = {r.host: float(r.value) for r in sel.itertuples()}
        rows.extend(consistency_rows(check, run, hosts, values, item.get("tolerance", 0.0)))
    return rows


def labels_match(labels_json, wanted):
    labels = json.loads(labels_json)
    return all(str(labels.get(k)) == str(v) for k, v in wanted.items())


class _Group:
    """The results of one (probe, metric), as arrays, with per-host positions and label columns made on demand."""

    def __init__(self, positions, cols):
        self.positions = positions  # positions in run.results
        self.host = cols["host"][positions]
        self.variant = cols["variant"][positions]
        self.value = cols["value"][positions]
        self.unit = cols["unit"][positions]
        self.labels_text = cols["labels"][positions]
        self.backend = cols["backend"][positions]
        self.status = cols["status"][positions]
        self._by_host = None
        self._parsed = None
        self._label_cols = {}

    def host_positions(self, host):
        if self._by_host is None:
            codes, hosts = pd.factorize(self.host)
            order = np.argsort(codes, kind="stable")  # stable: each host's positions stay in results order
            bounds = np.cumsum(np.bincount(codes, minlength=len(hosts)))[:-1]
            self._by_host = dict(zip(hosts, np.split(order.astype(np.int64), bounds)))
        return self._by_host.get(host, np.empty(0, dtype=np.int64))

    def label(self, key, as_text):
        """Per row: the label's value (as parsed), or str() of it (what label filters compare)."""
        if self._parsed is None:
            # One json.loads for the whole group: much faster than one per row.
            self._parsed = json.loads("[" + ",".join(self.labels_text) + "]") if len(self.labels_text) else []
        cache_key = (key, as_text)
        if cache_key not in self._label_cols:
            col = np.empty(len(self._parsed), dtype=object)
            col[:] = [str(d.get(key)) if as_text else d.get(key) for d in self._parsed]
            self._label_cols[cache_key] = col
        return self._label_cols[cache_key]


class _Index:
    """Lookups the graders repeat for every check and host, built once per run: results by (probe, metric)
    and host, artifacts by (host, probe, variant), each host's GPU model, failed tasks per host."""

    def __init__(self, run):
        res = run.results
        self.cols = {c: res[c].to_numpy(dtype=object) for c in ("host", "variant", "unit", "labels", "backend",
                                                                 "status")}
        self.cols["value"] = res["value"].to_numpy(dtype=float)
        self.cols["probe"] = res["probe"].to_numpy(dtype=object)
        self.cols["metric"] = res["metric"].to_numpy(dtype=object)
        pairs = {}
        for i, key in enumerate(zip(self.cols["probe"], self.cols["metric"])):
            pairs.setdefault(key, []).append(i)
        self.pair_positions = {k: np.array(v, dtype=np.int64) for k, v in pairs.items()}
        self.groups = {}
        self.artifacts = {}
        for doc in run.artifacts:
            self.artifacts.setdefault((doc["host"], doc["probe"], doc.get("variant")), doc)
        self.gpu_model = {}
        facts = run.facts
        sel = facts[(facts.probe == "node_info") & (facts.fact == "gpu_model")]
        for host, value in zip(sel.host, sel.value):
            self.gpu_model.setdefault(host, value)
        self.failed_tasks = {}
        for line in run.journal:
            if line.get("status") == "failed" and not line.get("ignored") and not line.get("rescued"):
                self.failed_tasks.setdefault(line.get("host"), []).append(line.get("task"))
        self.models = None

    def group(self, probe, metric):
        key = (probe, metric)
        if key not in self.groups:
            positions = self.pair_positions.get(key)
            self.groups[key] = None if positions is None else _Group(positions, self.cols)
        return self.groups[key]


def run_index(run):
    """The run's _Index, rebuilt when the run's tables were replaced (pinned while grade() runs)."""
    pinned = run.__dict__.get("_grade_index_pinned")
    if pinned is not None:
        return pinned
    stamp = (id(run.results), len(run.results), id(run.artifacts), len(run.artifacts), id(run.facts),
             id(run.journal), len(run.journal))
    cached = run.__dict__.get("_grade_index")
    if cached is None or cached[0] != stamp:
        cached = (stamp, _Index(run))
        run.__dict__["_grade_index"] = cached
    return cached[1]


def find_artifact(run, host, probe, variant=None):
    return run_index(run).artifacts.get((host, probe, variant))


def load_models(run):
    index = run_index(run)
    if index.models is None:
        index.models = expectations.load_gpus()
    return index.models


class _Selection:
    """The results a check selects on one host (or on all hosts): values, units, and the group they come from."""

    def __init__(self, group, local):
        self.group = group
        self.local = local  # positions inside the group

    def __len__(self):
        return len(self.local)

    @property
    def values(self):
        return self.group.value[self.local] if self.group is not None else np.empty(0)

    @property
    def unit(self):
        return self.group.unit[self.local[0]] if len(self.local) else None

    def label(self, key):
        return self.group.label(key, as_text=False)[self.local]

    def positions(self):
        return self.group.positions[self.local] if self.group is not None else np.empty(0, dtype=np.int64)


def selection(run, check, host=None):
    group = run_index(run).group(check["probe"], check["metric"])
    if group is None:
        return _Selection(None, np.empty(0, dtype=np.int64))
    local = group.host_positions(host) if host is not None else np.arange(len(group.value))
    if "variant" in check:
        if check["variant"] is None:  # as pandas: `== None` matches nothing
            local = local[:0]
        else:
            local = local[group.variant[local] == check["variant"]]
    for key, wanted in (check.get("labels") or {}).items():
        if not len(local):
            break
        local = local[group.label(key, as_text=True)[local] == str(wanted)]
    return _Selection(group, local)


def select_rows(run, check, host=None):
    """Result rows of a check: probe, metric, optional variant and label filter; per host when given."""
    return run.results.iloc[selection(run, check, host).positions()]


def groups_of(check, sel):
    """(subject, values) per group: the whole host, or one group per value of the label named by `per`.
    sel: a selection(...) or a results DataFrame (as select_rows returns)."""
    per = check.get("per", "host")
    if isinstance(sel, _Selection):
        values = sel.values.tolist()
        keys = sel.label(per).tolist() if per != "host" and len(sel) else []
    else:
        values = list(sel.value)
        keys = [json.loads(lj).get(per) for lj in sel.labels] if per != "host" else []
    if per == "host":
        return [("", values)] if values else []
    groups = {}
    for value, key in zip(values, keys):
        groups.setdefault(key, []).append(value)
    return [("%s=%s" % (per, k), groups[k]) for k in sorted(groups, key=lambda k: (str(type(k)), k))]


def ungradable(check, run, host):
    """A row when the check cannot be graded on this host (unreachable, probe skipped or failed, wrong backend)."""
    if host in run.unreachable:
        return make_row(check, host, "skip", reason="host unreachable")
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    if doc is None:
        return make_row(check, host, "skip", reason="probe %s did not run on this host" % check["probe"])
    if doc["status"] == "skipped":
        return make_row(check, host, "skip", reason=doc.get("reason"))
    backends = check.get("backends")
    if backends and doc["device"]["backend"] not in backends:
        return make_row(check, host, "skip", reason="backend=%s: expectation is for %s" % (
            doc["device"]["backend"], "/".join(backends)))
    return None


def host_model_spec(run, host, models):
    name = run_index(run).gpu_model.get(host)
    key = expectations.gpu_model_key(name, models)
    return key, (models.get(key) if key else None)


def grade_metric(check, run, host, models=None):
    """Threshold check on an aggregate of results, per host or per label value (e.g. per GPU)."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    models = models if models is not None else load_models(run)
    _, spec = host_model_spec(run, host, models)
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    sel = selection(run, check, host)
    groups = groups_of(check, sel)
    if not groups:
        status = "error" if doc["status"] == "error" else "skip"
        return [make_row(check, host, status, reason=doc.get("reason") or "no %s result" % check["metric"])]
    agg = AGGREGATES[check.get("agg", "median")]
    rows = []
    for subject, values in groups:
        value = float(agg(values))
        threshold, text, why = expectations.resolve(check["expect"], spec)
        if threshold is None:
            rows.append(make_row(check, host, "skip", value, reason=why, subject=subject))
            continue
        status = "pass" if expectations.meets(value, check["expect"], threshold) else "fail"
        expected = text
        if status == "pass" and check.get("warn"):
            w_threshold, w_text, _ = expectations.resolve(check["warn"], spec)
            if w_threshold is not None and not expectations.meets(value, check["warn"], w_threshold):
                status, expected = "warn", "%s (warn below %s)" % (text, w_text)
        unit = check.get("unit") or sel.unit
        rows.append(make_row(check, host, status, "%s %s" % (text_of(value), unit), expected,
                         doc.get("reason") if doc["status"] == "error" else None, subject=subject))
    return rows


def grade_straggler(check, run, hosts):
    """Per GPU (or per host): how far below the median of its node (scope: node) or of the cluster (scope: cluster).
    Robust: the median is not pulled down by the straggler it is looking for."""
    agg = AGGREGATES[check.get("agg", "median")]
    values = {}
    rows = []
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
            continue
        groups = groups_of(check, selection(run, check, host))
        if not groups:
            rows.append(make_row(check, host, "skip", reason="no %s result" % check["metric"]))
        for subject, vals in groups:
            values[(host, subject)] = float(agg(vals))
    fail_pct = float(check["max_below_median_pct"])
    warn_pct = float(check.get("warn_below_median_pct", fail_pct))
    scope = check.get("scope", "cluster")
    # The peers of a value: every value (scope cluster) or its host's values (scope node); median computed once.
    by_scope = {}
    for (h, _), v in values.items():
        by_scope.setdefault(None if scope == "cluster" else h, []).append(v)
    medians = {k: statistics.median(v) for k, v in by_scope.items() if len(v) >= 3}
    for (host, subject), value in sorted(values.items()):
        key = None if scope == "cluster" else host
        if key not in medians:
            rows.append(make_row(check, host, "skip", value, reason="fewer than 3 peers to compare with",
                             subject=subject))
            continue
        median = medians[key]
        below = 100.0 * (median - value) / median if median else 0.0
        status = "fail" if below > fail_pct else "warn" if below > warn_pct else "pass"
        observed = "%s (%.1f%% below %s median)" % (text_of(value), max(below, 0), scope)
        rows.append(make_row(check, host, status, observed,
                             "within %g%% of the %s median %s" % (fail_pct, scope, text_of(median)), subject=subject))
    return rows


GRADERS = {"reachable": grade_reachable, "tasks": grade_tasks, "artifact": grade_artifact}
PER_HOST_GRADERS = {"metric": grade_metric}
CLUSTER_GRADERS = {"straggler": grade_straggler}
# Each phase's own kinds live in reports/phases/<phase>/grade.py as PER_HOST and CLUSTER ({kind: fn}). Those modules
# import this one, so their kinds are registered on first use, never while this module is imported.


def load_phase_graders():
    """Registers every phase's kinds into PER_HOST_GRADERS and CLUSTER_GRADERS (idempotent)."""
    from reports import phases

    for module in phases.modules("grade"):
        PER_HOST_GRADERS.update(module.PER_HOST)
        CLUSTER_GRADERS.update(module.CLUSTER)

def grade(run, rubric=None, progress=None):
    """Check rows of a run. progress(done, total, label), when given, is called before each check."""
    load_phase_graders()
    rubric = rubric or load_rubric()
    # While grading, the index is built once and pinned, and run.artifact(host, probe, variant) - which graders,
    # the phases' too, call per check and host - answers from it (same first match) instead of scanning artifacts.
    index = run_index(run)
    run.__dict__["_grade_index_pinned"] = index
    run.__dict__["artifact"] = lambda host, probe, variant=None: index.artifacts.get((host, probe, variant))
    try:
        return _grade(run, rubric, progress)
    finally:
        run.__dict__.pop("_grade_index_pinned", None)
        run.__dict__.pop("artifact", None)


def _grade(run, rubric, progress):
    rows = []
    checks = rubric.get("checks", [])
    for index, check in enumerate(checks):
        if progress:
            progress(index, len(checks) + 1, check["id"])
        kind = check["kind"]
        if kind in GRADERS:
            rows.extend(GRADERS[kind](check, run, host) for host in run.hosts)
        elif kind in PER_HOST_GRADERS:
            for host in run.hosts:
                rows.extend(PER_HOST_GRADERS[kind](check, run, host))
        elif kind in CLUSTER_GRADERS:
            rows.extend(CLUSTER_GRADERS[kind](check, run, run.hosts))
        else:
            raise ValueError("check %s has unknown kind %r" % (check["id"], kind))
    if progress:
        progress(len(checks), len(checks) + 1, "consistency")
    if rubric.get("consistency"):
        rows.extend(grade_consistency(rubric["consistency"], run, run.hosts))
    return rows


def summarize(rows):
    counts = Counter(r["status"] for r in rows)
    return {status: counts.get(status, 0) for status in STATUS_ORDER}
