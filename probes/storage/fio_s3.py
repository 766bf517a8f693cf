"""fio against the bucket: the seed's "we run this suite again against an S3 bucket", with fio's own HTTP engine in
S3 mode (engines/http.c), a sequential write then a read back of `size_mib` in `bs_kib` objects, beside the
object_store probe's own client.

fio's HTTP engine is there only when fio was built with libcurl (Debian's fio 3.33 is not: `fio --enghelp` lists no
http). The tools step builds one as `fio-http` (tools_fio_http; probes/tools/tools_build.py), which is taken first;
without an fio that has the engine this part is not run, and the artifact's fact says so. The credentials go into a
job file of mode 0600 in a private temporary directory (never on a command line, where `ps` shows them, nor beside
the artifacts), removed when fio ends. fio names each object <filename>_<offset>_<length>, under the run's prefix,
where the object_store probe's cleanup deletes it with the rest.
"""

import os
import shutil
import tempfile
from urllib.parse import urlsplit

from probes.common.command import run_cmd
from probes.common.tools import fio_without_http
from probes.storage import fio as fio_mod


def job_text(endpoint, bucket, key, creds, region, size_mib, bs_kib):
    """The job file: a write of the object range, then (stonewall) its read. Path-style requests: the filename
    begins with the bucket."""
    url = urlsplit(endpoint)
    https = "off" if url.scheme == "http" else "on"
    common = ["ioengine=http", "http_mode=s3", "https=%s" % https, "http_host=%s" % url.netloc,
              "http_s3_keyid=%s" % creds["access_key"], "http_s3_key=%s" % creds["secret_key"],
              "http_s3_region=%s" % region, "filename=/%s/%s" % (bucket, key.lstrip("/")), "direct=1",
              "size=%dm" % size_mib, "bs=%dk" % bs_kib, "group_reporting=1"]
    return "\n".join(["[global]"] + common + ["", "[s3_write]", "rw=write", "", "[s3_read]", "stonewall",
                                              "rw=read", ""])


def run_suite(art, endpoint, bucket, prefix, creds, region, size_mib=16, bs_kib=4096, timeout=300, fio=None):
    """Runs the job (when fio can) and records obj_fio_{write,read}_gbps and their mean latency; returns the
    failure, or None. fio: the tools step's fio-http where on PATH, else fio."""
    fio = fio or shutil.which("fio-http") or "fio"
    why = fio_without_http(fio)
    if why:
        art.facts["fio_s3"] = "not run: %s" % why
        return None
    work = tempfile.mkdtemp(prefix="cmxa-fio-s3-")  # 0700, and not the artifacts' directory (fetched)
    try:
        path = os.path.join(work, "fio-s3.job")
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(job_text(endpoint, bucket, prefix + "fio-s3", creds, region, size_mib, bs_kib))
        res = run_cmd([fio, "--output-format=json", path], timeout=timeout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if res.timed_out or res.rc != 0:
        why = "fio against the bucket %s: %s" % ("timed out" if res.timed_out else "exit %s" % res.rc,
                                                 (res.stderr or res.stdout).strip()[-300:])
        art.facts["fio_s3"] = "error: %s" % why
        return why
    try:
        entries = fio_mod.parse_output(res.stdout)
    except ValueError as exc:
        art.facts["fio_s3"] = "error: %s" % exc
        return "fio against the bucket: %s" % exc
    for entry in entries:
        side = "write" if entry["workload"] == "s3_write" else "read"
        stats = entry[side]
        if "bw_bytes" not in stats:  # never a 0 GB/s: say what fio's JSON lacks
            why = "fio against the bucket: no %s bandwidth: %s" % (side, fio_mod.NO_BW)
            art.facts["fio_s3"] = "error: %s" % why
            return why
        art.add("obj_fio_%s_gbps" % side, stats["bw_bytes"] / 1e9, "GB/s", tool="fio", object_kib=bs_kib)
        art.add("obj_fio_%s_lat_mean_ms" % side, stats["clat_mean_us"] / 1000.0, "ms", tool="fio", object_kib=bs_kib)
    art.facts["fio_s3"] = "ran: %d MiB in %d KiB objects, written then read, with %s" % (size_mib, bs_kib, fio)
    return None
