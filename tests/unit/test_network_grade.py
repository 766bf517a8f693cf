"""Network grading (reports/phases/network/grade.py, rubric.d/network.yml) and the report section, on artifacts shaped
as the network probes write them."""

import json

from probes.artifact import Artifact
from probes.network.busbw import busbw_factor
from reports import grading as grade
from reports.load import run_of_artifacts as make_run
from reports.phases.network import grade as gn
from reports.phases.network import section

H100 = "NVIDIA H100 80GB HBM3"
SIZES = [1 << k for k in range(4, 35, 2)]  # 16 B .. 16 GiB, factor 4


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


def info_doc(host, model=H100):
    art = Artifact("node_info", "r", host)
    art.facts["gpu_model"] = model
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
            coll_doc("cpu", {(1, 1, "all_reduce", "in_place"): []}, backend="cpu")]
    run = make_run(docs + [info_doc(h) for h in ("good", "slow", "four", "cpu")])
    good = gn.grade_peak_busbw(c, run, "good")[0]
    assert good["status"] == "pass" and good["observed"].startswith("479.9 GB/s (16 GiB, 1 node, 8 ranks)")
    assert "0.9 × allreduce_busbw_8gpu_gbps_min 460" in good["expected"]
    assert gn.grade_peak_busbw(c, run, "slow")[0]["status"] == "fail"
    assert "this node ran 4 ranks" in gn.grade_peak_busbw(c, run, "four")[0]["reason"]
    assert gn.grade_peak_busbw(c, run, "cpu")[0]["reason"] == "backend=cpu: expectation is for cuda/rocm"


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
    assert rows[0]["observed"] == "worst 0.54: all_reduce in-place at 8 nodes vs 2 (16 GiB)"
    cpu = make_run([coll_doc("h%d" % i, curves, backend="cpu") for i in range(3)])
    assert {r["status"] for r in gn.grade_scaling(c, cpu, cpu.hosts)} == {"warn"}
    good = make_run([coll_doc("h0", {k: logistic(365) for k in curves})])
    assert gn.grade_scaling(c, good, good.hosts)[0]["status"] == "pass"
    one = make_run([coll_doc("h0", {(2, 16, "all_reduce", "in_place"): logistic(370)})])
    assert "fewer than two multi-node world sizes measured (2)" in gn.grade_scaling(c, one, one.hosts)[0]["reason"]


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
    # n3 sends at 2 Gbit/s: its pairs' median is (2 + 9) / 2 = 5.5 against the median pair 9.0 (-39 %)
    assert rows["n3"]["status"] == "warn" and "39% below the median pair 9" in rows["n3"]["observed"]
    assert rows["n1"]["status"] == "pass" and rows["n4"]["status"] == "pass"
    assert rows["n2"]["status"] == "warn" and "rtt" in rows["n2"]["observed"]


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
