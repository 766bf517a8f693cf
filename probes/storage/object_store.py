"""object_store: an S3 bucket's large-object throughput (single PUT and multipart upload), small-object rates, GET
latency and time to first byte, LIST and DELETE; fio's own S3 engine where fio has it (probes/storage/fio_s3.py);
then, where asked, an endurance run of mixed PUT/GET/LIST/DELETE.

Seed: "large object throughput on sequential read/write, small object PUT and GET rates, and read latency
(p50, p90, p99)", and for Phase 3 "a 15 minute test of mixed PUT/GET/LIST/DELETE" watching "throughput
degradation, p99 TTFB drift, throttling responses (503 SlowDown), and error rates". Runs only when an endpoint and
credentials are given; otherwise skipped with that reason.

Credentials never travel in params (params are copied into the artifact): the role writes them to a file of mode
0600 in the run's working directory (a no_log task) and passes its path; this probe reads the file and deletes it
at once. Every object lives under ``clustermax-assess/<run>/<host>/`` and is deleted at the end, also after a
failure, multipart uploads in progress aborted. GB/s = 1e9 bytes/s; latencies in ms. Large objects' content is
random bytes that repeat every `chunk_mib`; each is written once by a single PUT and once by a multipart upload of
`part_mib` parts (as aws s3 cp and boto3 upload large files), and each way's GET reads it back whole.

The endurance run records per window (`endurance_windows` equal slices of `endurance_s`): completed operations per
second, the GET time to first byte (p50, p99), errors and throttling responses. The controller compares the last
window with the first (degradation, TTFB drift); the node judges nothing.
"""

import json
import os
import random
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from probes.params import Param, Params
from probes.storage import fio_s3
from probes.storage import s3 as storage_s3

PARAMS = Params(
    endpoint=Param(str, "", "the S3 endpoint URL (empty: skipped)"),
    bucket=Param(str, "", "the bucket (empty: skipped)"),
    credentials_file=Param(str, "", "JSON file {access_key, secret_key}, deleted once read (missing: skipped)"),
    region=Param(str, "us-east-1", "region of the request signatures"),
    verify_tls=Param(bool, True, "verify the endpoint's TLS certificate"),
    large_mib=Param(int, 16, "MiB per large object"),
    large_count=Param(int, 4, "large objects written and read"),
    small_kib=Param(int, 4, "KiB per small object"),
    small_count=Param(int, 200, "small objects written, read, listed and deleted"),
    threads=Param(int, 4, "requests in flight at once"),
    chunk_mib=Param(int, 8, "large objects' content repeats every this many MiB"),
    part_mib=Param(int, 8, "multipart upload part size in MiB (S3's least is 5, except the last part; 0: no multipart "
                           "upload)"),
    endurance_s=Param(float, 0, "seconds of mixed PUT/GET/LIST/DELETE after the benchmark (0: none)"),
    endurance_windows=Param(int, 5, "equal time windows the endurance run is recorded in"),
    endurance_warmup_s=Param(float, 0, "seconds of the same load before the first window (connections, caches): "
                                       "not measured"),
    endurance_live=Param(int, 50, "objects each endurance worker keeps: beyond it, each PUT is followed by a DELETE "
                                  "of the worker's oldest"),
    timeout_s=Param(float, 60, "seconds per request"),
    fio_mib=Param(int, 16, "MiB fio writes and reads back through its S3 engine, where it has one (0: not run)"),
    fio_object_kib=Param(int, 4096, "KiB per object of the fio run"),
)


def percentile(values, pct):
    """Nearest-rank percentile (pct in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, int(round(pct / 100.0 * len(ordered) + 0.5 - 1e-9)))
    return ordered[min(rank, len(ordered)) - 1]


class Bench:
    def __init__(self, p, creds):
        self.p = p
        self._local = threading.local()
        self._creds = creds
        self.clients = []
        self._lock = threading.Lock()
        self.errors = {}
        self.throttled = 0
        # keys whose PUT (or multipart upload) succeeded: the objects the store holds, read back and listed; and keys
        # whose PUT was sent without an answer that it succeeded (refused, timed out, cut off): one that timed out
        # may have landed, so the cleanup deletes these too, and nothing judges the store by them either way
        self.created = set()
        self.maybe = set()

    def client(self):
        c = getattr(self._local, "client", None)
        if c is None:
            c = storage_s3.Client(self.p["endpoint"], self._creds["access_key"], self._creds["secret_key"],
                                  self.p["region"], timeout=self.p["timeout_s"], verify_tls=self.p["verify_tls"])
            self._local.client = c
            with self._lock:
                self.clients.append(c)
        return c

    def close(self):
        for c in self.clients:
            c.close()

    def put(self, key, fn):
        """fn() writes key (a PUT, a multipart upload); the key is the store's once fn returns."""
        self.maybe.add(key)
        result = fn()
        self.created.add(key)
        self.maybe.discard(key)
        return result

    def written(self, keys):
        """The keys, in order, whose write succeeded."""
        return [k for k in keys if k in self.created]

    def _fail(self, op, exc):
        with self._lock:
            self.errors.setdefault(op, []).append(str(exc)[:200])
            if isinstance(exc, storage_s3.S3Error) and (exc.status in (429, 503) or exc.code == "SlowDown"):
                self.throttled += 1

    def each(self, op, keys, fn):
        """fn(client, key) on every key with `threads` workers; returns (wall seconds, [per-call result])."""
        out = []

        def call(key):
            try:
                res = fn(self.client(), key)
                with self._lock:
                    out.append(res)
            except (storage_s3.S3Error, OSError, ValueError) as exc:
                self._fail(op, exc)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(max_workers=self.p["threads"]) as pool:
            list(pool.map(call, keys))
        return time.perf_counter() - t0, out


def read_credentials(path):
    with open(path) as fh:
        creds = json.load(fh)
    try:
        os.unlink(path)
    except OSError:
        pass
    if not creds.get("access_key") or not creds.get("secret_key"):
        raise ValueError("the credentials file has no access_key/secret_key")
    return creds


def run(art, p, out_dir):
    if not p["endpoint"] or not p["bucket"]:
        art.skip("no object store configured (set storage_object_store_endpoint, _bucket and credentials)")
        return
    path = p["credentials_file"]
    if not path or not os.path.exists(path):
        art.skip("no credentials for %s (set storage_object_store_access_key and _secret_key)" % p["endpoint"])
        return
    creds = read_credentials(path)  # first: the file goes whatever follows
    if 0 < p["part_mib"] < 5 or (p["part_mib"] and -(-p["large_mib"] // p["part_mib"]) > 10000):
        # S3's limits: parts of at least 5 MiB (the last excepted), at most 10000 of them
        raise ValueError("part_mib %d with large_mib %d: S3 needs parts of at least 5 MiB and at most 10000 parts "
                         "(0: no multipart upload)" % (p["part_mib"], p["large_mib"]))
    prefix = "clustermax-assess/%s/%s/" % (art.run_id, art.host)
    art.facts.update({"endpoint": p["endpoint"], "bucket": p["bucket"], "prefix": prefix, "threads": p["threads"],
                      "multipart": None})
    bench = Bench(p, creds)
    try:
        bench.client().head_bucket(p["bucket"])
        _large(art, bench, p, prefix)
        _small(art, bench, p, prefix)
        if p["fio_mib"] > 0:
            why = fio_s3.run_suite(art, p["endpoint"], p["bucket"], prefix, creds, p["region"], p["fio_mib"],
                                   p["fio_object_kib"], timeout=max(300.0, p["timeout_s"] * 5))
            if why:
                bench.errors.setdefault("fio", []).append(why)
        if p["endurance_s"] > 0:
            _endurance(art, bench, p, prefix)
    finally:
        _cleanup(art, bench, p, prefix)
        bench.close()
    for op, errs in bench.errors.items():
        art.add("obj_errors", len(errs), "count", op=op)
    if bench.throttled:
        art.add("obj_throttled", bench.throttled, "count")
    if bench.errors:
        art.facts["errors"] = {op: errs[:3] for op, errs in bench.errors.items()}
        art.error("; ".join("%s: %d failed (%s)" % (op, len(e), e[0]) for op, e in bench.errors.items())[:500])


def _large(art, bench, p, prefix):
    """Large objects written by single PUTs, then by multipart uploads (part_mib > 0), each way read back whole."""
    size = p["large_mib"] * 2**20
    chunk = os.urandom(min(size, p["chunk_mib"] * 2**20))
    part = p["part_mib"] * 2**20

    def body(offset, length):
        """Bytes [offset, offset + length) of an object whose content repeats chunk."""
        end = offset + length
        while offset < end:
            at = offset % len(chunk)
            piece = chunk[at:at + min(end - offset, len(chunk) - at)]
            offset += len(piece)
            yield piece

    def put(client, key):
        bench.put(key, lambda: client.put(p["bucket"], key, body(0, size), length=size))

    def put_multipart(client, key):
        bench.put(key, lambda: _multipart(client, key))

    def _multipart(client, key):
        upload_id = client.create_multipart(p["bucket"], key)
        try:
            etags = [client.upload_part(p["bucket"], key, upload_id, n, body(offset, min(part, size - offset)),
                                        length=min(part, size - offset))
                     for n, offset in enumerate(range(0, size, part), 1)]
            client.complete_multipart(p["bucket"], key, upload_id, etags)
        except BaseException:
            _abort(client, p, key, upload_id)
            raise

    def get(client, key):
        got = [0]
        client.get(p["bucket"], key, sink=lambda b: got.__setitem__(0, got[0] + len(b)))
        if got[0] != size:
            raise ValueError("GET %s returned %d bytes, expected %d" % (key, got[0], size))
        return got[0]

    ways = [("single", put, "PUT large")]
    if part:
        ways.append(("multipart", put_multipart, "PUT multipart"))
        art.facts["multipart"] = {"part_bytes": part, "parts": -(-size // part)}
    else:
        art.facts["upload.multipart"], art.facts["upload_reason.multipart"] = "skipped", "part_mib 0: not asked"
    for upload, write, op in ways:
        keys = ["%slarge-%s/%d" % (prefix, upload, i) for i in range(p["large_count"])]
        labels = {"object_bytes": size, "threads": p["threads"], "upload": upload}
        wall, _ = bench.each(op, keys, write)
        done = bench.written(keys)
        # each way's outcome, as the compute probes record their parts' (upload.<way> ok | error, upload_reason.<way>):
        # a way that failed for every object has no result, and the controller's row for it says why
        art.facts["upload.%s" % upload] = "ok" if len(done) == len(keys) else "error"
        if len(done) < len(keys):
            art.facts["upload_reason.%s" % upload] = "%d of %d failed: %s" % (
                len(keys) - len(done), len(keys), (bench.errors.get(op) or ["no answer"])[0])
        if done:
            art.add("obj_put_gbps", round(len(done) * size / wall / 1e9, 4), "GB/s", **labels)
        # only what was uploaded is read back: an object whose upload failed was never there to GET
        wall, sizes = bench.each("GET large", done, get)
        if sizes:
            art.add("obj_get_gbps", round(sum(sizes) / wall / 1e9, 4), "GB/s", **labels)


def _abort(client, p, key, upload_id):
    """Aborts an unfinished multipart upload, so that its parts do not stay stored (and billed) unseen; an abort
    that fails is left for _cleanup's listing of the uploads in progress."""
    try:
        client.abort_multipart(p["bucket"], key, upload_id)
    except (storage_s3.S3Error, OSError):
        pass


def _small(art, bench, p, prefix):
    size = p["small_kib"] * 1024
    data = os.urandom(size)
    keys = ["%ssmall/%06d" % (prefix, i) for i in range(p["small_count"])]
    labels = {"object_bytes": size, "threads": p["threads"]}

    def put(client, key):
        t0 = time.perf_counter()
        bench.put(key, lambda: client.put(p["bucket"], key, data))
        return time.perf_counter() - t0

    wall, lat = bench.each("PUT small", keys, put)
    if lat:
        art.add("obj_put_per_s", round(len(lat) / wall, 2), "ops/s", **labels)
        art.add("obj_put_latency_ms", round(statistics.median(lat) * 1000, 3), "ms", pct="p50", **labels)

    def get(client, key):
        t0 = time.perf_counter()
        _, _, body, ttfb = client.get(p["bucket"], key)
        if len(body) != size:
            raise ValueError("GET %s returned %d bytes, expected %d" % (key, len(body), size))
        return time.perf_counter() - t0, ttfb

    written = bench.written(keys)  # a key whose PUT failed was never written: its GET is no error of the store's
    wall, lat = bench.each("GET small", written, get)
    if lat:
        art.add("obj_get_per_s", round(len(lat) / wall, 2), "ops/s", **labels)
        for pct in (50, 90, 99):
            art.add("obj_get_latency_ms", round(percentile([t for t, _ in lat], pct) * 1000, 3), "ms",
                    pct="p%d" % pct, **labels)
            art.add("obj_get_ttfb_ms", round(percentile([f for _, f in lat], pct) * 1000, 3), "ms",
                    pct="p%d" % pct, **labels)

    if not written:
        return  # nothing was written to list (the PUTs' errors say why): no LIST consistency measured
    client = bench.client()
    t0 = time.perf_counter()
    try:
        listed, pages = client.list(p["bucket"], prefix + "small/")
    except (storage_s3.S3Error, OSError, ValueError) as exc:
        bench._fail("LIST", exc)
        return
    wall = time.perf_counter() - t0
    # the objects whose PUT succeeded; a refused PUT stored nothing, and one that timed out may or may not have
    # landed (bench.maybe): neither is expected, and neither one listed counts against the store
    expected = set(written)
    art.add("obj_list_per_s", round(len(listed) / wall, 1) if wall else 0.0, "objects/s", pages=pages)
    art.add("obj_list_missing", len(expected - set(listed)), "count")

    def delete(client, key):
        client.delete(p["bucket"], key)
        bench.created.discard(key)

    wall, _ = bench.each("DELETE", sorted(expected), delete)
    done = len(expected) - len(bench.errors.get("DELETE", []))
    if done:
        art.add("obj_delete_per_s", round(done / wall, 2), "ops/s")


def _endurance(art, bench, p, prefix):
    """`threads` workers, each in a loop for endurance_warmup_s + endurance_s: PUT a new small object, GET one of its
    own at random (time to first byte), LIST its own objects every 10th round, DELETE its oldest beyond
    endurance_live. Every call is recorded by its completion time into one of the equal windows of endurance_s (the
    warm-up's calls and those that end after the run are counted apart, in no window). A failed or throttled call
    is a measurement here (counted per window), never a failure of the probe; after a throttling answer (503
    SlowDown, 429) the worker waits 0.1 s, as SDK clients back off. What was recorded is kept whatever happens."""
    duration, windows = float(p["endurance_s"]), max(1, p["endurance_windows"])
    warmup = max(0.0, float(p["endurance_warmup_s"]))
    size = p["small_kib"] * 1024
    data = os.urandom(size)
    calls = []  # (seconds from the measured start at completion, op, outcome, ttfb)
    errors = []
    lock = threading.Lock()
    rng = random.Random(art.host)
    begin = time.perf_counter() + warmup
    stop = begin + duration

    def call(op, fn, *args):
        try:
            result, outcome = fn(*args), "ok"
        except storage_s3.S3Error as exc:
            throttled = exc.status in (429, 503) or exc.code == "SlowDown"
            result, outcome = None, "throttled" if throttled else "error"
            if not throttled:
                errors.append("%s: %s" % (op, str(exc)[:160]))
        except Exception as exc:  # noqa: BLE001 - any failure of a request (a cut response, a proxy's HTML) is data
            result, outcome = None, "error"
            errors.append("%s: %s: %s" % (op, type(exc).__name__, str(exc)[:160]))
        with lock:
            calls.append((time.perf_counter() - begin, op, outcome, result if op == "GET" else None))
        if outcome == "throttled":
            time.sleep(0.1)
        return outcome == "ok"

    def get(client, key):
        _, _, got, ttfb = client.get(p["bucket"], key)
        if len(got) != size:
            raise ValueError("GET %s returned %d bytes, expected %d" % (key, len(got), size))
        return ttfb

    def worker(w):
        client = bench.client()
        own = "%sendurance/%d/" % (prefix, w)
        live = []
        n = 0
        while time.perf_counter() < stop:
            key = "%s%08d" % (own, n)
            n += 1
            bench.maybe.add(key)
            if call("PUT", client.put, p["bucket"], key, data):
                bench.created.add(key)
                bench.maybe.discard(key)
                live.append(key)
            if live:
                call("GET", get, client, live[rng.randrange(len(live))])
            if n % 10 == 0:
                call("LIST", client.list, p["bucket"], own)
            if len(live) > p["endurance_live"]:
                old = live.pop(0)
                if call("DELETE", client.delete, p["bucket"], old):
                    bench.created.discard(old)

    try:
        with ThreadPoolExecutor(max_workers=p["threads"]) as pool:
            list(pool.map(worker, range(p["threads"])))
    finally:
        with lock:
            done = list(calls)
        _record_windows(art, done, duration, windows, warmup, p["threads"], size)
        if errors:
            art.facts["endurance_errors"] = errors[:5]


def _record_windows(art, calls, duration, windows, warmup, workers, size):
    """Each window's completed requests per second (over the window's own length), calls per operation, GET time to
    first byte p50/p99, failed and throttled requests."""
    width = duration / windows
    art.facts["endurance"] = {"seconds": duration, "windows": windows, "warmup_s": warmup, "workers": workers,
                              "object_bytes": size, "calls": len(calls),
                              "warmup_calls": sum(c[0] < 0 for c in calls),
                              "late_calls": sum(c[0] >= duration for c in calls)}
    for i in range(windows):
        lo, hi = i * width, (i + 1) * width
        mine = [c for c in calls if lo <= c[0] < hi]
        labels = {"window": i, "start_s": round(lo, 3)}
        art.add("obj_endurance_ops_per_s", round(sum(c[2] == "ok" for c in mine) / width, 2), "ops/s", **labels)
        for op in ("PUT", "GET", "LIST", "DELETE"):
            art.add("obj_endurance_calls", sum(c[1] == op for c in mine), "count", op=op, **labels)
        art.add("obj_endurance_errors", sum(c[2] == "error" for c in mine), "count", **labels)
        art.add("obj_endurance_throttled", sum(c[2] == "throttled" for c in mine), "count", **labels)
        ttfbs = [c[3] for c in mine if c[1] == "GET" and c[2] == "ok"]
        for pct in (50, 99):
            if ttfbs:
                art.add("obj_endurance_ttfb_ms", round(percentile(ttfbs, pct) * 1000, 3), "ms", pct="p%d" % pct,
                        **labels)


def _cleanup(art, bench, p, prefix):
    """Delete whatever this run left under its prefix (also after a failure), abort its multipart uploads still in
    progress (also an earlier attempt's, whatever part_mib is now); count what would not go."""
    try:
        client = bench.client()
        try:
            uploads = client.multipart_uploads(p["bucket"], prefix)
        except (storage_s3.S3Error, OSError, ValueError) as exc:
            uploads = []
            art.facts["multipart_list_error"] = str(exc)[:200]
        aborted = 0
        for key, upload_id in uploads:
            try:
                client.abort_multipart(p["bucket"], key, upload_id)
                aborted += 1
            except (storage_s3.S3Error, OSError) as exc:
                bench._fail("cleanup", exc)
        art.add("obj_multipart_aborted", aborted, "count")
        left, _ = client.list(p["bucket"], prefix)
        for key in set(left) | bench.created | bench.maybe:  # also what a PUT without an answer may have stored
            try:
                client.delete(p["bucket"], key)
            except (storage_s3.S3Error, OSError) as exc:
                bench._fail("cleanup", exc)
        left, _ = client.list(p["bucket"], prefix)
        art.add("obj_left_behind", len(left), "count")
    except (storage_s3.S3Error, OSError, ValueError) as exc:
        art.facts["cleanup_error"] = str(exc)[:200]
