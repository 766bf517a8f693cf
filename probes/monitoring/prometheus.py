"""prometheus: what the provider's Prometheus-compatible API holds for this cluster, read from one host (seed,
"Reliability, Health Checks, Autoremediation, and SLAs": "a monitoring dashboard relies on some telemetry, so you
have to have DCGM setup correctly (and securely)"; "A stale green result is not evidence of health").

The probe records, the controller judges (reports/phases/monitoring/prometheus.py):
- the API: `url`, else the first of http://<candidate>:9090 that answers /api/v1/status/buildinfo; its version;
- the scrape targets (/api/v1/targets): instance, job, labels, health, scrape interval, last scrape, last error;
- for every metric of `series` (DCGM exporter, node exporter and scheduler families): every series the API held
  in the last `lookback` (/api/v1/series) and the newest sample of those it still serves (an instant query of
  `timestamp(metric)`), with the labels that name a node and a GPU (instance, node, Hostname, hostname, nodename,
  host, gpu, UUID, job), and the query's own evaluation time: a series listed but not served, or served with an
  old sample, is stale;
- for every metric of `watch` (XID errors): each series' value at the start of the window and every change of it
  after (the controller finds the first change after a fault's injection: when the fault became visible);
- the clocks (facts `server_clock`, `host_clocks`): the points above are the Prometheus server's clock, the
  fault's injection another host's (the reliability phase's observer), so the controller needs both against this
  host's clock. The server's: the quickest of a few instant queries of `time()` bracketed by this host's clock
  (sent with nocache=1, else VictoriaMetrics evaluates it 30 s back; answered as a scalar, or as VictoriaMetrics'
  vector of one sample), offset_s = the server's time - the request's midpoint, uncertainty_s = half its round trip
  (and the server's millisecond); `server_clock_error` where it could not be read. Other hosts' (`clocks`: what
  the role read in turn on this host and on each of them, roles/monitoring/tasks/main.yml): offset_s = the host's
  clock - the midpoint of this host's readings just before and after it, uncertainty_s = half the time between them;
  time() reads the clock of the server that evaluates the query. That is the clock that stamped the samples only
  where that server scraped them itself (the controller checks the scrape targets and the samples' age against it,
  reports/phases/monitoring/prometheus.py stamping_clock); behind Thanos Query, Mimir or a remote-write receiver
  the samples carry the scraper's clock, which no query here reads;
- security: the server's flags that open write or admin endpoints (web.enable-admin-api, web.enable-lifecycle,
  web.enable-remote-write-receiver, web.enable-otlp-receiver, and the enable-feature list: otlp-write-receiver,
  remote-write-receiver) and whether the API answered without a credential; every node's exporter
  ports (`exporter_ports`) that accept a connection from this host, and whether they answer without one.
A credential (`token_file`: a bearer token, `basic_auth_file`: "user:password") is read from its file when the
request is made and never written to the artifact, its raw files or an error text.
Skipped with the reason when no Prometheus answers.
"""

import base64
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime

from probes.common.clocks import host_clocks  # other hosts' clocks against this one's
from probes.monitoring.common import SERIES_NODE_LABELS, prom_duration_s, refuse_credential_in_url
from probes.params import Param, Params

PARAMS = Params(
    url=Param(str, "", "the Prometheus-compatible API (e.g. http://head:9090); '' = try `candidates` on port 9090"),
    candidates=Param(list, [], "hosts (names or addresses) tried on port 9090 when no url is given"),
    token_file=Param(str, "", "a file holding a bearer token for the API (never recorded)"),
    basic_auth_file=Param(str, "", "a file holding user:password for the API (never recorded)"),
    nodes=Param(list, [], "this cluster's nodes: [{name, address}]"),
    series=Param(dict, {}, "metric families to look for: {family: [metric names]}"),
    exporter_ports=Param(dict, {}, "exporter ports probed on every node: {exporter name: port}"),
    lookback=Param(str, "1h", "how far back series count as existing (a Prometheus duration), when no `since`"),
    since=Param(str, "", "the assessment's start (RFC 3339 UTC): look back to 5 minutes before it, so that the faults "
                         "it injected are in the window"),
    watch=Param(list, ["DCGM_FI_DEV_XID_ERRORS"], "fault metrics whose changes in the lookback are recorded per "
                                                  "series (when a fault became visible)"),
    timeout_s=Param(float, 10, "seconds per HTTP request or TCP connection"),
    clocks=Param(list, [], "[[host, output], ...]: clocks read in turn by the role, this host's first and again "
                           "after each other host's (outputs holding a `clustermax-assess-clock: <epoch s>` line)"),
)
CLOCK_TRIES = 3  # instant queries of time(): the quickest round trip is kept
# Sent with every query: VictoriaMetrics otherwise evaluates an instant query near "now" at now -
# -search.latencyOffset (30 s by default) and serves ranges from its cache (app/vmselect/prometheus/prometheus.go,
# QueryHandler); Prometheus reads only the query parameters it knows and ignores the rest, as the APIs built like
# it do.
NOCACHE = {"nocache": "1"}
# The labels that name a node (every one node_of reads: the controller files each series under its node), a GPU, a job.
NAMING_LABELS = SERIES_NODE_LABELS + ("gpu", "UUID", "job", "device")
# The flags of /api/v1/status/flags kept as the server gives them (strings): the switches of the write and admin
# endpoints (3.x: web.enable-otlp-receiver, POST /api/v1/otlp/v1/metrics), enable-feature (a comma-separated list:
# 2.x opens the OTLP endpoint with otlp-write-receiver, the remote-write one with remote-write-receiver) and
# web.config.file. Absent from a version that has no such flag: kept as None.
WRITE_FLAGS = ("web.enable-admin-api", "web.enable-lifecycle", "web.enable-remote-write-receiver",
               "web.enable-otlp-receiver", "enable-feature", "web.config.file")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not followed: urllib would send the Authorization header to wherever it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


# No proxy from the environment (a login node's http_proxy would get the credential, and would answer for the
# exporters), no redirects.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect)


class Api:
    """GETs on one Prometheus API, with or without the credential; errors name the path, never the credential."""

    def __init__(self, url, p):
        self.url, self.p = url.rstrip("/"), p

    def _auth(self):
        if self.p["token_file"]:
            with open(self.p["token_file"]) as fh:
                return "Bearer " + fh.read().strip()
        if self.p["basic_auth_file"]:
            with open(self.p["basic_auth_file"]) as fh:
                return "Basic " + base64.b64encode(fh.read().strip().encode()).decode()
        return None

    def get(self, path, params=None, auth=True):
        """(status code, decoded JSON or None, error text or None)."""
        url = self.url + path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        req = urllib.request.Request(url)
        header = self._auth() if auth else None
        if header:
            req.add_header("Authorization", header)
        try:
            with OPENER.open(req, timeout=self.p["timeout_s"]) as resp:
                return resp.status, json.loads(resp.read().decode()), None
        except urllib.error.HTTPError as exc:
            return exc.code, None, "HTTP %d on %s" % (exc.code, path)
        except (OSError, ValueError) as exc:
            return None, None, "%s on %s" % (type(exc).__name__ if not str(exc) else str(exc)[:200], path)

    def data(self, path, params=None):
        code, doc, err = self.get(path, params)
        if err or not doc or doc.get("status") != "success":
            raise ApiError(err or "no success answer on %s (%s)" % (path, code))
        return doc["data"]


class ApiError(Exception):
    pass


def find_api(p):
    """(Api, version, tried) of the first URL that answers /api/v1/status/buildinfo; (None, None, tried)."""
    urls = [p["url"]] if p["url"] else ["http://%s:9090" % h for h in p["candidates"]]
    tried = []
    for url in urls:
        api = Api(url, p)
        code, doc, err = api.get("/api/v1/status/buildinfo")
        if doc and doc.get("status") == "success":
            return api, doc["data"].get("version"), tried
        tried.append("%s: %s" % (url, err or "HTTP %s" % code))
    return None, None, tried


def naming(labels):
    return {k: labels[k] for k in NAMING_LABELS if k in labels}


def series_of(api, metric, lookback):
    """[{labels, ts}] of one metric: every series of the lookback, with its newest served sample's time or None."""
    now = time.time()
    listed = api.data("/api/v1/series", {"match[]": metric, "start": now - _seconds(lookback), "end": now})
    served = api.data("/api/v1/query", dict(NOCACHE, query="timestamp(%s)" % metric))
    newest, evaluated = {}, None
    for item in served.get("result") or []:
        evaluated = float(item["value"][0])
        newest[json.dumps(naming(item["metric"]), sort_keys=True)] = float(item["value"][1])
    out = []
    seen = set()
    for labels in listed:
        key = json.dumps(naming(labels), sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        out.append({"labels": naming(labels), "ts": newest.pop(key, None)})
    # Served but not listed (a lookback shorter than the scrape history's index): still a series with its sample.
    out += [{"labels": json.loads(k), "ts": ts} for k, ts in newest.items()]
    return out, evaluated


MAX_POINTS = 10000  # Prometheus refuses a range query of more than 11,000 points per series


def changes(api, metric, lookback, targets):
    """[{labels, points: [[ts, value], ...]}]: each series' value at the start of the window and every sample where
    it changed. XID errors hold the last XID seen, so a fault shows as a change, not as "non-zero": an XID from
    before the run stays non-zero, and a second injection on the same node is a new change. The range query runs at
    the smallest scrape interval (no sample stepped over), coarser only where the window would pass MAX_POINTS."""
    window = _seconds(lookback)
    step = min([_seconds(t.get("scrapeInterval") or "15s") for t in targets] or [15.0])
    step = max(step, window / MAX_POINTS)
    now = time.time()
    data = api.data("/api/v1/query_range", dict(NOCACHE, query=metric, start=now - window, end=now, step=step))
    out = []
    for item in data.get("result") or []:
        points, last = [], None
        for ts, value in item.get("values") or []:
            if value != last:
                points.append([float(ts), float(value)])
                last = value
        out.append({"labels": naming(item["metric"]), "points": points, "step": step})
    return out


def instant_time(data, query="time()"):
    """The evaluation time of an instant query's answer that holds one sample, checked against its value (the query
    is time(): the two must agree): a scalar [t, "v"] (Prometheus) or a vector of one sample with no labels
    [{"metric": {}, "value": [t, "v"]}] (VictoriaMetrics answers every instant query as a vector:
    app/vmselect/prometheus/query_response.qtpl). A value other than its time by more than the millisecond both are
    written in is a query evaluated at another time than it says (VictoriaMetrics' latency offset where nocache was
    not honoured: the value 30 s behind), never a clock reading. Raises ApiError."""
    try:
        kind, result = data["resultType"], data["result"]
        if kind == "vector" and len(result) == 1:
            result = result[0]["value"]
        elif kind != "scalar":
            raise TypeError(kind)
        at, value = float(result[0]), float(result[1])
    except (KeyError, IndexError, TypeError, ValueError):
        raise ApiError("%s did not answer a scalar or a one-sample vector: %s" % (query, json.dumps(data)[:200])) \
            from None
    if abs(value - at) > 0.0015:
        raise ApiError("%s answered %.3f stamped %.3f: evaluated %.3f s from the time it gives (a query cache's "
                       "latency offset?), not a clock reading" % (query, value, at, at - value))
    return at


def server_clock(api, tries=CLOCK_TRIES):
    """The Prometheus server's clock against this host's: {offset_s (the server's time minus this host's at the
    request's midpoint), uncertainty_s (half the round trip, and the millisecond the server answers in), at (this
    host's time)} of the quickest of `tries` instant queries of time() (instant_time: the evaluation time the answer
    gives, by the server's clock), sent with nocache=1 and no `time` parameter (with one, time() would answer the
    time given, not the server's). Raises ApiError."""
    best = None
    for _ in range(tries):
        before = time.time()
        data = api.data("/api/v1/query", dict(NOCACHE, query="time()"))
        after = time.time()
        server = instant_time(data)
        mid = (before + after) / 2
        reading = {"offset_s": round(server - mid, 3), "uncertainty_s": round((after - before) / 2 + 0.001, 3),
                   "at": round(mid, 3)}
        if best is None or reading["uncertainty_s"] < best["uncertainty_s"]:
            best = reading
    return best


def _seconds(duration):
    """A Prometheus duration ("1h", "1m30s", "500ms") in seconds; a bare number is seconds."""
    seconds = prom_duration_s(duration)
    return seconds if seconds is not None else float(duration)


def exporter_answers(address, port, timeout):
    """"closed", or the HTTP status of GET /metrics without a credential ("open <code>")."""
    try:
        socket.create_connection((address, int(port)), timeout=timeout).close()
    except OSError:
        return "closed"
    try:
        with OPENER.open("http://%s:%d/metrics" % (address, int(port)), timeout=timeout) as resp:
            return "open %d" % resp.status
    except urllib.error.HTTPError as exc:
        return "open %d" % exc.code
    except OSError as exc:
        return "open (%s)" % (str(exc)[:80] or type(exc).__name__)


def window(p):
    """The lookback as a Prometheus duration: from 5 minutes before `since`, else `lookback`."""
    if not p["since"]:
        return p["lookback"]
    started = datetime.strptime(p["since"].replace("Z", "+0000"), "%Y-%m-%dT%H:%M:%S%z").timestamp()
    return "%ds" % max(60, int(time.time() - started) + 300)


def run(art, p, out_dir):
    if refuse_credential_in_url(art, p):
        return
    try:
        lookback = window(p)
    except ValueError:
        art.error("since=%r is not an RFC 3339 UTC time (e.g. 2026-12-03T01:19:11Z)" % p["since"])
        return
    api, version, tried = find_api(p)
    if api is None:
        art.skip("no Prometheus API answered: %s" % ("; ".join(tried) or "no url and no candidates given"))
        return
    art.tool.update(name="prometheus", version=version)
    art.facts.update(url=api.url, nodes=p["nodes"], families=p["series"], lookback=lookback, errors=[])
    try:
        targets = api.data("/api/v1/targets", {"state": "active"}).get("activeTargets") or []
    except ApiError as exc:  # Mimir, VictoriaMetrics' vmselect, managed services: series without a targets API
        targets = []
        art.facts["errors"].append("targets: %s" % exc)
    art.facts["targets"] = [{"labels": naming(t.get("labels") or {}), "health": t.get("health"),
                             "scrape_interval": t.get("scrapeInterval") or (t.get("discoveredLabels") or {}).get(
                                 "__scrape_interval__"), "last_scrape": t.get("lastScrape"),
                             "last_error": t.get("lastError") or None, "scrape_url": t.get("scrapeUrl")}
                            for t in targets]
    found, evaluated = {}, {}
    for family, metrics in p["series"].items():
        for metric in metrics:
            try:
                found[metric], evaluated[metric] = series_of(api, metric, lookback)
            except ApiError as exc:
                art.facts["errors"].append("%s: %s" % (metric, exc))
            art.add("series", len(found.get(metric) or []), "count", family=family, name=metric)
    art.facts["series"] = found
    art.facts["watch"] = {}
    for metric in p["watch"]:
        try:
            art.facts["watch"][metric] = changes(api, metric, lookback, targets)
        except ApiError as exc:
            art.facts["errors"].append("%s: %s" % (metric, exc))
    # When each metric's instant query was evaluated (its series' ages are taken from that), None where it served none.
    art.facts["evaluated_at"] = evaluated
    # The clocks the points above are on, against this host's (the controller times a fault's visibility with them).
    try:
        art.facts["server_clock"] = server_clock(api)
    except ApiError as exc:
        art.facts["server_clock_error"] = str(exc)
    art.facts["host_clocks"] = host_clocks(p["clocks"])
    code, flags, err = api.get("/api/v1/status/flags")
    art.facts["flags"] = {k: (flags or {}).get("data", {}).get(k) for k in WRITE_FLAGS} if flags else None
    art.facts["flags_error"] = err
    authed = bool(p["token_file"] or p["basic_auth_file"])
    if authed:
        code, _, _ = api.get("/api/v1/status/buildinfo", auth=False)
    art.facts["unauthenticated_api"] = (code == 200) if authed else True
    art.facts["exporters"] = {n["name"]: {name: exporter_answers(n["address"], port, min(3.0, p["timeout_s"]))
                                          for name, port in p["exporter_ports"].items()} for n in p["nodes"]}
