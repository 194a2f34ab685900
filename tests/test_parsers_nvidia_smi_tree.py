"""The `nvidia-smi -q` tree reader's deferring (harness.parsers.nvidia_smi_tree: each GPU's last
section read at the end, replaced ones only for the section names they may add) reads what
reading every line as it comes reads: on the recorded `-q` samples and on `-q -l`-like loops
built from them, cut into batches of every size, with the sections of a GPU differing from one
repeat to the next, blanks other than space and tab arriving mid-section, GPU headers indented,
and more GPUs than are kept."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from harness.parsers import nvidia_smi_tree
from harness.parsers.nvidia_smi_common import Side
from harness.parsers.nvidia_smi_tree import Tree

DATA = Path(__file__).parent / "data" / "nvidia_smi"
SAMPLES = Path(__file__).parent / "samples" / "nvidia-smi"
Q = sorted(p for p in [*DATA.glob("*q-*.txt"), *SAMPLES.glob("real_q-*.txt")]
           if "frag" not in p.name)
FULL = DATA / "real_q-565-h100-sxm.txt"


def _read(lines: list[str], size: int, *, live: bool) -> tuple[object, ...]:
    side = Side()
    tree = Tree(side)
    tree.live = live
    for i in range(0, len(lines), size):
        tree.feed(lines[i:i + size])
    top, blocks = tree.finish()
    return (top, [(b.bus_id, b.values) for b in blocks], dict(side.sections),
            dict(side.bus_index), side.omitted)


def _same(text: str, sizes: tuple[int, ...] = (1, 7, 64, 100_000)) -> list[str]:
    lines = text.split("\n")
    want = _read(lines, len(lines) or 1, live=True)
    return [f"batches of {size}" for size in sizes if _read(lines, size, live=False) != want]


def _loop(sections: list[str], buses: list[str]) -> str:
    """A `-q -l` loop: the sample's GPU section printed again for each bus, in turn."""
    out = []
    for i, section in enumerate(sections):
        out.append(section.replace("GPU 00000000:18:00.0", f"GPU {buses[i % len(buses)]}"))
    return "\n".join(out)


@pytest.mark.parametrize("sample", Q, ids=lambda p: p.name)
def test_each_sample_reads_as_line_by_line(sample: Path):
    text = sample.read_text(encoding="utf-8", errors="replace")
    assert not _same(text)
    assert not _same(text + "\n" + text)  # printed twice: the second replaces the first


def _without(text: str, *names: str) -> str:
    for name in names:
        assert f"    {name}\n" in text
        text = text.replace(f"    {name}\n", f"    {name}z\n")
    return text


def test_a_loop_whose_sections_differ_keeps_every_section_name():
    full = FULL.read_text()
    # only the first print has Retired Pages, only the second Fabric, the last neither
    first = _without(full, "Fabric")
    second = _without(full, "Retired Pages")
    last = _without(full, "Retired Pages", "Fabric")
    text = _loop([first, second, last, last], ["00000000:18:00.0"])
    assert not _same(text)
    sections = _read(text.split("\n"), 64, live=False)[2]
    assert "retired pages" in sections and "fabric" in sections


def test_a_loop_over_several_gpus_with_commands_and_indented_headers():
    full = FULL.read_text()
    buses = ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"]
    text = _loop([full] * 7, buses)
    indented = "\n".join("    " + line if line else line for line in text.split("\n"))
    assert not _same(text) and not _same(indented)
    assert len(_read(text.split("\n"), 50, live=False)[1]) == 3


def test_odd_blanks_mid_section_switch_to_line_by_line():
    full = FULL.read_text()
    lines = _loop([full] * 3, ["00000000:18:00.0", "00000000:2A:00.0"]).split("\n")
    for at in (5, len(lines) // 2, len(lines) - 3):
        odd = [*lines[:at], "        Odd Key\x0b : 1", "\x0c", *lines[at:]]
        assert not _same("\n".join(odd)), at


def test_more_gpus_than_kept(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(nvidia_smi_tree, "MAX_GPUS", 2)
    full = FULL.read_text()
    text = _loop([full] * 5, ["00000000:18:00.0", "00000000:2A:00.0", "00000000:3A:00.0"])
    assert not _same(text)
    assert _read(text.split("\n"), 64, live=False)[4] == 1


def test_random_cuts_of_a_random_loop():
    """Sections cut at random lines (a paste cut short, a line lost) and shuffled."""
    rng = random.Random(32)
    full = FULL.read_text().split("\n")
    for _ in range(20):
        parts = []
        for _ in range(rng.randint(1, 6)):
            start = rng.randrange(len(full))
            parts += full[start:start + rng.randint(1, len(full))]
        assert not _same("\n".join(parts), (1, 13, 200)), parts[:3]


def test_the_comparison_can_fail():
    """Reading only each GPU's last section, names and all, differs from the line reader where
    an earlier section had a section name the last one lacks."""
    full = FULL.read_text()
    lines = _loop([full, _without(full, "Retired Pages")], ["00000000:18:00.0"]).split("\n")
    side = Side()
    tree = Tree(side)
    tree._replaced = lambda base, text: None  # type: ignore[method-assign]  (the check undone)
    tree.feed(lines)
    tree.finish()
    assert "retired pages" not in side.sections
    assert "retired pages" in _read(lines, 64, live=True)[2]
