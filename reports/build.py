"""Build every report file of one run from its artifacts (raw artifacts are never rewritten)."""

import csv
import os

from reports.grade import CHECK_COLUMNS, grade, summarize
from reports.load import load_run
from reports.render_md import render

# Exit codes of `reports build` (and of the CLI in general).
EXIT_OK = 0  # ran, every check passed, warned or was skipped with its reason
EXIT_FINDINGS = 1  # ran, some checks failed or errored
EXIT_CANNOT_RUN = 2  # nothing to report on (no run directory, unreadable input)


def write_checks_csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=CHECK_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


def build(run_dir):
    """Returns (summary text, exit code, report dir)."""
    run = load_run(run_dir)
    rows = grade(run)
    report_dir = os.path.join(run.run_dir, "report")
    os.makedirs(report_dir, exist_ok=True)
    with open(os.path.join(report_dir, "report.md"), "w", encoding="utf-8") as fh:
        fh.write(render(run, rows, report_dir))
    write_checks_csv(os.path.join(report_dir, "checks.csv"), rows)
    run.results.to_parquet(os.path.join(report_dir, "results.parquet"), index=False)
    counts = summarize(rows)
    reachable = len(run.hosts) - len(run.unreachable)
    partial = " - interrupted, partial" if run.meta.get("interrupted") else ""
    text = [
        "clustermax.assess: %s run %s (%s profile)%s" % (run.meta.get("provider"), run.meta.get("run_id"),
                                                       run.meta.get("profile", "?"), partial),
        "  hosts: %d (%d reachable%s)" % (len(run.hosts), reachable,
                                         ", unreachable: " + ", ".join(sorted(run.unreachable))
                                         if run.unreachable else ""),
        "  checks: " + ", ".join("%d %s" % (n, s) for s, n in counts.items()),
        "  report: %s" % os.path.join(report_dir, "report.md"),
    ]
    code = EXIT_FINDINGS if counts["fail"] or counts["error"] else EXIT_OK
    return "\n".join(text), code, report_dir
