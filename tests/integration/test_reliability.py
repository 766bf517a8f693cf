"""The reliability phase (roles/reboot, roles/fault_injection) against a real Slurm on SSH test hosts.

A cluster of its own (4 hosts, Slurm from tests/cluster/slurm.py, simulated reboots from tests/cluster/reboot.py):
the reboots and the Slurm daemons must not touch the session's cluster. One destructive run is shared by the
assertions: nodes 2 and 3 drained, rebooted together (max share 0.5 of 4 hosts: one batch), resumed and given a
fresh srun; then an XID 79 written into node 4's kernel log, which the harness's HealthCheckProgram (the
"provider's" health check) must notice and drain, swapping in node 1, its hot spare (HGX). Batches of one host at a
time are shown by the reboot role's molecule scenario. A second run names the same hosts without
assess_allow_destructive and must change nothing.
"""

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cluster.cluster import Cluster, _netns_pids, preflight
from cluster.reboot import Reboots
from cluster.slurm import Slurm
from cluster.slurm import preflight as slurm_preflight
from cluster.xid_healthcheck import read_kmsg, xids_for
from helpers import BIN, ROOT, ansible_env, run_dirs, run_playbook

from reports.load import load_run
from reports.phases.reliability import timeline

pytestmark = pytest.mark.cluster

TIMINGS = ("drain_s", "reboot_s", "registered_s", "resume_s", "job_s", "return_to_service_s", "total_s")


def _identity():
    """A prefix and subnet of its own, derived from the session's, so parallel sessions never collide."""
    prefix = os.environ.get("CMXA_PREFIX", "cmxa")[:7] + "r"
    octets = os.environ.get("CMXA_SUBNET_PREFIX", "10.237.41").split(".")
    octets[2] = str((int(octets[2]) + 100) % 250)
    base = os.environ.get("CMXA_STATE_DIR") or str(ROOT / ".testcluster")
    return prefix, ".".join(octets), base.rstrip("/") + "-rel"


@pytest.fixture(scope="module")
def slurm_cluster():
    reason = preflight() or slurm_preflight()
    if reason:
        pytest.skip(reason)
    prefix, subnet, state_dir = _identity()
    cluster = Cluster(state_dir=state_dir, prefix=prefix, subnet_prefix=subnet)
    slurm = Slurm(cluster, slurmd_timeout=10, health_check_interval=2)
    try:
        cluster.up(4)
        slurm.up()
        yield cluster, slurm, Reboots(cluster)
    finally:
        slurm.down()
        cluster.down()


def _names(cluster):
    return [h["name"] for h in cluster.hosts]


def _extra_vars(tmp, data):
    path = tmp / "extra.json"
    path.write_text(json.dumps(data))
    return "@%s" % path


def _doc(run_dir, host, name):
    path = run_dir / "artifacts" / host / name
    return json.loads(path.read_text()) if path.exists() else None


def _outcome(run_dir, host, probe):
    """What the controller computes from the nodes' raw observations for one host (the nodes only record)."""
    run = load_run(str(run_dir))
    return timeline.outcome(run, run.artifact(host, probe))


def _boot_logs(cluster):
    """The harness's boot and reboot log of every host, for assertion messages."""
    return "\n".join(p.read_text() for p in sorted((cluster.state_dir / "boot").glob("*.log")))


def _failures(res):
    """The failed tasks of a playbook run (with the task line before each), for assertion messages."""
    lines = res.stdout.splitlines()
    return "\n".join("%s\n%s" % (next((p for p in reversed(lines[:i]) if p.startswith("TASK [")), ""), line)
                     for i, line in enumerate(lines) if line.startswith(("fatal:", "failed:"))) + "\n"


def _checks(run_dir):
    with open(run_dir / "report" / "checks.csv") as fh:
        return {(r["check_id"], r["host"]): r for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def destructive_run(slurm_cluster, tmp_path_factory):
    cluster, slurm, reboots = slurm_cluster
    n1, n2, n3, n4 = _names(cluster)
    tmp = tmp_path_factory.mktemp("reliability")
    inventory = cluster.write_inventory(str(tmp / "hosts.ini"), python=sys.executable)
    boot_before = reboots.boot_ids()
    kmsg_since = read_kmsg()[-1][0]
    # The provider has a hot spare (HGX): node 1, drained; its health check swaps it in for the node it drains.
    slurm.hold_spare(n1)
    extra = _extra_vars(tmp, {
        "assess_output_dir": str(tmp / "runs"),
        "assess_allow_destructive": True,
        "reboot_hosts": [n2, n3],
        "reboot_max_share": 0.5,
        "reboot_command": reboots.command(delay=2),
        "reboot_poll_interval": 0.5,
        "fault_injection_hosts": [n4],
        "fault_injection_poll_interval": 0.5,
        "fault_injection_others_interval": 1,
        "fault_injection_detect_timeout": 60,
        "fault_injection_remediation_timeout": 2,
        "fault_injection_settle": 2,
    })
    res = run_playbook(inventory, "--tags", "reliability", "-e", extra, timeout=400)
    assert run_dirs(tmp / "runs"), res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(tmp / "runs")
    return {"res": res, "run_dir": run_dir, "names": (n1, n2, n3, n4), "boot_before": boot_before,
            "boot_after": reboots.boot_ids(), "states_after": slurm.node_states(), "kmsg_since": kmsg_since,
            "slurm": slurm, "boot_logs": _boot_logs(cluster)}


def test_reboot_of_two_of_four_nodes_with_drain_resume_and_every_timing(destructive_run):
    res, run_dir = destructive_run["res"], destructive_run["run_dir"]
    n1, n2, n3, n4 = destructive_run["names"]
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    # the rebooted nodes really rebooted (the harness's view of the boot id), the others did not
    before, after = destructive_run["boot_before"], destructive_run["boot_after"]
    assert before[n2] != after[n2] and before[n3] != after[n3]
    assert before[n1] == after[n1] and before[n4] == after[n4]
    windows = {}
    for host in (n2, n3):
        doc = _outcome(run_dir, host, "reboot")
        assert doc["status"] == "ok", doc.get("reason")
        m = doc["metrics"]
        print("reboot", host, {k: m.get(k) for k in TIMINGS + ("seen_down_s", "reboot_module_elapsed_s")})
        assert m["boot_id_changed"] == 1 and m["returned"] == 1
        assert doc["facts"]["scheduler"] == "slurm"
        assert doc["facts"]["boot_id_before"] == before[host] and doc["facts"]["boot_id_after"] == after[host]
        for name in TIMINGS:
            assert name in m and m[name] >= 0, (host, name, m)
        # the reboot itself (the harness keeps the node down 2 s) and the whole cycle take real time
        assert 2.0 <= m["reboot_s"] < 600 and m["total_s"] >= m["reboot_s"], destructive_run["boot_logs"]
        assert 2.0 <= m["reboot_module_elapsed_s"] <= m["reboot_s"]
        ev = doc["events"]
        order = ["drain_issued", "drained", "reboot_started", "reboot_returned", "resume_issued", "available",
                 "job_ok"]
        assert [ev[k] for k in order] == sorted(ev[k] for k in order), ev
        # the observer read its clock between the drain and the reboot: the scheduler's stages are timed from it
        assert ev["drained"] <= ev["reboot_started_observer"] < ev["reboot_returned"], ev
        assert m["return_to_service_s"] == round(ev["job_ok"] - ev["reboot_started_observer"], 3)
        windows[host] = (ev["reboot_started"], ev["reboot_returned"])
    # max share 0.5 of 4 hosts: both in one batch, down at the same time, watched from node 1
    assert {_doc(run_dir, h, "reboot.json")["facts"]["batch"] for h in (n2, n3)} == {"1"}
    first, second = sorted(windows.values())
    assert second[0] < first[1]
    # the observer watched Slurm: each node went from IDLE to IDLE+DRAIN, slurmd restarted, back to IDLE
    samples = [json.loads(line) for line in (run_dir / "artifacts" / n1 / "sched_watch-reboot-b1.jsonl")
               .read_text().splitlines()]
    for host in (n2, n3):
        mine = [s for s in samples if s["node"] == host]
        states = [s["state"] for s in mine]
        assert states[0] == "IDLE" and "IDLE+DRAIN" in states and states[-1] == "IDLE", states
        assert mine[0]["slurmd_start"] != mine[-1]["slurmd_start"]
    # hosts that were not named were left alone, and say so
    for host in (n1, n4):
        doc = _doc(run_dir, host, "reboot.json")
        assert doc["status"] == "skipped" and "not among reboot_hosts" in doc["reason"]
    # every node back in service as it was
    assert destructive_run["states_after"] == {n: "IDLE" for n in (n1, n2, n3, n4)}
    rows = _checks(run_dir)
    assert rows[("reliability.reboot_returned", n2)]["status"] == "pass"
    assert rows[("reliability.reboot_returned", n1)]["status"] == "skip"
    assert rows[("reliability.reboot_duration", n3)]["status"] in ("pass", "warn")


def test_xid_in_kernel_log_is_detected_by_the_health_check_and_timed(destructive_run):
    run_dir = destructive_run["run_dir"]
    n1, n2, n3, n4 = destructive_run["names"]
    inject = _doc(run_dir, n4, "fault_inject.json")
    assert inject["status"] == "ok"
    assert inject["facts"]["method"] == "kmsg"
    assert inject["facts"]["method_dcgm"] == "dcgmi not found"
    # the injection's start by the observer's clock (roles/reliability/tasks/observer_clock.yml): detection is timed
    # from it, never from the node's own clock
    [started] = [r["value"] for r in inject["results"] if r["metric"] == "event_at"
                 and r["labels"].get("event") == "inject_started_observer"]
    # the line is in the (shared) kernel log, in the driver's form, with the run and node marker
    lines = xids_for(read_kmsg(), n4, destructive_run["kmsg_since"])
    run_id = run_dir.name
    ours = [text for _, xid, text in lines if xid == 79 and "run=%s" % run_id in text]
    assert len(ours) == 1 and "NVRM: Xid (PCI:0000:00:00): 79," in ours[0]
    assert "GPU has fallen off the bus." in ours[0]
    doc = _outcome(run_dir, n4, "fault_injection")
    assert doc["status"] == "ok", doc.get("reason")
    m = doc["metrics"]
    print("fault_injection", n4, m, doc["facts"])
    assert m["injected_at"] == started
    assert m["detected"] == 1 and 0 < m["detect_s"] < 60
    assert doc["facts"]["detect_phase"] == "drained"
    assert doc["facts"]["detect_reason"] == "XID 79 in kernel log (health check)"
    # the health check drained node 4 and swapped in node 1, the hot spare: node 4 stays out, replaced
    assert doc["facts"]["observed_action"] == "replaced" and doc["facts"]["spare"] == n1
    assert m["rebooted"] == 0 and m["returned"] == 0 and m["drain_open"] == 1
    assert m["detect_s"] <= m["spare_s"] < 60
    # fault_injection_remediation_timeout=2: the watch went on 2 s after detection, the node drained throughout
    assert m["time_drained_s"] >= 2 and m["watched_s"] >= m["detect_s"] + 2
    # the fresh job ran on the spare (sched_action -job with joined_from), after it joined
    assert m["spare_job_rc"] == 0 and m["spare_job_ok"] == 1 and m["spare_job_ok_s"] > m["spare_s"]
    assert m["resumed_by_assessment"] == 1
    # the health check (the provider's tool) did the draining and the swap: its own log says so
    hc_log = (destructive_run["slurm"].dir / "healthcheck" / ("%s.log" % n4)).read_text()
    assert "drain %s" % n4 in hc_log and "rc 0" in hc_log
    assert "spare %s in place of %s: rc 0" % (n1, n4) in hc_log
    # nobody else was touched
    for host in (n1, n2, n3):
        doc = _doc(run_dir, host, "fault_injection.json")
        assert doc["status"] == "skipped" and "not among fault_injection_hosts" in doc["reason"]
    # node 4 put back by the batch's restore (the fault was ours), the spare left in service
    assert destructive_run["states_after"][n4] == "IDLE" and destructive_run["states_after"][n1] == "IDLE"
    rows = _checks(run_dir)
    assert rows[("reliability.failure_detection", n4)]["status"] == "pass"
    assert rows[("reliability.remediation", n4)]["status"] == "pass"
    assert "REBOOT" in rows[("reliability.remediation", n4)]["expected"]
    ret = rows[("reliability.return_to_service", n4)]
    assert ret["status"] == "pass" and ret["observed"].startswith("replaced by %s after " % n1), ret
    assert rows[("reliability.failure_detection", n1)]["status"] == "skip"
    md = (run_dir / "report" / "report.md").read_text()
    assert "### Reboot timings (seconds)" in md and "### Fault injection" in md
    for host in (n2, n3, n4):
        assert "- **%s** (" % host in md
    assert (run_dir / "report" / "reliability_timeline.png").stat().st_size > 1000


def test_without_allow_destructive_nothing_changes(slurm_cluster, tmp_path):
    cluster, slurm, reboots = slurm_cluster
    n1, n2, n3, n4 = _names(cluster)
    inventory = cluster.write_inventory(str(tmp_path / "hosts.ini"), python=sys.executable)
    boot_before, states_before = reboots.boot_ids(), slurm.node_states()
    kmsg_since = read_kmsg()[-1][0]
    extra = _extra_vars(tmp_path, {
        "assess_output_dir": str(tmp_path / "runs"),
        "reboot_hosts": [n2, n3],
        "reboot_command": reboots.command(delay=2),
        "fault_injection_hosts": [n4],
    })
    res = run_playbook(inventory, "--tags", "reliability", "-e", extra, timeout=300)
    assert res.returncode == 0, _failures(res) + res.stdout[-3000:]
    assert reboots.boot_ids() == boot_before
    assert slurm.node_states() == states_before
    assert not [x for x in read_kmsg() if x[0] > kmsg_since and "clustermax.assess injection" in x[2]
                and any("node=%s" % n in x[2] for n in (n1, n2, n3, n4))]
    [run_dir] = run_dirs(tmp_path / "runs")
    for host in (n1, n2, n3, n4):
        for name in ("reboot.json", "fault_injection.json"):
            doc = _doc(run_dir, host, name)
            assert doc["status"] == "skipped" and "assess_allow_destructive" in doc["reason"], doc
        assert sorted(p.name for p in (run_dir / "artifacts" / host).iterdir()) == [
            "fault_injection.json", "node_info.json", "reboot.json"]
    rows = _checks(run_dir)
    assert {rows[(c, n4)]["status"] for c in ("reliability.failure_detection", "reliability.reboot_returned")} == {
        "skip"}


def _watchers_of(cluster, run_id):
    """The scheduler watchers and DCGM holds of one run still running on the test hosts, by host."""
    found = {}
    for h in cluster.hosts:
        for pid in _netns_pids(h["netns"]):
            try:
                cmd = Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # gone meanwhile
            if "clustermax-assess-%s" % run_id in cmd and ("clustermax-assess-watch=" in cmd or "dcgm-hold" in cmd):
                found.setdefault(h["name"], []).append(pid)
    return found


def test_a_controller_killed_mid_batch_leaves_a_drained_node_that_recover_yml_puts_back(
        slurm_cluster, destructive_run, tmp_path):
    """After the shared run (so the two never overlap): a fault-injection run killed (SIGKILL, the whole process
    group) once the health check drained its node, before the batch's own restore; then playbooks/recover.yml."""
    cluster, slurm, _ = slurm_cluster
    n1, n2, n3, n4 = _names(cluster)
    inventory = cluster.write_inventory(str(tmp_path / "hosts.ini"), python=sys.executable)
    extra = _extra_vars(tmp_path, {
        "assess_output_dir": str(tmp_path / "runs"),
        "assess_allow_destructive": True,
        "fault_injection_hosts": [n3],
        "fault_injection_poll_interval": 0.5,
        "fault_injection_detect_timeout": 120,
        "fault_injection_remediation_timeout": 600,
        "fault_injection_settle": 2,
    })
    # short: a socket path has at most 107 characters (a run's own directory and ssh's 40-character %C go under it)
    control_dir = Path(tempfile.mkdtemp(prefix="cmxa-cp-", dir="/tmp"))
    argv = [str(BIN / "ansible-playbook"), "assess.yml", "-i", str(inventory), "--tags", "fault_injection",
            "-e", extra]
    proc = subprocess.Popen(argv, cwd=ROOT, env=ansible_env(ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.time() + 240
        while time.time() < deadline and proc.poll() is None and "DRAIN" not in slurm.node_state(n3):
            time.sleep(0.5)
        assert "DRAIN" in slurm.node_state(n3), (slurm.node_states(), proc.poll())
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the controller and every fork of it
        except ProcessLookupError:
            pass
        output = proc.communicate(timeout=60)[0]
    for sock in control_dir.rglob("*") if control_dir.exists() else ():  # one directory per run
        subprocess.run(["ssh", "-O", "exit", "-o", "ControlPath=%s" % sock, "x"], capture_output=True, timeout=30)
    shutil.rmtree(control_dir, ignore_errors=True)
    [run_dir] = run_dirs(tmp_path / "runs")
    run_id = run_dir.name
    # what the kill left: the node drained by the health check, the observer's watcher still running (it would run
    # for the detection and remediation windows), the run's working directory on the nodes
    time.sleep(3)
    assert "DRAIN" in slurm.node_state(n3), output[-3000:]
    assert not (run_dir / "artifacts" / n1 / "sched_action-fault-b1-restore.json").exists()
    assert list(_watchers_of(cluster, run_id)) == [n1], output[-3000:]
    assert cluster.exec(n3, ["test", "-d", "/tmp/clustermax-assess-%s" % run_id]).returncode == 0

    # a recovery without the run to recover is refused before any node is touched
    res = run_playbook(inventory, "-e", "assess_output_dir=%s" % (tmp_path / "rec"), playbook="playbooks/recover.yml",
                       timeout=300)
    assert res.returncode != 0 and "set recover_run to the directory of the run to recover" in res.stdout
    assert not (tmp_path / "rec").exists()

    res = run_playbook(inventory, "-e", "assess_output_dir=%s" % (tmp_path / "rec"), "-e",
                       "recover_run=%s" % run_dir, playbook="playbooks/recover.yml", timeout=300)
    assert res.returncode == 0, _failures(res) + res.stdout[-3000:]
    assert ("fault-b1 (fault_injection, slurm): open (the run ended before the batch's last steps), resume what is "
            "out of service among %s" % n3) in " ".join(res.stdout.split())
    assert slurm.node_state(n3) == "IDLE"
    assert _watchers_of(cluster, run_id) == {}
    for host in (n1, n2, n3, n4):
        assert cluster.exec(host, ["test", "-e", "/tmp/clustermax-assess-%s" % run_id]).returncode == 1, host
    [rec_dir] = run_dirs(tmp_path / "rec")
    restore = _doc(rec_dir, n1, "sched_action-recover-fault-b1.json")
    resumed = {r["labels"]["node"]: r["value"] for r in restore["results"] if r["metric"] == "resumed"}
    assert resumed[n3] == 1 and sum(resumed.values()) == 1, resumed
    # The test hosts share one process table (network namespaces only), so the hosts whose leftovers probe came
    # before it was gone all stopped the observer's watcher (on a real cluster, only the observer sees it): one
    # process, the watcher, and nothing else.
    lefts = [_doc(rec_dir, host, "leftovers.json") for host in (n1, n2, n3, n4)]
    assert {d["facts"]["run_id"] for d in lefts} == {run_id}
    assert len({d["facts"]["watcher_pids"] for d in lefts if d["facts"].get("watcher_pids")}) == 1
    assert not [d for d in lefts if d["facts"].get("dcgm_hold_pids")]
    # a second recovery of the same run finds nothing left to do
    res = run_playbook(inventory, "-e", "assess_output_dir=%s" % (tmp_path / "rec"), "-e",
                       "recover_run=%s" % run_dir, playbook="playbooks/recover.yml", timeout=300)
    assert res.returncode == 0, _failures(res) + res.stdout[-3000:]
    second = _doc(run_dirs(tmp_path / "rec")[-1], n1, "sched_action-recover-fault-b1.json")
    assert {r["value"] for r in second["results"] if r["metric"] == "resumed"} == {0}
