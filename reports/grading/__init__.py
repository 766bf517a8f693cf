"""The grading engine: pure functions from a loaded run (reports.load.Run) and the rubric to check rows.

    rows           make_row, text_of, CHECK_COLUMNS, STATUS_ORDER, summarize, status_above / status_below
    select         the run's index; selection, groups_of, AGGREGATES, find_artifact, artifacts_of, host_model_spec
    preconditions  ungradable: the one "can this check be graded on this host?" rule
    kinds          the generic kinds (reachable, tasks, artifact, metric, straggler, consistency, not_implemented)
                   and the registry
    rubric         load_rubric, validated against reports/data/schemas/rubric.schema.json
    expectations   gpus.yml and the comparisons with their wording

Each phase's own kinds live in reports/phases/<phase>/grade.py (PER_HOST and CLUSTER: kind -> grader).
"""

from reports.grading.kinds import CLUSTER_KINDS, PER_HOST_KINDS, grade_consistency, register_phase_kinds
from reports.grading.preconditions import ANY_VARIANT, ungradable
from reports.grading.rows import CHECK_COLUMNS, STATUS_ORDER, make_row, summarize, text_of
from reports.grading.rubric import RubricError, load_rubric
from reports.grading.select import find_artifact, run_index, selection

__all__ = ["ANY_VARIANT", "CHECK_COLUMNS", "STATUS_ORDER", "RubricError", "find_artifact", "grade", "load_rubric",
           "make_row", "selection", "summarize", "text_of", "ungradable"]


def grade(run, rubric=None, progress=None):
    """Check rows of a run. progress(done, total, label), when given, is called before each check."""
    register_phase_kinds()
    rubric = rubric or load_rubric()
    # what the rows were graded with: a section that counts with a check's own settings (inference's goodput SLOs)
    # shows the same numbers as the check's rows, a regrade with another rubric included
    run.graded_with = rubric
    # While grading, the index is built once and pinned, and run.artifact(host, probe, variant) - which graders
    # call per check and host - answers from it (same first match) instead of scanning artifacts.
    index = run_index(run)
    run.__dict__["_grade_index_pinned"] = index
    run.__dict__["artifact"] = lambda host, probe, variant=None: index.artifacts.get((host, probe, variant))
    try:
        return _grade_checks(run, rubric, progress)
    finally:
        run.__dict__.pop("_grade_index_pinned", None)
        run.__dict__.pop("artifact", None)


def _grade_checks(run, rubric, progress):
    rows = []
    checks = rubric.get("checks", [])
    for position, check in enumerate(checks):
        if progress:
            progress(position, len(checks) + 1, check["id"])
        kind = check["kind"]
        if kind in PER_HOST_KINDS:
            for host in run.hosts:
                rows.extend(PER_HOST_KINDS[kind](check, run, host))
        elif kind in CLUSTER_KINDS:
            rows.extend(CLUSTER_KINDS[kind](check, run, run.hosts))
        else:
            raise ValueError("check %s has unknown kind %r" % (check["id"], kind))
    if progress:
        progress(len(checks), len(checks) + 1, "consistency")
    if rubric.get("consistency"):
        rows.extend(grade_consistency(rubric["consistency"], run, run.hosts))
    return rows
