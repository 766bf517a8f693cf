"""Grading of the GPU compute phase: metric checks on one dtype of a multi-dtype artifact.

The compute probes (gemm, grouped_gemm, gemv, mamf) measure several dtypes in one artifact and record per dtype
whether it ran: facts `dtype.<d>` (ok | skipped | error) and `dtype_reason.<d>`. A `dtype_metric` check is a
`metric` check (reports.grading.kinds.grade_metric) restricted to results labelled with its `dtype`, that first
looks at that record: a dtype the GPU or torch cannot run shows as skip with the probe's reason (mxfp8 on a Hopper GPU,
tf32 on the CPU backend), a dtype that faulted as error, instead of an anonymous "no result".
"""

from reports.grading.kinds import grade_metric
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row
from reports.grading.select import find_artifact, selection


def dtype_status(doc, dtype):
    """(status, reason) the probe recorded for this dtype, or (None, None) when it was not asked for."""
    facts = doc.get("facts") or {}
    return facts.get("dtype.%s" % dtype), facts.get("dtype_reason.%s" % dtype)


def grade_dtype_metric(check, run, host, models=None):
    dtype = check["dtype"]
    merged = dict(check, labels=dict(check.get("labels") or {}, dtype=dtype))
    # The probe's record of the dtype comes before the backend gate: "no mxfp8 tensor cores" says more than
    # "the expectation is for cuda".
    if ungradable(dict(check, backends=None), run, host) is None:
        doc = find_artifact(run, host, check["probe"], check.get("variant"))
        status, reason = dtype_status(doc, dtype)
        if status == "skipped":
            return [make_row(check, host, "skip", reason=reason or "%s skipped by the probe" % dtype)]
        if status is None:
            return [make_row(check, host, "skip", reason="%s was not measured in this run (dtypes: %s)"
                             % (dtype, (doc.get("facts") or {}).get("dtypes") or "none"))]
        if status == "error" and not len(selection(run, merged, host)):
            return [make_row(check, host, "error", "no result", reason=reason)]
    return grade_metric(merged, run, host, models=models)


# Registered by reports.grading.kinds.register_phase_kinds (per host: fn(check, run, host) -> rows).
PER_HOST = {"dtype_metric": grade_dtype_metric}
CLUSTER = {}
