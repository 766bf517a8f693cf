"""reports/merge.py: the slices of one run joined into that run (AWX job slicing). The recorded 4-host run
(tests/fixtures/assessment_run) is cut into two slices the way two `--limit` runs would have written it (each its
hosts' artifacts, its journal lines, its request and its recap); merged back, it must build into the same checks as
the run itself: the merge loses nothing and counts nothing twice. tests/integration/test_audit.py merges real
slices run at the same time on the test cluster."""

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
from rating_runs import ANALYST_GOOD
from run_dirs import unpack_recorded_run

from reports import cli
from reports import merge as merge_mod
from reports.build import build

CMAX = Path(__file__).resolve().parents[1] / "fixtures" / "cmax"
CMAX_REPORT = CMAX / "cmax-0.2.1_audit_vm_2core_nogpu.txt"
CMAX_OTHER = CMAX / "cmax-0.2.1_show_vm.txt"
PARTS = {"s1": ["cmxbl-node1", "cmxbl-node2"], "s2": ["cmxbl-node3", "cmxbl-node4"]}


def _write(path, doc):
    path.write_text(json.dumps(doc, indent=2))


def _cut_into_slices(whole, into, parts=PARTS, ended=("s1", "s2")):
    """into/<run id>/slices/<name>/ for each part, from the whole run: what each `--limit` slice writes."""
    run_id = whole.name
    request = json.loads((whole / "assess_run.json").read_text())
    summary = json.loads((whole / "run.json").read_text())
    lines = [json.loads(line) for line in (whole / "journal.jsonl").read_text().splitlines() if line.strip()]
    run = into / run_id
    for name, hosts in parts.items():
        part = run / "slices" / name
        (part / "artifacts").mkdir(parents=True)
        for host in hosts:
            shutil.copytree(whole / "artifacts" / host, part / "artifacts" / host)
        _write(part / "assess_run.json", dict(request, hosts=hosts, slice=name, dir=str(part)))
        (part / "journal.jsonl").write_text("".join(
            json.dumps(line) + "\n" for line in lines if line.get("host") in (None, "localhost", *hosts)))
        if name in ended:
            _write(part / "run.json", dict(
                summary, hosts=hosts, slice=name,
                stats={h: summary["stats"][h] for h in summary["stats"] if h in hosts or h == "localhost"},
                unreachable_hosts=[h for h in summary["unreachable_hosts"] if h in hosts],
                failed_hosts=[h for h in summary["failed_hosts"] if h in hosts]))
    return run


def _checks(run_dir):
    with open(run_dir / "report" / "checks.csv") as fh:
        return {(r["check_id"], r["host"]): (r["status"], r["observed"], r["reason"]) for r in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The recorded run and its own report (built once for the module)."""
    whole = unpack_recorded_run(tmp_path_factory.mktemp("whole"))
    build(str(whole))
    return whole


@pytest.fixture
def sliced(recorded, tmp_path):
    whole = tmp_path / "whole" / recorded.name
    shutil.copytree(recorded, whole, ignore=shutil.ignore_patterns("report"))
    return whole, _cut_into_slices(whole, tmp_path / "sliced")


def test_the_merged_slices_build_into_the_checks_of_the_whole_run(recorded, sliced):
    whole, run = sliced
    summary = merge_mod.merge(run)
    assert summary["hosts"] == PARTS["s1"] + PARTS["s2"] and not summary["interrupted"]
    assert [(s["slice"], s["hosts"], s["ended"]) for s in summary["slices"]] == [
        ("s1", PARTS["s1"], True), ("s2", PARTS["s2"], True)]
    original = json.loads((whole / "run.json").read_text())
    # the controller's own tasks ran in each slice and add up; each node's are its slice's
    assert summary["stats"] == dict(original["stats"], localhost={
        k: 2 * v for k, v in original["stats"]["localhost"].items()})
    assert summary["started_at"] == original["started_at"] and summary["finished_at"] == original["finished_at"]
    assert sorted(p.name for p in (run / "artifacts").iterdir()) == summary["hosts"]
    # every journal line of the whole run's hosts is there once, marked with its slice
    merged = [json.loads(line) for line in (run / "journal.jsonl").read_text().splitlines()]
    per_host = [line for line in merged if line.get("host", "localhost") != "localhost"]
    assert len(per_host) == sum(1 for line in (whole / "journal.jsonl").read_text().splitlines()
                                if json.loads(line).get("host", "localhost") != "localhost")
    assert {line["slice"] for line in per_host if line["host"] in PARTS["s2"]} == {"s2"}
    build(str(run))
    mine, theirs = _checks(run), _checks(recorded)
    assert len(mine) > 500 and set(mine) == set(theirs)
    assert {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]} == {}


def test_a_slice_that_has_not_ended_leaves_the_run_interrupted_until_it_has(sliced):
    whole, _ = sliced
    run = _cut_into_slices(whole, whole.parent.parent / "late", ended=("s1",))
    first = merge_mod.merge(run)
    assert first["interrupted"] and [s["ended"] for s in first["slices"]] == [True, False]
    assert first["hosts"] == PARTS["s1"] + PARTS["s2"]  # its hosts are the run's: what they measured so far counts
    # it ends, and merges again: the run is whole, and what the first merge wrote was replaced, not added to
    summary = json.loads((whole / "run.json").read_text())
    _write(run / "slices" / "s2" / "run.json", dict(summary, hosts=PARTS["s2"]))
    again = merge_mod.merge(run)
    assert not again["interrupted"] and [s["ended"] for s in again["slices"]] == [True, True]
    lines = (run / "journal.jsonl").read_text().splitlines()
    assert len(lines) == len(set(lines))


def test_a_host_in_two_slices_is_refused_naming_it(sliced):
    _, run = sliced
    shutil.copytree(run / "slices" / "s1" / "artifacts" / "cmxbl-node1", run / "slices" / "s2" / "artifacts" /
                    "cmxbl-node1")
    with pytest.raises(merge_mod.MergeError, match="host cmxbl-node1 is in slices s1 and s2"):
        merge_mod.merge(run)
    assert not (run / "artifacts").exists()


def test_slices_of_different_runs_are_refused(sliced):
    _, run = sliced
    path = run / "slices" / "s2" / "assess_run.json"
    _write(path, dict(json.loads(path.read_text()), profile="standard"))
    with pytest.raises(merge_mod.MergeError, match="slices s1 and s2 are not parts of one run: their profile is "
                                                   "'quick' and 'standard'"):
        merge_mod.merge(run)


def test_a_run_of_its_own_is_never_merged_over(sliced):
    whole, _ = sliced
    (whole / "slices" / "s9").mkdir(parents=True)
    before = sorted(p.name for p in whole.iterdir())
    with pytest.raises(merge_mod.MergeError, match="holds a run of its own"):
        merge_mod.merge(whole)
    assert sorted(p.name for p in whole.iterdir()) == before


def test_the_cli_merges_then_builds_and_exits_as_the_build(sliced, capsys):
    _, run = sliced
    code = cli.main(["merge", str(run)])
    out = capsys.readouterr().out
    assert "run %s: 2 slice(s), 4 host(s)" % run.name in out and "slice s2: 2 host(s), ended" in out
    assert (run / "report" / "checks.csv").exists()
    assert code == cli.main(["build", str(run)])
    assert cli.main(["merge", str(run.parent / "nothing-here")]) == 2


def _ratings(run):
    return json.loads((run / "report" / "ratings.json").read_text())


def test_a_merge_again_keeps_what_users_put_in_the_run_and_replaces_only_what_it_wrote(sliced):
    _, run = sliced
    merge_mod.merge(run)
    # handed in to the merged run as the README says: the analyst file build reads by default, a cmax report
    shutil.copy(ANALYST_GOOD, run / "analyst.yml")
    cmax = run / "reference" / "cmax" / "cmxbl-node1.txt"
    cmax.parent.mkdir(parents=True)
    shutil.copy(CMAX_REPORT, cmax)
    build(str(run))
    first = _ratings(run)
    assert first["analyst"]["provided"] and first["tier"]["provisional"] == "Bronze"
    stray = run / "artifacts" / "cmxbl-node1" / "left-by-an-earlier-merge.json"
    stray.write_text("{}")
    summary = merge_mod.merge(run)  # a slice that ended later, or by hand
    # before: both gone, and the run fell from provisional Bronze 83.8 to Participation Ribbon 75.1
    assert (run / "analyst.yml").read_bytes() == open(ANALYST_GOOD, "rb").read()
    assert cmax.read_bytes() == open(CMAX_REPORT, "rb").read()
    assert summary["copied_from_slices"] == ["artifacts"] and summary["notes"] == []
    assert json.loads((run / "run.json").read_text())["copied_from_slices"] == ["artifacts"]
    # what the last merge wrote is rewritten from the slices: its report and anything added to what it copied
    assert not stray.exists() and not (run / "report").exists()
    build(str(run))
    again = _ratings(run)
    assert (again["score"], again["tier"], again["analyst"]) == (first["score"], first["tier"], first["analyst"])
    assert round(again["score"], 1) == 83.8


KEEP_TASK = "clustermax.assess.audit : Audit | keep what kubectl returned (or why it failed)"


def _kubectl_pods(run, name, resource_version, read_at, error=None):
    """What a slice's run_once `kubectl get pods -A -o json` kept (or, error, why it failed), and the line its
    journal has of the task that kept it, at read_at."""
    path = run / "slices" / name / "kubernetes" / "pods.txt"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"error": error} if error else {
        "apiVersion": "v1", "items": [], "kind": "List", "metadata": {"resourceVersion": resource_version}}))
    for kind in ("storageclasses", "daemonsets"):  # what the audit reads with pods, the same in every slice
        (path.parent / (kind + ".txt")).write_text(json.dumps({"apiVersion": "v1", "items": [], "kind": "List"}))
    with open(run / "slices" / name / "journal.jsonl", "a") as fh:
        fh.write(json.dumps({"ts": read_at, "play": "Audit", "task": KEEP_TASK, "action": "ansible.builtin.copy",
                             "role": "clustermax.assess.audit", "host": PARTS[name][0], "status": "changed",
                             "duration_s": 0.03, "skip_reason": None, "msg": None, "item": "pods"}) + "\n")
    return path


def test_each_slices_own_kubectl_read_is_merged_from_the_newest_slice(sliced, capsys):
    _, run = sliced
    # each slice read the pods seconds apart; here s1 read last
    newest = _kubectl_pods(run, "s1", "1007", "2026-12-01T20:34:50.513Z")
    _kubectl_pods(run, "s2", "1001", "2026-12-01T20:34:40.513Z")
    summary = merge_mod.merge(run)  # before: MergeError "pods.txt differs between slices s1 and s2"
    assert (run / "kubernetes" / "pods.txt").read_bytes() == newest.read_bytes()
    assert sorted(summary["copied_from_slices"]) == ["artifacts", "kubernetes"]
    assert summary["notes"] == ["kubernetes/pods.txt differs between slices s1, s2: kept s1's copy, the best read "
                                "(each slice reads it for itself)"]  # the others: the same in both
    assert json.loads((run / "run.json").read_text())["notes"] == summary["notes"]
    assert "note: kubernetes/pods.txt differs between slices s1, s2: kept s1's" in merge_mod.text(summary)
    # s2 reads again later and merges: its copy is the newest now
    _kubectl_pods(run, "s2", "1012", "2026-12-01T20:35:40.513Z")
    merge_mod.merge(run)
    assert json.loads((run / "kubernetes" / "pods.txt").read_text())["metadata"]["resourceVersion"] == "1012"


def test_the_kubectl_read_kept_is_chosen_by_what_it_holds_and_the_journal_not_by_file_mtime(sliced):
    _, run = sliced
    # s1 read last (its journal says so) but its slice was collected first (AWX, rsync without -t): older mtime
    newest = _kubectl_pods(run, "s1", "1007", "2026-12-01T20:34:50.513Z")
    older = _kubectl_pods(run, "s2", "1001", "2026-12-01T20:34:40.513Z")
    os.utime(newest, (1_764_620_000, 1_764_620_000))
    os.utime(older, (1_764_620_050, 1_764_620_050))
    merge_mod.merge(run)
    # before: s2's older read, the file copied last
    assert (run / "kubernetes" / "pods.txt").read_bytes() == newest.read_bytes()
    # s2 reads again, later in every way, but kubectl timed out: s1's read is still the one that holds the pods
    failed = _kubectl_pods(run, "s2", None, "2026-12-01T20:35:40.513Z", error="Unable to connect to the server: "
                           "net/http: request canceled (Client.Timeout exceeded while awaiting headers)")
    os.utime(failed, (1_764_620_100, 1_764_620_100))
    summary = merge_mod.merge(run)
    # before: the failure was kept, and every audit.k8s check of the run was an error
    assert (run / "kubernetes" / "pods.txt").read_bytes() == newest.read_bytes()
    assert summary["notes"] == ["kubernetes/pods.txt differs between slices s1, s2: kept s1's copy, the best read "
                                "(each slice reads it for itself)"]
    build(str(run))
    k8s = {status for (check, _), (status, _, _) in _checks(run).items() if check.startswith("audit.k8s.")}
    assert k8s and "error" not in k8s


def test_other_paths_that_differ_between_slices_are_still_refused_by_their_whole_path(sliced):
    _, run = sliced
    # compare-cmax run against each slice for one host, with two different cmax reports
    for name, report in (("s1", CMAX_REPORT), ("s2", CMAX_OTHER)):
        path = run / "slices" / name / "reference" / "cmax" / "cmxbl-node1.txt"
        path.parent.mkdir(parents=True)
        shutil.copy(report, path)
    with pytest.raises(merge_mod.MergeError) as refused:
        merge_mod.merge(run)
    assert str(refused.value) == "reference/cmax/cmxbl-node1.txt differs between slices s1 and s2"
