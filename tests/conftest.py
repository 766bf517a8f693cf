"""Shared pytest setup. Fixture logic lives next to what it drives (tests/cluster/ for the SSH test cluster)."""

import sys
from pathlib import Path

# tests/ on sys.path makes tests/cluster importable as the package `cluster`, whatever pytest's import mode.
_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from cluster.fixtures import test_cluster  # noqa: E402,F401  (a session fixture, re-exported for every test)


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the SSH test cluster (root, network namespaces)")
