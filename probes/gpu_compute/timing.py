"""Timing of one operation the way mamf-finder does it: warm-up, a cache flush before every timed iteration, only
the operation inside the timed interval, per-iteration times kept.

CUDA / ROCm: a CUDA event pair around each iteration, all iterations queued and synchronised once at the end
(a synchronisation per iteration would fold launch latency and clock ramp-up into the time). The flush is a write of
a buffer larger than L2 (at least 256 MiB, mamf-finder's size, or twice the L2 torch reports).
CPU: time.perf_counter around each call (CPU ops are synchronous); the flush writes twice the last-level cache.
"""

import os
import time

MIB = 2 ** 20


def read_llc_bytes(sys_root="/sys"):
    """Size of the largest CPU cache sysfs lists for cpu0, or None."""
    base = os.path.join(sys_root, "devices/system/cpu/cpu0/cache")
    best = None
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return None
    for entry in entries:
        try:
            with open(os.path.join(base, entry, "size")) as fh:
                text = fh.read().strip().upper()
        except OSError:
            continue
        factor = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
        digits = text[:-1] if text[-1:] in "KMG" else text
        if digits.isdigit():
            size = int(digits) * factor
            best = size if best is None or size > best else best
    return best


def flush_size(torch, backend, params=None, llc=None):
    """Bytes written between timed iterations so that no operand is still in cache."""
    params = params or {}
    if params.get("flush_bytes") is not None:
        return max(0, int(params["flush_bytes"]))
    if backend == "cpu":
        llc = llc if llc is not None else read_llc_bytes()
        return min(max(2 * (llc or 32 * MIB), 8 * MIB), 256 * MIB)
    l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0) or 0
    return max(256 * MIB, 2 * int(l2))


class Timer:
    """Times `op` on one device; the flush buffer lives as long as the timer."""

    def __init__(self, torch, backend, device, flush_bytes):
        self.torch = torch
        self.gpu = backend != "cpu"
        self.device = device
        self.flush_bytes = flush_bytes
        self._buf = torch.empty(flush_bytes, dtype=torch.int8, device=device) if flush_bytes else None

    def sync(self):
        if self.gpu:
            self.torch.cuda.synchronize()

    def flush(self):
        if self._buf is not None:
            self._buf.zero_()

    def warm(self, op, seconds):
        """Run op for about `seconds` (clocks up, caches and allocators settled) before anything is timed."""
        if seconds <= 0:
            return 0
        runs, deadline = 0, time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(4):
                op()
            runs += 4
            self.sync()
        return runs

    def time(self, op, warmup, iters, flush=True):
        """Per-iteration seconds of `iters` timed runs after `warmup` untimed ones."""
        for _ in range(int(warmup)):
            if flush:
                self.flush()
            op()
        self.sync()
        iters = int(iters)
        if iters <= 0:
            raise ValueError("iters must be positive")
        if self.gpu:
            ev = self.torch.cuda.Event
            starts = [ev(enable_timing=True) for _ in range(iters)]
            ends = [ev(enable_timing=True) for _ in range(iters)]
            for i in range(iters):
                if flush:
                    self.flush()
                starts[i].record()
                op()
                ends[i].record()
            self.torch.cuda.synchronize()
            return [s.elapsed_time(e) / 1000.0 for s, e in zip(starts, ends)]
        times = []
        clock = time.perf_counter
        for _ in range(iters):
            if flush:
                self.flush()
            t0 = clock()
            op()
            times.append(clock() - t0)
        return times
