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
     ("SSH_AUTH_SOCK", False), ("KEY", True), ("wandbKey", True), ("hfToken", True),
     ("numEFADevices", False)],
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
        # forms seen in real job environments and launch lines
        ("REDIS_URL=redis://:s3cretpass@cache:6379/0", "s3cretpass"),
        ("GIT_URL=https://github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123@github.com/o/r",
         "github_pat_11ABCDEFG"),
        ("curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig' url", "eyJhbGciOiJIUzI1NiJ9"),
        ('SM_USER_ARGS=["--wandb_api_key","0123456789abcdef0123456789abcdef01234567"]',
         "0123456789abcdef0123456789abcdef01234567"),
        ("python train.py --password hunter2hunter2 --lr 0.1", "hunter2hunter2"),
        ("AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abcDEF1+/==;",
         "abcDEF1+/=="),
        ('- name: WANDB_API_KEY\n  value: "0123456789abcdef0123456789abcdef01234567"',
         "0123456789abcdef0123456789abcdef01234567"),
        ('{"name": "HF_TOKEN", "value": "abcdefgh123"}', "abcdefgh123"),
        ('- { name: HF_TOKEN, value: "abcdefgh123" }', "abcdefgh123"),
        ("repo_url_or_path: https://test_token@github.com/aws/x.git", "test_token"),
        ("https://0123456789abcdef0123@gitlab.com/x", "0123456789abcdef0123"),
        ("  wandbKey: abc123secret", "abc123secret"),
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


@pytest.mark.parametrize(
    "text",
    ["NCCL_IB_PKEY=0x8001 NCCL_DEBUG=INFO", "- name: NCCL_DEBUG\n  value: INFO",
     "git clone ssh://git@github.com/o/r", "numEFADevices: 32", f"https://{REDACTED}@h/x",
     "mpirun -x NCCL_DEBUG=INFO --mca btl_tcp_if_exclude lo,docker0 ./all_reduce_perf -b 8"],
)
def test_harmless_pairs_and_flags_are_unchanged(text):
    assert Redactor({}).text(text) == text


def test_argv_redacts_the_word_after_a_secret_flag():
    argv = ["python", "t.py", "--hf-token", "abcdef123", "--lr", "0.1", "--password=xyz12345"]
    assert Redactor({}).argv(argv) == ["python", "t.py", "--hf-token", REDACTED, "--lr", "0.1",
                                       f"--password={REDACTED}"]


def test_env_dump_secrets_never_reach_inspect_output():
    """Every secret form of a pasted sbatch / manifest is gone from `preflight inspect env` JSON."""
    import io
    import json

    from harness.parsers.env import inspect_env
    from harness.profiles import get_profile

    secrets = {
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ==",
        "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH",
        "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
        "DB_PASSWORD": "correct-horse-battery",
        "NCCL_DEBUG_FILE": "https://alice:p4ssw0rd-in-url@logs.example.com/nccl.%h",
        "FI_PROVIDER": "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "NCCL_DEBUG": "hf_abcdefghijklmnopqrstuvwxyz0123456789",
    }
    script = "".join(f"export {k}='{v}' # set by the launcher\n" for k, v in secrets.items())
    out = json.dumps(inspect_env(io.StringIO(script), profile=get_profile("p5.48xlarge")))
    for value in (*secrets.values(), "p4ssw0rd-in-url"):
        assert value not in out, value
    assert "FI_PROVIDER" in out and REDACTED in out  # judged (harmful), with the value redacted
