"""Expectations per instance type: data, not code. One frozen dataclass, a base per GPU family,
each instance type derived from its base; users override or add profiles with a TOML file."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from harness.base.jsontypes import JSONObject
from harness.profiles.model import DEFAULT_SOURCES, Profile, ProfileError

__all__ = [  # the Profile record itself: harness.profiles.model
    "BUILTIN_PROFILES",
    "get_profile",
    "load_profile_file",
    "threshold_rows",
    "weakened_line",
]

LOCAL_CPU = Profile(
    name="local-cpu",
    description="A machine without GPUs or EFA (a laptop, CI): env and CPU checks only.",
    cpu_busbw_gb_s_min=0.05,
    train_step_budget_s=60.0,
    sources={
        "cpu_busbw_gb_s_min": "sanity floor; 2-core VM measured ~1.1 GB/s at 256 MB, gloo",
        "train_step_budget_s": "2 gloo ranks on a 2-core VM: ~6 s idle, 27 s at load average 11",
    },
)

def _field_types() -> dict[str, Any]:
    return {f.name: f for f in dataclasses.fields(Profile)}


#: The built-in data: sources, GPU SKUs and instance types (see the comments at its top).
DATA_FILE = Path(__file__).with_name("profiles.toml")
#: Keys of a [skus] table that are not Profile fields: how a derived profile finds its SKU.
SKU_MATCH_KEYS = ("nvml_names", "pci_device_ids", "nvlink_busbw_gpus")
_META_KEYS = ("base", "sku", "src")


def _cite(note: str, sources: Mapping[str, str]) -> str:
    """`key: note` -> `note [key: full citation]` where key is in [sources]; else the note."""
    key, _, rest = note.partition(":")
    keys = [k.strip() for k in key.split(",")]
    if keys and all(k in sources for k in keys):
        cited = "; ".join(f"{k}: {sources[k]}" for k in keys)
        return f"{rest.strip()} [{cited}]" if rest.strip() else f"[{cited}]"
    return note


def _fields_of(table: Mapping[str, Any], where: str,
               sources: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Profile fields of one data table (TOML types made Profile types; "" fabric: None;
    `not_supported` notes cited against [sources])."""
    fields = _field_types()
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key in _META_KEYS or key in SKU_MATCH_KEYS:
            continue
        if key not in fields:
            raise ProfileError(f"{where}: unknown field {key!r}")
        if key in ("estimates", "confirm_families"):
            value = tuple(value)
        elif key == "fabric" and value == "":
            value = None
        elif key == "not_supported":
            value = {k: _cite(str(v), sources or {}) for k, v in value.items()}
        out[key] = value
    return out


def _sources_of(table: Mapping[str, Any], sources: Mapping[str, str]) -> dict[str, str]:
    return {k: _cite(str(v), sources) for k, v in (table.get("src") or {}).items()}


def load_data(path: Path = DATA_FILE) -> tuple[dict[str, Profile], dict[str, JSONObject]]:
    """(instance profiles by name, SKU tables by name) from the data file. SKU tables keep their
    matching keys and gain `profile`: the SKU's thresholds as a Profile (for derive)."""
    from harness.profiles.check import read_toml

    data = read_toml(path)
    sources: dict[str, str] = data.get("sources", {})
    skus: dict[str, dict[str, Any]] = {}
    for name, table in data.get("skus", {}).items():
        where = f"{path.name}: [skus.{name!r}]"
        skus[name] = {**table, "profile": Profile(
            name=f"_sku-{name}", sku=name, **_fields_of(table, where, sources),
            sources=_sources_of(table, sources))}
    tables: dict[str, dict[str, Any]] = data.get("profiles", {})
    built: dict[str, Profile] = {}

    def build(name: str, chain: tuple[str, ...] = ()) -> Profile:
        if name in built:
            return built[name]
        where = f"{path.name}: [profiles.{name!r}]"
        if name in chain or name not in tables:
            raise ProfileError(f"{where}: base chain {' -> '.join((*chain, name))} is broken")
        table = tables[name]
        base = build(table["base"], (*chain, name)) if "base" in table else Profile(name="_root")
        own = _fields_of(table, where, sources)
        estimates = set(base.estimates) | set(own.pop("estimates", ()))
        srcs = _sources_of(table, sources)
        if "sku" in table:
            if table["sku"] not in skus:
                raise ProfileError(f"{where}: unknown sku {table['sku']!r}")
            sku = skus[table["sku"]]["profile"]
            sku_fields = {f.name: getattr(sku, f.name) for f in dataclasses.fields(Profile)
                          if f.name in skus[table["sku"]] and f.name not in ("name", "sources")}
            estimates |= set(sku.estimates)
            base = base.derive(**{k: v for k, v in sku_fields.items() if k != "estimates"},
                               sku=table["sku"], sources=sku.sources)
        built[name] = base.derive(name=name, estimates=tuple(sorted(estimates)),
                                  origin="built-in", sources=srcs, **own)
        return built[name]

    for name in tables:
        build(name)
    public = {n: p for n, p in built.items() if not n.startswith("_")}
    if LOCAL_CPU.name in public:
        raise ProfileError(f"{path.name}: [profiles.{LOCAL_CPU.name!r}] is built in "
                           "(harness/profiles/table.py)")
    return {LOCAL_CPU.name: LOCAL_CPU, **public}, skus


@functools.cache
def _loaded() -> tuple[dict[str, Profile], dict[str, JSONObject]]:
    return load_data()


class _Builtin(Mapping[str, Any]):
    """One of load_data()'s mappings, read on first use: `preflight inspect` on the default
    profile never reads the file (start-up is part of every command; the TOML costs ~30 ms)."""

    def __init__(self, part: int) -> None:
        self._part = part

    def __getitem__(self, key: str) -> Any:
        if self._part == 0 and key == LOCAL_CPU.name:
            return LOCAL_CPU
        return _loaded()[self._part][key]

    def __iter__(self) -> Iterator[str]:
        return iter(_loaded()[self._part])

    def __len__(self) -> int:
        return len(_loaded()[self._part])

    def __repr__(self) -> str:
        return repr(_loaded()[self._part])


BUILTIN_PROFILES: Mapping[str, Profile] = _Builtin(0)
#: The [skus] tables by name (load_data).
SKUS: Mapping[str, JSONObject] = _Builtin(1)


def load_profile_file(
    path: str | Path, base: Mapping[str, Profile] = BUILTIN_PROFILES
) -> dict[str, Profile]:
    """Profiles from a TOML file, merged over `base`, every value validated
    (harness.profiles.check: types, units, ranges; a weakening without `weakened_because` is
    refused). ProfileError names the file, the table (or the line) and the value.

    Each `[profiles."NAME"]` table overrides an existing profile field by field, or adds a new
    one; `base = "p5.48xlarge"` derives it from another profile (default: the same name, else
    `local-cpu`)::

        [profiles."p5.48xlarge"]
        net_busbw_gb_s_min = 400.0

        [profiles."p5-half"]
        base = "p5.48xlarge"
        num_gpus = 4
        weakened_because = "half a p5 per job by design (4 GPUs passed to each container)"
    """
    from harness.profiles.check import read_toml

    path = Path(path)
    tables = read_toml(path).get("profiles")
    if not isinstance(tables, dict) or not tables:
        raise ProfileError(f'profile file {path} has no [profiles."NAME"] tables')
    result = dict(base)
    problems: list[str] = []
    for name, table in tables.items():
        try:
            result[name] = _file_profile(path, name, table, result)
        except ProfileError as exc:  # every problem of the file at once, not one per run
            problems.append(str(exc))
    if len(problems) == 1:
        raise ProfileError(problems[0])
    if problems:
        raise ProfileError(f"profile file {path}: {len(problems)} problems: " + " | ".join(
            p.removeprefix(f"profile file {path}: ") for p in problems))
    return result


def _file_profile(path: Path, name: str, table: object, known: Mapping[str, Profile]) -> Profile:
    """One `[profiles."NAME"]` table of a profile file as a Profile derived from its base;
    ProfileError listing every bad value of the table, or what it weakens without saying why."""
    from harness.profiles.check import REASON_FIELD, UNSETTABLE, check_value, weakenings

    where = f'profile file {path}: [profiles."{name}"]'
    if not isinstance(table, dict):
        raise ProfileError(f"{where} must be a table")
    table = dict(table)
    base_name = table.pop("base", name if name in known else "local-cpu")
    if not isinstance(base_name, str) or base_name not in known:
        raise ProfileError(f"{where}: base {base_name!r} is not a known profile")
    parent = known[base_name]
    fields = _field_types()
    changes: dict[str, Any] = {}
    bad: list[str] = []
    for key, value in table.items():
        try:
            if key not in fields or key in UNSETTABLE:
                settable = ", ".join(sorted(k for k in fields if k not in UNSETTABLE))
                raise ProfileError(f"unknown field {key!r} (known: {settable})")
            value = check_value(key, value)
            if key == "sku" and value not in SKUS:
                raise ProfileError(f"sku = {value!r} is not a GPU SKU of the built-in data "
                                   f"({', '.join(sorted(SKUS))})")
        except ProfileError as exc:
            bad.append(str(exc))
            continue
        current = getattr(parent, key)
        if isinstance(current, dict) and isinstance(value, dict):
            value = {**current, **value}
        elif key == "fabric" and value == "":
            value = None
        changes[key] = value
    if bad:
        raise ProfileError(f"{where}: " + "; ".join(bad))
    weakened = weakenings(parent, changes)
    if weakened and REASON_FIELD not in table:
        raise ProfileError(
            f"{where} weakens {base_name} ({parent.origin}): {'; '.join(weakened)}. A node "
            "missing that hardware would pass. Remove those values, or say why in "
            f'{REASON_FIELD} = "..." in that table (a half node on purpose: docs/profiles.md)')
    changes.update(name=name, origin=f"profile file {path}",
                   weakened=(*parent.weakened, *weakened))
    # A field's source is the file, unless the file's own `sources` cites one (a patch from
    # scripts/device-check: "measured on <GPU, driver, date>: ..."): that one is kept.
    cited = table.get("sources") if isinstance(table.get("sources"), dict) else {}
    changes["sources"] = {
        **changes.get("sources", {}),
        **{k: f"profile file {path}" for k in table if k != "sources" and k not in cited},
        **{k: f"{v} (profile file {path})" for k, v in cited.items()},
    }
    return parent.derive(**changes)


def get_profile(name: str, profiles: Mapping[str, Profile] = BUILTIN_PROFILES) -> Profile:
    """The profile named exactly `name` (an `ml.` prefix is ignored); ProfileError lists the rest."""
    key = name.removeprefix("ml.")
    try:
        return profiles[key]
    except KeyError:
        from harness.base.suggest import did_you_mean

        known = ", ".join(sorted(profiles))
        raise ProfileError(f"unknown profile {name!r}{did_you_mean(key, profiles)}; known "
                           f"profiles: {known}") from None


def threshold_rows(profile: Profile) -> list[tuple[str, str, str]]:
    """(field, value, source) rows for `preflight profiles`."""
    rows = []
    for f in dataclasses.fields(Profile):
        if f.name in ("name", "description", "sources"):
            continue
        value = getattr(profile, f.name)
        shown = ("-" if value is None else ", ".join(value) or "-" if isinstance(value, tuple)
                 else str(value))
        if profile.is_estimate(f.name):
            shown += " (estimate: a warning until measured)"
        rows.append((f.name, shown, profile.sources.get(f.name) or DEFAULT_SOURCES.get(f.name, "")))
    return rows


def weakened_line(profile: Profile) -> str | None:
    """What a profile file turned off and why, for the run header and `preflight profiles`;
    None when nothing was."""
    if not profile.weakened:
        return None
    return (f"profile {profile.name} ({profile.origin}) is weaker than the hardware it derives "
            f"from, on purpose: {'; '.join(profile.weakened)} (weakened_because: "
            f"{profile.weakened_because})")
