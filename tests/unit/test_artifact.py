import json

import pytest

from probes.artifact import SCHEMA, Artifact, artifact_filename, validate, write_json_atomic


def make_doc(**overrides):
    art = Artifact("gemm", "run-1", "node1", variant="bf16", params={"m": 8192})
    art.add("tflops", 781.9, "TFLOP/s", gpu=0, dtype="bf16")
    doc = art.to_dict()
    doc.update(overrides)
    return doc


def test_valid_artifact_has_schema_and_timing():
    doc = make_doc()
    assert validate(doc) == []
    assert doc["schema"] == SCHEMA
    assert doc["duration_s"] >= 0
    assert doc["results"][0] == {"metric": "tflops", "value": 781.9, "unit": "TFLOP/s",
                                 "labels": {"gpu": 0, "dtype": "bf16"}}


@pytest.mark.parametrize("field,value,needle", [
    ("schema", "other/v2", "schema"),
    ("host", "", "host"),
    ("probe", "Bad Name", "probe"),
    ("variant", "a/b", "variant"),
    ("started_at", "yesterday", "started_at"),
    ("duration_s", -1, "duration_s"),
    ("status", "passed", "status"),
    ("params", [], "params"),
    ("raw", ["../etc/passwd"], "raw"),
    ("device", {"backend": "tpu"}, "backend"),
])
def test_invalid_fields_are_named(field, value, needle):
    problems = validate(make_doc(**{field: value}))
    assert problems and any(needle in p for p in problems), problems


def test_non_ok_status_needs_reason():
    assert any("reason" in p for p in validate(make_doc(status="skipped", reason=None)))
    assert validate(make_doc(status="skipped", reason="no GPU")) == []


def test_result_values_must_be_numbers():
    doc = make_doc()
    doc["results"].append({"metric": "x", "value": "fast", "unit": "", "labels": {}})
    doc["results"].append({"metric": "y", "value": True, "unit": "", "labels": {}})
    problems = validate(doc)
    assert "results[1].value must be a number" in problems
    assert "results[2].value must be a number" in problems


def test_add_rejects_non_numbers():
    art = Artifact("node_info", "r", "h")
    with pytest.raises(TypeError):
        art.add("gpu_count", "8", "count")
    with pytest.raises(TypeError):
        art.add("gpu_count", True, "count")


def test_filename():
    assert artifact_filename("gemm", "bf16") == "gemm-bf16.json"
    assert artifact_filename("node_info") == "node_info.json"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    path = write_json_atomic(str(tmp_path / "a" / "x.json"), make_doc())
    assert json.loads(open(path).read())["probe"] == "gemm"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.json"]
    with pytest.raises(ValueError):  # NaN is not JSON: refused, and the old file stays intact
        write_json_atomic(path, {"v": float("nan")})
    assert json.loads(open(path).read())["probe"] == "gemm"
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["x.json"]
