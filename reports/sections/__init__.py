"""Report sections, one module per phase: each has ORDER (int) and render(run, rows, report_dir) -> markdown.

A section may write plots (PNG, matplotlib's Agg backend) into report_dir and link them by file name.
Sections are found by listing this package, so adding a phase never edits the renderer.
"""

import importlib
import pkgutil


def modules():
    found = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            found.append(importlib.import_module("%s.%s" % (__name__, info.name)))
    return sorted(found, key=lambda m: (getattr(m, "ORDER", 100), m.__name__))


def render_all(run, rows, report_dir):
    parts = []
    for module in modules():
        text = module.render(run, rows, report_dir)
        if text:
            parts.append(text.rstrip() + "\n")
    return "\n".join(parts)
