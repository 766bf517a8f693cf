import json
import shutil

import pytest
import yaml

from probes.artifact import Artifact
from reports import DATA_DIR
from reports.grading import RubricError, load_rubric
from reports.grading.expectations import gpu_model_key, judge, load_gpus, resolve
from reports.grading.kinds import grade_metric, grade_straggler
from reports.load import run_of_artifacts as make_run

MODELS = load_gpus()


def gemm_doc(host, tflops_per_gpu, model="NVIDIA H100 80GB HBM3", backend="cuda", status="ok"):
    art = Artifact("gemm", "r", host, variant="bf16")
    art.device.update(backend=backend, model=model, count=len(tflops_per_gpu))
    for gpu, value in enumerate(tflops_per_gpu):
        art.add("tflops", value, "TFLOP/s", gpu=gpu, dtype="bf16")
    if status != "ok":
        art.skip("no GPU visible") if status == "skipped" else art.error("CUDA OOM")
    return art.to_dict()


def info_doc(host, model="NVIDIA H100 80GB HBM3"):
    art = Artifact("node_info", "r", host)
    art.facts["gpu_model"] = model
    return art.to_dict()



CHECK = {"id": "compute.gemm_bf16", "category": "compute", "title": "BF16 GEMM vs MAMF", "kind": "metric",
         "probe": "gemm", "variant": "bf16", "metric": "tflops", "per": "gpu", "agg": "median",
         "expect": {"op": ">=", "fraction": 0.7, "of": "mamf_bf16_tflops"},
         "warn": {"op": ">=", "fraction": 0.85, "of": "mamf_bf16_tflops"}, "backends": ["cuda", "rocm"]}


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H200", "H200-SXM"), ("NVIDIA GB200", "GB200"),
    ("NVIDIA B200", "B200"), ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA GH200 144G HBM3e", "GH200-144GB"), ("AMD Instinct MI300X", "MI300X"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA H100 NVL", "H100-NVL"),
    ("NVIDIA H200 NVL", "H200-NVL"), ("NVIDIA A100-SXM4-40GB", "A100-SXM-40GB"), ("NVIDIA A100 80GB PCIe", "A100-PCIe"),
    ("NVIDIA A100-PCIE-40GB", "A100-PCIe-40GB"), ("Tesla T4", None), (None, None)])
def test_gpu_model_key_most_specific_wins(name, key):
    assert gpu_model_key(name, MODELS) == key


def test_resolve_fraction_of_model_value():
    threshold, text, why = resolve({"op": ">=", "fraction": 0.7, "of": "mamf_bf16_tflops"}, MODELS["H100-SXM"])
    assert threshold == pytest.approx(556.15) and why is None and "0.7 × mamf_bf16_tflops 794.5" in text
    why = resolve({"of": "mamf_fp8_tflops"}, MODELS["A100-SXM"])[2]
    assert why == "gpus.yml has no mamf_fp8_tflops for this GPU model"


def test_a_threshold_is_shown_on_its_side_of_the_value_beside_it():
    """0.7 × H100's 5762 tokens/s per GPU = 4033.4: "%.4g" shows it as "4033", which an observed 4033.3 (failed)
    reads as meeting. Given the observed value, the threshold has the digits it takes to stay on its side; where
    nothing crosses, the usual text."""
    expect = {"op": ">=", "fraction": 0.7, "of": "training_llama8b_tps_per_gpu"}
    h100 = MODELS["H100-SXM"]
    assert h100["training_llama8b_tps_per_gpu"] == 5762
    usual = ">= 4033 (0.7 × training_llama8b_tps_per_gpu 5762)"
    assert resolve(expect, h100)[1] == usual
    threshold, text, _ = resolve(expect, h100, 4033.3)
    assert threshold > 4033.3 and text == ">= 4033.4 (0.7 × training_llama8b_tps_per_gpu 5762)"
    assert resolve(expect, h100, 4033.5)[1] == usual and resolve(expect, h100, 5000)[1] == usual
    # a fixed value too, and judge() shows its lines so
    assert resolve({"op": "<=", "value": 0.12345}, None, 0.12348)[1] == "<= 0.12345"
    assert resolve({"op": "<=", "value": 0.12345}, None, 0.2)[1] == "<= 0.1235"
    assert judge(0.12348, {"op": "<=", "value": 0.12345}) == ("fail", "<= 0.12345")


def test_a_pcie_card_is_judged_by_its_own_datasheet_and_skips_what_only_the_sxm_part_has():
    """H100 PCIe: 2,000 GB/s of HBM2e (not the SXM part's 3,350) and a 756 TFLOPS BF16 peak; no public MAMF, so the
    GEMM check skips with the reason gpus.yml gives instead of failing a healthy card against 794.5."""
    pcie = MODELS[gpu_model_key("NVIDIA H100 PCIe", MODELS)]
    assert resolve({"of": "hbm_gbps", "fraction": 0.8}, pcie)[0] == pytest.approx(1600)
    assert resolve({"of": "bf16_peak_tflops"}, pcie)[0] == 756
    threshold, _, why = resolve(CHECK["expect"], pcie)
    assert threshold is None and why.startswith("no public MAMF for this card")
    # A100: a PCIe card has no NVSwitch line to fail, and the 40 GB parts their own memory
    a100_pcie = MODELS[gpu_model_key("NVIDIA A100-PCIE-40GB", MODELS)]
    assert resolve({"of": "d2d_gbps_min"}, a100_pcie)[2].startswith("no public node health line for this card")
    assert resolve({"of": "hbm_gbps"}, a100_pcie)[0] == 1555
    assert resolve({"of": "hbm_gbps"}, MODELS[gpu_model_key("NVIDIA A100-SXM4-40GB", MODELS)])[0] == 1555


def test_per_gpu_pass_warn_fail():
    # 794.5 × 0.85 = 675.3, × 0.7 = 556.2
    run = make_run([gemm_doc("n1", [700.0, 600.0, 500.0]), info_doc("n1")])
    rows = grade_metric(CHECK, run, "n1", MODELS)
    assert [(r["subject"], r["status"]) for r in rows] == [("gpu=0", "pass"), ("gpu=1", "warn"), ("gpu=2", "fail")]
    assert rows[2]["observed"] == "500 TFLOP/s"


def test_cpu_backend_is_skipped_with_reason():
    run = make_run([gemm_doc("n1", [1.2], model=None, backend="cpu"), info_doc("n1", model=None)])
    [row] = grade_metric(CHECK, run, "n1", MODELS)
    assert row["status"] == "skip" and row["reason"] == "backend=cpu: expectation is for cuda/rocm"


def test_unknown_model_skipped_unreachable_skipped_error_kept():
    run = make_run([gemm_doc("n1", [300.0], model="Tesla T4"), info_doc("n1", model="Tesla T4"),
                    gemm_doc("n2", [700.0], status="error"), info_doc("n2")], unreachable=["n3"])
    assert grade_metric(CHECK, run, "n1", MODELS)[0]["reason"] == "no expectation for this GPU model in gpus.yml"
    err = grade_metric(CHECK, run, "n2", MODELS)[0]
    assert err["status"] == "pass" and err["reason"] == "CUDA OOM"
    assert grade_metric(CHECK, run, "n3", MODELS)[0]["reason"] == "host unreachable"


def test_straggler_against_node_median():
    check = dict(CHECK, kind="straggler", scope="node", max_below_median_pct=10, warn_below_median_pct=5)
    run = make_run([gemm_doc("n1", [780, 790, 785, 640, 735, 782, 788, 781]), info_doc("n1")])
    rows = {r["subject"]: r for r in grade_straggler(check, run, ["n1"])}
    assert rows["gpu=3"]["status"] == "fail" and "18.1% below node median" in rows["gpu=3"]["observed"]
    assert rows["gpu=4"]["status"] == "warn"
    assert rows["gpu=0"]["status"] == "pass"


def test_rubric_merges_parts_and_refuses_duplicates(tmp_path):
    (tmp_path / "rubric.d").mkdir()
    (tmp_path / "rubric.yml").write_text("checks:\n  - {id: a.one, kind: reachable, category: a, title: A}\n")
    (tmp_path / "rubric.d" / "b.yml").write_text("checks:\n  - {id: b.one, kind: reachable, category: b, title: B}\n")
    assert [c["id"] for c in load_rubric(str(tmp_path / "rubric.yml"))["checks"]] == ["a.one", "b.one"]
    (tmp_path / "rubric.d" / "c.yml").write_text("checks:\n  - {id: a.one, kind: reachable, category: c, title: C}\n")
    with pytest.raises(ValueError, match="a.one"):
        load_rubric(str(tmp_path / "rubric.yml"))


def test_shipped_rubric_loads_and_matches_its_schema():
    rubric = load_rubric()  # every file is validated against rubric.schema.json on the way
    assert {c["id"] for c in rubric["checks"]} >= {"preflight.reachable", "preflight.node_info"}
    json.dumps(rubric)


def test_a_broken_rubric_is_named_by_file_and_key(tmp_path):
    shutil.copytree(DATA_DIR, tmp_path / "data")
    network = tmp_path / "data" / "rubric.d" / "network.yml"
    part = yaml.safe_load(network.read_text())
    position = next(i for i, c in enumerate(part["checks"]) if c["kind"] == "net_peak_busbw")
    part["checks"][position]["expect"]["op"] = "=>"
    del part["checks"][0]["title"]
    network.write_text(yaml.safe_dump(part))
    with pytest.raises(RubricError) as caught:
        load_rubric(str(tmp_path / "data" / "rubric.yml"))
    assert str(caught.value).splitlines() == [
        "rubric.d/network.yml: checks[0]: 'title' is a required property",
        "rubric.d/network.yml: checks[%d].expect.op: '=>' is not one of ['>=', '>', '<=', '<', '==']" % position]


def test_each_phase_grader_imports_first_and_every_rubric_kind_is_registered():
    """A phase's grader module can be the first thing imported (fresh interpreter: no circular import through
    reports.grading), and every kind the rubric uses has a grader once the phases are loaded."""
    import subprocess
    import sys
    from pathlib import Path

    from reports.grading import kinds

    root = Path(__file__).resolve().parents[2]
    from reports import phases

    assert {"audit", "burnin", "gpu_compute", "lifecycle", "network", "reliability", "storage"} <= set(phases.names())
    graded = [m.__name__.split(".")[2] for m in phases.modules("grade")]
    assert "gpu_compute" in graded  # its solve across nodes (hpl_mxp_across) has a grader of its own
    for phase in graded:
        code = ("import reports.phases.%s.grade as m\nfrom reports.grading import kinds\n"
                "kinds.register_phase_kinds()\n"
                "assert m.PER_HOST.items() <= kinds.PER_HOST_KINDS.items()\n"
                "assert m.CLUSTER.items() <= kinds.CLUSTER_KINDS.items()\n" % phase)
        res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
        assert res.returncode == 0, (phase, res.stderr[-1500:])
    assert {c["kind"] for c in load_rubric()["checks"]} <= kinds.kind_names()


def test_a_straggler_just_past_a_line_is_shown_past_it():
    """GPU 7 10.04 % below its node's median fails (more than 10 % below), GPU 6 5.04 % below warns (more than 5 %):
    shown as 10.0 % and 5.0 %, next to "within 10%", they read as on the lines. The percentage keeps the side."""
    check = dict(CHECK, kind="straggler", scope="node", max_below_median_pct=10, warn_below_median_pct=5)
    run = make_run([gemm_doc("n1", [800.0] * 6 + [759.68, 719.68]), info_doc("n1")])
    rows = {r["subject"]: r for r in grade_straggler(check, run, ["n1"])}
    assert rows["gpu=7"]["status"] == "fail"
    assert rows["gpu=7"]["observed"] == "719.68 (10.04% below node median)"
    assert rows["gpu=7"]["expected"] == "within 10% of the node median 800"
    assert rows["gpu=6"]["status"] == "warn" and rows["gpu=6"]["observed"] == "759.68 (5.04% below node median)"
    assert rows["gpu=0"]["status"] == "pass" and rows["gpu=0"]["observed"] == "800 (0.0% below node median)"
