"""One assessment per node at a time: the node side of the run lock.

Two runs on the same nodes measure the same disks, GPUs and links at once, and both numbers are wrong. Preflight
takes this lock on every node before it makes anything there, and the cleanup step gives it back
(plugins/action/run_lock.py is the controller side, which judges whether a holder is gone). It runs this file's
source with ``python -c`` (standard library only), so it needs neither the staged probes nor the working directory:
a cleanup of a run whose directory is gone still gives its lock back.

Preflight's one round trip per node (plugins/action/prepare_node.py) is ``take --workdir --probes-sha256``: once the
lock is held, the run's working directory is made and the probes, which come on stdin, are written there, unless it
holds the same digest already (a shared ``assess_remote_tmp``, where the first node wrote them), and this node's mark
is left there (``owner_mark``: on a shared tmp, what a cleanup on another node reads of the run). The cleanup's is
``release --workdir``.

The lock is a small JSON file in a node-local directory that is the same for every run (``<assess_lock_dir>/
clustermax-assess.lock``, /tmp by default, whatever the run's ``assess_remote_tmp``), naming its holder: run id,
controller machine, controller pid and its start time, and the run's working directory on the node. Every
change happens under an flock of the file itself, so two runs that start at the same moment, or that both find the
same stale holder, cannot both win. A lock is only ever replaced when it still names the holder the controller
judged gone (``--break``), and only removed by the run it names (or by the cleanup of that run).
"""

import argparse
import fcntl
import hashlib
import json
import os
import sys
import time

LOCK_NAME = "clustermax-assess.lock"
# Every probe of the holding run touches the lock this often while it runs (probes.cli --lock), and the burn-in's
# polls are probes: a lock not touched for much longer, or for longer than the quiet its run declared (hold),
# belongs to a run that is gone (plugins/action/run_lock.py).
HEARTBEAT_S = 60
# A node's mark in a run's working directory (owner_mark): the file name, then the node's name and boot id.
OWNER_MARK_PREFIX = ".clustermax-assess-node."


def lock_path(lock_dir):
    """Where the lock is: assess_lock_dir, node-local and the same for every run."""
    return os.path.join(lock_dir, LOCK_NAME)


def boot_id():
    """This machine's boot id (Linux), or None: with the hostname it tells a machine from another one of the same
    name (two containers, two VMs called localhost). The controller records it in the holder."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="utf-8") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def owner_mark(workdir):
    """This node's mark in a run's working directory: written when the node's lock is taken for that run, touched
    with the lock while the run's probes run. On a shared assess_remote_tmp a node's lock says nothing of the runs
    of other nodes; another node's mark touched lately says its run may still run (roles/preflight/tasks/
    leftovers.yml). Named as that cleanup's shell names this node (uname -n, boot id)."""
    return os.path.join(workdir, "%s%s.%s" % (OWNER_MARK_PREFIX, os.uname().nodename, boot_id() or "-"))


def mark_owner(workdir, holder):
    """Write this node's mark (the holder) into the run's working directory, once the lock is held."""
    with open(owner_mark(workdir), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(holder, sort_keys=True) + "\n")


def heartbeat(path, every=HEARTBEAT_S):
    """Touch the lock now and every `every` seconds from a daemon thread, for as long as this process runs, and this
    node's mark in the holder's working directory with it; never creates either (a run that does not hold the lock,
    or a cleanup that removed it, is left alone)."""
    import threading  # noqa: PLC0415 - only the probes' CLI needs it; the lock's own `python -c` does not

    try:
        with open(path, encoding="utf-8") as fh:
            holder = json.load(fh)
        paths = [path, owner_mark(workdir_of(path, holder))]
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        paths = [path]

    def touch():
        for each in paths:
            try:
                os.utime(each)
            except OSError:
                pass

    def loop():
        while True:
            time.sleep(every)
            touch()

    touch()
    threading.Thread(target=loop, name="run-lock-heartbeat", daemon=True).start()


def workdir_of(lock_path, holder):
    """The holder's working directory on this node: the one it names, else (a lock of an earlier version, which
    kept the lock beside the working directories) clustermax-assess-<run id> next to the lock."""
    return holder.get("workdir") or os.path.join(os.path.dirname(lock_path),
                                                 "clustermax-assess-%s" % holder["run_id"])


def _locked(path):
    """The lock file open and flocked; reopened when a release unlinked it while this process waited."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _read(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 1 << 16).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        doc = json.loads(text)
    except ValueError:
        return {"run_id": None, "unreadable": text[:200]}
    return doc if isinstance(doc, dict) else {"run_id": None, "unreadable": text[:200]}


def _write(fd, holder):
    data = (json.dumps(holder, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.lseek(fd, 0, os.SEEK_SET)
    os.write(fd, data)
    os.fsync(fd)


def _held(path, fd, current):
    """What the controller judges a holder by: who it is, whether its working directory is on this node, and the
    seconds since the lock was last written (take's refusal and show)."""
    return {"holder": current,
            "holder_workdir": bool(current and current.get("run_id")) and os.path.isdir(workdir_of(path, current)),
            "age_s": round(time.time() - os.fstat(fd).st_mtime, 1)}


# Who a holder is, besides its run id: its controller's machine and process, and its run directory there. A run id
# alone names no one: an explicit assess_run_id can be given to two controllers, or twice on one controller with
# two assess_output_dir; both would share the node's working directory, and the first to end would remove the
# other's lock and directory.
HOLDER_IDENTITY = ("machine", "boot_id", "pid", "start_ticks", "run_dir")


def same_holder(current, holder):
    """Whether the lock's holder is this very run (a task retried): the same run id and the same identity."""
    return current.get("run_id") == holder.get("run_id") and \
        all(current.get(key) == holder.get(key) for key in HOLDER_IDENTITY)


def take(path, holder, break_run=None):
    """{"taken": True} when this node's lock is now held by ``holder`` (free, already ours, or still held by
    ``break_run``, which the controller judged gone); else {"taken": False, "holder": ..., "holder_workdir": whether
    the holder's working directory is on this node, "age_s": seconds since the lock was last written}. Ours means
    the same run id and the same holder (same_holder); a run of the same id from another controller or run directory
    is another holder, judged by the controller as any other."""
    fd = _locked(path)
    try:
        current = _read(fd)
        mine = current is not None and same_holder(current, holder)
        # an unreadable lock (run_id None) is broken with break_run ""
        broken = current is not None and break_run is not None and (current.get("run_id") or "") == break_run
        if current is None or mine or broken:
            _write(fd, holder)
            return {"taken": True, "replaced": current if broken else None}
        return dict(_held(path, fd, current), taken=False)
    finally:
        os.close(fd)


def hold(path, holder, quiet_s):
    """Touch the lock when ``holder`` holds it, and declare on it that its run may leave it untouched for
    ``quiet_s`` more seconds (0: no longer than any run): a reliability batch reboots or faults some nodes while
    no probe runs on the others, for longer than the heartbeat's limit. This node's mark is touched with it. A
    lock of another holder is left as it is, and none is made: {"held": bool, "holder": ...}."""
    if not os.path.exists(path):
        return {"held": False, "holder": None}
    fd = _locked(path)
    try:
        current = _read(fd)
        if current is None:  # released while this waited: _locked made it again, empty
            os.unlink(path)
            return {"held": False, "holder": None}
        if not same_holder(current, holder):
            return {"held": False, "holder": current}
        current.pop("quiet_s", None)
        if quiet_s > 0:
            current["quiet_s"] = quiet_s
        _write(fd, current)
    finally:
        os.close(fd)
    try:
        os.utime(owner_mark(workdir_of(path, current)))
    except (OSError, KeyError):
        pass
    return {"held": True, "holder": current}


def _sha256(path):
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        return None
    return digest.hexdigest()


def stage(workdir, sha256, data):
    """Make the run's working directory (0700; on a shared tmp another node may make it at the same moment) and put
    ``data`` (the probes) in it as probes.pyz, unless it holds that digest already: "present" or "staged". Written
    under a name of this process's and renamed, so that no node of a shared tmp runs a half-written archive."""
    os.makedirs(workdir, mode=0o700, exist_ok=True)
    final = os.path.join(workdir, "probes.pyz")
    if _sha256(final) == sha256:
        return "present"
    if hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit("the probes arrived incomplete: %d bytes whose digest is not %s" % (len(data), sha256))
    part = "%s.%d.part" % (final, os.getpid())
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(part, final)
    return "staged"


def remove_workdir(workdir):
    """Remove the run's working directory; another node of a shared tmp may be removing it at the same moment."""
    import shutil  # noqa: PLC0415 - only the cleanup needs it

    shutil.rmtree(workdir, ignore_errors=True)
    return not os.path.exists(workdir)


def show(path):
    """Who holds the lock, read only (nothing created): {"holder": ... or None, "holder_workdir", "age_s"}."""
    if not os.path.exists(path):
        return {"holder": None, "holder_workdir": False, "age_s": None}
    fd = _locked(path)
    try:
        return _held(path, fd, _read(fd))
    finally:
        os.close(fd)


def release(path, run_id):
    """Remove the lock when ``run_id`` holds it ("all": whoever holds it); {"released": bool, "holder": ...}."""
    if not os.path.exists(path):
        return {"released": False, "holder": None}
    fd = _locked(path)
    try:
        current = _read(fd)
        if current is not None and run_id != "all" and current.get("run_id") != run_id:
            return {"released": False, "holder": current}
        os.unlink(path)  # under the flock: a run waiting on it reopens the path and finds it free
        return {"released": True, "holder": current}
    finally:
        os.close(fd)


def main(argv):
    parser = argparse.ArgumentParser(prog="probes lock", description="one assessment per node at a time")
    parser.add_argument("action", choices=("take", "release", "show", "hold"))
    parser.add_argument("--path", required=True, help="the lock file")
    parser.add_argument("--holder", default="{}", help="take, hold: this run, as a JSON object with run_id")
    parser.add_argument("--break-run", default=None, help="take: replace the lock if it still names this run")
    parser.add_argument("--run-id", default=None, help="release: the run that gives the lock back, or 'all'")
    parser.add_argument("--workdir", default=None,
                        help="take: make the run's working directory once the lock is held; release: remove it first")
    parser.add_argument("--probes-sha256", default=None,
                        help="take, with --workdir: the probes come on stdin with this digest; write them there")
    parser.add_argument("--quiet-s", type=float, default=0.0,
                        help="hold: seconds the run may leave the lock untouched from now (0: no longer than any run)")
    args = parser.parse_args(argv)
    if args.action == "take":
        holder = json.loads(args.holder)
        if not isinstance(holder, dict) or not holder.get("run_id"):
            parser.error("--holder must be a JSON object with run_id")
        data = sys.stdin.buffer.read() if args.probes_sha256 else b""  # read whole, whatever comes next
        out = take(args.path, holder, args.break_run)
        if out["taken"] and args.workdir:
            out["probes"] = stage(args.workdir, args.probes_sha256, data) if args.probes_sha256 else None
            if not args.probes_sha256:
                os.makedirs(args.workdir, mode=0o700, exist_ok=True)
            mark_owner(args.workdir, holder)
    elif args.action == "show":
        out = show(args.path)
    elif args.action == "hold":
        out = hold(args.path, json.loads(args.holder), args.quiet_s)
    else:
        if not args.run_id:
            parser.error("release needs --run-id")
        # the directory first, under the lock it was made under: a run that takes the lock next finds it gone
        removed = remove_workdir(args.workdir) if args.workdir else None
        out = release(args.path, args.run_id)
        if args.workdir:
            out["workdir_removed"] = removed
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
