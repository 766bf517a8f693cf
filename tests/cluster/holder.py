#!/usr/bin/env python3
"""The holder of one test host: runs inside the host's new namespaces, started by Cluster._start_holder through
`ip netns exec <ns> unshare --uts --mount ... python -I -S holder.py ...`. It makes the host's private mounts and
hostname, starts the host's sshd as its child (again on SIGUSR1) and reaps every orphan of the host.

It runs isolated (-I -S: no site-packages, not even this folder on sys.path), so it imports only the standard library.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys

SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path
# Mount points that every host gets empty and private. A path under them that hosts must still see (the state
# directory, a virtual environment under /tmp, CMXA_KEEP_PATHS) is bound back in (--keep).
PRIVATE_MOUNTS = (("/run", "0755"), ("/tmp", "1777"), ("/dev/shm", "1777"))


def under_private_mount(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root, _ in PRIVATE_MOUNTS)


def holder_main(args) -> int:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ms_nosuid, ms_nodev, ms_bind, ms_rec = 2, 4, 4096, 16384
    pr_set_child_subreaper = 36

    def mount(src, target, fstype, flags, data=None):
        if libc.mount(src.encode() if src else None, target.encode(), fstype.encode() if fstype else None,
                      ctypes.c_ulong(flags), data.encode() if data else None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"mount {src} on {target}: {os.strerror(err)}")

    try:
        socket.sethostname(args.name)
        # Paths under /tmp, /run, /dev/shm that must stay visible: hold them open before they are covered, then
        # bind them back from the open descriptor (a bind from /proc/self/fd/N reaches the covered directory).
        keep = []
        for p in dict.fromkeys(os.path.abspath(p) for p in args.keep):
            if under_private_mount(p) and os.path.exists(p):
                keep.append((p, os.path.isdir(p), os.open(p, os.O_PATH | os.O_CLOEXEC)))
        etc_targets = [(args.hosts_file, os.path.realpath("/etc/hosts")),
                       (args.resolv_file, os.path.realpath("/etc/resolv.conf"))]
        for root, mode in PRIVATE_MOUNTS:
            mount("tmpfs", root, "tmpfs", ms_nosuid | ms_nodev, f"mode={mode}")
        for p, isdir, fd in sorted(keep):
            if isdir:
                os.makedirs(p, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(p), exist_ok=True)
                open(p, "a").close()
            mount(f"/proc/self/fd/{fd}", p, None, ms_bind | ms_rec)
            os.close(fd)
        for src, target in etc_targets:
            if under_private_mount(target):
                # e.g. /etc/resolv.conf -> /run/...: the target is on our fresh tmpfs, so just write it there.
                os.makedirs(os.path.dirname(target), exist_ok=True)
                shutil.copyfile(src, target)
            else:
                mount(src, target, None, ms_bind)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        os.makedirs("/run/lock", exist_ok=True)
        os.chmod("/run/lock", 0o1777)
        if libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")
    except Exception as e:  # reported to the parent on the ready pipe, and to holder.log
        print(f"error {e}", flush=True)
        print(f"holder {args.name}: {e}", file=sys.stderr, flush=True)
        return 1

    waited = {signal.SIGCHLD, signal.SIGUSR1, signal.SIGTERM, signal.SIGINT, signal.SIGHUP}
    signal.pthread_sigmask(signal.SIG_BLOCK, waited)

    def start_sshd():
        try:
            # -D: sshd stays our child, so we reap it; the child gets default signal handling back.
            return os.posix_spawn(SSHD, [SSHD, "-D", "-f", args.sshd_config, "-E", args.sshd_log], dict(os.environ),
                                  setsigmask=(), setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            print(f"holder {args.name}: cannot start sshd: {e}", file=sys.stderr, flush=True)
            return None

    def reap(sshd):
        """Collect sshd and every orphan of the host; returns sshd's PID while it still runs, else None."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return sshd
            if pid == 0:
                return sshd
            if pid == sshd:
                sshd = None

    sshd = start_sshd()
    print(f"ready {os.getpid()}", flush=True)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.close(devnull)
    while True:
        sig = signal.sigwaitinfo(waited).si_signo
        if sig == signal.SIGCHLD:
            sshd = reap(sshd)
        elif sig == signal.SIGUSR1:
            # Reap first: SIGUSR1 is taken before a pending SIGCHLD (lower number), and the old sshd may have just
            # died (stop_sshd then start_sshd) without being collected yet.
            sshd = reap(sshd)
            if sshd is None:
                sshd = start_sshd()
        elif sig == signal.SIGHUP:
            continue
        else:  # SIGTERM / SIGINT: the host goes away (down kills the rest of it by PID)
            return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="holder.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--sshd-config", required=True)
    parser.add_argument("--sshd-log", required=True)
    parser.add_argument("--hosts-file", required=True)
    parser.add_argument("--resolv-file", required=True)
    parser.add_argument("--keep", action="append", default=[])
    return holder_main(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
