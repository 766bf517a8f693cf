"""Grading of the audit on the controller: nodes assembled from recorded outputs (H100, H200, B200, GB200, MI300X)
through the probe's own parsers, written as artifacts, loaded and graded like a real run."""

import copy
import json
import re
from pathlib import Path

import pytest

from probes.artifact import Artifact, write_json_atomic
from probes.audit import amd as audit_amd
from probes.audit import health as audit_health
from probes.audit import logs as audit_logs
from probes.audit import net as audit_net
from probes.audit import nvidia as audit_nvidia
from probes.audit import pci as audit_pci
from probes.audit import sched as audit_sched
from probes.audit import security as audit_security
from probes.audit import storage as audit_storage
from reports import grading
from reports.load import load_run
from reports.phases.audit import common as audit_common
from reports.phases.audit import grade as grade_audit
from reports.phases.audit import network as audit_network
from reports.phases.audit import software as audit_software

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "audit"
STATUSES = {"pass", "warn", "fail", "skip", "error"}
SOURCES = ("nvidia_smi", "nvlink_status", "nvlink_errors", "nvidia_driver", "amd_smi", "pci_sysfs", "lspci",
           "net_sysfs", "rdma_sysfs", "ip_addr", "ibstat", "ibv_devinfo", "nccl_config", "proc_sys", "systemctl_failed",
           "kernel_log", "packages", "libraries", "mounts", "findmnt", "processes", "listeners", "sshd_t", "sudoers",
           "security_files", "metadata", "slurm", "kubernetes_node", "health_agents", "dcgm_diag")


def text(name):
    return (FIX / name).read_text()


def cpu_node():
    """A CPU-only login node: Ubuntu 22.04, hardened sshd, NFS home, Lustre, no GPU, no RDMA."""
    mounts = audit_storage.parse_findmnt(text("findmnt-J_h100_node.json"))
    real = [m for m in mounts if m["fstype"] not in audit_storage.PSEUDO]
    for m in real:
        m.update(size=10 * 2**40, avail=4 * 2**40, free=4 * 2**40, inodes=10**8, inodes_free=9 * 10**7, readonly=False)
    sources = {s: {"status": "ok", "reason": None} for s in SOURCES}
    sources["metadata"] = {"status": "not_applicable",
                           "reason": "audit_probe_metadata is false: the metadata endpoint was not probed"}
    sources["dcgm_diag"] = {"status": "missing", "reason": "dcgmi not found (DCGM not installed)"}
    for s in ("nvidia_smi", "amd_smi", "ibstat", "ibv_devinfo"):
        sources[s] = {"status": "missing", "reason": "%s not found" % s.replace("_", "-")}
    sources["rdma_sysfs"] = {"status": "not_applicable", "reason": "no RDMA device (/sys/class/infiniband absent)"}
    sources["slurm"] = {"status": "not_applicable", "reason": "no Slurm on this node (no slurm.conf)"}
    sources["lspci"] = {"status": "not_applicable", "reason": "no PCIe bridge above a GPU, NIC or NVMe device"}
    return {
        "collector": {"root": True, "wall_s": 0.9},
        "sources": sources,
        "gpu_nvidia": {"tool": False},
        "nvidia_driver": {"module_loaded": False, "modules": [], "proc_version": None, "peermem_loaded": False,
                          "gdrdrv_loaded": False, "gdrdrv_device": False, "nvswitch_devices": 0, "imex_config": False,
                          "imex_channels": False, "fabricmanager_version": None},
        "gpu_amd": {"tool": None, "gpus": [], "amdgpu_loaded": False},
        "pci": {"devices": {}, "acs_read": False},
        "net": {"interfaces": {"lo": {"type": 772, "operstate": "unknown", "mtu": 65536, "virtual": True},
                               "eno1": {"type": 1, "operstate": "up", "mtu": 1500, "speed_mbps": 25000,
                                        "mac": "3c:ec:ef:10:22:01", "virtual": False, "pci": "0000:c1:00.0",
                                        "driver": "bnxt_en", "rp_filter": 2, "addresses": ["10.40.2.17/16"]}},
                "rdma": {}, "default_route": ["eno1"], "rp_filter_all": 0},
        "ib_tools": {},
        "nccl": {"files": {}, "searched": ["/etc/nccl.conf", "~/.nccl.conf"], "profile": {}, "environment": {}},
        "system": {"os_id": "ubuntu", "os_version": "22.04", "os_name": "Ubuntu 22.04.5 LTS",
                   "kernel": "5.15.0-119-generic", "arch": "x86_64",
                   "kernels_installed": ["5.15.0-118-generic", "5.15.0-119-generic"],
                   "cmdline": {"BOOT_IMAGE": "/vmlinuz-5.15.0-119-generic", "ro": True, "iommu": "pt"},
                   "iommu": {"units": ["dmar0"], "groups": 120, "group_types": {"identity": 120}},
                   "cpu_governors": {"performance": 112}, "cpu_count": 112,
                   "sysctl": {"kernel.numa_balancing": "0", "kernel.dmesg_restrict": "1", "kernel.kptr_restrict": "1",
                              "kernel.yama.ptrace_scope": "1", "kernel.randomize_va_space": "2",
                              "fs.suid_dumpable": "0", "kernel.unprivileged_bpf_disabled": "2",
                              "fs.protected_symlinks": "1"},
                   "vulnerabilities": {"meltdown": "Not affected", "spectre_v2": "Mitigation: Enhanced IBRS"},
                   "modules": ["ib_core", "mlx5_core"], "edac": {"controllers": 4, "ce": 0, "ue": 0},
                   "thp": "always [madvise] never", "clock": {"state": 0, "unsynchronised": False, "maxerror_us": 40},
                   "loadavg_1m": 0.4, "uptime_s": 86400.0, "journal_persistent": True, "pid1": "systemd",
                   "failed_units": []},
        "kernel_log": {"source": "journalctl", "lines": 1200, "first": "2024-09-01T00:00:00Z", "xids": [],
                       "counts": {}, "events": {}},
        "packages": {"manager": "dpkg", "count": 911, "selected": {"openssh-server": "1:8.9p1-3ubuntu0.10"}},
        "libraries": {"cuda_toolkit": None, "nccl_lib": None, "nccl_header": None, "cudnn_lib": None,
                      "cudnn_header": None, "gdrapi_lib": None, "hpcx": [], "pyxis_plugin": [], "pmix_plugin": []},
        "tools": {"openssh": {"version": "8.9p1", "rc": 0}},
        "storage": {"mounts": real, "home_mount": "/home", "home_fstype": "nfs4", "user_home": "/root",
                    "user_home_mount": "/", "nvme": {}, "fstab": [],
                    "mount_targets": sorted(m["target"] for m in mounts)},
        "procs": {"daemons": ["chronyd", "sshd", "node_exporter"], "daemons_elsewhere": {},
                  "listeners": [{"address": "0.0.0.0", "port": 22, "loopback": False, "process": "sshd"},
                                {"address": "10.40.2.17", "port": 9100, "loopback": False,
                                 "process": "node_exporter"}]},
        "security": {"sshd_config": "/etc/ssh/sshd_config",
                     "sshd": {k: v for k, v in audit_security.parse_sshd_t(text("sshd-T_hardened.txt")).items()
                              if k in audit_security.SSHD_KEYS},
                     "sudo": {"nopasswd": [], "all": []}, "docker_socket": None,
                     "path": [{"path": "/usr/bin", "mode": "0755", "world_writable": False, "sticky": False,
                               "owner_uid": 0}],
                     "mac": {"selinux": "disabled", "apparmor_enabled": True, "apparmor_profiles_enforced": 31},
                     "ipmi": {"device_nodes": [], "modules": [], "ipmitool": False},
                     "accounts": {"uid0": ["root"], "shadow_readable": True, "empty_password": [],
                                  "shadow_mode": "0640"}},
        "slurm": {"slurm_conf": None},
        "kubernetes": {"kubelet_config": None, "anonymous_auth": None},
        "health": {"nhc": "/usr/sbin/nhc", "nhc_conf": "/etc/nhc/nhc.conf", "nvsentinel_config": False, "dcgmi": False},
    }


def _rdma_from_ibstat(ibstat, pcis):
    out = {}
    for i, (dev, info) in enumerate(sorted(ibstat.items(), key=lambda kv: int(kv[0].split("_")[1]))):
        p = info["ports"]["1"]
        ib = p["link_layer"] == "InfiniBand"
        out[dev] = {"fw_ver": info["firmware"], "hca_type": info["type"], "pci": pcis[i],
                    "netdevs": ["ibp%ds0" % i] if ib else ["ens%df0np0" % i],
                    "ports": {"1": {"state": "ACTIVE" if p["state"] == "Active" else "DOWN",
                                    "phys_state": p["physical_state"], "rate": "%s Gb/sec" % p["rate"],
                                    "rate_gbps": p["rate_gbps"], "link_layer": p["link_layer"], "lid": p["base_lid"],
                                    "sm_lid": p["sm_lid"], "counters": {"symbol_error": 0, "link_downed": 0},
                                    "gids": {} if ib else {"3": {"type": "RoCE v2", "ipv4": True},
                                                           "1": {"type": "IB/RoCE v1", "ipv4": False}},
                                    "pkeys": ["0xffff"] if ib else []}}}
    return out


def nvidia_node(xml, nvlink=None, nvlink_errors=None, version_file=None):
    f = cpu_node()
    smi = audit_nvidia.parse_smi_xml(text(xml))
    f["gpu_nvidia"] = dict(smi, tool=True, rc=0)
    if nvlink:
        f["gpu_nvidia"]["nvlink"] = {str(k): v for k, v in audit_nvidia.parse_nvlink_status(text(nvlink)).items()}
    if nvlink_errors:
        f["gpu_nvidia"]["nvlink_errors"] = {str(k): v for k, v in
                                            audit_nvidia.parse_nvlink_errors(text(nvlink_errors)).items()}
    f["sources"]["nvidia_smi"] = {"status": "ok", "reason": None}
    f["nvidia_driver"].update(module_loaded=True, modules=["nvidia", "nvidia_uvm", "nvidia_peermem"],
                              peermem_loaded=True,
                              proc_version=audit_nvidia.parse_driver_version_file(text(version_file))
                              if version_file else {"version": smi["driver_version"], "open_kernel_module": True})
    devices = {}
    for g in smi["gpus"]:
        bdf = g["pci_bus_id"][-12:].lower()
        devices[bdf] = {"kind": "gpu", "vendor": "0x10de", "class": "0x030200", "root": "pci0000:%s" % bdf[5:7],
                        "upstream": [], "link_width": 16, "link_width_max": 16, "aer_fatal": 0, "aer_nonfatal": 0}
    f["pci"]["devices"] = devices
    f["procs"]["daemons"] += ["nv-hostengine", "nvidia-persistenced", "dcgm-exporter"]
    f["procs"]["listeners"].append({"address": "10.40.2.17", "port": 9400, "loopback": False,
                                    "process": "dcgm-exporter"})
    f["tools"].update(dcgmi={"version": "4.5.3", "rc": 0}, nvidia_ctk={"version": "1.19.1", "rc": 0},
                      enroot={"version": "4.2.1", "rc": 0})
    f["sources"]["dcgm_diag"] = {"status": "ok", "reason": None}
    f["health"].update(dcgmi=True, dcgm_diag={"tests": {"Denylist": "pass"}, "failed": [], "warned": []})
    f["libraries"].update(cuda_toolkit="13.1.0", nccl_lib="2.27.7", nccl_header="2.27.7", gdrapi_lib="2.4.1")
    f["nvidia_driver"].update(gdrdrv_loaded=True)
    return f


def with_fabric(f, ibstat="ibstat_h100_ndr.txt", pcis=None):
    """Eight NDR compute HCAs and two RoCE storage ports; the first HCA shares a PCIe switch with GPU 0."""
    cas = audit_net.parse_ibstat(text(ibstat))
    pcis = pcis or ["0000:19:00.0"] + ["0000:%02x:00.0" % (0x30 + i) for i in range(1, 10)]
    f["net"]["rdma"] = _rdma_from_ibstat(cas, pcis)
    for info in f["net"]["rdma"].values():
        for nd in info["netdevs"]:
            f["net"]["interfaces"][nd] = {"type": 32 if nd.startswith("ib") else 1, "operstate": "up",
                                          "mtu": 4092 if nd.startswith("ib") else 9000, "speed_mbps": 400000,
                                          "virtual": False, "pci": info["pci"], "driver": "mlx5_core", "rp_filter": 2}
    f["ib_tools"] = {"ibstat": cas, "ibv_devinfo": audit_net.parse_ibv_devinfo(text("ibv_devinfo_h100_ndr.txt"))}
    for s in ("ibstat", "ibv_devinfo", "rdma_sysfs", "lspci"):
        f["sources"][s] = {"status": "ok", "reason": None}
    f["tools"]["ofed_info"] = {"version": "24.10-1.1.4", "flavour": "OFED-internal", "rc": 0}
    f["libraries"]["hpcx"] = ["2.21"]
    return f


def h100_node():
    f = with_fabric(nvidia_node("nvidia-smi-q-x_h100.xml", "nvidia-smi-nvlink-s_h100.txt",
                                "nvidia-smi-nvlink-e_h100.txt", "proc-driver-nvidia-version_proprietary.txt"))
    # GPU 0 (18:00.0) and mlx5_0 (19:00.0) below one PCIe switch whose GPU-side port redirects P2P (lspci)
    lspci, _ = audit_pci.parse_lspci(text("lspci-vvv_h100_pcie_switch_excerpt.txt"))
    chain = ["0000:15:01.0", "0000:16:00.0"]
    devices = f["pci"]["devices"]
    devices["0000:18:00.0"].update(root="pci0000:15", upstream=chain + ["0000:17:00.0"])
    devices["0000:19:00.0"] = {"kind": "nic", "vendor": "0x15b3", "class": "0x020700", "root": "pci0000:15",
                               "upstream": chain + ["0000:17:01.0"], "link_width": 16, "link_width_max": 16}
    for bdf in chain + ["0000:17:00.0", "0000:17:01.0"]:
        devices[bdf] = {"kind": "bridge", "root": "pci0000:15", "acs_ctl": lspci[bdf]["acs_ctl"]}
    devices["0000:05:00.0"] = {"kind": "nvswitch", "vendor": "0x10de", "class": "0x068000"}
    f["pci"]["acs_read"] = True
    f["procs"]["daemons"].append("nv-fabricmanager")
    f["nvidia_driver"]["fabricmanager_version"] = "560.35.03"
    f["kernel_log"] = dict(audit_logs.parse_kernel_log(text("dmesg-iso_h100_xids.txt")), source="dmesg")
    del f["kernel_log"]["matched"]
    f["tools"]["runc"] = {"version": "1.1.12", "rc": 0}
    f["slurm"] = {"slurm_conf": "/etc/slurm/slurm.conf", "source": "scontrol",
                  "config": audit_sched._select(
                      audit_sched.parse_scontrol_config(text("scontrol-show-config_h100.txt"))),
                  "plugstack": ["required /usr/local/lib/slurm/spank_pyxis.so"], "gres_conf": ["AutoDetect=nvml"],
                  "cgroup_conf": {"ConstrainDevices": "yes"}, "mpi_plugins": ["pmix", "pmix_v5"], "node_state": "IDLE",
                  "node_gres": "gpu:8", "healthcheck_exists": True}
    f["sources"]["slurm"] = {"status": "ok", "reason": None}
    f["procs"]["daemons"].append("slurmd")
    f["health"]["dcgm_diag"] = audit_health.parse_dcgm_diag(text("dcgmi-diag-r1_h100.json"))
    return f


def h200_node():
    return with_fabric(nvidia_node("nvidia-smi-q-x_h200.xml", "nvidia-smi-nvlink-s_h100.txt"))


def b200_node():
    f = with_fabric(nvidia_node("nvidia-smi-q-x_b200.xml", version_file="proc-driver-nvidia-version_open.txt"),
                    ibstat="ibstat_h100_ndr.txt")
    f["system"].update(os_version="24.04", os_name="Ubuntu 24.04.2 LTS", kernel="6.8.0-60-generic",
                       kernels_installed=["6.8.0-60-generic", "6.8.0-124-generic"])
    return f


def gb200_node():
    f = nvidia_node("nvidia-smi-q-x_gb200.xml", "nvidia-smi-nvlink-s_gb200.txt", "nvidia-smi-nvlink-e_gb200.txt")
    f["system"].update(arch="aarch64", os_version="24.04", kernel="6.8.0-1028-nvidia-64k",
                       kernels_installed=["6.8.0-1028-nvidia-64k"])
    log = audit_logs.parse_kernel_log(text("journalctl-k-short-iso_gb200.txt"))
    log.pop("matched")
    f["kernel_log"] = dict(log, source="journalctl")
    f["procs"]["daemons"].append("nvidia-imex")
    f["nvidia_driver"].update(imex_config=True, imex_channels=True)
    return f


def mi300x_node():
    f = cpu_node()
    gpus = audit_amd.parse_static(text("amd-smi-static_mi300x.json"))
    readings = audit_amd.parse_metric(text("amd-smi-metric_mi300x.json"))
    for g in gpus:
        g.update({k: v for k, v in readings[g["index"]].items() if v is not None})
    f["gpu_amd"] = {"tool": "amd-smi", "gpus": gpus, "amdgpu_loaded": True}
    f["sources"]["amd_smi"] = {"status": "ok", "reason": None}
    f["pci"]["devices"] = {g["pci_bus_id"]: {"kind": "gpu", "vendor": "0x1002", "class": "0x120000"} for g in gpus}
    return f


def write_run(tmp_path, nodes, started="2026-11-20T08:00:00Z"):
    """nodes: {host: facts or (facts, started_at, params)} -> a loaded Run."""
    run_dir = tmp_path / "run"
    hosts = sorted(nodes)
    for host, spec in nodes.items():
        facts, when, params = spec if isinstance(spec, tuple) else (spec, started, {})
        art = Artifact("audit", "r1", host, params=params)
        art.facts.update(copy.deepcopy(facts))
        doc = art.to_dict()
        doc["started_at"] = when
        write_json_atomic(str(run_dir / "artifacts" / host / "audit.json"), doc)
    (run_dir / "assess_run.json").write_text(json.dumps({"hosts": hosts, "id": "r1", "provider": "t"}))
    return load_run(str(run_dir))


def audit_rows(run):
    rubric = grading.load_rubric()
    rubric["checks"] = [c for c in rubric["checks"] if c["id"].startswith("audit.")]
    rubric.pop("consistency", None)
    return grading.grade(run, rubric)


def by(rows):
    return {(r["check_id"], r["host"]): r for r in rows}


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    nodes = {"h100": (h100_node(), "2024-09-26T14:13:55Z", {}), "h200": (h200_node(), "2025-03-12T09:41:07Z", {}),
             "b200": b200_node(), "gb200": (gb200_node(), "2025-10-15T13:30:23Z", {}), "mi300x": mi300x_node(),
             "login": cpu_node()}
    run = write_run(tmp_path_factory.mktemp("fleet"), nodes)
    return run, audit_rows(run)


def test_every_check_for_every_host(fleet):
    run, rows = fleet
    checks = audit_checks()
    assert grade_audit.validate_rubric(checks) == []
    ids = {c["id"] for c in checks}
    assert len(ids) >= 100
    table = by(rows)
    for host in run.hosts:
        assert {cid for cid, h in table if h == host} == ids, host
    assert len(rows) == len(ids) * len(run.hosts)  # one row per check per host, none doubled
    for r in rows:
        assert r["status"] in STATUSES
        if r["status"] in ("skip", "error"):
            assert r["reason"], r
        if r["status"] in ("pass", "warn", "fail"):
            assert r["observed"] and r["expected"], r
    categories = {c["category"] for c in checks}
    assert categories == {"security", "lifecycle", "orchestration", "storage", "networking", "reliability",
                          "monitoring", "compute", "consistency"}


def test_h100_node_findings(fleet):
    _, rows = fleet
    t = by(rows)

    def st(cid):
        return t[(cid, "h100")]["status"]

    drv = t[("audit.sw.driver_security", "h100")]
    assert drv["status"] == "fail" and drv["observed"] == "560.35.03"
    assert "branch 560 is not in the table: end of life" in drv["reason"] and "table 2026-08-01" in drv["expected"]
    assert st("audit.gpu.count") == "pass" and t[("audit.gpu.count", "h100")]["expected"] == "8 (H100-SXM per node)"
    assert st("audit.gpu.remap_pending") == "fail" and "GPU 5" in t[("audit.gpu.remap_pending", "h100")]["observed"]
    assert st("audit.gpu.reset_required") == "fail"
    assert st("audit.gpu.throttle") == "fail" and "hw_slowdown" in t[("audit.gpu.throttle", "h100")]["observed"]
    assert st("audit.gpu.ecc_aggregate") == "warn" and st("audit.gpu.ecc_volatile") == "pass"
    assert st("audit.gpu.nvlink_up") == "fail" and "GPU 3: 17/18 up" in t[("audit.gpu.nvlink_up", "h100")]["observed"]
    assert st("audit.gpu.nvlink_errors") == "fail"  # recoveries on GPU 3
    xid = t[("audit.gpu.xid_history", "h100")]
    # 7-day window before 2024-09-26 14:13: XID 31 of 09-12 is outside it; 79 (fell off the bus) is the worst
    assert xid["status"] == "fail" and "31" not in xid["observed"] and "79 REBOOT" in xid["observed"]
    assert "reboot" in xid["reason"]
    acs = t[("audit.gpu.pcie_acs", "h100")]
    assert acs["status"] == "fail" and "0000:17:00.0" in acs["observed"] and "0000:17:01.0" not in acs["observed"]
    assert st("audit.gpu.fabric_manager") == "pass" and st("audit.gpu.fabricmanager_version") == "pass"
    assert st("audit.gpu.fabric_state") == "pass" and st("audit.gpu.imex") == "skip"
    assert st("audit.sw.runc") == "fail" and "1.1.14" in t[("audit.sw.runc", "h100")]["expected"]
    fw = t[("audit.sw.connectx_firmware", "h100")]
    assert fw["status"] == "fail" and "28.39.2048 on 10" in fw["observed"] and "xx.39.8002" in fw["reason"]
    assert st("audit.net.rdma_rate") == "fail" and "mlx5_3 200G" in t[("audit.net.rdma_rate", "h100")]["observed"]
    assert st("audit.net.rdma_link_state") == "warn"  # only the storage port mlx5_9 is down
    assert st("audit.health.dcgm_diag") == "fail"
    assert st("audit.hw.machine_checks") == "warn" and st("audit.health.oom") == "warn"
    assert st("audit.slurm.topology") == "pass" and st("audit.slurm.healthcheck") == "pass"
    assert st("audit.sec.listen_dcgm") == "pass"
    assert st("audit.sw.minimums_table_age") == "pass"  # table newer than this re-graded 2024 run


def test_h200_b200_gb200_mi300x(fleet):
    _, rows = fleet
    t = by(rows)
    h200 = t[("audit.sw.driver_security", "h200")]
    assert h200["status"] == "fail" and h200["expected"].startswith(">= 570.211.01 on the 570 branch")
    assert t[("audit.gpu.pcie_width", "h200")]["status"] == "fail"
    assert "2:x8" in t[("audit.gpu.pcie_width", "h200")]["observed"]
    assert t[("audit.gpu.count", "b200")]["status"] == "pass"
    assert t[("audit.sw.driver_security", "b200")]["status"] == "pass"
    assert t[("audit.gpu.persistence_mode", "b200")]["status"] == "fail"
    assert "off: GPU 4" in t[("audit.gpu.persistence_mode", "b200")]["observed"]
    assert t[("audit.gpu.open_module", "b200")]["status"] == "pass"
    assert t[("audit.gpu.pcie_gen", "b200")]["status"] == "pass"  # Gen5 hosts cap a Gen6 GPU: expected here
    kern = t[("audit.sw.kernel_latest", "b200")]
    assert kern["status"] == "warn" and "6.8.0-124-generic" in kern["observed"]
    assert t[("audit.sw.kernel_security", "b200")]["status"] == "fail"  # 6.8.0-60 < 6.8.0-124 on Ubuntu 24.04
    assert t[("audit.gpu.count", "gb200")]["status"] == "pass"
    assert t[("audit.gpu.count", "gb200")]["observed"] == "4 GPUs"
    assert t[("audit.gpu.imex", "gb200")]["status"] == "pass"
    assert t[("audit.gpu.fabric_manager", "gb200")]["status"] == "skip"
    assert t[("audit.gpu.fabric_state", "gb200")]["status"] == "pass"
    assert t[("audit.sw.driver_security", "gb200")]["status"] == "pass"
    gbx = t[("audit.gpu.xid_history", "gb200")]
    assert gbx["status"] == "fail" and "74 WORKFLOW_NVLINK" in gbx["observed"]
    assert "149 CONTACT_SUPPORT" in gbx["observed"]
    assert t[("audit.gpu.count", "mi300x")]["status"] == "pass"
    assert t[("audit.gpu.pcie_width", "mi300x")]["status"] == "fail"
    assert "6:x8" in t[("audit.gpu.pcie_width", "mi300x")]["observed"]
    assert t[("audit.gpu.ecc_aggregate", "mi300x")]["status"] == "warn"
    assert t[("audit.gpu.persistence_mode", "mi300x")]["status"] == "skip"
    assert t[("audit.gpu.memory", "mi300x")]["status"] == "pass"
    assert t[("audit.gpu.model_cluster", "mi300x")]["status"] == "warn"  # the fleet mixes models
    assert t[("audit.gpu.count", "login")]["reason"].startswith("not applicable: no GPU on this host")


def test_login_node_security_and_storage(fleet):
    _, rows = fleet
    t = by(rows)
    for cid in ("audit.sec.ssh_password_auth", "audit.sec.ssh_root_login", "audit.sec.uid0",
                "audit.storage.home_shared", "audit.storage.parallel", "audit.storage.shared",
                "audit.health.time_sync", "audit.sec.aslr"):
        assert t[(cid, "login")]["status"] == "pass", cid
    nfs = t[("audit.storage.nfs_options", "login")]
    # the datasets mount is soft but read-only (no corruption risk); its 64 KiB rsize is still slow
    assert nfs["status"] == "warn" and nfs["observed"] == "/mnt/datasets rsize=65536"
    md = t[("audit.sec.metadata", "login")]
    assert md["status"] == "skip" and "audit_probe_metadata is false" in md["reason"]
    assert t[("audit.k8s.gpu_operator", "login")]["reason"].startswith("not applicable: no kubeconfig given")
    assert t[("audit.health.dcgm_diag", "login")]["status"] == "skip"  # no NVIDIA GPU


def test_odd_cases_driver_not_loaded_tools_missing_not_root(tmp_path):
    broken = h200_node()
    broken["gpu_nvidia"] = {"tool": True, "rc": 9,
                            "error": "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."}
    broken["sources"]["nvidia_smi"] = {"status": "error", "reason": "nvidia-smi exit 9: NVIDIA-SMI has failed"}
    broken["nvidia_driver"].update(module_loaded=False, proc_version=None)
    no_tool = h200_node()
    no_tool["gpu_nvidia"] = {"tool": False}
    no_tool["sources"]["nvidia_smi"] = {"status": "missing", "reason": "nvidia-smi not found"}
    user = h200_node()
    user["collector"]["root"] = False
    user["sources"]["sudoers"] = {"status": "not_permitted", "reason": "/etc/sudoers is readable by root only"}
    user["sources"]["lspci"] = {"status": "not_permitted", "reason": "lspci shows '<access denied>' for capabilities"}
    user["pci"]["acs_read"] = False
    user["pci"]["devices"]["0000:19:00.0"]["upstream"] = ["0000:15:01.0", "0000:16:00.0", "0000:17:01.0"]
    user["pci"]["devices"]["0000:19:00.0"]["root"] = "pci0000:15"
    user["pci"]["devices"]["0000:19:00.0"]["kind"] = "nic"
    user["pci"]["devices"]["0000:19:00.0"]["vendor"] = "0x10de"
    gpu = next(b for b, d in user["pci"]["devices"].items() if d["kind"] == "gpu")
    user["pci"]["devices"][gpu].update(root="pci0000:15", upstream=["0000:15:01.0", "0000:16:00.0", "0000:17:00.0"])
    user["security"].pop("sudo")
    image = cpu_node()  # a CPU node built from the GPU image: nvidia-smi installed, no GPU on the bus
    image["gpu_nvidia"] = dict(broken["gpu_nvidia"])
    image["sources"]["nvidia_smi"] = dict(broken["sources"]["nvidia_smi"])
    t = by(audit_rows(write_run(tmp_path, {"broken": broken, "notool": no_tool, "user": user, "image": image,
                                           "eight": (b200_node(), "2026-11-20T08:00:00Z",
                                                     {"expected_gpu_count": "0", "expect_mig": "False"}),
                                           "six": (b200_node(), "2026-11-20T08:00:00Z",
                                                   {"expected_gpu_count": 6})})))
    assert t[("audit.gpu.driver_loaded", "image")]["status"] == "skip"
    assert t[("audit.gpu.count", "eight")]["status"] == "pass"  # "0" from a template means "by model"
    assert t[("audit.gpu.mig", "eight")]["status"] == "pass"
    six = t[("audit.gpu.count", "six")]
    assert six["status"] == "fail" and six["expected"] == "6 (audit_expected_gpu_count)"
    drv = t[("audit.gpu.driver_loaded", "broken")]
    assert drv["status"] == "fail" and drv["observed"].startswith("nvidia-smi exit 9") and "not loaded" in drv["reason"]
    pm = t[("audit.gpu.persistence_mode", "broken")]
    assert pm["status"] == "error" and "nvidia-smi gave no GPU" in pm["reason"]
    assert t[("audit.gpu.driver_loaded", "notool")]["status"] == "fail"
    inv = t[("audit.gpu.inventory", "notool")]
    assert inv["status"] == "error"
    assert "nvidia-smi not found although 8 NVIDIA GPU(s) are on the PCI bus" in inv["reason"]
    sudo = t[("audit.sec.sudo_nopasswd", "user")]
    assert sudo["status"] == "skip" and sudo["reason"].startswith("not permitted: /etc/sudoers")
    acs = t[("audit.gpu.pcie_acs", "user")]
    assert acs["status"] == "skip" and acs["reason"].startswith("not permitted")


@pytest.mark.parametrize("entry,version,status,why", [
    ("nvidia_driver", "570.211.01", "pass", None),
    ("nvidia_driver", "570.133.20", "fail", None),
    ("nvidia_driver", "550.127.05", "fail", "end of life"),  # R550 is between listed branches: end of life
    ("nvidia_driver", "535.309.01", "pass", None),
    ("nvidia_driver", "525.147.05", "fail", "end of life"),
    ("nvidia_driver", "610.57.04", "pass", None),  # newer than every branch of the table
    ("runc", "1.2.8", "pass", None),
    ("runc", "1.2.5", "fail", None),
    ("runc", "1.0.3", "fail", "end of life"),
    ("runc", "1.5.0", "pass", None),
    ("runc", "1.5.0-rc.2", "fail", None),  # the table's 1.5 minimum is 1.5.0-rc.3 (cmax 0.2.1's table)
    ("runc", "1.5.0-rc.3", "pass", None),
    ("runc", "1.4.3-rc.1", "fail", None),  # a release candidate of the minimum is below it
    ("container_toolkit", "1.19.1-rc.1", "fail", None),
    ("docker_engine", "29.7.0~rc.1", "fail", None),  # dpkg's "~" sorts before the release
    ("docker_engine", "5:29.7.0-1~ubuntu.24.04~noble", "pass", None),  # a distro revision is no pre-release
    ("connectx_firmware", "28.39.8002", "pass", None),
    ("connectx_firmware", "28.43.1014", "fail", None),
    ("connectx_firmware", "22.41.1000", "fail", "end of life"),  # train 41 is not in the table
    ("connectx_firmware", "40.47.0102", "pass", None),
    ("docker_engine", "29.7.0", "pass", None),
    ("docker_engine", "28.2.2", "fail", None),
    ("container_toolkit", "1.17.8", "fail", None),
    ("dcgm", "1:4.5.3", "pass", None),  # a Debian epoch is not part of the version
])
def test_minimum_versions_table(entry, version, status, why):
    got, expected, reason = audit_software.judge_version(audit_software.minimums()[entry], version)
    assert got == status, (entry, version, expected, reason)
    if why:
        assert why in reason


def _system_rows(tmp_path, systems, started="2026-09-15T00:00:00Z"):
    """{host: {system fields}} on the B200 node (Ubuntu 24.04) -> {(check, host): row}."""
    nodes = {}
    for host, sysd in systems.items():
        f = b200_node()
        f["system"].update(sysd)
        nodes[host] = (f, started, {})
    return by(audit_rows(write_run(tmp_path, nodes)))


def test_kernel_security_judges_the_generic_minimum_only_on_the_generic_series(tmp_path):
    """Ubuntu's derivative kernels (-nvidia, -aws, -azure, -gcp, -oracle) number their ABI in a series of their own
    from 1000 up: the generic kernel's minimum 6.8.0-124 says nothing of them (never a pass across series)."""
    t = _system_rows(tmp_path, {
        "nvidia": {"kernel": "6.8.0-1008-nvidia", "kernels_installed": ["6.8.0-1008-nvidia"]},
        "aws": {"kernel": "6.8.0-1008-aws", "kernels_installed": ["6.8.0-1008-aws"]},
        "azure": {"kernel": "6.8.0-1007-azure", "kernels_installed": ["6.8.0-1007-azure"]},
        "gb": {"kernel": "6.8.0-1028-nvidia-64k", "kernels_installed": ["6.8.0-1028-nvidia-64k"]},
        "generic": {"kernel": "6.8.0-60-generic", "kernels_installed": ["6.8.0-60-generic"]},
        "fixed": {"kernel": "6.8.0-124-generic", "kernels_installed": ["6.8.0-124-generic"]},
        "lowlat": {"kernel": "6.8.0-60-lowlatency", "kernels_installed": ["6.8.0-60-lowlatency"]},
        "arm64k": {"kernel": "6.8.0-60-generic-64k", "kernels_installed": ["6.8.0-60-generic-64k"]},
    })
    for host, flavour in (("nvidia", "nvidia"), ("aws", "aws"), ("azure", "azure"), ("gb", "nvidia-64k")):
        row = t[("audit.sw.kernel_security", host)]
        assert row["status"] == "skip", (host, row)
        assert "no minimum in the table for the -%s flavour" % flavour in row["reason"]
    assert t[("audit.sw.kernel_security", "generic")]["status"] == "fail"
    assert t[("audit.sw.kernel_security", "fixed")]["status"] == "pass"
    assert t[("audit.sw.kernel_security", "lowlat")]["status"] == "fail"
    assert t[("audit.sw.kernel_security", "arm64k")]["status"] == "fail"


def test_kernel_security_uses_an_entry_of_the_table_for_a_derivative_flavour(tmp_path, monkeypatch):
    table = copy.deepcopy(audit_software.minimums())
    table["kernel"]["ubuntu"]["24.04"]["6.8.0-nvidia"] = "6.8.0-1040"
    monkeypatch.setattr(audit_software, "minimums", lambda: table)
    t = _system_rows(tmp_path, {
        "old": {"kernel": "6.8.0-1008-nvidia", "kernels_installed": ["6.8.0-1008-nvidia"]},
        "new": {"kernel": "6.8.0-1040-nvidia", "kernels_installed": ["6.8.0-1040-nvidia"]},
        "arm": {"kernel": "6.8.0-1028-nvidia-64k", "kernels_installed": ["6.8.0-1028-nvidia-64k"]},
        "aws": {"kernel": "6.8.0-1008-aws", "kernels_installed": ["6.8.0-1008-aws"]},
    })
    old = t[("audit.sw.kernel_security", "old")]
    assert old["status"] == "fail" and old["expected"].startswith(">= 6.8.0-1040")
    assert t[("audit.sw.kernel_security", "new")]["status"] == "pass"
    assert t[("audit.sw.kernel_security", "arm")]["status"] == "fail"  # -nvidia-64k: the -nvidia series
    assert t[("audit.sw.kernel_security", "aws")]["status"] == "skip"


def test_os_support_interim_ubuntu_releases_end_on_their_own_dates(tmp_path):
    """Interim releases (YY.10, odd YY.04) get 9 months (ubuntu.com/about/release-cycle): past their end they fail,
    and one the table does not list is a skip saying why, never a pass as 'newer than the table'. Only an LTS newer
    than the table passes as such."""
    t = _system_rows(tmp_path, {
        "u2410": {"os_version": "24.10"}, "u2504": {"os_version": "25.04"}, "u2510": {"os_version": "25.10"},
        "u2610": {"os_version": "26.10"}, "u2604": {"os_version": "26.04"}, "u2004": {"os_version": "20.04"},
        "centos7": {"os_id": "centos", "os_version": "7"},
    })
    for host, end in (("u2410", "2025-07-10"), ("u2504", "2026-01-15"), ("u2510", "2026-07-31")):
        row = t[("audit.sw.os_support", host)]
        assert row["status"] == "fail", (host, row)
        assert "standard security support ended %s" % end in row["reason"]
    interim = t[("audit.sw.os_support", "u2610")]
    assert interim["status"] == "skip" and "interim release" in interim["reason"] and "26.10" in interim["reason"]
    assert t[("audit.sw.os_support", "u2604")]["status"] == "pass"  # an LTS newer than the table
    assert t[("audit.sw.os_support", "u2004")]["status"] == "fail"
    centos = t[("audit.sw.os_support", "centos7")]
    assert centos["status"] == "fail" and "2024-06-30" in centos["reason"]
    # before its end an interim release passes
    early = _system_rows(tmp_path / "early", {"u2510": {"os_version": "25.10"}}, started="2026-03-01T00:00:00Z")
    assert early[("audit.sw.os_support", "u2510")]["status"] == "pass"


def test_os_support_ubuntu_25_04_ended_on_15_january_2026(tmp_path):
    """Ubuntu 25.04's end is a day (distro-info-data's ubuntu.csv: 2026-01-15), not the month's last day."""
    t = _system_rows(tmp_path, {"u2504": {"os_version": "25.04"}}, started="2026-01-20T00:00:00Z")
    row = t[("audit.sw.os_support", "u2504")]
    assert row["status"] == "fail" and row["reason"] == "standard security support ended 2026-01-15"
    before = _system_rows(tmp_path / "b", {"u2504": {"os_version": "25.04"}}, started="2026-01-15T12:00:00Z")
    assert before[("audit.sw.os_support", "u2504")]["status"] == "pass"


@pytest.mark.parametrize("os_id, version, status, end", [
    # os-release ID and VERSION_ID as these releases write them
    ("almalinux", "9.5", "pass", "2032-05-31"), ("almalinux", "8.10", "pass", "2029-03-01"),
    ("almalinux", "10.0", "pass", "2035-05-31"), ("rocky", "10.0", "pass", "2035-05-31"),
    ("rocky", "9.6", "pass", "2032-05-31"), ("ol", "9.5", "pass", "2032-06-30"), ("ol", "8.10", "pass", "2029-07-31"),
    ("ol", "7.9", "fail", "2024-12-31"), ("sles", "15.6", "fail", "2025-12-31"), ("sles", "15.5", "fail", "2024-12-31"),
    ("sles", "12.5", "fail", "2024-10-31"),
    ("sles", "15.7", "pass", None),  # the last SLES 15 service pack: newer than the table
    ("sles", "15.4", "fail", None),  # an older service pack than the table lists: end of life
])
def test_os_support_rhel_rebuilds_and_sles(tmp_path, os_id, version, status, end):
    t = _system_rows(tmp_path, {"n": {"os_id": os_id, "os_version": version}}, started="2026-11-20T00:00:00Z")
    row = t[("audit.sw.os_support", "n")]
    assert row["status"] == status, row
    if end:
        assert row["expected"] == "security updates until %s" % end
    elif status == "pass":
        assert row["expected"] == "a supported release (newer than the table)"
    else:
        assert row["reason"] == "release not in the table: end of life"


def test_kernel_latest_el_kernels_of_the_next_minor_release_are_the_same_flavour(tmp_path):
    """The dist tag (el9_4, el9_5) is not the flavour of a RHEL/Rocky/Alma kernel: its arch (and +debug, +rt) is."""
    t = _system_rows(tmp_path, {
        "rocky": {"os_id": "rocky", "os_version": "9.4", "kernel": "5.14.0-427.13.1.el9_4.x86_64",
                  "kernels_installed": ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.14.1.el9_5.x86_64",
                                        "0-rescue-3f2a1c9d8e7b4a6f9c0d1e2f3a4b5c6d"]},
        "debug": {"os_id": "rocky", "os_version": "9.5", "kernel": "5.14.0-503.14.1.el9_5.x86_64",
                  "kernels_installed": ["5.14.0-503.14.1.el9_5.x86_64", "5.14.0-503.15.1.el9_5.x86_64+debug"]},
        "booted": {"os_id": "rocky", "os_version": "9.5", "kernel": "5.14.0-503.14.1.el9_5.x86_64",
                   "kernels_installed": ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.14.1.el9_5.x86_64"]},
        "ubuntu": {"kernel": "6.8.0-60-generic", "kernels_installed": ["6.8.0-60-generic", "6.8.0-124-generic",
                                                                       "6.8.0-1040-nvidia"]},
    })
    rocky = t[("audit.sw.kernel_latest", "rocky")]
    assert rocky["status"] == "warn" and "installed 5.14.0-503.14.1.el9_5.x86_64" in rocky["observed"]
    assert t[("audit.sw.kernel_latest", "debug")]["status"] == "pass"  # a newer +debug kernel is another flavour
    assert t[("audit.sw.kernel_latest", "booted")]["status"] == "pass"
    ubuntu = t[("audit.sw.kernel_latest", "ubuntu")]
    assert ubuntu["status"] == "warn" and "installed 6.8.0-124-generic" in ubuntu["observed"]


@pytest.mark.parametrize("low, high", [
    ("1.4.3-rc.1", "1.4.3"), ("29.7.0~rc.1", "29.7.0"), ("1.5.0-rc.2", "1.5.0-rc.3"), ("1.0.0-rc93", "1.0.0"),
    ("2.0.0-alpha.1", "2.0.0-beta"), ("2.0.0-beta.2", "2.0.0-rc.1"), ("1.4.2", "1.4.3-rc.1"), ("1.5.0rc1", "1.5.0"),
    ("1.1.12", "1.1.12-0ubuntu3"), ("6.8.0-60-generic", "6.8.0-124-generic"),
])
def test_vkey_orders_a_pre_release_below_its_release(low, high):
    assert audit_common.vkey(low) < audit_common.vkey(high)
    assert audit_common.vkey(high) > audit_common.vkey(low) and not audit_common.vkey(low) >= audit_common.vkey(high)
    assert max([high, low], key=audit_common.vkey) == high == max([low, high], key=audit_common.vkey)


def _slurm_node(scontrol_text, **slurm):
    """The H100 node with its Slurm config read from a (changed) real `scontrol show config` capture."""
    f = h100_node()
    f["slurm"]["config"] = audit_sched._select(audit_sched.parse_scontrol_config(scontrol_text))
    f["slurm"].update(slurm)
    return f


def test_healthcheck_interval_0_runs_only_when_slurmd_starts(tmp_path):
    """slurm.conf(5): HealthCheckInterval 0 (the default) disables the periodic runs of HealthCheckProgram."""
    zero = text("scontrol-show-config_h100.txt").replace("HealthCheckInterval     = 300 sec",
                                                          "HealthCheckInterval     = 0 sec")
    assert zero != text("scontrol-show-config_h100.txt")
    only_slurm = _slurm_node(zero)
    only_slurm["health"].update(nhc=None, nhc_conf=None)
    with_nhc = _slurm_node(zero)  # NHC installed beside Slurm's
    every = _slurm_node(text("scontrol-show-config_h100.txt"))
    every["health"].update(nhc=None, nhc_conf=None)
    t = by(audit_rows(write_run(tmp_path, {"zero": only_slurm, "nhc": with_nhc, "every": every})))
    hc = t[("audit.slurm.healthcheck", "zero")]
    assert hc["status"] == "warn" and "runs only when slurmd starts: HealthCheckInterval 0" in hc["reason"]
    agent = t[("audit.health.agent", "zero")]
    assert agent["status"] == "warn" and "HealthCheckInterval 0" in agent["reason"]
    assert t[("audit.health.agent", "nhc")]["status"] == "pass"
    assert t[("audit.slurm.healthcheck", "every")]["status"] == "pass"
    assert t[("audit.health.agent", "every")]["status"] == "pass"


def test_constrain_devices_needs_the_task_cgroup_plugin(tmp_path):
    """cgroup.conf ConstrainDevices is applied by task/cgroup: with TaskPlugin=task/affinity jobs see every GPU."""
    real = text("scontrol-show-config_h100.txt")
    affinity = real.replace("TaskPlugin              = task/cgroup,task/affinity",
                            "TaskPlugin              = task/affinity")
    assert affinity != real
    cg = {"CgroupPlugin": "autodetect", "ConstrainCores": "yes", "ConstrainDevices": "yes"}
    t = by(audit_rows(write_run(tmp_path, {"affinity": _slurm_node(affinity, cgroup_conf=cg),
                                           "both": _slurm_node(real, cgroup_conf=cg)})))
    bad = t[("audit.slurm.cgroup_devices", "affinity")]
    assert bad["status"] == "fail" and "task/cgroup" in bad["reason"] and "TaskPlugin=task/affinity" in bad["observed"]
    assert t[("audit.slurm.cgroup_devices", "both")]["status"] == "pass"


def test_local_nvme_does_not_count_the_boot_disk_partitions_as_scratch(tmp_path):
    """The H100 node's real mounts (findmnt-J_h100_node.json: / on md0, /raid on md1) moved onto an NVMe boot disk as
    an Ubuntu 24.04 cloud image lays it out (/ on nvme0n1p1, /boot on p16, /boot/efi on p15), the instance NVMe
    drives unmounted: nothing of the boot disk is scratch."""
    boot = h100_node()
    mounts = [m for m in boot["storage"]["mounts"] if m["target"] not in ("/", "/raid")]
    size = {"size": 2**30, "avail": 2**29, "free": 2**29, "inodes": 65536, "inodes_free": 60000, "readonly": False}
    mounts += [dict(size, source="/dev/nvme0n1p1", target="/", fstype="ext4", options="rw,relatime,discard"),
               dict(size, source="/dev/nvme0n1p16", target="/boot", fstype="ext4", options="rw,relatime"),
               dict(size, source="/dev/nvme0n1p15", target="/boot/efi", fstype="vfat", options="rw,relatime"),
               dict(size, source="/dev/nvme0n1p2", target="/var/log", fstype="ext4", options="rw,relatime")]
    boot["storage"]["mounts"] = sorted(mounts, key=lambda m: m["target"])
    boot["storage"]["nvme"] = {"nvme%dn1" % i: {"size_bytes": 3840755982336, "model": "Amazon EC2 NVMe Instance "
                                                "Storage"} for i in range(1, 9)}
    boot["storage"]["nvme"]["nvme0n1"] = {"size_bytes": 512 * 2**30, "model": "Amazon Elastic Block Store"}
    scratch = copy.deepcopy(boot)
    scratch["storage"]["mounts"].append(dict(size, source="/dev/nvme1n1", target="/scratch", fstype="xfs",
                                             options="rw,noatime"))
    raid = h100_node()  # the fixture as captured: /raid on md1
    t = by(audit_rows(write_run(tmp_path, {"boot": boot, "scratch": scratch, "raid": raid})))
    row = t[("audit.storage.local_nvme", "boot")]
    assert (row["status"], row["observed"]) == ("warn", "9 NVMe devices, none mounted as scratch")
    found = t[("audit.storage.local_nvme", "scratch")]
    assert found["status"] == "pass" and found["observed"].startswith("/scratch (/dev/nvme1n1")
    assert "/boot" not in found["observed"]
    assert t[("audit.storage.local_nvme", "raid")]["status"] == "pass"


# ------------------------------------------------------------------------ NVMe scratch behind LVM (dm) or md RAID

# PCI paths of the NVMe controllers in the fake sysfs, as the kernel names them (one root port per drive)
_NVME_PCI = {i: "pci0000:00/0000:00:%02x.1/0000:%02x:00.0" % (1 + i, 1 + i) for i in range(6)}


def fake_sysfs_block(tmp_path, dm=(), md=(), partitions=(), disks=()):
    """A /sys laid out as the kernel lays it out: /sys/block/<dev> are links into /sys/devices (NVMe disks below their
    PCI controller, ...nvme/nvmeN/nvmeNn1; SATA ones below ata; dm-N and mdN in devices/virtual/block), a partition is
    a directory of its disk with a `partition` file (nvme0n1/nvme0n1p1), and a dm or md device's slaves/ holds
    relative links to what it is built on, named as the partition or disk (dm-0/slaves/nvme0n1p1 ->
    ../../../../pci0000:00/.../nvme/nvme0/nvme0n1/nvme0n1p1). dm: (name, dm name, dm uuid, [slaves]); md: (name,
    level, [slaves]). Returns the /sys/block path."""
    sys_root = tmp_path / "sys"
    block, devices = sys_root / "block", sys_root / "devices"
    block.mkdir(parents=True)
    where = {}  # device name -> its directory under /sys/devices (relative)
    for disk in disks:
        if disk.startswith("nvme"):
            ctrl = int(re.match(r"nvme(\d+)", disk).group(1))
            rel = "%s/nvme/nvme%d/%s" % (_NVME_PCI[ctrl], ctrl, disk)
            (devices / rel.rsplit("/", 1)[0] / "model").parent.mkdir(parents=True, exist_ok=True)
            (devices / rel.rsplit("/", 1)[0] / "model").write_text("SAMSUNG MZWLR7T6HBLA-00007                \n")
        else:  # sda: SCSI disk on an AHCI port
            rel = "pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/%s" % disk
        (devices / rel).mkdir(parents=True)
        (devices / rel / "size").write_text("7501476528\n")
        (devices / rel / "dev").write_text("259:%d\n" % len(where))
        if disk.startswith("nvme"):
            (devices / rel / "device").symlink_to("../../nvme%d" % ctrl)
        (block / disk).symlink_to("../devices/" + rel)
        where[disk] = rel
    for part in partitions:
        disk = re.match(r"^(nvme\d+n\d+|sd[a-z]+)", part).group(1)
        rel = where[disk] + "/" + part
        (devices / rel).mkdir()
        (devices / rel / "partition").write_text(re.search(r"(\d+)$", part).group(1) + "\n")
        where[part] = rel
    virtual = []
    for name, dm_name, uuid, slaves in dm:
        rel = "virtual/block/" + name
        (devices / rel / "dm").mkdir(parents=True)
        (devices / rel / "dm" / "name").write_text(dm_name + "\n")
        (devices / rel / "dm" / "uuid").write_text(uuid + "\n")
        virtual.append((name, rel, slaves))
    for name, level, slaves in md:
        rel = "virtual/block/" + name
        (devices / rel / "md").mkdir(parents=True)
        (devices / rel / "md" / "level").write_text(level + "\n")
        virtual.append((name, rel, slaves))
    for name, rel, _ in virtual:
        (block / name).symlink_to("../devices/" + rel)
        where[name] = rel
    for _, rel, slaves in virtual:
        (devices / rel / "slaves").mkdir()
        for slave in slaves:  # from devices/virtual/block/<name>/slaves/ up to devices/
            (devices / rel / "slaves" / slave).symlink_to("../../../../" + where[slave])
    return str(block)


LVM_UUID = "LVM-7Hn2Qf0cXbYtV1kR3mW9sLd4aPz8eJuG%s"


def _stacked_tree(tmp_path):
    """LVM over NVMe partitions, md RAID 0 over whole NVMe drives with LVM on top, LVM over a SATA and an NVMe disk,
    md RAID 1 over SATA partitions, and the boot NVMe disk's LVM (RHEL's default layout: rhel-root, rhel-home)."""
    return fake_sysfs_block(
        tmp_path, disks=["nvme0n1", "nvme1n1", "nvme2n1", "nvme3n1", "nvme4n1", "nvme5n1", "sda", "sdb"],
        partitions=["nvme0n1p1", "nvme0n1p2", "nvme0n1p3", "nvme1n1p1", "nvme2n1p1", "sda1", "sdb1"],
        md=[("md127", "raid0", ["nvme3n1", "nvme4n1"]), ("md1", "raid1", ["sda1", "sdb1"])],
        dm=[("dm-0", "rhel-root", LVM_UUID % "root", ["nvme0n1p3"]),
            ("dm-1", "rhel-home", LVM_UUID % "home", ["nvme0n1p3"]),
            ("dm-2", "vg_scratch-lv_scratch", LVM_UUID % "lv01", ["nvme1n1p1", "nvme2n1p1"]),
            ("dm-3", "vg_raid-data", LVM_UUID % "data", ["md127"]),
            ("dm-4", "vg_mixed-scratch", LVM_UUID % "mix0", ["sda", "nvme5n1"])])


def test_stacked_devices_follow_slaves_down_to_the_disks(tmp_path):
    block = _stacked_tree(tmp_path)
    got = audit_storage.stacked_devices(block)
    assert got["dm-2"] == {"slaves": ["nvme1n1p1", "nvme2n1p1"], "disks": ["nvme1n1", "nvme2n1"],
                           "dm_name": "vg_scratch-lv_scratch", "dm_uuid_prefix": "LVM"}
    assert got["md127"] == {"slaves": ["nvme3n1", "nvme4n1"], "disks": ["nvme3n1", "nvme4n1"], "md_level": "raid0"}
    assert got["dm-3"]["slaves"] == ["md127"] and got["dm-3"]["disks"] == ["nvme3n1", "nvme4n1"]  # LVM on md
    assert got["dm-4"]["disks"] == ["nvme5n1", "sda"]
    assert got["md1"]["disks"] == ["sda", "sdb"] and got["md1"]["md_level"] == "raid1"
    assert got["dm-0"]["disks"] == got["dm-1"]["disks"] == ["nvme0n1"]
    assert set(got) == {"dm-0", "dm-1", "dm-2", "dm-3", "dm-4", "md127", "md1"}
    # the NVMe disks are still listed as before (partitions are not /sys/block entries)
    assert sorted(audit_storage.nvme_devices(block)) == ["nvme%dn1" % i for i in range(6)]
    assert audit_storage.nvme_devices(block)["nvme1n1"]["model"] == "SAMSUNG MZWLR7T6HBLA-00007"
    assert audit_storage.stacked_devices(str(tmp_path / "absent")) == {}


def test_local_nvme_behind_lvm_or_md(tmp_path):
    """Scratch on /dev/mapper/<vg>-<lv> or /dev/mdN over NVMe drives is NVMe scratch (the probe's sysfs slaves, followed
    down to the disks); partly on NVMe it is named with how many of its disks are; on SATA it is not NVMe; the boot
    disk's LVM (/ on rhel-root, /home on rhel-home) is the system, never scratch."""
    stacked = audit_storage.stacked_devices(_stacked_tree(tmp_path))
    size = {"size": 7.68e12, "avail": 7e12, "free": 7e12, "inodes": 10**8, "inodes_free": 9 * 10**7, "readonly": False}

    def node(*mounts):
        f = h100_node()
        rest = [m for m in f["storage"]["mounts"] if m["target"] not in ("/", "/raid")]
        base = [dict(size, source="/dev/mapper/rhel-root", target="/", fstype="xfs", options="rw,relatime"),
                dict(size, source="/dev/mapper/rhel-home", target="/home", fstype="xfs", options="rw,relatime"),
                dict(size, source="/dev/nvme0n1p2", target="/boot", fstype="xfs", options="rw,relatime"),
                dict(size, source="/dev/nvme0n1p1", target="/boot/efi", fstype="vfat", options="rw,relatime")]
        f["storage"]["mounts"] = sorted(rest + base + [dict(size, source=s, target=t, fstype="xfs",
                                                             options="rw,noatime") for s, t in mounts],
                                        key=lambda m: m["target"])
        f["storage"]["nvme"] = {"nvme%dn1" % i: {"size_bytes": 7681501126656, "model": "SAMSUNG MZWLR7T6HBLA-00007"}
                                for i in range(6)}
        f["storage"]["stacked"] = stacked
        return f

    t = by(audit_rows(write_run(tmp_path / "run", {
        "lvm": node(("/dev/mapper/vg_scratch-lv_scratch", "/scratch")),
        "md": node(("/dev/md127", "/raid")),
        "lvm_on_md": node(("/dev/mapper/vg_raid-data", "/data")),
        "mixed": node(("/dev/mapper/vg_mixed-scratch", "/scratch")),
        "sata_md": node(("/dev/md1", "/scratch")),
        "boot_only": node(),
    })))
    row = t[("audit.storage.local_nvme", "lvm")]
    assert row["status"] == "pass", row
    assert row["observed"].startswith("/scratch (/dev/mapper/vg_scratch-lv_scratch: dm-2 LVM over nvme1n1, nvme2n1")
    md = t[("audit.storage.local_nvme", "md")]
    assert md["status"] == "pass" and "md127 raid0 over nvme3n1, nvme4n1" in md["observed"]
    on_md = t[("audit.storage.local_nvme", "lvm_on_md")]
    assert on_md["status"] == "pass" and "dm-3 LVM over nvme3n1, nvme4n1" in on_md["observed"]
    mixed = t[("audit.storage.local_nvme", "mixed")]
    assert mixed["status"] == "warn" and "1 of 2 devices NVMe (not NVMe: sda)" in mixed["observed"]
    assert "only partly on NVMe" in mixed["reason"]
    sata = t[("audit.storage.local_nvme", "sata_md")]
    assert sata["status"] == "warn"
    assert sata["observed"] == "6 NVMe devices, none mounted as scratch; not on NVMe: /scratch (/dev/md1: md1 raid1 " \
                               "over sda, sdb, 7.7 TB)"
    boot = t[("audit.storage.local_nvme", "boot_only")]
    assert (boot["status"], boot["observed"]) == ("warn", "6 NVMe devices, none mounted as scratch")


def audit_checks():
    return [c for c in grading.load_rubric()["checks"] if c["id"].startswith("audit.")]


def test_every_rule_is_the_function_of_its_name_in_the_module_of_its_area():
    for c in audit_checks():
        fn = grade_audit.resolve(c)
        assert fn is getattr(grade_audit.AREAS[c["id"].split(".")[1]], c["rule"]) and fn.audit_kind == c["kind"]
    # One name per check: but for the consistency view (one rule, many facts), the rule is the id's last part.
    assert [c["id"] for c in audit_checks() if c["id"].split(".")[1] != "consistency"
            and c["rule"] != c["id"].split(".")[-1]] == []


def test_a_rule_that_does_not_resolve_names_the_check_and_the_rule():
    check = next(c for c in audit_checks() if c["id"] == "audit.sw.cuda_toolkit")
    with pytest.raises(ValueError, match=r"check audit\.sw\.cuda_toolkit: rule 'cuda_tookit' is no rule of kind audit "
                                         r"in reports\.phases\.audit\.software"):
        grade_audit.resolve(dict(check, rule="cuda_tookit"))
    with pytest.raises(ValueError, match="'judge_version' is no rule"):  # a helper of the area is not a rule
        grade_audit.resolve(dict(check, rule="judge_version"))
    with pytest.raises(ValueError, match="'same_value' is no rule of kind audit in"):  # a rule of the other kind
        grade_audit.resolve(dict(check, id="audit.consistency.x", rule="same_value"))
    assert grade_audit.validate_rubric([dict(check, rule="cuda_tookit", minimum="cuda")]) == [
        "check audit.sw.cuda_toolkit: rule 'cuda_tookit' is no rule of kind audit in reports.phases.audit.software",
        "audit.sw.cuda_toolkit: minimum 'cuda' is not an entry of minimum_versions.yml"]


def test_the_rubric_entry_names_the_minimum_that_applies(fleet):
    run, rows = fleet
    check = next(c for c in audit_checks() if c["id"] == "audit.sw.cuda_toolkit")
    assert check["minimum"] == "cuda_toolkit"
    [row] = grade_audit.grade_host(check, run, "h100")
    assert (row["status"], row["observed"]) == ("pass", "13.1.0") and row["expected"].startswith(">= 13.1 (")
    [row] = grade_audit.grade_host(dict(check, minimum="docker_engine"), run, "h100")  # same node, other table entry
    assert (row["status"], row["observed"]) == ("fail", "13.1.0") and row["expected"].startswith(">= 29.7.0 (")
    [row] = grade_audit.grade_host({k: v for k, v in check.items() if k != "minimum"}, run, "h100")
    assert row["status"] == "error"
    assert "check audit.sw.cuda_toolkit has no `minimum:`" in row["reason"]


def test_nic_role_thresholds_for_the_section_come_from_the_rubric():
    check = next(c for c in audit_checks() if c["id"] == "audit.net.nic_inventory")
    assert audit_network.nic_role_thresholds() == {"compute_roce_min_gbps": check["compute_roce_min_gbps"],
                                                   "storage_min_gbps": check["storage_min_gbps"]} == {
        "compute_roce_min_gbps": 400, "storage_min_gbps": 25}


def test_consistency_names_the_odd_host(tmp_path):
    nodes = {"n%d" % i: cpu_node() for i in range(1, 5)}
    nodes["n3"]["nccl"]["files"]["/run/clustermax-test/nccl.conf"] = {"NCCL_IB_HCA": "mlx5_0", "NCCL_DEBUG": "INFO"}
    nodes["n3"]["nccl"]["searched"].append("/run/clustermax-test/nccl.conf")
    for n in nodes.values():
        if "/run/clustermax-test/nccl.conf" not in n["nccl"]["searched"]:
            n["nccl"]["searched"].append("/run/clustermax-test/nccl.conf")
    nodes["n2"]["security"]["sshd"]["passwordauthentication"] = "yes"
    nodes["n4"]["system"]["uptime_s"] = 12.0  # a live reading: never drift
    for i, n in enumerate(nodes.values()):
        n["security"]["sshd"]["listenaddress"] = "10.0.0.%d:22" % (11 + i)  # each host's own address: never drift
        n["net"]["interfaces"]["eno1"]["addresses"] = ["10.0.0.%d/24" % (11 + i)]
    t = by(audit_rows(write_run(tmp_path, nodes)))
    nccl = t[("audit.consistency.nccl", "n3")]
    assert nccl["status"] == "warn" and "differs from 3 of 4 hosts" in nccl["reason"]
    assert "NCCL_IB_HCA" in nccl["reason"]
    assert [t[("audit.consistency.nccl", h)]["status"] for h in ("n1", "n2", "n4")] == ["pass"] * 3
    sshd = t[("audit.consistency.sshd", "n2")]
    assert sshd["status"] == "warn" and "passwordauthentication" in sshd["reason"]
    assert t[("audit.sec.ssh_password_auth", "n2")]["status"] == "fail"
    every = {h: t[("audit.consistency.all_facts", h)] for h in nodes}
    assert every["n1"]["status"] == "pass" and every["n4"]["status"] == "pass"
    assert every["n3"]["status"] == "warn"
    assert "nccl.files./run/clustermax-test/nccl.conf.NCCL_IB_HCA" in every["n3"]["observed"]
    assert every["n2"]["status"] == "warn" and "security.sshd.passwordauthentication" in every["n2"]["observed"]
    one = by(audit_rows(write_run(tmp_path / "one", {"solo": cpu_node()})))
    assert one[("audit.consistency.all_facts", "solo")]["status"] == "skip"
    assert "nothing to compare" in one[("audit.consistency.nccl", "solo")]["reason"]


def test_xid_table_and_window(tmp_path):
    table = audit_common.data("xid")
    assert table["xids"][79] == "REBOOT" and table["xids"][63] == "IGNORE_UNTIL_RESET"
    assert {a["status"] for a in table["actions"].values()} == {"pass", "warn", "fail"}
    node = h100_node()
    node["kernel_log"]["xids"] = [{"time": "2024-09-25T10:00:00Z", "pci": "0000:18:00", "xid": 63, "text": "remap"},
                                  {"time": "2024-09-10T10:00:00Z", "pci": "0000:18:00", "xid": 79, "text": "old"}]
    t = by(audit_rows(write_run(tmp_path, {"h": (node, "2024-09-26T14:13:55Z", {})})))
    xid = t[("audit.gpu.xid_history", "h")]
    assert xid["status"] == "pass" and xid["observed"] == "XID 63 IGNORE_UNTIL_RESET x1"


KMSG = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"


def _iso_log(lines, source="journalctl"):
    """Kernel-log facts from messages logged on 2024-09-25 (inside the 7-day window of a run on 2024-09-26)."""
    text_ = "".join("2024-09-25T10:00:%02d+0000 node1 kernel: %s\n" % (i, line) if not line[:1].isspace()
                    else line + "\n" for i, line in enumerate(lines))
    log = audit_logs.parse_kernel_log(text_)
    log.pop("matched")
    return dict(log, source=source)


def _dmesg(name):
    """The messages of a dmesg capture of tests/fixtures/kmsg, timestamps dropped, continuation lines kept."""
    return [line.split("] ", 1)[1] if line.startswith("[") else line
            for line in (KMSG / name).read_text().splitlines()]


def _history(tmp_path, kernel_log):
    node = h200_node()
    node["kernel_log"] = kernel_log
    t = by(audit_rows(write_run(tmp_path, {"h": (node, "2024-09-26T14:13:55Z", {})})))
    return t[("audit.gpu.xid_history", "h")], t[("audit.hw.pcie_aer_log", "h")]


def test_history_fails_on_a_fatal_sxid_and_warns_on_a_non_fatal_one(tmp_path):
    fatal, _ = _history(tmp_path / "fatal", _iso_log(_dmesg("dmesg_sxid20034_record.txt")))
    assert fatal["status"] == "fail" and fatal["observed"] == "SXID 20034 fatal x1"
    assert fatal["reason"].startswith("SXID 20034 (nvidia-nvswitch0, nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): "
                                      "20034, Fatal, Link 30 LTSSM Fault Up) on 0000:a9:00.0: fatal NVSwitch error")
    records = [line.split(";", 1)[1] for line in (KMSG / "burnin_kmsg_records.txt").read_text().splitlines()[3:6]]
    nonfatal, _ = _history(tmp_path / "nonfatal", _iso_log(records))  # SXID 12028: Non-fatal, Severity 0, Data
    assert nonfatal["status"] == "warn" and nonfatal["observed"] == "SXID 12028 non-fatal x1"
    assert "non-fatal NVSwitch error" in nonfatal["reason"]


def test_history_fails_on_a_gpu_that_failed_to_initialise_or_fell_off_the_bus_without_an_xid(tmp_path):
    init, _ = _history(tmp_path / "init", _iso_log(_dmesg("dmesg_rminitadapter_failed.txt")))
    assert init["status"] == "fail" and init["observed"] == "GPU init failed x1"
    assert init["reason"] == ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863) on 0000:01:00.0: a "
                              "GPU failed to initialise (RmInitAdapter failed): drain the node and reset the GPU "
                              "(reboot); replace it if it persists")
    journal = [line.split("kernel: ", 1)[1] if "kernel: " in line else line
               for line in (KMSG / "journalctl_fallen_off_bus_no_xid.txt").read_text().splitlines()]
    lost, _ = _history(tmp_path / "lost", _iso_log(journal))
    assert lost["status"] == "fail" and lost["observed"] == "GPU fell off the bus x1"
    assert "drain and reboot the node" in lost["reason"]


def test_fatal_aer_in_the_kernel_log_fails_and_an_unreadable_xid_line_is_an_error(tmp_path):
    lines = [line.split("kernel: ", 1)[1] for line in
             (KMSG / "journalctl_aer_correctable_uncorrectable_fatal.txt").read_text().splitlines()]
    _, aer = _history(tmp_path / "aer", _iso_log(lines))
    assert aer["status"] == "fail" and aer["observed"].startswith("2 uncorrected PCIe errors in 7 days (2 fatal, ")
    _, corrected = _history(tmp_path / "corrected", _iso_log(lines[:4]))
    assert corrected["status"] == "pass" and corrected["observed"] == "0 uncorrected PCIe errors in 7 days"
    bad, _ = _history(tmp_path / "bad", _iso_log(["NVRM: Xid (PCI:0000:18:00) 79 GPU has fallen off the bus."]))
    assert bad["status"] == "error"
    assert bad["reason"] == ("journalctl: a kernel-log line names an Xid or SXid but could not be read: NVRM: Xid "
                             "(PCI:0000:18:00) 79 GPU has fallen off the bus.")
    # a fatal record is not hidden behind the unreadable line
    both, _ = _history(tmp_path / "both", _iso_log(_dmesg("dmesg_sxid20034_record.txt")
                                                   + ["NVRM: Xid (PCI:0000:18:00) 79 GPU has fallen off the bus."]))
    assert both["status"] == "fail" and both["observed"] == "SXID 20034 fatal x1"


def _log_checks(tmp_path, kernel_log, started):
    node = cpu_node()
    node["kernel_log"] = kernel_log
    t = by(audit_rows(write_run(tmp_path, {"h": (node, started, {})})))
    return {cid: t[(cid, "h")] for cid in ("audit.hw.machine_checks", "audit.health.hung_tasks",
                                           "audit.health.oom")}


def test_kernel_log_events_of_the_window_are_not_lost_behind_old_noise(tmp_path):
    # dmesg --time-format iso (the fallback when the journal has no kernel lines): the ring buffer since boot, 60
    # machine-check notices and 55 hung-task reports weeks ago, 2 machine checks and a hung task in the last day
    log = audit_logs.parse_kernel_log(text("dmesg-iso_old_noise_recent_events.txt"))
    log.pop("matched")
    rows = _log_checks(tmp_path / "new", dict(log, source="dmesg"), "2026-11-20T08:00:00Z")
    mce, hung = rows["audit.hw.machine_checks"], rows["audit.health.hung_tasks"]
    assert (mce["status"], mce["observed"]) == ("warn", "2 machine-check events in 7 days (last 2026-11-19T23:04:02Z)")
    assert (hung["status"], hung["observed"]) == ("warn", "1 hung-task reports in 7 days (last 2026-11-20T01:37:55Z)")
    assert rows["audit.health.oom"]["status"] == "pass"
    # an artifact of a probe that kept the first 50 times: the window is not in them, and it cannot say "none"
    old = dict(log, events=dict(log["events"]), source="dmesg")
    del old["events_newest"]
    old["events"]["mce"] = [t for t, message, _ in audit_logs.messages(text("dmesg-iso_old_noise_recent_events.txt"))
                            if audit_logs.PATTERNS["mce"].search(message)][:50]
    rows = _log_checks(tmp_path / "old", old, "2026-11-20T08:00:00Z")
    skipped = rows["audit.hw.machine_checks"]
    assert skipped["status"] == "skip" and skipped["reason"].startswith(
        "not read: the kernel log (dmesg) has 62 such events and this run's probe kept the times of only the first 50")


def test_kernel_log_window_with_more_events_than_kept_says_at_least(tmp_path):
    # journalctl -k -o short-iso: 55 machine-check notices on the day before the run, all in the window
    log = _iso_log(["mce: [Hardware Error]: Machine check events logged"] * 55)
    assert log["counts"]["mce"] == 55 and len(log["events"]["mce"]) == 50
    mce = _log_checks(tmp_path, log, "2024-09-26T14:13:55Z")["audit.hw.machine_checks"]
    assert (mce["status"], mce["observed"]) == (
        "warn", "at least 50 machine-check events in 7 days (last 2024-09-25T10:00:54Z)")


def storage_from_findmnt(name, fstab=""):
    """The storage section as probes/audit/storage.py collect() makes it from a `findmnt -J` capture (statvfs
    readings as cpu_node() has them)."""
    mounts = audit_storage.parse_findmnt(text(name))
    by_target = {}
    for m in mounts:
        if m["fstype"] not in audit_storage.PSEUDO and not m["target"].startswith(("/proc", "/sys")):
            by_target[m["target"]] = dict(m, size=10 * 2**40, avail=4 * 2**40, free=4 * 2**40, inodes=10**8,
                                          inodes_free=9 * 10**7, readonly=False)
    home = audit_storage.mount_of("/home", mounts)
    return {"mounts": [by_target[t] for t in sorted(by_target)], "home_mount": home["target"],
            "home_fstype": home["fstype"], "user_home": "/root", "user_home_mount": "/", "nvme": {},
            "fstab": audit_storage.parse_fstab(fstab), "mount_targets": sorted({m["target"] for m in mounts})}


def _home_shared(tmp_path, storage):
    node = cpu_node()
    node["storage"] = storage
    return by(audit_rows(write_run(tmp_path, {"h": node})))[("audit.storage.home_shared", "h")]


def test_home_on_a_systemd_automount_is_judged_by_the_nfs_mount_on_it(tmp_path):
    # findmnt -J (util-linux) captures of the H100 node with /home on a systemd automount of NFS
    fstab = "10.40.0.20:/export/home /home nfs4 rw,hard,x-systemd.automount,_netdev 0 0\n"
    used = _home_shared(tmp_path / "used", storage_from_findmnt("findmnt-J_home_systemd_automount.json", fstab))
    assert (used["status"], used["observed"]) == ("pass", "/home on /home (nfs4)")
    # not used since boot: nothing on the automount point, so the check cannot tell (never "not shared")
    idle = _home_shared(tmp_path / "idle", storage_from_findmnt("findmnt-J_home_automount_not_triggered.json", fstab))
    assert idle["status"] == "skip"
    assert idle["reason"] == ("not read: /home is an automount point (autofs) with nothing mounted on it when the "
                              "audit ran, so what it mounts cannot be told from the mounts; /etc/fstab: "
                              "10.40.0.20:/export/home nfs4")
    # an indirect map (autofs daemon, /etc/auto.home): each home is an NFS mount below /home
    indirect = _home_shared(tmp_path / "indirect", storage_from_findmnt("findmnt-J_home_autofs_indirect_map.json"))
    assert (indirect["status"], indirect["observed"]) == (
        "pass", "/home an automount (autofs) with /home/alice (nfs4) mounted in it")
    # an artifact of a probe that named the automount point: its mounts list has the NFS mount on /home
    old = storage_from_findmnt("findmnt-J_home_systemd_automount.json", fstab)
    old["home_fstype"] = "autofs"
    assert _home_shared(tmp_path / "old", old)["status"] == "pass"
    # /home on the root filesystem stays a warning
    local = storage_from_findmnt("findmnt-J_home_systemd_automount.json")
    local.update(home_mount="/", home_fstype="ext4")
    assert _home_shared(tmp_path / "local", local)["status"] == "warn"


def roce_node(storage_board="MT_0000000834", placed=False):
    """The H200 node with its fabric as RoCE: mlx5_0-7 the eight rails, mlx5_8/9 the storage ports (mlx5_3 trained
    at 200G and mlx5_9 down, as ibstat_h100_ndr.txt has them), each read as sysfs gives a RoCE port (link layer
    Ethernet, no LID or SM, RoCE v2 GIDs). Rails: the single-port ConnectX-7, board id MT_0000000838 (as
    ibv_devinfo_h100_ndr.txt has it); storage ports: the dual-port ConnectX-7, MT_0000000834 (the same chip,
    MT4129), as a RoCE H-series node's ibv_devinfo lists them, or storage_board. placed: the PCIe tree of an HGX
    baseboard as probes/audit/pci.py records it (each rail below its GPU's switch, as lspci shows GPU 0 and mlx5_0
    in h100_node(); the storage ports on CPU root ports); else none for the NICs, as a VM shows it."""
    gpu_buses = [int(g["pci_bus_id"][-7:-5], 16) for g in
                 audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_h200.xml"))["gpus"]]
    pcis = ["0000:%02x:00.0" % (b + 1) for b in gpu_buses] + ["0000:2a:00.0", "0000:aa:00.0"]
    f = with_fabric(nvidia_node("nvidia-smi-q-x_h200.xml", "nvidia-smi-nvlink-s_h100.txt"), pcis=pcis)
    for i, (dev, info) in enumerate(sorted(f["net"]["rdma"].items(), key=lambda kv: int(kv[0].split("_")[1]))):
        info["board_id"] = "MT_0000000838" if i < 8 else storage_board
        port = info["ports"]["1"]
        if port["link_layer"] == "InfiniBand":
            port.update(link_layer="Ethernet", lid="0", sm_lid="0", pkeys=[],
                        gids={"3": {"type": "RoCE v2", "ipv4": True}, "1": {"type": "IB/RoCE v1", "ipv4": False}})
            iface = f["net"]["interfaces"].pop(info["netdevs"][0])
            info["netdevs"] = ["ens%df0np0" % i]
            f["net"]["interfaces"][info["netdevs"][0]] = dict(iface, type=1, mtu=9000)
            f["ib_tools"]["ibstat"][dev]["ports"]["1"]["link_layer"] = "Ethernet"
            f["ib_tools"]["ibv_devinfo"][dev]["ports"]["1"]["link_layer"] = "Ethernet"
    if placed:
        devices = f["pci"]["devices"]
        for bus, nic in zip(gpu_buses, pcis):
            chain = ["0000:%02x:01.0" % (bus - 3), "0000:%02x:00.0" % (bus - 2)]
            devices["0000:%02x:00.0" % bus].update(root="pci0000:%02x" % (bus - 3),
                                                   upstream=chain + ["0000:%02x:00.0" % (bus - 1)])
            devices[nic] = {"kind": "nic", "vendor": "0x15b3", "class": "0x020000", "root": "pci0000:%02x" % (bus - 3),
                            "upstream": chain + ["0000:%02x:01.0" % (bus - 1)], "link_width": 16,
                            "link_width_max": 16}
        for nic in pcis[8:]:
            bus = int(nic[5:7], 16)
            devices[nic] = {"kind": "nic", "vendor": "0x15b3", "class": "0x020000", "root": "pci0000:%02x" % (bus - 1),
                            "upstream": ["0000:%02x:01.0" % (bus - 1)], "link_width": 16, "link_width_max": 16}
    return f


def _rail_down(f, dev="mlx5_3"):
    """A rail whose link went down: sysfs state DOWN, and the rate a down mlx5 port reports."""
    f["net"]["rdma"][dev]["ports"]["1"].update(state="DOWN", phys_state="Polling", rate="40 Gb/sec (4X QDR)",
                                               rate_gbps=40.0)
    return f


def _fabric_rows(tmp_path, nodes):
    t = by(audit_rows(write_run(tmp_path, nodes)))
    return {h: {cid: (t[(cid, h)]["status"], t[(cid, h)]["observed"]) for cid in (
        "audit.net.rdma_rate", "audit.net.rdma_link_state", "audit.net.nic_inventory",
        "audit.net.compute_nic_ratio")} for h in nodes}


def test_a_roce_rail_that_trained_low_or_went_down_fails_as_an_infiniband_one(tmp_path):
    rows = _fabric_rows(tmp_path, {"ib": h200_node(), "roce": roce_node(), "ib_down": _rail_down(h200_node()),
                                   "roce_down": _rail_down(roce_node()), "roce_placed": roce_node(placed=True)})
    ib, roce = rows["ib"], rows["roce"]
    assert ib["audit.net.rdma_rate"] == ("fail", "400G x7, 200G x1 (slow: mlx5_3 200G)")
    assert roce["audit.net.rdma_rate"] == ib["audit.net.rdma_rate"]
    assert roce["audit.net.rdma_link_state"] == ib["audit.net.rdma_link_state"] == (
        "warn", "9/10 ports active (down: mlx5_9/1 DOWN)")  # the storage port
    assert rows["roce_placed"]["audit.net.rdma_rate"] == ib["audit.net.rdma_rate"]
    down = rows["ib_down"]
    assert down["audit.net.rdma_link_state"] == ("fail", "8/10 ports active (down: mlx5_3/1 DOWN)")
    assert rows["roce_down"]["audit.net.rdma_link_state"] == down["audit.net.rdma_link_state"]
    assert rows["roce_down"]["audit.net.rdma_rate"] == down["audit.net.rdma_rate"] == ("pass", "400G x7")
    # the storage ports (another card) stay storage
    assert "storage: mlx5_8 200G, mlx5_9 10G" in roce["audit.net.nic_inventory"][1]


def test_storage_ports_of_the_rails_own_card_are_rails_only_where_that_can_be_told(tmp_path):
    same = "MT_0000000838"  # all ten the single-port ConnectX-7, as ibv_devinfo_h100_ndr.txt has them
    healthy = roce_node(same)
    healthy["net"]["rdma"]["mlx5_3"]["ports"]["1"].update(rate="400 Gb/sec (4X NDR)", rate_gbps=400.0)
    cx6 = roce_node("MT_0000000359")  # a 100G frontend-class ConnectX-6 Dx (MT4125) for storage: another part
    for dev in ("mlx5_8", "mlx5_9"):
        cx6["net"]["rdma"][dev]["hca_type"] = "MT4125"
        cx6["net"]["rdma"][dev]["ports"]["1"].update(rate="100 Gb/sec (2X HDR)", rate_gbps=100.0)
    rows = _fabric_rows(tmp_path, {"healthy": healthy, "placed": roce_node(same, placed=True),
                                   "unplaced": roce_node(same), "cx6": cx6})
    # eight rails at 400G for eight GPUs: the slower ports of the same card are storage ports
    assert rows["healthy"]["audit.net.rdma_rate"] == ("pass", "400G x8")
    assert rows["healthy"]["audit.net.rdma_link_state"] == ("warn", "9/10 ports active (down: mlx5_9/1 DOWN)")
    # seven at 400G: the PCIe tree tells the rail (below GPU 3's switch) from the storage ports
    assert rows["placed"]["audit.net.rdma_rate"] == ("fail", "400G x7, 200G x1 (slow: mlx5_3 200G)")
    assert rows["placed"]["audit.net.rdma_link_state"] == ("warn", "9/10 ports active (down: mlx5_9/1 DOWN)")
    # without it, three ports of the card are below 400G for one missing rail: never "pass", never a guess
    assert rows["unplaced"]["audit.net.rdma_rate"] == (
        "warn", "400G x7 (below it: mlx5_3 200G, mlx5_8 200G, mlx5_9 DOWN (MT_0000000838, like the compute ports))")
    # a genuinely different, slower NIC keeps being storage; the rail of the rails' card is judged as one
    assert rows["cx6"]["audit.net.rdma_rate"] == ("fail", "400G x7, 200G x1 (slow: mlx5_3 200G)")
    assert "storage: mlx5_8 100G, mlx5_9 100G" in rows["cx6"]["audit.net.nic_inventory"][1]


def _rails_at_200g(f):
    """The eight rails trained at 200G (a ConnectX-7 on a 200G switch port; ConnectX-6 Dx tops out there): sysfs
    rate and netdev speed, and ibstat's Rate, as each reads at 4X HDR."""
    for dev in ("mlx5_%d" % i for i in range(8)):
        info = f["net"]["rdma"][dev]
        info["ports"]["1"].update(rate="200 Gb/sec (4X HDR)", rate_gbps=200.0)
        f["net"]["interfaces"][info["netdevs"][0]]["speed_mbps"] = 200000
        f["ib_tools"]["ibstat"][dev]["ports"]["1"].update(rate="200", rate_gbps=200.0)
    return f


def test_a_roce_fabric_of_200g_rails_is_the_compute_fabric_not_storage(tmp_path):
    fe200 = _rails_at_200g(roce_node(placed=True))
    fe200["net"]["default_route"] = fe200["net"]["rdma"]["mlx5_8"]["netdevs"]  # the dual-port card's 200G port
    low = _rails_at_200g(roce_node(placed=True))
    low["net"]["rdma"]["mlx5_3"]["ports"]["1"].update(rate="100 Gb/sec (2X HDR)", rate_gbps=100.0)
    rate400 = (_rails_at_200g(roce_node(placed=True)), "2026-11-20T08:00:00Z", {"fabric_rate_gbps": 400})
    rows = _fabric_rows(tmp_path, {"placed": _rails_at_200g(roce_node(placed=True)),
                                   "vm": _rails_at_200g(roce_node()), "fe200": fe200, "low": low,
                                   "rate400": rate400})
    # eight 200G rails for eight GPUs, beside a 25G frontend and a 200G storage port of another card: the fabric
    for host in ("placed", "vm"):
        assert rows[host]["audit.net.nic_inventory"] == (
            "pass", "compute: mlx5_0 200G, mlx5_1 200G, mlx5_2 200G, mlx5_3 200G … (+4); frontend: eno1 25G; "
                    "storage: mlx5_8 200G, mlx5_9 10G")
        assert rows[host]["audit.net.compute_nic_ratio"] == ("pass", "8 compute NICs for 8 GPUs")
        assert rows[host]["audit.net.rdma_rate"] == ("pass", "200G x8")
    # a frontend as fast as the rails stays the frontend
    assert rows["fe200"]["audit.net.nic_inventory"][0] == "pass"
    assert "frontend: mlx5_8 200G" in rows["fe200"]["audit.net.nic_inventory"][1]
    assert rows["fe200"]["audit.net.compute_nic_ratio"] == ("pass", "8 compute NICs for 8 GPUs")
    # judged as a 200G fabric: a rail below it fails; a site that expects 400G per GPU says so
    assert rows["low"]["audit.net.rdma_rate"] == ("fail", "200G x7, 100G x1 (slow: mlx5_3 100G)")
    assert rows["rate400"]["audit.net.rdma_rate"][0] == "fail"


def test_kubernetes_objects_from_the_controller(tmp_path):
    run = write_run(tmp_path, {"h": h200_node()})
    k8s = Path(run.run_dir) / "kubernetes"
    k8s.mkdir()
    pods = {"items": [{"metadata": {"namespace": "gpu-operator", "name": "nvidia-device-plugin-daemonset-x2k9p"}},
                      {"metadata": {"namespace": "gpu-operator", "name": "gpu-operator-6d8f7c9b4d-qm2lx"}}]}
    scs = {"items": [{"metadata": {"name": "local-path", "annotations": {
        "storageclass.kubernetes.io/is-default-class": "true"}}, "provisioner": "rancher.io/local-path"}]}
    (k8s / "pods.txt").write_text(json.dumps(pods))
    (k8s / "daemonsets.txt").write_text(json.dumps({"error": "forbidden"}))
    (k8s / "storageclasses.txt").write_text(json.dumps(scs))
    t = by(audit_rows(run))
    assert t[("audit.k8s.gpu_operator", "h")]["status"] == "error"
    assert "kubectl get daemonsets failed: forbidden" in t[("audit.k8s.gpu_operator", "h")]["reason"]
    (k8s / "daemonsets.txt").write_text(json.dumps({"items": []}))
    t = by(audit_rows(run))
    assert t[("audit.k8s.gpu_operator", "h")]["status"] == "pass"
    assert t[("audit.k8s.device_plugin", "h")]["status"] == "pass"
    assert t[("audit.k8s.network_operator", "h")]["status"] == "fail"
    assert t[("audit.k8s.default_storageclass", "h")]["observed"] == "local-path"
    assert t[("audit.k8s.rwx_storageclass", "h")]["status"] == "warn"


def test_report_section_lists_findings_and_drift(tmp_path, fleet):
    from reports.phases.audit import section

    run, rows = fleet
    md = section.render(run, rows, str(tmp_path))
    assert md.startswith("## Audit")
    assert "| h100 | %d |" % len({r["check_id"] for r in rows}) in md
    assert "audit.sw.driver_security | FAIL | h100, h200" in md
    assert "dated 2026-08-01" in md
    assert "| h100 | mlx5_0 (400G IB)" in md


def _nvlink5_row(tmp_path, output):
    f = b200_node()
    f["gpu_nvidia"]["nvlink_errors"] = {str(k): v for k, v in audit_nvidia.parse_nvlink_errors(output).items()}
    run = write_run(tmp_path, {"b300": f})
    return by(audit_rows(run))[("audit.gpu.nvlink_errors", "b300")]


@pytest.mark.parametrize("edit, status, named", [
    ({}, "pass", None),
    ({"Link 5: Link recovery failed events: 0": "Link 5: Link recovery failed events: 1",
      "Link 5: Total link recovery events: 0": "Link 5: Total link recovery events: 1"},
     "fail", "link_recovery_failed_events=1"),
    ({"Link 5: Link recovery successful events: 0": "Link 5: Link recovery successful events: 2",
      "Link 5: Total link recovery events: 0": "Link 5: Total link recovery events: 2"},
     "warn", "link_recovery_successful_events=2"),
    ({"Link 9: Symbol Errors: 0": "Link 9: Symbol Errors: 4"}, "warn", "symbol=4")])
def test_nvlink5_counters_judge_the_errors_not_the_fec_histogram(tmp_path, edit, status, named):
    """`nvidia-smi nvlink -e` on NVLink 5 (B300, driver 595): twelve error counters per link, beside the FEC
    histogram (bucket 0 in the billions on a healthy link), raw per-lane counters (non-zero on a healthy link) and
    BER floats. The fixture follows the counter names and healthy readings recorded on a p6-b300 with driver
    595.91.07 (a public troubleshooting reference of AWS's GPU instances) and GKE's NVLink check's test lines
    ("Link 0: FEC Errors - 0: 17941761", safe to ignore). A healthy GPU used to warn on fec_0 and raw_lane_0."""
    output = text("nvidia-smi-nvlink-e_b300_r595.txt")
    for old, new in edit.items():
        assert old in output
        output = output.replace(old, new)
    row = _nvlink5_row(tmp_path, output)
    assert row["status"] == status, row
    if named:
        assert row["observed"] == "GPU 0: %s" % " ".join(sorted([named, "total_link_recovery_events=%s" % named[-1]])
                                                         if "recovery" in named else [named]), row
    else:
        assert "fec_" not in row["observed"] and "raw_" not in row["observed"]
        assert row["observed"].endswith("; 21 other counters recorded, not errors (FEC histogram, raw lane, traffic)")


def test_nvlink_output_with_no_counter_the_check_knows_is_a_skip_naming_them(tmp_path):
    output = "\n".join(line for line in text("nvidia-smi-nvlink-e_b300_r595.txt").splitlines()
                       if "FEC" in line or line.startswith("GPU"))
    row = _nvlink5_row(tmp_path, output)
    assert row["status"] == "skip" and row["reason"].startswith("no NVLink error counter this check knows among the 16")


def test_free_space_inodes_and_sizes_just_past_their_lines_are_shown_past_them(tmp_path):
    """/ with 4.6 % free (fail below 5 %) read "5% free", /raid at 90.4 % of its inodes (over 90) "90%", and a
    /dev/shm of 0.996 GiB (warn below 1 GiB) "1.0 GiB": the verdicts were right, the numbers sat on their lines."""
    node = cpu_node()
    mounts = {m["target"]: m for m in node["storage"]["mounts"]}
    assert {"/", "/raid", "/dev/shm"} <= set(mounts)
    mounts["/"].update(size=100 * 2**30, avail=int(4.6 * 2**30))
    mounts["/raid"].update(inodes=1000, inodes_free=96)
    mounts["/dev/shm"].update(size=int(0.996 * 2**30))
    rows = by(audit_rows(write_run(tmp_path, {"n1": node})))
    assert (rows[("audit.storage.root_free", "n1")]["status"], rows[("audit.storage.root_free", "n1")]["observed"]) \
        == ("fail", "/ 4.6% free (4.6 GiB)")
    assert (rows[("audit.storage.inodes", "n1")]["status"], rows[("audit.storage.inodes", "n1")]["observed"]) == (
        "warn", "/raid 90.4%")
    assert (rows[("audit.storage.dev_shm", "n1")]["status"], rows[("audit.storage.dev_shm", "n1")]["observed"]) \
        == ("warn", "/dev/shm 0.996 GiB size")
