"""tools_venv: the probe Python, a venv in the tools prefix with torch matched to the node.

The wheel variant follows the node (probes/tools/variants.py: the CUDA version the driver supports, the installed
ROCm, else the CPU build); releases and variants are pinned in roles/tools/vars/main.yml. Wheels come from
`index_url` (default: PyTorch's index for the variant) and `extra_index_urls`, or only from `wheelhouse`, a
directory on the node (`--no-index`: the air-gapped path). The other requirements (`packages`, tools_venv_packages:
datagen's numpy, av and pyarrow by default) are a second pip call, from the wheelhouse or the site's index
(assess_pip_index_url) or PyPI, never PyTorch's index, which does not carry them; their failure is a fact
(packages_error), not the venv's, and a reused venv gets the ones its marker does not list. On a GPU build
`gpu_packages` (tools_venv_gpu_packages: torchtitan, the training phase's engine) follow in a call of their own.
pip runs with no configuration file and no PIP_* variable (install.pip_env) so that a node's own pip configuration
cannot change what is installed.

The venv lives in <prefix>/venv/py<X.Y>-<machine>-<os><version>-torch<version>-<variant>; a marker written last names
what it holds, so an existing venv with the same (python, platform, torch, variant) is reused (changed: false) and a
half-made one is made again. On a node with GPUs a GPU build must run one op on the device (a torch without kernels
for the node's GPUs imports, then fails "no kernel image is available"): else an error artifact.
Facts: python (the venv's interpreter), key, torch, variant, why, reused, changed, the pip command and its tail.
A failed install is an error artifact whose reason carries the command, the last lines of its output and the
variable that controls it; the role then keeps the Python preflight found.
"""

import os
import shutil
import sys

from probes.common.command import run_cmd
from probes.params import Param, Params
from probes.tools import detect, variants
from probes.tools.install import VENV_MARKER as MARKER
from probes.tools.install import LockTimeout, locked, pip_env, read_marker, tail, venv_made, write_marker

PARAMS = Params(
    prefix=Param(str, "", "tools prefix (set by the role)"),
    pins=Param(list, [], "torch releases and their variants, newest first (tools_torch_pins)"),
    packages=Param(list, [], "more requirements installed beside torch (tools_venv_packages)"),
    gpu_packages=Param(list, [], "requirements installed on a GPU build only, with torch held at the venv's "
                                 "(tools_venv_gpu_packages: torchtitan)"),
    index_url=Param(str, "", "package index (assess_pip_index_url; empty: PyTorch's index for the variant)"),
    extra_index_urls=Param(list, [], "more indexes (assess_pip_extra_index_urls)"),
    wheelhouse=Param(str, "", "directory of wheels on the node: install only from it (assess_wheelhouse)"),
    variant=Param(str, "", "force a wheel variant (cpu, cu128, rocm6.4, ...; empty: chosen from the node)"),
    min_free_gib=Param(float, 0, "free space the prefix needs first (0: 2 GiB for cpu, 8 GiB for a GPU build)"),
    timeout=Param(float, 3000, "seconds the install may take"),
)


def plan(params, nv=None, rocm=None):
    """The node's driver and ROCm (read here unless the caller has them), and the (torch, variant) for them."""
    nv = nv if nv is not None else detect.nvidia()
    rocm = rocm if rocm is not None else detect.rocm()
    python = "%d.%d" % sys.version_info[:2]
    chosen = variants.choose(params["pins"], cuda=(nv or {}).get("cuda"), rocm=(rocm or {}).get("version"),
                             python=python, index_url=params["index_url"], archs=(nv or {}).get("archs") or (),
                             names=(nv or {}).get("names") or ())
    if chosen and params["variant"]:
        # forced: the release chosen for the node, or (none runs on its GPUs) the newest for this Python
        torch = chosen["torch"] or next((p["torch"] for p in params["pins"]
                                         if not p.get("python") or python in p["python"]), None)
        chosen = dict(chosen, torch=torch, variant=params["variant"], why="forced (tools_torch_variant)",
                      index_url=params["index_url"] or variants.DEFAULT_INDEX % params["variant"])
    return python, nv, rocm, chosen


def venv_key(python, chosen, tag=None):
    """py3.12-x86_64-ubuntu24.04-torch2.13.0-cu130: the Python, the CPU architecture and OS (detect.platform_tag: a
    shared prefix holds one venv per kind of node), torch and its variant."""
    return "py%s-%s-torch%s-%s" % (python, tag or detect.platform_tag(), chosen["torch"], chosen["variant"])


def ready(prefix, key):
    """The venv of this key exists and its marker says so (made to the end)."""
    return venv_made(os.path.join(prefix, "venv", key), key)


def pip_argv(venv, chosen, params):
    """torch alone, from the wheelhouse or the variant's index (PyTorch's own, which does not carry every package)."""
    argv = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check",
            "--no-input", "torch==%s" % chosen["torch"]]
    if params["wheelhouse"]:
        return argv + ["--no-index", "--find-links", params["wheelhouse"]]
    argv += ["--index-url", chosen["index_url"]]
    for url in params["extra_index_urls"]:
        argv += ["--extra-index-url", url]
    return argv


def packages_argv(venv, params, key="packages"):
    """The other requirements (tools_venv_packages, or `key`'s list), after torch: from the wheelhouse, else the
    site's index (assess_pip_index_url) or PyPI, never the torch variant's index (pyarrow and av are not on
    PyTorch's)."""
    argv = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check",
            "--no-input"] + list(params[key])
    if params["wheelhouse"]:
        return argv + ["--no-index", "--find-links", params["wheelhouse"]]
    if params["index_url"]:
        argv += ["--index-url", params["index_url"]]
    for url in params["extra_index_urls"]:
        argv += ["--extra-index-url", url]
    return argv


def install_packages(art, venv, params, marker_path, env, key="packages"):
    """tools_venv_packages (key "packages") or tools_venv_gpu_packages (key "gpu_packages") into the venv when its
    marker does not list them yet. A failure is recorded (facts <key>_error) and leaves the venv in use: the probes
    that need a missing package skip with the reason (the training phase then runs its torch job, not torchtitan)."""
    wanted = sorted(params[key])
    marker = read_marker(marker_path) or {}
    if not wanted or set(wanted) <= set(marker.get(key) or []):
        art.facts[key] = wanted
        return
    argv = packages_argv(venv, params, key)
    res = run_cmd(argv, timeout=params["timeout"], env=env)
    art.facts["pip_" + key] = " ".join(argv)
    if res.rc != 0:
        art.facts[key + "_error"] = "`%s` failed (rc %s; tools_venv_%s, assess_wheelhouse, assess_pip_index_url):" \
                                    "\n%s" % (" ".join(argv), res.rc, key, tail(res))
        return
    write_marker(marker_path, dict(marker, **{key: wanted}))
    art.facts.update({key: wanted, "changed": True})


def install_all_packages(art, venv, params, chosen, marker_path, env):
    """tools_venv_packages, then on a GPU build tools_venv_gpu_packages in a pip call of their own, with torch held at
    the venv's release (`torch==X` matches X+cu130): torchtitan needs torch >= 2.11 (through spmd_types), and on an
    older pin pip must fail there, not replace the node's matched torch with PyPI's; on the CPU build they are left
    out (torchtitan sets a CUDA device unconditionally)."""
    install_packages(art, venv, params, marker_path, env)
    gpu = list(params["gpu_packages"]) if chosen["variant"] != "cpu" else []
    art.facts["gpu_packages_wanted"] = gpu or None
    if gpu:
        install_packages(art, venv, dict(params, gpu_packages=gpu + ["torch==%s" % chosen["torch"]]), marker_path,
                         env, key="gpu_packages")


def check_device(art, vpython, chosen, nv, rocm):
    """On a GPU build on a node with GPUs: one tiny op on the device (detect.torch_device_check). None when it ran
    (or there is nothing to check), else the error: torch's build has no kernels for the node's GPUs. Any other
    failure (a GPU in a bad state) is recorded as a fact for the GPU probes to meet, not the venv's fault."""
    gpus = (nv or {}).get("gpus") or (rocm or {}).get("archs")
    if chosen["variant"] == "cpu" or not gpus:
        return None
    res = detect.torch_device_check(vpython)
    art.facts["device_check"] = res
    if res["no_kernel"]:
        return ("torch %s %s in %s has no kernels for this node's GPUs (%s): one op on the device failed "
                "(tools_torch_pins, tools_torch_variant):\n%s" % (
                    chosen["torch"], chosen["variant"], os.path.dirname(os.path.dirname(vpython)),
                    ", ".join((nv or {}).get("names") or []) or ", ".join(
                        "compute capability %s" % variants.cc_text(a) for a in (nv or {}).get("archs") or [])
                    or ", ".join((rocm or {}).get("archs") or []), res["output"][-800:]))
    return None


def run(art, params, out_dir):
    if not params["prefix"]:
        art.error("no prefix given (assess_tools_prefix)")
        return
    python, nv, rocm, chosen = plan(params)
    art.facts.update(driver_cuda=(nv or {}).get("cuda"), rocm=(rocm or {}).get("version"), base_python=sys.executable,
                     changed=False)
    if chosen is None:
        art.error("no torch release in tools_torch_pins has a build for Python %s on this node" % python)
        return
    if chosen["variant"] is None:  # none of the builds the driver loads has kernels for the node's GPUs
        art.facts.update(gpu_archs=chosen.get("archs"), why=chosen["why"])
        art.error(chosen["why"])
        return
    key = venv_key(python, chosen)
    venvs = os.path.join(params["prefix"], "venv")
    venv = os.path.join(venvs, key)
    vpython = os.path.join(venv, "bin", "python")
    art.facts.update(key=key, torch=chosen["torch"], variant=chosen["variant"], why=chosen["why"], venv=venv,
                     source=params["wheelhouse"] and "wheelhouse %s" % params["wheelhouse"] or chosen["index_url"])
    try:
        with locked(venvs, timeout=params["timeout"]):
            env = pip_env()
            if ready(params["prefix"], key):
                info = detect.python_info(vpython)
                if info.get("torch"):
                    art.facts.update(python=vpython, reused=True, installed_torch=info["torch"])
                    unusable = check_device(art, vpython, chosen, nv, rocm)
                    if unusable:
                        art.error(unusable)
                        return
                    install_all_packages(art, venv, params, chosen, os.path.join(venv, MARKER), env)
                    return
            need = params["min_free_gib"] or (2 if chosen["variant"] == "cpu" else 8)
            free = shutil.disk_usage(venvs).free / 2**30
            if free < need:
                art.error("only %.1f GiB free under %s, the %s torch venv needs about %.0f GiB (assess_tools_prefix)"
                          % (free, venvs, chosen["variant"], need))
                return
            shutil.rmtree(venv, ignore_errors=True)
            res = run_cmd([sys.executable, "-m", "venv", venv], timeout=300)
            if res.rc != 0:
                art.error("`%s -m venv %s` failed (rc %s; on Debian/Ubuntu the python3-venv package provides it; "
                          "assess_tools_venv):\n%s" % (sys.executable, venv, res.rc, tail(res)))
                return
            argv = pip_argv(venv, chosen, params)
            res = run_cmd(argv, timeout=params["timeout"], env=env)
            art.facts["pip"] = " ".join(argv)
            if res.rc != 0:
                shutil.rmtree(venv, ignore_errors=True)
                art.error("`%s` failed (rc %s; the sources are assess_wheelhouse, assess_pip_index_url and "
                          "assess_pip_extra_index_urls):\n%s" % (" ".join(argv), res.rc, tail(res)))
                return
            info = detect.python_info(vpython)
            if not info.get("torch"):
                shutil.rmtree(venv, ignore_errors=True)
                art.error("torch does not import in the new venv %s: %s" % (venv, info.get("error") or "no torch"))
                return
            write_marker(os.path.join(venv, MARKER), {"key": key, "torch": info["torch"],
                                                      "variant": chosen["variant"], "python": python})
            # marked first: the venv is whole, its torch is what the pins name (another node's GPUs may run it)
            unusable = check_device(art, vpython, chosen, nv, rocm)
            if unusable:
                art.error(unusable)
                return
            art.facts.update(python=vpython, reused=False, installed_torch=info["torch"], changed=True)
            install_all_packages(art, venv, params, chosen, os.path.join(venv, MARKER), env)
    except LockTimeout as exc:
        art.error(str(exc))
