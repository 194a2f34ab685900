"""`preflight ledger list | clear SERIAL --why TEXT`: the bad-hardware ledger (harness.memory.ledger),
read and cleared by people. A clear is a recorded line (who, when, why), never a deletion."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

from harness.base.redact import Redactor
from harness.base.settings import get_str
from harness.commands import EXIT_HARNESS, EXIT_OK, UsageError
from harness.commands.memory import ledger_user
from harness.memory.ledger import Ledger
from harness.memory.store import Store, StoreError

__all__ = ["cmd_ledger"]


def _ledger(args: argparse.Namespace) -> Ledger:
    where = args.ledger or get_str("PREFLIGHT_LEDGER", os.environ)
    if not where:
        raise UsageError("no ledger: give --ledger WHERE or set PREFLIGHT_LEDGER "
                         "(a folder or an s3:// prefix)")
    try:
        return Ledger(Store.of(where))
    except ValueError as exc:
        raise UsageError(f"--ledger / PREFLIGHT_LEDGER: {exc}") from None


def cmd_ledger(args: argparse.Namespace) -> int:
    """Exit 0, 2 on a usage error, 3 when the ledger cannot be read or written."""
    ledger = _ledger(args)
    redactor = Redactor.of(os.environ)
    try:
        if args.ledger_cmd == "clear":
            if not args.why.strip():
                raise UsageError("--why must say why the entry is cleared")
            entry = ledger.clear(args.key, why=args.why, by=ledger_user(os.environ),
                                 host=socket.gethostname())
            print(redactor.text(f"cleared {args.key} in {ledger.store} by {entry['by']} at "
                                f"{entry['at']}: {args.why}"))
            return EXIT_OK
        entries, bad = ledger.entries()
    except StoreError as exc:
        print(f"preflight: error: {redactor.text(str(exc))}", file=sys.stderr)
        return EXIT_HARNESS
    open_ = ledger.open_failures(entries)
    shown = entries if args.all else open_
    if args.json:
        print(json.dumps(redactor.obj({"ledger": str(ledger.store), "open": open_,
                                       "entries": entries, "unreadable_lines": bad}), indent=2))
        return EXIT_OK
    print(redactor.text(f"ledger {ledger.store}: {len(entries)} entries, {len(open_)} open"
                        + (f", {bad} unreadable lines" if bad else "")))
    for e in shown:
        if e.get("kind") == "clear":
            line = f"{e.get('at')}  CLEAR   {e.get('part')}  by {e.get('by')}: {e.get('why')}"
        else:
            hw = e.get("hardware") or {}
            line = (f"{e.get('at')}  {'OPEN' if e in open_ else 'cleared'}  {e.get('part')}  "
                    f"{hw.get('type', '?')}  {e.get('check')} on {e.get('host')}: "
                    f"{e.get('message')}")
        print(redactor.text(line))
    return EXIT_OK
