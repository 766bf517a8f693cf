"""Audit area `consistency` (audit.consistency.*): facts compared across hosts, odd hosts named. A check names a
path into the facts (`fact: system.kernel`) or an extractor of EXTRACTORS (`extract: nccl`)."""

import fnmatch
import json
import re

from reports.grading import make_row
from reports.grading.kinds import majority_value
from reports.phases.audit.common import Error, Skip, cluster_rule, graded_views, name_list, short_text
from reports.phases.audit.network import nccl_settings
from reports.phases.audit.software import connectx_versions


def _get(facts, path):
    value = facts
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _nic_layout(v):
    out = {}
    for name, i in (v.sec("net").get("interfaces") or {}).items():
        if i.get("virtual") and name != "lo":
            continue
        out[name] = {"mtu": i.get("mtu"), "speed_mbps": i.get("speed_mbps"), "operstate": i.get("operstate"),
                     "driver": i.get("driver")}
    for dev, info in v.rdma().items():
        out[dev] = {p: {"state": x.get("state"), "rate": x.get("rate"), "link_layer": x.get("link_layer")}
                    for p, x in (info.get("ports") or {}).items()}
    return out


def _gpu_settings(v):
    keys = ("name", "vbios", "persistence_mode", "ecc_mode", "mig_mode", "compute_mode", "power_limit_enforced_w",
            "app_clock_graphics_mhz", "pcie_gen_max", "pcie_width_current", "memory_total_mib")
    try:
        return {str(g["index"]): {k: g.get(k) for k in keys if g.get(k) is not None} for g in v.gpus()}
    except (Skip, Error):
        return None


EXTRACTORS = {
    "nccl": nccl_settings,
    "nic_layout": _nic_layout,
    "gpu_settings": _gpu_settings,
    "listen_ports": lambda v: sorted({"%d/%s" % (s["port"], s.get("process") or "?")
                                      for s in v.listeners(exposed=True)}),
    "mounts": lambda v: sorted("%s %s" % (m["target"], m.get("fstype")) for m in v.sec("storage").get("mounts") or []),
    "daemons": lambda v: sorted(v.daemons()),
    "hca_firmware": lambda v: connectx_versions(v) or None,
    "tool_versions": lambda v: {k: (x or {}).get("version") for k, x in sorted(v.sec("tools").items())},
    "driver": lambda v: v.driver_version(),
    # the listen address is each host's own IP: not drift
    "sshd": lambda v: {k: x for k, x in (v.sec("security").get("sshd") or {}).items() if k != "listenaddress"} or None,
}


def flatten(value, prefix="", out=None):
    """Nested facts -> {dotted key: canonical text}. Lists of records are keyed by a natural key (target, path,
    index, port, name) when they have one, so one extra entry does not shift every key after it."""
    out = {} if out is None else out
    if isinstance(value, dict):
        if not value:
            out[prefix] = "{}"
        for k, x in value.items():
            flatten(x, "%s.%s" % (prefix, k) if prefix else str(k), out)
    elif isinstance(value, list):
        if value and all(isinstance(x, dict) for x in value):
            for i, x in enumerate(value):
                key = next((str(x[k]) for k in ("target", "path", "index", "port", "name", "file") if k in x), str(i))
                flatten(x, "%s[%s]" % (prefix, key), out)
        else:
            out[prefix] = json.dumps(value, sort_keys=True, default=str)
    else:
        out[prefix] = json.dumps(value, default=str)
    return out



@cluster_rule
def same_value(check, run, hosts):
    """One fact (a path into the facts, or a named extractor) compared across hosts; the odd ones are named."""
    rows, views = graded_views(check, run, hosts)
    values, raw = {}, {}
    for host, v in views.items():
        if check.get("extract"):
            value = EXTRACTORS[check["extract"]](v)
        else:
            value = _get(v.f, check["fact"])
        if value is None and not check.get("include_missing"):
            continue
        raw[host] = value
        values[host] = json.dumps(value, sort_keys=True, default=str)
    reference, counts = majority_value(values)
    for host in hosts:
        if host not in views:
            continue
        if host not in values:
            rows.append(make_row(check, host, "skip", reason="not reported by this host"))
            continue
        if len(values) < 2:
            rows.append(make_row(check, host, "skip", short_text(raw[host]),
                                 reason="only one host reported it: nothing to compare"))
            continue
        observed = short_text(raw[host])
        if reference is None:
            rows.append(make_row(check, host, "warn", observed, "one value on all hosts",
                                 "no majority: %d different values" % len(counts)))
            continue
        if values[host] == reference:
            rows.append(make_row(check, host, "pass", observed,
                                 "same on %d/%d hosts" % (counts[reference], len(values))))
            continue
        ref_host = next(h for h in values if values[h] == reference)
        diff = _diff_keys(raw[host], raw[ref_host])
        rows.append(make_row(check, host, "warn", observed, short_text(raw[ref_host]),
                             "differs from %d of %d hosts%s" % (counts[reference], len(values),
                                                               ": " + name_list(diff, 4) if diff else "")))
    return rows


def _diff_keys(a, b):
    fa, fb = flatten(a), flatten(b)
    return sorted(k or "(value)" for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))


@cluster_rule
def all_facts(check, run, hosts):
    """Every fact of every host compared with the majority (per-host identities and live readings excluded)."""
    rows, views = graded_views(check, run, hosts)
    exclude = check.get("exclude", [])
    pattern = re.compile("|".join("(?:%s)" % fnmatch.translate(p) for p in exclude)) if exclude else None
    verdict = {}  # key -> excluded? (keys repeat on every host: match each once)
    flat = {}
    for host, v in views.items():
        kept = {}
        for k, x in flatten(v.f).items():
            if k not in verdict:
                verdict[k] = bool(pattern and pattern.match(k))
            if not verdict[k]:
                kept[k] = x
        flat[host] = kept
    keys = sorted(set().union(*flat.values())) if flat else []
    odd = {h: [] for h in flat}
    for key in keys:
        per = {h: f.get(key, "<absent>") for h, f in flat.items()}
        ref, counts = majority_value(per)
        for h, x in per.items():
            if ref is None or x != ref:
                odd[h].append(key)
    for host in hosts:
        if host not in views:
            continue
        if len(flat) < 2:
            rows.append(make_row(check, host, "skip", "%d facts" % len(flat[host]),
                                 reason="only one host reported it: nothing to compare"))
        elif odd[host]:
            differ = "%d of %d facts differ: %s" % (len(odd[host]), len(keys), name_list(odd[host], 5))
            rows.append(make_row(check, host, "warn", differ, "the value most hosts have", "differs from the majority"))
        else:
            rows.append(make_row(check, host, "pass", "%d facts match" % len(keys), "the value most hosts have"))
    return rows
