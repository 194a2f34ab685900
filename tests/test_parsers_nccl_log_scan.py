"""What keeps `preflight inspect nccl-log` fast without changing its results: the command
imports only the parser of its kind (start-up is part of its time on every log); bench/
bench_nccl_log.py measures the throughput."""

from __future__ import annotations

import importlib

from hypothesis import example, given
from hypothesis import strategies as st

from harness import parsers
from harness.parsers import inspect_kind, inspect_kinds, nccl_log, nccl_log_chunk
from harness.parsers.nccl_log_lines import LIBFABRIC_WARN


def test_inspect_kind_imports_only_its_parser(monkeypatch):
    imported: list[str] = []
    real = importlib.import_module

    def recording(name: str, package: str | None = None):
        imported.append(name)
        return real(name, package)

    monkeypatch.setattr(parsers.importlib, "import_module", recording)
    fn = inspect_kind("nccl-log")
    assert fn is not None and fn.__wrapped__ is nccl_log.inspect_nccl_log
    assert imported == ["harness.parsers.nccl_log"]


def test_inspect_kind_finds_every_kind_and_none_for_an_unknown_one():
    kinds = inspect_kinds()
    for kind, fn in kinds.items():
        found = inspect_kind(kind)
        assert found is not None and found.__wrapped__ is fn.__wrapped__, kind
    for unknown in ("nope", "nccl_log", "../x", ""):
        assert inspect_kind(unknown) is None, unknown


def test_a_kind_outside_its_namesake_module_is_still_found(monkeypatch):
    """The module named after a kind is a shortcut: a kind defined elsewhere is found too."""
    def moved(stream, *, profile):
        return {}

    real = parsers.inspect_kinds
    monkeypatch.setattr(parsers, "inspect_kinds", lambda: {**real(), "fancy-log": moved})
    assert inspect_kind("fancy-log") is moved


@given(st.lists(st.sampled_from([b"<warn> ", b"<warn>", b"<stdout>:", b"<", b"x", b" ", b"\n",
                                 b"fi_getinfo: provider efa output empty list"]), max_size=300),
       st.integers(0, 400))
@example([b"<stdout>:"] * nccl_log_chunk._MEMCHR_TRIES + [b"<warn> ", b"x", b"\n"] * 2, 10**6)
def test_libfabric_warnings_are_the_regexs(parts, cut):
    """The memchr search finds what LIBFABRIC_WARN.findall finds, where the regex takes over
    too (the example: a warning is the first `<` past the tries)."""
    chunk = bytearray(b"".join(parts))
    end = min(cut, len(chunk))
    assert nccl_log_chunk._libfabric_warnings(chunk, end) == LIBFABRIC_WARN.findall(chunk, 0, end)
