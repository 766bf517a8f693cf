"""Training grading (reports/phases/training/grade.py, rubric.d/training.yml) and the report section, on artifacts
shaped as the training probe writes them: one per host and job (variant dense or moe), metrics labelled with the
world's nodes and ranks."""

import json
import logging
import math
import re
from pathlib import Path

import pytest

from probes.artifact import Artifact, write_json_atomic
from probes.training import titan, torchtitan_log, training
from reports import grading as grade
from reports.grading import select
from reports.load import run_of_artifacts as make_run
from reports.phases.network.grade import grade_failures
from reports.phases.training import grade as gt
from reports.phases.training import section
from reports.render.blocks import Figures, Table

H100, H200 = "NVIDIA H100 80GB HBM3", "NVIDIA H200"
LLAMA_8B = {"layers": 32, "dim": 4096, "n_heads": 32, "n_kv_heads": 8, "ffn_dim": 14336, "vocab": 128256}
LLAMA_8B_PARAMS = {"params": 8_030_261_248, "active_params": 8_030_261_248, "embedding_params": 525_336_576}
TINY = {"layers": 2, "dim": 64, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 128, "vocab": 256}
TINY_MOE = dict(TINY, n_experts=8, top_k=2, moe_ffn_dim=64, n_shared_experts=1)
GOOD_TPS = 5762  # torchtitan's H100 figure: 33.7 % MFU

RUBRIC = grade.load_rubric()


def check(cid):
    return next(c for c in RUBRIC["checks"] if c["id"] == cid)


def train_doc(host, variant="dense", tps=None, backend="cuda", gpu=H100, model=None, loss=(11.0, 7.0), cv=0.02,
              failures=(), status="ok", alltoall=None, steps=20, ppn=8, own_mfu=None):
    """One host's artifact of one job; tps: {nodes: tokens/s per GPU} (the worlds it ran), alltoall {nodes: share}."""
    tps = {1: GOOD_TPS, 2: GOOD_TPS, 4: GOOD_TPS} if tps is None else tps
    art = Artifact("training", "r", host, variant=variant)
    art.device.update(backend=backend, model=gpu if backend != "cpu" else None, count=ppn if backend != "cpu" else 0)
    model = model or (LLAMA_8B if variant == "dense" else TINY_MOE)
    counts = LLAMA_8B_PARAMS if model is LLAMA_8B else {"params": 400_000, "active_params": 150_000,
                                                         "embedding_params": 16_384}
    art.facts.update(job=variant, engine="torchtitan" if backend != "cpu" else "torch-fsdp2",
                     data="synthetic: uniform random tokens", model=model, seq_len=8192 if model is LLAMA_8B else 128,
                     local_batch=2, dtype="bf16", procs_per_node=ppn, steps=steps, warmup_steps=3,
                     world_sizes="1,2,4", world_sizes_run=",".join(str(n) for n in sorted(tps)), launcher="srun",
                     failures=list(failures), **counts)
    for nodes, value in tps.items():
        labels = {"nodes": nodes, "ranks": nodes * ppn}
        step_s = 8192 * 2 / value
        art.add("tokens_per_s_per_gpu", value, "tokens/s", **labels)
        art.add("step_time_mean_s", step_s, "s", **labels)
        art.add("step_time_p50_s", step_s, "s", **labels)
        art.add("step_time_p99_s", step_s * (1 + 3 * cv), "s", **labels)
        art.add("step_time_cv", cv, "ratio", **labels)
        if all(math.isfinite(x) for x in loss):
            art.add("loss_first", loss[0], "nats", **labels)
            art.add("loss_last", loss[1], "nats", **labels)
        else:  # as the probe says a loss that went NaN or inf (JSON has neither): the world's first such step
            art.facts.setdefault("nonfinite_loss", []).append({"nodes": nodes, "ranks": nodes * ppn, "step": 0,
                                                               "loss": str(loss[1])})
        for step in range(steps):
            value = loss[0] + (loss[1] - loss[0]) * step / (steps - 1)  # NaN from step 0 when loss[1] is
            if math.isfinite(value):
                art.add("loss", value, "nats", step=step, **labels)
            art.add("step_seconds", step_s * (1 + cv * math.sin(step)), "s", step=step, **labels)
        art.add("peak_memory_bytes", 60 * 2**30, "bytes", **labels)
        art.add("time_to_first_step_s", 30.0 + 5 * nodes, "s", **labels)
        if variant == "moe":
            art.add("alltoall_share", (alltoall or {}).get(nodes, 0.1), "ratio", **labels)
        if own_mfu is not None:
            art.add("torchtitan_mfu_pct", own_mfu, "%", **labels)
    if status == "error":
        art.error("1 of 3 world sizes failed")
    elif status == "skipped":
        art.skip("no GPU visible")
    return art.to_dict()


def cluster(variant="dense", hosts=("h1", "h2", "h3", "h4"), **kw):
    return [train_doc(h, variant, **kw) for h in hosts]


def test_failures_name_the_host_rank_and_log():
    crash = {"nodes": 2, "kind": "crash", "log": "training-dense.n2.log", "stuck_ranks": [],
             "message": "rank 9 on h2 crashed at step 4: CUDA error: an illegal memory access", "log_tail": "..."}
    run = make_run([train_doc("h1"), train_doc("h2", failures=[crash], status="error", tps={1: GOOD_TPS})],
                   unreachable=["h3"])
    c = check("training.dense_failures")
    assert c["kind"] == "net_failures"  # the network phase's grader: the same facts.failures shape
    rows = {h: grade_failures(c, run, h)[0] for h in ("h1", "h2", "h3")}
    assert rows["h1"]["status"] == "pass" and rows["h1"]["observed"] == "none (world sizes 1,2,4)"
    assert rows["h2"]["status"] == "fail" and rows["h2"]["observed"] == "1 crash"
    assert "rank 9 on h2 crashed at step 4" in rows["h2"]["reason"]
    assert "(log: artifacts/h2/training-dense.n2.log)" in rows["h2"]["reason"]
    assert rows["h3"]["reason"] == "host unreachable"


def test_the_loss_must_fall_at_every_world_size_on_every_backend():
    c = check("training.dense_loss")
    assert c["severity"] == "major" and "backends" not in c
    run = make_run([train_doc("good"), train_doc("flat", loss=(7.0, 7.2)), train_doc("nan", loss=(7.0, math.nan)),
                    train_doc("cpu", backend="cpu", model=TINY, tps={1: 900, 2: 880})])
    good = gt.grade_loss(c, run, "good")
    assert [r["status"] for r in good] == ["pass"] * 3
    assert good[0]["subject"] == "1 node (8 ranks)" and good[0]["observed"] == "11 → 7 nats over 23 steps (3 warm-up)"
    flat = gt.grade_loss(c, run, "flat")
    assert {r["status"] for r in flat} == {"fail"} and flat[0]["severity"] == "major"
    assert flat[0]["reason"] == "the loss did not fall: the job does not learn at this world size"
    nan = gt.grade_loss(c, run, "nan")
    assert [(r["status"], r["subject"], r["observed"]) for r in nan] == [
        ("fail", "1 node (8 ranks)", "nan at step 0"), ("fail", "2 nodes (16 ranks)", "nan at step 0"),
        ("fail", "4 nodes (32 ranks)", "nan at step 0")]
    assert nan[0]["reason"] == "the loss is not finite (nan first at step 0): the numerics diverged"
    assert [r["status"] for r in gt.grade_loss(c, run, "cpu")] == ["pass", "pass"]  # judged on the CPU backend too


class _World:
    """What training.record() reads of a finished world: this node's ranks, the world's rank count and each rank's
    records, as probes/common/worlds.py reads them back (one JSON line each, written by the rank harness)."""

    def __init__(self, records, world):
        self.ranks, self.world = [0], world
        self._records = [json.loads(json.dumps(r)) for r in records]

    def records(self, rank):
        return self._records


def test_a_nan_loss_in_torchtitans_log_fails_the_loss_check_and_keeps_the_throughput(tmp_path):
    """The real H200 capture (tests/fixtures/torchtitan/README.md) with one change: the loss of steps 6-10 is what
    torchtitan prints for NaN ("{:7.4f}" of nan: "    nan"). Read as the probe reads it: its messages through the
    StepReader, the rank's records through record(). Before: the loss went into the results as NaN, writing the
    artifact raised ValueError and the host's whole training artifact (tokens/s, MFU, step times) was lost."""
    capture = Path(__file__).resolve().parents[1] / "fixtures/torchtitan/h200_llama3_debugmodel_rank0_2025-11.log"
    lines = [re.sub(r"loss: +[\d.]+", "loss:     nan", line) if re.search(r"step: +([6-9]|10) ", line) else line
             for line in capture.read_text().splitlines()]
    assert sum("loss:     nan  grad_norm:" in line for line in lines) == 5
    out = []
    reader = titan.StepReader({"rank": 0, "warmup_steps": 2}, out.append, lambda *a: None)
    for line in lines:  # what torchtitan logs: the message, before its formatter adds the header and torchrun the label
        reader.filter(logging.LogRecord("root", logging.INFO, __file__, 0, torchtitan_log.split_line(line)[1], None,
                                        None))
    out.append(reader.summary())
    art = Artifact("training", "r", "h1", variant="dense")
    art.device.update(backend="cuda", model=H200, count=8)
    art.facts.update(job="dense", steps=8, warmup_steps=2)
    training.record(art, _World(out, 8), 1)
    path = write_json_atomic(str(tmp_path / "training-dense.json"), art.to_dict())
    doc = json.loads(Path(path).read_text())
    assert doc["facts"]["nonfinite_loss"] == [{"nodes": 1, "ranks": 8, "step": 5, "loss": "nan"}]
    by = {m: [(r["labels"].get("step"), r["value"]) for r in doc["results"] if r["metric"] == m]
          for m in ("loss", "loss_first", "tokens_per_s_per_gpu", "step_time_cv")}
    # the curve keeps its finite points (torchtitan's steps 1-5 are the curve's 0-4), no first/last loss
    assert by["loss"] == [(0, 8.0277), (1, 7.7082), (2, 6.9532), (3, 6.0256), (4, 5.1762)] and by["loss_first"] == []
    # tokens/s per GPU of the timed steps (3-10: torchtitan's own tps, harmonic mean) and the step times are kept
    tps = [359546, 347712, 338287, 317373, 329413, 364703, 351177, 324245]
    assert by["tokens_per_s_per_gpu"] == [(None, pytest.approx(8 / sum(1 / t for t in tps), rel=1e-5))]
    assert len(by["step_time_cv"]) == 1
    run = make_run([doc])
    (row,) = gt.grade_loss(check("training.dense_loss"), run, "h1")
    assert (row["status"], row["subject"], row["observed"]) == ("fail", "1 node (8 ranks)", "nan at step 5")
    assert row["reason"] == "the loss is not finite (nan first at step 5): the numerics diverged"
    table = section.job_table(run, "dense")
    assert table.columns[7] == "peak allocated GiB" and table.rows[0][8] == "nan at step 5"


@pytest.mark.parametrize("tps,status", [(GOOD_TPS, "pass"), (4500, "warn"), (3000, "fail")])
def test_dense_mfu_against_torchtitans_figure(tps, status):
    c = check("training.torchtitan_dense")  # 0.7 x 33.7 = 23.59 %, warn below 0.85 x = 28.65 %
    run = make_run([train_doc("h1", tps={1: tps, 2: GOOD_TPS})])
    [row] = gt.grade_throughput(c, run, "h1")
    assert row["status"] == status and row["subject"] == "1 node (8 ranks)"
    assert row["observed"].startswith("%.3g %% MFU (%d tokens/s per GPU × 57.91 GFLOP per token / 989 TFLOPS)" % (
        100 * tps * 57_914_449_920 / 989e12, tps))
    assert row["expected"].startswith(">= 23.59 (0.7 × training_llama8b_mfu_pct 33.7)")
    if status == "warn":
        assert row["expected"].endswith("(warn below >= 28.65 (0.85 × training_llama8b_mfu_pct 33.7))")


def test_torchtitans_own_mfu_is_shown_beside_ours():
    """Under torchtitan the row also says the MFU torchtitan printed (its FLOPs count, its peak): the figure an
    engineer who runs it by hand compares with."""
    c = check("training.torchtitan_dense")
    run = make_run([train_doc("h1", own_mfu=33.41), train_doc("h2")])
    [row] = gt.grade_throughput(c, run, "h1")
    assert row["status"] == "pass" and row["observed"].endswith("989 TFLOPS); torchtitan's own: 33.4 %")
    assert "torchtitan's own" not in gt.grade_throughput(c, run, "h2")[0]["observed"]


def test_dense_tokens_per_s_and_the_skips_with_their_reasons():
    c = check("training.dense_tokens_per_s")
    run = make_run([train_doc("h100"), train_doc("h200", gpu=H200), train_doc("tiny", model=TINY),
                    train_doc("cpu", backend="cpu", model=TINY), train_doc("off", status="skipped", tps={})])
    assert gt.grade_throughput(c, run, "h100")[0]["status"] == "pass"
    assert gt.grade_throughput(c, run, "h200")[0]["reason"] == (
        "no expectation for H200-SXM: gpus.yml has no training_llama8b_tps_per_gpu for this GPU model")
    tiny = gt.grade_throughput(c, run, "tiny")[0]
    assert tiny["status"] == "skip" and tiny["reason"].startswith(
        "the expectation is for Llama 3.1 8B (layers 32, dim 4096, n_heads 32, n_kv_heads 8, ffn_dim 14336, vocab "
        "128256) at seq_len 8192; this run trained layers 2, dim 64")
    assert gt.grade_throughput(c, run, "cpu")[0]["reason"] == "backend=cpu: expectation is for cuda/rocm"
    assert gt.grade_throughput(c, run, "off")[0]["reason"] == "no GPU visible"


@pytest.mark.parametrize("gpu,key,peak", [("NVIDIA H100 PCIe", "H100-PCIe", 756), ("NVIDIA H100 NVL", "H100-NVL", 835),
                                          ("NVIDIA H200 NVL", "H200-NVL", 835)])
def test_pcie_and_nvl_cards_are_not_judged_by_the_sxm_parts_figures(gpu, key, peak):
    """A healthy H100 PCIe at 30 % MFU (3,916 tokens/s per GPU) was judged against H100 SXM's 989 TFLOPS peak and
    torchtitan's SXM figures: 22.9 % MFU and two fails. Its own entry gives its own peak, and torchtitan published
    nothing for these cards, so both checks skip with the reason."""
    tps = round(0.30 * peak * 1e12 / 57_914_449_920)
    run = make_run([train_doc("h1", gpu=gpu, tps={1: tps, 2: tps})])
    [mfu_row] = gt.grade_throughput(check("training.torchtitan_dense"), run, "h1")
    assert mfu_row["status"] == "skip" and mfu_row["observed"].startswith(
        "30 %% MFU (%d tokens/s per GPU × 57.91 GFLOP per token / %d TFLOPS)" % (tps, peak))
    assert mfu_row["reason"] == (
        "no expectation for %s: gpus.yml has no training_llama8b_mfu_pct for this GPU model" % key)
    [tps_row] = gt.grade_throughput(check("training.dense_tokens_per_s"), run, "h1")
    assert tps_row["status"] == "skip" and tps_row["reason"] == (
        "no expectation for %s: gpus.yml has no training_llama8b_tps_per_gpu for this GPU model" % key)


def test_a_cpu_run_shows_every_gpu_expectation_as_skip_and_still_judges_the_loss():
    docs = [train_doc(h, v, backend="cpu", model=TINY if v == "dense" else TINY_MOE, tps={1: 900, 2: 890, 4: 880},
                      cv=0.3) for h in ("c1", "c2") for v in ("dense", "moe")]
    rows = [r for r in grade.grade(make_run(docs)) if r["check_id"].startswith("training.")]
    gated = {c["id"] for c in RUBRIC["checks"] if c["id"].startswith("training.") and c.get("backends")}
    assert gated == {"training.torchtitan_dense", "training.dense_tokens_per_s", "training.moe_mfu",
                     "training.dense_step_variance", "training.moe_step_variance"}
    for r in rows:
        if r["check_id"] in gated:
            assert r["status"] == "skip" and r["reason"] == "backend=cpu: expectation is for cuda/rocm"
    by_id = {}
    for r in rows:
        by_id.setdefault(r["check_id"], set()).add(r["status"])
    assert by_id["training.dense_loss"] == by_id["training.moe_loss"] == {"pass"}
    assert by_id["training.dense_ran"] == by_id["training.moe_ran"] == {"pass"}
    assert by_id["training.torchtitan_moe"] == {"pass"} and by_id["training.dense_time_to_first_step"] == {"pass"}


def test_the_placeholders_are_built_with_their_ids_and_categories():
    dense, moe = check("training.torchtitan_dense"), check("training.torchtitan_moe")
    assert (dense["category"], dense["kind"], dense["severity"]) == ("compute", "train_throughput", "major")
    assert (moe["category"], moe["kind"], moe["severity"]) == ("networking", "train_scaling", "major")
    assert not [c for c in RUBRIC["checks"] if c["id"].startswith("training.") and c["kind"] == "not_implemented"]


def test_dense_scaling_from_n_to_2n_nodes():
    c = check("training.dense_scaling")  # warn below 0.9, fail below 0.75
    hosts = ["h1", "h2", "h3", "h4"]
    rows = gt.grade_scaling(c, make_run(cluster(tps={1: 5800, 2: 5700, 4: 5650})), hosts)
    assert [r["status"] for r in rows] == ["pass"] * 4
    # each world against the next smaller one and against the smallest: 4 nodes against 1 is the worst
    assert rows[0]["observed"] == "worst 0.97: 4 nodes (32 ranks) vs 1 node (8 ranks) (5650 vs 5800 tokens/s per GPU)"
    # the slowest host sets the pace: one host at 4000 at 4 nodes makes 4000 / 5700 = 0.70 against 2 nodes and
    # 4000 / 5800 = 0.69 against one
    docs = cluster(hosts=hosts[:3], tps={1: 5800, 2: 5700, 4: 5600}) + [train_doc("h4", tps={1: 5800, 4: 4000})]
    row = gt.grade_scaling(c, make_run(docs), hosts)[0]
    assert row["status"] == "fail" and row["observed"].startswith("worst 0.69: 4 nodes (32 ranks) vs 1 node")
    assert gt.grade_scaling(c, make_run(cluster(tps={1: 5800, 2: 4800})), hosts)[0]["status"] == "warn"  # 0.83
    single = gt.grade_scaling(c, make_run(cluster(tps={1: 5800})), hosts)[0]
    assert single["status"] == "skip" and single["reason"] == (
        "fewer than two world sizes ran (nodes: 1): nothing to scale against")
    cpu = gt.grade_scaling(c, make_run(cluster(backend="cpu", model=TINY, tps={1: 900, 2: 300})), hosts)[0]
    assert cpu["status"] == "warn" and cpu["expected"].endswith("cpu backend: warn only (test hosts share CPUs)")


def test_moe_scaling_points_at_the_network_when_the_dense_job_is_fine():
    c = check("training.torchtitan_moe")  # out of one node: warn below 0.6, fail below 0.4; then 0.85 / 0.7
    hosts = ["h1", "h2"]
    dense_fine = cluster(hosts=hosts, tps={1: 5800, 2: 5750, 4: 5700})
    # one node to two: 0.65 of the one-node pace is within a healthy fabric's cost; two to four: 0.6 fails (four
    # nodes are judged against two, the smallest multi-node world, not again against one)
    moe = cluster("moe", hosts=hosts, tps={1: 3000, 2: 1950, 4: 1170}, alltoall={1: 0.1, 2: 0.35, 4: 0.6})
    row = gt.grade_scaling(c, make_run(dense_fine + moe), hosts)[0]
    assert row["status"] == "fail"
    assert row["observed"] == ("worst 0.60: 4 nodes (32 ranks) vs 2 nodes (16 ranks) (1170 vs 1950 tokens/s per "
                               "GPU); all_to_all 35 % → 60 % of the step")
    assert "and the smallest multi-node world's (warn below 0.85)" in row["expected"]
    assert "against one node >= 0.4 × (warn below 0.6)" in row["expected"]
    assert row["reason"].startswith("the dense job (FLOPs bound) passes training.dense_scaling (worst 0.98")
    assert "this points at the network" in row["reason"]
    # both jobs slow: not the network alone, no such note
    dense_slow = cluster(hosts=hosts, tps={1: 5800, 2: 5750, 4: 3000})
    row = gt.grade_scaling(c, make_run(dense_slow + moe), hosts)[0]
    assert row["status"] == "fail" and "points at the network" not in row["reason"]
    # healthy: the step out of one node costs less than the from_one_node floor
    moe_ok = cluster("moe", hosts=hosts, tps={1: 3000, 2: 2100, 4: 2050})
    assert gt.grade_scaling(c, make_run(dense_fine + moe_ok), hosts)[0]["status"] == "pass"


def test_moe_mfu_has_no_public_expectation_yet_and_says_so():
    c = check("training.moe_mfu")
    run = make_run([train_doc("h1", "moe")])
    [row] = gt.grade_throughput(c, run, "h1")
    assert row["status"] == "skip" and row["subject"] == "4 nodes (32 ranks)"  # nodes: max
    assert row["reason"] == "no expectation for H100-SXM: gpus.yml has no training_moe_mfu_pct for this GPU model"


def test_moe_mfu_below_its_expectation_points_at_the_network_when_dense_mfu_is_fine(monkeypatch):
    models = select.load_models(make_run([]))
    monkeypatch.setitem(models["H100-SXM"], "training_moe_mfu_pct", 30.0)
    monkeypatch.setattr(select, "load_models", lambda run: models)  # gpu_model reads it there
    c = check("training.moe_mfu")  # 150,000 active params, seq 128: a tiny model's MFU is far below 30 %
    run = make_run([train_doc("h1"), train_doc("h1", "moe")])
    [row] = gt.grade_throughput(c, run, "h1")
    assert row["status"] == "fail"
    assert row["reason"].startswith("the dense job (FLOPs bound) passes training.torchtitan_dense (33.7 % MFU")


@pytest.mark.parametrize("cv,status", [(0.02, "pass"), (0.08, "warn"), (0.2, "fail")])
def test_step_time_variance_flags_stragglers(cv, status):
    c = check("training.dense_step_variance")
    rows = gt.grade_step_cv(c, make_run([train_doc("h1", cv=cv)]), "h1")
    assert [r["status"] for r in rows] == [status] * 3
    assert rows[0]["observed"].startswith("cv %.3f (p50 2.84 s, p99 " % cv)
    assert rows[0]["expected"] == "cv <= 0.15 (warn above 0.05)"


def test_time_to_first_step_is_informational():
    c = check("training.dense_time_to_first_step")
    assert c["weight"] == 0 and c["severity"] == "info"
    rows = grade.PER_HOST_KINDS["metric"](c, make_run([train_doc("h1")]), "h1")
    assert [(r["subject"], r["status"], r["observed"]) for r in rows] == [
        ("nodes=1", "pass", "35 s"), ("nodes=2", "pass", "40 s"), ("nodes=4", "pass", "50 s")]


@pytest.mark.parametrize("backend", ["cuda", "cpu"])
def test_the_section_shows_both_jobs_at_three_world_sizes_with_its_plots(tmp_path, backend):
    kw = {"backend": backend} if backend == "cuda" else {"backend": "cpu", "model": TINY}
    docs = cluster(tps={1: 5800, 2: 5700, 4: 5600}, **kw) + cluster("moe", backend=backend, tps={1: 3000, 2: 2100,
                                                                                                    4: 2000})
    run = make_run(docs)
    rows = grade.grade(run)
    blocks = section.blocks(run, rows, str(tmp_path))
    tables = [b for b in blocks if isinstance(b, Table)]
    dense, moe = tables[1], tables[2]
    assert [r[0] for r in dense.rows] == [1, 2, 4] and [r[1] for r in moe.rows] == [8, 16, 32]
    assert moe.columns[-1] == "all_to_all share" and moe.rows[0][-1] == "10 %"
    if backend == "cuda":
        assert dense.rows[0][3] == "34 %" and dense.rows[0][8] == "11 → 7"  # 5800 x 57.91 GFLOP / 989 TFLOPS
        assert moe.rows[0][3] == "0.000303 %"  # a tiny MoE: 3000 x 998,304 FLOP per token / 989 TFLOPS
    else:
        assert dense.rows[0][3] == "—, backend=cpu"
    images = [i.file for b in blocks if isinstance(b, Figures) for i in b.images]
    assert images == ["training_scaling.png", "training_step_time.png", "training_loss.png"]
    assert all((Path(tmp_path) / f).stat().st_size > 0 for f in images)
    md = section.render(run, rows, None)
    assert "## Training" in md and "### Dense (FSDP)" in md and "### MoE (expert parallelism)" in md
    engine = "torchtitan" if backend == "cuda" else "torch-fsdp2"
    assert "Engine `%s`, data: synthetic: uniform random tokens." % engine in md
    assert "8 experts, top 2, expert FFN 64, 1 shared" in md
    assert "Training checks: " in md


def test_the_section_lists_failures_with_their_logs():
    hang = {"nodes": 4, "kind": "hang", "log": "training-moe.n4.log", "stuck_ranks": [3, 17],
            "message": "hang at 4 nodes: rank 17 on h3 stuck in all_to_all (step 6)"}
    run = make_run([train_doc("h3", "moe", failures=[hang], status="error", tps={1: 3000, 2: 2000})])
    md = section.render(run, [], None)
    assert ("- **moe** (h3, 4 nodes, hang): hang at 4 nodes: rank 17 on h3 stuck in all_to_all (step 6) — log: "
            "[h3/training-moe.n4.log](../artifacts/h3/training-moe.n4.log)") in md
    assert "| h3 | not run | error [1] |" in md


def test_scaling_takes_the_smaller_worlds_pace_over_the_hosts_of_the_larger():
    """One-node worlds run on every host, an n-node world on the first n (placement order). h1 and h2 make 5800
    tokens/s per GPU alone and 4300 together: 0.74 of their own pace, below the 0.75 floor. h4, slow alone (4500),
    never ran 2 nodes; taking the one-node pace over every host made the baseline 4500 and the step passed at 0.96."""
    c = check("training.dense_scaling")
    hosts = ["h1", "h2", "h3", "h4"]
    docs = [train_doc("h1", tps={1: 5800, 2: 4300, 4: 4250}), train_doc("h2", tps={1: 5800, 2: 4300, 4: 4250}),
            train_doc("h3", tps={1: 5800, 4: 4250}), train_doc("h4", tps={1: 4500, 4: 4250})]
    run = make_run(docs)
    rows = gt.grade_scaling(c, run, hosts)
    assert {r["status"] for r in rows} == {"fail"}
    assert rows[0]["observed"] == "worst 0.74: 2 nodes (16 ranks) vs 1 node (8 ranks) (4300 vs 5800 tokens/s per GPU)"
    # each comparison: (ratio, smaller, larger, smaller's pace over the larger's hosts, larger's pace)
    assert [(round(r, 3), s[0], lg[0], a, b) for r, s, lg, a, b in gt.scaling_steps(run, "dense")] == [
        (0.741, 1, 2, 5800, 4300), (0.944, 1, 4, 4500, 4250), (0.988, 2, 4, 4300, 4250)]


def test_moe_scaling_takes_the_one_node_pace_over_the_hosts_of_the_larger_world():
    """The same bias under the MoE job's from_one_node floors (fail below 0.4): 1150 against the 3000 of the two
    hosts that ran 2 nodes is 0.38; against h4's 1800 alone it passed at 0.64."""
    c = check("training.torchtitan_moe")
    hosts = ["h1", "h2", "h3", "h4"]
    docs = [train_doc("h1", "moe", tps={1: 3000, 2: 1150, 4: 1100}), train_doc("h2", "moe", tps={1: 3000, 2: 1150,
                                                                                                  4: 1100}),
            train_doc("h3", "moe", tps={1: 3000, 4: 1100}), train_doc("h4", "moe", tps={1: 1800, 4: 1100})]
    row = gt.grade_scaling(c, make_run(docs), hosts)[0]
    assert row["status"] == "fail"
    assert row["observed"] == ("worst 0.38: 2 nodes (16 ranks) vs 1 node (8 ranks) (1150 vs 3000 tokens/s per "
                               "GPU); all_to_all 10 % → 10 % of the step")


def test_a_steady_loss_per_doubling_is_judged_against_the_smallest_world():
    """0.91 per doubling from 1 to 16 nodes: every step passes the 0.9 warn line, but 16 nodes make 0.686 of one
    node's pace, below the 0.75 floor. As the network phase's scaling: each world against the next smaller one and
    against the smallest."""
    c = check("training.dense_scaling")
    tps = {n: 5800 * 0.91 ** i for i, n in enumerate((1, 2, 4, 8, 16))}
    hosts = ["h%d" % i for i in range(1, 17)]
    rows = gt.grade_scaling(c, make_run(cluster(hosts=hosts, tps=tps)), hosts)
    assert len(rows) == 16 and {r["status"] for r in rows} == {"fail"}
    assert rows[0]["observed"] == ("worst 0.69: 16 nodes (128 ranks) vs 1 node (8 ranks) (3977 vs 5800 tokens/s per "
                                   "GPU)")
    assert rows[0]["expected"] == ("tokens/s per GPU at each world size >= 0.75 × the next smaller world's (n to 2n) "
                                   "and the smallest world's (warn below 0.9)")


def test_moe_scaling_on_a_healthy_fabric_pays_the_step_out_of_one_node_once():
    """The MoE job loses its step out of one node once (all_to_all leaves NVLink for the NICs, judged on
    from_one_node's floors); beyond two nodes per-GPU all_to_all bandwidth stays level on a healthy fabric. So a large
    world is judged against two nodes, the smallest multi-node world: against one node every large world would pay
    that step again on its floors (0.62 out of one node, then 0.97 per doubling: 0.55 of one node at 32 nodes, a warn
    on a healthy fabric)."""
    c = check("training.torchtitan_moe")
    hosts = ["h%d" % i for i in range(1, 33)]
    dense = cluster(hosts=hosts, tps={1: 5800, 2: 5750, 4: 5700, 8: 5700, 16: 5650, 32: 5600})
    moe = cluster("moe", hosts=hosts, tps={1: 3000, 2: 1860, 4: 1804, 8: 1750, 16: 1698, 32: 1647})
    row = gt.grade_scaling(c, make_run(dense + moe), hosts)[0]
    assert row["status"] == "pass", row["observed"]
    assert row["observed"].startswith("worst 0.62: 2 nodes (16 ranks) vs 1 node (8 ranks)")
    # a steady loss among the multi-node worlds still adds up against two nodes: 0.93 per doubling, 0.70 at 32
    lossy = cluster("moe", hosts=hosts, tps={1: 3000, 2: 2000, 4: 1860, 8: 1730, 16: 1609, 32: 1496})
    row = gt.grade_scaling(c, make_run(dense + lossy), hosts)[0]
    assert row["status"] == "warn" and row["observed"].startswith("worst 0.75: 32 nodes (256 ranks) vs 2 nodes")


# --- A number shown beside the line it was judged against is on the line's side (reports/shown.py).
def test_an_mfu_just_under_its_floor_is_shown_under_it():
    """4028 tokens/s per GPU is 23.587 % MFU, under the floor 23.59 % (0.7 × 33.7): a fail shown as "23.6 %"."""
    run = make_run([train_doc("h1", tps={1: 4028, 2: GOOD_TPS})])
    [row] = gt.grade_throughput(check("training.torchtitan_dense"), run, "h1")
    assert row["status"] == "fail"
    assert row["observed"] == "23.587 % MFU (4028 tokens/s per GPU × 57.91 GFLOP per token / 989 TFLOPS)"


def test_tokens_per_s_just_under_the_warn_line_are_shown_under_it():
    """4897.6 tokens/s per GPU is under the warn line 4897.7 (0.85 × 5762): shown as "4898" before."""
    run = make_run([train_doc("h1", tps={1: 4897.6, 2: GOOD_TPS})])
    [row] = gt.grade_throughput(check("training.dense_tokens_per_s"), run, "h1")
    assert (row["status"], row["observed"]) == ("warn", "4897.6 tokens/s per GPU")


def test_a_fail_line_just_over_the_value_is_shown_over_it():
    """4033.3 tokens/s per GPU fails the line 4033.4 (0.7 × 5762): "%.4g" showed the line as ">= 4033", met by the
    value beside it."""
    run = make_run([train_doc("h1", tps={1: 4033.3, 2: GOOD_TPS})])
    [row] = gt.grade_throughput(check("training.dense_tokens_per_s"), run, "h1")
    assert (row["status"], row["expected"]) == ("fail", ">= 4033.4 (0.7 × training_llama8b_tps_per_gpu 5762)")


def test_a_step_time_cv_just_over_the_warn_line_is_shown_over_it():
    """A cv of 0.0504 warns (above 0.05): "%.3f" showed it as 0.050."""
    rows = gt.grade_step_cv(check("training.dense_step_variance"), make_run([train_doc("h1", cv=0.0504)]), "h1")
    assert rows[0]["status"] == "warn" and rows[0]["observed"].startswith("cv 0.0504 (p50 2.84 s, p99 ")


def test_a_scaling_ratio_just_under_its_floor_is_shown_under_it():
    """2 nodes at 0.7496 of one node's pace fail (below 0.75): shown as "worst 0.75" before."""
    rows = gt.grade_scaling(check("training.dense_scaling"), make_run(cluster(tps={1: 5800, 2: 4347.68})),
                            ["h1", "h2", "h3", "h4"])
    assert (rows[0]["status"], rows[0]["observed"]) == (
        "fail", "worst 0.7496: 2 nodes (16 ranks) vs 1 node (8 ranks) (4348 vs 5800 tokens/s per GPU)")


def test_the_section_shows_judged_numbers_on_their_side_of_the_checks_lines():
    """The dense table's one-node world: 4897.6 tokens/s per GPU (under the warn line 4897.7) and a step time cv of
    0.05004 (over the warn line 0.05), and in another run 23.587 % MFU (under the floor 23.59 %), were shown as 4898,
    0.05 and 23.6 % (3 significant digits)."""
    table = section.job_table(make_run(cluster(tps={1: 4897.6, 2: GOOD_TPS}, cv=0.05004)), "dense")
    assert table.rows[0][2] == "4897.6" and table.rows[0][6] == "0.05004"
    assert table.rows[1][2] == "5762" and table.rows[1][6] == "0.05004"  # 2 nodes: no tokens/s line at 2 nodes
    table = section.job_table(make_run(cluster(tps={1: 4028, 2: GOOD_TPS})), "dense")
    assert table.rows[0][3] == "23.587 %" and table.rows[0][6] == "0.02"
