"""A `--profile-file` is validated when it is read: its bytes (UTF-8, TOML: a bad one names the
file and the line), every value's type, unit and range, and what it weakens. A value that turns
off a hardware fact of the profile it derives from (fewer GPUs, EFA devices, HCAs or NVLinks
than the instance type has, NVSwitch/GDR/NVLS no longer expected, a floor of 0, a threshold
made an estimate, DCGM run at a lower level) is refused unless the table says why in
`weakened_because` (docs/profiles.md); the run header, `preflight profiles` and report.json
then show what was weakened and why. Every error is a ProfileError naming the file and table:
a usage error (exit 2), with a report still written."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from harness.base.tiers import TIERS
from harness.profiles.model import CONFIRM_FAMILIES, Profile, ProfileError

__all__ = ["REASON_FIELD", "UNSETTABLE", "check_value", "read_toml", "weakenings"]

#: The field a table says why it weakens its base in (a half node on purpose, a test rig).
REASON_FIELD = "weakened_because"
#: Fields the loader sets, never a file: the name (the table's key), where it came from, what
#: a derived profile was built from, and the list of weakenings (worked out, not declared).
UNSETTABLE = frozenset({"name", "origin", "derived_from", "weakened"})
#: Hardware counts a file may raise but not lower below its base's (the instance type's).
_COUNTS = ("num_gpus", "nvlinks_per_gpu")
#: The same, where the profile's fabric is the one the count belongs to.
_FABRIC_COUNTS = {"num_efa_devices": "efa", "num_ib_devices": "ib"}
#: Expectations a file may add but not turn off.
_EXPECTED = ("nvswitch", "nvls", "gdr_required", "te_required")
#: Choices of the string fields that have them (te_recipe: harness/probes/train_step.py
#: RECIPES, kept equal by tests/test_profile_file.py).
CHOICES: dict[str, tuple[str, ...]] = {
    "fabric": ("efa", "ib", ""),
    "gpu_interconnect": ("nvswitch", "pcie", "c2c", "single"),
    "nvlink_domain": ("ultraserver",),
    "te_recipe": ("fp8-delayed", "fp8-current", "mxfp8", "bf16"),
}
_VERSION = re.compile(r"^\d+(\.\d+)*$")
_VERSIONS = ("min_driver_version", "min_cuda_version", "min_ofi_nccl_version")
#: Highest `dcgmi diag -r` level (r4: memtest and pulse, 45 min+; domain-facts.md).
MAX_DCGM_LEVEL = 4


def _toml() -> ModuleType:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return tomllib


def read_toml(path: Path) -> dict[str, object]:
    """The file's TOML; ProfileError naming the file and the line for unreadable bytes (not
    UTF-8) or invalid TOML."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ProfileError(f"cannot read profile file {path}: {exc.strerror}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ProfileError(f"profile file {path}, line {line}: not UTF-8 (byte "
                           f"{data[exc.start]:#04x} at offset {exc.start}): TOML files are "
                           "UTF-8") from None
    tomllib = _toml()
    try:
        return dict(tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        # Python >= 3.14 gives the line as an attribute; before, only the message says it.
        line = getattr(exc, "lineno", None) or next(
            iter(re.findall(r"\(at line (\d+), column \d+\)", str(exc))), None)
        where = f", line {line}" if line else ""
        raise ProfileError(f"profile file {path}{where}: not valid TOML: {exc}") from None


@dataclasses.dataclass(frozen=True, slots=True)
class _Rule:
    """What one field holds: its type and its range."""

    kind: type
    """int, float, str, bool, dict (str keys: tiers), tuple (of str)."""
    item: type | None = None
    """The values' type of a dict field."""
    lowest: float | None = None
    """Smallest allowed value (inclusive)."""
    above: float | None = None
    """Values must be strictly greater."""
    highest: float | None = None


def _rule_of(name: str, hint: object) -> _Rule:
    """The rule of a field from its annotation and its name (units and ranges by suffix)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is dict:
        return _Rule(dict, args[1] if len(args) == 2 else None)
    if origin is tuple:
        return _Rule(tuple)
    base = args[0] if args and origin is not None else hint
    if base is bool:
        return _Rule(bool)
    if base is str:
        return _Rule(str)
    if name.endswith("_pct"):
        return _Rule(base, above=0.0, highest=100.0)
    if name.endswith(("_s", "_bytes")) or name.startswith("max_"):
        return _Rule(base, above=0.0)
    return _Rule(base, lowest=0.0)


def _rules() -> dict[str, _Rule]:
    hints = typing.get_type_hints(Profile)
    return {f.name: _rule_of(f.name, hints[f.name]) for f in dataclasses.fields(Profile)}


_RULES: dict[str, _Rule] | None = None


def _number(value: object, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int)
    return isinstance(value, int | float) and math.isfinite(value)


def _in_range(rule: _Rule, value: float) -> str | None:
    if rule.lowest is not None and value < rule.lowest:
        return f">= {rule.lowest:g}"
    if rule.above is not None and value <= rule.above:
        return f"> {rule.above:g}"
    if rule.highest is not None and value > rule.highest:
        return f"<= {rule.highest:g}"
    return None


def check_value(key: str, value: object) -> object:
    """`value` of field `key` as the Profile holds it (lists made tuples, ints of float fields
    floats), or ProfileError naming the field, the value and what it must be."""
    global _RULES
    rules = _RULES = _RULES or _rules()
    rule = rules[key]

    def bad(want: str) -> ProfileError:
        return ProfileError(f"{key} = {value!r} must be {want}")

    if rule.kind is dict:
        if not isinstance(value, dict):
            raise bad("a table")
        if key == "sources":
            if not all(isinstance(v, str) for v in value.values()):
                raise bad("a table of strings (field = \"where the value comes from\")")
            return dict(value)
        if key == "not_supported":  # fact group = "why this SKU lacks it, and the source"
            unknown = sorted(set(value) - _fact_groups())
            if unknown:
                raise bad(f"a table of GPU fact groups ({', '.join(sorted(_fact_groups()))}); "
                          f"{', '.join(unknown)} is none")
            if not all(isinstance(v, str) and v.strip() for v in value.values()):
                raise bad("a table of sentences (group = \"why the SKU lacks it, and the source\")")
            return dict(value)
        unknown = [k for k in value if k not in TIERS]
        if unknown:
            raise bad(f"a table of tiers ({', '.join(TIERS)}); {', '.join(unknown)} is none")
        item = rule.item if rule.item in (int, float) else float
        for tier, v in value.items():
            if not _number(v, item):
                raise ProfileError(f"{key}.{tier} = {v!r} must be "
                                   f"{'an integer' if item is int else 'a number'}")
            if key == "dcgm_level":
                limit = None if 0 <= v <= MAX_DCGM_LEVEL else f"between 0 and {MAX_DCGM_LEVEL}"
            else:
                limit = None if v > 0 else "> 0 (seconds)"
            if limit:
                raise ProfileError(f"{key}.{tier} = {v!r} must be {limit}")
        return {t: (int(v) if item is int else float(v)) for t, v in value.items()}
    if rule.kind is tuple:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise bad("a list of field names")
        if key == "estimates":
            unknown = [v for v in value if v not in rules]
            if unknown:
                raise bad(f"a list of profile fields; {', '.join(unknown)} is none")
        if key == "confirm_families":
            unknown = [v for v in value if v not in CONFIRM_FAMILIES]
            if unknown:
                raise bad(f"a list of {', '.join(CONFIRM_FAMILIES)}; {', '.join(unknown)} "
                          "is none")
        return tuple(value)
    if rule.kind is bool:
        if not isinstance(value, bool):
            raise bad("true or false")
        return value
    if rule.kind is str:
        if not isinstance(value, str):
            raise bad("a string")
        if key in CHOICES and value not in CHOICES[key]:
            raise bad("one of " + ", ".join(repr(c) for c in CHOICES[key]))
        if key in _VERSIONS and not _VERSION.match(value):
            raise bad("a version of dotted numbers (`535.104.05`)")
        if key == REASON_FIELD and not value.strip():
            raise bad("a sentence saying why (empty says nothing)")
        return value
    if not _number(value, rule.kind):
        raise bad("an integer" if rule.kind is int else "a number (a string is not one)")
    if (need := _in_range(rule, float(value))) is not None:  # type: ignore[arg-type]
        raise bad(need)
    return float(value) if rule.kind is float else value  # type: ignore[arg-type]


def _fact_groups() -> set[str]:
    """The keys a `not_supported` table may name: the GPU facts' groups (harness.base.gpu_facts)."""
    from harness.base.gpu_facts import FACTS  # the GPU records: only a file that names the table

    return {f.group for f in FACTS.values()}


def _floor(key: str) -> bool:
    """A floor: a `*_min` or `min_*` figure a node must reach (0 turns it off)."""
    return key.endswith("_min") or (key.startswith("min_") and key not in _VERSIONS)


def weakenings(base: Profile, changes: Mapping[str, object]) -> list[str]:
    """What `changes` (a file table's validated fields) turn off of `base`: one line each,
    `num_gpus 8 -> 4`. Raising a count, lowering a floor that stays above 0 and tuning
    timeouts weaken nothing."""
    out = []
    fabric = changes.get("fabric", base.fabric)
    for key, value in changes.items():
        was = getattr(base, key, None)
        counted = key in _COUNTS or _FABRIC_COUNTS.get(key, "-") == fabric
        if counted and isinstance(value, int) and isinstance(was, int) and value < was:
            out.append(f"{key} {was} -> {value}")
        elif key in _EXPECTED and was is True and value is False:
            out.append(f"{key} true -> false")
        elif key == "fabric" and base.fabric and (value or None) != base.fabric:
            out.append(f"fabric {base.fabric} -> {value or 'none'}")
        elif key == "gpus_from_machine" and value is True and not was and base.num_gpus:
            out.append(f"GPU count {base.num_gpus} -> taken from the machine")
        elif key == "gpu_model" and value == "" and was:
            out.append(f"gpu_model {was!r} -> '' (any GPU)")
        elif _floor(key) and isinstance(value, int | float) and value <= 0 and was != value:
            out.append(f"{key} {'-' if was is None else was} -> {value} (judges nothing)")
        elif key == "estimates" and isinstance(value, tuple):
            made = sorted(set(value) - set(base.estimates))
            out += [f"{k} made an estimate (a warning, not a failure)" for k in made]
        elif key == "not_supported" and isinstance(value, dict):
            out += [f"not_supported.{g} added (that fact is never judged): {why}"
                    for g, why in sorted(value.items()) if g not in base.not_supported]
        elif key == "dcgm_level" and isinstance(value, dict):
            out += [f"dcgm_level.{t} {base.dcgm_level.get(t)} -> {v}" for t, v in value.items()
                    if isinstance(v, int) and v < base.dcgm_level.get(t, 0)]
    return out
