"""The test cluster's command line (`python tests/cluster/cluster.py up 4`, see cluster.py's docstring)."""

from __future__ import annotations

import argparse
import json
import subprocess
import time

from cluster.cluster import Cluster
from cluster.procs import run_cli


def _print_hosts(cluster: Cluster) -> None:
    for h in cluster.hosts:
        print(f"  {h['name']:<14} {h['ip']:<15} holder {h['holder_pid']}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cluster.py", description="SSH test cluster: N SSH hosts on this machine")
    parser.add_argument("--state-dir", help="state directory (default: $CMXA_STATE_DIR or <repo>/.testcluster)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up", help="make N test hosts (idempotent)")
    p.add_argument("n", type=int)
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for every sshd")
    sub.add_parser("down", help="remove every piece of the cluster")
    p = sub.add_parser("status", help="what exists")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("inventory", help="write an Ansible INI inventory and print its path")
    p.add_argument("--python", help="interpreter on the hosts (default: this Python)")
    p.add_argument("--out", help="file to write (default: <state>/inventory.ini)")
    p = sub.add_parser("stop-sshd", help="stop a host's sshd (the host becomes unreachable)")
    p.add_argument("host")
    p = sub.add_parser("start-sshd", help="start a host's sshd again")
    p.add_argument("host")
    p.add_argument("--timeout", type=float, default=15.0)
    for name, text in (("exec", "run a command inside a host (nsenter)"), ("ssh", "ssh to a host")):
        p = sub.add_parser(name, help=text)
        p.add_argument("host")
        p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ...")
    args = parser.parse_args(argv)
    return run_cli("cluster.py", args.cmd, lambda: _command(parser, args))


def _command(parser, args) -> int | None:
    cluster = Cluster(state_dir=args.state_dir)
    if args.cmd == "up":
        t0 = time.monotonic()
        cluster.up(args.n, timeout=args.timeout)
        print(f"cluster up: {args.n} host(s) in {time.monotonic() - t0:.2f}s (state {cluster.state_dir})")
        _print_hosts(cluster)
    elif args.cmd == "down":
        t0 = time.monotonic()
        cluster.down()
        print(f"cluster down in {time.monotonic() - t0:.2f}s")
    elif args.cmd == "status":
        st = cluster.status()
        if args.json:
            print(json.dumps(st, indent=2))
        else:
            print(f"state {st['state_dir']} ({'present' if st['exists'] else 'absent'}), bridge {st['bridge']} "
                  f"{'present' if st['bridge_present'] else 'absent'}, subnet {st['subnet']}")
            for h in st["hosts"]:
                print(f"  {h['name']:<14} {h['ip']:<15} netns {'yes' if h['netns'] else 'NO'}  holder "
                      f"{h['holder_pid'] if h['holder_alive'] else 'DEAD'}  sshd {h['sshd_pid'] or 'DOWN'}")
        return 0 if st["exists"] and all(h["holder_alive"] and h["sshd_pid"] for h in st["hosts"]) else 1
    elif args.cmd == "inventory":
        print(cluster.write_inventory(args.out, python=args.python))
    elif args.cmd == "stop-sshd":
        cluster.stop_sshd(args.host)
    elif args.cmd == "start-sshd":
        cluster.start_sshd(args.host, timeout=args.timeout)
    elif args.cmd in ("exec", "ssh"):
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if args.cmd == "exec":
            if not command:
                parser.error("exec needs a command: exec HOST -- CMD ...")
            return cluster.exec(args.host, command, timeout=None, capture=False).returncode
        # Like ssh itself: the words are joined into one remote shell line. Interactive when there is no command.
        line = " ".join(command) if command else None
        return subprocess.call(cluster.ssh_argv(args.host, line, batch=line is not None))
    return 0
