"""probes/storage/io_tools_run.py: IOR, mdtest and elbencho where a node has them, none where it has not. The tools
are not packaged for the test machines; here each is a stand-in on PATH that records its command line and prints a
real capture (tests/fixtures/io_tools/), so what is tested is the probe's plumbing: the command lines, the outputs
read into results, an unreadable output named, the raw outputs kept and the test directory removed."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "io_tools"


def _stand_in(bin_dir, tool, capture, rc=0):
    """bin_dir/tool: appends its argv to bin_dir/argv, prints the capture."""
    path = bin_dir / tool
    path.write_text("#!/bin/sh\necho \"%s $*\" >> %s/argv\ncat %s\nexit %d\n" % (tool, bin_dir, capture, rc))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


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
    assert doc["reason"] == ("none of ior, mdtest, elbencho is installed on this node: install them (the tools step "
                             "does not build them yet)")
    assert doc["facts"]["ior"].startswith("not run: ior is not installed on this node")
    assert doc["facts"]["across_nodes"].startswith("not implemented:")


def test_each_installed_tool_runs_and_its_output_becomes_results(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, capture in (("ior", "ior-3.3.0-posix-fpp-C-e-lustre-exascaler-azure.txt"),
                          ("mdtest", "mdtest-3.3.0-64tasks-8nodes-long-nodemap-lustre-exascaler-gcp.txt"),
                          ("elbencho", "elbencho-2.1-0-multihost-4hosts-mkdirs-write-direct-resfile.txt")):
        _stand_in(bin_dir, tool, FIXTURES / tool / capture)
    doc, tier = _probe(tmp_path, bin_dir, size_mib=4, transfer_kib=256, files_per_rank=50)
    assert doc["status"] == "ok", doc["reason"]
    res = {(r["metric"], r["labels"].get("operation")): r["value"] for r in doc["results"]}
    assert res[("ior_bw_mib_s", "write")] == 1842.29 and res[("ior_bw_mib_s", "read")] == 2316.13
    assert res[("mdtest_ops_per_s", "file_creation")] == 19186.06
    assert res[("elbencho_bw_mib_s", "write")] == 4831.0
    assert {r["labels"]["scope"] for r in doc["results"]} == {"node"}
    work = tier / "clustermax-assess-storage-r-io" / "io_tools" / "n1"
    argv = (bin_dir / "argv").read_text().splitlines()
    assert argv[0] == "ior -a POSIX -F -w -r -C -e -i 1 -t 256k -b 4m -o %s/ior/testfile" % work
    assert argv[1] == "mdtest -n 50 -i 1 -u -d %s/mdtest" % work
    assert argv[2] == ("elbencho --mkdirs --write --read --delfiles --deldirs --threads 1 --dirs 1 --files 1 "
                       "--size 4m --block 256k --nolive %s/elbencho" % work)
    assert doc["facts"]["ior_version"] == "3.3.0" and doc["facts"]["mdtest_version"] == "3.3.0"
    assert sorted(doc["raw"]) == ["io_tools_run-scratch.%s.txt" % t for t in ("elbencho", "ior", "mdtest")]
    assert not work.exists()  # the test directory is gone


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
    import shutil  # noqa: PLC0415

    from reports.build import evaluate  # noqa: PLC0415

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, capture in (("ior", "ior-4.0.0rc1-mpiio-noncontig-showHints-5iter.txt"),
                          ("mdtest", "mdtest-1.9.3-verbose-v-96tasks-gpfs-2iter.txt")):
        _stand_in(bin_dir, tool, FIXTURES / tool / capture)
    doc, _ = _probe(tmp_path, bin_dir, tools=["ior", "mdtest"])
    run = tmp_path / "run"
    (run / "artifacts" / "n1").mkdir(parents=True)
    shutil.copy(tmp_path / "out" / "io_tools_run-scratch.json", run / "artifacts" / "n1")
    (run / "assess_run.json").write_text(json.dumps({"id": "r-io", "hosts": ["n1"], "profile": "quick"}))
    _, rows, _ = evaluate(str(run))
    got = {(r["check_id"], r["subject"]): (r["status"], r["observed"]) for r in rows
           if r["check_id"] in ("storage.io_tools_ran", "storage.ior_write", "storage.ior_read",
                                "storage.mdtest_file_create", "storage.elbencho_write")}
    assert got[("storage.io_tools_ran", "tier=scratch")][0] == "pass"
    # IOR 4.0.0rc1's 103.24 MiB/s write: above the floor, below the warn line
    assert got[("storage.ior_write", "tier=scratch")] == ("warn", "103.24 MiB/s")
    assert got[("storage.mdtest_file_create", "tier=scratch")] == ("fail", "113.827 ops/s")
    assert got[("storage.ior_read", "")][0] == "skip"  # the capture wrote only
    assert got[("storage.elbencho_write", "")] == ("skip", "")
