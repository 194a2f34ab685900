"""Saved environment dumps: `env`/`printenv` output, `printenv -0` (NUL-separated),
`declare -x` / `export NAME="value"` listings, and Docker/Kubernetes-style `NAME=value` files."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, TextIO

from harness.parsers import ParseError

__all__ = ["INSPECT", "EnvDump", "inspect_env", "parse_env_dump"]

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGN = re.compile(
    rf"^(?:declare -x |export |typeset -x )?(?P<name>{_NAME})=(?P<value>.*)$", re.S
)
_OTHER_ASSIGN = re.compile(r"^\S+=")  # exported bash functions: BASH_FUNC_f%%=() {
_BARE_DECLARE = re.compile(rf"^(?:declare -x |export )(?P<name>{_NAME})$")


@dataclass(frozen=True, slots=True)
class EnvDump:
    """Variables from a dump, in file order; `skipped` counts lines that were not assignments."""

    variables: dict[str, str]
    skipped: int


def _unquote(value: str, quoted_style: bool) -> str:
    if quoted_style and len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        try:
            return shlex.split(value)[0] if value[0] == "'" else _bash_dq(value[1:-1])
        except ValueError:
            return value[1:-1]
    return value


def _bash_dq(inner: str) -> str:
    """Undo `declare -x` double-quote escaping (\\" \\\\ \\$ \\`)."""
    return re.sub(r'\\([\\"$`])', r"\1", inner)


def parse_env_dump(text: str) -> EnvDump:
    """Parse an environment dump. Reads lines like `NCCL_DEBUG=INFO`, `declare -x FI_PROVIDER="efa"`.

    A line that is not an assignment continues the previous value (multi-line values in plain
    `env` output) when it follows one, else it is counted as skipped.
    """
    if "\0" in text:
        entries = [e for e in text.split("\0") if e.strip()]
        quoted_style = False
    else:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        entries = text.split("\n")
        quoted_style = any(e.startswith(("declare -x ", "export ")) for e in entries[:50])
    variables: dict[str, str] = {}
    skipped = 0
    last: str | None = None
    for entry in entries:
        m = _ASSIGN.match(entry)
        if m:
            last = m["name"]
            variables[last] = _unquote(m["value"], quoted_style or entry.startswith(("declare", "export")))
        elif _BARE_DECLARE.match(entry):
            last = None
        elif _OTHER_ASSIGN.match(entry):
            last = None
            skipped += 1
        elif last is not None and entry and "\0" not in text and not quoted_style:
            variables[last] += "\n" + entry
        elif entry.strip():
            skipped += 1
    if not variables:
        raise ParseError("no environment variable assignments (NAME=value) found in the input")
    return EnvDump(variables, skipped)


def inspect_env(stream: TextIO, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect env FILE`: the NCCL/FI/torch variables, redacted, and the rule findings
    for `profile` (keys: profile, num_variables, relevant, harmful, required, outdated,
    recommended, malformed)."""
    from harness.envrules import Versions, evaluate, format_problems
    from harness.redact import Redactor

    dump = parse_env_dump(stream.read())
    env = dump.variables
    redactor = Redactor(env)
    prefixes = ("NCCL_", "FI_", "TORCH_", "RDMAV_", "CUDA_", "LD_LIBRARY_PATH")
    result: dict[str, Any] = {
        "profile": profile.name,
        "num_variables": len(env),
        "relevant": redactor.env({k: v for k, v in sorted(env.items()) if k.startswith(prefixes)}),
    }
    # Versions are unknown in a pasted dump: version-ranged rules use their documented default.
    for kind in ("harmful", "required", "outdated", "recommended"):
        result[kind] = [
            {"name": f.rule.name, "value": None if f.value is None else redactor.text(f.value),
             "reason": f.rule.reason, "remedy": f.rule.remedy, "source": f.rule.source}
            for f in evaluate(env, profile, Versions(), [kind])
        ]
    result["malformed"] = [redactor.text(p) for p in format_problems(env)]
    return result


INSPECT = {"env": inspect_env}
