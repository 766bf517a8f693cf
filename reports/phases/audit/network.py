"""Audit area `net` (audit.net.*): NICs by role (compute fabric, storage, frontend), RDMA ports, InfiniBand and RoCE
settings, and the NCCL settings that reach every job on the node."""

import re
from collections import Counter

from reports.phases.audit.common import PROBE, R, Skip, View, host_rule, name_list, rubric_check


def nic_role_thresholds():
    """The rates that sort NICs into roles (compute_roce_min_gbps, storage_min_gbps) as the rubric's
    audit.net.nic_inventory sets them: for a report section that lists each host's NICs by role as the checks do."""
    check = rubric_check("audit.net.nic_inventory")
    return {key: check[key] for key in ("compute_roce_min_gbps", "storage_min_gbps")}


def _part(info):
    """What a NIC is, for telling a rail that trained low from a storage port: its board id (the card model's PSID,
    MT_0000000838), or the chip (hca_type) when sysfs gave none."""
    return info.get("board_id") or info.get("hca_type")


def _gpu_local(v, bdf):
    """Whether the PCI device `bdf` shares a bridge (a PCIe switch, a root port) with a GPU, as NCCL pairs a rail
    with its GPU; None when the probe recorded no place for it."""
    dev = v.pci.get(bdf or "")
    if not dev or not dev.get("upstream"):
        return None
    mine = set(dev["upstream"])
    return any(mine & set(v.pci[g].get("upstream") or []) for g in v.pci_gpus())


def _rails_wanted(v, c):
    """How many rails the node's GPUs call for (`nics_per_gpu` each)."""
    gpus = len(v.pci_gpus()) or len(v.nv_gpus) or len(v.amd_gpus)
    return round(gpus * float(c.get("nics_per_gpu", 1)))


def _rails_below_rate(v, c, nics, infos):
    """The rails of a RoCE fabric wholly below compute_roce_min_gbps (eight ConnectX-7 at 200G for eight GPUs: a
    lower tier, but the node's compute fabric all the same). Where no port reached the compute rate (an InfiniBand
    or 400G fabric names the rails itself, and slower ports beside it are storage), the rate cannot tell rails from
    storage ports; what makes them rails can: as many ports of one part as the GPUs call for (`nics_per_gpu`),
    counting only those next to a GPU where the PCIe tree places NICs. A storage pair is too few. -> that part's
    ports at its top active rate; one of it that trained low or is down is left to _slow_rails, as at 400G."""
    want = _rails_wanted(v, c)
    if want <= 0 or any(n["role"] == "compute" for n in nics):
        return []
    placed = {n["name"]: _gpu_local(v, infos[n["name"]].get("pci")) for n in nics}
    parts = {}
    for n in nics:
        if n["role"] == "storage" and (placed[n["name"]] or not any(placed.values())):
            parts.setdefault(_part(infos[n["name"]]), []).append(n)
    parts.pop(None, None)  # no board id nor chip: ports of unknown cards are no set of rails
    out = []
    for ports in parts.values():
        if len(ports) < want:
            continue
        # every rail down is still the node's fabric, down: rdma_link_state fails it rather than nothing judging it
        active = [n["rate_gbps"] or 0 for n in ports if (n["state"] or "").upper() == "ACTIVE"]
        out += [n for n in ports if not active or (n["rate_gbps"] or 0) >= max(active)]
    return out


def _slow_rails(v, c, nics, infos):
    """RoCE NICs below the compute rate that are rails all the same: the same part as the node's RoCE rails at the
    rate, when the node has fewer rails than its GPUs call for (`nics_per_gpu`): a rail that trained low or went
    down. -> (rails, unsure): when the PCIe tree places NICs, those of the part next to a GPU are the rails; when
    it does not and more ports of the part are below the rate than rails are missing (storage ports of the same
    card), which is which cannot be told: `unsure`, judged by no check as a rail."""
    missing = _rails_wanted(v, c) - sum(1 for n in nics if n["role"] == "compute")
    fast = {_part(infos[n["name"]]) for n in nics if n["role"] == "compute" and n["link"] == "RoCE"} - {None}
    candidates = [n for n in nics if n["role"] == "storage" and _part(infos[n["name"]]) in fast]
    if missing <= 0 or not candidates:
        return [], []
    placed = {n["name"]: _gpu_local(v, infos[n["name"]].get("pci")) for n in nics}
    if any(placed.values()):
        candidates = [n for n in candidates if placed[n["name"]]]
        if not candidates:
            return [], []
    if len(candidates) <= missing:
        return candidates, []
    return [], candidates


def classify_nics(v, c):
    """[{name, role, link, rate_gbps, rdma, netdevs}] with role compute / storage / frontend / other. An RDMA NIC
    on the default route is frontend; an InfiniBand one, or a RoCE one at compute_roce_min_gbps or more, compute;
    a slower RoCE NIC is storage unless the node's rails are all slower (_rails_below_rate) or it is a rail that
    trained low or is down (_slow_rails: then compute, or `rail_unsure` when that cannot be told)."""
    net = v.sec("net")
    ifaces = net.get("interfaces") or {}
    default = set(net.get("default_route") or [])
    roce_min = float(c.get("compute_roce_min_gbps", 400))
    out, used = [], set()
    infos = v.rdma()
    for dev, info in sorted(infos.items()):
        ports = info.get("ports") or {}
        p = ports.get("1") or (next(iter(ports.values())) if ports else {})
        netdevs = info.get("netdevs") or []
        used.update(netdevs)
        link = p.get("link_layer") or "?"
        rate = p.get("rate_gbps")
        if default & set(netdevs):
            role = "frontend"
        elif link == "InfiniBand" or (rate or 0) >= roce_min:
            role = "compute"
        else:
            role = "storage"
        out.append({"name": dev, "role": role, "link": "IB" if link == "InfiniBand" else "RoCE", "rate_gbps": rate,
                    "state": p.get("state"), "netdevs": netdevs, "rdma": True})
    for n in _rails_below_rate(v, c, out, infos):
        n["role"] = "compute"
    rails, unsure = _slow_rails(v, c, out, infos)
    for n in rails:
        n["role"] = "compute"
    for n in unsure:
        n.update(rail_unsure=True, part=_part(infos[n["name"]]))
    for name, i in sorted(ifaces.items()):
        if name in used or name == "lo" or i.get("type") == 772:
            continue
        if i.get("virtual") and name not in default:
            continue
        speed = (i.get("speed_mbps") or 0) / 1000.0 if (i.get("speed_mbps") or 0) > 0 else None
        role = "frontend" if name in default else ("storage" if (speed or 0) >= float(c.get("storage_min_gbps", 25))
                                                   else "other")
        out.append({"name": name, "role": role, "link": "Ethernet", "rate_gbps": speed, "state": i.get("operstate"),
                    "netdevs": [name], "rdma": False})
    return out


def host_nics(run, host):
    """classify_nics of the host's audit artifact with the rubric's role thresholds, or None when the run has no
    audit facts for the host (a run of --tags network): for a grader of another phase that judges a NIC only in its
    role (perftest measures every RDMA device of the node, rails or not)."""
    doc = run.artifact(host, PROBE)
    if not doc or not doc.get("facts"):
        return None
    return classify_nics(View(run, host, doc), nic_role_thresholds())


@host_rule
def nic_inventory(v, c):
    nics = classify_nics(v, c)
    roles = {}
    for n in nics:
        roles.setdefault(n["role"], []).append("%s%s" % (n["name"], " %gG" % n["rate_gbps"] if n["rate_gbps"] else ""))
    obs = "; ".join("%s: %s" % (r, name_list(x, 4)) for r, x in sorted(roles.items())) or "no NIC"
    if v.vendor and not roles.get("compute"):
        return R("warn", obs, "a compute fabric (RDMA) on GPU nodes",
                 "without a compute fabric, multi-node jobs run over TCP")
    if not roles.get("frontend"):
        return R("warn", obs, "a frontend NIC carrying the default route")
    return R("pass", obs, "compute fabric on GPU nodes, frontend present")


@host_rule
def compute_nic_ratio(v, c):
    nics = [n for n in classify_nics(v, c) if n["role"] == "compute"]
    gpus = len(v.gpus())
    want = float(c.get("nics_per_gpu", 1.0))
    ok = len(nics) >= want * gpus
    return R("pass" if ok else "warn", "%d compute NICs for %d GPUs" % (len(nics), gpus),
             ">= %g compute NIC per GPU (rail-optimized)" % want)


def _unsure_text(unsure):
    """'mlx5_3 200G, mlx5_8 200G, mlx5_9 DOWN (MT4129, like the compute ports)'."""
    return "%s (%s, like the compute ports)" % (name_list(
        "%s %s" % (n["name"], "%gG" % (n["rate_gbps"] or 0) if (n["state"] or "").upper() == "ACTIVE"
                   else n["state"]) for n in unsure), name_list(sorted({str(n["part"]) for n in unsure})))


_UNSURE_WHY = ("the node has fewer compute ports than GPUs: one of these ports of the compute ports' card may be a "
               "rail that trained low or went down, the others storage ports; the audit cannot tell which (ibstat, "
               "mlxlink and the cabling can)")


@host_rule
def rdma_link_state(v, c):
    ports = v.rdma_ports()
    down = ["%s/%s %s" % (d, p, x.get("state")) for d, p, x in ports if (x.get("state") or "").upper() != "ACTIVE"]
    nics = classify_nics(v, c)
    compute = {n["name"] for n in nics if n["role"] == "compute"}
    down_compute = [x for x in down if x.split("/")[0] in compute]
    unsure = [n for n in nics if n.get("rail_unsure")]
    obs = "%d/%d ports active" % (len(ports) - len(down), len(ports))
    if down_compute:
        return R("fail", obs + " (down: %s)" % name_list(down_compute), "every RDMA port active")
    if down:
        down_unsure = [n for n in unsure if (n["state"] or "").upper() != "ACTIVE"]
        return R("warn", obs + " (down: %s)" % name_list(down), "every RDMA port active",
                 "%s: %s" % (_unsure_text(unsure), _UNSURE_WHY) if down_unsure else None)
    return R("pass", obs, "every RDMA port active")


@host_rule
def rdma_rate(v, c):
    classified = classify_nics(v, c)
    nics = [n for n in classified if n["role"] == "compute" and (n["state"] or "").upper() == "ACTIVE"]
    if not nics:
        raise Skip("not applicable: no active compute fabric port")
    rates = Counter(n["rate_gbps"] for n in nics)
    top = max(r for r in rates if r)
    want = float(v.param_int("fabric_rate_gbps") or c.get("min_gbps", 0) or top)
    slow = ["%s %gG" % (n["name"], n["rate_gbps"] or 0) for n in nics if (n["rate_gbps"] or 0) < max(top, want)]
    obs = name_list("%gG x%d" % (r or 0, k) for r, k in sorted(rates.items(), key=lambda kv: -(kv[0] or 0)))
    expected = "every compute port at %gG" % max(top, want)
    unsure = [n for n in classified if n.get("rail_unsure")]
    if not slow and unsure:
        return R("warn", obs + " (below it: %s)" % _unsure_text(unsure), expected, _UNSURE_WHY)
    return R("fail" if slow else "pass", obs + (" (slow: %s)" % name_list(slow) if slow else ""), expected)


@host_rule
def ib_sm(v, c):
    ports = [(d, p, x) for d, p, x in v.rdma_ports() if x.get("link_layer") == "InfiniBand"
             and (x.get("state") or "").upper() == "ACTIVE"]
    if not ports:
        raise Skip("not applicable: no active InfiniBand port")
    bad = ["%s/%s" % (d, p) for d, p, x in ports if int(str(x.get("sm_lid") or "0"), 0) == 0
           or int(str(x.get("lid") or "0"), 0) == 0]
    return R("fail" if bad else "pass", ("no SM/LID on %s" % name_list(bad)) if bad else
             "%d ports with a LID and a subnet manager" % len(ports), "subnet manager reachable, LID assigned")


@host_rule
def ib_mtu(v, c):
    v.need("ibv_devinfo")
    info = v.sec("ib_tools").get("ibv_devinfo") or {}
    want = int(c.get("min_mtu", 4096))
    mtus = {}
    for hca, h in info.items():
        for port, p in (h.get("ports") or {}).items():
            if p.get("link_layer") == "InfiniBand" and "ACTIVE" in (p.get("state") or ""):
                mtus["%s/%s" % (hca, port)] = p.get("active_mtu")
    if not mtus:
        raise Skip("not applicable: no active InfiniBand port in ibv_devinfo")
    low = sorted(k for k, m in mtus.items() if (m or 0) < want)
    return R("warn" if low else "pass", name_list("%s on %d" % kv for kv in Counter(mtus.values()).items()) +
             (" (low: %s)" % name_list(low) if low else ""), "active MTU >= %d" % want)


@host_rule
def roce_mtu(v, c):
    ifaces = v.sec("net").get("interfaces") or {}
    want = int(c.get("min_mtu", 4200))
    mtus = {}
    for d, _, x in v.rdma_ports():
        if x.get("link_layer") != "Ethernet":
            continue
        for nd in v.rdma()[d].get("netdevs") or []:
            mtus[nd] = (ifaces.get(nd) or {}).get("mtu")
    if not mtus:
        raise Skip("not applicable: RoCE ports have no network interface")
    low = sorted(k for k, m in mtus.items() if (m or 0) < want)
    return R("warn" if low else "pass", name_list("%s=%s" % kv for kv in sorted(mtus.items())),
             "MTU >= %d (jumbo)" % want)


def nccl_settings(v):
    """Effective NCCL_* settings: /etc/nccl.conf, then ~/.nccl.conf, then NCCL_CONF_FILE, then exported variables."""
    n = v.sec("nccl")
    merged = {}
    for path in n.get("searched") or []:
        merged.update((n.get("files") or {}).get(path) or {})
    for _, values in sorted((n.get("profile") or {}).items()):
        merged.update(values)
    merged.update(n.get("environment") or {})
    return merged


@host_rule
def hca_naming(v, c):
    devs = sorted(v.rdma())
    schemes = Counter(re.sub(r"\d+$", "N", re.sub(r"\d+(?=[a-z])", "N", d)) for d in devs)
    settings = nccl_settings(v)
    hca = settings.get("NCCL_IB_HCA")
    bad = []
    if hca:
        spec = hca.lstrip("^=")
        for item in spec.split(","):
            name = item.split(":")[0].strip()
            if not name:
                continue
            exact = hca.startswith("=") or hca.startswith("^=")
            if not any((d == name) if exact else d.startswith(name) for d in devs):
                bad.append(name)
    obs = "%s%s" % (name_list("%s x%d" % kv for kv in schemes.most_common()),
                    "; NCCL_IB_HCA=%s" % hca if hca else "")
    if bad:
        return R("fail", obs, "NCCL_IB_HCA names existing devices", "no device matches %s" % ", ".join(bad))
    if len(schemes) > 1:
        return R("warn", obs, "one naming scheme for RDMA devices", "mixed names make NCCL_IB_HCA patterns fragile")
    return R("pass", obs, "one naming scheme; NCCL_IB_HCA (if set) matches")


@host_rule
def nccl_conf(v, c):
    v.need("nccl_config")
    settings = nccl_settings(v)
    risky = c.get("risky") or {}
    found = []
    for key, value in sorted(settings.items()):
        bad_values = risky.get(key)
        if bad_values is None:
            continue
        if bad_values == "any" or str(value) in [str(x) for x in bad_values]:
            found.append("%s=%s" % (key, value))
    files = [p for p in (v.sec("nccl").get("files") or {})]
    obs = ("%d settings from %s" % (len(settings), name_list(files))) if files or settings else "no NCCL overrides"
    if found:
        return R("warn", "%s: %s" % (obs, name_list(found)),
                 "no setting that disables a transport or forces a path, algorithm, protocol or channel count",
                 "these overrides replace NCCL's own choices for every job on the node")
    return R("pass", obs, "no setting that disables a transport or forces a path, algorithm, protocol or channel count")


@host_rule
def roce_gid_index(v, c):
    settings = nccl_settings(v)
    idx = settings.get("NCCL_IB_GID_INDEX")
    ports = [(d, p, x) for d, p, x in v.rdma_ports() if x.get("link_layer") == "Ethernet"
             and (x.get("state") or "").upper() == "ACTIVE"]
    if not ports:
        raise Skip("not applicable: no active RoCE port")
    v2 = {}
    for d, p, x in ports:
        v2["%s/%s" % (d, p)] = sorted((k for k, g in (x.get("gids") or {}).items()
                                      if "v2" in (g.get("type") or "").lower() and g.get("ipv4")), key=int)
    if idx is None:
        return R("warn", "NCCL_IB_GID_INDEX unset; RoCE v2 IPv4 GIDs at %s" % name_list(
            "%s:%s" % (k, "/".join(x) or "none") for k, x in sorted(v2.items())),
                 "NCCL_IB_GID_INDEX set to a RoCE v2 GID",
                 "NCCL picks a GID itself; a wrong one gives a jagged busbw curve")
    wrong = [k for k, x in v2.items() if str(idx) not in x]
    return R("fail" if wrong else "pass", "NCCL_IB_GID_INDEX=%s" % idx + (" (not RoCE v2 on %s)" % name_list(wrong)
                                                                         if wrong else ""),
             "NCCL_IB_GID_INDEX points at a RoCE v2 IPv4 GID on every port")


@host_rule
def ib_qps(v, c):
    tiers = v.param_int("fabric_tiers")
    if not tiers:
        raise Skip("not applicable: fabric tier count unknown (set audit_fabric_tiers)")
    if tiers < 2:
        raise Skip("not applicable: single-tier fabric (audit_fabric_tiers=%s)" % tiers)
    want = int(c.get("min_qps", 2))
    qps = nccl_settings(v).get("NCCL_IB_QPS_PER_CONNECTION")
    ok = qps is not None and int(qps) >= want
    return R("pass" if ok else "warn", "NCCL_IB_QPS_PER_CONNECTION=%s" % (qps or "unset (1)"),
             ">= %d on a %s-tier fabric" % (want, tiers), None if ok else "one QP per connection limits ECMP spread")


@host_rule
def pkeys(v, c):
    ports = [(d, p, x) for d, p, x in v.rdma_ports() if x.get("link_layer") == "InfiniBand"]
    if not ports:
        raise Skip("not applicable: no InfiniBand port")
    sets = Counter(",".join(x.get("pkeys") or []) or "none" for _, _, x in ports)
    limited = [("%s/%s" % (d, p)) for d, p, x in ports if x.get("pkeys") and
               not any(k.endswith("ffff") for k in x["pkeys"])]
    if limited:
        return R("warn", name_list("%s x%d" % kv for kv in sets.items()), "full-membership default PKey 0xffff",
                 "limited-membership PKeys only on %s" % name_list(limited))
    return R("warn" if len(sets) > 1 else "pass", name_list("%s x%d" % kv for kv in sets.items()),
             "one PKey set on every port, default 0xffff included")


@host_rule
def port_counters(v, c):
    ports = v.rdma_ports()
    if not any(x.get("counters") for _, _, x in ports):
        raise Skip("not reported: no port counters in sysfs")
    limits = c.get("max") or {}
    bad = []
    for d, p, x in ports:
        for key, limit in limits.items():
            n = (x.get("counters") or {}).get(key)
            if n is not None and n > limit:
                bad.append("%s/%s %s=%d" % (d, p, key, n))
    return R("warn" if bad else "pass", name_list(bad) if bad else "below limits on %d ports" % len(ports),
             name_list("%s<=%s" % kv for kv in sorted(limits.items())))


@host_rule
def rp_filter(v, c):
    ifaces = v.sec("net").get("interfaces") or {}
    netdevs = [nd for d, _, x in v.rdma_ports() if x.get("link_layer") == "Ethernet"
               for nd in v.rdma()[d].get("netdevs") or []]
    if len(netdevs) < 2:
        raise Skip("not applicable: fewer than two RoCE interfaces")
    allv = v.sec("net").get("rp_filter_all") or 0
    strict = [nd for nd in netdevs if max((ifaces.get(nd) or {}).get("rp_filter") or 0, allv) == 1]
    return R("warn" if strict else "pass", ("strict rp_filter on %s" % name_list(strict)) if strict else "loose or off",
             "rp_filter 0 or 2 on multi-rail RoCE interfaces")


@host_rule
def frontend(v, c):
    net = v.sec("net")
    default = net.get("default_route") or []
    if not default:
        return R("warn", "no default route", "a default route on an interface that is up")
    ifaces = net.get("interfaces") or {}
    down = [i for i in default if (ifaces.get(i) or {}).get("operstate") not in ("up", "unknown")]
    states = name_list("%s %s" % (i, (ifaces.get(i) or {}).get("operstate")) for i in default)
    return R("fail" if down else "pass", states, "a default route on an interface that is up")


@host_rule
def nccl_socket_ifname(v, c):
    value = nccl_settings(v).get("NCCL_SOCKET_IFNAME")
    if not value:
        return R("pass", "unset (NCCL picks an interface)", "unset, or matching an existing interface")
    ifaces = sorted(v.sec("net").get("interfaces") or {})
    exclude = value.startswith("^")
    spec = value.lstrip("^")
    exact = spec.startswith("=")
    names = [x for x in spec.lstrip("=").split(",") if x]
    matches = [i for i in ifaces if any((i == n) if exact else i.startswith(n) for n in names)]
    usable = [i for i in ifaces if i not in matches and i != "lo"] if exclude else matches
    return R("pass" if usable else "fail", "NCCL_SOCKET_IFNAME=%s -> %s" % (value, name_list(usable) or "nothing"),
             "matches an existing interface")


@host_rule
def nic_pcie(v, c):
    pcis = {info.get("pci"): dev for dev, info in v.rdma().items() if info.get("pci")}
    rows = []
    narrow = []
    for bdf, dev in sorted(pcis.items()):
        d = v.pci.get(bdf) or {}
        if d.get("link_width") and d.get("link_width_max"):
            rows.append(dev)
            if d["link_width"] < d["link_width_max"]:
                narrow.append("%s x%d<x%d" % (dev, d["link_width"], d["link_width_max"]))
    if not rows:
        raise Skip("not reported: no PCIe link width for the RDMA NICs")
    return R("fail" if narrow else "pass", name_list(narrow) if narrow else "%d NICs at full width" % len(rows),
             "every RDMA NIC at its maximum PCIe width")


NCCL_DEFAULT_TOPO = "/var/run/nvidia-topologyd/virtualTopology.xml"  # read by NCCL when NCCL_TOPO_FILE is unset


@host_rule
def nccl_topo_file(v, c):
    """A topology file NCCL is pointed at (NCCL_TOPO_FILE) must be there and readable: a VM's virtual PCI tree hides
    the GPU/NIC affinity, and NCCL falls back to its own guess, silently, when the file is missing or broken."""
    v.need("nccl_config")
    # NCCL reads the file NCCL_TOPO_FILE names, else its default path; other XML files lying about are not read by
    # NCCL (a graph dump is no topology), so they are listed, not judged. A value with a shell expansion in it is
    # read by the shell of the job, not here.
    listed = v.collected("nccl", "topo_files") or []
    files = [f for f in listed if (f["named"] or f["path"] == NCCL_DEFAULT_TOPO) and "$" not in f["path"]]
    others = [f["path"] for f in listed if f not in files]
    if not files:
        raise Skip("not applicable: no NCCL topology file named (NCCL_TOPO_FILE) or at NCCL's default path%s" % (
            " (also seen: %s)" % name_list(others) if others else ""))
    bad = [f for f in files if not f["exists"] or not f["size"] or f["xml_error"] or f["root"] != "system"]
    seen = "; ".join("%s%s" % (f["path"], "" if f in bad else " (%d bytes, <system>)" % f["size"]) for f in files)
    if bad:
        why = "; ".join("%s: %s" % (f["path"], "missing" if not f["exists"] else "empty" if not f["size"]
                                    else f["xml_error"] or "root <%s>, not <system>" % f["root"]) for f in bad)
        return R(c.get("status_bad", "warn"), seen, "the named topology file readable NCCL XML", why)
    return R("pass", seen + " (read on the host, not inside a container)", "the named topology file readable NCCL XML")


def _coded(value):
    """mlxconfig's 'ENABLED(0)' -> 0; a bare number -> itself; anything else None."""
    m = re.search(r"\((\d+)\)$", str(value or "")) or re.match(r"^(\d+)$", str(value or ""))
    return int(m.group(1)) if m else None


@host_rule
def dpu_host_isolation(v, c):
    """In zero-trust mode the host (the tenant) cannot reach the BlueField's Arm side: RShim restricted
    (INTERNAL_CPU_RSHIM 1, mlxprivhost r --disable_rshim), no /dev/rshim*, no tmfifo_net0."""
    dpu = v.collected("dpu")
    functions = dpu.get("bluefield") or {}
    if not functions:
        raise Skip("not applicable: no BlueField DPU on this host")
    expected = "RShim restricted (INTERNAL_CPU_RSHIM 1), no /dev/rshim*, no tmfifo_net0"
    open_paths = list(dpu.get("rshim_devices") or []) + (["tmfifo_net0"] if dpu.get("tmfifo_net0") else [])
    queries = dpu.get("queries") or {}
    rshim = {bdf: (q.get("settings") or {}).get("INTERNAL_CPU_RSHIM") for bdf, q in queries.items()}
    mode = {bdf: (q.get("settings") or {}).get("INTERNAL_CPU_MODEL") for bdf, q in queries.items()}
    seen = "; ".join("%s %s%s: INTERNAL_CPU_RSHIM %s (next boot)" % (
        bdf, functions[bdf], " %s" % mode[bdf] if mode.get(bdf) else "", rshim.get(bdf) or "not read")
        for bdf in sorted(functions))
    if open_paths:
        return R(c.get("status_bad", "warn"), "%s; host reaches the DPU through %s" % (seen, ", ".join(open_paths)),
                 expected, "not in zero-trust mode: apply mlxprivhost r --disable_rshim --disable_tracer "
                           "--disable_counter_rd --disable_port_owner")
    unrestricted = [bdf for bdf, value in rshim.items() if _coded(value) == 0]
    if unrestricted:
        return R(c.get("status_bad", "warn"), seen, expected, "RShim not restricted on %s" % ", ".join(unrestricted))
    unread = [bdf for bdf in functions if _coded(rshim.get(bdf)) is None]
    if unread:
        why = "; ".join(filter(None, [(v.sources.get(name) or {}).get("reason") for name in
                                      ["mlxconfig"] + ["mlxconfig:%s" % bdf for bdf in unread]])) \
            or "mlxconfig gave no INTERNAL_CPU_RSHIM"
        return R("warn", seen, expected, "not read (%s): the provider must attest the DPU's host isolation" % why)
    return R("pass", seen, expected)


UFM_CONTROLS = ("MAD keys with randomized seeds (MKey, VSKey, PMKey, CCKey, N2N, AM, SMKey, SAKey)",
                "GUID-based access control (allowed_guid_list)", "service keys", "the enhanced SA trust model",
                "MAD rate limiting and per-source-LID rate limits")


@host_rule
def ufm_secured_profile(v, c):
    """On an InfiniBand fabric a tenant's node can send management datagrams to the subnet manager: UFM's "Secured
    Bare Metal Cloud" profile keeps it from reconfiguring the fabric or reading another tenant's traffic. It is a
    setting of the fabric manager, not of a node, so the provider attests it (audit_ufm_secured_profile)."""
    ports = ["%s/%s" % (d, p) for d, p, x in v.rdma_ports() if x.get("link_layer") == "InfiniBand"]
    seen = "%d InfiniBand port(s) (%s)" % (len(ports), name_list(ports))
    expected = "UFM Secured Bare Metal Cloud profile, attested by the provider (audit_ufm_secured_profile)"
    if v.param_flag("ufm_secured_profile"):
        return R("pass", seen + "; attested by the provider", expected)
    return R(c.get("status_bad", "warn"), seen, expected,
             "not attested: the provider must confirm in UFM (Continuous Security Verification) %s" % "; ".join(
                 UFM_CONTROLS))


_VIRTNET_ORIGINAL = re.compile(r'"Original Controller"\s*:\s*"v?(\d+(?:\.\d+)+)')


def parse_virtnet_version(text):
    """`virtnet version` -> the running controller's version ("Original Controller"; "Destination Controller" is
    the one staged for the next restart). None when the text names no original controller."""
    m = _VIRTNET_ORIGINAL.search(text or "")
    return m.group(1) if m else None


@host_rule
def virtio_net_controller(v, c):
    """The BlueField-3 virtio-net controller (NVIDIA bulletin 5815, CVE-2026-65094: a VM user reaches a write-what-
    where in the controller, a tenant escape) at a fixed version. It runs on the DPU's Arm side in DPU mode; in NIC
    mode none runs. Its version is read where `virtnet` is on the node; from a host in zero-trust mode it cannot be."""
    from reports.phases.audit.software import judge_version, minimum_of
    dpu = v.collected("dpu")
    bf3 = sorted(b for b, model in (dpu.get("bluefield") or {}).items() if model == "BlueField-3")
    if not bf3:
        raise Skip("not applicable: no BlueField-3 on this host")
    text = dpu.get("virtnet_version")
    if text is not None:
        version = parse_virtnet_version(text)
        if version is None:
            line = next((x for x in text.splitlines() if x.strip()), "(empty)")
            return R("error", "virtnet version: no \"Original Controller\" in %r" % line[:200], "a readable version",
                     "unparseable output of virtnet version")
        status, expected, reason = judge_version(minimum_of(c), version)
        return R(status, "virtio-net controller %s (running)" % version, expected, reason)
    settings = {bdf: (dpu.get("queries") or {}).get(bdf, {}).get("settings") or {} for bdf in bf3}
    seen = "; ".join("%s: INTERNAL_CPU_MODEL %s, INTERNAL_CPU_OFFLOAD_ENGINE %s" % (
        b, s.get("INTERNAL_CPU_MODEL") or "not read", s.get("INTERNAL_CPU_OFFLOAD_ENGINE") or "not read")
        for b, s in sorted(settings.items()))
    expected = "a fixed virtio-net controller (bulletin 5815), or NIC mode"
    nic_mode = [b for b, s in settings.items() if _coded(s.get("INTERNAL_CPU_OFFLOAD_ENGINE")) == 1]
    dpu_mode = [b for b, s in settings.items() if b not in nic_mode and _coded(s.get("INTERNAL_CPU_MODEL")) == 1]
    if dpu_mode:
        return R(c.get("status_bad", "warn"), seen + "; virtnet not on this host", expected,
                 "DPU mode (%s): the controller runs on the DPU's Arm side, where the host cannot read its version; "
                 "the provider must attest a fixed release" % name_list(dpu_mode))
    if len(nic_mode) == len(bf3):
        return R("pass", seen + ": NIC mode, no virtio-net controller runs", expected)
    return R("warn", seen, expected, "the DPU's mode could not be read, nor the controller's version")
