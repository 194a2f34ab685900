"""Saved environments: `env`/`printenv` output (also srun/mpirun-prefixed or timestamped),
`/proc/PID/environ` (NUL-separated), shell scripts (`export`, `declare -x`, sbatch, `VAR=x cmd`,
mpirun `-x`, docker `-e`), Dockerfile `ENV`, Kubernetes/compose/recipe YAML `env:` blocks, and
JSON (`docker inspect` `Env` arrays, `{"NAME": "value"}` maps, ECS `environment` lists)."""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

from harness.parsers import ParseError

__all__ = ["INSPECT", "EnvDump", "inspect_env", "parse_env_dump"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_IS_NAME = re.compile(rf"{_NAME}\Z")
_ASSIGN = re.compile(rf"^(?P<name>{_NAME})=(?P<value>.*)$", re.S)
_OTHER_ASSIGN = re.compile(r"^\S+=")  # exported bash functions: BASH_FUNC_f%%=() {
# Wrappers in front of each line: `srun -l` (`0: `), mpirun --tag-output (`[1,0]<stdout>:`).
_RANK_PREFIX = re.compile(r"^(?:\s*(?P<srun>\d+): |\[(?P<mpi>\d+,\d+)\]<std(?:out|err)>:)")
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?(?:\s+|$)")
# A line that only a shell script (or a Dockerfile) has.
# (`NAME=a b` alone is not one: `env` prints values with spaces as they are.)
_SCRIPT_LINE = re.compile(
    rf"^\s*(?:#|\$ |(?:export|declare|typeset|readonly|ENV|ARG|RUN|FROM)\s)"
    rf"|\\$|(?:^|\s)(?:(?:-x|-e|--env)\s+|--env=|--export=\S*?){_NAME}="
)
# A line whose quoted value may run on: `NAME="...`, `export NAME='...`, `declare -x NAME="...`.
_OPENS_VALUE = re.compile(rf"^\s*(?:(?:export|declare\s+-x|typeset\s+-x|ENV)\s+)?{_NAME}=[\"']")
# `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:=default}`, `$NAME`.
_PARAM = re.compile(rf"\$\{{(?P<name>{_NAME})(?:(?P<op>:?[-=])(?P<default>[^{{}}]*))?\}}|\$(?P<bare>{_NAME})")
_SHELL_DECLARE = frozenset({"export", "declare", "typeset", "readonly", "local", "ENV"})
_FLAG_VALUE = frozenset({"-x", "-e", "--env"})
# YAML: the list form of Kubernetes `env:`, keys that open an environment block, map entries.
_YAML_NAME = re.compile(rf"^(?P<indent>\s*)-\s+name:\s*[\"']?(?P<name>{_NAME})[\"']?\s*(?:#.*)?$")
_YAML_VALUE = re.compile(r"^\s*value:\s*(?P<value>.*)$")
_YAML_INLINE = re.compile(
    rf"^\s*-\s*\{{\s*name:\s*[\"']?(?P<name>{_NAME})[\"']?\s*,\s*value:\s*(?P<value>.*?)\s*\}}\s*(?:#.*)?$"
)
_YAML_BLOCK = re.compile(
    r"^(?P<indent>\s*)(?:-\s+)?[\"']?(?:env|environment|env_vars|envVars|extraEnv|"
    r"environmentVariables|Variables|Env)[\"']?\s*:\s*\[?\s*(?:#.*)?$"
)
# One list item: YAML `- item` or a JSON array line `"item",` (a pasted, maybe cut, docker inspect).
_LIST_ITEM = re.compile(r"^\s*(?:-\s+(?P<yaml>.*?)|\"(?P<json>(?:[^\"\\]|\\.)*)\"\s*,?)\s*$")
_YAML_MAP = re.compile(rf"^\s*[\"']?(?P<name>{_NAME})[\"']?\s*:\s+(?P<value>.*?),?\s*$")
#: JSON keys whose value is an environment (docker `Env`, ECS/SageMaker `environment`, Lambda-style
#: `Variables`).
_JSON_ENV_KEYS = frozenset({"env", "environment", "env_vars", "envvars", "variables"})
# A one-line dict/map under an environment key: `environment={"NCCL_DEBUG": "INFO"}` (SageMaker
# estimators), `env: {NCCL_DEBUG: INFO}` (YAML flow style); and one entry of it.
_INLINE_ENV = re.compile(
    r"(?:\b|[\"'])(?:environment|env|env_vars|envVars|environment_variables)[\"']?\s*[=:]\s*\{(?P<body>[^{}]*)\}"
)
_INLINE_ENTRY = re.compile(
    rf"[\"']?(?P<name>{_NAME})[\"']?\s*:\s*(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^,\s}}]+)"
)
#: A quoted value may run over this many lines before the rest is taken as broken input.
_MAX_VALUE_LINES = 50
# `"NAME": "value",` in a Python/JSON dict (SageMaker `environment={...}`), upper-case names.
_DICT_ENTRY = re.compile(r"^\s*[\"'](?P<name>[A-Z][A-Z0-9_]*)[\"']\s*:\s*(?P<value>[\"'].*?[\"'])\s*,?\s*$")


@dataclass(frozen=True, slots=True)
class EnvDump:
    """Variables from a dump, in file order; `skipped` counts lines that were not assignments;
    `format` names the input form: environ, env, script, yaml or json."""

    variables: dict[str, str]
    skipped: int
    format: str = "env"


def parse_env_dump(text: str) -> EnvDump:
    """Parse an environment dump: `NCCL_DEBUG=INFO`, `export FI_PROVIDER=efa # comment`,
    `- name: NCCL_DEBUG` / `value: "INFO"`, `"Env": ["NCCL_DEBUG=INFO"]`, or NUL-separated.

    A name set twice keeps its last value, as the shell, Kubernetes and Docker do.
    """
    if "\0" in text:
        return _finish(_parse_lines([e for e in text.split("\0") if e.strip()], glue=True), "environ")
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    stripped = text.strip()
    if stripped[:1] in "[{":
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if data is not None:
            return _finish((dict(_walk_json(data)), 0), "json")
    lines = text.split("\n")
    if _looks_structured(stripped, lines):
        return _finish(_parse_yaml(lines), "yaml")
    lines = _unwrap(lines)
    if any(_SCRIPT_LINE.search(line) for line in lines):
        return _finish(_parse_script(lines), "script")
    return _finish(_parse_lines(lines, glue=True), "env")


def _looks_structured(stripped: str, lines: list[str]) -> bool:
    """YAML, a Python dict, or JSON that did not parse (cut when pasted)."""
    if stripped[:1] in "[{" and not _RANK_PREFIX.match(stripped):
        return True
    if any(_YAML_NAME.match(line) or _YAML_BLOCK.match(line) or _YAML_INLINE.match(line)
           or _DICT_ENTRY.match(line) or _INLINE_ENV.search(line) for line in lines):
        return True
    items = [_list_item(line) for line in lines if line.strip()]
    return any(flag in _FLAG_VALUE and value is not None and _ASSIGN.match(value)
               for flag, value in itertools.pairwise(items))


def _finish(parsed: tuple[dict[str, str], int], fmt: str) -> EnvDump:
    variables, skipped = parsed
    if not variables:
        raise ParseError("no environment variable assignments (NAME=value) found in the input")
    return EnvDump(variables, skipped, fmt)


def _unwrap(lines: list[str]) -> list[str]:
    """Drop rank prefixes (keeping the first rank's lines only) and leading timestamps."""
    ranks = [m["srun"] or m["mpi"] if (m := _RANK_PREFIX.match(line)) else None for line in lines]
    tagged = [r for r in ranks if r is not None]
    if tagged and len(tagged) * 2 >= len([line for line in lines if line.strip()]):
        first = tagged[0]
        lines = [_RANK_PREFIX.sub("", line) for line, r in zip(lines, ranks, strict=True) if r == first]
    return [_TIMESTAMP.sub("", line) for line in lines]


def _parse_lines(entries: list[str], *, glue: bool) -> tuple[dict[str, str], int]:
    """`NAME=value` per entry; with `glue`, a non-assignment continues the previous value."""
    variables: dict[str, str] = {}
    skipped = 0
    last: str | None = None
    for entry in entries:
        m = _ASSIGN.match(entry)
        if m:
            last = m["name"]
            variables[last] = m["value"]
        elif _OTHER_ASSIGN.match(entry):
            last = None
            skipped += 1
        elif glue and last is not None and entry:
            variables[last] += "\n" + entry
        elif entry.strip():
            skipped += 1
    return variables, skipped


def _strip_comment(line: str) -> str:
    """`line` up to an unquoted `#` that starts a word (as the shell reads it)."""
    quote = ""
    escaped = False
    for i, ch in enumerate(line):
        if escaped:
            escaped = False
        elif ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def _logical_lines(lines: list[str]) -> Iterator[tuple[bool, str, list[str]]]:
    """(after a `$ ` prompt, text, shell words) per command: backslash continuations joined,
    comments dropped, and a quoted value that spans lines (`declare -x A="x<newline>y"`) kept
    whole."""
    pending = ""
    continued = False  # pending ends in a backslash continuation
    prompted = False
    for line in lines:
        if not pending:
            prompted = line.startswith("$ ")  # a pasted terminal prompt
            line = line[2:] if prompted else line
        elif continued and line.lstrip().startswith("#"):
            continue  # Docker drops comment lines inside a continued instruction
        text = pending + line
        continued = text.endswith("\\") and not text.endswith("\\\\")
        if continued:
            pending = text[:-1] + " "
            continue
        try:
            words = _shell_words(_strip_comment(text))
        except ValueError:  # an unclosed quote: a value that goes on in the next line, or prose
            if (pending or _OPENS_VALUE.match(text)) and text.count("\n") < _MAX_VALUE_LINES:
                pending = text + "\n"
                continue
            words = [text]  # not a command: counted as skipped
        pending = ""
        yield prompted, text, words


def _shell_words(text: str) -> list[str]:
    """Shell words, with `;`, `&&`, `||`, `|` and `&` as words of their own."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = ""
    return list(lexer)


def _commands(words: list[str]) -> Iterator[list[str]]:
    """The simple commands of a command line (split at `;`, `&&`, `||`, `|`, `&`)."""
    start = 0
    for i, word in enumerate([*words, ";"]):
        if word and set(word) <= set(";&|"):
            if i > start:
                yield words[start:i]
            start = i + 1


def _expand(value: str, variables: dict[str, str]) -> str:
    """Shell parameter expansion as far as the dump tells: `${A:-default}` is A's value or the
    default, `$A` / `${A}` is A's value when the script set it, else left as written."""

    def one(m: re.Match[str]) -> str:
        name = m["name"] or m["bare"]
        known = variables.get(name)
        if m["op"] is None:
            return m.group(0) if known is None else known
        use_default = known is None or (m["op"].startswith(":") and not known)
        return _expand(m["default"], variables) if use_default else known

    return _PARAM.sub(one, value) if "$" in value else value


def _prints_env(words: list[str]) -> bool:
    """`env`, `printenv`, `env | grep NCCL`, `export -p`: a command whose output is `env` output."""
    head = words[: words.index("|")] if "|" in words else words
    return bool(head) and ((head[0] in ("env", "printenv") and not any("=" in w for w in head))
                           or head in (["export", "-p"], ["declare", "-x"], ["set"]))


def _parse_script(lines: list[str]) -> tuple[dict[str, str], int]:
    variables: dict[str, str] = {}
    skipped = 0

    def add(word: str) -> bool:
        name, sep, value = word.partition("=")
        if not sep or not _IS_NAME.match(name):
            return False
        variables[name] = _expand(value, variables)
        return True

    env_output = False  # lines after `$ env | grep NCCL` are its output, values taken whole
    for prompted, text, words in _logical_lines(lines):
        if prompted:
            env_output = _prints_env(words)
        elif env_output and (m := _ASSIGN.match(text)):
            variables[m["name"]] = m["value"]
            continue
        if words[:1] == ["RUN"]:  # a Dockerfile build step: its exports are not the image's env
            continue
        found = False
        for command in _commands(words):
            found |= _read_command(command, add)
        if not found and words:
            skipped += 1
    return variables, skipped


def _read_command(words: list[str], add: Callable[[str], bool]) -> bool:
    """Record the assignments of one simple command through `add`; whether there were any."""
    found = False
    i = 0
    # `VAR=x VAR2=y cmd`, `env VAR=x cmd`, `export VAR=x`, `declare -x VAR=x`, `ENV VAR=x`
    while i < len(words):
        word, rest = words[i], words[i + 1:]
        if word == "ENV" and len(rest) >= 2 and "=" not in rest[0]:
            return add(f"{rest[0]}={' '.join(rest[1:])}")  # legacy Dockerfile `ENV NAME value`
        if word in _SHELL_DECLARE:
            flags = [w for w in rest if w.startswith("-") and "=" not in w]
            if word in ("declare", "typeset", "local") and not any("x" in f for f in flags):
                break  # not exported (arrays, locals)
            i += 1 + len(flags)
            continue
        if word == "env":
            i += 1
            continue
        if not add(word):
            break
        found = True
        i += 1
    # launcher flags anywhere in the command: mpirun -x, docker -e/--env, srun --export=
    for j, word in enumerate(words):
        if word in _FLAG_VALUE and j + 1 < len(words):
            found |= add(words[j + 1])
        elif word.startswith("--env="):
            found |= add(word.split("=", 1)[1])
        elif word.startswith("--export="):
            for item in word.split("=", 1)[1].split(","):
                found |= add(item)
    return found


def _yaml_scalar(raw: str) -> str:
    """A YAML scalar's value: double-quoted (JSON escapes), single-quoted, or plain."""
    raw = raw.strip()
    if raw.startswith('"'):
        end = raw.rfind('"')
        if end > 0:
            try:
                return str(json.loads(raw[: end + 1]))
            except ValueError:
                return raw[1:end]
    if raw.startswith("'"):
        end = raw.rfind("'")
        if end > 0:
            return raw[1:end].replace("''", "'")
    return re.split(r"\s#", raw, maxsplit=1)[0].rstrip()


def _parse_yaml(lines: list[str]) -> tuple[dict[str, str], int]:
    variables: dict[str, str] = {}
    skipped = 0
    block_indent: int | None = None
    pending: str | None = None
    item: str | None = None
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if block_indent is not None and (
            indent < block_indent or (indent == block_indent and not line.lstrip().startswith("-"))
        ):
            block_indent = None
        if (m := _YAML_NAME.match(line)) is not None:
            pending = m["name"]
            continue
        if pending is not None and (m := _YAML_VALUE.match(line)) is not None:
            variables[pending] = _yaml_scalar(m["value"])
            pending = None
            continue
        pending = None
        item, previous = _list_item(line), item
        if item is not None and (m := _ASSIGN.match(item)) and (
            block_indent is not None or previous in _FLAG_VALUE  # env list, or `- -x` `- A=b` args
        ):
            variables[m["name"]] = m["value"]
        elif (m := _YAML_INLINE.match(line)) is not None:
            variables[m["name"]] = _yaml_scalar(m["value"])
        elif (m := _INLINE_ENV.search(line)) is not None:
            for entry in _INLINE_ENTRY.finditer(m["body"]):
                variables[entry["name"]] = _yaml_scalar(entry["value"])
        elif (m := _YAML_BLOCK.match(line)) is not None:
            block_indent = len(m["indent"])
        elif (m := _DICT_ENTRY.match(line) or (block_indent is not None and _YAML_MAP.match(line))):
            variables[m["name"]] = _yaml_scalar(m["value"])
        else:
            skipped += 1
    return variables, skipped


def _list_item(line: str) -> str | None:
    """The text of a YAML list item or JSON array string on this line, else None."""
    m = _LIST_ITEM.match(line)
    if m is None:
        return None
    if m["json"] is not None:
        try:
            return str(json.loads(f'"{m["json"]}"'))
        except ValueError:
            return m["json"]
    return _yaml_scalar(m["yaml"])


def _walk_json(data: Any, in_env: bool = False, top: bool = True) -> Iterator[tuple[str, str]]:
    """Assignments inside JSON: `"Env": ["A=b"]` (docker inspect), `[{"name", "value"}]`
    (Kubernetes, ECS), `{"environment": {"A": "b"}}` and a top-level `{"A": "b"}` map."""
    if isinstance(data, list):
        for item in data:
            if isinstance(item, str) and (m := _ASSIGN.match(item)):
                yield m["name"], m["value"]
            elif isinstance(item, dict) and isinstance(item.get("name"), str) and "value" in item:
                if _IS_NAME.match(item["name"]) and isinstance(item["value"], str | int | float | bool):
                    yield item["name"], str(item["value"])
            else:
                yield from _walk_json(item, top=False)
    elif isinstance(data, dict):
        scalars = {k: v for k, v in data.items() if isinstance(v, str | int | float) and _IS_NAME.match(k)}
        if in_env or (top and scalars and len(scalars) == len(data) and all(k.isupper() for k in scalars)):
            yield from ((k, str(v)) for k, v in scalars.items())
        for key, value in data.items():
            if isinstance(value, list | dict):
                yield from _walk_json(value, in_env=key.lower() in _JSON_ENV_KEYS, top=False)


#: Variables in which images record the aws-ofi-nccl version they were built with.
_OFI_NCCL_VERSION_VARS = ("AWS_OFI_NCCL_VERSION", "OFI_NCCL_VERSION")


def inspect_env(stream: TextIO, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect env FILE`: the NCCL/FI/torch variables, redacted, and the rule findings
    for `profile` (keys: profile, format, num_variables, relevant, versions, harmful, required,
    outdated, recommended, malformed)."""
    from harness.envrules import Versions, evaluate, format_problems
    from harness.redact import Redactor

    dump = parse_env_dump(stream.read())
    env = dump.variables
    redactor = Redactor(env)
    prefixes = ("NCCL_", "FI_", "OFI_NCCL_", "TORCH_", "RDMAV_", "CUDA_", "LD_LIBRARY_PATH")
    result: dict[str, Any] = {
        "profile": profile.name,
        "format": dump.format,
        "num_variables": len(env),
        "relevant": redactor.env({k: v for k, v in sorted(env.items()) if k.startswith(prefixes)}),
    }
    # A dump rarely names the library versions (an image's `AWS_OFI_NCCL_VERSION` build variable
    # does); where it does not, version-ranged rules use their documented default.
    versions = Versions(ofi_nccl=next((env[n] for n in _OFI_NCCL_VERSION_VARS if env.get(n)), None))
    result["versions"] = {"ofi_nccl": versions.ofi_nccl, "libfabric": versions.libfabric}
    for kind in ("harmful", "required", "outdated", "recommended"):
        result[kind] = [
            {"name": f.rule.name, "value": None if f.value is None else redactor.text(f.value),
             "reason": f.rule.reason, "remedy": f.rule.remedy, "source": f.rule.source}
            for f in evaluate(env, profile, versions, [kind])
        ]
    result["malformed"] = [redactor.text(p) for p in format_problems(env)]
    return result


INSPECT = {"env": inspect_env}
