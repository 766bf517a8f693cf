"""Software versions for the audit: installed packages (dpkg or rpm) and what the tools themselves report
(CUDA, NCCL, cuDNN, DCGM, container toolkit, Docker Engine, containerd, runc, enroot, apptainer, OFED/DOCA,
HPC-X, Slurm, kubelet, OpenSSH, sudo). Each version is recorded with where it was read; none is judged here.

Whether containers reach the GPUs is shown, not inferred from a config file: one short container of an image that is
already on the node (docker, podman, apptainer) or a one-GPU Slurm job step on this node runs `nvidia-smi -L`, and the
GPUs it listed are recorded (collect_container_gpu).
"""

import glob
import json
import os
import re
import shutil
import socket
import time

from probes.audit.collect import read, read_strip, version_in
from probes.common import slurm
from probes.common.command import run_cmd
from probes.common.device import parse_amd_smi_list

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


# A version with its pre-release suffix, if any (runc 1.5.0-rc.2, 1.0.0-rc93; Docker 29.0.0-rc.1; nvidia-ctk
# 1.19.1-rc.1): a release candidate of a minimum is below it, so the suffix is kept. A distro revision is not.
_PRE = r"(?:[-~.]?(?:rc|alpha|beta|pre|dev)(?:\.?\d+)*(?![A-Za-z]))?"
VERSION_PRE = r"(\d+(?:\.\d+)+" + _PRE + ")"

# tool -> (source name, argv, parser); parsers take stdout+stderr
TOOLS = {
    "nvcc": (["nvcc", "--version"], parse_nvcc),
    "dcgmi": (["dcgmi", "--version"], parse_dcgmi),
    "dcgm_exporter": (["dcgm-exporter", "--version"], parse_exporter),
    "nvidia_ctk": (["nvidia-ctk", "--version"], lambda t: version_in(t, VERSION_PRE)),
    "nvidia_container_cli": (["nvidia-container-cli", "--version"], lambda t: version_in(t, VERSION_PRE)),
    "dockerd": (["dockerd", "--version"], lambda t: version_in(t, VERSION_PRE)),
    "docker_client": (["docker", "--version"], version_in),
    "containerd": (["containerd", "--version"], lambda t: version_in(t, r"\bv?(\d+\.\d+\.\d+)")),
    "runc": (["runc", "--version"], lambda t: version_in(t, r"runc version (\d+\.\d+\.\d+" + _PRE + ")")),
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


# ---- containers and the GPUs: one short container or job step that runs nvidia-smi -L ---------------------------

# Local images tried when none is given, best first. The NVIDIA hook mounts the driver's nvidia-smi and libraries into
# the container, not a C library: the image must bring glibc (musl and distroless images cannot run nvidia-smi).
IMAGE_PREFERENCE = ("cuda", "nvidia", "pytorch", "nemo", "tensorflow", "ubuntu", "debian", "rockylinux", "almalinux",
                    "centos", "rhel", "ubi", "fedora", "python")
# Output that means the runtime never got as far as starting the container or job step: the GPUs were not tried.
NOT_STARTED = re.compile(r"Cannot connect to the Docker daemon|permission denied while trying to connect|"
                         r"No such image|Unable to find image|image not known|Unable to allocate resources|"
                         r"srun: error: .*[Ii]nvalid")
NO_TOOL_IN_IMAGE = re.compile(r"executable file not found|no such file or directory|OCI runtime exec failed", re.I)
_SMI_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[0-9a-fA-F-]+)\)$")
# Seconds one container or job step may take, and all of them together (the audit's other sources run meanwhile).
CONTAINER_TIMEOUT_S = 45
CONTAINER_BUDGET_S = 70
GPU_DEVICES = "/dev/nvidia[0-9]*"
# An AMD GPU node: the ROCm kernel driver's compute device. Nothing is mounted into an AMD container: the image
# brings its own amd-smi (ROCm 6 and later images), and the container gets /dev/kfd and /dev/dri (AMD's docs:
# "docker run --device=/dev/kfd --device=/dev/dri --group-add video"); apptainer's --rocm does the same.
AMD_GPU_DEVICES = "/dev/kfd"
AMD_IMAGE_PREFERENCE = ("rocm", "pytorch", "vllm", "sglang", "megatron", "jax")


def _amd_list(text):
    """`amd-smi list` text inside a container -> [{index, name, uuid}]; an error message lists nothing."""
    try:
        return [{"index": g["index"], "name": g.get("pci_bus_id"), "uuid": g.get("uuid")}
                for g in parse_amd_smi_list(text)]
    except ValueError:
        return []


# What each vendor's container runs and how it reaches the GPUs: the devices that say a node has that vendor's GPUs,
# the listing command and its reader, the docker/podman arguments, apptainer's flag, the local images tried.
VENDORS = {
    "nvidia": {"devices": lambda: glob.glob(GPU_DEVICES), "what": "NVIDIA GPU device (/dev/nvidia*)",
               "list": ["nvidia-smi", "-L"], "parse": lambda text: parse_smi_list(text),
               "oci": ["--gpus", "all"], "apptainer": "--nv", "images": IMAGE_PREFERENCE},
    "amd": {"devices": lambda: glob.glob(AMD_GPU_DEVICES), "what": "AMD GPU device (/dev/kfd)",
            "list": ["amd-smi", "list"], "parse": _amd_list,
            "oci": ["--device=/dev/kfd", "--device=/dev/dri", "--group-add", "video"], "apptainer": "--rocm",
            "images": AMD_IMAGE_PREFERENCE},
}


def parse_smi_list(text):
    """`nvidia-smi -L` -> [{index, name, uuid}] of the GPUs (the MIG device lines under a GPU are not GPUs)."""
    out = []
    for line in (text or "").splitlines():
        m = _SMI_GPU.match(line.strip())
        if m:
            out.append({"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3)})
    return out


def pick_image(names, preference=IMAGE_PREFERENCE):
    """The first local image (docker/podman `image ls` names) that the preference finds, or None."""
    usable = [n for n in names if n and "<none>" not in n]
    for word in preference:
        for name in usable:
            if word in name.rsplit("/", 1)[-1].split(":")[0].lower():
                return name
    return None


def _first_line(text):
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[0][:300] if lines else None


def _run_attempt(c, runtime, argv, image, expect, vendor):
    """Run one container or job step; what it listed, and why not when it listed nothing."""
    res = c.cmd("container_gpu:%s" % runtime, argv, timeout=CONTAINER_TIMEOUT_S, record=False)
    text = "%s\n%s" % (res.stdout, res.stderr)
    gpus = vendor["parse"](res.stdout)
    # an AMD image without amd-smi cannot answer (nothing mounts it in, unlike NVIDIA's hook with nvidia-smi, where
    # a missing nvidia-smi is the toolkit's failure): not a container that failed to reach the GPUs
    no_tool = vendor is VENDORS["amd"] and NO_TOOL_IN_IMAGE.search(text)
    attempt = {"runtime": runtime, "image": image, "argv": argv, "rc": res.rc, "gpus": gpus, "expect": expect,
               "started": not NOT_STARTED.search(text) and not res.missing and not no_tool}
    if res.timed_out:
        attempt["error"] = "timed out after %d s" % CONTAINER_TIMEOUT_S
    elif res.rc != 0 or not gpus:
        attempt["error"] = (_first_line(res.stderr) or _first_line(res.stdout) or "exit %s" % res.rc)
    return attempt


def _oci_attempt(c, runtime, image, pull, gpu_args, vendor):
    """docker or podman: (attempt or None, why not)."""
    listing = c.cmd("container_gpu:%s_images" % runtime, [runtime, "image", "ls", "--format",
                                                          "{{.Repository}}:{{.Tag}}"], timeout=15, record=False)
    if listing.missing:
        return None, "%s: not installed" % runtime
    if listing.rc != 0:
        return None, "%s: cannot list images: %s" % (runtime, _first_line(listing.stderr or listing.stdout))
    local = [line.strip() for line in listing.stdout.splitlines() if line.strip()]
    if image and image not in local and not pull:
        return None, "%s: %s is not on the node and audit_container_pull is false" % (runtime, image)
    chosen = image or pick_image(local, vendor["images"])
    if not chosen:
        return None, "%s: no local image that can run %s (%s); set audit_container_image" % (
            runtime, vendor["list"][0], ", ".join(local[:5]) or "no image at all")
    argv = [runtime, "run", "--rm", "--pull=%s" % ("missing" if pull else "never"), "--network", "none"] + \
        gpu_args + ["--entrypoint", vendor["list"][0], chosen] + vendor["list"][1:]
    return _run_attempt(c, runtime, argv, chosen, "all", vendor), None


def _podman_attempt(c, image, pull, vendor):
    """podman reaches NVIDIA GPUs through the NVIDIA CDI spec (nvidia-ctk cdi generate), named nvidia.com/gpu; AMD
    GPUs through their device files, as docker does."""
    if not shutil.which("podman"):
        return None, "podman: not installed"
    if vendor is VENDORS["amd"]:
        return _oci_attempt(c, "podman", image, pull, vendor["oci"], vendor)
    if not [p for d in ("/etc/cdi", "/var/run/cdi") for p in glob.glob(os.path.join(d, "*")) if "nvidia" in p]:
        return None, "podman: no NVIDIA CDI spec in /etc/cdi or /var/run/cdi (nvidia-ctk cdi generate)"
    return _oci_attempt(c, "podman", image, pull, ["--device", "nvidia.com/gpu=all"], vendor)


def _apptainer_attempt(c, image, vendor):
    tool = next((t for t in ("apptainer", "singularity") if shutil.which(t)), None)
    if not tool:
        return None, "apptainer: not installed"
    if not (image and image.endswith(".sif") and os.path.exists(image)):
        return None, "%s: no local .sif image given (set audit_container_image to one)" % tool
    return _run_attempt(c, tool, [tool, "exec", vendor["apptainer"], image] + vendor["list"], image, "all",
                        vendor), None


def one_gpu_step(command):
    """(argv of a one-GPU Slurm job step on this node that runs command, None) or (None, why it cannot start)."""
    if not shutil.which("srun"):
        return None, "srun not installed"
    name = socket.gethostname().split(".")[0]
    [state] = slurm.read([name], time.time(), timeout=10)
    if state["phase"] in ("missing", "unknown"):
        return None, "not a Slurm node (%s)" % (state.get("reason") or "scontrol does not know %s" % name)
    if state["phase"] != "available":
        return None, "the node is %s (%s): a job step cannot start" % (state["phase"], state.get("state"))
    argv = slurm.job_argv(name, list(command), wait_s=20, job_name="clustermax-assess-audit")
    argv[1:1] = ["--gres=gpu:1"]
    return argv, None


def _slurm_attempt(c, image, pull, vendor):
    """A one-GPU job step on this node (through pyxis with --container-image when an image is given)."""
    command = list(vendor["list"])
    argv, why = one_gpu_step(command)
    if argv is None:
        return None, "slurm: %s" % why
    if image:
        if not (image.startswith("/") and os.path.exists(image)) and not pull:
            return None, "slurm: %s is not a local enroot image and audit_container_pull is false" % image
        argv[-len(command):-len(command)] = ["--container-image=%s" % image]
    return _run_attempt(c, "slurm" if not image else "pyxis", argv, image or None, 1, vendor), None


def collect_container_gpu(c, enabled=True, image="", pull=False):
    """Start one short container (docker --gpus all, podman with the NVIDIA CDI spec, apptainer --nv; on AMD nodes
    /dev/kfd and /dev/dri, apptainer --rocm) of an image that is on the node, or else a one-GPU Slurm job step on this
    node, that runs `nvidia-smi -L` (`amd-smi list` on AMD); record what each listed. No image is pulled unless
    audit_container_pull says so; containers run without network and are removed."""
    vendor = next((v for v in VENDORS.values() if v["devices"]()), None)
    if vendor is None:
        c.mark("container_gpu", "not_applicable", "no %s nor %s on this node" % (
            VENDORS["nvidia"]["what"], VENDORS["amd"]["what"]))
        return None
    if not enabled:
        c.mark("container_gpu", "not_applicable", "audit_container_gpu is false: no container was started")
        return None
    t0 = time.monotonic()
    attempts, why_not = [], []
    tries = [lambda: _oci_attempt(c, "docker", image, pull, vendor["oci"], vendor),
             lambda: _podman_attempt(c, image, pull, vendor), lambda: _apptainer_attempt(c, image, vendor),
             lambda: _slurm_attempt(c, image, pull, vendor)]
    for attempt_fn in tries:
        if time.monotonic() - t0 > CONTAINER_BUDGET_S:
            why_not.append("out of time after %.0f s" % (time.monotonic() - t0))
            break
        if any(a["started"] and a["gpus"] for a in attempts):
            break  # one container that lists the GPUs answers the question
        attempt, why = attempt_fn()
        if attempt is not None:
            attempts.append(attempt)
        else:
            why_not.append(why)
    if not any(a["started"] for a in attempts):
        c.mark("container_gpu", "not_applicable", "no container or job step could start here: %s" % "; ".join(
            why_not + ["%s: %s" % (a["runtime"], a.get("error")) for a in attempts]))
    else:
        c.mark("container_gpu", "ok", None, time.monotonic() - t0)
    return {"attempts": attempts, "not_tried": why_not, "vendor": next(k for k, v in VENDORS.items() if v is vendor)}


# What a one-GPU job step is told about its GPUs (only these are kept: a job's environment may hold secrets).
JOB_GPU_VARS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                "GPU_DEVICE_ORDINAL", "SLURM_STEP_GPUS", "SLURM_JOB_GPUS")


def job_gpu_vars(env_text):
    """`env` output -> {name: value} of JOB_GPU_VARS only (an empty value is kept: it is not the same as unset)."""
    out = {}
    for line in (env_text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key in JOB_GPU_VARS:
            out[key] = value
    return out


def collect_job_gpu_env(c):
    """A one-GPU Slurm job step on this node (`srun --gres=gpu:1 env`), keeping only the variables that say which
    GPUs the step was given (JOB_GPU_VARS): Slurm sets CUDA_VISIBLE_DEVICES (ROCR_VISIBLE_DEVICES on AMD) from
    gres.conf's device files, so a job that finds it unset sees, and may use, every GPU of the node."""
    vendor = next((v for v in VENDORS.values() if v["devices"]()), None)
    if vendor is None:
        c.mark("job_gpu_env", "not_applicable", "no %s nor %s on this node" % (
            VENDORS["nvidia"]["what"], VENDORS["amd"]["what"]))
        return None
    argv, why = one_gpu_step(["env"])
    if argv is None:
        c.mark("job_gpu_env", "not_applicable", "no job step was started: %s" % why)
        return None
    # a step that fails (no GPU GRES, a refused allocation) is the finding, judged on the controller from its stderr
    res = c.cmd("job_gpu_env", argv, timeout=CONTAINER_TIMEOUT_S, ok_rcs=tuple(range(256)))
    return {"node": socket.gethostname().split(".")[0], "argv": argv, "rc": res.rc, "timed_out": bool(res.timed_out),
            "env": job_gpu_vars(res.stdout),
            "stderr": (res.stderr or "")[-2000:]}


# Within the survey's own deadline (audit_timeout - 10 s, 110 s by default): a larger image needs a larger timeout.
ENROOT_IMPORT_TIMEOUT_S = 90


def collect_enroot_import(c, image):
    """`enroot import docker://<image>` into a scratch directory of the audit's own output: whether this node can
    pull and convert an image from the site's registry as a job would (pyxis does the same import). Only with an
    image named by audit_enroot_import_image: no registry is contacted unasked. enroot's layer cache, data and
    temporary directories are pointed into the scratch directory, which is removed afterwards: nothing is left."""
    if not shutil.which("enroot"):
        c.mark("enroot_import", "not_applicable", "enroot is not installed on this node")
        return None
    if not image:
        c.mark("enroot_import", "not_applicable", "audit_enroot_import_image is empty: no import was tried")
        return None
    scratch = os.path.join(c.out_dir, "enroot-import.tmp")
    os.makedirs(scratch, exist_ok=True)
    target = os.path.join(scratch, "image.sqsh")
    env = dict(os.environ, ENROOT_CACHE_PATH=os.path.join(scratch, "cache"),
               ENROOT_DATA_PATH=os.path.join(scratch, "data"), ENROOT_TEMP_PATH=os.path.join(scratch, "tmp"))
    for key in ("ENROOT_CACHE_PATH", "ENROOT_DATA_PATH", "ENROOT_TEMP_PATH"):
        os.makedirs(env[key], exist_ok=True)
    uri = image if "://" in image else "docker://" + image
    t0 = time.monotonic()
    try:
        res = run_cmd(["enroot", "import", "-o", target, uri], timeout=ENROOT_IMPORT_TIMEOUT_S, env=env)
        took = time.monotonic() - t0
        size = os.path.getsize(target) if os.path.exists(target) else None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if res.timed_out:
        c.mark("enroot_import", "timeout", "enroot import timed out after %d s" % ENROOT_IMPORT_TIMEOUT_S, took)
    else:  # an import that failed is the finding, judged on the controller from its output
        c.mark("enroot_import", "ok" if res.rc is not None else "error", None if res.rc is not None else
               res.stderr[:300], took)
    text = "%s\n%s" % (res.stdout, res.stderr)
    c.save_raw("enroot-import.txt", text)
    return {"image": uri, "rc": res.rc, "timed_out": bool(res.timed_out), "seconds": round(took, 3),
            "squashfs_bytes": size, "output_tail": text[-3000:]}
