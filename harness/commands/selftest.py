"""`preflight selftest cluster`: the multi-node path on this machine, with injected faults."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.cluster import selftest as cluster_selftest
from harness.cluster.selftest import (
    SELFTEST_TERM_GRACE_S,
    SelftestConfig,
    SelftestError,
    default_work_dir,
    parse_injections,
    print_interrupted,
    selftest_timeouts,
)
from harness.commands import UsageError
from harness.run.interrupt import RunGuard

__all__ = ["cmd_selftest"]


def cmd_selftest(args: argparse.Namespace) -> int:
    try:
        cfg = SelftestConfig(
            nodes=args.nodes, faults=parse_injections(args.inject, args.nodes), tier=args.tier,
            work_dir=Path(args.work_dir) if args.work_dir else default_work_dir(),
            timeouts=selftest_timeouts(args.timeout_scale), groups=args.groups,
        )
    except SelftestError as exc:
        raise UsageError(str(exc)) from None
    guard = RunGuard("preflight selftest", term_grace_s=SELFTEST_TERM_GRACE_S)
    guard.set_finalizer(lambda signum: print_interrupted(cfg, signum))  # before: it may run at once
    guard.install()
    guard.checkpoint()  # a signal held during start-up: its cleanup says so and exits
    try:
        result = cluster_selftest.run_selftest(cfg, echo=not args.json)  # tests patch it there
        with guard.section():  # after a signal: parks; the cleanup prints and exits 128+N
            if args.json:
                print(json.dumps(result.to_dict(cfg), indent=2), flush=True)
            return result.exit_code
    finally:
        guard.close()
