"""Reading small /proc, /sys and config files the way every probe needs: missing or unreadable is data, not a fault."""


def read_text(path, default=None):
    """Contents of a small text file, or default when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return default


def parse_key_values(text, sep="="):
    """KEY=value lines (os-release style) into a dict; surrounding quotes removed."""
    out = {}
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#") or sep not in line:
            continue
        key, value = line.split(sep, 1)
        out[key.strip()] = value.strip().strip('"').strip("'")
    return out
