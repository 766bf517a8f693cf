"""The one rule for "can this check be graded on this host?": every grader asks it before it looks at results."""

from reports.grading.rows import make_row
from reports.grading.select import artifacts_of, find_artifact

# variant= for checks that grade every variant of a probe (one per storage tier): each is judged on its own.
ANY_VARIANT = object()
_CHECKS_VARIANT = object()


def ungradable(check, run, host, probe=None, variant=_CHECKS_VARIANT, subject="", error_is_final=False,
               grade_unreachable=False):
    """A skip (or error) row when the check cannot be graded on this host, else None. In this order:
    - the host is unreachable: skip, unless grade_unreachable and it left an artifact (a node that did not come
      back from a reboot is itself the finding);
    - the probe (check's `probe` unless given) left no artifact of the variant (check's `variant` unless given);
    - the artifact is skipped (its reason), or errored when error_is_final (its reason; otherwise the grader shows
      what results the errored probe still wrote);
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
        return make_row(check, host, "skip", reason="probe %s did not run on this host" % probe, subject=subject)
    if variant is ANY_VARIANT:
        return None
    doc = docs[0]
    if doc["status"] == "skipped":
        return make_row(check, host, "skip", reason=doc.get("reason"), subject=subject)
    if doc["status"] == "error" and error_is_final:
        return make_row(check, host, "error", reason=doc.get("reason"), subject=subject)
    backends = check.get("backends")
    if backends and doc["device"]["backend"] not in backends:
        return make_row(check, host, "skip", reason="backend=%s: expectation is for %s" % (
            doc["device"]["backend"], "/".join(backends)), subject=subject)
    return None
