"""`dcgmi diag` read per test and GPU from real captures (tests/fixtures/dcgmi/README.md): JSON of DCGM 2.x/3.x and 4.x,
the text table of 3.1 to 4.4, failures, skips, cuInit warnings, an unreachable host engine, trimmed outputs; the
audit's collection with a stand-in dcgmi (JSON, then text when -j is refused) and the controller's row."""

import json
import os
import stat
from pathlib import Path

import pytest

from probes.audit import dcgm_diag, health
from probes.audit.collect import Collector
from reports.phases.audit import system
from reports.phases.audit.common import Error, View

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "dcgmi"


def parsed(name):
    return dcgm_diag.parse((FIX / name).read_text())


def result(diag, test):
    return next(r for r in diag["results"] if r["test"] == test)


def test_json_dcgm3_single_gpu_both_levels():
    r2 = parsed("diag-r2_json_t4_virtualclient.json")
    assert r2["format"] == "json" and r2["error"] is None and r2["version"] is None  # VirtualClient's capture has none
    assert len(r2["tests"]) == 11 and set(r2["tests"].values()) == {"pass"}
    assert result(r2, "PCIe") == {"test": "PCIe", "category": "Integration", "status": "pass", "gpus": {"pass": [0]},
                                  "messages": [], "info": [result(r2, "PCIe")["info"][0]]}
    assert "13.15 GB/s" in result(r2, "PCIe")["info"][0]
    r3 = parsed("diag-r3_json_t4_virtualclient.json")
    assert r3["tests"]["EUD Test"] == "skip" and r3["tests"]["Targeted Power"] == "pass" and len(r3["tests"]) == 16
    assert r3["failed"] == [] and r3["warned"] == []


def test_json_dcgm31_banner_and_nulls_between_tests():
    # NVIDIA's own "real output" sample: a WARNING line before the document, null entries, PASS in capitals,
    # gpu_ids as "0,1,…" and as integers
    diag = parsed("diag_json_3.1.0_8gpu_nvvs_banner_nulls.txt")
    assert diag["version"] == "3.1.0" and diag["error"] is None
    assert len(diag["tests"]) == 10 and set(diag["tests"].values()) == {"pass"}
    assert result(diag, "Denylist")["gpus"] == {"pass": list(range(8))}
    assert result(diag, "software")["gpus"] == {"pass": list(range(8))} and result(diag, "software")["category"] == \
        "Custom"


def test_json_dcgm4_entity_layout_fails_with_the_gpu_and_message():
    diag = parsed("diag-r1_json_4.2.3_gb10_software_fail.json")
    assert (diag["version"], diag["driver"]) == ("4.2.3", "580.82.09")
    sw = result(diag, "software")
    assert sw["status"] == "fail" and sw["gpus"] == {"fail": [0]} and diag["failed"] == ["software"]
    assert sw["messages"] == ['Persistence Mode: Persistence mode for GPU 0 is disabled. Enable persistence mode by '
                              'running "nvidia-smi -i <gpuId> -pm 1 " as root.']
    assert "SRAM Threshold" in sw["info"][0]  # test_summary's info kept apart from the failure message


def test_json_recorded_h100_fixture_keeps_its_reading():
    diag = dcgm_diag.parse((FIX.parent / "audit" / "dcgmi-diag-r1_h100.json").read_text())
    assert diag["failed"] == ["Page Retirement/Row Remap"]
    assert result(diag, "Page Retirement/Row Remap")["gpus"] == {"fail": [5]}


def test_text_dcgm318_deployment_failure_with_wrapped_error():
    diag = parsed("diag-r1_text_3.1.8_h200_persistence_fail.txt")
    assert (diag["format"], diag["version"], diag["driver"]) == ("text", "3.1.8", "550.127.08")
    assert diag["complete"] and diag["failed"] == ["Persistence Mode"] and len(diag["tests"]) == 9
    pm = result(diag, "Persistence Mode")
    assert pm["gpus"] == {} and pm["category"] == "Deployment"
    # the message was cut into 45-character slices; put back together, words are whole again
    assert pm["messages"][0].startswith("Persistence mode for GPU 0 is currently disabled. The DCGM diagnostic "
                                        "requires peristence mode to be enabled.")
    assert "GPU 5 is currently disabled" in pm["messages"][0]


def test_text_dcgm338_fail_all_with_cuinit_warnings_and_skips():
    diag = parsed("diag-r3_text_3.3.8_h100_cuinit_fail_all.txt")
    assert diag["version"] == "3.3.8" and diag["complete"] and diag["failed"] == ["GPU Memory"]
    mem = result(diag, "GPU Memory")
    assert mem["gpus"] == {"fail": "all"} and mem["category"] == "Hardware" and len(mem["messages"]) == 8
    assert mem["messages"][7] == ("GPU 7 Error using CUDA API cuInit Check DCGM and system logs for errors. Reset GPU. "
                                  "Restart DCGM. Rerun diagnostics. Unable to initialize CUDA library: 'system not yet "
                                  "initialized'. . Please check if a CUDA sample program can be run successfully on "
                                  "this host. Refer to https://github.com/nvidia/cuda-samples")
    assert diag["tests"]["PCIe"] == "skip" and diag["tests"]["EUD Test"] == "skip"
    pm = result(diag, "Persistence Mode")
    assert pm["status"] == "pass" and pm["messages"] == [] and pm["info"][0].startswith("Persistence mode for GPU 0")


def test_text_dcgm33_pass_all_and_empty_stress_section():
    diag = parsed("diag-r2_text_3.3.3_a100_pass.txt")  # starts with the shell prompt line
    assert diag["version"] == "3.3.3" and diag["error"] is None and diag["complete"]
    assert len(diag["tests"]) == 11 and set(diag["tests"].values()) == {"pass"}
    assert result(diag, "GPU Memory")["gpus"] == {"pass": "all"}
    pcie = parsed("diag-r2_text_3.3.0_rtx3090_pcie_fail_all.txt")
    assert pcie["failed"] == ["PCIe"] and result(pcie, "PCIe")["messages"][0].startswith(
        "GPU 0 Error using CUDA API cudaDeviceGetByPCIBusId Check DCGM and system logs for errors.")
    assert "'system has unsupported display driver / cuda driver combination'" in result(pcie, "PCIe")["messages"][0]
    assert pcie["tests"]["GPU Memory"] == "skip"


def test_text_dcgm4_per_gpu_rows_and_a_trimmed_table():
    diag = parsed("diag-r2_text_4.4.2_a10g_pass.txt")
    assert diag["version"] == "4.4.2" and diag["tests"] == {"software": "pass", "memory": "pass", "pcie": "pass"}
    assert result(diag, "memory")["gpus"] == {"pass": [0]} and diag["complete"]
    trimmed = parsed("diag-r1_text_4.2.3_l40s_trimmed.txt")
    assert trimmed["version"] == "4.2.3" and trimmed["complete"] is False
    assert result(trimmed, "software")["gpus"] == {"pass": [0, 1, 2, 3]} and trimmed["tests"]["memory"] == "pass"


@pytest.mark.parametrize("name, error", [
    ("hostengine_unreachable.txt", "dcgmi diag could not reach nv-hostengine: Error: unable to establish a connection "
                                   "to the specified host: localhost"),
    ("diag-r4_json_4.x_fragment_8gpu.txt", "dcgmi diag: cannot read '{'"),
])
def test_unreadable_outputs_are_errors_naming_the_tool(name, error):
    diag = parsed(name)
    assert diag["error"] == error and diag["results"] == []


def test_garbage_and_runtime_errors():
    assert dcgm_diag.parse("")["error"] == "dcgmi diag: no output"
    diag = dcgm_diag.parse("PARSE ERROR: Argument: -j (--json)\n             Couldn't find match for argument\n")
    assert diag["error"] == "dcgmi diag: cannot read 'PARSE ERROR: Argument: -j (--json)'"
    cut = (FIX / "diag-r1_json_4.2.3_gb10_software_fail.json").read_text()[:700]
    assert dcgm_diag.parse(cut)["error"].startswith("dcgmi diag: cannot read ")
    # dcgmi's JSON for a run it could not complete (dcgmi/Diag.cpp HelperDisplayFailureMessage)
    runtime = '{"DCGM GPU Diagnostic": {"runtime_error": "Error: Diagnostic could not be run because the Tesla ' \
              'recommended driver is not being used."}}'
    assert dcgm_diag.parse(runtime)["error"] == ("dcgmi diag: Error: Diagnostic could not be run because the Tesla "
                                                 "recommended driver is not being used.")
    odd = '{"DCGM GPU Diagnostic": {"test_categories": [{"tests": [{"name": "x", "results": [{"gpu_ids": ["a"]}]}]}]}}'
    assert dcgm_diag.parse(odd)["error"] == ("dcgmi diag: unexpected layout (ValueError: invalid literal for int() "
                                             "with base 10: 'a')")


# ---- the controller's row ----------------------------------------------------------------------------------------


def grade(diag, source=("ok", None)):
    facts = {"sources": {"dcgm_diag": {"status": source[0], "reason": source[1]}}, "health": {"dcgm_diag": diag}}
    return system.dcgm_diag(View(None, "h", {"facts": facts}), {})


def test_row_names_the_test_the_gpus_and_the_cause():
    status, observed, expected, reason = grade(parsed("diag-r3_text_3.3.8_h100_cuinit_fail_all.txt"))
    assert status == "fail" and observed.startswith("GPU Memory on all GPUs: GPU 0 Error using CUDA API cuInit")
    assert observed.endswith("(+7 more)") and "nvidia-fabricmanager" in reason
    status, observed, _, _ = grade(parsed("diag-r1_json_4.2.3_gb10_software_fail.json"))
    assert status == "fail" and observed.startswith("software on GPU 0: Persistence Mode: Persistence mode for GPU 0")
    status, observed, _, _ = grade(dcgm_diag.parse((FIX.parent / "audit" / "dcgmi-diag-r1_h100.json").read_text()))
    assert status == "fail" and observed.startswith("Page Retirement/Row Remap on GPU 5: GPU 5 had uncorrectable")


def test_row_pass_error_and_old_artifacts():
    assert grade(parsed("diag-r2_text_3.3.3_a100_pass.txt"))[:2] == ("pass", "11 tests passed (DCGM 3.3.3)")
    assert grade(parsed("diag-r3_json_t4_virtualclient.json"))[:2] == ("pass", "15 tests passed, 1 skipped")
    with pytest.raises(Error, match="table ends after memory"):
        grade(parsed("diag-r1_text_4.2.3_l40s_trimmed.txt"))
    with pytest.raises(Error, match="could not reach nv-hostengine"):
        grade(parsed("hostengine_unreachable.txt"), source=("error", "dcgmi diag could not reach nv-hostengine"))
    old = {"tests": {"Denylist": "pass", "Inforom": "fail"}, "failed": ["Inforom"], "warned": []}
    assert grade(old)[:2] == ("fail", "failed: Inforom")


# ---- the node's collection ---------------------------------------------------------------------------------------


def _dcgmi(bin_dir, body):
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / "dcgmi"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _collect(tmp_path, monkeypatch, body):
    _dcgmi(tmp_path / "bin", body)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    c = Collector(str(tmp_path))
    return health.collect(c), c


def test_collect_reads_json_and_keeps_the_raw_output(tmp_path, monkeypatch):
    gb10 = FIX / "diag-r1_json_4.2.3_gb10_software_fail.json"
    out, c = _collect(tmp_path, monkeypatch, 'cat "%s"; exit 226\n' % gb10)
    assert c.sources["dcgm_diag"]["status"] == "ok" and c.sources["dcgm_diag"]["rc"] == 226
    assert out["dcgm_diag"]["failed"] == ["software"] and out["dcgm_diag"]["format"] == "json"
    assert (tmp_path / "audit.dcgmi-diag-r1.txt").read_text().startswith('{\n\t"DCGM Diagnostic"')


def test_collect_falls_back_to_text_when_json_is_refused(tmp_path, monkeypatch):
    table = FIX / "diag-r3_text_3.3.8_h100_cuinit_fail_all.txt"
    body = ('for a in "$@"; do [ "$a" = -j ] && { echo "PARSE ERROR: Argument: -j" >&2; exit 255; }; done\n'
            'echo "$@" >> "%s"; cat "%s"; exit 226\n') % (tmp_path / "args", table)
    out, c = _collect(tmp_path, monkeypatch, body)
    assert (tmp_path / "args").read_text().split() == ["diag", "-r", "1"]
    assert out["dcgm_diag"]["format"] == "text" and out["dcgm_diag"]["failed"] == ["GPU Memory"]
    assert c.sources["dcgm_diag"]["status"] == "ok"


def test_collect_names_an_unreachable_host_engine_without_a_second_run(tmp_path, monkeypatch):
    body = 'echo run >> "%s"; cat "%s"; exit 241\n' % (tmp_path / "runs", FIX / "hostengine_unreachable.txt")
    out, c = _collect(tmp_path, monkeypatch, body)
    assert (tmp_path / "runs").read_text() == "run\n"
    assert c.sources["dcgm_diag"]["status"] == "error"
    assert c.sources["dcgm_diag"]["reason"].startswith("dcgmi diag could not reach nv-hostengine: Error: unable to")


def test_collect_without_dcgm_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    c = Collector(str(tmp_path))
    out = health.collect(c)
    assert out["dcgmi"] is False and "dcgm_diag" not in out
    assert c.sources["dcgm_diag"] == {"status": "missing", "reason": "dcgmi not found (DCGM not installed)"}


# ---- layouts read from dcgmi's own writer (NVIDIA/DCGM dcgmi/Diag.cpp, commit 1f7a418e, DCGM 3.3) ----------------


def _dcgm33_deployment(errors_by_test):
    """The JSON dcgmi 3.3 writes for Deployment tests (HelperJsonAddBasicTests): one result per test, its messages
    as [{"warnings": text, "error_id", …}] and its "gpu_id" the GPU of its last error (-1: no one GPU); "version" and
    "Driver Version Detected" beside "DCGM GPU Diagnostic" (HelperJsonBuildOutput)."""
    tests = []
    for name, errors in errors_by_test.items():
        result = {"status": "Fail" if errors else "Pass"}
        for gpu, msg in errors:
            result["gpu_id"] = gpu
            result.setdefault("warnings", []).append(
                {"warnings": msg, "error_id": 29, "error_category": 8, "error_severity": 5})
        tests.append({"name": name, "results": [result]})
    return json.dumps({"DCGM GPU Diagnostic": {"test_categories": [{"category": "Deployment", "tests": tests}]},
                       "version": "3.3.9", "Driver Version Detected": "550.90.07"}, indent=3)


PERSISTENCE = ('Persistence mode for GPU %d is currently disabled. The DCGM diagnostic requires peristence mode to be '
               'enabled. Enable persistence mode by running "nvidia-smi -i <gpuId> -pm 1 " as root.')


GRAPHICS = ("NVVS has detected processes with graphics contexts open running on at least one GPU. This may cause "
            "some tests to fail.")
ENVIRONMENT = "Found CUDA performance-limiting environment variable 'CUDA_LAUNCH_BLOCKING'."


def test_json_dcgm33_deployment_messages_gpus_and_version():
    """Persistence mode off on all 8 GPUs: dcgmi 3.3 writes gpu_id 7 (its last error) and the eight messages under
    "warnings"; a CUDA_LAUNCH_BLOCKING in the environment is an error of no GPU (gpu_id -1). Before, the row read
    "Persistence Mode on GPU 7" with no message and no cause, the environment's failure was put on GPU 1, and the
    DCGM version was lost."""
    diag = dcgm_diag.parse(_dcgm33_deployment({
        "Denylist": [], "Persistence Mode": [(g, PERSISTENCE % g) for g in range(8)],
        "Environment Variables": [(-1, ENVIRONMENT)]}))
    assert (diag["version"], diag["driver"]) == ("3.3.9", "550.90.07")
    persistence, env = result(diag, "Persistence Mode"), result(diag, "Environment Variables")
    assert persistence["gpus"] == {"fail": list(range(8))} and len(persistence["messages"]) == 8
    assert env["gpus"] == {} and env["messages"] == [ENVIRONMENT]
    status, observed, _, reason = grade(diag)
    assert status == "fail" and observed.startswith(
        "Persistence Mode on GPU 0, 1, 2, 3, 4, 5, 6, 7: Persistence mode for GPU 0 is currently disabled.")
    assert "Environment Variables: Found CUDA performance-limiting environment variable" in observed
    assert reason == "persistence mode is off: nvidia-smi -pm 1, or run nvidia-persistenced"
    one = dcgm_diag.parse(_dcgm33_deployment({"Persistence Mode": [(3, PERSISTENCE % 3)]}))
    assert result(one, "Persistence Mode")["gpus"] == {"fail": [3]}
    # a message that names no GPU: the gpu_id dcgmi wrote for it
    graphics = dcgm_diag.parse(_dcgm33_deployment({"Graphics Processes": [(2, GRAPHICS)]}))
    assert result(graphics, "Graphics Processes")["gpus"] == {"fail": [2]}
    assert grade(graphics)[1].startswith("Graphics Processes on GPU 2: NVVS has detected processes")


def test_a_gpu_skipped_by_a_test_the_others_passed_is_a_warning_naming_it():
    """dcgmi 3.x prints a test that some GPUs passed and one skipped as a "Pass - GPUs:" row and a "Skip - GPU:"
    continuation row (Diag.cpp HelperDisplayGpuResults); GPU 7 was not tested. Before, the row was a plain pass."""
    text = (FIX / "diag-r2_text_3.3.3_a100_pass.txt").read_text()
    mixed = "| Pass - GPUs: 0, 1, 2, 3, 4, 5, 6               |\n|                           | Skip - GPU: 7"
    for test in ("PCIe", "GPU Memory"):
        text = text.replace("| %s | Pass - All                                     |" % test.ljust(25),
                            "| %s %s                                  |" % (test.ljust(25), mixed))
    diag = dcgm_diag.parse(text)
    assert result(diag, "PCIe")["gpus"] == {"pass": [0, 1, 2, 3, 4, 5, 6], "skip": [7]}
    assert grade(diag)[:2] == ("warn", "PCIe skipped on GPU 7; GPU Memory skipped on GPU 7")


def test_a_diag_that_passed_no_test_is_not_a_pass():
    """The GB10's DCGM 4 document with its one test skipped, then not run: nothing was checked."""
    doc = json.loads((FIX / "diag-r1_json_4.2.3_gb10_software_fail.json").read_text())
    test = doc["DCGM Diagnostic"]["test_categories"][0]["tests"][0]
    for status in ("Skip", "Not Run"):
        test["results"][0]["status"] = test["test_summary"]["status"] = status
        test["results"][0].pop("warnings", None)
        observed = grade(dcgm_diag.parse(json.dumps(doc)))[:2]
        assert observed == ("warn", "no test passed: 1 %s (DCGM 4.2.3)" % (
            "skipped" if status == "Skip" else "not run")), observed
