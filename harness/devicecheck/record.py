"""What a device-check step brings back: figures (a value with its unit and, where it depends
on one, the message size) and the step's outcome. A step that ran and produced no figure, or
not every figure it was meant to, has FAILED: never OK (the rule: unknown is never healthy).
Also the two files every run writes: figures.json and summary.txt."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness.base.jsontypes import JSONObject, JSONValue

__all__ = ["FIGURES_SCHEMA", "Expected", "Figure", "StepResult", "figure_key", "settle",
           "summary_lines", "write_outputs"]

FIGURES_SCHEMA = "gpu-preflight.device-check/v1"

#: A step's outcomes: ok (every expected figure, no problem), failed, skipped (not run, with
#: the reason: the machine lacks what the step measures).
OUTCOMES = ("ok", "failed", "skipped")


@dataclass(frozen=True, slots=True)
class Figure:
    """One measured value. `unit` is never omitted ("" only for a text value such as a
    version); `size_bytes` is the message or buffer size it was measured at, where it depends
    on one; `where` names the rank, GPU, recipe or seed (empty when it is the machine's)."""

    name: str
    value: JSONValue
    unit: str
    size_bytes: int | None = None
    where: str = ""

    def key(self) -> tuple[str, str, int | None]:
        return figure_key(self.name, self.where, self.size_bytes)

    def to_dict(self) -> JSONObject:
        out = asdict(self)
        if self.size_bytes is None:
            del out["size_bytes"]
        if not self.where:
            del out["where"]
        return out

    def text(self) -> str:
        value = f"{self.value:.4g}" if isinstance(self.value, float) else str(self.value)
        size = f" @ {_size(self.size_bytes)}" if self.size_bytes is not None else ""
        where = f" [{self.where}]" if self.where else ""
        return f"{self.name}{where}{size} = {value}{' ' + self.unit if self.unit else ''}"


def figure_key(name: str, where: str = "", size_bytes: int | None = None) -> tuple[
        str, str, int | None]:
    return (name, where, size_bytes)


#: A figure a step is meant to bring back: (name, where, size_bytes).
Expected = tuple[str, str, int | None]


def _size(n: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= factor and n % factor == 0:
            return f"{n // factor} {unit}"
    return f"{n} B"


def _describe(key: Expected) -> str:
    name, where, size = key
    return name + (f" [{where}]" if where else "") + (f" @ {_size(size)}" if size else "")


@dataclass(slots=True)
class StepResult:
    """One step: its outcome, figures, and what went wrong or was not measured."""

    step: str
    what: str
    outcome: str = "failed"
    seconds: float = 0.0
    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Why the step failed (missing figures are listed here too)."""
    not_measured: list[str] = field(default_factory=list)
    """What this step does not measure on this machine, and why (stated, never silent)."""
    reason: str = ""
    """Why the step was skipped."""

    def to_dict(self) -> JSONObject:
        out: JSONObject = {"step": self.step, "what": self.what, "outcome": self.outcome,
                           "seconds": round(self.seconds, 1),
                           "figures": [f.to_dict() for f in self.figures]}
        if self.problems:
            out["problems"] = list(self.problems)
        if self.not_measured:
            out["not_measured"] = list(self.not_measured)
        if self.reason:
            out["reason"] = self.reason
        return out


def settle(result: StepResult, expected: Iterable[Expected] = ()) -> StepResult:
    """The step's outcome from what it brought back: failed when it has a problem, no figure
    at all, or lacks an expected figure (each missing one named); else ok. Skipped steps stay
    skipped."""
    if result.outcome == "skipped":
        return result
    have = {f.key() for f in result.figures}
    missing = [k for k in dict.fromkeys(expected) if k not in have]
    if missing:
        shown = ", ".join(_describe(k) for k in missing[:12])
        more = f" and {len(missing) - 12} more" if len(missing) > 12 else ""
        result.problems.append(f"missing figures: {shown}{more}")
    if not result.figures:
        result.problems.append("the step ran and brought back no figure")
    result.outcome = "failed" if result.problems else "ok"
    return result


def summary_lines(machine: JSONObject, steps: Sequence[StepResult]) -> list[str]:
    """summary.txt: the machine, then one line per step and one per figure."""
    lines = [f"device-check ({machine.get('mode')}): {machine.get('gpu')}, driver "
             f"{machine.get('driver')}, {machine.get('gpus')} GPU(s), {machine.get('date')}, "
             f"{machine.get('duration_s')} s of a {machine.get('budget_s')} s budget"]
    for s in steps:
        if s.outcome == "skipped":
            lines.append(f"{s.step:<22} SKIPPED  {s.reason}")
            continue
        lines.append(f"{s.step:<22} {s.outcome.upper():<8} {s.seconds:6.1f} s  "
                     f"{len(s.figures)} figure(s)")
        lines += [f"    {f.text()}" for f in s.figures]
        lines += [f"    PROBLEM: {p}" for p in s.problems]
        lines += [f"    not measured: {n}" for n in s.not_measured]
    return lines


def write_outputs(out: Path, machine: JSONObject, steps: Sequence[StepResult]) -> None:
    """figures.json (`steps[]` with `step`, `outcome`, `figures`) and summary.txt."""
    doc = {"schema": FIGURES_SCHEMA, "machine": machine, "steps": [s.to_dict() for s in steps]}
    (out / "figures.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")
    (out / "summary.txt").write_text("\n".join(summary_lines(machine, steps)) + "\n")
