"""The one rendezvous for probes that run on several hosts (or processes) at once: a small key-value store served
by the first rank, barriers that name who is missing, and all-gather rounds.

Every node runs the same probe at the same time (the play starts them in parallel). The first node (rank 0)
serves the store on its own address; the others connect to it. The store is how the nodes agree on when to
start a step, where each rank writes how far it got (so a hang is reported with the ranks that were stuck and
the step each one was in), and how they exchange what they found. It is plain TCP with one JSON object per line,
standard library only, and it accepts only clients that present the run's token.

A client that says its rank and then goes away (its process died, its host rebooted) without leaving is marked
lost: an all-gather then fails at once, naming it, instead of waiting for a value that will never come. The server
is closed only after every rank has left (or was lost, or a short grace ran out): a rank that still waits for its
answer must not read "connection closed" instead (a server-side fio_sweep once did, when the store closed as soon
as rank 0 itself was answered).
"""

import json
import socket
import threading
import time

from probes.common.netif import Listener, is_local, resolve


class StoreError(Exception):
    """The store could not be reached, refused the request, or a rank it waited for was lost."""


# _call's timeout when none is given: the client's op_timeout (None means no limit, for a wait without one).
_OP_TIMEOUT = object()


def _rank_of(key):
    return int(key.rsplit("/", 1)[1])


class StoreServer:
    """Serves set/get/add/wait/keys on (host, port) in daemon threads until close()."""

    def __init__(self, host, port, token):
        self.token = str(token)
        self._data = {}
        self._cond = threading.Condition()
        self._closed = False
        self._listener = Listener(host, port, self._serve, backlog=256)
        self.address = self._listener.address

    def _serve(self, conn):
        reader = conn.makefile("r", encoding="utf-8", newline="\n")
        rank = None
        try:
            first = json.loads(reader.readline() or "{}")
            if first.get("token") != self.token:
                conn.sendall(b'{"ok": false, "error": "bad token"}\n')
                return
            rank = first.get("rank")
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
            if isinstance(rank, int):
                self._gone(rank)

    def _gone(self, rank):
        with self._cond:
            if not self._closed and "left/%d" % rank not in self._data:
                self._data["lost/%d" % rank] = 1
                self._cond.notify_all()

    def _count(self, prefix):
        return sorted(k for k in self._data if k.startswith(prefix))

    def _wait(self, prefix, want, timeout, abort_on_lost):
        """Keys starting with prefix once there are `want` of them, or when time runs out, the store closes, or
        (abort_on_lost) a rank is lost. Called with the condition held."""
        deadline = None if timeout is None else time.monotonic() + float(timeout)
        while len(self._count(prefix)) < want and not self._closed:
            if abort_on_lost and self._count("lost/"):
                break
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                break
            self._cond.wait(min(left, 1.0))
        return self._count(prefix)

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
                want = int(req.get("n", 1))
                present = self._wait(req.get("prefix", ""), want, req.get("timeout"), bool(req.get("abort_on_lost")))
                return {"ok": len(present) >= want, "v": present,
                        "lost": [_rank_of(k) for k in self._count("lost/")]}
        return {"ok": False, "error": "unknown op %r" % op}

    def close(self, wait_for=0, grace=15.0):
        """Stop serving; first, up to grace seconds, until wait_for ranks have left or were lost."""
        with self._cond:
            deadline = time.monotonic() + grace
            while len(self._count("left/")) + len(self._count("lost/")) < wait_for:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
            self._closed = True
            self._cond.notify_all()
        self._listener.close()


class StoreClient:
    """One connection to the store; connect() retries until connect_timeout (the server may start later).
    A client that gives its rank takes part in barriers and all-gathers, and leaves with leave()."""

    def __init__(self, host, port, token, connect_timeout=60.0, op_timeout=30.0, rank=None):
        self.host, self.port, self.token = host, int(port), str(token)
        self.rank = rank
        self.lost = []  # ranks the last wait_count found lost
        self.op_timeout = float(op_timeout)
        self._lock = threading.Lock()
        self.sock = None
        self._reader = None
        self._connect(float(connect_timeout))

    def _connect(self, connect_timeout):
        deadline = time.monotonic() + connect_timeout
        last = None
        hello = {"token": self.token}
        if self.rank is not None:
            hello["rank"] = int(self.rank)
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5)
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                reader = sock.makefile("r", encoding="utf-8", newline="\n")
                sock.sendall((json.dumps(hello) + "\n").encode("utf-8"))
                answer = json.loads(reader.readline() or "{}")
                if not answer.get("ok"):
                    sock.close()
                    raise StoreError("store at %s:%d refused us: %s" % (self.host, self.port, answer.get("error")))
                self.sock, self._reader = sock, reader
                return
            except StoreError:
                raise
            except (OSError, ValueError) as exc:
                last = exc
            if time.monotonic() >= deadline:
                raise StoreError("no store at %s:%d after %.0f s: %s" % (self.host, self.port, connect_timeout, last))
            time.sleep(0.2)

    def _call(self, req, timeout=_OP_TIMEOUT):
        with self._lock:
            if self.sock is None:
                raise StoreError("store connection is closed")
            try:
                self.sock.settimeout(self.op_timeout if timeout is _OP_TIMEOUT else timeout)
                self.sock.sendall((json.dumps(req) + "\n").encode("utf-8"))
                line = self._reader.readline()
            except OSError as exc:
                self._drop()  # a timed-out reader cannot be read again: this connection is done
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

    def wait_count(self, prefix, n, timeout, abort_on_lost=False):
        """(True, keys) once n keys start with prefix; (False, keys present) after timeout seconds (None: no
        limit) or, with abort_on_lost, as soon as a rank is lost (self.lost then names the lost ranks)."""
        # No limit: the socket waits too, until the store answers or goes away (its host's process ended).
        reply = self._call({"op": "wait_count", "prefix": prefix, "n": n, "timeout": timeout,
                            "abort_on_lost": abort_on_lost}, timeout=None if timeout is None else timeout + 30)
        self.lost = reply.get("lost") or []
        return bool(reply.get("ok")), reply.get("v") or []

    def barrier(self, name, rank, n, timeout, abort_on_lost=False):
        """Wait until ranks 0..n-1 all reached `name`. Returns the sorted list of ranks missing (empty: all there);
        with abort_on_lost, as soon as a rank is lost."""
        self.set("barrier/%s/%d" % (name, rank), 1)
        _, present = self.wait_count("barrier/%s/" % name, n, timeout, abort_on_lost)
        there = {_rank_of(k) for k in present}
        return [r for r in range(n) if r not in there]

    def allgather(self, name, rank, n, value, timeout):
        """[value of rank 0, value of rank 1, ...] once all n ranks gave theirs to round `name`; StoreError when a
        rank is lost or timeout seconds (None: no limit) pass first."""
        prefix = "gather/%s/" % name
        self.set(prefix + str(rank), value)
        ok, present = self.wait_count(prefix, n, timeout, abort_on_lost=True)
        if not ok:
            if self.lost:
                raise StoreError("rank(s) %s left the rendezvous" % ",".join(map(str, self.lost)))
            there = {_rank_of(k) for k in present}
            raise StoreError("rank(s) %s did not arrive within %gs"
                             % (",".join(str(r) for r in range(n) if r not in there), timeout))
        values = self.keys(prefix)
        return [values[prefix + str(r)] for r in range(n)]

    def leave(self):
        """Say this rank is done, so the server may close once every rank has (see StoreServer.close)."""
        if self.rank is not None and self.sock is not None:
            try:
                self.set("left/%d" % self.rank, 1)
            except StoreError:
                pass

    def _drop(self):
        # the reader holds the socket open too: without closing it the server would not see us go
        for part in (self._reader, self.sock):
            try:
                part.close()
            except OSError:
                pass
        self.sock = self._reader = None

    def close(self):
        with self._lock:
            if self.sock is not None:
                self._drop()


class Mesh:
    """The nodes of one probe run: rank 0 serves the store on its address, everyone connects; barriers by name,
    all-gather rounds in call order; close() keeps rank 0's store up until every node has left."""

    def __init__(self, hosts, addresses, rank, port, token, connect_timeout=90.0, bind=None):
        self.hosts, self.addresses, self.rank, self.n = list(hosts), list(addresses), int(rank), len(hosts)
        self.server = None
        self.store = None
        self._rounds = 0
        if self.rank == 0:
            own = resolve(self.addresses[0])
            host = bind or (own if is_local(own) else "0.0.0.0")
            self.server = StoreServer(host, port, token)
        try:
            self.store = StoreClient(self.addresses[0], port, token, connect_timeout=connect_timeout, rank=self.rank)
        except StoreError:
            self.close()
            raise

    def barrier(self, name, timeout, abort_on_lost=False):
        """Names of the hosts that did not reach `name` within timeout seconds (empty: all did); with abort_on_lost
        as soon as one has left the store (a crashed probe is not waited for)."""
        missing = self.store.barrier(name, self.rank, self.n, timeout, abort_on_lost)
        return [self.hosts[r] for r in missing]

    def allgather(self, value, timeout):
        """Every node's value, in rank order (every node calls allgather the same number of times)."""
        self._rounds += 1
        return self.store.allgather(str(self._rounds), self.rank, self.n, value, timeout)

    def close(self):
        if self.store is not None:
            self.store.leave()
            self.store.close()
            self.store = None
        if self.server is not None:
            self.server.close(wait_for=self.n)
            self.server = None
