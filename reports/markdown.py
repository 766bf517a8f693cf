"""Markdown table helpers shared by report.md and every phase section."""


def cell(value):
    """A table cell: None shows as an en dash, pipes and newlines cannot break the row."""
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ") or "–"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
