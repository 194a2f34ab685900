"""What `preflight run` shows while it runs, as a user sees it: on a terminal (a real pty) a live
status line from the start, before any check has finished, erased at the end; in a log a
`selected` line; with -v every measured value with its threshold and why a check was skipped."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.timeout(400)

#: A run of two cheap checks; generous for a loaded machine (it takes ~10 s idle).
RUN_BOUND_S = 300.0
SELECT = "PF-HOST-001 or PF-GPU-001"  # a measured pass and, on local-cpu, a skip


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFLIGHT_", "NCCL_", "FI_", "SM_", "SLURM_", "OMPI_"))}
    env.update({"PYTHONPATH": str(REPO), "PREFLIGHT_HOSTNAME": "node-a", "TERM": "xterm-256color",
                "COLUMNS": "160", "AWS_EC2_METADATA_DISABLED": "true"})
    return env


def _argv(tmp_path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "harness", "run", "--profile", "local-cpu", "-k", SELECT,
            "--report-dir", str(tmp_path / "r"), *extra]


def _run_on_a_pty(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, bytes]:
    main, sub = pty.openpty()
    p = subprocess.Popen(argv, stdin=sub, stdout=sub, stderr=sub, env=env, cwd=cwd,
                         close_fds=True, start_new_session=True)
    os.close(sub)
    out, end = b"", time.monotonic() + RUN_BOUND_S
    try:
        while time.monotonic() < end:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: the run exited and closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            elif p.poll() is not None:
                break
        return p.wait(timeout=30), out
    finally:
        if p.poll() is None:
            p.kill()
        os.close(main)


def test_a_terminal_gets_a_live_status_line_before_any_result(tmp_path: Path) -> None:
    rc, out = _run_on_a_pty(_argv(tmp_path), _env(tmp_path), tmp_path)
    text = out.decode(errors="replace")
    assert rc == 0, text[-3000:]
    assert text.startswith("gpu-preflight: starting"), text[:500]
    status = text.index("gpu-preflight: collecting the checks")
    first_result = text.index("PF-HOST-001")
    assert status < first_result, "the status line came only after a check had finished"
    assert "of at most 300 s" in text
    # The summary table (a terminal's) follows; the status line does not stay behind it.
    tail = text[text.rindex("gpu-preflight: node-a"):]
    assert "collecting the checks" not in tail and "checks done ·" not in tail


def test_a_log_gets_plain_lines_and_verbose_shows_values_and_why(tmp_path: Path) -> None:
    # (without -v a skip prints nothing and values stay out: tests/test_summary.py)
    loud = subprocess.run(_argv(tmp_path, "-v"), env=_env(tmp_path), cwd=tmp_path,
                          capture_output=True, text=True, timeout=RUN_BOUND_S, check=False)
    assert loud.returncode == 0, loud.stdout[-2000:]
    assert "gpu-preflight: 2 checks selected, running (upper bound" in loud.stdout
    assert "\x1b[" not in loud.stdout  # no terminal control codes in a log
    assert "collecting the checks" not in loud.stdout
    assert not loud.stdout.startswith("gpu-preflight: starting")  # a terminal's line only
    lines = loud.stdout.splitlines()
    host = next(i for i, line in enumerate(lines) if "PF-HOST-001" in line)
    values = lines[host + 1:host + 4]
    assert any("/dev/shm free = " in v and "(>= 1 GiB)" in v for v in values), values
    skip = next(i for i, line in enumerate(lines) if "SKIP" in line and "PF-GPU-001" in line)
    assert "not applicable" in lines[skip + 1] or "no GPU" in lines[skip + 1], lines[skip:skip + 2]
    assert f"pytest output: {tmp_path / 'r' / 'node-a' / 'pytest-output.txt'}" in loud.stdout


def test_format_json_puts_one_summary_object_on_stdout_and_the_rest_on_stderr(
        tmp_path: Path) -> None:
    import json

    res = subprocess.run(_argv(tmp_path, "--format", "json"), env=_env(tmp_path), cwd=tmp_path,
                         capture_output=True, text=True, timeout=RUN_BOUND_S, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    data = json.loads(res.stdout)  # the whole of stdout is the object
    assert data["verdict"] == "pass" and data["exit_code"] == 0 and data["host"] == "node-a"
    assert data["profile"] == "local-cpu" and data["counts"]["pass"] == 1
    assert data["counts"]["skip"] == 1 and data["attention"] == []
    assert data["report"] == str(tmp_path / "r" / "node-a" / "report.json")
    assert "gpu-preflight: host node-a" in res.stderr and "PF-HOST-001" in res.stderr
