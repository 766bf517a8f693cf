"""busbw factors (nccl-tests doc/PERFORMANCE.md), world-size plan, message sizes and the pair schedule."""

import itertools

import pytest

from probes.common.worlds import world_size_plan
from probes.network.busbw import algbw_gbps, busbw_factor, busbw_gbps, collective_from_program
from probes.network.plan import directed_pair_slots, human_bytes, message_sizes, round_robin


@pytest.mark.parametrize("collective,n,factor", [
    ("all_reduce", 8, 1.75), ("all_reduce", 2, 1.0), ("all_reduce", 16, 1.875), ("all_reduce", 1, 0.0),
    ("all_gather", 8, 0.875), ("reduce_scatter", 4, 0.75), ("alltoall", 16, 0.9375), ("alltoall", 1, 0.0),
    ("broadcast", 8, 1.0), ("reduce", 8, 1.0), ("sendrecv", 2, 1.0), ("gather", 4, 0.75), ("hypercube", 4, None)])
def test_busbw_factor_per_collective(collective, n, factor):
    assert busbw_factor(collective, n) == factor


def test_busbw_from_a_real_nccl_tests_line():
    # 8xH100 all_reduce, 16 GiB out-of-place: 62263.6 us -> algbw 275.92, busbw 482.86 (fixture h100x8)
    size, time_s = 17179869184, 62263.6e-6
    assert algbw_gbps(size, time_s) == pytest.approx(275.92, abs=0.01)
    assert busbw_gbps("all_reduce", size, time_s, 8) == pytest.approx(482.86, abs=0.01)
    assert busbw_gbps("hypercube", size, time_s, 8) is None
    with pytest.raises(ValueError):
        busbw_factor("all_reduce", 0)
    with pytest.raises(ValueError):
        algbw_gbps(8, 0)


@pytest.mark.parametrize("name,coll", [("all_reduce_perf", "all_reduce"), ("all_reduce_perf_mpi", "all_reduce"),
                                       ("/opt/nccl-tests/build/alltoall_perf", "alltoall"), ("", None)])
def test_collective_from_program(name, coll):
    assert collective_from_program(name) == coll


@pytest.mark.parametrize("n,plan", [(1, [1]), (2, [1, 2]), (3, [1, 2, 3]), (4, [1, 2, 4]), (6, [1, 2, 4, 6]),
                                    (8, [1, 2, 4, 8]), (12, [1, 2, 4, 8, 12]), (0, [])])
def test_world_size_plan_doubles_until_all_hosts(n, plan):
    assert world_size_plan(n) == plan


def test_world_size_plan_requested_is_clamped_and_sorted():
    assert world_size_plan(4, [4, 2, 2, 9, 0]) == [2, 4]


def test_message_sizes_like_nccl_tests():
    assert message_sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert message_sizes(16, 4 << 20, 4)[-1] == 4 << 20 and len(message_sizes(16, 4 << 20, 4)) == 10
    assert message_sizes(8, 16 << 30, 2)[-1] == 16 << 30 and len(message_sizes(8, 16 << 30, 2)) == 32
    with pytest.raises(ValueError):
        message_sizes(0, 8)
    with pytest.raises(ValueError):
        message_sizes(8, 64, 1)


def test_human_bytes():
    assert [human_bytes(s) for s in (8, 1024, 3 << 20, 16 << 30, 1536)] == ["8 B", "1 KiB", "3 MiB", "16 GiB",
                                                                             "1536 B"]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_directed_pairs_cover_every_pair_once_and_slots_are_disjoint(n):
    slots = directed_pair_slots(n)
    pairs = [p for slot in slots for p in slot]
    assert sorted(pairs) == sorted(itertools.permutations(range(n), 2))
    for slot in slots:
        used = [h for p in slot for h in p]
        assert len(used) == len(set(used))  # a host is in at most one pair per slot
    assert len(slots) == (2 * (n - 1) if n % 2 == 0 else 2 * n)
    assert len(round_robin(n)) == (n - 1 if n % 2 == 0 else n)


def test_serial_pairs_one_at_a_time():
    slots = directed_pair_slots(3, concurrent=False)
    assert len(slots) == 6 and all(len(s) == 1 for s in slots)
    assert directed_pair_slots(1) == []
