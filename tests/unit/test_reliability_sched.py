"""Scheduler readers of the destructive phase: `scontrol show node -o` recorded on the test cluster's Slurm
(tests/fixtures/slurm/show_node_*.txt) and a Kubernetes NodeList (tests/fixtures/kubectl/get_nodes.json); the
watcher's record of the scheduler's other nodes and the fresh job on a spare that joined, against the stand-in
Slurm (tests/fixtures/fakebin/fake_slurm.py)."""

import copy
import json
import os
import stat
import time
from pathlib import Path

import pytest
from fakes import install_fake_slurm

from probes.cli import run_probe
from probes.common import k8s as sched_k8s
from probes.common import sched
from probes.common import slurm as sched_slurm
from probes.reliability import samples as watch_samples
from probes.reliability import sched_action, sched_watch

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


def test_node_problem_detectors_unhealthy_conditions_are_false_when_well():
    """node-problem-detector's health checkers publish KubeletUnhealthy and ContainerRuntimeUnhealthy, False with
    reason KubeletIsHealthy / ContainerRuntimeIsHealthy on a well node (its config/health-checker-kubelet.json,
    docker-monitor.json). "Unhealthy" ends in "healthy": every well node with NPD read as unhealthy, and a node
    whose kubelet NPD found broken (True) as available."""
    node = k8s_nodes()["gpu-node-1"]
    well = copy.deepcopy(node)
    well["status"]["conditions"][:0] = [
        {"type": "KubeletUnhealthy", "status": "False", "reason": "KubeletIsHealthy",
         "message": "kubelet on the node is functioning properly"},
        {"type": "ContainerRuntimeUnhealthy", "status": "False", "reason": "ContainerRuntimeIsHealthy",
         "message": "Container runtime on the node is functioning properly"}]
    assert sched_k8s.bad_conditions(well) == []
    assert sched_k8s.sample("gpu-node-1", well, 1.0)["phase"] == "available"
    sick = copy.deepcopy(well)
    sick["status"]["conditions"][0].update(status="True", reason="KubeletUnhealthy", message="kubelet:10248 not ok")
    assert sched_k8s.bad_conditions(sick) == ["KubeletUnhealthy=True"]
    assert sched_k8s.sample("gpu-node-1", sick, 1.0)["phase"] == "unhealthy"


def test_kubernetes_fresh_pod_goes_through_the_scheduler():
    spec = sched_k8s.pod_overrides("gpu-node-1", "img", ["nvidia-smi"], 1)["spec"]
    assert "nodeName" not in spec and spec["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}
    assert spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert spec["tolerations"][0]["key"] == "nvidia.com/gpu"
    # AMD nodes: the ROCm device plugin's resource, and its taint tolerated
    amd = sched_k8s.pod_overrides("mi300-1", "img", ["amd-smi", "list"], 1, "amd.com/gpu")["spec"]
    assert amd["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 1}
    assert amd["tolerations"][0]["key"] == "amd.com/gpu"
    with pytest.raises(ValueError, match="gpu_resource"):
        sched_k8s.pod_overrides("n", "img", ["x"], 1, "gpu")


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


# --- The scheduler's other nodes (issue 18: a hot spare joining is seen). The watcher runs for real, detached,
# against the stand-in Slurm (tests/fixtures/fakebin/fake_slurm.py, the recorded scontrol form), as in
# test_reliability_probes.py.

def test_slurm_reading_of_every_node_marks_the_others():
    """The recorded `scontrol show node -o` of the whole test cluster: the named node as before, the others after
    it in name order, marked other, each with its own phase."""
    nodes = slurm_nodes("draining")
    got = sched_slurm.samples(["cmxd-node2"], nodes, 7.0, others=True)
    assert [(s["node"], s["phase"], s.get("other")) for s in got] == [
        ("cmxd-node2", "draining", None), ("cmxd-node1", "available", True), ("cmxd-node3", "available", True),
        ("cmxd-node4", "available", True)]
    assert got[0] == sched_slurm.sample("cmxd-node2", nodes["cmxd-node2"], 7.0)  # the named one unchanged
    assert sched_slurm.samples(["cmxd-node2"], nodes, 7.0) == got[:1]


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    return install_fake_slurm(tmp_path, monkeypatch, {"node1": {"State": "IDLE"}, "node2": {"State": "IDLE"},
                                 "node3": {"State": "DOWN", "Reason": "bad DIMM"}, "node4": {"State": "IDLE"}})


def _set(state, **nodes):
    """Change the stand-in's nodes in one step: the watcher's scontrol never reads a half-written state."""
    doc = json.loads(state.read_text())
    doc.update(nodes)
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, state)


def test_slurm_read_with_others_lists_every_node_in_one_call(fake_slurm):
    got = sched.Scheduler("slurm").read(["node4", "node9"], 3.0, others=True)
    assert [(s["node"], s["phase"], s.get("other")) for s in got] == [
        ("node4", "available", None), ("node9", "missing", None), ("node1", "available", True),
        ("node2", "available", True), ("node3", "down", True)]
    # without a scheduler there is no list of other nodes: the detect command's reading is as before
    assert [s["node"] for s in sched.Scheduler("none", {"detect_command": ["true"]}).read(["n1"], 1.0,
                                                                                           others=True)] == ["n1"]


def test_kubernetes_others_are_read_against_the_pools_taints():
    """The recorded NodeList: gpu-node-1 watched; the others carry the GPU pool's own taint (gpu-node-1 has it at the
    baseline), so only what differs from the pool takes one out of service."""
    nodes = k8s_nodes()
    base = {"gpu-node-1": sched_k8s.taint_keys(nodes["gpu-node-1"])}
    got = {s["node"]: s for s in sched_k8s.samples(["gpu-node-1"], nodes, 1.0, base, others=True)}
    assert not got["gpu-node-1"].get("other") and got["gpu-node-1"]["phase"] == "available"
    assert {n: (s["phase"], s.get("other")) for n, s in got.items() if n != "gpu-node-1"} == {
        "gpu-node-2": ("drained", True), "gpu-node-3": ("down", True), "gpu-node-4": ("drained", True)}
    # the baseline's own reading (no baseline taints yet) reads the others the same way
    first = {s["node"]: s["phase"] for s in sched_k8s.samples(["gpu-node-1"], nodes, 1.0, None, others=True)}
    assert first == {n: s["phase"] for n, s in got.items()}


def _watch(tmp_path, tag, **params):
    base = {"mode": "start", "tag": tag, "scheduler": "slurm", "nodes": ["node4"], "interval": 0.1,
            "others_interval": 0.1, "stop_when": "resolved", "detect_timeout": 60, "remediation_timeout": 60,
            "settle_s": 0.3, "max_s": 60}
    _, start = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="t-start", params=dict(base, **params))
    assert start["status"] == "ok"
    return start


def _lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_watcher_records_other_nodes_by_phase_change_and_ends_once_a_spare_replaced_the_node(fake_slurm, tmp_path):
    """Hot-spare swap on the stand-in Slurm: node4 (watched) drained by a health check and kept out; node1 goes
    from IDLE to ALLOCATED (busy, still in service); node5, not in the scheduler at the start, joins IDLE. The watcher
    keeps every sample of node4, the other nodes' first sample and their phase changes only, and ends by itself once
    node5 has been available for settle_s (stop_when resolved), long before remediation_timeout."""
    start = _watch(tmp_path, "sched_watch-w")
    assert {r["metric"]: r["value"] for r in start["results"] if not r["labels"]} == {"other_nodes": 3}
    assert [r["labels"]["node"] for r in start["results"] if r["metric"] == "available"] == ["node4"]
    time.sleep(0.4)
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "XID 79 in kernel log (health check)"},
         node1={"State": "ALLOCATED"})
    time.sleep(0.4)
    _set(fake_slurm, node5={"State": "IDLE"})
    _, stop = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="t",
                        params={"mode": "stop", "tag": "sched_watch-w", "wait_s": 20})
    assert stop["facts"]["ended_by"] == "resolved"
    samples = _lines(tmp_path / "sched_watch-w.jsonl")
    mine = [s for s in samples if s["node"] == "node4"]
    assert not any(s.get("other") for s in mine) and [s["phase"] for s in mine] == ["available", "drained", "drained"]
    assert mine[-1]["final"] and "slurmd_start" in mine[0]
    others = {}
    for s in samples:
        if s.get("other"):
            others.setdefault(s["node"], []).append(s)
    # compact: node1's IDLE -> ALLOCATED is no change of phase; no other node has a final sample or scontrol's
    # detail fields
    assert {n: [s["phase"] for s in ss] for n, ss in others.items()} == {
        "node1": ["available"], "node2": ["available"], "node3": ["down"], "node5": ["available"]}
    assert all(set(s) == set(watch_samples.OTHER_KEYS) for ss in others.values() for s in ss)
    assert others["node5"][0]["pool"] == mine[0]["pool"] == "batch"  # the partitions, node4's pool
    # node5 was not listed at the baseline: its first sample came later, after node4 went out: node4's spare
    assert others["node5"][0]["t"] > mine[0]["t"] == others["node1"][0]["t"]
    assert watch_samples.spares(samples) == {"node4": ("node5", others["node5"][0]["t"])}
    counts = {r["metric"]: r["value"] for r in stop["results"] if not r["labels"]}
    assert counts["other_samples"] == 4
    assert [r["labels"]["node"] for r in stop["results"] if r["metric"] == "changes"] == ["node4"]


def test_watcher_without_others_reads_only_its_nodes(fake_slurm, tmp_path):
    start = _watch(tmp_path, "sched_watch-o", others=False, stop_when="stop")
    assert not any(r["metric"] == "other_nodes" for r in start["results"])
    run_probe("sched_watch", str(tmp_path), "r", "obs", variant="o", params={"mode": "stop", "tag": "sched_watch-o"})
    assert {s["node"] for s in _lines(tmp_path / "sched_watch-o.jsonl")} == {"node4"}


def test_recorder_marks_an_other_node_gone_only_from_a_readable_reading():
    rec = sched_watch.Recorder(["node4"])
    first = {"node4": {"State": "IDLE"}, "node5": {"State": "IDLE"}}
    assert [s["node"] for s in rec.add(sched_slurm.samples(["node4"], first, 1.0, others=True))] == ["node4", "node5"]
    unreadable = [{"t": 2.0, "node": "node4", "phase": "unknown", "state": None, "reason": "scontrol: timeout"}]
    assert [s["phase"] for s in rec.add(unreadable)] == ["unknown"]  # says nothing about node5
    gone = rec.add(sched_slurm.samples(["node4"], {"node4": {"State": "IDLE"}}, 3.0, others=True))
    assert gone[-1] == {"t": 3.0, "node": "node5", "phase": "missing", "state": None, "reason": None, "pool": None,
                        "other": True}
    assert rec.add(sched_slurm.samples(["node4"], {"node4": {"State": "IDLE"}}, 4.0, others=True)) == []
    # a reading of the watched nodes only (between two readings of every node: others_interval) loses no other node
    rec.add(sched_slurm.samples(["node4"], first, 5.0, others=True))
    assert rec.add(sched_slurm.samples(["node4"], first, 6.0), others=False) == []


def test_fresh_job_on_the_spare_the_watcher_saw_join(fake_slurm, tmp_path):
    """sched_action job with joined_from: the fresh job also runs on node5, which the watcher saw join, labelled with
    its name; node4 (drained, kept out) is skipped as before. node3 (down all along) did not join; node2 (in
    service all along) is no spare."""
    _watch(tmp_path, "sched_watch-j", stop_when="stop")
    time.sleep(0.3)
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "XID 79"}, node5={"State": "IDLE"})
    deadline = time.time() + 20  # until the watcher has read node5 (a busy machine starts scontrol slowly)
    while time.time() < deadline and not any(s["node"] == "node5" for s in watch_samples.read_samples(
            str(tmp_path / "sched_watch-j.jsonl"))):
        time.sleep(0.1)
    run_probe("sched_watch", str(tmp_path), "r", "obs", variant="j", params={"mode": "stop", "tag": "sched_watch-j"})
    assert sched_action.spares(str(tmp_path), "sched_watch-j", ["node4"]) == ["node5"]
    _, job = run_probe("sched_action", str(tmp_path), "r", "obs", variant="j-job",
                       params={"action": "job", "scheduler": "slurm", "nodes": ["node4"], "job_command": ["true"],
                               "joined_from": "sched_watch-j"})
    assert job["facts"]["joined"] == "node5" and job["facts"]["job_skipped_node4"] == "node is drained"
    by_node = {}
    for r in job["results"]:
        by_node.setdefault(r["labels"]["node"], {})[r["metric"]] = r["value"]
    assert list(by_node) == ["node5"]
    assert by_node["node5"]["job_rc"] == 0 and by_node["node5"]["job_ok_at"] >= by_node["node5"]["job_started_at"]
    # a spare that cannot take the job fails it, and says why
    _set(fake_slurm, node5={"State": "MIXED"})
    _, failed = run_probe("sched_action", str(tmp_path), "r", "obs", variant="j-job2",
                          params={"action": "job", "scheduler": "slurm", "nodes": ["node4"], "job_command": ["true"],
                                  "joined_from": "sched_watch-j"})
    assert {r["metric"]: r["value"] for r in failed["results"]}["job_rc"] == 1
    assert "Requested nodes are busy" in failed["facts"]["job_error_node5"]
    # without joined_from, as before: only the named nodes
    _, plain = run_probe("sched_action", str(tmp_path), "r", "obs", variant="j-job3",
                         params={"action": "job", "scheduler": "slurm", "nodes": ["node4"], "job_command": ["true"]})
    assert plain["results"] == [] and "joined" not in plain["facts"]


def _until(path, predicate, timeout=20.0):
    """Wait until the watcher has written a sample meeting predicate (a busy machine starts scontrol slowly)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(predicate(s) for s in watch_samples.read_samples(str(path))):
            return True
        time.sleep(0.1)
    return False


def test_the_watch_of_a_batch_goes_on_while_another_node_is_still_to_be_detected(fake_slurm, tmp_path):
    """Two nodes watched (node4, node2): node4 drained and replaced by node5, settled; node2 not detected yet. The
    watcher keeps running (its seen mode, the fallback's trigger, reads its end as "unseen"); once node2 is out with
    node6 in its place, settled too, it ends by itself."""
    _watch(tmp_path, "sched_watch-b", nodes=["node4", "node2"])
    jsonl = tmp_path / "sched_watch-b.jsonl"
    time.sleep(0.3)
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "XID 79"})
    assert _until(jsonl, lambda s: s["node"] == "node4" and s["phase"] == "drained")
    _set(fake_slurm, node5={"State": "IDLE"})
    assert _until(jsonl, lambda s: s["node"] == "node5")
    time.sleep(1.5)  # node5 settled (0.3 s) several times over
    assert not (tmp_path / "sched_watch-b.done").exists()
    _set(fake_slurm, node2={"State": "IDLE+DRAIN", "Reason": "XID 79"})
    assert _until(jsonl, lambda s: s["node"] == "node2" and s["phase"] == "drained")
    _set(fake_slurm, node6={"State": "IDLE"})
    _, stop = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="b",
                        params={"mode": "stop", "tag": "sched_watch-b", "wait_s": 20})
    assert stop["facts"]["ended_by"] == "resolved"
    assert {n: s for n, (s, _) in watch_samples.spares(_lines(jsonl)).items()} == {"node4": "node5", "node2": "node6"}


def test_the_watcher_reads_the_other_nodes_only_every_others_interval(fake_slurm, tmp_path):
    """others_interval 60 s: after the first reading of every node, node4 is read every poll (its drain is on record)
    and no other node is read again while the watch goes on: node5 joining is not seen then, and no other node is
    taken for gone. The watch's end reads every node once more, so node5 is on record, dated by that last reading."""
    _watch(tmp_path, "sched_watch-i", stop_when="stop", others_interval=60)
    jsonl = tmp_path / "sched_watch-i.jsonl"
    time.sleep(0.3)
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "XID 79"}, node5={"State": "IDLE"})
    assert _until(jsonl, lambda s: s["node"] == "node4" and s["phase"] == "drained")
    time.sleep(0.5)
    assert [(s["node"], s["phase"]) for s in _lines(jsonl) if s.get("other")] == [
        ("node1", "available"), ("node2", "available"), ("node3", "down")]
    t_stop = time.time()
    run_probe("sched_watch", str(tmp_path), "r", "obs", variant="i", params={"mode": "stop", "tag": "sched_watch-i"})
    others = [(s["node"], s["phase"]) for s in _lines(jsonl) if s.get("other")]
    assert others == [("node1", "available"), ("node2", "available"), ("node3", "down"), ("node5", "available")]
    assert [s["t"] for s in _lines(jsonl) if s["node"] == "node5"][0] >= t_stop


def test_fresh_job_goes_to_the_spare_however_many_nodes_joined_before_the_fault(fake_slurm, tmp_path):
    """node3 comes back and node6, node7 join after the watch began but before node4 is taken out; node5 joins after.
    Only node5 is node4's spare (the rule the controller judges by): it gets the job, not those that came first."""
    _watch(tmp_path, "sched_watch-e", stop_when="stop")
    jsonl = tmp_path / "sched_watch-e.jsonl"
    time.sleep(0.3)
    _set(fake_slurm, node3={"State": "IDLE"}, node6={"State": "IDLE"}, node7={"State": "IDLE"})
    assert _until(jsonl, lambda s: s["node"] == "node7")
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "XID 79"})
    assert _until(jsonl, lambda s: s["node"] == "node4" and s["phase"] == "drained")
    _set(fake_slurm, node5={"State": "IDLE"})
    assert _until(jsonl, lambda s: s["node"] == "node5")
    run_probe("sched_watch", str(tmp_path), "r", "obs", variant="e", params={"mode": "stop", "tag": "sched_watch-e"})
    _, job = run_probe("sched_action", str(tmp_path), "r", "obs", variant="e-job",
                       params={"action": "job", "scheduler": "slurm", "nodes": ["node4"], "job_command": ["true"],
                               "joined_from": "sched_watch-e"})
    assert job["facts"]["joined"] == "node5"
    assert {r["labels"]["node"] for r in job["results"]} == {"node5"}


def test_the_pool_of_a_node_as_the_schedulers_tell_it():
    """Slurm: the recorded partitions, sorted; Kubernetes (the recorded NodeList, which carries no GPU product
    label): the allocatable GPUs, else no GPU at all; a product label (GPU feature discovery's) comes first."""
    nodes = slurm_nodes("draining")
    assert sched_slurm.sample("cmxd-node1", nodes["cmxd-node1"], 1.0)["pool"] == "batch"
    assert sched_slurm.pool({"Partitions": "gpu,batch"}) == "batch,gpu" and sched_slurm.pool({}) is None
    assert sched_slurm.sample("gone", None, 1.0)["pool"] is None
    k8s = k8s_nodes()
    assert sched_k8s.sample("gpu-node-1", k8s["gpu-node-1"], 1.0)["pool"] == "nvidia.com/gpu=8"
    assert sched_k8s.sample("gpu-node-2", k8s["gpu-node-2"], 1.0)["pool"] == "no-gpu"
    labelled = json.loads(json.dumps(k8s["gpu-node-1"]))
    labelled["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-80GB-HBM3"
    assert sched_k8s.pool(labelled) == "NVIDIA-H100-80GB-HBM3"


# --- After a reboot: the scheduler heard from a new boot of the node (samples.registered), whatever its phase.
def _drained_line(**changes):
    """cmxd-node2 of the recorded `scontrol show node -o` (IDLE+DRAIN, our reason), with fields changed as slurmctld
    shows them after the node rebooted."""
    line = (FIX / "slurm" / "show_node_drained.txt").read_text().splitlines()[1]
    fields = sched_slurm.parse_show_node(line)["cmxd-node2"]
    for key, value in changes.items():
        line = line.replace("%s=%s" % (key, fields[key]), "%s=%s" % (key, value))
    return sched_slurm.sample("cmxd-node2", sched_slurm.parse_show_node(line)["cmxd-node2"], 10.0)


def test_a_new_boot_is_a_changed_slurmd_start_or_boot_time_and_the_node_answering():
    before = _drained_line()
    assert before["phase"] == "drained" and before["slurmd_start"] == "2026-11-30T05:29:04"
    # the drained state from before the reboot, read before slurmctld noticed the node gone: not back
    assert not watch_samples.registered(before, _drained_line())
    # ReturnToService 0 or 1: slurmd of the new boot registered, slurmctld keeps the node DOWN, with DRAIN and our
    # reason ("Node unexpectedly rebooted", node_mgr.c validate_node_specs): back, phase down all the same
    down = _drained_line(State="DOWN+DRAIN", SlurmdStartTime="2026-11-30T05:40:12", BootTime="2026-11-30T05:39:40")
    assert down["phase"] == "down"
    assert watch_samples.registered(before, down) and watch_samples.new_boot(before, down) == "slurmd_start"
    # the same time, NOT_RESPONDING: slurmctld does not hear from it now
    gone = _drained_line(State="DOWN+DRAIN+NOT_RESPONDING", SlurmdStartTime="2026-11-30T05:40:12")
    assert not watch_samples.registered(before, gone)
    # BootTime=None (scontrol's word for a node not responding) is no new boot; a changed BootTime is one
    assert watch_samples.new_boot(before, _drained_line(BootTime="None")) is None
    assert watch_samples.new_boot(before, _drained_line(BootTime="2026-11-30T05:39:40")) == "boot_time"


def test_a_new_boot_on_kubernetes_is_a_changed_boot_id_with_the_node_ready():
    node = k8s_nodes()["gpu-node-1"]
    taints = sched_k8s.taint_keys(node)  # the GPU pool's own taint, there at the baseline
    before = sched_k8s.sample("gpu-node-1", node, 1.0, taints)
    assert before["boot_id"] and before["phase"] == "available"
    cordoned = json.loads(json.dumps(node))
    cordoned["spec"]["unschedulable"] = True
    # still Ready,SchedulingDisabled for node-monitor-grace-period after the kubelet stopped
    stale = sched_k8s.sample("gpu-node-1", cordoned, 2.0, taints)
    assert stale["phase"] == "drained" and not watch_samples.registered(before, stale)
    cordoned["status"]["nodeInfo"]["bootID"] = "0b6b2a4e-7d7a-4c59-9d0e-5f1d3f4c2a10"
    assert watch_samples.registered(before, sched_k8s.sample("gpu-node-1", cordoned, 3.0, taints))


def _baseline(tmp_path, tag, nodes):
    """The watcher's first reading, written as sched_watch start writes it."""
    reading = sched.Scheduler("slurm").read(nodes, time.time(), others=True)
    sched_watch._append(str(tmp_path / (tag + ".jsonl")), sched_watch.Recorder(nodes).add(reading))


def _return(tmp_path, variant, **params):
    base = {"action": "return", "scheduler": "slurm", "nodes": ["node4"], "resume": ["node4"], "interval": 0.1,
            "timeout": 5, "job_command": ["true"], "booted_from": "sched_watch-reboot-b1"}
    _, doc = run_probe("sched_action", str(tmp_path), "r", "obs", variant=variant, params=dict(base, **params))
    by_node = {}
    for r in doc["results"]:
        by_node.setdefault(r["labels"]["node"], {})[r["metric"]] = r["value"]
    return doc, by_node.get("node4", {})


def test_return_resumes_a_node_slurm_kept_down_for_rebooting_unexpectedly(fake_slurm, tmp_path, monkeypatch):
    """ReturnToService 1 (the recorded `scontrol show config`): node4 rebooted by ansible.builtin.reboot, slurmd of
    the new boot registered and slurmctld shows it DOWN+DRAIN with our reason. The return action takes it as back
    (a new SlurmdStartTime), resumes it and runs the fresh job; before, it waited the whole timeout for a phase it
    never saw, and resumed nothing."""
    monkeypatch.setenv("FAKE_SLURM_CONFIG", str(FIX / "audit" / "scontrol-show-config_h100.txt"))
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "clustermax.assess reboot test"})
    _baseline(tmp_path, "sched_watch-reboot-b1", ["node4"])
    _set(fake_slurm, node4={"State": "DOWN+DRAIN", "Reason": "clustermax.assess reboot test",
                            "SlurmdStartTime": "2026-11-30T06:02:11", "BootTime": "2026-11-30T06:01:40"})
    # a timeout far longer than the return takes: it ends when the fresh job ran (no timed assertion: under load
    # the 5 s default left a second of margin, and CI-like load took more)
    doc, got = _return(tmp_path, "reboot-b1-return", timeout=60)
    assert doc["facts"]["registered_by_node4"] == "new boot (slurmd_start changed)"
    assert doc["facts"]["return_to_service"] == "1"
    assert got["available"] == 1 and got["job_rc"] == 0
    assert got["registered_at"] <= got["resume_issued_at"] <= got["available_at"] <= got["job_ok_at"]
    assert json.loads(fake_slurm.read_text())["node4"]["State"] == "IDLE"


def test_return_waits_for_a_new_boot_not_the_drained_state_from_before(fake_slurm, tmp_path):
    """A fast reboot slurmctld has not noticed yet: node4 still shows IDLE+DRAIN with the SlurmdStartTime of the boot
    before. That is no return: nothing is resumed (before, it was resumed at once, and the fresh job timed)."""
    _set(fake_slurm, node4={"State": "IDLE+DRAIN", "Reason": "clustermax.assess reboot test"})
    _baseline(tmp_path, "sched_watch-reboot-b1", ["node4"])
    doc, got = _return(tmp_path, "reboot-b1-return", timeout=1.0)
    assert "registered_at" not in got and "resume_issued_at" not in got and got["available"] == 0
    assert doc["facts"]["not_registered_node4"] == "drained (clustermax.assess reboot test; no new boot seen)"
    assert json.loads(fake_slurm.read_text())["node4"]["State"] == "IDLE+DRAIN"
    # Slurm's ReturnToService is recorded as what could be read: this stand-in prints no configuration
    assert doc["facts"]["return_to_service"].startswith("unknown (scontrol show config")
