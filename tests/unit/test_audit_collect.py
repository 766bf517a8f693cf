"""The audit collector: parallel sources with their own timeouts, statuses that say why data is missing, and the
whole probe run against recorded vendor tools (fake nvidia-smi, ibstat, dcgmi ... that print real outputs)."""

import os
import stat
import time
from pathlib import Path

import pytest

from probes.artifact import validate
from probes.audit.collect import Collector
from probes.cli import run_probe

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "audit"


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def test_command_statuses(tmp_path):
    c = Collector(str(tmp_path), default_timeout=5)
    assert c.cmd("a", ["true"]).rc == 0 and c.sources["a"]["status"] == "ok"
    assert c.cmd("b", ["no-such-tool-xyz", "--version"]).missing and c.sources["b"]["status"] == "missing"
    c.cmd("c", ["sh", "-c", "echo 'dmesg: read kernel buffer failed: Operation not permitted' >&2; exit 1"])
    assert c.sources["c"]["status"] == "not_permitted" and "Operation not permitted" in c.sources["c"]["reason"]
    c.cmd("d", ["sh", "-c", "echo broken >&2; exit 3"])
    assert c.sources["d"] == {"status": "error", "reason": "sh exit 3: broken", "rc": 3,
                              "duration_s": c.sources["d"]["duration_s"]}


def test_a_hung_command_times_out_and_leaves_no_process(tmp_path):
    c = Collector(str(tmp_path))
    pids = tmp_path / "pids"
    t0 = time.monotonic()
    res = c.cmd("hang", ["sh", "-c", "echo $$ > %s; sleep 30 & echo $! >> %s; wait" % (pids, pids)], timeout=0.5)
    assert time.monotonic() - t0 < 10
    assert res.timed_out and c.sources["hang"]["status"] == "timeout"
    deadline = time.monotonic() + 5
    left = [int(p) for p in pids.read_text().split()]
    while any(_alive(p) for p in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in left)


def test_sections_run_in_parallel_and_a_broken_one_is_data(tmp_path):
    c = Collector(str(tmp_path))

    def slow(col):
        col.cmd("sleep_%s" % id(col), ["sleep", "0.6"])
        return {"ok": True}

    def broken(col):
        raise RuntimeError("parser bug")

    t0 = time.monotonic()
    out = c.run_all([("s1", slow), ("s2", slow), ("s3", slow), ("bad", broken)], workers=4, deadline_s=30)
    took = time.monotonic() - t0
    assert out == {"s1": {"ok": True}, "s2": {"ok": True}, "s3": {"ok": True}}
    assert c.sources["section:bad"]["status"] == "error" and "parser bug" in c.sources["section:bad"]["reason"]
    assert took < 1.6  # three 0.6 s sections side by side, not one after the other


def test_raw_files_never_look_like_artifacts(tmp_path):
    c = Collector(str(tmp_path))
    assert c.save_raw("findmnt.json", "{}") == "audit.findmnt.json.txt"
    assert c.save_raw("nvidia smi/x.xml", "<x/>") == "audit.nvidia_smi_x.xml"
    assert sorted(os.listdir(tmp_path)) == ["audit.findmnt.json.txt", "audit.nvidia_smi_x.xml"]


def _fake_tools(bindir, nvidia_smi):
    """Vendor tools that print recorded outputs of an H100 node."""
    scripts = {
        "nvidia-smi": nvidia_smi,
        "ibstat": 'cat "%s"\n' % (FIX / "ibstat_h100_ndr.txt"),
        "ibv_devinfo": 'cat "%s"\n' % (FIX / "ibv_devinfo_h100_ndr.txt"),
        "dcgmi": 'case "$1" in\n  --version) echo "dcgmi  version: 3.3.9";;\n'
                 '  diag) cat "%s"; exit 226;;\nesac\n' % (FIX / "dcgmi-diag-r1_h100.json"),
        "nv-fabricmanager": 'cat "%s"\n' % (FIX / "nv-fabricmanager-version.txt"),
        "runc": 'printf "runc version 1.1.12\\ncommit: v1.1.12-0-g51d5e94\\nspec: 1.0.2-dev\\n"\n',
        "dockerd": 'echo "Docker version 27.3.1, build 41ca978"\n',
        "ofed_info": 'echo "MLNX_OFED_LINUX-23.10-1.1.9.0:"\n',
    }
    bindir.mkdir()
    for name, body in scripts.items():
        path = bindir / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


H100_SMI = ('case "$*" in\n'
            '  "-q -x") cat "%s";;\n'
            '  "nvlink -s") cat "%s";;\n'
            '  "nvlink -e") cat "%s";;\n'
            '  *) exit 2;;\nesac\n') % (FIX / "nvidia-smi-q-x_h100.xml", FIX / "nvidia-smi-nvlink-s_h100.txt",
                                       FIX / "nvidia-smi-nvlink-e_h100.txt")


@pytest.fixture
def h100_tools(tmp_path, monkeypatch):
    _fake_tools(tmp_path / "bin", H100_SMI)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    return tmp_path


def test_probe_on_recorded_h100_tools(h100_tools, tmp_path):
    out = tmp_path / "out"
    _, doc = run_probe("audit", str(out), "r1", "gpu-node-17", params={"timeout": 10})
    assert validate(doc) == [] and doc["status"] == "ok"
    f = doc["facts"]
    assert doc["device"] == {"backend": "cuda", "model": "NVIDIA H100 80GB HBM3", "count": 8, "driver": "560.35.03",
                             "torch": None}
    assert len(f["gpu_nvidia"]["gpus"]) == 8 and f["gpu_nvidia"]["nvlink"]["3"]["active"] == 17
    assert f["gpu_nvidia"]["nvlink_errors"]["3"]["replay"] == 412
    assert f["ib_tools"]["ibstat"]["mlx5_0"]["firmware"] == "28.39.2048"
    assert f["health"]["dcgm_diag"]["failed"] == ["Page Retirement/Row Remap"]
    assert f["tools"]["runc"]["version"] == "1.1.12" and f["tools"]["dcgmi"]["version"] == "3.3.9"
    assert f["tools"]["ofed_info"] == {"version": "23.10-1.1.9.0", "line": "MLNX_OFED_LINUX-23.10-1.1.9.0:", "rc": 0,
                                       "flavour": "MLNX_OFED_LINUX"}
    assert f["nvidia_driver"]["fabricmanager_version"] == "560.35.03"
    assert f["sources"]["nvidia_smi"]["status"] == "ok" and f["sources"]["dcgm_diag"]["status"] == "ok"
    assert f["sources"]["metadata"] == {"status": "not_applicable",
                                        "reason": "audit_probe_metadata is false: the metadata endpoint was not probed"}
    assert "audit.nvidia-smi-q.xml" in doc["raw"] and not [r for r in doc["raw"] if r.endswith(".json")]
    assert (out / "audit.nvidia-smi-q.xml").read_text() == (FIX / "nvidia-smi-q-x_h100.xml").read_text()
    assert sorted(os.listdir(out)) == sorted(doc["raw"] + ["audit.json"])
    metrics = {(r["metric"], r["labels"].get("status")): r["value"] for r in doc["results"]}
    assert metrics[("sources_total", None)] == len(f["sources"])
    assert metrics[("collector_wall_s", None)] < 60


def test_driver_not_loaded_exit_9(tmp_path, monkeypatch):
    body = 'cat "%s"\nexit 9\n' % (FIX / "nvidia-smi_exit9_driver_not_loaded.txt")
    _fake_tools(tmp_path / "bin", body)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path / "bin", os.environ["PATH"]))
    _, doc = run_probe("audit", str(tmp_path / "out"), "r1", "gpu-node-3", params={"dcgm_diag": "False"})
    nv = doc["facts"]["gpu_nvidia"]
    assert nv["tool"] is True and nv["rc"] == 9 and "couldn't communicate with the NVIDIA driver" in nv["error"]
    assert doc["facts"]["sources"]["nvidia_smi"]["status"] == "error"
    assert doc["facts"]["sources"]["nvidia_smi"]["reason"].startswith("nvidia-smi exit 9: NVIDIA-SMI has failed")
    assert doc["facts"]["sources"]["dcgm_diag"]["status"] == "not_applicable"  # "False" from a template is false
    assert doc["device"]["backend"] == "cpu" and doc["status"] == "ok"


def test_tools_missing_is_data_not_failure(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("python3", "sh", "cat"):
        os.symlink("/usr/bin/" + tool if os.path.exists("/usr/bin/" + tool) else "/bin/" + tool, bindir / tool)
    monkeypatch.setenv("PATH", str(bindir))
    _, doc = run_probe("audit", str(tmp_path / "out"), "r1", "bare", params={})
    src = doc["facts"]["sources"]
    assert doc["status"] == "ok"
    for name in ("nvidia_smi", "ibstat", "packages", "findmnt"):
        assert src[name]["status"] == "missing", name
    assert src["mounts"]["status"] == "ok"  # /proc/self/mounts when findmnt is missing
    assert doc["facts"]["storage"]["mounts"]


def test_a_configless_slurm_node_reads_slurmds_cached_config(tmp_path, monkeypatch):
    """A configless compute node (slurmd --conf-server) keeps slurmd's copy at /run/slurm/conf/slurm.conf (Slurm >=
    22.05), where scontrol finds it: it is a Slurm node, not 'no Slurm'. The file is the real slurm.conf fixture."""
    from probes.audit import sched as audit_sched
    cached = "/run/slurm/conf/slurm.conf"
    real_exists, real_read = os.path.exists, audit_sched.read
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol, no srun here: the file alone
    monkeypatch.setattr(audit_sched.os.path, "exists",
                        lambda p: p == cached or (not str(p).startswith(("/etc/slurm", "/usr/local/etc/slurm",
                                                                         "/run/slurm")) and real_exists(p)))
    monkeypatch.setattr(audit_sched, "read", lambda p, *a: (FIX / "slurm.conf_flat_topology").read_text()
                        if p == cached else real_read(p, *a))
    c = Collector(str(tmp_path))
    facts = audit_sched.collect(c)
    assert facts["slurm_conf"] == cached and facts["source"] == "slurm.conf"
    assert c.sources["slurm"]["status"] == "ok"


def test_a_configless_slurm_node_before_22_05_reads_slurmds_conf_cache(tmp_path, monkeypatch):
    """Before Slurm 22.05 slurmd kept its configless copy only in <SlurmdSpoolDir>/conf-cache (no /run/slurm/conf
    link): the default spool's conf-cache/slurm.conf is read as the node's slurm.conf."""
    from probes.audit import sched as audit_sched
    cached = "/var/spool/slurmd/conf-cache/slurm.conf"
    real_exists, real_read = os.path.exists, audit_sched.read
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(audit_sched.os.path, "exists",
                        lambda p: p == cached or (not str(p).startswith(("/etc/slurm", "/usr/local/etc/slurm",
                                                                         "/run/slurm", "/var/spool/slurmd"))
                                                  and real_exists(p)))
    monkeypatch.setattr(audit_sched, "read", lambda p, *a: (FIX / "slurm.conf_flat_topology").read_text()
                        if p == cached else real_read(p, *a))
    c = Collector(str(tmp_path))
    facts = audit_sched.collect(c)
    assert facts["slurm_conf"] == cached and facts["source"] == "slurm.conf"
    assert c.sources["slurm"]["status"] == "ok"
