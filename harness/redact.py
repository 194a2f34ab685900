"""Keep secrets out of every output: env values of credential-like names, values beside
credential-like names and keys (`NAME=value`, JSON/YAML/INI, `Authorization:` headers, flags,
URL userinfo), and secret-shaped text (harness.redact_shapes). Nothing else is changed."""

from __future__ import annotations

import functools
import html
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Mapping

from harness.redact_shapes import REDACTED, SHAPES, Shape, credential_end

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_env", "redact_text"]

# Parts of variable names that mark credentials (matched on the upper-cased name, as words or
# substrings: HF_TOKEN, WANDB_API_KEY, AWS_SESSION_TOKEN, DB_PASSWORD, GITHUB_PAT, MY_AUTH ...).
# TOKEN is not TOKENS or TOKENIZER (MAX_TOKENS, TOKENIZERS_PARALLELISM); AUTH is not AUTHOR or
# AUTHORITY (GIT_AUTHOR_NAME) but is AUTHORIZATION; PRIVATE is not an address (PRIVATE_IP).
_SECRET_NAME = re.compile(
    r"SECRET|TOKEN(?!S|IZ)|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|API_?KEY|ACCESS_?KEY"
    r"|ACCOUNT_?KEY|CONNECTION_?STRING|AUTH(?!OR(?!I[SZ]))|COOKIE|SESSION_?KEY|SIGNATURE"
    r"|PRIVATE(?!_?(?:IP|DNS|SUBNET|NETWORK|ADDR|LINK|REGISTRY))"
    r"|(^|_)PAT($|_)|(^|_)PWD($|_)|(^|_)PASS($|_)|(^|_)KEY($|_)"
)
# Names that look secret but are not: a secret's location (`*_FILE`, `*_PATH`, `*_DIR`, a
# socket), a tokenizer's special tokens and token counts.
_NOT_SECRET_NAME = re.compile(
    r"_(?:FILE|PATH|DIR|SOCK)$|(?:^|_)(?:PAD|BOS|EOS|UNK|SEP|CLS|MASK)_TOKEN"
    r"|TOKEN_(?:IDS?|COUNT|LEN|LENGTH|LIMIT)$"
)
# The shell's working directories (exactly these names: a `pwd:` key in a config file is a
# password): redacting them hid every path under the working directory, /opt/ml/code on
# SageMaker. MYSQL_PWD, DB_PWD stay secrets.
_SHELL_DIRS = frozenset({"PWD", "OLDPWD"})
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")

# user:password@ in URLs (proxies, MLflow, git remotes). Found from the `://` (a letter, digit
# or + . - before it: the end of a scheme), not from every letter that could start a scheme:
# that form retried a long run of letters at each of its characters (quadratic).
_URL_CREDENTIALS = re.compile(r"(?<=[a-zA-Z0-9+.-])://(?P<user>[^:/@\s]*):[^@/\s]+@")
# A token as the whole userinfo: `https://<token>@github.com/...` (HyperPod recipes' git.repo_url).
_URL_TOKEN_USER = re.compile(r"(?<=[a-zA-Z0-9+.-])://(?P<user>[^:/@\s]+)@")
#: A userinfo-only URL user this long is a token, not an account name like `git`.
MIN_URL_TOKEN_LEN = 16

# A quote that opens a value: ' or ", JSON-escaped once or more (`\"` inside results.jsonl or
# a JSON string), or an XML/HTML entity (junit.xml attributes).
_QUOTE = r"(?:\\*[\"']|&(?:quot|apos|#34|#39);)"
# NAME=value, NAME: value, "name": "value", \"name\": \"value\" inside free text.
_ASSIGNMENT = re.compile(
    rf"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)(?P<sep>{_QUOTE}?[ \t]*[=:]\s*)(?=(?P<value>[^\s,;]))")
# A config line: `key: value` (YAML), `key = value` (INI, TOML), `password=pass word` (INI):
# its value runs to the end of the line (a trailing ` # comment` aside).
_CONFIG_LINE = re.compile(
    r"(?m)^[ \t]*(?:-[ \t]+)?(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)"
    r"(?P<sep>[ \t]*:[ \t]+|[ \t]*=[ \t]*)(?=(?P<value>\S))")
# Dockerfile's legacy `ENV NAME value` and csh's `setenv NAME value`.
_SPACED_ASSIGNMENT = re.compile(
    r"(?<![\w-])(?:ENV|setenv)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<sep>[ \t]+)"
    r"(?=(?P<value>[^\s=]))")
# `--flag value`, `--flag "a b"`, `"--flag", "value"` (command lines, SM_USER_ARGS).
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])--?(?P<name>[A-Za-z][\w-]*))(?P<sep>[\"']?[ \t]*,[ \t]*|[ \t]+)"
    r"(?=(?P<value>[\"']?[^\s\"',;\]-]))")
# Kubernetes / ECS name-value pairs: `- name: HF_TOKEN` + `value: "..."`, `{"name": .., "value": ..}`.
_NAME_VALUE = re.compile(
    r"(?P<head>(?<![\w-])[\"']?name[\"']?\s*[:=]\s*[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_]*)[\"']?"
    r"\s*(?:,\s*)?[\"']?value[\"']?\s*[:=]\s*)(?=(?P<value>[^\s,}]))")
# Each pattern above matches a name and what separates it from its value, and only looks at the
# value's first character: the value itself is measured (`_measure`) only for a credential's
# name, so that no search runs over the same long value again and again (`a=a=a=...`), and the
# search goes on inside a value that is not a secret (`CMD="python t.py HF_TOKEN=x"`).
_OPEN_QUOTE = re.compile(_QUOTE)
_BARE = {_ASSIGNMENT: re.compile(r"[^\s\"',;&]+"), _SPACED_ASSIGNMENT: re.compile(r"\S+"),
         _FLAG_VALUE: re.compile(r"[^\s\"',;\]]+"), _NAME_VALUE: re.compile(r"[^\s\"',}]+"),
         _CONFIG_LINE: re.compile(r"[^\n]*")}
_COMMENT = re.compile(r"[ \t]+[#;]")
#: The header whose value is a credential after any scheme word (`Authorization: Foo x`).
_AUTH_HEADERS = frozenset({"authorization", "proxy-authorization", "proxy_authorization"})
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


@functools.lru_cache(maxsize=4096)  # text repeats its names (`"name":`, `value:`) thousands of times
def is_secret_name(name: str) -> bool:
    """True when an environment variable's (or a key's) name says its value is a credential."""
    if name in _SHELL_DIRS:
        return False
    upper = _CAMEL_HUMP.sub("_", name).upper().replace("-", "_")  # wandbKey -> WANDB_KEY
    return bool(_SECRET_NAME.search(upper)) and not _NOT_SECRET_NAME.search(upper)


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
        for shape in SHAPES:
            if any(literal in text for literal in shape.literals):
                text = _sub_shape(shape, text)
        if "://" in text:
            text = _URL_CREDENTIALS.sub(lambda m: f"://{m['user']}:{REDACTED}@", text)
            text = _URL_TOKEN_USER.sub(
                lambda m: f"://{REDACTED}@"
                if len(m["user"]) >= MIN_URL_TOKEN_LEN or is_secret_name(m["user"])
                else m.group(0),
                text,
            )
        if "name" in text:
            text = _redact_values(_NAME_VALUE, text, _is_secret_flag)
        if "-" in text:
            text = _redact_values(_FLAG_VALUE, text, _is_secret_flag)
        if "=" in text or ":" in text:
            text = _redact_values(_CONFIG_LINE, text, is_secret_name)
            text = _redact_values(_ASSIGNMENT, text, is_secret_name)
        if "ENV" in text or "setenv" in text:
            text = _redact_values(_SPACED_ASSIGNMENT, text, is_secret_name)
        return text

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line with secrets redacted: the word after a `--token`-like flag, and the
        whole value of `--token=...` and `TOKEN=...` words (spaces and all: it is one word)."""
        out: list[str] = []
        flag = ""
        for arg in argv:
            secret_flag = flag.startswith("-") and "=" not in flag and _is_secret_flag(
                flag.lstrip("-"))
            assigned = _ARG_ASSIGNMENT.match(arg)
            if secret_flag and not arg.startswith("-"):
                out.append(REDACTED)
            elif assigned and _is_secret_flag(assigned["name"]) and assigned["value"]:
                out.append(f"{assigned['head']}{REDACTED}")
            else:
                out.append(self.text(arg))
            flag = arg
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A copy of `env` with credential values replaced and the others scrubbed of secrets."""
        return {k: (REDACTED if is_secret_name(k) else self.text(v)) for k, v in env.items()}

    def obj(self, value: object, _parent: object = None) -> object:
        """Redact every string inside a JSON-like structure (dicts, lists, strings): the value
        of a credential-named key, and the `value` beside a credential `name` (`{"name":
        "HF_TOKEN", "value": ...}`), whatever its length."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            name_key, paired = _paired_keys(value)
            return {
                k: (REDACTED if k == paired or (k != name_key and isinstance(k, str)
                                                and is_secret_name(k) and _is_scalar_value(v)
                                                and not _is_count(_parent, k, v))
                    else self.obj(v, k))
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


def _is_secret_flag(name: str) -> bool:
    return is_secret_name(name.replace("-", "_"))


@functools.lru_cache(maxsize=16)
def _closing(quote: str) -> re.Pattern[str]:
    """The end of a value opened by `quote`: the same quote, not escaped, or the line's end."""
    return re.compile(r"(?<!\\)" + re.escape(quote) + r"|\n")


def _measure(pattern: re.Pattern[str], m: re.Match[str], text: str) -> tuple[int, int, int] | None:
    """(start, end) of the secret in the value `m` found, and where the value ends; None when
    there is nothing to redact. A quoted value is its quotes' content, spaces and all; after a
    scheme word (`Basic`, `Bearer`, any after `Authorization:`) it is the credential; on a
    config line, the rest of the line; else one word."""
    start = m.start("value")
    if text.startswith(REDACTED, start):  # its secret went already (a shape, a known value)
        return None
    quote = _OPEN_QUOTE.match(text, start)
    if quote is not None:
        close = _closing(quote.group(0)).search(text, quote.end())
        if close is None:
            return quote.end(), len(text), len(text)
        end = close.end() if close.group(0) != "\n" else close.start()
        return quote.end(), close.start(), end
    name = m["name"].lower()
    span = credential_end(text, start, any_scheme=name in _AUTH_HEADERS)
    if span is not None:
        return span[0], span[1], span[1]
    found = _BARE[pattern].match(text, start)
    if found is None or found.end() == start:
        return None
    end = found.end()
    if pattern is _CONFIG_LINE:
        if m["name"].isupper() and ":" not in m["sep"] and " " not in m["sep"]:
            end = _BARE[_ASSIGNMENT].match(text, start).end()  # type: ignore[union-attr]
        else:  # shell's `NAME=x cmd` keeps its command; a config value runs to the line's end
            comment = _COMMENT.search(text, start, end)
            end = len(text[start:comment.start() if comment else end].rstrip()) + start
    return start, end, end


def _redact_values(pattern: re.Pattern[str], text: str, secret: Callable[[str], bool]) -> str:
    """Replace the value of each `pattern` match whose `name` is a secret's. The value is
    matched in a lookahead, so the search goes on inside it (`CMD="... HF_TOKEN=x"`)."""
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start("value") < pos or not secret(m["name"]):
            continue
        span = _measure(pattern, m, text)
        if span is None:
            continue
        start, stop, end = span
        inner = text[start:stop]
        if not inner or inner == REDACTED:
            continue
        out += [text[pos:start], REDACTED, text[stop:end]]
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _paired_keys(obj: Mapping[object, object]) -> tuple[object, object]:
    """(the key that names a variable, the key of its value) in a name/value entry
    (`{"name": "HF_TOKEN", "value": "..."}`, `{"Key": "DB_PASSWORD", "Value": ...}`); the value
    key is None when the variable is not a credential; (None, None) for other objects."""
    if len(obj) > 8:
        return None, None
    lower = {k.lower(): k for k in obj if isinstance(k, str)}
    for name_key, value_key in _PAIR_KEYS:
        name = obj.get(lower.get(name_key, ""))
        if isinstance(name, str) and value_key in lower:
            value = lower[value_key]
            secret = is_secret_name(name) and _is_scalar_value(obj[value])
            return lower[name_key], value if secret else None
    return None, None


def _is_scalar_value(value: object) -> bool:
    """A value that can hold a secret: a string, or a number (a PIN, a numeric password)."""
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def redact_text(text: str, env: Mapping[str, str] | None = None) -> str:
    """Shortcut: redact `text` against `env` (default: this process's environment)."""
    return Redactor.of(env).text(text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Shortcut: redact an environment mapping against itself."""
    return Redactor.of(env).env(env)
