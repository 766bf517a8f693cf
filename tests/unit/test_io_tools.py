"""probes/storage/io_tools.py on real outputs of IOR, mdtest and elbencho (tests/fixtures/io_tools/, each source in
its README): every version's table read, and every output that has no result read as an error naming the tool and
the line, never as zero rows."""

from pathlib import Path

import pytest

from probes.storage.io_tools import IOR_FAILURE, ToolOutputError, parse_elbencho, parse_ior, parse_mdtest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "io_tools"


def _text(tool, name):
    return (FIXTURES / tool / name).read_text()


@pytest.mark.parametrize("name, version, ops", [
    # IOR 3.0.1: aggsize in bytes, no OPs columns
    ("ior-3.0.1-hdf5-collective-write-vv.txt", "3.0.1", [("write", 189.38, 96, "HDF5", 19200.0)]),
    ("ior-3.0.1-posix-bluegene-cnk-space-blank-lines.txt", "3.0.1",
     [("write", 75.82, 1, "POSIX", 1.0), ("read", 85.18, 1, "POSIX", 1.0)]),
    # 3.3.0 and later: OPs and Stonewall columns, aggs(MiB)
    ("ior-3.3.0-mpiio-ssf-C-e-remove-expanse-lustre.txt", "3.3.0",
     [("write", 2069.94, 4, "MPIIO", 131072.0), ("read", 2784.22, 4, "MPIIO", 131072.0)]),
    ("ior-3.4.0dev-posix-fpp-odirect-stonewall-D45-aggsize-warnings-vast.txt", "3.4.0+dev",
     [("write", 4008.49, 32, "posix", 180869.0)]),
    ("ior-4.0.0-posix-ssf-verify-W-dfuse-daos-docs-2026.txt", "4.0.0",
     [("write", 101.04, 10, "POSIX", 20480.0), ("read", 30911.67, 10, "POSIX", 20480.0)]),
    ("ior-4.0.0rc1-mpiio-noncontig-showHints-5iter.txt", "4.0.0rc1", [("write", 103.24, 640, "MPIIO", 6103.5)]),
])
def test_ior_summary_of_every_version(name, version, ops):
    parsed = parse_ior(_text("ior", name))
    assert parsed["version"] == version
    assert [(r["operation"], r["bw_max_mib"], r["tasks"], r["api"], round(r["aggregate_mib"], 1))
            for r in parsed["rows"]] == ops
    assert parsed["errors"] == []


def test_ior_five_repetitions_keep_min_mean_and_ops():
    [row] = parse_ior(_text("ior", "ior-4.0.0rc1-mpiio-noncontig-showHints-5iter.txt"))["rows"]
    assert (row["bw_min_mib"], row["bw_mean_mib"], row["bw_stddev_mib"], row["reps"]) == (71.43, 92.42, 11.64, 5)
    assert (row["ops_max"], row["ops_mean"], row["transfer_bytes"], row["block_bytes"]) == (10825.79, 9690.56,
                                                                                            10000, 10000)
    # the header names StdDev twice (MiB/s, then OPs): each column keeps its own
    assert row["ops_stddev"] == 1220.52


def test_ior_stonewall_warnings_are_kept():
    parsed = parse_ior(_text("ior", "ior-3.4.0dev-posix-fpp-odirect-stonewall-D45-aggsize-warnings-vast.txt"))
    assert parsed["warnings"] and all(w.startswith("WARNING") for _, w in parsed["warnings"])


@pytest.mark.parametrize("name, line, why", [
    ("ior-3.1.0-posix-W-R-FAILED-comparison-issue22-PARTIAL.txt", 26,
     "no 'Summary of all tests:' table (the run failed: [0] FAILED comparison of buffer"),
    ("ior-4.0dev-aio-read-verify-failure-incorrect-data-issue461-EXCERPT.txt", 8,
     "no 'Summary of all tests:' table (the run failed: WARNING: Incorrect data on read (1 errors found)"),
])
def test_a_failed_ior_run_is_an_error_naming_the_failure(name, line, why):
    with pytest.raises(ToolOutputError) as err:
        parse_ior(_text("ior", name))
    assert err.value.tool == "ior" and err.value.line_no == line and why in str(err.value)


# Open MPI 4.1.4's help blocks on an mlx5 node where UCX runs the job (open-mpi/ompi#10693, the run finished well):
# mpirun prints them before the ranks' output, and the launcher's log holds both.
OPENMPI_OPENIB_WARNING = (FIXTURES / "mpi" /
                          "openmpi-4.1.4-openib-not-used-and-openfabrics-init-warning-mlx5-issue10693-PARTIAL.txt")


def test_open_mpis_openfabrics_warning_before_a_good_ior_run_is_no_error():
    """Before, "There was an error initializing" matched a case-blind ERROR and made the run an error."""
    ior = _text("ior", "ior-3.3.0-posix-fpp-C-e-lustre-exascaler-azure.txt")
    parsed = parse_ior(OPENMPI_OPENIB_WARNING.read_text() + ior)
    assert parsed["errors"] == []
    assert [(r["operation"], r["bw_max_mib"], r["tasks"]) for r in parsed["rows"]] == [
        ("write", 1842.29, 64), ("read", 2316.13, 64)]
    assert parsed["rows"] == parse_ior(ior)["rows"]
    assert (13, "WARNING: There was an error initializing an OpenFabrics device.") in parsed["warnings"]


def test_open_mpis_warning_does_not_hide_iors_own_error():
    """IOR 3.3.0 failing on a read (hpc/ior#346) with Open MPI's help blocks before it: the failure named is IOR's
    "ior ERROR" line, not the OpenFabrics warning (which came first, and was named before)."""
    failed = _text("ior", "ior-3.3.0-posix-read-EOF-prematurely-ior-ERROR-after-write-row-issue346-EXCERPT.txt")
    with pytest.raises(ToolOutputError) as alone:
        parse_ior(failed)
    assert alone.value.line_no == 10
    assert "(the run failed: ior ERROR: read(37, 0x2aaac5419000, 33554432) returned EOF prematurely" in str(alone.value)
    with pytest.raises(ToolOutputError) as err:
        parse_ior(OPENMPI_OPENIB_WARNING.read_text() + failed)
    assert err.value.line_no == 28
    assert "(the run failed: ior ERROR: read(37, 0x2aaac5419000, 33554432) returned EOF prematurely" in str(err.value)


@pytest.mark.parametrize("line, failed", [
    # IOR's own failures, as real runs printed them
    ("ior ERROR: write() failed, errno 22, Invalid argument (aiori-POSIX.c:236)", True),  # llnl/ior#30, 3.0.1
    ("application called MPI_Abort(MPI_COMM_WORLD, -1) - process 1", True),  # the same run's MPICH abort
    ('ior ERROR: open64("testFile.00000128", 2) failed, errno 2, No such file or directory (aiori-POSIX.c:473)',
     True),  # hpc/ior#427
    ("MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD ", True),  # Open MPI (UCL/hemelb#4)
    ("WARNING: Incorrect data on read (1 errors found).", True),  # hpc/ior#461
    ("[0] FAILED comparison of buffer containing 8-byte ints:", True),  # hpc/ior#22
    # Open MPI's help text of a run that went on (open-mpi/ompi#10693)
    ("WARNING: There was an error initializing an OpenFabrics device.", False),
    ("[lxbk1039:106838] 11 more processes have sent help message help-mpi-btl-openib.txt / ib port not selected",
     False),
])
def test_ior_failure_lines_are_iors_own_words(line, failed):
    assert bool(IOR_FAILURE.search(line)) is failed


def test_an_ior_row_that_does_not_fit_its_header_names_the_line():
    text = _text("ior", "ior-3.3.0-posix-fpp-C-e-lustre-exascaler-azure.txt").replace(" POSIX      0", " POSIX")
    with pytest.raises(ToolOutputError, match=r"ior output, line 40: 26 cells under 27 column names"):
        parse_ior(text)


@pytest.mark.parametrize("name, version, tasks, first", [
    ("mdtest-1.9.3-verbose-v-96tasks-gpfs-2iter.txt", "1.9.3", 96,
     ("directory_creation", 2, 104.022, 96.64, 100.331, 3.691)),
    ("mdtest-3.3.0-64tasks-8nodes-long-nodemap-lustre-exascaler-gcp.txt", "3.3.0", 64,
     ("directory_creation", 3, 26871.818, 16015.007, 22434.966, 4648.316)),
    # quoted in a document, indented: read all the same
    ("mdtest-3.3.0-C-create-only-zero-rates-3iter-rst-indented.txt", "3.3.0", 1,
     ("directory_creation", 3, 7737.83, 1898.994, 5539.577, 2592.713)),
    # 4.0.0: no colon after the label
    ("mdtest-4.0.0-F-C-no-colon-rows-daos-docs-2026.txt", "4.0.0", None,
     ("file_creation", 1, 2568.636, 2568.636, 2568.636, 0.0)),
    # 4.1: the units in the header ("SUMMARY rate (in ops/sec): (of 1 iterations)"); before, no table was found
    ("mdtest-4.1.0dev-F-C-r-units-in-summary-header-daos-dfuse.txt", "4.1.0+dev", 10,
     ("file_creation", 1, 2345.219, 2345.219, 2345.219, 0.0)),
])
def test_mdtest_summary_of_every_version(name, version, tasks, first):
    parsed = parse_mdtest(_text("mdtest", name))
    assert parsed["version"] == version and (tasks is None or parsed["tasks"] == tasks)
    row = parsed["rows"][0]
    assert (row["operation"], row["iterations"], row["max"], row["min"], row["mean"], row["stddev"]) == first
    assert {r["table"] for r in parsed["rows"]} == {"rate"}


def test_mdtest_files_only_has_no_directory_rows_and_zero_rates_stay():
    parsed = parse_mdtest(_text("mdtest", "mdtest-3.4.0dev-F-C-files-only-create-daos-docs.txt"))
    ops = [r["operation"] for r in parsed["rows"]]
    assert ops == ["file_creation", "file_stat", "file_read", "file_removal", "tree_creation", "tree_removal"]
    # -F with no file work: mdtest prints zeros, which stay zeros
    zero = parse_mdtest(_text("mdtest", "mdtest-1.9.3-F-zero-files-zero-rates-node-mdtest-fixture.txt"))
    assert [(r["operation"], r["max"]) for r in zero["rows"]][:1] + [(r["operation"], r["max"])
                                                                      for r in zero["rows"]][-2:] == [
        ("file_creation", 0.0), ("tree_creation", 80006.097), ("tree_removal", 62649.036)]


def test_an_mdtest_without_summary_is_an_error():
    text = _text("mdtest", "mdtest-3.3.0-64tasks-8nodes-long-nodemap-lustre-exascaler-gcp.txt")
    with pytest.raises(ToolOutputError, match="mdtest output, line 9: no 'SUMMARY' table"):
        parse_mdtest(text.split("SUMMARY rate")[0])
    broken = text.replace("File stat                 :      47499.280", "File stat                 :      oops")
    with pytest.raises(ToolOutputError, match=r"mdtest output, line 18: not a row of the SUMMARY rate table"):
        parse_mdtest(broken)


def _rows(parsed, phase, result):
    return [r for r in parsed["rows"] if r["phase"] == phase and r["result"] == result]


def test_elbencho_2x_result_file_of_four_hosts():
    parsed = parse_elbencho(_text("elbencho", "elbencho-2.1-0-multihost-4hosts-mkdirs-write-direct-resfile.txt"))
    [bw] = _rows(parsed, "WRITE", "Throughput MiB/s")
    assert (bw["first"], bw["last"]) == (4792.0, 4831.0)
    [elapsed] = _rows(parsed, "WRITE", "Elapsed ms")
    assert (elapsed["first"], elapsed["last"], elapsed["unit"]) == (45.247, 45.253, "s")
    [dirs] = _rows(parsed, "MKDIRS", "Dirs total")
    assert dirs["last"] == 32.0


def test_elbencho_3x_units_and_latencies():
    parsed = parse_elbencho(_text("elbencho", "elbencho-3.0-35-s3-write-objects-latency-issue91.txt"))
    [elapsed] = _rows(parsed, "WRITE", "Elapsed time")
    assert elapsed["first"] == pytest.approx(0.032)
    [lat] = _rows(parsed, "WRITE", "Objects latency")
    assert lat["latency_us"] == {"min": pytest.approx(2980.0), "avg": pytest.approx(4000.0),
                                 "max": pytest.approx(8300.0)}
    [objs] = _rows(parsed, "WRITE", "Objects/s")
    assert objs["last"] == 249.0


def test_elbencho_distributed_output_skips_the_services_messages():
    parsed = parse_elbencho(_text("elbencho",
                                  "elbencho-2.x-distributed-slurm-stdout-services-interleaved-first-phase.txt"))
    assert parsed["rows"] and {r["phase"] for r in parsed["rows"]} >= {"SYNC"}


@pytest.mark.parametrize("name, line, why", [
    # as posted: a cell that is not a number
    ("elbencho-2.1-6-2hosts-mkdirs-write-then-read-ERROR-issue33-PARTIAL.txt", 5, "3 values, not first and last"),
    # a dry run plans phases and prints no result
    ("elbencho-3.x-dryrun-phase-plan-no-results.txt", 15, "no result table"),
])
def test_an_elbencho_output_without_results_is_an_error_naming_the_line(name, line, why):
    with pytest.raises(ToolOutputError) as err:
        parse_elbencho(_text("elbencho", name))
    assert err.value.tool == "elbencho" and err.value.line_no == line and why in str(err.value)
