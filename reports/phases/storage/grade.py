"""Grading of the storage phase (roles/storage): per tier, per host, and per sweep across client counts.

Storage tiers come from the inventory, so their names are only known from the artifacts: every grader here looks
at all variants (one per tier) of its probe and gives one row per tier (subject ``tier=<name> …``).

The fio sweep is driven from one host (the driver, rank 0): its artifact holds the aggregate of every point and
each client host's own numbers (label client=<host>). Per-host checks read a host's numbers from there; cluster
checks (scaling, degradation) are graded on the driver's rows and shown as skip on the other hosts, naming it.

Whether each tier's probe ran is the generic `artifact` kind with `each_variant: tier`.

kinds (registered by reports.grading.kinds.register_phase_kinds):
  storage_tier_metric per host: threshold on a metric of every variant, grouped by a label (default: tier)
  storage_ckpt_integrity per host: checkpoints loaded back equal what was saved, per tier; a DCP world whose loads
                      were never checked is an error naming it
  storage_fio_client  per host: this host's fio numbers as a client at the largest client count it took part in,
                      against a threshold (mode: threshold) or against the other clients' median (mode: peers)
  storage_scaling     cluster: a tier whose aggregate falls as clients grow
  storage_degradation cluster: per-client throughput at the most clients against a single client
  storage_metadata    per host: metadata anomalies (EEXIST then ENOENT, invisible files …) fail; stale entries warn
  storage_window_drift per host: an endurance run's last window against its first (throughput down, latency up)
  storage_fio_endurance cluster: fio endurance runs against the sweep's point of the same workload and clients
  storage_slow_tier   cluster: per workload at one client, the slowest tier named against the others' median
  storage_world       cluster: per shared tier, IOR's or mdtest's world across every node (scope=cluster, on the
                      first host) against a threshold, or why no world ran
"""

import re
import statistics

from reports.grading import expectations
from reports.grading.preconditions import ANY_VARIANT, ungradable
from reports.grading.rows import make_row, status_above, text_of
from reports.grading.select import AGGREGATES, artifacts_of, labels_match, slowest
from reports.shown import same_side, shown


def _docs(run, host, probe):
    """Every tier's artifact of the probe on this host, in tier order."""
    return sorted(artifacts_of(run, host, probe), key=lambda d: d.get("variant") or "")


def _records(run, probe, host=None, metric=None):
    return [r for r in run.records(probe)
            if (host is None or r["host"] == host) and (metric is None or r["metric"] == metric)]


def _tiers_that_ran(check, run, host, probe, rows):
    """(tier, artifact) of every tier where the probe ran on this host; a skipped tier adds its skip row to rows."""
    for doc in _docs(run, host, probe):
        if doc["status"] == "skipped":
            rows.append(make_row(check, host, "skip", reason=doc.get("reason"), subject="tier=%s" % doc.get("variant")))
        else:
            yield doc.get("variant"), doc


def _lines(check):
    """The fixed lines (expect and warn `value`s) of a check, in the units its rows show (check.scale applied)."""
    return [float(e["value"]) for e in (check.get("expect"), check.get("warn")) if e and "value" in e]


def _fmt(value, check):
    """value in the check's units: 4 decimals at most, 6 significant digits; more where that would show it on the
    other side of one of the check's lines, or on it (fio 99.99996 MB/s beside a floor of 100 is "99.99996", not
    "100": reports/shown.py)."""
    scale = float(check.get("scale", 1.0))
    unit = check.get("unit", "")
    exact = value * scale if scale != 1.0 else value
    text = text_of(round(exact, 4))
    lines = _lines(check)
    if not same_side(float(text), exact, lines):
        text = shown(exact, lines, decimals=4)
        text = text.rstrip("0").rstrip(".") if "." in text else text  # 4 decimals at most, as text_of shows them
    return ("%s %s" % (text, unit)).strip()


def _pct(value, lines, sign=False):
    """A percentage (or ratio) with one decimal, or more where one would put it on the other side of one of `lines`
    (the check's warn and fail lines, in the same sense as value), or on it; sign: with its sign, as "%+.1f"."""
    text = shown(value, lines)
    return "+" + text if sign and not text.startswith("-") else text


def _judge(check, value):
    """(status, expected text) of a value in display units (check.scale) against check.expect and check.warn."""
    return expectations.judge(value * float(check.get("scale", 1.0)), check["expect"], check.get("warn"))


def grade_tier_metric(check, run, host):
    """Threshold on `metric` of every variant of `probe` on this host, one row per value of the label `per`
    (default tier; `per: host` gives one row). `labels` selects, `agg` aggregates;
    `at_largest: <label>` keeps, in each row, only the results at that label's largest value (DCP's biggest world:
    a node saving alone is not averaged with the same node saving among all the others); a smaller value whose
    world failed on this host (facts.failures) is an error row beside it, naming the failure: the graded world's
    pass says nothing of it. With `per: <label>`, a value the probe records an outcome for
    (facts <label>.<value> ok | skipped | error, <label>_reason.<value>: _label_outcomes) and no result of is a row
    too: error or skip, with the reason. `needs_direct_io`: a tier whose artifact says the tools ran buffered
    (facts.io_mode) is a skip showing the number, never a pass of the page cache."""
    pre = ungradable(check, run, host, variant=ANY_VARIANT)
    if pre:
        return [pre]
    docs = _docs(run, host, check["probe"])
    recs = [r for r in _records(run, check["probe"], host, check["metric"])
            if labels_match(r["labels"], check.get("labels"))]
    per = check.get("per", "tier")
    grouped = {}
    for r in recs:
        key = r["labels"].get(per, r["variant"]) if per != "host" else ""
        grouped.setdefault("" if key is None else str(key), []).append(r)
    largest = check.get("at_largest")
    at = {}  # key -> the label's value graded (named in the row's subject)
    unrun = {}  # key -> (the largest planned value, why it has no result): an error row, never a smaller world's grade
    failed = []  # (key, value, why, has results): a smaller world that failed: an error row beside the graded one
    if largest:
        for key, rs in list(grouped.items()):
            size = [float(r["labels"].get(largest) or 0) for r in rs]  # labels may come back as text
            # a tier's artifact: its variant, or (a probe run without one) the tier its facts name
            mine = [d for d in docs if per != "tier" or str(d.get("variant") or (d.get("facts") or {}).get("tier"))
                    == key]
            planned = _planned_largest(mine, largest)
            unrun_at = planned if planned is not None and planned > max(size) else None  # its own row, below
            failed += [(key, n, why, n in size) for n, why in _failed_at(mine, largest)
                       if n != unrun_at and n != max(size)]
            if planned is not None and planned > max(size):
                unrun[key] = (planned, _failure_at(mine, largest, planned))
                del grouped[key]
                continue
            grouped[key] = [r for r, n in zip(rs, size) if n == max(size)]
            at[key] = max(size)
    groups = {key: [r["value"] for r in rs] for key, rs in grouped.items()}
    rows = []
    # a value of `per` the probe tried and got no result for (it failed, or was not asked): its own row, as every
    # value has (the multipart upload a gateway refused is an error row, not a check with the single PUT's row only)
    outcomes = _label_outcomes(docs, per) if per not in ("tier", "host") else {}
    for value, (outcome, why) in sorted(outcomes.items()):
        if value not in groups and outcome != "ok":
            rows.append(make_row(check, host, "error" if outcome == "error" else "skip",
                                 "no result" if outcome == "error" else None, reason=why or "%s %s: %s" % (
                                     per, value, outcome), subject="%s=%s" % (per, value)))
    for key in sorted(unrun):
        planned, why = unrun[key]
        rows.append(make_row(check, host, "error", "no result at %s=%g" % (largest, planned), reason=why,
                             subject=" ".join(t for t in ("%s=%s" % (per, key) if key else "",
                                                          "%s=%g" % (largest, planned)) if t)))
    for key, size, why, some in sorted(failed):
        rows.append(make_row(check, host, "error", ("failed at %s=%g" if some else "no result at %s=%g")
                             % (largest, size), reason=why,
                             subject=" ".join(t for t in ("%s=%s" % (per, key) if key else "",
                                                          "%s=%g" % (largest, size)) if t)))
    for doc in docs:
        tier = doc.get("variant")
        if per == "tier" and str(tier) in unrun:
            continue
        if doc["status"] == "skipped" and (per != "tier" or tier not in groups):
            rows.append(make_row(check, host, "skip", reason=doc.get("reason"),
                                 subject="tier=%s" % tier if tier else ""))
        # a failed tier is an error row even where another tier of the host has results
        elif doc["status"] == "error" and (str(tier) not in groups if per == "tier" and tier else
                                           not recs and not rows):
            rows.append(make_row(check, host, "error", "no result", reason=doc.get("reason"),
                                 subject="tier=%s" % tier if tier else ""))
        elif doc["status"] == "ok" and per == "tier" and tier and str(tier) not in groups:
            # the tier ran and has no result this check selects (e.g. an artifact from before it was recorded)
            rows.append(make_row(check, host, "skip", reason=check.get("missing_reason")
                                 or "no %s result on this tier" % check["metric"], subject="tier=%s" % tier))
    if not groups and not rows:
        rows.append(make_row(check, host, "skip", reason=check.get("missing_reason")
                             or "no %s result on this host" % check["metric"]))
    agg = AGGREGATES[check.get("agg", "median")]
    cached = {str(d.get("variant")): _page_cache(check, d) for d in docs if _page_cache(check, d)}
    for key in sorted(groups):
        value = float(agg(groups[key]))
        if per == "tier" and key in cached:
            rows.append(make_row(check, host, "skip", "%s (page cache)" % _fmt(value, check), reason=cached[key],
                                 subject="tier=%s" % key))
            continue
        status, expected = _judge(check, value)
        subject = "%s=%s" % (per, key) if key else ""
        if key in at:
            subject = ("%s %s=%g" % (subject, largest, at[key])).strip()
        outcome, why = outcomes.get(key, (None, None))
        rows.append(make_row(check, host, status, _fmt(value, check), expected,
                             reason=why if outcome == "error" else None, subject=subject))
    return rows


def _page_cache(check, doc):
    """Why a check with `needs_direct_io` cannot judge this artifact's numbers, or None: the tier refused O_DIRECT,
    so the tools ran buffered (io_tools_run.io_mode) and IOR's read on one node reads the rank's own file back and
    elbencho writes without --direct or fsync: the page cache's numbers, shown, never passed."""
    mode = str((doc.get("facts") or {}).get("io_mode") or "")
    if not check.get("needs_direct_io") or not mode.startswith("buffered"):
        return None
    return "not measured: the tier refused O_DIRECT (%s)" % mode[len("buffered: "):].split(";")[0]


# at_largest label -> the artifact fact that lists its planned values ("1,2": probes/storage/checkpoint.py)
PLANNED = {"nodes": "world_sizes"}


def _planned_largest(docs, label):
    """The largest value of `label` these artifacts planned to run, or None where none says (no such fact: an
    artifact from before it was recorded is graded at the largest value it has results for)."""
    sizes = [size for doc in docs for size in _planned_sizes(doc, label)]
    return max(sizes) if sizes else None


def _planned_sizes(doc, label):
    """The values of `label` this artifact planned to run (its fact PLANNED[label]), ascending."""
    value = (doc.get("facts") or {}).get(PLANNED.get(label, ""))
    sizes = set()
    for size in value.split(",") if isinstance(value, str) else value if isinstance(value, list) else ():
        try:
            sizes.add(float(size))
        except (TypeError, ValueError):
            pass
    return sorted(sizes)


def _label_outcomes(docs, label):
    """{value: (outcome, why)} of the values of `label` the artifacts record an outcome for: facts `<label>.<value>`
    (ok | skipped | error) and `<label>_reason.<value>`, the convention of the compute probes' parts
    (reports/grading/kinds.py part_outcome), here for the label a check has one row per value of."""
    out = {}
    for doc in docs:
        facts = doc.get("facts") or {}
        for name, outcome in facts.items():
            if name.startswith(label + ".") and outcome in ("ok", "skipped", "error"):
                value = name[len(label) + 1:]
                out[value] = (outcome, facts.get("%s_reason.%s" % (label, value)))
    return out


def _failed_at(docs, label):
    """[(value of label, why)] of the worlds these artifacts name as failed (facts.failures, probes/common/worlds.py),
    one per value."""
    out = {}
    for doc in docs:
        for failure in (doc.get("facts") or {}).get("failures") or ():
            if isinstance(failure, dict) and failure.get(label) is not None:
                try:
                    out.setdefault(float(failure[label]), failure.get("message") or doc.get("reason"))
                except (TypeError, ValueError):
                    continue
    return sorted(out.items())


def _failure_at(docs, label, size):
    """Why there is no result at label=size: the artifact's failure of that world (facts.failures, probes/common/
    worlds.py), else its reason."""
    for doc in docs:
        for failure in (doc.get("facts") or {}).get("failures") or ():
            if isinstance(failure, dict) and failure.get(label) is not None and float(failure[label]) == size:
                return failure.get("message")
    reason = next((d.get("reason") for d in docs if d.get("reason")), None)
    return reason or "no result at %s=%g" % (label, size)


def _rank_order(rank):
    return (0, rank) if isinstance(rank, int) else (1, 0)


def _nodes_text(n):
    return "%d node%s" % (n, "" if n == 1 else "s")


def _unchecked_worlds(doc, recs):
    """[(nodes, why)] of the DCP worlds of this artifact whose loads were not all checked against what was saved on
    this host: a world that failed (facts.failures) with fewer verdicts (ckpt_load_mismatch, method dcp) than the
    node's ranks (facts procs_per_node; none where that is not known), and, where the worlds never ran to their end
    (facts world_sizes without world_sizes_run: the probe stopped in them), every planned world without a verdict."""
    facts = doc.get("facts") or {}
    ppn = facts.get("procs_per_node")
    counts = {}
    for r in recs:
        if r["labels"].get("method") == "dcp" and r["labels"].get("nodes") is not None:
            n = float(r["labels"]["nodes"])
            counts[n] = counts.get(n, 0) + 1
    out = {}
    for n, why in _failed_at([doc], "nodes"):
        if counts.get(n, 0) < (int(ppn) if isinstance(ppn, int) and ppn > 0 else 1):
            out[n] = why
    if facts.get("world_sizes") and "world_sizes_run" not in facts and doc["status"] == "error":
        for n in _planned_sizes(doc, "nodes"):
            if not counts.get(n) and n not in out:
                out[n] = doc.get("reason") or "the probe stopped before this world ran"
    return sorted(out.items())


def grade_ckpt_integrity(check, run, host):
    """Per tier: every checkpoint loaded back equals what was saved. `metric` (ckpt_load_mismatch: torch.save's
    and each DCP rank's, per world) summed against expect; a DCP load that raised on the checkpoint's data (a shard
    cut short raises EOFError) is the probe's mismatch of each rank whose load it was, and the row names the worlds
    and the load's error (facts dcp_load_errors). A DCP world whose loads were not all checked on this host (a rank
    killed or crashed in the load, a hang, a world the probe never ended: _unchecked_worlds) is no evidence either
    way: without a mismatch elsewhere, the tier's row is an error naming the world and its failure, never a pass on
    the loads that were checked."""
    pre = ungradable(check, run, host, variant=ANY_VARIANT)
    if pre:
        return [pre]
    recs = _records(run, check["probe"], host, check["metric"])
    rows = []
    for tier, doc in _tiers_that_ran(check, run, host, check["probe"], rows):
        name = tier or (doc.get("facts") or {}).get("tier")  # a probe run without a variant: the tier it names
        subject = "tier=%s" % name if name else ""
        mine = [r for r in recs if r["variant"] == tier]
        if not mine:
            if doc["status"] == "error":
                rows.append(make_row(check, host, "error", "no result", reason=doc.get("reason"), subject=subject))
            else:
                rows.append(make_row(check, host, "skip", reason=check.get("missing_reason")
                                     or "no %s result on this tier" % check["metric"], subject=subject))
            continue
        value = float(sum(r["value"] for r in mine))
        status, expected = _judge(check, value)
        unchecked = _unchecked_worlds(doc, mine)
        lost = {}
        for e in (doc.get("facts") or {}).get("dcp_load_errors") or ():
            if isinstance(e, dict) and e.get("on_data"):
                lost.setdefault((float(e.get("nodes") or 0), e.get("error") or "?"), []).append(e.get("rank"))
        why = ["DCP at %s, the load of rank%s %s raised on the checkpoint's data: %s" % (
            _nodes_text(n), "s" if len(ranks) > 1 else "", ", ".join(map(str, sorted(ranks, key=_rank_order))), error)
            for (n, error), ranks in sorted(lost.items())]
        why += ["DCP at %s not verified: %s" % (_nodes_text(n), text) for n, text in unchecked]
        observed = _fmt(value, check)
        if status == "pass" and unchecked:
            status = "error"
            observed = "%s where checked; DCP load not verified at %s" % (
                observed, ", ".join(_nodes_text(n) for n, _ in unchecked))
        rows.append(make_row(check, host, status, observed, expected, reason="; ".join(why) or None,
                             subject=subject))
    return rows


# ------------------------------------------------------------------------------------------------ fio sweep

def _fio_records(run, metric):
    """fio_sweep results of the driver artifacts (the ones with results), any host."""
    return [r for r in _records(run, "fio_sweep", metric=metric)]


def _driver_of(run, tier):
    for doc in run.artifacts:
        if doc["probe"] == "fio_sweep" and doc.get("variant") == tier and (doc.get("facts") or {}).get("role") == \
                "driver":
            return doc
    return None


def _workload_ok(check, workload):
    wanted = check.get("workloads")
    if not wanted:
        return True
    return any(workload == w or (w.endswith("*") and workload.startswith(w[:-1])) for w in wanted)


# fio rates add up over a host's jobs; a latency percentile (group_reporting) covers all of them already
PER_PROCESS_METRICS = ("fio_bw_bytes", "fio_iops")


def _per_process(check, record):
    """A client's value per fio process: rates divided by the host's job count, anything else as fio gave it."""
    if check["metric"] not in PER_PROCESS_METRICS:
        return record["value"]
    return record["value"] / max(1, int(record["labels"].get("jobs") or 1))


# a failure message of the probe's _record that names the point (older artifacts, before facts.dropped_points)
_POINT_FAILURE = re.compile(r"^c(?P<clients>\d+) (?P<workload>\S+): ")
_CLIENTS_FAILED = re.compile(r": (?:fio reported an error on|no result from|no bandwidth from fio on) (?P<hosts>.+?)"
                             r"(?:: .*)? \(no aggregate recorded\)$")


def _dropped_points(doc):
    """{(workload, clients): (clients whose own fio failed there, why)} of the sweep points the driver recorded no
    aggregate for (probes/storage/fio_sweep.py: facts.dropped_points)."""
    facts = (doc or {}).get("facts") or {}
    out = {}
    if "dropped_points" in facts:
        for d in facts["dropped_points"] or ():
            out[(d.get("workload"), int(d.get("clients") or 0))] = (set(d.get("failed_clients") or ()),
                                                                   d.get("reason") or "")
        return out
    # an artifact from before facts.dropped_points: the same read from its failure messages (facts.failures, or the
    # first three in its reason); "no result from fio" names no client and every client's rows are missing anyway
    texts = facts.get("failures") or ((doc or {}).get("reason") or "").split("; ")
    for text in texts:
        m = _POINT_FAILURE.match(text or "")
        if not m:
            continue
        failed, why = out.get((m.group("workload"), int(m.group("clients"))), (set(), ""))
        hit = _CLIENTS_FAILED.search(text)
        if hit:
            failed = failed | {h.strip() for h in hit.group("hosts").split(",")}
        out[(m.group("workload"), int(m.group("clients")))] = (failed, "; ".join(t for t in (why, text) if t))
    return out


def _valid_points(run, driver):
    """{(tier, workload): {clients}} of the sweep points this driver recorded an aggregate for: the points every
    client answered without an error, within one common window (probes/storage/fio_sweep.py _record)."""
    out = {}
    for r in _records(run, "fio_sweep", driver):
        labels = r["labels"]
        if labels.get("scope") == "aggregate" and "window" not in labels and labels.get("clients") is not None:
            out.setdefault((r["variant"], labels.get("workload")), set()).add(int(labels["clients"]))
    return out


def grade_fio_client(check, run, host):
    """This host's fio numbers as a client, per tier and workload, at the largest client count it was part of,
    per fio process (a host running several jobs has its rates divided by its job count; its p99 latency is
    already over all of its jobs' I/O).

    Only points whose aggregate the driver recorded are graded: a client's rows at a dropped point (a client's fio
    failed or gave nothing, the clients' windows apart) were not measured under the point's full load. Where the
    largest point the host took part in was dropped for its own client's failure, its row is an error naming the
    point; dropped for another reason, the largest valid point is graded and the row says so."""
    pre = ungradable(check, run, host, probe="fio_sweep", variant=ANY_VARIANT)
    if pre:
        return [pre]
    recs = [r for r in _fio_records(run, check["metric"])
            if r["labels"].get("scope") == "client" and _workload_ok(check, r["labels"].get("workload"))]
    rows = []
    for tier, _doc in _tiers_that_ran(check, run, host, "fio_sweep", rows):
        subject = "tier=%s" % tier
        driver = _driver_of(run, tier)
        dropped = _dropped_points(driver)
        mine = [r for r in recs if r["variant"] == tier and r["labels"].get("client") == host]
        by_workload = {}
        for r in mine:
            by_workload.setdefault(r["labels"]["workload"], {})[int(r["labels"]["clients"])] = r
        for (workload, _clients), (failed, _why) in dropped.items():
            if host in failed and _workload_ok(check, workload):
                by_workload.setdefault(workload, {})
        if not by_workload:
            why = ("the sweep's driver %s recorded no %s for this host" % (driver["host"], check["metric"])
                   if driver else "no driver artifact for tier %s" % tier)
            status = "error" if driver is not None and driver["status"] == "error" else "skip"
            rows.append(make_row(check, host, status, reason=(driver or {}).get("reason") or why, subject=subject))
            continue
        valid = _valid_points(run, driver["host"]) if driver else {}
        for workload in sorted(by_workload):
            mine_at = by_workload[workload]
            ok_counts = valid.get((tier, workload), set())
            took = set(mine_at) | {c for (w, c), (failed, _) in dropped.items() if w == workload and host in failed}
            largest = max(took)
            note = ""
            if largest not in ok_counts:
                failed, why = dropped.get((workload, largest), (set(), ""))
                why = why or "c%d %s: no aggregate recorded" % (largest, workload)
                graded = [c for c in mine_at if c in ok_counts]
                if host in failed or not graded:
                    # its own client failed there, or it has no point measured under full load to fall back to
                    rows.append(make_row(check, host, "error", reason=why if host in failed else
                                         "%s; no valid point of this host to grade instead" % why,
                                         subject="tier=%s workload=%s c=%d" % (tier, workload, largest)))
                    continue
                note = " (c=%d not graded, no aggregate there: %s)" % (largest, why)
                largest = max(graded)
            top = mine_at[largest]
            clients = largest
            value = _per_process(check, top)
            sub = "tier=%s workload=%s c=%d" % (tier, workload, clients)
            if check.get("mode", "threshold") == "threshold":
                status, expected = _judge(check, value)
                rows.append(make_row(check, host, status, _fmt(value, check) + note, expected, subject=sub))
                continue
            peers = [_per_process(check, r) for r in recs
                     if r["variant"] == tier and r["labels"]["workload"] == workload
                     and int(r["labels"]["clients"]) == clients]
            if len(peers) < 3:
                rows.append(make_row(check, host, "skip", _fmt(value, check) + note, subject=sub,
                                     reason="fewer than 3 clients at c=%d to compare with" % clients))
                continue
            median = statistics.median(peers)
            lower_better = check.get("lower_is_better", False)
            off = 100.0 * ((value - median) if lower_better else (median - value)) / median if median else 0.0
            fail_pct = float(check["max_below_median_pct"])
            warn_pct = float(check.get("warn_below_median_pct", fail_pct))
            status = status_above(off, warn_pct, fail_pct)
            rows.append(make_row(check, host, status, "%s (%s%% %s the clients' median)%s" % (
                _fmt(value, check), _pct(max(off, 0.0), (warn_pct, fail_pct)), "above" if lower_better else "below",
                note),
                "within %g%% of the median %s" % (fail_pct, _fmt(median, check)), subject=sub))
    return rows


def _aggregates(run, metric):
    """{(driver host, tier, workload): {clients: value}} of the sweep's aggregate results."""
    out = {}
    for r in _fio_records(run, metric):
        if r["labels"].get("scope") != "aggregate":
            continue
        key = (r["host"], r["variant"], r["labels"]["workload"])
        out.setdefault(key, {})[int(r["labels"]["clients"])] = r["value"]
    return out


def _cluster_rows(check, run, hosts, graded, graded_by="the sweep's driver ", nothing=None):
    """graded: {driver host: [rows]}. Hosts that drove nothing get one skip row naming who did (graded_by: what
    that host is, before its name); with no driver at all, `nothing` (default: the fio sweep's own reason)."""
    rows = []
    drivers = sorted(graded)
    for host in hosts:
        if host in graded:
            rows.extend(graded[host])
        elif host in run.unreachable:
            rows.append(make_row(check, host, "skip", reason="host unreachable"))
        elif drivers:
            rows.append(make_row(check, host, "skip", reason="cluster-wide check, graded on %s%s"
                                 % (graded_by, ", ".join(drivers))))
        elif nothing:
            rows.append(make_row(check, host, "skip", reason=nothing))
        else:
            docs = _docs(run, host, "fio_sweep")
            reason = next((d.get("reason") for d in docs if d.get("reason")), None)
            rows.append(make_row(check, host, "skip", reason=reason or "no fio sweep aggregate in this run"))
    return rows


def grade_scaling(check, run, hosts):
    """Per tier and workload: the aggregate should not fall as clients grow. The drop is measured from the best
    aggregate at fewer clients to each larger client count; the worst drop is graded."""
    fail_pct = float(check.get("max_drop_pct", 20))
    warn_pct = float(check.get("warn_drop_pct", fail_pct / 2))
    graded = {}
    for (driver, tier, workload), series in sorted(_aggregates(run, check.get("metric", "fio_bw_bytes")).items()):
        if not _workload_ok(check, workload):
            continue
        sub = "tier=%s workload=%s" % (tier, workload)
        counts = sorted(series)
        if len(counts) < 2:
            graded.setdefault(driver, []).append(make_row(check, driver, "skip", subject=sub,
                                                          reason="one client count only: nothing to compare"))
            continue
        worst, where = 0.0, None
        for i, c in enumerate(counts[1:], 1):
            best_c = max(counts[:i], key=lambda k: series[k])
            best = series[best_c]
            drop = 100.0 * (best - series[c]) / best if best else 0.0
            if drop > worst:
                worst, where = drop, (best_c, c)
        observed = " → ".join("c%d %s" % (c, _fmt(series[c], check)) for c in counts)
        if where:
            observed += " (%s%% lower at c%d than at c%d)" % (_pct(worst, (warn_pct, fail_pct)), where[1], where[0])
        status = status_above(worst, warn_pct, fail_pct)
        graded.setdefault(driver, []).append(make_row(check, driver, status, observed,
                                                      "aggregate never more than %g%% below a smaller client count"
                                                      % fail_pct, subject=sub))
    return _cluster_rows(check, run, hosts, graded)


def grade_degradation(check, run, hosts):
    """Per tier and workload: throughput per fio process at the most clients against the fewest (c1)."""
    fail_pct = float(check.get("max_degradation_pct", 75))
    warn_pct = float(check.get("warn_degradation_pct", 40))
    graded = {}
    for (driver, tier, workload), series in sorted(_aggregates(run, check.get("metric", "fio_bw_bytes")).items()):
        if not _workload_ok(check, workload):
            continue
        sub = "tier=%s workload=%s" % (tier, workload)
        lo, hi = min(series), max(series)
        if lo == hi:
            graded.setdefault(driver, []).append(make_row(check, driver, "skip", subject=sub,
                                                          reason="one client count only: nothing to compare"))
            continue
        base, loaded = series[lo] / lo, series[hi] / hi
        degradation = 100.0 * (base - loaded) / base if base else 0.0
        status = status_above(degradation, warn_pct, fail_pct)
        graded.setdefault(driver, []).append(make_row(
            check, driver, status, "%s per client at c%d, %s at c%d (%s%% lower)" % (
                _fmt(base, check), lo, _fmt(loaded, check), hi, _pct(max(degradation, 0.0), (warn_pct, fail_pct))),
            "at most %g%% lower per client under load" % fail_pct, subject=sub))
    return _cluster_rows(check, run, hosts, graded)


# ------------------------------------------------------------------------------------------------ endurance

def grade_window_drift(check, run, host):
    """A windowed metric of an endurance run (label `window`): its last window against its first, the change in
    percent in the check's bad direction (`worse: lower` for a rate, `higher` for a latency), judged by
    warn_change_pct and max_change_pct. The first window is the baseline: the same workload, at the run's start."""
    pre = ungradable(check, run, host, variant=ANY_VARIANT)
    if pre:
        return [pre]
    windows = {}
    for r in _records(run, check["probe"], host, check["metric"]):
        if labels_match(r["labels"], check.get("labels")) and "window" in r["labels"]:
            windows.setdefault(int(r["labels"]["window"]), []).append(r["value"])
    docs = _docs(run, host, check["probe"])
    if len(windows) < 2:
        doc = docs[0] if docs else None
        if doc is not None and doc["status"] == "skipped":
            return [make_row(check, host, "skip", reason=doc.get("reason"))]
        if doc is not None and doc["status"] == "error" and not windows:
            return [make_row(check, host, "error", "no result", reason=doc.get("reason"))]
        return [make_row(check, host, "skip", reason=check.get("missing_reason")
                         or "fewer than two windows of %s on this host" % check["metric"])]
    first, last = min(windows), max(windows)
    base, end = statistics.median(windows[first]), statistics.median(windows[last])
    fail_pct, warn_pct = float(check["max_change_pct"]), float(check["warn_change_pct"])
    if base <= 0:
        return [make_row(check, host, "error", "%s in the first window" % _fmt(base, check),
                         reason="the first window has no %s to compare with" % check["metric"])]
    change = 100.0 * (end - base) / base
    worse = -change if check["worse"] == "lower" else change
    # the change is judged in the bad direction: its lines are -warn and -fail where lower is worse
    sense = -1.0 if check["worse"] == "lower" else 1.0
    return [make_row(check, host, status_above(worse, warn_pct, fail_pct),
                     "%s in the first window, %s in the last (%s%%)" % (
                         _fmt(base, check), _fmt(end, check), _pct(change, (sense * warn_pct, sense * fail_pct),
                                                                   sign=True)),
                     "at most %g%% %s in the last window" % (fail_pct, check["worse"]))]


def grade_slow_tier(check, run, hosts):
    """Per workload, at one client (the point every tier has, with no contention): the slowest tier named, against
    the median of the other tiers; warn/fail when it is more than warn_ratio/fail_ratio times slower."""
    warn, fail = float(check["warn_ratio"]), float(check["fail_ratio"])
    points = {}
    for (driver, tier, workload), series in _aggregates(run, check["metric"]).items():
        if _workload_ok(check, workload) and 1 in series:
            points.setdefault((driver, workload), {})[tier] = series[1]
    graded = {}
    for (driver, workload), values in sorted(points.items()):
        sub = "workload=%s clients=1" % workload
        spread = slowest(values, higher_is_better=True)
        if spread is None:
            graded.setdefault(driver, []).append(make_row(check, driver, "skip", subject=sub, reason=(
                "only one tier (%s): nothing to compare" % next(iter(values)))))
            continue
        slow, value, others, ratio = spread
        graded.setdefault(driver, []).append(make_row(
            check, driver, status_above(ratio, warn, fail), "tier %s: %s, the other tiers' median %s (%s× slower)"
            % (slow, _fmt(value, check), _fmt(others, check), _pct(ratio, (warn, fail))),
            "slowest tier ≤ %g× slower than the others (warn above %g×)" % (fail, warn), subject=sub))
    if not graded:
        return [make_row(check, host, "skip", reason="no fio sweep point at 1 client in this run") for host in hosts]
    return _cluster_rows(check, run, hosts, graded)


def grade_fio_endurance(check, run, hosts):
    """Per tier, endurance workload and client count, on the sweep's driver: the endurance windows' aggregate
    (their median, the worst beside it) against the sweep's point of the same workload and client count, the
    initial result; lower by more than warn/max_degradation_pct warns/fails."""
    fail_pct = float(check.get("max_degradation_pct", 40))
    warn_pct = float(check.get("warn_degradation_pct", 15))
    sweep = _aggregates(run, check["metric"])
    windows = {}
    for r in _fio_records(run, check["endurance_metric"]):
        key = (r["host"], r["variant"], r["labels"]["workload"], int(r["labels"]["clients"]))
        windows.setdefault(key, {})[int(r["labels"]["window"])] = r["value"]
    graded = {}
    for (driver, tier, workload, clients), series in sorted(windows.items()):
        sub = "tier=%s workload=%s clients=%d" % (tier, workload, clients)
        base = sweep.get((driver, tier, workload), {}).get(clients)
        if not base:
            graded.setdefault(driver, []).append(make_row(check, driver, "skip", subject=sub, reason=(
                "no sweep point of %s at %d clients to compare with" % (workload, clients))))
            continue
        typical, worst = statistics.median(series.values()), min(series.values())
        degradation = 100.0 * (base - typical) / base
        graded.setdefault(driver, []).append(make_row(
            check, driver, status_above(degradation, warn_pct, fail_pct),
            "%s in the sweep, %s over %d endurance runs (median; worst %s): %s%%" % (
                _fmt(base, check), _fmt(typical, check), len(series), _fmt(worst, check),
                _pct(-degradation, (-warn_pct, -fail_pct), sign=True)),
            "at most %g%% lower than the sweep" % fail_pct, subject=sub))
    # a tier whose endurance was planned (facts.endurance) and recorded no window: every window failed, and the
    # driver's reason says how (a client's fio error, windows apart); not "no endurance run"
    for doc in run.artifacts:
        facts = doc.get("facts") or {}
        if (doc["probe"] == "fio_sweep" and facts.get("role") == "driver" and (facts.get("endurance") or {}).get(
                "workloads") and not any(k[0] == doc["host"] and k[1] == doc.get("variant") for k in windows)):
            graded.setdefault(doc["host"], []).append(make_row(
                check, doc["host"], "error", subject="tier=%s" % doc.get("variant"), reason=(
                    "endurance of %s planned, no window recorded: %s" % (
                        ", ".join(facts["endurance"]["workloads"]), doc.get("reason") or "the artifact says nothing"))))
    if not graded:
        return [make_row(check, host, "skip", reason=check.get("missing_reason")
                         or "no fio endurance run in this run") for host in hosts]
    return _cluster_rows(check, run, hosts, graded)


# ------------------------------------------------------------------------------------------------ metadata

def grade_metadata(check, run, host):
    """Anomalies of the metadata probe per tier: any is a fail (jobs die of them). The first host of a shared tier
    also holds the all-ranks view (scope aggregate), which adds 'not exactly one mkdir winner'."""
    pre = ungradable(check, run, host, probe="metadata", variant=ANY_VARIANT)
    if pre:
        return [pre]
    recs = _records(run, "metadata", host)
    rows = []
    for tier, doc in _tiers_that_ran(check, run, host, "metadata", rows):
        subject = "tier=%s" % tier
        mine = [r for r in recs if r["variant"] == tier]
        scope = "aggregate" if any(r["labels"].get("scope") == "aggregate" for r in mine) else "host"
        mine = [r for r in mine if r["labels"].get("scope") == scope]
        total = [r["value"] for r in mine if r["metric"] == "meta_anomalies_total"]
        if not total:
            rows.append(make_row(check, host, "error", "no result", reason=doc.get("reason") or "no anomaly count",
                                 subject=subject))
            continue
        kinds = {r["labels"]["kind"]: int(r["value"]) for r in mine if r["metric"] == "meta_anomalies" and r["value"]}
        stale = sum(r["value"] for r in mine if r["metric"] == "meta_stale_after_unlink")
        ranks = next((r["labels"].get("ranks") for r in mine), None)
        where = "%s ranks, %s" % (ranks, "all ranks" if scope == "aggregate" else "this host's ranks")
        # the phases that ran to their end at this scope (a rate is recorded for each): a test that stopped before
        # its create, stat and unlink had counted nothing, and its 0 is no pass
        ran = {r["metric"][len("meta_"):-len("_per_s")] for r in mine if r["metric"].endswith("_per_s")}
        if total[0] > 0:
            rows.append(make_row(check, host, "fail", "%d anomalies (%s): %s" % (
                total[0], where, ", ".join("%s %d" % kv for kv in sorted(kinds.items()))), "0 anomalies",
                subject=subject))
        elif doc.get("status") == "error" or not {"create", "stat", "unlink"} <= ran:
            rows.append(make_row(check, host, "error", "0 anomalies in what ran (%s; phases done: %s)" % (
                where, ", ".join(p for p in ("create", "stat", "unlink") if p in ran) or "none"), "0 anomalies",
                reason="the test did not finish: %s" % (doc.get("reason") or "not every phase ran"),
                subject=subject))
        elif stale > 0:
            rows.append(make_row(check, host, "warn", "0 anomalies, %d stale entries after unlink (%s)" % (
                stale, where), "0 anomalies, nothing stale", subject=subject))
        else:
            rows.append(make_row(check, host, "pass", "0 anomalies (%s)" % where, "0 anomalies", subject=subject))
    return rows


def grade_world(check, run, hosts):
    """Per tier: `metric` of the world across every node that io_tools_run's first host started (results labelled
    scope=cluster; `labels` selects, e.g. the operation), against expect/warn, on that host. A tier without such a
    world gets one skip row with the probe's reason (facts across_nodes, <tool>_across); the other hosts get one
    skip row naming the host that graded it."""
    tool = check["tool"]
    by_tier = {}
    for doc in run.artifacts:
        if doc["probe"] == check["probe"]:
            by_tier.setdefault(doc.get("variant"), []).append(doc)
    graded = {}
    for tier, docs in sorted(by_tier.items(), key=lambda kv: kv[0] or ""):
        sub = "tier=%s" % tier
        # the first host: the one that recorded the launcher the nodes agreed on (or, without a meeting, the first)
        first = next((d for d in docs if "launcher" in (d.get("facts") or {})), docs[0])
        facts = first.get("facts") or {}
        values = [r["value"] for r in _records(run, check["probe"], first["host"], check["metric"])
                  if r["variant"] == tier and r["labels"].get("scope") == "cluster"
                  and labels_match(r["labels"], check.get("labels"))]
        if values and _page_cache(check, first):
            graded.setdefault(first["host"], []).append(make_row(
                check, first["host"], "skip", "%s (page cache)" % _fmt(float(AGGREGATES[check.get("agg", "max")](
                    values)), check), reason=_page_cache(check, first), subject=sub))
            continue
        if values:
            value = float(AGGREGATES[check.get("agg", "max")](values))
            status, expected = _judge(check, value)
            # a tool with its own way across the nodes (elbencho's services) says where it ran in its own fact
            nodes = facts.get("%s_across_nodes" % tool) or facts.get("across_nodes", "")
            graded.setdefault(first["host"], []).append(make_row(
                check, first["host"], status, _fmt(value, check), expected, subject=sub,
                reason=nodes[len("run: "):] if nodes.startswith("run: ") else ""))
            continue
        why = facts.get("%s_across" % tool) or facts.get("%s_across_nodes" % tool) or facts.get("across_nodes") or \
            first.get("reason") or \
            "no %s result across nodes" % check["metric"]
        # a world that could not start because the hosts or the store failed is a fault, not a test left out
        status = "error" if str(why).startswith("error") or any(
            fault in str(why) for fault in ("did not meet", "store failed", "did not finish alone",
                                            "service did not listen", "service could not start")) else "skip"
        graded.setdefault(first["host"], []).append(make_row(check, first["host"], status, reason=why, subject=sub))
    return _cluster_rows(check, run, hosts, graded, graded_by="",
                         nothing="cluster-wide check, graded on no host: %s did not run" % check["probe"])


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {
    "storage_tier_metric": grade_tier_metric,
    "storage_ckpt_integrity": grade_ckpt_integrity,
    "storage_fio_client": grade_fio_client,
    "storage_metadata": grade_metadata,
    "storage_window_drift": grade_window_drift,
}
CLUSTER = {"storage_scaling": grade_scaling, "storage_degradation": grade_degradation,
           "storage_fio_endurance": grade_fio_endurance, "storage_slow_tier": grade_slow_tier,
           "storage_world": grade_world}
