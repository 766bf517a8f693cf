"""Bus bandwidth: the number nccl-tests prints and every collective benchmark is compared by.

algbw is bytes / time. busbw scales algbw by what each rank must move over its link for the collective
(nccl-tests doc/PERFORMANCE.md), so that busbw is comparable across world sizes and to the link speed:

    all_reduce                              2 (n - 1) / n
    all_gather, reduce_scatter, alltoall    (n - 1) / n
    gather, scatter                         (n - 1) / n
    broadcast, reduce, sendrecv             1

The byte count is the one nccl-tests prints in its `size` column: the whole buffer (for all_gather the gathered
output, for reduce_scatter the input, for alltoall one rank's send buffer). GB/s are 1e9 bytes per second.
"""

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast", "reduce", "sendrecv",
               "gather", "scatter")

# Collectives whose busbw factor is (n - 1) / n.
_SHARE = ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
_ONE = ("broadcast", "reduce", "sendrecv")


def busbw_factor(collective, nranks):
    """busbw / algbw for a collective over nranks ranks; None for a collective we have no factor for."""
    nranks = int(nranks)
    if nranks < 1:
        raise ValueError("nranks must be >= 1, got %r" % nranks)
    if collective == "all_reduce":
        return 2.0 * (nranks - 1) / nranks
    if collective in _SHARE:
        return float(nranks - 1) / nranks
    if collective in _ONE:
        return 1.0
    return None


def algbw_gbps(size_bytes, time_s):
    """Algorithm bandwidth in GB/s (1e9 B/s)."""
    if time_s <= 0:
        raise ValueError("time must be positive, got %r" % time_s)
    return size_bytes / time_s / 1e9


def busbw_gbps(collective, size_bytes, time_s, nranks):
    """Bus bandwidth in GB/s; None when the collective has no known factor."""
    factor = busbw_factor(collective, nranks)
    if factor is None:
        return None
    return algbw_gbps(size_bytes, time_s) * factor


def collective_from_program(name):
    """`all_reduce_perf`, `all_reduce_perf_mpi`, `/opt/nccl-tests/build/alltoall_perf` -> the collective name."""
    base = str(name or "").rstrip("/").split("/")[-1]
    for suffix in ("_perf_mpi", "_perf"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base or None
