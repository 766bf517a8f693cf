"""The reference ClusterMAX CLI beside our audit: cmax 0.2.1's own report and check lists (tests/fixtures/cmax/,
captured from clustermax 0.2.1 on this machine kind), the mapping in reports/data/reference_cmax.yml, and the
comparison's verdicts."""

import re
from pathlib import Path

import pytest

from reports import reference_cmax as ref
from reports.grading import load_rubric

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cmax"
REPORT = (FIX / "cmax-0.2.1_audit_vm_2core_nogpu.txt").read_text()
TARGETS = ("vm", "standalone", "slurm", "k8s", "local")


def test_the_real_report_is_read_whole():
    report = ref.read_report(REPORT)
    assert report["host"] == "vm"
    checks = report["checks"]
    assert len(checks) == 59
    by_status = {}
    for c in checks.values():
        by_status[c["status"]] = by_status.get(c["status"], 0) + 1
    assert by_status == {"fail": 4, "warn": 9, "pass": 7, "skip": 39}  # its closing line: 4 failed, 9 warnings, ...
    cuda = checks["securityVersions.cudaToolkit.status"]
    assert cuda == {"status": "fail", "title": "Security Versions / CUDA Toolkit",
                    "observed": "observed version 13.0; minimum version 13.1; measured from the installed toolkit "
                                "with nvcc"}
    assert checks["software.perf.perfEventParanoid"]["observed"] == "2"
    assert checks["bmc-ipmi"]["status"] == "pass"  # ids without dots are read too


def test_colour_codes_are_read_through():
    coloured = re.sub(r"^(PASS|FAIL|WARNING|SKIPPED)(\s)", "\x1b[1;32m\\1\x1b[0m\\2", REPORT, flags=re.M)
    assert coloured != REPORT
    assert ref.read_report(coloured)["checks"] == ref.read_report(REPORT)["checks"]


@pytest.mark.parametrize("mangle, message", [
    (lambda t: t.split("\n4 failed,")[0], "no closing count line"),
    (lambda t: t.replace("PASS     Software / Perf  [", "CRITICAL Software / Perf  ["), "unknown status 'CRITICAL'"),
    (lambda t: t.replace("4 failed, 9 warnings", "5 failed, 9 warnings"), "the closing line counts"),
    (lambda t: t.replace("# ClusterMAX audit report", "# something else"), "holds no report"),
    (lambda t: t.replace("\nSKIPPED  Vm IOMMU", "\ngarbage between checks\nSKIPPED  Vm IOMMU"),
     "not a line of cmax's report: 'garbage between checks'"),
    (lambda t: t.replace("\nSKIPPED  Vm IOMMU  [vm_iommu.status]",
                         "\nSKIPPED  Vm IOMMU  [vm_iommu.status]\nSKIPPED  Vm IOMMU  [vm_iommu.status]"),
     "listed twice"),
])
def test_a_report_read_in_part_is_refused_naming_the_line(mangle, message):
    with pytest.raises(ref.ReportError) as exc:
        ref.read_report(mangle(REPORT), "cmax.txt")
    assert message in str(exc.value) and "cmax.txt" in str(exc.value)


def test_the_unreadable_line_is_named_by_number():
    mangled = REPORT.replace("\nSKIPPED  Vm IOMMU", "\ngarbage between checks\nSKIPPED  Vm IOMMU")
    line = mangled.splitlines().index("garbage between checks") + 1
    with pytest.raises(ref.ReportError, match=r"line %d:" % line):
        ref.read_report(mangled)


@pytest.mark.parametrize("target", TARGETS)
def test_every_check_of_every_target_is_mapped(target):
    ids = ref.read_show((FIX / ("cmax-0.2.1_show_%s.txt" % target)).read_text())
    assert len(ids) == len(set(ids)) == 59
    mapping = ref.load_mapping()["checks"]
    assert set(ids) == set(mapping)  # nothing unmapped, nothing mapped that cmax does not have


def test_the_mapping_names_only_our_real_checks_and_gives_every_gap_a_reason():
    ours = {c["id"] for c in load_rubric()["checks"]}
    mapping = ref.load_mapping()
    assert ref.mapping_problems(mapping, ours) == []
    assert ref.mapping_problems({"checks": {"x": {"ours": ["audit.none"]}, "y": {"ours": []},
                                            "z": {"ours": ["audit.sw.perf"], "differs": [{"cmax": "warn"}]},
                                            "s": {"ours": ["audit.sw.perf"],
                                                  "differs": [{"cmax": "skip", "ours": "pass", "reason": "r"}]}}},
                                ours) == [
        "x: our check audit.none does not exist",
        "y: maps to none of our checks and gives no not_implemented reason",
        "z: differs entry {'cmax': 'warn'} needs cmax, ours (statuses) and reason",
        "s: differs entry with cmax skip is never used (what cmax skipped is not compared)"]


def _row(check_id, status, host="n1", observed="", reason=""):
    return {"check_id": check_id, "host": host, "status": status, "observed": observed, "reason": reason}


def test_verdicts():
    report = ref.read_report(REPORT)
    rows = [
        _row("audit.sw.cuda_toolkit", "fail", observed="13.0.88"),            # cmax fail: agree
        _row("audit.sw.docker", "skip", reason="not installed"),               # cmax warn, documented: differs
        _row("audit.sw.runc", "fail", observed="1.1.0"),                       # cmax warn, not documented: disagree
        _row("audit.sw.perf", "pass", observed="perf 6.1"),
        _row("audit.sw.perf", "pass", host="n2"),                              # another host's row is not used
        _row("audit.sw.perf_event_paranoid", "fail", host="n2"),
    ]
    lines = {x["cmax_id"]: x for x in ref.compare(report, rows, "n1")}
    assert len(lines) == 59
    assert lines["securityVersions.cudaToolkit.status"]["verdict"] == "agree"
    docker = lines["securityVersions.docker.status"]
    assert docker["verdict"] == "differs" and "not installed" in docker["why"]
    assert lines["securityVersions.runc.status"]["verdict"] == "disagree"
    assert lines["software.perf.installed"]["verdict"] == "agree"
    # no row of ours on this host for a check cmax judged: a disagreement that says so
    paranoid = lines["software.perf.perfEventParanoid"]
    assert paranoid["verdict"] == "disagree" and "no row of ours" in paranoid["why"]
    assert lines["vm_iommu.status"]["verdict"] == "cmax skipped"
    assert lines["gpu_controls.vboost.allowed"]["verdict"] == "not implemented"
    # the worst of several mapped rows on the host stands for ours
    mapping = ref.load_mapping()
    mapping["checks"]["software.perf.installed"] = {"ours": ["audit.sw.perf", "audit.sw.perf_event_paranoid"]}
    rows = [_row("audit.sw.perf", "pass"), _row("audit.sw.perf_event_paranoid", "warn")]
    both = {x["cmax_id"]: x for x in ref.compare(report, rows, "n1", mapping)}
    perf = both["software.perf.installed"]
    assert perf["ours"] == "warn" and perf["verdict"] == "disagree"
    # a note says where ours is a near but not the same test, beside the verdict
    singularity = {x["cmax_id"]: x for x in ref.compare(report, [_row("audit.sw.container_runtime", "skip")], "n1")}
    assert "not the same test: ours passes on any runtime" in singularity["containers.singularity"]["why"]


def test_a_check_the_mapping_does_not_know_is_not_mapped():
    report = ref.read_report(REPORT)
    mapping = ref.load_mapping()
    del mapping["checks"]["bmc-ipmi"]
    lines = {x["cmax_id"]: x for x in ref.compare(report, [], "n1", mapping)}
    assert lines["bmc-ipmi"]["verdict"] == "not mapped"


def test_text_lists_disagreements_first():
    report = ref.read_report(REPORT)
    lines = ref.compare(report, [_row("audit.sw.runc", "fail")], "n1")
    out = ref.text(lines, "n1").splitlines()
    assert out[0].startswith("cmax audit beside ours on n1: 59 checks: ")
    assert out[1].split()[0] == "disagree"


NO_GPU = "not applicable: no GPU on this host (none on the PCI bus, none reported by nvidia-smi/amd-smi)"


def test_a_documented_difference_holds_only_where_its_condition_holds():
    """cmax fails containers.nvidiaContainerToolkit and software.ncu.installed on its no-GPU VM (the real report):
    our skip there is the documented difference. On a GPU node our skip (docker had no local image; ncu's skip for
    another reason) is a disagreement, whatever the status pair."""
    report = ref.read_report(REPORT)
    runtime_skip = ("not applicable: no container or job step could start here: docker: no local image that can run "
                    "nvidia-smi (no image at all); podman: not installed; apptainer: not installed")
    gpu_node = [_row("audit.gpu.count", "pass", observed="8 GPUs"),
                _row("audit.sw.nvidia_container_runtime", "skip", reason=runtime_skip),
                _row("audit.sw.ncu", "skip", reason="not read: something else")]
    lines = {x["cmax_id"]: x for x in ref.compare(report, gpu_node, "n1")}
    for cmax_id in ("containers.nvidiaContainerToolkit", "software.ncu.installed"):
        assert (lines[cmax_id]["cmax"], lines[cmax_id]["ours"]) == ("fail", "skip")
        assert lines[cmax_id]["verdict"] == "disagree", lines[cmax_id]
        assert "even where there is no GPU" not in lines[cmax_id]["why"]
    no_gpu = [_row("audit.gpu.count", "skip", reason=NO_GPU),
              _row("audit.sw.nvidia_container_runtime", "skip", reason=NO_GPU),
              _row("audit.sw.ncu", "skip", reason="not applicable: no NVIDIA GPU on this host")]
    lines = {x["cmax_id"]: x for x in ref.compare(report, no_gpu, "n1")}
    for cmax_id in ("containers.nvidiaContainerToolkit", "software.ncu.installed"):
        assert lines[cmax_id]["verdict"] == "differs", lines[cmax_id]


def test_a_differs_condition_must_be_one_the_code_checks():
    ours = {c["id"] for c in load_rubric()["checks"]}
    bad = {"checks": {"w": {"ours": ["audit.sw.ncu"],
                            "differs": [{"cmax": "fail", "ours": "skip", "reason": "r", "when": "tuesday"}]}}}
    assert ref.mapping_problems(bad, ours) == ["w: differs entry when 'tuesday' is not a condition of "
                                               "reports/reference_cmax.py (%s)" % ", ".join(sorted(ref.WHEN))]
