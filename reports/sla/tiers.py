"""reports/data/sla_tiers.yml: tiers, credit ladders, systems, exclusions; exact comparisons at the boundaries."""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction

from reports import DATA_DIR, yamlio

DATA = os.path.join(DATA_DIR, "sla_tiers.yml")


class TierError(ValueError):
    """sla_tiers.yml (or a contract override) says something that cannot be applied."""


def pct(value) -> Fraction:
    """A percentage from YAML as an exact fraction: 99.9 -> 999/10 (via its decimal text, not the binary float)."""
    if isinstance(value, Fraction):
        return value
    if isinstance(value, bool) or value is None:
        raise TierError("not a percentage: %r" % (value,))
    return Fraction(str(value))


@dataclass(frozen=True)
class Tier:
    name: str
    target: Fraction  # percent
    credits: tuple[tuple[Fraction, Fraction], ...]  # (below_pct, credit_pct), highest threshold first
    termination_below: Fraction | None
    termination_consecutive: int | None
    credits_source: str = ""

    def credit(self, availability_pct: Fraction) -> Fraction:
        """Credit in percent of the monthly fee: the largest step whose threshold the availability is strictly below."""
        owed = Fraction(0)
        for below, credit in self.credits:
            if availability_pct < below:
                owed = max(owed, credit)
        return owed

    def meets_target(self, availability_pct: Fraction) -> bool:
        return availability_pct >= self.target


class Tiers:
    def __init__(self, doc: dict, path: str = DATA):
        self.path = path
        self.doc = doc or {}
        if self.doc.get("schema") != "clustermax.assess/sla_tiers/v1":
            raise TierError("%s: schema must be clustermax.assess/sla_tiers/v1" % path)
        self.accounting = dict(self.doc.get("accounting") or {})
        if self.accounting.get("availability_denominator", "calendar") not in ("calendar", "eligible"):
            raise TierError("%s: accounting.availability_denominator must be calendar or eligible" % path)
        self.exclusions = {k: dict(v or {}) for k, v in (self.doc.get("exclusions") or {}).items()}
        for kind, terms in self.exclusions.items():
            if not isinstance(terms.get("needs_announcement", True), bool):
                raise TierError("%s: exclusions.%s.needs_announcement must be true or false" % (path, kind))
        self.systems = {k: dict(v or {}) for k, v in (self.doc.get("systems") or {}).items()}
        self.acceptance = dict(self.doc.get("acceptance") or {})
        self.tiers = {name: self._tier(name, spec) for name, spec in (self.doc.get("tiers") or {}).items()}

    @classmethod
    def load(cls, path: str | None = None) -> Tiers:
        path = path or DATA
        with open(path, encoding="utf-8") as fh:
            return cls(yamlio.safe_load(fh), path)

    def _tier(self, name, spec) -> Tier:
        try:
            credits = sorted(((pct(c["below_pct"]), pct(c["credit_pct"])) for c in spec.get("credits") or []),
                             reverse=True)
            term = spec.get("termination") or {}
            tier = Tier(name=name, target=pct(spec["target_pct"]), credits=tuple(credits),
                        termination_below=pct(term["below_pct"]) if term.get("below_pct") is not None else None,
                        termination_consecutive=int(term["consecutive_months_below_target"])
                        if term.get("consecutive_months_below_target") else None,
                        credits_source=str(spec.get("credits_source") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise TierError("%s: tier %s: %s" % (self.path, name, exc)) from exc
        if not all(0 < b <= 100 and 0 <= c <= 100 for b, c in tier.credits) or not 0 < tier.target <= 100:
            raise TierError("%s: tier %s: percentages must lie in (0, 100]" % (self.path, name))
        return tier

    def tier(self, name: str) -> Tier:
        try:
            return self.tiers[name.lower()]
        except KeyError:
            raise TierError("unknown SLA tier %r (known: %s)" % (name, ", ".join(self.tiers))) from None

    def system(self, name: str, overrides: dict | None = None) -> dict:
        """The parameters of a system kind (hgx, nvl72), with a contract's overrides applied and checked."""
        if name not in self.systems:
            raise TierError("unknown system %r (known: %s)" % (name, ", ".join(self.systems)))
        params = dict(self.systems[name])
        for key, value in (overrides or {}).items():
            if key not in ("gpus_per_node", "node_down_gpus", "rack_down_nodes", "nodes_per_rack"):
                raise TierError("override %r is not a system parameter" % key)
            params[key] = value
        for key in ("gpus_per_node", "node_down_gpus"):
            if not isinstance(params.get(key), int) or params[key] < 1:
                raise TierError("system %s: %s must be a positive integer, not %r" % (name, key, params.get(key)))
        if params["node_down_gpus"] > params["gpus_per_node"]:
            raise TierError("system %s: node_down_gpus %d is more than gpus_per_node %d"
                            % (name, params["node_down_gpus"], params["gpus_per_node"]))
        rack = params.get("rack_down_nodes")
        if rack is not None and (not isinstance(rack, int) or rack < 1):
            raise TierError("system %s: rack_down_nodes must be a positive integer or null, not %r" % (name, rack))
        return params

    def exclusion_terms(self, kind: str) -> tuple[int, bool] | None:
        """(notice in microseconds, whether an announcement is needed at all) of an exclusion kind; None when the
        kind is not an exclusion. An announcement is needed unless the kind says needs_announcement: false."""
        if kind not in self.exclusions:
            return None
        terms = self.exclusions[kind]
        return (int(Fraction(str(terms.get("notice_h", 0))) * 3600 * 1_000_000),
                terms.get("needs_announcement", True))
