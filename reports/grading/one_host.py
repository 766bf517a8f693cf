"""Probes that run once, from one host (the orchestration and monitoring phases' probes): their checks are cluster
kinds whose rows go to the host that left the artifact, not a per-host kind with a skip row on every other host."""

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
    """Kind `one_host_artifact`: the probe's artifact is ok (skipped: a skip with its reason; error: an error)."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"])
    return [make_row(check, host, ARTIFACT_STATUS[doc["status"]], doc["status"], "ok", doc.get("reason"))]
