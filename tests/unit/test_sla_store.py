"""The health-probe store: atomic rounds, idempotent appends, concurrent writers; and the interval arithmetic."""

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from reports.sla import intervals as iv
from reports.sla.store import StoreError, append_round, read_samples
from reports.sla.timeutil import parse_time

ROOT = Path(__file__).resolve().parents[2]
UP = (ROOT / "tests" / "fixtures" / "healthprobe" / "cpu_only.txt").read_text()


def round_doc(i, hosts=("n1", "n2"), down=()):
    return {"round_id": "r%04d" % i, "started_at": "2026-11-10T10:%02d:%02dZ" % (i // 60 % 60, i % 60),
            "interval_s": 300,
            "hosts": {h: ({"unreachable": True, "msg": "timed out"} if h in down else {"rc": 0, "stdout": UP})
                      for h in hosts}}


def test_a_round_is_stored_once(tmp_path):
    db = str(tmp_path / "sla" / "healthprobe.sqlite")
    first = append_round(db, round_doc(1, down=("n2",)))
    again = append_round(db, round_doc(1, down=("n2",)))
    assert first["stored"] is True and first["down"] == ["n2"] and again["stored"] is False
    rows = read_samples(db)
    assert [(r["host"], r["state"], r["interval_s"]) for r in rows] == [("n1", "up", 300.0), ("n2", "down", 300.0)]
    assert rows[1]["reason"] == "unreachable: timed out" and rows[0]["uptime_s"] == 1234567.89
    assert all(r["sampled_at_us"] == parse_time("2026-11-10T10:00:01Z") for r in rows)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert read_samples(db, parse_time("2026-11-10T10:00:02Z"), parse_time("2026-11-11T00:00:00Z")) == []


def test_a_bad_round_leaves_nothing(tmp_path):
    db = str(tmp_path / "store.sqlite")
    append_round(db, round_doc(1))
    with pytest.raises(StoreError):
        append_round(db, {"started_at": "2026-11-10T10:00:00Z", "hosts": [{"host": "a"}, {"host": "a"}]})
    with pytest.raises(StoreError):
        append_round(db, {"hosts": []})
    assert len(read_samples(db)) == 2


WRITER = """
import sys
sys.path.insert(0, sys.argv[1])
from tests.unit.test_sla_store import round_doc
from reports.sla.store import append_round
db, worker, rounds = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
for i in range(rounds):
    append_round(db, round_doc(worker * 1000 + i, hosts=("a", "b", "c", "d")))
"""


def test_concurrent_writers_lose_nothing(tmp_path):
    """Four processes appending at once to a store none of them created: every round, complete, exactly once."""
    db = str(tmp_path / "new" / "healthprobe.sqlite")
    # Separate interpreters, as the playbook's appends are: forking the test process (threads, open handles) can hang.
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(ROOT), db, str(w), "25"], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    try:
        errors = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM rounds").fetchone()[0] == 100
        per_round = conn.execute("SELECT count(*) FROM samples GROUP BY round_id").fetchall()
    assert len(per_round) == 100 and {n for (n,) in per_round} == {4}


def test_the_append_command_the_playbook_runs(tmp_path):
    db = tmp_path / "hp.sqlite"
    argv = [sys.executable, "-m", "reports.sla", "append", "--db", str(db)]
    ok = subprocess.run(argv, input=json.dumps(round_doc(7)), capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["samples"] == 2
    bad = subprocess.run(argv, input="{not json", capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert bad.returncode == 2 and "error" in json.loads(bad.stdout)


def test_interval_arithmetic():
    assert iv.merge([(5, 7), (1, 3), (3, 4), (6, 9), (10, 10)]) == [(1, 4), (5, 9)]
    assert iv.clip([(0, 10), (20, 30)], 5, 25) == [(5, 10), (20, 25)]
    assert iv.subtract([(0, 10)], [(2, 3), (5, 7), (9, 12)]) == [(0, 2), (3, 5), (7, 9)]
    assert iv.intersect([(0, 5), (8, 12)], [(3, 9)]) == [(3, 5), (8, 9)]
    assert iv.total([(0, 5), (3, 8)]) == 8
    assert iv.at_least([([(0, 10)], 1), ([(5, 15)], 1), ([(8, 9)], 1)], 2) == [(5, 10)]
    assert iv.at_least([([(0, 10)], 1), ([(0, 10), (2, 4)], 1)], 2) == [(0, 10)]  # a member counts once
    assert iv.at_least([([(0, 4)], 3)], 2) == [(0, 4)]  # a weighted record
    assert iv.drop_shorter([(0, 1), (5, 9)], 2) == [(5, 9)]
    with pytest.raises(ValueError):
        iv.at_least([], 0)
