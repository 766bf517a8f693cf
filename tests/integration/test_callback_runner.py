"""The assessment callback in real runs: ansible-playbook, and ansible-runner (which forces its own stdout callback).

ansible-runner 2.4.3 sets ANSIBLE_STDOUT_CALLBACK=awx_display (keeping a user's choice in ORIGINAL_STDOUT_CALLBACK),
appends its own directory to ANSIBLE_CALLBACK_PLUGINS, and leaves ANSIBLE_CALLBACKS_ENABLED alone; it starts
ansible-playbook with the caller's environment plus `envvars`, in `<private_data_dir>/project`. Our callback is an
aggregate one, so it keeps running next to awx_display as long as it is enabled: either `callbacks_enabled` in the
ansible.cfg that ANSIBLE_CONFIG names (the project directory is not the checkout, so the checkout's ansible.cfg is
not found by itself), or ANSIBLE_CALLBACKS_ENABLED in the environment (which replaces the ansible.cfg list).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
COLLECTIONS = ROOT / ".collections"
CALLBACK = "clustermax.assess.assessment"
CENSORED = "the output has been hidden due to the fact that 'no_log: true' was specified for this result"
PLAYBOOK = "callback_it.yml"
# What preflight would put in assess_run.started_at: the start of the run, in RFC 3339 UTC.
STARTED_AT = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")

pytestmark = pytest.mark.skipif(not (BIN / "ansible-playbook").exists(), reason="needs ansible-core in this venv")

PLAYBOOK_TEXT = """\
- name: Preflight
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Check the controller
      ansible.builtin.command:
        argv: ["true"]
      changed_when: false

    - name: Announce the run directory
      ansible.builtin.set_fact:
        assess_run:
          id: it-1
          dir: "{run_dir}"
          provider: local
          profile: quick
          started_at: "{started_at}"

- name: Measure
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.command:
        argv: [echo, hello]
      changed_when: false

    - name: Never runs
      ansible.builtin.command:
        argv: [echo, never]
      when: assess_never | default(false) | bool

    - name: Guarded secret
      block:
        - name: Leak nothing
          ansible.builtin.command:
            argv: [sh, -c, "echo {secret}; echo {secret} >&2; exit 3"]
          no_log: true
      rescue:
        - name: Recover
          ansible.builtin.debug:
            msg: recovered
"""


def clean_env(**extra):
    """This process's environment without anything that configures Ansible or this callback."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("ANSIBLE_", "CLUSTERMAX_ASSESS_")) and key != "ORIGINAL_STDOUT_CALLBACK"}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", ANSIBLE_NOCOLOR="1", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def write_inventory(directory):
    inventory = directory / "inventory.ini"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    return inventory


def write_playbook(directory, run_dir, secret):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / PLAYBOOK).write_text(PLAYBOOK_TEXT.format(run_dir=run_dir, secret=secret, started_at=STARTED_AT))
    return write_inventory(directory)


def check_run(run_dir, secret):
    """What both ways of running must leave behind."""
    assert sorted(os.listdir(run_dir)) == ["journal.jsonl", "run.json"]
    journal_text = (run_dir / "journal.jsonl").read_text()
    summary_text = (run_dir / "run.json").read_text()
    assert secret not in journal_text and secret not in summary_text

    lines = [json.loads(line) for line in journal_text.splitlines()]
    assert [line.get("event") or line["task"] for line in lines] == [
        # buffered, then flushed in order; then who writes the run (playbooks/recover.yml reads it)
        "play_start", "Check the controller", "controller", "Announce the run directory",
        "play_start", "Say hello", "Never runs", "Leak nothing", "Recover",
        "stats",
    ]
    assert [line["play"] for line in lines if line.get("event") == "play_start"] == ["Preflight", "Measure"]
    assert all(line["hosts"] == ["localhost"] for line in lines if line.get("event") == "play_start")
    tasks = {line["task"]: line for line in lines if "task" in line}
    assert all(line["host"] == "localhost" and line["role"] is None for line in tasks.values())
    assert {name: line["status"] for name, line in tasks.items()} == {
        "Check the controller": "ok", "Announce the run directory": "ok", "Say hello": "ok",
        "Never runs": "skipped", "Leak nothing": "failed", "Recover": "ok"}
    assert tasks["Announce the run directory"]["action"] == "ansible.builtin.set_fact"
    assert tasks["Say hello"]["action"] == "ansible.builtin.command"
    assert tasks["Say hello"]["duration_s"] > 0
    assert tasks["Never runs"]["skip_reason"] == "Conditional result was False: assess_never | default(false) | bool"
    assert tasks["Leak nothing"]["msg"] == CENSORED
    assert tasks["Leak nothing"]["rescued"] is True and tasks["Leak nothing"]["ignored"] is False
    expected_stats = {"localhost": {"ok": 4, "changed": 0, "failures": 0, "unreachable": 0, "skipped": 1,
                                    "rescued": 1, "ignored": 0}}
    assert lines[-1]["stats"] == expected_stats

    summary = json.loads(summary_text)
    import ansible

    assert {key: summary[key] for key in ("schema", "run_id", "provider", "profile", "playbook", "started_at")} == {
        "schema": "clustermax.assess/run/v1", "run_id": "it-1", "provider": "local", "profile": "quick",
        "playbook": PLAYBOOK, "started_at": STARTED_AT}
    assert summary["hosts"] == ["localhost"]
    assert summary["stats"] == expected_stats
    assert summary["failed_hosts"] == [] and summary["unreachable_hosts"] == []
    assert summary["ansible_version"] == ansible.__version__
    assert summary["duration_s"] > 0 and summary["interrupted"] is False


def test_ansible_playbook_with_the_callback_enabled_from_the_environment(tmp_path):
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    run_dir = tmp_path / "runs" / "local" / "it-1"
    inventory = write_playbook(tmp_path, run_dir, secret)
    empty_cfg = tmp_path / "ansible.cfg"
    empty_cfg.write_text("[defaults]\n")
    env = clean_env(ANSIBLE_CONFIG=str(empty_cfg), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
                    ANSIBLE_CALLBACKS_ENABLED=CALLBACK, CLUSTERMAX_ASSESS_REPORT="false")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), PLAYBOOK], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert CALLBACK not in proc.stdout + proc.stderr  # no warning from the callback, no report output
    check_run(run_dir, secret)


def test_ansible_runner_keeps_the_callback_next_to_its_awx_display(tmp_path, monkeypatch):
    ansible_runner = pytest.importorskip("ansible_runner")
    for key in list(os.environ):
        if key.startswith(("ANSIBLE_", "CLUSTERMAX_ASSESS_")) or key == "ORIGINAL_STDOUT_CALLBACK":
            monkeypatch.delenv(key)
    monkeypatch.setenv("PATH", f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")

    secret = f"s3cr3t-{uuid.uuid4().hex}"
    run_dir = tmp_path / "runs" / "local" / "it-1"
    private = tmp_path / "private"
    inventory = write_playbook(private / "project", run_dir, secret)
    # The way to keep it enabled under the runner: an ansible.cfg named by ANSIBLE_CONFIG (here a copy of what
    # the checkout's ansible.cfg does); the ini option of the callback is read from the same file.
    cfg = tmp_path / "runner.cfg"
    cfg.write_text(f"[defaults]\ncollections_path = {COLLECTIONS}\ncallbacks_enabled = {CALLBACK}\n\n"
                   "[callback_assessment]\nreport = false\n")
    shutil.copy(inventory, private / "inventory.ini")

    runner = ansible_runner.run(private_data_dir=str(private), playbook=PLAYBOOK,
                                inventory=str(private / "inventory.ini"),
                                envvars={"ANSIBLE_CONFIG": str(cfg), "ANSIBLE_NOCOLOR": "1"},
                                quiet=True, timeout=300)
    stdout = runner.stdout.read()
    assert (runner.status, runner.rc) == ("successful", 0), stdout
    # What the runner did to callbacks: forced its stdout callback, left the enabled list to us.
    assert runner.config.env["ANSIBLE_STDOUT_CALLBACK"] == "awx_display"
    assert "ANSIBLE_CALLBACKS_ENABLED" not in runner.config.env
    assert any(event.get("event") == "playbook_on_stats" for event in runner.events)
    assert CALLBACK not in stdout
    check_run(run_dir, secret)


def test_ansible_doc_reads_the_callback_documentation():
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS))
    proc = subprocess.run([str(BIN / "ansible-doc"), "--json", "-t", "callback", CALLBACK], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)[CALLBACK]["doc"]
    assert doc["type"] == "aggregate"
    options = doc["options"]
    assert options["report"]["type"] == "bool" and options["report"]["default"] is True
    assert options["report"]["env"] == [{"name": "CLUSTERMAX_ASSESS_REPORT"}]
    assert options["report"]["ini"] == [{"section": "callback_assessment", "key": "report"}]
    assert options["report_timeout"]["default"] == 600
    assert options["report_timeout"]["env"] == [{"name": "CLUSTERMAX_ASSESS_REPORT_TIMEOUT"}]


INTERRUPTED_PLAYBOOK = """\
- name: Preflight
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Announce the run directory
      ansible.builtin.set_fact:
        assess_run:
          id: it-2
          dir: "{{ playbook_dir }}/runs/local/it-2"
          provider: local
          profile: quick
          started_at: "{{ now(utc=true).isoformat() }}"

    - name: Quick step
      ansible.builtin.command:
        argv: ["true"]
      changed_when: false

    - name: Long step
      ansible.builtin.command:
        argv: [sleep, "60"]
      changed_when: false
"""


def test_an_interrupted_run_leaves_a_readable_journal(tmp_path):
    (tmp_path / "interrupted.yml").write_text(INTERRUPTED_PLAYBOOK)
    inventory = write_inventory(tmp_path)
    journal = tmp_path / "runs" / "local" / "it-2" / "journal.jsonl"
    env = clean_env(ANSIBLE_CONFIG=str(tmp_path / "none.cfg"), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
                    ANSIBLE_CALLBACKS_ENABLED=CALLBACK, CLUSTERMAX_ASSESS_REPORT="false")
    proc = subprocess.Popen([str(BIN / "ansible-playbook"), "-i", str(inventory), "interrupted.yml"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while "Quick step" not in (journal.read_text() if journal.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, "the journal never showed 'Quick step'"
            time.sleep(0.1)
        time.sleep(0.5)  # let "Long step" start
        proc.send_signal(signal.SIGINT)  # what Ctrl-C does
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and "interrupted" in output, output
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [line.get("event") or line["task"] for line in lines] == ["play_start", "controller",
                                                                     "Announce the run directory", "Quick step"]
    assert not (journal.parent / "run.json").exists()


UNREACHABLE_PLAYBOOK = """\
- name: Preflight
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Announce the run directory
      ansible.builtin.set_fact:
        assess_run: {{id: it-2, dir: "{run_dir}", provider: local, profile: quick, started_at: "{started_at}"}}

- name: Poll
  hosts: all
  gather_facts: false
  tasks:
    - name: A poll that may miss a host (roles/burnin's poll loop)
      ansible.builtin.raw: "true"
      ignore_unreachable: true

    - name: The same, one slot at a time
      ansible.builtin.raw: "true"
      loop: [1]
      ignore_unreachable: true

    - name: Still in the play
      ansible.builtin.debug:
        msg: here
"""


def test_a_host_missed_under_ignore_unreachable_stays_reachable_for_the_run(tmp_path):
    """ansible tells callbacks of an unreachable result even under ignore_unreachable, and the host stays in the
    play: the journal marks it ignored, and the report does not take the host for unreachable (before, one missed
    poll of the burn-in threw away everything the host measured: 'host unreachable' on every row)."""
    from reports.grading.select import host_failed_tasks
    from reports.load import load_run

    run_dir = tmp_path / "runs" / "local" / "it-2"
    run_dir.mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"id": "it-2", "hosts": ["localhost", "gone"]}))
    (tmp_path / PLAYBOOK).write_text(UNREACHABLE_PLAYBOOK.format(run_dir=run_dir, started_at=STARTED_AT))
    # a host whose SSH port refuses: unreachable at once
    (tmp_path / "inventory.ini").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
        "gone ansible_host=127.0.0.1 ansible_port=9 ansible_connection=ssh "
        "ansible_ssh_common_args='-o ConnectTimeout=5'\n")
    empty_cfg = tmp_path / "ansible.cfg"
    empty_cfg.write_text("[defaults]\nhost_key_checking = false\n")
    env = clean_env(ANSIBLE_CONFIG=str(empty_cfg), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
                    ANSIBLE_CALLBACKS_ENABLED=CALLBACK, CLUSTERMAX_ASSESS_REPORT="false")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "inventory.ini", PLAYBOOK], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in (run_dir / "journal.jsonl").read_text().splitlines()]
    gone = [(line["task"], line["status"], line.get("ignored")) for line in lines if line.get("host") == "gone"]
    assert ("A poll that may miss a host (roles/burnin's poll loop)", "unreachable", True) in gone, gone
    assert all(ignored for _, status, ignored in gone if status in ("unreachable", "failed")), gone
    assert ("Still in the play", "ok", None) in gone, gone
    run = load_run(str(run_dir))
    assert run.unreachable == {} and host_failed_tasks(run, "gone") == []
