"""Where are we? The profile detection chain (first provider with an answer wins) and the
SageMaker resource config. Detection never sends traffic to a metadata endpoint that this
machine gives no sign of having."""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "Detection",
    "detect_instance_type",
    "hostname",
    "imds_instance_type",
    "opt_ml_dir",
    "sagemaker_resource_config",
]

#: IMDSv2 budget, token and query together, s: detection must not slow a run off EC2.
IMDS_TIMEOUT_S = 0.3
IMDS_DEFAULT_ENDPOINT = "http://169.254.169.254"


@dataclass(frozen=True, slots=True)
class Detection:
    """A detected profile name and the provider that found it (for the report header)."""

    name: str
    source: str


def opt_ml_dir(env: Mapping[str, str] | None = None) -> Path:
    """SageMaker's /opt/ml (PREFLIGHT_OPT_ML overrides it, for tests and unusual mounts)."""
    env = os.environ if env is None else env
    return Path(env.get("PREFLIGHT_OPT_ML", "/opt/ml"))


def sagemaker_resource_config(env: Mapping[str, str] | None = None) -> dict[str, object] | None:
    """/opt/ml/input/config/resourceconfig.json as a dict; None when absent or unreadable."""
    path = opt_ml_dir(env) / "input" / "config" / "resourceconfig.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def hostname(env: Mapping[str, str] | None = None) -> str:
    """This node's name as the cluster knows it: SageMaker `current_host`, else the hostname."""
    env = os.environ if env is None else env
    if env.get("PREFLIGHT_HOSTNAME"):
        return env["PREFLIGHT_HOSTNAME"]
    config = sagemaker_resource_config(env)
    if config and isinstance(config.get("current_host"), str):
        return str(config["current_host"])
    return socket.gethostname()


def _on_ec2(sysroot: Path) -> bool:
    """DMI says Amazon EC2 (the signal cloud-init's ds-identify uses before touching IMDS)."""
    for rel in ("sys/devices/virtual/dmi/id/sys_vendor", "sys/devices/virtual/dmi/id/board_vendor",
                "sys/class/dmi/id/sys_vendor"):
        try:
            if "amazon" in (sysroot / rel).read_text().lower():
                return True
        except OSError:
            continue
    try:
        return (sysroot / "sys/hypervisor/uuid").read_text().lower().startswith("ec2")
    except OSError:
        return False


def imds_instance_type(
    env: Mapping[str, str] | None = None,
    sysroot: Path = Path("/"),
    timeout_s: float = IMDS_TIMEOUT_S,
) -> str | None:
    """Instance type from EC2 IMDSv2, or None. Asked only on EC2 (DMI) or when the endpoint
    is configured (AWS_EC2_METADATA_SERVICE_ENDPOINT); AWS_EC2_METADATA_DISABLED=true stops it."""
    env = os.environ if env is None else env
    if env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return None
    endpoint = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
    if not endpoint:
        if not _on_ec2(sysroot):
            return None
        endpoint = IMDS_DEFAULT_ENDPOINT
    endpoint = endpoint.rstrip("/")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # IMDS is never proxied
    try:
        token_req = urllib.request.Request(
            f"{endpoint}/latest/api/token", method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"},
        )
        with opener.open(token_req, timeout=timeout_s / 2) as resp:
            token = resp.read().decode().strip()
        req = urllib.request.Request(
            f"{endpoint}/latest/meta-data/instance-type",
            headers={"X-aws-ec2-metadata-token": token},
        )
        with opener.open(req, timeout=timeout_s / 2) as resp:
            value = resp.read().decode().strip()
    except (OSError, urllib.error.URLError, ValueError):
        return None
    return value or None


def _has_gpu(sysroot: Path) -> bool:
    """An NVIDIA device node or driver is visible (no NVML import: it must stay cheap)."""
    return (sysroot / "dev/nvidia0").exists() or (sysroot / "proc/driver/nvidia/gpus").is_dir()


Provider = Callable[[], "Detection | None"]


def detect_instance_type(
    option: str | None = None,
    env: Mapping[str, str] | None = None,
    sysroot: Path = Path("/"),
) -> Detection | None:
    """Run the chain: --profile, PREFLIGHT_PROFILE, SageMaker resourceconfig, IMDSv2, inspection.

    Returns None when the machine has GPUs but no provider named its type (the caller then
    fails with the list of known profiles).
    """
    env = os.environ if env is None else env

    def from_option() -> Detection | None:
        return Detection(option, "--profile") if option and option != "auto" else None

    def from_env() -> Detection | None:
        value = env.get("PREFLIGHT_PROFILE", "")
        return Detection(value, "PREFLIGHT_PROFILE") if value and value != "auto" else None

    def from_sagemaker() -> Detection | None:
        config = sagemaker_resource_config(env)
        value = config.get("current_instance_type") if config else None
        if isinstance(value, str) and value:
            return Detection(value.removeprefix("ml."), "SageMaker resourceconfig.json")
        return None

    def from_imds() -> Detection | None:
        value = imds_instance_type(env, sysroot)
        return Detection(value, "EC2 instance metadata (IMDSv2)") if value else None

    def from_inspection() -> Detection | None:
        return None if _has_gpu(sysroot) else Detection("local-cpu", "inspection (no GPU found)")

    providers: list[Provider] = [from_option, from_env, from_sagemaker, from_imds, from_inspection]
    for provider in providers:
        found = provider()
        if found is not None:
            return found
    return None
