"""fabric_soak: sustained collectives across every node (seed, "Fabric"): all-to-all, all-gather and
reduce-scatter of large messages in a loop for ``duration_s`` seconds; per collective the minimum, average and
maximum bus bandwidth over the run, latency, wrong results (patterned-data checks), errors and hangs, beside the
monitor timeline. Same start / poll / stop modes and params as burnin (lib/soak_runner.py), without the GEMMs.
"""

from probes.burnin.runner import run_modes

DEFAULT_COLLECTIVES = ["alltoall", "all_gather", "reduce_scatter"]


def run(art, params, out_dir):
    run_modes(art, params, out_dir, {"gemm": False, "coll": list(params.get("collectives") or DEFAULT_COLLECTIVES)})
