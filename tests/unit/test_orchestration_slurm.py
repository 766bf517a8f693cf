"""The Slurm half of the orchestration phase on the controller: its checks and report section, on artifacts the
probe wrote in real runs (tests/fixtures/slurm_jobs_artifacts/README.md): one against a production-like Slurm (slurmdbd
accounting with enforced associations, fake GPUs as GRES, a two-leaf topology, a 0.5 s prolog and epilog), one
against a bare Slurm. Cases no healthy cluster shows (a job across leaves while one had room, a wrong GPU count, a
slow scheduler, a job left in the queue) are those artifacts with the one fact changed that the case is about.
And the probe itself where no Slurm answers."""

import copy
import json
from pathlib import Path

import pytest

from probes.artifact import Artifact, validate
from probes.orchestration import slurm_jobs
from reports.grading.kinds import CLUSTER_KINDS, register_phase_kinds
from reports.grading.rubric import load_rubric
from reports.load import run_of_artifacts
from reports.phases.orchestration import section
from reports.render import markdown

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "slurm_jobs_artifacts"
SLURM_CHECKS = ("orchestration.slurm.ran", "orchestration.slurm_job_churn", "orchestration.slurm_salloc",
                "orchestration.slurm_srun_step", "orchestration.slurm_prolog", "orchestration.slurm_epilog",
                "orchestration.slurm_job_arrays", "orchestration.slurm_gpu_allocation", "orchestration.slurm_exclusive",
                "orchestration.slurm_topology_placement", "orchestration.slurm_accounting",
                "orchestration.slurm_account_enforced", "orchestration.slurm_cleanup")


def load(name):
    return json.loads((FIX / name).read_text())


@pytest.fixture(scope="module")
def checks():
    return {c["id"]: c for c in load_rubric()["checks"] if c["id"] in SLURM_CHECKS}


def rows_of(checks, docs, check_id):
    run = run_of_artifacts(docs)
    check = checks[check_id]
    register_phase_kinds()
    return CLUSTER_KINDS[check["kind"]](check, run, run.hosts)


def other_host():
    """A second host of the run, which did not run slurm_jobs (its artifact is another probe's)."""
    art = Artifact("node_info", "r", "cmxz-node2")
    return art.to_dict()


def with_clocks(doc, offset=0.0, uncertainty=0.02):
    """The fixture as the probe writes it now: its script times (prolog_launch_s, epilog_s, submit_to_script_s) put
    on the probe host's clock by a reading of the compute node's clock (facts node_clocks), each sample labelled with
    its node and carrying its uncertainty. The fixture was written before the probe read the nodes' clocks; the
    nodes of that test cluster share the host's clock (one machine), so its times stand with offset 0."""
    node = doc["host"]
    doc["facts"]["node_clocks"] = {node: {"offset_s": offset, "uncertainty_s": uncertainty}}
    extra = []
    for r in doc["results"]:
        if r["metric"] in ("prolog_launch_s", "epilog_s", "submit_to_script_s"):
            r["labels"]["node"] = node
            extra.append({"metric": r["metric"][:-2] + "_uncertainty_s", "value": uncertainty + 0.15, "unit": "s",
                          "labels": dict(r["labels"])})
    doc["results"] += extra
    return doc


def set_sample(doc, metric, sample, value, uncertainty):
    for r in doc["results"]:
        if r["labels"].get("sample") == sample and r["metric"] == metric:
            r["value"] = value
        if r["labels"].get("sample") == sample and r["metric"] == metric[:-2] + "_uncertainty_s":
            r["value"] = uncertainty


def test_the_fixtures_are_valid_artifacts():
    for name in ("production_site_22.05.8.json", "bare_22.05.8.json"):
        assert validate(load(name)) == [], name


def test_production_slurm_passes_every_check_with_rows_only_on_the_host_that_ran_it(checks):
    doc = with_clocks(load("production_site_22.05.8.json"))
    for check_id in SLURM_CHECKS:
        rows = rows_of(checks, [doc, other_host()], check_id)
        assert {r["host"] for r in rows} == {"cmxz-node1"}, check_id
        assert {r["status"] for r in rows} == {"pass"}, (check_id, rows)
    gpus = rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")
    assert [(r["subject"], r["observed"]) for r in gpus] == [
        ("--gres=gpu:1", "CUDA_VISIBLE_DEVICES=0 on cmxz-node1"),
        ("--gres=gpu:2", "CUDA_VISIBLE_DEVICES=0,1 on cmxz-node2"),
        ("--gpus=1", "CUDA_VISIBLE_DEVICES=0 on cmxz-node1")]
    [arrays] = rows_of(checks, [doc], "orchestration.slurm_job_arrays")
    assert arrays["observed"].endswith("submit RPCs 1 against 8")
    [acct] = rows_of(checks, [doc], "orchestration.slurm_accounting")
    assert acct["observed"].startswith("19 of 19 jobs in sacct; 2 associations, 2 QoS; associations,limits,qos")


def test_a_job_that_never_started_is_not_missing_its_tres(checks):
    """The exclusive test's job still pending after job_timeout_s (every node busy): the probe cancels it and marks
    it never started; sacct lists it with an empty AllocTRES, as it lists every job that never ran. The accounting
    check failed a healthy cluster on it ("jobs without allocated TRES"). Jobs the probe saw run with no TRES still
    fail it, whatever state sacct gives them (a slurmdbd that lost their start records shows them PENDING)."""
    doc = with_clocks(load("production_site_22.05.8.json"))
    pending = copy.deepcopy(doc)
    for job in pending["facts"]["accounting"]["jobs"]:
        if job["test"] == "exclusive":
            job.update(State="CANCELLED by 0", AllocTRES="", never_started=True)
    [acct] = rows_of(checks, [pending], "orchestration.slurm_accounting")
    assert acct["status"] == "pass", acct
    lost = copy.deepcopy(doc)
    for job in lost["facts"]["accounting"]["jobs"]:
        if job["test"] in ("launch", "salloc"):
            job.update(State="PENDING", AllocTRES="")
    [acct] = rows_of(checks, [lost], "orchestration.slurm_accounting")
    assert acct["status"] == "fail" and "jobs without allocated TRES in sacct (1,2,3,4)" in acct["reason"], acct


def test_mig_devices_given_to_a_job_count_as_its_gpus(checks):
    """--gres=gpu:2 on a node whose GRES are MIG devices: the step's nvidia-smi lists one GPU and the two MIG
    devices under it (the step counted "^GPU " lines: 1, and failed the node); a whole GPU in MIG mode given to a
    --gpus=1 job lists one GPU with its seven devices, and passes as one."""
    doc = with_clocks(load("production_site_22.05.8.json"))
    mig = copy.deepcopy(doc)
    two, one = mig["facts"]["gres"]["requests"][1], mig["facts"]["gres"]["requests"][2]
    two.update(nvidia_smi_gpus=1, nvidia_smi_mig=2)
    one.update(nvidia_smi_gpus=1, nvidia_smi_mig=7)
    rows = {r["subject"]: r for r in rows_of(checks, [mig], "orchestration.slurm_gpu_allocation")}
    assert rows["--gres=gpu:2"]["status"] == "pass", rows["--gres=gpu:2"]
    assert rows["--gres=gpu:2"]["observed"] == ("CUDA_VISIBLE_DEVICES=0,1 on cmxz-node2, nvidia-smi lists 1 "
                                                "(2 MIG devices)")
    assert rows["--gpus=1"]["status"] == "pass"
    two.update(nvidia_smi_gpus=1, nvidia_smi_mig=1)  # one of the two devices not there
    rows = {r["subject"]: r for r in rows_of(checks, [mig], "orchestration.slurm_gpu_allocation")}
    assert rows["--gres=gpu:2"]["status"] == "fail"


def test_bare_slurm_accounting_and_enforcement_absent_are_findings_gpus_and_topology_skip(checks):
    doc = load("bare_22.05.8.json")
    status = {c: [(r["status"], r["reason"]) for r in rows_of(checks, [doc], c)] for c in SLURM_CHECKS}
    [(st, why)] = status["orchestration.slurm_accounting"]
    assert st == "fail"
    assert why.split("; ") == [
        "no slurmdbd accounting (AccountingStorageType=accounting_storage/none)",
        "sacct: Slurm accounting storage is disabled",
        "no association for the user (Only 'accounting_storage/slurmdbd' is supported.)",
        "no QoS (Only 'accounting_storage/slurmdbd' is supported.)",
        "associations not enforced (AccountingStorageEnforce=none)",
        "no fairshare (PriorityType=priority/basic)"]
    assert status["orchestration.slurm_account_enforced"] == [("fail", "accepted as job 23")]
    assert status["orchestration.slurm_gpu_allocation"] == [
        ("skip", "no node of the partition has GPU GRES (sinfo %G lists no gpu)")]
    [(st, why)] = status["orchestration.slurm_topology_placement"]
    assert st == "skip" and why.startswith("no topology")
    for c in ("orchestration.slurm_job_churn", "orchestration.slurm_job_arrays", "orchestration.slurm_cleanup"):
        assert status[c][0][0] == "pass", (c, status[c])


def test_a_two_node_job_across_leaves_fails_only_when_one_leaf_had_two_idle_nodes(checks):
    doc = load("production_site_22.05.8.json")
    placement = doc["facts"]["topology"]["placements"][0]
    placement["nodes"] = ["cmxz-node2", "cmxz-node3"]
    placement["idle_before"] = ["cmxz-node1", "cmxz-node2", "cmxz-node3", "cmxz-node4"]
    [row] = rows_of(checks, [doc], "orchestration.slurm_topology_placement")
    assert row["status"] == "fail"
    assert row["observed"].startswith("cmxz-node2,cmxz-node3 across leaf1+leaf2 while leaf1 had two idle nodes")
    placement["idle_before"] = ["cmxz-node2", "cmxz-node3"]
    [row] = rows_of(checks, [doc], "orchestration.slurm_topology_placement")
    assert row["status"] == "pass" and "(no leaf had two idle nodes)" in row["observed"]


def test_a_job_that_sees_more_gpus_than_it_asked_for_fails(checks):
    doc = load("production_site_22.05.8.json")
    doc["facts"]["gres"]["requests"][0]["cuda_visible_devices"] = "0,1"
    rows = rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")
    assert [(r["subject"], r["status"]) for r in rows] == [("--gres=gpu:1", "fail"), ("--gres=gpu:2", "pass"),
                                                            ("--gpus=1", "pass")]
    doc["facts"]["gres"]["requests"][0].update(cuda_visible_devices="0", nvidia_smi_gpus=8)
    assert rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")[0]["status"] == "fail"


@pytest.mark.parametrize("seconds,status", [(0.8, "pass"), (12.0, "warn"), (45.0, "fail")])
def test_launch_latency_median_against_the_thresholds(checks, seconds, status):
    doc = load("production_site_22.05.8.json")
    for r in doc["results"]:
        if r["metric"] == "submit_to_running_s":
            r["value"] = seconds
    [row] = rows_of(checks, [doc], "orchestration.slurm_job_churn")
    assert row["status"] == status and row["observed"].startswith("median %.3g s" % seconds)


def test_a_launch_median_just_over_its_line_is_shown_over_it(checks):
    """Every job RUNNING 5.004 s after sbatch: the median warns (passes up to 5 s), and "%.3g" showed it as "5 s"
    beside "median <= 5 s", in the row and in the section's latency table; each keeps its side now."""
    doc = load("production_site_22.05.8.json")
    for r in doc["results"]:
        if r["metric"] == "submit_to_running_s":
            r["value"] = 5.004
    [row] = rows_of(checks, [doc], "orchestration.slurm_job_churn")
    assert (row["status"], row["observed"]) == ("warn", "median 5.004 s, max 5.004 s over 3")
    text = markdown.render(section.blocks(run_of_artifacts([doc]), [], None))
    assert "| sbatch to RUNNING | 3 | 5.004 | 5.004 | 5.004 |" in text, text


def test_a_job_that_never_ran_fails_churn_keeping_the_samples_measured(checks):
    doc = load("production_site_22.05.8.json")
    doc["facts"]["tests"]["launch"] = {"status": "error", "reason": "job 9 still PENDING after 120 s"}
    [row] = rows_of(checks, [doc], "orchestration.slurm_job_churn")
    assert row["status"] == "fail" and row["reason"] == "job 9 still PENDING after 120 s"
    assert row["observed"].startswith("median")


def test_script_times_hidden_without_a_shared_directory_skip_prolog_and_epilog_with_the_reason(checks):
    doc = load("production_site_22.05.8.json")
    doc["results"] = [r for r in doc["results"] if r["metric"] not in ("prolog_launch_s", "epilog_s",
                                                                          "submit_to_script_s")]
    note = "the job's timestamps in /x are not visible from this node: it is not a directory the nodes share"
    doc["facts"]["tests"]["launch"]["note"] = note
    for check_id in ("orchestration.slurm_prolog", "orchestration.slurm_epilog"):
        [row] = rows_of(checks, [doc], check_id)
        assert (row["status"], row["reason"]) == ("skip", note)
    assert rows_of(checks, [doc], "orchestration.slurm_job_churn")[0]["status"] == "pass"


def test_a_job_left_in_the_queue_fails_cleanup_naming_it(checks):
    doc = load("production_site_22.05.8.json")
    doc["facts"]["left_in_queue"] = ["41|RUNNING"]
    [row] = rows_of(checks, [doc], "orchestration.slurm_cleanup")
    assert (row["status"], row["reason"]) == ("fail", "41|RUNNING")


def test_no_slurm_on_the_host_is_a_skip_for_every_check(checks, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol, sbatch ... here
    art = Artifact("slurm_jobs", "r1", "h1")
    slurm_jobs.run(art, slurm_jobs.PARAMS.resolve("slurm_jobs", {}), str(tmp_path))
    assert (art.status, art.reason) == ("skipped", "Slurm cannot be used from this node (scontrol not found)")
    doc = art.to_dict()
    for check_id in SLURM_CHECKS:
        rows = rows_of(checks, [doc], check_id)
        assert [(r["status"], r["reason"]) for r in rows] == [("skip", art.reason)], check_id


def test_the_section_shows_every_part(checks):
    doc = load("production_site_22.05.8.json")
    run = run_of_artifacts([doc, other_host()])
    text = markdown.render(section.blocks(run, [], None))
    for expected in ("## Orchestration", "### Slurm", "Slurm 22.05.8", "| sbatch to RUNNING | 3 |",
                     "A job array against a loop of sbatch calls", "| array | 8 |", "GPU allocation (2 GPUs per node)",
                     "| leaf1 | 0 | cmxz-node1,cmxz-node2 |", "got 2 of 2 CPUs", "19 of 19 submitted jobs in sacct",
                     "clustermax-none-05100za1b2c3: refused", "0 left in the queue"):
        assert expected in text, expected
    bare = markdown.render(section.blocks(run_of_artifacts([load("bare_22.05.8.json")]), [], None))
    assert "missing: no slurmdbd accounting" in bare and "| gres | skipped |" in bare


def test_the_probe_parameters_are_checked_before_slurm_is_asked_anything(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    art = Artifact("slurm_jobs", "r1", "h1")
    slurm_jobs.run(art, slurm_jobs.PARAMS.resolve("slurm_jobs", {"jobs": 0, "placements": 0}), str(tmp_path))
    assert (art.status, art.reason) == ("error", "jobs, placements must be at least 1")


def test_a_copy_of_a_fixture_is_not_changed_by_grading(checks):
    doc = load("production_site_22.05.8.json")
    before = copy.deepcopy(doc)
    for check_id in SLURM_CHECKS:
        rows_of(checks, [doc], check_id)
    assert doc == before


# ---------------------------------------------------------------------------- times across two clocks (prolog, epilog)

def test_script_times_without_a_clock_reading_skip_prolog_and_epilog_they_mix_two_clocks(checks):
    """The fixture as written (before the probe read the nodes' clocks): prolog and epilog times are the node's
    clock against the probe host's, so they are not judged; the churn (the probe's clock alone) still is."""
    doc = load("production_site_22.05.8.json")
    for check_id in ("orchestration.slurm_prolog", "orchestration.slurm_epilog"):
        [row] = rows_of(checks, [doc], check_id)
        assert row["status"] == "skip", check_id
        assert row["reason"].startswith("no clock offset recorded") and "cmxz-node1" in row["reason"]
    assert rows_of(checks, [doc], "orchestration.slurm_job_churn")[0]["status"] == "pass"


def test_a_prolog_less_job_a_little_negative_within_its_uncertainty_passes_without_a_clock_note(checks):
    doc = with_clocks(load("production_site_22.05.8.json"))
    for i in range(3):
        set_sample(doc, "prolog_launch_s", i, -0.05, 0.17)
    [row] = rows_of(checks, [doc], "orchestration.slurm_prolog")
    assert (row["status"], row["reason"]) == ("pass", "")
    assert row["observed"] == "median -0.05 s, max -0.05 s over 3 (± 0.17 s)"


def test_a_time_negative_beyond_its_uncertainty_is_an_error_naming_the_clocks_never_a_pass(checks):
    """A compute node 15 s behind, misread: the prolog of 0.5 s reads -14.5 s."""
    doc = with_clocks(load("production_site_22.05.8.json"))
    set_sample(doc, "prolog_launch_s", 1, -14.5, 0.17)
    [row] = rows_of(checks, [doc], "orchestration.slurm_prolog")
    assert row["status"] == "error"
    assert row["reason"] == ("sample 1: -14.500 s ± 0.170 s, negative beyond its uncertainty: the compute node "
                             "cmxz-node1's clock (+0.000 s ± 0.020 s against cmxz-node1's) and cmxz-node1's were "
                             "misread, or one of them moved during the run")


@pytest.mark.parametrize("seconds,uncertainty,status", [(0.7, 0.17, "pass"), (16.0, 0.17, "warn"),
                                                        (9.8, 0.5, "skip"), (0.7, 12.0, "skip"),
                                                        (100.0, 20.0, "fail")])
def test_the_epilog_is_judged_only_where_its_uncertainty_stays_inside_one_band(checks, seconds, uncertainty, status):
    doc = with_clocks(load("production_site_22.05.8.json"))
    for i in range(3):
        set_sample(doc, "epilog_s", i, seconds, uncertainty)
    [row] = rows_of(checks, [doc], "orchestration.slurm_epilog")
    assert row["status"] == status
    if status == "skip":
        assert row["reason"].startswith("the median's uncertainty (± %.3g s" % uncertainty)
        assert "spans the pass/warn threshold" in row["reason"]


# ------------------------------------------------------------------- a test Slurm did not run is not a finding

BUSY = "srun: error: Unable to allocate resources: Requested nodes are busy"


def test_a_gpu_request_slurm_did_not_allocate_is_an_error_with_slurms_reason_not_a_fail(checks):
    doc = load("production_site_22.05.8.json")
    req = doc["facts"]["gres"]["requests"][1]
    for key in ("job", "cuda_visible_devices", "job_gpus", "step_gpus", "node", "nvidia_smi_gpus"):
        req.pop(key, None)
    req.update(rc=1, error=BUSY, refused="Requested nodes are busy")
    rows = rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")
    assert [(r["subject"], r["status"]) for r in rows] == [("--gres=gpu:1", "pass"), ("--gres=gpu:2", "error"),
                                                            ("--gpus=1", "pass")]
    assert (rows[1]["observed"], rows[1]["reason"]) == (
        "not allocated", "Slurm did not allocate it: Requested nodes are busy")
    del req["refused"]  # an artifact written before the probe marked refusals: srun's own text says it
    assert rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")[1]["status"] == "error"


def test_a_gpu_step_that_ran_and_failed_on_the_node_fails(checks):
    doc = load("production_site_22.05.8.json")
    req = doc["facts"]["gres"]["requests"][1]
    req.update(rc=1, error="srun: error: cmxz-node2: task 0: Exited with exit code 1")
    doc["facts"]["tests"]["gres"] = {"status": "error", "reason": "--gres=gpu:2: " + req["error"]}
    rows = rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")
    assert (rows[1]["status"], rows[1]["observed"]) == ("fail", "the step failed on cmxz-node2")


def test_an_exclusive_job_pending_past_the_timeout_is_an_error_not_a_fail(checks):
    doc = load("production_site_22.05.8.json")
    del doc["facts"]["exclusive"]
    why = "job 41 still PENDING after 120 s (Slurm's reason: Resources)"
    doc["facts"]["tests"]["exclusive"] = {"status": "error", "reason": why, "ran": False}
    [row] = rows_of(checks, [doc], "orchestration.slurm_exclusive")
    assert (row["status"], row["observed"], row["reason"]) == ("error", "exclusive test could not run", why)
    # an exclusive job that ran and ended FAILED on its node is a finding
    doc["facts"]["tests"]["exclusive"] = {"status": "error", "reason": "the exclusive job 41 is FAILED"}
    [row] = rows_of(checks, [doc], "orchestration.slurm_exclusive")
    assert (row["status"], row["reason"]) == ("fail", "the exclusive job 41 is FAILED")


def test_salloc_and_topology_not_allocated_are_errors_and_an_older_artifacts_refusal_text_says_so(checks):
    doc = load("production_site_22.05.8.json")
    doc["results"] = [r for r in doc["results"] if r["metric"] not in ("salloc_to_shell_s", "srun_step_s")]
    why = "salloc was not allocated: Requested nodes are busy"
    doc["facts"]["tests"]["salloc"] = {"status": "error", "reason": why, "ran": False}
    for check_id in ("orchestration.slurm_salloc", "orchestration.slurm_srun_step"):
        [row] = rows_of(checks, [doc], check_id)
        assert (row["status"], row["reason"]) == ("error", why), check_id
    del doc["facts"]["topology"]
    doc["facts"]["tests"]["topology"] = {"status": "error", "reason": "two-node job 0: " + BUSY}  # no "ran": older
    [row] = rows_of(checks, [doc], "orchestration.slurm_topology_placement")
    assert row["status"] == "error"


def test_a_refusal_of_the_tested_feature_itself_fails(checks):
    """Slurm refusing the very thing a test asks about is the finding, not a test it could not run: a GRES the
    cluster does not define, a node configuration no node has (the GPU-allocation check), arrays switched off
    (MaxArraySize=0: the job-array check). In an artifact from before the probe marked its tests, and in one after."""
    doc = load("production_site_22.05.8.json")
    req = doc["facts"]["gres"]["requests"][1]
    for key in ("job", "cuda_visible_devices", "job_gpus", "step_gpus", "node", "nvidia_smi_gpus"):
        req.pop(key, None)
    req.update(rc=1, error="srun: error: Unable to allocate resources: Invalid generic resource (gres) specification")
    rows = rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")
    assert rows[1]["status"] == "fail", rows[1]
    req["error"] = "srun: error: Unable to allocate resources: Requested node configuration is not available"
    assert rows_of(checks, [doc], "orchestration.slurm_gpu_allocation")[1]["status"] == "fail"
    array = "sbatch: sbatch: error: Batch job submission failed: Invalid job array specification"
    for test in ({"status": "error", "reason": array}, {"status": "error", "reason": array, "ran": True}):
        doc["facts"]["tests"]["array_vs_loop"] = test
        [row] = rows_of(checks, [doc], "orchestration.slurm_job_arrays")
        assert (row["status"], row["reason"]) == ("fail", array), test
