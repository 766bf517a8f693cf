"""nccl-tests text and -J JSON, and perftest reports, from the fixtures in tests/fixtures/{nccl-tests,perftest}."""

from pathlib import Path

import pytest

from probes.network.busbw import busbw_factor
from probes.network.nccl_output import nranks, parse_json, parse_text
from probes.network.perftest_output import parse_bw, parse_lat

FIX = Path(__file__).resolve().parents[1] / "fixtures"
NCCL = FIX / "nccl-tests"


def both(name):
    return (parse_text((NCCL / (name + ".txt")).read_text()), parse_json((NCCL / (name + ".json")).read_text()))


def test_single_node_8x_h100_text_and_json_agree():
    text, js = both("h100x8_all_reduce")
    for parsed in (text, js):
        assert parsed["collective"] == "all_reduce" and parsed["complete"]
        assert nranks(parsed) == 8  # the JSON of a one-process run lists only the first device: ngpus says 8
        assert len(parsed["rows"]) == 64 and parsed["last_size"] == 16 << 30
        assert parsed["out_of_bounds"] == 0 and parsed["out_of_bounds_ok"] is True
        assert {r["placement"] for r in parsed["rows"]} == {"out_of_place", "in_place"}
        assert all(r["wrong"] == 0 and r["root"] == -1 and r["type"] == "float" for r in parsed["rows"])
    assert text["version"] == "2.17.6" and text["nccl_version"] == js["nccl_version"] == 22703
    assert text["params"] == {"nthreads": 1, "ngpus": 8, "min_bytes": 8, "max_bytes": 16 << 30, "step_factor": 2,
                              "warmup_iters": 5, "iters": 20, "validation": 1}
    assert text["devices"][7] == {"rank": 7, "group": 0, "pid": 184233, "host": "gpu-h100-017", "device": 7,
                                  "pci": "0000:db:00", "name": "NVIDIA H100 80GB HBM3"}
    assert text["avg_busbw"] == pytest.approx(184.711) and js["avg_busbw"] == pytest.approx(184.711336)
    peak = max(text["rows"], key=lambda r: r["busbw_gbps"])
    assert (peak["size"], peak["placement"], peak["busbw_gbps"], peak["time_us"]) == (16 << 30, "out_of_place",
                                                                                      482.86, 62263.6)
    # the text is the JSON rounded the way nccl-tests prints it, row by row
    for t, j in zip(text["rows"], js["rows"]):
        assert (t["size"], t["placement"]) == (j["size"], j["placement"])
        assert t["busbw_gbps"] == pytest.approx(j["busbw_gbps"], abs=0.006)
        assert t["time_us"] == pytest.approx(j["time_us"], rel=1e-3, abs=0.006)
        # and busbw is algbw x 2(n-1)/n
        assert j["busbw_gbps"] == pytest.approx(j["algbw_gbps"] * busbw_factor("all_reduce", 8), rel=1e-4, abs=1e-5)


def test_two_node_ib_with_mpirun_tags():
    text, js = both("ib_2node_ring_all_reduce")
    assert text["program"] == "all_reduce_perf_mpi" and text["collective"] == js["collective"] == "all_reduce"
    assert nranks(text) == nranks(js) == 16
    assert {d["host"] for d in text["devices"]} == {"gpu-h100-017", "gpu-h100-018"}
    assert text["complete"] and js["complete"]
    assert max(r["busbw_gbps"] for r in text["rows"]) == pytest.approx(370.83)
    assert max(r["busbw_gbps"] for r in js["rows"]) == pytest.approx(370.834106)


def test_hang_is_incomplete_with_the_last_size_printed():
    text, js = both("hang_2node_all_reduce")
    assert not text["complete"] and text["avg_busbw"] is None and text["out_of_bounds"] is None
    assert text["last_size"] == 131072 and len(text["rows"]) == 2 * 15  # 8 B .. 128 KiB
    # the JSON file was cut mid-record: the complete records are salvaged, the cut one is not
    assert not js["complete"] and js["last_size"] == 65536 and len(js["rows"]) == 2 * 14
    assert js["nccl_version"] == 22703


def test_wrong_results_are_counted():
    text, js = both("wrong_results_all_reduce")
    for parsed in (text, js):
        assert parsed["complete"] and parsed["out_of_bounds"] == 24 and parsed["out_of_bounds_ok"] is False
        wrong = [r for r in parsed["rows"] if r["wrong"]]
        assert len(wrong) == 24 and min(r["size"] for r in wrong) == 524288
        assert all(r["wrong"] == 0 for r in parsed["rows"] if r["size"] < 524288)
    # the text prints #wrong with %g (1.23717e+08); the JSON keeps the exact count
    assert text["rows"][-1]["wrong"] == 123717000
    assert js["rows"][-1]["wrong"] == pytest.approx(123717000, abs=500) and js["rows"][-1]["wrong"] != 123717000


def test_older_text_without_root_column_and_na_wrong():
    text = parse_text(
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 0\n"
        "#                                                       out-of-place                       in-place\n"
        "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "           8             2     float     sum    19.90    0.00    0.00    N/A    18.96    0.00    0.00    N/A\n"
        "          16             4     float     sum    20.67    0.00    0.00    N/A    19.10    0.00    0.00    N/A\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.00012\n", program="all_reduce_perf")
    assert text["collective"] == "all_reduce" and nranks(text) == 2 and text["complete"]
    assert [(r["size"], r["root"], r["wrong"], r["time_us"]) for r in text["rows"]] == [
        (8, None, None, 19.90), (8, None, None, 18.96), (16, None, None, 20.67), (16, None, None, 19.10)]


def test_nccl_errors_are_collected():
    text = parse_text("# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
                      "node1:1234:1234 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12\n"
                      "node1: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'\n")
    assert not text["complete"] and len(text["errors"]) == 2 and "NET/IB" in text["errors"][0]


@pytest.mark.parametrize("name,test,dev,link,gid,cuda,bw", [
    ("ndr_write_bw_host.txt", "RDMA_Write BW Test", "mlx5_0", "IB", None, False, 391.87),
    ("ndr_read_bw_host.txt", "RDMA_Read BW Test", "mlx5_4", "IB", None, False, 384.77),
    ("roce_write_bw_cuda.txt", "RDMA_Write BW Test", "mlx5_3", "Ethernet", 3, True, 370.66)])
def test_perftest_reports(name, test, dev, link, gid, cuda, bw):
    got = parse_bw((FIX / "perftest" / name).read_text())
    assert (got["test"], got["device"], got["link_type"], got["gid_index"], got["use_cuda"]) == (test, dev, link,
                                                                                               gid, cuda)
    assert got["unit"] == "Gb/sec" and got["error"] is None
    [row] = got["rows"]
    assert row["bytes"] == 65536 and row["iterations"] == 5000 and row["bw_avg_gbits"] == bw


def test_perftest_failure_and_mb_units():
    got = parse_bw((FIX / "perftest" / "connect_failed.txt").read_text())
    assert got["rows"] == [] and got["error"] == "Couldn't connect to 10.12.1.12:18515"
    mb = parse_bw(" #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n"
                  " 65536      1000             11728.47           11728.47\t\t   0.187656\n")
    assert mb["rows"][0]["bw_avg_gbits"] == pytest.approx(11728.47 * 8 * 2 ** 20 / 1e9)


# Real captures (tests/fixtures/perftest/README.md): every unit perftest prints, in Gbit/s; the latency table.
@pytest.mark.parametrize("name,test,unit,avg,peak", [
    ("ib_send_bw_mib_cx7_ndr.txt", "Send BW Test", "MiB/sec", 46557.03 * 8 * 2 ** 20 / 1e9,
     46567.34 * 8 * 2 ** 20 / 1e9),
    ("ib_write_bw_mib_cuda_rtx4080.txt", "RDMA_Write BW Test", "MiB/sec", 14948.67 * 8 * 2 ** 20 / 1e9,
     14954.91 * 8 * 2 ** 20 / 1e9),
    ("ib_read_bw_gbits_cx7_ndr.txt", "RDMA_Read BW Test", "Gb/sec", 328.61, 328.64)])
def test_perftest_bandwidth_in_any_unit(name, test, unit, avg, peak):
    got = parse_bw((FIX / "perftest" / name).read_text())
    assert (got["test"], got["unit"], got["error"], got["unread"]) == (test, unit, None, [])
    [row] = got["rows"]
    assert row["bw_avg_gbits"] == pytest.approx(avg, abs=1e-5) and row["bw_peak_gbits"] == pytest.approx(peak, abs=1e-5)
    # the same NDR port: 46557.03 MiB/s is 390.5 Gbit/s, beside its --report_gbits write run's 392.34
    if name.startswith("ib_send_bw"):
        assert 390 < row["bw_avg_gbits"] < 391
    if "cuda" in name:
        assert got["use_cuda"] and got["device"] == "mlx5_0"


@pytest.mark.parametrize("name,test,dev,row", [
    ("ib_send_lat_cx7_ndr.txt", "Send Latency Test", "mlx5_0",
     {"bytes": 2, "iterations": 1000, "t_min_us": 1.24, "t_max_us": 5.19, "t_typical_us": 1.27, "t_avg_us": 1.27,
      "t_stdev_us": 0.0, "p99_us": 1.37, "p99_9_us": 5.19}),
    ("ib_read_lat_mlx4_fdr.txt", "RDMA_Read Latency Test", "mlx4_0",
     {"bytes": 2, "iterations": 1000, "t_min_us": 1.76, "t_max_us": 6.12, "t_typical_us": 1.79, "t_avg_us": 1.80,
      "t_stdev_us": 0.06, "p99_us": 1.88, "p99_9_us": 6.12})])
def test_perftest_latency_reports(name, test, dev, row):
    got = parse_lat((FIX / "perftest" / name).read_text())
    assert (got["test"], got["device"], got["error"]) == (test, dev, None)
    assert got["rows"] == [row]


def test_perftest_unreadable_output_is_an_error_naming_tool_and_line():
    # a MiB/sec header whose row was cut (the real header of ib_send_bw_mib_cx7_ndr.txt, a row that is not one)
    text = (FIX / "perftest" / "ib_send_bw_mib_cx7_ndr.txt").read_text().replace(
        " 65536      1000             46567.34            46557.03\t\t     0.744912", " 65536      1000   46567.34")
    got = parse_bw(text)
    assert got["rows"] == [] and got["error"] == "ib_send_bw: cannot read '65536      1000   46567.34'"
    lat = parse_lat((FIX / "perftest" / "ib_read_lat_mlx4_fdr.txt").read_text().replace("1.88 ", "n/a "))
    assert lat["rows"] == [] and lat["error"].startswith("ib_read_lat: cannot read '2       1000")
    # bandwidth parser on a latency report: no bandwidth table, named by its first line
    assert parse_bw("nothing here\n")["error"] == "perftest: cannot read 'nothing here'"
    assert parse_lat("")["error"] == "perftest: no result table in the output"


REAL = NCCL / "real"


def real(name, program=None):
    return parse_text((REAL / name).read_text(), program=program)


def test_launcher_prefixes_of_real_runs_are_read_through():
    # srun --label (" 0: " on every line, validation off: #wrong N/A), NVIDIA/nccl-tests#290
    srun = real("nccl-tests_h100x16_2node_all_reduce_perf_ib400_srun-prefix_novalidation.txt")
    assert (len(srun["rows"]), nranks(srun), srun["complete"], srun["avg_busbw"]) == (22, 16, True, 142.735)
    assert {d["host"] for d in srun["devices"]} == {"node005", "node007"} and srun["params"]["validation"] == 0
    assert {r["wrong"] for r in srun["rows"]} == {None}
    assert max(r["busbw_gbps"] for r in srun["rows"]) == 167.87
    # SkyPilot's "(head, rank=0, pid=3808) " before mpirun's "[1,0]<stdout>:" (GCP A3 Ultra, all_gather)
    sky = real("nccl-tests_h200x16_2node_all_gather_perf_gcp-a3ultra-rdma_skypilot-mpi-prefix.txt", "all_gather_perf")
    assert (len(sky["rows"]), nranks(sky), sky["collective"], sky["avg_busbw"]) == (48, 16, "all_gather", 122.073)
    assert sky["rows"][-1]["busbw_gbps"] == 332.58 and sky["out_of_bounds"] == 0


def test_old_error_column_is_no_count_of_wrong_elements():
    # NCCL 2.11.4 era: no root column, "error" (largest deviation, 0e+00) where #wrong is now, rank lines without
    # Group, NCCL INFO lines between the header and the rows (2 x A10G over TCP sockets)
    old = real("nccl-tests_oldformat-errorcol_nccl2.11.4_a10gx2_2node_all_reduce_perf_socket_info-interleaved.txt")
    assert len(old["rows"]) == 50 and {r["wrong"] for r in old["rows"]} == {None} and {r["root"] for r in old["rows"]} \
        == {None}
    assert old["rows"][0] == {"size": 8, "count": 2, "type": "float", "redop": "sum", "root": None,
                              "placement": "out_of_place", "time_us": 172.7, "algbw_gbps": 0.0, "busbw_gbps": 0.0,
                              "wrong": None}
    assert (old["out_of_bounds"], old["library_version"], nranks(old)) == (0, "2.11.4+cuda11.4", 2)


def test_newest_header_with_launcher_help_lines_inside_the_table():
    # nccl-tests 2.18.3 / NCCL 2.30.3, alltoall on 2 x 8 RTX 6000D with NCCL_SHM_DISABLE=1: Open MPI's help lines
    # between the column header and the rows, in-place #wrong N/A at the largest sizes
    new = real("nccl-tests_2.18.3_nccl2.30.3_rtx6000dx16_2node_alltoall_perf_shmdisable_p2plevelphb_mpiwarn.txt")
    assert (new["version"], new["nccl_headers"], new["nccl_version"], new["library_version"]) == (
        "2.18.3", 23003, 23003, "2.30.3+cuda13.0")
    assert len(new["rows"]) == 48 and new["rows"][-1]["busbw_gbps"] == 38.01 and new["rows"][-1]["wrong"] is None
    assert new["complete"] and new["out_of_bounds"] == 0


def test_old_format_wrong_results_come_from_the_footer(tmp_path):
    from probes.artifact import Artifact
    from probes.common.command import CmdResult
    from probes.network.nccl_tests import run_one

    old = (REAL / "nccl-tests_oldformat-errorcol_nccl2.11.4_a10gx2_2node_all_reduce_perf_socket_info-interleaved.txt"
           ).read_text()
    for footer, count in (("Out of bounds values : 0 OK", 0), ("Out of bounds values : 7 FAILED", 7)):
        art = Artifact("nccl_tests", "r", "h")
        text = old.replace("Out of bounds values : 0 OK", footer)
        run_one(art, "all_reduce", "/opt/nccl-tests/build/all_reduce_perf",
                lambda argv, timeout, text=text: CmdResult(argv, 0, text, "", False, False), [], 60, "nccl_tests",
                str(tmp_path), False, 2)
        [wrong] = [r for r in art.results if r["metric"] == "wrong"]
        assert wrong["value"] == count and wrong["labels"]["source"] == "footer"


def test_a_run_with_a_duration_measures_no_peak():
    """ib_write_bw -D: perftest turns the peak off and prints 0.00 in its column. Before, bw_peak_gbits was 0.0
    beside an average of 98.02 Gbit/s; it is not measured."""
    rows = parse_bw((FIX / "perftest" / "ib_write_bw_D5_gbits_roce.txt").read_text())["rows"]
    assert rows == [{"bytes": 65536, "iterations": 560845, "bw_peak_gbits": None, "bw_avg_gbits": 98.02,
                     "msg_rate_mpps": 0.18695}]


def test_latency_tests_use_perftests_own_message_size():
    """ib_*_lat run by hand sends 2-byte messages; the bandwidth tests' 64 KiB made every latency several times
    what a user measures."""
    from probes.network.perftest import PARAMS, common_args

    params = PARAMS.resolve("perftest", {})
    assert common_args("mlx5_0", 1, params, "write_lat") == ["-d", "mlx5_0", "-p", "1", "-F", "-s", "2"]
    assert common_args("mlx5_0", 1, params, "write") == ["-d", "mlx5_0", "-p", "1", "-F", "--report_gbits", "-s",
                                                         "65536"]


def _rows(parsed, placement="out_of_place"):
    return [(r["size"], r["redop"], r["root"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"], r["wrong"])
            for r in parsed["rows"] if r["placement"] == placement]


def test_older_lead_columns_are_read_from_the_header():
    """Older nccl-tests print `size count type` for all_gather and `size count type root` for broadcast. Before, the
    parser assumed 4 lead columns without `root`: all_gather read its time from algbw (73.75 us at 8 GiB) and its
    busbw from the error column (1.0), without in-place rows; broadcast raised ValueError (int('59.75'))."""
    ag = real("nccl-tests_oldformat-3col_v100x12_dgx2_all_gather_perf_outofbounds.txt", "all_gather_perf")
    assert (len(ag["rows"]), ag["collective"], nranks(ag), ag["avg_busbw"], ag["out_of_bounds"]) == (
        62, "all_gather", 12, 30.2993, 4)
    assert _rows(ag)[-1] == (8589934560, None, None, 106773.0, 73.75, 73.75, None)
    assert _rows(ag, "in_place")[-1] == (8589934560, None, None, 70089.0, 112.34, 112.34, None)  # error 1e+00: no count
    bc = real("nccl-tests_oldformat-root-noredop_v100x12_dgx2_broadcast_perf.txt", "broadcast_perf")
    assert (len(bc["rows"]), bc["collective"], bc["avg_busbw"], bc["unread"]) == (62, "broadcast", 41.2456, [])
    assert _rows(bc)[-1] == (8589934592, None, 0, 70321.0, 122.15, 122.15, None)
    # the same layout across 2 nodes (NCCL 2.9.6, NVIDIA/nccl-tests#82; the stored copy ends after the first row)
    b82 = real("nccl-tests_oldformat-root-noredop_nccl2.9.6_v100x2_2node_broadcast_perf_socket_firstrow.txt")
    assert (_rows(b82), _rows(b82, "in_place")) == ([(8, None, 0, 45.82, 0.0, 0.0, None)],
                                                     [(8, None, 0, 38.17, 0.0, 0.0, None)])
    assert b82["library_version"] == "2.9.6+cuda11.2" and not b82["complete"]


def test_three_lead_columns_of_rccl_tests_and_of_a_table_without_header():
    # rccl-tests all_gather (ROCm/rccl#930): before, time 0.12, busbw 0.0 and no in-place rows
    rc = real("rccl-tests_oldformat-3col_mi250x16_all_gather_perf_msccl_first8.txt", "all_gather_perf")
    assert len(rc["rows"]) == 16 and _rows(rc)[-2:] == [(4096, None, None, 34.5, 0.12, 0.11, None),
                                                        (8192, None, None, 34.81, 0.24, 0.22, None)]
    # rows published without their header (NVIDIA/nccl#644): before, time 8.37, busbw 0.0 and #wrong 32081 (a time)
    bare = real("nccl-tests_oldformat-3col-headerless_all_gather_perf_mpirun_rows.txt", "all_gather_perf")
    assert len(bare["rows"]) == 26 and bare["unread"] == []
    assert _rows(bare)[-1] == (268435456, None, None, 32071.0, 8.37, 7.32, None)
    assert _rows(bare, "in_place")[-1] == (268435456, None, None, 32081.0, 8.37, 7.32, None)


def test_an_alltoall_header_with_redop_over_rows_that_print_it_blank():
    # NVIDIA/nccl-tests#78 (8 x 8 V100): the header names redop, the rows leave it empty. Before: time 0.52.
    a2a = real("nccl-tests_oldformat-blankredop_v100x64_8node_alltoall_perf_ib100.txt", "alltoall_perf")
    assert _rows(a2a) == [(268435456, None, None, 520935.0, 0.52, 0.51, None),
                          (536870912, None, None, 1041974.0, 0.52, 0.51, None)]
    assert _rows(a2a, "in_place")[-1] == (536870912, None, None, 1041299.0, 0.52, 0.51, None)


def _run_one(tmp_path, coll, text, nodes, world_ranks=None):
    from probes.artifact import Artifact
    from probes.common.command import CmdResult
    from probes.network.nccl_tests import run_one

    art = Artifact("nccl_tests", "r", "h")
    failure = run_one(art, coll, "/opt/nccl-tests/build/%s_perf" % coll,
                      lambda argv, timeout: CmdResult(argv, 0, text, "", False, False), [], 60, "nccl_tests",
                      str(tmp_path), False, nodes, world_ranks=world_ranks)
    return failure, [r for r in art.results if r["metric"] == "busbw_gbps"]


def test_a_result_line_that_cannot_be_read_is_an_error_naming_the_tool_and_the_line(tmp_path):
    """The DGX-2 broadcast with its 128 MiB line cut after the out-of-place busbw (as a full pipe or a killed terminal
    leaves it): not read as numbers it does not have (before: root 0 as the time), an error that quotes it."""
    full = (REAL / "nccl-tests_oldformat-root-noredop_v100x12_dgx2_broadcast_perf.txt").read_text()
    line = "   134217728      33554432   float       0   1192.9  112.51  112.51  0e+00   1190.5  112.74  112.74  0e+00"
    assert line in full
    failure, busbw = _run_one(tmp_path, "broadcast", full.replace(line, line[:line.index("0e+00")]), 1)
    assert failure == {"kind": "error", "collective": "broadcast", "log": "nccl_tests.broadcast.txt",
                       "message": "broadcast_perf: cannot read '134217728      33554432   float       0   1192.9  "
                                  "112.51  112.51'"}
    assert len(busbw) == 60 and 134217728 not in {r["labels"]["size_bytes"] for r in busbw}
    failure, busbw = _run_one(tmp_path, "broadcast", full, 1)
    assert failure is None and len(busbw) == 62


@pytest.mark.parametrize("name, why, ranks", [
    # NVIDIA/nccl-tests#107: 2 nodes x 1 V100, each process printed its own header and its own rank 0
    ("nccl-tests_nompi_v100x2_2node_all_reduce_perf_rank0-twice_header-twice.txt",
     "rank 0 printed 2 times (on ip-172-31-20-228, ip-172-31-22-230)", 1),
    # NVIDIA/nccl-tests#306: 2 x 8 H20, ranks 0-7 on node3, then 0-4 (as far as the stored copy goes) on node2
    ("nccl-tests_nompi_h20x16_2node_all_reduce_perf_ranks-repeated.txt", "rank 0 printed 2 times (on node2, node3)",
     8),
    # an H100 cluster's troubleshooting notes: 12 processes on 2 nodes, every one rank 0
    ("nccl-tests_2.17.6_nompi_h100x12_2node_alltoall_perf_rank0-12times.txt",
     "rank 0 printed 12 times (on cnode2-001, cnode2-002)", 1),
    # NVIDIA/nccl-tests#182: two complete tables, each with its own footer (1.7535 and 1.6796 GB/s)
    ("nccl-tests_nompi_2node_all_reduce_perf_two-footers.txt", "2 result tables in one output", None),
])
def test_processes_that_each_ran_their_own_world_are_no_multi_node_measurement(tmp_path, name, why, ranks):
    """nccl-tests built without MPI=1 and started by mpirun or srun: every process is a world of its own. Before,
    #182's 8 rows were filed as a 2-node result and #107 counted 2 ranks (12 for the H100 notes)."""
    text = (REAL / name).read_text()
    failure, busbw = _run_one(tmp_path, "all_reduce", text, 2, world_ranks=16)
    assert busbw == [] and failure["kind"] == "error"
    assert failure["message"] == (
        "all_reduce_perf at 2 nodes is not one measurement of the world: %s: each process ran its own world; "
        "nothing filed (nccl-tests built without MPI=1 runs every process that srun or mpirun starts as its own "
        "world)" % why)
    assert nranks(parse_text(text)) == ranks  # each rank id once: before, 2 (#107) and 12 (the H100 notes)


def test_a_world_that_printed_fewer_ranks_than_it_was_started_with(tmp_path):
    # the GCP A4X Max all_gather printed 8 ranks (2 trays x 4): taken as a 2-node world of 8 GPUs per node, 16 ranks
    text = (FIX / "collective-curves" / "gcp_a4xmax_gb300_2node_all_gather.txt").read_text()
    failure, busbw = _run_one(tmp_path, "all_gather", text, 2, world_ranks=16)
    assert busbw == [] and "8 ranks printed where the world has 16" in failure["message"]
    failure, busbw = _run_one(tmp_path, "all_gather", text, 2, world_ranks=8)
    assert failure is None and len(busbw) == 46


def test_the_processes_a_failed_output_names():
    from probes.network.nccl_output import failing_processes
    got = failing_processes(
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#  Rank  0 Group  0 Pid   1234 on      node1 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid   5678 on      node2 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
        "node2:5678:5690 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12\n"
        "node2:5678:5690 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2 with error 12\n"
        "node2: Test NCCL failure common.cu:1005 'remote process exited or there was a network error'\n"
        "[1,9]<stdout>:node3:77:77 [1] NCCL WARN Cuda failure 'an illegal memory access was encountered'\n")
    assert [(p["host"], p["pid"], p["device"], p["rank"]) for p in got] == [
        ("node2", 5678, 0, 1), ("node2", None, None, None), ("node3", 77, 1, 9)]
    # nccl-tests' own failure lines of a real capture name their host ("test")
    real = failing_processes((FIX / "nccl-tests" / "nccl-tests_cuda_failure_h100x8.txt").read_text())
    assert [(p["host"], p["pid"]) for p in real] == [("test", None), ("test", 54340)]


def test_trailing_columns_the_header_names_are_read_by_the_header():
    # a derived util.cu: "#wrong #iters" in the header, each row ends "%5d %s" (iterations, an experiment name)
    text = parse_text(
        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 "
        "validation: 1 graph: 0\n"
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
        "#wrong #iters\n"
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
        "(GB/s)\n"
        "           8             2     float     sum      -1    19.28    0.00    0.00      0    17.24    0.00    0.00"
        "      0     20    \n"
        "          16             4     float     sum      -1    16.32    0.00    0.00      0    16.53    0.00    0.00"
        "      0     20    exp_a\n"
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0\n", program="all_reduce_perf")
    assert text["unread"] == [] and text["complete"]
    assert [(r["size"], r["placement"], r["root"], r["redop"], r["time_us"], r["wrong"]) for r in text["rows"]] == [
        (8, "out_of_place", -1, "sum", 19.28, 0), (8, "in_place", -1, "sum", 17.24, 0),
        (16, "out_of_place", -1, "sum", 16.32, 0), (16, "in_place", -1, "sum", 16.53, 0)]
