"""The launcher layer on the 4-host test cluster with real launchers: Slurm's srun (slurm-wlm 22.05 in the hosts),
Open MPI's mpirun over SSH between the hosts, and torch's torchrun with c10d, each running the collectives worker
with gloo at world sizes 1, 2 and 4 (the rank comes from the launcher; MPI is only the launcher), next to direct.

Two "racks" from inventory variables, interleaved with the inventory order (hosts 1 and 3 in r1, 2 and 4 in r2):
the 2-node world is the two hosts of r1 (the worlds fill a rack first), the 4-node world crosses racks, and the
report says so. A killed rank and a hung rank under each launcher are named with their host, and no process, no
Slurm job and no step is left. nccl-tests' multi-node path runs through srun and mpirun with a stand-in MPI program
(tests/integration/nccl_tests_standin.c) that prints in nccl-tests' format: the launch mechanics only, not a GPU
measurement. HPL-MxP's solve across all nodes starts the same ways, with a stand-in MPI program
(tests/integration/hpl_mxp_standin.c: xhpl_mxp's command line and result format, MPI broadcasts of HPL's panels,
not a solve), and so do the storage phase's IOR and mdtest worlds on a shared tier (io_tools_standin.c: their
command lines and summary formats, real file I/O from every rank on the checkout's filesystem, which the hosts
share). The probes are started on every host at once, as the play does (one playbook run covers auto and the
report). The checkpoint probe's DCP worlds (each node alone, then the four together on the shared tier) start
through srun."""

import csv
import json
import re
import shutil
import sys
import time
import uuid

import pytest
from cluster.slurm import Slurm
from cluster.slurm import preflight as slurm_preflight
from helpers import ROOT, boot_seconds, mpirun_args, run_dirs, run_everywhere, run_playbook, stray_processes
from integration.elbencho_standin import install as install_elbencho_standin
from integration.nccl_tests_standin import build_hpl_mxp_standin, build_io_tools_standin, build_standin

from probes.common.launch import srun_argv

pytestmark = pytest.mark.cluster

RACKS = ["r1", "r2", "r1", "r2"]
SWEEP = {"racks": RACKS, "min_bytes": 8, "max_bytes": 1048576, "factor": 8, "warmup": 1, "iters": 5,
         "max_seconds_per_size": 0.2, "launch_timeout": 180, "stall_timeout": 60, "rdzv_timeout": 90}
FAULT_SWEEP = dict(SWEEP, max_bytes=65536, stall_timeout=8, world_sizes=[2])
# What a launched world leaves when something is not cleaned up: its ranks, agents, launchers, Slurm steps.
LEFTOVER = ("clustermax-assess-launch=", "torch.distributed.run", "orted", "slurmstepd", "_perf", "mpirun",
            "xhpl_mxp", "/ior ", "/mdtest ")


def timed(runs, key, fn, *args, **kwargs):
    t0 = time.monotonic()
    runs[key] = fn(*args, **kwargs)
    runs.setdefault("seconds", {})[key] = round(time.monotonic() - t0, 1)


def soak(cluster, launcher, margs=()):
    """A short fabric soak (the burn-in's collective loop) started through the launcher, then polled to its end."""
    out = ROOT / ".cache" / ("test-launchers-soak-%s" % uuid.uuid4().hex[:8])
    params = dict(duration_s=10, interval_s=1, grace_s=10, rdzv_timeout=60, collectives=["alltoall"],
                  coll_size_bytes=65536, round_s=0.2, launcher=launcher, mpirun_args=list(margs))
    try:
        run_everywhere(cluster, "fabric_soak", dict(params, mode="start"), out=out)
        return run_everywhere(cluster, "fabric_soak", dict(params, mode="poll", wait_s=60), out=out)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def start_of_a_late_world(cluster, standin):
    """A 2-node world of the nccl-tests stand-in, started by srun as the probes start it (srun_argv, --mpi=pmix),
    whose rank 1 reaches the stand-ins' start fence 2 s late (standin_start.h): the ranks' stderr lines say when
    each reached and left it."""
    names = [h["name"] for h in cluster.hosts[:2]]
    argv = srun_argv(names, 1, [str(standin / "all_reduce_perf"), "-b", "8", "-e", "8", "-w", "0", "-n", "1"],
                     "cmxa-start-fence", mpi="pmix", immediate_s=30)
    cp = cluster.exec(names[0], ["env", "STANDIN_START_LATE_RANK=1"] + argv, timeout=90)
    return {"rc": cp.returncode, "output": cp.stdout + cp.stderr}


# What the Slurm daemons say about a step that failed: errors, timeouts, nodes not responding, steps ended.
SLURM_TROUBLE = re.compile(r"error|timeout|timed out|not responding|kill|terminat|cancel|DOWN|drain", re.I)


def diagnosis(launched, doc, launcher):
    """The launcher's output (the probe's raw files and logs, their last lines) and, under srun, the Slurm daemons'
    lines about trouble: an srun step that fails once in a loaded clean-clone run (cc1's HPL-MxP, cc5's mdtest and
    DCP worlds: "srun: Force Terminated", a rank that never arrived) is diagnosed from the test's own output."""
    out = {"reason": doc.get("reason")}
    out.update({name: text[-1500:] for name, text in (doc.get("raw_text") or {}).items()})
    out.update({name: text[-1500:] for name, text in (doc.get("logs") or {}).items()})
    if launcher == "srun":
        for log in sorted(launched["slurm_logs"].glob("*.log")):
            lines = [line for line in log.read_text(errors="replace").splitlines() if SLURM_TROUBLE.search(line)]
            out[log.name] = "\n".join(lines[-40:])
    return "\n".join("--- %s\n%s" % (k, v) for k, v in out.items())


def leftovers(cluster, since):
    found = {}
    for host, procs in stray_processes(cluster, since).items():
        bad = [p for p in procs if any(m in p for m in LEFTOVER)]
        if bad:
            found[host] = bad
    return found


def slurm_jobs(cluster):
    cp = cluster.exec(cluster.hosts[0]["name"], ["squeue", "--noheader", "--format=%i %j %T"], timeout=30)
    return [line for line in cp.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def launched(test_cluster, tmp_path_factory, request):
    """Every launcher run of this module, in one go: Slurm up for srun and auto, then down for the others."""
    reason = slurm_preflight()
    if reason:
        pytest.skip(reason)
    for tool in ("mpirun", "mpicc"):
        if not shutil.which(tool):
            pytest.skip("%s not found (Debian's openmpi-bin and libopenmpi-dev: make sysdeps)" % tool)
    tmp = tmp_path_factory.mktemp("launchers")
    since = boot_seconds()
    standin = build_standin(ROOT / ".cache" / ("nccl-standin-%s" % uuid.uuid4().hex[:8]))
    request.addfinalizer(lambda: shutil.rmtree(standin, ignore_errors=True))  # also when a step below fails
    nccl = dict(racks=RACKS, collectives=["all_reduce", "alltoall"], bin_dir=str(standin), ranks_per_node=1,
                min_bytes=8, max_bytes=65536, factor=8, warmup=1, iters=3, timeout_per_collective=60)
    build_hpl_mxp_standin(standin)
    hpl = dict(path=str(standin / "xhpl_mxp"), ranks_per_node=1, n=4096, nb=256, formats=["FP16"], tool_timeout=60,
               rdzv_timeout=60)
    build_io_tools_standin(standin)
    install_elbencho_standin(standin)  # its service mode crosses the nodes without a launcher
    # a tier every host sees (they share the checkout's filesystem); the stand-ins found first on PATH
    shared = ROOT / ".cache" / ("test-launchers-tier-%s" % uuid.uuid4().hex[:8])
    shared.mkdir(parents=True)
    request.addfinalizer(lambda: shutil.rmtree(shared, ignore_errors=True))
    io = dict(tier={"name": "shared", "path": str(shared), "shared": True}, tools=["ior", "mdtest", "elbencho"],
              ranks=1, size_mib=1, transfer_kib=256, files_per_rank=20, timeout_s=60, rdzv_timeout=60,
              tools_step={"path": [str(standin)]})
    margs = mpirun_args(test_cluster)
    runs, slurm = {}, Slurm(test_cluster, slurmd_timeout=10, health_check_interval=60)
    try:
        slurm.up()
        timed(runs, "srun", run_everywhere, test_cluster, "collectives", dict(SWEEP, launcher="srun"))
        for mode in ("kill", "hang"):
            timed(runs, "srun-" + mode, run_everywhere, test_cluster, "collectives", dict(
                FAULT_SWEEP, launcher="srun", fault={"rank": 1, "nodes": 2, "after_steps": 3, "mode": mode}))
        timed(runs, "start-srun", start_of_a_late_world, test_cluster, standin)
        timed(runs, "nccl-srun", run_everywhere, test_cluster, "nccl_tests", dict(nccl, launcher="srun"))
        timed(runs, "hpl-srun", run_everywhere, test_cluster, "hpl_mxp", dict(hpl, launcher="srun"))
        timed(runs, "io-srun", run_everywhere, test_cluster, "io_tools_run", dict(io, launcher="srun"))
        # DCP: each node alone, then one world of the four, each world an srun job step
        timed(runs, "ckpt-srun", run_everywhere, test_cluster, "checkpoint", dict(
            tier=io["tier"], size_mib=1, tensors=2, launch_timeout=120, rdzv_timeout=60, launcher="srun"))
        runs["ckpt-tier-left"] = sorted(str(p.relative_to(shared)) for p in shared.rglob("*"))
        timed(runs, "soak-srun", soak, test_cluster, "srun")
        runs["srun-jobs-left"] = slurm_jobs(test_cluster)
        # auto through the playbook: Slurm is up, so srun; the report shows the scaling and the placement
        inv = test_cluster.write_inventory(str(tmp / "cluster.ini"), launcher="auto", extra_host_vars={
            h["name"]: {"assess_rack": RACKS[i]} for i, h in enumerate(test_cluster.hosts)})
        out = tmp / "runs"
        res = run_playbook(inv, "--tags", "network", "--skip-tags",
                           "network_nccl_tests,network_perftest,network_tcp_pairs",
                           "-e", "assess_output_dir=%s" % out, "-e", json.dumps({"network_collectives_profiles": {
                               "quick": SWEEP}}))
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        [run_dir] = run_dirs(out)
        runs["auto"] = {"run_dir": run_dir, "report": (run_dir / "report" / "report.md").read_text(),
                        "doc": json.loads((run_dir / "artifacts" / test_cluster.hosts[0]["name"] /
                                           "collectives.json").read_text())}
        with open(run_dir / "report" / "checks.csv") as fh:
            runs["auto"]["checks"] = list(csv.DictReader(fh))
        runs["leftovers-slurm"] = leftovers(test_cluster, since)
    finally:
        runs["slurm_logs"] = tmp / "slurm-logs"
        slurm.down(keep_logs=runs["slurm_logs"])
    timed(runs, "direct", run_everywhere, test_cluster, "collectives", dict(SWEEP, launcher="direct"))
    timed(runs, "mpirun", run_everywhere, test_cluster, "collectives", dict(SWEEP, launcher="mpirun",
                                                                     mpirun_args=margs))
    # auto without Slurm and without the key for mpirun's SSH: mpirun's smoke test fails, torchrun is taken
    timed(runs, "torchrun", run_everywhere, test_cluster, "collectives", dict(SWEEP, launcher="auto"))
    for launcher in ("mpirun", "torchrun"):
        for mode in ("kill", "hang"):
            timed(runs, "%s-%s" % (launcher, mode), run_everywhere, test_cluster, "collectives", dict(
                FAULT_SWEEP, launcher=launcher, mpirun_args=margs,
                fault={"rank": 1, "nodes": 2, "after_steps": 3, "mode": mode}))
    timed(runs, "nccl-mpirun", run_everywhere, test_cluster, "nccl_tests", dict(nccl, launcher="mpirun",
                                                                         mpirun_args=margs))
    timed(runs, "hpl-mpirun", run_everywhere, test_cluster, "hpl_mxp", dict(hpl, launcher="mpirun",
                                                                     mpirun_args=margs))
    timed(runs, "io-mpirun", run_everywhere, test_cluster, "io_tools_run", dict(io, launcher="mpirun",
                                                                          mpirun_args=margs))
    runs["io-tier-left"] = sorted(str(p.relative_to(shared)) for p in shared.rglob("*"))
    timed(runs, "soak-mpirun", soak, test_cluster, "mpirun", margs)
    runs["leftovers"] = leftovers(test_cluster, since)
    print("launcher runs (s): %s" % runs.get("seconds"), file=sys.stderr)
    return runs


def _rows(doc, metric="busbw_gbps"):
    return [r for r in doc["results"] if r["metric"] == metric]


@pytest.mark.parametrize("launcher", ["direct", "srun", "mpirun", "torchrun"])
def test_every_launcher_runs_world_sizes_1_2_and_4(launched, launcher, test_cluster):
    docs = launched[launcher]
    names = [h["name"] for h in test_cluster.hosts]
    for rank, name in enumerate(names):
        doc = docs[name]
        assert doc["status"] == "ok", diagnosis(launched, doc, launcher)
        facts = doc["facts"]
        assert facts["launcher"] == launcher and facts["failures"] == []
        # the 2-node world is r1's two hosts (the first and third host), filled before crossing racks
        in_two = rank in (0, 2)
        assert facts["world_sizes_run"] == ("1,2,4" if in_two else "1,4")
        assert {r["labels"]["nodes"] for r in doc["results"]} == ({1, 2, 4} if in_two else {1, 4})
        # every rank's result is its own node's: one rank per node on CPU
        four = [r for r in _rows(doc) if r["labels"]["nodes"] == 4 and r["labels"]["collective"] == "all_reduce"]
        assert four and all(r["labels"]["ranks"] == 4 and r["value"] > 0 for r in four)
        assert [p["hosts"] for p in facts["placement"]] == [[name], [names[0], names[2]], [
            names[0], names[2], names[1], names[3]]]
        assert [p["racks"] for p in facts["placement"]] == [[RACKS[rank]], ["r1", "r1"], ["r1", "r1", "r2", "r2"]]
    if launcher != "direct":
        first = docs[names[0]]["facts"]
        launches = first["launches"]
        assert [x["nodes"] for x in launches] == [1, 2, 4] and all(x["rc"] == 0 for x in launches)
        argv = launches[2]["argv"]
        if launcher == "srun":
            assert "--nodes=4" in argv and "--ntasks-per-node=1" in argv and "--kill-on-bad-exit=1" in argv
            assert "--nodelist=%s" % ",".join([names[0], names[2], names[1], names[3]]) in argv
            assert first["slurm_jobs"], "the job ids of the worlds are recorded"
        elif launcher == "mpirun":
            assert "-np 4" in argv and "--map-by ppr:1:node" in argv and "--bind-to numa" in argv
            assert "-x CMXA_LAUNCH" in argv
        else:
            assert "--nnodes=4" in argv and "--rdzv-backend=c10d" in argv and "--max-restarts=0" in argv
            # auto took torchrun, and says why not srun and mpirun
            why = first["launcher_why_not"]
            assert first["launcher_asked"] == "auto" and "not a Slurm node" in why["srun"]
            assert "mpirun across the 4 hosts failed" in why["mpirun"]


@pytest.mark.parametrize("launcher", ["srun", "mpirun", "torchrun"])
@pytest.mark.parametrize("mode", ["kill", "hang"])
def test_a_killed_or_hung_rank_is_named_with_its_host(launched, launcher, mode, test_cluster):
    names = [h["name"] for h in test_cluster.hosts]
    docs = launched["%s-%s" % (launcher, mode)]
    # the 2-node world is the first and third host; rank 1 is on the third
    for name in (names[0], names[2]):
        doc = docs[name]
        assert doc["status"] == "error", doc["facts"].get("failures")
        [failure] = doc["facts"]["failures"]
        assert failure["nodes"] == 2 and 1 in failure["stuck_ranks"], failure
        if mode == "kill":
            assert failure["kind"] == "crash"
            assert "rank 1 on %s was killed by signal 9" % names[2] in failure["message"], failure["message"]
        else:
            assert failure["kind"] == "hang"
            assert "rank 1 on %s stuck in " % names[2] in failure["message"] or (
                "stuck in" in failure["message"] and names[2] in failure["message"]), failure["message"]
        # what came before the fault was measured and kept
        assert {r["labels"]["size_bytes"] for r in doc["results"] if r["labels"]["nodes"] == 2} >= {8, 64}
    for name in (names[1], names[3]):
        assert docs[name]["facts"]["world_sizes_run"] == ""  # not in the 2-node world


def test_the_stand_ins_start_is_a_barrier_across_nodes_under_srun(launched):
    """No rank of a stand-in leaves its start before the last rank has arrived (standin_start.h), though Slurm's
    PMIx plugin here completes the fence without data that ends Open MPI's MPI_Init on each node alone: a rank that
    sent first crashed a peer still in MPI_Init (SIGSEGV in mca_btl_tcp, 5 of 150 4-node worlds under load)."""
    run = launched["start-srun"]
    text = run["output"]
    assert run["rc"] == 0, text
    reached = {int(r): float(t) for r, t in re.findall(r"rank (\d+) reached the fence at ([\d.]+)", text)}
    left = {int(r): float(t) for r, t in re.findall(r"rank (\d+) left the fence at ([\d.]+)", text)}
    assert sorted(reached) == sorted(left) == [0, 1], text
    assert reached[1] - reached[0] >= 1.5, text  # rank 1 came late
    assert min(left.values()) >= reached[1], text  # and rank 0 waited for it


def test_nothing_is_left_behind(launched):
    assert launched["leftovers-slurm"] == {}
    assert launched["leftovers"] == {}
    assert launched["srun-jobs-left"] == []


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_nccl_tests_multi_node_through_the_launcher(launched, launcher, test_cluster):
    """The stand-in prints in nccl-tests' format: 1 node on every node, 2 and 4 nodes from the first host."""
    names = [h["name"] for h in test_cluster.hosts]
    docs = launched["nccl-" + launcher]
    first = docs[names[0]]
    assert first["status"] == "ok", diagnosis(launched, first, launcher)
    assert first["facts"]["launcher"] == launcher
    by_nodes = {}
    for r in _rows(first):
        by_nodes.setdefault(r["labels"]["nodes"], set()).add((r["labels"]["collective"], r["labels"]["ranks"]))
    assert by_nodes == {1: {("all_reduce", 1), ("alltoall", 1)}, 2: {("all_reduce", 2), ("alltoall", 2)},
                        4: {("all_reduce", 4), ("alltoall", 4)}}
    text = next(v for k, v in first["logs"].items() if k.endswith("all_reduce_perf.launcher.log") and ".n4." in k)
    assert "nccl-tests stand-in" in text
    # the command lines as nccl-tests is run by hand: one rank per GPU (-g 1), -b/-e/-f, the world's hosts
    launches = first["facts"]["launches"]
    assert [(x["nodes"], x["collective"]) for x in launches] == [(2, "all_reduce"), (2, "alltoall"),
                                                                 (4, "all_reduce"), (4, "alltoall")]
    for x in launches:
        assert re.search(r"/(all_reduce|alltoall)_perf -b 8 -e 65536 -f 8 -c 1 -w 1 -n 3 -g 1$", x["argv"]), x
        world = [names[0], names[2]] if x["nodes"] == 2 else [names[0], names[2], names[1], names[3]]
        if launcher == "srun":
            assert "--nodelist=%s" % ",".join(world) in x["argv"] and "--mpi=pmix" in x["argv"]
            assert "--ntasks-per-node=1" in x["argv"]
        else:
            ips = {h["name"]: h["ip"] for h in test_cluster.hosts}
            assert x["hostfile"] == "".join("%s slots=1\n" % ips[h] for h in world)
            assert "-np %d " % x["nodes"] in x["argv"] and "-x PATH" in x["argv"]
    for name in names[1:]:
        assert {r["labels"]["nodes"] for r in docs[name]["results"]} == {1}


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_hpl_mxp_solves_on_each_node_then_across_all_four(launched, launcher, test_cluster):
    """Every node solves alone (mpirun -np 1 on itself), then the first host starts one world of 4 ranks, one per
    node, on a 2 x 2 grid: each rank prints its host, so the world really spans the four hosts."""
    names = [h["name"] for h in test_cluster.hosts]
    docs = launched["hpl-" + launcher]
    first = docs[names[0]]
    # the launcher's output and Slurm's with the reason: a failure across nodes is diagnosed from it
    assert first["status"] == "ok", diagnosis(launched, first, launcher)
    assert first["facts"]["across_nodes"] == "run: 4 nodes, 4 ranks through %s" % launcher
    across = [r for r in first["results"] if r["labels"]["nodes"] == 4]
    assert {(r["metric"], r["labels"]["grid"], r["labels"]["ranks"]) for r in across} >= {
        ("passed", "2x2", 4), ("gflops_per_gpu", "2x2", 4)}
    assert [r["value"] for r in across if r["metric"] == "passed"] == [1]
    text = first["raw_text"]["hpl_mxp.fp16.n4.txt"]
    ranks = re.findall(r"^# rank (\d) of 4 on (\S+)$", text, re.M)
    assert sorted(int(r) for r, _ in ranks) == [0, 1, 2, 3] and len({h for _, h in ranks}) == 4, text[:2000]
    argv = first["facts"]["across_launch"]
    assert argv.endswith("/xhpl_mxp")  # the solve's own arguments follow, per format
    if launcher == "srun":
        assert "--nodelist=%s" % ",".join(names) in argv and "--ntasks-per-node=1" in argv
    else:
        ips = [h["ip"] for h in test_cluster.hosts]
        assert first["facts"]["across_hostfile"] == "".join("%s slots=1\n" % ip for ip in ips)
        assert "--bind-to none" in argv
    for name in names:
        alone = [r for r in docs[name]["results"] if r["labels"]["nodes"] == 1 and r["metric"] == "passed"]
        assert [(r["value"], r["labels"]["grid"]) for r in alone] == [(1, "1x1")], docs[name]["results"]
        assert docs[name]["status"] == "ok"
    for name in names[1:]:
        assert not [r for r in docs[name]["results"] if r["labels"]["nodes"] != 1]


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_the_burn_in_collective_loop_starts_through_the_launcher(launched, launcher, test_cluster):
    """The fabric soak's loop (the burn-in's all-to-all) through the same launcher layer: every host's timeline has
    its own rank's samples, and the launcher's exit is recorded."""
    docs = launched["soak-" + launcher]
    names = [h["name"] for h in test_cluster.hosts]
    for name in names:
        doc = docs[name]
        facts = doc["facts"]
        assert facts["state"] == "done" and facts["ended_by"] == "completed", facts
        assert facts["launcher"] == launcher and not facts.get("launcher_error"), facts
        busbw = [r for r in doc["results"] if r["metric"] == "coll_busbw_avg_gbps" and r["labels"].get("collective") ==
                 "alltoall"]
        assert busbw and all(r["value"] > 0 for r in busbw), [r["metric"] for r in doc["results"]]
        assert "worker_exits" not in facts, facts.get("worker_exits")


def test_auto_takes_srun_on_slurm_nodes_and_the_report_shows_the_placement(launched, test_cluster):
    auto = launched["auto"]
    facts = auto["doc"]["facts"]
    assert facts["launcher"] == "srun" and facts["launcher_asked"] == "auto"
    report = auto["report"]
    assert "Scaling across nodes" in report
    assert "within rack r1" in report and "across racks r1, r2" in report


@pytest.mark.parametrize("launcher", ["srun", "mpirun"])
def test_ior_and_mdtest_run_as_one_world_across_the_nodes_of_a_shared_tier(launched, launcher, test_cluster):
    """Each host runs IOR and mdtest alone, then the first host starts one world of each across all four through the
    launcher (one rank per node); its results are labelled scope=cluster with the node count, the world's ranks ran
    on every host, the storage rubric grades them on the first host, and nothing is left on the tier."""
    from reports.grading import grade, load_rubric  # noqa: PLC0415
    from reports.load import run_of_artifacts  # noqa: PLC0415

    names = [h["name"] for h in test_cluster.hosts]
    docs = launched["io-%s" % launcher]
    first = docs[names[0]]
    assert first["status"] == "ok", diagnosis(launched, first, launcher)
    facts = first["facts"]
    assert facts["launcher"] == launcher and facts["across_nodes"] == "run: 4 nodes, 4 ranks through %s" % launcher
    assert facts["ior_version"] == "standin" and facts["ior_across"].startswith("ran: ")
    world = [r for r in first["results"] if r["labels"]["scope"] == "cluster"]
    ior = {r["labels"]["operation"]: r for r in world if r["metric"] == "ior_bw_mib_s"}
    assert set(ior) == {"write", "read"}
    assert all(r["labels"]["tasks"] == 4 and r["labels"]["nodes"] == 4 and r["value"] > 0 for r in ior.values())
    creates = [r for r in world if r["metric"] == "mdtest_ops_per_s" and r["labels"]["operation"] == "file_creation"]
    assert len(creates) == 1 and creates[0]["labels"]["tasks"] == 4 and creates[0]["value"] > 0
    # elbencho through its services: one on each host (at the host's own address), the master on the first
    assert facts["elbencho_across_nodes"].startswith("run: 4 nodes through elbencho's services ("), facts
    listed = facts["elbencho_across_nodes"].split("(", 1)[1].rstrip(")").split(",")
    assert [s.rsplit(":", 1)[0] for s in listed] == [h["ip"] for h in test_cluster.hosts], listed
    assert facts["elbencho_across"].startswith("ran: ") and "--hosts %s " % ",".join(listed) in facts["elbencho_across"]
    elb = [r for r in world if r["metric"] == "elbencho_bw_mib_s" and r["labels"]["operation"] == "write"]
    assert len(elb) == 1 and elb[0]["labels"]["nodes"] == 4
    # the world's ranks ran one on each host (the stand-in prints where each rank is)
    text = first["raw_text"]["io_tools_run.ior.n4.txt"]
    assert sorted(re.findall(r"# rank \d of 4 on (\S+)", text)) == sorted(names), text[:2000]
    for name in names[1:]:
        doc = docs[name]
        assert doc["status"] == "ok", doc["reason"]
        assert {r["labels"]["scope"] for r in doc["results"]} == {"node"} and "across_nodes" not in doc["facts"]
    # graded on the first host, the others pointed to it
    rubric = load_rubric()
    checks = [c for c in rubric["checks"] if c.get("kind") == "storage_world"]
    assert {c["id"] for c in checks} == {"storage.ior_write_world", "storage.ior_read_world",
                                         "storage.mdtest_file_create_world", "storage.elbencho_write_world"}
    run = run_of_artifacts([{k: v for k, v in d.items() if k not in ("logs", "raw_text")} for d in docs.values()])
    ids = {c["id"] for c in checks}
    rows = [r for r in grade(run, dict(rubric, checks=checks)) if r["check_id"] in ids]
    print("world rows (%s): %s" % (launcher, [(r["check_id"], r["host"], r["status"], r["observed"]) for r in rows]))
    assert {r["reason"] for r in rows if r["host"] != names[0]} == {"cluster-wide check, graded on %s" % names[0]}
    rows = [r for r in rows if r["host"] == names[0]]
    assert sorted((r["check_id"], r["subject"]) for r in rows) == sorted((c["id"], "tier=None") for c in checks)
    assert all(r["status"] in ("pass", "warn", "fail") and r["observed"] for r in rows), rows
    # the report's table: each host alone, and the world as one row of its own
    from reports.phases.storage.section import io_tools_part  # noqa: PLC0415
    from reports.render import markdown  # noqa: PLC0415

    table = markdown.render(io_tools_part(run))
    assert re.search(r"\| – \| 4 nodes \(%s, elbencho's services, from %s\) \| 4 \| \d" % (launcher, names[0]),
                     table), table
    assert all("| – | %s | 1 | " % name in table for name in names), table
    if launcher == "mpirun":
        assert launched["io-tier-left"] == []



def test_dcp_checkpoint_worlds_start_through_srun(launched, test_cluster):
    """The checkpoint probe's DCP worlds are srun job steps: every node's own world into its own directory, then one
    world of the four into one directory of the shared tier, each rank loading back what it saved; the world's
    aggregate is on the first host, and the tier is left empty."""
    names = [h["name"] for h in test_cluster.hosts]
    docs = launched["ckpt-srun"]
    for name in names:
        doc = docs[name]
        assert doc["status"] == "ok", diagnosis(launched, doc, "srun")
        facts = doc["facts"]
        assert facts["launcher"] == "srun" and facts["world_sizes_run"] == "1,4"
        assert facts["dcp_mode"] == "worlds of 1, 4 nodes; 1 rank per node (CPU)"
        assert facts["dcp_load_matches"] is True and facts["dcp_files_n4"] == 5  # 4 ranks' files, one .metadata
        # every node launches its own world; the first host launches the world of the four
        assert [launch["nodes"] for launch in facts["launches"]] == ([1, 4] if name == names[0] else [1])
        ranks = [r for r in doc["results"] if r["metric"] == "ckpt_save_gbps" and r["labels"].get("method") == "dcp"
                 and r["labels"]["scope"] == "rank"]
        assert sorted((r["labels"]["nodes"], r["labels"]["ranks"]) for r in ranks) == [(1, 1), (4, 4)]
        assert all(r["value"] > 0 for r in ranks)
    [total] = [r for r in docs[names[0]]["results"] if r["metric"] == "ckpt_bytes"
               and r["labels"].get("scope") == "aggregate"]
    assert total["value"] == 4 * 2**20
    assert launched["ckpt-tier-left"] == []
