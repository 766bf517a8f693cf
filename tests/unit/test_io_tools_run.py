"""probes/storage/io_tools_run.py: IOR, mdtest and elbencho where a node has them, none where it has not. The tools
are not packaged for the test machines; here each is a stand-in on PATH that records its command line and prints a
real capture (tests/fixtures/io_tools/), so what is tested is the probe's plumbing: the command lines, the outputs
read into results, an unreadable output named, the raw outputs kept and the test directory removed."""

import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from free_ports import free_port

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "io_tools"
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from elbencho_standin import install as install_elbencho_standin  # noqa: E402

from probes.storage.io_tools_run import command  # noqa: E402


def _stand_in(bin_dir, tool, capture, rc=0):
    """bin_dir/tool: appends its argv to bin_dir/argv, prints the capture."""
    path = bin_dir / tool
    path.write_text("#!/bin/sh\necho \"%s $*\" >> %s/argv\ncat %s\nexit %d\n" % (tool, bin_dir, capture, rc))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run_dir(tmp_path, artifacts):
    """tmp_path/run with each host's artifact where the controller fetches it: artifacts {host: artifact path}."""
    run = tmp_path / "run"
    for host, path in artifacts.items():
        (run / "artifacts" / host).mkdir(parents=True)
        shutil.copy(path, run / "artifacts" / host)
    return run


def _probe(tmp_path, bin_dir, **params):
    tier = tmp_path / "tier"
    tier.mkdir(exist_ok=True)
    p = dict({"tier": {"name": "scratch", "path": str(tier)}, "ranks": 1, "size_mib": 1}, **params)
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir)
    proc = subprocess.run([sys.executable, "-m", "probes", "io_tools_run", "--out", str(tmp_path / "out"),
                           "--host", "n1", "--run-id", "r-io", "--variant", "scratch", "--params", json.dumps(p)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads((tmp_path / "out" / "io_tools_run-scratch.json").read_text()), tier


def test_a_node_without_the_tools_is_skipped_naming_each(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    doc, _ = _probe(tmp_path, bin_dir)
    assert doc["status"] == "skipped"
    assert doc["reason"] == ("none of ior, mdtest, elbencho is installed on this node: install them, or let the tools "
                             "step build them (tools_elbencho, tools_ior, assess_sources)")
    assert doc["facts"]["ior"].startswith("not run: ior is not installed on this node")
    assert doc["facts"]["across_nodes"] == "not run: the run has one host"
    assert doc["facts"]["elbencho_across_nodes"] == "not run: the run has one host"


def test_the_skip_quotes_why_the_tools_step_did_not_build_them(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    why = ("failed: the build failed (rc 1): `/opt/p/src/configure --prefix=/opt/p MPICC=/usr/bin/mpicc` in /opt/p/src "
           "(tools_ior / assess_sources.ior)\nconfigure: error: MPI compiler requested, but could not use MPI.")
    doc, _ = _probe(tmp_path, bin_dir, tools=["ior", "mdtest"], tools_step={"missing": {"ior": why}})
    assert doc["status"] == "skipped"
    assert doc["reason"] == ("none of ior, mdtest is installed on this node: install them, or let the tools step build "
                             "them (tools_ior, assess_sources); the tools step: ior: %s" % why)
    assert doc["facts"]["mdtest"].endswith("; the tools step: %s" % why)  # mdtest comes with IOR's build


def _all_stand_ins(tmp_path):
    """tmp_path/bin with IOR, mdtest and elbencho stand-ins printing real captures."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, capture in (("ior", "ior-3.3.0-posix-fpp-C-e-lustre-exascaler-azure.txt"),
                          ("mdtest", "mdtest-3.3.0-64tasks-8nodes-long-nodemap-lustre-exascaler-gcp.txt"),
                          ("elbencho", "elbencho-2.1-0-multihost-4hosts-mkdirs-write-direct-resfile.txt")):
        _stand_in(bin_dir, tool, FIXTURES / tool / capture)
    return bin_dir


def test_each_installed_tool_runs_and_its_output_becomes_results(tmp_path):
    bin_dir = _all_stand_ins(tmp_path)
    doc, tier = _probe(tmp_path, bin_dir, size_mib=4, transfer_kib=256, files_per_rank=50)
    assert doc["status"] == "ok", doc["reason"]
    res = {(r["metric"], r["labels"].get("operation")): r["value"] for r in doc["results"]}
    assert res[("ior_bw_mib_s", "write")] == 1842.29 and res[("ior_bw_mib_s", "read")] == 2316.13
    assert res[("mdtest_ops_per_s", "file_creation")] == 19186.06
    assert res[("elbencho_bw_mib_s", "write")] == 4831.0
    assert {r["labels"]["scope"] for r in doc["results"]} == {"node"}
    work = tier / "clustermax-assess-storage-r-io" / "io_tools" / "n1"
    argv = (bin_dir / "argv").read_text().splitlines()
    # O_DIRECT works on this machine's /tmp (ext4): alone on a node, IOR's read (-C shifts by no node) and
    # elbencho's would otherwise come from the page cache
    assert doc["facts"]["io_mode"] == "O_DIRECT (IOR -B on one node, elbencho --direct)"
    assert argv[0] == "ior -a POSIX -F -w -r -C -e -i 1 -t 256k -b 4m -B -o %s/ior/testfile" % work
    assert argv[1] == "mdtest -n 50 -i 1 -u -d %s/mdtest" % work
    assert argv[2] == ("elbencho --mkdirs --write --read --delfiles --deldirs --threads 1 --dirs 1 --files 1 "
                       "--size 4m --block 256k --nolive --direct %s/elbencho" % work)
    assert doc["facts"]["ior_version"] == "3.3.0" and doc["facts"]["mdtest_version"] == "3.3.0"
    assert sorted(doc["raw"]) == ["io_tools_run-scratch.%s.txt" % t for t in ("elbencho", "ior", "mdtest")]
    assert not work.exists() and list(tier.iterdir()) == []  # the test directory is gone, its parents with it


def test_an_output_that_cannot_be_read_is_an_error_naming_the_tool_and_line(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # IOR that failed its read-back check: no summary, the failure named
    _stand_in(bin_dir, "ior", FIXTURES / "ior" / "ior-3.1.0-posix-W-R-FAILED-comparison-issue22-PARTIAL.txt", rc=1)
    doc, _ = _probe(tmp_path, bin_dir, tools=["ior"])
    assert doc["status"] == "error"
    assert doc["reason"].startswith("ior output, line 26: no 'Summary of all tests:' table (the run failed: [0] "
                                    "FAILED comparison")
    assert "(exit 1; output in io_tools_run-scratch.ior.txt)" in doc["reason"]
    assert doc["results"] == []


def test_the_results_are_graded_per_tier(tmp_path):
    """The artifact the stand-ins gave, in a run directory as the controller fetches it, through the rubric."""
    from reports.build import evaluate  # noqa: PLC0415

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, capture in (("ior", "ior-4.0.0rc1-mpiio-noncontig-showHints-5iter.txt"),
                          ("mdtest", "mdtest-1.9.3-verbose-v-96tasks-gpfs-2iter.txt")):
        _stand_in(bin_dir, tool, FIXTURES / tool / capture)
    doc, _ = _probe(tmp_path, bin_dir, tools=["ior", "mdtest"])
    run = _run_dir(tmp_path, {"n1": tmp_path / "out" / "io_tools_run-scratch.json"})
    (run / "assess_run.json").write_text(json.dumps({"id": "r-io", "hosts": ["n1"], "profile": "quick"}))
    run_doc, rows, _ = evaluate(str(run))
    got = {(r["check_id"], r["subject"]): (r["status"], r["observed"]) for r in rows
           if r["check_id"] in ("storage.io_tools_ran", "storage.ior_write", "storage.ior_read",
                                "storage.mdtest_file_create", "storage.elbencho_write")}
    assert got[("storage.io_tools_ran", "tier=scratch")][0] == "pass"
    # IOR 4.0.0rc1's 103.24 MiB/s write: above the floor, below the warn line
    assert got[("storage.ior_write", "tier=scratch")] == ("warn", "103.24 MiB/s")
    assert got[("storage.mdtest_file_create", "tier=scratch")] == ("fail", "113.827 ops/s")
    # the capture wrote only, and ran no elbencho: a skip on the tier that ran, named
    assert got[("storage.ior_read", "tier=scratch")][0] == "skip"
    assert got[("storage.elbencho_write", "tier=scratch")] == ("skip", "")
    # the report's table: one row per tier and node (a world across nodes would add its own row)
    from reports.phases.storage.section import io_tools_part  # noqa: PLC0415
    from reports.render import markdown  # noqa: PLC0415

    text = markdown.render(io_tools_part(run_doc))
    assert "### IOR, mdtest and elbencho" in text
    assert "| scratch | n1 | 640 | 103 | – | 114 | 1483282 | 123 | – | – |" in text, text  # the captures' own tasks


# IOR and mdtest captures for the tests of the world across nodes (each host's run alone reads them)
WORLD_CAPTURES = {"ior": "ior-3.3.0-posix-fpp-C-e-lustre-exascaler-azure.txt",
                  "mdtest": "mdtest-3.3.0-64tasks-8nodes-long-nodemap-lustre-exascaler-gcp.txt"}


def _world_stand_ins(tmp_path, tools=("ior", "mdtest")):
    """tmp_path/bin with a stand-in per tool that prints its capture."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        _stand_in(bin_dir, tool, FIXTURES / tool / WORLD_CAPTURES[tool])
    return bin_dir


def _two_hosts(tmp_path, run_id, params, per_host=None, paths=None, timeout=120):
    """Two io_tools_run probes started at once on this machine as hosts a and b of one run (both at 127.0.0.1, a
    port block of their own; variant "shared"): params for both, per_host {host: params} on top, paths {host: PATH}
    (default /usr/bin:/bin). Returns both artifacts, a's first."""
    port = free_port()
    procs = []
    for rank, host in enumerate(("a", "b")):
        p = dict(params, hosts=["a", "b"], addresses=["127.0.0.1"] * 2, rank=rank, port=port,
                 **(per_host or {}).get(host, {}))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "probes", "io_tools_run", "--out", str(tmp_path / host), "--host", host,
             "--run-id", run_id, "--variant", "shared", "--params", json.dumps(p)],
            cwd=ROOT, env=dict(os.environ, PATH=(paths or {}).get(host, "/usr/bin:/bin")),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.wait(timeout=timeout) == 0, proc.stderr.read()
    return [json.loads((tmp_path / h / "io_tools_run-shared.json").read_text()) for h in ("a", "b")]


@pytest.mark.parametrize("launcher", ["direct", "srun"])
def test_two_hosts_meet_and_the_first_says_why_no_world_starts(tmp_path, launcher):
    """Two probes on this machine as two hosts of one run on a shared tier: each runs alone, they meet in the run's
    store, and the first host records why no world started: direct has no MPI to start IOR and mdtest across nodes,
    and srun, asked for, cannot be used on this machine (no Slurm node). The second host's artifact has its own
    numbers only."""
    from probes.common import launch  # noqa: PLC0415

    if launcher == "srun" and launch.node_facts(torch_needed=False)["slurm"]:
        pytest.skip("this machine is a Slurm node: srun would start a real world here")
    bin_dir = _world_stand_ins(tmp_path)
    tier = tmp_path / "shared"
    tier.mkdir()
    path = "%s:/usr/bin:/bin" % bin_dir
    first, second = _two_hosts(tmp_path, "r-world", {
        "tier": {"name": "shared", "path": str(tier), "shared": True}, "ranks": 1, "size_mib": 1,
        "tools": ["ior", "mdtest"], "launcher": launcher, "rdzv_timeout": 30}, paths={"a": path, "b": path})
    assert first["status"] == "ok" and second["status"] == "ok", (first["reason"], second["reason"])
    assert first["facts"]["launcher"] == launcher
    assert first["facts"]["across_nodes"].startswith(
        "not run: IOR and mdtest start across nodes only through MPI (srun or mpirun); the launcher is direct"
        if launcher == "direct" else "not run: launcher srun cannot be used: ")
    assert "across_nodes" not in second["facts"] and "launcher" not in second["facts"]
    for doc in (first, second):
        assert {r["labels"]["scope"] for r in doc["results"]} == {"node"}
        assert "store_errors" not in doc["facts"]
    assert list(tier.iterdir()) == []  # both hosts' directories went, and the run's own on the tier with them


def test_a_world_needs_each_tool_on_every_node_at_one_path():
    from probes.storage.io_tools_run import world_tools  # noqa: PLC0415

    params = {"tools": ["ior", "mdtest", "elbencho"]}
    facts = [{"io_tools": {"ior": "/opt/ior/bin/ior", "mdtest": "/opt/ior/bin/mdtest"}},
             {"io_tools": {"ior": "/usr/local/bin/ior", "mdtest": "/opt/ior/bin/mdtest"}},
             {"io_tools": {"ior": "/opt/ior/bin/ior", "mdtest": None}}]
    ok, why = world_tools(params, facts, ["n1", "n2", "n3"])
    assert ok == {}
    assert why["ior"] == ("ior is at different paths (n1 /opt/ior/bin/ior, n2 /usr/local/bin/ior, "
                          "n3 /opt/ior/bin/ior): one command line starts every rank")
    assert why["mdtest"] == "mdtest is not installed on n3"
    ok, why = world_tools(params, facts[:1] * 2, ["n1", "n2"])
    assert ok == {"ior": "/opt/ior/bin/ior", "mdtest": "/opt/ior/bin/mdtest"} and why == {}


def test_a_host_that_fails_alone_still_meets_the_others_at_the_barriers(tmp_path):
    """Host b cannot make its directory on the tier (the tier's path is a file there): its run alone fails, and it
    still goes through both barriers, so host a is not left waiting out their timeouts (300 s here, beyond the
    processes' 90 s limit) for a host that is gone. b's artifact is an error naming what failed."""
    bin_dir = _world_stand_ins(tmp_path, tools=("ior",))
    (tmp_path / "shared").mkdir()
    (tmp_path / "not-a-dir").write_text("")
    path = "%s:/usr/bin:/bin" % bin_dir
    first, second = _two_hosts(
        tmp_path, "r-fail", {"ranks": 1, "size_mib": 1, "tools": ["ior"], "launcher": "direct", "rdzv_timeout": 60,
                             "timeout_s": 60},
        per_host={h: {"tier": {"name": "shared", "path": str(tmp_path / d), "shared": True}}
                  for h, d in (("a", "shared"), ("b", "not-a-dir"))},
        paths={"a": path, "b": path}, timeout=90)
    assert second["status"] == "error" and second["reason"].startswith("alone: NotADirectoryError: "), second
    assert first["status"] == "ok" and first["facts"]["across_nodes"].startswith("not run: IOR and mdtest start")
    assert "store_errors" not in first["facts"] and "store_errors" not in second["facts"]


def test_no_mpirun_smoke_test_across_the_nodes_when_no_world_can_start(tmp_path):
    """launcher auto: mpirun's smoke test across every node is only worth running for a world. Host b has neither IOR
    nor mdtest, so no world starts, and the nodes agree on mpirun without the smoke test (on this machine it would
    fail, two "hosts" at one address, and its failure would show in launcher_why_not)."""
    if not shutil.which("mpirun"):
        pytest.skip("no mpirun on this machine: auto would not choose it")
    bin_dir = _world_stand_ins(tmp_path)
    (tmp_path / "shared").mkdir()
    mpi = os.path.dirname(shutil.which("mpirun"))
    first, _ = _two_hosts(tmp_path, "r-auto", {
        "tier": {"name": "shared", "path": str(tmp_path / "shared"), "shared": True}, "ranks": 1, "size_mib": 1,
        "tools": ["ior", "mdtest"], "launcher": "auto", "rdzv_timeout": 60},
        paths={"a": "%s:%s:/usr/bin:/bin" % (bin_dir, mpi), "b": "%s:/usr/bin:/bin" % mpi})
    facts = first["facts"]
    assert facts["launcher_asked"] == "auto" and facts["launcher"] == "mpirun", facts
    assert "mpirun" not in (facts["launcher_why_not"] or {})
    assert facts["across_nodes"] == "not run: ior is not installed on b; mdtest is not installed on b"


def _running(bin_dir):
    ps = subprocess.run(["ps", "-eww", "-o", "args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if str(bin_dir) in line]


def test_elbencho_runs_across_the_nodes_through_its_services_and_stops_them(tmp_path):
    """Two hosts on a shared tier: each runs elbencho alone, then starts its service on a port of its own, the first
    host runs the master across both services and quits them; the rows are one world of 2 nodes, and no service is
    left running."""
    bin_dir = install_elbencho_standin(tmp_path / "bin")
    tier = tmp_path / "shared"
    tier.mkdir()
    path = "%s:/usr/bin:/bin" % bin_dir
    first, second = _two_hosts(tmp_path, "r-elb", {
        "tier": {"name": "shared", "path": str(tier), "shared": True}, "ranks": 2, "size_mib": 1,
        "tools": ["elbencho"], "launcher": "direct", "rdzv_timeout": 30},
        paths={"a": path, "b": path})
    assert first["status"] == "ok" and second["status"] == "ok", (first["reason"], second["reason"])
    argv = (bin_dir / "argv").read_text().splitlines()
    services = sorted(line for line in argv if "--service" in line)
    port = int(services[0].rsplit(" ", 1)[1])
    assert services == ["elbencho --service --foreground --port %d" % p for p in (port, port + 1)]
    master = [line for line in argv if "--hosts" in line]
    hosts = "127.0.0.1:%d,127.0.0.1:%d" % (port, port + 1)
    assert master == [
        "elbencho --hosts %s --mkdirs --write --read --delfiles --deldirs --threads 2 --dirs 1 --files 1 --size 1m "
        "--block 1024k --nolive --direct %s/clustermax-assess-storage-r-elb/io_tools/elbencho-world/elbencho"
        % (hosts, tier),
        "elbencho --hosts %s --quit" % hosts]
    facts = first["facts"]
    assert facts["elbencho_across_nodes"] == "run: 2 nodes through elbencho's services (%s)" % hosts
    assert facts["elbencho_across"].startswith("ran: %s/elbencho --hosts %s " % (bin_dir, hosts))
    assert facts["across_nodes"] == "not run: neither ior nor mdtest is among the tools asked for"
    world = [r for r in first["results"] if r["labels"]["scope"] == "cluster"]
    assert {(r["metric"], r["labels"]["operation"], r["labels"]["nodes"]) for r in world} >= {
        ("elbencho_bw_mib_s", "write", 2)}
    assert "io_tools_run-shared.elbencho.n2.txt" in first["raw"]
    assert {r["labels"]["scope"] for r in second["results"]} == {"node"}  # its own run alone only
    # each service ran the master's phase, and --quit ended both
    assert sorted(line for line in argv if line.startswith("service ")) == [
        "service %d: %s" % (p, w) for p in (port, port + 1) for w in ("quit", "run")]
    assert all("elbencho_service" not in d["facts"] for d in (first, second)) and "elbencho_quit" not in facts
    assert _running(bin_dir) == [] and list(tier.iterdir()) == []
    # graded on the first host as the world of the tier, the second pointing to it; a row of its own in the report
    from graded_run import grade_checks  # noqa: PLC0415

    from probes.artifact import Artifact  # noqa: PLC0415
    from probes.common import tiers as storage_tier  # noqa: PLC0415
    from probes.storage import io_tools_run  # noqa: PLC0415
    from reports.load import load_run  # noqa: PLC0415
    from reports.phases.storage.section import io_tools_part  # noqa: PLC0415
    from reports.render import markdown  # noqa: PLC0415

    run = _run_dir(tmp_path, {h: tmp_path / h / "io_tools_run-shared.json" for h in ("a", "b")})
    rows = {(r["check_id"], r["host"]): r for r in grade_checks(run, {"storage.elbencho_write_world"}, ["a", "b"],
                                                                 run_id="r-elb")}
    mine = rows[("storage.elbencho_write_world", "a")]
    value = next(r["value"] for r in world
                 if r["metric"] == "elbencho_bw_mib_s" and r["labels"]["operation"] == "write")
    assert mine["status"] in ("pass", "warn", "fail") and mine["subject"] == "tier=shared"
    assert float(mine["observed"].split()[0].replace(",", "")) == value, mine
    assert mine["reason"] == "2 nodes through elbencho's services (%s)" % hosts
    assert rows[("storage.elbencho_write_world", "b")]["status"] == "skip"
    text = markdown.render(io_tools_part(load_run(str(run))))
    assert "| shared | 2 nodes (elbencho's services, from a) |" in text, text
    # the same world where the tier refused O_DIRECT (the probe's io_mode): buffered writes without fsync measure
    # each node's page cache, shown and not judged
    copy = run / "artifacts" / "a" / "io_tools_run-shared.json"
    doc = json.loads(copy.read_text())
    art = Artifact("io_tools_run", "r", "a")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(storage_tier, "direct_io_supported",
                   lambda d: (False, "O_DIRECT open refused on %s: Invalid argument" % d))
        io_tools_run.io_mode(art, str(tier))
    doc["facts"]["io_mode"] = art.facts["io_mode"]
    copy.write_text(json.dumps(doc))
    [cached] = [r for r in grade_checks(run, {"storage.elbencho_write_world"}, ["a", "b"], run_id="r-elb")
                if r["host"] == "a"]
    assert cached["status"] == "skip" and cached["observed"] == mine["observed"] + " (page cache)", cached
    assert cached["reason"] == "not measured: the tier refused O_DIRECT (O_DIRECT open refused on %s: Invalid " \
                               "argument)" % tier


def test_a_node_whose_elbencho_service_does_not_start_is_named_and_nothing_is_left(tmp_path):
    """Host b's elbencho cannot bind its service port (it says so and exits): no master runs, the first host names b
    and the service's words, and a's service is stopped."""
    good = install_elbencho_standin(tmp_path / "bin-a")
    bad = install_elbencho_standin(tmp_path / "bin-b", broken=True)
    tier = tmp_path / "shared"
    tier.mkdir()
    first, second = _two_hosts(tmp_path, "r-elb2", {
        "tier": {"name": "shared", "path": str(tier), "shared": True}, "ranks": 1, "size_mib": 1,
        "tools": ["elbencho"], "launcher": "direct", "rdzv_timeout": 30, "service_start_s": 10,
        },
        paths={"a": "%s:/usr/bin:/bin" % good, "b": "%s:/usr/bin:/bin" % bad})
    # b's service is a fault of the run (the first host's error, graded error), not a test left out
    why = first["facts"]["elbencho_across_nodes"]
    assert why.startswith("not run: b: its service did not listen on port ") and why.endswith(
        "(exit 3): ERROR: Unable to bind service port"), why
    assert first["status"] == "error" and first["reason"] == "elbencho across nodes: %s" % why[len("not run: "):]
    assert second["status"] == "ok", second["reason"]
    assert not any("--hosts" in line for line in (good / "argv").read_text().splitlines())
    # no master ran: a's service is stopped at once, without waiting for a --quit that never comes
    assert first["facts"]["elbencho_service"] == "stopped: no master ran across the services"
    from graded_run import grade_checks  # noqa: PLC0415

    run = _run_dir(tmp_path, {h: tmp_path / h / "io_tools_run-shared.json" for h in ("a", "b")})
    (row,) = [r for r in grade_checks(run, {"storage.elbencho_write_world"}, ["a", "b"], run_id="r-elb2")
              if r["host"] == "a"]
    assert row["status"] == "error" and row["reason"] == why
    assert _running(good) == [] and _running(bad) == [] and list(tier.iterdir()) == []


def test_a_node_without_elbencho_is_named_and_the_others_stop_their_service_at_once(tmp_path):
    bin_dir = install_elbencho_standin(tmp_path / "bin")
    tier = tmp_path / "shared"
    tier.mkdir()
    first, second = _two_hosts(tmp_path, "r-elb3", {
        "tier": {"name": "shared", "path": str(tier), "shared": True}, "ranks": 1, "size_mib": 1,
        "tools": ["elbencho"], "launcher": "direct", "rdzv_timeout": 30},
        paths={"a": "%s:/usr/bin:/bin" % bin_dir, "b": "/usr/bin:/bin"})
    assert first["status"] == "ok" and second["status"] == "skipped", (first["reason"], second["reason"])
    assert first["facts"]["elbencho_across_nodes"] == "not run: b: elbencho is not installed"
    assert first["facts"]["elbencho_service"] == "stopped: no master ran across the services"
    assert "elbencho_service" not in second["facts"]
    assert _running(bin_dir) == [] and list(tier.iterdir()) == []


def test_elbencho_hosts_list_has_no_form_for_an_ipv6_address():
    from types import SimpleNamespace  # noqa: PLC0415

    from probes.storage.io_tools_run import _elbencho_hosts  # noqa: PLC0415

    states = [{"port": 11001}, {"port": 11002}]
    four = SimpleNamespace(addresses=["10.0.0.1", "node2"])
    assert _elbencho_hosts(four, states) == ("10.0.0.1:11001,node2:11002", None)
    six = SimpleNamespace(addresses=["fd00::1", "10.0.0.2"])
    assert _elbencho_hosts(six, states) == (None, "elbencho's --hosts takes no IPv6 address (fd00::1): give the "
                                                  "nodes names or IPv4 addresses")


def test_buffered_where_o_direct_is_refused_and_across_nodes_each_rank_reads_another_nodes_files():
    """Where O_DIRECT does not work (tmpfs before 6.6, some FUSE), the tools run buffered and the fact io_mode says
    so; across nodes IOR's -C and mdtest's -N (a node's worth of ranks) make each rank read what another node wrote."""
    params = {"size_mib": 4, "transfer_kib": 256, "files_per_rank": 50, "ranks": 8, "mpirun": "mpirun",
              "mpirun_args": []}
    assert "-B" not in command("ior", "ior", params, "/w", direct=False)
    assert "--direct" not in command("elbencho", "elbencho", params, "/w", direct=False)
    world = ["srun", "--ntasks-per-node", "8"]
    ior = command("ior", "ior", params, "/w", mpi=world, direct=True)
    assert "-C" in ior and "-B" not in ior  # across nodes -C reads another node's file: no O_DIRECT needed
    assert command("mdtest", "mdtest", params, "/w", mpi=world)[3:] == [
        "mdtest", "-n", "50", "-i", "1", "-u", "-N", "8", "-d", "/w/mdtest"]


def test_a_world_without_a_summary_names_the_rank_the_launcher_saw_fail(tmp_path):
    """An mdtest world across nodes that srun ended before its summary: the reason names the rank and host srun
    reported failing first (cc5's reason quoted only srun's last line, 'srun: Force Terminated StepId=15.0')."""
    from probes.artifact import Artifact
    from probes.common.command import CmdResult
    from probes.storage import io_tools_run

    said = (ROOT / "tests" / "fixtures" / "launchers" / "fault-exit3-srun-kill-on-bad-exit.txt").read_text()
    res = CmdResult(["srun", "mdtest"], 143, said, "", False, False)
    art = Artifact("io_tools_run", "r", "a")
    why = io_tools_run.run_tool(art, "mdtest", ["mdtest"], res, str(tmp_path), "m.n4.txt",
                                scope={"scope": "cluster", "nodes": 4}, launcher="srun")
    assert why.startswith("mdtest output, line ") and "no 'SUMMARY' table" in why
    assert why.endswith("(exit 143; srun: rank 1 on cmxl-node2 exited with status 3; rank 0 ended by srun after "
                        "that; output in m.n4.txt)")
    # a node's own run (no launcher across nodes) says what it said before
    own = io_tools_run.run_tool(art, "mdtest", ["mdtest"], res, str(tmp_path), "m.txt")
    assert own.endswith("(exit 143; output in m.txt)")


def test_numbers_of_a_tier_that_refused_o_direct_are_shown_not_judged(tmp_path, monkeypatch):
    """A tier that refused O_DIRECT (tmpfs before 6.6, some FUSE): IOR's read on one node reads each rank's own file
    back and elbencho writes without --direct or fsync, so both measure the page cache. storage.ior_read passed a
    FUSE tier's 24000 MiB/s read; now it and the elbencho writes are skips showing the number and why, while IOR's
    write (-e: fsync) and mdtest are judged as before."""
    from probes.artifact import Artifact
    from probes.common import tiers as storage_tier
    from probes.storage import io_tools_run
    from reports.grading import grade, load_rubric
    from reports.load import run_of_artifacts

    bin_dir = _all_stand_ins(tmp_path)
    doc, _ = _probe(tmp_path, bin_dir, size_mib=4, transfer_kib=256, files_per_rank=50)
    rubric = load_rubric()
    ids = ("storage.ior_write", "storage.ior_read", "storage.mdtest_file_create", "storage.elbencho_write")
    checks = dict(rubric, checks=[c for c in rubric["checks"] if c["id"] in ids])

    def rows(doc):
        return {r["check_id"]: r for r in grade(run_of_artifacts([doc]), checks) if r["check_id"] in ids}

    direct = rows(doc)
    assert {k: r["status"] for k, r in direct.items()} == dict.fromkeys(ids, "pass")
    # the probe's own words for a tier that refused it (io_mode, with the refusal tiers.direct_io_supported gives)
    monkeypatch.setattr(storage_tier, "direct_io_supported",
                        lambda d: (False, "O_DIRECT open refused on %s: Invalid argument" % d))
    art = Artifact("io_tools_run", "r", "n1")
    assert io_tools_run.io_mode(art, "/mnt/fuse") is False
    buffered = rows(dict(doc, facts=dict(doc["facts"], io_mode=art.facts["io_mode"])))
    for check_id in ("storage.ior_read", "storage.elbencho_write"):
        row = buffered[check_id]
        assert row["status"] == "skip" and row["observed"] == direct[check_id]["observed"] + " (page cache)", row
        assert row["reason"] == ("not measured: the tier refused O_DIRECT (O_DIRECT open refused on /mnt/fuse: "
                                 "Invalid argument)")
    assert buffered["storage.ior_write"]["status"] == buffered["storage.mdtest_file_create"]["status"] == "pass"
