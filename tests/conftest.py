"""Fixtures for the harness's own tests."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester whose subprocess sessions can import the harness (installed or not)."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    return pytester


@pytest.fixture
def run_handoffs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[list[str]]:
    """`preflight run` in this process on a neutral environment (no NCCL_, FI_, PREFLIGHT_ or
    SM_ variable, no instance metadata, host `node-a`, cwd tmp_path); the hand-off is recorded
    in the list returned, not performed."""
    from harness.base import handoff

    for name in list(os.environ):
        if name.startswith(("NCCL_", "FI_", "PREFLIGHT_", "SM_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PREFLIGHT_OPT_ML", str(tmp_path / "opt_ml"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("PREFLIGHT_HOSTNAME", "node-a")
    monkeypatch.chdir(tmp_path)
    calls: list[list[str]] = []
    monkeypatch.setattr(handoff, "_execvp", lambda file, argv: calls.append(list(argv)))
    return calls


def copy_check_file(pytester: pytest.Pytester, name: str) -> Path:
    """Copy checks/<name> into the pytester dir (so its fixtures can be overridden there)."""
    dest = pytester.path / name
    shutil.copy(REPO / "checks" / name, dest)
    return dest


def facts_conftest(module: str, scenario: str, names: list[str]) -> str:
    """A conftest.py overriding the fact fixtures `names` with SCENARIOS[scenario] of `module`."""
    lines = ["import pytest", f"from {module} import SCENARIOS", "",
             f"FACTS = SCENARIOS[{scenario!r}]", "", "",
             "def _fact(name):",
             '    @pytest.fixture(scope="session", name=name)',
             "    def fixture():",
             "        return FACTS[name]",
             "    return fixture", "", ""]
    lines += [f"{name} = _fact({name!r})" for name in names]
    return "\n".join(lines) + "\n"


def run_check_file(pytester: pytest.Pytester, check_file: str, profile: str,
                   *args: str) -> dict[str, dict[str, Any]]:
    """Copy checks/<check_file> into the pytester dir and run it under the plugin with
    `profile`; {check ID: result record}."""
    copy_check_file(pytester, check_file)
    return run_checks(pytester, "--preflight-profile", profile, *args)[1]


def process_alive(pid: int) -> bool:
    """True while `pid` runs (a zombie has exited: only its parent has not reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def check_session(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytester.runpytest_subprocess as harness.run.runner starts a check session: the plugins it
    names (xdist, pytest-timeout) loaded by name, no other installed plugin autoloaded (this
    venv's hypothesis plugin alone costs ~1.8 s per session)."""
    from harness.run.runner import PLUGINS

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
        return pytester.runpytest_subprocess(*(a for n in PLUGINS for a in ("-p", n)), *args)


def run_checks(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run a pytester session through the plugin; returns (result, results by check ID)."""
    results = pytester.path / "results.jsonl"
    results.unlink(missing_ok=True)
    res = check_session(pytester, "-p", "harness.plugin", "-p", "no:cacheprovider",
                        f"--preflight-results={results}", *args)
    by_id: dict[str, Any] = {}
    if results.exists():
        for line in results.read_text().splitlines():
            record = json.loads(line)
            if record["event"] == "result":
                by_id[record["id"]] = record
    return res, by_id


# The moto server (S3, CloudWatch, SageMaker on loopback) for the reports/AWS tests.
from aws_server import aws_env, moto_endpoint  # noqa: E402, F401
