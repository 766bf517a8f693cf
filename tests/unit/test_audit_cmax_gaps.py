"""The last of the reference CLI's checks given a counterpart (issue 27): SSH between nodes, a one-GPU job's GPU
binding, enroot import, the BlueField-3 virtio-net controller, the UFM secured profile, PCIe passthrough isolation
and Arm SMMU command-queue virtualization. Parsers on real captures (tests/fixtures/audit/*/README.md names each
source), collectors on this machine and on sysfs trees laid out as the captures show them, rules graded like a run."""

import os
from pathlib import Path

import pytest
from test_audit_grade import audit_rows, by, cpu_node, gb200_node, h100_node, write_run

from probes.audit import security as audit_security
from probes.audit import software as audit_software
from probes.audit import system as audit_system
from probes.audit.collect import Collector
from reports.phases.audit import network
from reports.phases.audit import security as grade_security
from reports.phases.audit.software import judge_version, minimums

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "audit"


def text(folder, name):
    return (FIX / folder / name).read_text()


# ------------------------------------------------------------------------------------------- SSH between nodes

@pytest.mark.parametrize("name, why", [
    ("ssh_batchmode_permission_denied_publickey.txt", "no key of this user is accepted"),
    ("04_ssh_permission_denied_publickey_QT-DevOps_527.txt", "no key of this user is accepted"),
    ("04_ssh_permission_denied_publickey_password_batchmode_rtl8196e_91.txt", "no key of this user is accepted"),
    ("04_ssh_permission_denied_publickey_password_clush_423.txt", "no key of this user is accepted"),
    ("04_ssh_permission_denied_publickey_keyboard-interactive_ssh-chat_181.txt", "no key of this user is accepted"),
    ("ssh_batchmode_host_key_unknown_strict.txt", "host key is not in known_hosts"),
    ("04_ssh_host_key_verification_failed_batchmode_kitchen_sync_38.txt", "host key is not in known_hosts"),
    ("04_ssh_host_key_verification_failed_batchmode_lftp_564.txt", "host key is not in known_hosts"),
    ("04_ssh_host_key_verification_failed_exit255_huginn_2597.txt", "host key is not in known_hosts"),
    ("ssh_connection_refused.txt", "not reachable"),
    ("04_ssh_connection_refused_wpoa_80.txt", "not reachable"),
    ("04_ssh_connection_timed_out_cbio_cluster_115.txt", "not reachable"),
    ("04_ssh_connection_timed_out_github_backup_utils_304.txt", "not reachable"),
    ("ssh_no_route_to_host.txt", "not reachable"),
    ("04_ssh_no_route_to_host_deepspeed_EVA_3.txt", "not reachable"),
    ("04_ssh_no_route_to_host_verbose_vscode_remote_11140.txt", "not reachable"),
    ("04_ssh_no_route_to_host_warp_8906.txt", "not reachable"),
    ("ssh_could_not_resolve_hostname.txt", "not reachable"),
    ("04_ssh_could_not_resolve_hostname_linux_WSL_4894.txt", "not reachable"),
    ("04_ssh_could_not_resolve_hostname_macos_dhyve_15.txt", "not reachable"),
    ("04_ssh_could_not_resolve_hostname_sshpilot_483.txt", "not reachable"),
])
def test_why_ssh_failed_from_openssh_own_words(name, why):
    found, line = grade_security.ssh_failure(text("ssh", name))
    assert why in found
    assert line and line in text("ssh", name)


def test_ssh_failure_not_known_is_shown_as_printed():
    assert grade_security.ssh_failure("kex_exchange_identification: read: Connection reset\n")[0] is None
    assert grade_security.ssh_failure("") == (None, "")


def test_ssh_peer_collector_on_this_machine(tmp_path):
    """A real ssh to a loopback port nobody listens on: rc 255 and OpenSSH's own line, kept for the controller."""
    c = Collector(str(tmp_path))
    got = audit_security.collect_ssh_peer(c, "127.0.0.1", ["-p", "1"])
    assert got["rc"] == 255 and got["client"] is True and got["options"] == ["-p", "1"]
    assert "port 1: Connection refused" in got["stderr"]
    assert c.sources["ssh_peer"]["status"] == "ok"
    assert audit_security.collect_ssh_peer(c, "", []) is None
    assert c.sources["ssh_peer"] == {"status": "not_applicable",
                                     "reason": "one node in this run: no other node to reach"}
    assert os.listdir(tmp_path) == []  # nothing written, not even a known_hosts entry here


def _ssh_node(peer, rc, stderr, timed_out=False):
    f = cpu_node()
    f["sources"]["ssh_peer"] = {"status": "ok", "reason": None}
    f["ssh_peer"] = {"peer": peer, "user": "root", "client": True, "options": [], "rc": rc, "timed_out": timed_out,
                     "stderr": stderr}
    return f


def test_ssh_between_nodes_graded(tmp_path):
    nodes = {"n1": _ssh_node("10.0.0.2", 0, ""),
             "n2": _ssh_node("10.0.0.3", 255, text("ssh", "ssh_batchmode_host_key_unknown_strict.txt")),
             "n3": _ssh_node("10.0.0.4", 255, text("ssh", "ssh_batchmode_permission_denied_publickey.txt")),
             "n4": _ssh_node("10.0.0.1", None, "", timed_out=True),
             "one": cpu_node()}
    nodes["one"]["sources"]["ssh_peer"] = {"status": "not_applicable",
                                           "reason": "one node in this run: no other node to reach"}
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    row = {h: rows[("audit.sec.ssh_between_nodes", h)] for h in nodes}
    assert row["n1"]["status"] == "pass" and row["n1"]["observed"] == "n1 -> 10.0.0.2 as root: ok"
    assert row["n2"]["status"] == "warn" and "No ED25519 host key is known for" in row["n2"]["observed"]
    assert "known_hosts" in row["n2"]["reason"]
    assert row["n3"]["status"] == "warn" and "Permission denied (publickey)" in row["n3"]["observed"]
    assert row["n4"]["status"] == "warn" and row["n4"]["reason"] == "the SSH login hung"
    assert row["one"]["status"] == "skip" and "no other node" in row["one"]["reason"]


# ------------------------------------------------------------------------------------- a one-GPU job's binding

def test_job_gpu_vars_from_real_job_output():
    assert audit_software.job_gpu_vars(text("slurm_job_env", "05_slurm_cuda_visible_devices_2,3_jade_13.txt")) == {
        "CUDA_VISIBLE_DEVICES": "2,3"}
    # only the GPU variables leave the node, empty is kept apart from unset
    assert audit_software.job_gpu_vars("HOME=/root\nCUDA_VISIBLE_DEVICES=\nSLURM_JOB_GPUS=0\nTOKEN=x\n") == {
        "CUDA_VISIBLE_DEVICES": "", "SLURM_JOB_GPUS": "0"}


def _job_node(rc, env, stderr=""):
    f = h100_node()
    f["sources"]["job_gpu_env"] = {"status": "ok", "reason": None}  # the step ran; how it ended is the finding
    f["job_gpu_env"] = {"node": "gpu-node-17", "argv": [], "rc": rc, "timed_out": False, "env": env,
                        "stderr": stderr}
    return f


def test_job_gpu_binding_graded(tmp_path):
    gres_error = text("slurm_job_env", "05_slurm_gres_error_srun_unable_to_allocate_savio.txt").splitlines()[1]
    nodes = {
        "one": _job_node(0, audit_software.job_gpu_vars("CUDA_VISIBLE_DEVICES=0\nSLURM_JOB_GPUS=3\n")),
        "two": _job_node(0, audit_software.job_gpu_vars(
            text("slurm_job_env", "05_slurm_cuda_visible_devices_2,3_jade_13.txt"))),
        "unset": _job_node(0, {"SLURM_JOB_GPUS": "0"}),
        "gres": _job_node(1, {}, gres_error + "\n"),
        "login": cpu_node(),
    }
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    row = {h: rows[("audit.slurm.job_gpu_binding", h)] for h in nodes}
    assert row["one"]["status"] == "pass" and row["one"]["observed"] == "CUDA_VISIBLE_DEVICES=0, SLURM_JOB_GPUS=3"
    assert row["two"]["status"] == "fail" and row["two"]["reason"] == "a one-GPU job sees 2 GPUs"
    assert row["unset"]["status"] == "fail" and "gres.conf lacks File=" in row["unset"]["reason"]
    assert row["gres"]["status"] == "fail"
    assert "Invalid generic resource (gres) specification" in row["gres"]["observed"]
    assert row["login"]["status"] == "skip"


# ----------------------------------------------------------------------------------------------- enroot import

def _enroot_node(rc, output, size=None):
    f = h100_node()
    f["sources"]["enroot_import"] = {"status": "ok", "reason": None}
    f["enroot_import"] = {"image": "docker://ubuntu", "rc": rc, "timed_out": False, "seconds": 12.4,
                          "squashfs_bytes": size, "output_tail": output}
    return f


def test_enroot_import_graded(tmp_path):
    nodes = {
        "ok": _enroot_node(0, text("enroot", "03_enroot_import_success_ubuntu_cached_layers_4.1.1.txt"), 29_000_000),
        "401": _enroot_node(1, text("enroot", "03_enroot_import_fail_401_nvcr_proxy_auth_issue161.txt")),
        "404": _enroot_node(1, text("enroot", "03_enroot_import_fail_404_ubuntu_oci_manifest_issue148.txt")),
        "tls": _enroot_node(1, text("enroot", "03_enroot_import_fail_curl60_ssl_selfsigned_issue123.txt")),
        "unasked": h100_node(),
    }
    nodes["unasked"]["sources"]["enroot_import"] = {
        "status": "not_applicable", "reason": "audit_enroot_import_image is empty: no import was tried"}
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    row = {h: rows[("audit.sw.enroot_import", h)] for h in nodes}
    assert row["ok"]["status"] == "pass" and row["ok"]["observed"] == \
        "enroot import docker://ubuntu: 29.0 MB squashfs in 12 s"
    assert row["401"]["status"] == "fail"
    assert row["401"]["reason"] == "[ERROR] URL https://nvcr.io/proxy_auth returned error code: 401 Unauthorized"
    assert row["404"]["reason"].endswith("returned error code: 404 Not Found")
    assert row["tls"]["reason"].startswith("curl: (60) SSL certificate problem")
    assert row["unasked"]["status"] == "skip" and "audit_enroot_import_image is empty" in row["unasked"]["reason"]


def test_enroot_import_collector_without_enroot(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    c = Collector(str(tmp_path))
    assert audit_software.collect_enroot_import(c, "ubuntu") is None
    assert c.sources["enroot_import"]["reason"] == "enroot is not installed on this node"


def test_enroot_import_leaves_nothing(tmp_path, monkeypatch):
    """The real command line, through an `enroot` that writes what an import writes (the squashfs, its cache and
    temporary files into the directories it was given): the scratch directory is gone afterwards."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "enroot").write_text(
        "#!/bin/sh\n[ \"$1\" = import ] && [ \"$2\" = -o ] || exit 2\n"
        "echo '[INFO] Querying registry for permission grant'\n"
        "touch \"$ENROOT_CACHE_PATH/layer\" \"$ENROOT_TEMP_PATH/t\"\nhead -c 4096 /dev/zero > \"$3\"\n")
    (bindir / "enroot").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    out = tmp_path / "out"
    out.mkdir()
    c = Collector(str(out))
    got = audit_software.collect_enroot_import(c, "nvcr.io#nvidia/pytorch:25.01-py3")
    assert got["rc"] == 0 and got["squashfs_bytes"] == 4096
    assert got["image"] == "docker://nvcr.io#nvidia/pytorch:25.01-py3"
    assert sorted(os.listdir(out)) == ["audit.enroot-import.txt"]


# ------------------------------------------------------------------------------- BlueField virtio-net controller

@pytest.mark.parametrize("name, version", [
    ("01_virtnet_version_v24.07doc_v1.9.13-to-v1.9.14.txt", "1.9.13"),
    ("01_virtnet_version_v24.10doc_v24.10.13-to-v24.10.16.txt", "24.10.13"),
])
def test_virtnet_version_is_the_running_controller(name, version):
    assert network.parse_virtnet_version(text("virtnet", name)) == version


def test_virtnet_cli_version_is_not_the_controller():
    # `virtnet -v` is the CLI's own version: a staged upgrade moves it ahead of the controller still running
    assert network.parse_virtnet_version(text("virtnet", "01_virtnet_-v_v1.9.0doc_v1.9.16.txt")) is None


@pytest.mark.parametrize("version, status", [
    ("24.10.13", "fail"), ("24.10.50", "pass"), ("23.10.22", "fail"), ("23.10.23", "pass"), ("25.10.1", "fail"),
    ("25.10.3", "warn"), ("25.10.6", "pass"), ("1.9.13", "fail"), ("26.04.1", "pass"),
])
def test_release_lines(version, status):
    spec = minimums()["virtio_net_controller"]
    got, expected, reason = judge_version(spec, version)
    assert got == status, (version, expected, reason)
    if status == "warn":
        assert "the line installed decides" in reason and expected == ">= 25.10.2 (LTS25) or >= 25.10.6 (GA)"


def test_virtio_net_controller_graded(tmp_path):
    from probes.audit import dpu

    bf3 = dpu.parse_mlxconfig_q(text("userland", "mstconfig_q_BF3_DPU_mode_TRIMMED__idx11218919974.txt"))
    nic = dict(bf3, settings=dict(bf3["settings"], INTERNAL_CPU_OFFLOAD_ENGINE="DISABLED(1)"))

    def node(query, virtnet=None):
        f = cpu_node()
        f["dpu"] = {"bluefield": {"0002:01:00.0": "BlueField-3"}, "rshim_devices": [], "tmfifo_net0": False,
                    "queries": {"0002:01:00.0": query} if query else {}}
        if virtnet is not None:
            f["dpu"]["virtnet_version"] = virtnet
        return f

    nodes = {"dpu": node(bf3), "nic": node(nic), "unread": node(None),
             "old": node(bf3, text("virtnet", "01_virtnet_version_v24.10doc_v24.10.13-to-v24.10.16.txt")),
             "garbled": node(bf3, "virtnet: error: daemon not running\n"), "none": cpu_node()}
    nodes["none"]["dpu"] = {"bluefield": {}, "rshim_devices": [], "tmfifo_net0": False, "queries": {}}
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    row = {h: rows[("audit.net.virtio_net_controller", h)] for h in nodes}
    assert row["dpu"]["status"] == "warn" and "EMBEDDED_CPU(1)" in row["dpu"]["observed"]
    assert "provider must attest" in row["dpu"]["reason"]
    assert row["nic"]["status"] == "pass" and "NIC mode" in row["nic"]["observed"]
    assert row["unread"]["status"] == "warn"
    assert row["old"]["status"] == "fail" and row["old"]["observed"] == "virtio-net controller 24.10.13 (running)"
    assert row["old"]["expected"] == ">= 24.10.50 (LTS24)"
    assert row["garbled"]["status"] == "error" and "virtnet: error: daemon not running" in row["garbled"]["observed"]
    assert row["none"]["status"] == "skip" and row["none"]["reason"] == "not applicable: no BlueField-3 on this host"


# ----------------------------------------------------------------------- attested: UFM profile, PCIe passthrough

def test_ufm_secured_profile(tmp_path):
    from test_audit_grade import SOURCES  # noqa: F401 (the H100 node has NDR InfiniBand: ibstat_h100_ndr.txt)

    nodes = {"ib": h100_node(), "attested": (h100_node(), "2026-11-20T08:00:00Z", {"ufm_secured_profile": True}),
             "eth": cpu_node()}
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    row = {h: rows[("audit.net.ufm_secured_profile", h)] for h in nodes}
    assert row["ib"]["status"] == "warn" and "InfiniBand port(s)" in row["ib"]["observed"]
    assert "allowed_guid_list" in row["ib"]["reason"]
    assert row["attested"]["status"] == "pass" and row["attested"]["observed"].endswith("attested by the provider")
    assert row["eth"]["status"] == "skip" and "no InfiniBand port" in row["eth"]["reason"]


def test_pcie_passthrough(tmp_path):
    vm = h100_node()
    vm["system"]["virtualization"] = {"vm": "kvm", "hypervisor_flag": True, "cpu_virt_flag": [], "dev_kvm": False,
                                      "nested": None}
    attested = (vm, "2026-11-20T08:00:00Z", {"pcie_passthrough_isolated": "true"})
    plain_vm = cpu_node()
    plain_vm["system"]["virtualization"] = dict(vm["system"]["virtualization"])
    metal = h100_node()
    metal["system"]["virtualization"] = dict(vm["system"]["virtualization"], vm=None, hypervisor_flag=False)
    nodes = {"vm": vm, "attested": attested, "metal": metal, "plain_vm": plain_vm}
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    row = {h: rows[("audit.sec.pcie_passthrough", h)] for h in nodes}
    assert row["vm"]["status"] == "warn" and row["vm"]["observed"].startswith("VM (kvm); ")
    gpus = [b for b, d in vm["pci"]["devices"].items() if d.get("kind") == "gpu"]
    assert len(gpus) == 8 and all(b in row["vm"]["observed"] or "(+" in row["vm"]["observed"] for b in gpus[:6])
    assert row["attested"]["status"] == "pass"
    assert row["metal"]["status"] == "skip" and "bare metal" in row["metal"]["reason"]
    assert row["plain_vm"]["status"] == "skip" and "no GPU or RDMA NIC" in row["plain_vm"]["reason"]


# ------------------------------------------------------------------------------ Arm SMMU command-queue virtualization

def _sysfs(tmp_path, acpi=(), units=("smmu3.0x0000000009050000",)):
    """A guest's /sys laid out as the captures show it: /sys/class/iommu/smmu3.0x<base> (QEMU virt guest) and the
    CMDQV companion ACPI device NVDA200C:00 (Grace boot log), with its _STA status."""
    root = tmp_path / "sys"
    for unit in units:
        (root / "class" / "iommu" / unit).mkdir(parents=True)
    for name in acpi:
        d = root / "bus" / "acpi" / "devices" / name
        d.mkdir(parents=True)
        (d / "status").write_text("15\n")
    (root / "bus" / "acpi" / "devices").mkdir(parents=True, exist_ok=True)
    return str(root)


def test_arm_smmu_collector(tmp_path):
    assert audit_system.arm_smmu("x86_64") is None
    got = audit_system.arm_smmu("aarch64", sys_root=_sysfs(tmp_path, acpi=["NVDA200C:00", "PNP0A08:00"]),
                                proc_root=str(tmp_path / "proc"))
    assert got["iommu_units"] == ["smmu3.0x0000000009050000"] and got["acpi_cmdqv"] == {"NVDA200C:00": "15"}
    # the ACPI id the boot logs name
    for name in ("02_grace_dmesg_arm-smmu-v3_cmdqv_probe_NVDA200C00.txt",
                 "02_grace_dmesg_cmdqv_fallback_NVDA200C00_4GB_reserved.txt"):
        assert "NVDA200C:00" in text("arm_smmu", name) and audit_system.CMDQV_ACPI_HID == "NVDA200C"
    assert "smmu3.0x0000000009050000" in text("arm_smmu", "02_nonGrace_qemu_virt_sys_class_iommu_smmu3_0x09050000.txt")


def test_arm_smmu_cmdqv_graded(tmp_path):
    vm = {"vm": "kvm", "hypervisor_flag": True, "cpu_virt_flag": [], "dev_kvm": False, "nested": None}

    def grace_vm(acpi):
        f = gb200_node()
        f["system"]["virtualization"] = dict(vm)
        f["system"]["arm_smmu"] = audit_system.arm_smmu("aarch64", sys_root=_sysfs(tmp_path / str(len(acpi)), acpi),
                                                        proc_root=str(tmp_path / "proc"))
        return f

    arm_vm = cpu_node()
    arm_vm["system"].update(arch="aarch64", virtualization=dict(vm),
                            arm_smmu=audit_system.arm_smmu("aarch64", sys_root=_sysfs(tmp_path / "arm"),
                                                           proc_root=str(tmp_path / "proc")))
    metal = gb200_node()
    metal["system"]["virtualization"] = dict(vm, vm=None, hypervisor_flag=False)
    metal["system"]["arm_smmu"] = audit_system.arm_smmu("aarch64", sys_root=_sysfs(tmp_path / "metal"))
    nodes = {"cmdqv": grace_vm(["NVDA200C:00"]), "none": grace_vm([]), "arm_vm": arm_vm, "metal": metal,
             "x86": cpu_node()}
    rows = by(audit_rows(write_run(tmp_path / "run", nodes)))
    row = {h: rows[("audit.hw.arm_smmu_cmdqv", h)] for h in nodes}
    assert row["cmdqv"]["status"] == "pass" and "CMDQV NVDA200C:00" in row["cmdqv"]["observed"]
    assert row["none"]["status"] == "warn" and "one emulated command queue" in row["none"]["reason"]
    assert row["arm_vm"]["status"] == "skip" and "nothing names a Grace platform" in row["arm_vm"]["reason"]
    assert row["metal"]["status"] == "skip" and "bare metal" in row["metal"]["reason"]
    assert row["x86"]["status"] == "skip" and row["x86"]["reason"].startswith("not applicable: x86_64 host")
