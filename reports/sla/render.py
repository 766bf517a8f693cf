"""The review's tables, as CSV rows, Markdown and a self-contained HTML page (no template engine, no scripts)."""

from __future__ import annotations

import html
import json

from reports.sla.availability import pct_text, window_text
from reports.sla.timeutil import US, duration_text, iso_local, iso_utc


def _pct(value) -> str:
    """An availability (a fraction of 1, exact) as a percentage cut at 4 decimals: never rounded across a target."""
    return "n/a" if value is None else pct_text(value)


def _frac_pct(value) -> str:
    return ("%f" % float(value)).rstrip("0").rstrip(".")


def _range(counted, worst, uncertain: bool) -> str:
    """An availability that time no source observed leaves open (availability.py, rule 8): the range from the worst
    case to the counted value, never the counted value alone; otherwise the counted value."""
    return ("%s to %s" % (_pct(worst), _pct(counted)) if uncertain and worst is not None and worst != counted
            else _pct(counted))


def _credit_range(counted, worst, partial: bool = False) -> str:
    """The credit owed; in a month not over (availability.py, rule 9) the best case's, owed at least."""
    if partial:
        return "at least %s" % _frac_pct(counted)
    return _frac_pct(counted) if worst is None or worst == counted else "%s to %s" % (_frac_pct(counted),
                                                                                     _frac_pct(worst))


def _verdict(meets, undetermined, partial: bool = False) -> str:
    """yes / no / undetermined (rule 8), or provisional: a month not over whose verdict its rest may change."""
    if undetermined:
        return "provisional" if partial else "undetermined"
    return "" if meets is None else ("yes" if meets else "no")


def _cluster_uncertain(result) -> bool:
    return bool(result.cluster_undetermined) or (result.cluster_credit_worst_pct is not None
                                                 and result.cluster_credit_worst_pct != result.cluster_credit_pct) or (
        result.partial and result.cluster_worst_availability is not None
        and result.cluster_worst_availability != result.cluster_availability)


def windowed(result) -> list:
    """The nodes whose own service time is not the review's (a service window in the contract: rule 1)."""
    return [n for n in result.nodes if n.window != (None, None) and n.service != result.service]


def gpus_at_once(nodes, result) -> int:
    """The most GPUs of `nodes` in service at the same time: what a rack or cluster row's "gpus" means. A node
    swapped for a spare mid-month and the spare are two nodes of the contract, never in service at once: they count
    once (rule 1). With no service time this month at all, the nodes' windows cut to the month."""
    def span(n):
        if result.service is not None:
            return n.service
        since, until = n.window
        s = result.window[0] if since is None else max(result.window[0], since)
        e = result.window[1] if until is None else min(result.window[1], until)
        return (s, e) if e > s else None

    spans = [(span(n), n.gpus) for n in nodes]
    spans = [(sp, g) for sp, g in spans if sp is not None]
    return max([sum(g for (s, e), g in spans if s <= t < e) for t in {sp[0] for sp, _ in spans}] or [0])


def table_rows(result) -> dict:
    """name -> (rows, columns) for every table of the review (also the CSV files)."""
    tz = result.contract.timezone
    partial = result.partial
    service_s = (result.service[1] - result.service[0]) / US if result.service else 0

    def gpu_down_s(nodes):
        # What availability is computed from on every row: each node's counted downtime times its GPUs.
        return sum(n.down_us * n.gpus for n in nodes if n.availability is not None) / US

    avail = []
    for n in result.nodes:
        avail.append({"level": "node", "name": n.name, "rack": n.rack or "", "gpus": n.gpus,
                      "service_s": n.service_us / US, "excluded_s": n.excluded_us / US,
                      "own_down_s": n.own_down_us / US,
                      "rack_rule_s": n.rack_rule_us / US, "down_s": n.down_us / US, "gpu_down_s": gpu_down_s([n]),
                      "availability_pct": _range(n.availability, n.worst_availability, n.uncertain),
                      "target_pct": _frac_pct(result.target_pct),
                      "meets_target": _verdict(n.meets_target, n.undetermined, partial),
                      "unmonitored_s": "" if n.unmonitored_us is None else n.unmonitored_us / US,
                      "monitored_pct": "%.1f" % (100 - 100 * n.unmonitored_us / n.service_us)
                      if n.service_us and n.unmonitored_us is not None else "",
                      "unobserved_s": "" if n.unobserved_us is None else n.unobserved_us / US,
                      "worst_case_pct": "" if n.worst_availability is None else _pct(n.worst_availability),
                      "best_case_pct": "" if n.best_availability is None else _pct(n.best_availability)})
    # Rack and cluster rows have no down_s (node wall seconds): their availability is GPU-weighted, and rack_rule_s on
    # a rack row is the time the rack rule held, not the rack's downtime.
    for r in result.racks:
        members = [n for n in result.nodes if n.rack == r.name]
        avail.append({"level": "rack", "name": r.name, "rack": r.name, "gpus": gpus_at_once(members, result),
                      "service_s": service_s, "rack_rule_s": r.down_us / US, "gpu_down_s": gpu_down_s(members),
                      "availability_pct": _range(r.capacity_availability, r.capacity_worst_availability,
                                                 any(n.uncertain for n in members)),
                      "target_pct": _frac_pct(result.target_pct),
                      "worst_case_pct": "" if r.capacity_worst_availability is None
                      else _pct(r.capacity_worst_availability)})
    cluster_uncertain = _cluster_uncertain(result)
    avail.append({"level": "cluster", "name": result.contract.cluster, "gpus": gpus_at_once(result.nodes, result),
                  "service_s": service_s, "gpu_down_s": gpu_down_s(result.nodes),
                  "availability_pct": _range(result.cluster_availability, result.cluster_worst_availability,
                                             cluster_uncertain),
                  "target_pct": _frac_pct(result.target_pct),
                  "meets_target": _verdict(result.cluster_met_target, result.cluster_undetermined, partial),
                  "worst_case_pct": "" if result.cluster_worst_availability is None
                  else _pct(result.cluster_worst_availability),
                  "best_case_pct": "" if result.cluster_best_availability is None
                  else _pct(result.cluster_best_availability)})
    credits = [{"node": n.name, "rack": n.rack or "", "gpus": n.gpus,
                "availability_pct": _range(n.availability, n.worst_availability, n.uncertain),
                "tier": result.tier_name, "target_pct": _frac_pct(result.target_pct),
                "credit_pct_of_node_fee": _credit_range(n.credit_pct, n.credit_worst_pct, partial)}
               for n in result.nodes]
    credits.append({"node": "(cluster, GPU-weighted)", "gpus": gpus_at_once(result.nodes, result),
                    "availability_pct": _range(result.cluster_availability, result.cluster_worst_availability,
                                               cluster_uncertain), "tier": result.tier_name,
                    "target_pct": _frac_pct(result.target_pct),
                    "credit_pct_of_node_fee": _credit_range(result.cluster_credit_pct,
                                                            result.cluster_credit_worst_pct, partial)})
    downtime = [{**{k: v for k, v in row.items() if not k.endswith("_us")},
                 "start_local": iso_local(row["start_us"], tz), "end_local": iso_local(row["end_us"], tz),
                 "evidence": " ".join(row["evidence"])}
                for row in result.downtime]
    events = [{**e.as_row(), "evidence": json.dumps(e.evidence, sort_keys=True, default=str)} for e in result.events]
    return {
        "availability": (avail, ["level", "name", "rack", "gpus", "service_s", "excluded_s", "own_down_s",
                                 "rack_rule_s", "down_s", "gpu_down_s", "availability_pct", "target_pct",
                                 "meets_target", "unmonitored_s", "monitored_pct", "unobserved_s",
                                 "worst_case_pct", "best_case_pct"]),
        "credits": (credits, ["node", "rack", "gpus", "availability_pct", "tier", "target_pct",
                              "credit_pct_of_node_fee"]),
        "downtime": (downtime, ["node", "rack", "start", "end", "start_local", "end_local", "duration_s", "cause",
                                "evidence"]),
        "events": (events, ["id", "source", "scope", "target", "kind", "start", "end", "duration_s", "reason", "gpu",
                            "gpus", "announced_at", "evidence"]),
        "exclusions": (result.exclusions, ["event", "source", "scope", "target", "kind", "start", "end", "verdict",
                                           "why", "reason"]),
    }


def _sections(result, observations):
    """(title, intro lines, rows, columns) in reading order, shared by Markdown and HTML."""
    c = result.contract
    tz = c.timezone
    partial = result.partial
    if partial:
        # A month not over (availability.py, rule 9): the figure so far, the month's best case, the credit owed at
        # least, and the verdicts its rest may still change said to be provisional.
        cluster_line = ("Cluster availability (GPU-weighted): **%s %%** so far, at best %s %% over the whole month; "
                        "cluster credit: **at least %s %%** of the monthly fee (provisional: the month is not over)."
                        % (_range(result.cluster_availability, result.cluster_worst_availability,
                                  _cluster_uncertain(result)), _pct(result.cluster_best_availability),
                           _frac_pct(result.cluster_credit_pct)))
    else:
        cluster_line = ("Cluster availability (GPU-weighted): **%s %%**; cluster credit: **%s %%** of the monthly "
                        "fee%s." % (_range(result.cluster_availability, result.cluster_worst_availability,
                                           _cluster_uncertain(result)),
                                    _credit_range(result.cluster_credit_pct, result.cluster_credit_worst_pct),
                                    " (undetermined: time no source observed)" if _cluster_uncertain(result)
                                    else ""))
    open_word = "provisional" if partial else "undetermined"
    head = [
        "Provider **%s**, month **%s** (%s), tier **%s** (target %s %%), system **%s**." % (
            c.provider, result.month, tz, result.tier_name.capitalize(), _frac_pct(result.target_pct), c.system),
        "Window %s to %s (%s to %s)%s." % (iso_local(result.window[0], tz), iso_local(result.window[1], tz),
                                               iso_utc(result.window[0]), iso_utc(result.window[1]),
                                               ", partial: the month is not over" if result.partial else ""),
        "Service time: %s." % ("%s to %s" % (iso_utc(result.service[0]), iso_utc(result.service[1]))
                               if result.service else "none (not in service)"),
        cluster_line,
        "Cluster target %s %%: %s." % (_frac_pct(result.target_pct),
                                       "**%s**, %s" % (open_word, result.cluster_undetermined)
                                       if result.cluster_undetermined else "n/a (no service time)"
                                       if result.cluster_met_target is None else "met" if result.cluster_met_target
                                       else "**missed**" + (" (at best %s %% over the whole month)"
                                                            % _pct(result.cluster_best_availability)
                                                            if partial else "")),
        "Acceptance: %s." % result.acceptance["status"],
    ]
    if result.triggers:
        head.append("**Termination triggers:** " + "; ".join(t["detail"] for t in result.triggers) + ".")
    else:
        head.append("Termination triggers: none%s." % (" determined" if result.undetermined_triggers else ""))
    if result.undetermined_triggers:
        head.append("**Termination triggers %s** (%s): " % (
            open_word, "the month is not over" if partial else "time no source observed")
                    + "; ".join(t["detail"] for t in result.undetermined_triggers) + ".")
    partial_nodes = windowed(result)
    if partial_nodes:
        head.append("In service for part of it only (see Service windows): %s." % ", ".join(
            "%s (%s)" % (n.name, window_text(n.window)) for n in partial_nodes))
    for note in result.notes:
        head.append("Note: %s." % note)
    tables = table_rows(result)
    out = [("SLA review", head, None, None)]
    if partial_nodes:
        rows = [{"node": n.name, "rack": n.rack or "", "gpus": n.gpus,
                 "in_service_from": iso_utc(n.window[0]), "in_service_until": iso_utc(n.window[1]),
                 "service_start": iso_utc(n.service[0]) if n.service else "",
                 "service_end": iso_utc(n.service[1]) if n.service else "",
                 "service_start_local": iso_local(n.service[0], tz) if n.service else "",
                 "service_end_local": iso_local(n.service[1], tz) if n.service else "",
                 "service_s": n.service_us / US} for n in partial_nodes]
        out.append(("Service windows", [
            "Nodes the contract puts in service for part of the month (in_service_from, in_service_until: a node "
            "swapped for a spare, the spare, a node added or retired). Each is judged over its own service time "
            "only (service_start to service_end: the review's service time cut to its window): its events outside "
            "it are ignored, time outside it is neither downtime nor unobserved, the rack rule does not count it "
            "then, and it weighs in the rack and cluster figures and the cluster credit for that time only."],
            rows, ["node", "rack", "gpus", "in_service_from", "in_service_until", "service_start", "service_end",
                   "service_start_local", "service_end_local", "service_s"]))
    rows, cols = tables["availability"]
    out.append(("Availability", ["Node downtime (down_s) is its own (after exclusions) plus the rack rule's; "
                                 "gpu_down_s is down_s times the node's GPUs, summed for a rack and the cluster, whose "
                                 "availability is GPU-weighted (1 - gpu_down_s / the sum of each node's gpus x "
                                 "service_s with the calendar denominator: gpus x service_s of the row when every "
                                 "node is in service the whole month, a node with a service window weighing for its "
                                 "own service_s only); a rack's or the cluster's gpus is the most GPUs in service at "
                                 "the same time (a node swapped for a spare and the spare count once); a rack's "
                                 "rack_rule_s is the time the rack rule held. "
                                 "Percentages are "
                                 "cut, not rounded, at 4 decimals. Unmonitored time is reported, never counted. "
                                 "unobserved_s is the service time no source observed (the health probe's "
                                 "unmonitored time that no Slurm snapshot or sacctmgr export covered); "
                                 "worst_case_pct counts all of it as down. Where that could change the verdict or "
                                 "the credit, availability_pct is the range from the worst case to the counted "
                                 "value, and a node that meets the target only as counted is undetermined."]
                + (["The month is not over: availability_pct is the figure so far; best_case_pct is the downtime "
                    "so far over the whole month's service time (every remaining minute up). A node or the cluster "
                    "whose best case misses the target has missed it (no); one whose best case meets it is "
                    "provisional until the month is over (yes only when even every remaining minute down could not "
                    "make it miss)."] if partial else []),
                rows, cols))
    rows, cols = tables["credits"]
    out.append(("Credits", ["Per node, the tier's ladder (strictly below a threshold, the largest step applies); "
                            "the cluster line is the share of the whole monthly fee (each node's credit weighed by "
                            "its GPUs times its service time). A range runs from the counted credit to the credit "
                            "owed had all unobserved time been down."]
                + (["The month is not over: each credit is the one owed at least (the best case, every remaining "
                    "minute up); the rest of the month can only add to it."] if partial else []), rows, cols))
    undetermined = [{"node": n.name, "availability_pct": _range(n.availability, n.worst_availability, True),
                     "credit_pct": _credit_range(n.credit_pct, n.credit_worst_pct, partial), "why": n.undetermined}
                    for n in result.undetermined_nodes]
    if undetermined or result.cluster_undetermined:
        out.append(("Provisional" if partial else "Undetermined", [
            "The month is not over: nodes whose best case (every remaining minute up) meets the target, but whose "
            "rest of the month may still make them miss it: neither met nor missed until the month is over (nor "
            "counted as either in the consecutive-months rule)." if partial else
            "Nodes whose counted availability meets the target but whose worst case (every minute no source "
            "observed counted as down) does not: neither met nor missed until another record of that time settles "
            "it."]
                    + (["Cluster: %s." % result.cluster_undetermined] if result.cluster_undetermined else []),
                    undetermined or None, ["node", "availability_pct", "credit_pct", "why"]))
    # The breach rows carry floats for machines (summary.json); shown cut like every other availability.
    by_name = {n.name: n for n in result.nodes}
    breaches = [{**b, "availability_pct": _range(by_name[b["node"]].availability,
                                                 by_name[b["node"]].worst_availability, by_name[b["node"]].uncertain),
                 "credit_pct": _credit_range(by_name[b["node"]].credit_pct, by_name[b["node"]].credit_worst_pct,
                                             partial)}
                for b in result.breaches]
    out.append(("Breaches", [] if breaches else ["No node missed the target."], breaches or None,
                ["node", "availability_pct", "target_pct", "credit_pct", "down_s"]))
    rows, cols = tables["downtime"]
    out.append(("Downtime and its evidence", ["Each counted interval, with the events that made it (see events.csv "
                                              "and evidence.json for the samples and lines behind each event)."]
                if rows else ["No downtime counted."], rows or None, cols))
    rows, cols = tables["exclusions"]
    out.append(("Exclusions", [] if rows else ["No maintenance recorded."], rows or None, cols))
    if observations.get("monitoring_outages"):
        out.append(("Monitoring outages", [
            "Health-probe rounds in which no node answered (unreachable, or no result in time): the controller, the "
            "probe's one vantage point, may have been cut off itself. Not counted as downtime and not monitored time; "
            "a node the scheduler showed down then (scheduler_down) is down for as long as the scheduler's own "
            "record says."], observations["monitoring_outages"], ["at", "hosts", "scheduler_down"]))
    if observations.get("reboots"):
        out.append(("Reboots between samples", ["A changed boot id between two up samples: a reboot shorter than the "
                                                "probe interval (not counted: its length is unknown)."],
                    observations["reboots"], ["host", "between", "and", "booted_at"]))
    out.append(("Sources", ["%d health-probe samples read." % observations.get("samples", 0)],
                observations.get("sources") or None, ["source", "records", "events"]))
    rows, cols = tables["events"]
    out.append(("Events", [], rows or None, [c for c in cols if c != "evidence"]))
    return out


def render_markdown(result, observations) -> str:
    lines = []
    for i, (title, intro, rows, cols) in enumerate(_sections(result, observations)):
        lines.append(("# " if i == 0 else "## ") + title)
        lines.append("")
        lines += [x for x in intro]
        if intro:
            lines.append("")
        if rows:
            lines.append("| " + " | ".join(cols) + " |")
            lines.append("|" + "|".join("---" for _ in cols) + "|")
            for row in rows:
                lines.append("| " + " | ".join(_cell(row.get(c, "")) for c in cols) + " |")
            lines.append("")
    down = sum(n.down_us for n in result.nodes)
    lines.append("Total counted node downtime: %s (%.3f s)." % (duration_text(down), down / US))
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    if isinstance(value, float):
        value = ("%.3f" % value).rstrip("0").rstrip(".")
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_html(result, observations) -> str:
    import re

    def inline(text):
        return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", html.escape(text))

    parts = ["<!DOCTYPE html>", "<html lang='en'><head><meta charset='utf-8'>",
             "<title>SLA review %s %s</title>" % (html.escape(result.contract.provider), html.escape(result.month)),
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
             "td,th{border:1px solid #bbb;padding:2px 6px;font-size:90%}th{background:#eee}"
             ".no{color:#b00}.open{color:#b60;font-weight:bold}</style>", "</head><body>"]
    for i, (title, intro, rows, cols) in enumerate(_sections(result, observations)):
        parts.append("<h%d>%s</h%d>" % (1 if i == 0 else 2, html.escape(title), 1 if i == 0 else 2))
        for line in intro:
            parts.append("<p>%s</p>" % inline(line))
        if rows:
            parts.append("<table><tr>" + "".join("<th>%s</th>" % html.escape(c) for c in cols) + "</tr>")
            for row in rows:
                cells = []
                for c in cols:
                    text = _cell(row.get(c, ""))
                    cls = (" class='no'" if c == "meets_target" and text == "no" else
                           " class='open'" if c == "meets_target" and text in ("undetermined", "provisional")
                           else "")
                    cells.append("<td%s>%s</td>" % (cls, html.escape(text)))
                parts.append("<tr>" + "".join(cells) + "</tr>")
            parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
