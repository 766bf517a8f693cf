"""FLOP and byte accounting, and the statistics of timed iterations, for the GPU compute probes.

Pure functions, no torch: the unit tests check every formula exactly. Units: TFLOP/s = 1e12 FLOP/s and
GB/s = 1e9 B/s (the units of mamf-finder, nvbandwidth and the vendors' datasheets).
"""

import math

# Bytes per element of each dtype the probes know. tf32 is fp32 storage (the tensor cores round the mantissa);
# nvfp4 packs two e2m1 values into a byte. Block scales (mxfp8, nvfp4) are not counted: they are 1/32 or 1/16 of
# the data and the FLOP count does not depend on them.
ELEMENT_BYTES = {
    "bf16": 2,
    "fp16": 2,
    "tf32": 4,
    "fp32": 4,
    "fp8_e4m3": 1,
    "mxfp8": 1,
    "nvfp4": 0.5,
}


def gemm_flops(m, n, k):
    """C[m,n] = A[m,k] @ B[k,n]: m*n dot products of length k, each k multiplies and k adds."""
    return 2 * int(m) * int(n) * int(k)


def grouped_gemm_flops(group_rows, n, k):
    """Sum of one GEMM per expert: group i multiplies group_rows[i] rows of k by a k x n weight."""
    return sum(gemm_flops(rows, n, k) for rows in group_rows)


def gemv_flops(m, k):
    return 2 * int(m) * int(k)


def gemv_bytes(m, k, dtype):
    """Bytes a GEMV y[m] = W[m,k] @ x[k] must move at least once: read W and x, write y."""
    return int((int(m) * int(k) + int(k) + int(m)) * ELEMENT_BYTES[dtype])


def tflops(flops, seconds):
    return flops / seconds / 1e12


def gbps(nbytes, seconds):
    return nbytes / seconds / 1e9


def time_stats(times_s):
    """Mean, median, min and max of per-iteration times in seconds (the raw times are kept elsewhere)."""
    if not times_s:
        raise ValueError("no timed iterations")
    ordered = sorted(float(t) for t in times_s)
    n = len(ordered)
    mid = n // 2
    median = ordered[mid] if n % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0
    if ordered[0] <= 0:
        raise ValueError("an iteration took %r s: the timer is broken" % ordered[0])
    return {"mean": sum(ordered) / n, "median": median, "min": ordered[0], "max": ordered[-1], "n": n}


def rate_stats(work, times_s, per_second):
    """Throughput of `work` (FLOPs or bytes) per iteration, from the times: mean (work / mean time, as mamf-finder
    reports it), median (work / median time) and max (work / fastest iteration). `per_second` is tflops or gbps."""
    stats = time_stats(times_s)
    return {
        "mean": per_second(work, stats["mean"]),
        "median": per_second(work, stats["median"]),
        "max": per_second(work, stats["min"]),
        "time_mean_s": stats["mean"],
        "n": stats["n"],
    }


def geomean(values):
    """Geometric mean of positive numbers (mamf-finder's summary over a sweep, less sensitive to one lucky shape)."""
    values = [float(v) for v in values]
    if not values or any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values, got %r" % (values,))
    return math.exp(sum(math.log(v) for v in values) / len(values))
