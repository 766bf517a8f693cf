"""fio job generation for every sweep point, fio JSON parsing (plain and client/server), aggregation across clients.
Fixtures are real fio 3.33 outputs: tests/fixtures/fio/ (client/server ones made by probes/storage/fio_sweep.py over two
fio servers on 127.0.0.1 and 127.0.0.2), and public fio 3.16, 3.7 and 3.1 JSON (tests/fixtures/fio/README.md)."""

import configparser
import json
from pathlib import Path

import pytest

from probes.storage import fio as storage_fio

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "fio"
NAMES = {"127.0.0.1,18765": "hostA", "127.0.0.2,18765": "hostB"}


def parse_job(text):
    cp = configparser.ConfigParser(allow_no_value=True, delimiters=("=",), interpolation=None)
    cp.optionxform = str
    cp.read_string(text)
    return cp


@pytest.mark.parametrize("name", list(storage_fio.WORKLOADS))
def test_job_file_for_every_sweep_and_endurance_point(name):
    """The seed's sweep: 1 MiB sequential, 4 KiB buffered random, 64 KiB direct random; direct=1 only when direct."""
    text = storage_fio.job_file([name], "/data/t/h1", 64, 2.5, numjobs=3, ramp_s=1)
    cp = parse_job(text)
    g, job = cp["global"], cp[name]
    assert g["directory"] == "/data/t/h1" and g["size"] == "64m" and g["numjobs"] == "3"
    assert g["runtime"] == "2500ms" and g["ramp_time"] == "1s" and g["time_based"] == "1"
    assert g["group_reporting"] == "1" and g["filename_format"] == "cmxa-fio.$jobnum"
    rw, bs, direct, op = storage_fio.workload_spec(name)
    assert job["rw"] == rw and job["direct"] == str(direct)
    expected_bs = "1m" if "seq" in name else ("64k" if direct else "4k")
    assert job["bs"] == expected_bs == bs
    assert job["ioengine"] == ("libaio" if direct else "psync")
    assert job["iodepth"] == ("16" if direct else "1")
    assert ("end_fsync" in job) == (op == "write" and not direct)
    assert job.get("rwmixread") == ("50" if op == "mixed" else None)
    assert "stonewall" not in job  # the first job of a file starts at once


def test_one_job_file_runs_all_workloads_in_turn():
    names = list(storage_fio.WORKLOADS)
    cp = parse_job(storage_fio.job_file(names, "/x", 16, 1))
    assert cp.sections()[1:] == names
    for name in names[1:]:
        assert "stonewall" in cp[name] and "new_group" in cp[name]
    assert "ramp_time" not in cp["global"]


def sections(text):
    """[(section name, {key: value})] of a job file in order, repeated names kept (fio allows them)."""
    out = []
    for line in text.splitlines():
        if line.startswith("["):
            out.append((line[1:-1], {}))
        elif "=" in line:
            key, value = line.split("=", 1)
            out[-1][1][key] = value
    return out


@pytest.mark.parametrize("direct", [1, 0])
def test_prefill_writes_the_sweeps_files_in_full_untimed(direct):
    """The prefill writes clones 2 and 3 (a client count's new files) whole: sequential 1 MiB writes of the
    sweep's size, not time based (a time-based write stops at its runtime and leaves fallocated space), one
    section per file named as job_file's clone of that number; direct where the tier allows, else buffered with
    end_fsync so that the data is on the tier before the first timed window."""
    text = storage_fio.prefill_job_file("/data/t/h1", 64, [2, 3], direct=direct, direct_engine="libaio",
                                        direct_iodepth=8)
    (g_name, g), *jobs = sections(text)
    assert g_name == "global" and g["directory"] == "/data/t/h1" and g["size"] == "64m"
    assert g["rw"] == "write" and g["bs"] == "1m" and g["direct"] == str(direct) and g["group_reporting"] == "1"
    assert not {"time_based", "runtime", "ramp_time", "numjobs", "filename_format", "rate"} & set(g)
    assert (g["ioengine"], g["iodepth"], g.get("end_fsync")) == (("libaio", "8", None) if direct else
                                                                 ("psync", "1", "1"))
    sweep = parse_job(storage_fio.job_file(["seq_read_direct"], "/data/t/h1", 64, 1, numjobs=4))["global"]
    assert [(name, job["filename_format"]) for name, job in jobs] == [
        (storage_fio.PREFILL_JOB, sweep["filename_format"].replace("$jobnum", str(c))) for c in (2, 3)]
    assert all(set(job) == {"filename_format"} for _, job in jobs)


def test_unknown_workload_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="seq_read_buffered"):
        storage_fio.job_file(["seq_read_fast"], "/x", 16, 1)


@pytest.mark.parametrize("clients,expected", [
    (1, {"a": 1}), (2, {"a": 1, "b": 1}), (4, {"a": 1, "b": 1, "c": 1, "d": 1}),
    (8, {"a": 2, "b": 2, "c": 2, "d": 2}), (6, {"a": 2, "b": 2, "c": 1, "d": 1}),
])
def test_clients_spread_over_hosts(clients, expected):
    assert storage_fio.split_clients(clients, ["a", "b", "c", "d"]) == expected


def test_plain_fio_json():
    [entry] = storage_fio.parse_output((FIX / "local_seq_read.json").read_text())
    doc = json.loads((FIX / "local_seq_read.json").read_text())
    read = doc["jobs"][0]["read"]
    assert entry["client"] is None and entry["workload"] == "seq_read" and entry["error"] == 0
    assert entry["read"]["bw_bytes"] == read["bw_bytes"] > 0
    assert entry["read"]["iops"] == pytest.approx(read["iops"])
    assert entry["read"]["clat_p99_us"] == read["clat_ns"]["percentile"]["99.000000"] / 1000
    assert entry["read"]["clat_mean_us"] == pytest.approx(read["clat_ns"]["mean"] / 1000)
    assert entry["write"]["bw_bytes"] == 0


def test_client_server_output_with_server_text_before_the_json():
    text = (FIX / "clientserver_sweep_c2.out").read_text()
    assert text.startswith("<")  # the servers' text lines come first, as fio prints them
    entries = storage_fio.parse_output(text, NAMES)
    assert {e["client"] for e in entries} == {"hostA", "hostB"}
    assert sorted({e["workload"] for e in entries}) == sorted(storage_fio.SWEEP_WORKLOADS)
    assert len(entries) == 2 * len(storage_fio.SWEEP_WORKLOADS)
    assert all(e["error"] == 0 for e in entries)
    for e in entries:
        op = storage_fio.workload_spec(e["workload"])[3]
        other = "read" if op == "write" else "write"
        assert e[op]["bw_bytes"] > 0 and e[op]["iops"] > 0 and e[op]["clat_p50_us"] > 0
        assert e[other]["bw_bytes"] == 0


def test_client_server_names_fall_back_to_address_and_port():
    entries = storage_fio.parse_output((FIX / "clientserver_sweep_c2.out").read_text())
    assert {e["client"] for e in entries} == {"127.0.0.1,18765", "127.0.0.2,18765"}


def test_all_clients_entry_is_dropped_and_the_sum_matches_fios_own():
    text = (FIX / "clientserver_2clients_allclients.json").read_text()
    entries = storage_fio.parse_output(text)
    assert len(entries) == 2 and all(e["workload"] == "seq_read" for e in entries)
    doc = storage_fio.extract_json(text)
    fio_all = next(j for j in doc["client_stats"] if j["jobname"] == "All clients")
    # aggregate() needs a sweep workload name: relabel the fixture's job as one
    for e in entries:
        e["workload"] = "seq_read_buffered"
    agg, per_client = storage_fio.aggregate(entries, "seq_read_buffered")
    assert len(per_client) == 2
    assert agg["bw_bytes"] == sum(e["read"]["bw_bytes"] for e in entries)
    # fio divides the summed bytes by the longest runtime; the sum of per-client rates is within 1 % of it
    assert agg["bw_bytes"] == pytest.approx(fio_all["read"]["bw_bytes"], rel=0.01)
    assert agg["iops"] == pytest.approx(fio_all["read"]["iops"], rel=0.01)
    assert agg["clat_mean_us"] == pytest.approx(fio_all["read"]["clat_ns"]["mean"] / 1000, rel=0.01)


def test_aggregate_across_clients_of_a_sweep_point():
    entries = storage_fio.parse_output((FIX / "clientserver_sweep_c3.out").read_text(), NAMES)
    for name in storage_fio.SWEEP_WORKLOADS:
        agg, per_client = storage_fio.aggregate(entries, name)
        op = agg["op"]
        sides = [e[op] for e in per_client]
        assert agg["clients"] == 2 and agg["errors"] == 0
        assert agg["bw_bytes"] == pytest.approx(sum(s["bw_bytes"] for s in sides))
        assert agg["iops"] == pytest.approx(sum(s["iops"] for s in sides))
        # percentiles: the worst client; mean: weighted by I/O count, so between the clients' means
        assert agg["clat_p99_us"] == max(s["clat_p99_us"] for s in sides)
        assert min(s["clat_mean_us"] for s in sides) <= agg["clat_mean_us"] <= max(s["clat_mean_us"] for s in sides)
    assert storage_fio.aggregate(entries, "seq_read_direct")[0]["op"] == "read"
    assert storage_fio.aggregate([], "seq_read_direct") == (None, [])


def test_three_clients_on_two_hosts_gives_one_host_two_jobs():
    jobs = (FIX / "clientserver_sweep_c3.jobs.txt").read_text()
    assert "# host hostA" in jobs and "# host hostB" in jobs
    a, b = jobs.split("# host hostB")
    assert "numjobs=2" in a and "numjobs=1" in b
    entries = storage_fio.parse_output((FIX / "clientserver_sweep_c3.out").read_text(), NAMES)
    a_read = next(e for e in entries if e["client"] == "hostA" and e["workload"] == "seq_read_buffered")
    assert a_read["read"]["ios"] > 0


def test_no_json_is_a_clear_error():
    with pytest.raises(ValueError, match="no JSON"):
        storage_fio.parse_output("fio: failed to connect to 10.0.0.1:8765\n")


def test_extract_json_skips_warnings_and_braces_in_text():
    doc = {"jobs": [], "fio version": "fio-3.33"}
    text = "fio: option <x> {ignored}\n<host> {not json\n" + json.dumps(doc) + "\n"
    assert storage_fio.extract_json(text) == doc


def test_a_mixed_workload_counts_its_reads_and_writes_together():
    """clientserver_endurance_mixed_c2.out: fio 3.33, the endurance workloads (rwmixread=50, direct, libaio) from the
    job files beside it, over two fio servers on 127.0.0.1 and 127.0.0.2, recorded on this machine."""
    entries = storage_fio.parse_output((FIX / "clientserver_endurance_mixed_c2.out").read_text(), NAMES)
    assert sorted((e["client"], e["workload"]) for e in entries) == sorted(
        (h, w) for h in ("hostA", "hostB") for w in storage_fio.ENDURANCE_WORKLOADS)
    for e in entries:
        r, w, both = e["read"], e["write"], e["mixed"]
        assert r["bw_bytes"] > 0 and w["bw_bytes"] > 0  # half of each, by rwmixread=50
        assert both["bw_bytes"] == r["bw_bytes"] + w["bw_bytes"] and both["iops"] == r["iops"] + w["iops"]
        assert both["clat_p99_us"] == max(r["clat_p99_us"], w["clat_p99_us"])
        assert min(r["clat_mean_us"], w["clat_mean_us"]) <= both["clat_mean_us"] <= max(r["clat_mean_us"],
                                                                                         w["clat_mean_us"])
    for name in storage_fio.ENDURANCE_WORKLOADS:
        agg, per_client = storage_fio.aggregate(entries, name)
        assert agg["op"] == "mixed" and agg["clients"] == 2
        assert agg["bw_bytes"] == pytest.approx(sum(e["read"]["bw_bytes"] + e["write"]["bw_bytes"]
                                                    for e in per_client))
        assert agg["clat_p99_9_us"] == max(max(e["read"]["clat_p99_9_us"], e["write"]["clat_p99_9_us"])
                                           for e in per_client)
    jobs = (FIX / "clientserver_endurance_mixed_c2.jobs.txt").read_text()
    assert jobs.count("rwmixread=50") == 4 and jobs.count("direct=1") == 4


def with_job_start(text, starts):
    """A real client/server capture as fio newer than 3.33 writes it: each client_stats entry with `job_start`, the
    wall-clock ms at which its measured window began (starts: {(host addr, workload): ms})."""
    doc = storage_fio.extract_json(text)
    for job in doc["client_stats"]:
        if job["jobname"] != "All clients":
            job["job_start"] = starts[(job["hostname"], job["jobname"])]
    return doc


def test_window_overlap_is_measured_from_fios_job_start():
    """clientserver_sweep_c3.out (fio 3.33) has no job_start: the overlap is unknown. With job_start, as later fio
    reports it, a host that began a workload 700 ms late (its previous write took longer to end) shares only part of
    its window with the other; a host 20 ms late shares nearly all of it."""
    text = (FIX / "clientserver_sweep_c3.out").read_text()
    for name in storage_fio.SWEEP_WORKLOADS:
        assert storage_fio.aggregate(storage_fio.parse_output(text, NAMES), name)[0]["window_overlap"] is None
    t0 = 1796017061000
    late = {"seq_read_direct": 700}  # the other workloads: 20 ms apart
    starts = {(addr, name): t0 + 10000 * i + (late.get(name, 20) if addr == "127.0.0.2" else 0)
              for i, name in enumerate(storage_fio.SWEEP_WORKLOADS) for addr in ("127.0.0.1", "127.0.0.2")}
    entries = storage_fio.parse_output(with_job_start(text, starts), NAMES)
    for name in storage_fio.SWEEP_WORKLOADS:
        agg, per_client = storage_fio.aggregate(entries, name)
        op = agg["op"]
        a, b = sorted(per_client, key=lambda e: e["client"])
        assert b["job_start_ms"] - a["job_start_ms"] == late.get(name, 20)
        shared = min(a["job_start_ms"] + a[op]["runtime_ms"], b["job_start_ms"] + b[op]["runtime_ms"]) \
            - b["job_start_ms"]
        assert agg["window_overlap"] == pytest.approx(shared / max(a[op]["runtime_ms"], b[op]["runtime_ms"]))
        assert (agg["window_overlap"] < 0.9) == (name in late)
    # windows that never met share nothing (not a negative fraction)
    apart = storage_fio.parse_output(with_job_start(text, {k: v + (5000 if k[0] == "127.0.0.2" else 0)
                                                           for k, v in starts.items()}), NAMES)
    assert storage_fio.aggregate(apart, "seq_read_direct")[0]["window_overlap"] == 0.0


def test_a_point_whose_windows_did_not_overlap_records_no_aggregate():
    """The sweep's own recording: the point whose hosts ran 700 ms apart gets no aggregate and a failure naming the
    shared fraction; the others keep their aggregate (the hosts' sum) and every point its per-client numbers."""
    from probes.artifact import Artifact
    from probes.storage import fio_sweep

    text = (FIX / "clientserver_sweep_c3.out").read_text()
    starts = {(addr, name): 1796017061000 + 10000 * i + ((700 if name == "seq_read_direct" else 20)
                                                         if addr == "127.0.0.2" else 0)
              for i, name in enumerate(storage_fio.SWEEP_WORKLOADS) for addr in ("127.0.0.1", "127.0.0.2")}
    entries = storage_fio.parse_output(with_job_start(text, starts), NAMES)
    art = Artifact("fio_sweep", "r1", "hostA", variant="t")
    failures = []
    points = fio_sweep._record(art, {"name": "t"}, 3, {"hostA": 2, "hostB": 1}, list(storage_fio.SWEEP_WORKLOADS),
                               entries, failures)  # at the sweep's default least overlap, 90 %
    assert points == len(storage_fio.SWEEP_WORKLOADS)
    aggregates = {r["labels"]["workload"]: r["value"] for r in art.results
                  if r["metric"] == "fio_bw_bytes" and r["labels"]["scope"] == "aggregate"}
    assert set(aggregates) == set(storage_fio.SWEEP_WORKLOADS) - {"seq_read_direct"}
    for name, value in aggregates.items():
        assert value == pytest.approx(storage_fio.aggregate(entries, name)[0]["bw_bytes"], rel=1e-6)
    clients = {(r["labels"]["workload"], r["labels"]["client"]) for r in art.results
               if r["metric"] == "fio_bw_bytes" and r["labels"]["scope"] == "client"}
    assert clients == {(w, h) for w in storage_fio.SWEEP_WORKLOADS for h in ("hostA", "hostB")}
    overlap = storage_fio.aggregate(entries, "seq_read_direct")[0]["window_overlap"]
    assert failures == ["c3 seq_read_direct: the clients' windows share %.0f%% of the longest (under 90%%): their "
                        "rates were not measured together (no aggregate recorded)" % (100 * overlap)]
    assert art.facts["window_overlap"]["c3 seq_read_direct"] == round(overlap, 3)
    assert all(art.facts["window_overlap"]["c3 %s" % w] >= 0.9 for w in aggregates)


# Older fio JSON, real captures (sources in tests/fixtures/fio/README.md): fio 3.16 (Ubuntu 20.04, DGX OS 5) and 3.7
# print clat_ns without "N"; fio 3.1 has no bw_bytes and no N.
FIO_316 = "fio-3.16-randrw-8k-3groups-no-clat-N-io-perf-readme.json"
FIO_37 = "fio-3.7-randrw-rwmixread70-4k-psync-no-clat-N-no-job-runtime.json"
FIO_31 = "fio-3.1-write-4k-sync-no-bw_bytes-gvisor-sample.json"
FIO_2 = "fio-2.2.10-randwrite-4k-libaio-kib-usec-readme.json"


def relabelled(name, workload):
    """A real capture's entries under a sweep workload name, as aggregate() needs one."""
    entries = storage_fio.parse_output((FIX / name).read_text())
    for e in entries:
        e["workload"] = workload
    return entries


def test_latency_means_without_clat_N_weigh_by_total_ios():
    """fio 3.16 and 3.7 have no clat_ns "N": each side's mean counts by its total_ios (every completed I/O is a
    sample). Before, every weight was 0 and each mean came out 0.0."""
    first = relabelled(FIO_316, "mixed_rand_direct")[0]  # group 0: 1 job, 8 KiB randrw 50/50
    assert "N" not in json.loads((FIX / FIO_316).read_text())["jobs"][0]["read"]["clat_ns"]
    assert first["read"]["clat_n"] == 203828 and first["write"]["clat_n"] == 203868
    # (522.0146 us * 203828 + 190.4022 us * 203868) / 407696
    assert first["mixed"]["clat_mean_us"] == pytest.approx(356.1921, abs=1e-3)
    agg, _ = storage_fio.aggregate([first], "mixed_rand_direct")
    assert agg["clat_mean_us"] == pytest.approx(356.1921, abs=1e-3)
    [read_only] = relabelled(FIO_316, "rand_read_direct")[:1]
    assert storage_fio.aggregate([read_only], "rand_read_direct")[0]["clat_mean_us"] == pytest.approx(522.0146,
                                                                                                      abs=1e-3)
    # three groups (1, 5 and 10 jobs) as three clients: the mean of all 2,505,331 I/Os, read and write
    agg, per_client = storage_fio.aggregate(relabelled(FIO_316, "mixed_rand_direct"), "mixed_rand_direct")
    doc = json.loads((FIX / FIO_316).read_text())
    sides = [j[s] for j in doc["jobs"] for s in ("read", "write")]
    assert sum(s["total_ios"] for s in sides) == 2505331
    assert agg["clat_mean_us"] == pytest.approx(
        sum(s["clat_ns"]["mean"] * s["total_ios"] for s in sides) / 2505331 / 1000)
    assert agg["clat_mean_us"] == pytest.approx(943.04, abs=0.01)
    # fio 3.7, randrw 70/30: (159.348 us * 117686 + 191.942 us * 50283) / 167969
    [e37] = relabelled(FIO_37, "mixed_rand_direct")
    assert e37["mixed"]["clat_n"] == 167969
    assert e37["mixed"]["clat_mean_us"] == pytest.approx(169.1054, abs=1e-3)


def test_fio_3_1_bandwidth_from_io_bytes_and_runtime():
    """fio 3.1 has no bw_bytes: io_bytes * 1000 / runtime (ms) is fio's own figure exactly (bw, KiB/s, rounds it).
    Before, the bandwidth was 0 and the sweep point read as storage that moved nothing."""
    [entry] = relabelled(FIO_31, "seq_write_buffered")
    write = json.loads((FIX / FIO_31).read_text())["jobs"][0]["write"]
    assert "bw_bytes" not in write and write["bw"] == 1753471
    assert entry["write"]["bw_bytes"] == pytest.approx(1073741824 * 1000 / 598)  # 1,795,554,889.6 B/s
    assert entry["write"]["bw_bytes"] == pytest.approx(write["bw"] * 1024, rel=1e-6)
    assert entry["read"]["bw_bytes"] == 0.0  # runtime 0: nothing read, a real 0
    agg, _ = storage_fio.aggregate([entry], "seq_write_buffered")
    assert agg["bw_bytes"] == pytest.approx(1795554889.63, abs=0.01) and agg["iops"] == pytest.approx(438367.893)
    assert agg["clat_mean_us"] == pytest.approx(2.0764, abs=1e-4)  # no N either: weighed by total_ios


def test_fio_2_counts_kib_and_microseconds():
    """fio 2.2.10 (Ubuntu 16.04): io_bytes in KiB (its bw, 62499 KiB/s, is io_bytes over runtime), no bw_bytes, and
    completion latency as `clat` in microseconds (fio 3 prints clat_ns). Before, the bandwidth read 62,499.6 B/s
    (1024 times low) and every latency 0."""
    [entry] = relabelled(FIO_2, "rand_write_direct")
    write = json.loads((FIX / FIO_2).read_text())["jobs"][0]["write"]
    assert write["bw"] == 62499 and "clat_ns" not in write
    assert entry["write"]["io_bytes"] == 37500272 * 1024
    assert entry["write"]["bw_bytes"] == pytest.approx(37500272 * 1024 * 1000 / 600008)  # 63,999,610.9 B/s
    assert entry["write"]["bw_bytes"] == pytest.approx(write["bw"] * 1024, rel=1e-5)
    assert entry["write"]["iops"] == pytest.approx(15624.70)
    assert entry["write"]["clat_mean_us"] == pytest.approx(8151.19) and entry["write"]["clat_max_us"] == 261110
    assert entry["write"]["clat_p99_us"] == 8640 and entry["write"]["clat_p99_9_us"] == 14912
    assert entry["read"]["bw_bytes"] == 0.0  # runtime 0: nothing read, a real 0
    agg, _ = storage_fio.aggregate([entry], "rand_write_direct")
    assert agg["bw_bytes"] == pytest.approx(63999610.885, abs=0.01) and agg["clat_mean_us"] == pytest.approx(8151.19)


def test_a_side_without_any_bandwidth_field_fails_the_point_naming_fio():
    """Where a side has none of bw_bytes, io_bytes with runtime, or bw (the fio 3.1 capture with its write side's
    io_bytes and bw removed), it is not a 0: no bandwidth, and the sweep records a failure that says what fio's JSON
    lacks, and no aggregate."""
    from probes.artifact import Artifact
    from probes.storage import fio_sweep

    doc = json.loads((FIX / FIO_31).read_text())
    del doc["jobs"][0]["write"]["io_bytes"], doc["jobs"][0]["write"]["bw"]
    doc["jobs"][0]["jobname"] = "seq_write_buffered"
    entries = storage_fio.parse_output(doc)
    for e in entries:
        e["client"] = "hostA"
    assert "bw_bytes" not in entries[0]["write"] and "bw_bytes" not in entries[0]["mixed"]
    agg, _ = storage_fio.aggregate(entries, "seq_write_buffered")
    assert "bw_bytes" not in agg and agg["no_bw"] == ["hostA"]
    art = Artifact("fio_sweep", "r1", "hostA", variant="t")
    failures = []
    fio_sweep._record(art, {"name": "t"}, 1, {"hostA": 1}, ["seq_write_buffered"], entries, failures)
    assert failures == ["c1 seq_write_buffered: no bandwidth from fio on hostA: its JSON has no bw_bytes, no "
                        "io_bytes with runtime and no bw (no aggregate recorded)"]
    assert not [r for r in art.results if r["labels"].get("scope") == "aggregate"]
    assert not [r for r in art.results if r["metric"] == "fio_bw_bytes"]
    # what fio did print stays: the client's IOPS
    assert [r["value"] for r in art.results if r["metric"] == "fio_iops"] == [pytest.approx(438367.893)]
