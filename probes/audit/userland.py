"""What the people who use the node work with beyond the GPU stack, for the audit: profilers (Nsight Compute and
whether users may read the GPU's counters, perf), the NVIDIA HPC SDK, Lmod and its modules, what a login shell sets
(CUDA_VISIBLE_DEVICES), and identity (sudo, user and group management tools, an external identity provider).

Facts only, read-only: the tools' own version lines, files under /etc and /proc, and `sudo -n true` (it asks for no
password and changes no setting; sudo logs the attempt, as it logs every use). Judged on the controller
(reports/phases/audit/software.py and security.py).
"""

import glob
import os
import re
import shutil
import threading

from probes.audit.collect import listdir, read, version_in

# Where Nsight Compute lives when it is not on PATH: beside the CUDA toolkit, or its standalone installer's prefix.
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu",
             "/usr/local/NVIDIA-Nsight-Compute*/ncu")
NVHPC_ROOTS = ("/opt/nvidia/hpc_sdk", "/opt/nvhpc")
LMOD_INIT = ("/usr/share/lmod/lmod/init/profile", "/etc/profile.d/lmod.sh", "/etc/profile.d/z00_lmod.sh",
             "/opt/apps/lmod/lmod/init/profile", "/usr/share/lmod/lmod/libexec/lmod")
LOGIN_FILES = ("/etc/environment", "/etc/profile", "/etc/bash.bashrc", "/etc/bashrc")
# Where sites put modulefiles when MODULEPATH is not set in a login file. Lmod's own Core directory (its `lmod` and
# `settarg` modules) is not one: a fresh Lmod install has no module of the site's software.
MODULE_DIRS = ("/etc/modulefiles", "/usr/share/modulefiles", "/opt/modulefiles")
LMOD_OWN = ("lmod", "settarg")
WALK_S = 5.0  # modulefile trees often sit on NFS: a hung mount must not hang the audit
USER_TOOLS = ("useradd", "usermod", "userdel", "groupadd", "groupmod", "adduser")
# Name services that come from a directory rather than local files (nsswitch.conf's passwd/group sources).
DIRECTORY_SOURCES = ("sss", "ldap", "winbind", "nis", "nisplus", "hesiod", "oslogin", "cache_oslogin", "azuread",
                     "aad")


def parse_ncu_version(text):
    """`ncu --version`: '... Version 2024.1.1.0 (build 33998838) (public-release)' -> '2024.1.1.0'."""
    return version_in(text, r"Version\s+(\d+(?:\.\d+)+)")


def parse_nvidia_params(text):
    """/proc/driver/nvidia/params ('Name: value' lines) -> {name: value}."""
    out = {}
    for line in (text or "").splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            out[key.strip()] = value.strip()
    return out


def modprobe_options(texts, option):
    """[(path, value)] of `options nvidia ... <option>=<value>` lines in modprobe.d files ({path: text})."""
    found = []
    for path, text in sorted(texts.items()):
        for line in (text or "").splitlines():
            line = line.split("#", 1)[0].strip()
            if not line.startswith("options "):
                continue
            m = re.search(r"\b%s=(\S+)" % re.escape(option), line)
            if m:
                found.append({"file": path, "value": m.group(1)})
    return found


def parse_perf_version(text):
    """`perf --version` -> '6.1.115' (None when the wrapper could not find a perf for this kernel)."""
    return version_in(text, r"perf version (\d+(?:\.\d+)+)")


def nvhpc_installs(roots=NVHPC_ROOTS):
    """Versions of the NVIDIA HPC SDK found under its install roots (<root>/Linux_<arch>/<version>/compilers)."""
    found = []
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, "Linux_*", "*", "compilers", "bin"))):
            version = path.split(os.sep)[-3]
            if re.match(r"^\d+\.\d+$", version):
                found.append({"version": version, "path": os.path.dirname(os.path.dirname(path))})
    return found


def parse_nsswitch(text):
    """/etc/nsswitch.conf -> {database: [sources]} (actions such as [NOTFOUND=return] dropped)."""
    out = {}
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        if ":" not in line:
            continue
        db, rest = line.split(":", 1)
        out[db.strip()] = [w for w in re.sub(r"\[[^\]]*\]", " ", rest).split() if w]
    return out


def login_assignments(texts, name):
    """[(path, line)] where login files set `name` ({path: text}): `NAME=...` or `export NAME=...`."""
    pattern = re.compile(r"^\s*(?:export\s+|setenv\s+)?%s(?:=|\s+)" % re.escape(name))
    return [{"file": path, "line": line.strip()[:200]} for path, text in sorted(texts.items())
            for line in (text or "").splitlines() if pattern.match(line)]


def _walk_modulefiles(paths, found):
    for d in paths:
        if not os.path.isdir(d):
            continue
        found["dirs"].append(d)
        for root, _, files in os.walk(d):
            if os.path.basename(root) in LMOD_OWN or root.rstrip("/").endswith("/lmod/modulefiles/Core"):
                continue
            found["count"] += sum(1 for f in files if not f.startswith("."))
            if found["count"] > 10000:
                return


def _modulefiles(paths, timeout=WALK_S):
    """(modulefiles counted, directories that exist) under the module path, Lmod's own modules left out. The walk
    runs in a daemon thread for at most `timeout` seconds (a hung network mount leaves it behind, not the audit);
    what it counted by then is returned with timed_out."""
    found = {"count": 0, "dirs": []}
    walker = threading.Thread(target=_walk_modulefiles, args=(list(paths), found), daemon=True)
    walker.start()
    walker.join(timeout)
    return found["count"], list(found["dirs"]), walker.is_alive()


def _modulepath(texts):
    """MODULEPATH as the environment or the login files give it (Lmod's own init leaves it to the site)."""
    paths = [p for p in os.environ.get("MODULEPATH", "").split(":") if os.path.isabs(p)]
    for text in texts.values():
        for m in re.finditer(r"MODULEPATH[=\s:]+[\"']?([^\"'\s;]+)", text or ""):
            paths += [p for p in m.group(1).split(":") if os.path.isabs(p) and "$" not in p and "}" not in p]
    for d in MODULE_DIRS:
        if d not in paths:
            paths.append(d)
    return list(dict.fromkeys(paths))


def collect(c):
    out = {}
    # Nsight Compute, and whether the driver lets users (not only admins) read the GPU's performance counters
    ncu = shutil.which("ncu") or next((p for g in NCU_GLOBS for p in sorted(glob.glob(g)) if os.access(p, os.X_OK)),
                                      None)
    out["ncu"] = {"path": ncu, "version": None}
    if ncu:
        res = c.cmd("ncu_version", [ncu, "--version"], timeout=20)
        out["ncu"]["version"] = parse_ncu_version(res.stdout) if res.rc == 0 else None
    else:
        c.mark("ncu_version", "missing", "ncu (Nsight Compute) not found on PATH or beside the CUDA toolkit")
    params = read("/proc/driver/nvidia/params")
    modprobe = {p: read(p, "") for p in sorted(glob.glob("/etc/modprobe.d/*.conf"))}
    out["driver_params"] = {"read": params is not None,
                            "CoherentGPUMemoryMode": parse_nvidia_params(params).get("CoherentGPUMemoryMode")
                            if params else None}
    out["profiling"] = {
        "driver_params_read": params is not None,
        "RmProfilingAdminOnly": parse_nvidia_params(params).get("RmProfilingAdminOnly") if params else None,
        "modprobe": modprobe_options(modprobe, "NVreg_RestrictProfilingToAdminUsers"),
    }
    # perf (its version line; Debian's wrapper prints a warning instead when no perf matches the running kernel)
    perf = shutil.which("perf")
    out["perf"] = {"path": perf, "version": None, "error": None}
    if perf:
        res = c.cmd("perf_version", [perf, "--version"], timeout=10)
        out["perf"]["version"] = parse_perf_version(res.stdout)
        if not out["perf"]["version"]:
            out["perf"]["error"] = ((res.stderr or res.stdout or "").strip().splitlines() or ["no output"])[0][:200]
    else:
        c.mark("perf_version", "missing", "perf not found on PATH")
    # the HPC SDK and Lmod
    out["nvhpc"] = {"installs": nvhpc_installs(), "nvc": shutil.which("nvc")}
    profile_d = {p: read(p, "") for p in sorted(glob.glob("/etc/profile.d/*"))
                 if os.path.isfile(p) and not p.endswith((".csh", ".fish"))}
    login = dict({p: read(p) for p in LOGIN_FILES if read(p) is not None}, **profile_d)
    lmod = next((p for p in LMOD_INIT if os.path.exists(p)), None)
    modulepath = _modulepath(login)
    count, dirs, timed_out = _modulefiles(modulepath)
    out["lmod"] = {"init": lmod, "version": os.environ.get("LMOD_VERSION"), "modulepath": dirs, "modulefiles": count,
                   "walk_timed_out": timed_out,
                   "environment_modules": shutil.which("modulecmd") or (
                       "/usr/share/modules/init/profile.sh" if os.path.exists("/usr/share/modules/init/profile.sh")
                       else None)}
    # what a login shell would set for every user
    out["login_env"] = {"CUDA_VISIBLE_DEVICES": login_assignments(login, "CUDA_VISIBLE_DEVICES"),
                        "probe_environment": os.environ.get("CUDA_VISIBLE_DEVICES"),
                        "files_read": sorted(login)}
    c.mark("login_files", "ok")
    # identity: sudo, user management, an external identity provider
    sudo = shutil.which("sudo")
    out["sudo"] = {"path": sudo, "is_root": os.geteuid() == 0, "noninteractive_ok": None, "message": None}
    if sudo:
        res = c.cmd("sudo_n", [sudo, "-n", "true"], timeout=10, ok_rcs=(0, 1))
        out["sudo"]["noninteractive_ok"] = res.rc == 0
        out["sudo"]["message"] = (res.stderr or "").strip()[:200] or None
    else:
        c.mark("sudo_n", "missing", "sudo not found on PATH")
    out["user_tools"] = {name: shutil.which(name) or next(
        (p for p in ("/usr/sbin/" + name, "/sbin/" + name) if os.access(p, os.X_OK)), None) for name in USER_TOOLS}
    nss = parse_nsswitch(read("/etc/nsswitch.conf", ""))
    out["identity"] = {
        "nsswitch": {db: nss.get(db, []) for db in ("passwd", "group", "shadow", "sudoers")},
        "directory_sources": sorted({s for db in ("passwd", "group") for s in nss.get(db, [])
                                     if s in DIRECTORY_SOURCES}),
        "sssd_conf": os.path.exists("/etc/sssd/sssd.conf"),
        # the NSS responder's socket: SSSD is serving accounts (readable where /etc/sssd, mode 0700, is not)
        "sssd_socket": os.path.exists("/var/lib/sss/pipes/nss"),
        "sssd_domains": sorted(os.path.basename(p)[:-5] for p in glob.glob("/etc/sssd/conf.d/*.conf")),
        "ipa": os.path.exists("/etc/ipa/default.conf"),
        "krb5_realm": (re.search(r"^\s*default_realm\s*=\s*(\S+)", read("/etc/krb5.conf", "") or "", re.M) or
                       [None, None])[1],
        "realmd": os.path.exists("/etc/realmd.conf"),
        "oslogin": any("oslogin" in name for name in listdir("/etc/ssh/sshd_config.d")),
    }
    c.mark("identity", "ok")
    return out
