"""The failure file's text (SageMaker's /opt/ml/output/failure, the job's FailureReason): who
failed, what and why, root cause first, in the first FAILURE_REASON_CHARS characters."""

from __future__ import annotations

from collections.abc import Mapping

from harness.report.causes import find_causes, id_ranges, shorten
from harness.report.model import Report

__all__ = ["FAILURE_REASON_CHARS", "failure_reason"]

#: SageMaker shows the first 1024 characters of the failure file as the job's FailureReason.
FAILURE_REASON_CHARS = 1024


def failure_reason(report: Report, limit: int = FAILURE_REASON_CHARS,
                   env: Mapping[str, str] | None = None) -> str:
    """The failure file's text, from the redacted report (so that no cut leaves half a secret
    behind). Its first `limit` characters (SageMaker's FailureReason) say, on their own, on
    which host what went wrong: the root causes first (harness.report.causes: one cause per line of
    checks it blocks, measured failures before errors, each with its fix), shortened to stay
    readable, then every failed check by ID. The causes in full and every message follow."""
    report = report.redacted(env)
    failed = sorted(report.failed, key=lambda c: (c.outcome != "fail", c.id))
    # A harness error judged nothing: it is not said as a node's failure (exit 3, not 1).
    said = "FAILED" if failed or not report.harness_errors else "ERROR"
    head = f"gpu-preflight {said} on {report.host} ({report.profile}, tier {report.tier}): "
    causes = find_causes(failed)
    if failed:
        head += (f"{len(failed)} of {len(report.checks)} checks failed, from {len(causes)} "
                 f"cause{'s' if len(causes) != 1 else ''}. ")
    elif report.harness_errors:
        head += "the harness could not complete its checks. "
    # (what stays whole: `CAUSE: [IDs] `, what may be shortened, the root, the fix)
    said = [("CAUSE: " + c.brief(with_fix=False, width=0).rstrip("."), c.text, c.root, c.fix)
            for c in causes]
    said += [("harness: ", e, "harness", "") for e in report.harness_errors]
    lead: list[str] = []
    if causes and causes[0].blocked:  # the root cause of most failures: always with its fix
        root = causes[0]
        lead = ["CAUSE: " + root.brief(with_fix=False, width=ROOT_CAUSE_CHARS)
                + (f"; fix: {shorten(root.fix, PER_MESSAGE_CHARS)}" if root.fix else "")]
        said = said[1:]
    ids = f" | failed: {id_ranges([c.id for c in failed])}" if failed else ""
    room = limit - len(head) - len(ids) - sum(len(p) + 3 for p in lead)
    parts, left = _fit([(s[0], s[1]) for s in said], [s[2] for s in said], room)
    more = f" | +{len(left)} more causes: " + ", ".join(left) if left else ""
    spare = room - len(more) - len(" | ".join(parts))
    for i, (*_, fix) in enumerate(said[:len(parts)]):  # the others' fixes, as room allows
        if fix and spare > 60:
            add = "; fix: " + shorten(fix, min(spare - 7, PER_MESSAGE_CHARS))
            parts[i] += add
            spare -= len(add)
    summary = head + " | ".join(lead + parts) + more + ids
    lines = [shorten(summary, limit), "", "Causes:"] if causes else [shorten(summary, limit)]
    lines += [f"- {c.line(10_000)}" + (f"\n  fix: {c.fix}" if c.fix else "") for c in causes]
    full = [c.message or f"[{c.id}] {c.outcome}" for c in failed]
    full += [f"harness: {e}" for e in report.harness_errors]
    return "\n".join(lines) + "\n\nDetails:\n" + "\n\n".join(full) + "\n"


#: Longest single message (a fix) in the failure file's first part; the root cause's own text
#: (its fix follows it there, whatever else is cut).
PER_MESSAGE_CHARS, ROOT_CAUSE_CHARS = 300, 160
#: The widths the causes are shortened to, widest first, until all fit in the first part.
_CAUSE_WIDTHS = (300, 240, 200, 160, 130, 100, 80)


def _fit(items: list[tuple[str, str]], roots: list[str], room: int) -> tuple[list[str], list[str]]:
    """Each (prefix, text) as prefix + text, the texts shortened to the widest of _CAUSE_WIDTHS
    at which all fit in `room` (joined by ' | '); when none does, the most causes, in order, that
    fit at one width of at least 80 (at most 160), and the roots of those that do not fit (said
    as ' | +N more causes: ...', which the room keeps space for)."""
    for width in _CAUSE_WIDTHS:
        parts = [prefix + shorten(text, width) for prefix, text in items]
        if len(" | ".join(parts)) <= room:
            return parts, []
    for k in range(len(items) - 1, 0, -1):  # none fits: as many causes as keep >= 80 chars
        rest = roots[k:]
        tail = len(f" | +{len(rest)} more causes: " + ", ".join(rest))
        prefixes = sum(len(prefix) + 3 for prefix, _ in items[:k])
        width = min((room - tail - prefixes) // k, _CAUSE_WIDTHS[3])
        if width >= _CAUSE_WIDTHS[-1]:
            return [prefix + shorten(text, width) for prefix, text in items[:k]], rest
    return [], roots
