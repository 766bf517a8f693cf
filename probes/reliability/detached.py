"""Start a function of this phase as a detached process that outlives the probe run (the scheduler watcher, the
DCGM injection hold): its own session, so the probe's end and Ansible's SSH session do not take it down, and a
marker argument on its command line, so a later stop only ever signals the process it started."""

import json
import subprocess
import sys

from probes.common.procs import package_root


def start(module, function, cfg, marker, log_path=None, cwd=None):
    """Run module.function(cfg) detached; returns the Popen. Its output goes to log_path (appended), else nowhere."""
    code = ("import json, sys; sys.path.insert(0, %r); from %s import %s; %s(json.loads(sys.argv[1]))"
            % (package_root(), module, function, function))
    argv = [sys.executable, "-c", code, json.dumps(cfg), marker]
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd=cwd,
                                start_new_session=True, close_fds=True)
    finally:
        if log_path:
            log.close()


def _stat(pid):
    """The fields of /proc/<pid>/stat after the process's name (state, parent pid, ...), [] when it is gone. Bytes, and
    split after the name's last ")": a name may hold spaces, parentheses and bytes that are not UTF-8."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
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
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read()
    except OSError:
        return b""
