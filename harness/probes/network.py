"""Network probes: interfaces, EFA devices, kernel modules, the locked-memory limit, `fi_info`,
the aws-ofi-nccl library and its version, libfabric's version. Facts only: no thresholds. The
real short NCCL collective whose debug log the network checks judge is
harness.probes.nccl_collective."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base import proc
from harness.base.proc_result import ProcResult
from harness.parsers import ParseError

if TYPE_CHECKING:  # types only: each parser is imported where its output is read (start-up)
    from harness.parsers.fi_info import FiInfo

__all__ = [
    "EfaDevices",
    "FiInfoProbe",
    "OfiNcclLib",
    "efa_devices",
    "find_ofi_nccl",
    "libfabric_version",
    "loaded_modules",
    "memlock_kib",
    "network_interfaces",
    "query_fi_info",
]

#: Where EFA installers, NGC/DLC images and source builds put aws-ofi-nccl; searched after
#: LD_LIBRARY_PATH and /etc/ld.so.conf (the loader's order), so a plugin NCCL cannot find by
#: name is still reported. The EFA installer's Ubuntu package uses the multiarch subdirectory
#: (`/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so`), its NGC package
#: (libnccl-ofi-ngc-v2) and NGC images `/opt/amazon/aws-ofi-nccl/lib`, aws-samples' Dockerfiles
#: `--prefix=/opt/aws-ofi-nccl/install`.
OFI_NCCL_DIRS = (
    "opt/amazon/ofi-nccl/lib", "opt/amazon/ofi-nccl/lib64",
    "opt/amazon/ofi-nccl/lib/x86_64-linux-gnu", "opt/amazon/ofi-nccl/lib/aarch64-linux-gnu",
    "opt/amazon/aws-ofi-nccl/lib", "opt/aws-ofi-nccl/lib", "opt/aws-ofi-nccl/install/lib",
    "usr/local/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
)
#: Where the EFA installer's own plugin package lives: only a library found here may take its
#: version from /opt/amazon/efa_installed_packages.
EFA_INSTALLER_OFI_DIR = "opt/amazon/ofi-nccl"
# Names NCCL loads a net plugin by: libnccl-net.so, or libnccl-net-<NCCL_NET_PLUGIN>.so
# (aws-ofi-nccl >= 1.15 builds libnccl-net-ofi.so; NGC images used libnccl-net-aws-ofi.so).
_LIB_NAMES = re.compile(r"^libnccl-net(-[0-9A-Za-z_-]+)?\.so(\.\d+)*$")
# Names that are aws-ofi-nccl whatever their content says.
_OFI_LIB_NAMES = re.compile(r"^libnccl-net-(ofi|aws-ofi)\.so(\.\d+)*$")
# aws-ofi-nccl logs through macros that prefix every message with `NET/OFI `, so the strings
# are in its binary; other plugins named libnccl-net.so (HPC-X SHARP, Spectrum-X) lack them.
_OFI_MARKERS = (b"NET/OFI ", b"aws-ofi-nccl")
_VERSION_IN_BINARY = re.compile(rb"aws-ofi-nccl[ /v-]{1,3}(\d+\.\d+\.\d+(?:[-.][0-9A-Za-z]+)?)")
# /opt/amazon/efa_installed_packages (efa_installer.sh): `# EFA installer version: 1.47.0`, then the
# package file names on one line: `libnccl-ofi_1.19.0-1_amd64` (Debian),
# `libnccl-ofi-1.20.0-1.amzn2023.x86_64` (RPM), `libnccl-ofi-ngc-v3_1.19.0-1_amd64` (NGC images).
_INSTALLED_PKG = re.compile(r"(?:aws-ofi-nccl|libnccl-ofi(?:-ngc-v\d+)?)[-_ ]v?(\d+\.\d+\.\d+)", re.I)
#: Bytes of a library read to find its version and markers (the plugin is ~0.3-3 MB).
_LIB_READ_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class OfiNcclLib:
    """The aws-ofi-nccl plugin library found on this node."""

    path: str
    version: str | None
    version_source: str | None = None
    """Where the version came from: `library` (its PACKAGE_STRING), `efa_installed_packages`."""


def network_interfaces(sysroot: Path = Path("/")) -> list[str]:
    """Interface names under /sys/class/net (falls back to the socket API on the real root)."""
    try:
        return sorted(p.name for p in (sysroot / "sys/class/net").iterdir())
    except OSError:
        if sysroot != Path("/"):
            return []
        import socket

        return sorted(name for _, name in socket.if_nameindex())


def _ld_so_conf_dirs(sysroot: Path) -> list[str]:
    """Directories listed in /etc/ld.so.conf and the files it includes (ld.so.conf.d/*.conf)."""
    found: list[str] = []
    pending = [sysroot / "etc/ld.so.conf"]
    seen: set[Path] = set()
    while pending:
        conf = pending.pop(0)
        if conf in seen:
            continue
        seen.add(conf)
        try:
            lines = conf.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            line = line.split("#", 1)[0].strip()
            if line.startswith("include") and len(line.split(None, 1)) == 2:
                arg = line.split(None, 1)[1]
                # a relative include is relative to the including file's directory
                base = "" if arg.startswith("/") else str(conf.parent.relative_to(sysroot))
                pending += sorted(sysroot.glob(f"{base}/{arg}".lstrip("/")))
            elif line.startswith("/"):
                found.append(line)
    return found


def find_ofi_nccl(
    env: Mapping[str, str] | None = None, sysroot: Path = Path("/")
) -> OfiNcclLib | None:
    """The first aws-ofi-nccl library in the loader's order (LD_LIBRARY_PATH, the conda env's
    lib, ld.so.conf), then on the usual install paths, with its version. A plain libnccl-net.so
    counts only in an `*ofi-nccl*` directory or when its bytes show it is aws-ofi-nccl (HPC-X
    ships other plugins under that name)."""
    env = os.environ if env is None else env
    names = [d for d in env.get("LD_LIBRARY_PATH", "").split(":") if d.startswith("/")]
    # conda's aws-ofi-nccl package installs <env>/lib/libnccl-net.so, which a conda-built torch
    # finds through its RPATH (`.../site-packages/torch/lib/../../../../libnccl-net.so`)
    prefixes = [env.get("CONDA_PREFIX", "")] + ([sys.prefix] if sysroot == Path("/") else [])
    names += [f"{p.rstrip('/')}/lib" for p in prefixes if p.startswith("/")]
    names += _ld_so_conf_dirs(sysroot) + ["/" + d for d in OFI_NCCL_DIRS]
    seen: set[str] = set()
    for name in names:
        directory = sysroot / name.lstrip("/")
        if str(directory) in seen:
            continue
        seen.add(str(directory))
        try:
            entries = sorted(directory.iterdir(), key=lambda e: (not _OFI_LIB_NAMES.match(e.name),
                                                                 e.name))
        except OSError:
            continue
        for entry in entries:
            if not _LIB_NAMES.match(entry.name) or not entry.is_file():
                continue
            data = _read_head(entry)
            if not (_OFI_LIB_NAMES.match(entry.name) or any(m in data for m in _OFI_MARKERS)
                    or "ofi-nccl" in str(directory.relative_to(sysroot))):
                continue
            return _ofi_lib(entry, data, sysroot)
    return None


def _read_head(lib: Path) -> bytes:
    try:
        with lib.open("rb") as fh:
            return fh.read(_LIB_READ_BYTES)
    except OSError:
        return b""


def _ofi_lib(lib: Path, data: bytes, sysroot: Path) -> OfiNcclLib:
    """The library with the version compiled into it (PACKAGE_STRING, `aws-ofi-nccl 1.16.3`);
    else, for the EFA installer's own copy only, the version of its package."""
    m = _VERSION_IN_BINARY.search(data)
    if m:
        return OfiNcclLib(str(lib), m.group(1).decode(), "library")
    installer_dir = sysroot / EFA_INSTALLER_OFI_DIR
    if lib.resolve().is_relative_to(installer_dir.resolve()):
        try:
            listing = (sysroot / "opt/amazon/efa_installed_packages").read_text(errors="replace")
        except OSError:
            listing = ""
        pkg = _INSTALLED_PKG.search(listing)
        if pkg:
            return OfiNcclLib(str(lib), pkg.group(1), "efa_installed_packages")
    return OfiNcclLib(str(lib), None)


#: Where the EFA installer puts fi_info when the image's PATH does not include it.
EFA_BIN = "/opt/amazon/efa/bin"


def fi_info_path() -> str:
    """`fi_info` from PATH, else the EFA installer's copy, else the bare name (so that running it
    reports `command not found`)."""
    if proc.which("fi_info"):
        return "fi_info"
    return proc.which("fi_info", path=EFA_BIN) or "fi_info"


def libfabric_version(timeout_s: float = 10.0) -> str | None:
    """`libfabric: 1.22.0amzn4.0` from `fi_info --version`; None when fi_info is absent/broken."""
    result = proc.run([fi_info_path(), "--version"], timeout_s=timeout_s)
    if not result.ok:
        return None
    m = re.search(r"^libfabric:\s*(\S+)", result.stdout, re.M)
    return m.group(1) if m else None


@dataclass(frozen=True, slots=True)
class EfaDevices:
    """EFA devices as the kernel (sysfs) and the container (/dev/infiniband) see them."""

    sysfs: tuple[str, ...]
    """`/sys/class/infiniband` entries that are EFA (`rdmap16s27`, `efa_0`). sysfs is not
    namespaced: a container lists every EFA device of the host, passed to it or not."""
    uverbs: tuple[str, ...]
    """`/dev/infiniband/uverbs*` nodes of EFA devices: what libfabric can open inside this
    container (nodes whose /sys/class/infiniband_verbs entry names a non-EFA device excluded)."""
    unusable: tuple[str, ...] = ()
    """EFA nodes present but not openable here, with the reason (`uverbs3: Operation not
    permitted`): the device cgroup denies them when /dev/infiniband is a hostPath/bind mount
    without the devices being passed (EKS device plugin, docker --device)."""
    sysfs_problem: str | None = None
    """Why `sysfs` could not be read (sysfs not mounted, the directory not listable): the
    count is then unread, not zero."""
    uverbs_problem: str | None = None
    """Why /dev/infiniband could not be listed: `uverbs` is then unread, not empty."""


#: PCI vendor of EFA devices (Amazon): sysfs `device/vendor`. ENA shares it but is no RDMA device.
EFA_PCI_VENDOR = "0x1d0f"


def _is_efa(entry: Path) -> bool:
    """The device's own sysfs files decide (PCI vendor, else bound driver); its name
    (`efa_N` from the driver, `rdmapBsS` from rdma-core's PCI naming) only when they are absent."""
    try:
        return (entry / "device" / "vendor").read_text().strip().lower() == EFA_PCI_VENDOR
    except OSError:
        pass
    driver = entry / "device" / "driver"
    if driver.is_symlink():
        return Path(os.readlink(driver)).name == "efa"
    return entry.name.startswith(("efa_", "rdmap"))


def _listing(directory: Path) -> tuple[list[Path], str | None]:
    """The entries of a directory; none when it does not exist (no such device registered: a
    fact), or ([], why) when it exists but cannot be listed (unread: never "no device")."""
    try:
        return sorted(directory.iterdir()), None
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"cannot list {directory}: {exc.strerror or exc}"


def efa_devices(sysroot: Path = Path("/")) -> EfaDevices:
    """EFA devices under <sysroot>/sys/class/infiniband and <sysroot>/dev/infiniband/uverbs*.
    No /sys/class/infiniband is no RDMA device; no /sys/class at all (sysfs not mounted) or a
    directory that cannot be listed leaves that count unread (`sysfs_problem`,
    `uverbs_problem`)."""
    if (sysroot / "sys/class").is_dir():
        entries, sysfs_problem = _listing(sysroot / "sys/class/infiniband")
    else:
        entries, sysfs_problem = [], f"{sysroot / 'sys/class'} is not there (sysfs not mounted)"
    sysfs = [e.name for e in entries if _is_efa(e)]
    entries, uverbs_problem = _listing(sysroot / "dev/infiniband")
    nodes = [e.name for e in entries if e.name.startswith("uverbs")]
    uverbs, unusable = [], []
    for node in nodes:
        if _uverbs_device(sysroot, node) not in (None, *sysfs):
            continue
        why = _open_problem(sysroot / "dev/infiniband" / node)
        if why:
            unusable.append(f"{node}: {why}")
        else:
            uverbs.append(node)
    return EfaDevices(tuple(sysfs), tuple(uverbs), tuple(unusable), sysfs_problem,
                      uverbs_problem)


def _open_problem(node: Path) -> str | None:
    """Why the node cannot be opened read-write, as libibverbs opens it; None when it can."""
    try:
        os.close(os.open(node, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _uverbs_device(sysroot: Path, node: str) -> str | None:
    """The RDMA device behind /dev/infiniband/<node> (/sys/class/infiniband_verbs/<node>/ibdev);
    None when sysfs does not say."""
    try:
        return (sysroot / "sys/class/infiniband_verbs" / node / "ibdev").read_text().strip() or None
    except OSError:
        return None


def loaded_modules(sysroot: Path = Path("/")) -> frozenset[str]:
    """Names of the loaded kernel modules (<sysroot>/proc/modules); OSError when unreadable."""
    text = (sysroot / "proc/modules").read_text()
    return frozenset(line.split()[0] for line in text.splitlines() if line.strip())


# `Max locked memory         8388608              8388608              bytes     ` (soft, hard,
# units; the name has spaces, so the row is found by its name, then split)
_LIMITS_LINE = re.compile(r"^Max locked memory(?:[ \t]+(.*))?$", re.M)


def memlock_kib(sysroot: Path = Path("/")) -> int | None:
    """The soft `ulimit -l` in KiB; None when unlimited. The real root asks getrlimit; a fake
    sysroot is read from <sysroot>/proc/self/limits. ValueError/OSError when unknown."""
    if sysroot == Path("/"):
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        return None if soft == resource.RLIM_INFINITY else soft // 1024
    path = sysroot / "proc/self/limits"
    m = _LIMITS_LINE.search(path.read_text(errors="replace"))
    if m is None:
        raise ValueError(f"no 'Max locked memory' line in {path}")
    soft = (m[1] or "").split()[:1]
    if soft == ["unlimited"]:
        return None
    if not soft or not soft[0].isdigit():
        raise ValueError(f"no soft limit in {path} line {m[0].strip()!r}")
    return int(soft[0]) // 1024


@dataclass(frozen=True, slots=True)
class FiInfoProbe:
    """`fi_info -p PROVIDER`: its run, the parsed listing, or why there is none."""

    result: ProcResult
    info: FiInfo | None
    problem: str | None = None


def query_fi_info(provider: str | None = "efa", timeout_s: float = 15.0) -> FiInfoProbe:
    """Run `fi_info [-p provider]`. fi_info exits non-zero (printing `-61`) when the provider
    is absent: that is a fact (info.error_code), not a probe failure."""
    argv = [fi_info_path()] + (["-p", provider] if provider else [])
    result = proc.run(argv, timeout_s=timeout_s)
    if result.error is not None or result.timed_out or result.incomplete:
        # Killed mid-listing, cut, or left children behind: a provider missing from a cut
        # listing is not absent.
        return FiInfoProbe(result, None, result.describe())
    from harness.parsers.fi_info import parse_fi_info  # here: the library probes need no parser

    try:
        return FiInfoProbe(result, parse_fi_info(result.output))
    except ParseError as exc:
        first = (result.output.strip().splitlines() or ["(no output)"])[0][:200]
        return FiInfoProbe(result, None, f"`{' '.join(argv)}` printed no provider list or error "
                                         f"code ({exc}); first line: {first!r}")
