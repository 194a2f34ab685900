"""Every sample with a hand-read expectation, under tests/samples/ and tests/data/, against it
(data, not code), and the rule that every sample file has its source and its expectation.

A sample is two files: `X` (real output; its origin in a SOURCES.md / README.md of its folder
or tests/samples/SOURCES.md) and `X.expect.json` (`kind`: a `preflight inspect` kind, or for
files no inspect kind reads one of tests/sample_readers.py PROBE_READERS (a probe's parser);
`source`; `expect` {key: value or matcher}; `expect_paths` {dotted.path: value}, the value
`"<absent>"` meaning no such key; `profile`: the profile the kind judges against, `local-cpu`
unless named; `expect_new`: facts no key holds yet, not tested; `expect_parsed`: facts the
parser reads but `inspect` does not show, judged by the parser's own test module through
tests/expect_parsed.py). A matcher is
`{"any_contains": s}`, `{"none_contains": s}`, `{"count": n}` or `{"count_min": n}` (of a
list), or `{"contains": s}` (of a text). A fact the parsers do not meet yet is named in the
sample's own `gaps` {fact or "*": what it would take}: a strict xfail, so meeting it fails the
test until the gap is taken off. Files under tests/data whose expectation still lives in a test
module are listed, with that module, in tests/data/EXPECTATIONS_IN_CODE.json (the list only
shrinks).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.parsers import ParseError, inspect_kinds
from harness.profiles.table import get_profile
from tests.sample_readers import PROBE_READERS

TESTS = Path(__file__).parent
SAMPLES = TESTS / "samples"
DATA = TESTS / "data"
ROOTS = (SAMPLES, DATA)
#: A folder's notes, not samples.
NOTES = ("SOURCES.md", "README.md")
IN_CODE = DATA / "EXPECTATIONS_IN_CODE.json"


def _expectations() -> list[Path]:
    return sorted(p for root in ROOTS for p in root.rglob("*.expect.json"))


def _cases() -> list[Any]:
    """One case per sample for the facts it meets (one inspect, one pytest item: the suite's
    time), and one strict-xfail case per fact named in its `gaps`."""
    cases = []
    for exp in _expectations():
        spec = json.loads(exp.read_text(encoding="utf-8"))
        sample = exp.with_name(exp.name.removesuffix(".expect.json"))
        gaps = spec.get("gaps") or {}
        facts = [*spec.get("expect", {}).items(),
                 *((f"path:{k}", v) for k, v in (spec.get("expect_paths") or {}).items())]
        name, met = f"{sample.parent.name}/{sample.name}", []
        for fact, want in facts:
            key = fact.removeprefix("path:")
            gap = gaps.get(key) or gaps.get("*")
            if gap:
                cases.append(pytest.param(spec["kind"], sample, [(fact, want)], spec.get("profile"),
                                          marks=[pytest.mark.xfail(reason=gap, strict=True)],
                                          id=f"{name}:{key}"))
            else:
                met.append((fact, want))
        if met:
            cases.append(pytest.param(spec["kind"], sample, met, spec.get("profile"), id=name))
    return cases


_RESULTS: dict[Path, dict[str, Any] | None] = {}


def _inspect(kind: str, sample: Path, profile: str | None = None) -> dict[str, Any] | None:
    if sample not in _RESULTS and kind in PROBE_READERS:
        try:
            _RESULTS[sample] = PROBE_READERS[kind](sample)
        except (ValueError, OSError):
            _RESULTS[sample] = None
    if sample not in _RESULTS:
        with sample.open(encoding="utf-8", errors="replace", newline="") as fh:
            try:
                _RESULTS[sample] = inspect_kinds()[kind](
                    fh, profile=get_profile(profile or "local-cpu"))
            except ParseError:
                _RESULTS[sample] = None
    return _RESULTS[sample]


def _get(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return "<absent>"
    return obj


def _matches(want: Any, got: Any) -> bool:
    if isinstance(want, dict) and len(want) == 1:
        (op, arg), = want.items()
        texts = [json.dumps(i).lower() for i in got] if isinstance(got, list) else None
        if op == "contains":
            return isinstance(got, str) and arg in got
        if op == "any_contains":
            return texts is not None and any(arg.lower() in t for t in texts)
        if op == "none_contains":
            return texts is not None and not any(arg.lower() in t for t in texts)
        if op == "count":
            return texts is not None and len(texts) == arg
        if op == "count_min":
            return texts is not None and len(texts) >= arg
    if isinstance(want, float) and isinstance(got, int | float):
        return abs(want - got) <= 1e-6 * max(1.0, abs(want))
    return bool(want == got)


@pytest.mark.parametrize(("kind", "sample", "facts", "profile"), _cases())
def test_sample_facts(kind: str, sample: Path, facts: list[tuple[str, Any]], profile: str | None):
    result = _inspect(kind, sample, profile)
    assert result is not None, f"{sample.name}: nothing recognised"
    wrong = []
    for fact, want in facts:
        got = (_get(result, fact.removeprefix("path:")) if fact.startswith("path:")
               else result.get(fact, "<absent>"))
        if not _matches(want, got):
            wrong.append(f"{fact}: want {want!r}, got {got!r}")
    assert not wrong, "\n".join(wrong)


def _files(root: Path) -> list[Path]:
    """The sample files under `root`: not an expectation, not a folder's notes."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name not in NOTES
                  and not p.name.endswith(".expect.json") and p != IN_CODE)


def _notes(path: Path, root: Path) -> str:
    """The SOURCES.md / README.md texts of the folders from `path`'s up to `root`."""
    texts = []
    folder = path.parent
    while True:
        texts += [(folder / n).read_text(encoding="utf-8") for n in NOTES if (folder / n).is_file()]
        if folder == root:
            return "\n".join(texts)
        folder = folder.parent


def _in_code() -> dict[str, str]:
    """{file: the test module holding its expectation, or why no test reads the file}."""
    listed = json.loads(IN_CODE.read_text(encoding="utf-8"))
    return {**listed["files"], **listed["unread"]}


def missing(root: Path, in_code: dict[str, str]) -> tuple[list[str], list[str]]:
    """(files no SOURCES.md / README.md above them names, files with no X.expect.json beside
    them and not in `in_code`) under `root`."""
    no_source, no_expectation = [], []
    for path in _files(root):
        rel = path.relative_to(root).as_posix()
        notes = _notes(path, root)
        if path.name not in notes and rel not in notes:
            no_source.append(rel)
        if not path.with_name(path.name + ".expect.json").is_file() and rel not in in_code:
            no_expectation.append(rel)
    return no_source, no_expectation


@pytest.mark.parametrize("root", ROOTS, ids=lambda p: p.name)
def test_every_sample_file_has_a_source_and_an_expectation(root: Path):
    no_source, no_expectation = missing(root, _in_code() if root == DATA else {})
    assert not no_source, f"named in no SOURCES.md / README.md: {no_source}"
    assert not no_expectation, f"no X.expect.json beside: {no_expectation}"


def test_the_rule_catches_a_file_without_source_or_expectation(tmp_path: Path):
    (tmp_path / "kind").mkdir()
    (tmp_path / "kind" / "SOURCES.md").write_text("- `kind/listed.txt`: https://example.org\n")
    (tmp_path / "kind" / "listed.txt").write_text("x\n")
    (tmp_path / "kind" / "listed.txt.expect.json").write_text("{}")
    (tmp_path / "kind" / "stray.txt").write_text("y\n")
    assert missing(tmp_path, {}) == (["kind/stray.txt"], ["kind/stray.txt"])
    assert missing(tmp_path, {"kind/stray.txt": "tests/x.py"}) == (["kind/stray.txt"], [])


def test_expectations_in_code_only_shrink():
    """EXPECTATIONS_IN_CODE.json names files that exist and have no expect.json yet; under
    `files` each is read by the test module named, under `unread` by no test at all (a file a
    test starts reading needs its expectation); `why` says why no X.expect.json holds it."""
    listed = json.loads(IN_CODE.read_text(encoding="utf-8"))
    modules = {m: m.read_text(encoding="utf-8") for m in sorted(TESTS.rglob("*.py"))}
    for rel in _in_code():
        path = DATA / rel
        assert path.is_file(), f"{rel}: listed, but gone"
        assert not path.with_name(path.name + ".expect.json").is_file(), (
            f"{rel} has its expect.json now: take it off {IN_CODE.name}")
    assert set(listed["why"]) == set(_in_code()), "each listed file, and only those, has its `why`"
    for rel, where in listed["files"].items():
        module = TESTS.parent / where
        assert module in modules and Path(rel).name in modules[module], (rel, where)
    for rel in listed["unread"]:
        readers = [m.name for m, text in modules.items() if Path(rel).name in text]
        assert not readers, f"{rel} is read by {readers}: give it its X.expect.json"


def test_every_expectation_names_a_kind_a_source_and_its_sample():
    kinds = {*inspect_kinds(), *PROBE_READERS}
    for exp in _expectations():
        spec = json.loads(exp.read_text(encoding="utf-8"))
        sample = exp.with_name(exp.name.removesuffix(".expect.json"))
        assert spec["kind"] in kinds and spec["source"] and sample.is_file(), exp
        facts = spec.get("expect") or spec.get("expect_paths")
        assert facts or spec.get("rejects"), f"{exp}: nothing expected"
        assert not (facts and spec.get("rejects")), f"{exp}: facts of a rejected input"


def _rejections() -> list[Any]:
    cases = []
    for exp in _expectations():
        spec = json.loads(exp.read_text(encoding="utf-8"))
        if spec.get("rejects"):
            sample = exp.with_name(exp.name.removesuffix(".expect.json"))
            cases.append(pytest.param(spec["kind"], sample, spec["rejects"],
                                      id=f"{sample.parent.name}/{sample.name}"))
    return cases


@pytest.mark.parametrize(("kind", "sample", "message"), _rejections())
def test_sample_rejected(kind: str, sample: Path, message: str):
    """A sample whose X.expect.json has `rejects` (a text, instead of `expect`) is no output of
    its kind: inspect refuses it with a ParseError saying that text (the CLI then exits 2)."""
    with (sample.open(encoding="utf-8", errors="replace", newline="") as fh,
          pytest.raises(ParseError, match=re.escape(message))):
        inspect_kinds()[kind](fh, profile=get_profile("local-cpu"))
