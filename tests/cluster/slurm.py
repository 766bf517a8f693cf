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

A site (``site=Site(...)``) adds what a provider's production Slurm has, each part only when asked for:

* accounting: MariaDB (its socket directory bind-mounted onto the first host's /run/mysqld, root by unix-socket
  authentication, as Debian sets it up) and slurmdbd on the first host, ``AccountingStorageEnforce=associations,
  limits,qos``, multifactor priority (fairshare), and associations made with sacctmgr: account ``ACCOUNT`` with
  root as its user, account ``OTHER_ACCOUNT`` without any user (a job charged to it is refused), QoS ``QOS``;
* fake GPUs: ``gpus_per_node`` character devices per host made by the harness (``<slurm>/gpus/<host>/nvidiaN``,
  the major/minor of /dev/null: **not GPUs**, files that let Slurm's gres/gpu plugin allocate and set
  CUDA_VISIBLE_DEVICES as on a GPU node), ``GresTypes=gpu`` and ``AccountingStorageTRES=gres/gpu``;
* a topology: ``topology/tree`` with the hosts split over ``switches`` leaf switches under one spine;
* a prolog and an epilog that each take ``prolog_epilog_s`` seconds.

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
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cluster.cluster import Cluster, ClusterError, _pid_alive, _terminate  # noqa: E402
from cluster.procs import in_host, run_cli  # noqa: E402
from cluster.reboot import Reboots  # noqa: E402

BINARIES = {"slurmctld": "/usr/sbin/slurmctld", "slurmd": "/usr/sbin/slurmd", "scontrol": "/usr/bin/scontrol",
            "sinfo": "/usr/bin/sinfo", "srun": "/usr/bin/srun", "munged": "/usr/sbin/munged"}
PACKAGES = "slurm-wlm slurmctld slurmd slurm-client munge"
HEALTH_CHECK = HERE / "xid_healthcheck.py"
ACCOUNTING_BINARIES = {"slurmdbd": "/usr/sbin/slurmdbd", "mariadbd": "/usr/sbin/mariadbd",
                       "mariadb-install-db": "/usr/bin/mariadb-install-db", "sacctmgr": "/usr/bin/sacctmgr"}
ACCOUNTING_PACKAGES = "slurmdbd mariadb-server"
MOUNT_TARGETS = ("/run/munge", "/etc/slurm", "/sys/fs/cgroup", "/run/mysqld")
SERVICES = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
# argv: host port command...: waits up to 30 s for a TCP port to accept, then becomes the command.
WAIT_THEN_EXEC = ("import os, socket, sys, time\n"
                  "deadline = time.monotonic() + 30\n"
                  "while time.monotonic() < deadline:\n"
                  "    try:\n"
                  "        socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=1).close()\n"
                  "        break\n"
                  "    except OSError:\n"
                  "        time.sleep(0.1)\n"
                  "os.execv(sys.argv[3], sys.argv[3:])\n")
ACCOUNT, OTHER_ACCOUNT, QOS = "cmxa-research", "cmxa-other", "cmxa-high"


@dataclass(frozen=True)
class Site:
    """What a production Slurm adds to the bare test Slurm (see the module's docstring)."""

    accounting: bool = False
    gpus_per_node: int = 0
    switches: int = 0
    prolog_epilog_s: float = 0.0
    cpus_per_node: int = 1  # at most the machine's CPUs (every host sees all of them), or the node is drained

    def switch_of(self, hosts: list) -> dict:
        """host name -> leaf switch name: consecutive hosts share a leaf ("leaf1" holds the first ones)."""
        if self.switches <= 0:
            return {}
        per = -(-len(hosts) // self.switches)
        return {h["name"]: f"leaf{i // per + 1}" for i, h in enumerate(hosts)}


def preflight(accounting: bool = False) -> str | None:
    """Why a Slurm cannot run here (a plain reason for pytest.skip), or None."""
    missing = [name for name, path in BINARIES.items() if not os.access(path, os.X_OK)]
    if missing:
        return f"Slurm not installed ({', '.join(missing)} missing): apt-get install {PACKAGES}"
    missing = [name for name, path in ACCOUNTING_BINARIES.items() if accounting and not os.access(path, os.X_OK)]
    if missing:
        return f"Slurm accounting not installed ({', '.join(missing)} missing): apt-get install {ACCOUNTING_PACKAGES}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no munge user (install munge)"
    return None


class Slurm:
    def __init__(self, cluster: Cluster, slurmd_timeout: int = 10, health_check_interval: int = 2,
                 partition: str = "batch", python: str | None = None, site: Site | None = None):
        self.cluster = cluster
        self.site = site or Site()
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
        out[self.controller] += [self.dir / "run" / "slurmctld.pid", self.dir / "munge" / "munged.pid",
                                 self.dir / "run" / "slurmdbd.pid", self.dir / "mysql-run" / "mariadbd.pid"]
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
        lines += self.site_conf()
        # Never more CPUs or memory than a host has, or slurmd registers with less and the node is drained.
        gres = f" Gres=gpu:{self.site.gpus_per_node}" if self.site.gpus_per_node else ""
        lines += [f"NodeName={h['name']} NodeAddr={h['ip']} CPUs={self.site.cpus_per_node} RealMemory=1000{gres} "
                  "State=UNKNOWN" for h in self.cluster.hosts]
        lines.append(f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def site_conf(self) -> list:
        site, d, first = self.site, self.dir, self.cluster.hosts[0]
        lines = []
        if site.accounting:
            lines += ["AccountingStorageType=accounting_storage/slurmdbd", f"AccountingStorageHost={first['ip']}",
                      "AccountingStorageEnforce=associations,limits,qos", "PriorityType=priority/multifactor",
                      "PriorityWeightFairshare=1000", "PriorityWeightQOS=1000"]
        if site.gpus_per_node:
            lines += ["GresTypes=gpu"] + (["AccountingStorageTRES=gres/gpu"] if site.accounting else [])
        if site.switches:
            lines.append("TopologyPlugin=topology/tree")
        if site.prolog_epilog_s:
            lines += [f"Prolog={d / 'etc' / 'prolog.sh'}", f"Epilog={d / 'etc' / 'epilog.sh'}"]
        return lines

    def slurmdbd_conf(self) -> str:
        d, first = self.dir, self.cluster.hosts[0]
        return "\n".join([
            "# slurmdbd of the SSH test cluster (tests/cluster/slurm.py)",
            f"DbdHost={first['name']}", f"DbdAddr={first['ip']}", "SlurmUser=root", "AuthType=auth/munge",
            "StorageType=accounting_storage/mysql", "StorageHost=localhost", "StorageUser=root",
            f"StorageLoc=slurm_acct_{self.cluster.prefix.replace('-', '_')}",
            f"PidFile={d / 'run' / 'slurmdbd.pid'}", f"LogFile={d / 'log' / 'slurmdbd.log'}", "DebugLevel=info",
        ]) + "\n"

    def _write_site_files(self) -> None:
        site, d = self.site, self.dir
        if site.accounting:
            conf = d / "etc" / "slurmdbd.conf"
            conf.write_text(self.slurmdbd_conf())
            os.chmod(conf, 0o600)  # slurmdbd refuses a config others can read (it may hold a password)
            for sub in ("mysql-data", "mysql-run"):
                (d / sub).mkdir(exist_ok=True)
            cp = subprocess.run([ACCOUNTING_BINARIES["mariadb-install-db"], "--user=root",
                                 f"--datadir={d / 'mysql-data'}", "--skip-test-db",
                                 "--auth-root-authentication-method=socket"],
                                capture_output=True, text=True, timeout=120)
            if cp.returncode != 0:
                raise ClusterError(f"mariadb-install-db failed: {cp.stderr[-500:]}")
        if site.gpus_per_node:
            gres = []
            for h in self.cluster.hosts:
                gpus = d / "gpus" / h["name"]
                gpus.mkdir(parents=True, exist_ok=True)
                for i in range(site.gpus_per_node):
                    os.mknod(gpus / f"nvidia{i}", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                gres.append(f"NodeName={h['name']} Name=gpu File={gpus}/nvidia[0-{site.gpus_per_node - 1}]")
            header = "# fake GPUs: /dev/null-like devices, not GPUs\n"
            (d / "etc" / "gres.conf").write_text(header + "\n".join(gres) + "\n")
        if site.switches:
            leaves = {}
            for host, leaf in site.switch_of(self.cluster.hosts).items():
                leaves.setdefault(leaf, []).append(host)
            lines = [f"SwitchName={leaf} Nodes={','.join(hosts)}" for leaf, hosts in leaves.items()]
            lines.append(f"SwitchName=spine Switches={','.join(leaves)}")
            (d / "etc" / "topology.conf").write_text("\n".join(lines) + "\n")
        if site.prolog_epilog_s:
            for name in ("prolog", "epilog"):
                script = d / "etc" / f"{name}.sh"
                script.write_text(f"#!/bin/sh\n# the provider's {name}: a fixed {site.prolog_epilog_s} s\n"
                                  f"sleep {site.prolog_epilog_s}\n")
                os.chmod(script, 0o755)

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
        self._write_site_files()

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
        if self.site.accounting:
            self.reboots.add_mount(ctl, str(d / "mysql-run"), "/run/mysqld")
            # mariadbd stays in the foreground: a shell starts it in the background and returns, as a daemon does.
            mariadbd = [ACCOUNTING_BINARIES["mariadbd"], "--no-defaults", "--user=root",
                        f"--datadir={d / 'mysql-data'}",
                        "--socket=/run/mysqld/mysqld.sock", "--skip-networking",
                        f"--pid-file={d / 'mysql-run' / 'mariadbd.pid'}", f"--log-error={d / 'log' / 'mariadbd.log'}",
                        "--innodb-buffer-pool-size=32M", "--innodb-lock-wait-timeout=900"]
            self.reboots.add_service(ctl, {
                "name": "mariadbd", "pidfile": str(d / "mysql-run" / "mariadbd.pid"),
                "argv": ["/bin/sh", "-c", 'setsid "$@" </dev/null >/dev/null 2>&1 &', "mariadbd"] + mariadbd})
            self.reboots.add_service(ctl, {
                "name": "slurmdbd", "wait_for": str(d / "mysql-run" / "mysqld.sock"),
                "pidfile": str(d / "run" / "slurmdbd.pid"), "argv": [ACCOUNTING_BINARIES["slurmdbd"]]})
        slurmctld = ["/usr/sbin/slurmctld", "-i"]
        if self.site.accounting:
            # slurmctld refuses to start while slurmdbd does not answer (it enforces associations), and slurmdbd
            # returns before it listens: wait for its port first.
            slurmctld = [self.python, "-I", "-S", "-c", WAIT_THEN_EXEC, self.cluster.hosts[0]["ip"], "6819"] + slurmctld
        self.reboots.add_service(ctl, {
            "name": "slurmctld", "wait_for": str(d / "munge" / "munge.socket.2"),
            "pidfile": str(d / "run" / "slurmctld.pid"), "argv": slurmctld})
        for h in self.cluster.hosts:
            self.reboots.add_service(h["name"], {
                "name": "slurmd", "wait_for": str(d / "munge" / "munge.socket.2"),
                "pidfile": str(d / "run" / f"slurmd-{h['name']}.pid"), "argv": ["/usr/sbin/slurmd"]})

    # ---- up / down --------------------------------------------------------------------------------------------

    def up(self, timeout: float = 60.0) -> Slurm:
        reason = preflight(self.site.accounting)
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
        if self.site.accounting:
            self._associations()
        others = [h["name"] for h in self.cluster.hosts[1:]]
        if others:
            self.reboots.boot(others)
        self.wait(lambda states: all(s == "IDLE" for s in states.values()), timeout=timeout,
                  what="every node idle")
        return self

    def sacctmgr(self, *args, timeout: float = 30) -> subprocess.CompletedProcess:
        return self.run([ACCOUNTING_BINARIES["sacctmgr"], "-i", *args], timeout=timeout)

    def _associations(self, timeout: float = 30.0) -> None:
        """The cluster, two accounts (root may charge only ACCOUNT) and a QoS, once slurmdbd answers."""
        deadline = time.monotonic() + timeout
        while True:
            cp = self.sacctmgr("add", "cluster", self.cluster.prefix)
            if cp.returncode == 0 or "already exists" in cp.stdout + cp.stderr:
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"slurmdbd did not answer sacctmgr: {(cp.stderr or cp.stdout)[-400:]}; "
                                   f"logs in {self.dir / 'log'}")
            time.sleep(0.3)
        for argv in (["add", "qos", QOS, "Priority=100"],
                     ["add", "account", ACCOUNT, f"Cluster={self.cluster.prefix}", "Description=test",
                      "Organization=cmxa"],
                     ["add", "account", OTHER_ACCOUNT, f"Cluster={self.cluster.prefix}", "Description=test",
                      "Organization=cmxa"],
                     ["add", "user", "root", f"Account={ACCOUNT}", f"Cluster={self.cluster.prefix}",
                      f"QOS=normal,{QOS}", "DefaultQOS=normal"]):
            cp = self.sacctmgr(*argv)
            if cp.returncode != 0:
                raise ClusterError(f"sacctmgr {' '.join(argv)}: {(cp.stderr or cp.stdout)[-400:]}")

    def down(self, keep_logs: Path | None = None) -> None:
        """End every daemon by PID (from its pid file, checked to be that daemon in that host), forget the boot
        services and mounts, remove the Slurm state. The hosts themselves stay up. keep_logs: a directory the
        daemons' logs are copied to first, for a test that failed to be diagnosed after the state is gone."""
        pids = []
        for name, files in self.pidfiles().items():
            host = next((h for h in self.cluster.hosts if h["name"] == name), None)
            for pidfile in files:
                try:
                    pid = int(pidfile.read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
                if host and _pid_alive(pid) and in_host(pid, host):
                    pids.append(pid)
        _terminate(pids, term_timeout=5.0)
        for h in self.cluster.hosts:
            if self.reboots.spec_path(h["name"]).exists():
                self.reboots.remove(h["name"], services=SERVICES, mounts=MOUNT_TARGETS)
            # Undo the mounts inside the running host, so nothing of this Slurm is seen there any more.
            for target in MOUNT_TARGETS:
                self.cluster.exec(h["name"], ["umount", "-l", target], timeout=10)
        if keep_logs is not None and (self.dir / "log").is_dir():
            shutil.copytree(self.dir / "log", keep_logs, dirs_exist_ok=True)
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)

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

    def hold_spare(self, name: str) -> None:
        """Keep a node out of service as a hot spare (drained, reason "hot spare"): the health check resumes it in
        place of the next node it drains for an XID (tests/cluster/xid_healthcheck.py)."""
        cfg = json.loads(self.health_check_config.read_text())
        cfg["spares"] = list(cfg.get("spares") or []) + [name]
        cp = self.scontrol("update", "NodeName=%s" % name, "State=DRAIN", "Reason=hot spare")
        if cp.returncode != 0:
            raise ClusterError(f"Slurm: cannot hold {name} as a spare: {(cp.stderr or cp.stdout).strip()}")
        # atomically: the health check reads it every few seconds on every host
        tmp = self.health_check_config.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg))
        os.replace(tmp, self.health_check_config)

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
    parser.add_argument("--accounting", action="store_true", help="MariaDB + slurmdbd, associations and a QoS")
    parser.add_argument("--gpus-per-node", type=int, default=0, help="fake GPUs (not GPUs) as GRES on every host")
    parser.add_argument("--switches", type=int, default=0, help="leaf switches of a topology/tree")
    parser.add_argument("--prolog-epilog-s", type=float, default=0.0, help="seconds a prolog and an epilog take")
    parser.add_argument("--cpus-per-node", type=int, default=1)
    parser.add_argument("action", choices=["up", "down", "status"])
    args = parser.parse_args(argv)
    site = Site(accounting=args.accounting, gpus_per_node=args.gpus_per_node, switches=args.switches,
                prolog_epilog_s=args.prolog_epilog_s, cpus_per_node=args.cpus_per_node)
    slurm = Slurm(Cluster(state_dir=args.state_dir), slurmd_timeout=args.slurmd_timeout,
                  health_check_interval=args.health_check_interval, site=site)

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
