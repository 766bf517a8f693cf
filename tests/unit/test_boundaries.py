"""The lines the layout draws, checked on the source (every module parsed with ast, nothing imported):

- nodes measure, the controller judges: nothing under probes/ imports reports/;
- probes/common is mechanics only: it holds no threshold, which here means no module-level name bound to a number
  whose name says it is a limit of judgement (…_PCT, …THRESHOLD…, WARN…, FAIL…, PASS…, MIN_…/MAX_… of a metric is
  not judged: those are sizes), and it reads no rubric data (no import of reports, no string naming reports/data,
  rubric or gpus.yml);
- the grading engine's private names stay private: nothing outside reports/grading imports an underscore name of
  reports.grading or reaches one through a module of it.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JUDGEMENT_NAME = re.compile(r"(_PCT$|THRESHOLD|^WARN|^FAIL|^PASS)")
RUBRIC_TEXT = re.compile(r"reports/data|rubric|gpus\.yml")


def modules(folder):
    return sorted(p for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts)


def parsed(path):
    return ast.parse(path.read_text(), filename=str(path))


def imported_modules(tree):
    """(line, module name) for every import statement, at any depth (imports inside functions count)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module


def test_the_trees_are_there():
    assert len(modules("probes")) > 50 and len(modules("probes/common")) >= 10 and len(modules("reports")) > 20


@pytest.mark.parametrize("path", modules("probes"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_probe_module_imports_reports(path):
    bad = [(line, name) for line, name in imported_modules(parsed(path))
           if name == "reports" or name.startswith("reports.")]
    assert bad == []


def _numeric(value):
    return isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) \
        and not isinstance(value.value, bool)


@pytest.mark.parametrize("path", modules("probes/common"), ids=lambda p: str(p.relative_to(ROOT)))
def test_probes_common_holds_no_threshold(path):
    tree = parsed(path)
    thresholds = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if any(_numeric(v) for v in values):
                thresholds += [(node.lineno, n) for n in names if JUDGEMENT_NAME.search(n)]
    prose = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr)}  # docstrings name things freely
    rubric = [(n.lineno, n.value) for n in ast.walk(tree)
              if isinstance(n, ast.Constant) and isinstance(n.value, str) and RUBRIC_TEXT.search(n.value)
              and id(n) not in prose]
    assert thresholds == [] and rubric == []


def _private(name):
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_grading_uses(tree):
    """(line, what) for every underscore name of reports.grading this module imports or reaches."""
    found = []
    grading_aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("reports.grading"):
            for alias in node.names:
                if _private(alias.name):
                    found.append((node.lineno, "%s.%s" % (node.module, alias.name)))
                else:
                    grading_aliases.add(alias.asname or alias.name)  # a submodule, or a public function
            found += [(node.lineno, node.module) for part in node.module.split(".") if _private(part)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module == "reports":
            grading_aliases.update(a.asname or a.name for a in node.names if a.name == "grading")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("reports.grading"):
                    grading_aliases.add(alias.asname or alias.name.split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, base = [], node.value
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if not isinstance(base, ast.Name) or base.id not in grading_aliases:
                continue
            dotted = ".".join([base.id] + chain)
            if base.id != "reports" or dotted.startswith("reports.grading"):  # `import reports.grading.x`
                found.append((node.lineno, "%s.%s" % (dotted, node.attr)))
    return sorted(found)


OUTSIDE_GRADING = [p for folder in ("reports", "tests", "plugins") for p in modules(folder)
                   if not p.is_relative_to(ROOT / "reports" / "grading")]


@pytest.mark.parametrize("path", OUTSIDE_GRADING, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_outside_grading_uses_its_private_names(path):
    assert private_grading_uses(parsed(path)) == []


def test_the_private_name_check_sees_what_it_should():
    """The rule on code that breaks it, so a check that never fires cannot pass unnoticed."""
    tree = ast.parse("from reports.grading.engine import _rows\nfrom reports.grading import engine as g\n"
                     "import reports.grading.engine\nx = g._select(1)\ny = reports.grading.engine._text\n"
                     "from reports.grading import make_row\nz = make_row.__name__\n")
    assert private_grading_uses(tree) == [(1, "reports.grading.engine._rows"), (4, "g._select"),
                                          (5, "reports.grading.engine._text")]
