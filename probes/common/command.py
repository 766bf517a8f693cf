"""The one way probes run a node command: argv (never a shell line), its own session, a timeout. The whole process
group is ended at the timeout, when the probe itself stops for any reason (its own time limit raises ProbeTimeout
inside the wait), and after the command exits (a daemon it left in its group goes too), so no tool outlives the
probe on a node. Long-running helpers a probe starts and stops itself go through probes.common.procs."""

import os
import shutil
import signal
import subprocess
from collections import namedtuple

# rc is None when the command could not run at all (missing, not permitted) or timed out; `missing` and
# `timed_out` say which.
CmdResult = namedtuple("CmdResult", "argv rc stdout stderr missing timed_out")


def signal_group(pgid, sig):
    """Send sig to a process group; False once the group is empty (or not ours to signal)."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def kill_group(proc, grace=2.0):
    """SIGTERM the process group that proc leads, then SIGKILL what is left after `grace` seconds. The group is
    signalled even when its leader has already exited: its children may still run (Linux keeps the leader's pid
    from being reused while the group has members)."""
    if proc is None:
        return
    if signal_group(proc.pid, signal.SIGTERM):
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=5.0)
    except subprocess.TimeoutExpired:
        pass


def _text(data):
    return (data or b"").decode("utf-8", "replace")


# Slurm's commands print every time in the format SLURM_TIME_FORMAT names when it is set in the environment
# ("relative", or any strftime format); the parsers read the standard one (2026-12-01T10:05:20: scontrol's
# SlurmdStartTime, the stamp on a Reason, sacct's times), so a Slurm command is always run with it.
SLURM_COMMANDS = frozenset(("scontrol", "sinfo", "squeue", "sacct", "sacctmgr", "sreport", "sshare", "sprio", "sstat",
                            "sdiag", "srun", "sbatch", "salloc", "scancel"))


def command_env(argv, env=None):
    """The environment argv runs in: env (None: this process's) as it is, but for a Slurm command
    (SLURM_COMMANDS) with SLURM_TIME_FORMAT=standard."""
    if os.path.basename(str(argv[0])) not in SLURM_COMMANDS:
        return env
    return dict(os.environ if env is None else env, SLURM_TIME_FORMAT="standard")


def run_cmd(argv, timeout=10.0, env=None, cwd=None):
    """Run argv with a timeout (seconds, None for none) -> CmdResult. A missing executable is a result
    (missing=True), not an exception; so is a timeout (timed_out=True). Any exception while waiting (the probe's
    time limit, KeyboardInterrupt) ends the process group and is raised again. A Slurm command runs with
    SLURM_TIME_FORMAT=standard (command_env)."""
    env = command_env(argv, env)
    exe = argv[0] if os.path.isabs(argv[0]) else shutil.which(argv[0])
    if exe is None or not os.access(exe, os.X_OK):
        return CmdResult(argv, None, "", "%s: not found" % argv[0], True, False)
    try:
        proc = subprocess.Popen([exe] + [str(a) for a in argv[1:]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=env, cwd=cwd, start_new_session=True)
    except OSError as exc:
        return CmdResult(argv, None, "", str(exc), False, False)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The command itself may have ended, its pipes held open by a process it left outside its group (a daemon
        # it started): that is its result, not a timeout. Either way the output is read for 2 s more at most.
        exited = proc.poll() is not None
        kill_group(proc, grace=0.5)
        try:
            out, err = proc.communicate(timeout=2.0)
        except subprocess.TimeoutExpired as held:
            out, err = held.output, held.stderr
            for pipe in (proc.stdout, proc.stderr):
                pipe.close()
        if exited:
            return CmdResult(argv, proc.returncode, _text(out), _text(err), False, False)
        return CmdResult(argv, None, _text(out), _text(err), False, True)
    except BaseException:
        kill_group(proc, grace=0.5)
        raise
    # The pipes are closed, so nothing left in the group writes to them; a daemon it left behind still goes.
    signal_group(proc.pid, signal.SIGKILL)
    return CmdResult(argv, proc.returncode, _text(out), _text(err), False, False)
