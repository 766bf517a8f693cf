#!/usr/bin/python
# Copyright: clustermax.assess contributors
# Apache-2.0
# Documentation only: the work is done by the action plugin of the same name (plugins/action/probe.py).

DOCUMENTATION = r"""
---
module: probe
short_description: Run one clustermax.assess probe on a node and bring its artifact back
description:
  - Runs C(<assess_python> <assess_remote_dir>/probes.pyz <name> --inline) on the node through the command module,
    in one round trip, and writes the artifact (schema v1) and its raw files under
    C(<assess_run.dir>/artifacts/<inventory_hostname>/) on the controller.
  - A probe that measured a fault, or was skipped, is data, not a failed task. The task fails only when no artifact
    could be had; an error artifact with the reason is then written on the controller.
  - Needs the variables C(assess_python), C(assess_remote_dir) and C(assess_run), set by the preflight role.
  - "Runs under C(--check) as well (a probe measures; it writes only into the run's working directory), so a probe
    task needs no C(check_mode) of its own. Roles guard the probes that load or change a node with
    C(when: not ansible_check_mode)."
version_added: 0.1.0
options:
  name:
    description: Probe to run (see C(python3 probes.pyz list)).
    type: str
    required: true
  variant:
    description: Variant name, part of the artifact file name (C(<name>-<variant>.json)).
    type: str
  params:
    description: Parameters passed to the probe as a JSON object.
    type: dict
    default: {}
  timeout:
    description: Seconds after which the probe stops itself and records a timeout (0 for none).
    type: int
    default: 0
  facts:
    description: Also return the artifact's facts and device block as the fact C(assess_node).
    type: bool
    default: false
  peers:
    description:
      - Add to the params the hosts still in the play (C(hosts)), their C(ansible_host) addresses (C(addresses))
        and this host's index among them (C(rank)), for probes that run on all hosts at once and meet at the first.
      - A param the task gives itself is kept.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: The probe runs under C(--check) too.
author:
  - clustermax.assess contributors
"""

EXAMPLES = r"""
- name: Node inventory
  clustermax.assess.probe:
    name: node_info
    facts: true
    timeout: 120

- name: TCP between every pair of hosts (hosts, addresses and rank filled in; the probe derives its ports)
  clustermax.assess.probe:
    name: tcp_pairs
    peers: true
    params:
      duration_s: 5
"""

RETURN = r"""
artifact:
  description: Path of the artifact on the controller.
  type: str
  returned: always
status:
  description: The artifact's status, ok, error or skipped.
  type: str
  returned: always
reason:
  description: Why the status is not ok.
  type: str
  returned: when not ok
"""
