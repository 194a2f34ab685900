"""Fuzz every parser and every `preflight inspect` kind: whatever the input, only a result or a
ParseError comes out, in bounded time.

Two generators, both deterministic (a fixed seed, so a failure reproduces):
- a seeded mutator over the real samples in tests/data: byte flips, truncation, line duplication
  and deletion, huge lines, runs of one character, Unicode digits, NULs, CRLF and lone CRs,
  invalid UTF-8, huge / infinite / malformed numbers, deep brackets, splices of other kinds;
- hypothesis (derandomized): arbitrary bytes, and lines drawn from the samples mixed with
  arbitrary text.

Each example goes through what `preflight inspect` runs (the registry function on a text stream
opened as the CLI opens files, then the output redaction and JSON encoding) and through the
parser's own str entry point. CI runs a bounded number of examples (~30-60 s on 2 cores);
PREFLIGHT_FUZZ_EXAMPLES=N runs N mutated examples per kind (and N/4 hypothesis examples per
test), PREFLIGHT_FUZZ_SEED=S another seed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.base.redact import Redactor
from harness.parsers import ParseError, inspect_kinds
from harness.parsers.dcgm import parse_dcgm_diag
from harness.parsers.env import parse_env_dump
from harness.parsers.fi_info import parse_fi_info
from harness.parsers.kernel_log import parse_kernel_log
from harness.parsers.nccl_log import parse_nccl_log
from harness.parsers.nccl_tests import parse_nccl_tests
from harness.parsers.nvidia_smi import parse_nvidia_smi
from harness.parsers.nvidia_smi_csv import parse_smi_csv
from harness.parsers.nvidia_smi_query import parse_smi_query
from harness.parsers.nvidia_smi_table import parse_smi_table
from harness.parsers.nvidia_smi_xml import parse_smi_xml
from harness.parsers.train_step import classify_failure, parse_train_step
from harness.profiles.table import get_profile

DATA = Path(__file__).parent / "data"
SEED = int(os.environ.get("PREFLIGHT_FUZZ_SEED", "20260601"))
EXAMPLES = int(os.environ.get("PREFLIGHT_FUZZ_EXAMPLES", "40"))
#: Seconds one example may take: a hang detector (linear parsers take milliseconds on these
#: inputs, ~100x less on a quiet machine), not a benchmark.
EXAMPLE_BOUND_S = 30.0

#: Sample folders per inspect kind.
SAMPLES = {"env": ["env", "topology"], "fi-info": ["fi_info"], "nccl-tests": ["nccl_tests"],
           "kernel-log": ["kernel_log"], "nvidia-smi": ["nvidia_smi"], "dcgm": ["dcgm"],
           "nccl-log": ["nccl_log"], "train-step": ["train_step"], "topology": ["topology", "env"]}
#: The str entry points of the parsers, per kind.
PARSERS: dict[str, list[Callable[[str], object]]] = {
    "env": [parse_env_dump], "topology": [parse_env_dump], "fi-info": [parse_fi_info],
    "nccl-tests": [parse_nccl_tests], "kernel-log": [parse_kernel_log],
    "nvidia-smi": [parse_nvidia_smi, parse_smi_query, parse_smi_table, parse_smi_xml, parse_smi_csv],
    "dcgm": [parse_dcgm_diag], "nccl-log": [parse_nccl_log],
    "train-step": [parse_train_step, classify_failure],
}
PROFILE = get_profile("p5.48xlarge")
KINDS = inspect_kinds()


def _samples(kind: str) -> list[tuple[str, bytes]]:
    found = []
    for folder in SAMPLES[kind]:
        for path in sorted((DATA / folder).iterdir()):
            if path.is_file() and path.suffix != ".md" and not path.name.endswith(".expect.json"):
                found.append((f"{folder}/{path.name}", path.read_bytes()))
    return found


ALL_SAMPLES = [s for kind in SAMPLES for s in _samples(kind)]
#: Digits that str.isdigit() accepts (or \d matches) but int() rejects or reads otherwise.
UNICODE_DIGITS = ["²", "١", "٣", "۷", "߀", "𝟘", "০", "①", "٠"]
BAD_NUMBERS = ["9" * 5000, "1e999999", "-1e400", "inf", "-inf", "nan", "-nan", "--0", "1_000",
               "0x1f", "+", "-", ".", "1e", "١٢", "²", "4294967296" * 3, "NaN", "Infinity"]


def _mutate(data: bytes, rng: random.Random) -> tuple[bytes, list[str]]:
    """1 to 3 random mutations of `data`; returns it and their names (for the failure message)."""
    ops = []
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(_OPS)
        data = op(data, rng)
        ops.append(op.__name__)
    return data, ops


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n") or [b""]


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data or b"x")
    for _ in range(rng.randint(1, 8)):
        buf[rng.randrange(len(buf))] = rng.randrange(256)
    return bytes(buf)


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data) + 1)]


def duplicate_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"\n".join(lines[:i] + [lines[i]] * rng.randint(2, 200) + lines[i + 1:])


def delete_lines(data: bytes, rng: random.Random) -> bytes:
    lines = _lines(data)
    i = rng.randrange(len(lines))
    return b"\n".join(lines[:i] + lines[i + rng.randint(1, 10):])


def huge_line(data: bytes, rng: random.Random) -> bytes:
    """A 100-300 KB line (an nvidia-smi line over 131,072 characters, a flood): random text,
    or a copy of a real line padded out."""
    lines = _lines(data)
    size = rng.randint(100_000, 300_000)
    if rng.random() < 0.5:
        alphabet = rng.choice([b"a", b" ", b"a ", b"0123456789", b"|-+", b", ", b"a=b ", b"[{\"'",
                               b"abcdefghijklmnopqrstuvwxyz0123456789./:-"])
        line = bytes(rng.choice(alphabet) for _ in range(min(size, 20_000))) * (size // 20_000 + 1)
    else:
        base = rng.choice(lines) or b"x"
        line = base + base[-1:] * size
    i = rng.randrange(len(lines) + 1)
    return b"\n".join([*lines[:i], line[:size], *lines[i:]])


def character_run(data: bytes, rng: random.Random) -> bytes:
    """A run of one character inside a real line (the shape that makes a regex quadratic)."""
    lines = _lines(data)
    i = rng.randrange(len(lines))
    line = lines[i]
    at = rng.randrange(len(line) + 1)
    run = rng.choice([b" ", b"\t", b"a", b"0", b"-", b".", b":", b"|", b"=", b"[", b"/", b"_",
                      b"\\", b'"', b"a.", b"a:", b", ", b"0x"]) * rng.randint(2_000, 40_000)
    lines[i] = line[:at] + run + line[at:]
    return b"\n".join(lines)


def unicode_digits(data: bytes, rng: random.Random) -> bytes:
    digit = rng.choice(UNICODE_DIGITS).encode()
    rate = rng.choice([0.05, 0.5, 1.0])
    return b"".join(digit if 48 <= b <= 57 and rng.random() < rate else bytes([b]) for b in data)


def nuls(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 20)):
        buf.insert(rng.randrange(len(buf) + 1), 0)
    return bytes(buf)


def line_ends(data: bytes, rng: random.Random) -> bytes:
    return data.replace(b"\n", rng.choice([b"\r\n", b"\r", b"\n\r", b"\r\r\n"]))


def invalid_utf8(data: bytes, rng: random.Random) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 10)):
        at = rng.randrange(len(buf) + 1)
        buf[at:at] = rng.choice([b"\xff", b"\xfe\xff", b"\xc3(", b"\xed\xa0\x80", b"\xf0\x28\x8c",
                                 b"\x80\x80"])
    return bytes(buf)


def bad_numbers(data: bytes, rng: random.Random) -> bytes:
    """Replace numbers with huge, infinite, Unicode or malformed ones."""
    import re

    numbers = list(re.finditer(rb"-?[0-9]+(?:\.[0-9]+)?", data))
    if not numbers:
        return data + rng.choice(BAD_NUMBERS).encode()
    out, pos = [], 0
    for m in rng.sample(numbers, min(len(numbers), rng.randint(1, 30))):
        out.append((m.start(), m.end()))
    result = bytearray()
    for start, end in sorted(out):
        if start < pos:
            continue
        result += data[pos:start] + rng.choice(BAD_NUMBERS).encode()
        pos = end
    return bytes(result + data[pos:])


def deep_brackets(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.choice([b"[", b"{", b"{\"a\":", b"<a>", b"${"]) * rng.randint(100, 20_000) \
        + data[at:]


def splice(data: bytes, rng: random.Random) -> bytes:
    """Lines of another sample (of any kind) in the middle: logs that hold several tools."""
    _, other = rng.choice(ALL_SAMPLES)
    lines, extra = _lines(data), _lines(other)
    start = rng.randrange(len(extra))
    i = rng.randrange(len(lines) + 1)
    return b"\n".join(lines[:i] + extra[start:start + rng.randint(1, 40)] + lines[i:])


_OPS = [flip_bytes, truncate, duplicate_lines, delete_lines, huge_line, character_run,
        unicode_digits, nuls, line_ends, invalid_utf8, bad_numbers, deep_brackets, splice]


def _check(kind: str, data: bytes, what: str) -> None:
    """`data` through `preflight inspect KIND` (as the CLI reads a file) and the parser's str
    entry points: a result or a ParseError, within EXAMPLE_BOUND_S."""
    start = time.monotonic()
    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="replace", newline="")
    try:
        result: Any = KINDS[kind](stream, profile=PROFILE)
    except ParseError as exc:
        assert str(exc), f"{what}: empty ParseError"
    else:
        assert isinstance(result, dict), f"{what}: {type(result)}"
        json.dumps(Redactor({}).obj(result), default=str)
    text = data.decode("utf-8", "replace")
    for parse in PARSERS[kind]:
        with contextlib.suppress(ParseError):
            parse(text)
    took = time.monotonic() - start
    assert took < EXAMPLE_BOUND_S, f"{what}: {took:.1f} s for {len(data):,} bytes"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_mutated_samples_give_a_result_or_a_parse_error(kind):
    rng = random.Random(SEED ^ zlib.crc32(kind.encode()))
    samples = _samples(kind)
    for example in range(EXAMPLES):
        name, data = rng.choice(samples)
        mutated, ops = _mutate(data, rng)
        what = (f"{kind} example {example} (seed {SEED}): {name} after {'+'.join(ops)}; "
                f"starts {mutated[:120]!r}")
        try:
            _check(kind, mutated, what)
        except (AssertionError, ParseError):
            raise
        except Exception as exc:  # the defect this test exists to find
            raise AssertionError(f"{what}: {type(exc).__name__}: {exc}") from exc


@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_every_real_sample_gives_a_result_or_a_parse_error(kind):
    """Every sample of every kind, fed to every kind (a file pasted under the wrong kind)."""
    for name, data in ALL_SAMPLES:
        _check(kind, data, f"{name} as {kind}")


_HYPOTHESIS = settings(max_examples=max(EXAMPLES // 4, 5), derandomize=True, deadline=None,
                       database=None, suppress_health_check=[HealthCheck.too_slow,
                                                             HealthCheck.data_too_large])
_SAMPLE_LINES = sorted({line for _, data in ALL_SAMPLES
                        for line in data.decode("utf-8", "replace").splitlines() if line.strip()})
_MIXED_LINES = st.lists(
    st.one_of(st.sampled_from(_SAMPLE_LINES), st.text(max_size=80),
              st.sampled_from(_SAMPLE_LINES).map(
                  lambda s: "".join(UNICODE_DIGITS[0] if c.isdigit() else c for c in s))),
    max_size=60,
).map("\n".join)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", sorted(SAMPLES))
@_HYPOTHESIS
@given(data=st.binary(max_size=2048))
def test_arbitrary_bytes_give_a_result_or_a_parse_error(kind, data):
    _check(kind, data, f"{kind}: {data[:120]!r}")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", sorted(SAMPLES))
@_HYPOTHESIS
@given(text=_MIXED_LINES)
def test_real_lines_mixed_with_noise_give_a_result_or_a_parse_error(kind, text):
    _check(kind, text.encode("utf-8", "surrogatepass"), f"{kind}: {text[:120]!r}")
