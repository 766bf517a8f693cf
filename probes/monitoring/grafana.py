"""grafana: the provider's Grafana, read through its HTTP API from one host (issue 22, "Dashboards"; seed,
"Reliability, Health Checks, Autoremediation, and SLAs": a good dashboard shows the failed component, the affected
jobs, the current scheduler state and when each check last ran -- a stale green result is not evidence of health).

Read only: GET /api/health; GET /api/search?type=dash-db; GET /api/dashboards/uid/<uid> for each dashboard (up to
max_dashboards); each panel target's PromQL is classified (pure rules below) and, with a prometheus_url, evaluated as
an instant query (GET <prometheus_url>/api/v1/query): did it return data, and which node labels its series carry
(recorded raw: the controller files them under this cluster's nodes by their names and addresses, with the rule the
Prometheus half uses, probes/monitoring/common.py node_of). Nothing is created, changed or deleted in the
provider's Grafana: the anonymous-access test repeats the search and one dashboard without credentials (Grafana's
dashboard answer says whether the caller may save it: meta.canSave for an anonymous caller means anonymous writes are
possible) and reads /api/frontend/settings -- no write is attempted.

Why a prometheus_url and not Grafana's /api/ds/query: that endpoint is a POST whose body names a datasource uid,
and the dashboards (e.g. NVIDIA's dcgm-exporter dashboard) name their datasource through a `$datasource` variable
resolved in the browser; the role already knows the Prometheus the monitoring phase checks, and a GET on Prometheus'
own query API is read-only by construction. Without a prometheus_url the panels are classified but not evaluated
(facts say so).

Template variables (substitute_vars): Grafana's interval variables ($__rate_interval, $__interval, $interval,
$__range, $__auto...) become "5m" (a rate window any scrape interval up to 75 s fills); a variable whose value is fixed
in the model (custom, constant, textbox: fixed_values) takes that value; any other variable, in any of its spellings
($var, ${var}, ${var:fmt}, [[var]]), stands for "All" -- query variables are filled from the datasource in the browser,
and All is the one value that does not depend on it: a matcher label="$var" or label=~"$var" becomes label=~".*", a
bare use becomes .*. Every series then comes back, and the controller decides whether they are ours.

Credentials: token_file (a service account token or API key, sent as "Bearer <token>") or basic_auth_file
("user:password"), read at run time. The credential is never written into the artifact, its raw files or any error
text: redact() replaces it everywhere text from outside is kept.

Results (labels): grafana_up (1: /api/health answered); dashboards (count); dashboards_class {class: gpu_health |
scheduler | freshness} (dashboards of that class); panels_total, panels_evaluated, panels_with_data,
panels_aggregate (data, none of it with a node label: an aggregate); anonymous_read (1: the search answered
dashboards without credentials); anonymous_write (1: a dashboard read without credentials says the caller may save
it). Which panels show this cluster's nodes is the controller's (reports/phases/monitoring/grafana.py).
Facts: url, version, database, dashboards [{uid, title, classes, panels: [{id, title, classes, targets: [{expr,
query, evaluated, data, series, node_labels (the distinct sets of SERIES_NODE_LABELS the series carry, at most
MAX_LABEL_SETS), node_label_sets (how many distinct sets there were), unlabelled, error}]}]}], anonymous {search_status,
search_dashboards, dashboard_uid, dashboard_status, rights {canSave, canEdit, canAdmin}, settings_status,
anonymous_enabled, write_possible}, nodes ([{name, address}] as given), evaluated_with, errors, candidates (the URLs
tried), http_calls, rules (the class patterns, node labels and rate window used).
"""

import base64
import json
import re
import socket
import urllib.error
import urllib.parse
import urllib.request

from probes.monitoring.common import SERIES_NODE_LABELS, as_nodes, node_of, refuse_credential_in_url
from probes.params import Param, Params

PARAMS = Params(
    url=Param(str, "", "Grafana's base URL (default: try http://<this host>:3000, then each candidate host)"),
    candidates=Param(list, [], "hosts to try on port 3000 when url is empty"),
    token_file=Param(str, "", "file holding a Grafana service account token (sent as a Bearer token)"),
    basic_auth_file=Param(str, "", "file holding user:password for Grafana (when no token_file)"),
    prometheus_url=Param(str, "", "Prometheus base URL the panel queries are evaluated against (empty: not "
                                  "evaluated)"),
    nodes=Param(list, [], "this cluster's nodes: [{name, address}] (recorded for the controller, which files the "
                          "series under them)"),
    timeout_s=Param(float, 10, "seconds one HTTP request may take"),
    max_dashboards=Param(int, 50, "dashboards read at most"),
    max_panels=Param(int, 200, "panel targets evaluated at most (all dashboards together)"),
)

# Which metric names make a dashboard (or panel) of a class. The seed's dashboard shows GPU health, the scheduler's
# state and when each check last ran; these are the exporters' names for those (dcgm-exporter; the Slurm exporters
# and kube-state-metrics; timestamps of the last run of a check or a textfile collector).
CLASS_RULES = (
    ("gpu_health", re.compile(r"\bDCGM_[A-Z0-9_]+")),
    ("scheduler", re.compile(r"\b(slurm_[a-z0-9_]+|kube_[a-z0-9_]+)")),
    ("freshness", re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*(last_run|last_success|last_check|_timestamp_seconds|"
                             r"_last_[a-z_]*time[a-z_]*)\b|\btime\(\)\s*-")),
)
CLASSES = tuple(c for c, _ in CLASS_RULES)
MAX_LABEL_SETS = 1000  # distinct node label sets kept per query (a Prometheus shared by many clusters holds more)
INTERVAL_VARS = ("__rate_interval", "__interval", "interval", "__range", "__auto", "__auto_interval",
                 "__interval_ms", "__range_s")
RATE_WINDOW = "5m"

# ---------------------------------------------------------------------------------------------------------------
# pure rules


def classify(expr):
    """The classes (gpu_health, scheduler, freshness) whose metrics an expression uses."""
    return [c for c, rx in CLASS_RULES if rx.search(expr or "")]


def panel_targets(dashboard):
    """(panel, [exprs]) of every panel, rows' nested panels included (collapsed rows hold theirs; schemaVersion < 16
    dashboards keep panels under `rows`). A row itself is no panel; a hidden target (hide: true) is not drawn, so not
    evaluated."""
    out = []

    def walk(panels):
        for p in panels or []:
            if not isinstance(p, dict):
                continue
            if p.get("type") == "row" or p.get("panels"):
                walk(p.get("panels"))
                if p.get("type") == "row":
                    continue
            exprs = [t.get("expr") for t in p.get("targets") or [] if isinstance(t, dict) and t.get("expr") and
                     not t.get("hide")]
            out.append((p, exprs))

    walk((dashboard or {}).get("panels"))
    for row in (dashboard or {}).get("rows") or []:
        walk(row.get("panels") if isinstance(row, dict) else [])
    return out


def fixed_values(dashboard):
    """{variable: value} of the dashboard's variables whose value is fixed in the model (custom, constant and
    textbox variables with a single current value, e.g. node-exporter-full's $diskdevices regex); the others (query
    variables, filled from the datasource in the browser) are not known here and stand for All."""
    out = {}
    for v in ((dashboard or {}).get("templating") or {}).get("list") or []:
        if not isinstance(v, dict) or v.get("type") not in ("custom", "constant", "textbox") or not v.get("name"):
            continue
        value = (v.get("current") or {}).get("value")
        if isinstance(value, str) and value and value != "$__all":
            out[v["name"]] = value
    return out


_VAR = r"(?:\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+))"


def substitute_vars(expr, fixed=None):
    """The expression with Grafana's variables replaced for an instant query (rule in the module doc): interval
    variables by RATE_WINDOW, variables of a fixed value (fixed_values) by it, any other variable by All (a matcher
    on it becomes label=~".*", a bare use .*)."""
    fixed = fixed or {}

    def known(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name in INTERVAL_VARS:
            return RATE_WINDOW
        return fixed.get(name, m.group(0))

    text = re.sub(_VAR, known, expr)
    text = re.sub(r'(\w+)\s*(?:=~|=|!~|!=)\s*"[^"]*' + _VAR + r'[^"]*"', r'\1=~".*"', text)
    return re.sub(_VAR, ".*", text)


def node_label_sets(result):
    """The distinct sets of node labels (SERIES_NODE_LABELS: instance, node, Hostname, ...) the series of an instant
    query's result carry, each {label: value}, sorted; a series with none of them adds none."""
    seen = {}
    for s in result or []:
        metric = (s or {}).get("metric") or {}
        labels = {k: str(metric[k]) for k in SERIES_NODE_LABELS if metric.get(k)}
        if labels:
            seen[json.dumps(labels, sort_keys=True)] = labels
    return [seen[k] for k in sorted(seen)]


def redact(text, secrets):
    """Text with every secret (and its base64 Basic form) replaced: nothing from outside is kept unredacted."""
    text = str(text)
    for s in secrets:
        if s:
            text = text.replace(s, "<redacted>")
    return text


# ---------------------------------------------------------------------------------------------------------------
# HTTP


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirect with the Authorization header copied, to whatever host it names: the credential
    goes to the URL given, nowhere else; a redirect is answered as its own status (e.g. 302 to a login page)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Client:
    """GETs with or without the credential; answers (status, parsed JSON or None, error text redacted)."""

    def __init__(self, timeout, authorization=None, secrets=()):
        self.timeout = timeout
        self.authorization = authorization
        self.secrets = [s for s in secrets if s]
        self.calls = 0

    def get(self, url, params=None, auth=True):
        self.calls += 1
        full = url + ("?" + urllib.parse.urlencode(params) if params else "")
        req = urllib.request.Request(full, method="GET", headers={"Accept": "application/json"})
        if auth and self.authorization:
            req.add_header("Authorization", self.authorization)
        try:
            with _OPENER.open(req, timeout=self.timeout) as resp:
                status, body = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            status, body = exc.code, exc.read()
        except (urllib.error.URLError, OSError, ValueError) as exc:
            return None, None, redact("%s: %s" % (type(exc).__name__, getattr(exc, "reason", exc)), self.secrets)
        try:
            doc = json.loads(body.decode("utf-8", "replace")) if body else None
        except ValueError:
            doc = None
        err = None if 200 <= status < 300 else redact("HTTP %d: %s" % (status, (doc or {}).get("message")
                                                                         if isinstance(doc, dict) else ""),
                                                      self.secrets)
        return status, doc, err


def credential(p):
    """(Authorization header value, secrets to redact) from the files named; (None, []) without one."""
    if p["token_file"]:
        with open(p["token_file"]) as fh:
            token = fh.read().strip()
        return "Bearer %s" % token, [token]
    if p["basic_auth_file"]:
        with open(p["basic_auth_file"]) as fh:
            pair = fh.read().strip()
        b64 = base64.b64encode(pair.encode()).decode()
        return "Basic %s" % b64, [pair, b64] + pair.split(":", 1)[1:]
    return None, []


def candidate_urls(p):
    if p["url"]:
        return [p["url"].rstrip("/")]
    hosts = [socket.gethostname()] + [h for h in p["candidates"] if h]
    return ["http://%s:3000" % h for h in dict.fromkeys(hosts)]


# ---------------------------------------------------------------------------------------------------------------


def kept_label_sets(labels, nodes):
    """At most MAX_LABEL_SETS of a query's node label sets: those naming one of this cluster's nodes first (node_of,
    the controller's rule), then the others, so that on a Prometheus shared by many clusters this cluster's series
    are never the ones cut off (sorted by name, they may come last)."""
    ours = [x for x in labels if node_of(x, nodes)]
    return (ours + [x for x in labels if not node_of(x, nodes)])[:MAX_LABEL_SETS]


def evaluate(client, prom, expr, fixed=None, nodes=()):
    query = substitute_vars(expr, fixed)
    out = {"expr": expr, "query": query, "evaluated": False, "data": None, "series": 0, "node_labels": [],
           "node_label_sets": 0, "unlabelled": False, "error": None}
    if not prom:
        out["error"] = "no prometheus_url: not evaluated"
        return out
    status, doc, err = client.get(prom.rstrip("/") + "/api/v1/query", {"query": query}, auth=False)
    if err or not isinstance(doc, dict) or doc.get("status") != "success":
        out["error"] = err or "Prometheus answered %s" % ((doc or {}).get("error") if isinstance(doc, dict)
                                                          else "no JSON")
        return out
    result = (doc.get("data") or {}).get("result")
    series = result if isinstance(result, list) else []
    out.update(evaluated=True, series=len(series), data=bool(series) or (result is not None and not
                                                                          isinstance(result, list)))
    labels = node_label_sets(series)
    out["node_labels"], out["node_label_sets"] = kept_label_sets(labels, as_nodes(nodes)), len(labels)
    # an aggregate (sum by (state), avg(...)) names no node: data, but not attributable to nodes either way
    out["unlabelled"] = bool(series) and not labels
    return out


def anonymous(client, base, uid=None):
    """What an unauthenticated visitor may do, by reads only: the dashboard search, one dashboard (Grafana's answer
    carries the caller's rights on it in meta.canSave / canEdit / canAdmin: true for an anonymous caller means
    anonymous writes are possible, found without writing), and whether anonymous access is switched on
    (/api/frontend/settings' anonymousEnabled, where the version serves it)."""
    out = {}
    status, doc, _ = client.get(base + "/api/search", {"type": "dash-db"}, auth=False)
    out["search_status"] = status
    listed = doc if status == 200 and isinstance(doc, list) else []
    out["search_dashboards"] = len(listed)
    uid = uid or next((d.get("uid") for d in listed if isinstance(d, dict) and d.get("uid")), None)
    out["dashboard_uid"], out["dashboard_status"], rights = uid, None, {}
    if uid:
        status, doc, _ = client.get(base + "/api/dashboards/uid/%s" % urllib.parse.quote(str(uid), safe=""),
                                    auth=False)
        out["dashboard_status"] = status
        meta = (doc.get("meta") or {}) if status == 200 and isinstance(doc, dict) else {}
        rights = {k: bool(meta.get(k)) for k in ("canSave", "canEdit", "canAdmin") if k in meta}
    out["rights"] = rights
    status, doc, _ = client.get(base + "/api/frontend/settings", auth=False)
    out["settings_status"] = status
    out["anonymous_enabled"] = doc.get("anonymousEnabled") if status == 200 and isinstance(doc, dict) else None
    out["write_possible"] = bool(rights.get("canSave") or rights.get("canAdmin"))
    return out


def run(art, p, out_dir):
    if refuse_credential_in_url(art, p):
        return
    try:
        authorization, secrets = credential(p)
    except OSError as exc:
        # a missing credential file is the role's configuration: said as such (the file's name, never its content)
        art.error("credential file not readable: %s" % exc)
        return
    client = Client(p["timeout_s"], authorization, secrets)
    tried, base, health = [], None, None
    for url in candidate_urls(p):
        status, doc, err = client.get(url + "/api/health", auth=False)
        tried.append({"url": url, "answer": status if status is not None else err})
        if status == 200 and isinstance(doc, dict):
            base, health = url, doc
            break
    art.facts["candidates"] = tried
    if base is None:
        art.skip("no Grafana answered /api/health (tried %s)" % "; ".join(
            "%s: %s" % (t["url"], t["answer"]) for t in tried))
        return
    errors = []
    art.facts.update(url=base, version=health.get("version"), database=health.get("database"), nodes=p["nodes"],
                     evaluated_with="prometheus_url" if p["prometheus_url"] else None, errors=errors)
    art.add("grafana_up", 1, "bool")
    status, found, err = client.get(base + "/api/search", {"type": "dash-db"})
    if err or not isinstance(found, list):
        # the dashboards are unknown, not absent (a wrong or missing credential answers 401): an error, not a
        # finding about the provider; the anonymous test still runs
        errors.append("search: %s" % (err or "no list"))
        art.error("Grafana's dashboard search failed: %s" % (err or "no list"))
        found = []
    dashboards, budget = [], p["max_panels"]
    for entry in found[:p["max_dashboards"]]:
        uid = entry.get("uid")
        status, doc, err = client.get(base + "/api/dashboards/uid/%s" % urllib.parse.quote(str(uid), safe=""))
        if err or not isinstance(doc, dict):
            errors.append("dashboard %s: %s" % (uid, err or "no JSON"))
            continue
        model = doc.get("dashboard") or {}
        dash = {"uid": uid, "title": model.get("title") or entry.get("title"), "classes": [], "panels": []}
        fixed = fixed_values(model)
        for panel, exprs in panel_targets(model):
            classes = sorted({c for e in exprs for c in classify(e)}, key=CLASSES.index)
            row = {"id": panel.get("id"), "title": panel.get("title"), "classes": classes, "targets": []}
            for expr in exprs:
                if budget <= 0:
                    row["targets"].append({"expr": expr, "evaluated": False, "error": "max_panels reached"})
                    continue
                budget -= 1
                row["targets"].append(evaluate(client, p["prometheus_url"], expr, fixed, p["nodes"]))
            dash["panels"].append(row)
        dash["classes"] = sorted({c for row in dash["panels"] for c in row["classes"]}, key=CLASSES.index)
        dashboards.append(dash)
    art.facts["dashboards"] = dashboards
    art.add("dashboards", len(dashboards), "dashboards")
    for c in CLASSES:
        art.add("dashboards_class", sum(1 for d in dashboards if c in d["classes"]), "dashboards", **{"class": c})
    panels = [row for d in dashboards for row in d["panels"] if row["targets"]]
    evaluated = [row for row in panels if any(t.get("evaluated") for t in row["targets"])]
    art.add("panels_total", len(panels), "panels")
    art.add("panels_evaluated", len(evaluated), "panels")
    art.add("panels_with_data", sum(1 for row in evaluated if any(t.get("data") for t in row["targets"])), "panels")
    art.add("panels_aggregate", sum(1 for row in evaluated if not any(t.get("node_labels") for t in row["targets"])
                                    and any(t.get("unlabelled") for t in row["targets"])), "panels")
    anon = anonymous(client, base, dashboards[0]["uid"] if dashboards else None)
    art.facts["anonymous"] = anon
    art.add("anonymous_read", 1 if anon["search_dashboards"] else 0, "bool")
    art.add("anonymous_write", 1 if anon["write_possible"] else 0, "bool")
    art.facts["http_calls"] = client.calls
    art.facts["rules"] = {"classes": {c: rx.pattern for c, rx in CLASS_RULES}, "node_labels": list(SERIES_NODE_LABELS),
                          "rate_window": RATE_WINDOW}
