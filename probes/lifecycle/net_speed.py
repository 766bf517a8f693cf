"""net_speed: download and upload throughput between this node and the internet (seed, "Lifecycle": internet
speed, download and upload, mostly against Cloudflare).

Every URL is first checked for reachability (a TCP connection within `reach_timeout_s`, name lookup included);
unreachable ones are listed with the reason and not timed. Downloads are HTTP GETs read to the end (or to
`max_bytes`), uploads HTTP POSTs of `upload_bytes` random bytes, each `repeat` times with a timeout; the bytes
go to memory, never to disk. Results: download_mbps / upload_mbps (megabits per second, 1e6 bit/s) per URL and
try, with the bytes moved and seconds taken. Skipped with the reason when no URL is reachable.
"""

import os
import time
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
    """(bytes, seconds) of one GET, reading the body to its end."""
    req = urllib.request.Request(url, headers={"User-Agent": "clustermax-assess/net_speed"})
    t0 = time.perf_counter()
    deadline = t0 + timeout
    total = 0
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - URLs are the operator's
        while total < max_bytes:
            chunk = resp.read(CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if time.perf_counter() > deadline:
                raise TimeoutError("download of %s took longer than %g s" % (url, timeout))
    return total, time.perf_counter() - t0


def upload(url, timeout, size):
    """(bytes, seconds) of one POST of size random bytes, response read."""
    body = os.urandom(size)
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"User-Agent": "clustermax-assess/net_speed",
                                          "Content-Type": "application/octet-stream"})
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
        resp.read()
    return size, time.perf_counter() - t0


def run(art, p, out_dir):
    timeout, reach = p["timeout_s"], p["reach_timeout_s"]
    unreachable, failures = {}, {}
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
            try:
                if direction == "download":
                    nbytes, secs = download(url, timeout, p["max_bytes"])
                else:
                    nbytes, secs = upload(url, timeout, p["upload_bytes"])
            except Exception as exc:  # noqa: BLE001 - a failed transfer is data
                failures["%s %s" % (direction, url)] = "%s: %s" % (type(exc).__name__, exc)
                break
            labels = {"url": url, "try": attempt}
            art.add("%s_mbps" % direction, round(nbytes * 8 / secs / 1e6, 3) if secs > 0 else 0.0, "Mbit/s",
                    **labels)
            art.add("%s_bytes" % direction, nbytes, "B", **labels)
            # to the microsecond: a fast transfer (3 MB on loopback: 5 ms) rounded to 0.1 ms no longer gave back its
            # own rate (1 % off, a clean-clone failure)
            art.add("%s_s" % direction, round(secs, 6), "s", **labels)
    art.facts.update({"unreachable": unreachable, "failures": failures})
    if not art.results:
        if unreachable and not failures:
            art.skip("no speed-test URL is reachable from this node: %s" % "; ".join(
                "%s (%s)" % kv for kv in sorted(unreachable.items())))
        else:
            art.error("every transfer failed: %s" % "; ".join("%s: %s" % kv for kv in sorted(failures.items())))
