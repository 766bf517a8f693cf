"""report.html: one self-contained file (styles, plots as base64 PNG, a few lines of script), readable on screen
and printable. It renders the same parts as report.md (render_md.render_parts): the rating and the checks are
drawn from their data, every other part (inventory, consistency, phase sections) is its markdown converted here,
so a section is written once, as markdown, and appears in both reports.

The converter covers the markdown the renderers write: headings, paragraphs, pipe tables (with `\\|` escapes),
bullet and numbered lists, block quotes, fenced code, images (embedded from the report directory; never fetched),
links, `code`, **bold** and *emphasis*.
"""

import base64
import html
import os
import re

from reports.rate import fmt_score, tier_line

TIER_COLOURS = {"Platinum": ("#dfe6ee", "#2c3e50"), "Gold": ("#f6d365", "#5a4300"), "Silver": ("#d7dbe0", "#333"),
                "Bronze": ("#e0a370", "#4a2500"), "Participation Ribbon": ("#b3d4fc", "#0b3d78"),
                "Underperforming": ("#f4b6b6", "#7a0000"), "Not rated": ("#eeeeee", "#444")}
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml",
               ".gif": "image/gif"}

CSS = """
:root { --pass:#1a7f37; --warn:#9a6700; --fail:#cf222e; --error:#8250df; --skip:#6e7781; --line:#d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color:#1f2328; margin:0;
       background:#f6f8fa; }
main { max-width: 1200px; margin: 0 auto; padding: 16px 24px 48px; background:#fff; }
h1 { font-size: 24px; margin: 8px 0 4px; } h2 { font-size: 19px; margin-top: 28px; border-bottom: 1px solid
var(--line); padding-bottom: 4px; } h3 { font-size: 16px; margin-top: 20px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 7px; text-align: left; vertical-align: top; }
th { background: #f0f3f6; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
code { background: #eff1f3; padding: 0 3px; border-radius: 3px; font-size: 12px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; border: 1px solid var(--line); }
blockquote { margin: 8px 0; padding: 6px 12px; border-left: 4px solid #bf8700; background: #fff8c5; }
img { max-width: 100%; height: auto; border: 1px solid var(--line); margin: 6px 0; }
.tier { display: inline-block; padding: 10px 18px; border-radius: 10px; font-size: 22px; font-weight: 700;
        margin: 8px 0; border: 1px solid rgba(0,0,0,.15); }
.tier small { display:block; font-size: 13px; font-weight: 400; }
.meta { color: #57606a; margin: 2px 0; }
.st { font-weight: 600; text-transform: uppercase; font-size: 12px; }
.st-pass { color: var(--pass); } .st-warn { color: var(--warn); } .st-fail { color: var(--fail); }
.st-error { color: var(--error); } .st-skip { color: var(--skip); }
tr.row-fail td { background: #ffebe9; } tr.row-error td { background: #fbefff; } tr.row-warn td { background: #fff8c5; }
.bar { background: #eaeef2; width: 120px; height: 10px; display: inline-block; vertical-align: middle;
       border-radius: 5px; overflow: hidden; } .bar > span { display:block; height:100%; background:#2da44e; }
.nm { color: var(--skip); font-style: italic; }
.analyst { background: #ddf4ff; border: 1px solid #54aeff; padding: 6px 10px; border-radius: 6px; }
.tag-analyst { background:#ddf4ff; color:#0550ae; border-radius: 4px; padding: 0 4px; font-size: 11px; }
.filters button { margin: 0 4px 6px 0; padding: 3px 10px; border: 1px solid var(--line); background: #fff;
                  border-radius: 12px; cursor: pointer; } .filters button.on { background: #0969da; color: #fff; }
.tw { overflow-x: auto; max-width: 100%; }
nav.toc { font-size: 13px; } nav.toc a { margin-right: 10px; }
table.checks.only-fail tbody tr:not(.row-fail), table.checks.only-error tbody tr:not(.row-error),
table.checks.only-warn tbody tr:not(.row-warn), table.checks.only-skip tbody tr:not(.row-skip),
table.checks.only-pass tbody tr:not(.row-pass) { display: none; }
@media print {
  body { background: #fff; font-size: 11px; } main { max-width: none; padding: 0; }
  .filters, nav.toc { display: none; } th { position: static; } .tw { overflow: visible; }
  table.checks tbody tr { display: table-row !important; }
  tr, img { page-break-inside: avoid; } h2 { page-break-after: avoid; }
}
"""

SCRIPT = """
(function () {
  var table = document.getElementById('check-rows');
  var buttons = document.querySelectorAll('.filters button');
  buttons.forEach(function (b) {
    b.addEventListener('click', function () {
      table.className = 'checks' + (b.dataset.status ? ' only-' + b.dataset.status : '');
      buttons.forEach(function (o) { o.classList.toggle('on', o === b); });
    });
  });
})();
"""


def esc(text):
    return html.escape("" if text is None else str(text), quote=True)


# ------------------------------------------------------------------------------------------------ markdown

def _image(alt, src, report_dir):
    path = os.path.join(report_dir or "", src)
    kind = IMAGE_TYPES.get(os.path.splitext(src)[1].lower())
    if (report_dir and kind and "/" not in src.replace(os.sep, "/").lstrip("./") and os.path.isfile(path)):
        with open(path, "rb") as fh:
            data = base64.b64encode(fh.read()).decode("ascii")
        return '<img alt="%s" src="data:%s;base64,%s">' % (esc(alt), kind, data)
    return '<span class="nm">[image %s not embedded: %s]</span>' % (esc(alt), esc(src))


_INLINE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)|\[([^\]]+)\]\(([^)\s]+)\)|\*\*(.+?)\*\*|(?<![\w*])\*([^*\s][^*]*?)\*")


def inline(text, report_dir=None):
    """Inline markdown to HTML; text is escaped, code spans are kept verbatim."""
    out = []
    for i, piece in enumerate(re.split(r"(`[^`]*`)", text)):
        if i % 2:
            out.append("<code>%s</code>" % esc(piece[1:-1]))
            continue
        pos = 0
        for m in _INLINE.finditer(piece):
            out.append(esc(piece[pos:m.start()]))
            if m.group(1) is not None or m.group(2) is not None:
                out.append(_image(m.group(1), m.group(2), report_dir))
            elif m.group(3) is not None:
                href = m.group(4)
                safe = href if re.match(r"^(https?:|#|[\w./-]+$)", href) else "#"
                out.append('<a href="%s">%s</a>' % (esc(safe), inline(m.group(3), report_dir)))
            elif m.group(5) is not None:
                out.append("<strong>%s</strong>" % inline(m.group(5), report_dir))
            else:
                out.append("<em>%s</em>" % inline(m.group(6), report_dir))
            pos = m.end()
        out.append(esc(piece[pos:]))
    return "".join(out)


def _cells(line):
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|") and not line.endswith("\\|"):
        line = line[:-1]
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)]


_SEP = re.compile(r"^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_NUM = re.compile(r"^[-+]?[\d.,]+(\s?[%\w/]*)?$")
STATUS_WORDS = {"pass", "warn", "fail", "error", "skip"}


def _td(cell, report_dir, tag="td"):
    low = cell.lower()
    if low in STATUS_WORDS:
        return '<%s class="st st-%s">%s</%s>' % (tag, low, esc(cell), tag)
    cls = ' class="num"' if _NUM.match(cell) and tag == "td" else ""
    return "<%s%s>%s</%s>" % (tag, cls, inline(cell, report_dir), tag)


def markdown_to_html(text, report_dir=None):
    lines = text.splitlines()
    out, para, i = [], [], 0

    def flush():
        if para:
            out.append("<p>%s</p>" % inline(" ".join(para), report_dir))
            para.clear()

    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            block = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                block.append(lines[i])
                i += 1
            out.append("<pre><code>%s</code></pre>" % esc("\n".join(block)))
            i += 1
            continue
        heading = re.match(r"^(#{1,6})\s+(.*)$", stripped)
        if heading:
            flush()
            level = len(heading.group(1))
            anchor = re.sub(r"[^a-z0-9]+", "-", heading.group(2).lower()).strip("-")
            out.append('<h%d id="%s">%s</h%d>' % (level, esc(anchor), inline(heading.group(2), report_dir), level))
            i += 1
            continue
        if stripped.startswith("|") and i + 1 < len(lines) and _SEP.match(lines[i + 1]):
            flush()
            head = _cells(stripped)
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            body = "".join("<tr>%s</tr>" % "".join(_td(c, report_dir) for c in r) for r in rows)
            out.append('<div class="tw"><table><thead><tr>%s</tr></thead><tbody>%s</tbody></table></div>' % (
                "".join(_td(c, report_dir, "th") for c in head), body))
            continue
        bullet = re.match(r"^\s*([-*]|\d+\.)\s+(.*)$", line)
        if bullet:
            flush()
            ordered = bullet.group(1)[0].isdigit()
            items = []
            while i < len(lines):
                b = re.match(r"^\s*([-*]|\d+\.)\s+(.*)$", lines[i])
                if not b or b.group(1)[0].isdigit() != ordered:
                    break
                items.append("<li>%s</li>" % inline(b.group(2), report_dir))
                i += 1
            tag = "ol" if ordered else "ul"
            out.append("<%s>%s</%s>" % (tag, "".join(items), tag))
            continue
        if stripped.startswith(">"):
            flush()
            quote = []
            while i < len(lines) and lines[i].strip().startswith(">"):
                quote.append(lines[i].strip()[1:].strip())
                i += 1
            out.append("<blockquote>%s</blockquote>" % inline(" ".join(quote), report_dir))
            continue
        if not stripped:
            flush()
        else:
            para.append(stripped)
        i += 1
    flush()
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ rating, checks

def _bar(score):
    if score is None:
        return '<span class="nm">not measured</span>'
    return '<span class="bar"><span style="width:%.0f%%"></span></span> %s' % (max(0, min(100, score)),
                                                                                fmt_score(score))


def rating_html(ratings):
    tier = ratings["tier"]
    bg, fg = TIER_COLOURS.get(tier["name"], ("#eee", "#333"))
    out = ['<section id="rating"><h2>Rating</h2>',
           '<div class="tier" id="tier" style="background:%s;color:%s">%s<small>%s</small></div>' % (
               bg, fg, esc(tier["name"]), esc(tier_line(ratings)))]
    if ratings.get("analyst", {}).get("provided"):
        a = ratings["analyst"]
        out.append('<p class="analyst"><strong>Analyst input</strong> (not measured on the cluster): %s items from '
                   '<code>%s</code> by %s, as of %s. Rows from it are tagged <span class="tag-analyst">analyst'
                   '</span>.</p>' % (esc(a["items"]), esc(a["file"]), esc(a.get("analyst") or "?"),
                                     esc(a.get("as_of") or "?")))
    out.append('<table id="categories"><thead><tr><th>category</th><th>evidence</th><th class="num">weight</th>'
               '<th>score</th><th class="num">coverage</th><th class="num">pass</th><th class="num">warn</th>'
               '<th class="num">fail</th><th class="num">error</th><th class="num">skip</th></tr></thead><tbody>')
    for c in ratings["categories"]:
        n = c["counts"]
        tag = ' <span class="tag-analyst">analyst</span>' if "analyst" in c["evidence_used"] else ""
        kind = "+".join(e for e in c["evidence_used"] if e != "analyst") or (
            "" if c["evidence_used"] else c["evidence"])
        reason = ' <span class="nm">(%s)</span>' % esc(c["reason"]) if c.get("reason") else ""
        out.append('<tr><td>%s</td><td>%s%s</td><td class="num">%g</td><td>%s%s</td><td class="num">%.0f%%</td>'
                   '%s</tr>' % (esc(c["title"]), esc(kind), tag, c["weight"], _bar(c["score"]), reason,
                                100 * c["coverage"],
                                "".join('<td class="num">%d</td>' % n[s]
                                        for s in ("pass", "warn", "fail", "error", "skip"))))
    out.append("</tbody></table>")
    gates = ratings["gates"]
    if gates:
        out.append('<h3>Gates</h3><table id="gates"><thead><tr><th>gate</th><th>caps at</th><th>state</th>'
                   '<th>why</th></tr></thead><tbody>')
        for g in gates:
            state = ('<span class="st st-fail">triggered</span>: %s' % esc(g["reason"]) if g["triggered"]
                     else '<span class="st st-pass">clear</span>')
            out.append("<tr><td><strong>%s</strong><br>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
                esc(g["id"]), esc(g["title"]), esc(g["cap"]), state, esc(g.get("why"))))
        out.append("</tbody></table>")
    out.append('<h3>Why this tier</h3><ol id="rationale">%s</ol>' % "".join(
        "<li>%s</li>" % esc(t) for t in ratings["rationale"]))
    head = ratings.get("headline") or []
    if head:
        out.append('<h3>Headline metrics among peers</h3><table id="headline"><thead><tr><th>metric</th>'
                   '<th class="num">this run</th><th class="num">peers</th><th class="num">percentile</th>'
                   '<th class="num">peer median</th><th>note</th></tr></thead><tbody>')
        for m in head:
            peers = m.get("peers") or {}
            value = '<span class="nm">not measured</span>' if m["value"] is None else "%s %s" % (
                esc("%.4g" % m["value"]), esc(m["unit"]))
            pct = peers.get("percentile")
            out.append('<tr><td>%s</td><td class="num">%s</td><td class="num">%s</td><td class="num">%s</td>'
                       '<td class="num">%s</td><td>%s</td></tr>' % (
                           esc(m["title"]), value, peers.get("n", 0), "–" if pct is None else "%.0f" % pct,
                           "–" if peers.get("median") is None else esc("%.4g" % peers["median"]),
                           esc(peers.get("reason") or "")))
        out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def checks_html(rows, ratings=None):
    out = ['<section id="checks"><h2>Checks</h2>']
    if ratings:
        out.append('<h3>By check</h3><table id="check-summary"><thead><tr><th>check</th><th>category</th>'
                   '<th>severity</th><th>worst</th><th class="num">pass</th><th class="num">warn</th>'
                   '<th class="num">fail</th><th class="num">error</th><th class="num">skip</th><th>title</th>'
                   '</tr></thead><tbody>')
        for s in ratings["checks"]:
            n = s["counts"]
            tag = ' <span class="tag-analyst">analyst</span>' if s["evidence"] == "analyst" else ""
            out.append('<tr class="row-%s"><td><code>%s</code>%s</td><td>%s</td><td>%s</td>'
                       '<td class="st st-%s">%s</td>%s<td>%s</td></tr>' % (
                           s["worst"], esc(s["check_id"]), tag, esc(s["category"]), esc(s["severity"]), s["worst"],
                           s["worst"], "".join('<td class="num">%d</td>' % n[k]
                                               for k in ("pass", "warn", "fail", "error", "skip")),
                           esc(s["title"])))
        out.append("</tbody></table>")
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    buttons = ['<button type="button" class="on" data-status="">all (%d)</button>' % len(rows)]
    buttons += ['<button type="button" data-status="%s">%s (%d)</button>' % (s, s, counts[s])
                for s in ("fail", "error", "warn", "skip", "pass") if counts.get(s)]
    out.append('<h3>Every check, every host</h3><div class="filters">%s</div>' % "".join(buttons))
    out.append('<div class="tw"><table class="checks" id="check-rows"><thead><tr><th>check</th><th>host</th>'
               '<th>subject</th><th>status</th><th>observed</th><th>expected</th><th>reason</th><th>remediation</th></tr></thead>'
               '<tbody>')
    body = []
    for r in rows:
        host = '<span class="tag-analyst">analyst</span>' if r.get("evidence") == "analyst" else esc(r["host"])
        st = r["status"]
        body.append('<tr class="row-%s"><td><code>%s</code></td><td>%s</td><td>%s</td><td class="st st-%s">%s</td>'
                    "<td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
                        st, esc(r["check_id"]), host, esc(r["subject"]), st, st, esc(r["observed"]),
                        esc(r["expected"]), esc(r["reason"]),
                        esc(r["remediation"]) if st in ("fail", "error", "warn") else ""))
    out.append("\n".join(body))
    out.append("</tbody></table></div></section>")
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ page

def render(parts, rows, ratings, report_dir=None, title="ClusterMAX assessment"):
    """The whole page. parts: render_md.render_parts(...) output."""
    toc, body = [], []
    for key, md in parts:
        if key == "rating" and ratings:
            body.append(rating_html(ratings))
            toc.append(("rating", "Rating"))
        elif key == "checks":
            body.append(checks_html(rows, ratings))
            toc.append(("checks", "Checks"))
        else:
            anchor = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
            first = re.search(r"^#{1,3}\s+(.*)$", md, re.M)
            if key != "header":
                toc.append((anchor, first.group(1) if first else key))
            body.append('<section id="%s">%s</section>' % (anchor, markdown_to_html(md, report_dir)))
    nav = '<nav class="toc">%s</nav>' % "".join('<a href="#%s">%s</a>' % (esc(a), esc(t)) for a, t in toc)
    if body:
        body.insert(1, nav)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<title>%s</title><style>%s</style></head><body><main>\n%s\n</main><script>%s</script></body></html>\n"
            % (esc(title), CSS, "\n".join(body), SCRIPT))
