"""What the two halves of the orchestration phase share: each probe runs once, from one host, so its checks are
cluster kinds whose rows go to the host that ran it; and the percentiles their latency tables and checks use."""

import math

from reports.grading.preconditions import ungradable
from reports.grading.rows import ARTIFACT_STATUS, make_row
from reports.grading.select import find_artifact


def runners(run, probe):
    """The hosts that left an artifact of the probe: where the rows of a one-host probe go. (The journal lists the
    probe's task on every host, skipped where it did not run, so "attempted" cannot tell the runner.)"""
    return [h for h in run.hosts if find_artifact(run, h, probe) is not None]


def on_runners(grade_host):
    """A per-host grader fn(check, run, host) as a cluster kind: rows only on the host(s) that ran the check's
    probe; on every host (their skip rows, with the reason the probe did not run) when none did."""
    def grade(check, run, hosts):
        return [row for host in (runners(run, check["probe"]) or hosts) for row in grade_host(check, run, host)]
    grade.__doc__ = grade_host.__doc__
    return grade


@on_runners
def grade_ran(check, run, host):
    """Kind `orch_ran`: the probe's artifact is ok (skipped: a skip with its reason; error: an error)."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"])
    return [make_row(check, host, ARTIFACT_STATUS[doc["status"]], doc["status"], "ok", doc.get("reason"))]


def percentile(values, q):
    """The q-th percentile (0..100) of values, linear between closest ranks; None for no values."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    pos = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def distribution(values):
    """{n, p50, p90, max} of the values (None where there are none)."""
    vals = [v for v in values if v is not None]
    return {"n": len(vals), "p50": percentile(vals, 50), "p90": percentile(vals, 90),
            "max": max(vals) if vals else None}
