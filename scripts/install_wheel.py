#!/usr/bin/env python3
"""Install gpu-preflight the way it ships: build the wheel from a clean copy of the sources,
install it NON-editable into PYTHON's environment, and prove that what imports is the installed
copy. The one install path: CI's test venvs (scripts/test) and the container (Dockerfile).

    scripts/install_wheel.py PYTHON EXTRAS [PIP_INSTALL_OPTION ...]
    scripts/install_wheel.py .venv-shipped/bin/python aws,torch -c constraints.txt
    scripts/install_wheel.py python3 aws --no-cache-dir           # container/Dockerfile

EXTRAS is comma-separated (`aws`, `aws,torch`; empty for none). With $WHEEL_DIR the wheel is
built there, or taken from there when one is already built (CI builds once for two venvs).

"Clean copy": in a git checkout, the tracked and new (not ignored) files as they are in the
work tree; elsewhere (the container's build context) the tree minus caches. Never the source
folder itself: setuptools reuses a stale build/ folder and would ship files deleted since.
Stdlib only, so that it runs in a bare image.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent
#: Never copied into the build: caches and the outputs of an earlier build.
SKIP_DIRS = {"__pycache__", "build", "dist", ".git", ".venv"}
SKIP_SUFFIXES = (".pyc", ".egg-info", ".so")  # .so: a build of harness/parsers/_nccl_scan.c


def source_files(src: Path) -> list[Path]:
    """The files a wheel is built from, relative to `src`."""
    try:
        out = subprocess.run(
            ["git", "-C", str(src), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True, check=True).stdout.decode()
        names = [Path(n) for n in out.split("\0") if n]
    except (OSError, subprocess.CalledProcessError):
        names = [p.relative_to(src) for p in src.rglob("*")]
    keep = []
    for name in names:
        if any(part in SKIP_DIRS or part.endswith(SKIP_SUFFIXES) for part in name.parts):
            continue
        if (src / name).is_file():  # a tracked file deleted in the work tree is not shipped
            keep.append(name)
    return sorted(keep)


def build_wheel(python: str, out_dir: Path) -> Path:
    """Build the wheel from a clean copy of the sources into `out_dir`; its path."""
    found = sorted(glob.glob(str(out_dir / "gpu_preflight-*.whl")))
    if found:
        return Path(found[-1])
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-preflight-src-") as stage:
        for name in source_files(SRC):
            (Path(stage) / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(SRC / name, Path(stage) / name)
        subprocess.run([python, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out_dir),
                        stage], check=True)
    found = sorted(glob.glob(str(out_dir / "gpu_preflight-*.whl")))
    if len(found) != 1:
        raise SystemExit(f"install_wheel: expected one wheel in {out_dir}, found {found}")
    return Path(found[0])


def installed_location(python: str) -> Path:
    """Where `harness` imports from for `python`, asked from outside the sources."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([python, "-c", "import harness; print(harness.__file__)"], cwd="/",
                         env=env, capture_output=True, text=True, check=True).stdout
    return Path(out.strip()).resolve().parent


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    python, extras, pip_options = argv[0], argv[1], argv[2:]
    wheel_dir = os.environ.get("WHEEL_DIR")
    with tempfile.TemporaryDirectory(prefix="gpu-preflight-wheel-") as scratch:
        wheel = build_wheel(python, Path(wheel_dir) if wheel_dir else Path(scratch))
        target = f"{wheel}[{extras}]" if extras else str(wheel)
        subprocess.run([python, "-m", "pip", "install", "-q", *pip_options, target], check=True)
    where = installed_location(python)
    if where == (SRC / "harness").resolve():
        raise SystemExit(f"install_wheel: harness imports from the sources ({where}): the "
                         "install is editable or the sources are on sys.path")
    print(f"install_wheel: {wheel.name} installed at {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
