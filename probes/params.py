"""Probe parameters, declared once per probe: each one's type, default and help, in the probe's module.

    PARAMS = Params(iters=Param(int, 10, "timed iterations"), dtypes=Param(list, ["bf16"], "dtypes to measure"))

The CLI resolves what the role passed against the declaration before the probe runs (probes/cli.py): every declared
param is filled in (one given as None keeps its default: a template that yields nothing), each value is converted
to its declared type (Ansible may template numbers and booleans as strings), and an unknown or misspelt param or a
value of the wrong type is refused with a ParamError naming the probe and the param, so the artifact says what is
wrong before anything is measured. The role's argument_specs stay the user-facing source of the values and pass
them through; these defaults are what a probe run by hand uses (`python -m probes <name> --help-params`).

Declared here once: `skip` for every probe (a non-empty reason: the probe is not run, its artifact is skipped with
that reason), `tools_step` for every probe (what the tools step installed and built, and why something is missing), and
for every multi-host probe (`Params(peers=True, ...)`) hosts, addresses and rank, which the probe action adds with
`peers: true` (the storage role passes its own). A probe that does not declare them ignores them:
`peers: true` on a single-host probe is harmless, not a misspelt param.
"""

import copy
import difflib
import json

# A size in bytes: 8, "8", "64K", "4M", "16G" (binary multiples, as nccl-tests reads them).
SIZE = "size"
TRUE, FALSE = ("true", "yes", "on", "y", "1"), ("false", "no", "off", "n", "0")


class ParamError(ValueError):
    """A param the probe does not declare, or a value it cannot take."""


def parse_bytes(value):
    """8, "8", "64K", "4M", "16G" (binary multiples, as nccl-tests reads them) -> bytes."""
    if isinstance(value, bool):
        raise TypeError(value)
    if isinstance(value, int):
        return value
    text = str(value).strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text and text[-1] in mult:
        return int(float(text[:-1]) * mult[text[-1]])
    return int(text)


def _to_bool(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = value.strip().lower() if isinstance(value, str) else None
    if text in TRUE or text in FALSE:
        return text in TRUE
    raise TypeError(value)


def _to_int(value):
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        number = float(value)
        if number.is_integer():
            return int(number)
    raise TypeError(value)


def _to_float(value):
    if isinstance(value, (int, float, str)) and not isinstance(value, bool):
        return float(value)
    raise TypeError(value)


def _to_str(value):
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)  # e.g. a GID index of 3 for a param that may also be ""
    raise TypeError(value)


def _to_list(value):
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):  # "bf16,fp8_e4m3", as typed by hand or templated from a comma-separated variable
        return [item.strip() for item in value.split(",") if item.strip()]
    raise TypeError(value)


def _to_dict(value):
    if isinstance(value, dict):
        return dict(value)
    raise TypeError(value)


CONVERTERS = {int: _to_int, float: _to_float, bool: _to_bool, str: _to_str, list: _to_list, dict: _to_dict,
              SIZE: parse_bytes}
EXPECTED = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list",
            dict: "a mapping", SIZE: 'a size in bytes (8, "64K", "4M", "1G")'}


def _kind_name(kind):
    return kind if isinstance(kind, str) else kind.__name__


class Param:
    """One parameter: its type (int, float, bool, str, list, dict or SIZE), default (None: the probe decides, as
    its help says), help, and optionally the values it may take."""

    def __init__(self, kind, default, help, choices=None):
        if kind not in CONVERTERS:
            raise ValueError("param type %r is not one of %s" % (kind, ", ".join(map(_kind_name, CONVERTERS))))
        self.kind, self.help, self.choices = kind, help, tuple(choices) if choices else None
        self.shown = default
        self.default = None if default is None else self.convert(default)

    def convert(self, value):
        try:
            out = CONVERTERS[self.kind](value)
        except (TypeError, ValueError):
            raise ValueError("expected %s, got %s" % (EXPECTED[self.kind], json.dumps(value, default=repr))) from None
        if self.choices and out not in self.choices:
            raise ValueError("expected one of %s, got %s" % (", ".join(map(str, self.choices)), json.dumps(value)))
        return out


UNIVERSAL = {"skip": Param(str, "", "why the probe is not run: when not empty, the artifact is skipped with this "
                                    "reason and nothing is measured"),
             "tools_step": Param(dict, {}, "what the tools step left (the probe action adds it from assess_tools): "
                                           "path and ld_library_path (put in front of PATH and LD_LIBRARY_PATH before "
                                           "the probe runs) and missing {tool: why}, quoted by not-installed skips")}
# How a multi-node world starts (probes/common/launch.py).
LAUNCHERS = ("auto", "srun", "mpirun", "torchrun", "direct")
PEERS = {
    "hosts": Param(list, None, "the hosts of the run in play order, the first being where the others meet: names "
                               "(from the action's peers) or {name, addr} entries (the storage probes) "
                               "(default: this host alone)"),
    "addresses": Param(list, None, "the address of each host, in the order of hosts (default: the host names)"),
    "rank": Param(int, 0, "this host's index in hosts"),
    "racks": Param(list, [], "the rack of each host, in the order of hosts ('' where not known; from assess_rack)"),
    "nvlink_domains": Param(list, [], "the NVLink (scale-up) domain of each host, in the order of hosts ('' where "
                                      "not known; from assess_nvlink_domain)"),
    "launcher": Param(str, "direct", "how a multi-node world starts (assess_launcher): auto (srun on Slurm nodes, "
                                     "else mpirun where Open MPI is, else torchrun), srun, mpirun, torchrun, or "
                                     "direct (the probe's own processes)", choices=LAUNCHERS),
    "mpirun_args": Param(list, [], "extra mpirun arguments (assess_mpirun_args)"),
    "srun_args": Param(list, [], "extra srun arguments (assess_srun_args)"),
}


class Params:
    """A probe's parameters: its own, plus `skip` (and hosts, addresses, rank with peers=True) from here."""

    def __init__(self, peers=False, **declared):
        shared = dict(PEERS, **UNIVERSAL) if peers else dict(UNIVERSAL)
        again = sorted(set(declared) & (set(PEERS) | set(UNIVERSAL)))
        if again:
            raise ValueError("%s declared in probes/params.py for every probe that takes them: use peers=True"
                             % ", ".join(again))
        self.declared = dict(declared, **shared)

    def resolve(self, probe, given):
        """The params the probe runs with: every declared one, typed; ParamError for anything else."""
        given = given or {}
        for name in given:
            if name not in self.declared and name not in PEERS:
                close = difflib.get_close_matches(name, self.declared, n=1)
                hint = "did you mean %r?" % close[0] if close else "known: " + ", ".join(sorted(self.declared))
                raise ParamError("probe %s: unknown param %r (%s)" % (probe, name, hint))
        out = {}
        for name, param in self.declared.items():
            value = given.get(name)
            try:
                out[name] = copy.deepcopy(param.default) if value is None else param.convert(value)
            except ValueError as exc:
                raise ParamError("probe %s: param %r: %s" % (probe, name, exc)) from None
        return out

    def describe(self):
        """One line per param: name, type, default (as JSON, as --params takes it) and help."""
        rows = [(name, _kind_name(p.kind), json.dumps(p.shown), p.help + (" (one of %s)" % ", ".join(
            map(str, p.choices)) if p.choices else "")) for name, p in self.declared.items()]
        width = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join("%-*s  %-*s  %-*s  %s" % (width[0], r[0], width[1], r[1], width[2], r[2], r[3])
                         for r in rows)
