"""TCP ports of multi-host probes, derived from the run id: every host of one run computes the same ports without
asking anyone, and two runs on the same hosts at the same time (each with its own run id) get different ones.

A (run id, purpose) pair names a block of `span` consecutive ports; a probe that needs several ports at once (a
rendezvous and a tool's server) takes one block and uses offsets inside it. Blocks are aligned to BLOCK, so two
blocks either are the same or do not overlap: two concurrent runs collide only when their hashes pick the same
block, about 1 in 590 per pair of probes running at the same moment. The range stays below Linux's default
ephemeral range (32768-60999), from which outgoing connections take their local ports.
"""

import hashlib

# Clear of the kubelet's ports (10250-10259) below and Kubernetes NodePorts (30000-32767) above: on a Kubernetes
# node a probe must neither fail to bind nor reach a service instead of its peer.
LOW, HIGH = 11000, 30000
BLOCK = 32


def port_for(run_id, purpose, span=1):
    """First port of the block for (run_id, purpose); span ports from there on are the caller's."""
    if not 1 <= int(span) <= BLOCK:
        raise ValueError("a port block holds 1 to %d ports, not %r" % (BLOCK, span))
    digest = hashlib.sha1(("%s\n%s" % (run_id, purpose)).encode("utf-8")).hexdigest()
    return LOW + int(digest[:12], 16) % ((HIGH - LOW) // BLOCK) * BLOCK


def port_param(params, key, run_id, purpose, span=1):
    """params[key] when the user fixed it (a positive number: e.g. a firewall opens one range), else the derived
    port for (run_id, purpose)."""
    given = int((params or {}).get(key) or 0)
    return given if given > 0 else port_for(run_id, purpose, span)
