# Copyright: clustermax.assess contributors
# Apache-2.0
"""Action plugin clustermax.assess.check_inputs: refuse what the user set wrong, before any node is touched."""

import json

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.vars import load_extra_vars
from ansible_collections.clustermax.assess.plugins.plugin_utils.inputs import (
    declared,
    duplicate_addresses,
    problems,
)


def _text(value):
    return json.dumps(value, sort_keys=True, default=str)


class ActionModule(ActionBase):
    """Runs once on the controller (preflight's controller tasks). Reads every play host's inventory and group
    variables and the extra vars, and fails with every problem at once: removed, unknown (with the closest name),
    mistyped or out-of-range variables, and hosts that share an address (plugins/plugin_utils/inputs.py)."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts", "removed", "foreign"))

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._task.args
        hostvars = task_vars["hostvars"]
        hosts = list(args.get("hosts") or [])
        settings = {}
        addresses = {}
        for host in hosts:
            hv = hostvars[host]
            # facts (a fact cache, AWX fact storage: node_info's assess_node) are not what the user set
            facts = set(hv.get("ansible_facts") or ()) | {"ansible_facts"}
            for name in hv.keys():
                if name in facts:
                    continue
                try:
                    value = hv[name]  # templated for this host
                except Exception:  # noqa: BLE001 - a template that needs the play's variables is checked when used
                    continue
                settings.setdefault(name, {}).setdefault(_text(value), []).append(host)
            addresses[host] = (str(hv.get("ansible_host", host)), hv.get("ansible_port"))
        # Extra vars win over inventory variables: they are what the roles will see.
        for name, value in load_extra_vars(self._loader).items():
            settings[name] = {_text(value): ["extra vars"]}
        found = problems(settings, declared(), removed=args.get("removed") or (),
                         foreign=set(args.get("foreign") or ()))
        found += duplicate_addresses(addresses)
        if found:
            raise AnsibleActionFail("inputs refused before any node was touched: " + "; ".join(found))
        result.update(changed=False, msg="%d hosts, %d variables checked" % (len(hosts), len(settings)))
        return result
