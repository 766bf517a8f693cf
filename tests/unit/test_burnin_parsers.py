"""Burn-in parsing and math: kernel-log lines (XID, SXID, AER in their real formats), the nvidia-smi -lms query
stream reduced per interval, fio's periodic JSON status turned into per-interval bandwidth, degradation math.

Fixtures: tests/fixtures/kmsg/burnin_kmsg_records.txt (/dev/kmsg records in the kernel's format; the XID and AER
lines are the real lines of tests/fixtures/audit/dmesg-iso_h100_xids.txt, the SXID lines NVSwitch's three-line form),
tests/fixtures/nvidia-smi/h100_2x_burnin_query_lms1000.csv (the stream's format, two H100 GPUs going from idle into
a load), tests/fixtures/fio/soak_status_interval_seq_mixed.out (fio 3.33, recorded on this machine with the job
file beside it).
"""

from pathlib import Path

import pytest

from probes.burnin import fio as soak_fio
from probes.burnin import kernel_log as soak_kernel
from probes.burnin import smi as soak_smi
from probes.burnin import stats as soak_stats

FIX = Path(__file__).resolve().parents[1] / "fixtures"


def kmsg_records():
    """The fixture split into records the way read() on /dev/kmsg returns them (continuation lines included)."""
    records, cur = [], None
    for line in (FIX / "kmsg" / "burnin_kmsg_records.txt").read_text().splitlines():
        if line.startswith(" ") and cur is not None:
            cur += "\n" + line
            continue
        if cur is not None:
            records.append(cur + "\n")
        cur = line
    records.append(cur + "\n")
    return records


def test_kmsg_records_parse_with_priority_sequence_and_time():
    recs = [soak_kernel.parse_record(r) for r in kmsg_records()]
    assert len(recs) == 13
    aer = recs[6]
    assert aer == {"prio": 3, "facility": 0, "seq": 90217, "usec": 1739102711802,
                   "message": "pcieport 0000:17:00.0: AER: Multiple Corrected error received: 0000:18:00.0"}
    assert soak_kernel.parse_record("no record here") is None
    assert soak_kernel.parse_record("x,y,z;text") is None


def test_xid_sxid_and_aer_lines_are_classified():
    found = [soak_kernel.classify(r["message"]) for r in map(soak_kernel.parse_record, kmsg_records())]
    kinds = [(f["kind"], f.get("code"), f.get("severity")) if f else None for f in found]
    assert kinds == [None, ("xid", 13, None), ("xid", 13, None), ("sxid", 12028, None), ("sxid", 12028, None),
                     ("sxid", 12028, None), ("aer", None, "corrected"), ("aer", None, "corrected"),
                     ("aer", None, "uncorrected_nonfatal"), ("sxid", 20034, None), ("xid", 79, None), None, None]
    assert found[1]["pci"] == "0000:18:00" and found[1]["detail"].startswith("pid=81234, name=python3, Graphics SM")
    assert found[3]["device"] == "nvidia-nvswitch3" and found[3]["pci"] == "0000:c6:00.0"
    assert found[3]["fatal"] is False and found[9]["fatal"] is True
    assert found[6]["pci"] == "0000:17:00.0" and found[6]["device"] == "pcieport"
    assert found[7]["device"] == "nvidia" and found[7]["pci"] == "0000:18:00.0"
    assert found[10]["detail"] == "pid=1912, name=nvidia-smi, GPU has fallen off the bus."


def test_dmesg_lines_of_the_audit_fixture_classify_the_same():
    lines = (FIX / "audit" / "dmesg-iso_h100_xids.txt").read_text().splitlines()
    xids = []
    for line in lines:
        _, _, message = line.partition(" ")  # ISO timestamp first
        found = soak_kernel.classify(message)
        if found:
            xids.append((found["kind"], found.get("code") or found.get("severity")))
    assert xids == [("xid", 31), ("xid", 13), ("xid", 13), ("xid", 63), ("xid", 94), ("aer", "uncorrected_nonfatal"),
                    ("xid", 79)]
    assert soak_kernel.parse_dmesg_line("[  123.456789] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x") == (
        123.456789, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, x")


def test_one_fault_logged_over_several_lines_is_one_event():
    events = []
    for r in map(soak_kernel.parse_record, kmsg_records()):
        ev = soak_kernel.event(r["message"], r["usec"] / 1e6, r["prio"], r["seq"])
        if ev:
            events.append(ev)
    merged = soak_kernel.merge_events(events)
    assert [(e["kind"], e.get("code") or e.get("severity"), e["lines"]) for e in merged] == [
        ("xid", 13, 2), ("sxid", 12028, 3), ("aer", "corrected", 1), ("aer", "corrected", 1),
        ("aer", "uncorrected_nonfatal", 1), ("sxid", 20034, 1), ("xid", 79, 1)]
    assert merged[1]["line"].endswith("Link 32 egress non-posted PRIV error (First)")
    assert merged[0]["t"] == pytest.approx(1738822.912337)


def test_kmsg_reader_reports_why_it_cannot_read(tmp_path):
    reader = soak_kernel.KmsgReader(str(tmp_path / "missing"))
    assert reader.read_new() == [] and reader.error.startswith("cannot read %s" % (tmp_path / "missing"))


def test_nvidia_smi_stream_lines_parse_with_missing_values():
    lines = (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
    row = soak_smi.parse_line(lines[1])
    assert row["gpu"] == 1 and row["pci"] == "00000000:2A:00.0" and row["temp_c"] == 45.0
    assert row["power_w"] == 119.31 and row["power_limit_w"] == 700.0 and row["throttle"] == 0x1
    assert row["ecc_uncorrected"] == 0 and row["ecc_corrected"] is None  # [N/A]
    assert soak_smi.parse_line("") is None and soak_smi.parse_line("index, name") is None
    assert soak_smi.reasons(0x24) == ["sw_power_cap", "sw_thermal"]


def test_sampling_the_recorded_stream_per_interval():
    lines = (FIX / "nvidia-smi" / "h100_2x_burnin_query_lms1000.csv").read_text().splitlines()
    samples = soak_smi.sample_stream(lines, 5.0)
    assert len(samples) == 8  # 20 ticks of 1 s, windows of 5 s, two GPUs
    by = {(s["gpu"], i // 2): s for i, s in enumerate(samples)}
    first0, last1 = by[(0, 0)], by[(1, 3)]
    assert first0["rows"] == 5 and first0["temp_c"] == 52 and first0["sm_min_mhz"] == 1755
    assert first0["power_max_w"] == 688.52 and first0["power_limit_w"] == 700.0
    assert first0["throttle_reasons"] == ["gpu_idle", "sw_power_cap"] and first0["slowdown_share"] == 0
    # GPU 1 is slowed by heat from 09:20:14 to :16: 1 tick in the third window, 2 in the fourth
    assert by[(1, 2)]["slowdown_share"] == 0.2 and last1["slowdown_share"] == 0.4
    assert last1["sm_min_mhz"] == 1410 and "sw_thermal" in last1["throttle_reasons"]
    assert by[(0, 3)]["slowdown_share"] == 0 and by[(0, 3)]["power_cap_share"] == 1.0
    flags = [s["slowdown_share"] > 0 for s in samples if s["gpu"] == 1]
    assert soak_stats.episodes(flags) == 1
    clocks = [s["sm_mhz"] for s in samples if s["gpu"] == 1]
    assert soak_stats.degradation_pct(clocks) == pytest.approx((clocks[0] - clocks[-1]) / clocks[0] * 100)


def test_degradation_math():
    assert soak_stats.tenths([]) == (None, None)
    assert soak_stats.tenths([10, None, 20]) == (10.0, 20.0)  # a tenth is at least one value
    values = [100.0] * 10 + [90.0] * 80 + [70.0] * 10
    assert soak_stats.tenths(values) == (100.0, 70.0)
    assert soak_stats.degradation_pct(values) == pytest.approx(30.0)
    assert soak_stats.degradation_pct([70.0] * 10 + [100.0] * 10) == 0.0  # rose: not degraded
    assert soak_stats.change_pct(0, 5) is None and soak_stats.change_pct(50, 60) == pytest.approx(20.0)
    assert soak_stats.episodes([False, True, True, False, True, False]) == 2
    assert soak_stats.episodes([]) == 0
    assert soak_stats.min_avg_max([3, None, 1, 2]) == (1.0, 2.0, 3.0)


def test_fio_status_stream_gives_per_interval_bandwidth():
    text = (FIX / "fio" / "soak_status_interval_seq_mixed.out").read_text()
    stream = soak_fio.StatusStream("seq_mixed", 2, 1)
    recs = []
    for i in range(0, len(text), 700):  # as the pipe delivers it: in pieces
        recs += stream.feed(text[i:i + 700])
    final = stream.finish(0)
    assert len(recs) == 4 and all(r["type"] == "fio" for r in recs)
    # second interval: (9250537472 - 3753902080) bytes read in 0.999 s
    assert recs[1]["read_mibps"] == pytest.approx((9250537472 - 3753902080) / 0.999 / 2 ** 20, rel=1e-3)
    assert recs[1]["t"] - recs[1]["t_start"] == pytest.approx(0.999)
    # the interval totals add up to what fio moved
    assert sum(r["read_mibps"] * (r["t"] - r["t_start"]) for r in recs[1:]) * 2 ** 20 == pytest.approx(
        15678308352 - 3753902080, rel=1e-3)
    assert final[0]["type"] == "fio_phase" and final[0]["fio_error"] == 0 and final[0]["read_mibps"] > 0


def test_fio_job_text_for_the_two_phases():
    spec = {"phase_s": 450, "size_mib": 64}
    seq = soak_fio.job_text("seq_mixed", "/data/x", 8, spec)
    assert "rw=rw\n" in seq and "bs=1m\n" in seq and "numjobs=8\n" in seq and "runtime=450s\n" in seq
    assert "rwmixread=50\n" in seq and "time_based=1" in seq and "direct=0" in seq
    rnd = soak_fio.job_text("rand_mixed", "/data/x", 1, dict(spec, direct=True))
    assert "rw=randrw\n" in rnd and "bs=64k\n" in rnd and "ioengine=libaio" in rnd and "direct=1" in rnd
    assert "bs=4k\n" in soak_fio.job_text("rand_mixed", "/d", 1, spec)
