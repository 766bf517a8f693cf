"""tcp_pairs: TCP bandwidth, round-trip time and packet loss for every directed pair of the inventory's hosts.

Every node runs this probe at the same time with the same host list and its own index as `rank`. Each node serves
on its own inventory address: an echo/sink server of this probe (port + 1) and, when iperf3 is installed, an
iperf3 server (port + 2). The pairs are measured in slots: in a slot every host is in at most one pair, so pairs run
side by side without sharing a host (2 (n - 1) slots for n hosts; `concurrent: false` measures one pair at a time).
For a pair src -> dst, src measures:

- rtt_us: median of `rtt_count` TCP round trips of 8 bytes on one connection (TCP_NODELAY), and rtt_min_us;
- bw_gbits: iperf3 (`-c dst -t duration -J`, received bits per second) when present, else this probe's own
  socket stream for `duration` seconds, counted by the receiver;
- loss_pct and ping_rtt_us from a bounded ping (`-c count -i interval -w deadline`), when ping can run.

Traffic only ever goes to the addresses of the hosts in the list. Nodes agree on when a slot starts through the
store the first node serves (probes/common/rendezvous.py); every server this probe started is stopped at the end.
"""

import json
import os
import re
import shutil
import socket
import statistics
import time

from probes.common.command import run_cmd
from probes.common.netif import Listener, is_local, listening, resolve, route_source
from probes.common.ports import port_param
from probes.common.procs import Children
from probes.common.rendezvous import Mesh
from probes.common.tools import not_installed
from probes.network.plan import directed_pair_slots
from probes.params import Param, Params

ECHO, SINK = b"E", b"S"
PARAMS = Params(
    peers=True,
    port=Param(int, 0, "first of the 3 ports on every host (0: derived from the run id)"),
    token=Param(str, "", "shared secret of the rendezvous (default: the run id)"),
    tool=Param(str, "auto", "bandwidth tool: iperf3 (an error when missing), auto (iperf3 where installed, else "
                            "sockets), anything else: sockets"),
    duration_s=Param(float, 1, "seconds of bandwidth per directed pair"),
    ping_count=Param(int, 5, "pings per directed pair (loss)"),
    ping_interval=Param(float, 0.2, "seconds between pings"),
    rtt_count=Param(int, 20, "TCP round trips per directed pair"),
    concurrent=Param(bool, True, "disjoint pairs side by side (else one pair at a time)"),
    connect_timeout=Param(float, 90, "seconds to wait for every host at the rendezvous"),
)


class PairServer:
    """Echo (RTT) and sink (bandwidth) server on this host's address, in daemon threads."""

    def __init__(self, host, port):
        self._listener = Listener(host, port, self._serve)

    @staticmethod
    def _serve(conn):
        try:
            conn.settimeout(120)
            mode = conn.recv(1)
            if mode == ECHO:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                while True:
                    data = conn.recv(64)
                    if not data:
                        return
                    conn.sendall(data)
            elif mode == SINK:
                total, first = 0, None
                while True:
                    data = conn.recv(1 << 20)
                    if not data:
                        break
                    if first is None:
                        first = time.perf_counter()
                    total += len(data)
                seconds = time.perf_counter() - first if first else 0.0
                conn.sendall((json.dumps({"bytes": total, "seconds": seconds}) + "\n").encode())
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self._listener.close()


def tcp_rtt(dst, port, count, source=None, timeout=10):
    """Round-trip times (microseconds) of `count` 8-byte messages on one TCP connection; the first is dropped."""
    with socket.create_connection((dst, port), timeout=timeout, source_address=(source, 0) if source else None) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(ECHO)
        times = []
        payload = b"cmxa-rtt"
        for _ in range(count + 1):
            t0 = time.perf_counter()
            s.sendall(payload)
            got = b""
            while len(got) < len(payload):
                chunk = s.recv(len(payload) - len(got))
                if not chunk:
                    raise OSError("echo server closed the connection")
                got += chunk
            times.append((time.perf_counter() - t0) * 1e6)
    return times[1:]


def socket_bandwidth(dst, port, seconds, source=None, timeout=10):
    """Gbit/s of one TCP stream for `seconds`, as counted by the receiver."""
    buf = b"\0" * (1 << 18)
    with socket.create_connection((dst, port), timeout=timeout, source_address=(source, 0) if source else None) as s:
        s.sendall(SINK)
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            s.sendall(buf)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(timeout + seconds)
        reply = s.makefile("r").readline()
    got = json.loads(reply)
    if not got.get("seconds"):
        raise OSError("the receiver counted no data")
    return got["bytes"] * 8 / got["seconds"] / 1e9


def parse_iperf3(text):
    """iperf3 -J output -> (received Gbit/s, sender retransmits or None). Raises ValueError with iperf3's error."""
    doc = json.loads(text)
    if doc.get("error"):
        raise ValueError("iperf3: %s" % doc["error"])
    end = doc.get("end") or {}
    received = (end.get("sum_received") or {}).get("bits_per_second")
    if received is None:
        raise ValueError("iperf3 output has no end.sum_received")
    return received / 1e9, (end.get("sum_sent") or {}).get("retransmits")


def parse_ping(text):
    """iputils/busybox ping summary -> {"sent", "received", "loss_pct", "rtt_avg_ms", "rtt_min_ms", "rtt_max_ms"}."""
    out = {}
    m = re.search(r"(\d+) packets transmitted, (\d+) (?:packets )?received.*?([\d.]+)% packet loss", text or "")
    if m:
        out.update(sent=int(m.group(1)), received=int(m.group(2)), loss_pct=float(m.group(3)))
    m = re.search(r"(?:rtt|round-trip) min/avg/max(?:/mdev)? = ([\d.]+)/([\d.]+)/([\d.]+)", text or "")
    if m:
        out.update(rtt_min_ms=float(m.group(1)), rtt_avg_ms=float(m.group(2)), rtt_max_ms=float(m.group(3)))
    return out


def own_address(addresses, rank):
    """This host's address to serve and send from: its inventory address when local, else the route's source."""
    mine = resolve(addresses[rank])
    if is_local(mine):
        return mine
    for i, addr in enumerate(addresses):
        peer = resolve(addr)
        if i != rank and peer:
            src = route_source(peer)
            if src:
                return src
    return mine


def run(art, params, out_dir):
    hosts = list(params["hosts"] or [art.host])
    addresses = [str(a) for a in (params["addresses"] or hosts)]
    rank, n = params["rank"], len(hosts)
    if n < 2:
        art.skip("only one host in the play: there is no pair to measure")
        return
    port = port_param(params, "port", art.run_id, "tcp_pairs", span=3)
    duration = params["duration_s"]
    ping_count, ping_interval = params["ping_count"], params["ping_interval"]
    rtt_count = params["rtt_count"]
    tool = params["tool"]
    iperf3 = shutil.which("iperf3") if tool in ("auto", "iperf3") else None
    if tool == "iperf3" and not iperf3:
        art.error(not_installed(params, "iperf3", "tool iperf3 was asked for but is not installed"))
        return
    ping = shutil.which("ping")
    me = own_address(addresses, rank)
    peers_ip = [resolve(a) for a in addresses]
    token = "%s:tcp_pairs:%d" % (params["token"] or art.run_id, port)
    slot_timeout = duration + ping_count * ping_interval + 60
    art.facts.update({"bandwidth_tool": "iperf3" if iperf3 else "socket", "address": me, "port": port,
                      "ping": "ping" if ping else "missing: no loss measured", "hosts": n,
                      "duration_s": duration, "ping_count": ping_count, "rtt_count": rtt_count})
    slots = directed_pair_slots(n, concurrent=params["concurrent"])
    art.facts["slots"] = len(slots)
    errors = []
    children = Children()
    server = mesh = None
    try:
        server = PairServer(me, port + 1)
        if iperf3:
            log = os.path.join(out_dir, "tcp_pairs.iperf3-server.log")
            children.start([iperf3, "-s", "-B", me, "-p", str(port + 2)], log_path=log)
            deadline = time.monotonic() + 10
            while not listening(port + 2) and time.monotonic() < deadline:
                time.sleep(0.05)
            if not listening(port + 2):
                art.facts["bandwidth_tool"] = "socket"
                art.facts["iperf3_error"] = "iperf3 server did not start on port %d" % (port + 2)
                iperf3 = None
        connect_timeout = params["connect_timeout"]
        mesh = Mesh(hosts, addresses, rank, port, token, connect_timeout=connect_timeout)
        missing = mesh.barrier("ready", connect_timeout)
        if missing:
            raise RuntimeError("hosts %s never came up" % ", ".join(missing))
        for index, pairs in enumerate(slots):
            for src, dst in pairs:
                if src == rank:
                    errors.extend(measure(art, hosts, src, dst, me, peers_ip[dst], port, duration, rtt_count,
                                          iperf3, ping, ping_count, ping_interval))
            missing = mesh.barrier("slot-%d" % index, slot_timeout)
            if missing:
                raise RuntimeError("slot %d: hosts %s did not finish in %g s" % (index, ", ".join(missing),
                                                                                slot_timeout))
        mesh.barrier("end", slot_timeout)
    finally:
        children.stop_all()
        if server:
            server.close()
        if mesh:
            mesh.close()
    if errors:
        art.facts["pair_errors"] = errors
        art.error("%d of %d pairs from this host failed; first: %s" % (len(errors), n - 1, errors[0]))


def measure(art, hosts, src, dst, me, dst_ip, port, duration, rtt_count, iperf3, ping, ping_count, ping_interval):
    """Measure src -> dst (src is this host); results are added to the artifact, failures returned as text."""
    labels = {"src": hosts[src], "dst": hosts[dst]}
    errors = []
    try:
        rtts = tcp_rtt(dst_ip, port + 1, rtt_count, source=me)
        art.add("rtt_us", round(statistics.median(rtts), 2), "us", **labels)
        art.add("rtt_min_us", round(min(rtts), 2), "us", **labels)
    except (OSError, ValueError) as exc:
        errors.append("%s -> %s rtt: %s" % (hosts[src], hosts[dst], exc))
    socket_test = not iperf3
    if iperf3:
        res = run_cmd([iperf3, "-c", dst_ip, "-p", str(port + 2), "-B", me, "-t", "%g" % max(1, round(duration)),
                       "-J"], timeout=duration + 30)
        try:
            if res.timed_out:
                raise ValueError("iperf3 timed out")
            gbits, retransmits = parse_iperf3(res.stdout)
            art.add("bw_gbits", round(gbits, 4), "Gbit/s", tool="iperf3", **labels)
            if retransmits is not None:
                art.add("retransmits", retransmits, "count", **labels)
        except ValueError as exc:
            if "unable to connect" in str(exc).lower():
                # no iperf3 server on the peer (not installed there): this probe's own test instead
                art.facts.setdefault("iperf3_fallback", []).append("%s: %s" % (hosts[dst], exc))
                socket_test = True
            else:
                errors.append("%s -> %s bandwidth: %s" % (hosts[src], hosts[dst], exc))
    if socket_test:
        try:
            gbits = socket_bandwidth(dst_ip, port + 1, duration, source=me)
            art.add("bw_gbits", round(gbits, 4), "Gbit/s", tool="socket", **labels)
        except (OSError, ValueError) as exc:
            errors.append("%s -> %s bandwidth: %s" % (hosts[src], hosts[dst], exc))
    if ping:
        deadline = int(ping_count * ping_interval + 3)
        res = run_cmd([ping, "-n", "-q", "-c", str(ping_count), "-i", "%g" % ping_interval, "-W", "1",
                       "-w", str(deadline), dst_ip], timeout=deadline + 5)
        got = parse_ping(res.stdout)
        if "loss_pct" in got:
            art.add("loss_pct", got["loss_pct"], "%", sent=got["sent"], **labels)
            if "rtt_avg_ms" in got:
                art.add("ping_rtt_us", round(got["rtt_avg_ms"] * 1000, 2), "us", **labels)
        else:
            why = (res.stderr or res.stdout or "no output").strip().splitlines()
            art.facts["ping"] = "failed: %s" % (why[-1] if why else res.rc)
    return errors
