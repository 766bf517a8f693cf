"""metadata: N ranks × M files (create, stat, unlink rates) and a concurrent-mkdir storm, with every metadata
inconsistency counted.

Seed: concurrent creation of one directory from 128+ ranks returned EEXIST on an inconsistent filesystem and
killed jobs. Every rank (ranks_per_host processes on every host of a shared tier; on a private tier each host
alone) waits at a barrier, then:
  1. mkdir of one and the same directory, all ranks at once: exactly one must succeed, every other must see
     EEXIST and then find the directory (EEXIST followed by ENOENT is an anomaly), and os.makedirs(…,
     exist_ok=True) of one nested path, all ranks at once, must not raise;
  2. create M files each (O_CREAT|O_EXCL) in that shared directory; 3. stat the M files of a rank on another host
  (ENOENT is an anomaly: a file another host created before the barrier is not visible); 4. unlink its own files;
  5. stat the other rank's files again: still there after its unlink counts as stale (not an anomaly: attribute
  caches may keep them a moment).
Rates: a rank's own files/s, the host's ranks together, and (first host) all ranks: ranks × M / slowest rank's time.
"""

import errno
import multiprocessing
import os
import queue as queue_mod
import shutil
import time

from probes.common import tiers as storage_tier
from probes.common.ports import port_param
from probes.common.rendezvous import StoreClient, StoreError, StoreServer
from probes.params import Param, Params

PARAMS = Params(
    peers=True,
    tier=Param(dict, None, "the storage tier {name, path, shared} to measure"),
    ranks_per_host=Param(int, 2, "processes per host, each creating, stating and removing its own files"),
    files_per_rank=Param(int, 200, "files per process"),
    sync_port=Param(int, 0, "the rendezvous port on the first host (0: derived from the run id and the tier)"),
    connect_timeout=Param(float, 120, "seconds to wait for every host at the rendezvous"),
    phase_timeout=Param(float, 600, "seconds each phase (create, stat, unlink, mkdir storm) may take"),
)
ANOMALIES = ("mkdir_eexist_then_enoent", "mkdir_created_then_enoent", "mkdir_other_error", "makedirs_raised",
             "create_eexist", "create_error", "enoent_after_create", "stat_error", "unlink_enoent", "unlink_error")


def _errname(exc):
    return errno.errorcode.get(exc.errno, str(exc.errno)) if isinstance(exc, OSError) else type(exc).__name__


def _create(name):
    fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    os.write(fd, b"x")
    os.close(fd)


FILE_OPS = {"create": _create, "stat": os.stat, "unlink": os.unlink}


def barrier(client, name, rank, world, timeout):
    """All ranks at `name`, or a StoreError naming the missing ones (a lost rank ends the wait at once)."""
    missing = client.barrier(name, rank, world, timeout, abort_on_lost=True)
    if missing:
        raise StoreError("barrier %s: rank(s) %s %s" % (name, ",".join(map(str, missing)),
                                                          "left" if client.lost else "did not arrive in time"))


def rank_work(rank, world, per_host, files, storm, addr, port, token, host, queue, phase_timeout):
    """One rank (a forked process). Puts {"rank", "counts", "times", …} (and on rank 0 every rank's) on queue."""
    res = {"rank": rank, "host": host, "counts": dict.fromkeys(ANOMALIES, 0), "times": {}, "stale": 0,
           "mkdir": None, "errors": []}
    counts = res["counts"]
    client = None
    try:
        client = StoreClient(addr, port, token, connect_timeout=120, rank=rank)
        barrier(client, "start", rank, world, phase_timeout)
        # 1. the storm: one directory, every rank at once
        try:
            os.mkdir(storm)
            res["mkdir"] = "created"
        except OSError as exc:
            res["mkdir"] = _errname(exc)
            if exc.errno != errno.EEXIST:
                counts["mkdir_other_error"] += 1
        try:
            os.stat(storm)
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                counts["mkdir_eexist_then_enoent" if res["mkdir"] == "EEXIST" else "mkdir_created_then_enoent"] += 1
        try:
            os.makedirs(os.path.join(storm, "tree", "a", "b", "c"), exist_ok=True)
        except OSError as exc:
            counts["makedirs_raised"] += 1
            res["errors"].append("makedirs: %s" % _errname(exc))
        barrier(client, "storm", rank, world, phase_timeout)
        mine = [os.path.join(storm, "r%d.f%d" % (rank, i)) for i in range(files)]
        # Another host's rank when there is one (ranks are numbered host by host).
        peer = (rank + per_host) % world if world > per_host else (rank + 1) % world
        theirs = [os.path.join(storm, "r%d.f%d" % (peer, i)) for i in range(files)]
        # 2. create, 3. stat another rank's files, 4. unlink own files: each timed, each after a barrier
        for phase, names, code, anomaly in (("create", mine, errno.EEXIST, "create_eexist"),
                                            ("stat", theirs, errno.ENOENT, "enoent_after_create"),
                                            ("unlink", mine, errno.ENOENT, "unlink_enoent")):
            t0 = time.perf_counter()
            for name in names:
                try:
                    FILE_OPS[phase](name)
                except OSError as exc:
                    counts[anomaly if exc.errno == code else "%s_error" % phase] += 1
            res["times"][phase] = time.perf_counter() - t0
            barrier(client, phase, rank, world, phase_timeout)
        # 5. stale entries after the other rank's unlink
        for name in theirs:
            if os.path.lexists(name):
                res["stale"] += 1
        everyone = client.allgather("results", rank, world, res, phase_timeout)
        if rank == 0:
            res["all"] = everyone
            shutil.rmtree(storm, ignore_errors=True)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which records it
        res["errors"].append("%s: %s" % (type(exc).__name__, exc))
    finally:
        if client is not None:
            client.leave()
            client.close()
        queue.put(res)


def summarize(results, files):
    """Rates and anomaly counts of a set of rank results: (rates dict, anomaly counts dict, stale count)."""
    ok = [r for r in results if set(r["times"]) >= {"create", "stat", "unlink"}]
    rates = {}
    for phase in ("create", "stat", "unlink"):
        slowest = max((r["times"][phase] for r in ok), default=0)
        if ok and slowest > 0:
            rates[phase] = len(ok) * files / slowest
    counts = dict.fromkeys(ANOMALIES, 0)
    for r in results:
        for key in ANOMALIES:
            counts[key] += r["counts"].get(key, 0)
    return rates, counts, sum(r.get("stale", 0) for r in results)


def run(art, p, out_dir):
    tier = storage_tier.check_tier(p["tier"])
    p["sync_port"] = port_param(p, "sync_port", art.run_id, "metadata/%s" % tier["name"])
    hosts = p["hosts"] or [{"name": art.host, "addr": "127.0.0.1"}]
    host_rank = p["rank"]
    me = hosts[host_rank]
    if not tier["shared"]:
        # A private tier is tested on each host alone: its own ranks, its own rendezvous on loopback.
        hosts, host_rank = [{"name": me["name"], "addr": "127.0.0.1"}], 0
    per_host, files = p["ranks_per_host"], p["files_per_rank"]
    world = per_host * len(hosts)
    art.facts.update({"tier": tier["name"], "tier_path": tier["path"], "tier_shared": tier["shared"],
                      "ranks": world, "ranks_per_host": per_host, "files_per_rank": files,
                      "scope": "across %d hosts" % len(hosts) if len(hosts) > 1 else "this host"})
    art.facts.update({"tier_" + k: v for k, v in storage_tier.describe(tier["path"]).items()})
    if not os.path.isdir(tier["path"]):
        art.skip("tier %s: %s does not exist on %s" % (tier["name"], tier["path"], me["name"]))
        return
    base = storage_tier.run_dir(tier["path"], art.run_id)
    meta_dir = os.path.join(base, "meta-%s" % tier["name"])
    token = "%s/metadata/%s" % (art.run_id, tier["name"])
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs, server = [], None
    try:
        try:
            os.makedirs(meta_dir, exist_ok=True)
        except OSError as exc:
            art.facts["setup_error"] = "makedirs %s: %s" % (meta_dir, _errname(exc))
        if host_rank == 0:
            server = StoreServer(hosts[0]["addr"], p["sync_port"], token)
        storm = os.path.join(meta_dir, "storm")
        for local in range(per_host):
            rank = host_rank * per_host + local
            proc = ctx.Process(target=rank_work, args=(rank, world, per_host, files, storm, hosts[0]["addr"],
                                                       p["sync_port"], token, me["name"], queue,
                                                       p["phase_timeout"]), daemon=True)
            proc.start()
            procs.append(proc)
        results = []
        deadline = time.monotonic() + p["connect_timeout"] + 5 * p["phase_timeout"]
        while len(results) < per_host:
            try:
                results.append(queue.get(timeout=max(1.0, deadline - time.monotonic())))
            except queue_mod.Empty:
                art.error("only %d of %d local ranks reported before the deadline" % (len(results), per_host))
                break
        _record(art, tier, results, files, world, per_host)
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        if server is not None:
            server.close(wait_for=world)
        errors = storage_tier.remove_tree(meta_dir, stop_at=base)
        if errors and host_rank == 0:
            art.facts["cleanup_errors"] = errors[:5]


def _record(art, tier, results, files, world, per_host):
    labels = {"tier": tier["name"], "ranks": world, "files_per_rank": files}
    errors = [e for r in results for e in r["errors"]]
    if errors:
        art.facts["errors"] = sorted(set(errors))[:10]
    rates, counts, stale = summarize(results, files)
    for phase, rate in rates.items():
        art.add("meta_%s_per_s" % phase, round(rate, 1), "files/s", scope="host", **labels)
    for key, n in counts.items():
        art.add("meta_anomalies", n, "count", scope="host", kind=key, **labels)
    art.add("meta_anomalies_total", sum(counts.values()), "count", scope="host", **labels)
    art.add("meta_stale_after_unlink", stale, "count", scope="host", **labels)
    first = [r for r in results if "all" in r]
    if first:
        everyone = first[0]["all"]
        rates, counts, stale = summarize(everyone, files)
        winners = sum(1 for r in everyone if r.get("mkdir") == "created")
        art.facts["mkdir_outcomes"] = {k: sum(1 for r in everyone if r.get("mkdir") == k)
                                       for k in sorted({str(r.get("mkdir")) for r in everyone})}
        art.add("meta_mkdir_winners", winners, "count", scope="aggregate", **labels)
        counts["mkdir_winners_not_one"] = abs(winners - 1)
        for phase, rate in rates.items():
            art.add("meta_%s_per_s" % phase, round(rate, 1), "files/s", scope="aggregate", **labels)
        for key, n in counts.items():
            art.add("meta_anomalies", n, "count", scope="aggregate", kind=key, **labels)
        art.add("meta_anomalies_total", sum(counts.values()), "count", scope="aggregate", **labels)
        art.add("meta_stale_after_unlink", stale, "count", scope="aggregate", **labels)
        if len(everyone) < world:
            art.error("only %d of %d ranks finished" % (len(everyone), world))
    if errors and not rates:
        art.error("; ".join(sorted(set(errors))[:3]))

