"""Grading of the Prometheus half of the monitoring phase (probe `prometheus`): pure functions of a run.

The probe records every series of the rubric's metric families that the API held in the lookback, each with the
labels that name a node and a GPU and the time of its newest served sample (None: listed, no longer served), the
scrape targets with their intervals, the server's write/admin flags and which exporter ports answer without a
credential (probes/monitoring/prometheus.py). Here:
- a series belongs to a node by the one rule the Grafana half uses too (probes/monitoring/common.py node_of): its
  `node`, `Hostname`, `hostname`, `nodename` or `host` label, else its `instance`'s host part, against the node's
  name, address or short name;
- a node's GPUs are those any DCGM series names for it (label `gpu`), and at least the GPUs the node's own
  node_info artifact counts: every GPU must have every metric of the gpu family;
- a series is fresh when its newest sample is at most `fresh_intervals` scrape intervals older than the query's
  evaluation time (the interval of the series' target, else the smallest of all targets').

Check kinds (rubric.d/monitoring.yml), cluster kinds with rows per node (subject: the node) on the host that ran the
probe (reports/grading/one_host.py):
  mon_gpu_series        every GPU of the node has every metric of the check's family (missing ones named)
  mon_node_series       the node has every metric of the family
  mon_family_present    one row: at least one metric of the family exists (e.g. the scheduler's state)
  mon_fresh             every series of the node is fresh (stale ones named)
  mon_exporters_open    no exporter port of the node answers /metrics without a credential (security)
  mon_write_endpoints   one row: no admin, lifecycle, remote-write or OTLP write endpoint open on an API that answers
                        without a credential (security); the server's flags as /api/v1/status/flags gives them, the
                        `enable-feature` list included (write_endpoints)
  mon_fault_visible     per injected fault (subject: its node): a watched metric (XID errors) of that node became
                        non-zero within pass_s of the injection (the first one, or the fallback where the change
                        came after it); the scheduler's detection time beside it. The metrics' times (the Prometheus
                        server's clock) are put on the injection's (the reliability observer's) with the offsets the
                        probe measured, never subtracted across clocks; skipped where the samples may be stamped by
                        another clock than the server's (stamping_clock)
"""

import json

from probes.monitoring.common import node_of, prom_duration_s
from reports.grading.one_host import on_runners
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row
from reports.grading.select import find_artifact
from reports.shown import shown

PROBE = "prometheus"
# The flags of /api/v1/status/flags that open an endpoint taking writes (or admin actions): switches ("true"), and
# the features of `enable-feature` (a comma-separated list) that do the same: Prometheus 2.47 to 2.55 open the OTLP
# write endpoint (POST /api/v1/otlp/v1/metrics) with otlp-write-receiver, 3.x with --web.enable-otlp-receiver; 2.x
# still reads the deprecated remote-write-receiver feature as --web.enable-remote-write-receiver.
WRITE_SWITCHES = ("web.enable-admin-api", "web.enable-lifecycle", "web.enable-remote-write-receiver",
                  "web.enable-otlp-receiver")
WRITE_FEATURES = ("remote-write-receiver", "otlp-write-receiver")
# Flags an artifact of an earlier probe version did not keep (absent, not "false").
LATER_FLAGS = ("web.enable-otlp-receiver", "enable-feature")


def write_endpoints(flags):
    """The write or admin endpoints the server's flags open: the switches set to true, and each write feature of
    `enable-feature` as enable-feature=<feature>."""
    opened = [k for k in WRITE_SWITCHES if str(flags.get(k)).strip().lower() == "true"]
    features = [f.strip() for f in str(flags.get("enable-feature") or "").split(",")]
    return opened + ["enable-feature=%s" % f for f in WRITE_FEATURES if f in features]


def gpu_counts(run):
    """{host: GPUs its node_info artifact counts} (0 for a CPU node; absent where there is no node_info)."""
    out = {}
    for host in run.hosts:
        doc = find_artifact(run, host, "node_info")
        if doc and doc.get("status") == "ok":
            out[host] = int((doc.get("device") or {}).get("count") or 0)
    return out


def intervals(facts):
    """{instance: scrape seconds} of the targets, and the smallest of them (the default)."""
    by = {}
    for t in facts.get("targets") or []:
        sec = prom_duration_s(t.get("scrape_interval"))
        if sec:
            by[t["labels"].get("instance")] = sec
    return by, (min(by.values()) if by else None)


def errored(facts):
    """{metric: why} of the metrics the probe could not read (their series are unknown, not missing)."""
    out = {}
    for text in facts.get("errors") or []:
        metric, _, why = text.partition(": ")
        out[metric] = why
    return out


def evaluated(facts, metric):
    """When the metric's instant query was evaluated (an older artifact: one time for all)."""
    at = facts.get("evaluated_at")
    if isinstance(at, dict):
        return at.get(metric) or max([v for v in at.values() if v] or [0.0])
    return float(at or 0.0)


def series_by_node(facts, family):
    """{node: [(metric, labels, ts)]} of one family's series."""
    out = {}
    for metric in (facts.get("families") or {}).get(family) or []:
        for s in (facts.get("series") or {}).get(metric) or []:
            node = node_of(s["labels"], facts.get("nodes") or [])
            out.setdefault(node, []).append((metric, s["labels"], s["ts"]))
    return out


def _rows_per_node(check, run, host, judge):
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"])["facts"]
    return [make_row(check, host, status, observed, expected, reason, subject=node)
            for node, (status, observed, expected, reason) in sorted(judge(facts).items())]


@on_runners
def grade_gpu_series(check, run, host):
    family, counts = check["family"], gpu_counts(run)

    def judge(facts):
        metrics = facts["families"].get(family) or []
        by_node = series_by_node(facts, family)
        out = {}
        for n in facts.get("nodes") or []:
            name = n["name"]
            have = {(s_labels.get("gpu"), metric) for metric, s_labels, _ in by_node.get(name, [])}
            gpus = {g for g, _ in have if g is not None} | {str(i) for i in range(counts.get(name, 0))}
            expected = "%d metrics for each of %d GPUs" % (len(metrics), len(gpus))
            if not gpus:
                out[name] = ("skip", None, None, "no GPU on this node: node_info counts none and no %s series names one"
                             % family)
                continue
            unread = errored(facts)
            missing = sorted((g, m) for g in gpus for m in metrics if (g, m) not in have and m not in unread)
            observed = "%d of %d series" % (len(gpus) * len(metrics) - len(missing), len(gpus) * len(metrics))
            if not missing and any(m in unread for m in metrics):
                out[name] = ("error", observed, expected, "could not be read: " + "; ".join(
                    "%s (%s)" % (m, unread[m]) for m in metrics if m in unread))
                continue
            out[name] = ("fail" if missing else "pass", observed, expected,
                         "missing: " + ", ".join("GPU %s %s" % gm for gm in missing) if missing else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_node_series(check, run, host):
    family = check["family"]

    def judge(facts):
        metrics = facts["families"].get(family) or []
        by_node = series_by_node(facts, family)
        out = {}
        for n in facts.get("nodes") or []:
            have = {metric for metric, _, _ in by_node.get(n["name"], [])}
            unread = errored(facts)
            missing = [m for m in metrics if m not in have and m not in unread]
            if not missing and any(m in unread for m in metrics):
                out[n["name"]] = ("error", None, "every %s metric" % family, "could not be read: " + "; ".join(
                    "%s (%s)" % (m, unread[m]) for m in metrics if m in unread))
                continue
            out[n["name"]] = ("fail" if missing else "pass", "%d of %d metrics" % (len(metrics) - len(missing),
                                                                                 len(metrics)),
                              "every %s metric" % family, "missing: " + ", ".join(missing) if missing else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_family_present(check, run, host):
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"])["facts"]
    metrics = facts["families"].get(check["family"]) or []
    present = sorted(m for m in metrics if (facts.get("series") or {}).get(m))
    expected = "at least one of %s" % ", ".join(metrics)
    if present:
        return [make_row(check, host, "pass", ", ".join(present), expected)]
    return [make_row(check, host, "fail", "none", expected, "no %s series in the API (looked for %s)" % (
        check["family"], ", ".join(metrics)))]


@on_runners
def grade_fresh(check, run, host):
    limit = float(check["fresh_intervals"])

    def judge(facts):
        by_instance, default = intervals(facts)
        out = {}
        for n in facts.get("nodes") or []:
            # The newest series of each metric and GPU: an exporter that restarted under a new instance (a pod) left
            # its old series "listed, not served", which is history, not staleness.
            newest = {}
            for family in facts.get("families") or {}:
                for metric, labels, ts in series_by_node(facts, family).get(n["name"], []):
                    key = (metric, labels.get("gpu"))
                    if key not in newest or (ts or 0) > (newest[key][1] or 0):
                        newest[key] = (labels, ts)
            stale = []
            for (metric, gpu), (labels, ts) in sorted(newest.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
                interval = by_instance.get(labels.get("instance")) or default or 60.0
                now = evaluated(facts, metric)
                if ts is None or now - ts > limit * interval:
                    age = "not served" if ts is None else "%.0f s old" % (now - ts)
                    stale.append("%s%s (%s)" % (metric, "{gpu=%s}" % gpu if gpu is not None else "", age))
            total = len(newest)
            if not total:
                out[n["name"]] = ("skip", None, None, "no series of this node in the API")
                continue
            out[n["name"]] = ("fail" if stale else "pass", "%d of %d series fresh" % (total - len(stale), total),
                              "newest sample within %g scrape intervals" % limit,
                              "stale: " + ", ".join(stale[:12]) + (" …" if len(stale) > 12 else "") if stale else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_exporters_open(check, run, host):
    def judge(facts):
        out = {}
        for node, ports in sorted((facts.get("exporters") or {}).items()):
            open_ = sorted("%s (%s)" % (name, state) for name, state in ports.items() if state.startswith("open 2"))
            out[node] = ("warn" if open_ else "pass", ", ".join(open_) or "none open without a credential",
                         "no exporter answering /metrics without a credential from %s" % host,
                         "answer without a credential: %s" % ", ".join(open_) if open_ else None)
        return out
    return _rows_per_node(check, run, host, judge)


@on_runners
def grade_write_endpoints(check, run, host):
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"])["facts"]
    flags = facts.get("flags")
    if flags is None:
        return [make_row(check, host, "skip", reason="the server's flags could not be read: %s" % facts.get(
            "flags_error"))]
    opened = write_endpoints(flags)
    # What counts is whether the probe reached the API without a credential: a web config file may set up TLS only.
    auth = not facts.get("unauthenticated_api")
    unread = [k for k in LATER_FLAGS if k not in flags]
    observed = "%s; API %s%s" % (", ".join(opened) or "no admin, lifecycle, remote-write or OTLP write endpoint",
                                 "needs a credential" if auth else "answers without a credential",
                                 "; %s not recorded (an artifact of an earlier probe version): the OTLP receiver and "
                                 "feature-flag write endpoints are not checked" % ", ".join(unread) if unread else "")
    expected = "no write endpoint open without a credential"
    bad = opened and not auth
    return [make_row(check, host, "fail" if bad else "pass", observed, expected,
                     json.dumps(opened) if bad else None)]


def injections(run):
    """[{node, detect, timed_from, injections: [{which, t, clock, clock_of}]}] of the run's fault injections, one per
    injected host. injections: each injection that went in, in order: the first ("first") and, where the first went
    unseen for fault_injection_fallback_after, the fallback ("fallback"), each at its time on the clock the
    reliability timeline times it on (timeline.injection_time: the batch's observer's, else, in an artifact without
    the observer's reading, the node's own); clock: the host whose clock that is (None where no artifact names the
    observer), clock_of: "observer" or "node". detect: the scheduler's detection time from the timeline, timed from
    the injection timed_from names ("fallback" where the timeline timed from it, timeline.fault_outcome; else
    "first"; None without a timeline)."""
    from reports.phases.reliability import timeline  # noqa: PLC0415 - only where a fault was injected

    out = []
    for host in sorted({d["host"] for d in run.artifacts if d["probe"] == "fault_inject"}):
        doc = run.artifact(host, "fault_injection")
        rec = timeline.outcome(run, doc) if doc else None
        facts = (rec or {}).get("facts") or {}
        timed_from = None
        if rec is not None and rec["status"] == "ok":
            timed_from = "fallback" if facts.get("first_unseen_s") is not None else "first"
        went_in = []
        for which in ("first", "fallback"):
            inject = run.artifact(host, "fault_inject", None if which == "first" else "fallback")
            t = timeline.injection_time(inject) if (inject or {}).get("status", "ok") == "ok" else None
            if t is None:
                continue
            clock_of = timeline.injection_clock(inject)
            went_in.append({"which": which, "t": t, "clock_of": clock_of,
                            "clock": host if clock_of == "node" else facts.get("observer") or None})
        if not went_in:
            continue
        out.append({"node": host, "injections": sorted(went_in, key=lambda i: i["t"]), "timed_from": timed_from,
                    "detect": rec["metrics"].get("detect_s") if rec else None})
    return out


STAMP_SLACK_S = 5.0  # a loaded server's scrape and append latency, beyond two scrape intervals


def stamping_clock(facts, node):
    """Why the samples' times of node's watched series may be on a clock other than the one time() read (the
    server's that evaluates queries), or None where nothing says so. The two are one clock where the server scraped
    the samples itself: its scrape targets API (facts targets) lists the series' instance. No targets (an API
    without one, as Mimir's or vmselect's, or one that scrapes nothing, as a remote-write receiver's): the
    samples were stamped by whatever scraped them. And the freshest sample of a watched metric at most two of the
    longest scrape intervals, and STAMP_SLACK_S, older than the query that served it (a sample is stamped when its
    scrape starts and served once it ends, within a scrape timeout <= the interval): older, a scraper's clock behind
    the server's, or nothing being scraped. Limit: a scraper whose clock is ahead of the server's still shows fresh
    samples, and a query server that lists the scrapers' targets as its own (Thanos Query, promxy) passes the first
    test; the delay is then off by the scraper's offset, which no query here reads."""
    watched = facts.get("watch") or {}
    targets = facts.get("targets") or []
    if not targets:
        why = errored(facts).get("targets")
        return ("the Prometheus server %s, so its samples were stamped by whatever scraped them (a remote-write "
                "sender, an agent, a sidecar's Prometheus): time() read the clock of the server that answers queries, "
                "not that one, and no delay is taken across the two" % (
                    "has no scrape targets API (%s)" % why if why else "scrapes no target itself"))
    scraped = {t["labels"].get("instance") for t in targets}
    nodes = facts.get("nodes") or []
    instances = sorted({w["labels"].get("instance") or "" for series in watched.values() for w in series
                        if node_of(w["labels"], nodes) == node})
    if instances and not scraped.intersection(instances):
        return ("%s's %s series (instance %s) are not among the Prometheus server's scrape targets: stamped by "
                "whatever scraped them, on a clock time() did not read" % (
                    node, "/".join(watched), ", ".join(i or "none" for i in instances)))
    by_instance, _ = intervals(facts)
    longest = max(by_instance.values() or [0.0])
    for metric in watched:
        stamps = [s["ts"] for s in (facts.get("series") or {}).get(metric) or [] if s.get("ts") is not None]
        if not stamps or not longest:
            continue
        lag = evaluated(facts, metric) - max(stamps)
        if lag > 2 * longest + STAMP_SLACK_S:
            return ("the freshest %s sample was %.1f s older than the query that served it, more than two scrape "
                    "intervals (%g s) and %g s: the samples are stamped by a clock behind the server's (a remote-write "
                    "sender's, a sidecar's) or nothing was being scraped, so the server's clock is not theirs" % (
                        metric, lag, longest, STAMP_SLACK_S))
    return None


def clock_shift(facts, host, clock):
    """(shift, uncertainty, status, why): a time by the Prometheus server's clock plus shift is that time by `clock`'s
    (the host whose clock the injection is timed by), to within ± uncertainty (the measurements' added): the
    server's clock against this host's (facts server_clock), this host's against `clock`'s (facts host_clocks; none
    where `clock` is this host). (None, None, status, why) where a relation was not measured: the times are then on
    clocks that may be seconds apart, and no delay is taken from them."""
    server = facts.get("server_clock")
    if not server:
        if facts.get("server_clock_error"):
            return None, None, "error", "the Prometheus server's clock could not be read against %s's: %s" % (
                host, facts["server_clock_error"])
        return None, None, "skip", ("clock offset not recorded: the artifact holds no reading of the Prometheus "
                                    "server's clock against %s's (written before the probe recorded one), so the "
                                    "metrics' times cannot be put on the injection's clock" % host)
    shift, unc = -float(server["offset_s"]), float(server["uncertainty_s"])
    if clock != host:
        rel = (facts.get("host_clocks") or {}).get(clock)
        if not rel or rel.get("offset_s") is None:
            why = "%s's clock was not read against %s's%s" % (
                clock, host, ": %s" % rel["error"] if rel and rel.get("error") else " (the monitoring role reads the "
                "clocks of the observers named in this run's fault_injection artifacts)")
            return None, None, "error" if rel else "skip", why
        shift, unc = shift + float(rel["offset_s"]), unc + float(rel["uncertainty_s"])
    return shift, unc, None, None


def _sec(seconds):
    return "%.1f s" % seconds if seconds >= 0.1 else "%.0f ms" % (seconds * 1000)


DRIFT_NOTED_S = 3600  # clocks read this long after the injection: their drift since is named, not measured


def _span(seconds):
    return "%.1f h" % (seconds / 3600) if seconds >= 3600 else "%.0f s" % seconds


@on_runners
def grade_fault_visible(check, run, host):
    """Kind `mon_fault_visible`: each injected fault's node shows a watched metric (XID errors) other than 0 within
    pass_s (warn up to fail_s) of the injection, next to the scheduler's detection time.

    Three clocks: the metrics' times are the Prometheus server's, the injection's the reliability phase's (the batch's
    observer's, timeline.injection_time), the probe's own host's in between; the metrics' times are put on the
    injection's clock with the offsets the probe measured (clock_shift), and the observed text gives the offset
    applied where it or its uncertainty is 0.5 s or more. Where an offset was not measured the row says so instead of
    subtracting one clock from another; where the samples may be stamped by another clock than the server's that
    time() read (stamping_clock: no scrape of its own, or samples older than its scrapes allow), it skips. A value
    other than 0 from before the injection by more than the uncertainty is never taken for it: held from before the
    window (the series' first point), it is history; a change within fail_s before the injection is a clock off by
    more than measured, or an error from before it: an error row, unless a change after the injection shows the
    fault.

    A fault unseen by the scheduler until the fallback injection (timeline.fault_outcome) may still have shown in the
    metrics after the first: the first change at or after the first injection counts, timed from the injection it
    follows (the latest one before it), and the row says which. The range query's points are its step apart
    (changes in probes/monitoring/prometheus.py): a point at T holds the latest sample at or before T, so the change
    lies in (T - step, T], and the delay shown, T minus the injection, lies within [delay - step, delay] widened by
    the clocks' uncertainty: the observed text gives that range. The offsets are measured when the probe ran: an
    injection more than an hour before that is named, the clocks' drift since not being in the range."""
    pre = ungradable(check, run, host, error_is_final=True)
    if pre:
        return [pre]
    faults = injections(run)
    if not faults:
        return [make_row(check, host, "skip", reason="no fault was injected in this run (the reliability phase's "
                                                     "fault injection did not run)")]
    facts = find_artifact(run, host, check["probe"])["facts"]
    pass_s, fail_s = float(check["pass_s"]), float(check["fail_s"])
    expected = "visible in the metrics within %g s (warn up to %g s)" % (pass_s, fail_s)
    watched = "/".join(facts.get("watch") or {}) or "watched"
    measured_at = float((facts.get("server_clock") or {}).get("at") or 0.0)
    rows = []
    for f in faults:
        node, went_in = f["node"], f["injections"]
        if any(i["clock"] is None for i in went_in):
            rows.append(make_row(check, host, "skip", reason="the injection was timed by its batch's observer's clock "
                                 "and no fault_injection artifact names the observer", subject=node))
            continue
        # Each injection on the Prometheus server's clock (t_server, ± unc), through the offsets measured.
        why = None
        for inj in went_in:
            shift, unc, status, why = clock_shift(facts, host, inj["clock"])
            if why:
                break
            inj.update(shift=shift, unc=unc, t_server=inj["t"] - shift)
        if why:
            rows.append(make_row(check, host, status, reason=why, subject=node))
            continue
        went_in.sort(key=lambda i: i["t_server"])
        other = stamping_clock(facts, node)
        if other:
            rows.append(make_row(check, host, "skip", reason=other, subject=node))
            continue
        first = went_in[0]
        # Each change of a series (points: its value at the window's start, then every change), on the server's
        # clock. At or after the first injection (within the clocks' uncertainty): the fault showing; before it: a
        # value held from before the window (the first point) is history, a change is noted.
        after, before = [], []
        for series in (facts.get("watch") or {}).values():
            for w in series:
                if node_of(w["labels"], facts.get("nodes") or []) != node:
                    continue
                for k, (ts, value) in enumerate(w["points"]):
                    if value == 0:
                        continue
                    if float(ts) >= first["t_server"] - first["unc"]:
                        after.append((float(ts), w.get("step")))
                    elif k > 0:
                        before.append(float(ts))
        after.sort(key=lambda p: p[0])
        early = [t for t in before if t >= first["t_server"] - first["unc"] - fail_s]
        unread = [m for m in facts.get("watch") or {} if m in errored(facts)]
        two = len(went_in) > 1
        if after:  # the injection the change follows: the latest one before it, within the clocks' uncertainty
            inj = [i for i in went_in if after[0][0] >= i["t_server"] - i["unc"]][-1]
        else:
            inj = first
        shift, unc = inj["shift"], inj["unc"]
        clock_name = ("the observer %s's" % inj["clock"] if inj["clock_of"] == "observer"
                      else "%s's own" % inj["clock"])
        offset, clock_text = -shift, ""
        if abs(offset) >= 0.5 or unc >= 0.5:
            moved = round(abs(offset), 1) > 0
            clock_text = "; Prometheus' clock %s %s (±%s)%s" % (
                "%.1f s %s" % (abs(offset), "ahead of" if offset > 0 else "behind") if moved else "level with",
                clock_name, _sec(unc), ", corrected" if moved else "")
        if measured_at and measured_at - inj["t"] > DRIFT_NOTED_S:
            clock_text += "; clocks read %s after the injection, their drift since not included" % _span(
                measured_at - inj["t"])
        if f["detect"] is None:
            detect_text = "scheduler detection none"
        elif two and f["timed_from"] == "fallback" and inj["which"] == "first":
            detect_text = "the scheduler's detection came only after the fallback (%.1f s after it, %.1f s after " \
                          "the first)" % (f["detect"], went_in[-1]["t"] - first["t"] + f["detect"])
        elif two and f["timed_from"]:
            detect_text = "scheduler detection %.1f s after the %s injection" % (f["detect"], f["timed_from"])
        else:
            detect_text = "scheduler detection %.1f s" % f["detect"]
        since = " the first injection" if two else " the injection"
        if not after and unread:
            rows.append(make_row(check, host, "error", reason="could not be read: %s" % "; ".join(
                "%s (%s)" % (m, errored(facts)[m]) for m in unread), subject=node))
            continue
        if not after and early:
            ahead = first["t_server"] - max(early)
            rows.append(make_row(check, host, "error", "non-zero %.1f s before%s; %s%s" % (
                ahead, since, detect_text, clock_text), expected,
                "a %s series of %s became non-zero %.1f s before%s, more than the ±%s the clocks are known to: a "
                "clock off by more than measured, or an error from before the injection; nothing after it" % (
                    watched, node, ahead, since, _sec(first["unc"])), subject=node))
            continue
        if not after:
            rows.append(make_row(check, host, "fail", "not visible; %s%s" % (detect_text, clock_text), expected,
                                 "no %s series of %s became non-zero after%s" % (watched, node, since),
                                 subject=node))
            continue
        change, step = after[0]
        visible = change - inj["t_server"]
        status = "pass" if visible <= pass_s else "warn" if visible <= fail_s else "fail"
        # the delay judged, on its side of each line (reports/shown.py: 60.04 s is not "60.0 s" beside a 60 s limit)
        text = ("visible %s s after the %s injection" % (shown(visible, (pass_s, fail_s)), inj["which"]) if two
                else "visible after %s s" % shown(visible, (pass_s, fail_s)))
        notes = []
        if step:  # the change lies in (T - step, T]: the delay within [visible - step, visible], ± the clocks
            notes.append("%.1f to %.1f s: the range query's %g s step%s" % (
                visible - float(step) - unc, visible + unc, float(step),
                ", the clocks' ±%s" % _sec(unc) if unc >= 0.05 else ""))
        if visible < 0:  # before the injection, within what the clocks are known to: at once, as far as they tell
            notes.append("before it by less than the clocks' ±%s" % _sec(unc))
        if early:
            notes.append("also non-zero %.1f s before%s" % (first["t_server"] - max(early), since))
        if notes:
            text += " (%s)" % "; ".join(notes)
        rows.append(make_row(check, host, status, "%s; %s%s" % (text, detect_text, clock_text), expected,
                             subject=node))
    return rows


CLUSTER = {"mon_fault_visible": grade_fault_visible, "mon_gpu_series": grade_gpu_series,
           "mon_node_series": grade_node_series,
           "mon_family_present": grade_family_present, "mon_fresh": grade_fresh,
           "mon_exporters_open": grade_exporters_open, "mon_write_endpoints": grade_write_endpoints}
