"""report.html: one self-contained file (styles, plots as base64 PNG, a few lines of script), readable on screen
and printable. It renders the same parts as report.md (report_md.render_parts), from the same data: the blocks of
every part through the Jinja2 templates in reports/render/templates (blocks.html.j2), the rating and the checks
from their data (rating.html.j2, checks.html.j2), which add what a page can do that markdown cannot (the tier
badge, score bars, status filters, the sortable and filterable hosts table). Autoescape is on and no template marks a
value safe: every string is escaped (the check rows by host_pages.rows_html, which escapes every value itself).

Images are embedded from the report directory only (a plain file name of a known image type); never fetched.
"""

import base64
import os
import re
from types import SimpleNamespace

import jinja2
import markupsafe

from reports.rate import fmt_score, tier_line
from reports.render import host_pages
from reports.render.blocks import plain, spans
from reports.render.report_md import rating_detail_blocks

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
TIER_COLOURS = {"Platinum": ("#dfe6ee", "#2c3e50"), "Gold": ("#f6d365", "#5a4300"), "Silver": ("#d7dbe0", "#333"),
                "Bronze": ("#e0a370", "#4a2500"), "Participation Ribbon": ("#b3d4fc", "#0b3d78"),
                "Underperforming": ("#f4b6b6", "#7a0000"), "Not rated": ("#eeeeee", "#444"),
                "Screening": ("#eeeeee", "#444")}
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".svg": "image/svg+xml",
               ".gif": "image/gif"}
STATUSES = host_pages.STATUSES
_NUM = re.compile(r"^[-+]?[\d.,]+(\s?[%\w/]*)?$")
# Links a report may hold: the web, anchors in the page, and relative paths (artifact logs beside the report).
_SAFE_LINK = re.compile(r"^(https?:|#|[\w./-]+$)")


def anchor(text):
    """The id of a heading or part: its plain text in lower case, runs of other characters as one dash."""
    return re.sub(r"[^a-z0-9]+", "-", plain(text).lower()).strip("-")


def cell_class(value, tag="td"):
    """A status word is coloured (in headers too), a number in a data cell aligned right."""
    text = plain(value)
    if text.lower() in STATUSES:
        return "st st-%s" % text.lower()
    return "num" if tag == "td" and _NUM.match(text) else ""


def link_target(href):
    return href if _SAFE_LINK.match(href) else "#"


def embedder(report_dir):
    """embed(file) -> a data: URI of an image in report_dir, or None (not there, not an image, or not a plain file
    name: nothing outside the report directory is read)."""
    def embed(name):
        kind = IMAGE_TYPES.get(os.path.splitext(name)[1].lower())
        path = os.path.join(report_dir or "", name)
        if not (report_dir and kind and os.path.basename(name) == name and os.path.isfile(path)):
            return None
        with open(path, "rb") as fh:
            return "data:%s;base64,%s" % (kind, base64.b64encode(fh.read()).decode("ascii"))
    return embed


def _environment():
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(spans=spans, plain=plain, anchor=anchor, cell_class=cell_class, link_target=link_target,
                       fmt_score=fmt_score)
    return env


ENV = _environment()


def blocks_html(blocks, report_dir=None):
    """The HTML of a list of blocks (what a part's <section> holds)."""
    template = ENV.from_string('{% import "blocks.html.j2" as b with context %}{{ b.blocks(items) }}')
    return template.render(items=blocks, embed=embedder(report_dir))


def render(parts, rows, ratings, report_dir=None, title="ClusterMAX assessment", hosts=None):
    """The whole page. parts: report_md.render_parts(...) output, [(key, blocks)]; hosts: the run's hosts (each
    with a line in the hosts table, linking to its page: host_pages.write_host_pages)."""
    page, toc = [], []
    for key, blocks in parts:
        part = SimpleNamespace(key=key, anchor=anchor(key), blocks=blocks)
        page.append(part)
        if key == "rating" and ratings:
            toc.append(SimpleNamespace(anchor="rating", title="Rating"))
        elif key == "checks":
            toc.append(SimpleNamespace(anchor="checks", title="Checks"))
        elif key != "header":
            first = next((b.text for b in blocks if b.kind == "heading"), key)
            toc.append(SimpleNamespace(anchor=part.anchor, title=plain(first)))
    if hosts is None:
        hosts = list(dict.fromkeys(r["host"] for r in rows if r.get("evidence") != "analyst"))
    shown, note = host_pages.shown_rows(rows, len(hosts))
    counts = {}
    for r in shown:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return ENV.get_template("report.html.j2").render(
        parts=page, toc=toc, rows=shown, counts=counts, ratings=ratings, title=title, statuses=STATUSES,
        rows_html=markupsafe.Markup(host_pages.rows_html(shown)), rows_note=note,
        hosts=host_pages.host_summary(rows, hosts),
        tier_colours=TIER_COLOURS, tier_line=tier_line(ratings) if ratings else "", embed=embedder(report_dir),
        rating_detail=rating_detail_blocks(ratings) if ratings else [])
