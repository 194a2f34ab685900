"""Signals to `preflight run` and `preflight selftest`, end to end (real processes, fake tools on
PATH): exit 128+N within 10 s of the signal, report.json with verdict `interrupted` naming what
had finished, the failure file, junit.xml, no hand-off, and no process the run started alive
(every fake tool and check writes its pid to $PIDS)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.base import proctree
from tests.conftest import REPO, process_alive
from tests.e2e import procs

pytestmark = pytest.mark.timeout(300)

#: The issue's bound from the signal to the exit.
EXIT_WITHIN_S = 10.0
#: How long a loaded machine may take to start a run and reach the planted hang.
READY_S = 120.0
SECRET = "hf_plantedSecretTokenValue0123456789abcd"

HANGTOOL = """#!/bin/bash
# a tool that ignores SIGTERM, detaches a child holding its stdout, and hangs
echo $$ >> "$PIDS"
if [ -n "$HANGTOOL_OBEYS_TERM" ]; then
    setsid bash -c 'echo $$ >> "$PIDS"; sleep 300; :' &
else
    trap '' TERM
    setsid bash -c 'trap "" TERM; echo $$ >> "$PIDS"; sleep 300; :' &
fi
echo "hangtool: working"
sleep 300 & echo $! >> "$PIDS"
wait; wait
"""

SUITE = '''
import os
import signal
import time

from harness.base import proc
from harness.checking import check


def _record():
    with open(os.environ["PIDS"], "a") as fh:
        fh.write(f"{os.getpid()}\\n")


@check("PF-T-600", title="leaves an orphan", why="w", remedy="r")
def test_leaves_an_orphan():
    # started without harness.base.proc, double-forked into its own session, environment scrubbed
    # (no tag), stdio closed (holds no pipe): only the run being a subreaper keeps it in its tree
    os.system('(setsid env -i sleep 300 </dev/null >/dev/null 2>&1 & echo $! >> "$PIDS") &')


@check("PF-T-601", title="fails", why="w", remedy="r")
def test_fails():
    assert False, f"[PF-T-601] planted failure (token {os.environ['HF_TOKEN']})"


@check("PF-T-602", title="a tool hangs", why="w", remedy="r")
def test_tool_hangs():
    _record()
    if os.environ.get("SESSION_IGNORES_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    res = proc.run(["hangtool"], timeout_s=600)
    assert res.ok, res.describe()
'''


@pytest.fixture
def world(tmp_path: Path) -> Path:
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "test_sig.py").write_text(SUITE)
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "hangtool"
    tool.write_text(HANGTOOL)
    tool.chmod(0o755)
    (tmp_path / "pids").touch()
    return tmp_path


def _env(world: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PREFLIGHT_", "NCCL_", "FI_", "SM_", "SLURM_", "OMPI_"))}
    env.update({"PATH": f"{world / 'bin'}{os.pathsep}{env['PATH']}", "PIDS": str(world / "pids"),
                "PREFLIGHT_SUITE": str(world / "suite"), "PREFLIGHT_HOSTNAME": "node-a",
                "AWS_EC2_METADATA_DISABLED": "true", "PYTHONPATH": str(REPO),
                "PREFLIGHT_OPT_ML": str(world / "opt_ml"), "HF_TOKEN": SECRET}, **extra)
    return env


def _start_run(world: Path, *args: str, **env: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "harness", "run", "--profile", "local-cpu",
            "--report-dir", str(world / "r"), "--failure-file", str(world / "failure"), *args,
            "--", sys.executable, "-c", "import pathlib; pathlib.Path('EXECUTED').touch()"]
    with (world / "out.txt").open("wb") as out:
        return subprocess.Popen(argv, env=_env(world, **env), cwd=world, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _pids(world: Path) -> list[int]:
    return [int(p) for p in (world / "pids").read_text().split()]


def _wait_for(what: str, ready: object, p: subprocess.Popen[bytes], world: Path) -> None:
    end = time.monotonic() + READY_S
    while not ready():  # type: ignore[operator]
        assert p.poll() is None, f"exited {p.returncode} before {what}: " + (
            world / "out.txt").read_text()[-3000:]
        assert time.monotonic() < end, f"never got to {what}"
        time.sleep(0.05)


def _tree(pid: int) -> set[int]:
    """`pid` and every process below it now (a subreaper keeps orphans in the tree)."""
    return proctree.descendants([pid], proctree.snapshot())


def _signal_and_wait(p: subprocess.Popen[bytes], sig: int) -> tuple[int, float, set[int]]:
    """(exit status, seconds from the signal to the exit, the tree as it was at the signal)."""
    tree = _tree(p.pid)
    start = time.monotonic()
    p.send_signal(sig)
    rc = p.wait(timeout=60)
    return rc, time.monotonic() - start, tree


def _alive_after(pids: set[int] | list[int], within_s: float = 3.0) -> list[int]:
    end = time.monotonic() + within_s
    while (alive := [p for p in pids if process_alive(p)]) and time.monotonic() < end:
        time.sleep(0.05)
    return alive


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP],
                         ids=lambda s: signal.Signals(s).name)
def test_signal_stops_the_run_writes_the_report_and_exits_128_plus_n(world, sig):
    p = _start_run(world)
    _wait_for("the hanging tool", lambda: len(_pids(world)) >= 5, p, world)
    rc, elapsed, tree = _signal_and_wait(p, sig)
    name = signal.Signals(sig).name
    assert rc == 128 + sig, (world / "out.txt").read_text()[-3000:]
    assert elapsed < EXIT_WITHIN_S
    assert _alive_after(tree | set(_pids(world))) == []
    assert not (world / "EXECUTED").exists()
    report = json.loads((world / "r" / "node-a" / "report.json").read_text())
    assert report["verdict"] == "interrupted" and report["exit_code"] == 128 + sig
    info = report["interrupted"]
    assert info["signal"] == name and info["not_finished"] == ["PF-T-602"]
    assert info["finished"] == [{"id": "PF-T-600", "outcome": "pass"},
                                {"id": "PF-T-601", "outcome": "fail"}]
    outcomes = {c["id"]: c for c in report["checks"]}
    assert outcomes["PF-T-602"]["message"] == (
        f"[PF-T-602] not finished: the run was interrupted by {name}")
    failure = (world / "failure").read_text()
    assert failure.startswith(f"gpu-preflight INTERRUPTED on node-a (local-cpu, tier preflight) "
                              f"by {name}: 2 of the 3 selected checks finished; the training "
                              "command was not started. Failed before the signal: [PF-T-601] "
                              "planted failure")
    assert info["selected"] == 3 and info["stage"] == "checks"
    assert report["harness_errors"][0].startswith(
        f"interrupted by {name}: 2 of the 3 selected checks had finished (profile local-cpu, "
        "tier preflight, suites suite); 1 had not: PF-T-602; stopped the ")
    assert (world / "r" / "node-a" / "junit.xml").exists()  # the session ended as on Ctrl-C
    for path in [world / "failure", *(world / "r" / "node-a").iterdir()]:
        assert SECRET not in path.read_text(), path


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda s: s.name)
def test_a_signal_while_the_modules_load_is_held_then_taken(world, sig):
    """`python -m harness` holds the signals from its first line: one sent while the modules
    load (seen held in /proc, the run's handlers not yet there) is the same 128+N, interrupted
    report, junit.xml and failure file, no traceback (before: exit -15 and nothing, or a
    KeyboardInterrupt traceback and exit 1)."""
    p = _start_run(world)
    end = time.monotonic() + READY_S
    while not procs.holds(p.pid, signal.SIGTERM):  # polled without sleeping: ~0.2 s window
        assert p.poll() is None and time.monotonic() < end, "never held the signals"
        assert not procs.handles(p.pid, signal.SIGTERM), "handled without being held first"
    assert not procs.handles(p.pid, signal.SIGTERM), "the start-up window was missed"
    p.send_signal(sig)
    rc = p.wait(timeout=60)
    out = (world / "out.txt").read_text()
    assert rc == 128 + sig and "Traceback" not in out, out[-3000:]
    report = json.loads((world / "r" / "node-a" / "report.json").read_text())
    assert report["verdict"] == "interrupted" and report["interrupted"]["during_startup"] is True
    assert report["interrupted"]["stage"] == "start-up"
    assert report["harness_errors"][0].startswith(
        f"interrupted by {sig.name} during start-up (while the modules loaded), before any "
        "check ran (")
    assert f"by {sig.name}: during start-up, before any check ran; the training command was " \
        "not started." in (world / "failure").read_text()
    assert (world / "r" / "node-a" / "junit.xml").exists()
    assert not (world / "EXECUTED").exists()


def test_a_check_session_that_ignores_sigterm_is_killed_in_bound(world):
    p = _start_run(world, SESSION_IGNORES_TERM="1")
    _wait_for("the hanging tool", lambda: len(_pids(world)) >= 5, p, world)
    rc, elapsed, tree = _signal_and_wait(p, signal.SIGTERM)
    assert rc == 143 and elapsed < EXIT_WITHIN_S
    assert _alive_after(tree | set(_pids(world))) == []
    report = json.loads((world / "r" / "node-a" / "report.json").read_text())
    assert report["verdict"] == "interrupted" and report["interrupted"]["not_finished"] == [
        "PF-T-602"]


def test_a_second_signal_during_the_cleanup_still_writes_the_report(world):
    p = _start_run(world, SESSION_IGNORES_TERM="1")  # the cleanup waits out its SIGTERM grace
    _wait_for("the hanging tool", lambda: len(_pids(world)) >= 5, p, world)
    tree = _tree(p.pid)
    start = time.monotonic()
    p.send_signal(signal.SIGTERM)
    out = world / "out.txt"
    _wait_for("the cleanup", lambda: b"SIGTERM received" in out.read_bytes(), p, world)
    p.send_signal(signal.SIGINT)
    rc = p.wait(timeout=60)
    assert rc == 143 and time.monotonic() - start < EXIT_WITHIN_S
    assert "SIGINT again: killing what is left now" in out.read_text()
    assert _alive_after(tree | set(_pids(world))) == []
    assert json.loads((world / "r" / "node-a" / "report.json").read_text())[
        "verdict"] == "interrupted"
    assert (world / "failure").read_text().startswith("gpu-preflight INTERRUPTED")


def test_xdist_workers_and_their_tools_are_stopped(world):
    p = _start_run(world, "--workers", "2")  # the check with the hanging tool runs in a worker
    _wait_for("the hanging tool", lambda: len(_pids(world)) >= 5, p, world)
    rc, elapsed, tree = _signal_and_wait(p, signal.SIGTERM)
    assert rc == 143 and elapsed < EXIT_WITHIN_S
    assert len(tree) >= 6  # run, controller, 2 workers, tool, its children
    assert _alive_after(tree | set(_pids(world))) == []
    assert json.loads((world / "r" / "node-a" / "report.json").read_text())[
        "verdict"] == "interrupted"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_signal_while_blocked_in_the_cluster_join_is_handled_at_once(world):
    """The main thread is inside TCPStore's C++ connect loop (join timeout 120 s): a Python-level
    handler would wait for it; the wakeup-pipe watcher does not."""
    p = _start_run(world, PREFLIGHT_NNODES="2", PREFLIGHT_NODE_RANK="1",
                   PREFLIGHT_MASTER_ADDR="127.0.0.1", PREFLIGHT_PORT=str(_free_port()),
                   PREFLIGHT_HOSTS="node-[0-1]", PREFLIGHT_JOIN_TIMEOUT_S="120")
    out = world / "out.txt"
    _wait_for("the join", lambda: b"join timeout 120 s" in out.read_bytes(), p, world)
    time.sleep(0.5)  # let it enter the connect loop (no race: any point of the join will do)
    rc, elapsed, tree = _signal_and_wait(p, signal.SIGTERM)
    assert rc == 143 and elapsed < EXIT_WITHIN_S
    report = json.loads((world / "r" / "node-a" / "report.json").read_text())
    assert report["verdict"] == "interrupted" and report["checks"] == []
    assert report["harness_errors"][0].startswith(
        "interrupted by SIGTERM before the checks were collected: the selection (profile "
        "local-cpu, tier preflight, suites suite) was not known yet; no check had finished")
    assert (report["interrupted"]["stage"], report["interrupted"]["selected"]) == (
        "before the checks", None)
    # No check session ran, so none wrote junit.xml: the run writes one that says why.
    junit = ET.parse(world / "r" / "node-a" / "junit.xml").getroot()
    error = junit.find("testsuite/testcase[@name='run']/error")
    assert error is not None and "interrupted by SIGTERM" in error.get("message", "")
    assert _alive_after(tree) == []


def test_selftest_stops_every_node_and_each_writes_its_interrupted_report(world):
    argv = [sys.executable, "-m", "harness", "selftest", "cluster", "--nodes", "2",
            "--inject", "hang=1", "--work-dir", str(world / "st")]
    env = _env(world)
    env.pop("PREFLIGHT_SUITE")
    with (world / "out.txt").open("wb") as out:
        p = subprocess.Popen(argv, env=env, cwd=world, stdout=out, stderr=subprocess.STDOUT,
                             start_new_session=True)

    def joined() -> bool:
        texts = [world / "st" / f"node{r}" / "output.txt" for r in (0, 1)]
        return all(t.exists() and b"control plane" in t.read_bytes() for t in texts)

    _wait_for("both nodes joining", joined, p, world)
    rc, elapsed, tree = _signal_and_wait(p, signal.SIGTERM)
    assert rc == 143 and elapsed < EXIT_WITHIN_S, (world / "out.txt").read_text()[-3000:]
    assert len(tree) >= 3  # the driver and its two nodes at least
    assert _alive_after(tree) == []
    for rank in (0, 1):
        report = json.loads((world / "st" / f"node{rank}" / "report.json").read_text())
        assert report["verdict"] == "interrupted", rank
        assert (world / "st" / f"node{rank}" / "junit.xml").is_file(), rank
        assert not (world / "st" / f"node{rank}" / "EXECUTED").exists()
    text = (world / "out.txt").read_text()
    assert ("INTERRUPTED by SIGTERM; the nodes' reports:\n  node0: interrupted\n"
            "  node1: interrupted") in text


PEER_SUITE = '''
import os
import time

from harness.checking import check


@check("PF-T-700", title="hangs on one node", why="w", remedy="r")
def test_hangs_on_one_node():
    if os.environ["PREFLIGHT_NODE_RANK"] == os.environ["HANG_RANK"]:
        with open(os.environ["PIDS"], "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        time.sleep(600)
'''


@pytest.mark.parametrize(("hang", "named"), [
    (1, "interrupted by SIGTERM"),
    (0, "the control-plane master node0 (node rank 0, 127.0.0.1:"),
], ids=["worker-interrupted", "master-interrupted"])
def test_a_node_interrupted_during_its_checks_is_named_by_its_peer_at_once(world, hang, named):
    """Without it the peer would wait for the interrupted node until its gather deadline (join
    20 + local 120 + gather 8 s here): a worker publishes its interrupted result; a master's
    store goes with it, which the worker notices at once."""
    from harness.cluster.selftest import SelftestConfig, _node_env, selftest_timeouts

    (world / "suite" / "test_sig.py").write_text(PEER_SUITE)
    profile = world / "profile.toml"
    profile.write_text('[profiles."local-cpu"]\nrun_budget_s = { preflight = 120 }\n')
    t = selftest_timeouts()
    cfg = SelftestConfig(nodes=2, work_dir=world, timeouts=t)
    port, nodes = _free_port(), {}
    for rank in (0, 1):
        env = {**_node_env(cfg, rank, port, _env(world)), "PREFLIGHT_SUITE": str(world / "suite"),
               "PIDS": str(world / "pids"), "HANG_RANK": str(hang)}
        argv = [sys.executable, "-m", "harness", "run", "--profile", "local-cpu", "--profile-file",
                str(profile), "--report-dir", str(world / "r"),
                "--failure-file", str(world / f"failure{rank}"), "--", "true"]
        with (world / f"out{rank}.txt").open("wb") as out:
            nodes[rank] = subprocess.Popen(argv, env=env, cwd=world, stdout=out,
                                           stderr=subprocess.STDOUT, start_new_session=True)
    peer = 1 - hang
    gathering = world / f"out{peer}.txt"
    _wait_for("the hanging check", lambda: len(_pids(world)) >= 1, nodes[hang], world)
    _wait_for("the peer's gather", lambda: b"gathering every node" in gathering.read_bytes(),
              nodes[peer], world)
    rc_hung, _, _ = _signal_and_wait(nodes[hang], signal.SIGTERM)
    start = time.monotonic()
    rc_peer = nodes[peer].wait(timeout=200)
    assert (rc_hung, rc_peer) == (143, 1)
    assert time.monotonic() - start < 60  # far below the 120 s it would otherwise wait
    text = (world / f"failure{peer}").read_text()
    assert text.startswith("gpu-preflight FAILED on a 2-node cluster"), text
    assert f"bad nodes: node{hang}." in text and named in text


def test_an_interrupted_run_still_writes_its_metrics_file_and_uploads_its_report(world, aws_env):
    # Nightly certification is often stopped by its scheduler (Slurm's time limit, a spot
    # reclaim): what had finished must reach the bucket and the textfile collector anyway.
    import boto3

    boto3.client("s3").create_bucket(Bucket="pf-interrupted")
    metrics = world / "textfile" / "preflight.prom"
    # (the tools obey SIGTERM here: the uploads get the time a TERM-ignoring tool's grace takes)
    p = _start_run(world, "--s3-uri", "s3://pf-interrupted/nightly", "--metrics-file",
                   str(metrics), HANGTOOL_OBEYS_TERM="1",
                   **{k: v for k, v in aws_env.items() if k.startswith("AWS_")})
    _wait_for("the hanging tool", lambda: len(_pids(world)) >= 5, p, world)
    rc, elapsed, _ = _signal_and_wait(p, signal.SIGTERM)
    out = (world / "out.txt").read_text()
    assert rc == 143, out[-3000:]
    assert elapsed < EXIT_WITHIN_S
    text = metrics.read_text()
    assert 'preflight_verdict{' in text and 'verdict="interrupted"} 1.0' in text, text[:2000]
    assert SECRET not in text
    keys = [o["Key"] for o in boto3.client("s3").list_objects_v2(
        Bucket="pf-interrupted", Prefix="nightly/").get("Contents", [])]
    uploaded = [k for k in keys if k.endswith("/node-a/report.json")]
    assert uploaded, (keys, out[-3000:])
    body = boto3.client("s3").get_object(Bucket="pf-interrupted", Key=uploaded[0])["Body"].read()
    report = json.loads(body)
    assert report["verdict"] == "interrupted" and report["uploads"]["s3"]["ok"] is True
    assert SECRET.encode() not in body
    assert any(k.endswith("/node-a/junit.xml") for k in keys), keys
