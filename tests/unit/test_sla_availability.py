"""reports/sla/availability.py on hand-computed months (November 2026: 30 days = 2,592,000 s in UTC)."""

from fractions import Fraction

import pytest

from reports.sla.availability import gpu_rule, pct_text, review
from reports.sla.events import Contract, Event, EventError
from reports.sla.render import render_markdown, table_rows
from reports.sla.sources import imports
from reports.sla.tiers import TierError, Tiers
from reports.sla.timeutil import US, parse_time

MONTH_S = 30 * 86400
TIERS = Tiers.load()


def T(text):
    return parse_time(text)


def ev(ident, target, start, end, kind="down", scope="node", **kw):
    return Event(id=ident, source=kw.pop("source", "test"), scope=scope, target=target, kind=kind, start=T(start),
                 end=T(end), **kw)


def contract(nodes, tier="gold", system="hgx", **kw):
    return Contract.from_dict({"provider": "p", "tier": tier, "system": system, "nodes": nodes, **kw})


def node(result, name):
    return next(n for n in result.nodes if n.name == name)


def test_overlapping_events_of_two_sources_count_once():
    c = contract(["n1", "n2"])
    events = [ev("probe:1", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", source="healthprobe"),
              ev("csv:1", "n1", "2026-11-10T10:30:00Z", "2026-11-10T12:00:00Z", source="import")]
    r = review(c, TIERS, events, "2026-11")
    n1 = node(r, "n1")
    assert n1.service_us == MONTH_S * US
    assert n1.down_us == 7200 * US  # 10:00-12:00, not 1 h + 1.5 h
    assert n1.availability == Fraction(359, 360)
    assert n1.credit_pct == 10 and n1.meets_target is False
    assert node(r, "n2").down_us == 0 and node(r, "n2").availability == 1
    # two nodes of 8 GPUs: the cluster lost 2 h of one node in a month of two
    assert r.cluster_availability == 1 - Fraction(7200, 2 * MONTH_S)
    assert r.cluster_credit_pct == 5  # 10 % on half the GPUs
    [row] = r.downtime
    assert row["node"] == "n1" and row["duration_s"] == 7200 and sorted(row["evidence"]) == ["csv:1", "probe:1"]
    assert [b["node"] for b in r.breaches] == ["n1"]


def test_month_boundaries_clip_events_utc():
    c = contract(["n1"])
    events = [ev("e", "n1", "2026-10-31T23:00:00Z", "2026-11-01T01:00:00Z")]
    assert node(review(c, TIERS, events, "2026-11"), "n1").down_us == 3600 * US
    october = review(c, TIERS, events, "2026-10")
    assert node(october, "n1").down_us == 3600 * US and node(october, "n1").service_us == 31 * 86400 * US


def test_month_in_a_time_zone_with_a_dst_change():
    # New York: November 2026 starts 2026-11-01T00:00-04:00 (04:00Z) and ends 2026-12-01T00:00-05:00 (05:00Z):
    # DST ends on Sunday 1 November, so this month has 30 days and 1 hour.
    c = contract(["n1"], timezone="America/New_York")
    events = [ev("e", "n1", "2026-11-01T03:00:00Z", "2026-11-01T05:00:00Z")]
    r = review(c, TIERS, events, "2026-11")
    assert r.window == (T("2026-11-01T04:00:00Z"), T("2026-12-01T05:00:00Z"))
    assert node(r, "n1").service_us == (MONTH_S + 3600) * US
    assert node(r, "n1").down_us == 3600 * US  # 03:00Z-04:00Z belongs to October there


def test_maintenance_exclusions_are_clipped_and_need_their_notice():
    c = contract([{"name": "n1", "rack": "r1"}, {"name": "n2", "rack": "r1"}, {"name": "n3", "rack": "r2"}])
    ahead = "2026-11-01T00:00:00Z"
    events = [
        ev("down", "n1", "2026-11-10T10:00:00Z", "2026-11-10T14:00:00Z"),
        # announced 9 days ahead: excluded, and cut out of the outage
        ev("phys", "n1", "2026-11-10T11:00:00Z", "2026-11-10T12:00:00Z", kind="physical_maintenance",
           announced_at=T(ahead)),
        # announced 1 h ahead, needs 72 h: refused, so it is downtime (inside the outage: adds nothing)
        ev("upg1", "n1", "2026-11-10T12:30:00Z", "2026-11-10T13:00:00Z", kind="software_upgrade",
           announced_at=T("2026-11-10T11:30:00Z")),
        # refused again, outside the outage: 30 min of downtime of its own
        ev("upg2", "n1", "2026-11-10T20:00:00Z", "2026-11-10T20:30:00Z", kind="software_upgrade",
           announced_at=T("2026-11-10T19:00:00Z")),
        # rack-wide physical maintenance announced in time: excluded for n1 and n2, not n3
        ev("rack", "r1", "2026-11-20T00:00:00Z", "2026-11-20T02:00:00Z", kind="physical_maintenance", scope="rack",
           announced_at=T(ahead)),
        # no announcement recorded: refused, so it is downtime (1 h of n3's)
        ev("quiet", "n3", "2026-11-22T00:00:00Z", "2026-11-22T01:00:00Z", kind="physical_maintenance"),
        ev("n2down", "n2", "2026-11-20T01:00:00Z", "2026-11-20T03:00:00Z"),
        # security patches need no notice; cluster scope covers every node
        ev("patch", "*", "2026-11-25T00:00:00Z", "2026-11-25T00:10:00Z", kind="security_patch", scope="cluster",
           announced_at=T("2026-11-24T23:59:00Z")),
    ]
    r = review(c, TIERS, events, "2026-11")
    assert node(r, "n1").down_us == (3 * 3600 + 1800) * US
    assert node(r, "n1").excluded_us == (3600 + 7200 + 600) * US
    assert node(r, "n2").down_us == 3600 * US  # 01:00-02:00 was the rack's maintenance
    assert node(r, "n2").excluded_us == (7200 + 600) * US
    assert node(r, "n3").down_us == 3600 * US and node(r, "n3").excluded_us == 600 * US
    verdicts = {row["event"]: (row["verdict"], row["why"]) for row in r.exclusions}
    assert verdicts == {
        "phys": ("excluded", "physical_maintenance, announced 227 h ahead (needs 72 h)"),
        "upg1": ("refused", "announced 1 h ahead, software_upgrade needs 72 h"),
        "upg2": ("refused", "announced 1 h ahead, software_upgrade needs 72 h"),
        "rack": ("excluded", "physical_maintenance, announced 456 h ahead (needs 72 h)"),
        "quiet": ("refused", "no announcement recorded: physical_maintenance needs one 72 h ahead"),
        "patch": ("excluded", "security_patch, announced 0.02 h ahead (needs 0 h)")}
    # calendar denominator: excluded time stays in the month
    assert node(r, "n1").availability == 1 - Fraction(3 * 3600 + 1800, MONTH_S)


def test_an_exclusion_needs_its_announcement_unless_its_kind_waives_it():
    c = contract(["n1"])
    events = [
        # an emergency patch needs no notice, but it needs an announcement, at the latest when it starts
        ev("late", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", kind="security_patch",
           announced_at=T("2026-11-10T10:30:00Z")),
        ev("unannounced", "n1", "2026-11-11T10:00:00Z", "2026-11-11T11:00:00Z", kind="security_patch"),
        # the assessment's own test: the buyer's side caused it, nothing for the provider to announce
        ev("test", "n1", "2026-11-12T10:00:00Z", "2026-11-12T10:10:00Z", kind="assessment"),
        ev("down", "n1", "2026-11-12T10:00:00Z", "2026-11-12T10:15:00Z"),
    ]
    r = review(c, TIERS, events, "2026-11")
    assert {row["event"]: (row["verdict"], row["why"]) for row in r.exclusions} == {
        "late": ("refused", "announced -0.5 h ahead, security_patch needs 0 h"),
        "unannounced": ("refused", "no announcement recorded: security_patch needs one 0 h ahead"),
        "test": ("excluded", "assessment: needs no announcement")}
    assert node(r, "n1").down_us == (3600 + 3600 + 300) * US and node(r, "n1").excluded_us == 600 * US
    doc = dict(TIERS.doc, exclusions={"assessment": {"notice_h": 0, "needs_announcement": "no"}})
    with pytest.raises(TierError, match="needs_announcement must be true or false"):
        Tiers(doc)


def test_eligible_denominator_removes_excluded_time():
    doc = dict(TIERS.doc)
    doc["accounting"] = {**TIERS.accounting, "availability_denominator": "eligible"}
    tiers = Tiers(doc)
    c = contract(["n1"])
    events = [ev("m", "n1", "2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z", kind="security_patch",
                 announced_at=T("2026-11-01T00:00:00Z")),
              ev("d", "n1", "2026-11-05T00:00:00Z", "2026-11-05T00:43:12Z")]  # 2592 s: 99.9 % of the calendar
    assert node(review(c, TIERS, events, "2026-11"), "n1").credit_pct == 0
    n1 = node(review(c, tiers, events, "2026-11"), "n1")
    assert n1.availability == 1 - Fraction(2592, MONTH_S - 86400)
    assert n1.credit_pct == 10


def nvl72(trays=18):
    return [{"name": "t%02d" % i, "rack": "r1"} for i in range(trays)]


STAGGERED = [("t00", "10:00", "11:00"), ("t01", "10:20", "11:20"), ("t02", "10:40", "12:00"), ("t03", "10:50", "11:10")]


def staggered(n):
    return [ev("e%d" % i, t, "2026-11-10T%s:00Z" % a, "2026-11-10T%s:00Z" % b) for i, (t, a, b) in
            enumerate(STAGGERED[:n])]


def test_nvl72_two_trays_down_is_not_a_rack_outage():
    r = review(contract(nvl72(), system="nvl72"), TIERS, staggered(2), "2026-11")
    assert r.racks[0].down_us == 0
    assert node(r, "t00").down_us == 3600 * US and node(r, "t01").down_us == 3600 * US
    assert all(node(r, "t%02d" % i).down_us == 0 for i in range(2, 18))


def test_nvl72_three_trays_down_at_once_take_the_rack_down():
    r = review(contract(nvl72(), system="nvl72"), TIERS, staggered(3), "2026-11")
    # all three down together 10:40-11:00
    assert r.racks[0].down == [(T("2026-11-10T10:40:00Z"), T("2026-11-10T11:00:00Z"))]
    t05 = node(r, "t05")
    assert t05.down_us == 1200 * US and t05.own_down_us == 0 and t05.rack_rule_us == 1200 * US
    t02 = node(r, "t02")
    assert t02.down_us == 80 * 60 * US and t02.rack_rule_us == 0  # its own outage already covers the rack's
    rows = [row for row in r.downtime if row["node"] == "t05"]
    assert len(rows) == 1 and rows[0]["cause"].startswith("rack rule: 3 of r1 down at once (t00, t01, t02)")
    assert sorted(rows[0]["evidence"]) == ["e0", "e1", "e2"]
    # 15 trays lost 20 min, three trays lost 60, 60 and 80 min (4 GPUs each): GPU-weighted over the rack
    lost = 15 * 1200 + 3600 + 3600 + 4800
    assert r.racks[0].capacity_availability == 1 - Fraction(lost, 18 * MONTH_S)


def test_nvl72_four_trays_and_the_threshold_as_a_parameter():
    r = review(contract(nvl72(), system="nvl72"), TIERS, staggered(4), "2026-11")
    assert r.racks[0].down == [(T("2026-11-10T10:40:00Z"), T("2026-11-10T11:10:00Z"))]  # >= 3 of 4 from 10:40 to 11:10
    assert node(r, "t09").down_us == 1800 * US
    r4 = review(contract(nvl72(), system="nvl72", overrides={"rack_down_nodes": 4}), TIERS, staggered(4), "2026-11")
    assert r4.racks[0].down == [(T("2026-11-10T10:50:00Z"), T("2026-11-10T11:00:00Z"))]
    assert node(r4, "t09").down_us == 600 * US


def test_nvl72_tray_in_excluded_maintenance_does_not_count_toward_the_rule():
    events = staggered(3) + [ev("m", "t02", "2026-11-10T10:30:00Z", "2026-11-10T12:00:00Z",
                                kind="physical_maintenance", announced_at=T("2026-11-01T00:00:00Z"))]
    r = review(contract(nvl72(), system="nvl72"), TIERS, events, "2026-11")
    assert r.racks[0].down_us == 0
    assert node(r, "t02").down_us == 0  # its outage (10:40-12:00) lies inside its maintenance (10:30-12:00)
    assert node(r, "t02").excluded_us == 5400 * US and node(r, "t05").down_us == 0


def test_hgx_has_no_rack_rule():
    c = contract([{"name": "h%d" % i, "rack": "r1"} for i in range(4)])
    r = review(c, TIERS, [ev("e%d" % i, "h%d" % i, "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z") for i in range(3)],
               "2026-11")
    assert node(r, "h3").down_us == 0 and r.racks[0].down_us == 0


def test_hgx_node_rule_one_gpu_takes_the_node_down():
    events = [ev("g3", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", scope="gpu", gpu="3")]
    assert node(review(contract(["n1"]), TIERS, events, "2026-11"), "n1").down_us == 3600 * US


def test_hgx_node_rule_with_two_gpus_and_no_double_counting():
    c = contract(["n1"], overrides={"node_down_gpus": 2})
    events = [ev("g3", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", scope="gpu", gpu="3"),
              ev("g5", "n1", "2026-11-10T10:30:00Z", "2026-11-10T12:00:00Z", scope="gpu", gpu="5"),
              # another source reports "1 GPU missing" for the same failure as g3: still one GPU
              ev("probe", "n1", "2026-11-10T10:00:00Z", "2026-11-10T10:20:00Z", scope="gpu", gpus=1),
              # an unnamed record of two GPUs down
              ev("two", "n1", "2026-11-10T13:00:00Z", "2026-11-10T13:10:00Z", scope="gpu", gpus=2)]
    n1 = node(review(c, TIERS, events, "2026-11"), "n1")
    assert n1.down_us == (1800 + 600) * US


def test_gpu_rule_named_gpu_reported_twice_counts_once():
    events = [ev("a", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", scope="gpu", gpu="0"),
              ev("b", "n1", "2026-11-10T10:30:00Z", "2026-11-10T11:30:00Z", scope="gpu", gpu="0")]
    assert gpu_rule(events, 2) == []
    assert gpu_rule(events, 1) == [(T("2026-11-10T10:00:00Z"), T("2026-11-10T11:30:00Z"))]


@pytest.mark.parametrize("down_us, credit", [
    (2592 * US, 0),  # exactly 99.9 %: meets gold
    (2592 * US + 1, 10),  # one microsecond more
    (25920 * US, 10),  # exactly 99.0 %: still the first step
    (25920 * US + 1, 30),
    (129600 * US, 30),  # exactly 95 %
    (129600 * US + 1, 100),
])
def test_gold_credit_boundaries_are_exact(down_us, credit):
    start = T("2026-11-10T00:00:00Z")
    c = contract(["n1"])
    e = Event(id="e", source="t", scope="node", target="n1", kind="down", start=start, end=start + down_us)
    n1 = node(review(c, TIERS, [e], "2026-11"), "n1")
    assert n1.credit_pct == credit
    assert n1.meets_target is (down_us <= 2592 * US)


def test_tier_ladders_from_the_yaml():
    assert [float(TIERS.tier(t).target) for t in ("bronze", "silver", "gold")] == [99.0, 99.5, 99.9]
    silver = TIERS.tier("silver")
    assert silver.credit(Fraction(995, 10)) == 0 and silver.credit(Fraction(9949, 100)) == 10
    assert silver.credit(Fraction(9899, 100)) == 25 and silver.credit(Fraction(9499, 100)) == 100
    bronze = TIERS.tier("bronze")
    assert bronze.credit(Fraction(50)) == 25  # the DGX Cloud ladder stops at 25 %
    with pytest.raises(TierError):
        TIERS.tier("platinum")
    with pytest.raises(TierError):
        TIERS.system("nvl72", {"rack_down_nodes": 0})
    with pytest.raises(TierError):
        TIERS.system("hgx", {"node_down_gpus": 9})


def test_acceptance_starts_the_service_time_and_a_missed_date_is_a_trigger():
    c = contract(["n1"], acceptance_agreed="2026-10-01", accepted_at="2026-11-16")
    e = ev("e", "n1", "2026-11-20T00:00:00Z", "2026-11-20T00:21:36Z")  # 1296 s = 0.1 % of 15 days
    r = review(c, TIERS, [e], "2026-11")
    assert r.service == (T("2026-11-16T00:00:00Z"), T("2026-12-01T00:00:00Z"))
    assert node(r, "n1").availability == Fraction(999, 1000) and node(r, "n1").credit_pct == 0
    assert "46.0 days late" in r.acceptance["status"]
    assert not [t for t in r.triggers if t["trigger"] == "acceptance"]  # the deadline (31 Oct) fell in October
    october = review(c, TIERS, [e], "2026-10")
    assert october.service is None and node(october, "n1").availability is None
    assert [t["trigger"] for t in october.triggers] == ["acceptance"]


def test_not_accepted_after_the_deadline():
    c = contract(["n1"], acceptance_agreed="2026-10-01")
    r = review(c, TIERS, [], "2026-11")
    assert r.service is None and r.cluster_availability is None
    assert [t["trigger"] for t in r.triggers] == ["acceptance"]
    assert review(contract(["n1"], acceptance_agreed="2026-11-20"), TIERS, [], "2026-11").triggers == []


def test_the_acceptance_deadline_counts_calendar_days_across_the_autumn_dst_change():
    """America/Chicago: agreed 15 October (CDT, -5), 30 days later is 14 November (CST, -6): 30 days and 1 hour
    of elapsed time. Accepted on 14 November is within the deadline (was late by the DST hour: a trigger)."""
    c = contract(["n1"], timezone="America/Chicago", acceptance_agreed="2026-10-15", accepted_at="2026-11-14")
    r = review(c, TIERS, [], "2026-11")
    assert r.acceptance["trigger"] is None and r.triggers == []
    assert review(contract(["n1"], timezone="UTC", acceptance_agreed="2026-10-15", accepted_at="2026-11-14"),
                  TIERS, [], "2026-11").triggers == []
    # a second after the start of 14 November, local time, is late
    late = contract(["n1"], timezone="America/Chicago", acceptance_agreed="2026-10-15",
                    accepted_at="2026-11-14T00:00:01")
    assert [t["trigger"] for t in review(late, TIERS, [], "2026-11").triggers] == ["acceptance"]


def test_the_acceptance_deadline_counts_calendar_days_across_the_spring_dst_change():
    """America/Chicago: agreed 10 February (CST, -6), 30 days later is 12 March (CDT, -5): 30 days less 1 hour of
    elapsed time. Accepted at 00:30 local on 12 March is 30 min late (was on time: 30 x 24 h ran to 01:00 local)."""
    c = contract(["n1"], timezone="America/Chicago", acceptance_agreed="2026-02-10",
                 accepted_at="2026-03-12T00:30:00")
    r = review(c, TIERS, [], "2026-03")
    assert [t["trigger"] for t in r.triggers] == ["acceptance"]
    assert "plus 30 days: the buyer may terminate" in r.acceptance["trigger"]
    on_time = contract(["n1"], timezone="America/Chicago", acceptance_agreed="2026-02-10", accepted_at="2026-03-12")
    assert review(on_time, TIERS, [], "2026-03").triggers == []
    # not accepted at all: the deadline (12 March, local) falls in March, not in February
    never = contract(["n1"], timezone="America/Chicago", acceptance_agreed="2026-02-10")
    assert [t["trigger"] for t in review(never, TIERS, [], "2026-03").triggers] == ["acceptance"]
    assert review(never, TIERS, [], "2026-02").triggers == []


def test_termination_triggers_threshold_and_consecutive_months():
    c = contract(["n1"])
    low = [ev("e", "n1", "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")]  # 2 days: 93.3 %
    assert [t["trigger"] for t in review(c, TIERS, low, "2026-11").triggers] == ["availability"]
    missed = [ev("e", "n1", "2026-11-01T00:00:00Z", "2026-11-01T01:00:00Z")]  # 99.86 %: below gold's target
    assert review(c, TIERS, missed, "2026-11").triggers == []
    assert [t["trigger"] for t in review(c, TIERS, missed, "2026-11", history={"2026-10": False}).triggers] == [
        "consecutive"]
    assert review(c, TIERS, missed, "2026-11", history={"2026-10": True}).triggers == []
    assert review(c, TIERS, missed, "2026-11", history={"2026-09": False}).triggers == []  # not consecutive


def test_partial_month_stops_at_now_and_unknown_hosts_are_noted():
    c = contract(["n1"])
    events = [ev("e", "n1", "2026-11-14T23:00:00Z", "2026-11-15T02:00:00Z"),
              ev("x", "ghost", "2026-11-02T00:00:00Z", "2026-11-02T01:00:00Z")]
    r = review(c, TIERS, events, "2026-11", now_us=T("2026-11-15T00:00:00Z"))
    assert r.partial and node(r, "n1").service_us == 14 * 86400 * US and node(r, "n1").down_us == 3600 * US
    assert any("ghost" in note for note in r.notes)


# ------------------------------------------------------------------------------------- a month that is not over
# A review of the running month (now before the month's end) has the availability so far, but the rules are
# monthly: what it asserts must hold whatever the rest of the month brings. The best case is the downtime so far
# over the whole month's service time (every remaining minute up): a credit is at least the best case's, a missed
# target or a termination trigger is asserted only when the best case already misses or triggers it, and otherwise
# the month's verdict is provisional (undetermined, as rule 8's: neither met nor missed, in the consecutive rule
# too).
ONE_DAY = "2026-11-02T00:00:00Z"


def test_a_running_month_asserts_what_even_its_best_case_misses():
    """The reviewer's case: gold, n1 and n2, n1 down 10:00-13:00 on 1 November, reviewed at midnight on the 2nd
    with October missed. So far (1 day): n1 87.5 %, the cluster 93.75 %; at best over the month (3 h of 720 h):
    n1 99.5833 %, the cluster 99.7916 %: below 99.9 % (certain), not below 95 % (provisional)."""
    c = contract(["n1", "n2"])
    events = [ev("healthprobe:n1:1-36", "n1", "2026-11-01T10:00:00Z", "2026-11-01T13:00:00Z", source="healthprobe")]
    r = review(c, TIERS, events, "2026-11", now_us=T(ONE_DAY), history={"2026-10": False})
    n1 = node(r, "n1")
    # was credit 100 % (87.5 % over the day so far), a cluster credit of 50 % and an availability trigger
    assert (n1.credit_pct, r.cluster_credit_pct) == (10, 5)
    assert [t["trigger"] for t in r.triggers] == ["consecutive"]  # October missed, November missed whatever comes
    assert [t["trigger"] for t in r.undetermined_triggers] == ["availability"]  # only the figure so far is below 95 %
    assert "the month is not over" in r.undetermined_triggers[0]["detail"]
    # the availability so far is kept (the month is partial); the best case beside it
    assert r.partial and n1.availability == Fraction(7, 8) and r.cluster_availability == 1 - Fraction(3, 48)
    assert n1.best_availability == 1 - Fraction(3, 720) and r.cluster_best_availability == 1 - Fraction(3, 1440)
    assert n1.meets_target is False and [b["node"] for b in r.breaches] == ["n1"] and r.cluster_met_target is False
    assert n1.credit_worst_pct is None  # at least 10 %: the rest of the month may add to it
    assert node(r, "n2").meets_target is None and node(r, "n2").undetermined.startswith("the month is not over")
    assert any("the month is not over" in note for note in r.notes)  # the partial note stays
    # the same events over the whole month, as before
    full = review(c, TIERS, events, "2026-11", history={"2026-10": False})
    assert not full.partial and node(full, "n1").best_availability is None
    assert (node(full, "n1").credit_pct, full.cluster_credit_pct) == (10, 5)
    assert [t["trigger"] for t in full.triggers] == ["consecutive"] and full.undetermined_triggers == []
    assert full.cluster_met_target is False and node(full, "n2").meets_target is True


def test_a_running_month_whose_best_case_is_below_the_termination_threshold_triggers():
    """n1 down the first 2 days, reviewed at midnight on the 3rd: 0 % so far, 93.3333 % at best (48 h of 720 h),
    below gold's 95 %: the trigger holds whatever the rest of the month brings, and the credit is at least 100 %."""
    c = contract(["n1"])
    events = [ev("e", "n1", "2026-11-01T00:00:00Z", "2026-11-03T00:00:00Z")]
    r = review(c, TIERS, events, "2026-11", now_us=T("2026-11-03T00:00:00Z"))
    assert [t["trigger"] for t in r.triggers] == ["availability"] and r.undetermined_triggers == []
    assert "93.3333 %" in r.triggers[0]["detail"]  # the best case, not the 0.0000 % so far
    assert node(r, "n1").credit_pct == 100 and r.cluster_met_target is False
    assert node(r, "n1").best_availability == 1 - Fraction(48, 720) and node(r, "n1").availability == 0


def test_a_running_month_the_rest_of_which_can_still_meet_the_target_is_provisional():
    """n1 down 20 min on 1 November, reviewed at midnight on the 2nd, October missed: 98.6111 % so far (a 30 %
    credit and a missed target were asserted, and with October the consecutive trigger), 99.9537 % at best: the
    month is neither met nor missed yet, and does not count as missed."""
    c = contract(["n1"])
    events = [ev("e", "n1", "2026-11-01T10:00:00Z", "2026-11-01T10:20:00Z")]
    r = review(c, TIERS, events, "2026-11", now_us=T(ONE_DAY), history={"2026-10": False})
    n1 = node(r, "n1")
    assert r.triggers == [] and r.breaches == [] and n1.credit_pct == 0 and r.cluster_credit_pct == 0
    assert n1.meets_target is None and r.cluster_met_target is None  # neither met nor missed
    assert n1.availability == 1 - Fraction(1, 72) and n1.best_availability == 1 - Fraction(1, 2160)
    assert n1.undetermined == ("the month is not over: availability so far 98.6111 %, at best 99.9537 % over the "
                               "whole month")
    assert r.cluster_undetermined == ("the month is not over: cluster availability so far 98.6111 %, at best "
                                      "99.9537 % over the whole month")
    # the consecutive rule: November is undetermined, a miss only if the rest of the month misses
    [open_trigger] = r.undetermined_triggers
    assert open_trigger["trigger"] == "consecutive" and "may have been missed 2 months in a row" in open_trigger[
        "detail"]
    # the rendered review says provisional where it is
    rows = {x["name"]: x for x in table_rows(r)["availability"][0]}
    assert (rows["n1"]["meets_target"], rows["cluster"]["meets_target"]) == ("provisional", "provisional")
    assert (rows["n1"]["availability_pct"], rows["n1"]["best_case_pct"]) == ("98.6111", "99.9537")
    assert [x["credit_pct_of_node_fee"] for x in table_rows(r)["credits"][0]] == ["at least 0", "at least 0"]
    md = render_markdown(r, {})
    assert "Cluster target 99.9 %: **provisional**, the month is not over" in md
    assert "**Termination triggers provisional** (the month is not over)" in md and "## Provisional" in md
    assert "cluster credit: **at least 0 %** of the monthly fee" in md and "**missed**" not in md
    # the same events over the whole month: 99.9537 %, met
    full = review(c, TIERS, events, "2026-11", history={"2026-10": False})
    assert node(full, "n1").meets_target is True and full.cluster_met_target is True and full.triggers == []
    assert full.undetermined_triggers == [] and "provisional" not in render_markdown(full, {})


def test_a_running_month_nothing_can_spoil_any_more_is_met():
    """Reviewed 30 min before the month ends with no downtime: even were those 30 min down, 99.9305 % >= 99.9 %."""
    r = review(contract(["n1"]), TIERS, [], "2026-11", now_us=T("2026-11-30T23:30:00Z"))
    assert r.partial and node(r, "n1").meets_target is True and r.cluster_met_target is True
    assert r.cluster_undetermined is None and r.undetermined_triggers == []
    late = review(contract(["n1"]), TIERS, [], "2026-11", now_us=T("2026-11-30T23:00:00Z"))  # 1 h may be down
    assert node(late, "n1").meets_target is None and late.cluster_met_target is None


def test_minimum_outage_drops_blips():
    doc = dict(TIERS.doc)
    doc["accounting"] = {**TIERS.accounting, "min_outage_s": 60}
    events = [ev("blip", "n1", "2026-11-10T10:00:00Z", "2026-11-10T10:00:59Z"),
              ev("real", "n1", "2026-11-10T11:00:00Z", "2026-11-10T11:01:00Z")]
    assert node(review(contract(["n1"]), Tiers(doc), events, "2026-11"), "n1").down_us == 60 * US


def test_bad_events_and_contracts_are_refused():
    with pytest.raises(EventError):
        ev("e", "n1", "2026-11-10T11:00:00Z", "2026-11-10T10:00:00Z")
    with pytest.raises(EventError):
        ev("e", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", kind="outage")
    with pytest.raises(EventError):
        Contract.from_dict({"nodes": ["a", "a"]})
    with pytest.raises(EventError):
        Contract.from_dict({"nodes": ["a"], "system": "dgx"})


def test_refused_gpu_maintenance_is_downtime_through_the_node_rule(tmp_path):
    # a provider log (reports/sla/sources/imports.py): GPU 3 of n1 out for physical maintenance for 6 h, announced
    # 1 h ahead where the kind needs 72 h
    log = tmp_path / "noc.csv"
    log.write_text("start,end,target,scope,gpu,kind,reason,announced_at\n"
                   "2026-11-10T10:00:00Z,2026-11-10T16:00:00Z,n1,gpu,3,physical_maintenance,HGX tray reseat,"
                   "2026-11-10T09:00:00Z\n")
    r = review(contract(["n1"], tier="silver"), TIERS, imports.load(str(log)), "2026-11")
    assert [(row["verdict"], row["why"]) for row in r.exclusions] == [
        ("refused", "announced 1 h ahead, physical_maintenance needs 72 h")]
    n1 = node(r, "n1")
    # node_down_gpus 1 (HGX): the node is down the 6 h; was 0 s, 100 % and no credit
    assert n1.down_us == 21600 * US and n1.availability == Fraction(119, 120)  # 99.1666… %
    assert n1.credit_pct == 10 and n1.meets_target is False  # silver: below 99.5 %, not below 99.0 %
    assert [row["evidence"] for row in r.downtime] == [["noc.csv#1"]]


def test_cluster_events_for_another_cluster_are_named_not_dropped_silently():
    c = contract(["n1"], cluster="acme")
    events = [ev("west", "acme-west", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z", scope="cluster"),
              ev("all", "*", "2026-11-11T10:00:00Z", "2026-11-11T10:30:00Z", scope="cluster")]
    r = review(c, TIERS, events, "2026-11")
    assert node(r, "n1").down_us == 1800 * US
    assert "cluster-scope events for clusters other than acme (or '*') were ignored: acme-west" in r.notes


def test_availability_is_shown_cut_never_rounded_across_a_threshold():
    # silver, 12,961 s down in November: 99.49996142 %, below the 99.5 % target
    r = review(contract(["n1"], tier="silver"), TIERS,
               [ev("e", "n1", "2026-11-10T00:00:00Z", "2026-11-10T03:36:01Z")], "2026-11")
    assert node(r, "n1").meets_target is False
    tables = table_rows(r)
    [row] = [x for x in tables["availability"][0] if x["level"] == "node"]
    assert (row["availability_pct"], row["meets_target"]) == ("99.4999", "no")  # was "99.5000" beside "no"
    assert {x["availability_pct"] for x in tables["credits"][0]} == {"99.4999"}
    md = render_markdown(r, {})
    assert "| n1 | 99.4999 | 99.5 | 10 | 12961 |" in md and "99.5000" not in md  # breaches: was 99.5
    assert pct_text(Fraction(995, 1000)) == "99.5000" and pct_text(Fraction(1)) == "100.0000"
    # the termination message: 129,601 s down is 94.99996 %, below silver's 95 %
    low = review(contract(["n1"], tier="silver"), TIERS,
                 [ev("e", "n1", "2026-11-10T00:00:00Z", "2026-11-11T12:00:01Z")], "2026-11")
    assert [t["detail"] for t in low.triggers] == [
        "cluster availability 94.9999 % is below the silver termination threshold 95 %"]  # was 95.0000


def test_minimum_outage_judges_the_whole_outage_across_the_month_edge():
    doc = dict(TIERS.doc)
    doc["accounting"] = {**TIERS.accounting, "min_outage_s": 300}
    events = [ev("edge", "n1", "2026-11-30T23:58:00Z", "2026-12-01T01:00:00Z"),  # 62 min, 2 of them in November
              ev("blip", "n1", "2026-11-10T10:00:00Z", "2026-11-10T10:04:59Z")]
    assert node(review(contract(["n1"]), Tiers(doc), events, "2026-11"), "n1").down_us == 120 * US  # was 0
    assert node(review(contract(["n1"]), Tiers(doc), events, "2026-12"), "n1").down_us == 3600 * US


def test_availability_table_columns_say_what_they_hold():
    c = contract([{"name": "n1", "rack": "r1"}, {"name": "n2", "rack": "r1", "gpus": 4}])
    r = review(c, TIERS, [ev("a", "n1", "2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z"),
                          ev("b", "n2", "2026-11-10T10:00:00Z", "2026-11-10T12:00:00Z")], "2026-11")
    rows = {x["level"]: x for x in table_rows(r)["availability"][0]}
    assert (rows["node"]["down_s"], rows["node"]["gpu_down_s"]) == (7200, 28800)  # n2: 2 h of 4 GPUs
    # the cluster row had down_s 10,800 (node seconds, not weighted) beside a GPU-weighted availability
    assert "down_s" not in rows["cluster"] and rows["cluster"]["gpu_down_s"] == 8 * 3600 + 4 * 7200
    assert r.cluster_availability == 1 - Fraction(int(rows["cluster"]["gpu_down_s"]),
                                                  rows["cluster"]["gpus"] * int(rows["cluster"]["service_s"]))
    assert rows["rack"]["gpu_down_s"] == 57600 and rows["rack"]["rack_rule_s"] == 0 and "down_s" not in rows["rack"]
    # NVL72: the rack row's rule time (20 min) is not the rack's downtime
    nv = review(contract(nvl72(), system="nvl72"), TIERS, staggered(3), "2026-11")
    [rack] = [x for x in table_rows(nv)["availability"][0] if x["level"] == "rack"]
    assert rack["rack_rule_s"] == 1200 and rack["gpu_down_s"] == 4 * (15 * 1200 + 3600 + 3600 + 4800)
    assert nv.racks[0].capacity_availability == 1 - Fraction(int(rack["gpu_down_s"]),
                                                             rack["gpus"] * int(rack["service_s"]))


def test_a_node_declared_with_no_gpus_weighs_nothing():
    """sla_gpus 0 (roles/sla/meta/input_ranges.yml allows 0 to 72: a login or CPU host), as the sla role builds the
    nodes ([name, rack, gpus]); four 8-GPU nodes, g1 down 10 h. Silver: 10 h of 720 h is 98.6111 %, 25 % credit.
    The login node used to count as 8 GPUs (`gpus or gpus_per_node`): 99.7222 % and 5 % credit (40 GPUs)."""
    nodes = [["g1", "", ""], ["g2", "", ""], ["g3", "", ""], ["g4", "", ""], ["login", "", 0]]
    c = Contract.from_dict({"provider": "p", "tier": "silver", "system": "hgx", "nodes": nodes})
    r = review(c, TIERS, [ev("a", "g1", "2026-11-03T00:00:00Z", "2026-11-03T10:00:00Z")], "2026-11",
               now_us=T("2026-12-02T00:00:00Z"))
    assert [(n.name, n.gpus) for n in r.nodes] == [("g1", 8), ("g2", 8), ("g3", 8), ("g4", 8), ("login", 0)]
    assert node(r, "g1").credit_pct == 25 and node(r, "login").availability == 1
    assert r.cluster_availability == 1 - Fraction(10 * 8, 720 * 32)  # 99.65277... %
    assert pct_text(r.cluster_availability) == "99.6527" and r.cluster_credit_pct == Fraction(25, 4)  # 6.25 %


def test_time_no_source_observed_bounds_the_verdict():
    """Rule 8 on its own: n1 seen down 30 min and not observed 6 h (a 30-day month, gold 99.9 %)."""
    c = contract(["n1", "n2"])
    events = [ev("a", "n1", "2026-11-03T10:00:00Z", "2026-11-03T10:30:00Z")]
    blind = {"n1": [(T("2026-11-20T10:00:00Z"), T("2026-11-20T16:00:00Z"))]}
    before = node(review(c, TIERS, events, "2026-11"), "n1")  # no coverage given: not judged, as before
    assert before.meets_target is True and before.worst_availability is None and before.unobserved_us is None
    r = review(c, TIERS, events, "2026-11", unobserved=blind)
    n1 = node(r, "n1")
    assert n1.availability == 1 - Fraction(1, 1440) and n1.worst_availability == 1 - Fraction(13, 1440)
    assert n1.meets_target is None and n1.undetermined == (
        "6 h 0 min unobserved (no source saw the node): availability between 99.0972 % and 99.9305 %")
    assert (n1.credit_pct, n1.credit_worst_pct) == (0, 10) and r.breaches == []
    assert node(r, "n2").meets_target is True and node(r, "n2").unobserved_us == 0
    # the cluster: counted 99.9652 %, worst 99.5486 %: undetermined, credit 0 to 5 %
    assert r.cluster_met_target is None and r.cluster_worst_availability == 1 - Fraction(13, 2880)
    assert (r.cluster_credit_pct, r.cluster_credit_worst_pct) == (0, 5)
    row = {x["name"]: x for x in table_rows(r)["availability"][0]}
    assert (row["n1"]["availability_pct"], row["n1"]["meets_target"]) == ("99.0972 to 99.9305", "undetermined")
    assert (row["cluster"]["availability_pct"], row["cluster"]["meets_target"]) == ("99.5486 to 99.9652",
                                                                                    "undetermined")
    # unobserved time in an honoured exclusion is no downtime in the worst case either
    notice = ev("m", "n1", "2026-11-20T09:00:00Z", "2026-11-20T17:00:00Z", kind="physical_maintenance",
                announced_at=T("2026-11-01T00:00:00Z"))
    assert node(review(c, TIERS, events + [notice], "2026-11", unobserved=blind), "n1").meets_target is True


def test_minimum_outage_judges_the_worst_case_as_it_judges_the_counted_downtime():
    """min_outage_s 300 (rule 4) in the worst case (rule 8): the unobserved time is joined to the node's own outages
    before outages shorter than 5 min are dropped, each judged whole, as the counted downtime is."""
    doc = dict(TIERS.doc)
    doc["accounting"] = {**TIERS.accounting, "min_outage_s": 300}
    tiers = Tiers(doc)
    c = contract(["n1"])
    # a 4-minute outage seen, then 3 minutes no source observed: had they been down, one 7-minute outage
    seen = [ev("a", "n1", "2026-11-10T10:00:00Z", "2026-11-10T10:04:00Z")]
    blind = {"n1": [(T("2026-11-10T10:04:00Z"), T("2026-11-10T10:07:00Z"))]}
    n1 = node(review(c, tiers, seen, "2026-11", unobserved=blind), "n1")
    assert n1.down_us == 0 and n1.unobserved_us == 180 * US
    assert n1.worst_down_us == 420 * US  # was 180 s: the unobserved 3 min added to the already dropped 4 min
    # thirty isolated 4-minute gaps, one a day: an outage inside any of them would be under 5 min and dropped
    gaps = {"n1": [(T("2026-11-%02dT12:00:00Z" % d), T("2026-11-%02dT12:04:00Z" % d)) for d in range(1, 31)]}
    r = review(c, tiers, [], "2026-11", unobserved=gaps)
    n1 = node(r, "n1")
    assert n1.unobserved_us == 2 * 3600 * US and n1.worst_down_us == 0 and n1.worst_availability == 1
    # was 2 h down in the worst case (99.7222 %): undetermined, credit 0 to 10 %
    assert n1.meets_target is True and n1.undetermined is None and n1.credit_worst_pct == 0
    assert r.cluster_met_target is True and r.cluster_worst_availability == 1
    # judged on the whole outage across the month's edge: 2 min of October and 2 of November seen down (dropped as
    # counted), then 2 min unobserved: 6 min had they been down, 4 of them in November (was 2)
    edge = [ev("e", "n1", "2026-10-31T23:58:00Z", "2026-11-01T00:02:00Z")]
    first = {"n1": [(T("2026-11-01T00:02:00Z"), T("2026-11-01T00:04:00Z"))]}
    n1 = node(review(c, tiers, edge, "2026-11", unobserved=first), "n1")
    assert n1.down_us == 0 and n1.worst_down_us == 240 * US
    # a gap that reaches the end of the service time may go on past it (nothing is known there): not dropped
    last = {"n1": [(T("2026-11-30T23:56:00Z"), T("2026-12-01T00:00:00Z"))]}
    assert node(review(c, tiers, [], "2026-11", unobserved=last), "n1").worst_down_us == 240 * US
    # the rack rule on the worst cases, as before: three trays' same 4-minute gaps hold no outage either
    nv = review(contract(nvl72(), system="nvl72"), tiers, [], "2026-11",
                unobserved={"t%02d" % i: gaps["n1"] for i in range(3)})
    assert all(n.worst_down_us == 0 and n.meets_target is True for n in nv.nodes)  # was 2 h on all 18 trays


def test_a_tray_undetermined_by_the_rack_rule_alone_says_so():
    """NVL72: t00, t01 and t02 unobserved the same 2 h. The rack rule on their worst case puts those 2 h on every
    tray, so t05, observed throughout (unobserved_s 0), meets 99.9 % only as counted."""
    blind = {"t%02d" % i: [(T("2026-11-20T10:00:00Z"), T("2026-11-20T12:00:00Z"))] for i in range(3)}
    blind["t03"] = [(T("2026-11-20T11:00:00Z"), T("2026-11-20T11:30:00Z"))]
    r = review(contract(nvl72(), system="nvl72"), TIERS, [], "2026-11", unobserved=blind)
    t05 = node(r, "t05")
    assert t05.unobserved_us == 0 and t05.worst_down_us == 7200 * US and t05.meets_target is None
    # was "2 h 0 min unobserved (no source saw the node): ..." of a node no minute of which was unobserved
    assert t05.undetermined == ("none of its own time unobserved; 2 h 0 min down by the rack rule in the worst case "
                                "(t00, t01, t02, t03 of r1 down or unobserved at once): availability between "
                                "99.7222 % and 100.0000 %")
    # t03: 30 min of its own, 1 h 30 min more by the rule (was "2 h 0 min unobserved")
    assert node(r, "t03").undetermined == (
        "0 h 30 min unobserved (no source saw the node); 1 h 30 min down by the rack rule in the worst case (t00, "
        "t01, t02 of r1 down or unobserved at once): availability between 99.7222 % and 100.0000 %")
    assert node(r, "t00").undetermined == ("2 h 0 min unobserved (no source saw the node): availability between "
                                           "99.7222 % and 100.0000 %")


def test_triggers_only_the_worst_case_reaches_are_undetermined():
    c = contract(["n1"])  # gold: terminate below 95 %, or the target missed 2 months in a row
    blind = {"n1": [(T("2026-11-05T00:00:00Z"), T("2026-11-07T00:00:00Z"))]}  # 2 days: worst case 93.3333 %
    r = review(c, TIERS, [], "2026-11", unobserved=blind, history={"2026-10": False})
    assert r.triggers == [] and [t["trigger"] for t in r.undetermined_triggers] == ["availability", "consecutive"]
    assert "may have been missed 2 months in a row" in r.undetermined_triggers[1]["detail"]
    # an undetermined earlier month (history None) is a miss only in the worst case
    missed = [ev("a", "n1", "2026-11-05T00:00:00Z", "2026-11-05T02:00:00Z")]
    r = review(c, TIERS, missed, "2026-11", history={"2026-10": None})
    assert r.triggers == [] and [t["trigger"] for t in r.undetermined_triggers] == ["consecutive"]
    r = review(c, TIERS, missed, "2026-11", history={"2026-10": False})
    assert [t["trigger"] for t in r.triggers] == ["consecutive"] and r.undetermined_triggers == []
    md = render_markdown(review(c, TIERS, [], "2026-11", unobserved=blind), {})
    assert "Termination triggers: none determined." in md and "**Termination triggers undetermined**" in md


# ---------------------------------------------------------------------------------- a node's own service window
# Rule 1: the contract may give a node `in_service_from` / `in_service_until`. November 2026 (30 days), gold
# (99.9 %): "old" failed and was swapped for "spare" at midnight on the 15th, so old served 14 days, spare 16.
SWAP = [{"name": "n1"}, {"name": "old", "in_service_until": "2026-11-15"},
        {"name": "spare", "in_service_from": "2026-11-15T00:00:00Z"}]
SWAP_EVENTS = [
    ev("psu", "old", "2026-11-10T10:00:00Z", "2026-11-10T12:00:00Z"),  # 2 h down before the swap
    # the health probe finds the retired node unreachable from the swap on; the spare was burnt in the day before
    ev("gone", "old", "2026-11-15T00:05:00Z", "2026-12-01T00:00:00Z", source="healthprobe"),
    ev("burnin", "spare", "2026-11-14T08:00:00Z", "2026-11-14T20:00:00Z"),
]


def test_a_node_swapped_for_a_spare_mid_month_is_judged_over_its_own_days():
    # The old loader ignored the two fields: old was judged over the month with 2 h + 15 d 23 h 55 min down (46.4 %),
    # the spare charged the 12 h of its burn-in (98.3 %), the cluster credit a GPU-weighted 43.3 % (of 3 nodes).
    r = review(contract(SWAP), TIERS, SWAP_EVENTS, "2026-11")
    old, spare, n1 = node(r, "old"), node(r, "spare"), node(r, "n1")
    assert old.service == (T("2026-11-01T00:00:00Z"), T("2026-11-15T00:00:00Z")) and old.service_us == 14 * 86400 * US
    assert old.down_us == 7200 * US and old.availability == 1 - Fraction(7200, 14 * 86400)  # 99.4047 %, not 99.7222
    assert (old.credit_pct, old.meets_target) == (10, False) and [b["node"] for b in r.breaches] == ["old"]
    assert spare.service == (T("2026-11-15T00:00:00Z"), T("2026-12-01T00:00:00Z"))
    assert spare.service_us == 16 * 86400 * US
    assert spare.down_us == 0 and spare.availability == 1 and spare.meets_target is True
    assert n1.service_us == MONTH_S * US and n1.availability == 1
    # each node weighs by GPUs x its own service time: old and spare together as one node of the month, so the
    # cluster lost 2 h of 8 GPUs out of two nodes' months, and old's 10 % weighs 14 of 60 node-days
    assert r.cluster_availability == 1 - Fraction(7200 * 8, 8 * 60 * 86400)  # 1 - 1/720: 99.8611 %
    assert r.cluster_credit_pct == Fraction(10 * 14, 60)  # 2.3333 %, not 10 % of one node in three
    assert [(row["node"], row["evidence"]) for row in r.downtime] == [("old", ["psu"])]
    rows = {x["name"]: x for x in table_rows(r)["availability"][0]}
    assert (rows["old"]["service_s"], rows["spare"]["service_s"]) == (14 * 86400, 16 * 86400)
    md = render_markdown(r, {})
    assert ("In service for part of it only (see Service windows): old (until 2026-11-15T00:00:00Z), spare "
            "(from 2026-11-15T00:00:00Z).") in md
    assert "## Service windows" in md and "| n1 |" not in md.split("## Service windows")[1].split("## Availability")[0]
    assert ("| old |  | 8 |  | 2026-11-15T00:00:00Z | 2026-11-01T00:00:00Z | 2026-11-15T00:00:00Z | "
            "2026-11-01T00:00:00+00:00 | 2026-11-15T00:00:00+00:00 | 1209600 |") in md
    assert "| spare |  | 8 | 2026-11-15T00:00:00Z |  | 2026-11-15T00:00:00Z | 2026-12-01T00:00:00Z |" in md
    # 16 GPUs: n1 and one of old / spare in service at any time (was 24, every contract node summed, the swapped-out
    # node and its spare both)
    assert "| (cluster, GPU-weighted) |  | 16 | 99.8611 | gold | 99.9 | 2.333333 |" in md
    assert rows["cluster"]["gpus"] == 16
    # without windows nothing changes: no section, and the head says nothing of it
    assert "Service windows" not in render_markdown(review(contract(["n1"]), TIERS, [], "2026-11"), {})


def test_events_outside_a_nodes_window_are_ignored_for_it_with_a_note():
    r = review(contract(SWAP), TIERS, SWAP_EVENTS, "2026-11")
    assert ("old is in service until 2026-11-15T00:00:00Z: 1 of its event(s) fall outside that window and were "
            "ignored for the time outside it (gone)") in r.notes
    assert ("spare is in service from 2026-11-15T00:00:00Z: 1 of its event(s) fall outside that window and were "
            "ignored for the time outside it (burnin)") in r.notes
    # an event across the swap counts up to it; a cluster-wide one counts for each node in its own window only
    across = [ev("x", "old", "2026-11-14T23:00:00Z", "2026-11-15T03:00:00Z"),
              ev("all", "*", "2026-11-14T23:30:00Z", "2026-11-15T00:30:00Z", scope="cluster")]
    r = review(contract(SWAP), TIERS, across, "2026-11")
    assert (node(r, "old").down_us, node(r, "spare").down_us, node(r, "n1").down_us) == (3600 * US, 1800 * US,
                                                                                          3600 * US)
    assert [n for n in r.notes if "fall outside" in n] == [
        "old is in service until 2026-11-15T00:00:00Z: 1 of its event(s) fall outside that window and were ignored "
        "for the time outside it (x)"]
    # a node whose window misses the month: no service time, nothing counted, said so
    gone = review(contract([{"name": "n1"}, {"name": "old", "in_service_until": "2026-10-20"}]), TIERS,
                  [ev("late", "old", "2026-11-02T00:00:00Z", "2026-11-03T00:00:00Z")], "2026-11")
    assert node(gone, "old").availability is None and node(gone, "old").down_us == 0 and gone.breaches == []
    assert gone.cluster_availability == 1 and gone.cluster_credit_pct == 0
    assert ("old is in service until 2026-10-20T00:00:00Z: none of it in this month's service time, nothing is "
            "counted for it") in gone.notes


def test_time_outside_a_nodes_window_is_not_unobserved():
    # what review.py would give without windows: no source saw old after the swap, nor spare before it
    blind = {"old": [(T("2026-11-15T00:00:00Z"), T("2026-12-01T00:00:00Z"))],
             "spare": [(T("2026-11-01T00:00:00Z"), T("2026-11-15T00:00:00Z")),
                       (T("2026-11-20T10:00:00Z"), T("2026-11-20T11:00:00Z"))],  # and 1 h in its service
             "n1": []}
    r = review(contract(SWAP), TIERS, [], "2026-11", unobserved=blind)
    old, spare = node(r, "old"), node(r, "spare")
    # the old loader: old undetermined with 16 days unobserved (worst case 46.6 %), spare with 14 days
    assert old.unobserved_us == 0 and old.worst_availability == 1 and old.meets_target is True
    assert old.undetermined is None
    # the hour in the spare's own service is judged over its 16 days: 1 - 1/384 = 99.7395 %, below 99.9 %
    assert spare.unobserved_us == 3600 * US and spare.worst_availability == 1 - Fraction(3600, 16 * 86400)
    assert spare.meets_target is None and spare.undetermined == (
        "1 h 0 min unobserved (no source saw the node): availability between 99.7395 % and 100.0000 %")
    assert r.cluster_worst_availability == 1 - Fraction(3600, 60 * 86400) and r.cluster_met_target is True


def test_a_swapped_nvl72_tray_is_not_down_for_the_rack_rule_outside_its_window():
    # As the sla role builds the nodes: [name, rack, gpus, in_service_from, in_service_until]. 18 trays of r1, t00
    # swapped for t18 at midnight on the 10th: 19 trays listed, 18 in service at any time.
    nodes = [["t%02d" % i, "r1", "", "", ""] for i in range(1, 18)]
    nodes = [["t00", "r1", "", "", "2026-11-10"]] + nodes + [["t18", "r1", "", "2026-11-10", ""]]
    events = [ev("gone", "t00", "2026-11-10T00:00:00Z", "2026-12-01T00:00:00Z"),  # unreachable once swapped out
              ev("a", "t01", "2026-11-12T10:00:00Z", "2026-11-12T11:00:00Z"),
              ev("b", "t02", "2026-11-12T10:00:00Z", "2026-11-12T11:00:00Z"),
              # three trays down at once before the swap: the rack rule holds 30 min, for the trays then in service
              ev("c", "t03", "2026-11-05T10:00:00Z", "2026-11-05T10:30:00Z"),
              ev("d", "t04", "2026-11-05T10:00:00Z", "2026-11-05T10:30:00Z"),
              ev("e", "t05", "2026-11-05T10:00:00Z", "2026-11-05T10:30:00Z")]
    c = Contract.from_dict({"provider": "p", "tier": "gold", "system": "nvl72", "nodes": nodes})
    r = review(c, TIERS, events, "2026-11")
    # on the 12th only t01 and t02 were down: the retired t00 is no third (the old loader: a 1 h rack outage)
    assert r.racks[0].down == [(T("2026-11-05T10:00:00Z"), T("2026-11-05T10:30:00Z"))]
    assert node(r, "t06").down_us == 1800 * US and node(r, "t00").rack_rule_us == 1800 * US
    assert node(r, "t18").down_us == 0 and node(r, "t18").rack_rule_us == 0  # not in service on the 5th
    assert node(r, "t00").down_us == 1800 * US and node(r, "t01").down_us == 5400 * US  # its hour and the rule's
    assert not [n for n in r.notes if "nodes_per_rack" in n]  # was "rack r1 lists 19 nodes, more than ... 18"
    # t00 (9 days) and t18 (21 days) weigh as one tray of the month: 18 trays' months in all
    lost = 18 * 1800 + 2 * 3600  # the rule's 30 min on the 18 trays in service then, and t01's and t02's hour
    assert r.racks[0].capacity_availability == 1 - Fraction(lost, 18 * MONTH_S)
    # the rack's and the cluster's GPUs: 18 trays of 4 in service at any time (was 76: t00 and t18 both summed)
    rows = {x["level"]: x for x in table_rows(r)["availability"][0]}
    assert rows["rack"]["gpus"] == rows["cluster"]["gpus"] == 72
    assert [x["gpus"] for x in table_rows(r)["credits"][0] if x["node"] == "(cluster, GPU-weighted)"] == [72]
    # with no service time at all (not accepted yet), the most at once by the windows, in the month (was 76)
    waiting = Contract.from_dict({"provider": "p", "tier": "gold", "system": "nvl72", "nodes": nodes,
                                  "acceptance_agreed": "2026-12-01"})
    assert [x["gpus"] for x in table_rows(review(waiting, TIERS, [], "2026-11"))["availability"][0]
            if x["level"] == "cluster"] == [72]
    # 19 trays in service at once would still be said
    crowded = Contract.from_dict({"provider": "p", "tier": "gold", "system": "nvl72",
                                  "nodes": [n[:3] for n in nodes]})
    assert "rack r1 lists 19 nodes, more than nodes_per_rack 18" in review(crowded, TIERS, [], "2026-11").notes


@pytest.mark.parametrize("window, message", [
    ({"in_service_from": "2026-11-15", "in_service_until": "2026-11-10"},
     "contract node spare: in_service_until 2026-11-10 is not after in_service_from 2026-11-15"),
    ({"in_service_from": "2026-11-15T00:00:00Z", "in_service_until": "2026-11-15"},  # empty: not after
     "contract node spare: in_service_until 2026-11-15 is not after in_service_from 2026-11-15T00:00:00Z"),
    ({"in_service_from": "2026-11-31"}, "contract node spare: in_service_from '2026-11-31': unreadable timestamp"),
    ({"in_service_until": "soon"}, "contract node spare: in_service_until 'soon': unreadable timestamp"),
])
def test_a_window_that_ends_before_it_starts_is_refused_naming_the_node(window, message):
    # the old loader ignored both fields and judged the spare over the whole month
    with pytest.raises(EventError) as err:
        Contract.from_dict({"nodes": ["n1", {"name": "spare", **window}]})
    assert str(err.value).startswith(message)
    # the role's list form too, and a window's time without an offset is read in the contract's zone
    with pytest.raises(EventError, match="contract node spare: in_service_until"):
        Contract.from_dict({"nodes": [["spare", "", "", "2026-11-15", "2026-11-10"]]})
    c = Contract.from_dict({"timezone": "America/New_York", "nodes": [["spare", "", "", "2026-11-15T09:00:00", ""]]})
    assert c.service_window(c.nodes[0]) == (T("2026-11-15T14:00:00Z"), None)
    assert c.as_dict()["nodes"] == [{"name": "spare", "rack": None, "gpus": None,
                                     "in_service_from": "2026-11-15T09:00:00"}]
