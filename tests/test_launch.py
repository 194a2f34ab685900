"""`preflight launch`: the CreateTrainingJob request built without the SDK (`--dry-run`), option
validation, and the real sagemaker SDK 3.x path against the moto server (skipped, saying why,
where the SDK is not installed)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.commands import EXIT_HARNESS, EXIT_OK, EXIT_USAGE
from harness.run.launch import LaunchError, LaunchSpec, build_request, default_job_name, submit

IMAGE = "123456789012.dkr.ecr.us-west-2.amazonaws.com/gpu-preflight:0.1.0"
ROLE = "arn:aws:iam::123456789012:role/SageMakerPreflight"
PLAN = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/p5-nightly"
BASE = ["launch", "--instance-type", "ml.p5.48xlarge", "--instance-count", "16", "--image", IMAGE,
        "--role", ROLE, "--output", "s3://pf-launch/certify/"]



def _has_sdk() -> bool:
    try:
        return importlib.util.find_spec("sagemaker.train") is not None
    except ModuleNotFoundError:  # no `sagemaker` package at all
        return False


HAS_SDK = _has_sdk()
#: scripts/test's launch stage sets it: there the SDK tests must run, never skip.
if os.environ.get("GPU_PREFLIGHT_TEST_LAUNCH_SDK") and not HAS_SDK:
    raise RuntimeError("GPU_PREFLIGHT_TEST_LAUNCH_SDK is set but sagemaker.train is not importable")
needs_sdk = pytest.mark.skipif(
    not HAS_SDK, reason="the sagemaker SDK (extra 'launch': pip install 'gpu-preflight[launch]') "
    "is not installed here (scripts/test runs these in a venv of its own); the request it would "
    "send is still tested through --dry-run")


def spec(**overrides: Any) -> LaunchSpec:
    kwargs: dict[str, Any] = {"instance_type": "ml.p5.48xlarge", "instance_count": 16,
                              "image": IMAGE, "role": ROLE, "output": "s3://pf-launch/certify/"}
    return LaunchSpec(**{**kwargs, **overrides})


@pytest.fixture
def no_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make `import sagemaker` fail, as on a machine without the extra."""
    for name in [m for m in sys.modules if m == "sagemaker" or m.startswith("sagemaker.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sagemaker", None)


def test_dry_run_prints_the_request_without_the_sdk(
    no_sdk: None, capsys: pytest.CaptureFixture[str],
) -> None:
    code = cli.main([*BASE, "--training-plan", PLAN, "--spot", "--max-wait", "36000",
                     "--checkpoint-s3-uri", "s3://pf-launch/ckpt/", "--cluster", "p5-prod",
                     "--cloudwatch-namespace", "GPUPreflight", "--env", "NCCL_DEBUG=INFO",
                     "--job-name", "nightly-42", "--dry-run"])
    assert code == EXIT_OK
    request = json.loads(capsys.readouterr().out)
    assert request == {
        "TrainingJobName": "nightly-42",
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {},
        "RoleArn": ROLE,
        "OutputDataConfig": {"S3OutputPath": "s3://pf-launch/certify/", "CompressionType": "GZIP"},
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 16,
                           "VolumeSizeInGB": 100, "TrainingPlanArn": PLAN},
        # p5.48xlarge's certify budget (7200 s) + the 900 s margin
        "StoppingCondition": {"MaxRuntimeInSeconds": 8100, "MaxWaitTimeInSeconds": 36000},
        "Environment": {"PREFLIGHT_TIER": "certify",
                        "PREFLIGHT_S3_URI": "s3://pf-launch/certify/reports/",
                        "PREFLIGHT_CW_NAMESPACE": "GPUPreflight", "PREFLIGHT_CLUSTER": "p5-prod",
                        "NCCL_DEBUG": "INFO"},
        "Tags": [{"Key": "gpu-preflight:tier", "Value": "certify"},
                 {"Key": "gpu-preflight:version", "Value": "0.1.0"}],
        "EnableManagedSpotTraining": True,
        "CheckpointConfig": {"S3Uri": "s3://pf-launch/ckpt/", "LocalPath": "/opt/ml/checkpoints"},
    }


def test_minimal_request_has_no_spot_or_plan() -> None:
    request = build_request(spec(instance_type="p4d.24xlarge", tier="preflight"), "job-1")
    assert request["TrainingJobName"] == "job-1"
    assert request["ResourceConfig"] == {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 16,
                                         "VolumeSizeInGB": 100}
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 300 + 900}
    assert request["Environment"]["PREFLIGHT_TIER"] == "preflight"
    for key in ("EnableManagedSpotTraining", "CheckpointConfig"):
        assert key not in request


def test_unknown_instance_type_gets_the_default_runtime() -> None:
    assert spec(instance_type="ml.g4dn.12xlarge").max_runtime_s == 3 * 3600
    assert spec(max_runtime_s=600).max_runtime_s == 600


def test_default_job_name() -> None:
    from datetime import datetime, timezone

    now = datetime(2026, 11, 28, 2, 0, 5, tzinfo=timezone.utc)
    assert default_job_name("certify", now) == "gpu-preflight-certify-20261128-020005"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"instance_count": 0}, "--instance-count must be >= 1, got 0"),
    ({"image": "a b"}, "--image must be an image URI"),
    ({"role": "SageMakerRole"}, "--role must be an IAM role ARN"),
    ({"output": "bucket/certify"}, "--output: 'bucket/certify' is not an S3 URI"),
    ({"checkpoint_s3_uri": "/tmp/x"}, "--checkpoint-s3-uri: '/tmp/x' is not an S3 URI"),
    ({"training_plan": "p5-plan"}, "--training-plan must be a training plan ARN"),
    ({"spot": True}, "--spot needs --max-wait S"),
    ({"max_wait_s": 9000}, "--max-wait applies to managed spot training only: add --spot"),
    ({"spot": True, "max_wait_s": 600}, "--max-wait (600 s) must be >= the max runtime (8100 s"),
    ({"max_runtime_s": 0}, "--max-runtime must be > 0 s, got 0"),
    ({"job_name": "nightly_42"}, "--job-name must be 1-63 letters, digits and hyphens"),
    ({"tier": "nightly"}, "--tier must be one of preflight, certify, diagnose"),
    ({"environment": {"1BAD": "x"}}, "--env names must be variable names, got 1BAD"),
])
def test_spec_rejects(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        spec(**overrides)
    assert str(info.value).startswith(message)


def test_cli_launch_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*BASE, "--spot", "--dry-run"]) == EXIT_USAGE
    assert "--spot needs --max-wait" in capsys.readouterr().err
    assert cli.main([*BASE, "--env", "NOEQUALS", "--dry-run"]) == EXIT_USAGE
    assert "--env wants NAME=VALUE, got 'NOEQUALS'" in capsys.readouterr().err
    assert cli.main(["launch", "--instance-count", "2"]) == EXIT_USAGE


def test_submit_without_sdk_says_how_to_install(
    no_sdk: None, capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(LaunchError, match=r"pip install 'gpu-preflight\[launch\]'"):
        submit(spec())
    assert cli.main(BASE) == EXIT_HARNESS
    assert "the sagemaker SDK is not installed" in capsys.readouterr().err


@needs_sdk
def test_sdk_sends_the_request_dry_run_prints(aws_env: dict[str, str]) -> None:
    from harness.run.launch import model_trainer

    s = spec(training_plan=PLAN, spot=True, max_wait_s=36000, checkpoint_s3_uri="s3://b/ckpt",
             cluster="c", cloudwatch_namespace="NS", environment={"NCCL_DEBUG": "INFO"})
    sdk_request = model_trainer(s)._create_training_job_args(boto3=True)
    mine = build_request(s)
    assert sdk_request["TrainingJobName"].startswith("gpu-preflight-certify-")
    sdk_request.pop("TrainingJobName")
    mine.pop("TrainingJobName")
    assert sdk_request == mine


@needs_sdk
def test_sdk_creates_the_job_on_the_server(aws_env: dict[str, str]) -> None:
    import boto3

    name = submit(spec(spot=True, max_wait_s=36000, checkpoint_s3_uri="s3://pf-launch/ckpt"))
    job = boto3.client("sagemaker").describe_training_job(TrainingJobName=name)
    assert job["AlgorithmSpecification"]["TrainingImage"] == IMAGE
    assert job["RoleArn"] == ROLE
    assert job["ResourceConfig"] == {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 16,
                                     "VolumeSizeInGB": 100}
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 8100,
                                        "MaxWaitTimeInSeconds": 36000}
    assert job["OutputDataConfig"]["S3OutputPath"] == "s3://pf-launch/certify/"
    assert job["EnableManagedSpotTraining"] is True
    assert job["CheckpointConfig"]["S3Uri"] == "s3://pf-launch/ckpt"


@needs_sdk
def test_cli_launch_submits(aws_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    import boto3

    assert cli.main([*BASE, "--job-name", "pf-cli-launch"]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("started training job pf-cli-launch-")
    name = out.split()[3].rstrip(":")
    assert boto3.client("sagemaker").describe_training_job(TrainingJobName=name)[
        "ResourceConfig"]["InstanceCount"] == 16
    assert f"preflight report s3://pf-launch/certify/reports/<date>/{name}/ --html" in out


@needs_sdk
def test_cli_launch_server_down(aws_env: dict[str, str]) -> None:
    # A fresh process: sagemaker-core caches its clients (and their endpoint) per process.
    import subprocess

    from aws_server import free_port

    env = {**aws_env, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
           "AWS_MAX_ATTEMPTS": "1", "PYTHONPATH": str(Path(__file__).parent.parent)}
    res = subprocess.run([sys.executable, "-m", "harness", *BASE], env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == EXIT_HARNESS, res.stderr[-2000:]
    assert "preflight launch: CreateTrainingJob failed: EndpointConnectionError" in res.stderr
