"""Markdown table helpers shared by report.md and every phase section."""


def cell(value):
    """A table cell: None shows as an en dash, pipes and newlines cannot break the row."""
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ") or "–"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def fmt(value, digits=3):
    """A measured number for a table: whole numbers from 100 up, else `digits` significant digits."""
    if value is None:
        return None
    if abs(value) >= 100:
        return "%.0f" % value
    return "%.*g" % (digits, value)
