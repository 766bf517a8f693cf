"""The collectives under each launcher, side by side in one run (run by hand, not collected by pytest):

    CMXA_PREFIX=cmxbl CMXA_SUBNET_PREFIX=10.237.46 CMXA_STATE_DIR=$PWD/.testcluster-cmxbl \
        .venv/bin/python tests/benchmarks/bench_launchers.py [--hosts 4] [--repeat 3] [--max-bytes 16M] [--keep]

Brings up the SSH test cluster and its Slurm (tests/cluster/), then runs the collectives probe on every host at
once (as the play does) at world sizes 1, 2 and 4 under direct, srun, mpirun and torchrun, interleaved, --repeat
times. Prints per launcher the all_reduce busbw at the largest size of the all-node world (median over the repeats,
the slowest host of each run) and its ratio to direct, plus the wall time of the probe. gloo over TCP between
network namespaces of one machine: the ratios say what a launcher costs, not what a fabric does. Numbers only: no
assertion, the machine's load shows in them.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "integration"))

from cluster.cluster import Cluster  # noqa: E402
from cluster.slurm import Slurm  # noqa: E402
from helpers import mpirun_args, run_everywhere  # noqa: E402

from probes.params import parse_bytes  # noqa: E402

LAUNCHERS = ("direct", "srun", "mpirun", "torchrun")


def busbw_at_largest(docs, nodes):
    """The slowest host's all_reduce busbw at the largest size of the nodes-node world (None when not measured)."""
    values = {}
    for doc in docs.values():
        for r in doc["results"]:
            lab = r["labels"]
            if r["metric"] == "busbw_gbps" and lab["collective"] == "all_reduce" and lab["nodes"] == nodes:
                values.setdefault(lab["size_bytes"], []).append(r["value"])
    if not values:
        return None, None
    size = max(values)
    return size, min(values[size])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-bytes", default="16M")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    cluster = Cluster()
    slurm = Slurm(cluster, slurmd_timeout=10, health_check_interval=60)
    sweep = {"collectives": ["all_reduce"], "min_bytes": 1 << 20, "max_bytes": parse_bytes(args.max_bytes),
             "factor": 4, "warmup": 2, "iters": 10, "max_seconds_per_size": 2.0, "launch_timeout": 300,
             "stall_timeout": 120, "rdzv_timeout": 90}
    got = {name: [] for name in LAUNCHERS}
    walls = {name: [] for name in LAUNCHERS}
    try:
        cluster.up(args.hosts)
        slurm.up()
        extra = {"mpirun": {"mpirun_args": mpirun_args(cluster)}}
        for _ in range(args.repeat):
            for name in LAUNCHERS:
                t0 = time.monotonic()
                docs = run_everywhere(cluster, "collectives", dict(sweep, launcher=name, **extra.get(name, {})),
                                      timeout=900)
                walls[name].append(time.monotonic() - t0)
                bad = {h: d["reason"] for h, d in docs.items() if d["status"] != "ok"}
                if bad:
                    raise SystemExit("%s failed: %s" % (name, bad))
                size, value = busbw_at_largest(docs, args.hosts)
                got[name].append(value)
    finally:
        if not args.keep:
            slurm.down()
            cluster.down()
    base = statistics.median(got["direct"])
    print("all_reduce busbw at %d nodes, %s (median of %d; gloo over TCP between namespaces)"
          % (args.hosts, args.max_bytes, args.repeat))
    print("%-9s %12s %10s %10s" % ("launcher", "busbw GB/s", "vs direct", "wall s"))
    for name in LAUNCHERS:
        med = statistics.median(got[name])
        print("%-9s %12.4f %10.2f %10.1f" % (name, med, med / base, statistics.median(walls[name])))


if __name__ == "__main__":
    main()
