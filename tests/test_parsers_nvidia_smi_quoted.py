"""`nvidia-smi -q` sections as people paste them (issue 32): each line commented out (`# `, `//`,
`> `) in a script or a doc, and a Fabric section's `State` / `Status` pair without its `Fabric`
header line. Every recorded `-q` sample (full dumps and fragments, tests/data/nvidia_smi and
tests/samples/nvidia-smi, sources in their SOURCES.md) is read quoted as it is bare, also
under each wrapper a launcher or log shipper puts around every line, on either side of the
quote marker."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from harness.parsers.nvidia_smi import inspect_nvidia_smi
from harness.profiles.table import get_profile
from tests.test_samples_wrapped import WRAPPERS
from tests.test_samples_wrapped import _inspect as inspect_sample

DATA = Path(__file__).parent / "data" / "nvidia_smi"
SAMPLES = Path(__file__).parent / "samples" / "nvidia-smi"
#: Every recorded `nvidia-smi -q` text sample (whole dumps, `-d` sections, fragments).
Q_SAMPLES = sorted([*DATA.glob("*q-*.txt"), *SAMPLES.glob("real_q-*.txt"),
                    *SAMPLES.glob("real_fragment_*.txt")])
QUOTES = {"hash": "# ", "hash-tight": "#", "slashes": "// ", "markdown": "> "}
#: The real Fabric-only fragment (a GPTQ project's notes, Lambda Labs H100 VM, driver
#: 570.195.03; tests/data/nvidia_smi/SOURCES.md).
IN_PROGRESS = DATA / "real_q-frag-570-h100-fabric-in-progress.txt"
R580 = DATA / "real_q-frag-580-fabric-in-progress-health-na.txt"
COMPLETED_ERROR = DATA / "q-frag-fabric-completed-error-constructed.txt"


def _inspect(text: str, profile: str = "p5.48xlarge") -> dict[str, Any]:
    return inspect_sample("nvidia-smi", text, profile)


def _profile(sample: Path) -> str:
    spec = Path(f"{sample}.expect.json")
    return json.loads(spec.read_text())["profile"] if spec.exists() and "profile" in json.loads(
        spec.read_text()) else "p5.48xlarge"


def _quote(text: str, marker: str) -> str:
    return "".join((marker + line).rstrip() + "\n" for line in text.splitlines())


def test_the_samples_are_there():
    assert len(Q_SAMPLES) >= 18 and IN_PROGRESS in Q_SAMPLES


@pytest.mark.parametrize("quote", QUOTES)
def test_a_quoted_q_sample_reads_as_the_bare_one(quote: str):
    wrong = []
    for sample in Q_SAMPLES:
        text = sample.read_text(encoding="utf-8", errors="replace")
        bare = _inspect(text, _profile(sample))
        assert "error" not in bare, (sample.name, bare)
        got = _inspect(_quote(text, QUOTES[quote]), _profile(sample))
        if got != bare:
            wrong.append((sample.name, got.get("error") or [k for k in bare if got.get(k) != bare[k]]))
    assert not wrong, wrong


@pytest.mark.parametrize("wrapper", WRAPPERS)
@pytest.mark.parametrize("quote", ["hash", "slashes"])
def test_a_quoted_sample_under_a_wrapper_reads_as_the_bare_one(quote: str, wrapper: str):
    """The wrapper outside the quote (a shipped log of a script that echoes its comments) and
    inside it (a `kubectl logs` copy commented out into a doc)."""
    wrap, marker = WRAPPERS[wrapper], QUOTES[quote]
    for sample in (IN_PROGRESS, DATA / "real_q-565-h100-sxm.txt", COMPLETED_ERROR):
        text = sample.read_text(encoding="utf-8")
        bare = _inspect(text)
        for lines in ([wrap(marker + line) for line in text.splitlines()],
                      [marker + wrap(line) for line in text.splitlines()]):
            got = _inspect("".join(line + "\n" for line in lines))
            for key in ("hosts_seen", "ranks_seen"):
                got.pop(key, None)
            assert got == bare, (sample.name, got.get("error"))


def test_quoted_fabric_fragment_is_judged_not_the_csv_error():
    """The issue's case: the `Fabric` section commented out was refused as a CSV whose header
    is the prompt line."""
    got = _inspect(_quote(IN_PROGRESS.read_text(), "# "))
    assert "error" not in got and got["fragment"] is True
    assert got["sections_present"] == ["fabric"]
    assert [p["what"].split(":")[0] for p in got["problems"]] == ["fabric state In Progress"]
    assert got["commands_seen"] == ['nvidia-smi -q | grep -A5 "Fabric"']


def test_a_table_line_quoted_with_a_hash_is_still_read_by_other_kinds_as_before():
    """The comment rule is nvidia-smi's only: nccl-tests' own `#` lines stay as they are."""
    from harness.parsers.unwrap import Unwrapper

    assert Unwrapper().unwrap("#  nThread 1 nGpus 1") == "#  nThread 1 nGpus 1"
    assert Unwrapper(comments=True).unwrap("#  nThread 1 nGpus 1") == " nThread 1 nGpus 1"


def _headerless(sample: Path) -> str:
    return "".join(line + "\n" for line in sample.read_text().splitlines()
                   if line.strip() != "Fabric")


@pytest.mark.parametrize("sample,state,status,problem", [
    (IN_PROGRESS, "In Progress", None, "fabric state In Progress"),
    (R580, "In Progress", None, "fabric state In Progress"),
    (COMPLETED_ERROR, "Completed", "Unknown Error", "fabric state Completed with status Unknown Error"),
])
def test_a_state_status_pair_without_its_fabric_header_is_the_fabric_state(
        sample: Path, state: str, status: str | None, problem: str):
    from harness.parsers.nvidia_smi import parse_nvidia_smi

    text = _headerless(sample)
    assert all(line.strip() != "Fabric" for line in text.splitlines())
    gpu = parse_nvidia_smi(text).gpus[0]
    assert (gpu.fabric_state, gpu.fabric_status) == (state, status)
    out = inspect_nvidia_smi(io.StringIO(text), profile=get_profile("p5.48xlarge"))
    assert [p["what"].split(":")[0] for p in out["problems"]] == [problem]
    assert out["sections_present"] == ["fabric"] and "without their `Fabric` header" in out["notes"][0]
    # the same under every wrapper and quote
    for wrap in WRAPPERS.values():
        for marker in QUOTES.values():
            got = _inspect("".join(wrap(marker + line) + "\n" for line in text.splitlines()))
            got.pop("hosts_seen", None)
            got.pop("ranks_seen", None)
            out.pop("notes", None)
            assert got == out, (sample.name, got.get("error"))


def test_the_bare_pair_the_issue_names():
    text = ("        State                             : Completed\n"
            "        Status                            : Failure\n")
    got = _inspect(text)
    assert got["gpus"][0]["requires_reset"] is None
    assert [p["what"].split(":")[0] for p in got["problems"]] == [
        "fabric state Completed with status Failure"]


@pytest.mark.parametrize("text,said,missing", [
    # no State line: the status alone does not say which section it is
    ("        Status                            : Failure\n", "`Status : Failure`",
     "there is no `State` line"),
    # a state no fabric has: not read as one
    ("State : N/A\nStatus : N/A\n", "`State : N/A` / `Status : N/A`", "`N/A` is not a fabric state"),
    ("State : Running\n", "`State : Running`", "`Running` is not a fabric state"),
])
def test_an_ambiguous_pair_is_refused_saying_what_it_is_and_what_is_missing(
        text: str, said: str, missing: str):
    got = _inspect(text)
    assert said in got["error"] and missing in got["error"]
    assert "`Fabric` header line" in got["error"] and "CSV" not in got["error"]


def test_removing_the_state_line_turns_the_pair_into_a_refusal():
    """The test that can fail: without the State line the Status alone is not read as healthy
    or as anything."""
    text = "".join(line + "\n" for line in _headerless(COMPLETED_ERROR).splitlines()
                   if "State" not in line)
    assert "error" in _inspect(text)
