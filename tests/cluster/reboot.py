#!/usr/bin/env python3
"""Reboots of SSH test hosts that behave like real ones to Ansible, and the "boot" that brings a host's services up.

A test host (tests/cluster/cluster.py) is a set of namespaces owned by a holder process. Here a host gets what a
machine has across a reboot:

* its own boot id: a regular file bind-mounted over /proc/sys/kernel/random/boot_id inside the host's private mount
  namespace (the machine's own boot id is untouched), rewritten with a new UUID at every boot;
* boot services: daemons (slurmd, ...) listed in ``<state>/boot/<host>.json`` and started at every boot, after the
  mounts listed there;
* a reboot: ``reboot.py reboot`` run inside the host returns at once (like ``shutdown -r now``); a detached helper
  then ends every process of the host but the holder (sshd and every open SSH session with it, the services, anything
  a test left running), waits ``--delay`` seconds (the host is down: SSH is refused), writes a new boot id, starts the
  boot services and finally sshd again. Ansible's ``ansible.builtin.reboot`` with ``reboot_command`` set to the
  command ``Reboots.command()`` returns sees exactly what it sees on a real node: the connection drops, comes back,
  and the boot id has changed.

Nothing here ever reboots, or signals, anything outside the host it runs in: the processes ended are those in the
host's own network and mount namespaces, found through /proc, by PID.

Library use (on the machine, as root)::

    reboots = Reboots(cluster)
    reboots.install()                       # every host gets its own boot id (and its boot services, if any)
    reboots.command(delay=3)                # the reboot_command string for ansible.builtin.reboot
    reboots.reboot("cmxa-node2", delay=2)   # the same, from a test
    reboots.boot_id("cmxa-node2")

In-host CLI (what the hosts run; only the standard library)::

    reboot.py boot   --state-dir D          # mounts, new boot id, services, sshd (idempotent for mounts)
    reboot.py reboot --state-dir D --delay S
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
HERE = Path(__file__).resolve()


# --------------------------------------------------------------------------------------------------------------
# machine side


class Reboots:
    """Boot specs, boot ids and simulated reboots of the hosts of one Cluster (tests/cluster/cluster.py)."""

    def __init__(self, cluster, python: str | None = None):
        self.cluster = cluster
        # The hosts share the filesystem: the interpreter that runs the harness runs inside the hosts too.
        self.python = python or sys.executable

    @property
    def boot_dir(self) -> Path:
        return self.cluster.state_dir / "boot"

    def spec_path(self, name: str) -> Path:
        return self.boot_dir / f"{name}.json"

    def spec(self, name: str) -> dict:
        try:
            return json.loads(self.spec_path(name).read_text())
        except (OSError, ValueError):
            return {"mounts": [], "services": []}

    def _save(self, name: str, spec: dict) -> None:
        self.boot_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.spec_path(name).with_suffix(".tmp")
        tmp.write_text(json.dumps(spec, indent=2) + "\n")
        os.replace(tmp, self.spec_path(name))

    def add_mount(self, name: str, source: str, target: str, fstype: str = "bind") -> None:
        """A mount made in the host at every boot (bind of source on target, or a tmpfs when fstype is tmpfs)."""
        spec = self.spec(name)
        entry = {"source": str(source), "target": str(target), "type": fstype}
        if entry not in spec["mounts"]:
            spec["mounts"].append(entry)
        self._save(name, spec)

    def add_service(self, name: str, service: dict) -> None:
        """A daemon started at every boot: {"name", "argv", "user" (optional), "wait_for" (a path that must exist
        first, optional), "pidfile" (optional)}. Services are started in the order they were added."""
        spec = self.spec(name)
        spec["services"] = [s for s in spec["services"] if s["name"] != service["name"]] + [service]
        self._save(name, spec)

    def remove(self, name: str, services=(), mounts=()) -> None:
        spec = self.spec(name)
        spec["services"] = [s for s in spec["services"] if s["name"] not in set(services)]
        spec["mounts"] = [m for m in spec["mounts"] if m["target"] not in set(mounts)]
        self._save(name, spec)

    def argv(self, action: str, **options) -> list[str]:
        argv = [self.python, "-I", "-S", str(HERE), action, "--state-dir", str(self.cluster.state_dir)]
        for key, value in options.items():
            argv += [f"--{key.replace('_', '-')}", str(value)]
        return argv

    def command(self, delay: float = 2.0) -> str:
        """The reboot command line for ansible.builtin.reboot (its reboot_command: the binary, then arguments)."""
        return shlex.join(self.argv("reboot", delay=delay))

    def boot(self, names=None, timeout: float = 60) -> None:
        """Boot hosts that are up already: mounts, a boot id of their own, boot services (over SSH, so the services
        are descendants of the host's holder, which reaps them)."""
        names = list(names or [h["name"] for h in self.cluster.hosts])

        def one(name):
            cp = self.cluster.ssh(name, self.argv("boot"), timeout=timeout)
            if cp.returncode != 0:
                raise RuntimeError(f"{name}: boot failed (rc {cp.returncode}): {cp.stderr.strip() or cp.stdout}; "
                                   f"see {self.boot_dir / (name + '.log')}")

        with ThreadPoolExecutor(max_workers=min(8, len(names) or 1)) as pool:
            list(pool.map(one, names))

    install = boot

    def reboot(self, name: str, delay: float = 2.0, wait: bool = True, timeout: float = 60) -> None:
        """Reboot one host from the outside (a test's way; a playbook runs command() inside the host)."""
        cp = self.cluster.ssh(name, self.argv("reboot", delay=delay), timeout=30)
        if cp.returncode not in (0, 255):
            raise RuntimeError(f"{name}: reboot failed (rc {cp.returncode}): {cp.stderr.strip()}")
        if wait:
            time.sleep(delay)
            self.cluster.wait_ssh([name], timeout=timeout)

    def boot_id(self, name: str) -> str:
        return self.cluster.exec(name, ["cat", BOOT_ID_PATH], check=True).stdout.strip()

    def boot_ids(self) -> dict:
        return {h["name"]: self.boot_id(h["name"]) for h in self.cluster.hosts}


# --------------------------------------------------------------------------------------------------------------
# host side (runs inside a test host)


def _log(state_dir: Path, host: str, text: str) -> None:
    path = state_dir / "boot" / f"{host}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(f"{time.strftime('%H:%M:%S')} {text}\n")


def _holder_pid(state_dir: Path, host: str) -> int:
    state = json.loads((state_dir / "state.json").read_text())
    for h in state.get("hosts", []):
        if h["name"] == host:
            return int(h["holder_pid"])
    raise SystemExit(f"reboot.py: host {host} is not in {state_dir}/state.json")


def _mounted_targets() -> set:
    targets = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            targets.add(fields[4].replace("\\040", " "))
    return targets


def _mount(entry: dict, mounted: set) -> None:
    target = entry["target"]
    if target in mounted:
        return
    if entry["type"] == "tmpfs":
        os.makedirs(target, exist_ok=True)
        argv = ["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", target]
    else:
        if os.path.isdir(entry["source"]):
            os.makedirs(target, exist_ok=True)
        argv = ["mount", "--bind", entry["source"], target]
    subprocess.run(argv, check=True, capture_output=True, text=True)


def _same_host_pids() -> list[int]:
    """Processes in this host: the same network and mount namespaces as this process."""
    own = (os.stat("/proc/self/ns/net").st_ino, os.stat("/proc/self/ns/mnt").st_ino)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = (os.stat(f"/proc/{entry}/ns/net").st_ino, os.stat(f"/proc/{entry}/ns/mnt").st_ino)
        except OSError:
            continue
        if ns == own:
            pids.append(int(entry))
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _end_all(keep: set) -> list[int]:
    """SIGTERM to every process of the host but keep, then SIGKILL to what is left (a reboot waits for no one)."""
    ended = []
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
        targets = [p for p in _same_host_pids() if p not in keep and _alive(p)]
        for pid in targets:
            try:
                os.kill(pid, sig)
                ended.append(pid)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_alive(p) for p in targets):
            time.sleep(0.05)
    return sorted(set(ended))


def _start_service(state_dir: Path, host: str, svc: dict) -> None:
    if svc.get("wait_for"):
        deadline = time.monotonic() + 15
        while not os.path.exists(svc["wait_for"]) and time.monotonic() < deadline:
            time.sleep(0.05)
    log = open(state_dir / "boot" / f"{host}.{svc['name']}.out", "ab")
    kwargs = {}
    if svc.get("user"):
        pw = pwd.getpwnam(svc["user"])
        kwargs.update(user=pw.pw_uid, group=pw.pw_gid, extra_groups=[])
    proc = subprocess.Popen(svc["argv"], stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
                            close_fds=True, **kwargs)
    log.close()
    # The services daemonize: their first process exits once the daemon runs (or at once with an error).
    try:
        rc = proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        rc = None  # a service that stays in the foreground: it keeps running, the holder reaps it later
    _log(state_dir, host, f"service {svc['name']}: started (rc {rc})")
    if rc not in (0, None):
        raise RuntimeError(f"service {svc['name']} exited with {rc}; see {log.name}")


def boot(state_dir: Path) -> int:
    host = socket.gethostname()
    spec_path = state_dir / "boot" / f"{host}.json"
    try:
        spec = json.loads(spec_path.read_text())
    except (OSError, ValueError):
        spec = {"mounts": [], "services": []}
    mounted = _mounted_targets()
    for entry in spec.get("mounts", []):
        _mount(entry, mounted)
    # A boot id of this host's own, new at every boot. Rewritten in place: the bind mount shows the new content.
    boot_id_file = state_dir / "boot" / f"{host}.boot_id"
    boot_id_file.write_text(f"{uuid.uuid4()}\n")
    if BOOT_ID_PATH not in mounted:
        subprocess.run(["mount", "--bind", str(boot_id_file), BOOT_ID_PATH], check=True, capture_output=True)
    _log(state_dir, host, f"boot: boot id {boot_id_file.read_text().strip()}")
    for svc in spec.get("services", []):
        _start_service(state_dir, host, svc)
    # sshd last: when Ansible gets in again, the node has booted. The holder starts sshd on SIGUSR1 (a no-op when
    # it runs already).
    os.kill(_holder_pid(state_dir, host), signal.SIGUSR1)
    return 0


def reboot(state_dir: Path, delay: float) -> int:
    host = socket.gethostname()
    holder = _holder_pid(state_dir, host)
    if os.fork() > 0:
        return 0  # the reboot command returns at once, as `shutdown -r now` does
    os.setsid()
    if os.fork() > 0:
        os._exit(0)  # the helper is now an orphan: the holder (a subreaper) adopts and later reaps it
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    try:
        time.sleep(0.5)  # let the reboot command's SSH session return its exit status
        ended = _end_all({holder, os.getpid()})
        _log(state_dir, host, f"reboot: ended {len(ended)} process(es); down for {delay}s")
        time.sleep(delay)
        boot(state_dir)
    except Exception as e:  # noqa: BLE001 - the log is the only place left to say it
        _log(state_dir, host, f"reboot failed: {type(e).__name__}: {e}")
        os._exit(1)
    os._exit(0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="reboot.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["boot", "reboot"])
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds the host stays down")
    args = parser.parse_args(argv)
    state_dir = Path(args.state_dir)
    if args.action == "boot":
        return boot(state_dir)
    return reboot(state_dir, args.delay)


if __name__ == "__main__":
    sys.exit(main())
