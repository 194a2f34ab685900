"""The worker's parts and its torchrun entry point (`python -m harness.worker --parts ...`).

One launch per node, one process group (`group.init_group`), then each requested part in
order. Every part prints a `start` and an `end` line (`{"schema": WORKER_SCHEMA, "part": ...}`)
and its own result line (`{"torch_bench": ...}`, `{"schema": "gpu-preflight.train_step/v1",
...}`, `{"schema": "gpu-preflight.compute/v1", ...}`). Each part runs under its own watchdog:
past its timeout the rank prints `status: timeout` for that part and exits at once (the group
cannot be trusted after a hang), so a hung part is named and every part before it is already
reported; the launcher starts the parts that did not run in a fresh launch.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from harness.base.jsontypes import JSONObject, JSONValue
from harness.base.settings import get_float, get_str
from harness.probes import train_step as ts
from harness.worker import links, sdc

if TYPE_CHECKING:  # torch is imported inside the functions
    import torch

__all__ = ["HANG_ENV", "PARTS", "WORKER_SCHEMA", "emit", "first_collective", "main",
           "parser"]

WORKER_SCHEMA = "gpu-preflight.worker/v1"
#: Parts, in the order they run: compute first (each rank alone on its GPU), the SDC
#: cross-check (the same deterministic work on every rank: harness.worker.sdc), the links (host
#: and peer copies, small-message latency: harness.worker.links), then the collectives, then
#: the training step (the longest, and the one most likely to hang).
PARTS = ("compute", "sdc", "links", "bandwidth", "train")
#: Test hook: the named part sleeps at its start, as a hung part would (on every rank).
HANG_ENV = "PREFLIGHT_WORKER_HANG"


def emit(record: JSONObject) -> None:
    """One JSON line in ONE write to fd 1. Every rank shares the launch's stdout pipe, and under
    PYTHONUNBUFFERED `print` writes the text and its newline separately: another rank's line
    could land between them and glue two records together (seen under load). A pipe write of
    at most PIPE_BUF (4096) bytes is atomic; the records are well under it."""
    sys.stdout.flush()
    data = (json.dumps(record) + "\n").encode()
    while data:
        data = data[os.write(1, data):]


def _mark(part: str, event: str, rank: int, **extra: JSONValue) -> None:
    emit({"schema": WORKER_SCHEMA, "part": part, "event": event, "rank": rank, **extra})


def first_collective(device: torch.device, timeout_s: float) -> None:
    """One 4-byte all_reduce, waited for within `timeout_s`: the start-up's last phase (NCCL
    connects its channels at the first collective; `device_id` made the communicator at init)."""
    import torch
    import torch.distributed as dist

    from harness.worker.bandwidth import wait_bounded

    one = torch.ones(1, device=device)
    wait_bounded(dist.all_reduce(one, async_op=True), timeout_s, "the first all_reduce")
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m harness.worker", description=__doc__)
    p.add_argument("--parts", default="bandwidth,train",
                   help=f"comma-separated parts to run, of {', '.join(PARTS)}")
    p.add_argument("--part-timeout", action="append", default=[], metavar="PART=SECONDS",
                   help="a part's own time limit (default 120 s)")
    p.add_argument("--bw-sizes", default="1M,16M", help="all_reduce sizes (1M, 256M, 1G)")
    p.add_argument("--bw-warmup", type=int, default=2)
    p.add_argument("--bw-iters", type=int, default=5)
    p.add_argument("--bw-dtype", default="float32")
    p.add_argument("--bw-corrupt-rank", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--compute-seconds", type=float, default=3.0,
                   help="how long each GPU multiplies (long enough to see clocks drop)")
    p.add_argument("--train-run", action="append", default=[], metavar="RECIPE:SEED[:FAULT]",
                   help="run the step once per option instead of once (scripts/device-check: "
                   "every recipe x seeds, and a perturbed run); RECIPE is a TE recipe or fp32; "
                   "on CPU fp32 or bf16")
    ts.add_step_arguments(p)
    links.add_arguments(p)
    sdc.add_arguments(p)
    return p


def part_timeouts(specs: Sequence[str], default: float = 120.0) -> dict[str, float]:
    """`train=90` ... -> {part: seconds}, every part of PARTS given a value."""
    out = dict.fromkeys(PARTS, default)
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or name not in PARTS:
            raise ValueError(f"--part-timeout {spec!r}: expected PART=SECONDS, PART in {PARTS}")
        out[name] = float(value)
    return out


class _Watchdog:
    """Ends this rank when a part overruns: prints the part's timeout line, then os._exit.
    (A hung collective cannot be interrupted from Python; only leaving the process ends it.)"""

    def __init__(self, part: str, rank: int, timeout_s: float, started: float,
                 exit_fn: Callable[[int], object] = os._exit) -> None:
        self._timer = threading.Timer(timeout_s, self._fire, args=(part, rank, timeout_s,
                                                                   started, exit_fn))
        self._timer.daemon = True

    @staticmethod
    def _fire(part: str, rank: int, timeout_s: float, started: float,
              exit_fn: Callable[[int], object]) -> None:
        _mark(part, "end", rank, status="timeout", timeout_s=timeout_s,
              elapsed_s=round(time.perf_counter() - started, 3),
              message=f"part {part!r} did not finish within {timeout_s:g} s on rank {rank}")
        sys.stderr.flush()
        exit_fn(3)

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def _bandwidth(args: argparse.Namespace, device: torch.device, rank: int) -> str:
    from harness.worker import bandwidth as tb

    result = tb.allreduce_bench(
        sizes_bytes=[tb.parse_size(s) for s in args.bw_sizes.split(",") if s.strip()],
        warmup=args.bw_warmup, iters=args.bw_iters, timeout_s=args.pg_timeout_s,
        device=device, corrupt_rank=args.bw_corrupt_rank, dtype=args.bw_dtype)
    if rank == 0 or result.errors:
        emit({tb.RESULT_KEY: result.to_dict()})
    if result.errors:
        return BROKEN  # a collective timed out or failed
    return OK if result.ok else FAILED  # wrong data: measured, the group is intact


def _train(args: argparse.Namespace, device: torch.device, rank: int) -> str:
    from harness.worker import train as train_worker

    if not args.train_run:
        result = train_worker.step(args, ts.parse_fault(args.fault), device)
        if result is not None:
            emit({"schema": ts.SCHEMA, **result})
        return OK
    for spec in args.train_run:  # one result line per run, each naming its run
        run = ts.parse_train_run(spec)
        result = train_worker.step(ts.run_arguments(args, run, device.type), run.fault, device)
        if result is not None:
            emit({"schema": ts.SCHEMA, "run": spec, **result})
    return OK


def _compute(args: argparse.Namespace, device: torch.device, rank: int) -> str:
    from harness.worker import compute

    compute.run_part(device, seconds=args.compute_seconds, emit=emit)
    return OK


def _sdc(args: argparse.Namespace, device: torch.device, rank: int) -> str:
    sdc.run_part(args, device, rank, emit=emit)
    return OK


def _links(args: argparse.Namespace, device: torch.device, rank: int) -> str:
    return OK if links.run_part(args, device, emit=emit) else BROKEN


#: What a part's runner returns: it ran and its figures are good; it ran and measured a fault
#: (the group is intact: the next part runs); the group may be broken (the rank leaves).
OK, FAILED, BROKEN = "ok", "failed", "broken"

RUNNERS: dict[str, Callable[[argparse.Namespace, torch.device, int], str]] = {
    "compute": _compute, "sdc": _sdc, "links": _links, "bandwidth": _bandwidth, "train": _train,
}


def _failed(part: str, rank: int, exc: BaseException) -> None:
    """A part raised: its own error line (the train step's schema for the step), then `end`."""
    text = f"{type(exc).__name__}: {exc}"
    if part == "train":
        from harness.parsers.train_step import classify_failure

        failure = classify_failure(text)
        emit({"schema": ts.SCHEMA, "error": {"rank": rank, "kind": failure.kind,
                                             "message": failure.message,
                                             "exception": text[:2000]}})
    traceback.print_exc()
    _mark(part, "end", rank, status="error", message=text[:500])


@contextlib.contextmanager
def imports_without_gc() -> Iterator[None]:
    """The rank's heavy imports (torch, and FSDP2 with the `torch._dynamo` chain its first
    `fully_shard` pulls in) with the cyclic GC off, then one full collection and `gc.freeze`.

    Importing them builds hundreds of thousands of objects; with the GC on, each 700 new ones
    start a collection, and the older generations are walked again and again: ~690 collections,
    0.45 of a rank's ~2.3 CPU s on this VM (measured with gc.callbacks; `import torch` alone
    0.11 s of 1.1). One collection at the end frees the imports' own garbage cycles, and
    freezing what is left keeps the later collections of the checks' work from walking it
    again (the same as the check session's freeze after collection, harness.plugin)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.freeze()
        if enabled:
            gc.enable()


def prefetch_train_imports(fsdp: Callable[[], object]) -> None:
    """FSDP2 (`fsdp`: harness.worker.group.fsdp_api) and the `torch._dynamo` chain its first
    `fully_shard` imports, loaded among the rank's imports (imports_without_gc). One that cannot
    be imported is left to the train part, which names it as its own failure: the other parts
    still run (a failed import here would fail every part of the rank)."""
    with contextlib.suppress(ImportError):
        fsdp()
        import torch._dynamo  # noqa: F401


def run(args: argparse.Namespace, *, exit_fn: Callable[[int], object] = os._exit) -> int:
    """One rank's life: one init, every part under its watchdog, barrier, destroy, exit.

    Exit is `os._exit` after flushing (unless `--teardown normal`): gloo/FSDP2 ranks sometimes
    abort in interpreter shutdown after a clean destroy (engineering-notes.md). After a failed
    part the rank leaves at once: no barrier (a peer may be gone)."""
    launched = get_float("PREFLIGHT_WORKER_T0") or 0.0
    start = time.perf_counter()
    rank = int(os.environ.get("RANK", "0"))
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(f"harness.worker: unknown parts {unknown}; known: {', '.join(PARTS)}",
              file=sys.stderr)
        return 2
    limits = part_timeouts(args.part_timeout)
    code = 0
    try:
        with imports_without_gc():
            import torch  # noqa: F401  (its import is start-up time, measured below)

            from harness.worker import train as train_worker
            from harness.worker.group import fsdp_api, init_group

            if "train" in parts:
                prefetch_train_imports(fsdp_api)

        imported = time.perf_counter()
        device = train_worker.device_for(args.device)
        init_group("nccl" if device.type == "cuda" else "gloo", timeout_s=args.pg_timeout_s,
                   device=device if device.type == "cuda" else None)
        initialised = time.perf_counter()
        first_collective(device, args.pg_timeout_s)
    except Exception as exc:
        for part in parts:
            _failed(part, rank, exc)
        exit_fn(1)
        return 1
    _mark("worker", "ready", rank, wall=time.time(), launched=launched,
          import_s=round(imported - start, 3), init_s=round(initialised - imported, 3),
          first_collective_s=round(time.perf_counter() - initialised, 3))
    hang = get_str(HANG_ENV) or ""
    for part in parts:
        began = time.perf_counter()
        _mark(part, "start", rank)
        try:
            with _Watchdog(part, rank, limits[part], began, exit_fn):
                if part == hang:
                    time.sleep(10 * limits[part])
                outcome = RUNNERS[part](args, device, rank)
        except Exception as exc:
            _failed(part, rank, exc)
            outcome = BROKEN
        else:
            _mark(part, "end", rank, status="ok" if outcome == OK else "error",
                  elapsed_s=round(time.perf_counter() - began, 3))
        if outcome != OK:
            code = 1
        if outcome == BROKEN:  # the group may be broken: a barrier could wait forever
            break
    if code == 0:
        import torch.distributed as dist

        try:
            dist.barrier()
            dist.destroy_process_group()
        except Exception:
            traceback.print_exc()
            code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    if args.teardown == "normal" and code == 0:
        return code
    exit_fn(code)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        ts.parse_fault(args.fault)
        part_timeouts(args.part_timeout)
        for spec in args.train_run:
            ts.parse_train_run(spec)
    except ValueError as exc:
        print(f"harness.worker: {exc}", file=sys.stderr)
        return 2
    return run(args)
