"""Half-open time intervals [start, end) as pairs of integers (UTC microseconds): pure functions, no I/O.

A "set" below is a list of intervals that `merge` has made sorted, disjoint and non-adjacent; every function
accepts any list and returns such a set.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[int, int]


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted union: overlapping or touching intervals become one; empty ones are dropped."""
    out: list[list[int]] = []
    for start, end in sorted((int(s), int(e)) for s, e in intervals if e > s):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def union(*sets: Iterable[Interval]) -> list[Interval]:
    return merge(iv for s in sets for iv in s)


def clip(intervals: Iterable[Interval], start: int, end: int) -> list[Interval]:
    """The parts inside [start, end)."""
    return merge((max(s, start), min(e, end)) for s, e in intervals if e > start and s < end)


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    a, b = merge(a), merge(b)
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """a minus b."""
    b = merge(b)
    out = []
    for s, e in merge(a):
        cur = s
        for bs, be in b:
            if be <= cur:
                continue
            if bs >= e:
                break
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
            if cur >= e:
                break
        if cur < e:
            out.append((cur, e))
    return out


def total(intervals: Iterable[Interval]) -> int:
    return sum(e - s for s, e in merge(intervals))


def drop_shorter(intervals: Iterable[Interval], minimum: int) -> list[Interval]:
    """Only the intervals of at least `minimum` (after merging)."""
    return [(s, e) for s, e in merge(intervals) if e - s >= minimum]


def at_least(weighted: Iterable[tuple[Iterable[Interval], int]], k: int) -> list[Interval]:
    """Where the weights of the sets that cover an instant add up to k or more.

    `weighted` is (set, weight) pairs: one pair per member (a tray of a rack, a GPU of a node); each member's set
    is merged first, so a member counts once however many records say it was down. With weight 1 everywhere this
    is "at least k members at once" (the NVL72 rack rule); a weight > 1 is a record that says "n GPUs down"
    without naming them.
    """
    if k <= 0:
        raise ValueError("k must be at least 1, not %r" % k)
    points: dict[int, int] = {}
    for intervals, weight in weighted:
        for s, e in merge(intervals):
            points[s] = points.get(s, 0) + weight
            points[e] = points.get(e, 0) - weight
    out, level, opened = [], 0, None
    for t in sorted(points):
        level += points[t]
        if level >= k and opened is None:
            opened = t
        elif level < k and opened is not None:
            out.append((opened, t))
            opened = None
    return merge(out)


def overlaps(a: Interval, b: Interval) -> bool:
    return a[0] < b[1] and b[0] < a[1]
