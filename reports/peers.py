"""Peers: a store of earlier runs' summaries, and where a run stands among those with the same GPU model.

The store is a directory of small JSON files (schema clustermax.assess/peer/v1), one per run, written by
`assess-report peers add RUN`: the run's identity, GPU model, backend, tier, score, category scores and headline
metric values (reports/data/peers.yml). Nothing else is kept: a store of hundreds of runs loads in well under a
second, and the raw artifacts stay with their runs.

Percentile (the share of peers this run does better than, ties counting half):
    higher is better: 100 * (#peers below + 0.5 * #peers equal) / n
    lower is better:  100 * (#peers above + 0.5 * #peers equal) / n
Peers are the stored runs with the same GPU model and the same backend, other than the run itself, that have a
value for the metric. The GPU model is its gpus.yml key; a GPU gpus.yml does not list is matched on the name its
hosts reported, exactly (never with other unlisted GPUs); a run without GPUs (cpu backend) with the runs without
GPUs; a GPU run that reported no model has no peers ("GPU model not in gpus.yml"). With fewer than `min_peers`
no percentile is given.
"""

import datetime
import json
import os
import re
from collections import Counter

import numpy as np
import pandas as pd

from reports import DATA_DIR, yamlio
from reports.grading import expectations
from reports.grading.select import selection
from reports.load import read_json_or_problem
from reports.rate import SCREENING_TIER

PEER_SCHEMA = "clustermax.assess/peer/v1"
ENV_STORE = "CLUSTERMAX_ASSESS_PEERS"


def load_spec(path=None):
    with open(path or os.path.join(DATA_DIR, "peers.yml"), encoding="utf-8") as fh:
        spec = yamlio.safe_load(fh)
    for m in spec["metrics"]:
        if m.get("better") not in ("higher", "lower"):
            raise ValueError("peers.yml metric %s: better must be higher or lower" % m.get("id"))
    return spec


def default_store(run_dir=None):
    """$CLUSTERMAX_ASSESS_PEERS, else `_peers` beside the providers' folders of the runs root (runs/_peers)."""
    if os.environ.get(ENV_STORE):
        return os.environ[ENV_STORE]
    if run_dir:
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(run_dir))), "_peers")
    return os.path.join("runs", "_peers")


# ------------------------------------------------------------------------------------------------ a run's values

def _majority(values):
    counts = Counter(v for v in values if v not in (None, ""))
    return counts.most_common(1)[0][0] if counts else None


def run_identity(run, models=None):
    """(GPU model as reported, gpus.yml key or None, backend) of a run: what most hosts said."""
    models = models if models is not None else expectations.load_gpus()
    facts = run.facts
    gpu_model = _majority(facts[(facts.probe == "node_info") & (facts.fact == "gpu_model")].value)
    backend = _majority(doc["device"].get("backend") for doc in run.artifacts if doc["probe"] != "node_info")
    backend = backend or _majority(doc["device"].get("backend") for doc in run.artifacts)
    return gpu_model, expectations.gpu_model_key(gpu_model, models), backend


AGGS = {"median": np.median, "mean": np.mean, "min": np.min, "max": np.max}


def metric_value(run, m, backend=None):
    """(value or None, number of results it aggregates, why None)."""
    # Through the grading index: one parse of the labels per (probe, metric).
    sel = selection(run, {k: m[k] for k in ("probe", "metric", "variant", "labels") if k in m})
    if not len(sel):
        return None, 0, "not measured in this run"
    group, local = sel.group, sel.local
    local = local[group.status[local] != "skipped"]
    if m.get("backends"):
        local = local[np.isin(group.backend[local], m["backends"])]
        if not len(local) and backend and backend not in m["backends"]:
            return None, 0, "backend=%s: ranked only for %s" % (backend, "/".join(m["backends"]))
    if not len(local):
        return None, 0, "not measured in this run"
    value = float(AGGS[m.get("agg", "median")](group.value[local])) * float(m.get("scale", 1.0))
    return value, int(len(local)), None


def _rating_field(rating, field):
    if field == "score":
        return rating.get("score")
    if field == "coverage":
        return None if rating.get("coverage") is None else round(100.0 * rating["coverage"], 2)
    if field.startswith("category."):
        cid = field.split(".", 1)[1]
        return next((c["score"] for c in rating.get("categories", []) if c["id"] == cid), None)
    raise ValueError("peers.yml: unknown rating field %r" % field)


def headline(run, rating, spec=None, models=None):
    """The run's headline metric values (before any peer ranking)."""
    spec = spec or load_spec()
    gpu_model, key, backend = run_identity(run, models)
    metrics = []
    for m in spec["metrics"]:
        entry = {"id": m["id"], "title": m["title"], "unit": m.get("unit", ""), "better": m["better"],
                 "source": m.get("source", "results")}
        if m.get("source") == "rating":
            value = _rating_field(rating, m["field"])
            entry.update(value=value, n=None, reason=None if value is not None else "not measured in this run")
        else:
            value, n, why = metric_value(run, m, backend)
            entry.update(value=value, n=n, reason=why)
        entry["peers"] = None
        metrics.append(entry)
    return {"gpu_model": gpu_model, "gpu_model_key": key, "backend": backend, "metrics": metrics}


# ------------------------------------------------------------------------------------------------ the store

def _safe(text):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(text or "unknown")).strip("._") or "unknown"


def summary(ratings):
    """The peer record of a run, from its ratings.json document."""
    run = ratings["run"]
    return {
        "schema": PEER_SCHEMA,
        "provider": run.get("provider"), "run_id": run.get("run_id"), "finished_at": run.get("finished_at"),
        "gpu_model": run.get("gpu_model"), "gpu_model_key": run.get("gpu_model_key"), "backend": run.get("backend"),
        "hosts": run.get("hosts"),
        "tier": ratings["tier"]["name"], "rated": ratings["tier"]["rated"],
        "score": ratings.get("score"), "coverage": ratings.get("coverage"),
        "categories": {c["id"]: c["score"] for c in ratings.get("categories", [])},
        "metrics": {m["id"]: m["value"] for m in ratings.get("headline", []) if m.get("value") is not None},
    }


def add(store, ratings, now=None):
    """Write (or replace) the run's record in the store; returns its path."""
    os.makedirs(store, exist_ok=True)
    record = summary(ratings)
    record["added_at"] = now or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    path = os.path.join(store, "%s__%s.json" % (_safe(record["provider"]), _safe(record["run_id"])))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)
    return path


def load_store(store):
    """Every record of the store as one table: identity columns plus one `m.<metric id>` column per metric.
    Unreadable or foreign files are skipped and listed (second value)."""
    records, problems = [], []
    if not store or not os.path.isdir(store):
        return pd.DataFrame(columns=["provider", "run_id", "gpu_model_key", "backend"]), problems
    for name in sorted(os.listdir(store)):
        if not name.endswith(".json"):
            continue
        doc, problem = read_json_or_problem(os.path.join(store, name))
        if problem:
            problems.append("%s: %s" % (name, problem))
            continue
        if doc.get("schema") != PEER_SCHEMA:
            problems.append("%s: not a peer record" % name)
            continue
        flat = {k: doc.get(k) for k in ("provider", "run_id", "finished_at", "gpu_model", "gpu_model_key",
                                        "backend", "hosts", "tier", "rated", "score", "coverage", "added_at")}
        flat["file"] = name
        for mid, value in (doc.get("metrics") or {}).items():
            flat["m." + mid] = value
        records.append(flat)
    return pd.DataFrame.from_records(records), problems


def percentile(peer_values, value, better="higher"):
    """Share of peers this value does better than (0-100), ties counting half. None without peers."""
    values = np.asarray(peer_values, dtype=float)
    values = values[~np.isnan(values)]
    if not len(values) or value is None:
        return None
    worse = (values < value) if better == "higher" else (values > value)
    equal = values == value
    return float(100.0 * (worse.sum() + 0.5 * equal.sum()) / len(values))


NOT_IN_GPUS_YML = "GPU model not in gpus.yml"


def _same_model(table, head):
    """(rows of the table with the run's GPU model, the model's name in the entries, or None and why there are none).
    A gpus.yml key matches its key; a GPU gpus.yml does not list matches its reported name exactly (an unlisted L40S
    is no peer of an unlisted H800); a run without GPUs (cpu backend, no GPU model) matches the runs without GPUs."""
    key, name = head.get("gpu_model_key"), head.get("gpu_model")
    keys = table.gpu_model_key
    names = table["gpu_model"] if "gpu_model" in table else pd.Series(None, index=table.index, dtype=object)
    if key:
        return table[keys == key], key, None
    if name:
        return table[names == name], name, None
    if head.get("backend") == "cpu":
        return table[keys.isna() & names.isna()], "none", None
    return table.iloc[0:0], None, NOT_IN_GPUS_YML


def rank(head, ratings_run, table, min_peers=5):
    """Fill each headline metric's `peers` entry: n, percentile (None under min_peers), median, p10, p90.
    head: headline(...) result; ratings_run: {'provider', 'run_id'} of the run (excluded from its own peers)."""
    if table is None or not len(table):
        for m in head["metrics"]:
            m["peers"] = {"n": 0, "percentile": None, "reason": "no peer store or it is empty"}
        return head
    same, model, no_model = _same_model(table, head)
    # A screening is no peer: its durations and sizes are below a rating's (quick's 32 MiB fio files measure the page
    # cache), so five quick runs in the store set the percentiles an honest standard run was ranked by.
    screening = same.tier == SCREENING_TIER if "tier" in same else pd.Series(False, index=same.index)
    same = same[(same.backend.fillna("none") == (head.get("backend") or "none")) & ~screening
                & ~((same.provider == ratings_run.get("provider")) & (same.run_id == ratings_run.get("run_id")))]
    for m in head["metrics"]:
        column = "m." + m["id"]
        values = same[column].dropna().to_numpy(dtype=float) if column in same else np.array([])
        entry = {"n": int(len(values)), "model": model, "backend": head.get("backend"), "percentile": None}
        if len(values):
            entry.update(median=float(np.median(values)), p10=float(np.percentile(values, 10)),
                         p90=float(np.percentile(values, 90)))
        if m["value"] is None:
            entry["reason"] = "not measured in this run"
        elif no_model:
            entry["reason"] = no_model
        elif len(values) < min_peers:
            entry["reason"] = "%d peer(s) with this GPU model and backend; %d needed" % (len(values), min_peers)
        else:
            entry["percentile"] = round(percentile(values, m["value"], m["better"]), 1)
        m["peers"] = entry
    return head


def list_table(table, gpu=None):
    """Rows for `peers list`: provider, run, GPU model, backend, tier, score. The GPU model is the one a record is
    ranked under (_same_model): its gpus.yml key, else the name its hosts reported (a GPU gpus.yml does not list),
    else none; --gpu matches that, so it lists the runs that are peers of each other."""
    if not len(table):
        return []
    names = table["gpu_model"] if "gpu_model" in table else pd.Series(None, index=table.index, dtype=object)
    # a column mixing keys and None reads back with NaN, which is truthy: isna, not `or`
    model = table.gpu_model_key.where(table.gpu_model_key.notna(), names).fillna("none").astype(str)
    table = table.assign(model=model)
    if gpu:
        table = table[table.model.str.lower() == gpu.lower()]
    table = table.sort_values(["model", "provider", "run_id"])
    return [[r.provider, r.run_id, r.model, r.backend, r.tier,
             "–" if pd.isna(r.score) else "%.1f" % r.score] for r in table.itertuples()]
