"""Golden synthetic runs for the rating tests: a cluster built to be excellent and one built to be poor, written as
real run directories (artifacts in schema v1) and graded with tests/fixtures/rating/rubric.yml."""

import json
from pathlib import Path

from probes.artifact import Artifact, write_json_atomic

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "rating"
RUBRIC = str(FIXTURES / "rubric.yml")
ANALYST_GOOD = str(FIXTURES / "analyst_good.yml")
ANALYST_POOR = str(FIXTURES / "analyst_poor.yml")
MODEL = "NVIDIA H100 80GB HBM3"  # MAMF bf16 794.5 TFLOP/s in gpus.yml

EXCELLENT = {"ssh_password_auth": 0, "driver_cves": 0, "pip_install_seconds": 12, "slurm_job_ok": 1,
             "read_bw_gbps": 9.5, "busbw_gbps": 470, "detect_seconds": 45, "dashboard_ok": 1, "gemm": 760}
POOR = {"ssh_password_auth": 1, "driver_cves": 3, "pip_install_seconds": 240, "slurm_job_ok": 0,
        "read_bw_gbps": 1.2, "busbw_gbps": 90, "detect_seconds": 900, "dashboard_ok": 0, "gemm": 420}


def node_info(host, run_id, driver="570.211.01"):
    art = Artifact("node_info", run_id, host)
    art.facts.update(hostname=host, kernel="6.8.0-124-generic", os="Ubuntu 24.04.2 LTS", arch="x86_64",
                     cpu_model="Intel(R) Xeon(R) Platinum 8480+", gpu_model=MODEL, gpu_driver=driver,
                     gpu_tool="nvidia-smi", python="3.12.3", torch="2.7.0")
    art.device.update(backend="cuda", model=MODEL, count=8, driver=driver)
    art.add("gpu_count", 8, "count")
    art.add("memory_total_bytes", 2 * 2**40, "B")
    return art.to_dict()


# The sizes a standard run's soaks record (reports/profiles.py reads them from the artifacts): the storage soak's
# fio job counts (roles/burnin burnin_profiles.standard.storage_clients), and the burn-in's GEMM n and the
# collectives' message size on GPUs (roles/burnin: 0 = probes/burnin/runner.py's default, 8192 and 256 MiB).
STANDARD_CLIENTS = (1, 8, 32)
GPU_GEMM_SIZE = 8192
GPU_MESSAGE_BYTES = 256 << 20
T0 = 1764496800.0


def soak_artifact(probe, run_id, host, elapsed, load_from_s=None, message_bytes=GPU_MESSAGE_BYTES,
                  gemm_size=GPU_GEMM_SIZE, collectives=None, gpus=8):
    """A burn-in or fabric soak artifact as probes/burnin/summary.py labels its results: elapsed_s from the runner's
    start, facts.load_from_s when the load began (the collective world formed), a GEMM result per GPU with its `size`
    (burn-in) and a collective result per collective with its `size_bytes`."""
    art = Artifact(probe, run_id, host)
    art.device.update(backend="cuda", model=MODEL, count=gpus)
    art.facts.update(state="done", ended_by="completed")
    if load_from_s is not None:
        art.facts["load_from_s"] = "%.1f" % load_from_s
    art.add("elapsed_s", elapsed, "s")
    art.add("planned_s", round(elapsed - (load_from_s or 0.0)), "s")
    art.add("completed", 1, "bool")
    if probe == "burnin":
        for gpu in range(gpus):
            labels = {"worker": gpu, "gpu": gpu, "device": "cuda:%d" % gpu, "dtype": "bf16", "size": gemm_size}
            for metric in ("mean", "min", "max", "first", "last"):
                art.add("gemm_tflops_%s" % metric, 700.0, "TFLOP/s", **labels)
            art.add("gemm_degradation_pct", 0.0, "%", **labels)
            art.add("gemm_errors", 0, "count", **labels)
            art.add("gemm_samples", 360, "count", **labels)
    art.add("coll_errors", 0, "count")
    art.add("coll_hangs", 0, "count")
    for coll in collectives or (["alltoall"] if probe == "burnin" else ["alltoall", "all_gather", "reduce_scatter"]):
        labels = {"collective": coll, "size_bytes": message_bytes, "ranks": 32}
        for metric in ("min", "avg", "max", "first", "last"):
            art.add("coll_busbw_%s_gbps" % metric, 40.0, "GB/s", **labels)
        art.add("coll_busbw_degradation_pct", 0.0, "%", **labels)
        art.add("coll_lat_us_avg", 9000.0, "us", **labels)
        art.add("coll_lat_us_max", 9100.0, "us", **labels)
        art.add("coll_wrong", 0, "count", **labels)
        art.add("coll_checks", 360, "count", **labels)
        art.add("coll_samples", 360, "count", **labels)
        art.add("coll_ranks", 1, "count", **labels)
    return art


def storage_soak(run_dir, host, run_id, clients=STANDARD_CLIENTS, phase_s=450):
    """The storage soak's artifact (a result per phase and client count, labelled `clients`) and its fio timeline
    (<probe>.fio.jsonl: each (client count, phase) runs phase_s seconds, one after the other)."""
    soak = Artifact("storage_soak", run_id, host)
    soak.device.update(backend="cuda", model=MODEL, count=8)
    soak.facts.update(state="done", ended_by="completed")
    with open(run_dir / "artifacts" / host / "storage_soak.fio.jsonl", "w") as fh:
        i = 0
        for n in clients:
            for phase in ("mixed_seq", "mixed_rand"):  # the soak's fio intervals, first to last
                t0 = T0 + i * (phase_s + 10)
                i += 1
                for k in range(int(phase_s // 10)):
                    fh.write(json.dumps({"type": "fio", "clients": n, "phase": phase, "t_start": t0 + 10 * k,
                                         "t": t0 + 10 * (k + 1), "read_mibps": 500.0, "write_mibps": 500.0}) + "\n")
                soak.add("fio_bw_avg_mibps", 1000.0, "MiB/s", phase=phase, clients=n)
                soak.add("fio_intervals", int(phase_s // 10), "count", phase=phase, clients=n)
    soak.raw.append("storage_soak.fio.jsonl")
    write_json_atomic(str(run_dir / "artifacts" / host / "storage_soak.json"), soak.to_dict())


def standard_durations(run_dir, host, run_id):
    """What a standard run's burn-in and storage phases record for tiers.yml's profile measures (reports/profiles.py),
    at the standard minimums: without them a run declared standard is a screening ("burn-in not run"). The soaks'
    time under load (elapsed_s less load_from_s, the world's forming) is the standard minimum; their sizes are the
    standard profile's."""
    for probe, elapsed, load_from in (("burnin", 3603.4, 3.2), ("fabric_soak", 902.1, 2.0)):
        art = soak_artifact(probe, run_id, host, elapsed, load_from)
        write_json_atomic(str(run_dir / "artifacts" / host / ("%s.json" % probe)), art.to_dict())
    storage_soak(run_dir, host, run_id)
    checkpoint = Artifact("checkpoint", run_id, host, variant="local", params={"size_mib": 4096})
    checkpoint.device.update(backend="cuda", model=MODEL, count=8)
    write_json_atomic(str(run_dir / "artifacts" / host / "checkpoint-local.json"), checkpoint.to_dict())
    sweep = Artifact("fio_sweep", run_id, host, variant="local")
    sweep.device.update(backend="cuda", model=MODEL, count=8)
    sweep.facts.update(runtime_s=30.0, size_mib=4096)
    write_json_atomic(str(run_dir / "artifacts" / host / "fio_sweep-local.json"), sweep.to_dict())


def summarized_burnin(work_dir, host, run_id, planned_s=3600.0, load_from_s=4.0, interval=60.0, gpus=2):
    """A burn-in artifact made by the node's own summary (probes.burnin.summary.summarize) from timeline files, as the
    runner leaves them: the load (GEMMs and the all-to-all) began load_from_s after the start (the world formed
    then: cfg t_load) and ran planned_s to the deadline. Returns (artifact document, directory of its raw files)."""
    from probes.burnin import runner as soak_runner
    from probes.burnin import summary as soak_summary

    out = Path(work_dir) / ("soak-%s" % host)
    out.mkdir(parents=True)
    p = soak_runner.paths(str(out), "burnin", None)
    t_load = T0 + load_from_s
    t_end = t_load + planned_s
    n = int(round((t_end - T0) / interval))
    cfg = {"t_start": T0, "deadline": t_end, "duration_s": planned_s, "planned_s": planned_s, "interval": interval,
           "grace_s": 30, "marker": soak_runner.marker(run_id, host, "burnin"), "gemm": True,
           "collectives": ["alltoall"], "fio": None, "t_load": t_load, "gpus": list(range(gpus)), "backend": "cuda",
           "device": {"backend": "cuda", "model": MODEL, "count": gpus}}
    times = [T0 + interval * (k + 1) for k in range(n)]

    def write(path, records):
        with open(path, "w") as fh:
            fh.writelines(json.dumps(rec) + "\n" for rec in records)

    write(p["monitor"], [{"type": "monitor", "t": t, "dt": interval, "cpu_util_pct": 40.0, "nics": {}} for t in times])
    write(p["kernel"], [])
    write(p["gemm"], [{"type": "gemm", "worker": g, "gpu": g, "device": "cuda:%d" % g, "dtype": "bf16",
                       "size": GPU_GEMM_SIZE, "t": t, "t_start": t - interval, "tflops": 700.0, "iters": 100,
                       "errors": 0} for g in range(gpus) for t in times])
    write(p["coll"], [{"type": "coll", "rank": 0, "world": 8, "collective": "alltoall",
                       "size_bytes": GPU_MESSAGE_BYTES, "t": t, "busbw_gbps": 40.0, "busbw_min_gbps": 39.0,
                       "busbw_max_gbps": 41.0, "lat_us": 9000.0, "wrong": 0, "checks": 1} for t in times if t > t_load])
    with open(p["done"], "w") as fh:
        json.dump({"ended_by": "completed", "t_start": T0, "t_end": t_end, "exits": {}}, fh)
    art = Artifact("burnin", run_id, host)
    art.device.update(backend="cuda", model=MODEL, count=gpus)
    soak_summary.summarize(art, cfg, p)
    return art.to_dict(), out


def make_run(base, quality="excellent", hosts=4, run_id="r1", provider="golden", host_overrides=None,
             drop=(), unreachable=(), cpu_compute=False):
    """A finished run directory under base/runs/<provider>/<run_id>.

    quality: "excellent" or "poor" (the value tables above); host_overrides: {host: {metric: value}};
    drop: metric names left out on every host (a test that did not run); unreachable: hosts with no artifact
    and an unreachable journal line; cpu_compute: the GEMMs ran on the CPU backend (gpu_compute_backend=cpu on
    these GPU nodes)."""
    values = dict(EXCELLENT if quality == "excellent" else POOR)
    names = ["gn%d" % (i + 1) for i in range(hosts)]
    run_dir = Path(base) / "runs" / provider / run_id
    run_dir.mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps(
        {"id": run_id, "provider": provider, "profile": "standard", "hosts": names,
         "started_at": "2026-11-30T10:00:00Z"}))
    journal = []
    for host in names:
        if host in unreachable:
            journal.append({"host": host, "status": "unreachable",
                            "task": "Preflight | find Python, take the run lock, stage the probes, node inventory",
                            "msg": "ssh: connect to host %s port 22: No route to host" % host})
            continue
        v = dict(values, **(host_overrides or {}).get(host, {}))
        write_json_atomic(str(run_dir / "artifacts" / host / "node_info.json"), node_info(host, run_id))
        golden = Artifact("golden", run_id, host)
        golden.device.update(backend="cuda", model=MODEL, count=8)
        for metric, unit in (("ssh_password_auth", "bool"), ("driver_cves", "count"), ("pip_install_seconds", "s"),
                             ("slurm_job_ok", "bool"), ("read_bw_gbps", "GB/s"), ("busbw_gbps", "GB/s"),
                             ("detect_seconds", "s"), ("dashboard_ok", "bool")):
            if metric not in drop:
                golden.add(metric, v[metric], unit)
        write_json_atomic(str(run_dir / "artifacts" / host / "golden.json"), golden.to_dict())
        gemm = Artifact("golden_gemm", run_id, host)
        gemm.device.update(backend="cpu", model="cpu", count=1) if cpu_compute else gemm.device.update(
            backend="cuda", model=MODEL, count=8)
        for gpu in range(8):
            for i in range(3):
                gemm.add("tflops", v["gemm"] - i, "TFLOP/s", gpu=gpu, dtype="bf16", m=4096 * (i + 1))
        write_json_atomic(str(run_dir / "artifacts" / host / "golden_gemm.json"), gemm.to_dict())
        standard_durations(run_dir, host, run_id)
    with open(run_dir / "journal.jsonl", "w") as fh:
        for line in journal:
            fh.write(json.dumps(line) + "\n")
    (run_dir / "run.json").write_text(json.dumps({"run_id": run_id, "provider": provider, "profile": "standard",
                                                  "finished_at": "2026-11-30T11:00:00Z"}))
    return run_dir


def ratings(report_dir):
    return json.loads((Path(report_dir) / "ratings.json").read_text())
