"""The batch readers of `nvidia-smi` and `dcgmi diag` (issue 32: line speed) read exactly what
the line-by-line readers before them read: every recorded sample of these kinds, plain, with
CRLF line ends, under each wrapper a launcher or log shipper puts around every line
(tests/test_samples_wrapped.py's), and all of a kind's samples concatenated (as the bench's
inputs and a `nvidia-smi -q -l` loop are), parsed to the full record (every field of the
GpuInventory / DcgmDiag, or the ParseError's text).

The old readers' records are kept in tests/golden/key_value_readers.json, written by the
readers of commit d298e39 (before the batch readers) with

    .venv/bin/python -m tests.test_parsers_key_value_equivalence --write

Each record is kept as a digest of its canonical JSON; the plain read is also kept whole, so
that a difference shows which field moved. A sample added later gets its records by the same
`--write`, checked by its X.expect.json; the file's other records must not move, unless a
reader's change says why (round 5: dcgmi's refusal names every `Error:` line it printed, so
real_dcgmi-hostengine-connection-error.txt's error text grew; a table row whose power draw is
`N/A` is read, so table-faulted-gpu-err.txt's lost GPU 1 has its memory size)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.parsers import ParseError
from harness.parsers.dcgm import parse_dcgm_diag
from harness.parsers.nvidia_smi import parse_nvidia_smi
from tests.test_samples_wrapped import WRAPPERS

TESTS = Path(__file__).parent
GOLDEN = TESTS / "golden" / "key_value_readers.json"
KINDS: dict[str, tuple[list[Path], Callable[[str], Any]]] = {
    "nvidia-smi": ([TESTS / "data" / "nvidia_smi", TESTS / "samples" / "nvidia-smi"],
                   parse_nvidia_smi),
    "dcgm": ([TESTS / "data" / "dcgm", TESTS / "samples" / "dcgm"], parse_dcgm_diag),
}


#: Record fields added after the golden file was written, each tested where it was added:
#: DcgmDiag.gpus_detected (tests/test_inspect_unread.py, tests/test_inspect_gpu.py).
ADDED_SINCE = ("gpus_detected",)


def _samples(kind: str) -> list[Path]:
    roots, _ = KINDS[kind]
    return sorted(p for root in roots for p in root.iterdir()
                  if p.is_file() and not p.name.endswith((".expect.json", ".md")))


def _record(kind: str, text: str) -> Any:
    try:
        record = dataclasses.asdict(KINDS[kind][1](text))
    except ParseError as exc:
        return {"error": str(exc)}
    for field in ADDED_SINCE:  # not in the old readers' records: held by their own tests
        record.pop(field, None)
    return json.loads(json.dumps(record, default=str))  # tuples as the golden file holds them


def _digest(record: Any) -> str:
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _variants(text: str) -> dict[str, str]:
    lines = text.splitlines()
    out = {"plain": text}
    for name, wrap in WRAPPERS.items():  # (`crlf` among them)
        out[name] = "".join(wrap(line) + "\n" for line in lines)
    return out


def _inputs(kind: str) -> dict[str, str]:
    """name -> text: each sample, and (text-only kinds' text samples) all concatenated."""
    found = {p.name: p.read_text(encoding="utf-8", errors="replace") for p in _samples(kind)}
    texts = [t for name, t in found.items() if name.endswith(".txt")]
    found["all .txt samples concatenated"] = "".join(t.rstrip("\n") + "\n" for t in texts)
    return found


def _records(kind: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for name, text in _inputs(kind).items():
        variants = {v: _record(kind, t) for v, t in _variants(text).items()}
        out[name] = {"plain": variants["plain"],
                     "digests": {v: _digest(r) for v, r in variants.items()}}
    return out


def _golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text(encoding="utf-8"))


@pytest.mark.parametrize("kind", KINDS)
def test_every_sample_reads_as_the_old_reader_read_it(kind: str):
    want = _golden()[kind]
    got = _records(kind)
    assert set(got) == set(want), "samples added or removed: rewrite the golden file (see above)"
    wrong = []
    for name, record in got.items():
        old = want[name]
        if record["plain"] != old["plain"]:
            moved = [k for k in record["plain"] if record["plain"][k] != old["plain"].get(k)]
            wrong.append((name, "plain", moved))
        wrong += [(name, v) for v, d in record["digests"].items() if old["digests"].get(v) != d]
    assert not wrong, wrong[:20]


def test_the_golden_file_holds_each_kind():
    golden = _golden()
    assert set(golden) == set(KINDS)
    assert all(len(golden[k]) >= 20 for k in KINDS)
    assert all(len(r["digests"]) == len(WRAPPERS) + 1 for k in KINDS for r in golden[k].values())


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(json.dumps({k: _records(k) for k in KINDS}, indent=1, sort_keys=True,
                                 default=str) + "\n", encoding="utf-8")
    print(GOLDEN, GOLDEN.stat().st_size)


@pytest.mark.parametrize("before", [0, 10, 5000])
def test_a_long_preamble_before_the_dcgm_table(before: int):
    """The lines before the first table line are watched (kept up to 4,096, then one at a
    time): the table after them is read, and without one dcgmi's own error is named."""
    table = (TESTS / "data" / "dcgm" / "dcgmi-text-4.2.3-pcie-fail.txt").read_text()
    preamble = "".join(f"banner line {i}\n" for i in range(before))
    want = dataclasses.asdict(parse_dcgm_diag(table))
    assert dataclasses.asdict(parse_dcgm_diag(preamble + table)) == want
    with pytest.raises(ParseError, match="dcgmi reported an error and no results: Error: x"):
        parse_dcgm_diag(preamble + "Error: x\n" + preamble)
    with pytest.raises(ParseError, match="empty input"):
        parse_dcgm_diag("\n" * before)
