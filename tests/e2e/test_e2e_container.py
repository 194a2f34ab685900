"""The image's contract in a real container runtime (podman + runc): container/Dockerfile's install
step and entrypoint on a Debian base (tests/e2e/container_image.py says what differs from the
DLC image and why).

- the entrypoint runs as PID 1, runs the preflight and execs the training command: the trainer
  is PID 1 too, and nothing the preflight started is left beside it;
- `podman stop` (SIGTERM to PID 1, which the kernel delivers to PID 1 of a namespace only
  where a handler is installed) mid-run: exit 143, the interrupted report and the failure file
  in the mounted /opt/ml, before podman's SIGKILL;
- a failing node (p5.48xlarge with no GPU): exit 1, the failure file and the report;
- SageMaker's `docker run IMAGE train`: the checks, then the toolkit's `train` as PID 1; with no
  program, the checks alone.

scripts/test installs podman (as root) and sets GPU_PREFLIGHT_TEST_PODMAN=1: there a podman
that cannot run is an error. Elsewhere the tests skip, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e import container_image

#: The first test builds the image when scripts/test has not (debootstrap: minutes).
pytestmark = pytest.mark.timeout(1800)
REQUIRED_ENV = "GPU_PREFLIGHT_TEST_PODMAN"
#: The host name the runs report under (SageMaker's current_host).
HOST = "algo-1"
#: `podman stop`'s grace before SIGKILL, s: the preflight's own bound is 10 s
#: (tests/e2e/test_e2e_signals.py); the rest is slack for a loaded machine.
STOP_GRACE_S = 60
#: Checks the passing runs select: the environment checks judge facts every container has. The
#: local-cpu profile's other checks need torch, which the DLC has and this image does not.
PASSING = "-k PF-ENV"


@pytest.fixture(scope="module")
def image() -> str:
    why = container_image.unusable()
    if why is not None:
        if os.environ.get(REQUIRED_ENV) == "1":
            pytest.fail(f"{REQUIRED_ENV}=1 but podman cannot run: {why}")
        pytest.skip(f"podman cannot run here: {why}")
    return container_image.image()


@pytest.fixture
def opt_ml(tmp_path: Path) -> Path:
    """A SageMaker /opt/ml to mount: resourceconfig.json (one host), empty hyperparameters."""
    root = tmp_path / "opt_ml"
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "resourceconfig.json").write_text(json.dumps({
        "current_host": HOST, "hosts": [HOST], "current_group_name": "homogeneousCluster",
        "current_instance_type": "ml.p5.48xlarge", "network_interface_name": "eth0"}))
    (config / "hyperparameters.json").write_text("{}")
    (root / "output").mkdir()
    return root


@pytest.fixture
def name() -> Iterator[str]:
    """A container name; the container is removed after the test, whatever happened."""
    value = f"gpu-preflight-test-{uuid.uuid4().hex[:12]}"
    yield value
    container_image.podman("rm", "-f", "-t", "0", value, check=False, timeout=120)


def run_argv(image: str, name: str, opt_ml: Path, *args: str, env: dict[str, str],
             mounts: tuple[str, ...] = ()) -> list[str]:
    argv = [*container_image.podman_argv(), "run", "--name", name,
            *container_image.run_options(), "-v", f"{opt_ml}:/opt/ml"]
    for mount in mounts:
        argv += ["-v", mount]
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    return [*argv, image, *args]


def run(image: str, name: str, opt_ml: Path, *args: str, env: dict[str, str],
        mounts: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(run_argv(image, name, opt_ml, *args, env=env, mounts=mounts),
                          capture_output=True, text=True, timeout=600, check=False)


def report_of(opt_ml: Path) -> dict:
    """The report the run left where SageMaker uploads from."""
    path = opt_ml / "output" / "data" / "preflight" / HOST / "report.json"
    assert path.is_file(), f"no {path}"
    return json.loads(path.read_text())


def output_of(res: subprocess.CompletedProcess[str]) -> str:
    return f"exit {res.returncode}\n--- stdout\n{res.stdout[-4000:]}\n--- stderr\n{res.stderr[-4000:]}"


#: The trainer: says its PID and lists every process of the container (procps' ps).
TRAINER = "echo trainer-pid=$$; ps -eo pid=,args="


def test_entrypoint_runs_the_preflight_then_execs_the_trainer_as_pid_1(
        image: str, name: str, opt_ml: Path) -> None:
    res = run(image, name, opt_ml, "sh", "-c", TRAINER,
              env={"PREFLIGHT_PROFILE": "local-cpu", "PREFLIGHT_ARGS": PASSING})
    assert res.returncode == 0, output_of(res)
    assert "trainer-pid=1\n" in res.stdout, output_of(res)
    listed = res.stdout.split("trainer-pid=1\n", 1)[1].splitlines()
    procs = {int(pid): args for pid, _, args in (line.strip().partition(" ") for line in listed)}
    # The trainer (PID 1) and its `ps`: nothing the preflight started is left beside it.
    assert procs.pop(1) == f"sh -c {TRAINER}", listed
    assert [a for a in procs.values() if not a.startswith("ps -eo")] == [], listed
    report = report_of(opt_ml)
    assert report["verdict"] == "pass", report.get("verdict")
    assert report["command"] == ["sh", "-c", TRAINER]
    assert not (opt_ml / "output" / "failure").exists()


#: A tool that hangs: the stand-in nvidia-smi says it started (in the mounted /opt/ml), then waits.
HANGING_TOOL = "#!/bin/sh\ntouch /opt/ml/tool-started\nexec sleep 600\n"


def test_podman_stop_mid_run_writes_the_interrupted_report_and_failure_file(
        image: str, name: str, opt_ml: Path, tmp_path: Path) -> None:
    tool = tmp_path / "nvidia-smi"
    tool.write_text(HANGING_TOOL)
    tool.chmod(0o755)
    argv = run_argv(image, name, opt_ml, "sh", "-c", "touch /opt/ml/handed-off",
                    env={"PREFLIGHT_PROFILE": "p5.48xlarge"},
                    mounts=(f"{tool}:/usr/local/bin/nvidia-smi:ro",))
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (opt_ml / "tool-started").exists():
            assert proc.poll() is None, f"ended before the tool ran: {proc.communicate()[0][-4000:]}"
            assert time.monotonic() < deadline, "the preflight never ran nvidia-smi"
            time.sleep(0.2)
        time.sleep(1.0)
        began = time.monotonic()
        stop = container_image.podman("stop", "-t", str(STOP_GRACE_S), name, check=False,
                                      timeout=STOP_GRACE_S + 60)
        out, _ = proc.communicate(timeout=120)
        took_s = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    detail = f"exit {proc.returncode} after {took_s:.1f} s ({stop.stderr.strip()})\n{out[-4000:]}"
    assert proc.returncode == 143, detail
    assert took_s < STOP_GRACE_S, detail  # stopped by SIGTERM, never by podman's SIGKILL
    report = report_of(opt_ml)
    assert "interrupted" in (report.get("verdict"), report.get("outcome")), report.get("verdict")
    failure = (opt_ml / "output" / "failure").read_text()
    assert "interrupted" in failure.lower() or "SIGTERM" in failure, failure
    assert not (opt_ml / "handed-off").exists(), "handed off after SIGTERM"


def test_a_failing_node_exits_1_with_the_failure_file(
        image: str, name: str, opt_ml: Path) -> None:
    """p5.48xlarge in a container that sees no GPU and no EFA: a node verdict."""
    res = run(image, name, opt_ml, "sh", "-c", "touch /opt/ml/handed-off",
              env={"PREFLIGHT_PROFILE": "p5.48xlarge"})
    assert res.returncode == 1, output_of(res)
    failure = (opt_ml / "output" / "failure").read_text()
    assert failure.startswith("gpu-preflight"), failure
    assert "PF-GPU" in failure, failure
    assert report_of(opt_ml)["verdict"] == "fail"
    assert not (opt_ml / "handed-off").exists()


#: The SageMaker training toolkit's `train` stand-in: says its PID and the program it would run.
TOOLKIT_TRAIN = ("#!/bin/sh\necho toolkit-train-pid=$$ args=\"$*\"\n"
                 "python3 -c 'import json; print(\"program=\" + json.load(open("
                 "\"/opt/ml/input/config/hyperparameters.json\"))[\"sagemaker_program\"])'\n")


def test_sagemaker_train_runs_the_checks_then_the_toolkit(
        image: str, name: str, opt_ml: Path, tmp_path: Path) -> None:
    train = tmp_path / "train"
    train.write_text(TOOLKIT_TRAIN)
    train.chmod(0o755)
    (opt_ml / "input" / "config" / "hyperparameters.json").write_text(
        json.dumps({"sagemaker_program": "\"train.py\""}))
    res = run(image, name, opt_ml, "train",
              env={"PREFLIGHT_PROFILE": "local-cpu", "PREFLIGHT_ARGS": PASSING},
              mounts=(f"{train}:/usr/local/bin/train:ro",))
    assert res.returncode == 0, output_of(res)
    assert "toolkit-train-pid=1 args=\n" in res.stdout, output_of(res)
    assert 'program="train.py"' in res.stdout, output_of(res)
    report = report_of(opt_ml)
    assert report["verdict"] == "pass"
    assert report["command"] == ["train"]


def test_sagemaker_train_without_a_program_is_the_checks_alone(
        image: str, name: str, opt_ml: Path) -> None:
    """The job `preflight launch` starts: no program; the exit status is the checks'. One
    check that fails here (p5.48xlarge wants more /dev/shm than podman's 64 MB) keeps it short."""
    res = run(image, name, opt_ml, "train",
              env={"PREFLIGHT_PROFILE": "p5.48xlarge", "PREFLIGHT_ARGS": "-k PF-HOST-001"})
    assert res.returncode == 1, output_of(res)
    assert "running the checks only" in res.stderr + res.stdout, output_of(res)
    assert (opt_ml / "output" / "failure").read_text().startswith("gpu-preflight")
    assert report_of(opt_ml)["command"] in ([], None)
