"""Network probes: interfaces, EFA devices, kernel modules, the locked-memory limit, `fi_info`,
the aws-ofi-nccl library and its version, libfabric's version, and a real short NCCL collective
whose debug log is the evidence the network checks judge. Facts only: no thresholds."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness import proc
from harness.parsers import ParseError
from harness.parsers.fi_info import FiInfo, parse_fi_info
from harness.parsers.nccl_log import NcclLogSummary, parse_nccl_log_stream

__all__ = [
    "CollectiveRun",
    "EfaDevices",
    "FiInfoProbe",
    "OfiNcclLib",
    "cuda_device_count",
    "efa_devices",
    "find_ofi_nccl",
    "libfabric_version",
    "loaded_modules",
    "memlock_kib",
    "network_interfaces",
    "query_fi_info",
    "run_collective",
]

#: Where EFA installers and DLC images put aws-ofi-nccl (searched before LD_LIBRARY_PATH).
OFI_NCCL_DIRS = (
    "opt/amazon/ofi-nccl/lib", "opt/amazon/ofi-nccl/lib64", "opt/aws-ofi-nccl/lib",
    "usr/local/lib", "usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu",
)
_LIB_NAMES = re.compile(r"^libnccl-net(-ofi|-aws-ofi)?\.so(\.\d+)*$")
_VERSION_IN_BINARY = re.compile(rb"aws-ofi-nccl[ /v-]{1,3}(\d+\.\d+\.\d+(?:[-.][0-9A-Za-z]+)?)")
# /opt/amazon/efa_installed_packages lists packages like `libnccl-ofi_1.13.2-1_amd64` (Debian),
# `libnccl-ofi-1.13.2-1.amzn2.x86_64` (RPM) or `aws-ofi-nccl 1.x` (older notes).
_INSTALLED_PKG = re.compile(r"(?:aws-ofi-nccl|libnccl-ofi)[-_ ]v?(\d+\.\d+\.\d+)", re.I)


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
    """`/sys/class/infiniband` entries that are EFA (`rdmap16s27`, `efa_0`)."""
    uverbs: tuple[str, ...]
    """`/dev/infiniband/uverbs*` nodes: what libfabric can open inside this container."""


#: PCI vendor of EFA devices (Amazon): sysfs `device/vendor`.
EFA_PCI_VENDOR = "0x1d0f"


def _is_efa(entry: Path) -> bool:
    if entry.name.startswith(("efa_", "rdmap")):
        return True
    try:
        if (entry / "device" / "vendor").read_text().strip() == EFA_PCI_VENDOR:
            return True
        return (entry / "device" / "driver").resolve().name == "efa"
    except OSError:
        return False


def efa_devices(sysroot: Path = Path("/")) -> EfaDevices:
    """EFA devices under <sysroot>/sys/class/infiniband and <sysroot>/dev/infiniband/uverbs*."""
    try:
        sysfs = sorted(e.name for e in (sysroot / "sys/class/infiniband").iterdir() if _is_efa(e))
    except OSError:
        sysfs = []
    try:
        uverbs = sorted(e.name for e in (sysroot / "dev/infiniband").iterdir()
                        if e.name.startswith("uverbs"))
    except OSError:
        uverbs = []
    return EfaDevices(tuple(sysfs), tuple(uverbs))


def loaded_modules(sysroot: Path = Path("/")) -> frozenset[str]:
    """Names of the loaded kernel modules (<sysroot>/proc/modules); OSError when unreadable."""
    text = (sysroot / "proc/modules").read_text()
    return frozenset(line.split()[0] for line in text.splitlines() if line.strip())


_LIMITS_LINE = re.compile(r"^Max locked memory\s+(\S+)\s+(\S+)\s+bytes", re.M)


def memlock_kib(sysroot: Path = Path("/")) -> int | None:
    """The soft `ulimit -l` in KiB; None when unlimited. The real root asks getrlimit; a fake
    sysroot is read from <sysroot>/proc/self/limits. ValueError/OSError when unknown."""
    if sysroot == Path("/"):
        import resource

        soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        return None if soft == resource.RLIM_INFINITY else soft // 1024
    m = _LIMITS_LINE.search((sysroot / "proc/self/limits").read_text())
    if m is None:
        raise ValueError(f"no 'Max locked memory' line in {sysroot / 'proc/self/limits'}")
    return None if m[1] == "unlimited" else int(m[1]) // 1024


@dataclass(frozen=True, slots=True)
class FiInfoProbe:
    """`fi_info -p PROVIDER`: its run, the parsed listing, or why there is none."""

    result: proc.ProcResult
    info: FiInfo | None
    problem: str | None = None


def query_fi_info(provider: str | None = "efa", timeout_s: float = 15.0) -> FiInfoProbe:
    """Run `fi_info [-p provider]`. fi_info exits non-zero (printing `-61`) when the provider
    is absent: that is a fact (info.error_code), not a probe failure."""
    argv = [fi_info_path()] + (["-p", provider] if provider else [])
    result = proc.run(argv, timeout_s=timeout_s)
    if result.error is not None or result.timed_out:
        return FiInfoProbe(result, None, result.describe())
    try:
        return FiInfoProbe(result, parse_fi_info(result.output))
    except ParseError as exc:
        first = (result.output.strip().splitlines() or ["(no output)"])[0][:200]
        return FiInfoProbe(result, None, f"`{' '.join(argv)}` printed no provider list or error "
                                         f"code ({exc}); first line: {first!r}")


def cuda_device_count(python: str = sys.executable, timeout_s: float = 120.0) -> int:
    """CUDA devices torch sees, asked in a child interpreter (torch stays out of this process);
    RuntimeError saying why when torch cannot answer."""
    code = "import torch; print(torch.cuda.device_count())"
    result = proc.run([python, "-c", code], timeout_s=timeout_s)
    lines = result.stdout.strip().splitlines()
    if not result.ok or not lines or not lines[-1].isdigit():
        raise RuntimeError(f"cannot ask torch for CUDA devices: {result.describe()}")
    return int(lines[-1])


@dataclass(frozen=True, slots=True)
class CollectiveRun:
    """A short all_reduce under torchrun: how it ended and the NCCL debug logs it wrote."""

    result: proc.ProcResult
    log_files: tuple[Path, ...]
    workdir: Path

    def summary(self) -> NcclLogSummary:
        """The NCCL logs of every rank, parsed as one log (ParseError when there are none)."""
        if not self.log_files:
            raise ParseError(f"the collective wrote no NCCL debug log under {self.workdir}")
        handles = [path.open("rb") for path in self.log_files]
        try:
            return parse_nccl_log_stream(handles)
        finally:
            for fh in handles:
                fh.close()


#: Repository root, so that `-m harness.probes.nccl_worker` imports in the ranks.
_ROOT = Path(__file__).resolve().parents[2]


def run_collective(
    nproc: int,
    *,
    env: Mapping[str, str],
    workdir: Path,
    timeout_s: float,
    backend: str = "nccl",
    force_net: bool = True,
    python: str = sys.executable,
    worker_args: tuple[str, ...] = (),
) -> CollectiveRun:
    """All_reduce on `nproc` local ranks (torchrun --standalone) with NCCL_DEBUG=INFO,
    NCCL_DEBUG_SUBSYS=INIT,NET and NCCL_DEBUG_FILE under `workdir`.

    `force_net` disables NCCL's P2P, SHM and NVLS transports so that even a single node sends
    through the network plugin: the channel lines then show the NIC path (`via NET/.../GDRDMA`).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    child = dict(env)
    child.update(NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET",
                 NCCL_DEBUG_FILE=str(workdir / "nccl-%h-%p.log"))
    if force_net:
        child.update(NCCL_P2P_DISABLE="1", NCCL_SHM_DISABLE="1", NCCL_NVLS_ENABLE="0")
    child["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH")) if p)
    # The ranks' own timeout fires before ours, so a hang ends as an error message, not a kill.
    rank_timeout_s = max(5.0, timeout_s - 20.0)
    argv = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", "harness.probes.nccl_worker", "--backend", backend,
            "--timeout-s", f"{rank_timeout_s:g}", *worker_args]
    result = proc.run(argv, timeout_s=timeout_s, env=child, cwd=workdir,
                      output_path=workdir / "torchrun.log")
    return CollectiveRun(result, tuple(sorted(workdir.glob("nccl-*.log"))), workdir)
