"""Network grading (reports/phases/network/grade.py, rubric.d/network.yml) and the report section, on artifacts shaped
as the network probes write them."""

import json
from pathlib import Path

import pytest
from test_audit_grade import h200_node, roce_node

from probes.artifact import Artifact
from probes.common.command import CmdResult
from probes.network import nccl_output, nccl_tests
from probes.network.busbw import busbw_factor
from probes.network.worker import plan_steps
from reports import grading as grade
from reports.load import run_of_artifacts as make_run
from reports.phases.network import grade as gn
from reports.phases.network import section

H100 = "NVIDIA H100 80GB HBM3"
SIZES = [1 << k for k in range(4, 35, 2)]  # 16 B .. 16 GiB, factor 4
# Real curves of healthy systems (tests/fixtures/collective-curves/README.md names each source).
CURVES = Path(__file__).resolve().parents[1] / "fixtures" / "collective-curves"
GB300_ALL_GATHER = (CURVES / "gcp_a4xmax_gb300_2node_all_gather.txt").read_text()
GB300_FABRIC = {"fabric": "roce_800", "rails": 4}  # A4X Max: 4 ConnectX-8 800G per tray (GCP)


def logistic(peak, half=4 << 20):
    return [(s, peak * s / (s + half)) for s in SIZES]


def coll_doc(host, curves, backend="cuda", failures=None, status="ok", params=None, probe="collectives",
             variant=None):
    art = Artifact(probe, "r", host, variant=variant, params=params or {})
    art.device.update(backend=backend, model=H100 if backend == "cuda" else None)
    for (nodes, ranks, coll, place), points in curves.items():
        for size, busbw in points:
            labels = {"collective": coll, "size_bytes": size, "placement": place, "nodes": nodes, "ranks": ranks,
                      "dtype": "float32"}
            algbw = busbw / busbw_factor(coll, ranks)
            art.add("time_us", size / (algbw * 1e3), "us", **labels)
            art.add("algbw_gbps", algbw, "GB/s", **labels)
            art.add("busbw_gbps", busbw, "GB/s", **labels)
            art.add("wrong", 0, "count", **labels)
    art.facts["failures"] = failures or []
    art.facts["world_sizes_run"] = ",".join(sorted({str(k[0]) for k in curves}))
    if status == "skipped":
        art.skip("no GPU visible")
    elif status == "error":
        art.error("1 of 3 world sizes failed")
    return art.to_dict()


def info_doc(host, model=H100, gpus=None):
    art = Artifact("node_info", "r", host)
    art.facts["gpu_model"] = model
    if gpus is not None:
        art.add("gpu_count", gpus, "count")
    return art.to_dict()



RUBRIC = grade.load_rubric()


def check(cid):
    return next(c for c in RUBRIC["checks"] if c["id"] == cid)


def test_failures_name_the_hang_and_its_log(tmp_path):
    hang = {"nodes": 4, "kind": "hang", "log": "collectives.n4.log", "stuck_ranks": [0, 1, 3],
            "message": "hang at 4 nodes: ranks 0,1,3 stuck in all_reduce 64 KiB (in-place) (step 7)"}
    run = make_run([coll_doc("h1", {}, failures=[hang], status="error"), coll_doc("h2", {}),
                    coll_doc("h3", {}, status="skipped")], unreachable=["h4"])
    c = check("network.collectives_failures")
    [row] = gn.grade_failures(c, run, "h1")
    assert row["status"] == "fail" and row["observed"] == "1 hang"
    assert "ranks 0,1,3 stuck in all_reduce 64 KiB" in row["reason"]
    assert "(log: artifacts/h1/collectives.n4.log)" in row["reason"]
    assert gn.grade_failures(c, run, "h2")[0]["status"] == "pass"
    assert gn.grade_failures(c, run, "h3")[0]["reason"] == "no GPU visible"
    assert gn.grade_failures(c, run, "h4")[0]["reason"] == "host unreachable"
    md = section.render(run, [], str(tmp_path))
    assert ("- **collectives** (h1): hang at 4 nodes: ranks 0,1,3 stuck in all_reduce 64 KiB (in-place) (step 7) — "
            "logs: [h1/collectives.n4.log](../artifacts/h1/collectives.n4.log)") in md


def test_peak_busbw_single_node_against_the_gpu_model():
    c = check("network.collectives_allreduce_1node")  # 0.9 x 460 (H100) = 414
    docs = [coll_doc("good", {(1, 8, "all_reduce", "in_place"): logistic(480)}),
            coll_doc("slow", {(1, 8, "all_reduce", "in_place"): logistic(380)}),
            coll_doc("four", {(1, 4, "all_reduce", "in_place"): logistic(480)}),
            coll_doc("half", {(1, 4, "all_reduce", "in_place"): logistic(480)}),
            coll_doc("cpu", {(1, 1, "all_reduce", "in_place"): []}, backend="cpu")]
    run = make_run(docs + [info_doc(h) for h in ("good", "slow", "four", "cpu")] + [info_doc("half", gpus=8)])
    good = gn.grade_peak_busbw(c, run, "good")[0]
    assert good["status"] == "pass" and good["observed"].startswith("479.9 GB/s (16 GiB, 1 node, 8 ranks)")
    assert "0.9 × allreduce_busbw_8gpu_gbps_min 460" in good["expected"]
    assert gn.grade_peak_busbw(c, run, "slow")[0]["status"] == "fail"
    # 4 GPUs (no count in the facts: the ranks the run drove): H100 has no 4-GPU line
    assert gn.grade_peak_busbw(c, run, "four")[0]["reason"] == (
        "gpus.yml has no allreduce_busbw_4gpu_gbps_min for this GPU model (4 GPUs in one node)")
    # node_info counts 8 GPUs, the run used 4: not judged against the whole node's line
    assert gn.grade_peak_busbw(c, run, "half")[0]["reason"] == (
        "this node has 8 GPUs and its one-node run used 4 ranks: the expectation is for all of them")
    assert gn.grade_peak_busbw(c, run, "cpu")[0]["reason"] == "backend=cpu: expectation is for cuda/rocm"


def test_peak_busbw_single_node_takes_the_model_from_the_artifact_where_node_info_has_none():
    """AMD nodes: node_info has no GPU model (amd-smi list names none); the artifact's device.model (torch's name of
    the GPU) is looked up instead, as the compute, training and inference graders do. Before, a skip."""
    c = check("network.collectives_allreduce_1node")  # 0.9 x 460 (H100) = 414
    run = make_run([coll_doc("amd", {(1, 8, "all_reduce", "in_place"): logistic(380)}), info_doc("amd", model=None)])
    [row] = gn.grade_peak_busbw(c, run, "amd")
    assert row["status"] == "fail" and "0.9 × allreduce_busbw_8gpu_gbps_min 460" in row["expected"]


def test_peak_busbw_multi_node_against_the_declared_fabric():
    c = check("network.collectives_allreduce_multinode")  # 0.9 x 8 rails x 46 = 331.2, warn below 349.6
    fabric = {"fabric": "ib_ndr400", "rails": 8}
    docs = {}
    for host, peak in (("a", 370), ("b", 340), ("c", 300)):
        docs[host] = coll_doc(host, {(1, 8, "all_reduce", "in_place"): logistic(480),
                                     (2, 16, "all_reduce", "in_place"): logistic(peak + 40),
                                     (4, 32, "all_reduce", "in_place"): logistic(peak)}, params=fabric)
    docs["d"] = coll_doc("d", {(4, 32, "all_reduce", "in_place"): logistic(370)})  # no fabric declared
    docs["e"] = coll_doc("e", {(2, 16, "all_reduce", "in_place"): logistic(270)}, params={"fabric": "ib_ndr999",
                                                                                          "rails": 8})
    run = make_run(list(docs.values()) + [info_doc(h) for h in docs])
    rows = {h: gn.grade_peak_busbw(c, run, h)[0] for h in docs}
    assert [rows[h]["status"] for h in "abc"] == ["pass", "warn", "fail"]
    assert "4 nodes, 32 ranks" in rows["a"]["observed"]  # the largest world, not the 2-node one
    assert "8 rails × 46 GB/s per ib_ndr400 NIC" in rows["a"]["expected"]
    assert rows["d"]["status"] == "skip" and "set network_fabric and network_rails" in rows["d"]["reason"]
    assert "not in gpus.yml fabrics" in rows["e"]["reason"]
    # H200 has a 2-node pass line of its own (GCP, RoCE): used when no fabric is declared
    run = make_run([docs["d"], info_doc("d", model="NVIDIA H200")])
    row = gn.grade_peak_busbw(c, run, "d")[0]
    assert row["status"] == "pass" and "allreduce_busbw_2node_gbps_min 250" in row["expected"]


def test_curve_shape_flags_drops_on_gpu_but_not_small_cpu_noise():
    c = check("network.collectives_curve_shape")
    jagged = [(s, v * (0.55 if s == 4 << 30 else 1.0)) for s, v in logistic(370)]  # -45 % at 4 GiB
    dip = [(s, v * (0.85 if s == 4 << 30 else 1.0)) for s, v in logistic(370)]  # -15 %
    noisy_small = [(s, v * (0.05 if s == 4096 else 1.0)) for s, v in logistic(1.0)]  # -95 % at 4 KiB
    noisy_large = [(s, v * (0.3 if s == 16 << 20 else 1.0)) for s, v in logistic(1.0)]  # -70 % at 16 MiB
    run = make_run([coll_doc("g1", {(2, 16, "all_reduce", "in_place"): jagged}),
                    coll_doc("g2", {(2, 16, "all_reduce", "in_place"): dip}),
                    coll_doc("g3", {(2, 16, "all_reduce", "in_place"): logistic(370)}),
                    coll_doc("c1", {(2, 2, "all_reduce", "in_place"): noisy_small}, backend="cpu"),
                    coll_doc("c2", {(2, 2, "all_reduce", "in_place"): noisy_large}, backend="cpu")])
    g1 = gn.grade_curve_shape(c, run, "g1")[0]
    assert g1["status"] == "fail" and "all_reduce in-place at 2 nodes (16 ranks): 1 GiB -> 4 GiB -45%" in g1["reason"]
    assert gn.grade_curve_shape(c, run, "g2")[0]["status"] == "warn"
    assert gn.grade_curve_shape(c, run, "g3")[0]["status"] == "pass"
    assert gn.grade_curve_shape(c, run, "c1")[0]["status"] == "pass"  # below the cpu minimum size: noise
    c2 = gn.grade_curve_shape(c, run, "c2")[0]
    assert c2["status"] == "warn" and "cpu backend: warn only" in c2["expected"]


def test_find_drops_is_between_consecutive_sizes_above_the_minimum():
    points = [(1, 10.0), (2, 2.0), (4, 20.0), (8, 15.0), (16, 16.0)]
    assert gn.find_drops(points, 1, 20) == [(1, 2, 80.0), (4, 8, 25.0)]
    assert gn.find_drops(points, 4, 20) == [(4, 8, 25.0)]
    assert gn.find_drops(points, 4, 30) == []


def test_scaling_against_the_smallest_multi_node_world():
    c = check("network.collectives_scaling")
    curves = {(2, 16, "all_reduce", "in_place"): logistic(370), (4, 32, "all_reduce", "in_place"): logistic(360),
              (8, 64, "all_reduce", "in_place"): logistic(200)}
    run = make_run([coll_doc("h%d" % i, curves) for i in range(3)])
    rows = gn.grade_scaling(c, run, run.hosts)
    assert len(rows) == 3 and {r["status"] for r in rows} == {"fail"}
    # on GPUs the 2-node all_reduce is no reference (tree algorithms beat the NICs there): 8 nodes against 4
    assert rows[0]["observed"] == "worst 0.56: all_reduce in-place at 8 nodes vs 4 (16 GiB)"
    assert rows[0]["reason"].startswith("2-node all_reduce left out: NCCL's tree algorithms go beyond the NICs")
    cpu = make_run([coll_doc("h%d" % i, curves, backend="cpu") for i in range(3)])
    assert {r["status"] for r in gn.grade_scaling(c, cpu, cpu.hosts)} == {"warn"}
    good = make_run([coll_doc("h0", {k: logistic(365) for k in curves})])
    assert gn.grade_scaling(c, good, good.hosts)[0]["status"] == "pass"
    one = make_run([coll_doc("h0", {(2, 16, "all_reduce", "in_place"): logistic(370)})])
    assert "fewer than two multi-node world sizes measured (2)" in gn.grade_scaling(c, one, one.hosts)[0]["reason"]
    # the CPU backend (gloo) has no tree: its 2-node world counts
    assert gn.grade_scaling(c, cpu, cpu.hosts)[0]["observed"] == (
        "worst 0.54: all_reduce in-place at 8 nodes vs 2 (16 GiB)")


def test_alltoall_scaling_is_judged_per_gpu_of_network_bandwidth():
    """A fabric that holds 46 GB/s per GPU shows alltoall busbw 46 x N/(N-1) x (n-1)/n: 86.2, 59.4 and 51.8 GB/s at
    2, 4 and 8 nodes of 8 GPUs (at 2 nodes half the traffic stays on NVLink). That is a healthy fabric (it failed at
    0.60); one whose rate per GPU falls to 0.6 at 8 nodes still fails."""
    c = check("network.collectives_scaling")

    def series(per_gpu):
        return {(n, 8 * n, "alltoall", "out_of_place"):
                [(s, per_gpu[n] * gn.alltoall_network_factor(n, 8 * n) * s / (s + (4 << 20))) for s in SIZES]
                for n in (2, 4, 8)}

    healthy = make_run([coll_doc("h%d" % i, series({2: 46, 4: 46, 8: 46})) for i in range(2)])
    assert [round(v, 1) for v in (46 * gn.alltoall_network_factor(n, 8 * n) for n in (2, 4, 8))] == [86.2, 59.4, 51.8]
    rows = gn.grade_scaling(c, healthy, healthy.hosts)
    assert {r["status"] for r in rows} == {"pass"} and rows[0]["observed"].startswith("worst 1.00: alltoall ")
    assert "alltoall compared per GPU of network bandwidth" in rows[0]["reason"]
    slow = make_run([coll_doc("h0", series({2: 46, 4: 46, 8: 0.6 * 46}))])
    [row] = gn.grade_scaling(c, slow, slow.hosts)
    assert row["status"] == "fail" and row["observed"].startswith("worst 0.60: alltoall out-of-place at 8 nodes vs")


def pairs_doc(host, hosts, bw, rtt=25.0):
    art = Artifact("tcp_pairs", "r", host)
    for dst in hosts:
        if dst != host:
            art.add("bw_gbits", bw, "Gbit/s", src=host, dst=dst, tool="iperf3")
            art.add("rtt_us", rtt, "us", src=host, dst=dst)
            art.add("loss_pct", 0.0, "%", src=host, dst=dst, sent=5)
    return art.to_dict()


def test_pair_outliers_point_at_the_slow_host():
    hosts = ["n1", "n2", "n3", "n4"]
    docs = [pairs_doc(h, hosts, 9.0 if h != "n3" else 2.0, rtt=25.0 if h != "n2" else 80.0) for h in hosts]
    run = make_run(docs)
    rows = {r["host"]: r for r in gn.grade_pairs(check("network.tcp_pair_outlier"), run, hosts)}
    # n3 sends at 2 Gbit/s: its pairs' median is (2 + 9) / 2 = 5.5 against the other hosts' median pair 9.0 (-39 %)
    assert rows["n3"]["status"] == "warn" and "39% below the other hosts' median pair 9" in rows["n3"]["observed"]
    assert rows["n1"]["status"] == "pass" and rows["n4"]["status"] == "pass"
    assert rows["n2"]["status"] == "warn" and "rtt" in rows["n2"]["observed"]


def test_a_host_slow_on_every_pair_of_three_fails_against_the_others_pairs():
    """Three hosts, every pair with n3 at 1 Gbit/s and n1 <-> n2 at 10: n3 is in 4 of the 6 directed pairs, so the
    median of them all was its own 1 Gbit/s and every host passed. Against the pairs it is not in (10) it is 90 %
    below; n1 and n2 (5.5, against n3's pairs' 1) pass."""
    hosts = ["n1", "n2", "n3"]
    art = {h: Artifact("tcp_pairs", "r", h) for h in hosts}
    for src in hosts:
        for dst in hosts:
            if src != dst:
                art[src].add("bw_gbits", 1.0 if "n3" in (src, dst) else 10.0, "Gbit/s", src=src, dst=dst,
                             tool="iperf3")
                art[src].add("rtt_us", 25.0, "us", src=src, dst=dst)
    run = make_run([a.to_dict() for a in art.values()])
    rows = {r["host"]: r for r in gn.grade_pairs(check("network.tcp_pair_outlier"), run, hosts)}
    assert (rows["n3"]["status"], rows["n3"]["observed"]) == (
        "fail", "bw 1 Gbit/s (90% below the other hosts' median pair 10); rtt 25 us (+0%)")
    assert rows["n1"]["status"] == rows["n2"]["status"] == "pass"


def test_pairs_just_inside_their_lines_are_shown_inside_them():
    """n3's pairs 24.6 % below the median pair (warn over 25 %) and n2's rtt 99.6 % above it (warn over +100 %) pass:
    in whole percent they were shown as 25% and +100%, on the lines (reports/shown.py)."""
    hosts = ["n1", "n2", "n3", "n4"]
    docs = [pairs_doc(h, hosts, 4.572 if h == "n3" else 9.0, rtt=74.8 if h == "n2" else 25.0) for h in hosts]
    run = make_run(docs)
    rows = {r["host"]: r for r in gn.grade_pairs(check("network.tcp_pair_outlier"), run, hosts)}
    assert (rows["n3"]["status"], rows["n3"]["observed"]) == (
        "pass", "bw 6.79 Gbit/s (24.6% below the other hosts' median pair 9); rtt 25 us (+0%)")
    assert (rows["n2"]["status"], rows["n2"]["observed"]) == (
        "pass", "bw 9 Gbit/s (0% below the other hosts' median pair 9); rtt 49.9 us (+99.6%)")


def test_rail_bandwidth_against_the_fabric():
    def perf(host, bws, fabric):
        art = Artifact("perftest", "r", host, params={"fabric": fabric})
        for i, bw in enumerate(bws):
            art.add("bw_avg_gbits", bw, "Gbit/s", hca="mlx5_%d" % i, test="write", mem="host", peer="x")
        return art.to_dict()

    run = make_run([perf("a", [391.9, 300.0], "ib_ndr400"), perf("b", [391.9], "")])
    rows = gn.grade_rail_bw(check("network.perftest_rail_line_rate"), run, "a")
    assert [(r["subject"], r["status"]) for r in rows] == [("hca=mlx5_0 write host", "pass"),
                                                           ("hca=mlx5_1 write host", "fail")]
    assert rows[0]["expected"] == ">= 380 Gbit/s (ib_ndr400 pass line)"
    assert "no fabric declared" in gn.grade_rail_bw(check("network.perftest_rail_line_rate"), run, "b")[0]["reason"]


def perftest_doc(host, bws, fabric):
    art = Artifact("perftest", "r", host, params={"fabric": fabric})
    for hca, bw in bws.items():
        art.add("bw_avg_gbits", bw, "Gbit/s", hca=hca, test="write", mem="host", peer="x")
    return art.to_dict()


def audit_doc(host, facts):
    art = Artifact("audit", "r", host)
    art.facts.update(facts)
    return art.to_dict()


# A real H100 NDR node's RDMA devices (h200_node: ibstat_h100_ndr.txt): mlx5_0-7 the InfiniBand rails (mlx5_3 among
# them), mlx5_8 a 200G RoCE storage port, as perftest measures them all: healthy rails at 392, the storage port at
# its own line rate (190), and one rail slow at 300. mlx5_9 (down) left no result.
NDR_NODE = dict({"mlx5_%d" % i: 392.0 for i in range(8)}, mlx5_3=300.0, mlx5_8=190.0)
STORAGE_SKIP = "mlx5_8: storage NIC (200G RoCE) by the audit, not a rail of the fabric"


def test_rail_bandwidth_judges_only_the_audits_compute_rails():
    unsure = roce_node("MT_0000000838")  # storage ports of the rails' own card, no PCIe tree: the audit cannot tell
    run = make_run([perftest_doc("a", NDR_NODE, "ib_ndr400"), audit_doc("a", h200_node()),
                    perftest_doc("b", NDR_NODE, "ib_ndr400"),
                    perftest_doc("u", NDR_NODE, "roce_400"), audit_doc("u", unsure)])
    c = check("network.perftest_rail_line_rate")
    rows = {h: {r["subject"].split()[0]: r for r in gn.grade_rail_bw(c, run, h)} for h in ("a", "b", "u")}
    # with the audit: the storage port is measured, shown, not judged (it failed against the 380 pass line)
    a = rows["a"]
    # (the observed value names its link, client→server: a port is judged on its links, grade_rail_bw)
    assert (a["hca=mlx5_8"]["status"], a["hca=mlx5_8"]["observed"]) == ("skip", "a→x 190 Gbit/s")
    assert a["hca=mlx5_8"]["reason"] == STORAGE_SKIP
    assert (a["hca=mlx5_3"]["status"], a["hca=mlx5_0"]["status"], a["hca=mlx5_0"]["reason"]) == ("fail", "pass", "")
    # without it: every device judged as before, and each row says why
    b = rows["b"]
    assert [b["hca=mlx5_%d" % i]["status"] for i in (0, 3, 8)] == ["pass", "fail", "fail"]
    assert {r["reason"] for r in b.values()} == {gn.NO_AUDIT_ROLES}
    # a port the audit could not tell from a rail that trained low is judged as a rail, and says so
    u = rows["u"]
    assert u["hca=mlx5_8"]["status"] == "fail" and "could not tell mlx5_8" in u["hca=mlx5_8"]["reason"]


def test_rail_outlier_compares_the_rails_not_the_storage_port():
    frontend = h200_node()
    frontend["net"]["default_route"] = frontend["net"]["rdma"]["mlx5_8"]["netdevs"]  # the RoCE port carries it
    run = make_run([perftest_doc("a", NDR_NODE, "ib_ndr400"), audit_doc("a", h200_node()),
                    perftest_doc("b", NDR_NODE, "ib_ndr400"),
                    perftest_doc("f", NDR_NODE, "ib_ndr400"), audit_doc("f", frontend)])
    rows = grade.grade(run, {"checks": [check("network.perftest_rail_outlier")]})
    got = {(r["host"], r["subject"]): r for r in rows}
    assert (got[("a", "hca=mlx5_8")]["status"], got[("a", "hca=mlx5_8")]["reason"]) == ("skip", STORAGE_SKIP)
    assert got[("f", "hca=mlx5_8")]["reason"] == (
        "mlx5_8: frontend NIC (200G RoCE) by the audit, not a rail of the fabric")
    assert got[("a", "hca=mlx5_3")]["status"] == "fail"  # 300 against the rails' 392: the slow rail still shows
    assert got[("a", "hca=mlx5_0")]["status"] == "pass"
    # without the audit: judged as before (the storage port far below the rails), and the row says why
    assert (got[("b", "hca=mlx5_8")]["status"], got[("b", "hca=mlx5_8")]["reason"]) == ("fail", gn.NO_AUDIT_ROLES)


def test_every_network_check_has_a_row_for_every_host(tmp_path):
    hosts = ["n1", "n2", "n3", "n4"]
    curves = {(1, 1, "all_reduce", "in_place"): [], (2, 2, "all_reduce", "in_place"): logistic(0.4, 1 << 16),
              (4, 4, "all_reduce", "in_place"): logistic(0.2, 1 << 16),
              (4, 4, "all_gather", "out_of_place"): logistic(0.2, 1 << 16)}
    docs = [coll_doc(h, curves if h in ("n1", "n2") else {k: v for k, v in curves.items() if k[0] != 2},
                     backend="cpu") for h in hosts]
    docs += [pairs_doc(h, hosts, 5.0) for h in hosts] + [info_doc(h, model=None) for h in hosts]
    for h in hosts:
        for probe, variant in (("nccl_tests", None), ("perftest", None), ("collectives", "nvlink_off"),
                               ("collectives", "ring")):
            art = Artifact(probe, "r", h, variant=variant)
            art.skip("no GPU visible")
            docs.append(art.to_dict())
    run = make_run(docs)
    rows = grade.grade(run, RUBRIC)
    net = [r for r in rows if r["check_id"].startswith("network.")]
    ids = {c["id"] for c in RUBRIC["checks"] if c["id"].startswith("network.")}
    assert {r["check_id"] for r in net} == ids
    for cid in ids:
        assert {r["host"] for r in net if r["check_id"] == cid} == set(hosts), cid
    by = {(r["check_id"], r["host"]): r for r in net}
    assert by[("network.collectives_failures", "n3")]["status"] == "pass"
    assert by[("network.nccl_tests_ran", "n1")]["reason"] == "no GPU visible"
    assert by[("network.collectives_scaling", "n1")]["status"] == "warn"  # cpu: never a fail
    assert by[("network.tcp_loss", "n2")]["status"] == "pass"
    assert all(r["category"] == "networking" for r in net)

    # the report section: tables from the same artifacts, and the plots beside it
    md = section.render(run, rows, str(tmp_path))
    assert md.startswith("## Network") and "| all_reduce | in-place | 4 | 4 | 0.2 | 16 GiB |" in md
    assert "![collectives busbw](network_collectives_busbw.png)" in md
    assert "| n1 | – | 5 Gb/s · 25 us · 0% loss |" in md
    for png in ("network_collectives_busbw.png", "network_collectives_time.png", "network_tcp_pairs.png"):
        assert (tmp_path / png).stat().st_size > 5000
    assert "nccl_tests: no GPU visible" in md
    json.dumps(rows)


# ---------------------------------------------------------------------------------------------------------------
# Real curves: every collective at every world size, judged on its plateau, its small messages and its scaling


def scaled(text, bw=1.0, time=1.0):
    """A real nccl-tests output with every result row's algbw and busbw multiplied by bw and its times by time (out
    of place and in place): how a slower run of the same system is derived from a healthy one."""
    out = []
    for line in text.splitlines():
        t = line.split()
        if len(t) >= 13 and t[0].isdigit() and t[1].isdigit():
            for i in (5, 9):
                t[i] = "%.2f" % (float(t[i]) * time)
            for i in (6, 7, 10, 11):
                t[i] = "%.2f" % (float(t[i]) * bw)
            line = " ".join(t)
        out.append(line)
    return "\n".join(out) + "\n"


def nccl_doc(tmp_path, host, outputs, params=None, variant=None):
    """The nccl_tests artifact the probe writes from these outputs ({(collective, nodes): stdout}), through the
    probe's own run_one with a runner that prints the output."""
    art = Artifact("nccl_tests", "r", host, variant=variant, params=params or {})
    art.device.update(backend="cuda", model="NVIDIA GB300")
    for (coll, nodes), text in outputs.items():
        def runner(argv, timeout, text=text):
            return CmdResult(argv, 0, text, "", False, False)
        failure = nccl_tests.run_one(art, coll, "/opt/nccl-tests/build/%s_perf" % coll, runner, [], 60,
                                     "nccl_tests", str(tmp_path), False, nodes)
        assert failure is None
    art.facts["failures"] = []
    return art.to_dict()


def azure_busbw(name):
    """[(size, busbw)] of an Azure AI-benchmarking-guide table: its rows are 1 KiB, 2 KiB ... 8 GiB."""
    rows = [line.split("|") for line in (CURVES / name).read_text().splitlines()[2:]]
    return [(1024 << i, float(cells[2])) for i, cells in enumerate(rows)]


def rows_of(check_id, run, host):
    return {r["subject"]: r for r in gn.PER_HOST[check(check_id)["kind"]](check(check_id), run, host)}


def test_a_degraded_all_gather_fails_on_its_plateau_where_the_healthy_one_passes(tmp_path):
    # Two GB300 trays in different NVLink domains (GCP): the 4 800G NICs of a tray carry all_gather at 378.9 GB/s
    # (in place, 4 GiB), 1.03 of 4 x 92 (357.7 out of place, 0.97). The degraded run is the same output 8x slower
    # (busbw / 8, time x 8).
    run = make_run([nccl_doc(tmp_path, "good", {("all_gather", 2): GB300_ALL_GATHER}, GB300_FABRIC),
                    nccl_doc(tmp_path, "slow", {("all_gather", 2): scaled(GB300_ALL_GATHER, 1 / 8, 8)}, GB300_FABRIC),
                    info_doc("good", "NVIDIA GB300", gpus=4), info_doc("slow", "NVIDIA GB300", gpus=4)])
    good = rows_of("network.nccl_tests_plateau", run, "good")["all_gather 2 nodes"]
    assert (good["status"], good["observed"]) == ("pass", "peak 378.9 GB/s at 4 GiB (8 ranks)")
    assert good["expected"] == ">= 184 (0.5 × 4 rails × 92 GB/s per roce_800 NIC; warn below 257.6)"
    slow = rows_of("network.nccl_tests_plateau", run, "slow")["all_gather 2 nodes"]
    assert (slow["status"], slow["observed"]) == ("fail", "peak 47.36 GB/s at 4 GiB (8 ranks)")
    # the shape check alone cannot tell them apart: both dip where NCCL changes protocol (8 -> 16 MiB, -16 % out
    # of place, far beyond the 0.5 % spread of out-of-place and in-place there) and warn the same
    shape = check("network.nccl_tests_curve_shape")
    good_shape, slow_shape = (gn.grade_curve_shape(shape, run, h)[0] for h in ("good", "slow"))
    assert good_shape["status"] == slow_shape["status"] == "warn"
    assert "all_gather out-of-place at 2 nodes (8 ranks): 8 MiB -> 16 MiB -16%" in good_shape["reason"]
    assert "warn only" in good_shape["expected"]


def test_drops_within_the_out_of_place_in_place_spread_are_noise(tmp_path):
    # the same GB300 curve: at 32 MiB out of place and in place differ by 20 % (116.11 vs 145.13); a 15 % step down
    # there is within that noise, the same step at 16 MiB (spread 1 %) is not
    noise = gn.placement_noise(gn.frame(make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): GB300_ALL_GATHER})]),
                                        "nccl_tests", "busbw_gbps"))[(2, 8, "all_gather")]
    assert round(noise[32 << 20]) == 20 and round(noise[16 << 20]) == 1
    points = [(16 << 20, 100.0), (32 << 20, 85.0), (64 << 20, 90.0)]
    assert gn.find_drops(points, 1 << 20, 10, noise) == []
    assert gn.find_drops(points, 1 << 20, 10) == [(16 << 20, 32 << 20, 15.0)]


def test_a_4_gpu_tray_is_graded_on_one_node_bus_bandwidth():
    # Azure's ND GB200 v6: all_reduce (ring, in place) on the 4 GPUs of one tray reaches 679.61 GB/s; node_info
    # counts 4 GPUs, so the 4-GPU lines apply. Degraded: the same curve / 8. Azure's 8 x H200 (NVLS) for 8 GPUs.
    gb200 = azure_busbw("azure_nd_gb200_v6_all_reduce_ring.md")
    h200 = azure_busbw("azure_nd_h200_v5_all_reduce_nvls.md")
    docs = [coll_doc("tray", {(1, 4, "all_reduce", "in_place"): gb200}, probe="nccl_tests"),
            coll_doc("slow", {(1, 4, "all_reduce", "in_place"): [(s, v / 8) for s, v in gb200]}, probe="nccl_tests"),
            coll_doc("h200", {(1, 8, "all_reduce", "in_place"): h200}, probe="nccl_tests")]
    run = make_run(docs + [info_doc("tray", "NVIDIA GB200", gpus=4), info_doc("slow", "NVIDIA GB200", gpus=4),
                           info_doc("h200", "NVIDIA H200", gpus=8)])
    c = check("network.nccl_tests_allreduce_1node")
    tray = gn.grade_peak_busbw(c, run, "tray")[0]
    assert (tray["status"], tray["observed"], tray["expected"]) == (
        "pass", "679.6 GB/s (8 GiB, 1 node, 4 ranks)", ">= 432 (1 × allreduce_busbw_4gpu_gbps_min 432)")
    assert gn.grade_peak_busbw(c, run, "slow")[0]["status"] == "fail"
    h200_row = gn.grade_peak_busbw(c, run, "h200")[0]
    assert (h200_row["status"], h200_row["expected"]) == ("pass", ">= 431 (1 × allreduce_busbw_8gpu_gbps_min 431)")
    plateau = rows_of("network.nccl_tests_plateau", run, "tray")["all_reduce 1 node"]
    assert (plateau["status"], plateau["expected"]) == (
        "pass", ">= 340 (0.5 × allreduce_busbw_4gpu_ring_gbps 680; warn below 476)")
    assert rows_of("network.nccl_tests_plateau", run, "slow")["all_reduce 1 node"]["status"] == "fail"
    assert rows_of("network.nccl_tests_plateau", run, "h200")["all_reduce 1 node"]["status"] == "pass"


def test_a_curve_cut_before_its_plateau_is_not_failed():
    # the GB200 tray's curve as a run with max_bytes 8 MiB would print it: still rising 73 % at its last step
    cut = [(s, v) for s, v in azure_busbw("azure_nd_gb200_v6_all_reduce_ring.md") if s <= 8 << 20]
    run = make_run([coll_doc("tray", {(1, 4, "all_reduce", "in_place"): cut}, probe="nccl_tests"),
                    info_doc("tray", "NVIDIA GB200", gpus=4)])
    row = rows_of("network.nccl_tests_plateau", run, "tray")["all_reduce 1 node"]
    assert row["status"] == "skip" and row["reason"] == (
        "not saturated: busbw still rose 73% from 4 MiB to 8 MiB, the largest size; run larger sizes (max_bytes)")


def test_nvlink_off_runs_are_judged_against_one_gpus_share_of_the_nics(tmp_path):
    # With NVLink, P2P and SHM off every rank's traffic leaves on its own NIC: the GB300 trays' all_gather at a
    # quarter of the healthy NVLink-on run (4 GPUs share 4 NICs instead of each channel having one) is the healthy
    # NVLink-off curve of that system; / 8 again is a degraded one.
    off = scaled(GB300_ALL_GATHER, 1 / 4, 4)
    run = make_run([nccl_doc(tmp_path, "good", {("all_gather", 2): off}, GB300_FABRIC, variant="nvlink_off"),
                    nccl_doc(tmp_path, "slow", {("all_gather", 2): scaled(off, 1 / 8, 8)}, GB300_FABRIC,
                             variant="nvlink_off"),
                    info_doc("good", "NVIDIA GB300", gpus=4), info_doc("slow", "NVIDIA GB300", gpus=4)])
    good = rows_of("network.nccl_tests_nvlink_off_plateau", run, "good")["all_gather 2 nodes"]
    assert (good["status"], good["observed"], good["expected"]) == (
        "pass", "peak 94.72 GB/s at 4 GiB (8 ranks)",
        ">= 46 (0.5 × 4 rails / 4 GPUs × 92 GB/s per roce_800 NIC; warn below 64.4)")
    assert rows_of("network.nccl_tests_nvlink_off_plateau", run, "slow")["all_gather 2 nodes"]["status"] == "fail"
    # one node with NVLink off crosses the NICs too (Azure's IB loopback check); with NVLink on, the GPU model
    doc = run.artifact("good", "nccl_tests", "nvlink_off")
    assert gn.plateau_reference(check("network.nccl_tests_nvlink_off_plateau"), run, "good", doc, "all_reduce", 1,
                                4) == (92.0, "4 rails / 4 GPUs × 92 GB/s per roce_800 NIC")
    assert gn.plateau_reference(check("network.nccl_tests_plateau"), run, "good", doc, "all_reduce", 1, 4) == (
        680.0, "allreduce_busbw_4gpu_ring_gbps 680")
    # alltoall across nodes cannot aggregate NICs (nccl-tests#267): one GPU's share even with NVLink on, times what
    # stays in the node at 2 nodes (nccl-tests#130): 92 x 2 x 7/8
    assert gn.plateau_reference(check("network.nccl_tests_plateau"), run, "good", doc, "alltoall", 2, 8)[0] == 161.0
    undeclared = make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): off}, variant="nvlink_off")])
    assert rows_of("network.nccl_tests_nvlink_off_plateau", undeclared, "h")["all_gather 2 nodes"]["reason"] == (
        "no fabric declared: set network_fabric and network_rails in the inventory")


@pytest.mark.parametrize("time, status", [(1, "pass"), (5, "warn"), (20, "fail")])
def test_small_message_time_against_nccls_latency_model(tmp_path, time, status):
    # 2 GB300 trays, 8 ranks: 27.71 us at 4 KiB (in place; 28.51 out of place). Estimate 12 + 2.7 x 2 x 7 = 49.8 us.
    # Slower small-message paths are the same output with every time x 5 and x 20.
    run = make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): scaled(GB300_ALL_GATHER, 1 / time, time)})])
    row = rows_of("network.nccl_tests_latency", run, "h")["all_gather 2 nodes"]
    assert row["status"] == status
    assert row["expected"] == "<= 498 us (10 × the latency estimate 49.8 us; warn above 99.6)"
    if time == 1:
        assert row["observed"] == "27.7 us at 4 KiB (8 ranks)"


def test_scaling_is_judged_from_n_to_2n_and_against_the_smallest_world(tmp_path):
    # The 2-node GB300 curve, and larger worlds derived from it: a steady 12 % loss per doubling (each step passes,
    # 16 nodes end at 0.68 of 2), and one bad step (4 -> 8 nodes at 0.68 of 4 while 0.75 of 2).
    c = check("network.nccl_tests_scaling")
    steady = make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): GB300_ALL_GATHER,
                                                ("all_gather", 4): scaled(GB300_ALL_GATHER, 0.88),
                                                ("all_gather", 8): scaled(GB300_ALL_GATHER, 0.88 ** 2),
                                                ("all_gather", 16): scaled(GB300_ALL_GATHER, 0.88 ** 3)})])
    [row] = gn.grade_scaling(c, steady, steady.hosts)
    assert row["status"] == "fail" and row["observed"].startswith("worst 0.68: all_gather ")
    assert row["observed"].endswith(" at 16 nodes vs 2 (16 GiB)")
    assert row["expected"] == ("busbw at every world size >= 0.7 × the next smaller world's (n to 2n) and the smallest "
                               "world's (warn below 0.85)")
    step = make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): GB300_ALL_GATHER,
                                              ("all_gather", 4): scaled(GB300_ALL_GATHER, 1.1),
                                              ("all_gather", 8): scaled(GB300_ALL_GATHER, 0.75)})])
    [row] = gn.grade_scaling(c, step, step.hosts)
    assert row["status"] == "fail" and row["observed"].startswith("worst 0.68: all_gather ")
    assert row["observed"].endswith(" at 8 nodes vs 4 (16 GiB)")


def test_the_section_shows_each_curves_peak_and_smallest_message(tmp_path):
    run = make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): GB300_ALL_GATHER}, GB300_FABRIC)])
    md = section.render(run, [], None)
    assert "| all_gather | out-of-place | 2 | 8 | 357.7 | 8 GiB | 23 | 28.5 us at 4 KiB |" in md
    assert "| all_gather | in-place | 2 | 8 | 378.9 | 4 GiB | 23 | 27.7 us at 4 KiB |" in md


def test_nccl_tests_build_names_a_world_on_fewer_hosts_and_an_older_library(tmp_path):
    # The real GB300 output printed its 8 ranks on 2 hosts: as the 2-node run it was, it passes with its versions;
    # the same output where the probe asked for 4 nodes (the launcher placed the ranks on 2) fails, so its "4-node"
    # numbers are not taken for 4 nodes.
    check_ = check("network.nccl_tests_build")
    two = make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): GB300_ALL_GATHER})])
    row = gn.grade_nccl_build(check_, two, "h")[0]
    assert (row["status"], row["observed"]) == ("pass", "nccl-tests 2.17.6, NCCL 2.28.9 (headers 2.28.9)")
    four = make_run([nccl_doc(tmp_path, "h", {("all_gather", 4): GB300_ALL_GATHER})])
    row = gn.grade_nccl_build(check_, four, "h")[0]
    assert (row["status"], row["observed"]) == ("fail", "all_gather at 4 nodes: nccl-tests printed ranks on 2 hosts")
    assert "not measured on as many hosts as the world has nodes" in row["reason"]
    # Built with 2.28.9's headers, run with a 2.21.5 library (the version line as nccl-tests prints it when
    # LD_LIBRARY_PATH finds an older libnccl than NCCL_HOME had: its header line, library code changed)
    older = GB300_ALL_GATHER.replace("nccl-library=22809", "nccl-library=22105")
    row = gn.grade_nccl_build(check_, make_run([nccl_doc(tmp_path, "h", {("all_gather", 2): older})]), "h")[0]
    assert row["status"] == "warn" and row["observed"] == "nccl-tests 2.17.6, NCCL 2.21.5 (headers 2.28.9)"
    assert "built with NCCL 2.28.9 headers and ran with the older library 2.21.5" in row["reason"]
    # nccl.h's two encodings of the version code
    assert (gn.nccl_version(22809), gn.nccl_version(2803), gn.nccl_version(21903)) == ("2.28.9", "2.8.3", "2.19.3")


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests" / "real"


def test_a_real_2_4_8_node_series_scales_from_4_nodes_on(tmp_path):
    # One H100 cluster on 8 x NDR 400 per node (NVIDIA/nccl-tests#309): all_reduce at 2, 4 and 8 nodes. The 2-node
    # figure (466.7 GB/s, tree) is above what the NICs carry; from 4 nodes on busbw holds (321 of 325.9).
    outputs = {("all_reduce", n): (REAL / name).read_text() for n, name in (
        (2, "nccl-tests_h100x16_2node_all_reduce_perf_ib400.txt"),
        (4, "nccl-tests_h100x32_4node_all_reduce_perf_ib400.txt"),
        (8, "nccl-tests_h100x64_8node_all_reduce_perf_ib400.txt"))}
    fabric = {"fabric": "ib_ndr400", "rails": 8}
    run = make_run([nccl_doc(tmp_path, "h", outputs, fabric), info_doc("h", H100, gpus=8)])
    [row] = gn.grade_scaling(check("network.nccl_tests_scaling"), run, ["h"])
    assert (row["status"], row["observed"]) == ("pass", "worst 0.99: all_reduce out-of-place at 8 nodes vs 4 (8 GiB)")
    assert "NVIDIA/nccl-tests#169" in row["reason"]
    plateau = rows_of("network.nccl_tests_plateau", run, "h")
    assert {k: (v["status"], v["observed"]) for k, v in plateau.items()} == {
        "all_reduce 2 nodes": ("pass", "peak 466.7 GB/s at 8 GiB (16 ranks)"),
        "all_reduce 4 nodes": ("pass", "peak 325.9 GB/s at 4 GiB (32 ranks)"),
        "all_reduce 8 nodes": ("pass", "peak 321 GB/s at 4 GiB (64 ranks)")}
    build = gn.grade_nccl_build(check("network.nccl_tests_build"), run, "h")[0]
    assert build["status"] == "pass"  # 16, 32 and 64 ranks printed on 2, 4 and 8 hosts


def test_the_sections_smallest_message_is_the_slowest_hosts():
    """Two hosts measure one 2-node curve; one takes ten times as long per call. The section shows the slowest host
    per point, as its line says: for times that is the longest one, not the shortest."""
    curves_ = {(2, 16, "all_reduce", "in_place"): logistic(370)}
    fast, slow = coll_doc("h0", curves_), coll_doc("h1", curves_)
    for r in slow["results"]:
        if r["metric"] == "time_us":
            r["value"] *= 10
    run = make_run([fast, slow])
    times = gn.frame(run, "collectives", "time_us")
    row = section.peak_table(gn.frame(run, "collectives", "busbw_gbps"), times).rows[0]
    from probes.network.plan import human_bytes

    [small] = [r["value"] for r in slow["results"]
               if r["metric"] == "time_us" and r["labels"]["size_bytes"] == SIZES[0]]
    value, unit = row[-1].split(" us at ")
    assert float(value) == pytest.approx(small, rel=1e-3) and unit == human_bytes(SIZES[0])


def test_a_peak_below_the_line_of_a_curve_cut_short_is_not_saturated_not_failed():
    """Azure's 8-GPU all_reduce line (460 GB/s for H100) is a 16 GiB peak. The quick profile's torch collectives stop
    at 4 MiB, where a healthy node's busbw is still climbing: that is a skip saying so, not a fail of a major check;
    the same node over the whole sweep passes, and a node that levels off below the line still fails."""
    c = check("network.collectives_allreduce_1node")
    key = (1, 8, "all_reduce", "in_place")

    def run_of(points):
        return make_run([coll_doc("h0", {key: points}), info_doc("h0", H100, gpus=8)])

    cut = [(s, v) for s, v in logistic(470) if s <= 4 << 20]
    [row] = gn.grade_peak_busbw(c, run_of(cut), "h0")
    assert row["status"] == "skip" and row["reason"].startswith("not saturated: busbw still rose ")
    assert row["reason"].endswith("from 1 MiB to 4 MiB, the largest size; run larger sizes (max_bytes)")
    assert gn.grade_peak_busbw(c, run_of(logistic(470)), "h0")[0]["status"] == "pass"
    assert gn.grade_peak_busbw(c, run_of(logistic(300)), "h0")[0]["status"] == "fail"


def test_a_levelled_off_peak_just_below_a_line_drawn_at_a_larger_size_is_not_failed(tmp_path):
    """A real 8 x MI300X rccl-tests all_reduce (tests/fixtures/nccl-tests/rccl-tests_develop_mi300x_1node.txt):
    313.66 GB/s at 1 GiB and 315.69 at 8 GiB, against Azure's 314 at 16 GiB. Cut at 1 GiB (what the quick profile
    runs) its curve has levelled off (+1 % from 512 MiB) and sits 0.1 % below the line: a skip saying the sweep
    stopped short, not a fail; the whole sweep passes, and a node 20 % below fails even from the short sweep."""
    text = (REAL.parent / "rccl-tests_develop_mi300x_1node.txt").read_text()
    rows = [line for line in text.splitlines() if line.split() and line.split()[0].isdigit()]
    quick = "\n".join(line for line in text.splitlines() if line not in rows or int(line.split()[0]) <= 1 << 30)

    def grade_of(output):
        doc = nccl_doc(tmp_path, "h0", {("all_reduce", 1): output})
        doc["device"].update(backend="rocm", model="AMD Instinct MI300X")
        run = make_run([doc, info_doc("h0", model="AMD Instinct MI300X", gpus=8)])
        [row] = gn.grade_peak_busbw(check("network.nccl_tests_allreduce_1node"), run, "h0")
        return row

    row = grade_of(quick)
    assert row["status"] == "skip", row
    # the mean of its two placements at 1 GiB, as nccl-tests' own average takes them
    assert row["observed"] == "313.5 GB/s (1 GiB, 1 node, 8 ranks; mean of in-place 313.4, out-of-place 313.7)", row
    assert row["reason"] == ("below the line by 0.2%, but the line is a peak at 16 GiB and this sweep stopped at "
                             "1 GiB, where a healthy curve is still up to a few percent short of it: run larger "
                             "sizes (max_bytes 17179869184) to judge")
    assert grade_of(text)["status"] == "pass"
    assert grade_of(scaled(quick, bw=0.8))["status"] == "fail"


def test_alltoall_plateau_is_judged_per_gpu_of_network_bandwidth(tmp_path):
    """OCI MI355X (8 GPUs and 8 x 400G RoCE per node): rccl-tests alltoall, 86.73 GB/s at 16 GiB on 2 nodes (16
    ranks: size / count / 4 B) and 50.63 on 4 (32 ranks). Per GPU of network bandwidth that is 46.3 and 39.2 GB/s
    (busbw / (N/(N-1) x (n-1)/n), NVIDIA/nccl-tests#130). A fabric at 40 % of that: every busbw x 0.4 (34.69 at 2
    nodes), every time / 0.4. Before, the reference was the bare 46 GB/s and 34.69 passed (fail line 23, warn 32.2)."""
    fabric = {"fabric": "roce_400", "rails": 8}
    outputs = {n: (REAL / ("rccl-tests_mi355x_pollara-roce400x8_%dnode_alltoall_perf_large.txt" % n)).read_text()
               for n in (2, 4)}

    def doc(host, bw):
        curves_ = {}
        for n, text in outputs.items():
            for r in nccl_output.parse_text(scaled(text, bw, 1 / bw), "alltoall_perf")["rows"]:
                curves_.setdefault((n, 8 * n, "alltoall", r["placement"]), []).append((r["size"], r["busbw_gbps"]))
        return coll_doc(host, curves_, probe="nccl_tests", params=fabric)

    run = make_run([doc("good", 1.0), doc("slow", 0.4), info_doc("good", gpus=8), info_doc("slow", gpus=8)])
    good = rows_of("network.nccl_tests_plateau", run, "good")
    assert {k: (v["status"], v["observed"]) for k, v in good.items()} == {
        "alltoall 2 nodes": ("pass", "peak 86.73 GB/s at 16 GiB (16 ranks)"),
        "alltoall 4 nodes": ("pass", "peak 50.76 GB/s at 16 GiB (32 ranks)")}
    assert good["alltoall 2 nodes"]["expected"] == (
        ">= 43.12 (0.5 × 8 rails / 8 GPUs × 46 GB/s per roce_400 NIC × 1.875 (alltoall at 2 nodes, 16 ranks: "
        "N/(N-1) × (n-1)/n, NVIDIA/nccl-tests#130); warn below 60.37)")
    slow = rows_of("network.nccl_tests_plateau", run, "slow")
    assert {k: (v["status"], v["observed"]) for k, v in slow.items()} == {
        "alltoall 2 nodes": ("fail", "peak 34.69 GB/s at 16 GiB (16 ranks)"),
        "alltoall 4 nodes": ("fail", "peak 20.3 GB/s at 16 GiB (32 ranks)")}
    # the plateau and the scaling check (grade_scaling) share this one factor: 2/1 x 15/16 at 2 nodes
    assert gn.alltoall_network_factor(2, 16) == 1.875


def test_gather_across_nodes_is_shown_but_not_judged(tmp_path):
    """gather_perf on 2 nodes x 1 A100 over one 200G HCA (NVIDIA/nccl-tests#350): peak 23.61 GB/s. No source says
    what share of a node's NICs reaches gather's root, so its plateau is not graded against the per-NIC line
    (before: pass against 1 rail / 1 GPU x 23): a skip row with the peak and the reason, never a missing row."""
    parsed = nccl_output.parse_text(
        (REAL / "nccl-tests_nccl2.16.5_a100pciex2_2node_gather_perf_ib200_gdr_first16.txt").read_text())
    assert (parsed["collective"], nccl_output.nranks(parsed)) == ("gather", 2)
    curves_ = {}
    for r in parsed["rows"]:
        curves_.setdefault((2, 2, "gather", r["placement"]), []).append((r["size"], r["busbw_gbps"]))
    run = make_run([coll_doc("h", curves_, probe="nccl_tests", params={"fabric": "ib_hdr200", "rails": 1}),
                    info_doc("h", "NVIDIA A100-PCIE-40GB", gpus=1)])
    row = rows_of("network.nccl_tests_plateau", run, "h")["gather 2 nodes"]
    assert (row["status"], row["observed"], row["expected"]) == ("skip", "peak 23.61 GB/s at 1536 MiB (2 ranks)", "")
    assert row["reason"] == ("not judged: gather across nodes meets at one root GPU, and no published reference says "
                             "how much of the node's NICs reaches it; the peak is shown as measured")
    # with NVLink off every byte crosses the root's own NIC: one GPU's share, as for every collective there
    doc = run.artifact("h", "nccl_tests", None)
    assert gn.plateau_reference(check("network.nccl_tests_nvlink_off_plateau"), run, "h", doc, "gather", 2, 2) == (
        23.0, "1 rails / 1 GPUs × 23 GB/s per ib_hdr200 NIC")


# ---------------------------------------------------------------------------------------------------------------
# Scaling across world sizes whose chunked sizes differ (the rank count rounds them), skipped worlds, and the report's
# scaling table


def probe_curve(coll, ranks, peak, sizes=tuple(1 << k for k in range(20, 31))):
    """A curve at the sizes the collectives probe measures for `ranks` ranks (worker.plan_steps, float32): a chunked
    collective's size is rounded down to whole elements per rank (1 GiB is 1,073,741,760 bytes at 48 ranks)."""
    place = "in_place" if coll == "all_reduce" else "out_of_place"
    return [(nbytes, peak * nbytes / (nbytes + (8 << 20)))
            for _, pl, _, nbytes in plan_steps([coll], list(sizes), ranks, 4) if pl == place]


def six_hosts(all_gather_peaks, all_reduce=True):
    """Six hosts, worlds of 2, 4 and 6 nodes x 8 GPUs (the last world is every host: 48 ranks)."""
    curves = {}
    for nodes, peak in all_gather_peaks.items():
        curves[(nodes, 8 * nodes, "all_gather", "out_of_place")] = probe_curve("all_gather", 8 * nodes, peak)
        if all_reduce:
            curves[(nodes, 8 * nodes, "all_reduce", "in_place")] = probe_curve("all_reduce", 8 * nodes, 360)
    hosts = ["h%d" % i for i in range(1, 7)]
    return make_run([coll_doc(h, curves, params={"fabric": "ib_ndr400", "rails": 8}) for h in hosts] +
                    [info_doc(h, gpus=8) for h in hosts])


def test_scaling_matches_sizes_rounded_to_whole_elements_per_rank():
    """all_gather collapses from 360 GB/s at 2 nodes to 150 at 4 and 6. At 48 ranks the probe's 1 GiB is 1,073,741,760
    bytes, no size of the 6-node world equalled one of the others: all_gather dropped out of scaling altogether (the
    2 -> 4 step too) and the check passed on all_reduce ("worst 1.00"); without all_reduce it skipped, saying fewer than
    two world sizes were measured. Each pair of worlds is now compared at the largest size both measured, sizes one
    element per rank apart being the same size asked for."""
    c = check("network.collectives_scaling")
    run = six_hosts({2: 360, 4: 150, 6: 150})
    rows = gn.grade_scaling(c, run, run.hosts)
    assert {r["status"] for r in rows} == {"fail"}
    assert rows[0]["observed"] == "worst 0.42: all_gather out-of-place at 6 nodes vs 2 (1 GiB)"
    # without the 6-node world: the same verdict, on the 4-node one
    # the report's table reads the same comparison
    assert ("| all_gather | out-of-place | 6 | 48 | 1 GiB | 148.8 | 41.7 % of 2 nodes (357.2 GB/s at 1 GiB) |"
            in section.render(run, [], None))
    four = six_hosts({2: 360, 4: 150})
    assert gn.grade_scaling(c, four, four.hosts)[0]["observed"] == (
        "worst 0.42: all_gather out-of-place at 4 nodes vs 2 (1 GiB)")
    # no all_reduce at all: all_gather alone is judged, not skipped
    healthy = six_hosts({2: 360, 4: 358, 6: 357}, all_reduce=False)
    row = gn.grade_scaling(c, healthy, healthy.hosts)[0]
    assert row["status"] == "pass" and row["observed"] == "worst 0.99: all_gather out-of-place at 6 nodes vs 2 (1 GiB)"
    # the sizes: 1 GiB asked for is 1,073,741,760 bytes at 48 ranks, matched with 1 GiB; half of it is another size
    assert probe_curve("all_gather", 48, 150)[-1][0] == 1_073_741_760 and probe_curve("all_gather", 32, 1)[-1][0] == (
        1 << 30)
    assert gn.common_size([(1 << 29, 1.0), (1_073_741_760, 2.0)], [(1 << 29, 3.0), (1 << 30, 4.0)], 48) == (
        1 << 30, 2.0, 4.0)
    assert gn.common_size([(1_073_741_760, 2.0)], [(1 << 29, 3.0)], 48) is None


def test_a_world_size_not_run_is_a_skip_not_a_failure():
    """nccl-tests under torchrun runs the one-node worlds only: the probe records each multi-node world it could not
    start as kind "skipped", and its artifact is ok. That was a critical fail; it is a skip with the reason. A real
    failure beside it still fails."""
    skipped = {"kind": "skipped", "nodes": 2, "collective": None, "log": None,
               "message": "not run at 2 nodes: nccl-tests starts across nodes only through MPI (srun or mpirun); the "
                          "launcher is torchrun"}
    hang = {"nodes": 4, "kind": "hang", "log": "nccl_tests.n4.log", "stuck_ranks": [3],
            "message": "hang at 4 nodes: rank 3 stuck in all_reduce_perf"}
    one_node = {(1, 8, "all_reduce", "out_of_place"): logistic(470)}
    run = make_run([coll_doc("h1", one_node, failures=[skipped], probe="nccl_tests"),
                    coll_doc("h2", one_node, failures=[hang, skipped], probe="nccl_tests", status="error")])
    c = check("network.nccl_tests_failures")
    assert c["severity"] == "critical"
    [row] = gn.grade_failures(c, run, "h1")
    assert (row["status"], row["observed"]) == ("skip", "1 world size not run")
    assert row["reason"] == skipped["message"]
    [row] = gn.grade_failures(c, run, "h2")
    assert (row["status"], row["observed"]) == ("fail", "1 hang")
    assert row["reason"] == ("hang at 4 nodes: rank 3 stuck in all_reduce_perf (log: artifacts/h2/nccl_tests.n4.log); "
                             "also " + skipped["message"])


def test_the_scaling_tables_efficiency_is_the_checks_own_figure():
    """A perfect fabric (46 GB/s per GPU, 8 NDR rails): alltoall at 350 GB/s on one node (NVLink), then 86.25, 59.4
    and 51.75 at 2, 4 and 8 nodes, each 46 x N/(N-1) x (n-1)/n. The check grades it 100 %; the table chained each
    world to the one before it from the one-node world and did not normalise alltoall: 24.6 %, 68.9 % and 87.1 %.
    The table now shows the check's ratio, against the smallest multi-node world, and says so."""
    curves = {(1, 8, "alltoall", "out_of_place"): [(1 << 30, 350.0)]}
    for n in (2, 4, 8):
        curves[(n, 8 * n, "alltoall", "out_of_place")] = [(1 << 30, 46 * gn.alltoall_network_factor(n, 8 * n))]
    run = make_run([coll_doc("h%d" % i, curves) for i in range(8)])
    [row] = gn.grade_scaling(check("network.collectives_scaling"), run, ["h0"])
    assert (row["status"], row["observed"]) == ("pass", "worst 1.00: alltoall out-of-place at 4 nodes vs 2 (1 GiB)")
    md = section.render(run, [], None)
    assert "| efficiency (against the smallest multi-node world) |" in md
    assert "| alltoall | out-of-place | 1 | 8 | 1 GiB | 350.0 | – (one node: NVLink) |" in md
    assert "| alltoall | out-of-place | 2 | 16 | 1 GiB | 86.2 | reference |" in md
    assert "| alltoall | out-of-place | 4 | 32 | 1 GiB | 59.4 | 100.0 % of 2 nodes (86.2 GB/s at 1 GiB) |" in md
    assert "| alltoall | out-of-place | 8 | 64 | 1 GiB | 51.8 | 100.0 % of 2 nodes (86.2 GB/s at 1 GiB) |" in md
    assert "alltoall per GPU of network bandwidth, busbw / (N/(N-1) × (n-1)/n)" in md
    # one function for both: each world against the next smaller one and the smallest, per GPU of network bandwidth
    worlds = {key[:2]: points for key, points in gn.curves(gn.frame(run, "collectives", "busbw_gbps")).items()}
    assert [(n, ref, round(ratio, 6)) for n, _, ref, _, _, ratio in gn.scaling(worlds, "alltoall")] == [
        (4, 2, 1.0), (8, 2, 1.0), (8, 4, 1.0)]


@pytest.mark.parametrize("slower, status, worst, efficiency", [
    (69.96, "fail", "0.6996", "69.96"),   # under the 0.7 the check fails below: not "0.70", not "70 %"
    (84.97, "warn", "0.8497", "84.97"),   # under the 0.85 it warns below: not "0.85", not "85 %"
    (60.0, "fail", "0.60", "60"),         # far from both: the digits as before
])
def test_a_scaling_ratio_just_under_a_line_is_shown_under_it(slower, status, worst, efficiency):
    """The ratio network.*_scaling judges, in the row ("worst %.2f") and in the section's efficiency column (fmt:
    3 significant digits), against the check's fail_below 0.7 and warn_below 0.85. The busbw column is judged by
    no line: as before."""
    c = check("network.collectives_scaling")
    curves = {(2, 16, "all_gather", "out_of_place"): [(1 << 28, 100.0)],
              (4, 32, "all_gather", "out_of_place"): [(1 << 28, slower)]}
    run = make_run([coll_doc("h%d" % i, curves) for i in range(4)])
    [row] = gn.grade_scaling(c, run, ["h0"])
    assert (row["status"], row["observed"]) == (status, "worst %s: all_gather out-of-place at 4 nodes vs 2 (256 MiB)"
                                                 % worst)
    md = section.render(run, [], None)
    assert "| all_gather | out-of-place | 4 | 32 | 256 MiB | %.3g | %s %% of 2 nodes (100.0 GB/s at 256 MiB) |" % (
        slower, efficiency) in md, md


# ---------------------------------------------------------------------------------------------------------------
# A multi-node nccl-tests world that failed: the launching host keeps its output, every host of the world fails


def failed_world_docs(tmp_path, warn_host="gpu-b"):
    """3 hosts; the 2-node all_reduce world (gpu-a, gpu-b; gpu-a launches through mpirun) aborts when rank 12 hits an
    IB completion error (its NCCL WARN line names warn_host; None: no such line). Artifacts as nccl_tests.run writes
    them: the failure and the output on gpu-a, placement on every host."""
    from probes.common.worlds import placement
    hosts = ["gpu-a", "gpu-b", "gpu-c"]
    rows = "\n".join("[1,0]<stdout>:%12d  %12d     float     sum      -1    39.07    0.00    0.00       0    39.43    "
                     "0.00    0.00       0" % (s, s // 4) for s in (8, 16, 32, 64))
    ranks = "\n".join("[1,%d]<stdout>:#  Rank %2d Group  0 Pid %6d on %s device %2d [0000:18:00] %s"
                      % (r, r, 1000 + r, "gpu-a" if r < 8 else "gpu-b", r % 8, H100) for r in range(16))
    out = ("[1,0]<stdout>:# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703\n"
           "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 "
           "iters: 20 agg iters: 1 validation: 1 graph: 0\n" + ranks +
           "\n[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     "
           "time   algbw   busbw #wrong\n" + rows + "\n")
    if warn_host:
        out += ("[1,12]<stdout>:%s:1012:2301 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.1<40033> with "
                "status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.2 hca mlx5_4\n" % warn_host)
    docs = []
    for rank, host in enumerate(hosts):
        art = Artifact("nccl_tests", "r", host)
        art.device.update(backend="cuda", model=H100)
        art.facts["placement"] = [placement(hosts, [rank]), placement(hosts, [0, 1])]
        failures = []
        if rank == 0:
            fail = nccl_tests.run_one(
                art, "all_reduce", "/opt/nccl-tests/build/all_reduce_perf",
                lambda argv, t: CmdResult(argv, 1, out, "mpirun noticed that process rank 12 ... exited on signal 6",
                                          False, False), [], 60, "nccl_tests", str(tmp_path), False, 2,
                world_ranks=16)
            failures.append(dict(fail, nodes=2))
            art.error("1 nccl-tests runs failed")
        art.facts["failures"] = failures
        docs.append(art.to_dict())
    return docs


def test_a_failed_nccl_tests_world_fails_every_host_in_it_and_names_the_one_that_broke(tmp_path):
    run = make_run(failed_world_docs(tmp_path))
    c = check("network.nccl_tests_failures")
    rows = {h: gn.grade_failures(c, run, h)[0] for h in ("gpu-a", "gpu-b", "gpu-c")}
    # the probe recorded which process the output names (NCCL's "host:pid:tid [device]", mpirun's rank tag)
    [named] = run.artifacts[0]["facts"]["failures"][0]["named"]
    assert (named["host"], named["pid"], named["device"], named["rank"]) == ("gpu-b", 1012, 4, 12)
    # the host whose rank broke fails, and its row says so
    b = rows["gpu-b"]
    assert (b["status"], b["observed"]) == ("fail", "1 error")
    assert b["reason"].startswith("its rank 12 (device 4) broke the 2-node all_reduce world launched from gpu-a: "
                                  "all_reduce_perf exited 1 after 64 B: gpu-b:1012:2301 [4] NCCL WARN NET/IB")
    assert "(log: artifacts/gpu-a/nccl_tests.all_reduce.n2.txt)" in b["reason"]
    # the launching host keeps its row, naming the host that broke
    a = rows["gpu-a"]
    assert (a["status"], a["observed"]) == ("fail", "1 error")
    assert a["reason"].startswith("rank 12 on gpu-b (device 4) broke: all_reduce_perf exited 1 after 64 B")
    # a host outside that world passes
    assert rows["gpu-c"]["status"] == "pass"


def test_a_failed_world_whose_output_names_another_host_fails_the_members_naming_it(tmp_path):
    # the WARN line names gpu-a (the launcher's own rank broke): gpu-b was in the world that failed
    run = make_run(failed_world_docs(tmp_path, warn_host="gpu-a"))
    c = check("network.nccl_tests_failures")
    b = gn.grade_failures(c, run, "gpu-b")[0]
    assert b["status"] == "fail" and b["reason"].startswith(
        "the 2-node all_reduce world launched from gpu-a failed: gpu-a broke: all_reduce_perf exited 1")
    assert gn.grade_failures(c, run, "gpu-a")[0]["reason"].startswith("its own rank 12 (device 4) broke: ")
    # no host named: every member still fails, and says the output named none
    run = make_run(failed_world_docs(tmp_path, warn_host=None))
    b = gn.grade_failures(c, run, "gpu-b")[0]
    assert b["status"] == "fail" and "launched from gpu-a failed (its output names no host)" in b["reason"]
    assert gn.grade_failures(c, run, "gpu-c")[0]["status"] == "pass"


# ---------------------------------------------------------------------------------------------------------------
# perftest's ring (host i the client of host i+1, rail k to rail k): a link is two ports, a port is two links


def ring_docs(hosts, slow, fabric="ib_ndr400"):
    """perftest artifacts of a ring of hosts as one_round files them (under the client, peer = the server), 8 rails
    at 392 Gbit/s; slow: {(client, server, hca): Gbit/s} of the links that are not."""
    docs = []
    for i, host in enumerate(hosts):
        peer = hosts[(i + 1) % len(hosts)]
        art = Artifact("perftest", "r", host, params={"fabric": fabric, "rails": 8})
        for k in range(8):
            hca = "mlx5_%d" % k
            art.add("bw_avg_gbits", slow.get((host, peer, hca), 392.0), "Gbit/s", hca=hca, test="write", mem="host",
                    peer=peer, bytes=65536)
        docs.append(art.to_dict())
    return docs


def bad_rows(cid, run, hosts):
    c = check(cid)
    if c["kind"] == "net_rail_straggler":
        rows = gn.grade_rail_straggler(c, run, hosts)
    else:
        rows = [r for h in hosts for r in gn.grade_rail_bw(c, run, h)]
    return {(r["host"], r["subject"]): r for r in rows if r["status"] != "pass"}


def test_a_slow_port_fails_its_host_not_the_neighbour_that_measured_it():
    # b's mlx5_3 is slow: both links it is in (a→b, measured and filed by a; b→c) run at 200
    hosts = ["a", "b", "c", "d"]
    run = make_run(ring_docs(hosts, {("a", "b", "mlx5_3"): 200.0, ("b", "c", "mlx5_3"): 200.0}))
    line = bad_rows("network.perftest_rail_line_rate", run, hosts)
    assert list(line) == [("b", "hca=mlx5_3 write host")]
    row = line[("b", "hca=mlx5_3 write host")]
    assert row["observed"] == "b→c 200 Gbit/s; a→b 200 Gbit/s" and row["reason"].startswith(
        "every link of this port is slow, as client and as server")
    # a passes, and its row names the port its slow link is charged to
    [a3] = [r for r in gn.grade_rail_bw(check("network.perftest_rail_line_rate"), run, "a")
            if r["subject"] == "hca=mlx5_3 write host"]
    assert a3["status"] == "pass" and "a→b is slow: b's mlx5_3 is" in a3["reason"]
    outlier = bad_rows("network.perftest_rail_outlier", run, hosts)
    assert list(outlier) == [("b", "hca=mlx5_3")] and outlier[("b", "hca=mlx5_3")]["status"] == "fail"


def test_a_link_slow_alone_fails_as_that_link_on_both_ends():
    hosts = ["a", "b", "c", "d"]
    run = make_run(ring_docs(hosts, {("a", "b", "mlx5_3"): 200.0}))
    line = bad_rows("network.perftest_rail_line_rate", run, hosts)
    assert sorted(line) == [("a", "hca=mlx5_3 write host a→b"), ("b", "hca=mlx5_3 write host a→b")]
    assert "path between them" in line[("a", "hca=mlx5_3 write host a→b")]["reason"]
    assert bad_rows("network.perftest_rail_outlier", run, hosts) == {}


def test_two_nodes_name_the_pair():
    run = make_run(ring_docs(["a", "b"], {("a", "b", "mlx5_3"): 200.0, ("b", "a", "mlx5_3"): 200.0}))
    line = bad_rows("network.perftest_rail_line_rate", run, ["a", "b"])
    assert sorted(line) == [("a", "hca=mlx5_3 write host"), ("b", "hca=mlx5_3 write host")]
    assert "both links of the pair a and b are slow" in line[("a", "hca=mlx5_3 write host")]["reason"]
    assert "both links of the pair b and a are slow" in line[("b", "hca=mlx5_3 write host")]["reason"]


def test_the_line_is_judged_on_the_mean_of_both_placements():
    """Azure's one-node line is nccl-tests' "# Avg bus bandwidth" of a 16 GiB run: the mean of out-of-place and
    in-place. A node at 455 and 464 is at 459.5 by that measure, below 460: it passed on its better placement."""
    art = Artifact("nccl_tests", "r", "n1")
    art.device.update(backend="cuda", model=H100)
    for place, bw in (("out_of_place", 455.0), ("in_place", 464.0)):
        art.add("busbw_gbps", bw, "GB/s", collective="all_reduce", size_bytes=1 << 34, placement=place, nodes=1,
                ranks=8, dtype="float")
    art.facts["gpus"] = 8
    run = make_run([art.to_dict(), info_doc("n1", gpus=8)])
    [row] = gn.grade_peak_busbw(check("network.nccl_tests_allreduce_1node"), run, "n1")
    assert (row["status"], row["observed"]) == (
        "fail", "459.5 GB/s (16 GiB, 1 node, 8 ranks; mean of in-place 464, out-of-place 455)"), row


def test_values_just_under_a_line_are_shown_under_it():
    # nccl-tests and perftest print 2 decimals: 459.96 beside a line of 460 is not "460" (a sweep to the line's
    # 16 GiB: one that stopped short of it is a skip, test_a_levelled_off_peak_just_below_a_line...)
    art = Artifact("nccl_tests", "r", "n1")
    art.device.update(backend="cuda", model=H100)
    for size, bw in [(1 << 32, 455.10), (1 << 33, 458.20), (1 << 34, 459.96)]:
        for place in ("out_of_place", "in_place"):
            art.add("busbw_gbps", bw, "GB/s", collective="all_reduce", size_bytes=size, placement=place, nodes=1,
                    ranks=8, dtype="float")
    art.facts["gpus"] = 8
    run = make_run([art.to_dict(), info_doc("n1", gpus=8)])
    [row] = gn.grade_peak_busbw(check("network.nccl_tests_allreduce_1node"), run, "n1")
    assert (row["status"], row["observed"]) == ("fail", "459.96 GB/s (16 GiB, 1 node, 8 ranks)")
    assert row["expected"].startswith(">= 460 ")

    p = Artifact("perftest", "r", "n1", params={"fabric": "ib_ndr400", "rails": 8})
    p.add("bw_avg_gbits", 379.96, "Gbit/s", hca="mlx5_0", test="write", mem="host", peer="n2", bytes=65536)
    [row] = gn.grade_rail_bw(check("network.perftest_rail_line_rate"), make_run([p.to_dict()]), "n1")
    assert (row["status"], row["observed"]) == ("fail", "n1→n2 379.96 Gbit/s")

    art = Artifact("nccl_tests", "r", "n1")
    art.device.update(backend="cuda", model=H100)
    for size, bw in [(1 << 30, 181.0), (1 << 31, 182.2), (1 << 32, 182.49)]:
        art.add("busbw_gbps", bw, "GB/s", collective="all_gather", size_bytes=size, placement="out_of_place",
                nodes=1, ranks=8, dtype="float")
    art.facts["gpus"] = 8
    run = make_run([art.to_dict(), info_doc("n1", gpus=8)])
    [row] = gn.grade_plateau(check("network.nccl_tests_plateau"), run, "n1")
    assert (row["status"], row["observed"]) == ("fail", "peak 182.49 GB/s at 4 GiB (8 ranks)")
    assert row["expected"].startswith(">= 182.5 ")


def test_the_node_outlier_is_judged_on_the_run_with_nvlink_on():
    """Hosts a, b, c peak at 480 GB/s with NVLink on and 365 with it off (the nvlink_off variant: P2P, SHM and NVLS
    off); d's NVLink-on run failed and left no curve, its NVLink-off run 40. The outlier check pooled the variants
    and failed d at "40 (91.7% below the cluster median)", blaming NVLink on a number measured without it."""
    on = [(1 << 30, 470.0), (1 << 34, 480.0)]
    off = [(1 << 30, 360.0), (1 << 34, 365.0)]
    docs = []
    for host in ("a", "b", "c"):
        docs.append(coll_doc(host, {(1, 8, "all_reduce", "out_of_place"): on}, probe="nccl_tests"))
        docs.append(coll_doc(host, {(1, 8, "all_reduce", "out_of_place"): off}, probe="nccl_tests",
                             variant="nvlink_off"))
    docs.append(coll_doc("d", {}, probe="nccl_tests", status="error"))
    docs.append(coll_doc("d", {(1, 8, "all_reduce", "out_of_place"): [(1 << 30, 39.0), (1 << 34, 40.0)]},
                         probe="nccl_tests", variant="nvlink_off"))
    run = make_run(docs)
    c = check("network.nccl_tests_node_outlier")
    rows = {r["host"]: r for r in grade.grade(run, {"checks": [c]}) if r["check_id"] == c["id"]}
    assert {h: rows[h]["status"] for h in ("a", "b", "c")} == dict.fromkeys("abc", "pass")
    # no NVLink-on number: nothing to compare (its failed run is the nccl-tests run check's error)
    assert (rows["d"]["status"], rows["d"]["reason"]) == ("skip", "no busbw_gbps result"), rows["d"]
