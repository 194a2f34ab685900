"""Secret redaction: names, values, shapes, and structures."""

from __future__ import annotations

import pytest

from harness.redact import REDACTED, Redactor, is_secret_name


@pytest.mark.parametrize(
    ("name", "secret"),
    [("AWS_SECRET_ACCESS_KEY", True), ("AWS_SESSION_TOKEN", True), ("AWS_ACCESS_KEY_ID", True),
     ("HF_TOKEN", True), ("WANDB_API_KEY", True), ("DB_PASSWORD", True), ("GITHUB_PAT", True),
     ("MLFLOW_TRACKING_PASSWORD", True), ("MY_PRIVATE_KEY", True), ("NCCL_DEBUG", False),
     ("PATH", False), ("TOKENIZERS_PARALLELISM", False), ("NCCL_IB_PKEY", False),
     ("SSH_AUTH_SOCK", False), ("KEY", True)],
)
def test_secret_names(name, secret):
    assert is_secret_name(name) == secret


def test_known_values_are_redacted_anywhere():
    r = Redactor({"DB_PASSWORD": "correct-horse-battery", "PATH": "/usr/bin"})
    assert r.text("login with correct-horse-battery now") == f"login with {REDACTED} now"
    assert r.text("/usr/bin is fine") == "/usr/bin is fine"


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        ("key AKIAIOSFODNN7EXAMPLE used", "AKIAIOSFODNN7EXAMPLE"),
        ("token hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789 set", "hf_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"),
        ("https://alice:s3cretpw@mlflow.example.com/x", "s3cretpw"),
        ("AWS_SECRET_ACCESS_KEY=abcd1234", "abcd1234"),
        ('{"password": "pw-in-json"}', "pw-in-json"),
        ("export WANDB_API_KEY='abc123xyz'", "abc123xyz"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "MIIE"),
    ],
)
def test_secret_shapes_are_redacted_without_env(text, leak):
    out = Redactor({}).text(text)
    assert leak not in out and REDACTED in out


def test_harmless_text_is_unchanged():
    text = "NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 32 nics)"
    assert Redactor({}).text(text) == text


def test_env_and_nested_objects():
    env = {"HF_TOKEN": "hf_value_123456", "NCCL_DEBUG": "INFO"}
    r = Redactor(env)
    assert r.env(env) == {"HF_TOKEN": REDACTED, "NCCL_DEBUG": "INFO"}
    obj = {"checks": [{"message": "saw hf_value_123456"}], "HF_TOKEN": "x", "n": 3}
    assert r.obj(obj) == {"checks": [{"message": f"saw {REDACTED}"}], "HF_TOKEN": REDACTED, "n": 3}
