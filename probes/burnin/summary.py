"""A soak's timeline files -> the numbers of its artifact (measurements only; the controller judges them).

The timelines themselves travel as raw files beside the artifact (``<name>.monitor.jsonl``, ``.kernel.jsonl``,
``.gemm.jsonl``, ``.coll.jsonl``, ``.fio.jsonl``), so the report can plot them and re-grade them.
"""

import json
import os
import time

from probes.burnin.sampler import AMD_ERROR_FIELDS, GPU_ERROR_FIELDS, read_jsonl
from probes.burnin.stats import change_pct, degradation_pct, episodes, min_avg_max, r, tenths
from probes.common.kernel_log import KINDS, merge_events
from probes.common.procs import tail


def _done(p):
    try:
        with open(p["done"]) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def _of_the_load(samples, t_load):
    """The samples of the whole load: those after t_load, when the collective loop began (runner.py,
    _start_the_load_clock); until then the GEMMs ran alone and the GPUs waited for the world, which is no baseline for
    the load. All of them when there is no t_load (no collectives, or a loop that has not begun yet)."""
    if t_load is None:
        return list(samples)
    return [s for s in samples if s.get("t") is not None and float(s["t"]) > float(t_load)]


def gemm_workers(cfg):
    """[(worker, gpu, device)] of the GEMM workers a run starts: one per GPU, one on a CPU node. The runner starts
    them from this list (runner._worker_cfgs), and the summary looks for each one's records in the GEMM timeline."""
    gpu = cfg.get("backend") in ("cuda", "rocm") and cfg.get("gpus")
    devices = [("cuda:%d" % i, g) for i, g in enumerate(cfg["gpus"])] if gpu else [("cpu", None)]
    return [(i, g, dev) for i, (dev, g) in enumerate(devices)]


def exit_text(code):
    """A worker's end in words, from the runner's exit record (the done file's exits): "killed by signal 9",
    "exit 1", or the runner's own words ("killed after the grace period"); "" when none was recorded. The grader
    words facts.worker_exits with it too (reports/phases/burnin/grade.py)."""
    if isinstance(code, int) and code < 0:
        return "killed by signal %d" % -code
    if isinstance(code, int):
        return "exit %d" % code
    return str(code) if code else ""


def _gemm(art, samples, t_start, t_load=None, cfg=None, done=None):
    by_worker = {}
    for s in samples:
        if s.get("type") == "gemm":
            by_worker.setdefault(s["worker"], []).append(s)
    for s in samples:
        if s.get("type") == "error":
            # a worker that could not start, or whose GEMMs raised mid-run (workers.gemm_main): labelled like its
            # samples, so that the grader fails that GPU's rows with it; the value is when it died
            art.add("gemm_worker_error", s["t"], "s_epoch", worker=s.get("worker"), gpu=s.get("gpu"),
                    device=s.get("device"), error=(s.get("error") or "")[:300])
    if cfg is not None and done is not None:
        # A worker killed before its first record (SIGKILL, the OOM killer; or hung in its start until the runner
        # killed it) wrote nothing: without this its GPU would have no rows at all, not a failed one. Only once the
        # run is done: until then a worker without records may still be starting (torch's import takes seconds).
        wrote = {s.get("worker") for s in samples if s.get("type") in ("gemm", "error")}
        for worker, gpu, dev in gemm_workers(cfg):
            if worker in wrote:
                continue
            name = "gemm-%d" % worker
            t = (done.get("exit_t") or {}).get(name) or done.get("t_end") or time.time()
            art.add("gemm_worker_error", t, "s_epoch", worker=worker, gpu=gpu, device=dev,
                    error="wrote nothing before it ended: %s" % (
                        exit_text((done.get("exits") or {}).get(name))
                        or "the runner recorded no exit (the run ended: %s)" % done.get("ended_by")))
    for worker, ss in sorted(by_worker.items()):
        labels = {"worker": worker, "gpu": ss[0].get("gpu"), "device": ss[0].get("device"),
                  "dtype": ss[0].get("dtype"), "size": ss[0].get("size")}
        tf = [s["tflops"] for s in _of_the_load(ss, t_load)]
        mam = min_avg_max(tf)
        if mam:
            lo, avg, hi = mam
            first, last = tenths(tf)
            art.add("gemm_tflops_mean", r(avg, 6), "TFLOP/s", **labels)
            art.add("gemm_tflops_min", r(lo, 6), "TFLOP/s", **labels)
            art.add("gemm_tflops_max", r(hi, 6), "TFLOP/s", **labels)
            art.add("gemm_tflops_first", r(first, 6), "TFLOP/s", **labels)
            art.add("gemm_tflops_last", r(last, 6), "TFLOP/s", **labels)
            art.add("gemm_degradation_pct", r(degradation_pct(tf)), "%", **labels)
        # a wrong product is wrong whenever it came: every sample counts, the ones before the load too
        art.add("gemm_errors", sum(s.get("errors", 0) for s in ss), "count", **labels)
        art.add("gemm_samples", len(ss), "count", **labels)
        # where its timeline ends (t+ s): one that ends before the load did stopped early (the grader compares)
        art.add("gemm_last_sample_s", r(max(float(s["t"]) for s in ss) - t_start, 1), "s", **labels)


def _coll(art, samples):
    by_coll = {}
    for s in samples:
        if s.get("type") == "coll":
            by_coll.setdefault(s["collective"], []).append(s)
    errors = [s for s in samples if s.get("type") == "error"]
    # Every local rank writes its own record of the same failed collective (coll_main: its step, the round it was
    # in), and the runner one per live rank of a stalled loop (all at the same time): each failure counts once.
    failed = {(s.get("kind"), s.get("step") or s.get("t")) for s in errors}
    art.add("coll_errors", sum(1 for kind, _ in failed if kind != "hang"), "count")
    art.add("coll_hangs", sum(1 for kind, _ in failed if kind == "hang"), "count")
    art.add("coll_failure_records", len(errors), "count")
    for s in errors:
        art.add("coll_failure", s["t"], "s_epoch", kind=s.get("kind"), rank=s.get("rank"),
                error=(s.get("error") or "")[:300])
    starts = [s for s in samples if s.get("type") == "start"]
    if starts:
        art.facts["coll_backend"] = starts[0].get("backend")
        art.facts["coll_world"] = str(starts[0].get("world"))
    for coll, ss in sorted(by_coll.items()):
        labels = {"collective": coll, "size_bytes": ss[0]["size_bytes"], "ranks": ss[0]["world"]}
        # a 1-rank world's samples carry no busbw (workers.coll_busbw): nothing crossed a bus, nothing to record
        with_bw = [s for s in ss if s.get("busbw_gbps") is not None]
        if with_bw:
            bw = [s["busbw_gbps"] for s in with_bw]
            _, avg, _ = min_avg_max(bw)
            art.add("coll_busbw_min_gbps", r(min(s["busbw_min_gbps"] for s in with_bw), 6), "GB/s", **labels)
            art.add("coll_busbw_avg_gbps", r(avg, 6), "GB/s", **labels)
            art.add("coll_busbw_max_gbps", r(max(s["busbw_max_gbps"] for s in with_bw), 6), "GB/s", **labels)
            art.add("coll_busbw_degradation_pct", r(degradation_pct(bw)), "%", **labels)
            first, last = tenths(bw)
            art.add("coll_busbw_first_gbps", r(first, 6), "GB/s", **labels)
            art.add("coll_busbw_last_gbps", r(last, 6), "GB/s", **labels)
        lat = min_avg_max(s["lat_us"] for s in ss)
        art.add("coll_lat_us_avg", r(lat[1]), "us", **labels)
        art.add("coll_lat_us_max", r(lat[2]), "us", **labels)
        art.add("coll_wrong", sum(s.get("wrong") or 0 for s in ss), "count", **labels)
        art.add("coll_checks", sum(s.get("checks") or 0 for s in ss), "count", **labels)
        # intervals, not records: each local rank writes one record per interval
        per_rank = {}
        for s in ss:
            per_rank[s.get("rank")] = per_rank.get(s.get("rank"), 0) + 1
        art.add("coll_samples", max(per_rank.values()), "count", **labels)
        art.add("coll_ranks", len(per_rank), "count", **labels)


def _ecc_new(samples):
    """{gpu: new uncorrectable (volatile) ECC errors} from the readings before and after the load, the ones burnin.ecc
    grades; a GPU whose counter went down (reset during the run) has no number: what it counted is unknown."""
    at = {}
    for s in samples:
        if s.get("type") == "gpu_errors":
            for g in s.get("gpus") or []:
                value = g.get("ecc_uncorrectable_volatile")
                if value is not None and not isinstance(value, bool):
                    at.setdefault(g["gpu"], {})[s["when"]] = int(value)
    return {gpu: c["end"] - c["start"] if c["end"] >= c["start"] else None for gpu, c in at.items()
            if "start" in c and "end" in c}


def _monitor(art, samples, interval, t_load=None):
    """The monitor's windows. Means, first and last tenths come from the windows of the whole load (after t_load);
    maxima, throttling, counters and errors from every window: an overheat or a link error before the load formed
    happened all the same."""
    mons = [s for s in samples if s.get("type") == "monitor"]
    art.add("monitor_samples", len(mons), "count")
    if not mons:
        return
    loaded = _of_the_load(mons, t_load)
    of_the_load = {id(s) for s in loaded}
    util = min_avg_max(s.get("cpu_util_pct") for s in loaded)
    if util:
        art.add("cpu_util_mean_pct", r(util[1], 2), "%")
    temp = min_avg_max(s.get("cpu_temp_c") for s in mons)
    if temp:
        art.add("cpu_temp_max_c", r(temp[2], 1), "C")
    mhz = [s.get("cpu_mhz") for s in loaded if s.get("cpu_mhz") is not None]
    if mhz:
        first, last = tenths(mhz)
        art.add("cpu_mhz_first", r(first, 1), "MHz")
        art.add("cpu_mhz_last", r(last, 1), "MHz")
        art.add("cpu_mhz_drop_pct", r(degradation_pct(mhz)), "%")
    nics = {}
    for s in mons:
        for name, d in (s.get("nics") or {}).items():
            acc = nics.setdefault(name, {})
            for k, v in d.items():
                acc[k] = acc.get(k, 0) + v
    for name, acc in sorted(nics.items()):
        art.add("nic_rx_bytes", acc.get("rx_bytes", 0), "B", nic=name)
        art.add("nic_tx_bytes", acc.get("tx_bytes", 0), "B", nic=name)
        art.add("nic_errors", acc.get("rx_errors", 0) + acc.get("tx_errors", 0), "count", nic=name)
        art.add("nic_drops", acc.get("rx_dropped", 0) + acc.get("tx_dropped", 0), "count", nic=name)
        if "carrier_changes" in acc:  # physical interfaces only
            art.add("nic_carrier_changes", acc["carrier_changes"], "count", nic=name)
    ports, saturated = {}, set()
    for s in mons:
        saturated.update(s.get("rdma_saturated") or [])
        for port, d in (s.get("rdma") or {}).items():
            acc = ports.setdefault(port, {})
            for k, v in d.items():
                acc[k] = acc.get(k, 0) + v
    for port, acc in sorted(ports.items()):
        for counter, total in sorted(acc.items()):
            # a counter at its maximum stopped counting: its increase during the run is unknown, not this number
            art.add("rdma_%s" % counter, total, "count", port=port,
                    **({"saturated": True} if "%s:%s" % (port, counter) in saturated else {}))
    gpus = {}
    for s in mons:
        for g in s.get("gpus") or []:
            # each window's own length: the last one (up to the stop) is shorter than the interval
            gpus.setdefault(g["gpu"], []).append((g, float(s.get("dt") or interval), id(s) in of_the_load))
    ecc_new = _ecc_new(samples)
    for gpu, entries in sorted(gpus.items()):
        gs = [g for g, _, _ in entries]
        under = [g for g, _, in_load in entries if in_load]
        labels = {"gpu": gpu, "pci": gs[-1].get("pci")}
        temps = min_avg_max(g.get("temp_c") for g in gs)
        if temps:
            art.add("gpu_temp_max_c", r(temps[2], 1), "C", **labels)
        power = min_avg_max(g.get("power_max_w") for g in gs)
        if power:
            art.add("gpu_power_max_w", r(power[2], 1), "W", **labels)
        limit = min_avg_max(g.get("power_limit_w") for g in gs)
        if limit:
            art.add("gpu_power_limit_w", r(limit[2], 1), "W", **labels)
        clocks = [g.get("sm_mhz") for g in under]
        first, last = tenths(clocks)
        if first is not None:
            art.add("gpu_sm_clock_first_mhz", r(first, 1), "MHz", **labels)
            art.add("gpu_sm_clock_last_mhz", r(last, 1), "MHz", **labels)
            art.add("gpu_sm_clock_drop_pct", r(degradation_pct(clocks)), "%", **labels)
        slowed = [(g.get("slowdown_share") or 0) > 0 for g in gs]
        art.add("gpu_throttle_episodes", episodes(slowed), "count", **labels)
        art.add("gpu_throttle_s", r(sum((g.get("slowdown_share") or 0) * dt for g, dt, _ in entries), 1), "s",
                **labels)
        if under:
            art.add("gpu_power_cap_share", r(sum(g.get("power_cap_share") or 0 for g in under) / len(under)),
                    "ratio", **labels)
        if gpu in ecc_new:  # the readings before and after the load: the numbers burnin.ecc grades
            if ecc_new[gpu] is not None:
                art.add("gpu_ecc_uncorrected_new", ecc_new[gpu], "count", **labels)
        else:  # no reading of both: the stream's counter, from the first window's start to its highest
            ecc = [g.get("ecc_uncorrected") for g in gs if g.get("ecc_uncorrected") is not None]
            if ecc:
                start = next(g.get("ecc_uncorrected_min", g.get("ecc_uncorrected")) for g in gs
                             if g.get("ecc_uncorrected") is not None)
                art.add("gpu_ecc_uncorrected_new", max(ecc) - start, "count", **labels)
        u = min_avg_max(g.get("util_pct") for g in under)
        if u:
            art.add("gpu_util_mean_pct", r(u[1], 1), "%", **labels)
        art.add("gpu_samples", len(gs), "count", **labels)


def _gpu_errors(art, samples):
    """The GPUs' memory error readings of the start and of the end, as read (the controller works out what changed);
    a reading that failed is a fact with the reason."""
    for s in samples:
        if s.get("type") != "gpu_errors":
            continue
        if s.get("error"):
            art.facts["gpu_errors_%s" % s["when"]] = s["error"]
        for g in s.get("gpus") or []:
            for field in dict.fromkeys(GPU_ERROR_FIELDS + AMD_ERROR_FIELDS):
                value = g.get(field)
                if value is not None:
                    art.add("ecc_reading", int(value), "bool" if isinstance(value, bool) else "count",
                            gpu=g["gpu"], pci=g.get("pci"), counter=field, at=s["when"])


def _kmsg_failure(art, samples, t_start):
    """The first read of /dev/kmsg that failed mid-run (the monitor's kmsg_error record): the error, when (t+ s), and
    up to when the log was read in full (t+ s). facts.kmsg holds only the start's (written once, as the run began)."""
    for s in samples:
        if s.get("type") == "kmsg_error":
            t = float(s["t"])
            art.facts["kmsg_error"] = s.get("error") or "a read of the kernel log failed"
            art.facts["kmsg_error_at_s"] = "%.1f" % (t - t_start)
            art.facts["kmsg_read_until_s"] = "%.1f" % (float(s.get("read_until") or t) - t_start)
            return


def _kernel(art, events, t_start):
    merged = merge_events(events)
    counts = dict({k: 0 for k in KINDS}, err=sum(1 for e in events if e.get("kind") == "err"))
    for e in merged:
        counts[e["kind"]] += 1
        labels = {"kind": e["kind"], "line": e.get("line", "")[:500], "pci": e.get("pci"),
                  "at_s": r(e["t"] - t_start, 1)}
        if e.get("code") is not None:
            labels["code"] = e["code"]
        if e.get("severity"):
            labels["severity"] = e["severity"]
        if e.get("fatal") is not None:
            labels["fatal"] = bool(e["fatal"])
        if e.get("lines", 1) > 1:
            labels["lines"] = e["lines"]
        art.add("kernel_event", e["t"], "s_epoch", **labels)
    for kind, n in sorted(counts.items()):
        art.add("kernel_%s_count" % kind, n, "count")


def _fio(art, samples):
    by = {}
    finals = {}
    for s in samples:
        if s.get("type") == "fio":
            by.setdefault((s["phase"], s["clients"]), []).append(s)
        elif s.get("type") == "fio_phase":
            finals[(s["phase"], s["clients"])] = s
    for key in sorted(set(by) | set(finals)):
        phase, clients = key
        labels = {"phase": phase, "clients": clients}
        ss = by.get(key, [])
        total = [s["read_mibps"] + s["write_mibps"] for s in ss]
        mam = min_avg_max(total)
        if mam:
            art.add("fio_bw_min_mibps", r(mam[0]), "MiB/s", **labels)
            art.add("fio_bw_avg_mibps", r(mam[1]), "MiB/s", **labels)
            art.add("fio_bw_max_mibps", r(mam[2]), "MiB/s", **labels)
            first, last = tenths(total)
            art.add("fio_bw_first_mibps", r(first), "MiB/s", **labels)
            art.add("fio_bw_last_mibps", r(last), "MiB/s", **labels)
            art.add("fio_bw_degradation_pct", r(degradation_pct(total)), "%", **labels)
            art.add("fio_intervals", len(ss), "count", **labels)
        fin = finals.get(key)
        if fin:
            art.add("fio_errors", 1 if fin.get("error") or fin.get("fio_error") or fin.get("rc") else 0, "count",
                    **labels)
            for side in ("read", "write"):
                if "%s_iops" % side in fin:
                    art.add("fio_%s_iops" % side, fin["%s_iops" % side], "IOPS", **labels)
                if "%s_clat_p99_us" % side in fin:
                    art.add("fio_%s_clat_p99_us" % side, fin["%s_clat_p99_us" % side], "us", **labels)


def summarize(art, cfg, p):
    """Fill the artifact from the timeline files; state running until the runner wrote its done file."""
    done = _done(p)
    now = time.time()
    art.device.update(cfg.get("device") or {})  # what the start found: poll and stop see no GPU themselves
    t_start = cfg["t_start"]
    t_end = done.get("t_end", now) if done else now
    planned = float(cfg.get("planned_s", cfg["duration_s"]))
    # the deadline moves once every load runs (runner.py): what is left counts to the moved one
    left = max(0.0, float(cfg.get("deadline", t_start + planned)) - now)
    art.facts.update(state="done" if done else "running", t_start=str(round(t_start, 3)),
                     duration_s=str(planned), interval_s=str(cfg["interval"]), marker=cfg["marker"],
                     components=",".join(k for k in ("gemm", "coll", "fio") if cfg.get(k) or
                                         (k == "coll" and cfg.get("collectives"))))
    try:
        with open(p["state"]) as fh:
            art.facts.update({k: str(v) for k, v in (json.load(fh).get("monitor") or {}).items()})
    except (OSError, ValueError):
        pass
    try:
        with open(p["launch"]) as fh:
            art.facts.update({k: v for k, v in json.load(fh).items() if v})
    except (OSError, ValueError):
        pass
    if "t_load" in cfg:
        # seconds from the start until every load ran: the clock of the duration starts there
        art.facts["load_from_s"] = "%.1f" % (cfg["t_load"] - t_start)
    if done:
        for key in ("launcher_failed", "slurm_jobs_left"):
            if done.get(key):
                art.facts[key] = done[key]
        art.facts["ended_by"] = str(done.get("ended_by"))
        art.facts["t_end"] = str(round(t_end, 3))
        bad = {k: v for k, v in (done.get("exits") or {}).items() if v not in (0, None)}
        if bad:
            art.facts["worker_exits"] = json.dumps(bad, sort_keys=True)
            # what they printed last (a traceback, NCCL's WARN lines): the log stays on the node, in a working
            # directory the cleanup step removes
            log = tail(p["log"], 15, 8192)
            if log:
                art.facts["worker_log_tail"] = log
    art.add("elapsed_s", r(t_end - t_start, 1), "s")
    art.add("planned_s", planned, "s")
    art.add("remaining_s", r(left if not done else 0.0, 1), "s")
    art.add("completed", 1 if done and done.get("ended_by") == "completed" else 0, "bool")
    streams = {k: read_jsonl(p[k]) for k in ("monitor", "kernel", "gemm", "coll", "fio")}
    t_load = cfg.get("t_load")
    mons = [s for s in streams["monitor"] if s.get("type") == "monitor"]
    # when the load stopped (t+ s): the monitor samples up to the stop; a GEMM timeline that ends well before it
    # stopped early (burnin.gemm_*)
    load_end = max(float(s["t"]) for s in mons) if mons else min(t_end, float(cfg.get("deadline", t_end)))
    art.add("load_end_s", r(load_end - t_start, 1), "s")
    _monitor(art, streams["monitor"], float(cfg["interval"]), t_load)
    _gpu_errors(art, streams["monitor"])
    _kernel(art, streams["kernel"], t_start)
    _kmsg_failure(art, streams["monitor"], t_start)
    if cfg.get("gemm"):
        _gemm(art, streams["gemm"], t_start, t_load, cfg, done)
    if cfg.get("collectives"):
        _coll(art, streams["coll"])
    if cfg.get("fio"):
        _fio(art, streams["fio"])
    for k in ("monitor", "kernel", "gemm", "coll", "fio"):
        if os.path.exists(p[k]):
            art.raw.append(os.path.basename(p[k]))
    art.facts["progress"] = "%s: %.0f s of %.0f s%s" % (
        art.facts["state"], t_end - t_start, planned,
        ", %.0f s left" % left if not done else " (%s)" % art.facts.get("ended_by"))
    change = None
    if streams["gemm"]:
        tf = [s["tflops"] for s in _of_the_load(streams["gemm"], t_load) if s.get("type") == "gemm"]
        change = change_pct(*tenths(tf))
    if change is not None:
        art.facts["gemm_change_pct"] = "%.2f" % change
