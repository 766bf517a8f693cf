"""Phase: training. torchtitan runs (Llama 3.1 8B with FSDP, a GPT-OSS-style MoE with expert parallelism).

PROBES names the modules of this package that are probes (each has run(art, params, out_dir)); the others are
this phase's helpers: torchtitan_cmd builds the trainer's argv, torchtitan_log reads its log."""

PROBES = ("training",)
