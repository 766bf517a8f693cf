# Copyright: clustermax.assess contributors
# Apache-2.0
"""Action plugin clustermax.assess.prepare_node: preflight's work on one node, in one round trip."""

import hashlib
import json

from ansible.errors import AnsibleActionFail
from ansible_collections.clustermax.assess.plugins.action.probe import ActionModule as Probe
from ansible_collections.clustermax.assess.plugins.action.run_lock import ActionModule as RunLock
from ansible_collections.clustermax.assess.plugins.action.run_lock import found_python, node_command
from ansible_collections.clustermax.assess.plugins.plugin_utils import node_exec
from ansible_collections.clustermax.assess.probes.common.run_lock import lock_path

# The node inventory (probes/node_info): what every later phase and the report read about the node.
NODE_INFO_TIMEOUT_S = 120


class ActionModule(RunLock, Probe):
    """Preflight's work on one node, in one task (each task costs the controller a worker process per host). In one
    SSH round trip: find a usable Python (assess_python, or the first of preflight_python_candidates), take the
    node's run lock (RunLock judges a holder that is gone), make the run's working directory and write the probes
    there, which come on the command's stdin (no temporary directory, no file transfer: three round trips fewer),
    unless it holds the same digest already (a shared assess_remote_tmp, where another node wrote them). Then the
    node inventory: the node_info probe, as clustermax.assess.probe runs it (its artifact, its facts as assess_node;
    a failed one fails the task).

    Never fails for a node without Python or a refused lock: it says so in its facts (preflight_python_path '',
    preflight_lock_taken false, preflight_lock_msg) and preflight's run_once asserts refuse the run naming every
    such node at once. Sets assess_remote_dir, assess_profile, assess_python, assess_python_given."""

    # the probes travel on the lock command's stdin: no temporary directory on the node (two more round trips)
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("candidates", "min_version", "probes"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(Probe, self).run(tmp, task_vars)  # ActionBase.run: RunLock's and Probe's are their own tasks
        args = self._task.args
        host = task_vars.get("inventory_hostname")
        run = self._templar.template(task_vars["assess_run"])
        remote_tmp = self._templar.template(task_vars.get("assess_remote_tmp", "/tmp"))
        workdir = "%s/clustermax-assess-%s" % (remote_tmp.rstrip("/") or "", run["id"])
        given = "assess_python" in task_vars
        candidates = [self._templar.template(task_vars["assess_python"])] if given else list(args["candidates"])
        facts = {"assess_remote_dir": workdir, "assess_profile": run["profile"], "assess_python_given": given,
                 "preflight_python_path": "", "preflight_python_msg": "", "preflight_lock_taken": False,
                 "preflight_lock_msg": ""}
        result.update(changed=False, ansible_facts=facts)
        with open(args["probes"], "rb") as fh:
            self._stdin = fh.read()  # the probes, which the node code writes into the working directory
        stage = ["--workdir", workdir, "--probes-sha256", hashlib.sha256(self._stdin).hexdigest()]

        holder = self._holder(run, workdir)
        path = lock_path(self._templar.template(task_vars.get("assess_lock_dir", "/tmp")))
        take = ["take", "--path", path, "--holder", json.dumps(holder, sort_keys=True)] + stage
        res = node_exec.run(self, node_command(candidates, args["min_version"], take), stdin=self._stdin)
        python = found_python(res)
        if python is None:
            facts["preflight_python_msg"] = "%s (tried %s; set assess_python for this host)" % (host,
                                                                                                ", ".join(candidates))
            result["msg"] = "no usable Python >= %s on %s" % (args["min_version"], facts["preflight_python_msg"])
            return result
        facts.update(preflight_python_path=python, assess_python=python)
        try:
            answer = node_exec.last_json(res)
            if not isinstance(answer, dict):
                answer = {"taken": False, "error": "the run lock on %s: rc=%s %s" % (host, res["rc"],
                                                                                    node_exec.why(res))}
            lock = self._judge(task_vars, python, path, host, holder, answer, stage)
        except AnsibleActionFail as ex:  # the node failed while breaking a gone run's lock
            lock = {"taken": False, "msg": str(ex)}
        facts.update(preflight_lock_taken=lock["taken"], preflight_lock_msg=lock.get("msg", ""))
        if lock.get("warnings"):
            result["warnings"] = lock["warnings"]
        if not lock["taken"]:
            result["msg"] = lock["msg"]
            return result
        result["probes"] = lock["node"].get("probes")  # staged, or present (a shared tmp)
        # the probe action reads these from the task's variables: this task is what sets them
        probe_vars = dict(task_vars, assess_python=python, assess_remote_dir=workdir, preflight_lock_taken=True)
        # torch: False. At preflight the probes' venv (the tools step) is not made yet, so the torch of this Python says
        # little, and each phase records the torch it runs with; importing it cost ~1 s per node.
        return self._probe(probe_vars, result, "node_info", params={"torch": False}, timeout=NODE_INFO_TIMEOUT_S,
                           facts=True)
