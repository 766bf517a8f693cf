#!/usr/bin/env python3
"""A provider's health check in miniature: drain the Slurm node when an NVIDIA XID shows up in its kernel log.

Configured as Slurm's HealthCheckProgram by tests/cluster/slurm.py, it stands for the provider's own health agents
in the tests of the fault_injection role: the role writes a synthetic XID into a node's kernel log and then only
watches what the "provider" does.

The test hosts share one kernel log (the machine's), so this check acts only on lines that name its own host
(``node=<hostname>``, which the role's injected lines carry) and that were logged after the check was armed
(``init``): on a real node the kernel log is the node's own and neither filter would be needed. Each XID line is
acted on once (the last sequence number acted on is kept per host), the way a health agent that follows the log does.

A provider with hot spares (``Slurm.hold_spare``: a node kept drained with the reason "hot spare", in the config)
gets one of them back into service in place of each node this check drains, the way an HGX provider's
autoremediation swaps in a spare; each spare is used once (``<state dir>/spares.used``).

    xid_healthcheck.py init  --config FILE --state-dir DIR   # arm: remember where the kernel log ends now
    xid_healthcheck.py run   --config FILE                   # HealthCheckProgram: drain this node on a new XID
    xid_healthcheck.py check --config FILE --node NAME       # exit 1 when NAME has an XID since init (standalone)
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import re
import socket
import subprocess
import sys
import time

XID_RE = re.compile(r"NVRM: Xid \(PCI:[0-9A-Fa-f:.]+\): (\d+)")


def read_kmsg(path="/dev/kmsg"):
    """Every record still in the kernel log: (seq, usec, message)."""
    records = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                data = os.read(fd, 8192)
            except OSError as e:
                if e.errno == errno.EAGAIN:
                    break
                if e.errno == errno.EPIPE:  # a record was overwritten while we read: go on with the next
                    continue
                raise
            if not data:
                break
            head, _, text = data.decode("utf-8", "replace").partition(";")
            fields = head.split(",")
            records.append((int(fields[1]), int(fields[2]), text.split("\n", 1)[0]))
    finally:
        os.close(fd)
    return records


def xids_for(records, node, after_seq):
    """(seq, xid, message) of the XID lines for node logged after after_seq."""
    found = []
    for seq, _usec, text in records:
        if seq <= after_seq:
            continue
        m = XID_RE.search(text)
        if m and re.search(r"(^|\s)node=%s(\s|$)" % re.escape(node), text):
            found.append((seq, int(m.group(1)), text))
    return found


def _load(path):
    with open(path) as f:
        return json.load(f)


def init(config, state_dir):
    records = read_kmsg()
    since = records[-1][0] if records else 0
    os.makedirs(state_dir, exist_ok=True)
    with open(config, "w") as f:
        json.dump({"since_seq": since, "state_dir": state_dir}, f)
    return 0


def run(config):
    cfg = _load(config)
    node = socket.gethostname()
    seen_path = os.path.join(cfg["state_dir"], "%s.seen" % node)
    try:
        with open(seen_path) as f:
            after = int(f.read().strip() or 0)
    except (OSError, ValueError):
        after = 0
    after = max(after, int(cfg["since_seq"]))
    found = xids_for(read_kmsg(), node, after)
    if not found:
        return 0
    seq, xid, _text = found[-1]
    reason = "XID %d in kernel log (health check)" % xid
    cp = subprocess.run(["/usr/bin/scontrol", "update", "NodeName=%s" % node, "State=DRAIN", "Reason=%s" % reason],
                        capture_output=True, text=True, timeout=30)
    with open(os.path.join(cfg["state_dir"], "%s.log" % node), "a") as f:
        f.write("%s drain %s for seq %d: rc %d %s\n" % (time.strftime("%H:%M:%S"), node, seq, cp.returncode,
                                                         (cp.stderr or cp.stdout).strip()))
    if cp.returncode == 0:
        with open(seen_path, "w") as f:
            f.write("%d\n" % seq)
        _swap_in_spare(cfg, node)
    return 0


def _swap_in_spare(cfg, node):
    """Resume the first spare of the pool not used yet, in place of node (the pool is used up in order, once)."""
    used_path = os.path.join(cfg["state_dir"], "spares.used")
    try:
        with open(used_path) as f:
            used = set(f.read().split())
    except OSError:
        used = set()
    spare = next((s for s in cfg.get("spares") or [] if s not in used and s != node), None)
    if spare is None:
        return
    cp = subprocess.run(["/usr/bin/scontrol", "update", "NodeName=%s" % spare, "State=RESUME"],
                        capture_output=True, text=True, timeout=30)
    with open(os.path.join(cfg["state_dir"], "%s.log" % node), "a") as f:
        f.write("%s spare %s in place of %s: rc %d %s\n" % (time.strftime("%H:%M:%S"), spare, node, cp.returncode,
                                                           (cp.stderr or cp.stdout).strip()))
    with open(used_path, "a") as f:
        f.write(spare + "\n")


def check(config, node):
    cfg = _load(config)
    found = xids_for(read_kmsg(), node, int(cfg["since_seq"]))
    if found:
        print("XID %d: %s" % (found[-1][1], found[-1][2]))
    return 1 if found else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="xid_healthcheck.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["init", "run", "check"])
    parser.add_argument("--config", required=True)
    parser.add_argument("--state-dir")
    parser.add_argument("--node")
    args = parser.parse_args(argv)
    if args.action == "init":
        return init(args.config, args.state_dir or os.path.dirname(os.path.abspath(args.config)))
    if args.action == "check":
        return check(args.config, args.node or socket.gethostname())
    return run(args.config)


if __name__ == "__main__":
    sys.exit(main())
