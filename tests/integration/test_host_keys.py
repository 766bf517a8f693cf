"""A node whose host key changed is refused even while another run's SSH connection to it is still warm (issue 25).

Ansible's ControlPersist masters keep a connection open for 120 s after a run; a master is trusted without any host
key check. Every run has masters of its own (roles/preflight/tasks/controller.yml: ansible_control_path_dir gets the
run id's digest), so a run that starts after a node was replaced, reinstalled or spoofed checks its key again. Here:
run 1 leaves its masters warm, one host gets a new key (its sshd restarted, the old sessions left open), and run 2,
at once, refuses that host for its key and assesses the others."""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers import ansible_env, run_dirs, run_playbook

pytestmark = pytest.mark.cluster


def _masters(control_dir):
    """The live ControlPersist masters under control_dir (one directory per run): {socket: alive}."""
    out = {}
    for sock in sorted(p for p in control_dir.rglob("*") if p.is_socket()):
        res = subprocess.run(["ssh", "-O", "check", "-o", "ControlPath=%s" % sock, "x"], capture_output=True,
                             timeout=30)
        out[str(sock)] = res.returncode == 0
    return out


@pytest.fixture(scope="module")
def runs(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("host_keys")
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    hosts = sorted(h["name"] for h in test_cluster.hosts)
    changed = hosts[1]
    control_dir = Path(tempfile.mkdtemp(prefix="cmxa-cp-", dir="/tmp"))
    env = ansible_env(ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir))
    found = {"hosts": hosts, "changed": changed}
    old_key = None
    try:
        first = run_playbook(inventory, "--tags", "preflight", "-e", "assess_output_dir=%s" % (tmp / "one"), env=env)
        found["one"] = {"rc": first.returncode, "text": first.stdout + first.stderr}
        found["warm_before"] = _masters(control_dir)
        old_key = test_cluster.change_host_key(changed)
        second = run_playbook(inventory, "--tags", "preflight", "-e", "assess_output_dir=%s" % (tmp / "two"), env=env)
        found["two"] = {"rc": second.returncode, "text": second.stdout + second.stderr,
                        "dir": run_dirs(tmp / "two")[0]}
        # the first run's masters, the changed host's among them, were still open while the second ran
        found["warm_after"] = _masters(control_dir)
        found["run_dirs"] = sorted(p.name for p in control_dir.iterdir())
    finally:
        for sock in control_dir.rglob("*"):
            if sock.is_socket():
                subprocess.run(["ssh", "-O", "exit", "-o", "ControlPath=%s" % sock, "x"], capture_output=True,
                               timeout=30)
        shutil.rmtree(control_dir, ignore_errors=True)
        if old_key is not None:
            test_cluster.restore_host_key(changed, old_key)
    return found


def test_a_changed_host_key_is_refused_despite_another_runs_warm_connection(runs):
    assert runs["one"]["rc"] == 0, runs["one"]["text"][-3000:]
    # run 1 left one master per host, and each was still open after run 2: run 2 used none of them
    assert len(runs["warm_before"]) == len(runs["hosts"]) and all(runs["warm_before"].values())
    assert all(runs["warm_after"].get(sock) for sock in runs["warm_before"])
    assert len(runs["run_dirs"]) == 2  # one control directory per run
    two = runs["two"]
    # what the second run said of each host it could not use (cc24 failed here once with no host key message: the
    # failure then says which host failed and why)
    said = [line[:800] for line in two["text"].splitlines() if "UNREACHABLE!" in line or "fatal:" in line
            or "FAILED!" in line] or [two["text"][-3000:]]
    assert two["rc"] != 0, said
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in two["text"] or "Host key verification failed" in two["text"], \
        said
    unreachable = [line for line in two["text"].splitlines() if "UNREACHABLE!" in line]
    assert [line.split("[")[1].split("]")[0] for line in unreachable] == [runs["changed"]], unreachable
    # the other hosts were prepared; the changed one is named in the run's record as not assessed
    doc = json.loads((two["dir"] / "run.json").read_text())
    assert doc["unreachable_hosts"] == [runs["changed"]] and doc["failed_hosts"] == []
    for host in runs["hosts"]:
        if host != runs["changed"]:
            assert (two["dir"] / "artifacts" / host / "node_info.json").exists(), host
