"""The PF-TRAIN checks run through the plugin on a recorded worker output (tests/data/train_step),
optionally with rank 0's result edited: shared by the training step's tests."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_check_file, run_checks

DATA = Path(__file__).parent / "data" / "train_step"


def check_results(suite: pytest.Pytester, *args: str) -> dict[str, tuple[str, str]]:
    """Run checks/test_training.py through the plugin: (outcome, message) by check ID."""
    copy_check_file(suite, "test_training.py")
    _, by_id = run_checks(suite, *args)
    return {k: (r["outcome"], r["message"]) for k, r in by_id.items()}


def canned(suite: pytest.Pytester, name: str, returncode: int,
           edit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
           duration_s: float = 3.0) -> None:
    """A conftest whose `train_step` is the recorded output `name` (its result line edited by
    `edit`), as a launch that exited `returncode` after `duration_s`."""
    text = (DATA / name).read_text()
    if edit is not None:
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith('{"schema"'))
        lines[at] = json.dumps(edit(json.loads(lines[at])))
        text = "\n".join(lines) + "\n"
    (suite.path / "run.txt").write_text(text)
    suite.makeconftest(f"""
import pytest
from pathlib import Path
from harness.parsers.train_step import parse_train_step
from harness.probes.train_step import TrainStepRun
from harness.base.proc_result import ProcResult

@pytest.fixture(scope="session")
def train_step():
    text = Path("run.txt").read_text()
    proc = ProcResult(("torchrun",), {returncode}, text, "", duration_s={duration_s},
                      timeout_s=60.0)
    return TrainStepRun(proc, parse_train_step(text), None, 2)
""")
