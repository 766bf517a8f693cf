"""Burn-in parsing and math: kernel-log lines (XID, SXID, AER in their real formats), the nvidia-smi -lms query
stream reduced per interval, fio's periodic JSON status turned into per-interval bandwidth, degradation math.

Fixtures: tests/fixtures/kmsg/burnin_kmsg_records.txt (/dev/kmsg records in the kernel's format; the XID and AER
lines are the real lines of tests/fixtures/audit/dmesg-iso_h100_xids.txt, the SXID lines NVSwitch's three-line form),
tests/fixtures/nvidia-smi/h100_2x_burnin_query_lms1000.csv (the stream's format, two H100 GPUs going from idle into
a load), tests/fixtures/fio/soak_status_interval_seq_mixed.out (fio 3.33, recorded on this machine with the job
file beside it), public fio 3.7 and 3.1 JSON (sources in tests/fixtures/fio/README.md).
"""

import json
from pathlib import Path

import pytest

from probes.burnin import fio as soak_fio
from probes.burnin import smi as soak_smi
from probes.burnin import stats as soak_stats
from probes.common import kernel_log as soak_kernel

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
                     ("aer", None, "uncorrected_nonfatal"), ("sxid", 20034, None), ("xid", 79, None),
                     ("fallen_off_bus", None, None), None]
    assert found[1]["pci"] == "0000:18:00" and found[1]["detail"].startswith("pid=81234, name=python3, Graphics SM")
    assert found[3]["device"] == "nvidia-nvswitch3" and found[3]["pci"] == "0000:c6:00.0"
    assert found[3]["fatal"] is False and found[9]["fatal"] is True
    assert [found[i]["part"] for i in (3, 4, 5)] == ["headline", "severity", "data"]
    assert [found[i]["fatal"] for i in (3, 4, 5)] == [False, False, None]  # Severity 0: non-fatal; Data: says nothing
    assert found[11]["pci"] == "0000:ab:00.0"
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
                    ("xid", 79), ("fallen_off_bus", None)]
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
        ("aer", "uncorrected_nonfatal", 1), ("sxid", 20034, 1), ("xid", 79, 2)]
    assert merged[1]["line"].endswith("Link 32 egress non-posted PRIV error (First)") and merged[1]["fatal"] is False
    assert merged[5]["fatal"] is True
    # "GPU has fallen off the bus" after XID 79 on the same GPU is that XID's second line, not a fault of its own
    assert merged[6]["line"].startswith("NVRM: Xid (PCI:0000:ab:00): 79")
    assert merged[0]["t"] == pytest.approx(1738822.912337)


def dmesg_events(name):
    """The classified messages of a dmesg capture of tests/fixtures/kmsg (continuation lines joined)."""
    events = []
    for t, message in soak_kernel.dmesg_messages((FIX / "kmsg" / name).read_text()):
        ev = soak_kernel.event(message, t)
        if ev:
            events.append(ev)
    return events


def test_fatal_sxid_record_takes_the_fatal_flag_and_the_headline_from_all_its_lines():
    [rec] = soak_kernel.merge_events(dmesg_events("dmesg_sxid20034_record.txt"))
    assert (rec["kind"], rec["code"], rec["pci"], rec["device"], rec["fatal"], rec["lines"]) == (
        "sxid", 20034, "0000:a9:00.0", "nvidia-nvswitch0", True, 3)
    assert rec["line"] == "nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM Fault Up"
    assert rec["t"] == pytest.approx(131453.740743)
    # Read from its Data line on (the headline logged before the reader opened /dev/kmsg): the Severity line gives
    # the fatal flag and is the record's text, whatever the order of the lines
    data_line, severity_line = dmesg_events("dmesg_sxid20034_record.txt")[2:0:-1]
    [part] = soak_kernel.merge_events([dict(data_line, t=1.0), dict(severity_line, t=1.1)])
    assert part["fatal"] is True and part["lines"] == 2 and part["part"] == "severity"
    assert part["line"].endswith("20034, Severity 1 Engine instance 30 Sub-engine instance 00")


def test_interleaved_sxids_of_three_switches_and_an_xid_79_are_one_record_per_link_fault():
    merged = soak_kernel.merge_events(dmesg_events("dmesg_sxid20034_xid79_hgx.txt"))
    assert [(e["kind"], e["code"], e["pci"], e.get("fatal"), e["lines"]) for e in merged] == [
        ("xid", 79, "0000:91:00", None, 2),  # with "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."
        ("sxid", 20034, "0000:06:00.0", True, 1),
        ("sxid", 20034, "0000:05:00.0", True, 2),  # Link 63 and its Data line
        ("sxid", 20034, "0000:07:00.0", True, 1),  # a Severity 1 line whose headline is before the capture
        ("sxid", 20034, "0000:07:00.0", True, 2),  # Link 37 and its Severity line
        ("sxid", 20034, "0000:05:00.0", True, 2)]  # Link 62 and its Severity line
    assert [e["line"].split(": 20034, ")[-1] for e in merged[1:]] == [
        "Fatal, Link 48 LTSSM Fault Up", "Fatal, Link 63 LTSSM Fault Up",
        "Severity 1 Engine instance 60 Sub-engine instance 00", "Fatal, Link 37 LTSSM Fault Up",
        "Fatal, Link 62 LTSSM Fault Up"]
    # the NVRM lines around the XID (GPU UUID, board serial) are no records
    assert soak_kernel.classify("NVRM: GPU at PCI:0000:91:00: GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b") is None
    assert soak_kernel.classify("NVRM: GPU 0000:91:00.0: GPU serial number is 1653723052734.") is None


def test_gpu_that_failed_to_initialise_is_one_record_with_its_error_code():
    events = dmesg_events("dmesg_rminitadapter_failed.txt")
    assert [e["kind"] for e in events] == ["gpu_init_failed", "gpu_init_failed"]  # the GSP assertion lines: none
    [rec] = soak_kernel.merge_events(events[::-1])  # the RmInitAdapter line is the text whatever comes first
    assert (rec["kind"], rec["pci"], rec["lines"]) == ("gpu_init_failed", "0000:01:00.0", 2)
    assert rec["line"] == "NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)"
    assert rec["detail"] == "RmInitAdapter failed! (0x62:0xffff:1863)"


def fallen_off_message():
    """The journalctl capture's NVRM message over its three lines (the later ones without a timestamp)."""
    lines = (FIX / "kmsg" / "journalctl_fallen_off_bus_no_xid.txt").read_text().splitlines()
    return "\n".join([lines[1].split("kernel: ", 1)[1]] + [ln.strip() for ln in lines[2:4]])


def test_gpu_fallen_off_the_bus_without_an_xid_from_journalctl_dmesg_and_kmsg():
    message = fallen_off_message()
    found = soak_kernel.classify(message)
    assert (found["kind"], found["pci"]) == ("fallen_off_bus", "0000:01:00.0")
    assert found["detail"] == ("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:13b6) installed in this system has "
                               "fallen off the bus and is not responding to commands.")
    # its first line alone (what a reader of timestamped lines only saw) still names the GPU, not the fault
    assert soak_kernel.classify("NVRM: The NVIDIA GPU 0000:01:00.0") is None
    # dmesg prints the later lines indented, without a timestamp: joined to their message
    dmesg = "[14387.209961] " + message.replace("\n", "\n               ")
    [(t, joined)] = soak_kernel.dmesg_messages(dmesg + "\n")
    assert t == 14387.209961 and soak_kernel.classify(joined)["kind"] == "fallen_off_bus"
    # /dev/kmsg gives the message as one record, its newlines escaped as \x0a
    rec = soak_kernel.parse_record("3,90301,14387209961,-;%s\n" % message.replace("\n", "\\x0a"))
    assert rec["message"] == message
    ev = soak_kernel.event(rec["message"], 100.0, rec["prio"], rec["seq"])
    assert ev["kind"] == "fallen_off_bus" and ev["line"] == found["detail"]
    [merged] = soak_kernel.merge_events([ev])
    assert merged["kind"] == "fallen_off_bus" and merged["lines"] == 1


def test_aer_lines_of_old_and_new_kernels():
    def sev(name):
        out = []
        for line in (FIX / "kmsg" / name).read_text().splitlines():
            found = soak_kernel.classify(line.replace("kernel: ", "", 1))
            out.append(found and (found["pci"], found["severity"]))
        return out
    assert sev("journalctl_aer_correctable_uncorrectable_fatal.txt") == [
        ("0000:00:1b.2", "corrected"), ("0000:03:04.0", "corrected"), None, None,
        ("0000:00:1b.2", "uncorrected_fatal"), ("0000:03:04.0", "uncorrected_fatal"),
        None, None, None, None, None]  # the recovery lines after a fatal error are no records of their own
    assert sev("dmesg_aer_corrected_rhel6.txt") == [("0000:00:01.0", "corrected"), ("0000:00:01.0", "corrected"),
                                                    None, None]
    assert soak_kernel.classify("pcieport 0000:00:01.0: AER: enabled with IRQ 26") is None


def test_a_line_naming_an_xid_that_does_not_read_is_unparsed_and_free_text_is_no_record():
    found = soak_kernel.classify("NVRM: Xid (PCI:0000:18:00): GPU has fallen off the bus.")
    assert found == {"kind": "unparsed", "detail": "NVRM: Xid (PCI:0000:18:00): GPU has fallen off the bus."}
    assert soak_kernel.classify("nvidia-nvswitch0: SXid (PCI:0000:a9:00.0) 20034 Fatal")["kind"] == "unparsed"
    assert soak_kernel.classify("mlx5_core 0000:19:00.0: FWTracer: Ownership granted and active") is None
    [rec] = soak_kernel.merge_events([soak_kernel.event("NVRM: Xid (PCI:0000:18:00): truncated", 5.0)])
    assert rec["kind"] == "unparsed" and rec["line"] == "NVRM: Xid (PCI:0000:18:00): truncated"


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
    # four documents: three whole intervals, then fio's final one 0.206 s after its last status one, a partial
    # interval left out of the series (it read 7,602 MiB/s against ~10,500 and made a 16.9 % "degradation" of the
    # last tenth); its I/O stays in the phase's totals
    assert len(recs) == 3 and all(r["type"] == "fio" for r in recs)
    # second interval: (9250537472 - 3753902080) bytes read in 0.999 s
    assert recs[1]["read_mibps"] == pytest.approx((9250537472 - 3753902080) / 0.999 / 2 ** 20, rel=1e-3)
    assert recs[1]["t"] - recs[1]["t_start"] == pytest.approx(0.999)
    # the whole intervals add up to what fio moved up to its last status document
    assert sum(r["read_mibps"] * (r["t"] - r["t_start"]) for r in recs[1:]) * 2 ** 20 == pytest.approx(
        14854127616 - 3753902080, rel=1e-3)
    totals = [r["read_mibps"] + r["write_mibps"] for r in recs]
    assert soak_stats.degradation_pct(totals) == 0
    assert final[0]["type"] == "fio_phase" and final[0]["fio_error"] == 0 and final[0]["read_mibps"] > 0
    # a phase shorter than one status interval has only fio's final document: it is the phase's one interval
    short = soak_fio.StatusStream("seq_mixed", 2, 5)
    assert len(short.feed(text[text.rfind('{\n  "fio version"'):])) == 1


def test_fio_3_7_final_document_without_job_runtime_is_the_phases_interval():
    """fio 3.7 (real capture, tests/fixtures/fio/README.md) has no job_runtime: the read and write runtimes say how
    long the job ran. Before, the interval had no length and a phase shorter than one status interval recorded
    nothing."""
    text = (FIX / "fio" / "fio-3.7-randrw-rwmixread70-4k-psync-no-clat-N-no-job-runtime.json").read_text()
    stream = soak_fio.StatusStream("rand_mixed", 1, 60)
    [rec] = stream.feed(text)
    assert rec["t"] - rec["t_start"] == pytest.approx(30.001)
    assert rec["read_mibps"] == pytest.approx(482041856 / 30.001 / 2 ** 20, abs=1e-3)  # 15.323
    assert rec["write_mibps"] == pytest.approx(205959168 / 30.001 / 2 ** 20, abs=1e-3)  # 6.547
    assert rec["read_iops"] == pytest.approx(117686 / 30.001, abs=0.1)


def test_fio_3_1_phase_totals_have_the_bandwidth_fio_printed_without_bw_bytes():
    """fio 3.1 (gVisor's sample, tests/fixtures/fio/README.md) has no bw_bytes: the phase's write MiB/s is io_bytes
    over runtime, not 0; a side with no bandwidth field at all is an error naming fio and what it lacks."""
    text = (FIX / "fio" / "fio-3.1-write-4k-sync-no-bw_bytes-gvisor-sample.json").read_text()
    stream = soak_fio.StatusStream("seq_mixed", 1, 60)
    stream.feed(text)
    [fin] = stream.finish(0)
    assert fin["write_mibps"] == pytest.approx(1073741824 * 1000 / 598 / 2 ** 20, abs=1e-3)  # 1712.375
    assert fin["read_mibps"] == 0.0 and "error" not in fin
    doc = json.loads(text)
    del doc["jobs"][0]["write"]["io_bytes"], doc["jobs"][0]["write"]["bw"]
    broken = soak_fio.StatusStream("seq_mixed", 1, 60)
    broken.feed(json.dumps(doc))
    [fin] = broken.finish(0)
    assert "write_mibps" not in fin and fin["read_mibps"] == 0.0
    assert fin["error"] == "fio fio-3.1: no write bandwidth: its JSON has no bw_bytes, no io_bytes with runtime and " \
                           "no bw"


def test_fio_2_status_documents_have_no_time_and_the_phase_says_so():
    """fio 2.2.10's JSON (real capture, tests/fixtures/fio/README.md) has no timestamp_ms: no interval can be timed,
    and the phase is an error that says why; its totals are in bytes (fio 2 counts io_bytes in KiB). Before, every
    document had time 0 and the phase recorded nothing, without a word."""
    text = (FIX / "fio" / "fio-2.2.10-randwrite-4k-libaio-kib-usec-readme.json").read_text()
    stream = soak_fio.StatusStream("rand_mixed", 1, 60)
    assert stream.feed(text + text) == []
    [fin] = stream.finish(0)
    assert fin["write_mibps"] == pytest.approx(37500272 * 1024 * 1000 / 600008 / 2 ** 20, abs=1e-3)  # 61.034
    assert fin["write_clat_p99_us"] == 8640.0
    assert fin["error"] == ("fio-2.2.10: its status documents have no timestamp_ms, so the phase's intervals have no "
                            "rate (the soak's timeline needs fio 3.0 or later)")


def test_fio_job_text_for_the_two_phases():
    spec = {"phase_s": 450, "size_mib": 64}
    seq = soak_fio.job_text("seq_mixed", "/data/x", 8, spec)
    assert "rw=rw\n" in seq and "bs=1m\n" in seq and "numjobs=8\n" in seq and "runtime=450s\n" in seq
    assert "rwmixread=50\n" in seq and "time_based=1" in seq and "direct=0" in seq
    rnd = soak_fio.job_text("rand_mixed", "/data/x", 1, dict(spec, direct=True))
    assert "rw=randrw\n" in rnd and "bs=64k\n" in rnd and "ioengine=libaio" in rnd and "direct=1" in rnd
    assert "bs=4k\n" in soak_fio.job_text("rand_mixed", "/d", 1, spec)
