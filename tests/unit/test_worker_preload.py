"""plugin_utils/worker_preload.py: a worker forked after the controller loaded ansible's Jinja filters and tests
loads none of them again (issue 24: each worker of a task whose `when` used a filter or a test imported them all,
about 50 ms of CPU per host). Real processes: a stand-in controller initialises ansible-core's plugin loader as
ansible-playbook does, preloads (or not), forks, and the child templates a filter and a test as a worker would."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / ".collections"

CONTROLLER = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, sys.argv[1])
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader([sys.argv[1]])
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    from ansible_collections.clustermax.assess.plugins.plugin_utils.worker_preload import load_jinja_plugins
    counts = load_jinja_plugins() if sys.argv[2] == "preload" else None
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        before = set(sys.modules)
        templar = Templar(loader=DataLoader(), variables={"flag": "yes"})
        value = templar.template(trust_as_template("{{ flag | bool }}"))
        test = templar.template(trust_as_template("{{ missing is defined }}"))
        loaded = sorted(m for m in set(sys.modules) - before if ".plugins.filter" in m or ".plugins.test" in m)
        os.write(w, json.dumps({"value": value, "test": test, "loaded": loaded}).encode())
        os._exit(0)
    os.close(w)
    out = os.read(r, 1 << 20)
    os.waitpid(pid, 0)
    print(json.dumps({"counts": counts, "worker": json.loads(out)}))
""")


def _controller(mode):
    proc = subprocess.run([sys.executable, "-c", CONTROLLER, str(COLLECTIONS), mode], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_worker_forked_after_the_preload_loads_no_filter_or_test_plugin():
    out = _controller("preload")
    # ansible-core 2.19: 78 filters and 51 tests, each counted under its short and its ansible.builtin name
    assert out["counts"]["filters"] > 100 and out["counts"]["tests"] > 50
    assert out["worker"] == {"value": True, "test": False, "loaded": []}


def test_without_it_the_worker_imports_every_filter_and_test_file_again():
    worker = _controller("none")["worker"]
    assert (worker["value"], worker["test"]) == (True, False)
    files = {name.rsplit(".", 1)[1].rsplit("_", 1)[0] for name in worker["loaded"]}
    assert {"core", "mathstuff"} <= files
    assert any(".plugins.filter." in name for name in worker["loaded"])
    assert any(".plugins.test." in name for name in worker["loaded"])


BROKEN = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[1])
    from ansible.plugins.loader import filter_loader, init_plugin_loader
    init_plugin_loader([sys.argv[1]])
    filter_loader.add_directory(sys.argv[2])  # a filter_plugins directory of the old layout, as a role adds one
    from ansible_collections.clustermax.assess.plugins.plugin_utils.worker_preload import load_jinja_plugins
    for _ in range(2):
        try:
            print("loaded", load_jinja_plugins())
        except Exception as ex:
            print("raised", type(ex).__name__, ex)
""")


def test_a_filter_file_that_raises_leaves_no_half_loaded_plugins(tmp_path):
    """ansible-core's loader stops loading once its cache holds anything: a preload that stopped half-way would have
    the next one (and every template) see only the plugins loaded before the broken file, silently."""
    (tmp_path / "aa_good.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'shout': lambda text: text.upper()}\n")
    (tmp_path / "zz_broken.py").write_text(
        "class FilterModule:\n    def __init__(self):\n        raise RuntimeError('a broken filter file')\n")
    proc = subprocess.run([sys.executable, "-c", BROKEN, str(COLLECTIONS), str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-2:] == ["raised RuntimeError a broken filter file"] * 2
