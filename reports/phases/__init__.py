"""One package per phase, named as its probes package (`probes/<phase>/`) and its rubric (`data/rubric.d/<phase>.yml`).

A phase package may have `grade.py` (PER_HOST and CLUSTER: kind -> grader, for what the generic kinds of
reports.grading cannot judge) and `section.py` (ORDER, and blocks(run, rows, report_dir) -> a list of
reports.render.blocks, which report.md and report.html both render; plots go through reports.render.plots into
report_dir). Phases are found by listing this package: adding a phase edits nothing here, in the grading engine or
in the renderers.
"""

import importlib
import pkgutil


def names():
    return sorted(i.name for i in pkgutil.iter_modules(__path__) if i.ispkg and not i.name.startswith("_"))


def modules(part):
    """The `part` module ("grade" or "section") of every phase that has one, in phase-name order."""
    found = []
    for phase in names():
        try:
            found.append(importlib.import_module("%s.%s.%s" % (__name__, phase, part)))
        except ModuleNotFoundError as exc:
            if exc.name != "%s.%s.%s" % (__name__, phase, part):
                raise
    return found


def sections():
    """Report sections in report order."""
    return sorted(modules("section"), key=lambda m: (getattr(m, "ORDER", 100), m.__name__))
