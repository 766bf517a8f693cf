"""Report section of the reliability phase: reboot timings per node, what the provider's health checks did about an
injected fault and how fast, and the detect / drain / return timeline of every node.

What happened to each node is computed from the raw observations in timeline.py (the same records grade.py judges).
A plot (PNG, matplotlib Agg) beside report.md shows every node's stages on one time axis per node (seconds from
the first event of that node). When nothing destructive was allowed the section says why in one line.
"""

import statistics

from reports.grading.rubric import graded_checks
from reports.phases.reliability import grade, timeline
from reports.render import markdown, plots
from reports.render.blocks import Bullets, Heading, Paragraph, Table, figure, strong
from reports.shown import shown

ORDER = 70
PLOT = "reliability_timeline.png"
REBOOT_COLUMNS = (("drain_s", "drain"), ("reboot_s", "reboot"), ("seen_down_s", "seen down"),
                  ("registered_s", "scheduler sees it back"), ("resume_s", "resume -> available"),
                  ("job_s", "fresh job"), ("return_to_service_s", "reboot -> fresh job"), ("total_s", "total"),
                  ("node_return_s", "node's own return"))
REBOOT_EVENTS = (("drain_issued", "drain issued"), ("drained", "drained"), ("reboot_started", "reboot issued"),
                 ("seen_down", "scheduler sees it down"), ("registered", "scheduler sees it back"),
                 ("reboot_returned", "up with a new boot id"),
                 ("resume_issued", "resumed"), ("available", "available"), ("job_ok", "fresh job ran"))


def _s(value, limits=()):
    """Seconds with one decimal, or more where one would show a time judged against `limits` on the other side of
    one, or on it, as the check's row shows it (grade._s)."""
    return None if value is None else shown(value, limits)


def limits(run):
    """{"detect": (pass_s, fail_s) of every reliability_detect check, "return": within_s of every reliability_return
    check}: the limits the run's rows judged the times the fault part shows against (reports.render.markdown
    graded_checks: as graded, else as shipped)."""
    detect = graded_checks(run, lambda c: c.get("kind") == "reliability_detect")
    back = graded_checks(run, lambda c: c.get("kind") == "reliability_return")
    return {"detect": sum((grade.detect_limits(c) for c in detect), ()),
            "return": tuple(grade.return_limit(c) for c in back)}


def peer_lines(run, done):
    """{(metric, host): lines} of the reboot times a reliability_peers check judged against the other rebooted nodes'
    median (grade.peer_limits), as the run was graded: the reboot table shows each on its side of them."""
    out = {}
    for check in graded_checks(run, lambda c: c.get("kind") == "reliability_peers" and c.get("probe") == "reboot"):
        values = {d["host"]: d["metrics"][check["metric"]] for d in done
                  if d["metrics"].get(check["metric"]) is not None}
        for host in values:
            others = [v for h, v in values.items() if h != host]
            if len(others) >= int(check.get("min_peers", 1)):
                out[(check["metric"], host)] = out.get((check["metric"], host), ()) + grade.peer_limits(
                    check, statistics.median(others))
    return out


def reboot_stages(done):
    """[(t seconds from the first event, label)] of one node's reboot, in time order."""
    events = done["events"]
    if not events:
        return []
    t0 = min(events.values())
    return sorted((events[k] - t0, label) for k, label in REBOOT_EVENTS if k in events)


def fault_stages(done):
    """[(t seconds from the injection, label)] of one node's fault injection, in time order, and whether the node
    was still out of service when the watch ended."""
    m, facts = done["metrics"], done["facts"]
    stages = [(0.0, "injected (%s)" % facts.get("method"))]
    if m.get("detected"):
        stages.append((m["detect_s"], "taken out of service: %s (%s)" % (
            facts.get("detect_phase"), facts.get("detect_reason") or "no reason given")))
    if m.get("drain_s") is not None and m.get("drain_s") != m.get("detect_s"):
        stages.append((m["drain_s"], "drained"))
    if m.get("rebooted"):
        stages.append((m.get("watched_s", 0.0), "rebooted (new boot id by the end of the watch)"))
    if m.get("returned"):
        stages.append((m["return_s"], "back in service"))
        if m.get("job_ok_at") is not None:
            stages.append((m["job_ok_at"] - m["injected_at"], "fresh job ran (%.1f s)" % m.get("job_s", 0.0)))
    else:
        where = "still out of service" if m.get("detected") else "still in service, nothing detected"
        stages.append((m.get("watched_s", 0.0), "end of watch: %s" % where))
    if m.get("resumed_by_assessment"):
        stages.append((m.get("watched_s", 0.0), "put back by the assessment"))
    return sorted(stages, key=lambda x: x[0])


# the stages of fault_stages whose time a check judges: the limits (of limits()) it is shown against
JUDGED_STAGES = (("taken out of service", "detect"), ("back in service", "return"))


def _line(host, title, stages, lines=None):
    """One node's timeline; a stage a check judges (JUDGED_STAGES) is timed against that check's lines (limits())."""
    def at(t, label):
        judged = [(lines or {}).get(key, ()) for prefix, key in JUDGED_STAGES if label.startswith(prefix)]
        return "t+%s s %s" % (_s(t, judged[0] if judged else ()), label)
    return [strong(host), " (%s): %s" % (title, " -> ".join(at(t, label) for t, label in stages))]


# The state a node is in after each stage, and its colour in the plot.
STATE_AFTER = {"drain issued": "draining", "drained": "out of service", "reboot issued": "rebooting",
               "scheduler sees it down": "rebooting",
               "scheduler sees it back": "returning", "up with a new boot id": "returning", "resumed": "returning",
               "available": "in service", "fresh job ran": "in service", "back in service": "in service",
               "taken out of service": "out of service", "injected": "faulted, not yet detected"}
STATE_COLORS = {"faulted, not yet detected": "#9467bd", "draining": "#ffbb78", "out of service": "#ff7f0e",
                "rebooting": "#d62728", "returning": "#bcbd22", "in service": "#2ca02c"}


def _state_after(label, current):
    for prefix, state in STATE_AFTER.items():
        if label.startswith(prefix):
            return state
    return current


def fault_name(done):
    """XID <n>, or on an AMD node the amdgpu RAS error injected (timeline.amd_fault), which has no XID."""
    return done["facts"].get("fault") or "XID %s" % done["facts"].get("xid")


def _plot(reboots, faults, report_dir):
    rows = [("%s reboot" % d["host"], reboot_stages(d)) for d in reboots]
    rows += [("%s %s" % (d["host"], fault_name(d)), fault_stages(d)) for d in faults]
    rows = [(name, st) for name, st in rows if st]
    made = plots.figure(9, 1.2 + 0.45 * len(rows)) if rows else None
    if made is None:
        return None
    from matplotlib.patches import Patch  # noqa: PLC0415 - matplotlib is there: figure() drew

    fig, ax = made
    used = []
    for y, (_name, stages) in enumerate(rows):
        state = None
        for i, (t, label) in enumerate(stages):
            state = _state_after(label, state)
            end = stages[i + 1][0] if i + 1 < len(stages) else t
            if end > t and state:
                ax.barh(y, end - t, left=t, height=0.6, color=STATE_COLORS[state], edgecolor="black", linewidth=0.3)
                used.append(state)
            ax.plot([t, t], [y - 0.35, y + 0.35], color="black", linewidth=0.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([name for name, _ in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds from the node's first event (drain issued, or fault injected); ticks mark each stage")
    ax.set_title("Reliability: detect, drain and return per node")
    ax.legend(handles=[Patch(color=STATE_COLORS[s], label=s) for s in STATE_COLORS if s in used],
              fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1)
    return plots.save(fig, report_dir, PLOT, layout="bbox")


def _skipped(what, docs):
    """'Not rebooted: n3 (why); ...' for the nodes where the probe did not run, or []."""
    skipped = [d for d in docs if d["status"] != "ok"]
    if not skipped:
        return []
    return [Paragraph(what + ": " + "; ".join("%s (%s)" % (d["host"], d.get("reason")) for d in skipped))]


def reboot_part(done, reboots, lines=None):
    table = []
    for d in done:
        m, facts = d["metrics"], d["facts"]
        table.append([d["host"], facts.get("scheduler"), facts.get("batch")]
                     + [_s(m.get(k), (lines or {}).get((k, d["host"]), ())) for k, _ in REBOOT_COLUMNS]
                     + ["yes" if m.get("boot_id_changed") else strong("no"),
                        "yes" if m.get("returned") else [strong("no"), ": %s" % facts.get("reboot_error", "")]])
    return [Heading(3, "Reboot timings (seconds)"),
            Table(["host", "scheduler", "batch"] + [t for _, t in REBOOT_COLUMNS] + ["new boot id", "back"], table)
            ] + _skipped("Not rebooted", reboots)


def detect_cell(m, lines=None):
    """The detection time as judged, with what bounds it: the part of it before the fault was in (the injection
    probe's own lag, counted in: the time is from the clock read before the injection task) and the watcher's
    interval (a change is seen within it). A lag longer than the time it is part of (the node's clock and the
    observer's far apart) bounds nothing and is left out."""
    if not m.get("detected"):
        return strong("never")
    lag = m.get("inject_lag_s")
    bounds = (["%s s of it before the fault was in" % _s(lag)] if lag is not None and lag <= m["detect_s"] else []) \
        + (["seen within %s s" % _s(m["watch_interval_s"])] if m.get("watch_interval_s") is not None else [])
    text = _s(m.get("detect_s"), (lines or {}).get("detect", ()))
    return "%s (%s)" % (text, "; ".join(bounds)) if bounds else text


def fault_part(done, faults, rows, lines=None):
    by_check = {(r["check_id"], r["host"]): r for r in rows}
    table = []
    for d in done:
        m, facts = d["metrics"], d["facts"]
        drained = _s(m.get("time_drained_s"))
        if drained is not None and m.get("drain_open"):
            drained = ">= %s (still drained)" % drained
        action_row = by_check.get(("reliability.remediation", d["host"])) or {}
        table.append([d["host"], fault_name(d), facts.get("method"), detect_cell(m, lines), drained,
                      facts.get("observed_action"), action_row.get("expected"),
                      _s(m.get("return_s"), (lines or {}).get("return", ())) if m.get("returned") else "not back",
                      _s(m.get("job_s")), int(m.get("flaps", 0)), _s(m.get("watched_s"))])
    return [Heading(3, "Fault injection: detection and remediation (seconds from the fault)"),
            Table(["host", "fault", "method", "detect", "time drained", "action observed", "recommended",
                   "back in service", "fresh job", "flaps", "watched"], table)] + _skipped("Not injected", faults)


def blocks(run, rows, report_dir):
    reboots = timeline.outcomes(run, "reboot")
    faults = timeline.outcomes(run, "fault_injection")
    if not reboots and not faults:
        return []
    done_r = [d for d in reboots if d["status"] == "ok"]
    done_f = [d for d in faults if d["status"] == "ok"]
    out = [Heading(2, "Reliability (destructive)")]
    if not done_r and not done_f:
        reasons = sorted({d.get("reason") or "" for d in reboots + faults})
        return out + [Paragraph("Not run: %s." % "; ".join(r for r in reasons if r))]
    if done_r:
        out += reboot_part(done_r, reboots, peer_lines(run, done_r))
    lines = limits(run) if done_f else None
    if done_f:
        out += fault_part(done_f, faults, rows, lines)
    steps = [_line(d["host"], "reboot, batch %s" % d["facts"].get("batch"), reboot_stages(d))
             for d in done_r if reboot_stages(d)]
    steps += [_line(d["host"], fault_name(d), fault_stages(d), lines) for d in done_f]
    out.append(Heading(3, "Timeline per node"))
    if steps:
        out.append(Bullets(steps))
    return out + figure(_plot(done_r, done_f, report_dir) if report_dir else None,
                        "detect, drain and return per node")


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
