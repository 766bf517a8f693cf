"""The build writes its output files from two processes at once (reports/build.py: side_by_side): the same files as
one process writes, a failure on either side raised with its own traceback, and no process left behind, even when
the build itself is killed."""

import contextlib
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

from probes.common.time_limit import time_limit
from reports import build as build_mod

ROOT = Path(__file__).resolve().parents[2]
TWO_CPUS = len(os.sched_getaffinity(0)) > 1


def _publish_pid(path):
    """The pid file appears whole (written aside, then renamed): the other side acts as soon as the name exists, and
    under load it once read an empty file, or killed the writer between the open and the write (cc5, 2026-12-07)."""
    path.with_suffix(".tmp").write_text(str(os.getpid()))
    os.replace(path.with_suffix(".tmp"), path)


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


@pytest.fixture
def forking(monkeypatch):
    """side_by_side forks, whatever other Python threads the test process has (pytest's, a plugin's)."""
    monkeypatch.setattr(build_mod, "_second_core", lambda: True)


def _children():
    pid = os.getpid()
    kids = set()
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/children" % (pid, tid)) as fh:
            kids.update(int(k) for k in fh.read().split())
    return kids


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: the build writes its files one after the other")
def test_the_second_part_runs_in_a_forked_copy_at_the_same_time(tmp_path, forking):
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
def test_a_failure_in_the_forked_copy_is_raised_with_its_traceback(tmp_path, forking):
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
def test_a_failure_here_stops_the_forked_copy_and_is_raised_as_it_is(tmp_path, forking):
    def here():
        _wait_for(tmp_path / "there.pid")
        raise ValueError("report.html could not be rendered")

    def there():
        _publish_pid(tmp_path / "there.pid")
        time.sleep(20)
        (tmp_path / "there.finished").write_text("left running")

    with pytest.raises(ValueError, match="report.html could not be rendered"):
        build_mod.side_by_side(here, there, "the tables")
    assert _gone(int((tmp_path / "there.pid").read_text()))
    assert not (tmp_path / "there.finished").exists()  # stopped, not waited for


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: nothing is forked")
def test_an_interrupt_while_waiting_for_the_copy_stops_it(tmp_path, forking):
    """Ctrl-C (here a SIGALRM handler raising KeyboardInterrupt) while this side waits for the copy: the copy is
    killed and reaped, and the interrupt goes on up."""
    def there():
        _publish_pid(tmp_path / "there.pid")
        time.sleep(20)
        (tmp_path / "there.finished").write_text("left running")

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    before = _children()
    with pytest.raises(KeyboardInterrupt), time_limit(2, interrupt):  # rings again if dropped in a weakref callback
        build_mod.side_by_side(lambda: _wait_for(tmp_path / "there.pid"), there, "the tables")
    assert _gone(int((tmp_path / "there.pid").read_text())) and _children() == before
    assert not (tmp_path / "there.finished").exists()


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
            # whole or absent (see _publish_pid): here() kills the build the moment the name exists
            (out / "there.tmp").write_text(str(os.getpid()))
            os.replace(out / "there.tmp", out / "there.pid")
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


def _same_files(a_dir, b_dir):
    files = sorted(p.relative_to(a_dir) for p in a_dir.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b_dir) for p in b_dir.rglob("*") if p.is_file())
    assert {"checks.csv", "junit.xml", "results.parquet", "report.html", "ratings.json"} <= {str(f) for f in files}
    stamp = re.compile(rb'("generated_at": |timestamp=)"[^"]*"')  # the build's own time
    for f in files:
        a, b = ((d / f).read_bytes().replace(str(d).encode(), b"<dir>") for d in (a_dir, b_dir))
        assert stamp.sub(rb"\1", a) == stamp.sub(rb"\1", b), f


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: nothing is forked")
def test_the_build_writes_the_same_files_from_two_processes_as_from_one(tmp_path, monkeypatch):
    run_dir = make_run(tmp_path, "excellent")
    forks = []
    real_fork = build_mod._fork
    monkeypatch.setattr(build_mod, "_second_core", lambda: True)
    monkeypatch.setattr(build_mod, "_fork", lambda: forks.append(1) or real_fork())
    two = build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, report_dir=str(tmp_path / "two"))
    assert forks == [1]
    monkeypatch.setattr(build_mod, "_second_core", lambda: False)
    one = build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, report_dir=str(tmp_path / "one"))
    assert forks == [1] and two[1] == one[1] == 0
    _same_files(tmp_path / "one", tmp_path / "two")
    assert (tmp_path / "two" / "checks.csv").read_text().count("\n") > 50


def test_without_a_process_slot_for_the_copy_the_build_writes_one_file_after_the_other(tmp_path, monkeypatch):
    """fork() refused (no memory under strict overcommit, no process slot): the build does not fail for it."""
    run_dir = make_run(tmp_path, "excellent")

    def refused():
        raise OSError(12, "Cannot allocate memory")

    monkeypatch.setattr(build_mod, "_second_core", lambda: True)
    monkeypatch.setattr(build_mod, "_fork", refused)
    pipes = _pipes()
    refused_build = build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD,
                                    report_dir=str(tmp_path / "refused"))
    assert _pipes() == pipes  # the pipe made for the copy is closed
    monkeypatch.setattr(build_mod, "_second_core", lambda: False)
    one = build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, report_dir=str(tmp_path / "one"))
    assert refused_build[1] == one[1] == 0
    _same_files(tmp_path / "one", tmp_path / "refused")


@pytest.mark.skipif(not TWO_CPUS, reason="one CPU: nothing is forked")
def test_a_build_that_fails_half_way_leaves_no_half_written_file_and_no_process(tmp_path, monkeypatch):
    """report.html fails while the copy writes the tables: the copy is stopped, and what either side had begun is
    gone (every file is written aside and renamed, and what is aside is removed)."""
    run_dir = make_run(tmp_path, "excellent")
    began = []

    def fail(*args, **kwargs):
        _wait_for(tmp_path / "report" / "checks.csv.tmp")  # the copy has begun its first file
        began.append(True)
        raise ValueError("report.html could not be rendered")

    monkeypatch.setattr(build_mod, "_second_core", lambda: True)
    monkeypatch.setattr(build_mod.render_html, "render", fail)
    monkeypatch.setattr(build_mod, "write_checks_csv", _slow_checks_csv)
    before = _children()
    with pytest.raises(ValueError, match="report.html could not be rendered"):
        build_mod.build(str(run_dir), rubric=RUBRIC, analyst=ANALYST_GOOD, report_dir=str(tmp_path / "report"))
    assert began and _children() == before
    left = sorted(p.name for p in (tmp_path / "report").iterdir() if p.is_file())
    assert not [name for name in left if name.endswith(".tmp")], left
    assert "checks.csv" not in left and "junit.xml" not in left and "report.html" not in left


def _pipes():
    """This process's open pipe ends. Only pipes: a first build in the process opens files it keeps open (matplotlib
    keeps the font it drew the charts with), so a count of every descriptor failed when this test ran first."""
    ends = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor is gone by now
            target = os.readlink("/proc/self/fd/" + fd)
            if target.startswith("pipe:"):
                ends.append((fd, target))
    return sorted(ends)


def _slow_checks_csv(path, rows):
    """checks.csv begun and never finished (a big table being written when the build fails)."""
    with open(path + ".tmp", "w") as fh:
        fh.write("check_id,category\n")
        fh.flush()
        time.sleep(600)
