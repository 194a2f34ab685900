"""Numbers read from tool output, safely: ASCII digits only, bounded, finite.

`int()` and `float()` accept far more than a tool prints: Unicode digits (`int("١٢")` is 12,
`"²".isdigit()` is True but `int("²")` raises), underscores (`int("1_0")` is 10), 4,301+ digit
strings raise (Python's int-to-str limit), `float("1e999")` is inf and `round(inf)` raises. Regex
`\\d` matches every Unicode decimal digit. The parsers read numbers through these helpers (and
their patterns use `[0-9]`), so garbage is "not a number", never a traceback or a wrong value.
"""

from __future__ import annotations

import math

__all__ = ["MAX_INT_DIGITS", "ascii_float", "ascii_int", "is_ascii_int"]

#: Longest integer read (18 digits: every count, id and size a tool prints fits in 64 bits).
MAX_INT_DIGITS = 18


def is_ascii_int(text: str) -> bool:
    """`text` is an optionally signed run of at most MAX_INT_DIGITS ASCII digits."""
    digits = text[1:] if text[:1] in ("+", "-") else text
    return 0 < len(digits) <= MAX_INT_DIGITS and digits.isascii() and digits.isdigit()


def ascii_int(text: str | None) -> int | None:
    """The integer `text` spells (surrounding blanks allowed), else None."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if is_ascii_int(text) else None


def ascii_float(text: str | None, *, allow_nan: bool = False) -> float | None:
    """The finite number `text` spells (`12`, `-0.5`, `1.2e+03`), else None; `nan`/`-nan` give
    NaN only with `allow_nan`. `inf` and numbers too large for a float are None."""
    if text is None or not text.isascii() or "_" in text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    if math.isfinite(value):
        return value
    return math.nan if allow_nan and value != value else None
