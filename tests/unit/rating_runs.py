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


def standard_durations(run_dir, host, run_id):
    """What a standard run's burn-in and storage phases record for tiers.yml's profile measures (reports/profiles.py),
    at the standard minimums: without them a run declared standard is a screening ("burn-in not run")."""
    for probe, elapsed in (("burnin", 3600.2), ("fabric_soak", 900.1)):
        art = Artifact(probe, run_id, host)
        art.device.update(backend="cuda", model=MODEL, count=8)
        art.add("elapsed_s", elapsed, "s")
        write_json_atomic(str(run_dir / "artifacts" / host / ("%s.json" % probe)), art.to_dict())
    soak = Artifact("storage_soak", run_id, host)
    soak.device.update(backend="cuda", model=MODEL, count=8)
    write_json_atomic(str(run_dir / "artifacts" / host / "storage_soak.json"), soak.to_dict())
    with open(run_dir / "artifacts" / host / "storage_soak.fio.jsonl", "w") as fh:
        for i, phase in enumerate(("mixed_seq", "mixed_rand")):  # the soak's fio intervals, first to last
            t0 = 1764496800.0 + i * 460
            for k in range(45):
                fh.write(json.dumps({"type": "fio", "clients": 1, "phase": phase, "t_start": t0 + 10 * k,
                                     "t": t0 + 10 * (k + 1)}) + "\n")
    checkpoint = Artifact("checkpoint", run_id, host, variant="local", params={"size_mib": 4096})
    checkpoint.device.update(backend="cuda", model=MODEL, count=8)
    write_json_atomic(str(run_dir / "artifacts" / host / "checkpoint-local.json"), checkpoint.to_dict())
    sweep = Artifact("fio_sweep", run_id, host, variant="local")
    sweep.device.update(backend="cuda", model=MODEL, count=8)
    sweep.facts.update(runtime_s=30.0, size_mib=4096)
    write_json_atomic(str(run_dir / "artifacts" / host / "fio_sweep-local.json"), sweep.to_dict())


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
