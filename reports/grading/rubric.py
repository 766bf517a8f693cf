"""The rubric: rubric.yml plus one rubric.d/<phase>.yml per phase, each validated against
reports/data/schemas/rubric.schema.json when it is loaded."""

import glob
import os
from collections import Counter

import yaml

from reports import DATA_DIR
from reports.load import schema_problems


class RubricError(ValueError):
    """A rubric file that does not match its schema; the message names the file and the key of every problem."""


def _read_part(path, label):
    with open(path, encoding="utf-8") as fh:
        part = yaml.safe_load(fh) or {}
    problems = schema_problems(part, "rubric")
    if problems:
        raise RubricError("\n".join("%s: %s" % (label, p) for p in problems))
    return part


def load_rubric(path=None):
    """rubric.yml plus every rubric.d/*.yml beside it (one file per phase), checks in file order.
    A check id defined twice is an error: two judgements of one thing would contradict each other."""
    path = path or os.path.join(DATA_DIR, "rubric.yml")
    rubric = _read_part(path, os.path.basename(path))
    rubric.setdefault("checks", [])
    for extra in sorted(glob.glob(os.path.join(os.path.dirname(path), "rubric.d", "*.yml"))):
        part = _read_part(extra, "rubric.d/%s" % os.path.basename(extra))
        rubric["checks"].extend(part.get("checks", []))
    seen = Counter(c["id"] for c in rubric["checks"])
    dupes = sorted(i for i, n in seen.items() if n > 1)
    if dupes:
        raise RubricError("rubric defines these check ids more than once: %s" % ", ".join(dupes))
    return rubric
