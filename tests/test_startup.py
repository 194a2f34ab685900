"""Start-up (issue 28): what `preflight run` imports before its checks start. The imports only
some paths need (the cluster step on a multi-node job, the node's identity and the stores with
a certificate or a ledger, pytest in the check sessions) are made where those paths need them,
and a check session imports a fixture's probes, parsers and worker launch only when a check uses
that fixture; bench/bench_startup.py measures the CPU time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness

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


#: What the CLI process of a plain single-node `preflight run` in a log (no upload, no Kubernetes
#: API, no certificate or ledger, a named profile) never imports, with the path that does.
NOT_IN_A_PLAIN_RUN = (
    "rich",  # the terminal's table and live line (harness.report.summary, harness.run.progress)
    "urllib.request",  # IMDS on EC2 (harness.detect.instance), the Kubernetes API (report.kube)
    "ssl",
    "harness.report.publish",  # --s3-uri, --cloudwatch-namespace
    "harness.memory",  # --reuse-certified, PREFLIGHT_LEDGER, tier certify/diagnose
    "harness.cluster.snapshot",  # a multi-node job (harness.cluster.job decides)
    "harness.judges",
    "harness.probes",  # a derived profile reads the machine (harness.detect.derive)
    "harness.checking",
    "torch",
)


def test_a_plain_run_imports_only_what_it_uses(tmp_path):
    """The whole `preflight run` of one do-nothing check, its output a pipe: the CLI process
    ends without the modules only other paths use (each fails this on 781bf42)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_noop.py").write_text(
        "from harness.checking import check\n"
        "@check('PF-B-001', title='noop', why='w', remedy='r')\n"
        "def test_noop():\n    pass\n")
    report_dir = tmp_path / "r"
    code = ("import sys\nfrom harness.cli import main\n"
            f"rc = main(['run', '--profile', 'local-cpu', '--report-dir', {str(report_dir)!r}])\n"
            "print('MODULES', rc, ' '.join(sys.modules))")
    env = {**os.environ, "PREFLIGHT_SUITE": str(suite), "AWS_EC2_METADATA_DISABLED": "true"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=240, env=env, cwd=tmp_path).stdout
    assert "PASS  PF-B-001    noop" in out  # the progress line, written without rich
    line = next(x for x in out.splitlines() if x.startswith("MODULES "))
    rc, *modules = line.split()[1:]
    assert rc == "0"
    [report] = report_dir.glob("*/report.json")  # the run happened: its verdict is written
    assert json.loads(report.read_text())["verdict"] == "pass"
    assert [m for m in modules if m.startswith(NOT_IN_A_PLAIN_RUN)] == []


#: Rooms a check session of one do-nothing check never needs: the fact fixtures (registered at
#: configure, harness.plugin.FIXTURE_MODULES) import them inside the fixture that uses them.
NOT_IN_A_SESSION = ("harness.probes", "harness.parsers", "harness.worker", "harness.judges",
                    "harness.topology", "harness.detect", "harness.cluster", "torch")
INI = Path(harness.__file__).parent / "run" / "checks.ini"


def _this_tree() -> str:
    """PYTHONPATH with this tree's harness first, as the runner's sessions have it (an editable
    install elsewhere does not stand in for it)."""
    root = str(Path(harness.__file__).parent.parent)
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)


def _session_modules(tmp_path: Path, body: str) -> tuple[int, list[str]]:
    """Run one check in a pytest session started the way the runner starts one (checks.ini,
    autoload off, the plugin in force with a results file and the handed profile); the exit
    code and the harness/torch modules loaded when the session ended."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_one.py").write_text(
        "from harness.checking import check\n"
        "@check('PF-B-001', title='one', why='w', remedy='r')\n" + body)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"profile": {"name": "local-cpu"}, "source": "test"}))
    argv = [str(suite), "-q", "-c", str(INI), "--rootdir", str(tmp_path), "-p", "pytest_timeout",
            "-p", "no:cacheprovider", "-p", "harness.plugin",
            "--preflight-results", str(tmp_path / "results.jsonl"),
            "--preflight-profile-json", str(profile)]
    code = (f"import sys, pytest; rc = pytest.main({argv!r}); "
            "print(int(rc), ' '.join(m for m in sys.modules "
            "if m.startswith(('harness.', 'torch'))))")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": _this_tree()}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120, env=env, cwd=tmp_path).stdout
    rc, *modules = out.strip().splitlines()[-1].split()
    return int(rc), modules


def test_a_check_session_imports_no_probe_it_does_not_use(tmp_path):
    rc, modules = _session_modules(tmp_path, "def test_one():\n    pass\n")
    assert rc == 0
    assert "harness.fixtures.host" in modules  # every fixture module is registered
    assert [m for m in modules if m.startswith(NOT_IN_A_SESSION)] == []


def test_a_fixture_imports_its_probe_when_a_check_uses_it(tmp_path):
    """The check above fails when a fixture's probe is imported: here one is, by the fixture
    that reads it (and the fixture still gives its fact)."""
    rc, modules = _session_modules(
        tmp_path, "def test_one(nofile_limits):\n    assert nofile_limits[0]\n")
    assert rc == 0
    assert "harness.probes.host" in modules
    assert "harness.probes.network" not in modules


def test_a_check_session_freezes_what_collection_built(tmp_path):
    """The cyclic GC skips the modules, items and fixtures collection made (harness.plugin:
    gc.freeze at the end of collection): the check sees them frozen (fails without it)."""
    rc, _ = _session_modules(tmp_path, "def test_one():\n    import gc\n"
                                       "    assert gc.get_freeze_count() > 1000\n")
    assert rc == 0


#: What a check session of the built-in suite on a CPU profile never imports when its checks
#: only need the library probes (and the checks that need more are not applicable): each the
#: path that imports it where it is needed.
NOT_IN_A_CPU_SESSION = (
    "harness.parsers.unwrap",  # every log parser's: imported with the parser that reads a log
    "harness.parsers.kernel_log",  # the kernel-log reading (GPU profiles)
    "harness.parsers.fi_info",  # harness.probes.network.query_fi_info (EFA profiles)
    "harness.parsers.nccl_log",  # nccl_collective.CollectiveRun.summary: the NCCL debug log (GPU profiles)
    "harness.probes.nccl_tests",  # the bandwidth part's choice on a GPU profile
    "harness.probes.kernel_log",
    "harness.memory",  # PF-LEDGER-001 with PREFLIGHT_LEDGER set
    "harness.report",  # the ledger's stores (uploads)
)


def _builtin_session_modules(tmp_path: Path, keyword: str) -> tuple[int, str, list[str]]:
    """The built-in suite in a check session started as the runner starts one, on local-cpu,
    selecting `keyword`: the exit code, the output's last line and the modules loaded."""
    checks = Path(harness.__file__).parent.parent / "checks"
    argv = [str(checks), "-q", "-c", str(INI), "--rootdir", str(checks.parent), "-p",
            "pytest_timeout", "-p", "no:cacheprovider", "-p", "harness.plugin",
            "--preflight-results", str(tmp_path / "results.jsonl"), "--preflight-profile",
            "local-cpu", "-k", keyword]
    code = (f"import sys, pytest; rc = pytest.main({argv!r}); "
            "print(int(rc), ' '.join(m for m in sys.modules if m.startswith('harness.')))")
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "AWS_EC2_METADATA_DISABLED": "true",
           "PYTHONPATH": _this_tree()}
    env.pop("PREFLIGHT_LEDGER", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=240, env=env, cwd=tmp_path).stdout.splitlines()
    rc, *modules = out[-1].split()
    return int(rc), out[-2], modules


@pytest.mark.parametrize("keyword", [
    "PF-ENV or PF-GPU-006 or PF-GPU-019 or PF-NET-003 or PF-LEDGER or PF-BW-002",
    # the NCCL-log checks read the worker's log: apart from a bandwidth check, which would
    # launch the worker for its sweep on a CPU profile
    "PF-ENV or PF-NET-007",
])
def test_a_cpu_session_of_the_built_in_suite_imports_no_log_parser(tmp_path, keyword):
    """The environment checks (they read the library probes: harness.probes.network) and the
    not-applicable GPU, EFA, NCCL-log, ledger and kernel-log checks collect and run without a
    log parser, the ledger's stores or nccl-tests' probe (fails on 3c19681: 21 such modules
    loaded, and 6 NCCL-log parsers where PF-NET-007's fixture imported them before its gate)."""
    rc, said, modules = _builtin_session_modules(tmp_path, keyword)
    assert rc == 0, said
    assert "passed" in said and "skipped" in said
    assert "harness.probes.network" in modules  # the library versions were read
    assert [m for m in modules if m.startswith(NOT_IN_A_CPU_SESSION)] == []
