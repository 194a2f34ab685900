"""Certification reuse: a certify-tier (or diagnose) pass leaves a certificate, the node's
identity when it passed (harness.memory.identity) and every check that passed with its figures (or
was not applicable to this node's profile, with the reason); a
job-start run (`preflight run --reuse-certified MAX_AGE`) that finds one young enough, bound to
the identity the node shows now and with no new ECC, row-remapping or XID event since, runs
only the checks whose facts can change between runs and reuses the rest (`REUSABLE`).

What it proves and what it cannot: docs/certification.md. A certificate is bound to the node,
not signed: whoever may write the store may write anything there; a run on another node or
image cannot make a certificate that matches this one (every identity field is compared)."""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject
from harness.base.tiers import ISSUING_TIERS
from harness.results import CheckResult

if TYPE_CHECKING:  # their modules are imported where a node's identity or a store is used
    from harness.memory.identity import NodeIdentity
    from harness.memory.store import Store

__all__ = ["CERT_FILE", "CERT_SCHEMA", "REUSABLE", "Reuse", "issue",
           "look_up", "parse_age", "seal", "store_name"]

CERT_SCHEMA = "gpu-preflight.certificate/v1"
#: The certificate in the report folder of the run that issued it.
CERT_FILE = "certificate.json"
#: The outcomes a certificate records and a job start may reuse: a warning runs again (its
#: warning is said fresh), a failure or an error is never certified.
CERTIFIED_OUTCOMES = ("pass", "skip")

#: The checks a certificate may stand for, and why their facts cannot change while the
#: identity (GPUs by UUID and serial, driver, CUDA, NCCL, plugin, image, profile, boot) holds
#: and no ECC, remapping or XID event came: each measures hardware and software the identity
#: names. Everything else always runs: environment, host readiness, GPU visibility and state
#: (ECC, remapping, persistence, temperature, PCIe and NVLink state), XIDs, the fabric and
#: network, the ledger, the cluster checks, and any site check (unknown is never reused).
REUSABLE: dict[str, str] = {
    "PF-GPU-002": "GPU model and memory: the GPUs by UUID and serial",
    "PF-GPU-011": "driver and CUDA versions: identity fields",
    "PF-GPU-012": "DCGM diagnostic of these GPUs with this driver",
    "PF-GPU-013": "matmul throughput of these GPUs",
    "PF-GPU-014": "bit-identical matmul across these GPUs",
    "PF-GPU-015": "HBM copy bandwidth of these GPUs",
    "PF-CLOCK-001": "clocks under load of these GPUs",
    "PF-LINK-001": "peer-copy bandwidth between these GPUs",
    "PF-LINK-002": "host-GPU copies over these PCIe links",
    "PF-LINK-003": "small-message all_reduce latency on this node",
    "PF-BW-001": "single-node all_reduce busbw of these GPUs (single-node jobs)",
    "PF-BW-003": "exact all_reduce results on this node (single-node jobs)",
    "PF-BW-004": "no out-of-bounds nccl-tests values on this node (single-node jobs)",
    "PF-BW-005": "bandwidth runs within their budget on this node (single-node jobs)",
    "PF-BW-006": "gloo busbw between local processes (single-node jobs)",
    "PF-BW-007": "other collectives exact on this node (single-node jobs)",
    **{f"PF-TRAIN-00{n}": "the tiny training step with this image on these GPUs "
       "(single-node jobs)" for n in range(1, 9)},
    # What NCCL did on this node's bandwidth run (plugin, provider, GDR, NICs, warnings): the
    # image, its libraries, the NCCL/FI variables and the NICs by GUID are identity fields, and
    # the NICs' state now is PF-NET-001..005 and PF-NET-012, which always run.
    **{f"PF-NET-0{n:02d}": "NCCL's network path on this node's bandwidth run (single-node jobs)"
       for n in (6, 7, 8, 9, 10, 11, 13)},
}
#: On a multi-node job these run: their runs include the network, and the cluster's straggler
#: check (PF-CLUSTER-006) compares every node's busbw and step time. (PF-NET-001..005 and 012,
#: the NICs' state, are not in REUSABLE at all.)
_SINGLE_NODE_ONLY = ("PF-BW-", "PF-TRAIN-", "PF-NET-")

_AGE = re.compile(r"([0-9]+(?:\.[0-9]+)?)([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """`90m`, `6h`, `2d`, `3600` (seconds) -> seconds; ValueError naming the form."""
    m = _AGE.fullmatch(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not an age (wanted a positive number with s, m, h or d: "
                         "90m, 6h, 2d)")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def store_name(host: str) -> str:
    """The certificate's name in the store: one per node name, the latest wins."""
    return f"certificates/{host}.json"


def _digest(body: Mapping[str, object]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def seal(cert: Mapping[str, object]) -> JSONObject:
    """`cert` with `id`, the SHA-256 of everything else in it (recomputed)."""
    body = {k: v for k, v in cert.items() if k != "id"}
    return {**body, "id": _digest(body)}  # type: ignore[dict-item]


def issue(*, tier: str, host: str, identity: NodeIdentity, checks: Iterable[CheckResult],
          report_dir: Path, now: float | None = None) -> JSONObject:
    """The certificate of a passed run: its body and the body's SHA-256 (`id`), which says
    the file was not cut or edited (not who wrote it)."""
    now = time.time() if now is None else now
    body: JSONObject = {
        "schema": CERT_SCHEMA, "tier": tier, "host": host,
        "issued_at": datetime.fromtimestamp(now, timezone.utc).isoformat(timespec="seconds"),
        "issued_epoch": round(now, 3), "report": str(report_dir / "report.json"),
        "identity": identity.fields, "events": identity.events,
        # A skip is a check not applicable to this profile (the certify verdict was a pass):
        # reused as such, so its probes do not run again to say so (harness.plugin selects).
        "checks": [{"id": c.id, "title": c.title, "outcome": c.outcome, "message": c.message,
                    "measurements": [m.to_dict() for m in c.measurements]}
                   for c in checks if c.outcome in CERTIFIED_OUTCOMES],
    }
    return seal(body)


@dataclass(slots=True)
class Reuse:
    """What the job-start run found: `ids` to reuse (empty: a full run, `reason` says why)."""

    reason: str
    ids: list[str] = field(default_factory=list)
    certificate: JSONObject | None = None
    source: str = ""
    age_s: float | None = None

    def to_dict(self) -> JSONObject:
        """report.json's `reused` section."""
        cert = self.certificate or {}
        by_id = {p["id"]: p for p in cert.get("checks", [])}  # type: ignore[union-attr]
        return {
            "used": bool(self.ids), "reason": self.reason, "source": self.source or None,
            "certificate": cert.get("id"), "issued_at": cert.get("issued_at"),
            "tier": cert.get("tier"), "certified_report": cert.get("report"),
            "age_s": None if self.age_s is None else round(self.age_s, 1),
            "checks": [{"id": i, "why_reusable": REUSABLE[i],
                        "certified_outcome": by_id[i].get("outcome"),  # type: ignore[union-attr]
                        "certified_message": by_id[i].get("message"),  # type: ignore[union-attr]
                        "certified_measurements": by_id[i].get("measurements", [])}  # type: ignore[union-attr]
                       for i in self.ids],
        }

    def line(self) -> str:
        """The header's line."""
        if not self.ids:
            return f"full run: no certificate reused ({self.reason})"
        cert = self.certificate or {}
        return (f"reusing certificate {str(cert.get('id'))[:12]} ({cert.get('tier')} pass at "
                f"{cert.get('issued_at')}, {self.age_s / 60:.0f} min ago, from {self.source}): "
                f"{len(self.ids)} checks not run this time ({', '.join(self.ids)}); every other "
                "selected check runs")


def _load(data: bytes, where: str) -> tuple[JSONObject | None, str]:
    try:
        cert = json.loads(data)
    except ValueError as exc:
        return None, f"the certificate at {where} is not JSON ({exc})"
    if not isinstance(cert, dict) or cert.get("schema") != CERT_SCHEMA:
        return None, f"the certificate at {where} is not a {CERT_SCHEMA} certificate"
    body = {k: v for k, v in cert.items() if k != "id"}
    if cert.get("id") != _digest(body):
        return None, f"the certificate at {where} was cut or edited (its digest does not match)"
    return cert, ""


def _find(store: Store | None, report_dir: Path, host: str) -> tuple[JSONObject | None, str, str]:
    """The certificate (store first, else the report folder), where, and why none."""
    why = []
    if store is not None:
        from harness.memory.store import StoreError  # already imported: `store` is one

        try:
            data = store.get(store_name(host))
        except StoreError as exc:
            data, _ = None, why.append(str(exc))
        if data is not None:
            where = f"{store}/{store_name(host)}"
            cert, problem = _load(data, where)
            return cert, where, problem
        why.append(f"none in {store}")
    local = report_dir / CERT_FILE
    try:
        data = local.read_bytes()
    except OSError as exc:
        why.append(f"none at {local}" if isinstance(exc, FileNotFoundError)
                   else f"{local}: {exc.strerror or exc}")
        return None, "", "no certificate found: " + "; ".join(why)
    cert, problem = _load(data, str(local))
    return cert, str(local), problem


def look_up(*, store: Store | None, report_dir: Path, host: str, identity: NodeIdentity,
            max_age_s: float, selected: Iterable[str], multi_node: bool,
            now: float | None = None) -> Reuse:
    """Whether this run may reuse a certificate, and which of the `selected` check IDs."""
    now = time.time() if now is None else now
    cert, where, problem = _find(store, report_dir, host)
    if cert is None:
        return Reuse(problem)
    age = now - float(cert.get("issued_epoch") or 0)  # type: ignore[arg-type]
    found = Reuse("", certificate=cert, source=where, age_s=age)
    if cert.get("tier") not in ISSUING_TIERS:
        found.reason = f"the certificate at {where} is of tier {cert.get('tier')}, not certify"
    elif age < 0:
        found.reason = (f"the certificate at {where} was issued {-age:.0f} s in the future "
                        "(is this node's clock right?)")
    elif age > max_age_s:
        found.reason = (f"the certificate at {where} is {age / 60:.0f} min old, older than "
                        f"the {max_age_s / 60:g} min allowed")
    elif identity.unread:
        found.reason = "this node's identity could not be read: " + "; ".join(identity.unread)
    elif diff := identity.differences(cert.get("identity") or {}):  # type: ignore[arg-type]
        found.reason = (f"the certificate at {where} is for another node, image, profile or "
                        "NCCL/FI environment: " + "; ".join(diff))
    elif grown := identity.grown(cert.get("events") or {}):  # type: ignore[arg-type]
        found.reason = "new ECC, row-remapping or XID events since the certificate: " + \
            "; ".join(grown)
    if found.reason:
        return found
    passed = {p.get("id") for p in cert.get("checks", [])  # type: ignore[union-attr]
              if p.get("outcome") in CERTIFIED_OUTCOMES}  # type: ignore[union-attr]
    found.ids = sorted(i for i in set(selected) & passed if i in REUSABLE and not (
        multi_node and i.startswith(_SINGLE_NODE_ONLY)))
    found.reason = "identity matches, no new event" if found.ids else (
        f"the certificate at {where} covers none of the selected reusable checks")
    return found
