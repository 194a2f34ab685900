"""PF-NVL-006 through its real fixture (harness.fixtures.nvl_domain.nvls_allreduce): an emulated
all_reduce_perf on PATH that prints recorded output only when NCCL_ALGO=NVLS reaches it (the
real nccl-tests table of tests/data/nccl_tests/current_2node_h100.txt, in-place busbw 298.34
at 1 GiB, after the recorded `NVLS multicast support` lines of NVIDIA/nccl#1538), or hangs,
crashes, floods."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import facts_conftest, run_check_file
from tests.fake_tools import make_tool

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
OTHER_FACTS = ["fabric_evidence", "gpu_fabric", "imex_status", "node_count",
               "multi_node_allreduce"]
HELP = "USAGE: all_reduce_perf \\n\\t[-g,--ngpus <gpus>] \\n"


@pytest.fixture(autouse=True)
def _importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))


def _tool(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, run: str) -> Path:
    out = pytester.path / "nvls-run.txt"
    out.write_text((DATA / "nccl_log" / "real_nvls_available_h100.log").read_text()
                   + (DATA / "nccl_tests" / "current_2node_h100.txt").read_text())
    bin_dir = pytester.path / "bin"
    make_tool(bin_dir, "all_reduce_perf",
              f'case "$1" in --help) printf "{HELP}"; exit 0;; esac\n'
              f'echo "$NCCL_ALGO $NCCL_DEBUG $NCCL_NVLS_ENABLE" >> {pytester.path}/env.log\n'
              f'test "$NCCL_ALGO" = NVLS || {{ echo "NCCL_ALGO is not NVLS" >&2; exit 1; }}\n'
              + run.replace("OUT", str(out)))
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "0")  # the job's own setting must not break the run
    return bin_dir


def _run(pytester: pytest.Pytester, floor: float | None = None) -> tuple[str, str]:
    pytester.makeconftest(facts_conftest("tests.nvl_domain_facts", "h100_nvls_ok", OTHER_FACTS))
    extra = f"nvls_busbw_gb_s_min = {floor}\n" if floor is not None else ""
    (pytester.path / "p.toml").write_text(
        '[profiles."p5.48xlarge"]\ncheck_timeout_s = { certify = 40.0 }\n' + extra)
    got = run_check_file(pytester, "test_nvl_domain.py", "p5.48xlarge", "--preflight-tier=certify",
                         f"--preflight-profile-file={pytester.path / 'p.toml'}", "-k", "nvls")
    result = got["PF-NVL-006"]
    return result["outcome"], result.get("message") or ""


def test_nvls_run_gets_nccl_algo_nvls_and_is_judged_against_the_floor(pytester, monkeypatch):
    _tool(pytester, monkeypatch, "cat OUT")
    outcome, msg = _run(pytester, floor=250.0)
    assert outcome == "warn" and "NCCL_NVLS_ENABLE=0 in the job's environment" in msg, msg
    env_seen = (pytester.path / "env.log").read_text().split("\n")[-2]
    assert env_seen.split() == ["NVLS", "INFO"]  # NCCL_NVLS_ENABLE=0 was not passed on
    outcome, msg = _run(pytester)
    assert outcome == "fail" and "298.34 GB/s < 396 GB/s" in msg


@pytest.mark.parametrize(("run", "expect"), [
    ("head -20 OUT; sleep 120", "did not finish"),
    ("head -40 OUT; kill -ABRT $$", "SIGABRT"),
    ("head -c 5000000 /dev/urandom | tr -dc 'a-z\\n'", "NCCL_ALGO=NVLS failed"),
])
def test_a_hung_crashed_or_flooding_nvls_run_fails_naming_it(pytester, monkeypatch, run, expect):
    _tool(pytester, monkeypatch, run)
    outcome, msg = _run(pytester)
    assert outcome == "fail" and "NCCL_ALGO=NVLS failed" in msg and expect in msg, msg
