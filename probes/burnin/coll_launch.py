"""The burn-in's collective loop started through the cluster's launcher (probes/common/launch.py), as the network
phase's worlds are: srun or mpirun from the first host, torchrun's agent on every host; `direct` keeps the
runner's own coll workers (probes/burnin/runner.py).

Every node's runner joins the run's store (the first host's runner serves it for the whole soak), publishes its
node's worker settings under its host name (where its samples go, its stop file, its socket interface), and the
launched ranks pick them up there (launch.LaunchedRank): one command line for every node. Each rank writes its
samples into its own node's coll stream, so the soak's timeline is the same whichever launcher started it. The
launching runner watches the launcher like a worker: when it ends, the soak records its exit; at the end it is
stopped the launcher's way (srun's job cancelled, mpirun's ranks ended on every host, torchrun's agents killed),
and every runner ends what is left of the loop on its own host by the run's marker.
"""

import json
import os
import sys

from probes.common import launch
from probes.common.procs import package_root
from probes.common.rendezvous import Mesh, StoreError

LAUNCHED = ("import sys; sys.path.insert(0, %r); from probes.burnin.workers import launched_main; "
            "sys.exit(launched_main())")


class LaunchedColl:
    """This node's part of a launched collective loop. `proc` is the launcher process on a launching node."""

    def __init__(self, cfg, template, node_env, children):
        self.cfg, self.template, self.node_env, self.children = cfg, template, node_env, children
        params = cfg["params"]
        self.hosts, self.addresses, self.rank = cfg["hosts"], cfg["addresses"], cfg["rank"]
        self.n = len(self.hosts)
        self.port = int(cfg["port"])
        self.token = "%s:%s:coll" % (cfg["run_id"], cfg["probe"])
        self.mark = "clustermax-assess-launch=%s/%s/coll" % (cfg["run_id"], cfg["probe"])
        self.asked = params.get("launcher") or "direct"
        self.mesh = None
        self.launcher = "direct"
        self.why_not = {}
        self.started = None
        self.error = None

    @property
    def proc(self):
        return self.started.proc if self.started else None

    def open(self):
        """Meet the other runners and choose the launcher. Returns the launcher (direct: the runner starts its own
        coll workers, as before); an error (a launcher asked for that cannot work) is in self.error."""
        timeout = float(self.cfg["rdzv_timeout"])
        self.mesh = Mesh(self.hosts, self.addresses, self.rank, self.port + 1, self.token, connect_timeout=timeout)
        launcher, why, facts = launch.agree(self.mesh, self.asked, self.cfg["paths"]["work"],
                                            self.cfg["params"].get("mpirun_args") or [], timeout)
        self.launcher, self.why_not, self.facts = launcher, why, facts
        if launcher in why:
            self.error = "launcher %s cannot be used: %s" % (launcher, why[launcher])
        return launcher

    def launches(self):
        return self.launcher == "torchrun" or self.rank == 0

    def start(self, env, log_path):
        """Publish this node's settings, wait for every node, then (on a launching node) start the launcher."""
        timeout = float(self.cfg["rdzv_timeout"])
        store = self.mesh.store
        store.set("coll/node/%s" % self.facts[self.rank]["hostname"],
                  {"cfg": self.template, "env": self.node_env, "address": self.addresses[self.rank],
                   "log": log_path})
        missing = self.mesh.barrier("coll-ready", timeout)
        if missing:
            self.error = "the collective loop cannot start: %s did not arrive" % ", ".join(missing)
            return None
        if not self.launches():
            return None
        ppn = int(self.template["ppn"])
        gpu = self.template["backend"] == "nccl"
        command = [sys.executable, "-c", LAUNCHED % package_root(), self.mark]
        env = dict(env, CMXA_LAUNCH=json.dumps({
            "key": "coll", "store": {"host": self.addresses[0], "port": self.port + 1, "token": self.token},
            "world_port": self.port, "rdzv_timeout": timeout}))
        job_name = "cmxa-%s-%s" % (self.cfg["run_id"][-12:], self.cfg["probe"])
        params = self.cfg["params"]
        if self.launcher == "srun":
            soak_min = (float(self.cfg["hard_deadline"]) - float(self.cfg["t_start"])) / 60 + 2
            argv = launch.srun_argv([f["hostname"] for f in self.facts], ppn, command, job_name,
                                    gpus_per_task=1 if gpu else 0, jobid=launch.slurm_job_id(), time_min=soak_min,
                                    extra=params.get("srun_args") or [])
        elif self.launcher == "mpirun":
            hostfile = launch.write_hostfile(os.path.join(self.cfg["paths"]["work"], "coll.hostfile"),
                                             self.addresses, ppn)
            argv = launch.mpirun_argv(self.facts[self.rank]["mpirun"], ppn * self.n, ppn, hostfile, command,
                                      launch.forwarded_env(env), as_root=os.geteuid() == 0,
                                      extra=params.get("mpirun_args") or [])
        else:
            argv = launch.torchrun_argv(sys.executable, self.n, ppn, self.rank, "%s:%d" % (
                self.addresses[0], self.port + 2), "%s-coll" % self.cfg["run_id"], self.rank == 0, command)
        with open(log_path, "a") as fh:
            fh.write("# %s\n" % " ".join(argv))
        self.started = launch.Launch(self.launcher, argv, env, log_path, children=self.children,
                                     job_name=job_name if self.launcher == "srun" else None)
        return self.started.proc

    def failed(self, log_path):
        """rank -> {host, rc, stopped} as the launcher reported it (read after it ended)."""
        try:
            with open(log_path, errors="replace") as fh:
                return launch.failed_ranks(self.launcher, fh.read())
        except OSError:
            return {}

    def close(self, wait_s=60.0):
        """Stop the launcher the launcher's way, end what is left here, leave the store. A node that did not
        launch waits (up to wait_s) until the launching node says its launcher ended: its ranks may still be
        finishing their last round, and ending them first would make the launcher report them as failed."""
        left = []
        store = self.mesh.store if self.mesh is not None else None
        if self.started is not None:
            self.started.stop()
            left = self.started.jobs_left(10)
            if store is not None:
                try:
                    store.set("coll/ended/%d" % self.rank, 1)
                except StoreError:
                    pass
        elif store is not None and self.launcher in ("srun", "mpirun"):
            try:
                store.wait_count("coll/ended/", 1, wait_s)
            except StoreError:
                pass
        from probes.common.procs import kill_marked  # noqa: PLC0415

        kill_marked(self.mark)
        if self.mesh is not None:
            try:
                self.mesh.close()
            except StoreError:
                pass
        return left
