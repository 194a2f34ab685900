"""A check's conclusion as data (harness.judges has the network and bandwidth judges that
make them): pass, fail, warn, unknown (the check's outcome is `error`: the fact is not proven) or
n/a (the profile does not ask for it). Its `message` is the check's own message body (the check
ID and the remedy are added by harness.checking); a measurement, when there is one, is `what
value op threshold`. A check applies one with `harness.checking.settle()`; `preflight inspect` lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from harness.base.compare import OPS, fmt
from harness.base.jsontypes import JSONObject, JSONScalar

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["Verdict", "efa_not_applicable", "expect", "fabric_not_applicable", "na", "none"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check concludes from the facts given (see the module's docstring)."""

    check_id: str
    status: str
    """pass, fail, warn, unknown, n/a."""
    message: str = ""
    remedy: str | None = None
    style: str = ""
    """How a check records it: `expect` (what value op threshold), `none` (offenders, none
    allowed), `measure` (a measurement, then the message), "" (the message alone)."""
    what: str | None = None
    value: JSONScalar = None
    op: str | None = None
    threshold: JSONScalar = None
    unit: str = ""
    detail: str | None = None
    size_bytes: int | None = None
    offenders: tuple[str, ...] = ()
    collective: str | None = None
    """Set on a busbw figure: the collective it measured (harness.results.Measurement)."""

    @property
    def problem(self) -> bool:
        """A check failing or erroring on it (unknown is never a pass)."""
        return self.status in ("fail", "unknown")

    def to_json(self) -> JSONObject:
        out: JSONObject = {"check": self.check_id, "status": self.status,
                               "message": self.message}
        if self.what is not None:
            out.update(what=self.what, value=self.value, op=self.op, threshold=self.threshold,
                       unit=self.unit)
        return out


def expect(check_id: str, profile: Profile, what: str, value: JSONScalar, op: str,
           threshold: JSONScalar, unit: str = "", *, remedy: str | None = None,
           detail: str | None = None, size_bytes: int | None = None,
           collective: str | None = None) -> Verdict:
    """`value op threshold`, with harness.checking.expect's failure message."""
    compare, negated = OPS[op]
    ok = bool(compare(value, threshold))
    message = "" if ok else (f"{what} {fmt(value, unit)} {negated} {fmt(threshold, unit)} "
                             f"required for {profile.name}" + (f" ({detail})" if detail else ""))
    return Verdict(check_id, "pass" if ok else "fail", message, remedy, "expect", what, value, op,
                   threshold, unit, detail, size_bytes, collective=collective)


def none(check_id: str, profile: Profile, what: str, offenders: list[str], *,
          remedy: str | None = None) -> Verdict:
    """No offenders allowed, with harness.checking.expect_none's failure message."""
    message = (f"{what}: {len(offenders)} found, none allowed for {profile.name}: "
               + "; ".join(offenders)) if offenders else ""
    return Verdict(check_id, "fail" if offenders else "pass", message, remedy, "none", what,
                   len(offenders), "==", 0, offenders=tuple(offenders))


def efa_not_applicable(profile: Profile) -> str | None:
    """Why an EFA check does not apply to `profile` (None: it does)."""
    if not profile.has_efa:
        return f"the profile expects no EFA (fabric: {profile.fabric or 'none'})"
    return None


def fabric_not_applicable(profile: Profile) -> str | None:
    """Why a check of the inter-node fabric (EFA or IB) does not apply (None: it does)."""
    if profile.fabric is None or not profile.has_gpus:
        return "the profile expects no GPUs with an inter-node fabric"
    return None


def na(check_id: str, reason: str) -> Verdict:
    return Verdict(check_id, "n/a", reason)
