"""Report section of the network phase: what ran (with the reasons of what did not), failures with their logs,
collective curves (busbw against message size per collective, one line per world size; latency too, which also
shows one-rank worlds), nccl-tests, perftest per rail, and the pairwise TCP matrix.

Plots (PNG, matplotlib Agg) beside report.md. Every number is a result of an artifact; a multi-node curve measured by
several hosts shows the lowest value per point (the slowest host sets the pace).
"""

import json

from reports.grading.rows import summary_line
from reports.grading.rubric import graded_checks
from reports.phases.network.grade import (
    curves,
    frame,
    human_bytes,
    placement_scope,
    scaled_worlds,
    scaling,
    scaling_lines,
    tree_left_out,
)
from reports.render import markdown, plots
from reports.render.blocks import Bullets, Heading, Paragraph, Table, em, figure, joined, link, strong
from reports.render.markdown import fmt_tenths as fmt

ORDER = 40
PROBES = (("collectives", None), ("collectives", "nvlink_off"), ("collectives", "ring"), ("nccl_tests", None),
          ("nccl_tests", "nvlink_off"), ("nccl_tests", "ring"), ("perftest", None), ("tcp_pairs", None))


def _name(probe, variant):
    return "%s-%s" % (probe, variant) if variant else probe


def status_table(run):
    hosts = [h for h in run.hosts if h not in run.unreachable]
    reasons = {}
    rows = []
    for host in hosts:
        row = [host]
        for probe, variant in PROBES:
            doc = run.artifact(host, probe, variant)
            if doc is None:
                row.append("not run")
            elif doc["status"] == "ok":
                row.append("ok (%s)" % doc["device"]["backend"])
            else:
                text = "%s: %s" % (_name(probe, variant), doc.get("reason") or doc["status"])
                reasons.setdefault(text, len(reasons) + 1)
                row.append("%s [%d]" % (doc["status"], reasons[text]))
        rows.append(row)
    out = [Table(["host"] + [_name(p, v) for p, v in PROBES], rows)]
    if reasons:
        out.append(Bullets(sorted(reasons, key=reasons.get), numbered=True))
    return out


def failures_list(run):
    """One item per distinct failure of a probe: its hosts, the message and a link to each host's log."""
    seen, items = set(), []
    for doc in run.artifacts:
        for f in (doc.get("facts") or {}).get("failures") or []:
            if not isinstance(f, dict):
                continue
            key = (doc["probe"], doc.get("variant"), f.get("message"))
            hosts = [d["host"] for d in run.artifacts if d["probe"] == doc["probe"] and d.get("variant") ==
                     doc.get("variant") and any(isinstance(x, dict) and x.get("message") == f.get("message")
                                                for x in (d.get("facts") or {}).get("failures") or [])]
            if key in seen:
                continue
            seen.add(key)
            log = f.get("log")
            logs = [link("%s/%s" % (h, log), "../artifacts/%s/%s" % (h, log)) for h in hosts] if log else ["no log"]
            items.append([strong(_name(doc["probe"], doc.get("variant"))),
                          " (%s): %s — logs: " % (", ".join(hosts), f.get("message"))] + joined(logs))
    return items


def peak_table(df, times=None):
    """Peak busbw per (collective, placement, world size) of the cluster curve, and the time of its smallest message
    (what network.nccl_tests_latency judges)."""
    smallest = {}
    for key, points in curves(times if times is not None else df.iloc[:0], slowest=max).items():
        sized = [(s, t) for s, t in points if s > 0]
        if sized:
            smallest[key] = "%s us at %s" % (fmt(sized[0][1]), human_bytes(sized[0][0]))
    rows = []
    for key, points in sorted(curves(df).items(), key=lambda kv: (kv[0][2], kv[0][3], kv[0][0])):
        nodes, ranks, coll, place = key
        size, value = max(points, key=lambda p: p[1])
        rows.append([coll, place.replace("_", "-"), nodes, ranks, fmt(value), human_bytes(size), len(points),
                     smallest.get(key, "–")])
    return Table(["collective", "placement", "nodes", "ranks", "peak busbw GB/s", "at size", "sizes",
                  "smallest message"], rows)


def _size_label(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            return "%d%s" % (size >> shift, unit)
    return "%d" % size


def _size_axis(ax, sizes):
    """Log2 x axis with a few plain tick labels (mathtext labels and tight_layout make plotting several times
    slower)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator  # noqa: PLC0415

    ax.set_xscale("log", base=2)
    sizes = sorted(set(sizes))
    step = max(1, len(sizes) // 6)
    ticks = sizes[::step]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([_size_label(t) for t in ticks]))
    ax.xaxis.set_minor_locator(NullLocator())


def plot_curves(df, title, ylabel, report_dir, name, log_y=False, slowest=min):
    """One panel per collective, one line per (world size, placement); the slowest host per point (curves)."""
    series = curves(df, slowest)
    colls = sorted({k[2] for k in series})
    if not colls:
        return None
    cols = min(3, len(colls))
    rows = (len(colls) + cols - 1) // cols
    made = plots.figure(5 * cols, 3.6 * rows, rows, cols, squeeze=False)
    if made is None:
        return None
    from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: PLC0415 - matplotlib is there: figure() drew

    fig, axes = made
    for ax, coll in zip(axes.flat, colls):
        sizes = []
        for (nodes, ranks, c, place), points in sorted(series.items()):
            if c != coll or not points:
                continue
            xs, ys = zip(*points)
            sizes += xs
            both = c in ("all_gather", "reduce_scatter")  # the collectives measured in and out of place
            ax.plot(xs, ys, marker=".", linestyle="--" if both and place == "in_place" else "-",
                    label="%d node%s (%d ranks)%s" % (nodes, "s" if nodes > 1 else "", ranks,
                                                      ", in-place" if both and place == "in_place" else ""))
        _size_axis(ax, sizes)
        if log_y:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: "%g" % v))
            ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(coll)
        ax.set_xlabel("message size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(colls):]:
        ax.axis("off")
    fig.suptitle(title)
    # Placed by hand: tight_layout with these log axes makes plotting several times slower.
    fig.subplots_adjust(left=0.07, right=0.98, top=0.9, bottom=0.1, hspace=0.45, wspace=0.28)
    return plots.save(fig, report_dir, name, layout=None)


def collectives_part(run, probe, variant, report_dir):
    busbw = frame(run, probe, "busbw_gbps", variant)
    times = frame(run, probe, "time_us", variant)
    if busbw.empty and times.empty:
        return []
    name = _name(probe, variant)
    backends = sorted(set(busbw.backend) | set(times.backend))
    out = [Heading(3, name),
           Paragraph("Backend: %s. Multi-node curves show the slowest host per point." % ", ".join(backends))]
    if not busbw.empty:
        out.append(peak_table(busbw, times))
    if report_dir:
        image = plot_curves(busbw, "%s: busbw against message size" % name, "busbw (GB/s)", report_dir,
                            "network_%s_busbw.png" % name) if not busbw.empty else None
        out += figure(image, "%s busbw" % name)
        image = plot_curves(times, "%s: time per call against message size" % name, "time (us)", report_dir,
                            "network_%s_time.png" % name, log_y=True, slowest=max) if not times.empty else None
        if image:
            out += figure(image, "%s time" % name)
            out.append(Paragraph(em("Time per call includes one-rank worlds, which move nothing over any bus (no "
                                    "busbw).")))
    return out


def _efficiency_cells(worlds, coll, leave_out_two, lines=None):
    """{(nodes, ranks): (size, busbw, efficiency text)} of one collective and placement: each multi-node world
    against the smallest at the largest size both measured, the ratio network.*_scaling judges (grade.scaling);
    the worlds it does not compare show their largest size and why. The efficiency is shown on the side of each of
    `lines` (the check's fail_below and warn_below; by default grade.scaling_lines' own) the ratio is on."""
    percent_lines = [100 * line for line in (scaling_lines({}) if lines is None else lines)]
    compared = scaled_worlds(worlds, leave_out_two)
    cells = {}
    for world, points in worlds.items():
        size, value = points[-1]
        if world[0] == 1:
            why = "– (one node: NVLink)"
        elif world not in compared:
            why = "– (NCCL tree at 2 nodes: no reference)"
        else:
            why = "reference" if world == compared[0] else "–"
        cells[world] = (size, value, why)
    for nodes, ranks, ref, size, value, ratio in scaling(worlds, coll, leave_out_two):
        if compared and ref == compared[0][0]:
            # the reference row shows its own largest size; the comparison is at the size both measured, so the
            # reference's busbw there is named beside the ratio (the nearest of its sizes: sizes are rounded per rank)
            at = min(worlds[compared[0]], key=lambda point: abs(point[0] - size))
            cells[(nodes, ranks)] = (size, value, "%s %% of %d nodes (%s GB/s at %s)" % (
                fmt(100 * ratio, thresholds=percent_lines), ref, fmt(at[1]), human_bytes(at[0])))
    return cells


def scaling_part(run, probe, variant):
    """World size -> busbw and its efficiency against the smallest multi-node world (the figure the scaling check
    judges: grade.scaling), and where each world ran (hosts, racks or NVLink domains) with the launcher that started
    it."""
    busbw = frame(run, probe, "busbw_gbps", variant)
    if busbw.empty:
        return []
    docs = [d for d in run.artifacts if d["probe"] == probe and d.get("variant") == variant]
    steps = {}
    for doc in docs:
        for step in (doc.get("facts") or {}).get("placement") or []:
            steps.setdefault(int(step["nodes"]), step)
    launchers = sorted({(d.get("facts") or {}).get("launcher") for d in docs if (d.get("facts") or {}).get(
        "launcher")})
    by_coll = {}
    for (nodes, ranks, coll, place), points in curves(busbw).items():
        by_coll.setdefault((coll, place), {})[(nodes, ranks)] = points
    # the lines of the scaling check of this probe (and variant) that judged these ratios
    checks = graded_checks(run, lambda c: c.get("kind") == "net_scaling" and c.get("probe") == probe
                                    and c.get("variant") == variant)
    lines = [line for c in checks for line in scaling_lines(c)]
    rows = []
    for (coll, place), worlds in sorted(by_coll.items()):
        if len(worlds) < 2:
            continue
        cells = _efficiency_cells(worlds, coll, tree_left_out(coll, busbw.backend, variant), lines)
        for (nodes, ranks), (size, value, eff) in sorted(cells.items()):
            step = steps.get(nodes) or {"nodes": nodes}
            rows.append([coll, place.replace("_", "-"), nodes, ranks, human_bytes(size), fmt(value), eff,
                         placement_scope(step),
                         ", ".join(step.get("hosts") or []) if nodes > 1 else "each node alone"])
    if not rows:
        return []
    return [Heading(4, "Scaling across nodes: %s" % _name(probe, variant)),
            Paragraph("Started by %s. Efficiency: busbw against the smallest multi-node world's (the reference row) "
                      "at the largest size both measured, the figure the scaling check judges (busbw is per rank: "
                      "100 %% is ideal); alltoall per GPU of network bandwidth, busbw / (N/(N-1) × (n-1)/n) "
                      "(NVIDIA/nccl-tests#130). One node runs over NVLink and is not compared."
                      % (", ".join(launchers) or "?")),
            Table(["collective", "placement", "nodes", "ranks", "size", "busbw GB/s",
                   "efficiency (against the smallest multi-node world)", "where", "hosts"], rows)]


def plot_perftest(bars, report_dir):
    made = plots.figure(8, 0.3 * len(bars) + 1.5)
    if made is None:
        return None
    fig, ax = made
    ax.barh([b[0] for b in bars], [b[1] for b in bars])
    ax.set_xlabel("Gbit/s (average)")
    ax.set_title("RDMA bandwidth per rail")
    fig.subplots_adjust(left=0.4, right=0.97)
    return plots.save(fig, report_dir, "network_perftest.png", layout=None)


def perftest_part(run, report_dir):
    res = run.results[(run.results.probe == "perftest") & (run.results.metric == "bw_avg_gbits")]
    if res.empty:
        return []
    rows, bars = [], []
    for host, value, labels in zip(res.host, res.value, res.labels):
        lab = json.loads(labels)
        rows.append([host, lab.get("hca"), lab.get("test"), lab.get("mem"), lab.get("peer"), lab.get("link_type"),
                     fmt(value)])
        bars.append(("%s %s %s/%s" % (host, lab.get("hca"), lab.get("test"), lab.get("mem")), value))
    out = [Heading(3, "perftest per rail"), Table(["host", "hca", "test", "memory", "peer", "link", "Gbit/s"], rows)]
    return out + figure(plot_perftest(bars, report_dir) if report_dir and bars else None, "perftest per rail")


def plot_tcp(hosts, bw, report_dir):
    made = plots.figure(1.2 * len(hosts) + 3, 1.0 * len(hosts) + 2)
    if made is None:
        return None
    import numpy as np  # noqa: PLC0415 - with matplotlib, for its grid

    fig, ax = made
    grid = np.full((len(hosts), len(hosts)), np.nan)
    for (s, d), v in bw.items():
        grid[hosts.index(s), hosts.index(d)] = v
    image = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(hosts)), hosts, rotation=45, ha="right")
    ax.set_yticks(range(len(hosts)), hosts)
    ax.set_xlabel("receiver")
    ax.set_ylabel("sender")
    for i in range(len(hosts)):
        for j in range(len(hosts)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, fmt(grid[i, j]), ha="center", va="center", color="w", fontsize=8)
    fig.colorbar(image, ax=ax, label="Gbit/s")
    ax.set_title("TCP bandwidth between pairs")
    fig.subplots_adjust(left=0.25, bottom=0.25)
    return plots.save(fig, report_dir, "network_tcp_pairs.png", layout=None)


def tcp_part(run, report_dir):
    res = run.results[run.results.probe == "tcp_pairs"]
    if res.empty:
        return []
    cells = {}
    for metric, value, labels in zip(res.metric, res.value, res.labels):
        lab = json.loads(labels)
        cells.setdefault(metric, {})[(lab.get("src"), lab.get("dst"))] = value
    hosts = sorted({h for m in cells.values() for pair in m for h in pair})
    bw, rtt, loss = cells.get("bw_gbits", {}), cells.get("rtt_us", {}), cells.get("loss_pct", {})
    rows = []
    for src in hosts:
        row = [src]
        for dst in hosts:
            if src == dst:
                row.append("")
                continue
            parts = []
            if (src, dst) in bw:
                parts.append("%s Gb/s" % fmt(bw[(src, dst)]))
            if (src, dst) in rtt:
                parts.append("%s us" % fmt(rtt[(src, dst)]))
            if (src, dst) in loss:
                parts.append("%g%% loss" % loss[(src, dst)])
            row.append(" · ".join(parts) or "–")
        rows.append(row)
    tools = sorted({(d.get("facts") or {}).get("bandwidth_tool") for d in run.artifacts if d["probe"] == "tcp_pairs"
                    and (d.get("facts") or {}).get("bandwidth_tool")})
    out = [Heading(3, "TCP between every directed pair"),
           Paragraph("Rows send, columns receive: bandwidth (%s), TCP round trip (median), ping loss." %
                     ", ".join(tools)),
           Table(["src \\ dst"] + hosts, rows)]
    return out + figure(plot_tcp(hosts, bw, report_dir) if report_dir and bw else None, "TCP pairs")


def blocks(run, rows, report_dir):
    if not any(d["probe"] in {p for p, _ in PROBES} for d in run.artifacts):
        return []
    out = [Heading(2, "Network")] + status_table(run)
    failures = failures_list(run)
    if failures:
        out += [Heading(4, "Failures (hangs, crashes, errors)"), Bullets(failures)]
    for probe, variant in PROBES[:6]:
        out += collectives_part(run, probe, variant, report_dir)
        out += scaling_part(run, probe, variant)
    out += perftest_part(run, report_dir)
    out += tcp_part(run, report_dir)
    net_rows = [r for r in rows if r["category"] == "networking"]
    if net_rows:
        out.append(Paragraph("Network checks: " + summary_line(net_rows)))
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
