"""What a node has, read without changing it: OS release, installed packages, MPI, CUDA, ROCm, NCCL, GPU
architecture. Each reader returns plain data (None where the thing is absent), so tools_detect, tools_venv and
tools_build share one way of finding each thing."""

import glob
import json
import os
import platform
import re
import shutil
import sys

from probes.common.command import run_cmd
from probes.common.readers import read_text
from probes.tools.variants import version_tuple

# Which package-manager family a distribution belongs to (os-release ID, then ID_LIKE).
FAMILIES = {"debian": "debian", "ubuntu": "debian", "rhel": "redhat", "rocky": "redhat", "almalinux": "redhat",
            "centos": "redhat", "fedora": "redhat", "ol": "redhat", "sles": "suse", "sled": "suse",
            "opensuse-leap": "suse", "opensuse": "suse", "suse": "suse"}
# MPIs that distributions install off PATH (RHEL's environment-modules layout, SLES's mpi-selector layout).
OFF_PATH_MPI = ["/usr/lib64/openmpi/bin", "/usr/lib64/mpi/gcc/openmpi4/bin", "/usr/lib64/mpi/gcc/openmpi5/bin",
                "/usr/lib64/mpich/bin"]
HPCX_DIRS = ["/opt/hpcx", "/opt/nvidia/hpcx"]
# Where CUDA toolkits are installed: the /usr/local/cuda link, then the versioned directories beside it.
CUDA_ROOTS = ["/usr/local/cuda"]
CUDA_VERSIONED = "/usr/local/cuda-*"
ROCM_DIRS = ["/opt/rocm"]


def os_release(text):
    """The KEY=value lines of /etc/os-release -> {id, version_id, id_like, pretty_name, family}."""
    fields = {}
    for line in (text or "").splitlines():
        m = re.match(r'^([A-Z_]+)=(.*)$', line.strip())
        if m:
            fields[m.group(1)] = m.group(2).strip().strip('"').strip("'")
    ids = [fields.get("ID", "")] + fields.get("ID_LIKE", "").split()
    family = next((FAMILIES[i] for i in ids if i in FAMILIES), None)
    return {"id": fields.get("ID"), "version_id": fields.get("VERSION_ID"), "id_like": fields.get("ID_LIKE"),
            "pretty_name": fields.get("PRETTY_NAME"), "family": family}


def platform_tag(osr=None):
    """"x86_64-ubuntu24.04": the CPU architecture and the OS a venv or a build was made on. Keys name it, so nodes
    sharing a prefix (an NFS home) never take another architecture's or distribution's binaries for theirs."""
    osr = osr if osr is not None else os_release(read_text("/etc/os-release"))
    return "%s-%s%s" % (platform.machine() or "unknown", osr.get("id") or "unknown-os", osr.get("version_id") or "")


def installed_packages(family, names, timeout=30.0):
    """{package: True|False} for the names, from dpkg (debian) or rpm (redhat, suse); None when the family's
    package database cannot be read (the caller says so instead of guessing)."""
    names = sorted(set(names))
    if not names:
        return {}
    if family == "debian":
        res = run_cmd(["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\\n"] + names, timeout=timeout)
        if res.missing:
            return None
        have = {}
        for line in res.stdout.splitlines():
            parts = line.split()
            # "ii" is installed; "rc" (removed, config left) and "un" are not
            if len(parts) >= 2:
                have[parts[0].split(":")[0]] = parts[1].startswith("ii")
        return {n: have.get(n, False) for n in names}
    if family in ("redhat", "suse"):
        res = run_cmd(["rpm", "-q", "--qf", "%{NAME}\\n"] + names, timeout=timeout)
        if res.missing:
            return None
        present = {line.strip() for line in res.stdout.splitlines() if line.strip() and " " not in line.strip()}
        return {n: n in present for n in names}
    return None


# The newest CUDA a driver branch supports, from NVIDIA's CUDA release notes (minimum driver of each toolkit):
# used only when nvidia-smi prints no CUDA version ("N/A", or an output cut off above the header).
DRIVER_CUDA = [(580, (13, 0)), (575, (12, 9)), (570, (12, 8)), (560, (12, 6)), (555, (12, 5)), (550, (12, 4)),
               (545, (12, 3)), (535, (12, 2)), (530, (12, 1)), (525, (12, 0)), (520, (11, 8)), (515, (11, 7)),
               (510, (11, 6)), (495, (11, 5)), (470, (11, 4)), (465, (11, 3)), (460, (11, 2)), (455, (11, 1)),
               (450, (11, 0))]


def nvidia_cuda_version(text):
    """The CUDA version the driver supports, as (major, minor): from `nvidia-smi`'s header ("CUDA Version: 12.4";
    drivers from 610 print "CUDA UMD Version: 13.3") or `nvidia-smi -q` ("CUDA Version : 12.4"); None when it
    prints none or "N/A"."""
    m = re.search(r"CUDA (?:UMD )?Version\s*:\s*(\d+)\.(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def nvidia_driver_version(text):
    """"Driver Version: 535.104.05", or "KMD Version: 610.43.02" from driver 610 on."""
    m = re.search(r"(?:Driver|KMD) Version\s*:\s*(\d+\.[\d.]+)", text or "")
    return m.group(1) if m else None


def cuda_for_driver(driver):
    """The newest CUDA a driver version supports, from DRIVER_CUDA; None for an unknown or too old one."""
    m = re.match(r"(\d+)", driver or "")
    if not m:
        return None
    branch = int(m.group(1))
    return next((cuda for floor, cuda in DRIVER_CUDA if branch >= floor), None)


def nvidia():
    """{driver, cuda: "12.4", archs: ["90"], gpus} from nvidia-smi, or None without one that answers."""
    res = run_cmd(["nvidia-smi"], timeout=30)
    if res.missing or res.rc != 0:
        return None if res.missing else {"error": (res.stdout + res.stderr).strip()[-300:], "cuda": None,
                                         "driver": None, "archs": [], "gpus": 0}
    driver = nvidia_driver_version(res.stdout)
    cuda = nvidia_cuda_version(res.stdout) or cuda_for_driver(driver)
    q = run_cmd(["nvidia-smi", "--query-gpu=compute_cap,name", "--format=csv,noheader"], timeout=30)
    rows = [[f.strip() for f in line.split(",", 1)] for line in q.stdout.splitlines() if line.strip()] \
        if q.rc == 0 else []
    # by number: "90" before "100" (the last is the one whose PTX a build carries)
    archs = sorted({r[0].replace(".", "") for r in rows if re.match(r"^\d+\.\d+$", r[0])}, key=int)
    return {"driver": driver, "cuda": "%d.%d" % cuda if cuda else None, "archs": archs,
            "names": sorted({r[1] for r in rows if len(r) > 1 and r[1]}), "gpus": len(rows), "error": None}


def rocm_version_text(text):
    """"6.2.4-120" (/opt/rocm/.info/version), "rocm-6.3.1" (the directory /opt/rocm points to) -> "6.2.4",
    "6.3.1"."""
    m = re.match(r"\s*(?:rocm-)?(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if not m:
        return None
    return ".".join(g for g in m.groups() if g is not None)


def rocm():
    """{version, home, archs} of the installed ROCm, or None."""
    for home in ROCM_DIRS + sorted(glob.glob("/opt/rocm-*"), reverse=True):
        # ROCm 7.x installs may lack .info/version: the versioned directory /opt/rocm links to says it too
        version = (rocm_version_text(read_text(os.path.join(home, ".info", "version")))
                   or (os.path.isdir(home) and rocm_version_text(os.path.basename(os.path.realpath(home)))))
        if version:
            res = run_cmd([os.path.join(home, "bin", "rocm_agent_enumerator")], timeout=30)
            archs = sorted({a.strip() for a in res.stdout.split() if a.strip().startswith("gfx")
                            and a.strip() != "gfx000"})
            return {"version": version, "home": home, "archs": archs}
    return None


def _toolkit_at(nvcc):
    res = run_cmd([nvcc, "--version"], timeout=30)
    m = re.search(r"release (\d+\.\d+)", res.stdout)
    return {"home": os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "nvcc": nvcc,
            "version": m.group(1) if m else None}


def runs_on_driver(toolkit_version, driver_cuda):
    """Whether what a toolkit builds runs under a driver for driver_cuda: the driver's CUDA major or older (CUDA's
    minor version compatibility covers a newer minor of the same major; a newer major fails at its first call with
    "CUDA driver version is insufficient for CUDA runtime version"). True when either is unknown."""
    have, want = version_tuple(driver_cuda), version_tuple(toolkit_version)
    return not have or not want or want[0] <= have[0]


def cuda_toolkit(home="", driver_cuda=None):
    """{home, nvcc, version} of the CUDA toolkit to build with, or None: home when given (the user's), else the first
    of $CUDA_HOME, /usr/local/cuda, the versioned /usr/local/cuda-X.Y (newest first) and nvcc on PATH whose
    binaries run under the driver (runs_on_driver with driver_cuda, the CUDA version nvidia-smi names); when none
    does, the first found, which the build then refuses, saying why."""
    if home and os.access(os.path.join(home, "bin", "nvcc"), os.X_OK):
        return _toolkit_at(os.path.join(home, "bin", "nvcc"))
    roots = [os.environ.get("CUDA_HOME")] + CUDA_ROOTS + sorted(
        glob.glob(CUDA_VERSIONED), key=lambda p: version_tuple(p.rsplit("-", 1)[-1]), reverse=True)
    found, seen = [], set()
    for nvcc in [os.path.join(r, "bin", "nvcc") for r in roots if r] + [shutil.which("nvcc")]:
        if not nvcc or not os.access(nvcc, os.X_OK) or os.path.realpath(nvcc) in seen:
            continue
        seen.add(os.path.realpath(nvcc))
        found.append(_toolkit_at(nvcc))
    return next((t for t in found if runs_on_driver(t["version"], driver_cuda)), found[0] if found else None)


def _nccl_version(header):
    text = read_text(header) or ""
    parts = [re.search(r"#define NCCL_%s\s+(\d+)" % k, text) for k in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(p.group(1) for p in parts) if all(parts) else None


def nccl(home="", pythons=()):
    """{home, include, lib, version, source} of an NCCL to build against: the given home, $NCCL_HOME, the system
    (/usr, /usr/local, /opt/nccl), then the nvidia-nccl wheel in one of the pythons' site-packages; or None."""
    def at(root, source):
        for inc in [os.path.join(root, "include")] + glob.glob(os.path.join(root, "include", "*")):
            header = os.path.join(inc, "nccl.h")
            if os.path.isfile(header):
                libs = [d for d in (os.path.join(root, "lib"), os.path.join(root, "lib64"),
                                    *glob.glob(os.path.join(root, "lib", "*-linux-gnu")))
                        if glob.glob(os.path.join(d, "libnccl.so*"))]
                if libs:
                    return {"home": root, "include": inc, "lib": libs[0], "version": _nccl_version(header),
                            "source": source}
        return None

    for root, source in ((home, "assess variable"), (os.environ.get("NCCL_HOME"), "NCCL_HOME"), ("/usr", "system"),
                         ("/usr/local", "system"), ("/opt/nccl", "system")):
        found = root and at(root, source)
        if found:
            return found
    for python in pythons:
        res = run_cmd([python, "-c", "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])"], timeout=60)
        if res.rc == 0 and res.stdout.strip():
            found = at(res.stdout.strip().splitlines()[-1], "wheel of %s" % python)
            if found:
                return found
    return None


def mpi_env(bindir):
    """The environment an MPI's wrappers need: HPC-X's Open MPI is relocated (unpacked away from where it was
    built), so its mpicc and mpirun find their files only through OPAL_PREFIX=<hpcx>/ompi, which hpcx-init.sh's
    hpcx_load exports (HPCX_MPI_DIR); a node where nobody loaded it has none. {} for any other MPI."""
    return {"OPAL_PREFIX": os.path.dirname(bindir)} if "hpcx" in bindir.lower() else {}


def mpi(home=""):
    """{kind, home, mpirun, bin, version, env} of the MPI to build and launch with, or None. HPC-X ($HPCX_HOME,
    /opt/hpcx) first, then an MPI on PATH, then the off-PATH distribution layouts. home: MPI_HOME from the user.
    env: what its wrappers need in their environment (mpi_env)."""
    candidates = []
    if home:
        candidates.append(os.path.join(home, "bin"))
    for hpcx in [os.environ.get("HPCX_HOME")] + HPCX_DIRS + sorted(glob.glob("/opt/hpcx-*"), reverse=True):
        if hpcx:
            candidates.append(os.path.join(hpcx, "ompi", "bin"))
    on_path = shutil.which("mpirun")
    if on_path:
        candidates.append(os.path.dirname(os.path.realpath(on_path)))
    candidates += OFF_PATH_MPI
    for bindir in candidates:
        mpirun = os.path.join(bindir, "mpirun")
        if not os.access(mpirun, os.X_OK):
            continue
        env = mpi_env(bindir)
        res = run_cmd([mpirun, "--version"], timeout=30, env=dict(os.environ, **env))
        text = res.stdout + res.stderr
        kind = ("hpcx" if "hpcx" in bindir.lower() else "openmpi" if "Open MPI" in text or "OpenRTE" in text
                else "mpich" if "HYDRA" in text or "mpich" in text.lower() else "intel" if "Intel" in text
                else "unknown")
        m = re.search(r"(\d+\.\d+(?:\.\d+)?)", text)
        return dict(mpi_dirs(bindir, env), kind=kind, mpirun=mpirun, bin=bindir, version=m.group(1) if m else None,
                    env=env)
    return None


def _libmpi_dir(dirs):
    return next((d for d in dirs if glob.glob(os.path.join(d, "libmpi.so*"))), None)


def mpi_dirs(bindir, env=None):
    """{home, include, lib} of the MPI whose wrappers are in bindir: where mpi.h and libmpi are, from the compiler
    wrapper (Open MPI's --showme:incdirs/--showme:libdirs, MPICH's -show), and the MPI_HOME a Makefile wants
    (include/mpi.h and lib/libmpi.so under it): Debian puts Open MPI under /usr/lib/<triplet>/openmpi/{include,lib};
    RHEL's openmpi-devel has mpi.h in /usr/include/openmpi-<arch> and libmpi in /usr/lib64/openmpi/lib, two places
    no single MPI_HOME names (home is then bin/.., and tools_build gives make a directory linking both). env: what
    the wrappers need (mpi_env)."""
    mpicc = os.path.join(bindir, "mpicc")
    env = dict(os.environ, **(env or {}))
    incs, libs = [], []
    res = run_cmd([mpicc, "--showme:incdirs"], timeout=30, env=env)
    if res.rc == 0:
        incs = res.stdout.split()
        res = run_cmd([mpicc, "--showme:libdirs"], timeout=30, env=env)
        libs = res.stdout.split() if res.rc == 0 else []
    else:
        res = run_cmd([mpicc, "-show"], timeout=30, env=env)  # MPICH
        flags = res.stdout.split() if res.rc == 0 else []
        incs = [f[2:] for f in flags if f.startswith("-I")]
        libs = [f[2:] for f in flags if f.startswith("-L")]
    inc = next((i.rstrip("/") for i in incs if os.path.isfile(os.path.join(i, "mpi.h"))), None)
    lib = _libmpi_dir([d.rstrip("/") for d in libs])
    home = os.path.dirname(bindir)
    if inc and os.path.basename(inc) == "include":
        home = os.path.dirname(inc)
    lib = lib or _libmpi_dir([os.path.join(home, "lib"), os.path.join(home, "lib64")]) or os.path.join(home, "lib")
    return {"home": home, "include": inc or os.path.join(home, "include"), "lib": lib}


def mpi_home(bindir):
    """The MPI_HOME a Makefile wants (mpi_dirs)."""
    return mpi_dirs(bindir, mpi_env(bindir))["home"]


def python_info(python=None):
    """{python, version: "3.11", torch} of an interpreter (default this one)."""
    python = python or sys.executable
    code = ("import json, sys\ntry:\n import torch; t = torch.__version__\nexcept Exception:\n t = None\n"
            "print(json.dumps({'version': '%d.%d' % sys.version_info[:2], 'torch': t}))")
    res = run_cmd([python, "-c", code], timeout=120)
    try:
        doc = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"python": python, "version": None, "torch": None, "error": (res.stderr or res.stdout)[-300:]}
    return dict(doc, python=python)


# One tiny op on the GPU: a torch without kernels for the node's GPUs imports and says is_available(), then fails here.
DEVICE_CHECK = ("import torch\nx = torch.ones(1, device='cuda') + 1\ntorch.cuda.synchronize()\n"
                "print('device-check', float(x.item()), torch.cuda.get_device_name(0))")
# What torch prints when its build has no kernels for the GPU (the error, and the warning before it).
NO_KERNEL = re.compile(r"no kernel image is available|is not compatible with the current PyTorch installation|"
                       r"invalid device function", re.I)


def torch_device_check(python, timeout=180.0):
    """{ok, no_kernel, output} of one CUDA (or ROCm: torch's "cuda" device) op under the interpreter's torch."""
    res = run_cmd([python, "-c", DEVICE_CHECK], timeout=timeout)
    text = (res.stdout + res.stderr).strip()
    ok = res.rc == 0 and "device-check 2.0" in res.stdout
    return {"ok": ok, "no_kernel": not ok and bool(NO_KERNEL.search(text)), "output": text[-1500:]}
