"""The cluster snapshot's wire types: what travels over the TCPStore as JSON, read back once
(harness.cluster.snapshot.ClusterView.of) with `from_dict`, written with `to_json`. Every field
is required and checked for its type: a missing or malformed one is a SnapshotError naming it,
never a default (unknown is never healthy). `from_dict(x).to_json()` gives back the same
JSON, key for key and in the same order, so the bytes on the wire are unchanged.

Hand-written rather than a schema library's: the package keeps its dependencies to those it
names in DEVELOPERS.md, and these few records need only presence and type checks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.judges.cluster import StragglerLimits

T = TypeVar("T")

__all__ = ["NUMBER", "OPT_INT", "OPT_NUMBER", "OPT_STR", "ClusterBandwidth", "FailedCheck",
           "MissingNode", "NodeSdc", "NodeSummary", "SnapshotError", "SnapshotHead", "figure_map",
           "items", "optional_record", "required", "text_map"]


class SnapshotError(ValueError):
    """A node summary (or one of its parts) that cannot be read: names the field."""


def required(d: JSONMapping, key: str, kind: type[T] | tuple[type[T], ...], where: str) -> T:
    """`d[key]`, which must be there and of `kind` (SnapshotError naming it otherwise)."""
    if type(d) is not dict and not isinstance(d, Mapping):  # the exact type first: JSON's
        raise SnapshotError(f"{where} is not a JSON object")
    if key not in d:
        raise SnapshotError(f"{where} has no {key!r}")
    value = d[key]
    exact = type(value) is kind if isinstance(kind, type) else type(value) in kind
    if not exact and not _is(value, kind):
        raise SnapshotError(f"{where}'s {key!r} is {type(value).__name__}, not "
                            f"{_kind_name(kind)}")
    return value  # type: ignore[return-value]  # checked by isinstance above


def _is(value: object, kind: type | tuple[type, ...]) -> bool:
    """isinstance, except that a JSON true/false is not a number (bool is an int subclass)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return isinstance(value, kinds) and (not isinstance(value, bool) or bool in kinds)


#: The exact JSON types of a map's values (`_all_of`): text, and numbers (never true/false).
_TEXT, _NUMBERS = frozenset((str,)), frozenset((int, float))


def _all_of(values: Iterable[object], kinds: frozenset[type]) -> bool:
    """Every value's exact type is one of `kinds`: what JSON decodes to, and what the harness
    builds (no subclass, so a JSON true/false is no number). A set of types, not an isinstance
    per value: every node's summary holds a few such maps (bench/bench_verdict.py)."""
    return set(map(type, values)) <= kinds


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def items(d: JSONMapping, key: str, kind: type[T] | tuple[type[T], ...], where: str
          ) -> list[T]:
    """`d[key]`, a JSON list whose every item is of `kind` (SnapshotError naming it, and the
    first item that is not, otherwise)."""
    value = required(d, key, list, where)
    for i, item in enumerate(value):
        if not _is(item, kind):
            raise SnapshotError(f"{where}'s {key!r} holds {type(item).__name__} at {i}, not "
                                f"{_kind_name(kind)}")
    return value


def optional_record(d: JSONMapping, key: str, read: Callable[[JSONMapping, str], T],
                    where: str) -> T | None:
    """`d[key]` read by `read` (a record's `from_dict`) when it is there and not null: a
    section the collectives add only once they ran it (isolation, the job's groups)."""
    value = d.get(key)
    return None if value is None else read(value, f"{where}'s {key!r}")


#: The JSON kinds `required` and `items` check (a JSON true/false is never a number).
OPT_STR = (str, type(None))
#: A figure as it travels: a number (int or float, kept as read so the bytes do not change).
NUMBER = (int, float)
#: A figure or None where none was measured.
OPT_NUMBER = (int, float, type(None))
OPT_INT = (int, type(None))


def text_map(d: JSONMapping, key: str, where: str, *, optional: bool = False) -> dict[str, str]:
    """`d[key]`, a JSON object of text values (SnapshotError naming it otherwise); {} for an
    `optional` one `d` does not have (a section the collectives add only when they have
    something to say: `not_measured`, `left_out`)."""
    if optional and key not in d:
        return {}
    value = required(d, key, dict, where)
    if not _all_of(value.values(), _TEXT):
        raise SnapshotError(f"{where}'s {key!r} holds a value that is not text")
    return dict(value)


def figure_map(d: JSONMapping, key: str, where: str) -> dict[str, float]:
    """`d[key]`, a JSON object of numbers, kept as read (SnapshotError naming it otherwise)."""
    value = required(d, key, dict, where)
    if not _all_of(value.values(), _NUMBERS):
        raise SnapshotError(f"{where}'s {key!r} holds a value that is not a number")
    return dict(value)


@dataclass(frozen=True, slots=True)
class FailedCheck:
    """One failed check a node publishes (its message cut to MAX_MESSAGE_CHARS)."""

    id: str
    outcome: str
    message: str

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a failed check") -> FailedCheck:
        return cls(id=required(d, "id", str, where), outcome=required(d, "outcome", str, where),
                   message=required(d, "message", str, where))

    def to_json(self) -> JSONObject:
        return {"id": self.id, "outcome": self.outcome, "message": self.message}


@dataclass(frozen=True, slots=True)
class MissingNode:
    """A node that did not report (or whose summary could not be read), and why."""

    host: str
    reason: str

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a missing node") -> MissingNode:
        return cls(host=required(d, "host", str, where), reason=required(d, "reason", str, where))

    def to_json(self) -> JSONObject:
        return {"host": self.host, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class NodeSdc:
    """A node's PF-GPU-020 figures as it publishes them (harness.cluster.snapshot.node_sdc),
    compared across nodes by PF-CLUSTER-007 (harness.cluster.sdc)."""

    spec: str
    """The workload, as PF-GPU-020 measured it (`SDC workload`)."""
    devices: Mapping[str, str]
    """Device label -> its combined digest."""
    outputs: Mapping[str, str]
    """Output name -> the digest of the node's majority."""
    totals: Mapping[str, float]
    """Output name -> the node's majority's fp32 total (kept as read)."""
    sm_count: int | None
    """The device's SM count; None where it has none (CPU ranks)."""
    outcome: str
    """PF-GPU-020's outcome on the node."""

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a node's 'sdc'") -> NodeSdc:
        return cls(spec=required(d, "spec", str, where), devices=text_map(d, "devices", where),
                   outputs=text_map(d, "outputs", where), totals=figure_map(d, "totals", where),
                   sm_count=required(d, "sm_count", OPT_INT, where),
                   outcome=required(d, "outcome", str, where))

    def to_json(self) -> JSONObject:
        return {"spec": self.spec, "devices": dict(self.devices), "outputs": dict(self.outputs),
                "totals": dict(self.totals), "sm_count": self.sm_count, "outcome": self.outcome}


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What one node publishes after its node-local checks (`node_summary`). Its JSON form
    (`to_json`, the fields in this order) is what travels over the TCPStore; `from_dict` reads
    it back, every field required."""

    rank: int
    host: str
    verdict: str
    failed: tuple[FailedCheck, ...]
    num_failed: int
    harness_errors: tuple[str, ...]
    facts: JSONMapping
    """FACT_KEYS -> the node's value (None where it was not read)."""
    env: Mapping[str, str]
    """The node's NCCL_* and FI_* variables."""
    figures: JSONMapping
    """NODE_FIGURES -> the node's figure (None where none was measured). Read as published:
    PF-CLUSTER-006 names a node whose figure is not a finite number (harness.cluster.straggler)."""
    sdc: NodeSdc | None
    """The node's PF-GPU-020 figures (`node_sdc`), None when it measured none."""
    nothing_judged: str | None
    """Why the node's selection judged nothing, else None."""

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a node summary") -> NodeSummary:
        failed = required(d, "failed", list, where)
        errors = required(d, "harness_errors", list, where)
        env = text_map(d, "env", where)
        figures = required(d, "figures", dict, where)
        if not all(isinstance(e, str) for e in errors):
            raise SnapshotError(f"{where}'s 'harness_errors' holds a value that is not text")
        sdc = required(d, "sdc", (dict, type(None)), where)
        return cls(rank=required(d, "rank", int, where), host=required(d, "host", str, where),
                   verdict=required(d, "verdict", str, where),
                   failed=tuple(FailedCheck.from_dict(f, f"{where}'s 'failed'") for f in failed),
                   num_failed=required(d, "num_failed", int, where), harness_errors=tuple(errors),
                   facts=required(d, "facts", dict, where), env=env, figures=figures,
                   sdc=None if sdc is None else NodeSdc.from_dict(sdc, f"{where}'s 'sdc'"),
                   nothing_judged=required(d, "nothing_judged", OPT_STR, where))

    def to_json(self) -> JSONObject:
        """The wire form: `from_dict(s.to_json()) == s`, and the bytes `json.dumps` makes of
        it are those of the dict it was read from."""
        return {"rank": self.rank, "host": self.host, "verdict": self.verdict,
                "failed": [f.to_json() for f in self.failed], "num_failed": self.num_failed,
                "harness_errors": list(self.harness_errors), "facts": dict(self.facts),
                "env": dict(self.env), "figures": dict(self.figures),
                "sdc": self.sdc.to_json() if self.sdc is not None else None,
                "nothing_judged": self.nothing_judged}


@dataclass(frozen=True, slots=True)
class SnapshotHead:
    """What every cluster snapshot opens with (the master's `_base`): the job's size, profile,
    tier, PF-CLUSTER-006's limits and the drain cap from the master's profile and environment,
    and the hosts by rank."""

    num_nodes: int
    profile: str
    tier: str
    straggler_limits: StragglerLimits
    drain_cap: float | None
    """PREFLIGHT_DRAIN_CAP on the master; None: the default cap (harness.base.blast)."""
    hosts: Mapping[int, str]

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "the cluster snapshot") -> SnapshotHead:
        limits = required(d, "straggler_limits", dict, where)
        lw = f"{where}'s 'straggler_limits'"
        hosts = required(d, "hosts", dict, where)
        if not all(isinstance(h, str) and r.isdigit() for r, h in hosts.items()):
            raise SnapshotError(f"{where}'s 'hosts' is not rank -> host name")
        cap = required(d, "drain_cap", (int, float, type(None)), where)
        return cls(num_nodes=required(d, "num_nodes", int, where),
                   profile=required(d, "profile", str, where), tier=required(d, "tier", str, where),
                   straggler_limits=StragglerLimits(
                       float(required(limits, "z_max", (int, float), lw)),
                       required(limits, "min_nodes", int, lw),
                       float(required(limits, "min_rel_dev", (int, float), lw))),
                   drain_cap=None if cap is None else float(cap),
                   hosts={int(r): h for r, h in hosts.items()})

    def to_json(self) -> JSONObject:
        return {"num_nodes": self.num_nodes, "profile": self.profile, "tier": self.tier,
                "straggler_limits": self.straggler_limits.to_dict(),
                # the master's cap, in the snapshot: every node takes the same verdict
                "drain_cap": self.drain_cap,
                "hosts": {str(r): h for r, h in self.hosts.items()}}


@dataclass(frozen=True, slots=True)
class ClusterBandwidth:
    """The cluster all_reduce as the master gathered it (the snapshot's `bandwidth`, written
    by harness.cluster.collectives, judged by PF-CLUSTER-004). Figures are kept as they were
    read (an int stays an int: the bytes on the wire do not change)."""

    size_bytes: int
    nranks: int
    ranks: tuple[int, ...]
    """The nodes it ran over (those that passed their own checks)."""
    floor_gb_s: float | None
    busbw_gb_s: float | None
    """The slowest node's figure; None unless every node in `ranks` gave one."""
    data_ok: bool
    per_rank: Mapping[str, float | None] | None
    """rank -> its busbw; None in the nodes' copy of a large job (`per_rank_on` says where)."""
    errors: tuple[str, ...]
    missing: Mapping[str, str]
    """rank -> why it gave no result (it stopped answering)."""
    per_rank_on: str | None = None
    """Where `per_rank` is when the nodes' copy leaves it out (harness.cluster.verdict)."""

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "the cluster snapshot's 'bandwidth'"
                  ) -> ClusterBandwidth:
        ranks, errors = required(d, "ranks", list, where), required(d, "errors", list, where)
        per_rank = required(d, "per_rank", (dict, type(None)), where)
        if not all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
            raise SnapshotError(f"{where}'s 'ranks' holds a value that is not a rank")
        if not all(isinstance(e, str) for e in errors):
            raise SnapshotError(f"{where}'s 'errors' holds a value that is not text")
        if per_rank is not None and not all(
                isinstance(v, OPT_NUMBER) and not isinstance(v, bool) for v in per_rank.values()):
            raise SnapshotError(f"{where}'s 'per_rank' holds a value that is not a figure")
        on = required(d, "per_rank_on", str, where) if "per_rank_on" in d else None
        return cls(size_bytes=required(d, "size_bytes", int, where),
                   nranks=required(d, "nranks", int, where), ranks=tuple(ranks),
                   floor_gb_s=required(d, "floor_gb_s", OPT_NUMBER, where),
                   busbw_gb_s=required(d, "busbw_gb_s", OPT_NUMBER, where),
                   data_ok=required(d, "data_ok", bool, where), per_rank=per_rank,
                   errors=tuple(errors), missing=text_map(d, "missing", where), per_rank_on=on)

    def to_json(self) -> JSONObject:
        """The wire form: `from_dict(b.to_json()) == b`, key for key in the order read."""
        out: JSONObject = {
            "size_bytes": self.size_bytes, "nranks": self.nranks, "ranks": list(self.ranks),
            "floor_gb_s": self.floor_gb_s, "busbw_gb_s": self.busbw_gb_s,
            "data_ok": self.data_ok,
            "per_rank": dict(self.per_rank) if self.per_rank is not None else None,
            "errors": list(self.errors), "missing": dict(self.missing)}
        if self.per_rank_on is not None:
            out["per_rank_on"] = self.per_rank_on
        return out
