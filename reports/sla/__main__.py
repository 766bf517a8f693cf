"""python -m reports.sla: append | review | month | rrule-check (what the sla role's tasks call).

Exit codes: 0 done (review: no breach, no trigger, no undetermined verdict), 1 done with findings (review: a
breach, a termination trigger, or a verdict that time no source observed leaves undetermined; rrule-check: a rule
AWX would refuse), 2 could not run. A review of a month not over is provisional (its line says "provisional":
true): only what the rest of the month cannot change is a finding there (a breach or trigger its best case already
reaches); its open verdicts are not (availability.py, rule 9).
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback


def _slurm_spec(text: str) -> dict:
    """FORMAT:PATH[@OBSERVED_AT] -> {format, path, observed_at}."""
    fmt, _, rest = text.partition(":")
    path, _, observed = rest.partition("@")
    if not fmt or not path:
        raise argparse.ArgumentTypeError("want FORMAT:PATH[@RFC3339] with FORMAT scontrol, sinfo or sacctmgr")
    return {"format": fmt, "path": path, "observed_at": observed or None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.sla", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("append", help="store one health-probe round (JSON on stdin) in the SQLite store")
    p.add_argument("--db", required=True)
    p = sub.add_parser("review", help="review one month; writes OUT_ROOT/<month>/")
    p.add_argument("--month", help="YYYY-MM (default: the previous month in the contract's time zone)")
    p.add_argument("--contract", help="contract JSON/YAML (nodes with their racks, GPUs and optional service "
                   "windows in_service_from / in_service_until, tier, system, time zone, acceptance); - reads JSON "
                   "from stdin")
    p.add_argument("--out-root", help="runs/<provider>/sla")
    p.add_argument("--store", help="health-probe SQLite store")
    p.add_argument("--import", dest="imports", action="append", default=[], help="provider CSV/JSON log")
    p.add_argument("--import-timezone", help="zone of import timestamps that carry no offset")
    p.add_argument("--slurm", dest="slurm_files", action="append", default=[], type=_slurm_spec,
                   help="FORMAT:PATH[@OBSERVED_AT], FORMAT scontrol | sinfo | sacctmgr (a sacctmgr export is "
                   "taken to hold every node event from the month's start to OBSERVED_AT: ask it with the Start= "
                   "that `month --query-start-in` prints)")
    p.add_argument("--slurm-timezone", default="UTC", help="zone of slurmctld's local times (default UTC)")
    p.add_argument("--slurm-ignore-user", dest="ignore_users", action="append", default=[],
                   help="a drain set by this user is not the provider's downtime (repeatable)")
    p.add_argument("--assessment-dir", help="runs/<provider>: exclude the downtime its runs' reboot and"
                   " fault-injection tests caused")
    p.add_argument("--tiers", help="sla_tiers.yml (default reports/data/sla_tiers.yml)")
    p.add_argument("--now", help="review as of this time (RFC 3339; default now)")
    p.add_argument("--from-inputs", help="recompute a review from its inputs/ directory (into --out)")
    p.add_argument("--out", help="with --from-inputs: where to write")
    p = sub.add_parser("month", help="check a YYYY-MM month, or print the previous month in a time zone")
    p.add_argument("--month")
    p.add_argument("--timezone", default="UTC")
    p.add_argument("--query-start-in", metavar="ZONE",
                   help="print instead where a sacctmgr query in ZONE's local time must start to see the month")
    p = sub.add_parser("rrule-check", help="validate rrules as AWX does and show the next occurrences")
    p.add_argument("rrules", nargs="+")
    p.add_argument("--count", type=int, default=3)
    args = parser.parse_args(argv)

    if args.command == "append":
        from reports.sla.store import main_append

        return main_append(args.db)
    if args.command == "rrule-check":
        from reports.sla.awx import occurrences, validate

        bad = 0
        for rule in args.rrules:
            errors = validate(rule)
            if errors:
                bad += 1
                print(json.dumps({"rrule": rule, "valid": False, "errors": errors}))
            else:
                print(json.dumps({"rrule": rule, "valid": True,
                                  "next": [d.isoformat() for d in occurrences(rule, args.count)]}))
        return 1 if bad else 0
    if args.command == "month":
        from reports.sla.timeutil import TimeError, month_window, now_us, previous_month, query_start, zone

        try:
            month = args.month or previous_month(now_us(), zone(args.timezone))
            month_window(month, zone(args.timezone))
            start = query_start(month, zone(args.timezone), args.query_start_in) if args.query_start_in else None
        except TimeError as exc:
            print("reports.sla month: %s" % exc, file=sys.stderr)
            return 2
        print(start or month)
        return 0
    try:
        from reports.sla import review as rv
        from reports.sla.timeutil import parse_time

        if args.from_inputs:
            if not args.out:
                parser.error("--from-inputs needs --out")
            result = rv.rerun_from_inputs(args.from_inputs, args.out)
            out = args.out
        else:
            if not args.contract or not args.out_root:
                parser.error("review needs --contract and --out-root (or --from-inputs)")
            contract = json.load(sys.stdin) if args.contract == "-" else rv.load_contract(args.contract)
            result, out = rv.run(args.month, contract, args.out_root, tiers_path=args.tiers,
                                 now=parse_time(args.now) if args.now else None, store_path=args.store,
                                 imports=args.imports, import_timezone=args.import_timezone,
                                 slurm_files=args.slurm_files, slurm_timezone=args.slurm_timezone,
                                 ignore_users=args.ignore_users, assessment_dir=args.assessment_dir)
    except (OSError, ValueError) as exc:
        print("reports.sla review: %s" % exc, file=sys.stderr)
        return 2
    except Exception:  # noqa: BLE001 - exit 1 means "findings"; an internal error must never look like that
        traceback.print_exc()
        return 2
    summary = {"review": out, "month": result.month, "provisional": result.provisional,
               "cluster_availability_pct": result.cluster_availability_pct,
               "cluster_credit_pct": float(result.cluster_credit_pct), "breaches": len(result.breaches),
               "triggers": [t["trigger"] for t in result.triggers],
               "undetermined": [n.name for n in result.undetermined_nodes],
               "cluster_undetermined": result.cluster_undetermined,
               "undetermined_triggers": [t["trigger"] for t in result.undetermined_triggers],
               "down_s": {n.name: n.down_us / 1e6 for n in result.nodes if n.down_us}}
    print(json.dumps(summary))
    # a month not over: its open verdicts are provisional, not findings (the month's end settles them)
    findings = result.breaches or result.triggers or (not result.provisional and (
        result.undetermined_nodes or result.cluster_undetermined or result.undetermined_triggers))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
