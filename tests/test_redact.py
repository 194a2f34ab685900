"""Secret redaction: names, values, shapes, and structures."""

from __future__ import annotations

import pytest

from harness.base.redact import Redactor
from harness.base.redact_pairs import is_secret_name
from harness.base.redact_shapes import REDACTED


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
    from harness.profiles.table import get_profile

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


# --- the working directory is not a secret; a secret is one whatever its length -------------

@pytest.mark.parametrize(("name", "secret"), [("PWD", False), ("OLDPWD", False), ("MYSQL_PWD", True),
                                              ("DB_PWD", True), ("pwd", True)])
def test_shell_working_directories_are_not_secret_names(name, secret):
    assert is_secret_name(name) == secret


def test_paths_under_the_working_directory_stay_readable():
    env = {"PWD": "/opt/ml/code", "OLDPWD": "/opt/ml", "HOME": "/root"}
    r = Redactor(env)
    trace = 'File "/opt/ml/code/train.py", line 12, in <module>\nPWD=/opt/ml/code OLDPWD=/opt/ml'
    assert r.text(trace) == trace
    assert r.env(env) == env


@pytest.mark.parametrize(
    "text",
    ["DB_PASSWORD=q9", "DB_PASSWORD: q9", "'DB_PASSWORD': 'q9'", '"DB_PASSWORD": "q9 z7"',
     'export DB_PASSWORD="q9 z7"', "export DB_PASSWORD='q9 z7'", "ENV DB_PASSWORD q9",
     "setenv DB_PASSWORD q9", "- name: DB_PASSWORD\n  value: q9",
     '{"name": "DB_PASSWORD", "value": "q9"}', "train.py --password q9", "train.py --api-key=q9",
     'CMD="python train.py DB_PASSWORD=q9 --lr 1"', "docker run --env=DB_PASSWORD=q9 img"],
)
def test_a_short_secret_never_appears_next_to_its_name(text):
    out = Redactor({"DB_PASSWORD": "q9"}).text(text)
    assert REDACTED in out
    assert "q9" not in out and "z7" not in out, out


def test_a_short_secret_is_not_searched_for_in_free_text():
    """Nothing that is not a secret is redacted: "ab" elsewhere in a log is not the password."""
    r = Redactor({"DB_PASSWORD": "ab"})
    assert r.text("table tab about") == "table tab about"


def test_obj_redacts_values_beside_secret_names_and_numbers_under_secret_keys():
    r = Redactor({})
    doc = {"env": [{"name": "HF_TOKEN", "value": "ab"}, {"name": "NCCL_DEBUG", "value": "INFO"},
                   {"Key": "DB_PASSWORD", "Value": 1234}],
           "password": 1234, "auth_enabled": True, "n": 3}
    assert r.obj(doc) == {"env": [{"name": "HF_TOKEN", "value": REDACTED},
                                  {"name": "NCCL_DEBUG", "value": "INFO"},
                                  {"Key": "DB_PASSWORD", "Value": REDACTED}],
                          "password": REDACTED, "auth_enabled": True, "n": 3}


def test_argv_redacts_short_values_of_secret_flags_and_assignments():
    argv = ["env", "HF_TOKEN=ab", "python", "t.py", "--token", "ab", "--lr", "1"]
    assert Redactor({}).argv(argv) == ["env", f"HF_TOKEN={REDACTED}", "python", "t.py", "--token",
                                       REDACTED, "--lr", "1"]


@pytest.mark.parametrize(
    "text",
    ["-----BEGIN RSA PRIVATE KEY-----\\nMIIEabc\\nQUJD\\n-----END RSA PRIVATE KEY-----",  # JSON-escaped
     "key: -----BEGIN PRIVATE KEY-----\nMIIEabc\nQUJD\n",  # cut short (no END line)
     "-----BEGIN OPENSSH PRIVATE KEY----- MIIEabc QUJD -----END OPENSSH PRIVATE KEY-----"],
)
def test_private_keys_in_every_form(text):
    out = Redactor({}).text(text)
    assert "MIIEabc" not in out and "QUJD" not in out, out


# --- linear in the input ---------------------------------------------------------------------
# Each of these took minutes or more before the patterns were anchored (the URL pattern retried a
# run of letters at each of its characters; `a=a=a=` rescanned its value at every `=`). The
# bound is a hang detector, 100x what linear code needs on a loaded machine, not a benchmark
# (bench/bench_redact.py measures).

@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "text",
    ["a" * 250_000, "a." * 125_000, "a=" * 125_000, 'a="' * 80_000, "x://" * 60_000,
     "x://u:" * 40_000, "name: a" + " " * 250_000 + "x", "-----BEGIN RSA PRIVATE KEY-----" * 8_000,
     "--a " * 60_000, "0123456789abcdef" * 16_000],
    ids=["letters", "dotted", "assignments", "open-quotes", "schemes", "url-users", "spaces",
         "pem-headers", "flags", "hex"],
)
def test_long_adversarial_lines_are_redacted_in_linear_time(text):
    assert isinstance(Redactor({}).text(text), str)


@pytest.mark.timeout(120)
def test_three_large_sagemaker_values_are_redacted_quickly():
    env = {"SM_TRAINING_ENV": "a" * 120_000, "SM_HPS": "b" * 120_000,
           "SM_USER_ARGS": "0123456789abcdef" * 7_500, "HF_TOKEN": "hf_" + "x" * 34}
    out = Redactor(env).env(env)
    assert out["HF_TOKEN"] == REDACTED and out["SM_HPS"] == env["SM_HPS"]


def test_a_reports_pass_count_is_not_a_password() -> None:
    from harness.base.redact import Redactor

    data = {"counts": {"pass": 31, "warn": 1, "fail": 0}, "config": {"pass": "hunter2hunter2"},
            "PASS": "s3cr3tvalue", "pin": {"pass": 1234}}
    out = Redactor({}).obj(data)
    assert out["counts"] == {"pass": 31, "warn": 1, "fail": 0}
    assert out["config"]["pass"] == REDACTED and out["PASS"] == REDACTED
    assert out["pin"]["pass"] == REDACTED  # a numeric password outside a report's counts


def test_an_empty_key_beside_a_value_is_no_name_and_no_crash() -> None:
    """`{"": "HF_TOKEN", "value": ...}`: the empty key names nothing (the look-up fell back to
    it and raised KeyError: 'name'); a real name/value entry beside it is still redacted."""
    r = Redactor()
    assert r.obj({"": "HF_TOKEN", "value": "x"}) == {"": "HF_TOKEN", "value": "x"}
    shown = r.obj([{"": "HF_TOKEN", "value": "x"}, {"name": "HF_TOKEN", "value": "hf_" + "a" * 30}])
    assert shown[1]["value"] != "hf_" + "a" * 30
