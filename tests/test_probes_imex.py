"""harness.probes.imex against emulated nvidia-imex-ctl tools (ready, waiting, hung, crashing,
flooding, garbage, missing) and fake sysroots holding the nodes config."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.probes import imex
from tests.fake_tools import empty_path, make_tool


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return empty_path(tmp_path, monkeypatch)


def _sysroot(tmp_path: Path, config: str | None) -> Path:
    root = tmp_path / "root"
    if config is not None:
        path = root / imex.NODES_CONFIG
        path.parent.mkdir(parents=True)
        path.write_text(config)
    return root


def test_ready_daemon_and_its_nodes_config(tmp_path, bin_dir):
    make_tool(bin_dir, "nvidia-imex-ctl", 'test "$1" = -q && echo READY')
    s = imex.query_imex(_sysroot(tmp_path, "# domain\n10.1.0.1\n10.1.0.2  # tray 2\n\n"))
    assert (s.state, s.problem, s.nodes, s.config_problem) == (
        "READY", None, ("10.1.0.1", "10.1.0.2"), None)


def test_a_daemon_waiting_for_its_peers_is_named(tmp_path, bin_dir):
    make_tool(bin_dir, "nvidia-imex-ctl", "echo WAITING_FOR_PEERS")
    s = imex.query_imex(_sysroot(tmp_path, None))
    assert s.state == "WAITING_FOR_PEERS" and s.problem is None
    assert s.config_problem and "does not exist" in s.config_problem


@pytest.mark.parametrize(("body", "expect"), [
    ("sleep 60", "did not finish within 1 s"),
    ("kill -SEGV $$", "killed by signal SIGSEGV"),
    ("echo 'Connection refused' >&2; exit 1", "exited with status 1: Connection refused"),
    ("head -c 3000000 /dev/zero | tr '\\0' 'R'", "not one IMEX state"),
    ("printf 'READY\\nREADY\\n'", "not one IMEX state"),
    ("echo ready", "not one IMEX state"),
    ("echo READY; exit 3", "exited with status 3"),
])
def test_a_broken_tool_gives_no_state_and_says_why(tmp_path, bin_dir, body, expect):
    make_tool(bin_dir, "nvidia-imex-ctl", body)
    s = imex.query_imex(_sysroot(tmp_path, "10.0.0.1\n"), timeout_s=1.0)
    assert s.state is None and expect in (s.problem or ""), s.problem
    assert s.nodes == ("10.0.0.1",)


def test_missing_tool_and_unreadable_config(tmp_path, bin_dir):
    root = _sysroot(tmp_path, "x" * (imex.MAX_CONFIG_BYTES + 1))
    s = imex.query_imex(root)
    assert s.tool is None and s.state is None and "not on PATH" in (s.problem or "")
    assert "larger than" in (s.config_problem or "") and s.nodes == ()


def test_imex_check_through_its_fixture_reads_the_sysroot_and_the_tool(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """PF-NVL-005 with the real imex_status fixture: the emulated tool on PATH answers, the nodes
    config is read under --preflight-sysroot; only the NVML facts are canned (GB200 tray)."""
    from tests.conftest import REPO, facts_conftest, run_check_file

    monkeypatch.setenv("PYTHONPATH", str(REPO))
    bin_dir = empty_path(tmp_path, monkeypatch)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    root = _sysroot(tmp_path, "10.1.0.1\n10.1.0.2\n")
    pytester.makeconftest(facts_conftest("tests.nvl_domain_facts", "gb200_healthy", ["gpu_fabric"]))
    for body, outcome in (("echo READY", "pass"), ("echo UNAVAILABLE", "fail"),
                          ("sleep 60", "error")):
        make_tool(bin_dir, "nvidia-imex-ctl", body)
        got = run_check_file(pytester, "test_nvl_domain.py", "p6e-gb200.36xlarge",
                             f"--preflight-sysroot={root}", "-k", "imex")["PF-NVL-005"]
        assert got["outcome"] == outcome, got
    assert "did not finish within 15 s" in got["message"]
