"""container/Dockerfile read as instructions (continuation lines joined, comments dropped): the
static checks of tests/test_container.py and the image the container-runtime tests build
(tests/e2e/container_image.py) read it the same way."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DOCKERFILE = Path(__file__).resolve().parent.parent / "container" / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    name: str
    args: str
    line: int

    def text(self) -> str:
        """The instruction as one Dockerfile line."""
        return f"{self.name} {self.args}"


def parse_dockerfile(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped (no heredocs used)."""
    result: list[Instruction] = []
    buf, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1].rstrip() + " "
            continue
        buf += line
        name, _, args = buf.partition(" ")
        result.append(Instruction(name.upper(), args.strip(), start))
        buf = ""
    assert not buf, f"unterminated continuation from line {start}"
    return result
