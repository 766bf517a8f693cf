#!/usr/bin/python
# Copyright: clustermax.assess contributors
# Apache-2.0
# Documentation only: the work is done by the action plugin of the same name (plugins/action/check_inputs.py).

DOCUMENTATION = r"""
---
module: check_inputs
short_description: Refuse removed, unknown, mistyped or out-of-range variables and duplicate hosts, on the controller
description:
  - Reads the inventory and group variables of the given hosts and the extra vars, on the controller, and fails
    with every problem at once, before any node is touched.
  - A variable with a project prefix (C(assess_) or a role's name) that no role declares is refused with the
    closest declared name. Declared variables are checked against their role's argument_specs (type, choices) and
    C(meta/input_ranges.yml) (minimum and maximum); a value outside is refused, never clamped.
  - Two hosts with the same C(ansible_host) and C(ansible_port) are refused.
version_added: 0.2.0
options:
  hosts:
    description: The play's hosts.
    type: list
    elements: str
    required: true
  removed:
    description: Removed or renamed variables (C(name), C(successor), C(note)), refused with their successor.
    type: list
    elements: dict
  foreign:
    description: Names with a project prefix that belong to another tool in the inventory, not refused.
    type: list
    elements: str
author:
  - clustermax.assess contributors
"""

EXAMPLES = r"""
- name: Preflight | refuse what was set wrong
  clustermax.assess.check_inputs:
    hosts: "{{ ansible_play_hosts_all }}"
    removed: "{{ preflight_removed_variables }}"
    foreign: "{{ assess_foreign_variables }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
msg:
  description: How many hosts and variables were checked.
  returned: success
  type: str
"""
