"""plugin_utils/progress.py: what the controller shows of a long task, with the clock given."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / ".collections") not in sys.path:
    sys.path.insert(0, str(ROOT / ".collections"))

from ansible_collections.clustermax.assess.plugins.plugin_utils.progress import TaskProgress, duration  # noqa: E402


def test_a_long_task_shows_hosts_done_and_the_slowest_with_time_left():
    p = TaskProgress(every=30)
    p.task_started("t1", "Network | collectives", 600, now=0)
    for i, host in enumerate(["n1", "n2", "n3", "n4"]):
        p.host_started("t1", host, now=i)
    assert p.lines(now=29) == []  # not yet `every` seconds
    p.host_event("t1", "n2", now=40, done=True)
    assert p.lines(now=60) == []  # a result 20 s ago
    assert p.lines(now=75) == ["progress | Network | collectives: 1 of 4 hosts done; running: n1 1m15s, at most "
                               "8m45s left; n3 1m13s, at most 8m47s left; n4 1m12s, at most 8m48s left"]
    assert p.lines(now=90) == []  # shown 15 s ago
    assert p.lines(now=105)[0].startswith("progress | Network | collectives: 1 of 4 hosts done; running: n1 1m45s")


def test_loop_items_keep_it_quiet_and_a_new_task_ends_the_last():
    p = TaskProgress(every=10)
    p.task_started("poll", "Burn-in | poll", None, now=0)
    p.host_started("poll", "n1", now=0)
    for t in range(5, 60, 5):  # the burn-in's poll loop: an item every 5 s, its own progress
        p.host_event("poll", "n1", now=t, done=False)
        assert p.lines(now=t + 1) == []
    p.task_started("next", "Burn-in | stop", None, now=60)
    assert p.lines(now=100) == []  # no host started the new one; the old one is gone


def test_many_hosts_name_the_slowest_and_count_the_rest():
    p = TaskProgress(every=30)
    p.task_started("t", "Storage | fio sweep", None, now=0)
    for i in range(12):
        p.host_started("t", "node%02d" % i, now=i)
    [line] = p.lines(now=3700)
    assert line == ("progress | Storage | fio sweep: 0 of 12 hosts done; running: node00 1h01m; node01 1h01m; "
                    "node02 1h01m; node03 1h01m; node04 1h01m and 7 more")


def test_durations():
    assert [duration(s) for s in (0, 59.4, 60, 3599, 3600, 7325)] == ["0s", "59s", "1m00s", "59m59s", "1h00m",
                                                                     "2h02m"]
