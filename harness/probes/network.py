"""Network probes: interfaces, the aws-ofi-nccl library and its version, libfabric's version."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness import proc

__all__ = ["OfiNcclLib", "find_ofi_nccl", "libfabric_version", "network_interfaces"]

#: Where EFA installers and DLC images put aws-ofi-nccl (searched before LD_LIBRARY_PATH).
OFI_NCCL_DIRS = (
    "opt/amazon/ofi-nccl/lib", "opt/amazon/ofi-nccl/lib64", "opt/aws-ofi-nccl/lib",
    "usr/local/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
)
_LIB_NAMES = re.compile(r"^libnccl-net(-ofi|-aws-ofi)?\.so(\.\d+)*$")
_VERSION_IN_BINARY = re.compile(rb"aws-ofi-nccl[ /v-]{1,3}(\d+\.\d+\.\d+(?:[-.][0-9A-Za-z]+)?)")
_INSTALLED_PKG = re.compile(r"aws-ofi-nccl[-_ ]v?(\d+\.\d+\.\d+)", re.I)


@dataclass(frozen=True, slots=True)
class OfiNcclLib:
    """The aws-ofi-nccl plugin library found on this node."""

    path: str
    version: str | None


def network_interfaces(sysroot: Path = Path("/")) -> list[str]:
    """Interface names under /sys/class/net (falls back to the socket API on the real root)."""
    try:
        return sorted(p.name for p in (sysroot / "sys/class/net").iterdir())
    except OSError:
        if sysroot != Path("/"):
            return []
        import socket

        return sorted(name for _, name in socket.if_nameindex())


def find_ofi_nccl(
    env: Mapping[str, str] | None = None, sysroot: Path = Path("/")
) -> OfiNcclLib | None:
    """The first aws-ofi-nccl library on the usual paths or LD_LIBRARY_PATH, with its version."""
    env = os.environ if env is None else env
    dirs = [sysroot / d for d in OFI_NCCL_DIRS]
    dirs += [sysroot / d.lstrip("/") for d in env.get("LD_LIBRARY_PATH", "").split(":") if d]
    for directory in dirs:
        try:
            entries = sorted(directory.iterdir())
        except OSError:
            continue
        for entry in entries:
            if _LIB_NAMES.match(entry.name) and entry.is_file():
                return OfiNcclLib(str(entry), _ofi_version(entry, sysroot))
    return None


def _ofi_version(lib: Path, sysroot: Path) -> str | None:
    """Version string compiled into the library (PACKAGE_STRING), else the EFA installer list."""
    try:
        with lib.open("rb") as fh:
            m = _VERSION_IN_BINARY.search(fh.read(64 * 1024 * 1024))
        if m:
            return m.group(1).decode()
    except OSError:
        pass
    try:
        m = _INSTALLED_PKG.search((sysroot / "opt/amazon/efa_installed_packages").read_text())
        return m.group(1) if m else None
    except OSError:
        return None


def libfabric_version(timeout_s: float = 10.0) -> str | None:
    """`libfabric: 1.22.0amzn4.0` from `fi_info --version`; None when fi_info is absent/broken."""
    result = proc.run(["fi_info", "--version"], timeout_s=timeout_s)
    if not result.ok:
        return None
    m = re.search(r"^libfabric:\s*(\S+)", result.stdout, re.M)
    return m.group(1) if m else None
