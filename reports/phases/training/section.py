"""Report section of the training phase: what ran (engine, data, model, world sizes, with the reasons of what did
not), failures with their logs, and per job (dense, MoE) a table per world size: tokens/s per GPU, MFU, step time
mean / p99 / cv, peak memory allocated, loss first → last, time to first step (and the MoE's all_to_all share).

Plots (PNG, matplotlib Agg) beside report.md: tokens/s per GPU against nodes for both jobs, the step-time
distribution per world size, the loss curve per world size. Every number is a result of an artifact; across hosts
a world shows its slowest host's tokens/s (a synchronous job runs at that pace) and the largest step time, memory
and start-up time.
"""

from reports.grading.rows import summary_line
from reports.grading.rubric import graded_checks
from reports.grading.select import gpu_model
from reports.phases.training.grade import (
    PROBE,
    by_world,
    host_mfu,
    nonfinite_loss,
    pace,
    per_step,
    pick_world,
    shape_mismatch,
    throughput_lines,
    world_name,
)
from reports.render import markdown, plots
from reports.render.blocks import Bullets, Heading, Paragraph, Table, code, figure, joined, link, strong
from reports.render.markdown import fmt

ORDER = 45
JOBS = (("dense", "Dense (FSDP)"), ("moe", "MoE (expert parallelism)"))


def _docs(run, variant):
    return [d for d in run.artifacts if d["probe"] == PROBE and d.get("variant") == variant]


def status_table(run):
    hosts = [h for h in run.hosts if h not in run.unreachable]
    reasons, rows = {}, []
    for host in hosts:
        row = [host]
        for variant, _ in JOBS:
            doc = run.artifact(host, PROBE, variant)
            if doc is None:
                row.append("not run")
            elif doc["status"] == "ok":
                row.append("ok (%s, %s)" % (doc["device"]["backend"], (doc.get("facts") or {}).get("engine", "?")))
            else:
                text = "%s: %s" % (variant, doc.get("reason") or doc["status"])
                reasons.setdefault(text, len(reasons) + 1)
                row.append("%s [%d]" % (doc["status"], reasons[text]))
        rows.append(row)
    out = [Table(["host"] + [title for _, title in JOBS], rows)]
    if reasons:
        out.append(Bullets(sorted(reasons, key=reasons.get), numbered=True))
    return out


def failures_list(run):
    """One item per failure a host recorded: the job, the host, its message and a link to its log."""
    items = []
    for variant, _ in JOBS:
        for doc in _docs(run, variant):
            for f in (doc.get("facts") or {}).get("failures") or []:
                log = f.get("log")
                where = [link("%s/%s" % (doc["host"], log), "../artifacts/%s/%s" % (doc["host"], log))] if log else \
                    ["no log"]
                items.append([strong(variant), " (%s, %s nodes, %s): %s — log: " % (
                    doc["host"], f.get("nodes", "?"), f.get("kind", "error"), f.get("message"))] + joined(where))
    return items



def _count(n):
    """8.03 B, 20.9 M, 158 K: a parameter count as people say it (the CPU path's models have thousands)."""
    n = float(n)
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return "%.3g %s" % (n / size, unit)
    return "%d" % n


def describe(doc):
    """What a job trained and how, from its facts: engine, data, model, parameters, batch, steps, world sizes."""
    f = doc.get("facts") or {}
    m = f.get("model") or {}
    shape = "%s layers, dim %s, %s heads of %s (%s KV), FFN %s, vocab %s" % (
        m.get("layers"), m.get("dim"), m.get("n_heads"), m.get("head_dim") or "dim/heads", m.get("n_kv_heads"),
        m.get("ffn_dim"), m.get("vocab"))
    if m.get("n_experts"):
        shape += "; %s experts, top %s, expert FFN %s, %s shared" % (
            m["n_experts"], m.get("top_k"), m.get("moe_ffn_dim"), m.get("n_shared_experts", 0))
    params = "%s parameters" % _count(f.get("params") or 0)
    if f.get("active_params") and f.get("active_params") != f.get("params"):
        params += " (%s active per token)" % _count(f["active_params"])
    return ["Engine ", code(f.get("engine", "?")), ", data: %s. Model: %s; %s. seq_len %s, local batch %s, %s, %s "
            "processes per node, %s steps (%s warm-up). World sizes planned %s, ran %s; launcher %s." % (
                f.get("data", "?"), shape, params, f.get("seq_len"), f.get("local_batch"), f.get("dtype"),
                f.get("procs_per_node"), f.get("steps"), f.get("warmup_steps"), f.get("world_sizes"),
                f.get("world_sizes_run") or "none", f.get("launcher", "?"))
            + ("".join(" Not run: %s." % why for why in f.get("world_sizes_not_run") or []))
            + (" torchtitan: %s." % f["torchtitan"] if f.get("torchtitan") else "")
            + (" torchtitan %s ran as `python %s`." % ((f.get("torchtitan_log") or {}).get("version", "?"),
                                                     f["torchtitan_argv"]) if f.get("torchtitan_argv") else "")]


def judged_lines(run, variant, world, host, measure):
    """The lines the train_throughput checks of this job measuring `measure` (tokens_per_s, mfu) judged `host`'s
    value at `world` against (the world their `nodes` picks; the host's GPU model's figures), as the run was graded:
    the table shows the value on the side of them its row does (reports/shown.py)."""
    doc = run.artifact(host, PROBE, variant)
    if doc is None or doc["device"]["backend"] not in ("cuda", "rocm"):
        return []
    worlds = by_world(run, variant, "tokens_per_s_per_gpu", host)
    _, spec, _ = gpu_model(run, host, doc)
    return [line for c in graded_checks(run, lambda c: c.get("kind") == "train_throughput" and c.get("variant") ==
                                        variant and c.get("measure") == measure)
            if pick_world(worlds, c.get("nodes", 1)) == world and not shape_mismatch(c, doc.get("facts") or {})
            for line in throughput_lines(c, spec)]


def _mfu_cell(run, variant, world, tps_by_host):
    """MFU of the world's slowest host, or "—, <why not>" (the CPU backend, no peak for the GPU model)."""
    host = min(tps_by_host, key=tps_by_host.get)
    doc = run.artifact(host, PROBE, variant)
    backend = doc["device"]["backend"]
    if backend not in ("cuda", "rocm"):
        return "—, backend=%s" % backend
    value, why = host_mfu(run, host, doc, tps_by_host[host])
    return "%s %%" % fmt(value, thresholds=judged_lines(run, variant, world, host, "mfu")) if value is not None \
        else "—, %s" % why


def job_table(run, variant):
    tps = by_world(run, variant, "tokens_per_s_per_gpu")
    cols = {m: by_world(run, variant, m) for m in ("step_time_mean_s", "step_time_p99_s", "step_time_cv",
                                                    "peak_memory_bytes", "loss_first", "loss_last",
                                                    "time_to_first_step_s", "alltoall_share")}

    diverged = nonfinite_loss(run, variant)

    def worst(metric, world):
        values = cols[metric].get(world)
        return max(values.values()) if values else None

    # the step time cv judged (train_step_cv: every host at every world), shown on its side of the check's lines
    cv_lines = [float(c[k]) for c in graded_checks(run, lambda c: c.get("kind") == "train_step_cv" and
                                                   c.get("variant") == variant) for k in ("warn_cv", "fail_cv")]
    rows = []
    for world in sorted(set(tps) | set(cols["loss_last"]) | set(diverged)):
        first, last = cols["loss_first"].get(world), cols["loss_last"].get(world)
        memory = worst("peak_memory_bytes", world)
        loss = "%.4g → %.4g" % (next(iter(first.values())), next(iter(last.values()))) if first and last else None
        if world in diverged:
            bad = next(iter(diverged[world].values()))
            loss = "%s at step %s" % (bad["loss"], bad["step"])
        slowest = min(tps[world], key=tps[world].get) if world in tps else None
        row = [world[0], world[1], fmt(tps[world][slowest], thresholds=judged_lines(
                   run, variant, world, slowest, "tokens_per_s")) if world in tps else None,
               _mfu_cell(run, variant, world, tps[world]) if world in tps else None,
               fmt(worst("step_time_mean_s", world)), fmt(worst("step_time_p99_s", world)),
               fmt(worst("step_time_cv", world), thresholds=cv_lines),
               fmt(memory / 2**30) if memory is not None else None, loss,
               fmt(worst("time_to_first_step_s", world))]
        if variant == "moe":
            share = worst("alltoall_share", world)
            row.append("%s %%" % fmt(100 * share) if share is not None else None)
        rows.append(row)
    # peak_memory_bytes is torch's max_memory_allocated (CPU: peak RSS); torchtitan's own "memory:" is max reserved,
    # which is higher: the label says which, so a hand run's figure is not taken for the same number
    columns = ["nodes", "ranks", "tokens/s per GPU", "MFU", "step mean s", "step p99 s", "step cv",
               "peak allocated GiB", "loss first → last", "first step s"]
    columns += ["all_to_all share"] if variant == "moe" else []
    return Table(columns, rows)


def plot_scaling(run, report_dir):
    """tokens/s per GPU against nodes, one line per job (the slowest host of each world)."""
    series = {title: sorted((w[0], v) for w, v in pace(run, variant).items()) for variant, title in JOBS}
    series = {k: v for k, v in series.items() if v}
    made = plots.figure(6, 3.6) if series else None
    if made is None:
        return None
    fig, ax = made
    for title, points in series.items():
        xs, ys = zip(*points)
        ax.plot(xs, ys, marker="o", label=title)
    ax.set_xticks(sorted({x for points in series.values() for x, _ in points}))
    ax.set_xlabel("nodes")
    ax.set_ylabel("tokens/s per GPU")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_title("Training: tokens/s per GPU as nodes double (flat is ideal)")
    return plots.save(fig, report_dir, "training_scaling.png")


def _step_seconds(run, variant):
    """{(nodes, ranks): [timed step wall times of every host]}: the distribution a world's steps took. The warm-up
    steps (facts.warmup_steps: the first ones, 0-based; step 0 also compiles and allocates) are left out, as every
    table and check leaves them out: with them the plot showed 0.5 s beside a p99 of 0.06 s."""
    warmup = {d["host"]: int((d.get("facts") or {}).get("warmup_steps") or 0) for d in run.artifacts
              if d["probe"] == PROBE and d.get("variant") == variant}
    out = {}
    for r in run.records(PROBE):
        if r["variant"] == variant and r["metric"] == "step_seconds" and \
                int(r["labels"].get("step", 0)) >= warmup.get(r["host"], 0):
            out.setdefault((int(r["labels"]["nodes"]), int(r["labels"]["ranks"])), []).append(r["value"])
    return out


def plot_per_job(run, report_dir, name, title, draw):
    """One panel per job that has data; draw(ax, variant) -> whether it drew anything."""
    made = plots.figure(11, 3.6, 1, len(JOBS), squeeze=False)
    if made is None:
        return None
    fig, axes = made
    drawn = [draw(ax, variant, job) for ax, (variant, job) in zip(axes.flat, JOBS)]
    if not any(drawn):
        plots.pyplot().close(fig)
        return None
    fig.suptitle(title)
    return plots.save(fig, report_dir, name)


def _draw_steps(run):
    def draw(ax, variant, job):
        data = _step_seconds(run, variant)
        if not data:
            ax.axis("off")
            return False
        worlds = sorted(data)
        ax.boxplot([data[w] for w in worlds])
        ax.set_xticks(range(1, len(worlds) + 1), [str(w[0]) for w in worlds])
        ax.set_title(job)
        ax.set_xlabel("world size (nodes)")
        ax.set_ylabel("step time (s)")
        ax.grid(True, alpha=0.3)
        return True
    return draw


def _draw_loss(run):
    def draw(ax, variant, job):
        curves = per_step(run, variant, "loss")
        if not curves:
            ax.axis("off")
            return False
        for world, points in sorted(curves.items()):
            xs, ys = zip(*points)
            ax.plot(xs, ys, label=world_name(world))
        ax.set_title(job)
        ax.set_xlabel("step")
        ax.set_ylabel("loss (nats)")
        ax.grid(True, alpha=0.3)
        ax.legend()
        return True
    return draw


def blocks(run, rows, report_dir):
    if not any(d["probe"] == PROBE for d in run.artifacts):
        return []
    out = [Heading(2, "Training")] + status_table(run)
    failures = failures_list(run)
    if failures:
        out += [Heading(4, "Failures (crashes, hangs, errors)"), Bullets(failures)]
    for variant, title in JOBS:
        docs = [d for d in _docs(run, variant) if d.get("facts")]
        if not docs:
            continue
        out += [Heading(3, title), Paragraph(describe(docs[0])), job_table(run, variant)]
    if report_dir:
        out += figure(plot_scaling(run, report_dir), "tokens/s per GPU against nodes")
        out += figure(plot_per_job(run, report_dir, "training_step_time.png", "Step time per world size",
                                   _draw_steps(run)), "step-time distribution")
        out += figure(plot_per_job(run, report_dir, "training_loss.png", "Loss per step", _draw_loss(run)),
                      "loss curves")
    mine = [r for r in rows if r["check_id"].startswith("training.")]
    if mine:
        out.append(Paragraph("Training checks: " + summary_line(mine)))
    return out


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
