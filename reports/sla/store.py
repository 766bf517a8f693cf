"""The health probe's durable store: one SQLite file per provider (runs/<provider>/sla/healthprobe.sqlite).

Written by playbooks/healthprobe.yml on the controller (`python -m reports.sla append --db FILE` with one round as
JSON on stdin), read by the review through reports/sla/sources/healthprobe.py. Standard library only, so the
append that runs every 5 minutes starts fast.

Safe when two probe runs overlap (an AWX schedule firing while a slow run still writes): WAL journal, a busy
timeout, and each round inserted in one `BEGIN IMMEDIATE` transaction, so a round is either all there or absent;
the round id is the primary key, so a retried append never doubles a round. WAL needs a local filesystem (not NFS).

Tables (times as UTC microseconds, plus the same instant as RFC 3339 text for people reading the file):
  rounds(round_id, started_at_us, finished_at_us, interval_s, source, controller, hosts, inserted_at_us, ...)
  samples(id, round_id, host, sampled_at_us, state 'up'|'down', reason, boot_id, uptime_s, gpus_found, gpu_rc)
  slurm(id, round_id, host, observed_at_us, rc, format, text)   -- optional Slurm snapshots (scontrol -o show node)
A sample's time is its round's start (one instant for all hosts of the round; the controller's clock, never a
node's). gpus_found is NULL when the node has no nvidia-smi (unknown, not zero).
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import sys
import time
import uuid

from reports.sla.timeutil import iso_utc, now_us, parse_time

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30000
_BOOT_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_GPU_LINE = re.compile(r"^GPU \d+: ")
_GPU_RC = re.compile(r"^nvidia-smi-rc=(\d+)$")

DDL = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rounds(
  round_id TEXT PRIMARY KEY,
  started_at_us INTEGER NOT NULL, started_at TEXT NOT NULL,
  finished_at_us INTEGER NOT NULL, finished_at TEXT NOT NULL,
  interval_s REAL, source TEXT NOT NULL, controller TEXT, hosts INTEGER NOT NULL,
  inserted_at_us INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS samples(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  round_id TEXT NOT NULL REFERENCES rounds(round_id),
  host TEXT NOT NULL, sampled_at_us INTEGER NOT NULL, sampled_at TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('up', 'down')), reason TEXT NOT NULL DEFAULT '',
  boot_id TEXT, uptime_s REAL, gpus_found INTEGER, gpu_rc INTEGER);
CREATE INDEX IF NOT EXISTS samples_host_time ON samples(host, sampled_at_us);
CREATE TABLE IF NOT EXISTS slurm(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  round_id TEXT NOT NULL REFERENCES rounds(round_id),
  host TEXT NOT NULL, observed_at_us INTEGER NOT NULL, observed_at TEXT NOT NULL,
  rc INTEGER, format TEXT NOT NULL, text TEXT NOT NULL);
"""


class StoreError(ValueError):
    """A round that cannot be stored as given."""


def connect(path: str, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect("file:%s?mode=ro" % os.path.abspath(path), uri=True, timeout=BUSY_TIMEOUT_MS / 1000,
                               isolation_level=None)
        conn.execute("PRAGMA busy_timeout=%d" % BUSY_TIMEOUT_MS)
        return conn
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, so the write lock is taken before anything is read.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=%d" % BUSY_TIMEOUT_MS)
    # Switching a new file to WAL takes an exclusive lock and SQLite may answer "locked" at once instead of waiting
    # for the busy timeout (two first writers at the same moment): retry for as long as the timeout.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def parse_node_output(stdout: str) -> dict:
    """The probe command's output: boot id, uptime, and (when nvidia-smi exists) the GPU lines and its exit code."""
    out = {"boot_id": None, "uptime_s": None, "gpus_found": None, "gpu_rc": None}
    lines = [line.strip() for line in (stdout or "").splitlines() if line.strip()]
    if lines and _BOOT_ID.match(lines[0]):
        out["boot_id"] = lines[0]
    if len(lines) > 1:
        try:
            out["uptime_s"] = float(lines[1].split()[0])
        except (ValueError, IndexError):
            pass
    rc = next((int(m.group(1)) for m in (_GPU_RC.match(x) for x in lines) if m), None)
    if rc is not None:
        out["gpu_rc"] = rc
        out["gpus_found"] = sum(1 for x in lines if _GPU_LINE.match(x)) if rc == 0 else 0
    return out


# The reasons of a down sample whose node never answered (the connection failed, or no result came back in time):
# the controller may be the one cut off (reports/sla/sources/healthprobe.py: monitoring outages).
UNREACHABLE = "unreachable: "
NO_RESULT = "probe failed: "


def answered(sample: dict) -> bool:
    """Whether the node answered the probe at all: up, or down with what it said (a failed command)."""
    return not (sample.get("reason") or "").startswith((UNREACHABLE, NO_RESULT))


def sample_from_result(result: dict) -> dict:
    """One host's registered task result -> a sample row (state and the reason when down)."""
    host = str(result.get("host") or "")
    if not host:
        raise StoreError("a host result without a host name")
    if result.get("unreachable"):
        msg = str(result.get("msg") or "unreachable").strip()
        return {"host": host, "state": "down", "reason": UNREACHABLE + msg[:500]}
    parsed = parse_node_output(result.get("stdout") or "")
    rc = result.get("rc")
    if rc is None and (result.get("failed") or parsed["boot_id"] is None):  # e.g. no answer within the timeout
        reason = NO_RESULT + str(result.get("msg") or "no result").strip()[:500]
    elif rc not in (None, 0):
        detail = (result.get("stderr") or result.get("stdout") or result.get("msg") or "").strip()
        reason = "probe command failed (rc %s): %s" % (rc, detail[:500])
    elif parsed["boot_id"] is None:  # connected, yet the answer is not what the command prints (twice in a row)
        reason = "unexpected answer: %s" % ((result.get("stdout") or "").strip()[:200] or "(empty)")
    else:
        return {"host": host, "state": "up", "reason": "", **parsed}
    return {"host": host, "state": "down", "reason": reason, **parsed}


def append_round(path: str, doc: dict) -> dict:
    """Store one round (all hosts of one probe run) atomically; returns a summary. Idempotent per round_id."""
    round_id = str(doc.get("round_id") or uuid.uuid4())
    try:
        started = parse_time(doc["started_at"])
    except KeyError:
        raise StoreError("the round has no started_at") from None
    finished = parse_time(doc["finished_at"]) if doc.get("finished_at") else now_us()
    if finished < started:
        finished = started
    hosts = doc.get("hosts")
    if isinstance(hosts, dict):  # {host: registered result}, as the sla role passes it
        hosts = [{**(result or {}), "host": name} for name, result in hosts.items()]
    if not isinstance(hosts, list):
        raise StoreError("the round has no hosts list")
    samples = [sample_from_result(h) for h in hosts]
    names = [s["host"] for s in samples]
    if len(set(names)) != len(names):
        raise StoreError("a host appears twice in one round: %s" % sorted({n for n in names if names.count(n) > 1}))
    interval = doc.get("interval_s")
    rows = {"round": (round_id, started, iso_utc(started), finished, iso_utc(finished),
                      float(interval) if interval not in (None, "") else None, str(doc.get("source") or "healthprobe"),
                      str(doc.get("controller") or socket.gethostname()), len(samples)),
            "samples": [(round_id, s["host"], started, iso_utc(started), s["state"], s["reason"], s.get("boot_id"),
                         s.get("uptime_s"), s.get("gpus_found"), s.get("gpu_rc")) for s in samples],
            "slurm": None}
    slurm = doc.get("slurm")
    if slurm and slurm.get("text") is not None:
        observed = parse_time(slurm["observed_at"]) if slurm.get("observed_at") else started
        rows["slurm"] = (round_id, str(slurm.get("host") or ""), observed, iso_utc(observed), slurm.get("rc"),
                         str(slurm.get("format") or "scontrol-oneliner"), str(slurm.get("text")))
    # Busy waits happen inside SQLite (busy timeout); a "locked" that SQLite returns at once (lock upgrades between
    # two writers) is retried here: the transaction either committed whole or not at all, and the round id makes a
    # retry harmless.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            inserted = _insert(path, rows)
            break
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    down = sorted(s["host"] for s in samples if s["state"] == "down")
    return {"db": os.path.abspath(path), "round_id": round_id, "stored": inserted, "samples": len(samples),
            "down": down, "started_at": iso_utc(started)}


def _insert(path: str, rows: dict) -> bool:
    conn = connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in DDL.split(";"):  # not executescript(): it would COMMIT the transaction first
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            cur = conn.execute(
                "INSERT OR IGNORE INTO rounds(round_id, started_at_us, started_at, finished_at_us, finished_at, "
                "interval_s, source, controller, hosts, inserted_at_us) VALUES (?,?,?,?,?,?,?,?,?,?)",
                rows["round"] + (now_us(),))
            inserted = cur.rowcount == 1
            if inserted:
                conn.executemany(
                    "INSERT INTO samples(round_id, host, sampled_at_us, sampled_at, state, reason, boot_id, uptime_s,"
                    " gpus_found, gpu_rc) VALUES (?,?,?,?,?,?,?,?,?,?)", rows["samples"])
                if rows["slurm"]:
                    conn.execute("INSERT INTO slurm(round_id, host, observed_at_us, observed_at, rc, format, text) "
                                 "VALUES (?,?,?,?,?,?,?)", rows["slurm"])
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return inserted


def _read(path: str, query: str, time_column: str, order: str, start_us: int | None, end_us: int | None,
          missing_table_ok: bool = False) -> list[dict]:
    """Rows of `query` as dicts, optionally only those with time_column in [start, end); [] when there is no store.
    missing_table_ok: a store made before that table existed answers [] instead of raising."""
    if not os.path.exists(path):
        return []
    conn = connect(path, readonly=True)
    conn.row_factory = sqlite3.Row
    try:
        args: list = []
        if start_us is not None and end_us is not None:
            query += " WHERE %s >= ? AND %s < ?" % (time_column, time_column)
            args = [start_us, end_us]
        return [dict(row) for row in conn.execute(query + " ORDER BY " + order, args)]
    except sqlite3.OperationalError:
        if missing_table_ok:
            return []
        raise
    finally:
        conn.close()


def read_samples(path: str, start_us: int | None = None, end_us: int | None = None) -> list[dict]:
    """Samples (with their round's interval) ordered by host and time; optionally only those in [start, end)."""
    return _read(path, "SELECT s.*, r.interval_s AS interval_s FROM samples s JOIN rounds r USING (round_id)",
                 "s.sampled_at_us", "s.host, s.sampled_at_us, s.id", start_us, end_us)


def read_slurm(path: str, start_us: int | None = None, end_us: int | None = None) -> list[dict]:
    """Scheduler snapshots (with their round's interval, as samples) in time order; optionally only those in
    [start, end)."""
    return _read(path, "SELECT s.*, r.interval_s AS interval_s FROM slurm s LEFT JOIN rounds r USING (round_id)",
                 "s.observed_at_us", "s.observed_at_us, s.id", start_us, end_us, missing_table_ok=True)


def main_append(db: str, stream=None) -> int:
    stream = stream or sys.stdin
    try:
        doc = json.load(stream)
        summary = append_round(db, doc)
    except (ValueError, StoreError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps(summary))
    return 0
