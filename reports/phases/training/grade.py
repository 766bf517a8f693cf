"""Grading of the training phase (probe `training`, variants dense and moe): pure functions of a run.

Check kinds (rubric.d/training.yml), registered by reports.grading.kinds.register_phase_kinds:
  train_loss        per host and world size: the loss fell (loss_last < loss_first) and no step's loss was NaN or inf
                    (facts.nonfinite_loss); judged on every backend, since a CPU run trains the same model and its
                    loss must fall as well
  train_throughput  per host: tokens/s per GPU (`measure: tokens_per_s`) or MFU (`measure: mfu`, flops.py) at one
                    world size (`nodes`: 1, the smallest world when no one-node world ran, or max) against the GPU
                    model's expectation in gpus.yml, for the model shape the expectation was published for
  train_scaling     cluster: tokens/s per GPU at each world size against the next smaller one (n to 2n) and the
                    smallest; the slowest host sets a synchronous job's pace (of a smaller world, among the hosts
                    that also ran the larger one)
  train_step_cv     per host and world size: the step time's coefficient of variation (stdev / mean over the timed
                    steps); a synchronous step waits for its slowest rank, so a straggler shows as jitter
The probe's failures are judged by the network phase's net_failures (the same facts.failures shape); time to first
step by the generic metric kind.

MoE against dense (`contrast: <check id>` on a MoE check): when a MoE row warns or fails and the dense job's
counterpart check passes on the same host, the row says that this points at the network. The dense job is FLOPs
bound and the MoE job collective bound (expert parallelism's all_to_all crosses the NICs at every step): a sick
network slows the one and not the other.
"""


from reports.grading import expectations
from reports.grading.preconditions import ungradable
from reports.grading.rows import SEVERITY_OF_STATUS, make_row, no_result_row, status_above, status_below
from reports.grading.rubric import shipped_checks
from reports.grading.select import find_artifact, gpu_model
from reports.phases.training.flops import flops_per_token, mfu
from reports.shown import shown

PROBE = "training"


# ---------------------------------------------------------------------------------------------------------------
# tables


def by_world(run, variant, metric, host=None):
    """{(nodes, ranks): {host: value}} of one job's metric (the step-less ones: one value per host and world)."""
    out = {}
    for r in run.records(PROBE):
        if r["variant"] == variant and r["metric"] == metric and (host is None or r["host"] == host):
            lab = r["labels"]
            out.setdefault((int(lab["nodes"]), int(lab["ranks"])), {})[r["host"]] = r["value"]
    return out


def per_step(run, variant, metric, host=None):
    """{(nodes, ranks): [(step, value)] by step} of a per-step metric (loss, step_seconds). Every node records the
    same global loss and its own step times: with no host given, the first host's series of each world is kept."""
    out, owner = {}, {}
    for r in run.records(PROBE):
        if r["variant"] != variant or r["metric"] != metric or (host is not None and r["host"] != host):
            continue
        lab = r["labels"]
        world = (int(lab["nodes"]), int(lab["ranks"]))
        if owner.setdefault(world, r["host"]) == r["host"]:
            out.setdefault(world, []).append((int(lab.get("step", 0)), r["value"]))
    return {w: sorted(points) for w, points in out.items()}


def nonfinite_loss(run, variant, host=None):
    """{(nodes, ranks): {host: {"step", "loss", ...}}} as by_world: the worlds whose loss went NaN or inf, with the
    first such step (facts.nonfinite_loss: JSON has no NaN, so the probe says it there, not in a loss value)."""
    out = {}
    for doc in run.artifacts:
        if doc["probe"] == PROBE and doc.get("variant") == variant and host in (None, doc["host"]):
            for bad in (doc.get("facts") or {}).get("nonfinite_loss") or []:
                out.setdefault((int(bad["nodes"]), int(bad["ranks"])), {})[doc["host"]] = bad
    return out


def pace(run, variant, metric="tokens_per_s_per_gpu"):
    """{(nodes, ranks): value} of the slowest host per world size."""
    return {w: min(hosts.values()) for w, hosts in by_world(run, variant, metric).items()}


def pick_world(worlds, nodes):
    """The world size a check looks at: `nodes: 1` the one-node world (else the smallest), `max` the largest."""
    if not worlds:
        return None
    ordered = sorted(worlds)
    if nodes == "max":
        return ordered[-1]
    return next((w for w in ordered if w[0] == int(nodes)), ordered[0])


def world_name(world):
    nodes, ranks = world
    return "%d node%s (%d ranks)" % (nodes, "s" if nodes > 1 else "", ranks)


def no_expectation(name, spec, field):
    """The skip reason where gpus.yml has no `field` for the host's GPU model (or no entry for the model at all)."""
    if spec is None:
        return "no expectation for %s: it is not in gpus.yml" % name
    return "no expectation for %s: %s" % (name, expectations.missing(spec, field))


def host_mfu(run, host, doc, tokens_per_s_per_gpu):
    """(MFU in percent, "<GFLOP> per token / <peak> TFLOPS") of a host's tokens/s per GPU, or (None, why not)."""
    flops, why = flops_per_token((doc or {}).get("facts") or {})
    if flops is None:
        return None, why
    _, spec, name = gpu_model(run, host, doc)
    peak = (spec or {}).get("bf16_peak_tflops")
    if not peak:
        return None, no_expectation(name, spec, "bf16_peak_tflops")
    return 100 * mfu(tokens_per_s_per_gpu, flops, peak), "%.4g GFLOP per token / %g TFLOPS" % (flops / 1e9, peak)


def _no_result(check, host, doc, what):
    return [no_result_row(check, host, doc, "no %s recorded on this host" % what)]


# ---------------------------------------------------------------------------------------------------------------
# MoE against dense


def contrast_notes(check, run, hosts):
    """{host: note} for a check with `contrast: <dense check id>`: where the dense check passes on the host, a note
    that the MoE job's shortfall points at the network. The dense check is graded here without its own contrast."""
    other = shipped_checks().get(check.get("contrast") or "")
    if other is None:
        return {}
    other = dict(other, contrast=None)
    if other["kind"] in PER_HOST:
        rows = [r for h in hosts for r in PER_HOST[other["kind"]](other, run, h)]
    else:
        rows = CLUSTER[other["kind"]](other, run, hosts)
    notes = {}
    for r in rows:
        if r["status"] == "pass":
            notes[r["host"]] = (
                "the dense job (FLOPs bound) passes %s (%s) while this collective-bound job does not: this points at "
                "the network (expert parallelism's all_to_all crosses the NICs at every step); see the network "
                "phase's alltoall and perftest checks" % (other["id"], r["observed"]))
    return notes


def with_note(row, note):
    if note:
        row["reason"] = "; ".join(x for x in (row["reason"], note) if x)
    return row


# ---------------------------------------------------------------------------------------------------------------
# per host


def grade_loss(check, run, host):
    """At every world size the host ran: the global mean loss fell from the first step to the last."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    first = by_world(run, check.get("variant"), "loss_first", host)
    last = by_world(run, check.get("variant"), "loss_last", host)
    diverged = nonfinite_loss(run, check.get("variant"), host)
    worlds = sorted(set(first) & set(last) | set(diverged))
    if not worlds:
        return _no_result(check, host, doc, "loss")
    facts = doc.get("facts") or {}
    # loss_first is the first step's, warm-up included: the span is every step the job ran
    steps, warmup = facts.get("steps"), int(facts.get("warmup_steps") or 0)
    span = (" over %d steps (%d warm-up)" % (steps + warmup, warmup) if warmup else " over %s steps" % steps) \
        if steps else ""
    rows = []
    for world in worlds:
        if world in diverged:
            bad = diverged[world][host]
            rows.append(make_row(check, host, "fail", "%s at step %s" % (bad["loss"], bad["step"]),
                                 "loss_last < loss_first", subject=world_name(world),
                                 reason="the loss is not finite (%s first at step %s): the numerics diverged" % (
                                     bad["loss"], bad["step"])))
            continue
        f, la = first[world][host], last[world][host]
        observed = "%.4g → %.4g nats" % (f, la) + span
        fell = la < f
        rows.append(make_row(check, host, "pass" if fell else "fail", observed, "loss_last < loss_first",
                             subject=world_name(world), reason=None if fell else (
                                 "the loss did not fall: the job does not learn at this world size")))
    return rows


def shape_mismatch(check, facts):
    """Why the run's model is not the one the expectation was published for (check's `shape`, `seq_len`), or None."""
    shape, seq_len = check.get("shape") or {}, check.get("seq_len")
    model = facts.get("model") or {}
    if all(str(model.get(k)) == str(v) for k, v in shape.items()) and (
            seq_len is None or str(facts.get("seq_len")) == str(seq_len)):
        return None
    want = ", ".join("%s %s" % kv for kv in shape.items())
    ran = ", ".join("%s %s" % (k, model.get(k, "?")) for k in shape)
    return "the expectation is for %s (%s) at seq_len %s; this run trained %s at seq_len %s" % (
        check.get("shape_name", "another model"), want, seq_len, ran, facts.get("seq_len", "?"))


def throughput_lines(check, spec):
    """The lines (expect, warn) of a train_throughput check for the GPU model `spec`, those gpus.yml gives."""
    lines = (expectations.resolve(e, spec)[0] for e in (check.get("expect"), check.get("warn")) if e)
    return [line for line in lines if line is not None]


def grade_throughput(check, run, host):
    """tokens/s per GPU or MFU at one world size against the GPU model's expectation (fail below `expect`, warn below
    `warn`), for the model shape the expectation is for."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    tps = by_world(run, check.get("variant"), "tokens_per_s_per_gpu", host)
    world = pick_world(tps, check.get("nodes", 1))
    if world is None:
        return _no_result(check, host, doc, "tokens/s per GPU")
    subject, value, facts = world_name(world), tps[world][host], doc.get("facts") or {}
    _, spec, name = gpu_model(run, host, doc)
    # the number judged is shown on its side of the check's lines (reports/shown.py: an MFU of 26.596 % is not
    # "26.6" beside a floor of 26.6); without an expectation, as before
    lines = throughput_lines(check, spec)
    tokens_lines = lines if check["measure"] == "tokens_per_s" else ()
    observed = "%s tokens/s per GPU" % shown(value, tokens_lines, decimals=0)
    if check["measure"] == "mfu":
        value, text = host_mfu(run, host, doc, value)
        if value is None:
            return [make_row(check, host, "skip", observed, subject=subject, reason=text)]
        observed = "%s %% MFU (%s × %s)" % (shown(value, lines, significant=3), observed, text)
        own = by_world(run, check.get("variant"), "torchtitan_mfu_pct", host).get(world, {}).get(host)
        if own is not None:
            # torchtitan's own figure (its FLOPs count and the peak it assumed): what a run by hand prints
            observed += "; torchtitan's own: %.3g %%" % own
    why = shape_mismatch(check, facts)
    if why:
        return [make_row(check, host, "skip", observed, subject=subject, reason=why)]
    threshold, text, _ = expectations.resolve(check["expect"], spec, value)
    if threshold is None:
        return [make_row(check, host, "skip", observed, subject=subject,
                         reason=no_expectation(name, spec, check["expect"]["of"]))]
    status, expected = "pass", text
    if not expectations.meets(value, check["expect"], threshold):
        status = "fail"
    elif check.get("warn"):
        w_threshold, w_text, _ = expectations.resolve(check["warn"], spec, value)
        if not expectations.meets(value, check["warn"], w_threshold):
            status, expected = "warn", "%s (warn below %s)" % (text, w_text)
    row = make_row(check, host, status, observed, expected, subject=subject)
    if status != "pass":
        row = with_note(row, contrast_notes(check, run, [host]).get(host))
    return [row]


def grade_step_cv(check, run, host):
    """At every world size: the step time's coefficient of variation over the timed steps (warn above warn_cv, fail
    above fail_cv), with the p50 and p99 step time it comes from."""
    pre = ungradable(check, run, host)
    if pre:
        return [pre]
    doc = find_artifact(run, host, check["probe"], check.get("variant"))
    variant = check.get("variant")
    cvs = by_world(run, variant, "step_time_cv", host)
    if not cvs:
        return _no_result(check, host, doc, "step time")
    p50, p99 = by_world(run, variant, "step_time_p50_s", host), by_world(run, variant, "step_time_p99_s", host)
    warn_cv, fail_cv = float(check["warn_cv"]), float(check["fail_cv"])
    rows = []
    for world in sorted(cvs):
        cv = cvs[world][host]
        observed = "cv %s" % shown(cv, (warn_cv, fail_cv), decimals=3)
        if world in p50 and world in p99:
            observed += " (p50 %.3g s, p99 %.3g s)" % (p50[world][host], p99[world][host])
        rows.append(make_row(check, host, status_above(cv, warn_cv, fail_cv), observed,
                             "cv <= %g (warn above %g)" % (fail_cv, warn_cv), subject=world_name(world)))
    return rows


# ---------------------------------------------------------------------------------------------------------------
# cluster


def pace_over(tps, world, hosts):
    """tokens/s per GPU of `world` at the pace of its slowest host among `hosts` ({host: value} per world, as
    by_world); None when none of them ran it."""
    values = [v for h, v in tps.get(world, {}).items() if h in hosts]
    return min(values) if values else None


def scaling_steps(run, variant, multi_node_anchor=False):
    """[(ratio, smaller world, larger world, smaller's pace, larger's pace)]: tokens/s per GPU of each world size
    against the next smaller one (n to 2n) and against the smallest (with multi_node_anchor, the smallest multi-node
    world: a job whose step out of one node is judged on floors of its own, from_one_node, loses that step once, and
    every larger world against one node would be judged on it again), at the slowest host's pace. Tokens/s per GPU
    stays level when the job scales perfectly (ratio 1). An n-node world runs on the first n hosts (placement order,
    probes/common/worlds.py) while one-node worlds run on every host: the smaller world's pace is taken over the
    hosts that also ran the larger one, else a slow host outside the larger world lowers its baseline and hides the
    loss (4300 against a 4500 host that never ran 2 nodes passed; against the 5800 of the two hosts that did, 0.74
    fails)."""
    tps = by_world(run, variant, "tokens_per_s_per_gpu")
    worlds = sorted(tps)
    multi = [w for w in worlds if w[0] > 1]
    anchor = multi[0] if multi_node_anchor and multi else worlds[0] if worlds else None
    steps, prev = [], None
    for larger in worlds:
        # against the next smaller world (n to 2n) and against the smallest: a steady loss per doubling adds up even
        # when no single step looks bad
        for smaller in sorted(w for w in {prev, anchor} - {None, larger} if w < larger):
            at_larger, at_smaller = pace_over(tps, larger, tps[larger]), pace_over(tps, smaller, tps[larger])
            if at_smaller:
                steps.append((at_larger / at_smaller, smaller, larger, at_smaller, at_larger))
        prev = larger
    return steps


def _floors(check, smaller):
    """(warn_below, fail_below) for a comparison with `smaller`: `from_one_node` where that is one node (the job
    leaves NVLink for the NICs between the two)."""
    spec = check.get("from_one_node") if smaller[0] == 1 and check.get("from_one_node") else check
    return float(spec["warn_below"]), float(spec["fail_below"])


def grade_scaling(check, run, hosts):
    """tokens/s per GPU of each world size against the next smaller one (n to 2n nodes) and against the smallest
    (scaling_steps): fail below fail_below, warn below warn_below (a comparison with one node against
    `from_one_node`'s floors, where given). The MoE job shows its all_to_all share of the step at both world sizes.
    On the CPU backend at most a warning (test hosts share CPUs)."""
    variant = check.get("variant")
    steps = scaling_steps(run, variant, multi_node_anchor=bool(check.get("from_one_node")))
    judged = []
    for ratio, smaller, larger, at_smaller, at_larger in steps:
        warn_below, fail_below = _floors(check, smaller)
        judged.append((status_below(ratio, warn_below, fail_below), ratio, smaller, larger, at_smaller, at_larger))
    expected = ("tokens/s per GPU at each world size >= %g × the next smaller world's (n to 2n) and the smallest "
                "%sworld's (warn below %g)" % (float(check["fail_below"]), "multi-node " if check.get("from_one_node")
                                              else "", float(check["warn_below"])))
    if check.get("from_one_node"):
        expected += "; against one node >= %g × (warn below %g)" % _floors(check, (1, 1))[::-1]
    status, observed = None, ""
    if judged:
        status, ratio, smaller, larger, at_smaller, at_larger = max(
            judged, key=lambda j: (SEVERITY_OF_STATUS[j[0]], -j[1]))
        observed = "worst %s: %s vs %s (%.0f vs %.0f tokens/s per GPU)" % (
            shown(ratio, _floors(check, smaller), decimals=2), world_name(larger), world_name(smaller), at_larger,
            at_smaller)
        share = {w: max(v.values()) for w, v in by_world(run, variant, "alltoall_share").items()}
        if smaller in share and larger in share:
            observed += "; all_to_all %.0f %% → %.0f %% of the step" % (100 * share[smaller], 100 * share[larger])
    docs = [find_artifact(run, h, check["probe"], variant) for h in hosts]
    backends = {d["device"]["backend"] for d in docs if d and d["status"] != "skipped"}
    cpu = bool(backends) and not (backends & {"cuda", "rocm"})
    if cpu and status == "fail":
        status, expected = "warn", expected + "; cpu backend: warn only (test hosts share CPUs)"
    notes = contrast_notes(check, run, hosts) if status in ("warn", "fail") else {}
    rows = []
    for host in hosts:
        pre = ungradable(check, run, host)
        if pre:
            rows.append(pre)
        elif status is None:
            ran = ", ".join(str(w[0]) for w in sorted(pace(run, variant))) or "none"
            rows.append(make_row(check, host, "skip", reason="fewer than two world sizes ran (nodes: %s): nothing "
                                 "to scale against" % ran))
        else:
            rows.append(with_note(make_row(check, host, status, observed, expected), notes.get(host)))
    return rows


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {"train_loss": grade_loss, "train_throughput": grade_throughput, "train_step_cv": grade_step_cv}
CLUSTER = {"train_scaling": grade_scaling}
