#!/usr/bin/env python3
"""SSH test cluster: N real SSH hosts on this machine, made of Linux namespaces (no containers, no VMs).

Each test host is
  * a network namespace ``<prefix>-nodeK`` with one interface ``eth0`` (a veth pair whose other end,
    ``<prefix>-vK``, is a port of the bridge ``<prefix>-br0``) and the address ``<subnet>.(10+K)/24``;
  * a UTS namespace with its own hostname ``<prefix>-nodeK``;
  * a private mount namespace with empty tmpfs on /tmp, /run and /dev/shm, and its own /etc/hosts and
    /etc/resolv.conf; the rest of the filesystem is shared, like nodes booted from one image;
  * its own sshd (config, host key, pid file and log in the state directory) listening only on the host's address.

A long-lived "holder" process per host owns those namespaces. It is a tiny init: it starts the host's sshd as its
child, restarts it on SIGUSR1, and reaps every orphan of the host (it is a child subreaper). This machine's PID 1
does not reap orphans, so without that every daemon killed at teardown would stay a zombie until the machine goes.
Anything else joins a host with ``nsenter -t <holder> -m -u -n`` (see ``Cluster.exec``).

Use as a CLI::

    python tests/cluster/cluster.py up 4
    python tests/cluster/cluster.py inventory [--python PATH] [--out FILE]
    python tests/cluster/cluster.py status [--json]
    python tests/cluster/cluster.py exec cmxa-node1 -- hostname
    python tests/cluster/cluster.py ssh cmxa-node1 -- uptime
    python tests/cluster/cluster.py stop-sshd cmxa-node2 / start-sshd cmxa-node2
    python tests/cluster/cluster.py down

or as a module: ``Cluster(state_dir=None).up(4)``, ``.write_inventory(path)``, ``.exec(name, argv)``, ``.down()``.

Environment: ``CMXA_STATE_DIR`` (default ``<repo>/.testcluster``), ``CMXA_PREFIX`` (default ``cmxa``; names of
the bridge, namespaces, veths and hostnames), ``CMXA_SUBNET_PREFIX`` (default ``10.237.41``: the bridge is .1,
hosts are .11, .12, ...; both are read when a cluster is made, afterwards its state.json says), ``CMXA_KEEP_PATHS``
(colon-separated paths under /tmp, /run or /dev/shm that the hosts must still see: those three are private in each
host, so e.g. pytest's tmp_path is not visible there; the state directory and the caller's sys.prefix, a virtual
environment under /tmp for instance, are kept visible without asking). Two clusters coexist when both their prefix
and their subnet differ.

Only the standard library is used (Python 3.9+), so it runs before any virtual environment exists.
Traffic only ever goes to loopback or to the test hosts' own addresses.
"""

from __future__ import annotations

import argparse
import fcntl
import ipaddress
import json
import os
import re
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent

DEFAULT_PREFIX = "cmxa"
DEFAULT_SUBNET_PREFIX = "10.237.41"
FIRST_HOST_OCTET = 11  # hosts are .11, .12, ...; .1 is the bridge (the controller side)
# The hosts' default route points at an address nobody owns: facts such as ansible_default_ipv4 are filled in as on
# a real node, yet a packet for the outside world never leaves the bridge (nobody answers ARP for it), even on a
# machine that forwards IP.
GATEWAY_OCTET = 254
MAX_HOSTS = 200  # .11 .. .210, well clear of the gateway
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path
# Mount points that every host gets empty and private. A path under them that hosts must still see (the state
# directory, a virtual environment under /tmp, CMXA_KEEP_PATHS) is bound back in by the holder.
PRIVATE_MOUNTS = (("/run", "0755"), ("/tmp", "1777"), ("/dev/shm", "1777"))
HOLDER_ENV = "CMXA_HOLDER"  # marks holder processes as ours: "<state dir>::<host name>"
STATE_MARKER = ".cmxa-testcluster"  # only a directory holding this file is ever removed by `down`
STATE_VERSION = 1


class ClusterError(RuntimeError):
    """Something about the test cluster failed; the message says which host and where to look."""


# --------------------------------------------------------------------------------------------------------------
# small helpers


def _run(argv, check=True, timeout=30, input=None, env=None) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            stdin=None if input is not None else subprocess.DEVNULL,
            text=True,
            timeout=timeout,
            env=env,
        )
    except FileNotFoundError as e:
        raise ClusterError(f"command not found: {argv[0]}") from e
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"timed out after {timeout}s: {shlex.join(argv)}") from e
    if check and cp.returncode != 0:
        raise ClusterError(f"failed (rc {cp.returncode}): {shlex.join(argv)}: {cp.stderr.strip() or cp.stdout.strip()}")
    return cp


def _ip(*args, check=True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check=check)


def _link_exists(name: str) -> bool:
    # Our own process lives in the root network namespace, so its /sys/class/net lists the root links.
    return os.path.exists(f"/sys/class/net/{name}")


def _netns_list() -> list[str]:
    cp = _ip("netns", "list", check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def _netns_pids(ns: str) -> list[int]:
    cp = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def _pid_alive(pid: int | None) -> bool:
    """True for a running process; a zombie counts as gone (it holds no namespace and no port)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _proc_env(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _proc_exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _pid_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _pid_alive(p)]
    return left


def _terminate(pids, term_timeout=2.0) -> None:
    """SIGTERM, a short grace period, then SIGKILL: always by PID, never by name."""
    pids = [p for p in pids if _pid_alive(p)]
    if not pids:
        return
    _signal_all(pids, signal.SIGTERM)
    left = _wait_gone(pids, term_timeout)
    if left:
        _signal_all(left, signal.SIGKILL)
        _wait_gone(left, 3.0)


def _under_private_mount(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root, _ in PRIVATE_MOUNTS)


def _write_text(path: Path, text: str, mode: int | None = None) -> None:
    # Written in place (not renamed into place): /etc/hosts inside running hosts is a bind mount of this very inode.
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)


def preflight() -> str | None:
    """Why the cluster cannot be made here (a plain reason for pytest.skip), or None when it can."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux"), ("nsenter", "util-linux"),
                          ("ssh", "openssh-client"), ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            return f"{tool} not found (install {package})"
    if not os.access(SSHD, os.X_OK):
        return f"{SSHD} not found (install openssh-server)"
    try:
        cp = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"ip netns unavailable: {e}"
    if cp.returncode != 0:
        return f"ip netns unavailable: {cp.stderr.strip()}"
    return None


# --------------------------------------------------------------------------------------------------------------
# the cluster


class Cluster:
    """One SSH test cluster, described by its state directory (state.json, keys, configs, logs)."""

    def __init__(self, state_dir: str | os.PathLike | None = None, prefix: str | None = None,
                 subnet_prefix: str | None = None):
        self.state_dir = Path(os.path.abspath(state_dir or os.environ.get("CMXA_STATE_DIR")
                                              or REPO_ROOT / ".testcluster"))
        saved = self._load_state() or {}
        # An explicit argument wins (up refuses it when it contradicts an existing cluster); then what the state
        # directory says, because it describes what really exists (so `down` removes the right names whatever the
        # environment says now); then the environment; then the default.
        self.prefix = prefix or saved.get("prefix") or os.environ.get("CMXA_PREFIX") or DEFAULT_PREFIX
        self.subnet_prefix = (subnet_prefix or saved.get("subnet_prefix") or os.environ.get("CMXA_SUBNET_PREFIX")
                              or DEFAULT_SUBNET_PREFIX)
        self._validate_names()
        self._children: dict[str, subprocess.Popen] = {}  # holders this process started (to reap them)

    # ---- names and paths ------------------------------------------------------------------------------------

    def _validate_names(self) -> None:
        # veth names are at most 15 characters: "<prefix>-v<K>" leaves 8 for the prefix with K up to 999.
        if not re.fullmatch(r"[a-z][a-z0-9]{0,7}", self.prefix):
            raise ClusterError(f"prefix {self.prefix!r}: use 1-8 lowercase letters/digits, starting with a letter")
        parts = self.subnet_prefix.split(".")
        if len(parts) != 3 or not all(p.isdigit() and 0 <= int(p) <= 255 for p in parts):
            raise ClusterError(f"subnet prefix {self.subnet_prefix!r}: want three octets such as 10.237.41")
        if not ipaddress.ip_network(self.subnet).is_private:
            # The cluster must never shadow addresses of the real world.
            raise ClusterError(f"subnet {self.subnet} is not a private range")

    @property
    def subnet(self) -> str:
        return f"{self.subnet_prefix}.0/24"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br0"

    @property
    def bridge_ip(self) -> str:
        return f"{self.subnet_prefix}.1"

    @property
    def gateway_ip(self) -> str:
        return f"{self.subnet_prefix}.{GATEWAY_OCTET}"

    @property
    def key_path(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def ssh_config_path(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def state_path(self) -> Path:
        return self.state_dir / "state.json"

    def host_dir(self, name: str) -> Path:
        return self.state_dir / "nodes" / name

    def sshd_log(self, name: str) -> Path:
        return self.host_dir(name) / "sshd.log"

    def _spec(self, index: int) -> dict:
        name = f"{self.prefix}-node{index}"
        return {"name": name, "index": index, "ip": f"{self.subnet_prefix}.{FIRST_HOST_OCTET + index - 1}",
                "netns": name, "veth": f"{self.prefix}-v{index}"}

    def _holder_mark(self, name: str) -> str:
        return f"{self.state_dir}::{name}"

    # ---- state ----------------------------------------------------------------------------------------------

    def _load_state(self) -> dict | None:
        try:
            with open(self.state_path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def _save_state(self, state: dict) -> None:
        tmp = self.state_path.with_suffix(".json.tmp")
        with open(tmp, "w") as f:
            json.dump(state, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, self.state_path)

    @property
    def hosts(self) -> list[dict]:
        """The hosts as recorded by the last `up`: dicts with name, ip, index, netns, veth, holder_pid."""
        state = self._load_state() or {}
        return [dict(h) for h in state.get("hosts", [])]

    def host(self, name_or_index) -> dict:
        """A host by inventory name (cmxa-node2), short name (node2) or index (2)."""
        key = str(name_or_index)
        for h in self.hosts:
            if key in (h["name"], str(h["index"]), f"node{h['index']}"):
                return h
        raise ClusterError(f"no host {key!r} in {self.state_dir} (hosts: {[h['name'] for h in self.hosts]})")

    @contextmanager
    def _lock(self):
        # Serialises up/down/start/stop on one state directory (two terminals, or pytest and molecule).
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / ".lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # ---- ownership of the machine-wide names -----------------------------------------------------------------

    def _bridge_owner(self) -> str | None:
        # The bridge's alias records which state directory made it: namespace and link names are machine-wide,
        # the alias is how a second state directory with the same prefix is refused instead of trampled on.
        try:
            with open(f"/sys/class/net/{self.bridge}/ifalias") as f:
                return f.read().strip() or None
        except OSError:
            return None

    def _check_owner(self, action: str) -> None:
        owner = self._bridge_owner()
        if owner and owner != str(self.state_dir) and os.path.exists(os.path.join(owner, "state.json")):
            raise ClusterError(
                f"cannot {action}: bridge {self.bridge} belongs to the cluster in {owner}; "
                f"run `down` with CMXA_STATE_DIR={owner}, or use another CMXA_PREFIX/CMXA_SUBNET_PREFIX")

    def _check_subnet_free(self) -> None:
        """Refuse a subnet that this machine already uses: routes to it would be ambiguous."""
        ours = ipaddress.ip_network(self.subnet)
        for line in _ip("-4", "-o", "addr", "show").stdout.splitlines():
            fields = line.split()
            if "inet" in fields and fields[1] != self.bridge:
                iface = ipaddress.ip_interface(fields[fields.index("inet") + 1])
                if iface.ip in ours or ours.subnet_of(iface.network) and iface.network.prefixlen >= 24:
                    raise ClusterError(f"subnet {self.subnet} is in use here ({iface} on {fields[1]}); "
                                       "set CMXA_SUBNET_PREFIX to a free one")
        for line in _ip("-4", "route", "show").stdout.splitlines():
            dest = line.split()[0] if line.split() else ""
            if dest in ("default", "") or f"dev {self.bridge}" in line:
                continue
            try:
                net = ipaddress.ip_network(dest, strict=False)
            except ValueError:
                continue
            if net.subnet_of(ours):
                raise ClusterError(f"subnet {self.subnet} overlaps the route '{line.strip()}'; "
                                   "set CMXA_SUBNET_PREFIX to a free one")

    # ---- up -------------------------------------------------------------------------------------------------

    def up(self, n: int, timeout: float = 30.0) -> Cluster:
        """Make (or complete) a cluster of exactly n hosts and wait until every sshd answers a real ssh login.

        Idempotent: whatever already runs is kept (same holders, same sshd), missing pieces are made, hosts beyond
        n are removed. Raises ClusterError naming the host and its logs when something does not come up.
        """
        if not 1 <= int(n) <= MAX_HOSTS:
            raise ClusterError(f"host count {n}: want 1..{MAX_HOSTS}")
        reason = preflight()
        if reason:
            raise ClusterError(reason)
        # Refusals come before anything is made, so a refused `up` leaves nothing behind.
        self._check_owner("up")
        if not _link_exists(self.bridge):
            self._check_subnet_free()
        if self.state_dir.is_dir() and not (self.state_dir / STATE_MARKER).exists() \
                and any(p.name != ".lock" for p in self.state_dir.iterdir()):
            # `down` removes the whole state directory: never adopt a directory that already holds other things.
            raise ClusterError(f"{self.state_dir} exists and is not a test-cluster state directory; choose another")
        saved = self._load_state()
        if saved and (saved.get("prefix"), saved.get("subnet_prefix")) != (self.prefix, self.subnet_prefix) \
                and saved.get("hosts"):
            raise ClusterError(
                f"{self.state_dir} holds a cluster with prefix {saved.get('prefix')} and subnet "
                f"{saved.get('subnet_prefix')}.0/24; run `down` first to change them")
        with self._lock():
            saved = self._load_state()
            (self.state_dir / STATE_MARKER).touch()
            state = {"version": STATE_VERSION, "prefix": self.prefix, "subnet_prefix": self.subnet_prefix,
                     "bridge": self.bridge, "bridge_ip": self.bridge_ip, "state_dir": str(self.state_dir),
                     "hosts": (saved or {}).get("hosts", [])}
            old = {h["name"]: h for h in state["hosts"]}
            specs = [self._spec(k) for k in range(1, int(n) + 1)]

            # Hosts beyond n (a smaller `up`), recorded or merely left behind as namespaces, go first.
            wanted = {s["name"] for s in specs}
            pattern = re.compile(rf"{re.escape(self.prefix)}-node(\d+)")
            extra = {name for name in old if name not in wanted}
            extra |= {ns for ns in _netns_list() if pattern.fullmatch(ns) and ns not in wanted}
            for name in sorted(extra):
                self._remove_host(name, old.get(name))

            self._ensure_client_key()
            self._ensure_bridge()
            with ThreadPoolExecutor(max_workers=8) as pool:  # ssh-keygen per host, in parallel
                list(pool.map(self._ensure_host_files, specs))
            self._write_cluster_files(specs)

            hosts = []
            for spec in specs:
                hosts.append(self._ensure_host(spec, old.get(spec["name"])))
                state["hosts"] = hosts + [h for h in state["hosts"] if h["name"] in wanted
                                          and h["name"] not in {x["name"] for x in hosts}]
                self._save_state(state)  # after every host, so `down` finds it even if a later one fails
            state["hosts"] = hosts
            self._save_state(state)
        self.wait_ssh(timeout=timeout)
        return self

    def _ensure_client_key(self) -> None:
        if not self.key_path.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{self.prefix}-testcluster",
                  "-f", str(self.key_path)])
        # Every host's sshd reads this one file (AuthorizedKeysFile in its config): the machine's ~/.ssh is untouched.
        pub = self.key_path.with_suffix(".pub").read_text()
        _write_text(self.state_dir / "authorized_keys", pub, 0o600)

    def _ensure_bridge(self) -> None:
        br = self.bridge
        if not _link_exists(br):
            self._check_subnet_free()
            _ip("link", "add", br, "type", "bridge", "stp_state", "0")
        _ip("link", "set", "dev", br, "alias", str(self.state_dir))
        addrs = _ip("-4", "-o", "addr", "show", "dev", br).stdout
        if f" {self.bridge_ip}/24 " not in addrs:
            _ip("addr", "add", f"{self.bridge_ip}/24", "dev", br)
        _ip("link", "set", br, "up")

    def _ensure_host_files(self, spec: dict) -> None:
        name, hdir = spec["name"], self.host_dir(spec["name"])
        hdir.mkdir(parents=True, exist_ok=True)
        hostkey = hdir / "ssh_host_ed25519_key"
        if not hostkey.exists():
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(hostkey)])
        _write_text(hdir / "sshd_config", self._sshd_config(spec))

    def _sshd_config(self, spec: dict) -> str:
        hdir = self.host_dir(spec["name"])
        return "\n".join([
            f"# sshd of test host {spec['name']} (tests/cluster/cluster.py); the machine's /etc/ssh is not used.",
            f"ListenAddress {spec['ip']}:22",
            f"HostKey {hdir / 'ssh_host_ed25519_key'}",
            f"PidFile {hdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.state_dir / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            # No PAM here: PAM modules expect a systemd/logind world that this machine does not have.
            "UsePAM no",
            # The state directory may sit under a world-writable directory (/tmp, /work): do not refuse it for that.
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            # Ansible with many forks opens connections in bursts; sshd's default (10:30:100) drops some of them.
            "MaxStartups 100:30:200",
            "MaxSessions 64",
            # Every login runs root's shell rc files, which may run `pyenv rehash`; a session killed mid-rehash
            # (stop_sshd, a simulated reboot) leaves its lock behind in the shared /root, and every later login
            # would wait pyenv's default 60 s for it. One second is plenty for the real work.
            "SetEnv PYENV_REHASH_TIMEOUT=1",
            "LogLevel VERBOSE",
            "Subsystem sftp internal-sftp",
            "",
        ])

    def _write_cluster_files(self, specs: list[dict]) -> None:
        # known_hosts straight from the host public keys (no ssh-keyscan): keyed by IP, the address Ansible uses,
        # and by name. Host key checking stays on everywhere.
        lines = []
        for s in specs:
            key = (self.host_dir(s["name"]) / "ssh_host_ed25519_key.pub").read_text().split()
            lines.append(f"{s['name']},{s['ip']} {key[0]} {key[1]}")
        _write_text(self.known_hosts_path, "\n".join(lines) + "\n", 0o644)

        # /etc/hosts inside every host: the hosts know each other by name, and their own name resolves without DNS.
        hosts = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        hosts += [f"{s['ip']} {s['name']}" for s in specs]
        _write_text(self.state_dir / "hosts", "\n".join(hosts) + "\n", 0o644)
        # /etc/resolv.conf inside every host: DNS goes to the host's own loopback, where nothing listens, so a lookup
        # fails at once (instead of timing out) and never leaves the machine.
        _write_text(self.state_dir / "resolv.conf",
                    "# test host: no DNS; lookups fail at once on loopback\n"
                    "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n", 0o644)

        # For people and for host-to-host ssh (mpirun): ssh -F <state>/ssh_config cmxa-node2
        cfg = [f"# ssh -F {self.ssh_config_path} <host>"]
        for s in specs:
            cfg += [f"Host {s['name']}", f"  HostName {s['ip']}"]
        cfg += [f"Host {self.prefix}-node* {self.subnet_prefix}.*", "  User root", f"  IdentityFile {self.key_path}",
                "  IdentitiesOnly yes", f"  UserKnownHostsFile {self.known_hosts_path}",
                "  GlobalKnownHostsFile /dev/null", "  StrictHostKeyChecking yes", "  BatchMode yes",
                "  LogLevel ERROR", ""]
        _write_text(self.ssh_config_path, "\n".join(cfg), 0o644)

    def _network_ok(self, spec: dict) -> bool:
        if not _link_exists(spec["veth"]):
            return False
        try:
            master = os.path.basename(os.readlink(f"/sys/class/net/{spec['veth']}/master"))
        except OSError:
            return False
        cp = _ip("-n", spec["netns"], "-4", "-o", "addr", "show", "dev", "eth0", check=False)
        return master == self.bridge and cp.returncode == 0 and f" {spec['ip']}/24 " in cp.stdout

    def _make_network(self, spec: dict) -> None:
        ns, veth = spec["netns"], spec["veth"]
        if _link_exists(veth):
            _ip("link", "del", veth, check=False)
        _ip("-n", ns, "link", "del", "eth0", check=False)
        # The host side is called eth0 in every host, like a node's NIC (GLOO_SOCKET_IFNAME=eth0 everywhere).
        _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        _ip("link", "set", "dev", veth, "alias", str(self.state_dir))
        _ip("link", "set", veth, "master", self.bridge, "up")
        _ip("-n", ns, "addr", "add", f"{spec['ip']}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "route", "replace", "default", "via", self.gateway_ip, "dev", "eth0")
        # A remade host has a new MAC address: forget the old one, or the controller keeps sending to it for ~20 s.
        _ip("neigh", "flush", "to", spec["ip"], "dev", self.bridge, check=False)

    def _holder_ok(self, name: str, pid: int | None) -> bool:
        """Is pid the live holder of host name in this state directory (not a reused PID)?"""
        if not _pid_alive(pid):
            return False
        if _proc_env(pid).get(HOLDER_ENV) != self._holder_mark(name):
            return False
        return _ns_inode(f"/proc/{pid}/ns/net") == _ns_inode(f"/run/netns/{name}")

    def _sshd_pid(self, name: str) -> int | None:
        """PID of the host's listening sshd when it runs, else None."""
        try:
            pid = int((self.host_dir(name) / "sshd.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if _pid_alive(pid) and _ns_inode(f"/proc/{pid}/ns/net") == _ns_inode(f"/run/netns/{name}"):
            return pid
        return None

    def _ensure_host(self, spec: dict, old: dict | None) -> dict:
        name, ns = spec["name"], spec["netns"]
        if ns not in _netns_list():
            _ip("netns", "add", ns)
        network_made = False
        if not self._network_ok(spec):
            self._make_network(spec)
            network_made = True
        holder = (old or {}).get("holder_pid")
        if not self._holder_ok(name, holder):
            # A namespace without its holder is a leftover: whatever still runs there belongs to no host.
            _terminate(_netns_pids(ns))
            holder = self._start_holder(spec)
        elif network_made or self._sshd_pid(name) is None:
            self._restart_sshd(name, holder)
        return {**spec, "holder_pid": holder}

    def _start_holder(self, spec: dict) -> int:
        name, hdir = spec["name"], self.host_dir(spec["name"])
        # The checkout itself stays visible too: nodes share the image, and tests plant files under the repo's
        # .cache/ for every host to see, even when the checkout lies under /tmp (a clone made for CI, say).
        keep = [str(self.state_dir), sys.prefix, str(REPO_ROOT)]
        keep += [p for p in os.environ.get("CMXA_KEEP_PATHS", "").split(":") if p]
        argv = ["ip", "netns", "exec", spec["netns"],
                "unshare", "--uts", "--mount", "--propagation", "private",
                sys.executable, "-I", "-S", str(Path(__file__).resolve()), "_holder",
                "--name", name, "--sshd-config", str(hdir / "sshd_config"), "--sshd-log", str(hdir / "sshd.log"),
                "--hosts-file", str(self.state_dir / "hosts"), "--resolv-file", str(self.state_dir / "resolv.conf")]
        for p in keep:
            argv += ["--keep", p]
        # A small, fixed environment: it is what the host's sshd (and so every daemon it starts) inherits.
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               HOLDER_ENV: self._holder_mark(name)}
        with open(hdir / "holder.log", "ab") as log:
            # start_new_session: the holder is setsid'd, so no terminal signal (Ctrl-C in pytest) reaches the host.
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                    env=env, start_new_session=True, close_fds=True)
        self._children[name] = proc
        line = ""
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            if sel.select(timeout=15):
                line = proc.stdout.readline().decode(errors="replace").strip()
        proc.stdout.close()
        if not line.startswith("ready "):
            if proc.poll() is None:
                _terminate([proc.pid])
            proc.wait()
            raise ClusterError(f"{name}: holder did not start ({line or 'no answer'}); see {hdir / 'holder.log'}")
        return int(line.split()[1])

    def _restart_sshd(self, name: str, holder: int) -> None:
        self.stop_sshd(name)
        # The holder starts sshd as its own child on SIGUSR1 (see _holder_main).
        os.kill(holder, signal.SIGUSR1)

    # ---- waiting for ssh ------------------------------------------------------------------------------------

    def ssh_argv(self, name: str, command=None, connect_timeout: float = 5, batch: bool = True) -> list[str]:
        """An ssh command line to a host with the harness key and known_hosts (strict checking).

        -F /dev/null: the caller's ~/.ssh/config must not change what the tests see.
        """
        ip = self.host(name)["ip"]
        argv = ["ssh", "-F", "/dev/null", "-i", str(self.key_path), "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts_path}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "StrictHostKeyChecking=yes", "-o", f"BatchMode={'yes' if batch else 'no'}",
                "-o", f"ConnectTimeout={max(1, int(connect_timeout))}", "-o", "LogLevel=ERROR", f"root@{ip}"]
        if command is not None:
            argv += ["--", command if isinstance(command, str) else shlex.join(command)]
        return argv

    def ssh(self, name: str, command, timeout: float = 60, connect_timeout: float = 5,
            check: bool = False) -> subprocess.CompletedProcess:
        """Run a command on a host over real SSH; command is a shell line (str) or an argv (list)."""
        argv = self.ssh_argv(name, command, connect_timeout)
        cp = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout)
        if check and cp.returncode != 0:
            raise ClusterError(f"{name}: ssh {command!r} failed (rc {cp.returncode}): {cp.stderr.strip()}")
        return cp

    def _wait_one(self, h: dict, deadline: float) -> str | None:
        name, ip = h["name"], h["ip"]
        last = "no answer"
        while True:
            # A cheap TCP probe first (no process per try), then one real login with key and known_hosts.
            try:
                with socket.create_connection((ip, 22), timeout=1):
                    pass
                cp = self.ssh(name, "true", timeout=10, connect_timeout=3)
                if cp.returncode == 0:
                    return None
                last = cp.stderr.strip() or f"ssh rc {cp.returncode}"
            except (OSError, subprocess.TimeoutExpired) as e:
                last = str(e)
            if time.monotonic() > deadline:
                log = self.sshd_log(name)
                tail = ""
                try:
                    tail = "\n    ".join(log.read_text(errors="replace").splitlines()[-8:])
                except OSError:
                    pass
                return (f"{name} ({ip}): sshd does not answer ssh ({last}); sshd log {log}"
                        + (f":\n    {tail}" if tail else "") + f"\n  holder log {self.host_dir(name) / 'holder.log'}")
            time.sleep(0.05)

    def wait_ssh(self, names=None, timeout: float = 30.0) -> None:
        """Wait until each host (default: all) answers `ssh root@ip true`; else raise ClusterError naming them."""
        hosts = [self.host(n) for n in names] if names else self.hosts
        deadline = time.monotonic() + timeout
        with ThreadPoolExecutor(max_workers=min(16, max(1, len(hosts)))) as pool:
            errors = [e for e in pool.map(lambda h: self._wait_one(h, deadline), hosts) if e]
        if errors:
            raise ClusterError(f"not reachable over ssh within {timeout:.0f}s:\n  " + "\n  ".join(errors))

    # ---- sshd on / off --------------------------------------------------------------------------------------

    def stop_sshd(self, name: str, kill_sessions: bool = True) -> None:
        """Make a host unreachable over SSH: its sshd stops listening (connections are refused at once).

        With kill_sessions (the default), open SSH sessions of that host end too, including Ansible's ControlPersist
        master connections, which would otherwise keep the host reachable. Other processes of the host keep running.
        """
        h = self.host(name)
        listener = self._sshd_pid(h["name"])
        pids = [listener] if listener else []
        if kill_sessions:
            sshd_exe = os.path.realpath(SSHD)
            pids += [p for p in _netns_pids(h["netns"])
                     if p != listener and _proc_exe(p).removesuffix(" (deleted)") == sshd_exe]
        _terminate(pids)
        try:
            (self.host_dir(h["name"]) / "sshd.pid").unlink()
        except OSError:
            pass

    def start_sshd(self, name: str, timeout: float = 15.0) -> None:
        """Start a host's sshd again (after stop_sshd) and wait until it answers ssh."""
        h = self.host(name)
        if not self._holder_ok(h["name"], h.get("holder_pid")):
            raise ClusterError(f"{h['name']}: its holder is gone; run `up` again to remake the host")
        if self._sshd_pid(h["name"]) is None:
            os.kill(h["holder_pid"], signal.SIGUSR1)
        self.wait_ssh([h["name"]], timeout=timeout)

    # ---- running things inside a host -----------------------------------------------------------------------

    def exec(self, name: str, argv, timeout: float | None = 60, check: bool = False, input: str | None = None,
             capture: bool = True, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run argv inside a host (its network, hostname and mounts) through nsenter, without SSH.

        Returns the CompletedProcess (text; stdout/stderr captured unless capture=False).
        """
        h = self.host(name)
        if not self._holder_ok(h["name"], h.get("holder_pid")):
            raise ClusterError(f"{h['name']}: its holder is gone; run `up` again")
        cmd = ["nsenter", "-t", str(h["holder_pid"]), "-m", "-u", "-n", "--", *argv]
        out = subprocess.PIPE if capture else None
        cp = subprocess.run(cmd, input=input, stdin=None if input is not None else subprocess.DEVNULL,
                            stdout=out, stderr=out, text=True, timeout=timeout, env=env)
        if check and cp.returncode != 0:
            raise ClusterError(f"{h['name']}: {shlex.join(argv)} failed (rc {cp.returncode}): {cp.stderr}")
        return cp

    # ---- inventory ------------------------------------------------------------------------------------------

    def write_inventory(self, path: str | os.PathLike | None = None, python: str | None = None,
                        extra_host_vars: dict | None = None, extra_group_vars: dict | None = None) -> Path:
        """Write an Ansible INI inventory for the cluster and return its path (default <state>/inventory.ini).

        python: the interpreter on the hosts (ansible_python_interpreter and assess_python); default the caller's
        sys.executable, which the hosts see too because the filesystem is shared.
        extra_host_vars: {host name: {var: value}} added to that host's line; extra_group_vars go to [nodes:vars].
        """
        hosts = self.hosts
        if not hosts:
            raise ClusterError(f"no cluster in {self.state_dir}: run `up` first")
        python = python or sys.executable
        path = Path(path) if path else self.state_dir / "inventory.ini"

        def value(v) -> str:
            s = str(v)
            return shlex.quote(s) if re.search(r"[\s'\"#;=]", s) else s

        ssh_args = (f"-o UserKnownHostsFile={self.known_hosts_path} -o StrictHostKeyChecking=yes "
                    "-o IdentitiesOnly=yes")
        lines = [f"# SSH test cluster in {self.state_dir} (tests/cluster/cluster.py)", "[all:vars]",
                 "assess_provider=testcluster", "", "[nodes]"]
        for h in hosts:
            extra = "".join(f" {k}={value(v)}" for k, v in ((extra_host_vars or {}).get(h["name"]) or {}).items())
            lines.append(f"{h['name']} ansible_host={h['ip']}{extra}")
        group_vars = {"ansible_user": "root", "ansible_ssh_private_key_file": self.key_path,
                      "ansible_python_interpreter": python, "assess_python": python, **(extra_group_vars or {})}
        lines += ["", "[nodes:vars]"] + [f"{k}={value(v)}" for k, v in group_vars.items()]
        lines.append(f"ansible_ssh_common_args='{ssh_args}'")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n")
        return path

    # ---- status ---------------------------------------------------------------------------------------------

    def status(self) -> dict:
        state = self._load_state()
        netns = set(_netns_list())
        hosts = []
        for h in (state or {}).get("hosts", []):
            hosts.append({"name": h["name"], "ip": h["ip"], "netns": h["netns"] in netns,
                          "holder_pid": h.get("holder_pid"),
                          "holder_alive": self._holder_ok(h["name"], h.get("holder_pid")),
                          "sshd_pid": self._sshd_pid(h["name"]) if h["netns"] in netns else None})
        return {"state_dir": str(self.state_dir), "exists": state is not None, "prefix": self.prefix,
                "subnet": self.subnet, "bridge": self.bridge, "bridge_present": _link_exists(self.bridge),
                "hosts": hosts}

    # ---- down -----------------------------------------------------------------------------------------------

    def _remove_host(self, name: str, recorded: dict | None) -> None:
        ns = name
        holder = (recorded or {}).get("holder_pid")
        pids = _netns_pids(ns) if ns in _netns_list() else []
        holders = [p for p in pids if _proc_env(p).get(HOLDER_ENV) == self._holder_mark(name)]
        if self._holder_ok(name, holder) or (_pid_alive(holder) and
                                             _proc_env(holder).get(HOLDER_ENV) == self._holder_mark(name)):
            holders.append(holder)
        holders = sorted(set(holders))
        # Everything but the holder first: the holder (a subreaper) reaps them, so no zombie is left behind. Loop,
        # because a dying daemon may have started a helper in the meantime.
        for _ in range(3):
            others = [p for p in _netns_pids(ns) if p not in holders] if ns in _netns_list() else []
            if not others:
                break
            _terminate(others)
        _terminate(holders)
        # A holder this process started is our child: collect it, or it lingers as a zombie while we run. (Only
        # those: waiting on other PIDs could steal the exit status of a caller's own subprocess.)
        child = self._children.pop(name, None)
        if child is not None and child.pid in holders:
            child.wait(timeout=5)
        if ns in _netns_list():
            _ip("netns", "del", ns, check=False)
        m = re.fullmatch(rf"{re.escape(self.prefix)}-node(\d+)", name)
        if m and _link_exists(f"{self.prefix}-v{m.group(1)}"):
            _ip("link", "del", f"{self.prefix}-v{m.group(1)}", check=False)
        shutil.rmtree(self.host_dir(name), ignore_errors=True)

    def down(self) -> None:
        """Remove everything of this cluster: processes (by PID), namespaces, veths, bridge, state directory.

        Works after a failed or partial `up` (missing pieces are skipped) and when nothing is up at all.
        """
        self._check_owner("down")
        lock = self._lock() if self.state_dir.is_dir() else _nullcontext()
        with lock:
            state = self._load_state() or {}
            recorded = {h["name"]: h for h in state.get("hosts", [])}
            pattern = re.compile(rf"{re.escape(self.prefix)}-node(\d+)")
            names = set(recorded) | {ns for ns in _netns_list() if pattern.fullmatch(ns)}
            for name in sorted(names):
                self._remove_host(name, recorded.get(name))
            # veths whose namespace vanished some other way, then the bridge.
            vpat = re.compile(rf"{re.escape(self.prefix)}-v\d+")
            for link in os.listdir("/sys/class/net"):
                if vpat.fullmatch(link):
                    _ip("link", "del", link, check=False)
            if _link_exists(self.bridge):
                _ip("link", "del", self.bridge, check=False)
            if (self.state_dir / STATE_MARKER).exists():
                shutil.rmtree(self.state_dir, ignore_errors=True)
            elif self.state_dir.is_dir():
                # Not made by us (no marker): remove only the lock file we just made, never someone else's files.
                try:
                    (self.state_dir / ".lock").unlink()
                    self.state_dir.rmdir()
                except OSError:
                    pass


@contextmanager
def _nullcontext():
    yield


# --------------------------------------------------------------------------------------------------------------
# the holder: runs inside the new namespaces (started by Cluster._start_holder through ip netns exec + unshare)


def _holder_main(args) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ms_nosuid, ms_nodev, ms_bind, ms_rec = 2, 4, 4096, 16384
    pr_set_child_subreaper = 36

    def mount(src, target, fstype, flags, data=None):
        if libc.mount(src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")

    try:
        socket.sethostname(args.name)
        # Paths under /tmp, /run, /dev/shm that must stay visible: hold them open before they are covered, then
        # bind them back from the open descriptor (a bind from /proc/self/fd/N reaches the covered directory).
        keep = []
        for p in dict.fromkeys(os.path.abspath(p) for p in args.keep):
            if _under_private_mount(p) and os.path.exists(p):
                keep.append((p, os.path.isdir(p), os.open(p, os.O_PATH | os.O_CLOEXEC)))
        etc_targets = [(args.hosts_file, os.path.realpath("/etc/hosts")),
                       (args.resolv_file, os.path.realpath("/etc/resolv.conf"))]
        for root, mode in PRIVATE_MOUNTS:
            mount("tmpfs", root, "tmpfs", ms_nosuid | ms_nodev, f"mode={mode}")
        for p, isdir, fd in sorted(keep):
            if isdir:
                os.makedirs(p, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "a").close()
            mount(f"/proc/self/fd/{fd}", p, None, ms_bind | ms_rec)
            os.close(fd)
        for src, target in etc_targets:
            if _under_private_mount(target):
                # e.g. /etc/resolv.conf -> /run/...: the target is on our fresh tmpfs, so just write it there.
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(src, target)
            else:
                mount(src, target, None, ms_bind)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        os.makedirs("/run/lock", exist_ok=True)
        os.chmod("/run/lock", 0o1777)
        if libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    except Exception as e:  # reported to the parent on the ready pipe, and to holder.log
        print(f"error {e}", flush=True)
        print(f"holder {args.name}: {e}", file=sys.stderr, flush=True)
        return 1

    waited = {signal.SIGCHLD, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, waited)

    def start_sshd():
        try:
            # -D: sshd stays our child, so we reap it; the child gets default signal handling back.
            return os.posix_spawn(SSHD, [SSHD, "-D", "-f", args.sshd_config, "-E", args.sshd_log], dict(os.environ),
                                  setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            print(f"holder {args.name}: cannot start sshd: {e}", file=sys.stderr, flush=True)
            return None

    def reap(sshd):
        """Collect sshd and every orphan of the host; returns sshd's PID while it still runs, else None."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return sshd
            if pid == 0:
                return sshd
            if pid == sshd:
                sshd = None

    sshd = start_sshd()
    print(f"ready {os.getpid()}", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.close(devnull)
    while True:
        sig = signal.sigwaitinfo(waited).si_signo
        if sig == signal.SIGCHLD:
            sshd = reap(sshd)
        elif sig == signal.SIGUSR1:
            # Reap first: SIGUSR1 is taken before a pending SIGCHLD (lower number), and the old sshd may have just
            # died (stop_sshd then start_sshd) without being collected yet.
            sshd = reap(sshd)
            if sshd is None:
                sshd = start_sshd()
        elif sig == signal.SIGHUP:
            continue
        else:  # SIGTERM / SIGINT: the host goes away (down kills the rest of it by PID)
            return 0


# --------------------------------------------------------------------------------------------------------------
# CLI


def _print_hosts(cluster: Cluster) -> None:
    for h in cluster.hosts:
        print(f"  {h['name']:<14} {h['ip']:<15} holder {h['holder_pid']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", help="state directory (default: $CMXA_STATE_DIR or <repo>/.testcluster)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="make N test hosts (idempotent)")
    p.add_argument("n", type=int)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every sshd")
    sub.add_parser("down", help="remove every piece of the cluster")
    p = sub.add_parser("status", help="what exists")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("inventory", help="write an Ansible INI inventory and print its path")
    p.add_argument("--python", help="interpreter on the hosts (default: this Python)")
    p.add_argument("--out", help="file to write (default: <state>/inventory.ini)")
    p = sub.add_parser("stop-sshd", help="stop a host's sshd (the host becomes unreachable)")
    p.add_argument("host")
    p = sub.add_parser("start-sshd", help="start a host's sshd again")
    p.add_argument("host")
    p.add_argument("--timeout", type=float, default=15.0)
    for name, text in (("exec", "run a command inside a host (nsenter)"), ("ssh", "ssh to a host")):
        p = sub.add_parser(name, help=text)
        p.add_argument("host")
        p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    p = sub.add_parser("_holder")  # internal: the per-host holder process
    p.add_argument("--name", required=True)
    p.add_argument("--sshd-config", required=True)
    p.add_argument("--sshd-log", required=True)
    p.add_argument("--hosts-file", required=True)
    p.add_argument("--resolv-file", required=True)
    p.add_argument("--keep", action="append", default=[])
    args = parser.parse_args(argv)

    if args.cmd == "_holder":
        return _holder_main(args)
    # A CLI piped into `head` should just stop, not print a BrokenPipeError traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        cluster = Cluster(state_dir=args.state_dir)
        if args.cmd == "up":
            t0 = time.monotonic()
            cluster.up(args.n, timeout=args.timeout)
            print(f"cluster up: {args.n} host(s) in {time.monotonic() - t0:.2f}s (state {cluster.state_dir})")
            _print_hosts(cluster)
        elif args.cmd == "down":
            t0 = time.monotonic()
            cluster.down()
            print(f"cluster down in {time.monotonic() - t0:.2f}s")
        elif args.cmd == "status":
            st = cluster.status()
            if args.json:
                print(json.dumps(st, indent=2))
            else:
                print(f"state {st['state_dir']} ({'present' if st['exists'] else 'absent'}), bridge {st['bridge']} "
                      f"{'present' if st['bridge_present'] else 'absent'}, subnet {st['subnet']}")
                for h in st["hosts"]:
                    print(f"  {h['name']:<14} {h['ip']:<15} netns {'yes' if h['netns'] else 'NO'}  holder "
                          f"{h['holder_pid'] if h['holder_alive'] else 'DEAD'}  sshd {h['sshd_pid'] or 'DOWN'}")
            return 0 if st["exists"] and all(h["holder_alive"] and h["sshd_pid"] for h in st["hosts"]) else 1
        elif args.cmd == "inventory":
            print(cluster.write_inventory(args.out, python=args.python))
        elif args.cmd == "stop-sshd":
            cluster.stop_sshd(args.host)
        elif args.cmd == "start-sshd":
            cluster.start_sshd(args.host, timeout=args.timeout)
        elif args.cmd in ("exec", "ssh"):
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if args.cmd == "exec":
                if not command:
                    parser.error("exec needs a command: exec HOST -- CMD ...")
                return cluster.exec(args.host, command, timeout=None, capture=False).returncode
            # Like ssh itself: the words are joined into one remote shell line. Interactive when there is no command.
            line = " ".join(command) if command else None
            return subprocess.call(cluster.ssh_argv(args.host, line, batch=line is not None))
    except ClusterError as e:
        print(f"cluster.py {args.cmd}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
