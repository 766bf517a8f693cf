"""burnin: GPUs and network under load at the same time, with one monitoring timeline (seed, "Burn-in").

On every node at once (same hosts, addresses and port; rank = the node's index), for ``duration_s`` seconds:
one GEMM worker per GPU (one torch GEMM worker on a CPU node) and an all-to-all loop across all nodes (nccl on
GPUs, gloo on CPU), started together, plus the monitor (GPU telemetry from nvidia-smi, CPU, NIC counters, kernel
log with XID / SXID / AER lines). Everything is appended to timeline files as it is measured.

Long runs are asynchronous: ``mode: start`` leaves a detached runner, ``mode: poll`` (repeated by the play) keeps
it alive and returns the artifact so far, ``mode: stop`` ends it and returns the final artifact
(probes/burnin/runner.py). Params: `python -m probes burnin --help-params`.
"""

from probes.burnin.runner import COLL_PARAMS, run_modes, soak_params
from probes.params import Param

PARAMS = soak_params(
    gemm_size=Param(int, 0, "start: m = n = k of the GEMMs (0: 8192 on GPUs, 512 on the CPU)"),
    gemm_dtype=Param(str, "", "start: dtype of the GEMMs (empty: bf16 on GPUs, fp32 on the CPU)"),
    collectives=Param(list, ["alltoall"], "start: collectives run in a loop beside the GEMMs"),
    **COLL_PARAMS,
)


def run(art, params, out_dir):
    run_modes(art, params, out_dir, {"gemm": True, "coll": params["collectives"] or ["alltoall"]})
