"""Audit area `storage` (audit.storage.*): shared and parallel filesystems, local NVMe scratch, free space, inodes,
/etc/fstab and NFS options, hung or read-only mounts."""

import re

from reports.phases.audit.common import Error, R, Skip, host_rule, name_list
from reports.shown import shown

SHARED_FS = ("nfs", "nfs4", "lustre", "gpfs", "wekafs", "beegfs", "ceph", "virtiofs", "fuse.juicefs", "fuse.s3fs",
             "fuse.gcsfuse", "cifs", "smb3", "glusterfs", "fuse.glusterfs", "9p", "panfs", "fuse.weka")
PARALLEL_FS = ("lustre", "gpfs", "wekafs", "beegfs", "panfs", "fuse.weka")


def tier_of(m):
    fs, src = m.get("fstype") or "", m.get("source") or ""
    if fs in PARALLEL_FS:
        return {"lustre": "Lustre", "gpfs": "GPFS", "wekafs": "Weka", "fuse.weka": "Weka", "beegfs": "BeeGFS",
                "panfs": "PanFS"}[fs]
    if fs.startswith("nfs"):
        return "NFS"
    if fs == "virtiofs":
        return "virtiofs"
    if fs in SHARED_FS:
        return fs
    if fs == "tmpfs":
        return "tmpfs"
    if "nvme" in src or re.match(r"^/dev/md\d", src):
        return "local NVMe/RAID"
    return "local %s" % fs


def _mounts(v):
    v.need("mounts")
    return v.sec("storage").get("mounts") or []


@host_rule
def shared(v, c):
    mounts = [m for m in _mounts(v)
              if (m.get("fstype") or "") in SHARED_FS or (m.get("fstype") or "").startswith("nfs")]
    if not mounts:
        return R("warn", "none", "a shared filesystem mounted on every node")
    return R("pass", name_list("%s %s" % (m["target"], tier_of(m)) for m in mounts), "a shared filesystem mounted")


@host_rule
def parallel(v, c):
    mounts = _mounts(v)
    par = [m for m in mounts if (m.get("fstype") or "") in PARALLEL_FS]
    if par:
        return R("pass", name_list("%s %s" % (m["target"], tier_of(m)) for m in par), "a parallel filesystem for data")
    nfs = [m for m in mounts if (m.get("fstype") or "").startswith("nfs")]
    return R("warn", ("NFS only: %s" % name_list(m["target"] for m in nfs)) if nfs else "none",
             "a parallel filesystem (Lustre, GPFS, Weka, BeeGFS) or a scale-out NFS for data")


def _is_shared(fs):
    return fs in SHARED_FS or fs.startswith("nfs")


@host_rule
def home_shared(v, c):
    """/home on a shared filesystem. An automount of /home (autofs) is judged by what is mounted on it or, for an
    indirect map, under it (/home/alice); when nothing is, the check cannot tell (skip), never "not shared"."""
    st = v.sec("storage")
    mounts = _mounts(v)
    target, fs = st.get("home_mount"), st.get("home_fstype") or ""
    expected = "/home on shared storage"
    if fs == "autofs":
        # a probe before the fix named the automount point even with the NFS mount on top: `mounts` has that one
        on_top = next((m for m in mounts if m.get("target") == target), None)
        if on_top:
            fs = on_top.get("fstype") or ""
    if fs == "autofs":
        below = [m for m in mounts if (m.get("target") or "").startswith(target.rstrip("/") + "/")]
        shared_below = [m for m in below if _is_shared(m.get("fstype") or "")]
        if shared_below and len(shared_below) == len(below):
            return R("pass", "/home an automount (autofs) with %s mounted in it" % name_list(
                "%s (%s)" % (m["target"], m.get("fstype")) for m in shared_below), expected)
        planned = [e for e in st.get("fstab") or [] if e.get("target") == target]
        raise Skip("not read: %s is an automount point (autofs) with nothing mounted on it when the audit ran, so "
                   "what it mounts cannot be told from the mounts%s" % (target, "; /etc/fstab: %s" % name_list(
                       "%s %s" % (e["source"], e["fstype"]) for e in planned) if planned else ""))
    shared = _is_shared(fs)
    return R("pass" if shared else "warn", "/home on %s (%s)" % (target, fs or "?"), expected,
             None if shared else "users see a different home directory on every node")


# The boot disk's own mounts are the system, never scratch: the boot and EFI partitions wherever they are, and on the
# disk that holds / (an NVMe boot disk: / on nvme0n1p1, /boot on p16, /boot/efi on p15; or LVM on it: / on
# /dev/mapper/rhel-root, /home on rhel-home) the system paths below.
BOOT_MOUNTS = ("/", "/boot", "/boot/efi", "/efi")
SYSTEM_PATHS = ("/usr", "/var", "/home", "/opt", "/tmp", "/srv", "/snap", "/root")
_NVME_DISK = re.compile(r"^/dev/(nvme\d+n\d+)(?:p\d+)?$")
_STACKED = re.compile(r"^/dev/(dm-\d+|md\d+)(?:p\d+)?$")


def _disk(source):
    m = _NVME_DISK.match(source or "")
    return m.group(1) if m else None


def stacked_of(source, stacked):
    """The probe's record of the dm or md device a mount's source is (/dev/mapper/<dm name>, /dev/dm-N, /dev/mdN or a
    partition of it): (name, record), or None (not such a device, or a run whose probe did not record them)."""
    src = re.sub(r"\[.*\]$", "", source or "")  # findmnt's btrfs subvolume suffix: /dev/mapper/x[/@home]
    if src.startswith("/dev/mapper/"):
        name = src[len("/dev/mapper/"):]
        return next(((k, d) for k, d in sorted(stacked.items()) if d.get("dm_name") == name), None)
    m = _STACKED.match(src)
    return (m.group(1), stacked[m.group(1)]) if m and m.group(1) in stacked else None


def _disks(m, stacked):
    """The whole disks under a mount: its NVMe disk, or the bottom of its dm/md device; empty when not known."""
    d = _disk(m.get("source"))
    if d:
        return {d}
    found = stacked_of(m.get("source"), stacked)
    return set(found[1].get("disks") or []) if found else set()


def _system_mount(m, root_disks, stacked):
    target = m.get("target") or ""
    if target in BOOT_MOUNTS or target.startswith("/boot/"):
        return True
    on_root_disk = bool(root_disks & _disks(m, stacked))
    return on_root_disk and any(target == p or target.startswith(p + "/") for p in SYSTEM_PATHS)


def _stacked_text(name, rec):
    kind = rec.get("md_level") or {"LVM": "LVM", "CRYPT": "dm-crypt", "mpath": "multipath"}.get(
        rec.get("dm_uuid_prefix") or "", "device-mapper")
    return "%s %s over %s" % (name, kind, name_list(rec.get("disks") or ["nothing"], 4))


def _nvme_backing(m, stacked):
    """How a mount sits on NVMe: ("nvme", text) on an NVMe disk or partition, or on a dm/md device whose disks are all
    NVMe; ("partly", text) when only some are; ("other", text) when none are; None when it is none of these. A run
    whose probe did not record dm/md devices (no `stacked`) keeps the old reading: /dev/mdN counts, /dev/mapper not."""
    src = m.get("source") or ""
    if stacked is None:
        return ("nvme", src) if "nvme" in src or re.match(r"^/dev/md\d", src) else None
    found = None if _disk(src) else stacked_of(src, stacked)
    if not found:
        return ("nvme", src) if "nvme" in src and not src.startswith("/dev/mapper/") else None
    name, rec = found
    disks = rec.get("disks") or []
    nvme = [d for d in disks if d.startswith("nvme")]
    text = "%s: %s" % (src, _stacked_text(name, rec))
    if disks and len(nvme) == len(disks):
        return "nvme", text
    if nvme:
        return "partly", "%s: %d of %d devices NVMe (not NVMe: %s)" % (
            src, len(nvme), len(disks), name_list([d for d in disks if d not in nvme], 4))
    return "other", text


@host_rule
def local_nvme(v, c):
    """A local NVMe mount that is not the system: not the boot disk's /, /boot, /boot/efi, nor a system path on the
    disk(s) of /. A device-mapper volume (LVM, /dev/mapper/<vg>-<lv>) or an md RAID (/dev/mdN) counts when every disk
    under it is NVMe (the probe's `stacked`: the slaves in sysfs, followed down to the disks); one that is only partly
    on NVMe is named with how many of its disks are, and does not count."""
    st = v.sec("storage")
    mounts = _mounts(v)
    stacked = st.get("stacked")
    root = next((m for m in mounts if m.get("target") == "/"), None)
    root_disks = _disks(root, stacked or {}) if root else set()
    local, partly, other = [], [], []
    for m in mounts:
        if not tier_of(m).startswith("local ") or _system_mount(m, root_disks, stacked or {}):
            continue
        backing = _nvme_backing(m, stacked)
        if backing is None:
            continue
        kind, text = backing
        row = "%s (%s, %.1f TB)" % (m["target"], text, (m.get("size") or 0) / 1e12)
        {"nvme": local, "partly": partly, "other": other}[kind].append(row)
    devices = st.get("nvme") or {}
    expected = "local NVMe scratch mounted"
    if local:
        return R("pass", name_list(local + partly), expected)
    if partly:
        return R("warn", name_list(partly), expected, "the scratch volume is only partly on NVMe drives")
    if devices:
        return R("warn", "%d NVMe devices, none mounted as scratch%s" % (
            len(devices), "; not on NVMe: %s" % name_list(other) if other else ""), expected)
    return R("warn", "no NVMe device%s" % ("; not on NVMe: %s" % name_list(other) if other else ""), expected)


def _free_rule(target_pick, what):
    @host_rule
    def fn(v, c):
        mounts = _mounts(v)
        pct_warn = float(c.get("warn_below_pct", 10))
        pct_fail = float(c.get("fail_below_pct", 5))
        chosen = target_pick(mounts)
        if not chosen:
            raise Skip("not applicable: no %s mount" % what)
        rows, status = [], "pass"
        for m in chosen:
            if m.get("error"):
                rows.append("%s: %s" % (m["target"], m["error"]))
                status = "fail" if "timed out" in m["error"] else status
                continue
            if not m.get("size"):
                continue
            pct = 100.0 * (m.get("avail") or 0) / m["size"]
            if pct < pct_fail:
                status = "fail"
            elif pct < pct_warn and status == "pass":
                status = "warn"
            if pct < pct_warn or len(chosen) == 1:
                # whole percent, or the digits that keep it on its side of the lines (4.6 % free is not "5%")
                rows.append("%s %s%% free (%.1f GiB)" % (m["target"], shown(pct, (pct_warn, pct_fail), decimals=0),
                                                        (m.get("avail") or 0) / 2**30))
        obs = name_list(rows) if rows else "%d mounts above %g%% free" % (len(chosen), pct_warn)
        return R(status, obs, ">= %g%% free (fail below %g%%)" % (pct_warn, pct_fail))
    return fn


root_free = _free_rule(lambda ms: [m for m in ms if m["target"] == "/"], "root")
mounts_free = _free_rule(
    lambda ms: [m for m in ms if m["target"] != "/" and "ro" not in (m.get("options") or "").split(",")
                and m.get("fstype") not in ("tmpfs",)], "writable")


@host_rule
def inodes(v, c):
    mounts = [m for m in _mounts(v) if m.get("inodes")]
    limit = float(c.get("max_used_pct", 90))
    high = ["%s %s%%" % (m["target"], shown(100.0 * (1 - m["inodes_free"] / m["inodes"]), (limit,), decimals=0))
            for m in mounts if m["inodes"] and 100.0 * (1 - m["inodes_free"] / m["inodes"]) > limit]
    return R("warn" if high else "pass",
             name_list(high) if high else "%d mounts below %g%% inodes used" % (len(mounts), limit),
             "<= %g%% inodes used" % limit)


def _size_rule(target, min_gib, what):
    @host_rule
    def fn(v, c):
        mounts = _mounts(v)
        m = next((x for x in mounts if x["target"] == target), None)
        want = float(c.get("min_gib", min_gib))
        if not m or not m.get("size"):
            raise Skip("not applicable: %s is not a separate mount" % target)
        size = (m.get("avail") if c.get("measure") == "avail" else m.get("size")) / 2**30
        return R("pass" if size >= want else "warn", "%s %s GiB %s" % (target, shown(size, (want,), decimals=1),
                                                                        c.get("measure", "size")),
                 ">= %g GiB (%s)" % (want, what))
    return fn


tmp = _size_rule("/tmp", 1, "scratch for jobs")
dev_shm = _size_rule("/dev/shm", 1, "NCCL's shared-memory transport")


@host_rule
def fstab(v, c):
    st = v.sec("storage")
    entries = [e for e in st.get("fstab") or [] if e.get("fstype") not in ("swap", "none", "proc", "sysfs")
               and "noauto" not in (e.get("options") or "") and e.get("target", "").startswith("/")]
    if not entries:
        raise Skip("not applicable: no mount in /etc/fstab")
    mounted = set(st.get("mount_targets") or [])
    missing = [e["target"] for e in entries if e["target"] not in mounted]
    return R("warn" if missing else "pass", ("not mounted: %s" % name_list(missing)) if missing else
             "%d entries mounted" % len(entries), "every /etc/fstab entry mounted")


@host_rule
def nfs_options(v, c):
    nfs = [m for m in _mounts(v) if (m.get("fstype") or "").startswith("nfs")]
    if not nfs:
        raise Skip("not applicable: no NFS mount")
    min_rw = int(c.get("min_rwsize", 1048576))
    bad = []
    for m in nfs:
        opts = dict(o.split("=", 1) if "=" in o else (o, True) for o in (m.get("options") or "").split(","))
        ro = "ro" in opts
        if "soft" in opts and not ro:
            bad.append("%s soft" % m["target"])
        for key in ("rsize", "wsize"):
            if key in opts and int(opts[key]) < min_rw and not (ro and key == "wsize"):
                bad.append("%s %s=%s" % (m["target"], key, opts[key]))
    return R("warn" if bad else "pass", name_list(bad) if bad else "%d NFS mounts hard, large blocks" % len(nfs),
             "hard mounts (rw), rsize/wsize >= %d" % min_rw)


@host_rule
def hung(v, c):
    hung = [m["target"] for m in _mounts(v) if "timed out" in (m.get("error") or "")]
    return R("fail" if hung else "pass", ("hung: %s" % name_list(hung)) if hung else "every mount answered statvfs",
             "no hung mount")


@host_rule
def root_rw(v, c):
    root = next((m for m in _mounts(v) if m["target"] == "/"), None)
    if not root:
        raise Error("no root mount recorded")
    ro = root.get("readonly") or "ro" in (root.get("options") or "").split(",")
    return R("fail" if ro else "pass", "/ %s (%s)" % ("read-only" if ro else "read-write", root.get("fstype")),
             "root filesystem read-write")
