"""What a run remembers of this node across runs (docs/certification.md): before the checks,
the certificate it may reuse (harness.memory.certificate) and the ledgered hardware it sees
(harness.memory.ledger); after them, the certificate a certify pass issues and the failures that name
hardware, appended to the ledger. A problem with a store is said and recorded, never a changed
verdict: a store that cannot be read is a full run, a ledger that cannot be written a warning."""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject
from harness.base.redact import Redactor
from harness.base.settings import get_str
from harness.base.tiers import ISSUING_TIERS, REUSE_TIERS
from harness.commands import UsageError
from harness.profiles.model import Profile
from harness.report.model import Report

if TYPE_CHECKING:  # imported where used: a run without a certificate, a ledger or a store
    # (the default preflight) never reads the node's identity, opens a store or imports the
    # certificate and ledger modules (start-up, issue 28 item 6; tests/test_startup.py)
    from harness.memory.certificate import Reuse
    from harness.memory.identity import NodeIdentity
    from harness.memory.ledger import Ledger
    from harness.memory.store import Store

__all__ = ["NodeMemory", "ledger_user"]


def _store(env: Mapping[str, str], name: str) -> Store | None:
    where = get_str(name, env)
    if not where:
        return None
    from harness.memory.store import Store

    try:
        return Store.of(where)
    except ValueError as exc:
        raise UsageError(f"{name}: {exc}") from None


def ledger_user(env: Mapping[str, str]) -> str:
    """Who clears an entry: SUDO_USER, else the login name."""
    try:
        return env.get("SUDO_USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


@dataclass(slots=True)
class NodeMemory:
    """The certificate and ledger side of one `preflight run`."""

    profile: Profile
    host: str
    tier: str
    report_dir: Path
    env: Mapping[str, str]
    sysroot: Path
    max_age_s: float | None = None
    cert_store: Store | None = None
    ledger: Ledger | None = None
    keyword: str | None = None
    """`-k`: a run of named checks runs them (a certificate never stands for them)."""
    reuse: Reuse | None = None
    seen: list[JSONObject] = field(default_factory=list)
    section: JSONObject = field(default_factory=dict)
    """report.json's `ledger` section."""

    @classmethod
    def start(cls, *, reuse_certified: str | None, profile: Profile, host: str, tier: str,
              report_dir: Path, env: Mapping[str, str], sysroot: Path,
              keyword: str | None = None) -> NodeMemory:
        """Read the options; UsageError naming a malformed one."""
        age_text = reuse_certified or get_str("PREFLIGHT_REUSE_CERTIFIED", env)
        max_age = None
        if age_text:
            from harness.memory.certificate import parse_age

            try:
                max_age = parse_age(age_text)
            except ValueError as exc:
                raise UsageError(f"--reuse-certified / PREFLIGHT_REUSE_CERTIFIED: {exc}") from None
        ledger_store = _store(env, "PREFLIGHT_LEDGER")
        if ledger_store:
            from harness.memory.ledger import Ledger
        return cls(profile=profile, host=host, tier=tier, report_dir=report_dir, env=env,
                   sysroot=sysroot, max_age_s=max_age, cert_store=_store(env, "PREFLIGHT_CERT_STORE"),
                   ledger=Ledger(ledger_store) if ledger_store else None, keyword=keyword)

    def _identity(self) -> NodeIdentity:
        from harness.memory.identity import gather

        return gather(self.profile, self.host, self.env, self.sysroot)

    def before(self, *, multi_node: bool) -> list[str]:
        """Look the node up; the header's lines. Sets `reuse` (its `ids` go to the sessions)."""
        if self.max_age_s is None and self.ledger is None:
            return []
        from harness.memory.certificate import REUSABLE, Reuse, look_up

        identity = self._identity()
        lines = []
        if self.max_age_s is not None:
            if self.tier not in REUSE_TIERS:
                self.reuse = Reuse(f"--reuse-certified applies to tier preflight, not {self.tier}")
            elif self.keyword:
                self.reuse = Reuse(f"-k {self.keyword!r} names the checks to run: they run")
            else:
                self.reuse = look_up(store=self.cert_store, report_dir=self.report_dir,
                                     host=self.host, identity=identity, max_age_s=self.max_age_s,
                                     selected=REUSABLE, multi_node=multi_node)
            lines.append(self.reuse.line())
        if self.ledger is not None:
            lines += self._look_in_ledger(identity)
        return lines

    def _look_in_ledger(self, identity: NodeIdentity) -> list[str]:
        from harness.memory.ledger import describe, keys_of
        from harness.memory.store import StoreError  # the ledger has its store: imported

        keys = keys_of(identity.gpus, identity.nics)
        self.section = {"where": str(self.ledger.store) if self.ledger else None,
                        "parts": len(keys), "seen": [], "appended": [], "problems": []}
        try:
            self.seen = self.ledger.seen(keys) if self.ledger else []
        except StoreError as exc:
            self.section["problems"] = [f"cannot read the ledger: {exc}"]
            return [f"warning: cannot read the bad-hardware ledger: {exc}"]
        self.section["seen"] = list(self.seen)
        return [f"ledgered hardware: {describe(e)}" for e in self.seen]

    @property
    def reused_ids(self) -> list[str]:
        return list(self.reuse.ids) if self.reuse else []

    def after(self, report: Report) -> list[str]:
        """Record the reuse and the ledger in the report; append this run's hardware failures;
        issue the certificate of a certify pass. Returns lines to print."""
        lines: list[str] = []
        if self.reuse is not None:
            if self.reuse.ids:  # what the sessions did leave to the certificate
                done = set(report.selection.get("reused") or [])
                self.reuse.ids = [i for i in self.reuse.ids if i in done]
            report.extra["reused"] = self.reuse.to_dict()
        identity = None
        if self.ledger is not None and report.failed:
            identity = self._identity()
            lines += self._append_failures(report, identity)
        if self.ledger is not None:
            report.extra["ledger"] = self.section
        if self.tier in ISSUING_TIERS and report.verdict == "pass" and not self.reused_ids:
            lines += self._certify(report, identity or self._identity())
        return lines

    def _append_failures(self, report: Report, identity: NodeIdentity) -> list[str]:
        from harness.memory.ledger import hardware_failures

        assert self.ledger is not None
        entries = hardware_failures(report.checks, gpus=identity.gpus, nics=identity.nics,
                                    host=self.host, instance_id=identity.fields.get("instance_id"),
                                    report=str(self.report_dir / "report.json"))
        entries = [Redactor.of(self.env).obj(e) for e in entries]  # type: ignore[misc]
        from harness.memory.store import StoreError
        self.section.setdefault("appended", [])
        lines = []
        for entry in entries:
            try:
                self.ledger.append(entry, writer=self.host)
            except StoreError as exc:
                self.section.setdefault("problems", []).append(str(exc))  # type: ignore[union-attr]
                lines.append(f"warning: cannot append to the bad-hardware ledger: {exc}")
                break
            self.section["appended"].append(entry)  # type: ignore[union-attr]
            lines.append(f"ledger: recorded {entry['part']} ({entry['hardware']['type']}) "  # type: ignore[index]
                         f"failing {entry['check']}")
        return lines

    def _certify(self, report: Report, identity: NodeIdentity) -> list[str]:
        """The certificate in the report folder and the store, or why there is none."""
        if identity.unread:
            why = "this node's identity could not be read: " + "; ".join(identity.unread)
            report.extra["certificate"] = {"written": None, "why_not": why}
            return [f"no certificate: {why}"]
        from harness.memory.certificate import CERT_FILE, issue, seal, store_name

        cert = issue(tier=self.tier, host=self.host, identity=identity, checks=report.checks,
                     report_dir=self.report_dir)
        cert = seal(Redactor.of(self.env).obj(cert))  # type: ignore[arg-type]
        data = (json.dumps(cert, indent=2, sort_keys=True) + "\n").encode()
        from harness.memory.store import Store, StoreError
        written, problems = [], []
        try:
            Store.of(str(self.report_dir)).put(CERT_FILE, data)
            written.append(str(self.report_dir / CERT_FILE))
        except StoreError as exc:
            problems.append(str(exc))
        if self.cert_store is not None:
            try:
                self.cert_store.put(store_name(self.host), data)
                written.append(f"{self.cert_store}/{store_name(self.host)}")
            except StoreError as exc:
                problems.append(str(exc))
        report.extra["certificate"] = {"id": cert["id"], "written": written,
                                       "problems": problems,
                                       "checks": len(cert["checks"])}  # type: ignore[arg-type]
        lines = [f"certificate {str(cert['id'])[:12]} ({len(cert['checks'])} checks: passed or "  # type: ignore[arg-type]
                 "not applicable) "
                 f"written to {', '.join(written) or 'nowhere'}"]
        return lines + [f"warning: {p}" for p in problems]
