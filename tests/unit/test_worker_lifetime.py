"""plugin_utils/worker_lifetime.py: what a controller forks dies with it (issue 25: after a `kill -9` of
ansible-playbook, its workers hung for hours on its results pipe). Real processes: a stand-in controller registers the
hooks, forks a worker that calls setsid() as ansible-core's do, and is killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / ".collections") not in sys.path:
    sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.clustermax.assess.plugins.plugin_utils import worker_lifetime  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")

# The controller: registers (or not), forks a worker in a session of its own that forks a child of its own (an ssh,
# say), writes their pids and kills itself as `kill -9` would.
CONTROLLER = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[1])
    from ansible_collections.clustermax.assess.plugins.plugin_utils.worker_lifetime import end_workers_with_controller
    registered = end_workers_with_controller() if sys.argv[3] == "register" else False
    worker = os.fork()
    if worker == 0:
        os.setsid()
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
        with open(sys.argv[2] + ".grandchild", "w") as fh:
            fh.write(str(child))
        time.sleep(60)
        os._exit(0)
    deadline = time.time() + 10
    while not os.path.exists(sys.argv[2] + ".grandchild") and time.time() < deadline:
        time.sleep(0.05)
    with open(sys.argv[2], "w") as fh:
        fh.write("%d %s" % (worker, registered))
    os.kill(os.getpid(), signal.SIGKILL)
""")


def _alive(pid):
    """Running, not a zombie waiting for its reaper."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _gone_within(pid, seconds=10):
    deadline = time.time() + seconds
    while _alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


def _run_controller(tmp_path, mode):
    out = tmp_path / mode
    # its output to a file: a pipe would stay open in the worker it leaves behind
    with open(tmp_path / (mode + ".log"), "w") as log:
        proc = subprocess.run([sys.executable, "-c", CONTROLLER, str(ROOT / ".collections"), str(out), mode],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log, timeout=60)
    assert proc.returncode == -signal.SIGKILL, (tmp_path / (mode + ".log")).read_text()
    worker, registered = out.read_text().split()
    return int(worker), registered == "True", int((tmp_path / (mode + ".grandchild")).read_text())


@pytest.fixture
def leftovers():
    pids = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_killed_controller_takes_its_worker_with_it(tmp_path, leftovers):
    worker, registered, grandchild = _run_controller(tmp_path, "register")
    leftovers += [worker, grandchild]
    assert registered
    assert _gone_within(worker)
    # the worker's own child (its ssh) is not the controller's fork: the hook leaves it alone, and it ends on its own
    # (an ssh sees its pipes close)
    assert _alive(grandchild)


def test_without_the_hooks_the_worker_outlives_its_controller(tmp_path, leftovers):
    """The case the hooks are for: a setsid() worker of a killed controller lives on."""
    worker, registered, grandchild = _run_controller(tmp_path, "none")
    leftovers += [worker, grandchild]
    assert not registered
    time.sleep(1)
    assert _alive(worker)


def test_a_child_whose_controller_died_before_the_hook_ends_at_once(monkeypatch):
    """Between the fork and the prctl the controller may die; the child is reparented then and no signal will come."""
    calls, exits = [], []
    monkeypatch.setitem(worker_lifetime._state, "controller", os.getppid() + 100000)
    monkeypatch.setitem(worker_lifetime._state, "forking", os.getppid() + 100000)
    worker_lifetime._in_child(prctl=lambda *a: calls.append(a), exit_=exits.append)
    assert calls == [(worker_lifetime.PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)] and exits == [1]


def test_a_fork_of_another_process_is_left_alone(monkeypatch):
    calls, exits = [], []
    monkeypatch.setitem(worker_lifetime._state, "controller", os.getppid())
    monkeypatch.setitem(worker_lifetime._state, "forking", os.getppid() + 1)  # a worker forking its ssh
    worker_lifetime._in_child(prctl=lambda *a: calls.append(a), exit_=exits.append)
    assert calls == [] and exits == []
