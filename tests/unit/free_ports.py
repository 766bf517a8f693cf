"""Free TCP ports on loopback for the unit tests whose probes meet through ports of their own.

Fixed numbers collided: test_storage_tiers, test_storage_datagen and test_network_probes_local all used 24871, and
under `pytest -n 2` two of them can run at once. Forced side by side, the storage tiers test failed with "Address
already in use", then "bad token" from the datagen test's store (issue 25: a unit failure seen once in six runs).
A block is taken at random below the kernel's usual ephemeral range (an outgoing connection does not take one of its
ports meanwhile), from a range of the xdist worker's own, and checked free on 127.0.0.1 before it is handed out."""

import os
import random
import socket

# A launched world takes its store's port and the block above it (probes/common/worlds.py: BLOCK).
SPAN = 32


def free_port(span=SPAN):
    """The first of `span` consecutive ports that were all free on 127.0.0.1 just now."""
    # each xdist worker draws from a range of its own, so two workers never pick one block before either binds it
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0) % 4
    low = 20000 + 3000 * worker
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(low, low + 3000 - span)
        held = []
        try:
            for port in range(base, base + span):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise RuntimeError("no %d free consecutive ports on 127.0.0.1 between %d and %d" % (span, low, low + 2999))
