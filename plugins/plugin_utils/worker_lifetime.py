"""ansible-core's forked workers end with their controller.

ansible-playbook forks one worker per host and task. Each worker calls setsid() (ansible/executor/process/worker.py,
``_detach``), so it is in a session and process group of its own: a `kill -9` of the controller, or of its process
group, does not reach it. A worker whose controller is gone blocks writing its result into the results pipe, whose read
end every worker inherited and none reads, or waits on a lock the controller held; measured here, four workers per
killed run hung for hours (issue 25). On Linux, prctl(PR_SET_PDEATHSIG) asks the kernel to signal a process when the
one that forked it dies: set in every worker the controller forks, a killed controller takes its workers with it.

The callback plugin (in the controller, before any worker is forked) calls :func:`end_workers_with_controller`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# The process that registered the hooks (the controller), and the pid of the process forking now: a fork from a
# worker (the ssh connection plugin's subprocess with a preexec_fn runs the at-fork hooks too) is not the
# controller's worker and is left alone.
_state = {"controller": None, "forking": None}


def _prctl():
    """libc's prctl, or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl
    except (OSError, AttributeError):
        return None


def _before_fork():
    _state["forking"] = os.getpid()


def _in_child(prctl=None, exit_=os._exit):
    """In a new child of the controller: SIGKILL when the controller dies. SIGKILL, not SIGTERM: the worker to end is
    one blocked in a pipe write or on a lock, and its own SIGTERM handler (which stops its children) may never run.
    Its ssh child then sees its pipes close and ends. A controller that died between the fork and this call (the
    child was reparented already) is not signalled for: the child ends now."""
    controller = _state["controller"]
    if controller is None or _state["forking"] != controller:
        return
    prctl = prctl or _prctl()
    if prctl is None:
        return
    prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != controller:
        exit_(1)


def end_workers_with_controller():
    """Once per process, in the controller: every process it forks from now on dies with it (Linux; elsewhere this
    does nothing). Returns whether the hooks are in place."""
    if _state["controller"] is not None:
        return _state["controller"] == os.getpid()
    if _prctl() is None:
        return False
    _state["controller"] = os.getpid()
    os.register_at_fork(before=_before_fork, after_in_child=_in_child)
    return True
