"""The health probe and the monthly review on the SSH test cluster, both run through ansible-runner.

The probe samples the four hosts in a bounded loop of back-to-back runs (a few seconds apart) while one host's
sshd is stopped for a measured interval; the review of that window must show that host's downtime within one
sample interval of the truth, with the samples that made it as evidence, and nothing for the other hosts.
The outage starts after run 1 and ends after run 3, never while a run has a session on the host: killing a session
there could kill a login shell in the middle of `pyenv rehash`, whose lock lives in the /root the test hosts share,
and every SSH login on the machine would then wait for its 60 s timeout. The last round is two runs at once, one in
this process and one through the clustermax-run console script, as when AWX starts a run before the previous one
ended: both rounds must land.
"""

import csv
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from unittest import mock

import pytest

from reports.sla.runner import Progress, run_playbook
from reports.sla.store import read_samples
from reports.sla.timeutil import US, parse_time

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
SAMPLED_RUNS = 3  # then one round of two overlapping runs
OFFSET_S = 0.8  # a pause between a run and the sshd stop / start: the edges do not coincide with a run's start
# The nominal probe interval recorded with each round: a sample holds until the next one for at most two of these.
# Back-to-back runs on a loaded 2-core machine can be 10 s apart, so the nominal value is well above that.
NOMINAL_INTERVAL_S = 30


def quiet_zone():
    """A zone in which no month starts within an hour of now, so the whole test falls inside one month there."""
    now = datetime.now(timezone.utc)
    for name, offset in (("UTC", 0), ("Etc/GMT-12", 12), ("Etc/GMT+12", -12)):
        local = [now + timedelta(hours=offset + d) for d in (-1, 0, 1)]
        if len({(t.year, t.month) for t in local}) == 1:
            return name, "%04d-%02d" % (local[1].year, local[1].month)
    raise AssertionError("unreachable: the three zones are 12 hours apart")


@pytest.fixture(scope="module")
def sla_run(test_cluster, tmp_path_factory):
    base = tmp_path_factory.mktemp("sla")
    out = base / "runs"
    inventory = test_cluster.write_inventory(str(base / "cluster.ini"), python=sys.executable)
    names = sorted(h["name"] for h in test_cluster.hosts)
    victim = names[1]
    tz, month = quiet_zone()
    probe_vars = {"assess_output_dir": str(out), "sla_probe_interval_s": NOMINAL_INTERVAL_S}
    truth = {}

    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "CLUSTERMAX_ASSESS_"))}
    script = Path(sys.executable).parent / "clustermax-run"  # the console script; the module where not installed
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "reports.sla.runner"]
    argv = entry + ["playbooks/healthprobe.yml", "-i", str(inventory), "-e",
                    "assess_output_dir=%s sla_probe_interval_s=%d" % (out, NOMINAL_INTERVAL_S), "--json"]
    runs = []
    try:
        with mock.patch.dict(os.environ, env, clear=True):
            for i in range(SAMPLED_RUNS):
                runs.append(run_playbook("playbooks/healthprobe.yml", str(inventory), probe_vars,
                                         progress=Progress(stream=open(os.devnull, "w")), timeout=120))
                if i == 0:
                    time.sleep(OFFSET_S)
                    test_cluster.stop_sshd(victim)  # the listener and Ansible's ControlPersist master are gone
                    truth["stop"] = time.time()
            time.sleep(OFFSET_S)
            truth["start"] = time.time()
            test_cluster.start_sshd(victim)  # returns once ssh logs in again
            truth["start_confirmed"] = time.time()
            other = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            runs.append(run_playbook("playbooks/healthprobe.yml", str(inventory), probe_vars,
                                     progress=Progress(stream=open(os.devnull, "w")), timeout=120))
            concurrent = other.communicate(timeout=180) + (other.returncode,)
            review = run_playbook("playbooks/sla_review.yml", str(inventory),
                                  {"assess_output_dir": str(out), "sla_month": month, "sla_timezone": tz,
                                   "sla_tier": "gold"}, progress=Progress(stream=open(os.devnull, "w")), timeout=300)
    finally:
        if "start_confirmed" not in truth:  # never leave the host down for the next tests
            test_cluster.start_sshd(victim)
        (base / "truth.json").write_text(json.dumps(truth))  # for a look afterwards (--basetemp)
    return {"out": out, "names": names, "victim": victim, "truth": truth, "runs": runs, "review": review,
            "concurrent": concurrent, "month": month, "tz": tz, "inventory": inventory,
            "store": out / "testcluster" / "sla" / "healthprobe.sqlite",
            "dir": out / "testcluster" / "sla" / month}


def test_every_probe_run_succeeds_and_records_every_host(sla_run):
    runs = sla_run["runs"]
    assert [(r.status, r.rc) for r in runs] == [("successful", 0)] * (SAMPLED_RUNS + 1), runs[-1].stdout[-3000:]
    assert any("SLA probe | sample the node" in line for line in runs[0].progress)
    rows = read_samples(str(sla_run["store"]))
    rounds = sorted({r["round_id"]: r["sampled_at_us"] for r in rows}.items(), key=lambda kv: kv[1])
    assert len(rounds) == SAMPLED_RUNS + 2 and len(rows) == len(rounds) * 4
    assert {r["host"] for r in rows} == set(sla_run["names"])
    down = [r for r in rows if r["state"] == "down"]
    assert {r["host"] for r in down} == {sla_run["victim"]}
    assert all("Connection refused" in r["reason"] for r in down)
    down_rounds = {r["round_id"] for r in down}
    assert down_rounds == {rounds[1][0], rounds[2][0]}  # runs 2 and 3 ran while the host was down
    assert all(r["boot_id"] and r["uptime_s"] > 0 for r in rows if r["state"] == "up")


def test_two_overlapping_probe_runs_both_land(sla_run):
    """The last two rounds ran at once (one through the clustermax-run console script): both are stored whole."""
    out, err, rc = sla_run["concurrent"]
    assert rc == 0, err[-3000:]
    assert json.loads(out.splitlines()[-1])["status"] == "successful"
    assert "PLAY Health probe" in err  # the progress display went to stderr
    rows = read_samples(str(sla_run["store"]))
    last_two = sorted({r["round_id"]: r["sampled_at_us"] for r in rows}.items(), key=lambda kv: kv[1])[-2:]
    for round_id, _ in last_two:
        assert sorted(r["host"] for r in rows if r["round_id"] == round_id) == sla_run["names"]


def test_downtime_within_one_sample_interval_of_the_truth(sla_run):
    review, truth, victim = sla_run["review"], sla_run["truth"], sla_run["victim"]
    assert (review.status, review.rc) == ("successful", 0), review.stdout[-3000:]
    rows = read_samples(str(sla_run["store"]))
    times = sorted({r["sampled_at_us"] for r in rows})
    interval = max(b - a for a, b in zip(times, times[1:])) / US  # the longest spacing between two samples
    summary = json.loads((sla_run["dir"] / "summary.json").read_text())
    measured = summary["nodes"][victim]["down_s"]
    true_s = truth["start"] - truth["stop"]  # from sshd gone to sshd told to start (it listens within ms)
    assert abs(measured - true_s) <= interval, (measured, true_s, interval, truth)
    with open(sla_run["dir"] / "downtime.csv") as fh:
        [row] = [r for r in csv.DictReader(fh)]
    assert row["node"] == victim and row["cause"] == "node"
    assert abs(parse_time(row["start"]) / US - truth["stop"]) <= interval
    assert abs(parse_time(row["end"]) / US - truth["start"]) <= interval
    for other in sla_run["names"]:
        if other != victim:
            assert summary["nodes"][other]["down_s"] == 0 and summary["nodes"][other]["availability_pct"] == 100
    assert summary["tier"] == "gold" and summary["timezone"] == sla_run["tz"] and summary["partial"] is True


def test_the_evidence_names_the_samples(sla_run):
    victim = sla_run["victim"]
    down_ids = [r["id"] for r in read_samples(str(sla_run["store"])) if r["state"] == "down"]
    evidence = json.loads((sla_run["dir"] / "evidence.json").read_text())
    [interval] = evidence["downtime"]
    [event_id] = interval["evidence"]
    event = evidence["events"][event_id]
    assert event["target"] == victim and event["source"] == "healthprobe"
    assert event["evidence"]["samples"] == down_ids and event["evidence"]["open"] is False
    md = (sla_run["dir"] / "review.md").read_text()
    assert event_id in md and "| node | %s |" % victim in md
    assert (sla_run["dir"] / "review.html").read_text().startswith("<!DOCTYPE html>")
    sums = subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=sla_run["dir"], capture_output=True,
                          text=True)
    assert sums.returncode == 0, sums.stdout + sums.stderr
    manifest = json.loads((sla_run["dir"] / "manifest.json").read_text())
    assert "inputs/healthprobe_samples.csv" in {i["path"] for i in manifest["inputs"]}
