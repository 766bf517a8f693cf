"""assess-report: build the report of a run.  `assess-report build runs/<provider>/<run_id>`

Exit codes: 0 ran and all good, 1 ran and failures found, 2 could not run.
"""

import argparse
import sys
import traceback

from reports.build import EXIT_CANNOT_RUN, build


def main(argv=None):
    parser = argparse.ArgumentParser(prog="assess-report", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_build = sub.add_parser("build", help="grade a run and write report/ (report.md, checks.csv, results.parquet)")
    p_build.add_argument("run_dir")
    args = parser.parse_args(argv)
    if args.command == "build":
        try:
            text, code, _ = build(args.run_dir)
        except FileNotFoundError as exc:
            print("assess-report: %s" % exc, file=sys.stderr)
            return EXIT_CANNOT_RUN
        except Exception:  # noqa: BLE001 - exit 1 means "findings"; an internal error must never look like that
            traceback.print_exc()
            return EXIT_CANNOT_RUN
        print(text)
        return code
    return EXIT_CANNOT_RUN
