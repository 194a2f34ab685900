"""Emulated tools on PATH for probe tests: shell scripts that print recorded output, hang, crash
or print garbage, on a PATH that holds nothing else (no real nvidia-smi or dcgmi leaks in)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest


def make_tool(bin_dir: Path, name: str, body: str) -> Path:
    """Write `bin_dir/name` running `body` (sh); the script may use the system's own tools."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text("#!/bin/sh\nPATH=/usr/bin:/bin\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def empty_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make PATH one empty directory the test fills with emulated tools; that directory."""
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", str(path))
    return path
