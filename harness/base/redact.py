"""Keep secrets out of every output: env values of credential-like names, values beside
credential-like names and keys (`NAME=value`, JSON/YAML/INI, `Authorization:` headers, flags,
URL userinfo), and secret-shaped text (harness.base.redact_shapes). Nothing else is changed."""

from __future__ import annotations

import functools
import html
import json
import os
import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import overload

from harness.base.jsontypes import JSONMapping, JSONObject
from harness.base.redact_pairs import is_secret_flag, is_secret_name, redact_pairs
from harness.base.redact_shapes import REDACTED, SHAPES, Shape, shortened_tokens

__all__ = ["Redactor", "redact_env", "redact_text"]

# user:password@ in URLs (proxies, MLflow, git remotes). Found from the `://` (a letter, digit
# or + . - before it: the end of a scheme), not from every letter that could start a scheme:
# that form retried a long run of letters at each of its characters (quadratic).
_URL_CREDENTIALS = re.compile(r"(?<=[a-zA-Z0-9+.-])://(?P<user>[^:/@\s]*):[^@/\s]+@")
# A token as the whole userinfo: `https://<token>@github.com/...` (HyperPod recipes' git.repo_url).
_URL_TOKEN_USER = re.compile(r"(?<=[a-zA-Z0-9+.-])://(?P<user>[^:/@\s]+)@")
#: A userinfo-only URL user this long is a token, not an account name like `git`.
MIN_URL_TOKEN_LEN = 16

#: Keys of a JSON/YAML object that name a variable whose value sits beside them:
#: `{"name": "HF_TOKEN", "value": ...}` (Kubernetes, ECS), `{"Key": ..., "Value": ...}`.
_PAIR_KEYS = (("name", "value"), ("key", "value"))

#: Known secret values shorter than this are not searched for in free text (would redact "1",
#: "true" everywhere); next to their variable's name they are redacted whatever their length.
MIN_SECRET_LEN = 6
#: Texts up to this long are remembered with their redaction (a report repeats its titles,
#: remedies and messages in every output): each is redacted once per Redactor, in a memory of
#: at most _MEMO_TOTAL characters (then forgotten and started again).
_MEMO_CHARS = 65536
_MEMO_TOTAL = 8_000_000


def _forms(value: str) -> set[str]:
    """A secret as it may be written: itself, JSON-escaped, XML-escaped, percent-encoded."""
    return {value, json.dumps(value)[1:-1], html.escape(value),
            urllib.parse.quote(value, safe="")}


class Redactor:
    """Redacts known secret values (from an environment) and secret-shaped text."""

    def __init__(self, env: Mapping[str, str] | None = None, extra_values: Iterable[str] = ()):
        env = os.environ if env is None else env
        values = _known_values(env, extra_values)
        # Longest first, so a secret that contains another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)
        self._memo: dict[str, str] = {}
        self._memo_chars = 0

    @classmethod
    def of(cls, env: Mapping[str, str] | None = None) -> Redactor:
        """The Redactor for `env`'s secrets, shared by every caller with the same secrets (its
        memory of redacted texts too)."""
        env = os.environ if env is None else env
        return _shared(tuple(sorted(_known_values(env, ()))))

    def text(self, text: str) -> str:
        """`text` with every secret replaced by REDACTED."""
        if len(text) > _MEMO_CHARS:
            return self._redact(text)
        done = self._memo.get(text)
        if done is None:
            if self._memo_chars > _MEMO_TOTAL:
                self._memo.clear()
                self._memo_chars = 0
            done = self._memo[text] = self._redact(text)
            self._memo.setdefault(done, done)  # redacting a redacted text changes nothing
            self._memo_chars += len(text) + len(done)
        return done

    def _redact(self, text: str) -> str:
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        if "..." in text:
            text = shortened_tokens(text)
            if self._values:
                text = self._shortened(text)
        for shape in SHAPES:
            if shape.hint.search(text):
                text = _sub_shape(shape, text)
        if "://" in text:
            text = _URL_CREDENTIALS.sub(lambda m: f"://{m['user']}:{REDACTED}@", text)
            text = _URL_TOKEN_USER.sub(
                lambda m: f"://{REDACTED}@"
                if len(m["user"]) >= MIN_URL_TOKEN_LEN or is_secret_name(m["user"])
                else m.group(0),
                text,
            )
        return redact_pairs(text)

    def _shortened(self, text: str) -> str:
        """A known value shortened to its two ends (`'hf_CANARYenv...efghijklmnopq'`: pytest's
        assertion message, reprlib; or cut, a head alone): from a start of the value
        (MIN_SECRET_LEN characters or more) to `...` and the longest end of it (4 characters or
        more) that follows. Found from the value's start: a few finds and one rebuild of the
        text per value."""
        for value in self._values:
            if len(value) < 2 * MIN_SECRET_LEN:
                continue
            head, pos, done, parts = value[:MIN_SECRET_LEN], 0, 0, []
            while (start := text.find(head, pos)) >= 0:
                pos = start + 1
                dots = text.find("...", start, start + len(value))
                if dots < 0 or not value.startswith(text[start:dots]):
                    continue
                kept = next((n for n in range(len(value) - 1, 3, -1)
                             if text.startswith(value[-n:], dots + 3)), 0)
                parts += [text[done:start], REDACTED]  # its head alone is part of it too
                done = pos = dots + 3 + kept
            if parts:
                text = "".join([*parts, text[done:]])
        return text

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line with secrets redacted: the word after a `--token`-like flag, and the
        whole value of `--token=...` and `TOKEN=...` words (spaces and all: it is one word)."""
        out: list[str] = []
        flag = ""
        for arg in argv:
            secret_flag = flag.startswith("-") and "=" not in flag and is_secret_flag(
                flag.lstrip("-"))
            assigned = _ARG_ASSIGNMENT.match(arg)
            if secret_flag and not arg.startswith("-"):
                out.append(REDACTED)
            elif assigned and is_secret_flag(assigned["name"]) and assigned["value"]:
                out.append(f"{assigned['head']}{REDACTED}")
            else:
                out.append(self.text(arg))
            flag = arg
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A copy of `env` with credential values replaced and the others scrubbed of secrets."""
        return {k: (REDACTED if is_secret_name(k) else self.text(v)) for k, v in env.items()}

    @overload
    def obj(self, value: str, _parent: object = None) -> str: ...
    @overload
    def obj(self, value: JSONMapping, _parent: object = None) -> JSONObject: ...
    @overload
    def obj(self, value: object, _parent: object = None) -> object: ...

    def obj(self, value: object, _parent: object = None) -> object:
        """Redact every string inside a JSON-like structure (dicts, lists, strings): the value
        of a credential-named key, and the `value` beside a credential `name` (`{"name":
        "HF_TOKEN", "value": ...}`), whatever its length. The shape is kept: a string gives a
        string, an object a dict (the overloads say so to a type checker)."""
        if isinstance(value, str):
            return self.text(value)
        if type(value) is dict and len(value) <= 16 and _plain_keys(tuple(value)):
            # No key names a credential or a variable (cached per key tuple: a table's rows
            # repeat theirs): only what is inside a member is redacted.
            if _AS_THEY_ARE.issuperset(map(type, value.values())):
                return dict(value)
            return {k: v if type(v) in _AS_THEY_ARE else self.obj(v, k) for k, v in value.items()}
        if type(value) is dict or isinstance(value, Mapping):  # (the ABC check costs ~0.4 us)
            name_key, paired = _paired_keys(value)
            # A number, a bool or None is returned as it is by obj (nothing in it to redact):
            # taken without the call (a table of 10,000 rows has ~100,000 of them).
            return {
                k: (REDACTED if k == paired or (k != name_key and isinstance(k, str)
                                                and is_secret_name(k) and _is_scalar_value(v)
                                                and not _is_count(_parent, k, v))
                    else v if type(v) in _AS_THEY_ARE else self.obj(v, k))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.obj(v, _parent) for v in value]
        return value


_ARG_ASSIGNMENT = re.compile(r"(?P<head>-{0,2}(?P<name>[A-Za-z_][\w.-]*)=)(?P<value>.*)", re.S)


def _known_values(env: Mapping[str, str], extra: Iterable[str]) -> set[str]:
    raw = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN}
    raw.update(v for v in extra if len(v) >= MIN_SECRET_LEN)
    return {form for v in raw for form in _forms(v)}


@functools.lru_cache(maxsize=8)
def _shared(values: tuple[str, ...]) -> Redactor:
    return Redactor({}, extra_values=values)


def _sub_shape(shape: Shape, text: str) -> str:
    accept = shape.accept
    if accept is None:
        return shape.pattern.sub(REDACTED, text)
    return shape.pattern.sub(lambda m: REDACTED if accept(m.group(0)) else m.group(0), text)


#: A report's own tallies (`"counts": {"pass": 31, ...}`): `pass` is a credential's name in a
#: config file, but a whole number under it in a `counts` mapping is a count of checks (every
#: report.json had `"pass": "***REDACTED***"`).
_COUNT_KEYS = frozenset({"pass"})


def _is_count(parent: object, key: str, value: object) -> bool:
    return (parent == "counts" and key in _COUNT_KEYS and isinstance(value, int)
            and not isinstance(value, bool))


def _paired_keys(obj: Mapping[object, object]) -> tuple[object, object]:
    """(the key that names a variable, the key of its value) in a name/value entry
    (`{"name": "HF_TOKEN", "value": "..."}`, `{"Key": "DB_PASSWORD", "Value": ...}`); the value
    key is None when the variable is not a credential; (None, None) for other objects."""
    if len(obj) > 8 or not _may_pair(tuple(obj)):
        return None, None
    lower = {k.lower(): k for k in obj if isinstance(k, str)}
    for name_key, value_key in _PAIR_KEYS:
        if name_key not in lower:  # (a `""` key is no name: `{"": "HF_TOKEN", "value": 1}`)
            continue
        name = obj[lower[name_key]]
        if isinstance(name, str) and value_key in lower:
            value = lower[value_key]
            secret = is_secret_name(name) and _is_scalar_value(obj[value])
            return lower[name_key], value if secret else None
    return None, None


#: The types that obj returns as they are.
_AS_THEY_ARE = frozenset({int, float, bool, type(None)})


@functools.lru_cache(maxsize=1024)  # a table's rows have the same keys
def _may_pair(keys: tuple[object, ...]) -> bool:
    """Whether _paired_keys can find a pair among these keys: one is `name` or `key` in any
    case."""
    return any(isinstance(k, str) and k.lower() in ("name", "key") for k in keys)


@functools.lru_cache(maxsize=1024)
def _plain_keys(keys: tuple[object, ...]) -> bool:
    """Whether an object with these keys has nothing to redact but inside its members: every
    key a str that names no credential, and no name/value pair (_may_pair)."""
    return not _may_pair(keys) and all(isinstance(k, str) and not is_secret_name(k) for k in keys)


def _is_scalar_value(value: object) -> bool:
    """A value that can hold a secret: a string, or a number (a PIN, a numeric password)."""
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def redact_text(text: str, env: Mapping[str, str] | None = None) -> str:
    """Shortcut: redact `text` against `env` (default: this process's environment)."""
    return Redactor.of(env).text(text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Shortcut: redact an environment mapping against itself."""
    return Redactor.of(env).env(env)
