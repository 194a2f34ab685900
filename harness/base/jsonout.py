"""`json.dumps(value, indent=2, default=str)`, the same text, written faster.

With an indent the standard library encodes in pure Python (its C encoder runs only without
one): ~15 us a row of a 10,000-row table. Here each object or array whose members are all
scalars (a table's row, a list of numbers) goes to the C encoder with the indentation as its
separators (`",\\n" + indent`; a JSON text has no raw line break inside a string, so its own
line breaks are exactly the separators), and the levels above it are joined here. Anything else
(a key that is not a str, a member of another type) is written by json.dumps itself and
indented to its level. Hand-written because no well-kept library writes json.dumps' indented
text byte for byte (orjson indents by 2 but writes floats and non-ASCII text differently).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from json.encoder import c_make_encoder, encode_basestring_ascii

__all__ = ["dumps_indented"]

_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})  # keys json writes as they are (others: json.dumps itself)
_INDENT = "  "


def dumps_indented(value: object) -> str:
    """json.dumps(value, indent=2, default=str), byte for byte."""
    return _dumps(value, 0)


def _dumps(value: object, level: int) -> str:
    encode = _encoder(level)
    if encode is None:  # no C encoder (another Python): json's own
        return json.dumps(value, indent=2, default=str).replace("\n", "\n" + _INDENT * level)
    kind = type(value)
    if kind in _SCALARS:
        return "".join(encode(value, 0))
    if kind is dict and value and _STR.issuperset(map(type, value)):  # type: ignore[call-overload]
        members = value.values()  # type: ignore[attr-defined]
    elif kind in (list, tuple) and value:
        members = value  # type: ignore[assignment]
    else:  # an empty container, or a shape left to json itself, indented to this level
        return json.dumps(value, indent=2, default=str).replace("\n", "\n" + _INDENT * level)
    inner = "\n" + _INDENT * (level + 1)
    if _SCALARS.issuperset(map(type, members)):  # the C encoder, the indentation its separators
        text = "".join(encode(value, 0))
        return text[0] + inner + text[1:-1] + "\n" + _INDENT * level + text[-1]
    done = ["".join(encode(v, 0)) if type(v) in _SCALARS else _dumps(v, level + 1)
            for v in members]  # (a scalar has no separators: any level's encoder)
    if kind is dict:
        done = [f"{encode_basestring_ascii(k)}: {v}"
                for k, v in zip(value, done, strict=True)]  # type: ignore[call-overload]
    start, end = "{}" if kind is dict else "[]"
    return start + inner + ("," + inner).join(done) + "\n" + _INDENT * level + end


@functools.lru_cache(maxsize=64)
def _encoder(level: int) -> Callable[[object, int], tuple[str, ...]] | None:
    """json's C encoder for members at `level` + 1 (what json.dumps makes for each call, made
    once): ASCII output, NaN allowed, no circular-reference markers (scalars only)."""
    if c_make_encoder is None:
        return None
    return c_make_encoder(None, None, encode_basestring_ascii, None, ": ",  # type: ignore[no-any-return]
                          ",\n" + _INDENT * (level + 1), False, False, True)
