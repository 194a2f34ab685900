"""Where are we? The profile detection chain (first provider with an answer wins) and the
SageMaker resource config. Detection never sends traffic to a metadata endpoint that this
machine gives no sign of having; on EC2 Nitro the instance type is read from DMI first."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.base.settings import get_path, get_str

__all__ = [
    "Detection",
    "detect_instance_type",
    "dmi_instance_type",
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
    return get_path("PREFLIGHT_OPT_ML", env) or Path("/opt/ml")


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
    if name := get_str("PREFLIGHT_HOSTNAME", env):
        return name
    config = sagemaker_resource_config(env)
    if config and isinstance(config.get("current_host"), str):
        return str(config["current_host"])
    return socket.gethostname()


#: DMI directories: the class link and the device it points to (a container may have either).
DMI_DIRS = ("sys/devices/virtual/dmi/id", "sys/class/dmi/id")
#: EC2 Nitro's SMBIOS vendor strings (sys_vendor, bios_vendor, board_vendor, chassis_vendor).
EC2_DMI_VENDOR = "Amazon EC2"
# An instance type as EC2 spells it: family with generation and options, dot, size
# (`p5.48xlarge`, `p6-b200.48xlarge`, `trn1n.32xlarge`, `m7i.metal-48xl`).
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9-]*\.[a-z0-9][a-z0-9-]*$")


def _dmi(sysroot: Path, name: str) -> str | None:
    """A DMI attribute, stripped; None when no DMI directory has it (or it is unreadable)."""
    for directory in DMI_DIRS:
        try:
            return (sysroot / directory / name).read_text(errors="replace").strip()
        except OSError:
            continue
    return None


def _on_ec2(sysroot: Path) -> bool:
    """DMI says EC2 (the signal cloud-init's ds-identify uses before touching IMDS): Nitro's
    `Amazon EC2` vendor strings, Xen's `4.x.amazon` BIOS version, or an `ec2` hypervisor UUID."""
    for name in ("sys_vendor", "board_vendor", "bios_vendor"):
        if "amazon" in (_dmi(sysroot, name) or "").lower():
            return True
    if (_dmi(sysroot, "bios_version") or "").lower().endswith(".amazon"):
        return True
    try:
        return (sysroot / "sys/hypervisor/uuid").read_text().lower().startswith("ec2")
    except OSError:
        return False


def dmi_instance_type(sysroot: Path = Path("/")) -> str | None:
    """The instance type EC2 Nitro writes into DMI product_name (`p5.48xlarge`); None off
    Nitro. Xen-based instances say `HVM domU` there, other vendors a model name."""
    if _dmi(sysroot, "sys_vendor") != EC2_DMI_VENDOR:
        return None
    value = _dmi(sysroot, "product_name") or ""
    return value if _INSTANCE_TYPE.match(value) else None


def _metadata_disabled(env: Mapping[str, str]) -> bool:
    """AWS_EC2_METADATA_DISABLED=true: use no EC2 instance identity, neither IMDS nor the copy
    Nitro puts in DMI (so that a test or a user can make an EC2 host look like any machine)."""
    return env.get("AWS_EC2_METADATA_DISABLED", "").strip().lower() == "true"


def imds_instance_type(
    env: Mapping[str, str] | None = None,
    sysroot: Path = Path("/"),
    timeout_s: float = IMDS_TIMEOUT_S,
) -> str | None:
    """Instance type from EC2 IMDSv2, or None. Asked only on EC2 (DMI) or when the endpoint
    is configured (AWS_EC2_METADATA_SERVICE_ENDPOINT); AWS_EC2_METADATA_DISABLED=true stops it."""
    env = os.environ if env is None else env
    if _metadata_disabled(env):
        return None
    endpoint = env.get("AWS_EC2_METADATA_SERVICE_ENDPOINT")
    if not endpoint:
        if not _on_ec2(sysroot):
            return None
        endpoint = IMDS_DEFAULT_ENDPOINT
    endpoint = endpoint.rstrip("/")
    # Asked of EC2 alone: urllib.request (http.client, ssl, email: ~25 ms) imported here, not
    # by every run that reads the host name (start-up, issue 28 item 6)
    import urllib.error
    import urllib.request

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


def has_gpu(sysroot: Path) -> bool:
    """An NVIDIA device node or driver is visible (no NVML import: it must stay cheap)."""
    return (sysroot / "dev/nvidia0").exists() or (sysroot / "proc/driver/nvidia/gpus").is_dir()


Provider = Callable[[], "Detection | None"]

#: EC2 families with accelerators (p/g GPUs, trn/inf Neuron, dl Gaudi, f FPGA, vt video): an
#: unknown type of these is an error, never local-cpu (their container may just not see them).
_ACCELERATED = re.compile(r"^(?:p|g|trn|inf|dl|f|vt)\d")


def detect_instance_type(
    option: str | None = None,
    env: Mapping[str, str] | None = None,
    sysroot: Path = Path("/"),
    known: Collection[str] | None = None,
) -> Detection | None:
    """Run the chain: --profile, PREFLIGHT_PROFILE, SageMaker (resourceconfig.json, then
    SM_CURRENT_INSTANCE_TYPE), DMI product_name (EC2 Nitro), IMDSv2, inspection. The two EC2
    steps are skipped with AWS_EC2_METADATA_DISABLED=true.

    With `known` (the profile names), a type found by the SageMaker/DMI/IMDS steps that has no
    profile gives `local-cpu` when it is a CPU family and no GPU is visible (e.g. a CI runner on
    `m5.xlarge`: its env and CPU checks still apply); otherwise it is returned as found, and
    the caller fails naming the known profiles. Returns None when the machine has GPUs but no
    provider named its type.
    """
    env = os.environ if env is None else env

    def from_option() -> Detection | None:
        return Detection(option, "--profile") if option and option != "auto" else None

    def from_env() -> Detection | None:
        value = get_str("PREFLIGHT_PROFILE", env) or ""
        return Detection(value, "PREFLIGHT_PROFILE") if value and value != "auto" else None

    def from_sagemaker() -> Detection | None:
        config = sagemaker_resource_config(env)
        value = config.get("current_instance_type") if config else None
        if isinstance(value, str) and value.strip():
            return Detection(value.strip().removeprefix("ml."), "SageMaker resourceconfig.json")
        value = env.get("SM_CURRENT_INSTANCE_TYPE", "").strip()
        return Detection(value.removeprefix("ml."), "SM_CURRENT_INSTANCE_TYPE") if value else None

    def from_dmi() -> Detection | None:
        if _metadata_disabled(env):
            return None
        value = dmi_instance_type(sysroot)
        return Detection(value, "DMI product_name (EC2 Nitro)") if value else None

    def from_imds() -> Detection | None:
        value = imds_instance_type(env, sysroot)
        return Detection(value, "EC2 instance metadata (IMDSv2)") if value else None

    def from_inspection() -> Detection | None:
        return None if has_gpu(sysroot) else Detection("local-cpu", "inspection (no GPU found)")

    providers: list[Provider] = [from_option, from_env, from_sagemaker, from_dmi, from_imds,
                                 from_inspection]
    for provider in providers:
        found = provider()
        if found is None:
            continue
        if (known is not None and found.name not in known and provider not in
                (from_option, from_env, from_inspection) and not _ACCELERATED.match(found.name)
                and not has_gpu(sysroot)):
            return Detection("local-cpu", f"inspection: {found.name} (from {found.source}) has "
                             "no profile and no GPU is visible")
        return found
    return None
