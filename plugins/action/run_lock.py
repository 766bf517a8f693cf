# Copyright: clustermax.assess contributors
# Apache-2.0
"""Action plugin clustermax.assess.run_lock: one assessment per node at a time (take, or give back, the node's lock)."""

import json
import os
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.clustermax.assess.plugins.plugin_utils import node_exec
from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import start_ticks
from ansible_collections.clustermax.assess.probes.common.run_lock import boot_id, lock_path

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
# The node side, run as `python -c <its source>` (standard library only): probes/common/run_lock.py.
NODE_CODE = os.path.join(COLLECTION_ROOT, "probes", "common", "run_lock.py")
# A holder from another controller whose working directory is not on the node, and whose lock is older than this,
# is gone (it never made its directory, or removed it and died before giving the lock back).
FOREIGN_STALE_S = 120
# A lock its run has not touched for this long is a gone run's, wherever its controller was: every probe touches it
# each minute while it runs (probes/common/run_lock.HEARTBEAT_S), and the burn-in's polls are probes. An AWX job
# killed at its timeout (ansible-runner sends SIGKILL) leaves its working directory, and the next job runs in a new
# pod: without this, every later job would be refused until someone cleaned up by hand.
HEARTBEAT_STALE_S = 30 * 60


def node_code():
    with open(NODE_CODE, encoding="utf-8") as fh:
        return fh.read()


def _alive_here(holder):
    """Whether the holder's controller process may still run on this machine: same pid and start time; where the
    start time cannot be read (no /proc), a pid that exists counts as alive (never break a live run's lock)."""
    pid = int(holder.get("pid") or 0)
    if not pid:
        return False
    ticks = start_ticks(pid)
    if ticks is not None and holder.get("start_ticks") is not None:
        return ticks == holder["start_ticks"]  # a later process that reuses the pid is not the holder
    try:  # no start time to compare: whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        return True
    return True


def gone_why(holder, holder_workdir, age_s, machine=None, boot=None):
    """Why the holder of a node's lock is gone (the lock is stale), or None while it may still run."""
    machine = machine or socket.gethostname()
    boot = boot if boot is not None else boot_id()
    if not holder.get("run_id"):
        return "the lock is unreadable (%s)" % holder.get("unreadable", "")
    if holder.get("machine") == machine and holder.get("boot_id") == boot:
        return None if _alive_here(holder) else "its controller (pid %s on %s) has ended" % (holder.get("pid"), machine)
    if age_s > HEARTBEAT_STALE_S:
        return "its run has not touched it for %d s (a run touches it every minute)" % age_s
    if not holder_workdir and age_s > FOREIGN_STALE_S:
        return "its working directory is gone from the node and the lock is %d s old" % age_s
    return None


class ActionModule(ActionBase):
    """state=release: give the node's lock back (run_id: this run, another run, or 'all', for
    playbooks/cleanup.yml), removing `workdir` first when given (the run's cleanup: one round trip).
    state=inspect: who holds the node's lock and whether that run still runs (live; gone_why when it does not).

    Preflight takes the lock with clustermax.assess.prepare_node (a subclass: _holder and _judge are the taking
    side). A lock held by a run whose controller has ended (on this machine), or by a run from elsewhere whose
    working directory is gone or that has not touched it for long, is broken with a warning; otherwise the take is
    refused, naming the holder and how to clear it."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("state", "run_id", "workdir"))
    # What the node code gets on stdin (prepare_node: the probes, which it writes into the working directory).
    _stdin = None

    def _node(self, task_vars, python, argv):
        """The node code's JSON answer, run with `python -c <its source>`."""
        res = node_exec.run(self, [python, "-c", node_code()] + list(argv), stdin=self._stdin)
        out = node_exec.last_json(res)
        if not isinstance(out, dict):
            raise AnsibleActionFail("the run lock on %s: rc=%s %s" % (task_vars.get("inventory_hostname"),
                                                                      res["rc"], node_exec.why(res)))
        return out

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        state = self._task.args.get("state", "release")
        python = self._templar.template(task_vars["assess_python"])
        path = lock_path(self._templar.template(task_vars.get("assess_lock_dir", "/tmp")))
        if state == "release":
            run_id = self._task.args.get("run_id") or self._templar.template(task_vars["assess_run"])["id"]
            workdir = self._task.args.get("workdir")
            out = self._node(task_vars, python, ["release", "--path", path, "--run-id", run_id]
                             + (["--workdir", workdir] if workdir else []))
            result.update(changed=False, released=out["released"], holder=out.get("holder"),
                          workdir_removed=out.get("workdir_removed"))
            return result
        if state == "inspect":
            # for playbooks/cleanup.yml: a run that still runs keeps its processes, directory and lock
            out = self._node(task_vars, python, ["show", "--path", path])
            holder = out.get("holder")
            why = gone_why(holder, out["holder_workdir"], out["age_s"] or 0) if holder else "no lock on the node"
            result.update(changed=False, holder=holder, live=holder is not None and why is None, gone_why=why)
            return result
        raise AnsibleActionFail("clustermax.assess.run_lock: state must be release or inspect, got %r (preflight "
                                "takes the lock with clustermax.assess.prepare_node)" % state)

    def _holder(self, run, workdir):
        """This run as the lock names it: the ansible-playbook process (the parent of this forked worker) on this
        machine, since when, and its working directory on the node."""
        pid = os.getppid()
        return {"run_id": run["id"], "machine": socket.gethostname(), "boot_id": boot_id(), "pid": pid,
                "start_ticks": start_ticks(pid), "run_dir": run["dir"], "workdir": workdir,
                "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}

    def _judge(self, task_vars, python, path, host, holder, out, extra=()):
        """What the node's answer to `take` (out) means: {taken, node (the node's last answer), holder, msg,
        warnings}. A holder that is gone (gone_why) is broken, once, with a warning; a live one refuses the lock,
        and msg names it and how to clear it. `extra`: more arguments for the take that breaks it."""
        if out.get("error"):
            return {"taken": False, "node": out, "msg": out["error"]}
        if out["taken"]:
            return {"taken": True, "node": out, "holder": holder}
        held = out["holder"]
        why = gone_why(held, out["holder_workdir"], out["age_s"])
        if why is None:
            return {"taken": False, "node": out, "holder": held, "msg": (
                "%s is being assessed by run %s (controller %s, pid %s, since %s): one assessment per node at a time. "
                "Wait for it to end; if it is gone, run ansible-playbook playbooks/cleanup.yml -e "
                "assess_cleanup_run=%s" % (host, held.get("run_id"), held.get("machine"), held.get("pid"),
                                          held.get("since"), held.get("run_id")))}
        argv = ["take", "--path", path, "--holder", json.dumps(holder, sort_keys=True),
                "--break-run", held.get("run_id") or ""] + list(extra)
        out = self._node(task_vars, python, argv)
        if not out["taken"]:  # another run broke it first
            return {"taken": False, "node": out, "holder": out.get("holder"),
                    "msg": "%s: the lock was taken by run %s meanwhile" % (host, out["holder"].get("run_id"))}
        return {"taken": True, "node": out, "holder": holder,
                "warnings": ["%s: broke the lock of run %s: %s" % (host, held.get("run_id"), why)]}
