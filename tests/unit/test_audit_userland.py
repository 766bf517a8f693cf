"""The audit checks added beside the reference CLI's (issue 27): what users work with (Nsight Compute and GPU
counter access, perf, the HPC SDK, Lmod, the login environment), identity (sudo, user tools, an external IdP), the
Januscape exposure, the kubelet's CPU manager, the NCCL topology file, the NVLink tenant boundary and the BlueField
DPU's host isolation and HBM exposure on Grace. Parsers on real captures
(tests/fixtures/audit/userland/README.md names each source), rules graded like a real run."""

import os
from pathlib import Path

import pytest
from test_audit_grade import audit_rows, by, cpu_node, write_run

from probes.audit import net as audit_net
from probes.audit import sched as audit_sched
from probes.audit import system as audit_system
from probes.audit import userland
from probes.audit.collect import Collector

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "audit" / "userland"


def text(name):
    return (FIX / name).read_text()


@pytest.mark.parametrize("name, version", [
    ("ncu_version_2023.2.0__idx7160728355.txt", "2023.2.0.0"),
    ("ncu_version_2025.1.1__idx55155679910.txt", "2025.1.1.0"),
    ("ncu_version_2026.2.0_single_line_as_recorded__idx69868854805.txt", "2026.2.0.0"),
])
def test_ncu_version(name, version):
    assert userland.parse_ncu_version(text(name)) == version


@pytest.mark.parametrize("name", ["nvidia_params_full_sorted_RmProfilingAdminOnly_1_arch__idx34336397409.txt",
                                  "nvidia_params_full_driver_order_fixture_k8s_test_infra__idx62561511481.txt"])
def test_nvidia_params(name):
    params = userland.parse_nvidia_params(text(name))
    assert params["RmProfilingAdminOnly"] == "1"
    assert len(params) > 20


def test_modprobe_option_as_the_documented_command_writes_it(tmp_path):
    # the capture is the command (echo '<line>' | sudo tee /etc/modprobe.d/nvidia-profiling.conf): its line, as written
    line = text("modprobe_nvidia_profiling_conf_tee__idx55813125145.txt").split("'")[1]
    found = userland.modprobe_options({"/etc/modprobe.d/nvidia-profiling.conf": line + "\n",
                                       "/etc/modprobe.d/other.conf": "# options nvidia NVreg_RestrictProfiling"
                                                                     "ToAdminUsers=1\nblacklist nouveau\n"},
                                      "NVreg_RestrictProfilingToAdminUsers")
    assert found == [{"file": "/etc/modprobe.d/nvidia-profiling.conf", "value": "0"}]


def test_perf_versions_and_the_wrapper_without_a_perf_for_this_kernel():
    blocks = text("perf_version_variants__multiple_idx.txt").split("# idx")[1:]
    got = [userland.parse_perf_version(b) for b in blocks]
    assert got == ["5.4.133", "4.18.0", "6.14.11", None]  # the last: "WARNING: perf not found for kernel 5.8.0-7642"


@pytest.mark.parametrize("name, sources", [
    ("nsswitch_conf_rhel_files_sss__insights_core_test_idx1074401468.conf", ["files", "sss"]),
    ("nsswitch_conf_files_sss_ldap_with_actions__idx29302440892.conf", ["files", "sss", "ldap"]),
    ("nsswitch_conf_ubuntu_files_systemd_sss__idx71275714198.conf", ["files", "systemd", "sss"]),
])
def test_nsswitch(name, sources):
    nss = userland.parse_nsswitch(text(name))
    assert nss["passwd"] == sources  # [NOTFOUND=return ...] actions dropped, comments skipped


def test_login_assignments():
    texts = {"/etc/environment": 'PATH="/usr/bin"\nCUDA_VISIBLE_DEVICES=0,1\n',
             "/etc/profile.d/cuda.sh": "export PATH=/usr/local/cuda/bin:$PATH\n# CUDA_VISIBLE_DEVICES=2\n",
             "/etc/profile.d/gpu.csh": "setenv CUDA_VISIBLE_DEVICES 3\n"}
    assert userland.login_assignments(texts, "CUDA_VISIBLE_DEVICES") == [
        {"file": "/etc/environment", "line": "CUDA_VISIBLE_DEVICES=0,1"},
        {"file": "/etc/profile.d/gpu.csh", "line": "setenv CUDA_VISIBLE_DEVICES 3"}]


def test_cpu_manager_state_and_config():
    static = audit_sched.cpu_manager(text("cpu_manager_state_static_entries__idx37433034365.json"), None)
    assert static == {"state_file": True, "policy": "static", "state_error": None, "config_policy": None}
    assert audit_sched.cpu_manager(text("cpu_manager_state_static_kubelet_1.34__idx58466985700.json"),
                                   None)["policy"] == "static"
    none = audit_sched.cpu_manager(text("cpu_manager_state_none__idx19076858636.json"),
                                   text("kubelet_config_yaml_kubeadm_generated_no_cpuManagerPolicy__idx26335024060.yaml"))
    assert none["policy"] == "none" and none["config_policy"] is None
    broken = audit_sched.cpu_manager('{"policyName":"sta', "cpuManagerPolicy: static\n")
    assert broken["policy"] is None and "cpu_manager_state" in broken["state_error"]
    assert broken["config_policy"] == "static"
    assert audit_sched.cpu_manager(None, None) == {"state_file": False, "policy": None, "state_error": None,
                                                   "config_policy": None}


def test_nccl_topology_files(tmp_path):
    good = tmp_path / "ndv5-topo.xml"
    good.write_text(text("nccl_topo_azure_ndv5_topo.xml"))
    cut = tmp_path / "cut.xml"
    cut.write_text(text("nccl_topo_azure_ndv4_topo.xml")[:700])
    empty = tmp_path / "empty.xml"
    empty.write_text("")
    files = {f["path"]: f for f in audit_net.topo_files([str(good), str(cut), str(empty), str(tmp_path / "gone.xml")])}
    assert files[str(good)]["root"] == "system" and files[str(good)]["xml_error"] is None
    assert files[str(cut)]["xml_error"] and files[str(cut)]["root"] is None
    assert files[str(empty)]["size"] == 0
    assert files[str(tmp_path / "gone.xml")]["exists"] is False
    assert all(f["named"] for f in files.values())


def test_cpu_flags_of_this_machine_kind():
    flags = audit_system.cpu_flags(text("proc_cpuinfo_kvm_guest_2core_this_machine_kind.txt"))
    assert "hypervisor" in flags and not flags & {"vmx", "svm"}  # a KVM guest without nested virtualization


def test_the_collector_runs_here(tmp_path):
    c = Collector(str(tmp_path))
    facts = userland.collect(c)
    assert set(facts) == {"ncu", "driver_params", "profiling", "perf", "nvhpc", "lmod", "login_env", "sudo",
                          "user_tools", "identity"}
    assert c.sources["login_files"]["status"] == "ok" and c.sources["identity"]["status"] == "ok"
    assert facts["sudo"]["is_root"] == (os.geteuid() == 0)
    assert facts["user_tools"]["useradd"]  # this machine kind has the passwd package
    virt = audit_system.virtualization(c)
    assert set(virt) == {"vm", "hypervisor_flag", "cpu_virt_flag", "dev_kvm", "nested"}
    from probes.audit import dpu

    assert dpu.collect(c)["bluefield"] == {} and c.sources["mlxconfig"]["status"] == "not_applicable"


# ---- the rules, on nodes graded like a real run ------------------------------------------------------------------

def _node(userland_facts=None, virt=None, cpu_manager=None, topo_files=None, sysctl=None):
    f = cpu_node()
    f["sources"].update({"login_files": {"status": "ok", "reason": None},
                         "identity": {"status": "ok", "reason": None}})
    base = {"ncu": {"path": None, "version": None},
            "profiling": {"driver_params_read": False, "RmProfilingAdminOnly": None, "modprobe": []},
            "perf": {"path": None, "version": None, "error": None},
            "nvhpc": {"installs": [], "nvc": None},
            "lmod": {"init": None, "version": None, "modulepath": [], "modulefiles": 0, "environment_modules": None},
            "login_env": {"CUDA_VISIBLE_DEVICES": [], "probe_environment": None, "files_read": ["/etc/environment"]},
            "sudo": {"path": None, "is_root": True, "noninteractive_ok": None, "message": None},
            "user_tools": {"useradd": "/usr/sbin/useradd", "groupadd": "/usr/sbin/groupadd"},
            "identity": {"nsswitch": {"passwd": ["files", "systemd"]}, "directory_sources": [], "sssd_conf": False,
                         "sssd_domains": [], "ipa": False, "krb5_realm": None, "realmd": False, "oslogin": False}}
    base.update(userland_facts or {})
    f["userland"] = base
    f["system"]["virtualization"] = virt or {"vm": None, "hypervisor_flag": False, "cpu_virt_flag": ["vmx"],
                                             "dev_kvm": True, "nested": "Y"}
    f["system"]["sysctl"].update(sysctl or {})
    f["kubernetes"]["cpu_manager"] = cpu_manager or {"state_file": False, "policy": None, "state_error": None,
                                                     "config_policy": None}
    f["nccl"]["topo_files"] = topo_files if topo_files is not None else []
    return f


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    nss = userland.parse_nsswitch(text("nsswitch_conf_rhel_files_sss__insights_core_test_idx1074401468.conf"))
    params = userland.parse_nvidia_params(text("nvidia_params_full_sorted_RmProfilingAdminOnly_1_arch__idx34336397409"
                                               ".txt"))
    nodes = {
        "plain": _node(sysctl={"kernel.perf_event_paranoid": "2"}),
        "good": _node({
            "perf": {"path": "/usr/bin/perf", "version": userland.parse_perf_version("perf version 6.14.11"),
                     "error": None},
            "sudo": {"path": "/usr/bin/sudo", "is_root": False, "noninteractive_ok": False,
                     "message": text("sudo_n_true_password_required_stderr__idx30899666097.txt").strip()},
            "identity": {"nsswitch": nss, "directory_sources": ["sss"], "sssd_conf": True, "sssd_domains": [],
                         "ipa": False, "krb5_realm": "EXAMPLE.COM", "realmd": False, "oslogin": False},
            "lmod": {"init": "/usr/share/lmod/lmod/init/profile", "version": "8.7.37", "modulepath": ["/opt/mf"],
                     "modulefiles": 42, "environment_modules": None},
            "login_env": {"CUDA_VISIBLE_DEVICES": [{"file": "/etc/environment", "line": "CUDA_VISIBLE_DEVICES=0"}],
                          "probe_environment": None, "files_read": ["/etc/environment"]},
            "profiling": {"driver_params_read": True, "RmProfilingAdminOnly": params["RmProfilingAdminOnly"],
                          "modprobe": []}},
            virt={"vm": "kvm", "hypervisor_flag": True, "cpu_virt_flag": [], "dev_kvm": True, "nested": None},
            cpu_manager=audit_sched.cpu_manager(text("cpu_manager_state_static_entries__idx37433034365.json"), None),
            topo_files=[{"path": "/opt/microsoft/ndv5-topo.xml", "named": True, "exists": True, "size": 3000,
                         "xml_error": None, "root": "system"}],
            sysctl={"kernel.perf_event_paranoid": "1"}),
        "rhel-default": _node({
            "identity": {"nsswitch": nss, "directory_sources": ["sss"], "sssd_conf": False, "sssd_domains": [],
                         "sssd_socket": False, "ipa": False, "krb5_realm": "EXAMPLE.COM", "realmd": False,
                         "oslogin": False}}),
        "exposed": _node(virt={"vm": "kvm", "hypervisor_flag": True, "cpu_virt_flag": ["svm"], "dev_kvm": True,
                               "nested": text("kvm_intel_nested_Y_fedora__libkrun_issue625.txt").split()[-1]},
                         cpu_manager=audit_sched.cpu_manager(text("cpu_manager_state_none__idx19076858636.json"),
                                                             None),
                         topo_files=[{"path": "/etc/nccl/topo.xml", "named": True, "exists": False, "size": None,
                                      "xml_error": None, "root": None}]),
    }
    run = write_run(tmp_path_factory.mktemp("userland"), nodes)
    return by(audit_rows(run))


def status(graded, check, host):
    return graded[("audit." + check, host)]["status"]


def test_identity(graded):
    assert status(graded, "sec.sudo_available", "plain") == "warn"
    assert "sudo not installed (the audit ran as root)" in graded[("audit.sec.sudo_available", "plain")]["observed"]
    assert status(graded, "sec.sudo_available", "good") == "pass"
    assert "asks for a password" in graded[("audit.sec.sudo_available", "good")]["observed"]
    assert status(graded, "sec.user_management", "plain") == "pass"
    assert status(graded, "sec.external_idp", "plain") == "warn"
    good = graded[("audit.sec.external_idp", "good")]
    assert good["status"] == "pass" and "sss" in good["observed"] and "EXAMPLE.COM" in good["observed"]
    # RHEL's default nsswitch lists sss whether or not SSSD was set up, and a Kerberos realm gives no accounts
    rhel = graded[("audit.sec.external_idp", "rhel-default")]
    assert rhel["status"] == "warn" and "sss listed but SSSD neither configured nor serving" in rhel["observed"]


def test_profiling_and_tools(graded):
    assert status(graded, "sw.perf", "plain") == "warn" and status(graded, "sw.perf", "good") == "pass"
    assert status(graded, "sw.perf_event_paranoid", "plain") == "warn"
    assert status(graded, "sw.perf_event_paranoid", "good") == "pass"
    # GPU checks skip on these CPU nodes, with the reason
    for check in ("sw.ncu", "sw.ncu_profiling", "sw.cuda_visible_devices", "net.nccl_topo_file",
                  "k8s.kubelet_cpu_manager"):
        row = graded[("audit." + check, "good")]
        assert row["status"] == "skip" and ("no GPU" in row["reason"] or "no NVIDIA GPU" in row["reason"]), row
    assert status(graded, "sw.lmod", "good") == "skip"  # no Slurm on these nodes


def test_januscape(graded):
    assert status(graded, "sec.januscape", "plain") == "pass"  # bare metal: the host is not a guest
    good = graded[("audit.sec.januscape", "good")]
    assert good["status"] == "pass" and "vmx/svm not exposed" in good["observed"]  # like this machine kind
    exposed = graded[("audit.sec.januscape", "exposed")]
    assert exposed["status"] == "warn" and "nested KVM Y" in exposed["observed"]


def _grade_on_gpu(tmp_path, facts):
    """The same rules on an H100 node (the GPU conditions apply)."""
    from test_audit_grade import h100_node

    f = h100_node()
    f["sources"].update({"login_files": {"status": "ok", "reason": None}})
    f["userland"] = facts["userland"]
    f["kubernetes"]["cpu_manager"] = facts["kubernetes"]["cpu_manager"]
    f["nccl"]["topo_files"] = facts["nccl"]["topo_files"]
    return by(audit_rows(write_run(tmp_path, {"h100": f})))


def test_on_a_gpu_node(tmp_path):
    params = userland.parse_nvidia_params(text("nvidia_params_full_driver_order_fixture_k8s_test_infra__idx62561511481"
                                               ".txt"))
    facts = _node({"ncu": {"path": "/usr/local/cuda/bin/ncu",
                           "version": userland.parse_ncu_version(text("ncu_version_2025.1.1__idx55155679910.txt"))},
                   "profiling": {"driver_params_read": True, "RmProfilingAdminOnly": params["RmProfilingAdminOnly"],
                                 "modprobe": []},
                   "login_env": {"CUDA_VISIBLE_DEVICES": [{"file": "/etc/environment",
                                                           "line": "CUDA_VISIBLE_DEVICES=0,1"}],
                                 "probe_environment": None, "files_read": ["/etc/environment"]}},
                  cpu_manager=audit_sched.cpu_manager(text("cpu_manager_state_none__idx19076858636.json"), None),
                  topo_files=[{"path": "/etc/nccl/topo.xml", "named": True, "exists": True, "size": 700,
                               "xml_error": "no element found: line 9, column 0", "root": None}])
    rows = _grade_on_gpu(tmp_path, facts)
    ncu = rows[("audit.sw.ncu", "h100")]
    assert ncu["status"] == "pass" and "2025.1.1.0" in ncu["observed"]
    prof = rows[("audit.sw.ncu_profiling", "h100")]
    assert prof["status"] == "warn" and "RmProfilingAdminOnly: 1" in prof["observed"]
    assert rows[("audit.sw.cuda_visible_devices", "h100")]["status"] == "warn"
    cm = rows[("audit.k8s.kubelet_cpu_manager", "h100")]
    assert cm["status"] == "warn" and cm["observed"].startswith("none")
    topo = rows[("audit.net.nccl_topo_file", "h100")]
    assert topo["status"] == "warn" and "no element found" in topo["reason"]
    # without the profiling file the modprobe.d option decides; without either, a skip that says so
    facts["userland"]["profiling"] = {"driver_params_read": False, "RmProfilingAdminOnly": None,
                                      "modprobe": [{"file": "/etc/modprobe.d/nvidia-profiling.conf", "value": "0"}]}
    facts["kubernetes"]["cpu_manager"] = audit_sched.cpu_manager(
        text("cpu_manager_state_static_kubelet_1.34__idx58466985700.json"), None)
    # a graph dump lying in /etc/nccl that nothing names is listed, not judged: NCCL does not read it
    facts["nccl"]["topo_files"] = [{"path": "/etc/nccl/graph.xml", "named": False, "exists": True, "size": 900,
                                    "xml_error": None, "root": "graphs", "unexpanded": False}]
    rows = _grade_on_gpu(tmp_path / "2", facts)
    assert "also seen: /etc/nccl/graph.xml" in rows[("audit.net.nccl_topo_file", "h100")]["reason"]
    assert rows[("audit.sw.ncu_profiling", "h100")]["status"] == "pass"
    assert rows[("audit.k8s.kubelet_cpu_manager", "h100")]["status"] == "pass"
    assert rows[("audit.net.nccl_topo_file", "h100")]["status"] == "skip"
    facts["userland"]["profiling"]["modprobe"] = []
    rows = _grade_on_gpu(tmp_path / "3", facts)
    assert rows[("audit.sw.ncu_profiling", "h100")]["status"] == "skip"
    assert "not read" in rows[("audit.sw.ncu_profiling", "h100")]["reason"]


def test_an_audit_from_before_these_checks_skips_them_and_a_failed_section_is_an_error(tmp_path):
    """Regrading a run recorded by an older audit: the new checks say the facts were not collected (a skip, not an
    error that would cap the category); a userland section that failed on the node is an error with its reason."""
    old = cpu_node()
    broken = cpu_node()
    broken["sources"]["section:userland"] = {"status": "error", "reason": "PermissionError: /etc/nsswitch.conf"}
    rows = by(audit_rows(write_run(tmp_path, {"old": old, "broken": broken})))
    for check in ("sec.sudo_available", "sec.external_idp", "sw.perf", "sec.januscape"):
        row = rows[("audit." + check, "old")]
        assert row["status"] == "skip" and row["reason"].startswith("not collected: this run's audit predates"), row
    row = rows[("audit.sec.sudo_available", "broken")]
    assert row["status"] == "error" and "PermissionError: /etc/nsswitch.conf" in row["reason"]


def test_nvlink_boundary_on_real_topologies(tmp_path):
    """nvidia-smi topo -m of a bare-metal H100 (NV18), the same as a VM guest, a GB200 tray (NVL72 domain) with and
    without the provider's attestation, and a topology that could not be read."""
    from test_audit_grade import gb200_node, h100_node

    from probes.common import gpu_topo

    smi = FIX.parent.parent / "nvidia-smi"

    def topo(name):
        return gpu_topo.facts(gpu_topo.parse((smi / name).read_text()))

    def node(base, topology, vm=None):
        base["gpu_nvidia"]["topology"] = topology
        base["system"]["virtualization"] = {"vm": vm, "hypervisor_flag": bool(vm), "cpu_virt_flag": [],
                                            "dev_kvm": False, "nested": None}
        return base

    nodes = {"metal": node(h100_node(), topo("topo-m_h100_nv18_8nic_spaces.txt")),
             "guest": node(h100_node(), topo("topo-m_h100_nv18_8nic_spaces.txt"), vm="kvm"),
             "tray": node(gb200_node(), topo("topo-m_gb200_4gpu_8nic.txt")),
             "attested": (node(gb200_node(), topo("topo-m_gb200_4gpu_8nic.txt")), "2026-11-20T08:00:00Z",
                          {"nvlink_domain_exclusive": "True"}),
             "unread": node(h100_node(), {"error": "nvidia-smi topo -m: cannot read line 5: 'GPU2 NV18'"}),
             "login": cpu_node()}
    rows = by(audit_rows(write_run(tmp_path, nodes)))

    def row(host):
        return rows[("audit.gpu.nvlink_boundary", host)]

    assert row("metal")["status"] == "pass" and "NVLink NV18 between 8 GPUs; bare metal" in row("metal")["observed"]
    assert row("guest")["status"] == "warn" and "VM guest (kvm)" in row("guest")["observed"]
    assert row("tray")["status"] == "warn" and "NVL72" in row("tray")["observed"]
    assert row("attested")["status"] == "pass" and "attests" in row("attested")["observed"]
    assert row("unread")["status"] == "warn" and "cannot read line 5" in row("unread")["observed"]
    assert row("login")["status"] == "skip" and "no NVIDIA GPU" in row("login")["reason"]


@pytest.mark.parametrize("name, device_type, model, rshim", [
    ("mstconfig_q_BF3_DPU_mode_TRIMMED__idx11218919974.txt", "BlueField3", "EMBEDDED_CPU(1)", "ENABLED(0)"),
    ("mlxconfig_q_BF2_EMBEDDED_CPU_test_fixture__idx28986063556.txt", "BlueField2", "EMBEDDED_CPU(1)", None),
    ("mlxconfig_q_BF2_SEPARATED_HOST_test_fixture__idx28986063556.txt", "BlueField2", "SEPARATED_HOST(0)", None),
])
def test_mlxconfig_query(name, device_type, model, rshim):
    from probes.audit import dpu

    q = dpu.parse_mlxconfig_q(text(name))
    assert q["device_type"] == device_type
    assert q["settings"]["INTERNAL_CPU_MODEL"] == model  # the fixture's stray `_INTERNAL_CPU_MODEL` line is not read
    assert q["settings"].get("INTERNAL_CPU_RSHIM") == rshim


def test_bluefield_functions_from_sysfs(tmp_path):
    from probes.audit import dpu

    for bdf, vendor, device in (("0000:03:00.0", "0x15b3", "0xa2dc"), ("0000:03:00.1", "0x15b3", "0xa2dc"),
                                ("0000:17:00.0", "0x15b3", "0x1021"), ("0000:18:00.0", "0x10de", "0x2330")):
        (tmp_path / bdf).mkdir()
        (tmp_path / bdf / "vendor").write_text(vendor + "\n")
        (tmp_path / bdf / "device").write_text(device + "\n")
    assert dpu.bluefield_functions(str(tmp_path)) == {"0000:03:00.0": "BlueField-3"}  # a ConnectX-7 is no DPU


def test_dpu_host_isolation(tmp_path):
    from probes.audit import dpu

    bf3 = dpu.parse_mlxconfig_q(text("mstconfig_q_BF3_DPU_mode_TRIMMED__idx11218919974.txt"))
    restricted = dict(bf3, settings=dict(bf3["settings"], INTERNAL_CPU_RSHIM="DISABLED(1)"))

    def node(queries, rshim=(), tmfifo=False, functions=True):
        f = cpu_node()
        f["dpu"] = {"bluefield": {"0002:01:00.0": "BlueField-3"} if functions else {}, "rshim_devices": list(rshim),
                    "tmfifo_net0": tmfifo, "queries": queries}
        return f

    nodes = {"open": node({"0002:01:00.0": bf3}), "restricted": node({"0002:01:00.0": restricted}),
             "tmfifo": node({"0002:01:00.0": restricted}, tmfifo=True, rshim=["/dev/rshim0"]),
             "unread": node({}), "none": node({}, functions=False)}
    nodes["unread"]["sources"]["mlxconfig"] = {
        "status": "missing", "reason": "neither mlxconfig (MFT) nor mstconfig (mstflint) is installed"}
    rows = by(audit_rows(write_run(tmp_path, nodes)))

    def row(host):
        return rows[("audit.net.dpu_host_isolation", host)]

    assert row("open")["status"] == "warn" and "RShim not restricted on 0002:01:00.0" in row("open")["reason"]
    assert row("restricted")["status"] == "pass" and "DISABLED(1)" in row("restricted")["observed"]
    assert row("tmfifo")["status"] == "warn" and "/dev/rshim0, tmfifo_net0" in row("tmfifo")["observed"]
    assert row("unread")["status"] == "warn" and "mstconfig (mstflint) is installed" in row("unread")["reason"]
    assert row("none")["status"] == "skip" and "no BlueField" in row("none")["reason"]


def _numa_tree(root, nodes):
    for n, cpus, mem_kb in nodes:
        d = root / ("node%d" % n)
        d.mkdir(parents=True)
        (d / "cpulist").write_text(cpus + "\n")
        (d / "meminfo").write_text("Node %d MemTotal:       %d kB\nNode %d MemFree:        1 kB\n" % (n, mem_kb, n))
    return audit_system.numa_nodes(str(root))


def test_hbm_exposure_on_grace(tmp_path):
    """A Grace Blackwell tray in NUMA mode (the HBM a CPU-less NUMA node, as the kernel shows it) against the same
    tray in driver-managed mode, with /proc/driver/nvidia/params as two real drivers print it."""
    from test_audit_grade import gb200_node, h100_node

    numa_mode = _numa_tree(tmp_path / "numa", [(0, "0-71", 503316480), (1, "", 100663296), (2, "", 0)])
    cdmm = _numa_tree(tmp_path / "cdmm", [(0, "0-71", 503316480)])
    assert numa_mode[1] == {"node": 1, "cpus": "", "mem_kb": 100663296}

    def node(base, numa, params_file):
        base["system"]["numa_nodes"] = numa
        base["userland"] = {"driver_params": {"read": True, "CoherentGPUMemoryMode": userland.parse_nvidia_params(
            text(params_file))["CoherentGPUMemoryMode"]}}
        return base

    driver = "nvidia_params_full_driver_order_fixture_k8s_test_infra__idx62561511481.txt"  # "driver"
    empty = "nvidia_params_full_sorted_RmProfilingAdminOnly_1_arch__idx34336397409.txt"  # ""
    rows = by(audit_rows(write_run(tmp_path / "run", {
        "exposed": node(gb200_node(), numa_mode, driver), "cdmm": node(gb200_node(), cdmm, driver),
        "no-cdmm": node(gb200_node(), cdmm, empty), "hopper": node(h100_node(), numa_mode, empty)})))

    def row(host):
        return rows[("audit.gpu.hbm_exposure", host)]

    assert row("exposed")["status"] == "warn" and "node 1: 96 GiB" in row("exposed")["observed"]
    assert row("cdmm")["status"] == "pass" and "'driver'" in row("cdmm")["observed"]
    assert row("no-cdmm")["status"] == "warn" and "CDMM" in row("no-cdmm")["reason"]
    assert row("hopper")["status"] == "skip" and "not a coherent CPU-GPU platform" in row("hopper")["reason"]


def test_lmod_own_modules_are_not_the_sites(tmp_path):
    """A fresh Lmod install ships its own `lmod` and `settarg` modulefiles in its Core directory: no site module."""
    core = tmp_path / "lmod" / "modulefiles" / "Core"
    for name in ("lmod", "settarg"):
        (core / name).mkdir(parents=True)
        (core / name / "1.0.lua").write_text("-- Lmod's own\n")
    site = tmp_path / "site"
    (site / "cuda").mkdir(parents=True)
    (site / "cuda" / "12.4.lua").write_text("prepend_path('PATH', '/usr/local/cuda-12.4/bin')\n")
    assert userland._modulefiles([str(core)]) == (0, [str(core)], False)
    assert userland._modulefiles([str(core), str(site)]) == (1, [str(core), str(site)], False)
    # MODULEPATH values that are not absolute paths (a comment's words, an unexpanded default) are not walked
    assert userland._modulepath({"/etc/profile.d/m.sh": "# MODULEPATH is set below\n"
                                 "export MODULEPATH=${MODULEPATH:-/opt/mf}\n"}) == list(userland.MODULE_DIRS)
