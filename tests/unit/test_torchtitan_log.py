"""torchtitan log parser (probes/training/torchtitan_log.py) on real captures, and the trainer argv builder
(probes/training/torchtitan_cmd.py) against torchtitan 0.3.0's option names. Fixture sources: tests/fixtures/torchtitan/
README.md."""

import re
from pathlib import Path

import pytest

from probes.training import torchtitan_cmd as cmd
from probes.training.torchtitan_log import parse, parse_step, split_line

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "torchtitan"


def _parse(name):
    return parse((FIXTURES / name).read_text())


def _vals(row, *keys):
    return tuple(row[k] for k in keys)


def _kinds(result):
    return [(e["line"], e["kind"]) for e in result["errors"]]


# --- every fixture, with values read off the file -------------------------------------------------------------


def test_h200_debugmodel_full_run():
    r = _parse("h200_llama3_debugmodel_rank0_2025-11.log")
    steps = r["steps"]
    assert [s["step"] for s in steps] == list(range(1, 11))
    assert steps[0] == {"step": 1, "loss": 8.0277, "grad_norm": 1.4604, "memory_gib": 1.21, "memory_pct": 0.86,
                        "tps": 5756, "tflops": 0.41, "mfu_pct": 0.04, "rank": 0, "line": 24}
    assert _vals(steps[-1], "loss", "tps", "tflops", "mfu_pct") == (3.9761, 324245, 23.21, 2.35)
    f = r["facts"]
    assert (f["gpu_name"], f["gpu_memory_gib"], f["device_type"]) == ("NVIDIA H200", 139.81, "CUDA")
    assert (f["model_name"], f["model_flavor"], f["total_params"]) == ("llama3", "debugmodel", 6163712)
    assert f["peak_flops"] == 9.89e14
    assert (f["model_memory_gib"], f["model_memory_pct"]) == (0.0, 0.0)
    assert (f["local_batch_size"], f["global_batch_size"], f["grad_accum_steps"]) == (8, 64, 1)
    assert (f["seq_len"], f["total_steps"], f["warmup_steps"], f["start_step"]) == (2048, 10, 2, 1)
    assert f["parallelism"] == {"dp_shard": 8}
    assert r["errors"] == []


def test_h200_llama3_8b_old_prefix_lost_escape_and_damaged_line():
    r = _parse("h200_llama3_8b_rank0_2025-02.log")
    steps = r["steps"]
    # step 10's line prints "mmemory:": an error row, never a silent row without memory
    assert [s["step"] for s in steps] == [1, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    assert (steps[0]["loss"], steps[0]["memory_gib"], steps[0]["memory_pct"], steps[0]["tps"], steps[0]["mfu_pct"]) \
        == (12.2417, 42.08, 30.10, 1478, 8.65)
    assert (steps[-1]["loss"], steps[-1]["tps"], steps[-1]["mfu_pct"]) == (6.4719, 6856, 40.15)
    assert steps[0]["grad_norm"] is None and steps[0]["tflops"] is None
    (err,) = r["errors"]
    assert (err["line"], err["kind"], err["tool"], err["rank"]) == (32, "unparsed_step", "torchtitan", 0)
    assert "mmemory" in err["reason"] and "torchtitan" in err["reason"]
    assert "step: 10  loss:  9.8821  mmemory: 49.59GiB(35.46%)" in err["text"]
    f = r["facts"]
    # "Model llama3 8B [31msize:" -- the ESC byte was lost in the copy, the rest of the code is dropped
    assert (f["model_name"], f["model_flavor"], f["total_params"]) == ("llama3", "8B", 8030261248)
    assert (f["gpu_name"], f["gpu_memory_gib"], f["peak_flops"]) == ("NVIDIA H200", 139.83, 9.89e14)
    assert (f["start_step"], f["local_batch_size"], f["global_batch_size"], f["seq_len"]) == (1, 1, 8, 8192)
    assert (f["total_steps"], f["warmup_steps"], f["parallelism"]) == (100, 200, {"dp_shard": 8})


def test_llama2_wps_is_tps():
    r = _parse("llama2_7b_wps_2024-10.log")
    steps = r["steps"]
    assert [s["step"] for s in steps] == list(range(117, 131))
    assert _vals(steps[0], "loss", "tps", "mfu_pct", "memory_gib") == (3.9053, 1710, 23.50, 36.20)
    assert (steps[-1]["loss"], steps[-1]["tps"], steps[-1]["mfu_pct"]) == (3.5210, 1707, 23.46)
    assert steps[0]["rank"] is None
    assert r["facts"]["throughput_field"] == "wps"
    assert r["errors"] == []


def test_all_ranks_labelled_keeps_rank0():
    r = _parse("pr1884_llama3_8b_cp2_4ranks_2025-10.log")
    # rank 3 printed step 1 first; rank 0's line (tps 87, tflops 5.02) is the one kept; step 10 came only from rank 2
    assert [(s["step"], s["rank"], s["tps"], s["tflops"], s["mfu_pct"]) for s in r["steps"]] == [(1, 0, 87, 5.02, 0.51)]
    assert r["facts"]["step_rank"] == 0


def test_torchruns_default_role_label_is_a_rank_label():
    # torchrun --tee labels lines "[<role><local rank>]:", role "default" unless --role is given: the real
    # quick-start lines (fixture README) give rank 0 and torchtitan's own line; before, the label stayed in the message
    lines = (FIXTURES / "ascend_quickstart_default0_tee.log").read_text().splitlines()
    assert [split_line(line) for line in lines] == [
        (0, "[titan] xxx - root - INFO - Starting job: Llama 3 debug training"),
        (0, "[titan] xxx - root - INFO - Training starts at step xxx"),
        (0, "[titan] xxx - root - INFO - Training completed"),
        (0, "[titan] xxx - root - INFO - Process group destroyed")]
    # The four-rank capture above with torchrun's default label in place of "[rankN]:" (the only change, the
    # quick start has no step line): the same step, rank 0's, with its tps. Before: 0 steps, every step line an
    # unparsed_step error ("not at the start of its line") and no_steps.
    text = (FIXTURES / "pr1884_llama3_8b_cp2_4ranks_2025-10.log").read_text()
    r = parse(re.sub(r"^\[rank(\d)\]:", r"[default\1]:", text, flags=re.M))
    assert [(s["step"], s["rank"], s["tps"], s["tflops"], s["mfu_pct"]) for s in r["steps"]] == [(1, 0, 87, 5.02, 0.51)]
    assert r["errors"] == [] and r["facts"]["step_rank"] == 0


def test_deepseek_v3_ep():
    r = _parse("pr1373_deepseek_v3_fsdp8_ep2_2025-07.log")
    steps = r["steps"]
    assert [(s["step"], s["loss"], s["grad_norm"], s["tps"], s["tflops"], s["mfu_pct"]) for s in steps] == [
        (1, 12.2616, 0.3918, 1482, 0.61, 0.06), (2, 12.0093, 0.5745, 69111, 28.68, 2.90),
        (3, 11.1697, 1.2095, 74931, 31.09, 3.14)]
    assert (steps[-1]["memory_gib"], steps[-1]["memory_pct"]) == (65.54, 68.99)
    assert r["errors"] == []


def test_unlabelled_ranks_keep_first_copy_of_each_step():
    r = _parse("pr2389_moe_8ranks_unlabelled_2026-02.log")
    steps = r["steps"]
    assert [(s["step"], s["loss"], s["grad_norm"], s["tps"], s["tflops"], s["mfu_pct"], s["line"]) for s in steps] == [
        (4, 7.62585, 26.625, 10050, 314.71, 13.99, 1), (5, 7.07623, 46.5, 10007, 313.36, 13.93, 8)]
    assert (steps[0]["memory_gib"], steps[0]["memory_pct"], steps[0]["rank"]) == (66.91, 37.51, None)
    assert r["facts"]["duplicate_step_lines"] == 6


def test_t4_peak_flops_fallback_and_resumed_steps():
    r = _parse("pr3393_t4_debugmodel_rank0_2026-05.log")
    steps = r["steps"]
    assert [s["step"] for s in steps] == list(range(14, 22)) + list(range(54, 62))
    assert _vals(steps[0], "loss", "grad_norm", "tps", "mfu_pct") == (3.24405, 0.8319, 7282, 0.17)
    assert _vals(steps[-1], "loss", "tps", "tflops", "mfu_pct") == (2.80568, 7096, 0.51, 0.16)
    f = r["facts"]
    assert (f["gpu_name"], f["gpu_memory_gib"]) == ("Tesla T4", 14.56)
    assert (f["peak_flops"], f["peak_flops_fallback"]) == (3.12e14, "Tesla T4")
    assert (f["model_memory_gib"], f["model_memory_pct"], f["total_params"]) == (0.02, 0.12, 6163712)


def test_no_grad_norm_with_tflops():
    r = _parse("pr1287_llama3_8b_no_grad_norm_2025-06.log")
    steps = r["steps"]
    assert [s["step"] for s in steps] == [200, 210, 220, 230, 240, 250]
    assert (steps[0]["loss"], steps[0]["tps"], steps[0]["tflops"], steps[0]["mfu_pct"], steps[0]["grad_norm"]) == (
        6.1384, 5856, 339.16, 34.29, None)
    assert _vals(steps[-1], "loss", "tps", "tflops", "mfu_pct") == (5.8383, 5862, 339.48, 34.33)
    assert r["errors"] == []


def test_step_line_without_mfu():
    r = _parse("pr1461_autoparallel_loss_memory_tps_only_2025-06.log")
    steps = r["steps"]
    assert [(s["step"], s["loss"], s["tps"]) for s in steps][0] == (1, 8.1880, 28)
    assert (steps[-1]["step"], steps[-1]["loss"], steps[-1]["tps"], steps[-1]["memory_gib"]) == (7, 7.6987, 13664, 4.90)
    assert steps[-1]["mfu_pct"] is None and steps[-1]["tflops"] is None
    assert r["facts"]["start_step"] == 1


def test_debugmodel_separators():
    r = _parse("pr1520_debugmodel_rank0_2025-08.log")
    steps = r["steps"]
    assert (steps[0]["step"], steps[0]["loss"], steps[0]["tps"], steps[0]["memory_gib"]) == (1, 8.0629, 14784, 1.01)
    assert (steps[-1]["step"], steps[-1]["loss"], steps[-1]["tps"], steps[-1]["mfu_pct"]) == (5, 5.5166, 309415, 2.24)


def test_eight_unlabelled_h100_ranks_validation_and_interrupt():
    r = _parse("h100_qwen3_0.6b_8ranks_unlabelled_2026-01.log")
    steps = r["steps"]
    # validate step lines are not training steps
    assert [s["step"] for s in steps] == [20, 40, 100]
    assert (steps[0]["loss"], steps[0]["grad_norm"], steps[0]["tps"], steps[0]["tflops"], steps[0]["mfu_pct"]) == (
        11.8347, 4.6875, 40890, 261.49, 26.44)
    assert (steps[-1]["loss"], steps[-1]["tps"], steps[-1]["mfu_pct"], steps[-1]["memory_gib"]) == (
        2.3367, 42332, 27.37, 69.83)
    assert r["facts"]["duplicate_step_lines"] == 21
    f = r["facts"]
    assert f["parallelism"] == {"pp": 1, "dp_replicate": 1, "dp_shard": 8, "cp": 1, "tp": 1, "ep": 1, "etp": 1}
    assert (f["gpu_name"], f["gpu_memory_gib"]) == ("NVIDIA H100 80GB HBM3", 79.18)
    assert (f["model_name"], f["model_flavor"], f["total_params"]) == ("molgen_qwen3", "0.6B", 596049920)
    assert (f["params_dense"], f["params_sparse"], f["params_active"]) == (751632384, 0, 751632384)
    assert (f["local_batch_size"], f["global_batch_size"], f["seq_len"], f["total_steps"]) == (6, 48, 4096, 150000)
    assert _kinds(r) == [(59, "traceback"), (60, "traceback")]
    assert r["errors"][1]["rank"] == 5 and r["errors"][1]["exception"] == "KeyboardInterrupt"


def test_fork_step_of_total_and_crash_traceback():
    r = _parse("aicrosssim_step_of_total_2025-04.log")
    (step,) = r["steps"]
    assert (step["step"], step["loss"], step["memory_gib"], step["tps"], step["mfu_pct"]) == (
        640, 6.2116, 87.04, 52142, 3.09)
    (err,) = r["errors"]
    assert (err["line"], err["kind"]) == (17, "traceback")
    assert err["exception"] == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"


def test_nccl_watchdog_timeout():
    r = _parse("issue810_b200_nccl_watchdog_timeout.log")
    assert r["steps"] == []
    assert _kinds(r) == [(1, "nccl_timeout"), (0, "no_steps")]
    assert "OpType=_ALLGATHER_BASE" in r["errors"][0]["text"] and r["errors"][0]["rank"] == 0


def test_oom():
    r = _parse("issue2362_llama3_8b_oom_rank2_2026-02.log")
    assert _kinds(r) == [(1, "oom"), (0, "no_steps")]
    assert r["errors"][0]["rank"] == 2
    assert "Tried to allocate 7.65 GiB" in r["errors"][0]["text"]


def test_derived_ansi_format_of_0_3_0():
    text = (FIXTURES / "derived_0.3.0_ansi_format.log").read_text()
    assert "\x1b[31mstep:" in text
    r = parse(text)
    assert [(s["step"], s["loss"], s["grad_norm"], s["memory_gib"], s["tps"], s["tflops"], s["mfu_pct"], s["rank"])
            for s in r["steps"]] == [(4, 7.62585, 26.625, 66.91, 10050, 314.71, 13.99, 0),
                                    (5, 7.07623, 46.5, 66.91, 10007, 313.36, 13.93, 0)]
    assert (r["facts"]["model_name"], r["facts"]["total_params"]) == ("llama3", 8030261248)
    assert r["errors"] == []


# --- errors on damaged input ---------------------------------------------------------------------------------


def test_real_0_3_0_start_up_captured_here_under_our_process_group():
    """torchtitan 0.3.0 itself, started inside a rank of the probe's world on this machine (fixture README): every
    start-up fact reads, and a log without a step line is an error row, not zero rows."""
    out = _parse("cpu_trial_0.3.0_startup_2026-12.log")
    f = out["facts"]
    assert (f["version"], f["model_name"], f["model_flavor"], f["total_params"]) == (
        "0.3.0", "llama3", "debugmodel", 6_163_712)
    assert f["peak_flops"] == 3.12e14 and f["peak_flops_fallback"] == "cpu"
    assert f["parallelism"] == {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 1, "tp": 1, "ep": 1}
    assert (f["local_batch_size"], f["global_batch_size"], f["seq_len"], f["total_steps"], f["warmup_steps"],
            f["start_step"]) == (2, 2, 128, 5, 1, 1)
    assert out["steps"] == [] and [e["kind"] for e in out["errors"]] == ["no_steps"]


def test_empty_input_is_an_error_row():
    r = parse("")
    assert r["steps"] == []
    assert r["errors"] == [{"line": 0, "kind": "no_steps", "tool": "torchtitan", "rank": None,
                            "text": "torchtitan: no step line read in 0 lines of log"}]


def test_truncated_step_line_is_an_error_row():
    line = (FIXTURES / "h200_llama3_debugmodel_rank0_2025-11.log").read_text().splitlines()[23]
    # cut at "tps: 5": reads as tps 5 with no tflops/mfu, but the run's other step line has them
    cut = line[:line.index("tps:") + 6]
    # cut inside the mfu value: does not read at all
    cut_mfu = line[:line.index("mfu:") + 7]
    r = parse("\n".join([line, cut, cut_mfu]) + "\n")
    assert [s["step"] for s in r["steps"]] == [1]
    assert _kinds(r) == [(2, "unparsed_step"), (3, "unparsed_step")]
    assert "missing tflops, mfu" in r["errors"][0]["reason"] and r["errors"][0]["text"] == cut
    assert "mfu '0.'" in r["errors"][1]["reason"] and "torchtitan" in r["errors"][1]["reason"]


@pytest.mark.parametrize("message, reason", [
    ("step:  3  loss:  6.9532  grad_norm:  1.9775  memory:  1.34GiB(0.96%)  tps: 359,5", "tps"),
    ("step:  3  loss:  6.9532  grad_norm:  1.9775  memory:  1.34GiB(0.96%)", "no tps/wps"),
    ("step:  3  grad_norm:  1.9775  tps: 359,546", "no loss"),
    ("step:  3  loss:  6.9532  tps: 359,546  tps: 1", "twice"),
    ("step:  3  loss:  6.9532  memory:  1.34GiB  tps: 359,546", "memory"),
    ("step:  3  loss: 6.9x  tps: 359,546", "loss"),
    ("step:  loss:  6.9532  tps: 359,546", "no step number"),
])
def test_damaged_step_messages(message, reason):
    with pytest.raises(ValueError, match=reason):
        parse_step(message)


def test_interleaved_step_line_is_reported():
    glued = ("[N]<-2.0899,-0.0647,-0.9608>[titan] 2026-01-16 02:42:36,857 - root - INFO - "
             "step:  1  loss: 12.4699  tps: 5")
    r = parse(glued + "\n")
    assert _kinds(r) == [(1, "unparsed_step"), (0, "no_steps")]
    assert "interleaved" in r["errors"][0]["reason"]


def test_mfu_not_available_and_srun_label():
    # 0.3.0 prints "mfu: N/A" for a quantized model; srun --label puts "3: " in front
    r = parse("3: [titan] 2026-01-01 00:00:00,000 - root - INFO - step:  2  loss:  7.00000  grad_norm:  1.0000  "
              "memory: 10.00GiB(12.50%)  tps: 1,000  tflops: 5.00  mfu: N/A\n")
    (s,) = r["steps"]
    assert (s["rank"], s["mfu_pct"], s["tflops"], s["tps"]) == (3, None, 5.0, 1000)


def test_split_line_takes_off_label_header_and_colour():
    assert split_line("[rank0]:[titan] 2025-11-25 19:45:01,441 - root - INFO - \x1b[31mstep:  1") == (0, "step:  1")
    assert split_line("    [rank0]:2025-02-13 11:33:35,026 - root - INFO - step: 1") == (0, "step: 1")
    assert split_line("2024-10-03 15:01:18,520 - root - INFO - step: 117") == (None, "step: 117")
    assert split_line("1: [rank9]:[titan] 2026-01-01 00:00:00,000 - root - INFO - step:  5") == (9, "step:  5")


# --- the trainer argv, against torchtitan 0.3.0's option names ---------------------------------------------------


def test_llama3_fsdp_argv():
    argv = cmd.llama3_fsdp_argv({"steps": 50, "warmup": 5, "local_batch": 2, "seq_len": 8192,
                                 "data": {"dataset": "c4", "path": "/data/c4"}, "dp_shard": 16, "compile": True,
                                 "tokenizer": "/assets/Llama-3.1-8B", "log_freq": 1, "profile": False,
                                 "dump_folder": "/out"})
    assert argv == ["python", "-m", "torchtitan.train", "--module", "llama3", "--config", "llama3_8b",
                    "--training.steps", "50", "--training.local_batch_size", "2", "--training.seq_len", "8192",
                    "--lr_scheduler.warmup_steps", "5", "--dataloader.dataset", "c4",
                    "--dataloader.dataset_path", "/data/c4", "--parallelism.data_parallel_shard_degree", "16",
                    "--compile.enable", "--profiler.no-enable-profiling", "--metrics.log_freq", "1",
                    "--hf_assets_path", "/assets/Llama-3.1-8B", "--dump_folder", "/out"]


def test_moe_ep_argv():
    argv = cmd.moe_ep_argv({"steps": 20, "seq_len": 4096, "local_batch": 1, "dp_shard": -1, "ep": 8,
                            "compile": False, "data": {"dataset": "c4_test", "path": "/data/c4_test"}})
    assert argv == ["python", "-m", "torchtitan.train", "--module", "gpt_oss", "--config", "gpt_oss_20b",
                    "--training.steps", "20", "--training.local_batch_size", "1", "--training.seq_len", "4096",
                    "--dataloader.dataset", "c4_test", "--dataloader.dataset_path", "/data/c4_test",
                    "--parallelism.data_parallel_shard_degree=-1", "--parallelism.expert_parallel_degree", "8",
                    "--compile.no-enable", "--training.disable_cuda_graphs"]


def test_other_config_and_python():
    argv = cmd.moe_ep_argv({"module": "deepseek_v3", "config": "deepseek_v3_16b", "ep": 8, "dp_shard": 8},
                           python="/venv/bin/python")
    assert argv == ["/venv/bin/python", "-m", "torchtitan.train", "--module", "deepseek_v3", "--config",
                    "deepseek_v3_16b", "--parallelism.data_parallel_shard_degree", "8",
                    "--parallelism.expert_parallel_degree", "8", "--training.disable_cuda_graphs"]
    assert cmd.trainer_args({"module": "llama3", "config": "llama3_debugmodel"}) == [
        "--module", "llama3", "--config", "llama3_debugmodel"]


def test_both_jobs_argv_parse_with_torchtitans_own_config_manager():
    """Where torchtitan is importable (a GPU node's probe venv; not this project's test venv, whose CPU torch has no
    triton), its own ConfigManager parses both jobs' argv to the values meant. It found the MoE job's CUDA-graph
    refusal."""
    config = pytest.importorskip("torchtitan.config", reason="torchtitan is not installed in this Python")
    manager = config.ConfigManager
    dense = manager().parse_args(cmd.llama3_fsdp_argv({
        "steps": 8, "warmup": 2, "local_batch": 2, "seq_len": 2048, "dp_shard": -1, "compile": False,
        "profile": False, "log_freq": 1, "data": {"dataset": "c4", "path": "/data/c4"}, "tokenizer": "/t",
        "dump_folder": "/out"})[3:])
    assert (dense.training.steps, dense.training.local_batch_size, dense.training.seq_len) == (8, 2, 2048)
    assert (dense.parallelism.data_parallel_shard_degree, dense.compile.enable, dense.profiler.enable_profiling,
            dense.metrics.log_freq, dense.lr_scheduler.warmup_steps) == (-1, False, False, 1, 2)
    assert (dense.dataloader.dataset, dense.dataloader.dataset_path, dense.hf_assets_path, dense.dump_folder) == (
        "c4", "/data/c4", "/t", "/out")
    moe = manager().parse_args(cmd.moe_ep_argv({"dp_shard": -1, "ep": 4, "structured_logging": False})[3:])
    assert moe.parallelism.expert_parallel_degree == 4 and moe.training.disable_cuda_graphs is True
    assert moe.debug.enable_structured_logging is False


@pytest.mark.parametrize("build, plan, match", [
    (cmd.llama3_fsdp_argv, {"data": "synthetic"}, "no synthetic dataloader"),
    (cmd.llama3_fsdp_argv, {"data": {"dataset": "fineweb"}}, "not one torchtitan"),
    (cmd.llama3_fsdp_argv, {"ep": 8}, "no experts"),
    (cmd.llama3_fsdp_argv, {"steps": 0}, "steps"),
    (cmd.llama3_fsdp_argv, {"seq_len": "8192"}, "seq_len"),
    (cmd.moe_ep_argv, {"steps": 10}, "expert-parallel degree"),
    (cmd.moe_ep_argv, {"ep": 3, "dp_shard": 8}, "does not divide"),
    (cmd.trainer_argv, {"steps": 10}, "module and a config"),
])
def test_plans_refused(build, plan, match):
    with pytest.raises(ValueError, match=match):
        build(plan)
