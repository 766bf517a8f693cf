# Copyright: clustermax.assess contributors
# Apache-2.0
"""Action plugin clustermax.assess.make_run: the run's directory and records on the controller, in one task."""

import json
import os
import random
import time

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.inventory.manager import InventoryManager
from ansible.plugins.action import ActionBase
from ansible_collections.clustermax.assess.probes import __version__ as probes_version
from ansible_collections.clustermax.assess.probes import pyz


class ActionModule(ActionBase):
    """Runs once, in the controller's own process (no module, no connection): makes
    ``<output_dir>/<provider>/<run id>`` (never an existing one: a run never writes into another run's directory),
    writes the run's request there (``assess_run.json``: hosts, provider, profile, launcher) before any node is
    touched, and builds ``probes.pyz`` into it (exactly what runs on the nodes). Sets the fact ``assess_run``.

    The request also names the inventory's hosts that the play targets whatever ``--limit`` left of them
    (``inventory``), the limit (``limit``) and the version of the probes staged (``probes_version``): the report
    counts a host of the inventory that the run left out as not assessed, and refuses an artifact that another
    version of the probes wrote (reports/load.py).

    One task instead of six (file, command, copy, command and two set_fact): on one machine they were 1.8 s of a
    7 s audit, each a worker process and most a module run."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("output_dir", "provider", "profile", "run_id", "slice", "launch", "hosts", "limit"))

    def _inventory(self, task_vars, hosts):
        """The inventory's hosts that this play's pattern names, before --limit (which ansible_play_hosts_all has
        already applied): resolved as the inventory_hostnames lookup does, against the whole inventory's groups.
        In the inventory's order; a host of the run that the pattern does not name (none should) is kept."""
        try:
            pattern = self._task.get_play().hosts or "all"
            manager = InventoryManager(self._loader, parse=False)
            for group, members in (task_vars.get("groups") or {}).items():
                manager.add_group(group)
                for host in members:
                    manager.add_host(host, group=group)
            targeted = [h.name for h in manager.get_hosts(pattern=pattern)]
        except (AnsibleError, AttributeError):
            # a play that cannot be read back here: only its own hosts are known (nothing is counted as left out)
            targeted = []
        return targeted + [h for h in hosts if h not in targeted]

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        args = self._task.args
        now = time.gmtime()
        run_id = str(args.get("run_id") or "").strip() or "%s-%06x" % (time.strftime("%Y%m%dT%H%M%SZ", now),
                                                                        random.randrange(1 << 24))
        parent = os.path.join(os.path.realpath(os.path.expanduser(str(args["output_dir"]))), str(args["provider"]))
        run_dir = os.path.join(parent, run_id)
        part = str(args.get("slice") or "").strip()
        hosts = [str(h) for h in args.get("hosts") or []]
        if part:
            # one slice of a sliced run (AWX job slicing): a run directory of its own inside the run's, which
            # `assess-report merge` joins with the other slices (reports/merge.py); the run's may exist already
            parent = os.path.join(run_dir, "slices")
            run_dir = os.path.join(parent, part)
        try:
            os.makedirs(parent, mode=0o755, exist_ok=True)
            os.mkdir(run_dir)  # no exist_ok: an existing run (an explicit assess_run_id too) is refused, not reused
        except OSError as ex:
            raise AnsibleActionFail("cannot make the run directory %s: %s" % (run_dir, ex)) from None
        run = {"id": run_id, "dir": run_dir, "provider": args["provider"], "profile": args["profile"],
               # how multi-node worlds start (probes/common/launch.py); the probe action gives it to every
               # multi-host probe
               "launch": dict(args.get("launch") or {}),
               "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", now), "hosts": hosts,
               # what the run was asked to assess: a host of the inventory left out of the run (--limit, a slice)
               # is one the report counts as not assessed, never as a smaller cluster
               "inventory": self._inventory(task_vars or {}, hosts),
               # the version of the probes in probes.pyz: every artifact of the run names it (tool.version)
               "probes_version": probes_version}
        if args.get("limit"):
            run["limit"] = str(args["limit"])  # --limit's pattern, as given: why the report says a host was left out
        if part:
            run["slice"] = part
        with open(os.path.join(run_dir, "assess_run.json"), "w", encoding="utf-8") as fh:
            fh.write(json.dumps(run, indent=4, sort_keys=True) + "\n")
        pyz.build(os.path.join(run_dir, "probes.pyz"))
        # the run's own directory and records: reported unchanged, `changed` counts what a run did to the cluster
        # the fact without the inventory: every host holds the fact, and the report alone reads the inventory
        fact = {k: v for k, v in run.items() if k != "inventory"}
        result.update(changed=False, ansible_facts={"assess_run": fact}, msg="run %s in %s" % (run_id, run_dir))
        return result
