"""The rubric: rubric.yml plus one rubric.d/<phase>.yml per phase and not_implemented.yml (the seed's tests not built
yet), each validated against reports/data/schemas/rubric.schema.json when it is loaded."""

import functools
import glob
import os
from collections import Counter

from reports import DATA_DIR, yamlio
from reports.load import schema_problems


class RubricError(ValueError):
    """A rubric file that does not match its schema; the message names the file and the key of every problem."""


def _read_part(path, label):
    with open(path, encoding="utf-8") as fh:
        part = yamlio.safe_load(fh) or {}
    problems = schema_problems(part, "rubric")
    if problems:
        raise RubricError("\n".join("%s: %s" % (label, p) for p in problems))
    return part


# Beside rubric.yml: the tests of the seed's methodology this version does not run yet, one placeholder check each
# (kind not_implemented). A phase that builds one moves its entry into rubric.d/<phase>.yml, same id, real kind.
NOT_IMPLEMENTED = "not_implemented.yml"


def load_rubric(path=None):
    """rubric.yml plus every rubric.d/*.yml beside it (one file per phase), then not_implemented.yml's placeholders,
    checks in file order. A check id defined twice is an error: two judgements of one thing would contradict each
    other (and a placeholder left behind by a phase that built its test would hide nothing but say it is missing)."""
    path = path or os.path.join(DATA_DIR, "rubric.yml")
    rubric = _read_part(path, os.path.basename(path))
    rubric.setdefault("checks", [])
    for extra in sorted(glob.glob(os.path.join(os.path.dirname(path), "rubric.d", "*.yml"))):
        part = _read_part(extra, "rubric.d/%s" % os.path.basename(extra))
        rubric["checks"].extend(part.get("checks", []))
    placeholders = os.path.join(os.path.dirname(path), NOT_IMPLEMENTED)
    if os.path.exists(placeholders):
        checks = _read_part(placeholders, NOT_IMPLEMENTED).get("checks", [])
        real = sorted(c["id"] for c in checks if c["kind"] != "not_implemented")
        if real:
            raise RubricError("%s holds only placeholders (kind not_implemented); move %s to rubric.d/<phase>.yml"
                              % (NOT_IMPLEMENTED, ", ".join(real)))
        built = {c["id"] for c in rubric["checks"]} & {c["id"] for c in checks}
        if built:
            raise RubricError("%s is built now: remove its placeholder from %s" % (", ".join(sorted(built)),
                                                                                  NOT_IMPLEMENTED))
        rubric["checks"].extend(checks)
    seen = Counter(c["id"] for c in rubric["checks"])
    dupes = sorted(i for i, n in seen.items() if n > 1)
    if dupes:
        raise RubricError("rubric defines these check ids more than once: %s" % ", ".join(dupes))
    return rubric


@functools.cache
def shipped_checks():
    """{id: check} of the shipped rubric, loaded once: for a grader or a report section that reads another check's
    settings (read only: the dicts are shared)."""
    return {c["id"]: c for c in load_rubric()["checks"]}


def graded_checks(run, match):
    """The rubric checks for which match(check) is true, as the run's rows were graded with them
    (reports.grading.grade: run.graded_with), else the shipped rubric's: where a section or a grader reads the lines a
    value was judged against, so that it shows or counts the value as the check's row did."""
    graded = [c for c in (getattr(run, "graded_with", None) or {}).get("checks") or () if match(c)]
    return graded or [c for c in shipped_checks().values() if match(c)]
