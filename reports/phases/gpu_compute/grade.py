"""Grading of the GPU compute phase: metric checks on one dtype of a multi-dtype artifact.

The compute probes (gemm, grouped_gemm, gemv, mamf) measure several dtypes in one artifact and record per dtype
whether it ran: facts `dtype.<d>` (ok | skipped | error) and `dtype_reason.<d>`. A `dtype_metric` check is a
`metric` check (reports.grading.engine.grade_metric) restricted to results labelled with its `dtype`, that first
looks at that record: a dtype the GPU or torch cannot run shows as skip with the probe's reason (mxfp8 on a Hopper GPU,
tf32 on the CPU backend), a dtype that faulted as error, instead of an anonymous "no result".
"""

from reports.grading import engine as grade


def dtype_status(doc, dtype):
    """(status, reason) the probe recorded for this dtype, or (None, None) when it was not asked for."""
    facts = doc.get("facts") or {}
    return facts.get("dtype.%s" % dtype), facts.get("dtype_reason.%s" % dtype)


def grade_dtype_metric(check, run, host, models=None):
    dtype = check["dtype"]
    doc = run.artifact(host, check["probe"], check.get("variant"))
    if doc is not None and host not in run.unreachable and doc["status"] != "skipped":
        status, reason = dtype_status(doc, dtype)
        if status == "skipped":
            return [grade.make_row(check, host, "skip", reason=reason or "%s skipped by the probe" % dtype)]
        if status is None:
            return [grade.make_row(check, host, "skip", reason="%s was not measured in this run (dtypes: %s)"
                               % (dtype, (doc.get("facts") or {}).get("dtypes") or "none"))]
        sel = grade.select_rows(run, dict(check, labels=dict(check.get("labels") or {}, dtype=dtype)), host)
        if status == "error" and not len(sel):
            return [grade.make_row(check, host, "error", "no result", reason=reason)]
    merged = dict(check, labels=dict(check.get("labels") or {}, dtype=dtype))
    return grade.grade_metric(merged, run, host, models=models)


# Registered by reports.grading.engine.load_phase_graders (per host: fn(check, run, host) -> rows).
PER_HOST = {"dtype_metric": grade_dtype_metric}
CLUSTER = {}
