"""One scontrol parser and one meaning of "down" (probes.common.slurm): the one-line and the multi-line forms of
`scontrol show node` recorded from the same four nodes read the same, and the phase of every state the SLA review
knows matches what that review counts as out of service (every phase but available)."""

from pathlib import Path

import pytest

from probes.common import slurm

SLA = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "sla"


def test_the_one_line_and_multi_line_forms_read_the_same():
    multi = slurm.parse_show_node((SLA / "scontrol_show_node.txt").read_text())
    one = slurm.parse_show_node((SLA / "scontrol_oneliner.txt").read_text())
    assert sorted(multi) == sorted(one) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    for name in multi:
        assert {k: multi[name].get(k) for k in ("State", "Reason", "NodeAddr", "Partitions")} == \
            {k: one[name].get(k) for k in ("State", "Reason", "NodeAddr", "Partitions")}
    assert multi["gpu002"]["Reason"] == "xid 79: GPU has fallen off the bus [root@2026-11-30T05:35:45]"
    assert slurm.reason_text(multi["gpu002"]) == "xid 79: GPU has fallen off the bus"
    assert {n: slurm.phase(f) for n, f in multi.items()} == {"gpu001": "down", "gpu002": "down", "gpu003": "down",
                                                             "gpu004": "down"}


# The SLA review's verdicts are the same function (reports/sla/sources/slurm.is_down): its table of states is in
# tests/unit/test_sla_sources.py.
@pytest.mark.parametrize("state, phase", [
    ("drained", "drained"), ("draining", "draining"), ("IDLE+POWERED_DOWN", "available"),
    ("IDLE+POWERING_UP", "available"), ("idle#", "available"), ("", "unknown"), ("IDLE+REBOOT_ISSUED", "down"),
    ("MIXED+DRAIN", "draining"),
])
def test_sinfo_names_and_power_saving(state, phase):
    assert slurm.phase({"State": state}) == phase


CAP = Path(__file__).resolve().parents[1] / "fixtures" / "slurm" / "captures"


# Real multi-line captures (tests/fixtures/slurm/captures/README.md), each after its shell prompt; drained, not down.
@pytest.mark.parametrize("name, node, gres, reason, extra", [
    ("scontrol_show_node_gentoo.txt", "cu201", "(null)", "Low RealMemory", {"Comment": "(null)"}),
    ("scontrol_show_node_h100_pcie.txt", "localhost", "gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600",
     "Kill task failed",
     {"OS": "Linux 6.5.0-25-generic #25~22.04.1-Ubuntu SMP PREEMPT_DYNAMIC Tue Feb 20 16:09:15 UTC 2"}),
    ("scontrol_show_node_twcc_v100.txt", "gn0101.twcc.ai", "gpu:8", "node-switch", {"Partitions": "SlurmDefault"}),
])
def test_multi_line_real_captures(name, node, gres, reason, extra):
    nodes = slurm.parse_show_node((CAP / name).read_text())
    assert list(nodes) == [node]
    fields = nodes[node]
    assert fields["State"] == "IDLE+DRAIN" and slurm.phase(fields) == "drained"
    assert fields["Gres"] == gres and slurm.reason_text(fields) == reason
    assert {k: fields[k] for k in extra} == extra
    # the same record with CRLF line ends reads the same
    assert slurm.parse_show_node((CAP / name).read_text().replace("\n", "\r\n")) == nodes


@pytest.mark.parametrize("state, base, flags, phase", [
    ("drain*", "IDLE", {"DRAIN", "NOT_RESPONDING"}, "down"), ("idle~", "IDLE", {"POWERED_DOWN"}, "available"),
    ("mix-", "MIXED", {"PLANNED"}, "available"), ("down*", "DOWN", {"NOT_RESPONDING"}, "down"),
    ("drng", "ALLOCATED", {"DRAIN"}, "draining"), ("alloc", "ALLOCATED", set(), "available"),
    ("mix", "MIXED", set(), "available"), ("drain", "IDLE", {"DRAIN"}, "drained"),
    ("failg", "ALLOCATED", {"FAILING"}, "down"), ("futr", "FUTURE", set(), "down"),
])
def test_sinfo_short_states_with_suffixes(state, base, flags, phase):
    assert slurm.split_state(state) == (base, flags)
    assert slurm.phase({"State": state}) == phase


def test_fields_after_the_reason_on_one_line_real_capture():
    """`scontrol show nodes -o` of Slurm 25.11.2 (captures/scontrol_oneliner_reservation_25.11.2.txt): a drained node
    in a maintenance reservation prints ReservationName= after its reason, on the same line (SchedMD
    src/api/node_info.c prints Comment=, Extra=, InstanceId=, InstanceType=, ReservationName= after Reason=). The
    reason used to run to the end of the line: its stamp unread (no reason_at, no user) and no ReservationName."""
    import time

    from probes.reliability.sched_action import _not_ours

    nodes = slurm.parse_show_node((CAP / "scontrol_oneliner_reservation_25.11.2.txt").read_text())
    assert sorted(nodes) == ["c1", "c2", "c3", "c4", "c5", "c6", "c7"]
    c4 = nodes["c4"]
    assert c4["Reason"] == "planned_maintenance [root@2026-07-22T23:31:17]"
    assert c4["ReservationName"] == "maintenance-2026" and nodes["c5"]["ReservationName"] == "gpu-backfill"
    assert slurm.split_reason(c4["Reason"]) == ("planned_maintenance", "root", "2026-07-22T23:31:17")
    stamp = time.mktime(time.strptime("2026-07-22T23:31:17", "%Y-%m-%dT%H:%M:%S"))  # slurmctld's zone: this one
    s = slurm.sample("c4", c4, stamp + 60)
    assert (s["phase"], s["reason"], s["reason_at"]) == ("drained", "planned_maintenance", stamp)
    assert slurm.sample("c1", nodes["c1"], 0)["phase"] == "draining" and "Reason" not in nodes["c2"]
    # the reliability phase resumes a node the test drained in its batch: was refused ("its reason carries no time")
    assert _not_ours(s, (stamp - 5, stamp + 30)) is None
    assert _not_ours(s, (stamp + 100, stamp + 200)).startswith("drained at ")


def test_a_reason_quoting_a_stamp_and_one_of_several_lines():
    """Slurm appends its stamp after the reason's first line (node_info.c: a reason with newlines prints the rest
    after it, on the same line with -o); the last stamp is Slurm's when the text quotes an older one."""
    assert slurm.split_reason("Kill task failed [root@2024-08-08T19:12:57]") == (
        "Kill task failed", "root", "2024-08-08T19:12:57")
    assert slurm.split_reason("was: xid 79 [slurm@2026-11-30T05:31:09] [root@2026-11-30T06:00:00]") == (
        "was: xid 79 [slurm@2026-11-30T05:31:09]", "root", "2026-11-30T06:00:00")
    assert slurm.split_reason("[HC] temp issue") == ("[HC] temp issue", None, None)
    line = ("NodeName=n1 State=IDLE+DRAIN Partitions=gpu Reason=first line [root@2026-11-30T06:00:00]        "
            "second line Comment=rack 4")
    fields = slurm.parse_show_node(line)["n1"]
    assert slurm.reason_text(fields) == "first line        second line" and fields["Comment"] == "rack 4"
