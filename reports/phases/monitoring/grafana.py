"""The Grafana half of the monitoring phase (probe `grafana`, probes/monitoring/grafana.py): grading and the report
blocks. The probe runs once, from one host; every kind is a cluster kind with its rows on that host
(reports/grading/one_host.py: on_runners, shared with the orchestration phase).

Kinds:
  grafana_dashboards  the seed's dashboard: GPU health, scheduler and health-check freshness dashboards all present
                      (pass); one class missing: warn; none of the three or no dashboard: fail
  grafana_panels_data the share of evaluated panels whose queries return series naming this cluster's nodes, against
                      the check's warn_below / fail_below (the seed gives no number: this rubric's own calibration).
                      A series names a node by the rule the Prometheus half uses (probes/monitoring/common.py
                      node_of, on the node labels the probe recorded and the nodes' names and addresses). An
                      artifact of the earlier probe version (nodes by name, each query's node label values, at most
                      20, and the nodes it matched by name) is matched the same way with the addresses of the run's
                      prometheus artifact; without them, a panel of no matched node cannot be told from another
                      cluster's and the check says so (skip)
  grafana_anonymous   dashboards listed without credentials: fail; a dashboard read without credentials that the
                      caller may save (meta.canSave / canAdmin): fail
A skipped artifact makes every check a skip with the probe's reason; whether the probe ran at all is the generic
kind one_host_artifact (reports/grading/one_host.py).
"""

from probes.monitoring.common import as_nodes, node_of
from reports.grading.one_host import on_runners
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, status_below
from reports.grading.select import find_artifact
from reports.render.blocks import Bullets, Heading, Paragraph, Table, code
from reports.shown import shown

PROBE = "grafana"
CLASSES = ("gpu_health", "scheduler", "freshness")
CLASS_TEXT = {"gpu_health": "GPU health", "scheduler": "scheduler", "freshness": "health-check freshness"}


def _pre(check, run, host, error_is_final=True):
    pre = ungradable(check, run, host, error_is_final=error_is_final)
    if pre:
        return [pre], None
    return None, (find_artifact(run, host, check["probe"]).get("facts") or {})


def grade_dashboards(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    dashboards = facts.get("dashboards") or []
    have = {c: [d["title"] for d in dashboards if c in (d.get("classes") or [])] for c in CLASSES}
    missing = [c for c in CLASSES if not have[c]]
    status = "pass" if not missing else "fail" if len(missing) == len(CLASSES) else "warn"
    observed = "%d dashboard(s); %s" % (len(dashboards), "; ".join(
        "%s: %s" % (CLASS_TEXT[c], ", ".join(have[c]) if have[c] else "none") for c in CLASSES))
    reason = "no %s dashboard" % " / ".join(CLASS_TEXT[c] for c in missing) if missing else None
    return [make_row(check, host, status, observed, "GPU health, scheduler and health-check freshness dashboards",
                     reason=reason)]


def earlier_version(facts):
    """True for an artifact of the earlier probe version: its targets hold node label values (nodes_seen), not the
    label sets (node_labels)."""
    return any("nodes_seen" in t and "node_labels" not in t for d in facts.get("dashboards") or []
               for p in d.get("panels") or [] for t in p.get("targets") or [])


def cluster_nodes(run, facts):
    """[{name, address}] of this cluster's nodes as the artifact gives them; an artifact of the earlier probe version
    names them only, and takes their addresses from the run's prometheus artifacts (the same role's nodes)."""
    nodes = as_nodes(facts.get("nodes"))
    known = {}
    for doc in run.artifacts if run is not None else []:
        if doc.get("probe") == "prometheus":
            for n in as_nodes((doc.get("facts") or {}).get("nodes")):
                if n.get("address"):
                    known.setdefault(n["name"], n["address"])
    return [n if n.get("address") or n["name"] not in known else dict(n, address=known[n["name"]]) for n in nodes]


def target_nodes(t, nodes):
    """The nodes a target's series name (node_of on each recorded label set; an earlier version's target: the nodes it
    matched, and each label value it kept, as an instance, matched again)."""
    if "node_labels" in t:
        found = {node_of(labels, nodes) for labels in t.get("node_labels") or []}
    else:
        found = set(t.get("cluster_nodes") or []) | {node_of({"instance": v}, nodes) for v in t.get("nodes_seen") or []}
    return found - {None}


def panel_outcomes(facts, nodes):
    """[(dashboard title, panel title, evaluated, data, cluster nodes, errors, aggregate, label sets left out)] of
    every panel with queries; aggregate: it returned data, none of it with a node label (sum by (state), avg(...));
    label sets left out: the probe kept MAX_LABEL_SETS of a query's (a Prometheus holding many clusters' nodes)."""
    out = []
    for d in facts.get("dashboards") or []:
        for p in d.get("panels") or []:
            ts = p.get("targets") or []
            if not ts:
                continue
            out.append((d.get("title"), p.get("title"), any(t.get("evaluated") for t in ts),
                        any(t.get("data") for t in ts), sorted({n for t in ts for n in target_nodes(t, nodes)}),
                        "; ".join(sorted({t["error"] for t in ts if t.get("error")})),
                        any(t.get("unlabelled") for t in ts),
                        sum(max(0, (t.get("node_label_sets") or 0) - len(t.get("node_labels") or [])) for t in ts)))
    return out


def grade_panels_data(check, run, host):
    rows, facts = _pre(check, run, host)
    if rows:
        return rows
    nodes = cluster_nodes(run, facts)
    panels = panel_outcomes(facts, nodes)
    evaluated = [p for p in panels if p[2]]
    if not evaluated:
        why = panels[0][5] if panels else "no panel with a query"
        return [make_row(check, host, "skip", reason="no panel query evaluated: %s" % why)]
    # An aggregate panel (data with no node label at all) cannot name a node; it counts as showing this cluster,
    # listed apart. A panel whose series name only other nodes shows another cluster: it counts against.
    ours = [p for p in evaluated if p[4] or (p[3] and p[6])]
    share = len(ours) / len(evaluated)
    warn, fail = float(check["warn_below"]), float(check["fail_below"])
    empty = [p for p in evaluated if not p[3]]
    foreign = [p for p in evaluated if p[3] and not p[4] and not p[6]]
    aggregates = [p for p in evaluated if p[3] and not p[4] and p[6]]
    earlier = earlier_version(facts)
    if earlier and foreign and not any(n.get("address") for n in nodes):
        return [make_row(check, host, "skip", reason=(
            "this grafana artifact was written by an earlier probe version, which recorded this cluster's nodes by "
            "name only, and no prometheus artifact of the run gives their addresses: %d panel(s) with data name no "
            "node by name, and series naming a node by address (instance=\"<address>:<port>\") cannot be told from "
            "another cluster's; rerun the monitoring phase" % len(foreign)))]
    reason = "; ".join(x for x in (
        "no data: %s" % ", ".join("%s / %s" % p[:2] for p in empty) if empty else "",
        "data, but no series names this cluster's nodes: %s" % ", ".join(
            "%s / %s%s" % (p[0], p[1], " (%d node label sets not recorded)" % p[7] if p[7] else "") for p in foreign)
        if foreign else "",
        "aggregates without a node label: %s" % ", ".join("%s / %s" % p[:2] for p in aggregates)
        if aggregates else "",
        "graded from an artifact of an earlier probe version: each query's node label values it kept (at most 20) "
        "matched to the nodes' names%s" % (" and addresses (from the run's prometheus artifact)" if any(
            n.get("address") for n in nodes) else "") if earlier else "") if x) or None
    return [make_row(check, host, status_below(share, warn, fail),
                     # in whole percent, or with decimals where those would cross a line (reports/shown.py)
                     "%d of %d evaluated panels return data for this cluster's nodes (%s %%)" % (
                         len(ours), len(evaluated), shown(share, (warn, fail), decimals=0, scale=100)),
                     ">= %g %% (fail below %g %%)" % (100 * warn, 100 * fail), reason=reason)]


def grade_anonymous(check, run, host):
    # graded from what the probe recorded even when it errored later (a search refused with a wrong credential
    # leaves the anonymous test done)
    rows, facts = _pre(check, run, host, error_is_final=False)
    if rows:
        return rows
    anon = facts.get("anonymous")
    if anon is None:
        doc = find_artifact(run, host, check["probe"])
        return [make_row(check, host, "error" if doc["status"] == "error" else "skip",
                         reason=doc.get("reason") or "anonymous access not tested")]
    findings = []
    if anon.get("search_dashboards"):
        findings.append("%d dashboard(s) listed without credentials" % anon["search_dashboards"])
    if anon.get("write_possible"):
        rights = ", ".join(k for k, v in sorted((anon.get("rights") or {}).items()) if v)
        findings.append("dashboard %s read without credentials may be saved (%s)" % (anon.get("dashboard_uid"), rights))
    observed = "search without credentials: HTTP %s; a dashboard without credentials: HTTP %s" % (
        anon.get("search_status"), anon.get("dashboard_status"))
    return [make_row(check, host, "fail" if findings else "pass", observed,
                     "no dashboard and no write without credentials", reason="; ".join(findings) or None)]


CLUSTER = {"grafana_dashboards": on_runners(grade_dashboards), "grafana_panels_data": on_runners(grade_panels_data),
           "grafana_anonymous": on_runners(grade_anonymous)}


def blocks(run, rows, report_dir):
    """The Grafana part of the monitoring section: per host that ran the probe, Grafana's version, the dashboards
    with their classes, the panels without data for this cluster's nodes, and anonymous access. rows and report_dir
    are unused (the rows are shown by the section's check table; no plot)."""
    docs = sorted((d for d in run.artifacts if d["probe"] == PROBE), key=lambda d: d["host"])
    if not docs:
        return []
    out = [Heading(3, "Grafana")]
    for doc in docs:
        f = doc.get("facts") or {}
        if doc["status"] != "ok":
            out.append(Paragraph("%s: %s (%s)." % (doc["host"], doc["status"], doc.get("reason"))))
            continue
        out.append(Paragraph(["%s: Grafana %s at " % (doc["host"], f.get("version") or "?"), code(f.get("url") or "?"),
                              " (database %s)." % f.get("database")]))
        dashboards = f.get("dashboards") or []
        if dashboards:
            out.append(Table(["dashboard", "uid", "classes", "panels"], [
                [d.get("title"), d.get("uid"), ", ".join(CLASS_TEXT[c] for c in d.get("classes") or []) or None,
                 len(d.get("panels") or [])] for d in dashboards]))
        missing = [p for p in panel_outcomes(f, cluster_nodes(run, f)) if not p[4] and not (p[3] and p[6])]
        if missing:
            out.append(Paragraph("Panels without data for this cluster's nodes:"))
            out.append(Table(["dashboard", "panel", "evaluated", "data", "why"],
                             [[p[0], p[1], "yes" if p[2] else "no", "yes" if p[3] else "no",
                               p[5] or ("no series (empty result)" if p[2] and not p[3] else
                                        "only other nodes' series" if p[3] else None)]
                              for p in missing]))
        anon = f.get("anonymous") or {}
        if anon:
            out.append(Bullets(["search without credentials: HTTP %s, %d dashboard(s)" % (
                anon.get("search_status"), anon.get("search_dashboards") or 0),
                "a dashboard without credentials: HTTP %s%s" % (anon.get("dashboard_status"), ", may be saved"
                                                                 if anon.get("write_possible") else "")]))
    return out
