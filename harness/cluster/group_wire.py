"""The job-shaped groups' wire types (harness.cluster.groups, measured by
harness.cluster.group_phase, judged by PF-CLUSTER-008 in harness.cluster.group_check): the
master's plan (the snapshot's `groups_plan`) and what the groups measured (`groups`). As in
harness.cluster.wire, every field is required and checked for its type: a missing or malformed
one is a SnapshotError naming it, never a default, and `from_dict(x).to_json()` gives back the
same JSON, key for key and in the same order."""

from __future__ import annotations

from dataclasses import dataclass

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.cluster.groups import NodeGroup
from harness.cluster.isolate import IsolationResult
from harness.cluster.wire import NUMBER, OPT_INT, OPT_NUMBER, OPT_STR, items, required

__all__ = ["GroupResult", "GroupsPlan", "JobGroups"]


@dataclass(frozen=True, slots=True)
class GroupsPlan:
    """The master's plan (harness.cluster.group_phase.plan_groups): the layout and the groups
    that span nodes; or, for a layout that cannot be used, why (`error`, judged a failure)."""

    layout: str | None
    """The layout as read (`tp=2,ep=2 (--groups ...)`); None when it cannot be used."""
    error: str | None
    """Why the layout cannot be used (it does not divide the job, a bad value), else None."""
    gpus_per_node: int | None
    """The ranks per node the groups were laid out with; None with an `error`."""
    groups: tuple[NodeGroup, ...]

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "the groups plan") -> GroupsPlan:
        return cls(layout=required(d, "layout", OPT_STR, where),
                   error=required(d, "error", OPT_STR, where),
                   gpus_per_node=required(d, "gpus_per_node", OPT_INT, where),
                   groups=tuple(NodeGroup.from_dict(g, f"{where}'s group {i}")
                                for i, g in enumerate(items(d, "groups", dict, where))))

    def to_json(self) -> JSONObject:
        return {"layout": self.layout, "error": self.error, "gpus_per_node": self.gpus_per_node,
                "groups": [g.to_json() for g in self.groups]}


@dataclass(frozen=True, slots=True)
class GroupResult:
    """One group's measurement and judgement. Figures are kept as they were read."""

    group: NodeGroup
    busbw_gb_s: float | None
    """The slowest member's all_reduce busbw; None when it errored or a member was lost."""
    alltoall_gb_s: float | None
    """The slowest member's all_to_all (expert groups), else None."""
    error: str | None
    """What stopped the measurement (a member that did not report, a collective error)."""
    threshold_gb_s: float
    passed: bool
    isolation: IsolationResult | None
    """A failing group's own pairwise rounds (None: it passed, or see `isolation_not_run`)."""
    isolation_not_run: str | None
    """Why a failing group's pairs were not measured (the phase's rounds were used up)."""

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "a group's result") -> GroupResult:
        iso = required(d, "isolation", (dict, type(None)), where)
        return cls(group=NodeGroup.from_dict(d, where),
                   busbw_gb_s=required(d, "busbw_gb_s", OPT_NUMBER, where),
                   alltoall_gb_s=required(d, "alltoall_gb_s", OPT_NUMBER, where),
                   error=required(d, "error", OPT_STR, where),
                   threshold_gb_s=required(d, "threshold_gb_s", NUMBER, where),
                   passed=required(d, "passed", bool, where),
                   isolation=None if iso is None else IsolationResult.from_dict(
                       iso, f"{where}'s 'isolation'"),
                   isolation_not_run=required(d, "isolation_not_run", OPT_STR, where))

    def to_json(self) -> JSONObject:
        """The group's fields (NodeGroup.to_json), then its figures and judgement."""
        return {**self.group.to_json(), "busbw_gb_s": self.busbw_gb_s,
                "alltoall_gb_s": self.alltoall_gb_s, "error": self.error,
                "threshold_gb_s": self.threshold_gb_s, "passed": self.passed,
                "isolation": None if self.isolation is None else self.isolation.to_json(),
                "isolation_not_run": self.isolation_not_run}


@dataclass(frozen=True, slots=True)
class JobGroups:
    """The snapshot's `groups`: the layout the groups phase ran and each group's result."""

    layout: str
    results: tuple[GroupResult, ...]

    @classmethod
    def from_dict(cls, d: JSONMapping, where: str = "the job groups") -> JobGroups:
        return cls(layout=required(d, "layout", str, where),
                   results=tuple(GroupResult.from_dict(r, f"{where}'s result {i}")
                                 for i, r in enumerate(items(d, "results", dict, where))))

    def to_json(self) -> JSONObject:
        return {"layout": self.layout, "results": [r.to_json() for r in self.results]}
