"""Every role's molecule `default` scenario, run for real: create and destroy bring up SSH test hosts.

The scenarios run two at a time. Each brings up hosts of its own (its own harness prefix, subnet and state
directory, in its molecule.yml), so they cannot meet; most of a scenario's time is spent waiting on SSH, sleeps and
probes' fixed durations, which a second scenario fills. Each test still reports its own scenario's outcome."""

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from cluster.cluster import preflight
from helpers import BIN, ROOT, ansible_env

SCENARIOS = sorted(p.parents[2].name for p in ROOT.glob("roles/*/molecule/default/molecule.yml"))
AT_ONCE = 2
pytestmark = pytest.mark.cluster


def _state_dir(role):
    """The harness state directory the scenario's molecule.yml gives its hosts (CMXA_STATE_DIR)."""
    text = (ROOT / "roles" / role / "molecule" / "default" / "molecule.yml").read_text()
    found = re.search(r"CMXA_STATE_DIR:\s*\$\{MOLECULE_PROJECT_DIRECTORY\}/\.\./\.\./(\S+)", text)
    assert found, "roles/%s/molecule/default/molecule.yml sets no CMXA_STATE_DIR under the checkout" % role
    return ROOT / found.group(1)


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
    pool = ThreadPoolExecutor(max_workers=AT_ONCE, thread_name_prefix="molecule")
    try:
        yield {role: pool.submit(_molecule_test, role) for role in selected}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_default_scenario(role, scenario_runs):
    res = scenario_runs[role].result()
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, tail
    assert "verify" in tail and "failed=0" in tail
    # destroy took the scenario's hosts down: no harness state is left behind
    assert not (_state_dir(role) / "state.json").exists()
