"""pkg_install: how long a user waits to make a Python environment and install packages into it, with pip and
with uv, on every storage tier, and then how long importing from that environment takes (seed, "Lifecycle": the
pip and uv installs redone with fresh caches on each tier -- home, shared, local NVMe scratch, others -- then
`import torch` from each location; 1-2 s on most providers, 10-20 s with lots-of-small-files problems).

Per tier and tool, in `<tier>/clustermax-assess-lifecycle-<run_id>/<host>/<tool>/`:
  * a fresh virtual environment (pip: `python -m venv`; uv: `uv venv`), timed: venv_s;
  * the packages installed into it with a fresh, empty cache in the same directory, timed: install_s
    (pip: `pip install --cache-dir`; uv: `uv pip install` with UV_CACHE_DIR and UV_COMPILE_BYTECODE=1, i.e.
    --compile-bytecode); total_s = venv_s + install_s;
  * the versions installed (facts.versions), and the environment's size (env_bytes);
  * `import <module>` from that environment (checked to come from it): the first import after the environment's
    files were dropped from the page cache (cache=cold; facts.cache_drop says how), then `import_repeat - 1` more
    (cache=warm, their median). pip compiles .pyc files at install; uv by default does not, so uv runs with
    --compile-bytecode: both installers' install_s include the compilation and both cold imports read compiled
    files, the same measurement of the tier (facts.bytecode says so). The import timing shares the probe with the
    install because it needs the environment the install made on that tier; probes/storage/import_time.py
    provides the timing and the cache drop.
Everything in the working directory is removed after each tier, also after a failure or a timeout.

Index: the tools' default (PyPI, or the node's pip/uv configuration), or `index_url`, `extra_index_urls`,
`find_links` (a wheelhouse directory or URL) and `no_index`, so an air-gapped cluster can use its mirror or a
wheelhouse. When the index is a network address it is checked first (a TCP connection within `reach_timeout_s`);
unreachable, the probe is skipped with that reason instead of waiting on the tools' retries.
uv is looked for next to the node's Python, then on PATH (or `uv` names it); missing, uv is skipped with the reason.
"""

import os
import shutil
import sys
import time

from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.lifecycle import common as lifecycle
from probes.params import Param, Params
from probes.storage import import_time

PARAMS = Params(
    offline=Param(str, "", "why the internet cannot be used: when not empty and no local index or wheelhouse is "
                           "set, the probe is skipped with this reason"),
    tiers=Param(list, [], "storage tiers {name, path, shared} to install on (empty: those found on the node)"),
    packages=Param(list, ["torch"], "packages to install"),
    tools=Param(list, ["pip", "uv"], "installers to time, each where usable"),
    index_url=Param(str, "", "package index (empty: the tools' default)"),
    extra_index_urls=Param(list, [], "extra package indexes"),
    find_links=Param(list, [], "wheelhouse paths or URLs"),
    no_index=Param(bool, False, "install from find_links only"),
    pip_args=Param(list, [], "extra pip install arguments"),
    uv_args=Param(list, [], "extra uv pip install arguments"),
    python=Param(str, None, "the Python the environments are made with (default: this one)"),
    uv=Param(str, None, "the uv to use (default: beside the Python, beside this interpreter, on PATH)"),
    import_module=Param(str, "torch", "module imported from each fresh environment (empty: no import)"),
    import_repeat=Param(int, 3, "imports per environment: the first cold, the others warm"),
    pip_venv_with_pip=Param(bool, True, "pip venvs made with ensurepip (else --without-pip and the node's pip)"),
    cache_drop=Param(str, "fadvise", "how the environment's pages are dropped before the cold import"),
    venv_timeout_s=Param(float, 300, "seconds to make one environment"),
    install_timeout_s=Param(float, 1800, "seconds for one install"),
    import_timeout_s=Param(float, 300, "seconds for one import"),
    reach_timeout_s=Param(float, 3, "seconds for the TCP connection that checks an index is reachable"),
    http_timeout_s=Param(float, 30, "the installers' own network timeout, seconds"),
)
DEFAULT_INDEX = "https://pypi.org/simple"


def find_uv(explicit=None, python=None):
    """(path, None) or (None, why): `explicit`, else uv beside the Python, beside this interpreter, on PATH."""
    if explicit:
        path = explicit if os.path.isabs(explicit) else shutil.which(explicit)
        if path and os.access(path, os.X_OK):
            return path, None
        return None, "uv %s is not an executable file" % explicit
    for py in (python, sys.executable):
        if py:
            near = os.path.join(os.path.dirname(py), "uv")
            if os.access(near, os.X_OK):
                return near, None
    on_path = shutil.which("uv")
    if on_path:
        return on_path, None
    return None, "uv not found next to %s nor on PATH (install it, or set lifecycle_uv)" % (python or sys.executable)


def index_args(p):
    """The index options both pip and uv understand, in the same spelling."""
    args = []
    if p["no_index"]:
        args.append("--no-index")
    elif p["index_url"]:
        args += ["--index-url", p["index_url"]]
    for url in p["extra_index_urls"]:
        args += ["--extra-index-url", url]
    for link in p["find_links"]:
        args += ["--find-links", link]
    return args


def index_check(p):
    """None when the configured index can be used, else why not (network indexes only; a wheelhouse is a path)."""
    if p["no_index"]:
        return None
    urls = [p["index_url"] or DEFAULT_INDEX] + p["extra_index_urls"]
    for url in urls:
        if url.startswith(("http://", "https://")):
            ok, why = lifecycle.reachable(url, p["reach_timeout_s"])
            if not ok:
                return ("package index %s is not reachable from this node (%s); point lifecycle_index_url or "
                        "lifecycle_find_links at a mirror or wheelhouse" % (url, why))
    return None


def pip_check(python, with_pip):
    """None when pip can be timed with this Python, else why not."""
    if with_pip:
        res = run_cmd([python, "-c", "import venv, ensurepip"], timeout=60)
        if res.rc != 0:
            return "%s cannot make a venv with pip (no venv/ensurepip module: %s)" % (
                python, lifecycle.tail(res.stderr, 1, 600))
        return None
    res = run_cmd([python, "-m", "pip", "--version"], timeout=60)
    out = res.stdout
    if res.rc != 0:
        return "%s has no pip to install into a venv made without one: %s" % (
            python, lifecycle.tail(res.stderr, 1, 600))
    try:
        major, minor = (int(x) for x in out.split()[1].split(".")[:2])
    except (IndexError, ValueError):
        return "cannot read pip's version from %r" % out.strip()[:100]
    if (major, minor) < (22, 3):
        return "pip %d.%d of %s is older than 22.3 (no --python option)" % (major, minor, python)
    return None


def _run_step(argv, timeout, env, what):
    t0 = time.perf_counter()
    res = run_cmd(argv, timeout=timeout, env=env)
    elapsed = time.perf_counter() - t0
    if res.timed_out:
        raise StepError("%s timed out after %g s" % (what, timeout))
    if res.rc != 0:
        why = lifecycle.tail(res.stderr, 3, 600) or lifecycle.tail(res.stdout, 3, 600)
        raise StepError("%s failed (rc=%s): %s" % (what, res.rc, why))
    return elapsed


class StepError(RuntimeError):
    pass


def _makedirs(path):
    """makedirs that survives another host removing the shared run directory between its mkdir calls."""
    for attempt in range(3):
        try:
            os.makedirs(path)
            return
        except FileNotFoundError:
            if attempt == 2:
                raise


def _site_dirs(venv):
    found = []
    for lib in ("lib", "lib64"):
        base = os.path.join(venv, lib)
        try:
            for name in os.listdir(base):
                site = os.path.join(base, name, "site-packages")
                if os.path.isdir(site) and site not in found:
                    found.append(site)
        except OSError:
            pass
    return found


def install_one(tool, work, p, python, uv, env):
    """Make the environment and install into it; returns (venv, venv_s, install_s)."""
    venv = os.path.join(work, "venv")
    cache = os.path.join(work, "cache")
    os.makedirs(cache)
    packages = list(p["packages"])
    if tool == "pip" and p["pip_venv_with_pip"]:
        venv_s = _run_step([python, "-m", "venv", venv], p["venv_timeout_s"], env, "python -m venv")
        pip = [os.path.join(venv, "bin", "python"), "-m", "pip"]
    elif tool == "pip":
        # The node's pip installs into a venv made without one (pip >= 22.3): no ensurepip step.
        venv_s = _run_step([python, "-m", "venv", "--without-pip", venv], p["venv_timeout_s"], env,
                           "python -m venv --without-pip")
        pip = [python, "-m", "pip", "--python", os.path.join(venv, "bin", "python")]
    if tool == "pip":
        argv = pip + ["install", "--cache-dir", cache, "--disable-pip-version-check", "--no-input",
                      "--timeout", str(p["http_timeout_s"])]
        argv += index_args(p) + p["pip_args"] + packages
        install_s = _run_step(argv, p["install_timeout_s"], env, "pip install")
    else:
        # UV_COMPILE_BYTECODE (uv pip install --compile-bytecode; the variable, since the flag given twice, here and
        # in uv_args, is an error): pip writes the .pyc files at install, uv only when asked; without it uv's cold
        # import compiled hundreds of torch modules and was graded against storage thresholds as if reading them
        uv_env = dict(env, UV_CACHE_DIR=cache, UV_PYTHON_DOWNLOADS="never", UV_NO_PROGRESS="1",
                      UV_HTTP_TIMEOUT=str(int(p["http_timeout_s"])), UV_COMPILE_BYTECODE="1")
        uv_env.pop("VIRTUAL_ENV", None)
        venv_s = _run_step([uv, "venv", "--python", python, venv], p["venv_timeout_s"], uv_env, "uv venv")
        argv = [uv, "pip", "install", "--python", os.path.join(venv, "bin", "python")]
        argv += index_args(p) + p["uv_args"] + packages
        install_s = _run_step(argv, p["install_timeout_s"], uv_env, "uv pip install")
    return venv, venv_s, install_s


def run(art, p, out_dir):
    python = p["python"] or sys.executable
    tiers, tier_facts = lifecycle.resolve_tiers(p["tiers"])
    art.facts.update(tier_facts)
    art.facts.update({"tiers": tiers, "packages": list(p["packages"]), "python": python,
                      "index": " ".join(index_args(p)) or "the tools' default (%s unless configured)" % DEFAULT_INDEX})
    if p["offline"]:
        art.skip("%s and no local index or wheelhouse is set (lifecycle_index_url, lifecycle_find_links)"
                 % p["offline"])
        return
    if not p["packages"]:
        art.skip("no packages to install (lifecycle_packages is empty)")
        return
    if not tiers:
        art.skip("no usable storage tier on this node: %s" % (tier_facts.get("tiers_left_out") or "none found"))
        return
    why = index_check(p)
    if why:
        art.skip(why)
        return
    tools, skipped_tools = [], {}
    for tool in p["tools"]:
        if tool == "pip":
            why = pip_check(python, p["pip_venv_with_pip"])
            if why:
                skipped_tools["pip"] = why
                continue
            tools.append("pip")
        elif tool == "uv":
            uv, why = find_uv(p["uv"], python)
            if uv is None:
                skipped_tools["uv"] = why
                continue
            res = run_cmd([uv, "--version"], timeout=30)
            art.facts["uv"] = uv
            art.facts["uv_version"] = res.stdout.strip() if res.rc == 0 else None
            tools.append("uv")
        else:
            raise ValueError("tools: pip or uv, got %r" % tool)
    art.facts["skipped_tools"] = skipped_tools
    if "uv" in tools:
        art.facts["bytecode"] = ("compiled at install by both tools (pip does by default, uv with "
                                 "--compile-bytecode): install_s includes it, the cold import does not")
    if "pip" in tools:
        art.facts["pip_venv"] = ("python -m venv (ensurepip puts pip in the venv)" if p["pip_venv_with_pip"] else
                                 "python -m venv --without-pip, then the node's pip --python <venv>")
    if not tools:
        art.skip("no install tool could run: %s" % "; ".join("%s: %s" % kv for kv in sorted(skipped_tools.items())))
        return
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    for name in ("PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "PIP_REQUIRE_VIRTUALENV"):
        env.pop(name, None)  # an install writes its .pyc files and sees only its own environment, as for a user
    module = p["import_module"]
    art.facts.update({"import_module": module, "versions": {}, "failures": {}, "cache_drop": None})
    for tier in tiers:
        base = lifecycle.run_dir(tier["path"], art.run_id)
        mine = os.path.join(base, art.host)
        if not os.path.isdir(tier["path"]):
            for tool in tools:
                art.facts["failures"]["%s/%s" % (tier["name"], tool)] = "%s does not exist" % tier["path"]
            continue
        try:
            for tool in tools:
                key = "%s/%s" % (tier["name"], tool)
                work = os.path.join(mine, tool)
                labels = {"tier": tier["name"], "tool": tool}
                try:
                    _makedirs(work)
                    venv, venv_s, install_s = install_one(tool, work, p, python, art.facts.get("uv"), env)
                except (StepError, OSError) as exc:
                    art.facts["failures"][key] = str(exc)
                    storage_tier.remove_tree(work, stop_at=mine)
                    continue
                art.add("venv_s", round(venv_s, 3), "s", **labels)
                art.add("install_s", round(install_s, 3), "s", **labels)
                art.add("total_s", round(venv_s + install_s, 3), "s", **labels)
                art.facts["versions"][key] = lifecycle.dist_versions(_site_dirs(venv))
                art.add("env_bytes", lifecycle.tree_bytes(venv), "B", **labels)
                if module:
                    try:
                        art.facts["cache_drop"] = import_time.drop_page_cache(venv, p["cache_drop"])
                        times, origin = import_time.time_import(
                            module, max(1, p["import_repeat"]), p["import_timeout_s"],
                            expect_prefix=venv, python=os.path.join(venv, "bin", "python"))
                    except RuntimeError as exc:
                        art.facts["failures"][key + "/import"] = str(exc)
                    else:
                        cold, warm = lifecycle.median_warm(times)
                        art.add("import_s", round(cold, 4), "s", module=module, cache="cold", **labels)
                        if warm is not None:
                            art.add("import_s", round(warm, 4), "s", module=module, cache="warm", **labels)
                storage_tier.remove_tree(work, stop_at=mine)
        finally:
            storage_tier.remove_tree(mine, stop_at=base)
    left = [t["path"] for t in tiers if os.path.exists(os.path.join(lifecycle.run_dir(t["path"], art.run_id),
                                                                     art.host))]
    if left:
        art.facts["left_behind"] = left
    if art.facts["failures"] and not art.results:
        art.error("every install failed: %s" % "; ".join("%s: %s" % kv for kv in
                                                          sorted(art.facts["failures"].items())[:3]))
