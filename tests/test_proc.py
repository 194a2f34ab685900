"""The one subprocess helper: timeouts kill the whole group, output survives, nothing raises."""

from __future__ import annotations

import sys
import time

from harness import proc
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
