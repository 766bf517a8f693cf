"""Preflight refuses what the user set wrong, before anything is made or any node touched: an unknown variable with
a project prefix (with the closest name), a value of the wrong type or outside its range (never clamped), and two
hosts at one address. The pure checks (plugins/plugin_utils/inputs.py) against the collection's real roles, then the
action in a real preflight run on local hosts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / ".collections"))
from ansible_collections.clustermax.assess.plugins.plugin_utils import inputs  # noqa: E402
from ansible_collections.clustermax.assess.plugins.plugin_utils.inputs import (  # noqa: E402
    declared,
    duplicate_addresses,
    problems,
)

KNOWN = declared(str(ROOT))
REMOVED = yaml.safe_load((ROOT / "roles/preflight/vars/main.yml").read_text())["preflight_removed_variables"]


def _set(**by_name):
    """settings as the action gathers them: name -> {JSON value: [where]}; a value set in the extra vars."""
    return {name: {json.dumps(value): ["extra vars"]} for name, value in by_name.items()}


def test_libyamls_loader_reads_every_role_as_the_pure_python_one_does(monkeypatch):
    """declared() reads the roles with libyaml's C loader where PyYAML has it (about 7x faster: preflight's
    validation); what it reads must be what the pure-Python safe loader reads."""
    assert inputs.yamlio.SafeLoader is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    fast = declared()
    monkeypatch.setattr(inputs.yamlio, "SafeLoader", yaml.SafeLoader)
    pure = declared()
    assert (fast.options, fast.names, fast.ranges, fast.prefixes) == (pure.options, pure.names, pure.ranges,
                                                                      pure.prefixes)
    assert len(fast.options) > 300  # every role's options (358 today)


def test_every_number_a_role_takes_has_a_range_and_its_default_is_inside():
    numeric = {name for name, spec in KNOWN.options.items() if spec.get("type") in ("int", "float")}
    assert len(numeric) > 70  # the roles' durations, sizes and counts
    assert numeric - set(KNOWN.ranges) == set(), "numbers without a range in their role's meta/input_ranges.yml"
    assert set(KNOWN.ranges) - numeric == set(), "ranges of no int or float option"
    for role in (ROOT / "roles").iterdir():
        specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
        for entry in specs.values():
            for name, spec in (entry.get("options") or {}).items():
                if name not in KNOWN.ranges:
                    continue
                low, high = KNOWN.ranges[name]
                assert low is None or high is None or low <= high, name
                default = spec.get("default")
                if isinstance(default, (int, float)) and not isinstance(default, bool):
                    assert problems(_set(**{name: default}), KNOWN) == [], "%s's default is outside" % name


@pytest.mark.parametrize("name, value, message", [
    ("assess_profil", "standard", "unknown variable assess_profil (extra vars): did you mean assess_profile?"),
    ("burnin_duraton_s", 5, "unknown variable burnin_duraton_s (extra vars): did you mean burnin_duration_s?"),
    ("burnin_duration_s", -5, "burnin_duration_s=-5 (extra vars): must be between 0 and 604800"),
    ("reboot_max_share", 1.5, "reboot_max_share=1.5 (extra vars): must be between 0.0 and 1.0"),
    ("storage_fio_size_mib", "abc", "storage_fio_size_mib=\"abc\" (extra vars): argument 'storage_fio_size_mib' is "
                                    "of type str and we were unable to convert to int"),
    ("assess_launcher", "slurm", "assess_launcher=\"slurm\" (extra vars): value of assess_launcher must be one of: "
                                 "auto, srun, mpirun, torchrun, direct, got: slurm"),
])
def test_a_wrong_variable_is_refused_with_what_to_do(name, value, message):
    found = problems(_set(**{name: value}), KNOWN)
    assert any(m.startswith(message) for m in found), found


def test_what_is_right_passes_and_a_number_given_as_text_is_read_as_the_role_reads_it():
    assert problems(_set(burnin_duration_s="1800", assess_profile="standard", reboot_max_share=0.5,
                         storage_tiers=[{"name": "scratch", "path": "/scratch"}]), KNOWN) == []


def test_other_roles_variables_pass_a_typo_of_ours_does_not_and_foreign_names_are_let_through():
    # linux-system-roles' network and storage roles in the same inventory: not close to any name of ours
    assert problems(_set(network_connections=[], storage_pools=[], ntp_server="pool"), KNOWN) == []
    found = problems(_set(storage_teirs=[], assess_xyzzy=1), KNOWN)
    assert found == ["unknown variable assess_xyzzy (extra vars): no role takes it",
                     "unknown variable storage_teirs (extra vars): did you mean storage_tiers?",
                     "(a variable of another tool whose name starts like these goes in assess_foreign_variables)"]
    assert problems(_set(storage_teirs=[]), KNOWN, foreign={"storage_teirs"}) == []


def test_a_value_still_a_template_is_left_to_the_role():
    """ansible-core 2.16's hostvars leave a template it cannot resolve on the controller as text."""
    assert problems(_set(gpu_compute_cpu_threads="{{ ansible_processor_nproc }}"), KNOWN) == []


def test_removed_variables_name_their_successor_and_where_they_are_set():
    settings = {"network_port_base": {"1": ["node-b", "node-a"]}}
    [message] = problems(settings, KNOWN, removed=REMOVED)
    assert message == ("network_port_base is no longer used (set for node-a, node-b): remove it (ports are derived "
                       "from the run id, in 11000-29999)")


def test_each_value_is_judged_per_host_and_the_hosts_are_named():
    settings = {"burnin_duration_s": {"-5": ["n3"], "60": ["n1", "n2"]}}
    assert problems(settings, KNOWN) == ["burnin_duration_s=-5 (set for n3): must be between 0 and 604800"]


def test_hosts_at_one_address_and_port_are_one_node():
    assert duplicate_addresses({"a": ("10.0.0.1", None), "b": ("10.0.0.1", None), "c": ("10.0.0.2", None),
                                "d": ("10.0.0.9", 2222), "e": ("10.0.0.9", 2223)}) == [
        "a and b are one node (10.0.0.1): each node is listed once"]
    # no port is SSH's 22, whether the inventory writes it or not; a port from the inventory is a string
    assert duplicate_addresses({"a": ("gpu-01.example.com", None), "b": ("GPU-01.example.com", "22"),
                                "c": ("10.0.0.9", "2222"), "d": ("10.0.0.9", 2222), "e": ("10.0.0.9", None)}) == [
        "a and b are one node (gpu-01.example.com): each node is listed once",
        "c and d are one node (10.0.0.9:2222): each node is listed once"]


def _preflight(tmp_path, inventory, *extra):
    inv = tmp_path / "hosts.ini"
    inv.write_text(inventory)
    out = tmp_path / "runs"
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "playbooks/preflight.yml",
                           "-i", str(inv), "-e", "assess_output_dir=%s" % out, "-e", "assess_remote_tmp=%s" % tmp_path,
                           "-e", "assess_lock_dir=%s" % tmp_path,  # this machine's own lock stays untouched
                           "-e", "ansible_python_interpreter=%s" % sys.executable, *extra], cwd=ROOT,
                          capture_output=True, text=True)
    return proc, out


def test_the_preflight_refuses_every_problem_at_once_before_anything_is_made(tmp_path):
    inventory = ("[nodes]\nnode-a ansible_connection=local ansible_host=10.9.9.1 burnin_duration_s=-5\n"
                 "node-b ansible_connection=local ansible_host=10.9.9.1\n")
    proc, out = _preflight(tmp_path, inventory, "-e", "assess_profil=standard", "-e", "storage_fio_size_mib=abc")
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    for message in ("unknown variable assess_profil (extra vars): did you mean assess_profile?",
                    "burnin_duration_s=-5 (set for node-a): must be between 0 and 604800",
                    "storage_fio_size_mib=\"abc\" (extra vars): argument 'storage_fio_size_mib' is of type str",
                    "node-a and node-b are one node (10.9.9.1): each node is listed once"):
        assert message in text.replace('\\"', '"'), text[-3000:]
    assert not out.exists()  # nothing was made: no provider or run directory


@pytest.mark.parametrize("inventory, limit, message", [
    (None, "node-a", "Completely failed to parse inventory source"),  # a mistyped path
    ("all:\n  children:\n    nodes:\n      hosts:\n        node-a: {ansible_connection: local}\n    gpus:\n",
     "gpus", "no hosts to target"),  # a child group that holds nothing
    ("[nodes]\nnode-a ansible_connection=local\n", "node-z", "Could not match supplied host pattern"),
])
def test_an_inventory_that_yields_no_host_under_a_limit_is_an_error(tmp_path, inventory, limit, message):
    path = tmp_path / "hosts.yml"
    if inventory is not None:
        path.write_text(inventory)
    out = tmp_path / "runs"
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "assess.yml", "-i", str(path),
                           "-l", limit, "-e", "assess_output_dir=%s" % out], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode != 0
    assert message in proc.stdout + proc.stderr
    assert not out.exists()


def _role_imports(node, where):
    """Every import_role / include_role under a playbook or task list, with the file it is in."""
    if isinstance(node, list):
        for item in node:
            yield from _role_imports(item, where)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("ansible.builtin.import_role", "ansible.builtin.include_role", "import_role", "include_role"):
                yield where, value
            else:
                yield from _role_imports(value, where)


def test_every_role_is_validated_once_on_the_controller_not_once_per_host():
    """check_inputs validates every role's options (every entry point) once; ansible-core's own validation is a task
    per host and role, so the playbooks of an assessment turn it off. The playbooks that run without preflight (the
    cleanup of a gone run, the health probe, the SLA review, uninstall, and recover's first play) keep it. No play
    uses `roles:`, which cannot turn it off."""
    files = sorted(ROOT.glob("playbooks/*.yml")) + sorted(ROOT.glob("roles/*/tasks/*.yml"))
    imports = [(f, spec) for f in files for f, spec in _role_imports(yaml.safe_load(f.read_text()), f)]
    assert len(imports) > 20
    validated = [(str(f.relative_to(ROOT)), spec.get("tasks_from", "main")) for f, spec in imports
                 if spec.get("rolespec_validate", True) is not False]
    assert sorted(validated) == [("playbooks/cleanup.yml", "leftovers"), ("playbooks/healthprobe.yml", "probe"),
                                 ("playbooks/recover.yml", "recover"), ("playbooks/recover.yml", "recover_plan"),
                                 ("playbooks/sla_review.yml", "review"), ("playbooks/uninstall.yml", "uninstall")]
    plays_with_roles = [str(f.relative_to(ROOT)) for f in ROOT.glob("playbooks/*.yml")
                        for play in yaml.safe_load(f.read_text()) or [] if isinstance(play, dict) and play.get("roles")]
    assert plays_with_roles == []


@pytest.mark.parametrize("tags, refused", [
    (("--tags", "audit,network"), "network would run phases that need every node"),
    ((), "every phase (no --tags) would run phases that need every node"),
    (("--tags", "audit,gpu_compute"), None),
])
def test_a_slice_runs_only_per_host_phases_named_with_tags(tmp_path, tags, refused):
    inventory = "[nodes]\nnode-a ansible_connection=local\n"
    proc, out = _preflight(tmp_path, inventory, "-e", "assess_run_id=r1", "-e", "assess_run_slice=s1", *tags)
    text = proc.stdout + proc.stderr
    if refused:
        assert proc.returncode != 0 and refused in text, text[-3000:]
        assert "assess_run_slice=s1 makes this run one slice of run r1" in text
        assert not out.exists()
    else:
        assert proc.returncode == 0, text[-3000:]
        [slice_dir] = out.glob("*/r1/slices/s1")
        assert json.loads((slice_dir / "assess_run.json").read_text())["slice"] == "s1"


def test_a_slice_names_its_run(tmp_path):
    proc, out = _preflight(tmp_path, "[nodes]\nnode-a ansible_connection=local\n", "-e", "assess_run_slice=s1",
                           "--tags", "audit")
    assert proc.returncode != 0 and "assess_run_slice is one slice of the run assess_run_id names" in \
        proc.stdout + proc.stderr
    assert not out.exists()
