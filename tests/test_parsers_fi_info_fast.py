"""The fi-info reader's fast paths (issue 32 item 3: field lines handed on without the
unwrapper's pass, a block read before not parsed again) give exactly what reading every line
with `feed` gives: on every recorded fi_info output, bare and under each wrapper of
tests/test_samples_wrapped.py, repeated as a fleet's outputs are, in small and large chunks."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.parsers import ParseError, fi_info
from harness.parsers.fi_info import FiInfo, parse_fi_info
from harness.parsers.reader import Input
from harness.parsers.unwrap import Unwrapper
from tests.test_samples_wrapped import WRAPPERS

FILES = sorted(p for p in (Path(__file__).parent / "data" / "fi_info").iterdir()
               if p.suffix == ".txt")
FIELDS = ["provider: efa", "    fabric: efa-direct", "    domain: rdmap79s27-rdm",
          "    version: 201.0", "    type: FI_EP_RDM", "    protocol: FI_PROTO_EFA",
          "\tprovider:tcp;ofi_rxm", "type:FI_EP_MSG", "  provider:   "]


def _by_line(text: str) -> FiInfo | str:
    """The reference: every line unwrapped and fed on its own."""
    reader, unwrapper = fi_info._Reader(), Unwrapper()
    for line in Input(io.StringIO(text)).lines():
        inner = unwrapper.unwrap(line)
        if inner is not None:
            reader.feed(inner)
    info = dataclasses.replace(reader.finish(), commands=tuple(unwrapper.commands),
                               ranks=tuple(unwrapper.ranks_sorted()))
    return info if info.entries or info.error_code is not None else "nothing"


def _fast(text: str, chunk: int | None) -> FiInfo | str:
    try:
        return parse_fi_info(Input(io.StringIO(text), chunk=chunk))
    except ParseError:
        return "nothing"


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_fast_paths_read_as_every_line_fed(path: Path):
    text = path.read_text(encoding="utf-8", errors="replace")
    wrong = []
    for name, wrap in {"bare": lambda s: s, **WRAPPERS}.items():
        for variant, body in (("as is", text), ("three nodes' outputs", text * 3)):
            wrapped = "".join(wrap(line) + "\n" for line in body.splitlines())
            want = _by_line(wrapped)
            for chunk in (97, 4096, None):
                if _fast(wrapped, chunk) != want:
                    wrong.append((name, variant, chunk))
    assert not wrong, wrong


def test_field_lines_carry_no_wrapper():
    """Field lines are handed on without the unwrapper: none of them may be a line an
    unwrapper rule changes (a rule added for `provider: ...` lines fails here)."""
    for timestamps in (True, False):  # (fi-info does not peel `host: ` prefixes)
        unwrapper = Unwrapper(timestamps=timestamps)
        assert unwrapper.candidates(FIELDS) == set()
        assert [unwrapper.unwrap(line) for line in FIELDS] == FIELDS


def test_a_full_listing_counts_repeated_blocks_as_the_lines_say(monkeypatch):
    """Past MAX_ENTRIES a block seen again is counted as omitted each time (the block cache
    remembers only blocks whose entry was kept)."""
    monkeypatch.setattr(fi_info, "MAX_ENTRIES", 3)
    blocks = "".join(f"provider: efa\n    domain: rdmap{i}s27-rdm\n    type: FI_EP_RDM\n"
                     for i in range(5))
    text = blocks * 4
    for chunk in (50, None):
        got = _fast(text, chunk)
        assert got == _by_line(text)
        assert isinstance(got, FiInfo) and (len(got.entries), got.omitted) == (3, 2 * 4)


def test_a_command_continued_into_a_field_line_is_unwrapped():
    text = "$ fi_info -p efa \\\n  type: FI_EP_RDM\nprovider: efa\n    type: FI_EP_RDM\n"
    got = _fast(text, None)
    assert got == _by_line(text)
    assert isinstance(got, FiInfo) and got.commands == ("fi_info -p efa type: FI_EP_RDM",)


@given(st.lists(st.sampled_from(["provider:", "provider", "rovider:", " ", "\t", "\n", "\r", "\x0b",
                                 "\x85", "\u2028", "\u00a0", "x", "fabric: efa", "prov"]),
                max_size=12).map("".join))
@example("provider: efa\n    provider: tcp\nx provider: no\n\n  provider:provider:")
def test_provider_starts_are_the_regexes(text: str) -> None:
    """feed_batch finds each block's `provider:` line by the literal and a look at its line's
    start: the same starts as fi_info._PROVIDER_LINES' (blanks then `provider:` on a line)."""
    want = [m.start() for m in fi_info._PROVIDER_LINES.finditer(text)]
    assert fi_info._provider_starts(text) == want


def test_provider_starts_on_every_recorded_listing() -> None:
    for path in FILES:
        text = path.read_text(encoding="utf-8", errors="replace")
        want = [m.start() for m in fi_info._PROVIDER_LINES.finditer(text)]
        assert fi_info._provider_starts(text) == want, path.name
    assert sum(len(fi_info._provider_starts(p.read_text(errors="replace"))) for p in FILES) > 20


@pytest.mark.timeout(120)
def test_provider_starts_look_at_a_long_line_once() -> None:
    """A line of a million blanks and 400,000 `provider:`s: each hit's line is not looked at
    again (read so, it is ~10^11 characters)."""
    text = "x\n" + " " * 1_000_000 + "provider:" * 400_000 + "\n provider: efa"
    want = [m.start() for m in fi_info._PROVIDER_LINES.finditer(text)]
    assert fi_info._provider_starts(text) == want == [2, 1_000_002 + 9 * 400_000 + 1]
