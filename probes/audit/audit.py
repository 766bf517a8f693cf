"""audit: one read-only survey of this node, every source in parallel, each command with its own timeout.

Raw facts only (per section: gpu_nvidia, nvidia_driver, gpu_amd, pci, net, ib_tools, nccl, system, kernel_log,
packages, libraries, tools, storage, procs, security, slurm, kubernetes, health) plus `sources`, which says for
every source whether it ran, was missing, not permitted, timed out or failed, and why. Large outputs (nvidia-smi
XML, lspci, packages, kernel events) are raw files beside the artifact. Judgement happens on the controller
(reports/phases/audit/grade.py with reports/data/rubric.d/audit.yml).

Read-only: no file outside the output directory is written, no service is started, no setting is changed; the
cloud metadata endpoint is contacted only with params.probe_metadata = true.
"""

import time

from probes.audit import amd as audit_amd
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
from probes.audit.collect import Collector

DEFAULTS = {"timeout": 10.0, "workers": 16, "deadline_s": 100.0, "probe_metadata": False, "dcgm_diag": True,
            "nccl_conf_paths": [], "log_window_days": 7}
_TOOL_GROUPS = (("nvcc", "dcgmi", "dcgm_exporter", "nvidia_ctk", "nvidia_container_cli"),
                ("dockerd", "docker_client", "containerd", "runc", "enroot", "apptainer"),
                ("singularity", "ofed_info", "slurm", "kubelet", "openssh", "sudo"))


def _flag(value):
    """true/false from JSON, or from text that went through a template ("False", "0", "no")."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def tasks(params):
    """(section, fn(collector)) pairs, each run in its own worker thread."""
    out = [
        ("gpu_nvidia", audit_nvidia.collect_smi),
        ("nvidia_driver", audit_nvidia.collect_driver),
        ("gpu_amd", audit_amd.collect),
        ("pci", audit_pci.collect),
        ("net", audit_net.collect_links),
        ("ib_tools", audit_net.collect_ib_tools),
        ("nccl", lambda c: audit_net.collect_nccl(c, params.get("nccl_conf_paths") or ())),
        ("system", audit_system.collect),
        ("kernel_log", lambda c: audit_logs.collect(c, int(params.get("log_window_days", 7)))),
        ("packages", audit_software.collect_packages),
        ("libraries", audit_software.collect_libraries),
        ("storage", audit_storage.collect),
        ("procs", audit_procs.collect),
        ("security", lambda c: audit_security.collect(c, _flag(params.get("probe_metadata")))),
        ("slurm", audit_sched.collect),
        ("kubernetes", audit_sched.collect_kubernetes),
        ("health", lambda c: audit_health.collect(c, _flag(params.get("dcgm_diag", True)))),
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


def run(art, params, out_dir):
    p = dict(DEFAULTS, **params)
    t0 = time.monotonic()
    c = Collector(out_dir, default_timeout=float(p["timeout"]))
    facts = c.run_all(tasks(p), workers=int(p["workers"]), deadline_s=float(p["deadline_s"]))
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
