"""Shell parameter expansion for the env reader's scripts (harness.parsers.env_script): `$A`,
`${A}`, `${A:-default}`, `${A-default}`, `${A:=default}` against the variables read so far,
long results kept as their pieces (Joined), and expansions kept for values expanded before
(expanded)."""

from __future__ import annotations

import re

from harness.parsers import env_script_lines as script_lines
from harness.parsers.env_script_lines import VAR_NAME
from harness.parsers.reader import MAX_LINE_CHARS

__all__ = ["Expansion", "Joined", "expand", "expanded", "joined_text"]

#: A value's expansion stops here (the store cuts a value there: env_script.MAX_VALUE_CHARS).
MAX_VALUE_CHARS = MAX_LINE_CHARS
# `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:=default}`, `$NAME`.
_PARAM = re.compile(rf"\$\{{(?P<name>{VAR_NAME})(?:(?P<op>:?[-=])(?P<default>[^{{}}]*))?\}}"
                    rf"|\$(?P<bare>{VAR_NAME})")

def expand(value: str, variables: dict[str, str]) -> str | Joined:
    """Shell parameter expansion as far as the dump tells: `${A:-default}` is A's value or the
    default, `$A` / `${A}` is A's value when the script set it, else left as written. The result
    stops at MAX_VALUE_CHARS (`A=$A$A` lines would double it each time). A long result is a
    Joined of its pieces, not a copy of them (see Joined)."""
    if "$" not in value:
        return value
    out: list[str | Joined] = []
    size = 0
    pos = 0
    get = variables.get
    for m in _PARAM.finditer(value):
        name, op, default, bare = m.groups()
        start, end = m.span()
        known = get(name or bare)
        if op is None:
            piece = m[0] if known is None else known
        elif known is None or (not known and op[0] == ":"):
            piece = expand(default, variables)
        else:
            piece = known
        out += (value[pos:start], piece)
        size += start - pos + len(piece)
        pos = end
        if size >= MAX_VALUE_CHARS:
            return _joined(out, MAX_VALUE_CHARS)
    out.append(value[pos:])
    size += len(value) - pos
    if size < _JOINED_MIN:
        return "".join(out)  # (short: no Joined among the pieces; _joined's case, inlined)
    return _joined(out, min(size, MAX_VALUE_CHARS))


#: What expanded keeps of a value expanded before: the names it reads, their values then, and
#: its expansion.
Expansion = tuple[tuple[str, ...], tuple["str | Joined | None", ...], str]
#: The names a value's expansion may read (every `$NAME` and `${NAME`, defaults' included).
_NAMES = re.compile(rf"\$\{{?({VAR_NAME})")


def expanded(value: str, variables: dict[str, str], known: dict[str, Expansion]
              ) -> str | Joined:
    """expand(value, variables), taken from `known` where the value was expanded before with
    the same values of the names it reads (a script held many times in a log expands the same
    `${NCCL_DEBUG:-WARN}` in each copy); short results are kept, bounded as parse_script's
    memo of readings (script_lines.MEMO_LINES values of MEMO_CHARS characters at most)."""
    hit = known.get(value)
    if hit is not None and tuple(map(variables.get, hit[0])) == hit[1]:
        return hit[2]
    result = expand(value, variables)
    if (type(result) is str and len(value) <= script_lines.MEMO_CHARS
            and len(result) <= script_lines.MEMO_CHARS
            and (hit is not None or len(known) < script_lines.MEMO_LINES)):
        names = tuple(_NAMES.findall(value))
        known[value] = (names, tuple(map(variables.get, names)), result)
    return result


#: An expansion's result this long is a Joined; a Joined holds at most _JOINED_DEPTH levels of
#: Joined (then it is copied into one string: the chains of a value that expands itself,
#: `PATH=/x:$PATH` over and over, stay short, and so does their memory).
_JOINED_MIN = 64 << 10
_JOINED_DEPTH = 64


class Joined:
    """A long expansion's value, kept as its pieces (strings and Joined) and its length (the
    pieces' characters up to MAX_VALUE_CHARS), not as one copy of them: a script in a log held
    many times sets `LD_LIBRARY_PATH=/x:$LD_LIBRARY_PATH` again and again, and copying the
    ~1 Mi-character value at each was most of its reading time. Only parse_script's Variables
    hold one, and it makes each a string (joined_text) before it returns them."""

    __slots__ = ("depth", "pieces", "size")

    def __init__(self, pieces: list[str | Joined], size: int) -> None:
        self.pieces, self.size = pieces, size
        self.depth = 1 + max((p.depth for p in pieces if isinstance(p, Joined)), default=0)

    def __len__(self) -> int:
        return self.size


def _joined(pieces: list[str | Joined], size: int) -> str | Joined:
    """The pieces of an expansion joined, first `size` characters: a Joined where it is long.
    (A Joined piece makes it long: each is _JOINED_MIN characters or more.)"""
    if size < _JOINED_MIN:
        return "".join(pieces)[:size]  # (no Joined among them)
    joined = Joined(pieces, size)
    return joined_text(joined) if joined.depth > _JOINED_DEPTH else joined


def joined_text(joined: Joined) -> str:
    """A Joined's characters as one string: its pieces in order, each (a Joined's too) cut to
    its length, the whole cut to the Joined's. (A stack, not recursion: chains are deep.)"""
    out: list[str] = []
    stack = [[joined.pieces, 0, joined.size]]  # [pieces, the next one, characters still to take]
    while stack:
        frame = stack[-1]
        pieces, i, room = frame
        if room <= 0 or i == len(pieces):
            stack.pop()
            continue
        piece = pieces[i]
        take = min(len(piece), room)
        frame[1], frame[2] = i + 1, room - take
        if type(piece) is Joined:
            stack.append([piece.pieces, 0, take])
        elif take:
            out.append(piece if take == len(piece) else piece[:take])
    return "".join(out)
