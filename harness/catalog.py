"""`preflight list` and `preflight explain`: the checks a run would select, collected the way
`run` collects them (harness.run.runner.collect_checks), as lines for people or records for tools."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject
from harness.run.suites import Suite

if TYPE_CHECKING:
    from harness.run.selection import ItemRecord

__all__ = ["Catalog", "CatalogError", "catalog", "explain_lines", "find", "list_lines",
           "list_records"]

#: The keys `preflight list --json` gives for each check.
LIST_KEYS = ("id", "tier", "title", "exclusive", "suite", "kind")


class CatalogError(ValueError):
    """The selection asked for cannot be collected (bad -k, missing suite); str() says why."""


@dataclass(slots=True)
class Catalog:
    """The suites, the checks they hold (built-in suite first, then by ID) and the problems
    (files that could not be collected: the rest is still listed)."""

    suites: list[Suite] = field(default_factory=list)
    checks: list[ItemRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def catalog(extra: Sequence[str] = (), *, tier: str, keyword: str | None = None,
            env: Mapping[str, str] | None = None) -> Catalog:
    """The checks `preflight run --tier TIER -k KEYWORD --extra-checks ...` would select."""
    from harness.run.runner import collect_checks
    from harness.run.selection import SelectionError, check_keyword
    from harness.run.suites import SuiteError, resolve_suites

    try:
        suites = resolve_suites(extra, env)
        if keyword is not None:
            check_keyword(keyword)
    except (SuiteError, SelectionError) as exc:
        raise CatalogError(str(exc)) from None
    found = collect_checks(suites, tier=tier, keyword=keyword, env=env)
    if found.usage_error:
        raise CatalogError(found.usage_error)
    order = {s.name: i for i, s in enumerate(suites)}
    checks = sorted(found.checks, key=lambda c: (order.get(c["suite"], len(order)), c["id"]))
    return Catalog(suites, checks, found.problems)


def list_records(checks: Sequence[ItemRecord]) -> list[JSONObject]:
    return [{k: c.get(k) for k in LIST_KEYS} for c in checks]


def list_lines(checks: Sequence[ItemRecord]) -> list[str]:
    """`ID  tier  suite  title`, one line per check, columns as wide as their longest value."""
    width = max([12, *(len(c["id"]) for c in checks)])
    suite_width = max([8, *(len(c["suite"]) for c in checks)])
    return [f"{c['id']:{width}} {c['tier']:10} {c['suite']:{suite_width}} {c['title']}"
            for c in checks]


def find(checks: Sequence[ItemRecord], check_id: str) -> ItemRecord | None:
    """The check with this ID (any case), or None."""
    wanted = check_id.strip().lower()
    return next((c for c in checks if c["id"].lower() == wanted), None)


def explain_lines(spec: ItemRecord, suites: Sequence[Suite]) -> list[str]:
    """What `preflight explain` prints about one check."""
    where = next((f"{s.name} ({s.path})" for s in suites if s.name == spec["suite"]), spec["suite"])
    alone = " (runs alone: owns GPUs/network)" if spec["exclusive"] else ""
    return [
        f"{spec['id']}  {spec['title']}",
        f"tier:     {spec['tier']}{alone}",
        f"suite:    {where}{'' if spec['kind'] == 'check' else ' (a plain pytest test)'}",
        f"defined:  {spec['defined']} ({spec['nodeid']})",
        f"why:      {spec['why'] or '-'}",
        f"remedy:   {spec['remedy'] or '-'}",
        *(f"{'reads:' if n == 0 else '':9} {line}" for n, line in enumerate(spec.get("reads") or ())),
    ]
