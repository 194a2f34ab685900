"""The product as users install it: the wheel (scripts/install_wheel.py), non-editable, in a fresh
venv outside the checkout, on the lowest or the highest pytest the dependency range allows.

scripts/test builds both venvs (`prepare DIR`, always fresh in CI; `cached` elsewhere) and
hands one at a time to the end-to-end tests in $PREFLIGHT_SHIPPED_VENV. Without it (a
developer's plain `pytest`) the tests take the `high` one of `ensure_venvs`: built under
~/.cache, keyed by a hash of everything that goes into it, so they never skip and a second run
reuses it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
INSTALL_WHEEL = REPO / "scripts" / "install_wheel.py"
#: The lower ends of pyproject's pytest / pytest-xdist / pytest-timeout ranges, pinned.
LOWEST = Path(__file__).resolve().parent / "lowest-pytest.txt"
#: Extras of the test venvs: torch for the local-cpu main job (gloo, FSDP on CPU), aws (boto3).
EXTRAS = "torch,aws"
FLAVOURS = ("high", "low")
VENV_ENV = "PREFLIGHT_SHIPPED_VENV"


@dataclass(frozen=True)
class Shipped:
    """One installed venv: its python, its bin/ and the `preflight` console script."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> Path:
        return self.bin / "python"

    @property
    def preflight(self) -> Path:
        return self.bin / "preflight"

    def site_packages(self) -> Path:
        out = subprocess.run([str(self.python), "-c", "import sysconfig; "
                              "print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True, cwd="/")
        return Path(out.stdout.strip()).resolve()

    def version_of(self, dist: str) -> str:
        out = subprocess.run([str(self.python), "-c", "import importlib.metadata as m, sys; "
                              "print(m.version(sys.argv[1]))", dist],
                             capture_output=True, text=True, check=True, cwd="/")
        return out.stdout.strip()


def _pip_options(flavour: str) -> list[str]:
    options = ["-c", str(REPO / "constraints.txt")]
    if flavour == "low":
        options += ["-c", str(LOWEST)]
    return options


def install(targets: dict[str, Path], wheel_dir: Path) -> dict[str, Shipped]:
    """Fresh venvs (flavour -> folder), the wheel installed in each the way it ships
    (scripts/install_wheel.py): the wheel is built once, then the venvs are filled at once
    (pip mostly unpacks torch: two at a time take little more than one)."""
    unknown = set(targets) - set(FLAVOURS)
    if unknown:
        raise ValueError(f"flavours {sorted(unknown)} are not among {FLAVOURS}")
    _install_wheel_module().build_wheel(sys.executable, wheel_dir)
    env = {**os.environ, "WHEEL_DIR": str(wheel_dir)}
    env.pop("PYTHONPATH", None)
    running = []
    for flavour, venv in targets.items():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        running.append((flavour, subprocess.Popen(
            [python, str(INSTALL_WHEEL), python, EXTRAS, *_pip_options(flavour)],
            env=env, cwd=venv, stdout=sys.stderr.fileno())))  # stdout: the folder, for scripts
    failed = [flavour for flavour, proc in running if proc.wait() != 0]
    if failed:
        raise RuntimeError(f"installing the wheel failed for {failed} (output above)")
    return {flavour: Shipped(venv) for flavour, venv in targets.items()}


#: Folders whose files do not go into the venv (the rest of the sources do, or may).
NOT_SHIPPED = ("tests", "docs", "bench", ".ci", "container")


def _install_wheel_module() -> ModuleType:
    """scripts/install_wheel.py as a module (scripts/ is no package: it is run as a command)."""
    spec = importlib.util.spec_from_file_location("install_wheel", INSTALL_WHEEL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def source_digest() -> str:
    """Hash of what a venv is built from: the files install_wheel builds the wheel of (tests,
    docs, bench, CI and container files aside), the lowest pins and this Python."""
    files = [n for n in _install_wheel_module().source_files(REPO)
             if n.parts[0] not in NOT_SHIPPED]
    digest = hashlib.sha256(sys.version.encode())
    for path in [*(REPO / n for n in files), LOWEST]:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


#: A cached venv pair unused this long is removed when another is built, s.
STALE_S = 24 * 3600


def cache_root() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpu-preflight-tests"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One builder at a time (xdist workers share the cache); fcntl: stdlib, no extra dep."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_venvs() -> dict[str, Shipped]:
    """The cached venvs for the current sources (built on first use; older ones removed)."""
    root = cache_root()
    key = source_digest()
    targets = {flavour: root / key / flavour for flavour in FLAVOURS}
    with _locked(root / "lock"):
        if not all((t / ".complete").exists() for t in targets.values()):
            # Other checkouts (worktrees, a run in progress) may be using theirs: only venvs
            # unused for a day go.
            for old in root.iterdir():
                if old.is_dir() and old.name != key and time.time() - old.stat().st_mtime > STALE_S:
                    shutil.rmtree(old, ignore_errors=True)
            install(targets, root / key / "wheel")
            for target in targets.values():
                (target / ".complete").write_text(key)
        os.utime(root / key)  # in use: not stale
    return {flavour: Shipped(target) for flavour, target in targets.items()}


def from_environment() -> Shipped | None:
    """The venv scripts/test built, when it handed one over."""
    value = os.environ.get(VENV_ENV)
    return Shipped(Path(value)) if value else None


def _describe(shipped: Shipped, flavour: str) -> str:
    versions = ", ".join(f"{d} {shipped.version_of(d)}"
                         for d in ("pytest", "pytest-xdist", "pytest-timeout"))
    return f"shipped {flavour}: {shipped.root} ({versions})"


def main(argv: list[str]) -> int:
    """`prepare DIR`: fresh venvs DIR/high and DIR/low from one wheel (CI). `cached`: the cached
    ones for the current sources (built when missing). Prints the folder holding both."""
    if argv[:1] == ["prepare"] and len(argv) == 2:
        out = Path(argv[1]).resolve()
        venvs = install({flavour: out / flavour for flavour in FLAVOURS}, out / "wheel")
    elif argv == ["cached"]:
        venvs = ensure_venvs()
    else:
        print("usage: python -m tests.e2e.shipped prepare DIR | cached", file=sys.stderr)
        return 2
    for flavour, shipped in venvs.items():
        print(_describe(shipped, flavour), file=sys.stderr, flush=True)
    print(venvs["high"].root.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
