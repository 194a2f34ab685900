"""The container without a Docker engine: container/Dockerfile parsed and checked statically, and
container/entrypoint.sh run with a fake `preflight` on PATH (argv recorded, exit codes, the
SageMaker `train` / SAGEMAKER_PROGRAM flows, exec), then once with the real CLI."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dockerfile import DOCKERFILE, Instruction, parse_dockerfile

REPO = Path(__file__).resolve().parent.parent
ENTRYPOINT = REPO / "container" / "entrypoint.sh"


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def args_declared(instructions: list[Instruction]) -> dict[str, str]:
    declared = {}
    for ins in instructions:
        if ins.name == "ARG":
            name, _, default = ins.args.partition("=")
            declared[name] = default.strip('"')
    return declared


def test_from_takes_the_base_image_arg(instructions: list[Instruction]) -> None:
    first_from = next(i for i, ins in enumerate(instructions) if ins.name == "FROM")
    before = instructions[:first_from]
    assert [ins.name for ins in before] == ["ARG"]
    name, _, default = before[0].args.partition("=")
    assert name == "BASE_IMAGE"
    assert re.fullmatch(r"763104351884\.dkr\.ecr\.[a-z0-9-]+\.amazonaws\.com/pytorch-training:"
                        r"[\w.-]+-gpu-py3\d+-cu\d+-ubuntu[\d.]+-sagemaker", default), default
    assert instructions[first_from].args == "${BASE_IMAGE}"
    assert sum(ins.name == "FROM" for ins in instructions) == 1


def test_build_args_present(instructions: list[Instruction]) -> None:
    declared = args_declared(instructions)
    assert declared["INSTALL_TE"] == "0"
    assert declared["MPI_HOME"] == "/opt/amazon/openmpi"
    assert declared["CUDA_HOME"] == "/usr/local/cuda"
    for name in ("NCCL_HOME", "NCCL_TESTS_VERSION", "NVCC_GENCODE", "TE_VERSION"):
        assert name in declared
    assert "sm_90" in declared["NVCC_GENCODE"]
    # g7e's sm_120 runs only its own cubin or PTX (an sm_100 build has no kernel for it)
    assert "code=sm_120" in declared["NVCC_GENCODE"]
    assert "code=compute_120" in declared["NVCC_GENCODE"]


def test_every_variable_used_is_declared(instructions: list[Instruction]) -> None:
    declared = set(args_declared(instructions))
    declared |= {ins.args.partition("=")[0] for ins in instructions if ins.name == "ENV"}
    # Variables the shell computes or the base image sets.
    declared |= {"PATH", "cuda_major"}
    used = set()
    for ins in instructions:
        if ins.name in ("RUN", "FROM", "ENV", "COPY", "LABEL"):
            used |= set(re.findall(r"\$\{(\w+)", ins.args))
    assert used - declared == set()


def test_nccl_tests_built_with_mpi(instructions: list[Instruction]) -> None:
    runs = [ins.args for ins in instructions if ins.name == "RUN"]
    build = next(r for r in runs if "nccl-tests" in r and "make" in r)
    make = build[build.index("make "):]
    for part in ("MPI=1", 'MPI_HOME="${MPI_HOME}"', 'CUDA_HOME="${CUDA_HOME}"',
                 'NCCL_HOME="${NCCL_HOME}"', 'NVCC_GENCODE="${NVCC_GENCODE}"'):
        assert part in make
    assert '--branch "${NCCL_TESTS_VERSION}"' in build
    assert "/opt/nccl-tests/bin" in build
    env = [ins.args for ins in instructions if ins.name == "ENV"]
    assert "PATH=/opt/nccl-tests/bin:${PATH}" in env


INSTALL_SCRIPT = "scripts/install_wheel.py"
SRC_IN_IMAGE = "/opt/gpu-preflight/src"


def _install_run(instructions: list[Instruction]) -> list[str]:
    """The RUN that installs the harness, as argv (its first command, before `&&`)."""
    runs = [ins.args for ins in instructions if ins.name == "RUN"]
    install = next(r for r in runs if INSTALL_SCRIPT in r)
    return shlex.split(install.split("&&")[0])


def test_harness_installed_without_replacing_torch(instructions: list[Instruction]) -> None:
    argv = _install_run(instructions)
    assert argv[1] == f"{SRC_IN_IMAGE}/{INSTALL_SCRIPT}"
    assert argv[3] == "aws", "extras: aws only; torch comes from the image"
    assert not any("torch" in a for a in argv)
    runs = [ins.args for ins in instructions if ins.name == "RUN"]
    assert not any("pip install" in r and "/opt/gpu-preflight" in r for r in runs), (
        "install the built wheel (scripts/install_wheel.py), never the source tree")
    te = next(r for r in runs if "install_te.py" in r)
    assert 'if [ "${INSTALL_TE}" = "1" ]' in te
    assert 'python3 /opt/gpu-preflight/install_te.py "${TE_VERSION}"' in te


def test_image_installs_the_way_ci_tests(instructions: list[Instruction]) -> None:
    """The image's install command is the one CI's shipped venvs are built with."""
    from tests.e2e.shipped import INSTALL_WHEEL

    assert INSTALL_WHEEL == REPO / INSTALL_SCRIPT
    assert "tests.e2e.shipped prepare" in (REPO / "scripts" / "test").read_text()
    copies = [shlex.split(ins.args) for ins in instructions if ins.name == "COPY"]
    assert [INSTALL_SCRIPT, f"{SRC_IN_IMAGE}/{INSTALL_SCRIPT}"] in copies
    install = next(ins.args for ins in instructions if ins.name == "RUN" and INSTALL_SCRIPT in ins.args)
    assert f"rm -rf {SRC_IN_IMAGE}" in install, "the sources are removed after the install"


def _context_like_the_image(instructions: list[Instruction], root: Path) -> Path:
    """The files the Dockerfile copies into SRC_IN_IMAGE, laid out under root (no .git, as in
    the image), plus what a stale tree carries: an earlier build's build/lib and caches."""
    for ins in instructions:
        if ins.name != "COPY" or SRC_IN_IMAGE not in ins.args:
            continue
        *sources, dest = shlex.split(ins.args)
        target = root / dest.removeprefix(SRC_IN_IMAGE + "/").removeprefix(SRC_IN_IMAGE)
        for source in sources:
            src = REPO / source
            if src.is_dir():
                shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                dest_file = target / src.name if dest.endswith("/") else target
                dest_file.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest_file)
    stale = root / "build" / "lib" / "harness" / "removed_since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("raise ImportError('a module deleted from the sources')\n")
    return root


def test_install_step_ships_the_sources_not_a_stale_tree(
    instructions: list[Instruction], tmp_path: Path,
) -> None:
    """The Dockerfile's install command, run here on a copy of its build context: the wheel has
    every file of the packages and nothing a stale build/ folder holds (which `pip install
    /opt/gpu-preflight` of a used tree would ship)."""
    src = _context_like_the_image(instructions, tmp_path / "src")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    argv = _install_run(instructions)
    script = src / argv[1].removeprefix(SRC_IN_IMAGE + "/")
    # Only the package itself: its dependencies (boto3, pytest ...) are not what this is about.
    res = subprocess.run([python, str(script), python, "", *argv[4:], "--no-deps"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert res.returncode == 0, res.stdout + res.stderr
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    assert f"installed at {site / 'harness'}" in res.stdout
    assert not (site / "harness" / "removed_since.py").exists()
    shipped = {p.relative_to(src) for p in src.rglob("*") if p.is_file()
               and p.parts[len(src.parts)] in ("harness", "checks")}
    missing = sorted(str(p) for p in shipped if not (site / p).is_file())
    assert missing == [], f"in the image's sources but not installed: {missing}"


def test_copy_sources_exist(instructions: list[Instruction]) -> None:
    copies = [ins for ins in instructions if ins.name == "COPY"]
    assert copies
    for ins in copies:
        *sources, _dest = shlex.split(ins.args)
        for source in sources:
            assert not source.startswith("--"), f"line {ins.line}: flags not expected"
            assert (REPO / source).exists(), f"line {ins.line}: COPY {source}: not in the repo"
    dockerignore = (REPO / "container" / "Dockerfile.dockerignore").read_text().splitlines()
    for ins in copies:
        for source in shlex.split(ins.args)[:-1]:
            assert f"!{source}" in dockerignore or f"!{source}/" in dockerignore, source


def test_entrypoint_exec_form(instructions: list[Instruction]) -> None:
    entry = [ins for ins in instructions if ins.name == "ENTRYPOINT"]
    assert len(entry) == 1
    assert json.loads(entry[0].args) == ["/usr/local/bin/preflight-entrypoint"]
    copy = next(ins for ins in instructions if ins.name == "COPY" and "entrypoint.sh" in ins.args)
    assert copy.args.split()[-1] == "/usr/local/bin/preflight-entrypoint"
    assert instructions[-1].name == "ENTRYPOINT"
    assert not any(ins.name == "CMD" for ins in instructions)


def test_parser_joins_continuations() -> None:
    parsed = parse_dockerfile("# c\nARG A=1\nRUN a \\\n  # inner comment\n  && b\n\nFROM x\n")
    assert parsed == [Instruction("ARG", "A=1", 2), Instruction("RUN", "a && b", 3),
                      Instruction("FROM", "x", 7)]


# ------------------------------------------------------------------------------ entrypoint.sh

FAKE_PREFLIGHT = """#!/usr/bin/env bash
# Records its PID, argv (one per line) and selected env, then exits with FAKE_PREFLIGHT_RC.
{ echo "pid=$$"; for a in "$@"; do echo "arg=$a"; done;
  echo "tier=${PREFLIGHT_TIER:-}"; echo "program=${SAGEMAKER_PROGRAM:-}";
  echo "dcgm_host=${PREFLIGHT_DCGM_HOST:-}";
  echo "sigblk=$(sed -n 's/^SigBlk:[[:space:]]*//p' /proc/self/status)"; } > "$FAKE_RECORD"
exit "${FAKE_PREFLIGHT_RC:-0}"
"""


@dataclass
class Ran:
    returncode: int
    pid: int
    argv: list[str]
    env: dict[str, str]
    stderr: str


@pytest.fixture
def fake_bin(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "preflight"
    fake.write_text(FAKE_PREFLIGHT)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return bin_dir


def _closed_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_entrypoint(fake_bin: Path, *args: str, rc: int = 0, **env: str) -> Ran:
    record = fake_bin.parent / "record.txt"
    record.unlink(missing_ok=True)
    base = {"PATH": f"{fake_bin}:/usr/bin:/bin", "FAKE_RECORD": str(record),
            "FAKE_PREFLIGHT_RC": str(rc), "PREFLIGHT_OPT_ML": str(fake_bin.parent / "opt_ml"),
            "PREFLIGHT_DLC_ENTRY": str(fake_bin.parent / "no-dlc-entry.sh"),
            # No host engine answers unless a test starts a listener on these.
            "PREFLIGHT_DCGM_PORT": str(_closed_port()),
            "PREFLIGHT_DCGM_SOCKET": str(fake_bin.parent / "no-hostengine.sock")}
    proc = subprocess.Popen(["bash", str(ENTRYPOINT), *args], env={**base, **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=30)
    lines = record.read_text().splitlines()
    values = dict(line.split("=", 1) for line in lines if not line.startswith("arg="))
    return Ran(returncode=proc.returncode, pid=proc.pid,
               argv=[line[4:] for line in lines if line.startswith("arg=")],
               env=values, stderr=err)


@pytest.mark.parametrize(("args", "expected"), [
    (["torchrun", "--nproc-per-node=8", "train.py", "--lr", "3e-4"],
     ["run", "--", "torchrun", "--nproc-per-node=8", "train.py", "--lr", "3e-4"]),
    ([], ["run"]),
    (["python", "-c", "print('a b')"], ["run", "--", "python", "-c", "print('a b')"]),
    (["--", "x"], ["run", "--", "--", "x"]),
    (["serve"], ["run", "--", "serve"]),
])
def test_entrypoint_hands_the_command_to_preflight(
    fake_bin: Path, args: list[str], expected: list[str],
) -> None:
    ran = run_entrypoint(fake_bin, *args)
    assert ran.argv == expected
    assert ran.returncode == 0


@pytest.mark.parametrize("rc", [0, 1, 2, 3, 127])
def test_entrypoint_exit_status_is_preflights(fake_bin: Path, rc: int) -> None:
    assert run_entrypoint(fake_bin, "torchrun", "train.py", rc=rc).returncode == rc


def test_entrypoint_execs_preflight(fake_bin: Path) -> None:
    """Same PID: the scheduler's signals reach preflight (and the trainer after it)."""
    ran = run_entrypoint(fake_bin, "echo", "ok")
    assert int(ran.env["pid"]) == ran.pid


def test_entrypoint_hands_preflight_the_signals_held(fake_bin: Path) -> None:
    """SIGTERM, SIGINT and SIGHUP blocked from before preflight's interpreter starts: one that
    comes while it loads waits for its handlers (harness.base.sigmask) instead of killing it."""
    held = int(run_entrypoint(fake_bin, "echo", "ok").env["sigblk"], 16)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        assert held & (1 << (sig - 1)), f"{sig.name} not held: SigBlk {held:016x}"


def test_preflight_args_are_added(fake_bin: Path) -> None:
    ran = run_entrypoint(fake_bin, "torchrun", "t.py", PREFLIGHT_ARGS="--tier certify -v")
    assert ran.argv == ["run", "--tier", "certify", "-v", "--", "torchrun", "t.py"]
    assert run_entrypoint(fake_bin, PREFLIGHT_ARGS="-v").argv == ["run", "-v"]


def test_sagemaker_train_without_program_runs_checks_only(fake_bin: Path) -> None:
    ran = run_entrypoint(fake_bin, "train", PREFLIGHT_TIER="certify", rc=1)
    assert ran.argv == ["run"]
    assert ran.env["tier"] == "certify"
    assert ran.returncode == 1
    assert "no SAGEMAKER_PROGRAM: running the checks only" in ran.stderr


def test_sagemaker_program_hands_off_to_the_toolkit(fake_bin: Path) -> None:
    ran = run_entrypoint(fake_bin, "train", SAGEMAKER_PROGRAM="train.py")
    assert ran.argv == ["run", "--", "train"]
    assert ran.env["program"] == "train.py"


def test_sagemaker_program_hyperparameter_hands_off(fake_bin: Path) -> None:
    config = fake_bin.parent / "opt_ml" / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text('{"sagemaker_program": "\\"train.py\\"", '
                                                  '"epochs": "3"}')
    assert run_entrypoint(fake_bin, "train").argv == ["run", "--", "train"]
    (config / "hyperparameters.json").write_text('{"epochs": "3"}')
    assert run_entrypoint(fake_bin, "train").argv == ["run"]


def test_sagemaker_train_goes_through_the_dlc_hostname_script(fake_bin: Path) -> None:
    dlc = fake_bin.parent / "start_with_right_hostname.sh"
    dlc.write_text("#!/bin/bash\n")
    ran = run_entrypoint(fake_bin, "train", "--extra", SAGEMAKER_PROGRAM="train.py",
                         PREFLIGHT_DLC_ENTRY=str(dlc))
    assert ran.argv == ["run", "--", "bash", "-m", str(dlc), "train", "--extra"]


def test_entrypoint_with_the_real_cli(tmp_path: Path) -> None:
    """`docker run IMAGE echo handed-off` on this machine (local-cpu): checks pass, echo runs."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "preflight"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m harness "$@"\n')
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "PREFLIGHT_PROFILE": "local-cpu", "PREFLIGHT_HOSTNAME": "container-test",
           "PREFLIGHT_REPORT_DIR": str(tmp_path / "reports"),
           "PREFLIGHT_OPT_ML": str(tmp_path / "opt_ml")}
    res = subprocess.run(["bash", str(ENTRYPOINT), "echo", "handed-off"], env=env,
                         capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert res.stdout.rstrip().endswith("handed-off")
    report = json.loads((tmp_path / "reports" / "container-test" / "report.json").read_text())
    assert report["verdict"] == "pass"
    assert report["command"] == ["echo", "handed-off"]


def test_dcgm_installed_for_the_images_cuda(instructions: list[Instruction]) -> None:
    declared = args_declared(instructions)
    assert declared["INSTALL_DCGM"] == "1"
    runs = [ins.args for ins in instructions if ins.name == "RUN"]
    dcgm = next(r for r in runs if "datacenter-gpu-manager" in r)
    assert 'if [ "${INSTALL_DCGM}" = "1" ]' in dcgm
    assert '"datacenter-gpu-manager-4-cuda${cuda_major}"' in dcgm
    assert "cuda-keyring" in dcgm and "dcgmi --version" in dcgm


def test_entrypoint_starts_the_dcgm_host_engine_once(fake_bin: Path) -> None:
    """No engine answers (no host engine, no socket): one is started, on the probed port."""
    started = _fake_hostengine(fake_bin)
    ran = run_entrypoint(fake_bin, "python", "train.py")
    assert ran.argv == ["run", "--", "python", "train.py"]
    port = ran.env["dcgm_host"].removeprefix("127.0.0.1:")
    assert started.read_text() == f"started -p {port}\n"


def test_entrypoint_without_dcgm_does_not_complain(fake_bin: Path) -> None:
    ran = run_entrypoint(fake_bin, "python", "train.py")
    assert ran.returncode == 0 and "nv-hostengine" not in ran.stderr


def _fake_hostengine(fake_bin: Path) -> Path:
    """A fake `nv-hostengine` on PATH that records each start; returns the record."""
    started = fake_bin.parent / "hostengine.started"
    engine = fake_bin / "nv-hostengine"
    engine.write_text(f'#!/bin/sh\necho "started $*" >> {started}\n')
    engine.chmod(engine.stat().st_mode | stat.S_IXUSR)
    return started


def test_entrypoint_uses_the_hosts_engine_on_its_tcp_port(fake_bin: Path) -> None:
    """The node runs nv-hostengine (the container shares its network): none is started here,
    and dcgmi is pointed at its port when that is not the default."""
    started = _fake_hostengine(fake_bin)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        ran = run_entrypoint(fake_bin, "python", "train.py", PREFLIGHT_DCGM_PORT=str(port))
    assert ran.argv == ["run", "--", "python", "train.py"]
    assert not started.exists()
    assert f"using the nv-hostengine at 127.0.0.1:{port}" in ran.stderr
    assert ran.env["dcgm_host"] == f"127.0.0.1:{port}"


def test_entrypoint_uses_the_hosts_engine_on_a_mounted_socket(fake_bin: Path) -> None:
    started = _fake_hostengine(fake_bin)
    path = fake_bin.parent / "nv-hostengine.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()
        ran = run_entrypoint(fake_bin, "python", "train.py", PREFLIGHT_DCGM_SOCKET=str(path))
    assert not started.exists()
    assert ran.env["dcgm_host"] == f"unix://{path}"


def test_a_stale_socket_file_is_not_an_engine(fake_bin: Path) -> None:
    """A socket file left by an engine that exited: nothing answers, one is started."""
    started = _fake_hostengine(fake_bin)
    path = fake_bin.parent / "stale.sock"
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
    ran = run_entrypoint(fake_bin, "python", "train.py", PREFLIGHT_DCGM_SOCKET=str(path))
    assert started.read_text().startswith("started -p ")
    assert ran.env["dcgm_host"].startswith("127.0.0.1:")


def test_a_named_engine_is_used_and_none_started(fake_bin: Path) -> None:
    started = _fake_hostengine(fake_bin)
    ran = run_entrypoint(fake_bin, "python", "train.py", PREFLIGHT_DCGM_HOST="10.0.0.7:5555")
    assert not started.exists()
    assert ran.env["dcgm_host"] == "10.0.0.7:5555"


# ------------------------------------------------------------------------- install_te.py

def _install_te():
    import importlib.util

    spec = importlib.util.spec_from_file_location("install_te", REPO / "container" /
                                                  "install_te.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("major", "version", "expected"), [
    (12, "", "transformer_engine[pytorch,core_cu12]"),
    (13, "", "transformer_engine[pytorch,core_cu13]"),
    (13, "2.9", "transformer_engine[pytorch,core_cu13]==2.9"),
    (13, "2.10.0", "transformer_engine[pytorch,core_cu13]==2.10.0"),
    (12, "1.13.0", "transformer_engine[pytorch,core_cu12]==1.13.0"),
])
def test_te_core_wheel_follows_the_cuda_major_of_torch(major, version, expected) -> None:
    assert _install_te().requirement(major, version) == expected


@pytest.mark.parametrize(("major", "version", "why"), [
    (13, "2.8", "TE_VERSION=2.8 has no CUDA 13 core wheel (the first is 2.9)"),
    (13, "1.13.0", "TE_VERSION=1.13.0 has no CUDA 13 core wheel"),
    (None, "", "built for CUDA none (a CPU build)"),
    (11, "", "built for CUDA 11: TransformerEngine has core wheels for CUDA 12 and 13 only"),
])
def test_no_te_for_this_torch_stops_the_build(major, version, why) -> None:
    with pytest.raises(ValueError, match=re.escape(why)):
        _install_te().requirement(major, version)


@pytest.mark.parametrize(("installed", "major", "problems"), [
    ({"transformer_engine": "2.10", "transformer_engine_torch": "2.10",
      "transformer_engine_cu13": "2.10"}, 13, []),
    # The cu12 core of the default `[pytorch]` extra on a cu13 image.
    ({"transformer_engine": "2.10", "transformer_engine_torch": "2.10",
      "transformer_engine_cu12": "2.10"}, 13, ["transformer_engine_cu13 is not installed",
                                               "transformer_engine_cu12 2.10 is installed too"]),
    ({"transformer_engine": "2.10", "transformer_engine_torch": "2.9",
      "transformer_engine_cu12": "2.10"}, 12,
     ["TE package versions differ: transformer_engine 2.10, transformer_engine_torch 2.9"]),
    ({"transformer_engine": "2.10", "transformer_engine_cu12": "2.10"}, 12,
     ["transformer_engine_torch is not installed"]),
])
def test_installed_te_packages_are_checked(installed, major, problems) -> None:
    found = _install_te().install_problems(major, installed.get)
    assert len(found) == len(problems)
    for got, want in zip(found, problems, strict=True):
        assert got.startswith(want), got


@pytest.mark.parametrize(("stderr", "problem"), [
    ("", None),
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory", None),
    ("RuntimeError: cudnn shared object not found.", "RuntimeError: cudnn shared object not "
     "found."),
    ("AssertionError: Transformer Engine package version mismatch. Found "
     "transformer_engine_torch v2.10.0, transformer-engine v2.10.0, and "
     "transformer-engine-cu12 v2.9.0.", "AssertionError: Transformer Engine package version "
     "mismatch."),
])
def test_a_te_that_does_not_import_stops_the_build(tmp_path: Path, stderr: str,
                                                   problem: str | None) -> None:
    """A stand-in python whose `import transformer_engine.pytorch` prints TE's own errors
    (transformer_engine/common/__init__.py) and exits 1, or succeeds."""
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\n[ -z {shlex.quote(stderr)} ] && exit 0\n"
                    f"echo 'Traceback (most recent call last):' >&2\n"
                    f"echo {shlex.quote(stderr)} >&2\nexit 1\n")
    fake.chmod(0o755)
    got = _install_te().import_problem(str(fake))
    assert (got is None) if problem is None else got.startswith(problem)


def test_runtime_test_image_installs_and_starts_as_the_dockerfile_does(
        instructions: list[Instruction]) -> None:
    """tests/e2e/container_image.py builds the podman-tested image from the Dockerfile's own
    install step, entrypoint COPY and ENTRYPOINT, verbatim; only the nccl-tests probe is left out."""
    from tests.e2e import container_image

    text = container_image.containerfile("localhost/base:x")
    install = next(i for i in instructions if i.name == "RUN" and INSTALL_SCRIPT in i.args)
    entry = next(i for i in instructions if i.name == "ENTRYPOINT")
    assert install.text() in text.splitlines()
    assert entry.text() == text.splitlines()[-1]
    assert "all_reduce_perf" not in text and "FROM localhost/base:x" in text
    broken = [i for i in instructions if i.name != "ENTRYPOINT"]
    with pytest.raises(RuntimeError, match="expected one ENTRYPOINT"):
        container_image.harness_layers(broken)
