"""Run nccl-tests' perf binaries (`all_reduce_perf`, ...) for this job's topology: find the binary,
detect its options from `--help`, build the command line (a pure function of the plan), run it
once within a hard timeout, and keep its raw output whatever happened."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.base import proc
from harness.base.proc_result import ProcResult
from harness.base.settings import get_list, get_str
from harness.parsers import ParseError
from harness.parsers.nccl_tests import parse_nccl_tests
from harness.parsers.nccl_tests_model import NcclTestsResult
from harness.parsers.nccl_tests_table import NOT_MPI
from harness.topology.nodes import count_nodes, sagemaker_hosts

__all__ = [
    "SEARCH_DIRS",
    "Features",
    "LaunchPlan",
    "NcclTestsRun",
    "Sweep",
    "build_command",
    "detect_features",
    "find_binary",
    "passed_env_names",
    "plan_launch",
    "run_nccl_tests",
]

#: Where images put nccl-tests builds (searched after $PREFLIGHT_NCCL_TESTS_DIR and PATH):
#: AWS DLAMI/EFA images, NGC-style /opt builds, the aws-samples containers, source checkouts.
SEARCH_DIRS = (
    "/opt/nccl-tests/build", "/opt/amazon/nccl-tests/build", "/opt/nccl_tests/build",
    "/usr/local/nccl-tests/build", "/workspace/nccl-tests/build", "/usr/local/bin",
)
#: Variables mpirun must forward with `-x` (srun and a single process inherit the environment).
ENV_PREFIXES = ("NCCL_", "FI_", "OFI_", "CUDA_", "RDMAV_", "UCX_", "TORCH_", "AWS_OFI_")
ENV_NAMES = ("LD_LIBRARY_PATH", "PATH", "LD_PRELOAD")
#: Seconds held back between nccl-tests' own `-T` timeout and the hard kill of the process group.
SELF_TIMEOUT_MARGIN_S = 15.0


@dataclass(frozen=True, kw_only=True, slots=True)
class LaunchPlan:
    """How the test is launched: one process (`-g N`), or one rank per GPU through a launcher."""

    launcher: str
    """`single` (one process, `-g N`), `single-mpirun` (mpirun on this node, `-g 1`), `mpirun`
    (multi-node, Open MPI), `srun` (inside a Slurm allocation), or `none` (no launcher found)."""
    num_nodes: int = 1
    gpus_per_node: int = 8
    hosts: tuple[str, ...] = ()
    """Hosts for mpirun's `-H` (SageMaker `hosts`); empty with a hostfile or srun."""
    hostfile: str | None = None
    as_root: bool = False
    """Add Open MPI's `--allow-run-as-root` (containers run as root)."""
    oversubscribe: bool = False
    mpirun: str = "mpirun"
    srun: str = "srun"
    launcher_args: tuple[str, ...] = ()
    """Extra launcher options from $PREFLIGHT_MPIRUN_ARGS / $PREFLIGHT_SRUN_ARGS (site-specific
    MCA parameters, `--mpi=pmix`)."""

    @property
    def nranks(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class Sweep:
    """Sizes and iterations: nccl-tests' `-b -e -f -n -w -c`."""

    min_bytes: int
    max_bytes: int
    step_factor: int = 2
    iters: int = 20
    warmup: int = 5
    check: int = 1
    """`-c`: 1 validates the reduced data (`#wrong`), 0 prints N/A."""


@dataclass(frozen=True, slots=True)
class Features:
    """Options this build of nccl-tests accepts (newer builds only: `-J` JSON, `-T` timeout)."""

    json: bool = False
    timeout: bool = False


def passed_env_names(env: Mapping[str, str]) -> list[str]:
    """Names mpirun must forward with `-x`: NCCL/libfabric/CUDA settings and library paths."""
    return sorted(k for k in env if k.startswith(ENV_PREFIXES) or k in ENV_NAMES)


def _size(n: int) -> str:
    """nccl-tests size argument (it reads K/M/G suffixes as binary multiples)."""
    for suffix, unit in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
    return str(n)


def build_command(
    binary: str,
    plan: LaunchPlan,
    sweep: Sweep,
    *,
    features: Features = Features(),
    env_names: Sequence[str] = (),
    json_path: str | None = None,
    self_timeout_s: int | None = None,
) -> list[str]:
    """The argv for one run; pure (no I/O), so it is tested as a table."""
    gpus_per_process = plan.gpus_per_node if plan.launcher == "single" else 1
    test = [
        binary, "-b", _size(sweep.min_bytes), "-e", _size(sweep.max_bytes),
        "-f", str(sweep.step_factor), "-g", str(gpus_per_process), "-n", str(sweep.iters),
        "-w", str(sweep.warmup), "-c", str(sweep.check),
    ]
    if features.json and json_path:
        test += ["-J", json_path]
    if features.timeout and self_timeout_s:
        test += ["-T", str(self_timeout_s)]
    if plan.launcher == "single":
        return test
    if plan.launcher == "srun":
        return [
            plan.srun, f"--nodes={plan.num_nodes}",
            f"--ntasks-per-node={plan.gpus_per_node}", f"--ntasks={plan.nranks}",
            "--kill-on-bad-exit=1", *plan.launcher_args, *test,
        ]
    if plan.launcher not in ("mpirun", "single-mpirun"):
        raise ValueError(f"launcher {plan.launcher!r} cannot run nccl-tests")
    argv = [plan.mpirun]
    if plan.as_root:
        argv.append("--allow-run-as-root")
    if plan.oversubscribe:
        argv.append("--oversubscribe")
    argv += ["--bind-to", "none", "-np", str(plan.nranks)]
    if plan.launcher == "mpirun":
        argv += ["--map-by", f"ppr:{plan.gpus_per_node}:node"]
        if plan.hostfile:
            argv += ["--hostfile", plan.hostfile]
        elif plan.hosts:
            argv += ["-H", ",".join(f"{h}:{plan.gpus_per_node}" for h in plan.hosts)]
    for name in env_names:
        argv += ["-x", name]
    return [*argv, *plan.launcher_args, *test]


# --- which launcher ------------------------------------------------------------------------

def plan_launch(
    env: Mapping[str, str],
    *,
    gpus_per_node: int,
    sm_config: Mapping[str, object] | None = None,
    which: Callable[[str], str | None] = proc.which,
    as_root: bool | None = None,
) -> LaunchPlan:
    """Choose the launcher: one process with `-g N` on one node; srun inside Slurm; else mpirun
    with a hostfile ($PREFLIGHT_HOSTFILE) or the SageMaker host list; `none` when nothing fits."""
    nodes = count_nodes(env, sm_config).num_nodes
    root = (os.geteuid() == 0) if as_root is None else as_root
    found_mpirun = get_str("PREFLIGHT_MPIRUN", env) or which("mpirun")
    mpirun = found_mpirun or "mpirun"
    mpi_args = tuple(get_list("PREFLIGHT_MPIRUN_ARGS", env))
    if nodes == 1:
        if get_str("PREFLIGHT_NCCL_TESTS_LAUNCHER", env) == "mpirun":
            return LaunchPlan(launcher="single-mpirun", gpus_per_node=gpus_per_node, as_root=root,
                            mpirun=mpirun, launcher_args=mpi_args)
        return LaunchPlan(launcher="single", gpus_per_node=gpus_per_node)
    if env.get("SLURM_JOB_ID") and which("srun"):
        return LaunchPlan(launcher="srun", num_nodes=nodes, gpus_per_node=gpus_per_node,
                        srun=which("srun") or "srun",
                        launcher_args=tuple(get_list("PREFLIGHT_SRUN_ARGS", env)))
    hostfile = get_str("PREFLIGHT_HOSTFILE", env) or env.get("OMPI_MCA_orte_default_hostfile")
    hosts = () if hostfile else tuple(sagemaker_hosts(env, sm_config))
    if found_mpirun and (hostfile or hosts):
        return LaunchPlan(launcher="mpirun", num_nodes=nodes, gpus_per_node=gpus_per_node,
                        hostfile=hostfile, hosts=hosts, as_root=root,
                        mpirun=mpirun, launcher_args=mpi_args)
    return LaunchPlan(launcher="none", num_nodes=nodes, gpus_per_node=gpus_per_node)


# --- the binary and its options ----------------------------------------------------------------

def find_binary(name: str, env: Mapping[str, str]) -> str | None:
    """`name` (or `name_mpi`) from $PREFLIGHT_NCCL_TESTS_DIR, PATH, then SEARCH_DIRS."""
    dirs = [d] if (d := get_str("PREFLIGHT_NCCL_TESTS_DIR", env)) else []
    for candidate in (name, f"{name}_mpi"):
        for directory in dirs:
            if (found := proc.which(candidate, path=directory)) is not None:
                return found
        if (found := proc.which(candidate, path=env.get("PATH", os.defpath))) is not None:
            return found
        if (found := proc.which(candidate, path=os.pathsep.join(SEARCH_DIRS))) is not None:
            return found
    return None


_JSON_OPT = re.compile(r"(?:^|\s|\[)-J\b|--output_file")
_TIMEOUT_OPT = re.compile(r"(?:^|\s|\[)-T\b|--timeout")


def detect_features(binary: str, env: Mapping[str, str], timeout_s: float = 15.0) -> Features:
    """Options the binary lists in its `--help` (it prints usage and exits before any CUDA call)."""
    result = proc.run([binary, "--help"], timeout_s=timeout_s, env=env)
    text = result.output
    return Features(json=bool(_JSON_OPT.search(text)), timeout=bool(_TIMEOUT_OPT.search(text)))


# --- one run -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NcclTestsRun:
    """One nccl-tests run: the command, what the process did, and the parsed result (if any)."""

    command: tuple[str, ...]
    proc: ProcResult
    result: NcclTestsResult | None
    parse_error: str | None = None
    features: Features = field(default_factory=Features)
    json_path: str | None = None
    expected_ranks: int | None = None
    """The ranks launched (nodes x GPUs per node); None when unknown."""

    @property
    def raw_output(self) -> str:
        """Everything the run printed (kept for the report even when it hung or crashed)."""
        return self.proc.output

    @property
    def ok(self) -> bool:
        r = self.result
        return (self.proc.ok and r is not None and r.completed and not r.errors
                and not r.busbw_mismatches and self._missing_ranks() is None)

    def _missing_ranks(self) -> str | None:
        """One launch must print one test over every rank launched. A binary built without MPI
        runs one whole test per process (1-rank tables that may follow one another, each
        looking complete); fewer ranks than launched also means ranks never joined."""
        r, launched = self.result, self.expected_ranks
        if r is None:
            return None
        if r.num_runs > 1:
            return f"{self.command[0]} printed {r.num_runs} separate runs for one launch: {NOT_MPI}"
        if r.nranks is None or launched is None or r.nranks >= launched:
            return None
        return (f"{self.command[0]} ran with {r.nranks} rank(s) of the {launched} launched: "
                f"{NOT_MPI}, or ranks did not join")

    def problem(self) -> str | None:
        """Why this run gives no trustworthy measurement, in one line; None when it does."""
        r = self.result
        if self.proc.error is not None:
            return self.proc.describe()
        if self.proc.timed_out:
            rows = f"; {len(r.rows)} row(s) printed before it was killed" if r and r.rows else ""
            return self.proc.describe() + rows
        if r is not None and r.errors:
            return f"{self.command[0]} failed: {r.errors[0]}"
        if r is None:
            return f"{self.proc.describe()}; output not readable: {self.parse_error}"
        if not r.completed:
            return (f"{self.proc.describe()}; output ends without the `# Avg bus bandwidth` "
                    f"footer after {len(r.rows)} row(s)")
        if self.proc.returncode != 0:
            return self.proc.describe()
        return self._missing_ranks()


def run_nccl_tests(
    binary: str,
    plan: LaunchPlan,
    sweep: Sweep,
    *,
    env: Mapping[str, str],
    timeout_s: float,
    workdir: str | os.PathLike[str],
    collective: str | None = None,
) -> NcclTestsRun:
    """Detect options, run once with a hard timeout (process group killed), parse the output."""
    features = detect_features(binary, env)
    json_path = str(Path(workdir) / "nccl-tests.json") if features.json else None
    if json_path:
        Path(json_path).unlink(missing_ok=True)
    self_timeout = (int(timeout_s - SELF_TIMEOUT_MARGIN_S)
                    if timeout_s > 2 * SELF_TIMEOUT_MARGIN_S else None)
    argv = build_command(
        binary, plan, sweep, features=features, env_names=passed_env_names(env),
        json_path=json_path, self_timeout_s=self_timeout,
    )
    result = proc.run(argv, timeout_s=timeout_s, env=env, cwd=workdir)
    name = collective or re.sub(r"(_perf)?(_mpi)?$", "", Path(binary).name)
    parsed, error = _parse(result, json_path, name)
    return NcclTestsRun(tuple(argv), result, parsed, error, features, json_path,
                        expected_ranks=plan.nranks)


def _parse(
    result: ProcResult, json_path: str | None, collective: str
) -> tuple[NcclTestsResult | None, str | None]:
    text_result: NcclTestsResult | None = None
    error: str | None = None
    try:
        text_result = parse_nccl_tests(result.output, collective=collective)
    except ParseError as exc:
        error = str(exc)
    if json_path and Path(json_path).is_file():
        try:
            json_result = parse_nccl_tests(Path(json_path).read_text(errors="replace"),
                                           collective=collective)
        except (ParseError, OSError):
            return text_result, error
        # The JSON file has the rows; failure lines are only ever printed on the terminal.
        if text_result is not None and text_result.errors:
            return text_result, None
        return json_result, None
    return text_result, error
