import base64
import json
import subprocess
import sys
import time
import types
import weakref
import zipfile
from pathlib import Path

import pytest

from probes import cli
from probes.artifact import validate
from probes.params import Param, Params
from probes.pyz import build

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_probe(monkeypatch):
    """Registers a probe module whose behaviour each test chooses."""
    module = types.ModuleType("probes_test_fake")
    module.PARAMS = Params(x=Param(int, 0, "a number the probe records"))
    monkeypatch.setitem(sys.modules, "probes_test_fake", module)
    monkeypatch.setitem(cli.PROBES, "fake", "probes_test_fake")
    return module


def test_exception_becomes_error_artifact_with_traceback_and_keeps_results(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.add("measured_before_fault", 1.5, "s")
        raise RuntimeError("CUDA error: an illegal memory access")

    fake_probe.run = run
    path, doc = cli.run_probe("fake", str(tmp_path), "r", "h")
    assert validate(doc) == []
    assert doc["status"] == "error" and "illegal memory access" in doc["reason"]
    assert doc["results"][0]["value"] == 1.5  # what was measured before the fault is kept
    tb = tmp_path / doc["raw"][0]
    assert "RuntimeError" in tb.read_text()


def test_timeout_stops_the_probe_and_says_so(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.add("first_sample", 1.0, "s")
        time.sleep(30)

    fake_probe.run = run
    t0 = time.monotonic()
    _, doc = cli.run_probe("fake", str(tmp_path), "r", "h", timeout=0.5)
    assert time.monotonic() - t0 < 20
    assert doc["status"] == "error" and doc["reason"] == "timed out after 0.5 s"
    assert doc["results"][0]["metric"] == "first_sample"


def test_a_limit_that_rings_inside_a_weakref_callback_rings_again(tmp_path, fake_probe):
    """The alarm rings while a weakref callback runs (as in CI, inside a WeakSet's): Python drops what the handler
    raises there ("Exception ignored in") and the probe goes on after the callback. The limit rings again and stops
    the probe in its own code. Before, the one-shot alarm was spent: the probe slept its full 6 s and returned ok."""
    class Thing:
        pass

    def busy(ref):
        until = time.monotonic() + 2.0
        while time.monotonic() < until:  # the alarm (0.3 s) rings in here
            pass

    def run(art, params, out_dir):
        art.add("first_sample", 1.0, "s")
        thing = Thing()
        ref = weakref.ref(thing, busy)
        del thing  # the callback runs now, as garbage collection would run it
        art.facts["callback_done"] = ref() is None
        time.sleep(6)

    fake_probe.run = run
    dropped = []
    hook = sys.unraisablehook
    sys.unraisablehook = dropped.append
    try:
        _, doc = cli.run_probe("fake", str(tmp_path), "r", "h", timeout=0.3)
    finally:
        sys.unraisablehook = hook
    assert doc["status"] == "error" and doc["reason"] == "timed out after 0.3 s"
    assert doc["facts"]["callback_done"] is True and doc["results"][0]["value"] == 1.0
    assert dropped == []  # the limit's own drop is not passed on as an error; anything else still would be



def test_invalid_result_from_a_probe_bug_is_caught(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.results.append({"metric": "bad", "value": "NaN-ish", "unit": "", "labels": {}})
        art.add("good", 2, "count")

    fake_probe.run = run
    _, doc = cli.run_probe("fake", str(tmp_path), "r", "h")
    assert doc["status"] == "error" and doc["reason"].startswith("invalid artifact")
    assert [r["metric"] for r in doc["results"]] == ["good"]
    assert validate(doc) == []


def test_nan_or_inf_in_a_probes_artifact_still_writes_what_was_measured(tmp_path, fake_probe):
    """NaN and inf are not JSON: the writer refused the artifact with ValueError, which escaped run_probe (it caught
    OSError only), so the probe left no artifact and no manifest and everything it measured was lost."""
    def run(art, params, out_dir):
        art.add("gflops", 1200.0, "GFLOP/s", threshold=float("nan"))
        art.facts["residual"] = float("inf")
        art.results.append({"metric": "loss", "value": float("nan"), "unit": "nats", "labels": {}})  # past add()
        art.add("step_seconds", 0.5, "s")

    fake_probe.run = run
    path, doc = cli.run_probe("fake", str(tmp_path), "r", "h")
    written = json.loads(Path(path).read_text(), parse_constant=lambda c: pytest.fail("%s in the artifact" % c))
    assert written == doc and validate(doc) == []
    assert [(r["metric"], r["value"], r["labels"]) for r in doc["results"]] == [
        ("gflops", 1200.0, {"threshold": "nan"}), ("step_seconds", 0.5, {})]
    assert doc["facts"] == {"residual": "inf"} and doc["status"] == "error"
    assert doc["reason"] == ("invalid artifact: results[1].value nan is not finite; not JSON, written as text: "
                             "results[0].labels.threshold, facts.residual")


def test_a_nan_given_to_add_is_an_error_naming_the_metric_and_keeps_the_results(tmp_path, fake_probe):
    def run(art, params, out_dir):
        art.add("tokens_per_s_per_gpu", 5762.0, "tokens/s", nodes=1)
        art.add("loss_last", float("nan"), "nats", nodes=1)

    fake_probe.run = run
    path, doc = cli.run_probe("fake", str(tmp_path), "r", "h")
    assert json.loads(Path(path).read_text()) == doc
    assert doc["status"] == "error" and doc["reason"] == (
        "ValueError: metric 'loss_last': value nan is not finite (JSON has no NaN or inf); say it in a fact instead")
    assert [(r["metric"], r["value"]) for r in doc["results"]] == [("tokens_per_s_per_gpu", 5762.0)]


def test_inline_manifest_carries_raw_files(tmp_path, fake_probe):
    def run(art, params, out_dir):
        (Path(out_dir) / "fake.log").write_text("line 1\n")
        art.raw.append("fake.log")
        art.add("x", params["x"], "count")

    fake_probe.run = run
    path, doc = cli.run_probe("fake", str(tmp_path), "r", "h", params={"x": 3})
    man = cli.manifest(path, doc, str(tmp_path))
    assert base64.b64decode(man["raw_inline"]["fake.log"]) == b"line 1\n"
    assert man["artifact"]["params"] == {"x": 3} and man["raw_remote"] == []


def test_bad_params_and_unknown_probe_exit_2(capsys):
    assert cli.main(["nope"]) == 2
    assert cli.main(["node_info", "--params", "[1]"]) == 2
    assert "--params must be a JSON object" in capsys.readouterr().err


def test_pyz_is_reproducible_and_runs_by_hand(tmp_path):
    a, b = tmp_path / "a.pyz", tmp_path / "b.pyz"
    build(str(a))
    build(str(b))
    assert a.read_bytes() == b.read_bytes()
    names = zipfile.ZipFile(a).namelist()
    assert "__main__.py" in names and "probes/inventory/node_info.py" in names
    out = subprocess.run([sys.executable, str(a), "node_info", "--out", str(tmp_path / "o"), "--inline",
                          "--params", '{"torch": false}'], capture_output=True, text=True, timeout=60, check=True)
    man = json.loads(out.stdout.strip().splitlines()[-1])
    assert man["artifact"]["probe"] == "node_info" and validate(man["artifact"]) == []
    assert (tmp_path / "o" / "node_info.json").exists()


def test_a_probe_that_catches_exception_still_stops_at_its_time_limit(tmp_path):
    """net_speed tries each URL and records a failed one (`except Exception`) before the next: the time limit is
    no Exception, so it stops the probe there. Before, each URL swallowed it and the probe ran on with no limit
    (8 s for a 1 s limit, status ok)."""
    import http.server
    import socketserver
    import threading

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # 40 bytes over 4 s
            self.send_response(200)
            self.send_header("Content-Length", "40")
            self.end_headers()
            try:
                for _ in range(8):
                    self.wfile.write(b"x" * 5)
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                pass  # the probe stopped reading: what this test wants

        def log_message(self, *args):
            pass

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d/x" % server.server_address[1]
    try:
        t0 = time.monotonic()
        _, doc = cli.run_probe("net_speed", str(tmp_path), "r", "h", timeout=1.0,
                               params={"download_urls": [url, url + "?2", url + "?3"], "upload_urls": [],
                                       "timeout_s": 30})
        elapsed = time.monotonic() - t0
    finally:
        server.shutdown()
        server.server_close()
    assert doc["status"] == "error" and doc["reason"] == "timed out after 1 s", (doc["reason"], doc["facts"])
    assert elapsed < 3.5


def test_a_full_disk_keeps_what_was_measured_in_the_manifest(tmp_path, fake_probe):
    """The node's disk is full when the artifact is written: the probe's results still go back to the controller
    (the --inline manifest), with the reason. Before, main() died with ENOSPC and printed nothing."""
    full = tmp_path / "full"
    full.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)],
                      capture_output=True).returncode != 0:
        pytest.skip("needs a tmpfs mount (root)")
    try:
        subprocess.run(["dd", "if=/dev/zero", "of=%s" % (full / "filler"), "bs=4k", "count=1000"],
                       capture_output=True)

        def run(art, params, out_dir):
            art.add("measured", 2.5, "s")

        fake_probe.run = run
        path, doc = cli.run_probe("fake", str(full / "art"), "r", "h")
        assert path is None and doc["status"] == "error"
        assert doc["reason"].startswith("artifact not written on the node: [Errno 28] No space left on device")
        assert doc["results"][0]["value"] == 2.5 and validate(doc) == []
        assert cli.manifest(path, doc, str(full / "art"))["artifact"]["results"] == doc["results"]
    finally:
        subprocess.run(["umount", str(full)], capture_output=True)


STUCK = """
import signal, sys, time, types
sys.path.insert(0, %r)
from probes import cli
from probes.params import Params

module = types.ModuleType("probes_test_stuck")
module.PARAMS = Params()


def run(art, params, out_dir):
    # where the time limit cannot reach: SIGALRM held back, as in a C call that never returns to Python
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    stuck_in_a_call_that_never_returns(30)


def stuck_in_a_call_that_never_returns(seconds):
    time.sleep(seconds)


module.run = run
sys.modules["probes_test_stuck"] = module
cli.PROBES["stuck"] = "probes_test_stuck"
cli.STUCK_GRACE_S = 1
cli.run_probe("stuck", %r, "r", "h", timeout=0.5)
"""


def test_a_probe_stuck_past_its_limit_says_where_on_stderr(tmp_path):
    """A probe that its --timeout cannot stop (cc19: a checkpoint probe ran 30 s past its 300 and was never
    explained) dumps every thread's stack to stderr STUCK_GRACE_S past the limit: the caller keeps it."""
    proc = subprocess.Popen([sys.executable, "-c", STUCK % (str(ROOT), str(tmp_path))], stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(4)
    finally:
        proc.kill()
    err = proc.communicate()[1]
    assert "Thread" in err and "stuck_in_a_call_that_never_returns" in err, err
