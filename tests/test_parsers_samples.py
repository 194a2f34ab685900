"""Every real sample under tests/samples/ against its hand-read expectation (data, not code).

A sample is two files: `X` (real output, origin in tests/samples/SOURCES.md) and `X.expect.json`
(`kind`, `source`, `expect` {key: value or matcher}, `expect_paths` {dotted.path: value}). A
matcher is `{"any_contains": s}`, `{"none_contains": s}`, `{"count": n}` or `{"count_min": n}`.
Facts the parsers do not meet yet are listed in GAPS: strict xfails, so meeting one fails the
test until it is taken off the list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.parsers import ParseError, inspect_kinds
from harness.profiles import get_profile

SAMPLES = Path(__file__).parent / "samples"

#: (sample, fact) the parsers do not meet yet, and why.
GAPS = {
    ("real_fragment_dcgm4_diagnostic_test_object_trailing_comma.txt", "*"):
        "one DCGM 4 `tests[]` element without its root object is not read yet",
    ("real_mpijob_flow_sequence_command_x_env_t4_efa.yaml", "*"):
        "env given only as mpirun `-x NAME=value` items of a YAML flow sequence",
    ("real_mpirun_mpmd_usr_bin_env_assignments_nccl_ebpf.sh", "*"):
        "env given through `/usr/bin/env NAME=value prog` in an MPMD command",
    ("real_hyperpod_hma_event_json_nvrm_xid71_quoted.txt", "xid_events.0.time"):
        "the event's `ts` is not taken as the Xid's time",
    ("real_q-d-ECC-580-v100-sxm2-two-gpus-prompt.txt", "gpus.1.index"):
        "`nvidia-smi -i 2` in the prompt above the second output is not used for its index",
}


def _cases() -> list[Any]:
    cases = []
    for exp in sorted(SAMPLES.glob("*/*.expect.json")):
        spec = json.loads(exp.read_text(encoding="utf-8"))
        sample = exp.with_name(exp.name.removesuffix(".expect.json"))
        facts = [*spec.get("expect", {}).items(),
                 *((f"path:{k}", v) for k, v in (spec.get("expect_paths") or {}).items())]
        for fact, want in facts:
            key = fact.removeprefix("path:")
            gap = GAPS.get((sample.name, key)) or GAPS.get((sample.name, "*"))
            marks = [pytest.mark.xfail(reason=gap, strict=True)] if gap else []
            cases.append(pytest.param(spec["kind"], sample, fact, want, marks=marks,
                                      id=f"{sample.name}:{key}"))
    return cases


_RESULTS: dict[Path, dict[str, Any] | None] = {}


def _inspect(kind: str, sample: Path) -> dict[str, Any] | None:
    if sample not in _RESULTS:
        with sample.open(encoding="utf-8", errors="replace", newline="") as fh:
            try:
                _RESULTS[sample] = inspect_kinds()[kind](fh, profile=get_profile("local-cpu"))
            except ParseError:
                _RESULTS[sample] = None
    return _RESULTS[sample]


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return "<absent>"
    return obj


def _matches(want: Any, got: Any) -> bool:
    if isinstance(want, dict) and len(want) == 1:
        (op, arg), = want.items()
        texts = [json.dumps(i).lower() for i in got] if isinstance(got, list) else None
        if op == "any_contains":
            return texts is not None and any(arg.lower() in t for t in texts)
        if op == "none_contains":
            return texts is not None and not any(arg.lower() in t for t in texts)
        if op == "count":
            return texts is not None and len(texts) == arg
        if op == "count_min":
            return texts is not None and len(texts) >= arg
    if isinstance(want, float) and isinstance(got, int | float):
        return abs(want - got) <= 1e-6 * max(1.0, abs(want))
    return bool(want == got)


@pytest.mark.parametrize(("kind", "sample", "fact", "want"), _cases())
def test_sample_fact(kind: str, sample: Path, fact: str, want: Any):
    result = _inspect(kind, sample)
    assert result is not None, f"{sample.name}: nothing recognised"
    got = _get(result, fact.removeprefix("path:")) if fact.startswith("path:") else result.get(
        fact, "<absent>")
    assert _matches(want, got), f"{fact}: want {want!r}, got {got!r}"


def test_every_sample_has_a_source():
    listed = (SAMPLES / "SOURCES.md").read_text(encoding="utf-8")
    for exp in SAMPLES.glob("*/*.expect.json"):
        spec = json.loads(exp.read_text(encoding="utf-8"))
        name = exp.name.removesuffix(".expect.json")
        assert spec["source"] and (exp.parent / name).is_file()
        assert f"`{exp.parent.name}/{name}`" in listed, name
