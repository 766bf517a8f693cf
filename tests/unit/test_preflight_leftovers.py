"""playbooks/cleanup.yml -e assess_cleanup_run=<run>|all on one node (roles/preflight/tasks/leftovers.yml): its shell
tasks rendered by ansible's own Templar with the role's vars, then run by bash here against real directories and
processes. A shared assess_remote_tmp, where a node sees the working directories of runs on other nodes, and an
assess_remote_tmp written with a trailing slash."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.template import Templar, trust_as_template  # noqa: E402
from ansible_collections.clustermax.assess.plugins.action.run_lock import HEARTBEAT_STALE_S  # noqa: E402

ROLE = ROOT / "roles" / "preflight"
SOURCE = (ROOT / "probes/common/run_lock.py").read_text()
MARK = ".clustermax-assess-node."


def templar(remote_tmp, run, live_run=None):
    """The role's vars and the cleanup's own (assess_remote_tmp, assess_cleanup_run, the lock as inspect said)."""
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in role_vars.items()}
    variables.update(assess_remote_tmp=remote_tmp, assess_cleanup_run=run,
                     preflight_lock_now={"live": live_run is not None, "holder": {"run_id": live_run}})
    return Templar(loader=DataLoader(), variables=variables)


def shell_tasks():
    """The shell tasks of leftovers.yml, in the order the play runs them."""
    tasks = yaml.safe_load((ROLE / "tasks" / "leftovers.yml").read_text())
    return [t for t in tasks if "ansible.builtin.shell" in t]


def cleanup(remote_tmp, run, live_run=None):
    """What the play does on this node after its inspect: each shell task rendered, then run as the shell module
    runs it (executable /bin/bash). Returns what they printed."""
    out = ""
    for task in shell_tasks():
        script = templar(remote_tmp, run, live_run).template(trust_as_template(task["ansible.builtin.shell"]["cmd"]))
        res = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        out += res.stdout
    return out


def take(lock, run_id, workdir):
    """Preflight's take on this node, as the node runs it: the lock, the working directory and this node's mark."""
    out = subprocess.run([sys.executable, "-c", SOURCE, "take", "--path", str(lock), "--holder",
                          json.dumps({"run_id": run_id}), "--workdir", str(workdir)],
                         capture_output=True, text=True, check=True, cwd="/")
    assert json.loads(out.stdout)["taken"] is True
    marks = [p for p in workdir.iterdir() if p.name.startswith(MARK)]
    assert len(marks) == 1
    return marks[0]


@pytest.fixture
def sleeper():
    """Start a process with a path on its command line, as a run's probes have their working directory."""
    procs = []

    def start(path):
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", str(path)])
        procs.append(proc)
        deadline = time.monotonic() + 10
        while str(path).encode() not in Path("/proc/%d/cmdline" % proc.pid).read_bytes():  # once it has exec'd
            assert time.monotonic() < deadline
            time.sleep(0.02)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_trailing_slash_on_assess_remote_tmp_still_stops_the_runs_processes(tmp_path, sleeper):
    """prepare_node makes <tmp>/clustermax-assess-<run> with the trailing slash stripped; the cleanup did not: its
    pattern held '//', matched no process, and the directory was removed from under the processes it left."""
    tmp = tmp_path / "tmp"
    workdir = tmp / "clustermax-assess-R1"
    workdir.mkdir(parents=True)
    proc = sleeper(workdir / "probes.pyz")
    out = cleanup(str(tmp) + "/", "R1")
    assert proc.poll() is not None, "the run's process was left running"
    assert "removed %s" % workdir in out and not workdir.exists()
    t = templar(str(tmp) + "//", "R1")
    assert t.template(trust_as_template("{{ preflight_leftover_prefix }}")) == str(workdir)
    assert t.template(trust_as_template("{{ preflight_leftover_pattern }}")) == \
        str(workdir).replace("-", "\\-") + "(/| |$)"


def test_all_on_a_shared_tmp_spares_the_directory_of_a_run_another_nodes_lock_may_hold(tmp_path):
    """Node B's lock is held by run LIVE; this node's is not (its run is gone). Under `all`, the directory of LIVE
    holds B's mark, touched with B's lock: it is spared. This node's own marks are withdrawn first (all nodes of the
    play do that before any removes a directory), so a gone run's directory goes, a mark of another node that no
    longer touches it (stale) does not keep it, and a directory of a run from before the marks goes as before.
    Before, every directory under the shared prefix was removed: LIVE's too."""
    shared = tmp_path / "shared"
    live, gone, old = (shared / ("clustermax-assess-%s" % r) for r in ("LIVE", "GONE", "OLD"))
    for d in (live, gone, old):
        d.mkdir(parents=True)
        (d / "probes.pyz").write_bytes(b"x")
    (live / (MARK + "nodeb.b2")).write_text("{}")  # node B took its lock for LIVE, and its probes touch it
    own = take(tmp_path / "clustermax-assess.lock", "GONE", gone)  # this node ran GONE, which has ended since
    stale = gone / (MARK + "nodeb.b2")
    stale.write_text("{}")
    os.utime(stale, (time.time() - 2 * HEARTBEAT_STALE_S,) * 2)  # B's lock of GONE: untouched for an hour
    out = cleanup(str(shared), "all")
    assert live.is_dir() and (live / "probes.pyz").exists(), out
    assert "spared %s: node nodeb.b2 may still run it" % live in out
    assert "withdrew %s" % own in out
    assert not gone.exists() and not old.exists()
    # a mark is fresh for as long as a lock is (a run's probes touch both every minute)
    assert 60 * yaml.safe_load((ROLE / "vars" / "main.yml").read_text())["preflight_leftover_mark_fresh_min"] == \
        HEARTBEAT_STALE_S


def test_all_keeps_the_mark_and_directory_of_the_run_that_holds_this_nodes_lock(tmp_path):
    shared = tmp_path / "shared"
    mine, other = shared / "clustermax-assess-MINE", shared / "clustermax-assess-OTHER"
    own_mine = take(tmp_path / "a.lock", "MINE", mine)
    own_other = take(tmp_path / "b.lock", "OTHER", other)  # an earlier run on this node, gone since
    out = cleanup(str(shared), "all", live_run="MINE")
    assert "spared %s: its run still runs" % mine in out and own_mine.exists()
    assert "withdrew %s" % own_other in out and not other.exists()
