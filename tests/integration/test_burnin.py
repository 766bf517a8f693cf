"""The burn-in phase (roles/burnin) over real SSH on the 4-host test cluster (CPU: torch GEMM + gloo all-to-all).

Two playbook runs, each shared by its assertions:

* the main run (`--tags burnin`, durations in seconds): burn-in with one CPU GEMM worker per node and a gloo
  all-to-all across the 4 nodes at the same time, plus the monitor; during it the test writes an XID line with a
  marker of its own into the kernel log through one host (`/dev/kmsg`); then a short fabric soak and storage soak.
  The test cluster's hosts share one kernel, so every host's monitor sees the line: the assertions are about the
  host it was written on and about this marker only (lines of other runs never count);
* the interrupted run: SIGINT to ansible-playbook in the middle of the burn-in. The nodes' runners stop by
  themselves when no poll comes for burnin_heartbeat_timeout seconds; no process and no file of the run is left,
  and the report built from what the controller has shows the partial timeline.
"""

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import BIN, ROOT, ansible_env, boot_seconds, run_dirs, run_playbook, stray_processes

from probes.artifact import validate

pytestmark = pytest.mark.cluster

MAIN_VARS = {"burnin_duration_s": 20, "burnin_fabric_duration_s": 8, "burnin_storage_phase_s": 3,
             "burnin_storage_size_mib": 16, "burnin_interval_s": 2, "burnin_poll_s": 4, "burnin_grace_s": 20}


def _vars_file(tmp, name, data):
    path = tmp / name
    path.write_text(json.dumps(data))
    return "@%s" % path


def _artifact(run_dir, host, probe):
    path = run_dir / "artifacts" / host / ("%s.json" % probe)
    return json.loads(path.read_text()) if path.exists() else None


def _plain(doc):
    return {r["metric"]: r["value"] for r in doc["results"] if not r["labels"]}


def _checks(run_dir):
    with open(run_dir / "report" / "checks.csv") as fh:
        return list(csv.DictReader(fh))


def _jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _marked(run_id):
    """PIDs of any process of this run's soaks (the hosts share this machine's process table)."""
    needle = ("clustermax-assess-soak=%s/" % run_id).encode()
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/cmdline" % name, "rb") as fh:
                    if needle in fh.read():
                        pids.append(int(name))
            except OSError:
                continue
    return pids


def _running_burnin(out):
    """(run_dir, docs) once the controller holds a running burn-in artifact of every host with monitor samples."""
    dirs = run_dirs(out) if out.exists() else []
    if not dirs:
        return None, None
    run_dir = dirs[-1]
    docs = {}
    for host_dir in (run_dir / "artifacts").glob("*"):
        try:
            doc = json.loads((host_dir / "burnin.json").read_text())
        except (OSError, ValueError):
            continue
        if doc["facts"].get("state") == "running" and _plain(doc).get("monitor_samples", 0) >= 1:
            docs[host_dir.name] = doc
    return run_dir, docs


def _write_kmsg(cluster, host, line):
    code = "import os; fd = os.open('/dev/kmsg', os.O_WRONLY); os.write(fd, %r.encode()); os.close(fd)" % line
    res = cluster.exec(host, [sys.executable, "-c", code])
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def main_run(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("burnin")
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    out = tmp / "runs"
    hosts = sorted(h["name"] for h in test_cluster.hosts)
    target = hosts[2]
    marker = "burnin-test-%s" % uuid.uuid4().hex[:12]
    line = ("<3>NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus. %s\n" % marker)
    injected = {}

    def inject():
        # Once every host's burn-in is running (the first poll is back), write the XID through one host.
        deadline = time.time() + 240
        while time.time() < deadline and not injected:
            _, docs = _running_burnin(out)
            if docs and len(docs) == len(hosts):
                _write_kmsg(test_cluster, target, line)
                injected["t"] = time.time()
                injected["t_start"] = float(docs[target]["facts"]["t_start"])
                return
            time.sleep(0.5)

    thread = threading.Thread(target=inject, daemon=True)
    thread.start()
    res = run_playbook(inventory, "--tags", "burnin", "-e", "assess_output_dir=%s" % out,
                       "-e", _vars_file(tmp, "vars.json", MAIN_VARS), timeout=500)
    thread.join(timeout=5)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    return {"run_dir": run_dir, "hosts": hosts, "target": target, "cluster": test_cluster, "marker": marker,
            "injected": injected, "stdout": res.stdout}


def test_gemm_and_alltoall_ran_at_the_same_time_with_the_monitor(main_run):
    run_dir = main_run["run_dir"]
    for host in main_run["hosts"]:
        doc = _artifact(run_dir, host, "burnin")
        assert validate(doc) == [] and doc["status"] == "ok", (host, doc.get("reason"))
        assert doc["facts"]["state"] == "done" and doc["facts"]["ended_by"] == "completed", doc["facts"]
        assert doc["facts"]["coll_backend"] == "gloo" and doc["facts"]["coll_world"] == "4"
        m = _plain(doc)
        assert m["completed"] == 1 and m["coll_errors"] == 0 and m["coll_hangs"] == 0
        # the raw timelines came back beside the artifact, one sample per interval
        monitor = _jsonl(run_dir / "artifacts" / host / "burnin.monitor.jsonl")
        gemm = [s for s in _jsonl(run_dir / "artifacts" / host / "burnin.gemm.jsonl") if s["type"] == "gemm"]
        coll = [s for s in _jsonl(run_dir / "artifacts" / host / "burnin.coll.jsonl") if s["type"] == "coll"]
        assert len(monitor) == m["monitor_samples"] >= 8
        assert all(0 <= s["cpu_util_pct"] <= 100 for s in monitor if "cpu_util_pct" in s)
        assert any(d.get("rx_bytes", 0) > 0 for s in monitor for d in s["nics"].values()), "NIC counters moved"
        assert gemm and all(s["tflops"] > 0 and s["iters"] > 0 and s["errors"] == 0 for s in gemm)
        assert coll and all(s["collective"] == "alltoall" and s["busbw_gbps"] > 0 and s["wrong"] == 0 for s in coll)
        # at the same time: the GEMM samples and the all-to-all samples cover overlapping stretches
        assert min(s["t"] for s in gemm) < max(s["t"] for s in coll)
        assert min(s["t"] for s in coll) < max(s["t"] for s in gemm)
        # the 20 s count from when the all-to-all world formed (the load clock), then the grace
        t0 = float(doc["facts"]["t_start"])
        load_from = float(doc["facts"]["load_from_s"])
        assert all(t0 <= s["t"] <= t0 + load_from + 20 + 30 for s in gemm + coll + monitor)
        assert max(s["t"] for s in coll) - min(s["t"] for s in coll) >= 20 - 3 * 2  # from the first interval to the end


def test_progress_was_shown_per_host(main_run):
    lines = [ln for ln in main_run["stdout"].splitlines() if "(item=running:" in ln]
    assert any(re.search(r"\(item=running: \d+ s of 20 s, \d+ s left\)", ln) for ln in lines), lines[-10:]
    assert re.search(r"\(item=done: \d+ s of 20 s \(completed\)\)", main_run["stdout"])


def test_injected_xid_fails_the_host_with_its_line_and_time(main_run):
    injected = main_run["injected"]
    assert injected, "the XID was never written (the burn-in never showed as running)"
    run_dir, target, marker = main_run["run_dir"], main_run["target"], main_run["marker"]
    doc = _artifact(run_dir, target, "burnin")
    events = [r for r in doc["results"] if r["metric"] == "kernel_event" and marker in r["labels"]["line"]]
    assert len(events) == 1, events
    ev = events[0]
    assert ev["labels"]["kind"] == "xid" and ev["labels"]["code"] == 79 and ev["labels"]["pci"] == "0000:3b:00"
    # the kernel's own record time, not the time of the next sample
    assert abs(ev["value"] - injected["t"]) < 2.0
    at = injected["t"] - injected["t_start"]
    rows = [r for r in _checks(run_dir) if r["check_id"] == "burnin.kernel_errors" and r["host"] == target
            and marker in r["observed"]]
    assert [r["status"] for r in rows] == ["fail"], rows
    observed_at = float(re.search(r"at t\+([0-9.]+) s", rows[0]["observed"]).group(1))
    assert abs(observed_at - at) < 2.0, (observed_at, at)
    assert rows[0]["subject"] == "burnin XID 79"
    md = (run_dir / "report" / "report.md").read_text()
    assert marker in md and "### Kernel log during the runs (XID, SXID, GPU init and off-the-bus, AER)" in md


def test_timeline_plots_and_tables_are_in_the_report(main_run):
    report = main_run["run_dir"] / "report"
    md = (report / "report.md").read_text()
    for png in ("burnin_timeline.png", "burnin_collectives.png", "burnin_storage.png"):
        assert (report / png).stat().st_size > 10000, png
        assert "(%s)" % png in md
    assert "## Burn-in and soak" in md
    for host in main_run["hosts"]:
        assert re.search(r"\| %s \| cpu \| done, \d+ s \|" % re.escape(host), md), host


def test_gpu_checks_skip_with_the_reason_and_every_check_has_every_host(main_run):
    rows = [r for r in _checks(main_run["run_dir"]) if r["check_id"].startswith("burnin.")]
    ids = {r["check_id"] for r in rows}
    assert len(ids) == 15
    for check in ids:
        assert {r["host"] for r in rows if r["check_id"] == check} == set(main_run["hosts"]), check
        assert not [r for r in rows if r["check_id"] == check and r["status"] == "error"], check
    for check in ("burnin.throttling", "burnin.clock_drop", "burnin.temperature", "burnin.power", "burnin.ecc"):
        for r in (r for r in rows if r["check_id"] == check):
            assert r["status"] == "skip" and "no GPU on this node (cpu backend)" in r["reason"], r
    done = [r for r in rows if r["check_id"] == "burnin.completed"]
    assert len(done) == 12 and all(r["status"] == "pass" for r in done)
    coll = [r for r in rows if r["check_id"] == "burnin.collectives" and r["subject"].startswith("fabric_soak")]
    assert {r["host"] for r in coll} == set(main_run["hosts"])
    assert all(re.search(r"busbw min [0-9.]+ / avg [0-9.]+ / max [0-9.]+ GB/s", r["observed"]) for r in coll)


def test_fabric_and_storage_soaks_measured_over_time(main_run):
    run_dir = main_run["run_dir"]
    for host in main_run["hosts"]:
        fabric = _artifact(run_dir, host, "fabric_soak")
        assert fabric["status"] == "ok" and fabric["facts"]["state"] == "done"
        busbw = {r["labels"]["collective"]: r["value"] for r in fabric["results"]
                 if r["metric"] == "coll_busbw_avg_gbps"}
        assert busbw and set(busbw) <= {"alltoall", "all_gather", "reduce_scatter"}
        assert all(v > 0 for v in busbw.values())
        storage = _artifact(run_dir, host, "storage_soak")
        assert storage["status"] == "ok" and storage["facts"]["ended_by"] == "completed"
        phases = {r["labels"]["phase"] for r in storage["results"] if r["metric"] == "fio_bw_avg_mibps"}
        assert phases == {"seq_mixed", "rand_mixed"}
        samples = [s for s in _jsonl(run_dir / "artifacts" / host / "storage_soak.fio.jsonl") if s["type"] == "fio"]
        assert len(samples) >= 2 and all(s["read_mibps"] > 0 and s["write_mibps"] > 0 for s in samples)
        # the cleanup removed the run's working directory (timelines included) from the node
        gone = main_run["cluster"].exec(host, ["test", "-e", "/tmp/clustermax-assess-%s" % run_dir.name])
        assert gone.returncode == 1
    assert not _marked(run_dir.name)


def test_interrupted_play_stops_the_nodes_and_keeps_a_partial_timeline(test_cluster, tmp_path):
    inventory = test_cluster.write_inventory(str(tmp_path / "cluster.ini"), python=sys.executable)
    out = tmp_path / "runs"
    # The heartbeat (600 s by default) is cut to 30 s so that the runners stop soon after the interruption; at 10 s
    # a loaded machine (a poll round trip over SSH to 4 hosts taking over 10 s) let the runners end the burn-in as
    # "controller lost" before the test could interrupt it (a clean-clone failure, 2026-12-03).
    data = {"burnin_duration_s": 120, "burnin_fabric_enabled": False, "burnin_storage_enabled": False,
            "burnin_interval_s": 2, "burnin_poll_s": 3, "burnin_heartbeat_timeout": 30, "burnin_grace_s": 10}
    argv = [str(BIN / "ansible-playbook"), "assess.yml", "-i", str(inventory), "--tags", "burnin",
            "-e", "assess_output_dir=%s" % out, "-e", _vars_file(tmp_path, "vars.json", data)]
    # SSH masters of this run's own (ControlPersist), so that the interrupted controller's can be closed below
    # short: a socket path has at most 107 characters (a run's own directory and ssh's 40-character %C go under it)
    control_dir = Path(tempfile.mkdtemp(prefix="cmxa-cp-", dir="/tmp"))
    since = boot_seconds()
    # a session of its own: should the test fail before the interruption, the play's forks end with it
    proc = subprocess.Popen(argv, cwd=ROOT, env=ansible_env(ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    hosts = sorted(h["name"] for h in test_cluster.hosts)
    try:
        deadline = time.time() + 240
        run_dir = docs = None
        while time.time() < deadline and proc.poll() is None:
            run_dir, docs = _running_burnin(out)
            # interrupt once every host has GEMM and all-to-all samples in the controller's copy of its timeline
            if docs and len(docs) == len(hosts) and all(
                    _plain(d)["monitor_samples"] >= 3 and any(r["metric"] == "gemm_samples" for r in d["results"])
                    and any(r["metric"] == "coll_samples" for r in d["results"]) for d in docs.values()):
                break
            time.sleep(0.5)
        if not (docs and len(docs) == len(hosts)):
            ended = proc.poll() is not None
            output = proc.communicate(timeout=60)[0] if ended else ""
            raise AssertionError("the burn-in never showed as running on every host (%s)%s" % (
                "the play ended first, rc %s" % proc.returncode if ended else "240 s", "\n" + output[-3000:]))
        assert _marked(run_dir.name), "no process of the run on the hosts before the interruption"
        proc.send_signal(signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired as exc:
            # what the controller printed after the interruption is the evidence: it goes with the failure
            proc.kill()
            rest = proc.communicate()[0] or ""
            raise AssertionError("the interrupted controller did not end within 120 s; its output:\n%s" % (
                ((exc.output or b"").decode("utf-8", "replace") if isinstance(exc.output, bytes) else
                 (exc.output or "")) + rest)[-6000:]) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its forks (workers waiting on SSH) left behind by a failure
        except ProcessLookupError:
            pass
    assert proc.returncode != 0, output[-2000:]
    # On its way out the interrupted controller ran the run's cleanup (the callback, at exit): by the time it has
    # ended, nothing of the run is left running on the hosts, without waiting for the runners' heartbeat (30 s).
    cleanup = [line for line in _jsonl(run_dir / "journal.jsonl") if line.get("event") == "interrupted_cleanup"]
    assert [(c["why"], c["rc"]) for c in cleanup] == [("interrupted", 0)], output[-3000:]
    assert "playbooks/cleanup.yml" in " ".join(cleanup[0]["argv"])
    assert not _marked(run_dir.name), "processes of the interrupted run are still there"
    for host in hosts:  # and its run lock was given back
        assert test_cluster.exec(host, ["test", "-e", "/tmp/clustermax-assess.lock"]).returncode == 1, host
    # Nothing else the run started is left either, once the interrupted controller's SSH masters are closed (what
    # the README tells a user to do after Ctrl-C): a module the controller was waiting for ends with its session.
    for sock in control_dir.rglob("*") if control_dir.exists() else ():  # one directory per run
        subprocess.run(["ssh", "-O", "exit", "-o", "ControlPath=%s" % sock, "closing"], capture_output=True, timeout=30)
    shutil.rmtree(control_dir, ignore_errors=True)
    deadline = time.time() + 30
    while time.time() < deadline and stray_processes(test_cluster, since):
        time.sleep(1.0)
    assert stray_processes(test_cluster, since) == {}
    # ... and the cleanup removed the run's working directory (the run's own cleanup play never ran)
    for host in hosts:
        left = test_cluster.exec(host, ["test", "-e", "/tmp/clustermax-assess-%s" % run_dir.name])
        assert left.returncode == 1, host
    build = subprocess.run([sys.executable, "-m", "reports", "build", str(run_dir)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert build.returncode in (0, 1), build.stdout[-2000:] + build.stderr[-2000:]  # 1: there are findings
    md = (run_dir / "report" / "report.md").read_text()
    assert "**Partial timeline**: interrupted before the end" in md
    assert (run_dir / "report" / "burnin_timeline.png").stat().st_size > 10000
    rows = [r for r in _checks(run_dir) if r["check_id"] == "burnin.completed" and r["subject"] == "burnin"]
    assert {r["host"] for r in rows} == set(hosts)
    for r in rows:
        assert r["status"] == "fail" and re.match(r"interrupted: timeline ends at \d+ s of 120 s", r["observed"]), r
    for host in hosts:
        doc = _artifact(run_dir, host, "burnin")
        assert doc["facts"]["state"] == "running" and _plain(doc)["elapsed_s"] < 120
        monitor = _jsonl(run_dir / "artifacts" / host / "burnin.monitor.jsonl")
        # The last poll counted the samples, then its files were fetched while the sampler ran on: the timeline may
        # hold one or two samples (2 s apart) more than the artifact counted, never fewer (seen under load).
        counted = _plain(doc)["monitor_samples"]
        assert counted >= 3 and counted <= len(monitor) <= counted + 2, (host, counted, len(monitor))
        gemm = [s for s in _jsonl(run_dir / "artifacts" / host / "burnin.gemm.jsonl") if s["type"] == "gemm"]
        assert gemm and all(s["tflops"] > 0 for s in gemm)
    # the partial timeline is graded as far as it goes: FLOP/s rows are there, not errors
    gemm_rows = [r for r in _checks(run_dir) if r["check_id"] == "burnin.gemm_degradation"]
    assert {r["host"] for r in gemm_rows} == set(hosts) and all(r["status"] != "error" for r in gemm_rows)
