"""fault_inject on AMD nodes and after a PCIe bridge reset, run for real against fake trees and fake tools.

The amdgpu_ras method writes into a fake debugfs and reads a fake sysfs built in tmp_path from the files in
tests/fixtures/amdgpu-ras (README there: which are captures, and from where); the node's GPUs come from a stand-in
`amd-smi list` (or `nvidia-smi`) on PATH printing a recorded output. A file stands for /dev/kmsg, so that an NVIDIA
XID written on an AMD node would show."""

import os
from pathlib import Path

import pytest

from probes.cli import run_probe
from probes.reliability import fault_inject
from probes.reliability.fault_inject import RAS_COMMAND, dri_name_bdf

FIX = Path(__file__).resolve().parents[1] / "fixtures"
RAS = FIX / "amdgpu-ras"
NAME_CAPTURE = (RAS / "dri_name_issue50.txt").read_text()
GPUS = {"0000:23:00.0": "0", "0000:26:00.0": "1"}  # tests/fixtures/amd-smi/list_text_amdsmi_changelog.txt
NOT_ON_AMD = "not tried: an NVIDIA XID on an AMD node"


def results(doc, **labels):
    return {r["metric"]: r["value"] for r in doc["results"] if all(r["labels"].get(k) == v for k, v in labels.items())
            and (labels or not r["labels"])}


def cat(path):
    """A shell body printing a file with builtins only: PATH holds nothing but the fake tools."""
    return 'while IFS= read -r line; do echo "$line"; done < %s\n' % path


def tool(bindir, name, body):
    path = bindir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


class Node:
    """A fake AMD node: amd-smi on PATH, a debugfs with DRI minors (primary and render) and the GPUs' sysfs."""

    def __init__(self, tmp_path, monkeypatch, features="ras_features_umc.txt"):
        self.tmp = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        tool(self.bin, "amd-smi", cat(FIX / "amd-smi" / "list_text_amdsmi_changelog.txt"))
        monkeypatch.setenv("PATH", str(self.bin))  # no nvidia-smi, no dcgmi, no setpci
        self.debugfs = tmp_path / "debug"
        self.sys = tmp_path / "sys"
        self.kmsg = tmp_path / "kmsg"
        self.kmsg.write_text("")
        for bdf, minor in GPUS.items():
            # The render minor (128 + N) has the same name file and no ras directory.
            for entry in (minor, str(128 + int(minor))):
                d = self.debugfs / "dri" / entry
                d.mkdir(parents=True)
                (d / "name").write_text(NAME_CAPTURE.replace("0000:07:00.0", bdf))
            (self.debugfs / "dri" / minor / "ras").mkdir()
            self.ctrl(bdf).write_text("")
            dev = self.sys / "bus" / "pci" / "devices" / bdf / "ras"
            dev.mkdir(parents=True)
            (dev / "features").write_text((RAS / features).read_text())
        monkeypatch.setattr(fault_inject, "_is_root", lambda: True)

    def ctrl(self, bdf):
        return self.debugfs / "dri" / GPUS[bdf] / "ras" / "ras_ctrl"

    def params(self, **extra):
        return dict({"xid": 48, "gpu_index": 1, "kmsg_path": str(self.kmsg), "sys_root": str(self.sys),
                     "debugfs_root": str(self.debugfs)}, **extra)

    def inject(self, **extra):
        return run_probe("fault_inject", str(self.tmp / "out"), "r", "amd1", params=self.params(**extra))[1]


def test_the_dri_name_file_gives_the_pci_address():
    assert dri_name_bdf(NAME_CAPTURE) == "0000:07:00.0"
    assert dri_name_bdf("amdgpu dev=0000:C1:00.0") == "0000:c1:00.0"
    assert dri_name_bdf("simple-framebuffer") is None


def test_amdgpu_ras_writes_the_documented_umc_ue_injection_into_the_gpus_own_ras_ctrl(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    doc = node.inject()
    assert doc["status"] == "ok", doc.get("reason")
    assert doc["device"]["backend"] == "rocm"
    # GPU 1 of amd-smi list is 0000:26:00.0, whose primary minor is dri/1: only its ras_ctrl is written
    assert node.ctrl("0000:26:00.0").read_text() == "inject umc ue 0x0 0x0 0x0\n" == RAS_COMMAND + "\n"
    assert node.ctrl("0000:23:00.0").read_text() == ""
    facts = doc["facts"]
    assert facts["method"] == "amdgpu_ras" and facts["method_amdgpu_ras"] == "ok"
    assert {k: facts[k] for k in ("ras_block", "ras_type", "ras_command", "ras_ctrl", "gpu_bdf", "dri_minor",
                                  "ras_features")} == {
        "ras_block": "umc", "ras_type": "ue", "ras_command": "inject umc ue 0x0 0x0 0x0",
        "ras_ctrl": str(node.ctrl("0000:26:00.0")), "gpu_bdf": "0000:26:00.0", "dri_minor": "1",
        "ras_features": "0x3fbf7"}
    # the NVIDIA methods came first in the list and were never used: no XID in the kernel log
    assert [facts["method_%s" % m].startswith(NOT_ON_AMD) for m in ("dcgm", "kmsg", "pcie_bridge_reset")] == [True] * 3
    assert node.kmsg.read_text() == ""
    assert "amd_ras" not in facts
    assert results(doc, method="amdgpu_ras", xid=48)["injected_at"] > 0
    assert results(doc)["methods_tried"] == 1


def _no_debugfs(node):
    node.debugfs.rename(node.tmp / "elsewhere")
    return "no debugfs at %s" % node.debugfs


def _no_ras_ctrl(node):
    for minor in GPUS.values():
        node.ctrl({v: k for k, v in GPUS.items()}[minor]).unlink()
    return "no ras/ras_ctrl under %s/dri/{1,129}" % node.debugfs


def _no_minor(node):
    for entry in ("1", "129"):
        (node.debugfs / "dri" / entry / "name").write_text(NAME_CAPTURE)  # another GPU's address
    return "no DRI minor under %s/dri names the GPU's PCI address 0000:26:00.0" % node.debugfs


def _no_features_file(node):
    (node.sys / "bus/pci/devices/0000:26:00.0/ras/features").unlink()
    return "cannot read %s/bus/pci/devices/0000:26:00.0/ras/features: No such file" % node.sys


def _umc_not_a_feature(node):
    (node.sys / "bus/pci/devices/0000:26:00.0/ras/features").write_text(
        (RAS / "ras_features_no_umc.txt").read_text())
    return "UMC is not among the RAS features of GPU 0000:26:00.0 (%s/bus/pci/devices/0000:26:00.0/ras/features: " \
           "feature mask 0x3fbf6)" % node.sys


def _not_root(node):
    fault_inject._is_root = lambda: False  # monkeypatch (Node) restores it
    return "not root: the amdgpu RAS debugfs interface (ras_ctrl) is root-only"


@pytest.mark.parametrize("breaks", [_no_debugfs, _no_ras_ctrl, _no_minor, _no_features_file, _umc_not_a_feature,
                                    _not_root])
def test_amdgpu_ras_not_available_is_a_skip_with_the_reason_and_nothing_written(tmp_path, monkeypatch, breaks):
    node = Node(tmp_path, monkeypatch)
    why = breaks(node)
    doc = node.inject()
    assert doc["status"] == "skipped"
    assert doc["facts"]["method_amdgpu_ras"].startswith(why), doc["facts"]["method_amdgpu_ras"]
    assert "amdgpu_ras: " + why in doc["reason"]
    # every reason is in the skip, the NVIDIA ones included
    assert "dcgm: %s" % NOT_ON_AMD in doc["reason"] and "kmsg: %s" % NOT_ON_AMD in doc["reason"]
    assert node.kmsg.read_text() == ""
    for ctrl in node.debugfs.glob("dri/*/ras/ras_ctrl"):
        assert ctrl.read_text() == ""
    assert results(doc)["methods_tried"] == 1


def test_an_amd_node_never_gets_an_nvidia_xid_even_when_only_nvidia_methods_are_asked(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    doc = node.inject(methods=["kmsg", "dcgm"])
    assert doc["status"] == "skipped"
    assert doc["reason"] == "no injection method worked: kmsg: %s; dcgm: %s" % (
        doc["facts"]["method_kmsg"], doc["facts"]["method_dcgm"])
    assert doc["facts"]["method_kmsg"].startswith(NOT_ON_AMD)
    assert node.kmsg.read_text() == "" and results(doc)["methods_tried"] == 0


def test_an_nvidia_node_does_not_try_amdgpu_ras(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    tool(node.bin, "nvidia-smi", cat(FIX / "nvidia-smi" / "h100_8x_query.csv"))
    doc = node.inject(methods=["amdgpu_ras", "kmsg"])
    assert doc["status"] == "ok" and doc["device"]["backend"] == "cuda"
    assert doc["facts"]["method_amdgpu_ras"] == "not tried: an amdgpu RAS injection on an NVIDIA node"
    assert doc["facts"]["method"] == "kmsg" and node.kmsg.read_text().startswith("<3>NVRM: Xid (PCI:")
    assert results(doc)["methods_tried"] == 1
    assert all(c.read_text() == "" for c in node.debugfs.glob("dri/*/ras/ras_ctrl"))
    only = node.inject(methods=["amdgpu_ras"])
    assert only["status"] == "skipped" and "amdgpu_ras: not tried: an amdgpu RAS injection" in only["reason"]


@pytest.fixture
def fake_nvidia_smi(tmp_path, monkeypatch):
    """nvidia-smi answering with `out` and exit `rc`; every call's argv is appended to calls."""
    bindir = tmp_path / "nbin"
    bindir.mkdir()
    calls = tmp_path / "nvidia-smi.calls"
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))

    def make(out, rc=0):
        tool(bindir, "nvidia-smi", 'echo "$@" >> %s\nprintf "%s"\nexit %d\n' % (calls, out, rc))
        return calls
    return make


def verify(tmp_path, **params):
    return run_probe("fault_inject", str(tmp_path / "out"), "r", "n4", variant="verify",
                     params=dict({"mode": "verify", "method": "pcie_bridge_reset", "gpu_index": 2,
                                  "bus_id": "0000:3b:00.0"}, **params))[1]


def test_verify_the_gpu_answers_with_its_bus_id(tmp_path, fake_nvidia_smi):
    calls = fake_nvidia_smi("00000000:3B:00.0\\n")
    doc = verify(tmp_path)
    assert doc["status"] == "ok" and doc["variant"] == "verify"
    assert results(doc) == {"gpu_answers": 1}
    assert doc["facts"]["gpu_reason"] == "GPU 2 answered at 0000:3b:00.0 after the PCIe bridge reset"
    assert calls.read_text().splitlines() == ["-i 2 --query-gpu=pci.bus_id --format=csv,noheader"]


@pytest.mark.parametrize("out,rc,why", [
    ("No devices were found\\n", 6, "nvidia-smi -i 2 exit 6: No devices were found"),
    ("Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost.\\n", 15,
     "nvidia-smi -i 2 exit 15: Unable to determine the device handle for GPU 0000:3B:00.0: GPU is lost."),
    ("00000000:5E:00.0\\n", 0, "GPU 2 is 0000:5e:00.0 now, not the reset GPU 0000:3b:00.0"),
])
def test_verify_the_gpu_does_not_answer(tmp_path, fake_nvidia_smi, out, rc, why):
    fake_nvidia_smi(out, rc)
    doc = verify(tmp_path)
    assert doc["status"] == "ok" and results(doc) == {"gpu_answers": 0}
    assert doc["facts"]["gpu_reason"] == why and doc["facts"]["gpu_bdf"] == "0000:3b:00.0"


def test_verify_without_nvidia_smi_is_a_gpu_that_does_not_answer(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    doc = verify(tmp_path)
    assert results(doc) == {"gpu_answers": 0} and doc["facts"]["gpu_reason"] == "nvidia-smi not found"


@pytest.mark.parametrize("method", ["dcgm", "kmsg", "amdgpu_ras", ""])
def test_verify_after_another_method_has_nothing_to_check(tmp_path, fake_nvidia_smi, method):
    calls = fake_nvidia_smi("00000000:3B:00.0\\n")
    doc = verify(tmp_path, method=method)
    assert doc["status"] == "skipped" and doc["reason"].startswith("nothing to verify: the injection used ")
    assert doc["results"] == [] and not calls.exists()


def test_the_node_record_says_why_it_was_kept_drained(tmp_path):
    reason = "the GPU did not answer after the PCIe bridge reset: reboot the node to get it back"
    params = {"node": "n4", "scheduler": "slurm", "batch": 1, "observer": "n1", "stage": "fault-b1", "xid": 79}
    _, kept = run_probe("fault_injection", str(tmp_path), "r", "n4", params=dict(params, kept_drained=reason))
    assert kept["status"] == "ok" and kept["facts"]["kept_drained"] == reason
    _, resumed = run_probe("fault_injection", str(tmp_path), "r", "n4", params=dict(params, kept_drained=""))
    assert "kept_drained" not in resumed["facts"]


def test_the_controller_judges_the_amd_fault_as_the_xid_of_the_same_fault(tmp_path, monkeypatch):
    """The AMD node's real artifact in a run: an uncorrectable UMC error is judged as XID 48 (WORKFLOW_ECC,
    reports/data/xid.yml amd_ras), never as the role's XID (79), which an AMD node does not get."""
    from test_reliability_grade import CHECKS, T0, fault_docs, make_run

    from reports.phases.reliability import grade as gr
    from reports.phases.reliability import timeline

    doc = Node(tmp_path, monkeypatch).inject(xid=79)
    assert doc["facts"]["method"] == "amdgpu_ras"
    for r in doc["results"]:
        if r["metric"] == "injected_at":
            r["value"] = T0  # on the clock of the observer's samples that fault_docs builds
    docs = [dict(doc, host="n4", run_id="r1") if d.get("probe") == "fault_inject" else d
            for d in fault_docs("n4", detect=30.0, xid=79)]
    (tmp_path / "graded").mkdir()
    run = make_run(tmp_path / "graded", [docs])
    [detect] = gr.grade_detect(CHECKS["reliability.failure_detection"], run, "n4")
    assert detect["status"] == "pass" and detect["observed"].startswith("30.0 s")
    [action] = gr.grade_action(CHECKS["reliability.remediation"], run, "n4")
    assert action["status"] == "pass" and action["observed"] == "drained (XID 48)"
    assert action["expected"].startswith("WORKFLOW_ECC")
    done = timeline.outcome(run, run.artifact("n4", "fault_injection"))
    assert done["facts"]["fault"] == "amdgpu RAS umc ue error (judged as XID 48, the same fault)"
