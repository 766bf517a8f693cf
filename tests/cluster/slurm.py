#!/usr/bin/env python3
"""A real Slurm on the SSH test cluster: Debian's slurm-wlm 22.05 and munge, one slurmd per test host.

Layout (everything under ``<cluster state>/slurm``, made fresh by every ``up``):

* one munged (run as the munge user) on the first host; its socket directory is bind-mounted onto every host's
  private /run/munge, so the one daemon serves all hosts (path sockets work across network namespaces);
* slurmctld on the first host, a slurmd on every host, each inside its host's namespaces;
* ``etc/`` (slurm.conf, cgroup.conf) bind-mounted onto /etc/slurm inside every host: scontrol, sinfo and srun run
  over SSH on a host find the cluster as on a real node, and the machine's own /etc/slurm is untouched;
* an empty tmpfs on every host's /sys/fs/cgroup with ``CgroupPlugin=cgroup/v1``: slurmd 22.05 will not start without
  a cgroup filesystem, and this way it never touches the machine's cgroups;
* a HealthCheckProgram (tests/cluster/xid_healthcheck.py) that drains a node when an XID for it shows up in the
  kernel log: the provider's health check in the fault-injection tests.

The daemons are boot services of their hosts (tests/cluster/reboot.py): a simulated reboot ends them with the rest
of the host and its boot starts them again, as on a real node. Every daemon is found by its pid file and ended by
PID at ``down``; ``Cluster.down`` would end anything left in the hosts anyway.

    slurm = Slurm(cluster, slurmd_timeout=10, health_check_interval=2)
    slurm.up()                        # all nodes idle
    slurm.scontrol("show", "node", "-o")
    slurm.node_state("cmxa-node2")    # e.g. "IDLE", "IDLE+DRAIN", "DOWN*"
    slurm.down()

CLI: ``python tests/cluster/slurm.py --state-dir DIR up|down|status``.
"""

from __future__ import annotations

import argparse
import grp
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cluster.cluster import Cluster, ClusterError, _pid_alive, _terminate  # noqa: E402
from cluster.procs import run_cli  # noqa: E402
from cluster.reboot import Reboots  # noqa: E402

BINARIES = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd", "scontrol": "/usr/bin/scontrol",
            "sinfo": "/usr/bin/sinfo", "srun": "/usr/bin/srun", "munged": "/usr/sbin/munged"}
PACKAGES = "slurm-wlm slurmctld slurmd slurm-client munge"
HEALTH_CHECK = HERE / "xid_healthcheck.py"
MOUNT_TARGETS = ("/run/munge", "/etc/slurm", "/sys/fs/cgroup")
SERVICES = ("munged", "slurmctld", "slurmd")


def preflight() -> str | None:
    """Why a Slurm cannot run here (a plain reason for pytest.skip), or None."""
    missing = [name for name, path in BINARIES.items() if not os.access(path, os.X_OK)]
    if missing:
        return f"Slurm not installed ({', '.join(missing)} missing): apt-get install {PACKAGES}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (install munge)"
    return None


class Slurm:
    def __init__(self, cluster: Cluster, slurmd_timeout: int = 10, health_check_interval: int = 2,
                 partition: str = "batch", python: str | None = None):
        self.cluster = cluster
        self.slurmd_timeout = int(slurmd_timeout)
        self.health_check_interval = int(health_check_interval)
        self.partition = partition
        self.reboots = Reboots(cluster, python=python)
        self.python = python or sys.executable

    # ---- paths ------------------------------------------------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self.cluster.state_dir / "slurm"

    @property
    def controller(self) -> str:
        return self.cluster.hosts[0]["name"]

    @property
    def health_check_config(self) -> Path:
        return self.dir / "healthcheck" / "config.json"

    def pidfiles(self) -> dict:
        """host -> [pid files of the daemons that run there]."""
        out = {h["name"]: [self.dir / "run" / f"slurmd-{h['name']}.pid"] for h in self.cluster.hosts}
        out[self.controller] += [self.dir / "run" / "slurmctld.pid", self.dir / "munge" / "munged.pid"]
        return out

    # ---- config -----------------------------------------------------------------------------------------------

    def slurm_conf(self) -> str:
        d = self.dir
        first = self.cluster.hosts[0]
        lines = [
            "# Slurm of the SSH test cluster (tests/cluster/slurm.py)",
            f"ClusterName={self.cluster.prefix}",
            f"SlurmctldHost={first['name']}({first['ip']})",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            "MpiDefault=none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/backfill",
            # A node that stopped answering comes back by itself once its slurmd registers again (after a reboot).
            "ReturnToService=2",
            f"SlurmdTimeout={self.slurmd_timeout}",
            "SlurmctldTimeout=30",
            "MessageTimeout=5",
            "InactiveLimit=0",
            "KillWait=2",
            "MinJobAge=30",
            f"HealthCheckProgram={d / 'healthcheck' / 'run'}",
            f"HealthCheckInterval={self.health_check_interval}",
            "HealthCheckNodeState=ANY",
            f"StateSaveLocation={d / 'ctld'}",
            f"SlurmdSpoolDir={d / 'spool' / '%n'}",
            f"SlurmctldPidFile={d / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={d / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
            f"SlurmdLogFile={d / 'log' / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        # Never more CPUs or memory than a host has, or slurmd registers with less and the node is drained.
        lines += [f"NodeName={h['name']} NodeAddr={h['ip']} CPUs=1 RealMemory=1000 State=UNKNOWN"
                  for h in self.cluster.hosts]
        lines.append(f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def _write_files(self) -> None:
        d = self.dir
        for sub in ("etc", "ctld", "spool", "run", "log", "healthcheck", "munge"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        for h in self.cluster.hosts:
            (d / "spool" / h["name"]).mkdir(exist_ok=True)
        (d / "etc" / "slurm.conf").write_text(self.slurm_conf())
        # Only the plugin: no autodetection of the (hidden) cgroup hierarchy, nothing of the machine's cgroups used.
        (d / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        # munge: key and socket directory owned by the munge user, nothing group- or world-writable.
        uid, gid = pwd.getpwnam("munge").pw_uid, grp.getgrnam("munge").gr_gid
        key = d / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chown(key, uid, gid)
        os.chmod(key, 0o400)
        os.chown(d / "munge", uid, gid)
        os.chmod(d / "munge", 0o755)
        run = d / "healthcheck" / "run"
        run.write_text(f"#!/bin/sh\nexec {self.python} -I -S {HEALTH_CHECK} run --config {self.health_check_config}\n")
        os.chmod(run, 0o755)

    def _register_boot(self) -> None:
        d = self.dir
        for h in self.cluster.hosts:
            name = h["name"]
            self.reboots.remove(name, services=SERVICES, mounts=MOUNT_TARGETS)
            self.reboots.add_mount(name, str(d / "munge"), "/run/munge")
            self.reboots.add_mount(name, str(d / "etc"), "/etc/slurm")
            self.reboots.add_mount(name, "tmpfs", "/sys/fs/cgroup", fstype="tmpfs")
        ctl = self.controller
        self.reboots.add_service(ctl, {
            "name": "munged", "user": "munge", "pidfile": str(d / "munge" / "munged.pid"),
            "argv": ["/usr/sbin/munged", "--socket", str(d / "munge" / "munge.socket.2"),
                     "--key-file", str(d / "munge" / "munge.key"), "--pid-file", str(d / "munge" / "munged.pid"),
                     "--log-file", str(d / "munge" / "munged.log"), "--seed-file", str(d / "munge" / "munged.seed"),
                     "--num-threads", "4"]})
        self.reboots.add_service(ctl, {
            "name": "slurmctld", "wait_for": str(d / "munge" / "munge.socket.2"),
            "pidfile": str(d / "run" / "slurmctld.pid"), "argv": ["/usr/sbin/slurmctld", "-i"]})
        for h in self.cluster.hosts:
            self.reboots.add_service(h["name"], {
                "name": "slurmd", "wait_for": str(d / "munge" / "munge.socket.2"),
                "pidfile": str(d / "run" / f"slurmd-{h['name']}.pid"), "argv": ["/usr/sbin/slurmd"]})

    # ---- up / down --------------------------------------------------------------------------------------------

    def up(self, timeout: float = 60.0) -> Slurm:
        reason = preflight()
        if reason:
            raise ClusterError(reason)
        if not self.cluster.hosts:
            raise ClusterError(f"no cluster in {self.cluster.state_dir}: run `up` first")
        self.down()  # a fresh Slurm every time: new key, empty state, job ids from 1
        self._write_files()
        from cluster.xid_healthcheck import init  # noqa: PLC0415 - the same file runs on the hosts as a script

        init(str(self.health_check_config), str(self.dir / "healthcheck"))
        self._register_boot()
        # The controller host first (munged, slurmctld), then every other host's slurmd.
        self.reboots.boot([self.controller])
        others = [h["name"] for h in self.cluster.hosts[1:]]
        if others:
            self.reboots.boot(others)
        self.wait(lambda states: all(s == "IDLE" for s in states.values()), timeout=timeout,
                  what="every node idle")
        return self

    def down(self) -> None:
        """End every daemon by PID (from its pid file, checked to be that daemon in that host), forget the boot
        services and mounts, remove the Slurm state. The hosts themselves stay up."""
        pids = []
        for name, files in self.pidfiles().items():
            host = next((h for h in self.cluster.hosts if h["name"] == name), None)
            for pidfile in files:
                try:
                    pid = int(pidfile.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
                if host and _pid_alive(pid) and self._in_host(pid, host):
                    pids.append(pid)
        _terminate(pids, term_timeout=5.0)
        for h in self.cluster.hosts:
            if self.reboots.spec_path(h["name"]).exists():
                self.reboots.remove(h["name"], services=SERVICES, mounts=MOUNT_TARGETS)
            # Undo the mounts inside the running host, so nothing of this Slurm is seen there any more.
            for target in MOUNT_TARGETS:
                self.cluster.exec(h["name"], ["umount", "-l", target], timeout=10)
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

    def _in_host(self, pid: int, host: dict) -> bool:
        try:
            return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{host['netns']}").st_ino
        except OSError:
            return False

    def daemon_pids(self) -> dict:
        """host -> [live daemon PIDs] (read from the pid files)."""
        out = {}
        for name, files in self.pidfiles().items():
            for pidfile in files:
                try:
                    pid = int(pidfile.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
                if _pid_alive(pid):
                    out.setdefault(name, []).append(pid)
        return out

    # ---- using it ---------------------------------------------------------------------------------------------

    def run(self, argv, host: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
        """A Slurm command on a host (default the controller host), inside its namespaces."""
        return self.cluster.exec(host or self.controller, list(argv), timeout=timeout)

    def scontrol(self, *args, host: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
        return self.run(["/usr/bin/scontrol", *args], host=host, timeout=timeout)

    def node_info(self) -> dict:
        """node name -> {field: value} from `scontrol show node -o`."""
        cp = self.scontrol("show", "node", "-o")
        out = {}
        for line in cp.stdout.splitlines():
            fields = dict(m.groups() for m in re.finditer(r"(\w+)=(\S*)", line))
            if "NodeName" in fields:
                out[fields["NodeName"]] = fields
        return out

    def node_states(self) -> dict:
        return {name: f.get("State", "") for name, f in self.node_info().items()}

    def node_state(self, name: str) -> str:
        return self.node_states().get(name, "")

    def wait(self, predicate, timeout: float = 30.0, what: str = "condition") -> dict:
        deadline = time.monotonic() + timeout
        states = {}
        while time.monotonic() < deadline:
            states = self.node_states()
            if states and predicate(states):
                return states
            time.sleep(0.2)
        raise ClusterError(f"Slurm: not {what} within {timeout:.0f}s: {states}; logs in {self.dir / 'log'}")

    def status(self) -> dict:
        return {"dir": str(self.dir), "daemons": self.daemon_pids(),
                "nodes": self.node_states() if self.daemon_pids() else {}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="slurm.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--state-dir", help="the test cluster's state directory (default: $CMXA_STATE_DIR)")
    parser.add_argument("--slurmd-timeout", type=int, default=10)
    parser.add_argument("--health-check-interval", type=int, default=2)
    parser.add_argument("action", choices=["up", "down", "status"])
    args = parser.parse_args(argv)
    slurm = Slurm(Cluster(state_dir=args.state_dir), slurmd_timeout=args.slurmd_timeout,
                  health_check_interval=args.health_check_interval)

    def action():
        if args.action == "up":
            t0 = time.monotonic()
            slurm.up()
            print(f"slurm up in {time.monotonic() - t0:.2f}s: {slurm.node_states()}")
        elif args.action == "down":
            slurm.down()
        else:
            print(json.dumps(slurm.status(), indent=2))

    return run_cli("slurm.py", args.action, action)

if __name__ == "__main__":
    sys.exit(main())
