"""import_time: how long `import torch` takes, per storage tier (seed: 1-2 s is good; 10-20 s shows a
lots-of-small-files problem on that filesystem).

Two modes, stated in the artifact's facts (`measured`):
  * node (the quick profile): times `python -c 'import torch'` with the node's own torch, run `repeat` times in a
    fresh interpreter each; the result is labelled with the tier that holds that torch installation (the
    longest tier path containing it, else "python"). The first run may be cold, the others are warm.
  * copy (standard, full): copies the torch package tree (package directory and its .dist-info) onto each tier,
    fsyncs it and drops its page cache, then imports torch from the copy (PYTHONPATH first, the copy is checked
    to be what was imported): a cold-ish first import that reads the tier, then warm imports. The copy is removed
    afterwards. The other packages torch imports still come from the node's Python.
"""

import glob
import importlib.util
import os
import shutil
import statistics
import sys
import time

from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.params import Param, Params

PARAMS = Params(
    mode=Param(str, "node", "node: the node's own installation; copy: a copy of the package on each tier",
               choices=("node", "copy")),
    tiers=Param(list, [], "storage tiers {name, path, shared}: where the copies go, or which holds the module"),
    module=Param(str, "torch", "the module imported"),
    repeat=Param(int, 2, "imports per tier, each in a fresh interpreter: the first cold, the others warm"),
    timeout_s=Param(float, 300, "seconds per import"),
    space_factor=Param(float, 1.5, "free space needed on a tier, as a multiple of the package's size"),
)


def module_location(module):
    """(package directory or module file, list of extra trees to copy such as .dist-info), or (None, [])."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin in (None, "built-in", "frozen"):
        return None, []
    if spec.submodule_search_locations:
        pkg = list(spec.submodule_search_locations)[0]
        site = os.path.dirname(pkg)
        extras = sorted(glob.glob(os.path.join(site, "%s-*.dist-info" % module)))
        return pkg, extras
    return spec.origin, []


def tree_size(path):
    files, size = 0, 0
    if os.path.isfile(path):
        return 1, os.path.getsize(path)
    for d, _, names in os.walk(path):
        for name in names:
            try:
                size += os.path.getsize(os.path.join(d, name))
                files += 1
            except OSError:
                pass
    return files, size


def time_import(module, repeat, timeout, pythonpath=None, expect_prefix=None, python=None):
    """Seconds per fresh-interpreter import (list), and the file each import came from. python: the interpreter
    (default this one), e.g. a virtual environment's, whose own site-packages then provide the module."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    code = "import %s as m; print(getattr(m, '__file__', ''))" % module
    times, origin = [], None
    for _ in range(int(repeat)):
        t0 = time.perf_counter()
        res = run_cmd([python or sys.executable, "-c", code], timeout=timeout, env=env, cwd=pythonpath or None)
        elapsed = time.perf_counter() - t0
        if res.rc != 0:
            raise RuntimeError("import %s failed (rc=%s): %s" % (module, res.rc,
                                                                 (res.stderr.strip().splitlines() or [""])[-1]))
        out = res.stdout.strip()
        origin = out.splitlines()[-1] if out else None
        if expect_prefix and not (origin or "").startswith(expect_prefix):
            raise RuntimeError("import %s came from %s, not from the copy in %s" % (module, origin, expect_prefix))
        times.append(elapsed)
    return times, origin


def drop_page_cache(tree, method="fadvise"):
    """Evict a tree's files from this node's page cache before a cold import; returns how it was done, for the
    artifact. fadvise: posix_fadvise(DONTNEED) on every file of the tree (any user; file data only, the kernel
    keeps directory entries and inodes cached). global: also /proc/sys/vm/drop_caches = 3 (page cache, dentries
    and inodes of the whole node; root only, otherwise fadvise alone is used and the text says so)."""
    files = storage_tier.drop_cache(tree)
    text = "posix_fadvise(DONTNEED) on %d files of the environment" % files
    if method == "global":
        if os.geteuid() != 0:
            return text + " (drop_caches asked for, but not root)"
        os.sync()
        try:
            with open("/proc/sys/vm/drop_caches", "w") as fh:
                fh.write("3\n")
            return text + ", then /proc/sys/vm/drop_caches=3"
        except OSError as exc:
            return text + " (/proc/sys/vm/drop_caches refused: %s)" % exc.strerror
    return text


def baseline(repeat, timeout):
    """A bare interpreter's start, so the report can show what the import itself costs."""
    times = []
    for _ in range(int(repeat)):
        t0 = time.perf_counter()
        run_cmd([sys.executable, "-c", "pass"], timeout=timeout)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def tier_of(path, tiers):
    best, best_len = None, -1
    real = os.path.realpath(path)
    for tier in tiers:
        root = os.path.realpath(tier["path"]).rstrip("/") + "/"
        if (real + "/").startswith(root) and len(root) > best_len:
            best, best_len = tier["name"], len(root)
    return best


def _add(art, times, module, **labels):
    art.add("import_s", round(times[0], 4), "s", module=module, cache="first", **labels)
    if len(times) > 1:
        art.add("import_s", round(statistics.median(times[1:]), 4), "s", module=module, cache="warm", **labels)


def run(art, p, out_dir):
    module = p["module"]
    tiers = [storage_tier.check_tier(t) for t in p["tiers"]]
    location, extras = module_location(module)
    if location is None:
        art.skip("%s is not importable by %s" % (module, sys.executable))
        return
    files, size = tree_size(location)
    art.facts.update({"module": module, "module_location": location, "module_files": files,
                      "module_bytes": size, "python": sys.executable, "mode": p["mode"]})
    art.add("python_start_s", round(baseline(p["repeat"], 60), 4), "s")
    if p["mode"] == "node":
        tier = tier_of(location, tiers) or "python"
        art.facts["measured"] = ("import %s of the node's own installation (%s), labelled with the tier holding "
                                 "it (%s); no copy is made in this mode" % (module, location, tier))
        times, _ = time_import(module, p["repeat"], p["timeout_s"])
        _add(art, times, module, tier=tier, source="node")
        return
    art.facts["measured"] = ("import %s from a copy of its package tree (%d files, %.0f MiB) placed on each tier, "
                             "page cache dropped before the first import" % (module, files, size / 2**20))
    skipped = {}
    for tier in tiers:
        base = storage_tier.run_dir(tier["path"], art.run_id)
        site = os.path.join(base, "import-%s" % tier["name"], art.host)
        try:
            if not os.path.isdir(tier["path"]):
                skipped[tier["name"]] = "%s does not exist" % tier["path"]
                continue
            refusal = storage_tier.check_space(tier["path"], size, p["space_factor"])
            if refusal:
                skipped[tier["name"]] = refusal
                continue
            os.makedirs(site, exist_ok=True)
            t0 = time.perf_counter()
            target = os.path.join(site, os.path.basename(location))
            if os.path.isdir(location):
                shutil.copytree(location, target)  # with __pycache__: an installed tree has its .pyc files
            else:
                shutil.copy2(location, target)
            for extra in extras:
                shutil.copytree(extra, os.path.join(site, os.path.basename(extra)))
            storage_tier.drop_cache(site)
            art.add("copy_s", round(time.perf_counter() - t0, 3), "s", tier=tier["name"], module=module)
            times, _ = time_import(module, p["repeat"], p["timeout_s"], pythonpath=site, expect_prefix=site)
            _add(art, times, module, tier=tier["name"], source="copy")
        finally:
            storage_tier.remove_tree(site, stop_at=base)
    if skipped:
        art.facts["skipped_tiers"] = skipped
