"""A rating is of the whole cluster the run was asked to assess, measured by this run: the recorded 4-host run
(tests/fixtures/assessment_run) cut down the way a `--limit` run writes it is not rated as a smaller cluster (the
hosts it left out are not assessed: the gate unassessed_nodes), its slices merged count every host as assessed, and
artifacts of another run or of another version of the probes are load errors, never this run's measurements."""

import json
import shutil
from pathlib import Path

import pytest
from rating_runs import ANALYST_GOOD
from run_dirs import unpack_recorded_run
from test_rating_quick_run import _rewrite_json, at_standard_durations, declare, excellent_rubric

from reports import merge as merge_mod
from reports.build import build, evaluate
from reports.load import load_run
from reports.rate import load_tiers

OLD_RUN = "20260301T000000Z-0ld000"  # a run of the same hosts months earlier, by an older release of the probes
OLD_PROBES = "0.0.1"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """(the recorded run as it ran, the same at the standard profile's durations, the excellent rubric of
    test_rating_quick_run: the checks the recorded run passed on every host). Both requests are as make_run writes
    them now: the inventory the play targeted and the version of the probes staged (the one the artifacts carry)."""
    quick = unpack_recorded_run(tmp_path_factory.mktemp("quick"))
    _, _, report = build(str(copy_of(quick, tmp_path_factory.mktemp("shipped"))))
    rubric = excellent_rubric(json.loads((Path(report) / "ratings.json").read_text()),
                              tmp_path_factory.mktemp("rubric") / "excellent.yml")
    staged = json.loads((quick / "artifacts" / "cmxbl-node1" / "node_info.json").read_text())["tool"]["version"]
    _rewrite_json(quick / "assess_run.json", lambda d: d.update(inventory=d["hosts"], probes_version=staged))
    standard = copy_of(quick, tmp_path_factory.mktemp("standard"))
    at_standard_durations(standard)
    return quick, standard, rubric


def copy_of(run, into):
    into.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copytree(run, into / run.name, ignore=shutil.ignore_patterns("report")))


def limited_to(run_dir, keep):
    """The run as `-l <keep>` writes it: the artifacts, journal lines and recap of the kept hosts only; the request
    names the kept hosts, the inventory the play targeted and the limit (plugins/action/make_run.py)."""
    for host_dir in (run_dir / "artifacts").iterdir():
        if host_dir.name not in keep:
            shutil.rmtree(host_dir)
    _rewrite_json(run_dir / "assess_run.json", lambda d: d.update(hosts=keep, limit=",".join(keep)))
    _rewrite_json(run_dir / "run.json", lambda d: d.update(
        hosts=[h for h in d["hosts"] if h in keep or h == "localhost"],
        stats={h: s for h, s in d["stats"].items() if h in keep or h == "localhost"}))
    journal = run_dir / "journal.jsonl"
    journal.write_text("".join(line + "\n" for line in journal.read_text().splitlines()
                               if json.loads(line).get("host") in (None, "localhost", *keep)))
    return run_dir


def rank(doc):
    """How far below the top tier a rating is (a run not rated, or a screening, is below every tier)."""
    order = [t["name"] for t in load_tiers()["tiers"]]
    name = doc["tier"]["name"]
    return order.index(name) if name in order else len(order)


def gate(doc, gate_id):
    return next(g for g in doc["gates"] if g["id"] == gate_id)


# ------------------------------------------------------------------------------------------------ --limit

def test_a_limit_run_is_rated_as_the_inventory_with_the_hosts_it_left_out_not_assessed(recorded, tmp_path):
    _, run, rubric = recorded
    _, _, whole = evaluate(str(run), rubric=rubric, analyst=ANALYST_GOOD)
    assert whole["run"]["hosts"] == 4 and whole["run"]["unreachable"] == []
    assert not gate(whole, "unassessed_nodes")["triggered"]

    keep = ["cmxbl-node1", "cmxbl-node2"]
    part = limited_to(copy_of(run, tmp_path / "limited"), keep)
    loaded = load_run(str(part))
    why = "not in this run: --limit cmxbl-node1,cmxbl-node2"
    assert loaded.hosts == ["cmxbl-node1", "cmxbl-node2", "cmxbl-node3", "cmxbl-node4"]
    assert loaded.left_out == loaded.unreachable == {"cmxbl-node3": why, "cmxbl-node4": why}
    assert loaded.load_errors == []

    _, rows, doc = evaluate(str(part), rubric=rubric, analyst=ANALYST_GOOD)
    assert doc["run"]["hosts"] == 4 and doc["run"]["unreachable"] == ["cmxbl-node3", "cmxbl-node4"]
    reachable = {r["host"]: (r["status"], r["reason"]) for r in rows if r["check_id"] == "preflight.reachable"}
    assert reachable == {"cmxbl-node1": ("pass", ""), "cmxbl-node2": ("pass", ""),
                         "cmxbl-node3": ("fail", why), "cmxbl-node4": ("fail", why)}
    unassessed = gate(doc, "unassessed_nodes")
    assert unassessed["triggered"] and unassessed["reason"] == "preflight.reachable fail on cmxbl-node3, cmxbl-node4"
    # half the cluster measured is not the whole rated: Gold at best (the gate) and never above the whole run, and
    # what was not measured is coverage
    assert rank(doc) >= max(rank(whole), rank({"tier": {"name": "Gold"}})) and doc["coverage"] < whole["coverage"]


def test_the_report_names_the_hosts_a_limit_left_out_and_why(recorded, tmp_path):
    _, run, rubric = recorded
    part = limited_to(copy_of(run, tmp_path / "limited"), ["cmxbl-node1"])
    text, _, report = build(str(part), rubric=rubric, analyst=ANALYST_GOOD, progress=False)
    assert "hosts: 4 (1 reachable, not in this run: cmxbl-node2, cmxbl-node3, cmxbl-node4)" in text
    md = (Path(report) / "report.md").read_text()
    for host in ("cmxbl-node2", "cmxbl-node3", "cmxbl-node4"):
        assert "**%s**: not in this run: --limit cmxbl-node1" % host in md
    # said apart from unreachable hosts: they were not tried
    assert "hosts: 4 in the inventory, 1 reachable, 0 unreachable, 3 not in this run" in md
    assert "## Hosts of the inventory not in this run (not assessed)" in md and "## Unreachable hosts" not in md
    assert json.loads((Path(report) / "ratings.json").read_text())["run"]["hosts"] == 4


# ------------------------------------------------------------------------------------------------ slices

def cut_into_slices(run, into, parts, inventory):
    """<run id>/slices/<name>/ for each part, as a slice started with assess_run_slice writes it (test_merge.py's
    cut, with the request make_run writes now). inventory: name -> the hosts the slice's play targeted: the whole
    inventory for `--limit` slices, the slice's own hosts for AWX job slicing (each job's inventory is its slice)."""
    request = json.loads((run / "assess_run.json").read_text())
    summary = json.loads((run / "run.json").read_text())
    lines = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines() if line.strip()]
    out = into / run.name
    for name, hosts in parts.items():
        part = out / "slices" / name
        (part / "artifacts").mkdir(parents=True)
        for host in hosts:
            shutil.copytree(run / "artifacts" / host, part / "artifacts" / host)
        limit = {"limit": ",".join(hosts)} if inventory[name] != hosts else {}
        (part / "assess_run.json").write_text(json.dumps(dict(
            request, hosts=hosts, slice=name, dir=str(part), inventory=inventory[name], **limit)))
        (part / "journal.jsonl").write_text("".join(
            json.dumps(line) + "\n" for line in lines if line.get("host") in (None, "localhost", *hosts)))
        (part / "run.json").write_text(json.dumps(dict(
            summary, hosts=hosts, stats={h: s for h, s in summary["stats"].items() if h in hosts or h == "localhost"})))
    return out


PARTS = {"s1": ["cmxbl-node1", "cmxbl-node2"], "s2": ["cmxbl-node3", "cmxbl-node4"]}
ALL = PARTS["s1"] + PARTS["s2"]


@pytest.mark.parametrize("sliced_by", ["limit", "awx"])
def test_merged_slices_assess_every_host_and_one_slice_alone_is_a_part(recorded, tmp_path, sliced_by):
    _, run, _ = recorded
    inventory = {name: ALL if sliced_by == "limit" else hosts for name, hosts in PARTS.items()}
    out = cut_into_slices(run, tmp_path, PARTS, inventory)

    alone = load_run(str(out / "slices" / "s1"))
    assert alone.load_errors == []  # a slice's artifacts name the run's id: they are the slice's own
    if sliced_by == "limit":
        why = "not in this run: --limit cmxbl-node1,cmxbl-node2 (slice s1 of run %s: the merged run has every " \
              "slice's hosts)" % run.name
        assert alone.hosts == ALL and alone.unreachable == {"cmxbl-node3": why, "cmxbl-node4": why}
    else:  # an AWX slice's inventory is its own hosts: it cannot know the others (the merge does)
        assert alone.hosts == PARTS["s1"] and alone.unreachable == {}

    merge_mod.merge(out)
    merged = load_run(str(out))
    assert merged.hosts == ALL and merged.unreachable == {} and merged.left_out == {}
    assert merged.load_errors == [] and {d["host"] for d in merged.artifacts} == set(ALL)


def test_a_host_in_no_slice_of_the_merged_run_is_not_assessed(recorded, tmp_path):
    _, run, _ = recorded
    parts = {"s1": PARTS["s1"], "s2": ["cmxbl-node3"]}  # cmxbl-node4's slice never ran
    merge_mod.merge(cut_into_slices(run, tmp_path, parts, {"s1": ALL, "s2": ALL}))
    merged = load_run(str(tmp_path / run.name))
    assert merged.hosts == ALL
    assert merged.unreachable == {"cmxbl-node4": "not in this run: in none of its slices (s1, s2)"}


# ------------------------------------------------------------------------------------------------ other runs' artifacts

def from_an_older_run(run, into):
    """The soak and fio sweep artifacts of an earlier run of the same hosts, at the standard durations, by an older
    release of the probes: what someone would copy in to make a short run look like a standard one."""
    old = copy_of(run, into)
    copied = []
    for host_dir in sorted((old / "artifacts").iterdir()):
        for path in sorted(host_dir.glob("*.json")):
            if path.name.split(".")[0].split("-")[0] in ("burnin", "fabric_soak", "storage_soak", "fio_sweep"):
                _rewrite_json(path, lambda d: d.update(run_id=OLD_RUN, tool=dict(d["tool"], version=OLD_PROBES)))
                copied.append(path)
    return copied


def test_artifacts_of_another_run_are_load_errors_not_this_runs_measurements(recorded, tmp_path):
    quick, standard, rubric = recorded
    short = copy_of(quick, tmp_path / "short")
    declare(short, "standard")  # a standard run whose soaks were cut short: a screening
    copied = from_an_older_run(standard, tmp_path / "old")
    for path in copied:
        shutil.copy(path, short / "artifacts" / path.parent.name / path.name)
    loaded = load_run(str(short))
    refused = {e["path"]: e["error"] for e in loaded.load_errors}
    assert sorted(refused) == sorted("%s/%s" % (p.parent.name, p.name) for p in copied) and len(copied) >= 16
    assert set(refused.values()) == {"artifact of run %r, not of this run %r" % (OLD_RUN, quick.name)}
    assert not any(d["run_id"] == OLD_RUN for d in loaded.artifacts)

    run, rows, doc = evaluate(str(short), rubric=rubric, analyst=ANALYST_GOOD)
    assert not doc["tier"]["rated"] and doc["profile"]["rating"] == "screening"
    # what the refused artifacts fed is an error naming the file and why, not a test that did not run: the run
    # holds no measurement of it, and the gate measurement_errors says so
    burnin = [r for r in rows if r["check_id"].startswith("burnin.") and r["host"] == "cmxbl-node1"]
    assert burnin and {r["status"] for r in burnin} == {"error"}, {(r["check_id"], r["status"]) for r in burnin}
    assert all(r["reason"].startswith("cmxbl-node1/") and "not of this run" in r["reason"] for r in burnin)
    assert next(g for g in doc["gates"] if g["id"] == "measurement_errors")["triggered"]


def test_an_artifact_of_another_probes_version_is_a_load_error(recorded, tmp_path):
    _, run, _ = recorded
    copy = copy_of(run, tmp_path / "run")
    staged = json.loads((copy / "assess_run.json").read_text())["probes_version"]
    _rewrite_json(copy / "artifacts" / "cmxbl-node2" / "burnin.json",
                  lambda d: d.update(tool=dict(d["tool"], version=OLD_PROBES)))
    # the controller's own record of a probe that did not run names no version (plugins/action/probe.py): the run's
    _rewrite_json(copy / "artifacts" / "cmxbl-node3" / "gemm.json", lambda d: d.update(
        status="error", reason="probe gemm did not run on cmxbl-node3: rc=255 ssh", results=[], facts={},
        tool=dict(d["tool"], version=None)))
    loaded = load_run(str(copy))
    assert loaded.load_errors == [{
        "host": "cmxbl-node2", "path": "cmxbl-node2/burnin.json",
        "error": "artifact written by probes %s, not by the probes %s that run %s staged" % (
            OLD_PROBES, staged, run.name)}]
    assert loaded.artifact("cmxbl-node3", "gemm")["status"] == "error"
    # an artifact that names the tool it measured (slurm_jobs: Slurm's version; prometheus) is checked by its run id
    # alone: its version is that tool's (the clean-clone run refused slurm_jobs written by "probes 22.05.8")
    _rewrite_json(copy / "artifacts" / "cmxbl-node1" / "gemm.json",
                  lambda d: d.update(tool={"name": "slurm", "version": "22.05.8"}))
    assert [e["path"] for e in load_run(str(copy)).load_errors] == ["cmxbl-node2/burnin.json"]
    # a run recorded before its request named the probes' version: the run id alone is checked
    _rewrite_json(copy / "assess_run.json", lambda d: d.pop("probes_version"))
    assert load_run(str(copy)).load_errors == []
