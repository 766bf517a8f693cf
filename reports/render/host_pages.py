"""Fleet-sized reports: one page per host, and what the summary page lists.

A 1,000-node audit has ~400,000 check rows; listed on one page they made a 97 MB report.html that a browser cannot
open, and 54 MB of report.md. So:
- every host has its own page, ``report/hosts/<host>.html``: every row of that host, with the status filters
  (small: a host's few hundred rows), linked from the hosts table of report.html (sortable, filterable);
- report.html and report.md list every row up to FLEET_HOSTS hosts; above, only the rows that need attention
  (fail, error, warn), at most ATTENTION_LIMIT of them, worst first, and say where the rest is (the hosts' pages,
  checks.csv, junit.xml).

Rows are written here with html.escape, not through Jinja2 (a template call per cell was 14 s of a 1,000-node
build); every value is escaped, so report.html takes the result as markup.
"""

import hashlib
import html
import os
import re

from reports.rate import WORST_ORDER

STATUSES = ("pass", "warn", "fail", "error", "skip")
# Worst first, as the by-check table ranks them (rate.WORST_ORDER): the attention rows and a host's worst status.
SEVERITY = {status: rank for rank, status in enumerate(WORST_ORDER)}
FLEET_HOSTS = 64
ATTENTION_LIMIT = 2000
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
HOSTS_DIR = "hosts"


def page_name(host):
    """hosts/<host>.html. An inventory name is not always a safe file name: one with anything but letters, digits,
    dot, dash and underscore has those replaced and 8 characters of its digest added, so two hosts never share a
    page."""
    host = str(host)
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", host).lstrip(".")
    if safe != host or not safe:
        safe = "%s-%s" % (safe, hashlib.sha1(host.encode()).hexdigest()[:8])
    return "%s/%s.html" % (HOSTS_DIR, safe)


def shown_rows(rows, n_hosts):
    """(the rows the summary lists, a note saying what was left out or None)."""
    if n_hosts <= FLEET_HOSTS:
        return rows, None
    attention = sorted((r for r in rows if r["status"] in ("fail", "error", "warn")),
                       key=lambda r: (SEVERITY[r["status"]], r["check_id"], r["host"]))
    shown = attention[:ATTENTION_LIMIT]
    note = ("%d hosts: listed here are the rows that need attention (fail, error, warn), %d of %d%s; every row of a "
            "host is on its page (hosts/<host>.html, linked from the hosts table), and all %d rows are in checks.csv "
            "and junit.xml" % (n_hosts, len(shown), len(attention), ", worst first" if len(shown) < len(attention)
                               else "", len(rows)))
    return shown, note


def host_summary(rows, hosts):
    """Per host: {host, page, worst, counts}, in inventory order; analyst rows belong to no host."""
    counts = {h: dict.fromkeys(STATUSES, 0) for h in hosts}
    for r in rows:
        if r.get("evidence") != "analyst" and r["host"] in counts:
            counts[r["host"]][r["status"]] += 1
    out = []
    for h in hosts:
        c = counts[h]
        worst = next((s for s in WORST_ORDER if c[s]), "skip")
        out.append({"host": h, "page": page_name(h), "worst": worst, "counts": c})
    return out


def _e(value, escape=html.escape):
    if value is None:
        return ""
    return escape(value if value.__class__ is str else str(value))  # quote=True is html.escape's default


def rows_html(rows, host_column=True):
    """The <tr> lines of a checks table (the columns of checks.html.j2), every value escaped."""
    out = []
    for r in rows:
        st = r["status"]
        host = '<span class="tag-analyst">analyst</span>' if r.get("evidence") == "analyst" else _e(r["host"])
        out.append('<tr class="row-%s"><td><code>%s</code></td>%s<td>%s</td><td class="st st-%s">%s</td><td>%s</td>'
                   '<td>%s</td><td>%s</td><td>%s</td></tr>' % (
                       st, _e(r["check_id"]), "<td>%s</td>" % host if host_column else "", _e(r["subject"]), st, st,
                       _e(r["observed"]), _e(r["expected"]), _e(r["reason"]),
                       _e(r.get("remediation")) if st in ("fail", "error", "warn") else ""))
    return "\n".join(out)


def _asset(name):
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as fh:
        return fh.read()


def write_host_pages(report_dir, rows, hosts, title):
    """report/hosts/<host>.html for every host: its rows, with the status filters of report.html."""
    by_host = {h: [] for h in hosts}
    for r in rows:
        if r.get("evidence") != "analyst" and r["host"] in by_host:
            by_host[r["host"]].append(r)
    os.makedirs(os.path.join(report_dir, HOSTS_DIR), exist_ok=True)
    css, js = _asset("report.css"), _asset("report.js")
    for host, host_rows in by_host.items():
        counts = dict.fromkeys(STATUSES, 0)
        for r in host_rows:
            counts[r["status"]] += 1
        buttons = "".join('<button type="button" data-status="%s">%s (%d)</button>' % (s, s, counts[s])
                          for s in ("fail", "error", "warn", "skip", "pass") if counts[s])
        page = (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            'content="width=device-width, initial-scale=1"><title>%s: %s</title><style>\n%s</style></head><body><main>'
            '\n<p class="meta"><a href="../report.html">%s</a></p><h1>%s</h1>\n'
            '<div class="filters"><button type="button" class="on" data-status="">all (%d)</button>%s</div>\n'
            '<div class="tw"><table class="checks sortable" id="check-rows"><thead><tr><th>check</th><th>subject</th>'
            '<th>status</th><th>observed</th><th>expected</th><th>reason</th><th>remediation</th></tr></thead>'
            '<tbody>\n%s\n</tbody></table></div>\n</main><script>\n%s</script></body></html>\n' % (
                _e(host), _e(title), css, _e(title), _e(host), len(host_rows), buttons,
                rows_html(host_rows, host_column=False), js))
        with open(os.path.join(report_dir, page_name(host)), "w", encoding="utf-8") as fh:
            fh.write(page)
