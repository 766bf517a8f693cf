"""Where the nvidia-smi readings go: the audit's remapped-row checks on a MIG A100, the report's GPU layout, the
audit probe reading `nvidia-smi -q` where the XML fails and recording `topo -m`, and perftest's GPU per rail.
Every node is built from the real captures of tests/fixtures/nvidia-smi."""

import copy
import os
from pathlib import Path

from free_ports import free_port
from test_audit_collect import _fake_tools
from test_audit_grade import audit_rows, by, cpu_node, h100_node, nvidia_node, write_run
from test_network_probes_local import fake_bin

from probes.audit import nvidia as audit_nvidia
from probes.cli import run_probe
from probes.common import gpu_topo
from reports import grading
from reports.phases.audit import section

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SMI = FIX / "nvidia-smi"
MIG_A100 = "../nvidia-smi/q-x_a100-sxm4-80gb_mig_r535.xml"  # nvidia_node reads tests/fixtures/audit/<name>


def mig_a100_node():
    """The MIG A100's XML; its topology from the A100 system of the DGX A100 capture (no topo -m came with it)."""
    f = nvidia_node(MIG_A100)
    f["gpu_nvidia"]["topology"] = gpu_topo.facts(gpu_topo.parse((SMI / "topo-m_dgx-a100_nv12_10nic.txt").read_text()))
    return f


def rows_for(tmp_path, nodes):
    return by(audit_rows(write_run(tmp_path, nodes)))


def test_mig_a100_remapped_rows_are_not_read_never_unsupported(tmp_path):
    t = rows_for(tmp_path, {"mig": mig_a100_node(),
                            "mig-expected": (mig_a100_node(), "2026-11-20T08:00:00Z", {"expect_mig": True})})
    for cid in ("audit.gpu.remapped_rows", "audit.gpu.remap_pending"):
        row = t[(cid, "mig")]
        assert row["status"] == "skip"
        assert row["reason"] == ("not reported: NVIDIA A100-SXM4-80GB has row remapping, but not read on GPU 0: "
                                 "nvidia-smi gives remapped rows as N/A while MIG is enabled (read them with MIG "
                                 "disabled)")
        assert "no row remapping" not in row["reason"]
    assert t[("audit.gpu.mig", "mig")]["status"] == "fail"  # MIG not expected by default
    assert t[("audit.gpu.mig", "mig-expected")]["status"] == "pass"
    assert t[("audit.gpu.ecc_volatile", "mig")]["status"] == "pass"  # the ECC counters are read under MIG


def _two_gpus(second):
    """The MIG A100 node with a second GPU: GPU 0's readings as captured, GPU 1 as given."""
    f = mig_a100_node()
    g1 = dict(copy.deepcopy(f["gpu_nvidia"]["gpus"][0]), index=1, pci_bus_id="00000000:41:00.0", **second)
    f["gpu_nvidia"]["gpus"].append(g1)
    f["pci"]["devices"]["0000:41:00.0"] = dict(f["pci"]["devices"]["0000:01:00.0"])
    return f


def test_a_gpu_read_beside_a_mig_gpu_is_graded_and_the_other_named(tmp_path):
    ok = {"mig_mode": "Disabled", "remap_reported": True, "remapped_rows_uncorrectable": 0, "remap_pending": False,
          "remap_failure": False}
    failed = dict(ok, remap_failure=True, remapped_rows_uncorrectable=3)
    t = rows_for(tmp_path, {"ok": _two_gpus(ok), "failed": _two_gpus(failed)})
    row = t[("audit.gpu.remapped_rows", "ok")]
    assert (row["status"], row["observed"]) == ("pass", "0 uncorrectable remaps on 1 GPUs")
    assert row["reason"].startswith("not read on GPU 0: nvidia-smi gives remapped rows as N/A while MIG is enabled")
    assert t[("audit.gpu.remap_pending", "ok")]["observed"] == "none pending on 1 GPUs"
    bad = t[("audit.gpu.remapped_rows", "failed")]
    assert (bad["status"], bad["observed"]) == ("fail", "remapping failed on GPU 1")
    assert "out of spare rows" in bad["reason"] and "not read on GPU 0" in bad["reason"]


def test_na_without_mig_depends_on_the_model(tmp_path):
    t4 = nvidia_node(MIG_A100)
    t4["gpu_nvidia"]["gpus"][0].update(name="Tesla T4", mig_mode=None)
    a100 = nvidia_node(MIG_A100)
    a100["gpu_nvidia"]["gpus"][0].update(mig_mode="Disabled")
    other = nvidia_node(MIG_A100)  # MIG on a model the rubric does not list: no claim about its row remapping
    other["gpu_nvidia"]["gpus"][0].update(name="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    t = rows_for(tmp_path, {"t4": t4, "a100": a100, "other": other})
    assert t[("audit.gpu.remapped_rows", "other")]["reason"] == (
        "not reported: not read on GPU 0: nvidia-smi gives remapped rows as N/A while MIG is enabled (read them with "
        "MIG disabled)")
    assert t[("audit.gpu.remapped_rows", "t4")]["reason"] == "not applicable: Tesla T4 have no row remapping"
    row = t[("audit.gpu.remapped_rows", "a100")]
    assert row["status"] == "skip" and row["reason"] == ("not reported: NVIDIA A100-SXM4-80GB has row remapping, "
                                                         "but not reported by nvidia-smi on GPU 0")


def test_report_shows_slots_mig_virtualization_and_nearest_nics(tmp_path):
    h100 = h100_node()
    h100["gpu_nvidia"]["topology"] = gpu_topo.facts(
        gpu_topo.parse((SMI / "topo-m_h100_nv18_8nic_spaces.txt").read_text()))
    broken = mig_a100_node()
    broken["gpu_nvidia"]["topology"] = {"error": "nvidia-smi topo -m: cannot read line 5: 'GPU2 NV18'"}
    run = write_run(tmp_path, {"a-mig": mig_a100_node(), "b-h100": h100, "c-login": cpu_node(), "d-broken": broken})
    md = section.render(run, audit_rows(run), str(tmp_path))
    assert ("| a-mig | 1 | NVIDIA A100-SXM4-80GB | 4 | on GPU 0: 4 GPU instances, 4 devices (4 x 14 SM 19968 MiB) "
            "| None | nvidia-smi -q -x |") in md
    assert "| b-h100 | 8 | NVIDIA H100 80GB HBM3 | 1, 2, 3, 4, 5, 6, 7, 8 | off | None | nvidia-smi -q -x |" in md
    assert "| a-mig | GPU 2 | mlx5_2, mlx5_3 | PXB | 1 | – | 16-31,144-159 |" in md
    assert "| b-h100 | GPU 5 | mlx5_5 | PIX | 1 | – | 48-95,144-191 |" in md
    assert "| d-broken | - | not read: nvidia-smi topo -m: cannot read line 5: 'GPU2 NV18' |" in md
    assert "c-login" not in md.split("GPUs: slots")[1].split("Storage tiers")[0]  # no GPU, no row


# ------------------------------------------------------------------------------------------ the audit probe

TEXT_FALLBACK = ('case "$*" in\n'
                 '  "-q -x") echo "<nvidia_smi_log><gpu id=";;\n'  # cut short: not XML
                 '  "-q") cat "%s";;\n'
                 '  "topo -m") cat "%s";;\n'
                 '  *) exit 2;;\nesac\n') % (SMI / "q_h100x8_r565_gpu0.txt", SMI / "topo-m_h100_nv18_8nic_spaces.txt")


def _audit(tmp_path, monkeypatch, nvidia_smi):
    _fake_tools(tmp_path / "bin", nvidia_smi)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    _, doc = run_probe("audit", str(tmp_path / "out"), "r1", "gpu-node-9", params={"dcgm_diag": False})
    assert doc["status"] == "ok"
    return doc


def test_audit_reads_the_text_report_where_the_xml_fails_and_records_topology(tmp_path, monkeypatch):
    doc = _audit(tmp_path, monkeypatch, TEXT_FALLBACK)
    nv, src = doc["facts"]["gpu_nvidia"], doc["facts"]["sources"]
    assert nv["format"] == "text" and nv["rc"] == 0 and nv["xml_error"].startswith("nvidia-smi -q -x: unreadable XML")
    assert nv["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" and nv["gpus"][0]["module_id"] == 2
    assert src["nvidia_smi"]["status"] == "error" and src["nvidia_smi_text"]["status"] == "ok"
    assert nv["topology"]["gpus"]["6"]["nearest_nics"] == ["mlx5_6"] and src["nvidia_topo"]["status"] == "ok"
    assert {"audit.nvidia-smi-q.txt", "audit.nvidia-smi-topo-m.txt"} <= set(doc["raw"])
    assert doc["device"]["model"] == "NVIDIA H100 80GB HBM3"


def test_audit_names_the_unreadable_line_of_each_report(tmp_path, monkeypatch):
    body = ('case "$*" in\n  "-q -x") exit 6;;\n  "-q") printf "GPU 00000000:18:00.0\\nNo devices were found\\n";;\n'
            '  *) exit 2;;\nesac\n')
    doc = _audit(tmp_path, monkeypatch, body)
    nv, src = doc["facts"]["gpu_nvidia"], doc["facts"]["sources"]
    assert nv["rc"] == 6 and "gpus" not in nv and "topology" not in nv
    assert nv["error"] == "no output; nvidia-smi -q: cannot read line 2: 'No devices were found'"
    assert src["nvidia_smi_text"] == dict(src["nvidia_smi_text"], status="error",
                                          reason="nvidia-smi -q: cannot read line 2: 'No devices were found'")


def test_audit_topology_that_cannot_be_read_is_an_error_source(tmp_path, monkeypatch):
    lines = (SMI / "topo-m_gb200_4gpu_8nic.txt").read_text().splitlines()
    (tmp_path / "topo.txt").write_text("\n".join(lines[:3] + ["GPU1    NV18     X  ???"] + lines[4:]))
    body = ('case "$*" in\n  "-q -x") cat "%s";;\n  "topo -m") cat "%s";;\n  *) exit 2;;\nesac\n'
            % (FIX / "audit" / "nvidia-smi-q-x_gb200.xml", tmp_path / "topo.txt"))
    doc = _audit(tmp_path, monkeypatch, body)
    topo = doc["facts"]["gpu_nvidia"]["topology"]
    assert topo == {"error": "nvidia-smi topo -m: cannot read line 4: 'GPU1    NV18     X  ???'"}
    assert doc["facts"]["sources"]["nvidia_topo"]["status"] == "error"
    assert doc["facts"]["sources"]["nvidia_topo"]["reason"] == topo["error"]


def test_audit_without_nvidia_smi_runs_no_gpu_command(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("python3", "sh", "cat"):
        os.symlink("/usr/bin/" + tool if os.path.exists("/usr/bin/" + tool) else "/bin/" + tool, bindir / tool)
    monkeypatch.setenv("PATH", str(bindir))
    _, doc = run_probe("audit", str(tmp_path / "out"), "r1", "cpu-login", params={})
    assert doc["status"] == "ok" and doc["facts"]["gpu_nvidia"] == {"tool": False}
    assert doc["facts"]["sources"]["nvidia_smi"]["status"] == "missing"
    assert not {"nvidia_smi_text", "nvidia_topo"} & set(doc["facts"]["sources"])


# ---------------------------------------------------------------------------------------------------- perftest


def _perftest(tmp_path, monkeypatch, topo_body):
    from probes.network import perftest

    fake_bin(tmp_path, "nvidia-smi", 'case "$1" in topo) %s;; *) cat "%s";; esac\n'
             % (topo_body, SMI / "h100_8x_query.csv"))
    log = tmp_path / "ib_write_bw.args"
    fake_bin(tmp_path, "ib_write_bw", 'case "$1" in --help) echo "  --use_cuda=<cuda device id>"; exit 0;; esac\n'
             'echo "${CUDA_DEVICE_ORDER:-unset} $*" >> %s\ncase "$*" in *127.0.0.1*) cat %s;; esac\n'
             % (log, FIX / "perftest" / "ndr_write_bw_host.txt"))
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    sysfs = tmp_path / "infiniband"
    for hca in ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"):
        (sysfs / hca).mkdir(parents=True)
    monkeypatch.setattr(perftest, "SYSFS", str(sysfs))
    _, doc = run_probe("perftest", str(tmp_path / "out"), "r", "n1",
                       params={"hosts": ["n1"], "addresses": ["127.0.0.1"], "port": free_port(), "tests": ["write"],
                               "timeout_per_test": 20})
    clients = [line.split() for line in log.read_text().splitlines() if "--use_cuda" in line and "127.0.0.1" in line]
    return doc, {words[2]: words[-1] for words in clients}, {words[0] for words in clients}


def test_perftest_takes_the_gpu_nearest_each_rail(tmp_path, monkeypatch):
    topo = SMI / "topo-m_hgx-nv18_10nic_gpu-numa-id.txt"
    doc, use_cuda, order = _perftest(tmp_path, monkeypatch, 'cat "%s"' % topo)
    assert doc["status"] == "ok", doc["reason"]
    assert doc["facts"]["memories"] == "host, gpu"
    # mlx5_0-2 sit on GPU 3's switch and mlx5_3 on GPU 0's: not rail k -> GPU k
    assert use_cuda == {"mlx5_0": "--use_cuda=3", "mlx5_1": "--use_cuda=3", "mlx5_2": "--use_cuda=3",
                        "mlx5_3": "--use_cuda=0"}
    assert order == {"PCI_BUS_ID"}  # CUDA numbers the GPUs as nvidia-smi does
    choice = doc["facts"]["gpu_per_rail"]
    assert choice["rule"] == "nearest GPU (nvidia-smi topo -m)" and choice["why"] is None
    assert choice["rails"]["mlx5_3"] == {"gpu": 0, "link": "PIX"}
    assert "perftest.nvidia-smi-topo-m.txt" in doc["raw"]


def test_perftest_falls_back_to_rail_order_and_says_why(tmp_path, monkeypatch):
    doc, use_cuda, _ = _perftest(tmp_path, monkeypatch, 'echo "Topology not supported on this system"; exit 3')
    assert doc["status"] == "ok", doc["reason"]
    assert use_cuda == {"mlx5_%d" % k: "--use_cuda=%d" % k for k in range(4)}
    choice = doc["facts"]["gpu_per_rail"]
    assert choice["rule"] == "rail k uses GPU k mod 8"
    assert choice["why"] == "nvidia-smi topo -m: exit 3: Topology not supported on this system"


# ------------------------------------------------------------------- driver 575 readings and the PCIe link trained


def smi_node(smi):
    """A GPU node whose nvidia-smi readings are `smi` (parsed from a capture), one PCI device per GPU."""
    f = mig_a100_node()
    f["gpu_nvidia"] = dict(smi, tool=True, rc=0)
    template = next(iter(f["pci"]["devices"].values()))
    f["pci"]["devices"] = {g["pci_bus_id"][-12:].lower(): dict(template) for g in smi["gpus"]}
    return f


R575_XML = (SMI / "q-x_rtx4070-laptop_r575.xml").read_text()
RECOVERY = "\t\t<gpu_recovery_action>None</gpu_recovery_action>\n"


def test_driver_575_reset_status_is_the_recovery_action(tmp_path):
    """The r575 capture as recorded, then with only its gpu_recovery_action changed to each action NVIDIA's GPU memory
    error management guide lists, then without it (its Reset Status is deprecated: nothing left to judge). Before,
    the deprecated text was read as "No": pass whatever the recovery action, and pass with nothing reported."""
    assert RECOVERY in R575_XML
    nodes = {"as-captured": smi_node(audit_nvidia.parse_smi_xml(R575_XML)),
             "no-action": smi_node(audit_nvidia.parse_smi_xml(R575_XML.replace(RECOVERY, "")))}
    actions = {"reset": "Reset", "reboot": "Reboot", "drain-p2p": "Drain P2P", "drain-and-reset": "Drain and Reset"}
    for host, action in actions.items():
        changed = R575_XML.replace(RECOVERY, RECOVERY.replace(">None<", ">%s<" % action))
        nodes[host] = smi_node(audit_nvidia.parse_smi_xml(changed))
    t = rows_for(tmp_path, nodes)
    ok = t[("audit.gpu.reset_required", "as-captured")]
    assert (ok["status"], ok["observed"]) == ("pass", "none")
    for host, action in actions.items():
        row = t[("audit.gpu.reset_required", host)]
        assert (row["status"], row["observed"]) == ("fail", "GPU 0: recovery action %s" % action)
    none = t[("audit.gpu.reset_required", "no-action")]
    assert none["status"] == "skip" and none["reason"] == (
        "not reported by this driver: nvidia-smi gives neither a GPU Reset Status nor a GPU Recovery Action")


def test_driver_575_idle_power_reads_the_instantaneous_draw(tmp_path):
    """The r575 GTX 1650 text report with its one desktop process (gnome-shell, 1 MiB) left out, so that the GPU
    counts as idle, and a site limit for idle power (the rubric has none for GeForce boards). Before, "Power Draw"
    was gone from the report and the check skipped: "not reported: no GPU power draw"."""
    report = (SMI / "q_gtx1650-laptop_r575.txt").read_text()
    processes = report[report.index("    Processes\n"):report.index("    Capabilities\n")]
    smi = audit_nvidia.parse_smi_text(report.replace(processes, ""))
    rubric = grading.load_rubric()
    rubric["checks"] = [c for c in rubric["checks"] if c["id"] == "audit.gpu.idle_power"]
    rubric["checks"][0]["default_max"] = 20
    rubric.pop("consistency", None)
    (row,) = grading.grade(write_run(tmp_path, {"gtx1650": smi_node(smi)}), rubric)
    assert (row["status"], row["observed"], row["expected"]) == ("pass", "max 2.66 W", "<= 20 W at idle")


H100_TEXT = (SMI / "q_h100x8_r565_gpu0.txt").read_text()
H100_GEN = ("            PCIe Generation\n"
            "                Max                       : 5\n"
            "                Current                   : %d\n")


def test_pcie_gen_judges_the_link_trained_by_a_gpu_in_p0(tmp_path):
    """The H100 r565 capture (P0, Max 5, Current 5) as recorded, then with only its current generation changed to 4:
    a Gen5 H100 trained at Gen4. Before, only the maximum was compared: both passed."""
    assert H100_GEN % 5 in H100_TEXT
    nodes = {"gen5": smi_node(audit_nvidia.parse_smi_text(H100_TEXT)),
             "gen4": smi_node(audit_nvidia.parse_smi_text(H100_TEXT.replace(H100_GEN % 5, H100_GEN % 4)))}
    t = rows_for(tmp_path, nodes)
    low = t[("audit.gpu.pcie_gen", "gen4")]
    assert (low["status"], low["observed"], low["expected"]) == ("fail", "GPU 0 trained at Gen4", ">= Gen5")
    ok = t[("audit.gpu.pcie_gen", "gen5")]
    assert (ok["status"], ok["observed"], ok["expected"], ok["reason"]) == ("pass", "Gen5 (link trained)", ">= Gen5",
                                                                            "")


def test_pcie_gen_of_gpus_out_of_p0_is_their_maximum_and_the_row_says_so(tmp_path):
    """The RTX 4090 capture: GPU 0 idle at P8 (Current 1 of Max 4), GPU 1 busy at P2 (Current 4). Their links are
    judged on the generation GPU and slot support; the reason names them. Before, no reason was given."""
    smi = audit_nvidia.parse_smi_text((SMI / "q_rtx4090x8_r535_gpu0-1.txt").read_text())
    row = rows_for(tmp_path, {"rtx4090": smi_node(smi)})[("audit.gpu.pcie_gen", "rtx4090")]
    assert (row["status"], row["observed"], row["expected"]) == ("pass", "Gen4 (maximum)", ">= Gen4")
    assert row["reason"] == ("trained link not judged on GPU 0:P8, 1:P2 (not in P0: an idle GPU lowers its PCIe link "
                             "speed), only the generation GPU and slot support")
