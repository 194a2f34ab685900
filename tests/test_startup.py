"""Start-up (issue 28): what `preflight run` imports before its checks start. The imports only
some paths need (the cluster step on a multi-node job, the node's identity and the stores with
a certificate or a ledger, pytest in the check sessions) are made where those paths need them;
bench/bench_startup.py measures the CPU time."""

from __future__ import annotations

import subprocess
import sys

#: Modules a single-node `preflight run` without a certificate or a ledger never needs in the
#: CLI process: each line the path that imports it.
NOT_AT_START = (
    "torch",  # the worker's, under torchrun
    "pytest",  # the check sessions' (harness.checking)
    "harness.checking",
    "harness.cluster.step",  # multi-node jobs (harness.commands.run._cluster_start)
    "harness.memory.identity",  # --reuse-certified, the ledger, certify
    "harness.memory.store",
    "importlib.metadata",  # the identity's package digest
)


def test_the_run_command_imports_only_what_every_run_needs():
    code = ("import sys, harness.cli, harness.commands.run; "
            f"print(' '.join(m for m in {NOT_AT_START!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == []


def test_the_paths_that_need_them_still_import_them():
    """The check above fails when the module list is wrong: each module is importable, and the
    cluster step and the memory commands still reach theirs."""
    code = ("import sys, harness.cluster.step, harness.commands.memory as m; "
            "m.NodeMemory._identity; import harness.memory.identity, harness.memory.store; "
            "print('harness.checking' in sys.modules, 'pytest' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120).stdout.split()
    assert out == ["True", "True"]
