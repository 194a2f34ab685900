"""YAML (Kubernetes `env:` lists and maps, flow style, args lists and flow-sequence commands
with mpirun `-x NAME=value` items) and the JSON-ish lines pasted from `docker inspect` and Python
dicts, read as environment assignments for harness.parsers.env."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from harness.parsers.env_script import ASSIGN, FLAG_WORDS, Variables
from harness.parsers.env_script_lines import VAR_NAME

# YAML: the list form of Kubernetes `env:`, keys that open an environment block, map entries.
YAML_NAME = re.compile(rf"^(?P<indent>\s*)-\s+name:\s*[\"']?(?P<name>{VAR_NAME})[\"']?\s*(?:#.*)?$")
_YAML_VALUE = re.compile(r"^\s*value:\s*(?P<value>.*)$")
YAML_INLINE = re.compile(
    rf"^\s*-\s*\{{\s*name:\s*[\"']?(?P<name>{VAR_NAME})[\"']?\s*,\s*value:\s*(?P<value>.*?)\}}[ \t]*(?:#.*)?$"
)
YAML_BLOCK = re.compile(
    r"^(?P<indent>\s*)(?:-\s+)?[\"']?(?:env|environment|env_vars|envVars|extraEnv|"
    r"environmentVariables|Variables|Env)[\"']?\s*:\s*(?:\[\s*)?(?:#.*)?$"
)
# One list item: YAML `- item` or a JSON array line `"item",` (a pasted, maybe cut, docker inspect).
# (No lazy group before `\s*$`: each such pattern rescans a run of blanks from each of its
# characters; the values are stripped in Python instead.)
_LIST_ITEM = re.compile(r"^\s*(?:-\s+(?P<yaml>.*)|\"(?P<json>(?:[^\"\\]|\\.)*)\"[ \t]*(?:,[ \t]*)?)$")
_YAML_MAP = re.compile(rf"^\s*[\"']?(?P<name>{VAR_NAME})[\"']?\s*:\s+(?P<value>.*)$")
# A one-line dict/map under an environment key: `environment={"NCCL_DEBUG": "INFO"}` (SageMaker
# estimators), `env: {NCCL_DEBUG: INFO}` (YAML flow style); and one entry of it.
# (The keyword comes first and its word boundary is a lookbehind after it, so that the search
# skips to each `env` with a literal scan: a 120 KB JSON value is read in 0.1 ms, not 3.5.
# A quote before the keyword is a word boundary too, and the match's start is not used.)
INLINE_ENV = re.compile(
    r"env(?<!\wenv)(?:ironment(?:_variables)?|_vars|Vars)?[\"']?\s*[=:]\s*\{(?P<body>[^{}]*)\}"
)
_INLINE_ENTRY = re.compile(
    rf"(?<![A-Za-z0-9_])[\"']?(?P<name>{VAR_NAME})[\"']?\s*:\s*(?P<value>\"(?:[^\"\\]|\\.)*\"|'[^']*'|[^,\s}}]+)"
)
# `"NAME": "value",` in a Python/JSON dict (SageMaker `environment={...}`), upper-case names.
DICT_ENTRY = re.compile(
    r"^\s*[\"'](?P<name>[A-Z][A-Z0-9_]*)[\"']\s*:\s*(?P<value>[\"'].*[\"'])[ \t]*(?:,[ \t]*)?$")


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


def parse_yaml(lines: Iterable[str]) -> tuple[Variables, int]:
    variables = Variables()
    skipped = 0
    block_indent: int | None = None
    pending: str | None = None
    item: str | None = None
    flow_previous = ""  # the last quoted item of a flow sequence (`["mpirun", "-x", ...`)
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if '"' in line or "'" in line:
            flow_previous, taken = _flow_flags(line, flow_previous, variables)
            if taken:
                continue
        indent = len(line) - len(line.lstrip())
        if block_indent is not None and (
            indent < block_indent or (indent == block_indent and not line.lstrip().startswith("-"))
        ):
            block_indent = None
        if (m := YAML_NAME.match(line)) is not None:
            pending = m["name"]
            continue
        if pending is not None and (m := _YAML_VALUE.match(line)) is not None:
            variables.put(pending, _yaml_scalar(m["value"]))
            pending = None
            continue
        pending = None
        item, previous = list_item(line), item
        if item is not None and (m := ASSIGN.match(item)) and (
            block_indent is not None or previous in FLAG_WORDS  # env list, or `- -x` `- A=b` args
        ):
            variables.put(m["name"], m["value"])
        elif (m := YAML_INLINE.match(line)) is not None:
            variables.put(m["name"], _yaml_scalar(m["value"]))
        elif (m := INLINE_ENV.search(line)) is not None:
            for entry in _INLINE_ENTRY.finditer(m["body"]):
                variables.put(entry["name"], _yaml_scalar(entry["value"]))
        elif (m := YAML_BLOCK.match(line)) is not None:
            block_indent = len(m["indent"])
        elif m := DICT_ENTRY.match(line):
            variables.put(m["name"], _yaml_scalar(m["value"]))
        elif block_indent is not None and (m := _YAML_MAP.match(line)):
            value = m["value"].rstrip()  # `KEY: value,` (a flow map written one entry a line)
            variables.put(m["name"], _yaml_scalar(value[:-1] if value.endswith(",") else value))
        else:
            skipped += 1
    return variables, skipped


#: A quoted item of a YAML/JSON flow sequence, followed by `,` or `]` (or the line's end).
_FLOW_ITEM = re.compile(r"""(?:"((?:[^"\\]|\\.)*)"|'([^']*)')\s*(?=,|\]|$)""")


def _flow_flags(line: str, previous: str, variables: Variables) -> tuple[str, bool]:
    """Launcher flags in a flow sequence (`command: ["mpirun", "-x", "FI_PROVIDER=efa", ...]`,
    one or several items a line): each `-x` / `-e` / `--env` item followed by a `NAME=value`
    item is an assignment. Returns the line's last item (a flag may end a line) and whether
    the line gave one."""
    taken = False
    for m in _FLOW_ITEM.finditer(line):
        item = m[1] if m[1] is not None else m[2]
        if previous in FLAG_WORDS and (a := ASSIGN.match(item)):
            variables.put(a["name"], a["value"])
            taken = True
        previous = item
    return previous, taken


def list_item(line: str) -> str | None:
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
