"""Every role's molecule `default` scenario, run for real: create and destroy bring up SSH test hosts.

Run alone, the scenarios run two at a time; under `make test`, beside the cluster modules, one at a time.
Each brings up hosts of its own (its own harness prefix, subnet and state directory, in its molecule.yml), so they
cannot meet; most of a scenario's time is spent waiting on SSH, sleeps and probes' fixed durations, which a second
scenario fills. Each test still reports its own scenario's outcome."""

import os
import re
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster.cluster import preflight
from helpers import BIN, ROOT, ansible_env

SCENARIOS = sorted(p.parents[2].name for p in ROOT.glob("roles/*/molecule/default/molecule.yml"))
# Under `make test` this module runs beside the cluster modules (tests/conftest.py): one scenario at a time.
AT_ONCE = 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2
pytestmark = pytest.mark.cluster


def _state_dir(role):
    """The harness state directory the scenario's molecule.yml gives its hosts (CMXA_STATE_DIR)."""
    text = (ROOT / "roles" / role / "molecule" / "default" / "molecule.yml").read_text()
    found = re.search(r"CMXA_STATE_DIR:\s*\$\{MOLECULE_PROJECT_DIRECTORY\}/\.\./\.\./(\S+)", text)
    assert found, "roles/%s/molecule/default/molecule.yml sets no CMXA_STATE_DIR under the checkout" % role
    return ROOT / found.group(1)


def _identity(role):
    """(prefix, subnet) of the scenario's hosts, from its molecule.yml."""
    text = (ROOT / "roles" / role / "molecule" / "default" / "molecule.yml").read_text()
    return (re.search(r"CMXA_PREFIX:\s*(\S+)", text).group(1), re.search(r"CMXA_SUBNET_PREFIX:\s*(\S+)", text).group(1))


def test_scenarios_have_hosts_of_their_own():
    """Two scenarios run at once: none may share a harness prefix, subnet or state directory with another."""
    identities = {role: _identity(role) + (_state_dir(role),) for role in SCENARIOS}
    for i in range(3):
        values = [ident[i] for ident in identities.values()]
        assert len(set(values)) == len(values), identities


def _molecule_test(role):
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG")  # molecule writes its own ansible.cfg from molecule.yml
    return subprocess.run([str(BIN / "molecule"), "test"], cwd=ROOT / "roles" / role, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def scenario_runs(request):
    """Starts every selected scenario (AT_ONCE at a time) on first use; each test waits for its own."""
    reason = preflight()
    if reason:
        pytest.skip(reason)
    selected = [item.callspec.params["role"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_molecule_default_scenario"]
    stopping = threading.Event()

    def run(role):
        # after an interrupt (Ctrl-C, a timeout) no new scenario starts; the running ones finish their destroy step
        return None if stopping.is_set() else _molecule_test(role)

    pool = ThreadPoolExecutor(max_workers=AT_ONCE, thread_name_prefix="molecule")
    try:
        yield {role: pool.submit(run, role) for role in selected}
    finally:
        stopping.set()
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_default_scenario(role, scenario_runs):
    res = scenario_runs[role].result()
    if res is None:
        pytest.skip("not started: the session was stopping")
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, tail
    assert "verify" in tail and "failed=0" in tail
    # destroy took the scenario's hosts down: no harness state is left behind
    assert not (_state_dir(role) / "state.json").exists()
