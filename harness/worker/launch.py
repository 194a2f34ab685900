"""The launcher side of the distributed worker (runs in the pytest process, without torch):
the torchrun command, one launch, and what each part of it gave. A part that did not start
because an earlier one hung is started again in a fresh launch while time is left, so a hung
part costs only itself.

Time limits are derived from the parts (issue 18, finding 5): the launch gets the start-up
allowance (torchrun, a torch (+TE) import per rank, the process group's init) plus every
part's own limit; each part's limit is enforced by the worker's watchdog."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from harness.probes.train_step import TrainStepRun

from harness.base import proc
from harness.base.jsontypes import JSONObject
from harness.base.proc_result import ProcResult

__all__ = ["PartOutcome", "PartSpec", "Startup", "WorkerRun", "parse_parts", "run_worker",
           "startup_allowance_s", "torchrun_argv"]

WORKER_SCHEMA = "gpu-preflight.worker/v1"  # the same as harness.worker.parts (imports torch-free)
ROOT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True, slots=True)
class Startup:
    """Seconds allowed before the first part starts, by phase. Unmeasured on GPUs: torchrun
    ~1-2 s; `import torch` 1.8-2.5 s idle on this 2-core VM (engineering-notes.md), several
    times that with 8 ranks importing at once and TE on top; NCCL init 5-15 s on 8 ranks
    (issue 18; NCCL_DEBUG=INFO "Init COMPLETE" stamps on the first GPU run will settle it)."""

    launch_s: float = 5.0
    import_s: float = 20.0
    init_s: float = 30.0
    per_rank_s: float = 2.0
    """Added per rank (imports and rendezvous contend for the node's CPUs)."""


def startup_allowance_s(nproc: int, startup: Startup = Startup()) -> float:
    return startup.launch_s + startup.import_s + startup.init_s + startup.per_rank_s * nproc


@dataclass(frozen=True, slots=True)
class PartSpec:
    name: str
    timeout_s: float


@dataclass(frozen=True, slots=True)
class PartOutcome:
    """One part: `ok`, `error` (it ended with an error), `timeout` (its watchdog fired, or the
    launch was killed while it ran), `crashed` (the launch ended while it ran), `not-run`,
    `no-gpu` (not launched: no GPU is visible on a GPU profile; `message` says why)."""

    name: str
    status: str
    proc: ProcResult | None
    elapsed_s: float | None = None
    message: str = ""
    startup_s: float | None = None

    @property
    def output(self) -> str:
        return self.proc.output if self.proc is not None else ""


@dataclass(frozen=True, slots=True)
class WorkerRun:
    nproc: int
    parts: dict[str, PartOutcome]
    launches: tuple[ProcResult, ...] = field(default_factory=tuple)


def torchrun_argv(nproc: int, parts: Sequence[PartSpec], *, python: str | None = None,
                  extra: Sequence[str] = ()) -> list[str]:
    """`torchrun --standalone` (one node, loopback rendezvous) running the worker."""
    argv = [python or sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", "-m", "harness.worker",
            "--parts", ",".join(p.name for p in parts)]
    for part in parts:
        argv.append(f"--part-timeout={part.name}={part.timeout_s:g}")
    return argv + list(extra)


_DECODER = json.JSONDecoder()


def schema_records(text: str, schema: str = WORKER_SCHEMA) -> list[JSONObject]:
    """Every `{"schema": "<schema>", ...}` JSON line of a launch's output (a launcher prefix
    such as `[rank0]: ` before it is allowed)."""
    out = []
    for line in text.splitlines():
        at = line.find('{"schema": "' + schema + '"')
        if at < 0:
            continue
        try:  # raw_decode: whatever follows the record on its line is not part of it
            record, _ = _DECODER.raw_decode(line, at)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def parse_parts(result: ProcResult, names: Sequence[str]) -> dict[str, PartOutcome]:
    """Each part's outcome from the worker's marker lines (any rank's `end` that is not ok
    wins over rank 0's ok: one rank timing out is the part timing out)."""
    records = schema_records(result.output)
    startup = None
    ready = [r for r in records if r.get("part") == "worker" and r.get("event") == "ready"]
    if ready and ready[0].get("launched"):
        startup = max(float(r.get("wall", 0)) for r in ready) - float(ready[0]["launched"])
    out: dict[str, PartOutcome] = {}
    for name in names:
        mine = [r for r in records if r.get("part") == name]
        ends = [r for r in mine if r.get("event") == "end"]
        bad = [r for r in ends if r.get("status") != "ok"]
        if bad:
            first = next((r for r in bad if r.get("status") == "timeout"), bad[0])
            out[name] = PartOutcome(name, str(first.get("status")), result,
                                    first.get("elapsed_s"), str(first.get("message", "")),
                                    startup)
        elif ends:
            rank0 = next((r for r in ends if r.get("rank") == 0), ends[0])
            out[name] = PartOutcome(name, "ok", result, rank0.get("elapsed_s"), "", startup)
        elif any(r.get("event") == "start" for r in mine):
            status = "timeout" if result.timed_out else "crashed"
            out[name] = PartOutcome(name, status, result, None,
                                    f"part {name!r} was running when the launch ended: "
                                    f"{result.describe()}", startup)
    return out


def run_worker(
    nproc: int,
    parts: Sequence[PartSpec],
    *,
    env: Mapping[str, str] | None = None,
    extra: Sequence[str] = (),
    startup: Startup = Startup(),
    max_launches: int = 2,
    limit_s: float | None = None,
) -> WorkerRun:
    """Run the parts in one torchrun launch of `nproc` local ranks; parts that never started
    (an earlier part hung or crashed) get one more launch of their own. Each launch's bound is
    the start-up allowance and the parts' own limits, capped at `limit_s` when given (and, as
    every tool's, by the deadlines in force: harness.base.deadline)."""
    child = dict(os.environ if env is None else env)
    child["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, child.get("PYTHONPATH", "")) if p)
    child.setdefault("PYTHONUNBUFFERED", "1")
    child.setdefault("OMP_NUM_THREADS", "1")
    outcomes: dict[str, PartOutcome] = {}
    launches: list[ProcResult] = []
    todo = list(parts)
    while (todo or not launches) and len(launches) < max_launches:  # no part: init only
        timeout = startup_allowance_s(nproc, startup) + sum(p.timeout_s for p in todo)
        if limit_s is not None:
            timeout = min(timeout, limit_s)
        child["PREFLIGHT_WORKER_T0"] = repr(time.time())
        result = proc.run(torchrun_argv(nproc, todo, extra=extra), timeout_s=timeout, env=child)
        launches.append(result)
        got = parse_parts(result, [p.name for p in todo])
        outcomes.update(got)
        todo = [p for p in todo if p.name not in got]
        if not got:  # nothing started: the launch itself failed; another would too
            break
    for part in todo:
        last = launches[-1] if launches else None
        why = "the worker never reached it" if last is None else (
            f"not started: {last.describe()}")
        outcomes[part.name] = PartOutcome(part.name, "not-run", last, None, why)
    return WorkerRun(nproc, outcomes, tuple(launches))


def train_step_run(outcome: PartOutcome, nproc: int) -> TrainStepRun:
    """The step's `TrainStepRun` (harness.probes.train_step) from its part of a launch."""
    from harness.parsers import ParseError
    from harness.parsers.train_step import Failure, TrainStepOutput, parse_train_step
    from harness.probes.train_step import TrainStepRun

    result = outcome.proc if outcome.proc is not None else ProcResult(
        argv=(), returncode=None, error=outcome.message)
    if outcome.status == "no-gpu":  # never launched: the cause is the step's failure
        return TrainStepRun(result, TrainStepOutput(None, failure=Failure(
            "no_gpu", outcome.message)), None, nproc)
    unfinished = None if outcome.status in ("ok", "error") else (
        outcome.message or f"part 'train' {outcome.status}")
    try:
        output, error = parse_train_step(outcome.output), None
    except ParseError as exc:
        output, error = None, str(exc)
    return TrainStepRun(result, output, error, nproc, part_s=outcome.elapsed_s,
                        startup_s=outcome.startup_s, not_finished=unfinished)


def run_train_step(nproc: int, *, timeout_s: float, env: Mapping[str, str] | None = None,
                   device: str = "auto", pg_timeout_s: float | None = None,
                   extra: Sequence[str] = (), **options: object) -> TrainStepRun:
    """The training step alone in one worker launch (`timeout_s`: the part's own limit);
    `options` are the step's command-line options (`fault="nan,rank=1"`, `te_recipe=...`)."""
    argv = [f"--device={device}", f"--pg-timeout-s={pg_timeout_s or max(5.0, timeout_s / 2):g}"]
    for key, value in options.items():
        if value is True:
            argv.append(f"--{key.replace('_', '-')}")
        elif value not in (None, False):
            argv.append(f"--{key.replace('_', '-')}={value}")
    run = run_worker(nproc, [PartSpec("train", timeout_s)], env=env, extra=[*argv, *extra])
    return train_step_run(run.parts["train"], nproc)
