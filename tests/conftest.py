"""Shared pytest setup. Fixture logic lives next to what it drives (tests/cluster/ for the SSH test cluster).

`make test` runs the whole suite on two pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`;
`make test-serial` runs the unit tests on two workers, then the rest one module at a time; docs/design-notes.md says
why):
* **one worker runs every module that uses the SSH test cluster, one after the other** (one unit of work, "cluster"), on
  the one test cluster it brings up, as a serial run would. Those modules stay timed as they were written: none
  shares hosts, Slurm daemons or the machine's packages with a module running beside it, and test_concurrent_runs'
  `cleanup.yml -e assess_cleanup_run=all` (which on every node ends the processes of every run but the live one,
  `pgrep -f` on the working directories' prefix, in the one PID namespace the test hosts share) meets no run of
  another module's;
* **the other worker fills in beside it, at nice 19**: the unit tests (no test cluster, no shared state; scheduled
  one test at a time), then the integration modules that bring hosts of their own or none (molecule's scenarios, the
  local demo, the reliability module's own cluster, the browser and callback tests), each module whole (its module
  fixture runs once). At the lowest priority it takes the CPU the cluster modules leave idle, so that their
  timing-sensitive steps keep their pace.
About 7 CPU-minutes of unit tests no longer wait for the cluster modules, nor the 6 minutes of the own-hosts modules.

What keeps the two apart:
* the modules that need the machine to themselves (MACHINE_ALONE: test_tools installs and removes Debian packages
  that every test host and the local demo see; test_concurrent_runs' `all` cleanup, above) hold MACHINE_LOCK alone,
  every other module that runs probes holds it shared: the own-hosts modules wait while those two run. They run
  early on the cluster worker, while the other worker is still on the unit tests, which take no lock (their
  processes never work under /tmp/clustermax-assess-, the `all` cleanup's pattern);
* a worker other than gw0 that brings up a test cluster anyway gets a prefix, subnet and state directory of its own
  (_worker_cluster_identity, below), as test_reliability's own cluster derives its identity from the worker's.
"""
import fcntl
import functools
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
# Modules in the order they start. On the cluster worker: the harness's own tests first (a minute; they check each
# host's SSH answers with nothing on stderr, before any test has ended a host's processes, a login shell among them),
# then the two that need the machine alone (MACHINE_LOCK) while the other worker is on the unit tests, then the rest
# longest first (their times in a clean-clone run on 2 cores, 2026-12-06), so a long one never starts last. On the
# other worker: the unit tests, then the own-hosts modules longest first. Modules not named here start after the named
# ones, in file order.
LONGEST_FIRST = ["cluster/", "integration/test_tools.py", "integration/test_concurrent_runs.py", "unit/",
                 "integration/test_inference.py", "integration/test_molecule.py", "integration/test_launchers.py",
                 "integration/test_storage.py", "integration/test_burnin.py", "integration/test_local_demo.py",
                 "integration/test_orchestration.py", "integration/test_training.py", "integration/test_reliability.py",
                 "integration/test_assess_cluster.py", "integration/test_network.py",
                 "integration/test_gpu_compute.py", "integration/test_audit.py", "integration/test_lifecycle.py",
                 "integration/test_monitoring.py", "integration/test_sla.py", "integration/test_rating_run.py"]
# The modules that need the machine alone (above), and the lock file they hold alone (the others share it).
MACHINE_ALONE = ("integration/test_tools.py", "integration/test_concurrent_runs.py")
MACHINE_LOCK = ROOT / ".cache" / "tests-machine.lock"
# The one module that assesses this machine through inventories/local.ini. This machine has one run lock, so two
# local runs at the same time are refused, as they should be: one module is one unit of work, never run beside
# itself. A local run in a module of the cluster unit ran beside it and was refused in CI (stop 52).
THIS_MACHINE_MODULE = "tests/integration/test_local_demo.py"


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


def _uses_the_cluster(path):
    """Whether a test module uses the SSH test cluster: the harness's own tests, and every module that names the
    session fixture (a test or a module fixture takes it as an argument, so its source names it)."""
    return path.startswith("tests/cluster/") or "test_cluster" in (ROOT / path).read_text()


@functools.cache
def _work_unit_of_module(path):
    if path.startswith("tests/") and path != THIS_MACHINE_MODULE and '"local.ini"' in (ROOT / path).read_text():
        raise pytest.UsageError("%s assesses this machine (inventories/local.ini): only %s may, or its run beside "
                                "that module's is refused by this machine's run lock" % (path, THIS_MACHINE_MODULE))
    if path.startswith("tests/unit/"):
        return None
    return "cluster" if _uses_the_cluster(path) else path


def _work_unit(nodeid):
    """The unit of work a test belongs to under `make test`: every module that uses the test cluster is one
    unit (the cluster worker's), every other integration module is one of its own (its module fixture runs once), and
    each unit test is one alone."""
    return _work_unit_of_module(nodeid.split("::", 1)[0]) or nodeid


def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup with the work units above. xdist's own groups (the xdist_group mark) do not take with this
    pytest: xdist 3.8 renames item._nodeid, which pytest 9 no longer reads (nodeid comes from item._id), so every
    test stayed a unit of its own and both workers brought up a test cluster. Its scheduler keeps the units in the
    order they were collected (--no-loadscope-reorder), which puts the cluster's first."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only under xdist

    class ClusterWorkerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return _work_unit(nodeid)

    return ClusterWorkerScheduling(config, log)


# What runs beside the cluster worker does so at the lowest CPU priority: it takes the CPU the cluster modules leave
# idle (about 0.85 of the 2 cores on average) and little more. At nice 10 (cc5) the cluster modules ran 15-45 %
# slower, and they are the run's length; at 19 a CPU-bound program beside two busy nice-19 ones lost 7 % here, beside
# two at nice 0 37 %. A daemon that sleeps (an own-hosts module's sshd or slurmd) is still woken at once.
BESIDE_THE_CLUSTER_NICE = 19


@pytest.fixture(scope="module", autouse=True)
def _beside_the_cluster_yield_the_cpu(request):
    """Under xdist, every module outside the cluster unit (the unit tests, and the modules with hosts of their own or
    none) runs at BESIDE_THE_CLUSTER_NICE, with whatever it starts, and back at its own priority after it, for a
    module that follows on the same worker. Only root may give the priority back, so only root lowers it."""
    path = Path(str(request.node.fspath)).relative_to(ROOT).as_posix()
    if _work_unit_of_module(path) == "cluster" or os.geteuid() != 0 or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, max(before, BESIDE_THE_CLUSTER_NICE))
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)


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
