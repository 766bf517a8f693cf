"""The clustermax.assess.assessment callback and its Journal, driven with plain objects (no ansible-core TaskResult)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The checkout is the collection through .collections/ansible_collections/clustermax/assess -> ../../..
if str(ROOT / ".collections") not in sys.path:
    sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.clustermax.assess.plugins.callback import assessment  # noqa: E402
from ansible_collections.clustermax.assess.plugins.callback.assessment import (  # noqa: E402
    COLLECTION_ROOT,
    CallbackModule,
    _host_of,
    _result_of,
    _task_of,
)
from ansible_collections.clustermax.assess.plugins.plugin_utils import journal as journal_mod  # noqa: E402
from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import (  # noqa: E402
    CENSORED,
    RUN_SCHEMA,
    Journal,
    parse_rfc3339,
    result_line,
    rfc3339,
)

SECRET = "hunter2-Zq9"


# ------------------------------------------------------------------------------------------------ fakes


class FakeDisplay:
    verbosity = 0

    def __init__(self):
        self.warnings, self.messages, self.notes = [], [], []

    def warning(self, msg, *args, **kwargs):
        self.warnings.append(msg)

    def display(self, msg, *args, **kwargs):
        self.messages.append(msg)

    def vvv(self, msg, *args, **kwargs):
        self.notes.append(msg)


def fake_host(name):
    return SimpleNamespace(name=name, get_name=lambda: name)


def fake_task(name, action="ansible.builtin.command", *, uuid=None, no_log=None, role=None, parent=None):
    return SimpleNamespace(
        name=name,
        get_name=lambda: name,
        action=action,
        _resolved_action=action,
        _uuid=uuid or f"uuid-{name}",
        no_log=no_log,
        _role=SimpleNamespace(get_name=lambda: role) if role else None,
        _parent=parent,
    )


def fake_result(host, task, **result):
    """The 2.19+ shape: public .result/.host/.task."""
    return SimpleNamespace(result=result, host=fake_host(host), task=task)


def fake_result_218(host, task, **result):
    """The 2.18 shape: only _result/_host/_task."""
    return SimpleNamespace(_result=result, _host=fake_host(host), _task=task)


class FakeStats:
    def __init__(self, per_host):
        self._per_host = per_host
        self.processed = dict.fromkeys(per_host, 1)

    def summarize(self, host):
        counts = dict(ok=0, failures=0, unreachable=0, changed=0, skipped=0, rescued=0, ignored=0)
        counts.update(self._per_host[host])
        return counts


def run_fact(run_dir, **extra):
    run = {"id": "run-7", "dir": str(run_dir), "provider": "acme", "profile": "quick",
           "started_at": "2026-11-30T10:00:00Z"}
    run.update(extra)
    return {"assess_run": run}


def announce(cb, run_dir, host="localhost"):
    task = fake_task("Announce the run", "ansible.builtin.set_fact")
    cb.v2_runner_on_ok(fake_result(host, task, changed=False, ansible_facts=run_fact(run_dir)))


def read_lines(run_dir):
    with open(os.path.join(run_dir, "journal.jsonl"), encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def task_lines(run_dir):
    return [line for line in read_lines(run_dir) if "event" not in line]


@pytest.fixture
def display():
    return FakeDisplay()


@pytest.fixture
def cb(display):
    callback = CallbackModule(display=display)
    callback.configure(report=False)
    return callback


@pytest.fixture
def no_subprocess(monkeypatch):
    calls = []

    def refuse(argv, **kwargs):
        calls.append(argv)
        raise AssertionError(f"subprocess.run must not be called: {argv}")

    monkeypatch.setattr(subprocess, "run", refuse)
    return calls


# --------------------------------------------------------------------------------------------- accessors


def test_accessors_read_the_2_19_and_the_2_18_result_shapes():
    task = fake_task("t")
    new, old = fake_result("n1", task, rc=0), fake_result_218("n2", task, rc=1)
    assert _result_of(new) == {"rc": 0} and _result_of(old) == {"rc": 1}
    assert _host_of(new).get_name() == "n1" and _host_of(old).get_name() == "n2"
    assert _task_of(new) is task and _task_of(old) is task
    assert _result_of(SimpleNamespace()) == {}


def test_a_2_18_shaped_result_is_journaled_like_a_2_19_one(cb, tmp_path):
    run_dir = tmp_path / "run"
    announce(cb, run_dir)
    cb.v2_runner_on_failed(fake_result_218("node1", fake_task("Probe"), msg="boom", rc=2))
    line = task_lines(run_dir)[-1]
    assert (line["host"], line["task"], line["status"], line["msg"]) == ("node1", "Probe", "failed", "boom")


def test_every_play_start_preloads_the_jinja_plugins_before_its_workers_fork(cb, monkeypatch):
    """plugin_utils/worker_preload.py; what the preload buys a forked worker is tests/unit/test_worker_preload.py."""
    calls = []
    monkeypatch.setattr(assessment, "load_jinja_plugins", lambda: calls.append("load"))
    for name in ("Preflight", "Audit", "Cleanup | leave nothing of the run on the nodes"):
        cb.v2_playbook_on_play_start(SimpleNamespace(get_name=lambda name=name: name, hosts="all"))
    assert calls == ["load"] * 3
    assert cb._display.warnings == []


def test_a_preload_that_fails_is_a_warning_and_the_play_start_is_journaled(cb, monkeypatch):
    def broken():
        raise RuntimeError("a broken filter file")

    monkeypatch.setattr(assessment, "load_jinja_plugins", broken)
    cb.v2_playbook_on_play_start(SimpleNamespace(get_name=lambda: "Audit", hosts="all"))
    assert [w for w in cb._display.warnings if "a broken filter file" in w] == cb._display.warnings
    assert len(cb._display.warnings) == 1
    assert cb.journal.buffered == 1  # the play_start line, kept until the run directory is known


# --------------------------------------------------------------------------------------- buffer, stream


def test_lines_wait_in_memory_until_the_run_dir_is_known_then_are_written_in_order(cb, tmp_path):
    run_dir = tmp_path / "runs" / "acme" / "run-7"
    play = SimpleNamespace(get_name=lambda: "Preflight", hosts=["localhost"])
    cb.v2_playbook_on_play_start(play)
    cb.v2_runner_on_ok(fake_result("localhost", fake_task("Check the controller"), changed=False))
    assert cb.journal.buffered == 2
    assert not run_dir.exists()

    announce(cb, run_dir)
    lines = read_lines(run_dir)
    assert [line.get("event") or line["task"] for line in lines] == [
        "play_start", "Check the controller", "controller", "Announce the run"]
    assert lines[0] == {"ts": lines[0]["ts"], "event": "play_start", "play": "Preflight", "hosts": ["localhost"]}
    # who writes the run, once it is known (playbooks/recover.yml refuses a run whose controller is alive)
    with open("/proc/self/stat") as fh:
        ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
    assert lines[2] == {"ts": lines[2]["ts"], "event": "controller", "machine": socket.gethostname(),
                        "pid": os.getpid(), "start_ticks": ticks}
    assert lines[1]["play"] == "Preflight" and lines[1]["status"] == "ok"
    assert cb.journal.buffered == 0
    assert sorted(os.listdir(run_dir)) == ["journal.jsonl"]

    # After that every line is on disk as soon as it is recorded (an interrupted run keeps it).
    cb.v2_runner_on_ok(fake_result("localhost", fake_task("Next"), changed=True))
    assert [line["task"] for line in task_lines(run_dir)][-1] == "Next"
    assert len(read_lines(run_dir)) == 5


def test_a_result_without_a_usable_assess_run_does_not_set_the_run_dir(tmp_path):
    journal = Journal()
    assert not journal.discover({"ansible_facts": {"assess_run": {"id": "x"}}})
    assert not journal.discover({"ansible_facts": {"assess_run": {"dir": ""}}})
    assert not journal.discover({"ansible_facts": {"other": {"dir": str(tmp_path)}}})
    assert journal.run_dir is None


def test_only_the_first_run_dir_counts(tmp_path, display):
    journal = Journal(note=display.vvv)
    assert journal.set_run({"dir": str(tmp_path / "a")})
    assert not journal.set_run({"dir": str(tmp_path / "b")})
    journal.record({"event": "x"})
    journal.close()
    assert journal.run_dir == str(tmp_path / "a")
    assert not (tmp_path / "b").exists()
    assert any("ignoring" in note for note in display.notes)


def test_the_buffer_is_bounded_and_the_gap_is_recorded(tmp_path):
    journal = Journal(max_buffered=2)
    for index in range(5):
        journal.record({"event": "n", "index": index})
    journal.set_run({"dir": str(tmp_path)})
    lines = read_lines(tmp_path)
    assert [line.get("event") for line in lines] == ["n", "n", "journal_gap", "controller"]
    assert [line.get("index") for line in lines[:2]] == [0, 1]
    assert lines[2]["dropped_lines"] == 3


class Odd:
    def __str__(self):
        return "odd value"


@pytest.mark.parametrize("use_callback_encoder", [False, True], ids=["plain-json", "ansible-encoder"])
def test_values_json_cannot_encode_are_written_as_text(tmp_path, cb, use_callback_encoder):
    journal = cb.journal if use_callback_encoder else Journal()
    journal.set_run({"dir": str(tmp_path)})
    journal.record({"event": "odd", "value": Odd(), "when": b"bytes"})
    [line] = [x for x in read_lines(tmp_path) if x["event"] == "odd"]
    assert line["value"] == "odd value" and "bytes" in line["when"]


def test_timestamps_are_rfc3339_utc():
    text = rfc3339(0)
    assert text == "1970-01-01T00:00:00.000Z"
    assert parse_rfc3339(text).timestamp() == 0
    assert parse_rfc3339("2026-11-30T10:00:00+01:00").timestamp() == parse_rfc3339("2026-11-30T09:00:00Z").timestamp()
    assert parse_rfc3339("yesterday") is None


# --------------------------------------------------------------------------------------------- statuses


def test_every_result_event_maps_to_its_status(cb, tmp_path):
    run_dir = tmp_path / "run"
    announce(cb, run_dir)
    cb.v2_runner_on_ok(fake_result("n1", fake_task("ok"), changed=False))
    cb.v2_runner_on_ok(fake_result("n1", fake_task("changed"), changed=True))
    cb.v2_runner_on_failed(fake_result("n1", fake_task("failed"), msg="non-zero return code", stderr="disk gone"))
    cb.v2_runner_on_failed(fake_result("n1", fake_task("ignored"), msg="nope"), ignore_errors=True)
    cb.v2_runner_on_skipped(fake_result("n1", fake_task("skipped"), skip_reason="Conditional result was False"))
    cb.v2_runner_on_unreachable(fake_result("n2", fake_task("unreachable"), msg="ssh: connect timed out"))
    cb.v2_runner_on_async_failed(fake_result("n1", fake_task("async"), msg="async task did not complete"))
    loop = fake_task("loop")
    cb.v2_runner_item_on_ok(fake_result("n1", loop, item="a", changed=True))
    cb.v2_runner_item_on_failed(fake_result("n1", loop, item="b", msg="bad b"))
    cb.v2_runner_item_on_skipped(fake_result("n1", loop, item="c", skip_reason="Conditional result was False"))

    got = [(line["task"], line["host"], line["status"], line.get("item")) for line in task_lines(run_dir)[1:]]
    assert got == [
        ("ok", "n1", "ok", None), ("changed", "n1", "changed", None), ("failed", "n1", "failed", None),
        ("ignored", "n1", "failed", None), ("skipped", "n1", "skipped", None),
        ("unreachable", "n2", "unreachable", None), ("async", "n1", "failed", None),
        ("loop", "n1", "changed", "a"), ("loop", "n1", "failed", "b"), ("loop", "n1", "skipped", "c"),
    ]
    by_task = {line["task"]: line for line in task_lines(run_dir) if "item" not in line}
    assert by_task["failed"]["msg"] == "non-zero return code: disk gone"
    assert by_task["failed"]["ignored"] is False and by_task["ignored"]["ignored"] is True
    assert by_task["unreachable"]["msg"] == "ssh: connect timed out"
    assert by_task["ok"]["msg"] is None and by_task["ok"]["action"] == "ansible.builtin.command"
    assert display_free_of_warnings(cb)


def display_free_of_warnings(cb):
    return cb._display.warnings == []


def test_role_and_resolved_action_are_recorded(cb, tmp_path):
    announce(cb, tmp_path)
    role = "clustermax.assess.audit"
    task = fake_task(f"{role} : Read the kernel", "ansible.builtin.slurp", role=role)
    cb.v2_runner_on_ok(fake_result("n1", task))
    line = task_lines(tmp_path)[-1]
    assert (line["role"], line["action"]) == ("clustermax.assess.audit", "ansible.builtin.slurp")
    assert task_lines(tmp_path)[0]["role"] is None


def test_a_failure_inside_a_block_with_rescue_is_marked_rescued(cb, tmp_path):
    announce(cb, tmp_path)
    guarded, recovery, outside = fake_task("guarded"), fake_task("recovery"), fake_task("outside")
    block = SimpleNamespace(_uuid="b1", block=[guarded], rescue=[recovery], always=[], _parent=None)
    guarded._parent = recovery._parent = block
    outside._parent = SimpleNamespace(_uuid="b2", block=[outside], rescue=[], always=[], _parent=None)
    for task in (guarded, recovery, outside):
        cb.v2_runner_on_failed(fake_result("n1", task, msg="x"))
    assert {line["task"]: line["rescued"] for line in task_lines(tmp_path)[1:]} == {
        "guarded": True, "recovery": False, "outside": False}


def test_the_skip_reason_names_the_false_condition(cb, tmp_path):
    announce(cb, tmp_path)
    cb.v2_runner_on_skipped(fake_result("n1", fake_task("reboot"), skip_reason="Conditional result was False",
                                        false_condition="assess_allow_destructive | bool"))
    cb.v2_runner_on_skipped(fake_result("n1", fake_task("burnin"), false_condition="assess_profile == 'full'"))
    cb.v2_runner_on_skipped(fake_result("n1", fake_task("gpu"), skip_reason="no GPU visible"))
    assert [line["skip_reason"] for line in task_lines(tmp_path)[1:]] == [
        "Conditional result was False: assess_allow_destructive | bool",
        "Conditional result was False: assess_profile == 'full'",
        "no GPU visible",
    ]


def test_probe_results_carry_probe_and_artifact(cb, tmp_path):
    announce(cb, tmp_path)
    fields = dict(probe="gemm", variant="bf16", artifact="/runs/acme/run-7/artifacts/n1/gemm-bf16.json")
    cb.v2_runner_on_ok(fake_result("n1", fake_task("GEMM", "clustermax.assess.probe"), **fields))
    cb.v2_runner_on_ok(fake_result("n1", fake_task("Not a probe"), **fields))
    probe_line, other_line = task_lines(tmp_path)[1:]
    assert {key: probe_line[key] for key in fields} == fields
    assert not set(fields) & set(other_line)


# ------------------------------------------------------------------------------------------------ no_log


def test_no_log_results_never_reach_the_journal(cb, tmp_path):
    run_dir = tmp_path / "run"
    announce(cb, run_dir)
    leaky = dict(msg=f"password {SECRET} rejected", stderr=SECRET, stdout=SECRET, cmd=["login", SECRET])
    # ansible marks the result...
    cb.v2_runner_on_failed(fake_result("n1", fake_task("login"), _ansible_no_log=True, **leaky))
    # ...or only the task says no_log (a result shaped like 2.18's censored one, or not censored at all)
    cb.v2_runner_on_unreachable(fake_result("n1", fake_task("connect", no_log=True), **leaky))
    cb.v2_runner_on_skipped(fake_result("n1", fake_task("skip", no_log=True), skip_reason=SECRET))
    loop = fake_task("items")
    cb.v2_runner_item_on_failed(fake_result("n1", loop, _ansible_no_log=True, item=SECRET, **leaky))
    cb.v2_runner_item_on_ok(fake_result("n1", loop, _ansible_no_log=True, _ansible_item_label=SECRET))
    probe = fake_task("probe", "clustermax.assess.probe", no_log=True)
    cb.v2_runner_on_ok(fake_result("n1", probe, probe=SECRET, artifact=SECRET))

    text = (run_dir / "journal.jsonl").read_text()
    assert SECRET not in text
    lines = task_lines(run_dir)[1:]
    assert [line["msg"] for line in lines[:2]] == [CENSORED, CENSORED]
    assert lines[2]["skip_reason"] == CENSORED
    assert [line["item"] for line in lines[3:5]] == [CENSORED, CENSORED]
    assert (lines[5]["probe"], lines[5]["artifact"]) == (CENSORED, CENSORED)


def test_a_line_without_no_log_keeps_its_message():
    line = result_line(host="n1", status="failed", result={"msg": "boom"})
    assert line["msg"] == "boom"
    with pytest.raises(ValueError):
        result_line(host="n1", status="weird", result={})


# ---------------------------------------------------------------------------------------------- duration


class Clock:
    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


def test_duration_runs_from_the_hosts_start_and_falls_back_to_the_task_start(cb, tmp_path, monkeypatch):
    clock = Clock()
    monkeypatch.setattr(assessment.time, "monotonic", clock)
    announce(cb, tmp_path)
    task = fake_task("fio")
    cb.v2_playbook_on_task_start(task, False)            # t=100
    clock.now = 101.0
    cb.v2_runner_on_start(fake_host("n1"), task)          # n1 starts at 101
    clock.now = 103.5
    cb.v2_runner_on_ok(fake_result("n1", task))           # n1: 2.5 s
    cb.v2_runner_on_ok(fake_result("n2", task))           # n2 never started: from the task start, 3.5 s
    loop = fake_task("sweep")
    cb.v2_runner_on_start(fake_host("n1"), loop)          # 103.5
    clock.now = 104.0
    cb.v2_runner_item_on_ok(fake_result("n1", loop, item=1))   # 0.5 s
    clock.now = 106.0
    cb.v2_runner_item_on_ok(fake_result("n1", loop, item=2))   # 2.0 s
    cb.v2_runner_on_ok(fake_result("n1", loop))                # whole loop 2.5 s
    orphan = fake_task("orphan")
    cb.v2_runner_on_ok(fake_result("n1", orphan))              # no start event at all
    durations = [line["duration_s"] for line in task_lines(tmp_path)[1:]]
    assert durations == [2.5, 3.5, 0.5, 2.0, 2.5, None]


# -------------------------------------------------------------------------------------------- run.json


def test_stats_write_run_json_and_a_final_journal_line(cb, tmp_path, no_subprocess):
    run_dir = tmp_path / "runs" / "acme" / "run-7"
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="/repo/playbooks/assess.yml"))
    announce(cb, run_dir)
    cb.v2_runner_on_start(fake_host("n3"), fake_task("seen only here"))
    cb.v2_runner_on_unreachable(fake_result("n2", fake_task("Gather"), msg="timed out"))
    stats = FakeStats({
        "localhost": {"ok": 3},
        "n1": {"ok": 10, "changed": 2, "failures": 1, "skipped": 4, "rescued": 1, "ignored": 2},
        "n2": {"unreachable": 1},
    })
    cb.v2_playbook_on_stats(stats)

    summary = json.loads((run_dir / "run.json").read_text())
    assert summary["schema"] == RUN_SCHEMA
    assert (summary["run_id"], summary["provider"], summary["profile"]) == ("run-7", "acme", "quick")
    assert summary["playbook"] == "assess.yml"
    assert summary["started_at"] == "2026-11-30T10:00:00Z"
    finished = parse_rfc3339(summary["finished_at"])
    assert summary["duration_s"] == pytest.approx((finished - parse_rfc3339(summary["started_at"])).total_seconds())
    assert summary["ansible_version"] == assessment.ansible_version
    assert summary["collection_version"] == journal_mod.collection_version(str(ROOT))
    assert summary["hosts"] == ["localhost", "n1", "n2", "n3"]
    assert summary["stats"]["n1"] == {"ok": 10, "changed": 2, "failures": 1, "unreachable": 0, "skipped": 4,
                                      "rescued": 1, "ignored": 2}
    assert summary["stats"]["n2"]["unreachable"] == 1
    assert set(summary["stats"]) == {"localhost", "n1", "n2"}
    assert summary["unreachable_hosts"] == ["n2"] and summary["failed_hosts"] == ["n1"]
    assert summary["interrupted"] is False

    last = read_lines(run_dir)[-1]
    assert last["event"] == "stats" and last["stats"] == summary["stats"]
    assert sorted(os.listdir(run_dir)) == ["journal.jsonl", "run.json"]
    assert no_subprocess == []  # report disabled in the fixture


def test_collection_version_comes_from_galaxy_yml_or_manifest(tmp_path):
    (tmp_path / "galaxy.yml").write_text("namespace: clustermax\nname: assess\nversion: 1.2.3\n")
    assert journal_mod.collection_version(str(tmp_path)) == "1.2.3"
    (tmp_path / "galaxy.yml").unlink()
    (tmp_path / "MANIFEST.json").write_text(json.dumps({"collection_info": {"version": "2.0.0"}}))
    assert journal_mod.collection_version(str(tmp_path)) == "2.0.0"
    (tmp_path / "MANIFEST.json").unlink()
    assert journal_mod.collection_version(str(tmp_path)) is None


def test_without_a_run_dir_nothing_is_written_and_nothing_warned(display, tmp_path, monkeypatch, no_subprocess):
    monkeypatch.chdir(tmp_path)
    cb = CallbackModule(display=display)  # report left enabled: it must still not run
    cb.v2_playbook_on_start(SimpleNamespace(_file_name="assess.yml"))
    cb.v2_playbook_on_play_start(SimpleNamespace(get_name=lambda: "Preflight", hosts="all"))
    cb.v2_runner_on_failed(fake_result("localhost", fake_task("Validate inputs"), msg="assess_profile is wrong"))
    cb.v2_playbook_on_stats(FakeStats({"localhost": {"failures": 1}}))
    assert list(tmp_path.iterdir()) == []
    assert display.warnings == [] and display.messages == []
    assert any("nothing written" in note for note in display.notes)
    assert no_subprocess == []


# --------------------------------------------------------------------------------------- I/O failures


def test_a_run_dir_that_is_a_file_gives_a_warning_not_an_exception(cb, display, tmp_path):
    blocker = tmp_path / "run"
    blocker.write_text("not a directory")
    announce(cb, blocker)
    cb.v2_runner_on_ok(fake_result("n1", fake_task("after")))
    cb.v2_playbook_on_stats(FakeStats({"n1": {"ok": 1}}))
    assert blocker.read_text() == "not a directory"
    assert len(display.warnings) == 2  # the journal, once; run.json, once
    assert all(warning.startswith("clustermax.assess.assessment callback:") for warning in display.warnings)
    assert "journal" in display.warnings[0] and "run.json" in display.warnings[1]


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full to simulate a full disk")
def test_a_full_disk_mid_run_gives_one_warning_and_the_run_goes_on(cb, display, tmp_path, no_subprocess):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    os.symlink("/dev/full", run_dir / "journal.jsonl")
    announce(cb, run_dir)
    for index in range(3):
        cb.v2_runner_on_ok(fake_result("n1", fake_task(f"t{index}")))
    assert len(display.warnings) == 1 and "No space left" in display.warnings[0]
    assert cb.journal.broken
    cb.v2_playbook_on_stats(FakeStats({"n1": {"ok": 4}}))
    # run.json is a separate file and still gets written
    assert json.loads((run_dir / "run.json").read_text())["stats"]["n1"]["ok"] == 4


def test_an_exception_inside_a_handler_becomes_a_warning(cb, display):
    class Exploding:
        @property
        def result(self):
            raise RuntimeError("kaboom")

    assert cb.v2_runner_on_ok(Exploding()) is None
    assert len(display.warnings) == 1
    assert "clustermax.assess.assessment" in display.warnings[0] and "kaboom" in display.warnings[0]
    assert "v2_runner_on_ok" in display.warnings[0]


# ----------------------------------------------------------------------------------------------- report


def completed(argv, returncode, stdout="", stderr=""):
    return subprocess.CompletedProcess(argv, returncode, stdout, stderr)


def finish_run(cb, run_dir):
    announce(cb, run_dir)
    cb.v2_playbook_on_stats(FakeStats({"localhost": {"ok": 1}}))


def test_the_report_is_built_with_the_collection_on_pythonpath(cb, display, tmp_path, monkeypatch):
    calls = []

    def fake_run(argv, **kwargs):
        calls.append((argv, kwargs))
        assert os.path.exists(os.path.join(argv[-1], "run.json")), "run.json must exist before the report builds"
        return completed(argv, 0, stdout="Tier: Gold (81.2)\nreport: /runs/acme/run-7/report/report.html\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    cb.configure(report=True, report_timeout=42)
    run_dir = tmp_path / "run"
    finish_run(cb, run_dir)

    assert len(calls) == 1
    argv, kwargs = calls[0]
    assert argv == [sys.executable, "-m", "reports", "build", str(run_dir)]
    assert kwargs["cwd"] == COLLECTION_ROOT == os.path.realpath(ROOT)
    assert kwargs["env"]["PYTHONPATH"] == os.pathsep.join([COLLECTION_ROOT, "/elsewhere"])
    assert kwargs["timeout"] == 42
    assert kwargs["capture_output"] is True
    assert display.messages == ["Tier: Gold (81.2)\nreport: /runs/acme/run-7/report/report.html"]
    assert display.warnings == []


def test_exit_1_means_failures_found_and_is_shown_as_is(cb, display, tmp_path, monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: completed(argv, 1, "Tier: Underperforming\n", ""))
    cb.configure(report=True)
    finish_run(cb, tmp_path / "run")
    assert display.messages == ["Tier: Underperforming"]
    assert display.warnings == []


def raise_timeout(argv, **kwargs):
    raise subprocess.TimeoutExpired(argv, kwargs["timeout"], output=b"", stderr=b"still grading gemm\n")


def raise_missing(argv, **kwargs):
    raise FileNotFoundError(2, "No such file or directory", argv[0])


@pytest.mark.parametrize("fake_run,needle", [
    (lambda argv, **kw: completed(argv, 2, "", "usage: reports build RUN_DIR\nerror: rubric.yml invalid\n"),
     "rubric.yml invalid"),
    (lambda argv, **kw: completed(argv, 1, "", "/venv/bin/python: No module named reports\n"), "No module named"),
    (lambda argv, **kw: completed(argv, 1, "", "Traceback (most recent call last):\nKeyError: 'gemm'\n"),
     "KeyError"),
    (lambda argv, **kw: completed(argv, -9, "", ""), "exit -9"),
    (raise_timeout, "timed out after 600s: still grading gemm"),
    (raise_missing, "could not start"),
], ids=["exit-2", "no-module", "traceback", "killed", "timeout", "no-python"])
def test_a_failed_report_build_is_a_warning(cb, display, tmp_path, monkeypatch, fake_run, needle):
    monkeypatch.setattr(subprocess, "run", fake_run)
    cb.configure(report=True)
    finish_run(cb, tmp_path / "run")
    assert len(display.warnings) == 1
    assert needle in display.warnings[0]
    assert display.warnings[0].startswith("clustermax.assess.assessment callback: report build")
    assert (tmp_path / "run" / "run.json").exists()


def test_report_disabled_builds_nothing(cb, tmp_path, no_subprocess):
    finish_run(cb, tmp_path / "run")
    assert no_subprocess == []
    assert (tmp_path / "run" / "run.json").exists()


def test_callback_identity():
    assert CallbackModule.CALLBACK_TYPE == "aggregate"
    assert CallbackModule.CALLBACK_NAME == "clustermax.assess.assessment"
    assert CallbackModule.CALLBACK_NEEDS_ENABLED is True
    assert CallbackModule.CALLBACK_VERSION == 2.0


def test_probe_name_from_task_args_when_the_result_lacks_it():
    from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import PROBE_ACTION, result_line

    line = result_line(host="n1", status="unreachable", result={"msg": "ssh: connect refused"}, play="p", task="t",
                       action=PROBE_ACTION, task_args={"name": "gemm", "variant": "bf16"})
    assert line["probe"] == "gemm" and line["variant"] == "bf16"
    line = result_line(host="n1", status="ok", result={"probe": "gemm", "variant": "fp8"}, play="p", task="t",
                       action=PROBE_ACTION, task_args={"name": "gemm", "variant": "{{ v }}"})
    assert line["variant"] == "fp8"  # the result, when present, is what ran
    assert "probe" not in result_line(host="n1", status="ok", result={}, play="p", task="t",
                                      action="ansible.builtin.command", task_args={"name": "x"})


def test_an_interrupted_runs_cleanup_keeps_the_inventory_limit_extra_vars_and_connection():
    """What the callback starts when Ctrl-C or SIGTERM ends a run before its cleanup play (CLIARGS as ansible-core
    parses `ansible-playbook assess.yml -i inv.ini -l gpu -e @v.json -e assess_remote_tmp=/scratch -u ops`)."""
    from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import cleanup_argv

    cli = {"inventory": ("inv.ini", "more.yml"), "subset": "gpu",
           "extra_vars": ("@v.json", "assess_remote_tmp=/scratch"), "remote_user": "ops", "private_key_file": None,
           "connection": "ssh"}
    assert cleanup_argv("20261204T000000Z-abc", cli, "/coll", ["/venv/bin/python", "/venv/bin/ansible-playbook"]) == [
        "/venv/bin/python", "/venv/bin/ansible-playbook", "/coll/playbooks/cleanup.yml", "-i", "inv.ini",
        "-i", "more.yml", "--limit", "gpu", "-e", "@v.json", "-e", "assess_remote_tmp=/scratch", "--user", "ops",
        "--connection", "ssh", "-e", "assess_cleanup_run=20261204T000000Z-abc"]


def test_an_interrupted_slice_cleans_up_its_run_not_a_run_named_after_the_slice(cb, tmp_path, monkeypatch):
    """A slice of a sliced run (AWX job slicing) writes under <run>/slices/<slice>; the nodes' lock and working
    directory are the run's. Before, the cleanup after Ctrl-C named the slice (assess_cleanup_run=4712) and left
    run 4711's processes, directory and lock on every node."""
    from ansible import context

    calls = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: calls.append(argv) or completed(argv, 0, "", ""))
    monkeypatch.setattr(context, "CLIARGS", {"inventory": ["provider.ini"], "extra_vars": [], "subset": None})
    slice_dir = tmp_path / "runs" / "acme" / "4711" / "slices" / "4712"
    cb.v2_runner_on_ok(fake_result("localhost", fake_task("Announce the run", "ansible.builtin.set_fact"),
                                   changed=False, ansible_facts=run_fact(slice_dir, id="4711")))
    cb._has_cleanup_play = True
    cb._cleanup_interrupted("interrupted")
    [argv] = calls
    assert "assess_cleanup_run=4711" in argv and "assess_cleanup_run=4712" not in argv, argv
