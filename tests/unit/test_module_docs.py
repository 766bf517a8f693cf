"""Every module's DOCUMENTATION, EXAMPLES and RETURN is YAML that ansible-doc can read: one `: ` inside a plain
description line (run_lock's "(V(0) ends such a quiet): a step ...") made the whole page unreadable, and only
ansible-lint's log said so."""

import re
from pathlib import Path

import pytest
import yaml

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[p.stem for p in MODULES])
def test_module_documentation_is_yaml(path):
    src = path.read_text()
    blocks = {name: re.search(r'^%s = r?"""(.*?)"""' % name, src, re.S | re.M) for name in
              ("DOCUMENTATION", "EXAMPLES", "RETURN")}
    assert blocks["DOCUMENTATION"], "%s has no DOCUMENTATION" % path.name
    for found in blocks.values():
        if found:
            yaml.safe_load(found.group(1))
    doc = yaml.safe_load(blocks["DOCUMENTATION"].group(1))
    assert doc["module"] == path.stem and doc["short_description"]
