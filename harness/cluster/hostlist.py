"""Slurm hostlists: `node[01-03,07],gpu-a` to names and back (pure functions)."""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["HostlistError", "compress_hostlist", "expand_hostlist"]


class HostlistError(ValueError):
    """A hostlist that Slurm would not accept; str() is the message."""


def expand_hostlist(spec: str) -> list[str]:
    """Slurm hostlist to names: `node[01-03,07],gpu-a` -> node01 node02 node03 node07 gpu-a.
    Zero padding is kept from the range's first bound; several bracket groups multiply."""
    hosts: list[str] = []
    for item in _split_top(spec.strip()):
        if item:
            hosts.extend(_expand_one(item))
    return hosts


def _split_top(spec: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced brackets in hostlist {spec!r}")
    parts.append("".join(cur))
    return parts


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end():]
    out = []
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise HostlistError(f"bad range {part!r} in hostlist {item!r}")
        width = len(lo)
        for n in range(int(lo), int(hi or lo) + 1):
            out.extend(_expand_one(f"{head}{n:0{width}d}{tail}"))
    return out


def compress_hostlist(hosts: Sequence[str]) -> str:
    """Names to a Slurm hostlist (the inverse of expand_hostlist for `prefixNN` names):
    node01 node02 node03 node07 -> node[01-03,07]. Order: by prefix, then number."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    numbered = []
    for h in dict.fromkeys(hosts):
        m = re.fullmatch(r"(.*?)(\d+)", h)
        if m:
            numbered.append((m.group(1), m.group(2)))
        else:
            plain.append(h)
    # Zero-padded names (node07) fix their prefix's width; node10 then joins node[07-10].
    padded = {(p, len(d)) for p, d in numbered if d.startswith("0") and len(d) > 1}
    for prefix, digits in numbered:
        width = len(digits) if (prefix, len(digits)) in padded else 0
        groups.setdefault((prefix, width), []).append(int(digits))
    out = []
    for (prefix, width), nums in sorted(groups.items()):
        nums.sort()
        if len(nums) == 1:
            out.append(f"{prefix}{str(nums[0]).zfill(width)}")
            continue
        ranges, start, prev = [], nums[0], nums[0]
        for n in [*nums[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            lo, hi = str(start).zfill(width), str(prev).zfill(width)
            ranges.append(lo if start == prev else f"{lo}-{hi}")
            if n is not None:
                start = prev = n
        out.append(f"{prefix}[{','.join(ranges)}]")
    return ",".join(sorted(plain) + out)
