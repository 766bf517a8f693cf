"""net_speed: download and upload throughput between this node and the internet (seed, "Lifecycle": internet
speed, download and upload, mostly against Cloudflare).

Every URL is first checked for reachability (a TCP connection within `reach_timeout_s`, name lookup included);
unreachable ones are listed with the reason and not timed. Downloads are HTTP GETs read to the end (or to
`max_bytes`), uploads HTTP POSTs of `upload_bytes` random bytes, each `repeat` times with a timeout; the bytes
go to memory, never to disk. Results: download_mbps / upload_mbps (megabits per second, 1e6 bit/s) per URL and
try, with the bytes moved and the seconds the body took, from its first byte; name lookup, TCP and TLS setup and
the server's time to first byte are download_setup_s / upload_setup_s, not part of the rate.

A transfer that reaches `timeout_s` is still a measurement: its rate (the bytes moved until then over the seconds)
is recorded with the labels bound=at_most and note="timed out after T s with N of M bytes", and the grader judges
the bound. A transfer that failed otherwise (or moved nothing at all) is in facts.failures and facts.unmeasured
(the metrics it would have given, its labels, why), so the grader still gives it a row. Skipped with the reason
when no URL is reachable.
"""

import os
import time
import urllib.error
import urllib.request

from probes.lifecycle import common as lifecycle
from probes.params import Param, Params

PARAMS = Params(
    download_urls=Param(list, ["https://speed.cloudflare.com/__down?bytes=100000000"], "URLs to download (HTTP GET)"),
    upload_urls=Param(list, ["https://speed.cloudflare.com/__up"], "URLs to upload to (HTTP POST)"),
    upload_bytes=Param(int, 25000000, "random bytes per upload"),
    max_bytes=Param(int, 1000000000, "a download is read to its end or this many bytes"),
    repeat=Param(int, 1, "transfers per URL"),
    timeout_s=Param(float, 120, "seconds per transfer"),
    reach_timeout_s=Param(float, 3, "seconds for the TCP connection that checks a URL is reachable"),
)
CHUNK = 1 << 20


def download(url, timeout, max_bytes):
    """One GET read to its end (or max_bytes): {bytes, seconds, setup_s, expected_bytes, timed_out}.

    seconds run from the response's first byte (urlopen returns once the status line and headers are in): name
    lookup, TCP and TLS setup and the server's time to first byte are setup_s, apart. Counted in the transfer they
    made 100 MB at 10 Gbit/s read about 3.5 Gbit/s. A transfer that reaches the timeout (counted from the request)
    stops there and still returns what it moved: its rate up to then is what the link gave, and at 1e9 B in 120 s
    any link under 66.7 Mbit/s never finishes at all, so dropping it would lose exactly the slow links."""
    req = urllib.request.Request(url, headers={"User-Agent": "clustermax-assess/net_speed"})
    t0 = time.perf_counter()
    deadline = t0 + timeout
    total, timed_out = 0, False
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URLs are the operator's
        t_body = time.perf_counter()
        length = resp.headers.get("Content-Length")
        expected = min(int(length), max_bytes) if length and length.isdigit() else None
        while total < max_bytes:
            try:
                # read1: what has arrived, at most CHUNK; read(CHUNK) would wait for a whole MiB and a timeout
                # inside it would lose the bytes it had
                chunk = resp.read1(min(CHUNK, max_bytes - total))
            except TimeoutError:  # the socket stalled for `timeout`: the transfer is over, what came is measured
                timed_out = True
                break
            if not chunk:
                break
            total += len(chunk)
            if time.perf_counter() > deadline:
                timed_out = True
                break
    end = time.perf_counter()
    return {"bytes": total, "seconds": end - t_body, "setup_s": t_body - t0, "expected_bytes": expected,
            "timed_out": timed_out}


class _Deadline(Exception):
    """The upload's body ran past the timeout (not an OSError: urllib would wrap that in a URLError)."""


def upload(url, timeout, size):
    """One POST of size random bytes, response read: {bytes, seconds, setup_s, expected_bytes, timed_out}.

    The body goes out in CHUNK pieces from a generator that http.client only starts once it is connected (TLS
    included) and has sent the headers: seconds run from there, setup_s is what came before. At the timeout the
    upload stops and returns the bytes handed to the socket (at most a socket buffer more than the server got: the
    rate is an upper bound)."""
    body = os.urandom(size)
    state = {"sent": 0, "t_body": None}
    t0 = time.perf_counter()
    deadline = t0 + timeout

    def chunks():
        state["t_body"] = time.perf_counter()
        view = memoryview(body)
        for i in range(0, size, CHUNK):
            if time.perf_counter() > deadline:
                raise _Deadline()
            piece = view[i:i + CHUNK]
            state["sent"] += len(piece)
            yield piece

    req = urllib.request.Request(url, data=chunks(), method="POST",
                                 headers={"User-Agent": "clustermax-assess/net_speed",
                                          "Content-Type": "application/octet-stream", "Content-Length": str(size)})
    timed_out = False
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
            resp.read()
    except (_Deadline, TimeoutError, urllib.error.URLError) as exc:
        stalled = isinstance(exc, (_Deadline, TimeoutError)) or isinstance(getattr(exc, "reason", None), TimeoutError)
        if not stalled or state["t_body"] is None:
            raise  # refused, or no connection within the timeout: nothing was measured
        timed_out = True
    end = time.perf_counter()
    t_body = state["t_body"] if state["t_body"] is not None else t0
    return {"bytes": state["sent"] if timed_out else size, "seconds": end - t_body, "setup_s": t_body - t0,
            "expected_bytes": size, "timed_out": timed_out}


def _bound_note(res, timeout):
    """Why a rate is only an upper bound, for the grader's row: "timed out after 120 s with N of M bytes"."""
    of = " of %d" % res["expected_bytes"] if res["expected_bytes"] else ""
    return "timed out after %g s with %d%s bytes" % (timeout, res["bytes"], of)


def run(art, p, out_dir):
    timeout, reach = p["timeout_s"], p["reach_timeout_s"]
    unreachable, failures, unmeasured = {}, {}, []
    jobs = [("download", u) for u in p["download_urls"]] + [("upload", u) for u in p["upload_urls"]]
    if not jobs:
        art.skip("no download or upload URL configured (lifecycle_net_download_urls, lifecycle_net_upload_urls)")
        return
    checked = {}
    for direction, url in jobs:
        if url not in checked:
            checked[url] = lifecycle.reachable(url, reach)
        ok, why = checked[url]
        if not ok:
            unreachable[url] = why
            continue
        for attempt in range(max(1, p["repeat"])):
            labels = {"url": url, "try": attempt}
            metrics = ["%s_%s" % (direction, m) for m in ("mbps", "bytes", "s", "setup_s")]
            try:
                if direction == "download":
                    res = download(url, timeout, p["max_bytes"])
                else:
                    res = upload(url, timeout, p["upload_bytes"])
            except Exception as exc:  # noqa: BLE001 - a failed transfer is data
                why = "%s: %s" % (type(exc).__name__, exc)
                failures["%s %s" % (direction, url)] = why
                unmeasured.append({"metrics": metrics, "labels": labels, "why": why})
                break
            nbytes, secs = res["bytes"], res["seconds"]
            if res["timed_out"] and not nbytes:
                # headers and then nothing: a stalled server, not a rate of the link
                why = "no %s byte moved within %g s" % ("body" if direction == "download" else "upload", timeout)
                failures["%s %s" % (direction, url)] = why
                unmeasured.append({"metrics": metrics, "labels": labels, "why": why})
                break
            rate = round(nbytes * 8 / secs / 1e6, 3) if secs > 0 else 0.0
            if res["timed_out"]:
                # what moved until the timeout: the transfer's rate was at most this (bound=at_most, graded as a
                # bound: reports/phases/lifecycle/grade.py), and the slowest links are exactly the ones that time out
                art.add("%s_mbps" % direction, rate, "Mbit/s", bound="at_most", note=_bound_note(res, timeout),
                        **labels)
                failures["%s %s" % (direction, url)] = _bound_note(res, timeout)
            else:
                art.add("%s_mbps" % direction, rate, "Mbit/s", **labels)
            art.add("%s_bytes" % direction, nbytes, "B", **labels)
            # to the microsecond: a fast transfer (3 MB on loopback: 5 ms) rounded to 0.1 ms no longer gave back its
            # own rate (1 % off, a clean-clone failure)
            art.add("%s_s" % direction, round(secs, 6), "s", **labels)
            # name lookup, TCP, TLS and the server's first byte: apart from the transfer's seconds
            art.add("%s_setup_s" % direction, round(res["setup_s"], 6), "s", **labels)
            if res["timed_out"]:
                break
    art.facts.update({"unreachable": unreachable, "failures": failures, "unmeasured": unmeasured})
    if not art.results:
        if unreachable and not failures:
            art.skip("no speed-test URL is reachable from this node: %s" % "; ".join(
                "%s (%s)" % kv for kv in sorted(unreachable.items())))
        else:
            art.error("every transfer failed: %s" % "; ".join("%s: %s" % kv for kv in sorted(failures.items())))
