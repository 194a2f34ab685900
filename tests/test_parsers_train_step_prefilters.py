"""train-step's fast readers find what the plain rules find: each classifier's prefilter (a
substring test before the rule, the last exception searched from the end, the result lines
found by `str.find`) against the rule run over the whole text, on every recorded sample, bare,
CRLF and under each wrapper, and on texts made to trip each shortcut."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.parsers import train_step as ts
from tests.test_samples_wrapped import WRAPPERS

DATA = Path(__file__).parent / "data" / "train_step"
TEXTS = {p.name: p.read_text(encoding="utf-8", errors="replace")
         for p in sorted(DATA.glob("*.txt"))}

#: Each classifier and its rule, read the plain way (what the classifier did before).
RULES = {ts._no_torch: ts._NO_TORCH, ts._te: ts._TE_LINE, ts._te_loader: ts._TE_LOADER,
         ts._oom: ts._OOM,
         ts._gloo: ts._GLOO_TIMEOUT, ts._abort: ts._ABORT}


def _reference_json_lines(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        at = line.find(ts.SCHEMA_PREFIX)
        if at < 0:
            continue
        try:
            record = json.loads(line[at:])
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _reference_exception(text: str) -> tuple[int, str] | None:
    found = [m for m in ts._EXCEPTION.finditer(text)
             if "ChildFailedError" not in m.group("line")]
    return (found[-1].start(), found[-1].group("line")) if found else None


TRICKS = [
    "Traceback:\n  x\nValueError: first\n[rank3]: RuntimeError: second\n"
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: last\n",
    "a ValueError: not at a line start\nKeyError: 'x'\nsome Error: y\n",
    "ModuleNotFoundError: No module named 'tranſformer_engine'\n",  # ſ is s under re.I
    "RuntimeError: CUDA OUT OF MEMORY. Tried to allocate 2.00 GiB\n",
    "ERROR: TRANSFORMER_ENGINE.so: undefined symbol: x\n",
    "warn\n[rank1]: ncclRemoteError: peer gone\nx ncclSystemError: again\n",
    "no code here\n ncclInternalError\n",
    '{"schema": "gpu-preflight.train_step/v1", "a": 1}\x0bjunk\n'
    'x {"schema": "gpu-preflight.train_step/v1", "b": 2}\u2028'
    '{"schema": "gpu-preflight.train_step/v1", "c": 3}\n'
    '{"schema": "gpu-preflight.train_step/v1", "d": 4} {"schema": "gpu-preflight.train_step/v1"}\n',
    "Rank 3 failed to pass monitoredBarrier in 30000 ms\nterminate called after throwing x\n",
    "exitcode  : -6 (pid: 12)\n",
]


def _variants() -> list[tuple[str, str]]:
    out = []
    for name, text in [*TEXTS.items(), *((f"trick{i}", t) for i, t in enumerate(TRICKS))]:
        out.append((name, text))
        for wrapper, wrap in WRAPPERS.items():
            out.append((f"{name}:{wrapper}", "\n".join(wrap(ln) for ln in text.split("\n"))))
    return out


VARIANTS = _variants()


def test_samples_exist():
    assert len(TEXTS) >= 10


@pytest.mark.parametrize("name,text", VARIANTS, ids=[n for n, _ in VARIANTS])
def test_fast_readers_find_what_the_rules_find(name: str, text: str,
                                              monkeypatch: pytest.MonkeyPatch):
    for classify, rule in RULES.items():
        m = rule.search(text)
        failure = classify(text)
        assert (failure is None) == (m is None), (classify.__name__, name)
    assert ts._json_lines(text) == _reference_json_lines(text)
    last = ts._last_exception(text)
    assert (None if last is None else (last.start(), last.group("line"))) == (
        _reference_exception(text))
    fast = ts._nccl(text)
    monkeypatch.setattr(ts, "_NCCL_CODE_WORD", re.compile(""))  # the code rule from the start
    assert fast == ts._nccl(text)


def test_the_tricks_reach_each_shortcut():
    # Each shortcut is reached and decides something (a test that cannot fail is a defect).
    assert ts._last_exception(TRICKS[0]).group("line") == "RuntimeError: second"  # type: ignore[union-attr]
    assert ts._last_exception(TRICKS[1]).group("line") == "KeyError: 'x'"  # type: ignore[union-attr]
    assert ts._te(TRICKS[2]) is not None and ts._oom(TRICKS[3]) is not None
    assert ts._te(TRICKS[4]) is not None
    assert [sorted(r) for r in ts._json_lines(TRICKS[7])] == [
        ["a", "schema"], ["b", "schema"], ["c", "schema"]]  # (the 4th line is not one record)
    assert ts._gloo(TRICKS[8]) is not None and ts._abort(TRICKS[8]) is not None
    assert ts._abort(TRICKS[9]) is not None
    assert "ncclRemoteError: peer gone" in ts._nccl(TRICKS[5]).message  # type: ignore[union-attr]
    assert "ncclInternalError" in ts._nccl(TRICKS[6]).message  # type: ignore[union-attr]


def test_parse_reads_the_same_with_one_abort_search():
    # parse_train_step searches each chunk for an abort once (for `aborted_at_exit` and the
    # classifier); a log whose only finding is the abort still names it.
    out = ts.parse_train_step("step 1\nterminate called without an active exception\n")
    assert out.aborted_at_exit and out.failure is not None
    assert out.failure.kind == "abort_at_exit"
