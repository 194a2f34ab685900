"""What a run says about its selection of checks: the `preflight list` command that shows what
it matches, and the messages of a selection that checks nothing or judges nothing (every
selected check skipped). harness.run.runner puts them in the report."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from harness.profiles.model import Profile
    from harness.report.model import Report
    from harness.run.suites import Suite

__all__ = ["Selection", "empty_selection", "list_command", "nothing_judged"]


class Selection(Protocol):
    """What a run selected its checks by (harness.run.runner.RunConfig is one)."""

    @property
    def profile(self) -> Profile: ...
    @property
    def tier(self) -> str: ...
    @property
    def keyword(self) -> str | None: ...
    @property
    def extra_pytest_args(self) -> Sequence[str]: ...


def list_command(tier: str | None, keyword: str | None, suites: Sequence[Suite]) -> str:
    """The `preflight list` command that shows what a selection matches."""
    argv = ["preflight", "list"]
    argv += ["--tier", tier] if tier else []
    argv += ["-k", keyword] if keyword else []
    for s in suites:
        argv += ["--extra-checks", str(s.path)] if s.kind == "extra" else []
    return shlex.join(argv)


def _selection_words(cfg: Selection, suites: Sequence[Suite]) -> str:
    """`profile p5.48xlarge; tier preflight; -k 'PF-GPU-001'; suites built-in (...)`."""
    parts = [f"profile {cfg.profile.name}", f"tier {cfg.tier}"]
    if cfg.keyword:
        parts.append(f"-k {cfg.keyword!r}")
    if cfg.extra_pytest_args:
        parts.append(f"pytest arguments {shlex.join(cfg.extra_pytest_args)!r}")
    parts.append("suites " + ", ".join(s.describe() for s in suites))
    return "; ".join(parts)


def _list_hint(cfg: Selection, suites: Sequence[Suite]) -> str:
    return (f"`{list_command(cfg.tier, cfg.keyword, suites)}` shows what this selection matches, "
            "`preflight list` every check")


def empty_selection(cfg: Selection, suites: Sequence[Suite]) -> str:
    return (f"no check selected ({_selection_words(cfg, suites)}): a run that checks nothing "
            f"proves nothing. {_list_hint(cfg, suites)}")


#: Skip reasons quoted in the nothing-judged message.
_SKIPS_SHOWN = 3


def nothing_judged(cfg: Selection, suites: Sequence[Suite], report: Report) -> str | None:
    """The usage error of a run whose every selected check reported and was skipped (not
    applicable to the profile, or not run): nothing was judged, so nothing was proven. None
    when something was judged, or the run already failed to account for its selection. On a
    multi-node job a node's skips may be judged by another node (the leader's multi-node
    test): the cluster verdict decides there (harness.cluster.verdict)."""
    sel = report.selection
    if (report.usage_error or report.harness_errors or not report.checks
            or sel.get("missing") or sel.get("duplicates")
            or any(c.outcome != "skip" for c in report.checks)):
        return None
    why = "; ".join(f"{c.id}: {c.message}" for c in report.checks[:_SKIPS_SHOWN])
    more = (f" and {len(report.checks) - _SKIPS_SHOWN} more"
            if len(report.checks) > _SKIPS_SHOWN else "")
    return (f"every selected check was skipped, nothing was judged "
            f"({_selection_words(cfg, suites)}): {len(report.checks)} skipped ({why}{more}). "
            f"A run that judges nothing proves nothing. {_list_hint(cfg, suites)}")
