#!/usr/bin/env python3
"""Runs the GPU compute phase on this machine's NVIDIA GPUs and checks bf16 GEMM >= 0.7 x MAMF of the model.

    python tests/gpu/run_gpu_checks.py [--profile quick] [--via auto|ansible|probes] [--out DIR]

Where there is no NVIDIA GPU (no nvidia-smi, no GPU listed, or a torch without CUDA) it says so plainly, runs
nothing, and exits 0. Where there is one:
  --via ansible  `ansible-playbook assess.yml -i inventories/local.ini --tags gpu_compute` (preflight, the phase,
                 cleanup and the report), then reads the run's artifacts;
  --via probes   the six probes through `python -m probes` (for a machine without Ansible);
  --via auto     ansible when ansible-playbook is found, else probes (the default).
Then, per GPU: the best bf16 GEMM TFLOP/s against 0.7 x mamf_bf16_tflops of the model in reports/data/gpus.yml,
and a summary of every probe (status, reason, headline numbers). Exit 0 when every GPU passes, 1 when one does
not or a probe failed, 3 when the model has no MAMF in gpus.yml.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROBES = ("gemm", "grouped_gemm", "gemv", "mamf", "copy_bw", "nvbandwidth")
FRACTION = 0.7


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
        argv = [sys.executable, "-m", "probes", name, "--out", str(art_dir), "--params",
                json.dumps({"profile": profile}), "--timeout", "900"]
        print("running:", " ".join(argv), flush=True)
        subprocess.run(argv, cwd=ROOT, check=False)
    return art_dir, None


def load(art_dir, name):
    path = Path(art_dir) / ("%s.json" % name)
    return json.loads(path.read_text()) if path.exists() else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick", choices=["quick", "standard", "full"])
    parser.add_argument("--via", default="auto", choices=["auto", "ansible", "probes"])
    parser.add_argument("--out", default=None, help="where the run goes (default: a temporary directory)")
    args = parser.parse_args()
    present, what = gpu_present()
    if not present:
        print("NO NVIDIA GPU HERE: %s. Nothing was run; this script checks the GPU compute phase on a machine "
              "with an NVIDIA GPU." % what)
        return 0
    print("GPUs:", what)
    out = args.out or tempfile.mkdtemp(prefix="cmxa-gpu-checks-")
    via = args.via
    if via == "auto":
        via = "ansible" if shutil.which("ansible-playbook") or (Path(sys.executable).parent / "ansible-playbook"
                                                                ).exists() else "probes"
    art_dir, run_dir = run_ansible(args.profile, out) if via == "ansible" else run_probes(args.profile, out)

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
    print("RESULT:", "FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
