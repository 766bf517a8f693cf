"""Network interfaces and addresses as multi-host probes need them: a host's own address and the interface that
carries it, the source address the kernel routes from, and whether a port is listening. Standard library only;
`ip` is used when present, ioctl(SIOCGIFADDR) when it is not."""

import ipaddress
import re
import socket
import struct
import threading
import time

from probes.common.command import run_cmd
from probes.common.readers import read_text


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
    """{address: interface} of this host."""
    res = run_cmd(["ip", "-o", "addr", "show"], timeout=5)
    if res.rc == 0:
        found = parse_ip_addr(res.stdout)
        if found:
            return found
    return _ioctl_addresses()


def is_local(address, local=None):
    """Whether address (an IP) is one this host can bind: one of its own, or loopback."""
    return bool(address) and (address in (local if local is not None else local_addresses())
                              or ipaddress.ip_address(address).is_loopback)


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


def listening(port):
    """Whether something on this host listens on TCP port (from /proc/net/tcp{,6}; no connection made)."""
    for path in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in (read_text(path) or "").splitlines()[1:]:
            cells = line.split()
            if len(cells) > 3 and cells[3] == "0A" and int(cells[1].rsplit(":", 1)[1], 16) == int(port):
                return True
    return False


def wait_listening(addr, port, proc=None, timeout=15.0):
    """True once something accepts TCP connections on addr:port; False when proc exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection((addr, int(port)), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


class Listener:
    """A TCP listener on (host, port) that hands every connection to handle(conn) in a daemon thread, until
    close(), which also ends the connections still open."""

    def __init__(self, host, port, handle, backlog=64):
        self.sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, int(port)))
        self.sock.listen(backlog)
        self.address = self.sock.getsockname()[:2]
        self.closed = False
        self._conns = []
        threading.Thread(target=self._accept, args=(handle,), name="listener", daemon=True).start()

    def _accept(self, handle):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=handle, args=(conn,), name="listener-conn", daemon=True).start()

    def close(self):
        self.closed = True
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
