"""Controller cost per host (run by hand, not collected by pytest; issue 24):

    CMXA_PREFIX=cmxsc CMXA_SUBNET_PREFIX=10.237.45 CMXA_STATE_DIR=$PWD/.testcluster-cmxsc \
        .venv/bin/python tests/benchmarks/bench_scale.py [--hosts 4 16 64] [--repeat 3] [--full 4 16] [--slices 4]
        [--kex curve25519-sha256] [--no-cmax] [--parts] [--keep]

Brings the SSH test cluster (tests/cluster/cluster.py) to the largest size asked for, and runs
`assess.yml --tags audit` (preflight, audit, cleanup, report) over the first N of its hosts for each host count N
(an inventory of those hosts), --repeat times per size, the sizes taking turns (4 16, then 16 4, then 4 16, ...),
so that a slow moment of this shared machine weighs on every size alike; with --full, for those sizes also the
whole quick assessment with its long phases cut to seconds (burn-in 10 s; training and inference, which bring up an
engine per node, and the opt-in destructive phase left out), once. It prints per size:

  * controller CPU: user + system seconds of the ansible-playbook process and everything it started (workers, ssh
    clients and their ControlPersist masters, the report build), from the kernel's accounting: this process is a
    child subreaper, so the orphaned ssh masters are its children too and are reaped (and counted) at the end.
    Of repeated runs, the least (and the median, and the spread): another process's load only ever adds CPU time
    to a run (caches, shared cores, frequency), nothing makes a run cheaper than its own work, and one run of the
    same audit ranged from 7.1 to 11.9 CPU s within an hour here. The very first run pays for the controller's first
    imports (bytecode written), which a single run per size (--repeat 1) counts in the smallest size;
  * CPU per host, and the wall time (of the same run);
  * the fitted marginal cost per host (least squares over the sizes' least CPU) and the 16-host run's CPU over the
    4-host's;
  * a projection for 1,000 hosts: fixed + marginal x 1000 CPU seconds, and the controller-bound wall with forks set
    to this machine's cores (the CPU spread over every core; the nodes' own work comes on top).

With --kex ALG, every audit run is made twice in its turn, once as ansible.cfg has it and once with
`-o KexAlgorithms=ALG` added to its ssh_args, and both are fitted: what the SSH key exchange (OpenSSH's, paid once per
host by the first ssh client to it) costs the controller per host, measured side by side. OpenSSH 9.0 to 9.8 default
to sntrup761x25519 (post-quantum, about 70 ms of client CPU here), 9.9 and later to mlkem768x25519 (post-quantum,
a few ms); curve25519-sha256 is the classical one.

With --parts, each audit size runs once more through tests/benchmarks/controller_parts.py, which records the CPU by
part: ansible-playbook's own process, its workers (task by task), the ssh clients they ran (the key exchange), the
report build, and the ControlPersist masters (the rest of the tree's total); each part fitted per host as above.

The largest audit size runs again as --slices slices of one run (4 by default), started at once as AWX job slicing
starts them, each merging the run at its end (reports/merge.py): how many of the merged run's check rows have the
unsliced run's status, and the wall and CPU against the unsliced run's median (the slices run once).

Then, in the same run, our audit of this one machine (inventories/local.ini, no SSH) next to `cmax audit --vm -y`
(clustermax 0.2.1, in a venv of its own under .cache), both wall and CPU, as a ratio (ours / cmax).

Last, the report of a fleet (--report-nodes, 1,000 by default): a synthetic run of that many 8-GPU nodes (GEMM
sweeps per GPU, collectives, fio, node inventory: tests/benchmarks/bench_reports.py) built with the shipped rubric:
the build's wall time, report.html's size, and how long headless Chromium takes to load and render it (its wall
time to print the DOM, less the same for an empty page), with their targets.

Numbers only: no assertion, the machine's load shows in them (the test hosts' work shares these cores). Tears the
test cluster down at the end unless --keep.
"""

import argparse
import configparser
import ctypes
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from cluster.cluster import Cluster  # noqa: E402

sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))
sys.path.insert(0, str(ROOT))
import bench_reports  # noqa: E402

BIN = Path(sys.executable).parent
CMAX_SPEC = "clustermax==0.2.1"
# The whole quick assessment with the long phases cut to seconds.
FULL_ARGS = ["-e", "burnin_duration_s=10", "-e", "burnin_fabric_duration_s=5",
             "--skip-tags", "training,inference,reliability"]


def _become_subreaper():
    """Orphans of our children (ssh ControlPersist masters detach from the worker that started them) are
    re-parented to this process, so their CPU is counted when they are reaped."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_CHILD_SUBREAPER = 36  # noqa: N806 - linux/prctl.h
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: errno %d" % ctypes.get_errno())


def _children():
    out = subprocess.run(["pgrep", "-P", str(os.getpid())], capture_output=True, text=True).stdout.split()
    return {int(pid) for pid in out}


def _reap_orphans(keep):
    """Stop and reap what the measured command left as our children (ssh masters waiting out ControlPersist);
    `keep`: our children from before it (the test cluster's hosts)."""
    for pid in _children() - keep:
        try:
            os.kill(pid, signal.SIGTERM)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def measured(argv, env, cwd=ROOT, timeout=3600):
    """(rc, wall s, CPU s of the whole process tree, output tail) of one command."""
    keep = _children()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    time.sleep(0.5)  # the masters see their last client go
    _reap_orphans(keep)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return proc.returncode, wall, cpu, (proc.stdout + proc.stderr)[-3000:]


def _env(kex=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH="%s:%s" % (BIN, env.get("PATH", "")), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1")
    if kex:  # ANSIBLE_SSH_ARGS takes the place of ansible.cfg's ssh_args: theirs, and the key exchange
        cfg = configparser.ConfigParser(interpolation=None)
        cfg.read(ROOT / "ansible.cfg")
        env["ANSIBLE_SSH_ARGS"] = "%s -o KexAlgorithms=%s" % (cfg["ssh_connection"]["ssh_args"], kex)
    return env


def run_assess(inventory, workdir, extra=(), program=None, kex=None):
    """`program` (argv) in place of ansible-playbook: controller_parts.py, for --parts; `kex`: ssh's KexAlgorithms."""
    argv = (program or [str(BIN / "ansible-playbook")]) + [
        "assess.yml", "-i", str(inventory), "-e", "assess_output_dir=%s" % (workdir / "runs")] + list(extra)
    rc, wall, cpu, tail = measured(argv, _env(kex))
    if rc != 0:
        raise SystemExit("ansible-playbook %s failed (rc %d):\n%s" % (" ".join(extra), rc, tail))
    [run_dir] = list((workdir / "runs").glob("*/*"))
    return {"wall": wall, "cpu": cpu, "run_dir": run_dir}


def audit_parts(inventory, workdir):
    """The audit once more through controller_parts.py: its CPU by part, in seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "parts.jsonl"
    launcher = [sys.executable, str(ROOT / "tests" / "benchmarks" / "controller_parts.py"), str(log)]
    cpu = run_assess(inventory, workdir, ["--tags", "audit"], program=launcher)["cpu"]
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    [main] = [line for line in lines if line["part"] == "ansible-playbook"]
    workers = [line for line in lines if line["part"] == "worker"]
    by_task = {}
    for w in workers:
        seconds, count = by_task.get(w["task"], (0.0, 0))
        by_task[w["task"]] = (seconds + w["self_s"], count + 1)
    in_workers = sum(w["self_s"] + w["children_s"] for w in workers)
    return {"total": cpu, "ansible-playbook": main["self_s"], "workers": sum(w["self_s"] for w in workers),
            "ssh clients": sum(w["children_s"] for w in workers),
            "report build and other children": main["children_s"] - in_workers,
            "ssh masters (the rest)": cpu - main["self_s"] - main["children_s"], "by_task": by_task}


def _print_parts(parts):
    """Each part per size and fitted per host; the workers' tasks that ran on every host, per host."""
    sizes = sorted(parts)
    names = [k for k in parts[sizes[0]] if k != "by_task"]
    print("\naudit CPU by part (one more run per size, through controller_parts.py)")
    print("  %-34s" % "part" + "".join("  %7d hosts" % n for n in sizes) + "   per host (fitted)")
    for name in names:
        per_host = fit([(n, parts[n][name]) for n in sizes])[1] if len(sizes) > 1 else parts[sizes[0]][name] / sizes[0]
        print("  %-34s" % name + "".join("  %11.2f s" % parts[n][name] for n in sizes) + "   %.3f s" % per_host)
    largest = sizes[-1]
    print("  workers by task (%d hosts): a task of every host per host, a run_once one whole" % largest)
    tasks = parts[largest]["by_task"].items()
    for task, (seconds, count) in sorted(tasks, key=lambda kv: (kv[1][1] != largest, -kv[1][0] / kv[1][1])):
        if count == largest:
            print("    %-70s %6.1f ms per host" % (task[:70], 1000 * seconds / count))
        elif seconds >= 0.02:
            print("    %-70s %6.1f ms once" % (task[:70], 1000 * seconds))


def sliced_audit(names, inventory, workdir, slices):
    """The audit as `slices` slices of one run started at once (as AWX job slicing starts them: each its own
    --limit, one assess_run_id), each merging the run at its end: wall, controller CPU of all of them, and the run."""
    names = sorted(names)
    size = -(-len(names) // slices)
    parts = [names[i:i + size] for i in range(0, len(names), size)]
    run_id = "sliced-%d" % len(names)
    keep = _children()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    procs = [subprocess.Popen([str(BIN / "ansible-playbook"), "assess.yml", "-i", str(inventory), "--tags", "audit",
                               "--limit", ",".join(part), "-e", "assess_output_dir=%s" % (workdir / "runs"),
                               "-e", "assess_run_id=%s" % run_id, "-e", "assess_run_slice=s%d" % (i + 1)],
                              env=_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i, part in enumerate(parts)]
    outputs = [p.communicate(timeout=3600)[0] for p in procs]
    wall = time.monotonic() - t0
    time.sleep(0.5)
    _reap_orphans(keep)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    for p, out in zip(procs, outputs):
        if p.returncode != 0:
            raise SystemExit("a slice failed (rc %d):\n%s" % (p.returncode, out[-3000:]))
    [run_dir] = [d for d in (workdir / "runs").glob("*/%s" % run_id)]
    return {"wall": wall, "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "run_dir": run_dir, "slices": len(parts)}


def _checks(run_dir):
    import csv  # noqa: PLC0415

    with open(Path(run_dir) / "report" / "checks.csv") as fh:
        return {(r["check_id"], r["host"]): r["status"] for r in csv.DictReader(fh)}


def fit(points):
    """Least squares cpu = fixed + marginal * hosts over (hosts, cpu) points."""
    n = len(points)
    mx = sum(h for h, _ in points) / n
    my = sum(c for _, c in points) / n
    sxx = sum((h - mx) ** 2 for h, _ in points)
    marginal = sum((h - mx) * (c - my) for h, c in points) / sxx if sxx else 0.0
    return my - marginal * mx, marginal


def _cmax_venv():
    venv = ROOT / ".cache" / "cmax-0.2.1"
    cmax = venv / "bin" / "cmax"
    if not cmax.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", CMAX_SPEC], check=True, timeout=600)
    return cmax


def one_machine(workdir):
    """Our audit of this machine (inventories/local.ini) and `cmax audit --vm -y`, one after the other."""
    ours = run_assess(ROOT / "inventories" / "local.ini", workdir / "local", ["--tags", "audit"])
    cmax = _cmax_venv()
    home = workdir / "cmax-home"  # cmax keeps its output under $HOME/.clustermax
    home.mkdir()
    rc, wall, cpu, tail = measured([str(cmax), "audit", "--vm", "-y"], dict(os.environ, HOME=str(home)))
    if rc not in (0, 1):  # cmax exits 1 when a check failed
        raise SystemExit("cmax audit failed (rc %d):\n%s" % (rc, tail))
    return ours, {"wall": wall, "cpu": cpu}


def _chromium_wall(url):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        return None
    profile = tempfile.mkdtemp(prefix="bench-chromium-")
    try:
        t0 = time.monotonic()
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        "--user-data-dir=%s" % profile, "--dump-dom", url], capture_output=True, timeout=300)
        return time.monotonic() - t0
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def fleet_report(n_nodes, workdir):
    """(nodes, check rows, build s, report.html bytes, Chromium render s or None) of a synthetic fleet's report."""
    from reports.build import build  # noqa: PLC0415

    run_dir, _, hosts = bench_reports.make_run(workdir / "runs", n_nodes * 1476, seed=1, run_id="fleet")
    rubric = bench_reports.bench_rubric(workdir)
    t0 = time.monotonic()
    _, _, report_dir = build(run_dir, rubric=rubric, progress=False)
    t_build = time.monotonic() - t0
    page = Path(report_dir) / "report.html"
    blank = workdir / "blank.html"
    blank.write_text("<!DOCTYPE html><html><body></body></html>")
    walls = [(_chromium_wall(page.as_uri()), _chromium_wall(blank.as_uri())) for _ in range(3)]
    render = None if walls[0][0] is None else min(w - b for w, b in walls)
    with open(Path(report_dir) / "checks.csv") as fh:
        rows = sum(1 for _ in fh) - 1
    return hosts, rows, t_build, page.stat().st_size, render


def _least(runs):
    """Of one size's repeated runs: the one of least CPU, with the median CPU and the range beside it."""
    cpus = [r["cpu"] for r in runs]
    walls = [r["wall"] for r in runs]
    return dict(min(runs, key=lambda r: r["cpu"]), median=statistics.median(cpus), median_wall=statistics.median(walls),
                low=min(cpus), high=max(cpus), runs=len(cpus))


def _print_sizes(title, results):
    print("\n%s" % title)
    repeated = any(r.get("runs", 1) > 1 for r in results.values())
    print("  %6s  %16s  %12s  %8s" % ("hosts", "controller CPU s", "CPU/host s", "wall s")
          + ("   of %d runs: median CPU s (range)" % max(r["runs"] for r in results.values()) if repeated else ""))
    for n, r in sorted(results.items()):
        print("  %6d  %16.1f  %12.3f  %8.1f" % (n, r["cpu"], r["cpu"] / n, r["wall"])
              + ("   %.1f (%.1f-%.1f)" % (r["median"], r["low"], r["high"]) if repeated else ""))
    if len(results) < 2:
        return
    fixed, marginal = fit([(n, r["cpu"]) for n, r in results.items()])
    cores = os.cpu_count() or 1
    total = fixed + marginal * 1000
    print("  fitted: %.1f s fixed + %.3f s per host (target <= 0.25 s per host for the audit)" % (fixed, marginal))
    if repeated:
        print("  (fitted on the medians: %.1f s fixed + %.3f s per host)" % fit([(n, r["median"])
                                                                               for n, r in results.items()]))
    if 4 in results and 16 in results:
        print("  16 hosts / 4 hosts controller CPU: %.2fx (target <= 1.5x)" % (results[16]["cpu"] / results[4]["cpu"]))
    print("  projected 1,000 hosts: %.0f CPU s on the controller; %.0f s of controller-bound wall with forks = %d cores"
          % (total, total / cores, cores))


def _inventory_of(all_hosts, names, path):
    """all_hosts' inventory (Cluster.write_inventory) with only the named hosts in [nodes]."""
    lines, section = [], None
    for line in Path(all_hosts).read_text().splitlines():
        if line.startswith("["):
            section = line
        elif section == "[nodes]" and line.strip() and line.split()[0] not in names:
            continue
        lines.append(line)
    path.write_text("\n".join(lines) + "\n")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[4, 16, 64], help="sizes of the audit runs")
    parser.add_argument("--full", type=int, nargs="*", default=[],
                        help="sizes of the whole quick assessment (long phases cut to seconds)")
    parser.add_argument("--no-cmax", action="store_true", help="leave out the one-machine comparison with cmax")
    parser.add_argument("--report-nodes", type=int, default=1000, help="nodes of the fleet report (0: none)")
    parser.add_argument("--keep", action="store_true", help="leave the test cluster up at the end")
    parser.add_argument("--parts", action="store_true",
                        help="each audit size once more, its CPU by part (controller_parts.py)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="audit runs per size, the sizes taking turns; the least CPU of each size is fitted")
    parser.add_argument("--kex", metavar="ALG",
                        help="each audit run again with ssh -o KexAlgorithms=ALG; both fitted")
    parser.add_argument("--slices", type=int, default=4,
                        help="the largest audit size again as this many slices of one run, merged (0: not)")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    _become_subreaper()
    cluster = Cluster()
    audit, audit_kex, full, sliced, parts = {}, {}, {}, None, {}
    scratch = ROOT / ".cache" if (ROOT / ".cache").is_dir() else None
    sizes = sorted(set(args.hosts) | set(args.full))
    try:
        cluster.up(sizes[-1])
        names = [h["name"] for h in cluster.hosts]
        with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=scratch) as tmp:
            tmp = Path(tmp)
            every = cluster.write_inventory(str(tmp / "all.ini"), python=sys.executable)
            inventory = {n: _inventory_of(every, names[:n], tmp / ("bench-%d.ini" % n)) for n in sizes}
            runs = {n: [] for n in args.hosts}
            kex_runs = {n: [] for n in args.hosts}
            for i in range(args.repeat):
                for n in sorted(runs, reverse=bool(i % 2)):  # turns: 4 16, 16 4, 4 16, ...
                    # with --kex, ssh's default and ALG take turns too
                    for kex in ([None, args.kex] if not i % 2 else [args.kex, None]) if args.kex else [None]:
                        work = tmp / ("audit-%d-%d%s" % (n, i, "-kex" if kex else ""))
                        run = run_assess(inventory[n], work, ["--tags", "audit"], kex=kex)
                        run["checks"] = _checks(run.pop("run_dir"))
                        shutil.rmtree(work, ignore_errors=True)
                        (kex_runs if kex else runs)[n].append(run)
                        print("audit, %d hosts, run %d%s: %.1f CPU s, %.1f s wall" % (
                            n, i + 1, ", KexAlgorithms=%s" % kex if kex else "", run["cpu"], run["wall"]), flush=True)
            audit = {n: _least(r) for n, r in runs.items()}
            audit_kex = {n: _least(r) for n, r in kex_runs.items() if r}
            if args.parts:
                for n in sorted(runs):
                    parts[n] = audit_parts(inventory[n], tmp / ("parts-%d" % n))
            if args.slices > 1:
                n = max(runs)
                sliced = sliced_audit(names[:n], inventory[n], tmp / "sliced", args.slices)
                sliced.update(hosts=n, checks=_checks(sliced.pop("run_dir")))
            for n in args.full:
                full[n] = run_assess(inventory[n], tmp / ("full-%d" % n), FULL_ARGS)
                print("whole quick assessment, %d hosts: %.1f CPU s, %.1f s wall" % (
                    n, full[n]["cpu"], full[n]["wall"]), flush=True)
    finally:
        if not args.keep:
            cluster.down()
    _print_sizes("audit (--tags audit: preflight, audit, cleanup, report)", audit)
    if audit_kex:
        _print_sizes("the same audit with ssh -o KexAlgorithms=%s" % args.kex, audit_kex)
        if len(audit) > 1:
            ours, theirs = (fit([(n, r["cpu"]) for n, r in a.items()])[1] for a in (audit, audit_kex))
            print("  ssh's default key exchange less %s: %.3f s per host (%.3f vs %.3f s per host)" % (
                args.kex, ours - theirs, ours, theirs))
    if parts:
        _print_parts(parts)
    if sliced:
        whole, merged = audit[sliced["hosts"]], sliced["checks"]
        same = sum(1 for k, v in merged.items() if whole["checks"].get(k) == v)
        print("\n%d slices of one run over %d hosts, at once, merged (AWX job slicing):" % (sliced["slices"],
                                                                                           sliced["hosts"]))
        print("  check rows: %d merged vs %d unsliced; same check, host and status: %d = %.3fx of the unsliced"
              % (len(merged), len(whole["checks"]), same, same / max(1, len(whole["checks"]))))
        # one sliced run against the unsliced runs' medians: against their least it would look worse than it is
        print("  wall: %.1f s vs %.1f s = %.2fx; controller CPU: %.1f s vs %.1f s = %.2fx (the unsliced runs' medians)"
              % (sliced["wall"], whole["median_wall"], sliced["wall"] / whole["median_wall"], sliced["cpu"],
                 whole["median"], sliced["cpu"] / whole["median"]))
    if full:
        _print_sizes("whole quick assessment (%s)" % " ".join(FULL_ARGS), full)
    if not args.no_cmax:
        with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=scratch) as tmp:
            ours, cmax = one_machine(Path(tmp))
        print("\none machine: ours (inventories/local.ini, --tags audit) vs cmax audit --vm -y (%s)" % CMAX_SPEC)
        print("  wall: %.1f s vs %.1f s = %.2fx (target <= 1.0x)" % (ours["wall"], cmax["wall"],
                                                                    ours["wall"] / cmax["wall"]))
        print("  CPU:  %.1f s vs %.1f s = %.2fx" % (ours["cpu"], cmax["cpu"], ours["cpu"] / cmax["cpu"]))
    if args.report_nodes:
        with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=scratch) as tmp:
            hosts, rows, t_build, size, render = fleet_report(args.report_nodes, Path(tmp))
        print("\nfleet report: %d nodes x 8 GPUs, %d check rows" % (hosts, rows))
        print("  build: %.1f s (target < 20 s) = %.2fx the target" % (t_build, t_build / 20))
        print("  report.html: %.2f MB (target < 5 MB) = %.2fx" % (size / 2**20, size / (5 * 2**20)))
        print("  Chromium load and render: %s (target < 3 s)" % (
            "%.2f s = %.2fx" % (render, render / 3) if render is not None else "not measured (no chromium)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
