"""Report section of the monitoring phase: the metrics API (targets, per node and GPU the series present and fresh,
what the watched fault metrics showed, exporters and endpoints open without a credential), then Grafana
(reports/phases/monitoring/grafana.py). Every number comes from an artifact; verdicts from the graders."""

from reports.grading import one_host
from reports.phases.monitoring import grafana, prometheus
from reports.render import markdown
from reports.render.blocks import Bullets, Heading, Paragraph, Table
from reports.render.markdown import fmt

ORDER = 58


def series_table(facts):
    """One row per node and GPU (GPU "–" for a node's own series): metrics present, fresh, and the stale ones."""
    by_instance, default = prometheus.intervals(facts)
    cells = {}
    for family in facts.get("families") or {}:
        for node, items in prometheus.series_by_node(facts, family).items():
            for metric, labels, ts in items:
                key = (node or "(no node of this cluster)", labels.get("gpu"))
                row = cells.setdefault(key, {"present": 0, "fresh": 0, "stale": []})
                row["present"] += 1
                interval = by_instance.get(labels.get("instance")) or default or 60.0
                if ts is not None and prometheus.evaluated(facts, metric) - ts <= 2 * interval:
                    row["fresh"] += 1
                else:
                    row["stale"].append(metric)
    rows = [[node, gpu, c["present"], c["fresh"], ", ".join(c["stale"])]
            for (node, gpu), c in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))]
    return [Table(["node", "GPU", "series", "fresh", "stale"], rows)] if rows else []


def prometheus_part(run):
    out = []
    for host in one_host.runners(run, prometheus.PROBE):
        doc = run.artifact(host, prometheus.PROBE)
        facts = doc.get("facts") or {}
        out.append(Heading(3, "Metrics"))
        if doc["status"] != "ok":
            out.append(Paragraph("From %s: %s (%s)." % (host, doc["status"], doc.get("reason"))))
            continue
        targets = facts.get("targets") or []
        down = [t for t in targets if t.get("health") != "up"]
        out.append(Paragraph("From %s: %s (Prometheus %s), %d scrape targets, %d not up; series of the last %s." % (
            host, facts.get("url"), (doc.get("tool") or {}).get("version"), len(targets), len(down),
            facts.get("lookback"))))
        if down:
            out.append(Table(["target", "node", "health", "last error"], [
                [t["labels"].get("instance"), t["labels"].get("node"), t.get("health"), t.get("last_error")]
                for t in down]))
        out += series_table(facts)
        watched = [[m, prometheus.node_of(w["labels"], facts.get("nodes") or []), w["labels"].get("gpu"),
                    fmt(pt[1]), fmt(pt[0])] for m, ws in sorted((facts.get("watch") or {}).items())
                   for w in ws for pt in w["points"] if pt[1] != 0]
        if watched:
            out += [Heading(4, "Fault metrics other than 0"),
                    Table(["metric", "node", "GPU", "value", "from (epoch s)"], watched)]
        items = ["%s: %s" % (node, ", ".join("%s %s" % kv for kv in sorted(ports.items())))
                 for node, ports in sorted((facts.get("exporters") or {}).items())]
        flags = facts.get("flags") or {}
        items.append("server flags: %s; the API %s" % (
            ", ".join("%s=%s" % kv for kv in sorted(flags.items())) or facts.get("flags_error"),
            "answered without a credential" if facts.get("unauthenticated_api") else "needed a credential"))
        out += [Heading(4, "Exporters and endpoints"), Bullets(items)]
        if facts.get("errors"):
            out += [Heading(4, "Could not be read"), Bullets(facts["errors"])]
    return out


def blocks(run, rows, report_dir):
    parts = prometheus_part(run) + grafana.blocks(run, rows, report_dir)
    return [Heading(2, "Monitoring")] + parts if parts else []


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
