"""Sysroot trees built from the text of a host sample (tests/data/host), for the readers of
tests/sample_readers.py whose probe reads sysfs files rather than a text: the sample shows the
values (a `cat` of a sysfs file, `grep -s .` of a counters folder, `ibstat`, `ibv_devinfo`,
`dmidecode`, the EKS device plugin's device list, an `ls -l` / `find` of plugin libraries), the
tree puts each at the path it was read from, and the probe reads the tree as on a node.
Nothing the sample does not show is written: a value it lacks stays a missing file."""

from __future__ import annotations

import ast
import re
from pathlib import Path

#: `ibstat` port words -> the sysfs `ports/N/state` / `phys_state` lines they were printed from
#: (linux-rdma/rdma-core infiniband-diags/ibstat.c port_state_str / port_phy_state_str index
#: the number that libibumad reads from sysfs; torvalds/linux drivers/infiniband/core/sysfs.c
#: state_show / phys_state_show print `N: NAME`).
_IBSTAT_STATE = {"Down": "1: DOWN", "Initializing": "2: INIT", "Armed": "3: ARMED",
                 "Active": "4: ACTIVE"}
_IBSTAT_PHYS = {"Sleep": "1: Sleep", "Polling": "2: Polling", "Disabled": "3: Disabled",
                "PortConfigurationTraining": "4: PortConfigurationTraining",
                "LinkUp": "5: LinkUp", "LinkErrorRecovery": "6: LinkErrorRecovery"}
#: `dmidecode` type 0 (BIOS Information) fields -> the kernel's DMI attribute of the same
#: string (torvalds/linux drivers/firmware/dmi-id.c: bios_vendor, bios_version, bios_date).
_DMIDECODE_BIOS = {"Vendor": "bios_vendor", "Version": "bios_version", "Release Date": "bios_date"}
_IB = "sys/class/infiniband"

_CAT = re.compile(r"\bcat (/sys/\S+)\s*$")
_RUBY_READ = re.compile(r"File\.read\('(/sys/[^']+)'\)")
_RUBY_VALUE = re.compile(r'^=> ("(?:[^"\\]|\\.)*")$')
# `grep -s . FILES` prints `PATH:VALUE`; a path's folders may hold `:` (PCI ids), its file not.
_GREP = re.compile(r"^(/sys/(?:[^/\n]*/)*[^/:\n]+):(.*)$")
_EKS_DEVICE = re.compile(r"\{(\S+) (uverbs\d+) (/sys/class/infiniband_verbs/uverbs\d+) "
                         r"/sys/class/infiniband/(\S+)\}")
_NAMED_DEVICES = re.compile(r"^- \d+ `\w+\*` devices \(e\.g\., (.*)\)$", re.M)


def _ibstat(lines: list[str], out: dict[str, str | None]) -> None:
    ca = port = None
    for line in lines:
        text = line.strip()
        if m := re.match(r"^CA '(\S+)'$", text):
            ca, port = m[1], None
        elif ca and (m := re.match(r"^Port (\d+):$", text)):
            port = f"{_IB}/{ca}/ports/{m[1]}"
        elif port and ": " in text:
            key, value = text.split(": ", 1)
            if key == "State" and value in _IBSTAT_STATE:
                out[f"{port}/state"] = _IBSTAT_STATE[value]
            elif key == "Physical state" and value in _IBSTAT_PHYS:
                out[f"{port}/phys_state"] = _IBSTAT_PHYS[value]
            elif key == "Rate":
                out[f"{port}/rate"] = f"{value} Gb/sec"  # sysfs: `100 Gb/sec (4X EDR)`
            elif key == "Link layer":
                out[f"{port}/link_layer"] = value


def _ibv_devinfo(lines: list[str], out: dict[str, str | None]) -> None:
    """`vendor_id` / `vendor_part_id` are the PCI ids the driver reports (amzn/amzn-drivers
    efa_verbs.c efa_query_device: pdev->vendor / pdev->device), i.e. sysfs device/vendor and
    device/device; `state: PORT_ACTIVE (4)` is the port's sysfs state number."""
    dev = port = None
    for line in lines:
        key, _, value = line.strip().partition(":")
        value = value.strip()
        if key == "hca_id":
            dev, port = value, None
        elif dev and key == "vendor_id":
            out[f"{_IB}/{dev}/device/vendor"] = value
        elif dev and key == "vendor_part_id":
            out[f"{_IB}/{dev}/device/device"] = f"0x{int(value):04x}"
        elif dev and key == "port":
            port = f"{_IB}/{dev}/ports/{value}"
        elif port and key == "state" and (m := re.match(r"^PORT_(\w+) \((\d)\)$", value)):
            out[f"{port}/state"] = f"{m[2]}: {m[1]}"


def sysroot_files(text: str) -> dict[str, str | None]:
    """{path under the sysroot: its value, or None for a folder} of every value `text` shows."""
    lines = text.splitlines()
    out: dict[str, str | None] = {}
    for i, line in enumerate(lines):
        after = lines[i + 1] if i + 1 < len(lines) else ""
        if (m := _CAT.search(line)) and after.strip():
            out[m[1].lstrip("/")] = after.strip()
        elif (m := _RUBY_READ.search(line)) and (v := _RUBY_VALUE.match(after.strip())):
            out[m[1].lstrip("/")] = ast.literal_eval(v[1]).strip()  # irb's `=> "Amazon EC2\n"`
        elif m := _GREP.match(line):
            out[m[1].lstrip("/")] = m[2]
    if "ibstat" in text:
        _ibstat(lines, out)
    if "ibv_devinfo" in text:
        _ibv_devinfo(lines, out)
    if "DMI type 0," in text:
        for line in lines:
            key, _, value = line.strip().partition(": ")
            if key in _DMIDECODE_BIOS:
                out[f"sys/class/dmi/id/{_DMIDECODE_BIOS[key]}"] = value
    for name, node, verbs, dev in _EKS_DEVICE.findall(text):
        # the plugin pairs a device with the uverbs node whose ibdev names it, and hands the
        # node to the pod: /dev/infiniband/uverbsN
        out[f"{_IB}/{dev}"] = None
        out[f"{verbs.lstrip('/')}/ibdev"] = name
        out[f"dev/infiniband/{node}"] = ""
    for names in _NAMED_DEVICES.findall(text):
        for dev in re.findall(r"`(\w+)`", names):
            out[f"{_IB}/{dev}"] = None
    return out


def build(root: Path, files: dict[str, str | None]) -> Path:
    """Write `files` under `root`; a device folder written under /sys/devices gets the
    /sys/class/infiniband/<dev> link the kernel makes to it."""
    for rel, value in files.items():
        path = root / rel
        if value is None:
            path.mkdir(parents=True, exist_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n" if value else "")
        m = re.match(r"^(sys/devices/.*/infiniband/([^/]+))/", rel)
        link = root / _IB / m[2] if m else None
        if link and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(root / m[1])
    return root


def efa_hw_counters(text: str) -> dict[str, dict[str, str]]:
    """{block (`client`, `server`): {counter: value}} of a listing of `name :value` lines
    under block titles (linux-rdma/perftest#113)."""
    blocks: dict[str, dict[str, str]] = {}
    current = None
    for line in text.splitlines():
        if re.match(r"^[a-z]+$", line):
            current = blocks.setdefault(line, {})
        elif current is not None and (m := re.match(r"^(\w+) :(\S+)$", line)):
            current[m[1]] = m[2]
    return blocks


def plugin_listing(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """({library path: ""}, {link path: its target}) of an `ls -l` of one folder (the folder
    from the shell prompt `...:/DIR# ll`) or a `find` listing (absolute paths). The listing
    shows no bytes: each library is written as an ELF header only, so no version is in it."""
    files, links = {}, {}
    folder = None
    for line in text.splitlines():
        if m := re.match(r"^\S+@\S+:(/\S*)# ", line):
            folder = m[1].rstrip("/")
        elif folder and (m := re.match(r"^l\S+\s.*\s(\S+) -> (\S+)$", line)):
            links[f"{folder}/{m[1]}"] = m[2]
        elif folder and (m := re.match(r"^-\S+\s.*\s(\S+)$", line)):
            files[f"{folder}/{m[1]}"] = ""
        elif re.match(r"^/\S+$", line):
            files[line] = ""
    return files, links
