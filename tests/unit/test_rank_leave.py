"""A world's ranks end at once (probes/common/rank.exit_now), and rank 0's process serves the world's store: rank 0
waits at the end until every rank is done with the store. Without that wait, a rank reading a key that rank 0 set
last (the inference job's "sweep over") failed with "Failed to recv, got 0 bytes" (a clean-clone failure of the
inference integration test). Real processes, real gloo, the shipped run_world and exit_now."""

import json
import socket
import time

import torch.multiprocessing as mp

from probes.common import rank as rank_mod

KEY = "test/last-word"


def first_says_and_leaves(cfg, torch, dist, emit, progress):
    """Rank 0 sets the key and its job ends at once; rank 1 reads it a second later, as a polling rank does."""
    store = dist.distributed_c10d._get_default_store()
    if cfg["rank"] == 0:
        store.set(KEY, "over")
    else:
        time.sleep(1.0)
        emit({"type": "read", "value": store.get(KEY).decode()})


def _rank(rank, port, out):
    cfg = {"rank": rank, "world": 2, "master_addr": "127.0.0.1", "master_port": port, "rdzv_timeout": 30,
           "op_timeout": 30, "backend": "gloo", "device": "cpu", "key": "w", "store": None,
           "entry": "test_rank_leave:first_says_and_leaves", "results": "%s/results.%d" % (out, rank),
           "progress": "%s/progress.%d" % (out, rank)}
    rank_mod.exit_now(rank_mod.run_world(cfg, __import__("torch"), __import__("torch.distributed").distributed))


def test_rank_0_keeps_the_store_until_every_rank_is_done_with_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, str(tmp_path)), nprocs=2)  # raises when a rank exits non-zero
    records = [json.loads(line) for line in (tmp_path / "results.1").read_text().splitlines()]
    assert {"type": "read", "value": "over"} in [{k: r.get(k) for k in ("type", "value")} for r in records]
    assert not any(r.get("type") == "error" for r in records)
