"""Saved environments: `env`/`printenv` output (also srun/mpirun-prefixed or timestamped),
`/proc/PID/environ` (NUL-separated), shell scripts (`export`, `declare -x`, sbatch, `VAR=x cmd`,
mpirun `-x`, docker `-e`), Dockerfile `ENV`, Kubernetes/compose/recipe YAML `env:` blocks, and
JSON (`docker inspect` `Env` arrays, `{"NAME": "value"}` maps, ECS `environment` lists)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import TYPE_CHECKING, Any, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.env_script import (
    ASSIGN,
    IS_NAME,
    MAX_TOTAL_CHARS,
    MAX_VALUE_CHARS,
    MAX_VARIABLES,
    Variables,
    parse_script,
)
from harness.parsers.env_shape import (
    Shape,
    distinct_assignments,
    is_tagged,
    plain_script,
    shaped,
    untimed,
)
from harness.parsers.env_yaml import parse_yaml
from harness.parsers.reader import Input, as_input
from harness.parsers.unwrap import RANK_PREFIX

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["INSPECT", "EnvDump", "inspect_env", "parse_env_dump"]

_OTHER_ASSIGN = re.compile(r"^\S+=")  # exported bash functions: BASH_FUNC_f%%=() {
#: How environment variables are named: upper case, digits and `_` (POSIX), or all lower case
#: (`http_proxy`), not mixed (`A6UtsEIbX1MAjA`, a base64 line's `==` end).
_CONVENTIONAL = re.compile(r"[A-Z_][A-Z0-9_]*|[a-z_][a-z0-9_]*")
# Wrappers in front of each line: `srun -l` (`0: `), mpirun --tag-output (`[1,0]<stdout>:`), from
# the one unwrapper (the env parser keeps one rank's copy of a tagged dump): RANK_PREFIX.
#: JSON keys whose value is an environment (docker `Env`, ECS/SageMaker `environment`, Lambda-style
#: `Variables`).
_JSON_ENV_KEYS = frozenset({"env", "environment", "env_vars", "envvars", "variables"})
@dataclass(frozen=True, slots=True)
class EnvDump:
    """Variables from a dump, in file order; `skipped` counts lines that were not assignments;
    `format` names the input form: environ, env, script, yaml or json; `dropped` counts the
    assignments past MAX_VARIABLES / MAX_TOTAL_CHARS that were not kept."""

    variables: dict[str, str]
    skipped: int
    format: str = "env"
    dropped: int = 0


def parse_env_dump(text: str | Input) -> EnvDump:
    """Parse an environment dump: `NCCL_DEBUG=INFO`, `export FI_PROVIDER=efa # comment`,
    `- name: NCCL_DEBUG` / `value: "INFO"`, `"Env": ["NCCL_DEBUG=INFO"]`, or NUL-separated.
    `text` may be an Input: it is read in two streaming passes (its form, then its variables).

    A name set twice keeps its last value, as the shell, Kubernetes and Docker do.
    """
    source = as_input(text)
    shape = Shape()
    read = _script_while_shaping(shaped(source, shape), shape)
    if read is not None:
        return _finish(read, "script")
    if shape.nul:
        # /proc/PID/environ: every entry is NAME=value (a value's newlines are inside it), so an
        # entry that is not continues nothing; binary data has NULs too, and a chance `A=...`
        # between two of them does not make it an environment.
        entries = (e for e in source.lines(sep="\0") if e.strip())
        variables, skipped = _parse_lines(entries, glue=False)
        if skipped > len(variables):
            raise ParseError(f"not an environment: {skipped} of {skipped + len(variables)} "
                             "NUL-separated entries are not NAME=value (binary data?)")
        return _finish((variables, skipped), "environ")
    if shape.first in ("[", "{"):
        doc = source.document()
        data = None
        if doc is not None:
            try:
                data = json.loads(doc)
            except (ValueError, RecursionError):
                data = None
        if data is not None:
            variables = Variables()
            try:
                for name, value in _walk_json(data):
                    variables.put(name, value)
            except RecursionError:
                pass  # nested deeper than any manifest: what was found so far
            return _finish((variables, 0), "json")
    if shape.structured:
        return _finish(parse_yaml(source.lines()), "yaml")
    if shape.script_tagged if is_tagged(shape) else shape.script_plain:
        return _finish(parse_script(_unwrap(source.batches(), shape)), "script")
    return _finish(_parse_batches(source, shape), "env")


def _script_while_shaping(batches: Iterator[list[str]], shape: Shape
                          ) -> tuple[Variables, int] | None:
    """The script read in the format pass itself (one reading of the input, not two) where
    its first batch already shows a plain script (plain_script): the variables and skipped
    count, or None where the shape of the whole input says otherwise (a NUL, a YAML line, rank
    prefixes on half the lines, a timestamp to take off, no script line), when the input is
    read again as that says. Either way `batches` is read to its end."""
    held = [next(batches, None)]  # (held in a list, so that it is let go once read)
    if held[0] is None or not plain_script(shape):
        for _ in batches:
            pass
        return None

    def script_batches() -> Iterator[list[str]]:
        yield held.pop() or []  # (not None: tested above)
        for batch in batches:
            if not plain_script(shape):
                return
            yield batch

    read = parse_script(script_batches())
    for _ in batches:
        pass
    return read if plain_script(shape) and not is_tagged(shape) else None


def _finish(parsed: tuple[Variables, int], fmt: str) -> EnvDump:
    variables, skipped = parsed
    if not variables:
        raise ParseError("no environment variable assignments (NAME=value) found in the input")
    if fmt in ("environ", "env", "script") and not any(map(_CONVENTIONAL.fullmatch, variables)):
        # Text with a chance `Word=` in it (random text, a base64 block's last line) is not an
        # environment: a real one names at least one variable the way variables are named.
        names = ", ".join(list(variables)[:3])
        raise ParseError(f"not an environment: none of the {len(variables)} name(s) read "
                         f"({names[:120]}) is named as variables are (NCCL_DEBUG, http_proxy)")
    return EnvDump(dict(variables), skipped, fmt, variables.dropped)


def _unwrap(batches: Iterable[list[str]], shape: Shape) -> Iterator[list[str]]:
    """Each batch through _unwrap_batch."""
    return (_unwrap_batch(batch, shape) for batch in batches)


def _unwrap_batch(batch: list[str], shape: Shape) -> list[str]:
    """Drop rank prefixes (keeping the first rank's lines only) and leading timestamps."""
    if is_tagged(shape):
        kept = []
        for line in batch:
            m = RANK_PREFIX.match(line)
            if m is not None and (m["srun"] or m["mpi"]) == shape.first_rank:
                kept.append(untimed(line[m.end():]))
        return kept
    if shape.timestamped:
        return [untimed(line) if "0" <= line[:1] <= "9" else line for line in batch]
    return batch  # no line starts with a timestamp (the first pass read every line)


def _parse_lines(entries: Iterable[str], *, glue: bool) -> tuple[Variables, int]:
    """`NAME=value` per entry; with `glue`, a non-assignment continues the previous value (up to
    MAX_VALUE_CHARS; lines past that are counted as skipped)."""
    reader = _Assignments(glue=glue)
    reader.lines(entries)
    return reader.finish()


def _parse_batches(source: Input, shape: Shape) -> tuple[Variables, int]:
    """_parse_lines(_unwrap(source.lines(), shape), glue=True), with a batch of plain
    assignments (untagged: no prefix or timestamp to take off) read as a whole."""
    reader = _Assignments(glue=True)
    tagged = is_tagged(shape)
    for batch in source.batches():
        plain = None if tagged else distinct_assignments(batch)
        if plain is not None:
            reader.assignments(batch, *plain)
        else:
            reader.lines(_unwrap_batch(batch, shape))
    return reader.finish()


def _last_values(lines: list[str], first: dict[str, None] | None = None) -> dict[str, str]:
    """Each name's last value, names in the order they first come, from lines that each start
    with `NAME=`: the (name, value) ASSIGN reads from a line is its split at the first `=` (a
    name holds none; a line holds no line end). Where lines repeat (a dump saved once per rank
    or job), each distinct line is split once: the names' order from the lines' first copies,
    each name's value from the line whose last copy comes last. `first`: dict.fromkeys(lines),
    where the caller has it."""
    if first is None:
        first = dict.fromkeys(lines)
    if len(first) * 2 > len(lines):
        return dict(map(str.split, lines, repeat("="), repeat(1)))
    new = dict(map(str.split, first, repeat("="), repeat(1)))
    new.update(map(str.split, reversed(dict.fromkeys(reversed(lines))), repeat("="), repeat(1)))
    return new


class _Assignments:
    """The state of _parse_lines between batches: the variables, the skipped count, and the
    assignment whose value continuation lines may still extend."""

    def __init__(self, *, glue: bool) -> None:
        self.variables = Variables()
        self.skipped = 0
        self.glue = glue
        self.last: str | None = None
        self.parts: list[str] = []
        self.size = 0

    def lines(self, entries: Iterable[str]) -> None:
        variables, glue = self.variables, self.glue
        last, parts, size, skipped = self.last, self.parts, self.size, self.skipped
        for entry in entries:
            m = ASSIGN.match(entry)
            if m:
                if last is not None:
                    variables.put(last, "\n".join(parts))
                last, parts, size = m["name"], [m["value"]], len(m["value"])
            elif _OTHER_ASSIGN.match(entry):
                if last is not None:
                    variables.put(last, "\n".join(parts))
                last = None
                skipped += 1
            elif glue and last is not None and entry:
                if size + len(entry) < MAX_VALUE_CHARS:
                    parts.append(entry)
                    size += len(entry) + 1
                else:
                    skipped += 1
            elif entry.strip():
                skipped += 1
        self.last, self.parts, self.size, self.skipped = last, parts, size, skipped

    def assignments(self, lines: list[str], distinct: dict[str, None], longest: int,
                    chars: int) -> None:
        """Lines that each start with `NAME=` (all_assignments), each ending the value before
        it; `distinct`: the lines but the last, each once; `longest`: the longest line, `chars`:
        all lines' characters (bounds on the values, for Variables.fits)."""
        self.finish()
        body, variables = lines[:-1], self.variables
        if variables.fits(len(body), longest, chars):
            variables.take(_last_values(body, distinct))
        else:
            variables.put_all(list(map(str.split, body, repeat("="), repeat(1))), longest, chars)
        self.last, value = lines[-1].split("=", 1)
        self.parts, self.size = [value], len(value)

    def finish(self) -> tuple[Variables, int]:
        if self.last is not None:
            self.variables.put(self.last, "\n".join(self.parts))
            self.last = None
        return self.variables, self.skipped


def _walk_json(data: Any, in_env: bool = False, top: bool = True) -> Iterator[tuple[str, str]]:
    """Assignments inside JSON: `"Env": ["A=b"]` (docker inspect), `[{"name", "value"}]`
    (Kubernetes, ECS), `{"environment": {"A": "b"}}` and a top-level `{"A": "b"}` map."""
    if isinstance(data, list):
        for item in data:
            if isinstance(item, str) and (m := ASSIGN.match(item)):
                yield m["name"], m["value"]
            elif isinstance(item, dict) and isinstance(item.get("name"), str) and "value" in item:
                if IS_NAME.match(item["name"]) and isinstance(item["value"], str | int | float | bool):
                    yield item["name"], str(item["value"])
            else:
                yield from _walk_json(item, top=False)
    elif isinstance(data, dict):
        scalars = {k: v for k, v in data.items() if isinstance(v, str | int | float) and IS_NAME.match(k)}
        if in_env or (top and scalars and len(scalars) == len(data) and all(k.isupper() for k in scalars)):
            yield from ((k, str(v)) for k, v in scalars.items())
        for key, value in data.items():
            if isinstance(value, list | dict):
                yield from _walk_json(value, in_env=key.lower() in _JSON_ENV_KEYS, top=False)


#: Variables in which images record the aws-ofi-nccl version they were built with.
_OFI_NCCL_VERSION_VARS = ("AWS_OFI_NCCL_VERSION", "OFI_NCCL_VERSION")


def inspect_env(stream: TextIO | Input, *, profile: Profile) -> JSONObject:
    """`preflight inspect env FILE`: the NCCL/FI/torch variables, redacted, and the rule findings
    for `profile` (keys: profile, format, num_variables, relevant, versions, harmful, required,
    outdated, recommended, malformed)."""
    from harness.base.redact import Redactor
    from harness.base.redact_pairs import is_secret_name
    from harness.judges.env import Versions, evaluate, format_problems

    dump = parse_env_dump(as_input(stream))
    env = dump.variables
    # The one redaction of the result (cmd_inspect does not redact it again: see `redacted`
    # below): the dump's secrets and this process's (what cmd_inspect's Redactor() knows). A
    # second pass cost as much as this one (a 1 Mi-character LD_LIBRARY_PATH is ~0.1 s a pass).
    redactor = Redactor(env, extra_values=[v for k, v in os.environ.items() if is_secret_name(k)])
    prefixes = ("NCCL_", "FI_", "OFI_NCCL_", "TORCH_", "RDMAV_", "CUDA_", "LD_LIBRARY_PATH")
    result: JSONObject = {
        "profile": profile.name,
        "format": dump.format,
        "num_variables": len(env),
        "relevant": redactor.env({k: v for k, v in sorted(env.items()) if k.startswith(prefixes)}),
    }
    # A dump rarely names the library versions (an image's `AWS_OFI_NCCL_VERSION` build variable
    # does); where it does not, version-ranged rules use their documented default.
    versions = Versions(ofi_nccl=next((env[n] for n in _OFI_NCCL_VERSION_VARS if env.get(n)), None))
    rest: JSONObject = {"versions": {"ofi_nccl": versions.ofi_nccl, "libfabric": versions.libfabric}}
    for kind in ("harmful", "required", "outdated", "recommended"):
        rest[kind] = [
            {"name": f.rule.name, "value": f.value, "reason": f.rule.reason,
             "remedy": f.rule.remedy, "source": f.rule.source}
            for f in evaluate(env, profile, versions, [kind])
        ]
    rest["malformed"] = format_problems(env)
    if dump.dropped:
        rest["notes"] = [f"{dump.dropped:,} assignment(s) past {MAX_VARIABLES:,} variables or "
                         f"{MAX_TOTAL_CHARS >> 20} MiB of values were not kept"]
    # everything but `relevant` (redacted above, by name and text) as cmd_inspect redacted it
    result.update(redactor.obj(rest))
    result["profile"], result["format"] = redactor.obj([result["profile"], result["format"]])
    return result


#: inspect_env's result is redacted whole, against this process's secrets too: cmd_inspect takes
#: it as it is (one pass over its long values, not two).
inspect_env.redacted = True  # type: ignore[attr-defined]


INSPECT = {"env": inspect_env}
