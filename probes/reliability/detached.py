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
