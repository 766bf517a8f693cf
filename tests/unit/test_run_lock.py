"""The node side of the run lock (probes/common/run_lock.py, run by plugins/action/run_lock.py as `python -c`):
one holder at a time, even when runs start at the same moment; a holder is replaced only when the controller judged
it gone, and removed only by its own run or a cleanup."""

import hashlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from probes.common import run_lock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
from ansible_collections.clustermax.assess.plugins.action.run_lock import (  # noqa: E402
    HEARTBEAT_STALE_S,
    gone_why,
    refusal,
)
from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import start_ticks  # noqa: E402

SOURCE = (ROOT / "probes/common/run_lock.py").read_text()


def _node(*argv):
    """As the action runs it: the module's source with python -c (no probes package on the node's path)."""
    out = subprocess.run([sys.executable, "-c", SOURCE, *argv], capture_output=True, text=True, check=True,
                         cwd="/")
    return json.loads(out.stdout)


def test_the_holder_names_its_working_directory_wherever_it_is(tmp_path):
    """The lock is node-local (assess_lock_dir) and the same for every run; a run's working directory is under its
    own assess_remote_tmp, which the holder names: whether it is still on the node is read there."""
    lock = str(tmp_path / "lock" / "clustermax-assess.lock")
    os.makedirs(os.path.dirname(lock))
    workdir = tmp_path / "scratch" / "clustermax-assess-A"
    assert _node("take", "--path", lock, "--holder", json.dumps({"run_id": "A", "workdir": str(workdir)}))["taken"]
    refused = _node("take", "--path", lock, "--holder", json.dumps({"run_id": "B", "workdir": "/tmp/x"}))
    assert refused["taken"] is False and refused["holder_workdir"] is False
    workdir.mkdir(parents=True)
    assert _node("take", "--path", lock, "--holder", json.dumps({"run_id": "B"}))["holder_workdir"] is True
    shown = _node("show", "--path", lock)
    assert shown["holder"] == {"run_id": "A", "workdir": str(workdir)} and shown["holder_workdir"] is True
    assert 0 <= shown["age_s"] < 60
    assert _node("show", "--path", str(tmp_path / "none.lock")) == {"holder": None, "holder_workdir": False,
                                                                    "age_s": None}
    assert not (tmp_path / "none.lock").exists()  # show creates nothing


def test_take_refuse_break_and_release_through_python_c(tmp_path):
    lock = str(tmp_path / "clustermax-assess.lock")
    assert _node("take", "--path", lock, "--holder", json.dumps({"run_id": "A"})) == {"taken": True, "replaced": None}
    (tmp_path / "clustermax-assess-A").mkdir()  # A's working directory on the node
    refused = _node("take", "--path", lock, "--holder", json.dumps({"run_id": "B"}))
    assert refused["taken"] is False and refused["holder"] == {"run_id": "A"} and refused["holder_workdir"] is True
    # a second take by the holder itself keeps it (a task retried)
    assert _node("take", "--path", lock, "--holder", json.dumps({"run_id": "A", "n": 2}))["taken"] is True
    # B may only break the lock of the run the controller judged gone
    assert _node("take", "--path", lock, "--holder", json.dumps({"run_id": "B"}), "--break-run", "X")["taken"] is False
    broken = _node("take", "--path", lock, "--holder", json.dumps({"run_id": "B"}), "--break-run", "A")
    assert broken == {"taken": True, "replaced": {"run_id": "A", "n": 2}}
    assert _node("release", "--path", lock, "--run-id", "A") == {"released": False, "holder": {"run_id": "B"}}
    assert _node("release", "--path", lock, "--run-id", "B") == {"released": True, "holder": {"run_id": "B"}}
    assert not os.path.exists(lock)


def test_runs_that_start_at_the_same_moment_get_one_holder(tmp_path):
    lock = str(tmp_path / "lock")
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: _node("take", "--path", lock, "--holder", json.dumps({"run_id": "r%d" % i})),
                                range(8)))
    winners = [r for r in results if r["taken"]]
    assert len(winners) == 1
    holder = json.loads(Path(lock).read_text())["run_id"]
    assert all(r["holder"]["run_id"] == holder for r in results if not r["taken"])


def test_a_run_of_the_same_id_from_another_controller_or_run_directory_is_refused_while_the_holder_runs(tmp_path):
    """An explicit assess_run_id given twice (two controllers, or two assess_output_dir on one): the second run is
    another holder, refused while the first runs, both named. Before, the run id alone made the lock "ours": the
    second took the live holder's lock, both shared the working directory, and the first to end removed the lock
    of the other."""
    import socket

    lock = str(tmp_path / "clustermax-assess.lock")
    workdir = tmp_path / "clustermax-assess-nightly"
    workdir.mkdir()
    here = {"machine": socket.gethostname(), "boot_id": run_lock.boot_id()}
    first = dict(here, run_id="nightly", pid=os.getpid(), start_ticks=start_ticks(os.getpid()),
                 run_dir="/runs/a/nightly", workdir=str(workdir), since="2025-01-01T00:00:00Z")
    assert _node("take", "--path", lock, "--holder", json.dumps(first))["taken"] is True
    # the same run again (a task retried): still its own
    assert _node("take", "--path", lock, "--holder", json.dumps(dict(first, since="later")))["taken"] is True
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        others = {"another output dir": dict(first, pid=second.pid, start_ticks=start_ticks(second.pid),
                                             run_dir="/runs/b/nightly"),
                  "another controller": dict(first, machine="ctl-b", boot_id="b2", pid=4242, start_ticks=7)}
        for what, other in others.items():
            refused = _node("take", "--path", lock, "--holder", json.dumps(other))
            assert refused["taken"] is False, what
            assert refused["holder"] == dict(first, since="later") and refused["holder_workdir"] is True
            # the controller's judgement: the holder's controller runs here, so it is not gone; both are named
            assert gone_why(refused["holder"], refused["holder_workdir"], refused["age_s"]) is None
            msg = refusal("n1", refused["holder"], other)
            assert "another run of the same id nightly (controller %s, pid %d, run directory /runs/a/nightly" % (
                first["machine"], os.getpid()) in msg, msg
            assert "this run (controller %s, pid %s, run directory %s" % (
                other["machine"], other["pid"], other["run_dir"]) in msg, msg
        assert json.loads(Path(lock).read_text())["run_dir"] == "/runs/a/nightly"
    finally:
        second.kill()
        second.wait()
    # once its controller has ended, the first is gone: the second breaks it as any gone holder's
    dead = dict(first, pid=second.pid, start_ticks=others["another output dir"]["start_ticks"])
    Path(lock).write_text(json.dumps(dead))
    assert gone_why(dead, True, 5) == "its controller (pid %d on %s) has ended" % (second.pid, here["machine"])
    broken = _node("take", "--path", lock, "--holder", json.dumps(others["another controller"]), "--break-run",
                   "nightly")
    assert broken == {"taken": True, "replaced": dead}


def test_an_unreadable_lock_is_gone_and_broken_with_an_empty_run(tmp_path):
    lock = tmp_path / "lock"
    lock.write_text("{half a lock")
    refused = run_lock.take(str(lock), {"run_id": "B"})
    assert refused["taken"] is False
    assert gone_why(refused["holder"], refused["holder_workdir"], refused["age_s"]) == \
        "the lock is unreadable ({half a lock)"
    assert run_lock.take(str(lock), {"run_id": "B"}, break_run="")["taken"] is True


def test_a_holder_is_gone_when_its_controller_here_has_ended_or_its_directory_elsewhere_is_gone():
    me = {"run_id": "A", "machine": "ctl", "boot_id": "b1", "pid": os.getpid(), "start_ticks": start_ticks(os.getpid())}
    assert gone_why(me, True, 5, machine="ctl", boot="b1") is None  # alive on this machine
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead = dict(me, pid=child.pid, start_ticks=start_ticks(child.pid))
    child.wait()
    assert gone_why(dead, True, 5, machine="ctl", boot="b1") == "its controller (pid %d on ctl) has ended" % child.pid
    # a pid reused by another process is not the holder
    assert gone_why(dict(me, start_ticks=(me["start_ticks"] or 0) + 1), True, 5, machine="ctl", boot="b1")
    # where start times cannot be read (no /proc), a pid that exists is alive: a live lock is never broken
    assert gone_why(dict(me, start_ticks=None), True, 5, machine="ctl", boot="b1") is None
    # another machine of the same name (another boot id): judged as foreign, so the dead pid does not count
    assert gone_why(dead, True, 5, machine="ctl", boot="b2") is None
    # from another machine: alive while its working directory is on the node and it touches the lock
    assert gone_why(me, True, 600, machine="other") is None
    assert gone_why(me, False, 30, machine="other") is None
    assert gone_why(me, False, 600, machine="other") == \
        "its working directory is gone from the node and the lock is 600 s old"
    # a run killed outright (an AWX job at its timeout) leaves its directory: its lock goes stale without touches
    assert gone_why(me, True, 1900, machine="other") == \
        "its run has not touched it for 1900 s (a run touches it every minute)"


def test_a_probe_of_the_holding_run_touches_the_lock_while_it_runs(tmp_path):
    """probes.cli --lock: the heartbeat thread touches the lock at once and every `every` seconds; it never makes
    one that is not there."""
    lock = tmp_path / "clustermax-assess.lock"
    lock.write_text("{}")
    os.utime(lock, (1000, 1000))
    run_lock.heartbeat(str(lock), every=0.05)
    assert lock.stat().st_mtime > 1000
    os.utime(lock, (1000, 1000))
    deadline = time.time() + 5
    while lock.stat().st_mtime == 1000 and time.time() < deadline:
        time.sleep(0.02)
    assert lock.stat().st_mtime > 1000
    run_lock.heartbeat(str(tmp_path / "absent.lock"), every=0.05)
    time.sleep(0.2)
    assert not (tmp_path / "absent.lock").exists()


def test_the_heartbeat_touches_this_nodes_mark_in_the_holders_working_directory(tmp_path):
    """The mark preflight's take leaves in the run's working directory is touched with the lock: on a shared tmp,
    a cleanup on another node reads from it that the run may still run here (roles/preflight/tasks/leftovers.yml).
    Named as that cleanup's shell names this node: uname -n and the boot id."""
    lock, workdir = tmp_path / "clustermax-assess.lock", tmp_path / "shared" / "clustermax-assess-A"
    assert _node("take", "--path", str(lock), "--holder", json.dumps({"run_id": "A", "workdir": str(workdir)}),
                 "--workdir", str(workdir))["taken"] is True
    mark = Path(run_lock.owner_mark(str(workdir)))
    named = subprocess.run(["/bin/bash", "-c", "boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null || true); "
                            "echo \".clustermax-assess-node.$(uname -n).${boot:--}\""],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert mark.name == named and json.loads(mark.read_text())["run_id"] == "A"
    os.utime(mark, (1000, 1000))
    run_lock.heartbeat(str(lock), every=0.05)
    deadline = time.time() + 5
    while mark.stat().st_mtime == 1000 and time.time() < deadline:
        time.sleep(0.02)
    assert mark.stat().st_mtime > 1000
    # a lock whose holder names no directory here: the lock alone is touched, nothing is made
    other = tmp_path / "other.lock"
    other.write_text(json.dumps({"run_id": "B", "workdir": str(tmp_path / "gone")}))
    run_lock.heartbeat(str(other), every=0.05)
    time.sleep(0.2)
    assert not (tmp_path / "gone").exists()


PROBES = (ROOT / "probes" / "artifact.py").read_bytes()  # any bytes stand for the archive here


def _prepare(tmp_path, candidates, lock, holder, workdir, min_version="3.8", probes=PROBES, sha=None):
    """Preflight's one round trip as the node runs it: prepare_node's shell command, run by sh here, with the probes
    on its stdin."""
    from ansible_collections.clustermax.assess.plugins.action.run_lock import node_command

    argv = ["take", "--path", lock, "--holder", json.dumps(holder), "--workdir", workdir,
            "--probes-sha256", sha or hashlib.sha256(probes).hexdigest()]
    res = subprocess.run(["/bin/sh", "-c", node_command(candidates, min_version, argv)], capture_output=True,
                         input=probes, cwd="/", timeout=60)
    return subprocess.CompletedProcess(res.args, res.returncode, res.stdout.decode(), res.stderr.decode())


def test_preflight_round_trip_finds_python_takes_the_lock_makes_the_workdir_and_says_what_probes_it_holds(tmp_path):
    lock, workdir = str(tmp_path / "clustermax-assess.lock"), tmp_path / "clustermax-assess-A"
    # the first candidate is not there: the second is used
    res = _prepare(tmp_path, ["/nonexistent/python3", sys.executable], lock, {"run_id": "A"}, str(workdir))
    lines = res.stdout.splitlines()
    assert res.returncode == 0, res.stderr
    assert lines[0] == "clustermax-assess-python: %s" % sys.executable
    assert json.loads(lines[-1]) == {"taken": True, "replaced": None, "probes": "staged"}
    assert workdir.is_dir() and (workdir.stat().st_mode & 0o777) == 0o700
    # the probes, and this node's mark (the holder), which tells a cleanup on a shared tmp that A may still run here
    mark = Path(run_lock.owner_mark(str(workdir)))
    assert (workdir / "probes.pyz").read_bytes() == PROBES
    assert sorted(p.name for p in workdir.iterdir()) == [mark.name, "probes.pyz"]
    assert json.loads(mark.read_text()) == {"run_id": "A"}
    assert json.loads(Path(lock).read_text()) == {"run_id": "A"}
    # a shared tmp: another node of the run wrote the same probes already; they are left as they are
    before = (workdir / "probes.pyz").stat().st_ino
    again = _prepare(tmp_path, [sys.executable], lock, {"run_id": "A"}, str(workdir))
    assert json.loads(again.stdout.splitlines()[-1])["probes"] == "present"
    assert (workdir / "probes.pyz").stat().st_ino == before
    # other probes (a run of another version) replace them; a cut transfer does not
    cut = _prepare(tmp_path, [sys.executable], lock, {"run_id": "A"}, str(workdir), probes=PROBES[:1000],
                   sha=hashlib.sha256(PROBES + b"x").hexdigest())
    assert cut.returncode != 0 and "the probes arrived incomplete: 1000 bytes" in cut.stderr
    assert (workdir / "probes.pyz").read_bytes() == PROBES and len(list(workdir.iterdir())) == 2
    newer = _prepare(tmp_path, [sys.executable], lock, {"run_id": "A"}, str(workdir), probes=PROBES + b"x")
    assert json.loads(newer.stdout.splitlines()[-1])["probes"] == "staged"
    assert (workdir / "probes.pyz").read_bytes() == PROBES + b"x"
    # another run is refused and makes nothing
    other = tmp_path / "clustermax-assess-B"
    refused = _prepare(tmp_path, [sys.executable], lock, {"run_id": "B"}, str(other))
    refused = json.loads(refused.stdout.splitlines()[-1])
    assert refused["taken"] is False and refused["holder"] == {"run_id": "A"} and not other.exists()
    # the cleanup's round trip: the directory, then the lock
    assert _node("release", "--path", lock, "--run-id", "A", "--workdir", str(workdir)) == {
        "released": True, "holder": {"run_id": "A"}, "workdir_removed": True}
    assert not workdir.exists() and not os.path.exists(lock)


def test_preflight_round_trip_without_a_usable_python_exits_3_and_takes_nothing(tmp_path):
    lock = str(tmp_path / "clustermax-assess.lock")
    # a Python too old for the minimum is not used: the version check runs before the lock's code
    res = _prepare(tmp_path, ["/nonexistent/python3", sys.executable], lock, {"run_id": "A"},
                   str(tmp_path / "w"), min_version="%d.%d" % (sys.version_info[0], sys.version_info[1] + 1))
    assert res.returncode == 3 and "clustermax-assess-python" not in res.stdout
    assert not os.path.exists(lock) and not (tmp_path / "w").exists()


def test_the_cleanup_a_run_starts_for_itself_is_not_refused_as_a_live_run(monkeypatch):
    """playbooks/cleanup.yml spares a run that still runs, but not when that run's own controller started it (the
    callback, at the end or after Ctrl-C, names the run in CLUSTERMAX_ASSESS_CLEANUP_OF): the holder is the one
    asking."""
    import socket

    from ansible_collections.clustermax.assess.plugins.action.run_lock import _own_cleanup

    holder = {"run_id": "R1", "machine": socket.gethostname(), "pid": os.getpid()}
    monkeypatch.delenv("CLUSTERMAX_ASSESS_CLEANUP_OF", raising=False)
    assert _own_cleanup(holder) is False
    monkeypatch.setenv("CLUSTERMAX_ASSESS_CLEANUP_OF", "R2")
    assert _own_cleanup(holder) is False
    monkeypatch.setenv("CLUSTERMAX_ASSESS_CLEANUP_OF", "R1")
    assert _own_cleanup(holder) is True
    assert _own_cleanup(dict(holder, machine="elsewhere")) is False


def test_a_batch_declares_on_the_lock_how_long_its_nodes_may_go_without_a_probe(tmp_path):
    """A reliability batch runs no probe on the nodes that wait (nor on its own while the observer waits) for longer
    than HEARTBEAT_STALE_S: each lock declares the batch's longest duration first (hold), so that another
    controller's preflight or cleanup does not take the live run's lock, processes and directory for a gone run's;
    the batch's end takes the quiet back. Only this very run's lock changes, and none is made."""
    from ansible_collections.clustermax.assess.plugins.action.run_lock import stale_after

    lock, workdir = tmp_path / "clustermax-assess.lock", tmp_path / "clustermax-assess-A"
    me = {"run_id": "A", "machine": "ctl", "boot_id": "b1", "pid": 4242, "start_ticks": 7, "run_dir": "/runs/A",
          "workdir": str(workdir)}
    assert _node("take", "--path", str(lock), "--holder", json.dumps(me), "--workdir", str(workdir))["taken"]
    mark = Path(run_lock.owner_mark(str(workdir)))
    quiet = 2 * HEARTBEAT_STALE_S  # a batch longer than a lock may otherwise go untouched
    idle = HEARTBEAT_STALE_S + quiet / 2  # how long the node has waited without a probe
    for each in (lock, mark):
        os.utime(each, (1000, 1000))

    held = _node("hold", "--path", str(lock), "--holder", json.dumps(dict(me, since="later")), "--quiet-s", str(quiet))
    assert held["held"] is True and lock.stat().st_mtime > 1000 and mark.stat().st_mtime > 1000
    shown = _node("show", "--path", str(lock))["holder"]
    assert shown == dict(me, quiet_s=quiet)
    # from another controller: alive through the declared quiet, and gone once the lock outlives it too
    assert stale_after(shown) == HEARTBEAT_STALE_S + quiet
    assert gone_why(shown, True, idle, machine="other") is None
    assert gone_why(shown, True, stale_after(shown) + 1, machine="other") == \
        "its run has not touched it for %d s (a run touches it every minute, or declares a longer quiet: %d s " \
        "here)" % (stale_after(shown) + 1, quiet)

    # another holder of the same run id (another controller process) changes nothing
    before = lock.read_text()
    other = _node("hold", "--path", str(lock), "--holder", json.dumps(dict(me, pid=4243)), "--quiet-s", "99999")
    assert other == {"held": False, "holder": shown} and lock.read_text() == before

    # the batch's end: the heartbeat's limit again
    assert _node("hold", "--path", str(lock), "--holder", json.dumps(me), "--quiet-s", "0")["held"] is True
    ended = _node("show", "--path", str(lock))["holder"]
    assert ended == me and gone_why(ended, True, idle, machine="other") is not None

    # a lock given back (or never taken) is not made again
    assert _node("hold", "--path", str(tmp_path / "absent.lock"), "--holder", json.dumps(me), "--quiet-s", "60") == \
        {"held": False, "holder": None}
    assert not (tmp_path / "absent.lock").exists()


def _tasks(path):
    import yaml

    return yaml.safe_load((ROOT / path).read_text())


def _step_limits(tasks, render):
    """The limit of each step of a batch that waits: the probes' timeouts, the reboot's."""
    limits = []
    for task in tasks:
        limits += _step_limits(task.get("block", []) + task.get("rescue", []) + task.get("always", []), render)
        if "ansible.builtin.reboot" in task:
            limits.append(render(task["ansible.builtin.reboot"]["reboot_timeout"]))
        elif "timeout" in task.get("clustermax.assess.probe", {}):
            limits.append(render(task["clustermax.assess.probe"]["timeout"]))
    return limits


def test_every_batch_holds_the_lock_of_every_node_the_run_holds_not_only_its_own():
    """The nodes outside a batch wait without a probe while it reboots or faults its own (roles/reliability, shared
    by reboot and fault_injection): the batch's start declares the quiet on every node the run holds, for as long
    as the batch may last, and its end (the always part: whatever happened) takes it back."""
    start = [t for t in _tasks("roles/reliability/tasks/watch_start.yml")
             if (t.get("clustermax.assess.run_lock") or {}).get("state") == "hold"]
    end = [t for t in _tasks("roles/reliability/tasks/finish.yml")
           if (t.get("clustermax.assess.run_lock") or {}).get("state") == "hold"]
    assert len(start) == 1 and len(end) == 1
    for task in start + end:
        # every held node, whatever its part in the batch; a refresh that fails never stops the batch
        assert task["when"] == "preflight_lock_taken | default(false) | bool"
        assert task["failed_when"] is False and task["ignore_unreachable"] is True
        assert "run_once" not in task and "delegate_to" not in task
    assert "reliability_quiet_s" in start[0]["clustermax.assess.run_lock"]["quiet_s"]
    assert end[0]["clustermax.assess.run_lock"]["quiet_s"] == 0
    # each batch declares its own longest duration: every step's timeout (the reboot's, the fresh job's for 16 nodes,
    # the fault's wait with its fallback) adds up to no more than it
    import jinja2

    def render(text, **values):
        return int(jinja2.Environment().from_string(str(text)).render(**values))

    reboot = _tasks("roles/reboot/defaults/main.yml")
    fault = _tasks("roles/fault_injection/defaults/main.yml")
    fault.update(fault_injection_batch=["n%d" % i for i in range(16)],
                 fault_injection_fallback_s=render(fault["fault_injection_detect_timeout"]))
    fault_vars = _tasks("roles/fault_injection/vars/main.yml")
    fault["fault_injection_watch_s"] = render(fault_vars["fault_injection_watch_s"], **fault)
    for role, values, declared in (("reboot", reboot, _tasks("roles/reboot/vars/main.yml")["reboot_batch_s"]),
                                   ("fault_injection", fault, fault_vars["fault_injection_batch_s"])):
        batch = _tasks("roles/%s/tasks/batch.yml" % role)
        block = [t for t in batch if "block" in t][0]
        assert block["vars"]["reliability_quiet_s"] == "{{ %s }}" % ("reboot_batch_s" if role == "reboot"
                                                                    else "fault_injection_batch_s")
        limits = _step_limits(batch, lambda text, v=values: render(text, **v))
        assert sum(limits) > HEARTBEAT_STALE_S, role  # what a lock untouched through one batch would outlive
        assert render(declared, **values) >= sum(limits), (role, render(declared, **values), sum(limits))
