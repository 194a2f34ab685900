"""The check model: `@check` metadata, and the calls a check uses to state one fact against one
threshold (`expect`, `expect_none`), warn, or say it does not apply. Messages always read:
`[ID] what value unit <comparison> threshold unit required for PROFILE; remedy`."""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NoReturn, TypeVar

import pytest

from harness.base.compare import OPS, fmt
from harness.base.errors import ProbeError
from harness.base.jsontypes import JSONObject
from harness.base.tiers import TIERS
from harness.profiles.model import CONFIRM_FAMILIES
from harness.results import CheckResult, Measurement, measurement_name, plain

if TYPE_CHECKING:
    from harness.judges.judgement import Verdict

__all__ = [
    "OUTCOMES",
    "CheckContext",
    "CheckFailure",
    "CheckSpec",
    "check",
    "classify",
    "combine",
    "current",
    "error_text",
    "expect",
    "expect_none",
    "fail",
    "measure",
    "not_applicable",
    "not_run",
    "registry",
    "run_check",
    "set_current",
    "settle",
    "spec_of",
    "warn",
]

#: Outcomes of a check. `error` (a probe could not produce its fact) counts as a failure.
OUTCOMES = ("pass", "warn", "skip", "fail", "error")

F = TypeVar("F", bound=Callable[..., object])


@dataclass(frozen=True, slots=True)
class CheckSpec:
    """What `preflight list` and `preflight explain` show for a check."""

    id: str
    title: str
    tier: str
    why: str
    remedy: str
    exclusive: bool = False
    """Owns the GPUs or the network (a collective, a bandwidth test): runs alone, after the rest."""
    function: str = ""
    module: str = ""
    kind: str = "check"
    """`check` (declared with @check) or `test` (a plain pytest test: a site check)."""
    reads: tuple[str, ...] = ()
    """What the check needs to read and what it does when it cannot (`explain` prints it)."""
    family: str = ""
    """The measured family (harness.profiles.model.CONFIRM_FAMILIES: bandwidth, compute, links,
    training) whose failure is run once more before it is condemned, when the profile's
    `confirm_families` names it; "" for a fact that a second reading cannot change."""


_REGISTRY: dict[str, CheckSpec] = {}


def registry() -> dict[str, CheckSpec]:
    """Every check imported so far, by ID."""
    return dict(_REGISTRY)


def check(
    id: str,
    *,
    title: str,
    why: str,
    remedy: str,
    tier: str = "preflight",
    exclusive: bool = False,
    reads: tuple[str, ...] = (),
    family: str = "",
) -> Callable[[F], F]:
    """Declare a test function as check `id`: metadata for list/explain, markers for pytest;
    `reads`: lines saying what it needs to read (harness.base.gpu_facts.explain_reads); `family`:
    its measured family, confirmed by a second run before a failure stands."""
    if tier not in TIERS:
        raise ValueError(f"check {id}: tier {tier!r} is not one of {', '.join(TIERS)}")
    if family and family not in CONFIRM_FAMILIES:
        raise ValueError(f"check {id}: family {family!r} is not one of "
                         f"{', '.join(CONFIRM_FAMILIES)}")

    def decorate(fn: F) -> F:
        spec = CheckSpec(
            id=id, title=title, tier=tier, why=why, remedy=remedy, exclusive=exclusive,
            function=fn.__name__, module=fn.__module__, reads=tuple(reads), family=family,
        )
        known = _REGISTRY.get(id)
        if known is not None and known.function != spec.function:
            raise ValueError(f"check ID {id} is used by {known.function} and {spec.function}")
        _REGISTRY[id] = spec
        fn = pytest.mark.preflight_check(id)(fn)
        fn = getattr(pytest.mark, tier)(fn)
        if exclusive:
            fn = pytest.mark.exclusive(fn)
        fn.__preflight_check__ = spec  # type: ignore[attr-defined]
        return fn

    return decorate


@dataclass(slots=True)
class CheckContext:
    """What the running check has measured and warned so far (set by the plugin per test)."""

    check_id: str
    profile: str
    remedy: str = ""
    measurements: list[JSONObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_CURRENT: contextvars.ContextVar[CheckContext | None] = contextvars.ContextVar(
    "preflight_check", default=None
)


def current() -> CheckContext:
    """The running check's context; outside a check, a throwaway one (for library use)."""
    ctx = _CURRENT.get()
    return ctx if ctx is not None else CheckContext(check_id="PF-ADHOC", profile="?")


def set_current(ctx: CheckContext | None) -> contextvars.Token[CheckContext | None]:
    return _CURRENT.set(ctx)


class CheckFailure(AssertionError):
    """A check's fact missed its threshold; str() is the full message."""


def _message(ctx: CheckContext, body: str, remedy: str | None) -> str:
    remedy = remedy if remedy is not None else ctx.remedy
    return f"[{ctx.check_id}] {body}" + (f"; {remedy}" if remedy else "")


def measure(
    what: str,
    value: object,
    unit: str = "",
    *,
    op: str | None = None,
    threshold: object = None,
    ok: bool | None = None,
    size_bytes: int | None = None,
    gpu_index: int | None = None,
    node: str | None = None,
    name: str | None = None,
    collective: str | None = None,
) -> None:
    """Record a measured value (and the threshold it was judged against) in the report;
    `size_bytes` (a bandwidth figure's message size), `gpu_index` and `node` say what it
    belongs to, for the figures (never read back from `what`). `name` is its stable name, the
    key of its metrics series (docs/reports.md): every built-in check gives one; without one
    it is `measurement_name(what)`, which a reworded `what` changes. `collective` marks a
    bus-bandwidth figure and says which collective it measured (the figures plot it)."""
    current().measurements.append(Measurement(
        what=what, value=plain(value), unit=unit, op=op, threshold=plain(threshold), ok=ok,
        size_bytes=size_bytes, gpu_index=gpu_index, node=node,
        name=name or measurement_name(what), collective=collective,
    ).to_dict())


def expect(
    what: str,
    value: object,
    op: str,
    threshold: object,
    unit: str = "",
    *,
    remedy: str | None = None,
    detail: str | None = None,
    size_bytes: int | None = None,
    gpu_index: int | None = None,
    name: str | None = None,
    collective: str | None = None,
) -> None:
    """Pass when `value op threshold`; else fail with the value, threshold, profile and remedy."""
    compare, negated = OPS[op]
    ok = bool(compare(value, threshold))
    measure(what, value, unit, op=op, threshold=threshold, ok=ok, size_bytes=size_bytes,
            gpu_index=gpu_index, name=name, collective=collective)
    if not ok:
        ctx = current()
        body = (f"{what} {fmt(value, unit)} {negated} {fmt(threshold, unit)} required for "
                f"{ctx.profile}")
        if detail:
            body += f" ({detail})"
        raise CheckFailure(_message(ctx, body, remedy))


def expect_none(
    what: str, offenders: Iterable[str], *, remedy: str | None = None, unit: str = "",
    gpus: Iterable[int | None] = (), name: str | None = None,
) -> None:
    """Pass when there are no offenders; else fail naming every one of them. `gpus`: the
    indices of the GPUs the offenders are on (each recorded as a failed measurement with its
    `gpu_index`, which the figures count; None for an offender that is no GPU)."""
    found = list(offenders)
    measure(what, len(found), unit or "found", op="==", threshold=0, ok=not found, name=name)
    for index in sorted({i for i in gpus if i is not None}):
        measure(what, 1, unit or "found", op="==", threshold=0, ok=False, gpu_index=index,
                name=name)
    if found:
        ctx = current()
        body = f"{what}: {len(found)} found, none allowed for {ctx.profile}: " + "; ".join(found)
        raise CheckFailure(_message(ctx, body, remedy))


def fail(body: str, *, remedy: str | None = None) -> NoReturn:
    """Fail with a message in the standard form (the ID and remedy are added)."""
    raise CheckFailure(_message(current(), body, remedy))


def warn(body: str, *, remedy: str | None = None) -> None:
    """Record a warning: the check passes with outcome `warn`, the message in the report."""
    ctx = current()
    ctx.warnings.append(_message(ctx, body, remedy if remedy is not None else ""))


def not_applicable(reason: str) -> NoReturn:
    """Skip: the profile says this check does not apply (the only legitimate reason to skip)."""
    pytest.skip(f"not applicable to {current().profile}: {reason}")


def not_run(reason: str) -> NoReturn:
    """Skip: what this check judges was never measured because an earlier step failed or
    did not run it (a cluster check after a failed gather). A skip is never a pass."""
    pytest.skip(f"[{current().check_id}] not run: {reason}")


def spec_of(fn: Callable[..., object]) -> CheckSpec:
    """The @check spec of a check function (TypeError for a function that is no check)."""
    spec = getattr(fn, "__preflight_check__", None)
    if not isinstance(spec, CheckSpec):
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} is not a @check function")
    return spec


#: Which phase's outcome a check's record takes when its phases differ (skip beats pass).
_SEVERITY = {"error": 4, "fail": 3, "skip": 2, "pass": 0}


def classify(spec: CheckSpec, exc: BaseException | None, *, when: str = "call",
             where: str = "") -> tuple[str, str]:
    """(outcome, message) of one phase of a check whose code raised `exc` (None: it returned).
    The one classification: the plugin (each pytest phase) and `run_check` (the cluster
    checks) both ask here. `where` (` (file:line)`) is added to a test's failure."""
    if exc is None:
        return "pass", ""
    text = str(exc)
    if isinstance(exc, pytest.skip.Exception):
        return "skip", str(exc.msg)
    if isinstance(exc, CheckFailure):
        return "fail", text
    if isinstance(exc, pytest.fail.Exception) and "Timeout" in text:
        return "error", f"[{spec.id}] check did not finish: {text.strip()}"
    if isinstance(exc, AssertionError | pytest.fail.Exception) and when == "call":
        first = text.strip().splitlines()[0] if text.strip() else "assertion failed"
        return "fail", (first if first.startswith(f"[{spec.id}]") else f"[{spec.id}] {first}") + where
    if isinstance(exc, ProbeError):
        return "error", f"[{spec.id}] {text}"
    return "error", error_text(spec, type(exc).__name__, text, when, where)


def error_text(spec: CheckSpec, name: str, text: str, when: str, where: str) -> str:
    phase = f" in {when}" if when != "call" else ""
    what = "harness error" if spec.kind == "check" else "error"
    return f"[{spec.id}] {what}{phase}: {name}: {text.strip()[:2000]}{where}"


def combine(phases: Iterable[tuple[str, str]], warnings: Iterable[str]) -> tuple[str, str]:
    """A check's outcome from its phases' (setup, call, teardown): the most severe, a skip over
    a pass; a pass with warnings is `warn`, its message the warnings."""
    outcome, message = "pass", ""
    for o, m in phases:
        if _SEVERITY[o] > _SEVERITY[outcome]:
            outcome, message = o, m
    warnings = list(warnings)
    if outcome == "pass" and warnings:
        outcome, message = "warn", "\n".join(warnings)
    return outcome, message


def run_check(fn: Callable[..., object], *args: object, profile: str, nodeid: str = "",
              worker: str = "main") -> CheckResult:
    """Run a @check function outside pytest, on facts handed to it (the cluster verdict judges
    its snapshot this way): the same context, the same calls (`expect`, `fail`, `warn`,
    `not_applicable`), the same outcomes as under the plugin, and the same typed record.
    Deterministic: nothing here reads a clock or the environment (the verdict is a pure
    function of its snapshot)."""
    spec = spec_of(fn)
    ctx = CheckContext(check_id=spec.id, profile=profile, remedy=spec.remedy)
    token = set_current(ctx)
    raised: BaseException | None = None
    try:
        fn(*args)
    except (Exception, pytest.skip.Exception, pytest.fail.Exception) as exc:  # judged below
        raised = exc
    finally:
        _CURRENT.reset(token)
    outcome, message = combine([classify(spec, raised)], ctx.warnings)
    return CheckResult(
        id=spec.id, nodeid=nodeid or f"{spec.module}::{spec.function}", title=spec.title,
        tier=spec.tier, kind=spec.kind, outcome=outcome, message=message,
        warnings=tuple(ctx.warnings),
        measurements=tuple(Measurement.from_dict(m) for m in ctx.measurements),
        remedy=spec.remedy, worker=worker,
    )


def settle(v: Verdict) -> None:
    """Apply a verdict inside a running check: record its measurement, then pass, warn, fail,
    error (unknown) or skip (n/a) with its message."""
    if v.status == "n/a":
        not_applicable(v.message)
    if v.status == "unknown":
        raise ProbeError(v.message)
    # The judges' figures are named by the check that judges them (one figure per verdict).
    name = measurement_name(f"{v.check_id} {v.style}")
    if v.style == "expect":
        expect(v.what or "", v.value, v.op or "==", v.threshold, v.unit, remedy=v.remedy,
               detail=v.detail, size_bytes=v.size_bytes, name=name, collective=v.collective)
    elif v.style == "none":
        expect_none(v.what or "", v.offenders, remedy=v.remedy, name=name)
    elif v.style == "measure":
        measure(v.what or "", v.value, v.unit, op=v.op, threshold=v.threshold,
                ok=v.status == "pass", size_bytes=v.size_bytes, name=name,
                collective=v.collective)
    if v.status == "fail":
        fail(v.message, remedy=v.remedy)
    if v.status == "warn":
        warn(v.message, remedy=v.remedy)
