"""The quick lifecycle phase over the 4-host SSH test cluster, with no internet: pip and uv install a real package
(many modules, one dependency) from a wheelhouse the test builds offline, into fresh venvs with fresh caches on two
tiers -- a shared directory under the repository's .cache/ that every host sees, and each host's private /tmp --
then import it from each environment (cold after dropping its page cache, then warm). The internet-bound probes
(speed test, container pulls, model downloads, vllm serve) are allowed to try and must say why they could not run.
Nothing may be left on the hosts. One playbook run (module fixture) is shared by every assertion."""

import csv
import json
import os
import sys
import time

import pytest
from helpers import ROOT, run_dirs, run_playbook
from lifecycle_wheelhouse import VERSION, build

pytestmark = pytest.mark.cluster
TIERS = ("shared", "tmp")
TOOLS = ("pip", "uv")


@pytest.fixture(scope="module")
def lifecycle_run(test_cluster, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lifecycle")
    base = ROOT / ".cache" / ("lifecycle-it-%s" % os.environ.get("CMXA_PREFIX", "cmxa"))
    wheels = build(base)  # under .cache/: the hosts see it, pytest's tmp_path they do not
    shared = base / "shared"
    shared.mkdir(parents=True, exist_ok=True)
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    extra = {"assess_output_dir": str(tmp / "runs"), "assess_profile": "quick",
             "lifecycle_tiers": [{"name": "shared", "path": str(shared), "shared": True},
                                 {"name": "tmp", "path": "/tmp", "shared": False}],
             "lifecycle_packages": ["cmxlife==%s" % VERSION], "lifecycle_find_links": [str(wheels)],
             "lifecycle_no_index": True, "lifecycle_import_module": "cmxlife", "lifecycle_import_repeat": 2,
             # the venv without ensurepip keeps 8 pip venvs on a 2-core box short (molecule times the default)
             "lifecycle_pip_venv_with_pip": False,
             # let the internet-bound probes try: the test hosts have no route and no DNS, so they must skip
             "lifecycle_internet": True, "lifecycle_reach_timeout_s": 2}
    (tmp / "vars.json").write_text(json.dumps(extra))
    t0 = time.monotonic()
    res = run_playbook(inventory, "--tags", "lifecycle", "-e", "@%s" % (tmp / "vars.json"), timeout=600)
    print("lifecycle phase (preflight + lifecycle + report): %.0f s" % (time.monotonic() - t0))
    assert res.returncode == 0, res.stdout[-5000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(tmp / "runs")
    return {"dir": run_dir, "hosts": sorted(h["name"] for h in test_cluster.hosts), "shared": shared,
            "cluster": test_cluster}


def art(run, host, name):
    return json.loads((run["dir"] / "artifacts" / host / (name + ".json")).read_text())


def values(doc, metric, **labels):
    return [r["value"] for r in doc["results"] if r["metric"] == metric
            and all(r["labels"].get(k) == v for k, v in labels.items())]


def test_pip_and_uv_install_the_package_on_every_tier_of_every_host(lifecycle_run):
    for host in lifecycle_run["hosts"]:
        doc = art(lifecycle_run, host, "pkg_install")
        assert doc["status"] == "ok", doc["reason"]
        facts = doc["facts"]
        assert facts["failures"] == {} and facts["skipped_tools"] == {}
        assert "left_behind" not in facts  # the probe removed its own venvs and caches (the role checks again)
        assert [t["name"] for t in facts["tiers"]] == list(TIERS)
        assert facts["tiers"][1]["fstype"] == "tmpfs"  # each host's private /tmp
        assert facts["index"] == "--no-index --find-links %s" % (lifecycle_run["shared"].parent / "wheels")
        assert facts["uv"].endswith("/uv") and facts["uv_version"].startswith("uv ")
        for tier in TIERS:
            for tool in TOOLS:
                label = {"tier": tier, "tool": tool}
                [venv], [install], [total] = (values(doc, m, **label) for m in ("venv_s", "install_s", "total_s"))
                assert venv > 0 and install > 0 and total == pytest.approx(venv + install, abs=0.002)
                # the real package and its dependency, at the wheelhouse's version, in that environment
                versions = facts["versions"]["%s/%s" % (tier, tool)]
                assert versions["cmxlife"] == VERSION and versions["cmxlife-base"] == VERSION
                # 150 modules (pip also writes their .pyc files at install, uv by default does not)
                [size] = values(doc, "env_bytes", **label)
                assert size > 40_000


def test_import_of_the_real_package_is_timed_cold_and_warm_from_each_tier(lifecycle_run):
    for host in lifecycle_run["hosts"]:
        doc = art(lifecycle_run, host, "pkg_install")
        assert doc["facts"]["import_module"] == "cmxlife"
        assert doc["facts"]["cache_drop"].startswith("posix_fadvise(DONTNEED) on ")
        for tier in TIERS:
            for tool in TOOLS:
                [cold] = values(doc, "import_s", tier=tier, tool=tool, cache="cold", module="cmxlife")
                [warm] = values(doc, "import_s", tier=tier, tool=tool, cache="warm", module="cmxlife")
                assert 0 < cold < 60 and 0 < warm < 60


def test_internet_bound_probes_are_skipped_with_their_reasons(lifecycle_run):
    for host in lifecycle_run["hosts"]:
        net = art(lifecycle_run, host, "net_speed")
        assert net["status"] == "skipped" and net["results"] == []
        assert net["reason"].startswith("no speed-test URL is reachable from this node: https://speed.cloudflare.com")
        assert "name lookup of speed.cloudflare.com" in net["reason"]
        pull = art(lifecycle_run, host, "container_pull")
        assert pull["status"] == "skipped" and pull["reason"].startswith("no usable container engine on this node")
        assert "podman: not installed" in pull["reason"]
        model = art(lifecycle_run, host, "model_pull")
        assert model["status"] == "skipped"
        assert "huggingface: the huggingface_hub client is not installed" in model["reason"]
        serve = art(lifecycle_run, host, "serve_ready")
        assert serve["status"] == "skipped" and serve["reason"].startswith("no GPU on this node")


def test_checks_grade_every_tier_and_tool_and_explain_every_skip(lifecycle_run):
    with open(lifecycle_run["dir"] / "report" / "checks.csv") as fh:
        rows = [r for r in csv.DictReader(fh) if r["category"] == "lifecycle"]
    by = {}
    for r in rows:
        by.setdefault(r["check_id"], []).append(r)
    for check in ("lifecycle.install_failures", "lifecycle.pkg_install_ran"):
        assert sorted(r["host"] for r in by[check] if r["status"] == "pass") == lifecycle_run["hosts"]
    # one row per host × tier for each tool's install check, per host × tier × tool for imports
    for check, n in (("lifecycle.pip_install", 2), ("lifecycle.uv_install", 2), ("lifecycle.import_warm", 4)):
        subjects = sorted(r["subject"] for r in by[check] if r["host"] == lifecycle_run["hosts"][0])
        assert len(subjects) == n and all(r["status"] in ("pass", "warn", "fail") for r in by[check]), by[check]
    assert sorted(r["subject"] for r in by["lifecycle.import_warm"] if r["host"] == lifecycle_run["hosts"][0]) == [
        "tier=shared tool=pip", "tier=shared tool=uv", "tier=tmp tool=pip", "tier=tmp tool=uv"]
    spread = [r for r in by["lifecycle.install_tier_spread"] if r["host"] == lifecycle_run["hosts"][0]]
    assert sorted(r["subject"] for r in spread) == ["tool=pip", "tool=uv"]
    assert all(r["observed"].startswith("tier ") and "× the other tiers' median" in r["observed"] for r in spread)
    # peers: 4 hosts per tier and tool
    assert len([r for r in by["lifecycle.install_peers"] if r["status"] != "skip"]) == 16
    # every skip carries its reason
    for check in ("lifecycle.net_download", "lifecycle.container_pull_speed", "lifecycle.model_download",
                  "lifecycle.serve_ready", "lifecycle.serve_ready_ran"):
        assert {r["status"] for r in by[check]} == {"skip"} and all(r["reason"] for r in by[check]), by[check]


def test_report_section_has_tables_plot_and_skips(lifecycle_run):
    md = (lifecycle_run["dir"] / "report" / "report.md").read_text()
    section = md.split("## Lifecycle", 1)[1].split("\n## ", 1)[0]
    for host in lifecycle_run["hosts"]:
        for tier in TIERS:
            for tool in TOOLS:
                assert "| %s | %s | %s |" % (host, tier, tool) in section
        assert "| %s | serve_ready | – | skipped | no GPU on this node" % host in section
    assert "cmxlife %s" % VERSION in section
    assert (lifecycle_run["dir"] / "report" / "lifecycle_tiers.png").stat().st_size > 5000


def test_nothing_is_left_on_the_hosts(lifecycle_run):
    cluster = lifecycle_run["cluster"]
    for host in lifecycle_run["hosts"]:
        res = cluster.exec(host, ["ls", "-A", "/tmp"], timeout=30)
        assert not [n for n in res.stdout.split() if n.startswith("clustermax-assess")], res.stdout
    assert list(lifecycle_run["shared"].iterdir()) == []
