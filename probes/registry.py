"""Names of the probes: every phase package of `probes` lists its probe modules in PROBES.

A new probe is a module `probes/<phase>/<name>.py` with `PARAMS` (its params' declaration, probes/params.py) and
`run(art, params, out_dir)`, named in its package's PROBES; a new phase is a new package. Nothing else to register.
Discovery imports only the phase packages' `__init__` (cheap, no torch), and works from the package directory and
from inside probes.pyz (pkgutil reads both). A probe name is the artifact's name, so two phases may not use the same
one.
"""

import importlib
import pkgutil

import probes

# Packages of shared code, not phases.
NOT_PHASES = {"common"}


def discover():
    names = {}
    for info in pkgutil.iter_modules(probes.__path__):
        if not info.ispkg or info.name.startswith("_") or info.name in NOT_PHASES:
            continue
        phase = importlib.import_module("probes.%s" % info.name)
        for name in phase.PROBES:
            if name in names:
                raise ValueError("probe %r is defined by both %s and probes.%s" % (name, names[name], info.name))
            names[name] = "probes.%s.%s" % (info.name, name)
    return names


PROBES = discover()
