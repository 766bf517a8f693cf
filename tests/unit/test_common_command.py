"""The one command runner (probes.common.command.run_cmd) with a real process tree: a shell that starts children
which start grandchildren. Whether the runner's own timeout ends it, the probe's time limit interrupts it, or the
command exits and leaves a daemon behind, no process of the tree is left afterwards."""

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from probes.cli import run_probe
from probes.common.command import run_cmd
from probes.common.time_limit import time_limit

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def tree_argv(marker):
    """sh -> two children, one of which starts a grandchild; every sleep carries the marker in its argv."""
    return ["sh", "-c", "sleep 300 %s & sh -c 'sleep 300 %s & wait' & wait" % (marker, marker)]


def alive(marker):
    """Pids of running processes whose argv holds marker (a zombie has no argv and does not count)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path("/proc/%s/cmdline" % pid).read_bytes()
            except OSError:
                continue
            if marker.encode() in cmd:
                found.append(int(pid))
    return found


def gone(marker, wait_s=5.0):
    """alive(marker) once the killed processes had a moment to exit (SIGKILL is delivered asynchronously)."""
    deadline = time.monotonic() + wait_s
    while alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(marker)


@pytest.fixture
def marker():
    """A unique extra duration for sleep (GNU sleep adds up its arguments), so its argv identifies the tree."""
    return "0.%012d" % (uuid.uuid4().int % 10**12)


def test_the_runners_timeout_ends_the_whole_tree(marker):
    res = run_cmd(tree_argv(marker), timeout=1.0)
    assert res.timed_out and res.rc is None and not res.missing
    assert gone(marker) == []


class Interrupted(Exception):
    pass


def test_an_exception_while_waiting_ends_the_tree_and_is_raised(marker):
    """What probes.cli does at the probe's time limit: SIGALRM raises inside the runner's wait."""

    def on_alarm(signum, frame):
        assert len(alive(marker)) == 4  # both shells and both sleeps run when the limit fires
        raise Interrupted()

    with pytest.raises(Interrupted), time_limit(1.0, on_alarm):
        run_cmd(tree_argv(marker), timeout=120)
    assert gone(marker) == []


def test_a_daemon_left_by_a_command_that_exited_goes_too(marker):
    res = run_cmd(["sh", "-c", "sleep 300 %s >/dev/null 2>&1 & echo started" % marker], timeout=30)
    assert res.rc == 0 and res.stdout == "started\n"
    assert gone(marker) == []


def test_a_command_whose_pipes_a_daemon_in_another_session_holds_keeps_its_timeout(marker):
    """The command exits 0 at once but leaves a process of its own session (setsid: outside the group the runner
    ends) holding stdout: its result is what it printed and its exit status, within the timeout and 2 s. Before,
    the runner waited until that process closed the pipe (12 s for a 2 s timeout) and reported a timeout."""
    t0 = time.monotonic()
    res = run_cmd(["sh", "-c", "setsid sleep 12 %s & echo started" % marker], timeout=2.0)
    elapsed = time.monotonic() - t0
    try:
        assert (res.rc, res.stdout, res.timed_out) == (0, "started\n", False)
        assert elapsed < 6.0
    finally:
        for pid in alive(marker):
            os.kill(pid, signal.SIGKILL)


def test_missing_and_failing_commands_are_results():
    res = run_cmd(["/nonexistent/tool", "-v"], timeout=5)
    assert res.missing and res.rc is None and res.stderr == "/nonexistent/tool: not found"
    res = run_cmd(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=5)
    assert (res.rc, res.stdout, res.stderr, res.timed_out) == (3, "out\n", "err\n", False)


def test_the_probes_time_limit_ends_a_tool_tree_through_run_probe(tmp_path, monkeypatch, marker):
    """nccl_tests runs its binaries through the runner with a per-collective timeout far above the probe's own
    time limit: the limit (probes.cli, SIGALRM) fires inside the runner, the artifact says so, and neither the
    fake all_reduce_perf nor anything it started is left running."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").write_text("#!/bin/sh\ncat %s\n" % (FIX / "nvidia-smi" / "h100_8x_query.csv"))
    (bindir / "all_reduce_perf").write_text(
        "#!/bin/sh\ncase \"$1\" in -h) echo '  -J,--output_file <file>'; exit 0;; esac\n"
        "sleep 300 %s & sh -c 'sleep 300 %s & wait' & wait\n" % (marker, marker))
    for tool in bindir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    params = {"bin_dir": str(bindir), "collectives": ["all_reduce"], "timeout_per_collective": 600}
    _, doc = run_probe("nccl_tests", str(tmp_path / "out"), "r1", "n1", params=params, timeout=3)
    assert doc["status"] == "error" and "timed out" in doc["reason"]
    assert gone(marker) == []


def test_slurm_commands_print_times_in_the_standard_format_whatever_the_environment(tmp_path, monkeypatch):
    """A site's SLURM_TIME_FORMAT (relative, or a strftime format) changes every time scontrol prints, the stamp on a
    Reason among them (probes/common/slurm.py reason_time reads 2026-12-01T10:05:20): a Slurm command runs with
    SLURM_TIME_FORMAT=standard; any other command keeps the environment as it is."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("scontrol", "sinfo", "othertool"):
        (bindir / tool).write_text('#!/bin/sh\necho "${SLURM_TIME_FORMAT:-unset} ${KEEP:-gone}"\n')
        (bindir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    monkeypatch.setenv("KEEP", "kept")
    assert run_cmd(["scontrol", "show", "node", "-o"]).stdout.strip() == "standard kept"
    assert run_cmd([str(bindir / "sinfo")]).stdout.strip() == "standard kept"
    assert run_cmd(["scontrol"], env={"KEEP": "given", "PATH": os.environ["PATH"]}).stdout.strip() == "standard given"
    assert run_cmd(["othertool"]).stdout.strip() == "relative kept"
