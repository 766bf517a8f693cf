"""Grading of the Prometheus half of the monitoring phase (probe `prometheus`): pure functions of a run.

The probe records every series of the rubric's metric families that the API held in the lookback, each with the
labels that name a node and a GPU and the time of its newest served sample (None: listed, no longer served), the
scrape targets with their intervals, the server's write/admin flags and which exporter ports answer without a
credential (probes/monitoring/prometheus.py). Here:
- a series belongs to a node by its `node`, `Hostname` or `hostname` label, else by its `instance`'s host part
  against the node's name or address;
- a node's GPUs are those any DCGM series names for it (label `gpu`), and at least the GPUs the node's own
  node_info artifact counts: every GPU must have every metric of the gpu family;
- a series is fresh when its newest sample is at most `fresh_intervals` scrape intervals older than the query's
  evaluation time (the interval of the series' target, else the smallest of all targets').

Check kinds (rubric.d/monitoring.yml), cluster kinds with rows per node (subject: the node) on the host that ran the
probe (reports/grading/one_host.py):
  mon_gpu_series        every GPU of the node has every metric of the check's family (missing ones named)
  mon_node_series       the node has every metric of the family
  mon_family_present    one row: at least one metric of the family exists (e.g. the scheduler's state)
  mon_fresh             every series of the node is fresh (stale ones named)
  mon_exporters_open    no exporter port of the node answers /metrics without a credential (security)
  mon_write_endpoints   one row: no admin, lifecycle or remote-write endpoint open on an API that answers without a
                        credential (security)
  mon_fault_visible     per injected fault (subject: its node): a watched metric (XID errors) of that node became
                        non-zero within pass_s of the injection; the scheduler's detection time beside it
"""

import json

from reports.grading.one_host import on_runners
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row
from reports.grading.select import find_artifact

PROBE = "prometheus"
NODE_LABELS = ("node", "Hostname", "hostname")


def node_of(labels, nodes):
    """The node a series belongs to (a name of `nodes`), or None."""
    names = {n["name"]: n for n in nodes}
    short = {n["name"].split(".")[0]: n["name"] for n in nodes}
    for key in NODE_LABELS:
        value = labels.get(key)
        if value in names:
            return value
        if value and value.split(".")[0] in short:
            return short[value.split(".")[0]]
    host = (labels.get("instance") or "").rsplit(":", 1)[0].strip("[]")
    for n in nodes:
        if host and host in (n["name"], n.get("address"), n["name"].split(".")[0]):
            return n["name"]
    return None


def gpu_counts(run):
    """{host: GPUs its node_info artifact counts} (0 for a CPU node; absent where there is no node_info)."""
    out = {}
    for host in run.hosts:
        doc = find_artifact(run, host, "node_info")
        if doc and doc.get("status") == "ok":
            out[host] = int((doc.get("device") or {}).get("count") or 0)
    return out


def scrape_seconds(text):
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    for unit in ("ms", "s", "m", "h"):
        if text and text.endswith(unit) and text[:-len(unit)].replace(".", "", 1).isdigit():
            return float(text[:-len(unit)]) * units[unit]
    return None


def intervals(facts):
    """{instance: scrape seconds} of the targets, and the smallest of them (the default)."""
    by = {}
    for t in facts.get("targets") or []:
        sec = scrape_seconds(t.get("scrape_interval"))
        if sec:
            by[t["labels"].get("instance")] = sec
    return by, (min(by.values()) if by else None)


def errored(facts):
    """{metric: why} of the metrics the probe could not read (their series are unknown, not missing)."""
    out = {}
    for text in facts.get("errors") or []:
        metric, _, why = text.partition(": ")
        out[metric] = why
    return out


def evaluated(facts, metric):
    """When the metric's instant query was evaluated (an older artifact: one time for all)."""
    at = facts.get("evaluated_at")
    if isinstance(at, dict):
        return at.get(metric) or max([v for v in at.values() if v] or [0.0])
    return float(at or 0.0)


def series_by_node(facts, family):
    """{node: [(metric, labels, ts)]} of one family's series."""
    out = {}
    for metric in (facts.get("families") or {}).get(family) or []:
        for s in (facts.get("series") or {}).get(metric) or []:
            node = node_of(s["labels"], facts.get("nodes") or [])
            out.setdefault(node, []).append((metric, s["labels"], s["ts"]))
    return out


def _rows_per_node(check, run, host, judge):
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"])["facts"]
    return [make_row(check, host, status, observed, expected, reason, subject=node)
            for node, (status, observed, expected, reason) in sorted(judge(facts).items())]


@on_runners
def grade_gpu_series(check, run, host):
    family, counts = check["family"], gpu_counts(run)

    def judge(facts):
        metrics = facts["families"].get(family) or []
        by_node = series_by_node(facts, family)
        out = {}
        for n in facts.get("nodes") or []:
            name = n["name"]
            have = {(s_labels.get("gpu"), metric) for metric, s_labels, _ in by_node.get(name, [])}
            gpus = {g for g, _ in have if g is not None} | {str(i) for i in range(counts.get(name, 0))}
            expected = "%d metrics for each of %d GPUs" % (len(metrics), len(gpus))
            if not gpus:
                out[name] = ("skip", None, None, "no GPU on this node: node_info counts none and no %s series names one"
                             % family)
                continue
            unread = errored(facts)
            missing = sorted((g, m) for g in gpus for m in metrics if (g, m) not in have and m not in unread)
            observed = "%d of %d series" % (len(gpus) * len(metrics) - len(missing), len(gpus) * len(metrics))
            if not missing and any(m in unread for m in metrics):
                out[name] = ("error", observed, expected, "could not be read: " + "; ".join(
                    "%s (%s)" % (m, unread[m]) for m in metrics if m in unread))
                continue
            out[name] = ("fail" if missing else "pass", observed, expected,
                         "missing: " + ", ".join("GPU %s %s" % gm for gm in missing) if missing else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_node_series(check, run, host):
    family = check["family"]

    def judge(facts):
        metrics = facts["families"].get(family) or []
        by_node = series_by_node(facts, family)
        out = {}
        for n in facts.get("nodes") or []:
            have = {metric for metric, _, _ in by_node.get(n["name"], [])}
            unread = errored(facts)
            missing = [m for m in metrics if m not in have and m not in unread]
            if not missing and any(m in unread for m in metrics):
                out[n["name"]] = ("error", None, "every %s metric" % family, "could not be read: " + "; ".join(
                    "%s (%s)" % (m, unread[m]) for m in metrics if m in unread))
                continue
            out[n["name"]] = ("fail" if missing else "pass", "%d of %d metrics" % (len(metrics) - len(missing),
                                                                                 len(metrics)),
                              "every %s metric" % family, "missing: " + ", ".join(missing) if missing else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_family_present(check, run, host):
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"])["facts"]
    metrics = facts["families"].get(check["family"]) or []
    present = sorted(m for m in metrics if (facts.get("series") or {}).get(m))
    expected = "at least one of %s" % ", ".join(metrics)
    if present:
        return [make_row(check, host, "pass", ", ".join(present), expected)]
    return [make_row(check, host, "fail", "none", expected, "no %s series in the API (looked for %s)" % (
        check["family"], ", ".join(metrics)))]


@on_runners
def grade_fresh(check, run, host):
    limit = float(check["fresh_intervals"])

    def judge(facts):
        by_instance, default = intervals(facts)
        out = {}
        for n in facts.get("nodes") or []:
            # The newest series of each metric and GPU: an exporter that restarted under a new instance (a pod) left
            # its old series "listed, not served", which is history, not staleness.
            newest = {}
            for family in facts.get("families") or {}:
                for metric, labels, ts in series_by_node(facts, family).get(n["name"], []):
                    key = (metric, labels.get("gpu"))
                    if key not in newest or (ts or 0) > (newest[key][1] or 0):
                        newest[key] = (labels, ts)
            stale = []
            for (metric, gpu), (labels, ts) in sorted(newest.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
                interval = by_instance.get(labels.get("instance")) or default or 60.0
                now = evaluated(facts, metric)
                if ts is None or now - ts > limit * interval:
                    age = "not served" if ts is None else "%.0f s old" % (now - ts)
                    stale.append("%s%s (%s)" % (metric, "{gpu=%s}" % gpu if gpu is not None else "", age))
            total = len(newest)
            if not total:
                out[n["name"]] = ("skip", None, None, "no series of this node in the API")
                continue
            out[n["name"]] = ("fail" if stale else "pass", "%d of %d series fresh" % (total - len(stale), total),
                              "newest sample within %g scrape intervals" % limit,
                              "stale: " + ", ".join(stale[:12]) + (" …" if len(stale) > 12 else "") if stale else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_exporters_open(check, run, host):
    def judge(facts):
        out = {}
        for node, ports in sorted((facts.get("exporters") or {}).items()):
            open_ = sorted("%s (%s)" % (name, state) for name, state in ports.items() if state.startswith("open 2"))
            out[node] = ("warn" if open_ else "pass", ", ".join(open_) or "none open without a credential",
                         "no exporter answering /metrics without a credential from %s" % host,
                         "answer without a credential: %s" % ", ".join(open_) if open_ else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_write_endpoints(check, run, host):
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"])["facts"]
    flags = facts.get("flags")
    if flags is None:
        return [make_row(check, host, "skip", reason="the server's flags could not be read: %s" % facts.get(
            "flags_error"))]
    opened = sorted(k for k, v in flags.items() if k != "web.config.file" and str(v).lower() == "true")
    # What counts is whether the probe reached the API without a credential: a web config file may set up TLS only.
    auth = not facts.get("unauthenticated_api")
    observed = "%s; API %s" % (", ".join(opened) or "no admin, lifecycle or remote-write endpoint",
                               "needs a credential" if auth else "answers without a credential")
    expected = "no write endpoint open without a credential"
    bad = opened and not auth
    return [make_row(check, host, "fail" if bad else "pass", observed, expected,
                     json.dumps(opened) if bad else None)]


def injections(run):
    """[(host, injected at (epoch s), detect_s or None)] of the run's fault injections (the reliability phase's
    fault_inject results; the scheduler's detection time from its timeline)."""
    from reports.phases.reliability import timeline  # noqa: PLC0415 - only where a fault was injected

    # The injection that stands per host: the fallback's when the first one went unseen (timeline.fault_outcome).
    stands = {}
    for r in run.records("fault_inject"):
        if r["metric"] == "injected_at" and r["variant"] in (None, "fallback"):
            if r["host"] not in stands or r["variant"] == "fallback":
                stands[r["host"]] = float(r["value"])
    out = []
    for host, t_inject in stands.items():
        doc = run.artifact(host, "fault_injection")
        detect = timeline.outcome(run, doc)["metrics"].get("detect_s") if doc else None
        out.append((host, t_inject, detect))
    return out


@on_runners
def grade_fault_visible(check, run, host):
    """Kind `mon_fault_visible`: each injected fault's node shows a watched metric (XID errors) other than 0 within
    pass_s (warn up to fail_s) of the injection, next to the scheduler's detection time."""
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    faults = injections(run)
    if not faults:
        return [make_row(check, host, "skip", reason="no fault was injected in this run (the reliability phase's "
                                                     "fault injection did not run)")]
    facts = find_artifact(run, host, check["probe"])["facts"]
    _, step = intervals(facts)
    pass_s, fail_s = float(check["pass_s"]), float(check["fail_s"])
    rows = []
    for node, t_inject, detect in faults:
        # The first change to a value other than 0 at or after the injection (one range step of grid slack); the
        # value a series held before the window is its first point, before the injection.
        seen = sorted(pt[0] for series in (facts.get("watch") or {}).values() for w in series
                      if node_of(w["labels"], facts.get("nodes") or []) == node
                      for pt in w["points"] if pt[1] != 0 and pt[0] >= t_inject - w.get("step", step or 0))
        unread = [m for m in facts.get("watch") or {} if m in errored(facts)]
        detect_text = "scheduler detection %s" % ("%.1f s" % detect if detect is not None else "none")
        expected = "visible in the metrics within %g s (warn up to %g s)" % (pass_s, fail_s)
        if not seen and unread:
            rows.append(make_row(check, host, "error", reason="could not be read: %s" % "; ".join(
                "%s (%s)" % (m, errored(facts)[m]) for m in unread), subject=node))
            continue
        if not seen:
            rows.append(make_row(check, host, "fail", "not visible; %s" % detect_text, expected,
                                 "no %s series of %s became non-zero after the injection" % (
                                     "/".join(facts.get("watch") or {}) or "watched", node), subject=node))
            continue
        visible = max(0.0, seen[0] - t_inject)
        status = "pass" if visible <= pass_s else "warn" if visible <= fail_s else "fail"
        rows.append(make_row(check, host, status, "visible after %.1f s; %s" % (visible, detect_text), expected,
                             subject=node))
    return rows


CLUSTER = {"mon_fault_visible": grade_fault_visible, "mon_gpu_series": grade_gpu_series,
           "mon_node_series": grade_node_series,
           "mon_family_present": grade_family_present, "mon_fresh": grade_fresh,
           "mon_exporters_open": grade_exporters_open, "mon_write_endpoints": grade_write_endpoints}
