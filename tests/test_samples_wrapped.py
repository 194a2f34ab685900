"""Every recorded sample of a log kind, under each wrapper a launcher or log shipper puts around
every line, reads as the bare sample does: the readers generalise by kind of wrapper, not by the
samples that happened to come wrapped. A wrapper adds only what it says (the rank or pod it
names; under a shipper's stamp, a line shaped `host kernel: ...` is a journal line of that
time, as `journalctl -o short-iso` prints it).

Not wrapped, each for its reason: nccl-tests `-J` documents (a file nccl-tests writes, never
its stdout), and a console copy hard-wrapped mid-record (its continuation lines were cut by the
terminal, after any wrapper: they carry none)."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness.parsers import ParseError, inspect_kind
from harness.profiles.table import get_profile

ROOTS = (Path(__file__).parent / "data", Path(__file__).parent / "samples")
KINDS = ("nccl-log", "nccl-tests", "fi-info", "nvidia-smi", "dcgm", "kernel-log", "train-step")
STAMP = "2025-06-01T12:00:00.123456789Z"


def _docker(line: str) -> str:
    # docker's json-file driver (daemon/logger/jsonfilelog): one record per line.
    return json.dumps({"log": line + "\n", "stream": "stdout", "time": STAMP}, separators=(",", ":"))


WRAPPERS: dict[str, Callable[[str], str]] = {
    "docker-json-file": _docker,
    "kubectl-prefix": lambda line: f"[pod/trainer-worker-3/pytorch] {line}",
    "kubectl-timestamps": lambda line: f"{STAMP} {line}",
    "srun-label": lambda line: f"3: {line}",
    "mpirun-tag-output": lambda line: f"[1,3]<stdout>:{line}",
    "ansi-colour": lambda line: f"\x1b[32m{line}\x1b[0m",
    "crlf": lambda line: line + "\r",
}
#: The other wrappers harness/parsers/unwrap.py says it knows (issue 32's done-when: every
#: kind read right under each wrapper the shared reader knows). Kept apart from WRAPPERS, which
#: tests/test_parsers_key_value_equivalence.py holds to the old readers' golden records.
MORE_WRAPPERS: dict[str, Callable[[str], str]] = {
    "mpirun-timestamp-output": lambda line: f"Thu Jun 18 14:28:58 2020[1,3]<stdout>:{line}",
    "bracketed-stamp": lambda line: f"[2026-01-02 10:24:27] {line}",
    "cloudwatch-console": lambda line: f"| 2025-05-16T16:39:51.208-07:00 | {line}",
    "markdown-quote": lambda line: f"> {line}",
    # Wrappers nest: a job's CloudWatch copy of an srun-labelled log, quoted into an issue.
    "quoted-cloudwatch-srun": lambda line: f"> | 2025-05-16T16:39:51.208-07:00 | 3: {line}",
}
#: (wrapper, kind) not read as the bare samples yet, and what differs, as strict xfails (meeting
#: one fails the test until the gap is taken off). None left (issue 32): the markdown quote is
#: a block's wrapper (Unwrapper.transported), a CloudWatch row's message keeps its `|`s
#: (cloudwatch_message), and a bracketed stamp or a CloudWatch row is a shipper's, removed for
#: kernel-log too (`Unwrapper(timestamps=False)`), the line's own time kept.
GAPS: dict[tuple[str, str], str] = {}
#: What a wrapper names, where the kind's result shows it.
ADDED = {"kubectl-prefix": {"hosts_seen": ["trainer-worker-3"]},
         "srun-label": {"ranks_seen": ["3"]}, "mpirun-tag-output": {"ranks_seen": ["3"]},
         "mpirun-timestamp-output": {"ranks_seen": ["3"]},
         "quoted-cloudwatch-srun": {"ranks_seen": ["3"]}}
NOT_WRAPPED = {"json_constructed.json": "an nccl-tests -J file",
               "json_cut_short_constructed.json": "an nccl-tests -J file",
               "real_json_v3_2.19.7_t4_per_iter_one_device_entry.json": "an nccl-tests -J file",
               "real_json_v3_died_at_devices_no_results.json": "an nccl-tests -J file",
               "real_watchdog_wrapped_lines.log": "hard-wrapped by a console after any wrapper"}


def _samples() -> list[Any]:
    found = []
    for exp in sorted(p for root in ROOTS for p in root.rglob("*.expect.json")):
        spec = json.loads(exp.read_text(encoding="utf-8"))
        sample = exp.with_name(exp.name.removesuffix(".expect.json"))
        if spec.get("kind") in KINDS and "rejects" not in spec and sample.name not in NOT_WRAPPED:
            found.append((spec["kind"], sample, spec.get("profile", "local-cpu")))
    return found


SAMPLES = _samples()


def _inspect(kind: str, text: str, profile: str) -> dict[str, Any]:
    fn = inspect_kind(kind)
    assert fn is not None
    try:
        result = fn(io.StringIO(text), profile=get_profile(profile))
    except ParseError as exc:
        return {"error": str(exc)}
    result.pop("notes", None)
    return result


def _shipper_times(bare: Any, wrapped: Any) -> Any:
    """`wrapped` with the shipper's stamp taken off where the bare line had no time of its own
    (kernel-log: the stamp is then the event's time), so that the rest is compared."""
    if isinstance(bare, dict) and isinstance(wrapped, dict):
        return {k: (None if v == STAMP and bare.get(k) is None else _shipper_times(bare.get(k), v))
                for k, v in wrapped.items()}
    if isinstance(bare, list) and isinstance(wrapped, list) and len(bare) == len(wrapped):
        return [_shipper_times(b, w) for b, w in zip(bare, wrapped, strict=True)]
    return wrapped


def _wrapped(text: str, wrap: Callable[[str], str]) -> str:
    """`text` with every line wrapped; a last line without a line end (a copy cut mid-line,
    which kernel-log names) stays without one, whatever the wrapper adds after it."""
    lines = [wrap(line) for line in text.splitlines()]
    if lines and not text.endswith(("\n", "\r")):
        return "".join(line + "\n" for line in lines[:-1]) + lines[-1].rstrip("\r")
    return "".join(line + "\n" for line in lines)


def test_the_samples_are_there():
    kinds = {kind for kind, _, _ in SAMPLES}
    assert kinds == set(KINDS) and len(SAMPLES) > 150


def _cases() -> list[Any]:
    cases = [pytest.param(kind, w, id=f"{kind}-{w}") for w in WRAPPERS for kind in KINDS]
    for w in MORE_WRAPPERS:
        for kind in KINDS:
            gap = GAPS.get((w, kind))
            marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
            cases.append(pytest.param(kind, w, marks=marks, id=f"{kind}-{w}"))
    return cases


@pytest.mark.parametrize(("kind", "wrapper"), _cases())
def test_a_wrapped_sample_reads_as_the_bare_one(kind: str, wrapper: str):
    wrap, wrong = {**WRAPPERS, **MORE_WRAPPERS}[wrapper], []
    for _, sample, profile in [s for s in SAMPLES if s[0] == kind]:
        text = sample.read_text(encoding="utf-8", errors="replace")
        bare = _inspect(kind, text, profile)
        got = _inspect(kind, _wrapped(text, wrap), profile)
        for key, value in ADDED.get(wrapper, {}).items():
            if key in bare:
                assert got.get(key) == value, (sample.name, key)
                got[key] = bare[key]
        if kind == "kernel-log" and wrapper in ("kubectl-timestamps", "bracketed-stamp",
                                                "cloudwatch-console", "quoted-cloudwatch-srun"):
            got = _shipper_times(bare, got)
            for key in ("from_boot", "window"):  # judged from the times, some now known
                got[key] = bare.get(key)
        if got != bare:
            wrong.append(f"{sample.name}: " + ", ".join(
                k for k in bare if got.get(k) != bare[k]) if "error" not in got else got["error"])
    assert not wrong, wrong
