"""Grading of the Slurm half of the orchestration phase (probe `slurm_jobs`): pure functions of a run.

The probe runs once, from one host, and records what Slurm did for the user's jobs: times (results), and per test
its status and what it saw (facts.tests, facts.gres, facts.exclusive, facts.topology, facts.accounting,
facts.refused_account, facts.left_in_queue; probes/orchestration/slurm_jobs.py). Here it is judged: latencies
against the rubric's thresholds, whether GPUs, exclusivity, placement, accounting and enforcement behaved, and
whether anything was left in the queue.

Check kinds (rubric.d/orchestration.yml), all cluster kinds with rows for the host that ran the probe (the
generic one_host_artifact kind, in reports/grading/one_host.py, says whether it ran):
  slurm_latency       the median of a metric (check `metric`) against pass_max / warn_max seconds; a failed test
                      (check `test`) fails it with the probe's reason. A time across the compute node's clock and the
                      probe host's (check `uncertainty`: each sample's uncertainty): judged only where the median's
                      uncertainty stays inside one band (else skip), an error where a sample is negative beyond its
                      uncertainty, a skip where the artifact holds no uncertainty (its times mix two clocks)
A test Slurm ran nothing for (its allocation refused, its job pending past the timeout: "ran": false, or srun's,
salloc's or sbatch's refusal in the reason) is an error row with Slurm's reason (nothing measured, not scored); a
test whose job ran and failed, or saw the wrong thing, fails.
  slurm_arrays        job arrays accepted and every task completed; the controller's submit RPCs of the array
                      against the loop's
  slurm_gpus          every GPU request saw exactly the GPUs it asked for
  slurm_exclusive     an --exclusive job got every CPU of its node, and a second job on that node was refused
  slurm_topology      every two-node job inside one leaf switch, unless no leaf had two idle nodes when it was placed
  slurm_accounting    slurmdbd accounting, every submitted job in sacct with its TRES, associations, QoS, fairshare
  slurm_enforced      a job charged to a foreign account was refused
  slurm_cleanup       no job of the run left in the queue
"""

import statistics

from probes.orchestration.slurm_jobs import refused_reason
from reports.grading import one_host
from reports.grading.preconditions import ungradable
from reports.grading.rows import make_row
from reports.grading.select import find_artifact
from reports.shown import shown

PROBE = "slurm_jobs"


def rows_on_runner(check, run, hosts, judge):
    """judge(doc) -> [(status, observed, expected, reason, subject)] for the host that ran the probe; the usual skip
    (or error) rows where it cannot be graded, and on every host when no host ran it."""
    out = []
    for host in one_host.runners(run, check["probe"]) or hosts:
        pre = ungradable(check, run, host, error_is_final=True)
        if pre:
            out.append(pre)
            continue
        doc = find_artifact(run, host, check["probe"])
        for status, observed, expected, reason, subject in judge(doc):
            out.append(make_row(check, host, status, observed, expected, reason, subject))
    return out


def values(doc, metric, **labels):
    return [r["value"] for r in doc["results"] if r["metric"] == metric
            and all(r["labels"].get(k) == v for k, v in labels.items())]




def test_state(doc, test):
    """(status, reason) of one of the probe's tests: ok, error, skipped, or missing when it did not get that far."""
    t = (doc.get("facts") or {}).get("tests", {}).get(test)
    return (t["status"], t.get("reason")) if t else ("missing", "the probe did not get to the %s test" % test)


def could_not_run(doc, test):
    """Whether the probe's test errored because Slurm ran nothing for it (its allocation refused, its job pending
    past the timeout): the probe says so ("ran": false); an older artifact's reason is Slurm's refusal itself."""
    t = (doc.get("facts") or {}).get("tests", {}).get(test) or {}
    if "ran" in t:
        return t["ran"] is False
    # an artifact from before the probe said so: Slurm's refusal in the reason, unless it refused the tested feature
    return refused_reason(t.get("reason")) is not None


def _not_ok(doc, test):
    """The row of a test that is not ok: skip (with the probe's reason), error when Slurm ran nothing for it (nothing
    was measured: not scored), fail when its job ran and failed or the probe stopped it."""
    status, reason = test_state(doc, test)
    if status == "skipped":
        return [("skip", None, None, reason, "")]
    if status == "error" and could_not_run(doc, test):
        return [("error", "%s test could not run" % test, "it runs", reason, "")]
    return [("fail", "%s test failed" % test, "it runs", reason, "")]


def _band(value, pass_max, warn_max):
    return "pass" if value <= pass_max else "warn" if value <= warn_max else "fail"


def samples(doc, metric, uncertainty):
    """[(value, its uncertainty or None, labels)] of a metric, each with the result of `uncertainty` that has the
    same labels (the same sample)."""
    unc = {tuple(sorted(r["labels"].items())): r["value"] for r in doc["results"] if r["metric"] == uncertainty}
    return [(r["value"], unc.get(tuple(sorted(r["labels"].items()))), r["labels"])
            for r in doc["results"] if r["metric"] == metric]


def _clock_text(doc, node):
    clock = ((doc.get("facts") or {}).get("node_clocks") or {}).get(node) or {}
    if clock.get("offset_s") is None:
        return "the compute node %s's clock and %s's" % (node, doc.get("host"))
    return "the compute node %s's clock (%+.3f s ± %.3f s against %s's) and %s's" % (
        node, clock["offset_s"], clock["uncertainty_s"], doc.get("host"), doc.get("host"))


def two_clock_verdict(doc, metric, uncertainty, pass_max, warn_max, observed, expected):
    """The row of a time taken across the compute node's clock and this host's (check `uncertainty`: the metric of
    each sample's uncertainty, the node's clock reading's and the polls'): an error where a sample is negative beyond
    its uncertainty (the clocks were misread, or one moved during the run), a skip where the artifact holds no
    uncertainty (written before the probe read the nodes' clocks: the times mix two clocks) or where the median's
    uncertainty spans a threshold, else the median's verdict."""
    rows = samples(doc, metric, uncertainty)
    if any(u is None for _, u, _ in rows):
        return ("skip", observed, expected, "no clock offset recorded: the artifact holds no uncertainty of %s "
                "(written before the probe read the compute nodes' clocks against %s's), so its times mix two "
                "clocks that may be seconds apart" % (metric, doc.get("host")), "")
    negative = [(v, u, labels) for v, u, labels in rows if v < -u]
    if negative:
        v, u, labels = min(negative, key=lambda x: x[0] + x[1])
        return ("error", observed, expected, "sample %s: %.3f s ± %.3f s, negative beyond its uncertainty: %s were "
                "misread, or one of them moved during the run" % (labels.get("sample"), v, u,
                                                                  _clock_text(doc, labels.get("node"))), "")
    med = statistics.median([v for v, _, _ in rows])
    unc = max(u for _, u, _ in rows)
    low, high = _band(med - unc, pass_max, warn_max), _band(med + unc, pass_max, warn_max)
    observed += " (± %.3g s)" % unc
    if low != high:
        return ("skip", observed, expected, "the median's uncertainty (± %.3g s: the compute nodes' clocks against "
                "%s's, and the polls) spans the %s/%s threshold: not judged" % (unc, doc.get("host"), low, high), "")
    return (low, observed, expected, None, "")


def grade_latency(check, run, hosts):
    """The median of check['metric'] (seconds), pass up to pass_max, warn up to warn_max. A metric across two clocks
    (check `uncertainty`: the metric holding each sample's uncertainty) is judged with it (two_clock_verdict)."""
    metric, pass_max, warn_max = check["metric"], float(check["pass_max"]), float(check["warn_max"])
    expected = "median <= %g s (warn up to %g s)" % (pass_max, warn_max)

    def judge(doc):
        status, reason = test_state(doc, check["test"])
        vals = values(doc, metric)
        if status != "ok" and not vals:
            return _not_ok(doc, check["test"])
        if not vals:
            note = (doc["facts"]["tests"][check["test"]].get("note")
                    or "the probe recorded no %s" % metric)
            return [("skip", None, None, note, "")]
        med = statistics.median(vals)
        # the median judged, and the max beside it, on their side of each line (reports/shown.py: 5.004 s is not "5"
        # beside "median <= 5 s")
        lines = (pass_max, warn_max)
        observed = "median %s s, max %s s over %d" % (shown(med, lines, significant=3),
                                                      shown(max(vals), lines, significant=3), len(vals))
        if check.get("uncertainty"):
            row = two_clock_verdict(doc, metric, check["uncertainty"], pass_max, warn_max, observed, expected)
            if row[0] in ("error", "skip") or status != "error":
                return [row]
        if status == "error":  # some samples were measured, then a job failed or hung: that is the finding
            return [("fail", observed, expected, reason, "")]
        return [(_band(med, pass_max, warn_max), observed, expected, None, "")]
    return rows_on_runner(check, run, hosts, judge)


def array_summary(doc):
    """{mode: {metric: value}} of the array-versus-loop test."""
    out = {}
    for r in doc["results"]:
        mode = r["labels"].get("mode")
        if mode in ("array", "loop"):
            out.setdefault(mode, {"jobs": r["labels"].get("jobs")})[r["metric"]] = r["value"]
    return out


def grade_arrays(check, run, hosts):
    expected = "an array of N is accepted and completes, with fewer submit RPCs than N sbatch calls"

    def judge(doc):
        status, reason = test_state(doc, "array_vs_loop")
        summ = array_summary(doc)
        if status != "ok":
            return _not_ok(doc, "array_vs_loop")
        arr, loop = summ.get("array", {}), summ.get("loop", {})
        observed = "%s jobs: array submitted in %.3g s, done in %.3g s; loop %.3g s, %.3g s" % (
            arr.get("jobs"), arr.get("submit_s", float("nan")), arr.get("done_s", float("nan")),
            loop.get("submit_s", float("nan")), loop.get("done_s", float("nan")))
        if "submit_rpcs" in arr and "submit_rpcs" in loop:
            observed += "; submit RPCs %d against %d" % (arr["submit_rpcs"], loop["submit_rpcs"])
            if arr["submit_rpcs"] >= loop["submit_rpcs"] and loop["submit_rpcs"] > 1:
                return [("warn", observed, expected, "the array cost the controller as many submit RPCs", "")]
            return [("pass", observed, expected, None, "")]
        note = doc["facts"]["tests"]["array_vs_loop"].get("note")
        return [("pass", observed, expected, note, "")]
    return rows_on_runner(check, run, hosts, judge)


def grade_gpus(check, run, hosts):
    def judge(doc):
        status, reason = test_state(doc, "gres")
        gres = (doc.get("facts") or {}).get("gres") or {}
        if status == "skipped":
            return _not_ok(doc, "gres")
        out = []
        for req in gres.get("requests") or []:
            k = req["requested"]
            expected = "%d GPU%s visible" % (k, "s" if k > 1 else "")
            refused = req.get("refused") or refused_reason(req.get("error"))
            if req.get("rc") != 0 and refused:  # never allocated: no GPU was given to check
                why = req["refused"] if req.get("refused") else req.get("error")
                out.append(("error", "not allocated", expected, "Slurm did not allocate it: %s" % why,
                            req["flag"]))
                continue
            if req.get("rc") != 0:  # allocated, and the step failed on the node
                out.append(("fail", "the step failed on %s" % (req.get("node") or "its node"), expected,
                            req.get("error"), req["flag"]))
                continue
            seen = [x for x in (req.get("cuda_visible_devices") or "").split(",") if x.strip()]
            smi, mig = req.get("nvidia_smi_gpus"), req.get("nvidia_smi_mig")
            observed = "CUDA_VISIBLE_DEVICES=%s on %s" % (req.get("cuda_visible_devices"), req.get("node"))
            if smi is not None:
                observed += ", nvidia-smi lists %d" % smi + (" (%d MIG devices)" % mig if mig else "")
            # MIG devices given (gpu:<profile>:k) are k under fewer GPUs; a whole GPU in MIG mode is one with its
            # devices under it: either count may be the request's
            good = len(seen) == k and (smi is None or smi == k or bool(mig) and mig == k)
            out.append(("pass" if good else "fail", observed, expected, None, req["flag"]))
        if not out:
            return _not_ok(doc, "gres")
        return out
    return rows_on_runner(check, run, hosts, judge)


def grade_exclusive(check, run, hosts):
    expected = "every CPU of the node, and a second job on it refused"

    def judge(doc):
        status, reason = test_state(doc, "exclusive")
        ex = (doc.get("facts") or {}).get("exclusive")
        if status != "ok" or not ex:
            return _not_ok(doc, "exclusive")
        observed = "%s of %s CPUs on %s; second job %s" % (
            ex.get("job_cpus"), ex.get("node_cpus"), ex.get("node"),
            "refused" if ex.get("second_job_refused") else "ran beside it")
        good = ex.get("job_cpus") is not None and ex.get("job_cpus") == ex.get("node_cpus") \
            and ex.get("second_job_refused")
        return [("pass" if good else "fail", observed, expected, None if good else ex.get("second_job_said"), "")]
    return rows_on_runner(check, run, hosts, judge)


def leaf_of(switches):
    """node -> its lowest-level switch (the leaf), from the probe's parsed `scontrol show topology`."""
    out = {}
    for sw in sorted(switches, key=lambda s: -int(s.get("level") or 0)):
        for node in sw.get("node_names") or []:
            out[node] = sw["name"]  # lower levels overwrite higher ones
    return out


def placement_verdict(placement, leaves):
    """(ok, text): a two-node job in one leaf, or across leaves when no leaf had two of the idle nodes."""
    nodes = placement["nodes"]
    used = sorted({leaves.get(n, "?") for n in nodes})
    if len(used) == 1 and "?" not in used:
        return True, "%s in %s" % (",".join(nodes), used[0])
    idle_per_leaf = {}
    for n in placement.get("idle_before") or []:
        idle_per_leaf.setdefault(leaves.get(n), []).append(n)
    could = sorted(leaf for leaf, ns in idle_per_leaf.items() if leaf and len(ns) >= 2)
    text = "%s across %s" % (",".join(nodes), "+".join(used))
    if could:
        return False, text + " while %s had two idle nodes" % could[0]
    return True, text + " (no leaf had two idle nodes)"


def grade_topology(check, run, hosts):
    expected = "each two-node job inside one leaf switch when one had room"

    def judge(doc):
        status, reason = test_state(doc, "topology")
        topo = (doc.get("facts") or {}).get("topology")
        if status != "ok" or not topo:
            return _not_ok(doc, "topology")
        leaves = leaf_of(topo["switches"])
        verdicts = [placement_verdict(p, leaves) for p in topo["placements"]]
        observed = "; ".join(text for _, text in verdicts)
        return [("pass" if all(ok for ok, _ in verdicts) else "fail", observed, expected, None, "")]
    return rows_on_runner(check, run, hosts, judge)


def accounting_findings(acct):
    """What is missing from the cluster's accounting, as short texts (empty: all there)."""
    missing = []
    if "slurmdbd" not in (acct.get("storage_type") or ""):
        missing.append("no slurmdbd accounting (AccountingStorageType=%s)" % acct.get("storage_type"))
    if acct.get("sacct_error"):
        missing.append("sacct: %s" % acct["sacct_error"])
    jobs = acct.get("jobs") or []
    absent = [j["JobIDRaw"] for j in jobs if not j.get("in_sacct")]
    if absent and not acct.get("sacct_error"):
        missing.append("%d of %d jobs not in sacct (%s)" % (len(absent), len(jobs), ",".join(absent[:5])))
    # a job the probe cancelled before Slurm started it (the exclusive test's job given up pending on a busy
    # partition, the refused account's job while held) has no allocation to account: its empty AllocTRES is no
    # missing TRES. Any other job without one is (a slurmdbd that lost the start records shows them PENDING).
    no_tres = [j["JobIDRaw"] for j in jobs if j.get("in_sacct") and not j.get("never_started")
               and "cpu=" not in (j.get("AllocTRES") or "")]
    if no_tres:
        missing.append("jobs without allocated TRES in sacct (%s)" % ",".join(no_tres[:5]))
    gpu_jobs = [j for j in jobs if j.get("test") == "gres" and j.get("in_sacct")]
    if gpu_jobs and not all("gres/gpu=" in (j.get("AllocTRES") or "") for j in gpu_jobs):
        missing.append("GPU jobs without gres/gpu in their TRES (AccountingStorageTRES lacks gres/gpu)")
    if not acct.get("associations"):
        missing.append("no association for the user%s" % (
            " (%s)" % acct["associations_error"] if acct.get("associations_error") else ""))
    if not acct.get("qos"):
        missing.append("no QoS%s" % (" (%s)" % acct["qos_error"] if acct.get("qos_error") else ""))
    enforce = acct.get("enforce") or ""
    if "associations" not in enforce:
        missing.append("associations not enforced (AccountingStorageEnforce=%s)" % (enforce or "none"))
    if (acct.get("priority_type") or "") != "priority/multifactor":
        missing.append("no fairshare (PriorityType=%s)" % acct.get("priority_type"))
    return missing


def grade_accounting(check, run, hosts):
    expected = ("slurmdbd accounting with every job and its TRES, enforced associations, QoS and fairshare "
                "(multifactor priority)")

    def judge(doc):
        status, reason = test_state(doc, "accounting")
        acct = (doc.get("facts") or {}).get("accounting")
        if status != "ok" or not acct:
            return _not_ok(doc, "accounting")
        missing = accounting_findings(acct)
        jobs = acct.get("jobs") or []
        observed = "%d of %d jobs in sacct; %d associations, %d QoS; %s; %s" % (
            sum(1 for j in jobs if j.get("in_sacct")), len(jobs), len(acct.get("associations") or []),
            len(acct.get("qos") or []), acct.get("enforce") or "nothing enforced", acct.get("priority_type"))
        return [("fail" if missing else "pass", observed, expected, "; ".join(missing) or None, "")]
    return rows_on_runner(check, run, hosts, judge)


def grade_enforced(check, run, hosts):
    expected = "refused"

    def judge(doc):
        status, reason = test_state(doc, "refused_account")
        ref = (doc.get("facts") or {}).get("refused_account")
        if status != "ok" or not ref:
            return _not_ok(doc, "refused_account")
        observed = "account %s: %s" % (ref["account"], "refused" if ref["refused"] else "accepted")
        return [("pass" if ref["refused"] else "fail", observed, expected, ref.get("said"), "")]
    return rows_on_runner(check, run, hosts, judge)


def grade_cleanup(check, run, hosts):
    expected = "no job of the run left in the queue"

    def judge(doc):
        facts = doc.get("facts") or {}
        left = facts.get("left_in_queue")
        if left is None:
            return [("skip", None, None, "the probe recorded no queue check", "")]
        observed = "%d jobs submitted, %d left" % (len(facts.get("submitted") or []), len(left))
        return [("fail" if left else "pass", observed, expected, "; ".join(left[:5]) or None, "")]
    return rows_on_runner(check, run, hosts, judge)


CLUSTER = {"slurm_latency": grade_latency, "slurm_arrays": grade_arrays,
           "slurm_gpus": grade_gpus, "slurm_exclusive": grade_exclusive, "slurm_topology": grade_topology,
           "slurm_accounting": grade_accounting, "slurm_enforced": grade_enforced, "slurm_cleanup": grade_cleanup}
