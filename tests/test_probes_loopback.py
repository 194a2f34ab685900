"""Per-device loopback (harness.probes.loopback) with fake fabtests / perftest tools on PATH:
one that prints a recorded table, one that hangs, one that prints garbage, one that fails."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from harness.probes import loopback as lb

DATA = Path(__file__).parent / "data" / "rdma_bench"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(lb, "SERVER_START_S", 0.1)
    return tmp_path


def test_efa_loopback_parses_the_client_table(bin_dir: Path):
    table = DATA / "real_fi_rdm_tagged_bw_efa_c5n_libfabric_5694.txt"
    # the client (last argument localhost) prints the table; the server prints nothing
    _tool(bin_dir, "fi_rdm_pingpong", f'for a; do last=$a; done; [ "$last" = localhost ] && '
          f'cat {table}; exit 0')
    result = lb.loopback("efa", "rdmap16s27", timeout_s=20)
    assert result.problem is None
    assert round(result.gbit_per_s, 1) == 55.2 and result.latency_us == 1.50


def test_ib_loopback_parses_perftest(bin_dir: Path):
    out = DATA / "real_ib_write_bw_gbits_perftest_273.txt"
    _tool(bin_dir, "ib_write_bw", f"cat {out}")
    assert lb.loopback("ib", "mlx5_0", timeout_s=20).gbit_per_s == 0.48


def test_missing_tool_is_said(bin_dir: Path):
    assert lb.loopback("ib", "mlx5_0").problem == "ib_write_bw is not installed"


def test_hanging_tool_is_bounded(bin_dir: Path):
    _tool(bin_dir, "fi_rdm_pingpong", "exec sleep 600")
    result = lb.loopback("efa", "rdmap16s27", timeout_s=2)
    assert result.problem is not None and result.problem.startswith("client: ")
    assert "2" in result.problem  # the bound it was given is named


def test_garbage_and_failure(bin_dir: Path):
    _tool(bin_dir, "fi_rdm_pingpong", "echo 'fi_getinfo(): -61 (No data available)'; exit 0")
    assert lb.loopback("efa", "rdmap16s27", timeout_s=10).problem == (
        "fi_rdm_pingpong output: no fabtests table (`bytes iters total time MB/sec usec/xfer "
        "Mxfers/sec`) in the output")
    _tool(bin_dir, "fi_rdm_pingpong", "echo 'fi_av_insert(): -22' >&2; exit 1")
    problem = lb.loopback("efa", "rdmap16s27", timeout_s=10).problem
    assert problem.startswith("client: ") and "fi_av_insert(): -22" in problem
