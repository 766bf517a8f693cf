"""Grading of the network phase (probes collectives, nccl_tests, perftest, tcp_pairs): pure functions of a run.

Check kinds (rubric.d/network.yml), registered by reports.grading.kinds.register_phase_kinds:
  net_failures    per host: hangs, crashes, failed rendezvous and failed runs the probe recorded (facts.failures),
                  as failures with their message and log file
  net_peak_busbw  per host: the peak busbw of a collective at 1 node or at the largest multi-node world, against the
                  GPU model (gpus.yml, for the node's GPU count) or the declared fabric × rails (gpus.yml fabrics)
  net_curve_shape per host: a healthy busbw curve rises with message size; drops between consecutive sizes beyond a
                  tolerance and beyond the measured noise are flagged (only above a minimum size; on the CPU backend
                  at most a warning)
  net_plateau     per host and curve (every collective at every world size it measured): the curve saturates, and
                  its plateau is not far below what the GPU model's NVLink (one node) or the fabric carries
  net_latency     per host and curve: the time of the smallest message against NCCL's own latency model
  net_scaling     cluster: busbw at each multi-node world size against the next smaller one (n to 2n) and against
                  the smallest multi-node world size
  net_pairs       cluster: per host, TCP bandwidth and RTT of its pairs against the other hosts' median pair
  net_rail_bw     per host and rail: perftest bandwidth against the fabric's line rate
  net_rail_straggler
                  cluster, per rail: kind straggler over the rails only; both rail kinds judge the NICs the host's
                  audit calls compute, and show an RDMA device it calls storage, frontend or other as a skip
  net_nccl_build  per host: nccl-tests' own header lines: the ranks of each multi-node world printed on as many hosts
                  as the world has nodes (else its numbers never crossed the network), and the NCCL library it ran
                  with not older than the NCCL headers it was built with
"""

import json
import os
import statistics

import pandas as pd

from probes.network.plan import human_bytes
from reports import DATA_DIR, yamlio
from reports.grading.expectations import missing
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row, no_result_row, status_above, status_below, worst_status
from reports.grading.select import find_artifact, gpu_model, labels_match, selection
from reports.phases.audit.network import host_nics
from reports.shown import shown

LABELS = ("collective", "size_bytes", "placement", "nodes", "ranks")
# Point-to-point patterns: a rank's traffic to the other nodes leaves on its own NIC, so these see one GPU's share of
# the NICs, not the node's ("Alltoall cannot aggregate the bandwidth of multiple NICs, so the performance you should
# see is the performance of a single NIC", the NCCL maintainer in NVIDIA/nccl-tests#267; sendrecv passes each rank's
# buffer to the next rank, one NIC per crossing pair).
ONE_NIC_PER_GPU = ("alltoall", "sendrecv")
# gather and scatter meet at one root rank. Across nodes with NVLink on, no source says what share of the node's
# NICs reaches that root, so their plateau is shown but not judged (with NVLink off, scale_out_only, every byte
# crosses the root's own NIC: one GPU's share, as for every collective there).
ROOTED = ("gather", "scatter")

# alltoall's busbw falls with the node count on a fabric that holds its rate: each rank's (N-1)/N share to other
# nodes crosses the network, so algbw = B x N/(N-1) and busbw = B x N/(N-1) x (n-1)/n for a per-GPU network
# bandwidth B, N nodes and n ranks (at 2 nodes half the traffic stays on NVLink; "On 2 nodes ... BusBW = 2x network
# bandwidth per GPU", NVIDIA/nccl-tests#130). Plateau and scaling both use this factor.
ALLTOALL = ("alltoall",)


def alltoall_network_factor(nodes, ranks):
    """busbw / per-GPU network bandwidth of an alltoall on `nodes` nodes and `ranks` ranks (see ALLTOALL)."""
    return nodes / (nodes - 1) * (ranks - 1) / ranks


def load_fabrics(path=None):
    with open(path or os.path.join(DATA_DIR, "gpus.yml"), encoding="utf-8") as fh:
        return yamlio.safe_load(fh).get("fabrics") or {}


# ---------------------------------------------------------------------------------------------------------------
# tables


def frame(run, probe, metric, variant=None):
    """Results of one probe/variant/metric with the collective labels as columns (cached per run)."""
    cache = run.__dict__.setdefault("_net_frames", {})
    key = (id(run.results), len(run.results), probe, variant, metric)
    if key not in cache:
        res = run.results
        sel = res[(res.probe == probe) & (res.metric == metric)]
        sel = sel[sel.variant.isna()] if variant is None else sel[sel.variant == variant]
        rows = []
        for host, value, backend, labels in zip(sel.host, sel.value, sel.backend, sel.labels):
            lab = json.loads(labels)
            rows.append(dict({k: lab.get(k) for k in LABELS}, host=host, value=float(value), backend=backend,
                             labels=lab))
        cache[key] = pd.DataFrame(rows, columns=["host", "value", "backend", "labels", *LABELS])
    return cache[key]


def curves(df, slowest=min):
    """{(nodes, ranks, collective, placement): [(size, value), ...] by size} from a frame's rows. Several hosts
    measure the same multi-node curve: the slowest host's value per point is kept (it sets the pace): the lowest
    bandwidth, or with slowest=max the longest time."""
    points = {}
    for nodes, ranks, coll, place, size, value in zip(df.nodes, df.ranks, df.collective, df.placement, df.size_bytes,
                                                      df.value):
        key = (int(nodes), int(ranks), coll, place)
        slot = points.setdefault(key, {})
        slot[int(size)] = slowest(value, slot.get(int(size), value))
    return {k: sorted(v.items()) for k, v in points.items()}


def placement_scope(step):
    """Where one world size ran, from the probe's placement record ({nodes, hosts, racks, nvlink_domains}): inside
    one NVLink domain or rack, or across them. The inventory names racks and domains (assess_rack,
    assess_nvlink_domain); without them the scope is not known, and says so."""
    if int(step.get("nodes") or 0) <= 1:
        return "one node"
    parts = []
    for key, what in (("nvlink_domains", "NVLink domain"), ("racks", "rack")):
        values = step.get(key)
        if not values:
            continue
        named = sorted({v for v in values if v})
        if len(named) < len(set(values)) or not named:
            parts.append("%s not known for every host" % what)
        elif len(named) == 1:
            parts.append("within %s %s" % (what, named[0]))
        else:
            parts.append("across %ss %s" % (what, ", ".join(named)))
    return "; ".join(parts) or "not declared (assess_rack, assess_nvlink_domain)"


# nccl-tests and the collectives probe round a chunked collective's message down to whole elements per rank
# (chunk x ranks x element bytes: probes/network/worker.py plan_steps, nccl-tests' byte counts alike), so one size
# asked for is measured at a different size in each world: 1 GiB is 1,073,741,824 bytes at 16 and 32 ranks and
# 1,073,741,760 at 48. Two worlds' sizes less than one element per rank of the larger world apart (8 bytes, the
# widest type) are the same size asked for; matched exactly, every chunked collective of a world size that is not a
# power of two dropped out of scaling.
WIDEST_ELEMENT = 8


def common_size(points, ref_points, ranks):
    """(size, value, ref value) at the largest message size both curves [(size, value), ...] measured, sizes matched
    within the rounding of `ranks` ranks (WIDEST_ELEMENT per rank); None when they share none. The size named is the
    larger of the two, the nearer to the size asked for (the rounding is down)."""
    if not ref_points:
        return None
    tolerance = WIDEST_ELEMENT * ranks
    best = None
    for size, value in points:
        ref_size, ref_value = min(ref_points, key=lambda p: abs(p[0] - size))
        if abs(ref_size - size) < tolerance and (best is None or max(size, ref_size) > best[0]):
            best = (max(size, ref_size), value, ref_value)
    return best


def tree_left_out(coll, backends, variant):
    """Whether a collective's 2-node world is no reference for its scaling (TREE_AT_TWO_NODES): under NCCL or RCCL
    (gloo on the CPU has no tree), unless the run forced the ring (variant ring)."""
    return coll in TREE_AT_TWO_NODES and bool(set(backends) & {"cuda", "rocm"}) and variant != "ring"


def scaled_worlds(points_by_world, leave_out_two=False):
    """The (nodes, ranks) worlds scaling compares, by size: the multi-node ones (one node runs over NVLink, not the
    network), without the 2-node world where it is left out (tree_left_out)."""
    return sorted(w for w in points_by_world if w[0] > 1 and not (leave_out_two and w[0] == 2))


def scaling(points_by_world, coll, leave_out_two=False):
    """How one collective and placement scales, from its curves {(nodes, ranks): [(size, busbw), ...]}:
    [(nodes, ranks, ref nodes, size, busbw, ratio)], each multi-node world (scaled_worlds) against the next smaller
    one (n to 2n) and against the smallest, each pair at the largest size both measured (common_size). busbw is per
    rank, so a well-scaling fabric keeps it level: ratio 1. alltoall's ratio is per GPU of network bandwidth (busbw /
    alltoall_network_factor: the share of its traffic that stays in the node falls as nodes are added). The grade
    (grade_scaling) and the report's scaling table (section.py) both read these ratios."""
    worlds = scaled_worlds(points_by_world, leave_out_two)

    def per_gpu(world, value):
        return value / alltoall_network_factor(*world) if coll in ALLTOALL else value

    out, prev = [], None
    for world in worlds:
        # against the next smaller world (n to 2n) and against the smallest: a steady loss per doubling adds up even
        # when no single step looks bad
        for ref in sorted({prev, worlds[0]} - {None, world}):
            found = common_size(points_by_world[world], points_by_world[ref], max(world[1], ref[1]))
            if found is None:
                continue
            size, value, ref_value = found
            if per_gpu(ref, ref_value) > 0:
                out.append((world[0], world[1], ref[0], size, value, per_gpu(world, value) / per_gpu(ref, ref_value)))
        prev = world
    return out


def find_drops(points, min_size, drop_pct, noise=None):
    """Drops between consecutive sizes (both at least min_size) of more than drop_pct percent, and more than the
    noise measured at either size (noise: size -> percent): [(size before, size after, percent)]."""
    noise = noise or {}
    drops = []
    for (s0, v0), (s1, v1) in zip(points, points[1:]):
        if s0 < min_size or v0 <= 0:
            continue
        pct = 100.0 * (v0 - v1) / v0
        if pct > max(drop_pct, noise.get(s0, 0.0), noise.get(s1, 0.0)):
            drops.append((s0, s1, pct))
    return drops


def placement_noise(df):
    """{(nodes, ranks, collective): {size: percent}}: how far the out-of-place and in-place results of one size
    differ. nccl-tests measures every size both ways; the two move the same bytes over the same links, so their
    spread is the run's own noise at that size (a drop within it is not a feature of the curve)."""
    values = {}
    for nodes, ranks, coll, size, value in zip(df.nodes, df.ranks, df.collective, df.size_bytes, df.value):
        values.setdefault((int(nodes), int(ranks), coll), {}).setdefault(int(size), []).append(value)
    return {key: {size: 100.0 * (max(v) - min(v)) / max(v) for size, v in sizes.items() if len(v) > 1 and max(v) > 0}
            for key, sizes in values.items()}


def _curve_name(key):
    nodes, ranks, coll, place = key
    return "%s %s at %d node%s (%d ranks)" % (coll, place.replace("_", "-"), nodes, "s" if nodes > 1 else "", ranks)


# ---------------------------------------------------------------------------------------------------------------
# per host


def _failure_text(failures, host):
    return "; ".join("%s%s%s" % (_named_text(f, host), f.get("message", "?"),
                                 " (log: artifacts/%s/%s)" % (host, f["log"]) if f.get("log") else "")
                     for f in failures)


def _proc_text(proc, with_host=True):
    """"rank 12 on gpu-b (device 4)" for one process a failed output names (the probe's `named`)."""
    where = "rank %s" % proc["rank"] if proc.get("rank") is not None else "a rank"
    return "%s%s%s" % (where, " on %s" % proc["host"] if with_host else "",
                       " (device %s)" % proc["device"] if proc.get("device") is not None else "")


def _named_text(failure, host):
    """What the output of a failed world names as broken (the probe's `named`: NCCL WARN and Test failure lines),
    said from `host`'s side."""
    named = [p for p in failure.get("named") or [] if p.get("host")]
    mine = [_proc_text(p, False) for p in named if p["host"] == host]
    others = [_proc_text(p) for p in named if p["host"] != host]
    parts = (["its own %s broke" % ", ".join(mine)] if mine else []) + (
        ["%s broke" % ", ".join(others)] if others else [])
    return "%s: " % "; ".join(parts) if parts else ""


def world_members(run, doc, nodes):
    """The hosts of the world of `nodes` nodes whose run `doc` (the launching host's artifact) recorded: its
    placement fact ({nodes, hosts, ...} per world size). Without one: the launching host, the hosts its output names,
    and every host of the probe when the world had that many nodes."""
    for step in (doc.get("facts") or {}).get("placement") or []:
        if isinstance(step, dict) and int(step.get("nodes") or 0) == int(nodes) and step.get("hosts"):
            return list(step["hosts"])
    hosts = {doc["host"]}
    for failure in (doc.get("facts") or {}).get("failures") or []:
        if isinstance(failure, dict) and failure.get("nodes") == nodes:
            hosts |= {p["host"] for p in failure.get("named") or [] if p.get("host")}
    everyone = sorted({d["host"] for d in run.artifacts if d["probe"] == doc["probe"]
                       and d.get("variant") == doc.get("variant")} | set(run.unreachable or ()))
    if len(everyone) == int(nodes):
        hosts |= set(everyone)
    return sorted(hosts)


def _real(failures):
    if isinstance(failures, str):
        failures = [{"kind": "error", "message": failures}]
    return [f for f in failures if isinstance(f, dict) and f.get("kind", "error") != "skipped"]


# Probes whose multi-node world is started from its first host, which alone records the world's output and failures
# (nccl_tests.run). The collectives probe records a failed world on every node that took part (probes/common/
# worlds.py): its rows need no one else's artifact.
LAUNCHER_RECORDS = ("nccl_tests",)


def world_failures(check, run, host):
    """Failures of multi-node worlds this host was in that another host's artifact recorded (nccl-tests: the world's
    first host launches it and keeps its output): [(launching host, failure)]. A world whose failure this host
    recorded itself (the collectives probe records it on every node) is not counted twice."""
    if check["probe"] not in LAUNCHER_RECORDS:
        return []
    own = find_artifact(run, host, check["probe"], check.get("variant")) or {}
    own_worlds = {f.get("nodes") for f in _real((own.get("facts") or {}).get("failures") or [])}
    out = []
    for doc in run.artifacts:
        if doc["host"] == host or doc["probe"] != check["probe"] or doc.get("variant") != check.get("variant"):
            continue
        for f in _real((doc.get("facts") or {}).get("failures") or []):
            nodes = f.get("nodes")
            if not isinstance(nodes, int) or nodes < 2 or nodes in own_worlds:
                continue
            if host in world_members(run, doc, nodes):
                out.append((doc["host"], f))
    return out


def _world_failure_text(launcher, failure, host):
    named = [p for p in failure.get("named") or [] if p.get("host")]
    mine = [p for p in named if p["host"] == host]
    others = sorted({p["host"] for p in named if p["host"] != host})
    world = "the %s-node %sworld launched from %s" % (failure.get("nodes"), "%s " % failure["collective"]
                                                     if failure.get("collective") else "", launcher)
    log = " (log: artifacts/%s/%s)" % (launcher, failure["log"]) if failure.get("log") else ""
    if mine:
        head = "its %s broke %s" % (", ".join(_proc_text(p, False) for p in mine), world)
    elif others:
        head = "%s failed: %s broke" % (world, ", ".join(others))
    else:
        head = "%s failed (its output names no host)" % world
    return "%s: %s%s" % (head, failure.get("message", "?"), log)


def grade_failures(check, run, host):
    """Hangs, crashes and failed runs the probe recorded on this host, and those of the multi-node worlds it was in
    that another host recorded (nccl-tests keeps a world's output on the host that launched it; world_failures): each
    one is a failure with its log, naming the hosts whose ranks the output says broke. A world size the probe did
    not run (kind "skipped": nccl-tests under a launcher that cannot start MPI, a node lost at the previous step)
    measured nothing and broke nothing: a skip row with its reason, unless real failures fail it."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    failures = (doc.get("facts") or {}).get("failures") or []
    if isinstance(failures, str):
        failures = [{"kind": "error", "message": failures}]
    real = [f for f in failures if f.get("kind", "error") != "skipped"]
    skipped = [f for f in failures if f.get("kind", "error") == "skipped"]
    foreign = world_failures(check, run, host)
    expected = "no hang, crash or error"
    if real or foreign:
        kinds = {}
        for f in real + [f for _, f in foreign]:
            kinds[f.get("kind", "error")] = kinds.get(f.get("kind", "error"), 0) + 1
        observed = ", ".join("%d %s" % (n, k) for k, n in sorted(kinds.items()))
        reason = "; ".join(filter(None, [_failure_text(real, host)] +
                                  [_world_failure_text(launcher, f, host) for launcher, f in foreign]))
        reason += "; also %s" % _failure_text(skipped, host) if skipped else ""
        return [make_row(check, host, "fail", observed, expected, reason)]
    if doc["status"] == "error":
        return [make_row(check, host, "error", "probe error", expected, doc.get("reason"))]
    if skipped:
        return [make_row(check, host, "skip", "%d world size%s not run" % (len(skipped), "s" if len(skipped) > 1
                                                                            else ""), expected,
                         _failure_text(skipped, host))]
    run_sizes = (doc.get("facts") or {}).get("world_sizes_run")
    observed = "none" + (" (world sizes %s)" % run_sizes if run_sizes else "")
    return [make_row(check, host, "pass", observed, expected)]


def _select_nodes(df, nodes):
    if df.empty:
        return df
    if nodes in (1, "1", "single"):
        return df[df.nodes == 1]
    multi = df[df.nodes > 1]
    if multi.empty:
        return multi
    return multi[multi.nodes == multi.nodes.max()]


def gpus_per_node(run, host, doc):
    """GPUs of this node from the facts: node_info's gpu_count, else the probe's own count (nccl_tests: `gpus`; the
    collectives on a GPU backend: `procs_per_node`, one process per GPU). None when neither says."""
    sel = selection(run, {"probe": "node_info", "metric": "gpu_count"}, host)
    if len(sel) and sel.values[0] > 0:
        return int(sel.values[0])
    facts = (doc or {}).get("facts") or {}
    gpu_backend = ((doc or {}).get("device") or {}).get("backend") in ("cuda", "rocm")
    for key in ("gpus", "procs_per_node" if gpu_backend else None):
        if key and facts.get(key):
            return int(facts[key])
    return None


def model_value(run, host, field, doc=None):
    """(value, None) of a field of the host's GPU model in gpus.yml, or (None, why not). The model is node_info's,
    else doc's device.model (AMD nodes: node_info has none)."""
    _, spec, _ = gpu_model(run, host, doc)
    if spec is None:
        return None, "no expectation for this GPU model in gpus.yml"
    if field not in spec:
        return None, missing(spec, field)
    return float(spec[field]), None


def one_node_field(template, run, host, doc, ranks):
    """(gpus.yml field, None) for a one-node expectation named per GPU count (`{gpus}` in the template), for the
    node's GPU count from the facts, or (None, why not). A run on fewer GPUs than the node has is not judged against
    a whole node's expectation."""
    gpus = gpus_per_node(run, host, doc) or ranks
    if ranks != gpus:
        return None, "this node has %d GPUs and its one-node run used %s ranks: the expectation is for all of them" % (
            gpus, ranks)
    return template.format(gpus=gpus), None


def fabric_busbw(doc, gpus=None):
    """(GB/s, text) the declared scale-out fabric carries per rank, or (None, why not): rails × busbw per NIC (the
    ring collectives: each channel crosses to the next node on its own NIC), or with gpus one GPU's share,
    rails / gpus × busbw per NIC (point-to-point patterns, and every collective with NVLink off: each rank's traffic
    leaves on its own NIC). busbw per NIC is 0.92 of the NIC's line rate (gpus.yml fabrics); the fabric and rails
    are the inventory's, recorded in the artifact's params."""
    params = (doc or {}).get("params") or {}
    fabric, rails = params.get("fabric") or "", int(params.get("rails") or 0)
    fabrics = load_fabrics()
    if not fabric or rails <= 0:
        return None, "no fabric declared: set network_fabric and network_rails in the inventory"
    if fabric not in fabrics or not fabrics[fabric].get("busbw_per_nic_gbps"):
        return None, "fabric %r is not in gpus.yml fabrics (%s)" % (fabric, ", ".join(sorted(fabrics)))
    per_nic = float(fabrics[fabric]["busbw_per_nic_gbps"])
    if gpus:
        return per_nic * rails / gpus, "%d rails / %d GPUs × %g GB/s per %s NIC" % (rails, gpus, per_nic, fabric)
    return per_nic * rails, "%d rails × %g GB/s per %s NIC" % (rails, per_nic, fabric)


def _expected_busbw(check, run, host, doc, ranks, nodes):
    """(threshold, text) or (None, reason) for a peak busbw check."""
    fraction = float(check["expect"].get("fraction", 1.0))
    if nodes == 1:
        field, why = one_node_field(check["expect"]["of"], run, host, doc, ranks)
        base, why = model_value(run, host, field, doc) if field else (None, why)
        if base is None:
            return None, why if not field else "%s (%d GPUs in one node)" % (why, ranks)
        return fraction * base, ">= %.4g (%g × %s %g)" % (fraction * base, fraction, field, base)
    value, how = fabric_busbw(doc)
    if value is not None:
        return fraction * value, ">= %.4g (%g × %s)" % (fraction * value, fraction, how)
    if check.get("model_field"):
        base, _ = model_value(run, host, check["model_field"], doc)
        if base is not None:
            return fraction * base, ">= %.4g (%g × %s %g)" % (fraction * base, fraction, check["model_field"], base)
    return None, how


def grade_peak_busbw(check, run, host):
    """Peak busbw of one collective on this host at 1 node or at the largest multi-node world size."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    df = frame(run, check["probe"], "busbw_gbps", check.get("variant"))
    df = df[(df.host == host) & (df.collective == check.get("collective", "all_reduce"))]
    if check.get("placement"):
        df = df[df.placement == check["placement"]]
    df = _select_nodes(df, check.get("nodes", 1))
    if df.empty:
        return [no_result_row(check, host, doc, "no %s busbw at %s nodes in this run" % (
            check.get("collective", "all_reduce"), check.get("nodes", 1)))]
    # a size's busbw is the mean of the placements it ran in: nccl-tests' own average ("# Avg bus bandwidth", what
    # Azure's 16 GiB line is) takes out-of-place and in-place alike, and the better one alone passed a node at
    # 455 and 464 against 460
    placed = {(int(n), int(r), int(b)): {} for n, r, b in zip(df.nodes, df.ranks, df.size_bytes)}
    for n, r, b, place, value in zip(df.nodes, df.ranks, df.size_bytes, df.placement, df.value):
        placed[(int(n), int(r), int(b))][place] = value
    df = df.groupby(["nodes", "ranks", "size_bytes"], as_index=False).agg(value=("value", "mean"))
    best = df.loc[df.value.idxmax()]
    nodes, ranks = int(best.nodes), int(best.ranks)
    threshold, text = _expected_busbw(check, run, host, doc, ranks, nodes)
    lines = ()
    if threshold is not None:
        lines = (threshold,) + ((threshold / float(check["expect"].get("fraction", 1.0)) *
                                 float(check["warn"]["fraction"]),) if check.get("warn") else ())
    # the peak with as many digits as keep it on its side of the lines (459.96 beside 460 is not "460")
    both = placed[(nodes, ranks, int(best.size_bytes))]
    observed = "%s GB/s (%s, %d node%s, %d ranks%s)" % (
        shown(best.value, lines, significant=4), human_bytes(best.size_bytes), nodes, "s" if nodes > 1 else "",
        ranks, "; mean of %s" % ", ".join("%s %s" % (str(p).replace("_", "-"), shown(v, lines, significant=4))
                                          for p, v in sorted(both.items(), key=lambda kv: str(kv[0])))
        if len(set(both.values())) > 1 else "")
    if threshold is None:
        return [make_row(check, host, "skip", observed, reason=text)]
    status = "pass" if best.value >= threshold else "fail"
    if status == "pass" and check.get("warn"):
        warn_at = threshold / float(check["expect"].get("fraction", 1.0)) * float(check["warn"]["fraction"])
        if best.value < warn_at:
            status, text = "warn", "%s (warn below %.4g)" % (text, warn_at)
    curve = df[(df.nodes == best.nodes) & (df.ranks == best.ranks)]
    rising = still_rising(sorted(zip(curve.size_bytes, curve.value)), float(check.get("saturated_rise_pct", 10)))
    if status != "pass" and rising:
        # the pass lines are peaks of whole curves (Azure's at 16 GiB): a sweep cut short (the quick profile)
        # has not reached its peak, so below the line it says so instead of failing the node
        return [make_row(check, host, "skip", observed, text, reason=rising)]
    short = short_of_the_line(check, curve, best.value, threshold)
    if status != "pass" and short:
        return [make_row(check, host, "skip", observed, text, reason=short)]
    return [make_row(check, host, status, observed, text)]


def short_of_the_line(check, curve, value, threshold):
    """Why a peak a little below a line drawn at a larger message size (line_bytes: Azure's at 16 GiB) is not a
    fail: the sweep stopped below that size, and a healthy curve there is still up to a few percent short of its
    plateau, though levelled off (a real MI300X all_reduce: 313.7 GB/s at 1 GiB, 315.7 at 8 GiB, against 314). A
    peak further below than short_margin of the line is a fail all the same: no curve gains that much. None when
    the sweep reached line_bytes, or the peak is further below."""
    line_bytes = int(check.get("line_bytes") or 0)
    largest = int(curve.size_bytes.max())
    if not line_bytes or largest >= line_bytes or value < threshold * (1 - float(check.get("short_margin", 0.1))):
        return None
    return ("below the line by %.1f%%, but the line is a peak at %s and this sweep stopped at %s, where a healthy "
            "curve is still up to a few percent short of it: run larger sizes (max_bytes %d) to judge" % (
                100.0 * (threshold - value) / threshold, human_bytes(line_bytes), human_bytes(largest), line_bytes))


def still_rising(points, rise_pct):
    """Why a busbw curve [(size, value), ...] by size has not reached its plateau: busbw still rose more than
    rise_pct from the second largest size to the largest; None when it levelled off (or has one point)."""
    if len(points) < 2:
        return None
    (s0, v0), (s1, v1) = points[-2], points[-1]
    rise = 100.0 * (v1 - v0) / v0 if v0 > 0 else 0.0
    if rise <= rise_pct:
        return None
    return ("not saturated: busbw still rose %.0f%% from %s to %s, the largest size; run larger sizes (max_bytes)"
            % (rise, human_bytes(int(s0)), human_bytes(int(s1))))


def _shape_settings(check, backend):
    cpu = backend not in ("cuda", "rocm")
    spec = dict(check.get("gpu") or {}) if not cpu else dict(check.get("cpu") or {})
    return (int(spec.get("min_size_bytes", 1 << 20)), spec.get("fail_drop_pct"), float(spec.get("warn_drop_pct", 20)),
            cpu)


def grade_curve_shape(check, run, host):
    """Drops of busbw between consecutive message sizes in the curves this host measured."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    df = frame(run, check["probe"], check.get("metric", "busbw_gbps"), check.get("variant"))
    df = df[df.host == host]
    if df.empty:
        return [no_result_row(check, host, doc, "no busbw curve measured on this host")]
    min_size, fail_pct, warn_pct, cpu = _shape_settings(check, doc["device"]["backend"])
    noise = placement_noise(df)
    found = []
    for key, points in sorted(curves(df).items()):
        for s0, s1, pct in find_drops(points, min_size, warn_pct, noise.get(key[:3])):
            status = "fail" if fail_pct is not None and pct > float(fail_pct) and not cpu else "warn"
            found.append((pct, "%s: %s -> %s -%.0f%%" % (_curve_name(key), human_bytes(s0), human_bytes(s1), pct),
                          status))
    worst = worst_status(status for _, _, status in found)
    expected = "busbw does not drop by more than %g%% from one size to the next (sizes >= %s)%s" % (
        float(fail_pct) if fail_pct is not None and not cpu else warn_pct, human_bytes(min_size),
        "; cpu backend: warn only" if cpu else "" if fail_pct is not None else
        "; warn only, and only beyond the out-of-place/in-place spread")
    if not found:
        return [make_row(check, host, "pass", "no drop in %d curves" % len(curves(df)), expected)]
    found.sort(reverse=True)
    observed = "%d drop%s; largest: %s" % (len(found), "s" if len(found) > 1 else "", found[0][1])
    reason = "; ".join(text for _, text, _ in found[:8]) + (" …" if len(found) > 8 else "")
    return [make_row(check, host, worst, observed, expected, reason)]


def plateau_reference(check, run, host, doc, coll, nodes, ranks):
    """(GB/s, text) a curve's plateau is judged against, or (None, why not). One node: the busbw NCCL's ring
    reaches over the GPU model's NVLink for the node's GPU count (gpus.yml, the check's `one_node_of`). Several
    nodes: the declared fabric, rails × busbw per NIC, or one GPU's share of it for the point-to-point patterns
    (alltoall's times alltoall_network_factor: the traffic that stays in the node counts in its busbw too); gather
    and scatter are not judged (ROOTED). With `scale_out_only` (the NVLink-off runs: P2P, SHM and NVLS off) one GPU's
    share at every world size, one node too: every hop, inside the node as well, then leaves through the sending
    GPU's NIC."""
    if nodes == 1 and not check.get("scale_out_only"):
        field, why = one_node_field(check["one_node_of"], run, host, doc, ranks)
        value, why = model_value(run, host, field, doc) if field else (None, why)
        if value is None:
            return None, why if not field else "%s (%d GPUs in one node)" % (why, ranks)
        return value, "%s %g" % (field, value)
    share = gpus_per_node(run, host, doc) or max(1, ranks // max(1, nodes))
    if check.get("scale_out_only"):
        return fabric_busbw(doc, share)
    if coll in ROOTED:
        return None, ("not judged: %s across nodes meets at one root GPU, and no published reference says how much "
                      "of the node's NICs reaches it; the peak is shown as measured" % coll)
    if coll in ONE_NIC_PER_GPU:
        value, how = fabric_busbw(doc, share)
        if value is not None and coll in ALLTOALL:
            factor = alltoall_network_factor(nodes, ranks)
            return value * factor, ("%s × %.4g (alltoall at %d nodes, %d ranks: N/(N-1) × (n-1)/n, "
                                    "NVIDIA/nccl-tests#130)" % (how, factor, nodes, ranks))
        return value, how
    return fabric_busbw(doc)


def _curve_subject(nodes, coll):
    return "%s %d node%s" % (coll, nodes, "s" if nodes > 1 else "")


def _host_curves(check, run, host, metric, best):
    """This host's curves of the check's probe and variant (and collective, when the check names one), one per
    collective and world size: {(nodes, ranks, collective): points}. Of the placements (nccl-tests measures out of
    place and in place: the same bytes over the same links) the best by `best(points)` is kept. One-rank worlds
    move nothing over any bus and are left out."""
    df = frame(run, check["probe"], metric, check.get("variant"))
    df = df[(df.host == host) & (df.ranks > 1)]
    if check.get("collective"):
        df = df[df.collective == check["collective"]]
    found = {}
    for (nodes, ranks, coll, _), points in curves(df).items():
        found.setdefault((nodes, ranks, coll), []).append(points)
    return {key: max(options, key=best) for key, options in found.items()}


def _no_curve(check, host, doc, what):
    return [no_result_row(check, host, doc, "no %s measured on this host" % what)]


def grade_plateau(check, run, host):
    """Every curve this host measured (each collective at each world size): its plateau, the peak busbw, against
    what the GPU model or the fabric carries (plateau_reference): fail below fail_fraction of it, warn below
    warn_fraction. A curve still rising by more than saturated_rise_pct at its largest size has not reached its
    plateau: below the line it is skipped (run larger sizes), not failed."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    found = _host_curves(check, run, host, "busbw_gbps", best=lambda points: max(v for _, v in points))
    if not found:
        return _no_curve(check, host, doc, "busbw curve")
    fail_f, warn_f = float(check.get("fail_fraction", 0.5)), float(check.get("warn_fraction", 0.7))
    rise_pct = float(check.get("saturated_rise_pct", 10))
    rows = []
    for (nodes, ranks, coll), points in sorted(found.items(), key=lambda kv: (kv[0][2], kv[0][0])):
        subject = _curve_subject(nodes, coll)
        size, peak = max(points, key=lambda p: p[1])
        ref, how = plateau_reference(check, run, host, doc, coll, nodes, ranks)
        observed = "peak %s GB/s at %s (%d ranks)" % (
            shown(peak, (fail_f * ref, warn_f * ref) if ref is not None else (), significant=4), human_bytes(size),
            ranks)
        if ref is None:
            rows.append(make_row(check, host, "skip", observed, reason=how, subject=subject))
            continue
        expected = ">= %.4g (%g × %s; warn below %.4g)" % (fail_f * ref, fail_f, how, warn_f * ref)
        status = status_below(peak, warn_f * ref, fail_f * ref)
        rising = still_rising(points, rise_pct)
        if status != "pass" and rising:
            rows.append(make_row(check, host, "skip", observed, expected, subject=subject, reason=rising))
            continue
        rows.append(make_row(check, host, status, observed, expected, subject=subject))
    return rows


def _smallest(points):
    """(size, value) of the smallest message above 0 bytes (nccl-tests prints 0-byte rows where a size is below
    one element per rank), or (None, inf)."""
    return next(((s, v) for s, v in points if s > 0), (None, float("inf")))


def grade_latency(check, run, host):
    """Every curve this host measured: the time of its smallest message (above 0 bytes, at most max_size_bytes)
    against NCCL's latency model for a ring of that many ranks, base_us + per_step_us × 2 (ranks - 1) (all_reduce's
    ring, the longest; NCCL picks a tree or NVLS when they are faster): warn above warn_factor × the estimate, fail
    above fail_factor ×."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    found = _host_curves(check, run, host, "time_us", best=lambda points: -_smallest(points)[1])
    if not found:
        return _no_curve(check, host, doc, "time per call")
    model = check["latency_model"]
    warn_f, fail_f = float(check["warn_factor"]), float(check["fail_factor"])
    max_size = int(check.get("max_size_bytes", 65536))
    rows = []
    for (nodes, ranks, coll), points in sorted(found.items(), key=lambda kv: (kv[0][2], kv[0][0])):
        subject = _curve_subject(nodes, coll)
        size, time_us = _smallest(points)
        if size is None or size > max_size:
            rows.append(make_row(check, host, "skip", subject=subject, reason="smallest message measured: %s; "
                                 "latency is read at %s or less (min_bytes)" % (
                                     human_bytes(size) if size else "none", human_bytes(max_size))))
            continue
        estimate = float(model["base_us"]) + float(model["per_step_us"]) * 2 * (ranks - 1)
        rows.append(make_row(
            check, host, status_above(time_us, warn_f * estimate, fail_f * estimate),
            "%s us at %s (%d ranks)" % (shown(time_us, (warn_f * estimate, fail_f * estimate), significant=3),
                                        human_bytes(size), ranks),
            "<= %.4g us (%g × the latency estimate %.3g us; warn above %.4g)" % (
                fail_f * estimate, fail_f, estimate, warn_f * estimate), subject=subject))
    return rows


# perftest measures every RDMA device of the node unless told `hcas` (probes/network/perftest.py), and a GPU node's
# are not all rails: a 200G RoCE storage port or a bonded frontend (mlx5_bond_0 on the default route) sits beside
# eight 400G rails, and judged against the fabric's pass line a healthy one fails. The audit already sorts a node's
# NICs into roles (classify_nics); the rail checks judge only its compute NICs, and show the others as measured.
NO_AUDIT_ROLES = "NIC roles unknown without the audit (probe audit): judged as a rail"


def rail_verdict(nics, hca):
    """(judged, reason) for the RDMA device `hca` of a host whose NICs the audit sorted as `nics` (host_nics; None:
    the run has no audit of the host). Judged as a rail: a compute NIC, and any device whose role is not known. A
    port the audit could not tell from a rail (rail_unsure: the rails' own card, fewer rails than GPUs) is judged
    too: it may be a rail that trained low, and passing it unjudged would hide that."""
    if nics is None:
        return True, NO_AUDIT_ROLES
    nic = next((n for n in nics if n["rdma"] and n["name"] == hca), None)
    if nic is None:
        return True, "%s is not among the audit's RDMA devices: role unknown, judged as a rail" % hca
    if nic["role"] == "compute":
        return True, None
    if nic.get("rail_unsure"):
        return True, ("the audit could not tell %s (the rails' card, below their rate) from a storage port: judged "
                      "as a rail" % hca)
    rate = "%gG %s" % (nic["rate_gbps"], nic["link"]) if nic["rate_gbps"] else nic["link"]
    return False, "%s: %s NIC (%s) by the audit, not a rail of the fabric" % (hca, nic["role"], rate)


# perftest pairs the nodes in a ring (probes/network/perftest.py one_round): host i is the client of host i+1, rail k
# to rail k, and files the result under the client with the server as its `peer` label. A link's bandwidth is that of
# two ports, the client's and the server's: a slow link says one of them (or the path between) is slow, not which.
# Each port is in two links of its rail, as client (to the next host) and as server (of the previous one): a port is
# blamed only when both are slow; a link slow alone, between two ports whose other links are fine, is the path.


def _rail_key(labels):
    return labels.get("hca"), labels.get("test"), labels.get("mem")


def rail_links(run, check):
    """Every perftest link the check selects: [{"client", "server", "key": (hca, test, mem), "value"}], the server
    from the result's peer label (None where an artifact has none); a node alone measures its own loopback (its
    server is itself)."""
    cache = run.__dict__.setdefault("_rail_links", {})
    ckey = (id(run.results), len(run.results), check["probe"], check.get("metric", "bw_avg_gbits"),
            json.dumps(check.get("labels"), sort_keys=True))
    if ckey not in cache:
        res = run.results
        sel = res[(res.probe == check["probe"]) & (res.metric == check.get("metric", "bw_avg_gbits"))]
        links = []
        for host, value, labels_json in zip(sel.host, sel.value, sel.labels):
            labels = json.loads(labels_json)
            if labels_match(labels, check.get("labels")):
                links.append({"client": host, "server": labels.get("peer"), "key": _rail_key(labels),
                              "value": float(value)})
        cache[ckey] = links
    return cache[ckey]


def port_links(links, host, key):
    """The links of one host's port (hca, test, mem): as client first, then as server of another host."""
    return ([link for link in links if link["client"] == host and link["key"] == key] +
            [link for link in links if link["server"] == host and link["client"] != host and link["key"] == key])


def _link_name(link):
    return "%s→%s" % (link["client"], link["server"] or "?")


def _links_text(links, lines):
    return "; ".join("%s %s Gbit/s" % (_link_name(link), shown(link["value"], lines, significant=4))
                     for link in links)


def rail_threshold(check, spec, fabric):
    """(threshold Gbit/s, expected text) of a rail on the declared fabric."""
    if spec.get("perftest_gbits_min") and check.get("use_pass_line", True):
        return float(spec["perftest_gbits_min"]), ">= %g Gbit/s (%s pass line)" % (spec["perftest_gbits_min"], fabric)
    frac = float(check.get("fraction_of_line_rate", 0.9))
    return frac * float(spec["nic_gbits"]), ">= %.4g Gbit/s (%g × %s line rate %g)" % (
        frac * float(spec["nic_gbits"]), frac, fabric, spec["nic_gbits"])


def blamed_port(links, host, key, threshold):
    """Whether a host's port is slow: every link it is in on this rail was (at least one measured)."""
    mine = port_links(links, host, key)
    return bool(mine) and all(link["value"] < threshold for link in mine)


def grade_rail_bw(check, run, host):
    """Per RDMA port (hca, test, mem) of this host: its links on that rail (as the client of the next host, as the
    server of the previous one: rail_links) against the fabric's expectation (fraction × line rate, or its pass
    line). The port fails only when all of its links are slow (with 2 nodes both links join the same two ports: the
    pair is named); a slow link whose other end's port is the slow one passes here, naming it; a link slow alone,
    between ports whose other links are fine, fails on both ends as that link (subject with client→server). Only the
    rails are judged (rail_verdict): a device the audit calls storage, frontend or other is a skip row."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    nics = host_nics(run, host)
    links = rail_links(run, check)
    keys = []
    for link in links:
        if link["client"] == host and link["key"] not in keys:
            keys.append(link["key"])
    rows = []
    fabric = (doc.get("params") or {}).get("fabric") or ""
    spec = load_fabrics().get(fabric)
    for key in keys:
        hca = key[0]
        subject = "hca=%s %s %s" % key
        mine = port_links(links, host, key)
        judged, note = rail_verdict(nics, hca)
        if not judged:
            rows.append(make_row(check, host, "skip", _links_text(mine, ()), reason=note, subject=subject))
            continue
        if not spec:
            why = ("fabric %r is not in gpus.yml fabrics" % fabric) if fabric else \
                "no fabric declared: set network_fabric in the inventory"
            rows.append(make_row(check, host, "skip", _links_text(mine, ()),
                                 reason="; ".join(filter(None, [why, note])), subject=subject))
            continue
        threshold, text = rail_threshold(check, spec, fabric)
        observed = _links_text(mine, (threshold,))
        slow = [link for link in mine if link["value"] < threshold]
        others = sorted({h for link in mine for h in (link["client"], link["server"]) if h and h != host})
        notes = [note]
        if slow and len(slow) == len(mine):
            status = "fail"
            if len(mine) == 1:
                pass  # one link measured (one node's loopback, or no other host's link into this port): as measured
            elif len(others) == 1:
                notes.insert(0, "both links of the pair %s and %s are slow: with 2 nodes they join the same two "
                                "ports, the slow one is %s's or %s's %s (or the path between them); a third node "
                                "tells which" % (host, others[0], host, others[0], hca))
            else:
                notes.insert(0, "every link of this port is slow, as client and as server: the port (NIC, cable, "
                                "switch port)")
        else:
            status = "pass"
            for link in slow:
                other = link["server"] if link["client"] == host else link["client"]
                if other and blamed_port(links, other, key, threshold):
                    notes.append("%s is slow: %s's %s is (every link of that port is slow)" % (
                        _link_name(link), other, hca))
        rows.append(make_row(check, host, status, observed, text, "; ".join(filter(None, notes)), subject=subject))
        # a link slow alone: neither end's port is slow on its other links, so the path between them is
        for link in slow if status == "pass" else ():
            other = link["server"] if link["client"] == host else link["client"]
            if other and not blamed_port(links, other, key, threshold):
                rows.append(make_row(
                    check, host, "fail", "%s Gbit/s" % shown(link["value"], (threshold,), significant=4), text,
                    "this link alone is slow: the other links of %s's and %s's %s are not, so the path between them "
                    "(cable, switch port) is" % (link["client"], link["server"], hca),
                    subject="%s %s" % (subject, _link_name(link))))
    if not rows:
        rows.append(no_result_row(check, host, doc, "no perftest result on this host"))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# cluster


def grade_rail_straggler(check, run, hosts):
    """Per rail (hca): each host's port against the cluster's median port, over the rails only (rail_verdict: a
    storage or frontend NIC at half the rails' rate is no slow rail, and no peer of the rails' median either). A port
    is its links on the rail as client and as server (rail_links), at their best (agg max): a link is slow when
    either end is, so a port whose best link is slow is the slow one, and its healthy neighbours are not blamed."""
    nics = {host: host_nics(run, host) for host in hosts}
    links = rail_links(run, check)
    agg = {"max": max, "min": min, "median": statistics.median}[check.get("agg", "max")]
    fail_pct = float(check["max_below_median_pct"])
    warn_pct = float(check.get("warn_below_median_pct", fail_pct))
    rows, ports = [], {}
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
            continue
        hcas = []
        for link in links:
            if link["client"] == host and link["key"][0] not in hcas:
                hcas.append(link["key"][0])
        if not hcas:
            rows.append(make_row(check, host, "skip", reason="no %s result" % check["metric"]))
        for hca in hcas:
            mine = [link for key in {link["key"] for link in links if link["key"][0] == hca}
                    for link in port_links(links, host, key)]
            ports[(host, "hca=%s" % hca)] = (float(agg([link["value"] for link in mine])), mine)
    verdicts = {k: rail_verdict(nics[k[0]], k[1].partition("=")[2]) for k in ports}
    peers = [v for k, (v, _) in ports.items() if verdicts[k][0]]
    median = statistics.median(peers) if len(peers) >= 3 else None
    for (host, subject), (value, mine) in sorted(ports.items()):
        judged, why = verdicts[(host, subject)]
        if not judged:
            rows.append(make_row(check, host, "skip", "%.4g" % value, reason=why, subject=subject))
            continue
        if median is None:
            rows.append(make_row(check, host, "skip", "%.4g" % value, subject=subject, reason="; ".join(
                filter(None, ["fewer than 3 peers to compare with", why]))))
            continue
        below = 100.0 * (median - value) / median if median else 0.0
        observed = "%s (%s%% below cluster median; links %s)" % (
            shown(value, (median * (1 - fail_pct / 100), median * (1 - warn_pct / 100)), significant=4),
            shown(max(below, 0), (warn_pct, fail_pct)), _links_text(mine, ()))
        rows.append(make_row(check, host, status_above(below, warn_pct, fail_pct), observed,
                             "within %g%% of the cluster median %.4g" % (fail_pct, median), why, subject=subject))
    return rows


# Collectives whose 2-node busbw is no reference for larger worlds: all_reduce's Tree/NVLSTree "can give perf
# figures that exceed the capabilities of the external networking card [on two nodes] unless you set
# NCCL_ALGO=RING. This is not the case for jobs run on 3 or more servers" (NVIDIA, NVIDIA/nccl-tests#169). Seen in a
# real series (tests/fixtures/nccl-tests/real, NVIDIA/nccl-tests#309): 466.7 GB/s at 2 nodes, 325.9 at 4, 321 at 8.
TREE_AT_TWO_NODES = ("all_reduce",)


def scaling_lines(check):
    """(fail_below, warn_below) of a net_scaling check: a ratio (scaling) below them fails, warns."""
    return float(check.get("fail_below", 0.7)), float(check.get("warn_below", 0.85))


def grade_scaling(check, run, hosts):
    """busbw as world size grows: every multi-node world against the next smaller one and the smallest multi-node
    one, each pair at the largest size both measured (scaling). busbw is normalised for the rank count, so a
    well-scaling fabric keeps it flat."""
    df = frame(run, check["probe"], "busbw_gbps", check.get("variant"))
    docs = [find_artifact(run, h, check["probe"], check.get("variant")) for h in hosts]
    backends = {d["device"]["backend"] for d in docs if d and d["status"] != "skipped"}
    multi = df[df.nodes > 1]
    if check.get("placement"):
        multi = multi[multi.placement == check["placement"]]
    ratios, left_out, normalised = [], set(), set()
    by_coll = {}
    for (nodes, ranks, coll, place), points in curves(multi).items():  # the slowest host per size sets the pace
        by_coll.setdefault((coll, place), {})[(nodes, ranks)] = points
    for (coll, place), worlds in sorted(by_coll.items()):
        leave_out_two = tree_left_out(coll, multi.backend, check.get("variant"))
        if leave_out_two and any(nodes == 2 for nodes, _ in worlds):
            left_out.add(coll)
        if coll in ALLTOALL:
            normalised.add(coll)
        for nodes, _, ref, size, _, ratio in scaling(worlds, coll, leave_out_two):
            ratios.append((ratio, coll, place, nodes, ref, size))
    rows = []
    cpu = bool(backends) and not (backends & {"cuda", "rocm"})
    fail_below, warn_below = scaling_lines(check)
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
            continue
        note = ("; 2-node %s left out: NCCL's tree algorithms go beyond the NICs at 2 nodes, not at 3 or more "
                "(NVIDIA/nccl-tests#169), so it is no reference for larger worlds" % "/".join(sorted(left_out))
                ) if left_out else ""
        if normalised:
            note += ("; %s compared per GPU of network bandwidth (busbw / (N/(N-1) x (n-1)/n)): the share of its "
                     "traffic that stays in the node falls as nodes are added (NVIDIA/nccl-tests#130)"
                     % "/".join(sorted(normalised)))
        if not ratios:
            plan = sorted({int(n) for n in multi.nodes}) if not multi.empty else []
            rows.append(make_row(check, host, "skip", reason="fewer than two multi-node world sizes measured (%s): "
                                 "nothing to scale against%s" % (", ".join(map(str, plan)) or "none", note)))
            continue
        worst = min(ratios)
        ratio, coll, place, nodes, base, size = worst
        status = status_below(ratio, warn_below, fail_below)
        expected = ("busbw at every world size >= %g × the next smaller world's (n to 2n) and the smallest "
                    "world's (warn below %g)" % (fail_below, warn_below))
        if cpu and status == "fail":
            status = "warn"
            expected += "; cpu backend: warn only (test hosts share CPUs)"
        observed = "worst %s: %s %s at %d nodes vs %d (%s)" % (
            shown(ratio, (fail_below, warn_below), decimals=2), coll, place.replace("_", "-"), nodes, base,
            human_bytes(size))
        rows.append(make_row(check, host, status, observed, expected, note[2:]))
    return rows


def others_median(values, host):
    """The median of the pairs host is not in, what its own pairs are compared with: with 3 hosts a slow host is in
    4 of the 6 directed pairs, so the median of them all is its own. All pairs where every pair has it (2 hosts)."""
    others = [v for (s, d), v in values.items() if host not in (s, d)]
    return statistics.median(others or list(values.values())) if values else None


def grade_pairs(check, run, hosts):
    """Per host: the median TCP bandwidth of its pairs (sent and received) and their RTT against the median pair of
    the other hosts. A slow NIC, cable or switch port shows on every pair of its host."""
    res = run.results
    sel = res[res.probe == "tcp_pairs"]
    pairs = {}
    for metric, value, labels_json in zip(sel.metric, sel.value, sel.labels):
        if metric in ("bw_gbits", "rtt_us"):
            lab = json.loads(labels_json)
            pairs.setdefault(metric, {})[(lab.get("src"), lab.get("dst"))] = value
    bw, rtt = pairs.get("bw_gbits", {}), pairs.get("rtt_us", {})
    bw_fail, bw_warn = float(check.get("bw_fail_below_median_pct", 50)), float(check.get("bw_warn_below_median_pct",
                                                                                           25))
    rtt_warn = float(check.get("rtt_warn_above_median_pct", 100))
    rows = []
    for host in hosts:
        pre = ungradable(check, run, host, probe="tcp_pairs", variant=None)
        if pre:
            rows.append(pre)
            continue
        mine = [v for (s, d), v in bw.items() if host in (s, d)]
        if len(bw) < 3 or not mine:
            rows.append(make_row(check, host, "skip", reason="fewer than 3 measured pairs to compare with"))
            continue
        value, bw_median = statistics.median(mine), others_median(bw, host)
        below = 100.0 * (bw_median - value) / bw_median if bw_median else 0.0
        status = status_above(below, bw_warn, bw_fail)
        # percentages in whole numbers, or with decimals where those would show them on the other side of a line
        text = "bw %.3g Gbit/s (%s%% below the other hosts' median pair %.3g)" % (
            value, shown(max(below, 0), (bw_warn, bw_fail), decimals=0), bw_median)
        my_rtt = [v for (s, d), v in rtt.items() if host in (s, d)]
        rtt_median = others_median(rtt, host)
        if my_rtt and rtt_median:
            above = 100.0 * (statistics.median(my_rtt) - rtt_median) / rtt_median
            above_text = shown(above, (rtt_warn,), decimals=0)
            text += "; rtt %.3g us (%s%%)" % (statistics.median(my_rtt),
                                              above_text if above_text.startswith("-") else "+" + above_text)
            if above > rtt_warn and status == "pass":
                status = "warn"
        rows.append(make_row(check, host, status, text, "bw within %g%% of the other hosts' median pair (warn %g%%), "
                             "rtt within +%g%%" % (bw_fail, bw_warn, rtt_warn)))
    return rows


def nccl_version(code):
    """NCCL_VERSION_CODE -> "2.28.3" (nccl.h: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z from 2.9 on)."""
    code = int(code)
    if code >= 10000:
        return "%d.%d.%d" % (code // 10000, code % 10000 // 100, code % 100)
    return "%d.%d.%d" % (code // 1000, code % 1000 // 100, code % 100)


def grade_nccl_build(check, run, host):
    """What nccl-tests printed about itself: ranks on fewer hosts than the world's nodes fail (the multi-node numbers
    were measured inside fewer nodes than they claim); a library older than the headers warns (nccl.h's structures
    and symbols of the newer release are missing from the older library: NCCL's advice is to build against the
    headers of the library that runs)."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    facts = find_artifact(run, host, check["probe"], check.get("variant")).get("facts") or {}
    headers, library = facts.get("nccl_headers_code"), facts.get("nccl_version_code")
    tests = " ".join(str(facts[k]) for k in ("tests_suite", "nccl_tests_version") if facts.get(k)) or "nccl-tests"
    if facts.get("library_version"):
        built = "%s %s" % (facts.get("library") or "NCCL", facts["library_version"])
    else:
        built = "NCCL %s" % nccl_version(library) if library else "no library version printed"
    observed = "%s, %s%s" % (tests, built, " (headers %s)" % nccl_version(headers) if headers else "")
    expected = "ranks on every node of each world; library not older than the headers"
    mismatch = facts.get("host_count_mismatch") or []
    if mismatch:
        return [make_row(check, host, "fail", "; ".join(mismatch), expected,
                         "these worlds' results were not measured on as many hosts as the world has nodes: check the "
                         "launcher's placement (srun -N/--ntasks-per-node, mpirun's hostfile and -npernode)")]
    if headers and library and int(library) < int(headers):
        return [make_row(check, host, "warn", observed, expected,
                         "nccl-tests was built with NCCL %s headers and ran with the older library %s%s: rebuild it "
                         "against the library the jobs use" % (nccl_version(headers), nccl_version(library),
                                                              " at %s" % facts["library_path"]
                                                              if facts.get("library_path") else ""))]
    return [make_row(check, host, "pass", observed, expected)]


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {
    "net_failures": grade_failures,
    "net_peak_busbw": grade_peak_busbw,
    "net_curve_shape": grade_curve_shape,
    "net_plateau": grade_plateau,
    "net_latency": grade_latency,
    "net_rail_bw": grade_rail_bw,
    "net_nccl_build": grade_nccl_build,
}
CLUSTER = {"net_scaling": grade_scaling, "net_pairs": grade_pairs, "net_rail_straggler": grade_rail_straggler}
