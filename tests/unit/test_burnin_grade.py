"""Burn-in summary (node side), grading and report section (controller side), from timeline files as the runner
writes them: a GPU node whose samples come from the recorded nvidia-smi stream, a CPU node, an interrupted node."""

import json
import os
import re
import time
from pathlib import Path

import pytest

from probes.artifact import Artifact, validate, write_json_atomic
from probes.burnin import runner as soak_runner
from probes.burnin import sampler
from probes.burnin import smi as soak_smi
from probes.burnin import summary as soak_summary
from probes.common import device
from probes.common import kernel_log as soak_kernel
from reports.grading import grade, load_rubric
from reports.load import load_run
from reports.phases.burnin import grade as gb
from reports.phases.burnin import section
from reports.render import markdown

FIX = Path(__file__).resolve().parents[1] / "fixtures"
CHECKS = {c["id"]: c for c in load_rubric()["checks"] if c["id"].startswith("burnin.")}
T0 = None  # set as each test starts (below), never at collection: a long suite runs this file minutes later


@pytest.fixture(autouse=True)
def _t0():
    """The interrupted node's timeline ends now, 100 s after its start."""
    global T0
    T0 = float(int(time.time()) - 100)


def _write(path, records):
    with open(path, "w") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")


def node(tmp_path, host, gpu=False, done=True, xid_at=None, tflops=None, coll_error=None, kernel=None, monitor=None,
         coll_bw=None, device=None, gemm=None, coll=None, exits=None, cfg_extra=None, gemm_until=None,
         done_extra=None, state=None, log=None):
    """A burn-in artifact summarised from timeline files, as poll/stop make it. monitor: the monitor's records (as
    probes.burnin.sampler.Monitor wrote them) instead of the recorded nvidia-smi stream; device: the device block the
    start found (runner.start keeps it in the run's configuration); gemm_until: {worker: how many of its samples it
    wrote} (a worker that died); gemm: records appended to the GEMM workers' timeline; coll: the collective loop's
    records instead of rank 0's samples; exits: the workers' exit codes in the done file; cfg_extra: what the
    runner added to the configuration (t_load, the moved deadline); done_extra: what else its done file holds
    (exit_t: when it saw each worker's exit); state: the monitor's facts, which the runner writes to its state file
    as the run starts (gpu_telemetry, kmsg); log: the lines the workers printed (the runner's log file)."""
    out = tmp_path / ("node-%s" % host)
    out.mkdir()
    p = soak_runner.paths(str(out), "burnin", None)
    cfg = {"t_start": T0, "deadline": T0 + 60, "duration_s": 60.0, "interval": 5.0, "grace_s": 30,
           "marker": soak_runner.marker("r1", host, "burnin"), "gemm": True, "collectives": ["alltoall"],
           "fio": None}
    if device:
        cfg["device"] = device
    cfg.update(cfg_extra or {})
    if monitor is None and gpu:
        monitor = []
        lines = (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
        samples = soak_smi.sample_stream(lines, 5.0)
        base = samples[0]["t"]
        for k in range(4):
            gs = [dict(s, t=T0 + 5 * (k + 1)) for s in samples if s["t"] == base + 5 * k]
            monitor.append({"type": "monitor", "t": T0 + 5 * (k + 1), "gpus": gs, "nics": {"eth0": {"rx_bytes": 10}}})
    elif monitor is None:
        monitor = [{"type": "monitor", "t": T0 + 5 * (k + 1), "cpu_util_pct": 99.0, "nics": {}} for k in range(4)]
    _write(p["monitor"], monitor)
    if state is not None:
        with open(p["state"], "w") as fh:
            json.dump({"monitor": state, "pid": 4242}, fh)
    tflops = tflops or [0.02, 0.02, 0.019, 0.021]
    workers = [0, 1] if gpu else [0]
    _write(p["gemm"], [{"type": "gemm", "worker": w, "gpu": w if gpu else None, "device": "cuda:%d" % w if gpu
                        else "cpu", "dtype": "bf16" if gpu else "fp32", "size": 8192 if gpu else 512,
                        "t": T0 + 5 * (k + 1), "tflops": v, "iters": 10, "errors": 0}
                       for w in workers for k, v in enumerate(tflops) if k < (gemm_until or {}).get(w, len(tflops))]
          + (gemm or []))
    colls = [{"type": "coll", "rank": 0, "world": 4, "collective": "alltoall", "size_bytes": 1 << 20,
              "t": T0 + 5 * (k + 1), "busbw_gbps": bw, "busbw_min_gbps": 0.75 * bw, "busbw_max_gbps": 1.25 * bw,
              "lat_us": 900.0, "wrong": 0, "checks": 1} for k, bw in enumerate(coll_bw or [0.2] * 4)]
    if coll_error:
        colls.append({"type": "error", "kind": coll_error, "rank": 0, "t": T0 + 30, "error": "gloo timed out"})
    _write(p["coll"], colls if coll is None else coll)
    if xid_at is not None:
        line = "NVRM: Xid (PCI:0000:18:00): 79, pid=1912, name=python3, GPU has fallen off the bus."
        _write(p["kernel"], [soak_kernel.event(line, T0 + xid_at, 3, 7),
                             soak_kernel.event("NVRM: Xid (PCI:0000:18:00): 79, pid=1912, name=python3, again",
                                               T0 + xid_at + 0.01, 3, 8)])
    if kernel is not None:  # [(seconds from the start, kernel message)] as the sampler writes them
        _write(p["kernel"], [e for e in (soak_kernel.event(m, T0 + at, 3, i) for i, (at, m) in enumerate(kernel))
                             if e])
    if log is not None:
        with open(p["log"], "w") as fh:
            fh.write("\n".join(log) + "\n")
    if done:
        with open(p["done"], "w") as fh:
            json.dump(dict({"ended_by": "completed", "t_start": T0, "t_end": T0 + 60.2, "exits": exits or {}},
                           **(done_extra or {})), fh)
    art = Artifact("burnin", "r1", host)
    art.device["backend"] = "cuda" if gpu else "cpu"
    soak_summary.summarize(art, cfg, p)
    doc = art.to_dict()
    assert validate(doc) == []
    return doc, out


def make_run(tmp_path, nodes):
    run_dir = tmp_path / "run"
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "assess_run.json").write_text(json.dumps({"id": "r1", "provider": "p",
                                                        "hosts": [d["host"] for d, _ in nodes]}))
    for doc, out in nodes:
        host_dir = run_dir / "artifacts" / doc["host"]
        write_json_atomic(str(host_dir / "burnin.json"), doc)
        for name in doc["raw"]:
            (host_dir / name).write_text((out / name).read_text())
    return load_run(str(run_dir))


def test_summary_numbers_from_the_timelines(tmp_path):
    doc, _ = node(tmp_path, "g1", gpu=True, xid_at=12.5, tflops=[100.0, 98.0, 90.0, 80.0])
    m = {(r["metric"], r["labels"].get("gpu")): r["value"] for r in doc["results"]}
    assert doc["facts"]["state"] == "done" and doc["facts"]["ended_by"] == "completed"
    assert m[("gemm_degradation_pct", 0)] == 20.0 and m[("gemm_tflops_first", 0)] == 100.0
    assert m[("gpu_throttle_episodes", 1)] == 1 and m[("gpu_throttle_episodes", 0)] == 0
    assert m[("gpu_temp_max_c", 1)] == 75 and m[("gpu_power_limit_w", 0)] == 700.0
    assert m[("gpu_sm_clock_first_mhz", 1)] > m[("gpu_sm_clock_last_mhz", 1)]
    assert m[("kernel_xid_count", None)] == 1  # two lines of one fault
    [ev] = [r for r in doc["results"] if r["metric"] == "kernel_event"]
    assert ev["value"] == T0 + 12.5 and ev["labels"]["at_s"] == 12.5 and ev["labels"]["lines"] == 2
    assert doc["raw"] == ["burnin.monitor.jsonl", "burnin.kernel.jsonl", "burnin.gemm.jsonl", "burnin.coll.jsonl"]


def test_grading_gpu_node_cpu_node_and_interrupted_node(tmp_path):
    nodes = [node(tmp_path, "g1", gpu=True, xid_at=12.5, tflops=[100.0, 98.0, 90.0, 80.0]),
             node(tmp_path, "c1"),
             node(tmp_path, "c2", done=False, coll_error="hang")]
    run = make_run(tmp_path, nodes)
    rows = grade(run, {"checks": list(CHECKS.values())})
    by = {}
    for r in rows:
        by.setdefault((r["check_id"], r["host"]), []).append(r)
    assert {c for c, _ in by} == set(CHECKS) and {h for _, h in by} == {"g1", "c1", "c2"}
    # XID: fails on the GPU node, with its line and time from the start
    [xid] = [r for r in by[("burnin.kernel_errors", "g1")] if r["subject"] == "burnin XID 79"]
    assert xid["status"] == "fail" and xid["observed"].startswith("XID 79 at t+12.5 s: NVRM: Xid (PCI:0000:18:00): 79")
    assert [r["status"] for r in by[("burnin.kernel_errors", "c1")] if r["subject"] == "burnin"] == ["pass"]
    # degradation 20 % fails; the CPU node's (0.02 -> 0.021) passes
    assert {r["status"] for r in by[("burnin.gemm_degradation", "g1")]} == {"fail"}
    assert [r["status"] for r in by[("burnin.gemm_degradation", "c1")]] == ["pass"]
    # GPU checks: GPU 1 slowed by heat; CPU nodes skip with the reason
    throttle = {r["subject"]: r for r in by[("burnin.throttling", "g1")]}
    assert throttle["gpu 1"]["status"] == "fail" and throttle["gpu 0"]["status"] == "pass"
    assert "1 episode(s)" in throttle["gpu 1"]["observed"] and "power cap 90% of the time" in throttle["gpu 0"][
        "observed"]
    assert [r["status"] for r in by[("burnin.temperature", "g1")]] == ["pass", "pass"]
    assert [r["status"] for r in by[("burnin.power", "g1")]] == ["pass", "pass"]
    clock = {r["subject"]: r for r in by[("burnin.clock_drop", "g1")]}
    assert clock["gpu 1"]["status"] == "fail" and clock["gpu 0"]["status"] in ("pass", "warn")
    for check in ("burnin.throttling", "burnin.clock_drop", "burnin.temperature", "burnin.power"):
        [row] = by[(check, "c1")]
        assert row["status"] == "skip" and row["reason"].startswith("no GPU on this node (cpu backend)")
    # interrupted: partial timeline, graded as far as it goes; a hang fails the collectives
    [done] = [r for r in by[("burnin.completed", "c2")] if r["subject"] == "burnin"]
    assert done["status"] == "fail" and done["observed"].startswith("interrupted: timeline ends at")
    hang = [r for r in by[("burnin.collectives", "c2")] if r["subject"] == "burnin collectives"]
    assert hang and hang[0]["status"] == "fail" and "hang: gloo timed out" in hang[0]["reason"]
    coll = [r for r in by[("burnin.collectives", "c1")] if r["subject"] == "burnin alltoall"]
    assert coll[0]["status"] == "pass" and "busbw min 0.150 / avg 0.200 / max 0.250 GB/s" in coll[0]["observed"]
    # parts that did not run skip with the reason, for every host
    skipped = [r for r in by[("burnin.completed", "c1")] if r["subject"] == "fabric_soak"]
    assert skipped[0]["status"] == "skip" and skipped[0]["reason"] == "probe fabric_soak did not run on this host"


def _capture(name, start=10.0):
    """A dmesg capture of tests/fixtures/kmsg as [(t+ s, message)]: its own spacing kept, moved to start."""
    msgs = soak_kernel.dmesg_messages((FIX / "kmsg" / name).read_text())
    return [(start + t - msgs[0][0], m) for t, m in msgs]


def test_kernel_records_graded_fatal_sxid_fails_non_fatal_warns_gpu_failures_fail(tmp_path):
    kmsg = [line.split(";", 1)[1] for line in (FIX / "kmsg" / "burnin_kmsg_records.txt").read_text().splitlines()
            if ";" in line]
    journal = (FIX / "kmsg" / "journalctl_fallen_off_bus_no_xid.txt").read_text().splitlines()
    fallen = "\n".join([journal[1].split("kernel: ", 1)[1]] + [ln.strip() for ln in journal[2:4]])
    aer = (FIX / "kmsg" / "journalctl_aer_correctable_uncorrectable_fatal.txt").read_text().splitlines()
    kernel = (_capture("dmesg_sxid20034_record.txt", 10.0) + [(20.0 + i * 0.01, m) for i, m in enumerate(kmsg[3:6])]
              + _capture("dmesg_rminitadapter_failed.txt", 30.0) + [(40.0, fallen)]
              + [(50.0, aer[4].split("kernel: ", 1)[1])]
              + [(55.0, "NVRM: Xid (PCI:0000:18:00) 79 GPU has fallen off the bus.")])
    doc, out = node(tmp_path, "g1", gpu=True, kernel=kernel)
    m = {r["metric"]: r["value"] for r in doc["results"] if not r.get("labels")}
    assert (m["kernel_sxid_count"], m["kernel_gpu_init_failed_count"], m["kernel_fallen_off_bus_count"],
            m["kernel_aer_count"], m["kernel_unparsed_count"], m["kernel_xid_count"]) == (2, 1, 1, 1, 1, 0)
    run = make_run(tmp_path, [(doc, out)])
    rows = gb.grade_kernel(CHECKS["burnin.kernel_errors"], run, "g1")
    got = [(r["subject"], r["status"], r["observed"].split(": ", 1)[0]) for r in rows]
    assert got[:5] == [
        ("burnin SXID 20034", "fail", "SXID 20034 (fatal) at t+10.0 s"),
        ("burnin SXID 12028", "warn", "SXID 12028 (non-fatal) at t+20.0 s"),
        ("burnin GPU init failed", "fail", "GPU init failed at t+30.0 s"),
        ("burnin GPU fell off the bus", "fail", "GPU fell off the bus at t+40.0 s"),
        ("burnin AER", "fail", "AER (uncorrected_fatal) at t+50.0 s")]
    assert rows[0]["observed"].endswith("20034, Fatal, Link 30 LTSSM Fault Up")  # the headline, not the Data line
    assert rows[2]["observed"].endswith("RmInitAdapter failed! (0x62:0xffff:1863)")
    assert (rows[5]["status"], rows[5]["subject"]) == ("error", "burnin kernel log")
    assert rows[5]["reason"] == ("/dev/kmsg: a line names an Xid or SXid but could not be read: NVRM: Xid "
                                 "(PCI:0000:18:00) 79 GPU has fallen off the bus.")
    assert len([r for r in rows if r["subject"].startswith("burnin")]) == 6  # the soaks not run: their skip rows


def test_report_section_plots_and_marks_the_xid(tmp_path):
    run = make_run(tmp_path, [node(tmp_path, "g1", gpu=True, xid_at=12.5), node(tmp_path, "c2", done=False)])
    report = tmp_path / "report"
    report.mkdir()
    md = section.render(run, [], str(report))
    assert "**Partial timeline**: interrupted before the end on c2 (burnin)" in md
    assert re.search(r"\| g1 \| burnin \| 12\.5 \| XID \| 79 \| NVRM: Xid \(PCI:0000:18:00\): 79", md)
    assert "| g1 | 0 | 68 | 688 | 700 | 1851 | 1773 | 0 |" in md  # GPU 0: max temp, power, limit, clocks
    assert "| g1 | 1 | 75 | 692 | 700 | 1851 | 1629 | 1 |" in md  # GPU 1: slowed by heat once
    assert re.search(r"\| c2 \| cpu \| \*\*interrupted\*\* at 1\d\d s of 60 s \(partial timeline\) \|", md)
    for png in ("burnin_timeline.png", "burnin_collectives.png"):
        assert (report / png).stat().st_size > 10000 and "(%s)" % png in md
    assert not (report / "burnin_storage.png").exists()


A100 = (FIX / "audit" / "nvidia-smi-q-x_a100_r535_excerpt.xml").read_text()


def _zeroed(xml):
    """The recorded A100 as it read before its errors: every ECC and remapped-row count 0 (the capture's own text
    otherwise)."""
    head, rest = xml.split("<ecc_errors>", 1)
    block, tail = rest.split("</remapped_rows>", 1)
    return head + "<ecc_errors>" + re.sub(r">\d+<", ">0<", block) + "</remapped_rows>" + tail


def _sys_tree(root, counters):
    """A /sys with a physical NIC (device link), a veth and two ConnectX ports; counters: {path: value}."""
    (root / "devices" / "ens1f0np0").mkdir(parents=True, exist_ok=True)
    for path, value in counters.items():
        f = root / "class" / path
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("%d\n" % value)
    link = root / "class" / "net" / "ens1f0np0" / "device"
    if not link.exists():
        link.symlink_to(root / "devices" / "ens1f0np0")


def _monitored(tmp_path, monkeypatch, xml_start, xml_end, changes):
    """The monitor's records of one node: a stand-in nvidia-smi that prints the recorded stream of GPU 0 and the
    given `nvidia-smi -q -x` before and after, and a /sys whose counters change between two samples."""
    bindir, state = tmp_path / "bin", tmp_path / "xml-now"
    bindir.mkdir()
    stream = FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv"
    (bindir / "nvidia-smi").write_text(
        '#!/bin/sh\ncase "$1" in\n  -q) cat "$(cat %s)";;\n  --query-gpu=*) grep " 0, 00000000" %s; exec sleep 30;;\n'
        'esac\n' % (state, stream))
    (bindir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    (tmp_path / "start.xml").write_text(xml_start)
    (tmp_path / "end.xml").write_text(xml_end)
    state.write_text(str(tmp_path / "start.xml"))
    base = {"net/ens1f0np0/statistics/rx_errors": 0, "net/ens1f0np0/statistics/tx_errors": 0,
            "net/ens1f0np0/carrier_changes": 2, "net/veth0/statistics/rx_errors": 0, "net/veth0/carrier_changes": 5,
            "infiniband/mlx5_0/ports/1/counters/symbol_error": 0,
            "infiniband/mlx5_0/ports/1/counters/link_downed": 0,
            "infiniband/mlx5_1/ports/1/counters/symbol_error": 65535,
            "infiniband/mlx5_1/ports/1/counters/link_downed": 1}
    _sys_tree(tmp_path / "sys", base)
    out = tmp_path / "monitor.jsonl"
    mon = sampler.Monitor({"gpu_tool": "nvidia-smi", "interval": 1, "kmsg_path": str(tmp_path / "no-kmsg"),
                           "sys_root": str(tmp_path / "sys")}, str(out), str(tmp_path / "kernel.jsonl"))
    try:
        deadline = time.time() + 10
        while mon.smi.seen < 20 and time.time() < deadline:
            time.sleep(0.05)
        mon.sample()
        _sys_tree(tmp_path / "sys", dict(base, **changes))
        mon.sample()
        state.write_text(str(tmp_path / "end.xml"))
    finally:
        mon.close()
    return sampler.read_jsonl(str(out))


def test_new_ecc_errors_and_link_faults_from_the_monitors_own_readings(tmp_path, monkeypatch):
    """ECC readings before and after the load (the recorded A100 whose counters rose from 0), a physical NIC whose
    carrier changed twice, a veth that changed carrier (containers: no finding), a ConnectX port that counted symbol
    errors and one that went down with a symbol-error counter stuck at its maximum."""
    records = _monitored(tmp_path, monkeypatch, _zeroed(A100), A100, {
        "net/ens1f0np0/carrier_changes": 4, "net/veth0/carrier_changes": 9,
        "infiniband/mlx5_0/ports/1/counters/symbol_error": 12, "infiniband/mlx5_1/ports/1/counters/link_downed": 2})
    assert [r["type"] for r in records] == ["gpu_errors", "monitor", "monitor", "gpu_errors"]
    assert records[-1]["gpus"] == [{"gpu": 0, "pci": "00000000:07:00.0", "ecc_correctable_volatile": 3,
                                    "ecc_uncorrectable_volatile": 1, "ecc_uncorrectable_aggregate": 4,
                                    "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 4,
                                    "remap_pending": False, "remap_failure": False}]
    assert records[2]["nics"]["ens1f0np0"]["carrier_changes"] == 2 and "carrier_changes" not in records[2]["nics"][
        "veth0"]
    assert records[2]["rdma_saturated"] == ["mlx5_1/1:symbol_error"]
    doc, out = node(tmp_path, "g1", gpu=True, monitor=records)
    run = make_run(tmp_path, [(doc, out)])
    ecc = {r["subject"]: r for r in gb.grade_ecc(CHECKS["burnin.ecc"], run, "g1")}
    assert ecc["burnin gpu 0"]["status"] == "fail"
    assert ecc["burnin gpu 0"]["observed"] == (
        "uncorrectable ECC (volatile) +1, uncorrectable ECC (aggregate) +4, rows remapped for uncorrectable errors +4, "
        "correctable ECC (volatile) +3")
    links = {r["subject"]: r for r in gb.grade_links(CHECKS["burnin.link_errors"], run, "g1")}
    assert {k: (v["status"], v["observed"]) for k, v in links.items() if k.startswith("burnin")} == {
        "burnin ens1f0np0": ("fail", "link down/up: 2 carrier change(s), 0 rx/tx error(s)"),
        "burnin mlx5_0/1": ("warn", "symbol_error 12"),
        "burnin mlx5_1/1": ("fail", "link went down 1 time(s)")}


def test_ecc_unchanged_passes_and_an_interrupted_run_skips(tmp_path, monkeypatch):
    records = _monitored(tmp_path, monkeypatch, A100, A100, {})
    doc, out = node(tmp_path, "g1", gpu=True, monitor=records)
    partial, pout = node(tmp_path, "g2", gpu=True, monitor=records[:-1], done=False)
    run = make_run(tmp_path, [(doc, out), (partial, pout)])
    [row] = [r for r in gb.grade_ecc(CHECKS["burnin.ecc"], run, "g1") if r["subject"] == "burnin gpu 0"]
    assert (row["status"], row["observed"]) == ("pass", "no new error (7 counters read before and after)")
    [row] = [r for r in gb.grade_ecc(CHECKS["burnin.ecc"], run, "g2") if r["subject"] == "burnin gpu 0"]
    assert row["status"] == "skip" and row["reason"].startswith("interrupted: the counters are read again after")
    # no change in any counter, but one that sits at its maximum cannot count: a warning, not a pass
    links = [r for r in gb.grade_links(CHECKS["burnin.link_errors"], run, "g1") if r["subject"].startswith("burnin")]
    assert [(r["subject"], r["status"], r["observed"]) for r in links] == [
        ("burnin mlx5_1/1", "warn", "symbol_error at the counter's maximum: what happened during the run is not "
                                    "counted (clear it: perfquery -x -R)")]


def test_amd_ecc_totals_before_and_after_from_amd_smi_or_rocm_smi(tmp_path, monkeypatch):
    """An AMD node: the monitor reads `amd-smi metric --ecc --json` before and after the load (the real R9700
    capture, all 0, then the same with GPU 1's deferred count at 2 and GPU 2's correctable at 5: how a poisoned page
    and corrected errors show in the same output). Without amd-smi, rocm-smi --showrasinfo's totals (the real MI50
    table; its author cut GPU 1, which has no counts)."""
    ecc = FIX / "amd-smi" / "amd-smi_26.2.1_r9700x4_metric_ecc.json"
    later = json.loads(ecc.read_text())
    later["gpu_data"][1]["ecc"]["total_deferred_count"] = 2
    later["gpu_data"][2]["ecc"]["total_correctable_count"] = 5
    (tmp_path / "end.json").write_text(json.dumps(later))
    bindir, state = tmp_path / "bin", tmp_path / "now"
    bindir.mkdir()
    args = tmp_path / "args"
    (bindir / "amd-smi").write_text('#!/bin/sh\necho "$@" >> %s\ncat "$(cat %s)"\n' % (args, state))
    (bindir / "amd-smi").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    state.write_text(str(ecc))
    out = tmp_path / "monitor.jsonl"
    mon = sampler.Monitor({"gpu_tool": "amd-smi", "interval": 1, "kmsg_path": str(tmp_path / "no-kmsg")}, str(out),
                          str(tmp_path / "kernel.jsonl"))
    mon.sample()
    state.write_text(str(tmp_path / "end.json"))
    mon.close()
    records = sampler.read_jsonl(str(out))
    assert args.read_text().splitlines() == ["metric --ecc --json"] * 2
    assert [r["type"] for r in records] == ["gpu_errors", "monitor", "gpu_errors"]
    assert records[0]["source"] == "amd-smi metric --ecc --json" and records[0]["gpus"][0] == {
        "gpu": 0, "pci": None, "ecc_correctable_aggregate": 0.0, "ecc_uncorrectable_aggregate": 0.0,
        "ecc_deferred": 0.0}
    doc, dout = node(tmp_path, "a1", monitor=records, device={"backend": "rocm", "count": 4})
    run = make_run(tmp_path, [(doc, dout)])
    rows = {r["subject"]: (r["status"], r["observed"]) for r in gb.grade_ecc(CHECKS["burnin.ecc"], run, "a1")
            if r["subject"].startswith("burnin")}
    assert rows == {"burnin gpu 0": ("pass", "no new error (3 counters read before and after)"),
                    "burnin gpu 1": ("fail", "deferred (poisoned) ECC +2"),
                    "burnin gpu 2": ("warn", "correctable ECC (total) +5"),
                    "burnin gpu 3": ("pass", "no new error (3 counters read before and after)")}
    # amd-smi gone before the end: the end is not read by rocm-smi instead (other counts), it is an error
    (bindir / "amd-smi").unlink()
    (bindir / "rocm-smi").write_text('#!/bin/sh\ncat "%s"\n' % (FIX / "rocm-smi" / "rocm-smi_showrasinfo_mi50.txt"))
    (bindir / "rocm-smi").chmod(0o755)
    end = sampler.gpu_error_reading("end", "amd-smi", source="amd-smi metric --ecc --json")
    assert end["error"] == "amd-smi not found" and "gpus" not in end
    # a node with rocm-smi only (device.describe says gpu_tool none there): its RAS table's totals, start and end
    (tmp_path / "kfd").write_text("")
    out2 = tmp_path / "monitor2.jsonl"
    mon = sampler.Monitor({"gpu_tool": "none", "interval": 1, "kmsg_path": str(tmp_path / "no-kmsg"),
                           "kfd_path": str(tmp_path / "kfd")}, str(out2), str(tmp_path / "kernel2.jsonl"))
    mon.close()
    assert [r.get("source") for r in sampler.read_jsonl(str(out2))] == ["rocm-smi --showrasinfo"] * 2
    rec = sampler.gpu_error_reading("start", "amd-smi")
    assert rec["source"] == "rocm-smi --showrasinfo" and rec["gpus"] == [
        {"gpu": 0, "pci": None, "ecc_correctable_aggregate": 0, "ecc_uncorrectable_aggregate": 0,
         "ecc_deferred": None},
        {"gpu": 1, "pci": None, "ecc_correctable_aggregate": None, "ecc_uncorrectable_aggregate": None,
         "ecc_deferred": None}]
    (bindir / "rocm-smi").unlink()
    monkeypatch.setenv("PATH", str(bindir))
    assert sampler.gpu_error_reading("end", "amd-smi")["error"] == "amd-smi not found; rocm-smi not found"


def test_sustained_tflops_dips_and_collective_degradation(tmp_path):
    """An H100 node (the device block start makes from the recorded nvidia-smi query) whose GEMMs averaged 598.8
    TFLOP/s with one interval at 300, and whose all-to-all fell by half in its last interval; and a CPU node."""
    gpus = device.parse_nvidia_query((FIX / "nvidia-smi" / "h100_8x_query.csv").read_text())
    dev = {"backend": "cuda", "model": gpus[0]["model"], "count": len(gpus), "driver": gpus[0]["driver"],
           "torch": None}
    g1 = node(tmp_path, "g1", gpu=True, tflops=[700.0, 690.0, 300.0, 705.0], coll_bw=[0.2, 0.21, 0.2, 0.09],
              device=dev)
    c1 = node(tmp_path, "c1")
    run = make_run(tmp_path, [g1, c1])
    rows = grade(run, {"checks": [CHECKS[c] for c in ("burnin.gemm_sustained", "burnin.dips",
                                                      "burnin.collective_degradation")]})
    got = {(r["check_id"], r["host"], r["subject"]): r for r in rows}
    sus = got[("burnin.gemm_sustained", "g1", "gpu 0")]
    assert (sus["status"], sus["observed"]) == ("warn", "598.8 TFLOP/s mean over the run (bf16)")
    assert sus["expected"] == ">= 476.7 (0.6 × mamf_bf16_tflops 794.5) (warn below >= 635.6 (0.8 × " \
                              "mamf_bf16_tflops 794.5))"
    assert got[("burnin.gemm_sustained", "c1", "burnin")]["reason"] == "backend=cpu: expectation is for cuda/rocm"
    dip = got[("burnin.dips", "g1", "burnin gpu 0")]
    assert (dip["status"], dip["observed"]) == ("fail", "lowest interval 43% of the median (300 of 695 TFLOP/s) at "
                                                        "t+15 s")
    coll = got[("burnin.dips", "g1", "burnin alltoall")]
    assert (coll["status"], coll["observed"]) == ("fail", "lowest interval 45% of the median (0.09 of 0.2 GB/s) at "
                                                          "t+20 s")
    assert got[("burnin.dips", "c1", "burnin alltoall")]["status"] == "pass"
    deg = got[("burnin.collective_degradation", "g1", "burnin alltoall")]
    assert (deg["status"], deg["observed"]) == ("fail", "55.0% (first tenth 0.200, last tenth 0.090 GB/s)")
    assert got[("burnin.collective_degradation", "c1", "burnin alltoall")]["status"] == "pass"
    assert got[("burnin.collective_degradation", "c1", "fabric_soak")]["reason"] == \
        "probe fabric_soak did not run on this host"


def test_grader_kinds_are_registered():
    from reports.grading import kinds

    kinds.register_phase_kinds()
    assert gb.PER_HOST and all(kinds.PER_HOST_KINDS[kind] is fn for kind, fn in gb.PER_HOST.items())


def _gemm_error(worker, at, error, **extra):
    """The record workers.gemm_main writes when its worker cannot start (make_gemm raised) or its GEMMs raise
    mid-run: the fields of its samples, type error, when (t) and why."""
    return dict({"type": "error", "worker": worker, "gpu": worker, "device": "cuda:%d" % worker, "dtype": "bf16",
                 "size": 8192, "t": T0 + at, "error": error}, **extra)


def test_a_gemm_worker_that_could_not_start_died_or_stopped_fails_its_gpu_and_the_run(tmp_path):
    """GPU 1's GEMM worker: on s1 it could not start (make_gemm raised, exit 3); on s2 its GEMMs raised after two
    samples (exit 4); on s3 its samples stop after the first without a word (killed: -9). Each time the runner went
    on to its deadline and ended "completed"; GPU 0 ran to the end."""
    tf = [600.0, 598.0, 601.0, 599.0]
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered"
    nodes = [node(tmp_path, "s1", gpu=True, tflops=tf, gemm_until={1: 0}, gemm=[_gemm_error(1, 3.2, ecc)],
                  exits={"gemm-1": 3}),
             node(tmp_path, "s2", gpu=True, tflops=tf, gemm_until={1: 2},
                  gemm=[_gemm_error(1, 12.4, illegal, t_start=T0 + 10.0, iters=40)], exits={"gemm-1": 4}),
             node(tmp_path, "s3", gpu=True, tflops=tf, gemm_until={1: 1}, exits={"gemm-1": -9})]
    run = make_run(tmp_path, nodes)
    ids = ("burnin.completed", "burnin.gemm_errors", "burnin.gemm_degradation", "burnin.gemm_sustained")
    got = {(r["check_id"], r["host"], r["subject"]): r for r in grade(run, {"checks": [CHECKS[c] for c in ids]})}
    # the run completed, the worker's load did not: named with its exit
    for host, exit_text in (("s1", "gemm-1 exit 3"), ("s2", "gemm-1 exit 4"), ("s3", "gemm-1 killed by signal 9")):
        row = got[("burnin.completed", host, "burnin")]
        assert (row["status"], row["observed"]) == ("fail", "60 s, but worker(s) exited before the end: %s" % exit_text)
    why = {"s1": "GEMM worker failed at t+3 s (before its first sample): %s" % ecc,
           "s2": "GEMM worker failed at t+12 s (after 2 sample(s)): %s" % illegal,
           "s3": "GEMM samples end at t+5 s, 15 s before the load stopped (t+20 s): the worker stopped early"}
    samples = {"s1": 0, "s2": 2, "s3": 1}
    for host in ("s1", "s2", "s3"):
        errors = got[("burnin.gemm_errors", host, "gpu 1")]
        assert (errors["status"], errors["observed"]) == ("fail", "%s; 0 wrong result(s) in %d samples" % (
            why[host], samples[host]))
        deg = got[("burnin.gemm_degradation", host, "gpu 1")]
        assert (deg["status"], deg["observed"]) == ("fail", why[host])
        sus = got[("burnin.gemm_sustained", host, "gpu 1")]
        assert sus["status"] == "fail" and sus["observed"].startswith(why[host])
        assert got[("burnin.gemm_errors", host, "gpu 0")]["status"] == "pass"
        assert got[("burnin.gemm_degradation", host, "gpu 0")]["status"] == "pass"
        assert not [k for k in got if k[1] == host and k[2].startswith("worker")]  # no row of an unknown worker
    assert got[("burnin.gemm_sustained", "s2", "gpu 1")]["observed"].endswith("; 599.0 TFLOP/s mean while it ran")
    table = section._burnin_table([d for d, _ in nodes])
    assert markdown.render([table]).count("**workers exited early** (gemm-1 exit") == 2


def test_a_gemm_worker_killed_before_its_first_record_is_a_failed_row_of_its_gpu(tmp_path):
    """GPU 1's GEMM worker was killed (SIGKILL: the OOM killer) 7 s into the run, before it wrote a sample or an
    error record; the runner saw the exit and went on to its deadline. Before, nothing in the timeline named worker 1,
    so GPU 1 had no GEMM row at all: it vanished from the burn-in's GEMM checks while GPU 0 passed."""
    tf = [600.0, 598.0, 601.0, 599.0]
    doc, out = node(tmp_path, "s4", gpu=True, tflops=tf, gemm_until={1: 0}, exits={"gemm-1": -9},
                    cfg_extra={"backend": "cuda", "gpus": [0, 1]},
                    done_extra={"exit_t": {"gemm-0": T0 + 60.4, "gemm-1": T0 + 7.3, "coll-0": T0 + 60.4,
                                              "coll-1": T0 + 60.4}})
    [err] = [r for r in doc["results"] if r["metric"] == "gemm_worker_error"]
    assert err["value"] == T0 + 7.3 and (err["labels"]["worker"], err["labels"]["gpu"]) == (1, 1)
    run = make_run(tmp_path, [(doc, out)])
    ids = ("burnin.gemm_errors", "burnin.gemm_degradation", "burnin.gemm_sustained")
    got = {(r["check_id"], r["host"], r["subject"]): r for r in grade(run, {"checks": [CHECKS[c] for c in ids]})}
    why = "GEMM worker failed at t+7 s (before its first sample): wrote nothing before it ended: killed by signal 9"
    assert got[("burnin.gemm_errors", "s4", "gpu 1")]["observed"] == "%s; 0 wrong result(s) in 0 samples" % why
    assert (got[("burnin.gemm_degradation", "s4", "gpu 1")]["status"],
            got[("burnin.gemm_degradation", "s4", "gpu 1")]["observed"]) == ("fail", why)
    assert got[("burnin.gemm_sustained", "s4", "gpu 1")]["observed"] == why
    assert all(got[(c, "s4", "gpu 1")]["status"] == "fail" for c in ids)
    assert got[("burnin.gemm_degradation", "s4", "gpu 0")]["status"] == "pass"


def test_samples_before_the_load_began_are_no_baseline(tmp_path):
    """The collective world formed 5 s into the run (t_load, runner._start_the_load_clock). Until then GPU 0's GEMMs
    ran alone (700 TFLOP/s), and the recorded stream's first window holds its idle ticks (1851 MHz mean); under the
    whole load it held 600 TFLOP/s and about 1770 MHz."""
    doc, out = node(tmp_path, "g1", gpu=True, tflops=[700.0, 600.0, 600.0, 600.0],
                    cfg_extra={"t_load": T0 + 5.0, "deadline": T0 + 65.0})
    m = {(r["metric"], r["labels"].get("gpu")): r["value"] for r in doc["results"]}
    assert doc["facts"]["load_from_s"] == "5.0"
    assert (m[("gemm_tflops_first", 0)], m[("gemm_degradation_pct", 0)], m[("gemm_tflops_mean", 0)]) == (
        600.0, 0.0, 600.0)
    assert m[("gemm_samples", 0)] == 4  # the timeline keeps every sample (and wrong results count whenever)
    assert (m[("gpu_sm_clock_first_mhz", 0)], m[("gpu_sm_clock_drop_pct", 0)]) == (1773.0, 0.0)
    assert m[("gpu_temp_max_c", 1)] == 75  # maxima come from every window
    run = make_run(tmp_path, [(doc, out)])
    rows = grade(run, {"checks": [CHECKS["burnin.gemm_degradation"], CHECKS["burnin.clock_drop"]]})
    got = {(r["check_id"], r["subject"]): (r["status"], r["observed"]) for r in rows}
    assert got[("burnin.gemm_degradation", "gpu 0")] == ("pass", "0.0% (first tenth 600.000, last tenth 600.000 "
                                                                 "TFLOP/s)")
    assert got[("burnin.clock_drop", "gpu 0")] == ("pass", "0.0% (1773 -> 1773 MHz)")
    gemm = [s for s in gb.read_stream(run, doc, "gemm") if s["gpu"] == 0]
    assert [s["tflops"] for s in gemm] == [700.0, 600.0, 600.0, 600.0]  # what the timeline plot shows


def _ecc_reading(when, at, uncorrectable):
    """GPU 0's memory error counters as sampler.gpu_error_reading writes them (nvidia-smi -q -x)."""
    return {"type": "gpu_errors", "when": when, "t": T0 + at, "gpus": [{
        "gpu": 0, "pci": "00000000:18:00.0", "ecc_correctable_volatile": 0, "ecc_uncorrectable_volatile": uncorrectable,
        "ecc_uncorrectable_aggregate": uncorrectable, "remapped_rows_correctable": 0, "remapped_rows_uncorrectable": 0,
        "remap_pending": False, "remap_failure": False}]}


def _windows(rows, t0, spans):
    """The monitor's records of the stream rows: one per (start, end) span in seconds from the first row, dt its
    length, as Monitor.sample reduces what nvidia-smi printed since its last sample."""
    out = []
    for start, end in spans:
        rs = [r for r in rows if start <= r["timestamp"] - t0 < end]
        out.append({"type": "monitor", "t": T0 + end, "dt": float(end - start),
                    "gpus": soak_smi.window_sample(rs, T0 + end), "nics": {}})
    return out


def test_an_uncorrectable_ecc_error_in_the_first_window_counts(tmp_path):
    """GPU 0 of the recorded stream counts one uncorrectable ECC error 2 s into the run (its counter column goes from
    0 to 1 inside the first 5 s window, whose highest value is then 1). With the readings before and after the load
    (as burnin.ecc grades them), and interrupted, without the one after (the stream's own counter)."""
    lines = [line for line in (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
             if line.split(", ")[1] == "0"]
    lines = [", ".join(f[:11] + ["1" if k >= 2 else f[11]] + f[12:]) for k, f in enumerate(
        line.split(", ") for line in lines)]
    rows = [soak_smi.parse_line(line) for line in lines]
    mons = _windows(rows, rows[0]["timestamp"], [(0, 5), (5, 10), (10, 15), (15, 20)])
    assert [m["gpus"][0]["ecc_uncorrected"] for m in mons] == [1, 1, 1, 1]
    done, dout = node(tmp_path, "g1", gpu=True, monitor=[_ecc_reading("start", 0, 0)] + mons +
                      [_ecc_reading("end", 21, 1)])
    partial, pout = node(tmp_path, "g2", gpu=True, monitor=[_ecc_reading("start", 0, 0)] + mons, done=False)
    for doc in (done, partial):
        [new] = [r["value"] for r in doc["results"] if r["metric"] == "gpu_ecc_uncorrected_new"]
        assert new == 1
    run = make_run(tmp_path, [(done, dout), (partial, pout)])
    [row] = [r for r in gb.grade_ecc(CHECKS["burnin.ecc"], run, "g1") if r["subject"] == "burnin gpu 0"]
    assert (row["status"], row["observed"]) == ("fail", "uncorrectable ECC (volatile) +1, uncorrectable ECC "
                                                        "(aggregate) +1")
    table = section._gpu_table([done])
    assert [r[-1] for r in table.rows] == [1]  # the report's column says what the check says


def test_one_failed_collective_counts_once_not_once_per_local_rank(tmp_path):
    """Two 8-GPU nodes of a 16-rank all-to-all, every local rank writing its samples. On n1 the all-to-all of round 12
    timed out and each of its 8 ranks wrote its own record of it (coll_main, with NCCL's watchdog text as
    tests/fixtures/torchtitan has it); on n2 the runner found the loop stalled and wrote one record per live rank."""
    what = (FIX / "torchtitan" / "issue810_b200_nccl_watchdog_timeout.log").read_text().splitlines()[0]
    what = what.split("what():  ", 1)[1]

    def samples(ranks):
        return [{"type": "coll", "rank": rank, "world": 16, "nodes": 2, "collective": "alltoall",
                 "size_bytes": 268435456, "t": T0 + 5 * (k + 1) + 0.01 * rank, "t_start": T0 + 5 * k, "rounds": 10,
                 "iters": 40, "time_us": 2900.0, "busbw_gbps": 80.5, "busbw_min_gbps": 79.0, "busbw_max_gbps": 81.2,
                 "lat_us": 60.0, "checks": 2, "wrong": 0} for k in range(3) for rank in ranks]

    n1 = samples(range(8)) + [
        {"type": "error", "rank": rank, "world": 16, "nodes": 2, "kind": "hang", "step": "alltoall round 12",
         "t": T0 + 16.0 + 0.05 * rank, "error": "DistBackendError: %s" % what.replace("Rank 4", "Rank %d" % rank)}
        for rank in range(8)]
    n2 = samples(range(8, 16)) + [{"type": "error", "kind": "hang", "t": T0 + 19.5, "rank": rank,
                                   "error": "no collective progress for 186 s: stopped"} for rank in range(8, 16)]
    nodes = [node(tmp_path, "n1", coll=n1), node(tmp_path, "n2", coll=n2)]
    for doc, _ in nodes:
        m = {(r["metric"], r["labels"].get("collective")): r["value"] for r in doc["results"]}
        assert (m[("coll_hangs", None)], m[("coll_errors", None)], m[("coll_samples", "alltoall")]) == (1, 0, 3)
        assert (m[("coll_failure_records", None)], m[("coll_ranks", "alltoall")]) == (8, 8)
    run = make_run(tmp_path, nodes)
    for host in ("n1", "n2"):
        [row] = [r for r in gb.grade_coll(CHECKS["burnin.collectives"], run, host)
                 if r["subject"] == "burnin collectives"]
        assert (row["status"], row["observed"]) == (
            "fail", "0 error(s), 1 hang(s) of the collective loop (each failure once; 8 record(s) from its ranks)")


def test_throttled_seconds_count_each_window_by_its_own_length(tmp_path):
    """GPU 1 of the recorded stream is slowed by heat at 09:20:14, :15 and :16. The monitor's windows of 5 s, and the
    run stopped 1 s into the fourth: that window (the :15 row, slowed) lasted 1 s, its dt, not an interval."""
    lines = (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
    rows = [soak_smi.parse_line(line) for line in lines]
    mons = _windows(rows, rows[0]["timestamp"], [(0, 5), (5, 10), (10, 15), (15, 16)])
    assert [m["gpus"][1]["slowdown_share"] for m in mons] == [0, 0, 0.2, 1.0]
    doc, out = node(tmp_path, "g1", gpu=True, monitor=mons)
    [secs] = [r["value"] for r in doc["results"] if r["metric"] == "gpu_throttle_s" and r["labels"]["gpu"] == 1]
    assert secs == 2.0  # the :14 and :15 ticks
    run = make_run(tmp_path, [(doc, out)])
    [row] = [r for r in gb.grade_gpu(CHECKS["burnin.throttling"], run, "g1") if r["subject"] == "gpu 1"]
    assert row["observed"].startswith("1 episode(s), 2 s slowed")


# `nvidia-smi -q -d power` of an H100 (driver 595.71.05) from stackhpc/ansible-slurm-appliance#975: Current Power
# Limit 500 W (enforced.power.limit) under a Requested Power Limit of 700 W (power.limit), default and max 700 W.
CAPPED_H100 = {"enforced.power.limit": "500.00", "power.limit": "700.00", "power.default_limit": "700.00",
               "power.min_limit": "200.00", "power.max_limit": "700.00"}


def _smi_line(fields, reading):
    """One line of `nvidia-smi --query-gpu=<fields> --format=csv,noheader,nounits`: the values of the fields asked
    for, in the order asked."""
    return ", ".join(reading[f] for f in fields)


def test_power_is_judged_against_the_enforced_limit_not_the_requested_one(tmp_path):
    """Two H100s capped to 500 W while 700 W stays requested. Under the load GPU 0 holds at its cap (SW power cap),
    GPU 1 draws 561 W, over the enforced 500 W. Before, the stream asked for power.limit: the summary and the report
    called the requested 700 W the enforced limit, and GPU 1 passed."""
    lines = []
    for tick in range(20):
        for gpu, pci, draw, reasons in ((0, "00000000:18:00.0", "499.12", "0x0000000000000004"),
                                        (1, "00000000:2A:00.0", "561.40", "0x0000000000000000")):
            reading = dict(CAPPED_H100, **{
                "timestamp": "2026/11/30 09:20:%02d.120" % tick, "index": str(gpu), "pci.bus_id": pci,
                "temperature.gpu": "61", "power.draw": draw, "clocks.sm": "1755", "clocks.mem": "2619",
                "clocks.max.sm": "1980", "clocks_throttle_reasons.active": reasons,
                "clocks_event_reasons.active": reasons, "utilization.gpu": "100",
                "ecc.errors.uncorrected.volatile.total": "0", "ecc.errors.corrected.volatile.total": "0"})
            lines.append(_smi_line(soak_smi.QUERY_FIELDS, reading))
    rows = [soak_smi.parse_line(line) for line in lines]
    mons = _windows(rows, rows[0]["timestamp"], [(0, 5), (5, 10), (10, 15), (15, 20)])
    doc, out = node(tmp_path, "g1", gpu=True, monitor=mons)
    limits = {r["labels"]["gpu"]: r["value"] for r in doc["results"] if r["metric"] == "gpu_power_limit_w"}
    assert limits == {0: 500.0, 1: 500.0}
    run = make_run(tmp_path, [(doc, out)])
    got = {r["subject"]: r for r in gb.grade_gpu(CHECKS["burnin.power"], run, "g1")}
    assert (got["gpu 0"]["status"], got["gpu 0"]["observed"]) == ("pass", "499 W max")
    assert (got["gpu 1"]["status"], got["gpu 1"]["observed"]) == ("fail", "561 W max")
    assert got["gpu 1"]["expected"] == "at most the enforced limit 500 W (+5%)"


def test_a_one_rank_collective_loop_has_no_bus_bandwidth(tmp_path):
    """One rank (a lone single-GPU or CPU node): all_reduce, all_gather and alltoall have busbw factor 0 there, and
    nothing crosses a bus. The worker wrote algbw as busbw (factor 0 -> `or 1.0`); now a 1-rank sample carries algbw
    only (workers.coll_busbw), as the collectives probe does, the summary records no busbw and the checks say why
    instead of judging a bus that was never used."""
    from probes.burnin.workers import coll_busbw
    from probes.network.busbw import busbw_factor

    # nccl-tests on 2 x 8 H100 (NVIDIA/nccl-tests#309, tests/fixtures/nccl-tests/real): all_reduce at 8 GiB in place,
    # algbw 248.88 GB/s, busbw 466.65 (x 2 x 15/16)
    assert coll_busbw([248.88], busbw_factor("all_reduce", 16), 16) == {
        "busbw_gbps": 466.65, "busbw_min_gbps": 466.65, "busbw_max_gbps": 466.65}
    for coll in ("all_reduce", "all_gather", "alltoall", "broadcast"):
        assert coll_busbw([248.88], busbw_factor(coll, 1), 1) == {}  # before: busbw 248.88, the algbw
    one = [{"type": "coll", "rank": 0, "world": 1, "nodes": 1, "collective": "alltoall", "size_bytes": 1 << 20,
            "t": T0 + 5 * (k + 1), "algbw_gbps": 0.8, "time_us": 1310.0, "lat_us": 40.0, "wrong": 0, "checks": 1}
           for k in range(4)]
    doc, out = node(tmp_path, "c1", coll=one)
    metrics = {r["metric"] for r in doc["results"]}
    assert not [m for m in metrics if m.startswith("coll_busbw")] and "coll_lat_us_avg" in metrics
    run = make_run(tmp_path, [(doc, out)])
    [row] = [r for r in gb.grade_coll(CHECKS["burnin.collectives"], run, "c1") if r["subject"] == "burnin alltoall"]
    assert (row["status"], row["observed"], row["reason"]) == (
        "skip", "no busbw (one rank: nothing crosses a bus), latency 40 us, 0 wrong",
        "a 1-rank world has no bus bandwidth to judge")
    [deg] = [r for r in gb.grade_coll(CHECKS["burnin.collective_degradation"], run, "c1")
             if r["subject"] == "burnin alltoall"]
    assert (deg["status"], deg["reason"]) == ("skip", "no bandwidth samples")
    assert not [s for s, _, unit in gb._dip_series(run, run.artifact("c1", "burnin")) if unit == "GB/s"]
    report = tmp_path / "report"
    report.mkdir()
    md = section.render(run, [], str(report))  # the section's tables and plots take the samples without busbw
    assert "| c1 | cpu | done, 60 s | 0.020 | 0.0% | – | – | – | 0 | 0 | 0 | 0 |" in md  # all-to-all busbw: none


def _smi_q(tmp_path, monkeypatch):
    """A stand-in nvidia-smi whose `-q -x` prints the XML it was last given, or hangs (a GPU that stopped answering:
    the reading's timeout) when it was given None. Returns the function that gives it."""
    bindir, now = tmp_path / "bin", tmp_path / "xml-now"
    bindir.mkdir(exist_ok=True)
    (bindir / "nvidia-smi").write_text('#!/bin/sh\nf="$(cat %s)"\n[ -n "$f" ] || exec sleep 5\ncat "$f"\n' % now)
    (bindir / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    given = []

    def prints(xml):
        if xml is None:
            now.write_text("")
            return
        given.append(tmp_path / ("q-x-%d.xml" % len(given)))
        given[-1].write_text(xml)
        now.write_text(str(given[-1]))
    return prints


def test_ecc_without_the_reading_before_the_load_is_an_error_and_a_pending_remap_fails_by_itself(tmp_path,
                                                                                                  monkeypatch):
    """The recorded A100's counters after the load (1 uncorrectable volatile, 4 aggregate, 4 rows remapped for
    uncorrectable errors, 3 correctable). On g1 and g2 nvidia-smi -q -x did not answer before the load (the reading
    timed out); after it, g1's GPU has a row remap pending. On g3 both readings worked and show the same counters,
    with a remap pending before and after. Before, each GPU passed "no new error": g1 and g2 compared 0 counters (no
    start reading), g3's pending flag did not change."""
    prints = _smi_q(tmp_path, monkeypatch)
    pending = A100.replace("<remapped_row_pending>No<", "<remapped_row_pending>Yes<")
    lines = [line for line in (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
             if line.split(", ")[1] == "0"]
    rows = [soak_smi.parse_line(line) for line in lines]
    mons = _windows(rows, rows[0]["timestamp"], [(0, 5), (5, 10), (10, 15), (15, 20)])
    nodes = []
    for host, before, after in (("g1", None, pending), ("g2", None, A100), ("g3", pending, pending)):
        prints(before)
        start = sampler.gpu_error_reading("start", timeout=0.5)
        prints(after)
        end = sampler.gpu_error_reading("end", timeout=0.5)
        nodes.append(node(tmp_path, host, gpu=True, monitor=[start] + mons + [end]))
    assert nodes[0][0]["facts"]["gpu_errors_start"] == "nvidia-smi -q -x: timed out after 0.5 s"
    run = make_run(tmp_path, nodes)
    got = {}
    for host in ("g1", "g2", "g3"):
        [got[host]] = [r for r in gb.grade_ecc(CHECKS["burnin.ecc"], run, host) if r["subject"] == "burnin gpu 0"]
    after = ("after the load: uncorrectable ECC (volatile) 1, uncorrectable ECC (aggregate) 4, rows remapped for "
             "uncorrectable errors 4, correctable ECC (volatile) 3")
    # no reading before: nothing to compare with, an error naming why; but a pending remap fails whatever came before
    assert (got["g1"]["status"], got["g1"]["observed"]) == ("fail", "row remap pending (needs a GPU reset); " + after)
    assert got["g1"]["reason"].startswith("no reading before the load (nvidia-smi -q -x: timed out after 0.5 s)")
    assert (got["g2"]["status"], got["g2"]["observed"]) == ("error", after)
    assert got["g2"]["reason"] == ("no reading before the load (nvidia-smi -q -x: timed out after 0.5 s): nothing "
                                   "to compare the reading after it with")
    # both read: no counter rose, but the GPU still has a remap pending (it needs a reset before it takes work)
    assert (got["g3"]["status"], got["g3"]["observed"]) == (
        "fail", "row remap pending (needs a GPU reset), already before the load")


def _an_hour_of_h100_telemetry(ticks):
    """The monitor's records of a 1-hour burn-in of two H100s in 10 s windows (360), the nvidia-smi stream reduced
    per window as Monitor.sample does it: GPU 0 of the recorded stream (its two idle ticks, its warm-up, then its
    loaded ticks over and over) printed for GPU 0 and GPU 1 once a second. ticks: the seconds from the start at which
    nvidia-smi printed; in the other windows its stream gave nothing (it died or stalled): `gpus` is empty there."""
    lines = [line for line in (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
             if line.split(", ")[1] == "0"]
    rows0 = [soak_smi.parse_line(line) for line in lines]
    pci = {0: "00000000:18:00.0", 1: "00000000:2A:00.0"}
    ticks = set(ticks)
    records = [_ecc_reading("start", 0.0, 0)]
    for w in range(360):
        rows = [dict(rows0[k if k < 12 else 12 + (k - 12) % 8], timestamp=T0 + k + 0.12, gpu=g, pci=pci[g])
                for k in range(10 * w, 10 * w + 10) if k in ticks for g in (0, 1)]
        t = T0 + 10.0 * (w + 1)
        records.append({"type": "monitor", "t": t, "dt": 10.0, "cpu_util_pct": 41.5, "cpu_temp_c": None,
                        "cpu_mhz": None, "load1": 12.3, "nics": {"ib0": {"rx_bytes": 1 << 30, "tx_bytes": 1 << 30}},
                        "rdma": {}, "gpus": soak_smi.window_sample(rows, t), "kernel_lines": 0, "kernel_events": 0})
    records.append(_ecc_reading("end", 3600.5, 0))
    return records


def test_gpu_checks_judge_only_what_their_telemetry_covers(tmp_path):
    """Four 1-hour burn-ins of two H100s: nvidia-smi's stream died after the first minute ("died": telemetry in 6 of
    360 windows), 5 minutes before the end ("late": 330 of 360, none in the last tenth), stalled for 5 minutes
    mid-run ("gap": 330 of 360, both tenths covered), or never printed a row ("none"). Before, "died" and "late"
    passed all four GPU checks (the clock drop's "last tenth" was minute 1, or minutes 50 to 55), and "none" skipped
    as a node without GPUs."""
    hour = {"cfg_extra": {"deadline": T0 + 3600.0, "duration_s": 3600.0, "interval": 10.0},
            "done_extra": {"t_end": T0 + 3600.4}}
    nodes = [node(tmp_path, "died", gpu=True, monitor=_an_hour_of_h100_telemetry(range(60)), **hour),
             node(tmp_path, "late", gpu=True, monitor=_an_hour_of_h100_telemetry(range(3300)), **hour),
             node(tmp_path, "gap", gpu=True, monitor=_an_hour_of_h100_telemetry(
                 k for k in range(3600) if not 1800 <= k < 2100), **hour),
             node(tmp_path, "none", gpu=True, monitor=_an_hour_of_h100_telemetry([]), **hour)]
    m = {(r["metric"], r["labels"].get("gpu")): r["value"] for r in nodes[0][0]["results"]}
    assert (m[("monitor_samples", None)], m[("gpu_samples", 0)], m[("gpu_samples", 1)]) == (360, 6, 6)
    run = make_run(tmp_path, nodes)
    ids = ("burnin.throttling", "burnin.clock_drop", "burnin.temperature", "burnin.power")
    got = {(r["check_id"], r["host"], r["subject"]): r for r in grade(run, {"checks": [CHECKS[c] for c in ids]})}
    for cid in ids:
        for gpu in ("gpu 0", "gpu 1"):
            died = got[(cid, "died", gpu)]
            assert died["status"] == "error", (cid, died)
            assert died["reason"].startswith("GPU telemetry in 6 of 360 monitor windows (first 60 s of 3600 s)")
            late = got[(cid, "late", gpu)]
            if cid == "burnin.clock_drop":  # the clock at the end of the run is unknown
                assert late["status"] == "error"
                assert late["reason"].startswith("GPU telemetry in 6 of 36 monitor windows of the last tenth of the "
                                                 "load (t+3240-3600 s)")
            else:
                assert late["status"] == "pass", (cid, late)
            assert got[(cid, "gap", gpu)]["status"] == "pass", (cid, got[(cid, "gap", gpu)])
        [none] = [r for k, r in got.items() if k[:2] == (cid, "none")]
        assert (none["status"], none["subject"]) == ("error", "")
        assert none["reason"].startswith("GPU telemetry in 0 of 360 monitor windows")
    assert got[("burnin.temperature", "gap", "gpu 0")]["observed"] == "68 C"


# The monitor's facts (the runner's state file) where /dev/kmsg refused it: not root, kernel.dmesg_restrict = 1.
KMSG_REFUSED = {"gpu_telemetry": "nvidia-smi -lms 1000", "kmsg": "cannot read /dev/kmsg: Operation not permitted"}
KMSG_READ = {"gpu_telemetry": "nvidia-smi -lms 1000", "kmsg": "reading /dev/kmsg from the start of the run"}


def test_a_kernel_log_that_was_not_read_is_not_reported_clean(tmp_path):
    """g1 could not open /dev/kmsg; g2 read it from the start and found nothing. burnin.kernel_errors skips g1 with
    the reason; before, the section still said "No XID, SXID or AER line in the kernel log during the runs"."""
    run = make_run(tmp_path, [node(tmp_path, "g1", gpu=True, state=KMSG_REFUSED),
                              node(tmp_path, "g2", gpu=True, state=KMSG_READ)])
    [row] = [r for r in gb.grade_kernel(CHECKS["burnin.kernel_errors"], run, "g1") if r["subject"] == "burnin"]
    assert (row["status"], row["reason"]) == ("skip", "kernel log not readable: cannot read /dev/kmsg: Operation "
                                                      "not permitted")
    md = section.render(run, [], None)
    assert "No XID, SXID or AER line in the kernel log during the runs." not in md
    assert ("**Not all of the kernel log was read**: g1 (burnin) not read: cannot read /dev/kmsg: Operation not "
            "permitted.") in md
    assert "No XID, SXID or AER line in the part of the kernel log that was read." in md
    # every host read in full: the sentence as before
    base = tmp_path / "alone"
    base.mkdir()
    alone = make_run(base, [node(base, "g3", gpu=True, state=KMSG_READ)])
    assert "No XID, SXID or AER line in the kernel log during the runs." in section.render(alone, [], None)


def test_a_kmsg_read_that_fails_mid_run_is_recorded_and_the_log_judged_only_up_to_it(tmp_path):
    """The monitor reads /dev/kmsg every interval; its third read fails (here: its descriptor now names a directory,
    EISDIR, through KmsgReader's own read). Before, the failure stayed inside the monitor (facts.kmsg is written
    once, at the start): burnin.kernel_errors passed "none in 60 s"."""
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    out = tmp_path / "monitor.jsonl"
    mon = sampler.Monitor({"gpu_tool": "none", "interval": 1, "kmsg_path": str(kmsg),
                           "kfd_path": str(tmp_path / "no-kfd"), "sys_root": str(tmp_path / "sys")}, str(out),
                          str(tmp_path / "kernel.jsonl"))
    try:
        mon.sample()
        first = mon.sample()
        os.close(mon.kmsg.fd)
        mon.kmsg.fd = os.open(str(tmp_path), os.O_RDONLY)
        mon.sample()
        mon.sample()  # it keeps failing: recorded once
    finally:
        mon.close()
    records = sampler.read_jsonl(str(out))
    assert [r["type"] for r in records] == ["monitor", "monitor", "kmsg_error", "monitor", "monitor"]
    failed = records[2]
    assert failed["error"] == "reading %s: Is a directory" % kmsg and failed["read_until"] == first["t"]
    facts = dict(mon.facts)
    # c1 found nothing up to the failure; c2 logged a fatal AER before it
    aer = (FIX / "kmsg" / "journalctl_aer_correctable_uncorrectable_fatal.txt").read_text().splitlines()
    docs = [node(tmp_path, "c1", monitor=records, state=facts),
            node(tmp_path, "c2", monitor=records, state=facts, kernel=[(12.0, aer[4].split("kernel: ", 1)[1])])]
    doc = docs[0][0]
    until = "%.1f" % (first["t"] - T0)
    assert (doc["facts"]["kmsg_error"], doc["facts"]["kmsg_read_until_s"], doc["facts"]["kmsg_error_at_s"]) == (
        failed["error"], until, "%.1f" % (failed["t"] - T0))
    run = make_run(tmp_path, docs)
    [c1] = [r for r in gb.grade_kernel(CHECKS["burnin.kernel_errors"], run, "c1") if r["subject"] == "burnin"]
    assert (c1["status"], c1["observed"]) == ("error", "none found up to t+%.0f s" % float(until))
    assert c1["reason"].startswith("the kernel log was read only up to t+%.0f s: reading %s: Is a directory" % (
        float(until), kmsg))
    c2 = {r["subject"]: r for r in gb.grade_kernel(CHECKS["burnin.kernel_errors"], run, "c2")}
    assert c2["burnin AER"]["status"] == "fail" and c2["burnin"]["status"] == "error"
    md = section.render(run, [], None)
    assert "c1 (burnin) read only up to t+%.0f s: reading %s: Is a directory" % (float(until), kmsg) in md


def test_a_run_that_ended_completed_short_of_its_duration_under_load_fails(tmp_path):
    """The runner's deadline is when the load began plus the duration, but never past the start plus the duration
    and the rendezvous timeout: a world that formed 20 s into a 60 s run (late, past that cap) ends "completed"
    after 40 s under load. It used to pass on the 60 s from the start; a world formed at 0.5 s still passes."""
    late = node(tmp_path, "late", cfg_extra={"t_load": T0 + 20.0, "deadline": T0 + 60.0})
    prompt = node(tmp_path, "prompt", cfg_extra={"t_load": T0 + 0.5, "deadline": T0 + 60.5},
                  done_extra={"t_end": T0 + 60.7})
    run = make_run(tmp_path, [late, prompt])
    got = {r["host"]: r for r in grade(run, {"checks": [CHECKS["burnin.completed"]]}) if r["subject"] == "burnin"}
    assert (got["late"]["status"], got["late"]["observed"]) == ("fail", "40 s under load of 60 s run")
    assert "the load began 20.0 s after the start" in got["late"]["reason"]
    assert (got["prompt"]["status"], got["prompt"]["observed"]) == ("pass", "61 s")


def test_a_short_runs_last_window_cut_at_the_stop_without_a_sample_still_judges_its_clocks(tmp_path):
    """A quick burn-in: 60 s of 5 s windows with nvidia-smi printing once a second, then the monitor's last window,
    cut short at the stop (0.8 s), before nvidia-smi's next tick. The last tenth of the load is 6.1 s, 0.8 s of it
    unwatched (87 %): one window's length is allowed, so the clock drop is judged, not an error."""
    lines = [line for line in (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
             if line.split(", ")[1] == "0"]
    rows0 = [soak_smi.parse_line(line) for line in lines]
    pci = {0: "00000000:18:00.0", 1: "00000000:2A:00.0"}
    monitor = []
    for w in range(12):
        rows = [dict(rows0[k if k < 12 else 12 + (k - 12) % 8], timestamp=T0 + k + 0.12, gpu=g, pci=pci[g])
                for k in range(5 * w, 5 * w + 5) for g in (0, 1)]
        t = T0 + 5.0 * (w + 1)
        monitor.append({"type": "monitor", "t": t, "dt": 5.0, "cpu_util_pct": 41.5, "nics": {},
                        "gpus": soak_smi.window_sample(rows, t)})
    monitor.append({"type": "monitor", "t": T0 + 60.8, "dt": 0.8, "cpu_util_pct": 41.5, "nics": {}, "gpus": []})
    quick = node(tmp_path, "q1", gpu=True, monitor=monitor, done_extra={"t_end": T0 + 60.8})
    run = make_run(tmp_path, [quick])
    rows = grade(run, {"checks": [CHECKS["burnin.clock_drop"], CHECKS["burnin.temperature"]]})
    assert {(r["check_id"], r["subject"]): r["status"] for r in rows} == {
        ("burnin.clock_drop", "gpu 0"): "pass", ("burnin.clock_drop", "gpu 1"): "pass",
        ("burnin.temperature", "gpu 0"): "pass", ("burnin.temperature", "gpu 1"): "pass"}, rows


def test_a_degradation_just_past_a_line_is_shown_past_it(tmp_path):
    """GPU 0's GEMMs fell 10.04 % from the first tenth to the last (gemm_degradation fails above 10 %), the
    all-to-all 20.04 % (collective_degradation fails above 20 %): shown as 10.0% and 20.0%, beside "(10% fails)" and
    "(20% fails)", they read as on the lines. Each keeps its side; far from a line, one decimal as before."""
    g1 = node(tmp_path, "g1", gpu=True, tflops=[100.0, 98.0, 90.0, 89.96], coll_bw=[2.5, 2.5, 2.5, 1.999])
    c1 = node(tmp_path, "c1", tflops=[0.02, 0.02, 0.019, 0.0179], coll_bw=[2.5, 2.5, 2.5, 2.25])
    run = make_run(tmp_path, [g1, c1])
    rows = grade(run, {"checks": [CHECKS[c] for c in ("burnin.gemm_degradation", "burnin.collective_degradation")]})
    got = {(r["check_id"], r["host"], r["subject"]): (r["status"], r["observed"]) for r in rows}
    assert got[("burnin.gemm_degradation", "g1", "gpu 0")] == (
        "fail", "10.04% (first tenth 100.000, last tenth 89.960 TFLOP/s)")
    assert got[("burnin.collective_degradation", "g1", "burnin alltoall")] == (
        "fail", "20.04% (first tenth 2.500, last tenth 1.999 GB/s)")
    # 10.5 % and 10.0 %: far from a line, or exactly on one (10 % of the collective's warns only above 10)
    assert got[("burnin.gemm_degradation", "c1", "worker 0 (cpu)")] == (
        "fail", "10.5% (first tenth 0.020, last tenth 0.018 TFLOP/s)")
    assert got[("burnin.collective_degradation", "c1", "burnin alltoall")] == (
        "pass", "10.0% (first tenth 2.500, last tenth 2.250 GB/s)")


def test_a_storage_soak_degradation_just_past_a_line_is_shown_past_it(tmp_path):
    """The storage soak's fio bandwidth (read + write per interval, as the soak's fio timeline has it) fell 25.04 %
    from the first tenth of a phase to its last: a fail (burnin.storage_degradation fails above 25 %), shown as
    25.0% beside "(25% fails)". It keeps its side."""
    out = tmp_path / "node-s1"
    out.mkdir()
    p = soak_runner.paths(str(out), "storage_soak", None)
    cfg = {"t_start": T0, "deadline": T0 + 60, "duration_s": 60.0, "interval": 5.0, "grace_s": 30,
           "marker": soak_runner.marker("r1", "s1", "storage_soak"), "gemm": False, "collectives": [],
           "fio": {"tier": "/scratch"}}
    _write(p["monitor"], [{"type": "monitor", "t": T0 + 5 * (k + 1), "cpu_util_pct": 20.0, "nics": {}}
                          for k in range(4)])
    _write(p["fio"], [{"type": "fio", "phase": "mixed_seq", "clients": 1, "t_start": T0 + 5 * k, "t": T0 + 5 * (k + 1),
                       "read_mibps": bw / 2, "write_mibps": bw / 2} for k, bw in enumerate([1000, 1000, 1000, 749.6])]
           + [{"type": "fio_phase", "phase": "mixed_seq", "clients": 1, "rc": 0}])
    with open(p["done"], "w") as fh:
        json.dump({"ended_by": "completed", "t_start": T0, "t_end": T0 + 60.2, "exits": {}}, fh)
    art = Artifact("storage_soak", "r1", "s1")
    soak_summary.summarize(art, cfg, p)
    doc = art.to_dict()
    host_dir = tmp_path / "run" / "artifacts" / "s1"
    write_json_atomic(str(host_dir / "storage_soak.json"), doc)
    for name in doc["raw"]:
        (host_dir / name).write_text((out / name).read_text())
    (tmp_path / "run" / "assess_run.json").write_text(json.dumps({"id": "r1", "provider": "p", "hosts": ["s1"]}))
    [row] = grade(load_run(str(tmp_path / "run")), {"checks": [CHECKS["burnin.storage_degradation"]]})
    assert (row["subject"], row["status"]) == ("mixed_seq c1", "fail")
    assert row["observed"].startswith("25.04% (1000 -> 750 MiB/s; "), row


def _just_past_the_lines(tmp_path):
    """Rows of clock_drop, dips and gemm_sustained of two H100 nodes: on g1 GPU 0's SM clock fell 10.04 % (clock_drop
    fails above 10 %) and its GEMMs held 635.56 TFLOP/s, under the warn line 635.6 (0.8 × MAMF 794.5); on d1 GPU 0's
    lowest GEMM interval was 79.96 % of the median (dips warn below 80 %). Shown as 10.0%, 635.6 and 80%, each read
    as on its line."""
    gpus = device.parse_nvidia_query((FIX / "nvidia-smi" / "h100_8x_query.csv").read_text())
    dev = {"backend": "cuda", "model": gpus[0]["model"], "count": len(gpus), "driver": gpus[0]["driver"],
           "torch": None}
    lines = (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
    samples = soak_smi.sample_stream(lines, 5.0)
    base = samples[0]["t"]
    monitor = []
    for k, sm_mhz in enumerate((1800.0, 1750.0, 1700.0, 1619.28)):  # GPU 0's mean SM clock in each window
        gs = [dict(s, t=T0 + 5 * (k + 1), **({"sm_mhz": sm_mhz} if s["gpu"] == 0 else {}))
              for s in samples if s["t"] == base + 5 * k]
        monitor.append({"type": "monitor", "t": T0 + 5 * (k + 1), "gpus": gs, "nics": {}})
    g1 = node(tmp_path, "g1", gpu=True, monitor=monitor, device=dev, tflops=[635.56] * 4)
    d1 = node(tmp_path, "d1", gpu=True, device=dev, tflops=[700.0, 700.0, 559.72, 700.0])
    run = make_run(tmp_path, [g1, d1])
    rows = grade(run, {"checks": [CHECKS[c] for c in ("burnin.clock_drop", "burnin.dips", "burnin.gemm_sustained")]})
    return {(r["check_id"], r["host"], r["subject"]): (r["status"], r["observed"]) for r in rows}


def test_a_clock_drop_just_past_its_line_is_shown_past_it(tmp_path):
    got = _just_past_the_lines(tmp_path)
    assert got[("burnin.clock_drop", "g1", "gpu 0")] == ("fail", "10.04% (1800 -> 1619 MHz)")
    assert got[("burnin.clock_drop", "d1", "gpu 0")] == ("pass", "4.2% (1851 -> 1773 MHz)")  # far from it: as before


def test_a_sustained_mean_just_under_its_warn_line_is_shown_under_it(tmp_path):
    got = _just_past_the_lines(tmp_path)
    assert got[("burnin.gemm_sustained", "g1", "gpu 0")] == ("warn", "635.56 TFLOP/s mean over the run (bf16)")
    assert got[("burnin.gemm_sustained", "d1", "gpu 0")] == ("pass", "664.9 TFLOP/s mean over the run (bf16)")


def test_a_dip_just_under_its_warn_line_is_shown_under_it(tmp_path):
    got = _just_past_the_lines(tmp_path)
    assert got[("burnin.dips", "d1", "burnin gpu 0")] == (
        "warn", "lowest interval 79.96% of the median (559.7 of 700 TFLOP/s) at t+15 s")
    assert got[("burnin.dips", "g1", "burnin gpu 0")] == (
        "pass", "lowest interval 100% of the median (635.6 of 635.6 TFLOP/s) at t+5 s")


# What a collective worker whose world never formed printed last (this machine, a fabric soak whose second host never
# came: tests/unit/test_burnin_runner.py), and a GEMM worker's CUDA failure as torch raises it.
C10D_TIMEOUT = ["[W1207 15:35:34.745910253 socket.cpp:469] [c10d] waitForInput: poll for socket SocketImpl(fd=12, "
                "addr=[::ffff:127.0.0.1]:50954, remote=[::ffff:127.0.0.1]:25592) returned 0, likely a timeout",
                "[W1207 15:35:34.746743554 socket.cpp:494] [c10d] waitForInput: socket SocketImpl(fd=12, "
                "addr=[::ffff:127.0.0.1]:50954, remote=[::ffff:127.0.0.1]:25592) timed out after 3000ms"]


def test_a_worker_that_failed_is_named_with_the_last_line_the_workers_printed(tmp_path):
    """The workers' log lives in the node's working directory, which the cleanup step removes: before, the rows said
    "see the workers' log", and nobody could. The artifact keeps its last lines (summary: worker_log_tail) and the
    rows show the last one."""
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    traceback = ["Traceback (most recent call last):", '  File "<string>", line 1, in <module>', ecc]
    doc, out = node(tmp_path, "s1", gpu=True, gemm_until={1: 0}, gemm=[_gemm_error(1, 3.2, ecc)],
                    exits={"gemm-1": 3}, log=traceback)
    assert doc["facts"]["worker_log_tail"] == "\n".join(traceback)
    lone, lone_out = node(tmp_path, "c1", coll=[], exits={"coll-0": 1}, log=C10D_TIMEOUT,
                          done_extra={"ended_by": "every worker ended, 1 failed"})
    run = make_run(tmp_path, [(doc, out), (lone, lone_out)])
    ids = ("burnin.completed", "burnin.collectives")
    got = {(r["check_id"], r["host"], r["subject"]): r for r in grade(run, {"checks": [CHECKS[c] for c in ids]})}
    row = got[("burnin.completed", "s1", "burnin")]
    assert (row["status"], row["observed"]) == (
        "fail", "60 s, but worker(s) exited before the end: gemm-1 exit 3 (the workers' log ends: %s)" % ecc)
    row = got[("burnin.completed", "c1", "burnin")]
    assert (row["status"], row["observed"]) == ("fail", "ended after 60 s: every worker ended, 1 failed")
    assert row["reason"] == "coll-0 exit 1 (the workers' log ends: %s)" % C10D_TIMEOUT[-1]
    row = got[("burnin.collectives", "c1", "burnin")]
    assert (row["status"], row["reason"]) == ("error", "no collective samples (the workers' log ends: %s)"
                                              % C10D_TIMEOUT[-1])


def test_power_and_degradation_columns_just_past_their_lines_are_shown_past_them(tmp_path):
    """GPU 0 of the recorded H100 stream drew at most 735.4 W under its 700 W limit (burnin.power fails over 5 %
    above it: 735 W), shown "735 W max"; a GEMM worker's FLOP/s fell 10.04 % (gemm_degradation fails over 10 %),
    shown "10.0%" in the burn-in table beside its failed row."""
    lines = (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
    samples = soak_smi.sample_stream(lines, 5.0)
    base = samples[0]["t"]
    monitor = [{"type": "monitor", "t": T0 + 5 * (k + 1), "nics": {},
                "gpus": [dict(s, t=T0 + 5 * (k + 1), **({"power_max_w": 735.4} if s["gpu"] == 0 and k == 2 else {}))
                         for s in samples if s["t"] == base + 5 * k]} for k in range(4)]
    doc, out = node(tmp_path, "p1", gpu=True, monitor=monitor, tflops=[600.0] * 10 + [539.76] * 10)
    run = make_run(tmp_path, [(doc, out)])
    rows = grade(run, {"checks": [CHECKS["burnin.power"], CHECKS["burnin.gemm_degradation"]]})
    got = {(r["check_id"], r["subject"]): (r["status"], r["observed"]) for r in rows}
    assert got[("burnin.power", "gpu 0")] == ("fail", "735.4 W max")
    assert got[("burnin.power", "gpu 1")] == ("pass", "692 W max")  # far from the line: as before
    assert got[("burnin.gemm_degradation", "gpu 0")][0] == "fail"
    table = markdown.render([section._burnin_table([doc], run)])
    assert "| 10.04%, 10.04% |" in table, table
