"""Canary secrets in every shape harness.base.redact recognises, the non-secrets that must survive
it, and a scanner that finds a canary in any bytes (as written, JSON-escaped, XML-escaped,
percent-encoded, or cut to a fragment). Shared by tests/test_redact_channels.py (in process)
and tests/e2e/test_e2e_redaction.py (every byte the installed `preflight` writes)."""

from __future__ import annotations

import html
import json
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["CANARIES", "ENV_CANARIES", "SURVIVORS", "Canary", "leaks", "survivors_missing"]


@dataclass(frozen=True)
class Canary:
    """`text` holds the secret `secret` in the shape `shape`."""

    shape: str
    text: str
    secret: str


_JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJDQU5BUllqd3QifQ."
        "Q0FOQVJZc2lnbmF0dXJlMDEyMzQ1Njc4OQ")
_PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQCANARYpem0123"

#: One canary per shape, each with a secret no other canary contains.
CANARIES: tuple[Canary, ...] = (
    Canary("JSON value under a secret key, with spaces",
           '{"password": "canary json pass phrase", "lr": 0.1}', "canary json pass phrase"),
    Canary("JSON-escaped JSON value", '{\\"db_password\\": \\"canary escaped pass\\"}',
           "canary escaped pass"),
    Canary("YAML value with spaces", "api_key: canary yaml secret words", "canary yaml secret words"),
    Canary("INI value with spaces", "client_secret = canary ini secret words",
           "canary ini secret words"),
    Canary("Authorization: Basic", "Authorization: Basic Y2FuYXJ5OmJhc2ljcGFzc3dvcmQ=",
           "Y2FuYXJ5OmJhc2ljcGFzc3dvcmQ="),
    Canary("Authorization: Bearer JWT", f"Authorization: Bearer {_JWT}", _JWT),
    Canary("Authorization: Digest", 'Authorization: Digest username="u", realm="r", '
           'nonce="n0", response="canarydigestresponse0042"', "canarydigestresponse0042"),
    Canary("Authorization: unknown scheme", "Authorization: Custom canaryCustomCredential77",
           "canaryCustomCredential77"),
    Canary("URL userinfo password", "https://oauth2:canaryUrlPassw0rd@git.example.com/o/r.git",
           "canaryUrlPassw0rd"),
    Canary("GitLab token in a URL", "https://oauth2:glpat-CANARYgl0123456789abcd@gitlab.com/x.git",
           "glpat-CANARYgl0123456789abcd"),
    Canary("URL token as userinfo", "https://ghp_CANARYgh0123456789abcdefghijklmnopqrst@github.com/o/r",
           "ghp_CANARYgh0123456789abcdefghijklmnopqrst"),
    Canary("AWS access key id (AKIA)", "key id AKIACANARY0000000001", "AKIACANARY0000000001"),
    Canary("AWS temporary key id (ASIA)", "aws_access_key_id=ASIACANARY0000000002",
           "ASIACANARY0000000002"),
    Canary("GitHub fine-grained token", "github_pat_11CANARY0123456789_abcdefghijklmnopqrstuvwxyz",
           "github_pat_11CANARY0123456789_abcdefghijklmnopqrstuvwxyz"),
    Canary("Hugging Face token", "hf_CANARYhf0123456789abcdefghijklmnopq",
           "hf_CANARYhf0123456789abcdefghijklmnopq"),
    Canary("OpenAI key", "sk-proj-CANARYopenai0123456789AbCdEfGhIj",
           "sk-proj-CANARYopenai0123456789AbCdEfGhIj"),
    Canary("Anthropic key", "sk-ant-api03-CANARYanthropic0123456789-XyZ_abc",
           "sk-ant-api03-CANARYanthropic0123456789-XyZ_abc"),
    Canary("JWT alone", f"session {_JWT} expired", _JWT),
    Canary("PEM private key", "-----BEGIN RSA PRIVATE KEY-----\n" + _PEM_BODY
           + "\n-----END RSA PRIVATE KEY-----", _PEM_BODY),
    Canary("secret flag value", 'train.py --wandb-api-key "canary flag value" --lr 1',
           "canary flag value"),
)

#: Secret-named variables of the run's environment: (name, value). Their values appear in the
#: checks' messages and outputs only as themselves, found because they are the environment's.
ENV_CANARIES: Mapping[str, str] = {
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/CANARYenvAwsSecret0",
    "MY_SERVICE_AUTH": "canaryAuthNamedValue",
    "DB_PASSWORD": "canary env pass with spaces",
    "HF_TOKEN": "hf_CANARYenv0123456789abcdefghijklmnopq",
}

#: Text that is not a secret and must reach every output as it is.
SURVIVORS: tuple[str, ...] = (
    "TOKENIZERS_PARALLELISM=false", "MAX_TOKENS=4096", "MAX_NEW_TOKENS=512",
    "AUTHOR=survivor-author", "GIT_AUTHOR_NAME=survivor-git-author",
    "/opt/ml/code/survivor/train.py", "/root/.cache/huggingface/token-survivor-path",
    "Basic information survives", "sk-learn-style-hyphenated-words-survive",
    "EOS_TOKEN=survivor-eos", "NCCL_DEBUG=INFO",
)


def _forms(secret: str) -> set[str]:
    """How a secret may appear in an output: as it is, escaped for JSON or XML, URL-encoded,
    and a long one's first, middle or last 12 characters (a cut message keeps part of it;
    pytest's assertion message keeps a long string's two ends)."""
    forms = {secret, json.dumps(secret)[1:-1], html.escape(secret),
             urllib.parse.quote(secret, safe="")}
    if len(secret) >= 24:
        forms |= {secret[:12], secret[len(secret) // 4: len(secret) // 4 + 12], secret[-12:]}
    return forms


def leaks(outputs: Mapping[str, str | bytes], secrets: Iterable[str]) -> list[str]:
    """`channel: secret` for each secret found in an output (empty: none leaked)."""
    found = []
    for channel, data in outputs.items():
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        for secret in secrets:
            if any(form in text for form in _forms(secret)):
                found.append(f"{channel}: {secret}")
    return found


def survivors_missing(text: str, survivors: Iterable[str] = SURVIVORS) -> list[str]:
    """The survivors not found in `text` (empty: every one is there)."""
    return [s for s in survivors if s not in text]
