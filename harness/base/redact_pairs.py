"""Values beside credential-like names: which names are credentials' (`is_secret_name`), and
the value next to such a name in free text: `NAME=value`, `"key": "value"` (quoted, escaped,
with spaces), config lines (YAML, INI), `Authorization:` headers of every scheme, flags,
Kubernetes/ECS name-value pairs, Dockerfile `ENV` (harness.base.redact runs them)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator

from harness.base.redact_shapes import REDACTED, credential_end

__all__ = ["NAME_LITERALS", "is_secret_flag", "is_secret_name", "name_hints", "redact_pairs"]

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


#: What every credential's name holds, case aside: each _SECRET_NAME alternative has one of
#: these runs of letters (PASSWORD, PASSWD, PASSPHRASE and PASS hold `pass`; API_KEY,
#: ACCESS_KEY, SESSION_KEY and KEY `key`; CONNECTION_STRING `connection` ...), and no
#: character that lower-cases to ASCII upper-cases to ASCII, but `ß` upper-cases to `SS`: a
#: non-ASCII character is a hint too (tests/test_redact_hints.py holds both to the patterns).
NAME_LITERALS = ("secret", "token", "pass", "credential", "key", "connection", "auth",
                 "cookie", "signature", "private", "pat", "pwd")
_LITERALS = NAME_LITERALS  # (what name_hints searches: a test takes one out)
_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
#: `pat` then a hump (`myPatX`, `PAtX`: MY_PAT_X, PAT_X), in the text as it is (`t`: found as
#: fast as a literal; the `pa` before it, any case, is looked at after).
_PAT_HUMP = re.compile("t(?=[A-Z])")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def name_hints(text: str) -> list[int] | None:
    """Where in `text` the names that can be a credential's are: every place of a literal in
    the lower-cased text (each literal found by str.find, as fast as memchr: one regex of
    them all was ~5x slower) and every non-ASCII character, in order ([] where there is none:
    nothing to redact beside a name); None where lower-casing changes the length (`İ`) or
    hints are dense (more than one in 32 characters): every match is then looked at. `pat`
    (PAT is a credential's only as a whole part of its name: `GITHUB_PAT`, `myPat`) is not one
    before a lower-case letter or a digit: not in `os.path` or `PATH` (`patH`, PAT_H, is
    _PAT_HUMP's)."""
    low = text.lower()
    if len(low) != len(text):
        return None
    found: list[int] = []
    dense = len(text) // 32 + 64  # (`keykeykey...`: a step per hint costs more than every match)
    for literal in _LITERALS:
        at = low.find(literal)
        while at >= 0:
            if literal != "pat" or low[at + 3:at + 4] not in _LOWER_ALNUM:
                found.append(at)
                if len(found) > dense:
                    return None
            at = low.find(literal, at + 1)
    found += [m.start() - 2 for m in _PAT_HUMP.finditer(text, 2)
              if low.startswith("pa", m.start() - 2)]
    if not text.isascii():
        found += [m.start() for m in _NON_ASCII.finditer(low)]
    found.sort()
    return found


def _run_starts(chars: str) -> Callable[[str, list[int]], Iterator[int]]:
    """The starts of the runs of `chars` (a pattern's name characters) that hold a hint, in
    order: each run found once, and each character read at most twice (a run's head is read
    reversed from the end of the run before it)."""
    run = re.compile(f"[{chars}]*")

    def starts(text: str, hints: list[int]) -> Iterator[int]:
        end = 0
        for hint in hints:
            if hint < end or run.match(text, hint, hint + 1).end() == hint:  # type: ignore[union-attr]
                continue  # (in the run before, or not a name's character: `é` for _ASSIGNMENT)
            yield hint - run.match(text[end:hint][::-1]).end()  # type: ignore[union-attr]
            end = run.match(text, hint).end()  # type: ignore[union-attr]
    return starts


def _line_starts(text: str, hints: list[int]) -> Iterator[int]:
    """The starts of the lines that hold a hint, in order."""
    end = 0
    for hint in hints:
        if hint < end:
            continue
        yield text.rfind("\n", end, hint) + 1
        end = text.find("\n", hint) % (len(text) + 1)  # (no newline after it: the text's end)


#: Where a match of each pattern whose name holds a hint starts: its name is the whole run of
#: name characters at the start of the match, or on its line (so no search needs to run
#: elsewhere); and no other match can start inside a match (a name or a separator), so those
#: starts find what finditer finds. _NAME_VALUE and _SPACED_ASSIGNMENT, rare literals
#: (`name`, `ENV`), run as they are.
_NAME_STARTS: dict[re.Pattern[str], Callable[[str, list[int]], Iterator[int]]] = {
    _ASSIGNMENT: _run_starts("A-Za-z0-9_"), _FLAG_VALUE: _run_starts(r"\w-"),
    _CONFIG_LINE: _line_starts}


def _matches_at(pattern: re.Pattern[str], text: str, starts: Iterable[int]
                ) -> Iterator[re.Match[str]]:
    """`pattern`'s matches at `starts` (in order), none inside the one before (as finditer)."""
    end = 0
    for start in starts:
        if start >= end and (m := pattern.match(text, start)) is not None:
            end = m.end()
            yield m


@functools.lru_cache(maxsize=4096)  # text repeats its names (`"name":`, `value:`) thousands of times
def is_secret_name(name: str) -> bool:
    """True when an environment variable's (or a key's) name says its value is a credential."""
    if name in _SHELL_DIRS:
        return False
    upper = _CAMEL_HUMP.sub("_", name).upper().replace("-", "_")  # wandbKey -> WANDB_KEY
    return bool(_SECRET_NAME.search(upper)) and not _NOT_SECRET_NAME.search(upper)


#: What each pattern needs in the text (its test below; a redaction removes them, never adds).
_SEPARATORS = ("=", ":", "-", "name", "ENV", "setenv")


def redact_pairs(text: str, *, hinted: bool = True) -> str:
    """`text` with the value beside every credential-like name redacted. Each pattern is tried
    only where a credential's name can be (name_hints): a long value with no such name (a
    1 MiB LD_LIBRARY_PATH) costs one search, not a match and a name test at every `dir:`.
    `hinted=False` tries every match (the same result, slower: tests compare the two)."""
    if not any(sep in text for sep in _SEPARATORS):  # (no pattern can match: no hints needed)
        return text
    hints = name_hints(text) if hinted else None
    if hints == []:  # no name in it can be a credential's: nothing to redact
        return text
    if "name" in text:
        text, hints = _redact(_NAME_VALUE, text, hints, is_secret_flag)
    if "-" in text:
        text, hints = _redact(_FLAG_VALUE, text, hints, is_secret_flag)
    if "=" in text or ":" in text:
        text, hints = _redact(_CONFIG_LINE, text, hints, is_secret_name)
        text, hints = _redact(_ASSIGNMENT, text, hints, is_secret_name)
    if "ENV" in text or "setenv" in text:
        text, hints = _redact(_SPACED_ASSIGNMENT, text, hints, is_secret_name)
    return text


def _redact(pattern: re.Pattern[str], text: str, hints: list[int] | None,
            secret: Callable[[str], bool]) -> tuple[str, list[int] | None]:
    """_redact_values, tried only at the names that hold a hint where the pattern allows (all of
    its matches where it does not, or where there are no hints: None); and the hints of the
    text it returns."""
    starts = None if hints is None or pattern not in _NAME_STARTS else _NAME_STARTS[pattern](
        text, hints)
    done = _redact_values(pattern, text, secret, starts)
    return done, (hints if hints is None or done is text else name_hints(done))


def is_secret_flag(name: str) -> bool:
    """A flag (`--hf-token`) or a name-value pair's name that names a credential."""
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
            word = _BARE[_ASSIGNMENT].match(text, start)
            if word is None:  # `TOKEN=;next`: an empty value (this raised AttributeError)
                return None
            end = word.end()
        else:  # shell's `NAME=x cmd` keeps its command; a config value runs to the line's end
            comment = _COMMENT.search(text, start, end)
            end = len(text[start:comment.start() if comment else end].rstrip()) + start
    return start, end, end


def _redact_values(pattern: re.Pattern[str], text: str, secret: Callable[[str], bool],
                   starts: Iterable[int] | None = None) -> str:
    """Replace the value of each `pattern` match whose `name` is a secret's. The value is
    matched in a lookahead, so the search goes on inside it (`CMD="... HF_TOKEN=x"`). With
    `starts`, only the matches that start there (in order) are looked at."""
    out: list[str] = []
    pos = 0
    found = pattern.finditer(text) if starts is None else _matches_at(pattern, text, starts)
    for m in found:
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
