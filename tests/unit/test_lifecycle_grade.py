"""Grading and report section of the lifecycle phase on artifacts written here with known numbers: thresholds per
tier and tool, the spread between tiers (the slow tier named, with its ratio), peers, failures, and skips with the
reason of the tool/probe that could not run."""

from pathlib import Path

import yaml
from run_dirs import write_and_load_run

from probes.artifact import Artifact
from reports import grading as grade
from reports.grading.kinds import kind_names
from reports.phases.lifecycle import grade as grade_lifecycle
from reports.phases.lifecycle import section

RUBRIC = Path(__file__).resolve().parents[2] / "reports" / "data" / "rubric.d" / "lifecycle.yml"
HOSTS = ["n1", "n2", "n3", "n4"]


def pkg(host, times, warm=None, skipped_tools=None, failures=None):
    """times: {(tier, tool): (venv_s, install_s, cold import s)}; warm: {(tier, tool): s} (default cold / 2)."""
    art = Artifact("pkg_install", "r", host)
    art.facts.update({"tiers": [{"name": t, "path": "/%s" % t, "shared": t == "home"} for t in
                                sorted({t for t, _ in times})], "packages": ["torch"], "import_module": "torch",
                      "index": "the tools' default", "skipped_tools": skipped_tools or {}, "failures": failures or {},
                      "cache_drop": "posix_fadvise(DONTNEED) on 9000 files of the environment",
                      "tiers_from": "discovered on the node", "versions": {}})
    for (tier, tool), (venv, install, cold) in times.items():
        labels = {"tier": tier, "tool": tool}
        art.add("venv_s", venv, "s", **labels)
        art.add("install_s", install, "s", **labels)
        art.add("total_s", venv + install, "s", **labels)
        art.add("import_s", cold, "s", module="torch", cache="cold", **labels)
        art.add("import_s", (warm or {}).get((tier, tool), cold / 2), "s", module="torch", cache="warm", **labels)
        art.facts["versions"]["%s/%s" % (tier, tool)] = {"torch": "2.7.1", "pip": "25.1"}
    return art


def skipped(probe, host, reason):
    art = Artifact(probe, "r", host)
    art.skip(reason)
    return art


def make_run(tmp_path, arts):
    return write_and_load_run(tmp_path, arts, HOSTS, "standard")


def rows_of(run, check_id):
    checks = [c for c in yaml.safe_load(RUBRIC.read_text())["checks"] if c["id"] == check_id]
    assert checks, check_id
    return grade.grade(run, {"checks": checks})


GOOD = {("home", "pip"): (3.0, 60.0, 1.6), ("home", "uv"): (0.1, 20.0, 1.5),
        ("scratch", "pip"): (3.0, 55.0, 1.2), ("scratch", "uv"): (0.1, 15.0, 1.1)}


def test_rubric_loads_with_the_rest_and_every_kind_is_registered():
    rubric = grade.load_rubric()
    mine = [c for c in rubric["checks"] if c["id"].startswith("lifecycle.")]
    assert len(mine) >= 15 and {c["category"] for c in mine} == {"lifecycle"}
    kinds = kind_names()
    assert {c["kind"] for c in mine} <= kinds


def test_tier_spread_names_the_slow_tier_and_its_ratio():
    assert grade_lifecycle.tier_spread({"home": 12.0, "data": 3.0, "tmp": 2.0}) == ("home", 12.0, 2.5, 4.8)
    assert grade_lifecycle.tier_spread({"tmp": 1.0}) is None
    slow, _, _, ratio = grade_lifecycle.tier_spread({"a": 2.0, "b": 2.0})
    assert slow == "a" and ratio == 1.0


def test_timings_aggregate_per_tier_and_tool(tmp_path):
    run = make_run(tmp_path, [pkg(h, GOOD) for h in HOSTS])
    rows = section.install_rows(run)
    assert rows[("n1", "home", "pip")] == {"venv_s": 3.0, "install_s": 60.0, "total_s": 63.0, "import_s/cold": 1.6,
                                           "import_s/warm": 0.8}
    per = section.per_tier(rows, "total_s")
    assert per["scratch"]["uv"] == [15.1] * 4 and sorted(per) == ["home", "scratch"]
    groups = grade_lifecycle.group_values(grade_lifecycle.records(run, "pkg_install", "import_s", "n1",
                                                                  {"cache": "cold"}), ["tier", "tool"])
    assert groups == {"tier=home tool=pip": [1.6], "tier=home tool=uv": [1.5], "tier=scratch tool=pip": [1.2],
                      "tier=scratch tool=uv": [1.1]}


def test_import_thresholds_follow_the_seed(tmp_path):
    # torch from home: 1.6 s cold passes; from a lots-of-small-files tier 14 s cold / 12 s warm fails
    slow = {**GOOD, ("lustre", "pip"): (3.0, 70.0, 14.0)}
    run = make_run(tmp_path, [pkg("n1", slow, warm={("lustre", "pip"): 12.0})])
    warm = {r["subject"]: r for r in rows_of(run, "lifecycle.import_warm") if r["host"] == "n1"}
    assert warm["tier=lustre tool=pip"]["status"] == "fail" and warm["tier=lustre tool=pip"]["observed"] == "12 s"
    assert warm["tier=home tool=pip"]["status"] == "pass"
    cold = {r["subject"]: r for r in rows_of(run, "lifecycle.import_cold") if r["host"] == "n1"}
    assert cold["tier=lustre tool=pip"]["status"] == "warn" and cold["tier=home tool=uv"]["status"] == "pass"


def test_a_tier_much_slower_than_the_others_is_flagged_by_name(tmp_path):
    times = {**GOOD, ("home", "uv"): (0.1, 95.0, 9.0)}
    run = make_run(tmp_path, [pkg("n1", times)])
    spread = {r["subject"]: r for r in rows_of(run, "lifecycle.install_tier_spread") if r["host"] == "n1"}
    assert spread["tool=uv"]["status"] == "fail"
    assert spread["tool=uv"]["observed"] == "tier home 6.3× the other tiers' median (95.1 s vs 15.1 s)"
    assert spread["tool=pip"]["status"] == "pass"
    imports = {r["subject"]: r for r in rows_of(run, "lifecycle.import_tier_spread") if r["host"] == "n1"}
    assert imports["tool=uv cache=cold"]["status"] == "fail"  # 9.0 s vs 1.1 s
    assert imports["tool=uv cache=cold"]["observed"].startswith("tier home 8.2×")
    # under the floor, a big ratio of small times is not a finding
    assert imports["tool=pip cache=warm"]["status"] == "pass"
    assert imports["tool=pip cache=warm"]["observed"].endswith("under the 2 s floor")


def test_one_host_slower_than_its_peers_and_failed_steps(tmp_path):
    slow = {k: (v[0], v[1] * 3, v[2]) for k, v in GOOD.items()}
    arts = [pkg("n1", GOOD), pkg("n2", GOOD), pkg("n3", GOOD),
            pkg("n4", slow, failures={"scratch/pip": "pip install failed (rc=1): No space left on device"})]
    run = make_run(tmp_path, arts)
    peers = {(r["host"], r["subject"]): r["status"] for r in rows_of(run, "lifecycle.install_peers")}
    assert peers[("n4", "tier=home tool=pip")] == "fail" and peers[("n1", "tier=home tool=pip")] == "pass"
    fails = {r["host"]: r for r in rows_of(run, "lifecycle.install_failures")}
    assert fails["n4"]["status"] == "fail" and "No space left on device" in fails["n4"]["observed"]
    assert fails["n1"]["status"] == "pass"


def test_skips_carry_the_reason_of_what_could_not_run(tmp_path):
    no_uv = {k: v for k, v in GOOD.items() if k[1] == "pip"}
    arts = [pkg("n1", no_uv, skipped_tools={"uv": "uv not found next to /usr/bin/python3 nor on PATH"}),
            skipped("pkg_install", "n2", "package index https://pypi.org/simple is not reachable from this node"),
            skipped("serve_ready", "n1", "no GPU on this node (neither nvidia-smi nor amd-smi found)")]
    run = make_run(tmp_path, arts)
    uv = {r["host"]: r for r in rows_of(run, "lifecycle.uv_install")}
    assert uv["n1"]["status"] == "skip"
    assert uv["n1"]["reason"] == "uv: uv not found next to /usr/bin/python3 nor on PATH"
    assert uv["n2"]["status"] == "skip" and uv["n2"]["reason"].startswith("package index https://pypi.org")
    assert uv["n3"]["status"] == "skip" and uv["n3"]["reason"] == "probe pkg_install did not run on this host"
    serve = {r["host"]: r for r in rows_of(run, "lifecycle.serve_ready")}
    assert serve["n1"]["status"] == "skip" and serve["n1"]["reason"].startswith("no GPU on this node")
    assert len(serve) == 4


def test_serve_ready_thresholds(tmp_path):
    arts = []
    for host, secs in zip(HOSTS, (25.0, 70.0, 150.0)):
        art = Artifact("serve_ready", "r", host)
        art.add("ready_s", secs, "s", model="Qwen/Qwen2.5-0.5B-Instruct")
        arts.append(art)
    run = make_run(tmp_path, arts)
    status = {r["host"]: r["status"] for r in rows_of(run, "lifecycle.serve_ready")}
    assert status == {"n1": "pass", "n2": "warn", "n3": "fail", "n4": "skip"}


def test_section_tables_plot_and_skips(tmp_path):
    arts = [pkg(h, GOOD) for h in HOSTS] + [skipped("net_speed", h, "no speed-test URL is reachable") for h in HOSTS]
    arts.append(skipped("container_pull", "n1", "no usable container engine on this node (docker: not installed)"))
    run = make_run(tmp_path, arts)
    report = tmp_path / "report"
    report.mkdir()
    md = section.render(run, [], str(report))
    assert md.startswith("## Lifecycle")
    assert "| n1 | home | pip | 3 | 60 | 63 | 1.6 | 0.8 | – | torch 2.7.1 |" in md
    assert "| n4 | scratch | uv | 0.1 | 15 | 15.1 | 1.1 | 0.55 | – | torch 2.7.1 |" in md
    assert ("| n1 | container_pull | – | skipped | no usable container engine on this node (docker: not installed) |"
            in md)
    assert "![install and import time per tier](lifecycle_tiers.png)" in md
    assert (report / "lifecycle_tiers.png").stat().st_size > 5000
    assert section.render(make_run(tmp_path / "empty", []), [], str(report)) == ""
    offline = make_run(tmp_path / "offline", [skipped("pkg_install", h, "internet downloads are off") for h in HOSTS])
    md = section.render(offline, [], str(tmp_path))
    assert "Not measured: internet downloads are off" in md and "| host | tier |" not in md


def net(host, down=None, up=None, timed_out=None, unmeasured=None):
    """A net_speed artifact as the probe writes it: finished transfers {direction: Mbit/s}, and timed-out ones
    {direction: (bytes moved, seconds, bytes expected)} recorded as their rate's upper bound."""
    art = Artifact("net_speed", "r", host)
    url = "https://speed.cloudflare.com/__down?bytes=1000000000"
    for direction, mbps in (("download", down), ("upload", up)):
        if mbps is not None:
            art.add("%s_mbps" % direction, mbps, "Mbit/s", url=url, **{"try": 0})
    for direction, (nbytes, secs, total) in (timed_out or {}).items():
        note = "timed out after 120 s with %d of %d bytes" % (nbytes, total)
        art.add("%s_mbps" % direction, round(nbytes * 8 / secs / 1e6, 3), "Mbit/s", url=url, bound="at_most",
                note=note, **{"try": 0})
        art.add("%s_bytes" % direction, nbytes, "B", url=url, **{"try": 0})
        art.add("%s_s" % direction, secs, "s", url=url, **{"try": 0})
    art.facts.update({"unreachable": {}, "failures": {}, "unmeasured": unmeasured or []})
    return art


def test_a_timed_out_transfer_is_judged_by_its_bound(tmp_path):
    """1e9 B not done in 120 s: 800 MB moved is at most 53.3 Mbit/s, under the 100 Mbit/s line: fail (it used to
    be skip or error, never scored). A bound over the line cannot pass either (the rate is only known to be at
    most that): warn. A timed-out try beside a finished one: the worse of the two."""
    arts = [net("n1", up=500.0, timed_out={"download": (800_000_000, 120.0, 1_000_000_000)}),
            net("n2", up=500.0, timed_out={"download": (600_000_000, 8.0, 1_000_000_000)}),
            net("n3", down=2000.0, up=800.0, timed_out={"upload": (300_000_000, 120.0, 400_000_000)})]
    run = make_run(tmp_path, arts)
    down = {r["host"]: r for r in rows_of(run, "lifecycle.net_download")}
    assert down["n1"]["status"] == "fail"
    assert down["n1"]["observed"] == ("at most 53.333 Mbit/s: timed out after 120 s with 800000000 of 1000000000 "
                                      "bytes")
    assert down["n2"]["status"] == "warn" and down["n2"]["observed"].startswith("at most 600 Mbit/s: timed out")
    assert down["n3"]["status"] == "pass" and down["n3"]["observed"] == "2000 Mbit/s"
    up = {r["host"]: r for r in rows_of(run, "lifecycle.net_upload")}
    assert up["n3"]["status"] == "fail" and up["n3"]["observed"] == (
        "800 Mbit/s; at most 20 Mbit/s: timed out after 120 s with 300000000 of 400000000 bytes")
    assert up["n1"]["status"] == "pass"
    bound = grade_lifecycle.judge_bound
    check = {"expect": {"op": ">=", "value": 100}, "warn": {"op": ">=", "value": 1000}}
    assert [bound(v, "at_most", check)[0] for v in (99.9, 100, 5000)] == ["fail", "warn", "warn"]


def test_a_failed_pull_or_download_is_a_row_of_its_own(tmp_path):
    """docker pulled ubuntu; nvcr.io/nvidia/pytorch hit the 1800 s limit on docker (bytes unknown: an error row
    naming it) and on enroot (bytes known: a fail with its bound); Hugging Face timed out with 400 MB (a fail),
    ModelScope refused (an error row). Before, only ubuntu's pass was left."""
    ubuntu, nvcr = "docker.io/library/ubuntu:24.04", "nvcr.io/nvidia/pytorch:25.01-py3"
    pulls = Artifact("container_pull", "r", "n1")
    pulls.add("pull_s", 1.0, "s", engine="docker", image=ubuntu, registry="docker.io")
    pulls.add("image_bytes", 100_000_000, "B", engine="docker", image=ubuntu, registry="docker.io")
    pulls.add("pull_mbps", 800.0, "Mbit/s", engine="docker", image=ubuntu, registry="docker.io")
    note = "timed out after 1800 s with 3000000000 bytes received (the part-pulled image)"
    pulls.add("pull_s", 1800.2, "s", engine="enroot", image=nvcr, registry="nvcr.io", bound="at_least", note=note)
    pulls.add("pull_mbps", 13.333, "Mbit/s", engine="enroot", image=nvcr, registry="nvcr.io", bound="at_most",
              note=note)
    why = ("timed out after 1800 s (docker keeps what it pulled in its own store: the bytes received, and so a bound "
           "on the rate, are unknown)")
    pulls.facts.update({"skipped": {}, "failures": {"docker " + nvcr: why, "enroot " + nvcr: note},
                        "unmeasured": [{"metrics": ["pull_s", "pull_mbps", "image_bytes"], "why": why,
                                        "labels": {"engine": "docker", "image": nvcr, "registry": "nvcr.io"}}]})
    models = Artifact("model_pull", "r", "n1")
    note = "timed out after 1800 s with 400000000 bytes received"
    models.add("process_s", 1800.1, "s", hub="huggingface", model="org/m", bound="at_least", note=note)
    models.add("download_mbps", 1.778, "Mbit/s", hub="huggingface", model="org/m", bound="at_most", note=note)
    refused = "rc=1: RuntimeError: model org/m not found on ModelScope"
    models.facts.update({"skipped": {}, "failures": {"huggingface": note, "modelscope": refused},
                         "unmeasured": [{"metrics": ["download_s", "process_s", "model_bytes", "download_mbps"],
                                         "labels": {"hub": "modelscope", "model": "org/m"}, "why": refused}]})
    run = make_run(tmp_path, [pulls, models])
    rows = {r["subject"]: r for r in rows_of(run, "lifecycle.container_pull_speed") if r["host"] == "n1"}
    assert {s: r["status"] for s, r in rows.items()} == {
        "engine=docker image=%s" % ubuntu: "pass", "engine=enroot image=%s" % nvcr: "fail",
        "engine=docker image=%s" % nvcr: "error"}
    assert rows["engine=enroot image=%s" % nvcr]["observed"] == "at most 13.333 Mbit/s: %s" % (
        "timed out after 1800 s with 3000000000 bytes received (the part-pulled image)")
    assert rows["engine=docker image=%s" % nvcr]["reason"] == why
    rows = {r["subject"]: r for r in rows_of(run, "lifecycle.model_download") if r["host"] == "n1"}
    assert rows["hub=huggingface"]["status"] == "fail"
    assert rows["hub=huggingface"]["observed"] == "at most 1.778 Mbit/s: %s" % note
    assert rows["hub=modelscope"]["status"] == "error" and rows["hub=modelscope"]["reason"] == refused
    md = section.render(run, [], None)  # the tables show a bound as one, never as a measured number
    assert "| n1 | enroot | nvcr.io/nvidia/pytorch:25.01-py3 | ≥ 1800 | – | – | ≤ 13.3 |" in md
    assert "| n1 | huggingface | org/m | ≥ 1800 | – | ≤ 1.78 |" in md


def test_the_pull_table_shows_the_bytes_its_rate_is_over(tmp_path):
    """ubuntu:24.04 pulled in 10 s: 30 MB received on the counted interfaces, docker's image size 78 MB (unpacked):
    24 Mbit/s. The table showed 78 in its only MB column beside 24, a rate a reader could not make from it; a rate
    from the image's size (no counters) is an upper bound, shown and judged as one."""
    ubuntu = "docker.io/library/ubuntu:24.04"
    pulls = Artifact("container_pull", "r", "n1")
    labels = {"engine": "docker", "image": ubuntu, "registry": "docker.io"}
    pulls.add("pull_s", 10.0, "s", **labels)
    pulls.add("image_bytes", 78_000_000, "B", **labels)
    pulls.add("wire_bytes", 30_000_000, "B", **labels)
    pulls.add("pull_mbps", 24.0, "Mbit/s", bytes="received", **labels)
    other = Artifact("container_pull", "r", "n2")
    other.add("pull_s", 10.0, "s", engine="docker", image=ubuntu, registry="docker.io")
    other.add("image_bytes", 78_000_000, "B", engine="docker", image=ubuntu, registry="docker.io")
    other.add("pull_mbps", 62.4, "Mbit/s", engine="docker", image=ubuntu, registry="docker.io", bytes="image",
              bound="at_most", note="from the image's size (no interface counters): fewer bytes came over the wire")
    run = make_run(tmp_path, [pulls, other])
    md = section.render(run, [], None)
    assert "| host | engine | image | pull s | received MB | image MB | Mbit/s |" in md
    assert "| n1 | docker | docker.io/library/ubuntu:24.04 | 10 | 30 | 78 | 24 |" in md, md
    assert "| n2 | docker | docker.io/library/ubuntu:24.04 | 10 | – | 78 | ≤ 62.4 |" in md, md
    rows = {r["host"]: r for r in rows_of(run, "lifecycle.container_pull_speed")}
    assert rows["n1"]["status"] == "fail" and rows["n2"]["status"] == "warn"  # 24 < 50; at most 62.4: unknown
    assert rows["n2"]["observed"].startswith("at most 62.4 Mbit/s: from the image's size")


def test_serve_ready_past_its_deadline_fails_and_a_taken_port_is_an_error(tmp_path):
    late = Artifact("serve_ready", "r", "n1")
    late.facts.update({"model": "/m", "vllm": "/v", "port": 41234, "port_from": "a free port picked here"})
    late.add("ready_s", 600.0, "s", model="/m", bound="at_least",
             note="no answer on /v1/models within 600 s (log: serve_ready.log)")
    taken = Artifact("serve_ready", "r", "n2")
    taken.error("port 28123 on 127.0.0.1 already answers /v1/models (models: leftover) before vllm serve was "
                "started: refusing to time another server")
    run = make_run(tmp_path, [late, taken])
    rows = {r["host"]: r for r in rows_of(run, "lifecycle.serve_ready")}
    assert rows["n1"]["status"] == "fail"
    assert rows["n1"]["observed"] == "at least 600 s: no answer on /v1/models within 600 s (log: serve_ready.log)"
    assert rows["n2"]["status"] == "error" and "port 28123" in rows["n2"]["reason"]


# --- A number shown beside the line it was judged against is on the line's side (reports/shown.py).
def test_an_import_just_over_its_limit_is_shown_over_it(tmp_path):
    """A cold import of 20.0004 s (the probe keeps 4 decimals) fails the 20 s limit: it was shown as "20 s"."""
    run = make_run(tmp_path, [pkg("n1", {**GOOD, ("lustre", "pip"): (3.0, 70.0, 20.0004)})])
    cold = {r["subject"]: r for r in rows_of(run, "lifecycle.import_cold") if r["host"] == "n1"}
    assert (cold["tier=lustre tool=pip"]["status"], cold["tier=lustre tool=pip"]["observed"]) == ("fail", "20.0004 s")
    assert (cold["tier=home tool=pip"]["status"], cold["tier=home tool=pip"]["observed"]) == ("pass", "1.6 s")


def test_a_tier_spread_just_under_its_fail_ratio_is_shown_under_it(tmp_path):
    """uv on home 3.99 times scratch's install time warns (fails above 4×): it was shown as 4.0×."""
    run = make_run(tmp_path, [pkg("n1", {**GOOD, ("home", "uv"): (0.1, 60.17, 1.5)})])
    spread = {r["subject"]: r for r in rows_of(run, "lifecycle.install_tier_spread") if r["host"] == "n1"}
    assert (spread["tool=uv"]["status"], spread["tool=uv"]["observed"]) == (
        "warn", "tier home 3.99× the other tiers' median (60.27 s vs 15.1 s)")


def test_a_host_just_under_twice_its_peers_median_is_shown_under_it(tmp_path):
    """n4's pip install on home 99.6 % above the hosts' median warns (fails above 100 %): it was shown as +100%."""
    slow = {**GOOD, ("home", "pip"): (3.0, 122.748, 1.6)}
    run = make_run(tmp_path, [pkg("n1", GOOD), pkg("n2", GOOD), pkg("n3", GOOD), pkg("n4", slow)])
    peers = {(r["host"], r["subject"]): r for r in rows_of(run, "lifecycle.install_peers")}
    row = peers[("n4", "tier=home tool=pip")]
    assert (row["status"], row["observed"]) == ("warn", "125.748 s (+99.6% against the median)")


def test_section_tables_show_numbers_on_their_side_of_the_checks_lines(tmp_path):
    """The tables' 3 significant digits put a pip install of 600.4 s on the 600 s limit it failed, a cold import of
    20.04 s on its 20 s limit (a warm one of 10.02 s on 10 s), a download of 99.96 Mbit/s on its 100 Mbit/s floor
    and a vllm serve ready after 120.4 s on its 120 s limit: each is shown on its side of the check's line now."""
    serve = Artifact("serve_ready", "r", "n1")
    serve.add("ready_s", 120.4, "s", model="Qwen/Qwen2.5-0.5B-Instruct")
    run = make_run(tmp_path, [pkg("n1", {**GOOD, ("lustre", "pip"): (3.0, 600.4, 20.04)}), net("n1", down=99.96,
                                                                                               up=500.0), serve])
    md = section.render(run, [], None)
    assert "| n1 | lustre | pip | 3 | 600.4 | 603 | 20.04 | 10.02 | – | torch 2.7.1 |" in md, md
    assert "| n1 | home | pip | 3 | 60 | 63 | 1.6 | 0.8 | – | torch 2.7.1 |" in md  # far from the lines: as before
    assert "| n1 | download | https://speed.cloudflare.com/__down?bytes=1000000000 | 99.96 |" in md
    assert "| n1 | upload | https://speed.cloudflare.com/__down?bytes=1000000000 | 500 |" in md
    assert "| n1 | Qwen/Qwen2.5-0.5B-Instruct | 120.4 |" in md
