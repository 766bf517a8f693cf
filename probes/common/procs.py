"""Processes a network probe starts (workers, iperf3 servers, perftest), and making sure none of them outlives it.

Three layers, because a probe can end in three ways:
- normal end or an exception: `Children.stop_all()` in a finally block ends every process group it started
  (SIGTERM, a grace period, then SIGKILL) and reaps them;
- the probe's own timeout (SIGALRM in probes.cli) raises inside the probe, so the same finally block runs;
- the probe killed outright (SIGKILL, lost SSH session): every child is started through a tiny exec wrapper that
  sets PR_SET_PDEATHSIG=SIGKILL first, so the kernel kills it when the probe dies. Each child also leads its own
  process group, so whatever it starts itself is ended with it.
"""

import os
import signal
import subprocess
import sys
import time

# Runs in the child before exec: die with the parent (Linux prctl PR_SET_PDEATHSIG = 1), and bail out when the
# parent is already gone (the signal would never come).
_WRAPPER = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)\n"
    "except Exception:\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    os._exit(70)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def package_root():
    """The directory (or probes.pyz) that holds the probes package: what a Python child that imports probes
    puts first on its sys.path."""
    import probes  # noqa: PLC0415 - probes/__init__ is the package this module is part of

    return os.path.dirname(os.path.dirname(os.path.abspath(probes.__file__)))


def wrapped(argv):
    """argv run through the die-with-parent wrapper (parent = this process)."""
    return [sys.executable, "-c", _WRAPPER, str(os.getpid())] + [str(a) for a in argv]


class Children:
    """The processes one probe started. Use as a context manager, or call stop_all() in a finally block."""

    def __init__(self):
        self.procs = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()
        return False

    def start(self, argv, env=None, log_path=None, cwd=None, stdout=None, stdin=None):
        """Start argv in a new session (its own process group), dying with this process. Output goes to log_path
        (appended) unless stdout is given (e.g. subprocess.PIPE); stdin is /dev/null unless given."""
        log = open(log_path, "ab") if log_path else None
        try:
            out = stdout if stdout is not None else (log if log else subprocess.DEVNULL)
            proc = subprocess.Popen(wrapped(argv), env=env, cwd=cwd,
                                    stdin=stdin if stdin is not None else subprocess.DEVNULL, stdout=out,
                                    stderr=log if log else subprocess.DEVNULL if stdout is None else subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            if log:
                log.close()
        self.procs.append(proc)
        return proc

    @staticmethod
    def _signal_group(proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def stop(self, proc, grace=3.0):
        """End one child's process group: SIGTERM, wait up to grace seconds, then SIGKILL. Returns its rc."""
        if proc.poll() is None:
            self._signal_group(proc, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        # The leader may be gone while something it started still runs in the group.
        self._signal_group(proc, signal.SIGKILL)
        if proc.stdin:
            try:
                proc.stdin.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        return proc.returncode

    def stop_all(self, grace=3.0):
        for proc in self.procs:
            if proc.poll() is None:
                self._signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(p.poll() is None for p in self.procs) and time.monotonic() < deadline:
            time.sleep(0.05)
        for proc in self.procs:
            self.stop(proc, grace=0)
        self.procs = []


def _stat(pid):
    """The fields of /proc/<pid>/stat after the process's name (state, parent pid, ...), [] when it is gone. Bytes, and
    split after the name's last ")": a name may hold spaces, parentheses and bytes that are not UTF-8."""
    try:
        with open("/proc/%s/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return []


def alive(pid):
    """Whether the process runs (not gone, not a zombie waiting for its parent)."""
    fields = _stat(pid)
    return bool(fields) and fields[0] not in (b"Z", b"X")


def parent(pid):
    """The process's parent pid, None when it is gone."""
    fields = _stat(pid)
    return int(fields[1]) if len(fields) > 1 else None


def cmdline(pid):
    """The process's command line as bytes (NUL-separated), b"" when it is gone."""
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as fh:
            return fh.read()
    except OSError:
        return b""


def marked_pids(mark):
    """PIDs of this user's processes whose command line holds the marker (never this process)."""
    out = []
    needle = mark.encode()
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            if needle in cmdline(name).split(b"\0") and os.stat("/proc/%s" % name).st_uid == os.getuid():
                out.append(int(name))
        except OSError:
            continue
    return out


def kill_marked(mark, grace=3.0):
    pids = marked_pids(mark)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.time() + grace
        while time.time() < deadline and marked_pids(mark):
            time.sleep(0.1)
        pids = marked_pids(mark)
        if not pids:
            break
    return len(marked_pids(mark)) == 0


def tail(path, lines=20, max_bytes=65536):
    """The last lines of a log file (empty string when there is none)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - max_bytes))
            data = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])
