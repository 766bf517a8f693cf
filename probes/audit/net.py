"""Networking and fabric for the audit: network interfaces and RDMA devices from /sys (no tool needed), `ibstat`
and `ibv_devinfo` when installed, addresses from `ip -j addr`, the default route from /proc/net, and the NCCL
settings a job would inherit (/etc/nccl.conf and friends, exported NCCL_* variables).

The controller classifies interfaces (compute fabric, storage, frontend) from these raw properties.
"""

import glob
import json
import os
import re
import xml.etree.ElementTree as ET

from probes.audit.collect import listdir, read, read_key_values, read_strip, readlink_base, to_int

SYS_NET = "/sys/class/net"
SYS_IB = "/sys/class/infiniband"
IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards",
               "local_link_integrity_errors", "excessive_buffer_overrun_errors", "port_rcv_remote_physical_errors")


def _state_word(text):
    """'4: ACTIVE' -> 'ACTIVE'; '5: LinkUp' -> 'LinkUp'."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip()


def parse_rate_gbps(text):
    """'400 Gb/sec (4X NDR)' -> 400.0 (sysfs and ibstat 'Rate: 400')."""
    m = re.match(r"^\s*(\d+(?:\.\d+)?)", text or "")
    return float(m.group(1)) if m else None


def parse_ibstat(text):
    """`ibstat` -> {ca name: {"type", "firmware", "ports": {n: {"state", "physical_state", "rate", ...}}}}."""
    cas = {}
    ca = port = None
    for line in (text or "").splitlines():
        m = re.match(r"^CA '([^']+)'", line)
        if m:
            ca = cas.setdefault(m.group(1), {"ports": {}})
            port = None
            continue
        if ca is None or ":" not in line:
            continue
        key, value = (p.strip() for p in line.split(":", 1))
        m = re.match(r"^Port (\d+)$", key)
        if m:
            port = ca["ports"].setdefault(m.group(1), {})
            continue
        field = key.lower().replace(" ", "_")
        if port is not None:  # every key after a "Port N:" line belongs to that port
            port[field] = value
        else:
            ca[{"ca_type": "type", "firmware_version": "firmware"}.get(field, field)] = value
    for info in cas.values():
        for p in info["ports"].values():
            if "rate" in p:
                p["rate_gbps"] = parse_rate_gbps(p["rate"])
    return cas


def parse_ibv_devinfo(text):
    """`ibv_devinfo` -> {hca: {"fw_ver", "ports": {n: {"state", "active_mtu", "max_mtu", "link_layer", ...}}}}."""
    hcas = {}
    hca = port = None
    for line in (text or "").splitlines():
        stripped = line.strip()
        m = re.match(r"^hca_id:\s*(\S+)", stripped)
        if m:
            hca = hcas.setdefault(m.group(1), {"ports": {}})
            port = None
            continue
        if hca is None or ":" not in stripped:
            continue
        key, value = (p.strip() for p in stripped.split(":", 1))
        if key == "port":
            port = hca["ports"].setdefault(value, {})
            continue
        if port is not None:
            if key in ("active_mtu", "max_mtu"):
                port[key] = to_int(value.split()[0])
            else:
                port[key] = value
        else:
            hca[key] = value
    return hcas


def default_route_ifaces(route_text, route6_text=None):
    """Interfaces carrying a default route, from /proc/net/route and /proc/net/ipv6_route."""
    out = []
    for line in (route_text or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 8 and parts[1] == "00000000" and parts[7] == "00000000" and parts[0] not in out:
            out.append(parts[0])
    for line in (route6_text or "").splitlines():
        parts = line.split()
        if len(parts) >= 10 and parts[0] == "0" * 32 and parts[1] == "00" and parts[9] != "lo" \
                and parts[9] not in out:
            out.append(parts[9])
    return out


def parse_ip_addr(text):
    """`ip -j addr show` -> {ifname: ["10.0.0.5/24", ...]} (global and site scopes)."""
    out = {}
    for entry in json.loads(text or "[]"):
        addrs = []
        for a in entry.get("addr_info", []):
            if a.get("scope") in ("host", "link") or not a.get("local"):
                continue
            addrs.append("%s/%s" % (a["local"], a.get("prefixlen")))
        out[entry.get("ifname")] = addrs
    return out


def _ib_port(path):
    port = {
        "state": _state_word(read_strip(os.path.join(path, "state"))),
        "phys_state": _state_word(read_strip(os.path.join(path, "phys_state"))),
        "rate": read_strip(os.path.join(path, "rate")),
        "link_layer": read_strip(os.path.join(path, "link_layer")),
        "lid": read_strip(os.path.join(path, "lid")),
        "sm_lid": read_strip(os.path.join(path, "sm_lid")),
    }
    port["rate_gbps"] = parse_rate_gbps(port["rate"])
    counters = {}
    for name in IB_COUNTERS:
        value = to_int(read_strip(os.path.join(path, "counters", name)))
        if value is not None:
            counters[name] = value
    port["counters"] = counters
    gid_types = {}
    for idx in listdir(os.path.join(path, "gid_attrs", "types"))[:64]:
        kind = read_strip(os.path.join(path, "gid_attrs", "types", idx))
        gid = read_strip(os.path.join(path, "gids", idx))
        if kind and gid and gid != "0000:0000:0000:0000:0000:0000:0000:0000":
            gid_types[idx] = {"type": kind, "ipv4": gid.startswith("0000:0000:0000:0000:0000:ffff:")}
    port["gids"] = gid_types
    pkeys = []
    for idx in sorted(listdir(os.path.join(path, "pkeys")), key=lambda s: to_int(s, 0))[:16]:
        value = read_strip(os.path.join(path, "pkeys", idx))
        if value and to_int(value, 0) != 0:
            pkeys.append(value.lower())
    port["pkeys"] = pkeys
    return port


def scan_infiniband(root=SYS_IB):
    devices = {}
    for dev in listdir(root):
        path = os.path.join(root, dev)
        ports = {p: _ib_port(os.path.join(path, "ports", p)) for p in listdir(os.path.join(path, "ports"))}
        devices[dev] = {
            "fw_ver": read_strip(os.path.join(path, "fw_ver")),
            "hca_type": read_strip(os.path.join(path, "hca_type")),
            "board_id": read_strip(os.path.join(path, "board_id")),
            "pci": readlink_base(os.path.join(path, "device")),
            "netdevs": listdir(os.path.join(path, "device", "net")),
            "ports": ports,
        }
    return devices


def scan_interfaces(root=SYS_NET):
    ifaces = {}
    for name in listdir(root):
        path = os.path.join(root, name)
        has_device = os.path.exists(os.path.join(path, "device"))
        ifaces[name] = {
            "type": to_int(read_strip(os.path.join(path, "type"))),
            "operstate": read_strip(os.path.join(path, "operstate")),
            "mtu": to_int(read_strip(os.path.join(path, "mtu"))),
            "speed_mbps": to_int(read_strip(os.path.join(path, "speed"))),
            "mac": read_strip(os.path.join(path, "address")),
            "virtual": not has_device,
            "pci": readlink_base(os.path.join(path, "device")) if has_device else None,
            "driver": readlink_base(os.path.join(path, "device", "driver")) if has_device else None,
            "master": readlink_base(os.path.join(path, "master")),
            "rp_filter": to_int(read_strip("/proc/sys/net/ipv4/conf/%s/rp_filter" % name)),
        }
    return ifaces


def collect_links(c):
    ifaces = scan_interfaces()
    ib = scan_infiniband()
    c.mark("net_sysfs", "ok" if ifaces else "error", None if ifaces else "no interface under %s" % SYS_NET)
    c.mark("rdma_sysfs", "ok" if os.path.isdir(SYS_IB) else "not_applicable",
           None if os.path.isdir(SYS_IB) else "no RDMA device (%s absent)" % SYS_IB)
    out = {"interfaces": ifaces, "rdma": ib,
           "default_route": default_route_ifaces(read("/proc/net/route"), read("/proc/net/ipv6_route")),
           "rp_filter_all": to_int(read_strip("/proc/sys/net/ipv4/conf/all/rp_filter"))}
    res = c.cmd("ip_addr", ["ip", "-j", "addr", "show"], timeout=5)
    if res.rc == 0:
        try:
            for name, addrs in parse_ip_addr(res.stdout).items():
                if name in ifaces:
                    ifaces[name]["addresses"] = addrs
        except ValueError as exc:
            c.mark("ip_addr", "error", "unreadable JSON: %s" % exc)
    return out


def collect_ib_tools(c):
    out = {}
    res = c.cmd("ibstat", ["ibstat"], timeout=10)
    if res.rc == 0:
        c.save_raw("ibstat.txt", res.stdout)
        out["ibstat"] = parse_ibstat(res.stdout)
    res = c.cmd("ibv_devinfo", ["ibv_devinfo"], timeout=10)
    if res.rc == 0:
        c.save_raw("ibv_devinfo.txt", res.stdout)
        out["ibv_devinfo"] = parse_ibv_devinfo(res.stdout)
    return out


def _nccl_lines(text):
    """NCCL_* assignments in a shell profile or environment file."""
    out = {}
    for key, value in read_key_values(text).items():
        if key.startswith("NCCL_"):
            out[key] = value
    return out


def collect_nccl(c, extra_paths=()):
    """NCCL settings a job on this node inherits; later files override earlier ones when NCCL reads them."""
    home = os.path.expanduser("~")
    paths = ["/etc/nccl.conf", os.path.join(home, ".nccl.conf")]
    if os.environ.get("NCCL_CONF_FILE"):
        paths.append(os.environ["NCCL_CONF_FILE"])
    paths += [p for p in extra_paths if p not in paths]
    files = {}
    for path in paths:
        text = read(path)
        if text is not None:
            files[path] = read_key_values(text)
    profile = {}
    for path in ["/etc/environment"] + sorted(glob.glob("/etc/profile.d/*.sh")):
        found = _nccl_lines(read(path))
        if found:
            profile[path] = found
    c.mark("nccl_config", "ok")
    environment = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    named = [values["NCCL_TOPO_FILE"] for values in files.values() if values.get("NCCL_TOPO_FILE")]
    named += [values["NCCL_TOPO_FILE"] for values in profile.values() if values.get("NCCL_TOPO_FILE")]
    if environment.get("NCCL_TOPO_FILE"):
        named.append(environment["NCCL_TOPO_FILE"])
    return {"files": files, "searched": paths, "profile": profile, "environment": environment,
            "topo_files": topo_files(named)}


# Where providers put an NCCL topology file for VMs whose virtual PCI tree hides the real GPU/NIC affinity.
TOPO_CANDIDATES = ("/etc/nccl/topo.xml", "/etc/nccl/nccl-topology.xml", "/etc/nccl-topology.xml",
                   "/var/run/nvidia-topologyd/virtualTopology.xml", "/opt/microsoft/ndv5-topo.xml",
                   "/opt/microsoft/ndv4-topo.xml")


def topo_files(named):
    """Each NCCL topology file named (NCCL_TOPO_FILE) or found where providers put one: exists, size, whether it is
    well-formed XML and its root element (NCCL's is <system>)."""
    out = []
    found = [p for p in TOPO_CANDIDATES if os.path.exists(p)] + sorted(glob.glob("/etc/nccl/*.xml"))
    for path in list(dict.fromkeys(list(named) + found)):
        entry = {"path": path, "named": path in named, "exists": os.path.isfile(path), "size": None, "xml_error": None,
                 "root": None, "unexpanded": "$" in path}
        if entry["exists"]:
            entry["size"] = os.path.getsize(path)
            try:
                entry["root"] = ET.parse(path).getroot().tag
            except (ET.ParseError, OSError) as exc:
                entry["xml_error"] = str(exc)[:200]
        out.append(entry)
    return out
