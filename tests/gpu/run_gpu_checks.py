#!/usr/bin/env python3
"""Runs the GPU compute phase on this machine's NVIDIA GPUs and checks bf16 GEMM >= 0.7 x MAMF of the model; then
the tools step's GPU paths and a short burn-in.

    python tests/gpu/run_gpu_checks.py [--profile quick] [--via auto|ansible|probes] [--out DIR] [--only A,B]

On a lent H200 (2026-12-04) the whole run took 190 s. --only reruns some parts inside a short lease: compute (the
phase and the MAMF check) and any of the extras' names below (tools_variant, nccl_tests, launchers, checkpoint,
block_scaled, audit, training, inference, burnin).

Where there is no NVIDIA GPU (no nvidia-smi, no GPU listed, or a torch without CUDA) it says so plainly, runs
nothing, and exits 0. Where there is one:
  --via ansible  `ansible-playbook assess.yml -i inventories/local.ini --tags gpu_compute` (preflight, the phase,
                 cleanup and the report), then reads the run's artifacts;
  --via probes   the seven probes through `python -m probes` (for a machine without Ansible);
  --via auto     ansible when ansible-playbook is found, else probes (the default).
Then, per GPU: the best bf16 GEMM TFLOP/s against 0.7 x mamf_bf16_tflops of the model in reports/data/gpus.yml,
and a summary of every probe (status, reason, headline numbers). Then, natively (--no-extras skips them):
  - the tools step's wheel-variant choice: tools_detect (driver, CUDA, GPU architectures, NCCL, MPI) and the torch
    build roles/tools/vars/main.yml pins for this node;
  - nccl-tests with -g 1 (the nccl_tests probe, quick sizes) where its binaries are on PATH, in $NCCL_TESTS_DIR or
    /opt/nccl-tests/build, after building them with tools_build where $NCCL_TESTS_SRC names a source tree;
  - the collectives (NCCL all_reduce, 1 MiB .. 1 GiB) through the launcher layer: direct, torchrun, and mpirun
    where it is installed;
  - the checkpoint probe: torch.save and DCP with 1 GiB shards on the GPUs, one rank per GPU, under direct and
    torchrun, on a directory of this machine: GB/s per rank and per node, and whether every load matched;
  - the training probe's dense job (FSDP2, bf16, a 1B Llama shape) for about a minute and its MoE job (GPT-OSS's
    layer shape, 2 layers) for about half that: tokens/s per GPU and MFU, step times, memory, the loss; then the
    two jobs under torchtitan (llama3_debugmodel, gpt_oss_debugmodel) where it is importable and
    $CMXA_TORCHTITAN_TOKENIZER names a tokenizer directory (else it says why not);
  - the audit probe's GPU checks, graded on the controller's rules;
  - the inference probe: vLLM on this node's GPUs (tensor parallel) serving $INFERENCE_MODEL_PATH (else the
    tiny-random model it writes), one short sweep by vllm bench serve (chat, prefill, agentic at concurrency 1 and
    8), where vllm imports in $INFERENCE_PYTHON (else this Python); every point's numbers are printed;
  - MXFP8 / NVFP4: whether they run here and, where they do, whether the product matches the dequantized operands
    (the block-scale layout), and the grouped GEMMs through DeepGEMM where deep_gemm imports;
  - a 60-second burn-in (GEMMs with the nvidia-smi stream) through the burnin probe, start then poll.
Each extra is its own timed section: an exception in one is printed and counted, and the others still run. Every
number is printed. Exit 0 when every GPU passes, 1 when one does not or a probe failed, 3 when the model has no MAMF
in gpus.yml.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROBES = ("gemm", "grouped_gemm", "gemv", "mamf", "copy_bw", "nvbandwidth", "hpl_mxp")
FRACTION = 0.7
EXTRAS = ("tools_variant", "nccl_tests", "launchers", "checkpoint", "block_scaled", "audit", "training", "inference",
          "burnin")


def gpu_present():
    """(True, description) or (False, why not)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False, "nvidia-smi is not installed"
    res = subprocess.run([smi, "--query-gpu=index,name", "--format=csv,noheader"], capture_output=True, text=True,
                         timeout=30)
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    if res.returncode != 0 or not lines:
        why = (res.stderr or res.stdout).strip()[:200]
        return False, "nvidia-smi lists no GPU (exit %d: %s)" % (res.returncode, why)
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return False, "%d GPU(s) listed, but torch is not importable: %s" % (len(lines), exc)
    if not torch.cuda.is_available():
        return False, "%d GPU(s) listed, but torch %s has no CUDA" % (len(lines), torch.__version__)
    return True, "; ".join(lines)


def run_ansible(profile, out):
    argv = [shutil.which("ansible-playbook"), "assess.yml", "-i", "inventories/local.ini", "--tags", "gpu_compute",
            "-e", "assess_profile=%s" % profile, "-e", "assess_output_dir=%s" % out,
            "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", "assess_python=%s" % sys.executable]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH="%s:%s" % (Path(sys.executable).parent,
                                                                                      os.environ.get("PATH", "")))
    print("running:", " ".join(argv), flush=True)
    res = subprocess.run(argv, cwd=ROOT, env=env)
    runs = sorted(p for p in Path(out).glob("*/*") if (p / "artifacts").is_dir())
    if not runs:
        raise SystemExit("ansible-playbook exited %d and left no run under %s" % (res.returncode, out))
    host_dirs = [p for p in (runs[-1] / "artifacts").iterdir() if p.is_dir()]
    return host_dirs[0], runs[-1]


def run_probes(profile, out):
    art_dir = Path(out) / "artifacts"
    for name in PROBES:
        # hpl_mxp has no profile: its problem size is n (seconds per format where xhpl_mxp is installed)
        params = {"n": 32768} if name == "hpl_mxp" else {"profile": profile}
        argv = [sys.executable, "-m", "probes", name, "--out", str(art_dir), "--params",
                json.dumps(params), "--timeout", "900"]
        print("running:", " ".join(argv), flush=True)
        subprocess.run(argv, cwd=ROOT, check=False)
    return art_dir, None


def probe(name, out, params, variant=None, timeout=600):
    argv = [sys.executable, "-m", "probes", name, "--out", str(out), "--params", json.dumps(params),
            "--timeout", str(timeout)] + (["--variant", variant] if variant else [])
    print("running:", " ".join(argv), flush=True)
    subprocess.run(argv, cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
    path = Path(out) / (("%s-%s.json" % (name, variant)) if variant else "%s.json" % name)
    return json.loads(path.read_text()) if path.exists() else None


def extras(out, only=None):
    """The tools step's variant choice, nccl-tests -g 1, the collectives under each launcher, the audit's GPU checks,
    training, inference, a 60 s burn-in (those named in only, else all); each its own section; True when something
    failed."""
    failed = False
    art = Path(out) / "extras"
    for check in (globals()[name] for name in EXTRAS):
        if only is None or check.__name__ in only:
            failed |= section(check, art)
    return failed


def tools_variant(art):
    """tools_detect on this node and the torch build the tools step would pin here; True when it is no CUDA build."""
    import yaml

    from probes.tools import variants

    vars_ = yaml.safe_load((ROOT / "roles/tools/vars/main.yml").read_text())
    det = probe("tools_detect", art, {"packages": vars_["tools_package_names"], "wanted": ["fio", "openmpi"],
                                      "prefix": str(Path(art).parent / "prefix")}, variant="gpu")
    f = (det or {}).get("facts") or {}
    nv = f.get("nvidia") or {}
    print("\ntools_detect: driver %s, CUDA %s, archs %s, toolkit %s, NCCL %s, MPI %s" % (
        nv.get("driver"), nv.get("cuda"), nv.get("archs"), (f.get("cuda") or {}).get("version"),
        (f.get("nccl") or {}).get("version"), (f.get("mpi") or {}).get("kind")))
    chosen = variants.choose(vars_["tools_torch_pins"], cuda=nv.get("cuda"), rocm=(f.get("rocm") or {}).get("version"),
                             python="%d.%d" % sys.version_info[:2], archs=nv.get("archs") or (),
                             names=nv.get("names") or ())
    print("wheel variant: torch %s %s (%s), index %s" % (chosen["torch"], chosen["variant"], chosen["why"],
                                                         chosen.get("index_url")))
    return not ((chosen["variant"] or "").startswith("cu") and nv.get("cuda"))


def nccl_tests(art):
    """nccl-tests -g 1 where its binaries are here (built by tools_build from $NCCL_TESTS_SRC); never a failure
    when they are not (the device machine reaches no git)."""
    src = os.environ.get("NCCL_TESTS_SRC")
    bin_dirs = [d for d in (os.environ.get("NCCL_TESTS_DIR"), "/opt/nccl-tests/build") if d]
    if src:
        b = probe("tools_build", art, {"prefix": str(Path(art).parent / "prefix"), "builds": {
            "nccl_tests": {"tarball": src} if src.endswith(".tar.gz") else {"git": src, "ref": "master"}}},
            timeout=900)
        rec = ((b or {}).get("facts") or {}).get("builds", {}).get("nccl_tests", {})
        print("tools_build nccl_tests: %s %s %s" % (rec.get("state"), rec.get("bin_dir"), rec.get("reason") or ""))
        if rec.get("bin_dir"):
            bin_dirs.insert(0, rec["bin_dir"])
            os.environ["LD_LIBRARY_PATH"] = ":".join(rec.get("ld_library_path") or [])
    have = [d for d in bin_dirs if (Path(d) / "all_reduce_perf").exists()] or (
        [str(Path(shutil.which("all_reduce_perf")).parent)] if shutil.which("all_reduce_perf") else [])
    if have:
        doc = probe("nccl_tests", art, {"bin_dir": have[0], "collectives": ["all_reduce", "all_gather"],
                                        "max_bytes": "1G", "iters": 10}, timeout=600)
        print("nccl_tests -g 1: %s %s" % (doc and doc["status"], (doc or {}).get("reason") or ""))
        for r in (doc or {}).get("results", []):
            if r["metric"] == "busbw_gbps" and r["labels"].get("placement") == "out_of_place":
                lab = r["labels"]
                print("  %s %12d B busbw %.2f GB/s" % (lab["collective"], lab["size_bytes"], r["value"]))
    else:
        print("nccl_tests -g 1: not run (no all_reduce_perf on PATH, $NCCL_TESTS_DIR or /opt/nccl-tests/build; set "
              "NCCL_TESTS_SRC to a source tarball or git URL to build it)")
    return False


def launchers(art):
    """NCCL all_reduce through the launcher layer; True when one launcher's run is an error."""
    failed = False
    # the launcher layer on one node's GPUs: NCCL all_reduce under direct, torchrun and (when installed) mpirun
    for launcher in ("direct", "torchrun") + (("mpirun",) if shutil.which("mpirun") else ()):
        doc = probe("collectives", art, {"launcher": launcher, "collectives": ["all_reduce"], "min_bytes": "1M",
                                         "max_bytes": "1G", "factor": 4, "iters": 10}, variant=launcher, timeout=300)
        rows = [r for r in (doc or {}).get("results", []) if r["metric"] == "algbw_gbps"]
        top = max(rows, key=lambda r: r["labels"]["size_bytes"]) if rows else None
        print("collectives under %s: %s %s; all_reduce %s algbw %s GB/s (%s ranks, NCCL %s)" % (
            launcher, doc and doc["status"], (doc or {}).get("reason") or "", top and top["labels"]["size_bytes"],
            top and round(top["value"], 2), top and top["labels"]["ranks"],
            ((doc or {}).get("facts") or {}).get("nccl_version")))
        failed |= not doc or doc["status"] == "error"
    return failed


def checkpoint(art):
    """DCP with the shards on the GPUs, one rank per GPU through the launcher layer (direct and torchrun), on a
    directory of this machine; torch.save beside it. True when a run is an error or a load differed."""
    failed = False
    tier = Path(tempfile.mkdtemp(prefix="cmxa-ckpt-tier-"))
    try:
        for launcher in ("direct", "torchrun"):
            doc = probe("checkpoint", art, {"tier": {"name": "local", "path": str(tier), "shared": False},
                                            "size_mib": 1024, "tensors": 8, "launcher": launcher,
                                            # a hang is reported by the probe, inside its own timeout
                                            "launch_timeout": 150, "stall_timeout": 120, "rdzv_timeout": 60},
                        variant=launcher, timeout=400)
            facts = (doc or {}).get("facts") or {}
            print("checkpoint under %s (started by %s): %s %s; %s; load matches: torch.save %s, DCP %s" % (
                launcher, facts.get("launcher"), doc and doc["status"], (doc or {}).get("reason") or "",
                facts.get("dcp_mode"), facts.get("torch_save_load_matches"), facts.get("dcp_load_matches")))
            for r in (doc or {}).get("results", []):
                if r["metric"] in ("ckpt_save_gbps", "ckpt_load_gbps"):
                    print("  %s %s %s%s: %.3f GB/s" % (r["metric"], r["labels"].get("method"), r["labels"].get(
                        "scope"), " %s" % r["labels"]["rank"] if "rank" in r["labels"] else "", r["value"]))
            failed |= not doc or doc["status"] == "error" or facts.get("dcp_load_matches") is not True
    finally:
        shutil.rmtree(tier, ignore_errors=True)
    return failed


def section(check, art):
    """One check of the extras, timed; an exception in it is printed and counted as a failure, and the checks after
    it still run (a device lease is minutes: one check's bug must not cost the others' numbers)."""
    import time
    import traceback

    began = time.monotonic()
    print("\n== %s" % check.__name__, flush=True)
    try:
        failed = check(art)
    except Exception:  # noqa: BLE001 -- printed in full, and a failure
        traceback.print_exc()
        failed = True
    print("== %s: %s in %.0f s" % (check.__name__, "FAILED" if failed else "ok", time.monotonic() - began), flush=True)
    return failed


def burnin(art):
    """A 60-second burn-in through the burnin probe, start then poll; True when it failed."""
    start = probe("burnin", art, {"mode": "start", "duration_s": 60, "interval_s": 5}, variant="gpu60")
    print("burn-in start: %s %s" % (start and start["status"], (start or {}).get("reason") or ""))
    doc = None
    for _ in range(20):
        doc = probe("burnin", art, {"mode": "poll", "wait_s": 10}, variant="gpu60", timeout=120)
        if ((doc or {}).get("facts") or {}).get("state") != "running":
            break
    print("burn-in: %s %s" % (doc and doc["status"], (doc or {}).get("reason") or ""))
    for r in (doc or {}).get("results", []):
        print("  %s %s = %s %s" % (r["metric"], json.dumps(r["labels"], sort_keys=True), r["value"], r["unit"]))
    return not doc or doc["status"] == "error"


def block_scaled(art):
    """MXFP8 / NVFP4: whether a small GEMM runs here and, where it does (Blackwell), whether its product matches the
    dequantized operands (the scale layout); then the grouped GEMMs through DeepGEMM where deep_gemm imports.
    True when something failed."""
    import torch

    from probes.gpu_compute import backend

    failed = False
    for dtype in ("mxfp8", "nvfp4"):
        why = backend.gemm_support(torch, dtype, "cuda", "cuda:0")
        wrong = None if why else backend.block_scaled_error(torch, dtype, "cuda", "cuda:0")
        print("%s: %s" % (dtype, "skipped: %s" % why if why else "product WRONG: %s" % wrong if wrong else
                          "runs, product matches the dequantized operands"))
        failed |= bool(wrong)
    doc = probe("grouped_gemm", art, {"library": "deep_gemm", "profile": "quick", "dtypes": ["bf16", "fp8_e4m3"]},
                variant="deepgemm", timeout=600)
    print("grouped GEMM through DeepGEMM: %s %s" % (doc and doc["status"], (doc or {}).get("reason") or ""))
    for r in (doc or {}).get("results", []):
        if r["metric"] == "tflops_median":
            lab = r["labels"]
            print("  %s %s %s tokens=%s %s: %.1f TFLOP/s" % (lab["dtype"], lab["model"], lab["proj"], lab["tokens"],
                                                            lab["impl"], r["value"]))
    return failed or not doc or doc["status"] == "error"


# The audit checks whose GPU side the CPU test hosts cannot show (issue 27): every one is printed with its verdict.
AUDIT_GPU_CHECKS = ("audit.sw.ncu", "audit.sw.ncu_profiling", "audit.sw.cuda_visible_devices",
                    "audit.gpu.nvlink_boundary", "audit.gpu.hbm_exposure", "audit.net.nccl_topo_file",
                    "audit.net.dpu_host_isolation", "audit.k8s.kubelet_cpu_manager", "audit.sw.nccl",
                    "audit.sw.driver_security", "audit.gpu.count")


def audit(art):
    """The audit probe on this GPU node (no dcgmi diag, no container), graded on the controller's rules."""
    from reports import grading
    from reports.load import load_run

    run_dir = Path(art) / "audit-run"
    host = socket.gethostname()  # the artifact names the host it ran on; the run's loader files it under that name
    doc = probe("audit", run_dir / "artifacts" / host, {"dcgm_diag": False, "container_gpu": False}, timeout=300)
    if not doc:
        print("audit: no artifact")
        return True
    (run_dir / "assess_run.json").write_text(json.dumps({"hosts": [doc["host"]], "id": "gpu-checks",
                                                         "provider": "gpu-checks"}))
    rubric = grading.load_rubric()
    rubric["checks"] = [c for c in rubric["checks"] if c["id"] in AUDIT_GPU_CHECKS]
    rubric.pop("consistency", None)
    rows = grading.grade(load_run(str(run_dir)), rubric)
    print("\naudit: %s in %s s" % (doc["status"], (doc.get("facts") or {}).get("collector", {}).get("wall_s")))
    for r in sorted(rows, key=lambda r: r["check_id"]):
        print("  %-32s %-5s %s" % (r["check_id"], r["status"], (r["observed"] or r["reason"] or "")[:150]))
    return doc["status"] == "error" or any(r["status"] == "error" for r in rows)


# A Llama-3.2-1B-shaped dense model: the 8B shape of the standard profile needs FSDP over a node's GPUs (its
# weights, gradients and AdamW state alone are 128 GB unsharded), and this check may see a single GPU.
TRAIN_1B = {"layers": 16, "dim": 2048, "n_heads": 32, "n_kv_heads": 8, "ffn_dim": 8192, "vocab": 128256}
# GPT-OSS 20B's layer shape (32 experts, top 4, its 201088 vocabulary) cut to 2 of its 24 layers, so that one GPU
# holds it with its AdamW state (about 2.8 B parameters, 1 B of them in the embeddings).
TRAIN_MOE = {"layers": 2, "dim": 2880, "n_heads": 64, "n_kv_heads": 8, "head_dim": 64, "ffn_dim": 2880,
             "vocab": 201088, "n_experts": 32, "top_k": 4, "moe_ffn_dim": 2880, "n_shared_experts": 0}


def training(art):
    """The training probe's two jobs on this node's GPUs: the dense one (FSDP2, bf16, a 1B Llama shape) for about a
    minute and the MoE one (experts over the ranks, all-to-all) for about half that; tokens/s per GPU and MFU
    against the model's bf16 peak (reports/phases/training/flops.py); True when one failed."""
    failed = False
    for job, model, shape, steps in (("dense", TRAIN_1B, "1B Llama shape", 30),
                                     ("moe", TRAIN_MOE, "GPT-OSS layer shape, 2 layers", 15)):
        doc = probe("training", art, {"job": job, "model": model, "seq_len": 2048, "local_batch": 2, "steps": steps,
                                      "warmup_steps": 5, "lr": 3e-4, "engine": "torch"}, variant=job, timeout=420)
        failed |= training_numbers(job, shape, doc)
    return torchtitan_training(art) or failed


def torchtitan_training(art):
    """Both jobs under torchtitan (probes/training/titan.py), its llama3_debugmodel and gpt_oss_debugmodel configs on
    this node's GPUs, where torchtitan is importable and CMXA_TORCHTITAN_TOKENIZER names a directory with a
    tokenizer.json (CMXA_TORCHTITAN_DATASET a local copy of c4; the device machine reaches no hub). Otherwise it says
    why it did not run, which is not a failure. True when it ran and failed."""
    import importlib.util

    tokenizer = os.environ.get("CMXA_TORCHTITAN_TOKENIZER", "")
    why = ("torchtitan is not importable by %s" % sys.executable if importlib.util.find_spec("torchtitan") is None
           else "CMXA_TORCHTITAN_TOKENIZER is not a directory" if not os.path.isdir(tokenizer) else None)
    if why:
        print("training dense under torchtitan: not run: %s" % why)
        return False
    failed = False
    # the MoE too: expert parallelism, activation checkpointing's recompute and the CUDA-graph refusal are paths
    # the CPU stand-in never takes
    for job, config, model in (("dense", "llama3_debugmodel", TRAIN_1B), ("moe", "gpt_oss_debugmodel", TRAIN_MOE)):
        titan = {"tokenizer": tokenizer, "config": config, "dataset": "c4",
                 "dataset_path": os.environ.get("CMXA_TORCHTITAN_DATASET", "")}
        doc = probe("training", art, {"job": job, "model": model, "seq_len": 2048, "local_batch": 2, "steps": 20,
                                      "warmup_steps": 5, "engine": "torchtitan", "torchtitan": titan},
                    variant="%s-torchtitan" % job, timeout=300)
        own = [r["value"] for r in (doc or {}).get("results", []) if r["metric"] == "torchtitan_mfu_pct"]
        print("  torchtitan's own MFU %s%%, its log: %s" % (own, ((doc or {}).get("facts") or {}).get(
            "torchtitan_log")))
        failed |= training_numbers("%s (torchtitan %s; FLOPs/token below are our shape's)" % (job, config),
                                   "torchtitan", doc)
    return failed


def training_numbers(job, shape, doc):
    """Prints one training job's numbers; True when it failed."""
    from reports.grading.expectations import gpu_model_key, load_gpus
    from reports.phases.training.flops import flops_per_token, mfu

    facts = (doc or {}).get("facts") or {}
    print("training %s (%s, %s GPUs/node, %s): %s %s" % (
        job, shape, facts.get("procs_per_node"), facts.get("dtype"), doc and doc["status"],
        (doc or {}).get("reason") or ""))
    rows = {r["metric"]: r["value"] for r in (doc or {}).get("results", []) if "step" not in r["labels"]}
    tps = rows.get("tokens_per_s_per_gpu")
    models = load_gpus()
    key = gpu_model_key((doc or {}).get("device", {}).get("model"), models) if doc else None
    peak = (models.get(key) or {}).get("bf16_peak_tflops")
    flops, why = flops_per_token(facts) if facts.get("model") else (None, "no model facts")
    print("  tokens/s per GPU %s, FLOPs/token %s, MFU %s%% (bf16 peak %s TFLOP/s, %s) %s" % (
        tps, flops, tps and flops and peak and round(100 * mfu(tps, flops, peak), 1), peak, key, why or ""))
    for metric in ("step_time_mean_s", "step_time_p50_s", "step_time_p99_s", "step_time_cv", "peak_memory_bytes",
                   "loss_first", "loss_last", "time_to_first_step_s", "alltoall_share"):
        if metric in rows:
            print("  %s = %s" % (metric, rows[metric]))
    return not doc or doc["status"] != "ok" or not tps


def inference(art):
    """The inference probe on this node's GPUs: one vLLM engine, one short sweep; True when it failed (a vLLM that
    is not installed is said, not a failure: the device machine reaches no package index)."""
    python = os.environ.get("INFERENCE_PYTHON") or sys.executable
    doc = probe("inference", art, {"python": python, "model_path": os.environ.get("INFERENCE_MODEL_PATH")
                                   or "tiny-random", "world_sizes": [1], "concurrencies": [1, 8],
                                   "saturation_gain": 0, "ready_timeout": 300, "point_timeout": 120,
                                   "launch_timeout": 420}, timeout=480)
    facts = (doc or {}).get("facts") or {}
    print("inference (vLLM %s, %s, TP %s): %s %s" % (facts.get("engine_version"), facts.get("model_name"),
                                                    facts.get("tensor_parallel"), doc and doc["status"],
                                                    (doc or {}).get("reason") or ""))
    for r in (doc or {}).get("results", []):
        if r["metric"] in ("ready_s", "output_tokens_per_s_per_gpu", "interactivity_tokens_per_s_per_user",
                           "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "requests_failed"):
            print("  %s %s = %s %s" % (r["metric"], json.dumps(r["labels"], sort_keys=True), r["value"], r["unit"]))
    for key, tele in sorted((facts.get("telemetry") or {}).items()):
        print("  telemetry %s: %s" % (key, tele))
    return not doc or doc["status"] == "error"


def load(art_dir, name):
    path = Path(art_dir) / ("%s.json" % name)
    return json.loads(path.read_text()) if path.exists() else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", choices=["quick", "standard", "full"])
    parser.add_argument("--via", default="auto", choices=["auto", "ansible", "probes"])
    parser.add_argument("--out", default=None, help="where the run goes (default: a temporary directory)")
    parser.add_argument("--no-extras", action="store_true", help="only the GPU compute phase")
    parser.add_argument("--only", default=None, help="a comma-separated list of what runs, for a rerun inside a short "
                        "lease: compute (the phase and its MAMF check), %s" % ", ".join(EXTRAS))
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    if only and only - {"compute"} - set(EXTRAS):
        parser.error("--only: unknown %s" % ", ".join(sorted(only - {"compute"} - set(EXTRAS))))
    present, what = gpu_present()
    if not present:
        print("NO NVIDIA GPU HERE: %s. Nothing was run; this script checks the GPU compute phase on a machine "
              "with an NVIDIA GPU." % what)
        return 0
    print("GPUs:", what)
    out = args.out or tempfile.mkdtemp(prefix="cmxa-gpu-checks-")
    failed = False
    if only is None or "compute" in only:
        code = compute(args.profile, args.via, out)
        if code not in (0, 1):
            return code
        failed = code == 1
    if not args.no_extras:
        failed |= extras(out, only)
    print("RESULT:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


def compute(profile, via, out):
    """The GPU compute phase and each GPU's bf16 GEMM against its MAMF: 0 pass, 1 fail (3 without a MAMF)."""
    if via == "auto":
        via = "ansible" if shutil.which("ansible-playbook") or (Path(sys.executable).parent / "ansible-playbook"
                                                                ).exists() else "probes"
    art_dir, run_dir = run_ansible(profile, out) if via == "ansible" else run_probes(profile, out)

    from reports.grading.expectations import gpu_model_key, load_gpus

    failed = False
    print("\nprobe          status   backend  notes")
    docs = {name: load(art_dir, name) for name in PROBES}
    for name, doc in docs.items():
        if doc is None:
            print("%-14s MISSING" % name)
            failed = True
            continue
        notes = doc.get("reason") or ""
        skipped = sorted(k[6:] for k, v in (doc.get("facts") or {}).items() if k.startswith("dtype.") and v != "ok")
        if skipped:
            notes = (notes + "; " if notes else "") + "dtypes not ok: " + ", ".join(skipped)
        print("%-14s %-8s %-8s %s" % (name, doc["status"], doc["device"]["backend"], notes))
        failed |= doc["status"] == "error"
    gemm = docs.get("gemm")
    if not gemm or gemm["device"]["backend"] != "cuda":
        print("FAIL: the gemm probe did not run on CUDA")
        return 1
    models = load_gpus()
    key = gpu_model_key(gemm["device"]["model"], models)
    mamf = (models.get(key) or {}).get("mamf_bf16_tflops")
    if mamf is None:
        print("gpus.yml has no mamf_bf16_tflops for %r (key %s): cannot check" % (gemm["device"]["model"], key))
        return 3
    best = {}
    for r in gemm["results"]:
        if r["metric"] == "tflops" and r["labels"].get("dtype") == "bf16":
            gpu = r["labels"]["gpu"]
            if r["value"] > best.get(gpu, (0, None))[0]:
                best[gpu] = (r["value"], r["labels"].get("shape"))
    print("\nbf16 GEMM per GPU against %.2f x MAMF %.1f TFLOP/s (%s):" % (FRACTION, mamf, key))
    for gpu, (value, shape) in sorted(best.items()):
        ok = value >= FRACTION * mamf
        failed |= not ok
        print("  gpu %s: %7.1f TFLOP/s (%s) = %.2f x MAMF  %s" % (gpu, value, shape, value / mamf,
                                                                 "PASS" if ok else "FAIL"))
    if not best:
        print("  no bf16 result")
        failed = True
    mamf_doc = docs.get("mamf")
    for r in (mamf_doc or {}).get("results", []):
        if r["metric"] == "mamf_tflops":
            print("  mamf sweep gpu %s %s: %.1f TFLOP/s at %sx%sx%s" % (r["labels"]["gpu"], r["labels"]["dtype"],
                                                                    r["value"], r["labels"]["m"], r["labels"]["n"],
                                                                    r["labels"]["k"]))
    if run_dir:
        print("\nreport:", Path(run_dir) / "report" / "report.md")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
