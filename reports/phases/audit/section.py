"""Report section of the audit: every host's checks at a glance, the findings (fail and error) with their hosts
and remediation, drift between hosts, the security minimums table used (date and age), the NICs and storage tiers
found on each host, the GPUs' module slots, MIG, virtualization and nearest NICs, what the node collector could
not read (tools missing, not permitted), and the reference CLI's audit beside ours where one was handed in
(RUN/reference/cmax/<host>.txt, reports/reference_cmax.py)."""

from collections import Counter, defaultdict

from reports import reference_cmax
from reports.phases.audit import common, gpu_layout, network, software, storage
from reports.render import markdown
from reports.render.blocks import Heading, Paragraph, Table

ORDER = 20
STATUSES = ("pass", "warn", "fail", "error", "skip")
SEVERITY_ORDER = {"critical": 0, "major": 1, "minor": 2, "info": 3}
# The check whose rate thresholds (compute_roce_min_gbps, storage_min_gbps) sort NICs into roles, here as in grading.


def _hosts_text(hosts, all_hosts):
    hosts = sorted(set(hosts))
    if len(hosts) == len(all_hosts) and len(hosts) > 1:
        return "all %d hosts" % len(hosts)
    return ", ".join(hosts[:6]) + (" … (+%d)" % (len(hosts) - 6) if len(hosts) > 6 else "")


def summary_table(rows, hosts):
    per = defaultdict(Counter)
    ids = defaultdict(set)
    for r in rows:
        per[r["host"]][r["status"]] += 1
        ids[r["host"]].add(r["check_id"])
    return Table(["host", "checks"] + list(STATUSES),
                 [[h, len(ids[h])] + [per[h].get(s, 0) for s in STATUSES] for h in hosts])


def category_table(rows):
    per = defaultdict(Counter)
    for r in rows:
        per[r["category"]][r["status"]] += 1
    return Table(["category"] + list(STATUSES), [[c] + [per[c].get(s, 0) for s in STATUSES] for c in sorted(per)])


def findings_table(rows, hosts):
    """Fail and error rows, one line per check: which hosts, what was seen, what to do."""
    by = defaultdict(list)
    for r in rows:
        if r["status"] in ("fail", "error") and r["category"] != "consistency":
            by[r["check_id"]].append(r)
    out = []
    for check_id, items in sorted(by.items(), key=lambda kv: (SEVERITY_ORDER.get(kv[1][0]["severity"], 9), kv[0])):
        first = items[0]
        out.append([first["severity"], check_id, first["status"].upper(),
                    _hosts_text([r["host"] for r in items], hosts), first["observed"] or first["reason"],
                    first["remediation"]])
    if not out:
        return Paragraph("No failed or errored audit check.")
    return Table(["severity", "check", "status", "hosts", "observed (first host)", "remediation"], out)


def drift_table(rows):
    out = []
    for r in sorted(rows, key=lambda r: (r["check_id"], r["host"])):
        if r["category"] == "consistency" and r["status"] == "warn" and r["check_id"].startswith("audit."):
            out.append([r["title"], r["host"], r["observed"], r["reason"]])
    if not out:
        return Paragraph("No drift: every compared fact is the same on most hosts.")
    return Table(["fact", "odd host", "its value", "why"], out)


def minimums_note(run):
    table = software.minimums()
    started = run.meta.get("started_at")
    age = ""
    if started:
        from datetime import datetime  # noqa: PLC0415 - only for this line

        try:
            when = datetime.fromisoformat(str(started).replace("Z", "+00:00")).date()
            tdate = datetime.fromisoformat(str(table["table_date"])).date()
            age = ", %d days old at this run" % (when - tdate).days
        except ValueError:
            age = ""
    return Paragraph("Security minimums: %s, dated %s%s (reports/data/minimum_versions.yml)." % (
        table.get("source", "?"), table["table_date"], age))


def inventory_tables(run, hosts):
    thresholds = network.nic_role_thresholds()
    nics, tiers, collector = [], [], []
    for host in hosts:
        doc = run.artifact(host, common.PROBE)
        if not doc or not doc.get("facts"):
            continue
        v = common.View(run, host, doc)
        roles = defaultdict(list)
        for n in network.classify_nics(v, thresholds):
            roles[n["role"]].append("%s%s" % (n["name"], " (%gG %s)" % (n["rate_gbps"], n["link"]) if n["rate_gbps"]
                                              else ""))
        nics.append([host] + [", ".join(roles.get(r, [])[:8]) for r in ("compute", "storage", "frontend", "other")])
        mounts = (v.sec("storage").get("mounts") or [])
        tier_list = sorted({"%s %s" % (storage.tier_of(m), m["target"]) for m in mounts
                            if not m["target"].startswith(("/dev", "/run", "/sys", "/proc"))})
        tiers.append([host, "; ".join(tier_list[:8]) + (" …" if len(tier_list) > 8 else "")])
        sources = v.sources
        missing = sorted(k.split(":")[-1] for k, s in sources.items() if s.get("status") == "missing")
        denied = sorted(k for k, s in sources.items() if s.get("status") == "not_permitted")
        failed = sorted(k for k, s in sources.items() if s.get("status") in ("error", "timeout"))
        collector.append([host, (doc.get("facts", {}).get("collector") or {}).get("wall_s"), len(sources),
                          ", ".join(missing[:10]) + (" …" if len(missing) > 10 else ""), ", ".join(denied),
                          ", ".join(failed)])
    return (Table(["host", "compute fabric", "storage", "frontend", "other"], nics),
            Table(["host", "storage tiers"], tiers),
            Table(["host", "collector s", "sources", "tools missing", "not permitted", "failed"], collector))


def reference_blocks(run, rows):
    """The cmax audits handed in with the run, each beside our rows of its host."""
    out = []
    for host, path in reference_cmax.handed_in(run.run_dir).items():
        out.append(Heading(3, "Reference CLI (cmax audit) beside ours: %s" % host))
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                report = reference_cmax.read_report(fh.read(), path)
        except (OSError, reference_cmax.ReportError) as exc:
            out.append(Paragraph("Not compared: %s" % exc))
            continue
        lines = reference_cmax.compare(report, rows, host)
        out.append(Paragraph("%d cmax checks: %s. Documented differences are in reports/data/reference_cmax.yml."
                             % (len(lines), reference_cmax.summary(lines))))
        out.append(Table(["cmax check", "cmax", "ours", "verdict", "why"], reference_cmax.table_rows(lines)))
    return out


def blocks(run, rows, report_dir):
    every_row, rows = rows, [r for r in rows if r["check_id"].startswith("audit.")]
    if not rows:
        return []
    hosts = list(run.hosts)
    nics, tiers, collector = inventory_tables(run, hosts)
    docs = {h: run.artifact(h, common.PROBE) for h in hosts}
    nvidia = {h: (d.get("facts") or {}).get("gpu_nvidia") or {} for h, d in docs.items() if d}
    return [
        Heading(2, "Audit"),
        Paragraph("Read-only survey of every host; every check is shown for every host (skip rows say why)."),
        summary_table(rows, hosts),
        category_table(rows),
        Heading(3, "Findings"), findings_table(rows, hosts),
        Heading(3, "Drift between hosts"), drift_table(rows),
        Heading(3, "Security minimums"), minimums_note(run),
        Heading(3, "Network interfaces"), nics,
        Heading(3, "GPUs: slots, MIG, virtualization and nearest NICs"), *gpu_layout.tables(nvidia),
        Heading(3, "Storage tiers"), tiers,
        Heading(3, "Node collector"), collector,
        *reference_blocks(run, every_row),
    ]


def render(run, rows, report_dir):
    """The section as markdown."""
    return markdown.render(blocks(run, rows, report_dir))
