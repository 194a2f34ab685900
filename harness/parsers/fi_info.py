"""`fi_info` output (libfabric): providers, EFA devices, endpoint types, and the error code it
prints when no provider matches (`-61` alone from old releases, `fi_getinfo: -61` from newer).

Reads blocks like::

    provider: efa
        fabric: efa-direct
        domain: rdmap16s27-rdm
        version: 122.0
        type: FI_EP_RDM
        protocol: FI_PROTO_EFA

and the same facts from `fi_info -v` (`---` / `fi_info:` blocks: `fi_fabric_attr` `prov_name`,
`name`, `prov_version`; `fi_domain_attr` `name`; `fi_ep_attr` `type`, `protocol`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, TextIO

from harness.parsers import ParseError, read_text

__all__ = ["INSPECT", "FiInfo", "FiInfoEntry", "inspect_fi_info", "parse_fi_info"]


@dataclass(frozen=True, slots=True)
class FiInfoEntry:
    """One `provider:` block."""

    provider: str
    fabric: str | None = None
    domain: str | None = None
    version: str | None = None
    type: str | None = None
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class FiInfo:
    """What `fi_info` listed."""

    entries: tuple[FiInfoEntry, ...]
    error_code: int | None = None
    """The negative errno fi_info printed instead of providers (-61: FI_ENODATA, no match)."""

    @property
    def providers(self) -> list[str]:
        return list(dict.fromkeys(e.provider for e in self.entries))

    @property
    def efa(self) -> bool:
        """The EFA provider is listed (alone, or as the core of a `efa;ofi_rxd` stack)."""
        return any(e.provider.split(";")[0] == "efa" for e in self.entries)

    @property
    def efa_devices(self) -> list[str]:
        """EFA device names from the domains (`rdmap16s27-rdm` -> `rdmap16s27`, `efa_0-dgrm`)."""
        names = (
            re.sub(r"-(rdm|dgrm|rxd|rxm)$", "", e.domain)
            for e in self.entries
            if e.domain and e.provider.split(";")[0] == "efa"
        )
        return list(dict.fromkeys(names))

    @property
    def endpoint_types(self) -> list[str]:
        return list(dict.fromkeys(e.type for e in self.entries if e.type))

    @property
    def fabrics(self) -> list[str]:
        return list(dict.fromkeys(e.fabric for e in self.entries if e.fabric))

    def to_json(self) -> dict[str, Any]:
        """The `preflight inspect fi-info --json` record (keys documented in docs/network.md)."""
        return {
            "efa": self.efa,
            "efa_devices": self.efa_devices,
            "providers": self.providers,
            "endpoint_types": self.endpoint_types,
            "error_code": self.error_code,
        }


_FIELD = re.compile(r"^\s*(provider|fabric|domain|version|type|protocol):\s*(.*?)\s*$")
_ERROR = re.compile(r"^\s*(?:fi_getinfo:\s*)?(-\d+)\b(?:\s*\(.*\))?\s*$")
#: `fi_info -v`: a block starts at `fi_info:`; `fi_ep_attr:` and the like open a section.
_VERBOSE_BLOCK = re.compile(r"^\s*fi_info:\s*$")
_VERBOSE_LINE = re.compile(r"^\s*(\w+):\s*(.*?)\s*$")
_VERBOSE_FIELDS = {
    ("fi_fabric_attr", "prov_name"): "provider",
    ("fi_fabric_attr", "name"): "fabric",
    ("fi_fabric_attr", "prov_version"): "version",
    ("fi_domain_attr", "name"): "domain",
    ("fi_ep_attr", "type"): "type",
    ("fi_ep_attr", "protocol"): "protocol",
}


def _verbose_entries(lines: list[str]) -> list[FiInfoEntry]:
    """The entries of `fi_info -v` output (blocks without a `prov_name` are dropped)."""
    blocks: list[dict[str, str]] = []
    section = ""
    for line in lines:
        if _VERBOSE_BLOCK.match(line):
            blocks.append({})
            section = ""
        elif blocks and (m := _VERBOSE_LINE.match(line)):
            if not m[2]:
                section = m[1]
            elif (key := _VERBOSE_FIELDS.get((section, m[1]))) is not None:
                blocks[-1].setdefault(key, m[2])
    return [FiInfoEntry(**b) for b in blocks if "provider" in b]


def _listing(lines: list[str]) -> tuple[list[FiInfoEntry], int | None]:
    """The `provider:` blocks of the default listing, and the error code printed instead."""
    entries: list[FiInfoEntry] = []
    current: dict[str, str] | None = None
    error_code: int | None = None
    for line in lines:
        if m := _FIELD.match(line):
            key, value = m[1], m[2]
            if key == "provider":
                if current is not None:
                    entries.append(FiInfoEntry(**current))
                current = {"provider": value}
            elif current is not None:
                current.setdefault(key, value)
        elif (m := _ERROR.match(line)) and error_code is None:
            error_code = int(m[1])
    if current is not None:
        entries.append(FiInfoEntry(**current))
    return entries, error_code


def parse_fi_info(text: str) -> FiInfo:
    """Parse `fi_info` / `fi_info -p efa` / `fi_info -v` output; ParseError when it holds neither
    provider blocks nor an error code."""
    lines = text.replace("\r\n", "\n").split("\n")
    if any(_VERBOSE_BLOCK.match(line) for line in lines):
        entries, error_code = _verbose_entries(lines), None
    else:
        entries, error_code = _listing(lines)
    if not entries and error_code is None:
        raise ParseError(
            "nothing recognised as fi_info output: no `provider:` blocks, no `fi_info -v` "
            "blocks and no error code (`-61` or `fi_getinfo: -61`)"
        )
    return FiInfo(tuple(entries), error_code)


def inspect_fi_info(stream: TextIO, *, profile: Any) -> dict[str, Any]:
    """`preflight inspect fi-info FILE`: efa, efa_devices, providers, endpoint_types,
    error_code."""
    return parse_fi_info(read_text(stream)).to_json()


INSPECT = {"fi-info": inspect_fi_info}
