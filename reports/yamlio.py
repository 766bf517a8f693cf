"""YAML in, as fast as the machine allows: libyaml's C loader when PyYAML has it (about 10x the pure-Python one; the
rubric alone is ~0.5 s of every report build with the latter), the same safe subset either way."""

import yaml

SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(stream):
    """yaml.safe_load, with the C loader where there is one."""
    return yaml.load(stream, Loader=SafeLoader)  # noqa: S506 - a safe loader (CSafeLoader or SafeLoader)
