"""The tools step on fresh hosts of the SSH test cluster: no torch in the hosts' Python, packages missing.

One shared flow (module fixture), each run a real ansible-playbook over SSH:
1. assess.yml (quick; the tools step and the three performance phases) from hosts whose Python (/usr/bin/python3)
   has no torch: the probe venv is built from a wheelhouse on the controller with no index (this machine's torch
   2.13.0 CPU file and its dependencies), the missing Debian packages go in through ansible.builtin.package (from
   apt's cache, filled beforehand: the hosts have no route to a mirror, as at an air-gapped site), nccl-tests is
   built from a source tarball (tests/integration/tool_sources.py: nccl-tests' layout and flags) with nvcc 13.0 and
   NCCL from the nvidia-nccl-cu13 wheel, and nvbandwidth's stand-in fails to configure without Boost, a real
   failed build; IOR and mdtest are built from a release tarball (tool_sources.py: IOR's configure/make interface,
   the node's mpicc) and elbencho is installed from an archive in the layout of upstream's static release. gpu_compute,
   network and storage then run under the venv, and the storage phase runs IOR, mdtest and elbencho from the builds.
2. The tools step again: changed=0 on every host.
3. The copy path: per-host prefixes (each host's private /tmp), the first host builds, the others get a copy.
4. playbooks/uninstall.yml for both prefixes: the prefixes are gone, and so are the packages step 1 installed.

In the suite this runs on two of the four hosts and the three performance phases (about 5 minutes; the copy path
needs only one node that waits). CMXA_TOOLS_FULL=1 runs the issue's whole check instead: one `assess.yml -e
assess_profile=quick` over all four hosts, every phase (the burn-in cut to seconds, as in test_local_demo.py).
"""

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml
from helpers import BIN, ROOT, run_dirs, run_playbook
from tool_sources import (
    elbencho_static_archive,
    ior_like_tree,
    nccl_tests_like_tree,
    nvbandwidth_like_tree,
    tarball,
)

pytestmark = pytest.mark.cluster
SYSTEM_PYTHON = "/usr/bin/python3"
PACKAGES = yaml.safe_load((ROOT / "roles/tools/vars/main.yml").read_text())["tools_package_names"]
WANTED = yaml.safe_load((ROOT / "roles/tools/defaults/main.yml").read_text())["tools_packages_wanted"]
FULL = os.environ.get("CMXA_TOOLS_FULL") == "1"
SHORT_BURNIN = {"burnin_duration_s": 6, "burnin_fabric_duration_s": 3, "burnin_storage_phase_s": 2,
                "burnin_storage_size_mib": 16, "burnin_interval_s": 2, "burnin_poll_s": 2}
TOOL_MISSING = re.compile(r"not installed|not found|tools step|cannot be built", re.I)


def debian_installed(name):
    out = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Abbrev}", name], capture_output=True, text=True)
    return out.returncode == 0 and out.stdout.startswith("ii")


def recap(stdout):
    """{host: {ok, changed, failed, ...}} from ansible-playbook's PLAY RECAP."""
    out = {}
    for m in re.finditer(r"^(\S+)\s+:\s+((?:\w+=\d+\s*)+)$", stdout, re.M):
        out[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return out


def artifact(run_dir, host, name):
    return json.loads((run_dir / "artifacts" / host / ("%s.json" % name)).read_text())



def _apt_lists_age_s():
    """Seconds since this machine's apt lists were refreshed, as ansible.builtin.apt's cache_valid_time reads it
    (apt's update-success stamp where there is one, else the lists directory's mtime)."""
    stamp = "/var/lib/apt/periodic/update-success-stamp"
    path = stamp if os.path.exists(stamp) else "/var/lib/apt/lists"
    return time.time() - os.stat(path).st_mtime

@pytest.fixture(scope="module")
def fresh(test_cluster, tmp_path_factory):
    if not shutil.which("nvcc") or not Path(SYSTEM_PYTHON).exists():
        pytest.skip("needs nvcc (this machine kind has CUDA 13.0) and %s" % SYSTEM_PYTHON)
    tmp = tmp_path_factory.mktemp("tools")
    # What the hosts must see lives in the cluster's state directory: each host has a private /tmp.
    shared = Path(test_cluster.state_dir) / "tools-test"
    shutil.rmtree(shared, ignore_errors=True)
    shared.mkdir(parents=True)
    wheelhouse = tmp / "wheelhouse"
    # torch, and what the tools step adds beside it by default (tools_venv_packages: datagen's numpy, av, pyarrow)
    subprocess.run([str(BIN / "pip"), "download", "-q", "torch==2.13.0", "numpy", "av", "pyarrow", "-d",
                    str(wheelhouse)], check=True, timeout=600)
    nccl_wheel = tmp / "nccl-wheel"
    subprocess.run([str(BIN / "pip"), "download", "-q", "--no-deps", "nvidia-nccl-cu13", "-d", str(nccl_wheel)],
                   check=True, timeout=600)
    with zipfile.ZipFile(next(nccl_wheel.glob("*.whl"))) as whl:
        whl.extractall(shared / "nccl-wheel", [n for n in whl.namelist() if n.startswith("nvidia/nccl/")])
    nccl_home = shared / "nccl-wheel" / "nvidia" / "nccl"
    sources = {"nccl_tests": {"tarball": str(tarball(nccl_tests_like_tree(tmp / "nccl-tests-2.17.8"),
                                                     tmp / "nccl-tests-2.17.8.tar.gz"))},
               "nvbandwidth": {"tarball": str(tarball(nvbandwidth_like_tree(tmp / "nvbandwidth-0.8"),
                                                      tmp / "nvbandwidth-0.8.tar.gz"))},
               "ior": {"tarball": str(tarball(ior_like_tree(tmp / "ior-4.0.0"), tmp / "ior-4.0.0.tar.gz"))},
               "elbencho": {"tarball": str(elbencho_static_archive(tmp / "elbencho-static-x86_64.tar.gz"))}}
    names = sorted({n for tool in WANTED for n in PACKAGES[tool]["debian"]})
    before = {n: debian_installed(n) for n in names}
    if not all(before.values()):
        # the hosts cannot reach a Debian mirror: the packages (and what they need) wait in apt's cache
        subprocess.run(["apt-get", "install", "-y", "-qq", "--download-only"] + [n for n in names if not before[n]],
                       check=True, timeout=900, capture_output=True)
    prefix = shared / "prefix"
    inventory = test_cluster.write_inventory(str(tmp / "fresh.ini"), python=SYSTEM_PYTHON, extra_group_vars={
        "assess_python": None, "assess_install_tools": "true"})
    # vLLM's venv (tools_inference) is test_inference.py's: its wheels are not in this wheelhouse
    extra = {"assess_tools_prefix": str(prefix), "assess_wheelhouse": str(wheelhouse), "assess_sources": sources,
             "tools_inference": False,
             "tools_nccl_home": str(nccl_home), "preflight_python_candidates": [SYSTEM_PYTHON],
             "assess_profile": "quick",
             # one private tier (the storage phase's own test discovers them): this test is about the tools
             "storage_tiers": [{"name": "scratch", "path": "/tmp", "shared": False}]}
    out = tmp / "runs"
    hosts = sorted(h["name"] for h in test_cluster.hosts)[:4 if FULL else 2]
    limit = ("--limit", ",".join(hosts))
    first = ("-e", json.dumps(SHORT_BURNIN)) if FULL else ("--tags", "tools,gpu_compute,network,storage")
    runs = {"apt_lists_age_s": _apt_lists_age_s()}  # before the step could refresh them
    try:
        t0 = time.monotonic()
        res = run_playbook(inventory, "-e", json.dumps(dict(extra, assess_output_dir=str(out / "first"))), *limit,
                           *first, timeout=1800)
        runs["first"] = {"res": res, "seconds": time.monotonic() - t0, "run_dir": run_dirs(out / "first")[-1]}
        assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
        t0 = time.monotonic()
        res = run_playbook(inventory, "-e", json.dumps(dict(extra, assess_output_dir=str(out / "second"))),
                           "--tags", "tools", *limit, timeout=900)
        runs["second"] = {"res": res, "seconds": time.monotonic() - t0, "run_dir": run_dirs(out / "second")[-1]}
        # each host's own /tmp: prefixes that no two hosts share, so the copy path runs
        copy_extra = dict(extra, assess_tools_prefix="/tmp/cmxa-tools", tools_venv=False,
                          tools_system_packages=False, assess_output_dir=str(out / "copy"))
        res = run_playbook(inventory, "-e", json.dumps(copy_extra), "--tags", "tools", *limit, timeout=900)
        runs["copy"] = {"res": res, "run_dir": run_dirs(out / "copy")[-1]}
        runs["copy_listing"] = {h: test_cluster.exec(h, ["ls", "-R", "/tmp/cmxa-tools/build"]).stdout for h in hosts}
    finally:
        # uninstall runs whatever happened above: nothing of the test is left on the machine
        runs["uninstall"] = run_playbook(inventory, "-e", json.dumps(extra), *limit, playbook="playbooks/uninstall.yml")
        runs["uninstall_copy"] = run_playbook(inventory, "-e", json.dumps({"assess_tools_prefix": "/tmp/cmxa-tools"}),
                                              *limit, playbook="playbooks/uninstall.yml")
        runs["left_in_tmp"] = {h: test_cluster.exec(h, ["ls", "/tmp"]).stdout for h in hosts}
    runs.update(hosts=hosts, before=before, prefix=prefix,
                installed_after_uninstall={n: debian_installed(n) for n in names})
    print("tools test: first run %.0f s, second %.0f s" % (runs["first"]["seconds"], runs["second"]["seconds"]),
          file=sys.stderr)
    return runs


def test_fresh_hosts_get_the_venv_the_packages_and_the_builds(fresh):
    run_dir = fresh["first"]["run_dir"]
    for host in fresh["hosts"]:
        venv = artifact(run_dir, host, "tools_venv")
        assert venv["status"] == "ok", venv["reason"]
        assert venv["facts"]["variant"] == "cpu" and venv["facts"]["installed_torch"] == "2.13.0+cpu"
        assert venv["facts"]["reused"] or "--no-index --find-links" in venv["facts"]["pip"]
        before = artifact(run_dir, host, "tools_detect-before")["facts"]
        after = artifact(run_dir, host, "tools_detect-after")["facts"]
        assert before["python"]["torch"] is None  # the fresh host's Python had no torch
        # every package is there now, and what was missing before was installed by the step
        assert all(rec["installed"] for rec in after["packages"].values()), after["packages"]
        assert set(before["missing_packages"]) == {n for n, had in fresh["before"].items() if not had}
        # apt's lists were refreshed first (a fresh node's are empty or stale). Here the refresh failed (no route to
        # a mirror; or apt's lock, held by another test host's refresh: they share this machine's /var/lib/apt), was
        # recorded, and the install went on from the cache filled beforehand; or, within the hour after this
        # machine's own `apt-get update` (make sysdeps on a fresh machine, as in CI), the module found the lists
        # fresh (cache_valid_time 3600) and left them: no failure and nothing to say
        refresh = after["package_step"]["refresh"]
        assert refresh["ran"]
        if refresh["failed"]:
            assert "apt cache" in refresh["msg"] or "lock" in refresh["msg"], refresh
        else:
            assert refresh["msg"] == "" and fresh["apt_lists_age_s"] < 3600, (refresh, fresh["apt_lists_age_s"])
        builds = after["package_step"]["builds"]
        assert builds["nccl_tests"]["state"] in ("built", "present")
        assert builds["nccl_tests"]["binaries"] == ["all_gather_perf", "all_reduce_perf"]
        assert any("MPI=1" in step for step in [builds["nccl_tests"].get("command") or "MPI=1"])
        assert builds["rccl_tests"]["state"] == "not_applicable"
        # a real failed build: nvbandwidth's stand-in needs Boost program_options, which this CPU host lacks
        assert builds["nvbandwidth"]["state"] == "failed"
        assert "cmake -S" in builds["nvbandwidth"]["command"] and "Boost" in builds["nvbandwidth"]["tail"]
        assert "tools_nvbandwidth" in after["assess_tools"]["missing"]["nvbandwidth"]
        assert after["assess_tools"]["python"] == venv["facts"]["python"]
    # one build for the shared prefix: the first host built it, the others found it by its key
    states = [artifact(run_dir, h, "tools_detect-after")["facts"]["package_step"]["builds"]["nccl_tests"]["state"]
              for h in fresh["hosts"]]
    assert states.count("built") == 1, states
    built = artifact(run_dir, fresh["hosts"][0], "tools_detect-after")["facts"]["package_step"]["builds"]
    assert "MPI=1" in built["nccl_tests"]["command"] and "NCCL_HOME=" in built["nccl_tests"]["command"]
    md = (run_dir / "report" / "report.md").read_text()
    assert "## Tools" in md and "probe venv" in md and "| nccl_tests | built |" in md


def test_the_phases_run_under_the_venv_with_no_tool_missing_skip(fresh):
    run_dir = fresh["first"]["run_dir"]
    seen = 0
    for host in fresh["hosts"]:
        for path in sorted((run_dir / "artifacts" / host).glob("*.json")):
            doc = json.loads(path.read_text())
            if doc["probe"].startswith("tools_") or doc["probe"] == "node_info":
                continue
            seen += 1
            assert not TOOL_MISSING.search(doc.get("reason") or ""), (host, doc["probe"], doc["reason"])
            if doc["device"].get("torch"):
                assert doc["device"]["torch"] == "2.13.0+cpu"
    assert seen >= len(fresh["hosts"]) * 8
    # the probes ran under the venv's Python (the hosts' own has no torch), a venv whose key names the Python, the
    # CPU architecture and the OS (a shared prefix keeps nodes of other kinds apart)
    for host in fresh["hosts"]:
        assert artifact(run_dir, host, "gemm")["device"]["torch"] == "2.13.0+cpu"
        key = artifact(run_dir, host, "tools_venv")["facts"]["key"]
        assert re.fullmatch(r"py3\.\d+-%s-[a-z]+[\d.]+-torch2\.13\.0-cpu" % re.escape(platform.machine()), key), key


def test_ior_mdtest_and_elbencho_are_built_then_run_by_the_storage_phase(fresh):
    run_dir = fresh["first"]["run_dir"]
    first = fresh["hosts"][0]
    builds = artifact(run_dir, first, "tools_detect-after")["facts"]["package_step"]["builds"]
    assert builds["ior"]["state"] == "built" and builds["ior"]["binaries"] == ["ior", "mdtest"], builds["ior"]
    assert "/configure --prefix=" in builds["ior"]["command"] and "MPICC=" in builds["ior"]["command"]
    assert builds["elbencho"]["state"] == "built", builds["elbencho"]
    assert builds["elbencho"]["command"] == "installed the release's executable (elbencho)"
    for host in fresh["hosts"]:
        doc = artifact(run_dir, host, "io_tools_run-scratch")
        assert doc["status"] == "ok", (host, doc["reason"])
        res = {(r["metric"], r["labels"]["operation"]): r["value"] for r in doc["results"]}
        # IOR's and mdtest's stand-in measured this host's /tmp (2 ranks); elbencho's prints a real capture
        assert res[("ior_bw_mib_s", "write")] > 0 and res[("ior_bw_mib_s", "read")] > 0
        assert res[("mdtest_ops_per_s", "file_creation")] > 0 and doc["facts"]["ior_version"] == "standin"
        assert res[("elbencho_bw_mib_s", "write")] == 4831.0
        # from the tools step's prefix (on PATH), IOR and mdtest under mpirun with the quick profile's 2 ranks
        assert re.match(r"ran: \S*mpirun -np 2 .*%s/build/ior/\w+/bin/ior " % fresh["prefix"], doc["facts"]["ior"])
        assert "/build/elbencho/" in doc["facts"]["elbencho"]
        assert doc["facts"]["across_nodes"].startswith("not run: tier scratch is not shared")


def test_the_second_run_changes_nothing(fresh):
    res = fresh["second"]["res"]
    assert res.returncode == 0, res.stdout[-4000:]
    totals = recap(res.stdout)
    assert set(fresh["hosts"]) <= set(totals)
    assert all(totals[h]["changed"] == 0 for h in fresh["hosts"]), totals
    for host in fresh["hosts"]:
        assert artifact(fresh["second"]["run_dir"], host, "tools_venv")["facts"]["reused"] is True


def test_one_build_is_copied_to_the_nodes_of_the_same_image(fresh):
    res = fresh["copy"]["res"]
    assert res.returncode == 0, res.stdout[-4000:]
    run_dir = fresh["copy"]["run_dir"]
    first, *others = fresh["hosts"]
    assert artifact(run_dir, first, "tools_build")["facts"]["builds"]["nccl_tests"]["state"] == "built"
    for host in others:
        assert artifact(run_dir, host, "tools_build")["facts"]["builds"]["nccl_tests"]["state"] == "waiting"
        copied = artifact(run_dir, host, "tools_build-copied")["facts"]["builds"]["nccl_tests"]
        assert copied["state"] == "copied" and copied["binaries"] == ["all_gather_perf", "all_reduce_perf"]
        ior = artifact(run_dir, host, "tools_build-copied")["facts"]["builds"]["ior"]
        assert ior["state"] == "copied" and ior["binaries"] == ["ior", "mdtest"]
    for host in fresh["hosts"]:
        assert "all_reduce_perf" in fresh["copy_listing"][host]  # each host's private /tmp has its own copy
    assert not (run_dir / ".tools-copy").exists()


def test_uninstall_leaves_nothing_behind(fresh):
    for key in ("uninstall", "uninstall_copy"):
        assert fresh[key].returncode == 0, fresh[key].stdout[-3000:]
    assert not fresh["prefix"].exists()
    for host, listing in fresh["left_in_tmp"].items():
        assert "cmxa-tools" not in listing and "clustermax-assess-" not in listing, (host, listing)
    # what the step installed is gone again; what was there before stays
    assert fresh["installed_after_uninstall"] == fresh["before"]
