"""copy_bw: copy bandwidth through torch tensor copies: pinned host to device, device to host, device-local, and
peer to peer between every ordered pair of GPUs.

One path at a time (like nvbandwidth's per-GPU copy-engine tests), so each number can be held against the per-GPU
expectations (PCIe for H2D/D2H, NVLink / xGMI for P2P). GB/s = bytes copied / time (1e9 B/s); a device-local copy
reads and writes every byte, so its HBM traffic is twice the number shown.
Timing: CUDA events around each copy on the device's current stream (h2d, d2h, d2d_local); for p2p, whose copy
runs on a stream torch picks, the host synchronises both GPUs around `copies_per_sample` back-to-back copies.
CPU backend: one host-to-host tensor copy (`host_local`) exercises the same path; the GPU paths are recorded as
not measured (fact `not_measured`).
Metrics per path: `gbps` (bytes / mean time), `gbps_median`, `gbps_max`; raw times in copy_bw.times.jsonl.
"""

import json
import os
import time

from probes.gpu_compute import backend as compute_backend
from probes.gpu_compute import launch as compute_launch
from probes.gpu_compute.shapes import COPY, gbps, profile_params, rate_stats, resolve
from probes.params import Params

PARAMS = Params(**compute_backend.DEVICE_PARAMS, **profile_params(COPY))

RAW = "copy_bw.times.jsonl"


def _host_copy_times(torch, nbytes, warmup, iters):
    src = torch.empty(nbytes, dtype=torch.uint8).fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8)
    for _ in range(warmup):
        dst.copy_(src)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return times


def _event_times(torch, gpu, op, warmup, iters):
    with torch.cuda.device(gpu):
        for _ in range(warmup):
            op()
        torch.cuda.synchronize(gpu)
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
        for i in range(iters):
            starts[i].record()
            op()
            ends[i].record()
        torch.cuda.synchronize(gpu)
        return [s.elapsed_time(e) / 1000.0 for s, e in zip(starts, ends)]


def _p2p_times(torch, src_gpu, dst_gpu, nbytes, warmup, iters, copies):
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % src_gpu).fill_(1)
    dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda:%d" % dst_gpu)
    for _ in range(warmup):
        dst.copy_(src)
    times = []
    for _ in range(iters):
        torch.cuda.synchronize(src_gpu)
        torch.cuda.synchronize(dst_gpu)
        t0 = time.perf_counter()
        for _ in range(copies):
            dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(src_gpu)
        torch.cuda.synchronize(dst_gpu)
        times.append((time.perf_counter() - t0) / copies)
    return times


def _record(art, raw_fh, direction, nbytes, times, timing, **labels):
    stats = rate_stats(nbytes, times, gbps)
    labels = dict(labels, direction=direction, bytes=nbytes, timing=timing)
    art.add("gbps", stats["mean"], "GB/s", **labels)
    art.add("gbps_median", stats["median"], "GB/s", **labels)
    art.add("gbps_max", stats["max"], "GB/s", **labels)
    raw_fh.write(json.dumps(dict(labels, times_s=[round(t, 12) for t in times]), sort_keys=True) + "\n")


def run(art, params, out_dir):
    ctx = compute_backend.prepare(art, params)
    if ctx is None:
        return
    torch = ctx.torch
    config = resolve(COPY, params, ctx.backend)
    nbytes, warmup, iters = int(config["bytes"]), int(config["warmup"]), int(config["iters"])
    art.facts.update({"profile": config["profile"], "bytes": nbytes, "warmup_iters": warmup, "timed_iters": iters})
    raw_fh = open(os.path.join(out_dir, RAW), "w")
    art.raw.append(RAW)
    try:
        if ctx.backend == "cpu":
            art.facts["not_measured"] = "h2d, d2h, d2d_local, p2p: no GPU on the cpu backend"
            _record(art, raw_fh, "host_local", nbytes, _host_copy_times(torch, nbytes, warmup, iters),
                    "perf_counter", device="cpu")
            return
        copies = int(config["copies_per_sample"])
        gpus = ctx.torch_indices  # torch's indices in this process; the labels (nvidia-smi numbers) are ctx.devices
        label_of = dict(zip(gpus, ctx.devices))
        errors = []
        for i in gpus:
            label = label_of[i]
            try:
                dev = torch.device("cuda", i)
                host = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
                a = torch.empty(nbytes, dtype=torch.uint8, device=dev).fill_(1)
                b = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                paths = [("h2d", lambda a=a, h=host: a.copy_(h, non_blocking=True)),
                         ("d2h", lambda a=a, h=host: h.copy_(a, non_blocking=True)),
                         ("d2d_local", lambda a=a, b=b: b.copy_(a))]
                for direction, op in paths:
                    _record(art, raw_fh, direction, nbytes, _event_times(torch, i, op, warmup, iters), "cuda_events",
                            gpu=label)
                paths = a = b = host = None  # free this GPU's buffers before the next one
            except Exception as exc:  # noqa: BLE001 - one GPU's fault is reported; the others are measured
                errors.append("gpu %s: %s: %s" % (label, type(exc).__name__, str(exc).strip()[:200]))
        for i in gpus:
            for j in gpus:
                if i == j:
                    continue
                try:
                    peer = bool(torch.cuda.can_device_access_peer(i, j))
                    times = _p2p_times(torch, i, j, nbytes, warmup, iters, copies)
                except Exception as exc:  # noqa: BLE001
                    errors.append("p2p %s->%s: %s: %s" % (label_of[i], label_of[j], type(exc).__name__,
                                                         str(exc).strip()[:200]))
                    continue
                _record(art, raw_fh, "p2p", nbytes, times, "host_sync", gpu=label_of[i], peer=label_of[j],
                        peer_access=peer)
        # every GPU of the node, those torch does not see too: each one an error row of the per-GPU checks
        art.facts["gpus"] = ",".join(str(g) for g in sorted(set(ctx.devices) | set(ctx.unseen)))
        if errors:
            art.error("; ".join(errors))
        compute_launch.unseen_errors(art, ctx)
    finally:
        raw_fh.close()
