"""Shared node-side code of the lifecycle probes (pkg_install, container_pull, model_pull, serve_ready,
net_speed): which storage tiers a user would install into, whether an internet endpoint can be reached at all
(checked with a short timeout before anything waits on it), the probes' working directories, and small timing
helpers.

Tiers: an explicit list {name, path, shared} wins; otherwise they are discovered on the node the way a user would
pick them (seed, "Lifecycle": home, shared filesystem, local NVMe scratch, other mounts) -- the home directory, every
shared (network or parallel) filesystem mount, every local NVMe/RAID mount, and the temporary directory -- keeping
one tier per filesystem (the first in that order) and saying why the others were left out.
"""

import os
import re
import socket
import statistics
import tempfile
import threading
from urllib.parse import urlsplit

from probes.audit import storage as audit_storage
from probes.common import tiers as storage_tier

RUN_DIR_PREFIX = "clustermax-assess-lifecycle-"

# Same list as SHARED_FS in reports/phases/audit/storage.py (the audit tiers); a unit test keeps the two equal.
SHARED_FS = ("nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "ceph", "virtiofs", "fuse.juicefs", "fuse.s3fs",
             "fuse.gcsfuse", "cifs", "smb3", "glusterfs", "fuse.glusterfs", "9p", "panfs", "fuse.weka")
_SKIP_TARGETS = ("/proc", "/sys", "/dev", "/run", "/boot", "/snap", "/var/lib", "/etc", "/usr")


def run_dir(tier_path, run_id):
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", str(run_id))
    return os.path.join(tier_path, RUN_DIR_PREFIX + safe)


def _is_shared(fstype):
    fstype = fstype or ""
    return fstype in SHARED_FS or fstype.startswith("nfs")


def _is_local_scratch(mount):
    src = mount.get("source") or ""
    return "nvme" in src or bool(re.match(r"^/dev/md\d", src))


def _tier_name(prefix, target, taken):
    """The mount's last path component (the seed's /data, /scratch …); prefixed with its kind, then numbered, when
    another tier already has that name."""
    base = re.sub(r"[^A-Za-z0-9_.+-]", "_", os.path.basename(target.rstrip("/")) or "root").strip("_.") or "root"
    if not re.match(r"^[A-Za-z0-9]", base):
        base = "t" + base
    for candidate in (base, "%s-%s" % (prefix, base)):
        if candidate not in taken:
            return candidate
    n = 2
    while "%s-%s%d" % (prefix, base, n) in taken:
        n += 1
    return "%s-%s%d" % (prefix, base, n)


def _writable_dir(path, user):
    """path when this user may create directories there, else <path>/<user> when that works, else None."""
    for candidate in (path, os.path.join(path, user) if user else None):
        if candidate and os.path.isdir(candidate) and os.access(candidate, os.W_OK | os.X_OK):
            return candidate
    return None


def discover_tiers(mounts, home=None, tmp=None, user=None, usable=None):
    """(tiers, left_out) from the node's mounts (dicts with target, source, fstype, as audit_storage parses them).
    left_out maps a candidate's path to why it is not a tier (same filesystem as another tier, not writable).
    usable(path, user) -> the directory to work in or None (default: writable here, else <path>/<user>)."""
    usable = usable or _writable_dir
    home = home or os.path.realpath(os.path.expanduser("~"))
    tmp = tmp or os.path.realpath(tempfile.gettempdir())
    user = user or os.environ.get("USER") or ""
    real = [m for m in mounts if m.get("fstype") not in audit_storage.PSEUDO
            and not any(m["target"] == s or m["target"].startswith(s + "/") for s in _SKIP_TARGETS)
            and not audit_storage._transient(m["target"])]
    candidates = [("home", home, None)]
    taken = {"home", "tmp"}
    for m in sorted(real, key=lambda m: m["target"]):
        if _is_shared(m.get("fstype")):
            name = _tier_name("shared", m["target"], taken)
            taken.add(name)
            candidates.append((name, m["target"], m))
    for m in sorted(real, key=lambda m: m["target"]):
        if _is_local_scratch(m) and m["target"] != "/" and not _is_shared(m.get("fstype")):
            name = _tier_name("scratch", m["target"], taken)
            taken.add(name)
            candidates.append((name, m["target"], m))
    candidates.append(("tmp", tmp, None))
    tiers, left_out, by_mount = [], {}, {}
    for name, path, mount in candidates:
        holder = mount or audit_storage.mount_of(path, mounts) or {}
        key = holder.get("target")
        if key in by_mount:
            left_out[path] = "same filesystem (%s) as tier %s" % (key, by_mount[key])
            continue
        where = usable(path, user)
        if where is None:
            left_out[path] = "not writable by %s" % (user or "this user")
            continue
        by_mount[key] = name
        tiers.append({"name": name, "path": where, "shared": _is_shared(holder.get("fstype")),
                      "fstype": holder.get("fstype"), "mount_point": key})
    return tiers, left_out


def node_mounts():
    text = None
    try:
        with open("/proc/self/mounts") as fh:
            text = fh.read()
    except OSError:
        pass
    return audit_storage.parse_proc_mounts(text or "")


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
