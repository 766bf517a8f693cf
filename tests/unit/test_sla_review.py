"""The monthly review end to end, offline: store + Slurm + provider log -> files, evidence and manifest."""

import csv
import hashlib
import json
import os
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest
from run_dirs import unpack_recorded_run

from reports.sla import review as rv
from reports.sla.store import append_round
from reports.sla.timeutil import US, iso_utc, parse_time

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
UP = (FIX / "healthprobe" / "cpu_only.txt").read_text()
NODES = ["gpu001", "gpu002", "gpu003", "gpu004"]
CONTRACT = {"provider": "acme", "tier": "silver", "system": "hgx", "timezone": "UTC",
            "nodes": [{"name": n, "rack": "r1"} for n in NODES]}
# By hand (November: 2,592,000 s; silver: target 99.5 %, 10 % below it, 25 % below 99 %):
EXPECTED_DOWN_S = {
    "gpu001": 21963,  # sacctmgr: down since 2026-11-29T23:30:00, still open at the export 2026-11-30T05:36:03
    "gpu002": 9919 + 600,  # sacctmgr drain 14:02:11-16:47:30 on 3 Nov + the probe: down at 10:05 and 10:10 on 10 Nov
    "gpu003": 10800,  # sacctmgr 22:15-01:15
    "gpu004": 1800,  # provider log: 1 h down, half of it in announced physical maintenance; alice's drain ignored
}


@pytest.fixture(scope="module")
def reviewed(tmp_path_factory):
    base = tmp_path_factory.mktemp("sla")
    db = str(base / "runs" / "acme" / "sla" / "healthprobe.sqlite")
    for minute in (0, 5, 10, 15):
        down = ("gpu002",) if minute in (5, 10) else ()
        append_round(db, {"started_at": "2026-11-10T10:%02d:00Z" % minute, "interval_s": 300,
                          "hosts": {h: ({"unreachable": True, "msg": "ssh: connect to host: Connection refused"}
                                        if h in down else {"rc": 0, "stdout": UP}) for h in NODES}})
    log = base / "noc.csv"
    log.write_text("start,end,target,kind,reason,announced_at\n"
                   "2026-11-15T00:00:00+01:00,2026-11-15T01:00:00+01:00,gpu004,down,PSU,\n"
                   "2026-11-15T00:30:00+01:00,2026-11-15T01:30:00+01:00,gpu004,physical_maintenance,PSU swap,"
                   "2026-11-01T00:00:00Z\n")
    out_root = str(base / "runs" / "acme" / "sla")
    sources = dict(store_path=db, imports=[str(log)], ignore_users=["alice"],
                   slurm_files=[{"format": "sacctmgr", "path": str(FIX / "slurm" / "sla" / "sacctmgr_event.txt"),
                                 "observed_at": "2026-11-30T05:36:03Z"}])
    result, out = rv.run("2026-11", CONTRACT, out_root, now=parse_time("2026-12-01T06:00:00Z"), **sources)
    return result, Path(out), out_root, sources


def test_availability_and_credits_by_hand(reviewed):
    result, out, _, _ = reviewed
    down = {n.name: n.down_us / 1e6 for n in result.nodes}
    assert down == EXPECTED_DOWN_S
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes"]["gpu001"]["credit_pct"] == 10 and summary["nodes"]["gpu001"]["meets_target"] is False
    assert all(summary["nodes"][n]["credit_pct"] == 0 for n in NODES[1:])
    assert summary["cluster_credit_pct"] == 2.5  # 10 % of one node in four
    assert result.cluster_availability == 1 - Fraction(sum(EXPECTED_DOWN_S.values()), 4 * 2592000)
    # The sacctmgr export (05:36:03 on the 30th) is the last any source saw of the nodes: the month's last
    # 18 h 23 min 57 s no source observed. Counted, the cluster meets 99.5 %; had that time been down, 97.0097 %:
    # undetermined, not met (was True), and every credit is a range up to 25 % (gpu001's open RMA included).
    assert summary["cluster_met_target"] is None and summary["partial"] is False
    assert all(summary["nodes"][n]["unobserved_s"] == 66237 for n in NODES)
    assert summary["cluster_undetermined"].endswith("cluster availability between 97.0097 % and 99.5651 %")
    assert summary["cluster_credit_worst_pct"] == 25 and summary["nodes"]["gpu001"]["credit_worst_pct"] == 25
    assert [n for n in NODES if summary["nodes"][n]["meets_target"] is None] == ["gpu002", "gpu003", "gpu004"]
    with open(out / "credits.csv") as fh:
        credits = {r["node"]: r for r in csv.DictReader(fh)}
    assert credits["gpu001"]["credit_pct_of_node_fee"] == "10 to 25" and credits["(cluster, GPU-weighted)"][
        "credit_pct_of_node_fee"] == "2.5 to 25"


def test_every_downtime_interval_names_its_evidence(reviewed):
    _, out, _, _ = reviewed
    with open(out / "downtime.csv") as fh:
        rows = list(csv.DictReader(fh))
    with open(out / "events.csv") as fh:
        events = {r["id"]: r for r in csv.DictReader(fh)}
    assert rows and all(r["evidence"] for r in rows)
    assert all(e in events for r in rows for e in r["evidence"].split())
    probe = [r for r in rows if r["node"] == "gpu002" and r["start"] == "2026-11-10T10:05:00Z"]
    assert len(probe) == 1 and probe[0]["end"] == "2026-11-10T10:15:00Z" and probe[0]["duration_s"] == "600.0"
    [ev_id] = probe[0]["evidence"].split()
    evidence = json.loads(events[ev_id]["evidence"])
    assert len(evidence["samples"]) == 2 and evidence["up_at"] == "2026-11-10T10:15:00Z"
    assert "Connection refused" in events[ev_id]["reason"]
    with open(out / "exclusions.csv") as fh:
        assert [r["verdict"] for r in csv.DictReader(fh)] == ["excluded"]


def test_manifest_hashes_every_input_and_output(reviewed):
    _, out, _, _ = reviewed
    manifest = json.loads((out / "manifest.json").read_text())
    inputs = {item["path"] for item in manifest["inputs"]}
    assert {"inputs/contract.json", "inputs/sla_tiers.yml", "inputs/params.json", "inputs/healthprobe_samples.csv",
            "inputs/history.json", "inputs/imports/01-noc.csv", "inputs/slurm/01-sacctmgr_event.txt"} <= inputs
    for item in manifest["inputs"] + manifest["outputs"]:
        assert hashlib.sha256((out / item["path"]).read_bytes()).hexdigest() == item["sha256"], item["path"]
    sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=out, capture_output=True, text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    assert {"review.md", "review.html", "availability.csv", "credits.csv", "downtime.csv"} <= {
        item["path"] for item in manifest["outputs"]}


def test_the_review_renders(reviewed):
    _, out, _, _ = reviewed
    md = (out / "review.md").read_text()
    for heading in ("# SLA review", "## Availability", "## Credits", "## Breaches", "## Downtime and its evidence",
                    "## Exclusions", "## Sources", "## Events"):
        assert heading in md
    assert "| gpu001 | r1 | 8 | 2592000 |" in md and "cluster credit: **2.5 to 25 %**" in md
    assert "health-probe coverage below 90 %" in md  # four 5-minute rounds cover little of a month: said so
    page = (out / "review.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") >= 6 and "class='no'" in page


def test_recomputed_from_its_inputs_alone(reviewed, tmp_path):
    _, out, _, _ = reviewed
    result = rv.rerun_from_inputs(str(out / "inputs"), str(tmp_path))
    assert {n.name: n.down_us / 1e6 for n in result.nodes} == EXPECTED_DOWN_S
    for name in ("availability.csv", "credits.csv", "downtime.csv", "events.csv"):
        assert (tmp_path / name).read_bytes() == (out / name).read_bytes(), name


def test_a_second_review_replaces_the_month_and_counts_consecutive_misses(reviewed):
    result, out, out_root, sources = reviewed
    again, out2 = rv.run("2026-11", CONTRACT, out_root, now=parse_time("2026-12-01T07:00:00Z"), **sources)
    # the month directory was replaced as a whole: no second copy, no temporary directory left behind
    assert Path(out2) == out and [d for d in os.listdir(out_root) if os.path.isdir(os.path.join(out_root, d))] == [
        "2026-11"]
    assert again.cluster_availability == result.cluster_availability
    # December: the cluster misses the target (a 2-day outage); gold needs two misses in a row, silver three
    contract = {**CONTRACT, "tier": "silver"}
    log = Path(out_root).parent / "dec.csv"
    log.write_text("start,end,target\n2026-12-02T00:00:00Z,2026-12-05T00:00:00Z,gpu001\n"
                   "2026-12-02T00:00:00Z,2026-12-05T00:00:00Z,gpu002\n")
    dec, _ = rv.run("2026-12", contract, out_root, now=parse_time("2027-01-01T06:00:00Z"), imports=[str(log)])
    assert dec.cluster_availability * 100 < 99.5 and not [t for t in dec.triggers if t["trigger"] == "consecutive"]
    history = json.loads((Path(out_root) / "2026-12" / "inputs" / "history.json").read_text())
    assert history == {"2026-11": None}  # undetermined (was True): a miss in the worst case


def test_the_review_command(reviewed, tmp_path):
    _, out, _, _ = reviewed
    proc = subprocess.run([sys.executable, "-m", "reports.sla", "review", "--from-inputs", str(out / "inputs"),
                           "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1, proc.stderr  # gpu001 breached the target: findings
    doc = json.loads(proc.stdout)
    assert doc["breaches"] == 1 and doc["down_s"]["gpu001"] == 21963
    bad = subprocess.run([sys.executable, "-m", "reports.sla", "review", "--contract", "-", "--out-root",
                          str(tmp_path / "x"), "--month", "2026-13"], input=json.dumps(CONTRACT),
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "YYYY-MM" in bad.stderr


def probe_round(db, at, down=(), hosts=NODES, slurm=None, msg="ssh: connect to host: Connection timed out",
                interval_s=300, stdout=None):
    """One health-probe round as the sla role appends it: every host's registered result, the Slurm snapshot.
    stdout: {host: what the probe command printed there}, else the cpu_only recording."""
    append_round(db, {"started_at": at, "interval_s": interval_s, "slurm": slurm,
                      "hosts": {h: {"unreachable": True, "msg": msg} if h in down
                                else {"rc": 0, "stdout": (stdout or {}).get(h, UP)} for h in hosts}})


def test_a_month_with_the_assessments_reboots_excludes_them(tmp_path):
    """The recorded run (tests/fixtures/assessment_run, December 2026, used as recorded) rebooted cmxbl-node2 and
    cmxbl-node3 and injected a fault into cmxbl-node4; the 5-minute probe caught both reboots at 20:39:15."""
    provider = tmp_path / "runs" / "baseline"
    run = unpack_recorded_run(provider)
    hosts = ["cmxbl-node%d" % i for i in range(1, 5)]
    db = str(provider / "sla" / "healthprobe.sqlite")
    for at, down in (("20:34:15", ()), ("20:39:15", ("cmxbl-node2", "cmxbl-node3")), ("20:44:15", ())):
        probe_round(db, "2026-12-01T%sZ" % at, down, hosts, msg="ssh: connect to host: Connection refused")
    contract = {**CONTRACT, "provider": "baseline", "nodes": hosts}
    now = parse_time("2027-01-01T06:00:00Z")
    result, out = rv.run("2026-12", contract, str(provider / "sla"), now=now, store_path=db,
                         assessment_dir=str(provider))
    by = {n.name: n for n in result.nodes}
    assert {n: by[n].down_us for n in hosts} == dict.fromkeys(hosts, 0)
    # each test's window: from the drain (reboot) or the injection to the batch's record of the node
    assert {n: by[n].excluded_us for n in hosts} == {"cmxbl-node1": 0, "cmxbl-node2": 13_402_000,
                                                    "cmxbl-node3": 13_165_000, "cmxbl-node4": 7_159_000}
    assert [(r["target"], r["kind"], r["verdict"], r["why"]) for r in result.exclusions] == [
        (h, "assessment", "excluded", "assessment: needs no announcement")
        for h in ("cmxbl-node2", "cmxbl-node3", "cmxbl-node4")]
    # the probe's down sample stands for the node only until the test ended; then unknown until the next round
    probe = next(e for e in result.events if e.source == "healthprobe" and e.target == "cmxbl-node2")
    assert (iso_utc(probe.start), iso_utc(probe.end)) == ("2026-12-01T20:39:15Z", "2026-12-01T20:39:22.594000Z")
    assert result.downtime == []
    staged = Path(out, "inputs", "assessment", run.name, "artifacts")
    assert (staged / "cmxbl-node1" / "sched_watch-reboot-b1.jsonl").exists()
    assert not list(staged.rglob("gemm*")) and not list(staged.rglob("burnin*"))
    assert rv.rerun_from_inputs(str(Path(out, "inputs")), str(tmp_path / "again")).downtime == []
    # the same month without the assessment's records: each reboot costs the provider a whole probe interval
    blind, _ = rv.run("2026-12", contract, str(tmp_path / "without"), now=now, store_path=db)
    assert {n.name: n.down_us for n in blind.nodes} == {"cmxbl-node1": 0, "cmxbl-node2": 300 * US,
                                                        "cmxbl-node3": 300 * US, "cmxbl-node4": 0}


@pytest.fixture(scope="module")
def controller_cut_off(tmp_path_factory):
    """Two rounds in which no node answered, as when the controller (the probe's one vantage point) is cut off.
    Slurm snapshots from sla_slurm_host: tests/fixtures/slurm/sla/scontrol_oneliner.txt was recorded at
    2026-11-30T05:36:03Z with all four nodes down; the same lines with State=IDLE and no Reason stand for the nodes
    in service (no recording of them idle exists)."""
    base = tmp_path_factory.mktemp("blind")
    db = str(base / "healthprobe.sqlite")
    down = (FIX / "slurm" / "sla" / "scontrol_oneliner.txt").read_text()
    idle = "\n".join(re.sub(r"State=\S+", "State=IDLE", line).split(" Reason=")[0] for line in down.splitlines())
    failed = {"host": "slurmctl", "rc": -1, "format": "scontrol-oneliner",
              "text": "Failed to connect to the host via ssh: ssh: connect to host slurmctl port 22: "
                      "Connection timed out"}

    def snapshot(text):
        return {"host": "slurmctl", "rc": 0, "format": "scontrol-oneliner", "text": text}

    probe_round(db, "2026-11-30T05:21:03Z", slurm=snapshot(idle))
    probe_round(db, "2026-11-30T05:26:03Z", down=NODES, slurm=failed)  # Slurm cannot be asked either
    probe_round(db, "2026-11-30T05:31:03Z", slurm=snapshot(idle))
    probe_round(db, "2026-11-30T05:36:03Z", down=NODES, slurm=snapshot(down))  # Slurm shows them down
    probe_round(db, "2026-11-30T05:41:03Z", slurm=snapshot(idle))
    result, out = rv.run("2026-11", CONTRACT, str(base / "sla"), now=parse_time("2026-12-01T06:00:00Z"),
                         store_path=db)
    return result, Path(out)


def test_every_node_unreachable_in_one_round_is_a_monitoring_outage(controller_cut_off):
    result, out = controller_cut_off
    summary = json.loads((out / "summary.json").read_text())
    outages = summary["observations"]["monitoring_outages"]
    assert outages[0] == {"at": "2026-11-30T05:26:03Z", "hosts": 4, "scheduler_down": "none"}
    # nothing of 05:26:03-05:31:03 is downtime, and none of it is monitored time either
    assert not [r for r in result.downtime if r["start"] < "2026-11-30T05:31:03Z"]
    assert not [e for e in result.events if e.source == "healthprobe"]
    assert all(n.unmonitored_us >= 300 * US for n in result.nodes)
    assert "2 health-probe round(s) in which no node answered: monitoring outages" in " ".join(result.notes)
    md = (out / "review.md").read_text()
    assert "## Monitoring outages" in md and "| 2026-11-30T05:26:03Z | 4 | none |" in md


def test_the_same_with_slurm_showing_the_nodes_down_is_downtime(controller_cut_off):
    result, out = controller_cut_off
    summary = json.loads((out / "summary.json").read_text())
    assert summary["observations"]["monitoring_outages"][1] == {
        "at": "2026-11-30T05:36:03Z", "hosts": 4, "scheduler_down": "gpu001 gpu002 gpu003 gpu004"}
    # down by Slurm's own record: from the drain reason's time (05:35:45; gpu001 has none: from the snapshot) to
    # the next snapshot that shows the node in service
    assert {n.name: n.down_us // US for n in result.nodes} == {"gpu001": 300, "gpu002": 318, "gpu003": 318,
                                                               "gpu004": 318}
    assert all(e.startswith("slurm:") for r in result.downtime for e in r["evidence"])


def test_the_sacctmgr_query_starts_early_enough_in_slurms_zone(capsys):
    """roles/sla/tasks/review.yml asks `reports.sla month --query-start-in <sla_slurm_timezone>` for sacctmgr's
    Start=, which sacctmgr reads in the Slurm host's local time. Contract in Tokyo, Slurm in UTC: November starts at
    2026-10-31T15:00:00Z, so the old Start=2026-11-01T00:00:00 (UTC there) missed events that ended 15:00Z-00:00Z."""
    from reports.sla.__main__ import main
    from reports.sla.timeutil import month_window

    window_start = month_window("2026-11", "Asia/Tokyo")[0]
    for slurm_zone, expected in (("UTC", "2026-10-30T15:00:00"), ("America/Chicago", "2026-10-30T10:00:00")):
        assert main(["month", "--month", "2026-11", "--timezone", "Asia/Tokyo",
                     "--query-start-in", slurm_zone]) == 0
        start = capsys.readouterr().out.strip()
        assert start == expected and parse_time(start, default_tz=slurm_zone) == window_start - 86400 * US
    assert parse_time("2026-11-01T00:00:00", default_tz="UTC") > window_start  # what the role asked before
    assert main(["month", "--month", "2026-11", "--timezone", "Asia/Tokyo"]) == 0
    assert capsys.readouterr().out == "2026-11\n"  # without the option: the month, as the role reads it


def test_slurm_snapshots_hold_for_the_probes_own_interval(tmp_path):
    """sla_probe_interval_s 900: a round, and its Slurm snapshot, every 15 minutes; sample_max_hold_intervals 2, so
    each snapshot stands for 30 min (the round records its interval). gpu002 drained at 10:07 (its reason's time),
    seen drained 10:15-11:00 and in service at 11:15; gpu003 not responding (no reason time) 10:00-10:45, in
    service at 11:00. The lines are the recorded tests/fixtures/slurm/sla/scontrol_oneliner.txt ones with another
    state and reason (no recording of these states exists)."""
    lines = {ln.split()[0][len("NodeName="):]: ln for ln in
             (FIX / "slurm" / "sla" / "scontrol_oneliner.txt").read_text().splitlines()}

    def line(name, state, reason=""):
        text = re.sub(r"State=\S+", "State=" + state, lines[name]).split(" Reason=")[0]
        return text + (" Reason=%s [root@2026-11-03T10:07:00]" % reason if reason else "")

    db = str(tmp_path / "healthprobe.sqlite")
    for at in ("09:45", "10:00", "10:15", "10:30", "10:45", "11:00", "11:15"):
        g2 = line("gpu002", "IDLE+DRAIN", "xid 79") if "10:15" <= at <= "11:00" else line("gpu002", "IDLE")
        g3 = line("gpu003", "IDLE+NOT_RESPONDING") if "10:00" <= at <= "10:45" else line("gpu003", "IDLE")
        probe_round(db, "2026-11-03T%s:00Z" % at, interval_s=900,
                    slurm={"host": "slurmctl", "rc": 0, "format": "scontrol-oneliner", "text": g2 + "\n" + g3})
    result, out = rv.run("2026-11", CONTRACT, str(tmp_path / "sla"), now=parse_time("2026-12-01T06:00:00Z"),
                         store_path=db)
    down = {n.name: n.down_us // US for n in result.nodes}
    # was gpu002 3,180 s (10:07-11:00 in four pieces cut at the default 2 x 300 s) and gpu003 0 (every snapshot
    # alone): 68 and 60 minutes
    assert down == {"gpu001": 0, "gpu002": 68 * 60, "gpu003": 60 * 60, "gpu004": 0}
    staged = [json.loads(x) for x in Path(out, "inputs", "slurm_snapshots.jsonl").read_text().splitlines()]
    assert {x["interval_s"] for x in staged} == {900.0}
    again = rv.rerun_from_inputs(str(Path(out, "inputs")), str(tmp_path / "again"))
    assert {n.name: n.down_us // US for n in again.nodes} == down


def test_a_login_node_with_no_gpus_is_not_down_for_missing_gpus(tmp_path):
    """sla_gpus 0 for a login node with the NVIDIA tools but no GPU: nvidia-smi fails there (as recorded in
    kubernetes-sigs/dra-driver-nvidia-gpu#1008, 2026-04-13: "Failed to initialize NVML: No supported GPUs were found",
    exit 255). The review expected the system's 8 GPUs of it (`gpus or gpus_per_node`): all 8 missing, down by the
    node rule for every sampled minute; and it weighed as 8 GPUs in the cluster figures."""
    login = UP.rstrip("\n") + ("\nFailed to initialize NVML: No supported GPUs were found\n"
                               "Unable to determine the number of GPUs\nnvidia-smi-rc=255\n")
    hosts = NODES + ["login1"]
    db = str(tmp_path / "healthprobe.sqlite")
    for minute in (0, 5, 10):
        probe_round(db, "2026-11-10T10:%02d:00Z" % minute, hosts=hosts, stdout={"login1": login})
    contract = {**CONTRACT, "nodes": [{"name": n, "rack": "r1"} for n in NODES] + [{"name": "login1", "gpus": 0}]}
    result, _ = rv.run("2026-11", contract, str(tmp_path / "sla"), now=parse_time("2026-12-01T06:00:00Z"),
                       store_path=db)
    by = {n.name: n for n in result.nodes}
    # was 1,200 s (10:00 to 10:20: three samples, the last one held for two intervals), weighed as 8 GPUs
    assert by["login1"].gpus == 0 and by["login1"].down_us == 0
    assert not [e for e in result.events if e.scope == "gpu"] and result.cluster_availability == 1


# ---------------------------------------------------------------------------------- time no source observed
# November 2026 (30 days, 720 h) probed once an hour (sla_probe_interval_s 3600, so each sample holds until the next
# round), every round stored by the store as the sla role appends it. Gold: target 99.9 %, i.e. 43 min 12 s of 720 h.
# With one node, a round in which it does not answer is a round in which no host answered: a monitoring outage,
# neither down nor monitored (reports/sla/sources/healthprobe.py). The review used to read such a month as 100 %
# and "meets target" however long the outage (reports/sla/availability.py, rule 8).
GOLD = {**CONTRACT, "tier": "gold", "nodes": [{"name": "gpu001"}]}
BLIND_6H = ["2026-11-20T%02d:00:00Z" % h for h in range(10, 16)]  # 10:00-16:00: six rounds without an answer
SCONTROL = {ln.split()[0][len("NodeName="):]: ln for ln in
            (FIX / "slurm" / "sla" / "scontrol_oneliner.txt").read_text().splitlines()}


def idle(*names):
    """A Slurm snapshot (scontrol -o show node, the recorded lines with State=IDLE and no Reason, as in
    controller_cut_off) in which `names` are in service."""
    text = "\n".join(re.sub(r"State=\S+", "State=IDLE", SCONTROL[n]).split(" Reason=")[0] for n in names)
    return {"host": "slurmctl", "rc": 0, "format": "scontrol-oneliner", "text": text}


def probe_month(db, hosts=("gpu001",), special=None):
    """A round every hour of November, every host answering; `special`: RFC 3339 time -> probe_round's arguments
    for the rounds that differ (added, or instead of the hourly one)."""
    special = special or {}
    for day in range(1, 31):
        for hour in range(24):
            at = "2026-11-%02dT%02d:00:00Z" % (day, hour)
            if at not in special:
                probe_round(db, at, hosts=list(hosts), interval_s=3600)
    for at, kw in special.items():
        probe_round(db, at, hosts=list(hosts), **{"interval_s": 3600, **kw})


def blind_review(tmp_path, special, contract=GOLD, **sources):
    db = str(tmp_path / "healthprobe.sqlite")
    probe_month(db, [n["name"] for n in contract["nodes"]], special)
    result, out = rv.run("2026-11", contract, str(tmp_path / "sla"), now=parse_time("2026-12-01T06:00:00Z"),
                         store_path=db, **sources)
    return result, Path(out)


def test_one_node_six_hours_no_host_answered_is_undetermined_not_met(tmp_path, capsys):
    result, out = blind_review(tmp_path, {at: {"down": ["gpu001"]} for at in BLIND_6H})
    [n] = result.nodes
    assert n.down_us == 0 and n.availability == 1  # counted: nothing was seen down
    # but nothing was seen at all for 6 h: had it been down, 1 - 6/720 = 99.1666 %, below 99.9 %
    assert n.unobserved_us == 6 * 3600 * US and n.worst_availability == 1 - Fraction(6, 720)
    assert n.meets_target is None  # was True
    assert n.undetermined == ("6 h 0 min unobserved (no source saw the node): availability between 99.1666 % and "
                              "100.0000 %")
    assert (n.credit_pct, n.credit_worst_pct) == (0, 10) and result.breaches == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cluster_met_target"] is None and summary["nodes"]["gpu001"]["meets_target"] is None
    assert summary["cluster_worst_case_availability_pct"] == pytest.approx(99.1666, abs=1e-4)
    # the outage rounds stay listed as they were, and the note says how long they blinded the probe
    assert [(o["at"], o["scheduler_down"]) for o in summary["observations"]["monitoring_outages"]] == [
        (at, "none") for at in BLIND_6H]
    assert ("6 health-probe round(s) in which no node answered: monitoring outages, not counted as downtime (see "
            "Monitoring outages); they blinded the probe for 6 h 0 min, and no other source saw 6 h 0 min of it"
            in " ".join(result.notes))
    md = (out / "review.md").read_text()
    assert "| node | gpu001 |  | 8 | 2592000 | 0 | 0 | 0 | 0 | 0 | 99.1666 to 100.0000 | 99.9 | undetermined |" in md
    assert "| 100.0000 |" not in md and "| yes |" not in md  # never a bare 100 % met
    assert "Cluster target 99.9 %: **undetermined**" in md and "## Undetermined" in md
    assert "| gpu001 |  | 8 | 99.1666 to 100.0000 | gold | 99.9 | 0 to 10 |" in md  # the credit as a range
    page = (out / "review.html").read_text()
    assert "<td class='open'>undetermined</td>" in page and "<td>100.0000</td>" not in page
    from reports.sla.__main__ import main

    # an undetermined verdict is a finding (exit 1), not "no breach" (was 0)
    assert main(["review", "--from-inputs", str(out / "inputs"), "--out", str(tmp_path / "again")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["undetermined"] == ["gpu001"] and doc["breaches"] == 0


def test_five_minutes_no_host_answered_still_meets_the_target(tmp_path):
    # the 10:00 round (5-minute interval) finds no host; the next one, at 10:05, finds the node up
    result, out = blind_review(tmp_path, {"2026-11-20T10:00:00Z": {"down": ["gpu001"], "interval_s": 300},
                                          "2026-11-20T10:05:00Z": {}})
    [n] = result.nodes
    # worst case 1 - 300 s / 30 d = 99.9884 %: above 99.9 %, too short to matter; the verdict stands
    assert n.unobserved_us == 300 * US and n.worst_availability == 1 - Fraction(300, 2592000)
    assert n.meets_target is True and n.undetermined is None and n.credit_worst_pct == 0
    assert result.cluster_met_target is True and result.cluster_undetermined is None
    md = (out / "review.md").read_text()
    assert "| node | gpu001 |  | 8 | 2592000 | 0 | 0 | 0 | 0 | 0 | 100.0000 | 99.9 | yes |" in md
    assert "they blinded the probe for 0 h 5 min, and no other source saw 0 h 5 min of it" in md
    assert "## Undetermined" not in md


def test_the_same_six_hours_seen_by_slurm_snapshots_are_observed(tmp_path):
    # sla_slurm_host set: each round also stores `scontrol -o show node`, which shows the node in service
    result, out = blind_review(tmp_path, {at: {"down": ["gpu001"], "slurm": idle("gpu001")} for at in BLIND_6H})
    [n] = result.nodes
    assert n.unobserved_us == 0 and n.worst_availability == 1 and n.unmonitored_us == 6 * 3600 * US
    assert n.meets_target is True and n.undetermined is None and result.cluster_met_target is True
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["observations"]["monitoring_outages"]) == 6
    assert "they blinded the probe for 6 h 0 min, and no other source saw 0 h 0 min of it" in " ".join(result.notes)
    assert "| 100.0000 | 99.9 | yes |" in (out / "review.md").read_text()


def test_a_counted_breach_stays_a_breach_with_its_credit_as_a_range(tmp_path):
    log = tmp_path / "noc.csv"
    log.write_text("start,end,target,reason\n2026-11-05T02:00:00Z,2026-11-05T04:00:00Z,gpu001,PSU\n")
    result, out = blind_review(tmp_path, {at: {"down": ["gpu001"]} for at in BLIND_6H}, imports=[str(log)])
    [n] = result.nodes
    # counted 1 - 2/720 = 99.7222 % (10 %); worst 1 - 8/720 = 98.8888 % (30 %): a breach either way
    assert n.down_us == 7200 * US and n.meets_target is False and n.undetermined is None
    assert (n.credit_pct, n.credit_worst_pct) == (10, 30)
    assert [(b["node"], b["credit_pct"], b["credit_worst_pct"]) for b in result.breaches] == [("gpu001", 10, 30)]
    assert result.cluster_met_target is False
    md = (out / "review.md").read_text()
    assert "| gpu001 | 98.8888 to 99.7222 | 99.9 | 10 to 30 | 7200 |" in md


def test_a_cluster_with_one_undetermined_node_is_not_presented_as_met(tmp_path):
    # two nodes; Slurm's snapshots in the outage rounds list gpu002 in service and say nothing of gpu001
    contract = {**GOLD, "nodes": [{"name": "gpu001"}, {"name": "gpu002"}]}
    result, out = blind_review(tmp_path, {at: {"down": ["gpu001", "gpu002"], "slurm": idle("gpu002")}
                                          for at in BLIND_6H}, contract=contract)
    by = {n.name: n for n in result.nodes}
    assert by["gpu001"].meets_target is None and by["gpu002"].meets_target is True
    # counted 100 %; had gpu001's 6 h been down, 1 - 6 x 8 / (720 x 16) = 99.5833 %: not met, not missed
    assert result.cluster_availability == 1 and result.cluster_worst_availability == 1 - Fraction(6, 1440)
    assert result.cluster_met_target is None and result.cluster_credit_worst_pct == 5
    assert result.cluster_undetermined == ("1 of 2 node(s) have time no source observed: cluster availability "
                                           "between 99.5833 % and 100.0000 %")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cluster_met_target"] is None  # was True
    md = (out / "review.md").read_text()
    assert "| cluster | cluster |  | 16 | 2592000 |  |  |  |  | 0 | 99.5833 to 100.0000 | 99.9 | undetermined |" in md
    assert "Cluster availability (GPU-weighted): **99.5833 to 100.0000 %**; cluster credit: **0 to 5 %**" in md
    assert "| (cluster, GPU-weighted) |  | 16 | 99.5833 to 100.0000 | gold | 99.9 | 0 to 5 |" in md
    # the next month takes November as undetermined, a miss in the worst case: with December unobserved too (no
    # source at all), gold's two misses in a row may have happened, and are said to be undetermined, not met
    dec, _ = rv.run("2026-12", contract, str(tmp_path / "sla"), now=parse_time("2027-01-01T06:00:00Z"))
    assert json.loads((tmp_path / "sla" / "2026-12" / "inputs" / "history.json").read_text()) == {"2026-11": None}
    assert dec.triggers == [] and [t["trigger"] for t in dec.undetermined_triggers] == ["availability", "consecutive"]


# ---------------------------------------------------------------------------------- a node's own service window
# gpu002 failed and was swapped for the spare gpu003 at midnight on 15 November (availability.py, rule 1): the probe's
# hourly rounds list gpu002 until then and gpu003 from then; gpu002 did not answer the 10:00 and 11:00 rounds of the
# 10th (2 h down). Gold, 99.9 %.
SWAP = {**GOLD, "nodes": [{"name": "gpu001"}, {"name": "gpu002", "in_service_until": "2026-11-15T00:00:00Z"},
                          {"name": "gpu003", "in_service_from": "2026-11-15"}]}


def probe_swap(db):
    for day in range(1, 31):
        for hour in range(24):
            at = "2026-11-%02dT%02d:00:00Z" % (day, hour)
            hosts = ["gpu001", "gpu002" if day < 15 else "gpu003"]
            down = ["gpu002"] if at in ("2026-11-10T10:00:00Z", "2026-11-10T11:00:00Z") else []
            probe_round(db, at, down=down, hosts=hosts, interval_s=3600)


def test_a_swapped_node_and_its_spare_end_to_end(tmp_path):
    db = str(tmp_path / "healthprobe.sqlite")
    probe_swap(db)
    result, out = rv.run("2026-11", SWAP, str(tmp_path / "sla"), now=parse_time("2026-12-01T06:00:00Z"),
                         store_path=db)
    out = Path(out)
    by = {n.name: n for n in result.nodes}
    # gpu002 over its 14 days: 2 h down, 99.4047 %, 10 %; no source saw it after the swap, and that is not
    # unobserved time (the old loader ignored the window: 99.7222 % counted, 15 d 23 h unobserved, worst 46.5277 %)
    assert by["gpu002"].service_us == 14 * 86400 * US and by["gpu002"].down_us == 7200 * US
    assert by["gpu002"].availability == 1 - Fraction(7200, 14 * 86400) and by["gpu002"].credit_pct == 10
    assert by["gpu002"].unobserved_us == 0 and by["gpu002"].unmonitored_us == 0
    assert by["gpu002"].meets_target is False and by["gpu002"].undetermined is None
    # the spare over its 16 days, none of it before the swap unobserved (was: 14 days, undetermined)
    assert by["gpu003"].service_us == 16 * 86400 * US and by["gpu003"].availability == 1
    assert by["gpu003"].unobserved_us == 0 and by["gpu003"].meets_target is True
    # the cluster weighs each by GPUs x service time: 2 h of 8 GPUs in two nodes' months; 10 % on 14 of 60 days
    assert result.cluster_availability == 1 - Fraction(1, 720) and result.cluster_undetermined is None
    assert result.cluster_credit_pct == Fraction(7, 3) and result.cluster_met_target is False
    assert not [n for n in result.notes if "coverage below 90" in n or "no usable" in n]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["nodes"]["gpu002"]["service"] == ["2026-11-01T00:00:00Z", "2026-11-15T00:00:00Z"]
    assert summary["nodes"]["gpu003"]["service"] == ["2026-11-15T00:00:00Z", "2026-12-01T00:00:00Z"]
    assert summary["nodes"]["gpu002"]["unobserved_s"] == 0 and summary["cluster_credit_pct"] == pytest.approx(7 / 3)
    md = (out / "review.md").read_text()
    assert ("In service for part of it only (see Service windows): gpu002 (until 2026-11-15T00:00:00Z), gpu003 "
            "(from 2026-11-15T00:00:00Z).") in md
    assert "| gpu003 |  | 8 | 2026-11-15T00:00:00Z |  | 2026-11-15T00:00:00Z | 2026-12-01T00:00:00Z |" in md
    assert ("| node | gpu002 |  | 8 | 1209600 | 0 | 7200 | 0 | 7200 | 57600 | 99.4047 | 99.9 | no | 0 | 100.0 | 0 |"
            in md)
    assert "<h2>Service windows</h2>" in (out / "review.html").read_text()
    # the staged contract keeps the windows: recomputed from the inputs alone, the same month
    staged = json.loads((out / "inputs" / "contract.json").read_text())
    assert [n.get("in_service_until") for n in staged["nodes"]] == [None, "2026-11-15T00:00:00Z", None]
    again = rv.rerun_from_inputs(str(out / "inputs"), str(tmp_path / "again"))
    assert again.cluster_availability == result.cluster_availability
    assert (tmp_path / "again" / "availability.csv").read_bytes() == (out / "availability.csv").read_bytes()


def test_a_window_that_ends_before_it_starts_stops_the_review_before_anything_is_written(tmp_path, capsys):
    from reports.sla.__main__ import main
    from reports.sla.events import EventError

    bad = {**SWAP, "nodes": SWAP["nodes"][:2] + [{"name": "gpu003", "in_service_from": "2026-11-15",
                                                  "in_service_until": "2026-11-01"}]}
    # the old loader ignored both fields and reviewed the month
    with pytest.raises(EventError, match="contract node gpu003: in_service_until 2026-11-01 is not after "
                                         "in_service_from 2026-11-15"):
        rv.run("2026-11", bad, str(tmp_path / "sla"), now=parse_time("2026-12-01T06:00:00Z"))
    assert not (tmp_path / "sla").exists() or os.listdir(tmp_path / "sla") == []
    path = tmp_path / "contract.json"
    path.write_text(json.dumps(bad))
    assert main(["review", "--contract", str(path), "--out-root", str(tmp_path / "sla"), "--month", "2026-11"]) == 2
    assert "contract node gpu003: in_service_until" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- what a sacctmgr export vouches for
# The six hours no host answered (BLIND_6H) beside the recorded sacctmgr export (tests/fixtures/slurm/sla: events of
# gpu001-gpu004, exported 2026-11-30T05:36:03Z). Silver, 99.5 %: 6 h of 720 h unobserved is 99.1666 % at worst.
SACCTMGR = FIX / "slurm" / "sla" / "sacctmgr_event.txt"
NAMED = {**GOLD, "tier": "silver", "nodes": [{"name": "gpu002"}, {"name": "gpu003.dc1"}, {"name": "gpu005"}]}
OUTAGE = {at: {"down": [n["name"] for n in NAMED["nodes"]]} for at in BLIND_6H}
FAILED = {"host": "slurmctl", "rc": 1, "format": "scontrol-oneliner",
          "text": "slurm_load_node error: Unable to contact slurm controller (connect failure)"}


def export(path=SACCTMGR):
    return [{"format": "sacctmgr", "path": str(path), "observed_at": "2026-11-30T05:36:03Z"}]


def header_only(tmp_path):
    """The recorded export's header and dashes alone: sacctmgr asked about another cluster, or after slurmdbd's
    PurgeEventAfter removed the month's events."""
    path = tmp_path / "sacctmgr_event.txt"
    path.write_text("".join(SACCTMGR.read_text().splitlines(keepends=True)[:2]))
    return path


def test_a_sacctmgr_export_vouches_only_for_the_nodes_slurm_knows(tmp_path):
    result, _ = blind_review(tmp_path, OUTAGE, contract=NAMED, slurm_files=export(), ignore_users=["alice"])
    by = {n.name: n for n in result.nodes}
    # gpu002: the export has its drain of 3 Nov, Slurm knows it: the event history vouches for the 6 h
    assert by["gpu002"].unobserved_us == 0 and by["gpu002"].meets_target is True
    # gpu003.dc1 is gpu003 in Slurm, and Slurm has no gpu005: the export says nothing of them (was 0 s and met)
    for name in ("gpu003.dc1", "gpu005"):
        assert by[name].unobserved_us == 6 * 3600 * US and by[name].meets_target is None
        assert by[name].worst_availability == 1 - Fraction(6, 720)
    assert ("the sacctmgr export slurm/01-sacctmgr_event.txt names no event of gpu003.dc1, gpu005 and no Slurm "
            "snapshot lists them: it does not vouch for their time (Slurm may not know them by these names)"
            in result.notes)
    # the same store with an export that has only its header: it vouches for no node (all three were 0 s and met)
    empty, _ = rv.run("2026-11", NAMED, str(tmp_path / "empty"), now=parse_time("2026-12-01T06:00:00Z"),
                      store_path=str(tmp_path / "healthprobe.sqlite"), slurm_files=export(header_only(tmp_path)))
    assert [(n.unobserved_us, n.meets_target) for n in empty.nodes] == [(6 * 3600 * US, None)] * 3
    assert empty.cluster_met_target is None
    assert ("the sacctmgr export slurm/01-sacctmgr_event.txt has no node event at all (another cluster's, or its "
            "events purged?) and no Slurm snapshot lists gpu002, gpu003.dc1, gpu005: it does not vouch for their "
            "time" in empty.notes)


def test_an_export_without_events_vouches_for_a_node_a_slurm_snapshot_lists(tmp_path):
    # one Slurm snapshot on the 1st lists gpu002 (by that name): Slurm knows it, and its history has no event of it
    special = {**OUTAGE, "2026-11-01T00:00:00Z": {"slurm": idle("gpu002")}}
    result, _ = blind_review(tmp_path, special, contract=NAMED, slurm_files=export(header_only(tmp_path)))
    by = {n.name: n for n in result.nodes}
    assert by["gpu002"].unobserved_us == 0 and by["gpu002"].meets_target is True
    assert by["gpu003.dc1"].meets_target is None and by["gpu005"].meets_target is None


def test_a_sacctmgr_export_does_not_vouch_for_rounds_whose_slurm_snapshot_failed(tmp_path):
    # sla_slurm_host set: every round stores `scontrol -o show node` (gpu002 in service), and in the six rounds no
    # host answered, the snapshot failed too (Slurm could not be asked): nothing vouches for those hours
    contract = {**NAMED, "nodes": [{"name": "gpu002"}]}
    special = {"2026-11-%02dT%02d:00:00Z" % (d, h): {"slurm": idle("gpu002")} for d in range(1, 31) for h in range(24)}
    special.update({at: {"down": ["gpu002"], "slurm": FAILED} for at in BLIND_6H})
    result, _ = blind_review(tmp_path, special, contract=contract, slurm_files=export())
    [n] = result.nodes
    # was 0 s and met: the export covered every contract node from the month's start to the export
    assert n.unobserved_us == 6 * 3600 * US and n.meets_target is None
    assert n.worst_availability == 1 - Fraction(6 * 3600 + 9919, 720 * 3600)  # and its counted drain of 3 Nov
    assert ("the sacctmgr export slurm/01-sacctmgr_event.txt does not vouch for the 6 h 0 min in which the probe's "
            "Slurm snapshots failed (Slurm could not be asked)" in result.notes)
    assert "6 Slurm snapshot(s) failed and were skipped" in result.notes


# ---------------------------------------------------------------------------------- a probe begun mid-month
def test_a_probe_begun_mid_month_says_when_it_began_and_what_sets_a_later_start(tmp_path):
    """The store's first round is at 2026-11-12T00:00:00Z and no other source exists: the 11 days before it no
    source observed, so the node is undetermined (99.9 % needs all but 43 min of the month), and the note names the
    probe's first sample and how the contract says the cluster was not in service yet."""
    db = str(tmp_path / "healthprobe.sqlite")
    for day in range(12, 31):
        for hour in range(24):
            probe_round(db, "2026-11-%02dT%02d:00:00Z" % (day, hour), hosts=["gpu001"], interval_s=3600)
    result, _ = rv.run("2026-11", GOLD, str(tmp_path / "sla"), now=parse_time("2026-12-01T06:00:00Z"), store_path=db)
    [n] = result.nodes
    assert n.unobserved_us == 11 * 86400 * US and n.meets_target is None
    note = next(x for x in result.notes if x.startswith("the health probe's first sample"))
    assert note == ("the health probe's first sample is at 2026-11-12T00:00:00Z, after the service start "
                    "2026-11-01T00:00:00Z: no source observed any node for some or all of the time before it (judged "
                    "at its worst case, see Availability); if the cluster was not in service until then, the "
                    "contract's `accepted_at` sets a later service start (a node's `in_service_from` for one node)")
    # said so in the contract: the service starts with the probe, the node meets the target, and no such note
    accepted, _ = rv.run("2026-11", {**GOLD, "accepted_at": "2026-11-12"}, str(tmp_path / "accepted"),
                         now=parse_time("2026-12-01T06:00:00Z"), store_path=db)
    assert accepted.nodes[0].meets_target is True and accepted.nodes[0].unobserved_us == 0
    assert not [x for x in accepted.notes if x.startswith("the health probe's first sample")]


# ---------------------------------------------------------------------------------- a month that is not over
def test_a_review_of_the_running_month_is_provisional_end_to_end(tmp_path, capsys):
    """Gold, gpu001, reviewed at midnight on 2 November: the probe saw it up every hour of the 1st, the provider's
    log has it down 20 min. So far 98.6111 % (was: a missed target, a 30 % credit, exit 1); at best over the month
    99.9537 %: provisional, no finding yet, and the next month does not count November as missed."""
    from reports.sla.__main__ import main

    db = str(tmp_path / "healthprobe.sqlite")
    for hour in range(24):
        probe_round(db, "2026-11-01T%02d:00:00Z" % hour, hosts=["gpu001"], interval_s=3600)
    log = tmp_path / "noc.csv"
    log.write_text("start,end,target,reason\n2026-11-01T10:00:00Z,2026-11-01T10:20:00Z,gpu001,PSU\n")
    out_root = str(tmp_path / "sla")
    result, out = rv.run("2026-11", GOLD, out_root, now=parse_time("2026-11-02T00:00:00Z"), store_path=db,
                         imports=[str(log)])
    out = Path(out)
    [n] = result.nodes
    assert result.breaches == [] and result.triggers == [] and n.credit_pct == 0  # was a breach, 30 %
    assert n.meets_target is None and result.cluster_met_target is None and n.unobserved_us == 0
    assert n.availability == 1 - Fraction(1, 72) and n.best_availability == 1 - Fraction(1, 2160)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["partial"] is True and summary["provisional"] is True
    assert summary["cluster_met_target"] is None and summary["cluster_undetermined"].startswith(
        "the month is not over")
    assert summary["cluster_best_case_availability_pct"] == pytest.approx(99.9537, abs=1e-4)
    assert summary["nodes"]["gpu001"]["best_case_availability_pct"] == pytest.approx(99.9537, abs=1e-4)
    md = (out / "review.md").read_text()
    assert "partial: the month is not over" in md and "Cluster target 99.9 %: **provisional**" in md
    assert "| node | gpu001 |  | 8 | 86400 | 0 | 1200 | 0 | 1200 | 9600 | 98.6111 | 99.9 | provisional |" in md
    assert "| gpu001 |  | 8 | 98.6111 | gold | 99.9 | at least 0 |" in md
    assert "<td class='open'>provisional</td>" in (out / "review.html").read_text()
    # nothing certain yet: no finding (exit 0), and the command's line says the month is provisional
    assert main(["review", "--from-inputs", str(out / "inputs"), "--out", str(tmp_path / "again")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["provisional"] is True and doc["breaches"] == 0 and doc["triggers"] == []
    # December, a whole month missed: November (provisional) is undetermined, not a miss (gold terminates after 2)
    dec_log = tmp_path / "dec.csv"
    dec_log.write_text("start,end,target\n2026-12-02T00:00:00Z,2026-12-02T02:00:00Z,gpu001\n")
    dec, _ = rv.run("2026-12", GOLD, out_root, now=parse_time("2027-01-01T06:00:00Z"), imports=[str(dec_log)])
    assert json.loads((Path(out_root) / "2026-12" / "inputs" / "history.json").read_text()) == {"2026-11": None}
    assert dec.cluster_met_target is False and dec.triggers == []  # was "missed 2 months in a row"
    assert "consecutive" in [t["trigger"] for t in dec.undetermined_triggers]


def test_a_review_of_the_running_month_asserts_a_certain_breach(tmp_path, capsys):
    """The same, down 3 h: 87.5 % so far, 99.5833 % at best, below 99.9 % whatever the rest of the month brings:
    a breach with at least a 10 % credit (was 100 %), a finding (exit 1)."""
    from reports.sla.__main__ import main

    log = tmp_path / "noc.csv"
    log.write_text("start,end,target,reason\n2026-11-01T10:00:00Z,2026-11-01T13:00:00Z,gpu001,PSU\n")
    result, out = rv.run("2026-11", GOLD, str(tmp_path / "sla"), now=parse_time("2026-11-02T00:00:00Z"),
                         imports=[str(log)])
    [n] = result.nodes
    assert n.credit_pct == 10 and n.meets_target is False and result.cluster_met_target is False
    assert [b["node"] for b in result.breaches] == ["gpu001"] and result.triggers == []
    md = (Path(out) / "review.md").read_text()
    assert "Cluster target 99.9 %: **missed**" in md and "cluster credit: **at least 10 %**" in md
    assert main(["review", "--from-inputs", str(Path(out) / "inputs"), "--out", str(tmp_path / "again")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["provisional"] is True and doc["breaches"] == 1
