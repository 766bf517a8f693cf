"""Audit checks judged on what the node's own probe code read from real outputs: a CUDA toolkit below the security
minimum on a login node without a GPU, the Slurm node state and GRES GPU count from real `scontrol show node`
captures (multi-line, after a prompt), and whether a short container or job step reaches the GPUs (stand-in docker,
srun and scontrol that print recorded outputs)."""

import shutil
from pathlib import Path

import pytest
from test_audit_grade import audit_rows, by, cpu_node, h100_node, mi300x_node, write_run

from probes.audit import sched as audit_sched
from probes.audit import software as audit_software
from probes.audit.collect import Collector
from reports.phases.audit.scheduler import gres_gpu_count

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SOFTWARE = FIX / "audit" / "software"
CAPTURES = FIX / "slurm" / "captures"


def _bin(tmp_path, monkeypatch, scripts):
    """Stand-in tools (sh scripts) and `cat` alone on PATH: none of this machine's docker, podman, apptainer, srun."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        (bindir / name).write_text("#!/bin/sh\n" + body)
        (bindir / name).chmod(0o755)
    if not (bindir / "cat").exists():
        (bindir / "cat").symlink_to(shutil.which("cat"))
    monkeypatch.setenv("PATH", str(bindir))


def _graded(tmp_path, nodes, checks):
    rows = by(audit_rows(write_run(tmp_path, nodes)))
    return {(cid, host): r for (cid, host), r in rows.items() if cid in checks}


# ------------------------------------------------------------------------------- security minimum on any host


def test_cuda_toolkit_below_the_minimum_fails_on_a_login_node_without_a_gpu(tmp_path):
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    (cuda / "version.json").write_text((SOFTWARE / "cuda-11.5_version.json").read_text())
    login = cpu_node()
    toolkit, source = audit_software.cuda_toolkit(str(cuda))
    login["libraries"].update(cuda_toolkit=toolkit, cuda_toolkit_source=source)
    login["tools"]["nvcc"] = {"version": audit_software.parse_nvcc((SOFTWARE / "cuda-11.5_nvcc-version.txt")
                                                                   .read_text()), "rc": 0}
    rows = _graded(tmp_path, {"login": login, "bare": cpu_node()}, {"audit.sw.cuda_toolkit"})
    row = rows[("audit.sw.cuda_toolkit", "login")]
    assert (row["status"], row["observed"]) == ("fail", "11.5.2")
    assert row["expected"].startswith(">= 13.1 (table ")
    bare = rows[("audit.sw.cuda_toolkit", "bare")]
    assert bare["status"] == "skip" and bare["reason"].startswith("not installed: no CUDA toolkit on the node")


# ------------------------------------------------------------------------------- Slurm: state and GRES count


@pytest.mark.parametrize("gres, count", [
    ("gpu:8", 8), ("gpu:h100:8", 8), ("gpu:h100:8(S:0-1)", 8), ("gpu:a100:4,gpu:a10:2", 6),
    ("gpu:tesla:2(S:0,1),gpu:k80:1", 3), ("gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600", 6), ("(null)", None),
    ("mps:100", None), ("", None)])
def test_gres_gpu_count(gres, count):
    assert gres_gpu_count(gres) == count


def _sched_facts(tmp_path, monkeypatch, capture):
    """The probe's Slurm section on a node whose scontrol prints a real multi-line capture (after its prompt)."""
    _bin(tmp_path, monkeypatch, {
        "scontrol": 'case "$1 $2" in\n  "show config") cat "%s";;\n  "show node") cat "%s";;\n  *) exit 1;;\nesac\n'
                    % (FIX / "audit" / "scontrol-show-config_h100.txt", CAPTURES / capture),
        "srun": 'echo "MPI plugin types are..."; echo "        none"; echo "        pmix"\n'})
    monkeypatch.setenv("SLURM_CONF", str(FIX / "audit" / "slurm.conf_flat_topology"))
    c = Collector(str(tmp_path))
    facts = audit_sched.collect(c)
    assert c.sources["slurm"]["status"] == "ok"
    return facts


@pytest.mark.parametrize("capture, state, gres, status_state, status_gres, gres_observed", [
    # drained, not down: the multi-line record's State line
    ("scontrol_show_node_twcc_v100.txt", "IDLE+DRAIN", "gpu:8", "fail", "pass",
     "Gres=gpu:8: 8 GPU(s) for Slurm, 8 on the node"),
    # powered down by power saving: Slurm powers it up for the next job (no "DOWN" in the word counts)
    ("scontrol_show_node_aws_g7e_powered_down.txt", "IDLE+CLOUD+POWERED_DOWN", "gpu:rtxproserver6000:8", "pass",
     "pass", "Gres=gpu:rtxproserver6000:8: 8 GPU(s) for Slurm, 8 on the node"),
    ("scontrol_show_node_h100_pcie.txt", "IDLE+DRAIN", "gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600", "fail", "fail",
     "Gres=gpu:nvidiah100pcie:6,mps:nvidiah100pcie:600: 6 GPU(s) for Slurm, 8 on the node"),
    ("scontrol_show_node_gentoo.txt", "IDLE+DRAIN", "(null)", "fail", "fail",
     "Gres=(null): 0 GPU(s) for Slurm, 8 on the node"),
])
def test_node_state_and_gres_from_real_scontrol_captures(tmp_path, monkeypatch, capture, state, gres, status_state,
                                                         status_gres, gres_observed):
    facts = _sched_facts(tmp_path, monkeypatch, capture)
    assert (facts["node_state"], facts["node_gres"]) == (state, gres)
    assert facts["node_phase"] == ("available" if status_state == "pass" else "drained")
    node = h100_node()  # 8 H100 from the recorded nvidia-smi -q
    node["slurm"].update({k: facts[k] for k in ("node_state", "node_phase", "node_gres")})
    login = cpu_node()
    login["slurm"] = dict(node["slurm"])
    login["sources"]["slurm"] = {"status": "ok", "reason": None}
    rows = _graded(tmp_path, {"gpu1": node, "login": login}, {"audit.slurm.node_state", "audit.slurm.gres_gpus"})
    st = rows[("audit.slurm.node_state", "gpu1")]
    assert (st["status"], st["observed"]) == (status_state, state)
    if status_state == "fail":
        assert st["reason"] == "drained: Slurm places no new job on this node"
    gr = rows[("audit.slurm.gres_gpus", "gpu1")]
    assert (gr["status"], gr["observed"]) == (status_gres, gres_observed)
    assert rows[("audit.slurm.gres_gpus", "login")]["reason"] == "not applicable: needs Slurm and GPUs on the host"


# ------------------------------------------------------------------------------- containers reach the GPUs


H100_L = (FIX / "healthprobe" / "h100_8gpus.txt").read_text().splitlines()[2:10]
H100_7 = [line for line in (FIX / "healthprobe" / "h100_7gpus.txt").read_text().splitlines()
          if line.startswith("GPU ")]
DOCKER_IMAGES = 'printf "nvcr.io/nvidia/pytorch:24.05-py3\\nalpine:3.19\\n<none>:<none>\\n"'


@pytest.fixture
def gpu_node_devices(tmp_path, monkeypatch):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    monkeypatch.setattr(audit_software, "GPU_DEVICES", str(tmp_path / "dev" / "nvidia[0-9]*"))


def _container_facts(tmp_path, monkeypatch, scripts, **params):
    _bin(tmp_path, monkeypatch, scripts)
    c = Collector(str(tmp_path))
    section = audit_software.collect_container_gpu(c, **params)
    return section, c.sources["container_gpu"]


def _docker(run_body):
    return {"docker": 'case "$1" in\n  image) %s;;\n  run) %s;;\nesac\n' % (DOCKER_IMAGES, run_body)}


def _grade_container(tmp_path, section, source):
    node = h100_node()
    if section is not None:
        node["container_gpu"] = section
    node["sources"]["container_gpu"] = source
    rows = _graded(tmp_path, {"gpu1": node}, {"audit.sw.nvidia_container_runtime"})
    return rows[("audit.sw.nvidia_container_runtime", "gpu1")]


def test_a_local_image_lists_every_gpu(tmp_path, monkeypatch, gpu_node_devices):
    lines = tmp_path / "smi-L.txt"
    lines.write_text("\n".join(H100_L) + "\n")
    section, source = _container_facts(tmp_path, monkeypatch,
                                       _docker('echo "$@" > %s/argv; cat %s' % (tmp_path, lines)))
    [a] = section["attempts"]
    # the local image with a C library, no network, removed, never pulled; nvidia-smi in place of the entrypoint
    assert (tmp_path / "argv").read_text().split() == [
        "run", "--rm", "--pull=never", "--network", "none", "--gpus", "all", "--entrypoint", "nvidia-smi",
        "nvcr.io/nvidia/pytorch:24.05-py3", "-L"]
    assert a["started"] and len(a["gpus"]) == 8 and a["gpus"][0] == {
        "index": 0, "name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-6513270e-269e-0d37-f2a7-4de452e6b438"}
    assert source["status"] == "ok" and section["not_tried"] == []  # the first that reached the GPUs ends the search
    row = _grade_container(tmp_path, section, source)
    assert (row["status"], row["observed"]) == ("pass", "docker (nvcr.io/nvidia/pytorch:24.05-py3): 8 of 8 GPU(s)")


def test_docker_without_the_toolkit_or_a_missing_gpu_fails(tmp_path, monkeypatch, gpu_node_devices):
    err = SOFTWARE / "docker-run-gpus_no_toolkit.txt"
    section, source = _container_facts(tmp_path, monkeypatch, _docker('cat "%s" >&2; exit 125' % err))
    assert section["attempts"][0]["started"] and section["attempts"][0]["rc"] == 125
    assert "slurm: srun not installed" in section["not_tried"]
    row = _grade_container(tmp_path, section, source)
    assert (row["status"], row["observed"]) == (
        "fail", 'docker (nvcr.io/nvidia/pytorch:24.05-py3): 0 of 8 GPU(s): docker: Error response from daemon: '
                'could not select device driver "" with capabilities: [[gpu]].')
    seven = tmp_path / "smi-7.txt"
    seven.write_text("\n".join(H100_7) + "\n")
    section, source = _container_facts(tmp_path, monkeypatch, _docker('cat %s' % seven))
    row = _grade_container(tmp_path / "b", section, source)
    assert (row["status"], row["observed"]) == ("fail", "docker (nvcr.io/nvidia/pytorch:24.05-py3): 7 of 8 GPU(s): "
                                                        "fewer listed")


def test_a_one_gpu_job_step_on_a_slurm_node(tmp_path, monkeypatch, gpu_node_devices):
    """No container runtime; scontrol prints the recorded one-line states of four nodes, this one IDLE."""
    monkeypatch.setattr(audit_software.socket, "gethostname", lambda: "cmxd-node1.cluster")
    section, source = _container_facts(tmp_path, monkeypatch, {
        "scontrol": 'cat "%s"\n' % (FIX / "slurm" / "show_node_mixed.txt"),
        "srun": 'echo "$@" > %s/argv; echo "%s"\n' % (tmp_path, H100_L[0])})
    assert (tmp_path / "argv").read_text().split() == [
        "--gres=gpu:1", "--nodelist=cmxd-node1", "--nodes=1", "--ntasks=1", "--immediate=20", "--time=5",
        "--job-name=clustermax-assess-audit", "nvidia-smi", "-L"]
    assert section["not_tried"] == ["docker: not installed", "podman: not installed", "apptainer: not installed"]
    row = _grade_container(tmp_path, section, source)
    assert (row["status"], row["observed"]) == ("pass", "Slurm job step (srun --gres=gpu:1): 1 of 1 GPU(s)")


def test_nothing_can_start_a_container_skips_with_every_reason(tmp_path, monkeypatch, gpu_node_devices):
    monkeypatch.setattr(audit_software.socket, "gethostname", lambda: "cmxd-node3")
    section, source = _container_facts(tmp_path, monkeypatch, {
        "docker": 'case "$1" in\n  image) printf "alpine:3.19\\n";;\nesac\n',
        "scontrol": 'cat "%s"\n' % (FIX / "slurm" / "show_node_mixed.txt"), "srun": "exit 99\n"})
    assert source["status"] == "not_applicable" and section["attempts"] == []
    row = _grade_container(tmp_path, section, source)
    assert row["status"] == "skip" and row["reason"] == (
        "not applicable: no container or job step could start here: docker: no local image that can run nvidia-smi "
        "(alpine:3.19); set audit_container_image; podman: not installed; apptainer: not installed; slurm: the node "
        "is down (DOWN+DRAIN): a job step cannot start")


def test_no_gpu_or_switched_off_is_not_applicable_and_an_older_audit_is_not_measured(tmp_path, monkeypatch):
    monkeypatch.setattr(audit_software, "GPU_DEVICES", str(tmp_path / "none" / "nvidia[0-9]*"))
    monkeypatch.setattr(audit_software, "AMD_GPU_DEVICES", str(tmp_path / "none" / "kfd"))
    c = Collector(str(tmp_path))
    assert audit_software.collect_container_gpu(c) is None
    assert c.sources["container_gpu"]["reason"] == ("no NVIDIA GPU device (/dev/nvidia*) nor AMD GPU device (/dev/kfd) "
                                                    "on this node")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    monkeypatch.setattr(audit_software, "GPU_DEVICES", str(tmp_path / "dev" / "nvidia[0-9]*"))
    assert audit_software.collect_container_gpu(c, enabled=False) is None
    assert c.sources["container_gpu"]["reason"] == "audit_container_gpu is false: no container was started"
    rows = _graded(tmp_path, {"gpu1": h100_node()}, {"audit.sw.nvidia_container_runtime"})
    row = rows[("audit.sw.nvidia_container_runtime", "gpu1")]
    assert row["status"] == "skip" and row["reason"] == ("not measured: this audit started no container (a probe "
                                                         "older than this check)")


def test_an_amd_node_runs_amd_smi_list_in_a_rocm_image_with_kfd_and_dri(tmp_path, monkeypatch):
    """An AMD node (/dev/kfd, no /dev/nvidia*): docker gets the ROCm device files and runs the image's own amd-smi
    (the real `amd-smi list` capture of 2 MI300X GPUs: tests/fixtures/amd-smi/README.md)."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").write_text("")
    monkeypatch.setattr(audit_software, "GPU_DEVICES", str(tmp_path / "dev" / "nvidia[0-9]*"))
    monkeypatch.setattr(audit_software, "AMD_GPU_DEVICES", str(tmp_path / "dev" / "kfd"))
    listing = FIX / "amd-smi" / "list_text_amdsmi_changelog.txt"
    section, source = _container_facts(tmp_path, monkeypatch, {"docker": (
        'case "$1" in\n  image) printf "alpine:3.19\\nrocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0\\n'
        '";;\n  run) echo "$@" > %s/argv; cat "%s";;\nesac\n' % (tmp_path, listing))})
    assert (tmp_path / "argv").read_text().split() == [
        "run", "--rm", "--pull=never", "--network", "none", "--device=/dev/kfd", "--device=/dev/dri", "--group-add",
        "video", "--entrypoint", "amd-smi", "rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0", "list"]
    [a] = section["attempts"]
    assert section["vendor"] == "amd" and a["started"] and [g["name"] for g in a["gpus"]] == [
        "0000:23:00.0", "0000:26:00.0"]
    # graded against the node's AMD GPUs: the MI300X node of the recorded amd-smi static has 8
    node = mi300x_node()
    node["container_gpu"], node["sources"]["container_gpu"] = section, source
    row = _graded(tmp_path, {"amd1": node}, {"audit.sw.nvidia_container_runtime"})[
        ("audit.sw.nvidia_container_runtime", "amd1")]
    assert (row["status"], row["observed"]) == (
        "fail", "docker (rocm/pytorch:rocm6.4_ubuntu24.04_py3.12_pytorch_release_2.6.0): 2 of 8 GPU(s): fewer listed")
    assert row["expected"].endswith("lists the node's GPUs with amd-smi list")
    # a node whose two GPUs are the two listed (the first two of the recorded MI300X node) passes
    node["gpu_amd"]["gpus"] = node["gpu_amd"]["gpus"][:2]
    row = _graded(tmp_path / "two", {"amd1": node}, {"audit.sw.nvidia_container_runtime"})[
        ("audit.sw.nvidia_container_runtime", "amd1")]
    assert row["status"] == "pass"


def test_an_amd_image_without_amd_smi_did_not_answer(tmp_path, monkeypatch):
    """docker's own message when the image has no amd-smi: the image cannot test the GPUs, so nothing started."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kfd").write_text("")
    monkeypatch.setattr(audit_software, "GPU_DEVICES", str(tmp_path / "dev" / "nvidia[0-9]*"))
    monkeypatch.setattr(audit_software, "AMD_GPU_DEVICES", str(tmp_path / "dev" / "kfd"))
    section, source = _container_facts(tmp_path, monkeypatch, {"docker": (
        'case "$1" in\n  image) printf "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime\\n";;\n  run) echo '
        '"docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI '
        'runtime create failed: runc create failed: unable to start container process: exec: \\"amd-smi\\": '
        'executable file not found in \\$PATH: unknown." >&2; exit 127;;\nesac\n')})
    [a] = section["attempts"]
    assert a["started"] is False and source["status"] == "not_applicable"
    assert "executable file not found" in source["reason"]
