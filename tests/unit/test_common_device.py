from pathlib import Path

import pytest

from probes.common.command import CmdResult
from probes.common.device import nvidia_smi_error, parse_nvidia_query

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia-smi"


def test_h100_node_eight_gpus():
    gpus = parse_nvidia_query((FIX / "h100_8x_query.csv").read_text())
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["model"] for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[0]["memory_total_bytes"] == 81559 * 1024 * 1024
    assert gpus[0]["driver"] == "550.54.15"
    assert gpus[3]["pci_bus_id"] == "00000000:5D:00.0"
    assert gpus[0]["power_limit_w"] == 700.0
    assert len({g["uuid"] for g in gpus}) == 8


def test_h200_memory():
    gpus = parse_nvidia_query((FIX / "h200_8x_query.csv").read_text())
    assert len(gpus) == 8
    assert round(gpus[0]["memory_total_bytes"] / 2**30, 1) == 140.4


def test_not_applicable_fields_become_none():
    gpus = parse_nvidia_query((FIX / "gb200_4x_query.csv").read_text())
    assert len(gpus) == 4
    assert gpus[0]["serial"] is None and gpus[0]["mig_mode"] is None
    assert gpus[0]["model"] == "NVIDIA GB200"


def test_wrong_field_count_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="fields"):
        parse_nvidia_query("0, NVIDIA H100, GPU-x\n")


def test_driver_not_loaded_is_reported():
    text = (FIX / "driver_not_loaded.txt").read_text()
    res = CmdResult(["nvidia-smi"], 9, text, "", False, False)
    assert nvidia_smi_error(res).startswith("nvidia-smi exit 9: NVIDIA-SMI has failed")
    assert nvidia_smi_error(CmdResult(["nvidia-smi"], None, "", "not found", True, False)) is None
    assert nvidia_smi_error(CmdResult(["nvidia-smi"], None, "", "", False, True)) == "nvidia-smi timed out"
