"""Names of the probes: every module of this package that is not one of its shared helpers.

A new probe is a module `probes/<name>.py` with `run(art, params, out_dir)`; nothing to register by hand.
Discovery works from the package directory and from inside probes.pyz (pkgutil reads both).
"""

import pkgutil

import probes

# Shared code, not probes.
HELPERS = {"artifact", "cli", "device", "pyz", "registry", "util"}


def _discover():
    names = {}
    for info in pkgutil.iter_modules(probes.__path__):
        if not info.name.startswith("_") and info.name not in HELPERS and not info.ispkg:
            names[info.name] = "probes.%s" % info.name
    return names


PROBES = _discover()
