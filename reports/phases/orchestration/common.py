"""The percentiles the orchestration phase's latency tables and checks use (both halves)."""

import math


def percentile(values, q):
    """The q-th percentile (0..100) of values, linear between closest ranks; None for no values."""
    vals = sorted(v for v in values if v is not None)
    if not vals:
        return None
    pos = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def distribution(values):
    """{n, p50, p90, max} of the values (None where there are none)."""
    vals = [v for v in values if v is not None]
    return {"n": len(vals), "p50": percentile(vals, 50), "p90": percentile(vals, 90),
            "max": max(vals) if vals else None}
