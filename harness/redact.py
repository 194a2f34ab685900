"""Keep secrets out of every output: env values of credential-like names, and secret-shaped text."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_env", "redact_text"]

REDACTED = "***REDACTED***"

# Parts of variable names that mark credentials (matched on the upper-cased name, as words or
# substrings: HF_TOKEN, WANDB_API_KEY, AWS_SESSION_TOKEN, DB_PASSWORD, GITHUB_PAT ...).
_SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|ACCOUNT_?KEY"
    r"|CONNECTION_?STRING"
    r"|AUTH|COOKIE|SESSION_?KEY|SIGNATURE|(^|_)PAT($|_)|(^|_)PWD($|_)|(^|_)PASS($|_)|(^|_)KEY($|_)"
)
# Secret-shaped values, whatever variable or log line holds them. Every pattern starts at a
# literal (or a word boundary before one) and has no nested or adjacent unbounded repetition, so
# each runs in time linear in the text (bench/bench_redact.py).
_SECRET_VALUES = [
    # (literals one of which the text must hold, pattern): the literal test is a fast skip.
    (("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"),
     re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b")),  # AWS key ids
    (("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),  # Hugging Face tokens
    (("gh",), re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b")),  # GitHub tokens
    (("github_pat_",), re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}")),  # GitHub fine-grained
    (("glpat-",), re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}")),  # GitLab tokens
    (("earer",), re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}")),  # Authorization headers
    (("xox",), re.compile(r"\bxox[abpors]-[A-Za-z0-9-]{10,}\b")),  # Slack tokens
    # A PEM private key: up to its END line (the scan stops at the next BEGIN/END, so it is
    # linear however many headers there are), or, cut short, the base64 lines after its header
    # (real newlines or the `\n` escapes of a JSON or env value).
    (("-----BEGIN ",),
     re.compile(r"-----BEGIN [A-Z ]{0,40}PRIVATE KEY-----(?:"
                r"(?:(?!-----(?:BEGIN|END) )[\s\S]){0,65536}?-----END [A-Z ]{0,40}PRIVATE KEY-----"
                r"|(?:(?:\\r)?(?:\\n)|\r?\n)?(?:[A-Za-z0-9+/=]{1,1024}(?:(?:\\r)?\\n|\r?\n)?)*)")),
]
# user:password@ in URLs (proxies, MLflow, git remotes). Found from the `://` (a letter, digit
# or + . - before it: the end of a scheme), not from every letter that could start a scheme:
# that form retried a long run of letters at each of its characters (quadratic).
_URL_CREDENTIALS = re.compile(r"(?<=[a-zA-Z0-9+.-])://(?P<user>[^:/@\s]*):[^@/\s]+@")
# NAME=value or "NAME": "value" pairs inside free text, for credential-like names: a quoted value
# is taken up to its closing quote (spaces included), a bare one up to a space or separator.
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)(?P<sep>[\"']?\s*[=:]\s*)"
    r"(?=(?P<value>[^\s,;]))"
)
# Dockerfile's legacy `ENV NAME value` and csh's `setenv NAME value`.
_SPACED_ASSIGNMENT = re.compile(
    r"(?<![\w-])(?:ENV|setenv)[ \t]+(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<sep>[ \t]+)"
    r"(?=(?P<value>[^\s=]))"
)
# A token as the whole userinfo: `https://<token>@github.com/...` (HyperPod recipes' git.repo_url).
_URL_TOKEN_USER = re.compile(r"(?<=[a-zA-Z0-9+.-])://(?P<user>[^:/@\s]+)@")
#: A userinfo-only URL user this long is a token, not an account name like `git`.
MIN_URL_TOKEN_LEN = 16
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# `--flag value` / `"--flag", "value"` (command lines, SM_USER_ARGS) for credential-like flags.
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])--?(?P<name>[A-Za-z][\w-]*))(?P<sep>[\"']?\s*,\s*[\"']|\s+)(?=(?P<value>[^\s\"',;\]-]))"
)
# Kubernetes / ECS name-value pairs: `- name: HF_TOKEN` + `value: "..."`, `{"name": .., "value": ..}`.
_NAME_VALUE = re.compile(
    r"(?P<head>(?<![\w-])[\"']?name[\"']?\s*[:=]\s*[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_]*)[\"']?\s*(?:,\s*)?"
    r"[\"']?value[\"']?\s*[:=]\s*[\"']?)(?=(?P<value>[^\s\"',}]))"
)
# Names that look secret but are not (they name a secret's location, not its value).
_NOT_SECRET = frozenset({"AWS_ACCESS_KEY_ID_FILE", "SSH_AUTH_SOCK", "TOKENIZERS_PARALLELISM"})
# The shell's working directories (exactly these names: a `pwd:` key in a config file is a
# password): redacting them hid every path under the working directory, /opt/ml/code on
# SageMaker. MYSQL_PWD, DB_PWD stay secrets.
_SHELL_DIRS = frozenset({"PWD", "OLDPWD"})
# Each pattern above matches a name and what separates it from its value, and only looks at the
# value's first character: the value itself is measured (below) only for a credential's name, so
# that no search runs over the same long value again and again (`a=a=a=...`), and the search
# goes on inside a value that is not a secret (`CMD="python t.py HF_TOKEN=x"`).
_QUOTED_OR = r"\"[^\"\n]*\"?|'[^'\n]*'?|"
_VALUE_OF = {
    _ASSIGNMENT: re.compile(_QUOTED_OR + r"[^\s\"',;]+"),
    _SPACED_ASSIGNMENT: re.compile(_QUOTED_OR + r"\S+"),
    _FLAG_VALUE: re.compile(r"[^\s\"',;\]]+"),
    _NAME_VALUE: re.compile(r"[^\s\"',}]+"),
}
#: Keys of a JSON/YAML object that name a variable whose value sits beside them:
#: `{"name": "HF_TOKEN", "value": ...}` (Kubernetes, ECS), `{"Key": ..., "Value": ...}`.
_PAIR_KEYS = (("name", "value"), ("key", "value"))

#: Known secret values shorter than this are not searched for in free text (would redact "1",
#: "true" everywhere); next to their variable's name they are redacted whatever their length.
MIN_SECRET_LEN = 6


@functools.lru_cache(maxsize=4096)  # text repeats its names (`"name":`, `value:`) thousands of times
def is_secret_name(name: str) -> bool:
    """True when an environment variable's name says its value is a credential."""
    if name in _SHELL_DIRS or name.upper() in _NOT_SECRET:
        return False
    upper = _CAMEL_HUMP.sub("_", name).upper()  # wandbKey -> WANDB_KEY (Helm/recipe values)
    return bool(_SECRET_NAME.search(upper))


class Redactor:
    """Redacts known secret values (from an environment) and secret-shaped text."""

    def __init__(self, env: Mapping[str, str] | None = None, extra_values: Iterable[str] = ()):
        env = os.environ if env is None else env
        values = {v for k, v in env.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN}
        values.update(v for v in extra_values if len(v) >= MIN_SECRET_LEN)
        # Longest first, so a secret that contains another is replaced whole.
        self._values = sorted(values, key=len, reverse=True)

    def text(self, text: str) -> str:
        """`text` with every secret replaced by REDACTED."""
        for value in self._values:
            if value in text:
                text = text.replace(value, REDACTED)
        for literals, pattern in _SECRET_VALUES:
            if any(literal in text for literal in literals):
                text = pattern.sub(REDACTED, text)
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
            text = _redact_values(_ASSIGNMENT, text, is_secret_name)
        if "ENV" in text or "setenv" in text:
            text = _redact_values(_SPACED_ASSIGNMENT, text, is_secret_name)
        return text

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line with secrets redacted, including the word after `--token`-like flags."""
        out: list[str] = []
        flag = ""
        for arg in argv:
            secret_flag = flag.startswith("-") and "=" not in flag and _is_secret_flag(
                flag.lstrip("-"))
            out.append(REDACTED if secret_flag and not arg.startswith("-") else self.text(arg))
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


#: A report's own tallies (`"counts": {"pass": 31, ...}`): `pass` is a credential's name in a
#: config file, but a whole number under it in a `counts` mapping is a count of checks (every
#: report.json had `"pass": "***REDACTED***"`).
_COUNT_KEYS = frozenset({"pass"})


def _is_count(parent: object, key: str, value: object) -> bool:
    return (parent == "counts" and key in _COUNT_KEYS and isinstance(value, int)
            and not isinstance(value, bool))


def _is_secret_flag(name: str) -> bool:
    return is_secret_name(name.replace("-", "_"))


def _redact_values(pattern: re.Pattern[str], text: str, secret: Callable[[str], bool]) -> str:
    """Replace the `value` group of each `pattern` match whose `name` is a secret's. The value is
    matched in a lookahead, so the search goes on inside it (`CMD="... HF_TOKEN=x"`); a quoted
    value keeps its quotes."""
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        start = m.start("value")
        if start < pos or not secret(m["name"]):
            continue
        found = _VALUE_OF[pattern].match(text, start)
        if found is None:
            continue
        value, end = found.group(0), found.end()
        quote = value[0] if value[0] in "\"'" else ""
        closed = bool(quote) and len(value) > 1 and value.endswith(quote)
        inner = value[len(quote):len(value) - closed]
        if not inner or inner == REDACTED:
            continue
        out += [text[pos:start], quote, REDACTED, quote if closed else ""]
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
    return Redactor(env).text(text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Shortcut: redact an environment mapping against itself."""
    return Redactor(env).env(env)
