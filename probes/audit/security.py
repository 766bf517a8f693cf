"""Security facts for the audit: the effective sshd settings (`sshd -T` of the sshd actually serving this node),
sudo rules, Docker socket permissions, world-writable directories in PATH, SELinux/AppArmor, BMC/IPMI device
nodes, accounts with UID 0 or no password, and (only when asked) whether the cloud metadata endpoint answers.
"""

import glob
import grp
import os
import pwd
import re
import shutil
import stat

from probes.audit import procs as audit_procs
from probes.audit.collect import listdir, read, read_key_values, read_strip
from probes.common import procs as common_procs

SSHD_KEYS = ("passwordauthentication", "permitrootlogin", "kbdinteractiveauthentication",
             "challengeresponseauthentication", "permitemptypasswords", "pubkeyauthentication", "usepam",
             "x11forwarding", "maxauthtries", "authenticationmethods", "allowusers", "allowgroups", "denyusers",
             "port", "listenaddress", "permituserenvironment", "allowtcpforwarding", "loglevel", "ciphers")
IPMI_NODES = ("/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0")
METADATA_URL = "http://169.254.169.254/"


def parse_sshd_t(text):
    """`sshd -T` -> {key: value} (keys are lower case; repeated keys such as listenaddress are joined)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.strip().split(None, 1)
        if not parts:
            continue
        key = parts[0].lower()
        value = parts[1] if len(parts) > 1 else ""
        out[key] = out[key] + " " + value if key in out and key in ("listenaddress", "port", "hostkey") else value
    return out


def sshd_config_path():
    """The -f config of the listening sshd of this node's network namespace (the one whose parent is not sshd),
    or None for the default /etc/ssh/sshd_config.

    Only a live process counts: an unreaped connection's sshd (a zombie) reads as no namespace and no command
    line, and taking it for the listener gave the default path on a node whose sshd runs with -f (a clean-clone CI
    failure; the machine's init there does not reap at once)."""
    mine = audit_procs._netns("self")
    for pid in listdir("/proc"):
        if not pid.isdigit() or audit_procs._name(pid) != "sshd" or audit_procs._netns(pid) not in (mine, None):
            continue
        parent = common_procs.parent(pid)
        argv = audit_procs.cmdline_words(pid)
        if audit_procs._zombie_or_gone(pid) or not argv or audit_procs._name(parent) == "sshd":
            continue
        for i, arg in enumerate(argv):
            if arg == "-f" and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith("-f") and len(arg) > 2:
                return arg[2:]
        return None
    return None


def parse_sudoers(texts):
    """{path: text} -> rules with NOPASSWD and rules granting ALL (aliases and Defaults skipped)."""
    nopasswd, all_rules = [], []
    for path, text in texts.items():
        for line in (text or "").splitlines():
            line = line.split("#", 1)[0].strip() if not line.strip().startswith("#include") else ""
            if not line or line.startswith(("Defaults", "User_Alias", "Runas_Alias", "Host_Alias", "Cmnd_Alias",
                                            "@include")):
                continue
            if "NOPASSWD" in line:
                nopasswd.append({"file": path, "rule": line[:200]})
            if re.search(r"=\s*(\([^)]*\)\s*)?(NOPASSWD:\s*|PASSWD:\s*)?ALL\s*$", line):
                all_rules.append({"file": path, "rule": line[:200]})
    return {"nopasswd": nopasswd, "all": all_rules}


def path_dirs(environ_path, etc_environment, login_defs):
    dirs = []
    for source in (environ_path, read_key_values(etc_environment or "").get("PATH", "")):
        dirs += [d for d in (source or "").split(":") if d]
    for line in (login_defs or "").splitlines():
        m = re.match(r"^\s*ENV_(?:SU)?PATH\s+(?:PATH=)?(\S+)", line)
        if m:
            dirs += [d for d in m.group(1).split(":") if d]
    seen = []
    for d in dirs:
        if d not in seen:
            seen.append(d)
    return seen


def dir_modes(dirs):
    out = []
    for d in dirs:
        try:
            st = os.stat(d)
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        out.append({"path": d, "mode": "%04o" % mode, "world_writable": bool(mode & 0o002),
                    "sticky": bool(mode & stat.S_ISVTX), "owner_uid": st.st_uid})
    return out


def docker_socket():
    for path in ("/var/run/docker.sock", "/run/docker.sock"):
        try:
            st = os.stat(path)
        except OSError:
            continue
        mode = stat.S_IMODE(st.st_mode)
        try:
            group = grp.getgrgid(st.st_gid)
            gname, members = group.gr_name, sorted(group.gr_mem)
        except KeyError:
            gname, members = str(st.st_gid), []
        return {"path": path, "mode": "%04o" % mode, "world_writable": bool(mode & 0o002), "group": gname,
                "group_members": members}
    return None


def accounts():
    uid0 = sorted(p.pw_name for p in pwd.getpwall() if p.pw_uid == 0)
    out = {"uid0": uid0, "shadow_readable": False, "empty_password": []}
    try:
        st = os.stat("/etc/shadow")
        out["shadow_mode"] = "%04o" % stat.S_IMODE(st.st_mode)
    except OSError:
        out["shadow_mode"] = None
    text = read("/etc/shadow")
    if text is not None:
        out["shadow_readable"] = True
        out["empty_password"] = sorted(line.split(":")[0] for line in text.splitlines()
                                       if line.count(":") >= 2 and line.split(":")[1] == "")
    return out


def mac_state():
    enforce = read_strip("/sys/fs/selinux/enforce")
    selinux_cfg = read_key_values(read("/etc/selinux/config", "") or "").get("SELINUX")
    aa_enabled = read_strip("/sys/module/apparmor/parameters/enabled")
    profiles = read("/sys/kernel/security/apparmor/profiles")
    enforced = complain = None
    if profiles is not None:
        enforced = sum(1 for line in profiles.splitlines() if line.endswith("(enforce)"))
        complain = sum(1 for line in profiles.splitlines() if line.endswith("(complain)"))
    return {"selinux": {"0": "permissive", "1": "enforcing"}.get(enforce, "disabled" if enforce is None else enforce),
            "selinux_config": selinux_cfg, "apparmor_enabled": aa_enabled == "Y",
            "apparmor_profiles_enforced": enforced, "apparmor_profiles_complain": complain}


def probe_metadata(timeout=1.0):
    """One HTTP GET to the link-local metadata address (only when the audit is told to)."""
    import urllib.error  # noqa: PLC0415 - only needed for this opt-in check
    import urllib.request  # noqa: PLC0415

    try:
        with urllib.request.urlopen(METADATA_URL, timeout=timeout) as resp:
            return {"reachable": True, "status": resp.status}
    except urllib.error.HTTPError as exc:
        return {"reachable": True, "status": exc.code}
    except Exception as exc:  # noqa: BLE001 - unreachable is the answer we hope for
        return {"reachable": False, "error": str(exc)[:120]}


def collect(c, probe_md=False):
    out = {}
    cfg = sshd_config_path()
    sshd = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else "sshd")
    argv = [sshd, "-T"] + (["-f", cfg] if cfg else [])
    res = c.cmd("sshd_t", argv, timeout=10)
    out["sshd_config"] = cfg or "/etc/ssh/sshd_config"
    if res.rc not in (0, None) and "privilege separation directory" in (res.stderr + res.stdout):
        # sshd has never run since boot (its /run/sshd is made when the service starts): nothing serves SSH here
        c.mark("sshd_t", "not_applicable", "sshd is installed but not running on this node (no /run/sshd)")
    if res.rc == 0:
        parsed = parse_sshd_t(res.stdout)
        out["sshd"] = {k: parsed.get(k) for k in SSHD_KEYS if k in parsed}
    texts = {}
    readable = True
    for path in ["/etc/sudoers"] + sorted(glob.glob("/etc/sudoers.d/*")):
        if os.path.exists(path):
            text = read(path)
            if text is None:
                readable = False
            texts[path] = text
    if not texts:
        c.mark("sudoers", "missing", "no /etc/sudoers (sudo not installed)")
    elif not readable:
        c.mark("sudoers", "not_permitted", "/etc/sudoers is readable by root only")
    else:
        c.mark("sudoers", "ok")
        out["sudo"] = parse_sudoers(texts)
    out["docker_socket"] = docker_socket()
    out["path"] = dir_modes(path_dirs(os.environ.get("PATH"), read("/etc/environment"), read("/etc/login.defs")))
    out["mac"] = mac_state()
    modules = set(listdir("/sys/module"))
    out["ipmi"] = {"device_nodes": [p for p in IPMI_NODES if os.path.exists(p)],
                   "modules": sorted(m for m in modules if m.startswith("ipmi_")),
                   "ipmitool": shutil.which("ipmitool") is not None}
    out["accounts"] = accounts()
    c.mark("security_files", "ok")
    if probe_md:
        out["metadata"] = probe_metadata()
        c.mark("metadata", "ok")
    else:
        c.mark("metadata", "not_applicable", "audit_probe_metadata is false: the metadata endpoint was not probed")
    return out


def collect_ssh_peer(c, peer, options=()):
    """Whether this node reaches the next node of the run over SSH without a password or a prompt, as MPI and
    NCCL launchers started with ssh (mpirun's rsh agent, pdsh) need: `ssh -o BatchMode=yes <peer> true`, as the
    user the audit runs as, with the node's own keys and known_hosts (plus `options`, for a site whose launchers
    pass their own, as mpirun's plm_rsh_args do). Host keys are checked as the node's ssh_config says; nothing is
    written (no known_hosts entry is added). The stderr is kept whole: the controller reads why it failed."""
    if not peer:
        c.mark("ssh_peer", "not_applicable", "one node in this run: no other node to reach")
        return None
    ssh = shutil.which("ssh")
    if not ssh:
        c.mark("ssh_peer", "missing", "the ssh client is not installed on this node")
        return {"peer": peer, "user": _user(), "client": False}
    argv = [ssh, "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o", "NumberOfPasswordPrompts=0"] \
        + [str(o) for o in options] + [peer, "true"]
    res = c.cmd("ssh_peer", argv, timeout=20, ok_rcs=(0, 255), record=True)
    return {"peer": peer, "user": _user(), "client": True, "options": [str(o) for o in options], "rc": res.rc,
            "timed_out": bool(res.timed_out), "stderr": (res.stderr or "")[-2000:]}


def _user():
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
