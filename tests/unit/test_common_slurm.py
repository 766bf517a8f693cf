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
