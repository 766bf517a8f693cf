"""Every role's molecule `default` scenario, run for real: create and destroy bring up SSH test hosts."""

import subprocess

import pytest
from cluster.cluster import preflight
from helpers import BIN, ROOT, ansible_env

SCENARIOS = sorted(p.parents[2].name for p in ROOT.glob("roles/*/molecule/default/molecule.yml"))
pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("role", SCENARIOS)
def test_molecule_default_scenario(role):
    reason = preflight()
    if reason:
        pytest.skip(reason)
    env = ansible_env()
    env.pop("ANSIBLE_CONFIG")  # molecule writes its own ansible.cfg from molecule.yml
    res = subprocess.run([str(BIN / "molecule"), "test"], cwd=ROOT / "roles" / role, env=env, capture_output=True,
                         text=True, timeout=900)
    tail = (res.stdout + res.stderr)[-6000:]
    assert res.returncode == 0, tail
    assert "verify" in tail and "failed=0" in tail
    # destroy took the scenario's hosts down: no harness state is left behind
    assert not list(ROOT.glob(".testcluster-molecule*/state.json"))
