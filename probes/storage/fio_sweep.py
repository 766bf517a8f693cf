"""fio_sweep: the seed's fio sweep on one storage tier, from 1 client up, across hosts (fio client/server).

Every host of the sweep runs this probe at the same time with the same params and its own `rank`:
  * each host starts ``fio --server`` on its own address and makes its test directory on the tier
    (``<tier>/clustermax-assess-<run>/fio-<tier>/<host>``), checks free space and whether O_DIRECT works there;
  * the hosts meet at a rendezvous on rank 0 (probes/common/rendezvous.py) and exchange what they found;
  * rank 0 (the driver) runs, for each client count c, fio's client, which sends each of the first c hosts (round
    robin: more clients than hosts gives a host several jobs) its own job file; fio's JSON gives per-client
    numbers, this probe adds them up. Before a client count's first workload, one untimed fio client invocation
    over the same hosts writes in full the files that count uses for the first time (fio.prefill_job_file): a
    time-based write only fallocates a missing file and writes what its runtime reaches, and a read of the rest
    would read unwritten extents (zeros, no device I/O: a slow tier read as fast). Its bytes and duration are
    facts.prefill; a host whose files could not be written fails the point, which is not measured. Every workload
    (and endurance run) reads written data, and the timed invocations start together as before. On one host a
    single invocation runs every workload in turn (stonewall: the
    host's jobs of a workload start together). Over several hosts each workload is its own invocation: stonewall
    does not hold one fio server for another, so in one invocation a host whose write took longer to end (its
    end_fsync, its layout) would start every later workload late, and the sum of the hosts' rates would mix
    windows in which a host had the storage to itself. fio's client starts every host's jobs together and returns
    once all of them are done: the start barrier of each workload;
  * then every host stops its fio server and removes its test directory, also after any failure.

Results (driver only): fio_bw_bytes, fio_iops, fio_clat_{mean,p50,p90,p99,p99_9}_us with labels tier, workload,
clients, scope (aggregate | client) and, per client, client (host name) and jobs. Aggregate latency percentiles are
the worst client's (fio's per-client percentiles cannot be merged). Where fio reports when each client's window
began (job_start, from fio newer than 3.33), facts.window_overlap has each multi-host point's shared fraction, and a
point whose windows share less than min_window_overlap records no aggregate (a failure). facts.dropped_points has
every point with no aggregate: its clients, workload, the clients whose own fio failed there, and why. Other hosts
record facts only.
"""

import os
import shutil
import time

from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.common.netif import wait_listening
from probes.common.ports import port_for
from probes.common.procs import Children
from probes.common.rendezvous import Mesh
from probes.common.tools import not_installed
from probes.params import Param, Params
from probes.storage import fio as storage_fio

# The least shared fraction of the clients' windows for their sum to stand for the cluster's aggregate. Outside the
# shared part a client may run without the others' load; over a tenth of its window that moves its rate by about a
# shared tier's run-to-run spread, over more it no longer stands for the cluster under the point's load.
# The slowest write rate a tier is given time for, MiB/s per host: the prefill's and the timed runs' allowances for
# writing their files, as roles/storage/tasks/fio.yml's timeout allows it (a slower tier's point fails, named).
SLOW_MIB_S = 50.0
MIN_WINDOW_OVERLAP = 0.9

PARAMS = Params(
    peers=True,
    tier=Param(dict, None, "the storage tier {name, path, shared} to measure"),
    clients=Param(list, [1], "client counts of the sweep (fio jobs, round robin over the hosts)"),
    workloads=Param(list, list(storage_fio.SWEEP_WORKLOADS), "fio workloads, each run for every client count"),
    size_mib=Param(int, 32, "MiB of file per fio job"),
    runtime_s=Param(float, 1, "seconds each workload runs"),
    ramp_s=Param(float, 0, "seconds of ramp before each workload is measured"),
    buffered_engine=Param(str, "psync", "fio ioengine of the buffered workloads"),
    buffered_iodepth=Param(int, 1, "iodepth of the buffered workloads"),
    direct_engine=Param(str, "libaio", "fio ioengine of the O_DIRECT workloads (psync where a host lacks it)"),
    direct_iodepth=Param(int, 16, "iodepth of the O_DIRECT workloads"),
    fio=Param(str, "fio", "the fio executable"),
    fio_port=Param(int, 0, "port of each host's fio --server (0: derived from the run id and the tier)"),
    sync_port=Param(int, 0, "the rendezvous port on the first host (0: derived from the run id and the tier)"),
    space_factor=Param(float, 1.2, "free space needed on the tier, as a multiple of what is written"),
    connect_timeout=Param(float, 120, "seconds to wait for every host at the rendezvous"),
    endurance_workloads=Param(list, [], "after the sweep, at each client count: each of these workloads for "
                                        "endurance_windows runs of endurance_window_s in a row (the sweep runs them "
                                        "too, as their baseline); [] none"),
    endurance_windows=Param(int, 3, "consecutive fio runs of each endurance workload"),
    endurance_window_s=Param(float, 1, "seconds of each endurance run"),
    min_window_overlap=Param(float, MIN_WINDOW_OVERLAP, "the least fraction of the longest client window that "
                             "every client must share for a multi-host aggregate to be recorded, where fio reports it"),
)
METRICS = (("bw_bytes", "fio_bw_bytes", "B/s"), ("iops", "fio_iops", "IOPS"),
           ("clat_mean_us", "fio_clat_mean_us", "us"), ("clat_p50_us", "fio_clat_p50_us", "us"),
           ("clat_p90_us", "fio_clat_p90_us", "us"), ("clat_p99_us", "fio_clat_p99_us", "us"),
           ("clat_p99_9_us", "fio_clat_p99_9_us", "us"))
# The endurance windows' metrics, named apart so that no sweep check reads them as sweep points.
ENDURANCE_METRICS = (("bw_bytes", "fio_endurance_bw_bytes", "B/s"), ("iops", "fio_endurance_iops", "IOPS"),
                     ("clat_p99_us", "fio_endurance_clat_p99_us", "us"),
                     ("clat_p99_9_us", "fio_endurance_clat_p99_9_us", "us"))


def _params(p, run_id):
    """The ports of this run and tier, the client counts in order, the workloads checked."""
    # By the tier's name, as checkpoint and metadata do: the same on every host even where a host's path differs.
    tier = p["tier"].get("name") if isinstance(p["tier"], dict) else p["tier"]
    block = port_for(run_id, "fio_sweep/%s" % tier, span=2)
    p["sync_port"] = p["sync_port"] or block
    p["fio_port"] = p["fio_port"] or block + 1
    p["clients"] = sorted({int(c) for c in p["clients"]})
    for name in p["workloads"]:
        storage_fio.workload_spec(name)  # unknown names fail early, with the list of known ones
    if not p["hosts"]:
        p["hosts"] = [{"name": "localhost", "addr": "127.0.0.1"}]
    return p


def fio_version(fio):
    res = run_cmd([fio, "--version"], timeout=20)
    return res.stdout.strip() if res.rc == 0 else None


def engines(fio):
    res = run_cmd([fio, "--enghelp"], timeout=20)
    return {line.strip() for line in res.stdout.splitlines()[1:] if line.strip()} if res.rc == 0 else set()


def _local_setup(p, tier, me, my_dir, out_dir, children):
    """What this host can offer the sweep: {ok, reason, direct_ok, …}; starts its fio server (one of children)
    when it can."""
    info = {"host": me["name"], "ok": False, "reason": None, "direct_ok": False, "direct_reason": None}
    fio = shutil.which(p["fio"])
    if not fio:
        info["reason"] = not_installed(p, "fio", "fio not found on %s (storage_fio_binary)" % me["name"])
        return info
    info["fio_version"] = fio_version(fio)
    if not os.path.isdir(tier["path"]):
        info["reason"] = "tier %s: %s does not exist on %s" % (tier["name"], tier["path"], me["name"])
        return info
    hosts = [h["name"] for h in p["hosts"]]
    most_jobs = max(storage_fio.split_clients(max(p["clients"]), hosts).get(me["name"], 0), 1)
    refusal = storage_tier.check_space(tier["path"], most_jobs * p["size_mib"] * 2**20, p["space_factor"])
    info.update(storage_tier.describe(tier["path"]))
    if refusal:
        info["reason"] = refusal
        return info
    os.makedirs(my_dir, exist_ok=True)
    info["direct_ok"], info["direct_reason"] = storage_tier.direct_io_supported(my_dir)
    info["engines_ok"] = p["direct_engine"] in engines(fio)
    server = children.start([fio, "--server=%s,%d" % (me["addr"], p["fio_port"])],
                            log_path=os.path.join(out_dir, ".fio-server-%s.log" % tier["name"]))
    if not wait_listening(me["addr"], p["fio_port"], server, timeout=15):
        children.stop(server)
        info["reason"] = "fio --server did not start on %s:%s" % (me["addr"], p["fio_port"])
        return info
    info["ok"] = True
    return info


def run(art, params, out_dir):
    p = _params(params, art.run_id)
    tier = storage_tier.check_tier(p["tier"])
    rank = p["rank"]
    hosts = p["hosts"]
    me = hosts[rank]
    token = "%s/fio_sweep/%s" % (art.run_id, tier["name"])
    base = storage_tier.run_dir(tier["path"], art.run_id)
    my_dir = os.path.join(base, "fio-%s" % tier["name"], me["name"])
    art.facts.update({"tier": tier["name"], "tier_path": tier["path"], "tier_shared": tier["shared"],
                      "role": "driver" if rank == 0 else "server", "driver": hosts[0]["name"]})
    art.facts.update({"tier_" + k: v for k, v in storage_tier.describe(tier["path"]).items()})
    mesh = None
    children = Children()
    try:
        try:
            info = _local_setup(p, tier, me, my_dir, out_dir, children)
        except OSError as exc:  # e.g. the tier is read-only here: this host sits the sweep out, the others go on
            info = {"host": me["name"], "ok": False, "reason": "%s: %s" % (type(exc).__name__, exc),
                    "direct_ok": False, "direct_reason": None}
        mesh = Mesh([h["name"] for h in hosts], [h["addr"] for h in hosts], rank, p["sync_port"], token,
                    connect_timeout=p["connect_timeout"])
        infos = mesh.allgather(info, timeout=p["connect_timeout"] + 30)
        art.facts["direct_io"] = info["direct_ok"]
        if info.get("direct_reason"):
            art.facts["direct_io_reason"] = info["direct_reason"]
        if rank == 0:
            summary = _drive(art, p, tier, infos, out_dir)
        else:
            summary = None
        # Rank 0's summary reaches every host; the others wait here while the sweep runs.
        summary = mesh.allgather(summary, timeout=None)[0] or {}
        if rank != 0:
            art.facts["points"] = summary.get("points")
            if not info["ok"]:
                art.skip(info["reason"])
            elif summary.get("status") == "skipped":
                art.skip(summary.get("reason"))
            elif me["name"] not in summary.get("clients_used", []):
                art.skip("not used as a client: %s" % (summary.get("reason") or "see the driver's artifact"))
    finally:
        # The fio servers first: the rendezvous is over (or broken) by now, and nothing may keep them running.
        children.stop_all()
        if mesh is not None:
            mesh.close()
        errors = storage_tier.remove_tree(my_dir, stop_at=base)
        if errors:
            art.facts["cleanup_errors"] = errors[:5]


def _drive(art, p, tier, infos, out_dir):
    """Rank 0: run the sweep over the hosts that could take part; returns the summary every host gets."""
    usable = [i for i in infos if i["ok"]]
    unusable = {i["host"]: i["reason"] for i in infos if not i["ok"]}
    if unusable:
        art.facts["hosts_not_used"] = unusable
    if not infos[0]["ok"]:
        art.skip(infos[0]["reason"])
        return {"status": "skipped", "reason": infos[0]["reason"], "clients_used": []}
    names = [i["host"] for i in usable]
    addr = {h["name"]: h["addr"] for h in p["hosts"]}
    if tier["shared"]:
        total = max(p["clients"]) * p["size_mib"] * 2**20
        refusal = storage_tier.check_space(tier["path"], total, p["space_factor"])
        if refusal:
            art.skip(refusal)
            return {"status": "skipped", "reason": refusal, "clients_used": []}
    endurance = [w for w in p["endurance_workloads"] if storage_fio.workload_spec(w)]
    workloads = list(p["workloads"]) + [w for w in endurance if w not in p["workloads"]]
    skipped = {}
    no_direct = {i["host"]: i["direct_reason"] for i in usable if not i["direct_ok"]}
    if no_direct:
        why = "; ".join("%s: %s" % kv for kv in sorted(no_direct.items()))
        for name in workloads:
            if storage_fio.workload_spec(name)[2]:
                skipped[name] = "O_DIRECT does not work on this tier (%s)" % why
    direct_engine = p["direct_engine"] if all(i.get("engines_ok") for i in usable) else "psync"
    if direct_engine != p["direct_engine"]:
        art.facts["direct_engine_fallback"] = "%s not in fio --enghelp on every host: psync used" % p["direct_engine"]
    workloads = [w for w in workloads if w not in skipped]
    if skipped:
        art.facts["skipped_workloads"] = skipped
    art.facts.update({"fio_version": infos[0].get("fio_version"), "clients_used": names,
                      "direct_engine": direct_engine, "direct_iodepth": p["direct_iodepth"],
                      "buffered_engine": p["buffered_engine"], "buffered_iodepth": p["buffered_iodepth"],
                      "size_mib": p["size_mib"], "runtime_s": p["runtime_s"], "ramp_s": p["ramp_s"]})
    point = Point(art, p, tier, names, addr, direct_engine, out_dir, direct_ok=not no_direct)
    failures = point.failures
    points = 0
    swept = {}  # client count -> the workloads whose sweep point has a result: the endurance runs' baselines
    for clients in p["clients"]:
        if not workloads:
            break
        before = len(failures)
        entries, jobs = point.run(clients, workloads, p["runtime_s"], p["ramp_s"], "c%d" % clients)
        if entries is not None:
            points += _record(art, tier, clients, jobs, workloads, entries, failures, p["min_window_overlap"])
            swept[clients] = {e["workload"] for e in entries if not e["error"]}
        else:  # no fio output at all: every client of the point failed, or the hosts whose files were not written
            for name in workloads:
                _dropped(art, clients, name, point.unwritten or sorted(jobs), failures[before:])
    endurance = [w for w in endurance if w in workloads]
    if endurance:
        art.facts["endurance"] = {"workloads": endurance, "windows": p["endurance_windows"],
                                  "window_s": p["endurance_window_s"]}
        not_run = []
        for clients in p["clients"]:
            for name in endurance:
                if name not in swept.get(clients, ()):
                    # no baseline to compare with, and a point that failed once would likely fail every run
                    not_run.append("c%d %s: its sweep point failed" % (clients, name))
                    continue
                began = time.monotonic()
                for window in range(p["endurance_windows"]):
                    start_s = time.monotonic() - began
                    entries, jobs = point.run(clients, [name], p["endurance_window_s"], 0,
                                              "c%d-%s-w%d" % (clients, name, window))
                    if entries is not None:
                        _record_endurance(art, tier, clients, jobs, name, window, start_s, entries, failures,
                                          p["min_window_overlap"])
        if not_run:
            art.facts["endurance_not_run"] = not_run
    art.facts["points"] = points
    if failures:
        art.facts["failures"] = failures
        art.error("; ".join(failures[:3]))
    return {"status": art.status, "reason": art.reason, "clients_used": names, "points": points}


class Point:
    """A point's fio client invocations over the first hosts (one per workload over several hosts): every host's
    job file, fio's output kept as raw files, its JSON parsed; an invocation that fails adds to failures and gives
    no entries. Before the first invocation that uses a file, the prefill writes it in full (see _prefill)."""

    def __init__(self, art, p, tier, names, addr, direct_engine, out_dir, direct_ok=True):
        self.art, self.p, self.tier, self.names, self.addr = art, p, tier, names, addr
        self.direct_engine, self.out_dir, self.direct_ok = direct_engine, out_dir, direct_ok
        self.fio = shutil.which(p["fio"])
        self.base = storage_tier.run_dir(tier["path"], art.run_id)
        self.failures = []
        self.prefilled = {}  # host -> how many of its clones' files (0 … n-1) the prefill has written in full
        self.unwritten = []  # the hosts whose files the last run's prefill could not write

    def _dir(self, host):
        return os.path.join(self.base, "fio-%s" % self.tier["name"], host)

    def run(self, clients, workloads, runtime_s, ramp_s, tag):
        """(entries or None, {host: jobs}) of the workloads in turn with `clients` fio processes: one fio invocation
        on one host; over several hosts one per workload (see the module's doc), within the point's time budget.
        None, with the hosts in self.unwritten, where the prefill could not write a host's files."""
        jobs = storage_fio.split_clients(clients, self.names)
        self.unwritten = self._prefill(jobs, tag)
        if self.unwritten:
            return None, jobs
        if len(jobs) == 1 or len(workloads) == 1:
            return self._invoke(jobs, workloads, runtime_s, ramp_s, tag, self._budget(jobs, workloads, runtime_s,
                                                                                      ramp_s)), jobs
        deadline = time.monotonic() + self._budget(jobs, workloads, runtime_s, ramp_s)
        entries, ran = [], False
        for name in workloads:
            left = deadline - time.monotonic()
            if left <= 0:
                self.failures.append("%s-%s: not run, the point's time was spent" % (tag, name))
                continue
            got = self._invoke(jobs, [name], runtime_s, ramp_s, "%s-%s" % (tag, name), left)
            if got is not None:
                entries += got
                ran = True
        return (entries if ran else None), jobs

    def _prefill(self, jobs, tag):
        """Write in full, in one untimed fio client invocation over the hosts that need it, the files of the clones
        in `jobs` that no earlier prefill wrote (a later client count's new clones; earlier files stay written: the
        workloads only overwrite them). facts.prefill gets each invocation's bytes and duration per host, raw
        facts; returns the hosts whose files were not written in full (each a failure: the point is not
        measured), [] when all are."""
        new = {h: list(range(self.prefilled.get(h, 0), n)) for h, n in jobs.items() if n > self.prefilled.get(h, 0)}
        if not new:
            return []
        p = self.p
        texts = {h: storage_fio.prefill_job_file(self._dir(h), p["size_mib"], clones, direct=self.direct_ok,
                                                 direct_engine=self.direct_engine,
                                                 direct_iodepth=p["direct_iodepth"],
                                                 buffered_engine=p["buffered_engine"])
                 for h, clones in new.items()}
        # seconds at SLOW_MIB_S per host (its files are written together), and fio's start
        timeout = max(len(c) for c in new.values()) * p["size_mib"] / SLOW_MIB_S + 60
        began = time.monotonic()
        rc, out, err = self._run_fio(texts, "%s-prefill" % tag, timeout)
        fact = {"clients": sum(jobs.values()), "duration_s": round(time.monotonic() - began, 3), "rc": rc,
                "hosts": {h: {"files": len(c), "size_bytes": len(c) * p["size_mib"] * 2**20} for h, c in new.items()}}
        self.art.facts.setdefault("prefill", []).append(fact)
        hosts = ", ".join(new)
        if rc is None:
            self.failures.append("%s: the prefill (fio writing every file in full before the point) timed out "
                                 "after %.0f s on %s (the point is not measured)" % (tag, timeout, hosts))
            return sorted(new)
        try:
            entries = storage_fio.parse_output(out, {"%s,%s" % (self.addr[h], p["fio_port"]): h for h in new})
        except ValueError:
            tail = (err.strip() or out.strip()).splitlines()[-3:]
            self.failures.append("%s: the prefill's fio rc=%s, no JSON: %s (on %s; the point is not measured)" % (
                tag, rc, " | ".join(tail), hosts))
            return sorted(new)
        failed = []
        for host in new:
            mine = [e for e in entries if e["client"] == host]
            written = sum(e["write"]["io_bytes"] for e in mine)
            facts = fact["hosts"][host]
            facts.update({"io_bytes": written, "runtime_ms": max([e["write"]["runtime_ms"] for e in mine] or [0]),
                          "error": max([e["error"] for e in mine] or [0])})
            why = None
            if not mine:
                why = "no result from fio"
            elif facts["error"]:
                why = "fio reported error %d (%s)" % (facts["error"], os.strerror(facts["error"]))
            elif written < facts["size_bytes"]:
                why = "fio wrote %d of its %d bytes" % (written, facts["size_bytes"])
            if why:
                failed.append(host)
                self.failures.append("%s: the prefill could not write the files on %s: %s (the point is not "
                                     "measured)" % (tag, host, why))
            else:
                self.prefilled[host] = jobs[host]
        return sorted(failed)

    def _budget(self, jobs, workloads, runtime_s, ramp_s):
        per_workload = runtime_s + ramp_s + 2
        layout = max(jobs.values()) * self.p["size_mib"] / SLOW_MIB_S
        return len(workloads) * per_workload + layout + 60

    def _invoke(self, jobs, workloads, runtime_s, ramp_s, tag, timeout):
        """One fio client invocation: the entries of its JSON, or None (a failure)."""
        p = self.p
        texts = {host: storage_fio.job_file(
            workloads, self._dir(host), p["size_mib"], runtime_s, numjobs=numjobs, ramp_s=ramp_s,
            buffered_engine=p["buffered_engine"], buffered_iodepth=p["buffered_iodepth"],
            direct_engine=self.direct_engine, direct_iodepth=p["direct_iodepth"]) for host, numjobs in jobs.items()}
        rc, out, err = self._run_fio(texts, tag, timeout)
        if rc is None:
            self.failures.append("%s: fio timed out" % tag)
            return None
        try:
            entries = storage_fio.parse_output(out, {"%s,%s" % (self.addr[h], p["fio_port"]): h for h in self.names})
        except ValueError:
            tail = (err.strip() or out.strip()).splitlines()[-3:]
            self.failures.append("%s: fio rc=%s, no JSON: %s" % (tag, rc, " | ".join(tail)))
            return None
        if rc != 0:
            self.failures.append("%s: fio exited %s: %s" % (tag, rc, err.strip().splitlines()[-1:] or ""))
        return entries

    def _run_fio(self, texts, tag, timeout):
        """fio's client with each host's job file ({host: text}): (rc, stdout, stderr), rc None where it timed out;
        the job files and fio's output kept as raw files."""
        p, tier = self.p, self.tier
        argv = [self.fio, "--output-format=json", "--eta=never"]
        job_texts = []
        for host, text in texts.items():
            job_path = os.path.join(self.out_dir, ".fio-%s-%s-%s.fio" % (tier["name"], tag, host))
            with open(job_path, "w") as fh:
                fh.write(text)
            job_texts.append("# host %s\n%s" % (host, text))
            argv += ["--client=%s,%d" % (self.addr[host], p["fio_port"]), job_path]
        stem = "fio_sweep-%s-%s" % (tier["name"], tag)
        with open(os.path.join(self.out_dir, stem + ".jobs.txt"), "w") as fh:
            fh.write("\n".join(job_texts))
        self.art.raw.append(stem + ".jobs.txt")
        res = run_cmd(argv, timeout=timeout)
        with open(os.path.join(self.out_dir, stem + ".out"), "w") as fh:
            fh.write(res.stdout)
        self.art.raw.append(stem + ".out")
        return res.rc, res.stdout, res.stderr


def _windows_apart(art, point, agg, least):
    """Why a multi-host aggregate is not one common window's (its clients' windows share less than `least` of the
    longest), or None. The shared fraction goes into facts.window_overlap; where fio does not say when windows
    began, a fact says so: the point's workload then had only fio's common start (see the module's doc)."""
    if agg["clients"] < 2:
        return None
    overlap = agg.get("window_overlap")
    if overlap is None:
        art.facts["window_overlap_unmeasured"] = (
            "%s reports no job_start: each workload ran as one fio client run, started on every host together, but "
            "when each host's window began is not known" % (art.facts.get("fio_version") or "this fio"))
        return None
    art.facts.setdefault("window_overlap", {})[point] = round(overlap, 3)
    if overlap < least:
        return "%s: the clients' windows share %.0f%% of the longest (under %.0f%%): their rates were not measured " \
               "together (no aggregate recorded)" % (point, 100 * overlap, 100 * least)
    return None


def _record_endurance(art, tier, clients, jobs, name, window, start_s, entries, failures, least=MIN_WINDOW_OVERLAP):
    """One endurance window's aggregate over the clients: bandwidth, IOPS and the worst client's p99 and p99.9. A
    window that misses a client or whose fio reported an error on a client is a failure and is not recorded: its
    sum would read as degradation (as _record's points)."""
    agg, per_client = storage_fio.aggregate(entries, name)
    if agg is None:
        failures.append("c%d %s window %d: no result from fio" % (clients, name, window))
        return
    missing = sorted(set(jobs) - {e["client"] for e in per_client})
    if missing:
        failures.append("c%d %s window %d: no result from %s" % (clients, name, window, ", ".join(missing)))
        return
    bad = [e["client"] for e in per_client if e["error"]]
    if bad:
        # a failed client's zeros (or its part of a window) in the sum would read as degradation, as a missing one's
        failures.append("c%d %s window %d: fio reported an error on %s (no aggregate recorded)" % (
            clients, name, window, ", ".join(map(str, bad))))
        return
    if "no_bw" in agg:
        failures.append("c%d %s window %d: no bandwidth from fio on %s: %s" % (
            clients, name, window, ", ".join(map(str, agg["no_bw"])), storage_fio.NO_BW))
        return
    apart = _windows_apart(art, "c%d %s window %d" % (clients, name, window), agg, least)
    if apart:
        failures.append(apart)
        return
    labels = {"tier": tier["name"], "workload": name, "clients": clients, "window": window,
              "start_s": round(start_s, 3), "scope": "aggregate"}
    for key, metric, unit in ENDURANCE_METRICS:
        if key in agg:
            art.add(metric, round(agg[key], 3), unit, **labels)


def _dropped(art, clients, name, failed_clients, reasons):
    """facts.dropped_points: a sweep point with no aggregate recorded, the clients whose own fio failed there (an
    error, no result, no bandwidth; none where the point was dropped for its windows) and why. The graders grade
    a client's rows only at points with an aggregate (reports/phases/storage/grade.py)."""
    art.facts.setdefault("dropped_points", []).append({"clients": clients, "workload": name,
                                                       "failed_clients": list(failed_clients),
                                                       "reason": "; ".join(reasons)})


def _record(art, tier, clients, jobs, workloads, entries, failures, least=MIN_WINDOW_OVERLAP):
    points = 0
    for name in workloads:
        rw, bs, direct, op = storage_fio.workload_spec(name)
        agg, per_client = storage_fio.aggregate(entries, name)
        before = len(failures)
        if agg is None:
            failures.append("c%d %s: no result from fio" % (clients, name))
            _dropped(art, clients, name, sorted(jobs), failures[before:])
            continue
        labels = {"tier": tier["name"], "workload": name, "clients": clients, "rw": rw, "bs": bs,
                  "direct": direct}
        missing = sorted(set(jobs) - {e["client"] for e in per_client})
        if missing:
            failures.append("c%d %s: no result from %s (no aggregate recorded)" % (clients, name, ", ".join(missing)))
        bad = [e["client"] for e in per_client if e["error"]]
        if bad:
            failures.append("c%d %s: fio reported an error on %s (no aggregate recorded)" % (
                clients, name, ", ".join(map(str, bad))))
        apart = _windows_apart(art, "c%d %s" % (clients, name), agg, least)
        if apart:
            failures.append(apart)
        no_bw = agg.get("no_bw")
        if no_bw:
            failures.append("c%d %s: no bandwidth from fio on %s: %s (no aggregate recorded)" % (
                clients, name, ", ".join(map(str, no_bw)), storage_fio.NO_BW))
        if len(failures) > before:
            _dropped(art, clients, name, sorted(set(missing) | set(map(str, bad)) | set(map(str, no_bw or ()))),
                     failures[before:])
        # the point's aggregate only where every client answered without an error: a sum over fewer clients than
        # the point's count would read as the tier losing throughput with more clients (as _record_endurance); and
        # only over windows measured together (apart: a client that ran alone part of the time adds too much)
        if not (missing or bad or apart or no_bw):
            for key, metric, unit in METRICS:
                if key in agg:
                    art.add(metric, round(agg[key], 3), unit, scope="aggregate", **labels)
        for entry in per_client:
            side = entry[op]
            for key, metric, unit in METRICS:
                if key in side:
                    art.add(metric, round(side[key], 3), unit, scope="client", client=entry["client"],
                            jobs=jobs.get(entry["client"], entry.get("numjobs")), **labels)
        points += 1
    return points
