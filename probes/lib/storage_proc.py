"""Processes the storage probes start: always ended (the whole process group) when the probe stops for any
reason, a probe timeout included, so no fio or worker is left running on a node."""

import os
import signal
import socket
import subprocess
import time


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
