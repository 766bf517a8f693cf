"""Grades a run directory of real artifacts (run_dir/artifacts/<host>/...) with some checks of the shipped rubric,
as the controller would: the probe tests' way to show what their artifacts are judged."""

import json


def grade_checks(run_dir, check_ids, hosts, run_id="r1"):
    """The rows of the rubric checks check_ids on run_dir (its assess_run.json written for hosts)."""
    from reports import grading
    from reports.load import load_run

    (run_dir / "assess_run.json").write_text(json.dumps({"hosts": list(hosts), "id": run_id, "provider": "local"}))
    rubric = grading.load_rubric()
    rubric["checks"] = [c for c in rubric["checks"] if c["id"] in check_ids]
    rubric.pop("consistency", None)
    return grading.grade(load_run(str(run_dir)), rubric)
