"""probes/storage/fio_s3.py: fio's own S3 engine against the bucket, where fio has one. This machine's fio (Debian's
3.33) has none, so what is run here is the check itself and, with a stand-in fio on PATH that lists the engine and
prints a real fio JSON capture, how the credentials travel (a 0600 job file, never a command line) and what is
recorded."""

import ast
import json
import os
import stat
import sys
from pathlib import Path

import pytest

from probes.artifact import Artifact
from probes.storage import fio_s3

FIO_JSON = Path(__file__).resolve().parents[1] / "fixtures" / "fio" / "local_seq_read.json"
CREDS = {"access_key": "AKIDEXAMPLE", "secret_key": "wJalrXUtnFEMI/K7MDENG"}


def test_the_job_writes_then_reads_path_style_objects():
    text = fio_s3.job_text("http://127.0.0.1:8333", "bench", "clustermax-assess/r/n1/fio-s3", CREDS, "us-east-1",
                           16, 4096)
    assert text.splitlines() == [
        "[global]", "ioengine=http", "http_mode=s3", "https=off", "http_host=127.0.0.1:8333",
        "http_s3_keyid=AKIDEXAMPLE", "http_s3_key=wJalrXUtnFEMI/K7MDENG", "http_s3_region=us-east-1",
        "filename=/bench/clustermax-assess/r/n1/fio-s3", "direct=1", "size=16m", "bs=4096k", "group_reporting=1",
        "", "[s3_write]", "rw=write", "", "[s3_read]", "stonewall", "rw=read"]
    assert "https=on" in fio_s3.job_text("https://s3.example.com", "b", "k", CREDS, "eu-west-1", 1, 1024)


@pytest.mark.skipif(not os.path.exists("/usr/bin/fio"), reason="fio is not installed (make sysdeps)")
def test_this_machines_fio_has_no_s3_engine_and_the_fact_says_so():
    art = Artifact("object_store", "r", "n1")
    assert fio_s3.run_suite(art, "http://127.0.0.1:1", "b", "p/", CREDS, "us-east-1", fio="/usr/bin/fio") is None
    assert art.facts["fio_s3"] == ("not run: this fio has no http engine (built without libcurl): `fio --enghelp`")
    assert art.results == []


def test_with_an_s3_engine_the_credentials_stay_in_a_private_job_file(tmp_path):
    log = tmp_path / "seen"
    fio = tmp_path / "fio"
    fio.write_text("#!%s\nimport os, sys, stat\nif sys.argv[1] == '--enghelp':\n    print('Available IO engines:\\n"
                   "\\tsync\\n\\thttp\\n')\n    sys.exit(0)\njob = sys.argv[-1]\n"
                   "open(%r, 'w').write(repr((sys.argv[1:], oct(os.stat(job).st_mode & 0o777), "
                   "oct(os.stat(os.path.dirname(job)).st_mode & 0o777), open(job).read())))\n"
                   "sys.stdout.write(open(%r).read())\n" % (sys.executable, str(log), str(FIO_JSON)))
    fio.chmod(fio.stat().st_mode | stat.S_IXUSR)
    art = Artifact("object_store", "r", "n1")
    assert fio_s3.run_suite(art, "http://127.0.0.1:8333", "bench", "clustermax-assess/r/n1/", CREDS, "us-east-1",
                            fio=str(fio)) is None
    argv, mode, dir_mode, job = ast.literal_eval(log.read_text())  # the stand-in wrote its repr
    assert argv[0] == "--output-format=json" and not any(CREDS["secret_key"] in a for a in argv)
    assert (mode, dir_mode) == ("0o600", "0o700") and "http_s3_key=%s" % CREDS["secret_key"] in job
    assert not os.path.exists(argv[-1]) and not os.path.exists(os.path.dirname(argv[-1]))  # gone after the run
    doc = json.loads(FIO_JSON.read_text())["jobs"][0]
    got = {r["metric"]: r["value"] for r in art.results}
    assert got["obj_fio_read_gbps"] == doc["read"]["bw_bytes"] / 1e9
    assert got["obj_fio_read_lat_mean_ms"] == pytest.approx(doc["read"]["clat_ns"]["mean"] / 1e6)
    assert art.facts["fio_s3"] == "ran: 16 MiB in 4096 KiB objects, written then read, with %s" % fio
