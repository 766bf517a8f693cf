# Copyright: clustermax.assess contributors
# Apache-2.0
"""Action plugin clustermax.assess.probe: run one node probe and bring its artifact back, in one round trip."""

import base64
import json
import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.clustermax.assess.plugins.plugin_utils import node_exec
from ansible_collections.clustermax.assess.probes.artifact import (
    Artifact,
    artifact_filename,
    validate,
    write_json_atomic,
)
from ansible_collections.clustermax.assess.probes.common.run_lock import lock_path


class ActionModule(ActionBase):
    """Runs `<assess_python> <assess_remote_dir>/probes.pyz <name> --inline …` on the node (plugin_utils/node_exec),
    writes the artifact and its raw files under `<assess_run.dir>/artifacts/<inventory_hostname>/` on the
    controller, and returns the artifact's status. A probe that measured a fault is data, not a failed task:
    the task fails only when no artifact could be had at all, and even then an error artifact is written
    on the controller so the report shows what is missing and why.

    What every multi-host task would otherwise repeat is filled in here: `peers: true` adds the play's hosts,
    their addresses and this host's rank to the params (params given by the task win), and `tools_step` comes from
    assess_tools (set by the tools role) for every probe. Ports are not passed: every
    multi-host probe derives its own from the run id (probes/common/ports.py), so two runs never share one."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("name", "variant", "params", "timeout", "facts", "peers"))

    def _var(self, task_vars, name):
        if name not in task_vars:
            raise AnsibleActionFail("clustermax.assess.probe needs the variable %s (set by the preflight role)" % name)
        return self._templar.template(task_vars[name])

    def _peer_params(self, task_vars, host):
        """hosts, addresses and rank: the hosts still in the play (one that dropped out is not waited for), in
        play order, the first one being where the others meet."""
        hosts = list(self._var(task_vars, "ansible_play_hosts"))
        hostvars = task_vars["hostvars"]
        addresses = [str(self._templar.template(hostvars[h].get("ansible_host", h))) for h in hosts]
        out = {"hosts": hosts, "addresses": addresses, "rank": hosts.index(host),
               # where each host sits (inventory variables, set per host or per group): worlds fill a scale-up
               # domain and a rack before they cross to the next
               "racks": [str(self._templar.template(hostvars[h].get("assess_rack", ""))) for h in hosts],
               "nvlink_domains": [str(self._templar.template(hostvars[h].get("assess_nvlink_domain", "")))
                                  for h in hosts]}
        # how multi-node worlds start (probes/common/launch.py), the same for every host of the run
        run = self._var(task_vars, "assess_run")
        out.update({k: v for k, v in (run.get("launch") or {}).items() if v is not None})
        return out

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._task.args
        name = args.get("name")
        if not name:
            raise AnsibleActionFail("clustermax.assess.probe: 'name' is required")
        params = args.get("params") or {}
        if not isinstance(params, dict):
            raise AnsibleActionFail("clustermax.assess.probe %s: 'params' must be a dict, got %r" % (name, params))
        return self._probe(task_vars, result, name, variant=args.get("variant") or None, params=params,
                           timeout=float(args.get("timeout") or 0), facts=args.get("facts"),
                           peers=boolean(args.get("peers", False), strict=False))

    def _probe(self, task_vars, result, name, variant=None, params=None, timeout=0.0, facts=False, peers=False):
        """Run the probe on the node and bring its artifact back into `result` (also preflight's prepare_node)."""
        params = params or {}
        host = task_vars.get("inventory_hostname")
        python = self._var(task_vars, "assess_python")
        remote_dir = self._var(task_vars, "assess_remote_dir")
        run = self._var(task_vars, "assess_run")
        injected = self._peer_params(task_vars, host) if peers else {}
        if task_vars.get("assess_tools"):
            # what the tools step installed and built (roles/tools), for every probe: PATH, LD_LIBRARY_PATH, why missing
            tools = self._templar.template(task_vars["assess_tools"])
            injected["tools_step"] = {k: tools.get(k) for k in ("path", "ld_library_path", "missing") if tools.get(k)}
        params = dict(injected, **params)
        local_dir = os.path.join(run["dir"], "artifacts", host)
        argv = [python, remote_dir + "/probes.pyz", name, "--out", remote_dir + "/artifacts",
                "--run-id", run["id"], "--host", host, "--params", json.dumps(params, sort_keys=True), "--inline"]
        if boolean(self._templar.template(task_vars.get("preflight_lock_taken", False)), strict=False):
            # the run lock's heartbeat while the probe runs (a lock not touched for long is a gone run's)
            argv += ["--lock", lock_path(self._templar.template(task_vars.get("assess_lock_dir", "/tmp")))]
        if variant:
            argv += ["--variant", variant]
        if timeout:
            argv += ["--timeout", str(timeout)]

        # Through the connection itself (plugins/plugin_utils/node_exec.py), in --check mode too: a probe measures
        # and writes only into the run's working directory (roles guard the probes that load or change a node with
        # `when: not ansible_check_mode`).
        cmd = node_exec.run(self, argv)
        manifest = node_exec.last_json(cmd) if cmd["rc"] == 0 else None
        if not isinstance(manifest, dict) or validate(manifest.get("artifact")):
            reason = "probe %s did not run on %s: rc=%s %s" % (name, host, cmd["rc"], node_exec.why(cmd))
            art = Artifact(name, run["id"], host, variant=variant, params=params)
            art.error(reason)
            path = write_json_atomic(os.path.join(local_dir, artifact_filename(name, variant)), art.to_dict())
            result.update(failed=True, msg=reason, artifact=path, probe=name, status="error", changed=False)
            return result

        doc = manifest["artifact"]
        os.makedirs(local_dir, exist_ok=True)
        for raw_name, content in manifest.get("raw_inline", {}).items():
            with open(os.path.join(local_dir, os.path.basename(raw_name)), "wb") as fh:
                fh.write(base64.b64decode(content))
        for remote_path in manifest.get("raw_remote", []):
            self._connection.fetch_file(remote_path, os.path.join(local_dir, os.path.basename(remote_path)))
        path = write_json_atomic(os.path.join(local_dir, artifact_filename(name, variant)), doc)

        # A probe changes nothing on a node but its run's working directory; the installers of the tools step say
        # when they did (facts.changed), so that a second run of it reports changed=0.
        result.update(changed=bool((doc.get("facts") or {}).get("changed")), probe=name, variant=variant,
                      artifact=path, status=doc["status"],
                      reason=doc.get("reason"), duration_s=doc.get("duration_s"),
                      msg="%s: %s%s" % (name, doc["status"], " (%s)" % doc["reason"] if doc.get("reason") else ""))
        if facts:
            result.setdefault("ansible_facts", {})["assess_node"] = dict(doc.get("facts") or {},
                                                                         device=doc.get("device"))
        return result
