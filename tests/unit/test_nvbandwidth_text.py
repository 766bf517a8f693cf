"""nvbandwidth's text output (v0.2 to v0.10, tests/fixtures/nvbandwidth/README.md) read into the testcases of its JSON
output: matrices with N/A, sums, coefficients of variation, notes, waived and broken testcases; and the probe running
a build that refuses -j."""

import json
import os
import stat
from pathlib import Path

import pytest

from probes.artifact import Artifact
from probes.cli import run_probe
from probes.gpu_compute import nvbandwidth
from probes.gpu_compute.nvbandwidth_text import parse_text

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def parsed(name):
    return nvbandwidth.parse((FIX / "nvbandwidth" / name).read_text())


def test_v02_full_run_of_eight_h800():
    doc = parsed("v0.2_h800x8_all.txt")  # nvbandwidth.parse hands text to the text reader
    assert (doc["version"], doc["git_version"], doc["cuda_version"], doc["driver"]) == ("v0.2", "42e94d2", 11080,
                                                                                         "525.105.17")
    assert doc["devices"] == ["NVIDIA H800"] * 8 and len(doc["testcases"]) == 16
    h2d = doc["testcases"][0]
    assert h2d["name"] == "host_to_device_memcpy_ce" and h2d["status"] == "Passed" and h2d["sum"] == 442.52
    assert h2d["matrix"] == [[55.28, 55.30, 55.32, 55.30, 55.31, 55.34, 55.32, 55.34]]
    assert sum(h2d["matrix"][0]) == pytest.approx(h2d["sum"], abs=0.01)  # the row adds up to nvbandwidth's sum
    d2d = doc["testcases"][4]
    assert d2d["name"] == "device_to_device_memcpy_read_ce" and len(d2d["matrix"]) == 8
    assert [d2d["matrix"][i][i] for i in range(8)] == [None] * 8 and d2d["matrix"][5][6] == 172.32
    one_to_all = doc["testcases"][-1]
    assert one_to_all["description"] == "memcpy CE GPU(column) <- All GPUs total bandwidth (GB/s)"
    # the cells name the GPU the way the JSON path does
    cells = nvbandwidth.cells(d2d)
    assert len(cells) == 56 and cells[0] == ({"test": "device_to_device_memcpy_read_ce", "row": 0, "col": 1, "gpu": 0,
                                              "peer": 1}, 172.16)


def test_v04_v05_v010_layouts():
    h100 = parsed("v0.4_h100x8_d2d_read.txt")
    assert h100["git_version"] == "v0.4.2-12-g8857188" and h100["testcases"][0]["sum"] == 20785.58
    assert h100["testcases"][0]["matrix"][2][4] == 372.96
    a10 = parsed("v0.5_a10_h2d.txt")  # leading spaces before the row index, a shell prompt before the banner
    assert a10["testcases"] == [{"name": "host_to_device_memcpy_ce", "status": "Passed", "sum": 25.17, "cv": None,
                                 "description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)", "columns": [0],
                                 "matrix": [[25.17]], "error": None}]
    v10 = parsed("v0.10_x2_azure_nhc.txt")  # no banner, COEFFICIENT_OF_VARIATION and a NOTE after a testcase
    assert [(c["name"], c["sum"], c["cv"]) for c in v10["testcases"]] == [
        ("host_to_device_memcpy_ce", 51.97, 0.01), ("device_to_host_memcpy_ce", 51.97, 0.02),
        ("device_to_device_memcpy_read_ce", 552.26, 0.01)]
    assert v10["testcases"][2]["matrix"] == [[None, 276.07], [276.19, None]]
    assert v10["notes"][0].startswith("NOTE: The reported results may not reflect")


def test_v08_full_run_of_one_gpu_with_its_host_name_latency_and_waivers():
    doc = parsed("v0.8_rtx3050_laptop_all.txt")
    assert (doc["version"], doc["cuda_version"], doc["driver"]) == ("v0.8", 12080, "572.83")
    assert doc["devices"] == ["NVIDIA GeForce RTX 3050 Laptop GPU (00000000:01:00)"]
    assert doc["unparsed"] == ["darrenlu"]  # v0.8 prints the host name before the device list
    cases = {c["name"]: c for c in doc["testcases"]}
    assert len(cases) == 18 and {c["status"] for c in cases.values()} == {"Passed"}  # bare "Waived: " lines: no name
    assert cases["host_to_device_memcpy_ce"]["matrix"] == [[12.98]]
    latency = cases["host_device_latency_sm"]
    assert latency["description"] == "memory latency SM CPU(row) <-> GPU(column) (ns)" and latency["sum"] == 613.22
    # recorded in ns, never as a bandwidth
    art = Artifact("nvbandwidth", "r", "h")
    assert nvbandwidth.record(art, doc) == []
    by = {(r["metric"], r["labels"].get("test")): r for r in art.results}
    assert by[("latency_ns_mean", "host_device_latency_sm")]["value"] == pytest.approx(613.22)
    assert by[("latency_ns_mean", "host_device_latency_sm")]["unit"] == "ns"
    assert ("gbps_sum", "host_device_latency_sm") not in by
    assert by[("gbps_sum", "device_local_copy")]["value"] == pytest.approx(84.33)


def test_v08_matrix_cut_before_its_running_line_is_named_by_its_sum():
    # NVIDIA/nvbandwidth#50: 6 PCIe A6000s, the device list and the Running line replaced with "..." by the author
    doc = parsed("v0.8_a6000x6_d2d_read_cut.txt")
    (case,) = doc["testcases"]
    assert (case["name"], case["status"], case["sum"]) == ("device_to_device_memcpy_read_ce", "Passed", 715.53)
    assert case["matrix"][0] == [None, 26.34, 26.35, 21.95, 22.64, 21.8] and doc["unparsed"] == ["..."]
    assert sum(v for row in case["matrix"] for v in row if v) == pytest.approx(715.53, abs=0.05)


def test_v07_multinode_over_mpi_names_its_hosts():
    # two GB200 trays (OCI, Kubernetes MPIJob): ssh warnings and Open MPI's binding lines before the banner
    doc = parsed("v0.7_gb200_2node_multinode_d2d_read.txt")
    assert doc["hosts"] == ["nvbandwidth-test-worker-0", "nvbandwidth-test-worker-1"] and len(doc["devices"]) == 8
    assert doc["mpi_version"].startswith("Open MPI v4.1.4") and doc["driver"] == "570.124.06"
    (case,) = doc["testcases"]
    assert case["name"] == "multinode_device_to_device_memcpy_read_ce" and case["sum"] == 44685.29
    assert len(case["matrix"]) == 8 and min(v for row in case["matrix"] for v in row if v) > 797
    assert len(doc["unparsed"]) == 10 and doc["unparsed"][0].startswith("Warning: Permanently added")


def test_v010_cuda_versions_in_both_spellings():
    doc = parse_text("nvbandwidth Version: v0.10.0\nBuilt from Git version: v0.10\n\n"
                     "CUDA Runtime Version: 13.3 (13030)\nCUDA Driver Version (API): 13.3 (13030)\n"
                     "Driver Version: 610.57.04\n\nWaiving device_to_device_memcpy_read_ce.\n")
    assert (doc["cuda_version"], doc["cuda_driver"], doc["driver"]) == (13030, 13030, "610.57.04")


def test_waived_and_broken_testcases():
    waived = parsed("v0.2_rtx2080ti_x2_waiving.txt")
    assert [(c["name"], c["status"]) for c in waived["testcases"]] == [("device_to_device_memcpy_write_ce", "Waived")]
    l40s = parsed("v0.4_l40sx8_aborted.txt")
    assert l40s["testcases"][0]["status"] == "Error"
    assert l40s["testcases"][0]["error"] == "Invalid value when checking the pattern at <0x7fac6200e480>"
    a100 = parsed("v0.7_a100x8_assert.txt")
    assert a100["devices"][0] == "NVIDIA A100-SXM4-80GB (00000000:34:00)"
    assert (a100["testcases"][0]["status"], a100["testcases"][0]["error"]) == (
        "Error", "Invalid value when checking the pattern at 0x70a640000000")
    cut = parse_text("Running host_to_device_memcpy_ce.\n")
    assert cut["testcases"][0]["error"] == "no result: the output ends after its Running line"


def test_record_of_text_results():
    art = Artifact("nvbandwidth", "r", "h")
    failed = nvbandwidth.record(art, parsed("v0.4_l40sx8_aborted.txt"))
    assert failed == ["one_to_all_read_sm: Error (Invalid value when checking the pattern at <0x7fac6200e480>)"]
    assert art.facts["nvbandwidth_version"] == "v0.4" and art.facts["devices_listed"] == 8
    art = Artifact("nvbandwidth", "r", "h")
    assert nvbandwidth.record(art, parsed("v0.10_x2_azure_nhc.txt")) == []
    sums = {r["labels"]["test"]: r["value"] for r in art.results if r["metric"] == "gbps_sum"}
    assert sums["device_to_device_memcpy_read_ce"] == pytest.approx(552.26)


@pytest.mark.parametrize("text, error", [
    ("nvbandwidth: error while loading shared libraries: libcuda.so.1: cannot open shared object file\n",
     "nvbandwidth: cannot read 'nvbandwidth: error while loading shared libraries: libcuda.so.1: cannot open shared "
     "object file'"),
    ("", "nvbandwidth: no output"),
    ('{\n   "nvbandwidth" : \n   {\n      "CUDA Runtime Version" : 12040,\n      "testcases" : \n      [\n',
     "nvbandwidth: cannot read"),
])
def test_unreadable_output_names_the_line(text, error):
    with pytest.raises(ValueError) as exc:
        nvbandwidth.parse(text)
    assert str(exc.value).startswith(error)


def _tool(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_probe_reads_text_when_json_is_refused(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _tool(bin_dir, "nvidia-smi", "cat %s\n" % (FIX / "nvidia-smi" / "h200_8x_query.csv"))
    args = tmp_path / "args"
    _tool(bin_dir, "nvbandwidth", 'echo "$@" >> %s\n[ "$1" = -j ] && { echo "ERROR: unrecognised option \'-j\'" >&2; '
                                  'exit 1; }\ncat %s\n' % (args, FIX / "nvbandwidth" / "v0.2_h800x8_all.txt"))
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    _, doc = run_probe("nvbandwidth", str(tmp_path / "out"), "r", "h", params={"profile": "quick", "tests": []})
    assert doc["status"] == "ok", doc["reason"]
    assert [line.split()[:1] for line in args.read_text().splitlines()] == [["-j"], []]
    assert doc["facts"]["json_unavailable"] == "ERROR: unrecognised option '-j'"
    assert doc["facts"]["nvbandwidth_version"] == "v0.2" and doc["raw"] == ["nvbandwidth.out.txt"]
    sums = {r["labels"]["test"]: r["value"] for r in doc["results"] if r["metric"] == "gbps_sum"}
    assert len(sums) == 16 and sums["host_to_device_memcpy_ce"] == pytest.approx(442.52, abs=0.01)


def test_a_bidirectional_testcase_is_three_stacked_matrices_and_its_totals_are_the_totals():
    """v0.10 on 7×B300: a bidirectional testcase prints Read1, Read2 and their Total, each with a SUM of its own
    (…_read1, …_read2, …_total). Before, the text reader took the second SUM line for the tool's error (the testcase
    an Error) and the next matrix's column line for a row; and from the JSON's stacked rows the probe's sum was
    Read1 + Read2 + Total, twice nvbandwidth's SUM, with min and max from two kinds of number."""
    doc = parse_text((FIX / "nvbandwidth" / "v0.10_b300x7_d2d_bidirectional.txt").read_text())
    write, bidir = doc["testcases"]
    assert (write["status"], write["sum"], len(write["matrix"])) == ("Passed", 32521.5, 7)
    assert bidir["status"] == "Passed" and bidir["error"] is None
    assert bidir["sum"] == 63869.9 and len(bidir["matrix"]) == 21  # Read1, Read2, Total: 7 rows each
    art = Artifact("nvbandwidth", "r", "h")
    assert nvbandwidth.record(art, doc) == []
    agg = {r["metric"]: r["value"] for r in art.results
           if r["labels"] == {"test": "device_to_device_bidirectional_memcpy_read_ce"}}
    # nvbandwidth's own SUM of the Total matrix (the cells are printed to two decimals)
    assert agg["gbps_sum"] == pytest.approx(63869.9, abs=0.1)
    assert (agg["gbps_min"], agg["gbps_max"]) == (1517.86, 1522.36)
    parts = {r["labels"].get("part") for r in art.results if r["metric"] == "gbps"
             and r["labels"]["test"] == "device_to_device_bidirectional_memcpy_read_ce"}
    assert parts == {0, 1, 2}  # every cell is kept, labelled by its matrix


# v0.6 and v0.7 print the bidirectional device-to-device testcases with the host testcases' wording, "memcpy CE
# CPU(row) <-> GPU(column) Read1/Read2/Total bandwidth (GB/s)", although their matrices are GPU x GPU
# (NVIDIA/nvbandwidth testcases_ce.cpp at commit 040fd281, multinode_testcases.cpp). No capture of that wording was
# found (tests/fixtures/nvbandwidth/README.md): these tests put those format strings on the real 7×B300 capture,
# whose numbers and layout are otherwise the same as v0.6's.
V06_WORDING = {"memcpy CE GPU(row) <-> GPU(column) %s bandwidth (GB/s)" % part:
               "memcpy CE CPU(row) <-> GPU(column) %s bandwidth (GB/s)" % part for part in ("Read1", "Read2", "Total")}
BIDIR = "device_to_device_bidirectional_memcpy_read_ce"


def _b300_in_v06_wording():
    text = (FIX / "nvbandwidth" / "v0.10_b300x7_d2d_bidirectional.txt").read_text()
    for new, old in V06_WORDING.items():
        assert new in text
        text = text.replace(new, old)
    return text


def _bidir_results(doc):
    art = Artifact("nvbandwidth", "r", "h")
    assert nvbandwidth.record(art, doc) == []
    agg = {r["metric"]: r["value"] for r in art.results if r["labels"] == {"test": BIDIR}}
    cells = [r["labels"] for r in art.results if r["metric"] == "gbps" and r["labels"]["test"] == BIDIR]
    return agg, cells


def _assert_the_totals_of_a_gpu_by_gpu_testcase(agg, cells):
    # before: "CPU(row)" made every cell a host cell (gpu = its column, no part): Read1 + Read2 + Total summed,
    # 127739.7 GB/s, min 758.63 (a Read2 cell), mean 1013.8
    assert agg["gbps_sum"] == pytest.approx(63869.9, abs=0.1)  # nvbandwidth's SUM …_total
    assert (agg["gbps_min"], agg["gbps_max"]) == (1517.86, 1522.36)
    assert agg["gbps_mean"] == pytest.approx(1520.71, abs=0.01)
    assert {c["part"] for c in cells} == {0, 1, 2}
    assert cells[0] == {"test": BIDIR, "row": 0, "col": 1, "part": 0, "gpu": 0, "peer": 1}


def test_v06_wording_of_a_bidirectional_gpu_testcase_text():
    doc = parse_text(_b300_in_v06_wording())
    bidir = doc["testcases"][1]
    assert bidir["description"] == "memcpy CE CPU(row) <-> GPU(column) Total bandwidth (GB/s)"
    assert len(bidir["matrix"]) == 21 and bidir["sum"] == 63869.9
    _assert_the_totals_of_a_gpu_by_gpu_testcase(*_bidir_results(doc))


def test_v06_wording_of_a_bidirectional_gpu_testcase_json():
    """The same testcase as `-j` writes it (json_output.cpp addTestcaseResults): the three matrices appended to one
    bandwidth_matrix, cells as strings, and the description and sum of the last call, the Total's."""
    stacked = parse_text(_b300_in_v06_wording())["testcases"][1]["matrix"]
    case = {"name": BIDIR, "status": "Passed", "sum": 63869.9,
            "bandwidth_description": "memcpy CE CPU(row) <-> GPU(column) Total bandwidth (GB/s)",
            "bandwidth_matrix": [["N/A" if v is None else "%g" % v for v in row] for row in stacked]}
    doc = nvbandwidth.parse(json.dumps({"nvbandwidth": {"version": "v0.6", "git_version": "v0.6",
                                                        "CUDA Runtime Version": 12040, "testcases": [case]}}))
    _assert_the_totals_of_a_gpu_by_gpu_testcase(*_bidir_results(doc))


def test_host_testcases_keep_one_cell_per_gpu_column():
    # a host testcase is one row whatever its description says (v0.2 on 8×H800: H2D, then the bidirectional one)
    doc = parsed("v0.2_h800x8_all.txt")
    h2d = next(c for c in doc["testcases"] if c["name"] == "host_to_device_bidirectional_memcpy_ce")
    assert h2d["description"] == "memcpy CE CPU(row) <-> GPU(column) bandwidth (GB/s)"
    assert [labels for labels, _ in nvbandwidth.cells(h2d)][:2] == [
        {"test": "host_to_device_bidirectional_memcpy_ce", "row": 0, "col": 0, "gpu": 0},
        {"test": "host_to_device_bidirectional_memcpy_ce", "row": 0, "col": 1, "gpu": 1}]
