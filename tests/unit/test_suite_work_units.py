"""How `make test` splits the suite over its two workers (tests/conftest.py): every module that uses the
SSH test cluster in one unit of work, each other integration module whole, each unit test alone."""

from pathlib import Path

import conftest

ROOT = Path(__file__).resolve().parents[2]


def _modules(folder):
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests" / folder).glob("test_*.py"))


def test_every_module_that_uses_the_test_cluster_is_in_the_cluster_unit():
    units = {path: conftest._work_unit(path + "::test_x") for path in _modules("integration") + _modules("cluster")}
    cluster = {path for path, unit in units.items() if unit == "cluster"}
    # the ones that bring hosts of their own or none run beside the cluster worker
    assert set(units) - cluster == {"tests/integration/test_callback_runner.py", "tests/integration/test_local_demo.py",
                                    "tests/integration/test_molecule.py", "tests/integration/test_reliability.py",
                                    "tests/integration/test_report_browser.py"}
    assert {"tests/cluster/test_cluster.py", "tests/integration/test_tools.py",
            "tests/integration/test_concurrent_runs.py", "tests/integration/test_launchers.py"} <= cluster
    for path in set(units) - cluster:  # each whole: its module fixture runs once
        assert conftest._work_unit(path + "::test_a") == conftest._work_unit(path + "::test_b[1]") == path


def test_each_unit_test_is_a_unit_of_its_own():
    a, b = "tests/unit/test_artifact.py::test_a", "tests/unit/test_artifact.py::test_b"
    assert conftest._work_unit(a) == a and conftest._work_unit(b) == b
