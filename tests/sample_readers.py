"""Readers of sample kinds that have no `preflight inspect` kind (tests/test_parsers_samples.py):
each runs the parse function or probe a check uses on a sample and returns its result as a dict,
so that an X.expect.json can name the kind. A probe that reads files of a sysroot
(`/proc/self/limits`, `/proc/modules`, `/opt/amazon/efa_installed_packages`) reads the sample
placed at that path in a fresh temporary sysroot, as it would on a node."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.parsers import ParseError
from harness.parsers.host import mount_kind, parse_chronyc_tracking, parse_mounts, parse_timedatectl
from harness.parsers.rdma_bench import parse_fabtests, parse_perftest
from harness.probes import network


def _in_sysroot(sample: Path, rel: str, probe: Callable[[Path], Any],
                extra: dict[str, bytes] | None = None) -> Any:
    """`probe(root)` on a temporary sysroot holding the sample at `rel` (and `extra` files)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for path, data in {rel: sample.read_bytes(), **(extra or {})}.items():
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)
        return probe(root)


def _chronyc(sample: Path) -> dict[str, Any]:
    tracking = parse_chronyc_tracking(sample.read_text(encoding="utf-8"))
    return {**dataclasses.asdict(tracking), "synchronized": tracking.synchronized}


def _timedatectl(sample: Path) -> dict[str, Any]:
    return {"synchronized": parse_timedatectl(sample.read_text(encoding="utf-8"))}


def _mounts(sample: Path) -> dict[str, Any]:
    rows = parse_mounts(sample.read_text(encoding="utf-8"))
    mounts = [{"device": m.device, "point": m.point, "fstype": m.fstype, "network": m.network,
               "kind": mount_kind(m)} for m in rows]
    return {"mounts": mounts, "network_mounts": [m for m in mounts if m["network"]]}


def _memlock(sample: Path) -> dict[str, Any]:
    return {"memlock_kib": _in_sysroot(sample, "proc/self/limits", network.memlock_kib)}


def _modules(sample: Path) -> dict[str, Any]:
    return {"modules": sorted(_in_sysroot(sample, "proc/modules", network.loaded_modules))}


def _ofi_nccl(found: network.OfiNcclLib | None) -> dict[str, Any]:
    return {"found": found is not None, "version": found and found.version,
            "version_source": found and found.version_source}


#: The EFA installer's own plugin copy, stripped (no version string): its version can only come
#: from the installer's package listing.
_STRIPPED_INSTALLER_LIB = {"opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so": b"\x7fELF stripped"}


def _installed_packages(sample: Path) -> dict[str, Any]:
    return _ofi_nccl(_in_sysroot(sample, "opt/amazon/efa_installed_packages",
                                 lambda root: network.find_ofi_nccl({}, root),
                                 _STRIPPED_INSTALLER_LIB))


def _plugin_strings(sample: Path) -> dict[str, Any]:
    """The sample (`strings` output of a plugin library) as the bytes of that library."""
    return _ofi_nccl(_in_sysroot(sample, "opt/aws-ofi-nccl/lib/libnccl-net.so",
                                 lambda root: network.find_ofi_nccl({}, root)))


def _bench(parse: Callable[[str], Any], *derived: str) -> Callable[[Path], dict[str, Any]]:
    """A reader of `parse`'s result: its fields, its `derived` methods' values, and `error`
    (the ParseError's message, the only key when it raised)."""
    def read(sample: Path) -> dict[str, Any]:
        try:
            result = parse(sample.read_text(encoding="utf-8"))
        except ParseError as exc:
            return {"error": str(exc)}
        return {**dataclasses.asdict(result), **{d: getattr(result, d)() for d in derived},
                "error": None}

    return read


#: kind -> reader(sample path) -> result dict.
PROBE_READERS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "host-chronyc-tracking": _chronyc,  # harness.parsers.host.parse_chronyc_tracking
    "host-timedatectl": _timedatectl,  # harness.parsers.host.parse_timedatectl
    "host-mounts": _mounts,  # harness.parsers.host.parse_mounts + mount_kind
    "host-proc-limits": _memlock,  # harness.probes.network.memlock_kib
    "host-proc-modules": _modules,  # harness.probes.network.loaded_modules
    "efa-installed-packages": _installed_packages,  # harness.probes.network.find_ofi_nccl
    "ofi-nccl-plugin-strings": _plugin_strings,  # harness.probes.network.find_ofi_nccl
    "fabtests": _bench(parse_fabtests, "peak_gbit_per_s", "latency_us"),
    "perftest": _bench(parse_perftest, "avg_gbit_per_s"),  # harness.parsers.rdma_bench
}
