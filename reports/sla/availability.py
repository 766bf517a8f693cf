"""Events -> downtime intervals -> availability per node, rack and cluster for one month; credits and triggers.

The rules, in the order they are applied (all durations in UTC microseconds, all intervals half-open):

1. Service time. The month is [first instant, first instant of the next month) in the contract's time zone. Time
   before the acceptance (`accepted_at`) is not service time; with an agreed acceptance date but no acceptance yet
   there is no service time at all. A review of the running month stops at "now" (rule 9). A node's service time
   is that, cut to its own service window when the contract gives one (`in_service_from`, `in_service_until`, read
   as `accepted_at` is: a node swapped for a spare mid-month, the spare that replaced it): nothing outside a node's
   window is counted for it, neither downtime (its own events there are ignored for it, with a note), nor
   exclusions, nor time no source observed (rule 8). A node whose window misses the month has no service time.
2. A node's own downtime: its node-scope `down` events, the rack- and cluster-scope `down` events that cover it, and
   the node rule: the node is down while at least `node_down_gpus` of its GPUs are down at once (gpu-scope events;
   a record that names no GPU counts as `gpus` GPUs, and overlapping records are never added up beyond what one
   source says, so two sources reporting the same failed GPU count it once).
3. Exclusions. Maintenance events of a kind listed under `exclusions` in sla_tiers.yml, announced at least
   `notice_h` before they start, are cut out of the downtime of the nodes they cover (node, rack or cluster scope).
   Maintenance that is not excluded (kind not listed, no announcement recorded, notice too short) is downtime, and
   the exclusions table says why each one was refused. A kind with `needs_announcement: false` (the assessment's
   own tests) needs none.
4. Overlapping intervals from any number of sources are merged, so a minute is counted once; outages shorter than
   `min_outage_s` are dropped, judged on the whole outage before it is clipped to the month (an outage across
   midnight on the 1st is not a blip of each month).
5. The rack rule (systems with `rack_down_nodes`, NVL72: 3): while at least that many of a rack's nodes are down at
   once (after exclusions), every node of the rack counts as down. A node out of service (outside its window) is
   not down for the rule, and the rule puts no downtime on it.
6. Availability = 1 - downtime / service time (or / service time minus excluded time, with
   `availability_denominator: eligible`), exact (fractions), each node over its own service time. Credits: the
   tier's ladder per node. Rack and cluster figures weigh each node by its GPUs times its own service time: the
   availability is 1 - the sum of downtime x GPUs / the sum of denominator x GPUs, and the cluster's credit is the
   mean of the node credits weighted by GPUs x service time (share of the whole monthly fee). A node in service for
   part of the month weighs only for that part: a node swapped on the 15th and its spare together weigh as one
   node of the whole month. With no windows every node's service time is the same and both are GPU-weighted means.
7. Breaches: nodes below the tier's target. Termination triggers: cluster availability below the tier's
   termination threshold; the target missed for N consecutive months (with the earlier months' reviews); the
   acceptance not made within `termination_after_days` of the agreed date: calendar days in the contract's zone
   (the agreed date's local time, that many local dates later; across a DST change not N x 24 h).
8. Time no source observed. `unobserved` (node -> intervals; reports/sla/review.py builds it) is the service time in
   which no source saw the node at all: the health probe's unmonitored time (samples beyond their hold, and the
   monitoring outages, rounds in which no host answered) minus what another source observed (Slurm snapshots for
   their hold; the sacctmgr event history for its span, but only of the nodes Slurm shows it knows, named in the
   export's node events or listed by a Slurm snapshot: an export with no node event at all vouches for no node a
   snapshot does not list; neither of them over a probe round whose own Slurm snapshot failed). A source that records
   only down events (a provider log, the assessment's test windows) cannot vouch for up time and observes nothing.
   That time is never counted, but it bounds the truth: the worst case is the availability had all of it (outside
   honoured exclusions) been down, built as the counted downtime is (rules 4 and 5): the unobserved time joined to
   the node's own outages, outages shorter than `min_outage_s` dropped, each judged whole (a gap too short to hold
   such an outage adds nothing, one next to an outage seen makes it longer; a gap that reaches the edge of the
   node's service time may go on beyond it, where nothing is known), then clipped to the service time, with the rack
   rule applied to the nodes' worst cases. The `undetermined` reason says how much of the worst case is the node's
   own unobserved time and how much the rack rule on other nodes adds. Counted availability below the target is a
   breach, whatever the worst case; counted at or above the target is met only when the worst case is too (the
   unobserved time is too short to matter); otherwise the verdict is undetermined (`meets_target` None,
   `undetermined` says why) and the credit is the range from the counted to the worst-case credit. The cluster is
   judged the same way on its GPU-weighted figures, and a termination trigger that only the worst case reaches is
   listed as undetermined, never as met or missed. Without `unobserved` (None) there is no worst case: the counted
   figures stand. Only a node's own service time can be unobserved: a retired node no source sees after its
   `in_service_until`, or a spare before its `in_service_from`, is out of service then, not unobserved.
9. A month not over (a review before its end: `partial`). The availability is the figure so far (rules 1-8 over the
   service time up to "now"), but credits, the target and the termination triggers are the month's, so the review
   asserts only what the rest of the month cannot change. The best case is the downtime so far over the whole
   month's service time (every remaining minute up; unobserved time counted up): the credit is at least the best
   case's (no upper bound yet: `credit_worst_pct` None), a node or the cluster whose best case misses the target has
   missed it, and the availability trigger holds when the best case is below the threshold. Met is asserted only
   when even the worst case (the worst so far, every remaining minute down) meets the target. Anything else is
   undetermined as in rule 8 (`meets_target` / `cluster_met_target` None, `undetermined` says "the month is not
   over"), so the consecutive rule counts the month neither as met nor as missed, and a later month's history reads
   it as undetermined; an availability trigger reached only by the figure so far is listed with the undetermined
   triggers, as provisional.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from reports.sla import intervals as iv
from reports.sla.events import Contract, Event, contract_instant
from reports.sla.tiers import Tiers
from reports.sla.timeutil import US, TimeError, add_days, add_months, iso_utc, month_window, zone

DAY_US = 86400 * US


@dataclass
class NodeResult:
    name: str
    rack: str | None
    gpus: int
    service_us: int  # the node's own service time (rule 1)
    excluded_us: int
    own_down_us: int  # the node's own downtime after exclusions
    rack_rule_us: int  # downtime added by the rack rule on top of the node's own
    down_us: int  # counted downtime
    denominator_us: int
    availability: Fraction | None  # None: no service time this month
    credit_pct: Fraction
    meets_target: bool | None  # None: no service time, or undetermined (see `undetermined`)
    unmonitored_us: int | None  # None: no health-probe data was given at all
    down: list = field(default_factory=list)  # counted intervals
    excluded: list = field(default_factory=list)
    # Time no source observed (rule 8); None: not judged (no coverage given), the worst case is the counted case.
    unobserved_us: int | None = None
    worst_down_us: int | None = None  # counted downtime plus the unobserved time, as if it had all been down
    worst_availability: Fraction | None = None
    credit_worst_pct: Fraction | None = None
    undetermined: str | None = None  # why the verdict is undetermined (counted meets the target, worst case not)
    # The node's own service time [start, end) (rule 1: the review's, cut to the node's window); None: none this month
    service: tuple[int, int] | None = None
    # Its window as the contract gives it (UTC microseconds; None: no bound on that side)
    window: tuple[int | None, int | None] = (None, None)
    # Rule 9, a month not over (None otherwise): the node's service time and denominator over the whole month, the
    # best case (the downtime so far over the whole month: every remaining minute up) and the month's worst downtime
    # (its worst case so far plus every remaining minute down).
    month_service_us: int | None = None
    month_denominator_us: int | None = None
    best_availability: Fraction | None = None
    month_worst_down_us: int | None = None

    @property
    def availability_pct(self) -> float | None:
        return None if self.availability is None else float(self.availability * 100)

    @property
    def best_availability_pct(self) -> float | None:
        return None if self.best_availability is None else float(self.best_availability * 100)

    @property
    def worst_availability_pct(self) -> float | None:
        return None if self.worst_availability is None else float(self.worst_availability * 100)

    @property
    def uncertain(self) -> bool:
        """Whether the unobserved time could change the verdict or the credit (then a range is shown); in a month
        not over, whether the verdict is provisional or the figure so far has a worst case apart from it."""
        return self.undetermined is not None or (self.credit_worst_pct is not None
                                                 and self.credit_worst_pct != self.credit_pct) or (
            self.best_availability is not None and self.worst_availability is not None
            and self.worst_availability != self.availability)


@dataclass
class RackResult:
    name: str
    nodes: list[str]
    rule_nodes: int | None
    nodes_per_rack: int | None
    down: list  # intervals in which the rack rule held
    down_us: int
    capacity_availability: Fraction | None
    capacity_worst_availability: Fraction | None = None  # with every node's worst case (rule 8)


@dataclass
class Review:
    month: str
    contract: Contract
    tier_name: str
    target_pct: Fraction
    window: tuple[int, int]
    service: tuple[int, int] | None
    partial: bool
    params: dict
    nodes: list[NodeResult]
    racks: list[RackResult]
    cluster_availability: Fraction | None
    cluster_credit_pct: Fraction
    downtime: list[dict]  # one row per counted interval and cause, with its evidence
    exclusions: list[dict]  # exclusions applied or refused, with why
    breaches: list[dict]
    triggers: list[dict]
    acceptance: dict
    notes: list[str]
    events: list[Event]
    # Rule 8: the cluster's worst case, its verdict (None: no service time, or undetermined, then
    # `cluster_undetermined` says why), the worst-case credit, and the triggers only the worst case reaches.
    cluster_worst_availability: Fraction | None = None
    cluster_credit_worst_pct: Fraction | None = None
    cluster_met_target: bool | None = None
    cluster_undetermined: str | None = None
    undetermined_triggers: list[dict] = field(default_factory=list)
    # Rule 9: the cluster's best case over the whole month when the month is not over (None otherwise).
    cluster_best_availability: Fraction | None = None

    @property
    def provisional(self) -> bool:
        """A review of a month not over (rule 9): its credits are minimums, its open verdicts provisional."""
        return self.partial

    @property
    def cluster_availability_pct(self) -> float | None:
        return None if self.cluster_availability is None else float(self.cluster_availability * 100)

    @property
    def cluster_best_availability_pct(self) -> float | None:
        return None if self.cluster_best_availability is None else float(self.cluster_best_availability * 100)

    @property
    def cluster_worst_availability_pct(self) -> float | None:
        return None if self.cluster_worst_availability is None else float(self.cluster_worst_availability * 100)

    @property
    def undetermined_nodes(self) -> list[NodeResult]:
        return [n for n in self.nodes if n.undetermined is not None]


def pct_text(value, digits: int = 4) -> str:
    """A fraction of 1 as a percentage cut (floored) at `digits` decimals, never rounded: 99.499963 % shows as
    99.4999, not 99.5000, so a shown value never reaches a threshold (99.5 %) that the exact value missed."""
    scaled = math.floor(Fraction(value) * 100 * 10 ** digits)
    sign, scaled = ("-", -scaled) if scaled < 0 else ("", scaled)
    whole, part = divmod(scaled, 10 ** digits)
    return "%s%d.%0*d" % (sign, whole, digits, part) if digits else "%s%d" % (sign, whole)


def _instant(value: str | None, tz) -> int | None:
    """An acceptance date: YYYY-MM-DD means the start of that day in the contract's zone; a full time is exact."""
    return contract_instant(value, tz)


def node_service(contract: Contract, node, service: tuple[int, int] | None) -> tuple[int, int] | None:
    """Rule 1: the review's service time cut to the node's own window; None when they do not meet."""
    if service is None:
        return None
    since, until = contract.service_window(node)
    start = service[0] if since is None else max(service[0], since)
    end = service[1] if until is None else min(service[1], until)
    return (start, end) if end > start else None


def window_text(window: tuple[int | None, int | None]) -> str:
    """A node's service window for people: "from 2026-11-15T00:00:00Z", "until ...", "from ... until ..."."""
    since, until = window
    return " ".join(part for part in ("from %s" % iso_utc(since) if since is not None else "",
                                      "until %s" % iso_utc(until) if until is not None else "") if part)


def gpu_rule(events: list[Event], k: int) -> list[tuple[int, int]]:
    """Where at least k GPUs of one node are down at once (named GPUs counted once each; unnamed by their count)."""
    named: dict[str, list] = {}
    unnamed = []
    for ev in events:
        if ev.gpu is not None:
            named.setdefault(str(ev.gpu), []).append((ev.start, ev.end))
        else:
            unnamed.append((ev.start, ev.end, ev.gpus))
    named_sets = {g: iv.merge(s) for g, s in named.items()}
    points = sorted({p for s in named_sets.values() for pair in s for p in pair}
                    | {p for s, e, _ in unnamed for p in (s, e)})
    out = []
    for a, b in zip(points, points[1:]):
        n_named = sum(1 for s in named_sets.values() if any(x <= a and b <= y for x, y in s))
        n_unnamed = max([c for s, e, c in unnamed if s <= a and b <= e] or [0])
        if max(n_named, n_unnamed) >= k:
            out.append((a, b))
    return iv.merge(out)


def exclusion_verdict(tiers: Tiers, ev: Event) -> tuple[str, str]:
    """("excluded" | "refused", why) for one maintenance record, by the notice terms of sla_tiers.yml: a kind that
    is not an exclusion, a record with no announcement (unless the kind waives it) and one announced with less
    notice than the kind needs are refused, and their time is downtime."""
    terms = tiers.exclusion_terms(ev.kind)
    if terms is None:
        return "refused", "kind %s is not an exclusion in sla_tiers.yml" % ev.kind
    notice, needs_announcement = terms
    if not needs_announcement:
        return "excluded", "%s: needs no announcement" % ev.kind
    if ev.announced_at is None:
        return "refused", "no announcement recorded: %s needs one %s h ahead" % (ev.kind, _hours(notice))
    ahead = ev.start - ev.announced_at
    if ahead < notice:
        return "refused", "announced %s h ahead, %s needs %s h" % (_hours(ahead), ev.kind, _hours(notice))
    return "excluded", "%s, announced %s h ahead (needs %s h)" % (ev.kind, _hours(ahead), _hours(notice))


def excluded_intervals(contract: Contract, tiers: Tiers, events: list[Event]) -> dict[str, list]:
    """node -> the merged intervals of the exclusions honoured for it (before clipping to the service time)."""
    honoured = [ev for ev in events if ev.is_exclusion and exclusion_verdict(tiers, ev)[0] == "excluded"]
    return {n.name: iv.merge((ev.start, ev.end) for ev in honoured if contract.covers(ev, n)) for n in contract.nodes}


def _hours(us: int) -> str:
    return ("%.2f" % (us / 3.6e9)).rstrip("0").rstrip(".")


def unobserved_text(unobserved_us: int) -> str:
    """N h M min, the minutes rounded up (a few seconds of unobserved time never reads as none)."""
    minutes = -(-unobserved_us // (60 * US))
    return "%d h %d min" % divmod(minutes, 60)


def review(contract: Contract, tiers: Tiers, events: list[Event], month: str, now_us: int | None = None,
           unmonitored: dict | None = None, history: dict | None = None, unobserved: dict | None = None) -> Review:
    """Judge one month. `unmonitored`: node -> intervals without health-probe data (reported, never counted);
    `unobserved`: node -> intervals no source observed (rule 8: they bound the verdict; None: not judged);
    `history`: earlier months "YYYY-MM" -> True/False (did the cluster meet the target) or None (undetermined),
    for the consecutive rule."""
    tz = zone(contract.timezone)
    tier = tiers.tier(contract.tier)
    params = tiers.system(contract.system, contract.overrides)
    acc = tiers.accounting
    min_outage = int(Fraction(str(acc.get("min_outage_s", 0))) * US)
    eligible_mode = acc.get("availability_denominator", "calendar") == "eligible"
    notes: list[str] = []

    window = month_window(month, tz)
    agreed = _instant(contract.acceptance_agreed, tz)
    accepted = _instant(contract.accepted_at, tz)
    start, end = window
    # Rule 9: the service time of the whole month, whatever "now" is (the month not over is judged against it).
    month_start = start if accepted is None else max(start, accepted)
    month_service = ((month_start, end) if end > month_start and not (agreed is not None and accepted is None)
                     else None)
    partial = False
    if now_us is not None and now_us < end:
        end, partial = max(start, now_us), True
        notes.append("the month is not over: service time ends at %s" % iso_utc(end))
    if accepted is not None:
        start = max(start, accepted)
    service = (start, end) if end > start and not (agreed is not None and accepted is None) else None
    if agreed is not None and accepted is None:
        notes.append("the cluster is not accepted yet (agreed acceptance %s): no service time is counted"
                     % contract.acceptance_agreed)
    elif service is None:
        notes.append("no service time in %s (accepted %s)" % (month, contract.accepted_at))

    # Rule 1: each node's own service time, the review's cut to the node's window where the contract gives one.
    windows = {n.name: contract.service_window(n) for n in contract.nodes}
    services = {n.name: node_service(contract, n, service) for n in contract.nodes}
    month_services = {n.name: node_service(contract, n, month_service) for n in contract.nodes}
    for n in contract.nodes:
        if windows[n.name] == (None, None) or service is None:
            continue
        if services[n.name] is None:
            notes.append("%s is in service %s: none of it in this month's service time%s, nothing is counted for it"
                         % (n.name, window_text(windows[n.name]), " so far (the month is not over)"
                            if partial and month_services[n.name] is not None else ""))
            continue
        outside = iv.subtract([service], [services[n.name]])
        ignored = [ev.id for ev in events if ev.scope in ("node", "gpu") and ev.target == n.name
                   and iv.intersect([(ev.start, ev.end)], outside)]
        if ignored:
            notes.append("%s is in service %s: %d of its event(s) fall outside that window and were ignored for the "
                         "time outside it (%s)" % (n.name, window_text(windows[n.name]), len(ignored),
                                                   ", ".join(ignored[:10]) + (", ..." if len(ignored) > 10 else "")))

    node_names = {n.name for n in contract.nodes}
    racks: dict[str, list[str]] = {}
    for n in contract.nodes:
        if n.rack:
            racks.setdefault(n.rack, []).append(n.name)
    unknown = sorted({ev.target for ev in events if ev.scope in ("gpu", "node") and ev.target not in node_names})
    if unknown:
        notes.append("events for hosts outside the contract were ignored: %s" % ", ".join(unknown))
    unknown_racks = sorted({ev.target for ev in events if ev.scope == "rack" and ev.target not in racks})
    if unknown_racks:
        notes.append("events for racks no node belongs to were ignored: %s" % ", ".join(unknown_racks))
    # Contract.covers takes a cluster-scope event only for this cluster's name or "*": say so for any other name.
    unknown_clusters = sorted({ev.target for ev in events if ev.scope == "cluster"
                               and ev.target not in (contract.cluster, "*")})
    if unknown_clusters:
        notes.append("cluster-scope events for clusters other than %s (or '*') were ignored: %s"
                     % (contract.cluster, ", ".join(unknown_clusters)))

    # Exclusions: which maintenance records are honoured.
    exclusion_rows, accepted_excl, refused_excl = [], set(), set()
    for ev in events:
        if not ev.is_exclusion:
            continue
        verdict, why = exclusion_verdict(tiers, ev)
        (accepted_excl if verdict == "excluded" else refused_excl).add(ev.id)
        exclusion_rows.append({"event": ev.id, "source": ev.source, "scope": ev.scope, "target": ev.target,
                               "kind": ev.kind, "start": iso_utc(ev.start), "end": iso_utc(ev.end),
                               "verdict": verdict, "why": why, "reason": ev.reason})

    node_down_gpus = params["node_down_gpus"]
    rack_k = params.get("rack_down_nodes")
    results: dict[str, dict] = {}
    excluded = excluded_intervals(contract, tiers, events)
    for node in contract.nodes:
        mine = [ev for ev in events if contract.covers(ev, node)]
        excl = excluded[node.name]
        mine_service = services[node.name]
        # Refused maintenance is downtime at every scope: a GPU's goes through the node rule like a failed GPU.
        own = iv.union(((ev.start, ev.end) for ev in mine if ev.scope != "gpu"
                        and (ev.kind == "down" or ev.id in refused_excl)),
                       gpu_rule([ev for ev in mine if ev.scope == "gpu"
                                 and (ev.kind == "down" or ev.id in refused_excl)], node_down_gpus))
        if mine_service:
            # min_outage_s judges the whole outage, so one that crosses the month's edge (or the node's window) is
            # not cut into blips.
            counted = iv.clip(iv.drop_shorter(iv.subtract(own, excl), min_outage), *mine_service)
            excl_in = iv.clip(excl, *mine_service)
        else:
            counted, excl_in = [], []
        # Rule 8: the unobserved service time outside honoured exclusions (excluded time is never downtime); time
        # outside the node's own window is not its service time, so never unobserved.
        blind = None if unobserved is None else (
            iv.subtract(iv.clip(unobserved.get(node.name, []), *mine_service), excl_in) if mine_service else [])
        worst_own = counted
        if blind and mine_service:
            # Built as `counted` is: the unobserved time joined to the node's own outages before min_outage_s judges
            # each whole outage, then clipped. What lies beyond the edge of the service time is unknown, so an
            # unobserved stretch that reaches an edge may go on past it (as an outage across the edge counts whole).
            beyond = ([(mine_service[0] - min_outage, mine_service[0])] if blind[0][0] == mine_service[0] else []) + (
                [(mine_service[1], mine_service[1] + min_outage)] if blind[-1][1] == mine_service[1] else [])
            worst_own = iv.clip(iv.drop_shorter(iv.union(iv.subtract(own, excl), iv.subtract(beyond, excl), blind),
                                                min_outage), *mine_service)
        results[node.name] = {"node": node, "events": mine, "excl": excl_in, "counted": counted, "blind": blind,
                              "worst_own": worst_own}

    rack_results, rack_down, rack_worst = [], {}, {}
    for rack, members in sorted(racks.items()):
        down = []
        if rack_k is not None and len(members) >= rack_k:
            down = iv.at_least([(results[m]["counted"], 1) for m in members], rack_k)
            rack_worst[rack] = iv.at_least([(results[m]["worst_own"], 1) for m in members], rack_k)
        elif rack_k is not None:
            notes.append("rack %s has %d node(s) in the contract, fewer than the rack rule's %d: the rule cannot "
                         "trigger" % (rack, len(members), rack_k))
        per_rack = params.get("nodes_per_rack")
        # a tray swapped for a spare is two nodes of the contract, never in service at once: count those at once
        at_once = max([len(members)] if service is None else [
            sum(1 for m in members if services[m] and services[m][0] <= t < services[m][1])
            for t in {services[m][0] for m in members if services[m]}] or [0])
        if per_rack and at_once > per_rack:
            notes.append("rack %s lists %d nodes%s, more than nodes_per_rack %d"
                         % (rack, at_once, "" if at_once == len(members) else " in service at once", per_rack))
        rack_down[rack] = down
        rack_results.append(RackResult(name=rack, nodes=sorted(members), rule_nodes=rack_k, nodes_per_rack=per_rack,
                                       down=down, down_us=iv.total(down), capacity_availability=None))

    node_results, downtime_rows = [], []
    for node in contract.nodes:
        r = results[node.name]
        # sla_gpus 0 (a login or CPU host) is 0, not the system's count: it weighs nothing in the GPU-weighted
        # cluster availability and credit (only an unset count means gpus_per_node)
        gpus = params["gpus_per_node"] if node.gpus is None else node.gpus
        mine_service = services[node.name]
        service_us = (mine_service[1] - mine_service[0]) if mine_service else 0
        # Rule 5: the rack rule puts no downtime on a node outside its own service time.
        extra = (iv.clip(iv.subtract(rack_down.get(node.rack, []), r["excl"]), *mine_service)
                 if node.rack and mine_service else [])
        down = iv.union(r["counted"], extra)
        excluded_us = iv.total(r["excl"])
        denominator = service_us - excluded_us if eligible_mode else service_us
        # Rule 8: the worst case, every unobserved minute down (and the rack rule on the nodes' worst cases).
        worst_rack = (iv.clip(iv.subtract(rack_worst.get(node.rack, []), r["excl"]), *mine_service)
                      if node.rack and mine_service else [])
        worst_down = iv.union(r["worst_own"], worst_rack)
        worst, credit_worst, undetermined = None, None, None
        if denominator > 0:
            availability = 1 - Fraction(iv.total(down), denominator)
            credit = tier.credit(availability * 100)
            meets = tier.meets_target(availability * 100)
            if r["blind"] is not None:
                worst = 1 - Fraction(iv.total(worst_down), denominator)
                credit_worst = tier.credit(worst * 100)
                if meets and not tier.meets_target(worst * 100):
                    meets = None
                    undetermined = "%s: availability between %s %% and %s %%" % (
                        _worst_why(node, r, down, worst_down, results, racks, min_outage), pct_text(worst),
                        pct_text(availability))
        else:
            availability, credit, meets = None, Fraction(0), None
        month_us = month_denominator = best = month_worst_down = None
        if partial:
            # Rule 9: the month is not over. Asserted is what the rest of it cannot change: the best case (every
            # remaining minute up) sets the credit owed at least and a certain miss; a certain "met" needs the worst
            # case (the worst so far, every remaining minute down); anything else waits for the month's end.
            mine_month = month_services[node.name]
            month_us = (mine_month[1] - mine_month[0]) if mine_month else 0
            month_denominator = month_us - excluded_us if eligible_mode else month_us
            credit, credit_worst, meets, undetermined = Fraction(0), None, None, None
            if month_denominator > 0:
                best = 1 - Fraction(iv.total(down), month_denominator)
                month_worst_down = min(month_denominator, month_us - service_us + iv.total(
                    worst_down if r["blind"] is not None else down))
                credit = tier.credit(best * 100)
                if not tier.meets_target(best * 100):
                    meets = False
                elif tier.meets_target((1 - Fraction(month_worst_down, month_denominator)) * 100):
                    meets = True
                else:
                    undetermined = "the month is not over: %s, at best %s %% over the whole month" % (
                        _so_far(availability, worst, "availability"), pct_text(best))
        unmon = None if unmonitored is None else (iv.clip(unmonitored.get(node.name, []), *mine_service)
                                                  if mine_service else [])
        node_results.append(NodeResult(
            name=node.name, rack=node.rack, gpus=gpus, service_us=service_us, excluded_us=excluded_us,
            own_down_us=iv.total(r["counted"]), rack_rule_us=iv.total(iv.subtract(extra, r["counted"])),
            down_us=iv.total(down), denominator_us=denominator, availability=availability, credit_pct=credit,
            meets_target=meets, unmonitored_us=None if unmon is None else iv.total(unmon), down=down,
            excluded=r["excl"], unobserved_us=None if r["blind"] is None else iv.total(r["blind"]),
            worst_down_us=None if r["blind"] is None else iv.total(worst_down), worst_availability=worst,
            credit_worst_pct=credit_worst, undetermined=undetermined, service=mine_service,
            window=windows[node.name], month_service_us=month_us, month_denominator_us=month_denominator,
            best_availability=best, month_worst_down_us=month_worst_down))
        for s, e in r["counted"]:
            downtime_rows.append(_row(node, s, e, "node", _evidence(r["events"], s, e, accepted_excl)))
        for s, e in iv.subtract(extra, r["counted"]):
            # the evidence of the trays counted down then (never a tray's events outside its own service time)
            trays = sorted(m for m in racks[node.rack] if iv.intersect(results[m]["counted"], [(s, e)]))
            ev = [eid for m in trays for eid in _evidence(results[m]["events"], s, e, accepted_excl)]
            downtime_rows.append(_row(node, s, e, "rack rule: %d of %s down at once (%s)" % (
                len(trays), node.rack, ", ".join(trays)), ev))

    if unmonitored is not None:
        thin = ["%s %.1f %%" % (n.name, 100 - 100 * n.unmonitored_us / n.service_us) for n in node_results
                if n.service_us and n.unmonitored_us > n.service_us // 10]
        if thin:
            notes.append("health-probe coverage below 90 %% of the service time (%s): downtime outside the sampled "
                         "time is only what the other sources recorded" % ", ".join(thin))
    judged = unobserved is not None
    by_name = {n.name: n for n in node_results}
    for rr in rack_results:
        rr.capacity_availability = _capacity([by_name[m] for m in rr.nodes])
        rr.capacity_worst_availability = _capacity([by_name[m] for m in rr.nodes], worst=True) if judged else None
    cluster = _capacity(node_results)
    cluster_worst = _capacity(node_results, worst=True) if judged else None
    # Rule 6: each node's credit weighs by its GPUs times its own service time (its share of the monthly fee).
    weight = sum(n.gpus * n.service_us for n in node_results if n.availability is not None)
    cluster_credit = (Fraction(sum(n.credit_pct * n.gpus * n.service_us for n in node_results
                                   if n.availability is not None)) / weight if weight else Fraction(0))
    cluster_credit_worst = (Fraction(sum(n.credit_worst_pct * n.gpus * n.service_us for n in node_results
                                         if n.availability is not None)) / weight
                            if weight else Fraction(0)) if judged and not partial else None
    # The cluster's verdict by rule 8: its counted figure below the target is a miss; at or above it, met only
    # when its worst case is too.
    cluster_met, cluster_undetermined = None, None
    if cluster is not None:
        cluster_met = cluster * 100 >= tier.target
        if cluster_met and cluster_worst is not None and cluster_worst * 100 < tier.target:
            cluster_met = None
            cluster_undetermined = ("%d of %d node(s) have time no source observed: cluster availability between "
                                    "%s %% and %s %%" % (sum(1 for n in node_results if n.unobserved_us),
                                                         len(node_results), pct_text(cluster_worst),
                                                         pct_text(cluster)))
    cluster_best = None
    if partial:
        # Rule 9: the cluster over the whole month, judged as each node is: a miss only when the best case misses,
        # met only when the worst case meets; the credit (each node's best-case credit, weighed by GPUs times its
        # service time over the whole month) is owed at least; no upper bound yet.
        in_month = [n for n in node_results if n.month_denominator_us]
        month_denom = sum(n.month_denominator_us * n.gpus for n in in_month)
        month_weight = sum(n.month_service_us * n.gpus for n in in_month)
        cluster_credit = (Fraction(sum(n.credit_pct * n.gpus * n.month_service_us for n in in_month)) / month_weight
                          if month_weight else Fraction(0))
        cluster_credit_worst, cluster_met, cluster_undetermined = None, None, None
        if month_denom:
            cluster_best = 1 - Fraction(sum(n.down_us * n.gpus for n in in_month), month_denom)
            month_worst = 1 - Fraction(sum(n.month_worst_down_us * n.gpus for n in in_month), month_denom)
            if cluster_best * 100 < tier.target:
                cluster_met = False
            elif month_worst * 100 >= tier.target:
                cluster_met = True
            else:
                cluster_undetermined = "the month is not over: %s, at best %s %% over the whole month" % (
                    _so_far(cluster, cluster_worst, "cluster availability"), pct_text(cluster_best))

    breaches = [{"node": n.name, "availability_pct": n.availability_pct, "target_pct": float(tier.target),
                 "credit_pct": float(n.credit_pct), "down_s": n.down_us / US,
                 "credit_worst_pct": None if n.credit_worst_pct is None else float(n.credit_worst_pct),
                 "best_case_availability_pct": n.best_availability_pct}
                for n in node_results if n.meets_target is False]
    triggers, open_triggers = [], []
    if partial:
        # Rule 9: the threshold is the month's: crossed for certain when the best case is below it; below it only so
        # far (counted, or at the worst case of rule 8), provisional.
        low = tier.termination_below
        so_far = min(x for x in (cluster, cluster_worst, Fraction(1)) if x is not None)
        if cluster_best is not None and low is not None and cluster_best * 100 < low:
            triggers.append({"trigger": "availability", "detail": "cluster availability at best %s %% over the whole "
                             "month (%s: the month is not over) is below the %s termination threshold %s %%"
                             % (pct_text(cluster_best), _so_far(cluster, cluster_worst, ""), tier.name, _fmt(low))})
        elif cluster is not None and low is not None and so_far * 100 < low:
            open_triggers.append({"trigger": "availability", "detail": "%s is below the %s termination threshold "
                                  "%s %%, but the month is not over: at best %s %% over the whole month (provisional)"
                                  % (_so_far(cluster, cluster_worst, "cluster availability"), tier.name, _fmt(low),
                                     pct_text(cluster_best))})
    elif cluster is not None and tier.termination_below is not None and cluster * 100 < tier.termination_below:
        triggers.append({"trigger": "availability", "detail": "cluster availability %s %% is below the %s "
                         "termination threshold %s %%" % (pct_text(cluster), tier.name,
                                                          _fmt(tier.termination_below))})
    elif (cluster_worst is not None and tier.termination_below is not None
          and cluster_worst * 100 < tier.termination_below):
        open_triggers.append({"trigger": "availability", "detail": "cluster availability between %s %% and %s %% "
                              "(time no source observed): the %s termination threshold %s %% may have been crossed"
                              % (pct_text(cluster_worst), pct_text(cluster), tier.name,
                                 _fmt(tier.termination_below))})
    if cluster is not None and tier.termination_consecutive:
        # this month and the earlier ones: True missed, False met, None undetermined (missed in the worst case)
        missed = [None if cluster_met is None else not cluster_met]
        months = sorted(((m, met) for m, met in (history or {}).items() if m < month), reverse=True)
        expected = month
        for m, met in months:
            if m != add_months(expected, -1):
                break
            missed.append(None if met is None else not met)
            expected = m

        def run_of(flags):
            run = 0
            for flag in flags:
                if not flag:
                    break
                run += 1
            return run

        run = run_of(missed)  # undetermined months counted as met
        worst_run = run_of([flag is not False for flag in missed])  # and as missed
        if run >= tier.termination_consecutive:
            triggers.append({"trigger": "consecutive", "detail": "the %s target %s %% was missed %d months in a row"
                             " (termination after %d)" % (tier.name, _fmt(tier.target), run,
                                                         tier.termination_consecutive)})
        elif worst_run >= tier.termination_consecutive:
            open_triggers.append({"trigger": "consecutive", "detail": "the %s target %s %% may have been missed %d "
                                  "months in a row (termination after %d): %d of them undetermined%s"
                                  % (tier.name, _fmt(tier.target), worst_run, tier.termination_consecutive,
                                     sum(1 for flag in missed[:worst_run] if flag is None),
                                     " (this month is not over: provisional)" if partial and missed[0] is None
                                     else "")})
    acceptance = _acceptance(contract, tiers, agreed, accepted, window, tz)
    if acceptance.get("trigger"):
        triggers.append({"trigger": "acceptance", "detail": acceptance["trigger"]})

    return Review(month=month, contract=contract, tier_name=tier.name, target_pct=tier.target, window=window,
                  service=service, partial=partial, params={**params, **{k: acc.get(k) for k in acc}},
                  nodes=node_results, racks=rack_results, cluster_availability=cluster,
                  cluster_credit_pct=cluster_credit, downtime=sorted(downtime_rows, key=lambda r: (r["start_us"],
                                                                                                  r["node"])),
                  exclusions=exclusion_rows, breaches=breaches, triggers=triggers, acceptance=acceptance,
                  notes=notes, events=events, cluster_worst_availability=cluster_worst,
                  cluster_credit_worst_pct=cluster_credit_worst, cluster_met_target=cluster_met,
                  cluster_undetermined=cluster_undetermined, undetermined_triggers=open_triggers,
                  cluster_best_availability=cluster_best)


def _so_far(counted, worst, what: str) -> str:
    """A month not over (rule 9): its figure so far for people, "availability so far 98.6111 %", "... so far
    between 0.0000 % and 98.6111 %" where time no source observed leaves a worst case (rule 8)."""
    what = (what + " so far") if what else "so far"
    if counted is None:
        return "no service time so far"
    if worst is not None and worst != counted:
        return "%s between %s %% and %s %%" % (what, pct_text(worst), pct_text(counted))
    return "%s %s %%" % (what, pct_text(counted))


def _worst_why(node, r: dict, down: list, worst_down: list, results: dict, racks: dict, min_outage: int) -> str:
    """What the worst case adds to a node's counted downtime, its own unobserved time apart from the rack rule's
    (rule 8): "6 h 0 min unobserved (no source saw the node)", "none of its own time unobserved; 2 h 0 min down by
    the rack rule in the worst case (t00, t01, t02 of r1 down or unobserved at once)"."""
    own = iv.subtract(r["worst_own"], down)  # the node's own worst case beyond what is counted
    blind = iv.total(iv.subtract(r["blind"] or [], down))
    rack = iv.subtract(worst_down, iv.union(r["worst_own"], down))  # the rack rule on the other nodes' worst case
    parts = []
    if blind:
        parts.append("%s unobserved (no source saw the node)" % unobserved_text(blind))
        if iv.total(own) != blind:
            parts[-1] += ", %s down in its own worst case (min_outage_s %s s judged on each whole outage)" % (
                unobserved_text(iv.total(own)), _fmt(Fraction(min_outage, US)))
    else:
        parts.append("none of its own time unobserved")
    if rack:
        trays = sorted(m for m in racks.get(node.rack, []) if m != node.name
                       and iv.intersect(results[m]["worst_own"], rack))
        parts.append("%s down by the rack rule in the worst case (%s of %s down or unobserved at once)"
                     % (unobserved_text(iv.total(rack)), ", ".join(trays), node.rack))
    return "; ".join(parts)


def _capacity(nodes: list[NodeResult], worst: bool = False) -> Fraction | None:
    """GPU-weighted availability of a set of nodes (a rack, the cluster); worst: with their worst-case downtime.
    Each node weighs by its GPUs times its own denominator (rule 6): a node in service for part of the month only
    for that part."""
    denom = sum(n.denominator_us * n.gpus for n in nodes if n.availability is not None)
    if not denom:
        return None
    return 1 - Fraction(sum((n.worst_down_us if worst and n.worst_down_us is not None else n.down_us) * n.gpus
                            for n in nodes if n.availability is not None), denom)


def _evidence(events: list[Event], s: int, e: int, accepted_excl: set) -> list[str]:
    return [ev.id for ev in events if ev.id not in accepted_excl and iv.overlaps((ev.start, ev.end), (s, e))]


def _row(node, s, e, cause, evidence) -> dict:
    return {"node": node.name, "rack": node.rack or "", "start_us": s, "end_us": e, "start": iso_utc(s),
            "end": iso_utc(e), "duration_s": (e - s) / US, "cause": cause, "evidence": evidence}


def _fmt(value: Fraction) -> str:
    return ("%f" % float(value)).rstrip("0").rstrip(".")


def _acceptance(contract, tiers, agreed, accepted, window, tz) -> dict:
    days = tiers.acceptance.get("termination_after_days")
    out = {"agreed": contract.acceptance_agreed, "accepted_at": contract.accepted_at,
           "termination_after_days": days, "status": "not tracked", "trigger": None}
    if agreed is None:
        if accepted is not None:
            out["status"] = "accepted %s (no agreed date recorded)" % iso_utc(accepted)
        return out
    # Contract days are calendar days in the contract's zone: the agreed date's local time of day (the start of the
    # day for a date), N local dates later, whatever a DST change in between does to the hours (never N x 24 h).
    deadline = add_days(agreed, int(days or 0), tz) if days is not None else None
    if accepted is not None:
        late = accepted - agreed
        out["status"] = ("accepted on time" if late <= 0 else "accepted %.1f days late" % (late / DAY_US))
        if deadline is not None and accepted > deadline and window[0] <= deadline < window[1]:
            out["trigger"] = ("acceptance %s came after the agreed date %s plus %s days: the buyer may terminate"
                              % (contract.accepted_at, contract.acceptance_agreed, days))
    else:
        out["status"] = "not accepted (agreed %s)" % contract.acceptance_agreed
        if deadline is not None and deadline < window[1]:
            out["trigger"] = ("not accepted %s days after the agreed date %s: the buyer may terminate"
                              % (days, contract.acceptance_agreed))
    return out


__all__ = ["review", "pct_text", "unobserved_text", "gpu_rule", "exclusion_verdict", "excluded_intervals", "Review",
           "NodeResult", "RackResult", "TimeError", "node_service", "window_text"]
