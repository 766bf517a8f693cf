"""Health-probe samples -> down events (node and GPU scope), monitored time, and reboots seen between samples.

A sample stands for the host's state from its time until the next sample of that host, but for at most
`hold_intervals` probe intervals (the round records its interval; sla_tiers.yml gives the default). So a host
that was down at 10:05 and up again at 10:10 (5-minute probe) counts as down 10:05-10:10: the true start lies in
(10:00, 10:05] and the true end in (10:05, 10:10], so the counted duration is within one probe interval of the
truth. Beyond the hold the time is "not monitored": reported, never counted either way.

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


def _runs(items, key):
    """Consecutive items with the same key -> lists."""
    run, out = [], []
    for item in items:
        if run and key(item) != key(run[-1]):
            out.append(run)
            run = []
        run.append(item)
    if run:
        out.append(run)
    return out


def events_from_samples(samples: list[dict], expected_gpus: dict | None = None, hold_intervals: float = 2,
                        default_interval_s: float = 300) -> tuple[list[Event], dict, list[dict]]:
    """(events, monitored intervals per host, reboot observations) from store rows (any order)."""
    by_host: dict[str, list[dict]] = {}
    for s in samples:
        by_host.setdefault(s["host"], []).append(s)
    events, monitored, reboots = [], {}, []
    for host, rows in sorted(by_host.items()):
        rows.sort(key=lambda r: (r["sampled_at_us"], r["id"]))
        holds = []
        for i, r in enumerate(rows):
            interval = r.get("interval_s") or default_interval_s
            limit = r["sampled_at_us"] + int(hold_intervals * interval * US)
            nxt = rows[i + 1]["sampled_at_us"] if i + 1 < len(rows) else None
            holds.append(min(nxt, limit) if nxt is not None else limit)
        monitored[host] = [(r["sampled_at_us"], h) for r, h in zip(rows, holds) if h > r["sampled_at_us"]]
        indexed = list(zip(rows, holds))
        for run in _runs(indexed, key=lambda x: x[0]["state"]):
            if run[0][0]["state"] != "down":
                continue
            first, last = run[0][0], run[-1][0]
            end = run[-1][1]
            after = next((r for r in rows if r["sampled_at_us"] > last["sampled_at_us"]), None)
            reasons = sorted({r["reason"] for r, _ in run if r["reason"]})
            closed_by = after["id"] if after is not None and after["sampled_at_us"] == end else None
            events.append(Event(
                id="%s:%s:%d-%d" % (SOURCE, host, first["id"], last["id"]), source=SOURCE, scope="node",
                target=host, kind="down", start=first["sampled_at_us"], end=end, reason="; ".join(reasons),
                evidence={"samples": [r["id"] for r, _ in run], "first_down": iso_utc(first["sampled_at_us"]),
                          "last_down": iso_utc(last["sampled_at_us"]), "up_sample": closed_by,
                          "up_at": iso_utc(end) if closed_by else None,
                          "open": closed_by is None, "held_until": iso_utc(end)}))
        want = (expected_gpus or {}).get(host)
        if want:
            def missing(x, want=want):
                r = x[0]
                if r["state"] != "up" or r.get("gpus_found") is None:
                    return 0
                return max(0, want - int(r["gpus_found"]))

            for run in _runs(indexed, key=missing):
                count = missing(run[0])
                if not count:
                    continue
                first, last = run[0][0], run[-1][0]
                events.append(Event(
                    id="%s:%s:gpu:%d-%d" % (SOURCE, host, first["id"], last["id"]), source=SOURCE, scope="gpu",
                    target=host, kind="down", start=first["sampled_at_us"], end=run[-1][1], gpus=count,
                    reason="nvidia-smi lists %d of %d GPUs%s" % (
                        want - count, want, "" if not last.get("gpu_rc") else " (nvidia-smi exit %s)" % last["gpu_rc"]),
                    evidence={"samples": [r["id"] for r, _ in run], "held_until": iso_utc(run[-1][1])}))
        prev = None
        for r in rows:
            if r["state"] != "up" or not r.get("boot_id"):
                continue
            if prev is not None and prev["boot_id"] != r["boot_id"]:
                boot = r["sampled_at_us"] - int((r.get("uptime_s") or 0) * US) if r.get("uptime_s") else None
                reboots.append({"host": host, "between": iso_utc(prev["sampled_at_us"]), "and": iso_utc(
                    r["sampled_at_us"]), "booted_at": iso_utc(boot) if boot else "", "samples": [prev["id"], r["id"]]})
            prev = r
    return events, monitored, reboots


def load(db_path: str, start_us: int, end_us: int, expected_gpus: dict | None = None, hold_intervals: float = 2,
         default_interval_s: float = 300):
    """Samples of [start, end) plus a margin before it (a down sample just before the month holds into it)."""
    margin = int(hold_intervals * max(default_interval_s, 3600) * US)
    rows = store.read_samples(db_path, start_us - margin, end_us)
    events, monitored, reboots = events_from_samples(rows, expected_gpus, hold_intervals, default_interval_s)
    return rows, events, monitored, reboots
