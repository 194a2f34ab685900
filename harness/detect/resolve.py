"""The one profile resolution. `preflight run` (commands/run.py), the pytest plugin (a session
started without the run's resolved profile) and `preflight profiles --derive` all ask here:
the profile table (the built-in one, or a `--profile-file`), the instance type (named, or
found by the detection chain, harness.detect.instance) and the profile for it (a derived one
where no table entry fits, harness.detect.derive)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from harness.detect.derive import resolve_detected
from harness.detect.instance import detect_instance_type
from harness.profiles.model import Profile
from harness.profiles.table import BUILTIN_PROFILES, load_profile_file

__all__ = ["resolve"]


def resolve(requested: str | None, profile_file: str | None = None, *,
            env: Mapping[str, str] | None = None, sysroot: Path = Path("/")) -> tuple[Profile, str]:
    """(profile, where it came from) for `--profile REQUESTED` (None or `auto`: detected;
    `derived`: from this machine). ProfileError names what is wrong (a bad profile file, an
    unknown type)."""
    profiles = load_profile_file(profile_file) if profile_file else BUILTIN_PROFILES
    found = detect_instance_type(requested, env, sysroot=sysroot, known=profiles)
    return resolve_detected(found, profiles, sysroot=sysroot)
