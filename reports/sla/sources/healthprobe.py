"""Health-probe samples -> down events (node and GPU scope), monitored time, reboots seen between samples, and
monitoring outages.

A sample stands for the host's state from its time until the next sample of that host, but for at most
`hold_intervals` probe intervals (the round records its interval; sla_tiers.yml gives the default). So a host
that was down at 10:05 and up again at 10:10 (5-minute probe) counts as down 10:05-10:10: the true start lies in
(10:00, 10:05] and the true end in (10:05, 10:10], so the counted duration is within one probe interval of the
truth. Beyond the hold the time is "not monitored": reported, never counted either way; two down samples with
unmonitored time between them are two outages, not one.

Two things make a sample stand for less:
- An exclusion honoured for the node (`excluded`: maintenance announced in time, the assessment's own reboot or
  fault-injection test) that the sample falls in: the sample stands for the node only until the exclusion ends.
  The node was down because of it, and what it did after the exclusion is unknown until the next sample; without
  this a 5-minute probe that caught a 10-second reboot test would charge the provider the other 4 min 50 s.
- A monitoring outage: a round in which no host answered at all (unreachable, or no result in time) says more
  about the controller, the probe's one vantage point, than about the nodes. Its samples are neither down nor
  monitored; downtime in that time comes only from the other sources, so a node the scheduler showed down then
  counts for as long as the scheduler's own record says (the review lists each outage with what Slurm saw).
  Time that neither the probe nor another source observed is not counted, but it bounds the verdict: with one
  node, or no scheduler source, a whole-cluster outage is all monitoring outage, and the review judges it at its
  worst case (reports/sla/availability.py, rule 8) instead of reading it as 100 % available.

GPU scope: when a node's nvidia-smi lists fewer GPUs than the contract says it has (or fails), the missing count
becomes a gpu-scope event; the node rule in reports/sla/availability.py decides whether that makes the node down.
A changed boot id between two up samples is a reboot the samples did not see as downtime: it is reported as an
observation, not counted (its length is unknown).
"""

from __future__ import annotations

from reports.sla import store
from reports.sla.events import Event
from reports.sla.timeutil import US, iso_utc

SOURCE = "healthprobe"
BLIND = "monitoring outage"  # the state of a sample taken in a round in which no host answered


def monitoring_outages(samples: list[dict]) -> dict[int, list[str]]:
    """The rounds in which no host answered, by their time (one instant for every host of a round) -> the hosts."""
    rounds: dict[int, list[dict]] = {}
    for s in samples:
        rounds.setdefault(s["sampled_at_us"], []).append(s)
    return {t: sorted(s["host"] for s in rows) for t, rows in sorted(rounds.items())
            if not any(store.answered(s) for s in rows)}


def _stretches(spans, key):
    """Consecutive (sample, state, held_until) spans with the same key and no unmonitored time between them."""
    out: list[list] = []
    for span in spans:
        if out and key(span) == key(out[-1][-1]) and out[-1][-1][2] == span[0]["sampled_at_us"]:
            out[-1].append(span)
        else:
            out.append([span])
    return out


def _by_host(samples: list[dict]) -> dict[str, list[dict]]:
    by_host: dict[str, list[dict]] = {}
    for s in samples:
        by_host.setdefault(s["host"], []).append(s)
    for rows in by_host.values():
        rows.sort(key=lambda r: (r["sampled_at_us"], r["id"]))
    return by_host


def _spans(host: str, rows: list[dict], blind: dict, hold_intervals: float, default_interval_s: float,
           excluded: dict | None) -> list[tuple]:
    """(sample, state, held until) of one host's rows in time order: what each sample stands for."""
    spans = []
    for i, r in enumerate(rows):
        t = r["sampled_at_us"]
        held = [t + int(hold_intervals * (r.get("interval_s") or default_interval_s) * US)]
        held += [rows[i + 1]["sampled_at_us"]] if i + 1 < len(rows) else []
        held += [e for s, e in (excluded or {}).get(host, []) if s <= t < e]
        spans.append((r, BLIND if t in blind else r["state"], min(held)))
    return spans


def blinded(samples: list[dict], hold_intervals: float = 2, default_interval_s: float = 300,
            excluded: dict | None = None) -> dict[str, list]:
    """host -> the time its monitoring-outage samples would have stood for: what those rounds blinded the probe to
    (neither down nor monitored; the review says how much, reports/sla/review.py)."""
    blind = monitoring_outages(samples)
    return {host: [(r["sampled_at_us"], h) for r, state, h in
                   _spans(host, rows, blind, hold_intervals, default_interval_s, excluded)
                   if state == BLIND and h > r["sampled_at_us"]]
            for host, rows in sorted(_by_host(samples).items())}


def events_from_samples(samples: list[dict], expected_gpus: dict | None = None, hold_intervals: float = 2,
                        default_interval_s: float = 300, excluded: dict | None = None):
    """(events, monitored intervals per host, reboot observations, monitoring outages) from store rows (any order).

    excluded: node -> intervals of the exclusions honoured for it (reports.sla.availability.excluded_intervals)."""
    blind = monitoring_outages(samples)
    events, monitored, reboots = [], {}, []
    for host, rows in sorted(_by_host(samples).items()):
        spans = _spans(host, rows, blind, hold_intervals, default_interval_s, excluded)
        monitored[host] = [(r["sampled_at_us"], h) for r, state, h in spans
                           if state != BLIND and h > r["sampled_at_us"]]
        for run in _stretches(spans, key=lambda x: x[1]):
            if run[0][1] != "down":
                continue
            first, last, end = run[0][0], run[-1][0], run[-1][2]
            after = next((r for r in rows if r["sampled_at_us"] > last["sampled_at_us"]), None)
            reasons = sorted({r["reason"] for r, _, _ in run if r["reason"]})
            closed_by = after["id"] if after is not None and after["sampled_at_us"] == end else None
            events.append(Event(
                id="%s:%s:%d-%d" % (SOURCE, host, first["id"], last["id"]), source=SOURCE, scope="node",
                target=host, kind="down", start=first["sampled_at_us"], end=end, reason="; ".join(reasons),
                evidence={"samples": [r["id"] for r, _, _ in run], "first_down": iso_utc(first["sampled_at_us"]),
                          "last_down": iso_utc(last["sampled_at_us"]), "up_sample": closed_by,
                          "up_at": iso_utc(end) if closed_by else None,
                          "open": closed_by is None, "held_until": iso_utc(end)}))
        want = (expected_gpus or {}).get(host)
        if want:
            def missing(x, want=want):
                r, state, _ = x
                if state != "up" or r.get("gpus_found") is None:
                    return 0
                return max(0, want - int(r["gpus_found"]))

            for run in _stretches(spans, key=missing):
                count = missing(run[0])
                if not count:
                    continue
                first, last = run[0][0], run[-1][0]
                events.append(Event(
                    id="%s:%s:gpu:%d-%d" % (SOURCE, host, first["id"], last["id"]), source=SOURCE, scope="gpu",
                    target=host, kind="down", start=first["sampled_at_us"], end=run[-1][2], gpus=count,
                    reason="nvidia-smi lists %d of %d GPUs%s" % (
                        want - count, want, "" if not last.get("gpu_rc") else " (nvidia-smi exit %s)" % last["gpu_rc"]),
                    evidence={"samples": [r["id"] for r, _, _ in run], "held_until": iso_utc(run[-1][2])}))
        prev = None
        for r in rows:
            if r["state"] != "up" or not r.get("boot_id"):
                continue
            if prev is not None and prev["boot_id"] != r["boot_id"]:
                boot = r["sampled_at_us"] - int((r.get("uptime_s") or 0) * US) if r.get("uptime_s") else None
                reboots.append({"host": host, "between": iso_utc(prev["sampled_at_us"]), "and": iso_utc(
                    r["sampled_at_us"]), "booted_at": iso_utc(boot) if boot else "", "samples": [prev["id"], r["id"]]})
            prev = r
    return events, monitored, reboots, blind
