"""Host readiness text: /proc/mounts, /proc/<pid>/limits and /proc/<pid>/stat rows, and the clock
tools (`chronyc tracking`, `timedatectl`). Pure functions; harness.probes.host reads the files."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "NETWORK_FSTYPES",
    "ChronyTracking",
    "Mount",
    "limits_row",
    "mount_kind",
    "parse_chronyc_tracking",
    "parse_mounts",
    "parse_stat",
    "parse_timedatectl",
]

#: Filesystems whose calls can block on a server (a hung one leaves callers in D state).
NETWORK_FSTYPES = frozenset({"nfs", "nfs4", "lustre", "cifs", "smb3", "ceph", "glusterfs",
                             "beegfs", "gpfs", "wekafs", "9p"})
_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True, slots=True)
class Mount:
    """One /proc/mounts row (proc(5): `device mountpoint fstype options dump pass`)."""

    device: str
    point: str
    fstype: str
    options: tuple[str, ...] = ()

    @property
    def network(self) -> bool:
        return self.fstype in NETWORK_FSTYPES


def _unescape(field: str) -> str:
    # The kernel writes space, tab, newline and backslash in paths as \040 \011 \012 \134.
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), field)


def parse_mounts(text: str) -> list[Mount]:
    """Every well-formed row of /proc/mounts (or /etc/mtab); rows with < 3 fields are skipped."""
    found = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        options = tuple(fields[3].split(",")) if len(fields) > 3 else ()
        found.append(Mount(_unescape(fields[0]), _unescape(fields[1]), fields[2], options))
    return found


def mount_kind(mount: Mount) -> str:
    """`FSx for Lustre`, `EFS`, `Lustre`, `NFS` ... for messages. EFS through amazon-efs-utils
    with TLS mounts `127.0.0.1:/` via a local stunnel port (`port=20907`), so the server name
    alone misses it (evidence: efs-utils mount lines)."""
    device = mount.device.lower()
    if mount.fstype == "lustre":
        return "FSx for Lustre" if ".fsx." in device else "Lustre"
    if mount.fstype.startswith("nfs"):
        tls_port = any(o.startswith("port=") and o != "port=2049" for o in mount.options)
        if ".efs." in device or (device.startswith("127.0.0.1:") and tls_port):
            return "EFS"
        return "NFS"
    return mount.fstype


def limits_row(text: str, name: str) -> tuple[int | None, int | None]:
    """(soft, hard) of the /proc/<pid>/limits row `name` (`Max open files`); None = unlimited.
    ValueError when the row is missing or its values are not numbers."""
    for line in text.splitlines():
        if line.startswith(name):
            values = line[len(name):].split()[:2]
            if len(values) == 2:
                return _limit(values[0], line), _limit(values[1], line)
    raise ValueError(f"no {name!r} row with a soft and a hard limit")


def _limit(value: str, line: str) -> int | None:
    if value == "unlimited":
        return None
    if not value.isascii() or not value.isdigit():
        raise ValueError(f"limit {value!r} is not a number in {line.strip()!r}")
    return int(value)


def parse_stat(text: str) -> tuple[str, str, int] | None:
    """(command, state letter, starttime in clock ticks) of a /proc/<pid>/stat line; None when
    it is not one. The command sits in parentheses and may itself hold spaces and ')'."""
    head, sep, rest = text.rpartition(")")
    if not sep or "(" not in head:
        return None
    fields = rest.split()
    # proc(5): field 3 is the state, field 22 starttime; `rest` starts at field 3.
    if len(fields) < 20 or not fields[19].isascii() or not fields[19].isdigit():
        return None
    return head.partition("(")[2], fields[0], int(fields[19])


@dataclass(frozen=True, slots=True)
class ChronyTracking:
    """What `chronyc tracking` says about this clock."""

    reference: str
    """`B280042C (ntp1.bytestacker.com)`; `00000000` means no source (chrony's own docs)."""
    stratum: int | None
    offset_s: float | None
    """System time minus NTP time, s: positive when the clock is fast."""
    leap_status: str

    @property
    def synchronized(self) -> bool:
        return (self.leap_status.lower() != "not synchronised"
                and not self.reference.startswith("00000000"))


_CHRONY_ROW = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ()]*?)\s*:\s*(?P<value>.*?)\s*$")
_OFFSET = re.compile(r"^(?P<s>[0-9]+(?:\.[0-9]+)?) seconds (?P<dir>fast|slow) of NTP time$")


def parse_chronyc_tracking(text: str) -> ChronyTracking:
    """`chronyc tracking` (`System time : 0.000260112 seconds fast of NTP time`). ValueError
    when the text has no `Reference ID` and `Leap status` rows (an error, another tool)."""
    rows = {}
    for line in text.splitlines():
        m = _CHRONY_ROW.match(line)
        if m:
            rows[m["key"].lower()] = m["value"]
    if "reference id" not in rows or "leap status" not in rows:
        raise ValueError("not `chronyc tracking` output (no Reference ID / Leap status rows)")
    offset = None
    m = _OFFSET.match(rows.get("system time", ""))
    if m:
        offset = float(m["s"]) * (1 if m["dir"] == "fast" else -1)
    stratum = rows.get("stratum", "")
    return ChronyTracking(rows["reference id"], int(stratum) if stratum.isdigit() else None,
                          offset, rows["leap status"])


# systemd >= v235 `System clock synchronized: yes`; older `NTP synchronized: yes`
# (systemd/systemd#7693). `NTP service` is not judged: under chronyd it reads N/A.
_SYNCED = re.compile(r"^\s*(?:System clock|NTP) synchronized:\s*(?P<v>yes|no)\s*$", re.M)


def parse_timedatectl(text: str) -> bool:
    """Whether `timedatectl` says the system clock is synchronized. ValueError when it says
    neither (no D-Bus in the container, another tool's text)."""
    m = _SYNCED.search(text)
    if m is None:
        raise ValueError("no `System clock synchronized` / `NTP synchronized` row")
    return m["v"] == "yes"
