"""Shared pytest setup. Fixture logic lives next to what it drives (tests/cluster/ for the SSH test cluster).

`make test-parallel` runs the suite on pytest-xdist workers, one test module at a time per worker (`--dist loadscope`),
so that module fixtures (one playbook run shared by a module's assertions) stay whole. Most of an integration module's
time is spent waiting on SSH, probes' fixed durations and sleeps, which other workers fill. What that needs:

* every worker brings up a test cluster of its own (prefix, subnet and state directory derived from the worker's
  name, below), so no two workers share hosts, ports, Slurm daemons or run directories;
* the modules start longest first (`--no-loadscope-reorder` keeps this order; xdist would otherwise start the
  modules with the most tests first), so the last one to finish is not a long one started late;
* two modules need the machine to themselves (MACHINE_LOCK): test_tools installs and removes Debian packages on the
  machine that every test host shares (what a probe finds installed depends on it); test_concurrent_runs runs
  `cleanup.yml -e assess_cleanup_run=all`, which on every node ends the processes of every run but the live one
  (`pgrep -f` on the working directories' prefix), and the test hosts are network namespaces of one PID namespace:
  on a test host it ended another worker's probes and srun steps (a clean-clone run of the suite on two workers:
  "srun: Force Terminated", exit 143, and every host of the other cluster "unreachable", ssh's 255 for a remote
  command killed by a signal). The other modules that run probes wait for them, and the unit tests, which bring
  their own tools, fill the other workers meanwhile.
"""

import fcntl
import os
import sys
from pathlib import Path

import pytest

# tests/ on sys.path makes tests/cluster importable as the package `cluster`, whatever pytest's import mode.
_TESTS = Path(__file__).resolve().parent
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from cluster.fixtures import test_cluster  # noqa: E402,F401  (a session fixture, re-exported for every test)

ROOT = _TESTS.parent
# Modules in the order they start: the harness's own tests first (a minute; they check each host's SSH answers with
# nothing on stderr, before any test has ended a host's processes, a login shell among them), test_tools next (it needs
# the machine to itself, see MACHINE_LOCK), then the unit tests (they fill the other workers while test_tools runs),
# test_concurrent_runs (the machine to itself too: the other worker waits, so it goes before the longest), then the
# integration modules longest first (their times in a clean-clone run on 2 cores, 2026-12-06). Modules not named here
# start after the named ones, in file order.
LONGEST_FIRST = ["cluster/", "integration/test_tools.py", "unit/", "integration/test_concurrent_runs.py",
                 "integration/test_inference.py", "integration/test_molecule.py", "integration/test_launchers.py",
                 "integration/test_storage.py", "integration/test_burnin.py", "integration/test_local_demo.py",
                 "integration/test_orchestration.py", "integration/test_training.py", "integration/test_reliability.py",
                 "integration/test_assess_cluster.py", "integration/test_network.py",
                 "integration/test_gpu_compute.py", "integration/test_audit.py", "integration/test_lifecycle.py",
                 "integration/test_monitoring.py", "integration/test_sla.py", "integration/test_rating_run.py"]
# The modules that need the machine alone (above), and the lock file they hold alone (the others share it).
MACHINE_ALONE = ("integration/test_tools.py", "integration/test_concurrent_runs.py")
MACHINE_LOCK = ROOT / ".cache" / "tests-machine.lock"


def _worker_cluster_identity():
    """A test cluster per xdist worker: gw0 keeps the configured (or default) one, gwN gets prefix <base>wN, the
    third octet of the subnet moved by 30·N and state directory <base>-gwN. Set before any cluster is made, in the
    worker's own environment, so every helper that reads CMXA_* (test_reliability's own cluster, the storage and
    lifecycle test's shared directories) derives from the worker's identity too."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or worker == "gw0":
        return
    n = int(worker[2:])
    prefix = os.environ.get("CMXA_PREFIX", "cmxa")[:5]
    octets = os.environ.get("CMXA_SUBNET_PREFIX", "10.237.41").split(".")
    octets[2] = str((int(octets[2]) + 30 * n) % 250)
    state = os.environ.get("CMXA_STATE_DIR") or str(ROOT / ".testcluster")
    os.environ.update(CMXA_PREFIX="%sw%d" % (prefix, n), CMXA_SUBNET_PREFIX=".".join(octets),
                      CMXA_STATE_DIR="%s-gw%d" % (state.rstrip("/"), n))


_worker_cluster_identity()


def _rank(item):
    path = Path(str(item.fspath)).relative_to(_TESTS).as_posix()
    for i, key in enumerate(LONGEST_FIRST):
        if path == key or key.endswith("/") and path.startswith(key):
            return i
    return len(LONGEST_FIRST)


def pytest_collection_modifyitems(items):
    # stable: a module's own tests keep their order, and every worker collects the same order
    items.sort(key=_rank)


def _runs_on_the_machine(module_path):
    """Modules whose probes see what is installed on the machine: the integration and cluster tests."""
    return module_path.startswith(("integration/", "cluster/"))


@pytest.fixture(scope="module", autouse=True)
def _machine_packages(request):
    """A module of MACHINE_ALONE holds MACHINE_LOCK alone for its whole run; every other module that runs probes holds
    it shared. A shared holder waits while one of those runs, and it waits for the shared holders already running."""
    path = Path(str(request.node.fspath)).relative_to(_TESTS).as_posix()
    if not _runs_on_the_machine(path):
        yield
        return
    MACHINE_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(MACHINE_LOCK, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if path in MACHINE_ALONE else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster: needs the SSH test cluster (root, network namespaces)")
