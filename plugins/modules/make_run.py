#!/usr/bin/python
# Copyright: clustermax.assess contributors
# Apache-2.0
# Documentation only: the work is done by the action plugin of the same name (plugins/action/make_run.py).

DOCUMENTATION = r"""
---
module: make_run
short_description: Make the run on the controller (its directory, its request and probes.pyz), in one task
description:
  - Runs in the controller's own process; connects to no node.
  - Makes C(<output_dir>/<provider>/<run id>); an existing run directory is refused, never reused.
  - Writes the run's request C(assess_run.json) (hosts, provider, profile, launcher, start time) and builds
    C(probes.pyz) (the probes as one reproducible zip application) into it.
  - The request also names the hosts of the inventory that the play's pattern targets before C(--limit)
    (C(inventory)), the limit (C(limit)) and the version of the probes staged (C(probes_version)); the report counts a
    host of the inventory that the run left out as not assessed, and refuses an artifact of another run or of
    another version of the probes.
  - Sets the fact C(assess_run).
version_added: 0.3.0
options:
  output_dir:
    description: Directory that holds C(<provider>/<run id>).
    type: path
    required: true
  provider:
    description: The provider's name.
    type: str
    required: true
  profile:
    description: The run's profile.
    type: str
    required: true
  run_id:
    description: This run id instead of a generated one (C(<UTC time>-<6 hex digits>)).
    type: str
  launch:
    description: How multi-node worlds start (launcher, mpirun_args, srun_args).
    type: dict
  hosts:
    description: The run's hosts.
    type: list
    elements: str
  limit:
    description: The C(--limit) pattern the run was started with (C(ansible_limit)), when there was one.
    type: str
author:
  - clustermax.assess contributors
"""

EXAMPLES = r"""
- name: Preflight | make the run, its request and its probes
  clustermax.assess.make_run:
    output_dir: runs
    provider: example
    profile: standard
    hosts: "{{ ansible_play_hosts_all }}"
    limit: "{{ ansible_limit | default(omit) }}"
"""

RETURN = r"""
ansible_facts:
  description: assess_run (id, dir, provider, profile, launch, started_at, hosts, probes_version, limit).
  type: dict
  returned: always
"""
