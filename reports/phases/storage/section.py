"""Report section of the storage phase: the fio sweep per tier (aggregate throughput, IOPS and latency for every
workload × client count, with what was skipped and why), checkpoint save/load, metadata rates and anomalies,
import torch time, object storage, datagen, and IOR, mdtest and elbencho on each node and as one world across the
nodes of a shared tier.

Plots (PNG, matplotlib Agg) beside report.md: per tier a heatmap of aggregate throughput (workload × clients),
throughput against clients (one line per workload), and the latency percentiles of every workload at the most
clients. Aggregate latency percentiles are the worst client's, as the fio_sweep probe records them.
"""

import fnmatch
import json

from reports.grading.rubric import graded_checks
from reports.grading.select import labels_match
from reports.render import markdown, plots
from reports.render.blocks import Bullets, Figures, Heading, Image, Paragraph, Table, code, strong
from reports.render.markdown import fmt

ORDER = 50
WORKLOAD_ORDER = ("seq_read_buffered", "seq_write_buffered", "rand_read_buffered", "rand_write_buffered",
                  "seq_read_direct", "seq_write_direct", "rand_read_direct", "rand_write_direct")
PCTS = (("fio_clat_p50_us", "p50"), ("fio_clat_p90_us", "p90"), ("fio_clat_p99_us", "p99"),
        ("fio_clat_p99_9_us", "p99.9"))


def _docs(run, probe):
    return [d for d in run.artifacts if d["probe"] == probe]


def _values(checks, scale):
    """The fixed lines (expect and warn `value`s) of checks, in the units their rows show: the check's `scale` times
    the metric's unit. Only those of the checks whose scale is the table's (`scale`: the table shows the metric
    times it), so that a line and the number shown beside it are in one unit."""
    return [float(e["value"]) for c in checks if float(c.get("scale", 1.0)) == scale
            for e in (c.get("expect"), c.get("warn")) if e and "value" in e]


def lines(run, probe, metric, labels, scale=1.0):
    """The lines a value shown here (the metric times `scale`) was judged against: those of the checks of `probe`
    and `metric` whose `labels` the value's labels have (storage_tier_metric, storage_world), as the run was graded
    (reports.grading.rubric.graded_checks)."""
    return _values(graded_checks(run, lambda c: c.get("probe") == probe and c.get("metric") == metric
                                          and labels_match(labels, c.get("labels"))), scale)


def lines_of(run):
    """lines(run, probe, metric, **labels), each answer kept for the part that asks (a fleet's thousands of rows ask
    the same few)."""
    known = {}

    def get(probe, metric, **labels):
        key = (probe, metric, tuple(sorted(labels.items())))
        if key not in known:
            known[key] = lines(run, probe, metric, labels)
        return known[key]
    return get


def fio_lines(run, metric, workload, scale=1.0):
    """The lines of the fio checks per client (storage_fio_client, threshold mode) of `metric` and `workload`."""
    return _values(graded_checks(run, lambda c: (
        c.get("kind") == "storage_fio_client" and c.get("metric") == metric and c.get("mode", "threshold") ==
        "threshold" and any(fnmatch.fnmatchcase(workload, w) for w in c.get("workloads") or ["*"]))), scale)


def _workloads(names):
    known = [w for w in WORKLOAD_ORDER if w in names]
    return known + sorted(set(names) - set(known))


def sweep_points(run):
    """{tier: {(workload, clients): {metric: value}}} of the aggregate results, from the driver artifacts."""
    out = {}
    for r in run.records("fio_sweep"):
        if r["labels"].get("scope") != "aggregate":
            continue
        key = (r["labels"]["workload"], int(r["labels"]["clients"]))
        out.setdefault(r["variant"], {}).setdefault(key, {})[r["metric"]] = r["value"]
    return out


def _plots(tier, points, report_dir):
    """Writes the three plots of one tier; returns their file names (none when matplotlib is missing)."""
    workloads = _workloads({w for w, _ in points})
    clients = sorted({c for _, c in points})
    made = plots.figure(1.6 + 1.1 * len(clients), 0.9 + 0.45 * len(workloads))
    if made is None:
        return []
    from matplotlib.colors import LogNorm  # noqa: PLC0415 - matplotlib is there: figure() drew

    fig, ax = made
    grid = [[points.get((w, c), {}).get("fio_bw_bytes", float("nan")) / 1e6 for c in clients] for w in workloads]
    finite = [v for row in grid for v in row if v == v and v > 0]
    norm = LogNorm(vmin=min(finite), vmax=max(finite)) if finite and min(finite) < max(finite) else None
    image = ax.imshow(grid, aspect="auto", cmap="viridis", norm=norm)
    ax.set_xticks(range(len(clients)), ["c%d" % c for c in clients])
    ax.set_yticks(range(len(workloads)), workloads)
    for i, row in enumerate(grid):
        for j, v in enumerate(row):
            if v == v:
                bright = norm(v) > 0.6 if norm is not None else False
                ax.text(j, i, fmt(v), ha="center", va="center", color="black" if bright else "white", fontsize=8)
    fig.colorbar(image, ax=ax, label="aggregate MB/s")
    ax.set_title("fio sweep, tier %s: aggregate MB/s" % tier)
    names = [plots.save(fig, report_dir, "storage_heatmap_%s.png" % tier)]

    fig, ax = plots.figure(7, 4)
    for w in workloads:
        xs = [c for c in clients if (w, c) in points and "fio_bw_bytes" in points[(w, c)]]
        ax.plot(xs, [points[(w, c)]["fio_bw_bytes"] / 1e6 for c in xs], marker="o", label=w)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(clients, [str(c) for c in clients])
    ax.set_xlabel("clients")
    ax.set_ylabel("aggregate MB/s")
    ax.set_title("fio throughput against clients, tier %s" % tier)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    names.append(plots.save(fig, report_dir, "storage_scaling_%s.png" % tier))

    top = max(clients)
    fig, ax = plots.figure(8, 4)
    width = 0.8 / len(PCTS)
    for k, (metric, label) in enumerate(PCTS):
        values = [points.get((w, top), {}).get(metric, float("nan")) / 1000.0 for w in workloads]
        ax.bar([i + k * width for i in range(len(workloads))], values, width, label=label)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(workloads))], workloads, rotation=30, ha="right",
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("completion latency, ms (worst client)")
    ax.set_title("fio latency percentiles at c%d, tier %s" % (top, tier))
    ax.legend(fontsize=8)
    names.append(plots.save(fig, report_dir, "storage_latency_%s.png" % tier))
    return names


def _not_ok(docs):
    rows = []
    for d in sorted(docs, key=lambda d: (d["host"], d.get("variant") or "")):
        if d["status"] != "ok":
            rows.append([d["host"], d["probe"], d.get("variant") or "", d["status"], d.get("reason")])
    return rows


def tiers_part(run):
    """The tiers of the run when they were discovered (probes/storage/storage_tiers.py): each with its path, file
    system and whether the nodes share it, what was left out and why; nothing when storage_tiers named them."""
    docs = sorted(_docs(run, "storage_tiers"), key=lambda d: d["host"])
    first = next((d for d in docs if (d.get("facts") or {}).get("run_tiers")), None)
    if first is None:
        return []
    tiers = json.loads(first["facts"]["run_tiers"])
    out = [Heading(3, "Tiers (discovered on every node)"),
           Table(["tier", "path", "filesystem", "mount point", "shared"],
                 [[t["name"], code(t["path"]), t.get("fstype") or "", t.get("mount_point") or "",
                   "yes: every node saw every node's marker" if t["shared"] else "no: private to each node"]
                  for t in tiers])]
    notes = ["%s: %s" % kv for kv in sorted(json.loads(first["facts"].get("run_left_out") or "{}").items())]
    for doc in docs:
        notes += ["%s on %s: %s" % (path, doc["host"], why)
                  for path, why in sorted(json.loads((doc.get("facts") or {}).get("left_out") or "{}").items())]
    if notes:
        out.append(Bullets(["not a tier of the run: " + n for n in notes]))
    return out


def fio_part(run, report_dir):
    points = sweep_points(run)
    drivers = [d for d in _docs(run, "fio_sweep") if (d.get("facts") or {}).get("role") == "driver"]
    out = [Heading(3, "fio sweep")]
    if not points and not drivers:
        return out + [Paragraph("No fio sweep ran in this run.")]
    for doc in sorted(drivers, key=lambda d: d.get("variant") or ""):
        facts = doc.get("facts") or {}
        tier = doc.get("variant")
        out.append(Paragraph([
            strong("Tier %s" % tier), " (", code(facts.get("tier_path")),
            ", %s, %s; driver %s; %s MiB per client, %s s per point; buffered %s QD%s, direct %s QD%s)" % (
                "shared" if facts.get("tier_shared") else "private to each host", facts.get("tier_fstype"),
                doc["host"], facts.get("size_mib"), facts.get("runtime_s"), facts.get("buffered_engine"),
                facts.get("buffered_iodepth"), facts.get("direct_engine"), facts.get("direct_iodepth"))]))
        notes = ["skipped %s: %s" % kv for kv in sorted((facts.get("skipped_workloads") or {}).items())]
        notes += ["host %s not used: %s" % kv for kv in sorted((facts.get("hosts_not_used") or {}).items())]
        notes += prefill_notes(facts)
        if doc["status"] != "ok":
            notes.append("%s: %s" % (doc["status"], doc.get("reason")))
        if notes:
            out.append(Bullets(notes))
        tier_points = points.get(tier, {})
        if tier_points and report_dir:
            names = _plots(tier, tier_points, report_dir)
            if names:
                out.append(Figures([Image(name, name) for name in names]))
        rows = []
        for w in _workloads({w for w, _ in tier_points}):
            # at one client the aggregate is that client's one fio process: the value the checks per client judge
            # (MB/s and IOPS per process); the aggregate p99 is the worst client's own, as they judge each client's
            bw, iops, p99 = (fio_lines(run, metric, w, scale) for metric, scale in (
                ("fio_bw_bytes", 1e-6), ("fio_iops", 1.0), ("fio_clat_p99_us", 1e-3)))
            for c in sorted(c for ww, c in tier_points if ww == w):
                m = tier_points[(w, c)]
                rows.append([w, c, fmt(m.get("fio_bw_bytes", 0) / 1e6, thresholds=bw if c == 1 else ()),
                             fmt(m.get("fio_iops"), thresholds=iops if c == 1 else ()),
                             fmt(m.get("fio_clat_mean_us", 0) / 1000.0), fmt(m.get("fio_clat_p50_us", 0) / 1000.0),
                             fmt(m.get("fio_clat_p99_us", 0) / 1000.0, thresholds=p99)])
        if rows:
            out.append(Table(["workload", "clients", "MB/s", "IOPS", "mean ms", "p50 ms", "p99 ms"], rows))
        out += fio_endurance_part(run, doc)
    return out


def prefill_notes(facts):
    """The untimed prefill (facts.prefill: one fio invocation before the first point of each client count that used
    files for the first time): what each host wrote in full before any timed window, at fio's own write rate, so a
    reader sees that the reads and overwrites met written files, and what writing them cost."""
    notes = []
    for p in facts.get("prefill") or []:
        parts = []
        for host, h in sorted((p.get("hosts") or {}).items()):
            planned = fmt(h["size_bytes"] / 2**20)
            if "io_bytes" not in h:  # fio timed out or printed no JSON: the failure is in the probe's reason
                parts.append("%s: %s MiB planned, no result" % (host, planned))
                continue
            secs = h.get("runtime_ms", 0) / 1000.0
            parts.append("%s: %s of %s MiB in %s s%s%s" % (
                host, fmt(h["io_bytes"] / 2**20), planned, fmt(secs),
                " (%s MB/s)" % fmt(h["io_bytes"] / secs / 1e6) if secs > 0 else "",
                ", fio error %d" % h["error"] if h.get("error") else ""))
        notes.append("prefill before the points at %d clients (untimed; %s s with fio's start): %s" % (
            p["clients"], fmt(p["duration_s"]), "; ".join(parts)))
    return notes


def fio_endurance_part(run, doc):
    """The driver's endurance runs on its tier: per workload, client count and run, MB/s against the sweep's, IOPS,
    p99 and p99.9 latency."""
    facts = (doc.get("facts") or {}).get("endurance")
    if not facts:
        return []
    recs = [r for r in run.records("fio_sweep") if r["host"] == doc["host"] and r["variant"] == doc.get("variant")]
    sweep = {(r["labels"]["workload"], int(r["labels"]["clients"])): r["value"] for r in recs
             if r["metric"] == "fio_bw_bytes" and r["labels"].get("scope") == "aggregate"}
    runs = {}
    for r in recs:
        if r["metric"].startswith("fio_endurance_"):
            key = (r["labels"]["workload"], int(r["labels"]["clients"]), int(r["labels"]["window"]))
            runs.setdefault(key, {"start_s": r["labels"].get("start_s")})[r["metric"]] = r["value"]
    rows = []
    for (workload, clients, window), m in sorted(runs.items()):
        base = sweep.get((workload, clients))
        bw = m.get("fio_endurance_bw_bytes")
        rows.append([workload, clients, window, fmt(m["start_s"]), fmt(bw / 1e6) if bw is not None else "–",
                     fmt(base / 1e6) if base else "–", "%+.1f%%" % (100.0 * (bw - base) / base) if base and bw
                     is not None else "–", fmt(m.get("fio_endurance_iops")),
                     fmt(m.get("fio_endurance_clat_p99_us", 0) / 1000.0),
                     fmt(m.get("fio_endurance_clat_p99_9_us", 0) / 1000.0)])
    head = Paragraph("Endurance: %s, %d runs of %s s each at every client count, against the sweep's point of the "
                     "same workload and client count." % (", ".join(facts["workloads"]), facts["windows"],
                                                         facts["window_s"]))
    return [head, Table(["workload", "clients", "run", "from s", "MB/s", "sweep MB/s", "change", "IOPS", "p99 ms",
                         "p99.9 ms"], rows)]


def checkpoint_part(run):
    """torch.save per host, and DCP per world: each host's ranks together (scope node) and the world across the
    nodes (scope aggregate, on the host of rank 0). DCP's rows per rank (one per GPU) are in the checks and the hosts'
    pages, not here: a fleet would have thousands."""
    rows = []
    values = {}
    judged = lines_of(run)
    for r in run.records("checkpoint"):
        labels = r["labels"]
        dcp = labels.get("method") == "dcp"
        if dcp and labels.get("scope") == "rank" and "nodes" in labels:
            continue  # a row per GPU (artifacts before worlds had one DCP rank per host, and no nodes label)
        world = (labels.get("nodes") or 0, labels.get("ranks") or 0) if dcp else (0, 0)
        key = (r["host"], labels.get("tier") or "", labels.get("method") or "") + world + (labels.get("scope") or "",)
        values.setdefault(key, {}).setdefault(r["metric"], r["value"])
    for key in sorted(values):
        host, tier, method, nodes, ranks, scope = key
        got = values[key]
        size = got.get("ckpt_bytes")
        world = ", ".join(["%d node%s" % (nodes, "s" if nodes > 1 else "")] * bool(nodes)
                          + ["%d rank%s" % (ranks, "s" if ranks > 1 else "")] * bool(ranks)) or "–"
        rows.append([host, tier, method, world, scope,
                     fmt(size / 2**20) if size else None,
                     fmt(got.get("ckpt_save_gbps"),
                         thresholds=judged("checkpoint", "ckpt_save_gbps", method=method, scope=scope)),
                     fmt(got.get("ckpt_load_gbps"),
                         thresholds=judged("checkpoint", "ckpt_load_gbps", method=method, scope=scope))])
    out = [Heading(3, "Checkpoint save and load")]
    modes = sorted({"%s: %s" % ((d.get("facts") or {}).get("tier"), (d.get("facts") or {}).get("dcp_mode"))
                    for d in _docs(run, "checkpoint") if (d.get("facts") or {}).get("dcp_mode")})
    if modes:
        out.append(Paragraph("DCP mode per tier: " + "; ".join(modes)))
    if rows:
        out.append(Table(["host", "tier", "method", "world", "scope", "MiB", "save GB/s (fsync incl.)", "load GB/s"],
                         rows))
    return out


def metadata_part(run):
    recs = run.records("metadata")
    rows = []
    judged = lines_of(run)
    for doc in sorted(_docs(run, "metadata"), key=lambda d: (d.get("variant") or "", d["host"])):
        mine = [r for r in recs if r["host"] == doc["host"] and r["variant"] == doc.get("variant")]
        for scope in ("aggregate", "host"):
            sel = {r["metric"]: r["value"] for r in mine if r["labels"].get("scope") == scope
                   and "kind" not in r["labels"]}
            if not sel:
                continue
            kinds = ", ".join("%s %d" % (r["labels"]["kind"], r["value"]) for r in mine
                              if r["labels"].get("scope") == scope and r["metric"] == "meta_anomalies"
                              and r["value"])
            rows.append([doc.get("variant"), doc["host"], scope, (doc.get("facts") or {}).get("ranks"),
                         fmt(sel.get("meta_create_per_s"),
                             thresholds=judged("metadata", "meta_create_per_s", scope=scope)),
                         fmt(sel.get("meta_stat_per_s")),
                         fmt(sel.get("meta_unlink_per_s")), sel.get("meta_mkdir_winners"),
                         int(sel.get("meta_anomalies_total", 0)), kinds or "none",
                         int(sel.get("meta_stale_after_unlink", 0))])
    out = [Heading(3, "Metadata")]
    if rows:
        out.append(Table(["tier", "host", "scope", "ranks", "creates/s", "stats/s", "unlinks/s", "mkdir winners",
                          "anomalies", "kinds", "stale"], rows))
    return out


def import_part(run):
    first_lines = lines(run, "import_time", "import_s", {"cache": "first"})  # warm imports: no check
    rows = []
    for doc in sorted(_docs(run, "import_time"), key=lambda d: d["host"]):
        recs = [r for r in run.records("import_time") if r["host"] == doc["host"] and r["metric"] == "import_s"]
        for tier in sorted({r["labels"].get("tier") for r in recs}):
            first = next((r["value"] for r in recs if r["labels"].get("tier") == tier
                          and r["labels"].get("cache") == "first"), None)
            warm = next((r["value"] for r in recs if r["labels"].get("tier") == tier
                         and r["labels"].get("cache") == "warm"), None)
            rows.append([doc["host"], tier, fmt(first, thresholds=first_lines), fmt(warm)])
    out = [Heading(3, "import torch")]
    measured = sorted({(d.get("facts") or {}).get("measured") for d in _docs(run, "import_time")} - {None})
    out += [Paragraph("Measured: %s" % m) for m in measured[:1]]
    if rows:
        out.append(Table(["host", "tier", "first import s", "warm import s"], rows))
    return out


def object_part(run):
    """Per host: large objects by single PUT and by multipart upload, small-object rates and GET latency, LIST and
    DELETE; then the endurance run window by window."""
    recs = run.records("object_store")
    rows = []
    put = {upload: lines(run, "object_store", "obj_put_gbps", {"upload": upload}) for upload in ("single", "multipart")}
    get_p99 = lines(run, "object_store", "obj_get_latency_ms", {"pct": "p99"})
    for host in sorted({r["host"] for r in recs}):
        def val(metric, host=host, **labels):
            # upload=None matches the results of artifacts from before multipart uploads (no upload label)
            return next((r["value"] for r in recs if r["host"] == host and r["metric"] == metric
                         and all(r["labels"].get(k) in ((v, None) if k == "upload" and v == "single" else (v,))
                                 for k, v in labels.items())), None)
        rows.append([host, fmt(val("obj_put_gbps", upload="single"), thresholds=put["single"]),
                     fmt(val("obj_put_gbps", upload="multipart"), thresholds=put["multipart"]),
                     fmt(val("obj_get_gbps", upload="single")), fmt(val("obj_put_per_s")),
                     fmt(val("obj_get_per_s")), fmt(val("obj_get_latency_ms", pct="p50")),
                     fmt(val("obj_get_latency_ms", pct="p90")),
                     fmt(val("obj_get_latency_ms", pct="p99"), thresholds=get_p99),
                     fmt(val("obj_get_ttfb_ms", pct="p99")), fmt(val("obj_list_per_s")), fmt(val("obj_delete_per_s"))])
    out = [Heading(3, "Object storage (S3)")]
    if rows:
        out.append(Table(["host", "PUT GB/s", "multipart PUT GB/s", "GET GB/s", "small PUT/s", "small GET/s",
                          "GET p50 ms", "GET p90 ms", "GET p99 ms", "TTFB p99 ms", "LIST objects/s", "DELETE/s"], rows))
        parts = sorted({json.dumps((d.get("facts") or {}).get("multipart")) for d in _docs(run, "object_store")
                        if (d.get("facts") or {}).get("multipart")})
        out += [Paragraph("Multipart uploads: %(parts)d parts of %(part_bytes)d bytes per object" % json.loads(m))
                for m in parts[:1]]
    else:
        reasons = sorted({d.get("reason") for d in _docs(run, "object_store") if d.get("reason")})
        out.append(Paragraph("Not measured: %s" % ("; ".join(reasons) if reasons else "the probe did not run")))
    out += endurance_part(recs)
    return out


def endurance_part(recs):
    """The object store's endurance run: per host and window, completed requests per second, GET time to first byte,
    failed and throttled requests."""
    rows = []
    for host, window in sorted({(r["host"], r["labels"]["window"]) for r in recs if "window" in r["labels"]}):
        mine = [r for r in recs if r["host"] == host and r["labels"].get("window") == window]

        def val(metric, pct=None, mine=mine):
            return next((r["value"] for r in mine if r["metric"] == metric
                         and (pct is None or r["labels"].get("pct") == pct)), None)
        start = next(r["labels"].get("start_s") for r in mine)
        rows.append([host, window, fmt(start), fmt(val("obj_endurance_ops_per_s")),
                     fmt(val("obj_endurance_ttfb_ms", "p50")), fmt(val("obj_endurance_ttfb_ms", "p99")),
                     fmt(val("obj_endurance_errors")), fmt(val("obj_endurance_throttled"))])
    if not rows:
        return []
    return [Heading(4, "Object storage endurance (mixed PUT, GET, LIST, DELETE)"),
            Table(["host", "window", "from s", "requests/s", "TTFB p50 ms", "TTFB p99 ms", "failed", "throttled"],
                  rows)]


def datagen_part(run):
    """Per tier: every host's write rate of the robotics dataset (MP4 segments and parquet shards, encoding
    included), then the aggregate of all hosts over the slowest one's time."""
    recs = run.records("datagen")
    rows = []
    per_host = lines(run, "datagen", "bytes_per_s", {"scope": "host"}, scale=1e-6)
    for doc in sorted(_docs(run, "datagen"), key=lambda d: (d.get("variant") or "", d["host"])):
        mine = {(r["labels"].get("scope"), r["metric"]): r["value"] for r in recs
                if r["host"] == doc["host"] and r["variant"] == doc.get("variant")}
        facts = doc.get("facts") or {}
        mb = lambda v, judged=(): fmt(v / 1e6, thresholds=judged) if v is not None else "–"  # noqa: E731
        if ("host", "bytes_per_s") in mine:
            rows.append([doc.get("variant"), doc["host"], facts.get("codec"), int(mine[("host", "files")]),
                         mb(mine[("host", "bytes")]),
                         mb(mine[("host", "bytes_per_s")], per_host),
                         fmt(mine[("host", "files_per_s")]), mb(mine.get(("host", "video_bytes_per_s"))),
                         mb(mine.get(("host", "parquet_bytes_per_s")))])
        if ("cluster", "aggregate_bytes_per_s") in mine:
            rows.append([doc.get("variant"), "all %s hosts" % facts.get("aggregate_hosts"), "", "", "",
                         mb(mine[("cluster", "aggregate_bytes_per_s")]),
                         fmt(mine[("cluster", "aggregate_files_per_s")]), "", ""])
    out = [Heading(3, "Datagen (MP4 video and parquet sensor data)")]
    if rows:
        sizes = sorted({"%s episodes of %s frames at %s and %s sensor rows" % (
            f.get("episodes"), f.get("frames"), f.get("resolution"), f.get("rows"))
            for f in ((d.get("facts") or {}) for d in _docs(run, "datagen")) if f.get("resolution")})
        out += [Paragraph("Every host at once, each into its own directory; files fsynced; per host: %s." %
                          "; ".join(sizes))] if sizes else []
        out.append(Table(["tier", "host", "codec", "files", "MB", "MB/s", "files/s", "video MB/s", "parquet MB/s"],
                         rows))
    return out


# (metric, operation) of io_tools_run shown per tier and where it ran, in this order
IO_COLUMNS = (("ior_bw_mib_s", "write", "IOR write MiB/s"), ("ior_bw_mib_s", "read", "IOR read MiB/s"),
              ("mdtest_ops_per_s", "file_creation", "mdtest creates/s"), ("mdtest_ops_per_s", "file_stat", "stats/s"),
              ("mdtest_ops_per_s", "file_removal", "removals/s"),
              ("elbencho_bw_mib_s", "write", "elbencho write MiB/s"),
              ("elbencho_bw_mib_s", "read", "elbencho read MiB/s"))


def io_tools_part(run):
    """IOR, mdtest and elbencho per tier: each node alone (scope=node), then the world across every node that the
    first host started on a shared tier (scope=cluster), and why a world did not start."""
    rows, why_not, records = [], [], {}
    judged = lines_of(run)
    for r in run.records("io_tools_run"):
        records.setdefault((r["host"], r["variant"]), []).append(r)
    for doc in sorted(_docs(run, "io_tools_run"), key=lambda d: (d.get("variant") or "", d["host"])):
        facts = doc.get("facts") or {}
        mine = records.get((doc["host"], doc.get("variant")), [])
        for scope in ("node", "cluster"):
            sel = [r for r in mine if r["labels"].get("scope") == scope]
            if not sel:
                continue
            value = {(r["metric"], r["labels"].get("operation")): r["value"] for r in sel}
            how = ([facts.get("launcher")] if any(not r["metric"].startswith("elbencho") for r in sel) else []) + \
                (["elbencho's services"] if any(r["metric"].startswith("elbencho") for r in sel) else [])
            where = doc["host"] if scope == "node" else "%d nodes (%s, from %s)" % (
                next(r["labels"]["nodes"] for r in sel), ", ".join(how), doc["host"])
            rows.append([doc.get("variant"), where, max(int(r["labels"].get("tasks") or 0) for r in sel)]
                        + [fmt(value.get((m, op)), thresholds=judged("io_tools_run", m, operation=op, scope=scope))
                           for m, op, _ in IO_COLUMNS])
        if str(facts.get("across_nodes", "")).startswith("not run") and "launcher" in facts:
            why_not.append("tier %s, across nodes: %s" % (doc.get("variant"), facts["across_nodes"]))
        if str(facts.get("elbencho_across_nodes", "")).startswith("not run") and "launcher" in facts:
            why_not.append("tier %s, elbencho across nodes: %s" % (doc.get("variant"), facts["elbencho_across_nodes"]))
    if not rows and not why_not:
        return []
    out = [Heading(3, "IOR, mdtest and elbencho")]
    if rows:
        out.append(Table(["tier", "where", "tasks"] + [title for _, _, title in IO_COLUMNS], rows))
    if why_not:
        out.append(Bullets(why_not))
    return out


def blocks(run, rows, report_dir):
    probes = ("storage_tiers", "fio_sweep", "checkpoint", "metadata", "import_time", "object_store", "datagen",
              "io_tools_run")
    docs = [d for d in run.artifacts if d["probe"] in probes]
    if not docs:
        return []
    out = [Heading(2, "Storage")] + tiers_part(run) + fio_part(run, report_dir) + checkpoint_part(run)
    out += metadata_part(run) + import_part(run) + object_part(run) + datagen_part(run) + io_tools_part(run)
    skipped = [r for r in _not_ok(docs) if r[1] != "object_store"]
    if skipped:
        out += [Heading(3, "Storage probes that did not run fully"),
                Table(["host", "probe", "tier", "status", "reason"], skipped)]
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
