"""Audit area `sw` (audit.sw.*): installed software and firmware against reports/data/minimum_versions.yml. The
rubric entry names the table entry that applies (`minimum: cuda_toolkit`); judge_version reads its kinds (minimum,
branch, branch2, train, lines)."""

import re
from collections import Counter
from datetime import datetime

from reports.phases.audit.common import Error, R, Skip, data, host_rule, name_list, vkey


def minimums():
    return data("minimum_versions")


def table_age(v):
    table_date = datetime.fromisoformat(str(minimums()["table_date"])).date()
    return table_date, (v.started_at().date() - table_date).days


def _table_note(v):
    d, age = table_age(v)
    if age < 0:
        return "table %s, newer than this run" % d.isoformat()
    return "table %s, %d days old" % (d.isoformat(), age)


def judge_version(spec, version):
    """(status, expected text, reason) of a version against one minimum_versions.yml entry."""
    kind = spec.get("kind", "minimum")
    title = spec.get("title", "")
    if kind == "minimum":
        ok = vkey(version) >= vkey(spec["minimum"])
        return ("pass" if ok else "fail"), ">= %s" % spec["minimum"], None
    mins = {str(k): v for k, v in spec["minimums"].items()}
    if kind == "lines":
        return _judge_lines(title, mins, version)
    if kind == "train":
        parts = str(version).split(".")
        if len(parts) < 3:
            return "error", "known firmware format", "cannot read the train of %s" % version
        branch, patch = str(int(parts[1])), int(re.sub(r"\D.*$", "", parts[2]) or 0)
        newest = max(mins, key=lambda k: int(k))
        if branch in mins:
            ok = patch >= int(mins[branch])
            return ("pass" if ok else "fail"), "train %s >= xx.%s.%04d" % (branch, branch, int(mins[branch])), None
        if int(branch) > int(newest):
            return "pass", "train newer than the table (newest %s)" % newest, None
        return "fail", "a supported train (%s)" % ", ".join(sorted(mins, key=int)), \
            "train %s is not in the table: end of life" % branch
    parts = vkey(version)
    branch = ".".join(str(p) for p in parts[:2]) if kind == "branch2" else str(parts[0]) if parts else ""
    newest = max(mins, key=vkey)
    if branch in mins:
        ok = parts >= vkey(mins[branch])
        return ("pass" if ok else "fail"), ">= %s on the %s branch" % (mins[branch], branch), None
    if vkey(branch) > vkey(newest):
        return "pass", "branch newer than the table (newest %s)" % newest, None
    return "fail", "a supported branch (%s)" % ", ".join(sorted(mins, key=vkey)), \
        "%s branch %s is not in the table: end of life" % (title, branch)


def _judge_lines(title, fixed, version):
    """Release lines (LTS and GA) with their fixed versions. Two lines can share a major.minor with different fixes
    (virtio-net 25.10: LTS25 fixed in 25.10.2, GA in 25.10.6): a version between them depends on the line installed,
    which the version alone does not tell, so it is a warning, never a pass."""
    parts = vkey(version)
    same = {line: f for line, f in fixed.items() if vkey(f)[:2] == parts[:2]}
    if same:
        low, high = min(same.values(), key=vkey), max(same.values(), key=vkey)
        expected = " or ".join(">= %s (%s)" % (f, line) for line, f in sorted(same.items(), key=lambda kv: vkey(kv[1])))
        if parts >= vkey(high):
            return "pass", expected, None
        if parts < vkey(low):
            return "fail", expected, None
        return "warn", expected, "fixed in %s on one release line but only in %s on another: the line installed " \
                                 "decides" % (low, high)
    newest = max(fixed.values(), key=vkey)
    if parts[:2] > vkey(newest)[:2]:
        return "pass", "a release newer than the table (newest fix %s)" % newest, None
    return "fail", "a fixed release line (%s)" % ", ".join("%s %s" % kv for kv in sorted(fixed.items())), \
        "%s %s is on no fixed release line" % (title, version)


def minimum_of(c):
    """The minimum_versions.yml entry that the check's rubric entry names with `minimum:`."""
    name = c.get("minimum")
    if not name:
        raise ValueError("check %s has no `minimum:` (the minimum_versions.yml entry that applies)" % c.get("id"))
    if not isinstance(minimums().get(name), dict):
        raise ValueError("check %s: `minimum: %s` is not an entry of minimum_versions.yml" % (c.get("id"), name))
    return minimums()[name]


def _tool_version(name):
    return lambda v: (v.tool(name) or {}).get("version")


def _pkg(v, pattern):
    for name, ver in sorted((v.sec("packages").get("selected") or {}).items()):
        if re.match(pattern, name):
            return ver
    return None


def _cuda_toolkit_version(v):
    return v.sec("libraries").get("cuda_toolkit") or _tool_version("nvcc")(v)


def _version_rule(installed, missing):
    """A rule for one installed version (installed(view), None when absent) against the table entry the check names;
    missing: what the skip reason says when nothing is installed."""
    @host_rule
    def fn(v, c):
        version = installed(v)
        if not version:
            raise Skip("not installed: %s" % missing)
        status, expected, reason = judge_version(minimum_of(c), version)
        return R(status, version, "%s (%s)" % (expected, _table_note(v)), reason)
    return fn


driver_security = _version_rule(lambda v: v.driver_version(), "NVIDIA driver not found on the node")
cuda_toolkit = _version_rule(_cuda_toolkit_version, "no CUDA toolkit on the node (containers bring their own)")
dcgm = _version_rule(lambda v: _tool_version("dcgmi")(v) or _pkg(v, r"^datacenter-gpu-manager"),
                     "DCGM (dcgmi) not found on the node")
dcgm_exporter = _version_rule(_tool_version("dcgm_exporter"), "the dcgm-exporter binary (a containerized exporter is "
                                                              "checked by its port) not found on the node")
container_toolkit = _version_rule(lambda v: _tool_version("nvidia_ctk")(v) or _tool_version("nvidia_container_cli")(v),
                                  "NVIDIA Container Toolkit (nvidia-ctk) not found on the node")
docker = _version_rule(_tool_version("dockerd"), "Docker Engine (dockerd) not found on the node")
runc = _version_rule(_tool_version("runc"), "runc not found on the node")


@host_rule
def cuda_driver_compat(v, c):
    driver_cuda = v.nv.get("cuda_version")
    toolkit = _cuda_toolkit_version(v)
    if not toolkit:
        raise Skip("not installed: no CUDA toolkit on the node")
    if not driver_cuda:
        raise Error("nvidia-smi reported no CUDA version")
    ok = vkey(toolkit)[:2] <= vkey(driver_cuda)[:2]
    return R("pass" if ok else "fail", "toolkit %s, driver supports %s" % (toolkit, driver_cuda),
             "toolkit <= the driver's CUDA version", None if ok else "needs the CUDA forward-compatibility package")


def _lib_rule(lib_key, header_key, pkg_pattern, what):
    @host_rule
    def fn(v, c):
        lib = v.sec("libraries")
        found = {"library": lib.get(lib_key), "header": lib.get(header_key), "package": _pkg(v, pkg_pattern)}
        found = {k: x for k, x in found.items() if x}
        if not found:
            raise Skip("not installed: no system-wide %s (containers bring their own)" % what)
        versions = {".".join(str(p) for p in vkey(x)[:3]) for x in found.values()}
        obs = name_list("%s %s" % kv for kv in sorted(found.items()))
        if len(versions) > 1:
            return R("warn", obs, "one %s version on the node" % what, "library, header and package disagree")
        return R("pass", obs, "one %s version on the node" % what)
    return fn


nccl = _lib_rule("nccl_lib", "nccl_header", r"^libnccl2?$", "NCCL")
cudnn = _lib_rule("cudnn_lib", "cudnn_header", r"^(libcudnn\d+(-cuda-\d+)?|cudnn\d*)$", "cuDNN")


@host_rule
def container_runtime(v, c):
    found = [n for n in ("dockerd", "enroot", "apptainer", "singularity", "containerd") if v.tool(n)]
    if found:
        return R("pass", name_list("%s %s" % (n, (v.tool(n) or {}).get("version") or "?") for n in found),
                 "a container runtime for GPU jobs")
    return R("warn", "none", "a container runtime for GPU jobs (Docker, enroot, Apptainer, containerd)")


def _attempt_text(a):
    what = {"slurm": "Slurm job step (srun --gres=gpu:1)", "pyxis": "Slurm job step through pyxis"}.get(
        a["runtime"], a["runtime"])
    return "%s%s" % (what, " (%s)" % a["image"] if a.get("image") else "")


@host_rule
def nvidia_container_runtime(v, c):
    """What the node's short container (or one-GPU job step) listed with nvidia-smi -L (probes/audit/software.py
    collect_container_gpu): every GPU of the node (one for the job step) passes; a runtime that started but listed
    fewer fails, or warns when another one reached them."""
    if "container_gpu" not in v.sources:
        raise Skip("not measured: this audit started no container (a probe older than this check)")
    v.need("container_gpu")
    attempts = [a for a in v.sec("container_gpu").get("attempts") or [] if a.get("started")]
    count = len(v.gpus())
    expected = "a container (or a one-GPU Slurm job step) lists the node's GPUs with %s" % (
        "amd-smi list" if v.sec("container_gpu").get("vendor") == "amd" else "nvidia-smi -L")
    good, bad = [], []
    for a in attempts:
        want = 1 if a.get("expect") == 1 else count
        seen = len(a.get("gpus") or [])
        (good if seen >= want else bad).append("%s: %d of %d GPU(s)%s" % (
            _attempt_text(a), seen, want, "" if seen >= want else ": %s" % (a.get("error") or "fewer listed")))
    if good and bad:
        return R("warn", good[0], expected, "another runtime on the node does not reach the GPUs: %s" % "; ".join(bad))
    if good:
        return R("pass", good[0], expected)
    return R("fail", bad[0], expected, "; ".join(bad[1:]) or None)


@host_rule
def enroot(v, c):
    t = v.tool("enroot")
    if t:
        return R("pass", "enroot %s" % (t.get("version") or "?"), "enroot installed on Slurm GPU nodes")
    return R("warn", "not installed", "enroot installed on Slurm GPU nodes", "pyxis runs containers through enroot")


# enroot's own failure lines ("[ERROR] URL https://... returned error code: 401 Unauthorized", "[ERROR] Could not
# process JSON input", curl's "Could not resolve host"): the last one says why an import failed.
_ENROOT_ERROR = re.compile(r"^\s*(?:\[ERROR\]|curl: \(\d+\)|mksquashfs: |FATAL ERROR)", re.M)


@host_rule
def enroot_import(v, c):
    """`enroot import` of the image named by audit_enroot_import_image works on this node: the registry is reachable
    with the node's credentials (~/.config/enroot/.credentials) and the image converts to squashfs, as pyxis does
    when a job starts with --container-image."""
    imp = v.tried("enroot_import")
    seen = "enroot import %s" % imp.get("image")
    expected = "the import succeeds"
    if imp.get("rc") == 0 and imp.get("squashfs_bytes"):
        return R("pass", "%s: %.1f MB squashfs in %.0f s" % (
            seen, imp["squashfs_bytes"] / 1e6, imp.get("seconds") or 0), expected)
    tail = imp.get("output_tail") or ""
    errors = [line.strip() for line in tail.splitlines() if _ENROOT_ERROR.match(line)]
    last = errors[-1] if errors else next((x.strip() for x in reversed(tail.splitlines()) if x.strip()), "no output")
    if imp.get("rc") == 0:
        return R(c.get("status_bad", "fail"), seen + ": exit 0 but no squashfs written", expected, last[:300])
    return R(c.get("status_bad", "fail"), "%s: exit %s" % (seen, imp.get("rc")), expected, last[:300])


@host_rule
def ofed(v, c):
    t = v.tool("ofed_info")
    if t and t.get("version"):
        return R("pass", "%s %s" % (t.get("flavour") or "OFED", t["version"]), "MLNX_OFED or DOCA-OFED")
    pkg = _pkg(v, r"^(doca-ofed|mlnx-ofed)")
    if pkg:
        return R("pass", "package %s" % pkg, "MLNX_OFED or DOCA-OFED")
    return R("warn", "inbox rdma-core only" + (" (%s)" % _pkg(v, r"^rdma-core$") if _pkg(v, r"^rdma-core$") else ""),
             "MLNX_OFED or DOCA-OFED", "vendor OFED brings nvidia_peermem support, firmware tools and tuned drivers")


@host_rule
def hpcx(v, c):
    found = v.sec("libraries").get("hpcx") or []
    return R("pass" if found else "warn", ("HPC-X %s" % name_list(found)) if found else "not found",
             "HPC-X (UCX, UCC, SHARP plugin) installed")


def connectx_versions(v):
    out = {}
    for dev, info in v.rdma().items():
        if info.get("fw_ver") and (info.get("hca_type") or "").startswith("MT") or dev.startswith("mlx5"):
            if info.get("fw_ver"):
                out[dev] = info["fw_ver"]
    if not out:
        for dev, info in (v.sec("ib_tools").get("ibstat") or {}).items():
            if info.get("firmware"):
                out[dev] = info["firmware"]
    return out


@host_rule
def connectx_firmware(v, c):
    fws = connectx_versions(v)
    if not fws:
        raise Skip("not applicable: no Mellanox/NVIDIA ConnectX adapter")
    worst, rows = "pass", []
    order = {"pass": 0, "error": 1, "fail": 2}
    reason = None
    for version in sorted(set(fws.values())):
        status, expected, why = judge_version(minimum_of(c), version)
        if order[status] > order[worst]:
            worst, reason = status, why or "%s below %s" % (version, expected)
        rows.append("%s on %d" % (version, sum(1 for x in fws.values() if x == version)))
    return R(worst, name_list(rows), "per-train minimum (%s)" % _table_note(v), reason)


@host_rule
def connectx_uniform(v, c):
    fws = connectx_versions(v)
    if not fws:
        raise Skip("not applicable: no Mellanox/NVIDIA ConnectX adapter")
    values = Counter(fws.values())
    return R("pass" if len(values) == 1 else "warn", name_list("%s on %d" % kv for kv in values.most_common()),
             "one firmware on every adapter")


# A kernel's release without its version: what stays the same across its updates. EL kernels carry the dist tag of
# the minor release that built them (5.14.0-427.13.1.el9_4.x86_64, then 5.14.0-503.14.1.el9_5.x86_64 after an update
# to 9.5), and the RT ones of EL 9.0-9.2 an rt build number (...rt14.315.el9_2...): neither is part of the flavour,
# which is the arch and its variant (x86_64, x86_64+debug, rt.x86_64). Ubuntu's is the suffix (generic, nvidia-64k).
_DIST_TAG = re.compile(r"\.(?:el\d+(?:_\d+)*|amzn\d+|fc\d+)(?=\.|$)")
_EL_RT = re.compile(r"\.rt\d+(?:\.\d+)*(?=\.)")


def kernel_flavour(release):
    text = _EL_RT.sub(".rt", _DIST_TAG.sub("", release or ""))
    return re.sub(r"^[\d.\-]+", "", text)


@host_rule
def kernel_latest(v, c):
    sysd = v.sec("system")
    running = sysd.get("kernel")
    installed = sysd.get("kernels_installed") or []
    if not installed:
        raise Skip("not reported: no kernel found in /boot or /lib/modules")
    flavour = kernel_flavour(running)
    same = [k for k in installed if kernel_flavour(k) == flavour] or installed
    newest = max(same, key=vkey)
    if vkey(newest) > vkey(running):
        return R("warn", "running %s, installed %s" % (running, newest), "the newest installed kernel is booted",
                 "a newer kernel is installed but not booted: reboot to apply its fixes")
    return R("pass", "running %s (newest of %d installed)" % (running, len(installed)),
             "the newest installed kernel is booted")


@host_rule
def kernel_security(v, c):
    """The table's minimum of a kernel line is of the OS's own series (generic_flavours); a derivative kernel (Ubuntu's
    -nvidia, -aws, -azure ... number their ABI from 1000 up) is judged only by an entry "<line>-<flavour>"."""
    spec = minimum_of(c)
    sysd = v.sec("system")
    osid, osver, kernel = sysd.get("os_id"), sysd.get("os_version"), sysd.get("kernel") or ""
    table = spec.get(osid or "", {}).get(osver or "")
    if not table:
        raise Skip("not applicable: the table has no kernel minimum for %s %s" % (osid, osver))
    line = ".".join(kernel.split("-")[0].split(".")[:3])
    flavour = kernel_flavour(kernel)
    generic = (spec.get("generic_flavours") or {}).get(osid)
    own = next((k for k in ("%s-%s" % (line, flavour), "%s-%s" % (line, flavour.split("-")[0])) if k in table), None)
    if own:
        ok = vkey(kernel)[:4] >= vkey(table[own])[:4]
        return R("pass" if ok else "fail", kernel, ">= %s (the -%s series; %s)" % (
            table[own], own.split("-", 1)[1], _table_note(v)))
    if generic is not None and flavour.split("-")[0] not in generic:
        raise Skip("not applicable: no minimum in the table for the -%s flavour (its ABI numbers are a series of "
                   "their own; the table's %s %s minimum is for the %s kernels)" % (
                       flavour or "(none)", osid, osver, "/".join(generic)))
    mins = {k: x for k, x in table.items() if not re.search(r"[a-z]", k)}
    if line not in mins:
        newest = max(mins, key=vkey) if mins else None
        if newest and vkey(line) > vkey(newest):
            return R("pass", kernel, "kernel line newer than the table (%s)" % _table_note(v))
        raise Skip("not applicable: no minimum for the %s kernel line on %s %s" % (line, osid, osver))
    ok = vkey(kernel)[:4] >= vkey(mins[line])[:4]
    return R("pass" if ok else "fail", kernel, ">= %s (%s)" % (mins[line], _table_note(v)))


def _ubuntu_interim(osid, osver):
    """Ubuntu's interim releases (YY.10, and YY.04 of an odd year) get 9 months of support; LTS are YY.04, YY even."""
    m = re.match(r"^(\d+)\.(\d+)$", osver or "")
    return osid == "ubuntu" and bool(m) and not (m.group(2) == "04" and int(m.group(1)) % 2 == 0)


@host_rule
def os_support(v, c):
    sysd = v.sec("system")
    osid, osver = sysd.get("os_id"), sysd.get("os_version")
    ends = minimum_of(c).get(osid or "")
    if not ends:
        raise Skip("not applicable: no support dates for %s in minimum_versions.yml" % osid)
    key = osver if osver in ends else (osver or "").split(".")[0]
    if key not in ends:
        newest = max(ends, key=vkey)
        if vkey(osver) > vkey(newest):
            if _ubuntu_interim(osid, osver):
                raise Skip("not judged: %s %s is an interim release (9 months of support) that the table does not "
                           "list: add its end from ubuntu.com/about/release-cycle" % (osid, osver))
            return R("pass", "%s %s" % (osid, osver), "a supported release (newer than the table)")
        return R("fail", "%s %s" % (osid, osver), "a supported release (%s)" % ", ".join(sorted(ends, key=vkey)),
                 "release not in the table: end of life")
    end = datetime.fromisoformat(str(ends[key])).date()
    ok = v.started_at().date() <= end
    return R("pass" if ok else "fail", "%s %s" % (osid, osver), "security updates until %s" % end.isoformat(),
             None if ok else "standard security support ended %s" % end.isoformat())


@host_rule
def minimums_table_age(v, c):
    d, age = table_age(v)
    limit = int(minimums().get("max_age_days", 180))
    if age < 0:
        return R("pass", "table dated %s: newer than this run (re-graded)" % d.isoformat(), "<= %d days old" % limit)
    return R("warn" if age > limit else "pass", "table dated %s: %d days old at this run" % (d.isoformat(), age),
             "<= %d days old" % limit, None if age <= limit else "update reports/data/minimum_versions.yml")


# ---- what users work with beyond the GPU stack (probes/audit/userland.py) ---------------------------------------


@host_rule
def ncu(v, c):
    found = v.userland("ncu")
    if found.get("path"):
        return R("pass", "ncu %s at %s" % (found.get("version") or "(version not read)", found["path"]),
                 "Nsight Compute installed")
    return R(c.get("status_bad", "fail"), "ncu not found (PATH, /usr/local/cuda*/bin, /opt/nvidia/nsight-compute)",
             "Nsight Compute installed", "users cannot profile their kernels")


@host_rule
def ncu_profiling(v, c):
    prof = v.userland("profiling")
    value = prof.get("RmProfilingAdminOnly")
    options = prof.get("modprobe") or []
    where = "/proc/driver/nvidia/params RmProfilingAdminOnly: %s" % value
    if value is None and options:
        value, where = options[-1]["value"], "%s NVreg_RestrictProfilingToAdminUsers=%s" % (
            options[-1]["file"], options[-1]["value"])
    if value is None:
        raise Skip("not read: /proc/driver/nvidia/params is not readable and no modprobe.d file sets "
                   "NVreg_RestrictProfilingToAdminUsers")
    if str(value).strip() == "0":
        return R("pass", where, "GPU performance counters open to users (RmProfilingAdminOnly 0)")
    return R(c.get("status_bad", "warn"), where, "GPU performance counters open to users (RmProfilingAdminOnly 0)",
             "ncu and nsys --gpu-metrics fail with ERR_NVGPUCTRPERM for every user but root")


@host_rule
def perf(v, c):
    found = v.userland("perf")
    if found.get("version"):
        return R("pass", "perf %s" % found["version"], "perf installed")
    if found.get("path"):
        return R("warn", "%s does not run: %s" % (found["path"], found.get("error")), "perf installed",
                 "no perf for the running kernel")
    return R(c.get("status_bad", "warn"), "perf not found on PATH", "perf installed")


@host_rule
def perf_event_paranoid(v, c):
    value = v.sysctl("kernel.perf_event_paranoid")
    if value is None:
        raise Skip("not read: kernel.perf_event_paranoid")
    limit = int(c.get("max", 1))
    ok = int(value) <= limit
    return R("pass" if ok else c.get("status_bad", "warn"), "kernel.perf_event_paranoid = %s" % value,
             "<= %d (users can profile their own processes)" % limit,
             None if ok else "perf stat/record of user processes is refused to non-root users")


@host_rule
def nvhpc(v, c):
    found = v.userland("nvhpc")
    installs = found.get("installs") or []
    if installs:
        return R("pass", "NVIDIA HPC SDK %s" % name_list("%s (%s)" % (i["version"], i["path"]) for i in installs),
                 "NVIDIA HPC SDK installed")
    if found.get("nvc"):
        return R("pass", "nvc at %s" % found["nvc"], "NVIDIA HPC SDK installed")
    return R(c.get("status_bad", "warn"), "no NVIDIA HPC SDK under /opt/nvidia/hpc_sdk or /opt/nvhpc, no nvc",
             "NVIDIA HPC SDK installed")


@host_rule
def lmod(v, c):
    found = v.userland("lmod")
    if not found.get("init") and not found.get("environment_modules"):
        return R(c.get("status_bad", "warn"), "no Lmod (or Environment Modules) init found",
                 "Lmod with modules for the site's software")
    tool = "Lmod %s" % (found.get("version") or "") if found.get("init") else "Environment Modules"
    if not found.get("modulefiles") and found.get("walk_timed_out"):
        return R("warn", "%s; the modulefile tree did not answer within the audit's walk time (a hung mount?)"
                 % tool.strip(), "Lmod with modules for the site's software")
    if not found.get("modulefiles"):
        return R("warn", "%s, no modulefile under %s" % (tool.strip(), name_list(found.get("modulepath") or [])
                                                          or "any MODULEPATH directory"),
                 "Lmod with modules for the site's software")
    return R("pass", "%s, %d modulefiles under %s" % (tool.strip(), found["modulefiles"],
                                                       name_list(found.get("modulepath") or [])),
             "Lmod with modules for the site's software")


@host_rule
def cuda_visible_devices(v, c):
    found = v.userland("login_env")
    set_in = found.get("CUDA_VISIBLE_DEVICES") or []
    if set_in:
        return R(c.get("status_bad", "warn"), "set by %s" % name_list("%s (%s)" % (s["file"], s["line"])
                                                                      for s in set_in),
                 "not set in the login environment",
                 "every job started from a login shell sees only those GPUs, whatever it was allocated")
    return R("pass", "not set by %d login files read" % len(found.get("files_read") or []),
             "not set in the login environment")
