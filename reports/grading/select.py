"""What a check looks at: the run's index (results by probe and metric, artifacts, GPU models, failed tasks), the
results one check selects on a host, their groups (per host or per label value) and aggregates."""

import json
import statistics

import numpy as np
import pandas as pd

from reports.grading import expectations

AGGREGATES = {"min": min, "max": max, "mean": statistics.fmean, "median": statistics.median, "sum": sum,
              "count": len}


class ResultGroup:
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
        self._parsed = None  # the distinct label sets, parsed
        self._codes = None  # per row: its label set's position in _parsed
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
            # Label sets repeat from host to host (a GEMM sweep's gpu, dtype and shape): each distinct text is
            # parsed once, and a row points at its text's labels.
            self._codes, texts = pd.factorize(self.labels_text)
            self._parsed = [json.loads(t) for t in texts]
        cache_key = (key, as_text)
        if cache_key not in self._label_cols:
            per_text = np.empty(len(self._parsed), dtype=object)
            per_text[:] = [str(d.get(key)) if as_text else d.get(key) for d in self._parsed]
            self._label_cols[cache_key] = per_text[self._codes]
        return self._label_cols[cache_key]


class RunIndex:
    """Lookups the graders repeat for every check and host, built once per run: results by (probe, metric)
    and host, artifacts by (host, probe, variant) and by (host, probe), each host's GPU model, failed tasks."""

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
        self.host_probe_artifacts = {}
        for doc in run.artifacts:
            self.artifacts.setdefault((doc["host"], doc["probe"], doc.get("variant")), doc)
            self.host_probe_artifacts.setdefault((doc["host"], doc["probe"]), []).append(doc)
        self.gpu_model = {}
        facts = run.facts
        sel = facts[(facts.probe == "node_info") & (facts.fact == "gpu_model")]
        for host, value in zip(sel.host, sel.value):
            self.gpu_model.setdefault(host, value)
        self.failed_tasks = {}
        # Probes some task ran or tried to run on any host (which phases the run selected).
        self.journal_probes = {line["probe"] for line in run.journal if line.get("probe")}
        for line in run.journal:
            if line.get("status") == "failed" and not line.get("ignored") and not line.get("rescued"):
                self.failed_tasks.setdefault(line.get("host"), []).append(line.get("task"))
        self.models = None

    def group(self, probe, metric):
        key = (probe, metric)
        if key not in self.groups:
            positions = self.pair_positions.get(key)
            self.groups[key] = None if positions is None else ResultGroup(positions, self.cols)
        return self.groups[key]


def run_index(run):
    """The run's RunIndex, rebuilt when the run's tables were replaced (pinned while grade() runs)."""
    pinned = run.__dict__.get("_grade_index_pinned")
    if pinned is not None:
        return pinned
    stamp = (id(run.results), len(run.results), id(run.artifacts), len(run.artifacts), id(run.facts),
             id(run.journal), len(run.journal))
    cached = run.__dict__.get("_grade_index")
    if cached is None or cached[0] != stamp:
        cached = (stamp, RunIndex(run))
        run.__dict__["_grade_index"] = cached
    return cached[1]


def find_artifact(run, host, probe, variant=None):
    return run_index(run).artifacts.get((host, probe, variant))


def artifacts_of(run, host, probe):
    """Every artifact of one probe on one host (all its variants), in load order."""
    return list(run_index(run).host_probe_artifacts.get((host, probe), []))


def host_failed_tasks(run, host):
    return list(run_index(run).failed_tasks.get(host, []))


def load_models(run):
    index = run_index(run)
    if index.models is None:
        index.models = expectations.load_gpus()
    return index.models


def host_model_spec(run, host, models):
    name = run_index(run).gpu_model.get(host)
    key = expectations.gpu_model_key(name, models)
    return key, (models.get(key) if key else None)


def gpu_model(run, host, doc, models=None):
    """(gpus.yml key or None, its spec or None, a name for messages): node_info's GPU model, else the artifact's
    device.model (torch's name of the GPU it measured). On AMD nodes node_info has no name (amd-smi list gives
    none), so every check against gpus.yml there rests on the artifact's. models: gpus.yml's (default: loaded)."""
    models = models if models is not None else load_models(run)
    key, spec = host_model_spec(run, host, models)
    name = ((doc or {}).get("device") or {}).get("model")
    if key is None and name:
        key = expectations.gpu_model_key(name, models)
        spec = models.get(key) if key else None
    return key, spec, key or name or "this GPU model"


class Selection:
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
    """The results of check's probe and metric, with its optional variant and label filter; per host when given."""
    group = run_index(run).group(check["probe"], check["metric"])
    if group is None:
        return Selection(None, np.empty(0, dtype=np.int64))
    local = group.host_positions(host) if host is not None else np.arange(len(group.value))
    if "variant" in check:
        if check["variant"] is None:
            # the probe's own artifact, not a variant of it (find_artifact's None): e.g. grouped GEMM through torch,
            # not its deepgemm variant; a missing variant reads as None, NaN or "" depending on the frame
            plain = np.array([v is None or v != v or v == "" for v in group.variant[local]], dtype=bool)
            local = local[plain]
        else:
            local = local[group.variant[local] == check["variant"]]
    for key, wanted in (check.get("labels") or {}).items():
        if not len(local):
            break
        local = local[group.label(key, as_text=True)[local] == str(wanted)]
    return Selection(group, local)


def select_rows(run, check, host=None):
    """The selection's result rows, as a DataFrame of run.results."""
    return run.results.iloc[selection(run, check, host).positions()]


def groups_of(check, sel):
    """(subject, values) per group: the whole host, or one group per value of the label named by `per`.
    sel: a selection(...) or a results DataFrame (as select_rows returns)."""
    per = check.get("per", "host")
    if isinstance(sel, Selection):
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


def slowest(values, higher_is_better=False):
    """values: {name: value} of the same measurement in several places (tiers). (the slowest name, its value, the
    median of the others, how many times slower it is: >= 1), or None with fewer than two. higher_is_better: a
    throughput (the slowest is the lowest), else a time (the slowest is the highest)."""
    if len(values) < 2:
        return None
    pick = min if higher_is_better else max
    slow = pick(sorted(values), key=lambda t: values[t])
    others = statistics.median([v for t, v in values.items() if t != slow])
    if higher_is_better:
        ratio = others / values[slow] if values[slow] > 0 else float("inf")
    else:
        ratio = values[slow] / others if others > 0 else float("inf")
    return slow, values[slow], others, ratio


def labels_match(labels, wanted):
    """Whether parsed labels have every wanted value (compared as text)."""
    return all(str(labels.get(k)) == str(v) for k, v in (wanted or {}).items())


def plain_metrics(doc):
    """{metric: value} of an artifact's label-less results (the first value of a metric wins)."""
    out = {}
    for r in doc.get("results") or []:
        if not r.get("labels"):
            out.setdefault(r["metric"], float(r["value"]))
    return out
