"""The last screen of a failing run on a terminal (a real pty, 150 x 30): the causes, each with
its fix, root cause first, and the verdict last, below the table of what passed (issue 29: a
p5 run on a node that sees no GPU printed 512 lines, its last screen PASS rows, and "no GPU
visible" 37 times)."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import sys
import termios
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_progress_live import _run_on_a_pty

pytestmark = pytest.mark.timeout(400)
ROWS, COLS = 30, 150
#: A pass (PF-HOST-001), the GPU checks no GPU blocks, and a limit that fails on its own.
SELECT = "PF-HOST-001 or PF-GPU or PF-LINK or PF-HOST-004"


def _screen_lines(raw: bytes) -> list[str]:
    """The text a terminal keeps: escape codes dropped, each line as its last rewrite left it."""
    text = raw.decode(errors="replace").replace("\r\n", "\n")
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07", "", text)
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


def test_the_last_screen_is_the_causes_their_fixes_and_the_verdict(tmp_path: Path,
                                                                    monkeypatch) -> None:
    sysroot = tmp_path / "root"  # no /dev/nvidia*: no GPU visible, whatever this machine has
    (sysroot / "dev").mkdir(parents=True)
    for real in ("/proc", "/sys", "/dev/shm"):  # the rest as this machine has it
        (sysroot / real.lstrip("/")).symlink_to(real)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFLIGHT_", "NCCL_", "FI_", "SM_", "SLURM_", "OMPI_"))}
    env.update({"PYTHONPATH": str(REPO), "PREFLIGHT_HOSTNAME": "node-a", "TERM": "xterm",
                "COLUMNS": str(COLS), "LINES": str(ROWS), "AWS_EC2_METADATA_DISABLED": "true",
                "PREFLIGHT_SYSROOT": str(sysroot), "PATH": "/usr/bin:/bin"})
    argv = [sys.executable, "-m", "harness", "run", "--profile", "p5.48xlarge", "-k", SELECT,
            "--report-dir", str(tmp_path / "r")]
    real_openpty = os.openpty

    def sized_openpty() -> tuple[int, int]:
        main, sub = real_openpty()
        fcntl.ioctl(sub, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        return main, sub

    monkeypatch.setattr(os, "openpty", sized_openpty)  # pty.openpty calls os.openpty
    rc, out = _run_on_a_pty(argv, env, tmp_path)
    lines = _screen_lines(out)
    while lines and not lines[-1].strip():
        lines.pop()
    screen = lines[-ROWS:]
    shown = "\n".join(screen)
    assert rc == 1, shown
    assert screen[-1].startswith("report: ") and screen[-2].startswith("FAIL ("), shown
    assert "root cause first:" in shown, shown
    causes = shown[shown.index("root cause first:"):]  # below the table: causes, verdict
    assert re.search(r"✗ ERROR no NVIDIA GPU is visible.*\(PF-GPU-001\); blocked by it: \d+ "
                     r"checks: PF-GPU-002", causes), shown
    assert "fix: start the container with the NVIDIA runtime" in causes, shown
    assert shown.count("no NVIDIA GPU is visible") == 1, shown
    assert not re.search(r"│\s*PASS\s*│", causes), f"PASS rows after the causes:\n{shown}"
