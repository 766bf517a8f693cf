"""Processes and listening sockets of this node, for the health and security checks.

Only processes in this node's own network namespace are counted as "running here": containers with their own
network (and, on the test cluster, the other test hosts sharing one kernel) are reported separately. Listening
TCP sockets come from /proc/net/tcp{,6} of this namespace; the owning process is found through /proc/<pid>/fd.
"""

import os
import re
import socket
import struct

from probes.audit.collect import listdir, read
from probes.common import procs as common_procs

# Daemons the rubric asks about (presence only: their count and PIDs change from run to run).
DAEMONS = ("nv-hostengine", "dcgm-exporter", "node_exporter", "node-exporter", "nvidia-persistenced",
           "nv-fabricmanager", "nvidia-imex", "slurmd", "slurmctld", "slurmdbd", "munged", "kubelet", "containerd",
           "dockerd", "nvsentinel", "gpud", "chronyd", "ntpd", "systemd-timesyncd", "sshd", "nhc", "prometheus",
           "otelcol", "fluent-bit", "telegraf", "nvidia-dcgm", "ipmievd", "rasdaemon", "mcelog", "auditd",
           "crio", "nscd", "sssd", "opensm")


def _netns(pid):
    try:
        return os.readlink("/proc/%s/ns/net" % pid)
    except OSError:
        return None


def cmdline_words(pid):
    """A process's command line as words; daemons that retitle themselves ("sshd: /usr/sbin/sshd -D -f x
    [listener] ...") write one string without NUL separators, so words are split on both."""
    text = read("/proc/%s/cmdline" % pid, "", 4096) or ""
    return [w for w in re.split(r"[\0\s]+", text) if w]


def _name(pid):
    """A process's program name: argv[0]'s basename when readable (comm is cut at 15 characters)."""
    cmdline = read("/proc/%s/cmdline" % pid, "", 4096) or ""
    argv = cmdline.split("\0")
    comm = (read("/proc/%s/comm" % pid, "") or "").strip()
    if argv and argv[0]:
        base = os.path.basename(argv[0].split()[0]).rstrip(":")
        if base.startswith(("python", "bash", "sh")) and len(argv) > 1 and argv[1]:
            return comm or base
        return base
    return comm


def _daemon_of_comm(comm):
    """The DAEMONS name a kernel comm (cut at 15 characters) stands for, or None."""
    if comm in DAEMONS:
        return comm
    if len(comm) == 15:
        return next((d for d in DAEMONS if d.startswith(comm)), None)
    return None


def _zombie_or_gone(pid):
    """An exited process not yet reaped (state Z) or one gone since the listing: its namespace links read as
    missing and its command line as empty, so it must not count as a daemon of this node."""
    return not common_procs.alive(pid)


def scan_processes():
    """{"here": {name: [pid, ...]}, "elsewhere": {name: count}, "pids": [pids of this namespace]} for the DAEMONS.

    Processes of other network namespaces are only named from their comm (cheap); this namespace's ones from
    their command line."""
    mine = _netns("self")
    here, elsewhere, pids = {}, {}, []
    for pid in listdir("/proc"):
        if not pid.isdigit():
            continue
        ns = _netns(pid)
        if ns is None and _zombie_or_gone(pid):
            continue
        if ns in (mine, None):
            pids.append(pid)
            name = _name(pid)
            if name in DAEMONS:
                here.setdefault(name, []).append(int(pid))
        else:
            name = _daemon_of_comm((read("/proc/%s/comm" % pid, "") or "").strip())
            if name:
                elsewhere[name] = elsewhere.get(name, 0) + 1
    return {"here": here, "elsewhere": elsewhere, "pids": pids}


def _addr(hexaddr, v6):
    raw = bytes.fromhex(hexaddr)
    if v6:
        # four little-endian 32-bit words
        raw = b"".join(struct.pack("<I", w) for w in struct.unpack(">4I", raw))
        return socket.inet_ntop(socket.AF_INET6, raw)
    return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(hexaddr, 16)))


def parse_proc_net_tcp(text, v6=False):
    """LISTEN sockets (state 0A) of /proc/net/tcp or tcp6 -> [{"address", "port", "inode"}]."""
    out = []
    for line in (text or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "0A":
            continue
        host, port = parts[1].split(":")
        out.append({"address": _addr(host, v6), "port": int(port, 16), "inode": int(parts[9])})
    return out


def is_loopback(address):
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1") or address.startswith("::ffff:127.")


def socket_owners(pids):
    """{socket inode: process name} for the given PIDs (root sees every process's descriptors)."""
    owners = {}
    for pid in pids:
        name = None
        for fd in listdir("/proc/%s/fd" % pid):
            try:
                target = os.readlink("/proc/%s/fd/%s" % (pid, fd))
            except OSError:
                continue
            m = re.match(r"^socket:\[(\d+)\]$", target)
            if m:
                if name is None:
                    name = _name(pid)
                owners[int(m.group(1))] = name
    return owners


def collect(c):
    procs = scan_processes()
    listeners = parse_proc_net_tcp(read("/proc/net/tcp")) + parse_proc_net_tcp(read("/proc/net/tcp6"), v6=True)
    owners = socket_owners(procs["pids"])
    seen = set()
    sockets = []
    for item in listeners:
        key = (item["address"], item["port"])
        if key in seen:
            continue
        seen.add(key)
        sockets.append({"address": item["address"], "port": item["port"], "loopback": is_loopback(item["address"]),
                        "process": owners.get(item["inode"])})
    c.mark("processes", "ok")
    c.mark("listeners", "ok" if listeners is not None else "error")
    return {"daemons": sorted(procs["here"]), "daemons_elsewhere": procs["elsewhere"],
            "listeners": sorted(sockets, key=lambda s: (s["port"], s["address"]))}
