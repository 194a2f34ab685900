"""How a fact is compared with its threshold and written in a message: the operators (with
their negations, for the message of a failed comparison) and the value format. One definition
for the check model (harness.checking), the judges (harness.judges.judgement) and the writers
(harness.report.summary)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

__all__ = ["OPS", "fmt"]

#: op -> (compare, the op that states the failure): `busbw 80 < 100` for `>=`.
OPS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    ">=": (operator.ge, "<"),
    ">": (operator.gt, "<="),
    "<=": (operator.le, ">"),
    "<": (operator.lt, ">="),
    "==": (operator.eq, "!="),
    "!=": (operator.ne, "=="),
}


def fmt(value: object, unit: str = "") -> str:
    """A value for a message: floats to 1 decimal (3 significant digits when small), with unit."""
    if isinstance(value, bool):
        text = str(value).lower()
    elif isinstance(value, float):
        text = f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
    else:
        text = str(value)
    return f"{text} {unit}" if unit else text
