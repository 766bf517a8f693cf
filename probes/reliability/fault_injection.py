"""fault_injection: the record of one node's fault injection, written on that node after the watch.

The role (roles/fault_injection, with the batch steps shared with reboot in roles/reliability) injected a fault
with the fault_inject probe (its artifact holds the method and the injection time) while an observer node
recorded the scheduler's view (sched_watch), ran a fresh job once the node was back and put it back as it was
(sched_action); boot_id artifacts hold the node's boot id before and after. This probe records which node, XID,
batch and observer these belong to, so that the controller finds them; every host gets one (skipped, with the
reason, when nothing was injected there).

What the provider's tooling did and how fast (detection, drain, return, flaps, the remediation observed) is
computed on the controller from those artifacts (reports/phases/reliability/timeline.py) and judged against the
XID's recommended action there (reports/phases/reliability/grade.py).

A `skip` reason means nothing was injected there. `kept_drained` (a fact, only when set) says why the node was not
put back in service after the test: its GPU did not answer after a PCIe bridge reset (fault_inject's verify mode).
"""

from probes.params import Param, Params
from probes.reliability.reboot import BATCH_PARAMS, record_batch

PARAMS = Params(xid=Param(int, None, "the XID injected"),
                kept_drained=Param(str, "", "why the node was left out of service after the test (empty: it was not)"),
                **BATCH_PARAMS)


def run(art, params, out_dir):
    record_batch(art, params)
    art.facts["xid"] = str(params["xid"])
    if params["kept_drained"].strip():
        art.facts["kept_drained"] = params["kept_drained"].strip()
