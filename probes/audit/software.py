"""Software versions for the audit: installed packages (dpkg or rpm) and what the tools themselves report
(CUDA, NCCL, cuDNN, DCGM, container toolkit, Docker Engine, containerd, runc, enroot, apptainer, OFED/DOCA,
HPC-X, Slurm, kubelet, OpenSSH, sudo). Each version is recorded with where it was read; none is judged here.
"""

import glob
import json
import os
import re

from probes.audit.collect import read, read_strip, version_in

# Packages worth showing in the report (the full list is kept as a raw file).
PACKAGE_PATTERN = re.compile(
    r"^(nvidia|libnvidia|cuda|libcuda|libnccl|nccl|libcudnn|cudnn|datacenter-gpu-manager|dcgm|docker|"
    r"containerd|runc|enroot|pyxis|nvslurm-plugin-pyxis|apptainer|singularity|mlnx|ofed|doca|rdma-core|libibverbs|"
    r"ibverbs|infiniband-diags|hpcx|slurm|linux-image|kernel|openssh|sudo|amdgpu|rocm|gdrcopy|gdrdrv|nv-peer|"
    r"kubelet|kubeadm|cri-o|moby)")
LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
            "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib",
            "/usr/local/cuda/targets/sbsa-linux/lib", "/usr/local/lib")
SLURM_PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm", "/usr/lib/x86_64-linux-gnu/slurm-wlm",
                     "/usr/lib/aarch64-linux-gnu/slurm", "/usr/lib/aarch64-linux-gnu/slurm-wlm", "/usr/lib64/slurm",
                     "/usr/local/lib/slurm", "/usr/lib/slurm")


def parse_dpkg(text):
    """`dpkg-query -W -f '${Package}\\t${Version}\\t${db:Status-Abbrev}\\n'` -> {package: version} (installed)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[2].strip()[:2] in ("ii", "hi"):
            out[parts[0]] = parts[1]
    return out


def parse_rpm(text):
    out = {}
    for line in (text or "").splitlines():
        parts = line.split("\t")
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def lib_version(stem, dirs=LIB_DIRS):
    """Highest 'libnccl.so.2.21.5'-style version of a shared library found in the usual directories."""
    best = None
    for d in dirs:
        for path in glob.glob(os.path.join(d, stem + ".so.*")):
            m = re.search(r"\.so\.(\d+(?:\.\d+)+)$", path)
            if m and (best is None or _key(m.group(1)) > _key(best)):
                best = m.group(1)
    return best


def header_version(paths, prefix):
    """NCCL_MAJOR/MINOR/PATCH (or CUDNN_MAJOR ...) #defines of the first header found."""
    for path in paths:
        text = read(path, None, 200000)
        if not text:
            continue
        parts = []
        for field in ("MAJOR", "MINOR", "PATCHLEVEL" if prefix == "CUDNN" else "PATCH"):
            m = re.search(r"#define\s+%s_%s\s+(\d+)" % (prefix, field), text)
            if not m:
                break
            parts.append(m.group(1))
        if len(parts) == 3:
            return ".".join(parts)
    return None


def _key(version):
    return [int(p) if p.isdigit() else 0 for p in re.split(r"[.\-+~]", version)]


def cuda_toolkit(root="/usr/local/cuda"):
    text = read(os.path.join(root, "version.json"))
    if text:
        try:
            return json.loads(text)["cuda"]["version"], "version.json"
        except (ValueError, KeyError, TypeError):
            pass
    text = read(os.path.join(root, "version.txt"))
    if text:
        return version_in(text), "version.txt"
    return None, None


def parse_nvcc(text):
    """'Cuda compilation tools, release 12.4, V12.4.131' -> '12.4.131'."""
    m = re.search(r"V(\d+\.\d+\.\d+)", text or "")
    return m.group(1) if m else version_in(re.sub(r"^.*release ", "", text or "", flags=re.S))


def parse_dcgmi(text):
    """'dcgmi  version: 3.3.9' or 'Version : 3.3.5' -> '3.3.9'."""
    m = re.search(r"[Vv]ersion\s*:\s*(\d+(?:\.\d+)+)", text or "")
    return m.group(1) if m else version_in(text)


def parse_exporter(text):
    """dcgm-exporter versions read '<dcgm>-<exporter>' (4.4.2-4.7.0): the exporter's own version is the second."""
    m = re.search(r"(\d+\.\d+\.\d+)-(\d+\.\d+\.\d+)", text or "")
    return m.group(2) if m else version_in(text)


def parse_ofed(text):
    """`ofed_info -s`: 'MLNX_OFED_LINUX-23.10-1.1.9.0:' or 'OFED-internal-24.10-1.1.4:' -> (flavour, version)."""
    line = (text or "").strip().splitlines()[0].rstrip(":") if (text or "").strip() else ""
    m = re.match(r"^(.*?)-(\d+\.\d+-[\d.]+)$", line)
    return (m.group(1), m.group(2)) if m else (line or None, None)


def hpcx_installs():
    found = []
    for pattern in ("/opt/hpcx*", "/opt/nvidia/hpcx*", "/usr/local/hpcx*", "/opt/mellanox/hpcx*"):
        for path in glob.glob(pattern):
            m = re.search(r"hpcx-v?(\d+\.\d+(?:\.\d+)?)", os.path.basename(os.path.realpath(path)))
            if m:
                found.append(m.group(1))
    env_dir = os.environ.get("HPCX_DIR")
    if env_dir:
        m = re.search(r"hpcx-v?(\d+\.\d+(?:\.\d+)?)", env_dir)
        if m:
            found.append(m.group(1))
    return sorted(set(found), key=_key)


# tool -> (source name, argv, parser); parsers take stdout+stderr
TOOLS = {
    "nvcc": (["nvcc", "--version"], parse_nvcc),
    "dcgmi": (["dcgmi", "--version"], parse_dcgmi),
    "dcgm_exporter": (["dcgm-exporter", "--version"], parse_exporter),
    "nvidia_ctk": (["nvidia-ctk", "--version"], version_in),
    "nvidia_container_cli": (["nvidia-container-cli", "--version"], version_in),
    "dockerd": (["dockerd", "--version"], version_in),
    "docker_client": (["docker", "--version"], version_in),
    "containerd": (["containerd", "--version"], lambda t: version_in(t, r"\bv?(\d+\.\d+\.\d+)")),
    "runc": (["runc", "--version"], lambda t: version_in(t, r"runc version (\d+\.\d+\.\d+)")),
    "enroot": (["enroot", "version"], version_in),
    "apptainer": (["apptainer", "--version"], version_in),
    "singularity": (["singularity", "--version"], version_in),
    "ofed_info": (["ofed_info", "-s"], lambda t: parse_ofed(t)[1]),
    "slurm": (["sinfo", "--version"], lambda t: version_in(t, r"slurm(?:-wlm)? (\d+\.\d+(?:\.\d+)?)")),
    "kubelet": (["kubelet", "--version"], version_in),
    "openssh": (["ssh", "-V"], lambda t: version_in(t, r"OpenSSH_(\d+\.\d+(?:p\d+)?)")),
    "sudo": (["sudo", "--version"], lambda t: version_in(t, r"Sudo version (\S+)")),
}


def collect_tools(c, names):
    out = {}
    for name in names:
        argv, parser = TOOLS[name]
        if name == "nvcc":
            local = "/usr/local/cuda/bin/nvcc"
            res = c.cmd("tool:nvcc", argv, timeout=10)
            if res.missing and os.path.exists(local):
                res = c.cmd("tool:nvcc", [local, "--version"], timeout=10)
        else:
            res = c.cmd("tool:" + name, argv, timeout=10)
        if res.missing:
            out[name] = None
            continue
        text = (res.stdout + "\n" + res.stderr).strip()
        if name == "slurm" and res.rc != 0 and "configuration" in text:
            # the Slurm client is installed but this node has no slurm.conf: no version, and nothing broken
            c.mark("tool:slurm", "not_applicable", "Slurm client installed but not configured on this node")
        out[name] = {"version": parser(text) if res.rc == 0 else None,
                     "line": text.splitlines()[0][:160] if text else None, "rc": res.rc}
        if name == "ofed_info" and res.rc == 0:
            out[name]["flavour"] = parse_ofed(text)[0]
    return out


def collect_packages(c):
    res = c.cmd("packages", ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"], timeout=20)
    manager = "dpkg"
    if res.missing:
        res = c.cmd("packages", ["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"], timeout=30)
        manager = "rpm"
    if res.rc != 0:
        return {"manager": None if res.missing else manager, "selected": {}, "count": 0}
    allpk = parse_dpkg(res.stdout) if manager == "dpkg" else parse_rpm(res.stdout)
    c.save_raw("packages.txt", "".join("%s\t%s\n" % kv for kv in sorted(allpk.items())))
    return {"manager": manager, "count": len(allpk),
            "selected": {k: v for k, v in sorted(allpk.items()) if PACKAGE_PATTERN.match(k)}}


def collect_libraries(c):
    toolkit, source = cuda_toolkit()
    out = {
        "cuda_toolkit": toolkit, "cuda_toolkit_source": source,
        "nccl_lib": lib_version("libnccl"),
        "nccl_header": header_version(["/usr/include/nccl.h", "/usr/local/cuda/include/nccl.h",
                                       "/usr/local/include/nccl.h"], "NCCL"),
        "cudnn_lib": lib_version("libcudnn"),
        "cudnn_header": header_version(["/usr/include/cudnn_version.h", "/usr/local/cuda/include/cudnn_version.h",
                                        "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h",
                                        "/usr/include/x86_64-linux-gnu/cudnn_version_v8.h"], "CUDNN"),
        "gdrapi_lib": lib_version("libgdrapi"),
        "hpcx": hpcx_installs(),
        "pyxis_plugin": sorted(p for d in SLURM_PLUGIN_DIRS for p in glob.glob(os.path.join(d, "spank_pyxis.so"))),
        "pmix_plugin": sorted(os.path.basename(p) for d in SLURM_PLUGIN_DIRS
                              for p in glob.glob(os.path.join(d, "mpi_pmix*.so"))),
        "docker_socket_present": os.path.exists("/var/run/docker.sock"),
        "nvidia_container_runtime_config": read_strip("/etc/nvidia-container-runtime/config.toml") is not None,
    }
    c.mark("libraries", "ok")
    return out
