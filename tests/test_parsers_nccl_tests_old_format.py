"""Issue 32: an old-format nccl-tests table (no `redop`/`root` columns, an `error` column of
`0e+00` deviations where `#wrong` counts are now) of an alltoall reads the busbw the current
format does: the error column is not taken for busbw (it read 0). The table is a real alltoall
run (tests/samples/nccl-tests/real_prompt_cmd_alltoall_2080ti_x2_md_fence.txt, its SOURCES
entry) rewritten cell for cell into the oldest layout (tests/data/nccl_tests/
old_no_redop_no_header.txt, from NVIDIA/nccl#340, is a real table in it); no real old alltoall
table was found (tests/samples/SOURCES.md). Read bare and under each wrapper the shared reader knows."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from harness.parsers import inspect_kind
from harness.profiles.table import get_profile
from tests.test_samples_wrapped import MORE_WRAPPERS, WRAPPERS

REAL = Path(__file__).parent / "samples/nccl-tests/real_prompt_cmd_alltoall_2080ti_x2_md_fence.txt"
_ROW = re.compile(r"^(\s+\d+\s+\d+\s+\w+)\s+none\s+-1(\s+\S+\s+\S+\s+\S+)\s+(\S+)"
                  r"(\s+\S+\s+\S+\s+\S+)\s+(\S+)\s*$")
KEYS = ("collective", "avg_busbw_gb_s", "largest", "completed")


def _old(line: str) -> str:
    m = _ROW.match(line)
    if m is None:
        return line.replace(" redop    root", "").replace("#wrong", " error")
    return f"{m[1]}{m[2]}  0e+00{m[4]}  {'0e+00' if m[5] == '0' else m[5]}"


def _read(text: str) -> dict:
    fn = inspect_kind("nccl-tests")
    assert fn is not None
    return fn(io.StringIO(text), profile=get_profile("local-cpu"))


@pytest.mark.parametrize("wrapper", ["bare", *WRAPPERS, *MORE_WRAPPERS])
def test_an_old_alltoall_table_reads_the_busbw_the_new_one_does(wrapper: str):
    text = REAL.read_text(encoding="utf-8")
    old = "\n".join(_old(line) for line in text.splitlines()) + "\n"
    assert "0e+00" in old and " none " not in old
    if wrapper != "bare":
        wrap = {**WRAPPERS, **MORE_WRAPPERS}[wrapper]
        old = "".join(wrap(line) + "\n" for line in old.splitlines())
    bare, got = _read(text), _read(old)
    assert bare["largest"] == {"size_bytes": 1073741824, "busbw_gb_s": 4.67}
    assert {k: got[k] for k in KEYS} == {k: bare[k] for k in KEYS}
    assert [r["oop"]["busbw_gb_s"] for r in got["rows"]] == [
        r["oop"]["busbw_gb_s"] for r in bare["rows"]]
