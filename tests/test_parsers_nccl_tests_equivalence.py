"""nccl-tests output reads as it did before the table's C row scan and batch row builder (issue 32
item 3): tests/golden/nccl_tests_equivalence.json holds the digest of parse_nccl_tests' whole
result (its repr and its `inspect` dict) as main at 3c19681 gave it, for every file under
tests/data/nccl_tests and tests/samples/nccl-tests bare and under each wrapper of
tests/test_samples_wrapped.py, whole and in 257-character chunks, and for generated inputs: the
bench's single long table (bench_inspect.py `nccl-tests (one table)`, here 2 MB, 17,000 rows
past MAX_ROWS), long tables with malformed rows inside, and concatenated runs (bench
`nccl-tests`), each also read for another collective than the first. A changed reading names
its input. Regenerate only when a reading is meant to change (say why in the commit):
`.venv/bin/python -m tests.test_parsers_nccl_tests_equivalence --write` (run from a checkout of
the revision whose readings are recorded).
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.parsers import ParseError
from harness.parsers.nccl_tests import parse_nccl_tests
from harness.parsers.reader import Input
from tests.test_parsers_nccl_tests_rows import _long_table
from tests.test_samples_wrapped import WRAPPERS

TESTS = Path(__file__).parent
GOLDEN = TESTS / "golden" / "nccl_tests_equivalence.json"
FOLDERS = ("data/nccl_tests", "samples/nccl-tests")


def _files() -> list[Path]:
    return [p for folder in FOLDERS for p in sorted((TESTS / folder).iterdir())
            if p.is_file() and p.suffix != ".md" and not p.name.endswith(".expect.json")]


def _one_table(size: int) -> str:
    """bench_inspect.py's `_one_table`: current_2node_h100.txt's banner, its rows repeated to
    `size` characters, its footer."""
    lines = (TESTS / "data" / "nccl_tests" / "current_2node_h100.txt").read_text(
        encoding="utf-8").splitlines()
    head = [ln for ln in lines if ln.startswith("#") and "Out of" not in ln and "Avg bus" not in ln]
    rows = [ln for ln in lines if ln.strip() and not ln.startswith("#")]
    foot = [ln for ln in lines if "Out of" in ln or "Avg bus" in ln]
    out, written, i = ["\n".join(head)], 0, 0
    while written < size:
        out.append(rows[i % len(rows)])
        written += len(out[-1]) + 1
        i += 1
    return "\n".join([*out, *foot]) + "\n"


def _runs(size: int) -> str:
    """bench_inspect.py's `nccl-tests` input: the samples with a footer, one after another."""
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in _files()
             if p.suffix == ".txt"]
    texts = [t for t in texts if "Avg bus" in t]
    out, written = [], 0
    while written < size:
        out.append(texts[len(out) % len(texts)])
        written += len(out[-1])
    return "".join(out)


GENERATED: dict[str, Callable[[], str]] = {
    "one table 2 MB": lambda: _one_table(2_000_000),
    "long table 12,000 rows": lambda: _long_table(12_000),
    "long table 10,300 rows, malformed rows": lambda: _long_table(10_300, odd_every=97),
    "concatenated runs 1 MB": lambda: _runs(1_000_000),
}


def _reading(text: str, chunk: int | None, collective: str | None = None) -> str:
    """The digest of the whole result and its inspect dict (`error`: refused)."""
    try:
        result = parse_nccl_tests(Input(text, chunk=chunk), collective=collective)
        blob = repr(result) + json.dumps(result.to_dict(), sort_keys=True)
    except ParseError as exc:
        blob = f"error: {exc}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _forms(text: str) -> dict[str, str]:
    forms = {"bare": text}
    for name, wrap in WRAPPERS.items():
        forms[name] = "\n".join(wrap(line) for line in text.split("\n"))
    return forms


def _file_readings(path: Path) -> dict[str, str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return {f"{form} {chunk}": _reading(body, chunk)
            for form, body in _forms(text).items() for chunk in (None, 257)}


def _generated_readings(make: Callable[[], str]) -> dict[str, str]:
    text = make()
    return {f"{collective} {chunk}": _reading(text, chunk, collective)
            for collective in (None, "all_gather") for chunk in (None, 50_000)}


def _all() -> dict[str, dict[str, str]]:
    golden = {p.relative_to(TESTS).as_posix(): _file_readings(p) for p in _files()}
    golden.update({name: _generated_readings(make) for name, make in GENERATED.items()})
    return golden


def test_every_nccl_tests_input_reads_as_before() -> None:
    golden = json.loads(GOLDEN.read_text(encoding="utf-8"))
    files = {p.relative_to(TESTS).as_posix(): p for p in _files()}
    assert set(golden) == set(files) | set(GENERATED), sorted(set(golden) ^ set(files))[:5]
    changed = [f"{name} {form}" for name, path in files.items()
               for form, reading in _file_readings(path).items() if golden[name][form] != reading]
    changed += [f"{name} {form}" for name, make in GENERATED.items()
                for form, reading in _generated_readings(make).items()
                if golden[name][form] != reading]
    assert not changed, f"{len(changed)} reading(s) changed, e.g. {changed[:5]}"


def test_the_generated_inputs_reach_past_max_rows() -> None:
    result = parse_nccl_tests(Input(_one_table(2_000_000)))
    assert len(result.rows) == 10_000 and result.warnings and result.avg_busbw_gb_s == 70.742


def test_the_digest_sees_one_changed_row() -> None:
    text = _one_table(200_000)
    row = "        8192          2048     float     sum      -1    131.6    0.06    0.12      0"
    assert row in text
    changed = text.replace(row, row.replace("131.6", "131.7"), 1)
    assert _reading(text, None) != _reading(changed, None)


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.write_text(json.dumps(_all(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
elif __name__ == "__main__":
    pytest.main([__file__, "-q"])
