"""Slurm hostlists: `node[01-03,07],gpu-a` to names and back (pure functions)."""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence

__all__ = ["MAX_HOSTS", "HostlistError", "compress_hostlist", "expand_hostlist"]


class HostlistError(ValueError):
    """A hostlist that Slurm would not accept; str() is the message."""


#: Most hosts one hostlist may name. Slurm's own parser takes a range larger than 64K hosts for
#: an error (SchedMD/slurm src/common/hostlist.c: `MAX_RANGE (64*1024)`, "anything larger will
#: be assumed to be an error"); the largest clusters have some 10,000 nodes. The bound is on the
#: whole list, checked before anything is expanded (`n[0-9999][0-9999]` is 10^8 names).
MAX_HOSTS = 64 * 1024
_NUMBER = re.compile(r"[0-9]{1,18}")  # ASCII digits only: `"²".isdigit()` is True, int() raises
_BRACKETS = re.compile(r"\[([^\[\]]*)\]")


def expand_hostlist(spec: str) -> list[str]:
    """Slurm hostlist to names: `node[01-03,07],gpu-a` -> node01 node02 node03 node07 gpu-a.
    Zero padding is kept from the range's first bound; several bracket groups multiply. A list
    that names more than MAX_HOSTS hosts, or that Slurm would not accept, is a HostlistError."""
    items = [_parse_one(item) for item in _split_top(spec.strip()) if item]
    total = 0
    for parts in items:
        count = 1
        for part in parts:
            count *= len(part) if isinstance(part, list) else 1
        total += count
        if total > MAX_HOSTS:
            raise HostlistError(f"hostlist {_shown(spec)} names more than {MAX_HOSTS:,} hosts (more "
                                "than Slurm itself accepts in a range): not a real node list")
    hosts: list[str] = []
    for parts in items:
        hosts.extend("".join(names) for names in itertools.product(
            *([part] if isinstance(part, str) else part for part in parts)))
    return hosts


def _shown(spec: str) -> str:
    return repr(spec if len(spec) <= 200 else spec[:200] + "...")


def _split_top(spec: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, []
    for ch in spec:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced brackets in hostlist {_shown(spec)}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced brackets in hostlist {_shown(spec)}")
    parts.append("".join(cur))
    return parts


def _parse_one(item: str) -> list[str | list[str]]:
    """`rack[1-2]-n[1-2]` -> ["rack", ["1", "2"], "-n", ["1", "2"]]: literals and the names of
    each bracket group (each group at most MAX_HOSTS names)."""
    parts: list[str | list[str]] = []
    pos = 0
    for m in _BRACKETS.finditer(item):
        parts.append(item[pos:m.start()])
        parts.append(_expand_group(m.group(1), item))
        pos = m.end()
    if "[" in item[pos:] or "]" in item[pos:]:
        raise HostlistError(f"nested or unbalanced brackets in hostlist item {_shown(item)}")
    parts.append(item[pos:])
    return parts


def _expand_group(group: str, item: str) -> list[str]:
    """`01-03,07` -> 01 02 03 07."""
    names: list[str] = []
    for part in group.split(","):
        lo, dash, hi = part.partition("-")
        if not _NUMBER.fullmatch(lo) or (dash and not _NUMBER.fullmatch(hi)):
            raise HostlistError(f"bad range {_shown(part)} in hostlist {_shown(item)} "
                                "(expected numbers: 1-4, 01-08, 7)")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise HostlistError(f"range {_shown(part)} in hostlist {_shown(item)} runs backwards")
        if last - first + 1 + len(names) > MAX_HOSTS:
            raise HostlistError(f"range {_shown(part)} in hostlist {_shown(item)} names more than "
                                f"{MAX_HOSTS:,} hosts (more than Slurm itself accepts in a range): "
                                "not a real node list")
        width = len(lo)
        names.extend(f"{n:0{width}d}" for n in range(first, last + 1))
    return names


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
