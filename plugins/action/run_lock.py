# Copyright: clustermax.assess contributors
# Apache-2.0
"""Action plugin clustermax.assess.run_lock: one assessment per node at a time (take, or give back, the node's lock)."""

import json
import os
import shlex
import socket
import time

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.clustermax.assess.plugins.plugin_utils import node_exec
from ansible_collections.clustermax.assess.plugins.plugin_utils.journal import CLEANUP_OF_ENV, start_ticks
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
# pod: without this, every later job would be refused until someone cleaned up by hand. A step that runs no probe on
# some nodes for longer (a reliability batch: the others wait while it reboots or faults its nodes, for up to its
# timeouts) declares on each lock first how long it may last (state=hold, quiet_s), which is added (stale_after).
HEARTBEAT_STALE_S = 30 * 60


PYTHON_MARK = "clustermax-assess-python: "
# The shell's exit status when no candidate is a usable Python.
NO_PYTHON_RC = 3


def node_code():
    with open(NODE_CODE, encoding="utf-8") as fh:
        return fh.read()


def node_command(candidates, min_version, lock_argv):
    """One shell command that finds Python and runs the lock's node code with it: try each candidate Python with
    plain sh (no Python is needed to look), print the first usable one on a marked line (whatever a login prints
    around it is not the path), and run the node code with it (its source in the command line: nothing to copy
    first). Preflight's round trip (prepare_node: take, with the probes on stdin) and the cleanup's (inspect)."""
    version = "(%s)" % ", ".join(str(int(p)) for p in str(min_version).split("."))
    check = "import sys; sys.exit(0 if sys.version_info[:2] >= %s else 1)" % version
    return (
        "for p in %s; do exe=$(command -v \"$p\" 2>/dev/null) || continue; "
        "\"$exe\" -c %s 2>/dev/null </dev/null || continue; echo %s\"$exe\"; exec \"$exe\" -c %s %s; done; exit %d"
        % (" ".join(shlex.quote(str(c)) for c in candidates), shlex.quote(check), shlex.quote(PYTHON_MARK),
           shlex.quote(node_code()), " ".join(shlex.quote(a) for a in lock_argv), NO_PYTHON_RC))


def found_python(res):
    """The path on the marked line of node_command's output, or None when no candidate was usable."""
    found = [line[len(PYTHON_MARK):].strip() for line in res["stdout"].splitlines() if line.startswith(PYTHON_MARK)]
    return found[0] if found and res["rc"] != NO_PYTHON_RC else None


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


def _own_cleanup(holder):
    """Whether this cleanup was started by the holder's own controller: at its end, for the hosts its cleanup play
    did not reach, or after Ctrl-C (plugins/callback/assessment.py names the run in CLEANUP_OF_ENV for it). The
    holder still runs then, and is the one asking."""
    return bool(holder.get("run_id")) and os.environ.get(CLEANUP_OF_ENV) == holder["run_id"] and \
        holder.get("machine") == socket.gethostname()


def stale_after(holder):
    """Seconds the holder's run may leave its lock untouched while it runs: HEARTBEAT_STALE_S, and the quiet it
    declared for its current step (quiet_s, written by state=hold; absent, or 0, outside such a step)."""
    try:
        quiet = float(holder.get("quiet_s") or 0)
    except (TypeError, ValueError):
        quiet = 0.0
    return HEARTBEAT_STALE_S + max(quiet, 0.0)


def gone_why(holder, holder_workdir, age_s, machine=None, boot=None):
    """Why the holder of a node's lock is gone (the lock is stale), or None while it may still run."""
    machine = machine or socket.gethostname()
    boot = boot if boot is not None else boot_id()
    if not holder.get("run_id"):
        return "the lock is unreadable (%s)" % holder.get("unreadable", "")
    if holder.get("machine") == machine and holder.get("boot_id") == boot:
        return None if _alive_here(holder) else "its controller (pid %s on %s) has ended" % (holder.get("pid"), machine)
    if age_s > stale_after(holder):
        return "its run has not touched it for %d s (a run touches it every minute%s)" % (
            age_s, ", or declares a longer quiet: %d s here" % holder["quiet_s"] if holder.get("quiet_s") else "")
    if not holder_workdir and age_s > FOREIGN_STALE_S:
        return "its working directory is gone from the node and the lock is %d s old" % age_s
    return None


def _who(holder):
    return "controller %s, pid %s, run directory %s, since %s" % (
        holder.get("machine"), holder.get("pid"), holder.get("run_dir"), holder.get("since"))


def refusal(host, held, holder):
    """Why a live holder keeps the node's lock from this run (holder). A holder of the same run id is another run all
    the same (another controller, or another assess_output_dir): both are named, as the id alone does not say which
    one to stop."""
    if held.get("run_id") == holder.get("run_id"):
        return ("%s is being assessed by another run of the same id %s (%s); this run (%s) is refused: one assessment "
                "per node at a time, and two runs of one id would share the node's working directory. Use another "
                "assess_run_id, or wait for that run to end; if it is gone, run ansible-playbook playbooks/cleanup.yml "
                "-e assess_cleanup_run=%s" % (host, held.get("run_id"), _who(held), _who(holder), held.get("run_id")))
    return ("%s is being assessed by run %s (controller %s, pid %s, since %s): one assessment per node at a time. "
            "Wait for it to end; if it is gone, run ansible-playbook playbooks/cleanup.yml -e "
            "assess_cleanup_run=%s" % (host, held.get("run_id"), held.get("machine"), held.get("pid"),
                                      held.get("since"), held.get("run_id")))


class ActionModule(ActionBase):
    """state=release: give the node's lock back (run_id: this run, another run, or 'all', for
    playbooks/cleanup.yml), removing `workdir` first when given (the run's cleanup: one round trip).
    state=inspect: who holds the node's lock and whether that run still runs (live; gone_why when it does not).
    state=hold: touch this run's lock and declare on it that the run may leave it untouched for `quiet_s` more
    seconds (0: ends such a quiet), before a step that runs no probe on the node for that long.

    Preflight takes the lock with clustermax.assess.prepare_node (a subclass: _holder and _judge are the taking
    side). A lock held by a run whose controller has ended (on this machine), or by a run from elsewhere whose
    working directory is gone or that has not touched it for long, is broken with a warning; otherwise the take is
    refused, naming the holder and how to clear it."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("state", "run_id", "workdir", "candidates", "min_version", "quiet_s"))
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
        path = lock_path(self._templar.template(task_vars.get("assess_lock_dir", "/tmp")))
        if state == "inspect":
            return self._inspect(task_vars, result, path)
        python = self._templar.template(task_vars["assess_python"])
        if state == "release":
            run_id = self._task.args.get("run_id") or self._templar.template(task_vars["assess_run"])["id"]
            workdir = self._task.args.get("workdir")
            out = self._node(task_vars, python, ["release", "--path", path, "--run-id", run_id]
                             + (["--workdir", workdir] if workdir else []))
            result.update(changed=False, released=out["released"], holder=out.get("holder"),
                          workdir_removed=out.get("workdir_removed"))
            return result
        if state == "hold":
            return self._hold(task_vars, result, python, path)
        raise AnsibleActionFail("clustermax.assess.run_lock: state must be release, inspect or hold, got %r "
                                "(preflight takes the lock with clustermax.assess.prepare_node)" % state)

    def _hold(self, task_vars, result, python, path):
        """Touch this run's lock on the node and declare the quiet (quiet_s) on it: the node code changes it only
        while this very run holds it (the holder preflight wrote, rebuilt here: same controller process and run
        directory), and never makes one."""
        quiet = float(self._task.args.get("quiet_s") or 0)
        run = self._templar.template(task_vars["assess_run"])
        holder = self._holder(run, self._templar.template(task_vars["assess_remote_dir"]))
        out = self._node(task_vars, python, ["hold", "--path", path, "--holder", json.dumps(holder, sort_keys=True),
                                             "--quiet-s", str(quiet)])
        result.update(changed=False, held=out["held"], holder=out.get("holder"))
        if not out["held"]:
            held = out.get("holder")
            result["warnings"] = ["%s: this run no longer holds the node's run lock (%s): another run may assess "
                                  "the node meanwhile" % (task_vars.get("inventory_hostname"),
                                                          "held by run %s" % held.get("run_id") if held else "none")]
        return result

    def _inspect(self, task_vars, result, path):
        """For playbooks/cleanup.yml, in one round trip: find Python as preflight does (assess_python, or the first
        usable of `candidates`; the run being cleaned up may never have found one) and say who holds the lock and
        whether that run still runs (a run that still runs keeps its processes, directory and lock)."""
        host = task_vars.get("inventory_hostname")
        given = "assess_python" in task_vars
        candidates = [self._templar.template(task_vars["assess_python"])] if given else \
            list(self._task.args.get("candidates") or ["python3"])
        min_version = self._task.args.get("min_version") or "3.8"
        res = node_exec.run(self, node_command(candidates, min_version, ["show", "--path", path]))
        python = found_python(res)
        if python is None:
            raise AnsibleActionFail("no usable Python >= %s on %s (tried %s; set assess_python for this host)" % (
                min_version, host, ", ".join(candidates)))
        out = node_exec.last_json(res)
        if not isinstance(out, dict):
            raise AnsibleActionFail("the run lock on %s: rc=%s %s" % (host, res["rc"], node_exec.why(res)))
        holder = out.get("holder")
        why = gone_why(holder, out["holder_workdir"], out["age_s"] or 0) if holder else "no lock on the node"
        if why is None and _own_cleanup(holder):
            why = "its own controller is cleaning up after it"
        result.update(changed=False, holder=holder, live=holder is not None and why is None, gone_why=why,
                      ansible_facts={"assess_python": python})
        return result

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
            return {"taken": False, "node": out, "holder": held, "msg": refusal(host, held, holder)}
        argv = ["take", "--path", path, "--holder", json.dumps(holder, sort_keys=True),
                "--break-run", held.get("run_id") or ""] + list(extra)
        out = self._node(task_vars, python, argv)
        if not out["taken"]:  # another run broke it first
            return {"taken": False, "node": out, "holder": out.get("holder"),
                    "msg": "%s: the lock was taken by run %s meanwhile" % (host, out["holder"].get("run_id"))}
        return {"taken": True, "node": out, "holder": holder,
                "warnings": ["%s: broke the lock of run %s: %s" % (host, held.get("run_id"), why)]}
