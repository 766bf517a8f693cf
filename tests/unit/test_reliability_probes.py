"""The reliability probes run for real on this machine: the watcher process, scheduler actions against a stand-in
Slurm (tests/fixtures/fakebin/fake_slurm.py, same output form as the recorded scontrol), fault injection into a file
standing for /dev/kmsg and through a stand-in dcgmi, and the per-node record probes (raw observations only: the
timings are computed on the controller, tests/unit/test_reliability_grade.py and test_reliability_timeline.py)."""

import json
import os
import time
from pathlib import Path

import pytest
from fakes import install_fake_slurm

from probes.cli import run_probe
from probes.common.device import sysfs_bdf
from probes.reliability.fault_inject import upstream_bridge, xid_pci

FIX = Path(__file__).resolve().parents[1] / "fixtures"
META = json.loads((FIX / "slurm" / "sequences.json").read_text())
BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def results(doc, **labels):
    return {r["metric"]: r["value"] for r in doc["results"] if all(r["labels"].get(k) == v for k, v in labels.items())
            and (labels or not r["labels"])}


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    return install_fake_slurm(tmp_path, monkeypatch, {"n1": {"State": "IDLE"}, "n2": {"State": "IDLE"},
                                                      "n3": {"State": "DOWN", "Reason": "broken"}})


def test_boot_id(tmp_path):
    _, doc = run_probe("boot_id", str(tmp_path), "r", "h")
    assert doc["status"] == "ok" and doc["facts"]["boot_id"] == BOOT_ID
    m = results(doc)
    assert m["uptime_s"] > 0 and abs(m["command_ran_at"] - time.time()) < 60


def test_scheduler_detection_and_state(fake_slurm, tmp_path):
    _, doc = run_probe("sched_action", str(tmp_path), "r", "obs",
                       params={"action": "state", "scheduler": "auto", "nodes": ["n1", "n3", "n9"]})
    assert doc["facts"]["scheduler"] == "slurm"
    got = {r["labels"]["node"]: (r["value"], r["labels"]["phase"]) for r in doc["results"]}
    assert got == {"n1": (1, "available"), "n3": (0, "down"), "n9": (0, "missing")}


def test_drain_return_and_restore_against_a_stand_in_slurm(fake_slurm, tmp_path):
    _, drain = run_probe("sched_action", str(tmp_path), "r", "obs", variant="drain",
                         params={"action": "drain", "scheduler": "slurm", "nodes": ["n1", "n2"],
                                 "reason": "clustermax.assess reboot test", "timeout": 5, "interval": 0.1})
    assert drain["status"] == "ok", drain.get("reason")
    assert results(drain, node="n1")["drained"] == 1
    assert results(drain, node="n1")["drained_at"] >= results(drain, node="n1")["drain_issued_at"]
    state = json.loads(fake_slurm.read_text())
    assert state["n1"].pop("ReasonTime")  # the stand-in stamps the reason, as slurmctld does
    assert state["n1"] == {"State": "IDLE+DRAIN", "Reason": "clustermax.assess reboot test"}
    _, ret = run_probe("sched_action", str(tmp_path), "r", "obs", variant="return",
                       params={"action": "return", "scheduler": "slurm", "nodes": ["n1", "n2"], "resume": ["n1"],
                               "timeout": 1, "interval": 0.2, "job_command": ["true"]})
    n1 = results(ret, node="n1")
    assert n1["available"] == 1 and n1["job_rc"] == 0
    stamps = ("registered_at", "resume_issued_at", "available_at", "job_started_at", "job_ok_at")
    assert [n1[k] for k in stamps] == sorted(n1[k] for k in stamps)
    # n2 was not to be resumed: it stays drained, no job ran there
    n2 = results(ret, node="n2")
    assert n2["available"] == 0 and "resume_issued_at" not in n2 and "job_ok_at" not in n2
    _, restore = run_probe("sched_action", str(tmp_path), "r", "obs", variant="restore",
                           params={"action": "restore", "scheduler": "slurm", "nodes": ["n1", "n2", "n3"],
                                   "resume": ["n1", "n2"]})
    assert results(restore, node="n2")["resumed"] == 1 and results(restore, node="n1")["resumed"] == 0
    assert results(restore, node="n2")["available_after_restore"] == 1
    state = json.loads(fake_slurm.read_text())
    assert state["n2"]["State"] == "IDLE" and state["n3"]["State"] == "DOWN"  # n3 was not ours to resume


def _start_resolving_watcher(tmp_path, name, before_check):
    """A watcher of node n1 (tag sched_watch-<name>) that stops once a fault is seen and resolved, whose detect
    command runs `before_check` (shell lines) and then reports XID 79 while the returned flag file exists. Returns
    (flag, the start probe's artifact)."""
    flag = tmp_path / "unhealthy"
    check = tmp_path / "check"
    check.write_text("#!/bin/sh\n%s[ -e %s ] && { echo 'XID 79'; exit 1; }\nexit 0\n" % (before_check, flag))
    check.chmod(0o755)
    params = {"mode": "start", "tag": "sched_watch-" + name, "scheduler": "none", "nodes": ["n1"], "interval": 0.1,
              "stop_when": "resolved", "detect_timeout": 30, "remediation_timeout": 0.5, "settle_s": 0.2,
              "max_s": 60, "options": {"detect_command": [str(check), "{node}"]}}
    return flag, run_probe("sched_watch", str(tmp_path), "r", "obs", variant=name + "-start", params=params)[1]


def test_watcher_runs_detached_resolves_by_itself_and_is_collected(tmp_path):
    flag, start = _start_resolving_watcher(tmp_path, "t", "")
    assert start["status"] == "ok" and results(start, node="n1")["available"] == 1
    pid = int(start["facts"]["watcher_pid"])
    time.sleep(0.5)
    flag.write_text("")
    _, stop = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="t",
                        params={"mode": "stop", "tag": "sched_watch-t", "wait_s": 20})
    assert stop["facts"]["ended_by"] == "resolved"
    assert stop["raw"] == ["sched_watch-t.jsonl"]
    samples = [json.loads(x) for x in (tmp_path / "sched_watch-t.jsonl").read_text().splitlines()]
    assert [s["phase"] for s in samples] == ["available", "unhealthy", "unhealthy"]
    assert samples[-1]["final"] and samples[1]["reason"] == "XID 79"
    assert results(stop)["polls"] >= 3
    time.sleep(0.2)
    assert not Path("/proc/%d" % pid).exists() or "Z" in Path("/proc/%d/stat" % pid).read_text().split(")")[1][:3]


def test_a_fault_that_lands_during_a_reading_is_never_dated_before_it(tmp_path):
    """The race behind the fault_injection molecule flake (issue 25): a reading that was asked before the fault and
    answered after it reports the fault. Stamped when it was asked, it dated the detection before the injection, so
    the node looked out of service before its fault and the injection was judged unmeasurable. Forced here: each
    reading takes 0.6 s and announces when it begins; the fault lands 0.2 s into one."""
    flag, start = _start_resolving_watcher(tmp_path, "r", "touch %s/reading.$$\nsleep 0.6\n" % tmp_path)
    assert start["status"] == "ok" and results(start, node="n1")["available"] == 1
    before = set(tmp_path.glob("reading.*"))  # the baseline reading, answered already
    deadline = time.time() + 20
    while not set(tmp_path.glob("reading.*")) - before and time.time() < deadline:
        time.sleep(0.02)
    assert set(tmp_path.glob("reading.*")) - before, "the watcher never began a reading"
    time.sleep(0.2)
    t_fault = time.time()
    flag.write_text("")
    _, stop = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="r",
                        params={"mode": "stop", "tag": "sched_watch-r", "wait_s": 20})
    assert stop["facts"]["ended_by"] == "resolved"
    samples = [json.loads(x) for x in (tmp_path / "sched_watch-r.jsonl").read_text().splitlines()]
    unhealthy = [s for s in samples if s["phase"] == "unhealthy"]
    assert unhealthy and samples[0]["phase"] == "available"
    assert unhealthy[0]["t"] >= t_fault, (unhealthy[0]["t"], t_fault)


def test_a_stop_that_finds_the_watchers_last_word_half_written_waits_for_all_of_it(tmp_path):
    """The race behind a clean-clone failure (2026-12-05, ended_by "unknown" instead of "resolved"): the watcher wrote
    its last word with open() then json.dump(), and a stop that saw the file appear in between read it empty. Forced
    here: a real watcher is killed (it writes nothing), its file is there but empty, and the whole of it comes 0.6 s
    after the stop began. The watcher now writes it aside and renames it; a stop waits until it reads."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    from probes.reliability import sched_watch  # noqa: PLC0415

    params = {"mode": "start", "tag": "sched_watch-h", "scheduler": "none", "nodes": ["n1"], "interval": 0.1,
              "max_s": 60, "options": {"detect_command": ["true"]}}
    _, start = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="h-start", params=params)
    assert start["status"] == "ok"
    paths = sched_watch._paths(str(tmp_path), "sched_watch-h")
    os.kill(int(Path(paths["pid"]).read_text()), signal.SIGKILL)
    time.sleep(0.3)
    Path(paths["done"]).write_text("")  # opened, not yet written
    got = {}
    stopper = threading.Thread(target=lambda: got.update(doc=run_probe(
        "sched_watch", str(tmp_path), "r", "obs", variant="h", params={"mode": "stop", "tag": "sched_watch-h",
                                                                       "wait_s": 20})[1]))
    stopper.start()
    time.sleep(0.6)
    sched_watch._write_done(paths["done"], {"ended_by": "resolved", "polls": 7, "unreadable_polls": 0,
                                            "t_start": 1.0, "t_end": 2.0})
    stopper.join(60)
    assert got["doc"]["facts"]["ended_by"] == "resolved"
    assert results(got["doc"])["polls"] == 7 and not Path(paths["done"] + ".tmp").exists()


def test_watcher_is_stopped_on_request_and_a_second_stop_only_collects(tmp_path):
    params = {"mode": "start", "tag": "sched_watch-s", "scheduler": "none", "nodes": ["n1"], "interval": 0.1,
              "max_s": 60, "options": {"detect_command": ["true"]}}
    run_probe("sched_watch", str(tmp_path), "r", "obs", variant="s-start", params=params)
    _, stop = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="s",
                        params={"mode": "stop", "tag": "sched_watch-s"})
    assert stop["facts"]["ended_by"] == "stop"
    _, again = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="s2",
                         params={"mode": "stop", "tag": "sched_watch-s"})
    assert again["status"] == "ok" and not (tmp_path / "sched_watch-s.pid").exists()
    _, none = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="n", params={"mode": "stop", "tag": "x"})
    assert none["status"] == "skipped"


def test_watcher_refuses_an_unreadable_scheduler(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    _, doc = run_probe("sched_watch", str(tmp_path), "r", "obs",
                       params={"mode": "start", "tag": "w", "scheduler": "slurm", "nodes": ["n1"]})
    assert doc["status"] == "error" and "scontrol" in doc["reason"]
    assert not (tmp_path / "w.pid").exists()


def test_kmsg_injection_writes_the_driver_form_with_a_marker(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no dcgmi, no nvidia-smi
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    _, doc = run_probe("fault_inject", str(tmp_path), "run7", "node4",
                       params={"xid": 79, "message": "GPU has fallen off the bus.", "kmsg_path": str(kmsg)})
    assert doc["status"] == "ok" and doc["facts"]["method"] == "kmsg"
    assert doc["facts"]["method_dcgm"] == "dcgmi not found"
    line = kmsg.read_text()
    assert line.startswith("<3>NVRM: Xid (PCI:0000:00:00): 79, pid=")
    assert line.rstrip().endswith("GPU has fallen off the bus. clustermax.assess injection run=run7 node=node4")
    assert results(doc, method="kmsg", xid=79)["injected_at"] > 0
    assert not [r for r in doc["results"] if r["metric"] == "event_at"]  # no observer's clock given
    # the observer's clock read before the task, as raw brings it back over a terminal (a banner, CRLF)
    _, doc = run_probe("fault_inject", str(tmp_path), "run7", "node4", params={
        "xid": 79, "kmsg_path": str(kmsg),
        "observer_clock": "Authorized uses only.\r\nclustermax-assess-clock: 1800000001.250\r\n"})
    assert [(r["labels"]["event"], r["value"]) for r in doc["results"] if r["metric"] == "event_at"] == [
        ("inject_started_observer", 1800000001.25)]


def test_no_method_works_is_a_skip_with_every_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    _, doc = run_probe("fault_inject", str(tmp_path), "r", "h",
                       params={"xid": 79, "kmsg_path": str(tmp_path / "no" / "kmsg")})
    assert doc["status"] == "skipped"
    assert "dcgm: dcgmi not found" in doc["reason"] and "kmsg: cannot open" in doc["reason"]
    assert "pcie_bridge_reset: no NVIDIA GPU" in doc["reason"]
    assert "amdgpu_ras: no AMD GPU on this node" in doc["reason"]  # a node without GPUs: tried, and why not


def test_dcgm_injection_is_held_and_cleared(tmp_path, monkeypatch):
    calls = tmp_path / "dcgmi.calls"
    (tmp_path / "dcgmi").write_text("#!/bin/sh\necho \"$@\" >> %s\n" % calls)
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\ncat %s\n" % (FIX / "nvidia-smi" / "h100_8x_query.csv"))
    for tool in ("dcgmi", "nvidia-smi"):
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    _, doc = run_probe("fault_inject", str(tmp_path), "r", "h", params={"xid": 48, "gpu_index": 2, "hold_s": 30})
    assert doc["status"] == "ok" and doc["facts"]["method"] == "dcgm" and doc["device"]["backend"] == "cuda"
    time.sleep(1.5)  # the hold helper injects again every second
    _, clear = run_probe("fault_inject", str(tmp_path), "r", "h", variant="clear",
                         params={"mode": "clear", "gpu_index": 2})
    assert results(clear, method="dcgm")["cleared"] == 1
    lines = calls.read_text().splitlines()
    assert lines[0] == "--version"
    assert lines[1] == "test --inject --gpuid 2 -f 230 -v 48"
    assert lines.count("test --inject --gpuid 2 -f 230 -v 48") >= 2
    assert lines[-1] == "test --inject --gpuid 2 -f 230 -v 0"
    assert not (tmp_path / "fault_inject-dcgm.pid").exists()


def test_pci_names_and_upstream_bridge(tmp_path):
    assert xid_pci("00000000:3B:00.0") == "0000:3b:00"
    assert xid_pci("garbage") == "0000:00:00"
    assert sysfs_bdf("00000000:3B:00.0") == "0000:3b:00.0"
    dev = tmp_path / "devices" / "pci0000:3a" / "0000:3a:00.0" / "0000:3b:00.0"
    dev.mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices").mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices" / "0000:3b:00.0").symlink_to(dev)
    assert upstream_bridge("0000:3b:00.0", str(tmp_path)) == "0000:3a:00.0"
    root = tmp_path / "devices" / "pci0000:00" / "0000:00:01.0"
    root.mkdir(parents=True)
    (tmp_path / "bus" / "pci" / "devices" / "0000:00:01.0").symlink_to(root)
    assert upstream_bridge("0000:00:01.0", str(tmp_path)) is None


def test_reboot_probe_records_only_what_the_controller_saw(tmp_path):
    ev = META["watch_reboot.jsonl"]["events"]
    params = {"node": "cmxd-node2", "scheduler": "slurm", "batch": 1, "observer": "cmxd-node1", "stage": "reboot-b1",
              "reboot": {"started": ev["reboot_started"], "returned": ev["reboot_returned"], "elapsed": 4}}
    _, doc = run_probe("reboot", str(tmp_path), "r", "cmxd-node2", params=params)
    assert doc["status"] == "ok"
    assert doc["facts"] == {"node": "cmxd-node2", "scheduler": "slurm", "batch": "1", "observer": "cmxd-node1",
                            "stage": "reboot-b1"}
    events = {r["labels"]["event"]: r["value"] for r in doc["results"] if r["metric"] == "event_at"}
    assert events == {"reboot_started": ev["reboot_started"], "reboot_returned": ev["reboot_returned"]}
    assert results(doc) == {"reboot_module_elapsed_s": 4}
    # the observer's clock reading of the start, as raw brings it back over a terminal (a banner, CRLF)
    params["reboot"] = dict(params["reboot"], started_observer=(
        "Authorized uses only. All activity may be monitored.\r\nclustermax-assess-clock: 1800000001.250\r\n"))
    _, doc = run_probe("reboot", str(tmp_path), "r", "cmxd-node2", params=params)
    events = {r["labels"]["event"]: r["value"] for r in doc["results"] if r["metric"] == "event_at"}
    assert events["reboot_started_observer"] == 1800000001.25
    del params["reboot"]["started_observer"]
    # the module failed: when its wait ended is no return, and its message is kept
    params["reboot"] = dict(params["reboot"], error="Timed out waiting for last boot time check (timeout=1800)")
    _, failed = run_probe("reboot", str(tmp_path), "r", "cmxd-node2", params=params)
    assert failed["facts"]["reboot_error"].startswith("Timed out")
    assert [r["labels"]["event"] for r in failed["results"] if r["metric"] == "event_at"] == ["reboot_started"]
    _, skipped = run_probe("reboot", str(tmp_path), "r", "h", params={"skip": "not among reboot_hosts"})
    assert skipped["status"] == "skipped" and skipped["reason"] == "not among reboot_hosts"


def test_fault_injection_probe_records_which_observations_belong_to_the_node(tmp_path):
    params = {"node": "cmxd-node4", "scheduler": "slurm", "batch": 1, "observer": "cmxd-node1", "stage": "fault-b1",
              "xid": 79}
    _, doc = run_probe("fault_injection", str(tmp_path), "r", "cmxd-node4", params=params)
    assert doc["status"] == "ok" and doc["results"] == []
    assert doc["facts"] == {"node": "cmxd-node4", "scheduler": "slurm", "batch": "1", "observer": "cmxd-node1",
                            "stage": "fault-b1", "xid": "79"}
    _, skipped = run_probe("fault_injection", str(tmp_path), "r", "h", params={"skip": "not injected: ..."})
    assert skipped["status"] == "skipped" and skipped["reason"] == "not injected: ..."


def test_seen_waits_for_the_running_watcher_to_see_each_node_go_out(tmp_path):
    """The fault-injection role's fallback step: n1 goes unhealthy after its injection and is seen; n2 never does and
    is reported unseen once wait_s is over; the watcher goes on."""
    flag = tmp_path / "n1.bad"
    check = tmp_path / "check"
    check.write_text("#!/bin/sh\n[ -e %s/$1.bad ] && { echo 'XID 79'; exit 1; }\nexit 0\n" % tmp_path)
    check.chmod(0o755)
    params = {"mode": "start", "tag": "sched_watch-f", "scheduler": "none", "nodes": ["n1", "n2"], "interval": 0.1,
              "max_s": 60, "options": {"detect_command": [str(check), "{node}"]}}
    _, start = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="f-start", params=params)
    pid = int(start["facts"]["watcher_pid"])
    try:
        flag.write_text("")
        t0 = time.time()
        _, seen = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="f-seen",
                            params={"mode": "seen", "tag": "sched_watch-f", "wait_s": 3, "nodes": ["n1", "n2"]})
        assert seen["status"] == "ok"
        assert results(seen, node="n1") == {"seen": 1} and results(seen, node="n2") == {"seen": 0}
        assert time.time() - t0 >= 3  # n2 was waited for the whole wait_s
        # n1 alone: seen at once, no wait
        t0 = time.time()
        _, again = run_probe("sched_watch", str(tmp_path), "r", "obs", variant="f-seen2",
                             params={"mode": "seen", "tag": "sched_watch-f", "wait_s": 30, "nodes": ["n1"]})
        assert results(again, node="n1") == {"seen": 1} and time.time() - t0 < 25
        assert Path("/proc/%d" % pid).exists()  # the watcher goes on
    finally:
        run_probe("sched_watch", str(tmp_path), "r", "obs", variant="f",
                  params={"mode": "stop", "tag": "sched_watch-f"})
