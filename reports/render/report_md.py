"""report.md: the run, the node inventory per host, the consistency view, the phase sections, and every check.

render_parts gives the report as data (a list of blocks per part, reports.render.blocks); report.md is their
markdown (render), report.html their HTML (report_html.render).
"""

import json

from reports import phases
from reports.grading import summarize
from reports.rate import fmt_score, tier_line
from reports.render import markdown
from reports.render.blocks import Bullets, Heading, Paragraph, Quote, Table, code, em, strong

INVENTORY_FACTS = [("hostname", "hostname"), ("os", "OS"), ("kernel", "kernel"), ("arch", "arch"),
                   ("cpu_model", "CPU"), ("gpu_model", "GPU model"), ("gpu_driver", "GPU driver"),
                   ("python", "Python"), ("torch", "torch")]
INVENTORY_RESULTS = [("cpu_logical_count", "CPUs", 1), ("cpu_sockets", "sockets", 1), ("numa_nodes", "NUMA", 1),
                     ("memory_total_bytes", "memory GiB", 1 / 2**30), ("gpu_count", "GPUs", 1)]


def _num(value, scale):
    if value is None:
        return None
    scaled = value * scale
    return ("%d" % scaled) if float(scaled).is_integer() else ("%.1f" % scaled)


def node_inventory(run):
    facts = run.facts[run.facts.probe == "node_info"]
    res = run.results[(run.results.probe == "node_info") & (run.results.labels == json.dumps({}))]
    rows = []
    for host in run.hosts:
        if host in run.unreachable:
            rows.append([host, "unreachable"] + [None] * (len(INVENTORY_FACTS) + len(INVENTORY_RESULTS) - 1))
            continue
        hf = dict(zip(facts[facts.host == host].fact, facts[facts.host == host].value))
        hr = dict(zip(res[res.host == host].metric, res[res.host == host].value))
        rows.append([host] + [hf.get(k) for k, _ in INVENTORY_FACTS]
                    + [_num(hr.get(k), s) for k, _, s in INVENTORY_RESULTS])
    header = ["host"] + [t for _, t in INVENTORY_FACTS] + [t for _, t, _ in INVENTORY_RESULTS]
    return Table(header, rows)


def consistency_view(rows, hosts):
    """One line per compared fact; hosts that differ from the majority are named."""
    by_check = {}
    for r in rows:
        if r["category"] == "consistency":
            by_check.setdefault((r["check_id"], r["title"]), []).append(r)
    out = []
    for (_check_id, title), items in sorted(by_check.items()):
        odd = [r for r in items if r["status"] == "warn"]
        reported = [r for r in items if r["observed"] != ""]
        values = sorted({r["observed"] for r in reported})
        if odd:
            which = ", ".join("%s = %s" % (r["host"], r["observed"]) for r in odd)
            expected = next((r["expected"] for r in odd if r["expected"]), "")
            which += " (others: %s)" % expected if expected and "one value" not in expected else ""
            verdict = [strong("differs"), ": " + which]
        elif len(reported) < 2:
            verdict = "not compared (fewer than 2 hosts reported it)"
        else:
            verdict = "same on all %d hosts" % len(reported)
        out.append([title, ", ".join(values[:3]) + (" …" if len(values) > 3 else ""), verdict])
    return Table(["fact", "values", "across hosts"], out)


def _pct(value):
    return "%.0f%%" % (100 * value)


def evidence_text(category):
    """What a category's score rests on: 'measured', 'analyst input', or both."""
    used = category.get("evidence_used") or []
    if not used:
        return category["evidence"]
    return " + ".join("analyst input" if e == "analyst" else e for e in used)


def rating_blocks(ratings):
    """Tier, category table, gates and rationale; headline metrics with their peer percentiles."""
    cats = []
    for c in ratings["categories"]:
        n = c["counts"]
        cats.append([c["title"], evidence_text(c), "%g" % c["weight"],
                     fmt_score(c["score"]) if c["score"] is not None else "not measured",
                     _pct(c["coverage"]), n["pass"], n["warn"], n["fail"], n["error"], n["skip"]])
    out = [Heading(2, "Rating"), Paragraph(strong("Tier: %s" % tier_line(ratings))),
           Table(["category", "evidence", "weight", "score", "coverage", "pass", "warn", "fail", "error", "skip"],
                 cats)]
    triggered = [g for g in ratings["gates"] if g["triggered"]]
    if triggered:
        out += [Paragraph("Gates that cap the tier:"),
                Bullets([[strong(g["id"]), " (%s) → at most %s: %s" % (g["title"], g["cap"], g["reason"])]
                         for g in triggered])]
    out.append(Paragraph("Why this tier:"))
    if ratings["rationale"]:
        out.append(Bullets(ratings["rationale"], numbered=True))
    if ratings.get("analyst", {}).get("provided"):
        a = ratings["analyst"]
        out.append(Quote([strong("Analyst input"), " (not measured on the cluster): %s items from " % a["items"],
                          code(a["file"]), " by %s, as of %s. Rows from it are marked " % (
                              a.get("analyst") or "?", a.get("as_of") or "?"), em("analyst"), "."]))
    head = ratings.get("headline") or []
    if head:
        body = []
        for m in head:
            peers = m.get("peers") or {}
            pct = peers.get("percentile")
            body.append([m["title"], "not measured" if m["value"] is None else "%.4g %s" % (m["value"], m["unit"]),
                         peers.get("n", 0), "%.0f" % pct if pct is not None else "–",
                         "%.4g" % peers["median"] if peers.get("median") is not None else "–",
                         peers.get("reason") or ""])
        out += [Heading(3, "Headline metrics among peers"),
                Table(["metric", "this run", "peers", "percentile", "peer median", "note"], body)]
    return out


def checks_blocks(rows):
    def shown(status):
        return status.upper() if status in ("fail", "error") else status

    def host(r):
        return "(analyst)" if r.get("evidence") == "analyst" else r["host"]

    return [Heading(2, "Checks"),
            Table(["check", "host", "subject", "status", "observed", "expected", "reason"],
                  [[r["check_id"], host(r), r["subject"], shown(r["status"]), r["observed"], r["expected"],
                    r["reason"]] for r in rows])]


def render_parts(run, rows, report_dir=None, ratings=None):
    """The report as an ordered list of (key, blocks) parts: report.md is their markdown, report.html their HTML
    (the rating and the checks drawn there from the same data, with what a page adds)."""
    meta = run.meta
    counts = summarize(rows)
    reachable = [h for h in run.hosts if h not in run.unreachable]
    header = [
        Heading(1, "ClusterMAX assessment: %s" % meta.get("provider", "?")),
        Bullets([
            ["run: ", code(str(meta.get("run_id")))],
            "profile: %s" % meta.get("profile", "?"),
            "started: %s, finished: %s%s" % (meta.get("started_at", "?"), meta.get("finished_at", "not finished"),
                                             " (interrupted: partial results)" if meta.get("interrupted") else ""),
            "hosts: %d in the inventory, %d reachable, %d unreachable" % (len(run.hosts), len(reachable),
                                                                          len(run.unreachable)),
            "checks: " + ", ".join("%d %s" % (n, s) for s, n in counts.items()),
        ]),
    ]
    parts = [("header", header)]
    if ratings:
        parts.append(("rating", rating_blocks(ratings)))
    if run.unreachable:
        parts.append(("unreachable", [
            Heading(2, "Unreachable hosts"),
            Bullets([[strong(h), ": %s" % (m.strip().splitlines()[0] if m.strip() else "unreachable")]
                     for h, m in sorted(run.unreachable.items())])]))
    parts.append(("inventory", [Heading(2, "Node inventory"), node_inventory(run)]))
    parts.append(("consistency", [Heading(2, "Consistency across hosts"), consistency_view(rows, run.hosts)]))
    if report_dir:
        for module in phases.sections():
            blocks = module.blocks(run, rows, report_dir)
            if blocks:
                # keyed by the phase: reports.phases.<phase>.section (the key is the part's id in report.html)
                parts.append(("section:" + module.__name__.rsplit(".", 2)[-2], blocks))
    if run.load_errors:
        parts.append(("load_errors", [Heading(2, "Artifacts that could not be read"),
                                      Bullets(["%s: %s" % (e["path"], e["error"]) for e in run.load_errors])]))
    parts.append(("checks", checks_blocks(rows)))
    return parts


def render(run, rows, report_dir=None, ratings=None, parts=None):
    parts = parts if parts is not None else render_parts(run, rows, report_dir, ratings)
    return "\n".join(markdown.render(blocks) for _, blocks in parts)
