"""The redactor as (input, expected) tables: every secret shape (tests/secret_canaries.py),
escaped and quoted values, `Authorization:` headers of every scheme, names that are and are
not credentials, and the text that must come out unchanged."""

from __future__ import annotations

import pytest
from secret_canaries import CANARIES, SURVIVORS, Canary

from harness.base.redact import Redactor
from harness.base.redact_pairs import is_secret_name
from harness.base.redact_shapes import REDACTED

R = REDACTED


@pytest.mark.parametrize("canary", CANARIES, ids=[c.shape for c in CANARIES])
def test_every_canary_shape_is_redacted_without_an_environment(canary: Canary) -> None:
    out = Redactor({}).text(f"before {canary.text} after")
    assert canary.secret not in out and REDACTED in out, out
    assert out.startswith("before ")


@pytest.mark.parametrize("text", SURVIVORS)
def test_survivors_are_unchanged(text: str) -> None:
    assert Redactor({}).text(text) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # JSON / YAML / INI values under credential keys: quoted, escaped, with spaces
        ('{"password": "a b c"}', f'{{"password": "{R}"}}'),
        ('{"password": "a \\"quoted\\" b", "n": 1}', f'{{"password": "{R}", "n": 1}}'),
        ('{\\"password\\": \\"a b\\"}', f'{{\\"password\\": \\"{R}\\"}}'),
        ('{\\\\\\"password\\\\\\": \\\\\\"a b\\\\\\"}', f'{{\\\\\\"password\\\\\\": \\\\\\"{R}\\\\\\"}}'),
        ("message=\"{&quot;password&quot;: &quot;a b&quot;}\"",
         f"message=\"{{&quot;password&quot;: &quot;{R}&quot;}}\""),
        ("api_key: two words", f"api_key: {R}"),
        ("  - token: two words  # from vault", f"  - token: {R}  # from vault"),
        ("client_secret = two words ; comment", f"client_secret = {R} ; comment"),
        ("password=two words", f"password={R}"),
        ("DB_PASSWORD=x python train.py", f"DB_PASSWORD={R} python train.py"),
        ("export DB_PASSWORD='a b'", f"export DB_PASSWORD='{R}'"),
        ("mysql://u:p@h/db?password=x&user=y", f"mysql://u:{R}@h/db?password={R}&user=y"),
        # Authorization headers: every scheme keeps its name, never its credential
        ("Authorization: Basic dXNlcjpwYXNz next", f"Authorization: {R} next"),
        ("Authorization: Bearer abc.def-ghi_jkl next", f"Authorization: {R} next"),
        ('Authorization: Digest username="u", response="r1" next',
         f"Authorization: Digest {R} next"),
        ("Authorization: AWS4-HMAC-SHA256 Credential=x/y, SignedHeaders=host, Signature=ab12 end",
         f"Authorization: AWS4-HMAC-SHA256 {R} end"),
        ("Authorization: Negotiate YIIGhgYJKoZIhvcSAQICAQBuggZ1MIIGcaADAgEF",
         f"Authorization: Negotiate {R}"),
        ("Authorization: Token t0ken", f"Authorization: Token {R}"),
        ("Authorization: nothing-but-a-token", f"Authorization: {R}"),
        ("Proxy-Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", f"Proxy-Authorization: {R}"),
        ("curl -H 'Authorization: Token abc' url", f"curl -H 'Authorization: Token {R}' url"),
        ('{"Authorization": "Basic dXNlcjpwYXNz"}', f'{{"Authorization": "{R}"}}'),
        ('-H "Authorization: Digest username=\\"u\\", response=\\"r\\"" url',
         f'-H "Authorization: Digest {R}" url'),
        ("MY_AUTH: Basic dXNlcjpwYXNz", f"MY_AUTH: {R}"),
        ("auth=Bearer sometoken12", f"auth={R}"),
        # AWS key ids, long-term and temporary, also inside identifiers
        ("AKIAIOSFODNN7EXAMPLE", R), ("id=ASIAIOSFODNN7EXAMPLE;", f"id={R};"),
        ("key_ASIAIOSFODNN7EXAMPLE", f"key_{R}"),
        # flags and command lines
        ('--password "a b" --lr 1', f'--password "{R}" --lr 1'),
        ('["--api-key", "a b", "--lr", "1"]', f'["--api-key", "{R}", "--lr", "1"]'),
    ],
)
def test_values_beside_secret_names(text: str, expected: str) -> None:
    assert Redactor({}).text(text) == expected


@pytest.mark.parametrize(
    "text",
    ["TOKENIZERS_PARALLELISM=false", "MAX_TOKENS=4096", "max_new_tokens: 512", "AUTHOR=alice",
     "GIT_AUTHOR_NAME=bob GIT_AUTHOR_EMAIL=b@example.com", "authority: https://login.example.com",
     "AWS_WEB_IDENTITY_TOKEN_FILE=/var/run/secrets/eks.amazonaws.com/serviceaccount/token",
     "token_path: /root/.cache/huggingface/token", "eos_token: </s>", "pad_token: <pad>",
     "private_ip: 10.0.0.7", "Basic information about Basic checks", "Bearer",
     "sk-learn-is-not-a-key-at-all", "NCCL_IB_PKEY=0x8001", "passed: 31 of 31",
     "File \"/opt/ml/code/train.py\", line 12", "AKIAIOSFODNN7EXAMPLEMORE (not 20 characters)",
     "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----",
     "ssh://git@github.com/o/r"],
)
def test_non_secrets_are_unchanged(text: str) -> None:
    assert Redactor({}).text(text) == text


@pytest.mark.parametrize(
    ("name", "secret"),
    [("MY_AUTH", True), ("BASIC_AUTH", True), ("AUTH_TOKEN", True), ("AUTHORIZATION", True),
     ("Proxy-Authorization", True), ("OAUTH_CLIENT_SECRET", True), ("X-Api-Key", True),
     ("AUTHOR", False), ("GIT_AUTHOR_NAME", False), ("AUTHORITY", False), ("AUTHORS", False),
     ("MAX_TOKENS", False), ("TOKENIZER", False), ("TOKENIZERS_PARALLELISM", False),
     ("EOS_TOKEN", False), ("TOKEN_COUNT", False), ("HF_TOKEN_PATH", False),
     ("AWS_SHARED_CREDENTIALS_FILE", False), ("PRIVATE_IP", False), ("privateDnsName", False),
     ("PRIVATE_KEY", True), ("SSH_AUTH_SOCK", False), ("AWS_SESSION_TOKEN", True),
     ("wandbKey", True)],
)
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) == secret


@pytest.mark.parametrize(
    ("value", "written"),
    [("pa\"ss w/rd", 'pa\\"ss w/rd'),  # JSON-escaped (results.jsonl, report.json)
     ("pa<ss>&word", "pa&lt;ss&gt;&amp;word"),  # XML-escaped (junit.xml)
     ("p@ss:w/rd!", "p%40ss%3Aw%2Frd%21")],  # percent-encoded (a URL)
)
def test_a_known_value_is_found_in_its_escaped_forms(value: str, written: str) -> None:
    r = Redactor({"DB_PASSWORD": value})
    assert r.text(f"saw {written} here") == f"saw {R} here"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("assert 'hf_CANARYenv...efghijklmnopq' == 'x'", f"assert '{R}' == 'x'"),  # pytest's form
     ("assert 'canary env ...h spaces' == 'x'", f"assert '{R}' == 'x'"),
     ("'canary env pass...' and 'canary ...x' and 'a...b' and 'canary'",
      f"'{R}' and '{R}x' and 'a...b' and 'canary'")],  # a head alone, cut: redacted too
)
def test_a_known_value_shortened_or_cut(text: str, expected: str) -> None:
    r = Redactor({"HF_TOKEN": "hf_CANARYenv0123456789abcdefghijklmnopq",
                  "DB_PASSWORD": "canary env pass with spaces"})
    assert r.text(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [("assert 'ghp_abcdefghijkl...uvwxyz0123' == 'x'", f"assert '{R}' == 'x'"),
     ("'AKIAIOSF...EXAMPLE'", f"'{R}'"), ("see the docs... later", "see the docs... later")],
)
def test_a_token_shortened_to_its_ends_by_its_shape(text: str, expected: str) -> None:
    assert Redactor({}).text(text) == expected


def test_argv_redacts_whole_assigned_values() -> None:
    argv = ["train.py", "--password=a b", "DB_PASSWORD=x y", "--lr=1", "--hf-token", "a b"]
    assert Redactor({}).argv(argv) == ["train.py", f"--password={R}", f"DB_PASSWORD={R}",
                                       "--lr=1", "--hf-token", R]


def test_redacting_twice_changes_nothing_and_is_remembered() -> None:
    r = Redactor({})
    once = r.text("Authorization: Digest username=\"u\", response=\"r\" next")
    assert r.text(once) == once
    assert Redactor.of({"HF_TOKEN": "hf_x" * 3}) is Redactor.of({"HF_TOKEN": "hf_x" * 3})


# Built to defeat a pattern: each took quadratic time in a form written before (see
# tests/test_redact.py's list; a hang detector, not a benchmark: bench/bench_redact.py).
@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "text",
    ['password="' * 25_000, 'password=\\"' * 25_000, "password=&quot;" * 20_000,
     "password: x\n" * 25_000, "Authorization: Basic " * 12_000,
     "Authorization: Digest " + "a=b, " * 60_000, "eyJ" * 80_000, "eyJaaaaaaaaa." * 20_000,
     "sk-" * 80_000, "ASIA" * 60_000, '--password "' * 20_000, "Basic AAAAAAAA" * 20_000,
     "  db_password = " + "x " * 120_000, "hf_CANARYenv...mnopq " * 20_000,
     "hf_CANA" * 40_000 + "..." * 10_000, "hf_ab..." * 30_000, "." * 250_000,
     ("a" * 127 + "...") * 2_000, "Bearer " * 30_000, "A" * 250_000],
    ids=["open-quotes", "escaped-quotes", "entity-quotes", "config-lines", "basic-headers",
         "digest-params", "jwt-heads", "jwt-dots", "sk", "asia", "flag-quotes", "basic-b64",
         "config-long", "shortened-values", "value-heads", "shortened-shapes", "dots",
         "runs-and-dots", "bearers", "capital-a"],
)
def test_new_patterns_stay_linear(text: str) -> None:
    assert isinstance(Redactor({}).text(text), str)
