import json
import tarfile
from pathlib import Path

import pytest

from probes.artifact import SCHEMA, Artifact, artifact_filename, validate, write_json_atomic
from reports.grading import grade
from reports.load import load_run, schema_problems


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


# The controller validates with reports/data/schemas/artifact.schema.json (jsonschema), the node with validate (standard
# library only): both refuse each broken field, and the controller's message names its key.
@pytest.mark.parametrize("field,value,needle,key", [
    ("schema", "other/v2", "schema", "schema"),
    ("host", "", "host", "host"),
    ("probe", "Bad Name", "probe", "probe"),
    ("variant", "a/b", "variant", "variant"),
    ("started_at", "yesterday", "started_at", "started_at"),
    ("duration_s", -1, "duration_s", "duration_s"),
    ("status", "passed", "status", "status"),
    ("params", [], "params", "params"),
    ("raw", ["../etc/passwd"], "raw", "raw[0]"),
    ("device", {"backend": "tpu"}, "backend", "device.backend"),
])
def test_invalid_fields_are_named(field, value, needle, key):
    doc = make_doc(**{field: value})
    problems = validate(doc)
    assert problems and any(needle in p for p in problems), problems
    assert [p.split(": ")[0] for p in schema_problems(doc, "artifact")] == [key]


def test_non_ok_status_needs_reason():
    assert any("reason" in p for p in validate(make_doc(status="skipped", reason=None)))
    assert schema_problems(make_doc(status="skipped", reason=None), "artifact") == [
        "reason: None is not of type 'string'"]
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


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_add_refuses_a_value_json_cannot_hold_naming_the_metric(value):
    # Before, a NaN loss was taken, and the writer then refused the whole artifact (allow_nan=False)
    art = Artifact("training", "r", "h")
    with pytest.raises(ValueError, match="metric 'loss_last': value %s is not finite" % value):
        art.add("loss_last", value, "nats", nodes=1)
    assert art.results == []
    doc = make_doc()
    doc["results"].append({"metric": "loss", "value": value, "unit": "nats", "labels": {}})
    assert validate(doc) == ["results[1].value %s is not finite" % value]


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


RECORDED_RUN = Path(__file__).resolve().parents[1] / "fixtures" / "assessment_run" / "run.tar.xz"


def test_every_artifact_of_the_recorded_run_is_valid_for_the_node_and_the_controller(tmp_path):
    with tarfile.open(RECORDED_RUN) as tar:
        tar.extractall(tmp_path, filter="data")
    paths = sorted((tmp_path / "run" / "artifacts").glob("*/*.json"))
    assert len(paths) > 100
    for path in paths:
        doc = json.loads(path.read_text())
        assert validate(doc) == [] and schema_problems(doc, "artifact") == [], path


def test_an_invalid_artifact_is_a_load_error_and_an_error_row_naming_file_and_key(tmp_path):
    doc = make_doc()
    doc["results"].append({"metric": "tflops", "value": "fast", "unit": "TFLOP/s", "labels": {}})
    write_json_atomic(str(tmp_path / "artifacts" / "node1" / "gemm-bf16.json"), doc)
    write_json_atomic(str(tmp_path / "artifacts" / "node1" / "node_info.json"), make_doc(probe="node_info",
                                                                                        variant=None))
    run = load_run(str(tmp_path))
    assert [d["probe"] for d in run.artifacts] == ["node_info"]
    assert run.load_errors == [{"host": "node1", "path": "node1/gemm-bf16.json",
                                "error": "results[1].value: 'fast' is not of type 'number'"}]
    check = {"id": "compute.gemm_ran", "category": "compute", "title": "GEMM ran", "kind": "artifact",
             "probe": "gemm", "variant": "bf16"}
    (row,) = grade(run, {"checks": [check]})
    assert (row["status"], row["observed"]) == ("error", "invalid artifact")
    assert row["reason"] == "node1/gemm-bf16.json: results[1].value: 'fast' is not of type 'number'"


def test_results_rows_are_judged_as_the_schema_judges_them_fast_path_or_not():
    """schema_problems checks valid results rows in plain Python (a million rows at 1,000 nodes); any invalid one
    sends the document through jsonschema, so the messages name the row and the key as before."""
    art = Artifact("gemm", "r1", "h1")
    for i in range(3):
        art.add("tflops", 700.0 + i, "TFLOP/s", gpu=i)
    doc = art.to_dict()
    assert schema_problems(doc, "artifact") == []
    for bad, message in (({"value": True}, "results[1].value: True is not of type 'number'"),
                         ({"value": "700"}, "results[1].value: '700' is not of type 'number'"),
                         ({"metric": ""}, "results[1].metric: '' should be non-empty"),
                         ({"labels": []}, "results[1].labels: [] is not of type 'object'")):
        broken = dict(doc, results=[dict(r) for r in doc["results"]])
        broken["results"][1].update(bad)
        assert schema_problems(broken, "artifact") == [message], bad
    missing = dict(doc, results=[{"metric": "tflops", "value": 1.0}])
    assert schema_problems(missing, "artifact") == ["results[0]: 'unit' is a required property"]
    # the rest of the document is still checked when the rows are fine
    assert schema_problems(dict(doc, status="maybe"), "artifact")[0].startswith("status: 'maybe' is not one of")
