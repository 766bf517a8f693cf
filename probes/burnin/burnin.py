"""burnin: GPUs and network under load at the same time, with one monitoring timeline (seed, "Burn-in").

On every node at once (same hosts, addresses and port; rank = the node's index), for ``duration_s`` seconds:
one GEMM worker per GPU (one torch GEMM worker on a CPU node) and an all-to-all loop across all nodes (nccl on
GPUs, gloo on CPU), started together, plus the monitor (GPU telemetry from nvidia-smi, CPU, NIC counters, kernel
log with XID / SXID / AER lines). Everything is appended to timeline files as it is measured.

Long runs are asynchronous: ``mode: start`` leaves a detached runner, ``mode: poll`` (repeated by the play) keeps
it alive and returns the artifact so far, ``mode: stop`` ends it and returns the final artifact
(lib/soak_runner.py). Params: duration_s, interval_s, hosts, addresses, rank, port, gemm_size, gemm_dtype,
coll_size_bytes, threads, heartbeat_timeout, grace_s, wait_s (poll), rdzv_timeout, op_timeout.
"""

from probes.burnin.runner import run_modes


def run(art, params, out_dir):
    run_modes(art, params, out_dir, {"gemm": True, "coll": list(params.get("collectives") or ["alltoall"])})
