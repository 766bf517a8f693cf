"""The one way probes run a node command: argv (never a shell line), its own session, a timeout; the whole process
group is ended at the timeout and when the probe itself stops for any reason (its own time limit included), so no
tool is left running on a node."""

import os
import shutil
import signal
import socket
import subprocess
import time
from collections import namedtuple


def kill_group(proc, grace=2.0):
    """SIGTERM the process group of proc, then SIGKILL what is left after `grace` seconds."""
    if proc is None or proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def run(argv, timeout, env=None, cwd=None):
    """(rc or None on timeout, stdout, stderr). The child runs in its own session; it is killed with its group
    on timeout and on any exception in this process (the probe's own timeout is one)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env=env, cwd=cwd, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except subprocess.TimeoutExpired:
        kill_group(proc, grace=0.5)
        out, err = proc.communicate()
        return None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    except BaseException:
        kill_group(proc, grace=0.5)
        raise


def start(argv, log_path=None):
    """A background process in its own session (stop it with kill_group)."""
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    finally:
        if log_path:
            log.close()


def wait_listening(addr, port, proc=None, timeout=15.0):
    """True once something accepts TCP connections on addr:port; False when proc exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            socket.create_connection((addr, int(port)), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


# rc is None when the command could not run at all (missing, not permitted, timed out).
CmdResult = namedtuple("CmdResult", "argv rc stdout stderr missing timed_out")


def run_cmd(argv, timeout=10.0, env=None):
    """Run argv (never a shell line) with a timeout; the whole process group is killed on timeout,
    so a hung tool never leaves processes behind on the node."""
    exe = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0])
    if exe is None or not os.access(exe, os.X_OK):
        return CmdResult(argv, None, "", "%s: not found" % argv[0], True, False)
    try:
        proc = subprocess.Popen(
            [exe] + list(argv[1:]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        return CmdResult(argv, None, "", str(exc), False, False)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        out, err = proc.communicate()
        return CmdResult(argv, None, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), False, True)
    return CmdResult(argv, proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                     False, False)
