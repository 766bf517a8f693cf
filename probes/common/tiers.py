"""Storage tiers on a node: where a probe may write, how much room there is, what the filesystem is,
whether O_DIRECT works there, and removing every test file again.

A tier is {name, path, shared}. Where none is given, they are discovered on the node the way a user would pick
them (seed, "Lifecycle": home, shared filesystem, local NVMe scratch, other mounts): :func:`discover_tiers`, for
the lifecycle and the storage phases alike. Every probe writes only below ``<path>/clustermax-assess-<run_id>/``,
so a single removal of that directory (by the probe, and again by the role, even after a failure) leaves nothing behind.
"""

import errno
import mmap
import os
import re
import shutil
import sys
import tempfile

from probes.audit import storage as audit_storage

RUN_DIR_PREFIX = "clustermax-assess-storage-"
_TIER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


class TierError(RuntimeError):
    pass


def check_tier(tier):
    """The tier dict, normalised; a TierError names what is wrong with it."""
    if not isinstance(tier, dict) or not tier.get("name") or not tier.get("path"):
        raise TierError("a storage tier needs a name and a path, got %r" % (tier,))
    name = str(tier["name"])
    if not _TIER_NAME_RE.match(name):
        raise TierError("tier name %r: use letters, digits, '.', '_', '+', '-'" % name)
    path = os.path.abspath(os.path.expanduser(str(tier["path"])))
    return {"name": name, "path": path, "shared": bool(tier.get("shared", False))}


def run_dir(tier_path, run_id, prefix=RUN_DIR_PREFIX):
    """<tier>/<prefix><run id>, the run id made a safe file name: the run's only directory on the tier."""
    return os.path.join(tier_path, prefix + re.sub(r"[^A-Za-z0-9_.+-]", "_", str(run_id)))


def free_bytes(path):
    """Bytes an unprivileged writer may still use on the filesystem holding path (or its nearest parent)."""
    probe = path
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def mount_of(path, mountinfo_text=None):
    """(mount point, fs type, source) of the mount that holds path, from /proc/self/mountinfo."""
    if mountinfo_text is None:
        try:
            with open("/proc/self/mountinfo") as fh:
                mountinfo_text = fh.read()
        except OSError:
            return None, None, None
    real = os.path.realpath(path)
    best = (None, None, None)
    best_len = -1
    for line in mountinfo_text.splitlines():
        parts = line.split()
        if " - " not in line or len(parts) < 5:
            continue
        mount_point = parts[4].replace("\\040", " ")
        after = line.split(" - ", 1)[1].split()
        fstype = after[0] if after else None
        source = after[1] if len(after) > 1 else None
        inside = real == mount_point or real.startswith(mount_point.rstrip("/") + "/")
        # A later line for the same mount point is a mount stacked on top: it wins.
        if inside and len(mount_point) >= best_len:
            best, best_len = (mount_point, fstype, source), len(mount_point)
    return best


def describe(path):
    """Facts about a tier's filesystem, for the artifact."""
    mount_point, fstype, source = mount_of(path)
    facts = {"mount_point": mount_point, "fstype": fstype, "source": source}
    try:
        facts["free_bytes"] = free_bytes(path)
    except OSError as exc:
        facts["free_error"] = str(exc)
    return facts


def check_space(path, need_bytes, factor=1.2):
    """None when there is room for need_bytes × factor; otherwise the refusal, with the numbers."""
    free = free_bytes(path)
    want = int(need_bytes * factor)
    if free < want:
        return ("not enough free space on %s: %.1f MiB free, the test needs %.1f MiB (%.1f MiB of files × %g "
                "margin); lower the size or free some space" % (path, free / 2**20, want / 2**20,
                                                                need_bytes / 2**20, factor))
    return None


def direct_io_supported(directory):
    """(True, None) when O_DIRECT reads and writes work in directory; else (False, why). tmpfs before Linux 6.6
    and some FUSE filesystems refuse O_DIRECT with EINVAL."""
    if not hasattr(os, "O_DIRECT"):
        return False, "O_DIRECT is not available on this platform"
    path = os.path.join(directory, ".cmxa-odirect-test")
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    buf.write(b"x" * 4096)
    try:
        try:
            fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
        except OSError as exc:
            return False, "O_DIRECT open refused on %s: %s" % (directory, os.strerror(exc.errno))
        try:
            os.write(fd, buf)
        except OSError as exc:
            return False, "O_DIRECT write refused on %s: %s" % (directory, os.strerror(exc.errno))
        finally:
            os.close(fd)
        return True, None
    finally:
        buf.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def fsync_path(path):
    """fsync a file or a directory by its path (a directory: its entries, so a new file's name is durable too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def drop_cache(path):
    """Ask the kernel to drop the page cache of a file, or of every file below a directory (clean pages only,
    so call it after fsync). Unprivileged; it does not reach a server's cache, but it makes a read after a
    write come from the filesystem rather than from this node's memory."""
    if os.path.isdir(path):
        files = [os.path.join(d, f) for d, _, names in os.walk(path) for f in names]
    else:
        files = [path]
    dropped = 0
    for name in files:
        try:
            fd = os.open(name, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            dropped += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return dropped


def remove_tree(path, stop_at=None):
    """Remove path and everything below it; then remove its now-empty parents up to and including stop_at
    (another host may still be removing its own part of a shared directory: a non-empty parent is left to it).
    Returns a list of errors (empty when all went)."""
    errors = []

    def onexc(func, name, err):
        if isinstance(err, tuple):  # onerror (Python < 3.12) passes exc_info
            err = err[1]
        if not (isinstance(err, OSError) and err.errno == errno.ENOENT):
            errors.append("%s: %s" % (name, err))

    if os.path.lexists(path):
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=onexc)
        else:
            shutil.rmtree(path, onerror=onexc)
    if stop_at:
        stop_at = os.path.abspath(stop_at)
        parent = os.path.dirname(os.path.abspath(path))
        while parent.startswith(stop_at):
            try:
                os.rmdir(parent)
            except OSError:
                break
            if parent == stop_at:
                break
            parent = os.path.dirname(parent)
    return errors


# ------------------------------------------------------------------------------------------- discovery

# Same list as SHARED_FS in reports/phases/audit/storage.py (the audit tiers); a unit test keeps the two equal.
SHARED_FS = ("nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "ceph", "virtiofs", "fuse.juicefs", "fuse.s3fs",
             "fuse.gcsfuse", "cifs", "smb3", "glusterfs", "fuse.glusterfs", "9p", "panfs", "fuse.weka")
_SKIP_TARGETS = ("/proc", "/sys", "/dev", "/run", "/boot", "/snap", "/var/lib", "/etc", "/usr")


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
