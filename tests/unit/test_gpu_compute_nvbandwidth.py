"""nvbandwidth -j parsing, and the probe end to end with a stand-in nvbandwidth and nvidia-smi on PATH."""

import os
import stat
from pathlib import Path

import pytest

from probes.artifact import Artifact
from probes.cli import run_probe
from probes.gpu_compute import nvbandwidth

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def test_parse_eight_h200():
    parsed = nvbandwidth.parse((FIX / "nvbandwidth" / "h200x8_quick.json").read_text())
    assert parsed["version"] == "v0.8" and parsed["driver"] == "570.133.20" and len(parsed["devices"]) == 8
    names = [c["name"] for c in parsed["testcases"]]
    assert names == ["host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_write_ce",
                     "device_local_copy"]
    h2d = parsed["testcases"][0]
    assert len(h2d["matrix"]) == 1 and len(h2d["matrix"][0]) == 8
    assert h2d["matrix"][0][0] == pytest.approx(55.1943)
    assert sum(h2d["matrix"][0]) == pytest.approx(h2d["sum"], rel=1e-9)  # nvbandwidth's own sum agrees
    d2d = parsed["testcases"][2]
    assert [d2d["matrix"][i][i] for i in range(8)] == [None] * 8  # "N/A" on the diagonal


def test_cells_name_the_gpu_each_number_is_about():
    parsed = nvbandwidth.parse((FIX / "nvbandwidth" / "h200x8_quick.json").read_text())
    h2d, _, d2d, local = parsed["testcases"]
    cells = nvbandwidth.cells(h2d)
    assert [lab["gpu"] for lab, _ in cells] == list(range(8))  # CPU(row) -> GPU(column)
    d2d_cells = nvbandwidth.cells(d2d)
    assert len(d2d_cells) == 56  # 8 x 8 without the diagonal
    lab, value = next((lab, v) for lab, v in d2d_cells if lab["row"] == 2 and lab["col"] == 5)
    assert lab["gpu"] == 2 and lab["peer"] == 5 and 389 <= value <= 397
    assert [lab["gpu"] for lab, _ in nvbandwidth.cells(local)] == list(range(8))
    stacked = {"name": "x", "description": "memcpy CE GPU(row) <-> GPU(column) Total bandwidth (GB/s)",
               "matrix": [[None, 1.0], [2.0, None], [None, 3.0], [4.0, None]]}
    assert [(lab["part"], lab["gpu"], lab["peer"]) for lab, _ in nvbandwidth.cells(stacked)] == [
        (0, 0, 1), (0, 1, 0), (1, 0, 1), (1, 1, 0)]


def test_record_keeps_waived_and_errors_apart():
    art = Artifact("nvbandwidth", "r", "h")
    failed = nvbandwidth.record(art, nvbandwidth.parse((FIX / "nvbandwidth" / "h100x1_waived_error.json")
                                                       .read_text()))
    assert failed == ["device_to_device_memcpy_read_ce: Error (CUDA_ERROR_PEER_ACCESS_UNSUPPORTED peer access is "
                      "not supported between these two devices)"]
    assert art.facts["testcase.device_to_device_memcpy_write_ce"] == "Waived"
    assert art.facts["testcase.host_to_device_memcpy_ce"] == "Passed"
    assert "buffer size" in art.facts["warning"]
    gbps = [r for r in art.results if r["metric"] == "gbps"]
    assert len(gbps) == 1 and gbps[0]["value"] == pytest.approx(53.4187) and gbps[0]["labels"]["gpu"] == 0


def test_parse_ignores_text_before_the_json_and_refuses_garbage():
    text = "some banner line\n" + (FIX / "nvbandwidth" / "h100x1_waived_error.json").read_text()
    assert nvbandwidth.parse(text)["version"] == "v0.6"
    with pytest.raises(ValueError):
        nvbandwidth.parse("nvbandwidth: error while loading shared libraries: libcuda.so.1")
    with pytest.raises(ValueError):
        nvbandwidth.parse('{"other": 1}')


def _tool(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_probe_runs_nvbandwidth_with_json_output(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "nvidia-smi", "cat %s\n" % (FIX / "nvidia-smi" / "h200_8x_query.csv"))
    args_file = tmp_path / "args"
    _tool(bin_dir, "nvbandwidth", 'echo "$@" > %s\necho "$CUDA_DEVICE_ORDER" > %s.order\ncat %s\n'
          % (args_file, args_file, FIX / "nvbandwidth" / "h200x8_quick.json"))
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    _, doc = run_probe("nvbandwidth", str(tmp_path / "out"), "r", "h", params={"profile": "quick"})
    assert doc["status"] == "ok", doc["reason"]
    # the device-to-device test the quick profile runs is the one azhpc-nhc's line is drawn for (read)
    assert args_file.read_text().split() == ["-j", "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
                                             "device_to_device_memcpy_read_ce", "device_local_copy"]
    assert (tmp_path / "args.order").read_text().strip() == "PCI_BUS_ID"  # nvidia-smi's order, not fastest first
    assert doc["facts"]["gpu_numbering"] == "nvidia-smi index, matched by PCI address"
    assert doc["device"]["backend"] == "cuda" and doc["device"]["count"] == 8
    h2d = [r for r in doc["results"] if r["metric"] == "gbps" and r["labels"]["test"] == "host_to_device_memcpy_ce"]
    assert len(h2d) == 8 and min(r["value"] for r in h2d) > 55
    sums = {r["labels"]["test"]: r["value"] for r in doc["results"] if r["metric"] == "gbps_sum"}
    assert sums["host_to_device_memcpy_ce"] == pytest.approx(441.5991)
    assert doc["raw"] == ["nvbandwidth.out.json"]
    assert (tmp_path / "out" / "nvbandwidth.out.json").read_text().startswith("{")


def test_probe_skips_without_gpu_or_without_the_tool(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bin_dir)
    _, doc = run_probe("nvbandwidth", str(tmp_path / "a"), "r", "h")
    assert doc["status"] == "skipped" and "no NVIDIA GPU" in doc["reason"]
    _tool(bin_dir, "nvidia-smi", "cat %s\n" % (FIX / "nvidia-smi" / "h200_8x_query.csv"))
    _, doc = run_probe("nvbandwidth", str(tmp_path / "b"), "r", "h", params={"path": str(tmp_path / "nope")})
    assert doc["status"] == "skipped" and doc["reason"] == "nvbandwidth not found at %s" % (tmp_path / "nope")
    _tool(bin_dir, "nvbandwidth", "echo 'nvbandwidth: error while loading shared libraries' >&2\nexit 127\n")
    _, doc = run_probe("nvbandwidth", str(tmp_path / "c"), "r", "h")
    assert doc["status"] == "error" and "exit 127" in doc["reason"] and "shared libraries" in doc["reason"]


def test_one_gpus_degraded_nvlink_fails_that_gpu_and_the_node_not_its_neighbours():
    """nvbandwidth -j device_to_device_memcpy_read_ce on 8 x H100: GPU 5's NVLink is degraded, every copy to or from
    it runs at ~200 GB/s, the other pairs at 390 (its row and column of the matrix are low, as nvbandwidth by hand
    shows). compute.nvbandwidth_d2d fails GPU 5 alone, and the node on its slowest pair."""
    import json as _json

    from probes.artifact import Artifact as _Artifact
    from probes.gpu_compute.nvbandwidth import parse as _parse
    from probes.gpu_compute.nvbandwidth import record as _record
    from reports import grading as _grading
    from reports.load import run_of_artifacts
    from reports.phases.gpu_compute import grade as gc

    mat = [["N/A" if r == c else ("200.1" if 5 in (r, c) else "390.2") for c in range(8)] for r in range(8)]
    doc = {"nvbandwidth": {"version": "v0.7", "git_version": "", "CUDA Runtime Version": 12040, "Driver Version": "550",
           "GPU Device list": ["0: NVIDIA H100 80GB HBM3"] * 8,
           "testcases": [{"name": "device_to_device_memcpy_read_ce", "status": "Passed",
                          "bandwidth_description": "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)",
                          "bandwidth_matrix": mat, "sum": 0}]}}
    art = _Artifact("nvbandwidth", "r", "n1")
    art.device.update(backend="cuda", model="NVIDIA H100 80GB HBM3")
    _record(art, _parse(_json.dumps(doc)))
    info = _Artifact("node_info", "r", "n1")
    info.facts["gpu_model"] = "NVIDIA H100 80GB HBM3"
    run = run_of_artifacts([art.to_dict(), info.to_dict()])
    rubric = _grading.load_rubric()
    c = next(c for c in rubric["checks"] if c["id"] == "compute.nvbandwidth_d2d")
    rows = {r["subject"]: r for r in gc.grade_pairs(c, run, "n1")}
    assert [s for s, r in rows.items() if r["status"] == "fail"] == ["gpu=5", "slowest pair"]
    assert rows["gpu=5"]["observed"] == "200.1 GB/s median of its 14 pairs (slowest 200.1, with GPU 0)"
    assert rows["gpu=0"]["observed"] == "390.2 GB/s median of its 14 pairs (slowest 200.1, with GPU 5)"
    pair = rows["slowest pair"]
    assert pair["observed"] == "200.1 GB/s: GPU 0 and GPU 5 (gpu=0, peer=5)"
    assert pair["reason"] == "GPU 5 is the common factor: the median of its pairs is slow too"
    # the full grade runs the check through its kind, gpu_pairs
    graded = [r for r in _grading.grade(run, {"checks": [c]}) if r["status"] == "fail"]
    assert sorted(r["subject"] for r in graded) == ["gpu=5", "slowest pair"]


def _smi_gpus():
    from probes.common.device import parse_nvidia_query

    return parse_nvidia_query((FIX / "nvidia-smi" / "h200_8x_query.csv").read_text())


def test_gpus_are_named_by_nvidia_smis_index_of_the_same_pci_address():
    """nvbandwidth numbers GPUs as CUDA does. The real 8 x H200 run's device list, in the order CUDA's default
    fastest-first numbering can give (GPU 7's address first): each number is matched to nvidia-smi's GPU of the
    same address, so a slow cell names the GPU nvidia-smi, DCGM and the RMA form call by that index."""
    doc = nvbandwidth.parse((FIX / "nvbandwidth" / "h200x8_quick.json").read_text())
    assert nvbandwidth.numbering(doc["devices"], _smi_gpus()) == (
        {n: n for n in range(8)}, "nvidia-smi index, matched by PCI address")
    devices = [doc["devices"][7]] + doc["devices"][:7]  # "0: NVIDIA H200 (00000000:db:00)": nvidia-smi's GPU 7
    index, how = nvbandwidth.numbering(devices, _smi_gpus())
    assert index == {0: 7, 1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6}
    assert how == ("nvidia-smi index, matched by PCI address (nvbandwidth's 0 is GPU 7, 1 is GPU 0, 2 is GPU 1, "
                   "3 is GPU 2, 4 is GPU 3, 5 is GPU 4, 6 is GPU 5, 7 is GPU 6)")
    art = Artifact("nvbandwidth", "r", "h")
    assert nvbandwidth.record(art, dict(doc, devices=devices), _smi_gpus()) == []
    h2d = {r["labels"]["col"]: r for r in art.results
           if r["metric"] == "gbps" and r["labels"]["test"] == "host_to_device_memcpy_ce"}
    assert h2d[0]["labels"]["gpu"] == 7 and h2d[0]["value"] == doc["testcases"][0]["matrix"][0][0]
    d2d = next(r for r in art.results if r["metric"] == "gbps" and r["labels"]["test"] ==
               "device_to_device_memcpy_write_ce" and (r["labels"]["row"], r["labels"]["col"]) == (0, 3))
    assert (d2d["labels"]["gpu"], d2d["labels"]["peer"]) == (7, 2)
    assert art.facts["gpu_numbering"] == how


def test_without_pci_addresses_or_with_other_hosts_gpus_the_numbers_stay_nvbandwidths():
    from probes.gpu_compute.nvbandwidth_text import parse_text

    old = parse_text((FIX / "nvbandwidth" / "v0.2_h800x8_d2d_read.txt").read_text())  # "Device 0: NVIDIA H800"
    assert nvbandwidth.numbering(old["devices"], _smi_gpus()) == (
        None, "nvbandwidth's own (CUDA, in PCI bus order): it printed no PCI address to match")
    # a GPU CUDA lost, or one CUDA_VISIBLE_DEVICES hides: the numbers past it are not nvidia-smi's, and it is said
    assert nvbandwidth.numbering(old["devices"][:7], _smi_gpus())[1] == (
        "nvbandwidth's own (CUDA, in PCI bus order): it printed no PCI address to match; it lists 7 of nvidia-smi's "
        "8 GPUs: a number past a GPU it does not see is not nvidia-smi's")
    assert nvbandwidth.numbering(old["devices"][:2], _smi_gpus(), visible="2,3")[1] == (
        "nvbandwidth's own (CUDA, in PCI bus order): it printed no PCI address to match; CUDA_VISIBLE_DEVICES=2,3 "
        "and it lists 2 of nvidia-smi's 8 GPUs: a number past a GPU it does not see is not nvidia-smi's")
    # with addresses, a subset is matched all the same
    json_doc = nvbandwidth.parse((FIX / "nvbandwidth" / "h200x8_quick.json").read_text())
    assert nvbandwidth.numbering(json_doc["devices"][2:4], _smi_gpus(), visible="2,3") == (
        {0: 2, 1: 3}, "nvidia-smi index, matched by PCI address (nvbandwidth's 0 is GPU 2, 1 is GPU 3)")
    multi = parse_text((FIX / "nvbandwidth" / "v0.7_gb200_2node_multinode_d2d_read.txt").read_text())
    index, how = nvbandwidth.numbering(multi["devices"], _smi_gpus())
    assert index is None and how.endswith("one PCI address listed twice (GPUs of several hosts)"), how
    a100 = parse_text((FIX / "nvbandwidth" / "v0.7_a100x8_assert.txt").read_text())  # another node's addresses
    index, how = nvbandwidth.numbering(a100["devices"], _smi_gpus())
    assert index is None and how.endswith("0000:34:00.0, 0000:35:00.0, 0000:36:00.0, 0000:37:00.0, 0000:9b:00.0, "
                                          "0000:9c:00.0, 0000:9d:00.0, 0000:9e:00.0 not among nvidia-smi's GPUs"), how
