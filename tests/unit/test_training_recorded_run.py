"""The training phase's controller side on a real run (tests/fixtures/training_run): the quick profile on the
4-host test cluster through torchrun, both jobs at 1, 2 and 4 nodes on the CPU backend."""

import csv
import json
from pathlib import Path

import pytest
from run_dirs import build_recorded

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "training_run" / "run.tar.xz"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    run = build_recorded(FIXTURE, tmp_path_factory.mktemp("training_run"))
    with open(run / "report" / "checks.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["check_id"].startswith("training.")]
    return {(r["check_id"], r["host"], r["subject"]): r for r in rows}, run / "report"


def test_the_loss_is_judged_at_every_world_size_on_the_cpu_backend(built):
    rows, _ = built
    # node1 took part in every world; the loss fell in each (the first and last step's global mean loss)
    dense = {s: r for (c, h, s), r in rows.items() if c == "training.dense_loss" and h == "cmxa-node1"}
    assert sorted(dense) == ["1 node (1 ranks)", "2 nodes (2 ranks)", "4 nodes (4 ranks)"]
    assert all(r["status"] == "pass" for r in dense.values())
    assert dense["4 nodes (4 ranks)"]["observed"] == "6.345 → 3.332 nats over 8 steps (2 warm-up)"
    # node3 was not in the 2-node world: it is judged on the worlds it ran
    assert sorted(s for (c, h, s) in rows if c == "training.moe_loss" and h == "cmxa-node3") == [
        "1 node (1 ranks)", "4 nodes (4 ranks)"]


def test_gpu_expectations_skip_with_the_backend_and_failures_pass(built):
    rows, _ = built
    for host in ("cmxa-node1", "cmxa-node4"):
        for check in ("training.torchtitan_dense", "training.dense_tokens_per_s", "training.moe_mfu",
                      "training.dense_step_variance", "training.moe_step_variance"):
            row = rows[(check, host, "")]
            assert row["status"] == "skip" and row["reason"] == "backend=cpu: expectation is for cuda/rocm", row
        for check in ("training.dense_failures", "training.moe_failures", "training.dense_ran", "training.moe_ran"):
            assert rows[(check, host, "")]["status"] == "pass"


def test_scaling_on_shared_cores_warns_with_its_numbers_and_no_network_blame(built):
    rows, _ = built
    # four test hosts on one 2-core machine: 4 ranks get half the cores 2 had, so tokens/s per rank halves
    moe = rows[("training.torchtitan_moe", "cmxa-node1", "")]
    assert moe["status"] == "warn"
    assert moe["observed"] == ("worst 0.28: 4 nodes (4 ranks) vs 2 nodes (2 ranks) (803 vs 2913 tokens/s per GPU); "
                               "all_to_all 18 % → 27 % of the step")
    dense = rows[("training.dense_scaling", "cmxa-node1", "")]
    assert dense["status"] == "warn" and dense["observed"].startswith("worst 0.52: 4 nodes (4 ranks) vs 2 nodes")
    # the dense job also lost pace, so the MoE's loss is not blamed on the network
    assert "points at the network" not in moe["reason"]


def test_the_section_has_both_jobs_tables_and_plots(built):
    _, report = built
    text = (report / "report.md").read_text()
    section = text[text.index("## Training"):text.index("## Checks")]
    assert "| 4 | 4 | 1295 | —, backend=cpu |" in section  # dense at 4 nodes: tokens/s per GPU, MFU
    assert "| 2 | 2 | 2913 | —, backend=cpu |" in section and "| 17.9 % |" in section  # MoE: all_to_all share
    assert "Engine `torch-fsdp2`" in section and "launcher torchrun" in section and "158 K parameters" in section
    for png in ("training_scaling.png", "training_step_time.png", "training_loss.png"):
        assert (report / png).stat().st_size > 5000


def test_its_checks_count_in_the_coverage_of_compute_and_networking(built):
    """The run measured the training phase alone: every bit of compute and networking coverage it has comes from
    the training checks, and the two seed tests they stand for are no longer placeholders."""
    _, report = built
    ratings = json.loads((report / "ratings.json").read_text())
    checks = {c["check_id"]: c for c in ratings["checks"] if c["check_id"].startswith("training.")}
    assert checks["training.torchtitan_dense"]["category"] == "compute"
    assert checks["training.torchtitan_moe"]["category"] == "networking"
    assert checks["training.torchtitan_moe"]["graded"] == 4  # a warn row per host: judged, not a placeholder
    categories = {c["id"]: c for c in ratings["categories"]}
    for cat in ("compute", "networking"):
        assert categories[cat]["status"] == "rated" and categories[cat]["coverage"] > 0, categories[cat]
    # the scaling warnings are judged: networking's score is below full, compute's (failures and loss pass) is full
    assert categories["networking"]["score"] < 100 and categories["compute"]["score"] == 100


def test_the_step_time_plot_leaves_out_the_warm_up_steps(built):
    """The recorded run's 2 warm-up steps (step 0 also compiles and allocates: about 0.4 to 0.5 s) are no part of
    the step-time distribution the tables show (p99 0.05 to 0.07 s); the plot drew them, 8x the rest."""
    from reports.load import load_run
    from reports.phases.training.section import _step_seconds

    _, report = built
    run = load_run(str(report.parent))
    data = _step_seconds(run, "dense")
    timed = [r["value"] for r in run.records("training") if r["variant"] == "dense"
             and r["metric"] == "step_seconds" and int(r["labels"]["step"]) >= 2]
    assert sorted(v for values in data.values() for v in values) == sorted(timed)
    assert max(v for values in data.values() for v in values) < 0.2
