"""pytest side of the SSH test cluster: the session-wide `test_cluster` fixture (imported by tests/conftest.py).

Environment: CMXA_HOSTS (host count, default 4), CMXA_KEEP_CLUSTER=1 (leave the cluster up after the session, to
look at it or to make the next session start faster), plus everything cluster.py reads (CMXA_STATE_DIR, ...).
"""

from __future__ import annotations

import os

import pytest

from .cluster import Cluster, preflight


@pytest.fixture(scope="session")
def test_cluster():
    """N real SSH hosts (network namespaces, see cluster.py), up for the whole session, removed at its end."""
    reason = preflight()
    if reason:
        pytest.skip(reason)
    cluster = Cluster()
    try:
        cluster.up(int(os.environ.get("CMXA_HOSTS", "4")))
        yield cluster
    finally:
        # Also after failing tests and after a failed `up`: down tolerates missing pieces.
        if os.environ.get("CMXA_KEEP_CLUSTER") != "1":
            cluster.down()
