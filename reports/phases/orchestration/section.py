"""Report section of the orchestration phase: the Slurm half (what ran, each test's status, the latency
distributions, the array against the loop with the controller's RPCs, GPU allocation, exclusive and topology-aware
placement, accounting, enforcement and cleanup), then the Kubernetes half (reports/phases/orchestration/kubernetes.py).
Every number is a result or fact of an artifact; verdicts come from the graders."""

from reports.grading import one_host
from reports.grading.rubric import graded_checks
from reports.phases.orchestration import common, kubernetes, slurm
from reports.render import markdown
from reports.render.blocks import Bullets, Heading, Paragraph, Table, code
from reports.render.markdown import fmt

ORDER = 55
LATENCIES = (("submit_to_running_s", "sbatch to RUNNING"), ("submit_to_script_s", "sbatch to the script's first line"),
             ("prolog_launch_s", "RUNNING to the script's first line (prolog, launch)"),
             ("epilog_s", "the script's last line to leaving COMPLETING (epilog)"),
             ("salloc_to_shell_s", "salloc to its command"), ("srun_step_s", "srun step in an allocation"))


def latency_lines(run):
    """{metric: (pass_max, warn_max) of every slurm_latency check of it}, as the run was graded: the median (p50)
    the table shows beside the check's verdict is on the side of them its row shows it."""
    out = {}
    for c in graded_checks(run, lambda c: c.get("kind") == "slurm_latency"):
        out[c["metric"]] = out.get(c["metric"], ()) + (float(c["pass_max"]), float(c["warn_max"]))
    return out


def latency_table(doc, lines=None):
    rows = []
    for metric, label in LATENCIES:
        vals = slurm.values(doc, metric)
        if vals:
            dist = common.distribution(vals)
            # the check judges the median (p50); p90 and max beside it are read against the same lines
            judged = (lines or {}).get(metric, ())
            rows.append([label, dist["n"]] + [fmt(dist[k], thresholds=judged) for k in ("p50", "p90", "max")])
    return [Table(["seconds", "samples", "p50", "p90", "max"], rows)] if rows else []


def tests_table(doc):
    tests = (doc.get("facts") or {}).get("tests") or {}
    rows = [[name, t["status"], t.get("reason") or t.get("note")] for name, t in tests.items()]
    return [Table(["test", "status", "reason"], rows)] if rows else []


def array_table(doc):
    summ = slurm.array_summary(doc)
    rows = [[mode, m.get("jobs"), fmt(m.get("submit_s")), fmt(m.get("done_s")), m.get("submit_rpcs"),
             fmt(m.get("submit_rpc_ms")), m.get("job_rpcs"), fmt(m.get("job_rpc_ms"))]
            for mode, m in sorted(summ.items())]
    if not rows:
        return []
    return [Heading(4, "A job array against a loop of sbatch calls"),
            Table(["mode", "jobs", "submit s", "all done s", "submit RPCs", "submit RPC ms", "controller RPCs",
                   "controller RPC ms"], rows),
            Paragraph("Controller RPCs: sdiag's per-message counts and times between the start and the end of "
                      "each mode, without the reading RPCs (squeue, sinfo, sdiag) this probe's polling adds. They "
                      "are the controller's counters for every user: on a busy cluster other users' RPCs in that "
                      "time are counted too.")]


def gpu_table(doc):
    gres = (doc.get("facts") or {}).get("gres") or {}
    rows = [[code(r["flag"]), r["requested"], r.get("cuda_visible_devices"), r.get("step_gpus"),
             r.get("nvidia_smi_gpus"), r.get("node"), r.get("error")] for r in gres.get("requests") or []]
    if not rows:
        return []
    return [Heading(4, "GPU allocation (%s GPUs per node)" % gres.get("gpus_per_node")),
            Table(["request", "asked", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_GPUS", "nvidia-smi", "node", "error"],
                  rows)]


def placement_part(doc):
    facts = doc.get("facts") or {}
    items = []
    ex = facts.get("exclusive")
    if ex:
        items.append(["--exclusive: job %s on %s got %s of %s CPUs; a second job on that node was %s" % (
            ex["job"], ex["node"], ex.get("job_cpus"), ex.get("node_cpus"),
            "refused" if ex.get("second_job_refused") else "run beside it")])
    out = [Heading(4, "Placement"), Bullets(items)] if items else []
    topo = facts.get("topology")
    if topo:
        leaves = slurm.leaf_of(topo["switches"])
        rows = [[", ".join(p["nodes"]), ", ".join(sorted({leaves.get(n, "?") for n in p["nodes"]})),
                 ", ".join(p.get("idle_before") or []), slurm.placement_verdict(p, leaves)[1]]
                for p in topo["placements"]]
        switches = [[s["name"], s["level"], s["nodes"]] for s in topo["switches"]]
        out += [Table(["switch", "level", "nodes"], switches),
                Table(["two-node job on", "leaf switches", "idle nodes before", "placement"], rows)]
    return out


def accounting_part(doc):
    facts = doc.get("facts") or {}
    acct = facts.get("accounting")
    items = []
    if acct:
        jobs = acct.get("jobs") or []
        items.append("storage %s, enforce %s, priority %s, TRES %s" % (
            acct.get("storage_type"), acct.get("enforce"), acct.get("priority_type"), acct.get("tres")))
        items.append("%d of %d submitted jobs in sacct" % (sum(1 for j in jobs if j.get("in_sacct")), len(jobs)))
        items.append("associations of the user: %s" % ("; ".join("|".join(a) for a in acct.get("associations") or [])
                                                       or acct.get("associations_error") or "none"))
        items.append("QoS: %s" % (", ".join(q[0] for q in acct.get("qos") or []) or acct.get("qos_error") or "none"))
        for finding in slurm.accounting_findings(acct):
            items.append("missing: %s" % finding)
    ref = facts.get("refused_account")
    if ref:
        items.append("a job charged to account %s: %s (%s)" % (ref["account"], "refused" if ref["refused"]
                                                                else "accepted", ref.get("said")))
    left = facts.get("left_in_queue")
    if left is not None:
        items.append("%d jobs submitted (names %s-*), %d left in the queue at the end%s" % (
            len(facts.get("submitted") or []), facts.get("job_name_prefix"), len(left),
            ": " + "; ".join(left) if left else ""))
    return [Heading(4, "Accounting, enforcement, cleanup"), Bullets(items)] if items else []


def slurm_part(run):
    out = []
    for host in one_host.runners(run, slurm.PROBE):
        doc = run.artifact(host, slurm.PROBE)
        if doc is None:
            continue
        cfg = (doc.get("facts") or {}).get("config") or {}
        out += [Heading(3, "Slurm"),
                Paragraph("From %s, through the user's account: Slurm %s, cluster %s. Status %s%s." % (
                    host, cfg.get("SLURM_VERSION") or "?", cfg.get("ClusterName") or "?", doc["status"],
                    ": %s" % doc["reason"] if doc.get("reason") else ""))]
        if doc["status"] == "skipped":
            continue
        out += tests_table(doc) + latency_table(doc, latency_lines(run)) + array_table(doc) + gpu_table(doc)
        out += placement_part(doc)
        out += accounting_part(doc)
    return out


def blocks(run, rows, report_dir):
    parts = slurm_part(run) + kubernetes.blocks(run, rows, report_dir)
    return [Heading(2, "Orchestration")] + parts if parts else []


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
