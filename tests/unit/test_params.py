"""Probe parameters declared once per probe (probes/params.py): every probe declares its own, the CLI lists them,
refuses an unknown one or a value of the wrong type before anything is measured, converts what templates pass,
and a `skip` reason skips any probe without running it. The roles pass only declared params."""

import importlib
from pathlib import Path

import pytest
import yaml

from probes import cli
from probes.params import PEERS, SIZE, UNIVERSAL, Param, ParamError, Params, parse_bytes
from probes.registry import PROBES

ROOT = Path(__file__).resolve().parents[2]


def declared(name):
    return importlib.import_module(PROBES[name]).PARAMS


def test_every_probe_declares_its_params_with_type_default_and_help():
    assert len(PROBES) >= 30
    for name in PROBES:
        params = declared(name)
        assert isinstance(params, Params), name
        assert "skip" in params.declared, name
        for key, param in params.declared.items():
            assert param.help.strip(), (name, key)
            if param.default is not None:
                assert param.convert(param.default) == param.default, (name, key)  # a default of its own type


def test_help_params_lists_every_param_with_its_type_and_default(capsys):
    assert cli.main(["tcp_pairs", "--help-params"]) == 0
    lines = {line.split()[0]: line.split()[1:3] for line in capsys.readouterr().out.splitlines()[1:]}
    assert set(lines) == set(declared("tcp_pairs").declared)
    assert lines["ping_count"] == ["int", "5"] and lines["concurrent"] == ["bool", "true"]
    assert lines["hosts"] == ["list", "null"] and lines["skip"] == ["str", '""']
    for name in PROBES:
        assert cli.main([name, "--help-params"]) == 0
        listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]}
        assert listed == set(declared(name).declared), name


def test_an_unknown_param_is_an_error_artifact_naming_it_and_nothing_is_measured(tmp_path):
    _, doc = cli.run_probe("node_info", str(tmp_path), "r", "h", params={"torhc": False})
    assert doc["status"] == "error"
    assert doc["reason"] == "probe node_info: unknown param 'torhc' (did you mean 'torch'?)"
    assert doc["results"] == [] and doc["facts"] == {} and doc["raw"] == []
    assert doc["params"] == {"torhc": False}  # what was asked is recorded as it was given
    _, doc = cli.run_probe("boot_id", str(tmp_path), "r", "h", params={"zzz": 1})
    assert doc["reason"] == "probe boot_id: unknown param 'zzz' (known: skip, tools_step)"


def test_a_value_of_the_wrong_type_is_an_error_artifact_naming_the_param(tmp_path):
    _, doc = cli.run_probe("gemm", str(tmp_path), "r", "h", params={"iters": "ten"})
    assert doc["status"] == "error" and doc["results"] == [] and doc["facts"] == {}
    assert doc["reason"] == 'probe gemm: param \'iters\': expected an integer, got "ten"'
    _, doc = cli.run_probe("tcp_pairs", str(tmp_path), "r", "h", params={"concurrent": "maybe"})
    assert doc["reason"] == 'probe tcp_pairs: param \'concurrent\': expected true or false, got "maybe"'
    _, doc = cli.run_probe("import_time", str(tmp_path), "r", "h", params={"mode": "fast"})
    assert doc["reason"] == 'probe import_time: param \'mode\': expected one of node, copy, got "fast"'


def test_a_bool_string_from_a_template_is_converted(tmp_path):
    # "False" as Ansible may template it: torch is not imported (a plain bool("False") would be True)
    _, doc = cli.run_probe("node_info", str(tmp_path), "r", "h", params={"torch": "False"})
    assert doc["status"] == "ok" and doc["device"]["torch"] is None
    assert doc["params"] == {"torch": "False"}


@pytest.mark.parametrize("kind,given,expected", [
    (bool, "true", True), (bool, "False", False), (bool, "yes", True), (bool, "0", False), (bool, 1, True),
    (int, "10", 10), (int, 10.0, 10), (int, " 7 ", 7), (float, "0.5", 0.5), (float, 3, 3.0),
    (str, 3, "3"), (list, ("a", "b"), ["a", "b"]), (list, "bf16, fp8_e4m3", ["bf16", "fp8_e4m3"]),
    (dict, {"a": 1}, {"a": 1}), (SIZE, "64K", 65536), (SIZE, "4M", 4 << 20), (SIZE, "1g", 1 << 30),
    (SIZE, "512B", 512), (SIZE, 8, 8),
])
def test_values_are_converted_to_the_declared_type(kind, given, expected):
    assert Param(kind, None, "h").convert(given) == expected


@pytest.mark.parametrize("kind,given", [
    (bool, "maybe"), (bool, 2), (int, 2.5), (int, True), (int, "ten"), (float, False), (float, [1]),
    (str, ["a"]), (list, {"a": 1}), (dict, []), (SIZE, "lots"), (SIZE, True),
])
def test_a_value_of_another_type_is_refused(kind, given):
    with pytest.raises(ValueError, match="expected "):
        Param(kind, None, "h").convert(given)


def test_none_keeps_the_default_and_defaults_are_not_shared():
    params = Params(sizes=Param(list, [1, 2], "sizes"), iters=Param(int, 10, "iterations"))
    first = params.resolve("p", {"iters": None})
    assert first == {"sizes": [1, 2], "iters": 10, "skip": "", "tools_step": {}}
    first["sizes"].append(3)  # a probe changing its params does not change the declaration
    assert params.resolve("p", {})["sizes"] == [1, 2]
    with pytest.raises(ParamError, match="probe p: param 'iters': expected an integer"):
        params.resolve("p", {"iters": "x"})


def test_shared_params_are_declared_once():
    with pytest.raises(ValueError, match="skip"):
        Params(skip=Param(str, "", "again"))
    with pytest.raises(ValueError, match="hosts"):
        Params(hosts=Param(list, None, "again"))
    assert set(Params(peers=True).declared) == set(PEERS) | set(UNIVERSAL)
    # what the probe action adds with peers: true is not a misspelt param of a single-host probe: it is ignored
    assert Params().resolve("p", {"hosts": ["a", "b"], "rank": 1}) == {"skip": "", "tools_step": {}}
    assert parse_bytes("16G") == 16 << 30


def test_skip_skips_every_probe_with_its_reason_without_running_it(tmp_path):
    for name in PROBES:
        _, doc = cli.run_probe(name, str(tmp_path / name), "r", "h", params={"skip": "  not on this cluster \n"})
        assert doc["status"] == "skipped" and doc["reason"] == "not on this cluster", name
        assert doc["results"] == [] and doc["facts"] == {} and doc["raw"] == [], name
    # an empty reason (a template's "no reason to skip") runs the probe
    _, doc = cli.run_probe("boot_id", str(tmp_path / "run"), "r", "h", params={"skip": ""})
    assert doc["status"] == "ok" and doc["facts"]["boot_id"]


def _probe_tasks():
    """(file, probe name, params, peers) of every probe task whose name and params are written out in a role."""
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            args = task.get("clustermax.assess.probe")
            if isinstance(args, dict) and "{{" not in str(args.get("name")) and isinstance(args.get("params"), dict):
                yield path.relative_to(ROOT), args["name"], args["params"], args.get("peers") is True


def _tasks(items):
    for task in items:
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key) or [])


def test_the_roles_pass_only_params_the_probes_declare():
    seen = 0
    for path, name, params, peers in _probe_tasks():
        known = declared(name).declared
        assert set(params) <= set(known), (str(path), name, sorted(set(params) - set(known)))
        if peers:
            assert set(PEERS) <= set(known), (str(path), name)  # the probe action adds hosts, addresses, rank
        seen += 1
    assert seen >= 25
