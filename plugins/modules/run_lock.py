#!/usr/bin/python
# Copyright: clustermax.assess contributors
# Apache-2.0
# Documentation only: the work is done by the action plugin of the same name (plugins/action/run_lock.py).

DOCUMENTATION = r"""
---
module: run_lock
short_description: Give the node's run lock back, say who holds it, or hold it through a quiet step
description:
  - Gives the lock C(<assess_lock_dir>/clustermax-assess.lock) back, only when the given run (default this run;
    C(all) for any run) holds it. With O(workdir), that directory is removed first, in the same round trip.
  - With O(state=inspect), nothing changes; in the same round trip it finds a usable Python (setting the fact
    C(assess_python)) and says which run holds the lock and whether that run still runs (its
    controller alive on this machine, or a run from elsewhere that touched the lock in the last 30 minutes, plus
    the quiet it declared with O(state=hold)), for C(playbooks/cleanup.yml), which never removes what a running run
    needs.
  - With O(state=hold), this run's lock is touched and declares that the run may leave it untouched for O(quiet_s)
    more seconds (V(0) ends such a quiet); a step that runs no probe on the node for longer than 30 minutes (a
    reliability batch) declares it first, so that its lock does not look like a gone run's. Only a lock this very
    run holds is changed; none is made.
  - Preflight takes the lock with M(clustermax.assess.prepare_node).
  - The node side is C(probes/common/run_lock.py), run with C(assess_python); every change is made under an flock.
version_added: 0.2.0
options:
  state:
    description: C(release), C(inspect) (read only) or C(hold); preflight takes the lock with
      M(clustermax.assess.prepare_node).
    type: str
    choices: [release, inspect, hold]
    default: release
  quiet_s:
    description: With O(state=hold), the seconds from now the run may leave the lock untouched (the step's longest
      duration); V(0) when the step is over.
    type: float
    default: 0
  run_id:
    description: The run whose lock is given back (default this run; C(all) for whichever run).
    type: str
  workdir:
    description: The run's working directory on the node, removed before the lock is given back.
    type: str
  candidates:
    description: With O(state=inspect) and no C(assess_python) for the host, the Pythons tried in order, with plain
      C(sh), as preflight tries them; the first usable one is set as the fact C(assess_python).
    type: list
    elements: str
    default: [python3]
  min_version:
    description: With O(state=inspect), the oldest usable Python.
    type: str
    default: "3.8"
author:
  - clustermax.assess contributors
"""

EXAMPLES = r"""
- name: Cleanup | remove the run's working directory and give the node's run lock back
  clustermax.assess.run_lock:
    state: release
    workdir: "{{ assess_remote_dir }}"
"""

RETURN = r"""
holder:
  description: The run that held the lock, its controller machine, pid and since when.
  type: dict
  returned: always
held:
  description: Whether this run holds the lock and the quiet was declared on it.
  type: bool
  returned: state=hold
released:
  description: Whether the lock was removed.
  type: bool
  returned: state=release
live:
  description: Whether the run that holds the lock still runs (never break or clean it up).
  type: bool
  returned: state=inspect
gone_why:
  description: Why the holder is gone (null while it runs).
  type: str
  returned: state=inspect
workdir_removed:
  description: Whether the working directory is gone (null when none was given).
  type: bool
  returned: state=release
"""
