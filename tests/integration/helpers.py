"""Running the real playbooks from tests: the venv's ansible-playbook, the checkout's ansible.cfg."""

import json
import os
import subprocess
import sys
from pathlib import Path

from cluster.cluster import HOLDER_ENV, SSHD, _netns_pids, _proc_env, _proc_exe

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def ansible_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(PATH="%s:%s" % (BIN, env.get("PATH", "")), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", PYTHONDONTWRITEBYTECODE="1")
    env.update(extra)
    return env


def run_playbook(inventory, *args, playbook="assess.yml", timeout=600, env=None):
    argv = [str(BIN / "ansible-playbook"), playbook, "-i", str(inventory), *args]
    return subprocess.run(argv, cwd=ROOT, env=env or ansible_env(), capture_output=True, text=True, timeout=timeout)


def run_dirs(output_dir):
    """Run directories under an assess_output_dir, oldest first."""
    return sorted(p for p in Path(output_dir).glob("*/*") if p.is_dir())


def read_journal(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "journal.jsonl").read_text().splitlines() if line.strip()]


def stray_processes(test_cluster):
    """Every process in each host's network namespace except its holder and its sshd (listener and sessions)."""
    sshd = os.path.realpath(SSHD)
    found = {}
    for h in test_cluster.hosts:
        for pid in _netns_pids(h["netns"]):
            if _proc_env(pid).get(HOLDER_ENV) or _proc_exe(pid).replace(" (deleted)", "") == sshd:
                continue
            try:
                cmd = Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # gone meanwhile
            found.setdefault(h["name"], []).append("%d %s" % (pid, cmd[:200]))
    return found
