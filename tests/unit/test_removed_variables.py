"""The preflight's first task refuses a removed or renamed variable that is still set, naming its successor, before
anything is made; and the list of such variables (roles/preflight/vars/main.yml) stays true to the roles."""

import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
from ansible_collections.clustermax.assess.plugins.plugin_utils.inputs import declared  # noqa: E402

REMOVED = yaml.safe_load((ROOT / "roles/preflight/vars/main.yml").read_text())["preflight_removed_variables"]


def _role_variables():
    """Every variable a role declares (its defaults, vars and argument_specs options): what preflight's input check
    knows (plugins/plugin_utils/inputs.py)."""
    return declared(str(ROOT)).names


def test_each_entry_names_a_gone_variable_and_a_live_successor_or_what_to_do():
    live = _role_variables()
    assert REMOVED, "the list is empty"
    for entry in REMOVED:
        assert entry["name"] not in live, "%s is still a role variable: it is not removed" % entry["name"]
        if entry.get("successor"):
            assert entry["successor"] in live, "successor %s of %s is no role variable" % (entry["successor"],
                                                                                        entry["name"])
        else:
            assert entry.get("note"), "%s has neither a successor nor a note saying what to do" % entry["name"]
    assert len({e["name"] for e in REMOVED}) == len(REMOVED)


def _preflight(tmp_path, host_vars=""):
    inventory = tmp_path / "hosts.ini"
    inventory.write_text("[nodes]\nnode-a ansible_connection=local\nnode-b ansible_connection=local %s\n"
                         % host_vars)
    out = tmp_path / "runs"
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/preflight.yml",
                           "-i", str(inventory), "-e", "assess_output_dir=%s" % out,
                           "-e", "assess_remote_tmp=%s" % tmp_path,  # the nodes' working directory, here
                           "-e", "assess_lock_dir=%s" % tmp_path,  # and the lock: this machine's own stays untouched
                           "-e", "ansible_python_interpreter=%s" % sys.executable], cwd=ROOT,
                          capture_output=True, text=True)
    return proc, out


def test_without_removed_variables_the_preflight_goes_on(tmp_path):
    proc, out = _preflight(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    [run_dir] = list(out.glob("default/*"))
    assert {p.parent.name for p in (run_dir / "artifacts").glob("*/node_info.json")} == {"node-a", "node-b"}


def test_removed_variables_set_for_one_host_stop_the_run_before_it_is_made(tmp_path):
    """Every entry at once (one playbook run): each is named, with the host and what to do instead."""
    proc, out = _preflight(tmp_path, " ".join("%s=x" % entry["name"] for entry in REMOVED))
    assert proc.returncode != 0
    for entry in REMOVED:
        advice = "set %s instead" % entry["successor"] if entry.get("successor") else "remove it (%s)" % entry["note"]
        assert "%s is no longer used (set for node-b): %s" % (entry["name"], advice) in proc.stdout
    assert not out.exists()  # nothing was made: no provider or run directory
