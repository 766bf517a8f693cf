"""A report part as data: a list of blocks that report.md (reports.render.markdown.render) and report.html (the
Jinja2 templates in reports/render/templates) both render, so both reports carry the same content and neither is
parsed back from the other.

Blocks: Heading, Paragraph, Bullets (numbered or not), Quote, Table(columns, rows), Figures (images in one row).
Text inside a block is inline content: a plain string, a Span (strong, em, code, link), or a list of them.
A table cell is inline content too, or None / a number (None shows as an en dash). Nothing here is markup: every
string is escaped by the renderer that writes it.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    kind: str  # text, strong, em, code or link
    text: str
    href: str = ""


def strong(text):
    return Span("strong", text)


def em(text):
    return Span("em", text)


def code(text):
    return Span("code", str(text))


def link(text, href):
    return Span("link", text, href)


def joined(items, sep=", "):
    """Inline content of several items (strings or spans) with sep between them."""
    return [x for i, item in enumerate(items) for x in ([sep] if i else []) + [item]]


def spans(content):
    """Inline content as a list of spans (plain strings become text spans; None nothing, numbers their text)."""
    if isinstance(content, (list, tuple)):
        return [s for part in content for s in spans(part)]
    if content is None:
        return []
    return [content if isinstance(content, Span) else Span("text", str(content))]


def plain(content):
    """Inline content without its markup (a heading's anchor, a table of contents entry, a cell's class)."""
    return "".join(s.text for s in spans(content))


class Block:
    """What the renderers dispatch on: the block's kind, its class name in lower case."""

    @property
    def kind(self):
        return type(self).__name__.lower()


@dataclass(frozen=True)
class Heading(Block):
    level: int
    text: object


@dataclass(frozen=True)
class Paragraph(Block):
    text: object


@dataclass(frozen=True)
class Quote(Block):
    text: object


@dataclass(frozen=True)
class Bullets(Block):
    items: list
    numbered: bool = False


@dataclass(frozen=True)
class Table(Block):
    columns: list
    rows: list


@dataclass(frozen=True)
class Image:
    """A plot (or any image) written into the report directory, named by its file name there."""
    file: str
    caption: str


@dataclass(frozen=True)
class Figures(Block):
    images: list


def figure(file, caption):
    """[one image as a block], or [] where file is None (the plot was not drawn: no report directory, nothing to
    draw, no matplotlib)."""
    return [Figures([Image(file, caption)])] if file else []
