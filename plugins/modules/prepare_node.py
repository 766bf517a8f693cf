#!/usr/bin/python
# Copyright: clustermax.assess contributors
# Apache-2.0
# Documentation only: the work is done by the action plugin of the same name (plugins/action/prepare_node.py).

DOCUMENTATION = r"""
---
module: prepare_node
short_description: Preflight's work on one node (Python, run lock, working directory, probes, node inventory)
description:
  - In one command (one SSH round trip), finds a usable Python (C(assess_python), or the first of O(candidates) at
    least O(min_version)) with plain C(sh), and with it takes the node's run lock
    C(<assess_lock_dir>/clustermax-assess.lock) for this run (C(assess_run)), makes the run's working directory
    and writes the probes there, which travel on the command's stdin.
  - A lock whose holder is gone is broken with a warning; gone means its controller ran on this machine and has
    ended, or it came from another machine and its working directory is no longer on the node, or its run has not
    touched it for 30 minutes.
  - The probes are written only when the working directory does not hold the same digest already (a shared
    C(assess_remote_tmp), where another node wrote them), under a temporary name that is then renamed.
  - Then takes the node inventory (the C(node_info) probe, as M(clustermax.assess.probe) runs it), whose facts are
    C(assess_node); a node inventory that fails fails the task.
  - Never fails for a node without a usable Python or whose lock another run holds; its facts say so, for
    preflight's asserts to name every such node at once.
version_added: 0.3.0
options:
  candidates:
    description: Pythons tried in order when C(assess_python) is not set.
    type: list
    elements: str
    required: true
  min_version:
    description: Oldest Python accepted, C(major.minor).
    type: str
    required: true
  probes:
    description: The run's probes.pyz on the controller.
    type: path
    required: true
author:
  - clustermax.assess contributors
"""

EXAMPLES = r"""
- name: Preflight | find Python, take the run lock, make the working directory, stage the probes
  clustermax.assess.prepare_node:
    candidates: "{{ preflight_python_candidates }}"
    min_version: "{{ preflight_python_min }}"
    probes: "{{ assess_run.dir }}/probes.pyz"
"""

RETURN = r"""
probes:
  description: C(staged), or C(present) when the working directory held the same probes already.
  type: str
  returned: when the lock was taken
artifact:
  description: The node inventory's artifact on the controller (as M(clustermax.assess.probe) returns it).
  type: str
  returned: when the lock was taken
ansible_facts:
  description: >-
    assess_remote_dir, assess_profile, assess_python (the one found unless given), assess_python_given,
    preflight_python_path ('' when none was found), preflight_python_msg, preflight_lock_taken, preflight_lock_msg
    (why not), assess_node (the node inventory).
  type: dict
  returned: always
"""
