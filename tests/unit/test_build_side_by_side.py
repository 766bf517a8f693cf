"""The build writes its output files from two processes at once (reports/build.py: side_by_side): the same files as
one process writes, a failure on either side raised with its own traceback, and no process left behind, even when
the build itself is killed."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rating_runs import ANALYST_GOOD, RUBRIC, make_run

from reports import build as build_mod

ROOT = Path(__file__).resolve().parents[2]
TWO_CPUS = len(os.sched_getaffinity(0)) > 1


def _wait_for(path, seconds=60):
    """Wait until path exists (a handshake between the two processes, not a timing assertion)."""
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("%s never appeared" % path)
        time.sleep(0.01)


def _gone(pid):
    """The process has ended: no such process, or a zombie nobody has reaped yet (PID 1 of a container may not)."""
    try:
        with open("/proc/%d/status" % pid) as fh:
            return re.search(r"^State:\s+Z", fh.read(), re.M) is not None
    except FileNotFoundError:
        return True


def _children():
    pid = os.getpid()
    kids = set()
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, tid)) as fh:
            kids.update(int(k) for k in fh.read().split())
    return kids


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: the build writes its files one after the other")
def test_the_second_part_runs_in_a_forked_copy_at_the_same_time(tmp_path):
    """Each side waits for the other's marker: one after the other, the first side would wait in vain."""
    def here():
        (tmp_path / "here").write_text(str(os.getpid()))
        _wait_for(tmp_path / "there")

    def there():
        (tmp_path / "there").write_text(str(os.getpid()))
        _wait_for(tmp_path / "here")

    before = _children()
    build_mod.side_by_side(here, there, "the markers")
    assert int((tmp_path / "here").read_text()) == os.getpid()
    assert int((tmp_path / "there").read_text()) != os.getpid()
    assert _children() == before


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: nothing is forked")
def test_a_failure_in_the_forked_copy_is_raised_with_its_traceback(tmp_path):
    def there():
        raise OSError(28, "No space left on device", str(tmp_path / "junit.xml"))

    before = _children()
    with pytest.raises(RuntimeError) as err:
        build_mod.side_by_side(lambda: (tmp_path / "here").write_text("done"), there, "checks.csv and junit.xml")
    text = str(err.value)
    assert text.startswith("writing checks.csv and junit.xml failed in the build's second process (exit 1):")
    assert "OSError: [Errno 28] No space left on device: '%s'" % (tmp_path / "junit.xml") in text
    assert "in there" in text  # the copy's own traceback
    assert (tmp_path / "here").read_text() == "done"  # this side's work was finished, not lost
    assert _children() == before


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: nothing is forked")
def test_a_failure_here_stops_the_forked_copy_and_is_raised_as_it_is(tmp_path):
    def here():
        _wait_for(tmp_path / "there.pid")
        raise ValueError("report.html could not be rendered")

    def there():
        (tmp_path / "there.pid").write_text(str(os.getpid()))
        time.sleep(20)
        (tmp_path / "there.finished").write_text("left running")

    with pytest.raises(ValueError, match="report.html could not be rendered"):
        build_mod.side_by_side(here, there, "the tables")
    assert _gone(int((tmp_path / "there.pid").read_text()))
    assert not (tmp_path / "there.finished").exists()  # stopped, not waited for


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: nothing is forked")
def test_the_forked_copy_dies_with_a_killed_build(tmp_path):
    """The callback stops a build that runs past its timeout with SIGKILL: the copy must not write on alone."""
    script = textwrap.dedent("""
        import os, signal, sys, time
        from pathlib import Path
        from reports.build import side_by_side
        out = Path(sys.argv[1])
        def here():
            while not (out / "there.pid").exists():
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGKILL)
        def there():
            (out / "there.pid").write_text(str(os.getpid()))
            time.sleep(600)
        side_by_side(here, there, "the tables")
    """)
    proc = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    pid = int((tmp_path / "there.pid").read_text())
    deadline = time.monotonic() + 60
    while not _gone(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid), "the forked writer %d outlived its killed build" % pid


def test_the_build_writes_the_same_files_from_two_processes_as_from_one(tmp_path, monkeypatch):
    run_dir = make_run(tmp_path, "excellent")
    assert build_mod._second_core() == TWO_CPUS  # this (single-threaded) test process forks where it can
    two = build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, report_dir=str(tmp_path / "two"))
    monkeypatch.setattr(build_mod, "_second_core", lambda: False)
    one = build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, report_dir=str(tmp_path / "one"))
    assert two[1] == one[1] == 0
    files = sorted(p.relative_to(tmp_path / "one") for p in (tmp_path / "one").rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(tmp_path / "two") for p in (tmp_path / "two").rglob("*") if p.is_file())
    assert {"checks.csv", "junit.xml", "results.parquet", "report.html", "ratings.json"} <= {str(f) for f in files}
    stamp = re.compile(rb'("generated_at": |timestamp=)"[^"]*"')  # the build's own time, and the report dir's path
    for f in files:
        a, b = ((tmp_path / side / f).read_bytes().replace(str(tmp_path / side).encode(), b"<dir>")
                for side in ("one", "two"))
        assert stamp.sub(rb"\1", a) == stamp.sub(rb"\1", b), f
    assert (tmp_path / "two" / "checks.csv").read_text().count("\n") > 50
