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
