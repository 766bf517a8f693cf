"""Benchmark of the report side (run by hand, not collected by pytest):

    .venv/bin/python tests/benchmarks/bench_reports.py [--rows 200000] [--peers 300] [--keep DIR]

1. build: the whole `assess-report build` (load artifacts, grade with the shipped rubric plus per-GPU metric and
   straggler checks, rate, render report.md/report.html, checks.csv, junit.xml, ratings.json, results.parquet)
   for a synthetic run of --rows result rows (target: 200 000 rows in under 10 s).
2. peers: rank that run among --peers stored peer records (target: 300 peers in under 10 s), and
   `compare RUN_A RUN_B` of two such runs.
Prints the numbers; exits 1 when a target is missed.
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from probes.artifact import Artifact, write_json_atomic  # noqa: E402
from reports import compare, peers  # noqa: E402
from reports.build import build, evaluate  # noqa: E402

MODEL = "NVIDIA H100 80GB HBM3"
DTYPES = ("bf16", "fp16", "tf32", "fp8")
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast")

BENCH_CHECKS = """
  - {id: compute.bench_gemm_bf16, category: compute, title: BF16 GEMM per GPU vs MAMF, kind: metric, probe: gemm,
     variant: sweep, metric: tflops, labels: {dtype: bf16}, per: gpu, agg: median, severity: major,
     expect: {op: ">=", fraction: 0.7, of: mamf_bf16_tflops}, warn: {op: ">=", fraction: 0.85, of: mamf_bf16_tflops}}
  - {id: compute.bench_gemm_fp8_max, category: compute, title: FP8 GEMM best per GPU, kind: metric, probe: gemm,
     variant: sweep, metric: tflops, labels: {dtype: fp8}, per: gpu, agg: max, severity: minor,
     expect: {op: ">=", fraction: 0.5, of: fp8_peak_tflops}}
  - {id: compute.bench_straggler_node, category: compute, title: GPU below its node median, kind: straggler,
     probe: gemm, variant: sweep, metric: tflops, labels: {dtype: bf16}, per: gpu, agg: median, scope: node,
     max_below_median_pct: 10, warn_below_median_pct: 5, severity: major}
  - {id: compute.bench_straggler_cluster, category: compute, title: GPU below the cluster median, kind: straggler,
     probe: gemm, variant: sweep, metric: tflops, labels: {dtype: bf16}, per: gpu, agg: median, scope: cluster,
     max_below_median_pct: 10, warn_below_median_pct: 5, severity: major}
  - {id: networking.bench_allreduce, category: networking, title: all_reduce bus bandwidth, kind: metric,
     probe: nccl, metric: busbw_gbps, labels: {collective: all_reduce}, agg: max, severity: major,
     expect: {op: ">=", value: 360}}
  - {id: networking.bench_busbw_straggler, category: networking, title: node busbw below cluster median,
     kind: straggler, probe: nccl, metric: busbw_gbps, agg: max, scope: cluster, max_below_median_pct: 15,
     severity: minor}
  - {id: storage.bench_read, category: storage, title: sequential read, kind: metric, probe: fio,
     metric: read_bw_gbps, agg: max, severity: major, expect: {op: ">=", value: 5}}
"""


def make_run(base, n_rows, seed=1, provider="bench", run_id="r1", slow=()):
    """A run of about n_rows results: gemm sweeps per GPU make most of them, plus nccl, fio and node_info."""
    rng = random.Random(seed)
    run_dir = Path(base) / provider / run_id
    per_host_gemm = 8 * len(DTYPES) * 40
    per_host_nccl = len(COLLECTIVES) * 30
    per_host_fio = 4 * 8
    per_host = per_host_gemm + per_host_nccl + per_host_fio + 6 + 8
    n_hosts = max(4, round(n_rows / per_host))
    hosts = ["node%03d" % i for i in range(n_hosts)]
    run_dir.mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"id": run_id, "provider": provider, "profile": "standard",
                                                         "hosts": hosts, "started_at": "2026-11-30T10:00:00Z"}))
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "provider": provider, "profile": "standard",
                                                  "finished_at": "2026-11-30T12:00:00Z"}))
    slow_gpu = {(hosts[3], 5), (hosts[-1], 2)} | {(hosts[h], g) for h, g in slow}
    total = 0
    for host in hosts:
        info = Artifact("node_info", run_id, host)
        info.facts.update(hostname=host, kernel="6.8.0-124-generic", os="Ubuntu 24.04.2 LTS", arch="x86_64",
                          cpu_model="Intel(R) Xeon(R) Platinum 8480+", gpu_model=MODEL, gpu_driver="570.211.01",
                          gpu_tool="nvidia-smi", python="3.12.3", torch="2.7.0")
        info.device.update(backend="cuda", model=MODEL, count=8, driver="570.211.01")
        for metric, value in (("gpu_count", 8), ("cpu_logical_count", 224), ("cpu_sockets", 2), ("numa_nodes", 2),
                              ("memory_total_bytes", 2 * 2**40), ("gpu_memory_total_bytes_sum", 8 * 80 * 2**30)):
            info.add(metric, value, "count")
        for gpu in range(8):
            info.add("gpu_memory_total_bytes", 81559 * 2**20, "B", gpu=gpu)
        gemm = Artifact("gemm", run_id, host, variant="sweep")
        gemm.device.update(backend="cuda", model=MODEL, count=8)
        for gpu in range(8):
            factor = 0.8 if (host, gpu) in slow_gpu else 1.0
            for dtype, peak in zip(DTYPES, (780, 780, 390, 1400)):
                for m in range(40):
                    gemm.add("tflops", round(peak * factor * rng.uniform(0.9, 1.0), 2), "TFLOP/s", gpu=gpu,
                             dtype=dtype, m=256 * (m + 1), n=8192, k=8192)
        nccl = Artifact("nccl", run_id, host)
        nccl.device.update(backend="cuda", model=MODEL, count=8)
        for coll in COLLECTIVES:
            for size in range(30):
                nccl.add("busbw_gbps", round(min(480, 2 ** (size / 2.5)) * rng.uniform(0.95, 1.0), 2), "GB/s",
                         collective=coll, size_bytes=2 ** (size + 3))
        fio = Artifact("fio", run_id, host)
        fio.device.update(backend="cpu")
        for tier in ("home", "data", "scratch", "nvme"):
            for clients in (1, 2, 4, 8, 16, 32, 64, 128):
                fio.add("read_bw_gbps", round(rng.uniform(4, 12), 2), "GB/s", tier=tier, clients=clients)
        for art in (info, gemm, nccl, fio):
            doc = art.to_dict()
            total += len(doc["results"])
            name = art.probe + ("-" + art.variant if art.variant else "")
            write_json_atomic(str(run_dir / "artifacts" / host / (name + ".json")), doc)
    return run_dir, total, len(hosts)


def bench_rubric(tmp):
    """The shipped rubric (rubric.yml + rubric.d/) plus the benchmark's per-GPU metric and straggler checks."""
    src = ROOT / "reports" / "data"
    dst = Path(tmp) / "rubric"
    dst.mkdir()
    text = (src / "rubric.yml").read_text()
    head, sep, rest = text.partition("checks:\n")
    (dst / "rubric.yml").write_text(head + sep + BENCH_CHECKS.lstrip("\n") + rest)
    if (src / "rubric.d").is_dir():
        shutil.copytree(src / "rubric.d", dst / "rubric.d")
    return str(dst / "rubric.yml")


def make_peer_store(store, n, ratings):
    rng = random.Random(7)
    for i in range(n):
        doc = json.loads(json.dumps(ratings))
        doc["run"]["provider"], doc["run"]["run_id"] = "peer%03d" % (i % 60), "run%04d" % i
        if i % 5 == 0:  # a fifth of the store is another GPU model: not a peer
            doc["run"]["gpu_model_key"] = "B200"
        doc["score"] = rng.uniform(40, 98)
        for m in doc["headline"]:
            if m["value"] is not None:
                m["value"] = m["value"] * rng.uniform(0.7, 1.2)
        peers.add(store, doc)


CPU = {}


def timed(fn, *args, **kwargs):
    """(result, wall seconds); the CPU seconds of this process go to CPU[fn name] (on a shared machine the wall
    clock also counts other processes' time)."""
    start, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    CPU[getattr(fn, "__name__", "?")] = time.process_time() - cpu
    return out, time.perf_counter() - start


def stages(run_dir, rubric):
    """CPU seconds of each stage of a build, in order (where the time goes)."""
    from reports import phases
    from reports.grading import grade, load_rubric
    from reports.junit import junit_xml
    from reports.load import load_run
    from reports.rate import load_tiers, rate
    from reports.render import report_html as render_html
    from reports.render import report_md as render_md

    out = []

    def stage(name, fn, *args):
        cpu = time.process_time()
        value = fn(*args)
        out.append((name, time.process_time() - cpu))
        return value

    run = stage("load artifacts", load_run, run_dir)
    rows = stage("grade", grade, run, load_rubric(rubric))
    rating = stage("rate", rate, rows, load_tiers())
    stage("headline metrics", peers.headline, run, rating)
    report_dir = tempfile.mkdtemp(prefix="cmxa-bench-stages-")
    try:
        for module in phases.sections():
            stage("section %s" % module.__name__.rsplit(".", 2)[-2], module.render, run, rows, report_dir)
        parts = stage("report.md parts", render_md.render_parts, run, rows, None, None)
        stage("report.html", render_html.render, parts, rows, None, report_dir)
        stage("junit.xml", junit_xml, rows)
    finally:
        shutil.rmtree(report_dir, ignore_errors=True)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--peers", type=int, default=300)
    parser.add_argument("--keep", help="keep the synthetic runs in this directory")
    parser.add_argument("--profile", action="store_true", help="cProfile the build and print the top 25")
    args = parser.parse_args()
    tmp = args.keep or tempfile.mkdtemp(prefix="cmxa-bench-")
    missed = []
    try:
        runs = Path(tmp) / "runs"
        (run_a, n_rows, n_hosts), t_make = timed(make_run, runs, args.rows, seed=1, run_id="r1")
        print("synthetic run: %d result rows, %d hosts (written in %.1f s)" % (n_rows, n_hosts, t_make))
        rubric = bench_rubric(tmp)
        if args.profile:
            import cProfile
            import pstats
            prof = cProfile.Profile()
            prof.enable()
        (text, code, report_dir), t_build = timed(build, run_a, rubric=rubric, progress=False)
        if args.profile:
            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
        with open(os.path.join(report_dir, "ratings.json")) as fh:
            ratings = json.load(fh)
        n_checks = sum(c["rows"] for c in ratings["checks"])
        print("build: %.2f s (CPU %.2f s) for %d result rows -> %d check rows (target < 10 s) [exit %d]"
              % (t_build, CPU["build"], n_rows, n_checks, code))
        sizes = {name: os.path.getsize(os.path.join(report_dir, name)) for name in sorted(os.listdir(report_dir))}
        print("  outputs: " + ", ".join("%s %.1f MB" % (k, v / 1e6) for k, v in sizes.items()))
        if t_build >= 10:
            missed.append("build")
        print("  CPU seconds by stage: " + ", ".join("%s %.2f" % (name, t) for name, t in stages(run_a, rubric)))

        store = Path(tmp) / "peers"
        _, t_store = timed(make_peer_store, str(store), args.peers, ratings)
        spec = peers.load_spec()

        def rank_once():
            table, _ = peers.load_store(str(store))
            head = {"gpu_model_key": ratings["run"]["gpu_model_key"], "backend": ratings["run"]["backend"],
                    "metrics": json.loads(json.dumps(ratings["headline"]))}
            return peers.rank(head, ratings["run"], table, spec.get("min_peers", 5))

        head, t_rank = timed(rank_once)
        ranked = [m for m in head["metrics"] if m["peers"].get("percentile") is not None]
        print("peers: ranked against %d stored peers in %.3f s (CPU %.3f s) (%d metrics with a percentile; "
              "store written in %.1f s) (target < 10 s)" % (args.peers, t_rank, CPU["rank_once"], len(ranked),
                                                            t_store))
        (_, _, _), t_build_peers = timed(build, run_a, rubric=rubric, peer_store=str(store), progress=False)
        print("build with %d peers: %.2f s (CPU %.2f s)" % (args.peers, t_build_peers, CPU["build"]))
        if t_rank >= 10:
            missed.append("peers")

        # the same cluster a week later: three more GPUs have slowed down
        (run_b, _, _), _ = timed(make_run, runs, args.rows, seed=2, run_id="r2", slow=((10, 1), (20, 7), (30, 0)))
        build(run_b, rubric=rubric, progress=False)
        result, t_cmp = timed(lambda: compare.compare(compare.load_side(run_a), compare.load_side(run_b)))
        checks = result["checks"]
        print("compare RUN_A RUN_B: %.2f s (CPU %.2f s) (%d regressions, %d improvements, %d row changes) "
              "(target < 10 s)" % (t_cmp, CPU["<lambda>"], len(checks["regressions"]), len(checks["improvements"]),
                                   len(result["rows"])))
        if t_cmp >= 10:
            missed.append("compare")
        _, t_eval = timed(evaluate, run_a, rubric)
        print("grade + rate only (no files written): %.2f s (CPU %.2f s)" % (t_eval, CPU["evaluate"]))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    if missed:
        print("MISSED: %s" % ", ".join(missed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
