"""Worker processes of a burn-in or fabric soak, started by the soak runner (probes/burnin/runner.py):

    python -c 'import sys; sys.path.insert(0, ROOT); from probes.burnin.workers import main; main()' CFG MARKER

* ``gemm``: one per GPU (one on a CPU node): large GEMMs back to back (make_gemm of probes/gpu_compute/backend.py),
  and every `interval` seconds one sample with the achieved TFLOP/s and the number of results that differed from the
  first result (the same inputs must always give the same product: a difference is a silent error);
* ``coll``: one rank per GPU (one per node on CPU) of a collective loop across every node (gloo on CPU, nccl on
  GPU): the rendezvous of probes/common/rank.py (TCPStore on the first host), then collectives of a large message in
  rounds, every round checked for a stop by all ranks together (so they stop at the same round, never in the
  middle of a collective), every `check_every` rounds one call on patterned data whose result is known
  (worker.Sweep.check); per interval and collective one sample: algorithm bandwidth (mean over rounds), bus
  bandwidth (mean, min, max over rounds; none in a 1-rank world, coll_busbw), time per call, latency of a tiny
  all-to-all, wrong elements.

Every sample is appended to the worker's file at once. A worker stops at its deadline or when the stop file
appears, and exits by itself at its hard deadline whatever happens (a thread ends the process), so nothing can
outlive the run; the runner also kills it with its process group, and it dies with the runner (PDEATHSIG).
"""

import json
import os
import sys
import threading
import time
from datetime import timedelta


def _append(path, rec):
    with open(path, "a") as fh:
        fh.write(json.dumps(rec, sort_keys=True) + "\n")


def _watchdog(cfg):
    def end():
        while time.time() < float(cfg["hard_deadline"]):
            time.sleep(1.0)
        os._exit(9)

    threading.Thread(target=end, daemon=True).start()


def _deadline(cfg):
    """The runner moves the deadline once every load runs (runner.py, _start_the_load_clock): read again from its
    file at most once a second."""
    now = time.time()
    if cfg.get("deadline_file") and now - cfg.get("_deadline_read", 0.0) >= 1.0:
        cfg["_deadline_read"] = now
        try:
            with open(cfg["deadline_file"]) as fh:
                cfg["deadline"] = float(fh.read())
        except (OSError, ValueError):
            pass  # not moved (yet)
    return float(cfg["deadline"])


def _stopping(cfg):
    return time.time() >= _deadline(cfg) or os.path.exists(cfg["stop"])


def gemm_main(cfg):
    import torch  # noqa: PLC0415 - only the worker imports torch

    from probes.gpu_compute.backend import make_gemm  # noqa: PLC0415
    from probes.gpu_compute.shapes import gemm_flops  # noqa: PLC0415

    out, worker = cfg["out"], cfg["worker"]
    device = torch.device(cfg["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(int(cfg.get("threads") or 1))
    n = int(cfg["size"])
    dtype = cfg["dtype"]
    base = {"type": "gemm", "worker": worker, "gpu": cfg.get("gpu"), "device": cfg["device"], "size": n,
            "dtype": dtype}
    try:
        op, impl, keep = make_gemm(torch, dtype, n, n, n, device, cfg["backend"])
    except Exception as exc:  # noqa: BLE001 - recorded for the runner
        _append(out, dict(base, type="error", t=round(time.time(), 3), error="%s: %s" % (type(exc).__name__, exc)))
        return 3

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    window_start = time.time()
    iters = errors = 0
    try:
        out_tensor = keep[2]
        op()
        sync()
        ref = out_tensor.float().clone()
        scale = float(ref.abs().max().item()) or 1.0
        flops = gemm_flops(n, n, n)
        batch = 1
        window_start = time.time()
        busy = 0.0
        while True:
            t0 = time.perf_counter()
            for _ in range(batch):
                op()
            sync()
            dt = time.perf_counter() - t0
            busy += dt
            iters += batch
            # batches of about 0.2 s: few synchronisations, quick reaction to the stop
            batch = max(1, min(batch * 2, int(batch * 0.2 / max(dt, 1e-6)) or 1))
            now = time.time()
            stop = _stopping(cfg)
            if now - window_start >= float(cfg["interval"]) or stop:
                diff = float((out_tensor.float() - ref).abs().max().item())
                if diff > 1e-3 * scale:
                    errors += 1
                _append(out, dict(base, t=round(now, 3), t_start=round(window_start, 3), iters=iters,
                                  tflops=round(flops * iters / max(busy, 1e-9) / 1e12, 6), errors=errors,
                                  max_diff=diff, impl=impl))
                window_start, iters, errors, busy = now, 0, 0, 0.0
            if stop:
                return 0
    except Exception as exc:  # noqa: BLE001 - a GEMM that died mid-run (CUDA error, lost GPU) is data: when, and why
        # the samples stop here while the run goes on to its deadline: the summary needs the time it died
        _append(out, dict(base, type="error", t=round(time.time(), 3), t_start=round(window_start, 3),
                          iters=iters, error="%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0]
                                                          if str(exc).strip() else "")))
        return 4


def _rendezvous(cfg, dist):
    world, rank = int(cfg["world"]), int(cfg["rank"])
    wait = timedelta(seconds=float(cfg["rdzv_timeout"]))
    store = dist.TCPStore(cfg["master_addr"], int(cfg["master_port"]), world, rank == 0, timeout=wait,
                          wait_for_workers=False)
    store.set("up/%d" % rank, "1")
    try:
        store.wait(["up/%d" % r for r in range(world)], wait)
    except Exception as exc:  # noqa: BLE001 - DistStoreError / RuntimeError by torch version
        missing = [r for r in range(world) if not store.check(["up/%d" % r])]
        raise RuntimeError("rendezvous timed out after %s s: ranks %s never arrived (%s)" % (
            cfg["rdzv_timeout"], ",".join(map(str, missing)), str(exc).splitlines()[0] if str(exc) else "")) from exc
    dist.init_process_group(cfg["backend"], store=store, rank=rank, world_size=world,
                            timeout=timedelta(seconds=float(cfg["op_timeout"])))
    return store


def coll_busbw(algbws, factor, world):
    """The busbw fields of one interval's sample from its rounds' algbw (GB/s): algbw × the collective's factor
    (probes/network/busbw.py), mean, min and max. None in a 1-rank world or for a collective without a factor: one
    rank moves nothing over a bus (all_reduce, all_gather and alltoall have factor 0 there), and its algbw in busbw's
    place would read as a bus bandwidth. The collectives probe leaves busbw out the same way (network/worker.py)."""
    if factor is None or int(world) < 2 or not algbws:
        return {}
    bws = [a * factor for a in algbws]
    return {"busbw_gbps": round(sum(bws) / len(bws), 6), "busbw_min_gbps": round(min(bws), 6),
            "busbw_max_gbps": round(max(bws), 6)}


def coll_main(cfg):
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    from probes.network.busbw import algbw_gbps, busbw_factor  # noqa: PLC0415
    from probes.network.worker import DTYPES, Sweep  # noqa: PLC0415

    out, rank, world = cfg["out"], int(cfg["rank"]), int(cfg["world"])
    base = {"rank": rank, "world": world, "nodes": cfg["nodes"]}
    if cfg["device"].startswith("cuda"):
        torch.cuda.set_device(torch.device(cfg["device"]))
    step = "rendezvous"
    try:
        _rendezvous(cfg, dist)
        _append(out, dict(base, type="start", t=round(time.time(), 3), backend=cfg["backend"]))
        sweep = Sweep(dict(cfg, check=True), torch, dist)
        elem = DTYPES[cfg.get("dtype", "float32")]
        plans = []
        for coll in cfg["collectives"]:
            if coll in ("alltoall", "all_gather", "reduce_scatter"):
                count = max(1, int(cfg["size_bytes"]) // (elem * world))
                nbytes = count * world * elem
            else:
                count = max(1, int(cfg["size_bytes"]) // elem)
                nbytes = count * elem
            inp, outb = sweep.buffers(coll, "out_of_place" if coll != "all_reduce" else "in_place", count)
            sweep.fill_for_timing(coll, inp, outb)
            plans.append({"coll": coll, "count": count, "nbytes": nbytes, "inp": inp, "out": outb,
                          "factor": busbw_factor(coll, world), "iters": 1})
        tiny_in = torch.ones(world, dtype=torch.float32, device=sweep.device)
        tiny_out = torch.empty(world, dtype=torch.float32, device=sweep.device)
        flag = torch.zeros(1, dtype=torch.float32, device=sweep.device)
        # Warm up, then agree on the number of calls per round (the slowest rank's timing decides).
        step = "warm-up"
        for p in plans:
            for _ in range(2):
                sweep.call(p["coll"], p["inp"], p["out"])
            sweep.sync()
            t0 = time.perf_counter()
            sweep.call(p["coll"], p["inp"], p["out"])
            sweep.sync()
            one = sweep.reduce_scalar(time.perf_counter() - t0, dist.ReduceOp.MAX)
            p["iters"] = max(1, min(1000, int(float(cfg.get("round_s", 0.5)) / max(one, 1e-6))))
        windows = {p["coll"]: [] for p in plans}
        window_start = time.time()
        rounds = 0
        while True:
            p = plans[rounds % len(plans)]
            step = "%s round %d" % (p["coll"], rounds)
            sweep.sync()
            t0 = time.perf_counter()
            for _ in range(p["iters"]):
                sweep.call(p["coll"], p["inp"], p["out"])
            sweep.sync()
            per_call = (time.perf_counter() - t0) / p["iters"]
            t0 = time.perf_counter()
            for _ in range(3):
                dist.all_to_all_single(tiny_out, tiny_in)
            sweep.sync()
            lat = (time.perf_counter() - t0) / 3
            wrong = None
            if rounds % max(1, int(cfg.get("check_every", 5))) == 0:
                wrong = sweep.check(p["coll"], "out_of_place" if p["coll"] != "all_reduce" else "in_place",
                                    p["count"], p["inp"], p["out"], rounds)
                sweep.fill_for_timing(p["coll"], p["inp"], p["out"])
            windows[p["coll"]].append((per_call, lat, wrong, p["iters"]))
            rounds += 1
            flag.fill_(1.0 if _stopping(cfg) else 0.0)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            stop = float(flag.item()) > 0
            now = time.time()
            if now - window_start >= float(cfg["interval"]) or stop:
                for p2 in plans:
                    w = windows[p2["coll"]]
                    if not w:
                        continue
                    algbws = [algbw_gbps(p2["nbytes"], x[0]) for x in w]
                    rec = dict(base, type="coll", t=round(now, 3), t_start=round(window_start, 3),
                               collective=p2["coll"], size_bytes=p2["nbytes"], rounds=len(w),
                               iters=sum(x[3] for x in w),
                               time_us=round(1e6 * sum(x[0] for x in w) / len(w), 3),
                               algbw_gbps=round(sum(algbws) / len(algbws), 6),
                               lat_us=round(1e6 * sum(x[1] for x in w) / len(w), 3),
                               checks=sum(1 for x in w if x[2] is not None),
                               wrong=sum(x[2] for x in w if x[2] is not None))
                    rec.update(coll_busbw(algbws, p2["factor"], world))
                    _append(out, rec)
                    windows[p2["coll"]] = []
                window_start = now
            if stop:
                break
        step = "destroy"
        dist.destroy_process_group()
        _append(out, dict(base, type="end", t=round(time.time(), 3), rounds=rounds))
        return 0
    except Exception as exc:  # noqa: BLE001 - the failure is data for the report
        text = str(exc).strip()
        kind = "rendezvous" if step == "rendezvous" else (
            "hang" if "timed out" in text.lower() or "timeout" in text.lower() else "error")
        _append(out, dict(base, type="error", kind=kind, step=step, t=round(time.time(), 3),
                          error="%s: %s" % (type(exc).__name__, text.splitlines()[0] if text else "")))
        return 1


def launched_main():
    """One rank of the collective loop started by srun, mpirun or torchrun (probes/burnin/coll_launch.py): the rank
    from the launcher, this node's settings (where its samples go, its stop file) from the run's store."""
    from probes.common.launch import LaunchedRank, LaunchedRankError  # noqa: PLC0415

    try:
        me = LaunchedRank()
    except LaunchedRankError as exc:
        sys.stderr.write("%s\n" % exc)
        return 2
    cfg = dict(me.node["cfg"])
    _watchdog(cfg)
    master = me.master(float(me.launch["rdzv_timeout"]))
    if master is None:
        me.fail("rendezvous", 4, "rank 0 never published its address")
        return 4
    cfg.update(rank=me.rank, world=me.world, master_addr=master, master_port=me.launch["world_port"],
               device="cuda:%d" % me.local_rank if cfg["backend"] == "nccl" else "cpu")
    rc = coll_main(cfg)
    me.done({"status": "ok" if rc == 0 else "error", "rc": rc})
    sys.stdout.flush()
    os._exit(rc)


def main():
    with open(sys.argv[1]) as fh:
        cfg = json.load(fh)
    _watchdog(cfg)
    role = cfg["role"]
    rc = gemm_main(cfg) if role == "gemm" else coll_main(cfg)
    sys.stdout.flush()
    os._exit(rc)
