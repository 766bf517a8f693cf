"""What a user may set, and the checks preflight makes on it before any node is touched, as plain Python.

The action ``clustermax.assess.check_inputs`` (plugins/action/check_inputs.py) gathers what the user set (inventory
and group variables of every host, and extra vars) and calls :func:`problems`; everything here is unit-tested
without a playbook.

- **Declared variables** are the options of every role's ``meta/argument_specs.yml`` (every entry point), plus the
  names in its ``defaults/main.yml`` and ``vars/main.yml``. An ``assess_`` variable that no role declares is refused
  with the closest declared name: a misspelled ``assess_profil=standard`` would otherwise be ignored, and a quick
  run would happen instead. A variable with a role's prefix (``network_``, ``storage_``, ...) is refused only when
  it is that close to a declared one (a typo, ``storage_teirs``): those prefixes are common words, and other roles
  in the same inventory use them (linux-system-roles' ``network_connections``, ``storage_pools``).
- Only what the user set is checked: facts (a fact cache, AWX fact storage) are not inputs, and a value that is
  still a template (ansible-core 2.16 leaves one it cannot resolve yet) is left to the role that uses it.
- **Types and choices** of every declared option are checked here, once, on the controller, with ansible-core's own
  argument-spec validator. This is the only validation: the playbooks import the roles with
  ``rolespec_validate: false``, because ansible-core's own check is one task per host and role (15 roles: a third
  of a 16-host audit's tasks, and some roles start hours into a run).
- **Ranges**: argument_specs has no minimum or maximum, so each role keeps ``meta/input_ranges.yml``
  (``name: [min, max]``, null for no bound); every int or float option has one (tests/unit/test_inputs.py). A value
  outside is refused, never clamped (``burnin_duration_s=-5`` used to become the profile's 60 s).
- **Addresses**: two inventory hosts with the same address and port are one node assessed twice.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass, field

from ansible_collections.clustermax.assess.reports import yamlio

COLLECTION_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The spec keys ansible-core's validator reads; descriptions and examples are documentation only.
SPEC_KEYS = ("type", "elements", "choices", "options", "required", "no_log")


@dataclass
class Declared:
    """Every variable the collection's roles take: options (name -> argument spec), all names, ranges, prefixes."""

    options: dict = field(default_factory=dict)
    names: set = field(default_factory=set)
    ranges: dict = field(default_factory=dict)
    prefixes: tuple = ("assess_",)


def _yaml(path):
    # libyaml's loader where PyYAML has it (reports/yamlio.py): the roles' 58 argument_specs and defaults files took
    # the pure-Python one about 0.26 s of every run's preflight (issue 24)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        return yamlio.safe_load(fh) or {}


def declared(root=COLLECTION_ROOT):
    """Read every role under ``root/roles``."""
    out = Declared()
    roles_dir = os.path.join(root, "roles")
    roles = sorted(d for d in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, d)))
    out.prefixes = tuple(["assess_"] + ["%s_" % r for r in roles])
    for role in roles:
        base = os.path.join(roles_dir, role)
        specs = _yaml(os.path.join(base, "meta", "argument_specs.yml")).get("argument_specs") or {}
        for entry in specs.values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                out.options.setdefault(name, {k: v for k, v in spec.items() if k in SPEC_KEYS})
        out.names.update(out.options)
        for part in ("defaults", "vars"):
            out.names.update(_yaml(os.path.join(base, part, "main.yml")))
        out.ranges.update(_yaml(os.path.join(base, "meta", "input_ranges.yml")))
    return out


def _where(hosts):
    """'extra vars', or the hosts a variable is set for (a long list shortened)."""
    hosts = sorted(hosts)
    if hosts == ["extra vars"]:
        return "extra vars"
    shown = ", ".join(hosts[:5]) + (" and %d more" % (len(hosts) - 5) if len(hosts) > 5 else "")
    return "set for " + shown


# How close (difflib ratio) a role-prefixed unknown name must be to a declared one to be taken for a typo of it.
TYPO_RATIO = 0.85


def _closest(name, names, cutoff):
    match = difflib.get_close_matches(name, sorted(names), n=1, cutoff=cutoff)
    return match[0] if match else None


def _validated(name, spec, value):
    """(value as the role will see it, error or None), by ansible-core's argument-spec validator."""
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    result = ArgumentSpecValidator({name: spec}).validate({name: value})
    if result.error_messages:
        return value, "; ".join(str(m) for m in result.error_messages)
    return result.validated_parameters.get(name), None


def _out_of_range(value, bounds):
    low, high = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if (low is not None and value < low) or (high is not None and value > high):
        return "must be %s" % ("between %s and %s" % (low, high) if low is not None and high is not None
                               else ">= %s" % low if low is not None else "<= %s" % high)
    return None


def problems(settings, known, removed=(), foreign=()):
    """Messages for what the user set: ``settings`` maps a variable name to {value (JSON text): [where, ...]}, where
    is a host name or 'extra vars'. ``removed``: preflight_removed_variables ({name, successor, note}). ``foreign``:
    names with a project prefix that belong to something else in the user's inventory (assess_foreign_variables)."""
    out = []
    unknown = False
    gone = {r["name"]: r for r in removed}
    for name in sorted(settings):
        values = settings[name]
        where = _where({w for ws in values.values() for w in ws})
        if name in gone:
            r = gone[name]
            out.append("%s is no longer used (%s): %s%s" % (
                name, where, ("set %s instead" % r["successor"]) if r.get("successor") else "remove it",
                " (%s)" % r["note"] if r.get("note") else ""))
            continue
        if name not in known.names:
            if name in foreign or not name.startswith(known.prefixes):
                continue
            ours = name.startswith("assess_")
            match = _closest(name, known.names, 0.75 if ours else TYPO_RATIO)
            if ours or match:
                out.append("unknown variable %s (%s): %s" % (
                    name, where, "did you mean %s?" % match if match else "no role takes it"))
                unknown = True
            continue
        spec = known.options.get(name)
        if spec is None:
            continue
        for text, hosts in sorted(values.items()):
            value = json.loads(text)
            if isinstance(value, str) and ("{{" in value or "{%" in value):
                continue  # not resolved yet (ansible-core 2.16): the role checks it when it uses it
            value, error = _validated(name, spec, value)
            error = error or (_out_of_range(value, known.ranges[name]) if name in known.ranges else None)
            if error:
                out.append("%s=%s (%s): %s" % (name, text, _where(hosts), error))
    if unknown:
        out.append("(a variable of another tool whose name starts like these goes in assess_foreign_variables)")
    return out


SSH_PORT = 22


def _ssh_port(port):
    """The port a host is reached on: unset is SSH's 22, so `ansible_port=22` and no port are one address."""
    if port in (None, ""):
        return SSH_PORT
    try:
        return int(port)
    except (TypeError, ValueError):
        return str(port)


def duplicate_addresses(addresses):
    """Messages for hosts that share an address and port: ``addresses`` maps host -> (address, port); a port not set
    is 22, and names differ from addresses only in case (DNS names are case-insensitive)."""
    seen = {}
    for host in sorted(addresses):
        addr, port = addresses[host]
        seen.setdefault((str(addr).lower(), _ssh_port(port)), []).append(host)
    return ["%s are one node (%s%s): each node is listed once" % (
        " and ".join(hosts), addr, "" if port == SSH_PORT else ":%s" % port)
        for (addr, port), hosts in sorted(seen.items(), key=lambda kv: kv[1]) if len(hosts) > 1]
