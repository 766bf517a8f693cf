"""What a multi-node network probe runs, decided the same way on every node (no coordination needed for the plan).

- world sizes: 1 node, then doubling (2, 4, 8 …) until the whole set of hosts is used (the last size is all hosts,
  also when that is not a power of two);
- message sizes: a geometric series from min to max bytes;
- a schedule of directed host pairs in slots, each host in at most one pair per slot, so pairwise tests can run
  side by side without two of them sharing a host.
"""

from probes.params import Param

# Params the network probes take only to record them in the artifact, where the report reads them (what the play
# says the fabric is: reports/phases/network/grade.py).
RECORDED_PARAMS = {
    "fabric": Param(str, "", "the fabric the play names (network_fabric), recorded for the report"),
    "rails": Param(int, 0, "the rails the play names (network_rails), recorded for the report"),
}


def message_sizes(min_bytes, max_bytes, factor=2):
    """min, min*factor, … up to max (inclusive when reached exactly), like nccl-tests -b/-e/-f."""
    min_bytes, max_bytes, factor = int(min_bytes), int(max_bytes), int(factor)
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError("need 1 <= min_bytes <= max_bytes, got %d and %d" % (min_bytes, max_bytes))
    if factor < 2:
        raise ValueError("factor must be >= 2, got %d" % factor)
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


def round_robin(n):
    """Rounds of disjoint unordered pairs (circle method); every pair of 0..n-1 appears exactly once."""
    players = list(range(n))
    if n % 2:
        players.append(None)  # a bye
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        rounds.append(sorted(pairs))
        players = [players[0]] + [players[-1]] + players[1:-1]
    return rounds


def directed_pair_slots(n, concurrent=True):
    """Slots of directed pairs (src, dst) covering all n*(n-1) pairs once.

    concurrent: each slot holds disjoint pairs (a host is in at most one pair per slot): 2*(n-1) slots for even n.
    Otherwise one pair per slot: n*(n-1) slots, nothing runs side by side.
    """
    if n < 2:
        return []
    if not concurrent:
        return [[(s, d)] for s in range(n) for d in range(n) if s != d]
    slots = []
    for pairs in round_robin(n):
        slots.append([(a, b) for a, b in pairs])
        slots.append([(b, a) for a, b in pairs])
    return slots


def human_bytes(size):
    """8 B, 64 KiB, 4 MiB, 16 GiB: the short form used in reasons and reports."""
    size = int(size)
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size
