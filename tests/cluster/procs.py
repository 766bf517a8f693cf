"""Processes, commands and network namespaces of the test cluster, and the one error it raises (cluster.py,
slurm.py and reboot.py share them). Standard library only."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path


class ClusterError(RuntimeError):
    """Something about the test cluster failed; the message says which host and where to look."""


def _run(argv, check=True, timeout=30, input=None, env=None) -> subprocess.CompletedProcess:
    try:
        cp = subprocess.run(
            argv,
            input=input,
            capture_output=True,
            stdin=None if input is not None else subprocess.DEVNULL,
            text=True,
            timeout=timeout,
            env=env,
        )
    except FileNotFoundError as e:
        raise ClusterError(f"command not found: {argv[0]}") from e
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"timed out after {timeout}s: {shlex.join(argv)}") from e
    if check and cp.returncode != 0:
        raise ClusterError(f"failed (rc {cp.returncode}): {shlex.join(argv)}: {cp.stderr.strip() or cp.stdout.strip()}")
    return cp


def _ip(*args, check=True) -> subprocess.CompletedProcess:
    return _run(["ip", *args], check=check)


def _link_exists(name: str) -> bool:
    # Our own process lives in the root network namespace, so its /sys/class/net lists the root links.
    return os.path.exists(f"/sys/class/net/{name}")


def _netns_list() -> list[str]:
    cp = _ip("netns", "list", check=False)
    return [line.split()[0] for line in cp.stdout.splitlines() if line.strip()]


def _netns_pids(ns: str) -> list[int]:
    cp = _ip("netns", "pids", ns, check=False)
    return [int(x) for x in cp.stdout.split() if x.isdigit()]


def _pid_alive(pid: int | None) -> bool:
    """True for a running process; a zombie counts as gone (it holds no namespace and no port)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


def _proc_env(pid: int) -> dict[str, str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


def _proc_exe(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return ""


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def in_host(pid: int, host: dict) -> bool:
    """Whether the process lives in the test host's network namespace (so ending it ends nothing of another host)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{host['netns']}").st_ino
    except OSError:
        return False


def _signal_all(pids, sig) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids, timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    left = [p for p in pids if _pid_alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = [p for p in left if _pid_alive(p)]
    return left


def _terminate(pids, term_timeout=2.0) -> None:
    """SIGTERM, a short grace period, then SIGKILL: always by PID, never by name."""
    pids = [p for p in pids if _pid_alive(p)]
    if not pids:
        return
    _signal_all(pids, signal.SIGTERM)
    left = _wait_gone(pids, term_timeout)
    if left:
        _signal_all(left, signal.SIGKILL)
        _wait_gone(left, 3.0)


def _write_text(path: Path, text: str, mode: int | None = None) -> None:
    # Written in place (not renamed into place): /etc/hosts inside running hosts is a bind mount of this very inode.
    with open(path, "w") as f:
        f.write(text)
    if mode is not None:
        os.chmod(path, mode)


def run_cli(prog: str, cmd: str, action) -> int:
    """A harness CLI's command: `action()` gives the exit status (None is 0); a ClusterError is one line on stderr
    and status 1, and output piped into `head` just stops (no BrokenPipeError traceback)."""
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    try:
        return action() or 0
    except ClusterError as e:
        print(f"{prog} {cmd}: {e}", file=sys.stderr)
        return 1
