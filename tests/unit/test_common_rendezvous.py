"""The one rendezvous (probes.common.rendezvous) on loopback: an all-gather without a time limit outlasts the
client's per-operation timeout (a storage sweep's driver may take many minutes before it answers)."""

import socket
import threading
import time

from probes.common.rendezvous import StoreClient, StoreServer


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unlimited_allgather_outlasts_the_operation_timeout():
    port = free_port()
    server = StoreServer("127.0.0.1", port, "tok")
    clients = [StoreClient("127.0.0.1", port, "tok", connect_timeout=10, op_timeout=0.3, rank=r) for r in (0, 1)]
    got = {}
    waiter = threading.Thread(target=lambda: got.update(r0=clients[0].allgather("end", 0, 2, "a", None)))
    waiter.start()
    time.sleep(1.0)  # rank 1 comes well after rank 0's op_timeout
    got["r1"] = clients[1].allgather("end", 1, 2, "b", None)
    waiter.join(10)
    assert got == {"r0": ["a", "b"], "r1": ["a", "b"]}
    for c in clients:
        c.leave()
        c.close()
    server.close(wait_for=2)
