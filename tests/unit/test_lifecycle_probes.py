"""The lifecycle probes run for real on this machine: tier discovery from a recorded /proc/mounts, reachability,
pip and uv installing a real package from a wheelhouse built offline (then imported cold and warm), cleanup after
success, failure and timeout, the speed test against a loopback HTTP server, vllm serve's readiness loop against a
stand-in server, and the skips (no engine, no client, no GPU) with their reasons."""

import http.server
import json
import os
import socket
import stat
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from probes.audit import storage as audit_storage
from probes.cli import run_probe
from probes.common import tiers as storage_tier
from probes.lifecycle import common as lifecycle
from probes.lifecycle import container_pull
from probes.lifecycle import serve_ready as serve_mod
from probes.lifecycle.container_pull import registry_of
from probes.storage import import_time

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    from integration.lifecycle_wheelhouse import VERSION, build  # noqa: PLC0415

    return build(tmp_path_factory.mktemp("wheelhouse")), VERSION


def test_shared_filesystem_types_match_the_audit():
    from reports.phases.audit import storage as audit_storage  # noqa: PLC0415

    assert set(storage_tier.SHARED_FS) == set(audit_storage.SHARED_FS)


def test_tiers_discovered_from_a_gpu_node_mount_table():
    mounts = audit_storage.parse_proc_mounts((FIXTURES / "proc" / "lifecycle_mounts.txt").read_text())
    tiers, left = storage_tier.discover_tiers(mounts, home="/home/alice", tmp="/tmp", user="alice",
                                           usable=lambda path, user: path)
    assert [(t["name"], t["path"], t["shared"], t["fstype"]) for t in tiers] == [
        ("home", "/home/alice", True, "nfs4"), ("data", "/data", True, "lustre"),
        ("local-ssd", "/mnt/local-ssd", False, "ext4"), ("scratch", "/scratch", False, "xfs"),
        ("tmp", "/tmp", False, "ext4")]
    # the /home mount is the home tier already; docker layers, netns handles and /boot are never tiers
    assert left == {"/home": "same filesystem (/home) as tier home"}
    # a mount root the user cannot write to falls back to <mount>/<user>, else it is left out with the reason
    tiers, left = storage_tier.discover_tiers(mounts, home="/home/alice", tmp="/tmp", user="alice",
                                           usable=lambda path, user: None if path == "/data" else path)
    assert "data" not in [t["name"] for t in tiers] and left["/data"] == "not writable by alice"


def test_tmp_on_the_same_filesystem_as_home_is_one_tier():
    mounts = [{"target": "/", "source": "/dev/sda1", "fstype": "ext4"}]
    tiers, left = storage_tier.discover_tiers(mounts, home="/root", tmp="/tmp", user="root", usable=lambda p, u: p)
    assert [t["name"] for t in tiers] == ["home"] and left == {"/tmp": "same filesystem (/) as tier home"}


def test_reachability_is_checked_with_a_short_timeout():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        assert lifecycle.reachable("http://127.0.0.1:%d/x" % srv.getsockname()[1], 2) == (True, None)
    ok, why = lifecycle.reachable("http://127.0.0.1:%d/" % free_port(), 2)
    assert not ok and why.startswith("no TCP connection to 127.0.0.1 port ")
    assert lifecycle.endpoint("https://pypi.org/simple") == ("pypi.org", 443)
    assert lifecycle.reachable("file:///opt/wheels", 1) == (False, "no host in 'file:///opt/wheels'")


def test_timing_helpers():
    assert lifecycle.median_warm([2.0, 0.5, 0.7, 0.6]) == (2.0, 0.6)
    assert lifecycle.median_warm([1.5]) == (1.5, None)
    assert registry_of("busybox") == ("docker.io", "library/busybox")
    assert registry_of("nvcr.io/nvidia/pytorch:25.01-py3") == ("nvcr.io", "nvidia/pytorch:25.01-py3")
    assert registry_of("localhost:5000/x/y") == ("localhost:5000", "x/y")


def test_pip_and_uv_install_and_import_from_a_wheelhouse_then_clean_up(tmp_path, wheelhouse):
    wheels, version = wheelhouse
    tier_dir = tmp_path / "tier"
    tier_dir.mkdir()
    _, doc = run_probe("pkg_install", str(tmp_path / "out"), "r1", "h1", params={
        "tiers": [{"name": "fast", "path": str(tier_dir)}], "packages": ["cmxlife"], "no_index": True,
        "find_links": [str(wheels)], "import_module": "cmxlife", "import_repeat": 3, "pip_venv_with_pip": False})
    assert doc["status"] == "ok", doc["reason"]
    facts = doc["facts"]
    assert facts["failures"] == {} and facts["tiers_from"] == "the lifecycle_tiers list"
    assert facts["pip_venv"].startswith("python -m venv --without-pip")
    for tool in ("pip", "uv"):
        got = {r["metric"]: r["value"] for r in doc["results"] if r["labels"].get("tool") == tool
               and r["labels"].get("cache") in (None, "cold")}
        assert got["venv_s"] > 0 and got["install_s"] > 0 and got["import_s"] > 0
        assert got["total_s"] == pytest.approx(got["venv_s"] + got["install_s"], abs=0.002)
        assert facts["versions"]["fast/%s" % tool]["cmxlife"] == version
        warm = [r for r in doc["results"] if r["labels"] == {"tier": "fast", "tool": tool, "cache": "warm",
                                                             "module": "cmxlife"}]
        assert len(warm) == 1 and warm[0]["value"] > 0
    assert facts["cache_drop"].startswith("posix_fadvise(DONTNEED) on ")
    assert list(tier_dir.iterdir()) == []  # venvs, caches and the run's directory are gone


def test_a_failed_install_is_recorded_and_removed(tmp_path, wheelhouse):
    wheels, _ = wheelhouse
    tier_dir = tmp_path / "tier"
    tier_dir.mkdir()
    _, doc = run_probe("pkg_install", str(tmp_path / "out"), "r1", "h1", params={
        "tiers": [{"name": "t", "path": str(tier_dir)}, {"name": "gone", "path": str(tmp_path / "missing")}],
        "packages": ["cmxlife-does-not-exist"], "tools": ["uv"], "no_index": True, "find_links": [str(wheels)]})
    assert doc["status"] == "error" and doc["reason"].startswith("every install failed: ")
    failures = doc["facts"]["failures"]
    assert failures["gone/uv"] == "%s does not exist" % (tmp_path / "missing")
    assert failures["t/uv"].startswith("uv pip install failed (rc=1)") and "cmxlife-does-not-exist" in failures["t/uv"]
    assert list(tier_dir.iterdir()) == []


def test_a_probe_timeout_kills_the_tool_and_removes_its_environment(tmp_path):
    pid_file = tmp_path / "fake-uv.pid"
    fake = tmp_path / "uv"
    fake.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "uv 0.0.0-fake"; exit 0; fi\n'
                    'echo $$ > %s\nexec sleep 60\n' % pid_file)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    tier_dir = tmp_path / "tier"
    tier_dir.mkdir()
    t0 = time.monotonic()
    _, doc = run_probe("pkg_install", str(tmp_path / "out"), "r1", "h1", timeout=2, params={
        "tiers": [{"name": "t", "path": str(tier_dir)}], "packages": ["x"], "tools": ["uv"], "uv": str(fake),
        "no_index": True})
    assert time.monotonic() - t0 < 30
    assert doc["status"] == "error" and doc["reason"] == "timed out after 2 s"
    assert doc["facts"]["uv_version"] == "uv 0.0.0-fake"
    assert list(tier_dir.iterdir()) == []
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        for _ in range(50):  # reaped by the probe's group kill; give the kernel a moment
            os.kill(pid, 0)
            time.sleep(0.1)


def test_an_unreachable_index_skips_before_any_tool_waits(tmp_path):
    _, doc = run_probe("pkg_install", str(tmp_path / "out"), "r1", "h1", params={
        "tiers": [{"name": "t", "path": str(tmp_path)}], "packages": ["x"],
        "index_url": "http://127.0.0.1:%d/simple" % free_port(), "reach_timeout_s": 1})
    assert doc["status"] == "skipped"
    assert doc["reason"].startswith("package index http://127.0.0.1:") and "lifecycle_find_links" in doc["reason"]
    _, doc = run_probe("pkg_install", str(tmp_path / "out"), "r1", "h1", params={
        "tiers": [{"name": "t", "path": str(tmp_path)}], "offline": "internet downloads are off in this run"})
    assert doc["status"] == "skipped" and doc["reason"].startswith("internet downloads are off in this run and no")


class _Speed(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = b"x" * 3_000_000
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def speed_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Speed)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def test_net_speed_against_a_loopback_server(tmp_path, speed_server):
    closed = "http://127.0.0.1:%d/down" % free_port()
    _, doc = run_probe("net_speed", str(tmp_path), "r1", "h1", params={
        "download_urls": [speed_server + "/down", closed], "upload_urls": [speed_server + "/up"],
        "upload_bytes": 1_000_000, "repeat": 2, "reach_timeout_s": 1})
    assert doc["status"] == "ok"
    down = [r for r in doc["results"] if r["metric"] == "download_bytes"]
    assert [r["value"] for r in down] == [3_000_000, 3_000_000]
    mbps = [r["value"] for r in doc["results"] if r["metric"] == "download_mbps"]
    secs = [r["value"] for r in doc["results"] if r["metric"] == "download_s"]
    assert mbps[0] == pytest.approx(3_000_000 * 8 / secs[0] / 1e6, rel=0.01)
    assert [r["value"] for r in doc["results"] if r["metric"] == "upload_bytes"] == [1_000_000, 1_000_000]
    assert list(doc["facts"]["unreachable"]) == [closed]
    _, doc = run_probe("net_speed", str(tmp_path), "r1", "h1", params={
        "download_urls": [closed], "upload_urls": [], "reach_timeout_s": 1})
    assert doc["status"] == "skipped" and doc["reason"].startswith("no speed-test URL is reachable from this node")


def test_net_speed_through_the_nodes_proxy(tmp_path, speed_server, monkeypatch):
    """A node that reaches the internet only through its proxy (http_proxy / https_proxy): the speed-test host's name
    does not resolve on the node (.invalid), the proxy fetches it (the loopback server answers a forward proxy's
    GET). reachable() connected to the host itself and skipped the probe ("no speed-test URL is reachable from
    this node"), though urllib, pip, uv, huggingface_hub and curl all go through the proxy."""
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    # urlopen's opener reads the proxies once per process (a probe's is fresh): this one was built by earlier tests
    monkeypatch.setattr(urllib.request, "_opener", None)
    monkeypatch.setenv("http_proxy", speed_server)
    monkeypatch.setenv("https_proxy", speed_server)
    url = "http://speed.example.invalid/down"
    assert lifecycle.proxy_for(url) == speed_server and lifecycle.reachable(url, 1) == (True, None)
    _, doc = run_probe("net_speed", str(tmp_path), "r1", "h1", params={
        "download_urls": [url], "upload_urls": [], "reach_timeout_s": 1})
    assert doc["status"] == "ok", doc["reason"]
    assert [r["value"] for r in doc["results"] if r["metric"] == "download_bytes"] == [3_000_000]
    # a proxy that does not answer is named as the reason
    closed = "http://127.0.0.1:%d" % free_port()
    monkeypatch.setenv("http_proxy", closed)
    ok, why = lifecycle.reachable(url, 1)
    assert not ok and why.startswith("through the proxy %s (the environment's, for %s): no TCP connection to "
                                     "127.0.0.1 port " % (closed, url)), why
    # a host no_proxy names goes direct
    monkeypatch.setenv("no_proxy", "localhost,.example.invalid")
    assert lifecycle.proxy_for(url) is None
    assert lifecycle.reachable(url, 1)[1].startswith("name lookup of speed.example.invalid failed")


def test_container_pull_without_engines_and_model_pull_without_hub_skip_with_reasons(tmp_path):
    _, doc = run_probe("container_pull", str(tmp_path), "r1", "h1", params={"engines": ["enroot", "apptainer"]})
    if doc["status"] != "skipped":
        pytest.skip("enroot or apptainer is installed here")
    assert doc["reason"] == "no usable container engine on this node (apptainer: not installed; enroot: not installed)"
    closed = "http://127.0.0.1:%d" % free_port()
    _, doc = run_probe("model_pull", str(tmp_path), "r1", "h1", params={
        "hubs": ["huggingface"], "hf_endpoint": closed, "reach_timeout_s": 1})
    assert doc["status"] == "skipped" and doc["reason"].startswith("no model hub could be used: huggingface: ")
    assert ("client is not installed" in doc["reason"]) or ("%s not reachable" % closed in doc["reason"])
    assert not (tmp_path.parent / "lifecycle" / "models").exists()


def test_model_pull_counts_the_models_bytes_not_the_hub_clients_own_cache(tmp_path, monkeypatch):
    """A hub client laid out as huggingface_hub documents it (cache_dir/models--org--name: blobs, snapshot symlinks
    to them; hf_xet's chunk cache under HF_HOME/xet, 10 GB by default in huggingface_hub 0.32-0.34): the model is
    its 1 MiB blob. Before, the probe counted everything under its work directory, chunk cache included: 2 MiB, and
    a download rate twice the real one."""
    import http.server
    import socketserver
    import threading

    fake = tmp_path / "client" / "huggingface_hub"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os\n"
        "def snapshot_download(repo_id, cache_dir, allow_patterns=None):\n"
        "    repo = os.path.join(cache_dir, 'models--' + repo_id.replace('/', '--'))\n"
        "    os.makedirs(os.path.join(repo, 'blobs'))\n"
        "    os.makedirs(os.path.join(repo, 'snapshots', 'abc123'))\n"
        "    with open(os.path.join(repo, 'blobs', 'e3b0c442'), 'wb') as fh:\n"
        "        fh.write(b'w' * 2**20)\n"
        "    os.symlink('../../blobs/e3b0c442', os.path.join(repo, 'snapshots', 'abc123', 'model.safetensors'))\n"
        "    xet = os.path.join(os.environ['HF_HOME'], 'xet', 'chunk-cache', 'default')\n"
        "    os.makedirs(xet)\n"
        "    with open(os.path.join(xet, 'chunk0'), 'wb') as fh:\n"
        "        fh.write(b'w' * 2**20)\n"
        "    return os.path.join(repo, 'snapshots', 'abc123')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    server = socketserver.TCPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        _, doc = run_probe("model_pull", str(tmp_path / "out"), "r1", "h1", params={
            "hubs": ["huggingface"], "model": "org/tiny", "python": sys.executable,
            "hf_endpoint": "http://127.0.0.1:%d" % server.server_address[1], "reach_timeout_s": 2})
    finally:
        server.shutdown()
        server.server_close()
    assert doc["status"] == "ok", doc["reason"]
    [size] = [r["value"] for r in doc["results"] if r["metric"] == "model_bytes"]
    assert size == 2**20 + len("../../blobs/e3b0c442")  # the blob, and the snapshot's symlink itself (lstat)


def test_serve_ready_times_until_v1_models_answers(tmp_path, monkeypatch):
    port = free_port()
    fake = tmp_path / "vllm"
    # A stand-in for `vllm serve MODEL --host H --port P`: takes a second to "load", then answers /v1/models.
    fake.write_text("#!%s\nimport http.server, json, sys, time\ntime.sleep(1.0)\n"
                    "class H(http.server.BaseHTTPRequestHandler):\n"
                    "    def do_GET(self):\n"
                    "        body = json.dumps({'object': 'list', 'data': [{'id': sys.argv[2]}]}).encode()\n"
                    "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
                    "    def log_message(self, *a): pass\n"
                    "http.server.HTTPServer((sys.argv[4], int(sys.argv[6])), H).serve_forever()\n" % sys.executable)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    model = tmp_path / "model"
    model.mkdir()
    gpu = {"backend": "cuda", "model": "NVIDIA H100", "count": 8, "driver": "570", "torch": None}
    monkeypatch.setattr(serve_mod.device_mod, "describe", lambda: (gpu, [], {"gpu_tool": "nvidia-smi"}))
    _, doc = run_probe("serve_ready", str(tmp_path / "out"), "r1", "h1", params={
        "vllm": str(fake), "model_path": str(model), "port": port, "timeout_s": 30,
        "work_dir": str(tmp_path / "work")})
    assert doc["status"] == "ok", doc["reason"]
    [ready] = [r["value"] for r in doc["results"] if r["metric"] == "ready_s"]
    assert 1.0 <= ready < 30
    assert not serve_mod.models_answer(port)  # the server was stopped
    assert not (tmp_path / "work").exists()
    # no vLLM on a GPU node, and no GPU at all: skipped with the reason
    _, doc = run_probe("serve_ready", str(tmp_path / "out"), "r1", "h1", params={"vllm": str(tmp_path / "none")})
    assert doc["status"] == "skipped" and doc["reason"].startswith("vLLM is not installed")
    monkeypatch.setattr(serve_mod.device_mod, "describe",
                        lambda: (dict(gpu, backend="cpu", count=0), [], {"gpu_tool": "none", "gpu_error": None}))
    _, doc = run_probe("serve_ready", str(tmp_path / "out"), "r1", "h1", params={})
    assert doc["reason"] == "no GPU on this node (neither nvidia-smi nor amd-smi found): vllm serve needs one"


def test_drop_page_cache_says_what_it_did(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    assert import_time.drop_page_cache(str(tmp_path)) == "posix_fadvise(DONTNEED) on 2 files of the environment"
    json.dumps(import_time.drop_page_cache(str(tmp_path), "global"))  # root or not, a sentence for the artifact


def test_container_pull_times_a_pull_and_removes_the_image(tmp_path, monkeypatch):
    """A stand-in docker CLI (its daemon "answers"), a registry on loopback (only its TCP port is checked): the
    pull is timed, the image's size read, the image removed; an image docker already has is left alone. (Without
    interface counters: the stand-in downloads nothing.)"""
    monkeypatch.setattr(lifecycle, "received_bytes", lambda *_: None)
    calls = tmp_path / "calls.log"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    docker = bindir / "docker"
    docker.write_text(
        '#!/bin/sh\necho "$*" >> %s\n'
        'case "$1" in\n'
        '  info) echo 28.2.2 ;;\n'
        '  image) case "$*" in *--format*) echo 5000000 ;; *present*) exit 0 ;; *) exit 1 ;; esac ;;\n'
        '  pull) sleep 0.3 ;;\n'
        'esac\n' % calls)
    docker.chmod(docker.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    with socket.socket() as registry:
        registry.bind(("127.0.0.1", 0))
        registry.listen(4)
        host = "127.0.0.1:%d" % registry.getsockname()[1]
        _, doc = run_probe("container_pull", str(tmp_path / "out"), "r1", "h1", params={
            "engines": ["docker"], "images": ["%s/team/app:1" % host, "%s/team/present:1" % host],
            "work_dir": str(tmp_path / "work"), "reach_timeout_s": 1})
    assert doc["status"] == "ok", doc["reason"]
    [pull] = [r for r in doc["results"] if r["metric"] == "pull_s"]
    assert pull["labels"] == {"engine": "docker", "image": "%s/team/app:1" % host, "registry": host}
    assert 0.3 <= pull["value"] < 30
    assert [r["value"] for r in doc["results"] if r["metric"] == "image_bytes"] == [5000000]
    # without counters the rate is the image's size over the seconds: an upper bound (docker's size is unpacked)
    [rate] = [r for r in doc["results"] if r["metric"] == "pull_mbps"]
    assert (rate["labels"]["bytes"], rate["labels"]["bound"]) == ("image", "at_most")
    assert rate["labels"]["note"] == "from the image's size (no interface counters): fewer bytes came over the wire"
    assert rate["value"] == pytest.approx(5000000 * 8 / pull["value"] / 1e6, rel=0.01)
    assert doc["facts"]["skipped"] == {"docker %s/team/present:1" % host:
                                       "already present in docker's image store: a pull would not be measured"}
    log = calls.read_text().splitlines()
    assert "pull --quiet %s/team/app:1" % host in log and "rmi --force %s/team/app:1" % host in log
    assert not any(line.startswith(("pull", "rmi")) and "present" in line for line in log)
    assert not (tmp_path / "work").exists()


class _Slow(http.server.BaseHTTPRequestHandler):
    """A link of about 10 Mbit/s: GET /down trickles 64 KiB every 50 ms of a 50 MB body; POST reads 256 KiB every
    100 ms; GET /late answers 3 MB at once, but only after a second of "server time" before its first byte."""

    def do_GET(self):  # noqa: N802
        late = self.path == "/late"
        if late:
            time.sleep(1.0)
        size = 3_000_000 if late else 50_000_000
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        try:
            if late:
                self.wfile.write(b"x" * size)
                return
            for _ in range(size // 65536):
                self.wfile.write(b"x" * 65536)
                time.sleep(0.05)
        except OSError:  # the probe hung up at its timeout
            pass

    def do_POST(self):  # noqa: N802
        left = int(self.headers["Content-Length"])
        try:
            while left > 0:
                got = self.rfile.read(min(left, 262144))
                if not got:
                    return
                left -= len(got)
                time.sleep(0.1)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Slow)
    srv.daemon_threads = True
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    yield "http://127.0.0.1:%d" % srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _by_metric(doc, metric):
    return [r for r in doc["results"] if r["metric"] == metric]


def test_a_transfer_that_times_out_is_measured_up_to_the_timeout(tmp_path, slow_server):
    """A link too slow to finish within timeout_s is the finding, not a missing number: the bytes moved until then
    over the seconds are the rate's upper bound (bound=at_most, with a note); before, the download was thrown away
    (a TimeoutError in facts.failures) and lifecycle.net_download read skip or error."""
    t0 = time.monotonic()
    _, doc = run_probe("net_speed", str(tmp_path), "r1", "h1", params={
        "download_urls": [slow_server + "/down"], "upload_urls": [slow_server + "/up"], "upload_bytes": 40_000_000,
        "timeout_s": 1, "reach_timeout_s": 1})
    assert time.monotonic() - t0 < 20
    assert doc["status"] == "ok", doc["reason"]
    for direction, total in (("download", 50_000_000), ("upload", 40_000_000)):
        [rate] = _by_metric(doc, direction + "_mbps")
        [nbytes] = [r["value"] for r in _by_metric(doc, direction + "_bytes")]
        [secs] = [r["value"] for r in _by_metric(doc, direction + "_s")]
        assert 0 < nbytes < total and secs >= 0.9
        assert rate["labels"]["bound"] == "at_most"
        assert rate["labels"]["note"] == "timed out after 1 s with %d of %d bytes" % (nbytes, total)
        assert rate["value"] == pytest.approx(nbytes * 8 / secs / 1e6, rel=0.01)
        assert rate["value"] < 500  # the 10-20 Mbit/s trickle, not a loopback rate
    assert doc["facts"]["unmeasured"] == []


def test_the_rate_is_timed_from_the_first_byte_and_setup_is_apart(tmp_path, slow_server):
    """A server that takes a second before its first byte: that second is download_setup_s, not transfer time (it
    used to be counted in download_s, so 100 MB at 10 Gbit/s read about 3.5 Gbit/s)."""
    _, doc = run_probe("net_speed", str(tmp_path), "r1", "h1", params={
        "download_urls": [slow_server + "/late"], "upload_urls": [], "reach_timeout_s": 1})
    assert doc["status"] == "ok", doc["reason"]
    [secs] = [r["value"] for r in _by_metric(doc, "download_s")]
    assert secs < 0.5  # 3 MB on loopback, without the second before the first byte
    [setup] = [r["value"] for r in _by_metric(doc, "download_setup_s")]
    [rate] = _by_metric(doc, "download_mbps")
    assert setup >= 0.95
    assert "bound" not in rate["labels"]
    assert rate["value"] == pytest.approx(3_000_000 * 8 / secs / 1e6, rel=0.01)


def _fake_tool(path, script):
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_every_pull_the_probe_tried_is_recorded_timeouts_with_their_bound(tmp_path, monkeypatch):
    """Stand-in docker and enroot: `app` pulls, `denied` fails (registry refuses), `slow` hangs until the pull
    timeout. enroot's part-written image bounds its rate; docker keeps its bytes in the daemon, so its timeout (like
    every failure) is in facts.unmeasured with the reason. Before, the failures were only in facts.failures, and the
    grader dropped them whenever another pull worked. (Here without interface counters: the bytes are the image's.)"""
    monkeypatch.setattr(lifecycle, "received_bytes", lambda *_: None)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir / "docker", '#!/bin/sh\ncase "$1" in\n  info) echo 28.2.2 ;;\n'
               '  image) case "$*" in *--format*) echo 5000000 ;; *) exit 1 ;; esac ;;\n'
               '  pull) case "$*" in *denied*) echo "unauthorized: authentication required" >&2; exit 1 ;;\n'
               '               *slow*) exec sleep 60 ;; esac ;;\nesac\n')
    # enroot import --output FILE REF: 2 MiB written, then done, refused, or hanging
    _fake_tool(bindir / "enroot", '#!/bin/sh\ncase "$4" in *denied*) echo "401 Unauthorized" >&2; exit 1 ;; esac\n'
               'head -c 2097152 /dev/zero > "$3"\ncase "$4" in *slow*) exec sleep 60 ;; esac\n')
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    with socket.socket() as registry:
        registry.bind(("127.0.0.1", 0))
        registry.listen(8)
        host = "127.0.0.1:%d" % registry.getsockname()[1]
        images = ["%s/team/%s:1" % (host, name) for name in ("app", "denied", "slow")]
        _, doc = run_probe("container_pull", str(tmp_path / "out"), "r1", "h1", params={
            "engines": ["docker", "enroot"], "images": images, "work_dir": str(tmp_path / "work"),
            "pull_timeout_s": 2, "reach_timeout_s": 1})
    assert doc["status"] == "ok", doc["reason"]
    rates = {(r["labels"]["engine"], r["labels"]["image"].split("/")[-1]): r for r in _by_metric(doc, "pull_mbps")}
    assert sorted(rates) == [("docker", "app:1"), ("enroot", "app:1"), ("enroot", "slow:1")]
    slow = rates[("enroot", "slow:1")]
    assert slow["labels"]["bound"] == "at_most"
    assert slow["labels"]["note"] == "timed out after 2 s with 2097152 bytes received (the part-pulled image)"
    # the bytes over the seconds the pull took (at least the timeout: under load the stop itself takes a while;
    # cc22 took 4.1 s of a 2 s timeout), never a rate over the timeout alone
    [secs] = [r for r in _by_metric(doc, "pull_s")
              if r["labels"]["engine"] == "enroot" and r["labels"]["image"].endswith("/slow:1")]
    assert secs["labels"]["bound"] == "at_least" and secs["value"] >= 2
    assert slow["value"] == pytest.approx(2097152 * 8 / secs["value"] / 1e6, rel=0.01)
    unmeasured = {(u["labels"]["engine"], u["labels"]["image"].split("/")[-1]): u for u in doc["facts"]["unmeasured"]}
    assert sorted(unmeasured) == [("docker", "denied:1"), ("docker", "slow:1"), ("enroot", "denied:1")]
    assert unmeasured[("docker", "denied:1")]["why"] == "rc=1: unauthorized: authentication required"
    assert unmeasured[("docker", "slow:1")]["why"].startswith("timed out after 2 s (docker keeps what it pulled")
    assert unmeasured[("enroot", "denied:1")]["metrics"] == ["pull_s", "pull_mbps", "image_bytes"]
    assert not (tmp_path / "work").exists()


def test_a_model_download_that_times_out_is_measured_and_a_failed_hub_is_kept(tmp_path, monkeypatch):
    """Stand-in hub clients: huggingface_hub writes 1 MiB of a blob and then hangs past timeout_s; modelscope
    refuses. The first is a rate bound (bytes written over the seconds), the second an unmeasured entry; before,
    both were only facts.failures and the artifact an error."""
    fake = tmp_path / "client"
    (fake / "huggingface_hub").mkdir(parents=True)
    (fake / "huggingface_hub" / "__init__.py").write_text(
        "import os, time\n"
        "def snapshot_download(repo_id, cache_dir, allow_patterns=None):\n"
        "    os.makedirs(os.path.join(cache_dir, 'blobs'))\n"
        "    with open(os.path.join(cache_dir, 'blobs', 'e3b0.incomplete'), 'wb') as fh:\n"
        "        fh.write(b'w' * 2**20)\n"
        "    time.sleep(60)\n")
    (fake / "modelscope").mkdir()
    (fake / "modelscope" / "__init__.py").write_text(
        "def snapshot_download(*a, **k):\n    raise RuntimeError('model org/tiny not found on ModelScope')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake))
    with socket.socket() as hub:
        hub.bind(("127.0.0.1", 0))
        hub.listen(4)
        url = "http://127.0.0.1:%d" % hub.getsockname()[1]
        _, doc = run_probe("model_pull", str(tmp_path / "out"), "r1", "h1", params={
            "hubs": ["huggingface", "modelscope"], "model": "org/tiny", "python": sys.executable,
            "hf_endpoint": url, "modelscope_endpoint": url, "timeout_s": 3, "reach_timeout_s": 1,
            "work_dir": str(tmp_path / "work")})
    assert doc["status"] == "ok", doc["reason"]
    [rate] = _by_metric(doc, "download_mbps")
    assert rate["labels"] == {"hub": "huggingface", "model": "org/tiny", "bound": "at_most",
                              "note": "timed out after 3 s with 1048576 bytes received"}
    # the bytes over the seconds the download took (at least the timeout), not over the timeout alone
    [secs] = _by_metric(doc, "process_s")
    assert secs["labels"]["bound"] == "at_least" and secs["value"] >= 3
    assert rate["value"] == pytest.approx(2**20 * 8 / secs["value"] / 1e6, rel=0.01)
    [ms] = doc["facts"]["unmeasured"]
    assert ms["labels"] == {"hub": "modelscope", "model": "org/tiny"} and "download_mbps" in ms["metrics"]
    assert ms["why"].startswith("rc=1: ") and "model org/tiny not found on ModelScope" in ms["why"]
    assert not (tmp_path / "work").exists()


def _fake_vllm(tmp_path, answer=True):
    """A stand-in for `vllm serve MODEL --host H --port P`: loads for a second, then answers /v1/models (or, with
    answer=False, never does)."""
    fake = tmp_path / "vllm"
    body = ("import http.server, json, sys, time\ntime.sleep(1.0)\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        body = json.dumps({'object': 'list', 'data': [{'id': sys.argv[2]}]}).encode()\n"
            "        self.send_response(200); self.end_headers(); self.wfile.write(body)\n"
            "    def log_message(self, *a): pass\n"
            "http.server.HTTPServer((sys.argv[4], int(sys.argv[6])), H).serve_forever()\n") if answer else \
        "import time\nprint('loading weights', flush=True)\ntime.sleep(60)\n"
    _fake_tool(fake, "#!%s\n%s" % (sys.executable, body))
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return fake, model


@pytest.fixture
def gpu_node(monkeypatch):
    gpu = {"backend": "cuda", "model": "NVIDIA H100", "count": 8, "driver": "570", "torch": None}
    monkeypatch.setattr(serve_mod.device_mod, "describe", lambda: (gpu, [], {"gpu_tool": "nvidia-smi"}))


def test_serve_ready_without_an_answer_by_the_deadline_is_a_lower_bound(tmp_path, gpu_node):
    """vllm serve still loading at timeout_s: ready_s is at least timeout_s (bound=at_least), which the grader
    fails against its 120 s line; before, the artifact was an error, which is never scored."""
    fake, model = _fake_vllm(tmp_path, answer=False)
    _, doc = run_probe("serve_ready", str(tmp_path / "out"), "r1", "h1", params={
        "vllm": str(fake), "model_path": str(model), "timeout_s": 2, "work_dir": str(tmp_path / "work")})
    assert doc["status"] == "ok", doc["reason"]
    [ready] = _by_metric(doc, "ready_s")
    assert ready["value"] == 2.0
    assert ready["labels"] == {"model": str(model), "bound": "at_least",
                               "note": "no answer on /v1/models within 2 s (log: serve_ready.log)"}
    assert doc["facts"]["port_from"] == "a free port picked here"


def test_serve_ready_refuses_a_port_something_already_answers_on(tmp_path, gpu_node):
    """A leftover server on the port answers /v1/models before ours starts: timing it gave ready_s ~0 s and a pass.
    The probe refuses, naming the port and what answered; without a port it picks a free one and times its own."""

    class Leftover(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps({"object": "list", "data": [{"id": "leftover-model"}]}).encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Leftover)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = srv.server_address[1]
    fake, model = _fake_vllm(tmp_path)
    try:
        _, doc = run_probe("serve_ready", str(tmp_path / "out"), "r1", "h1", params={
            "vllm": str(fake), "model_path": str(model), "port": port, "timeout_s": 30,
            "work_dir": str(tmp_path / "work")})
    finally:
        srv.shutdown()
        srv.server_close()
    assert doc["status"] == "error" and doc["results"] == []
    assert doc["reason"].startswith("port %d on 127.0.0.1 already answers /v1/models (models: leftover-model) "
                                    "before vllm serve was started: refusing" % port)
    _, doc = run_probe("serve_ready", str(tmp_path / "out"), "r1", "h1", params={
        "vllm": str(fake), "model_path": str(model), "timeout_s": 30, "work_dir": str(tmp_path / "work")})
    assert doc["status"] == "ok", doc["reason"]
    [ready] = [r["value"] for r in _by_metric(doc, "ready_s")]
    assert 1.0 <= ready < 30 and doc["facts"]["port"] > 0
    assert not serve_mod.models_answer(doc["facts"]["port"])


def test_uv_compiles_bytecode_at_install_as_pip_does(tmp_path, wheelhouse, monkeypatch):
    """pip writes .pyc files at install and uv does not unless asked: uv's cold import then compiled every module
    and was graded as if the tier were slow to read them. Both environments now hold the compiled modules right
    after the install (counted before the probe removes them)."""
    from probes.lifecycle import pkg_install  # noqa: PLC0415

    wheels, _ = wheelhouse
    real, pyc = pkg_install.run_cmd, {}

    def counting(argv, **kw):
        res = real(argv, **kw)
        if "install" in argv and "--python" in argv:
            venv = Path(argv[argv.index("--python") + 1]).parents[1]
            pyc["uv" if Path(argv[0]).name == "uv" else "pip"] = len(list(venv.glob("lib/*/site-packages/cmxlife/"
                                                                                    "**/*.pyc")))
        return res

    monkeypatch.setattr(pkg_install, "run_cmd", counting)
    tier_dir = tmp_path / "tier"
    tier_dir.mkdir()
    _, doc = run_probe("pkg_install", str(tmp_path / "out"), "r1", "h1", params={
        "tiers": [{"name": "fast", "path": str(tier_dir)}], "packages": ["cmxlife"], "no_index": True,
        "find_links": [str(wheels)], "import_module": "", "pip_venv_with_pip": False})
    assert doc["status"] == "ok", doc["reason"]
    assert pyc["pip"] >= 150 and pyc["uv"] == pyc["pip"]
    assert "--compile-bytecode" in doc["facts"]["bytecode"]


def test_a_pull_rate_is_the_bytes_received_not_the_images_unpacked_size(tmp_path, monkeypatch):
    """docker reports an image's unpacked size (ubuntu:24.04: about 78 MB for about 30 MB pulled): that size over the
    pull time read 2.6 times the link's rate. The rate is what the node's interfaces received during the pull; a
    pull that received next to nothing (its layers were on the node) gives no rate; a docker pull that timed out is
    bounded by what arrived (before, its bytes were unknown, in the daemon's store)."""
    counter = {"rx": 10_000_000}

    def received_bytes(*_):
        return counter["rx"]

    monkeypatch.setattr(lifecycle, "received_bytes", received_bytes)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    marker = tmp_path / "pulling"
    # the stand-in's pull says which image it pulls; the counter moves by what that image "downloads"
    _fake_tool(bindir / "docker", '#!/bin/sh\ncase "$1" in\n  info) echo 28.2.2 ;;\n'
               '  image) case "$*" in *--format*) echo 78000000 ;; *) exit 1 ;; esac ;;\n'
               '  pull) echo "$3" > %s; case "$3" in *slow*) exec sleep 60 ;; *) sleep 0.5 ;; esac ;;\nesac\n' % marker)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    wire = {"ubuntu": 30_000_000, "cached": 20_000, "slow": 5_000_000}
    real_run_cmd = container_pull.run_cmd

    def run_cmd(argv, **kwargs):
        res = real_run_cmd(argv, **kwargs)
        if "pull" in argv:
            counter["rx"] += next(v for k, v in wire.items() if k in argv[-1])
        return res

    monkeypatch.setattr(container_pull, "run_cmd", run_cmd)
    with socket.socket() as registry:
        registry.bind(("127.0.0.1", 0))
        registry.listen(8)
        host = "127.0.0.1:%d" % registry.getsockname()[1]
        images = ["%s/library/%s:1" % (host, name) for name in ("ubuntu", "cached", "slow")]
        _, doc = run_probe("container_pull", str(tmp_path / "out"), "r1", "h1", params={
            "engines": ["docker"], "images": images, "work_dir": str(tmp_path / "work"), "pull_timeout_s": 2,
            "reach_timeout_s": 1})
    rates = {r["labels"]["image"].split("/")[-1]: r for r in _by_metric(doc, "pull_mbps")}
    assert sorted(rates) == ["slow:1", "ubuntu:1"]
    seconds = {r["labels"]["image"].split("/")[-1]: r["value"] for r in _by_metric(doc, "pull_s")}
    ubuntu = rates["ubuntu:1"]
    assert ubuntu["labels"]["bytes"] == "received"
    assert ubuntu["value"] == pytest.approx(30_000_000 * 8 / seconds["ubuntu:1"] / 1e6, rel=0.01)
    assert [r["value"] for r in _by_metric(doc, "image_bytes")][0] == 78_000_000  # kept, not the rate's bytes
    assert doc["facts"]["skipped"]["docker %s" % images[1]].endswith("its layers were on the node already, no rate")
    slow = rates["slow:1"]
    assert slow["labels"]["bound"] == "at_most"
    assert slow["labels"]["note"] == "timed out after 2 s with 5000000 bytes received (the node's interfaces)"


# /sys/class/net as the kernel lays it out: each entry a link into /sys/devices (devices/virtual/net/<if> for a
# software device, the PCI or virtio device's net/<if> for a NIC, whose `device` links back to it); a bridge has a
# bridge/ directory, a bond bonding/; an upper device a lower_<if> link to each device under it (the bridge to its
# ports, the bond to its members, a VLAN to its parent), each lower an upper_<if> link back, and a bridge port or
# bond member a `master` link (captured from a bridge, veths and a macvlan made in a network namespace).
NIC = {"eth0": "pci0000:00/0000:00:03.0/virtio2", "eno1": "pci0000:00/0000:00:1f.6",
       "ens1f0": "pci0000:16/0000:16:02.0/0000:17:00.0", "ens1f1": "pci0000:16/0000:16:02.0/0000:17:00.1",
       "ib0": "pci0000:3a/0000:3a:00.0/0000:3b:00.0"}
STACKED = {"br0": ("bridge", ["eno1"]), "bond0": ("bonding", ["ens1f0", "ens1f1"]), "eth0.100": (None, ["eth0"]),
           "docker0": ("bridge", ["veth1a2b3c4"])}


def fake_sysfs(root, nics, stacked, virtual=()):
    net = root / "class" / "net"
    net.mkdir(parents=True)
    names = set(nics) | set(stacked) | set(virtual) | {"lo"} | {n for _, lows in stacked.values() for n in lows}
    for name in sorted(names):
        where = ("devices/%s/net/%s" % (nics[name], name)) if name in nics else "devices/virtual/net/%s" % name
        (root / where / "statistics").mkdir(parents=True)
        (root / where / "type").write_text("1\n" if name != "lo" else "772\n")
        if name in nics:
            (root / where / "device").symlink_to(Path("../../..") / Path(nics[name]).name)  # ../../../virtio2
        (net / name).symlink_to(Path("../..") / where)
    for upper, (kind, lowers) in stacked.items():
        if kind:
            (net / upper / kind).mkdir()
        for low in lowers:
            (net / upper / ("lower_" + low)).symlink_to(Path("..") / low)
            (net / low / ("upper_" + upper)).symlink_to(Path("..") / upper)
            if kind:
                (net / low / "master").symlink_to(Path("..") / upper)
                (net / low / ("brport" if kind == "bridge" else "bonding_slave")).mkdir()
    return str(root)


def fake_proc(root, dev, route=None, ipv6_route=None):
    (root / "net").mkdir(parents=True)
    for name, fixture in (("dev", dev), ("route", route), ("ipv6_route", ipv6_route)):
        if fixture:
            (root / "net" / name).write_text((FIXTURES / "proc" / fixture).read_text())
    return str(root)


def test_received_bytes_counts_each_byte_once_on_stacked_interfaces(tmp_path):
    """A node with eno1 under the bridge br0, ens1f0/ens1f1 bonded as bond0, a VLAN eth0.100 on eth0, docker0 with
    a veth, IPoIB: every upper device counts again what its lowers received, so the old sum over all but loopback
    counted bytes two and three times. Counted: the physical interfaces only; a 20 MB download through br0 (eno1
    and br0 both count it) is 20 MB, not 40."""
    proc = fake_proc(tmp_path / "proc", "net_dev_stacked.txt")
    sys_root = fake_sysfs(tmp_path / "sys", NIC, STACKED, virtual=["veth1a2b3c4"])
    counted, facts = lifecycle.wire_interfaces(None, proc, sys_root)
    assert counted == ["eno1", "ens1f0", "ens1f1", "eth0", "ib0"]
    assert facts["rule"] == "the physical interfaces (%s/class/net/<if>/device)" % sys_root and facts["route"] is None
    assert facts["left_out"] == {
        "bond0": "a bond (its members count the same bytes)", "br0": "a bridge (its ports count the same bytes)",
        "docker0": "a bridge (its ports count the same bytes)", "eth0.100": "stacked on eth0 (counts the same bytes)",
        "veth1a2b3c4": "virtual (no device)"}
    before = lifecycle.received_bytes(None, proc, sys_root)
    assert before == 4000000000 + 2500000000 + 1800000000 + 1700000000 + 600000000
    dev = Path(proc) / "net" / "dev"
    text = dev.read_text()
    for name, old, new in (("eno1", 2500000000, 2520000000), ("br0", 2400000000, 2420000000)):
        line = next(x for x in text.splitlines() if x.split(":")[0].strip() == name)
        text = text.replace(line, line.replace(str(old), str(new)))
    dev.write_text(text)
    assert lifecycle.received_bytes(None, proc, sys_root) - before == 20_000_000
    assert lifecycle.received_bytes(["br0"], proc) - 2400000000 == 20_000_000
    assert lifecycle.received_bytes(None, str(tmp_path / "missing"), sys_root) is None


def test_the_interface_routed_to_the_registry_is_the_one_counted(tmp_path):
    """The routing table says where a registry's answer comes in: 10.20.x on bond0 (the bond, not its members: both
    count), 10.100.x on the VLAN, the rest by the default route over br0 (metric 0 beats eth0's 100); the longest
    prefix wins. IPv6 too, and a reject route or a loopback address gives none (then the physical rule)."""
    proc = fake_proc(tmp_path / "proc", "net_dev_stacked.txt", "net_route_stacked.txt", "net_ipv6_route_stacked.txt")
    sys_root = fake_sysfs(tmp_path / "sys", NIC, STACKED, virtual=["veth1a2b3c4"])
    route = lifecycle.route_interface
    assert [route(a, proc) for a in ("10.20.4.5", "10.30.0.9", "10.100.7.7", "10.0.3.3", "151.101.64.133",
                                     "192.168.1.20", "172.17.0.2")] == [
        "bond0", "bond0", "eth0.100", "eth0", "br0", "br0", "docker0"]
    assert route("2001:db8:100::9", proc) == "eth0.100" and route("2606:4700::6810:84e5", proc) == "br0"
    assert route("127.0.0.1", proc) is None and route("::1", proc) is None
    assert route("10.66.1.1", proc) == "br0"  # the reject route is passed over: the default route holds it
    counted, facts = lifecycle.wire_interfaces("10.20.4.5", proc, sys_root)
    assert counted == ["bond0"] and facts["route"] == {"address": "10.20.4.5", "interface": "bond0"}
    assert facts["rule"] == "the interface the routing table sends 10.20.4.5 through"
    assert facts["left_out"]["ens1f0"] == "not the route to 10.20.4.5"
    assert lifecycle.received_bytes(counted, proc) == 3500000000
    # no routing table to read: the physical interfaces, the route recorded as not found
    os.remove(os.path.join(proc, "net", "route"))
    counted, facts = lifecycle.wire_interfaces("10.20.4.5", proc, sys_root)
    assert counted == ["eno1", "ens1f0", "ens1f1", "eth0", "ib0"]
    assert facts["route"] == {"address": "10.20.4.5", "interface": None}


def test_a_container_or_vm_with_one_interface_still_counts_it(tmp_path):
    """A VM's virtio NIC has a device; a container's eth0 is a veth with none, and no physical interface is in its
    namespace: it is counted (not an upper device). A veth under a bridge in a namespace: the port, not the bridge."""
    proc = fake_proc(tmp_path / "proc", "net_dev_container.txt")
    vm = fake_sysfs(tmp_path / "vm", {"eth0": NIC["eth0"]}, {})
    assert lifecycle.wire_interfaces(None, proc, vm)[0] == ["eth0"]
    container = fake_sysfs(tmp_path / "ct", {}, {}, virtual=["eth0"])
    counted, facts = lifecycle.wire_interfaces(None, proc, container)
    assert counted == ["eth0"] and facts["left_out"] == {}
    assert facts["rule"] == "no physical interface: those that are not a bridge, a bond or stacked on another"
    assert lifecycle.received_bytes(None, proc, container) == 734003200
    # the reviewer's namespace: a veth port of br0, both counting the same download
    (Path(proc) / "net" / "dev").write_text((FIXTURES / "proc" / "net_dev_container.txt").read_text() +
                                            "   br0:734003200  500000    0    0    0     0          0         0 "
                                            "       0       0    0    0    0     0       0          0\n")
    bridged = fake_sysfs(tmp_path / "ns", {}, {"br0": ("bridge", ["eth0"])})
    counted, facts = lifecycle.wire_interfaces(None, proc, bridged)
    assert counted == ["eth0"] and facts["left_out"] == {"br0": "a bridge (its ports count the same bytes)"}
    # no sysfs at all: every interface but loopback, said so
    counted, facts = lifecycle.wire_interfaces(None, proc, str(tmp_path / "nosys"))
    assert counted == ["br0", "eth0"] and facts["rule"].endswith("not readable: every interface but loopback")


def test_a_pull_through_a_bridge_is_counted_once_and_the_artifact_says_which_interfaces(tmp_path, monkeypatch):
    """container_pull on the stacked node (proc_root/sys_root point at the fake trees): a 30 MB pull that arrives
    on eno1 and through br0 (both count it) is 30 MB of wire bytes, not 60; facts.rx_interfaces names what was
    counted, by which rule, and why the others were not."""
    proc = fake_proc(tmp_path / "proc", "net_dev_stacked.txt")
    sys_root = fake_sysfs(tmp_path / "sys", NIC, STACKED, virtual=["veth1a2b3c4"])
    dev = Path(proc) / "net" / "dev"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_tool(bindir / "docker", '#!/bin/sh\ncase "$1" in\n  info) echo 28.2.2 ;;\n'
               '  image) case "$*" in *--format*) echo 78000000 ;; *) exit 1 ;; esac ;;\n'
               '  pull) sleep 0.5 ;;\nesac\n')
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    real_run_cmd = container_pull.run_cmd

    def run_cmd(argv, **kwargs):
        res = real_run_cmd(argv, **kwargs)
        if "pull" in argv:
            text = dev.read_text()
            for name, old in (("eno1", 2500000000), ("br0", 2400000000)):
                line = next(x for x in text.splitlines() if x.split(":")[0].strip() == name)
                text = text.replace(line, line.replace(str(old), str(old + 30_000_000)))
            dev.write_text(text)
        return res

    monkeypatch.setattr(container_pull, "run_cmd", run_cmd)
    with socket.socket() as registry:
        registry.bind(("127.0.0.1", 0))
        registry.listen(8)
        host = "127.0.0.1:%d" % registry.getsockname()[1]
        _, doc = run_probe("container_pull", str(tmp_path / "out"), "r1", "h1", params={
            "engines": ["docker"], "images": ["%s/library/ubuntu:24.04" % host], "work_dir": str(tmp_path / "work"),
            "reach_timeout_s": 1, "proc_root": proc, "sys_root": sys_root})
    assert doc["status"] == "ok", doc["reason"]
    assert [r["value"] for r in _by_metric(doc, "wire_bytes")] == [30_000_000]
    [secs] = [r["value"] for r in _by_metric(doc, "pull_s")]
    [rate] = _by_metric(doc, "pull_mbps")
    assert rate["value"] == pytest.approx(30_000_000 * 8 / secs / 1e6, rel=0.01)
    seen = doc["facts"]["rx_interfaces"][host]
    assert seen["counted"] == ["eno1", "ens1f0", "ens1f1", "eth0", "ib0"]
    assert seen["route"] == {"address": "127.0.0.1", "interface": None}  # loopback: no route, the physical rule
    assert seen["rule"].startswith("the physical interfaces")
    assert seen["left_out"]["br0"] == "a bridge (its ports count the same bytes)"
    # the report says where the bytes were counted (the artifact's own facts, beside the pulls table)
    from reports.load import load_run
    from reports.phases.lifecycle import section

    run_dir = tmp_path / "run"
    (run_dir / "artifacts" / "h1").mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"hosts": ["h1"], "id": "r1", "profile": "quick"}))
    (run_dir / "artifacts" / "h1" / "container_pull.json").write_text(json.dumps(doc))
    md = section.render(load_run(str(run_dir)), [], None)
    assert "| h1 | %s | eno1, ens1f0, ens1f1, eth0, ib0 | the physical interfaces" % host in md, md
    assert "br0: a bridge (its ports count the same bytes)" in md
