"""Keep secrets out of every output: env values of credential-like names, and secret-shaped text."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

__all__ = ["REDACTED", "Redactor", "is_secret_name", "redact_env", "redact_text"]

REDACTED = "***REDACTED***"

# Parts of variable names that mark credentials (matched on the upper-cased name, as words or
# substrings: HF_TOKEN, WANDB_API_KEY, AWS_SESSION_TOKEN, DB_PASSWORD, GITHUB_PAT ...).
_SECRET_NAME = re.compile(
    r"SECRET|TOKEN|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_?KEY|ACCOUNT_?KEY"
    r"|CONNECTION_?STRING"
    r"|AUTH|COOKIE|SESSION_?KEY|SIGNATURE|(^|_)PAT($|_)|(^|_)PWD($|_)|(^|_)PASS($|_)|(^|_)KEY($|_)"
)
# Secret-shaped values, whatever variable or log line holds them.
_SECRET_VALUES = [
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b"),  # AWS key ids
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),  # Hugging Face tokens
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{36,}\b"),  # GitHub tokens
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),  # GitHub fine-grained tokens
    re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),  # GitLab tokens
    re.compile(r"\b[Bb]earer\s+[A-Za-z0-9._~+/=-]{8,}"),  # HTTP Authorization headers
    re.compile(r"\bxox[abpors]-[A-Za-z0-9-]{10,}\b"),  # Slack tokens
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
]
# user:password@ in URLs (proxies, MLflow, git remotes).
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):[^@/\s]+@")
# NAME=value or "NAME": "value" pairs inside free text, for credential-like names.
_ASSIGNMENT = re.compile(
    r"(?P<name>\b[A-Za-z_][A-Za-z0-9_]*)(?P<sep>[\"']?\s*[=:]\s*[\"']?)(?P<value>[^\s\"',;]+)"
)
# A token as the whole userinfo: `https://<token>@github.com/...` (HyperPod recipes' git.repo_url).
_URL_TOKEN_USER = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]+)@")
#: A userinfo-only URL user this long is a token, not an account name like `git`.
MIN_URL_TOKEN_LEN = 16
_CAMEL_HUMP = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
# `--flag value` / `"--flag", "value"` (command lines, SM_USER_ARGS) for credential-like flags.
_FLAG_VALUE = re.compile(
    r"(?P<flag>(?<![\w-])--?(?P<name>[A-Za-z][\w-]*))(?P<sep>[\"']?\s*,\s*[\"']|\s+)(?P<value>[^\s\"',;\]-][^\s\"',;\]]*)"
)
# Kubernetes / ECS name-value pairs: `- name: HF_TOKEN` + `value: "..."`, `{"name": .., "value": ..}`.
_NAME_VALUE = re.compile(
    r"(?P<head>(?<![\w-])[\"']?name[\"']?\s*[:=]\s*[\"']?(?P<name>[A-Za-z_][A-Za-z0-9_]*)[\"']?\s*,?\s*"
    r"[\"']?value[\"']?\s*[:=]\s*[\"']?)(?P<value>[^\s\"',}]+)"
)
# Names that look secret but are not (they name a secret's location, not its value).
_NOT_SECRET = frozenset({"AWS_ACCESS_KEY_ID_FILE", "SSH_AUTH_SOCK", "TOKENIZERS_PARALLELISM"})

#: Values shorter than this are not searched for in free text (would redact "1", "true").
MIN_SECRET_LEN = 6


def is_secret_name(name: str) -> bool:
    """True when an environment variable's name says its value is a credential."""
    upper = _CAMEL_HUMP.sub("_", name).upper()  # wandbKey -> WANDB_KEY (Helm/recipe values)
    return name.upper() not in _NOT_SECRET and bool(_SECRET_NAME.search(upper))


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
        for pattern in _SECRET_VALUES:
            text = pattern.sub(REDACTED, text)
        text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)
        text = _URL_TOKEN_USER.sub(
            lambda m: f"{m['scheme']}{REDACTED}@"
            if len(m["user"]) >= MIN_URL_TOKEN_LEN or is_secret_name(m["user"]) else m.group(0),
            text,
        )

        def _assignment(m: re.Match[str]) -> str:
            if is_secret_name(m["name"]) and m["value"] != REDACTED:
                return f"{m['name']}{m['sep']}{REDACTED}"
            return m.group(0)

        def _pair(m: re.Match[str]) -> str:
            if is_secret_name(m["name"].replace("-", "_")) and m["value"] != REDACTED:
                return m.group(0)[: m.start("value") - m.start()] + REDACTED
            return m.group(0)

        text = _NAME_VALUE.sub(_pair, text)
        text = _FLAG_VALUE.sub(_pair, text)
        return _ASSIGNMENT.sub(_assignment, text)

    def argv(self, argv: Iterable[str]) -> list[str]:
        """A command line with secrets redacted, including the word after `--token`-like flags."""
        out: list[str] = []
        flag = ""
        for arg in argv:
            secret_flag = flag.startswith("-") and "=" not in flag and is_secret_name(
                flag.lstrip("-").replace("-", "_"))
            out.append(REDACTED if secret_flag and not arg.startswith("-") else self.text(arg))
            flag = arg
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A copy of `env` with credential values replaced and the others scrubbed of secrets."""
        return {k: (REDACTED if is_secret_name(k) else self.text(v)) for k, v in env.items()}

    def obj(self, value: object) -> object:
        """Redact every string inside a JSON-like structure (dicts, lists, strings)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, Mapping):
            return {
                k: (REDACTED if isinstance(k, str) and is_secret_name(k) and isinstance(v, str)
                    else self.obj(v))
                for k, v in value.items()
            }
        if isinstance(value, list | tuple):
            return [self.obj(v) for v in value]
        return value


def redact_text(text: str, env: Mapping[str, str] | None = None) -> str:
    """Shortcut: redact `text` against `env` (default: this process's environment)."""
    return Redactor(env).text(text)


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """Shortcut: redact an environment mapping against itself."""
    return Redactor(env).env(env)
