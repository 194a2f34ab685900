"""The bad-hardware ledger (PREFLIGHT_LEDGER: a folder or an `s3://` prefix, JSON lines,
harness.memory.store): every failure that names hardware (a GPU by UUID and serial, a NIC by GUID,
an NVLink by GPU and link) is appended, with where, when and which check; a run that sees
ledgered hardware says so, and certify fails on it (PF-LEDGER-001) until the entry is cleared
(`preflight ledger clear SERIAL --why ...`, itself a recorded line). Nothing is ever rewritten:
the ledger is its history.

A hardware key is a GPU's serial (its UUID when the serial is not reported) or a NIC's GUID:
what stays with the part when it moves to another instance (docs/certification.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject
from harness.results import CheckResult

if TYPE_CHECKING:  # a Ledger is given its Store: harness.memory.store is imported by then
    from harness.memory.store import Store

__all__ = ["LEDGER_FILE", "LEDGER_SCHEMA", "Ledger", "describe", "hardware_failures", "keys_of",
           "now_iso"]

LEDGER_SCHEMA = "gpu-preflight.ledger/v1"
#: The JSON-lines file (a folder) or the prefix of its objects (S3, harness.memory.store).
LEDGER_FILE = "ledger.jsonl"
#: Characters of a failure's message kept in its entry.
MESSAGE_CHARS = 600
_NVLINK = re.compile(r"\bNVLink (\d+)\b")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def keys_of(gpus: Iterable[Mapping[str, object]], nics: Iterable[Mapping[str, object]]
            ) -> dict[str, str]:
    """Hardware key -> how this node names it (`GPU 3 (uuid GPU-..)`, `NIC rdmap16s27`)."""
    out: dict[str, str] = {}
    for g in gpus:
        key = g.get("serial") or g.get("uuid")
        if key:
            out[str(key)] = f"GPU {g.get('index')} (uuid {g.get('uuid')}, serial {g.get('serial')})"
    for n in nics:
        if n.get("guid"):
            out[str(n["guid"])] = f"NIC {n.get('name')} (guid {n['guid']})"
    return out


@dataclass(frozen=True, slots=True)
class Ledger:
    """The ledger kept in `store`."""

    store: Store

    def entries(self) -> tuple[list[JSONObject], int]:
        """Every entry, in the order written, and how many lines were not entries (garbled)."""
        found, bad = [], 0
        for line in self.store.read_lines(LEDGER_FILE):
            try:
                entry = json.loads(line)
            except ValueError:
                bad += 1
                continue
            if isinstance(entry, dict) and entry.get("schema") == LEDGER_SCHEMA and \
                    isinstance(entry.get("part"), str):
                found.append(entry)
            else:
                bad += 1
        return found, bad

    def append(self, entry: JSONObject, *, writer: str) -> None:
        """One line; StoreError when it cannot be written."""
        self.store.append_line(LEDGER_FILE, json.dumps({"schema": LEDGER_SCHEMA, **entry},
                                                       sort_keys=True), writer=writer)

    def clear(self, key: str, *, why: str, by: str, host: str) -> JSONObject:
        """Record that `key`'s failures so far are cleared (repaired, replaced, judged false)."""
        entry: JSONObject = {"kind": "clear", "part": key, "why": why, "by": by, "host": host,
                             "at": now_iso()}
        self.append(entry, writer=host)
        return entry

    def open_failures(self, entries: Sequence[JSONObject] | None = None) -> list[JSONObject]:
        """Failure entries not cleared by a later `clear` of their key (ledger order)."""
        if entries is None:
            entries = self.entries()[0]
        out: list[JSONObject] = []
        for entry in entries:
            if entry.get("kind") == "clear":
                out = [e for e in out if e.get("part") != entry.get("part")]
            elif entry.get("kind") == "failure":
                out.append(entry)
        return out

    def seen(self, keys: Mapping[str, str]) -> list[JSONObject]:
        """The open failures of this node's hardware (`keys`, from keys_of), each with `here`:
        how this node names the part."""
        return [{**e, "here": keys[str(e["part"])]} for e in self.open_failures()
                if str(e.get("part")) in keys]


def describe(entry: Mapping[str, object]) -> str:
    """`GPU 3 (uuid .., serial ..) failed PF-GPU-013 on host-a at 2026-..: message`."""
    return (f"{entry.get('here') or entry.get('part')} failed {entry.get('check')} on "
            f"{entry.get('host')} at {entry.get('at')} (in the ledger as {entry.get('part')}): "
            f"{entry.get('message')}")


def _named_gpus(check: CheckResult, gpus: Sequence[Mapping[str, object]]
                ) -> list[tuple[Mapping[str, object], str]]:
    """The GPUs a failed check names, with the part of the message that names each: a
    measurement judged not ok with its GPU index, or the GPU's serial or UUID in the message
    (every message names a GPU by harness.base.gpu_record.gpu_label, which holds its serial)."""
    bad_index = check.failed_gpus()
    out = []
    for g in gpus:
        tokens = [re.compile(rf"(?<![\w-]){re.escape(str(t))}(?![\w-])")
                  for t in (g.get("serial"), g.get("uuid")) if t]
        parts = [p for p in re.split(r";\s+|\n", check.message)
                 if any(t.search(p) for t in tokens)]
        if parts or g.get("index") in bad_index:
            out.append((g, " ".join(parts)))
    return out


def hardware_failures(checks: Iterable[CheckResult], *, gpus: Sequence[Mapping[str, object]],
                      nics: Sequence[Mapping[str, object]], host: str,
                      instance_id: object = None, report: str = "") -> list[JSONObject]:
    """The ledger entries of this run's failures that name hardware (failed checks only: an
    error says a fact could not be read, which blames no part)."""
    out: list[JSONObject] = []
    base = {"kind": "failure", "host": host, "instance_id": instance_id, "at": now_iso(),
            "report": report}
    for check in checks:
        if check.outcome != "fail":
            continue
        message = check.message[:MESSAGE_CHARS]
        for g, part in _named_gpus(check, gpus):
            key = str(g.get("serial") or g.get("uuid"))
            links = sorted({int(n) for n in _NVLINK.findall(part)})
            hardware = {"type": "nvlink" if links else "gpu", "uuid": g.get("uuid"),
                        "serial": g.get("serial"), "index": g.get("index")}
            hardware.update({"links": links} if links else {})
            out.append({**base, "part": key, "hardware": hardware, "check": check.id,
                        "message": message})
        texts = [check.message] + [m.what for m in check.measurements if m.ok is False]
        for n in nics:
            name = str(n.get("name") or "")
            if n.get("guid") and name and any(re.search(rf"\b{re.escape(name)}\b", t)
                                              for t in texts):
                out.append({**base, "part": str(n["guid"]), "check": check.id, "message": message,
                            "hardware": {"type": "nic", "guid": n["guid"], "name": name}})
    return out
