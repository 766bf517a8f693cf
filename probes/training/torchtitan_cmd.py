"""The torchtitan trainer's argv for the training phase's two jobs, from a small plan dict.

The option names are torchtitan 0.3.0's (PyPI wheel torchtitan-0.3.0). That release dropped --job.config_file and
the TOML train_configs: a run names a Python config with --module/--config (config/manager.py ConfigManager.
_load_config), and every other option is a dataclass path parsed by tyro (config/manager.py parse_args):

    --module llama3 --config llama3_8b          models/llama3/config_registry.py  def llama3_8b()
    --module gpt_oss --config gpt_oss_20b       models/gpt_oss/config_registry.py def gpt_oss_20b() (MoE)
    --training.steps / .local_batch_size / .seq_len           config/configs.py TrainingConfig
    --parallelism.data_parallel_shard_degree                  config/configs.py ParallelismConfig (-1: all ranks)
    --parallelism.expert_parallel_degree                      config/configs.py ParallelismConfig (1: off)
    --compile.enable / --compile.no-enable                    config/configs.py CompileConfig.enable (bool pair as the
                                                              wheel's own tests spell it, experiments/*/tests)
    --lr_scheduler.warmup_steps                               components/optimizer/lr_scheduler.py Config.warmup_steps
    --dataloader.dataset / --dataloader.dataset_path          components/dataloader.py BaseDataLoader.Config
    --hf_assets_path, --dump_folder                           trainer.py Trainer.Config
    --metrics.log_freq                                        components/metrics.py MetricsProcessor.Config
    --profiler.no-enable-profiling                            tools/profiler.py Profiler.Config.enable_profiling
                                                              (llama3_8b turns profiling on, every 100 steps)
    --training.disable_cuda_graphs                            config/configs.py TrainingConfig.disable_cuda_graphs:
                                                              0.3.0 refuses gpt_oss_20b with expert parallelism
                                                              unless set ("CUDA graphs support only expert parallel
                                                              token dispatcher configurations without CPU
                                                              synchronization"), so the MoE job sets it

Checked against the 0.3.0 wheel's own ConfigManager (a scratch venv with CPU torch 2.13 and triton, 2026-12-05): both
jobs' argv parse, every option to the value meant (tests/unit/test_torchtitan_cmd.py runs that check where torchtitan
is importable).

The wheel installs no console script; train.py runs as `python -m torchtitan.train` (its __main__ block), which is
also what torchrun's `-m torchtitan.train` runs. The launcher (torchrun or srun) wraps this argv elsewhere.

Datasets 0.3.0 knows (hf_datasets/text_datasets.py DATASETS): c4 (allenai/c4, streamed), c4_test (a local copy at
tests/assets/c4_test of the source tree, not in the wheel), c4_validation. It has no synthetic-data loader, so a plan
that asks for synthetic data is refused rather than silently trained on something else.

plan keys (all but the job's own defaults optional):
    config         the config_registry function ("llama3_8b", "gpt_oss_20b", "deepseek_v3_16b", ...)
    module         the model module; defaults to the job's (llama3 / gpt_oss)
    steps, warmup, local_batch, seq_len      ints
    data           {"dataset": "c4", "path": "/data/c4"}: dataset name (default c4) and its local path (optional)
    tokenizer      hf_assets_path: the directory holding the tokenizer
    dp_shard       FSDP degree (-1: every rank); ep: expert-parallel degree (MoE job)
    compile        True/False: --compile.enable / --compile.no-enable; absent: the config's default
    cuda_graphs    False: --training.disable_cuda_graphs; absent: the config's default (the MoE job: False)
    structured_logging   False: --debug.no-enable-structured-logging (config/configs.py DebugConfig); absent: on
    profile        False: --profiler.no-enable-profiling; absent: the config's default
    log_freq       steps between metric lines
    dump_folder    where torchtitan writes outputs
"""

TORCHTITAN_VERSION = "0.3.0"
TRAIN_MODULE = "torchtitan.train"

LLAMA3_FSDP = {"module": "llama3", "config": "llama3_8b"}
MOE_EP = {"module": "gpt_oss", "config": "gpt_oss_20b"}
DATASETS = ("c4", "c4_test", "c4_validation")


def _positive(plan, key):
    value = plan.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("plan %s must be a positive int, not %r" % (key, value))
    return value


def _degree(plan, key):
    """A parallel degree: a positive int, or -1 ("every rank", torchtitan's default for dp_shard)."""
    value = plan.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (value < 1 and value != -1):
        raise ValueError("plan %s must be a positive int or -1, not %r" % (key, value))
    return value


def _data_args(data):
    if data is None:
        return []
    if data == "synthetic" or (isinstance(data, dict) and data.get("synthetic")):
        raise ValueError("torchtitan %s has no synthetic dataloader (hf_datasets/text_datasets.py); give a dataset "
                         "and a local path, e.g. {'dataset': 'c4', 'path': '/data/c4'}" % TORCHTITAN_VERSION)
    if not isinstance(data, dict):
        raise ValueError("plan data must be a dict {'dataset', 'path'}, not %r" % (data,))
    dataset = data.get("dataset", "c4")
    if dataset not in DATASETS:
        raise ValueError("dataset %r is not one torchtitan %s knows (%s)" % (dataset, TORCHTITAN_VERSION,
                                                                              ", ".join(DATASETS)))
    args = ["--dataloader.dataset", dataset]
    if data.get("path"):
        args += ["--dataloader.dataset_path", str(data["path"])]
    return args


def _training_args(plan):
    args = []
    for key, option in (("steps", "--training.steps"), ("local_batch", "--training.local_batch_size"),
                        ("seq_len", "--training.seq_len")):
        value = _positive(plan, key)
        if value is not None:
            args += [option, str(value)]
    warmup = plan.get("warmup")
    if warmup is not None:
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
            raise ValueError("plan warmup must be an int >= 0, not %r" % (warmup,))
        args += ["--lr_scheduler.warmup_steps", str(warmup)]
    return args


def _parallel_args(plan):
    args = []
    dp_shard, ep = _degree(plan, "dp_shard"), _degree(plan, "ep")
    if dp_shard == -1:
        # one token, so that no argument parser takes "-1" for an option
        args.append("--parallelism.data_parallel_shard_degree=-1")
    elif dp_shard is not None:
        args += ["--parallelism.data_parallel_shard_degree", str(dp_shard)]
    if ep is not None:
        # 0.3.0 borrows EP ranks from FSDP: dp_shard * cp * tp == efsdp * ep (config/configs.py ParallelismConfig)
        if ep == -1:
            raise ValueError("plan ep must be a positive int")
        if dp_shard not in (None, -1) and dp_shard % ep:
            raise ValueError("ep %d does not divide dp_shard %d" % (ep, dp_shard))
        args += ["--parallelism.expert_parallel_degree", str(ep)]
    return args


def _switch_args(plan):
    args = []
    if plan.get("compile") is not None:
        args.append("--compile.enable" if plan["compile"] else "--compile.no-enable")
    if plan.get("profile") is False:
        args.append("--profiler.no-enable-profiling")
    if plan.get("cuda_graphs") is False:
        args.append("--training.disable_cuda_graphs")
    if plan.get("structured_logging") is False:
        args.append("--debug.no-enable-structured-logging")
    log_freq = _positive(plan, "log_freq")
    if log_freq is not None:
        args += ["--metrics.log_freq", str(log_freq)]
    return args


def trainer_args(plan, defaults=None):
    """The options after `-m torchtitan.train`, in a fixed order: --module/--config first (ConfigManager reads them
    before tyro sees the rest), then training, data, parallelism, switches, paths."""
    merged = dict(defaults or {})
    merged.update({k: v for k, v in plan.items() if v is not None})
    if not merged.get("module") or not merged.get("config"):
        raise ValueError("plan needs a module and a config (e.g. llama3 / llama3_8b)")
    args = ["--module", str(merged["module"]), "--config", str(merged["config"])]
    args += _training_args(merged)
    args += _data_args(merged.get("data"))
    args += _parallel_args(merged)
    args += _switch_args(merged)
    if merged.get("tokenizer"):
        args += ["--hf_assets_path", str(merged["tokenizer"])]
    if merged.get("dump_folder"):
        args += ["--dump_folder", str(merged["dump_folder"])]
    return args


def trainer_argv(plan, defaults=None, python="python"):
    """The whole trainer command: python -m torchtitan.train <trainer_args>."""
    return [python, "-m", TRAIN_MODULE] + trainer_args(plan, defaults)


def llama3_fsdp_argv(plan, python="python"):
    """Job 1: Llama 3.1 8B with FSDP (FLOPs-bound). Expert parallelism makes no sense for a dense model."""
    if plan.get("ep") not in (None, 1):
        raise ValueError("the Llama 3 FSDP job has no experts; ep must be 1 or absent")
    return trainer_argv(plan, LLAMA3_FSDP, python)


def moe_ep_argv(plan, python="python"):
    """Job 2: a GPT-OSS-style MoE with expert parallelism (collective-bound): ep is required."""
    if _degree(plan, "ep") in (None, -1):
        raise ValueError("the MoE job needs an expert-parallel degree (plan ep)")
    # 0.3.0's all-to-all token dispatcher synchronises with the host: its config refuses CUDA graphs with it
    return trainer_argv(dict({"cuda_graphs": False}, **plan), MOE_EP, python)
