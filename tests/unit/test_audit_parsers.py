"""The audit's node-side parsers, driven by recorded outputs of real node types (tests/fixtures/audit)."""

import json
import os
import sys
from pathlib import Path

import pytest

from probes.audit import amd as audit_amd
from probes.audit import health as audit_health
from probes.audit import logs as audit_logs
from probes.audit import net as audit_net
from probes.audit import nvidia as audit_nvidia
from probes.audit import pci as audit_pci
from probes.audit import procs as audit_procs
from probes.audit import sched as audit_sched
from probes.audit import security as audit_security
from probes.audit import software as audit_software
from probes.audit import storage as audit_storage

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "audit"


def text(name):
    return (FIX / name).read_text()


def test_h100_xml_every_gpu_with_the_odd_ones():
    smi = audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_h100.xml"))
    assert smi["driver_version"] == "560.35.03" and smi["cuda_version"] == "12.6"
    gpus = smi["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    g0 = gpus[0]
    assert g0["pci_bus_id"] == "00000000:18:00.0" and g0["memory_total_mib"] == 81559
    assert g0["persistence_mode"] == "Enabled" and g0["ecc_mode"] == "Enabled" and g0["mig_mode"] == "Disabled"
    assert g0["power_limit_w"] == 700 and g0["power_limit_default_w"] == 700
    assert (g0["pcie_gen_max"], g0["pcie_width_current"], g0["pcie_width_max"]) == (5, 16, 16)
    assert g0["fabric_state"] == "Completed" and g0["fabric_status"] == "Success"
    assert g0["active_clock_reasons"] == ["gpu_idle"]
    # GPU 5 waits for a reset after a remap and is slowed down; GPU 6 has two uncorrectable DRAM errors on record
    assert gpus[5]["remap_pending"] is True and gpus[5]["remapped_rows_uncorrectable"] == 1
    assert gpus[5]["reset_required"] is True and "hw_slowdown" in gpus[5]["active_clock_reasons"]
    assert gpus[6]["ecc_uncorrectable_aggregate"] == 2 and gpus[6]["ecc_uncorrectable_volatile"] == 0
    # Hopper has row remapping, not page retirement: those counters are N/A
    assert g0["retired_pages_dbe"] is None and g0["remap_reported"] is True


@pytest.mark.parametrize("name,driver,count,model,mem", [
    ("h200", "570.133.20", 8, "NVIDIA H200", 143771),
    ("b200", "580.159.03", 8, "NVIDIA B200", 183359),
    ("gb200", "590.48.01", 4, "NVIDIA GB200", 189471),
])
def test_h200_b200_gb200_inventories(name, driver, count, model, mem):
    smi = audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_%s.xml" % name))
    assert smi["driver_version"] == driver and len(smi["gpus"]) == count
    assert {g["name"] for g in smi["gpus"]} == {model}
    assert {g["memory_total_mib"] for g in smi["gpus"]} == {mem}


def test_gb200_fabric_and_module_power():
    gpus = audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_gb200.xml"))["gpus"]
    assert [g["pci_bus_id"] for g in gpus] == ["00000008:01:00.0", "00000009:01:00.0", "00000018:01:00.0",
                                                "00000019:01:00.0"]
    assert {g["fabric_clique_id"] for g in gpus} == {"4026"}
    assert {g["fabric_cluster_uuid"] for g in gpus} == {"9c6f5af3-53bf-49b5-a436-b66766c413c3"}
    assert gpus[0]["module_power_draw_w"] == pytest.approx(412.8)


def test_h200_riser_at_x8_and_b200_host_gen5():
    h200 = audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_h200.xml"))["gpus"]
    assert [g["pcie_width_current"] for g in h200] == [16, 16, 8, 16, 16, 16, 16, 16]
    b200 = audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_b200.xml"))["gpus"]
    assert {(g["pcie_gen_device_max"], g["pcie_gen_host_max"], g["pcie_gen_max"]) for g in b200} == {(6, 5, 5)}
    assert [g["persistence_mode"] for g in b200].count("Disabled") == 1


def test_older_xml_layout_r535():
    gpu = audit_nvidia.parse_smi_xml(text("nvidia-smi-q-x_a100_r535_excerpt.xml"))["gpus"][0]
    assert gpu["ecc_uncorrectable_volatile"] == 1 and gpu["ecc_uncorrectable_aggregate"] == 4
    assert gpu["ecc_correctable_volatile"] == 3
    assert gpu["active_clock_reasons"] == ["gpu_idle", "hw_thermal_slowdown"]
    assert gpu["power_limit_w"] == 300 and gpu["power_limit_enforced_w"] == 300 and gpu["power_limit_default_w"] == 400
    assert gpu["app_clock_graphics_mhz"] == 1095 and gpu["app_clock_graphics_default_mhz"] == 1275
    assert gpu["mig_mode"] == "Enabled" and gpu["persistence_mode"] == "Disabled"
    assert gpu["remapped_rows_uncorrectable"] == 4 and gpu["remap_pending"] is False
    assert gpu["fabric_state"] is None and gpu["reset_required"] is None


def test_nvlink_status_and_errors():
    status = audit_nvidia.parse_nvlink_status(text("nvidia-smi-nvlink-s_h100.txt"))
    assert len(status) == 8 and status[0] == {"links": 18, "active": 18, "speeds_gbps": [26.562], "note": None}
    assert status[3]["active"] == 17
    errors = audit_nvidia.parse_nvlink_errors(text("nvidia-smi-nvlink-e_h100.txt"))
    assert errors[3] == {"replay": 412, "recovery": 3, "crc": 0}
    assert errors[0] == {"replay": 0, "recovery": 0, "crc": 0}
    gb = audit_nvidia.parse_nvlink_status(text("nvidia-smi-nvlink-s_gb200.txt"))
    assert {g["active"] for g in gb.values()} == {18} and gb[0]["speeds_gbps"] == [53.125]


def test_driver_flavour_and_fabric_manager_version():
    open_mod = audit_nvidia.parse_driver_version_file(text("proc-driver-nvidia-version_open.txt"))
    assert open_mod["version"] == "580.159.03" and open_mod["open_kernel_module"] is True
    prop = audit_nvidia.parse_driver_version_file(text("proc-driver-nvidia-version_proprietary.txt"))
    assert prop["version"] == "560.35.03" and prop["open_kernel_module"] is False
    assert audit_nvidia.parse_fabricmanager_version(text("nv-fabricmanager-version.txt")) == "560.35.03"


def test_mi300x_amd_smi_both_json_layouts():
    static = audit_amd.parse_static(text("amd-smi-static_mi300x.json"))  # ROCm 6: a list
    assert len(static) == 8 and {g["name"] for g in static} == {"AMD Instinct MI300X"}
    assert static[0]["pci_bus_id"] == "0000:05:00.0" and static[0]["memory_total_mib"] == 196592
    assert static[0]["pcie_speed_max_gts"] == 32 and static[0]["pcie_width_max"] == 16
    assert static[0]["driver"] == "6.8.5" and static[0]["power_limit_w"] == 750
    metric = audit_amd.parse_metric(text("amd-smi-metric_mi300x.json"))  # ROCm 7: {"gpu_data": [...]}
    assert metric[6]["pcie_width_current"] == 8 and metric[3]["ecc_uncorrectable_aggregate"] == 2
    assert metric[0]["power_draw_w"] == 138 and metric[0]["temperature_c"] == 39
    wrapped = json.dumps({"gpu_data": json.loads(text("amd-smi-static_mi300x.json"))})
    assert audit_amd.parse_static(wrapped) == static


def test_ibstat_and_ibv_devinfo():
    cas = audit_net.parse_ibstat(text("ibstat_h100_ndr.txt"))
    assert sorted(cas) == sorted("mlx5_%d" % i for i in range(10))
    assert cas["mlx5_0"]["firmware"] == "28.39.2048" and cas["mlx5_0"]["type"] == "MT4129"
    assert cas["mlx5_0"]["ports"]["1"]["rate_gbps"] == 400 and cas["mlx5_0"]["ports"]["1"]["link_layer"] == "InfiniBand"
    assert cas["mlx5_3"]["ports"]["1"]["rate_gbps"] == 200
    assert cas["mlx5_9"]["ports"]["1"]["state"] == "Down"
    dev = audit_net.parse_ibv_devinfo(text("ibv_devinfo_h100_ndr.txt"))
    assert dev["mlx5_0"]["ports"]["1"]["active_mtu"] == 4096 and dev["mlx5_0"]["fw_ver"] == "28.39.2048"
    assert dev["mlx5_8"]["ports"]["1"]["active_mtu"] == 1024 and dev["mlx5_8"]["ports"]["1"]["link_layer"] == "Ethernet"


def test_routes_and_addresses():
    route = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
             "eth0\t00000000\tFE2CED0A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
             "eth0\t002CED0A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    assert audit_net.default_route_ifaces(route) == ["eth0"]
    ip = json.dumps([{"ifname": "lo", "addr_info": [{"local": "127.0.0.1", "prefixlen": 8, "scope": "host"}]},
                     {"ifname": "eth0", "addr_info": [{"local": "10.237.44.11", "prefixlen": 24, "scope": "global"},
                                                      {"local": "fe80::1", "prefixlen": 64, "scope": "link"}]}])
    assert audit_net.parse_ip_addr(ip) == {"lo": [], "eth0": ["10.237.44.11/24"]}


def test_lspci_acs_flags_and_access_denied():
    devices, denied = audit_pci.parse_lspci(text("lspci-vvv_h100_pcie_switch_excerpt.txt"))
    assert not denied
    assert devices["0000:17:00.0"]["acs_ctl"]["ReqRedir"] is True and devices["0000:17:00.0"]["acs_ctl"]["CmpltRedir"]
    assert devices["0000:17:01.0"]["acs_ctl"] == {k: False for k in ("SrcValid", "TransBlk", "ReqRedir", "CmpltRedir",
                                                                        "UpstreamFwd", "EgressCtrl", "DirectTrans")}
    assert devices["0000:18:00.0"]["lnk_sta"] == "Speed 32GT/s, Width x16"
    assert devices["0000:18:00.0"]["acs_ctl"] is None
    assert audit_pci.parse_lspci(text("lspci-vvv_not_root_excerpt.txt"))[1] is True


def test_pci_classes_and_aer():
    assert audit_pci.classify("0x10de", "0x030200") == "gpu"
    assert audit_pci.classify("0x1002", "0x120000") == "gpu"
    assert audit_pci.classify("0x10de", "0x068000") == "nvswitch"
    assert audit_pci.classify("0x15b3", "0x020700") == "nic"
    assert audit_pci.classify("0x144d", "0x010802") == "nvme"
    assert audit_pci.classify("0x1a03", "0x030000") is None
    assert audit_pci.parse_aer("RxErr 0\nBadTLP 0\nTOTAL_ERR_FATAL 2\n") == 2
    assert audit_pci.parse_aer("Undefined 0\nDLP 1\n") == 1


def test_kernel_log_xids_events_and_times():
    log = audit_logs.parse_kernel_log(text("dmesg-iso_h100_xids.txt"))
    assert [x["xid"] for x in log["xids"]] == [31, 13, 13, 63, 94, 79]
    assert log["xids"][-1] == {"time": "2024-09-26T04:50:04Z", "pci": "0000:ab:00", "xid": 79,
                               "text": "pid=1912, name=nvidia-smi, GPU has fallen off the bus."}
    assert log["counts"]["mce"] == 1 and log["counts"]["oom"] == 1 and log["counts"]["aer"] == 1
    assert log["counts"]["gpu_fallen_off"] == 1  # the NVRM line after the XID, not the XID itself
    journal = audit_logs.parse_kernel_log(text("journalctl-k-short-iso_gb200.txt"))
    assert [(x["xid"], x["pci"]) for x in journal["xids"]] == [(74, "0018:01:00"), (149, "0018:01:00")]
    assert audit_logs.parse_time("2025-10-14T06:41:55+0200") == "2025-10-14T04:41:55Z"


def test_one_oom_kill_is_one_event_whatever_the_kernel_prints_around_it():
    """The OOM killer's report, as mm/oom_kill.c prints it: since 5.0 a summary line (oom-kill:constraint=...) and
    the kill (Out of memory: / Memory cgroup out of memory: Killed process N); before, "Kill process N ... or
    sacrifice child" and then "Killed process N". Three kills here: a global one, a cgroup one (a Slurm job's
    step), one of a 4.x kernel. Before, each counted twice (the summary or the 'Kill process' line, and the kill)."""
    log = audit_logs.parse_kernel_log(text("dmesg-iso_oom_kills.txt"))
    assert log["counts"]["oom"] == 3
    assert log["events"]["oom"] == ["2024-11-04T09:12:41Z", "2024-11-05T14:03:09Z", "2024-11-06T02:40:55Z"]


KMSG = Path(__file__).resolve().parents[1] / "fixtures" / "kmsg"


def dmesg_as_iso(name, boot="2024-09-25T00:00:00+00:00"):
    """A dmesg capture of tests/fixtures/kmsg (``[seconds since boot] message``) in the layout of ``dmesg
    --time-format iso``: the boot time plus the seconds in front, continuation lines as they are (indented)."""
    from datetime import datetime, timedelta
    start = datetime.fromisoformat(boot)
    out = []
    for line in (KMSG / name).read_text().splitlines():
        if line.startswith("["):
            secs, _, message = line[1:].partition("]")
            when = start + timedelta(seconds=float(secs))
            line = "%s %s" % (when.strftime("%Y-%m-%dT%H:%M:%S,%f+00:00"), message.strip())
        out.append(line)
    return "\n".join(out) + "\n"


def journal_as_short_iso(name, year=2024):
    """A journalctl capture (``Mar 07 19:30:42 host kernel: …``, later lines of a message indented) in the layout of
    ``journalctl -o short-iso`` (``2024-03-07T19:30:42+0000 host kernel: …``)."""
    from datetime import datetime
    out = []
    for line in (KMSG / name).read_text().splitlines():
        if not line[:1].isspace():
            when = datetime.strptime("%d %s" % (year, line[:15]), "%Y %b %d %H:%M:%S")
            line = when.strftime("%Y-%m-%dT%H:%M:%S+0000") + line[15:]
        out.append(line)
    return "\n".join(out) + "\n"


def test_kernel_log_sxid_records_with_the_fatal_flag_of_all_their_lines():
    log = audit_logs.parse_kernel_log(dmesg_as_iso("dmesg_sxid20034_xid79_hgx.txt"))
    assert [(x["xid"], x["pci"]) for x in log["xids"]] == [(79, "0000:91:00")]
    assert [(x["sxid"], x["pci"], x["device"], x["fatal"], x["lines"]) for x in log["sxids"]] == [
        (20034, "0000:06:00.0", "nvidia-nvswitch1", True, 1), (20034, "0000:05:00.0", "nvidia-nvswitch0", True, 2),
        (20034, "0000:07:00.0", "nvidia-nvswitch2", True, 1), (20034, "0000:07:00.0", "nvidia-nvswitch2", True, 2),
        (20034, "0000:05:00.0", "nvidia-nvswitch0", True, 2)]
    assert log["sxids"][0] == {
        "time": "2024-12-12T11:49:13Z", "pci": "0000:06:00.0", "device": "nvidia-nvswitch1", "sxid": 20034,
        "fatal": True, "lines": 1,
        "text": "nvidia-nvswitch1: SXid (PCI:0000:06:00.0): 20034, Fatal, Link 48 LTSSM Fault Up"}
    assert log["gpu_errors"] == []  # the fallen-off-the-bus line belongs to XID 79
    assert log["unparsed"] == [] and len(log["matched"]) == 10  # the XID, its fallen-off line and the 8 SXID lines
    one = audit_logs.parse_kernel_log(dmesg_as_iso("dmesg_sxid20034_record.txt"))
    assert [(x["sxid"], x["fatal"], x["lines"], x["text"][-22:]) for x in one["sxids"]] == [
        (20034, True, 3, "Link 30 LTSSM Fault Up")]


def test_kernel_log_gpu_init_failure_and_fallen_off_the_bus_without_an_xid():
    init = audit_logs.parse_kernel_log(dmesg_as_iso("dmesg_rminitadapter_failed.txt"))
    assert init["xids"] == [] and init["sxids"] == []
    assert init["gpu_errors"] == [{"time": "2024-09-25T00:00:06Z", "pci": "0000:01:00.0", "kind": "gpu_init_failed",
                                   "text": "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)",
                                   "lines": 2}]
    lost = audit_logs.parse_kernel_log(journal_as_short_iso("journalctl_fallen_off_bus_no_xid.txt"))
    assert lost["lines"] == 6  # six messages; the two indented lines belong to the second
    assert lost["xids"] == [] and lost["counts"]["gpu_fallen_off"] == 1
    assert lost["gpu_errors"] == [{"time": "2024-03-07T19:30:42Z", "pci": "0000:01:00.0", "kind": "fallen_off_bus",
                                   "lines": 1,
                                   "text": "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:13b6) installed in this "
                                           "system has fallen off the bus and is not responding to commands."}]
    capture = (KMSG / "journalctl_fallen_off_bus_no_xid.txt").read_text().splitlines()[1:4]
    assert [line.split(" ", 1)[1] if line[:1].isdigit() else line for line in lost["matched"]] == [
        line[16:] if line[:1].isalpha() else line for line in capture]  # the whole message is kept


def test_kernel_log_aer_of_new_kernels_and_unreadable_xid_lines():
    prefix = "2024-09-25T10:00:00+0000 node1 "
    text_ = "".join(prefix + line + "\n" for line in
                    (KMSG / "journalctl_aer_correctable_uncorrectable_fatal.txt").read_text().splitlines())
    log = audit_logs.parse_kernel_log(text_)
    # "Uncorrectable (Fatal) error message received" and "severity=Uncorrectable (Fatal)"; Correctable is no event
    assert log["counts"]["aer"] == 2 and log["counts"]["aer_fatal"] == 2
    bad = audit_logs.parse_kernel_log(prefix + "kernel: NVRM: Xid (PCI:0000:18:00) 79 GPU has fallen off the bus.\n")
    assert bad["xids"] == [] and bad["unparsed"] == [
        {"time": "2024-09-25T10:00:00Z", "line": "NVRM: Xid (PCI:0000:18:00) 79 GPU has fallen off the bus."}]


def test_kernel_log_keeps_the_newest_events_and_counts_them_all():
    # `dmesg --time-format iso` (util-linux: "YYYY-MM-DDTHH:MM:SS,<microseconds><+-><offset>", one record a line)
    # of a node up since 2026-10-25: 60 machine-check notices and 55 hung-task reports in its first days, then two
    # machine checks and a hung task in the last day. The ring buffer reaches back to boot; the newest must be kept.
    log = audit_logs.parse_kernel_log(text("dmesg-iso_old_noise_recent_events.txt"))
    assert log["counts"]["mce"] == 62 and log["counts"]["hung_task"] == 56
    assert log["events_newest"] == 50
    assert len(log["events"]["mce"]) == 50 and len(log["events"]["hung_task"]) == 50
    assert log["events"]["mce"][-2:] == ["2026-11-19T22:10:41Z", "2026-11-19T23:04:02Z"]
    assert log["events"]["hung_task"][-1] == "2026-11-20T01:37:55Z"
    assert log["events"]["mce"] == sorted(log["events"]["mce"])  # oldest first, as before
    assert log["first"] == "2026-10-25T06:12:03Z"
    # the raw evidence (kernel-events.txt) holds the newest lines too: the day the window judges, not the first days
    few = audit_logs.parse_kernel_log(text("dmesg-iso_old_noise_recent_events.txt"), limit=4)
    assert len(few["matched"]) == 4 and few["matched"][-1].startswith("2026-11-20T01:37:55")


def test_home_on_an_automount_is_the_mount_on_top_of_the_autofs_one():
    # `findmnt -J -o TARGET,SOURCE,FSTYPE,OPTIONS` (util-linux JSON: a mount over another is its child) of the H100
    # node with /home from /etc/fstab "10.40.0.20:/export/home /home nfs4 x-systemd.automount": once /home was used,
    # systemd's autofs mount (source systemd-1) and the NFS mount on top of it, both on /home
    mounts = audit_storage.parse_findmnt(text("findmnt-J_home_systemd_automount.json"))
    assert [m["fstype"] for m in mounts if m["target"] == "/home"] == ["autofs", "nfs4"]
    assert audit_storage.mount_of("/home", mounts)["fstype"] == "nfs4"
    assert audit_storage.mount_of("/home/alice", mounts)["source"] == "10.40.0.20:/export/home"
    # the same in /proc/self/mounts (mount order), where rootfs may come before the real root too
    proc = audit_storage.parse_proc_mounts("rootfs / rootfs rw 0 0\n/dev/md0 / ext4 rw,relatime 0 0\n"
                                           "systemd-1 /home autofs rw,relatime,fd=52,pgrp=1,timeout=0,minproto=5,"
                                           "maxproto=5,direct,pipe_ino=30417 0 0\n"
                                           "10.40.0.20:/export/home /home nfs4 rw,relatime,vers=4.1,hard 0 0\n")
    assert audit_storage.mount_of("/home", proc)["fstype"] == "nfs4"
    assert audit_storage.mount_of("/var", proc)["fstype"] == "ext4"
    # not used yet: only the automount point is there; an indirect map (autofs daemon, /etc/auto.home) mounts
    # each home below it
    idle = audit_storage.parse_findmnt(text("findmnt-J_home_automount_not_triggered.json"))
    assert audit_storage.mount_of("/home", idle)["fstype"] == "autofs"
    indirect = audit_storage.parse_findmnt(text("findmnt-J_home_autofs_indirect_map.json"))
    assert audit_storage.mount_of("/home", indirect)["fstype"] == "autofs"
    assert audit_storage.mount_of("/home/alice/x", indirect)["fstype"] == "nfs4"


def test_sshd_t_sudoers_and_sockets():
    sshd = audit_security.parse_sshd_t(text("sshd-T_ubuntu2204_default.txt"))
    assert sshd["passwordauthentication"] == "yes" and sshd["permitrootlogin"] == "without-password"
    assert sshd["listenaddress"] == "[::]:22 0.0.0.0:22"
    hardened = audit_security.parse_sshd_t(text("sshd-T_hardened.txt"))
    assert hardened["passwordauthentication"] == "no" and hardened["maxauthtries"] == "3"
    sudo = audit_security.parse_sudoers({"/etc/sudoers": text("sudoers_with_nopasswd")})
    assert sudo["nopasswd"] == [{"file": "/etc/sudoers", "rule": "ubuntu ALL=(ALL) NOPASSWD:ALL"}]
    v4 = audit_procs.parse_proc_net_tcp(text("proc-net-tcp_exposed.txt"))
    assert [(s["address"], s["port"]) for s in v4] == [("0.0.0.0", 5555), ("0.0.0.0", 9400), ("0.0.0.0", 22),
                                                       ("127.0.0.1", 2375), ("0.0.0.0", 2375)]
    v6 = audit_procs.parse_proc_net_tcp(text("proc-net-tcp6_exposed.txt"), v6=True)
    assert [(s["address"], s["port"]) for s in v6] == [("::", 10250), ("::1", 8080)]
    assert audit_procs.is_loopback("::1") and audit_procs.is_loopback("127.0.0.53")
    assert not audit_procs.is_loopback("::")


def test_sshd_config_is_the_listeners_not_a_zombies(monkeypatch, tmp_path):
    """A zombie named sshd (unreaped, its namespace links gone, its command line empty) listed before the listener
    once made the audit read /etc/ssh/sshd_config instead of the listener's -f file (a clean-clone CI failure)."""
    import ctypes
    import subprocess
    import time

    zombie = os.fork()
    if zombie == 0:
        ctypes.CDLL(None).prctl(15, b"sshd", 0, 0, 0)  # PR_SET_NAME: comm "sshd", as a connection's sshd
        os._exit(0)
    listener = subprocess.Popen(["sshd", "-c", "import time; time.sleep(30)", "-f", str(tmp_path / "sshd_config")],
                                executable=sys.executable)
    try:
        for _ in range(100):
            zombie_stat = Path("/proc/%d/stat" % zombie).read_text().rsplit(")", 1)[-1].split()
            if zombie_stat[0] == "Z" and audit_procs.cmdline_words(listener.pid)[-2:] == [
                    "-f", str(tmp_path / "sshd_config")]:
                break
            time.sleep(0.05)
        assert audit_procs._name(zombie) == "sshd" and audit_procs._netns(zombie) is None
        assert audit_procs.cmdline_words(zombie) == []
        monkeypatch.setattr(audit_security, "listdir", lambda path: [str(zombie), str(listener.pid)])
        assert audit_security.sshd_config_path() == str(tmp_path / "sshd_config")
        monkeypatch.setattr(audit_security, "listdir", lambda path: [str(zombie)])
        assert audit_security.sshd_config_path() is None
        # nor does the zombie count as a running daemon of this node
        monkeypatch.setattr(audit_procs, "listdir", lambda path: [str(zombie), str(listener.pid)])
        assert audit_procs.scan_processes()["here"] == {"sshd": [listener.pid]}
    finally:
        listener.kill()
        listener.wait()
        os.waitpid(zombie, 0)


def test_path_dirs_from_every_source():
    dirs = audit_security.path_dirs("/usr/bin:/opt/x", 'PATH="/usr/local/bin:/usr/bin"\n',
                                    "ENV_SUPATH\tPATH=/usr/sbin:/usr/bin\nENV_PATH PATH=/usr/bin:/tmp\n")
    assert dirs == ["/usr/bin", "/opt/x", "/usr/local/bin", "/usr/sbin", "/tmp"]
    modes = audit_security.dir_modes(["/tmp", "/nonexistent"])
    assert modes == [{"path": "/tmp", "mode": modes[0]["mode"], "world_writable": True, "sticky": True,
                      "owner_uid": 0}]


def test_findmnt_tiers_and_home():
    mounts = audit_storage.parse_findmnt(text("findmnt-J_h100_node.json"))
    by = {m["target"]: m for m in mounts}
    assert by["/home"]["fstype"] == "nfs4" and by["/lustre/fsx"]["fstype"] == "lustre"
    assert audit_storage.mount_of("/home/alice", mounts)["target"] == "/home"
    assert audit_storage.mount_of("/var/log", mounts)["target"] == "/"
    assert audit_storage.parse_proc_mounts("/dev/sda1 /mnt/my\\040disk ext4 rw 0 0\n")[0]["target"] == "/mnt/my disk"
    fstab = audit_storage.parse_fstab("UUID=abc / ext4 errors=remount-ro 0 1\n# c\n10.0.0.1:/x /data nfs4 _netdev\n")
    assert [e["target"] for e in fstab] == ["/", "/data"]
    assert audit_storage._transient("/run/user/1000") and not audit_storage._transient("/run")


def test_statvfs_answers_and_records_errors():
    out = audit_storage.statvfs_all(["/", "/nonexistent-mount"])
    assert out["/"]["size"] > 0 and out["/"]["avail"] <= out["/"]["size"]
    assert "error" in out["/nonexistent-mount"]


def test_slurm_config_and_kubelet():
    cfg = audit_sched._select(audit_sched.parse_scontrol_config(text("scontrol-show-config_h100.txt")))
    assert cfg["TopologyPlugin"] == "topology/tree" and cfg["HealthCheckProgram"] == "/usr/sbin/nhc"
    assert cfg["SLURM_VERSION"] == "23.11.4" and cfg["MpiDefault"] == "pmix"
    params, nodes, parts = audit_sched.parse_slurm_conf(text("slurm.conf_flat_topology"))
    assert params["TopologyPlugin"] == "topology/flat" and (nodes, parts) == (1, 1)
    assert "HealthCheckProgram" not in params
    conf = "authentication:\n  anonymous:\n    enabled: true\n  webhook:\n    enabled: true\n"
    assert audit_sched.kubelet_anonymous_auth(conf) is True


def test_dcgm_diag_json():
    diag = audit_health.parse_dcgm_diag(text("dcgmi-diag-r1_h100.json"))
    assert diag["failed"] == ["Page Retirement/Row Remap"] and diag["tests"]["Inforom"] == "skip"
    assert sum(1 for s in diag["tests"].values() if s == "pass") == 7


def test_software_version_parsers(tmp_path):
    dpkg = "libnccl2\t2.21.5-1+cuda12.4\tii \nfoo\t1\trc \n"
    assert audit_software.parse_dpkg(dpkg) == {"libnccl2": "2.21.5-1+cuda12.4"}
    assert audit_software.parse_nvcc("Cuda compilation tools, release 12.4, V12.4.131\nBuild cuda_12.4") == "12.4.131"
    assert audit_software.parse_dcgmi("dcgmi  version: 3.3.9\n") == "3.3.9"
    assert audit_software.parse_dcgmi("Version : 3.3.5\nBuild ID : 14\n") == "3.3.5"
    assert audit_software.parse_exporter("dcgm-exporter version 4.4.2-4.7.0") == "4.7.0"
    assert audit_software.parse_ofed("MLNX_OFED_LINUX-23.10-1.1.9.0:\n") == ("MLNX_OFED_LINUX", "23.10-1.1.9.0")
    assert audit_software.parse_ofed("OFED-internal-24.10-1.1.4:\n") == ("OFED-internal", "24.10-1.1.4")
    runc = audit_software.TOOLS["runc"][1]
    assert runc("runc version 1.1.12\ncommit: v1.1.12-0-g51d5e94\nspec: 1.0.2-dev\ngo: go1.20.13") == "1.1.12"
    ctk = audit_software.TOOLS["nvidia_ctk"][1]
    assert ctk("NVIDIA Container Toolkit CLI version 1.20.0\ncommit: 5505e") == "1.20.0"
    assert audit_software.TOOLS["dockerd"][1]("Docker version 29.7.2, build a7dcaa6") == "29.7.2"
    assert audit_software.TOOLS["slurm"][1]("slurm-wlm 23.11.4") == "23.11.4"
    (tmp_path / "libnccl.so.2").touch()
    (tmp_path / "libnccl.so.2.21.5").touch()
    (tmp_path / "libnccl.so.2.19.3").touch()
    assert audit_software.lib_version("libnccl", dirs=[str(tmp_path)]) == "2.21.5"
    header = tmp_path / "nccl.h"
    header.write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n")
    assert audit_software.header_version([str(tmp_path / "missing.h"), str(header)], "NCCL") == "2.21.5"
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"name": "CUDA SDK", "version": "13.3.1"}}))
    assert audit_software.cuda_toolkit(str(tmp_path)) == ("13.3.1", "version.json")


def test_software_version_parsers_keep_the_pre_release():
    """A release candidate of a minimum is not the minimum: the probe records the -rc.N (runc 1.0 printed -rc93)."""
    runc = audit_software.TOOLS["runc"][1]
    assert runc("runc version 1.5.0-rc.2\ncommit: v1.5.0-rc.2-0-g5c6b9c1\nspec: 1.3.0\ngo: go1.24.6\n"
                "libseccomp: 2.5.5") == "1.5.0-rc.2"
    assert runc("runc version 1.0.0-rc93\ncommit: 12644e614e25b05da6fd08a38ffa0cfe1903fdec\nspec: 1.0.2-dev") == \
        "1.0.0-rc93"
    assert runc("runc version 1.1.12-0ubuntu3.1\nspec: 1.0.2-dev") == "1.1.12"  # a distro revision is no pre-release
    assert audit_software.TOOLS["dockerd"][1]("Docker version 29.0.0-rc.1, build 198b5e3") == "29.0.0-rc.1"
    ctk = audit_software.TOOLS["nvidia_ctk"][1]
    assert ctk("NVIDIA Container Toolkit CLI version 1.19.1-rc.1\ncommit: 5505e") == "1.19.1-rc.1"
