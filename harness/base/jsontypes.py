"""JSON as Python types, defined once: what report.json, results.jsonl, the EMF records and
the Kubernetes API carry. `JSONValue` is any JSON value; `JSONObject` an object (a dict
with str keys). Readers narrow with isinstance before they use a value."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias, Union

# Union, not `|`: the recursive alias is evaluated at import, where "JSONValue" is a string.
JSONScalar: TypeAlias = bool | int | float | str | None
JSONValue: TypeAlias = Union[JSONScalar, list["JSONValue"], dict[str, "JSONValue"]]  # noqa: UP007
JSONObject: TypeAlias = dict[str, JSONValue]
#: A JSON object only read (a loaded report.json, a check record).
JSONMapping: TypeAlias = Mapping[str, JSONValue]

__all__ = ["JSONMapping", "JSONObject", "JSONScalar", "JSONValue"]
