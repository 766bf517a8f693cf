"""What the monitoring probes share, and the controller with them:

- a URL given to them must not hold a credential, because an artifact records its parameters as given; credentials
  come from files (token_file, basic_auth_file) and are never recorded;
- which node a series belongs to (node_of): one rule for the Prometheus half and the Grafana half of the phase
  (reports/phases/monitoring/prometheus.py and grafana.py call it on the labels the probes recorded raw)."""

import ipaddress
import re
import urllib.parse

# The labels that name a node, in the order they are read: the exporters' own (dcgm-exporter's Hostname, a
# relabelling's node, node-exporter's nodename, ...), then the scrape target's `instance`.
NODE_LABELS = ("node", "Hostname", "hostname", "nodename", "host")
SERIES_NODE_LABELS = NODE_LABELS + ("instance",)


# A duration as Prometheus writes one (prometheus/common model.Duration): units from years down to milliseconds,
# largest first, each at most once: "15s", "1m30s", "2h", "1w", "500ms".
PROM_DURATION = re.compile(r"^(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
PROM_UNITS_S = (365 * 86400, 7 * 86400, 86400, 3600, 60, 1, 0.001)


def prom_duration_s(text):
    """Seconds of a Prometheus duration ("1m30s" -> 90.0; "0" -> 0.0), or None when text is not one. One reader
    for the probe's query steps and the controller's scrape intervals: a target scraped every 90 s is "1m30s" in
    Prometheus' targets API."""
    text = str(text or "").strip()
    if text == "0":
        return 0.0
    m = PROM_DURATION.match(text)
    if not text or not m:
        return None
    return float(sum(int(g) * unit for g, unit in zip(m.groups(), PROM_UNITS_S) if g))


def refuse_credential_in_url(art, p):
    """True (the artifact is an error, its url parameter left out) when p["url"] holds user:password@."""
    parts = urllib.parse.urlsplit(p["url"])
    if parts.username is None and parts.password is None:
        return False
    art.params["url"] = "(left out: it held a credential)"
    art.error("url must not hold a credential: put it in token_file or basic_auth_file")
    return True


def _is_address(text):
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def short_name(text):
    """A host name without its domain ('node1.example' -> 'node1'); an address as it is."""
    return text if _is_address(text) else text.split(".")[0]


def instance_host(instance):
    """The host part of a scrape target's instance: '10.0.0.5:9100' -> '10.0.0.5', '[fe80::1]:9100' -> 'fe80::1',
    'node1' -> 'node1' (an unbracketed IPv6 address has no port to strip)."""
    text = str(instance or "").strip()
    if text.startswith("["):
        return text[1:].split("]")[0]
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


def as_nodes(nodes):
    """[{name, address}] of the nodes given as the role gives them; a bare name (an artifact of an earlier grafana
    probe version) is a node without an address."""
    return [n if isinstance(n, dict) else {"name": str(n)} for n in nodes or []]


def node_of(labels, nodes):
    """The node (its name in `nodes`, [{name, address}]) a series belongs to, or None. The labels are read in the
    order of SERIES_NODE_LABELS (the port of `instance` left out); the first that names a node decides: a value
    names a node when it is its name or address, else when its short name (without the domain; an address is never
    shortened) is the node's."""
    nodes = as_nodes(nodes)
    exact = {}
    for n in nodes:
        for key in (n.get("address"), n["name"]):
            if key:
                exact[str(key)] = n["name"]
    short = {}
    for n in nodes:
        short.setdefault(short_name(n["name"]), n["name"])
    for key in SERIES_NODE_LABELS:
        value = labels.get(key)
        if not value:
            continue
        value = instance_host(value) if key == "instance" else str(value)
        if value in exact:
            return exact[value]
        if short_name(value) in short:
            return short[short_name(value)]
    return None
