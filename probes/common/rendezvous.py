"""Rendezvous helpers for probes that run on every node at once: a small key-value store served by the first
node's probe, barriers that name who is missing, and the network interface that carries a host's address.

Every node runs the same probe at the same time (the play starts them in parallel). The first node (rank 0)
serves the store on its own address; the others connect to it. The store is how the nodes agree on when to
start a step, and where each rank writes how far it got, so that a hang can be reported with the ranks that
were stuck and the step each one was in. It is plain TCP with one JSON object per line, standard library only,
and it accepts only clients that present the run's token.
"""

import ipaddress
import json
import re
import socket
import struct
import threading
import time

from probes.common.command import run_cmd


class StoreError(Exception):
    """The store could not be reached or refused the request."""


class StoreServer:
    """Serves set/get/add/wait/keys on (host, port) in daemon threads until close()."""

    def __init__(self, host, port, token):
        self.token = str(token)
        self._data = {}
        self._cond = threading.Condition()
        self._closed = False
        self._conns = []
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, int(port)))
        self.sock.listen(256)
        self.address = self.sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._accept, name="store-accept", daemon=True)
        self._thread.start()

    def _accept(self):
        while not self._closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), name="store-conn", daemon=True).start()

    def _serve(self, conn):
        reader = conn.makefile("r", encoding="utf-8", newline="\n")
        try:
            first = json.loads(reader.readline() or "{}")
            if first.get("token") != self.token:
                conn.sendall(b'{"ok": false, "error": "bad token"}\n')
                return
            conn.sendall(b'{"ok": true}\n')
            for line in reader:
                reply = self._handle(json.loads(line))
                conn.sendall((json.dumps(reply) + "\n").encode("utf-8"))
        except (OSError, ValueError):
            pass
        finally:
            try:
                conn.close()
            except OSError:
                pass

    def _count(self, prefix):
        return sorted(k for k in self._data if k.startswith(prefix))

    def _handle(self, req):
        op = req.get("op")
        key = req.get("k")
        with self._cond:
            if op == "set":
                self._data[key] = req.get("v")
                self._cond.notify_all()
                return {"ok": True}
            if op == "get":
                return {"ok": True, "v": self._data.get(key)}
            if op == "add":
                value = int(self._data.get(key) or 0) + int(req.get("n", 1))
                self._data[key] = value
                self._cond.notify_all()
                return {"ok": True, "v": value}
            if op == "keys":
                prefix = req.get("prefix", "")
                return {"ok": True, "v": {k: self._data[k] for k in self._count(prefix)}}
            if op == "wait_count":
                # Block until at least n keys start with prefix, or the timeout; say which keys are there.
                prefix, want = req.get("prefix", ""), int(req.get("n", 1))
                deadline = time.monotonic() + float(req.get("timeout", 0))
                while len(self._count(prefix)) < want and not self._closed:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._cond.wait(min(left, 1.0))
                present = self._count(prefix)
                return {"ok": len(present) >= want, "v": present}
        return {"ok": False, "error": "unknown op %r" % op}

    def close(self):
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        try:
            self.sock.close()
        except OSError:
            pass
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            except OSError:
                pass


class StoreClient:
    """One connection to the store; connect() retries until connect_timeout (the server may start later)."""

    def __init__(self, host, port, token, connect_timeout=60.0, op_timeout=30.0):
        self.host, self.port, self.token = host, int(port), str(token)
        self.op_timeout = float(op_timeout)
        self._lock = threading.Lock()
        self.sock = None
        self._reader = None
        self._connect(float(connect_timeout))

    def _connect(self, connect_timeout):
        deadline = time.monotonic() + connect_timeout
        last = None
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader = sock.makefile("r", encoding="utf-8", newline="\n")
                sock.sendall((json.dumps({"token": self.token}) + "\n").encode("utf-8"))
                hello = json.loads(reader.readline() or "{}")
                if not hello.get("ok"):
                    sock.close()
                    raise StoreError("store at %s:%d refused us: %s" % (self.host, self.port, hello.get("error")))
                self.sock, self._reader = sock, reader
                return
            except StoreError:
                raise
            except (OSError, ValueError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise StoreError("no store at %s:%d after %.0f s: %s" % (self.host, self.port, connect_timeout, last))
            time.sleep(0.2)

    def _call(self, req, timeout=None):
        with self._lock:
            if self.sock is None:
                raise StoreError("store connection is closed")
            try:
                self.sock.settimeout(timeout if timeout is not None else self.op_timeout)
                self.sock.sendall((json.dumps(req) + "\n").encode("utf-8"))
                line = self._reader.readline()
            except OSError as exc:
                raise StoreError("store at %s:%d: %s" % (self.host, self.port, exc)) from exc
            if not line:
                raise StoreError("store at %s:%d closed the connection" % (self.host, self.port))
            return json.loads(line)

    def set(self, key, value):
        self._call({"op": "set", "k": key, "v": value})

    def get(self, key):
        return self._call({"op": "get", "k": key}).get("v")

    def add(self, key, n=1):
        return self._call({"op": "add", "k": key, "n": n})["v"]

    def keys(self, prefix):
        return self._call({"op": "keys", "prefix": prefix})["v"]

    def wait_count(self, prefix, n, timeout):
        """(True, keys) once n keys start with prefix; (False, keys present) after timeout seconds."""
        reply = self._call({"op": "wait_count", "prefix": prefix, "n": n, "timeout": timeout}, timeout=timeout + 30)
        return bool(reply.get("ok")), reply.get("v") or []

    def barrier(self, name, rank, n, timeout):
        """Wait until ranks 0..n-1 all reached `name`. Returns the sorted list of ranks missing (empty: all there)."""
        self.set("barrier/%s/%d" % (name, rank), 1)
        _, present = self.wait_count("barrier/%s/" % name, n, timeout)
        there = {int(k.rsplit("/", 1)[1]) for k in present}
        return [r for r in range(n) if r not in there]

    def close(self):
        with self._lock:
            if self.sock is not None:
                try:
                    self.sock.close()
                except OSError:
                    pass
                self.sock = None


# ---------------------------------------------------------------------------------------------------------------
# addresses and interfaces


def resolve(address):
    """An IP address for a host name or address (the first IPv4 one when there are several), or None."""
    try:
        ipaddress.ip_address(address)
        return address
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(address, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return None
    addrs = [i[4][0] for i in infos]
    v4 = [a for a in addrs if ":" not in a]
    return (v4 or addrs or [None])[0]


def parse_ip_addr(text):
    """`ip -o addr show` lines -> {address: interface}."""
    out = {}
    for line in (text or "").splitlines():
        m = re.match(r"^\d+:\s+(\S+?)(?:@\S+)?\s+inet6?\s+([0-9a-fA-F.:]+)/\d+", line)
        if m:
            out[m.group(2)] = m.group(1)
    return out


def _ioctl_addresses():
    """{IPv4 address: interface} from SIOCGIFADDR (primary addresses only), when `ip` is missing."""
    import fcntl  # noqa: PLC0415 - Linux only

    out = {}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            out[socket.inet_ntoa(packed[20:24])] = name
    return out


def local_addresses():
    res = run_cmd(["ip", "-o", "addr", "show"], timeout=5)
    if res.rc == 0:
        found = parse_ip_addr(res.stdout)
        if found:
            return found
    return _ioctl_addresses()


def route_source(peer):
    """The local address the kernel would use to reach peer (a UDP connect sends nothing)."""
    try:
        family = socket.AF_INET6 if ":" in peer else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            sock.connect((peer, 9))
            return sock.getsockname()[0]
    except OSError:
        return None


def interface_for(own_address, peers=()):
    """(interface, local address, how) for the interface that carries this host's address.

    own_address is the host's inventory address; when it is not one of this host's addresses (a name that
    resolves to 127.0.1.1, an address behind NAT), the interface the kernel uses to reach the first peer is taken.
    """
    addrs = local_addresses()
    own = resolve(own_address) if own_address else None
    if own and own in addrs and not ipaddress.ip_address(own).is_loopback:
        return addrs[own], own, "the inventory address %s is on %s" % (own_address, addrs[own])
    for peer in peers:
        peer_ip = resolve(peer)
        if not peer_ip or peer_ip == own:
            continue
        src = route_source(peer_ip)
        if src and src in addrs:
            return addrs[src], src, "%s is not a local address; %s routes to %s" % (own_address, addrs[src], peer)
    if own and own in addrs:
        return addrs[own], own, "loopback only"
    return None, None, "no local interface carries %s" % own_address


class Mesh:
    """The nodes of one probe run: rank 0 serves the store on its address, everyone connects; barriers by name;
    close() keeps rank 0's store up until every other node has left the last barrier."""

    def __init__(self, hosts, addresses, rank, port, token, connect_timeout=90.0, bind=None):
        self.hosts, self.addresses, self.rank, self.n = list(hosts), list(addresses), int(rank), len(hosts)
        self.server = None
        self.store = None
        if self.rank == 0:
            own = resolve(self.addresses[0])
            local = local_addresses()
            host = bind or (own if own and (own in local or ipaddress.ip_address(own).is_loopback) else "0.0.0.0")
            self.server = StoreServer(host, port, token)
        try:
            self.store = StoreClient(self.addresses[0], port, token, connect_timeout=connect_timeout)
        except StoreError:
            self.close()
            raise

    def barrier(self, name, timeout):
        """Names of the hosts that did not reach `name` within timeout seconds (empty: all did)."""
        missing = self.store.barrier(name, self.rank, self.n, timeout)
        return [self.hosts[r] for r in missing]

    def close(self):
        if self.store is not None:
            try:
                if self.rank == 0:
                    self.store.wait_count("left/", self.n - 1, 15)
                else:
                    self.store.set("left/%d" % self.rank, 1)
            except StoreError:
                pass
            self.store.close()
            self.store = None
        if self.server is not None:
            self.server.close()
            self.server = None
