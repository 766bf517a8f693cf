"""A small TCP rendezvous for probes that run on several hosts (or processes) at once: barrier and all-gather.

Rank 0 runs the server (a thread in its own process); every rank, rank 0 included, is a client. A round is one
JSON line from every rank; the server answers each with the list of all ranks' objects, in rank order. A rank
that goes away (its process died, its host rebooted) closes its socket: the server ends the rendezvous and every
other rank gets a RendezvousError instead of waiting for ever, so a fault on one host never hangs the others.

Standard library only; every message carries the run's token, so a stray connection cannot join a run.
"""

import json
import socket
import threading
import time


class RendezvousError(RuntimeError):
    pass


def _send(sock, obj):
    sock.sendall((json.dumps(obj, sort_keys=True) + "\n").encode("utf-8"))


class _Lines:
    """Reads newline-terminated JSON from a socket."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def read(self):
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RendezvousError("peer closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line.decode("utf-8"))


class Server:
    """Accepts `world` ranks, then serves all-gather rounds until a rank leaves or close() is called."""

    def __init__(self, port, world, token, bind_addr="", accept_timeout=120.0):
        self.world = int(world)
        self.token = token
        self.accept_timeout = accept_timeout
        self.error = None
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._listener.bind((bind_addr, int(port)))
        except OSError:
            if not bind_addr:
                raise
            self._listener.bind(("", int(port)))
        self._listener.listen(max(self.world, 16))
        self._conns = {}
        self._thread = threading.Thread(target=self._serve, name="rendezvous", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def _accept_all(self):
        deadline = time.monotonic() + self.accept_timeout
        while len(self._conns) < self.world:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(self.world)) - set(self._conns))
                raise RendezvousError("ranks %s did not join within %gs" % (missing, self.accept_timeout))
            self._listener.settimeout(left)
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:  # noqa: UP041 - not TimeoutError before Python 3.10 (nodes run 3.8+)
                continue
            conn.settimeout(30)
            lines = _Lines(conn)
            try:
                hello = lines.read()
            except (OSError, ValueError, RendezvousError):
                conn.close()
                continue
            rank = hello.get("rank")
            if hello.get("token") != self.token or not isinstance(rank, int) or not 0 <= rank < self.world \
                    or rank in self._conns:
                conn.close()
                continue
            conn.settimeout(None)
            self._conns[rank] = (conn, lines)

    def _serve(self):
        try:
            self._accept_all()
            while not self._closed:
                values = []
                for rank in range(self.world):
                    values.append(self._conns[rank][1].read().get("value"))
                # Rank 0 last: it runs this server and closes it once answered, so every other rank must
                # have its answer by then (else a peer can read "connection closed" instead of the values).
                for rank in reversed(range(self.world)):
                    _send(self._conns[rank][0], {"values": values})
        except (OSError, ValueError, RendezvousError) as exc:
            if not self._closed:
                self.error = str(exc)
        finally:
            self._shutdown()

    def _shutdown(self):
        for conn, _ in self._conns.values():
            try:
                conn.close()
            except OSError:
                pass
        try:
            self._listener.close()
        except OSError:
            pass

    def close(self):
        self._closed = True
        self._shutdown()


class Client:
    """One rank's end. allgather(obj) -> [obj of rank 0, obj of rank 1, …]; barrier() is allgather(None)."""

    def __init__(self, addr, port, rank, token, connect_timeout=120.0):
        self.rank = rank
        deadline = time.monotonic() + connect_timeout
        last = None
        while True:
            try:
                self.sock = socket.create_connection((addr, int(port)), timeout=5)
                break
            except OSError as exc:
                last = exc
                if time.monotonic() > deadline:
                    raise RendezvousError("cannot reach rank 0 at %s:%s within %gs: %s"
                                          % (addr, port, connect_timeout, last)) from None
                time.sleep(0.2)
        self.sock.settimeout(None)
        _send(self.sock, {"rank": rank, "token": token})
        self._lines = _Lines(self.sock)

    def allgather(self, obj, timeout=None):
        self.sock.settimeout(timeout)
        try:
            _send(self.sock, {"value": obj})
            return self._lines.read()["values"]
        except socket.timeout:  # noqa: UP041 - not TimeoutError before Python 3.10 (nodes run 3.8+)
            raise RendezvousError("no answer from the other ranks within %gs" % timeout) from None
        except OSError as exc:
            raise RendezvousError("rendezvous lost: %s" % exc) from None
        finally:
            self.sock.settimeout(None)

    def barrier(self, timeout=None):
        self.allgather(None, timeout)

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
