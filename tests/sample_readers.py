"""Readers of sample kinds that have no `preflight inspect` kind (tests/test_parsers_samples.py):
each runs the parse function or probe a check uses on a sample and returns its result as a dict,
so that an X.expect.json can name the kind. A probe that reads files of a sysroot
(`/proc/self/limits`, `/proc/modules`, `/opt/amazon/efa_installed_packages`) reads the sample
placed at that path in a fresh temporary sysroot, as it would on a node; one that reads sysfs
(DMI, /sys/class/infiniband, counters) or a plugin folder reads the tree the sample's text shows
(tests/sample_trees.py)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.detect import instance as detect
from harness.parsers import ParseError
from harness.parsers.host import mount_kind, parse_chronyc_tracking, parse_mounts, parse_timedatectl
from harness.parsers.nccl_mnnvl import health_faults, parse_mnnvl_lines
from harness.parsers.rdma_bench import parse_fabtests, parse_perftest
from harness.probes import fabric, network
from harness.probes import nic_counters as nc
from tests import sample_trees
from tests.expect_parsed import as_json


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


def _in_tree(files: dict[str, str | None], probe: Callable[[Path], Any]) -> Any:
    with tempfile.TemporaryDirectory() as tmp:
        return probe(sample_trees.build(Path(tmp), files))


def _dmi(sample: Path) -> dict[str, Any]:
    files = sample_trees.sysroot_files(sample.read_text(encoding="utf-8"))
    return {"dmi": {Path(rel).name: v for rel, v in files.items() if "/dmi/id/" in rel},
            **_in_tree(files, lambda root: {"on_ec2": detect._on_ec2(root),
                                            "instance_type": detect.dmi_instance_type(root)})}


def _rdma(sample: Path) -> dict[str, Any]:
    def probe(root: Path) -> dict[str, Any]:
        efa = network.efa_devices(root)
        return {"rdma_devices": as_json(fabric.rdma_devices(root)),
                "efa_sysfs": list(efa.sysfs), "efa_uverbs": list(efa.uverbs)}

    return _in_tree(sample_trees.sysroot_files(sample.read_text(encoding="utf-8")), probe)


def _counters(root: Path) -> dict[str, Any]:
    """A snapshot of the tree, its link problems, and what judging it against itself can
    judge (no growth: `judged` counts the counters read, `unknown` those unreadable)."""
    snap = nc.snapshot(root)
    judged = nc.judge(snap, snap)
    return {"ports": {n: {"state": p.state, "phys_state": p.phys_state,
                          "counters": dict(p.counters)} for n, p in snap.ports.items()},
            "link_problems": nc.link_problems(snap), "judged": judged.judged,
            "unknown": judged.unknown}


def _sysfs_counters(sample: Path) -> dict[str, Any]:
    return _in_tree(sample_trees.sysroot_files(sample.read_text(encoding="utf-8")), _counters)


def _efa_hw_counters(sample: Path) -> dict[str, Any]:
    """Each block's counters as efa_0 port 1's hw_counters: the 2020 driver kept device and
    port stats in one port-level folder (the listing mixes them)."""
    blocks = sample_trees.efa_hw_counters(sample.read_text(encoding="utf-8"))
    return {block: _in_tree({f"sys/class/infiniband/efa_0/ports/1/hw_counters/{k}": v
                             for k, v in counters.items()}, _counters)
            for block, counters in blocks.items()}


def _plugin_listing(sample: Path) -> dict[str, Any]:
    """network.find_ofi_nccl with no environment (its own search order) on the listed files."""
    files, links = sample_trees.plugin_listing(sample.read_text(encoding="utf-8"))

    def probe(root: Path) -> dict[str, Any]:
        for link, target in links.items():
            (root / link.lstrip("/")).symlink_to(target)
        found = network.find_ofi_nccl({}, root)
        path = found and Path(found.path).relative_to(root).as_posix()
        return {**_ofi_nccl(found), "path": path and "/" + path}

    return _in_tree({rel.lstrip("/"): "\x7fELF" for rel in files}, probe)


def _mnnvl(sample: Path) -> dict[str, Any]:
    """harness.parsers.nccl_mnnvl on an NCCL log: each MNNVL line (ids in hex as logged)."""
    return {"lines": [{"bus_id": hex(x.bus_id), "cluster_uuid": x.cluster_uuid,
                       "clique_id": hex(x.clique_id), "state": x.state,
                       "health_mask": hex(x.health_mask), "in_domain": x.in_domain,
                       "faults": health_faults(x.health_mask)}
                      for x in parse_mnnvl_lines(sample.read_text(encoding="utf-8"))]}


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
    "host-dmi": _dmi,  # harness.detect.instance on the DMI attributes shown
    "host-rdma-sysfs": _rdma,  # harness.probes.fabric.rdma_devices, network.efa_devices
    "host-rdma-counters": _sysfs_counters,  # harness.probes.nic_counters
    "efa-hw-counters-listing": _efa_hw_counters,  # harness.probes.nic_counters
    "ofi-nccl-plugin-listing": _plugin_listing,  # harness.probes.network.find_ofi_nccl
    "nccl-mnnvl": _mnnvl,  # harness.parsers.nccl_mnnvl
    "fabtests": _bench(parse_fabtests, "peak_gbit_per_s", "latency_us"),
    "perftest": _bench(parse_perftest, "avg_gbit_per_s"),  # harness.parsers.rdma_bench
}
