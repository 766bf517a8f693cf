"""The clustermax.assess.probe action, driven by a real ansible-playbook over the local connection: it runs under
--check without a check_mode of its own, fills in the peers, and keeps what a task gives itself."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / ".collections") not in sys.path:
    sys.path.insert(0, str(ROOT / ".collections"))


RUN_ID = "20260101T000000Z-action"
PLAYBOOK = """
- name: Probe action
  hosts: all
  gather_facts: false
  tasks:
    - name: Simple form, hosts, addresses and rank filled in by the action
      clustermax.assess.probe:
        name: boot_id
        variant: simple
        peers: true
    - name: The task's own rank is kept
      clustermax.assess.probe:
        name: boot_id
        variant: explicit
        peers: true
        params: {rank: 5}
    - name: Peers off as a templated false (a soak that is not multi-host)
      clustermax.assess.probe:
        name: boot_id
        variant: single
        peers: "{{ 1 > 2 }}"
    - name: What the tools step left reaches every probe (PATH first, why missing)
      clustermax.assess.probe:
        name: tools_detect
        variant: tools
      vars:
        assess_tools: {path: ["{{ fake_bin }}"], missing: {nccl_tests: "the build failed"}, python: null}
    - name: A probe Python that is not there, so the probe cannot start
      clustermax.assess.probe:
        name: boot_id
        variant: nopython
      vars:
        assess_python: /nonexistent/bin/python3
      ignore_errors: true
"""


@pytest.fixture(scope="module")
def check_mode_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("action")
    run_dir = tmp / "run"
    run_dir.mkdir()
    subprocess.run([sys.executable, "-m", "probes.pyz", str(run_dir / "probes.pyz")], cwd=ROOT, check=True)
    # Two inventory hosts on this machine, each with its own remote working directory, as two nodes would have.
    inventory = tmp / "hosts.ini"
    inventory.write_text("\n".join(
        "%s ansible_connection=local ansible_host=%s assess_remote_dir=%s assess_python=%s%s"
        % (h, addr, tmp / ("remote-" + h), sys.executable, more)
        for h, addr, more in (("node-a", "127.0.0.2", " assess_rack=r7 assess_nvlink_domain=nvl72-a"),
                              ("node-b", "127.0.0.3", ""))) + "\n")
    for h in ("node-a", "node-b"):
        (tmp / ("remote-" + h)).mkdir()
        (tmp / ("remote-" + h) / "probes.pyz").write_bytes((run_dir / "probes.pyz").read_bytes())
    playbook = tmp / "play.yml"
    playbook.write_text(PLAYBOOK)
    fake_bin = tmp / "bin"
    fake_bin.mkdir()
    (fake_bin / "fio").write_text("#!/bin/sh\n")
    (fake_bin / "fio").chmod(0o755)
    # assess_python is an inventory variable, not an extra one: a task may name another (the nopython task)
    extra = {"ansible_python_interpreter": sys.executable,
             "assess_run": {"id": RUN_ID, "dir": str(run_dir), "launch": {
                 "launcher": "mpirun", "mpirun_args": ["--mca", "btl_tcp_if_include", "eth0"], "srun_args": []}},
             "fake_bin": str(fake_bin)}
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "--check", "-i", str(inventory),
                           str(playbook), "-e", json.dumps(extra)], cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return run_dir / "artifacts"


def _artifact(artifacts, host, variant):
    return json.loads((artifacts / host / ("boot_id-%s.json" % variant)).read_text())


def test_a_probe_measures_under_check_mode(check_mode_run):
    for host in ("node-a", "node-b"):
        doc = _artifact(check_mode_run, host, "simple")
        assert doc["status"] == "ok" and doc["host"] == host and doc["run_id"] == RUN_ID
        assert len(doc["facts"]["boot_id"]) == 36


def test_peers_are_filled_in(check_mode_run):
    for rank, host in enumerate(("node-a", "node-b")):
        params = _artifact(check_mode_run, host, "simple")["params"]
        # where each host sits, from its inventory variables ('' where not set), and the run's launcher
        assert params == {"hosts": ["node-a", "node-b"], "addresses": ["127.0.0.2", "127.0.0.3"], "rank": rank,
                          "racks": ["r7", ""], "nvlink_domains": ["nvl72-a", ""], "launcher": "mpirun",
                          "mpirun_args": ["--mca", "btl_tcp_if_include", "eth0"], "srun_args": []}
        assert _artifact(check_mode_run, host, "single")["params"] == {}


def test_params_the_task_gives_are_kept(check_mode_run):
    params = _artifact(check_mode_run, "node-b", "explicit")["params"]
    assert params["rank"] == 5 and params["hosts"] == ["node-a", "node-b"]


def test_the_tools_step_reaches_every_probe(check_mode_run):
    doc = json.loads((check_mode_run / "node-a" / "tools_detect-tools.json").read_text())
    assert doc["params"]["tools_step"] == {"path": [str(check_mode_run.parent.parent / "bin")],
                                           "missing": {"nccl_tests": "the build failed"}}
    # the step's bin directory is first on PATH for the probe and what it runs
    assert doc["facts"]["commands"]["fio"] == str(check_mode_run.parent.parent / "bin" / "fio")
    assert "tools_step" not in _artifact(check_mode_run, "node-a", "simple")["params"]


def test_a_probe_that_cannot_start_names_the_cause(check_mode_run):
    # the node's shell says why (rc 127: not found), on the last line of its stderr
    doc = _artifact(check_mode_run, "node-a", "nopython")
    assert doc["status"] == "error"
    assert doc["reason"].startswith("probe boot_id did not run on node-a: rc=127 "), doc
    assert "not found" in doc["reason"] and "/nonexistent/bin/python3" in doc["reason"]
