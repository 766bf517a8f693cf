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

Here is the Cluster; beside it procs.py (commands, processes, namespaces and ClusterError), holder.py (the per-host
init, run isolated inside the host's namespaces) and cli.py (the command line above).
Only the standard library is used (Python 3.9+), so it runs before any virtual environment exists.
Traffic only ever goes to loopback or to the test hosts' own addresses.
"""

from __future__ import annotations

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
if __name__ == "__main__":
    # Run as a script: tests/ first on sys.path, so that `cluster` is this package and not this file.
    sys.path.insert(0, str(HERE.parent))

from cluster.holder import SSHD  # noqa: E402
from cluster.procs import (  # noqa: E402
    ClusterError,
    _ip,
    _link_exists,
    _netns_list,
    _netns_pids,
    _ns_inode,
    _pid_alive,
    _proc_env,
    _proc_exe,
    _run,
    _terminate,
    _write_text,
)

DEFAULT_PREFIX = "cmxa"
DEFAULT_SUBNET_PREFIX = "10.237.41"
FIRST_HOST_OCTET = 11  # hosts are .11, .12, ...; .1 is the bridge (the controller side)
# The hosts' default route points at an address nobody owns: facts such as ansible_default_ipv4 are filled in as on
# a real node, yet a packet for the outside world never leaves the bridge (nobody answers ARP for it), even on a
# machine that forwards IP.
GATEWAY_OCTET = 254
MAX_HOSTS = 200  # .11 .. .210, well clear of the gateway
HOLDER_ENV = "CMXA_HOLDER"  # marks holder processes as ours: "<state dir>::<host name>"
STATE_MARKER = ".cmxa-testcluster"  # only a directory holding this file is ever removed by `down`
STATE_VERSION = 1


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
        # What the state directory holds: the client key, the files ssh reads, what exists (state.json).
        self.key_path = self.state_dir / "id_ed25519"
        self.known_hosts_path = self.state_dir / "known_hosts"
        self.ssh_config_path = self.state_dir / "ssh_config"
        self.state_path = self.state_dir / "state.json"
        saved = self._load_state() or {}
        # An explicit argument wins (up refuses it when it contradicts an existing cluster); then what the state
        # directory says, because it describes what really exists (so `down` removes the right names whatever the
        # environment says now); then the environment; then the default.
        self.prefix = prefix or saved.get("prefix") or os.environ.get("CMXA_PREFIX") or DEFAULT_PREFIX
        self.subnet_prefix = (subnet_prefix or saved.get("subnet_prefix") or os.environ.get("CMXA_SUBNET_PREFIX")
                              or DEFAULT_SUBNET_PREFIX)
        self.subnet = f"{self.subnet_prefix}.0/24"
        self.bridge = f"{self.prefix}-br0"
        self.bridge_ip = f"{self.subnet_prefix}.1"
        self.gateway_ip = f"{self.subnet_prefix}.{GATEWAY_OCTET}"
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
                sys.executable, "-I", "-S", str(HERE / "holder.py"),
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
        self._start_listener(h, timeout)
        self.wait_ssh([h["name"]], timeout=timeout)

    def change_host_key(self, name: str, timeout: float = 15.0) -> bytes:
        """Give a host a new SSH host key, as a reinstalled or replaced node has, without telling known_hosts: its
        sshd restarts with the new key, open sessions (Ansible's ControlPersist masters) stay. Returns the old
        private key, for restore_host_key. Waits for the port, not for a login: a login is refused now."""
        h = self.host(name)
        key = self.host_dir(h["name"]) / "ssh_host_ed25519_key"
        old = key.read_bytes()
        self.stop_sshd(h["name"], kill_sessions=False)
        for path in (key, key.with_suffix(".pub")):
            path.unlink()
        _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{h['name']}", "-f", str(key)])
        self._start_listener(h, timeout)
        return old

    def restore_host_key(self, name: str, old: bytes, timeout: float = 15.0) -> None:
        """Put a host's original key back (after change_host_key) and wait until it answers ssh again."""
        h = self.host(name)
        key = self.host_dir(h["name"]) / "ssh_host_ed25519_key"
        self.stop_sshd(h["name"])
        key.write_bytes(old)
        key.chmod(0o600)
        pub = subprocess.run(["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True).stdout
        key.with_suffix(".pub").write_text(pub.strip() + f" root@{h['name']}\n")
        self.start_sshd(h["name"], timeout=timeout)

    def _start_listener(self, h: dict, timeout: float) -> None:
        """Start a stopped host's sshd and wait until its port answers (no login tried)."""
        if not self._holder_ok(h["name"], h.get("holder_pid")):
            raise ClusterError(f"{h['name']}: its holder is gone; run `up` again to remake the host")
        if self._sshd_pid(h["name"]) is None:
            os.kill(h["holder_pid"], signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection((h["ip"], 22), timeout=1):
                    return
            except OSError as e:
                if time.monotonic() > deadline:
                    raise ClusterError(f"{h['name']}: sshd does not listen again ({e})") from e
                time.sleep(0.05)

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
                        extra_host_vars: dict | None = None, extra_group_vars: dict | None = None,
                        launcher: str = "direct") -> Path:
        """Write an Ansible INI inventory for the cluster and return its path (default <state>/inventory.ini).

        python: the interpreter on the hosts (ansible_python_interpreter and assess_python); default the caller's
        sys.executable, which the hosts see too because the filesystem is shared. An extra_group_vars value of
        None leaves that variable out (assess_python=None: preflight finds one, as on a fresh node).
        extra_host_vars: {host name: {var: value}} added to that host's line; extra_group_vars go to [nodes:vars].
        launcher: assess_launcher of the run. direct unless a test of the launchers asks (tests/integration/
        test_launchers.py): the probes' own workers import torch once for every world size, which keeps the other
        tests short, and mpirun between the hosts needs the cluster's key (see mpirun_args).
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
                 "assess_provider=testcluster", f"assess_launcher={launcher}", "", "[nodes]"]
        for h in hosts:
            extra = "".join(f" {k}={value(v)}" for k, v in ((extra_host_vars or {}).get(h["name"]) or {}).items())
            lines.append(f"{h['name']} ansible_host={h['ip']}{extra}")
        # The tools step is off unless a test asks for it (tests/integration/test_tools.py): it would install
        # packages and a torch venv from the internet, and every other test brings its tools with the suite.
        group_vars = {"ansible_user": "root", "ansible_ssh_private_key_file": self.key_path,
                      "ansible_python_interpreter": python, "assess_python": python, "assess_install_tools": "false",
                      **(extra_group_vars or {})}
        group_vars = {k: v for k, v in group_vars.items() if v is not None}
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


if __name__ == "__main__":
    from cluster.cli import main

    sys.exit(main())
