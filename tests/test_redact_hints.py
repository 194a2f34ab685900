"""redact_pairs tries its patterns only where a credential's name can be (name_hints): the same
result as trying every match (`hinted=False`, the code before the hints), on every recorded
sample under tests/data and tests/samples (as text and as the records `preflight inspect` reads
from them), on the bench's inputs, and on random text full of near-secret shapes; and each of
the hints' literals is needed (one removed, a secret gets through)."""

from __future__ import annotations

import importlib.util
import io
import json
import random
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.base import redact, redact_pairs
from harness.base.redact import Redactor
from harness.base.redact_pairs import (
    NAME_LITERALS,
    is_secret_flag,
    is_secret_name,
    name_hints,
)
from harness.base.redact_shapes import REDACTED
from harness.parsers import ParseError, inspect_kind
from harness.profiles.table import get_profile
from tests.test_parsers_env_equivalence import _generated

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
#: tests/data's folders and tests/samples' (named as the kind) by the kind that reads them.
_KINDS = {"dcgm": "dcgm", "env": "env", "fi_info": "fi-info", "kernel_log": "kernel-log",
          "kernel-log": "kernel-log", "nccl_log": "nccl-log", "nccl-log": "nccl-log",
          "nccl_tests": "nccl-tests", "nccl-tests": "nccl-tests", "nvidia_smi": "nvidia-smi",
          "nvidia-smi": "nvidia-smi", "topology": "topology", "train_step": "train-step"}


def _unhinted(text: str) -> str:
    return redact_pairs.redact_pairs(text, hinted=False)


def _both(fn: Callable[[], object], monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    """fn's result with the hints, and with every match tried (fresh Redactor memories each)."""
    redact._shared.cache_clear()
    hinted = fn()
    with monkeypatch.context() as patch:
        patch.setattr(redact, "redact_pairs", _unhinted)
        redact._shared.cache_clear()
        unhinted = fn()
    redact._shared.cache_clear()
    return hinted, unhinted


def _assert_same(texts: list[str]) -> None:
    differ = [t[:200] for t in texts
              if redact_pairs.redact_pairs(t) != redact_pairs.redact_pairs(t, hinted=False)]
    assert not differ, f"{len(differ)} of {len(texts)} differ, e.g. {differ[:3]}"


def _samples() -> Iterator[Path]:
    for folder in (TESTS / "data", TESTS / "samples"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and not path.name.endswith(".expect.json"):
                yield path


def test_every_recorded_sample_as_text() -> None:
    texts = [p.read_text(encoding="utf-8", errors="replace") for p in _samples()]
    assert len(texts) >= 350  # every sample is read (a folder moved would drop them silently)
    _assert_same(texts)
    _assert_same([line for t in texts for line in t.splitlines()])


def test_every_recorded_sample_as_inspect_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each sample of a kind `preflight inspect` reads, parsed and redacted as cmd_inspect does
    (the env reader redacts its own result)."""
    profile = get_profile("p5.48xlarge")
    read = 0
    for path in _samples():
        kind = _KINDS.get(path.relative_to(TESTS).parts[1])
        if kind is None:
            continue
        inspect = inspect_kind(kind)
        assert inspect is not None

        def run(inspect=inspect, path=path) -> object:  # type: ignore[no-untyped-def]
            text = path.read_text(encoding="utf-8", errors="replace")
            try:
                result = inspect(io.StringIO(text), profile=profile)
            except ParseError as exc:
                return str(exc)
            return result if getattr(inspect, "redacted", False) else Redactor({}).obj(result)

        hinted, unhinted = _both(run, monkeypatch)
        assert json.dumps(hinted, sort_keys=True) == json.dumps(unhinted, sort_keys=True), path
        read += not isinstance(hinted, str)
    assert read >= 300


def _bench_redact() -> object:
    spec = importlib.util.spec_from_file_location("bench_redact", ROOT / "bench/bench_redact.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_line_kinds' env scripts (repeated and distinct: the 1 MiB LD_LIBRARY_PATH they
    grow), inspected whole; bench_redact's environments and training log."""
    profile = get_profile("p5.48xlarge")
    inspect = inspect_kind("env")
    assert inspect is not None
    for text in _generated().values():
        hinted, unhinted = _both(lambda t=text: inspect(io.StringIO(t), profile=profile),
                                 monkeypatch)
        assert hinted == unhinted
        assert len(hinted["relevant"]["LD_LIBRARY_PATH"]) > 40_000  # type: ignore[index]
    bench = _bench_redact()
    rng = random.Random(7)
    for env in bench.environments(rng).values():  # type: ignore[attr-defined]
        hinted, unhinted = _both(lambda env=env: Redactor(env).env(env), monkeypatch)
        assert hinted == unhinted
    paths = bench.path_values(rng)  # type: ignore[attr-defined]
    _assert_same(list(paths.values()))
    assert [REDACTED in redact_pairs.redact_pairs(v) for v in paths.values()] == [False, True]
    log = bench.log_text(rng, 300_000)  # type: ignore[attr-defined]
    _assert_same([log, *log.splitlines()])
    assert REDACTED in redact_pairs.redact_pairs(log)


#: Near-secret shapes, and the characters between them.
_PIECES = (
    "TOKEN=", "token=", "HF_TOKEN=", "MAX_TOKENS=", "password: ", "PASSWORD = ", "db_pass=",
    "AWS_SECRET_ACCESS_KEY=", "aws_access_key_id=", "Authorization: Bearer ", "Authorization: ",
    "authorization:", "Proxy-Authorization: Digest ", "Basic dXNlcjpwYXNzd29yZA==",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl", "AKIAIOSFODNN7EXAMPLE",
    "https://user:pass@host/x", "https://ghp_abcdefghijklmnopqrstuvwxyz0123456789@github.com/o",
    "--hf-token ", "--api-key=", "-x NCCL_DEBUG=INFO ", "--password", "ENV DB_PASSWORD ",
    "setenv API_KEY ", '{"name": "HF_TOKEN", "value": "', "- name: GITHUB_PAT\n  value: ",
    '"name": "KEY", "value": ', "os.path", "PATH=", "MY_PAT=", "myPat=", "patH=", "PAtH=", "pAT", "KEY_PATH=",
    "PWD=", "MYSQL_PWD=", "wandbKey=", "GIT_AUTHOR_NAME=", "PRIVATE_IP=", "private_key: ",
    "COOKIE=", "SIGNATURE:", "CONNECTION_STRING=", "credentials = ", "paß=", "--paß ", "ſecret=",
    "İ", "\u212a", "ﬁ", "é", "\\\"", "&quot;", "pass", "key", "secret", "  ", "\n", "\t", " ", '"',
    "'", "=", ":", ",", ";", "-", "--", "_", "${", "}", "\\n", "x", "value", "abc123", "/usr/lib",
    "hf_abcdefghijklmnopqrstuvwxyz0123456789", "sk-proj-Ab3dEfGh1jKlMn0pQrStUvWx", "s3cr3t!",
)


def _near_secrets(rng: random.Random) -> str:
    text = "".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 40)))
    for _ in range(rng.randint(0, 4)):  # mutate: a character dropped, doubled or upper-cased
        if not text:
            break
        i = rng.randrange(len(text))
        text = rng.choice((text[:i] + text[i + 1:], text[:i] + text[i] + text[i:],
                           text[:i] + text[i].swapcase() + text[i + 1:]))
    return text


def test_random_near_secret_text() -> None:
    rng = random.Random(32)
    texts = [_near_secrets(rng) for _ in range(4000)]
    _assert_same(texts)
    assert sum(REDACTED in redact_pairs.redact_pairs(t) for t in texts) > 1000  # secrets in them


def test_an_empty_value_before_a_semicolon() -> None:
    """`TOKEN=;next` on a config line: nothing to redact (redact_pairs raised AttributeError)."""
    assert redact_pairs.redact_pairs("CONNECTION_STRING=;x") == "CONNECTION_STRING=;x"
    assert redact_pairs.redact_pairs("HF_TOKEN=;TOKEN=abc") == f"HF_TOKEN=;TOKEN={REDACTED}"


def test_long_values_with_a_secret_at_either_end() -> None:
    path = ":".join(f"/opt/lib{i}/os.path/key_dir" for i in range(20_000))  # hints, no secret
    texts = [path, f"HF_TOKEN=s3cr3tvalue:{path}", f"{path}:HF_TOKEN=s3cr3tvalue",
             f"{path}\npassword: two words", f"password: x {path}", f"{path} --hf-token abc",
             f"{path} myPat=abc", f"{path}İ TOKEN=abc", f"{path}\nENV DB_PASSWORD abc"]
    _assert_same(texts)
    assert redact_pairs.redact_pairs(path) == path
    assert all(REDACTED in redact_pairs.redact_pairs(t) for t in texts[1:])


def test_every_code_point_keeps_the_hints_whole() -> None:
    """What name_hints relies on: no character lower-cases to ASCII and upper-cases to ASCII
    (so a name that upper-cases to a credential's holds a literal or a non-ASCII character in
    the lower-cased text), and only `İ` changes length (then every match is tried)."""
    both_ascii, longer = [], []
    for c in map(chr, range(0x80, 0x110000)):
        low = c.lower()
        if len(low) != 1:
            longer.append(c)
        elif low.isascii() and any(ch.isascii() for ch in c.upper()):
            both_ascii.append(c)
    assert both_ascii == []
    assert longer == ["İ"]
    assert name_hints("İ TOKEN=x") is None
    assert redact_pairs.redact_pairs("İ TOKEN=abc") == f"İ TOKEN={REDACTED}"


#: For each literal, a credential's name that holds no other (and for a non-ASCII character,
#: one that upper-cases to a credential's).
_ONLY = {"secret": "MY_SECRET", "token": "HF_TOKEN", "pass": "DB_PASS",
         "credential": "GCP_CREDENTIALS", "key": "WANDB_KEY", "connection": "CONNECTION_STRING",
         "auth": "MY_AUTH", "cookie": "SESSION_COOKIE", "signature": "REQUEST_SIGNATURE",
         "private": "MY_PRIVATE", "pat": "GITHUB_PAT", "pwd": "MYSQL_PWD", "non-ascii": "paß"}


@pytest.mark.parametrize("literal", [*NAME_LITERALS, "non-ascii"])
def test_each_literal_is_needed(literal: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name = _ONLY[literal]
    assert is_secret_name(name) and is_secret_flag(name)
    assert [lit for lit in NAME_LITERALS if lit in name.lower()] == (
        [] if literal == "non-ascii" else [literal])
    texts = [f"--{name} s3cr3tvalue"]  # (the other patterns' names are ASCII)
    if name.isascii():
        texts += [f"{name}=s3cr3tvalue", f"  {name}: s3cr3tvalue", f"ENV {name} s3cr3tvalue",
                  f"echo {name}=s3cr3tvalue", f'{{"name": "{name}", "value": "s3cr3tvalue"}}']
    _assert_same(texts)
    assert all("s3cr3tvalue" not in redact_pairs.redact_pairs(t) for t in texts)
    # the hint without it: the secret gets through
    monkeypatch.setattr(redact_pairs, "_LITERALS", [lit for lit in NAME_LITERALS if lit != literal])
    if literal == "non-ascii":
        monkeypatch.setattr(redact_pairs, "_NON_ASCII", re.compile("(?!)"))  # never found
    assert all("s3cr3tvalue" in redact_pairs.redact_pairs(t) for t in texts)
    with pytest.raises(AssertionError):
        _assert_same(texts)


def test_pat_before_a_hump_is_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    """`pat` before a lower-case letter is no hint (`os.path`), but `myPatH` is MY_PAT_H."""
    texts = ["myPatH=s3cr3tvalue", "--patX s3cr3tvalue", "os.path PATH=x patH=s3cr3tvalue",
             "PAtH=s3cr3tvalue"]
    assert not is_secret_name("pAtH") and not is_secret_name("xpatH")  # (P_AT_H, XPAT_H)
    assert name_hints("os.path PATH=/usr/bin:/lib/compatible") == []
    _assert_same(texts)
    assert all("s3cr3tvalue" not in redact_pairs.redact_pairs(t) for t in texts)
    monkeypatch.setattr(redact_pairs, "_PAT_HUMP", re.compile("(?!)"))  # never found
    assert all("s3cr3tvalue" in redact_pairs.redact_pairs(t) for t in texts)


def test_every_name_that_is_a_credentials_holds_a_hint() -> None:
    """Random names from the credential patterns' parts, in every case and with every
    separator: each that is_secret_name or is_secret_flag takes holds a hint."""
    parts = ("SECRET", "TOKEN", "TOKENS", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL",
             "API", "KEY", "ACCESS", "ACCOUNT", "CONNECTION", "STRING", "AUTH", "AUTHOR",
             "COOKIE", "SESSION", "SIGNATURE", "PRIVATE", "IP", "PAT", "PATH", "PWD", "PASS",
             "FILE", "HF", "ß", "ſ", "ı", "x", "9")
    rng = random.Random(5)
    taken = 0
    for _ in range(20_000):
        words = [rng.choice(parts) for _ in range(rng.randint(1, 4))]
        words = [rng.choice((w, w.lower(), w.capitalize())) for w in words]
        name = rng.choice(("_", "-", "")).join(words)
        if is_secret_name(name) or is_secret_flag(name):
            taken += 1
            assert name_hints(name), name
    assert taken > 5000


def test_one_long_name_of_hints() -> None:
    """A run of hints is one name: found once, its characters read at most twice; dense hints
    (`key_key_...`) are not stepped through one by one: every match is tried."""
    sparse = "echo " + "key_abcdefghijklmnopqrstuvwxyz_abcdefghijk_" * 10_000 + "token=x "
    assert name_hints(sparse) is not None
    assert redact_pairs.redact_pairs(sparse) == sparse.replace("=x ", f"={REDACTED} ")
    _assert_same([sparse])
    text = "echo " + "key_" * 150_000 + "token=x " + "/os.path:" * 100_000
    assert name_hints(text) is None
    assert redact_pairs.redact_pairs(text) == text.replace("=x ", f"={REDACTED} ")
    _assert_same([text])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
