"""Small helpers the probes share: running a node command safely, reading /proc and /sys files."""

import os
import shutil
import signal
import subprocess
from collections import namedtuple

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


def read_text(path, default=None):
    """Contents of a small text file, or default when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return default


def parse_key_values(text, sep="="):
    """KEY=value lines (os-release style) into a dict; surrounding quotes removed."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or sep not in line:
            continue
        key, value = line.split(sep, 1)
        out[key.strip()] = value.strip().strip('"').strip("'")
    return out


def with_defaults(defaults, params):
    """A probe's parameters: its defaults, overridden by every param given a value (None keeps the default)."""
    merged = dict(defaults)
    merged.update({k: v for k, v in (params or {}).items() if v is not None})
    return merged
