"""tools_detect: what this node has for the probes, and which of the asked-for system packages are missing.

Read-only. Run twice by the tools role: before the package step (variant `before`: its `missing_packages` is
what the role installs) and after it (variant `after`: what the report's tools section compares with, so that
"installed" is measured, not assumed). MPI counts as present when any MPI with its development files (mpicc,
mpi.h) is found (HPC-X, one on PATH, or a distribution's off-PATH layout): Open MPI is then not asked for. A runtime
alone does not count.
Facts: os, family, uid, home, prefix, packages {tool: {names, installed}}, missing_packages, commands, mpi, cuda,
nvidia, rocm, nccl, python, image (what nodes must share for one build to serve them all).
"""

import glob
import hashlib
import json
import os
import platform
import shutil

from probes.common.readers import read_text
from probes.params import Param, Params
from probes.tools import detect, tools_inference, tools_venv

COMMANDS = ["fio", "iperf3", "ib_write_bw", "numactl", "lspci", "ethtool", "ibstat", "ibv_devinfo", "mpirun",
            "make", "cmake", "git", "gcc", "g++", "nvcc", "hipcc", "nvidia-smi", "tar"]
PARAMS = Params(
    packages=Param(dict, {}, "tool -> {family: [package names]} (roles/tools/vars/main.yml tools_packages)"),
    wanted=Param(list, [], "tools whose packages to check (keys of packages)"),
    prefix=Param(str, "", "tools prefix (empty: /opt/clustermax-assess as root, else ~/.clustermax-assess)"),
    mpi_home=Param(str, "", "MPI to use (empty: HPC-X, PATH, the distribution layouts)"),
    cuda_home=Param(str, "", "CUDA toolkit to build with (empty: $CUDA_HOME, /usr/local/cuda, PATH)"),
    nccl_home=Param(str, "", "NCCL to build with (empty: $NCCL_HOME, the system, the probe venv's wheel)"),
    pins=Param(list, [], "torch pins (tools_torch_pins): says whether the venv this node would use is ready"),
    variant=Param(str, "", "forced torch wheel variant (tools_torch_variant)"),
    inference_pins=Param(dict, {}, "vLLM pins (tools_inference_pins): says whether this node's vLLM venv is ready"),
    package_step=Param(dict, {}, "the role's package step as it went (after: asked, rc, msg, changed, skipped)"),
)


def default_prefix(uid, home):
    return "/opt/clustermax-assess" if uid == 0 else os.path.join(home or "/tmp", ".clustermax-assess")


def image_key(osr, nvidia, rocm, cuda):
    """Nodes with the same key get the same build: OS, CPU architecture, CUDA toolkit, driver, GPU architectures."""
    parts = {"os": "%s-%s" % (osr.get("id"), osr.get("version_id")), "machine": platform.machine(),
             "cuda": (cuda or {}).get("version"), "driver": (nvidia or {}).get("driver"),
             "archs": (nvidia or {}).get("archs") or (rocm or {}).get("archs") or [],
             "rocm": (rocm or {}).get("version")}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16], parts


def mpi_buildable(mpi):
    """The MPI has what the builds need: its compiler wrapper (IOR's MPICC) and mpi.h (nccl-tests' MPI_HOME)."""
    return (os.access(os.path.join(mpi["bin"], "mpicc"), os.X_OK)
            and os.path.isfile(os.path.join(mpi.get("include") or os.path.join(mpi["home"], "include"), "mpi.h")))


def run(art, params, out_dir):
    osr = detect.os_release(read_text("/etc/os-release"))
    family = osr["family"]
    home = os.path.expanduser("~")
    uid = os.getuid()
    prefix = params["prefix"] or default_prefix(uid, home)
    mpi = detect.mpi(params["mpi_home"])
    wanted = [t for t in params["wanted"] if t in params["packages"]]
    unknown = sorted(set(params["wanted"]) - set(params["packages"]))
    names = {t: list((params["packages"][t] or {}).get(family) or []) for t in wanted}
    installed = detect.installed_packages(family, [n for ns in names.values() for n in ns])
    packages, missing = {}, []
    for tool in wanted:
        state = None if installed is None else all(installed.get(n) for n in names[tool])
        note = None
        if not names[tool]:
            note = "no package for %s on %s (tools_packages)" % (tool, family or osr.get("id"))
        elif tool == "openmpi" and mpi and not state:
            if mpi_buildable(mpi):
                note = "another MPI is present: %s %s at %s" % (mpi["kind"], mpi["version"] or "", mpi["bin"])
                state = True
            else:  # a runtime alone (openmpi-bin without libopenmpi-dev): nccl-tests and IOR cannot build with it
                note = ("%s %s at %s has no development files (mpicc, mpi.h): its packages are asked for"
                        % (mpi["kind"], mpi["version"] or "", mpi["bin"]))
        packages[tool] = {"names": names[tool], "installed": state, "note": note}
        if tool == "openmpi" and mpi and not state and names[tool]:
            packages[tool]["runtime_only"] = True
        if state is False:
            missing += [n for n in names[tool] if not installed.get(n)]
    nvidia = detect.nvidia()
    cuda = detect.cuda_toolkit(params["cuda_home"], (nvidia or {}).get("cuda"))  # the one the builds will take
    rocm = detect.rocm()
    # the Pythons of venvs already in the prefix: their nvidia-nccl wheel is an NCCL to build against
    venvs = sorted(p for p in glob.glob(os.path.join(prefix, "venv", "*", "bin", "python")) if os.access(p, os.X_OK))
    key, image = image_key(osr, nvidia, rocm, cuda)
    art.facts.update(
        os=osr, family=family, uid=uid, home=home, prefix=prefix, packages=packages, wanted=wanted,
        missing_packages=sorted(set(missing)), unknown_tools=unknown,
        package_db=None if installed is None else ("dpkg" if family == "debian" else "rpm"),
        commands={c: shutil.which(c) for c in COMMANDS}, mpi=mpi, cuda=cuda, nvidia=nvidia, rocm=rocm,
        nccl=detect.nccl(params["nccl_home"], venvs), python=detect.python_info(), image_key=key, image=image,
        package_step=params["package_step"] or None, changed=False)
    if installed is None and wanted:
        art.facts["package_db_error"] = ("cannot read the package database of %s (family %s): no dpkg-query or rpm"
                                         % (osr.get("pretty_name") or "this OS", family))
    if params["pins"]:
        python, _, _, chosen = tools_venv.plan(dict(params, index_url=""), nvidia, rocm)
        art.facts["venv_ready"] = bool(chosen and chosen["variant"]) and tools_venv.ready(
            prefix, tools_venv.venv_key(python, chosen))
    if params["inference_pins"]:
        _, kind, key = tools_inference.plan({"pins": params["inference_pins"]}, nvidia or {}, rocm or {})
        # None: no build for this node (the tools step says why), nothing to copy a wheelhouse for
        art.facts["inference_ready"] = tools_inference.ready(prefix, key) if kind else None
    if params["package_step"]:
        art.facts["assess_tools"] = tools_env(art.facts, params["package_step"])


# The names the probes ask about (probes/common/tools.py) for each package tool.
PROBE_TOOL = {"openmpi": "mpi"}


def package_reason(tool, rec, step, family):
    """Why a package tool is still missing after the package step, with the variable that controls it."""
    if rec.get("note") and not rec.get("runtime_only"):
        return rec["note"]
    if step.get("off"):
        return "not installed: %s is false" % step["off"]
    refresh = step.get("refresh") or {}
    # Debian/Ubuntu: apt's lists are refreshed before the install; with no mirror the install uses the cache as it is
    stale = ("; `apt-get update` failed before it, so apt had only the lists it already held (a mirror or proxy "
             "the node can reach, or a filled cache): %s" % (" ".join((refresh.get("msg") or "").split())[-400:]
                                                             or "no output")) if refresh.get("failed") else ""
    if step.get("failed"):
        cmd = {"debian": "apt-get install", "redhat": "dnf install", "suse": "zypper install"}.get(family, "install")
        return "`%s %s` failed (rc %s): %s%s (tools_system_packages, tools_package_names)" % (
            cmd, " ".join(step.get("asked") or rec["names"]), step.get("rc"),
            " ".join((step.get("msg") or "").split())[-600:] or "no output", stale)
    if step.get("ran"):
        return "the package step ran but %s is still not installed%s (tools_package_names)" % (
            ", ".join(rec["names"]), stale)
    return "not installed, and the package step did not run (tools_system_packages)"


def tools_env(facts, step):
    """What every later probe gets (assess_tools): the venv's python, PATH and LD_LIBRARY_PATH additions, and
    {tool: why missing} for the not-installed skips. facts: this probe's facts after the step; step: the role's
    package_step (asked, ran, off, failed, rc, msg, venv, inference, builds)."""
    missing = {}
    for tool, rec in facts["packages"].items():
        if rec["installed"] is False or (rec["installed"] is None and facts.get("package_db_error")):
            missing[PROBE_TOOL.get(tool, tool)] = (facts.get("package_db_error")
                                                   or package_reason(tool, rec, step, facts["family"]))
    path, libs = [], []
    for tool, rec in sorted((step.get("builds") or {}).items()):
        if rec.get("state") in ("present", "built", "copied"):
            path.append(rec["bin_dir"])
            libs += [d for d in rec.get("ld_library_path") or [] if d not in libs]
        elif rec.get("state") in ("failed", "missing", "off", "waiting"):
            missing[tool] = "%s: %s%s" % (rec["state"], rec.get("reason"),
                                          ("\n" + rec["tail"]) if rec.get("tail") else "")
    mpi = facts.get("mpi")
    on_path = os.environ.get("PATH", "").split(os.pathsep)
    if mpi and mpi["bin"] not in on_path and os.path.realpath(mpi["bin"]) not in map(os.path.realpath, on_path):
        path.append(mpi["bin"])  # RHEL's and SLES's Open MPI, HPC-X: off PATH until a module is loaded
    venv = step.get("venv") or {}
    python = venv.get("python") if venv.get("status") == "ok" else None
    if venv and not python:
        missing["torch"] = "the probe venv was not made: %s (tools_venv, assess_wheelhouse, assess_pip_index_url)" % (
            venv.get("reason") or "no reason recorded")
    # vLLM's venv (tools_inference): the inference phase's engine Python, or why the step could not make it
    inference = step.get("inference") or {}
    inference_python = inference.get("python") if inference.get("status") == "ok" else None
    if inference and not inference_python:
        missing["vllm"] = "vLLM's venv was not made: %s (tools_inference, tools_inference_pins)" % (
            inference.get("reason") or "no reason recorded")
    return {"python": python, "path": path, "ld_library_path": libs, "missing": missing,
            "inference_python": inference_python}
