"""The one event table every source adapter fills, and the contract it is judged against.

An `Event` says: this target (a GPU of a node, a node, a rack, the whole cluster) was down, or was excluded from
downtime (maintenance of a named kind), from `start` to `end` (UTC microseconds, half-open). Adapters
(reports/sla/sources/) turn health-probe samples, Slurm states and events, the assessment's reboot and
fault-injection timings and provider CSV/JSON logs into events; nothing downstream knows where an event came from
except through `source` and `evidence`, which the review prints next to every downtime interval.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reports.sla.timeutil import TimeError, iso_utc, parse_time, zone

SCOPES = ("gpu", "node", "rack", "cluster")
DOWN = "down"
# Exclusion kinds the seed names (software upgrades, security patches, physical maintenance), plus downtime the
# assessment itself caused (reboot and fault-injection tests during acceptance or a review).
EXCLUSION_KINDS = ("software_upgrade", "security_patch", "physical_maintenance", "assessment")
KINDS = (DOWN,) + EXCLUSION_KINDS
SYSTEMS = ("hgx", "nvl72")


class EventError(ValueError):
    """An event record that cannot be used as given (the message names the record)."""


@dataclass(frozen=True)
class Event:
    id: str  # unique across all sources of one review, e.g. "healthprobe:host2:17-19"
    source: str  # healthprobe | slurm | sacctmgr | assessment | import
    scope: str  # gpu | node | rack | cluster
    target: str  # node name (gpu and node scope), rack name, or the cluster name ("*" = every node)
    kind: str  # down, or an exclusion kind
    start: int  # UTC microseconds
    end: int  # UTC microseconds (an open event is closed at the source's horizon, see evidence["open"])
    reason: str = ""
    gpus: int = 1  # gpu scope: how many GPUs this record covers when it does not name them
    gpu: str | None = None  # gpu scope: which GPU (index or UUID) when it is named
    announced_at: int | None = None  # exclusions: when the provider announced it (notice period)
    evidence: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        if self.scope not in SCOPES:
            raise EventError("%s: scope %r is not one of %s" % (self.id, self.scope, ", ".join(SCOPES)))
        if self.kind not in KINDS:
            raise EventError("%s: kind %r is not one of %s" % (self.id, self.kind, ", ".join(KINDS)))
        if not self.target:
            raise EventError("%s: no target" % self.id)
        if self.end < self.start:
            raise EventError("%s: ends before it starts" % self.id)
        if self.gpus < 1:
            raise EventError("%s: gpus must be at least 1" % self.id)

    @property
    def is_exclusion(self) -> bool:
        return self.kind != DOWN

    def as_row(self) -> dict:
        return {"id": self.id, "source": self.source, "scope": self.scope, "target": self.target, "kind": self.kind,
                "start": iso_utc(self.start), "end": iso_utc(self.end), "duration_s": (self.end - self.start) / 1e6,
                "reason": self.reason, "gpu": self.gpu if self.gpu is not None else "",
                "gpus": self.gpus if self.scope == "gpu" else "",
                "announced_at": iso_utc(self.announced_at) if self.announced_at is not None else ""}


# A node's own service window in the contract (both optional, read as `accepted_at` is): a node swapped in for a
# spare mid-month is in service from `in_service_from`, the one it replaced until `in_service_until` (exclusive).
NODE_WINDOW_FIELDS = ("in_service_from", "in_service_until")


@dataclass
class Node:
    name: str
    rack: str | None = None
    gpus: int | None = None  # None: the system's gpus_per_node
    in_service_from: str | None = None  # YYYY-MM-DD (in the contract's `timezone`) or an RFC 3339 time; None: always
    in_service_until: str | None = None  # the first instant it is no longer in service; None: still in service


@dataclass
class Contract:
    """What one review judges: the nodes under the SLA, the tier, the system kind and the dates.

    Built from inventory variables by the sla role (contract.json in the review's inputs), or by hand.
    """

    provider: str
    tier: str
    system: str
    nodes: list[Node]
    timezone: str = "UTC"
    cluster: str = "cluster"
    acceptance_agreed: str | None = None  # YYYY-MM-DD (in `timezone`) or an RFC 3339 time
    accepted_at: str | None = None  # when the cluster was accepted; availability counts from then
    overrides: dict = field(default_factory=dict)  # per-contract values for systems.<system> parameters

    @classmethod
    def from_dict(cls, doc: dict) -> Contract:
        nodes = []
        for item in doc.get("nodes") or []:
            if isinstance(item, str):
                item = {"name": item}
            elif isinstance(item, (list, tuple)):
                # [name, rack, gpus, in_service_from, in_service_until], as the sla role builds it
                item = dict(zip(("name", "rack", "gpus") + NODE_WINDOW_FIELDS, item))
            gpus = item.get("gpus")
            nodes.append(Node(name=str(item["name"]), rack=str(item["rack"]) if item.get("rack") not in (None, "")
                              else None, gpus=int(gpus) if gpus not in (None, "") else None,
                              in_service_from=_opt(item.get("in_service_from")),
                              in_service_until=_opt(item.get("in_service_until"))))
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            raise EventError("contract lists a node twice: %s" % sorted({n for n in names if names.count(n) > 1}))
        system = str(doc.get("system") or "hgx").lower()
        if system not in SYSTEMS:
            raise EventError("contract system %r is not one of %s" % (system, ", ".join(SYSTEMS)))
        contract = cls(provider=str(doc.get("provider") or "default"),
                       tier=str(doc.get("tier") or "silver").lower(), system=system, nodes=nodes,
                       timezone=str(doc.get("timezone") or "UTC"), cluster=str(doc.get("cluster") or "cluster"),
                       acceptance_agreed=_opt(doc.get("acceptance_agreed")), accepted_at=_opt(doc.get("accepted_at")),
                       overrides=dict(doc.get("overrides") or {}))
        for n in nodes:  # refused here, before anything is staged or computed
            contract.service_window(n)
        return contract

    def service_window(self, node: Node) -> tuple[int | None, int | None]:
        """The node's own service window (in_service_from, in_service_until) as UTC microseconds, None where the
        contract gives no bound; a time without an offset is read in the contract's zone, as `accepted_at` is."""
        bounds = []
        for name in NODE_WINDOW_FIELDS:
            value = getattr(node, name)
            if value is None:
                bounds.append(None)
                continue
            try:
                bounds.append(contract_instant(value, zone(self.timezone)))
            except TimeError as exc:
                raise EventError("contract node %s: %s %r: %s" % (node.name, name, value, exc)) from exc
        start, until = bounds
        if start is not None and until is not None and until <= start:
            raise EventError("contract node %s: in_service_until %s is not after in_service_from %s"
                             % (node.name, node.in_service_until, node.in_service_from))
        return start, until

    def covers(self, ev: Event, node: Node) -> bool:
        """Whether an event concerns a node: its own (node or GPU scope), its rack's, or the whole cluster's."""
        return ((ev.scope in ("node", "gpu") and ev.target == node.name)
                or (ev.scope == "rack" and node.rack is not None and ev.target == node.rack)
                or (ev.scope == "cluster" and ev.target in (self.cluster, "*")))

    def as_dict(self) -> dict:
        return {"provider": self.provider, "tier": self.tier, "system": self.system, "timezone": self.timezone,
                "cluster": self.cluster, "acceptance_agreed": self.acceptance_agreed,
                "accepted_at": self.accepted_at, "overrides": self.overrides,
                "nodes": [_node_dict(n) for n in self.nodes]}


def contract_instant(value, tz) -> int | None:
    """A contract's date or time (acceptance, a node's service window): YYYY-MM-DD is the start of that day in the
    contract's zone `tz`; a full time with an offset is exact, one without is read in `tz`; empty is None."""
    if value in (None, ""):
        return None
    text = str(value)
    if len(text) == 10 and text[4] == "-" and text[7] == "-":
        return parse_time(text + "T00:00:00", default_tz=tz)
    return parse_time(text, default_tz=tz)


def _node_dict(n: Node) -> dict:
    out = {"name": n.name, "rack": n.rack, "gpus": n.gpus}
    for name in NODE_WINDOW_FIELDS:  # only where given: contracts without windows stage as they always did
        if getattr(n, name) is not None:
            out[name] = getattr(n, name)
    return out


def _opt(value):
    return None if value in (None, "", "null") else str(value)
