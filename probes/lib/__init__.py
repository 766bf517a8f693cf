"""Code shared by several probes (parsers, launch helpers). Modules here are never run as probes themselves."""
