"""The SSH test-cluster harness itself: real sshd hosts in network namespaces, reached over real SSH.

Everything here talks only to the test hosts' addresses and to loopback. The second, small cluster (prefix cmxt,
subnet 10.237.42.0/24, state directory under /tmp) runs next to the session cluster on purpose: it shows that two
clusters coexist and that teardown removes exactly its own pieces.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cluster.cluster import Cluster, ClusterError, preflight

pytestmark = pytest.mark.cluster

CLI = Path(__file__).resolve().parent / "cluster.py"
BIN = Path(sys.executable).parent
SMALL = {"prefix": "cmxt", "subnet_prefix": "10.237.42"}


def _names(cluster):
    return [h["name"] for h in cluster.hosts]


def _ssh_hostnames(cluster):
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda n: cluster.ssh(n, "hostname", timeout=30), _names(cluster)))
    return {n: (r.returncode, r.stdout.strip(), r.stderr.strip()) for n, r in zip(_names(cluster), results)}


def _harness_pids(state_dir):
    """Every process that mentions the state directory: holders (by their marker) and sshd (by its config path)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if not zombie and str(state_dir).encode() in cmdline:
            found.append(int(entry))
    return found


def _assert_gone(cluster, pids):
    prefix = cluster.prefix + "-"
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [line for line in netns.splitlines() if line.startswith(prefix)], netns
    assert not [link for link in os.listdir("/sys/class/net") if link.startswith(prefix)]
    assert not cluster.state_dir.exists()
    assert not _harness_pids(cluster.state_dir)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                assert f.read().rsplit(")", 1)[1].split()[0] == "Z", f"process {pid} survived down"
        except FileNotFoundError:
            pass


def _pids_of(cluster):
    st = cluster.status()
    return [h["holder_pid"] for h in st["hosts"]] + [h["sshd_pid"] for h in st["hosts"] if h["sshd_pid"]]


# ---- the session cluster ---------------------------------------------------------------------------------------


def test_each_host_answers_ssh_with_its_own_hostname(test_cluster):
    n = int(os.environ.get("CMXA_HOSTS", "4"))
    assert _names(test_cluster) == [f"{test_cluster.prefix}-node{k}" for k in range(1, n + 1)]
    assert len({h["ip"] for h in test_cluster.hosts}) == n
    got = _ssh_hostnames(test_cluster)
    assert got == {name: (0, name, "") for name in _names(test_cluster)}


def test_each_host_has_a_private_tmp(test_cluster):
    first, second = _names(test_cluster)[:2]
    path = f"/tmp/cmxa-probe-{uuid.uuid4().hex}"
    try:
        assert test_cluster.ssh(first, f"echo hello > {path}").returncode == 0
        # the same host seen without SSH (nsenter) has the file: exec joins the host's own mounts
        assert test_cluster.exec(first, ["cat", path]).stdout == "hello\n"
        assert test_cluster.ssh(second, ["test", "-e", path]).returncode == 1
        assert not os.path.exists(path)  # nor in the machine's own /tmp
    finally:
        test_cluster.ssh(first, ["rm", "-f", path])


def test_known_hosts_keeps_host_key_checking_on(test_cluster, tmp_path):
    name = _names(test_cluster)[0]
    argv = test_cluster.ssh_argv(name, "true")
    assert "StrictHostKeyChecking=yes" in argv
    assert subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    # the same login without the harness's known_hosts is refused: checking is really on
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    argv = [f"UserKnownHostsFile={empty}" if a.startswith("UserKnownHostsFile=") else a for a in argv]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert res.returncode == 255 and "Host key verification failed" in res.stderr
    # one host key per host
    keys = [line.split()[2] for line in test_cluster.known_hosts_path.read_text().splitlines()]
    assert len(set(keys)) == len(test_cluster.hosts)


def test_stop_sshd_makes_a_host_unreachable_and_start_sshd_brings_it_back(test_cluster):
    names = _names(test_cluster)
    name = names[-1]
    # an open session (like Ansible's ControlPersist master) must not keep the host reachable
    session = subprocess.Popen(test_cluster.ssh_argv(name, "sleep 60"), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        test_cluster.wait_ssh([name], timeout=10)
        time.sleep(0.3)  # the session's remote sleep is running
        test_cluster.stop_sshd(name)
        assert session.wait(timeout=10) == 255
        res = test_cluster.ssh(name, "true", connect_timeout=3, timeout=20)
        assert res.returncode == 255
        assert "Connection refused" in res.stderr, res.stderr  # refused at once, not a hang
        assert test_cluster.ssh(names[0], "true").returncode == 0  # the others are untouched
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
        test_cluster.start_sshd(name)
    assert test_cluster.ssh(name, "hostname").stdout.strip() == name


def test_a_second_up_is_idempotent(test_cluster):
    before = test_cluster.status()
    test_cluster.up(len(before["hosts"]))
    after = test_cluster.status()
    assert after == before  # same holders, same sshd processes: nothing was rebuilt
    assert all(rc == 0 for rc, _, _ in _ssh_hostnames(test_cluster).values())


def test_ansible_adhoc_reaches_every_host(test_cluster, tmp_path):
    ansible = BIN / "ansible"
    if not ansible.exists():
        pytest.skip(f"ansible-core is not installed in {BIN}")
    inventory = test_cluster.write_inventory(tmp_path / "cluster.ini")
    text = inventory.read_text()
    assert "[all:vars]\nassess_provider=testcluster" in text
    assert f"-o UserKnownHostsFile={test_cluster.known_hosts_path} -o StrictHostKeyChecking=yes" in text
    assert f"ansible_python_interpreter={sys.executable}" in text and f"assess_python={sys.executable}" in text
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{BIN}:{env.get('PATH', '')}"
    # cwd outside the checkout: this checks the harness alone, not the project's ansible.cfg
    res = subprocess.run([str(ansible), "all", "-i", str(inventory), "-m", "ansible.builtin.command", "-a", "hostname"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(re.findall(r"^(\S+) \| CHANGED \| rc=0 >>\n(\S+)$", res.stdout, re.M))
    assert got == {name: name for name in _names(test_cluster)}, res.stdout


def test_cli_status_inventory_exec(test_cluster, tmp_path):
    env = {**os.environ, "CMXA_STATE_DIR": str(test_cluster.state_dir)}
    name = _names(test_cluster)[1]

    def cli(*args):
        return subprocess.run([sys.executable, str(CLI), *args], env=env, capture_output=True, text=True, timeout=60)

    res = cli("status")
    assert res.returncode == 0 and name in res.stdout, res.stdout + res.stderr
    out = tmp_path / "inv.ini"
    res = cli("inventory", "--python", "/usr/bin/python3", "--out", str(out))
    assert res.returncode == 0 and res.stdout.strip() == str(out)
    assert "ansible_python_interpreter=/usr/bin/python3" in out.read_text()
    res = cli("exec", name, "--", "hostname")
    assert (res.returncode, res.stdout.strip()) == (0, name)
    res = cli("exec", name, "--", "sh", "-c", "exit 3")
    assert res.returncode == 3


# ---- a second, small cluster of its own ------------------------------------------------------------------------


@pytest.fixture
def small_state(tmp_path_factory):
    reason = preflight()
    if reason:
        pytest.skip(reason)
    # Under /tmp on purpose: the hosts' /tmp is private, so this also checks that the state dir is bound back in.
    return tmp_path_factory.mktemp("cmxt") / "state"


def test_a_second_cluster_coexists_goes_down_cleanly_and_comes_back(test_cluster, small_state):
    small = Cluster(state_dir=small_state, **SMALL)
    try:
        for _ in range(2):  # up, down, and the same again on the same state directory
            small.up(2)
            assert _ssh_hostnames(small) == {n: (0, n, "") for n in ("cmxt-node1", "cmxt-node2")}
            assert small.exec("cmxt-node1", ["test", "-f", str(small_state / "state.json")]).returncode == 0
            assert test_cluster.ssh(_names(test_cluster)[0], "true").returncode == 0  # the session cluster too
            pids = _pids_of(small)
            assert len(pids) == 4
            small.down()
            _assert_gone(small, pids)
        assert test_cluster.ssh(_names(test_cluster)[0], "true").returncode == 0
    finally:
        small.down()


def test_up_repairs_a_host_and_reports_one_that_does_not_answer(small_state):
    small = Cluster(state_dir=small_state, **SMALL)
    try:
        small.up(2)
        # a host whose holder died (everything in it is gone) is remade by the next up; the other is kept
        keep = small.host("cmxt-node1")["holder_pid"]
        dead = small.host("cmxt-node2")["holder_pid"]
        for pid in subprocess.run(["ip", "netns", "pids", "cmxt-node2"], capture_output=True,
                                  text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        small.up(2)
        assert small.host("cmxt-node1")["holder_pid"] == keep
        assert small.host("cmxt-node2")["holder_pid"] != dead
        assert _ssh_hostnames(small)["cmxt-node2"] == (0, "cmxt-node2", "")
        # an sshd that is down is named, with its log, when waiting for it
        small.stop_sshd("cmxt-node2")
        with pytest.raises(ClusterError, match=r"cmxt-node2 \(10\.237\.42\.12\).*sshd\.log"):
            small.wait_ssh(timeout=1)
        small.up(1)  # a smaller up removes the extra host
        assert _names(small) == ["cmxt-node1"]
        assert "cmxt-node2" not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    finally:
        small.down()
    _assert_gone(small, [])


def test_down_cleans_up_after_a_partial_up(small_state):
    # What a crashed `up` can leave: a bridge, namespaces, a veth, a process in a namespace, no state.json at all.
    subprocess.run(["ip", "link", "add", "cmxt-br0", "type", "bridge"], check=True)
    subprocess.run(["ip", "netns", "add", "cmxt-node1"], check=True)
    subprocess.run(["ip", "netns", "add", "cmxt-node2"], check=True)
    subprocess.run(["ip", "link", "add", "cmxt-v1", "type", "veth", "peer", "name", "eth0", "netns", "cmxt-node1"],
                   check=True)
    stray = subprocess.Popen(["ip", "netns", "exec", "cmxt-node2", "sleep", "300"])
    try:
        time.sleep(0.1)
        small = Cluster(state_dir=small_state, **SMALL)
        small.down()
        assert stray.wait(timeout=10) != 0
        _assert_gone(small, [stray.pid])
        # and down with nothing there at all is fine too
        small.down()
    finally:
        if stray.poll() is None:
            stray.kill()
            stray.wait()
        Cluster(state_dir=small_state, **SMALL).down()
