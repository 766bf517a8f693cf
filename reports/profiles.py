"""What a run actually ran, against what a rating needs (tiers.yml `profiles`, docs/ratings.md "Profile").

A rating needs the seed's methodology: the standard profile's durations and sizes; the full rating also needs the
full profile's 8-hour burn-in. The run's artifacts say what ran (a burn-in stopped after 20 minutes is a 20-minute
burn-in, whatever was asked; a soak cut down to 1 client or 4 KiB messages records that), and the run says which
profile it declared (the sizes no artifact records: other probes' message sizes and GEMM shapes). A run below the
needed profile is a screening, never a medallion (reports/rate.py).

- measured(run, measures): per measure, the smallest value any host recorded (the weakest host bounds what the
  run shows), or None when no host recorded it (the test did not run). A set measure (the storage soak's client
  counts) holds the values every host recorded.
- judge(declared, measured, spec): the profile the run reached ("screening" below the needed one), what it lacks,
  and what the next profile would need.
"""

import functools
import os

from probes.burnin.sampler import read_jsonl
from reports.grading.select import plain_metrics

SCREENING = "screening"
READERS = ("metric", "fact", "param", "windows", "label")
GPU_BACKENDS = ("cuda", "rocm")
KINDS = ("gpu", "cpu")  # a minimum by backend: {gpu: …, cpu: …} (the role's sizes differ on CPU nodes)


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
        if "every_host" in m and not isinstance(m["every_host"], bool):
            problems.append("profiles.measures %s: every_host is true or false" % m.get("id"))
        if "windows" in m and m["windows"] != "fio":
            problems.append("profiles.measures %s: windows can only be 'fio'" % m.get("id"))
        if "less_fact" in m and "metric" not in m:
            problems.append("profiles.measures %s: less_fact goes with a metric" % m.get("id"))
        if m.get("set") and "label" not in m:
            problems.append("profiles.measures %s: only a label can be read as a set" % m.get("id"))
    by_id = {m.get("id"): m for m in measures}
    for profile, minimums in (spec.get("minimums") or {}).items():
        if profile not in order:
            problems.append("profiles.minimums: %r is not in profiles.order" % profile)
        for mid, minimum in (minimums or {}).items():
            if mid not in ids:
                problems.append("profiles.minimums.%s: %r is not a measure" % (profile, mid))
                continue
            where = "profiles.minimums.%s.%s" % (profile, mid)
            if by_id[mid].get("set"):
                if not isinstance(minimum, list) or not all(_number(v) for v in minimum):
                    problems.append("%s: needs a list of numbers (the measure is a set)" % where)
            elif isinstance(minimum, dict):
                if set(minimum) != set(KINDS) or not all(_number(v) for v in minimum.values()):
                    problems.append("%s: a minimum by backend needs gpu and cpu numbers" % where)
            elif not _number(minimum):
                problems.append("%s: needs a number, or {gpu: …, cpu: …}" % where)
    return problems


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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


def _kind(doc):
    """"gpu" for an artifact of GPUs (cuda or rocm, and GPUs found), else "cpu": the burn-in's default sizes differ
    (probes/burnin/runner.py: GEMM n 8192 on GPUs, 512 on the CPU; messages 256 MiB on GPUs, 1 MiB on the CPU)."""
    device = doc.get("device") or {}
    return "gpu" if device.get("backend") in GPU_BACKENDS and (device.get("count") or 0) > 0 else "cpu"


def _labelled(doc, measure):
    """The values of a label over the artifact's results (the sizes a soak ran at: `size`, `size_bytes`, `clients`):
    the smallest, or for a set measure all of them (sorted). None when no result carries it."""
    values = sorted({r["labels"][measure["label"]] for r in doc.get("results") or []
                     if _number((r.get("labels") or {}).get(measure["label"]))})
    if not values:
        return None
    return values if measure.get("set") else values[0]


def _read(run, doc, measure):
    """The measure's value in one artifact (None: not recorded), and whether a `less_fact` was missing from it."""
    if "label" in measure:
        return _labelled(doc, measure), False
    if "metric" in measure:
        value = plain_metrics(doc).get(measure["metric"])
        if value is None or "less_fact" not in measure:
            return value, False
        # time under load: elapsed_s counts from the runner's start, load_from_s is when every load ran (the
        # collective world formed: probes/burnin/runner.py _start_the_load_clock), where the duration's clock starts
        less = (doc.get("facts") or {}).get(measure["less_fact"])
        try:
            return round(value - float(less), 1), False
        except (TypeError, ValueError):  # no load start (older probes; or no collective record, so no t_load):
            # all there is, from the start
            return value, True
    if "fact" in measure:
        value = (doc.get("facts") or {}).get(measure["fact"])
        return None if value is None else float(value), False
    if "param" in measure:  # a size the probe ran with, as its role gave it (the artifact records the params)
        value = (doc.get("params") or {}).get(measure["param"])
        return None if value is None else float(value), False
    return _fio_windows(run, doc), False


def _weaker(a, b):
    """The lesser of two readings of one host (two variants): the smaller number, or the values both sets hold."""
    if isinstance(a, list):
        return sorted(set(a) & set(b))
    return min(a, b)


@functools.cache
def _phase_of_probe():
    """{probe name: its phase} from the probes' own registry (probes/<phase>/…)."""
    from probes.registry import PROBES

    return {name: module.split(".")[1] for name, module in PROBES.items()}


def phase_hosts(run, measures, measure):
    """The hosts an `every_host` measure's phase ran on: those with an artifact (whatever its status) of a probe that
    an every_host measure of the same phase reads (the burn-in phase: burnin, fabric_soak, storage_soak), or a
    journal line of one (a task ran or tried it there). A host that was not reached and left no such artifact is the
    gate unassessed_nodes', not a host the phase ran on; neither is one that dropped out before the phase (no line).
    A phase not selected has none."""
    phases = _phase_of_probe()
    phase = phases.get(measure["probe"], measure["probe"])
    probes = {m["probe"] for m in measures if m.get("every_host") and phases.get(m["probe"], m["probe"]) == phase}
    with_artifact = {d["host"] for d in run.artifacts if d["probe"] in probes}
    tried = {h for h in run.hosts if h not in run.unreachable and any(run.attempted(h, p) for p in probes)}
    return sorted(with_artifact | tried)


def measured(run, measures):
    """[{id, title, unit, value, host, hosts {host: value}, kinds {host: gpu|cpu}, missing [host]}]: per measure, the
    smallest value over the hosts (and over a probe's variants on a host: one per storage tier), and the host that
    bounds it. A set measure's value is what every host recorded (the client counts all of them ran), its host the
    one that recorded the fewest. A skipped artifact recorded nothing that ran.

    An `every_host` measure must be recorded on every host its phase ran on (phase_hosts): one that recorded nothing
    (the burn-in faulted at its start there, or the soak was skipped) did not run it, and bounds the run below any
    minimum: value None, host the first such host, missing all of them. Other measures count the hosts that recorded
    them (the fio sweep's driver records the sweep, its servers nothing)."""
    out = []
    for measure in measures:
        hosts, kinds, from_start = {}, {}, set()
        for doc in run.artifacts:
            if doc["probe"] != measure["probe"] or doc["status"] == "skipped":
                continue
            value, without = _read(run, doc, measure)
            if value is not None:
                host = doc["host"]
                if without:
                    from_start.add(host)
                hosts[host] = _weaker(value, hosts[host]) if host in hosts else value
                kinds[host] = "gpu" if "gpu" in (kinds.get(host), _kind(doc)) else "cpu"
        if measure.get("set"):
            host = min(sorted(hosts), key=lambda h: len(hosts[h])) if hosts else None
            value = sorted(set.intersection(*(set(v) for v in hosts.values()))) if hosts else None
        else:
            host = min(sorted(hosts), key=hosts.get) if hosts else None
            value = hosts.get(host)
        missing = [h for h in phase_hosts(run, measures, measure) if h not in hosts] if measure.get("every_host") \
            else []
        if missing:
            value, host = None, missing[0]
        note = None
        if from_start:
            note = ("%s counted from its start on %s: the artifact records no load start (%s: older probes, or "
                    "collectives that never began), so start-up time is in it" % (
                        measure["title"], _hosts_text(sorted(from_start)), measure["less_fact"]))
        out.append({"id": measure["id"], "title": measure["title"], "unit": measure.get("unit", ""),
                    "value": value, "host": host, "hosts": hosts, "kinds": kinds, "missing": missing, "note": note})
    return out


def _hosts_text(hosts, most=5):
    return ", ".join(hosts[:most]) + (" and %d more" % (len(hosts) - most) if len(hosts) > most else "")


def _not_run(m):
    """ "not run", or "not run on n2, n3" when the measure ran on other hosts of its phase but not on these."""
    return "not run on %s" % _hosts_text(m["missing"]) if m.get("missing") else "not run"


BYTES = ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def amount(value, unit):
    """A duration or size as a reader takes it in: seconds below 2 minutes, minutes below an hour, then hours; bytes
    in the largest binary unit they reach; a set as its values; a minimum by backend as each one's."""
    if isinstance(value, dict):
        return ", ".join("%s on %s" % (amount(value[k], unit), "GPUs" if k == "gpu" else "CPUs")
                         for k in KINDS if k in value)
    if isinstance(value, (list, tuple)):
        return ", ".join("%g" % v for v in value) + (" %s" % unit if unit else "")
    if unit == "B":
        for size, name in BYTES:
            if value >= size:
                return "%g %s" % (round(value / size, 2), name)
    if not unit:
        return "%g" % round(value, 1)
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
            out.append("%s %s (%s needs %s)" % (m["title"], _not_run(m), profile, amount(_shown(minimum, m),
                                                                                          m["unit"])))
            continue
        short = _short(m, minimum, spec)
        if short and isinstance(minimum, list):
            out.append("%s %s on %s (%s needs %s)" % (m["title"], amount(short[1], m["unit"]), short[0], profile,
                                                      amount(minimum, m["unit"])))
        elif short:
            out.append("%s %s on %s < %s" % (m["title"], amount(short[1], m["unit"]), short[0],
                                            amount(short[2], m["unit"])))
    return out


def _meets(value, minimum, spec):
    """value reaches minimum, less the tolerance: a run that did its whole planned time can read a little short
    (its clocks are read around, not at, the start and the end). A set reaches a list when it holds all of it."""
    if isinstance(minimum, list):
        return set(minimum) <= set(value)
    return value >= minimum * (1 - float(spec.get("tolerance_pct", 0)) / 100)


def _short(m, minimum, spec):
    """None when the measure reaches minimum, else (host, its value, the minimum it falls short of). A minimum by
    backend holds each host to its own ({gpu, cpu}: a CPU node's burn-in runs the CPU's sizes): the host furthest
    below its minimum bounds the run. A set measure falls short on its weakest host (what every host ran lacks)."""
    if isinstance(minimum, dict):
        kinds = m.get("kinds") or {}
        hosts = m.get("hosts") or {m["host"]: m["value"]}
        below = [(value / minimum[kinds.get(host, "gpu")], host, value, minimum[kinds.get(host, "gpu")])
                 for host, value in sorted(hosts.items())
                 if not _meets(value, minimum[kinds.get(host, "gpu")], spec)]
        return min(below)[1:] if below else None
    if _meets(m["value"], minimum, spec):
        return None
    if isinstance(minimum, list):
        host = m["host"]
        return host, (m.get("hosts") or {}).get(host, m["value"]), minimum
    return m["host"], m["value"], minimum


def _shown(minimum, m):
    """A minimum as the run's hosts need it: by backend, the one of their backend when they all have one."""
    if isinstance(minimum, dict):
        kinds = set((m.get("kinds") or {}).values())
        if len(kinds) == 1:
            return minimum[kinds.pop()]
    return minimum


def judge(declared, measures, spec):
    """{declared, needed, rating, lacks, next, notes, measures}: rating is the most demanding profile reached, or
    "screening" below the needed one. lacks: what keeps the run from the needed profile (empty when rated);
    next: {profile, lacks} of the next profile up, or None at the top; notes: how a measure was read when the run
    could not read it as meant (a duration counted from the start: no load start recorded). A measure that did not
    run keeps the run from every profile that has a minimum for it: each is measurable on any cluster (the storage
    phase always finds the node's own disk), and leaving one out must not rate better than running it short (a
    skipped burn-in was a standard rating, a 58-minute one a screening); so does one that did not run on a host of
    its phase ("burn-in not run on n2"): the weakest host bounds what the run shows."""
    order, needed, minimums = spec["order"], spec["needed"], spec.get("minimums") or {}
    by_id = {m["id"]: m for m in measures}
    rows = []
    for m in measures:
        wanted = {p: minimums[p][m["id"]] for p in order if m["id"] in (minimums.get(p) or {})}
        need = wanted.get(needed)
        state = ("not run" if m["value"] is None else "no minimum" if need is None
                 else "below" if _short(m, need, spec) else "met")
        rows.append(dict(m, minimums={p: _shown(v, m) for p, v in wanted.items()}, state=state))
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
            "notes": [m["note"] for m in measures if m.get("note")], "measures": rows}


def assess(run, tiers):
    """The profile judgement of a run under tiers.yml, or None when tiers.yml has no `profiles` section."""
    spec = tiers.get("profiles")
    if not spec:
        return None
    return judge(run.meta.get("profile"), measured(run, spec["measures"]), spec)


def ran_text(profile):
    """The durations and sizes that ran, for headlines: "burn-in 60.2 s, fabric soak 20.4 s, ..."."""
    return ", ".join("%s %s" % (m["title"], _not_run(m) if m["value"] is None else amount(m["value"], m["unit"]))
                     for m in profile["measures"])


def rating_text(profile):
    """"screening", "standard rating", "full rating"."""
    return profile["rating"] if profile["rating"] == SCREENING else "%s rating" % profile["rating"]
