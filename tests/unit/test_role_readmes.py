"""Every role has a README whose variables and example are those of its argument_specs and playbook
(tools/role_readmes.py): a spec changed without running the generator fails here, and so in CI."""

import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))

import role_readmes  # noqa: E402

ROLES = sorted(p.name for p in (ROOT / "roles").iterdir() if (p / "tasks").is_dir())


def test_every_role_has_specs_and_so_a_readme():
    assert [p.name for p in role_readmes.roles()] == ROLES


@pytest.mark.parametrize("role", ROLES)
def test_readme_matches_the_specs(role):
    readme = ROOT / "roles" / role / "README.md"
    assert readme.exists(), "roles/%s has no README.md: run python tools/role_readmes.py" % role
    assert readme.read_text() == role_readmes.render(readme.parent), (
        "roles/%s/README.md is out of date with its meta/argument_specs.yml: run python tools/role_readmes.py" % role)


@pytest.mark.parametrize("role", ROLES)
def test_every_option_is_a_row_with_its_type_and_default(role):
    specs = yaml.safe_load((ROOT / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
    rows = {line.split("|")[1].strip(" `"): line for line in (ROOT / "roles" / role / "README.md").read_text()
            .splitlines() if line.startswith("| `")}
    for spec in specs.values():
        for name, option in (spec.get("options") or {}).items():
            assert name in rows, "%s has no row in roles/%s/README.md" % (name, role)
            assert "| %s |" % role_readmes._type(option) in rows[name]


def test_a_changed_spec_shows_as_drift(tmp_path):
    role = tmp_path / "network"
    (role / "meta").mkdir(parents=True)
    specs = yaml.safe_load((ROOT / "roles/network/meta/argument_specs.yml").read_text())
    specs["argument_specs"]["main"]["options"]["network_rails"]["default"] = 24000
    (role / "meta/argument_specs.yml").write_text(yaml.safe_dump(specs))
    (role / "meta/main.yml").write_text((ROOT / "roles/network/meta/main.yml").read_text())
    (role / "README.md").write_text((ROOT / "roles/network/README.md").read_text())
    rendered = role_readmes.render(role)
    assert rendered != (role / "README.md").read_text()
    assert "| `network_rails` | int | `24000` |" in rendered
    # The hand-written purpose and requirements are kept as they are.
    assert rendered.split(role_readmes.BEGIN)[0] == (role / "README.md").read_text().split(role_readmes.BEGIN)[0]
