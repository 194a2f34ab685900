"""Network: EFA devices, libfabric, kernel modules and memlock on this node; then, from the debug
log of a real NCCL collective, that NCCL uses EFA through aws-ofi-nccl with GPUDirect RDMA."""

from __future__ import annotations

from typing import TYPE_CHECKING

from harness.base.errors import ProbeError
from harness.checking import check, expect, fail, measure, settle
from harness.fixtures.network import NcclNetEvidence, require_efa
from harness.judges import network as judges

if TYPE_CHECKING:  # types only: the probes and parsers load in the fixtures that read (start-up)
    from harness.parsers.fi_info import FiInfo
    from harness.probes.network import EfaDevices, OfiNcclLib
    from harness.profiles.model import Profile

REMEDY_DEVICES = ("pass every EFA device to the container (docker run --device "
                  "/dev/infiniband/uverbsN for each, or the EKS vpc.amazonaws.com/efa resource); "
                  "on the host check `ls /sys/class/infiniband`")
REMEDY_PLUGIN = ("install aws-ofi-nccl (EFA installer >= 1.38 ships it in /opt/amazon/ofi-nccl) "
                 "and put its lib directory on LD_LIBRARY_PATH; read the NET/OFI lines of an "
                 "NCCL_DEBUG=INFO log")

@check(
    "PF-NET-001",
    title="EFA device count equals the instance type's",
    why="A missing EFA device removes its share of the inter-node bandwidth; NCCL still runs.",
    remedy="launch the instance with all its EFA interfaces (SageMaker and EFA-enabled launch "
    "templates do); check `ls /sys/class/infiniband` on the host",
)
def test_efa_device_count_matches(profile: Profile, efa_devices: EfaDevices):
    require_efa(profile)
    if efa_devices.sysfs_problem:
        raise ProbeError(f"EFA device count unread: {efa_devices.sysfs_problem}; "
                         f"{profile.num_efa_devices} required for {profile.name}")
    expect("EFA devices in /sys/class/infiniband", len(efa_devices.sysfs), "==",
           profile.num_efa_devices, detail=", ".join(efa_devices.sysfs) or "none",
           name="efa_devices_in_sys_class_infiniband")


@check(
    "PF-NET-002",
    title="EFA devices are visible inside the container (/dev/infiniband/uverbs*)",
    why="libfabric opens /dev/infiniband/uverbsN; without them fi_getinfo returns -61 and NCCL "
    "silently falls back to TCP sockets.",
    remedy=REMEDY_DEVICES,
)
def test_efa_uverbs_visible(profile: Profile, efa_devices: EfaDevices):
    require_efa(profile)
    if efa_devices.uverbs_problem:
        raise ProbeError(f"EFA device nodes unread: {efa_devices.uverbs_problem}; "
                         f"{profile.num_efa_devices} required for {profile.name}")
    expect("EFA device nodes /dev/infiniband/uverbs*", len(efa_devices.uverbs), ">=",
           profile.num_efa_devices,
           detail=_unusable_detail(efa_devices.unusable),
           name="efa_device_nodes_dev_infiniband_uverbs")


def _unusable_detail(unusable: tuple[str, ...]) -> str | None:
    """`32 present but not openable: uverbs0: Operation not permitted and 31 more`."""
    if not unusable:
        return None
    more = f" and {len(unusable) - 1} more" if len(unusable) > 1 else ""
    return f"{len(unusable)} present but not openable: {unusable[0]}{more}"


@check(
    "PF-NET-003",
    title="`fi_info -p efa` lists the EFA provider on every EFA device of the instance type",
    why="aws-ofi-nccl reaches EFA through libfabric's efa provider; a device fi_info cannot "
    "list (not passed to the container, down, its driver failed) the plugin cannot use either: "
    "its share of the inter-node bandwidth is gone though NCCL still runs. sysfs is not "
    "namespaced (PF-NET-001 counts the host's devices): fi_info counts what this container can "
    "open.",
    remedy=REMEDY_DEVICES + "; install the EFA software (libfabric from the EFA installer)",
)
def test_fi_info_lists_efa(profile: Profile, fi_info_efa: FiInfo):
    settle(judges.fi_info_lists_efa(profile, fi_info_efa))


@check(
    "PF-NET-004",
    title="The efa kernel module is loaded (no GPUDirect peer-memory module: warning)",
    why="Without the efa driver there are no EFA devices. GPUDirect RDMA needs a peer-memory "
    "module (nvidia_peermem, efa_nv_peermem, nv_peer_mem) or a driver with DMA-BUF support.",
    remedy="install the EFA driver (EFA installer) on the host; `modprobe nvidia_peermem`",
)
def test_efa_kernel_module_loaded(profile: Profile, kernel_modules: frozenset[str]):
    for verdict in judges.efa_kernel_modules(profile, kernel_modules):
        settle(verdict)


@check(
    "PF-NET-005",
    title="Locked-memory limit (ulimit -l) is unlimited or large enough",
    why="EFA registers host and GPU memory; a small memlock limit makes registration fail "
    "(ibv_reg_mr / 'Cannot allocate memory') or NCCL fall back.",
    remedy="run the container with `--ulimit memlock=-1:-1` (unlimited)",
)
def test_memlock_unlimited(profile: Profile, memlock_kib: int | None):
    require_efa(profile)
    if memlock_kib is None:
        measure("locked-memory limit (ulimit -l)", "unlimited", ok=True,
                name="locked_memory_limit_ulimit_l")
        return
    if profile.min_memlock_kib is None:
        measure("locked-memory limit (ulimit -l)", memlock_kib, "KiB", op="==",
                threshold="unlimited", ok=False, name="locked_memory_limit_ulimit_l")
        fail(f"locked-memory limit (ulimit -l) {memlock_kib} KiB, unlimited required for "
             f"{profile.name}")
    expect("locked-memory limit (ulimit -l)", memlock_kib, ">=", profile.min_memlock_kib, "KiB",
           name="locked_memory_limit_ulimit_l")


@check(
    "PF-NET-006",
    title="NCCL loaded aws-ofi-nccl, at least the profile's minimum version",
    why="Without the plugin NCCL cannot use EFA at all; old plugins lack P5/efa-direct support "
    "and need outdated variables.",
    remedy=REMEDY_PLUGIN,
    exclusive=True,
)
def test_ofi_plugin_loaded(
    profile: Profile, nccl_net_log: NcclNetEvidence, ofi_nccl_lib: OfiNcclLib | None
):
    settle(judges.ofi_plugin(profile, nccl_net_log.summary, ofi_nccl_lib))


@check(
    "PF-NET-007",
    title="The libfabric provider NCCL used is efa (ib on InfiniBand profiles)",
    why="aws-ofi-nccl can also run over tcp or shm providers, at a fraction of EFA's bandwidth.",
    remedy=REMEDY_DEVICES + "; do not set FI_PROVIDER to anything but efa",
    exclusive=True,
)
def test_provider_is_efa(profile: Profile, nccl_net_log: NcclNetEvidence):
    settle(judges.net_provider(profile, nccl_net_log.summary))


@check(
    "PF-NET-008",
    title="NCCL did not fall back to TCP sockets (NET/Socket)",
    why="A failed plugin makes NCCL fall back to sockets silently: the job runs, 10-50x slower "
    "across nodes.",
    remedy=REMEDY_PLUGIN,
    exclusive=True,
)
def test_network_not_socket(profile: Profile, nccl_net_log: NcclNetEvidence):
    settle(judges.net_not_socket(profile, nccl_net_log.summary))


@check(
    "PF-NET-009",
    title="Every NET channel uses GPUDirect RDMA (/GDRDMA) where the profile requires it",
    why="Without GDR every inter-node transfer is staged through host memory; aws-ofi-nccl "
    "requires GDR on p4d/p5/p6.",
    remedy="load nvidia_peermem (or use a driver with DMA-BUF), do not set "
    "FI_EFA_USE_DEVICE_RDMA=0, NCCL_NET_GDR_LEVEL=LOC or FI_HMEM_DISABLE_P2P=1",
    exclusive=True,
)
def test_net_channels_use_gdr(profile: Profile, nccl_net_log: NcclNetEvidence):
    settle(judges.net_gdr(profile, nccl_net_log.summary))


@check(
    "PF-NET-010",
    title="aws-ofi-nccl found every EFA NIC",
    why="Fewer NICs than the instance has means less bandwidth (a device missing in the "
    "container, or a NIC down).",
    remedy=REMEDY_DEVICES,
    exclusive=True,
)
def test_ofi_nic_count(profile: Profile, nccl_net_log: NcclNetEvidence):
    settle(judges.net_nic_count(profile, nccl_net_log.summary))


@check(
    "PF-NET-011",
    title="The NCCL collective completed without NCCL WARN lines or known failures",
    why="WARN lines name the failure (security group, missing devices, memory registration) "
    "long before a job hangs.",
    remedy="fix the first failure named; `preflight inspect nccl-log FILE` explains a log",
    exclusive=True,
)
def test_nccl_log_has_no_warnings(profile: Profile, nccl_net_log: NcclNetEvidence):
    settle(judges.net_no_warnings(
        profile, nccl_net_log.summary, None if nccl_net_log.run_ok else str(nccl_net_log.run_problem)))
