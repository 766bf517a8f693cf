"""Report section of the inference phase: what ran (engine, model, load generator, backend, scenarios, node counts),
failures with their logs, the throughput–interactivity plot (InferenceX's: output tokens/s per GPU against tokens/s
one user sees, one line per scenario × node count), and tables per point: throughput, goodput within the rubric's
SLOs and the regime (compute-, memory- or comms-bound); the latency percentiles (TTFT, TPOT, ITL, E2EL at p50, p90,
p99); one node against the most nodes (goodput per GPU at the same concurrency per engine); the server's ready time.

Every number is a result of an artifact, or counted here from its per-request lists (goodput); a point is shown
for the host that drove it (every host drives its own one-node points), the plot takes the median over hosts.
"""

import statistics

from reports.grading.rows import summary_line
from reports.grading.rubric import graded_checks
from reports.phases.inference.grade import (
    GOODPUT_CHECK,
    LATENCIES,
    PERCENTILES,
    PROBE,
    graded_slos,
    point_goodput,
    point_name,
    points,
    ready_times,
    regime_of_points,
    scaling_pairs,
    slo_text,
)
from reports.render import markdown, plots
from reports.render.blocks import Bullets, Heading, Paragraph, Table, code, figure, joined, link, strong
from reports.render.markdown import fmt
from reports.shown import shown

ORDER = 46


def _docs(run):
    return [d for d in run.artifacts if d["probe"] == PROBE]


def status_table(run):
    reasons, rows = {}, []
    for host in [h for h in run.hosts if h not in run.unreachable]:
        doc = run.artifact(host, PROBE)
        if doc is None:
            cell = "not run"
        elif doc["status"] == "ok":
            cell = "ok (%s, %s)" % (doc["device"]["backend"], (doc.get("facts") or {}).get("engine", "?"))
        else:
            text = doc.get("reason") or doc["status"]
            reasons.setdefault(text, len(reasons) + 1)
            cell = "%s [%d]" % (doc["status"], reasons[text])
        rows.append([host, cell])
    out = [Table(["host", "inference"], rows)]
    if reasons:
        out.append(Bullets(sorted(reasons, key=reasons.get), numbered=True))
    return out


def failures_list(run):
    """One item per failure a host recorded: the host, node count, kind, message and a link to its log."""
    items = []
    for doc in _docs(run):
        for f in (doc.get("facts") or {}).get("failures") or []:
            log = f.get("log")
            where = [link("%s/%s" % (doc["host"], log), "../artifacts/%s/%s" % (doc["host"], log))] if log else \
                ["no log"]
            items.append([strong(doc["host"]), " (%s nodes, %s): %s — log: " % (
                f.get("nodes", "?"), f.get("kind", "error"), f.get("message"))] + joined(where))
    return items


def describe(doc):
    """The line naming the engine, model, load generator and backend, then the sweep's shape."""
    f = doc.get("facts") or {}
    scenarios = f.get("scenarios") or {}
    shapes = "; ".join("%s: %s" % (name, ", ".join("%s %s" % kv for kv in sorted(spec.items())))
                       for name, spec in sorted(scenarios.items()) if isinstance(spec, dict))
    conc = ", ".join(str(c) for c in f.get("concurrencies") or []) or "?"
    model = f.get("model_name") or f.get("model") or "?"
    served = [" (%s from " % f["engine_dist"], code(f["engine_python"]), ")"] if f.get("engine_python") else []
    return ["Engine ", code("%s %s" % (f.get("engine", "?"), f.get("engine_version") or ""))] + served + [
            " (SGLang, the other serving engine, is not implemented in this version), model ",
            code(model), " (%s), load generator " % (f.get("model") or "?"), code(f.get("load_generator", "?")),
            ", backend %s; %s GPUs per node, tensor parallel %s; node counts run: %s; concurrencies %s. "
            "Scenarios: %s." % (doc["device"]["backend"], f.get("gpus_per_node", "?"), f.get("tensor_parallel", "?"),
                                 f.get("world_sizes_run") or "none", conc, shapes or "?")]


def _ordered(pts):
    return sorted(pts, key=lambda k: (k[1], k[2], k[3], k[0]))


def goodput_lines(run, pts):
    """{point: (fail_below, warn_below)} of the points inference.goodput judged (grade.grade_goodput: per host and
    scenario, the lowest concurrency on the check's `nodes`), as the run was graded with it (graded_slos' check)."""
    out = {}
    for check in graded_checks(run, lambda c: c.get("id") == GOODPUT_CHECK):
        nodes, lowest = int(check.get("nodes", 1)), {}
        for key in pts:
            host, n, scenario, conc = key
            if n == nodes and ((host, scenario) not in lowest or conc < lowest[(host, scenario)][3]):
                lowest[(host, scenario)] = key
        lines = tuple(float(check[k]) for k in ("fail_below", "warn_below") if k in check)
        for key in lowest.values():
            out[key] = out.get(key, ()) + lines
    return out


def points_table(run, pts, slos):
    regimes = regime_of_points(run)
    judged = goodput_lines(run, pts)
    rows = []
    for key in _ordered(pts):
        host, nodes, scenario, conc = key
        p = pts[key]
        g = point_goodput(run, key, p, slos)
        # the fraction the goodput check judged is shown on its side of the check's lines (reports/shown.py)
        good = "%s %% (%d/%d), %s/s" % (shown(g["fraction"], judged.get(key, ()), scale=100), g["good"], g["total"],
                                        fmt(g["per_s"])) if g and g["total"] and g["per_s"] is not None else None
        regime, why = regimes.get(key, (None, ""))
        rows.append([host, nodes, scenario, conc, fmt(p.get("output_tokens_per_s_per_gpu")),
                     fmt(p.get("interactivity_tokens_per_s_per_user")), fmt(p.get("requests_per_s")),
                     "%d / %d" % (p.get("requests_completed", 0), p.get("requests_failed", 0)), good,
                     "%s (%s)" % (regime, why) if regime else "— (%s)" % why])
    columns = ["host", "nodes", "scenario", "concurrency", "output tokens/s per GPU", "tokens/s per user",
               "requests/s", "ok / failed", "goodput (within SLOs)", "regime"]
    return Table(columns, rows)


def latency_table(pts):
    rows = []
    for key in _ordered(pts):
        p = pts[key]
        rows.append(list(key[1:]) + [key[0]] + [fmt(p.get("%s_%s_ms" % (m, s))) for m in LATENCIES
                                                 for s in PERCENTILES])
    columns = ["nodes", "scenario", "concurrency", "host"] + ["%s %s" % (m.upper(), s) for m in LATENCIES
                                                               for s in PERCENTILES]
    return Table(columns, rows)


def scaling_table(run, slos):
    # the ratio with as many digits as keep it on its side of the lines the scaling check judged it against
    # (0.7496 under a fail line of 0.75 is not "0.75"), as the check's row shows it
    lines = tuple(float(c[k]) for c in graded_checks(run, lambda c: c.get("kind") == "infer_scaling")
                  for k in ("fail_below", "warn_below") if k in c)
    rows = []
    for scenario, ratio, key, one, many, interpolated, _why in scaling_pairs(run, slos):
        base = "%s (interpolated)" % fmt(one) if interpolated and one is not None else fmt(one)
        rows.append([scenario, point_name(*key[1:]), base, fmt(many),
                     fmt(ratio, thresholds=lines) if ratio is not None else None])
    if not rows:
        return None
    return Table(["scenario", "most nodes", "1 node: good requests/s per GPU", "most nodes: good requests/s per GPU",
                  "ratio"], rows)


def ready_table(run):
    times = ready_times(run)
    if not times:
        return None
    return Table(["host", "nodes", "ready s"], [[h, n, fmt(s)] for (h, n), s in sorted(times.items())])


def plot_curve(run, report_dir, pts):
    """Output tokens/s per GPU (y) against tokens/s per user (x), one line per scenario × node count, points in
    concurrency order (the median over the hosts that drove the point)."""
    series = {}
    for (_, nodes, scenario, conc), p in pts.items():
        x, y = p.get("interactivity_tokens_per_s_per_user"), p.get("output_tokens_per_s_per_gpu")
        if x is not None and y is not None:
            series.setdefault((scenario, nodes), {}).setdefault(conc, []).append((x, y))
    made = plots.figure(6.5, 4) if series else None
    if made is None:
        return None
    fig, ax = made
    for (scenario, nodes), by_conc in sorted(series.items()):
        line = [(statistics.median(x for x, _ in v), statistics.median(y for _, y in v), c)
                for c, v in sorted(by_conc.items())]
        xs, ys, cs = zip(*line)
        ax.plot(xs, ys, marker="o", label="%s, %d node%s" % (scenario, nodes, "s" if nodes > 1 else ""))
        for x, y, c in line:
            ax.annotate("c%d" % c, (x, y), textcoords="offset points", xytext=(3, 3), fontsize=6)
    ax.set_xlabel("interactivity: tokens/s per user (1000 / median TPOT)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("Inference: throughput against interactivity (up and right is better)")
    return plots.save(fig, report_dir, "inference_throughput_interactivity.png")


def blocks(run, rows, report_dir):
    if not _docs(run):
        return []
    out = [Heading(2, "Inference")] + status_table(run)
    failures = failures_list(run)
    if failures:
        out += [Heading(4, "Failures (engine start, crashes, hangs)"), Bullets(failures)]
    described = [d for d in _docs(run) if d.get("facts")]
    if described:
        out.append(Paragraph(describe(described[0])))
    pts = points(run)
    slos = graded_slos(run)
    if pts:
        if report_dir:
            out += figure(plot_curve(run, report_dir, pts), "output tokens/s per GPU against tokens/s per user")
        out += [Heading(3, "Points: throughput, goodput, regime"),
                Paragraph("Goodput counts the requests that succeeded within the scenario's SLOs: %s." % "; ".join(
                    "%s %s" % (s, slo_text(slo)) for s, slo in sorted(slos.items()))),
                points_table(run, pts, slos),
                Heading(3, "Latency percentiles (ms)"), latency_table(pts)]
        scaling = scaling_table(run, slos)
        if scaling:
            out += [Heading(3, "One node against the most nodes (same concurrency per engine)"), scaling]
    ready = ready_table(run)
    if ready:
        out += [Heading(3, "Server ready time"), ready]
    mine = [r for r in rows if r["check_id"].startswith("inference.")]
    if mine:
        out.append(Paragraph("Inference checks: " + summary_line(mine)))
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
