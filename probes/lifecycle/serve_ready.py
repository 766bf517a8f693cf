"""serve_ready: seconds from starting `vllm serve` on a model until its OpenAI API answers GET /v1/models (seed,
"Lifecycle": 10-40 s on good providers, over 2 minutes on some).

GPU nodes only (nvidia-smi or amd-smi must list a GPU) and only where vLLM is installed (`vllm` next to the node's
Python or on PATH); otherwise skipped with the reason. The model is `model_path` (a directory already on the node,
e.g. on shared storage, which is what the seed times) or else `model` downloaded with huggingface_hub into a fresh
directory first (download_s, not part of ready_s). The server listens on 127.0.0.1 only, is stopped with its whole
process group as soon as it answered (or at `timeout_s`), and the downloaded model is removed.

The port is `port` when given (lifecycle_serve_port), else a free one the kernel picks. Something already
listening there before vllm serve starts (a leftover server, another run's) makes the probe refuse with an error
naming the port and what answered: the readiness loop would otherwise time that server, ~0 s, as ours.
No answer within `timeout_s` is a measurement: ready_s = timeout_s with the labels bound=at_least and a note, which
the grader judges as "at least that"; a server that exits first is an error naming its log's last lines.
"""

import json
import os
import shutil
import socket
import sys
import time
import urllib.error
import urllib.request

from probes.common import device as device_mod
from probes.common import tiers as storage_tier
from probes.common.command import run_cmd
from probes.common.procs import Children
from probes.common.serving import models_answer
from probes.lifecycle import common as lifecycle
from probes.params import Param, Params

PARAMS = Params(
    offline=Param(str, "", "why the internet cannot be used: when not empty and no model_path is given, the probe "
                           "is skipped with this reason"),
    model=Param(str, "Qwen/Qwen2.5-0.5B-Instruct", "model downloaded from Hugging Face when no model_path is given"),
    model_path=Param(str, "", "a model directory on the node to serve"),
    python=Param(str, None, "the Python whose vllm is used (default: this one)"),
    vllm=Param(str, None, "the vllm executable (default: beside the Python, else on PATH)"),
    port=Param(int, 0, "port vllm serve listens on (127.0.0.1; 0: a free one picked by the probe)"),
    args=Param(list, [], "extra vllm serve arguments"),
    timeout_s=Param(float, 600, "seconds until /v1/models must answer"),
    download_timeout_s=Param(float, 1800, "seconds for the model download"),
    hf_endpoint=Param(str, "", "Hugging Face endpoint (default: $HF_ENDPOINT, else https://huggingface.co)"),
    reach_timeout_s=Param(float, 3, "seconds for the TCP connection that checks the hub is reachable"),
    work_dir=Param(str, None, "where the download goes (default: lifecycle/serve beside the artifacts' directory)"),
)
DOWNLOAD = ("import sys; from huggingface_hub import snapshot_download; "
            "print(snapshot_download(repo_id=sys.argv[1], local_dir=sys.argv[2]))")


def find_vllm(explicit, python):
    if explicit:
        path = explicit if os.path.isabs(explicit) else shutil.which(explicit)
        return path if path and os.access(path, os.X_OK) else None
    near = os.path.join(os.path.dirname(python), "vllm")
    return near if os.access(near, os.X_OK) else shutil.which("vllm")


def free_port():
    """A port nothing listens on now (the kernel's pick), as the inference phase's engine gets its own."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_taken(port):
    """What already listens on 127.0.0.1:port, in words ("already answers /v1/models (models: x)"), or None."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=2.0) as resp:  # noqa: S310
            body = resp.read(65536)
        try:
            models = [m.get("id") for m in json.loads(body).get("data") or []]
        except (ValueError, AttributeError):
            models = None
        if models is not None:
            return "already answers /v1/models (models: %s)" % (", ".join(map(str, models)) or "none")
        return "already answers HTTP (GET /v1/models: %d)" % resp.status
    except urllib.error.HTTPError as exc:
        return "already answers HTTP (GET /v1/models: %d)" % exc.code
    except (OSError, ValueError):
        pass
    with socket.socket() as sock:
        sock.settimeout(2.0)
        if sock.connect_ex(("127.0.0.1", port)) == 0:
            return "is already in use (a TCP listener that is not an OpenAI API)"
    return None


def _tail_file(path):
    try:
        with open(path, errors="replace") as fh:
            lines = [x for x in fh.read().splitlines() if x.strip()]
        return " | ".join(lines[-3:])[-600:]
    except OSError:
        return ""


def run(art, p, out_dir):
    python = p["python"] or sys.executable
    dev, _, dev_facts = device_mod.describe()
    art.device.update(dev)
    if dev["backend"] == "cpu":
        tool = dev_facts["gpu_tool"]
        why = dev_facts.get("gpu_error") or ("no GPU listed by %s" % tool if tool != "none"
                                             else "neither nvidia-smi nor amd-smi found")
        art.skip("no GPU on this node (%s): vllm serve needs one" % why)
        return
    vllm = find_vllm(p["vllm"], python)
    if not vllm:
        art.skip("vLLM is not installed (no vllm next to %s nor on PATH)" % python)
        return
    work_root = p["work_dir"] or os.path.join(os.path.dirname(os.path.abspath(out_dir)), "lifecycle", "serve")
    work = os.path.join(work_root, "serve")
    children = Children()
    try:
        os.makedirs(work, exist_ok=True)
        model = p["model_path"]
        if model and not os.path.isdir(model):
            art.skip("model_path %s is not a directory on this node" % model)
            return
        if not model and p["offline"]:
            art.skip("no model_path given, and %s" % p["offline"])
            return
        if not model:
            url = p["hf_endpoint"] or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
            ok, why = lifecycle.reachable(url, p["reach_timeout_s"])
            if not ok:
                art.skip("no model_path given and %s not reachable to download %s: %s" % (url, p["model"], why))
                return
            model = os.path.join(work, "model")
            env = dict(os.environ, HF_HOME=os.path.join(work, "hf-home"), HF_HUB_DISABLE_TELEMETRY="1")
            if p["hf_endpoint"]:
                env["HF_ENDPOINT"] = p["hf_endpoint"]
            t0 = time.perf_counter()
            res = run_cmd([python, "-c", DOWNLOAD, p["model"], model], timeout=p["download_timeout_s"], env=env)
            if res.rc != 0:
                why = "timed out" if res.rc is None else res.stderr[-400:]
                art.error("download of %s failed: %s" % (p["model"], why))
                return
            art.add("download_s", round(time.perf_counter() - t0, 3), "s", model=p["model"])
        port = p["port"] or free_port()
        art.facts.update({"model": model, "vllm": vllm, "port": port,
                          "port_from": "lifecycle_serve_port" if p["port"] else "a free port picked here"})
        taken = port_taken(port)
        if taken:
            # our server could not bind it, and the wait below would time the one already there (a leftover, or
            # another run's): ready_s ~0, a pass that measured nothing
            art.error("port %d on 127.0.0.1 %s before vllm serve was started: refusing to time another server "
                      "(set lifecycle_serve_port to a free port, or stop what listens there)" % (port, taken))
            return
        log = os.path.join(out_dir, "serve_ready.log")
        argv = [vllm, "serve", model, "--host", "127.0.0.1", "--port", str(port)] + p["args"]
        deadline_s = p["timeout_s"]
        t0 = time.perf_counter()
        proc = children.start(argv, log_path=log)
        art.raw.append("serve_ready.log")
        while True:
            elapsed = time.perf_counter() - t0
            if models_answer(port):
                art.add("ready_s", round(elapsed, 3), "s", model=p["model_path"] or p["model"])
                return
            if proc.poll() is not None:
                art.error("vllm serve exited with rc=%s after %.1f s: %s" % (proc.returncode, elapsed,
                                                                           _tail_file(log)))
                return
            if elapsed > deadline_s:
                # still starting at the deadline: a measurement, ready_s above the deadline (a lower bound the
                # grader judges: lifecycle.serve_ready fails anything over 120 s), not an error left unscored
                art.add("ready_s", float(deadline_s), "s", model=p["model_path"] or p["model"], bound="at_least",
                        note="no answer on /v1/models within %g s (log: serve_ready.log)" % deadline_s)
                return
            time.sleep(0.5)
    finally:
        children.stop_all(grace=10.0)
        storage_tier.remove_tree(work, stop_at=work_root)
