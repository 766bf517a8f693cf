"""Ports of multi-host probes derived from the run id (probes.common.ports): the same on every host of a run,
different for two runs on the same hosts, inside the documented range, and a port the user fixed wins."""

from probes.common import ports


def test_every_host_of_a_run_gets_the_same_ports_and_two_runs_differ():
    assert ports.port_for("20260101T000000Z-a", "fio_sweep/scratch", 2) == \
        ports.port_for("20260101T000000Z-a", "fio_sweep/scratch", 2)
    runs = ["20260101T%06dZ-run" % i for i in range(50)]
    blocks = {ports.port_for(r, "fio_sweep/scratch", 2) for r in runs}
    assert len(blocks) >= 45  # hashed blocks: a few of 50 runs may share one (about 1 in 590 a pair)


def test_ports_stay_in_their_block_and_below_the_ephemeral_range():
    for i in range(200):
        base = ports.port_for("run-%d" % i, "collectives/world", ports.BLOCK)
        assert ports.LOW <= base and base + ports.BLOCK <= ports.HIGH <= 32768
        assert (base - ports.LOW) % ports.BLOCK == 0  # aligned: two blocks are equal or disjoint


def test_purposes_of_one_run_get_their_own_blocks():
    run = "20260101T000000Z-a"
    assert ports.port_for(run, "checkpoint/scratch", 2) != ports.port_for(run, "checkpoint/home", 2)


def test_a_fixed_port_wins_and_zero_means_derived():
    assert ports.port_param({"port": 4242}, "port", "r", "tcp_pairs") == 4242
    assert ports.port_param({"port": 0}, "port", "r", "tcp_pairs") == ports.port_for("r", "tcp_pairs")
    assert ports.port_param({}, "port", "r", "tcp_pairs") == ports.port_for("r", "tcp_pairs")
