#!/usr/bin/python
# Copyright: clustermax.assess contributors
# Apache-2.0
# Documentation only: the work is done by the action plugin of the same name (plugins/action/run_lock.py).

DOCUMENTATION = r"""
---
module: run_lock
short_description: One assessment per node at a time, with the node's run lock
description:
  - C(state=take) takes the lock C(<assess_remote_tmp>/clustermax-assess.lock) on the node for this run (C(assess_run)).
    The task fails, naming the run that holds it, when another run is assessing the node.
  - A lock whose holder is gone is broken with a warning; gone means its controller ran on this machine and has
    ended, or it came from another machine and its working directory is no longer on the node.
  - C(state=release) gives the lock back, only when the given run (default this run; C(all) for any run) holds it.
  - The node side is C(probes/common/run_lock.py), run with C(assess_python); every change is made under an flock.
version_added: 0.2.0
options:
  state:
    description: Take or give back the lock.
    type: str
    choices: [take, release]
    default: take
  run_id:
    description: C(release) only, the run whose lock is given back (default this run; C(all) for whichever run).
    type: str
author:
  - clustermax.assess contributors
"""

EXAMPLES = r"""
- name: Preflight | one assessment per node at a time
  clustermax.assess.run_lock:
    state: take
"""

RETURN = r"""
taken:
  description: Whether this run holds the lock now (take).
  type: bool
  returned: take
holder:
  description: The run that holds (or held) the lock, its controller machine, pid and since when.
  type: dict
  returned: always
released:
  description: Whether the lock was removed (release).
  type: bool
  returned: release
"""
