import base64
import json
import subprocess
import sys
import time
import types
import zipfile
from pathlib import Path

import pytest

from probes import cli
from probes.artifact import validate
from probes.params import Param, Params
from probes.pyz import build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_probe(monkeypatch):
    """Registers a probe module whose behaviour each test chooses."""
    module = types.ModuleType("probes_test_fake")
    module.PARAMS = Params(x=Param(int, 0, "a number the probe records"))
    monkeypatch.setitem(sys.modules, "probes_test_fake", module)
    monkeypatch.setitem(cli.PROBES, "fake", "probes_test_fake")
    return module


def test_exception_becomes_error_artifact_with_traceback_and_keeps_results(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.add("measured_before_fault", 1.5, "s")
        raise RuntimeError("CUDA error: an illegal memory access")

    fake_probe.run = run
    path, doc = cli.run_probe("fake", str(tmp_path), "r", "h")
    assert validate(doc) == []
    assert doc["status"] == "error" and "illegal memory access" in doc["reason"]
    assert doc["results"][0]["value"] == 1.5  # what was measured before the fault is kept
    tb = tmp_path / doc["raw"][0]
    assert "RuntimeError" in tb.read_text()


def test_timeout_stops_the_probe_and_says_so(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.add("first_sample", 1.0, "s")
        time.sleep(30)

    fake_probe.run = run
    t0 = time.monotonic()
    _, doc = cli.run_probe("fake", str(tmp_path), "r", "h", timeout=0.5)
    assert time.monotonic() - t0 < 20
    assert doc["status"] == "error" and doc["reason"] == "timed out after 0.5 s"
    assert doc["results"][0]["metric"] == "first_sample"


def test_invalid_result_from_a_probe_bug_is_caught(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.results.append({"metric": "bad", "value": "NaN-ish", "unit": "", "labels": {}})
        art.add("good", 2, "count")

    fake_probe.run = run
    _, doc = cli.run_probe("fake", str(tmp_path), "r", "h")
    assert doc["status"] == "error" and doc["reason"].startswith("invalid artifact")
    assert [r["metric"] for r in doc["results"]] == ["good"]
    assert validate(doc) == []


def test_inline_manifest_carries_raw_files(tmp_path, fake_probe):
    def run(art, params, out_dir):
        (Path(out_dir) / "fake.log").write_text("line 1\n")
        art.raw.append("fake.log")
        art.add("x", params["x"], "count")

    fake_probe.run = run
    path, doc = cli.run_probe("fake", str(tmp_path), "r", "h", params={"x": 3})
    man = cli.manifest(path, doc, str(tmp_path))
    assert base64.b64decode(man["raw_inline"]["fake.log"]) == b"line 1\n"
    assert man["artifact"]["params"] == {"x": 3} and man["raw_remote"] == []


def test_bad_params_and_unknown_probe_exit_2(capsys):
    assert cli.main(["nope"]) == 2
    assert cli.main(["node_info", "--params", "[1]"]) == 2
    assert "--params must be a JSON object" in capsys.readouterr().err


def test_pyz_is_reproducible_and_runs_by_hand(tmp_path):
    a, b = tmp_path / "a.pyz", tmp_path / "b.pyz"
    build(str(a))
    build(str(b))
    assert a.read_bytes() == b.read_bytes()
    names = zipfile.ZipFile(a).namelist()
    assert "__main__.py" in names and "probes/inventory/node_info.py" in names
    out = subprocess.run([sys.executable, str(a), "node_info", "--out", str(tmp_path / "o"), "--inline",
                          "--params", '{"torch": false}'], capture_output=True, text=True, timeout=60, check=True)
    man = json.loads(out.stdout.strip().splitlines()[-1])
    assert man["artifact"]["probe"] == "node_info" and validate(man["artifact"]) == []
    assert (tmp_path / "o" / "node_info.json").exists()
