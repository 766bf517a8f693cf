"""Numbers over a time series: the first and last tenth, the change between them, episodes, min/avg/max.

Used by the soak probes to summarise their samples into artifact results, and by reports/ to recompute what it
plots. Pure functions.
"""

import math


def tenths(values, share=0.1):
    """(mean of the first tenth, mean of the last tenth) of a series in time order; a tenth is at least one value.
    None values are dropped first. (None, None) for an empty series."""
    values = [float(v) for v in values if v is not None]
    if not values:
        return None, None
    k = max(1, int(math.ceil(len(values) * share)))
    return sum(values[:k]) / k, sum(values[-k:]) / k


def change_pct(first, last):
    """Relative change from first to last in percent (negative: it dropped); None when first is 0 or unknown."""
    if first is None or last is None or first == 0:
        return None
    return (last - first) / abs(first) * 100.0


def degradation_pct(values, share=0.1):
    """How much the last tenth is below the first tenth, in percent (0 when it did not drop, None when unknown).
    A series that rose is not degraded: 0."""
    first, last = tenths(values, share)
    change = change_pct(first, last)
    if change is None:
        return None
    return max(0.0, -change)


def episodes(flags):
    """Number of runs of consecutive True values: [F, T, T, F, T] -> 2."""
    count, prev = 0, False
    for flag in flags:
        if flag and not prev:
            count += 1
        prev = bool(flag)
    return count


def min_avg_max(values):
    values = [float(v) for v in values if v is not None]
    if not values:
        return None
    return min(values), sum(values) / len(values), max(values)


def r(value, digits=3):
    return None if value is None else round(float(value), digits)
