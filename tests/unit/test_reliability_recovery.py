"""playbooks/recover.yml's two halves without Ansible: the plan read from a run's records on the controller
(reports/phases/reliability/recovery.py) and the leftovers probe on a node, with the real watcher and scheduler
actions against the stand-in Slurm (tests/fixtures/fakebin/fake_slurm.py) that test_reliability_probes.py uses."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import install_fake_slurm

from probes.artifact import Artifact, write_json_atomic
from probes.cli import run_probe
from probes.reliability import leftovers
from reports.phases.reliability import recovery

FIX = Path(__file__).resolve().parents[1] / "fixtures"
# Unique per session: the leftovers probe finds processes by their run, and never those of another test run.
RUN_ID = "20261203T120000Z-%06x" % (os.getpid() & 0xFFFFFF)


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    return install_fake_slurm(tmp_path, monkeypatch, {n: {"State": "IDLE"} for n in ("n1", "n2", "n3")})


def _set_state(state_file, node, state, reason=None):
    """What a health check's `scontrol update` does to the stand-in Slurm (its reason stamped now)."""
    nodes = json.loads(state_file.read_text())
    nodes[node] = {"State": state} if reason is None else {
        "State": state, "Reason": reason, "ReasonTime": time.strftime("%Y-%m-%dT%H:%M:%S")}
    state_file.write_text(json.dumps(nodes))


def _run_dir(tmp_path, journal=()):
    run_dir = tmp_path / "runs" / "acme" / RUN_ID
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"id": RUN_ID, "provider": "acme",
                                                         "hosts": ["h1", "h2", "h3"]}))
    (run_dir / "journal.jsonl").write_text("".join(json.dumps(x) + "\n" for x in journal))
    return run_dir


def _keep(run_dir, host, path):
    """The controller's copy of an artifact the probe wrote on the node."""
    dest = run_dir / "artifacts" / host
    dest.mkdir(exist_ok=True)
    shutil.copy(path, dest / os.path.basename(path))


def _probe(node_dir, host, name, variant, params):
    path, doc = run_probe(name, str(node_dir), RUN_ID, host, variant=variant, params=params)
    assert doc["status"] in ("ok", "skipped"), doc.get("reason")
    return path, doc


def _catches_sigterm(pid):
    """Whether the process has its own SIGTERM handler yet (/proc/<pid>/status SigCgt, bit 15)."""
    try:
        line = next(x for x in Path("/proc/%d/status" % pid).read_text().splitlines() if x.startswith("SigCgt:"))
    except (OSError, StopIteration):
        return False
    return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))


def _found(count):
    """leftovers.find(RUN_ID) once it sees count processes, each running its own code (at most 30 s). Only a test
    looks this soon after the start, where two things are not there yet:
    - the command line: the kernel resumes a vfork parent (and closes the close-on-exec pipe Popen waits on) before
      it has set up the new program's arguments, so /proc/<pid>/cmdline may be empty for a moment;
    - the helper's SIGTERM handler (it ends cleanly on SIGTERM: the watcher writes its end, the hold clears the
      field): until Python has imported the helper, SIGTERM kills it outright (a clean-clone failure under load)."""
    deadline = time.time() + 30
    while time.time() < deadline:
        found = leftovers.find(RUN_ID)
        if len(found) >= count and all(_catches_sigterm(pid) for pid, _ in found):
            break
        time.sleep(0.05)
    return found


def _alive(pid):
    try:
        return Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_a_killed_batch_is_open_its_watcher_is_stopped_and_its_nodes_resumed(fake_slurm, tmp_path):
    # The node's working directory, named as preflight names it: what the leftovers probe finds processes by.
    node_dir = tmp_path / ("clustermax-assess-%s" % RUN_ID) / "artifacts"
    run_dir = _run_dir(tmp_path)
    started = []
    try:
        start, doc = _probe(node_dir, "h1", "sched_watch", "fault-b1-start",
                            {"mode": "start", "tag": "sched_watch-fault-b1", "scheduler": "slurm",
                             "nodes": ["n2", "n3"], "interval": 0.1, "max_s": 120})
        watcher = int(doc["facts"]["watcher_pid"])
        started.append(watcher)
        _keep(run_dir, "h1", start)
        # the provider's health check drains n2 after the injection; then the controller dies: no restore artifact
        _set_state(fake_slurm, "n2", "IDLE+DRAIN", "XID 79 in kernel log (health check)")

        # another run's watcher on the same node is not ours to stop
        other_dir = tmp_path / "clustermax-assess-otherrun" / "artifacts"
        _, other = _probe(other_dir, "h1", "sched_watch", "fault-b1-start",
                          {"mode": "start", "tag": "sched_watch-fault-b1", "scheduler": "slurm", "nodes": ["n1"],
                           "interval": 0.1, "max_s": 120})
        other_pid = int(other["facts"]["watcher_pid"])
        started.append(other_pid)

        plan = recovery.plan(str(run_dir))
        assert plan["run_id"] == RUN_ID and plan["hosts"] == ["h1", "h2", "h3"]
        [stage] = plan["open"]
        t0, t1 = stage.pop("drained_between")
        assert stage == {"stage": "fault-b1", "test": "fault_injection", "observer": "h1", "scheduler": "slurm",
                         "open": True, "why": "the run ended before the batch's last steps", "resume": ["n2", "n3"],
                         "keep_out": {}}
        # from the batch's start until its detection window (600 s by default) after the run's last sign of life
        assert abs(t0 - time.time()) < 60 and t1 == pytest.approx(t0 + 600, abs=1)

        assert _found(1) == [(watcher, "watcher")]
        _, left = run_probe("leftovers", str(tmp_path / "recovery"), "rec", "h1", params={"run_id": RUN_ID})
        assert left["status"] == "ok"
        assert {r["labels"].get("kind"): r["value"] for r in left["results"] if r["metric"] == "stopped"} == {
            "watcher": 1, "dcgm_hold": 0}
        assert left["facts"]["watcher_pids"] == str(watcher)
        time.sleep(0.3)
        assert not _alive(watcher) and _alive(other_pid)
        # stopped by SIGTERM: the watcher wrote its end, as a stopped one does
        assert json.loads((node_dir / "sched_watch-fault-b1.done").read_text())["ended_by"] == "signal"

        # Meanwhile (say an hour after the detection window) an admin drained n3 for a reason of their own: Slurm's
        # stamp on the reason tells it from the batch's drains.
        nodes = json.loads(fake_slurm.read_text())
        nodes["n3"] = {"State": "IDLE+DRAIN", "Reason": "bad DIMM",
                       "ReasonTime": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t1 + 3600))}
        fake_slurm.write_text(json.dumps(nodes))

        # what recover.yml then runs on the observer: the batch's restore, with the plan's nodes and window
        _, restore = run_probe("sched_action", str(tmp_path / "recovery"), "rec", "h1", variant="recover-fault-b1",
                               params={"action": "restore", "scheduler": "slurm", "nodes": stage["resume"],
                                       "resume": stage["resume"], "drained_between": [t0, t1], "timeout": 5,
                                       "interval": 0.1})
        resumed = {r["labels"]["node"]: r["value"] for r in restore["results"] if r["metric"] == "resumed"}
        assert resumed == {"n2": 1, "n3": 0}
        assert restore["facts"]["kept_n3"].startswith("drained at ") and "bad DIMM" in restore["facts"]["kept_n3"]
        state = json.loads(fake_slurm.read_text())
        assert state["n2"]["State"] == "IDLE" and state["n3"]["State"] == "IDLE+DRAIN"
    finally:
        for pid in started:
            if _alive(pid):
                os.kill(pid, 9)


def test_a_helpers_fork_that_has_not_yet_run_its_program_is_not_a_second_helper(tmp_path):
    """The watcher runs sinfo/scontrol every poll: between its fork and the exec, the child shows the watcher's
    command line (a clean-clone CI run found two watchers where there was one). Here the fork is held there."""
    workdir = str(tmp_path / ("clustermax-assess-%s" % RUN_ID))
    code = ("import os, sys, time\n"
            "pid = os.fork()\n"
            "if pid == 0:\n    time.sleep(60); os._exit(0)\n"
            "sys.stdout.write('%d\\n' % pid); sys.stdout.flush(); time.sleep(60)")
    with subprocess.Popen([sys.executable, "-c", code, json.dumps({"out_dir": workdir}), "clustermax-assess-watch=t"],
                          stdout=subprocess.PIPE, start_new_session=True) as helper:
        try:
            fork = int(helper.stdout.readline())
            deadline = time.time() + 30
            while time.time() < deadline and b"clustermax-assess-watch=t" not in leftovers.procs.cmdline(fork):
                time.sleep(0.05)
            assert leftovers.procs.parent(fork) == helper.pid
            assert leftovers.find(RUN_ID) == [(helper.pid, "watcher")]
        finally:
            os.killpg(helper.pid, signal.SIGKILL)


def _art(probe, host, variant=None):
    return Artifact(probe, RUN_ID, host, variant=variant)


def _write(run_dir, art):
    doc = art.to_dict()
    name = doc["probe"] + ("-%s" % doc["variant"] if doc.get("variant") else "") + ".json"
    write_json_atomic(str(run_dir / "artifacts" / doc["host"] / name), doc)


def _watch_start(run_dir, stage, nodes, observer="h1"):
    art = _art("sched_watch", observer, stage + "-start")
    art.facts.update(scheduler="slurm", tag="sched_watch-" + stage)
    for node, up in nodes.items():
        art.add("available", 1 if up else 0, "bool", node=node, phase="available" if up else "drained")
    _write(run_dir, art)


def test_closed_batches_are_left_alone_a_reboot_batch_resumes_what_it_drained(tmp_path):
    run_dir = _run_dir(tmp_path)
    _watch_start(run_dir, "reboot-b1", {"n2": True, "n3": True})
    drain = _art("sched_action", "h1", "reboot-b1-drain")
    drain.add("drain_issued_at", 1.0, "s_epoch", node="n2")
    _write(run_dir, drain)
    _watch_start(run_dir, "fault-b1", {"n2": True, "n3": False})
    restore = _art("sched_action", "h1", "fault-b1-restore")
    restore.add("resumed", 1, "bool", node="n2", was="drained", reason="XID 79")
    _write(run_dir, restore)
    # a restore that failed leaves its batch open
    _watch_start(run_dir, "fault-b2", {"n3": True})
    failed = _art("sched_action", "h1", "fault-b2-restore")
    failed.error("scontrol: Unable to contact slurm controller")
    _write(run_dir, failed)
    # a batch whose last step wrote its nodes' records without a restore (fault_injection_restore: false) is closed:
    # its nodes stay as the user chose
    _watch_start(run_dir, "fault-b3", {"n2": True})
    record = _art("fault_injection", "h2")
    record.facts.update(node="n2", stage="fault-b3", batch="3", observer="h1", scheduler="slurm", xid="79")
    _write(run_dir, record)
    plan = recovery.plan(str(run_dir))
    assert [(s["stage"], s["open"], s["resume"]) for s in plan["stages"]] == [
        ("fault-b1", False, ["n2"]), ("fault-b2", True, ["n3"]), ("fault-b3", False, ["n2"]),
        ("reboot-b1", True, ["n2"])]
    assert [s["stage"] for s in plan["open"]] == ["fault-b2", "reboot-b1"]
    why = {s["stage"]: s["why"] for s in plan["stages"]}
    assert why["fault-b2"] == "its restore did not finish: scontrol: Unable to contact slurm controller"
    assert why["fault-b3"].startswith("the batch ended without a restore")


def test_a_dead_runs_window_lasts_until_its_dcgm_holds_stop_and_their_fault_can_no_longer_be_seen(tmp_path):
    """A DCGM hold re-injects its XID for hold_s (detect + remediation timeouts) after its injection, whether or not
    the controller lives: a health check that drains the node again in that time (after the site's automation put
    it back) drains it for our fault, so recover.yml resumes it."""
    run_dir = _run_dir(tmp_path)
    _watch_start(run_dir, "fault-b1", {"n2": True, "n3": True})
    _watch_start(run_dir, "fault-b2", {"n3": True})
    start = recovery.parse_time(json.loads((run_dir / "artifacts" / "h1" / "sched_watch-fault-b1-start.json")
                                           .read_text())["started_at"])
    inject = Artifact("fault_inject", RUN_ID, "h2", params={"hold_s": 2400})
    inject.facts.update(method="dcgm", dcgm_gpu="0", dcgm_field="230")
    inject.add("injected_at", start + 5.0, "s_epoch", method="dcgm", xid=79)
    _write(run_dir, inject)
    info = _art("node_info", "h2")
    info.facts["hostname"] = "n2.cluster.example"
    _write(run_dir, info)
    stages = {s["stage"]: s for s in recovery.plan(str(run_dir))["stages"]}
    # b1 held n2's fault until 2400 s after its injection, detectable 600 s (detect_timeout's default) after that
    t0, t1 = stages["fault-b1"]["drained_between"]
    assert t0 == start and t1 == pytest.approx(start + 5.0 + 2400 + 600, abs=0.01)
    # b2's node had no hold: its window ends 600 s after the run's last sign (here its own start)
    t0, t1 = stages["fault-b2"]["drained_between"]
    assert t1 == pytest.approx(t0 + 600, abs=0.01)


def test_a_node_whose_gpu_was_lost_to_a_pcie_reset_stays_out(tmp_path):
    run_dir = _run_dir(tmp_path)
    _watch_start(run_dir, "fault-b1", {"n2": True, "n3": True})
    for host, node in (("h2", "n2"), ("h3", "n3")):
        inject = _art("fault_inject", host)
        inject.facts.update(method="pcie_bridge_reset", pcie_bridge="0000:16:02.0", gpu_bdf="0000:18:00.0")
        inject.add("injected_at", 1.0, "s_epoch", method="pcie_bridge_reset", xid=79)
        _write(run_dir, inject)
        info = _art("node_info", host)
        info.facts["hostname"] = node + ".cluster.internal"
        _write(run_dir, info)
    # n3's GPU answered after the reset (fault_inject -verify): it may go back
    verify = _art("fault_inject", "h3", "verify")
    verify.add("gpu_answers", 1, "bool")
    _write(run_dir, verify)
    [stage] = recovery.plan(str(run_dir))["open"]
    assert stage["resume"] == ["n3"]
    assert list(stage["keep_out"]) == ["n2"] and "reboot the node" in stage["keep_out"]["n2"]


def test_a_run_whose_controller_is_alive_or_no_run_is_refused(tmp_path):
    with open("/proc/self/stat") as fh:
        ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
    me = {"event": "controller", "machine": socket.gethostname(), "pid": os.getpid(), "start_ticks": ticks}
    run_dir = _run_dir(tmp_path, journal=[me])
    with pytest.raises(recovery.NotRecoverable, match="still going .*pid %d" % os.getpid()):
        recovery.plan(str(run_dir))
    # the same pid, started at another time (a reused pid), is not the run's controller
    (run_dir / "journal.jsonl").write_text(json.dumps(dict(me, start_ticks=ticks - 1)) + "\n")
    assert recovery.plan(str(run_dir))["stages"] == []
    with pytest.raises(recovery.NotRecoverable, match="not a run directory"):
        recovery.plan(str(tmp_path))
    res = subprocess.run([sys.executable, "-m", "reports.phases.reliability.recovery", str(tmp_path)],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 2 and "recover_run" in res.stderr and not res.stdout


def test_a_dcgm_hold_left_behind_is_stopped_and_sets_the_field_back(tmp_path, monkeypatch):
    # the stand-in dcgmi and nvidia-smi of test_reliability_probes.py: every call recorded
    calls = tmp_path / "dcgmi.calls"
    (tmp_path / "dcgmi").write_text("#!/bin/sh\necho \"$@\" >> %s\n" % calls)
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\ncat %s\n" % (FIX / "nvidia-smi" / "h100_8x_query.csv"))
    for tool in ("dcgmi", "nvidia-smi"):
        (tmp_path / tool).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    node_dir = tmp_path / ("clustermax-assess-%s" % RUN_ID) / "artifacts"
    _, doc = _probe(node_dir, "h2", "fault_inject", None, {"xid": 48, "gpu_index": 2, "hold_s": 120})
    assert doc["facts"]["method"] == "dcgm"
    [(pid, kind)] = _found(1)
    try:
        assert kind == "dcgm_hold"
        time.sleep(1.5)  # it injects again every second, as it would until its deadline
        _, left = run_probe("leftovers", str(tmp_path / "recovery"), "rec", "h2", params={"run_id": RUN_ID})
        assert {r["labels"].get("kind"): r["value"] for r in left["results"] if r["metric"] == "stopped"} == {
            "watcher": 0, "dcgm_hold": 1}
        assert [r["value"] for r in left["results"] if r["metric"] == "killed"] == [0]  # SIGTERM was enough
        assert not _alive(pid) and leftovers.find(RUN_ID) == []
        lines = calls.read_text().splitlines()
        assert lines.count("test --inject --gpuid 2 -f 230 -v 48") >= 2
        assert lines[-1] == "test --inject --gpuid 2 -f 230 -v 0"  # the field set back as the hold left
    finally:
        if _alive(pid):
            os.kill(pid, 9)
