"""What the audit report shows of each host's NVIDIA GPUs beside the check rows: module slots, MIG partitions and
virtualization mode (nvidia-smi -q), and each GPU's nearest NICs and NUMA node (nvidia-smi topo -m, read on the node
by probes/common/gpu_topo.py, which also says which NICs are nearest)."""

from collections import Counter

from reports.phases.audit.common import name_list
from reports.render.blocks import Paragraph, Table


def _mig(gpus):
    on = [g for g in gpus if g.get("mig_mode") == "Enabled"]
    if not on:
        return "off" if any(g.get("mig_mode") for g in gpus) else "not supported"
    shapes = Counter("%s SM %g MiB" % (d.get("sm_count"), d.get("memory_total_mib") or 0)
                     for g in on for d in g.get("mig_devices") or [])
    return "on GPU %s: %d GPU instances, %d devices%s" % (
        name_list(g["index"] for g in on), sum(g.get("mig_gpu_instances") or 0 for g in on),
        sum(len(g.get("mig_devices") or []) for g in on),
        " (%s)" % name_list("%d x %s" % (n, shape) for shape, n in shapes.most_common()) if shapes else "")


def gpu_row(host, nv):
    gpus = nv.get("gpus") or []
    modules = sorted({g["module_id"] for g in gpus if g.get("module_id") is not None})
    modes = sorted({g.get("virtualization_mode") or "not reported" for g in gpus})
    read = "nvidia-smi -q (text: %s)" % nv.get("xml_error") if nv.get("format") == "text" else "nvidia-smi -q -x"
    return [host, len(gpus), name_list(sorted({g.get("name") for g in gpus if g.get("name")})),
            name_list(modules, limit=8) or "not reported", _mig(gpus), ", ".join(modes), read]


def affinity_rows(host, nv):
    topo = nv.get("topology")
    if not topo:
        return []
    if topo.get("error"):
        return [[host, "-", "not read: %s" % topo["error"], "", "", "", ""]]
    note = "; ".join(topo.get("warnings") or [])
    rows = []
    for index, g in sorted((topo.get("gpus") or {}).items(), key=lambda kv: int(kv[0])):
        nics = g.get("nearest_nics") or []
        rows.append([host, "GPU %s" % index, name_list(nics) or "no NIC", g.get("nearest_link") or "",
                     g.get("numa_affinity") or "", g.get("gpu_numa_id") or "", g.get("cpu_affinity") or ""])
    if note and rows:
        rows[0][2] += " (%s)" % note
    return rows


def tables(facts_by_host):
    """facts_by_host: {host: the audit's gpu_nvidia facts} -> the two blocks of the report's GPU layout."""
    gpus, affinity = [], []
    for host, nv in facts_by_host.items():
        if nv.get("gpus"):
            gpus.append(gpu_row(host, nv))
        affinity += affinity_rows(host, nv)
    if not gpus:
        return [Paragraph("No host reported NVIDIA GPUs through nvidia-smi.")]
    return [Table(["host", "GPUs", "model", "module slots", "MIG", "virtualization", "read from"], gpus),
            Table(["host", "GPU", "nearest NIC(s)", "path", "NUMA affinity", "GPU NUMA ID", "CPU affinity"], affinity)
            if affinity else Paragraph("No host recorded `nvidia-smi topo -m`.")]
