"""Grading of the burn-in phase (roles/burnin: probes burnin, fabric_soak, storage_soak).

Every host has the three artifacts (skipped with the reason when a part was switched off or could not run), so
every check gives at least one row per host. GPU checks skip with the reason on nodes without GPU telemetry.

kinds (registered by reports.grading.kinds.register_phase_kinds), all per host:
  burnin_completed   each soak ran its full duration; interrupted (the timeline ends early) or ended otherwise fails,
                     and so does a run that completed after a worker exited (facts.worker_exits: the runner goes on
                     to its deadline without it), naming the workers and their exit codes
  burnin_kernel      every XID, fatal SXID (or one whose severity no line gives), GPU that failed to initialise
                     (RmInitAdapter) or fell off the bus in the kernel log during the burn-in fails with its line and
                     time (t+ s from the start); a non-fatal SXID warns; uncorrected AER fails, corrected AER warns; a
                     line that names an Xid / SXid but could not be read is an error row with the line; none: pass.
                     /dev/kmsg not readable from the start: skip with the reason; a read that failed mid-run
                     (facts.kmsg_error): an error row saying up to when the log was read, beside what was found
  burnin_gemm        per GEMM worker: FLOP/s degradation (first tenth against last tenth), `warn_pct` / `fail_pct`;
                     `field: errors`: wrong GEMM results fail; `field: sustained`: the mean TFLOP/s of the run against
                     `fail_fraction` / `warn_fraction` x the GPU model's gpus.yml field that `expect_of` names for the
                     GEMM's dtype (the model is the one the burn-in found on the node). A worker that could not
                     start or died (its error record), or whose samples end more than an interval (+5 s) before the
                     load stopped, fails all three for its GPU, with the error or where its samples end
  burnin_gpu         per GPU, `field`: throttle (slowdown episodes), clock_drop (SM clock, first against last
                     tenth of the load's time), temperature (max against `max_c`), power (max against the enforced
                     power limit). Judged only where the GPU's telemetry (the nvidia-smi stream, per monitor window)
                     covers at least `min_telemetry_share` of the monitor's time (or all of it but one monitor
                     window's length: a short run's last window, cut at the stop, may carry no sample), and for
                     clock_drop of each tenth (the clocks compared are the summary's): else an error row naming the
                     coverage (a fault it saw still fails); a node whose stream never
                     printed a GPU row is an error, not a node without GPUs
  burnin_ecc         per soak and GPU: the ECC counters and row-remapping state read before the load and after it;
                     a new uncorrectable error or uncorrectable remapped row fails, at least `correctable_warn` new
                     correctable errors (or rows remapped for them) warn; a row remap pending or failed in the reading
                     after the load fails by itself (whatever the reading before said, or when it failed). Without a
                     reading before the load (it failed: facts.gpu_errors_start) the counters cannot be compared: an
                     error row naming why, with the counts the reading after the load holds
  burnin_links       per soak: every NIC and RDMA port whose link went down during the run (carrier changes of a
                     physical NIC, link_downed of a port) fails, one that counted errors warns (error counters at
                     least `warn_errors`, a port counter stuck at its maximum: it cannot count); none: one pass row
  burnin_coll        per soak and collective: errors, hangs (each failed collective once, not once per rank that
                     reported it) and wrong results fail; bus bandwidth min/avg/max shown,
                     a minimum below `min_share` of the average warns; `field: degradation`: bus bandwidth of the last
                     tenth against the first, `warn_pct` / `fail_pct`
  burnin_dips        per soak and GEMM worker or collective: the lowest sampling interval of its timeline (the raw
                     .jsonl beside the artifact) against the median of the run; below `warn_share` warns, below
                     `fail_share` fails
  burnin_storage     per phase and client count: bandwidth degradation (first tenth against last tenth) and errors
"""

import json
import os
import statistics

from probes.burnin.sampler import read_jsonl
from probes.burnin.summary import exit_text
from reports.grading import expectations
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, status_above
from reports.grading.select import find_artifact, load_models, plain_metrics
from reports.shown import shown


def read_stream(run, doc, stream):
    """The samples of one timeline file of an artifact ([] when it is not there)."""
    name = "%s.%s.jsonl" % (doc["probe"], stream)
    if name not in (doc.get("raw") or []):
        return []
    return read_jsonl(os.path.join(run.run_dir, "artifacts", doc["host"], name))


def _precondition(check, run, host, probe):
    """(row, None) when there is nothing to grade for this probe on this host, else (None, artifact). A host that
    became unreachable is still graded on what it recorded; an errored soak is an error row."""
    row = ungradable(check, run, host, probe=probe, variant=None, subject=probe, error_is_final=True,
                     grade_unreachable=True)
    return (row, None) if row else (None, find_artifact(run, host, probe))


def _by_labels(doc, prefix, keys):
    """{label tuple: {metric: value}} for the results whose metric starts with prefix."""
    out = {}
    for r in doc.get("results") or []:
        if r["metric"].startswith(prefix) and r.get("labels"):
            key = tuple(r["labels"].get(k) for k in keys)
            out.setdefault(key, {})[r["metric"]] = float(r["value"])
    return out


def _interrupted(doc):
    return (doc.get("facts") or {}).get("state") != "done"


def _soaks_that_ran(check, run, host, rows):
    """(probe, artifact) of each soak the check names (`probes`, or `probe`) that can be graded on this host; the
    others add their skip or error row to rows."""
    for probe in check.get("probes") or [check.get("probe", "burnin")]:
        row, doc = _precondition(check, run, host, probe)
        if row:
            rows.append(row)
        else:
            yield probe, doc


def grade_completed(check, run, host):
    rows = []
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        m, facts = plain_metrics(doc), doc.get("facts") or {}
        elapsed, planned = m.get("elapsed_s", 0.0), m.get("planned_s", 0.0)
        expected = "ran the planned %.0f s to the end" % planned if probe != "storage_soak" else "every phase ran"
        if facts.get("state") != "done":
            rows.append(make_row(check, host, "fail", "interrupted: timeline ends at %.0f s of %.0f s" % (
                elapsed, planned), expected, "the run was interrupted (the play stopped polling); the report shows "
                "the partial timeline up to the last poll", subject=probe))
        elif m.get("completed") != 1:
            rows.append(make_row(check, host, "fail", "ended after %.0f s: %s" % (elapsed, facts.get("ended_by")),
                                 expected, worker_exits_text(facts) or None, subject=probe))
        elif facts.get("worker_exits"):
            # the runner goes on to its deadline when a worker dies: the run completed, that worker's load did not
            rows.append(make_row(check, host, "fail", "%.0f s, but worker(s) exited before the end: %s" % (
                elapsed, worker_exits_text(facts)), expected, "a worker that exits early left its GPU (or its ranks) "
                "without load for the rest of the run; its error is in the worker log and the GEMM and collective "
                "rows", subject=probe))
        elif under_load(m, facts) is not None and under_load(m, facts) < planned - max(1.0, 0.01 * planned):
            # the runner's deadline is the load's start plus the duration, but never past its start plus the duration
            # and the rendezvous timeout: a world that formed later than that ends "completed" short of it
            rows.append(make_row(check, host, "fail", "%.0f s under load of %.0f s run" % (
                under_load(m, facts), elapsed), expected, "the load began %s s after the start (the collective "
                "world formed late) and the run ended at its latest deadline: the planned duration was not run "
                "under load" % facts["load_from_s"], subject=probe))
        else:
            rows.append(make_row(check, host, "pass", "%.0f s" % elapsed, expected, subject=probe))
    return rows


def under_load(metrics, facts):
    """Seconds the run spent under the whole load (elapsed_s less load_from_s, when the collective world formed and
    the planned duration began to count); None where the artifact does not record when the load began."""
    try:
        return metrics.get("elapsed_s", 0.0) - float(facts["load_from_s"])
    except (KeyError, TypeError, ValueError):
        return None


def worker_exits_text(facts):
    """The workers that exited with an error (facts.worker_exits, the runner's exit codes) in words, with the last
    line the workers printed (facts.worker_log_tail: the log itself is gone with the node's working directory):
    "gemm-1 exit 1, gemm-3 killed by signal 9 (the workers' log ends: RuntimeError: CUDA error: ...)"; "" when
    none."""
    try:
        exits = json.loads(facts.get("worker_exits") or "{}")
    except ValueError:
        return str(facts.get("worker_exits"))
    text = ", ".join("%s %s" % (name, exit_text(code) or code) for name, code in sorted(exits.items()))
    last = log_end(facts)
    return "%s (the workers' log ends: %s)" % (text, last) if text and last else text


def _log_pointer(doc):
    """Where to read why a load wrote nothing: the last line of its workers' log, kept in the artifact."""
    last = log_end(doc.get("facts") or {})
    return "the workers' log ends: %s" % last if last else "see the workers' log"


def log_end(facts):
    """The last non-empty line of the workers' log the artifact kept (facts.worker_log_tail), at most 300
    characters; "" without one."""
    lines = [line.strip() for line in (facts.get("worker_log_tail") or "").splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def kernel_events(doc):
    """[(t epoch, labels)] of the artifact's classified kernel-log lines, in time order."""
    ev = [(float(r["value"]), r["labels"]) for r in doc.get("results") or [] if r["metric"] == "kernel_event"]
    return sorted(ev, key=lambda e: e[0])


KIND_NAMES = {"gpu_init_failed": "GPU init failed", "fallen_off_bus": "GPU fell off the bus"}


def event_text(labels):
    kind = KIND_NAMES.get(labels.get("kind"), labels.get("kind", "?").upper())
    code = " %s" % labels["code"] if labels.get("code") is not None else ""
    sev = labels.get("severity") or ({True: "fatal", False: "non-fatal"}.get(labels.get("fatal"))
                                     if labels.get("kind") == "sxid" else None)
    sev = " (%s)" % sev if sev else ""
    return "%s%s%s at t+%.1f s: %s" % (kind, code, sev, labels.get("at_s") or 0.0, labels.get("line", ""))


def kernel_status(labels):
    """The status of one kernel-log record of the burn-in, None for lines that are not faults."""
    kind = labels.get("kind")
    if kind == "sxid":
        return "warn" if labels.get("fatal") is False else "fail"
    if kind in ("xid", "gpu_init_failed", "fallen_off_bus"):
        return "fail"
    if kind == "aer":
        return "warn" if labels.get("severity") == "corrected" else "fail"
    if kind == "unparsed":
        return "error"
    return None


def grade_kernel(check, run, host):
    rows = []
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        facts = doc.get("facts") or {}
        kmsg = facts.get("kmsg", "")
        if kmsg.startswith("cannot"):
            rows.append(make_row(check, host, "skip", reason="kernel log not readable: %s" % kmsg, subject=probe))
            continue
        expected = ("no XID, SXID, GPU init failure or GPU off the bus (and no uncorrected AER) during the run; "
                    "a non-fatal SXID warns")
        partial = kmsg_partial(facts)
        found = []
        for _t, labels in kernel_events(doc):
            status = kernel_status(labels)
            if status is None:
                continue
            kind = labels.get("kind")
            if status == "error":
                found.append(make_row(check, host, "error", expected=expected, subject="%s kernel log" % probe,
                                      reason="/dev/kmsg: a line names an Xid or SXid but could not be read: %s"
                                      % labels.get("line", "")))
                continue
            subject = "%s %s%s" % (probe, KIND_NAMES.get(kind, kind.upper()),
                                   " %s" % labels["code"] if labels.get("code") is not None else "")
            found.append(make_row(check, host, status, event_text(labels), expected, subject=subject))
        rows.extend(found)
        elapsed = plain_metrics(doc).get("elapsed_s", 0.0)
        if partial:
            # the log was read only up to the failure: no pass for the time after it (a fault found before it
            # keeps its own row)
            rows.append(make_row(check, host, "error", "%s up to t+%.0f s" % (
                "%d finding(s)" % len(found) if found else "none found", partial[0]), expected,
                "the kernel log was read only up to t+%.0f s: %s (at t+%.0f s); a fault after that, up to the end "
                "at t+%.0f s, is not seen" % (partial[0], partial[1], partial[2], elapsed), subject=probe))
        elif not found:
            rows.append(make_row(check, host, "pass", "none in %.0f s" % elapsed, expected, subject=probe))
    return rows


def kmsg_partial(facts):
    """(read up to t+ s, error, failed at t+ s) of a run whose /dev/kmsg read failed mid-run (facts.kmsg_error, from
    the monitor's kmsg_error record); None when it was read to the end."""
    if not facts.get("kmsg_error"):
        return None
    try:
        at = float(facts.get("kmsg_error_at_s"))
    except (TypeError, ValueError):
        at = 0.0
    try:
        until = float(facts.get("kmsg_read_until_s"))
    except (TypeError, ValueError):
        until = at
    return until, facts["kmsg_error"], at


def degradation_lines(check, warn_pct, fail_pct):
    """(warn, fail) percent of a soak's degradation check: the check's `warn_pct` and `fail_pct`, else the
    defaults."""
    return float(check.get("warn_pct", warn_pct)), float(check.get("fail_pct", fail_pct))


def _degradation(check, degradation_pct, warn_pct, fail_pct):
    """(status, expected) of a soak's degradation (first tenth against last tenth); the check's `warn_pct` and
    `fail_pct` override the defaults."""
    warn, fail = degradation_lines(check, warn_pct, fail_pct)
    return status_above(degradation_pct, warn, fail), "last tenth at most %g%% below the first (%g%% fails)" % (
        warn, fail)


def _degradation_shown(check, degradation_pct, warn_pct, fail_pct):
    """The degradation as its row shows it: "10.04%" past a 10 % line, never "10.0%" (reports/shown.py)."""
    return "%s%%" % shown(degradation_pct, degradation_lines(check, warn_pct, fail_pct))


def _gemm_stopped(doc, m, error):
    """How a GEMM worker's load ended before the run's (None when it ran to the end): the error it wrote (it could
    not start, or its GEMMs raised mid-run), or a timeline that ends more than an interval (and 5 s of slack) before
    the load stopped (it died without a word, or hung). Times are t+ s from the start of the run."""
    facts = doc.get("facts") or {}
    t_start = float(facts.get("t_start") or 0.0)
    n = int(m.get("gemm_samples", 0))
    if error is not None:
        t, text = error
        return "GEMM worker failed at t+%.0f s (%s): %s" % (
            t - t_start, "after %d sample(s)" % n if n else "before its first sample", text)
    last, end = m.get("gemm_last_sample_s"), plain_metrics(doc).get("load_end_s")
    if last is None or end is None:
        return None  # an artifact from before these numbers: nothing to compare
    if end - last > float(facts.get("interval_s") or 0.0) + 5.0:
        return "GEMM samples end at t+%.0f s, %.0f s before the load stopped (t+%.0f s): the worker stopped early" % (
            last, end - last, end)
    return None


def grade_gemm(check, run, host):
    row, doc = _precondition(check, run, host, "burnin")
    if row:
        return [row]
    workers = _by_labels(doc, "gemm_", ("worker", "gpu", "device"))
    # a worker that could not start or died (gemm_worker_error, labelled like its samples): its GPU's rows fail
    errors = {}
    for r in doc.get("results") or []:
        if r["metric"] == "gemm_worker_error":
            lab = r["labels"]
            key = (lab.get("worker"), lab.get("gpu"), lab.get("device"))
            errors.setdefault(key, (float(r["value"]), lab.get("error") or "no error text"))
            workers.setdefault(key, {})
    if not workers:
        if _interrupted(doc):
            return [make_row(check, host, "skip", reason="interrupted before the first GEMM sample")]
        return [make_row(check, host, "error", reason="no GEMM samples in the burn-in (%s)" % _log_pointer(doc))]
    dtypes = {(r["labels"].get("worker"), r["labels"].get("gpu"), r["labels"].get("device")): r["labels"].get("dtype")
              for r in doc.get("results") or [] if r["metric"] == "gemm_tflops_mean"}
    rows = []
    for key, m in sorted(workers.items(), key=lambda kv: str(kv[0])):
        worker, gpu, dev = key
        subject = "gpu %s" % gpu if gpu is not None else "worker %s (%s)" % (worker, dev)
        stopped = _gemm_stopped(doc, m, errors.get(key))
        if check.get("field") == "sustained":
            if stopped:
                mean = m.get("gemm_tflops_mean")
                rows.append(make_row(check, host, "fail", stopped + ("; %.1f TFLOP/s mean while it ran" % mean
                                                                     if mean is not None else ""),
                                     "the GEMM load held for the whole run", subject=subject))
            else:
                rows.append(_sustained(check, run, host, doc, subject, m, dtypes.get(key)))
            continue
        if check.get("field") == "errors":
            n = m.get("gemm_errors", 0)
            observed = "%d wrong result(s) in %d samples" % (n, m.get("gemm_samples", 0))
            rows.append(make_row(check, host, "fail" if n or stopped else "pass",
                                 "%s; %s" % (stopped, observed) if stopped else observed,
                                 "the same product every time", subject=subject))
            continue
        deg = m.get("gemm_degradation_pct")
        if stopped:
            rows.append(make_row(check, host, "fail", stopped, "the GEMM load held for the whole run",
                                 subject=subject))
            continue
        if deg is None:
            rows.append(make_row(check, host, "skip", reason="no FLOP/s samples under the load", subject=subject))
            continue
        status, expected = _degradation(check, deg, 5, 10)
        observed = "%s (first tenth %.3f, last tenth %.3f TFLOP/s)" % (
            _degradation_shown(check, deg, 5, 10), m.get("gemm_tflops_first", 0), m.get("gemm_tflops_last", 0))
        rows.append(make_row(check, host, status, observed, expected, subject=subject))
    return rows


def _sustained(check, run, host, doc, subject, m, dtype):
    """One GEMM worker's mean TFLOP/s over the whole run against the expectation of its GPU model and dtype."""
    value = m.get("gemm_tflops_mean")
    if value is None:
        return make_row(check, host, "skip", reason="no FLOP/s samples (see the worker log)", subject=subject)
    of = (check.get("expect_of") or {}).get(dtype)
    if of is None:
        return make_row(check, host, "skip", reason="no expectation for %s GEMMs (the check's expect_of: %s)" % (
            dtype, ", ".join(sorted(check.get("expect_of") or {}))), subject=subject)
    models = load_models(run)
    model = (doc.get("device") or {}).get("model")
    spec = models.get(expectations.gpu_model_key(model, models) or "")
    fail, text, why = expectations.resolve({"fraction": check.get("fail_fraction", 0.6), "of": of}, spec, value)
    if fail is None:
        return make_row(check, host, "skip", value, reason="%s (GPU %s)" % (why, model), subject=subject)
    warn, warn_text, _ = expectations.resolve({"fraction": check.get("warn_fraction", 0.8), "of": of}, spec, value)
    status = "fail" if value < fail else "warn" if value < warn else "pass"
    return make_row(check, host, status, "%s TFLOP/s mean over the run (%s)" % (shown(value, (fail, warn)), dtype),
                    "%s (warn below %s)" % (text, warn_text), subject=subject)


GPU_FIELDS = {"throttle": "gpu_throttle_episodes", "clock_drop": "gpu_sm_clock_drop_pct",
              "temperature": "gpu_temp_max_c", "power": "gpu_power_max_w"}


def _gpu_windows(run, doc):
    """[(start, end, {gpu: its window sample})] of the monitor's windows (epoch seconds, in time order), from the
    monitor timeline beside the artifact; None when it is not there, or when no window holds the nvidia-smi stream's
    `gpus` (the monitor streamed no GPU telemetry: a CPU or an AMD node). A window where the stream printed nothing
    (it died or stalled) has no GPU."""
    mons = [s for s in read_stream(run, doc, "monitor") if s.get("type") == "monitor" and s.get("t") is not None]
    if not any("gpus" in s for s in mons):
        return None
    interval = float((doc.get("facts") or {}).get("interval_s") or 0.0)
    out = []
    for s in sorted(mons, key=lambda s: float(s["t"])):
        t = float(s["t"])
        out.append((t - float(s.get("dt") or interval), t, {g["gpu"]: g for g in s.get("gpus") or []}))
    return out


def _seconds(windows, lo=None, hi=None):
    """Seconds of the windows inside [lo, hi] (all of each when no bound)."""
    return sum(max(0.0, min(b, hi if hi is not None else b) - max(a, lo if lo is not None else a))
               for a, b, _ in windows)


def _spans(windows, t_start):
    """The stretches the windows cover, in words ("first 60 s", "t+0-1800 s, t+2100-3600 s")."""
    spans = []
    for a, b, _ in windows:
        if spans and a <= spans[-1][1] + 1e-6:
            spans[-1][1] = b
        else:
            spans.append([a, b])
    if not spans:
        return None
    if len(spans) == 1 and abs(spans[0][0] - t_start) < 1.0:
        return "first %.0f s" % (spans[0][1] - spans[0][0])
    text = ", ".join("t+%.0f-%.0f s" % (a - t_start, b - t_start) for a, b in spans[:3])
    return text + (", ..." if len(spans) > 3 else "")


def _coverage(windows, gpu, t_start, need, lo=None, hi=None, where=""):
    """(whether this GPU's telemetry covers enough of the monitor's seconds in [lo, hi] to judge it, that in words).
    Enough: at least `need` of them, or all but one monitor window's length (a tenth of a short run is a window or
    two, and its last window, cut short at the stop, may carry no sample)."""
    inside = [w for w in windows if (lo is None or w[1] > lo) and (hi is None or w[0] < hi)]
    covered = [w for w in inside if gpu in w[2]]
    total, seen = _seconds(inside, lo, hi), _seconds(covered, lo, hi)
    window = sorted(w[1] - w[0] for w in windows)[len(windows) // 2] if windows else 0.0
    enough = (seen >= need * total or total - seen <= window) if total > 0 else bool(covered)
    text = "GPU telemetry in %d of %d monitor windows%s" % (len(covered), len(inside), where)
    if not where:
        span = _spans(covered, inside[0][0]) if inside else None
        length = inside[-1][1] - inside[0][0] if inside else 0.0
        text += " (%s of %.0f s)" % (span or "none", length)
    return enough, text


def _clock_tenths_unwatched(windows, gpu, doc, need):
    """Why the first or the last tenth of the load's time (the windows after it began, as the summary takes them) is
    not watched enough to compare this GPU's clocks, or None. The clocks compared are the summary's."""
    facts = doc.get("facts") or {}
    t_start = float(facts.get("t_start") or 0.0)
    t_load = t_start + float(facts["load_from_s"]) if facts.get("load_from_s") else None
    load = [w for w in windows if t_load is None or w[1] > t_load]
    if not load:
        return "no monitor window under the load"
    lo, hi = max(load[0][0], t_load if t_load is not None else load[0][0]), load[-1][1]
    tenth = max((hi - lo) / 10.0, 1e-6)
    for name, a, b in (("first", lo, lo + tenth), ("last", hi - tenth, hi)):
        enough, text = _coverage(load, gpu, t_start, need, a, b, " of the %s tenth of the load (t+%.0f-%.0f s)" % (
            name, a - t_start, b - t_start))
        if not enough:
            return "%s: under the %g%% needed to judge it" % (text, 100 * need)
    return None


def _gpu_judgement(check, field, value, m, unwatched=None):
    """(status, observed, expected, reason) of one GPU for one field, on what its telemetry saw."""
    if field == "throttle":
        secs = m.get("gpu_throttle_s", 0.0)
        status = "fail" if value >= int(check.get("fail_episodes", 1)) else "pass"
        cap = m.get("gpu_power_cap_share")  # of the load's windows: none when no window came after it began
        return status, "%d episode(s), %.0f s slowed (thermal / HW slowdown / power brake)%s" % (
            value, secs, "; power cap %.0f%% of the time" % (100 * cap) if cap is not None else ""), \
            "no thermal or hardware slowdown", None
    if field == "clock_drop":
        warn, fail = float(check.get("warn_pct", 5)), float(check.get("fail_pct", 10))
        expected = "SM clock at most %g%% below its start (%g%% fails)" % (warn, fail)
        first, last = m.get("gpu_sm_clock_first_mhz", 0), m.get("gpu_sm_clock_last_mhz", 0)
        if unwatched:  # the first or the last tenth of the load's time, too little of it watched
            return "error", None, expected, unwatched
        # one decimal, or more where one would show the drop on the other side of a line, or on it (reports/shown.py)
        return status_above(value, warn, fail), "%s%% (%.0f -> %.0f MHz)" % (shown(value, (warn, fail)), first, last), \
            expected, None
    if field == "temperature":
        max_c, warn_c = float(check.get("max_c", 85)), float(check.get("warn_c", 80))
        return status_above(value, warn_c, max_c), "%.0f C" % value, "at most %g C (over %g C warns)" % (
            max_c, warn_c), None
    limit = m.get("gpu_power_limit_w")
    if not limit:
        return "skip", "%.0f W" % value, None, "no power limit reported"
    over = float(check.get("over_share", 0.05))
    line = limit * (1 + over)
    return "fail" if value > line else "pass", "%s W max" % shown(value, (line,), decimals=0), \
        "at most the enforced limit %.0f W (+%g%%)" % (limit, 100 * over), None


def grade_gpu(check, run, host):
    row, doc = _precondition(check, run, host, "burnin")
    if row:
        return [row]
    gpus = _by_labels(doc, "gpu_", ("gpu",))
    windows = _gpu_windows(run, doc)
    need = float(check.get("min_telemetry_share", 0.9))
    t_start = float((doc.get("facts") or {}).get("t_start") or 0.0)
    if not gpus:
        if windows:  # the monitor streamed nvidia-smi, and it never printed a GPU's row
            return [make_row(check, host, "error", reason="%s: nvidia-smi's stream gave no GPU row" % _coverage(
                windows, None, t_start, need)[1])]
        return [_no_gpu_row(check, host, doc)]
    field = check["field"]
    n_windows = plain_metrics(doc).get("monitor_samples")
    rows = []
    for (gpu,), m in sorted(gpus.items(), key=lambda kv: kv[0]):
        subject = "gpu %s" % gpu
        value = m.get(GPU_FIELDS[field])
        if value is None:
            rows.append(make_row(check, host, "skip", reason="nvidia-smi gave no %s" % field, subject=subject))
            continue
        if windows:
            enough, covered = _coverage(windows, gpu, t_start, need)
        elif n_windows:  # no timeline beside the artifact: its counts
            enough = m.get("gpu_samples", 0) >= need * n_windows or m.get("gpu_samples", 0) >= n_windows - 1
            covered = "GPU telemetry in %d of %d monitor windows" % (m.get("gpu_samples", 0), n_windows)
        else:
            enough, covered = True, None
        unwatched = _clock_tenths_unwatched(windows, gpu, doc, need) if field == "clock_drop" and windows else None
        status, observed, expected, reason = _gpu_judgement(check, field, value, m, unwatched)
        if not enough and status in ("pass", "warn", "error"):
            # too little of the run watched to say it passed (or only warned): a fault it saw still fails
            status, reason = "error", "%s: under the %g%% of the run needed to judge it" % (covered, 100 * need)
        elif not enough and status == "fail":
            reason = "judged on what was watched: %s" % covered
        rows.append(make_row(check, host, status, observed, expected, reason, subject=subject))
    return rows


def _coll_degradation(check, run, host):
    rows = []
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        colls = {k: c for k, c in _by_labels(doc, "coll_", ("collective",)).items() if k[0] is not None}
        if not colls:
            rows.append(make_row(check, host, "skip", reason="no collective samples (burnin.collectives says why)",
                                 subject=probe))
        for (coll,), c in sorted(colls.items(), key=lambda kv: str(kv[0])):
            deg = c.get("coll_busbw_degradation_pct")
            if deg is None:
                rows.append(make_row(check, host, "skip", reason="no bandwidth samples",
                                     subject="%s %s" % (probe, coll)))
                continue
            status, expected = _degradation(check, deg, 10, 20)
            first, last = c.get("coll_busbw_first_gbps"), c.get("coll_busbw_last_gbps")
            observed = _degradation_shown(check, deg, 10, 20) + (
                " (first tenth %.3f, last tenth %.3f GB/s)" % (first, last) if first is not None else "")
            rows.append(make_row(check, host, status, observed, expected, subject="%s %s" % (probe, coll)))
    return rows


def grade_coll(check, run, host):
    if check.get("field") == "degradation":
        return _coll_degradation(check, run, host)
    rows = []
    share = float(check.get("min_share", 0.5))
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        m = plain_metrics(doc)
        failures = [r for r in doc.get("results") or [] if r["metric"] == "coll_failure"]
        colls = _by_labels(doc, "coll_", ("collective",))
        expected = "no errors, hangs or wrong results; minimum at least %g%% of the average" % (100 * share)
        if failures or m.get("coll_errors") or m.get("coll_hangs"):
            first = failures[0]["labels"] if failures else {}
            observed = "%d error(s), %d hang(s)" % (m.get("coll_errors", 0), m.get("coll_hangs", 0))
            if "coll_failure_records" in m:  # counted per failed collective, not per rank that reported it
                observed += " of the collective loop (each failure once; %d record(s) from its ranks)" % m[
                    "coll_failure_records"]
            rows.append(make_row(check, host, "fail", observed, expected,
                                 "%s: %s" % (first.get("kind"), first.get("error")) if first else None,
                                 subject="%s collectives" % probe))
        if not colls and not failures:
            if _interrupted(doc):
                rows.append(make_row(check, host, "skip", reason="interrupted before the first collective sample",
                                     subject=probe))
            else:
                rows.append(make_row(check, host, "error", reason="no collective samples (%s)" % _log_pointer(doc),
                                     subject=probe))
        for (coll,), c in sorted(colls.items(), key=lambda kv: str(kv[0])):
            if coll is None:
                continue  # coll_failure results: labelled by rank, not by collective
            lo, avg, hi = c.get("coll_busbw_min_gbps"), c.get("coll_busbw_avg_gbps"), c.get("coll_busbw_max_gbps")
            wrong = c.get("coll_wrong", 0)
            if avg is None:  # a 1-rank world: no bus bandwidth (probes/burnin/workers.coll_busbw)
                rows.append(make_row(check, host, "fail" if wrong else "skip",
                                     "no busbw (one rank: nothing crosses a bus), latency %.0f us, %d wrong" % (
                                         c.get("coll_lat_us_avg", 0), wrong), expected,
                                     reason=None if wrong else "a 1-rank world has no bus bandwidth to judge",
                                     subject="%s %s" % (probe, coll)))
                continue
            observed = "busbw min %.3f / avg %.3f / max %.3f GB/s, latency %.0f us, %d wrong" % (
                lo, avg, hi, c.get("coll_lat_us_avg", 0), wrong)
            status = "fail" if wrong else "warn" if avg and lo < share * avg else "pass"
            rows.append(make_row(check, host, status, observed, expected, subject="%s %s" % (probe, coll)))
    return rows


def _no_gpu_row(check, host, doc, subject=""):
    why = (doc.get("facts") or {}).get("gpu_telemetry") or "no GPU telemetry"
    return make_row(check, host, "skip", reason="no GPU on this node (%s backend): %s" % (
        doc.get("device", {}).get("backend"), why), subject=subject)


# What the GPU memory error readings hold (probes/burnin/sampler.GPU_ERROR_FIELDS), in the words of the report.
# AMD's deferred errors are uncorrectable ones the GPU poisoned instead of stopping on: as bad as uncorrectable.
ECC_UNCORRECTABLE = {"ecc_uncorrectable_volatile": "uncorrectable ECC (volatile)",
                     "ecc_uncorrectable_aggregate": "uncorrectable ECC (aggregate)",
                     "remapped_rows_uncorrectable": "rows remapped for uncorrectable errors",
                     "ecc_deferred": "deferred (poisoned) ECC"}
ECC_CORRECTABLE = {"ecc_correctable_volatile": "correctable ECC (volatile)",
                   "remapped_rows_correctable": "rows remapped for correctable errors",
                   "ecc_correctable_aggregate": "correctable ECC (total)"}
ECC_FLAGS = {"remap_pending": "row remap pending (needs a GPU reset)", "remap_failure": "row remapping failed"}


def _ecc_readings(doc):
    """{gpu: {counter: {"start": value, "end": value}}} of the artifact's GPU memory error readings."""
    out = {}
    for r in doc.get("results") or []:
        if r["metric"] == "ecc_reading":
            lab = r["labels"]
            out.setdefault(lab["gpu"], {}).setdefault(lab["counter"], {})[lab["at"]] = int(r["value"])
    return out


def _ecc_at_end(counters):
    """The error counts a GPU's reading after the load holds (not zero), in words: "uncorrectable ECC (volatile) 1,
    ..."; uncorrectable ones first."""
    ends = {k: c["end"] for k, c in counters.items() if "end" in c}
    return ["%s %d" % (names[k], v) for names in (ECC_UNCORRECTABLE, ECC_CORRECTABLE) for k, v in ends.items()
            if k in names and v > 0]


def _ecc_row(check, host, subject, counters, no_start=None):
    """The row of one GPU whose counters were read after the load. A pending remap or a remap failure in that
    reading fails by itself (the GPU needs a reset, or replacing, whatever it said before the load); the counters are
    compared with the reading before the load. no_start: why that reading has nothing of this GPU (it failed, or did
    not list the GPU): the counters cannot be compared, an error row naming why, unless a flag fails it."""
    new = {k: c["end"] - c["start"] for k, c in counters.items() if "start" in c and "end" in c}
    went_down = [k for k, d in new.items() if d < 0 and k not in ECC_FLAGS]
    bad = ["%s +%d" % (ECC_UNCORRECTABLE[k], d) for k, d in new.items() if k in ECC_UNCORRECTABLE and d > 0]
    flags = ["%s%s" % (ECC_FLAGS[k], ", already before the load" if c.get("start") else "")
             for k, c in counters.items() if k in ECC_FLAGS and c.get("end")]
    warn_at = int(check.get("correctable_warn", 1))
    soft = ["%s +%d" % (ECC_CORRECTABLE[k], d) for k, d in new.items() if k in ECC_CORRECTABLE and d >= warn_at]
    expected = "no new uncorrectable error or remapped row during the run, no row remap pending or failed after it; " \
               "%d or more new correctable errors warn" % warn_at
    if no_start:
        counts = _ecc_at_end(counters)
        after = "after the load: %s" % (", ".join(counts) if counts else "no error counted (%d counters)" % len(
            counters))
        why = "no reading before the load (%s)" % no_start
        if flags:
            return make_row(check, host, "fail", "; ".join(flags + [after]), expected, why + ": the counters cannot "
                            "be compared, but a pending remap or a remap failure fails whatever came before",
                            subject=subject)
        return make_row(check, host, "error", after, expected, why + ": nothing to compare the reading after it "
                        "with", subject=subject)
    if bad or flags:
        return make_row(check, host, "fail", ", ".join(flags + bad + soft), expected, subject=subject)
    if went_down:
        return make_row(check, host, "warn", "%s went down during the run" % ", ".join(sorted(went_down)), expected,
                        "the volatile counters start again at a GPU reset or a driver reload: something reset the "
                        "GPU during the burn-in", subject=subject)
    if soft:
        return make_row(check, host, "warn", ", ".join(soft), expected, subject=subject)
    return make_row(check, host, "pass", "no new error (%d counters read before and after)" % len(new), expected,
                    subject=subject)


def grade_ecc(check, run, host):
    rows = []
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        facts = doc.get("facts") or {}
        gpus = {r["labels"].get("gpu") for r in doc.get("results") or [] if r["metric"] == "gpu_samples"}
        readings = _ecc_readings(doc)
        if not gpus and not readings:
            why = facts.get("gpu_errors_start") or facts.get("gpu_errors_end")
            rows.append(make_row(check, host, "error", reason=why, subject=probe) if why else
                        _no_gpu_row(check, host, doc, subject=probe))
            continue
        for gpu in sorted(gpus | set(readings)):
            subject = "%s gpu %s" % (probe, gpu)
            counters = readings.get(gpu) or {}
            if not counters:
                why = facts.get("gpu_errors_start") or facts.get("gpu_errors_end")
                rows.append(make_row(check, host, "error", reason=why, subject=subject) if why else make_row(
                    check, host, "skip", reason="the GPU tool reports no ECC counter for this GPU (ECC off or not "
                    "supported), or this burn-in did not read them", subject=subject))
            elif not any("end" in c for c in counters.values()):
                if _interrupted(doc):
                    rows.append(make_row(check, host, "skip", reason="interrupted: the counters are read again after "
                                         "the load stops, which this timeline does not reach", subject=subject))
                else:
                    rows.append(make_row(check, host, "error", reason="no reading after the load: %s" % (
                        facts.get("gpu_errors_end") or "not recorded"), subject=subject))
            else:
                no_start = None
                if not any("start" in c for c in counters.values()):
                    no_start = facts.get("gpu_errors_start") or "it has no counter of this GPU"
                rows.append(_ecc_row(check, host, subject, counters, no_start))
    return rows


# The RDMA port counters that count errors (port_xmit_discards counts congestion drops as well: shown, not graded);
# link_downed is the port's link flap.
RDMA_ERRORS = ("symbol_error", "link_error_recovery", "port_rcv_errors", "port_rcv_remote_physical_errors",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors")


def grade_links(check, run, host):
    rows = []
    warn_errors = int(check.get("warn_errors", 1))
    expected = "no link down during the run; %d or more errors on a NIC or RDMA port warn" % warn_errors
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        nics, ports = {}, {}
        for r in doc.get("results") or []:
            lab = r["labels"]
            if r["metric"].startswith("nic_") and "nic" in lab:
                nics.setdefault(lab["nic"], {})[r["metric"][4:]] = r["value"]
            elif r["metric"].startswith("rdma_") and "port" in lab:
                port = ports.setdefault(lab["port"], {"saturated": []})
                port[r["metric"][5:]] = r["value"]
                if lab.get("saturated"):
                    port["saturated"].append(r["metric"][5:])
        found = []
        for name, m in sorted(nics.items()):
            errors = m.get("errors", 0)
            if m.get("carrier_changes"):
                found.append(("fail", name, "link down/up: %d carrier change(s), %d rx/tx error(s)" % (
                    m["carrier_changes"], errors)))
            elif errors >= warn_errors:
                found.append(("warn", name, "%d rx/tx error(s)" % errors))
        for name, m in sorted(ports.items()):
            errors = {c: m[c] for c in RDMA_ERRORS if m.get(c) and c not in m["saturated"]}
            text = ", ".join("%s %d" % kv for kv in sorted(errors.items()))
            if m.get("link_downed") and "link_downed" not in m["saturated"]:
                found.append(("fail", name, "link went down %d time(s)%s" % (m["link_downed"], "; " + text if text
                                                                                  else "")))
            elif sum(errors.values()) >= warn_errors:
                found.append(("warn", name, text))
            elif m["saturated"]:
                found.append(("warn", name, "%s at the counter's maximum: what happened during the run is not "
                                            "counted (clear it: perfquery -x -R)" % ", ".join(m["saturated"])))
        for status, name, observed in found:
            rows.append(make_row(check, host, status, observed, expected, subject="%s %s" % (probe, name)))
        if found:
            continue
        if not nics and not ports:
            rows.append(make_row(check, host, "skip", reason="no NIC or RDMA counters recorded", subject=probe))
            continue
        flaps = sum(1 for m in nics.values() if "carrier_changes" in m)
        elapsed = plain_metrics(doc).get("elapsed_s", 0.0)
        observed = "%d NIC(s) (%s), %d RDMA port(s): no error or link down in %.0f s" % (
            len(nics), "carrier changes of %d" % flaps if flaps else "errors only: no carrier-change counter",
            len(ports), elapsed)
        rows.append(make_row(check, host, "pass", observed, expected, subject=probe))
    return rows


def _dip_series(run, doc):
    """[(subject, [(t, value)], unit)]: each GEMM worker's TFLOP/s and each collective's bus bandwidth, interval by
    interval, from the timelines beside the artifact (the samples of every local rank of a collective together)."""
    series = {}
    for s in read_stream(run, doc, "gemm"):
        if s.get("type") == "gemm":
            subject = "gpu %s" % s["gpu"] if s.get("gpu") is not None else "worker %s (%s)" % (s["worker"], s["device"])
            series.setdefault(("%s %s" % (doc["probe"], subject), "TFLOP/s"), []).append((s["t"], s["tflops"]))
    for s in read_stream(run, doc, "coll"):
        if s.get("type") == "coll" and s.get("busbw_gbps") is not None:  # none in a 1-rank world
            series.setdefault(("%s %s" % (doc["probe"], s["collective"]), "GB/s"), []).append((s["t"], s["busbw_gbps"]))
    return [(subject, values, unit) for (subject, unit), values in sorted(series.items())]


def grade_dips(check, run, host):
    rows = []
    warn, fail = float(check.get("warn_share", 0.8)), float(check.get("fail_share", 0.5))
    expected = "every interval at least %g%% of the run's median (%g%% fails)" % (100 * warn, 100 * fail)
    for probe, doc in _soaks_that_ran(check, run, host, rows):
        series = _dip_series(run, doc)
        if not series:
            rows.append(make_row(check, host, "skip", reason="no GEMM or collective timeline beside the artifact",
                                 subject=probe))
        t_start = float((doc.get("facts") or {}).get("t_start") or 0.0)
        for subject, values, unit in series:
            median = statistics.median(v for _, v in values)
            if len(values) < 3 or not median:
                rows.append(make_row(check, host, "skip", reason="%d interval(s): too few for a median" % len(values),
                                     subject=subject))
                continue
            t_low, low = min(values, key=lambda tv: tv[1])
            share = low / median
            status = "fail" if share < fail else "warn" if share < warn else "pass"
            # the share in whole percent, or with decimals where those would show it on the other side of a line
            rows.append(make_row(check, host, status, "lowest interval %s%% of the median (%.4g of %.4g %s) at "
                                 "t+%.0f s" % (shown(share, (warn, fail), decimals=0, scale=100), low, median, unit,
                                               t_low - t_start), expected,
                                 subject=subject))
    return rows


def grade_storage(check, run, host):
    row, doc = _precondition(check, run, host, "storage_soak")
    if row:
        return [row]
    phases = _by_labels(doc, "fio_", ("phase", "clients"))
    if not phases:
        return [make_row(check, host, "error", reason="no fio intervals (see the probe log)")]
    rows = []
    for (phase, clients), m in sorted(phases.items(), key=lambda kv: (str(kv[0][0]), kv[0][1] or 0)):
        subject = "%s c%s" % (phase, clients)
        if m.get("fio_errors"):
            rows.append(make_row(check, host, "fail", "fio reported an error", "no I/O errors", subject=subject))
            continue
        deg = m.get("fio_bw_degradation_pct")
        if deg is None:
            rows.append(make_row(check, host, "skip", reason="no bandwidth intervals", subject=subject))
            continue
        status, expected = _degradation(check, deg, 10, 25)
        rows.append(make_row(check, host, status, "%s (%.0f -> %.0f MiB/s; min %.0f avg %.0f max %.0f)" % (
            _degradation_shown(check, deg, 10, 25), m.get("fio_bw_first_mibps", 0), m.get("fio_bw_last_mibps", 0),
            m.get("fio_bw_min_mibps", 0), m.get("fio_bw_avg_mibps", 0), m.get("fio_bw_max_mibps", 0)), expected,
            subject=subject))
    return rows


# Registered by reports.grading.kinds.register_phase_kinds (per host: fn(check, run, host) -> rows).
PER_HOST = {"burnin_completed": grade_completed, "burnin_kernel": grade_kernel, "burnin_gemm": grade_gemm,
           "burnin_gpu": grade_gpu, "burnin_ecc": grade_ecc, "burnin_links": grade_links, "burnin_coll": grade_coll,
           "burnin_dips": grade_dips, "burnin_storage": grade_storage}
CLUSTER = {}
