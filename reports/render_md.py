"""report.md: the run, the node inventory per host, the consistency view, and every check."""

import json

from reports import sections
from reports.grade import summarize

INVENTORY_FACTS = [("hostname", "hostname"), ("os", "OS"), ("kernel", "kernel"), ("arch", "arch"),
                   ("cpu_model", "CPU"), ("gpu_model", "GPU model"), ("gpu_driver", "GPU driver"),
                   ("python", "Python"), ("torch", "torch")]
INVENTORY_RESULTS = [("cpu_logical_count", "CPUs", 1), ("cpu_sockets", "sockets", 1), ("numa_nodes", "NUMA", 1),
                     ("memory_total_bytes", "memory GiB", 1 / 2**30), ("gpu_count", "GPUs", 1)]


def _cell(value):
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ") or "–"


def _table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


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
    return _table(header, rows)


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
            verdict = "**differs**: " + ", ".join("%s = %s" % (r["host"], r["observed"]) for r in odd)
            expected = next((r["expected"] for r in odd if r["expected"]), "")
            verdict += " (others: %s)" % expected if expected and "one value" not in expected else ""
        elif len(reported) < 2:
            verdict = "not compared (fewer than 2 hosts reported it)"
        else:
            verdict = "same on all %d hosts" % len(reported)
        out.append([title, ", ".join(values[:3]) + (" …" if len(values) > 3 else ""), verdict])
    return _table(["fact", "values", "across hosts"], out)


def render(run, rows, report_dir=None):
    meta = run.meta
    counts = summarize(rows)
    reachable = [h for h in run.hosts if h not in run.unreachable]
    lines = [
        "# ClusterMAX assessment: %s" % meta.get("provider", "?"),
        "",
        "- run: `%s`" % meta.get("run_id"),
        "- profile: %s" % meta.get("profile", "?"),
        "- started: %s, finished: %s%s" % (meta.get("started_at", "?"), meta.get("finished_at", "not finished"),
                                         " (interrupted: partial results)" if meta.get("interrupted") else ""),
        "- hosts: %d in the inventory, %d reachable, %d unreachable" % (len(run.hosts), len(reachable),
                                                                          len(run.unreachable)),
        "- checks: " + ", ".join("%d %s" % (n, s) for s, n in counts.items()),
        "",
    ]
    if run.unreachable:
        lines += ["## Unreachable hosts", ""]
        lines += ["- **%s**: %s" % (h, m.strip().splitlines()[0] if m.strip() else "unreachable")
                  for h, m in sorted(run.unreachable.items())]
        lines.append("")
    lines += ["## Node inventory", "", node_inventory(run), ""]
    lines += ["## Consistency across hosts", "", consistency_view(rows, run.hosts), ""]
    if report_dir:
        phase_sections = sections.render_all(run, rows, report_dir)
        if phase_sections:
            lines += [phase_sections]
    if run.load_errors:
        lines += ["## Artifacts that could not be read", ""]
        lines += ["- %s: %s" % (e["path"], e["error"]) for e in run.load_errors]
        lines.append("")
    lines += ["## Checks", ""]
    def shown(status):
        return status.upper() if status in ("fail", "error") else status

    lines.append(_table(["check", "host", "subject", "status", "observed", "expected", "reason"],
                        [[r["check_id"], r["host"], r["subject"], shown(r["status"]), r["observed"], r["expected"],
                          r["reason"]] for r in rows]))
    lines.append("")
    return "\n".join(lines)
