"""fio for the storage sweep: the seed's workloads, job files, and fio's JSON (local and client/server) parsed.

The seed's sweep ("Storage"): sequential and random, reads and writes, buffered and direct; 1 MiB sequential
blocks, 4 KiB buffered and 64 KiB direct random blocks; from 1 client up, on every storage tier.

A job file runs its workloads in turn (``stonewall`` + ``new_group``). Each client host gets its own job file (its
directory, its number of jobs); fio's client sends it to the ``fio --server`` on that host. ``stonewall`` only
orders the jobs of one fio server: the servers of one invocation do not wait for each other between workloads, so
the probe runs one invocation per workload when a point spans several hosts (probes/storage/fio_sweep.py).

An aggregate adds up per-client rates, each over that client's own measurement window; it is the cluster's rate only
where the windows coincide. Where fio reports when each window began (``job_start``, not in fio 3.33's JSON),
`aggregate` gives the fraction of the longest window that every client shares (`window_overlap`).

Pure functions only: the probe (probes/storage/fio_sweep.py) runs fio, these build its input and read its output.
"""

import json

# name -> (fio rw, block size, direct). Writes come before reads of the same kind. The files every workload shares are
# written in full once, before any timed window (prefill_job_file): a time-based write that finds its file missing
# only fallocates it, and a read of space it did not reach reads unwritten extents, which the file system answers with
# zeros and no device I/O.
WORKLOADS = {
    "seq_write_buffered": ("write", "1m", 0),
    "seq_read_buffered": ("read", "1m", 0),
    "rand_write_buffered": ("randwrite", "4k", 0),
    "rand_read_buffered": ("randread", "4k", 0),
    "seq_write_direct": ("write", "1m", 1),
    "seq_read_direct": ("read", "1m", 1),
    "rand_write_direct": ("randwrite", "64k", 1),
    "rand_read_direct": ("randread", "64k", 1),
    # the endurance workloads (seed, Phase 3: "sequential mixed, then random mixed"), half reads and half writes;
    # direct, so that the page cache does not stand in for the storage over a long run
    "mixed_seq_direct": ("rw", "1m", 1),
    "mixed_rand_direct": ("randrw", "64k", 1),
}
# The seed's sweep (Phase 2) and the endurance run's workloads (Phase 3).
SWEEP_WORKLOADS = tuple(name for name in WORKLOADS if not name.startswith("mixed_"))
ENDURANCE_WORKLOADS = ("mixed_seq_direct", "mixed_rand_direct")
# fio's clat percentile keys we report, and the names they get.
PERCENTILES = (("50.000000", "p50"), ("90.000000", "p90"), ("99.000000", "p99"), ("99.900000", "p99_9"))


def workload_spec(name):
    """(rw, bs, direct, op) of a workload name; op is the JSON section fio fills: read, write, or mixed (both)."""
    if name not in WORKLOADS:
        raise ValueError("unknown fio workload %r (known: %s)" % (name, ", ".join(WORKLOADS)))
    rw, bs, direct = WORKLOADS[name]
    return rw, bs, direct, ("mixed" if rw in ("rw", "randrw") else "write" if "write" in rw else "read")


def _both(entry):
    """A mixed workload's read and write sides as one: bytes, I/Os and rates summed, the latency mean weighted by
    I/Os, each percentile the worse of the two (fio's percentiles of two directions cannot be merged exactly)."""
    r, w = entry["read"], entry["write"]
    n = r["clat_n"] + w["clat_n"]
    out = {"iops": r["iops"] + w["iops"],
           "io_bytes": r["io_bytes"] + w["io_bytes"], "runtime_ms": max(r["runtime_ms"], w["runtime_ms"]),
           "ios": r["ios"] + w["ios"], "clat_n": n, "clat_max_us": max(r["clat_max_us"], w["clat_max_us"]),
           "clat_mean_us": (r["clat_mean_us"] * r["clat_n"] + w["clat_mean_us"] * w["clat_n"]) / n if n else 0.0}
    if "bw_bytes" in r and "bw_bytes" in w:  # a sum over one side only would read as half the bandwidth
        out["bw_bytes"] = r["bw_bytes"] + w["bw_bytes"]
    for _, name in PERCENTILES:
        values = [s["clat_%s_us" % name] for s in (r, w) if "clat_%s_us" % name in s]
        if values:
            out["clat_%s_us" % name] = max(values)
    return out


def split_clients(clients, hosts):
    """Spread `clients` fio processes over `hosts` host names in order (round robin): {host: jobs}.
    c <= hosts uses the first c hosts with one job each; more clients than hosts gives hosts several jobs."""
    if clients < 1 or not hosts:
        raise ValueError("need at least one client and one host (clients=%r, hosts=%r)" % (clients, hosts))
    jobs = {}
    for i in range(clients):
        host = hosts[i % len(hosts)]
        jobs[host] = jobs.get(host, 0) + 1
    return jobs


def job_file(workloads, directory, size_mib, runtime_s, numjobs=1, ramp_s=0, buffered_engine="psync",
             buffered_iodepth=1, direct_engine="libaio", direct_iodepth=16):
    """Text of one fio job file running `workloads` one after the other, each its own reporting group.

    Files are named by clone number only (filename_format), so every workload reuses the same files: they
    are written once per host, by prefill_job_file's job before the first workload that uses them. In client/server
    mode fio prefixes the names with the client's host name, so hosts writing into one shared directory never
    collide."""
    lines = [
        "[global]",
        "directory=%s" % directory,
        "filename_format=cmxa-fio.$jobnum",
        "size=%dm" % int(size_mib),
        "numjobs=%d" % int(numjobs),
        "group_reporting=1",
        "time_based=1",
        "runtime=%s" % _duration(runtime_s),
        "invalidate=1",
        "randrepeat=0",
    ]
    if ramp_s:
        lines.append("ramp_time=%s" % _duration(ramp_s))
    for i, name in enumerate(workloads):
        rw, bs, direct, op = workload_spec(name)
        lines += ["", "[%s]" % name]
        if i:
            lines += ["stonewall", "new_group"]
        lines += ["rw=%s" % rw, "bs=%s" % bs, "direct=%d" % direct] + (["rwmixread=50"] if op == "mixed" else [])
        if direct:
            lines += ["ioengine=%s" % direct_engine, "iodepth=%d" % int(direct_iodepth)]
        else:
            lines += ["ioengine=%s" % buffered_engine, "iodepth=%d" % int(buffered_iodepth)]
        if op == "write" and not direct:
            # Dirty pages of a buffered write are flushed inside the job, not during the next workload.
            lines.append("end_fsync=1")
    return "\n".join(lines) + "\n"


PREFILL_JOB = "prefill"


def prefill_job_file(directory, size_mib, clones, direct=1, direct_engine="libaio", direct_iodepth=16,
                     buffered_engine="psync"):
    """Text of the untimed fio job file that writes the files of `clones` (clone numbers of job_file's jobs, whose
    files are cmxa-fio.<clone>) in full, once, before any timed workload reads them.

    fio writes a file's data as it lays it out only for a job that reads (or with overwrite=1); a time-based write
    that finds its file missing only fallocates it and writes what its runtime reaches, so on a slow tier a later
    read would read unwritten extents: zeros from the file system, no device I/O, and a read rate far above the
    tier's. Not time based: each file is written from its first byte to `size`. One section per file, all run
    together (one reporting group, named PREFILL_JOB: one client_stats entry per host, its io_bytes the bytes
    written). Direct where the tier takes O_DIRECT; buffered, with end_fsync, where it does not."""
    lines = [
        "[global]",
        "directory=%s" % directory,
        "size=%dm" % int(size_mib),
        "group_reporting=1",
        "rw=write",
        "bs=1m",
        "direct=%d" % (1 if direct else 0),
    ]
    if direct:
        lines += ["ioengine=%s" % direct_engine, "iodepth=%d" % int(direct_iodepth)]
    else:
        lines += ["ioengine=%s" % buffered_engine, "iodepth=1", "end_fsync=1"]
    for clone in clones:
        # the file job_file's clone `clone` uses: fio names both by the same format (and the same host prefix)
        lines += ["", "[%s]" % PREFILL_JOB, "filename_format=cmxa-fio.%d" % int(clone)]
    return "\n".join(lines) + "\n"


def _duration(seconds):
    seconds = float(seconds)
    if seconds.is_integer():
        return "%ds" % int(seconds)
    return "%dms" % int(round(seconds * 1000))


def extract_json(text):
    """The JSON document in fio's output. In client/server mode fio prints the servers' text lines
    (``<host> Starting 2 processes``) before the JSON; warnings (``fio: …``) may come first too."""
    decoder = json.JSONDecoder()
    pos = 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            raise ValueError("no JSON document in fio output: %r" % text[:200])
        if start == 0 or text[start - 1] == "\n":
            try:
                doc, _ = decoder.raw_decode(text[start:])
                if isinstance(doc, dict) and ("jobs" in doc or "client_stats" in doc):
                    return doc
            except ValueError:
                pass
        pos = start + 1


# What a side lacks when its bandwidth cannot be computed (see side_bw_bytes): the words of the failure.
NO_BW = "its JSON has no bw_bytes, no io_bytes with runtime and no bw"


def before_fio_3(stats):
    """Whether one direction's statistics are in fio 2.x's units (Ubuntu 16.04's 2.2.10, Debian 9's 2.16): completion
    latency as `clat` in microseconds (fio 3.0 renamed it clat_ns, in nanoseconds) and io_bytes in KiB (its bw, KiB/s,
    is io_bytes over runtime). Read from the fields themselves, so that a status document needs no version line."""
    return "clat_ns" not in stats and "clat" in stats


def side_io_bytes(stats):
    """Bytes one direction moved (fio 2.x counts KiB under the same name)."""
    return int(stats.get("io_bytes", 0)) * (1024 if before_fio_3(stats) else 1)


def side_bw_bytes(stats):
    """Bytes per second of one direction, or None where fio's JSON gives nothing to compute it from. fio 3.1 has no
    bw_bytes (3.7 has it): io_bytes over runtime (ms) is the same number exactly; `bw` (KiB/s, rounded) is the last
    resort. None, not 0, so that a missing field is never read as a device that moved nothing."""
    if "bw_bytes" in stats:
        return float(stats["bw_bytes"])
    if "io_bytes" in stats and "runtime" in stats:
        runtime_ms = int(stats["runtime"])
        return side_io_bytes(stats) * 1000.0 / runtime_ms if runtime_ms > 0 else 0.0
    if "bw" in stats:
        return float(stats["bw"]) * 1024.0
    return None


def _side(stats):
    """Bandwidth, IOPS and completion latency of one direction (read or write) of one fio job entry. "bw_bytes" is
    left out where fio's JSON has no field to compute it from (see side_bw_bytes)."""
    # fio 2.x: `clat` in microseconds; fio 3: `clat_ns`
    clat, per_us = (stats.get("clat") or {}, 1.0) if before_fio_3(stats) else (stats.get("clat_ns") or {}, 1000.0)
    ios = int(stats.get("total_ios", clat.get("N", 0)) or 0)
    out = {
        "iops": float(stats.get("iops", 0)),
        "io_bytes": side_io_bytes(stats),
        "runtime_ms": int(stats.get("runtime", 0)),
        "ios": ios,
        "clat_mean_us": float(clat.get("mean", 0.0)) / per_us,
        "clat_max_us": float(clat.get("max", 0.0)) / per_us,
        # the number of latency samples, weighing this side's mean against others': fio 3.1, 3.7 and 3.16 (Ubuntu
        # 20.04, DGX OS 5) print clat_ns without "N" (3.33 has it); every completed I/O is a sample, so total_ios
        # stands in for it
        "clat_n": int(clat.get("N", ios) or 0),
    }
    bw = side_bw_bytes(stats)
    if bw is not None:
        out["bw_bytes"] = bw
    pct = clat.get("percentile") or {}
    for key, name in PERCENTILES:
        if key in pct:
            out["clat_%s_us" % name] = float(pct[key]) / per_us
    return out


def parse_output(text_or_doc, clients_by_addr=None):
    """fio --output-format=json (plain, or client/server) -> list of entries, one per (client, job name):
    {"client", "workload", "error", "read": {...}, "write": {...}}.

    Plain fio has `jobs` (client None). Client/server has `client_stats`, one entry per client and group
    (with group_reporting) identified by `hostname` and `port`, plus an "All clients" entry that fio sums over
    every group of the run, which this parser drops: aggregates are made per workload by `aggregate`.
    `clients_by_addr` maps "addr" or "addr,port" to the name the probe wants in its labels."""
    doc = extract_json(text_or_doc) if isinstance(text_or_doc, str) else text_or_doc
    names = clients_by_addr or {}
    entries = []
    if "client_stats" in doc:
        for job in doc["client_stats"]:
            if job.get("jobname") == "All clients":
                continue
            addr, port = job.get("hostname"), job.get("port")
            key = "%s,%s" % (addr, port)
            client = names.get(key, names.get(addr, key))
            entries.append(_entry(job, client))
    else:
        for job in doc.get("jobs", []):
            entries.append(_entry(job, None))
    return entries


def _entry(job, client):
    opts = job.get("job options") or {}
    entry = {
        "client": client,
        "workload": job.get("jobname"),
        "error": int(job.get("error", 0) or 0),
        "numjobs": int(opts.get("numjobs", 1)) if str(opts.get("numjobs", "1")).isdigit() else None,
        # wall-clock ms (the server's CLOCK_REALTIME) at which the measured window began: fio sets it after the job's
        # files are set up and again when ramp_time ends; with group_reporting, the group's first job's
        "job_start_ms": int(job["job_start"]) if int(job.get("job_start") or 0) > 0 else None,
        "read": _side(job.get("read") or {}),
        "write": _side(job.get("write") or {}),
    }
    entry["mixed"] = _both(entry)
    return entry


def window_overlap(per_client, op):
    """The fraction of the longest measurement window that every client's window shares (1.0: all at once, 0.0:
    some two never ran together), from fio's `job_start` and each client's runtime; None where fio did not report
    when a window began. A sum of rates is the cluster's aggregate only over the shared part: outside it a client
    had the storage without the others and its rate is higher than under the full load."""
    windows = []
    for e in per_client:
        start, runtime = e.get("job_start_ms"), e[op]["runtime_ms"]
        if start is None or runtime <= 0:
            return None
        windows.append((start, start + runtime))
    if len(windows) < 2:
        return 1.0 if windows else None
    shared = min(end for _, end in windows) - max(start for start, _ in windows)
    return max(0.0, shared / max(end - start for start, end in windows))


def aggregate(entries, workload):
    """Across clients, one workload: the sum of bandwidth and IOPS, the completion-latency mean weighted by the
    number of I/Os, and each percentile as its worst (highest) client, since fio's per-client percentiles cannot
    be merged exactly; `window_overlap` (see window_overlap) says how far the sum is one common window's.
    Returns (aggregate dict or None, per-client list)."""
    op = workload_spec(workload)[3]
    per_client = [e for e in entries if e["workload"] == workload]
    if not per_client:
        return None, []
    sides = [e[op] for e in per_client]
    total_n = sum(s["clat_n"] for s in sides)
    agg = {
        "op": op,
        "clients": len(per_client),
        "errors": sum(1 for e in per_client if e["error"]),
        "iops": sum(s["iops"] for s in sides),
        "io_bytes": sum(s["io_bytes"] for s in sides),
        "clat_mean_us": (sum(s["clat_mean_us"] * s["clat_n"] for s in sides) / total_n) if total_n else 0.0,
        "window_overlap": window_overlap(per_client, op),
    }
    if all("bw_bytes" in s for s in sides):
        agg["bw_bytes"] = sum(s["bw_bytes"] for s in sides)
    else:
        # a sum over the clients that have it would read as the tier losing throughput: no bandwidth at all, and
        # the clients whose fio printed none named (the probe records it as a failure)
        agg["no_bw"] = [e["client"] for e in per_client if "bw_bytes" not in e[op]]
    for _, name in PERCENTILES:
        values = [s["clat_%s_us" % name] for s in sides if "clat_%s_us" % name in s]
        if values:
            agg["clat_%s_us" % name] = max(values)
    return agg, per_client
