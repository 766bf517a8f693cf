"""tools_detect: what this node has for the probes, and which of the asked-for system packages are missing.

Read-only. Run twice by the tools role: before the package step (variant `before`: its `missing_packages` is
what the role installs) and after it (variant `after`: what the report's tools section compares with, so that
"installed" is measured, not assumed). MPI counts as present when any MPI is found (HPC-X, one on PATH, or a
distribution's off-PATH layout): Open MPI is then not asked for.
Facts: os, family, uid, home, prefix, packages {tool: {names, installed}}, missing_packages, commands, mpi, cuda,
nvidia, rocm, nccl, python, image (what nodes must share for one build to serve them all).
"""

import hashlib
import json
import os
import platform
import shutil

from probes.common.readers import read_text
from probes.params import Param, Params
from probes.tools import detect

COMMANDS = ["fio", "iperf3", "ib_write_bw", "numactl", "lspci", "ethtool", "ibstat", "ibv_devinfo", "mpirun",
            "make", "cmake", "git", "gcc", "g++", "nvcc", "hipcc", "nvidia-smi", "tar"]
PARAMS = Params(
    packages=Param(dict, {}, "tool -> {family: [package names]} (roles/tools/vars/main.yml tools_packages)"),
    wanted=Param(list, [], "tools whose packages to check (keys of packages)"),
    prefix=Param(str, "", "tools prefix (empty: /opt/clustermax-assess as root, else ~/.clustermax-assess)"),
    mpi_home=Param(str, "", "MPI to use (empty: HPC-X, PATH, the distribution layouts)"),
    cuda_home=Param(str, "", "CUDA toolkit to build with (empty: $CUDA_HOME, /usr/local/cuda, PATH)"),
    nccl_home=Param(str, "", "NCCL to build with (empty: $NCCL_HOME, the system, the probe venv's wheel)"),
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
            note = "another MPI is present: %s %s at %s" % (mpi["kind"], mpi["version"] or "", mpi["bin"])
            state = True
        packages[tool] = {"names": names[tool], "installed": state, "note": note}
        if state is False:
            missing += [n for n in names[tool] if not installed.get(n)]
    cuda = detect.cuda_toolkit(params["cuda_home"])
    nvidia = detect.nvidia()
    rocm = detect.rocm()
    venvs = sorted(p for p in (os.path.join(d, "bin", "python") for d in
                               (os.path.join(prefix, "venv", n) for n in (os.listdir(os.path.join(prefix, "venv"))
                                                                         if os.path.isdir(os.path.join(prefix, "venv"))
                                                                         else [])))
                   if os.access(p, os.X_OK))
    key, image = image_key(osr, nvidia, rocm, cuda)
    art.facts.update(
        os=osr, family=family, uid=uid, home=home, prefix=prefix, packages=packages,
        missing_packages=sorted(set(missing)), unknown_tools=unknown,
        package_db=None if installed is None else ("dpkg" if family == "debian" else "rpm"),
        commands={c: shutil.which(c) for c in COMMANDS}, mpi=mpi, cuda=cuda, nvidia=nvidia, rocm=rocm,
        nccl=detect.nccl(params["nccl_home"], venvs), python=detect.python_info(), image_key=key, image=image,
        package_step=params["package_step"] or None, changed=False)
    if installed is None and wanted:
        art.facts["package_db_error"] = ("cannot read the package database of %s (family %s): no dpkg-query or rpm"
                                         % (osr.get("pretty_name") or "this OS", family))
