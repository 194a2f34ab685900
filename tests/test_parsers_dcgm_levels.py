"""DCGM 4.6's levels read test by test (each with its result and its reason), an empty category
that is not a cut, and tables quoted into scripts and docs (`# | ... |`): the samples are built
from DCGM 4.6.0's own display code and test lists (tests/data/dcgm/SOURCES.md)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from harness.parsers import inspect_kind
from harness.parsers.dcgm import parse_dcgm_diag
from harness.parsers.dcgm_records import DCGM_LEVEL_TESTS, OPTIONAL_TESTS
from harness.profiles.table import get_profile

DATA = Path(__file__).parent / "data" / "dcgm"
SAMPLES = Path(__file__).parent / "samples" / "dcgm"
LEVELS = {2: "dcgmi-text-4.6-r2-empty-stress-category-constructed.txt",
          3: "dcgmi-text-4.6-r3-nvbandwidth-fail-constructed.txt",
          4: "dcgmi-text-4.6-r4-memtest-fail-constructed.txt"}


def _inspect(text: str) -> dict:
    fn = inspect_kind("dcgm")
    assert fn is not None
    return fn(io.StringIO(text), profile=get_profile("local-cpu"))


@pytest.mark.parametrize("level", LEVELS)
def test_every_test_of_the_level_is_read_by_name(level: int):
    text = (DATA / LEVELS[level]).read_text()
    diag = parse_dcgm_diag(text)
    want = [t for n in range(1, level + 1) for t in DCGM_LEVEL_TESTS[n] if t not in OPTIONAL_TESTS]
    assert sorted({r.test for r in diag.results}) == sorted(want)
    for r in diag.results:  # each GPU's own result
        assert r.gpu in (0, 1), r
    out = _inspect(text)
    assert out["level_tests"] == {"level": level, "not_seen": []}


def test_a_level_test_missing_from_the_output_is_named():
    text = (DATA / LEVELS[3]).read_text()
    cut = text.split("| nvbandwidth ")[0] + "| nccl_tests" + text.split("| nccl_tests")[1]
    assert _inspect(cut)["level_tests"] == {"level": 3, "not_seen": ["nvbandwidth"]}


@pytest.mark.parametrize(("level", "test", "gpu", "starts"), [
    (3, "nvbandwidth", 1, "GPU 1 memory copy utilization (37%) did not reach idle threshold"),
    (4, "memtest", 0, "A memory mismatch was detected on GPU 0"),
])
def test_a_gpus_failure_keeps_its_reason(level: int, test: str, gpu: int, starts: str):
    """DCGM 4 prints a GPU's reason as `| Warning: GPU1 | ... |` under `GPU1: Fail`; without
    those rows the failure stands with no reason."""
    text = (DATA / LEVELS[level]).read_text()
    failed = parse_dcgm_diag(text).failed
    assert [(r.test, r.gpu) for r in failed] == [(test, gpu)]
    assert failed[0].message.startswith(starts) and failed[0].message.endswith(".")
    lines, skip = [], False
    for line in text.splitlines():
        skip = line.startswith("| Warning: GPU") or (skip and line.startswith("|      "))
        if not skip:
            lines.append(line)
    assert [r.message for r in parse_dcgm_diag("\n".join(lines)).failed] == [""]


def test_a_warned_gpu_keeps_its_reason_and_a_skipped_test_is_said():
    out = _inspect((DATA / LEVELS[4]).read_text())
    assert out["warnings"][0].startswith("pulse_test on GPU 1: warn: GPU 1 memory copy")
    assert "skipped: nccl_tests" in _inspect((DATA / LEVELS[3]).read_text())["warnings"]


def test_an_empty_category_before_the_footer_is_not_a_cut():
    text = (DATA / LEVELS[2]).read_text()
    assert _inspect(text)["cut_at"] is None and _inspect(text)["passed"] is True
    cut = text.rstrip("\n").rsplit("\n", 1)[0]  # the footer gone: cut at the Stress header
    assert _inspect(cut)["cut_at"] == "Stress" and _inspect(cut)["passed"] is None


def _tables() -> list[Path]:
    """The text tables not already quoted line by line (a table kept as a Python comment,
    real_dcgmi-text-3.3.9-r3-h200-in-python-comment.txt, is read as it is, not quoted twice)."""
    return sorted(p for d in (DATA, SAMPLES) for p in d.glob("*.txt")
                  if "| " in (text := p.read_text(encoding="utf-8"))
                  and not any(line.lstrip().startswith(("# |", "# +")) for line in text.splitlines()))


@pytest.mark.parametrize("quote", ["# ", "#", "// ", "> "])
def test_a_table_quoted_line_by_line_reads_as_the_bare_one(quote: str):
    """A table pasted into a script or a doc with each line commented out (`# +---+`)."""
    wrong = []
    for path in _tables():
        text = path.read_text(encoding="utf-8")
        bare = _inspect(text)
        quoted = _inspect("".join(quote + line + "\n" for line in text.splitlines()))
        if quoted != bare:
            wrong.append(path.name)
    assert len(_tables()) >= 10 and not wrong, wrong
