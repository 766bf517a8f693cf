"""Scheduler readers of the destructive phase: `scontrol show node -o` recorded on the test cluster's Slurm
(tests/fixtures/slurm/show_node_*.txt) and a Kubernetes NodeList (tests/fixtures/kubectl/get_nodes.json)."""

import json
import os
import stat
from pathlib import Path

import pytest

from probes.common import k8s as sched_k8s
from probes.common import sched
from probes.common import slurm as sched_slurm

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def slurm_nodes(name):
    return sched_slurm.parse_show_node((FIX / "slurm" / ("show_node_%s.txt" % name)).read_text())


def test_scontrol_fields_with_spaces_and_reason():
    nodes = slurm_nodes("draining")
    assert sorted(nodes) == ["cmxd-node1", "cmxd-node2", "cmxd-node3", "cmxd-node4"]
    n2 = nodes["cmxd-node2"]
    assert n2["State"] == "ALLOCATED+DRAIN"
    assert n2["OS"].startswith("Linux ") and "#1 SMP" in n2["OS"]
    assert n2["Reason"].startswith("clustermax.assess reboot test [root@")
    assert sched_slurm.reason_text(n2) == "clustermax.assess reboot test"
    assert n2["SlurmdStartTime"] == "2026-11-30T05:29:04"


@pytest.mark.parametrize("fixture,node,phase", [
    ("draining", "cmxd-node2", "draining"),
    ("draining", "cmxd-node1", "available"),
    ("drained", "cmxd-node2", "drained"),
    ("down", "cmxd-node3", "down"),
    ("mixed", "cmxd-node2", "down"),      # IDLE+NOT_RESPONDING right after a resume
    ("mixed", "cmxd-node3", "down"),      # DOWN+DRAIN
    ("mixed", "cmxd-node4", "down"),      # DOWN
])
def test_slurm_phases(fixture, node, phase):
    assert sched_slurm.phase(slurm_nodes(fixture)[node]) == phase


def test_slurm_state_strings_in_sinfo_form():
    assert sched_slurm.split_state("idle*") == ("IDLE", {"NOT_RESPONDING"})
    assert sched_slurm.phase({"State": "MIXED+DRAIN"}) == "draining"
    assert sched_slurm.phase({"State": "IDLE+DRAIN+REBOOT_REQUESTED"}) == "drained"
    assert sched_slurm.phase({"State": "IDLE+REBOOT_ISSUED"}) == "down"
    assert sched_slurm.phase({"State": "ALLOCATED+COMPLETING"}) == "available"
    assert sched_slurm.phase({"State": "IDLE+MAINTENANCE+RESERVED"}) == "available"


def test_slurm_node_not_found_is_missing(tmp_path, monkeypatch):
    nodes = slurm_nodes("not_found")
    assert list(nodes) == ["cmxd-node2"]
    # a fake scontrol that prints the recorded output and exits 1, as the real one does
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\ncat %s\nexit 1\n" % (FIX / "slurm" / "show_node_not_found.txt"))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    samples = sched_slurm.read(["cmxd-node2", "cmxd-node9"], 5.0)
    assert [(s["node"], s["phase"]) for s in samples] == [("cmxd-node2", "available"), ("cmxd-node9", "missing")]


def test_slurm_unreadable_gives_unknown(tmp_path, monkeypatch):
    script = tmp_path / "scontrol"
    script.write_text("#!/bin/sh\necho 'slurm_load_node error: Unable to contact slurm controller' >&2\nexit 1\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    [s] = sched_slurm.read(["n1", "n2"], 1.0)[:1]
    assert s["phase"] == "unknown" and "Unable to contact" in s["reason"]


def test_srun_argv_pins_one_node_and_fails_fast():
    argv = sched_slurm.job_argv("gpu-7", ["nvidia-smi", "-L"], 30)
    assert argv[0] == "srun" and "--nodelist=gpu-7" in argv and "--immediate=30" in argv
    assert argv[-2:] == ["nvidia-smi", "-L"]


def k8s_nodes():
    return sched_k8s.parse_nodes((FIX / "kubectl" / "get_nodes.json").read_text())


def test_kubernetes_phases_relative_to_baseline_taints():
    nodes = k8s_nodes()
    base = {n: sched_k8s.taint_keys(nodes["gpu-node-1"]) for n in nodes}  # the GPU pool's own taint
    got = {n: sched_k8s.sample(n, nodes[n], 1.0, base[n]) for n in nodes}
    assert got["gpu-node-1"]["phase"] == "available"
    assert got["gpu-node-2"]["phase"] == "drained" and "SchedulingDisabled" in got["gpu-node-2"]["state"]
    assert got["gpu-node-3"]["phase"] == "down" and "NodeStatusUnknown" in got["gpu-node-3"]["reason"]
    assert got["gpu-node-4"]["phase"] == "drained"
    assert "nvidia.com/gpu-health:NoSchedule" in got["gpu-node-4"]["reason"]
    assert "GpuHealthy=False" in got["gpu-node-4"]["reason"]
    assert got["gpu-node-1"]["boot_id"] == "6b0b5c49-2a8f-4b1a-9f7e-3f7d1d0c9a11"
    # an empty baseline makes the GPU pool's own taint count as a drain; no baseline at all (a one-off reading)
    # counts only Kubernetes' own node.kubernetes.io/* taints
    assert sched_k8s.sample("gpu-node-1", nodes["gpu-node-1"], 1.0, [])["phase"] == "drained"
    assert sched_k8s.sample("gpu-node-1", nodes["gpu-node-1"], 1.0)["phase"] == "available"
    assert sched_k8s.sample("gpu-node-2", nodes["gpu-node-2"], 1.0)["phase"] == "drained"
    assert sched_k8s.sample("gpu-node-4", nodes["gpu-node-4"], 1.0)["phase"] == "unhealthy"  # GpuHealthy=False
    assert sched_k8s.sample("gone", None, 1.0)["phase"] == "missing"


def test_kubernetes_fresh_pod_goes_through_the_scheduler():
    spec = sched_k8s.pod_overrides("gpu-node-1", "img", ["nvidia-smi"], 1)["spec"]
    assert "nodeName" not in spec and spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_detect_command_for_standalone_nodes(tmp_path):
    flag = tmp_path / "bad-n2"
    flag.write_text("XID 79 seen\n")
    check = tmp_path / "check"
    check.write_text("#!/bin/sh\nif [ -e %s/bad-$1 ]; then cat %s/bad-$1; exit 1; fi\nexit 0\n" % (tmp_path, tmp_path))
    check.chmod(0o755)
    s = sched.Scheduler("none", {"detect_command": [str(check), "{node}"]})
    got = {x["node"]: x for x in s.read(["n1", "n2"], 2.0)}
    assert got["n1"]["phase"] == "available"
    assert got["n2"]["phase"] == "unhealthy" and got["n2"]["reason"] == "XID 79 seen"
    assert sched.Scheduler("none").read(["n1"], 1.0)[0]["phase"] == "unknown"
    assert s.drain("n1", "x") is None and s.job("n1", ["true"]) is None


def test_detect_prefers_slurm_then_kubernetes(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    name, why = sched.detect()
    assert name == "none" and why == {"slurm": "scontrol not found", "kubernetes": "kubectl not found"}
    (tmp_path / "kubectl").write_text("#!/bin/sh\necho node/a\n")
    (tmp_path / "kubectl").chmod(0o755)
    assert sched.detect()[0] == "kubernetes"
    (tmp_path / "scontrol").write_text("#!/bin/sh\necho 'Slurmctld(primary) at n1 is UP'\n")
    (tmp_path / "scontrol").chmod(0o755)
    assert sched.detect()[0] == "slurm"


def test_recorded_watch_samples_use_the_shared_phases():
    for path in (FIX / "slurm").glob("watch_*.jsonl"):
        for line in path.read_text().splitlines():
            assert json.loads(line)["phase"] in sched.PHASES
