"""Running the real playbooks from tests: the venv's ansible-playbook, the checkout's ansible.cfg."""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
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


def start_playbook(inventory, *args, playbook="assess.yml", **popen):
    """The same run as run_playbook, started and not waited for (output on one pipe, text)."""
    argv = [str(BIN / "ansible-playbook"), playbook, "-i", str(inventory), *args]
    return subprocess.Popen(argv, cwd=ROOT, env=ansible_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def run_dirs(output_dir):
    """Run directories under an assess_output_dir, oldest first."""
    return sorted(p for p in Path(output_dir).glob("*/*") if p.is_dir())


def read_journal(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "journal.jsonl").read_text().splitlines() if line.strip()]


def boot_seconds():
    """Now, on the clock /proc/<pid>/stat's start times count on (seconds since boot): a test's `since` mark."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _started_at(pid):
    """Seconds since boot at which the process started (field 22 of /proc/<pid>/stat, after the command's
    parenthesised name, which may hold spaces)."""
    stat = Path("/proc/%d/stat" % pid).read_text()
    return int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def stray_processes(test_cluster, since=None):
    """Every process in each host's network namespace except its holder and its sshd (listener and sessions).

    With since (boot_seconds() taken when the test began), only processes started since then: each test answers for
    what it started itself, so a process left by an earlier test fails that test, not every later one."""
    sshd = os.path.realpath(SSHD)
    found = {}
    for h in test_cluster.hosts:
        for pid in _netns_pids(h["netns"]):
            if _proc_env(pid).get(HOLDER_ENV) or _proc_exe(pid).replace(" (deleted)", "") == sshd:
                continue
            try:
                # a tick's rounding (1/100 s) never drops a process of the test's own
                if since is not None and _started_at(pid) < since - 0.05:
                    continue
                cmd = Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # gone meanwhile
            found.setdefault(h["name"], []).append("%d %s" % (pid, cmd[:200]))
    return found


def mpirun_args(cluster):
    """assess_mpirun_args for the test cluster: mpirun's SSH to the other hosts through the cluster's ssh_config
    (its key and known hosts; a real cluster has this set up for its users), TCP on the hosts' eth0."""
    return ["--mca", "plm_rsh_args", "-F %s" % cluster.ssh_config_path, "--mca", "btl_tcp_if_include", "eth0",
            "--mca", "oob_tcp_if_include", "eth0"]


def run_everywhere(cluster, probe, params, timeout=240, out=None):
    """Start the probe on every host at once, as the play does; {host: artifact, with its logs' text}. The
    artifacts go under the checkout's .cache (the hosts share /work, not /tmp), removed afterwards unless out is
    given (a soak's start and poll share one; the caller removes it)."""
    names = [h["name"] for h in cluster.hosts]
    keep = out is not None
    out = out or ROOT / ".cache" / ("test-launchers-%s" % uuid.uuid4().hex[:8])
    base = dict(params, hosts=names, addresses=[h["ip"] for h in cluster.hosts])
    done = {}

    def start(rank):
        argv = [sys.executable, "-m", "probes", probe, "--out", str(out / names[rank]), "--host", names[rank],
                "--run-id", "launch-%s" % out.name[-8:], "--params", json.dumps(dict(base, rank=rank)),
                "--timeout", str(timeout)]
        done[rank] = cluster.exec(names[rank], [str(a) for a in argv], timeout=timeout + 60,
                                  env=dict(os.environ, PYTHONPATH=str(ROOT)))

    threads = [threading.Thread(target=start, args=(r,)) for r in range(len(names))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert all(cp.returncode == 0 for cp in done.values()), {r: cp.stderr[-800:] for r, cp in done.items()}
        docs = {}
        for name in names:
            doc = json.loads((out / name / ("%s.json" % probe)).read_text())
            doc["logs"] = {p.name: p.read_text(errors="replace") for p in (out / name).glob("*.log")}
            doc["raw_text"] = {r: (out / name / r).read_text(errors="replace") for r in doc.get("raw") or []
                               if (out / name / r).is_file()}
            docs[name] = doc
        return docs
    finally:
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
