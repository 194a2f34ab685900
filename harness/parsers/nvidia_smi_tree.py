"""The indented `key : value` tree of `nvidia-smi -q`, read in batches (harness.parsers.
nvidia_smi_query turns it into GPU records).

GPU sections start at `GPU 00000000:53:00.0`; a GPU seen again (a `nvidia-smi -q -l` loop, the
only way such output grows large) keeps its latest section, in its first place. So a section's
lines are not read as they come: one regex search per section finds where it ends, its text is
kept (one per GPU, the memory stays flat), and only each GPU's last section is read, at the
end. A section replaced before then is read only for what it may add (a `-q` section name,
`_Side.sections`, that the kept ones lack). The lines read (top-level ones, the kept sections)
are split into (indent, key, value) by one `findall` per batch; the key path is rebuilt only
when the nesting changes. Input with blanks other than space and tab (where `str.strip` and
the regex differ) and fragments (no GPU line) are read line by line, as they come.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from harness.base.gpu_record import pci_key
from harness.parsers.nvidia_smi_common import (
    BUS_ID,
    FABRIC_KEYS,
    FRAGMENT_SECTIONS,
    GPU_HEADER,
    KEY_VALUE,
    MAX_DEPTH,
    MAX_GPUS,
    MAX_KEYS,
    Side,
)

__all__ = ["Tree", "TreeBlock"]

#: One line: (indent, key, value, other); a `key : value` line fills key and value (value
#: unstripped), any other line `other` (unstripped; empty for a blank line): `_KEY_VALUE` on
#: the stripped line, for lines whose only blanks are spaces and tabs.
_LINE = re.compile(r"^([ \t]*+)(?:([^:\n]*?\S)[ \t]++:[ \t]?([^\n]*)|([^\n]*))$", re.M)
_ODD_SPACE = re.compile(r"[^\S \t\n]")
#: A GPU section's first line, as the line reader sees one (`_GPU_HEADER` on the stripped line).
_HEADER = rf"([ ]*+[ \t]*+)GPU[ \t]+({BUS_ID})[ \t]*$"  # (`[ ]*+`: a tight C loop)
_ENDS: dict[int, tuple[re.Pattern[str], re.Pattern[str]]] = {}


def _line_rx(body: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A line pattern as (at a line's start, after a `\\n`): sre searches for a pattern that
    starts with a literal `\\n` at memchr speed, where `^` (MULTILINE) is tried at every
    character."""
    return re.compile(body, re.M), re.compile("\n" + body, re.M)


def _find(rx: tuple[re.Pattern[str], re.Pattern[str]], text: str, pos: int) -> int:
    """Where the first line at or after `pos` (a line's start) that `rx` matches starts; -1."""
    if rx[0].match(text, pos):
        return pos
    m = rx[1].search(text, pos)
    return -1 if m is None else m.start() + 1


def _end(base: int) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The line that ends a GPU section whose header is indented `base`: a non-blank line
    indented no deeper, or another GPU's header."""
    if base not in _ENDS:
        _ENDS[base] = _line_rx(rf"(?:[ \t]{{0,{base}}}[^ \t\n]|{_HEADER})")
    return _ENDS[base]


_HEADERS = _line_rx(_HEADER)


def _odd_space(text: str) -> bool:
    """`text` holds a blank other than space, tab and newline: the ASCII ones looked for with
    `in` (memchr), the regex only for non-ASCII text."""
    if text.isascii():
        return "\r" in text or "\x0b" in text or "\x0c" in text or "\x1c" in text or (
            "\x1d" in text or "\x1e" in text or "\x1f" in text)
    return _ODD_SPACE.search(text) is not None


def _split(lines: list[str]) -> list[tuple[str, str, str, str]]:
    """`_LINE`'s tuples, line by line (`_KEY_VALUE` on the stripped line, every blank)."""
    out = []
    for line in lines:
        stripped = line.strip()
        indent = line[:len(line) - len(line.lstrip(" \t"))]
        m = KEY_VALUE.match(stripped)
        out.append((indent, m["key"], m["value"], "") if m else (indent, "", "", stripped))
    return out


class TreeBlock:
    """One GPU section of `nvidia-smi -q` as {lower-case key path: value}."""

    def __init__(self, bus_id: str) -> None:
        self.bus_id = bus_id
        self.values: dict[tuple[str, ...], str] = {}


class Tree:
    """The tree read so far: `top` (keys outside any GPU section), `blocks` (by bus, in first
    seen order). `feed` each batch, then `finish`."""

    def __init__(self, side: Side, *, fragment: bool = False) -> None:
        self.side = side
        self.top: dict[str, str] = {}
        self.blocks: dict[str, TreeBlock] = {}
        self.block: TreeBlock | None = None
        self.stack: list[tuple[int, str]] = []
        self.path: tuple[str, ...] = ()  # the names on `stack`, rebuilt only when it changes
        self.base = 0
        self.headerless = fragment and side.headerless_fabric  # bare State / Status: Fabric's
        self.live = fragment  # read every line as it comes (no deferring)
        if fragment:
            self.block, self.base = TreeBlock(""), -1
            self.blocks[""] = self.block
        self.texts: dict[str, tuple[int, list[str]]] = {}  # bus -> (base, text) of its last
        self.open: list[str] | None = None  # the text of the section being read, deferred
        self.open_bus = ""

    # ---- deferred: whole sections ----

    def feed(self, batch: list[str]) -> None:
        text = getattr(batch, "text", None) or "\n".join(batch)  # (a Batch has it joined)
        if not self.live and _odd_space(text):
            self._go_live()
        if self.live:
            self.rows(_split(batch) if _odd_space(text) else _LINE.findall(text))
            return
        pos, n = 0, len(text)
        while pos <= n:
            if self.open is not None:
                end = _find(_end(self.base), text, pos)
                if end < 0:
                    self.open.append(text[pos:])
                    return
                self.open.append(text[pos:end])
                self._close()
                pos = end
                continue
            start = _find(_HEADERS, text, pos)
            if start < 0:
                self.rows(_LINE.findall(text, pos))
                return
            if start > pos:
                self.rows(_LINE.findall(text, pos, start))
            m = _HEADERS[0].match(text, start)
            assert m is not None
            self._header(m[2], len(m[1]))
            self.open, self.open_bus, self.block = [], pci_key(m[2]) or m[2], None
            pos = m.end() + 1

    def _header(self, bus_text: str, indent: int) -> TreeBlock:
        """A GPU section starts: its index from a `-i N` command line above it, its place."""
        side = self.side
        bus = pci_key(bus_text) or bus_text
        block = TreeBlock(bus_text)
        if side.pending_index is not None:
            side.bus_index[bus] = side.pending_index  # type: ignore[index]
            side.pending_index = None
        if bus in self.blocks or len(self.blocks) < MAX_GPUS:
            self.blocks[bus] = block  # type: ignore[index]  # a GPU seen before keeps its place
        else:
            side.omitted += 1  # read, not kept
        if self.live and bus in self.texts:  # a deferred section of this GPU, now replaced
            self._replaced(*self.texts.pop(bus))  # type: ignore[arg-type]
        self.stack, self.path, self.base = [], (), indent
        return block

    def _close(self) -> None:
        """The open section ended: keep its text as its GPU's last (the one it replaces, or
        itself when its GPU is not kept, is read only for the section names it may add)."""
        assert self.open is not None
        text = "\n".join(self.open)
        bus, self.open = self.open_bus, None
        if bus not in self.blocks:
            self._replaced(self.base, text)
            return
        old = self.texts.get(bus)
        self.texts[bus] = (self.base, text)
        if old is not None:
            self._replaced(*old)

    def _replaced(self, base: int, text: str) -> None:
        """A section not kept: read it (into nothing) only if it may name a `-q` section that
        `_Side.sections` lacks."""
        missing = [name for name in FRAGMENT_SECTIONS if name not in self.side.sections]
        if missing:  # (a superset: the names anywhere in it, any case)
            lowered = text.lower()
            if any(name in lowered for name in missing):
                self._read(TreeBlock(""), base, text)

    def _read(self, block: TreeBlock, base: int, text: str) -> None:
        """Read a section's text into `block`, as the line reader would have."""
        self.block, self.stack, self.path, self.base = block, [], (), base
        self.rows(_LINE.findall(text))
        self.block = None

    def _go_live(self) -> None:
        """Read line by line from here: the open section's text so far is read now, into its
        GPU's block, and the lines after it continue it."""
        self.live = True
        if self.open is not None:
            bus, base, text = self.open_bus, self.base, "\n".join(self.open)
            self.open = None
            old = self.texts.pop(bus, None)
            if old is not None:
                self._replaced(*old)
            block = self.blocks.get(bus) or TreeBlock("")
            self._read(block, base, text)
            self.block = block

    def finish(self) -> tuple[dict[str, str], list[TreeBlock]]:
        if self.open is not None:
            self._close()
        for bus, (base, text) in self.texts.items():
            self._read(self.blocks[bus], base, text)
        return self.top, list(self.blocks.values())

    # ---- line by line ----

    def rows(self, rows: Iterable[tuple[str, str, str, str]]) -> None:
        """Read lines split as `_LINE` splits them (see the module's docstring)."""
        side, top = self.side, self.top
        block, stack, path, base = self.block, self.stack, self.path, self.base
        values = block.values if block is not None else {}
        for indent_text, key, value, other in rows:
            if key:
                value = value.strip()
            else:
                other = other.strip()
                if not other:
                    continue
            indent = len(indent_text)
            if not key and other[:3] == "GPU" and (header := GPU_HEADER.match(other)):
                block = self._header(header["bus"], indent)
                values, stack, path, base = block.values, [], (), indent
                continue
            if block is None or indent <= base:
                if key and len(top) < MAX_KEYS:
                    top[key.lower()] = value
                if block is not None and indent <= base:
                    block = None
                continue
            if stack and stack[-1][0] >= indent:
                while stack and stack[-1][0] >= indent:
                    stack.pop()
                path = tuple(name for _, name in stack)
            if value:
                if len(values) < MAX_KEYS:
                    name = key.lower()
                    if not path and self.headerless and name in FABRIC_KEYS:
                        values[("fabric", name)] = value
                        side.sections["fabric"] = None
                    else:
                        values[(*path, name)] = value
            elif len(stack) < MAX_DEPTH:  # a section header, or `Key :` with nothing after it
                name = (key or other).lower()[:200]
                if not stack and name in FRAGMENT_SECTIONS:
                    side.sections[name] = None
                stack.append((indent, name))
                path = (*path, name)
        self.block, self.stack, self.path, self.base = block, stack, path, base
