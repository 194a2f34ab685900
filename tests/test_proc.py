"""The one subprocess helper: timeouts kill the whole group, output survives, nothing raises."""

from __future__ import annotations

import sys
import time

from harness.base import proc
from harness.base.proc_result import ProcResult
from tests.conftest import process_alive


def test_captures_output_and_status():
    code = "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"
    res = proc.run([sys.executable, "-c", code], timeout_s=30)
    assert (res.returncode, res.stdout.strip(), res.stderr.strip()) == (3, "out", "err")
    assert not res.ok
    assert "exited with status 3: err" in res.describe()


def test_missing_binary_is_a_result_not_an_exception():
    res = proc.run(["definitely-not-a-tool-xyz", "--version"], timeout_s=5)
    assert res.returncode is None and res.error == "command not found"
    assert "could not run: command not found" in res.describe()


def test_timeout_kills_the_whole_group_and_keeps_partial_output(tmp_path):
    pidfile = tmp_path / "child.pid"
    script = (
        f"sleep 300 & echo $! > {pidfile}; echo started; "
        "python3 -c 'import time; time.sleep(300)'"
    )
    start = time.monotonic()
    res = proc.run(["bash", "-c", script], timeout_s=1.5)
    elapsed = time.monotonic() - start
    assert res.timed_out and res.returncode is None
    assert "started" in res.stdout
    assert elapsed < 1.5 + 2 * proc.KILL_GRACE_S + 3
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child), "the grandchild survived the timeout"
    assert "did not finish within 1.5 s" in res.describe()


def test_term_ignoring_tool_is_killed():
    script = "trap '' TERM; echo up; sleep 300"
    res = proc.run(["bash", "-c", script], timeout_s=1)
    assert res.timed_out and "up" in res.stdout


def test_children_left_behind_by_a_finished_tool_are_killed(tmp_path):
    pidfile = tmp_path / "bg.pid"
    res = proc.run(["bash", "-c", f"sleep 300 & echo $! > {pidfile}; exit 0"], timeout_s=10)
    assert res.ok
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while process_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(child)


def test_output_path_streams_to_file_and_keeps_tail(tmp_path):
    log = tmp_path / "out.txt"
    res = proc.run([sys.executable, "-c", "print('a' * 10); import sys; print('b', file=sys.stderr)"],
                   timeout_s=30, output_path=log)
    assert res.ok
    assert log.read_text().split() == ["a" * 10, "b"]
    assert "aaaaaaaaaa" in res.stdout


def test_output_path_timeout(tmp_path):
    log = tmp_path / "out.txt"
    res = proc.run(["bash", "-c", "echo before; sleep 300"], timeout_s=1, output_path=log)
    assert res.timed_out and "before" in res.stdout


def test_killed_by_signal_is_described():
    res = proc.run(["bash", "-c", "kill -SEGV $$"], timeout_s=10)
    assert res.returncode == -11
    assert "killed by signal SIGSEGV" in res.describe()


def test_input_text_is_passed():
    res = proc.run(["cat"], timeout_s=10, input_text="hello")
    assert res.stdout == "hello"


# --- fake tools on PATH: hang, ignore SIGTERM, detach a child that holds stdout, flood ---

import os  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from harness.base import deadline  # noqa: E402

#: Slack on top of a bound for a loaded machine (other test sessions run beside this one).
SLACK_S = 5.0


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bin dir first on PATH; every fake tool appends the pids it starts to $PIDS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PIDS", str(tmp_path / "pids"))
    return bin_dir


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f'#!/bin/bash\necho $$ >> "$PIDS"\n{body}\n')
    path.chmod(0o755)


def _pids(tools: Path) -> list[int]:
    path = tools.parent / "pids"
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _all_dead(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The pids still alive after `within_s` (killed processes take a moment to be reaped)."""
    end = time.monotonic() + within_s
    while (alive := [p for p in pids if process_alive(p)]) and time.monotonic() < end:
        time.sleep(0.05)
    return alive


DETACH = 'setsid bash -c \'echo $$ >> "$PIDS"; exec sleep 300\' &'


def _until_pids(n: int) -> str:
    """Shell: wait until $PIDS lists `n` pids (the detached children are up, then go on)."""
    return f'until [ $(wc -l < "$PIDS") -ge {n} ]; do sleep 0.05; done'


def test_detached_child_holding_stdout_does_not_stall_a_finished_tool(tools):
    _tool(tools, "smi", f"{DETACH}\n{_until_pids(2)}\necho 'GPU 0: fine'\nexit 0")
    start = time.monotonic()
    res = proc.run(["smi", "-q"], timeout_s=60)
    assert time.monotonic() - start < 2 * proc.KILL_GRACE_S + SLACK_S  # not the 60 s, not 300
    assert res.ok and res.stdout.strip() == "GPU 0: fine" and res.leftovers == 1
    # It exited 0, but what it left behind held its output: a listing from it may be cut.
    assert res.incomplete and "detached children" in res.describe()
    pids = _pids(tools)
    assert len(pids) == 2 and _all_dead(pids) == []


def test_hung_tool_with_detached_child_is_killed_with_its_tree_and_named(tools):
    _tool(tools, "smi", f"echo 'Attached GPUs : 8'\n{DETACH}\n{_until_pids(2)}\nsleep 300")
    start = time.monotonic()
    res = proc.run(["smi", "-q", "-x"], timeout_s=5)
    assert time.monotonic() - start < 5 + 2 * proc.KILL_GRACE_S + SLACK_S
    assert res.timed_out and res.returncode is None
    assert res.describe() == ("`smi -q -x` did not finish within 5 s and was killed; its last "
                              "line: 'Attached GPUs : 8'")
    pids = _pids(tools)
    assert len(pids) == 2 and _all_dead(pids) == []


def test_tree_ignoring_sigterm_is_killed(tools):
    _tool(tools, "dcgmi", "trap '' TERM\n"
          "setsid bash -c 'trap \"\" TERM; echo $$ >> \"$PIDS\"; sleep 300; :' &\n"
          f"sleep 300 & echo $! >> \"$PIDS\"\n{_until_pids(3)}\nwait; wait")
    start = time.monotonic()
    res = proc.run(["dcgmi", "diag", "-r", "1"], timeout_s=5)
    assert time.monotonic() - start < 5 + 2 * proc.KILL_GRACE_S + SLACK_S
    assert res.timed_out and "`dcgmi diag -r 1` did not finish within 5 s" in res.describe()
    pids = _pids(tools)
    assert len(pids) == 3 and _all_dead(pids) == []


def test_double_forked_child_with_a_scrubbed_environment_is_found_by_the_pipe(tools):
    """No tag in its environment, not in the tool's tree: found as the holder of the pipe."""
    _tool(tools, "fi_info", "(setsid env -i bash -c 'echo $$ >> \"$0\"; exec sleep 300' "
          "\"$PIDS\" &)\nuntil [ $(wc -l < \"$PIDS\") -ge 2 ]; do sleep 0.05; done\n"
          "echo provider: efa")
    start = time.monotonic()
    res = proc.run(["fi_info", "-p", "efa"], timeout_s=60)
    assert time.monotonic() - start < 2 * proc.KILL_GRACE_S + SLACK_S
    assert res.ok and res.stdout.strip() == "provider: efa" and res.leftovers == 1
    pids = _pids(tools)
    assert len(pids) == 2 and _all_dead(pids) == []


def test_concurrent_calls_keep_their_own_orphans(tools):
    """A call's cleanup kills only what its own tool left: an orphan of a call still running
    in another thread (re-parented to this process, like every orphan here) survives it."""
    _tool(tools, "slow", '(setsid bash -c \'echo $$ >> "$PIDS"; exec sleep 300\' &)\nsleep 4')
    _tool(tools, "quick", "exit 0")
    results: list[ProcResult] = []
    slow = threading.Thread(target=lambda: results.append(proc.run(["slow"], timeout_s=60)))
    slow.start()
    end = time.monotonic() + 30
    while len(_pids(tools)) < 2 and time.monotonic() < end:
        time.sleep(0.05)
    orphan = _pids(tools)[1]
    assert proc.run(["quick"], timeout_s=30).ok
    assert process_alive(orphan), "the quick call killed the slow call's orphan"
    slow.join(60)
    assert results[0].ok and results[0].leftovers == 1
    assert _all_dead([orphan]) == []


def test_flood_is_capped_head_and_tail_kept_dropped_amount_said(tools):
    size = 50 * 1024 * 1024
    _tool(tools, "flood", f"echo BEGIN; head -c {size} /dev/zero | tr '\\0' x; echo; echo END")
    res = proc.run(["flood"], timeout_s=120, max_output_bytes=1024 * 1024)
    assert res.ok and res.truncated
    assert res.stdout.startswith("BEGIN\nxxx") and res.stdout.endswith("xxx\nEND\n")
    assert res.stdout_dropped == len("BEGIN\n") + size + len("\nEND\n") - 1024 * 1024
    assert f"[gpu-preflight: {res.stdout_dropped:,} bytes of output dropped here]" in res.stdout
    assert len(res.stdout) < 1024 * 1024 + 100
    assert "bytes of its stdout dropped from the middle (over the 1,048,576-byte cap" in (
        res.describe())


def test_memory_stays_flat_when_a_tool_prints_200_mb(tools):
    """With the default cap, in a fresh interpreter: peak RSS far below what was printed."""
    _tool(tools, "flood", "head -c 200000000 /dev/zero | tr '\\0' x; echo; echo END")
    # VmHWM, not ru_maxrss: that one starts from the forking parent's RSS (this test session's)
    code = ("import re; from harness.base import proc\n"
            "res = proc.run(['flood'], timeout_s=120)\n"
            "assert res.ok and res.stdout.endswith('END\\n') and res.stdout_dropped, res\n"
            "status = open('/proc/self/status').read()\n"
            "print(int(re.search(r'VmHWM:\\s+(\\d+) kB', status).group(1)) // 1024)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, cwd=Path(__file__).parent.parent, check=True)
    peak_mb = int(out.stdout.split()[-1])
    # interpreter + harness ~30 MB; 2 x 8 MiB kept + their decoded copies; never the 200 MB
    assert peak_mb < 120, peak_mb


def test_endless_output_is_stopped_at_the_timeout_with_bounded_output(tools):
    _tool(tools, "chatty", "exec yes 'nccl INFO spam'")
    res = proc.run(["chatty"], timeout_s=1, max_output_bytes=64 * 1024)
    assert res.timed_out and res.stdout_dropped > 0 and len(res.stdout) < 64 * 1024 + 100
    assert "its last line: 'nccl INFO spam'" in res.describe()


def test_killed_by_signal_names_its_last_output(tools):
    _tool(tools, "all_reduce_perf", "echo '#  Rank  0 Group  0 Pid 1 on node'; kill -ABRT $$")
    res = proc.run(["all_reduce_perf", "-b", "8", "-e", "128M"], timeout_s=30)
    assert res.describe() == ("`all_reduce_perf -b 8 -e 128M` was killed by signal SIGABRT; "
                              "its last line: '#  Rank  0 Group  0 Pid 1 on node'")


def test_long_arguments_are_shortened_in_messages():
    res = proc.run([sys.executable, "-c", "import sys; sys.exit(2)  # " + "x" * 300], timeout_s=30)
    assert len(res.describe()) < 250 and "..." in res.describe()


def test_a_deadline_in_force_shortens_the_timeout_and_says_whose(tools):
    _tool(tools, "nvidia-smi", "echo 'Timestamp : now'; sleep 300")
    start = time.monotonic()
    with deadline.scope(proc.STOP_RESERVE_S + 1.5, "check PF-X-001's 9 s pytest-timeout"):
        res = proc.run(["nvidia-smi", "-q"], timeout_s=60)
    assert time.monotonic() - start < proc.STOP_RESERVE_S + 1.5 + SLACK_S
    assert res.timed_out and res.requested_timeout_s == 60 and res.timeout_s < 2
    assert res.describe().startswith("`nvidia-smi -q` did not finish within ")
    assert ("s and was killed (its 60 s timeout was shortened to end before check PF-X-001's "
            "9 s pytest-timeout); its last line: 'Timestamp : now'") in res.describe()


def test_no_tool_starts_when_the_deadline_leaves_no_time(tools):
    _tool(tools, "dcgmi", "echo ran")
    with deadline.scope(1.0, "the run's 300 s budget (tier preflight)"):
        res = proc.run(["dcgmi", "diag"], timeout_s=60)
        assert proc.budget(60) < 0
    assert res.error is not None and res.error.startswith(
        "not started: the run's 300 s budget (tier preflight) is ")
    assert _pids(tools) == []


def test_the_run_deadline_travels_in_the_environment(tools, monkeypatch):
    _tool(tools, "hang", "sleep 300")
    at = time.monotonic() + proc.STOP_RESERVE_S + 1
    monkeypatch.setenv(*deadline.run_deadline_env(at, "the run's 9 s budget").popitem())
    res = proc.run(["hang"], timeout_s=120)
    assert res.timed_out and res.shortened_by == "the run's 9 s budget"


def test_nothing_starts_once_the_run_is_being_stopped(tools):
    _tool(tools, "nccl", "echo ran")
    proc.stop_starting("the run was interrupted by SIGTERM")
    try:
        res = proc.run(["nccl"], timeout_s=10)
    finally:
        proc.stop_starting(None)
    assert res.describe() == "`nccl` could not run: not started: the run was interrupted by SIGTERM"
    assert _pids(tools) == []


def test_kill_tree_stops_a_process_started_elsewhere_and_its_detached_children(tools):
    _tool(tools, "node", f"trap '' TERM\n{DETACH}\nsleep 300")
    p = subprocess.Popen(["node"], start_new_session=True)
    end = time.monotonic() + 30
    while len(_pids(tools)) < 2 and time.monotonic() < end:
        time.sleep(0.05)
    assert proc.kill_tree(p.pid, grace_s=0.5) == set()
    assert p.wait(10) == -9
    assert _all_dead(_pids(tools)) == []


def test_a_complete_answer_is_not_incomplete_and_a_signal_or_the_cap_makes_it_so(tools):
    _tool(tools, "fine", "echo 'provider: efa'")
    _tool(tools, "crash", "echo 'provider: efa'; kill -SEGV $$")
    _tool(tools, "flood", "head -c 300000 /dev/zero | tr '\\0' x")
    assert not proc.run(["fine"], timeout_s=30).incomplete
    assert proc.run(["crash"], timeout_s=30).incomplete
    flood = proc.run(["flood"], timeout_s=30, max_output_bytes=64 * 1024)
    assert flood.ok and flood.incomplete and "dropped from the middle" in flood.describe()
