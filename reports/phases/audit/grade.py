"""Grading of the audit: every rubric.d/audit.yml check, for every host, from the audit artifact's raw facts.

A check's `rule` is the function of that name in the module of its area, the id's second part:
audit.sw.cuda_toolkit -> software.cuda_toolkit. Two check kinds, registered by reports/grading/kinds.py:
  audit          one row per host from a @host_rule fn(view, check); `applies` lists conditions (no GPU, no RDMA,
                 no Slurm ...) that turn the check into a skip with that reason; a source the rule needs that was
                 missing / not permitted / failed on the node becomes skip or error with the node's own reason.
  audit_cluster  rows for every host from a @cluster_rule fn(check, run, hosts) (one GPU model across the
                 cluster, and the consistency view: facts compared across hosts, odd ones out named).

Every threshold, expected value and version minimum comes from the check entry or from reports/data
(minimum_versions.yml, xid.yml, gpus.yml); nothing here is specific to one cluster.
"""

from reports.grading import make_row
from reports.phases.audit import consistency, gpu, network, scheduler, security, software, storage, system
from reports.phases.audit.common import CONDITIONS, Error, Skip, graded_view

# The id's second part (audit.<area>.<name>) -> the module that holds the area's rules.
AREAS = {"gpu": gpu, "net": network, "storage": storage, "sw": software, "sec": security, "slurm": scheduler,
         "k8s": scheduler, "health": system, "hw": system, "cpu": system, "kernel": system, "consistency": consistency}
CATEGORIES = {"security", "lifecycle", "orchestration", "storage", "networking", "reliability", "monitoring",
              "compute", "consistency"}


def resolve(check):
    """The rule function of a check: `rule` looked up in its area's module, marked for the check's kind."""
    area = check["id"].split(".")[1] if check["id"].count(".") >= 2 else None
    module = AREAS.get(area)
    if module is None:
        raise ValueError("check %s: no audit area %r (known: %s)" % (check["id"], area, ", ".join(sorted(AREAS))))
    fn = getattr(module, check.get("rule") or "", None)
    if getattr(fn, "audit_kind", None) != check["kind"]:
        raise ValueError("check %s: rule %r is no rule of kind %s in %s" % (check["id"], check.get("rule"),
                                                                           check["kind"], module.__name__))
    return fn


def grade_host(check, run, host):
    """Kind `audit`: one row for this host."""
    rule = resolve(check)
    v, row = graded_view(check, run, host)
    if row:
        return [row]
    try:
        for cond in check.get("applies", []):
            why = CONDITIONS[cond](v)
            if why:
                return [make_row(check, host, "skip", reason=why)]
        if check.get("needs"):
            v.need(*check["needs"])
        status, observed, expected, reason = rule(v, check)
    except Skip as exc:
        return [make_row(check, host, "skip", reason=str(exc))]
    except Error as exc:
        return [make_row(check, host, "error", reason=str(exc))]
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as exc:
        # A fact in a shape the rule did not expect: shown as an error of this check, never a lost report.
        return [make_row(check, host, "error", reason="cannot grade: %s: %s" % (type(exc).__name__, exc))]
    return [make_row(check, host, status, observed, expected, reason)]


def grade_cluster(check, run, hosts):
    """Kind `audit_cluster`: rows for every host from all hosts' facts."""
    return resolve(check)(check, run, hosts)


def validate_rubric(checks):
    """Problems with audit rubric entries (tests and `reports` call it): unresolved rules, unknown conditions,
    categories, severities and minimum_versions.yml entries."""
    problems = []
    for c in checks:
        if c.get("kind") not in ("audit", "audit_cluster"):
            continue
        for field in ("id", "category", "title", "kind", "severity", "remediation", "source"):
            if not c.get(field):
                problems.append("%s: no %s" % (c.get("id"), field))
        if c.get("category") not in CATEGORIES:
            problems.append("%s: category %r" % (c.get("id"), c.get("category")))
        if c.get("severity") not in ("critical", "major", "minor", "info"):
            problems.append("%s: severity %r" % (c.get("id"), c.get("severity")))
        try:
            resolve(c)
        except ValueError as exc:
            problems.append(str(exc))
        for cond in c.get("applies", []):
            if cond not in CONDITIONS:
                problems.append("%s: unknown condition %r" % (c.get("id"), cond))
        if "minimum" in c and not isinstance(software.minimums().get(c["minimum"]), dict):
            problems.append("%s: minimum %r is not an entry of minimum_versions.yml" % (c.get("id"), c["minimum"]))
    return problems


# Registered by reports.grading.kinds.register_phase_kinds: PER_HOST fn(check, run, host) -> rows,
# CLUSTER fn(check, run, hosts) -> rows.
PER_HOST = {"audit": grade_host}
CLUSTER = {"audit_cluster": grade_cluster}
