"""assess-report: build, compare and re-rate the reports of assessment runs, and keep a peer store.

    assess-report build RUN_DIR [--analyst FILE] [--rubric FILE] [--tiers FILE] [--peers DIR] [--progress]
    assess-report merge RUN_DIR [--no-build] [--analyst FILE] [--rubric FILE] [--tiers FILE] [--peers DIR]
    assess-report compare RUN_A RUN_B [--json]
    assess-report regrade RUN_DIR --rubric FILE [--tiers FILE] [--analyst FILE] [--out DIR] [--json]
    assess-report peers add RUN_DIR [--store DIR]
    assess-report peers list [--store DIR] [--gpu MODEL]
    assess-report compare-cmax RUN_DIR CMAX_OUTPUT [--host HOST] [--json]

Exit codes: 0 ran and all good, 1 ran and failures found (build/regrade: failed or errored checks; compare:
regressions; compare-cmax: a check the two audits judge differently with no documented reason), 2 could not run
(missing or unreadable input, bad rubric/tiers/analyst file, slices that are not parts of one run, internal error)
or, build/merge/regrade, the run cannot be
judged (nothing readable was measured: reports.build.unjudgeable; the report is still written and says why).
"""

import argparse
import json
import os
import shutil
import sys
import traceback

from reports import compare as compare_mod
from reports import merge as merge_mod
from reports import peers, reference_cmax
from reports.build import (
    EXIT_CANNOT_RUN,
    EXIT_FINDINGS,
    EXIT_OK,
    Progress,
    build,
    evaluate,
    read_checks_csv,
    run_exit_code,
    summary_text,
    unjudgeable,
    write_outputs,
)


def _parser():
    parser = argparse.ArgumentParser(prog="assess-report", description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n".join(__doc__.splitlines()[2:]))
    sub = parser.add_subparsers(dest="command", required=True)

    def judgement(p, rubric_required=False):
        p.add_argument("--rubric", required=rubric_required,
                       help="rubric file (its rubric.d/ beside it is merged); default reports/data/rubric.yml")
        p.add_argument("--tiers", help="tier thresholds, weights and gates; default reports/data/tiers.yml")
        p.add_argument("--analyst", help="analyst input (pricing, partnerships, availability, support); "
                                         "default RUN_DIR/analyst.yml when present")
        p.add_argument("--peers", help="peer store directory; default $%s or <runs root>/_peers" % peers.ENV_STORE)

    p = sub.add_parser("build", help="grade and rate a run; write report/ (html, md, csv, parquet, json, junit)")
    p.add_argument("run_dir")
    judgement(p)
    p.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="draw the progress bar on stderr even when it is not a terminal")
    p.add_argument("--no-progress", dest="progress", action="store_false")

    p = sub.add_parser("merge", help="join a sliced run's slices (RUN_DIR/slices/*: AWX job slicing, or --limit "
                                     "runs sharing assess_run_id) into RUN_DIR, then build its report")
    p.add_argument("run_dir")
    judgement(p)
    p.add_argument("--no-build", action="store_true", help="merge only; `assess-report build RUN_DIR` later")

    p = sub.add_parser("compare", help="regressions and improvements, check by check, from RUN_A to RUN_B")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.add_argument("--limit", type=int, default=50, help="list at most this many items per kind (text output)")

    p = sub.add_parser("regrade", help="re-grade and re-rate a stored run with another rubric; no cluster touched")
    p.add_argument("run_dir")
    judgement(p, rubric_required=True)
    p.add_argument("--out", help="where the re-graded report goes; default RUN_DIR/regrade/<rubric name>")
    p.add_argument("--json", action="store_true", help="print the comparison with the stored report as JSON")

    p = sub.add_parser("peers", help="the peer store: earlier runs' summaries")
    psub = p.add_subparsers(dest="peers_command", required=True)
    pa = psub.add_parser("add", help="add (or replace) a run's summary in the store")
    pa.add_argument("run_dir")
    pa.add_argument("--store", help="default $%s or <runs root>/_peers" % peers.ENV_STORE)
    pl = psub.add_parser("list", help="list the store")
    pl.add_argument("--store", help="default $%s or runs/_peers" % peers.ENV_STORE)
    pl.add_argument("--gpu", help="only this gpus.yml model key (e.g. H100-SXM), or the reported name of a GPU "
                                  "gpus.yml does not list (e.g. 'NVIDIA L40S'); 'none' for no GPU")

    p = sub.add_parser("compare-cmax", help="the reference ClusterMAX CLI's audit (what `cmax audit` printed on one "
                                            "host) beside ours, check by check; kept in the run's report")
    p.add_argument("run_dir")
    p.add_argument("cmax_output", help="the text `cmax audit --vm -y` (or --standalone, --slurm, --k8s) printed")
    p.add_argument("--host", help="the run's host it was printed on; default: the host its header names, or the run's "
                                  "only host")
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    return parser


def _ratings_of(run_dir):
    path = os.path.join(run_dir, "report", "ratings.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    return evaluate(run_dir)[2]


def _cannot_judge_line(text):
    """The summary's "cannot be judged: <reason>" line."""
    return next((line.strip() for line in text.splitlines() if line.startswith("  cannot be judged: ")),
                "cannot be judged")


def cmd_build(args):
    text, code, _ = build(args.run_dir, rubric=args.rubric, tiers=args.tiers, analyst=args.analyst,
                          peer_store=args.peers, progress=args.progress)
    print(text)
    if code == EXIT_CANNOT_RUN:  # also on stderr: callers that show only stderr on exit 2 learn why
        print("assess-report: %s" % _cannot_judge_line(text), file=sys.stderr)
    return code


def cmd_merge(args):
    print(merge_mod.text(merge_mod.merge(args.run_dir)))
    if args.no_build:
        return EXIT_OK
    args.progress = None
    return cmd_build(args)


def cmd_compare(args):
    result = compare_mod.compare(compare_mod.load_side(args.run_a), compare_mod.load_side(args.run_b))
    print(json.dumps(result, indent=1) if args.json else compare_mod.text(result, args.limit))
    return EXIT_FINDINGS if compare_mod.has_regressions(result) else EXIT_OK


def cmd_regrade(args):
    run_dir = os.path.abspath(args.run_dir)
    if not os.path.isdir(os.path.join(run_dir, "artifacts")):
        raise FileNotFoundError("%s is not a run directory (no artifacts/)" % run_dir)
    stem = os.path.splitext(os.path.basename(args.rubric))[0]
    out = args.out or os.path.join(run_dir, "regrade", stem)
    bar = Progress()
    try:
        run, rows, ratings = evaluate(run_dir, args.rubric, args.tiers, args.analyst, args.peers, bar)
        write_outputs(run, rows, ratings, out, bar)
    finally:
        bar.close()
    before = os.path.join(run_dir, "report")
    if os.path.exists(os.path.join(before, "ratings.json")):
        result = compare_mod.compare(compare_mod.load_side(before), compare_mod.load_side(out))
        result["a"], result["b"] = "stored report", "regrade with %s" % args.rubric
        if args.json:
            print(json.dumps(result, indent=1))
        else:
            print(summary_text(run, rows, ratings, out))
            print(compare_mod.text(result))
    else:
        print(summary_text(run, rows, ratings, out))
    code = run_exit_code(run, rows)
    if code == EXIT_CANNOT_RUN:
        print("assess-report: cannot be judged: %s" % unjudgeable(run), file=sys.stderr)
    return code


def cmd_peers(args):
    if args.peers_command == "add":
        run_dir = os.path.abspath(args.run_dir)
        if not os.path.isdir(run_dir):
            raise FileNotFoundError("run directory %s does not exist" % run_dir)
        store = args.store or peers.default_store(run_dir)
        path = peers.add(store, _ratings_of(run_dir))
        print("added %s" % path)
        return EXIT_OK
    store = args.store or peers.default_store()
    table, problems = peers.load_store(store)
    rows = peers.list_table(table, args.gpu)
    print("peer store %s: %d run(s)%s" % (store, len(rows), " with GPU model %s" % args.gpu if args.gpu else ""))
    widths = [max(len(str(x)) for x in col) for col in zip(("provider", "run", "gpu", "backend", "tier", "score"),
                                                           *rows)] if rows else []
    for row in ([("provider", "run", "gpu", "backend", "tier", "score")] + rows) if rows else []:
        print("  " + "  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    for problem in problems:
        print("  skipped %s" % problem, file=sys.stderr)
    return EXIT_OK


def cmd_compare_cmax(args):
    """Reads the cmax report whole (or refuses it, naming the line), keeps it as RUN/reference/cmax/<host>.txt,
    rebuilds the report (its audit section shows the comparison) and prints the comparison."""
    run_dir = os.path.abspath(args.run_dir)
    if not os.path.isdir(os.path.join(run_dir, "artifacts")):
        raise FileNotFoundError("%s is not a run directory (no artifacts/)" % run_dir)
    with open(args.cmax_output, encoding="utf-8", errors="replace") as fh:
        report = reference_cmax.read_report(fh.read(), args.cmax_output)
    hosts = sorted(os.listdir(os.path.join(run_dir, "artifacts")))
    host = args.host or (report["host"] if report["host"] in hosts else hosts[0] if len(hosts) == 1 else None)
    if host not in hosts:
        raise ValueError("say which host cmax ran on with --host (%s; the report's header names %r)" % (
            ", ".join(hosts), report["host"]))
    kept = os.path.join(run_dir, reference_cmax.REFERENCE_DIR, "%s.txt" % host)
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    if not (os.path.exists(kept) and os.path.samefile(args.cmax_output, kept)):
        shutil.copyfile(args.cmax_output, kept)
    _, _, report_dir = build(run_dir)
    rows = read_checks_csv(os.path.join(report_dir, "checks.csv"))
    lines = reference_cmax.compare(report, rows, host)
    if args.json:
        print(json.dumps({"host": host, "counts": reference_cmax.counts(lines), "checks": lines}, indent=1))
    else:
        print(reference_cmax.text(lines, host))
    return EXIT_FINDINGS if any(line["verdict"] in ("disagree", "not mapped") for line in lines) else EXIT_OK


COMMANDS = {"build": cmd_build, "merge": cmd_merge, "compare": cmd_compare, "regrade": cmd_regrade, "peers": cmd_peers,
            "compare-cmax": cmd_compare_cmax}


def main(argv=None):
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors exit 2 already, --help exits 0
        return exc.code if isinstance(exc.code, int) else EXIT_CANNOT_RUN
    try:
        return COMMANDS[args.command](args)
    except (FileNotFoundError, ValueError) as exc:
        print("assess-report: %s" % exc, file=sys.stderr)
        return EXIT_CANNOT_RUN
    except Exception:  # noqa: BLE001 - exit 1 means "findings"; an internal error must never look like that
        traceback.print_exc()
        return EXIT_CANNOT_RUN
