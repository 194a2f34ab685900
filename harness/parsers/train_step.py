"""Output of the tiny training step (`torchrun ... -m harness.probes.train_step`): its JSON result
line, the ranks' error lines, and the named failure in raw logs when no JSON came out: TE import
error, CUDA OOM with the allocation size, NCCL error or watchdog timeout, gloo timeout, a rank
aborting at exit."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from harness.base.jsontypes import JSONObject
from harness.parsers import ParseError
from harness.parsers.reader import Input, as_input
from harness.parsers.unwrap_transport import inside_transport
from harness.parsers.values import ascii_int

if TYPE_CHECKING:
    from harness.profiles.model import Profile

__all__ = ["INSPECT", "Failure", "TrainStepOutput", "classify_failure", "parse_train_step",
           "unread_in_result"]

SCHEMA_PREFIX = '{"schema": "gpu-preflight.train_step/'


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the step did not run: a stable kind and a one-line message with the key numbers."""

    kind: str
    """One of KIND_ORDER."""
    message: str
    rank: int | None = None


#: Root causes first: when ranks fail differently (one OOMs, its peer then loses the
#: connection), the earliest kind in this order is the one reported.
KIND_ORDER = ("no_torch", "no_gpu", "te_import", "cuda_oom", "nccl_timeout", "nccl_error",
              "collective_timeout", "abort_at_exit", "peer_lost", "exception")

# Import-time failures only: a TE kernel's RuntimeError (its path names transformer_engine too)
# is an `exception`, not an import error.
_TE_LINE = re.compile(
    r"^.*(?:TransformerEngine package version mismatch|transformer_engine\S*\.so: undefined symbol"
    r"|(?:Import|ModuleNotFound)Error:.*transformer.engine|Could not find shared object file for "
    r"Transformer Engine|cudnn shared object not found).*$",
    re.M | re.I,
)
# TE's own library loader failing (TE 1.9-1.13 wheels without their framework library,
# NVIDIA/TransformerEngine#1147, #1541): a traceback through `transformer_engine/.../__init__.py
# ..., in _load_library` that ends in a bare `StopIteration` (no `Error:` line to match).
_TE_LOADER = re.compile(
    r'File "(?P<file>[^"\n]*transformer_engine[^"\n]*)", line [0-9]+, in _load_library\n'
    r"(?:(?:\[rank[0-9]+\]:)?[ \t][^\n]*\n)*?(?:\[rank[0-9]+\]: ?)?"
    r"(?P<exc>[A-Za-z_][\w.]*(?:: [^\n]*)?)$", re.M)
# torch >= 2.1: "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of
# 79.10 GiB of which 1.23 GiB is free."; older: "... (GPU 0; 15.78 GiB total capacity; ...".
_OOM = re.compile(r"out of memory\. Tried to allocate (?P<size>[0-9.]+ [KMGT]?i?B)", re.I)
_OOM_GPU = re.compile(r"GPU (?P<gpu>[0-9]+)(?: has a total capac\w* of|;) (?P<total>[0-9.]+ [KMGT]?i?B)"
                      r"(?: total capacity)?")
_OOM_FREE = re.compile(r"(?:of which|;) (?P<free>[0-9.]+ [KMGT]?i?B|0 bytes) (?:is )?free")
_NCCL_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout: (?P<work>WorkNCCL\(.*?\)) ran for "
    r"(?P<ms>[0-9]+) milliseconds"
)
# torch >= 2.2's heartbeat monitor, when the watchdog itself hangs in a NCCL or CUDA call (no
# `Watchdog caught ...` line comes): `[PG 0 Rank 144] Heartbeat monitor timed out! Process will be
# terminated after dumping debug info. workMetaList_.size()=1`, then `ProcessGroupNCCL's watchdog
# got stuck for 600 seconds without making progress in monitoring enqueued collectives. ...`.
_NCCL_STUCK = re.compile(r"ProcessGroupNCCL's watchdog got stuck for (?P<s>[0-9]+) seconds")
_HEARTBEAT = "Heartbeat monitor timed out!"
_NCCL_ERROR = re.compile(r"NCCL error(?: in: \S+)?[:,]? ?(?P<what>[^\n]*)")
_NCCL_CODE = re.compile(r"^.*?(?P<code>nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage|"
                        r"InvalidArgument)Error):? ?(?P<what>[^\n]*)", re.M)
_GLOO_TIMEOUT = re.compile(
    r"^.*?(?P<line>Timed out waiting [0-9]+ms for (?:recv|send)[^\n]*|Rank [0-9]+ failed to pass "
    r"monitoredBarrier[^\n]*|Operation timed out![^\n]*|Timed out after [0-9]+ seconds waiting for "
    r"clients[^\n]*)", re.M)
_ABORT = re.compile(r"terminate called (?:without an active exception|after throwing[^\n]*)"
                    r"|Signal 6 \(SIGABRT\) received by PID [0-9]+|exitcode\s*:\s*-6\b")
_PEER = re.compile(r"Connection (?:closed|reset) by peer[^\n]*")
_EXCEPTION = re.compile(r"^(?:\[rank[0-9]+\]: )?(?P<line>(?:[\w.]+\.)?\w*(?:Error|Exception): .+)$",
                        re.M)
_NO_TORCH = re.compile(r"^.*No module named '?torch(?:\.distributed)?'?.*$", re.M)
_NO_GPU = re.compile(r"no GPU for LOCAL_RANK [0-9]+: torch sees [0-9]+ CUDA devices[^\n]*")
_RANK_PREFIX = re.compile(r"\[rank(?P<rank>[0-9]+)\]")

# Prefilters: the rules above start with `^.*` or ignore case, so sre tries them at every line
# (or character) of a long log; a C-speed substring test first skips the texts they cannot
# match. `_may_hold`: under re.I a non-ASCII letter can match an ASCII one (`ſ` is `s`, `K`
# is `k`), so the lower-case test decides only on ASCII text.
_TE_WORDS = ("transformer", "cudnn shared object not found")
_OOM_WORDS = ("out of memory",)
_NCCL_CODE_WORD = re.compile(r"nccl(?:Internal|System|UnhandledCuda|Remote|InvalidUsage|"
                             r"InvalidArgument)Error")


def _may_hold(text: str, words: tuple[str, ...]) -> bool:
    """`text` may hold one of the lower-case ASCII `words`, case ignored as re.I does."""
    if not text.isascii():
        return True
    lower = text.lower()
    return any(word in lower for word in words)


def _rank_of(text: str, pos: int) -> int | None:
    """The `[rankN]` tag of the line holding `pos` (a rule's match may start at the line's
    start, before the tag: `^.*?`), else None."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    m = _RANK_PREFIX.search(text, start, len(text) if end < 0 else end)
    return ascii_int(m.group("rank")) if m else None


def _no_torch(text: str) -> Failure | None:
    m = _NO_TORCH.search(text) if "No module named" in text else None  # (prefilter: C speed)
    if not m:
        return None
    return Failure("no_torch", f"torch is not importable: {m.group(0).strip()[:300]}")


def _no_gpu(text: str) -> Failure | None:
    m = _NO_GPU.search(text)
    return Failure("no_gpu", m.group(0), _rank_of(text, m.start())) if m else None


def _oom(text: str) -> Failure | None:
    m = _OOM.search(text) if _may_hold(text, _OOM_WORDS) else None
    if not m:
        return None
    tail = text[m.end(): m.end() + 400]
    where = []
    gpu = _OOM_GPU.search(tail)
    if gpu:
        where.append(f"on GPU {gpu.group('gpu')} ({gpu.group('total')} total")
        free = _OOM_FREE.search(tail)
        where[-1] += f", {free.group('free')} free)" if free else ")"
    msg = f"CUDA out of memory: tried to allocate {m.group('size')}" + (
        " " + where[0] if where else "")
    return Failure("cuda_oom", msg, _rank_of(text, m.start()))


def _te(text: str) -> Failure | None:
    m = _TE_LINE.search(text) if _may_hold(text, _TE_WORDS) else None
    if not m:
        return None
    line = re.sub(r"^\[rank[0-9]+\]:\s*", "", m.group(0).strip())
    return Failure("te_import", f"TransformerEngine failed to import: {line[:500]}",
                   _rank_of(text, m.start()))


def _te_loader(text: str) -> Failure | None:
    loader = _TE_LOADER.search(text) if "in _load_library" in text else None  # (prefilter)
    if not loader:
        return None
    return Failure("te_import", f"TransformerEngine failed to import: its library loader raised "
                   f"{loader.group('exc')[:300]} ({loader.group('file')[:200]}, _load_library: "
                   "its shared object was not found or not loadable)",
                   _rank_of(text, loader.start()))


def _nccl(text: str) -> Failure | None:
    m = _NCCL_WATCHDOG.search(text)
    if m:
        ms = ascii_int(m.group("ms"))
        took = "an unreadable time" if ms is None else f"{ms / 1000:g} s"
        return Failure("nccl_timeout", f"NCCL collective timed out: {m.group('work')[:500]} ran "
                       f"for {took}", _rank_of(text, m.start()))
    stuck = _NCCL_STUCK.search(text) if "watchdog got stuck" in text else None  # (prefilter)
    beat = text.find(_HEARTBEAT)
    if stuck or beat >= 0:
        took = f" for {stuck.group('s')} s" if stuck else ""
        return Failure("nccl_timeout", f"NCCL watchdog stuck{took} without progress (the "
                       "heartbeat monitor timed out): a NCCL or CUDA call hung; the process is "
                       "terminated", _rank_of(text, stuck.start() if stuck else beat))
    m = _NCCL_ERROR.search(text)
    code = None
    if (first := _NCCL_CODE_WORD.search(text)) is not None:  # the code's line, then the rule
        code = _NCCL_CODE.search(text, text.rfind("\n", 0, first.start()) + 1)
    if not m and not code:
        return None
    parts = [m.group("what").strip()] if m else []
    if code:
        parts.append(f"{code.group('code')}: {code.group('what').strip()}".rstrip(": "))
    pos = m.start() if m else code.start()
    return Failure("nccl_error", "NCCL error: " + " / ".join(p for p in parts if p)[:500],
                   _rank_of(text, pos))


def _gloo(text: str) -> Failure | None:
    m = (_GLOO_TIMEOUT.search(text) if "imed out" in text or "monitoredBarrier" in text
         else None)
    if not m:
        return None
    return Failure("collective_timeout", f"collective timed out: {m.group('line').strip()[:300]}",
                   _rank_of(text, m.start()))


def _abort(text: str) -> Failure | None:
    m = (_ABORT.search(text) if "terminate called" in text or "SIGABRT" in text
         or "exitcode" in text else None)
    if not m:
        return None
    return Failure("abort_at_exit", f"a rank aborted (SIGABRT): {m.group(0).strip()}",
                   _rank_of(text, m.start()))


def _peer(text: str) -> Failure | None:
    m = _PEER.search(text)
    if not m:
        return None
    return Failure("peer_lost", f"a peer rank went away during a collective: {m.group(0)[:200]}",
                   _rank_of(text, m.start()))


def _exception(text: str) -> Failure | None:
    m = _last_exception(text)
    if m is None:
        return None
    return Failure("exception", m.group("line").strip()[:500], _rank_of(text, m.start()))


def _last_exception(text: str) -> re.Match[str] | None:
    """The last line _EXCEPTION matches whose exception is not torchrun's ChildFailedError: the
    lines holding `Error: ` or `Exception: ` (what every match holds), last first, each tried
    with the rule from its start (the rule matches whole lines only: the same lines as a
    `finditer` over the text, without a regex attempt at every line of a long log)."""
    end = len(text)
    while True:
        at = max(text.rfind("Error: ", 0, end), text.rfind("Exception: ", 0, end))
        if at < 0:
            return None
        start = text.rfind("\n", 0, at) + 1
        m = _EXCEPTION.match(text, start)
        if m is not None and "ChildFailedError" not in m.group("line"):
            return m
        end = start


_CLASSIFIERS = (_no_torch, _no_gpu, _te, _te_loader, _oom, _nccl, _gloo, _abort, _peer, _exception)
_ABORT_AT = _CLASSIFIERS.index(_abort)


def classify_failure(text: str) -> Failure:
    """The root cause named in a rank's exception text or a run's log (see KIND_ORDER)."""
    for classify in _CLASSIFIERS:
        failure = classify(text)
        if failure is not None:
            return failure
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return Failure("exception", lines[-1][:500] if lines else "no output")


@dataclass(frozen=True, slots=True)
class TrainStepOutput:
    """What one run printed: rank 0's result, the ranks' error lines, the root-cause failure
    (None when the step produced a result), and whether a rank aborted at exit."""

    result: JSONObject | None
    errors: list[JSONObject] = field(default_factory=list)
    failure: Failure | None = None
    aborted_at_exit: bool = False


#: What ends a line for str.splitlines (the result lines are read from the schema prefix to it).
_LINE_END = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _json_lines(text: str) -> list[JSONObject]:
    """The JSON records of the lines holding SCHEMA_PREFIX, each read from its first prefix to
    the line's end (found by `str.find`: no Python work for the other lines)."""
    records = []
    at = text.find(SCHEMA_PREFIX)
    while at >= 0:
        end_match = _LINE_END.search(text, at)
        end = len(text) if end_match is None else end_match.start()
        try:
            record = json.loads(text[at:end])
        except (ValueError, RecursionError):
            record = None
        if isinstance(record, dict):
            records.append(record)
        at = text.find(SCHEMA_PREFIX, end)
    return records


#: Error lines kept (one per rank is the normal case).
MAX_ERRORS = 1024


def parse_train_step(text: str | Input) -> TrainStepOutput:
    """Parse a run's stdout+stderr. Reads `{"schema": "gpu-preflight.train_step/v1", ...}`
    lines; without one, names the failure from the log (`CUDA out of memory. Tried to allocate
    2.00 GiB`, `Watchdog caught collective operation timeout: WorkNCCL(...)`, ...). An Input is
    streamed: the classifiers search it a chunk of lines at a time, each keeping its first
    finding (the exception its last), so the result is that of the whole text."""
    result: JSONObject | None = None
    errors: list[JSONObject] = []
    found: dict[int, Failure] = {}  # classifier index -> its finding
    aborted = False
    for chunk in _chunks(inside_transport(as_input(text))):  # a job log's wrappers off
        for record in _json_lines(chunk):
            if "error" not in record:
                result = record
            elif isinstance(record.get("error"), dict) and len(errors) < MAX_ERRORS:
                errors.append(record["error"])
        abort = None if aborted and _ABORT_AT in found else _abort(chunk)  # (one search)
        aborted = aborted or abort is not None
        for i, classify in enumerate(_CLASSIFIERS):
            if i in found and classify is not _exception:
                continue
            failure = abort if classify is _abort else classify(chunk)
            if failure is not None:
                found[i] = failure
    if result is not None:
        return TrainStepOutput(result, errors, None, aborted)
    failures = [
        Failure(str(e.get("kind", "exception")), str(e.get("message", ""))[:500],
                e.get("rank") if isinstance(e.get("rank"), int) else None)
        for e in errors
    ]
    if not failures:
        if not found:
            raise ParseError("no train_step result or error line, and no known failure "
                             "(OOM, NCCL, TE import, timeout, abort) in the output")
        failures = [found[min(found)]]
    failures.sort(key=lambda f: KIND_ORDER.index(f.kind) if f.kind in KIND_ORDER else 99)
    return TrainStepOutput(None, errors, failures[0], aborted)


def _chunks(source: Input) -> Iterator[str]:
    """The input as text pieces of whole lines (one per chunk the reader read)."""
    for batch in source.batches():
        yield "\n".join(batch)


def inspect_train_step(stream: TextIO | Input, *, profile: Profile | None = None) -> JSONObject:
    """`preflight inspect train-step LOG`: keys `result` (rank 0's JSON or null), `failure`
    ({kind, message, rank} or null), `errors` (each rank's error line), `aborted_at_exit`,
    `unread` (what the result lacks of what the training checks judge: unread_in_result)."""
    out = parse_train_step(as_input(stream))
    failure = out.failure
    return {
        "result": out.result,
        "failure": None if failure is None else {"kind": failure.kind, "message": failure.message,
                                                 "rank": failure.rank},
        "errors": out.errors,
        "aborted_at_exit": out.aborted_at_exit,
        "unread": [] if out.result is None else unread_in_result(
            out.result, out.result.get("world_size")),
    }


#: What the training checks (checks/test_training.py) read of rank 0's result, of each rank's
#: facts, and of the comparison they judge (the bf16 one beside an FP8 step, else the step's
#: own; judged from 2 ranks up).
RESULT_KEYS = ("path", "recipe", "recipe_note", "device_type", "te", "losses", "ranks",
               "step_time_s", "peak_mem_mib", "mem_kind")
RANK_KEYS = ("rank", "host", "device", "local_losses", "max_abs_vs_rank0", "checksum")
JUDGED_KEYS = ("loss_max_rel_diff", "update_rel_diff", "param_max_abs_diff", "tolerance")


def unread_in_result(result: Mapping[str, object], ranks_expected: object = None) -> list[str]:
    """What rank 0's result lacks of what the training checks judge (`losses`, `ranks[1].
    checksum`, `comparison.update_rel_diff`; with `ranks_expected`, `ranks: 1 of 2 reported`):
    each such check errors naming it (PF-TRAIN-001 counts the ranks against the launch), and
    `inspect train-step` lists it under `unread`, counting against the result's world_size."""
    missing = [k for k in RESULT_KEYS if k not in result]
    ranks = result.get("ranks")
    if isinstance(ranks, list):
        if isinstance(ranks_expected, int) and len(ranks) != ranks_expected:
            missing.append(f"ranks: {len(ranks)} of {ranks_expected} reported")
        missing += [f"ranks[{i}].{k}" for i, r in enumerate(ranks) for k in RANK_KEYS
                    if not isinstance(r, Mapping) or k not in r]
    size = result.get("world_size", 2)
    if not isinstance(size, int) or size >= 2:  # one rank: those checks are not applicable
        where, judged = (("comparison.", result["comparison"]) if result.get("comparison")
                         else ("", result))
        if isinstance(judged, Mapping):
            missing += [where + k for k in JUDGED_KEYS if k not in judged]
    return missing


INSPECT = {"train-step": inspect_train_step}
