"""nvidia-smi parsers on real captures (tests/fixtures/nvidia-smi/README.md names each source): `-q -x` of a MIG
A100 and of a driver 575 laptop GPU, `-q` text of H100, RTX 4090 and driver 575 laptop GPUs, `topo -m` of six systems,
and the odd cases made from them."""

from pathlib import Path

import pytest

from probes.audit import nvidia as audit_nvidia
from probes.common import gpu_topo

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def text(name):
    return (FIX / name).read_text()


# ---------------------------------------------------------------------------------------------- -q -x and -q


def test_mig_a100_xml_inventory_and_remapped_rows_not_read():
    smi = audit_nvidia.parse_smi_xml(text("q-x_a100-sxm4-80gb_mig_r535.xml"))
    assert smi["driver_version"] == "535.54.03" and smi["attached_gpus"] == 4
    g = smi["gpus"][0]
    assert g["name"] == "NVIDIA A100-SXM4-80GB" and g["mig_mode"] == "Enabled" and g["mig_mode_pending"] == "Enabled"
    assert [d["gpu_instance_id"] for d in g["mig_devices"]] == [3, 4, 5, 6] and g["mig_gpu_instances"] == 4
    assert g["mig_devices"][0] == {"index": 0, "gpu_instance_id": 3, "compute_instance_id": 0, "sm_count": 14,
                                   "memory_total_mib": 19968, "sram_uncorrectable_volatile": 0}
    assert g["module_id"] == 4 and g["virtualization_mode"] == "None"
    # under MIG nvidia-smi prints <remapped_rows>N/A</remapped_rows>: not read, which is not "no row remapping"
    assert g["remap_reported"] is False and g["remapped_rows_uncorrectable"] is None and g["remap_pending"] is None
    assert g["ecc_uncorrectable_volatile"] == 0 and g["power_limit_w"] == 500 and g["memory_total_mib"] == 81920


def test_h100_text_r565_same_fields_as_the_xml():
    smi = audit_nvidia.parse_smi_text(text("q_h100x8_r565_gpu0.txt"))
    assert (smi["driver_version"], smi["cuda_version"], smi["attached_gpus"]) == ("565.57.01", "12.7", 8)
    g = smi["gpus"][0]
    assert g["name"] == "NVIDIA H100 80GB HBM3" and g["pci_bus_id"] == "00000000:18:00.0"
    assert g["uuid"] == "GPU-b42dd28e-ffdd-8720-1df0-98bd8cdc05b1" and g["vbios"] == "96.00.74.00.01"
    assert g["module_id"] == 2  # under Platform Info from driver 565
    assert (g["mig_mode"], g["virtualization_mode"], g["persistence_mode"]) == ("Disabled", "None", "Enabled")
    assert g["remap_reported"] is True and g["remapped_rows_uncorrectable"] == 0 and g["remap_failure"] is False
    assert g["ecc_uncorrectable_volatile"] == 0 and g["sram_threshold_exceeded"] is False
    assert (g["pcie_gen_max"], g["pcie_width_current"], g["pcie_replay_counter"]) == (5, 16, 7)
    assert g["active_clock_reasons"] == ["gpu_idle"] and g["reset_required"] is False
    assert g["power_draw_w"] == pytest.approx(100.89) and g["power_limit_default_w"] == 700
    assert g["fabric_state"] == "Completed" and g["fabric_clique_id"] == "0"
    assert g["app_clock_graphics_mhz"] == 1980 and g["memory_total_mib"] == 81559 and g["processes"] == 0


def test_rtx4090_text_r535_busy_gpu_and_top_level_module_id():
    gpus = audit_nvidia.parse_smi_text(text("q_rtx4090x8_r535_gpu0-1.txt"))["gpus"]
    assert [g["pci_bus_id"] for g in gpus] == ["00000000:01:00.0", "00000000:23:00.0"]
    idle, busy = gpus
    assert idle["module_id"] == 1 and idle["mig_mode"] is None and idle["ecc_mode"] == "Disabled"
    assert busy["active_clock_reasons"] == ["sw_power_cap"] and busy["utilization_gpu_pct"] == 97
    assert busy["processes"] == 1 and busy["memory_used_mib"] == 21608 and busy["power_draw_w"] == pytest.approx(445.38)
    assert (busy["pcie_gen_current"], idle["pcie_gen_current"]) == (4, 1)


def test_r575_xml_deprecated_reset_status_recovery_action_and_instant_power():
    """Driver 575 (a GeForce RTX 4070 laptop GPU): Reset Required and Drain and Reset Recommended print "Requested
    functionality has been deprecated", the GPU's needs are in gpu_recovery_action, and the power readings have
    instant_power_draw and average_power_draw but no power_draw."""
    smi = audit_nvidia.parse_smi_xml(text("q-x_rtx4070-laptop_r575.xml"))
    assert smi["driver_version"] == "575.51.02"
    g = smi["gpus"][0]
    # before: False and False (the deprecated text read as a "No"), recovery action None ("None" taken for N/A),
    # power draw None, module id None (<platformInfo> not read)
    assert (g["reset_required"], g["drain_and_reset_recommended"], g["recovery_action"]) == (None, None, "None")
    assert g["power_draw_w"] == 11.26  # instant_power_draw; average_power_draw is 11.15
    assert (g["power_limit_w"], g["power_limit_default_w"], g["power_limit_max_w"]) == (95, 55, 140)
    assert g["module_power_draw_w"] is None  # N/A in the capture
    assert g["module_id"] == 1
    assert (g["performance_state"], g["pcie_gen_max"], g["pcie_gen_current"]) == ("P5", 4, 2)
    assert (g["utilization_gpu_pct"], g["processes"]) == (30, 8)


def test_r575_text_same_readings_as_its_xml():
    """`nvidia-smi -q` of driver 575 (a GeForce GTX 1650 laptop GPU): the same deprecated reset fields,
    "Instantaneous Power Draw" beside an N/A "Average Power Draw", and "GPU" (no longer "Gpu") under Utilization."""
    smi = audit_nvidia.parse_smi_text(text("q_gtx1650-laptop_r575.txt"))
    assert (smi["driver_version"], smi["cuda_version"]) == ("575.57.08", "12.9")
    g = smi["gpus"][0]
    assert (g["reset_required"], g["drain_and_reset_recommended"], g["recovery_action"]) == (None, None, "None")
    assert g["power_draw_w"] == 2.66 and g["power_limit_w"] == 50  # before: power draw None
    assert g["utilization_gpu_pct"] == 0 and g["processes"] == 1  # before: utilization None
    assert (g["performance_state"], g["pcie_gen_max"], g["pcie_gen_current"]) == ("P8", 3, 1)


def test_text_and_xml_give_the_same_fields():
    """One set of field paths reads both: a text report yields every key an XML report does."""
    from_text = audit_nvidia.parse_smi_text(text("q_h100x8_r565_gpu0.txt"))["gpus"][0]
    from_xml = audit_nvidia.parse_smi_xml(text("q-x_a100-sxm4-80gb_mig_r535.xml"))["gpus"][0]
    assert set(from_text) == set(from_xml)


@pytest.mark.parametrize("broken,line", [
    ("", None),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", 1),
])
def test_text_that_is_no_report_is_an_error_naming_the_tool(broken, line):
    with pytest.raises(ValueError) as err:
        audit_nvidia.parse_smi_text(broken)
    assert str(err.value).startswith("nvidia-smi -q: ")
    if line:
        assert "line %d" % line in str(err.value) and "NVIDIA-SMI has failed" in str(err.value)


def test_text_with_an_unreadable_line_names_it():
    lines = text("q_h100x8_r565_gpu0.txt").splitlines()
    at = lines.index("    Persistence Mode                      : Enabled")
    lines.insert(at, "Segmentation fault (core dumped)")
    with pytest.raises(ValueError) as err:
        audit_nvidia.parse_smi_text("\n".join(lines))
    assert str(err.value) == "nvidia-smi -q: cannot read line %d: 'Segmentation fault (core dumped)'" % (at + 1)


# ---------------------------------------------------------------------------------------------------- topo -m


def topo(name):
    parsed = gpu_topo.parse(text(name))
    assert parsed["error"] is None, parsed["error"]
    return parsed


def test_h100_spaces_each_gpu_has_its_own_pix_nic():
    t = topo("topo-m_h100_nv18_8nic_spaces.txt")
    assert t["nics"] == ["mlx5_%d" % i for i in range(8)] and sorted(t["gpus"]) == list(range(8))
    g0 = t["gpus"][0]
    assert g0["links"]["GPU7"] == "NV18" and g0["links"]["mlx5_0"] == "PIX" and g0["links"]["mlx5_1"] == "NODE"
    assert g0["links"]["mlx5_4"] == "SYS"
    assert (g0["cpu_affinity"], g0["numa_affinity"], g0["gpu_numa_id"]) == ("0-47,96-143", "0", None)
    assert t["gpus"][4]["numa_affinity"] == "1"
    near = gpu_topo.nearest_nics(t)
    assert near == {i: {"nics": ["mlx5_%d" % i], "link": "PIX"} for i in range(8)}
    assert t["legend"]["PIX"] == "Connection traversing at most a single PCIe bridge" and t["warnings"] == []


def test_hgx_tabs_escape_codes_nics_out_of_gpu_order():
    t = topo("topo-m_hgx-nv18_10nic_gpu-numa-id.txt")
    near = gpu_topo.nearest_nics(t)
    assert {i: n["nics"] for i, n in near.items()} == {
        0: ["mlx5_3"], 1: ["mlx5_5"], 2: ["mlx5_4"], 3: ["mlx5_0", "mlx5_1", "mlx5_2"], 4: ["mlx5_7"],
        5: ["mlx5_9"], 6: ["mlx5_8"], 7: ["mlx5_6"]}
    assert {n["link"] for n in near.values()} == {"PIX"}
    assert t["gpus"][5]["cpu_affinity"] == "64-127,192-255" and t["gpus"][5]["gpu_numa_id"] is None
    # rail order would give mlx5_0 GPU 0 and mlx5_3 GPU 3: the matrix says the opposite
    picked, why = gpu_topo.pick_gpus(t, ["mlx5_%d" % i for i in range(10)])
    assert why is None
    assert {nic: p["gpu"] for nic, p in picked.items()} == {
        "mlx5_0": 3, "mlx5_1": 3, "mlx5_2": 3, "mlx5_3": 0, "mlx5_4": 2, "mlx5_5": 1, "mlx5_6": 7, "mlx5_7": 4,
        "mlx5_8": 6, "mlx5_9": 5}


def test_dgx_a100_pxb_pairs_spread_over_both_gpus_and_storage_nics_over_all():
    t = topo("topo-m_dgx-a100_nv12_10nic.txt")
    assert t["gpus"][0]["links"]["GPU1"] == "NV12" and "gpu_numa_id" not in t["gpus"][0]
    assert (t["gpus"][6]["cpu_affinity"], t["gpus"][6]["numa_affinity"]) == ("80-95,208-223", "5")
    assert gpu_topo.nearest_nics(t)[2] == {"nics": ["mlx5_2", "mlx5_3"], "link": "PXB"}
    picked, _ = gpu_topo.pick_gpus(t, ["mlx5_%d" % i for i in range(10)])
    # two GPUs equally close to each NIC pair: rail k takes the (k mod 2)-th; the storage NICs are SYS from all 8
    assert [picked["mlx5_%d" % i]["gpu"] for i in range(8)] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert picked["mlx5_8"] == {"gpu": 0, "link": "SYS"} and picked["mlx5_9"] == {"gpu": 1, "link": "SYS"}


def test_gb200_every_nic_is_sys_and_grace_numa_ids():
    t = topo("topo-m_gb200_4gpu_8nic.txt")
    assert sorted(t["gpus"]) == [0, 1, 2, 3] and len(t["nics"]) == 8
    assert [t["gpus"][i]["gpu_numa_id"] for i in range(4)] == ["2", "10", "18", "26"]
    assert t["gpus"][2]["numa_affinity"] == "1,19-25,27-33" and t["gpus"][2]["cpu_affinity"] == "72-143"
    assert {n["link"] for n in gpu_topo.nearest_nics(t).values()} == {"SYS"}
    picked, _ = gpu_topo.pick_gpus(t, ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"])
    assert [p["gpu"] for p in picked.values()] == [0, 1, 2, 3]


def test_older_drivers_name_the_nics_in_the_header_and_say_soc():
    ac922 = topo("topo-m_ac922-v100_nv3_mlx5-columns.txt")
    assert ac922["nics"] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"] and ac922["warnings"] == []
    assert gpu_topo.nearest_nics(ac922)[2] == {"nics": ["mlx5_2", "mlx5_3"], "link": "NODE"}
    assert ac922["gpus"][3]["numa_affinity"] == "8"
    old = topo("topo-m_4gpu-pcie_soc-phb_old-driver.txt")
    assert old["gpus"][0]["links"] == {"GPU1": "PIX", "GPU2": "SYS", "GPU3": "SYS", "mlx5_0": "SYS"}
    assert gpu_topo.nearest_nics(old)[3] == {"nics": ["mlx5_0"], "link": "PHB"}
    assert old["gpus"][1]["cpu_affinity"] == "0-7" and "numa_affinity" not in old["gpus"][1]
    picked, _ = gpu_topo.pick_gpus(old, ["mlx5_0"])
    assert picked == {"mlx5_0": {"gpu": 2, "link": "PHB"}}


def test_a_matrix_cut_short_names_where_it_ends():
    lines = text("topo-m_dgx-a100_nv12_10nic.txt").splitlines()[:4]  # header and GPU0-GPU2
    t = gpu_topo.parse("\n".join(lines))
    assert t["error"].startswith("nvidia-smi topo -m: the matrix ends after line 4 ('GPU2\\tNV12\\tNV12\\t X ")
    assert t["error"].endswith("16-31,144-159\\t1') with no row for GPU3, GPU4, GPU5, GPU6, GPU7")
    assert t["gpus"] == {}


def test_a_row_cut_mid_line_and_a_foreign_line_are_errors_naming_the_line():
    lines = text("topo-m_h100_nv18_8nic_spaces.txt").splitlines()
    cut = lines[:4] + [lines[4][:40]] + lines[5:]
    assert gpu_topo.parse("\n".join(cut))["error"] == \
        "nvidia-smi topo -m: cannot read line 5: 'GPU2    NV18    NV18     X      NV18'"
    foreign = lines[:6] + ["GPU4    NV18    NV18    NV18    NV18     X      NV18    NV18    NV18    SYS     SYS  "
                           "   SYS     SYS     PIX     NODE    NODE    ??      48-95,144-191   1   N/A"] + lines[7:]
    assert "cannot read line 7: 'GPU4" in gpu_topo.parse("\n".join(foreign))["error"]


def test_no_nic_legend_keeps_the_matrix_and_says_which_nics_are_unnamed():
    body = text("topo-m_gb200_4gpu_8nic.txt").split("NIC Legend:")[0]
    t = gpu_topo.parse(body)
    assert t["error"] is None and t["nics"] == ["NIC%d" % i for i in range(8)]
    assert t["warnings"] == ["no NIC Legend entry for NIC0, NIC1, NIC2, NIC3, NIC4, NIC5, NIC6, NIC7: the RDMA "
                             "device behind them is unknown"]
    picked, why = gpu_topo.pick_gpus(t, ["mlx5_0"])
    assert picked is None and why.startswith("nvidia-smi topo -m has no column for mlx5_0 (columns: NIC0, NIC1")


def test_no_matrix_at_all():
    assert gpu_topo.parse("")["error"] == "nvidia-smi topo -m: no output"
    err = gpu_topo.parse("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n")["error"]
    assert err.startswith('nvidia-smi topo -m: no matrix header (GPU0 …); first line: "NVIDIA-SMI has failed')


def test_facts_for_the_audit():
    f = gpu_topo.facts(topo("topo-m_h100_nv18_8nic_spaces.txt"))
    assert f["gpus"]["3"]["nearest_nics"] == ["mlx5_3"] and f["gpus"]["3"]["nearest_link"] == "PIX"
    assert f["gpus"]["3"]["numa_affinity"] == "0" and f["error"] is None
    assert gpu_topo.facts(gpu_topo.parse("")) == {"error": "nvidia-smi topo -m: no output"}
