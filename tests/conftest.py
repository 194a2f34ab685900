"""Fixtures for the harness's own tests."""

from __future__ import annotations

import json
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


def copy_check_file(pytester: pytest.Pytester, name: str) -> Path:
    """Copy checks/<name> into the pytester dir (so its fixtures can be overridden there)."""
    dest = pytester.path / name
    shutil.copy(REPO / "checks" / name, dest)
    return dest


def run_checks(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
    """Run a pytester session through the plugin; returns (result, results by check ID)."""
    results = pytester.path / "results.jsonl"
    results.unlink(missing_ok=True)
    res = pytester.runpytest_subprocess("-p", "harness.plugin", "-p", "no:cacheprovider",
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
