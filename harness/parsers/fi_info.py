"""`fi_info` output (libfabric): providers, EFA devices, endpoint types, and the error code it
prints when no provider matches (`-61` alone from old releases, `fi_getinfo: -61` from newer).

Reads blocks like::

    provider: efa
        fabric: efa-direct
        domain: rdmap16s27-rdm
        version: 122.0
        type: FI_EP_RDM
        protocol: FI_PROTO_EFA

and the same facts from `fi_info -v` (`---` / `fi_info:` blocks: `fi_fabric_attr` `prov_name`,
`name`, `prov_version`; `fi_domain_attr` `name`; `fi_ep_attr` `type`, `protocol`).
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.reader import Input, as_input
from harness.parsers.unwrap import Unwrapper

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["INSPECT", "FiInfo", "FiInfoEntry", "inspect_fi_info", "parse_fi_info"]


@dataclass(frozen=True, slots=True)
class FiInfoEntry:
    """One `provider:` block."""

    provider: str
    fabric: str | None = None
    domain: str | None = None
    version: str | None = None
    type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class FiInfo:
    """What `fi_info` listed."""

    entries: tuple[FiInfoEntry, ...]
    error_code: int | None = None
    """The negative errno fi_info printed instead of providers (-61: FI_ENODATA, no match)."""
    omitted: int = 0
    """Distinct entries past MAX_ENTRIES, not kept."""
    commands: tuple[str, ...] = ()
    """Command lines pasted with the output (harness.parsers.unwrap)."""
    ranks: tuple[str, ...] = ()
    """Ranks whose tagged lines were read (`[1,N]<stdout>:`)."""

    @property
    def providers(self) -> list[str]:
        return list(dict.fromkeys(e.provider for e in self.entries))

    @property
    def efa(self) -> bool:
        """The EFA provider is listed (alone, or as the core of a `efa;ofi_rxd` stack)."""
        return any(e.provider.split(";")[0] == "efa" for e in self.entries)

    @property
    def efa_devices(self) -> list[str]:
        """EFA device names from the domains (`rdmap16s27-rdm` -> `rdmap16s27`, `efa_0-dgrm`;
        a domain cut after its `-` counts as its device, never as one more)."""
        names = (
            re.sub(r"-[a-z]*$", "", e.domain)
            for e in self.entries
            if e.domain and e.provider.split(";")[0] == "efa"
        )
        return list(dict.fromkeys(names))

    @property
    def endpoint_types(self) -> list[str]:
        return list(dict.fromkeys(e.type for e in self.entries if e.type))

    @property
    def fabrics(self) -> list[str]:
        return list(dict.fromkeys(e.fabric for e in self.entries if e.fabric))

    def to_json(self) -> JSONObject:
        """The `preflight inspect fi-info --json` record (keys documented in docs/network.md)."""
        return {
            "efa": self.efa,
            "efa_devices": self.efa_devices,
            "providers": self.providers,
            "endpoint_types": self.endpoint_types,
            "error_code": self.error_code,
            "fabrics": self.fabrics,
            "commands_seen": list(self.commands),
            "ranks_seen": list(self.ranks),
        }


# (Values run to the line's end and are stripped in Python: a lazy group before `\s*$`
# rescanned a run of blanks from each of its characters.)
_FIELD = re.compile(r"^\s*(provider|fabric|domain|version|type|protocol):\s*(.*)$")
_ERROR = re.compile(r"^\s*(?:fi_getinfo:\s*)?(-[0-9]{1,9})\b(?:\s*\(.*\))?\s*$")
# The field lines of a whole batch of lines joined by `\n` (`[^\S\n]`: `\s` within one line).
_FIELD_LINES = re.compile(r"^[^\S\n]*(provider|fabric|domain|version|type|protocol):[^\S\n]*(.*)$",
                          re.MULTILINE)
_MINUS_DIGIT = re.compile(r"-[0-9]")
#: Where a line starts that is not a listing's field line, in a batch joined with `\n` in front.
_NOT_FIELD = re.compile(r"\n(?![^\S\n]*+(?:provider|fabric|domain|version|type|protocol):)")
#: Where each `provider:` line starts, in a batch joined by `\n`: a block runs to the next one.
_PROVIDER_LINES = re.compile(r"^[^\S\n]*provider:", re.MULTILINE)
_PROVIDER = re.compile("provider:")  # (_provider_starts: the same starts, found faster)
#: `fi_info -v`: a block starts at `fi_info:`; `fi_ep_attr:` and the like open a section.
_VERBOSE_BLOCK = re.compile(r"^\s*fi_info:\s*$")
_VERBOSE_LINE = re.compile(r"^\s*(\w+):\s*(.*)$")
#: A `fi_info -v` record's section, which also opens a record whose `fi_info:` line was cut off
#: (a paste that starts mid-record: ofiwg/libfabric issue #9158,
#: tests/data/fi_info/real_verbose_fragment_tcp_rxm_libfabric_1.18.txt).
_VERBOSE_SECTION = re.compile(r"^\s*(fi_(?:tx|rx|ep|domain|fabric)_attr):\s*$")
_VERBOSE_FIELDS = {
    ("fi_fabric_attr", "prov_name"): "provider",
    ("fi_fabric_attr", "name"): "fabric",
    ("fi_fabric_attr", "prov_version"): "version",
    ("fi_domain_attr", "name"): "domain",
    ("fi_ep_attr", "type"): "type",
    ("fi_ep_attr", "protocol"): "protocol",
}
#: Distinct entries kept: a node lists a few hundred (p5: 32 EFA devices x a few providers);
#: more is many outputs concatenated, and memory stays flat.
MAX_ENTRIES = 10_000
#: Blocks remembered by their text (a block read again is not parsed again): at most MAX_BLOCKS
#: of at most MAX_BLOCK_CHARS (a listing's block is ~130 characters), 1 MB in all.
MAX_BLOCKS, MAX_BLOCK_CHARS = 1_000, 1_024


class _Entries:
    """Distinct entries in the order first seen, at most MAX_ENTRIES (the rest counted)."""

    def __init__(self) -> None:
        self.kept: dict[FiInfoEntry, None] = {}
        self.omitted = 0
        self._seen: set[tuple[tuple[str, str], ...]] = set()  # the fields of the kept entries

    def add(self, fields: dict[str, str]) -> None:
        key = tuple(fields.items())  # (an entry seen again, the common case: no entry built)
        if key in self._seen:
            return
        entry = FiInfoEntry(**fields)
        if entry in self.kept:
            return
        if len(self.kept) < MAX_ENTRIES:
            self.kept[entry] = None
            self._seen.add(key)
        else:
            self.omitted += 1


class _Reader:
    """Reads both forms in one pass (the verbose form wins when any `fi_info:` block is seen)."""

    def __init__(self) -> None:
        self.listing, self.verbose = _Entries(), _Entries()
        self.current: dict[str, str] | None = None  # the listing's open `provider:` block
        self.block: dict[str, str] | None = None  # the verbose form's open `fi_info:` block
        self.section = ""
        self.error_code: int | None = None
        self.saw_verbose = False
        self._blocks: set[str] = set()  # the text of blocks read whole (MAX_BLOCKS)

    def feed(self, line: str) -> None:
        if "fi_info:" in line and _VERBOSE_BLOCK.match(line):  # (the literal first: ~5x cheaper)
            self._close_block()
            self.saw_verbose, self.block, self.section = True, {}, ""
            return
        if self.block is None and "_attr:" in line and (m := _VERBOSE_SECTION.match(line)):
            self.saw_verbose, self.block, self.section = True, {}, m[1]  # its head cut off
            return
        if self.block is not None and (m := _VERBOSE_LINE.match(line)):
            value = m[2].rstrip()
            if not value:
                self.section = m[1]
            elif (key := _VERBOSE_FIELDS.get((self.section, m[1]))) is not None:
                self.block.setdefault(key, value)
        if m := _FIELD.match(line):
            key, value = m[1], m[2].rstrip()
            if key == "provider":
                if self.current is not None:
                    self.listing.add(self.current)
                self.current = {"provider": value}
            elif self.current is not None:
                self.current.setdefault(key, value)
        elif self.error_code is None and "-" in line and (m := _ERROR.match(line)):
            self.error_code = int(m[1])

    def feed_batch(self, lines: list[str]) -> None:
        """`feed` for each of `lines`; without the verbose form, the field lines and the first
        error line are found with regex passes over the batch (a line matching `_ERROR` never
        matches `_FIELD`), and a block whose text was read before (every node's listing of a
        fleet, concatenated) is not read again: its entry is already kept."""
        text = "\n".join(lines)
        if self.block is not None or "fi_info:" in text or "_attr:" in text:
            for line in lines:
                self.feed(line)
            return
        starts = _provider_starts(text)
        # The open block's rest (before the batch's first `provider:` line), then each block
        # that ends in this batch, then the one left open.
        self._fields(text[:starts[0]] if starts else text)
        if starts and self.current is not None:
            self.listing.add(self.current)
            self.current = None
        for start, end in itertools.pairwise(starts):
            block = text[start:end]
            if block in self._blocks:
                continue  # read before, and its entry kept
            self._fields(block)
            if self.current is not None:
                kept = len(self.listing.kept) < MAX_ENTRIES  # then add keeps it (or had it)
                self.listing.add(self.current)
                self.current = None
                if kept and len(block) <= MAX_BLOCK_CHARS and len(self._blocks) < MAX_BLOCKS:
                    self._blocks.add(block)
        if starts:
            self._fields(text[starts[-1]:])
        if self.error_code is None:
            # An error line holds `-` and a digit (rare elsewhere): only the lines around those
            # are matched, the first one that is an error line wins.
            for hit in _MINUS_DIGIT.finditer(text):
                start = text.rfind("\n", 0, hit.start()) + 1
                end = text.find("\n", hit.end())
                if m := _ERROR.match(text[start:end if end >= 0 else len(text)]):
                    self.error_code = int(m[1])
                    break

    def _fields(self, text: str) -> None:
        """Read the field lines of `text` (lines of the listing form) into the open block."""
        current, listing = self.current, self.listing
        for key, value in _FIELD_LINES.findall(text):
            value = value.rstrip()
            if key == "provider":
                if current is not None:
                    listing.add(current)
                current = {"provider": value}
            elif current is not None:
                current.setdefault(key, value)
        self.current = current

    def _close_block(self) -> None:
        if self.block is not None and "provider" in self.block:  # blocks without prov_name: dropped
            self.verbose.add(self.block)
        self.block = None

    def finish(self) -> FiInfo:
        self._close_block()
        if self.current is not None:
            self.listing.add(self.current)
        if self.saw_verbose:
            return FiInfo(tuple(self.verbose.kept), None, self.verbose.omitted)
        return FiInfo(tuple(self.listing.kept), self.error_code, self.listing.omitted)


def _provider_starts(text: str) -> list[int]:
    """[m.start() for m in _PROVIDER_LINES.finditer(text)]: where each line that is blanks and
    `provider:` starts. The literal is found first (sre's literal search) and its line's start
    checked: _PROVIDER_LINES' `^` is tried at every character, ~3x this (a fleet's listings are
    one `provider:` line in six). Each stretch of text is looked at once: a line's second hit
    has `provider:` before it, not blanks."""
    rfind, starts = text.rfind, []
    line, last = -1, 0  # the line start of the hit before (-1: none), where that hit is
    for m in _PROVIDER.finditer(text):
        at = m.start()
        newline = rfind("\n", last, at)
        last = at
        if newline < 0 and line >= 0:
            continue  # on the line of the hit before
        line = newline + 1  # `^` (MULTILINE): after a `\n` only (0: the text's first line)
        if line == at or text[line:at].isspace():  # `[^\S\n]*`: str.isspace is sre's `\s`
            starts.append(line)
    return starts


def _unwrapped(batch: list[str], unwrapper: Unwrapper) -> list[str]:
    """`unwrapper.lines(batch)`, with the listing's field lines (`    fabric: efa`: no wrapper
    starts so, tests/test_parsers_fi_info_fast.py) handed on without the unwrapper's pass:
    only the other lines are looked at, unless a command continues into a field line."""
    text = "\n" + "\n".join(batch)
    if "\x1b" in text or "\ufffd[" in text or "\r" in text:
        return list(unwrapper.lines(batch))
    others: list[int] = []  # the lines that are not field lines
    newlines = seen = 0
    for m in _NOT_FIELD.finditer(text):
        newlines += text.count("\n", seen, m.start() + 1)
        seen = m.start() + 1
        others.append(newlines - 1)
    if len(others) * 2 > len(batch):  # mostly other lines (`fi_info -v`): the unwrapper's pass
        return list(unwrapper.lines(batch))
    found = unwrapper.candidates([batch[i] for i in others])
    candidates = set(others) if found is None else {others[j] for j in found}
    unwrap, pending = unwrapper.unwrap, unwrapper.pending
    out: list[str] = []
    done = 0  # lines of batch handed on
    for index in [*others, len(batch)]:
        while done < index and pending():  # a command continues into these lines
            line = unwrap(batch[done])
            done += 1
            if line is not None:
                out.append(line)
        if done < index:
            unwrapper.rank = unwrapper.host = None
            out.extend(batch[done:index])
        if index < len(batch):
            line = unwrap(batch[index]) if index in candidates or pending() else batch[index]
            if line is not None:
                out.append(line)
        done = index + 1
    return out


def parse_fi_info(text: str | Input) -> FiInfo:
    """Parse `fi_info` / `fi_info -p efa` / `fi_info -v` output (a str, or an Input streamed in
    one pass); ParseError when it holds neither provider blocks nor an error code. An entry
    listed again (outputs of several nodes, concatenated) is kept once."""
    reader = _Reader()
    unwrapper = Unwrapper()
    for batch in as_input(text).batches():
        reader.feed_batch(_unwrapped(batch, unwrapper))
    info = dataclasses.replace(reader.finish(), commands=tuple(unwrapper.commands),
                               ranks=tuple(unwrapper.ranks_sorted()))
    if not info.entries and info.error_code is None:
        raise ParseError(
            "nothing recognised as fi_info output: no `provider:` blocks, no `fi_info -v` "
            "blocks and no error code (`-61` or `fi_getinfo: -61`)"
        )
    return info


def inspect_fi_info(stream: TextIO | Input, *, profile: Profile | None) -> JSONObject:
    """`preflight inspect fi-info FILE`: efa, efa_devices, providers, endpoint_types,
    error_code, and `verdicts` (PF-NET-003's judgement for the profile, harness.judges.network)."""
    from harness.judges import network as judges

    info = parse_fi_info(as_input(stream))
    verdicts = [] if profile is None else [judges.fi_info_lists_efa(profile, info).to_json()]
    out = {**info.to_json(), "verdicts": verdicts}
    if info.omitted:
        out["notes"] = [f"{info.omitted} more distinct entries after the first {MAX_ENTRIES:,} "
                        "were not kept"]
    return out


INSPECT = {"fi-info": inspect_fi_info}
