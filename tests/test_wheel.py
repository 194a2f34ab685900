"""What ships: the wheel built from this checkout holds every file of the packages the runner
and the plugin read (a missing harness/run/checks.ini once made the installed gate pass with zero
checks), and installed non-editable in a fresh venv outside the checkout, `preflight run -- echo
ok` and `preflight list` work from another folder, the list equal to the checkout's.

The wheel is built once per session. The fresh venv takes the package from the wheel only; its
dependencies (pytest, torch, ...) come from this venv's site-packages through a .pth line, which
adds that folder to sys.path without running its .pth files (so this checkout's editable install
stays out). Installing the wheel with its dependencies from the index, on the lowest and the
highest pytest allowed, is CI's job (issue 12, item 10), not this focused test's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

#: The packages the wheel ships (pyproject.toml [tool.setuptools.packages.find]).
SHIPPED = ("harness", "checks")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                           str(out), str(REPO)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("gpu_preflight-*.whl")
    return built


def _package_files() -> list[str]:
    """Every file of the shipped packages in this checkout (git's list when there is one)."""
    proc = subprocess.run(["git", "ls-files", *SHIPPED], cwd=REPO, capture_output=True,
                          text=True)
    if proc.returncode == 0 and proc.stdout.strip():
        return [f for f in proc.stdout.split() if (REPO / f).exists()]
    return [p.relative_to(REPO).as_posix() for pkg in SHIPPED for p in (REPO / pkg).rglob("*")
            if p.is_file() and "__pycache__" not in p.parts]


def test_wheel_holds_every_file_the_runner_and_plugin_read(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        declared = zf.read(entry_points).decode()
    assert [f for f in _package_files() if f not in names] == []
    assert "harness/run/checks.ini" in names  # the runner passes it with -c
    if shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]):  # optional: where it can be
        assert _built_scan(wheel), "the NCCL log scan in C was not built"
    assert "preflight = harness.cli:entrypoint" in declared
    assert "[pytest11]\nharness.plugin = harness.plugin" in declared


@pytest.fixture(scope="session")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fresh") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=300)
    proc = subprocess.run([str(root / "bin" / "python"), "-m", "pip", "install", "-q",
                           "--no-deps", "--no-index", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = subprocess.run([str(root / "bin" / "python"), "-c",
                           "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "_preflight_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return root


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NCCL_", "FI_", "PREFLIGHT_", "SM_", "PYTEST_", "PYTHONPATH"))}
    env.update(AWS_EC2_METADATA_DISABLED="true", PREFLIGHT_HOSTNAME="fresh",
               PREFLIGHT_OPT_ML=str(tmp_path / "opt_ml"))
    return env


def _built_scan(wheel: Path) -> list[str]:
    """The NCCL log scan's compiled module in the wheel (optional: built where a compiler is)."""
    with zipfile.ZipFile(wheel) as zf:
        return [n for n in zf.namelist() if n.startswith("harness/parsers/_nccl_scan.")
                and n.endswith((".so", ".pyd"))]


def test_installed_wheel_runs_and_lists_like_the_checkout(wheel: Path, venv: Path,
                                                          tmp_path: Path) -> None:
    env = _env(tmp_path)
    where = subprocess.run([str(venv / "bin" / "python"), "-c",
                            "import harness, checks; print(harness.__file__, checks.__file__)\n"
                            "from harness.parsers import nccl_log_chunk as c\n"
                            "print(getattr(c._nccl_scan, '__file__', ''))"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert all(p.startswith(str(venv)) for p in where.stdout.split()), where.stdout
    assert len(where.stdout.split()) == (3 if _built_scan(wheel) else 2), where.stdout  # it loads

    run = subprocess.run([str(venv / "bin" / "preflight"), "run", "--report-dir", "r", "--",
                          "echo", "handed-off"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.rstrip().endswith("handed-off")
    assert f"suites: built-in ({venv}" in run.stdout
    report = json.loads((tmp_path / "r" / "fresh" / "report.json").read_text())
    assert report["verdict"] == "pass" and report["selection"]["selected"] > 40
    assert report["selection"]["reported"] == report["selection"]["selected"]

    listed = subprocess.run([str(venv / "bin" / "preflight"), "list"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300)
    here = subprocess.run([sys.executable, "-m", "harness", "list"], cwd=tmp_path,
                          env={**env, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert listed.returncode == here.returncode == 0, listed.stderr + here.stderr
    assert listed.stdout == here.stdout and "PF-ENV-001" in listed.stdout
