"""Shared node-side code of the lifecycle probes (pkg_install, container_pull, model_pull, serve_ready,
net_speed): which storage tiers a user would install into, whether an internet endpoint can be reached at all
(checked with a short timeout before anything waits on it), the probes' working directories, and small timing
helpers.

Tiers: an explicit list {name, path, shared} wins; otherwise they are discovered on the node the way a user would
pick them (probes/common/tiers.discover_tiers, the storage phase's discovery too).
"""

import os
import socket
import statistics
import threading
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


def reachable(url, timeout=3.0):
    """(True, None) when a TCP connection to the URL's host and port opens within timeout (name lookup included,
    bounded too: a lookup with no DNS server can take much longer than a connect); else (False, why)."""
    try:
        host, port = endpoint(url)
    except ValueError as exc:
        return False, str(exc)
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
        return False, "name lookup of %s took longer than %g s" % (host, timeout)
    if "error" in found:
        return False, "name lookup of %s failed: %s" % (host, found["error"])
    last = None
    for family, kind, proto, _, addr in found.get("addrs", [])[:4]:
        try:
            with socket.socket(family, kind, proto) as sock:
                sock.settimeout(timeout)
                sock.connect(addr)
            return True, None
        except OSError as exc:
            last = exc
    return False, "no TCP connection to %s port %d within %g s: %s" % (host, port, timeout, last)


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


def received_bytes(path="/proc/net/dev"):
    """Bytes this node's network interfaces (all but loopback) have received so far: /proc/net/dev's receive
    column, summed; None where it cannot be read. /proc/net/dev is the reading process's network namespace's."""
    try:
        with open(path) as fh:
            lines = fh.read().splitlines()[2:]
    except OSError:
        return None
    total = 0
    for line in lines:
        name, _, counters = line.partition(":")
        fields = counters.split()
        if name.strip() == "lo" or not fields:
            continue
        try:
            total += int(fields[0])
        except ValueError:
            return None
    return total
