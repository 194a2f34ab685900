"""The pytest11 entry point: the installed checks run under plain pytest, an unrelated pytest
project in the same environment is unaffected, and this project's own sessions (root conftest
`pytest_plugins`, `-p harness.plugin` in addopts) register the plugin once."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.fixture(autouse=True)
def _entry_point_installed() -> None:
    names = [ep.name for ep in importlib.metadata.entry_points(group="pytest11")]
    assert "harness.plugin" in names, "the pytest11 entry point is not installed (pip install -e .)"


@pytest.fixture
def neutral_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith(("NCCL_", "FI_", "PREFLIGHT_", "SM_", "PYTEST_ADDOPTS")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


UNRELATED = '''
import pytest

def test_uses_its_own_host_fixture(host):
    assert host == "mine"

def test_asks_for_a_fixture_nobody_defines(gpu_inventory):
    pass

def test_plain():
    assert 1 + 1 == 2
'''


def test_inert_in_an_unrelated_project(pytester: pytest.Pytester, neutral_env: None) -> None:
    pytester.makeconftest('import pytest\n\n@pytest.fixture\ndef host():\n    return "mine"\n')
    pytester.makepyfile(test_app=UNRELATED)
    pytester.makeini("[pytest]\naddopts = --strict-markers\n")
    runs = {}
    for label, args in (("installed", ()), ("without", ("-p", "no:harness.plugin"))):
        res = pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)
        res.assert_outcomes(passed=2, errors=1)  # no gpu-preflight fixture leaks in
        res.stdout.fnmatch_lines(["*fixture 'gpu_inventory' not found*"])
        assert "profile" not in res.stdout.str()  # no gpu-preflight header (pytest's plugin
        # list names the installed distribution, which is all it may show)
        runs[label] = res
    left = {p.name for p in pytester.path.iterdir() if not p.name.startswith(("runpytest", "std"))}
    assert left == {"conftest.py", "test_app.py", "tox.ini"}  # no results file, no report
    markers = pytester.runpytest_subprocess("--markers").stdout.str()
    assert "certify" not in markers and "preflight_check" not in markers


def test_installed_checks_run_under_plain_pytest(pytester: pytest.Pytester,
                                                 neutral_env: None) -> None:
    res = pytester.runpytest_subprocess("--pyargs", "checks", "-k", "PF-ENV-001 or PF-ENV-004",
                                        "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
    res = pytester.runpytest_subprocess("--pyargs", "checks.test_env", "-p", "no:cacheprovider",
                                        "--preflight-profile", "p5.48xlarge", "-k", "PF-ENV-001")
    res.stdout.fnmatch_lines(["gpu-preflight *: profile p5.48xlarge (from --profile), tier "
                              "preflight"])
    res.assert_outcomes(passed=1)


def test_this_projects_own_sessions_register_the_plugin_once() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:randomly",
                           "tests/test_report.py", "tests/test_plugin.py"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "already registered" not in proc.stdout + proc.stderr
    assert "tests collected" in proc.stdout


def test_inert_for_another_projects_own_checks_package(pytester: pytest.Pytester,
                                                      neutral_env: None) -> None:
    pkg = pytester.mkpydir("checks")
    (pkg / "test_theirs.py").write_text("def test_theirs(gpu_inventory):\n    pass\n")
    res = pytester.runpytest_subprocess("--pyargs", "checks", "-p", "no:cacheprovider")
    res.assert_outcomes(errors=1)
    res.stdout.fnmatch_lines(["*fixture 'gpu_inventory' not found*"])
