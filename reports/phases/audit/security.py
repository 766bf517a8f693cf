"""Audit area `sec` (audit.sec.*): sshd settings, services listening beyond loopback, metadata and BMC access,
sudo, accounts, CPU mitigations, mandatory access control and hardening sysctls."""

from reports.phases.audit.common import R, Skip, host_rule, name_list, sysctl_rule


def _sshd(v, key):
    v.need("sshd_t")
    value = (v.sec("security").get("sshd") or {}).get(key)
    if value is None:
        raise Skip("not reported: sshd -T has no %s (older OpenSSH)" % key)
    return value


def _sshd_rule(key, good, warn=(), expected=None):
    @host_rule
    def fn(v, c):
        value = _sshd(v, key)
        status = "pass" if value in good else "warn" if value in warn else c.get("status_bad", "fail")
        return R(status, "%s %s" % (key, value), expected or "%s %s" % (key, " or ".join(good)))
    return fn


ssh_password_auth = _sshd_rule("passwordauthentication", ("no",))
ssh_root_login = _sshd_rule("permitrootlogin", ("no",), warn=("prohibit-password", "without-password",
                                                                        "forced-commands-only"))
ssh_kbd_interactive = _sshd_rule("kbdinteractiveauthentication", ("no",))
ssh_empty_passwords = _sshd_rule("permitemptypasswords", ("no",))
ssh_x11 = _sshd_rule("x11forwarding", ("no",))


@host_rule
def ssh_max_auth_tries(v, c):
    value = _sshd(v, "maxauthtries")
    limit = int(c.get("max", 4))
    return R("pass" if int(value) <= limit else "warn", "maxauthtries %s" % value, "<= %d" % limit)


def _exposed_port(port, what):
    @host_rule
    def fn(v, c):
        v.need("listeners")
        p = int(c.get("port", port))
        exposed = v.listeners(port=p, exposed=True)
        if exposed:
            return R(c.get("status_exposed", "fail"), "%s listening on %s" % (
                what, name_list("%s:%d" % (s["address"], p) for s in exposed)), "not reachable beyond loopback")
        local = v.listeners(port=p)
        return R("pass", "loopback only" if local else "not listening", "not reachable beyond loopback")
    return fn


listen_dcgm = _exposed_port(5555, "DCGM host engine")
listen_docker_api = _exposed_port(2375, "Docker API (plain TCP)")


@host_rule
def listen_kubelet(v, c):
    v.need("listeners")
    exposed = v.listeners(port=10250, exposed=True)
    if not exposed:
        return R("pass", "not listening beyond loopback", "kubelet API not open to the tenant network")
    anon = v.sec("kubernetes").get("anonymous_auth")
    if anon is False:
        return R("pass", "kubelet on %s:10250, anonymous auth off" % exposed[0]["address"],
                 "kubelet API authenticated")
    return R("warn", "kubelet on %s:10250, anonymous auth %s" % (exposed[0]["address"],
                                                                 "ON" if anon else "unknown"),
             "kubelet API not open to the tenant network, or anonymous auth off")


@host_rule
def listen_exporters(v, c):
    v.need("listeners")
    ports = set(c.get("ports", []))
    wide = [s for s in v.listeners(exposed=True) if s["port"] in ports and s["address"] in ("0.0.0.0", "::")]
    if wide:
        bound = sorted({"%d (%s)" % (s["port"], s.get("process") or "?") for s in wide})
        return R("warn", "bound to all addresses: %s" % name_list(bound),
                 "metrics bound to the management address only")
    return R("pass", "none bound to all addresses", "metrics bound to the management address only")


@host_rule
def listen_other(v, c):
    v.need("listeners")
    allowed = set(c.get("allowed_ports", []))
    other = sorted({(s["port"], s.get("process") or "?") for s in v.listeners(exposed=True)
                    if s["port"] not in allowed})
    if other:
        return R("warn", "open: %s" % name_list("%d (%s)" % x for x in other), "only expected services beyond loopback",
                 "each listening service is reachable from every tenant on the network")
    return R("pass", "%d expected services" % len(v.listeners(exposed=True)), "only expected services beyond loopback")


@host_rule
def metadata(v, c):
    v.need("metadata")
    md = v.sec("security").get("metadata") or {}
    if md.get("reachable"):
        return R("fail", "answers (HTTP %s)" % md.get("status"), "not reachable from the tenant",
                 "instance credentials and user data may be readable from jobs")
    return R("pass", "unreachable (%s)" % md.get("error", "no answer"), "not reachable from the tenant")


@host_rule
def bmc(v, c):
    ipmi = v.sec("security").get("ipmi") or {}
    nodes = ipmi.get("device_nodes") or []
    if nodes:
        return R("warn", "%s present%s" % (name_list(nodes), ", ipmitool installed" if ipmi.get("ipmitool") else ""),
                 "no in-band BMC access from the tenant", "root on the node can reconfigure the BMC")
    modules = " (modules %s)" % name_list(ipmi["modules"]) if ipmi.get("modules") else ""
    return R("pass", "no IPMI device node" + modules, "no in-band BMC access from the tenant")


@host_rule
def docker_socket(v, c):
    sock = v.sec("security").get("docker_socket")
    if not sock:
        raise Skip("not applicable: no Docker socket")
    if sock.get("world_writable"):
        return R("fail", "%s mode %s" % (sock["path"], sock["mode"]), "not world-writable")
    if sock.get("group_members"):
        return R("warn", "group %s: %s" % (sock.get("group"), name_list(sock["group_members"])),
                 "docker group empty (membership is root)")
    return R("pass", "%s mode %s, group %s empty" % (sock["path"], sock["mode"], sock.get("group")),
             "not world-writable, docker group empty")


@host_rule
def path_world_writable(v, c):
    dirs = v.sec("security").get("path") or []
    bad = [d["path"] for d in dirs if d.get("world_writable")]
    return R("fail" if bad else "pass",
             ("world-writable: %s" % name_list(bad)) if bad else "%d directories" % len(dirs),
             "no world-writable directory in PATH")


@host_rule
def sudo_nopasswd(v, c):
    v.need("sudoers")
    rules = (v.sec("security").get("sudo") or {}).get("nopasswd") or []
    return R("warn" if rules else "pass", name_list(r["rule"] for r in rules) if rules else "none",
             "no NOPASSWD sudo rule")


@host_rule
def kernel_mitigations(v, c):
    s = v.sec("system")
    vulns = s.get("vulnerabilities") or {}
    off = (s.get("cmdline") or {}).get("mitigations")
    vulnerable = sorted(k for k, x in vulns.items() if (x or "").startswith("Vulnerable"))
    if off == "off":
        return R("fail", "mitigations=off on the kernel command line", "CPU mitigations on")
    if not vulns:
        raise Skip("not reported: /sys/devices/system/cpu/vulnerabilities absent")
    return R("fail" if vulnerable else "pass", ("vulnerable: %s" % name_list(vulnerable)) if vulnerable else
             "%d checked, none vulnerable" % len(vulns), "no CPU vulnerability left unmitigated")


@host_rule
def mac(v, c):
    mac = v.sec("security").get("mac") or {}
    if mac.get("selinux") == "enforcing":
        return R("pass", "SELinux enforcing", "SELinux enforcing or AppArmor enforcing profiles")
    if mac.get("apparmor_enabled") and (mac.get("apparmor_profiles_enforced") or 0) > 0:
        return R("pass", "AppArmor, %d profiles enforced" % mac["apparmor_profiles_enforced"],
                 "SELinux enforcing or AppArmor enforcing profiles")
    return R("warn", "SELinux %s, AppArmor %s" % (mac.get("selinux"), "enabled" if mac.get("apparmor_enabled")
                                                  else "off"), "SELinux enforcing or AppArmor enforcing profiles")


dmesg_restrict = sysctl_rule("kernel.dmesg_restrict", lambda x: x == "1", "kernel.dmesg_restrict = 1")
kptr_restrict = sysctl_rule("kernel.kptr_restrict", lambda x: x in ("1", "2"), "kernel.kptr_restrict >= 1")
ptrace_scope = sysctl_rule("kernel.yama.ptrace_scope", lambda x: x in ("1", "2", "3"),
                                     "kernel.yama.ptrace_scope >= 1")
aslr = sysctl_rule("kernel.randomize_va_space", lambda x: x == "2", "kernel.randomize_va_space = 2",
                             status_bad="fail")
suid_dumpable = sysctl_rule("fs.suid_dumpable", lambda x: x == "0", "fs.suid_dumpable = 0")
unprivileged_bpf = sysctl_rule("kernel.unprivileged_bpf_disabled", lambda x: x in ("1", "2"),
                                         "kernel.unprivileged_bpf_disabled >= 1")
protected_links = sysctl_rule("fs.protected_symlinks", lambda x: x == "1", "fs.protected_symlinks = 1")


@host_rule
def uid0(v, c):
    uid0 = (v.sec("security").get("accounts") or {}).get("uid0") or []
    extra = [u for u in uid0 if u != "root"]
    return R("fail" if extra else "pass", name_list(uid0), "only root has UID 0")


@host_rule
def empty_passwords(v, c):
    acc = v.sec("security").get("accounts") or {}
    if not acc.get("shadow_readable"):
        raise Skip("not permitted: /etc/shadow is readable by root only")
    empty = acc.get("empty_password") or []
    return R("fail" if empty else "pass", name_list(empty) or "none", "no account with an empty password")


@host_rule
def shadow_perms(v, c):
    mode = (v.sec("security").get("accounts") or {}).get("shadow_mode")
    if mode is None:
        raise Skip("not applicable: no /etc/shadow")
    ok = not (int(mode, 8) & 0o007)
    return R("pass" if ok else "fail", "/etc/shadow %s" % mode, "no access for others")


# ---- identity (probes/audit/userland.py) --------------------------------------------------------------------


@host_rule
def sudo_available(v, c):
    sudo = v.userland("sudo")
    if sudo.get("path"):
        how = "sudo -n true works" if sudo.get("noninteractive_ok") else "sudo -n asks for a password" \
            if sudo.get("message") else "sudo present"
        return R("pass", "%s (%s)" % (sudo["path"], how), "sudo available to opt into root")
    return R(c.get("status_bad", "warn"), "sudo not installed%s" % (" (the audit ran as root)" if sudo.get("is_root")
                                                                   else ""),
             "sudo available to opt into root", "users cannot opt into root for drivers, perf or containers")


@host_rule
def user_management(v, c):
    tools = v.userland("user_tools")
    present = sorted(k for k, p in tools.items() if p)
    missing = [t for t in ("useradd", "groupadd") if not tools.get(t)]
    if missing:
        return R(c.get("status_bad", "warn"), "missing: %s" % ", ".join(missing), "useradd and groupadd present")
    return R("pass", "present: %s" % ", ".join(present), "useradd and groupadd present")


@host_rule
def external_idp(v, c):
    ident = v.userland("identity")
    # RHEL's authselect writes `passwd: sss files` whether or not SSSD was ever set up, and krb5-config writes a
    # default_realm on install: neither is a directory on its own. SSSD counts when it is configured or serving.
    sssd = ident.get("sssd_conf") or ident.get("sssd_domains") or ident.get("sssd_socket")
    sources = [s for s in ident.get("directory_sources") or [] if s != "sss" or sssd]
    signs = []
    if sources:
        signs.append("nsswitch passwd/group from %s" % ", ".join(sources))
    if sssd:
        signs.append("sssd %s" % ("serving (/var/lib/sss/pipes/nss)" if ident.get("sssd_socket") else "configured"))
    if ident.get("ipa"):
        signs.append("FreeIPA client")
    if ident.get("oslogin"):
        signs.append("OS Login")
    realm = "; Kerberos realm %s" % ident["krb5_realm"] if ident.get("krb5_realm") else ""
    if signs:
        return R("pass", "; ".join(signs) + realm,
                 "accounts from an external identity provider (LDAP, SSSD, IPA, SSO)")
    nss = (ident.get("nsswitch") or {}).get("passwd") or []
    return R(c.get("status_bad", "warn"), "local accounts only (nsswitch passwd: %s%s)%s" % (
        " ".join(nss) or "not read", "; sss listed but SSSD neither configured nor serving"
        if "sss" in (ident.get("directory_sources") or []) else "", realm),
             "accounts from an external identity provider (LDAP, SSSD, IPA, SSO)",
             "users and keys are managed host by host")


@host_rule
def januscape(v, c):
    """Januscape (CVE-2026-53359): a guest that holds the CPU's virtualization, /dev/kvm and nested KVM can reach
    the host through the nested hypervisor; the host needs the patched kernel. Seen from the guest."""
    virt = v.collected("system", "virtualization") or {}
    seen = "VM %s; vmx/svm %s; /dev/kvm %s; nested KVM %s" % (
        virt.get("vm") or "no", "/".join(virt.get("cpu_virt_flag") or []) or "not exposed",
        "present" if virt.get("dev_kvm") else "absent", virt.get("nested") or "unknown")
    expected = "CPU virtualization and nested KVM not handed to tenants"
    if not (virt.get("vm") and virt.get("cpu_virt_flag") and virt.get("dev_kvm")):
        return R("pass", seen, expected)
    nested = str(virt.get("nested") or "").strip().upper()
    if nested in ("1", "Y"):
        return R(c.get("status_bad", "warn"), seen, expected,
                 "nested virtualization is exposed to the guest: the host kernel needs the Januscape fix")
    if nested in ("0", "N"):
        return R("pass", seen, expected)
    return R("warn", seen, expected, "nested virtualization state unknown: the provider must attest the host fix")


# Why `ssh -o BatchMode=yes` failed, from OpenSSH's own messages (the first that matches, in this order).
SSH_FAILURES = (
    ("the peer's host key is not in known_hosts (a launcher's first ssh fails under BatchMode)",
     ("Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED", "host key is known for")),
    ("no key of this user is accepted (it would need a password)", ("Permission denied",)),
    ("the peer is not reachable over SSH", ("Connection refused", "Connection timed out", "No route to host",
                                            "Could not resolve hostname", "Network is unreachable",
                                            "Connection closed by", "Connection reset by")),
)


def ssh_failure(stderr):
    """(why, the OpenSSH line that says so) for a failed BatchMode ssh; why is None for a message not known here."""
    lines = [line.strip() for line in (stderr or "").splitlines() if line.strip()]
    for why, needles in SSH_FAILURES:
        for line in lines:
            if any(n in line for n in needles):
                return why, line
    return None, (lines[-1] if lines else "")


@host_rule
def ssh_between_nodes(v, c):
    """Passwordless SSH from this node to the next node of the run, as MPI and NCCL jobs launched with ssh need
    (mpirun's rsh agent, pdsh, DeepSpeed's runner). Slurm launches them with srun and PMIx without it, hence a warning
    (status_bad), not a failure."""
    peer = v.tried("ssh_peer")
    seen = "%s -> %s as %s" % (v.host, peer.get("peer"), peer.get("user"))
    expected = "ssh -o BatchMode=yes to the next node succeeds"
    if peer.get("rc") == 0:
        return R("pass", seen + ": ok", expected)
    if peer.get("timed_out"):
        return R(c.get("status_bad", "warn"), seen + ": no answer in 20 s", expected, "the SSH login hung")
    why, line = ssh_failure(peer.get("stderr"))
    return R(c.get("status_bad", "warn"), "%s: exit %s: %s" % (seen, peer.get("rc"), line or "no message"), expected,
             why or "ssh failed")


@host_rule
def pcie_passthrough(v, c):
    """GPUs and RDMA NICs passed through to a VM are isolated by the hypervisor's host: dedicated IOMMU groups with
    ACS on the switches above them, function-level reset between tenants, GPU memory cleared. None of it can be seen
    from the guest, so the provider attests it (audit_pcie_passthrough_isolated); the guest's side is shown."""
    virt = v.collected("system", "virtualization") or {}
    if not virt.get("vm"):
        raise Skip("not applicable: bare metal, no device is passed through")
    ids = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x15b3": "Mellanox/NVIDIA"}
    passed = sorted(b for b, d in v.pci.items() if (d.get("vendor") or "").lower() in ids
                    and d.get("kind") in ("gpu", "nic", "nvswitch"))
    if not passed:
        raise Skip("not applicable: no GPU or RDMA NIC is passed through to this VM (%s)" % virt["vm"])
    groups = {v.pci[b].get("iommu_group") for b in passed} - {None}
    seen = "VM (%s); %d device(s) passed through (%s); %d guest IOMMU group(s) among them" % (
        virt["vm"], len(passed), name_list(passed), len(groups))
    expected = "the provider attests host-side isolation (audit_pcie_passthrough_isolated)"
    if v.param_flag("pcie_passthrough_isolated"):
        return R("pass", seen + "; attested by the provider", expected)
    return R(c.get("status_bad", "warn"), seen, expected,
             "host IOMMU groups, ACS, function reset and memory clearing cannot be seen from the guest: the provider "
             "must verify and attest them")
