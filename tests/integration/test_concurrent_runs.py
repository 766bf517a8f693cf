"""Two assessments of the same test hosts at the same time both finish with complete artifacts: their multi-host
probes meet on ports of their own run, write files of their own run, and leave nothing behind on the hosts."""

import json
import subprocess
import sys

import pytest
from helpers import BIN, ROOT, ansible_env, boot_seconds, run_dirs, stray_processes
from test_network import SWEEP

from probes.common.ports import BLOCK, port_for

pytestmark = pytest.mark.cluster

# Multi-host probes that listen on ports, one of each way of meeting: collectives (torch's TCPStore and gloo) and
# the fio sweep (the common rendezvous, and fio --server on every host, even on a tier of its own per host). TCP
# pairs, checkpoint and the metadata storm meet the same ways; the GPU-only probes skip here and add nothing.
TAGS = "network_collectives,storage_fio"
EXPECTED = {"node_info", "collectives", "fio_sweep-tmp"}
# What those probes derive their port blocks from (probes/common/ports.py: run id + purpose).
PURPOSES = ("collectives/", "fio_sweep/tmp")
# Enough fio to cross hosts (4 clients on 4 hosts), not the whole quick sweep: the storage phase has its own test.
FIO = {"storage_fio_clients": [1, 4], "storage_fio_workloads": ["seq_write_buffered", "seq_read_buffered"]}


def run_ids():
    """Two run ids whose port blocks are all different. Derived ports collide for two random run ids about once in
    590 per pair of probes running at the same moment: the test picks its ids so that it shows the mechanism (each
    run meets on its own ports) and never fails by that chance."""
    for n in range(1000):
        ids = ("20261201T000000Z-concurrent-a%d" % n, "20261201T000000Z-concurrent-b%d" % n)
        blocks = [port_for(i, p, span=BLOCK) for i in ids for p in PURPOSES]
        if len(set(blocks)) == len(blocks):
            return ids
    raise AssertionError("no two run ids with separate port blocks")


@pytest.fixture(scope="module")
def two_runs(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("concurrent")
    since = boot_seconds()
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    procs = {}
    for run, run_id in zip(("a", "b"), run_ids()):
        extra = {"assess_output_dir": str(tmp / run), "assess_profile": "quick", "assess_provider": "concurrent",
                 "assess_run_id": run_id,
                 "network_collectives_profiles": SWEEP,
                 "storage_tiers": [{"name": "tmp", "path": "/tmp", "shared": False}], **FIO}
        (tmp / ("%s.json" % run)).write_text(json.dumps(extra))
        argv = [str(BIN / "ansible-playbook"), "assess.yml", "-i", inventory, "--tags", TAGS,
                "-e", "@%s" % (tmp / ("%s.json" % run))]
        procs[run] = subprocess.Popen(argv, cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True)
    outputs = {run: proc.communicate(timeout=1500)[0] for run, proc in procs.items()}
    runs = {}
    for run, proc in procs.items():
        assert proc.returncode == 0, "run %s: %s" % (run, outputs[run][-5000:])
        [runs[run]] = run_dirs(tmp / run)
    return {"runs": runs, "hosts": sorted(h["name"] for h in test_cluster.hosts),
            "strays": stray_processes(test_cluster, since),
            "tmp": {h["name"]: test_cluster.exec(h["name"], ["ls", "-a", "/tmp"]).stdout for h in test_cluster.hosts}}


def test_both_runs_have_every_artifact_of_every_host_and_none_is_an_error(two_runs):
    a, b = two_runs["runs"]["a"], two_runs["runs"]["b"]
    assert a.name != b.name
    for run_dir in (a, b):
        assert sorted(p.name for p in (run_dir / "artifacts").iterdir()) == two_runs["hosts"]
        for host in two_runs["hosts"]:
            docs = {p.stem: json.loads(p.read_text()) for p in (run_dir / "artifacts" / host).glob("*.json")}
            assert EXPECTED <= set(docs), (run_dir.name, host, sorted(docs))
            errors = {name: doc["reason"] for name, doc in docs.items() if doc["status"] not in ("ok", "skipped")}
            assert not errors, (run_dir.name, host, errors)
            assert docs["collectives"]["status"] == "ok" and docs["fio_sweep-tmp"]["status"] == "ok"
            if host == two_runs["hosts"][0]:  # the driver: the sweep crossed hosts, 4 clients on the 4 of them
                clients = {r["labels"]["clients"] for r in docs["fio_sweep-tmp"]["results"]}
                assert clients == {1, 4}, clients
            assert {doc["run_id"] for doc in docs.values()} == {run_dir.name}
        assert (run_dir / "report" / "checks.csv").exists()


def test_the_runs_met_on_ports_of_their_own(two_runs):
    ports = {}
    for run, run_dir in two_runs["runs"].items():
        doc = json.loads((run_dir / "artifacts" / two_runs["hosts"][0] / "collectives.json").read_text())
        ports[run] = doc["facts"]["port"]
    assert ports["a"] != ports["b"]


def test_nothing_is_left_on_the_hosts(two_runs):
    assert two_runs["strays"] == {}
    for host, listing in two_runs["tmp"].items():
        assert "clustermax-assess-" not in listing, (host, listing)
