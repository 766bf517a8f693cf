"""One rank of a world started by probes/common/worlds.py: the mechanics every multi-node torch job shares.

A world's job is a function named in its settings (`entry`, "module:function", e.g. the collectives sweep
"probes.network.worker:sweep" or the training job "probes.training.job:train"), called in every rank once the
process group is up:

    job(cfg, torch, dist, emit, progress)

`emit(record)` appends one JSON line to the rank's results file as soon as it is measured (a crash keeps what came
before); `progress(index, label, "run")` says where the rank is (step index, what it is), in a local file the
node's probe watches and in the run's control store for the other nodes: that is how a hang is reported with the
step each rank was in. The job raises on failure; the exception becomes the rank's error record.

Started two ways:
- by the probe's own worker pool (`main`, launcher `direct`): a worker imports torch once and runs the worlds its
  parent sends on stdin (one line of JSON each: rank, world size, master address and port, its files), so torch is
  not imported again for every world size;
- by srun, mpirun or torchrun (`launched_main`): one world, the rank from the launcher's environment.

The rendezvous is our own, with torch's TCPStore on the first node (MASTER_ADDR = the first host's address, a port
chosen per run): every rank writes `up/<rank>` and waits for all of them, so a rank that never arrives is named.
Then init_process_group(store=…) with gloo on CPU or nccl on GPUs.
"""

import importlib
import json
import os
import signal
import sys
import time
from datetime import timedelta

from probes.common.rendezvous import StoreClient, StoreError


class Progress:
    """Where this rank is: a local file the parent watches, and the control store for the other nodes. The last
    step it was told is kept, so a failure names it. A fault asked for by a test fires here, at its step, for
    every job alike."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.path = cfg["progress"]
        self.index, self.label = -1, None
        self.store = None
        store = cfg.get("store")
        if store:
            try:
                self.store = StoreClient(store["host"], store["port"], store["token"], connect_timeout=10,
                                         op_timeout=10)
            except StoreError:
                self.store = None

    def __call__(self, index, label, phase):
        if phase == "run":
            self.index, self.label = index, label
        record = {"rank": self.cfg["rank"], "step": index, "label": label, "phase": phase, "t": time.time()}
        with open(self.path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.store is not None:
            try:
                self.store.set("%s/p/%d" % (self.cfg["key"], self.cfg["rank"]), record)
            except StoreError:
                self.store = None
        if phase == "run":
            _fault(self.cfg, index)


def _fault(cfg, index):
    """Fault injection for tests: one rank exits (a crash), is killed, or stops (a hang) at a given step."""
    fault = cfg.get("fault") or {}
    if not fault or int(fault.get("rank", -1)) != cfg["rank"] or int(fault.get("nodes", -1)) != cfg["nodes"]:
        return
    if fault.get("mode", "exit") not in ("exit", "kill", "hang"):
        return  # a fault of the job's own (the inference job's kill_engine), injected by the job
    if index != int(fault.get("after_steps", 0)):
        return
    if fault.get("mode", "exit") == "hang":
        time.sleep(10 ** 6)
    if fault.get("mode") == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(int(fault.get("exit_code", 3)))


def _redirect_output(path):
    """Send this process's stdout and stderr (C level too: gloo, NCCL) to the log of the current world."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def job_function(name):
    """The job named "module:function" (the settings' `entry`)."""
    module, _, func = name.partition(":")
    return getattr(importlib.import_module(module), func)


def _rendezvous(cfg, torch, dist, emit, progress):
    """Our rendezvous, then the process group. Returns None, or the failure's exit code."""
    rank, world = cfg["rank"], cfg["world"]
    progress(-1, "rendezvous at %s:%s" % (cfg["master_addr"], cfg["master_port"]), "rendezvous")
    try:
        store = dist.TCPStore(cfg["master_addr"], int(cfg["master_port"]), world, rank == 0,
                              timeout=timedelta(seconds=float(cfg["rdzv_timeout"])), wait_for_workers=False)
        store.set("up/%d" % rank, "1")
        try:
            store.wait(["up/%d" % r for r in range(world)], timedelta(seconds=float(cfg["rdzv_timeout"])))
        except Exception as exc:  # noqa: BLE001 - DistStoreError / RuntimeError by torch version
            missing = [r for r in range(world) if not store.check(["up/%d" % r])]
            emit({"type": "error", "kind": "rendezvous", "step": -1, "missing_ranks": missing,
                  "error": "rendezvous timed out after %s s: ranks %s never arrived (%s)"
                           % (cfg["rdzv_timeout"], ",".join(map(str, missing)), str(exc).splitlines()[0])})
            progress(-1, "rendezvous", "failed")
            return 4
        dist.init_process_group(cfg["backend"], store=store, rank=rank, world_size=world,
                                timeout=timedelta(seconds=float(cfg["op_timeout"])))
    except Exception as exc:  # noqa: BLE001
        emit({"type": "error", "kind": "rendezvous", "step": -1,
              "error": "rendezvous at %s:%s failed: %s" % (cfg["master_addr"], cfg["master_port"],
                                                             str(exc).strip().splitlines()[0] if str(exc) else exc)})
        progress(-1, "rendezvous", "failed")
        return 4
    return None


# How long rank 0, whose process holds the world's store, waits at the end for the other ranks to be done with it.
LEAVE_WAIT_S = 30.0


def leave(dist, rank, world, wait, store=None):
    """Says this rank is done with the world's store; rank 0 (its process serves the store) waits, when its job ran
    through, until every rank has said so or LEAVE_WAIT_S passed. A rank process ends at once (exit_now): without
    this, rank 0 could end while another rank still reads a key it set last (the inference job's "sweep over"), and
    that rank would fail with "Failed to recv, got 0 bytes"."""
    try:
        store = store or dist.distributed_c10d._get_default_store()
        store.add("clustermax/left", 1)
        deadline = time.monotonic() + LEAVE_WAIT_S
        while wait and rank == 0 and store.add("clustermax/left", 0) < world and time.monotonic() < deadline:
            time.sleep(0.05)
    except Exception:  # noqa: BLE001 - no store, or one already gone: nothing to wait for
        pass


def run_world(cfg, torch, dist):
    """One world: rendezvous, the job, destroy. Returns 0 when the job ran through, else the failure's exit code."""
    results = open(cfg["results"], "a", buffering=1)

    def emit(record):
        results.write(json.dumps(record) + "\n")
        results.flush()

    progress = Progress(cfg)
    env = {"type": "env", "rank": cfg["rank"], "torch": torch.__version__, "backend": cfg["backend"],
           "device": cfg["device"], "t": time.time()}
    if cfg["device"].startswith("cuda"):
        torch.cuda.set_device(torch.device(cfg["device"]))
        env["device_name"] = torch.cuda.get_device_name(torch.device(cfg["device"]))
        try:
            env["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001
            env["nccl"] = None
    emit(env)
    try:
        rc = _rendezvous(cfg, torch, dist, emit, progress)
        if rc:
            return rc
        try:
            job_function(cfg["entry"])(cfg, torch, dist, emit, progress)
            if dist.is_initialized():  # torchtitan's entry point ends the process group itself (titan.py leaves first)
                leave(dist, cfg["rank"], cfg["world"], wait=True)
                dist.destroy_process_group()
            progress(progress.index + 1, "done", "done")
        except Exception as exc:  # noqa: BLE001 - the failure is data for the parent
            leave(dist, cfg["rank"], cfg["world"], wait=False)
            text = str(exc).strip()
            kind = "hang" if "timed out" in text.lower() or "timeout" in text.lower() else "error"
            emit({"type": "error", "kind": kind, "step": progress.index, "label": progress.label,
                  "error": "%s: %s" % (type(exc).__name__, text.splitlines()[0] if text else "")})
            progress(progress.index, progress.label or "?", "failed")
            return 1
    finally:
        results.close()
        if progress.store is not None:
            progress.store.close()
    return 0


def main(config_path):
    """Import torch once, then run the worlds the parent sends on stdin (one JSON object per line) until EOF.
    After a failed world the process exits: a broken process group is not reused."""
    with open(config_path) as fh:
        base = json.load(fh)
    try:
        import torch  # noqa: PLC0415 - the parent runs without torch
        import torch.distributed as dist  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        sys.stderr.write("cannot import torch: %s\n" % exc)
        return 2
    for line in sys.stdin:
        if not line.strip():
            continue
        cfg = dict(base, **json.loads(line))
        _redirect_output(cfg["log"])
        rc = run_world(cfg, torch, dist)
        if rc:
            return rc
    return 0


def launched_main():
    """One rank started by srun, mpirun or torchrun (probes/common/launch.py) for one world: the rank from the
    launcher, the world's settings from CMXA_LAUNCH, this node's work directory, log and interface from the run's
    store (launch.LaunchedRank), so one command line serves every node."""
    from probes.common.launch import LaunchedRank, LaunchedRankError  # noqa: PLC0415

    try:
        me = LaunchedRank()
    except LaunchedRankError as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    launch, node, key, rank = me.launch, me.node, me.key, me.rank
    files = {k: os.path.join(node["work"], "%s.r%d.%s" % (key, rank, k)) for k in ("results", "progress")}
    _redirect_output(node["log"])
    master = me.master(float(launch["rdzv_timeout"]))
    if master is None:
        me.fail("rendezvous", 4, "rank 0 never published its address")
        return 4
    cfg = dict(launch["settings"], rank=rank, world=me.world, local_rank=me.local_rank, nodes=launch["nodes"],
               master_addr=master, master_port=launch["world_port"], results=files["results"],
               progress=files["progress"], key=key, log=node["log"], store=launch["store"],
               device=("cuda:%d" % me.local_rank) if launch["settings"]["backend"] == "nccl" else "cpu")
    try:
        import torch  # noqa: PLC0415
        import torch.distributed as dist  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        me.fail("error", 2, "cannot import torch: %s" % exc)
        return 2
    rc = run_world(cfg, torch, dist)
    record = {"status": "ok", "rc": 0}
    if rc:
        errors = []
        with open(files["results"]) as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("type") == "error":
                    errors.append(rec)
        err = errors[-1] if errors else {}
        record = {"status": err.get("kind", "error"), "rc": rc, "error": err.get("error")}
    me.done(record)
    return rc


def exit_now(rc):
    """Ends a rank's process with rc at once, its streams flushed (its results file is closed by run_world). Not
    through the interpreter's teardown: there, torch 2.13 with Gloo aborted about one two-rank FSDP run in eight
    here ("terminate called without an active exception", SIGABRT) while Gloo's worker threads still hold finished work
    with tensors in it (the cause pytorch/pytorch#179291 names), and a launcher then counts the rank that ran through
    as failed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if rc is None else rc if isinstance(rc, int) else 1)  # as sys.exit: None is 0


if __name__ == "__main__":
    exit_now(main(sys.argv[1]))
