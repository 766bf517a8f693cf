"""amd-smi and rocm-smi text outputs read into the fields the audit grades, from real captures
(tests/fixtures/amd-smi/README.md, tests/fixtures/rocm-smi/README.md): amd-smi 6.x and 7.x layouts, a trimmed and an
elided output, rocm-smi 5.x and 6.x; and the audit's collection falling back to text with stand-in tools."""

import os
import stat
from pathlib import Path

import pytest

from probes.audit import amd
from probes.audit.amd import rocm_smi_cards
from probes.audit.collect import Collector
from probes.common.device import amd_smi_tree, describe, parse_amd_smi_list

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def text(path):
    return (FIX / path).read_text()


def test_amd_smi_static_text_mi300a_docs():
    (gpu,) = amd.parse_static(text("amd-smi/static_text_mi300a_amdsmi_docs.txt"))  # the CPU: 0 tree is passed over
    assert gpu == {"index": 0, "name": "AMD Instinct MI300A", "device_id": "0x74a0", "serial": "0xXXXXXXXXXXXXXX",
                   "pci_bus_id": "0000:01:00.0", "pcie_width_max": 16.0, "pcie_speed_max_gts": 32.0,
                   "pcie_interface": "Gen 5", "driver": "6.10.10", "driver_name": "amdgpu", "vbios": None,
                   "memory_total_mib": 96434.0, "power_limit_w": 550.0}


def test_amd_smi_static_text_ppt0_layout_and_ifwi():
    # amd-smi 7.x: LIMIT.PPT0 with SOCKET_POWER_LIMIT 0 W on an APU (no separate cap): the maximum is the cap
    (gpu,) = amd.parse_static(text("amd-smi/static_text_mi300a_ppt0_rocm_systems_docs.txt"))
    assert (gpu["power_limit_w"], gpu["driver"], gpu["memory_total_mib"]) == (550.0, "6.19.4", 96432.0)
    assert gpu["vbios"] is None  # IFWI VERSION: N/A


def test_amd_smi_static_text_snipped():
    (gpu,) = amd.parse_static(text("amd-smi/static_text_mi325x_vf_snipped.txt"))
    assert gpu["name"] == "AMD Instinct Mi325X VF" and gpu["pci_bus_id"] == "0000:83:00.0"
    assert gpu["device_id"] == "0x74b9" and gpu["driver"] is None and gpu["memory_total_mib"] is None


def test_amd_smi_metric_text_with_elisions_and_an_indent():
    readings = amd.parse_metric(text("amd-smi/metric_text_mi300x_amdsmi_changelog.txt"))
    assert readings == {0: {"power_draw_w": 140.0, "temperature_c": 37.0, "memory_temperature_c": None,
                            "pcie_width_current": 16.0, "pcie_speed_current_gts": 32.0, "pcie_replay_counter": None,
                            "ecc_uncorrectable_aggregate": 0.0, "ecc_correctable_aggregate": 0.0, "ecc_deferred": None,
                            "memory_used_mib": 283.0}}


def test_amd_smi_tree_keeps_sections_and_na_sections():
    tree = amd_smi_tree("GPU: 0\n    USAGE: N/A\n    ECC:\n        TOTAL_UNCORRECTABLE_COUNT: 3\n"
                        "GPU: 1\n    ECC:\n        TOTAL_UNCORRECTABLE_COUNT: 0\n")
    assert tree == [{"gpu": 0, "usage": "N/A", "ecc": {"total_uncorrectable_count": "3"}},
                    {"gpu": 1, "ecc": {"total_uncorrectable_count": "0"}}]
    assert amd.parse_metric("GPU: 0\n    USAGE: N/A\n    ECC:\n        TOTAL_UNCORRECTABLE_COUNT: 3\n")[0][
        "ecc_uncorrectable_aggregate"] == 3.0


def test_json_outputs_still_read():
    static = amd.parse_static(text("audit/amd-smi-static_mi300x.json"))
    assert len(static) == 8 and static[0]["power_limit_w"] == 750.0 and static[0]["vbios"] == "022.040.003.041.000001"
    assert amd.parse_metric(text("audit/amd-smi-metric_mi300x.json"))[0]["power_draw_w"] == 138.0


@pytest.mark.parametrize("output, error", [
    ("", "amd-smi static: no output"),
    (text("amd-smi/no_amdgpu_driver_errors.txt"),  # ROCm/ROCm#5535: no amdgpu driver
     "amd-smi static: cannot read 'ERROR:root:Unable to get devices, driver not initialized (amdgpu not found in "
     "modules)'"),
    ('[\n  {"gpu": 0,\n   "asic": {"market_name": "AMD Instinct MI300X"\n', "amd-smi static: cannot read "),
])
def test_amd_smi_unreadable_output_names_the_line(output, error):
    with pytest.raises(ValueError) as exc:
        amd.parse_static(output)
    assert str(exc.value).startswith(error)


def test_rocm_smi_text_mi300x_rocm6():
    gpus = amd.parse_rocm_smi(text("rocm-smi/rocm-smi-a_mi300x_x4_sriov.txt"))
    assert [g["pci_bus_id"] for g in gpus] == ["0000:26:00.0", "0000:46:00.0", "0000:65:00.0", "0000:85:00.0"]
    assert gpus[3] == {"index": 3, "name": "AMD Instinct MI300X OAM", "device_id": "0x74a1", "serial": "692347005902",
                       "pci_bus_id": "0000:85:00.0", "driver": "6.7.0", "vbios": "113-MI3SRIOV-001",
                       "temperature_c": 39.0, "memory_temperature_c": 36.0, "power_draw_w": 136.0,
                       "power_limit_w": 750.0, "memory_total_mib": None, "memory_used_mib": None,
                       "pcie_replay_counter": 0.0}


def test_rocm_smi_text_rocm5_apu_with_unsupported_fields():
    (gpu,) = amd.parse_rocm_smi(text("rocm-smi/rocm-smi-a_barcelo_apu_rocm5.txt"))
    assert (gpu["name"], gpu["device_id"], gpu["vbios"]) == ("Barcelo", "0x15e7", "113-BARCELO-003")
    assert (gpu["temperature_c"], gpu["power_draw_w"], gpu["power_limit_w"]) == (54.0, 5.0, None)  # "Unsupported"
    assert gpu["serial"] is None and gpu["driver"] == "6.3.12-gentoo-x86_64"


def test_rocm_smi_json_and_vram_fields():
    doc = ('WARNING: AMD GPU device(s) is/are in a low-power state. Check power control/runtime_status\n'
           '{"card0": {"Card Series": "AMD Instinct MI300X OAM", "VRAM Total Memory (B)": "205822885888", '
           '"VRAM Total Used Memory (B)": "299687936"}, "system": {"Driver version": "6.8.5"}}\n')
    (gpu,) = amd.parse_rocm_smi(doc)
    assert gpu["name"] == "AMD Instinct MI300X OAM" and gpu["driver"] == "6.8.5"
    assert gpu["memory_total_mib"] == pytest.approx(196288.0) and gpu["memory_used_mib"] == pytest.approx(285.8, 0.01)


def test_rocm_smi_concise_view_is_not_read_and_says_so():
    with pytest.raises(ValueError) as exc:
        rocm_smi_cards(text("rocm-smi/rocm-smi_concise_mi300x_x4.txt"))
    assert str(exc.value).startswith("rocm-smi: cannot read 'Device  [Model : Revision]    Temp ")


def test_rocm_smi_ras_table_mi50_with_status_only_blocks_and_a_cut():
    ras = amd.parse_rocm_smi_ras(text("rocm-smi/rocm-smi_showrasinfo_mi50.txt"))
    assert sorted(ras) == [0, 1]
    gpu0 = ras[0]
    assert (gpu0["ecc_correctable_aggregate"], gpu0["ecc_uncorrectable_aggregate"], gpu0["unparsed"]) == (0, 0, [])
    assert list(gpu0["blocks"]) == ["UMC", "SDMA", "GFX", "MMHUB", "ATHUB", "PCIE_BIF", "HDP", "XGMI_WAFL", "DF", "SMN",
                                    "SEM", "MP0", "MP1", "FUSE"]
    assert gpu0["blocks"]["UMC"] == {"status": "ENABLED", "correctable": 0, "uncorrectable": 0}
    assert gpu0["blocks"]["XGMI_WAFL"] == {"status": "DISABLED", "correctable": None, "uncorrectable": None}
    # the author's "..." after GPU[1]'s title: no counts read, and the line kept
    assert ras[1] == {"blocks": {}, "ecc_correctable_aggregate": None, "ecc_uncorrectable_aggregate": None,
                      "unparsed": ["..."]}


@pytest.mark.parametrize("output, error", [
    # rocm-smi --json --showrasinfo on an MI300A (ROCm/legacy-rocm-build#4374): no JSON for RAS
    ("WARNING: No JSON data to report\n", "rocm-smi --showrasinfo: cannot read 'WARNING: No JSON data to report'"),
    (text("rocm-smi/rocm-smi_concise_mi300x_x4.txt"), "rocm-smi --showrasinfo: cannot read 'Device  [Model"),
    ("", "rocm-smi --showrasinfo: no output"),
])
def test_rocm_smi_ras_unreadable_names_the_line(output, error):
    with pytest.raises(ValueError) as exc:
        amd.parse_rocm_smi_ras(output)
    assert str(exc.value).startswith(error)


def test_amd_smi_metric_ecc_json_of_amd_smi_26():
    readings = amd.parse_metric(text("amd-smi/amd-smi_26.2.1_r9700x4_metric_ecc.json"))  # {"gpu_data": [...]}
    assert sorted(readings) == [0, 1, 2, 3]
    assert {k: readings[3][k] for k in ("ecc_uncorrectable_aggregate", "ecc_correctable_aggregate", "ecc_deferred")} \
        == {"ecc_uncorrectable_aggregate": 0.0, "ecc_correctable_aggregate": 0.0, "ecc_deferred": 0.0}
    assert readings[3]["power_draw_w"] is None  # asked for ECC only


# ---- collection with stand-in tools ------------------------------------------------------------------------------


def _tools(tmp_path, monkeypatch, scripts):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir))
    return Collector(str(tmp_path))


REFUSE_JSON = 'for a in "$@"; do [ "$a" = --json ] && { echo "amd-smi: error: unrecognized arguments: --json" >&2; ' \
              'exit 2; }; done\n'


def test_collect_amd_smi_text_when_json_is_refused(tmp_path, monkeypatch):
    c = _tools(tmp_path, monkeypatch, {"amd-smi": REFUSE_JSON + 'case "$1" in\n  static) cat "%s";;\n'
                                       '  metric) cat "%s";;\nesac\n' % (
                                           FIX / "amd-smi/static_text_mi300a_amdsmi_docs.txt",
                                           FIX / "amd-smi/metric_text_mi300x_amdsmi_changelog.txt")})
    out = amd.collect(c)
    assert out["tool"] == "amd-smi" and len(out["gpus"]) == 1
    gpu = out["gpus"][0]
    assert gpu["name"] == "AMD Instinct MI300A" and gpu["power_draw_w"] == 140.0 and gpu["memory_used_mib"] == 283.0
    assert c.sources["amd_smi"]["status"] == "ok" and c.sources["amd_smi"]["format"] == "text"
    assert (tmp_path / "audit.amd-smi-static.txt").read_text().startswith("CPU: 0")


def test_collect_amd_smi_unreadable_is_an_error_naming_the_line(tmp_path, monkeypatch):
    c = _tools(tmp_path, monkeypatch, {"amd-smi": 'cat "%s"; exit 1\n' % (FIX / "amd-smi/no_amdgpu_driver_errors.txt")})
    out = amd.collect(c)
    assert out["gpus"] == [] and out["error"] == ("amd-smi static: cannot read 'ERROR:root:Unable to get devices, "
                                                  "driver not initialized (amdgpu not found in modules)' (exit 1)")
    assert c.sources["amd_smi"] == {"status": "error", "reason": out["error"]}


def test_collect_rocm_smi_text_fallback(tmp_path, monkeypatch):
    args = tmp_path / "args"
    body = ('echo "$@" >> "%s"\n' % args + REFUSE_JSON.replace("amd-smi", "rocm-smi")
            + '[ "$1" = --showrasinfo ] && { cat "%s"; exit 0; }\n' % (FIX / "rocm-smi/rocm-smi_showrasinfo_mi50.txt")
            + 'cat "%s"\nexit 2\n' % (FIX / "rocm-smi/rocm-smi-a_mi300x_x4_sriov.txt"))
    c = _tools(tmp_path, monkeypatch, {"rocm-smi": body})
    out = amd.collect(c)
    assert out["tool"] == "rocm-smi" and len(out["gpus"]) == 4 and out["gpus"][0]["power_limit_w"] == 750.0
    assert args.read_text().splitlines()[1].split() == amd.ROCM_SMI_ARGS  # --json refused, then the same as text
    assert "--showmaxpower" in amd.ROCM_SMI_ARGS and "--json" in args.read_text().splitlines()[0]
    assert c.sources["rocm_smi"]["status"] == "ok" and c.sources["rocm_smi"]["rc"] == 2
    assert c.sources["amd_smi"]["status"] == "missing"
    # the ECC totals from its RAS table (text only), for the GPUs it has counts of
    assert args.read_text().splitlines()[2] == "--showrasinfo" and c.sources["rocm_smi_ras"]["status"] == "ok"
    assert (out["gpus"][0]["ecc_uncorrectable_aggregate"], out["gpus"][0]["ecc_correctable_aggregate"]) == (0, 0)
    assert "ecc_uncorrectable_aggregate" not in out["gpus"][1]
    assert (tmp_path / "audit.rocm-smi-ras.txt").read_text().startswith("$ sudo rocm-smi --showrasinfo")


def test_collect_on_a_host_without_amd_tools(tmp_path, monkeypatch):
    c = _tools(tmp_path, monkeypatch, {})
    out = amd.collect(c)
    assert out["tool"] is None and out["gpus"] == []
    assert c.sources["amd_smi"] == {"status": "missing", "reason": "amd-smi and rocm-smi not found"}
    assert os.listdir(tmp_path) == ["bin"]


# ---- GPU discovery for every probe (probes/common/device.py) -----------------------------------------------------


def test_amd_smi_list_text():
    gpus = parse_amd_smi_list(text("amd-smi/list_text_amdsmi_changelog.txt"))
    assert [(g["index"], g["pci_bus_id"], g["uuid"]) for g in gpus] == [(0, "0000:23:00.0", "<redacted>"),
                                                                       (1, "0000:26:00.0", "<redacted>")]


def test_describe_falls_back_to_amd_smi_list_text_and_never_raises(tmp_path, monkeypatch):
    listing = FIX / "amd-smi/list_text_amdsmi_changelog.txt"
    # PATH holds only the stand-ins (no nvidia-smi of the machine running the test): cat by its full path
    _tools(tmp_path, monkeypatch, {"amd-smi": REFUSE_JSON + '/bin/cat "%s"\n' % listing})
    dev, gpus, facts = describe()
    assert (dev["backend"], dev["count"], facts["gpu_tool"], facts["gpu_error"]) == ("rocm", 2, "amd-smi", None)
    no_driver = FIX / "amd-smi/no_amdgpu_driver_errors.txt"
    (tmp_path / "bin" / "amd-smi").write_text('#!/bin/sh\n/bin/cat "%s"\n' % no_driver)
    dev, gpus, facts = describe()
    assert dev["backend"] == "cpu" and gpus == []
    assert facts["gpu_error"] == ("amd-smi list: cannot read 'ERROR:root:Unable to get devices, driver not initialized "
                                  "(amdgpu not found in modules)'")
