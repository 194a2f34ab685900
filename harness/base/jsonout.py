"""`json.dumps(value, indent=2, default=str)`, the same text, written faster.

With an indent the standard library encodes in pure Python (its C encoder runs only without
one): ~15 us a row of a 10,000-row table. Here each object or array whose members are all
scalars (a table's row, a list of numbers) goes to the C encoder with the indentation as its
separators (`",\\n" + indent`; a JSON text has no raw line break inside a string, so its own
line breaks are exactly the separators), and the levels above it are joined here; an array of a
table's rows (objects with the same keys, each column scalars or objects of scalars) is written a
column at a time and its rows filled into one template (`_rows`). Anything else
(a key that is not a str, a member of another type) is written by json.dumps itself and
indented to its level. Hand-written because no well-kept library writes json.dumps' indented
text byte for byte (orjson indents by 2 but writes floats and non-ASCII text differently).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from itertools import chain
from json.encoder import c_make_encoder, encode_basestring_ascii

__all__ = ["dumps_indented"]

_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})  # keys json writes as they are (others: json.dumps itself)
_DICT = frozenset({dict})
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
    done = _rows(members, level + 1) if kind is not dict and len(members) > 1 else None
    if done is None:
        done = ["".join(encode(v, 0)) if type(v) in _SCALARS else _dumps(v, level + 1)
                for v in members]  # (a scalar has no separators: any level's encoder)
    if kind is dict:
        done = [f"{encode_basestring_ascii(k)}: {v}"
                for k, v in zip(value, done, strict=True)]  # type: ignore[call-overload]
    start, end = "{}" if kind is dict else "[]"
    return start + inner + ("," + inner).join(done) + "\n" + _INDENT * level + end


def _rows(members: list[object] | tuple[object, ...], level: int) -> list[str] | None:
    """The texts of an array's members at `level` when they are a table's rows: objects with
    the same str keys in the same order, each key's values all scalars or all non-empty objects
    of scalars with the same str keys (`{"size_bytes": 8, "oop": {"time_us": 1.5, ...}}`).
    Each column is written by one C encoder call and split at its separators (a JSON text has
    no raw line break inside a string, and an object of scalars no `}` before one), and each
    row is its columns put into one template. None for any other array (written member by
    member)."""
    if not _DICT.issuperset(map(type, members)):
        return None
    keys = tuple(members[0])  # type: ignore[arg-type]
    if not (keys and _STR.issuperset(map(type, keys))
            and all(map(keys.__eq__, map(tuple, members)))):  # type: ignore[arg-type]
        return None
    inner, deeper = "\n" + _INDENT * (level + 1), "\n" + _INDENT * (level + 2)
    columns, parts = [], []
    for key in keys:
        column = [m[key] for m in members]  # type: ignore[index]
        name = encode_basestring_ascii(key).replace("%", "%%")
        if _SCALARS.issuperset(map(type, column)):
            columns.append("".join(_COLUMN(column, 0))[1:-1].split(",\n"))
            parts.append(f"{name}: %s")
            continue
        inside = tuple(column[0]) if type(column[0]) is dict else ()
        if not (inside and _DICT.issuperset(map(type, column)) and _STR.issuperset(map(type, inside))
                and all(map(inside.__eq__, map(tuple, column)))
                and _SCALARS.issuperset(map(type, chain.from_iterable(map(dict.values, column))))):
            return None
        encode = _encoder(level + 1)
        assert encode is not None  # (_dumps asked for one first)
        columns.append("".join(encode(column, 0))[2:-2].split("}," + deeper + "{"))
        if len(columns[-1]) != len(members):  # (not met by json's encoder: no rows by guess)
            return None
        parts.append(f"{name}: {{{deeper}%s{inner}}}")
    template = "{" + inner + ("," + inner).join(parts) + "\n" + _INDENT * level + "}"
    return list(map(template.__mod__, zip(*columns, strict=True)))


@functools.lru_cache(maxsize=64)
def _encoder(level: int) -> Callable[[object, int], tuple[str, ...]] | None:
    """json's C encoder for members at `level` + 1 (what json.dumps makes for each call, made
    once): ASCII output, NaN allowed, no circular-reference markers (scalars only)."""
    if c_make_encoder is None:
        return None
    return c_make_encoder(None, None, encode_basestring_ascii, None, ": ",  # type: ignore[no-any-return]
                          ",\n" + _INDENT * (level + 1), False, False, True)


#: A column of scalars, one after another, split at ",\n" (never inside a JSON string).
_COLUMN = (c_make_encoder(None, None, encode_basestring_ascii, None, ": ", ",\n", False, False,
                          True) if c_make_encoder is not None else None)
