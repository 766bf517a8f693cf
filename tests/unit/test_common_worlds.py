"""A launched world (probes/common/worlds.py: drive, LaunchedWorld) when the probe's time limit fires while it runs,
for real on this machine: one node, its store on loopback, and a stand-in mpirun that starts a process in its own
group (as mpirun's ranks and orted are) and a rank in a session of its own that carries the run's marker (as a rank
that another node's launcher, or srun's slurmstepd, started on this host). Nothing of the world is left afterwards."""

import os
import signal
import uuid
from pathlib import Path

import pytest
from free_ports import free_port
from test_common_command import alive, gone

from probes.artifact import Artifact
from probes.common import worlds
from probes.common.time_limit import time_limit


class LimitReached(BaseException):
    """probes.cli's ProbeTimeout (SIGALRM), as a BaseException: a probe's `except Exception` does not swallow it."""


def described(pids):
    """Each left process's state, parent, group and session (/proc/<pid>/stat) and its argv, for the failure."""
    out = []
    for pid in pids:
        try:
            stat = Path("/proc/%d/stat" % pid).read_bytes().rsplit(b")", 1)[1].split()
            argv = Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            out.append("%d: gone by now" % pid)
            continue
        out.append("%d: state %s ppid %s pgid %s sid %s: %s" % (pid, stat[0].decode(), stat[1].decode(),
                                                              stat[2].decode(), stat[3].decode(), argv))
    return "; ".join(out)


def test_the_probes_time_limit_while_a_launched_world_runs_leaves_none_of_its_processes(tmp_path, monkeypatch):
    """LaunchedWorld.run stops its launcher (whose Children drive()'s finally never stopped) and drive()'s finally
    ends whatever still carries the world's marker on this host. Before, the launcher, its group and the rank were
    all left: die-with-parent ends only the launcher once the probe exits, and the rank not even then."""
    run_id = "t-%s" % uuid.uuid4().hex[:12]  # in the world's marker, so in the argv of the launcher and the rank
    sleeper = "0.%012d" % (uuid.uuid4().int % 10**12)  # an extra duration for sleep: its argv names it
    bindir = tmp_path / "bin"
    bindir.mkdir()
    ready = tmp_path / "rank-in-its-own-session"
    (bindir / "mpirun").write_text(
        '#!/bin/sh\n[ "$1" = --version ] && { echo "mpirun (Open MPI) 4.1.6"; exit 0; }\n'
        'for mark; do :; done\n'  # the last argument: the world's marker
        "sleep 300 %s &\n"
        "python3 -c 'import os, sys, time; os.setsid(); open(sys.argv[2], \"w\").close(); time.sleep(300)' "
        "\"$mark\" %s &\n"
        "wait\n" % (sleeper, ready))
    (bindir / "mpirun").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))

    art = Artifact("collectives", run_id, "h1")
    params = {"hosts": ["h1"], "addresses": ["127.0.0.1"], "rank": 0, "port": free_port(), "token": "",
              "launcher": "mpirun", "mpirun_args": [], "srun_args": [], "env": {}}
    node = worlds.Node(art, params, str(tmp_path / "out"))
    os.makedirs(node.out_dir)
    settings = {"entry": "none", "backend": "gloo", "ppn": 1, "launch_timeout": 300, "stall_timeout": 300,
                "rdzv_timeout": 30, "op_timeout": 300, "fault": None}

    def on_alarm(signum, frame):
        # the stand-in's sleep (in the launcher's group) and the rank (in a session of its own) both run
        if not alive(sleeper) or not ready.exists():
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            return
        raise LimitReached()

    try:
        with pytest.raises(LimitReached), time_limit(0.2, on_alarm):
            worlds.drive(art, node, params, settings, [1], [0], dict(os.environ), dict(os.environ), {},
                         lambda *a: None)
        assert art.facts["launcher"] == "mpirun"
        left = gone(sleeper) + gone(run_id)
        assert left == [], described(left)  # cc22 left one (the stand-in's sleep?) once: say what it was
    finally:
        for pid in alive(sleeper) + alive(run_id):
            os.kill(pid, signal.SIGKILL)
