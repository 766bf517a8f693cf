"""report.md from blocks (reports.render.blocks), and the number formats every part's tables share (with the checks
whose lines a number is shown against)."""


from reports.render.blocks import Span, spans
from reports.shown import shown

_SPAN_MD = {"text": "%s", "strong": "**%s**", "em": "*%s*", "code": "`%s`"}


def inline(content):
    if content.__class__ is str:  # most content is plain text: no spans to make (tables of thousands of rows)
        return content
    return "".join("[%s](%s)" % (s.text, s.href) if s.kind == "link" else _SPAN_MD[s.kind] % s.text
                   for s in spans(content))


def cell(value):
    """A table cell: None shows as an en dash, pipes and newlines cannot break the row."""
    if value is None:
        return "–"
    # a number is its text, as inline() would make it, without a span made and joined per cell
    text = inline(value) if isinstance(value, (str, Span, list, tuple)) else str(value)
    return text.replace("|", "\\|").replace("\n", " ") or "–"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _block(b):
    if b.kind == "heading":
        return "#" * b.level + " " + inline(b.text)
    if b.kind == "paragraph":
        return inline(b.text)
    if b.kind == "bullets":
        return "\n".join(("%d. " % (i + 1) if b.numbered else "- ") + inline(item) for i, item in enumerate(b.items))
    if b.kind == "quote":
        return "> " + inline(b.text)
    if b.kind == "table":
        return table(b.columns, b.rows)
    if b.kind == "figures":
        return "\n".join("![%s](%s)" % (i.caption, i.file) for i in b.images)
    raise ValueError("not a report block: %r" % (b,))


def render(blocks):
    """The blocks as markdown, a blank line between blocks; "" for no blocks."""
    return "\n\n".join(_block(b) for b in blocks) + "\n" if blocks else ""


def fmt(value, digits=3, decimals=0, thresholds=()):
    """A measured number for a table: from 100 up with `decimals` decimals, else `digits` significant digits.
    thresholds: the lines a check judged the value against (in the units shown): more digits where fewer would show
    it on the other side of one, or on it (reports/shown.py: 99.96 beside a floor of 100 is "99.96", not "100")."""
    if value is None:
        return None
    if abs(value) >= 100:
        return shown(value, thresholds, decimals=decimals)
    return shown(value, thresholds, significant=digits)


def fmt_tenths(value, thresholds=()):
    """fmt with one decimal from 100 up (GPU and network rates, where 781.9 and 782 are worth telling apart)."""
    return fmt(value, decimals=1, thresholds=thresholds)
