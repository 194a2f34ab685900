"""`preflight profiles [NAME]`: the profiles and the thresholds they hold."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from harness.base.settings import get_path
from harness.commands import EXIT_OK, UsageError
from harness.detect.resolve import resolve
from harness.profiles.model import ProfileError
from harness.profiles.table import (
    BUILTIN_PROFILES,
    get_profile,
    load_profile_file,
    threshold_rows,
    weakened_line,
)

__all__ = ["cmd_profiles"]


def cmd_profiles(args: argparse.Namespace) -> int:
    try:
        profiles = load_profile_file(args.profile_file) if args.profile_file else BUILTIN_PROFILES
        if args.derive:
            sysroot = get_path("PREFLIGHT_SYSROOT") or Path("/")
            chosen = [resolve("derived", args.profile_file, sysroot=sysroot)[0]]
            args.name = chosen[0].name
        else:
            chosen = [get_profile(args.name, profiles)] if args.name else list(profiles.values())
    except ProfileError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps({p.name: p.to_dict() for p in chosen}, indent=2))
        return EXIT_OK
    console = Console(highlight=False)
    if not args.name:
        table = Table(title="gpu-preflight profiles")
        for col in ("profile", "GPUs", "model", "fabric", "EFA", "GDR", "NVLink busbw GB/s",
                    "net busbw GB/s", "description"):
            table.add_column(col)
        for p in chosen:
            table.add_row(p.name, str(p.num_gpus), p.gpu_model or "-", p.fabric or "-",
                          str(p.num_efa_devices), "yes" if p.gdr_required else "no",
                          _num(p.nvlink_busbw_gb_s_min), _num(p.net_busbw_gb_s_min), p.description)
        console.print(table)
        for p in chosen:
            if line := weakened_line(p):
                console.print(line)
        console.print("`preflight profiles NAME` shows every threshold with its source.")
        return EXIT_OK
    p = chosen[0]
    table = Table(title=f"{p.name}: {p.description}")
    for col in ("field (unit in the name)", "value", "source"):
        table.add_column(col)
    for row in threshold_rows(p):
        table.add_row(*row)
    console.print(table)
    if line := weakened_line(p):
        console.print(line)
    return EXIT_OK


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
