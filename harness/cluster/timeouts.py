"""Every wait of the cluster step, from the environment; their sum is the hard upper bound
that `preflight run` prints at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from harness.base.settings import get_float, get_str
from harness.topology.model import TopologyError

__all__ = ["ClusterTimeouts"]


def _env_float(env: Mapping[str, str], name: str) -> float:
    """`name` as a number, its default from the settings registry (harness.base.settings) when unset.
    Read as float for every wait, the rounds included (`4.0` is accepted, as it always was)."""
    return get_float(name, env, error=TopologyError) or 0.0


#: Rounds of node-disjoint groups the groups phase runs (one per kind in the usual layouts:
#: a kind's groups partition the nodes); groups past them are reported as not measured.
MAX_GROUP_ROUNDS = 2


@dataclass(kw_only=True, slots=True)
class ClusterTimeouts:
    """Every wait of the cluster step, s. Environment: PREFLIGHT_JOIN_TIMEOUT_S,
    PREFLIGHT_GATHER_TIMEOUT_S, PREFLIGHT_COLLECTIVE_TIMEOUT_S, PREFLIGHT_ISOLATION_ROUNDS."""

    join_s: float = 300.0
    """Reaching the master: covers nodes whose containers start later than others."""
    local_s: float = 300.0
    """The node-local checks (the tier's run budget)."""
    gather_s: float = 60.0
    """Slack for the slowest node's result and for the master's snapshot to arrive."""
    collective_s: float = 60.0
    """One phase of one collective (process-group init, warm-up, timed loop, data check)."""
    isolation_rounds: int = 4
    exit_s: float = 30.0
    """The master keeps serving the store until every node has read the verdict."""
    groups: bool = False
    """A job layout is given (PREFLIGHT_GROUPS, SM_HPS): the job-shaped groups phase runs."""

    @property
    def bench_s(self) -> float:
        """Group set-up plus the bench's four bounded phases, plus publishing."""
        return 5 * self.collective_s + self.gather_s

    @property
    def isolation_s(self) -> float:
        return self.isolation_rounds * self.bench_s

    @property
    def groups_s(self) -> float:
        """The job-shaped groups phase: at most MAX_GROUP_ROUNDS rounds (each a group set-up,
        an all_reduce and an all_to_all: 2 benches), then isolation inside failing groups."""
        return (MAX_GROUP_ROUNDS * 2 * self.bench_s + self.isolation_s) if self.groups else 0.0

    @property
    def hard_bound_s(self) -> float:
        return (self.join_s + self.local_s + self.gather_s + self.bench_s + self.isolation_s
                + self.groups_s + self.exit_s)

    def describe(self) -> str:
        return (f"join {self.join_s:g} + local {self.local_s:g} + gather {self.gather_s:g} + "
                f"cluster bandwidth {self.bench_s:g} + isolation {self.isolation_rounds} x "
                f"{self.bench_s:g}" + (f" + job groups {self.groups_s:g}" if self.groups else "")
                + f" + exit {self.exit_s:g} = {self.hard_bound_s:g} s")

    def to_env(self) -> dict[str, str]:
        """The variables `from_env` reads (local_s travels as the profile's run budget)."""
        return {
            "PREFLIGHT_JOIN_TIMEOUT_S": f"{self.join_s:g}",
            "PREFLIGHT_GATHER_TIMEOUT_S": f"{self.gather_s:g}",
            "PREFLIGHT_COLLECTIVE_TIMEOUT_S": f"{self.collective_s:g}",
            "PREFLIGHT_ISOLATION_ROUNDS": str(self.isolation_rounds),
            "PREFLIGHT_EXIT_TIMEOUT_S": f"{self.exit_s:g}",
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str], local_s: float) -> ClusterTimeouts:
        return cls(
            join_s=_env_float(env, "PREFLIGHT_JOIN_TIMEOUT_S"),
            local_s=local_s,
            gather_s=_env_float(env, "PREFLIGHT_GATHER_TIMEOUT_S"),
            collective_s=_env_float(env, "PREFLIGHT_COLLECTIVE_TIMEOUT_S"),
            isolation_rounds=int(_env_float(env, "PREFLIGHT_ISOLATION_ROUNDS")),
            exit_s=_env_float(env, "PREFLIGHT_EXIT_TIMEOUT_S"),
            groups=_has_layout(env),
        )


def _has_layout(env: Mapping[str, str]) -> bool:
    """A job layout is given (a bad one too: the verdict says what is wrong with it)."""
    from harness.cluster.groups import GroupError, layout_from_env

    try:
        return layout_from_env(env, get_str("PREFLIGHT_GROUPS", env)) is not None
    except GroupError:
        return True
