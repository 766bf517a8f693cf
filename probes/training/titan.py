"""The rank side of the training jobs under torchtitan (engine `torchtitan`, GPU nodes): `train(cfg, torch, dist,
emit, progress)`, called like probes/training/job.py's `train` by the world's rank harness (probes/common/rank.py).

The harness has already met the other ranks and set up the process group. torchtitan's trainer finds it initialised
and uses it (0.3.0 distributed/utils.py init_distributed: "already initialized. Skipping init_distributed"), so the
job starts through every launcher (srun, mpirun, torchrun, our pool) with the same naming of crashed and hung ranks
as the torch job. torchtitan runs in this process through its own entry point (`torchtitan.train.main()`, argv from
probes/training/torchtitan_cmd.py): no internal class of it is used, so its config and trainer classes may change
between releases without breaking this.

What it measured comes from its own log, as it is written. torchtitan logs through the root logger (tools/logging.py:
`logger = logging.getLogger()`; init_logger clears the root's handlers, not its filters), so a filter on the root
logger sees every message and lets it through: each step line (torchtitan_log.parse_step) becomes a step record and
the rank's progress (the stall watch), the start-up lines facts. The log itself still goes to the world's log.

Records, as job.py's: setup (the model's parameter counts from the profile's shape, which names torchtitan's config),
per step {"type": "step", "step" (0-based, as job.py's), "t" (start), "warmup", "seconds" (wall time from the previous
step line, or from "Training starts" for the first), "loss" (torchtitan's: the global mean), "tokens_per_s"
(torchtitan's tps: this GPU's tokens/s), "peak_memory_bytes" (as job.py's: GPU max allocated, CPU peak RSS),
"reserved_gib", "mfu_pct" and "tflops" (torchtitan's own, for comparison)}, then a summary (tokens_per_s: the timed
steps' tokens over their seconds, as job.py's) and {"type": "titan", "facts"} (version, peak FLOPS it used for MFU,
GPU, parallel dims).
"""

import gc
import logging
import os
import sys
import time

from probes.common import rank as rank_harness
from probes.training import job, models, torchtitan_cmd, torchtitan_log

GIB = 1 << 30


class StepReader(logging.Filter):
    """A root-logger filter: reads torchtitan's messages as they are logged, lets every one through."""

    def __init__(self, cfg, emit, progress, peak=None):
        super().__init__()
        self.cfg, self.emit, self.progress = cfg, emit, progress
        self.peak = peak
        self.facts, self.done = {}, set()
        self.last_t = None
        self.steps = []
        self.unread = []

    def filter(self, record):
        try:
            _, message = torchtitan_log.split_line(record.getMessage())
        except Exception:  # noqa: BLE001 - a message that cannot be formatted is torchtitan's problem, not ours
            return True
        now = time.time()
        if message.startswith("step:"):
            try:
                row = torchtitan_log.parse_step(message)
            except ValueError as exc:
                self.unread.append("%s: %s" % (exc, message[:200]))
                return True
            self._step(row, now)
        else:
            torchtitan_log.read_facts(message, self.facts, self.done)  # the same reading as parse()
            if message.startswith("Training starts at step"):
                self.last_t = now
                self.progress(0, "step 0", "run")
        return True

    def summary(self):
        """The rank's summary record: as the torch job's, the timed tokens over their seconds (every step has the same
        tokens, so the harmonic mean of torchtitan's per-step tps)."""
        timed = [s for s in self.steps if not s["warmup"] and s["tokens_per_s"]]
        return {"type": "summary", "rank": self.cfg["rank"], "steps": len(timed),
                "tokens_per_s": len(timed) / sum(1.0 / s["tokens_per_s"] for s in timed) if timed else None}

    def _step(self, row, now):
        index = row["step"] - 1 - (self.facts.get("start_step", 1) - 1)
        began = self.last_t if self.last_t is not None else now
        rec = {"type": "step", "rank": self.cfg["rank"], "step": index, "t": began,
               "warmup": index < self.cfg["warmup_steps"], "seconds": max(0.0, now - began), "loss": row["loss"],
               "tokens_per_s": row["tps"], "grad_norm": row["grad_norm"],
               # the torch job's measure (GPU max allocated, CPU peak RSS), read while torchtitan logs the step and
               # before it resets the peak; its own figure is max reserved, rounded to 0.01 GiB
               "peak_memory_bytes": self.peak() if self.peak else None,
               "reserved_gib": row["memory_gib"], "mfu_pct": row["mfu_pct"], "tflops": row["tflops"]}
        self.emit(rec)
        self.steps.append(rec)
        self.last_t = now
        self.progress(index + 1, "step %d" % (index + 1), "run")


def trainer_args(cfg):
    """torchtitan's options for this world: the job's config, the profile's steps and shapes, FSDP over every rank,
    and for the MoE every rank an expert-parallel rank (as the torch job splits its experts)."""
    titan = cfg["torchtitan"]
    plan = {"steps": cfg["warmup_steps"] + cfg["steps"], "warmup": cfg["warmup_steps"],
            "local_batch": cfg["local_batch"], "seq_len": cfg["seq_len"], "dp_shard": -1, "log_freq": 1,
            "profile": False, "compile": titan.get("compile"), "tokenizer": titan.get("tokenizer"),
            "dump_folder": cfg["dump_folder"], "config": titan.get("config"), "module": titan.get("module"),
            # its structured logger starts once per process: in a later world it would write into the first one's
            # dump folder under the first one's rank
            "structured_logging": False}
    if titan.get("dataset") or titan.get("dataset_path"):
        plan["data"] = {"dataset": titan.get("dataset") or "c4", "path": titan.get("dataset_path")}
    if cfg["job"] == "moe":
        plan["ep"] = cfg["world"]
        return torchtitan_cmd.moe_ep_argv(plan)[3:]
    return torchtitan_cmd.llama3_fsdp_argv(plan)[3:]


def train(cfg, torch, dist, emit, progress):
    progress(-1, "setup", "run")
    start = time.perf_counter()
    model_cfg = models.resolve(cfg["job"], cfg["model"])
    counts = models.param_counts(model_cfg, cfg["world"])
    cfg = dict(cfg, dump_folder=os.path.join(os.path.dirname(cfg["results"]), "%s.r%d.titan" % (cfg["key"],
                                                                                                 cfg["rank"])))
    args = trainer_args(cfg)
    setup = {"type": "setup", "rank": cfg["rank"], "params": counts["params"],
             "active_params": counts["active_params"], "embedding_params": counts["embedding"], "model": model_cfg,
             "data": _data_label(cfg["torchtitan"]), "dtype": cfg["dtype"], "engine": "torchtitan",
             "argv": ["-m", torchtitan_cmd.TRAIN_MODULE] + args}
    if cfg["job"] == "moe":
        setup["experts_per_rank"] = counts["experts_per_rank"]
    emit(dict(setup, seconds=time.perf_counter() - start))
    # what torchrun would have set: torchtitan picks its device by LOCAL_RANK (tools/utils.py get_local_device)
    os.environ.update({"RANK": str(cfg["rank"]), "LOCAL_RANK": str(cfg["local_rank"]),
                       "WORLD_SIZE": str(cfg["world"]), "LOCAL_WORLD_SIZE": str(cfg["ppn"]),
                       "MASTER_ADDR": str(cfg["master_addr"]), "MASTER_PORT": str(cfg["master_port"])})
    device = torch.device(cfg["device"])
    reader = StepReader(cfg, emit, progress, peak=lambda: job.peak_memory(torch, device))
    root = logging.getLogger()
    root.addFilter(reader)
    argv = sys.argv
    sys.argv = [torchtitan_cmd.TRAIN_MODULE] + args
    # torchtitan's main() ends the process group, and with it rank 0's store: the ranks still say they are done
    # with the world through that store before this rank's process moves on (probes/common/rank.py leave)
    store = dist.distributed_c10d._get_default_store()
    # what torchtitan's init_distributed would have done, which it skips for our process group: activation
    # checkpointing's recompute must run in the thread that holds the device meshes (spmd_types keeps them per thread)
    threaded = torch.autograd.is_multithreading_enabled()
    torch.autograd.set_multithreading_enabled(False)
    try:
        import torchtitan.train  # noqa: PLC0415 - only on nodes that run torchtitan

        torchtitan.train.main()
    finally:
        sys.argv = argv
        root.removeFilter(reader)
        torch.autograd.set_multithreading_enabled(threaded)
        # torchtitan's GarbageCollection turns automatic collection off and never back on: the next world in this
        # process would keep the trainer's reference cycles (and their GPU memory)
        gc.enable()
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        emit({"type": "titan", "rank": cfg["rank"], "facts": reader.facts, "unread_step_lines": reader.unread[:5]})
    rank_harness.leave(dist, cfg["rank"], cfg["world"], wait=True, store=store)
    emit(reader.summary())
    if not reader.steps:
        raise RuntimeError("torchtitan ran through without a step line read (%s)" % (
            "; ".join(reader.unread[:2]) or "no step line logged"))


def _data_label(titan):
    if titan.get("dataset_path"):
        return "%s at %s (torchtitan's loader)" % (titan.get("dataset") or "c4", titan["dataset_path"])
    return "%s streamed from the Hugging Face hub (torchtitan's loader)" % (titan.get("dataset") or "c4")
