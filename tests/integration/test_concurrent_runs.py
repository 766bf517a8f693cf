"""One assessment per node at a time (issue 25): a second run on the same test hosts is refused at preflight, naming
the run that holds them, and leaves nothing; the first finishes whole and gives its locks back. A run whose controller
was killed leaves a lock that the next run breaks with a warning, and `playbooks/cleanup.yml -e assess_cleanup_run=`
stops what it left running and removes its working directory."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import boot_seconds, read_journal, run_dirs, run_playbook, start_playbook, stray_processes

pytestmark = pytest.mark.cluster

LOCK = "/tmp/clustermax-assess.lock"
# A short burn-in (GEMM and the all-to-all, no fabric or storage soak): long enough to be caught holding the nodes.
# 75 s: run A's burn-in still runs through B's refusal and two cleanup playbooks (about 35 s on 2 cores).
BURNIN = {"burnin_duration_s": 75, "burnin_fabric_enabled": False, "burnin_storage_enabled": False,
          "burnin_interval_s": 2, "burnin_poll_s": 3, "burnin_heartbeat_timeout": 30, "burnin_grace_s": 10}


def _lock_holders(cluster):
    """host -> the run id in its lock, or None without one."""
    out = {}
    for h in cluster.hosts:
        res = cluster.exec(h["name"], ["cat", LOCK])
        out[h["name"]] = json.loads(res.stdout)["run_id"] if res.returncode == 0 and res.stdout.strip() else None
    return out


def _processes_of(cluster, host, run_id):
    """The command lines of the host's processes that belong to the run (its working directory on them)."""
    ps = cluster.exec(host, ["ps", "-eww", "-o", "args"]).stdout.splitlines()  # -ww: whole command lines
    return [line for line in ps if "clustermax-assess-%s" % run_id in line and not line.startswith("ps ")]


def _runner_of(cluster, host, run_id):
    """The run's burn-in runner on the host (probes/burnin/runner.py: detached, it lasts the whole soak). Any process
    of the run is not enough: preflight's own (the lock command, the node inventory) run on every node at the same
    moment for a second, and a wait that took them for the burn-in found them gone on the next look."""
    return [line for line in _processes_of(cluster, host, run_id) if "runner_main" in line]


def _burnin_vars(tmp, name, **more):
    """The run's extra vars file: the short burn-in, its output under tmp/<name>."""
    path = tmp / ("%s.json" % name)
    path.write_text(json.dumps(dict(BURNIN, assess_output_dir=str(tmp / name), **more)))
    return "@%s" % path


def _start_burnin(inventory, tmp, name):
    return start_playbook(inventory, "--tags", "burnin", "-e", _burnin_vars(tmp, name), start_new_session=True)


def _wait_for_locks(cluster, out, proc, timeout=180):
    """The first run's id once it holds every host's lock."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        dirs = run_dirs(out)
        if dirs and set(_lock_holders(cluster).values()) == {dirs[0].name}:
            return dirs[0].name
        time.sleep(1.0)
    raise AssertionError("the run never held every host's lock: %s" % (proc.communicate(timeout=60)[0][-3000:]
                                                                       if proc.poll() is not None else "180 s"))


def _controller_processes(marker):
    """pids of this machine's processes whose command line holds marker (a run's own extra-vars file). ansible-core's
    forked workers each run in a session of their own, so a process group does not find them."""
    ps = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split(None, 1)[0]) for line in ps.splitlines() if marker in line and "ps -eww" not in line]


def _command_line(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return "%d: %s" % (pid, fh.read().replace(b"\0", b" ").decode(errors="replace")[:300])
    except OSError:
        return "%d: (gone)" % pid


def _wait_for_runners(cluster, hosts, run_id, proc, timeout=180):
    """Until the run's burn-in runs on every host (or its controller ended)."""
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None and not all(_runner_of(cluster, h, run_id) for h in hosts):
        time.sleep(1.0)


@pytest.fixture(scope="module")
def runs(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("concurrent")
    since = boot_seconds()
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    hosts = sorted(h["name"] for h in test_cluster.hosts)
    found = {"hosts": hosts}

    # A holds the hosts (its burn-in runs); B starts meanwhile and is refused.
    first = _start_burnin(inventory, tmp, "a")
    try:
        found["a_id"] = _wait_for_locks(test_cluster, tmp / "a", first)
        # B's working directories would go elsewhere: the lock is the node's, whatever the run's assess_remote_tmp
        second = run_playbook(inventory, "--tags", "burnin", "-e", _burnin_vars(tmp, "b", assess_remote_tmp="/var/tmp"))
        found["b"] = {"rc": second.returncode, "text": second.stdout + second.stderr,
                      "dirs": run_dirs(tmp / "b"), "holders_after": _lock_holders(test_cluster),
                      "tmp": {h: test_cluster.exec(h, ["ls", "/tmp", "/var/tmp"]).stdout for h in hosts}}
        # The cleanup playbook while A's burn-in runs: named, it refuses; `all` spares A (its runners, directory and
        # lock).
        _wait_for_runners(test_cluster, hosts, found["a_id"], first)
        found["a_runners_before"] = {h: bool(_runner_of(test_cluster, h, found["a_id"])) for h in hosts}
        for key, which in (("clean_a", found["a_id"]), ("clean_all", "all")):
            res = run_playbook(inventory, "-e", "assess_cleanup_run=%s" % which, playbook="playbooks/cleanup.yml")
            found[key] = {"rc": res.returncode, "text": res.stdout + res.stderr,
                          "runners": {h: bool(_runner_of(test_cluster, h, found["a_id"])) for h in hosts},
                          "holders": _lock_holders(test_cluster),
                          "dirs": {h: test_cluster.exec(h, ["test", "-d", "/tmp/clustermax-assess-%s" % found["a_id"]])
                                   .returncode for h in hosts}}
        found["a_running_after_cleanups"] = first.poll() is None
        found["a_output"] = first.communicate(timeout=600)[0]
        found["a_rc"] = first.returncode
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.communicate()
    found["a_dir"] = run_dirs(tmp / "a")[0]
    found["holders_after_a"] = _lock_holders(test_cluster)

    # C's controller is killed (SIGKILL, ansible-playbook alone, as `kill -9 <pid>` does) while it holds the hosts:
    # its lock and working directory stay, and its forked workers must not outlive it for long.
    third = _start_burnin(inventory, tmp, "c")
    try:
        found["c_id"] = _wait_for_locks(test_cluster, tmp / "c", third)
        _wait_for_runners(test_cluster, hosts, found["c_id"], third)
        found["c_running"] = {h: bool(_runner_of(test_cluster, h, found["c_id"])) for h in hosts}
        # killed while it has its workers: one per host, polling the burn-in in a loop task that lasts the soak (right
        # after the runners start, the play may still be between two tasks, with no worker)
        deadline = time.time() + 60
        while time.time() < deadline and third.poll() is None and len(
                [p for p in _controller_processes(str(tmp / "c.json")) if p != third.pid]) < len(hosts):
            time.sleep(0.2)
        found["c_workers"] = [p for p in _controller_processes(str(tmp / "c.json")) if p != third.pid]
        os.kill(third.pid, signal.SIGKILL)
        third.wait(timeout=30)
        # Its forked workers (each in a session of its own) die with it: without that they blocked for hours writing
        # results to the dead controller's pipe (plugins/plugin_utils/worker_lifetime.py). The kernel's SIGKILL
        # comes at the controller's exit; a second for them to be reaped.
        deadline = time.time() + 10
        while _controller_processes(str(tmp / "c.json")) and time.time() < deadline:
            time.sleep(0.5)
        found["c_orphans"] = [_command_line(pid) for pid in _controller_processes(str(tmp / "c.json"))]
    finally:  # whatever outlived it is ended here, so that the test leaves nothing
        for pid in _controller_processes(str(tmp / "c.json")):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        third.communicate(timeout=60)
    found["c_left"] = {h: test_cluster.exec(h, ["test", "-d", "/tmp/clustermax-assess-%s" % found["c_id"]]).returncode
                       for h in hosts}
    # D (preflight and cleanup only) breaks C's lock: C's controller has ended on this machine.
    fourth = run_playbook(inventory, "--tags", "preflight", "-e", "assess_output_dir=%s" % (tmp / "d"))
    found["d"] = {"rc": fourth.returncode, "text": fourth.stdout + fourth.stderr,
                  "holders_after": _lock_holders(test_cluster)}
    # What C left running (its burn-in runners) and its working directory go with the cleanup playbook.
    clean = run_playbook(inventory, "-e", "assess_cleanup_run=%s" % found["c_id"], playbook="playbooks/cleanup.yml")
    found["clean"] = {"rc": clean.returncode, "text": clean.stdout + clean.stderr}
    found["tmp_end"] = {h: test_cluster.exec(h, ["ls", "-a", "/tmp"]).stdout for h in hosts}
    found["c_procs"] = {h: _processes_of(test_cluster, h, found["c_id"]) for h in hosts}
    found["strays"] = stray_processes(test_cluster, since)
    return found


def test_a_second_run_is_refused_naming_the_run_that_holds_the_nodes_and_leaves_nothing(runs):
    b = runs["b"]
    assert b["rc"] != 0
    for host in runs["hosts"]:
        assert "%s is being assessed by run %s" % (host, runs["a_id"]) in b["text"], b["text"][-3000:]
    assert "one assessment per node at a time" in b["text"]
    assert "playbooks/cleanup.yml -e assess_cleanup_run=%s" % runs["a_id"] in b["text"]
    # B measured nothing and made nothing on the hosts; A's locks were left alone
    [b_dir] = b["dirs"]
    assert not (b_dir / "artifacts").exists()
    # nor started the cleanup playbook for its failed hosts: without the lock it made nothing there to clean up
    assert [e for e in read_journal(b_dir) if e.get("event") == "interrupted_cleanup"] == []
    assert "removing what run %s left" % b_dir.name not in b["text"]
    assert set(b["holders_after"].values()) == {runs["a_id"]}
    for host, listing in b["tmp"].items():
        assert "clustermax-assess-%s" % b_dir.name not in listing, (host, listing)


def test_the_cleanup_playbook_never_touches_a_run_that_still_runs(runs):
    named, every = runs["clean_a"], runs["clean_all"]
    assert set(runs["a_runners_before"].values()) == {True}
    assert named["rc"] != 0
    for host in runs["hosts"]:
        assert "run %s still runs on %s" % (runs["a_id"], host) in named["text"], named["text"][-3000:]
    assert "nothing was removed" in named["text"]
    assert every["rc"] == 0, every["text"][-3000:]
    for host in runs["hosts"]:
        assert "%s: spared run %s (/tmp/clustermax-assess-%s, its processes and its lock): it still runs" % (
            host, runs["a_id"], runs["a_id"]) in every["text"], every["text"][-3000:]
    for result in (named, every):
        assert set(result["runners"].values()) == {True}  # A's burn-in runners went on
        assert set(result["holders"].values()) == {runs["a_id"]} and set(result["dirs"].values()) == {0}
    assert runs["a_running_after_cleanups"]  # and A was still running after both (it then ends whole, below)


def test_the_first_run_finishes_whole_and_gives_its_locks_back(runs):
    assert runs["a_rc"] == 0, runs["a_output"][-3000:]
    for host in runs["hosts"]:
        doc = json.loads((runs["a_dir"] / "artifacts" / host / "burnin.json").read_text())
        assert doc["status"] == "ok", (host, doc.get("reason"))
    assert set(runs["holders_after_a"].values()) == {None}


def test_a_killed_controller_takes_its_forked_workers_with_it(runs):
    assert len(runs["c_workers"]) >= len(runs["hosts"])  # a worker per host was running when it was killed
    assert runs["c_orphans"] == []


def test_a_killed_runs_lock_is_broken_with_a_warning_and_its_leftovers_go_with_the_cleanup_playbook(runs):
    assert set(runs["c_running"].values()) == {True}  # the killed run's burn-in was running on every host
    assert set(runs["c_left"].values()) == {0}  # and its working directory stayed there
    d = runs["d"]
    assert d["rc"] == 0, d["text"][-3000:]
    for host in runs["hosts"]:
        broke = "%s: broke the lock of run %s: its controller (pid" % (host, runs["c_id"])
        assert broke in d["text"], d["text"][-3000:]
    assert set(d["holders_after"].values()) == {None}  # D gave its own locks back
    assert runs["clean"]["rc"] == 0, runs["clean"]["text"][-3000:]
    for host in runs["hosts"]:
        assert runs["c_procs"][host] == []  # the killed run's burn-in runners were stopped
        assert "clustermax-assess" not in runs["tmp_end"][host], runs["tmp_end"][host]
    assert runs["strays"] == {}
