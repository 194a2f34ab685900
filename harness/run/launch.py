"""`preflight launch`: nightly certification as one SageMaker training job that runs the certify
tier on every node. The CreateTrainingJob request is built here as plain data (what `--dry-run`
prints, no SDK needed); the sagemaker SDK 3.x (`ModelTrainer`, extra `launch`) only submits it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the sagemaker SDK is optional (gpu-preflight[sagemaker])
    from sagemaker.train import ModelTrainer

from harness import __version__
from harness.base.jsontypes import JSONObject
from harness.base.tiers import TIERS
from harness.report.publish import parse_s3_uri

__all__ = ["LaunchError", "LaunchSpec", "build_request", "default_job_name", "model_trainer", "submit"]

#: Seconds added to the profile's tier budget for MaxRuntimeInSeconds (image start, uploads).
RUNTIME_MARGIN_S = 900
#: MaxRuntimeInSeconds when the instance type has no built-in profile.
DEFAULT_MAX_RUNTIME_S = 3 * 3600
#: GB of EBS per instance: nccl-tests and logs need little, the image itself lives elsewhere.
DEFAULT_VOLUME_GB = 100
_ROLE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/\S+$")
_PLAN = re.compile(r"^arn:aws[a-z-]*:sagemaker:[a-z0-9-]+:\d{12}:training-plan/\S+$")
_JOB_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")  # CreateTrainingJob's rule
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class LaunchError(Exception):
    """The job could not be submitted (SDK missing, AWS refused); str() is the message."""


def default_job_name(tier: str, now: datetime | None = None) -> str:
    """`gpu-preflight-certify-20261128-020000` (UTC): unique per second, sorts by time."""
    now = now or datetime.now(timezone.utc)
    return f"gpu-preflight-{tier}-{now:%Y%m%d-%H%M%S}"


def _max_runtime(instance_type: str, tier: str) -> int:
    from harness.profiles.model import ProfileError
    from harness.profiles.table import get_profile

    try:
        budget = get_profile(instance_type).run_budget_s.get(tier)
    except ProfileError:
        budget = None
    return int(budget) + RUNTIME_MARGIN_S if budget else DEFAULT_MAX_RUNTIME_S


@dataclass(kw_only=True, slots=True)
class LaunchSpec:
    """What `preflight launch` was asked for; `__post_init__` says which field is wrong."""

    instance_type: str
    """SageMaker instance type; `p5.48xlarge` is taken as `ml.p5.48xlarge`."""
    instance_count: int
    image: str
    """The gpu-preflight container (container/Dockerfile) in ECR."""
    role: str
    output: str
    """s3:// URI: the job's output, and `<output>/reports/<date>/<job>/<host>/` per node."""
    tier: str = "certify"
    training_plan: str | None = None
    spot: bool = False
    max_wait_s: int | None = None
    checkpoint_s3_uri: str | None = None
    max_runtime_s: int | None = None
    """Default: the profile's budget for the tier plus RUNTIME_MARGIN_S."""
    volume_gb: int = DEFAULT_VOLUME_GB
    job_name: str | None = None
    cluster: str | None = None
    cloudwatch_namespace: str | None = None
    environment: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.instance_type.startswith("ml."):
            self.instance_type = f"ml.{self.instance_type}"
        if self.instance_count < 1:
            raise ValueError(f"--instance-count must be >= 1, got {self.instance_count}")
        if not self.image or any(ch.isspace() for ch in self.image):
            raise ValueError(f"--image must be an image URI, got {self.image!r}")
        if not _ROLE.match(self.role):
            raise ValueError(f"--role must be an IAM role ARN (arn:aws:iam::123456789012:role/"
                             f"NAME), got {self.role!r}")
        if self.tier not in TIERS:
            raise ValueError(f"--tier must be one of {', '.join(TIERS)}, got {self.tier!r}")
        for name, uri in (("--output", self.output), ("--checkpoint-s3-uri",
                                                       self.checkpoint_s3_uri)):
            if uri is not None:
                try:
                    parse_s3_uri(uri)
                except ValueError as exc:
                    raise ValueError(f"{name}: {exc}") from None
        if self.training_plan is not None and not _PLAN.match(self.training_plan):
            raise ValueError(f"--training-plan must be a training plan ARN (arn:aws:sagemaker:"
                             f"REGION:ACCOUNT:training-plan/NAME), got {self.training_plan!r}")
        if self.max_runtime_s is None:
            self.max_runtime_s = _max_runtime(self.instance_type, self.tier)
        if self.max_runtime_s <= 0:
            raise ValueError(f"--max-runtime must be > 0 s, got {self.max_runtime_s}")
        if self.spot and self.max_wait_s is None:
            raise ValueError("--spot needs --max-wait S (how long to wait for spot capacity, "
                             "including the run)")
        if self.max_wait_s is not None and not self.spot:
            raise ValueError("--max-wait applies to managed spot training only: add --spot")
        if self.max_wait_s is not None and self.max_wait_s < self.max_runtime_s:
            raise ValueError(f"--max-wait ({self.max_wait_s} s) must be >= the max runtime "
                             f"({self.max_runtime_s} s; --max-runtime)")
        if self.job_name is not None and not _JOB_NAME.match(self.job_name):
            raise ValueError(f"--job-name must be 1-63 letters, digits and hyphens, got "
                             f"{self.job_name!r}")
        bad = [k for k in self.environment if not _ENV_NAME.match(k)]
        if bad:
            raise ValueError(f"--env names must be variable names, got {', '.join(bad)}")

    @property
    def reports_uri(self) -> str:
        return f"{self.output.rstrip('/')}/reports/"

    def job_environment(self) -> dict[str, str]:
        """The variables the container's `preflight run` reads (see docs/container.md)."""
        env = {"PREFLIGHT_TIER": self.tier, "PREFLIGHT_S3_URI": self.reports_uri}
        if self.cloudwatch_namespace:
            env["PREFLIGHT_CW_NAMESPACE"] = self.cloudwatch_namespace
        if self.cluster:
            env["PREFLIGHT_CLUSTER"] = self.cluster
        return {**env, **self.environment}

    def tags(self) -> list[dict[str, str]]:
        return [{"Key": "gpu-preflight:tier", "Value": self.tier},
                {"Key": "gpu-preflight:version", "Value": __version__}]


def build_request(spec: LaunchSpec, job_name: str | None = None) -> JSONObject:
    """The CreateTrainingJob request (boto3 shape), without talking to AWS.

    The job runs the image's own entrypoint: SageMaker passes `train`, and the entrypoint runs
    `preflight run` (tier from PREFLIGHT_TIER) and, with no SAGEMAKER_PROGRAM, nothing after it.
    """
    resource: JSONObject = {"InstanceType": spec.instance_type,
                            "InstanceCount": spec.instance_count, "VolumeSizeInGB": spec.volume_gb}
    if spec.training_plan:
        resource["TrainingPlanArn"] = spec.training_plan
    stopping: JSONObject = {"MaxRuntimeInSeconds": spec.max_runtime_s}
    if spec.max_wait_s is not None:
        stopping["MaxWaitTimeInSeconds"] = spec.max_wait_s
    request: JSONObject = {
        "TrainingJobName": job_name or spec.job_name or default_job_name(spec.tier),
        "AlgorithmSpecification": {"TrainingImage": spec.image, "TrainingInputMode": "File"},
        "HyperParameters": {},
        "RoleArn": spec.role,
        # The service's (and the SDK's) defaults, spelled out so the printed request is exact.
        "OutputDataConfig": {"S3OutputPath": spec.output, "CompressionType": "GZIP"},
        "ResourceConfig": resource,
        "StoppingCondition": stopping,
        "Environment": spec.job_environment(),
        "Tags": spec.tags(),
    }
    if spec.spot:
        request["EnableManagedSpotTraining"] = True
    if spec.checkpoint_s3_uri:
        request["CheckpointConfig"] = {"S3Uri": spec.checkpoint_s3_uri,
                                       "LocalPath": "/opt/ml/checkpoints"}
    return request


def model_trainer(spec: LaunchSpec) -> ModelTrainer:
    """The sagemaker SDK 3.x ModelTrainer for `spec` (ImportError when the SDK is missing)."""
    import warnings

    # sagemaker 3.27's own model_trainer imports its deprecated `sagemaker.train.configs` shim:
    # a DeprecationWarning about the SDK's internals that users can do nothing about.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from sagemaker.train import ModelTrainer

        try:  # where the configs live since 3.x moved them; the old path is a shim
            from sagemaker.core.training.configs import (
                CheckpointConfig,
                Compute,
                OutputDataConfig,
                StoppingCondition,
                Tag,
            )
        except ImportError:
            from sagemaker.train.configs import (  # type: ignore[no-redef]
                CheckpointConfig,
                Compute,
                OutputDataConfig,
                StoppingCondition,
                Tag,
            )

    return ModelTrainer(
        training_image=spec.image,
        role=spec.role,
        base_job_name=spec.job_name or f"gpu-preflight-{spec.tier}",
        compute=Compute(instance_type=spec.instance_type, instance_count=spec.instance_count,
                        volume_size_in_gb=spec.volume_gb, training_plan_arn=spec.training_plan,
                        enable_managed_spot_training=True if spec.spot else None),
        stopping_condition=StoppingCondition(max_runtime_in_seconds=spec.max_runtime_s,
                                             max_wait_time_in_seconds=spec.max_wait_s),
        output_data_config=OutputDataConfig(s3_output_path=spec.output),
        checkpoint_config=(CheckpointConfig(s3_uri=spec.checkpoint_s3_uri)
                           if spec.checkpoint_s3_uri else None),
        training_input_mode="File",
        environment=spec.job_environment(),
        tags=[Tag(key=t["Key"], value=t["Value"]) for t in spec.tags()],
    )


def submit(spec: LaunchSpec) -> str:
    """Create the training job through the SDK (no wait); returns its name."""
    try:
        trainer = model_trainer(spec)
    except ImportError as exc:
        raise LaunchError(f"the sagemaker SDK is not installed ({exc}): pip install "
                          "'gpu-preflight[launch]', or use --dry-run to print the request") from None
    except Exception as exc:  # pydantic validation, role validation through IAM
        raise LaunchError(f"the sagemaker SDK rejected the job: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:1500]}") from None
    try:
        trainer.train(wait=False, logs=False)
    except Exception as exc:  # ClientError, NoRegionError, NoCredentialsError ...
        raise LaunchError(f"CreateTrainingJob failed: {type(exc).__name__}: "
                          f"{' '.join(str(exc).split())[:1500]}") from None
    job = getattr(trainer, "_latest_training_job", None)
    return str(getattr(job, "training_job_name", None) or "(name not reported by the SDK)")
