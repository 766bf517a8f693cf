"""The monthly SLA review: stage the inputs, judge the month, write the report with its evidence and manifest.

Layout of runs/<provider>/sla/<YYYY-MM>/ (replaced as a whole, atomically, when a month is reviewed again):

    inputs/                 exactly what the review read (the manifest hashes these):
      contract.json           nodes (racks, GPUs, service windows), tier, system, time zone, acceptance dates
      sla_tiers.yml           the tiers and rules in force
      params.json             month, the review's "now", the Slurm zone, ignored users
      healthprobe_samples.csv the health-probe samples of the month (from runs/<provider>/sla/healthprobe.sqlite)
      slurm_snapshots.jsonl   Slurm snapshots the probe recorded, if any
      slurm/ imports/         copies of the other source files
      assessment/<run>/artifacts/<host>/   the reliability artifacts of the assessment's runs near the month
                              (reports/sla/sources/assessment.py: the windows of its own reboot / fault tests)
      history.json            earlier months' results (for "target missed N months in a row"; null: undetermined)
    review.md review.html   the review for people
    availability.csv        node, rack and cluster availability
    credits.csv             the credits table
    downtime.csv            every counted downtime interval with its cause and evidence (event ids)
    events.csv              every event of every source, with what it was made of
    exclusions.csv          maintenance excluded or refused, and why
    summary.json            the numbers, for the next months' reviews and for machines
    manifest.json SHA256SUMS  sha256 of every input and output (`sha256sum -c SHA256SUMS` in this directory)

A review can be recomputed from its inputs alone: `python -m reports.sla review --from-inputs DIR/inputs`.

Time no source observed (reports/sla/availability.py, rule 8) is put together here, from what each source knows of
its own coverage: the health probe's unmonitored time (beyond a sample's hold, and its monitoring outages) minus
what the Slurm snapshots observed (each for its hold) and what a sacctmgr export observed (from the month's start,
the sla role's query starting a day before it, to the export). The export vouches only for the nodes Slurm shows it
knows: those its node events name or a Slurm snapshot lists; a contract node it names no event of and no snapshot
lists (another name in Slurm, not in Slurm, an export of another cluster or with its events purged) is not observed
by it. No Slurm source observed the probe rounds whose own Slurm snapshot failed (rc not 0: Slurm could not be
asked; each such round until the next snapshot, for at most a snapshot's hold): neither the export nor the hold of
the snapshot before. Provider logs and the assessment's records carry no coverage and observe nothing. Without a
health-probe store every minute no other source observed is unobserved. The review then judges each node and the
cluster at that time's worst case as well as counted.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import shutil
import tempfile

from reports import yamlio
from reports.sla import intervals as iv
from reports.sla import store
from reports.sla.availability import excluded_intervals, unobserved_text
from reports.sla.availability import review as judge
from reports.sla.events import Contract
from reports.sla.render import render_html, render_markdown, table_rows
from reports.sla.sources import assessment as assessment_src
from reports.sla.sources import healthprobe as healthprobe_src
from reports.sla.sources import imports as imports_src
from reports.sla.sources import slurm as slurm_src
from reports.sla.tiers import Tiers
from reports.sla.timeutil import US, add_months, iso_utc, month_window, now_us, parse_time, previous_month, zone

SCHEMA = "clustermax.assess/sla_review/v1"
SAMPLE_COLUMNS = ["id", "round_id", "host", "sampled_at_us", "sampled_at", "state", "reason", "boot_id", "uptime_s",
                  "gpus_found", "gpu_rc", "interval_s"]
SLURM_FORMATS = ("scontrol", "sinfo", "sacctmgr")


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _typed(row: dict) -> dict:
    out = dict(row)
    for key in ("id", "sampled_at_us", "gpus_found", "gpu_rc"):
        out[key] = int(out[key]) if out.get(key) not in (None, "") else None
    for key in ("uptime_s", "interval_s"):
        out[key] = float(out[key]) if out.get(key) not in (None, "") else None
    return out


def stage(inputs: str, month: str, contract: dict, tiers_path: str, store_path: str | None = None, imports=(),
          import_timezone: str | None = None, slurm_files=(), slurm_timezone: str = "UTC", ignore_users=(),
          assessment_dir: str | None = None, history_root: str | None = None, now: int | None = None) -> None:
    """Copy / export every input of the review into `inputs` (the review then reads only these)."""
    os.makedirs(inputs, exist_ok=True)
    c = Contract.from_dict(contract)
    tz = zone(c.timezone)
    start, end = month_window(month, tz)
    tiers = Tiers.load(tiers_path)
    hold = float(tiers.accounting.get("sample_max_hold_intervals", 2))
    default_interval = float(tiers.accounting.get("default_probe_interval_s", 300))
    with open(os.path.join(inputs, "contract.json"), "w", encoding="utf-8") as fh:
        json.dump(c.as_dict(), fh, indent=2, sort_keys=True)
    shutil.copyfile(tiers_path, os.path.join(inputs, "sla_tiers.yml"))
    params = {"month": month, "now": iso_utc(now if now is not None else now_us()), "slurm_timezone": slurm_timezone,
              "import_timezone": import_timezone, "slurm_ignore_users": sorted(ignore_users),
              "slurm_files": [], "imports": [], "assessment_runs": []}
    if store_path and os.path.exists(store_path):
        margin = int(hold * max(default_interval, 3600) * US)
        rows = store.read_samples(store_path, start - margin, end)
        with open(os.path.join(inputs, "healthprobe_samples.csv"), "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=SAMPLE_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        snaps = store.read_slurm(store_path, start - margin, end)
        if snaps:
            with open(os.path.join(inputs, "slurm_snapshots.jsonl"), "w", encoding="utf-8") as fh:
                for snap in snaps:
                    fh.write(json.dumps(snap, sort_keys=True) + "\n")
    for i, spec in enumerate(slurm_files):
        fmt, path, observed = spec["format"], spec["path"], spec.get("observed_at")
        if fmt not in SLURM_FORMATS:
            raise ValueError("slurm file %s: format %r is not one of %s" % (path, fmt, ", ".join(SLURM_FORMATS)))
        dest = os.path.join("slurm", "%02d-%s" % (i + 1, os.path.basename(path)))
        os.makedirs(os.path.join(inputs, "slurm"), exist_ok=True)
        shutil.copyfile(path, os.path.join(inputs, dest))
        params["slurm_files"].append({"format": fmt, "path": dest, "observed_at": observed
                                      or iso_utc(int(os.path.getmtime(path) * US))})
    for i, path in enumerate(imports):
        dest = os.path.join("imports", "%02d-%s" % (i + 1, os.path.basename(path)))
        os.makedirs(os.path.join(inputs, "imports"), exist_ok=True)
        shutil.copyfile(path, os.path.join(inputs, dest))
        params["imports"].append(dest)
    if assessment_dir and os.path.isdir(assessment_dir):
        # A day's margin: a test's record is written when its batch ends, hours at most after the test began.
        for run_dir in assessment_src.find_runs(assessment_dir, start - 86400 * US, end + 86400 * US):
            dest = os.path.join("assessment", os.path.basename(run_dir))
            for rel in assessment_src.reliability_files(run_dir):
                os.makedirs(os.path.dirname(os.path.join(inputs, dest, rel)), exist_ok=True)
                shutil.copyfile(os.path.join(run_dir, rel), os.path.join(inputs, dest, rel))
            params["assessment_runs"].append(dest)
    history = {}
    if history_root and os.path.isdir(history_root):
        for back in range(1, 13):
            m = add_months(month, -back)
            path = os.path.join(history_root, m, "summary.json")
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    doc = json.load(fh)
                if doc.get("cluster_met_target") is not None:
                    history[m] = bool(doc["cluster_met_target"])
                elif doc.get("cluster_undetermined"):
                    history[m] = None  # undetermined: a miss in the worst case (availability.py, rule 8)
    with open(os.path.join(inputs, "history.json"), "w", encoding="utf-8") as fh:
        json.dump(history, fh, indent=2, sort_keys=True)
    with open(os.path.join(inputs, "params.json"), "w", encoding="utf-8") as fh:
        json.dump(params, fh, indent=2, sort_keys=True)


def compute(inputs: str):
    """Judge the month from a staged inputs directory alone. Returns (Review, observations)."""
    def read_json(name, default=None):
        path = os.path.join(inputs, name)
        if not os.path.exists(path):
            return default
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)

    params = read_json("params.json")
    contract = Contract.from_dict(read_json("contract.json"))
    tiers = Tiers.load(os.path.join(inputs, "sla_tiers.yml"))
    month = params["month"]
    tz = zone(contract.timezone)
    start, end = month_window(month, tz)
    now = parse_time(params["now"])
    system = tiers.system(contract.system, contract.overrides)
    hold = float(tiers.accounting.get("sample_max_hold_intervals", 2))
    default_interval = float(tiers.accounting.get("default_probe_interval_s", 300))
    events, notes, observations = [], [], {"reboots": [], "sources": [], "samples": 0, "monitoring_outages": []}
    horizon = min(end, now)

    for rel in params.get("imports") or []:
        ev = imports_src.load(os.path.join(inputs, rel), params.get("import_timezone"))
        events += ev
        observations["sources"].append({"source": rel, "records": len(ev), "events": len(ev)})
    for rel in params.get("assessment_runs") or []:
        ev = assessment_src.events_from_run(os.path.join(inputs, rel), notes)
        events += ev
        observations["sources"].append({"source": rel, "records": len(ev), "events": len(ev)})
    # Downtime observed during an honoured exclusion stands only until the exclusion ends (Slurm snapshots, probe).
    excluded = excluded_intervals(contract, tiers, events)

    # What the sources other than the health probe observed of each node, down or in service (availability.py,
    # rule 8): Slurm snapshots for as long as each stands, a sacctmgr export its whole span. Provider logs
    # (imports) and the assessment's records list only outages and test windows, never the time they watched:
    # they vouch for no time in service, so they observe nothing here.
    observed: dict[str, list] = {}

    def saw(node, intervals):
        observed[node] = iv.union(observed.get(node, []), intervals)

    snaps_path = os.path.join(inputs, "slurm_snapshots.jsonl")
    slurm_tz = params.get("slurm_timezone") or "UTC"
    ignore = params.get("slurm_ignore_users") or []
    snapshots, exports = [], []
    if os.path.exists(snaps_path):
        with open(snaps_path, encoding="utf-8") as fh:
            snapshots += [json.loads(line) for line in fh if line.strip()]
    for spec in params.get("slurm_files") or []:
        with open(os.path.join(inputs, spec["path"]), encoding="utf-8") as fh:
            text = fh.read()
        if spec["format"] == "sacctmgr":
            observed_at = parse_time(spec["observed_at"])
            rows = slurm_src.parse_sacctmgr_events(text)
            ev = slurm_src.events_from_sacctmgr(rows, slurm_tz, observed_at, ignore,
                                                prefix="sacctmgr:%s" % os.path.basename(spec["path"]), notes=notes)
            events += ev
            observations["sources"].append({"source": spec["path"], "records": text.count("\n"), "events": len(ev)})
            exports.append((spec["path"], observed_at, slurm_src.sacctmgr_nodes(rows)))
        else:
            snapshots.append({"id": os.path.basename(spec["path"]), "observed_at_us": parse_time(spec["observed_at"]),
                              "format": spec["format"], "text": text})
    ok = [s for s in snapshots if s.get("rc") in (None, 0)]
    # The event history from the query's Start= (the sla role asks from a day before the month) to the export
    # vouches only for the nodes Slurm shows it knows (reports/sla/sources/slurm.py): named in the export's node
    # events or listed by a Slurm snapshot. "No event" of a node Slurm has under another name, or does not have, or
    # an export with no event at all (another cluster's, or purged by PurgeEventAfter), is not "in service". Nor
    # does any Slurm source vouch for the time of the probe rounds whose own Slurm snapshot failed (Slurm could not
    # be asked): neither the export, nor the hold of the snapshot before (each round until the next snapshot).
    failed = slurm_src.failed_spans(snapshots, hold, int(hold * default_interval * US))
    known = slurm_src.snapshot_nodes(ok)
    for path, observed_at, named in exports:
        vouched = [n.name for n in contract.nodes if n.name in named or n.name in known]
        for name in vouched:
            saw(name, iv.subtract([(start, observed_at)], failed) if observed_at > start else [])
        unvouched = [n.name for n in contract.nodes if n.name not in vouched]
        if unvouched and not named:
            notes.append("the sacctmgr export %s has no node event at all (another cluster's, or its events purged?) "
                         "and no Slurm snapshot lists %s: it does not vouch for their time"
                         % (path, ", ".join(unvouched)))
        elif unvouched:
            notes.append("the sacctmgr export %s names no event of %s and no Slurm snapshot lists them: it does not "
                         "vouch for their time (Slurm may not know them by these names)"
                         % (path, ", ".join(unvouched)))
        lost = iv.clip(failed, start, min(observed_at, horizon))
        if vouched and lost:
            notes.append("the sacctmgr export %s does not vouch for the %s in which the probe's Slurm snapshots "
                         "failed (Slurm could not be asked)" % (path, unobserved_text(iv.total(lost))))
    if snapshots:
        if len(ok) < len(snapshots):
            notes.append("%d Slurm snapshot(s) failed and were skipped" % (len(snapshots) - len(ok)))
        # each snapshot holds for its own round's interval (stored with it), the default only for one without
        ev = slurm_src.events_from_snapshots(ok, slurm_tz, ignore, max_gap_us=int(hold * default_interval * US),
                                             excluded=excluded, hold_intervals=hold)
        events += ev
        seen = slurm_src.coverage_from_snapshots(ok, slurm_tz, ignore, max_gap_us=int(hold * default_interval * US),
                                                 excluded=excluded, hold_intervals=hold)
        for name, spans in seen.items():
            # a failed snapshot ends the hold of the one before it, as any later sample ends a probe sample's
            saw(name, iv.subtract(spans, failed))
        observations["sources"].append({"source": "slurm snapshots", "records": len(ok), "events": len(ev)})

    # The health probe last: a round in which no node answered is shown with what the scheduler saw then.
    unmonitored, first_sample = None, None
    samples_csv = os.path.join(inputs, "healthprobe_samples.csv")
    if os.path.exists(samples_csv):
        with open(samples_csv, newline="", encoding="utf-8") as fh:
            rows = [_typed(r) for r in csv.DictReader(fh)]
        first_sample = min((r["sampled_at_us"] for r in rows), default=None)
        # sla_gpus 0 (a login or CPU host) expects no GPU: only an unset count means the system's gpus_per_node
        expected = {n.name: (system["gpus_per_node"] if n.gpus is None else n.gpus) for n in contract.nodes}
        ev, monitored, reboots, blind = healthprobe_src.events_from_samples(
            rows, expected, hold, default_interval, excluded=excluded)
        observations["reboots"] = reboots
        observations["samples"] = len(rows)
        observations["monitoring_outages"] = [
            {"at": iso_utc(t), "hosts": len(hosts),
             "scheduler_down": " ".join(h for h in hosts if slurm_src.down_at(events, h, t)) or "none"}
            for t, hosts in blind.items() if start <= t < horizon]
        events = ev + events
        # only a node's own service window can be unmonitored or unobserved (availability.py, rules 1 and 8)
        unmonitored = {n.name: iv.subtract(_own(contract, n, start, horizon), monitored.get(n.name, []))
                       for n in contract.nodes}
        unobserved = {name: iv.subtract(spans, observed.get(name, [])) for name, spans in unmonitored.items()}
        if observations["monitoring_outages"]:
            # how long they blinded the probe (the time their samples would have stood for), and how much of that
            # no other source saw either (judged at its worst case: availability.py, rule 8)
            shadow = {h: iv.clip(x, start, horizon) for h, x in healthprobe_src.blinded(
                rows, hold, default_interval, excluded=excluded).items() if h in unobserved}
            unseen = iv.union(*(iv.intersect(x, unobserved[h]) for h, x in shadow.items()))
            notes.append("%d health-probe round(s) in which no node answered: monitoring outages, not counted as "
                         "downtime (see Monitoring outages); they blinded the probe for %s, and no other source "
                         "saw %s of it (of one node or more: judged at its worst case, see Availability)"
                         % (len(observations["monitoring_outages"]), unobserved_text(iv.total(iv.union(
                             *shadow.values()))), unobserved_text(iv.total(unseen))))
        silent = sorted(n.name for n in contract.nodes if not monitored.get(n.name))
        if silent:
            notes.append("no usable health-probe samples for %s in this month" % ", ".join(silent))
        blind_gpus = sorted({r["host"] for r in rows if r["state"] == "up"}
                            - {r["host"] for r in rows if r.get("gpus_found") is not None})
        if blind_gpus:
            notes.append("no GPU information from %s (no nvidia-smi there): the node rule saw reachability only"
                         % ", ".join(blind_gpus))
        observations["sources"].insert(0, {"source": "healthprobe", "records": len(rows), "events": len(ev)})
    else:
        notes.append("no health-probe store: availability rests on the other sources only")
        unobserved = {n.name: iv.subtract(_own(contract, n, start, horizon), observed.get(n.name, []))
                      for n in contract.nodes}

    ids = [e.id for e in events]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise ValueError("two events share an id: %s" % ", ".join(dupes[:5]))
    history = read_json("history.json", {}) or {}
    result = judge(contract, tiers, events, month, now_us=now, unmonitored=unmonitored, history=history,
                   unobserved=unobserved)
    if first_sample is not None and result.service is not None and first_sample > result.service[0]:
        # The probe started after the service start (a store begun mid-month): the time before its first sample is
        # unobserved wherever no other source saw it. If the cluster (or a node) was not in service before, the
        # contract says so, not the review.
        lead = [(result.service[0], min(first_sample, result.service[1]))]
        blind = [n.name for n in result.nodes if iv.intersect(unobserved.get(n.name, []), lead)]
        if blind:
            notes.append("the health probe's first sample is at %s, after the service start %s: no source observed "
                         "%s for some or all of the time before it (judged at its worst case, see Availability); "
                         "if the cluster was not in service until then, the contract's `accepted_at` sets a later "
                         "service start (a node's `in_service_from` for one node)"
                         % (iso_utc(first_sample), iso_utc(result.service[0]),
                            "any node" if len(blind) == len(result.nodes) else ", ".join(blind)))
    result.notes = notes + result.notes
    return result, observations


def _own(contract, node, start: int, end: int) -> list:
    """[start, end) cut to the node's own service window in the contract (availability.py, rule 1)."""
    since, until = contract.service_window(node)
    return iv.clip([(start, end)], start if since is None else since, end if until is None else until)


def _float(value):
    return None if value is None else float(value)


def write_outputs(result, observations, out: str) -> list[str]:
    """Every output file of the review into `out`; returns their names."""
    tables = table_rows(result)
    written = []

    def write_csv(name, rows, columns):
        with open(os.path.join(out, name), "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)
        written.append(name)

    for name, (rows, columns) in tables.items():
        write_csv(name + ".csv", rows, columns)
    summary = {
        "schema": SCHEMA, "provider": result.contract.provider, "month": result.month, "tier": result.tier_name,
        "system": result.contract.system, "timezone": result.contract.timezone,
        "window": [iso_utc(result.window[0]), iso_utc(result.window[1])],
        "service": [iso_utc(result.service[0]), iso_utc(result.service[1])] if result.service else None,
        "partial": result.partial, "target_pct": float(result.target_pct),
        # a month not over (availability.py, rule 9): availability so far, credits owed at least, verdicts that the
        # rest of the month may change undetermined (null), never met or missed
        "provisional": result.provisional,
        "cluster_availability_pct": result.cluster_availability_pct,
        "cluster_best_case_availability_pct": result.cluster_best_availability_pct,
        # None: no service time, or undetermined (cluster_undetermined says why: availability.py, rules 8 and 9)
        "cluster_met_target": result.cluster_met_target,
        "cluster_undetermined": result.cluster_undetermined,
        "cluster_worst_case_availability_pct": result.cluster_worst_availability_pct,
        "cluster_credit_pct": float(result.cluster_credit_pct),
        "cluster_credit_worst_pct": _float(result.cluster_credit_worst_pct),
        "nodes": {n.name: {"availability_pct": n.availability_pct, "down_s": n.down_us / US,
                           "credit_pct": float(n.credit_pct), "meets_target": n.meets_target,
                           "unmonitored_s": None if n.unmonitored_us is None else n.unmonitored_us / US,
                           "unobserved_s": None if n.unobserved_us is None else n.unobserved_us / US,
                           "worst_case_availability_pct": n.worst_availability_pct,
                           "best_case_availability_pct": n.best_availability_pct,
                           "credit_worst_pct": _float(n.credit_worst_pct), "undetermined": n.undetermined,
                           # the node's own service time (its window in the contract cut to the review's)
                           "service": [iso_utc(n.service[0]), iso_utc(n.service[1])] if n.service else None}
                  for n in result.nodes},
        "breaches": result.breaches, "triggers": result.triggers,
        "undetermined_triggers": result.undetermined_triggers, "acceptance": result.acceptance,
        "notes": result.notes, "observations": observations,
    }
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as fh:
        json.dump(summary, fh, indent=2, sort_keys=True)
    evidence = {"downtime": [{k: v for k, v in row.items() if not k.endswith("_us")} for row in result.downtime],
                "events": {e.id: {**e.as_row(), "evidence": e.evidence} for e in result.events}}
    with open(os.path.join(out, "evidence.json"), "w", encoding="utf-8") as fh:
        json.dump(evidence, fh, indent=2, sort_keys=True, default=str)
    written += ["summary.json", "evidence.json"]
    with open(os.path.join(out, "review.md"), "w", encoding="utf-8") as fh:
        fh.write(render_markdown(result, observations))
    with open(os.path.join(out, "review.html"), "w", encoding="utf-8") as fh:
        fh.write(render_html(result, observations))
    written += ["review.md", "review.html"]
    return written


def write_manifest(out: str, outputs: list[str]) -> dict:
    inputs = []
    for root, _dirs, files in os.walk(os.path.join(out, "inputs")):
        for name in sorted(files):
            inputs.append(os.path.relpath(os.path.join(root, name), out))
    doc = {"schema": "clustermax.assess/sla_manifest/v1", "created_at": iso_utc(now_us()),
           "inputs": [{"path": p, "sha256": sha256(os.path.join(out, p)),
                       "bytes": os.path.getsize(os.path.join(out, p))} for p in sorted(inputs)],
           "outputs": [{"path": p, "sha256": sha256(os.path.join(out, p))} for p in sorted(outputs)]}
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=2)
    with open(os.path.join(out, "SHA256SUMS"), "w", encoding="utf-8") as fh:
        for item in doc["inputs"] + doc["outputs"]:
            fh.write("%s  %s\n" % (item["sha256"], item["path"]))
    return doc


def run(month: str | None, contract: dict, out_root: str, tiers_path: str | None = None, now: int | None = None,
        **sources):
    """Stage, judge and write runs/<provider>/sla/<month>/ atomically. Returns (result, out_dir)."""
    tiers_path = tiers_path or Tiers.load().path
    now = now if now is not None else now_us()
    tz = zone(Contract.from_dict(contract).timezone)
    month = month or previous_month(now, tz)
    os.makedirs(out_root, exist_ok=True)
    final = os.path.join(out_root, month)
    tmp = tempfile.mkdtemp(prefix=".%s.tmp-" % month, dir=out_root)
    try:
        stage(os.path.join(tmp, "inputs"), month, contract, tiers_path, now=now, history_root=out_root, **sources)
        result, observations = compute(os.path.join(tmp, "inputs"))
        outputs = write_outputs(result, observations, tmp)
        write_manifest(tmp, outputs)
        os.chmod(tmp, 0o755)
        old = None
        if os.path.exists(final):
            old = tempfile.mkdtemp(prefix=".%s.old-" % month, dir=out_root)
            os.rename(final, os.path.join(old, "review"))
        os.rename(tmp, final)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result, final


def rerun_from_inputs(inputs: str, out: str):
    """Recompute a review from a staged inputs directory into `out` (which gets a copy of the inputs)."""
    if os.path.abspath(os.path.join(out, "inputs")) != os.path.abspath(inputs):
        shutil.copytree(inputs, os.path.join(out, "inputs"), dirs_exist_ok=True)
    result, observations = compute(os.path.join(out, "inputs"))
    outputs = write_outputs(result, observations, out)
    write_manifest(out, outputs)
    return result


def load_contract(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return yamlio.safe_load(fh) if path.endswith((".yml", ".yaml")) else json.load(fh)
