"""report.md: the run, the node inventory per host, the consistency view, the phase sections, and every check.

render_parts gives the report as data (a list of blocks per part, reports.render.blocks); report.md is their
markdown (render), report.html their HTML (report_html.render).
"""

import json

from reports import phases
from reports.grading import summarize
from reports.profiles import amount, ran_text, rating_text
from reports.rate import NOT_IMPLEMENTED_KIND, category_score_text, tier_line
from reports.render import host_pages, markdown
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
    # one pass over each table (a filter per host was 3.5 s at 1,000 hosts)
    host_facts, host_results = {}, {}
    for host, fact, value in zip(facts.host, facts.fact, facts.value):
        host_facts.setdefault(host, {})[fact] = value
    for host, metric, value in zip(res.host, res.metric, res.value):
        host_results.setdefault(host, {})[metric] = value
    rows = []
    for host in run.hosts:
        if host in run.unreachable:
            rows.append([host, "unreachable"] + [None] * (len(INVENTORY_FACTS) + len(INVENTORY_RESULTS) - 1))
            continue
        hf, hr = host_facts.get(host, {}), host_results.get(host, {})
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


def profile_blocks(profile):
    """The profile the run declared, the durations and sizes it actually ran (shortest host) against what a rating
    needs, and the verdict."""
    levels = [p for p in ("standard", "full") if any(p in m["minimums"] for m in profile["measures"])]
    body = [[m["title"], "not run" if m["value"] is None else amount(m["value"], m["unit"]), m["host"] or ""]
            + [amount(m["minimums"][p], m["unit"]) if p in m["minimums"] else "" for p in levels] + [m["state"]]
            for m in profile["measures"]]
    text = ["Declared profile: ", strong(profile["declared"] or "none"), "; a rating needs the %s profile. "
            "This run: " % profile["needed"], strong(rating_text(profile)), "."]
    if profile["lacks"]:
        text.append(" It lacks: %s." % "; ".join(profile["lacks"]))
    elif profile["next"]:
        text.append(" A %s rating would need: %s." % (profile["next"]["profile"], "; ".join(profile["next"]["lacks"])))
    return [Heading(3, "Profile and durations"), Paragraph(text),
            Table(["measure", "ran (shortest host)", "host"] + ["%s needs" % p for p in levels] + ["state"], body)]


def coverage_blocks(ratings):
    """Coverage per category, counting the tests that were not run and those not implemented in this version."""
    cats = ratings["categories"]
    body = [[c["title"], c["checks"], c.get("judged_checks", 0), c.get("ran_only_checks", 0),
             c.get("not_run_checks", 0), c.get("not_implemented", 0), _pct(c["coverage"])] for c in cats]
    missing = [s for s in ratings["checks"] if s.get("kind") == NOT_IMPLEMENTED_KIND]
    out = [Heading(3, "Coverage"),
           Paragraph("Coverage %s of the rubric's category weight. A category is measured only when a check with an "
                     "expectation was graded in it; a check that only says its probe ran never measures one on its "
                     "own. Tests not run and tests not implemented in this version count as not covered."
                     % (ratings.get("shown") or {}).get("coverage", _pct(ratings["coverage"]))),
           Table(["category", "checks", "graded with an expectation", "probe ran only", "not run",
                  "not implemented", "coverage"], body)]
    if missing:
        out += [Paragraph("Not measured: not implemented in this version (%d tests of the seed's methodology):"
                          % len(missing)),
                Bullets([[code(s["check_id"]), " (%s): %s" % (s["category"], s["title"])] for s in missing])]
    return out


def gate_blocks(ratings):
    """Every gate: the tier it caps at, whether it triggered and the rows that show it."""
    body = []
    for g in ratings["gates"]:
        rows = "; ".join("%s%s%s: %s %s%s" % (e["check_id"], " on " + e["host"] if e["host"] else "",
                                               " (%s)" % e["subject"] if e["subject"] else "", e["status"],
                                               e["observed"], " (expected %s)" % e["expected"] if e["expected"] else "")
                         for e in g["evidence"])
        if g["triggered"]:
            state = [strong("triggered"), ": %s" % g["reason"]]
        elif not g.get("shown", True):
            state = [strong("not shown"), ": %s; the run is unrated for this gate (no cap)" % g["reason"]]
        else:
            state = "clear (%d graded row(s), none that triggers it)" % g.get("graded", 0)
        body.append([[strong(g["id"]), " %s" % g["title"]], g["cap"], state, rows, g.get("why") or ""])
    return [Heading(3, "Gates"), Table(["gate", "caps at", "state", "evidence", "why"], body)] if body else []


def rating_detail_blocks(ratings):
    """The parts of the rating section that report.md and report.html draw alike: profile, coverage, gates."""
    profile = ratings.get("profile")
    return (profile_blocks(profile) if profile else []) + coverage_blocks(ratings) + gate_blocks(ratings)


def rating_blocks(ratings):
    """Tier, category table, profile, coverage, gates and rationale; headline metrics with their peer percentiles."""
    cats = []
    for c in ratings["categories"]:
        n = c["counts"]
        cats.append([c["title"], evidence_text(c), "%g" % c["weight"],
                     category_score_text(c) if c["score"] is not None else "not measured",
                     _pct(c["coverage"]), n["pass"], n["warn"], n["fail"], n["error"], n["skip"]])
    out = [Heading(2, "Rating"), Paragraph(strong("Tier: %s" % tier_line(ratings))),
           Table(["category", "evidence", "weight", "score", "coverage", "pass", "warn", "fail", "error", "skip"],
                 cats)]
    out += rating_detail_blocks(ratings)
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


def checks_blocks(rows, n_hosts=0):
    """Every row, or on a fleet those that need attention (host_pages.shown_rows says which, and why)."""
    rows, note = host_pages.shown_rows(rows, n_hosts)

    def shown(status):
        return status.upper() if status in ("fail", "error") else status

    def host(r):
        return "(analyst)" if r.get("evidence") == "analyst" else r["host"]

    return [Heading(2, "Checks")] + ([Paragraph(note)] if note else []) + [
            Table(["check", "host", "subject", "status", "observed", "expected", "reason"],
                  [[r["check_id"], host(r), r["subject"], shown(r["status"]), r["observed"], r["expected"],
                    r["reason"]] for r in rows])]


def render_parts(run, rows, report_dir=None, ratings=None):
    """The report as an ordered list of (key, blocks) parts: report.md is their markdown, report.html their HTML
    (the rating and the checks drawn there from the same data, with what a page adds)."""
    meta = run.meta
    counts = summarize(rows)
    reachable = [h for h in run.hosts if h not in run.unreachable]
    profile = (ratings or {}).get("profile")
    header = [
        Heading(1, "ClusterMAX assessment: %s" % meta.get("provider", "?")),
        Bullets([
            ["run: ", code(str(meta.get("run_id")))],
            # What the run declared and what it actually ran (artifacts), and whether that makes a rating.
            ["profile: %s declared; ran %s: " % (meta.get("profile", "?"), ran_text(profile)),
             strong(rating_text(profile))] if profile else "profile: %s" % meta.get("profile", "?"),
            "started: %s, finished: %s%s" % (meta.get("started_at", "?"), meta.get("finished_at", "not finished"),
                                             " (interrupted: partial results)" if meta.get("interrupted") else ""),
            # a host --limit (or a slice) left out is not assessed, but it was not unreachable either: said apart
            "hosts: %d in the inventory, %d reachable, %d unreachable%s" % (
                len(run.hosts), len(reachable), len(run.unreachable) - len(run.left_out),
                ", %d not in this run" % len(run.left_out) if run.left_out else ""),
            "checks: " + ", ".join("%d %s" % (n, s) for s, n in counts.items()),
        ]),
    ]
    parts = [("header", header)]
    if ratings:
        parts.append(("rating", rating_blocks(ratings)))
    unreachable = {h: m for h, m in run.unreachable.items() if h not in run.left_out}
    if unreachable:
        parts.append(("unreachable", [
            Heading(2, "Unreachable hosts"),
            Bullets([[strong(h), ": %s" % (m.strip().splitlines()[0] if m.strip() else "unreachable")]
                     for h, m in sorted(unreachable.items())])]))
    if run.left_out:
        parts.append(("left_out", [
            Heading(2, "Hosts of the inventory not in this run (not assessed)"),
            Bullets([[strong(h), ": %s" % m] for h, m in sorted(run.left_out.items())])]))
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
    parts.append(("checks", checks_blocks(rows, len(run.hosts))))
    return parts


def render(run, rows, report_dir=None, ratings=None, parts=None):
    parts = parts if parts is not None else render_parts(run, rows, report_dir, ratings)
    return "\n".join(markdown.render(blocks) for _, blocks in parts)
