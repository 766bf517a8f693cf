"""The Grafana half of the monitoring phase (probe grafana, reports/phases/monitoring/grafana.py) on recordings:
Grafana cannot be installed here, so the probe's pure rules are tested on real dashboard models and API answers
(tests/fixtures/grafana, sources in its README), and its run() end to end against tests/monitoring/http_replay.py,
a replay of those recorded responses that logs what the probe asked. The artifacts it writes are then graded and
rendered."""

import base64
import functools
import importlib.util
import json
from pathlib import Path

import pytest

from probes.artifact import Artifact, validate
from probes.cli import run_probe
from probes.monitoring import grafana as gp
from probes.monitoring.common import node_of
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts as make_run
from reports.phases.monitoring import grafana as gg
from reports.render import markdown

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "grafana"
ROUTES = FIX / "routes.json"
# A token as Grafana's service accounts issue them (glsa_ prefix); the test asserts it appears nowhere.
TOKEN = "glsa_Zk3vQm8Yt2Rw6Xp0Ls4Nd7Hc1Jb5Ge9A_1f2e3d4c"
NODE = "computeinstance-e00c1p6dpy98xytphp"  # the Hostname dcgm-exporter reported in the recorded series

_spec = importlib.util.spec_from_file_location("http_replay", ROOT / "tests" / "monitoring" / "http_replay.py")
http_replay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(http_replay)

@functools.lru_cache(maxsize=1)
def rubric_checks():
    return load_rubric()["checks"]


def check(cid):
    [found] = [c for c in rubric_checks() if c["id"] == cid and c.get("probe") == "grafana"]
    return found


def load(name):
    return json.loads((FIX / name).read_text())


def replay(tmp_path, params=None, authorization="Bearer " + TOKEN):
    """Run the probe against the replay -> (artifact, requests the replay got, out dir)."""
    tok = tmp_path / "token"
    tok.write_text(TOKEN + "\n")
    out = tmp_path / "out"
    with http_replay.Replay(str(ROUTES), authorization=authorization) as r:
        base = dict(url=r.url, prometheus_url=r.url, token_file=str(tok), nodes=[NODE, "other-node"], timeout_s=5)
        _, doc = run_probe("grafana", str(out), "replay-run", "h1", params=dict(base, **(params or {})))
        return doc, list(r.log), out


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    return replay(tmp_path_factory.mktemp("grafana"))


# ---------------------------------------------------------------------------------------------------------------
# pure rules on recorded dashboards and answers


def test_the_dcgm_exporter_dashboard_is_gpu_health_and_its_panels_are_read():
    dash = load("dcgm-exporter-dashboard.json")
    panels = gp.panel_targets(dash)
    assert [p["title"] for p, _ in panels][:3] == ["GPU Temperature", "GPU Avg. Temp", "GPU Power Usage"]
    assert len(panels) == 8 and all(len(e) == 1 for _, e in panels)
    assert {c for _, exprs in panels for e in exprs for c in gp.classify(e)} == {"gpu_health"}


def test_the_slurm_nodes_dashboard_is_scheduler_with_two_targets_in_a_panel():
    panels = gp.panel_targets(load("slurm-nodes-dashboard.json"))
    assert [(p["title"], len(e)) for p, e in panels] == [("Node count", 1), ("CPU count (cores)", 2), ("Memory", 2),
                                                         ("GPUs", 1)]
    assert {c for _, exprs in panels for e in exprs for c in gp.classify(e)} == {"scheduler"}


def test_node_exporter_full_rows_and_hidden_targets():
    """A row is no panel, and RAM Used's hidden target A is not drawn: only its target B is evaluated."""
    dash = load("node-exporter-full-first-row.json")
    panels = gp.panel_targets(dash)
    assert [p["title"] for p, _ in panels] == ["CPU Busy", "Sys Load (5m avg)", "Sys Load (15m avg)", "RAM Used",
                                               "SWAP Used", "Root FS Used"]
    ram = dict((p["title"], e) for p, e in panels)["RAM Used"]
    assert len(ram) == 1 and ram[0].startswith("100 - ((avg_over_time(node_memory_MemAvailable_bytes")
    # node-exporter shows hosts, not GPUs, the scheduler or check freshness: none of the seed's classes
    assert {c for _, exprs in panels for e in exprs for c in gp.classify(e)} == set()
    assert gp.fixed_values(dash) == {"diskdevices": "[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+"}


def test_classes_of_recorded_freshness_expressions():
    """Expressions found in public monitoring configurations (search index file ids): a Grafana stat panel's
    'age of the oldest textfile metric' (52098325805) and an alert on a scan that stopped running (63351807051)."""
    assert gp.classify('max(time() - node_textfile_mtime_seconds{job="openwrt"})') == ["freshness"]
    assert gp.classify('time() - node_textfile_mtime_seconds{file="suid_drift.prom"} > 172800') == ["freshness"]
    # a metric named for its last run (61730322274 names gpu_metrics_last_run_timestamp): freshness, not GPU health
    assert gp.classify("gpu_metrics_last_run_timestamp") == ["freshness"]
    assert gp.classify('sum(slurm_node_gpus{cluster="$cluster",nodes=~"$nodeset"}) by (state)') == ["scheduler"]


def test_template_variables_are_substituted_for_an_instant_query():
    assert gp.substitute_vars('DCGM_FI_DEV_GPU_TEMP{instance=~"$instance", gpu=~"$gpu"}') == \
        'DCGM_FI_DEV_GPU_TEMP{instance=~".*", gpu=~".*"}'
    panels = dict((p["title"], e) for p, e in gp.panel_targets(load("node-exporter-full-first-row.json")))
    assert gp.substitute_vars(panels["Root FS Used"][0]) == (
        '100 - ((avg_over_time(node_filesystem_avail_bytes{instance=~".*",job=~".*",mountpoint="/",fstype!="rootfs"}'
        '[5m]) * 100) / avg_over_time(node_filesystem_size_bytes{instance=~".*",job=~".*",mountpoint="/",'
        'fstype!="rootfs"}[5m]))')
    # a variable fixed in the model keeps its value (node-exporter-full's $diskdevices)
    disks = {"diskdevices": "[a-z]+"}
    assert gp.substitute_vars('rate(node_disk_io_time_seconds_total{device=~"$diskdevices"}[$__rate_interval])',
                              disks) == 'rate(node_disk_io_time_seconds_total{device=~"[a-z]+"}[5m])'
    assert gp.substitute_vars("irate(x{a=~\"${a:pipe}\"}[[[interval]]])") == 'irate(x{a=~".*"}[5m])'
    # the Slurm dashboard's single-value $cluster (no "All") is treated as All too: every cluster's series come back
    assert gp.substitute_vars('sum(slurm_node_gpus{cluster="$cluster",nodes=~"$nodeset"}) by (state)') == \
        'sum(slurm_node_gpus{cluster=~".*",nodes=~".*"}) by (state)'


def test_node_label_sets_from_the_recorded_dcgm_answer():
    result = load("prom_query_dcgm_gpu_util.json")["data"]["result"]
    assert gp.node_label_sets(result) == [{"Hostname": NODE}]
    assert gp.node_label_sets(load("prom_query_empty.json")["data"]["result"]) == []
    # the controller's rule (probes/monitoring/common.py), the Prometheus half's too
    assert node_of({"Hostname": NODE}, [NODE + ".example.net"]) == NODE + ".example.net"
    nodes = [{"name": "node1", "address": "10.0.0.5"}, {"name": "node2", "address": "10.0.0.6"}]
    assert [node_of({"instance": i}, nodes) for i in ("10.0.0.5:9400", "node2.cluster:9100", "10.0.0.7:9100")] == [
        "node1", "node2", None]


def test_on_a_prometheus_of_many_clusters_this_clusters_label_sets_are_kept_under_the_cap():
    """1,500 dcgm-exporter hosts on one Prometheus, this cluster's 8 (gpu-z001..8) sorting last: a panel query whose
    $Hostname became .* returns every host's series, and the probe keeps MAX_LABEL_SETS label sets. This cluster's
    are kept first, so the controller still files the panel under its nodes; before, they were cut off and the panel
    read "data, but no series names this cluster's nodes". The answer is the recorded dcgm one's shape, per host."""
    from reports.phases.monitoring import grafana as gg
    template = load("prom_query_dcgm_gpu_util.json")["data"]["result"][0]
    others, ours = ["gpu-a%04d" % i for i in range(1492)], ["gpu-z%03d" % i for i in range(1, 9)]
    result = [dict(template, metric=dict(template["metric"], Hostname=h)) for h in others + ours]

    class Prom:
        def get(self, url, params, auth=False):
            return 200, {"status": "success", "data": {"resultType": "vector", "result": result}}, None

    nodes = [{"name": n, "address": "10.9.0.%d" % k} for k, n in enumerate(ours)]
    t = gp.evaluate(Prom(), "http://prom:9090", 'DCGM_FI_DEV_GPU_UTIL{Hostname=~"$Hostname"}', nodes=nodes)
    assert (t["node_label_sets"], len(t["node_labels"])) == (1500, gp.MAX_LABEL_SETS)
    assert {x["Hostname"] for x in t["node_labels"]} >= set(ours)
    facts = {"nodes": nodes, "dashboards": [{"title": "DCGM", "panels": [{"title": "GPU util", "targets": [t]}]}]}
    [panel] = gg.panel_outcomes(facts, gg.cluster_nodes(None, facts))
    assert panel[4] == ours


def test_redaction_covers_token_and_basic_forms():
    assert gp.redact("Authorization: Bearer %s failed" % TOKEN, [TOKEN]) == "Authorization: Bearer <redacted> failed"


# ---------------------------------------------------------------------------------------------------------------
# the probe end to end against the replay


def test_the_replay_run_writes_a_valid_artifact(replayed):
    doc, log, _ = replayed
    assert validate(doc) == [] and doc["status"] == "ok", doc.get("reason")
    f = doc["facts"]
    assert (f["version"], f["database"]) == ("8.0.6", "ok")
    dash, slurm = f["dashboards"]
    assert (dash["uid"], dash["classes"], len(dash["panels"])) == ("Oxed_c6Wz", ["gpu_health"], 8)
    assert (slurm["title"], slurm["classes"], len(slurm["panels"])) == ("nodes", ["scheduler"], 4)
    util = [p for p in dash["panels"] if p["title"] == "GPU Utilization"][0]["targets"][0]
    assert (util["data"], util["series"], util["node_labels"], util["node_label_sets"]) == (
        True, 3, [{"Hostname": NODE}], 1)
    res = {(r["metric"], r["labels"].get("class")): r["value"] for r in doc["results"]}
    assert res[("panels_total", None)] == 12 and res[("panels_evaluated", None)] == 12
    assert res[("panels_with_data", None)] == 1
    assert res[("panels_aggregate", None)] == 0
    assert res[("dashboards_class", "gpu_health")] == 1 and res[("dashboards_class", "scheduler")] == 1
    assert res[("dashboards_class", "freshness")] == 0
    assert res[("anonymous_read", None)] == 0 and res[("anonymous_write", None)] == 0
    # only reads, and the anonymous test went without the credential
    assert {e["method"] for e in log} == {"GET"}
    anon = [e["path"] for e in log if not e["authorized"] and not e["path"].startswith("/api/v1/")]
    assert anon == ["/api/health", "/api/search", "/api/dashboards/uid/Oxed_c6Wz", "/api/frontend/settings"]
    assert f["anonymous"]["search_status"] == 401 and f["anonymous"]["dashboard_status"] == 401
    assert f["anonymous"]["rights"] == {} and f["anonymous"]["write_possible"] is False


def test_the_token_is_nowhere_in_what_the_probe_leaves(replayed):
    doc, _, out = replayed
    assert TOKEN not in json.dumps(doc)
    for path in Path(out).iterdir():
        assert TOKEN not in path.read_text(errors="replace")


def test_a_wrong_token_is_reported_without_the_token(tmp_path):
    doc, _, out = replay(tmp_path, authorization="Bearer another")
    # the dashboards are unknown, not absent: an error, and the dashboard checks say so rather than fail the provider
    assert doc["status"] == "error" and doc["reason"] == "Grafana's dashboard search failed: HTTP 401: Unauthorized"
    assert TOKEN not in json.dumps(doc) and validate(doc) == []
    run = make_run([doc])
    rows = gg.CLUSTER["grafana_dashboards"](check("monitoring.dashboard"), run, ["h1"])
    assert [r["status"] for r in rows] == ["error"]
    # the anonymous test still ran: it is graded
    rows = gg.CLUSTER["grafana_anonymous"](check("monitoring.grafana_anonymous"), run, ["h1"])
    assert [r["status"] for r in rows] == ["pass"]


def test_a_missing_credential_file_is_an_error_naming_the_file(tmp_path):
    _, doc = run_probe("grafana", str(tmp_path), "r", "h1", params={"url": "http://127.0.0.1:9",
                                                                    "token_file": str(tmp_path / "absent")})
    assert doc["status"] == "error" and "credential file not readable" in doc["reason"]
    assert str(tmp_path / "absent") in doc["reason"]


def test_basic_auth_from_a_file_is_sent_and_never_kept(tmp_path):
    pair = "viewer:%s" % TOKEN
    creds = tmp_path / "basic"
    creds.write_text(pair)
    basic = "Basic " + base64.b64encode(pair.encode()).decode()
    doc, log, out = replay(tmp_path, params={"token_file": "", "basic_auth_file": str(creds)}, authorization=basic)
    assert doc["status"] == "ok" and len(doc["facts"]["dashboards"]) == 2
    text = json.dumps(doc) + "".join(p.read_text(errors="replace") for p in Path(out).iterdir())
    assert TOKEN not in text and basic.split()[1] not in text and "viewer:" not in text


def test_anonymous_read_is_found_when_search_answers_without_credentials(tmp_path):
    routes = json.loads(ROUTES.read_text())
    for r in routes:
        r["auth"] = False  # the same recordings, served as an anonymous-enabled Grafana serves them
        r["file"] = str(FIX / r["file"])
    open_routes = tmp_path / "routes.json"
    open_routes.write_text(json.dumps(routes))
    tok = tmp_path / "token"
    tok.write_text(TOKEN)
    with http_replay.Replay(str(open_routes), authorization="Bearer " + TOKEN) as r:
        _, doc = run_probe("grafana", str(tmp_path / "out"), "r", "h1", params=dict(
            url=r.url, token_file=str(tok), nodes=[NODE], timeout_s=5))
    anon = doc["facts"]["anonymous"]
    assert anon["search_dashboards"] == 2
    # the recorded dashboard answer says its caller may save: served without credentials, anyone may
    assert anon["rights"] == {"canSave": True, "canEdit": True, "canAdmin": True} and anon["write_possible"]
    rows = gg.CLUSTER["grafana_anonymous"](check("monitoring.grafana_anonymous"), make_run([doc]), ["h1"])
    assert [r["status"] for r in rows] == ["fail"]
    assert rows[0]["reason"] == ("2 dashboard(s) listed without credentials; dashboard Oxed_c6Wz read without "
                                 "credentials may be saved (canAdmin, canEdit, canSave)")
    # no prometheus_url: panels are classified, not evaluated, and the panels check says why it cannot grade
    rows = gg.CLUSTER["grafana_panels_data"](check("monitoring.dashboard_panels_data"), make_run([doc]), ["h1"])
    assert rows[0]["status"] == "skip" and "no prometheus_url" in rows[0]["reason"]


def test_skips_when_no_grafana_answers(tmp_path):
    _, doc = run_probe("grafana", str(tmp_path), "r", "h1", params={"url": "http://127.0.0.1:9", "timeout_s": 2})
    assert doc["status"] == "skipped" and "no Grafana answered /api/health" in doc["reason"]
    assert validate(doc) == []


# ---------------------------------------------------------------------------------------------------------------
# grading and the report


def test_the_rubric_entries_name_kinds_that_exist():
    for cid in ("monitoring.grafana.ran", "monitoring.dashboard", "monitoring.dashboard_panels_data",
                "monitoring.grafana_anonymous"):
        assert check(cid)["kind"] in gg.CLUSTER or check(cid)["kind"] == "one_host_artifact"


def test_grading_the_replayed_artifact(replayed):
    doc, _, _ = replayed
    run = make_run([doc])
    dash = gg.CLUSTER["grafana_dashboards"](check("monitoring.dashboard"), run, ["h1"])
    assert [r["status"] for r in dash] == ["warn"]
    assert dash[0]["observed"] == ("2 dashboard(s); GPU health: NVIDIA DCGM Exporter Dashboard; scheduler: nodes; "
                                   "health-check freshness: none")
    assert dash[0]["reason"] == "no health-check freshness dashboard"
    panels = gg.CLUSTER["grafana_panels_data"](check("monitoring.dashboard_panels_data"), run, ["h1"])
    assert [r["status"] for r in panels] == ["fail"]
    assert panels[0]["observed"] == "1 of 12 evaluated panels return data for this cluster's nodes (8 %)"
    assert "no data: NVIDIA DCGM Exporter Dashboard / GPU Temperature" in panels[0]["reason"]
    anon = gg.CLUSTER["grafana_anonymous"](check("monitoring.grafana_anonymous"), run, ["h1"])
    assert [r["status"] for r in anon] == ["pass"]


def test_a_skipped_artifact_is_a_skip_for_every_kind():
    art = Artifact("grafana", "r", "h1")
    art.skip("no Grafana answered /api/health (tried http://h1:3000: URLError: [Errno 111] Connection refused)")
    run = make_run([art.to_dict()])
    for cid in ("monitoring.dashboard", "monitoring.dashboard_panels_data", "monitoring.grafana_anonymous"):
        c = check(cid)
        rows = gg.CLUSTER[c["kind"]](c, run, ["h1"])
        assert [r["status"] for r in rows] == ["skip"] and "no Grafana answered" in rows[0]["reason"]


def test_blocks_render(replayed):
    doc, _, _ = replayed
    skipped = Artifact("grafana", "r", "h2")
    skipped.skip("no Grafana answered /api/health")
    text = markdown.render(gg.blocks(make_run([doc, skipped.to_dict()]), [], "/tmp"))
    assert "Grafana 8.0.6" in text and "NVIDIA DCGM Exporter Dashboard" in text and "GPU health" in text
    assert "| nodes | n8o02ZMGz | scheduler | 4 |" in text
    assert "Panels without data for this cluster's nodes" in text and "GPU Temperature" in text
    assert "h2: skipped" in text and TOKEN not in text


# ---------------------------------------------------------------------------------------------------------------
# node exporters scraped by address: one rule with the Prometheus half (probes/monitoring/common.py node_of)

PROM_ARTIFACT = ROOT / "tests" / "fixtures" / "prometheus_artifacts" / "testcluster_prometheus_2.42.json"


def by_address(tmp_path):
    """(routes file, nodes): a replay of Node Exporter Full's first row (the recorded model, served with the recorded
    dashboard answer's meta) whose every panel query answers the node_load1 series the real test-cluster run recorded
    (tests/fixtures/prometheus_artifacts), without the `node` label that cluster's relabelling added: the usual static
    scrape config, targets by address (instance="10.237.201.11:9100"). nodes: that run's, as the role gives them
    (name and address)."""
    recorded = json.loads(PROM_ARTIFACT.read_text())["facts"]
    answer = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {k: v for k, v in s["labels"].items() if k != "node"},
         "value": [recorded["evaluated_at"]["node_load1"], "0.42"]} for s in recorded["series"]["node_load1"]]}}
    model = load("node-exporter-full-first-row.json")
    search = [dict(load("api_search.json")[0], uid=model["uid"], title=model["title"])]
    dash = {"meta": load("api_dashboards_uid_Oxed_c6Wz.json")["meta"], "dashboard": model}
    for name, body in (("answer.json", answer), ("search.json", search), ("dash.json", dash)):
        (tmp_path / name).write_text(json.dumps(body))
    routes = [{"method": "GET", "path": "/api/health", "file": str(FIX / "api_health.json")},
              {"method": "GET", "path": "/api/search", "query": {"type": "dash-db"}, "auth": True,
               "file": "search.json"},
              {"method": "GET", "path": "/api/dashboards/uid/" + model["uid"], "auth": True, "file": "dash.json"}]
    fixed = gp.fixed_values(model)
    routes += [{"method": "GET", "path": "/api/v1/query", "query": {"query": gp.substitute_vars(e, fixed)},
                "file": "answer.json"} for _, exprs in gp.panel_targets(model) for e in exprs]
    (tmp_path / "routes.json").write_text(json.dumps(routes))
    return str(tmp_path / "routes.json"), recorded["nodes"]


def test_panels_over_node_exporters_scraped_by_address_show_this_clusters_nodes(tmp_path):
    routes, nodes = by_address(tmp_path)
    tok = tmp_path / "token"
    tok.write_text(TOKEN)
    with http_replay.Replay(routes, authorization="Bearer " + TOKEN) as r:
        _, doc = run_probe("grafana", str(tmp_path / "out"), "r", "cmxz-node1", params=dict(
            url=r.url, prometheus_url=r.url, token_file=str(tok), nodes=nodes, timeout_s=5))
    assert doc["status"] == "ok" and validate(doc) == []
    rows = gg.CLUSTER["grafana_panels_data"](check("monitoring.dashboard_panels_data"), make_run([doc]),
                                            ["cmxz-node1"])
    assert (rows[0]["status"], rows[0]["observed"], rows[0]["reason"] or None) == (
        "pass", "6 of 6 evaluated panels return data for this cluster's nodes (100 %)", None)
    # the Prometheus half files the same series under the same nodes (one rule)
    from reports.phases.monitoring import prometheus as prom  # noqa: PLC0415
    answer = json.loads((tmp_path / "answer.json").read_text())["data"]["result"]
    assert [prom.node_of(s["metric"], nodes) for s in answer] == [n["name"] for n in nodes]


def test_the_role_gives_the_grafana_probe_names_and_addresses():
    import yaml  # noqa: PLC0415

    tasks = yaml.safe_load((ROOT / "roles" / "monitoring" / "tasks" / "main.yml").read_text())
    [task] = [t for t in tasks if (t.get("clustermax.assess.probe") or {}).get("name") == "grafana"]
    assert task["clustermax.assess.probe"]["params"]["nodes"] == "{{ monitoring_nodes }}"


def previous_version_artifact():
    """An artifact as the previous probe version wrote it (nodes by name only; each target's nodes_seen -- at most 20
    label values -- and cluster_nodes matched on names), over the by-address answer above: no cluster node found."""
    recorded = json.loads(PROM_ARTIFACT.read_text())["facts"]
    seen = sorted(s["labels"]["instance"] for s in recorded["series"]["node_load1"])
    target = {"expr": "node_load1", "query": "node_load1", "evaluated": True, "data": True, "series": len(seen),
              "nodes_seen": seen, "cluster_nodes": [], "unlabelled": False, "error": None}
    art = Artifact("grafana", "r", "cmxz-node1")
    art.facts.update(url="http://head:3000", nodes=[n["name"] for n in recorded["nodes"]], dashboards=[
        {"uid": "rYdddlPWk", "title": "Node Exporter Full", "classes": [],
         "panels": [{"id": i, "title": "panel %d" % i, "classes": [], "targets": [dict(target)]} for i in range(3)]}])
    return art.to_dict()


def test_an_artifact_of_the_previous_probe_version_is_graded_or_says_why_not():
    c = check("monitoring.dashboard_panels_data")
    prom_doc = json.loads(PROM_ARTIFACT.read_text())  # the same run's prometheus artifact: names and addresses
    [row] = gg.CLUSTER["grafana_panels_data"](c, make_run([previous_version_artifact(), prom_doc]), ["cmxz-node1"])
    assert (row["status"], row["observed"]) == (
        "pass", "3 of 3 evaluated panels return data for this cluster's nodes (100 %)")
    assert "earlier probe version" in row["reason"]
    # alone, the nodes' addresses are unknown: series naming a node by address cannot be told from another cluster's
    [row] = gg.CLUSTER["grafana_panels_data"](c, make_run([previous_version_artifact()]), ["cmxz-node1"])
    assert row["status"] == "skip" and "addresses" in row["reason"]


def test_a_share_of_panels_just_under_the_warn_line_is_shown_under_it():
    """35 of 44 panels with this cluster's nodes' data (79.5 %) warn (below 80 %): in whole percent it was shown as
    "80 %" beside ">= 80 %" (reports/shown.py)."""
    def target(node):
        return {"expr": "up", "query": "up", "evaluated": True, "data": node is not None, "series": int(bool(node)),
                "node_labels": [{"instance": "%s:9100" % node}] if node else [], "node_label_sets": int(bool(node)),
                "unlabelled": False, "error": None}
    art = Artifact("grafana", "r", "cmxz-node1")
    art.facts.update(url="http://head:3000", nodes=[{"name": "cmxz-node1", "address": "10.0.0.1"}], dashboards=[
        {"uid": "rYdddlPWk", "title": "Node Exporter Full", "classes": [],
         "panels": [{"id": i, "title": "panel %d" % i, "classes": [], "targets": [
             target("cmxz-node1" if i < 35 else None)]} for i in range(44)]}])
    [row] = gg.CLUSTER["grafana_panels_data"](check("monitoring.dashboard_panels_data"), make_run([art.to_dict()]),
                                             ["cmxz-node1"])
    assert (row["status"], row["observed"]) == (
        "warn", "35 of 44 evaluated panels return data for this cluster's nodes (79.5 %)")
