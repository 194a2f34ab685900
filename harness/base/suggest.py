"""`did you mean ...?` for a mistyped name (a profile, a check ID): the closest known names,
by difflib's ratio (the standard library's; no fuzzy-matching dependency for one hint)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["did_you_mean"]


def did_you_mean(word: str, known: Iterable[str], n: int = 3) -> str:
    """`; did you mean 'p5.48xlarge'?` (up to `n` names, closest first), or '' when none is
    close. Case-insensitive; names the word is a prefix of come first."""
    names = sorted(set(known))
    by_lower = {k.lower(): k for k in names}
    wanted = word.strip().lower()
    close = [k for k in by_lower if wanted and k.startswith(wanted)]
    close += [k for k in difflib.get_close_matches(wanted, list(by_lower), n=n, cutoff=0.6)
              if k not in close]
    found = [by_lower[k] for k in close[:n]]
    if not found:
        return ""
    return "; did you mean " + " or ".join(repr(f) for f in found) + "?"
