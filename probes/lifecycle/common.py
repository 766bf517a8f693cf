"""Shared node-side code of the lifecycle probes (pkg_install, container_pull, model_pull, serve_ready,
net_speed): which storage tiers a user would install into, whether an internet endpoint can be reached at all
(checked with a short timeout before anything waits on it), the probes' working directories, and small timing
helpers.

Tiers: an explicit list {name, path, shared} wins; otherwise they are discovered on the node the way a user would
pick them (probes/common/tiers.discover_tiers, the storage phase's discovery too).
"""

import ipaddress
import os
import socket
import statistics
import sys
import threading
import urllib.request
from urllib.parse import urlsplit

from probes.common import tiers as storage_tier
from probes.common.tiers import discover_tiers, node_mounts

RUN_DIR_PREFIX = "clustermax-assess-lifecycle-"

def run_dir(tier_path, run_id):
    return storage_tier.run_dir(tier_path, run_id, RUN_DIR_PREFIX)


def resolve_tiers(given, user=None):
    """(tiers, facts): the explicit list normalised (storage_tier.check_tier), or the tiers discovered here."""
    if given:
        tiers = []
        for t in given:
            tier = storage_tier.check_tier(t)
            tier.update({k: v for k, v in zip(("mount_point", "fstype"), storage_tier.mount_of(tier["path"])[:2])})
            tiers.append(tier)
        return tiers, {"tiers_from": "the lifecycle_tiers list"}
    tiers, left_out = discover_tiers(node_mounts(), user=user)
    return tiers, {"tiers_from": "discovered on the node (home, shared mounts, local NVMe/RAID scratch, temp dir)",
                   "tiers_left_out": left_out}


def endpoint(url):
    """(host, port) of a URL (http 80, https 443 unless given); ValueError when it has no host."""
    parts = urlsplit(url if "://" in url else "https://" + url)
    if not parts.hostname:
        raise ValueError("no host in %r" % url)
    port = parts.port or (80 if parts.scheme == "http" else 443)
    return parts.hostname, port


def proxy_for(url):
    """The proxy the node's environment sends url through (http_proxy, https_proxy, all_proxy, less no_proxy), as
    urllib, pip, uv, huggingface_hub and curl do; None when it goes direct."""
    parts = urlsplit(url if "://" in url else "https://" + url)
    if not parts.hostname:
        return None
    proxies = urllib.request.getproxies_environment()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy or urllib.request.proxy_bypass_environment(parts.hostname, proxies):
        return None
    return proxy


def reachable(url, timeout=3.0):
    """(True, None) when a TCP connection to the URL's host and port opens within timeout (name lookup included,
    bounded too: a lookup with no DNS server can take much longer than a connect); else (False, why). Through the
    node's proxy where its environment names one for the URL (proxy_for): the tools go there, not to the host (a
    cluster that reaches the internet only through a proxy read as "not reachable", and every probe skipped)."""
    return connect(url, timeout)[:2]


def connect(url, timeout=3.0):
    """reachable(), and the IP address the connection opened to (None where none did): (ok, why, address)."""
    proxy = proxy_for(url)
    try:
        host, port = endpoint(proxy or url)
    except ValueError as exc:
        return False, str(exc), None
    ok, why, address = _connect(host, port, timeout)
    if why and proxy:
        why = "through the proxy %s (the environment's, for %s): %s" % (proxy, url, why)
    return ok, why, address


def _connect(host, port, timeout):
    found = {}

    def lookup():
        try:
            found["addrs"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            found["error"] = exc

    th = threading.Thread(target=lookup, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        return False, "name lookup of %s took longer than %g s" % (host, timeout), None
    if "error" in found:
        return False, "name lookup of %s failed: %s" % (host, found["error"]), None
    last = None
    for family, kind, proto, _, addr in found.get("addrs", [])[:4]:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout)
                sock.connect(addr)
            return True, None, addr[0]
        except OSError as exc:
            last = exc
    return False, "no TCP connection to %s port %d within %g s: %s" % (host, port, timeout, last), None


def median_warm(times):
    """The import timings of one environment: the first is cold, the median of the others is warm."""
    if not times:
        return None, None
    return times[0], (statistics.median(times[1:]) if len(times) > 1 else None)


def dist_versions(site_dirs):
    """{distribution name: version} of every *.dist-info under the given site-packages directories."""
    out = {}
    for site in site_dirs:
        try:
            names = os.listdir(site)
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, version = name[:-len(".dist-info")].rsplit("-", 1)
                out[dist.replace("_", "-").lower()] = version
    return out


def tail(text, n=2, limit=400):
    """The last n non-empty lines of a tool's output on one line (at most limit characters), for a reason."""
    lines = [x for x in (text or "").strip().splitlines() if x.strip()]
    return " | ".join(lines[-n:])[-limit:]


def failure(res, timeout):
    """Why a command (a probes.common.command result) failed, on one line; None when it exited 0."""
    if res.timed_out:
        return "timed out after %g s" % timeout
    if res.rc is None:
        return res.stderr.strip()
    if res.rc != 0:
        return "rc=%s: %s" % (res.rc, tail(res.stderr) or tail(res.stdout))
    return None


def tree_bytes(path):
    total = 0
    for d, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(d, name)).st_size
            except OSError:
                pass
    return total


def rx_counters(proc_root="/proc"):
    """{interface: bytes received so far} from <proc_root>/net/dev (two header lines, then per interface the
    receive bytes first; the reading process's network namespace's); None where it cannot be read."""
    try:
        with open(os.path.join(proc_root, "net", "dev")) as fh:
            lines = fh.read().splitlines()[2:]
    except OSError:
        return None
    out = {}
    for line in lines:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if not fields:
            continue
        try:
            out[name.strip()] = int(fields[0])
        except ValueError:
            return None
    return out


RTF_UP, RTF_REJECT, RTF_LOCAL = 0x0001, 0x0200, 0x80000000


def _routes(proc_root, family):
    """[(network, prefix length, metric, interface)] of the main routing table that are up, not reject and not local
    (a route to this node's own address), from <proc_root>/net/route (IPv4: hex in the kernel's byte order) or
    net/ipv6_route (hex in network order, prefix lengths and metric in hex)."""
    v6 = family == socket.AF_INET6
    try:
        with open(os.path.join(proc_root, "net", "ipv6_route" if v6 else "route")) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines if v6 else lines[1:]:
        f = line.split()
        try:
            if v6:
                dest, plen, metric, flags, iface = f[0], int(f[1], 16), int(f[5], 16), int(f[8], 16), f[9]
                net = ipaddress.IPv6Network((int(dest, 16), plen), strict=False)
            else:
                iface, dest, flags, metric, mask = f[0], f[1], int(f[3], 16), int(f[6]), f[7]
                as_ip = [ipaddress.IPv4Address(int(h, 16).to_bytes(4, sys.byteorder)) for h in (dest, mask)]
                net = ipaddress.IPv4Network("%s/%s" % tuple(as_ip), strict=False)
        except (IndexError, ValueError):
            continue
        if flags & RTF_UP and not flags & (RTF_REJECT | RTF_LOCAL) and iface != "lo":
            out.append((net, net.prefixlen, metric, iface))
    return out


def route_interface(address, proc_root="/proc"):
    """The interface the main routing table sends `address` (an IP address) through: the longest prefix that holds
    it, then the lowest metric; None for a loopback address or where no route holds it."""
    ip = ipaddress.ip_address(address.split("%")[0])
    if ip.is_loopback:
        return None
    found = [r for r in _routes(proc_root, socket.AF_INET6 if ip.version == 6 else socket.AF_INET) if ip in r[0]]
    return min(found, key=lambda r: (-r[1], r[2]))[3] if found else None


def _upper(sys_net, name):
    """Why an interface stacks on others (so counts bytes they count too), or None: a bridge, a bond, or an upper
    device (vlan, macvlan, ...: it has lower_* links)."""
    path = os.path.join(sys_net, name)
    if os.path.isdir(os.path.join(path, "bridge")):
        return "a bridge (its ports count the same bytes)"
    if os.path.isdir(os.path.join(path, "bonding")):
        return "a bond (its members count the same bytes)"
    try:
        lowers = sorted(n[len("lower_"):] for n in os.listdir(path) if n.startswith("lower_"))
    except OSError:
        lowers = []
    if lowers:
        return "stacked on %s (counts the same bytes)" % ", ".join(lowers)
    return None


def wire_interfaces(address=None, proc_root="/proc", sys_root="/sys"):
    """(interfaces, facts): the interfaces whose received bytes to count for traffic from `address` (an IP address,
    or None), each byte once. Interfaces stack (a NIC under a bridge, bond members and the bond, a VLAN and its
    parent, a macvlan on its NIC) and each level counts the same bytes, so /proc/net/dev summed over all of them
    counts a byte two or more times. In order:
    - the interface the routing table sends `address` through (route_interface), the one the answer comes in on;
    - else the physical interfaces (<sys_root>/class/net/<if>/device: a NIC, virtio included), never an upper device;
    - else (a container's veth, no physical interface in this namespace) every interface that is not a bridge, a
      bond nor an upper device of another (lower_* links);
    loopback never. facts: counted, rule (why those), route (address -> interface, or null), left_out {if: why}."""
    counters = rx_counters(proc_root) or {}
    names = sorted(n for n in counters if n != "lo")
    via = route_interface(address, proc_root) if address else None
    facts = {"route": {"address": address, "interface": via} if address else None}
    sys_net = os.path.join(sys_root, "class", "net")
    if via in counters:
        counted = [via]
        facts["rule"] = "the interface the routing table sends %s through" % address
        why = {n: "not the route to %s" % address for n in names}
    else:
        physical = [n for n in names if os.path.exists(os.path.join(sys_net, n, "device"))]
        uppers = {n: _upper(sys_net, n) for n in names}
        if physical:
            counted = physical
            facts["rule"] = "the physical interfaces (%s/<if>/device)" % sys_net
            why = {n: uppers[n] or "virtual (no device)" for n in names}
        else:
            counted = [n for n in names if not uppers[n]]
            facts["rule"] = ("no physical interface: those that are not a bridge, a bond or stacked on another"
                             if os.path.isdir(sys_net) else "%s not readable: every interface but loopback" % sys_net)
            why = uppers
    facts["counted"] = counted
    facts["left_out"] = {n: why[n] for n in names if n not in counted}
    return counted, facts


def received_bytes(interfaces=None, proc_root="/proc", sys_root="/sys"):
    """Bytes the given interfaces (default: wire_interfaces() with no route: the physical ones, each byte once) have
    received so far, from <proc_root>/net/dev; None where it cannot be read or no interface is there to count."""
    counters = rx_counters(proc_root)
    if counters is None:
        return None
    if interfaces is None:
        interfaces = wire_interfaces(None, proc_root, sys_root)[0]
    present = [n for n in interfaces if n in counters]
    return sum(counters[n] for n in present) if present else None
