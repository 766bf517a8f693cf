"""Report section of the GPU compute phase: what ran (per probe and per dtype, with the skip reasons), GEMM TFLOP/s
per GPU and dtype, the MAMF sweep, grouped GEMM on MoE shapes, GEMV bandwidth, copy bandwidth, nvbandwidth.

Plots (PNG, matplotlib Agg) beside report.md: TFLOP/s per dtype per GPU, the MAMF sweep curve, the copy bandwidth
matrix. Every number shown is a result of an artifact; nothing is recomputed except maxima and medians.
"""

import math
import statistics

from probes.gpu_compute.shapes import MOE_MODELS, PROJECTIONS
from reports.grading import expectations
from reports.grading.rubric import graded_checks
from reports.grading.select import gpu_model, labels_match
from reports.load import labels_of
from reports.phases.gpu_compute import grade
from reports.render import markdown, plots
from reports.render.blocks import Bullets, Heading, Paragraph, Table, figure, strong
from reports.render.markdown import fmt_tenths as fmt

ORDER = 30
PROBES = ("gemm", "grouped_gemm", "gemv", "mamf", "copy_bw", "nvbandwidth", "hpl_mxp")
DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8_e4m3", "mxfp8", "nvfp4")
COPY_PATHS = ("h2d", "d2h", "d2d_local", "host_local")


def _records(run, probe):
    """Result rows of one probe as dicts with the labels unpacked."""
    res = run.results[run.results.probe == probe]
    # columns as lists, not itertuples: a row at a time through pandas' arrow-backed columns was 20 s at 1,000 nodes
    cols = [res[c].tolist() for c in ("labels", "host", "metric", "value", "unit", "backend", "variant")]
    return [dict(labels_of(labels), host=host, metric=metric, value=float(value), unit=unit, backend=backend,
                 variant=variant) for labels, host, metric, value, unit, backend, variant in zip(*cols)]


def lines_of(run):
    """get(probe, metric, host, **labels): the lines a GPU's value of that probe, metric and labels was judged against
    (the `metric` and `gpu_pairs` checks selecting it, with the host's GPU model's figures: as kinds.grade_metric
    resolves them, as
    the run was graded), so that the tables show it on the side of each that its row does (reports/shown.py); each
    answer kept for the GPUs that ask again."""
    known = {}

    def get(probe, metric, host, **labels):
        key = (probe, metric, host, tuple(sorted(labels.items())))
        if key not in known:
            checks = graded_checks(run, lambda c: c.get("kind") in ("metric", "gpu_pairs") and c.get("probe") == probe
                                   and c.get("metric") == metric and not c.get("variant")
                                   and labels_match(labels, dict(c.get("labels") or {}, **(c.get("part") or {}))))
            _, spec, _ = gpu_model(run, host, run.artifact(host, probe)) if checks else (None, None, None)
            found = (expectations.resolve(e, spec)[0] for c in checks for e in (c.get("expect"), c.get("warn")) if e)
            known[key] = [line for line in found if line is not None]
        return known[key]
    return get


def _gpu_key(rec):
    gpu = rec.get("gpu")
    return (rec["host"], -1 if gpu is None else int(gpu))


def _gpu_name(host, gpu, backend):
    if gpu < 0:
        return "%s (cpu)" % host
    return "%s gpu%d" % (host, gpu) if backend != "cpu" else "%s cpu" % host


def status_tables(run, docs):
    """Which probe ran where, and which GEMM dtypes ran, with the reasons of what did not."""
    hosts = [h for h in run.hosts if h not in run.unreachable]
    by = {(d["host"], d["probe"]): d for d in docs}
    reasons = {}

    def note(text):
        reasons.setdefault(text, len(reasons) + 1)
        return reasons[text]

    probe_rows = []
    for host in hosts:
        row = [host]
        for probe in PROBES:
            doc = by.get((host, probe))
            if doc is None:
                row.append("not run")
            elif doc["status"] == "ok":
                row.append("ok (%s)" % doc["device"]["backend"])
            else:
                row.append("%s [%d]" % (doc["status"], note("%s: %s" % (probe, doc.get("reason") or doc["status"]))))
        probe_rows.append(row)
    dtype_rows = []
    for host in hosts:
        doc = by.get((host, "gemm"))
        facts = (doc or {}).get("facts") or {}
        row = [host]
        for dtype in DTYPES:
            status = facts.get("dtype.%s" % dtype)
            if status is None:
                row.append("–")
            elif status == "ok":
                row.append("ok")
            else:
                why = facts.get("dtype_reason.%s" % dtype) or status
                row.append("%s [%d]" % (status, note(why if why.startswith(dtype) else "%s: %s" % (dtype, why))))
        dtype_rows.append(row)
    out = [Heading(3, "What ran"), Table(["host"] + list(PROBES), probe_rows),
           Paragraph("GEMM dtypes (a dtype this GPU or torch cannot run is skipped with the reason):"),
           Table(["host"] + list(DTYPES), dtype_rows)]
    if reasons:
        out += [Paragraph("Reasons:"), Bullets(sorted(reasons, key=reasons.get), numbered=True)]
    return out


def gemm_table(run):
    """Best TFLOP/s (2mnk / mean time of the best shape) per GPU and dtype."""
    # The artifacts' own rows: a sweep is ~1,500 rows per node, and a dict or a table row made per row was 4.5 of
    # a 1,000-node build's 26 s.
    best, backend = {}, {}
    for doc in run.artifacts:
        if doc["probe"] != "gemm":
            continue
        host, host_backend = doc["host"], doc["device"]["backend"]
        for r in doc["results"]:
            if r["metric"] != "tflops":
                continue
            labels = r.get("labels") or {}
            gpu = labels.get("gpu")
            key = (host, -1 if gpu is None else int(gpu))
            backend[key] = host_backend
            cell, value = (key, labels.get("dtype")), float(r["value"])
            if cell not in best or value > best[cell][0]:
                best[cell] = (value, labels.get("shape"))
    if not best:
        return None, {}
    keys = sorted({k for k, _ in best})
    dtypes = [d for d in DTYPES if any((k, d) in best for k in keys)]
    judged = lines_of(run)
    rows = [[_gpu_name(k[0], k[1], backend[k])] + [fmt(best[(k, d)][0], thresholds=judged("gemm", "tflops", k[0],
                                                                                         dtype=d))
                                                   if (k, d) in best else None for d in dtypes]
            for k in keys]
    text = Table(["GPU"] + ["%s TFLOP/s" % d for d in dtypes], rows)
    data = {d: [(_gpu_name(k[0], k[1], backend[k]), best[(k, d)][0]) for k in keys if (k, d) in best]
            for d in dtypes}
    return text, data


def mamf_table(run):
    recs = _records(run, "mamf")
    summary, curves = {}, {}
    for rec in recs:
        key = (_gpu_key(rec), rec.get("dtype"))
        if rec["metric"] == "mamf_tflops":
            summary.setdefault(key, {})["max"] = (rec["value"], "%sx%sx%s" % (rec.get("m"), rec.get("n"), rec.get("k")))
            summary[key]["backend"] = rec["backend"]
        elif rec["metric"] == "mamf_geomean_tflops":
            summary.setdefault(key, {})["geo"] = rec["value"]
        elif rec["metric"] == "tflops":
            curves.setdefault(key, []).append((int(rec["m"]), int(rec["n"]), int(rec["k"]), rec["value"]))
    if not summary:
        return None, {}
    rows = []
    judged = lines_of(run)
    for (gkey, dtype), s in sorted(summary.items()):
        mx = s.get("max", (None, None))
        rows.append([_gpu_name(gkey[0], gkey[1], s.get("backend")), dtype,
                     fmt(mx[0], thresholds=judged("mamf", "mamf_tflops", gkey[0], dtype=dtype)), fmt(s.get("geo")),
                     mx[1],
                     len(curves.get((gkey, dtype), []))])
    text = Table(["GPU", "dtype", "MAMF TFLOP/s (best shape)", "geometric mean", "best shape m x n x k", "shapes"],
                 rows)
    return text, {(gkey, dtype, summary[(gkey, dtype)].get("backend")): sorted(points)
                  for (gkey, dtype), points in curves.items() if (gkey, dtype) in summary}


def grouped_table(run):
    groups = {}
    for rec in _records(run, "grouped_gemm"):
        if rec["metric"] != "tflops":
            continue
        # torch's kernels and DeepGEMM's (variant deepgemm) are rows of their own, never one median
        key = (rec.get("model"), rec.get("proj"), rec.get("dtype"), int(rec.get("tokens", 0)), rec["variant"] or "")
        groups.setdefault(key, []).append(rec)
    if not groups:
        return None
    rows = []
    for key in sorted(groups):
        recs = groups[key]
        values = [r["value"] for r in recs]
        slowest = min(recs, key=lambda r: r["value"])
        first = recs[0]
        rows.append([key[0], key[1], key[2], key[3], first.get("rows"), first.get("experts_local"),
                     "%sx%s" % (first.get("n"), first.get("k")), ", ".join(sorted({r.get("impl") for r in recs})),
                     fmt(statistics.median(values)),
                     "%s (%s)" % (fmt(slowest["value"]), _gpu_name(*_gpu_key(slowest), slowest["backend"])),
                     len(recs)])
    return Table(["model", "projection", "dtype", "tokens", "rows / GPU", "experts / GPU", "n x k", "impl",
                  "median TFLOP/s", "slowest GPU", "GPUs"], rows)


def grouped_coverage(run, docs):
    """Every model x projection x dtype of the seed's grouped GEMMs: the median TFLOP/s of its largest token batch
    (slowest GPU's value beside it in the table above), or why there is none: "not supported" (this GPU or torch
    cannot), "not implemented" (this version does not measure it), "error", or not in the profile that ran."""
    # the seed's matrix through torch's kernels (cuBLASLt / hipBLASLt); DeepGEMM's rows are in the table above
    grouped = [d for d in docs if d["probe"] == "grouped_gemm" and not d.get("variant")]
    if not grouped:
        return []
    reasons = {}

    def note(text):
        reasons.setdefault(text, len(reasons) + 1)
        return reasons[text]

    values = {}
    for rec in _records(run, "grouped_gemm"):
        if rec["metric"] == "tflops_median" and not rec["variant"]:
            key = (rec.get("model"), rec.get("proj"), rec.get("dtype"))
            tokens = int(rec.get("tokens", 0))
            if key not in values or tokens > values[key][0]:
                values[key] = (tokens, [])
            if tokens == values[key][0]:
                values[key][1].append(rec["value"])
    status = {}
    for dtype in DTYPES:
        seen = [((d.get("facts") or {}).get("dtype.%s" % dtype), (d.get("facts") or {}).get("dtype_reason.%s" % dtype))
                for d in grouped if d["status"] != "skipped" or (d.get("facts") or {}).get("dtype.%s" % dtype)]
        seen = [x for x in seen if x[0]]
        status[dtype] = seen[0] if seen else (None, None)
    models_run = {m for d in grouped for m in ((d.get("params") or {}).get("models") or [])}
    rows = []
    for model in MOE_MODELS:
        for proj in PROJECTIONS:
            row = [model, proj]
            for dtype in DTYPES:
                got = values.get((model, proj, dtype))
                state, why = status[dtype]
                if got:
                    row.append("%s (%d tokens)" % (fmt(statistics.median(got[1])), got[0]))
                elif state == "skipped":
                    row.append("not supported [%d]" % note(why or "not supported here"))
                elif state == "not_implemented":
                    row.append("not implemented [%d]" % note(why or "not implemented in this version"))
                elif state == "error":
                    row.append("error [%d]" % note(why or "error"))
                elif models_run and model not in models_run:
                    row.append("not in the profile")
                else:
                    row.append("not in the profile" if state is None else state)
            rows.append(row)
    out = [Heading(3, "Grouped GEMM: every model, projection and dtype of the seed"),
           Paragraph("Median TFLOP/s at the largest token batch measured, or why there is none."),
           Table(["model", "projection"] + list(DTYPES), rows)]
    if reasons:
        out += [Bullets(sorted(reasons, key=reasons.get), numbered=True)]
    return out


def hpl_mxp_table(run):
    """HPL-MxP per node and format, then across the nodes (on the host that started it): GFLOP/s (the number HPL-MxP
    says to report), per GPU, LU alone per GPU, the scaled residual and its check."""
    by = {}
    for rec in _records(run, "hpl_mxp"):
        key = (int(rec.get("nodes") or 1), rec["host"], rec.get("format"), rec.get("n"), rec.get("grid"))
        by.setdefault(key, {})[rec["metric"]] = rec["value"]
    if not by:
        return None
    rows = []
    for (nodes, host, fmt_, n, grid), m in sorted(by.items(), key=lambda kv: tuple(str(x) for x in kv[0])):
        check = {1.0: "PASSED", 0.0: "FAILED"}.get(m.get("passed"), "–")
        where = host if nodes == 1 else "%d nodes (from %s)" % (nodes, host)
        rows.append([where, fmt_, n, grid, fmt(m.get("gflops")), fmt(m.get("gflops_per_gpu")),
                     fmt(m.get("lu_gflops_per_gpu")), "%.3e" % m["residual"] if "residual" in m else "–", check])
    return Table(["where", "format", "N", "grid", "GFLOP/s", "per GPU", "LU per GPU", "scaled residual", "check"],
                 rows)


def gemv_table(run):
    best, backend = {}, {}
    for rec in _records(run, "gemv"):
        if rec["metric"] != "gbps":
            continue
        key = (_gpu_key(rec), rec.get("dtype"))
        backend[key[0]] = rec["backend"]
        if key not in best or rec["value"] > best[key][0]:
            best[key] = (rec["value"], rec.get("shape"))
    if not best:
        return None
    judged = lines_of(run)
    rows = [[_gpu_name(k[0], k[1], backend[k]), d, fmt(v, thresholds=judged("gemv", "gbps", k[0], dtype=d)), shape]
            for (k, d), (v, shape) in sorted(best.items())]
    return Table(["GPU", "dtype", "best GB/s", "shape"], rows)


def copy_table(run):
    """Per GPU: one column per path, and the slowest / fastest peer for P2P; the matrix for the plot."""
    cells, backend, peers = {}, {}, {}
    for rec in _records(run, "copy_bw"):
        if rec["metric"] != "gbps":
            continue
        key = _gpu_key(rec)
        backend[key] = rec["backend"]
        if rec.get("direction") == "p2p":
            peers.setdefault(key, {})[int(rec["peer"])] = rec["value"]
        else:
            cells.setdefault(key, {})[rec.get("direction")] = rec["value"]
    keys = sorted(set(cells) | set(peers))
    if not keys:
        return None, None
    paths = [p for p in COPY_PATHS if any(p in cells.get(k, {}) for k in keys)]
    rows = []
    judged = lines_of(run)
    # compute.copy_p2p's own cells per host (grade.pair_cells: {(gpu, peer): value}, as it aggregates them)
    p2p = next(iter(graded_checks(run, lambda c: c.get("kind") == "gpu_pairs" and c.get("probe") == "copy_bw")), None)
    cells_of = {h: grade.pair_cells(p2p, run, h) for h in {k[0] for k in keys}} if p2p else {}
    for k in keys:
        row = [_gpu_name(k[0], k[1], backend[k])] + [
            fmt(cells.get(k, {}).get(p), thresholds=judged("copy_bw", "gbps", k[0], direction=p)) for p in paths]
        if any(peers.values()):
            # what compute.copy_p2p judges: the median of the GPU's pairs, the copies it sends and those it
            # receives (one bad link fails the GPU it belongs to, not every GPU it was paired with), and its slowest
            mine = {(int(g), int(p)): v for (g, p), v in cells_of.get(k[0], {}).items() if k[1] in (int(g), int(p))}
            lines = judged("copy_bw", "gbps", k[0], direction="p2p")
            slowest = min(mine, key=mine.get) if mine else None
            row += [fmt(statistics.median(mine.values()), thresholds=lines) if mine else None,
                    "%s (GPU %d)" % (fmt(mine[slowest], thresholds=lines), slowest[1] if slowest[0] == k[1]
                                     else slowest[0]) if mine else None]
        rows.append(row)
    header = ["GPU"] + ["%s GB/s" % p for p in paths]
    if any(peers.values()):
        header += ["p2p median of its pairs GB/s", "p2p slowest pair GB/s"]
    peer_ids = sorted({p for pv in peers.values() for p in pv})
    matrix = {"rows": [_gpu_name(k[0], k[1], backend[k]) for k in keys],
              "cols": paths + ["p2p→%d" % p for p in peer_ids],
              "values": [[cells.get(k, {}).get(p) for p in paths] + [peers.get(k, {}).get(p) for p in peer_ids]
                         for k in keys]}
    return Table(header, rows), matrix


def nvbandwidth_table(run):
    rows = []
    for rec in _records(run, "nvbandwidth"):
        if rec["metric"] == "gbps_sum":
            rows.append(rec)
    if not rows:
        return None
    stats = {}
    for rec in _records(run, "nvbandwidth"):
        if rec["metric"] in ("gbps_min", "gbps_mean", "gbps_max", "gbps_sum"):
            stats.setdefault((rec["host"], rec["test"]), {})[rec["metric"]] = rec["value"]
    body = [[h, t, fmt(s.get("gbps_min")), fmt(s.get("gbps_mean")), fmt(s.get("gbps_max")), fmt(s.get("gbps_sum"))]
            for (h, t), s in sorted(stats.items())]
    return Table(["host", "testcase", "min GB/s", "mean GB/s", "max GB/s", "sum GB/s"], body)


# ------------------------------------------------------------------------------------------------------- plots

# Above this many GPUs the GEMM plot shows distributions per dtype instead of one bar per GPU.
MAX_BARS_GPUS = 64
PLOTS = {"gemm": "gpu_compute_gemm_tflops.png", "mamf": "gpu_compute_mamf_sweep.png", "copy": "gpu_compute_copy_bw.png"}


def plot_gemm(data, report_dir):
    gpus = list(dict.fromkeys(name for points in data.values() for name, _ in points))  # first-seen order
    dtypes = list(data)
    if len(gpus) > MAX_BARS_GPUS:
        # One bar per GPU stops being readable (and costs seconds to draw) on a large cluster: show the
        # distribution per dtype instead; the per-GPU numbers stay in the tables and checks.
        made = plots.figure(max(6, 1.2 * len(dtypes) + 3), 4)
        if made is None:
            return None
        fig, ax = made
        ax.boxplot([[v for _, v in data[d]] for d in dtypes], tick_labels=dtypes, showfliers=True)
        title = "GEMM throughput per dtype across %d GPUs" % len(gpus)
    else:
        made = plots.figure(min(24, max(6, 0.6 * len(gpus) * max(1, len(dtypes)) / 2 + 3)), 4)
        if made is None:
            return None
        fig, ax = made
        width = 0.8 / max(1, len(dtypes))
        for i, dtype in enumerate(dtypes):
            values = dict(data[dtype])
            xs = [j + i * width for j, g in enumerate(gpus) if g in values]
            ax.bar(xs, [values[g] for g in gpus if g in values], width, label=dtype)
        ax.set_xticks([j + width * (len(dtypes) - 1) / 2 for j in range(len(gpus))])
        ax.set_xticklabels(gpus, rotation=45, ha="right", fontsize=7)
        ax.legend(fontsize=7, ncol=min(4, len(dtypes)))
        title = "GEMM throughput per GPU and dtype"
    ax.set_ylabel("TFLOP/s (best shape, mean time)")
    ax.set_yscale("log")
    ax.set_title(title)
    return plots.save(fig, report_dir, PLOTS["gemm"])


def plot_mamf(curves, report_dir):
    made = plots.figure(7, 4)
    if made is None:
        return None
    fig, ax = made
    for (gkey, dtype, backend), points in sorted(curves.items(), key=lambda x: (str(x[0][0]), x[0][1])):
        fixed_nk = len({(n, k) for _, n, k, _ in points}) == 1
        xs = [m for m, _, _, _ in points] if fixed_nk else list(range(len(points)))
        ax.plot(xs, [v for _, _, _, v in points], marker=".", linewidth=1,
                label="%s %s" % (_gpu_name(gkey[0], gkey[1], backend), dtype))
    ax.set_xlabel("m (n, k fixed)" if all(len({(n, k) for _, n, k, _ in p}) == 1 for p in curves.values())
                  else "shape index")
    ax.set_ylabel("TFLOP/s")
    ax.set_title("MAMF sweep")
    if len(curves) <= 16:
        ax.legend(fontsize=6)
    return plots.save(fig, report_dir, PLOTS["mamf"])


def plot_copy(matrix, report_dir):
    if not matrix["rows"]:
        return None
    made = plots.figure(max(4, 0.9 * len(matrix["cols"]) + 2), max(2.5, 0.35 * len(matrix["rows"]) + 1.5))
    if made is None:
        return None
    fig, ax = made
    values = [[float("nan") if v is None else v for v in row] for row in matrix["values"]]
    image = ax.imshow(values, aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(matrix["cols"])))
    ax.set_xticklabels(matrix["cols"], rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(matrix["rows"])))
    ax.set_yticklabels(matrix["rows"], fontsize=7)
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, fmt(v), ha="center", va="center", fontsize=6, color="white")
    fig.colorbar(image, ax=ax, label="GB/s")
    ax.set_title("Copy bandwidth (torch copies)")
    return plots.save(fig, report_dir, PLOTS["copy"])


def blocks(run, rows, report_dir):
    docs = [d for d in run.artifacts if d["probe"] in PROBES]
    if not docs:
        return []
    out = [Heading(2, "GPU compute")]
    backends = {}
    for doc in docs:
        backends.setdefault(doc["device"]["backend"], set()).add(doc["host"])
    items = []
    for backend, hosts in sorted(backends.items()):
        item = ["backend ", strong(backend), " on %s" % ", ".join(sorted(hosts))]
        if backend == "cpu":
            item.append(": torch on the CPU runs the same probes, timing and artifacts; these are CPU numbers, and "
                        "every GPU expectation is graded as skip")
        items.append(item)
    out.append(Bullets(items))
    out += status_tables(run, docs)
    gemm_text, gemm_data = gemm_table(run)
    mamf_text, curves = mamf_table(run)
    copy_text, matrix = copy_table(run)
    # (heading, note, table, plot drawn from data, data, the plot's caption); a part without a table is left out
    parts = [
        ("GEMM TFLOP/s per GPU", "Best shape per dtype; TFLOP/s = 2·m·n·k / mean time of the timed iterations (L2 "
         "flushed before each), all GPUs of a node at once.", gemm_text, plot_gemm, gemm_data,
         "GEMM TFLOP/s per GPU and dtype"),
        ("MAMF sweep", None, mamf_text, plot_mamf, curves, "MAMF sweep"),
        ("Grouped GEMM on MoE expert shapes", "Balanced routing; each GPU holds experts / ep experts and their share "
         "of tokens × top-k rows.", grouped_table(run), None, None, None),
        ("GEMV bandwidth (decode proxy)", "GB/s = (m·k + k + m) · bytes per element / mean time.", gemv_table(run),
         None, None, None),
        ("Copy bandwidth", None, copy_text, plot_copy, matrix, "Copy bandwidth matrix"),
        ("nvbandwidth", None, nvbandwidth_table(run), None, None, None),
        ("HPL-MxP", "One solve per format on each node's GPUs, then one across all nodes (started from the first "
         "host through srun or mpirun); GFLOP/s is the figure HPL-MxP marks as the one to report.",
         hpl_mxp_table(run), None, None, None),
    ]
    for title, note, table, plot, data, caption in parts:
        if table:
            out += [Heading(3, title)] + ([Paragraph(note)] if note else []) + [table]
            out += figure(plot(data, report_dir) if plot and report_dir and data else None, caption)
        if title.startswith("Grouped GEMM"):
            out += grouped_coverage(run, docs)
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
