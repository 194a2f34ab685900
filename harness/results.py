"""A check's result and its measurements as typed, frozen records: built here and only here
(the plugin, the run's accounting, an interrupted run, the cluster verdict), and read by field
(the HTML figures, CloudWatch) instead of from the message prose.

On the wire (results.jsonl across pytest-xdist's channel, report.json) a record is plain data:
`to_dict()` gives the keys report.json has always had (v1), plus `size_bytes`, `gpu_index` and
`node` on a measurement when they are known; `from_dict()` reads both. A v1 report (written
before these fields) is brought to today's shape by harness.report.v1 before it is read here,
so no reader parses prose."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import enum
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from harness.base.jsontypes import JSONMapping, JSONObject, JSONValue

__all__ = ["CheckResult", "Measurement", "measurement_name", "plain", "results"]

#: Nesting deeper than this is written as text (a cycle, or a structure no report needs).
_PLAIN_DEPTH = 12


def plain(value: object, _depth: int = 0) -> JSONValue:
    """`value` as plain data (None, bool, int, finite float, str, list, dict with str keys).

    Measurements and results cross pytest-xdist's worker channel (execnet serialises only the
    exact builtin types: a packaging Version, a Path or a numpy scalar kills the worker with an
    INTERNALERROR) and end in report.json (no NaN there). So a value is made plain where it is
    recorded: numbers stay numbers (numpy/torch scalars via `.item()`), NaN and infinities
    become the strings "nan", "inf", "-inf", sets become sorted lists, dataclasses dicts, enums
    their name, bytes text, and anything else (Version, Path, datetime, Decimal) its str()."""
    if value is None or type(value) in (bool, int, str):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        number = float(value)
        return number if math.isfinite(number) else str(number)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", errors="replace")
    if _depth >= _PLAIN_DEPTH:
        return str(value)
    deeper = _depth + 1
    if isinstance(value, Mapping):
        return {k if isinstance(k, str) else str(plain(k, deeper)): plain(v, deeper)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v, deeper) for v in value]
    if isinstance(value, set | frozenset):
        items = [plain(v, deeper) for v in value]
        return sorted(items, key=lambda v: (type(v).__name__, str(v)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name, None), deeper)
                for f in dataclasses.fields(value)}
    if isinstance(value, os.PathLike):
        return os.fsdecode(value)
    if isinstance(value, _dt.date | _dt.time):
        return value.isoformat()
    # numpy and torch, without importing either: a scalar (or 0-d array/tensor) has .item(),
    # an array or tensor .tolist().
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "tolist"):
        try:
            return plain(value.tolist(), deeper)
        except Exception:  # a tensor that cannot leave its device: say what it was
            return str(value)
    if hasattr(value, "item") and callable(value.item) and not isinstance(value, type):
        try:
            return plain(value.item(), deeper)
        except Exception:
            return str(value)
    return str(value)

#: The keys a measurement has always had, in report.json's order.
_MEASUREMENT_KEYS = ("what", "value", "unit", "op", "threshold", "ok")
#: Added in report schema v2: written only when known.
_OPTIONAL_KEYS = ("size_bytes", "gpu_index", "node", "name", "collective")
#: A result's keys, in report.json's order (v1).
_RESULT_KEYS = ("id", "nodeid", "title", "tier", "kind", "suite", "outcome", "message",
                "warnings", "measurements", "remedy", "duration_s", "worker")


def measurement_name(what: str) -> str:
    """`GPU 3 temperature` -> `gpu_temperature`: lower case, digits dropped (a GPU index or a
    size is a label, not a name), every other run of non-letters one `_`. A measurement
    recorded without a name gets this one (docs/reports.md: it changes when `what` does)."""
    return re.sub(r"[^a-z]+", "_", what.lower()).strip("_") or "value"


def _seconds(value: object) -> float | None:
    """A duration as read: None where the record has none (not measured, never 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured value and what it was judged against (`op`, `threshold`, `ok`)."""

    what: str
    value: JSONValue
    unit: str = ""
    op: str | None = None
    threshold: JSONValue = None
    ok: bool | None = None
    size_bytes: int | None = None
    """The message size a bandwidth figure was measured at."""
    gpu_index: int | None = None
    """The GPU (nvidia-smi index) the value belongs to."""
    node: str | None = None
    """The host the value belongs to, when it is not the report's own (cluster figures)."""
    name: str | None = None
    """Its stable name (`gpu_temperature`): what the metrics key it by (docs/reports.md);
    `what` is its text for people, free to change."""
    collective: str | None = None
    """Set on a bus-bandwidth figure (busbw): the collective measured (`all_reduce`,
    `all_gather`, ...); "" when the report that held it did not say which. The figures plot
    these, labelled by it."""

    def to_dict(self) -> JSONObject:
        out = {k: plain(getattr(self, k)) for k in _MEASUREMENT_KEYS}
        out.update({k: plain(getattr(self, k)) for k in _OPTIONAL_KEYS
                    if getattr(self, k) is not None})
        return out

    @classmethod
    def from_dict(cls, data: JSONMapping) -> Measurement:
        """From report.json or results.jsonl."""
        what = str(data.get("what") or "")
        size, gpu = _int(data.get("size_bytes")), _int(data.get("gpu_index"))
        ok = data.get("ok")
        node, name, collective = data.get("node"), data.get("name"), data.get("collective")
        return cls(what=what, value=data.get("value"), unit=str(data.get("unit") or ""),
                   op=data.get("op") or None, threshold=data.get("threshold"),
                   ok=ok if isinstance(ok, bool) else None, size_bytes=size, gpu_index=gpu,
                   node=str(node) if node is not None else None,
                   name=str(name) if name else None,
                   collective=str(collective) if collective is not None else None)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's result on one node (or the cluster's, `worker` "cluster")."""

    id: str
    outcome: str
    nodeid: str = ""
    title: str = ""
    tier: str = "preflight"
    kind: str = "check"
    suite: str = ""
    message: str = ""
    warnings: tuple[str, ...] = ()
    measurements: tuple[Measurement, ...] = ()
    remedy: str = ""
    duration_s: float | None = None
    """How long the check took; None: not measured (a record read without one, a check that
    reported nothing, a judge run on a snapshot by harness.checking.run_check), never 0."""
    worker: str = "main"
    extra: JSONMapping = field(default_factory=dict)
    """Other keys the record carries (a collected item's `exclusive`, `why`, `defined`)."""

    @property
    def failed(self) -> bool:
        return self.outcome in ("fail", "error")

    def failed_gpus(self) -> set[int]:
        """The GPU indices this check named as faulty (failed measurements with a GPU)."""
        return {m.gpu_index for m in self.measurements if m.ok is False and m.gpu_index is not None}

    def to_dict(self) -> JSONObject:
        """Plain data in report.json's shape (it crosses xdist's channel and ends in JSON)."""
        out: JSONObject = {k: plain(v) for k, v in self.extra.items()
                               if k not in _RESULT_KEYS}
        head = {k: plain(getattr(self, k)) for k in _RESULT_KEYS if k != "measurements"}
        head["warnings"] = list(head["warnings"])
        head["measurements"] = [m.to_dict() for m in self.measurements]
        head["duration_s"] = None if self.duration_s is None else round(float(self.duration_s), 3)
        return {**{k: head[k] for k in _RESULT_KEYS}, **out}

    @classmethod
    def from_dict(cls, data: JSONMapping) -> CheckResult:
        """From report.json or results.jsonl (a v1 report upgraded by harness.report.v1)."""
        measurements = tuple(Measurement.from_dict(m)
                             for m in data.get("measurements") or [] if isinstance(m, Mapping))
        outcome = str(data.get("outcome") or "error")
        return cls(
            id=str(data.get("id", "?")), outcome=outcome, nodeid=str(data.get("nodeid") or ""),
            title=str(data.get("title") or ""), tier=str(data.get("tier") or "preflight"),
            kind=str(data.get("kind") or "check"), suite=str(data.get("suite") or ""),
            message=str(data.get("message") or ""),
            warnings=tuple(str(w) for w in data.get("warnings") or []),
            measurements=measurements, remedy=str(data.get("remedy") or ""),
            duration_s=_seconds(data.get("duration_s")),
            worker=str(data.get("worker") or "main"),
            extra={k: v for k, v in data.items() if k not in _RESULT_KEYS},
        )

    @classmethod
    def no_result(cls, item: JSONMapping, why: str, **extra: JSONValue) -> CheckResult:
        """The error result of a selected check that reported nothing (`why` says why)."""
        record = {**item, **extra, "outcome": "error", "message": f"[{item['id']}] {why}",
                  "warnings": [], "measurements": [], "duration_s": None}  # never timed
        return cls.from_dict(record)


def results(records: Iterable[JSONMapping]) -> list[CheckResult]:
    """Typed results from report.json's `checks` (anything that is not a record is skipped)."""
    return [CheckResult.from_dict(r) for r in records if isinstance(r, Mapping)]
