"""Probe parameters: a probe's defaults merged with what the role passed."""


def with_defaults(defaults, params):
    """A probe's parameters: its defaults, overridden by every param given a value (None keeps the default)."""
    merged = dict(defaults)
    merged.update({k: v for k, v in (params or {}).items() if v is not None})
    return merged
