"""Speed of the audit (run by hand, not collected by pytest):

    CMXA_PREFIX=cmxau CMXA_SUBNET_PREFIX=10.237.44 CMXA_STATE_DIR=$PWD/.testcluster-cmxau \
        .venv/bin/python tests/benchmarks/bench_audit.py [--hosts 4 16] [--repeat 1] [--keep]

For each host count, brings the SSH test cluster (tests/cluster/cluster.py) to that size and runs
`assess.yml --tags audit` (preflight + audit + cleanup, report included) over it. Prints per size:
  * wall        the whole ansible-playbook process (what a user waits for);
  * audit play  from the start of the Audit play to the start of the next play (journal.jsonl timestamps): the
                phase itself, without preflight and cleanup;
  * collector   the slowest node collector (facts.collector.wall_s of the audit artifacts): the survey of one node;
and the ratio of the largest to the smallest size (targets: audit wall < 30 s on 4 hosts, 16 hosts < 1.5 x 4 hosts,
collector < 10 s on a GPU node). Numbers only: no assertion, the machine's load shows in them.
Tears the cluster down at the end unless --keep.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from cluster.cluster import Cluster  # noqa: E402


def _ts(text):
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def run_once(cluster, workdir):
    inventory = cluster.write_inventory(str(workdir / "bench.ini"), python=sys.executable)
    out = workdir / "runs"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH="%s:%s" % (Path(sys.executable).parent, env.get("PATH", "")),
               ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    t0 = time.monotonic()
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "assess.yml", "-i", str(inventory),
                          "--tags", "audit", "-e", "assess_output_dir=%s" % out], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1800)
    wall = time.monotonic() - t0
    if res.returncode != 0:
        raise SystemExit("ansible-playbook failed (rc %d):\n%s" % (res.returncode, res.stdout[-3000:]))
    run_dir = sorted(p for p in out.glob("*/*") if p.is_dir())[-1]
    journal = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines() if line.strip()]
    starts = [(line["play"], _ts(line["ts"])) for line in journal if line.get("event") == "play_start"]
    audit_start = next(t for play, t in starts if play == "Audit")
    audit_end = min((t for _, t in starts if t > audit_start), default=None)
    collectors = []
    for art in (run_dir / "artifacts").glob("*/audit.json"):
        collectors.append(json.loads(art.read_text())["facts"]["collector"]["wall_s"])
    return {"wall": wall, "play": (audit_end - audit_start) if audit_end else None,
            "collector": max(collectors), "hosts": len(collectors)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--repeat", type=int, default=1, help="runs per size (the median is printed)")
    parser.add_argument("--keep", action="store_true", help="leave the test cluster up at the end")
    args = parser.parse_args(argv)
    cluster = Cluster()
    results = {}
    try:
        for n in args.hosts:
            cluster.up(n)
            runs = []
            for _ in range(args.repeat):
                with tempfile.TemporaryDirectory(prefix="bench-audit-", dir=str(ROOT / ".cache")
                                                 if (ROOT / ".cache").is_dir() else None) as tmp:
                    runs.append(run_once(cluster, Path(tmp)))
            results[n] = {k: statistics.median(r[k] for r in runs) for k in ("wall", "play", "collector")}
            assert all(r["hosts"] == n for r in runs)
            print("%3d hosts: wall %6.1f s   audit play %6.1f s   slowest node collector %5.2f s"
                  % (n, results[n]["wall"], results[n]["play"], results[n]["collector"]), flush=True)
    finally:
        if not args.keep:
            cluster.down()
    if len(results) > 1:
        lo, hi = min(results), max(results)
        print("ratio %d/%d hosts: wall %.2f x   audit play %.2f x"
              % (hi, lo, results[hi]["wall"] / results[lo]["wall"], results[hi]["play"] / results[lo]["play"]))
    print("load average now: %s" % " ".join(Path("/proc/loadavg").read_text().split()[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
