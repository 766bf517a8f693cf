"""Audit checks judged on what the node's own probe code read from real outputs: a CUDA toolkit below the security
minimum on a login node without a GPU, the Slurm node state and GRES GPU count from real `scontrol show node`
captures (multi-line, after a prompt), and whether a short container or job step reaches the GPUs (stand-in docker,
srun and scontrol that print recorded outputs)."""

import os
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


# ------------------------------------------------------------------------------- configless Slurm: scontrol only

CONFIGLESS = FIX / "audit" / "slurm_configless"  # real `scontrol show config` captures: README.md names the sources
SCONTROL_25 = (CONFIGLESS / "scontrol-show-config_25.11.4_docker.txt").read_text()
# What scontrol prints on a node with no slurm.conf whose DNS has no _slurmctld._tcp SRV record (Slurm >= 20.02; the
# same three lines sinfo/sbatch print, each prefixed by the tool's name)
NO_CONFIG_SOURCE = ("scontrol: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n"
                    "scontrol: error: fetch_config: DNS SRV lookup failed\n"
                    "scontrol: fatal: Could not establish a configuration source\n")


def _no_slurm_conf(monkeypatch):
    """No slurm.conf on this node: none of SLURM_CONFS exists (nor slurmd's conf-cache), $SLURM_CONF unset."""
    real_exists = os.path.exists
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setattr(audit_sched.os.path, "exists", lambda p: not str(p).startswith(
        ("/etc/slurm", "/usr/local/etc/slurm", "/run/slurm", "/var/spool/slurmd")) and real_exists(p))


def _configless_facts(tmp_path, monkeypatch, show_config, capture="scontrol_show_node_twcc_v100.txt"):
    _no_slurm_conf(monkeypatch)
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "show_config.txt").write_text(show_config)
    _bin(tmp_path, monkeypatch, {
        "scontrol": 'case "$1 $2" in\n  "show config") cat "%s";;\n  "show node") cat "%s";;\n  *) exit 1;;\nesac\n'
                    % (tmp_path / "show_config.txt", CAPTURES / capture),
        "srun": 'echo "MPI plugin types are..."; echo "        none"; echo "        pmix"\n'})
    c = Collector(str(tmp_path))
    return audit_sched.collect(c), c


def test_a_configless_node_without_a_cached_slurm_conf_records_scontrol_show_config(tmp_path, monkeypatch):
    """slurmd --conf-server (or DNS SRV) and no cached copy: the probe records `scontrol show config` as printed, with
    its exit status, for the controller to read; the node's own facts (state, GRES, srun's MPI) as on any node."""
    facts, c = _configless_facts(tmp_path, monkeypatch, SCONTROL_25)
    assert c.sources["slurm"]["status"] == "ok"
    assert facts["slurm_conf"] is None and facts["source"] == "scontrol" and facts["configless"] is True
    assert facts["scontrol_config"]["rc"] == 0 and facts["scontrol_config"]["stdout"] == SCONTROL_25
    assert "config" not in facts and facts["slurm_conf_readable"] is False  # read on the controller, from the raw
    assert facts["plugstack"] is None  # PlugStackConfig (null): no file to read
    assert (facts["node_state"], facts["node_gres"], facts["mpi_plugins"]) == ("IDLE+DRAIN", "gpu:8", ["none", "pmix"])


def test_an_unreadable_slurm_conf_is_read_from_scontrol_show_config(tmp_path, monkeypatch):
    """slurm.conf present but not readable by the audit's user (mode 0600): scontrol still answers, and is read."""
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    conf.write_text("ClusterName=linux\n")
    monkeypatch.setattr(audit_sched, "read", lambda p, *a: None if p == str(conf) else open(p).read())
    facts, c = _configless_facts(tmp_path, monkeypatch, SCONTROL_25)
    monkeypatch.setenv("SLURM_CONF", str(conf))
    c = Collector(str(tmp_path))
    facts = audit_sched.collect(c)
    assert c.sources["slurm"] == {"status": "ok", "reason": "%s is not readable: read from scontrol show config" % conf}
    assert (facts["slurm_conf"], facts["source"], facts["configless"]) == (str(conf), "scontrol", False)
    node = h100_node()
    node["slurm"] = facts
    row = _graded(tmp_path / "run", {"n": node}, {"audit.slurm.controller"})[("audit.slurm.controller", "n")]
    assert row["observed"] == ("slurmctld answers (%s not readable: read from scontrol show config), Slurm 25.11.4"
                               % conf)


def test_no_slurm_conf_and_no_configuration_source_is_not_a_slurm_node(tmp_path, monkeypatch):
    _no_slurm_conf(monkeypatch)
    _bin(tmp_path, monkeypatch, {"scontrol": "printf '%s' >&2; exit 1\n" % NO_CONFIG_SOURCE.replace("\n", "\\n")})
    c = Collector(str(tmp_path))
    facts = audit_sched.collect(c)
    src = c.sources["slurm"]
    assert src["status"] == "not_applicable"
    assert src["reason"] == ("no Slurm on this node (no slurm.conf; scontrol show config exit 1: scontrol: error: "
                             "resolve_ctls_from_dns_srv: res_nsearch error: Unknown host)")
    assert facts["scontrol_config"]["rc"] == 1 and "Could not establish a configuration source" in \
        facts["scontrol_config"]["stderr"]
    (tmp_path / "none").mkdir()
    _bin(tmp_path / "none", monkeypatch, {})  # no scontrol at all: as before, nothing recorded
    c = Collector(str(tmp_path))
    assert audit_sched.collect(c) == {"slurm_conf": None}
    assert c.sources["slurm"] == {"status": "not_applicable",
                                  "reason": "no Slurm on this node (no slurm.conf, no scontrol)"}
    assert "scontrol_config" not in c.sources


def test_scontrol_show_config_read_as_slurm_conf_keys():
    """scontrol's Key = Value lines named as slurm.conf names them: SlurmctldHost[0] -> SlurmctldHost, Epilog[0]
    (recent Slurm prints Prolog/Epilog as lists) -> Epilog; values with their units; (null) dropped."""
    cfg = audit_sched.config_from_scontrol(SCONTROL_25)
    assert cfg["SlurmctldHost"] == "slurmctld" and cfg["SLURM_VERSION"] == "25.11.4"
    assert cfg["HealthCheckInterval"] == "0 sec" and "HealthCheckProgram" not in cfg
    assert (cfg["TaskPlugin"], cfg["TopologyPlugin"], cfg["SelectType"]) == (
        "task/affinity", "topology/flat", "select/cons_tres")
    assert "PlugStackConfig" not in cfg and "MpiDefault" not in cfg  # (null)
    head = audit_sched.config_from_scontrol((CONFIGLESS / "scontrol-show-config_imperial_head.txt").read_text())
    assert head["Epilog"] == "/etc/slurm/epilog.d/*.sh" and head["GresTypes"] == "gpu,shard"
    two = audit_sched.scontrol_params({"SlurmctldHost[1]": "head2(10.0.0.2)", "SlurmctldHost[0]": "head(10.0.0.1)"})
    assert two == {"SlurmctldHost": "head(10.0.0.1),head2(10.0.0.2)"}
    sections = audit_sched.scontrol_sections(SCONTROL_25 + CGROUP_SECTION)
    assert sections["Cgroup Support"]["ConstrainDevices"] == "yes" and "ConstrainDevices" not in sections[""]


# appended to a capture as src/api/config_info.c prints it (README.md): the section's heading, then "%-23s = %s"
CGROUP_SECTION = "\nCgroup Support Configuration:\n" + "".join("%-23s = %s\n" % kv for kv in (
    ("AllowedRAMSpace", "100.0%"), ("AllowedSwapSpace", "0.0%"), ("CgroupMountpoint", "/sys/fs/cgroup"),
    ("CgroupPlugin", "autodetect"), ("ConstrainCores", "yes"), ("ConstrainDevices", "yes"),
    ("ConstrainRAMSpace", "yes"), ("ConstrainSwapSpace", "no")))


def test_a_configless_node_is_graded_on_its_scontrol_show_config(tmp_path, monkeypatch):
    """The Slurm checks judge a configless node on what scontrol printed, as they judge slurm.conf: not 'no Slurm'."""
    facts, _ = _configless_facts(tmp_path, monkeypatch, SCONTROL_25)
    with_cgroup, _ = _configless_facts(tmp_path / "cg", monkeypatch, SCONTROL_25 + CGROUP_SECTION)
    later = SCONTROL_25.replace("Configuration data as of 2026-04-21T06:19:30",
                                "Configuration data as of 2026-04-21T06:19:41").replace(
        "NEXT_JOB_ID             = 26", "NEXT_JOB_ID             = 27")
    again, _ = _configless_facts(tmp_path / "again", monkeypatch, later)
    nodes = {}
    for host, f in (("cl1", facts), ("cl2", with_cgroup), ("cl3", again)):
        node = h100_node()
        node["slurm"] = f
        nodes[host] = node
    checks = {"audit.slurm.controller", "audit.slurm.topology", "audit.slurm.healthcheck", "audit.slurm.select",
              "audit.slurm.accounting", "audit.slurm.cgroup_devices", "audit.slurm.gres", "audit.slurm.node_state",
              "audit.slurm.pyxis", "audit.consistency.slurm", "audit.consistency.all_facts", "audit.health.agent"}
    rows = _graded(tmp_path / "run", nodes, checks)
    ctl = rows[("audit.slurm.controller", "cl1")]
    assert ctl["status"] == "pass" and "configless, read from scontrol show config" in ctl["observed"]
    assert ctl["observed"].endswith("Slurm 25.11.4")
    topo = rows[("audit.slurm.topology", "cl1")]
    assert (topo["status"], topo["observed"]) == ("fail", "TopologyPlugin=topology/flat")
    assert rows[("audit.slurm.healthcheck", "cl1")]["observed"] == "HealthCheckProgram unset"
    assert rows[("audit.slurm.select", "cl1")]["status"] == "pass"
    assert rows[("audit.slurm.accounting", "cl1")]["status"] == "pass"
    assert rows[("audit.slurm.gres", "cl1")]["observed"] == (
        "GresTypes=gpu; node Gres=gpu:8; gres.conf not read (no slurm.conf read on the node)")
    assert rows[("audit.slurm.node_state", "cl1")]["observed"] == "IDLE+DRAIN"
    assert rows[("audit.slurm.pyxis", "cl1")]["observed"].startswith(
        "plugstack not read (no PlugStackConfig file on the node)")
    cg = rows[("audit.slurm.cgroup_devices", "cl1")]
    assert cg["status"] == "skip" and "printed no Cgroup Support Configuration" in cg["reason"]
    # ConstrainDevices from scontrol's Cgroup Support section, TaskPlugin task/affinity: the limit is not applied
    cg2 = rows[("audit.slurm.cgroup_devices", "cl2")]
    assert (cg2["status"], cg2["observed"]) == ("fail", "ConstrainDevices=yes, TaskPlugin=task/affinity")
    # the same configuration on every host, though scontrol printed it at different times (its raw output is no drift)
    for host in ("cl1", "cl2", "cl3"):
        assert rows[("audit.consistency.slurm", host)]["status"] == "pass", host
    assert rows[("audit.consistency.all_facts", "cl1")]["status"] == "pass"
    assert rows[("audit.consistency.all_facts", "cl3")]["status"] == "pass"
    odd = rows[("audit.consistency.all_facts", "cl2")]
    assert odd["status"] == "warn" and odd["observed"].startswith("8 of ") and "slurm.cgroup_conf." in odd["observed"]


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
