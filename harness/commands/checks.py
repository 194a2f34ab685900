"""`preflight list` and `preflight explain`: the checks `run` would select, and one in full."""

from __future__ import annotations

import argparse
import json
import sys

from harness.base.suggest import did_you_mean
from harness.base.tiers import TIERS
from harness.catalog import (
    Catalog,
    CatalogError,
    catalog,
    explain_lines,
    find,
    list_lines,
    list_records,
)
from harness.commands import EXIT_HARNESS, EXIT_OK, UsageError

__all__ = ["cmd_explain", "cmd_list"]


def _catalog(args: argparse.Namespace, tier: str, keyword: str | None) -> Catalog:
    """The checks `run` would select (harness.catalog); its problems said on stderr."""
    try:
        found = catalog(args.extra_checks, tier=tier, keyword=keyword)
    except CatalogError as exc:
        raise UsageError(str(exc)) from None
    for problem in found.problems:
        print(f"preflight: harness error: {problem}", file=sys.stderr)
    return found


def cmd_list(args: argparse.Namespace) -> int:
    found = _catalog(args, args.tier or TIERS[-1], args.keyword)
    lines = ([json.dumps(list_records(found.checks), indent=2)] if args.json
             else list_lines(found.checks))
    if lines:
        print("\n".join(lines))
    return EXIT_HARNESS if found.problems else EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    found = _catalog(args, TIERS[-1], None)
    spec = find(found.checks, args.check_id)
    if spec is None:
        ids = [c["id"] for c in found.checks]
        raise UsageError(f"unknown check {args.check_id!r}{did_you_mean(args.check_id, ids)}; "
                         f"known checks: {', '.join(ids)}")
    if args.json:  # every fact `explain` prints, by key
        print(json.dumps({**spec, "suite_path": next(
            (str(s.path) for s in found.suites if s.name == spec["suite"]), None)}, indent=2,
            default=str))
    else:
        print("\n".join(explain_lines(spec, found.suites)))
    return EXIT_OK
