"""Build every report file of one run from its artifacts (raw artifacts are never rewritten).

report/: report.md, report.html, checks.csv, results.parquet, ratings.json (docs/ratings.md), junit.xml.
"""

import contextlib
import csv
import ctypes
import datetime
import gc
import hashlib
import json
import os
import signal
import sys
import threading
import time
import traceback
import warnings

from probes.inventory import PROBES as PREFLIGHT_PROBES
from reports import peers, profiles
from reports.grading import CHECK_COLUMNS, grade, load_rubric, summarize
from reports.junit import junit_xml
from reports.load import load_run
from reports.rate import analyst_rows, load_analyst, load_tiers, rate, rating_table, ratings_document
from reports.render import host_pages
from reports.render import report_html as render_html
from reports.render import report_md as render_md

# Exit codes of `reports build` (and of the CLI in general).
EXIT_OK = 0  # ran, every check passed, warned or was skipped with its reason
EXIT_FINDINGS = 1  # ran, some checks failed or errored
EXIT_CANNOT_RUN = 2  # nothing to report on (no run directory, unreadable input), or a run that cannot be judged
PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies
OUTPUTS = ("report.html", "report.md", "checks.csv", "results.parquet", "ratings.json", "junit.xml")


class Progress:
    """A one-line progress bar on stderr (only on a terminal unless forced): builds of big runs take seconds."""

    def __init__(self, enabled=None, stream=None, width=30):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.width = width
        self.last = 0.0
        self.shown = False

    def __call__(self, fraction, label=""):
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.last < 0.1 and fraction < 1.0:
            return
        self.last = now
        done = int(self.width * max(0.0, min(1.0, fraction)))
        self.stream.write("\r[%s%s] %3d%% %-40.40s" % ("#" * done, "-" * (self.width - done), 100 * fraction, label))
        self.stream.flush()
        self.shown = True

    def close(self):
        if self.enabled and self.shown:
            self.stream.write("\n")
            self.stream.flush()


@contextlib.contextmanager
def _aside(path):
    """Yields where to write `path`'s content (path.tmp), then renames it to path: every output file is written
    this way, so a build stopped half-way never leaves a cut-off file (a checks.csv that `compare` or `regrade`
    would read as whole). write_outputs removes what a failed build left aside."""
    yield path + ".tmp"
    os.replace(path + ".tmp", path)


def write_checks_csv(path, rows):
    with _aside(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CHECK_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def read_checks_csv(path):
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["weight"] = float(r.get("weight") or 1.0)
        r.setdefault("evidence", "measured")
    return rows


def _digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _write(path, data):
    with _aside(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data if isinstance(data, bytes) else data.encode("utf-8"))


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def evaluate(run_dir, rubric=None, tiers=None, analyst=None, peer_store=None, progress=None):
    """Load, grade and rate a run without writing anything. Returns (run, rows, ratings document, extras)."""
    progress = progress or (lambda fraction, label="": None)
    progress(0.0, "loading artifacts")
    run = load_run(run_dir)
    rubric_doc = load_rubric(rubric)
    tiers_doc = load_tiers(tiers)
    if analyst is None and os.path.exists(os.path.join(run.run_dir, "analyst.yml")):
        analyst = os.path.join(run.run_dir, "analyst.yml")
    analyst_doc = load_analyst(analyst, tiers_doc) if analyst else None
    progress(0.1, "grading")
    rows = grade(run, rubric_doc, progress=lambda i, n, label: progress(0.1 + 0.5 * i / n, label))
    rows.extend(analyst_rows(analyst_doc))
    progress(0.6, "rating")
    rating = rate(rows, tiers_doc, analyst_doc, profiles.assess(run, tiers_doc))
    head = peers.headline(run, rating)
    store = peer_store or peers.default_store(run.run_dir)
    table, store_problems = peers.load_store(store)
    peers.rank(head, run.meta, table, int(peers.load_spec().get("min_peers", 5)))
    inputs = {
        "rubric": {"path": os.path.abspath(rubric) if rubric else "reports/data/rubric.yml (+ rubric.d)",
                   "sha256": _digest(rubric_doc), "checks": len(rubric_doc.get("checks", []))},
        "tiers": {"path": os.path.abspath(tiers) if tiers else "reports/data/tiers.yml", "sha256": _digest(tiers_doc)},
        "analyst": {"path": analyst_doc["path"], "sha256": _digest(analyst_doc)} if analyst_doc else None,
        "peers": {"store": os.path.abspath(store), "records": int(len(table)), "problems": store_problems},
    }
    doc = ratings_document(run, rows, rating, head, inputs, analyst_doc, generated_at=_now())
    return run, rows, doc


def write_outputs(run, rows, ratings, report_dir, progress=None):
    progress = progress or (lambda fraction, label="": None)
    os.makedirs(report_dir, exist_ok=True)

    def documents():
        progress(0.65, "report sections")
        parts = render_md.render_parts(run, rows, report_dir, ratings)
        _write(os.path.join(report_dir, "report.md"), render_md.render(run, rows, parts=parts))
        progress(0.8, "report.html")
        title = "ClusterMAX assessment: %s %s" % (run.meta.get("provider"), run.meta.get("run_id"))
        _write(os.path.join(report_dir, "report.html"), render_html.render(parts, rows, ratings, report_dir, title,
                                                                         hosts=run.hosts))
        progress(0.88, "hosts' pages, ratings.json")
        host_pages.write_host_pages(report_dir, rows, run.hosts, title)
        _write(os.path.join(report_dir, "ratings.json"), json.dumps(ratings, indent=1, sort_keys=False) + "\n")
        progress(0.94, "results.parquet")
        # Here, not in the forked copy: pyarrow's own threads are not the copy's to rely on.
        with _aside(os.path.join(report_dir, "results.parquet")) as tmp:
            run.results.to_parquet(tmp, index=False)

    def tables():  # plain Python, in the forked copy
        write_checks_csv(os.path.join(report_dir, "checks.csv"), rows)
        _write(os.path.join(report_dir, "junit.xml"), junit_xml(rows, ratings, run.meta,
                                                                timestamp=ratings["generated_at"]))

    try:
        side_by_side(documents, tables, "checks.csv and junit.xml")
    except BaseException:
        for name in OUTPUTS:  # what a writer stopped half-way left aside (the files themselves are whole or absent)
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(report_dir, name + ".tmp"))
        raise
    progress(1.0, "done")


def _second_core():
    """Whether a forked second process can write beside this one: Linux (where the copy can be made to die with its
    parent), a second CPU to run on, and no other Python thread (a fork copies only the calling thread: a lock
    another Python thread held would stay held in the copy). Native threads (pyarrow's pool, OpenBLAS) may exist:
    the copy runs only plain Python (csv, string building) and leaves with os._exit, so it never needs them. The
    report CLI, which the callback runs, has no other Python thread."""
    return (sys.platform.startswith("linux") and hasattr(os, "fork") and len(os.sched_getaffinity(0)) > 1
            and threading.active_count() == 1)


def _prctl():
    """libc's prctl, looked up before the fork (no dlopen in the forked copy), or None."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


def _fork():
    """os.fork() without Python 3.12's warning about other (native) threads: see _second_core for why the copy
    does not need them."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*fork.*")
        return os.fork()


def side_by_side(here, there, what):
    """Run here() in this process and there() in a forked copy of it, at once, when a second core can take it
    (else one after the other). The build's output files are independent of each other once the run is graded,
    and writing them is about 40 % of a 1,000-node build: the forked copy shares every row without copying or
    pickling them. The copy dies with its parent (PR_SET_PDEATHSIG: a build stopped by its timeout leaves no writer
    behind) and is killed when here() fails or is interrupted; a failure of the copy is raised with its own
    traceback once both have ended. No process is left either way."""
    if not _second_core():
        here()
        there()
        return
    prctl, parent = _prctl(), os.getpid()
    try:
        read_end, write_end = os.pipe()
    except OSError:
        here()
        there()
        return
    try:
        pid = _fork()
    except OSError:  # no memory or no process slot for the copy: one after the other, as without a second core
        os.close(read_end)
        os.close(write_end)
        here()
        there()
        return
    if pid == 0:  # the copy: write, report any failure through the pipe, and leave without the parent's exit hooks
        os.close(read_end)
        code = 1
        try:
            gc.disable()  # a collection would touch (and so copy) every page the copy shares with its parent
            if prctl is not None:
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(1)
            there()
            code = 0
        except BaseException:  # noqa: BLE001 - every failure goes to the parent, which raises it
            with contextlib.suppress(OSError):
                os.write(write_end, traceback.format_exc().encode("utf-8", "replace"))
        finally:
            os._exit(code)
    os.close(write_end)
    reader = os.fdopen(read_end, "rb")
    try:
        try:
            here()
            failure = reader.read().decode("utf-8", "replace")
        except BaseException:  # here() failed, or the wait was interrupted: the copy goes too
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            raise
    finally:
        reader.close()
        _, status = os.waitpid(pid, 0)
    if status:
        raise RuntimeError("writing %s failed in the build's second process (%s)%s" % (
            what, "exit %d" % os.waitstatus_to_exitcode(status) if os.WIFEXITED(status)
            else "killed by signal %d" % os.WTERMSIG(status), ":\n" + failure if failure else ""))


def exit_code(rows):
    """1 when the cluster showed failures or errors (measured rows; analyst judgements never change it)."""
    bad = any(r["status"] in ("fail", "error") for r in rows if r.get("evidence", "measured") != "analyst")
    return EXIT_FINDINGS if bad else EXIT_OK


def _paths(errors, limit=3):
    paths = [e["path"] for e in errors]
    return ", ".join(paths[:limit]) + (" and %d more" % (len(paths) - limit) if len(paths) > limit else "")


def unjudgeable(run):
    """Why the run cannot be judged, or None. Such a run exits 2 (EXIT_CANNOT_RUN), never 0 or 1: with nothing
    measured every check is skipped, and "0 fail, 0 error" would read as a healthy cluster (exit 0), while exit 1
    would claim findings about a cluster nobody measured. Its report is written all the same (nothing read is lost).
    Cannot be judged:
    - no readable artifact at all: an empty run directory, every artifact unreadable or invalid (load errors), or
      no host left one;
    - the run directory names no hosts (no hosts in assess_run.json and no artifact);
    - the run was interrupted (no run.json) before any phase measured anything: its only readable artifacts are
      preflight's node inventory (probes/inventory: node_info). A run that finished with only those (every phase
      left out with --tags) is judged on them."""
    if not run.artifacts:
        unreadable = [e for e in run.load_errors if e.get("host")]
        if unreadable:
            return "no readable artifact: %d unreadable (%s)" % (len(unreadable), _paths(unreadable))
        if not run.hosts:
            return "the run directory names no hosts (no hosts in assess_run.json, no artifacts)"
        return "no artifact from any of its %d host(s)" % len(run.hosts)
    if run.meta.get("interrupted") and all(d["probe"] in PREFLIGHT_PROBES for d in run.artifacts):
        return ("interrupted before any phase measured anything (no run.json; only preflight's %s artifacts)"
                % "/".join(PREFLIGHT_PROBES))
    return None


def run_exit_code(run, rows):
    """EXIT_CANNOT_RUN when the run cannot be judged (unjudgeable), else exit_code(rows)."""
    return EXIT_CANNOT_RUN if unjudgeable(run) else exit_code(rows)


def summary_text(run, rows, ratings, report_dir):
    counts = summarize(rows)
    reachable = len(run.hosts) - len(run.unreachable)
    unreachable = sorted(h for h in run.unreachable if h not in run.left_out)
    partial = " - interrupted, partial" if run.meta.get("interrupted") else ""
    text = [
        "clustermax.assess: %s run %s (%s profile)%s" % (run.meta.get("provider"), run.meta.get("run_id"),
                                                       run.meta.get("profile", "?"), partial),
        "  hosts: %d (%d reachable%s%s)" % (
            len(run.hosts), reachable, ", unreachable: " + ", ".join(unreachable) if unreachable else "",
            # a host --limit or a slice left out was not tried: not assessed, but not unreachable either
            ", not in this run: " + ", ".join(sorted(run.left_out)) if run.left_out else ""),
        "  checks: " + ", ".join("%d %s" % (n, s) for s, n in counts.items()),
    ]
    why = unjudgeable(run)
    if why:
        text.append("  cannot be judged: %s" % why)
    text += [
        rating_table(ratings),
        "  report: %s" % os.path.join(report_dir, "report.md"),
        "          (also report.html, ratings.json, junit.xml, checks.csv, results.parquet)",
    ]
    return "\n".join(text)


@contextlib.contextmanager
def _no_cyclic_gc():
    """The cyclic garbage collector off for one build. A build makes millions of long-lived objects (the artifacts'
    rows, the tables, the check rows) and few reference cycles; each full collection walks every live object again,
    and the collections that their growth sets off took 12 % of a 1,000-node build (3.5 of 29 s). Reference counting
    still frees what the build lets go, and the collector is back when the build ends."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def build(run_dir, rubric=None, tiers=None, analyst=None, peer_store=None, report_dir=None, progress=None):
    """Returns (summary text, exit code, report dir)."""
    bar = progress if isinstance(progress, Progress) else Progress(enabled=progress)
    try:
        with _no_cyclic_gc():
            run, rows, ratings = evaluate(run_dir, rubric, tiers, analyst, peer_store, bar)
            report_dir = report_dir or os.path.join(run.run_dir, "report")
            write_outputs(run, rows, ratings, report_dir, bar)
    finally:
        bar.close()
    return summary_text(run, rows, ratings, report_dir), run_exit_code(run, rows), report_dir
