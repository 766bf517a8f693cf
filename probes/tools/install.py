"""Shared mechanics of the installers: one at a time per prefix directory (an flock on <dir>/.lock), markers
written last (atomically) that say what a directory holds, pip's environment, and the tail of a command's output
for a reason.

With the lock, a prefix under a shared $HOME (or a shared /opt) is safe with every node running the tools step at
once: the first installs or builds, the others wait and then find the result ready by its marker."""

import fcntl
import json
import os
import time
from contextlib import contextmanager


class LockTimeout(RuntimeError):
    pass


@contextmanager
def locked(directory, timeout):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, ".lock")
    fh = open(path, "a+")  # noqa: SIM115 - held for the block
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise LockTimeout("%s is held by another installer for more than %.0f s"
                                      % (path, timeout)) from None
                time.sleep(0.5)
        yield
    finally:
        fh.close()


# The marker of a made venv (tools_venv's probe venv, tools_inference's vLLM venv), written last.
VENV_MARKER = ".clustermax-venv.json"


def venv_made(venv, key):
    """The venv of this key exists and its marker says so (made to the end)."""
    marker = read_marker(os.path.join(venv, VENV_MARKER))
    return bool(marker and marker.get("key") == key and os.access(os.path.join(venv, "bin", "python"), os.X_OK))


def read_marker(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write_marker(path, doc):
    tmp = "%s.tmp-%d" % (path, os.getpid())
    with open(tmp, "w") as fh:
        json.dump(doc, fh, sort_keys=True, indent=1)
    os.replace(tmp, path)


def pip_env():
    """The environment for the installers' pip: no configuration file and no PIP_* variable of the node's (a login's
    PIP_FIND_LINKS or PIP_INDEX_URL would add sources, or change them, behind the step's own arguments)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def tail(res, lines=15):
    """The last lines of a command's output, for a reason that shows what went wrong."""
    text = ((res.stdout or "") + "\n" + (res.stderr or "")).strip()
    return "\n".join(text.splitlines()[-lines:])
