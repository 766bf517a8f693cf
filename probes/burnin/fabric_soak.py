"""fabric_soak: sustained collectives across every node (seed, "Fabric"): all-to-all, all-gather and
reduce-scatter of large messages in a loop for ``duration_s`` seconds; per collective the minimum, average and
maximum bus bandwidth over the run, latency, wrong results (patterned-data checks), errors and hangs, beside the
monitor timeline. Same start / poll / stop modes and params as burnin (probes/burnin/runner.py), without the GEMMs.
"""

from probes.burnin.runner import COLL_PARAMS, run_modes, soak_params
from probes.params import Param

DEFAULT_COLLECTIVES = ["alltoall", "all_gather", "reduce_scatter"]
PARAMS = soak_params(collectives=Param(list, DEFAULT_COLLECTIVES, "start: collectives run in a loop"), **COLL_PARAMS)


def run(art, params, out_dir):
    run_modes(art, params, out_dir, {"gemm": False, "coll": params["collectives"] or DEFAULT_COLLECTIVES})
