"""The one rule for "can this check be graded on this host?": every grader asks it before it looks at results."""

import functools
import os

from reports.grading.rows import make_row
from reports.grading.select import artifacts_of, find_artifact, host_failed_tasks, run_index

# variant= for checks that grade every variant of a probe (one per storage tier): each is judged on its own.
ANY_VARIANT = object()
_CHECKS_VARIANT = object()


def ungradable(check, run, host, probe=None, variant=_CHECKS_VARIANT, subject="", error_is_final=False,
               grade_unreachable=False):
    """A skip (or error) row when the check cannot be graded on this host, else None. In this order:
    - the host is unreachable: skip, unless grade_unreachable and it left an artifact (a node that did not come
      back from a reboot is itself the finding);
    - the probe (check's `probe` unless given) left no artifact of the variant (check's `variant` unless given);
    - the artifact is skipped (its reason), or errored (its reason) when error_is_final or it holds no result and
      no fact:
      a probe that faulted before it measured anything is an error for every check it feeds, never a skip (its
      artifact, written by the controller, knows no backend either); otherwise the grader shows what results the
      errored probe still wrote;
    - its backend is not one of the check's `backends` (GPU expectations on a CPU backend).
    With variant=ANY_VARIANT only the first two apply: the grader judges each variant's status itself."""
    probe = probe or check["probe"]
    if variant is ANY_VARIANT:
        docs = artifacts_of(run, host, probe)
    else:
        doc = find_artifact(run, host, probe, check.get("variant") if variant is _CHECKS_VARIANT else variant)
        docs = [doc] if doc is not None else []
    if host in run.unreachable and not (grade_unreachable and docs):
        return make_row(check, host, "skip", reason="host unreachable", subject=subject)
    if not docs:
        bad = refused_artifact(run, host, probe)
        if bad:  # it ran and wrote an artifact the run cannot take as its own: an error, not a test not run
            return make_row(check, host, "error", reason="%s: %s" % (bad["path"], bad["error"]), subject=subject)
        why = None if run.attempted(host, probe) else not_run_reason(run, host, probe)
        return make_row(check, host, "skip", reason=why or "probe %s did not run on this host" % probe,
                        subject=subject)
    if variant is ANY_VARIANT:
        return None
    doc = docs[0]
    if doc["status"] == "skipped":
        return make_row(check, host, "skip", reason=doc.get("reason"), subject=subject)
    if doc["status"] == "error" and (error_is_final or not (doc.get("results") or doc.get("facts"))):
        return make_row(check, host, "error", reason=doc.get("reason"), subject=subject)
    backends = check.get("backends")
    if backends and doc["device"]["backend"] not in backends:
        return make_row(check, host, "skip", reason="backend=%s: expectation is for %s" % (
            doc["device"]["backend"], "/".join(backends)), subject=subject)
    return None


def refused_artifact(run, host, probe):
    """The load error of the host's artifact of this probe (<probe>.json or <probe>-<variant>.json) that the run
    refused (invalid, or another run's or probes version's: reports/load.py), or None."""
    for e in run.load_errors:
        name = os.path.basename(e["path"])
        if e.get("host") == host and (name == probe + ".json" or name.startswith(probe + "-")):
            return e
    return None


@functools.cache
def _phase_of_probe():
    """{probe name: its phase} from the probes' own registry (a phase package names its probes in PROBES)."""
    from probes.registry import PROBES

    return {name: module.split(".")[1] for name, module in PROBES.items()}


def phase_not_selected(run, probe):
    """The probe's phase when the run's journal shows no task of that phase on any host (it was left out with
    --tags), else None. A run without a journal (artifacts read on their own) cannot tell: None."""
    phases = _phase_of_probe()
    phase = phases.get(probe)
    if phase is None or not run.journal:
        return None
    ran = {phases.get(name) for name in run_index(run).journal_probes}
    return None if phase in ran else phase


def not_run_reason(run, host, probe):
    """Why a probe that no task attempted on this host left nothing, when the run tells: the host dropped out after
    a failed task, or the probe's phase was not selected in this run. None otherwise (the probe alone was switched
    off, or the run has no journal): the caller says what it can."""
    failed = host_failed_tasks(run, host)
    if failed:
        return "not run: the host dropped out after the failed task %r" % failed[0]
    phase = phase_not_selected(run, probe)
    if phase:
        return "not run: phase not selected (no task of the %s phase ran in this run)" % phase
    return None
