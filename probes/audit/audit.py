"""audit: one read-only survey of this node, every source in parallel, each command with its own timeout.

Raw facts only (per section: gpu_nvidia, nvidia_driver, gpu_amd, pci, net, ib_tools, nccl, system, kernel_log,
packages, libraries, tools, storage, procs, security, slurm, kubernetes, userland, dpu, health) plus `sources`, which
says for every source whether it ran, was missing, not permitted, timed out or failed, and why. Large outputs
(nvidia-smi XML, lspci, packages, kernel events) are raw files beside the artifact. Judgement happens on the controller
(reports/phases/audit/grade.py with reports/data/rubric.d/audit.yml).

Read-only: no file outside the output directory is written, no service is started, no setting is changed; the
cloud metadata endpoint is contacted only with params.probe_metadata = true. A few "does it work" checks start
something short and leave nothing: one container of an image already on the node (no network, removed at once), or a
one-GPU Slurm job step on this node, runs `nvidia-smi -L` (params.container_gpu, on by default); a one-GPU job step
prints which GPUs it was given; `ssh -o BatchMode=yes <next node> true` (params.ssh_peer); `enroot import` of an image
named by params.enroot_import_image into a scratch directory that is removed.
"""

import time

from probes.audit import amd as audit_amd
from probes.audit import dpu as audit_dpu
from probes.audit import health as audit_health
from probes.audit import logs as audit_logs
from probes.audit import net as audit_net
from probes.audit import nvidia as audit_nvidia
from probes.audit import pci as audit_pci
from probes.audit import procs as audit_procs
from probes.audit import sched as audit_sched
from probes.audit import security as audit_security
from probes.audit import software as audit_software
from probes.audit import storage as audit_storage
from probes.audit import system as audit_system
from probes.audit import userland as audit_userland
from probes.audit.collect import Collector
from probes.params import Param, Params

PARAMS = Params(
    timeout=Param(float, 10.0, "seconds per command"),
    workers=Param(int, 16, "sources read at once"),
    deadline_s=Param(float, 100.0, "seconds for the whole survey: sources still running then are timed out"),
    probe_metadata=Param(bool, False, "ask the cloud metadata service (one HTTP request to 169.254.169.254)"),
    dcgm_diag=Param(bool, True, "run dcgmi diag -r 1 where DCGM is installed"),
    container_gpu=Param(bool, True, "start one short container (or a one-GPU Slurm job step) that runs nvidia-smi -L "
                                    "on GPU nodes"),
    container_image=Param(str, "", "image for it: docker/podman name, enroot .sqsh or apptainer .sif path (empty: "
                                   "a suitable image already on the node)"),
    container_pull=Param(bool, False, "let docker/podman/pyxis pull container_image when it is not on the node"),
    nccl_conf_paths=Param(list, [], "extra nccl.conf files to read"),
    log_window_days=Param(int, 7, "days of kernel log read"),
    # What the inventory says the node should be: recorded for the report (reports/phases/audit), not used here.
    expected_gpu_count=Param(int, 0, "GPUs per node the inventory expects (0: the count of the GPU model)"),
    expect_mig=Param(bool, False, "whether the GPUs are meant to be MIG-partitioned"),
    nvlink_domain_exclusive=Param(bool, False, "the provider attests that the node's NVLink domain is the tenant's "
                                               "alone"),
    ufm_secured_profile=Param(bool, False, "the provider attests that UFM's Secured Bare Metal Cloud profile guards "
                                           "the InfiniBand fabric"),
    pcie_passthrough_isolated=Param(bool, False, "the provider attests the hypervisor's isolation of the GPUs and "
                                                 "NICs passed through to this VM (IOMMU groups, ACS, reset, memory "
                                                 "cleared)"),
    ssh_peer=Param(str, "", "the next node of the run, reached over SSH without a password (empty: none)"),
    ssh_options=Param(list, [], "extra ssh arguments for that (as a site's launchers pass them)"),
    enroot_import_image=Param(str, "", "image to try `enroot import` of (empty: no import, no registry contacted)"),
    fabric_tiers=Param(int, 0, "switch tiers of the compute fabric (0: unknown)"),
    fabric_rate_gbps=Param(float, 0, "expected compute port rate in Gb/s (0: the fastest port of the node)"),
)
_TOOL_GROUPS = (("nvcc", "dcgmi", "dcgm_exporter", "nvidia_ctk", "nvidia_container_cli"),
                ("dockerd", "docker_client", "containerd", "runc", "enroot", "apptainer"),
                ("singularity", "ofed_info", "slurm", "kubelet", "openssh", "sudo"))


def tasks(params):
    """(section, fn(collector)) pairs, each run in its own worker thread."""
    out = [
        ("gpu_nvidia", audit_nvidia.collect_smi),
        ("nvidia_driver", audit_nvidia.collect_driver),
        ("gpu_amd", audit_amd.collect),
        ("pci", audit_pci.collect),
        ("net", audit_net.collect_links),
        ("ib_tools", audit_net.collect_ib_tools),
        ("dpu", audit_dpu.collect),
        ("nccl", lambda c: audit_net.collect_nccl(c, params["nccl_conf_paths"])),
        ("system", audit_system.collect),
        ("kernel_log", lambda c: audit_logs.collect(c, params["log_window_days"])),
        ("packages", audit_software.collect_packages),
        ("libraries", audit_software.collect_libraries),
        ("storage", audit_storage.collect),
        ("procs", audit_procs.collect),
        ("security", lambda c: audit_security.collect(c, params["probe_metadata"])),
        ("ssh_peer", lambda c: audit_security.collect_ssh_peer(c, params["ssh_peer"], params["ssh_options"])),
        ("job_gpu_env", audit_software.collect_job_gpu_env),
        ("enroot_import", lambda c: audit_software.collect_enroot_import(c, params["enroot_import_image"])),
        ("slurm", audit_sched.collect),
        ("kubernetes", audit_sched.collect_kubernetes),
        ("userland", audit_userland.collect),
        ("health", lambda c: audit_health.collect(c, params["dcgm_diag"])),
        ("container_gpu", lambda c: audit_software.collect_container_gpu(
            c, params["container_gpu"], params["container_image"], params["container_pull"])),
    ]
    for i, names in enumerate(_TOOL_GROUPS):
        out.append(("tools_%d" % i, lambda c, names=names: audit_software.collect_tools(c, names)))
    return out


def _device(facts):
    nv = facts.get("gpu_nvidia") or {}
    amd = facts.get("gpu_amd") or {}
    if nv.get("gpus"):
        gpus, backend, driver = nv["gpus"], "cuda", nv.get("driver_version")
    elif amd.get("gpus"):
        gpus, backend = amd["gpus"], "rocm"
        driver = ", ".join(sorted({g["driver"] for g in gpus if g.get("driver")})) or None
    else:
        return {"backend": "cpu", "model": None, "count": 0, "driver": None, "torch": None}
    models = sorted({g.get("name") for g in gpus if g.get("name")})
    return {"backend": backend, "model": ", ".join(models) or None, "count": len(gpus), "driver": driver,
            "torch": None}


def run(art, p, out_dir):
    t0 = time.monotonic()
    c = Collector(out_dir, default_timeout=p["timeout"])
    facts = c.run_all(tasks(p), workers=p["workers"], deadline_s=p["deadline_s"])
    tools = {}
    for i in range(len(_TOOL_GROUPS)):
        tools.update(facts.pop("tools_%d" % i, {}) or {})
    facts["tools"] = tools
    wall = time.monotonic() - t0
    facts["collector"] = {"root": c.is_root, "wall_s": round(wall, 3), "sections": sorted(facts)}
    facts["sources"] = dict(sorted(c.sources.items()))
    art.facts.update(facts)
    art.raw.extend(sorted(c.raw))
    art.device = _device(facts)
    art.add("collector_wall_s", round(wall, 3), "s")
    art.add("sources_total", len(c.sources), "count")
    for status in ("ok", "missing", "not_permitted", "timeout", "error", "not_applicable"):
        art.add("sources_by_status", sum(1 for s in c.sources.values() if s["status"] == status), "count",
                status=status)
    slowest = sorted(((s.get("duration_s") or 0.0, name) for name, s in c.sources.items()), reverse=True)[:5]
    for took, name in slowest:
        art.add("source_duration_s", took, "s", source=name)
