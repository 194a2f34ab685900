"""`preflight inspect KIND FILE`: parse a saved log or tool output, redacted, plain or JSON."""

from __future__ import annotations

import argparse
import json
import sys

from harness.base.jsonout import dumps_indented
from harness.base.redact import Redactor
from harness.commands import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError
from harness.parsers import ParseError, inspect_kind, inspect_kinds
from harness.profiles.model import ProfileError
from harness.profiles.table import get_profile

__all__ = ["DEFAULT_PROFILE", "cmd_inspect", "print_plain", "profile_hint"]


def cmd_inspect(args: argparse.Namespace) -> int:
    inspect = inspect_kind(args.kind)  # only its parser is imported (start-up is on every log)
    if inspect is None:
        known = ", ".join(sorted(inspect_kinds()))
        raise UsageError(f"unknown kind {args.kind!r}; known kinds: {known}")
    try:
        profile = get_profile(args.profile or DEFAULT_PROFILE)
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    try:
        stream = sys.stdin if args.file == "-" else open(  # noqa: SIM115
            args.file, encoding="utf-8", errors="replace", newline=""
        )
    except OSError as exc:
        raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    try:
        with stream:
            result = inspect(stream, profile=profile)
    except ParseError as exc:
        error = {"error": str(exc), "kind": args.kind, "file": args.file}
        print(json.dumps(error, indent=2) if args.json else f"preflight inspect: {exc}",
              file=sys.stdout if args.json else sys.stderr)
        return EXIT_USAGE
    if not getattr(inspect, "redacted", False):  # (a parser that redacts its whole result itself)
        result = Redactor().obj(result)
    if args.json:
        print(dumps_indented(result))  # json.dumps(indent=2)'s text, C-encoded rows
    else:
        print_plain(result)
    if args.profile is None and (hint := profile_hint(result)):
        print(f"preflight inspect: {hint}", file=sys.stderr)
    if args.fail_on:
        from harness.commands.inspect_gate import problems

        found = problems(args.kind, result, args.fail_on)
        for line in found[:20]:
            print(f"preflight inspect: {args.fail_on}: {line}", file=sys.stderr)
        return EXIT_FAILED if found else EXIT_OK
    return EXIT_OK


#: What `inspect` judges against when no --profile is given (a CPU machine: nothing to hold a
#: GPU figure to, so the GPU gates say n/a, and the hint says how to get a verdict).
DEFAULT_PROFILE = "local-cpu"


def profile_hint(result: object) -> str:
    """The hint to pass --profile, when a result judged without one left verdicts n/a (or
    judged an env file against local-cpu); '' when nothing was judged."""
    if not isinstance(result, dict):
        return ""
    verdicts = result.get("verdicts")
    na = [v for v in verdicts or [] if isinstance(v, dict) and v.get("status") == "n/a"]
    if not na and result.get("profile") != DEFAULT_PROFILE:
        return ""
    what = (f"{len(na)} verdict{'s are' if len(na) != 1 else ' is'} n/a" if na
            else "the values were judged")
    return (f"{what} against {DEFAULT_PROFILE} (no --profile given): pass --profile NAME, "
            "e.g. --profile p5.48xlarge, to judge them against an instance type "
            "(`preflight profiles` lists them)")


def print_plain(value: object, indent: str = "") -> None:
    """A parsed result as indented `key: value` lines and `- item` lists."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict | list) and v:
                print(f"{indent}{k}:")
                print_plain(v, indent + "  ")
            else:
                print(f"{indent}{k}: {v}")
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                print(f"{indent}-")
                print_plain(v, indent + "  ")
            else:
                print(f"{indent}- {v}")
    else:
        print(f"{indent}{value}")
