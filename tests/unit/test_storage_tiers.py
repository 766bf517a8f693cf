"""probes/storage/storage_tiers.py: the tiers the storage phase tests when none are given. Two real probe processes on
this machine (every filesystem here is the same for both: every tier is shared) meet in the run's store; and what
the probe makes of nodes that see different things (the 4-host test cluster's private /tmp is in
tests/integration/test_storage.py)."""

import json
import os
import subprocess
import sys
from pathlib import Path

from free_ports import free_port

from probes.storage.storage_tiers import MARKERS, run_tiers

ROOT = Path(__file__).resolve().parents[2]


def _two_nodes(tmp_path):
    procs, port = [], free_port()
    for rank, host in enumerate(["a", "b"]):
        params = {"hosts": ["a", "b"], "addresses": ["127.0.0.1"] * 2, "rank": rank, "port": port,
                  "rdzv_timeout": 60}
        procs.append(subprocess.Popen([sys.executable, "-m", "probes", "storage_tiers", "--out", str(tmp_path / host),
                                       "--host", host, "--run-id", "r-tiers", "--params", json.dumps(params)],
                                      cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
    return {h: json.loads((tmp_path / h / "storage_tiers.json").read_text()) for h in ("a", "b")}


def test_two_nodes_on_one_machine_share_every_tier_and_leave_no_marker(tmp_path):
    docs = _two_nodes(tmp_path)
    a, b = docs["a"], docs["b"]
    assert a["status"] == b["status"] == "ok", (a.get("reason"), b.get("reason"))
    mine = json.loads(a["facts"]["tiers"])
    names = [t["name"] for t in mine]
    assert names[0] == "home" and mine[0]["path"] == os.path.realpath(os.path.expanduser("~"))
    # both computed the same tiers of the run: every tier of this machine, each shared by the two
    assert a["facts"]["run_tiers"] == b["facts"]["run_tiers"]
    run = json.loads(a["facts"]["run_tiers"])
    assert [t["name"] for t in run] == names and all(t["shared"] for t in run)
    assert json.loads(a["facts"]["seen"]) == {t["path"]: ["a", "b"] for t in mine}
    assert {(r["labels"]["tier"], r["value"]) for r in a["results"]} == {(n, 2) for n in names}
    for tier in mine:
        assert not [p for p in os.listdir(tier["path"]) if p.startswith(MARKERS)], tier


def test_a_private_tier_is_not_shared_and_a_tier_some_nodes_lack_is_left_out():
    """What three nodes report when /scratch is local NVMe on two of them and /tmp is each node's own."""
    home = {"name": "home", "path": "/home/u", "fstype": "nfs4", "mount_point": "/home"}
    tmp = {"name": "tmp", "path": "/tmp", "fstype": "tmpfs", "mount_point": "/tmp"}
    scratch = {"name": "scratch", "path": "/scratch", "fstype": "xfs", "mount_point": "/scratch"}
    hosts = ["n1", "n2", "n3"]
    found = [{"tiers": [home, scratch, tmp], "seen": {"/home/u": hosts, "/scratch": ["n1"], "/tmp": ["n1"]}},
             {"tiers": [home, tmp], "seen": {"/home/u": hosts, "/tmp": ["n2"]}},
             {"tiers": [home, scratch, tmp], "seen": {"/home/u": hosts, "/scratch": ["n3"], "/tmp": ["n3"]}}]
    tiers, left_out = run_tiers(hosts, found)
    assert [(t["name"], t["shared"]) for t in tiers] == [("home", True), ("tmp", False)]
    assert left_out == {"scratch": "/scratch is not on every node: only on n1, n3"}
    # a tier the first node lacks is named too
    tiers, left_out = run_tiers(hosts[1:], found[1:])
    assert [t["name"] for t in tiers] == ["home", "tmp"]
    assert left_out == {"scratch": "/scratch is not on every node: not on n2"}
