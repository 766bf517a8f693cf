"""One worker per GPU, all GPUs of the node at the same time, and what they measured merged into one artifact.

CUDA / ROCm: one Python process per GPU, pinned with CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES on ROCm) and
CUDA_DEVICE_ORDER=PCI_BUS_ID, and labelled with the index nvidia-smi / amd-smi gives the GPU of the same PCI address
(backend.prepare: torch's numbering skips a GPU it cannot use, one in MIG mode, and such a GPU is named as an error
of its own, never left out of the per-GPU table). The workers start together, report "ready" once torch and the
device are initialised, and only then are all told to go, so their timed loops overlap
(a node's GPUs share power, cooling and host links, and the slowest one sets the pace of real work).
CPU backend: the worker runs in this process (one torch import instead of two); `cpu_workers: N` in the params runs
N subprocess workers instead, which is how the tests exercise the multi-process path without a GPU.

Workers stream their records (results, raw times, per-dtype outcomes, facts) as they go, so a worker that dies
half-way still leaves what it measured; its death is recorded with the tail of its stderr. Workers watch their
stdin: when the probe process goes away (killed, timed out), they exit instead of running on.

And how one operation is timed (Timer, flush_size): warm-up, a cache flush before every timed iteration, CUDA
events on the GPU, perf_counter on the CPU.
"""

import importlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

from probes.common.procs import package_root
from probes.gpu_compute.backend import DEVICE_PARAMS
from probes.gpu_compute.shapes import profile_params
from probes.params import SIZE, Param, Params
from probes.registry import PROBES

MARK = "@@cmxa-record "
CHILD_CODE = "from probes.gpu_compute.launch import child_main; child_main()"


def result(emit, metric, value, unit, **labels):
    emit({"kind": "result", "metric": metric, "value": value, "unit": unit, "labels": labels})


def raw(emit, **record):
    emit({"kind": "raw", "record": record})


def dtype_outcome(emit, dtype, status, reason=None):
    emit({"kind": "dtype", "dtype": dtype, "status": status, "reason": reason})


def fact(emit, key, value):
    emit({"kind": "fact", "key": key, "value": value})


def dtype_skipped(emit, dtype, why):
    """A dtype this GPU or torch cannot run: skipped, with a reason that names the dtype."""
    dtype_outcome(emit, dtype, "skipped", why if why.startswith(dtype) else "%s: %s" % (dtype, why))


def dtype_refused(emit, dtype, outcome):
    """The outcome of a trial that did not run (backend.trial: (status, reason)): skipped when this GPU or torch
    has no such dtype, error (this GPU, this dtype, the exception) when a GPU that has it failed."""
    status, why = outcome
    if status == "skipped":
        dtype_skipped(emit, dtype, why)
    else:
        dtype_outcome(emit, dtype, "error", why if why.startswith(dtype) else "%s: %s" % (dtype, why))


BLOCK_SCALED_ROCM = {
    d: "%s on ROCm is not implemented in this version: hipBLASLt reads the block scales unswizzled (rows padded to "
       "32), and this version builds cuBLASLt's swizzled layout, which would be measured on wrong data" % d
    for d in ("mxfp8", "nvfp4")}


def dtype_runs(emit, torch, dtype, dev):
    """Whether to measure dtype on this device; if not, its outcome is emitted: skipped (this GPU or torch has no
    such dtype), or error (a small GEMM of a dtype this GPU has fails: a CUDA or ECC error; or a block-scaled product
    that runs and is off its dequantized reference)."""
    from probes.gpu_compute.backend import (  # noqa: PLC0415 - torch-side only
        block_scaled_error,
        gemm_support,
        static_support,
    )

    # Before the trial GEMM: on ROCm a block-scaled GEMM of this version's layout is not built, and torch's ROCm
    # _scaled_mm may raise for it (NVFP4 "not supported on ROCM"), which on a GPU that has the dtype reads as an error.
    # A GPU or torch without the dtype at all is still a skip (static_support).
    if dev.backend == "rocm" and dtype in BLOCK_SCALED_ROCM and not static_support(torch, dtype, dev.backend,
                                                                                  dev.device):
        # hipBLASLt reads MX/NVFP4 scales unswizzled and wants rows in multiples of 32: not built in this version
        dtype_not_implemented(emit, dtype, BLOCK_SCALED_ROCM[dtype])
        return False
    refused = gemm_support(torch, dtype, dev.backend, dev.device)
    if refused:
        dtype_refused(emit, dtype, refused)
        return False
    wrong = block_scaled_error(torch, dtype, dev.backend, dev.device)
    if wrong:
        dtype_outcome(emit, dtype, "error", wrong)
        return False
    return True


def dtype_not_implemented(emit, dtype, why):
    """A dtype this GPU and torch can run but this probe does not measure yet: its own status, never "skipped"
    (which says the hardware or torch cannot)."""
    dtype_outcome(emit, dtype, "not_implemented", why if why.startswith(dtype) else "%s: %s" % (dtype, why))


def failure(what, exc):
    """One failed shape as an error string (the sweep goes on; the probe's own time limit is no Exception and
    never gets here)."""
    text = str(exc).strip()
    return "%s: %s: %s" % (what, type(exc).__name__, text.splitlines()[0][:200] if text else "")


class Sweep:
    """One worker's timed ops: the cache-flush buffer sized and reported once, one warm-up before the first op
    (clocks up, allocator settled), then warmup + iters timed runs per op as the spec says."""

    def __init__(self, torch, dev, spec, emit):
        flush_bytes = flush_size(torch, dev.backend, spec)
        self.timer = Timer(torch, dev.backend, dev.device, flush_bytes)
        self.spec = spec
        self.warmed = False
        fact(emit, "flush_bytes", flush_bytes)

    def measure(self, make_op, *args):
        """(impl, per-iteration seconds, keep) of the op make_op(*args) builds as (op, impl, keep). Callers that
        do not need `keep` (the op's tensors) drop it at once, so one shape's memory is freed before the next's."""
        op, impl, keep = make_op(*args)
        if not self.warmed:
            self.timer.warm(op, self.spec["warmup_s"])
            self.warmed = True
        return impl, self.timer.time(op, self.spec["warmup"], self.spec["iters"]), keep


class Device:
    """What a worker gets: the backend, its GPU label, and the torch device to allocate on."""

    def __init__(self, backend, gpu, device):
        self.backend = backend
        self.gpu = gpu
        self.device = device


def resolve(target):
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def merge_outcomes(per_gpu, devices, requested, failures, unseen=None):
    """One (status, reason) per requested dtype from what every GPU reported.

    per_gpu: {dtype: {gpu: (status, reason)}}; failures: {gpu: reason} for workers that died; unseen: {gpu: reason}
    for the node's GPUs torch does not see (no worker was started for them).
    ok on every GPU -> ok; skipped (or not implemented) on every GPU -> the same (one reason when they agree);
    anything else -> error,
    naming the GPUs: a GPU that cannot do what its siblings do, or that was not measured, is a finding."""
    merged = {}
    for dtype in requested:
        seen = per_gpu.get(dtype, {})
        rows = {}
        for gpu in devices:
            if gpu in seen:
                rows[gpu] = seen[gpu]
            elif gpu in (unseen or {}):
                rows[gpu] = ("error", "not measured: %s" % unseen[gpu])
            elif gpu in failures:
                rows[gpu] = ("error", "worker failed before measuring it: %s" % failures[gpu])
            else:
                rows[gpu] = ("error", "not measured")
        statuses = {s for s, _ in rows.values()}
        if statuses == {"ok"}:
            merged[dtype] = ("ok", None)
            continue
        if statuses in ({"skipped"}, {"not_implemented"}):
            reasons = sorted({r for _, r in rows.values()})
            merged[dtype] = (statuses.pop(), reasons[0] if len(reasons) == 1 else
                             "; ".join("gpu %s: %s" % (g, r) for g, (_, r) in sorted(rows.items())))
            continue
        bad = ["gpu %s %s: %s" % (g, s, r) for g, (s, r) in sorted(rows.items()) if s != "ok"]
        merged[dtype] = ("error", "; ".join(bad))
    return merged


def apply_outcomes(art, merged, unknown=()):
    """Per-dtype facts (dtype.<d> = ok|skipped|not_implemented|error, dtype_reason.<d>) and the artifact status:
    nothing measured (every dtype skipped or not implemented) -> skipped; any dtype in error or unknown -> error
    (results kept); else ok."""
    for dtype, (status, reason) in merged.items():
        art.facts["dtype.%s" % dtype] = status
        if reason:
            art.facts["dtype_reason.%s" % dtype] = reason
    problems = ["%s: %s" % (d, r) for d, (s, r) in merged.items() if s == "error"]
    problems += ["%s: unknown dtype" % d for d in unknown]
    if problems:
        art.error("; ".join(problems))
    elif merged and all(s in ("skipped", "not_implemented") for s, _ in merged.values()):
        art.skip("; ".join("%s: %s" % (d, r) for d, (_, r) in merged.items()))


class Collector:
    """Turns worker records into artifact results, raw lines, dtype outcomes and facts."""

    def __init__(self, art, out_dir, raw_name):
        self.art = art
        self.raw_path = os.path.join(out_dir, raw_name)
        self.raw_name = raw_name
        self._raw = None
        self.per_gpu = {}
        self.failures = {}
        self.unseen = {}  # the node's GPUs torch does not see: {gpu: why}
        self.facts = {}
        self.labels = []
        self.ready = set()
        self.done = set()
        self.lock = threading.Lock()

    def handle(self, gpu, rec):
        kind = rec.get("kind")
        with self.lock:
            if kind == "result":
                labels = dict(rec.get("labels") or {})
                labels.setdefault("gpu", gpu)
                self.art.add(rec["metric"], rec["value"], rec["unit"], **labels)
            elif kind == "raw":
                if self._raw is None:
                    self._raw = open(self.raw_path, "w")
                    self.art.raw.append(self.raw_name)
                line = dict(rec.get("record") or {})
                line.setdefault("gpu", gpu)
                self._raw.write(json.dumps(line, sort_keys=True) + "\n")
            elif kind == "dtype":
                self.per_gpu.setdefault(rec["dtype"], {})[gpu] = (rec["status"], rec.get("reason"))
            elif kind == "fact":
                self.facts.setdefault(rec["key"], set()).add(str(rec["value"]))
            elif kind == "ready":
                self.ready.add(gpu)
            elif kind == "done":
                self.done.add(gpu)
            elif kind == "failed":
                self.failures[gpu] = rec.get("reason") or "failed"

    def close(self):
        if self._raw is not None:
            self._raw.close()
            self._raw = None
        for key, values in self.facts.items():
            self.art.facts[key] = ", ".join(sorted(values))


def emitter(collector, gpu):
    return lambda rec: collector.handle(gpu, rec)


def run_workers(art, out_dir, ctx, target, spec, raw_name):
    """Run `target` (\"module:function\", called as fn(torch, device, spec, emit)) on every device of ctx.
    Returns the Collector (its per_gpu outcomes and failures feed merge_outcomes)."""
    collector = Collector(art, out_dir, raw_name)
    cpu_workers = int(spec.get("cpu_workers") or 0)
    try:
        if ctx.backend == "cpu" and cpu_workers <= 1:
            fn = resolve(target)
            collector.labels = [0]
            dev = Device("cpu", 0, ctx.torch.device("cpu"))
            emit = emitter(collector, 0)
            try:
                with ctx.torch.no_grad():
                    fn(ctx.torch, dev, spec, emit)
            except Exception as exc:  # noqa: BLE001 - kept as the worker's failure; results so far stay
                collector.failures[0] = "%s: %s" % (type(exc).__name__, exc)
        else:
            if ctx.backend == "cpu":
                ids, labels = ["cpu"] * cpu_workers, list(range(cpu_workers))
            else:
                ids, labels = ctx.visible_ids, ctx.devices
            collector.labels = list(labels)
            _run_subprocesses(collector, out_dir, ctx, target, spec, ids, labels)
    finally:
        collector.close()
        # the node's GPUs torch does not see: no worker, but a row of the per-GPU table as an error
        collector.unseen = dict(ctx.unseen)
        collector.labels = sorted(set(collector.labels) | set(collector.unseen))
        # every GPU a worker was started for: one that left no result is still named in the per-GPU table
        art.facts["gpus"] = ",".join(str(g) for g in collector.labels)
    return collector


def _reader(stream, gpu, q):
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        if line.startswith(MARK):
            try:
                q.put((gpu, json.loads(line[len(MARK):])))
            except ValueError:
                pass
    q.put((gpu, None))


def _tail(path, limit=800):
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            text = fh.read().decode("utf-8", "replace").strip()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _run_subprocesses(collector, out_dir, ctx, target, spec, ids, labels):
    env = dict(os.environ)
    root = package_root()
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    procs = {}
    q = queue.Queue()
    stderr_paths = {}
    try:
        for dev_id, gpu in zip(ids, labels):
            wenv = dict(env)
            if ctx.visible_env:
                wenv[ctx.visible_env] = dev_id
                wenv["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            stderr_paths[gpu] = os.path.join(out_dir, ".%s.gpu%s.stderr" % (collector.raw_name, gpu))
            with open(stderr_paths[gpu], "wb") as err:
                proc = subprocess.Popen([sys.executable, "-c", CHILD_CODE], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=err, env=wenv, cwd=out_dir,
                                        start_new_session=True)
            procs[gpu] = proc
            config = {"target": target, "spec": spec, "gpu": gpu, "backend": ctx.backend,
                      "cpu_threads": ctx.cpu_threads or 1}
            proc.stdin.write((json.dumps(config) + "\n").encode())
            proc.stdin.flush()
            threading.Thread(target=_reader, args=(proc.stdout, gpu, q), daemon=True).start()
        open_streams = set(procs)
        went = False
        while open_streams:
            try:
                gpu, rec = q.get(timeout=0.5)
            except queue.Empty:
                gpu, rec = None, None
            if gpu is not None:
                if rec is None:
                    open_streams.discard(gpu)
                else:
                    collector.handle(gpu, rec)
            if not went and all(g in collector.ready or g not in open_streams for g in procs):
                # every worker is initialised (or already gone): start the measurements together
                for g, proc in procs.items():
                    if g in open_streams:
                        try:
                            proc.stdin.write(b"go\n")
                            proc.stdin.flush()
                        except OSError:
                            pass
                went = True
        for gpu, proc in procs.items():
            rc = proc.wait()
            if gpu not in collector.done and gpu not in collector.failures:
                collector.failures[gpu] = "worker exited with rc %s: %s" % (rc, _tail(stderr_paths[gpu]) or
                                                                            "no message")
            elif gpu in collector.failures and rc != 0:
                collector.failures[gpu] += " (rc %s)" % rc
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    pass
                proc.wait()
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
        for path in stderr_paths.values():
            try:
                os.unlink(path)
            except OSError:
                pass


def _watch_parent(stream):
    """Exit when the probe process closes our stdin or goes away: never measure on for nobody."""
    while stream.readline():
        pass
    os._exit(4)


def child_main():
    """Entry point of a worker process (python -c CHILD_CODE): config on stdin, records on stdout."""
    config = json.loads(sys.stdin.readline())
    records = sys.stdout
    sys.stdout = sys.stderr  # stray prints of libraries must not mix with the records

    def emit(rec):
        records.write(MARK + json.dumps(rec) + "\n")
        records.flush()

    gpu = config["gpu"]
    try:
        import torch  # noqa: PLC0415

        if config["backend"] == "cpu":
            torch.set_num_threads(int(config.get("cpu_threads") or 1))
            device = torch.device("cpu")
        else:
            torch.cuda.set_device(0)  # the one GPU this process sees
            device = torch.device("cuda", 0)
            torch.empty(1, device=device)  # create the context now, before "ready"
        fn = resolve(config["target"])
    except Exception as exc:  # noqa: BLE001
        emit({"kind": "failed", "reason": "worker setup: %s: %s" % (type(exc).__name__, exc)})
        records.flush()
        sys.exit(1)
    emit({"kind": "ready"})
    if sys.stdin.readline().strip() != "go":
        sys.exit(3)
    threading.Thread(target=_watch_parent, args=(sys.stdin,), daemon=True).start()
    try:
        with torch.no_grad():
            fn(torch, Device(config["backend"], gpu, device), config["spec"], emit)
    except Exception as exc:  # noqa: BLE001
        emit({"kind": "failed", "reason": "%s: %s" % (type(exc).__name__, str(exc).strip().splitlines()[0]
                                                          if str(exc).strip() else "")})
        sys.exit(1)
    emit({"kind": "done"})


def compute_params(table, **extra):
    """The params of a per-GPU compute probe measuring by the profile table `table` (plus the probe's own, extra)."""
    declared = dict(
        DEVICE_PARAMS,
        **extra,
        dtypes=Param(list, None, "dtypes to measure (default: the probe's)"),
        flush_bytes=Param(SIZE, None, "bytes written between timed iterations (default: twice the L2 or LLC)"),
        cpu_workers=Param(int, 0, "CPU backend: measure in this many subprocesses instead of in-process"))
    declared.update(profile_params(table))  # a profile entry named dtypes says the default is the profile's
    return Params(**declared)


def run_compute_probe(art, params, out_dir, name, table, default_dtypes, build_spec):
    """The parent side every per-GPU compute probe shares: backend, effective configuration, workers, outcomes.

    build_spec(config, dtypes) -> the spec handed to the probe's worker (`probes.<name>:worker`)."""
    from probes.gpu_compute import backend as compute_backend
    from probes.gpu_compute import shapes as compute_shapes  # noqa: PLC0415 - keeps this module torch-free

    ctx = compute_backend.prepare(art, params)
    if ctx is None:
        return None
    config = compute_shapes.resolve(table, params, ctx.backend)
    dtypes, unknown = compute_backend.requested_dtypes(params, config.get("dtypes") or default_dtypes)
    spec = build_spec(config, dtypes)
    spec.update(dtypes=dtypes, warmup=int(config["warmup"]), iters=int(config["iters"]),
                warmup_s=float(config.get("warmup_s") or 0), flush_bytes=params["flush_bytes"],
                cpu_workers=params["cpu_workers"])
    art.facts.update({"profile": config["profile"], "size_class": compute_shapes.size_class(ctx.backend),
                      "warmup_iters": spec["warmup"], "timed_iters": spec["iters"], "warmup_s": spec["warmup_s"],
                      "dtypes": ",".join(dtypes), "timing": "cuda_events" if ctx.backend != "cpu" else "perf_counter",
                      "processes": "one per GPU" if ctx.backend != "cpu" else
                      ("%d subprocesses" % spec["cpu_workers"] if spec["cpu_workers"] > 1 else "in-process")})
    collector = run_workers(art, out_dir, ctx, "%s:worker" % PROBES[name], spec, "%s.times.jsonl" % name)
    merged = merge_outcomes(collector.per_gpu, collector.labels, dtypes, collector.failures, collector.unseen)
    apply_outcomes(art, merged, unknown)
    if collector.failures and art.status != "error":
        art.error("; ".join("gpu %s: %s" % (g, r) for g, r in sorted(collector.failures.items())))
    unseen_errors(art, ctx)
    return collector


def unseen_errors(art, ctx):
    """The artifact is an error when the node has GPUs torch does not see: a GPU missing from the measurement is a
    finding, never a silently shorter table. Its reason leads with them."""
    missing = ["gpu %s: %s" % (g, why) for g, why in sorted(ctx.unseen.items())]
    if ctx.unseen_error:
        missing.append(ctx.unseen_error)
    if not missing or (art.status == "error" and all(why in (art.reason or "") for why in ctx.unseen.values())
                        and not ctx.unseen_error):
        return  # none, or already named (per dtype) in the reason
    art.error("; ".join(missing + ([art.reason] if art.status == "error" and art.reason else [])))


# --- Timing one operation ---
# Timing of one operation the way mamf-finder does it: warm-up, a cache flush before every timed iteration, only
# the operation inside the timed interval, per-iteration times kept.
#
# CUDA / ROCm: a CUDA event pair around each iteration, all iterations queued and synchronised once at the end
# (a synchronisation per iteration would fold launch latency and clock ramp-up into the time). The flush is a write of
# a buffer larger than L2 (at least 256 MiB, mamf-finder's size, or twice the L2 torch reports).
# CPU: time.perf_counter around each call (CPU ops are synchronous); the flush writes twice the last-level cache.

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
