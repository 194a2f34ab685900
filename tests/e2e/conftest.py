"""Fixtures of the end-to-end tests: the installed product (`shipped`), fake GPU nodes, and a
runner that calls the installed `preflight` from a folder outside the checkout and cleans up
whatever a run left behind (after recording it for the assertions)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import procs
from tests.e2e.node import FakeNode
from tests.e2e.shipped import Shipped, ensure_venvs, from_environment


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "smoke: the end-to-end subset scripts/test also runs on the lowest pytest")


@pytest.fixture(scope="session")
def shipped() -> Shipped:
    """The installed product: scripts/test's venv ($PREFLIGHT_SHIPPED_VENV), else one built
    here from the current sources (cached under ~/.cache, so it is built once)."""
    venv = from_environment() or ensure_venvs()["high"]
    assert venv.preflight.is_file(), f"{venv.root} has no bin/preflight: not an installed venv"
    return venv


@pytest.fixture
def run_node(shipped: Shipped, tmp_path: Path) -> Iterator[Callable[..., tuple[FakeNode, procs.Run]]]:
    """`run_node(args, faults=..., variant=..., ...)`: build a fake p5.48xlarge node, run the
    installed `preflight run --profile p5.48xlarge --profile-file <short deadlines> ARGS --
    <hand-off>` on it, return (node, run). `during(proc, node)` is called while it runs (to
    signal it); `wrap(node)` is a command that execs preflight (a mount namespace). Whatever the
    run left running is killed after the test."""
    nodes: list[FakeNode] = []

    def go(args: Sequence[str] = (), *, profile: str = "p5.48xlarge", handoff: bool = True,
           during: Callable[[subprocess.Popen[str], FakeNode], None] | None = None,
           wrap: Callable[[FakeNode], Sequence[str]] | None = None,
           **node_options: Any) -> tuple[FakeNode, procs.Run]:
        node = FakeNode(tmp_path / f"node{len(nodes)}", **node_options)
        nodes.append(node)
        argv = [*(wrap(node) if wrap else ()), str(shipped.preflight), "run", "--profile", profile,
                "--profile-file", str(node.profile_file), "--report-dir", str(node.reports), *args]
        if handoff:
            argv += ["--", *node.handoff()]
        began = time.monotonic()
        proc = procs.start(argv, env=node.env(shipped.bin), cwd=node.cwd)
        if during is not None:
            during(proc, node)
        run = procs.finish(proc, argv, began, node.run_budget_s, token=node.token,
                           state=node.state, report_dir=node.reports / "e2e-node")
        return node, run

    yield go
    for node in nodes:
        procs.kill_leftovers(node.token, node.state)
