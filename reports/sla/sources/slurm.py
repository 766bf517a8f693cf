"""Slurm node states and events -> down events.

Inputs, as recorded from the tools (tests/fixtures/slurm/ has examples):
- `scontrol show node` (multi-line records) or `scontrol -o show node` (one line per node): a snapshot at a known
  time (`observed_at`). A node in a down state with `Reason=... [user@time]` is down from the reason's time until
  at least the snapshot; a series of snapshots (the health probe stores one per round when `sla_slurm_host` is set)
  closes the interval at the first snapshot where the node is no longer down. Two down snapshots with unmonitored
  time between them (a failed or missing snapshot: more than `hold_intervals` of the earlier snapshot's round
  interval, `interval_s`, or `max_gap_us` for a snapshot without one) or with a reason set after the earlier one
  (a new drain) are two outages, not one, as for the health probe. A down snapshot taken during an
  exclusion honoured for the node (`excluded`: the assessment's own reboot, announced maintenance) stands for the
  node only until the exclusion ends, as a health-probe sample does (reports/sla/sources/healthprobe.py).
- `sinfo -N -h -o '%N|%T|%E|%u|%H'` (node, state, reason, user, reason time), `sinfo -R` (the nodes with a reason,
  all out of service: a node it leaves out was in service when it was taken), or the default, `-N` and `-N -l`
  tables (state with its sinfo suffix): see parse_sinfo.
- `sacctmgr show event` (default fixed-width table, or -p / -P parsable): node events with TimeStart and TimeEnd
  (`Unknown` while still open); needs slurmdbd accounting. Cluster events (no NodeName) are not downtime. Its User
  column is `name(uid)`, compared with `ignore_users` by the name (event_user).

What each observed, for the time no source observed (reports/sla/availability.py, rule 8): a snapshot observed the
nodes it lists for as long as it stands (coverage_from_snapshots); a sacctmgr export is the scheduler's event
history from the query's Start= to the export (the sla role asks from a day before the month,
reports/sla/review.py), and it vouches only for the nodes Slurm shows it knows: those its node events name
(sacctmgr_nodes), or a Slurm snapshot lists (snapshot_nodes). A contract node under another name in Slurm
(gpu003.dc1 for gpu003), one Slurm does not have, or an export with no node event at all (asked about another
cluster, or its events purged by slurmdbd's PurgeEventAfter) says nothing of a node no snapshot lists: the export
cannot tell "no event" from "not Slurm's node". Nor does it, or the hold of the snapshot before, vouch for the time
a failed Slurm snapshot of a probe round stands for (failed_spans): Slurm could not be asked then, so its record of
that time cannot be relied on.

Down means the phases down, draining and drained of probes/common/slurm.py: base state DOWN, FAIL, FUTURE or
UNKNOWN, a drain, or a flag that keeps work off the node (NOT_RESPONDING `*`, FAIL, REBOOT_ISSUED, an invalid
registration). Power saving (POWERED_DOWN `~`, powering up or down) and MAINT (a maintenance reservation) alone are
not down; a record with no state at all is not either. A drain whose reason was set by one of
`ignore_users` (the buyer's own admins) is not the provider's downtime.
Slurm prints local times without an offset: the caller names the controller's zone (`tz`), never guessed.
"""

from __future__ import annotations

import re

from probes.common.slurm import parse_show_node, split_reason
from probes.common.slurm import phase as node_phase
from reports.sla import intervals as iv
from reports.sla.events import Event
from reports.sla.timeutil import US, TimeError, iso_utc, parse_time


class SlurmParseError(ValueError):
    pass


def expand_hostlist(text: str) -> list[str]:
    """Slurm hostlist -> names: 'gpu[001-003,007],login1' -> gpu001, gpu002, gpu003, gpu007, login1."""
    names, depth, cur = [], 0, ""
    parts = []
    for ch in text.strip():
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "["
        depth -= ch == "]"
        cur += ch
    if cur:
        parts.append(cur)
    for part in parts:
        m = re.match(r"^(.*?)\[([^\]]+)\](.*)$", part)
        if not m:
            if part:
                names.append(part)
            continue
        prefix, ranges, suffix = m.groups()
        for rng in ranges.split(","):
            if "-" in rng:
                lo, hi = rng.split("-", 1)
                width = len(lo) if lo.startswith("0") else 0
                for i in range(int(lo), int(hi) + 1):
                    for rest in expand_hostlist(suffix) if "[" in suffix else [suffix]:
                        names.append("%s%0*d%s" % (prefix, width, i, rest))
            else:
                for rest in expand_hostlist(suffix) if "[" in suffix else [suffix]:
                    names.append(prefix + rng + rest)
    return names


def is_down(state: str) -> bool:
    """Out of service: the one meaning of down in this project, the node side's (probes/common/slurm.py phase)."""
    return node_phase({"State": state}) in ("down", "draining", "drained")  # unknown (no state) is not downtime


def parse_reason(text: str, tz, fold: int = 0) -> tuple[str, str | None, int | None]:
    """'Not responding [slurm@2021-10-19T12:56:19]' -> ('Not responding', 'slurm', µs); `fold` as parse_time's."""
    text = (text or "").strip()
    if text in ("", "(null)", "none"):
        return "", None, None
    reason, user, when = split_reason(text)  # the one reading of the stamp (probes/common/slurm.py)
    if when is None:
        return text, None, None
    return reason, user, parse_time(when, default_tz=tz, fold=fold)


def parse_scontrol_show_node(text: str) -> list[dict]:
    """Records of `scontrol show node` (multi-line) or `scontrol -o show node` -> dicts of Key -> value (the one
    parser, probes/common/slurm.py, which the reliability probes use on the nodes too)."""
    return list(parse_show_node(text).values())


_SINFO_HEADERS = ("PARTITION", "NODELIST", "REASON", "HOSTNAMES")


def _columns(header: str) -> list[tuple[str, int]]:
    """Header names with where each starts ('99% percentile'-like names do not occur in sinfo)."""
    return [(m.group(0), m.start()) for m in re.finditer(r"\S+", header)]


def parse_sinfo(text: str) -> list[dict]:
    """sinfo output -> [{node, state, reason, user, time, partition}], one record per node (the first partition a
    node is listed in). Lines before the header (a shell prompt, `sinfo -l`'s date line, a banner) are skipped.

    - `sinfo -N -h -o '%N|%T|%E|%u|%H'` (node, state, reason, user, reason time), with or without its header;
    - default `sinfo` (PARTITION AVAIL TIMELIMIT NODES STATE NODELIST, one line per partition and state, node lists
      compressed) and `sinfo -N` / `sinfo -N -l` (NODELIST NODES PARTITION STATE …, REASON last): the state as sinfo
      prints it, with its suffix (`drain*`, `idle~`, `mix-`), read by probes/common/slurm.split_state;
    - `sinfo -R` (REASON USER TIMESTAMP [STATE] NODELIST): the state is the STATE column where there is one
      (`sinfo -R -l`); plain -R prints none, so the state is "" and `listed` is True: sinfo -R lists only nodes
      that are down, drained, draining, failing or failed, and the SLA review counts a listed node out of service
      without inventing which of those it is.
    Raises SlurmParseError when no header or pipe line is found; lines after the header that cannot be read (a
    trimmed output's "...") are kept in the records' absence and named by `unparsed_lines`.
    """
    lines = [line.rstrip() for line in (text or "").splitlines() if line.strip()]
    out: list[dict] = []
    seen: set[str] = set()

    def add(rec):
        if rec["node"] not in seen:
            seen.add(rec["node"])
            out.append(rec)

    pipes = [line for line in lines if line.count("|") >= 4]
    if pipes:
        for line in pipes:
            fields = line.split("|")
            if fields[0].strip().upper() in ("NODELIST", "HOSTNAMES"):
                continue
            for node in expand_hostlist(fields[0]):
                reason = "" if fields[2] in ("none", "(null)") else fields[2]  # %E prints "none" for no reason
                add({"node": node, "state": fields[1], "reason": reason, "user": fields[3], "time": fields[4],
                     "partition": None})
        return out
    at = next((i for i, line in enumerate(lines) if line.split()[0] in _SINFO_HEADERS), None)
    if at is None:
        raise SlurmParseError("not a recognised sinfo output (want the default, -N, -N -l, -R or "
                              "-o '%%N|%%T|%%E|%%u|%%H' format): cannot read %r" % (lines[0][:200] if lines else ""))
    header = lines[at]
    cols = _columns(header)
    names = [c for c, _ in cols]
    unparsed = []
    for line in lines[at + 1:]:
        if names[0] == "REASON":
            starts = dict(cols)
            rest = [c for c in names if c != "REASON"]
            reason = line[:starts[rest[0]]].strip()
            # USER, TIMESTAMP (and STATE) are single words after the reason; NODELIST is the last word
            words = line[starts[rest[0]]:].split()
            if len(words) != len(rest):
                unparsed.append(line)
                continue
            vals = dict(zip(rest, words))
            state = vals.get("STATE", "")
            for node in expand_hostlist(vals["NODELIST"]):
                add({"node": node, "state": state, "reason": reason, "user": vals.get("USER", ""),
                     "time": vals.get("TIMESTAMP", ""), "partition": None, "listed": True})
            continue
        words = line.split()
        if "REASON" in names and names[-1] == "REASON":
            reason = line[dict(cols)["REASON"]:].strip() if len(line) > dict(cols)["REASON"] else ""
            words = line[:dict(cols)["REASON"]].split()
            if len(words) != len(names) - 1:
                unparsed.append(line)
                continue
            vals = dict(zip(names, words + [reason]))
        elif len(words) == len(names):
            vals = dict(zip(names, words))
        elif names[0] == "PARTITION" and len(words) == len(names) - 1 and words[-2:][0] == "0":
            continue  # a partition with no nodes: "compute*  up  infinite  0  n/a"
        else:
            unparsed.append(line)
            continue
        nodes = vals.get("NODELIST") or vals.get("HOSTNAMES") or ""
        reason = vals.get("REASON", "")
        for node in expand_hostlist(nodes):
            add({"node": node, "state": vals.get("STATE", ""), "reason": "" if reason == "none" else reason,
                 "user": "", "time": "", "partition": (vals.get("PARTITION") or "").rstrip("*") or None})
    if unparsed and not out:
        raise SlurmParseError("sinfo: cannot read %r" % unparsed[0][:200])
    for rec in out:
        rec["unparsed_lines"] = unparsed
    return out


def parse_sacctmgr_events(text: str) -> list[dict]:
    """`sacctmgr show event` default table, or -p/-P parsable output (with its header) -> list of dicts."""
    lines = [line.rstrip("\n") for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return []
    if "|" in lines[0]:
        trailing = lines[0].endswith("|")  # -p ends every line with one '|'; -P does not

        def cut(line):
            return line[:-1] if trailing and line.endswith("|") else line

        header = [h.strip() for h in cut(lines[0]).split("|")]
        rows = []
        for line in lines[1:]:
            fields = cut(line).split("|")
            rows.append({h: (fields[i].strip() if i < len(fields) else "") for i, h in enumerate(header)})
        return rows
    if len(lines) < 2 or not set(lines[1].replace(" ", "")) <= {"-"}:
        raise SlurmParseError("not a recognised sacctmgr table (want the header and dashes, or -P output)")
    spans, pos = [], 0
    for dashes in lines[1].split(" "):
        if dashes:
            spans.append((pos, pos + len(dashes)))
        pos += len(dashes) + 1
    header = [lines[0][s:e].strip() for s, e in spans]
    return [{h: line[s:e].strip() for h, (s, e) in zip(header, spans)} for line in lines[2:]]


def sacctmgr_nodes(rows: list[dict]) -> set[str]:
    """The nodes a `sacctmgr show event` export names in its node events (any state, any user: Slurm knows them)."""
    return {name for row in rows if (row.get("NodeName") or "").strip()
            for name in expand_hostlist(row["NodeName"])}


def event_user(text: str) -> str:
    """The user name of a `sacctmgr show event` User column. sacctmgr prints `name(uid)` (SchedMD
    src/sacctmgr/event_functions.c: snprintf "%s(%u)" into 20 bytes), and its default fixed-width table cuts what is
    wider than the column with a '+' (print_fields: alice(1001) -> alice(100+ in the 10-wide User column), so
    everything from the '(' on goes. A name the cut reaches (verylongna+) cannot be told: export with -P."""
    return (text or "").split("(", 1)[0].strip()


def events_from_sacctmgr(rows: list[dict], tz, horizon_us: int, ignore_users=(), prefix="sacctmgr",
                         notes: list | None = None) -> list[Event]:
    """Node events -> down events; an event still open (TimeEnd Unknown) is closed at horizon_us. A row that does
    not end after it starts is not counted, and `notes` names it (its row after the header, evidence["line"])."""
    out = []
    for i, row in enumerate(rows):
        node = row.get("NodeName", "")
        start_text = row.get("TimeStart") or row.get("Start") or ""
        if not node or not start_text:
            continue  # cluster events: registration, TRES changes
        if not is_down(row.get("State", "")) or event_user(row.get("User")) in set(ignore_users):
            continue
        end_text = row.get("TimeEnd") or row.get("End") or ""
        start = parse_time(start_text, default_tz=tz)
        still_open = end_text in ("", "Unknown", "None")
        end = horizon_us if still_open else parse_time(end_text, default_tz=tz)
        if end <= start and not still_open:
            # Slurm prints local times without an offset: an end in the hour the autumn change repeats reads as its
            # first pass (fold 0). When that is not after the start, the second pass is the one meant (01:40 CDT to
            # 01:10 CST); elsewhere fold 1 reads the same instant, or an earlier one in the spring gap (max keeps it).
            end = max(end, parse_time(end_text, default_tz=tz, fold=1))
        if end <= start:
            if notes is not None:
                shown = end_text if not still_open else "%s (open, closed at the export %s)" % (
                    end_text or "Unknown", iso_utc(horizon_us))
                notes.append("%s row %d after the header: %s %s to %s (%s time) does not end after it starts: "
                             "not counted" % (prefix, i + 1, node, start_text, shown, getattr(tz, "key", tz)))
            continue
        for name in expand_hostlist(node):
            out.append(Event(id="%s:%s:%d" % (prefix, name, i + 1), source="sacctmgr", scope="node", target=name,
                             kind="down", start=start, end=end, reason=row.get("Reason", ""),
                             evidence={"line": i + 1, "state": row.get("State", ""), "user": row.get("User", ""),
                                       "open": still_open, "time_start": start_text, "time_end": end_text}))
    return out


def snapshot_records(text: str, fmt: str) -> list[dict]:
    """A recorded snapshot -> [{node, state, reason, user, time}] whatever the tool."""
    if fmt.startswith("scontrol"):
        recs = []
        for doc in parse_scontrol_show_node(text):
            recs.append({"node": doc["NodeName"], "state": doc.get("State", ""), "reason_raw": doc.get("Reason", "")})
        return recs
    if fmt.startswith("sinfo"):
        return parse_sinfo(text)
    raise SlurmParseError("unknown snapshot format %r" % fmt)


def snapshot_nodes(snapshots: list[dict]) -> set[str]:
    """The nodes the (successful) snapshots list: nodes Slurm knows by that name."""
    return {rec["node"] for snap in snapshots
            for rec in snapshot_records(snap["text"], snap.get("format") or "scontrol-oneliner")}


def failed_spans(snapshots: list[dict], hold_intervals: float | None = None,
                 max_gap_us: int | None = None) -> list[tuple[int, int]]:
    """The time the failed snapshots (rc not 0: Slurm could not be asked) stand for, as a snapshot stands: from its
    time until the next snapshot of any outcome, for at most hold_intervals of its round's interval (max_gap_us for
    one without)."""
    ordered = sorted(snapshots, key=lambda s: s["observed_at_us"])
    out = []
    for snap, nxt in zip(ordered, ordered[1:] + [None]):
        if snap.get("rc") in (None, 0):
            continue
        t = snap["observed_at_us"]
        ends = [nxt["observed_at_us"]] if nxt is not None else []
        ends += ([t + int(hold_intervals * float(snap["interval_s"]) * US)] if hold_intervals and snap.get("interval_s")
                 else [t + max_gap_us] if max_gap_us is not None else [])
        if ends:
            out.append((t, min(ends)))
    return iv.merge(out)


def lists_only_out_of_service(text: str, fmt: str) -> bool:
    """Whether a snapshot is `sinfo -R` (header REASON …), which lists only the nodes out of service."""
    lines = (text or "").splitlines()
    if not (fmt or "").startswith("sinfo") or any(line.count("|") >= 4 for line in lines):
        return False  # the '|' formats print the state of every node they list
    firsts = [line.split()[0] for line in lines if line.strip()]
    return next((word for word in firsts if word in _SINFO_HEADERS), None) == "REASON"


def _unmonitored_after(prev: dict, t: int) -> bool:
    """Whether the time from snapshot prev to t was not monitored: longer than prev stands for (its hold)."""
    return prev["hold_us"] is not None and t - prev["t"] > prev["hold_us"]


def _new_outage(prev: dict, nxt: dict) -> bool:
    """Two down snapshots in a row are two outages, not one, when the time between them was not monitored (the
    health probe's rule) or the later one's reason was set between the two (a new drain; a reason time after its own
    snapshot says nothing about the time between)."""
    return (_unmonitored_after(prev, nxt["t"])
            or (nxt["since"] is not None and prev["t"] < nxt["since"] <= nxt["t"]))


def _series(snapshots: list[dict], tz, ignore_users=(), max_gap_us: int | None = None,
            hold_intervals: float | None = None) -> dict[str, list]:
    """node -> its sightings in time order: {t, down, reason, user, since, state, snapshot, hold_us}."""
    series: dict[str, list] = {}
    ordered = sorted(snapshots, key=lambda s: s["observed_at_us"])
    records = [snapshot_records(snap["text"], snap.get("format") or "scontrol-oneliner") for snap in ordered]
    known = {rec["node"] for recs in records for rec in recs}
    for snap, recs in zip(ordered, records):
        # A fixed gap would split a 15-minute probe's every outage into unmonitored pieces (or join a 1-minute
        # probe's across missed rounds): each snapshot holds for its own round's interval, as a probe sample does.
        hold_us = (int(hold_intervals * float(snap["interval_s"]) * US) if hold_intervals and snap.get("interval_s")
                   else max_gap_us)
        if lists_only_out_of_service(snap["text"], snap.get("format") or "scontrol-oneliner"):
            for name in known - {rec["node"] for rec in recs}:
                series.setdefault(name, []).append(
                    {"t": snap["observed_at_us"], "down": False, "reason": "", "user": None, "since": None,
                     "state": "not listed by sinfo -R", "snapshot": snap.get("id"), "hold_us": hold_us})
        for rec in recs:
            if "reason_raw" in rec:
                reason, user, when = parse_reason(rec["reason_raw"], tz)
                late = parse_reason(rec["reason_raw"], tz, fold=1)[2]
            else:
                reason, user = rec.get("reason", ""), rec.get("user") or None
                try:
                    when, late = ((parse_time(rec["time"], default_tz=tz), parse_time(rec["time"], default_tz=tz,
                                                                                       fold=1))
                                  if rec.get("time") not in (None, "", "Unknown") else (None, None))
                except TimeError:
                    when = late = None
            down = (is_down(rec["state"]) or (rec.get("listed") and not rec["state"])) \
                and (user or "") not in set(ignore_users)
            series.setdefault(rec["node"], []).append(
                {"t": snap["observed_at_us"], "down": down, "reason": reason, "user": user, "since": when,
                 "since_late": late, "state": rec["state"], "snapshot": snap.get("id"), "hold_us": hold_us})
    return series


def coverage_from_snapshots(snapshots: list[dict], tz, ignore_users=(), max_gap_us: int | None = None,
                            excluded: dict | None = None, hold_intervals: float | None = None) -> dict[str, list]:
    """node -> the intervals the snapshots observed it, down or in service (the review's rule 8, time no source
    observed: reports/sla/availability.py). Each sighting stands for the node as events_from_snapshots reads it:
    until the node's next sighting, for at most its hold (hold_intervals of its round's interval, or max_gap_us),
    and, taken in an exclusion honoured for the node, only until the exclusion ends. A sighting with no hold at all
    (max_gap_us None and no interval) vouches only up to the next sighting, never for ever; a node a snapshot does
    not list is not observed by it."""
    out: dict[str, list] = {}
    for node, points in _series(snapshots, tz, ignore_users, max_gap_us, hold_intervals).items():
        spans = []
        for p, nxt in zip(points, points[1:] + [None]):
            ends = [] if p["hold_us"] is None else [p["t"] + p["hold_us"]]
            ends += [nxt["t"]] if nxt is not None else []
            ends += [e for s, e in (excluded or {}).get(node, []) if s <= p["t"] < e]
            if ends:
                spans.append((p["t"], min(ends)))
        out[node] = iv.merge(spans)
    return out


def events_from_snapshots(snapshots: list[dict], tz, ignore_users=(), max_gap_us: int | None = None,
                          prefix="slurm", excluded: dict | None = None,
                          hold_intervals: float | None = None) -> list[Event]:
    """Snapshots [{observed_at_us, text, format, id, interval_s}] -> down events per node (see the module docstring).
    A snapshot stands for the time after it up to hold_intervals of its own round's interval (interval_s: the
    health probe's round it was taken in records it, 1 s to a day), or max_gap_us when it has none (a file given
    by hand) or hold_intervals is not given; None: for ever.
    excluded: node -> intervals of the exclusions honoured for it (reports.sla.availability.excluded_intervals).
    A node that a `sinfo -R` snapshot leaves out was in service when it was taken (-R lists only the others)."""
    series = _series(snapshots, tz, ignore_users, max_gap_us, hold_intervals)
    out = []
    for node, points in sorted(series.items()):
        prev_up = None
        i = 0
        while i < len(points):
            p = points[i]
            if not p["down"]:
                prev_up = p["t"]
                i += 1
                continue
            j = i
            while j + 1 < len(points) and points[j + 1]["down"] and not _new_outage(points[j], points[j + 1]):
                j += 1
            start, since = p["t"], p["since"]
            if since is not None and prev_up is not None and since < prev_up < p["since_late"] <= start:
                # A reason time in the hour the autumn change repeats reads as its first pass (fold 0). When that is
                # before the node's last sighting in service, the drain cannot date from then: the second pass is
                # the one meant (seen in service 01:50 CDT, drained since 01:40 CST). Elsewhere both passes agree.
                since = p["since_late"]
            if since is not None and since < start:
                start = max(since, prev_up) if prev_up is not None else since
            nxt = points[j + 1] if j + 1 < len(points) else None
            last = points[j]["t"]
            if nxt is not None and not _unmonitored_after(points[j], nxt["t"]):
                # seen in service again, or down under a reason set since (a new drain): the outage held until then
                end, still_open = (nxt["since"] if nxt["down"] else nxt["t"]), False
            else:
                end, still_open = last, True
            cut = min([e for s, e in (excluded or {}).get(node, []) if s <= last < e < end], default=None)
            end = cut or end
            if end > start:
                out.append(Event(
                    id="%s:%s:%s-%s" % (prefix, node, points[i]["snapshot"] or i, points[j]["snapshot"] or j),
                    source="slurm", scope="node", target=node, kind="down", start=start, end=end,
                    reason=p["reason"] or p["state"],
                    evidence={"state": p["state"], "reason_user": p["user"], "reason_since": iso_utc(since)
                              if since else None, "first_seen": iso_utc(p["t"]), "last_seen": iso_utc(last),
                              "open": still_open, "exclusion_ended_at": iso_utc(cut) if cut else None,
                              "snapshots": [x["snapshot"] for x in points[i:j + 1]]}))
            prev_up = None
            i = j + 1
    return out


def down_at(events: list[Event], node: str, t: int) -> bool:
    """Whether the scheduler's records show the node down at instant t. A record closed by a later snapshot ends
    where the node was seen back; an open one (open in its evidence) ends at its last sighting, which counts."""
    return any(ev.source in ("slurm", "sacctmgr") and ev.kind == "down" and ev.scope == "node" and ev.target == node
               and (ev.start <= t < ev.end or (ev.evidence.get("open") and t == ev.end)) for ev in events)
