"""Report section of the burn-in phase: burn-in (GEMM + all-to-all + monitor), fabric soak, storage soak.

Tables per host (state, FLOP/s and their degradation, bandwidth min/avg/max, kernel-log events with their time),
and three plots from the timelines the nodes wrote (raw .jsonl files beside the artifacts):

* burnin_timeline.png: per GPU (per GEMM worker and CPU on CPU nodes) temperature, power, SM clock and TFLOP/s
  over time, every XID / SXID / AER marked with a red line at its time;
* burnin_collectives.png: collective bus bandwidth over time (burn-in all-to-all and the fabric soak);
* burnin_storage.png: storage bandwidth over time per phase and client count.

An interrupted run shows its partial timeline (up to the last poll) and says so.
"""


from probes.common.kernel_log import merge_events
from reports.grading.rubric import graded_checks
from reports.phases.burnin.grade import degradation_lines, kmsg_partial, read_stream, worker_exits_text
from reports.render import markdown, plots
from reports.render.blocks import Heading, Paragraph, Table, figure, strong
from reports.shown import shown

ORDER = 60
PLOTS = {"timeline": "burnin_timeline.png", "coll": "burnin_collectives.png", "storage": "burnin_storage.png"}


def _docs(run, probe):
    return sorted((d for d in run.artifacts if d["probe"] == probe and d.get("variant") is None),
                  key=lambda d: d["host"])


def _plain(doc):
    return {r["metric"]: r["value"] for r in doc.get("results") or [] if not r.get("labels")}


def _labelled(doc, metric):
    return [(r["labels"], r["value"]) for r in doc.get("results") or [] if r["metric"] == metric]


def _t0(doc):
    try:
        return float((doc.get("facts") or {}).get("t_start"))
    except (TypeError, ValueError):
        return None


def _state(doc):
    facts = doc.get("facts") or {}
    m = _plain(doc)
    if doc["status"] != "ok":
        return "%s: %s" % (doc["status"], doc.get("reason"))
    if facts.get("state") != "done":
        return [strong("interrupted"), " at %.0f s of %.0f s (partial timeline)" % (m.get("elapsed_s", 0),
                                                                                  m.get("planned_s", 0))]
    exits = worker_exits_text(facts)
    if m.get("completed") != 1:
        return "ended after %.0f s: %s%s" % (m.get("elapsed_s", 0), facts.get("ended_by"),
                                             "; %s" % exits if exits else "")
    if exits:  # the run went on to its deadline without them
        return [strong("workers exited early"), " (%s); done, %.0f s" % (exits, m.get("elapsed_s", 0))]
    return "done, %.0f s" % m.get("elapsed_s", 0)


def _f(value, fmt="%.3f"):
    return None if value is None else fmt % value


def _events(run, docs):
    out = []
    for d in docs:
        t0 = _t0(d)
        for e in merge_events(read_stream(run, d, "kernel")):
            out.append((d["host"], d["probe"], e["t"] - t0 if t0 else None, e))
    return out


def _event_code(e):
    """An event's code column: the XID or SXID code (with an SXID's fatal flag) or the AER severity."""
    code = e.get("code") or e.get("severity")
    if e.get("kind") == "sxid" and e.get("fatal") is not None:
        return "%s %s" % (code, "fatal" if e["fatal"] else "non-fatal")
    return code


def _kmsg_not_read(docs):
    """[(read nothing, in words)] of each run whose kernel log was not read to the end: not at all (/dev/kmsg could
    not be opened: facts.kmsg), or only up to a read that failed mid-run (facts.kmsg_error)."""
    out = []
    for d in docs:
        facts = d.get("facts") or {}
        partial = kmsg_partial(facts)
        if (facts.get("kmsg") or "").startswith("cannot"):
            out.append((True, "%s (%s) not read: %s" % (d["host"], d["probe"], facts["kmsg"])))
        elif partial:
            out.append((False, "%s (%s) read only up to t+%.0f s: %s (at t+%.0f s)" % (
                d["host"], d["probe"], partial[0], partial[1], partial[2])))
    return out


def _mark_events(ax, events, host=None):
    for h, _probe, t, e in events:
        if t is None or (host is not None and h != host):
            continue
        ax.axvline(t, color="red", linewidth=1.0, alpha=0.8)
        ax.annotate("%s %s %s" % (h, e["kind"].upper(), e.get("code", "")), (t, 1.0),
                    xycoords=("data", "axes fraction"), fontsize=6, color="red", rotation=90, va="top", ha="right")


def plot_timeline(run, docs, events, report_dir):
    panels = [("temp_c", "temperature (C)"), ("power_w", "power (W)"), ("sm_mhz", "SM clock (MHz)"),
              ("tflops", "GEMM TFLOP/s")]
    series = {k: [] for k, _ in panels}
    cpu = {"cpu_util_pct": [], "cpu_temp_c": [], "cpu_mhz": []}
    for d in docs:
        t0 = _t0(d)
        if t0 is None:
            continue
        for s in read_stream(run, d, "monitor"):
            for g in s.get("gpus") or []:
                for key in ("temp_c", "power_w", "sm_mhz"):
                    if g.get(key) is not None:
                        series[key].append(("%s gpu%s" % (d["host"], g["gpu"]), s["t"] - t0, g[key]))
            for key in cpu:
                if s.get(key) is not None:
                    cpu[key].append((d["host"], s["t"] - t0, s[key]))
        for s in read_stream(run, d, "gemm"):
            if s.get("type") == "gemm":
                who = "gpu%s" % s["gpu"] if s.get("gpu") is not None else "worker %s (cpu)" % s["worker"]
                series["tflops"].append(("%s %s" % (d["host"], who), s["t"] - t0, s["tflops"]))
    if not any(series["temp_c"] + series["power_w"] + series["sm_mhz"]):
        # CPU nodes: CPU utilisation, temperature and clock (where readable) stand in for the GPU telemetry.
        panels = [(k, title) for k, title in (("cpu_util_pct", "CPU utilisation (%)"), ("cpu_temp_c", "CPU temp (C)"),
                                              ("cpu_mhz", "CPU clock (MHz)")) if cpu[k]] + [("tflops", "GEMM TFLOP/s")]
        series.update(cpu)
    made = plots.figure(10, 2.2 * len(panels), len(panels), 1, sharex=True, squeeze=False)
    if made is None:
        return None
    fig, axes = made
    for ax, (key, title) in zip(axes[:, 0], panels):
        names = sorted({n for n, _, _ in series[key]})
        for name in names:
            pts = sorted((t, v) for n, t, v in series[key] if n == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", linewidth=1, label=name)
        ax.set_ylabel(title, fontsize=8)
        ax.grid(alpha=0.3)
        _mark_events(ax, events)
        if names and len(names) <= 16:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[-1, 0].set_xlabel("seconds from the start of the burn-in; red lines: XID / SXID / AER in the kernel log")
    axes[0, 0].set_title("Burn-in timeline")
    return plots.save(fig, report_dir, PLOTS["timeline"], layout="bbox")


def _series(run, docs, stream, kind, key, value):
    """{line label: [(seconds from the run's start, value)]} of one timeline stream of every artifact."""
    lines = {}
    for d in docs:
        t0 = _t0(d)
        if t0 is None:
            continue
        for s in read_stream(run, d, stream):
            if s.get("type") == kind and value(s) is not None:  # a 1-rank world's samples have no busbw
                lines.setdefault(key(d, s), []).append((s["t"] - t0, value(s)))
    return lines


def plot_collectives(run, docs, events, report_dir):
    lines = _series(run, docs, "coll", "coll", lambda d, s: "%s %s %s r%s" % (d["probe"], s["collective"], d["host"],
                                                                            s["rank"]), lambda s: s.get("busbw_gbps"))
    return _line_plot(lines, events, "seconds from the start of each run", "bus bandwidth (GB/s)",
                      "Collectives under load: bus bandwidth over time", report_dir, PLOTS["coll"])


def plot_storage(run, docs, report_dir):
    lines = _series(run, docs, "fio", "fio", lambda d, s: "%s %s c%s" % (d["host"], s["phase"], s["clients"]),
                    lambda s: s["read_mibps"] + s["write_mibps"])
    return _line_plot(lines, [], "seconds from the start of the storage soak", "read + write bandwidth (MiB/s)",
                      "Storage soak: bandwidth over time", report_dir, PLOTS["storage"])


def _line_plot(lines, events, xlabel, ylabel, title, report_dir, name):
    """One line per key of lines ({label: [(t, value)]}), kernel events marked; the PNG's file name, or None."""
    made = plots.figure(10, 3.5) if lines else None
    if made is None:
        return None
    fig, ax = made
    for key in sorted(lines):
        pts = sorted(lines[key])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=".", linewidth=1, label=key)
    _mark_events(ax, events)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if len(lines) <= 24:
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return plots.save(fig, report_dir, name, layout="bbox")


def _graded_degradation_lines(run, check_id, warn_pct, fail_pct):
    """(warn, fail) percent of a degradation check as the run was graded (the grader's defaults without one): a
    table's degradation column shows its number on the side of them that the check's row did (reports/shown.py)."""
    checks = graded_checks(run, lambda c: c.get("id") == check_id) if run is not None else []
    return degradation_lines(checks[0] if checks else {}, warn_pct, fail_pct)


def _pct(value, lines):
    return None if value is None else "%s%%" % shown(value, lines)


def _burnin_table(docs, run=None):
    lines = _graded_degradation_lines(run, "burnin.gemm_degradation", 5, 10)
    rows = []
    for d in docs:
        m = _plain(d)
        tf = {(lab.get("worker"), lab.get("gpu")): v for lab, v in _labelled(d, "gemm_tflops_mean")}
        deg = {(lab.get("worker"), lab.get("gpu")): v for lab, v in _labelled(d, "gemm_degradation_pct")}
        a2a = [_f(dict((lab.get("collective"), v) for lab, v in _labelled(d, m2)).get("alltoall"))
               for m2 in ("coll_busbw_min_gbps", "coll_busbw_avg_gbps", "coll_busbw_max_gbps")]
        rows.append([d["host"], d.get("device", {}).get("backend"), _state(d),
                     ", ".join("%.3f" % v for _, v in sorted(tf.items(), key=str)) or None,
                     ", ".join(_pct(v, lines) for _, v in sorted(deg.items(), key=str)) or None,
                     a2a[0], a2a[1], a2a[2],
                     int(m.get("coll_errors", 0) + m.get("coll_hangs", 0)),
                     int(m.get("kernel_xid_count", 0)), int(m.get("kernel_sxid_count", 0)),
                     int(m.get("kernel_aer_count", 0))])
    return Table(["host", "backend", "state", "GEMM TFLOP/s (mean per worker)", "FLOP/s degradation",
                   "all-to-all busbw min", "avg", "max (GB/s)", "failed collectives (errors+hangs)", "XID", "SXID",
                   "AER"], rows)


def _gpu_table(docs):
    rows = []
    for d in docs:
        per = {}
        for metric in ("gpu_temp_max_c", "gpu_power_max_w", "gpu_power_limit_w", "gpu_sm_clock_first_mhz",
                       "gpu_sm_clock_last_mhz", "gpu_throttle_episodes", "gpu_ecc_uncorrected_new"):
            for lab, v in _labelled(d, metric):
                per.setdefault(lab.get("gpu"), {})[metric] = v
        for gpu, m in sorted(per.items(), key=lambda kv: kv[0]):
            rows.append([d["host"], gpu, _f(m.get("gpu_temp_max_c"), "%.0f"), _f(m.get("gpu_power_max_w"), "%.0f"),
                         _f(m.get("gpu_power_limit_w"), "%.0f"), _f(m.get("gpu_sm_clock_first_mhz"), "%.0f"),
                         _f(m.get("gpu_sm_clock_last_mhz"), "%.0f"), m.get("gpu_throttle_episodes"),
                         m.get("gpu_ecc_uncorrected_new")])
    if not rows:
        return None
    return Table(["host", "gpu", "max temp (C)", "max power (W)", "power limit (W)", "SM clock first (MHz)",
                   "SM clock last (MHz)", "throttle episodes", "new uncorrected ECC"], rows)


def _fabric_table(docs):
    rows = []
    for d in docs:
        per = {}
        for metric in ("coll_busbw_min_gbps", "coll_busbw_avg_gbps", "coll_busbw_max_gbps", "coll_lat_us_avg",
                       "coll_wrong", "coll_samples"):
            for lab, v in _labelled(d, metric):
                per.setdefault(lab.get("collective"), {})[metric] = v
        m = _plain(d)
        for coll, c in sorted(per.items()):
            rows.append([d["host"], coll, _f(c.get("coll_busbw_min_gbps")), _f(c.get("coll_busbw_avg_gbps")),
                         _f(c.get("coll_busbw_max_gbps")), _f(c.get("coll_lat_us_avg"), "%.0f"),
                         int(c.get("coll_wrong", 0)), int(m.get("coll_errors", 0)), int(m.get("coll_hangs", 0)),
                         int(c.get("coll_samples", 0))])
        if not per:
            rows.append([d["host"], None, None, None, None, None, None, None, None, _state(d)])
    return Table(["host", "collective", "busbw min", "avg", "max (GB/s)", "latency (us)", "wrong", "errors", "hangs",
                   "samples"], rows)


def _storage_table(docs, run=None):
    lines = _graded_degradation_lines(run, "burnin.storage_degradation", 10, 25)
    rows = []
    for d in docs:
        per = {}
        for r in d.get("results") or []:
            if r["metric"].startswith("fio_") and r.get("labels"):
                per.setdefault((r["labels"].get("phase"), r["labels"].get("clients")), {})[r["metric"]] = r["value"]
        for (phase, clients), m in sorted(per.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
            rows.append([d["host"], phase, clients, _f(m.get("fio_bw_first_mibps"), "%.0f"),
                         _f(m.get("fio_bw_last_mibps"), "%.0f"), _f(m.get("fio_bw_min_mibps"), "%.0f"),
                         _f(m.get("fio_bw_avg_mibps"), "%.0f"), _f(m.get("fio_bw_max_mibps"), "%.0f"),
                         _pct(m.get("fio_bw_degradation_pct"), lines), _f(m.get("fio_read_clat_p99_us"), "%.0f"),
                         _f(m.get("fio_write_clat_p99_us"), "%.0f")])
        if not per:
            rows.append([d["host"], _state(d)] + [None] * 9)
    return Table(["host", "phase", "clients", "first tenth", "last tenth", "min", "avg", "max (MiB/s)",
                   "degradation", "read p99 (us)", "write p99 (us)"], rows)


def blocks(run, rows, report_dir):
    burn, fabric, storage = _docs(run, "burnin"), _docs(run, "fabric_soak"), _docs(run, "storage_soak")
    if not (burn or fabric or storage):
        return []
    out = [Heading(2, "Burn-in and soak")]
    ran_burn = [d for d in burn if d["status"] == "ok"]
    ran_fabric = [d for d in fabric if d["status"] == "ok"]
    ran_storage = [d for d in storage if d["status"] == "ok"]
    interrupted = [d for d in ran_burn + ran_fabric + ran_storage if (d.get("facts") or {}).get("state") != "done"]
    if interrupted:
        out.append(Paragraph([strong("Partial timeline"), ": interrupted before the end on %s; what was measured up "
                              "to the last poll is shown and graded." % ", ".join(
                                  sorted("%s (%s)" % (d["host"], d["probe"]) for d in interrupted))]))
    events = _events(run, ran_burn + ran_fabric + ran_storage)
    if burn:
        out += [Heading(3, "Burn-in: GEMMs and all-to-all at the same time"), _burnin_table(burn, run)]
        gpu = _gpu_table(ran_burn)
        if gpu:
            out.append(gpu)
    if events:
        out += [Heading(3, "Kernel log during the runs (XID, SXID, GPU init and off-the-bus, AER)"),
                Table(["host", "run", "t+ (s)", "kind", "code", "line"],
                      [[h, p, _f(t, "%.1f"), e["kind"].upper(), _event_code(e), e.get("line")]
                       for h, p, t, e in sorted(events, key=lambda x: (x[3]["t"], x[0]))])]
    ran = ran_burn + ran_fabric + ran_storage
    not_read = _kmsg_not_read(ran)
    if not events and ran_burn:
        if not not_read:
            out.append(Paragraph("No XID, SXID or AER line in the kernel log during the runs."))
        elif sum(1 for nothing, _ in not_read if nothing) < len(ran):  # some of it was read
            out.append(Paragraph("No XID, SXID or AER line in the part of the kernel log that was read."))
    if not_read:
        out.append(Paragraph([strong("Not all of the kernel log was read"), ": %s. A fault in what was not read shows "
                              "neither here nor in burnin.kernel_errors." % "; ".join(text for _, text in not_read)]))
    if report_dir and ran_burn:
        out += figure(plot_timeline(run, ran_burn, [e for e in events if e[1] == "burnin"], report_dir),
                        "burn-in timeline: temperature, power, clocks, TFLOP/s per GPU or worker")
    if fabric:
        out += [Heading(3, "Fabric soak: collectives of large messages in a loop"), _fabric_table(fabric)]
    if report_dir and (ran_burn or ran_fabric):
        out += figure(plot_collectives(run, ran_burn + ran_fabric, [], report_dir),
                        "collective bus bandwidth over time")
    if storage:
        out += [Heading(3, "Storage soak: sequential then random mixed I/O"), _storage_table(storage, run)]
        if report_dir and ran_storage:
            out += figure(plot_storage(run, ran_storage, report_dir), "storage bandwidth over time")
    skipped = [d for d in burn + fabric + storage if d["status"] != "ok"]
    if skipped:
        out.append(Paragraph("Not run: " + "; ".join("%s %s (%s)" % (d["host"], d["probe"], d.get("reason"))
                                                     for d in skipped)))
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
