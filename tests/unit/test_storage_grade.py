"""Grading and report section of the storage phase on artifacts written here with known numbers."""

from pathlib import Path

import pytest
import yaml
from run_dirs import write_and_load_run

from probes.artifact import Artifact
from reports import grading as grade
from reports.grading.kinds import kind_names
from reports.phases.storage import section

RUBRIC = Path(__file__).resolve().parents[2] / "reports" / "data" / "rubric.d" / "storage.yml"
HOSTS = ["n1", "n2", "n3", "n4"]


def fio_driver(series, per_client=None, tier="shared", slow=None):
    """series: {workload: {clients: aggregate MB/s}}; per-client values are the aggregate split evenly
    (slow: {host: factor} makes one client slower)."""
    art = Artifact("fio_sweep", "r", "n1", variant=tier)
    art.facts.update({"role": "driver", "tier_path": "/x", "tier_shared": True, "size_mib": 4, "runtime_s": 1})
    for workload, points in series.items():
        for clients, mbps in points.items():
            labels = {"tier": tier, "workload": workload, "clients": clients}
            art.add("fio_bw_bytes", mbps * 1e6, "B/s", scope="aggregate", **labels)
            art.add("fio_iops", mbps * 1e6 / 4096, "IOPS", scope="aggregate", **labels)
            art.add("fio_clat_p99_us", 900.0, "us", scope="aggregate", **labels)
            for host in HOSTS[:clients]:
                factor = (slow or {}).get(host, 1.0)
                art.add("fio_bw_bytes", factor * mbps * 1e6 / clients, "B/s", scope="client", client=host, jobs=1,
                        **labels)
    return art


def server(host, tier="shared"):
    art = Artifact("fio_sweep", "r", host, variant=tier)
    art.facts.update({"role": "server", "driver": "n1"})
    return art


def metadata(host, anomalies=None, aggregate=False, stale=0):
    art = Artifact("metadata", "r", host, variant="shared")
    art.facts["ranks"] = 8
    labels = {"tier": "shared", "ranks": 8, "files_per_rank": 10}
    for scope in ("host", "aggregate") if aggregate else ("host",):
        for kind, n in (anomalies or {}).items():
            art.add("meta_anomalies", n, "count", scope=scope, kind=kind, **labels)
        art.add("meta_anomalies_total", sum((anomalies or {}).values()), "count", scope=scope, **labels)
        art.add("meta_stale_after_unlink", stale, "count", scope=scope, **labels)
        art.add("meta_create_per_s", 5000.0, "files/s", scope=scope, **labels)
    return art


def make_run(tmp_path, arts):
    return write_and_load_run(tmp_path, arts, HOSTS, "quick")


def rows_of(run, check_id):
    checks = [c for c in yaml.safe_load(RUBRIC.read_text())["checks"] if c["id"] == check_id]
    return grade.grade(run, {"checks": checks})


GOOD = {"seq_read_buffered": {1: 1000, 2: 1900, 4: 3600}, "rand_read_direct": {1: 400, 2: 700, 4: 800}}


def test_rubric_loads_with_the_rest_and_every_kind_is_registered():
    rubric = grade.load_rubric()
    mine = [c for c in rubric["checks"] if c["id"].startswith("storage.")]
    assert len(mine) >= 15
    kinds = kind_names()
    assert {c["kind"] for c in mine} <= kinds


def test_scaling_flags_a_tier_whose_aggregate_falls(tmp_path):
    series = dict(GOOD, seq_write_direct={1: 1000, 2: 1200, 4: 700})
    run = make_run(tmp_path, [fio_driver(series)] + [server(h) for h in HOSTS[1:]])
    rows = {(r["host"], r["subject"]): r for r in rows_of(run, "storage.fio_scaling")}
    bad = rows[("n1", "tier=shared workload=seq_write_direct")]
    assert bad["status"] == "fail" and "41.7% lower at c4 than at c2" in bad["observed"]
    assert rows[("n1", "tier=shared workload=seq_read_buffered")]["status"] == "pass"
    assert rows[("n1", "tier=shared workload=rand_read_direct")]["status"] == "pass"
    for host in HOSTS[1:]:  # every host has the check, naming where it was graded
        assert rows[(host, "")]["status"] == "skip" and "driver n1" in rows[(host, "")]["reason"]


def test_degradation_per_client_under_load(tmp_path):
    run = make_run(tmp_path, [fio_driver({"seq_read_buffered": {1: 1000, 4: 1200}})])
    [row] = [r for r in rows_of(run, "storage.fio_degradation") if r["host"] == "n1"]
    # 1000 MB/s alone, 300 MB/s each with 4 clients: 70 % lower -> warn (40 %), not fail (75 %)
    assert row["status"] == "warn" and "(70.0% lower)" in row["observed"]


def test_per_client_threshold_and_peers(tmp_path):
    run = make_run(tmp_path, [fio_driver(GOOD, slow={"n3": 0.1, "n4": 0.5})] + [server(h) for h in HOSTS[1:]])
    seq = {r["host"]: r for r in rows_of(run, "storage.fio_seq_bw")}
    assert seq["n1"]["status"] == "pass" and seq["n1"]["observed"] == "900 MB/s"
    assert seq["n1"]["subject"] == "tier=shared workload=seq_read_buffered c=4"
    assert seq["n3"]["status"] == "fail" and seq["n3"]["observed"] == "90 MB/s"  # below the floor 100
    assert seq["n4"]["status"] == "warn" and seq["n4"]["observed"] == "450 MB/s"  # below the warn line 500
    peers = [r for r in rows_of(run, "storage.fio_client_peers") if r["subject"].endswith("seq_read_buffered c=4")]
    status = {r["host"]: r["status"] for r in peers}
    assert status == {"n1": "pass", "n2": "pass", "n3": "fail", "n4": "fail"}


def test_skipped_sweep_shows_its_reason_on_every_host(tmp_path):
    arts = []
    for host in HOSTS:
        art = server(host)
        art.skip("not enough free space on /x: 1.0 MiB free, the test needs 40.0 MiB")
        arts.append(art)
    run = make_run(tmp_path, arts)
    rows = rows_of(run, "storage.fio_seq_bw")
    assert len(rows) == 4 and {r["status"] for r in rows} == {"skip"}
    assert all(r["reason"].startswith("not enough free space") for r in rows)


def test_metadata_anomalies_fail_and_stale_warns(tmp_path):
    arts = [metadata("n1", {"mkdir_eexist_then_enoent": 3, "mkdir_winners_not_one": 1}, aggregate=True),
            metadata("n2", {}, stale=2), metadata("n3", {}), metadata("n4", {"enoent_after_create": 0})]
    run = make_run(tmp_path, arts)
    rows = {r["host"]: r for r in rows_of(run, "storage.metadata_anomalies")}
    assert rows["n1"]["status"] == "fail"
    assert rows["n1"]["observed"] == ("4 anomalies (8 ranks, all ranks): mkdir_eexist_then_enoent 3, "
                                      "mkdir_winners_not_one 1")
    assert rows["n2"]["status"] == "warn" and "2 stale" in rows["n2"]["observed"]
    assert rows["n3"]["status"] == rows["n4"]["status"] == "pass"
    assert run.hosts == HOSTS


def test_tier_metric_import_time_and_missing_probe(tmp_path):
    arts = []
    for host, seconds in (("n1", 1.5), ("n2", 4.0), ("n3", 15.0)):
        art = Artifact("import_time", "r", host)
        art.add("import_s", seconds, "s", tier="home", module="torch", cache="first", source="copy")
        art.add("import_s", 0.5, "s", tier="home", module="torch", cache="warm", source="copy")
        arts.append(art)
    rows = {r["host"]: r for r in rows_of(make_run(tmp_path, arts), "storage.import_torch")}
    assert [rows[h]["status"] for h in HOSTS] == ["pass", "warn", "fail", "skip"]
    assert rows["n3"]["observed"] == "15 s" and rows["n3"]["subject"] == "tier=home"
    assert "did not run" in rows["n4"]["reason"]


def test_section_renders_tables_and_plots(tmp_path):
    run = make_run(tmp_path, [fio_driver(GOOD)] + [server(h) for h in HOSTS[1:]] + [metadata("n1", {}, True)])
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    text = section.render(run, [], str(report_dir))
    assert text.startswith("## Storage")
    for name in ("storage_heatmap_shared.png", "storage_scaling_shared.png", "storage_latency_shared.png"):
        assert "](%s)" % name in text and (report_dir / name).stat().st_size > 1000
    assert "| seq_read_buffered | 4 | 3600 |" in text
    assert "| shared | n1 | aggregate | 8 | 5000 |" in text


FIO_FIX = Path(__file__).resolve().parents[1] / "fixtures" / "fio"
C3_NAMES = {"127.0.0.1,18765": "n1", "127.0.0.2,18765": "n2"}  # the capture's two fio servers as two hosts


def c3_driver(drop=()):
    """A driver artifact recorded by the probe's own _record from the real c=3 capture (n1 ran 2 jobs, n2 one),
    with the entries of the hosts in `drop` taken out (a client that gave no result)."""
    from probes.storage import fio as storage_fio
    from probes.storage import fio_sweep

    entries = [e for e in storage_fio.parse_output((FIO_FIX / "clientserver_sweep_c3.out").read_text(), C3_NAMES)
               if e["client"] not in drop]
    art = Artifact("fio_sweep", "r", "n1", variant="shared")
    art.facts.update({"role": "driver", "tier_path": "/x", "tier_shared": True, "size_mib": 4, "runtime_s": 1})
    failures = []
    fio_sweep._record(art, {"name": "shared"}, 3, {"n1": 2, "n2": 1}, storage_fio.SWEEP_WORKLOADS, entries,
                      failures)
    return art, entries, failures


def test_a_clients_p99_latency_is_fios_own_not_divided_by_its_jobs(tmp_path):
    """n1 ran two fio jobs: its bandwidth per process is half its total, but its p99 (group_reporting: every I/O of
    both jobs) is what fio printed, not half of it."""
    art, entries, _ = c3_driver()
    run = make_run(tmp_path, [art, server("n2")])
    printed = {e["workload"]: e for e in entries if e["client"] == "n1"}
    rows = [r for r in rows_of(run, "storage.fio_p99_latency") if r["host"] == "n1"]
    assert rows
    from probes.storage import fio as storage_fio

    def printed_side(row):
        workload = row["subject"].split("workload=")[1].split()[0]
        return printed[workload][storage_fio.workload_spec(workload)[3]]

    for r in rows:
        assert float(r["observed"].split()[0]) == pytest.approx(printed_side(r)["clat_p99_us"] / 1000, rel=1e-3)
    seq = [r for r in rows_of(run, "storage.fio_seq_bw") if r["host"] == "n1"]
    assert seq and float(seq[0]["observed"].split()[0]) == pytest.approx(printed_side(seq[0])["bw_bytes"] / 2e6,
                                                                         rel=1e-3)


def test_a_sweep_point_that_misses_a_client_records_no_aggregate(tmp_path):
    """n2 gave no result at c=3: the clients that answered keep their rows, but no aggregate over fewer clients than
    the point's count is recorded (it read as the tier losing 40 % at c=3), and the failure says so."""
    art, _, failures = c3_driver(drop=("n2",))
    assert failures and all(f.endswith("no result from n2 (no aggregate recorded)") for f in failures)
    recs = art.to_dict()["results"]
    assert not [r for r in recs if r["labels"].get("scope") == "aggregate"]
    assert {r["labels"]["client"] for r in recs if r["labels"].get("scope") == "client"} == {"n1"}
    whole, _, none = c3_driver()
    assert none == [] and [r for r in whole.to_dict()["results"] if r["labels"].get("scope") == "aggregate"]


def test_a_failed_tier_is_an_error_row_beside_a_tier_with_results(tmp_path):
    """Checkpoint integrity on two tiers of one host: home saved and loaded, shared failed. The shared tier's error
    is a row of its own, not hidden by home's results."""
    arts = []
    for tier in ("home", "shared"):
        art = Artifact("checkpoint", "r", "n1", variant=tier)
        if tier == "home":
            art.add("ckpt_load_mismatch", 0, "count", tier=tier)
        else:
            art.error("torch.load raised OSError: Input/output error")
        arts.append(art)
    run = make_run(tmp_path, arts)
    rows = {r["subject"]: r for r in rows_of(run, "storage.ckpt_integrity") if r["host"] == "n1"}
    assert rows["tier=home"]["status"] == "pass"
    assert rows["tier=shared"]["status"] == "error" and rows["tier=shared"]["reason"].startswith("torch.load raised")
