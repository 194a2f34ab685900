"""Canned network facts for the check tests: a healthy p5.48xlarge and one scenario per
problem. A pytester conftest picks a scenario by name and overrides the fact fixtures with it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harness.fixtures.network import NcclNetEvidence
from harness.parsers.fi_info import parse_fi_info
from harness.parsers.nccl_log import parse_nccl_log
from harness.probes.network import EfaDevices, OfiNcclLib

DATA = Path(__file__).parent / "data"
P5_DEVICES = tuple(f"rdmap{n}s27" for n in range(32))


def _log(name: str) -> NcclNetEvidence:
    return NcclNetEvidence(parse_nccl_log((DATA / "nccl_log" / name).read_text()), True)


HEALTHY = {
    "efa_devices": EfaDevices(P5_DEVICES, tuple(f"uverbs{i}" for i in range(32))),
    "fi_info_efa": parse_fi_info((DATA / "fi_info" / "composed_p5_efa_direct_32.txt").read_text()),
    "kernel_modules": frozenset({"efa", "nvidia", "nvidia_peermem"}),
    "memlock_kib": None,
    "nccl_net_log": _log("composed_ofi_1.16_efa_direct_p5_srun.log"),
    "ofi_nccl_lib": OfiNcclLib("/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "1.16.3"),
}

SCENARIOS: dict[str, dict[str, object]] = {
    "healthy": HEALTHY,
    "container_without_devices": {
        **HEALTHY,
        "efa_devices": EfaDevices(P5_DEVICES, ()),
        "fi_info_efa": parse_fi_info("-61\n"),
        "nccl_net_log": _log("composed_socket_fallback_syslog.log"),
    },
    "no_plugin": {
        **HEALTHY,
        "nccl_net_log": _log("real_socket_no_plugin.log"),
        "ofi_nccl_lib": None,
    },
    "plugin_unused": {**HEALTHY, "nccl_net_log": _log("composed_loaded_but_unused_iso.log")},
    "no_gdr": {**HEALTHY, "nccl_net_log": _log("composed_efa_no_gdr_crlf.log")},
    "gdr_missing_on_some_channels": {
        **HEALTHY,
        "nccl_net_log": NcclNetEvidence(replace(HEALTHY["nccl_net_log"].summary,
                                                num_gdr_channels=12), True),
    },
    "old_plugin": {**HEALTHY, "nccl_net_log": _log("real_ofi_1.4_p4d.log"), "ofi_nccl_lib": None},
    "security_group": {**HEALTHY, "nccl_net_log": _log("composed_security_group.log")},
    "collective_timed_out": {
        **HEALTHY,
        "nccl_net_log": NcclNetEvidence(
            HEALTHY["nccl_net_log"].summary, False,
            "`torchrun ...` did not finish within 90 s and was killed"),
    },
    "small_memlock_no_modules": {
        **HEALTHY,
        "memlock_kib": 65536,
        "kernel_modules": frozenset({"nvidia"}),
    },
    "peermem_missing": {**HEALTHY, "kernel_modules": frozenset({"efa", "nvidia"})},
    # EFAv3 nodes load the EFA installer's efa_nv_peermem (tests/data/host/composed_proc_modules_efa_gdr.txt)
    "efa_nv_peermem": {**HEALTHY, "kernel_modules": frozenset({"efa", "nvidia", "efa_nv_peermem"})},
    # /dev/infiniband as a hostPath mount without the devices: nodes there, open() denied (EPERM)
    "uverbs_not_openable": {**HEALTHY, "efa_devices": EfaDevices(
        P5_DEVICES, (), tuple(f"uverbs{i}: Operation not permitted" for i in range(32)))},
    "nv_peer_mem_legacy": {**HEALTHY, "kernel_modules": frozenset({"efa", "nvidia", "nv_peer_mem"})},
    # Half the NICs: sysfs (the host's, not namespaced) shows all 32, fi_info only the 16 this
    # container was given (issue 25 item 4; PF-NET-010 would notice only with a GPU)
    "fi_info_half_the_devices": {**HEALTHY, "fi_info_efa": parse_fi_info(
        (DATA / "fi_info" / "composed_p5_efa_16_of_32.txt").read_text())},
    # The counts unread: no sysfs in the container, /dev/infiniband not listable; fi_info
    # entries without a domain line name no device
    "counts_unread": {
        **HEALTHY,
        "efa_devices": EfaDevices((), (), sysfs_problem="/sys/class is not there (sysfs not "
                                  "mounted)", uverbs_problem="cannot list /dev/infiniband: "
                                  "Permission denied"),
        "fi_info_efa": parse_fi_info("provider: efa\n    fabric: efa\n    type: FI_EP_RDM\n"),
    },
}
