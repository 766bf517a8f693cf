"""Storage for the audit: mounts (`findmnt -J`, or /proc/self/mounts), their free space and inodes (statvfs,
each in its own thread with a timeout: a hung network mount must not hang the audit), local NVMe devices,
/etc/fstab, which mount holds /home, and what device-mapper (LVM) and md RAID devices are built on (their slaves in
sysfs). The controller sorts mounts into tiers from the filesystem types."""

import json
import os
import threading

from probes.audit.collect import listdir, read, read_strip, to_int

PSEUDO = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "mqueue", "debugfs", "tracefs", "securityfs",
          "pstore", "bpf", "configfs", "fusectl", "hugetlbfs", "autofs", "binfmt_misc", "rpc_pipefs", "nsfs",
          "efivarfs", "selinuxfs", "ramfs", "fuse.gvfsd-fuse", "fuse.portal", "nfsd", "squashfs", "overlay",
          "rootfs", "none"}


# Mounts that come and go with workloads (container layers, pod volumes, user sessions, namespace handles): not
# part of the node's storage layout.
TRANSIENT = ("/run/netns", "/run/user/", "/var/lib/docker/", "/var/lib/kubelet/pods/", "/run/containerd/",
             "/run/docker/", "/var/lib/containers/", "/run/k3s/", "/var/lib/lxcfs")


def _transient(target):
    return any(target == t.rstrip("/") or target.startswith(t.rstrip("/") + "/") for t in TRANSIENT)


def _unescape(text):
    return text.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def parse_proc_mounts(text):
    mounts = []
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 4:
            mounts.append({"source": _unescape(parts[0]), "target": _unescape(parts[1]), "fstype": parts[2],
                           "options": parts[3]})
    return mounts


def parse_findmnt(text):
    """`findmnt -J -o TARGET,SOURCE,FSTYPE,OPTIONS` -> flat list of mounts (the tree's children included)."""
    out = []

    def walk(nodes):
        for n in nodes:
            out.append({"source": n.get("source"), "target": n.get("target"), "fstype": n.get("fstype"),
                        "options": n.get("options")})
            walk(n.get("children") or [])

    walk(json.loads(text).get("filesystems", []))
    return out


def parse_fstab(text):
    entries = []
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        parts = line.split()
        if len(parts) >= 3:
            entries.append({"source": parts[0], "target": _unescape(parts[1]), "fstype": parts[2],
                            "options": parts[3] if len(parts) > 3 else "defaults"})
    return entries


def mount_of(path, mounts):
    """The mount a path lives on: the longest target that is the path or a directory above it. Of mounts on the same
    target, the one listed last is on top (findmnt lists a mount over another as its child, /proc/self/mounts in
    mount order), but a pseudo filesystem never hides a real one there: a systemd automount of /home is an autofs
    mount with the NFS mount on top once /home was used, and the path lives on the NFS one."""
    best = None
    for m in mounts:
        t = m["target"]
        if not (path == t or path.startswith(t.rstrip("/") + "/") or t == "/"):
            continue
        if best is None or len(t) > len(best["target"]):
            best = m
        elif len(t) == len(best["target"]) and (m["fstype"] not in PSEUDO or best["fstype"] in PSEUDO):
            best = m
    return best


def statvfs_all(targets, timeout=3.0):
    """{target: {"size", "free", "avail", "inodes", "inodes_free"} or {"error": ...}}, in parallel daemon threads."""
    results = {}

    def one(t):
        try:
            st = os.statvfs(t)
            results[t] = {"size": st.f_blocks * st.f_frsize, "avail": st.f_bavail * st.f_frsize,
                          "free": st.f_bfree * st.f_frsize, "inodes": st.f_files, "inodes_free": st.f_ffree,
                          "readonly": bool(st.f_flag & os.ST_RDONLY)}
        except OSError as exc:
            results[t] = {"error": str(exc)}

    threads = []
    for t in targets:
        th = threading.Thread(target=one, args=(t,), daemon=True)  # daemon: a hung mount never blocks exit
        th.start()
        threads.append((t, th))
    for t, th in threads:
        th.join(timeout)
        if th.is_alive():
            results[t] = {"error": "statvfs timed out after %gs (hung mount?)" % timeout}
    return results


def nvme_devices(root="/sys/block"):
    out = {}
    for name in listdir(root):
        if not name.startswith("nvme"):
            continue
        out[name] = {"size_bytes": (to_int(read_strip(os.path.join(root, name, "size")), 0) or 0) * 512,
                     "model": read_strip(os.path.join(root, name, "device", "model"))}
    return out


def _disk_of(link):
    """The whole disk of a slaves/ entry: a partition (nvme0n1p1, md0p1) is a directory below its disk's in sysfs
    (.../nvme0n1/nvme0n1p1, with a `partition` file), a whole disk is itself."""
    real = os.path.realpath(link)
    if os.path.isfile(os.path.join(real, "partition")):
        return os.path.basename(os.path.dirname(real))
    return os.path.basename(link)


def stacked_devices(root="/sys/block"):
    """Device-mapper (dm-N: LVM, dm-crypt, multipath) and md (software RAID) block devices and what they are built on,
    as sysfs shows them: {"dm-0": {"dm_name": "vg_scratch-lv_scratch", "dm_uuid_prefix": "LVM", "slaves":
    ["nvme0n1p1", "nvme1n1p1"], "disks": ["nvme0n1", "nvme1n1"]}, "md0": {"md_level": "raid0", ...}}.

    `slaves` are the names in /sys/block/<dev>/slaves/ (a partition is named as such: nvme0n1p1); `disks` are the
    whole disks at the bottom, the slaves followed down through further dm/md devices (LVM on md RAID, dm-crypt on
    LVM) and partitions taken to their disk. A /dev/mapper/<name> mount is matched by `dm_name` (dm/name)."""
    out = {}
    names = [n for n in listdir(root) if n.startswith(("dm-", "md"))]
    slaves = {n: listdir(os.path.join(root, n, "slaves")) for n in names}

    def bottom(name, seen):
        disks = []
        for slave in slaves.get(name, []):
            disk = _disk_of(os.path.join(root, name, "slaves", slave))
            if disk in seen:
                continue
            if disk in slaves and slaves[disk]:
                disks += bottom(disk, seen | {disk})
            else:
                disks.append(disk)
        return disks

    for name in names:
        entry = {"slaves": slaves[name], "disks": sorted(set(bottom(name, {name})))}
        dm_name = read_strip(os.path.join(root, name, "dm", "name"))
        if dm_name is not None:
            entry["dm_name"] = dm_name
            uuid = read_strip(os.path.join(root, name, "dm", "uuid")) or ""
            # the subsystem prefix of the dm uuid (LVM-, CRYPT-, mpath-, part1-): what kind of mapping it is
            entry["dm_uuid_prefix"] = uuid.split("-", 1)[0] if "-" in uuid else None
        level = read_strip(os.path.join(root, name, "md", "level"))
        if level is not None:
            entry["md_level"] = level
        out[name] = entry
    return out


def collect(c):
    res = c.cmd("findmnt", ["findmnt", "-J", "-o", "TARGET,SOURCE,FSTYPE,OPTIONS"], timeout=10)
    mounts = None
    if res.rc == 0:
        try:
            mounts = parse_findmnt(res.stdout)
        except ValueError:
            mounts = None
    if mounts is None:
        mounts = parse_proc_mounts(read("/proc/self/mounts"))
        c.mark("mounts", "ok" if mounts else "error", None if mounts else "no mounts readable")
    else:
        c.mark("mounts", "ok")
    real = [m for m in mounts if m["fstype"] not in PSEUDO and not m["target"].startswith(("/proc", "/sys"))
            and not _transient(m["target"])]
    # one entry per target (the last mounted wins, as the kernel resolves it)
    by_target = {}
    for m in real:
        by_target[m["target"]] = m
    space = statvfs_all(sorted(by_target))
    for t, m in by_target.items():
        m.update(space.get(t, {}))
    home = os.path.expanduser("~")
    out = {
        "mounts": [by_target[t] for t in sorted(by_target)],
        "home_mount": (mount_of("/home", mounts) or {}).get("target"),
        "home_fstype": (mount_of("/home", mounts) or {}).get("fstype"),
        "user_home": home,
        "user_home_mount": (mount_of(home, mounts) or {}).get("target"),
        "nvme": nvme_devices(),
        "stacked": stacked_devices(),
        "fstab": parse_fstab(read("/etc/fstab")),
        "mount_targets": sorted({m["target"] for m in mounts if not _transient(m["target"])}),
    }
    return out
