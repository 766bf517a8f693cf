"""What a run actually ran, against what a rating needs (tiers.yml `profiles`, docs/ratings.md "Profile").

A rating needs the seed's methodology: the standard profile's durations and sizes; the full rating also needs the
full profile's 8-hour burn-in. The run's artifacts say what ran (a burn-in stopped after 20 minutes is a 20-minute
burn-in, whatever was asked), and the run says which profile it declared (the sizes no artifact records: message
sizes, GEMM shapes, checkpoint sizes). A run below the needed profile is a screening, never a medallion
(reports/rate.py).

- measured(run, measures): per measure, the smallest value any host recorded (the weakest host bounds what the
  run shows), or None when no host recorded it (the test did not run).
- judge(declared, measured, spec): the profile the run reached ("screening" below the needed one), what it lacks,
  and what the next profile would need.
"""

import os

from probes.burnin.sampler import read_jsonl
from reports.grading.select import plain_metrics

SCREENING = "screening"
READERS = ("metric", "fact", "param", "windows")


def validate_profiles(spec):
    """Problems of tiers.yml's `profiles` section (a list of text; empty when it is sound)."""
    problems = []
    order = spec.get("order") or []
    measures = spec.get("measures") or []
    ids = [m.get("id") for m in measures]
    if not order or len(set(order)) != len(order):
        problems.append("profiles.order: need a list of unique profile names")
    if spec.get("needed") not in order:
        problems.append("profiles.needed: %r is not in profiles.order" % spec.get("needed"))
    if not 0 <= float(spec.get("tolerance_pct", 0)) < 100:
        problems.append("profiles.tolerance_pct: must be in [0, 100)")
    if not ids or len(set(ids)) != len(ids):
        problems.append("profiles.measures: need a list of uniquely named measures")
    for m in measures:
        if sum(1 for key in READERS if key in m) != 1 or not m.get("probe") or not m.get("title"):
            problems.append("profiles.measures %s: needs a title, a probe and one of %s" % (m.get("id"),
                                                                                          "/".join(READERS)))
        if "windows" in m and m["windows"] != "fio":
            problems.append("profiles.measures %s: windows can only be 'fio'" % m.get("id"))
    for profile, minimums in (spec.get("minimums") or {}).items():
        if profile not in order:
            problems.append("profiles.minimums: %r is not in profiles.order" % profile)
        for mid in minimums or {}:
            if mid not in ids:
                problems.append("profiles.minimums.%s: %r is not a measure" % (profile, mid))
    return problems


def _fio_windows(run, doc):
    """The shortest (client count, phase) span of a storage soak's fio timeline (<probe>.fio.jsonl beside the
    artifact): first interval's start to last interval's end. The artifact keeps no per-phase time of its own."""
    spans = {}
    path = os.path.join(run.run_dir, "artifacts", doc["host"], "%s.fio.jsonl" % doc["probe"])
    for s in read_jsonl(path):
        if s.get("type") == "fio" and "t_start" in s and "t" in s:
            lo, hi = spans.get((s.get("clients"), s.get("phase")), (s["t_start"], s["t"]))
            spans[(s.get("clients"), s.get("phase"))] = (min(lo, s["t_start"]), max(hi, s["t"]))
    shortest = min((hi - lo for lo, hi in spans.values()), default=None)
    return None if shortest is None else round(shortest, 1)  # to a tenth of a second, as elapsed_s


def _read(run, doc, measure):
    if "metric" in measure:
        return plain_metrics(doc).get(measure["metric"])
    if "fact" in measure:
        value = (doc.get("facts") or {}).get(measure["fact"])
        return None if value is None else float(value)
    if "param" in measure:  # a size the probe ran with, as its role gave it (the artifact records the params)
        value = (doc.get("params") or {}).get(measure["param"])
        return None if value is None else float(value)
    return _fio_windows(run, doc)


def measured(run, measures):
    """[{id, title, unit, value, host, hosts {host: value}}]: per measure, the smallest value over the hosts (and over
    a probe's variants on a host: one per storage tier). A skipped artifact recorded nothing that ran."""
    out = []
    for measure in measures:
        hosts = {}
        for doc in run.artifacts:
            if doc["probe"] != measure["probe"] or doc["status"] == "skipped":
                continue
            value = _read(run, doc, measure)
            if value is not None:
                hosts[doc["host"]] = min(value, hosts.get(doc["host"], value))
        host = min(sorted(hosts), key=hosts.get) if hosts else None
        out.append({"id": measure["id"], "title": measure["title"], "unit": measure.get("unit", ""),
                    "value": hosts.get(host), "host": host, "hosts": hosts})
    return out


def amount(value, unit):
    """A duration or size as a reader takes it in: seconds below 2 minutes, minutes below an hour, then hours."""
    if unit == "s" and value >= 3600:
        return "%g h" % round(value / 3600, 2)
    if unit == "s" and value >= 120:
        return "%g min" % round(value / 60, 1)
    return "%g %s" % (round(value, 1), unit)


def _shortfalls(profile, declared, spec, by_id):
    """What keeps the run from `profile`: a declared profile below it, and its measures that did not run or ran
    below its minimums."""
    order, minimums = spec["order"], spec.get("minimums") or {}
    out = []
    if declared not in order:
        out.append("the run recorded no known profile (%s)" % (declared or "none"))
    elif order.index(declared) < order.index(profile):
        out.append("declared profile %s is below %s (its sizes are smaller)" % (declared, profile))
    for mid, minimum in (minimums.get(profile) or {}).items():
        m = by_id[mid]
        if m["value"] is None:
            out.append("%s not run (%s needs %s)" % (m["title"], profile, amount(minimum, m["unit"])))
        elif not _meets(m["value"], minimum, spec):
            out.append("%s %s on %s < %s" % (m["title"], amount(m["value"], m["unit"]), m["host"],
                                            amount(minimum, m["unit"])))
    return out


def _meets(value, minimum, spec):
    """value reaches minimum, less the tolerance: a run that did its whole planned time can read a little short
    (its clocks are read around, not at, the start and the end)."""
    return value >= minimum * (1 - float(spec.get("tolerance_pct", 0)) / 100)


def judge(declared, measures, spec):
    """{declared, needed, rating, lacks, next, measures}: rating is the most demanding profile reached, or
    "screening" below the needed one. lacks: what keeps the run from the needed profile (empty when rated);
    next: {profile, lacks} of the next profile up, or None at the top. A measure that did not run keeps the run from
    every profile that has a minimum for it: each is measurable on any cluster (the storage phase always finds the
    node's own disk), and leaving one out must not rate better than running it short (a skipped burn-in was a
    standard rating, a 58-minute one a screening)."""
    order, needed, minimums = spec["order"], spec["needed"], spec.get("minimums") or {}
    by_id = {m["id"]: m for m in measures}
    rows = []
    for m in measures:
        wanted = {p: minimums[p][m["id"]] for p in order if m["id"] in (minimums.get(p) or {})}
        need = wanted.get(needed)
        state = ("not run" if m["value"] is None else "no minimum" if need is None
                 else "met" if _meets(m["value"], need, spec) else "below")
        rows.append(dict(m, minimums=wanted, state=state))
    lacks = _shortfalls(needed, declared, spec, by_id)
    rating = SCREENING if lacks else needed
    following = None
    if not lacks:
        for profile in order[order.index(needed) + 1:]:
            missing = _shortfalls(profile, declared, spec, by_id)
            if missing:
                following = {"profile": profile, "lacks": missing}
                break
            rating = profile
    return {"declared": declared, "needed": needed, "rating": rating, "lacks": lacks, "next": following,
            "measures": rows}


def assess(run, tiers):
    """The profile judgement of a run under tiers.yml, or None when tiers.yml has no `profiles` section."""
    spec = tiers.get("profiles")
    if not spec:
        return None
    return judge(run.meta.get("profile"), measured(run, spec["measures"]), spec)


def ran_text(profile):
    """The durations and sizes that ran, for headlines: "burn-in 60.2 s, fabric soak 20.4 s, ..."."""
    return ", ".join("%s %s" % (m["title"], "not run" if m["value"] is None else amount(m["value"], m["unit"]))
                     for m in profile["measures"])


def rating_text(profile):
    """"screening", "standard rating", "full rating"."""
    return profile["rating"] if profile["rating"] == SCREENING else "%s rating" % profile["rating"]
