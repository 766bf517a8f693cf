"""The audit over real SSH on the 4-host test cluster (every check for every host, drift found by name, nothing
changed on the nodes). On this machine through inventories/local.ini under --check: test_local_demo.py."""

import csv
import json
import shutil
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import BIN, ROOT, ansible_env, read_journal, run_dirs, run_playbook, start_playbook

from reports.grading import load_rubric

PLANTED_NCCL = "/run/clustermax-test/nccl.conf"
AUDIT_IDS = {c["id"] for c in load_rubric()["checks"] if c["id"].startswith("audit.")}

# What a node looks like to someone who wants to know whether the audit changed it: the files the audit reads in
# /etc, the host's private /run, /tmp and /dev/shm, the kernel settings it reads, and the processes of the host.
SNAPSHOT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from probes.audit.system import SYSCTLS

def entry(path):
    st = os.lstat(path)
    return [st.st_mtime_ns, st.st_size, st.st_mode]

def tree(root):
    out = {}
    if not os.path.exists(root):
        return out
    out[root] = entry(root) if not os.path.isdir(root) else None
    for dirpath, dirs, files in os.walk(root):
        # the run's own working directory is made by preflight and removed by cleanup, not by the audit; the
        # checkout (bound into hosts when it lies under /tmp) holds the harness's logs, which sshd writes
        dirs[:] = [d for d in dirs if not d.startswith("clustermax-assess-")
                   and os.path.join(dirpath, d) != sys.argv[1]]
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            try:
                out[path] = entry(path)
            except OSError:
                pass
    return out

files = {}
for root in ("/etc/ssh", "/etc/nccl.conf", "/etc/sudoers", "/etc/sudoers.d", "/etc/environment", "/etc/profile.d",
             "/etc/fstab", "/etc/login.defs", "/etc/sysctl.conf", "/etc/sysctl.d", "/etc/modprobe.d", "/etc/security",
             "/etc/passwd", "/etc/group", "/etc/shadow", "/etc/os-release", "/run", "/tmp", "/dev/shm"):
    files.update(tree(root))
sysctl = {}
for key in list(SYSCTLS) + ["net.ipv4.conf.all.rp_filter", "net.ipv4.conf.all.forwarding", "kernel.hostname"]:
    try:
        sysctl[key] = open("/proc/sys/" + key.replace(".", "/")).read().strip()
    except OSError:
        sysctl[key] = None
mine = os.readlink("/proc/self/ns/net")
skip = {os.getpid(), os.getppid()}
procs = []
for pid in os.listdir("/proc"):
    if not pid.isdigit() or int(pid) in skip:
        continue
    try:
        if os.readlink("/proc/%s/ns/net" % pid) != mine:
            continue
        cmd = open("/proc/%s/cmdline" % pid, "rb").read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        continue
    if cmd.startswith("sshd") or "sshd: " in cmd:
        continue  # SSH sessions come and go with Ansible's connections (ControlPersist), not with the audit
    procs.append("%s %s" % (pid, cmd))
print(json.dumps({"files": files, "sysctl": sysctl, "procs": sorted(procs)}))
"""


def _snapshot(cluster, name):
    res = cluster.exec(name, [sys.executable, "-c", SNAPSHOT, str(ROOT)], timeout=60, check=True)
    return json.loads(res.stdout)


def _rows(run_dir):
    with open(run_dir / "report" / "checks.csv") as fh:
        return [r for r in csv.DictReader(fh) if r["check_id"].startswith("audit.")]


@pytest.fixture(scope="module")
def audit_run(test_cluster, tmp_path_factory):
    """One audit of the 4 hosts, with one host given an NCCL override file and another a password-login sshd."""
    tmp = tmp_path_factory.mktemp("audit")
    names = sorted(h["name"] for h in test_cluster.hosts)
    nccl_host, sshd_host = names[2], names[1]
    sshd_config = test_cluster.host_dir(sshd_host) / "sshd_config"
    original = sshd_config.read_text()
    inventory = test_cluster.write_inventory(str(tmp / "cluster.ini"), python=sys.executable)
    out = tmp / "runs"
    try:
        test_cluster.exec(nccl_host, ["sh", "-c", "mkdir -p %s && printf 'NCCL_IB_HCA=mlx5_0\\nNCCL_DEBUG=INFO\\n' "
                                                  "> %s" % (PLANTED_NCCL.rsplit("/", 1)[0], PLANTED_NCCL)], check=True)
        # sshd -T reads the file; the running sshd is not reloaded, so logins are unaffected
        sshd_config.write_text(original.replace("PasswordAuthentication no", "PasswordAuthentication yes"))
        before = {n: _snapshot(test_cluster, n) for n in names}
        res = run_playbook(inventory, "--tags", "audit", "-e", "assess_output_dir=%s" % out,
                           "-e", json.dumps({"audit_nccl_conf_paths": [PLANTED_NCCL],
                                             # as mpirun's plm_rsh_args carry them (tests/integration/helpers.py)
                                             "audit_ssh_options": ["-F", str(test_cluster.ssh_config_path)]}))
        after = {n: _snapshot(test_cluster, n) for n in names}
        # The same audit as two slices of one run, at the same time, as AWX job slicing starts them: each its own
        # --limit, the same assess_run_id, its own assess_run_slice; each merges the run at its end.
        sliced_out, sliced_id = tmp / "sliced", "sliced-%s" % uuid.uuid4().hex[:8]
        slices = {name: start_playbook(
            inventory, "--tags", "audit", "--limit", ",".join(part),
            "-e", json.dumps({"assess_output_dir": str(sliced_out), "assess_run_id": sliced_id,
                              "assess_run_slice": name, "audit_nccl_conf_paths": [PLANTED_NCCL],
                              "audit_ssh_options": ["-F", str(test_cluster.ssh_config_path)]}))
            for name, part in (("s1", names[:2]), ("s2", names[2:]))}
        sliced = {name: (proc.communicate(timeout=600)[0], proc.returncode) for name, proc in slices.items()}
    finally:
        sshd_config.write_text(original)
        test_cluster.exec(nccl_host, ["rm", "-rf", PLANTED_NCCL.rsplit("/", 1)[0]])
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    [run_dir] = run_dirs(out)
    [sliced_dir] = run_dirs(sliced_out)
    return {"names": names, "nccl_host": nccl_host, "sshd_host": sshd_host, "run_dir": run_dir,
            "rows": _rows(run_dir), "before": before, "after": after, "sliced": sliced, "sliced_dir": sliced_dir}


@pytest.mark.cluster
def test_every_check_for_every_host_in_one_round_trip(audit_run):
    run_dir, names = audit_run["run_dir"], audit_run["names"]
    per_host = defaultdict(list)
    for r in audit_run["rows"]:
        per_host[r["host"]].append(r)
    assert sorted(per_host) == names
    for name in names:
        ids = [r["check_id"] for r in per_host[name]]
        assert len(ids) == len(set(ids)) and set(ids) == AUDIT_IDS and len(AUDIT_IDS) >= 100
        assert all(r["reason"] for r in per_host[name] if r["status"] in ("skip", "error"))
        doc = json.loads((run_dir / "artifacts" / name / "audit.json").read_text())
        assert doc["status"] == "ok" and doc["host"] == name and doc["facts"]["collector"]["root"] is True
        # measured inside its own host: its own address, its own sshd
        assert doc["facts"]["security"]["sshd_config"].endswith("/nodes/%s/sshd_config" % name)
        assert doc["facts"]["procs"]["listeners"][0]["port"] == 22
    by = {(r["check_id"], r["host"]): r for r in audit_run["rows"]}
    assert {by[("audit.storage.root_rw", n)]["status"] for n in names} == {"pass"}
    assert {by[("audit.sec.metadata", n)]["reason"] for n in names} == {
        "not applicable: audit_probe_metadata is false: the metadata endpoint was not probed"}
    # one probe task per host: the whole survey came back in one SSH round trip
    journal = read_journal(run_dir)
    probe_lines = [line for line in journal if line.get("task", "").endswith("Audit | survey the node (read-only)")]
    assert sorted(line["host"] for line in probe_lines) == names
    assert all(line["status"] == "ok" for line in probe_lines)


@pytest.mark.cluster
def test_the_odd_hosts_are_named(audit_run):
    by = {(r["check_id"], r["host"]): r for r in audit_run["rows"]}
    names, nccl_host, sshd_host = audit_run["names"], audit_run["nccl_host"], audit_run["sshd_host"]
    nccl = {n: by[("audit.consistency.nccl", n)] for n in names}
    assert nccl[nccl_host]["status"] == "warn" and "NCCL_IB_HCA" in nccl[nccl_host]["reason"]
    assert "differs from 3 of 4 hosts" in nccl[nccl_host]["reason"]
    assert [nccl[n]["status"] for n in names if n != nccl_host] == ["pass"] * 3
    sshd = {n: by[("audit.consistency.sshd", n)] for n in names}
    assert sshd[sshd_host]["status"] == "warn" and "passwordauthentication" in sshd[sshd_host]["reason"]
    assert [sshd[n]["status"] for n in names if n != sshd_host] == ["pass"] * 3
    assert [by[("audit.sec.ssh_password_auth", n)]["status"] for n in names] == [
        "fail" if n == sshd_host else "pass" for n in names]
    every = {n: by[("audit.consistency.all_facts", n)] for n in names}
    assert "nccl.files.%s.NCCL_IB_HCA" % PLANTED_NCCL in every[nccl_host]["observed"]
    assert "security.sshd.passwordauthentication" in every[sshd_host]["observed"]
    for n in names:
        if n not in (nccl_host, sshd_host):
            assert "NCCL_IB_HCA" not in every[n]["observed"] and "passwordauthentication" not in every[n]["observed"]
    md = (audit_run["run_dir"] / "report" / "report.md").read_text()
    assert "### Drift between hosts" in md
    assert "| Same NCCL settings on every host | %s |" % nccl_host in md


@pytest.mark.cluster
def test_two_slices_of_one_run_merge_into_the_checks_of_the_unsliced_run(audit_run):
    """AWX job slicing, as --limit runs sharing a run id: the merged run has every host once, and the same check
    rows with the same statuses as the unsliced audit of the same hosts, the cross-host ones included."""
    for name, (output, rc) in audit_run["sliced"].items():
        assert rc == 0, (name, output[-4000:])
    run = audit_run["sliced_dir"]
    assert sorted(p.name for p in (run / "slices").iterdir()) == ["s1", "s2"]
    names = audit_run["names"]
    assert sorted(p.name for p in (run / "artifacts").iterdir()) == names
    for name, part in (("s1", names[:2]), ("s2", names[2:])):
        assert sorted(p.name for p in (run / "slices" / name / "artifacts").iterdir()) == part
    summary = json.loads((run / "run.json").read_text())
    assert summary["run_id"] == run.name and summary["hosts"] == names and not summary["interrupted"]
    assert [(s["slice"], s["hosts"], s["ended"]) for s in summary["slices"]] == [
        ("s1", names[:2], True), ("s2", names[2:], True)]
    assert {line["slice"] for line in read_journal(run)} == {"s1", "s2"}
    merged = {(r["check_id"], r["host"]): r["status"] for r in _rows(run)}
    whole = {(r["check_id"], r["host"]): r["status"] for r in audit_run["rows"]}
    assert set(merged) == set(whole)
    # but the load average: the test hosts' is this machine's, and the two slices ran at once on its two cores
    for key in [k for k in merged if k[0] == "audit.health.load"]:
        merged.pop(key), whole.pop(key)
    assert {k: (merged[k], whole[k]) for k in merged if merged[k] != whole[k]} == {}
    # the cross-host checks judged the four hosts together: the planted NCCL override is the odd one of 4, not of
    # its own slice's 2
    by = {(r["check_id"], r["host"]): r for r in _rows(run)}
    assert "differs from 3 of 4 hosts" in by[("audit.consistency.nccl", audit_run["nccl_host"])]["reason"]


@pytest.mark.cluster
def test_a_host_in_two_slices_is_refused_naming_it(audit_run, tmp_path):
    run = tmp_path / audit_run["sliced_dir"].name
    shutil.copytree(audit_run["sliced_dir"], run)
    host = audit_run["names"][0]
    shutil.copytree(run / "slices" / "s1" / "artifacts" / host, run / "slices" / "s2" / "artifacts" / host)
    res = subprocess.run([str(BIN / "assess-report"), "merge", str(run)], capture_output=True, text=True)
    assert res.returncode == 2
    assert "host %s is in slices s1 and s2" % host in res.stderr, res.stderr


@pytest.mark.cluster
def test_every_node_reaches_the_next_over_ssh(audit_run, test_cluster):
    """audit.sec.ssh_between_nodes: a ring over the inventory's addresses, each hop a real BatchMode login with the
    launcher's own ssh options; no known_hosts entry is written (test_the_audit_changed_nothing_on_the_nodes)."""
    by = {(r["check_id"], r["host"]): r for r in audit_run["rows"]}
    names = audit_run["names"]
    ip = {h["name"]: h["ip"] for h in test_cluster.hosts}
    for i, name in enumerate(names):
        row = by[("audit.sec.ssh_between_nodes", name)]
        assert row["status"] == "pass", row
        assert row["observed"] == "%s -> %s as root: ok" % (name, ip[names[(i + 1) % len(names)]])
        doc = json.loads((audit_run["run_dir"] / "artifacts" / name / "audit.json").read_text())
        hop = doc["facts"]["ssh_peer"]
        assert hop["rc"] == 0 and hop["options"] == ["-F", str(test_cluster.ssh_config_path)]
    # one row per check and host, and the probe's "does it work" checks that need what this cluster lacks say why
    for check, why in (("audit.slurm.job_gpu_binding", "not applicable: needs Slurm and GPUs on the host"),
                       ("audit.sw.enroot_import", "not applicable: enroot is not installed on this node")):
        assert {by[(check, n)]["reason"] for n in names} == {why}, check


@pytest.mark.cluster
def test_the_audit_changed_nothing_on_the_nodes(audit_run):
    for name in audit_run["names"]:
        before, after = audit_run["before"][name], audit_run["after"][name]
        assert before["sysctl"] == after["sysctl"], name
        changed = sorted(p for p in set(before["files"]) | set(after["files"])
                         if before["files"].get(p) != after["files"].get(p))
        assert changed == [], (name, changed[:10])
        assert before["procs"] == after["procs"], name  # nothing started and left behind, nothing stopped
        assert any("/etc/ssh" in p for p in before["files"]) and len(before["sysctl"]) > 10


CMAX_SPEC = "clustermax==0.2.1"


def _cmax_venv():
    """The reference CLI in a venv of its own under .cache (made once; its pins are not ours)."""
    venv = ROOT / ".cache" / "cmax-0.2.1"
    cmax = venv / "bin" / "cmax"
    if not cmax.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", CMAX_SPEC], check=True, timeout=600,
                       capture_output=True)
    return cmax


@pytest.fixture(scope="module")
def cmax_beside_ours(test_cluster, audit_run, tmp_path_factory):
    """`cmax audit --vm -y` on the first host, inside it (its network namespace: the report's "Server Location"
    lookup finds no DNS and no route out, so nothing leaves the test cluster), then `assess-report compare-cmax`."""
    tmp = tmp_path_factory.mktemp("cmax")
    name = audit_run["names"][0]
    home = Path(test_cluster.state_dir) / "cmax-home"  # cmax keeps its own output under $HOME/.clustermax
    try:
        res = test_cluster.exec(name, ["env", "HOME=%s" % home, str(_cmax_venv()), "audit", "--vm", "-y"],
                                timeout=300)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    output = tmp / "cmax.txt"
    output.write_text(res.stdout)
    compared = subprocess.run([str(BIN / "assess-report"), "compare-cmax", str(audit_run["run_dir"]), str(output),
                               "--json"], capture_output=True, text=True, timeout=300, env=ansible_env())
    return {"host": name, "cmax": res.stdout, "compared": compared}


@pytest.mark.cluster
def test_the_reference_cli_agrees_or_says_why(cmax_beside_ours, audit_run):
    """Every check cmax 0.2.1 printed on the host is mapped; every one it judged agrees with ours or carries the
    documented reason we judge it differently; the comparison is in the report."""
    from reports import reference_cmax

    res = cmax_beside_ours["compared"]
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    doc = json.loads(res.stdout)
    report = reference_cmax.read_report(cmax_beside_ours["cmax"])
    assert report["host"] == cmax_beside_ours["host"] == doc["host"]
    assert len(doc["checks"]) == len(report["checks"]) == 59
    verdicts = {line["cmax_id"]: line["verdict"] for line in doc["checks"]}
    assert "not mapped" not in verdicts.values() and "disagree" not in verdicts.values(), doc["counts"]
    judged = [line for line in doc["checks"] if line["cmax"] != "skip"]
    assert all(line["verdict"] in ("agree", "differs", "not implemented") for line in judged)
    assert all(line["why"] for line in judged if line["verdict"] != "agree")
    # the checks this machine kind gives real verdicts on, both sides
    assert verdicts["securityVersions.cudaToolkit.status"] == "agree"  # 13.0 below 13.1, wherever it is installed
    assert verdicts["software.perf.perfEventParanoid"] == "agree"
    assert verdicts["access.userManagement"] == "agree"
    assert doc["counts"].get("agree", 0) >= 6
    md = (audit_run["run_dir"] / "report" / "report.md").read_text()
    assert "Reference CLI (cmax audit) beside ours: %s" % cmax_beside_ours["host"] in md
    assert "| securityVersions.cudaToolkit.status |" in md
    kept = audit_run["run_dir"] / "reference" / "cmax" / ("%s.txt" % cmax_beside_ours["host"])
    assert kept.read_text() == cmax_beside_ours["cmax"]
